// Quoting for the shells values cross into. Single-quoted forms are used because neither shell
// expands anything inside them: only the quote character itself needs care.

#include <algorithm>
#include <string>
#include <string_view>

#include "userdata/internal.hpp"
#include "userdata/userdata.hpp"
#include "wire/base64.hpp"

namespace garm_edge::userdata {
namespace {

void reject_nul(std::string_view value, std::string_view where) {
  if (value.find('\0') != std::string_view::npos) {
    throw UserDataError(std::string(where) + ": a value contains a NUL byte");
  }
}

/// PowerShell ends a single-quoted string at U+2018, U+2019, U+201A and U+201B as well as at
/// ASCII ', and reads each doubled as one literal character. Their UTF-8 forms are E2 80 98..9B.
std::size_t powershell_quote_length(std::string_view value, std::size_t at) {
  if (value[at] == '\'') {
    return 1;
  }
  const auto byte = [&](std::size_t k) { return static_cast<unsigned char>(value[at + k]); };
  const bool is_unicode_quote = value.size() - at >= 3 && byte(0) == 0xE2 && byte(1) == 0x80 &&
                                byte(2) >= 0x98 && byte(2) <= 0x9B;
  return is_unicode_quote ? 3 : 0;
}

}  // namespace

std::string shell_quote(std::string_view value) {
  reject_nul(value, "shell value");
  std::string out = "'";
  for (char c : value) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  out += '\'';
  return out;
}

std::string powershell_quote(std::string_view value) {
  reject_nul(value, "PowerShell value");
  std::string out = "'";
  for (std::size_t i = 0; i < value.size();) {
    if (const auto quote_length = powershell_quote_length(value, i)) {
      const auto quote = value.substr(i, quote_length);
      out.append(quote).append(quote);
      i += quote_length;
    } else {
      out += value[i++];
    }
  }
  out += '\'';
  return out;
}

namespace detail {

std::string powershell_string(std::string_view value) {
  const bool is_ascii = std::all_of(value.begin(), value.end(),
                                    [](char c) { return static_cast<unsigned char>(c) < 0x80; });
  if (is_ascii) {
    return powershell_quote(value);
  }
  reject_nul(value, "PowerShell value");
  return "([System.Text.Encoding]::UTF8.GetString([System.Convert]::FromBase64String('" +
         wire::base64_encode(value) + "')))";
}

}  // namespace detail
}  // namespace garm_edge::userdata
