#include "common/text.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace garm_edge {
namespace {

/// Length of the UTF-8 sequence starting with `lead`, or 0 when `lead` cannot start one.
std::size_t utf8_sequence_length(unsigned char lead) {
  if (lead < 0x80)
    return 1;
  if (lead >= 0xc2 && lead <= 0xdf)
    return 2;
  if (lead >= 0xe0 && lead <= 0xef)
    return 3;
  if (lead >= 0xf0 && lead <= 0xf4)
    return 4;
  return 0;
}

bool is_valid_sequence(std::string_view text, std::size_t start, std::size_t length) {
  if (start + length > text.size()) {
    return false;
  }
  for (std::size_t k = 1; k < length; ++k) {
    if ((static_cast<unsigned char>(text[start + k]) & 0xc0) != 0x80) {
      return false;
    }
  }
  const auto lead = static_cast<unsigned char>(text[start]);
  const auto second = length > 1 ? static_cast<unsigned char>(text[start + 1]) : 0;
  if (lead == 0xe0 && second < 0xa0)
    return false;  // overlong
  if (lead == 0xed && second >= 0xa0)
    return false;  // UTF-16 surrogates
  if (lead == 0xf0 && second < 0x90)
    return false;  // overlong
  if (lead == 0xf4 && second >= 0x90)
    return false;  // above U+10FFFF
  if (lead == 0xc2 && second < 0xa0)
    return false;  // C1 control characters
  if (lead == 0xef && second == 0xbf && static_cast<unsigned char>(text[start + 2]) >= 0xbe) {
    return false;  // U+FFFE and U+FFFF, which XML 1.0 forbids
  }
  return true;
}

}  // namespace

bool is_plain_text(std::string_view value) {
  for (std::size_t i = 0; i < value.size();) {
    const auto c = static_cast<unsigned char>(value[i]);
    if (c < 0x20 || c == 0x7f) {
      return false;
    }
    const std::size_t length = utf8_sequence_length(c);
    if (length == 0 || !is_valid_sequence(value, i, length)) {
      return false;
    }
    i += length;
  }
  return true;
}

std::string printable_excerpt(std::string_view value, std::size_t max_bytes) {
  std::string out;
  std::size_t i = 0;
  // Whole characters only, and only valid ones: the excerpt may end up in JSON, whose
  // serializer refuses invalid UTF-8, or in a log line.
  while (i < value.size()) {
    const auto lead = static_cast<unsigned char>(value[i]);
    const std::size_t length = utf8_sequence_length(lead);
    const bool valid = length != 0 && is_valid_sequence(value, i, length);
    const std::size_t taken = valid ? length : 1;
    if (i + taken > max_bytes) {
      break;
    }
    if (lead == '\n' || lead == '\r' || lead == '\t') {
      out += ' ';  // a multi-line message from libvirt or QEMU stays readable on one line
    } else if (!valid || lead < 0x20 || lead == 0x7f) {
      out += '?';
    } else {
      out.append(value.substr(i, length));
    }
    i += taken;
  }
  if (i < value.size()) {
    out += "...";
  }
  return out;
}

std::string concat(std::initializer_list<std::string_view> parts) {
  std::size_t size = 0;
  for (const auto part : parts) {
    size += part.size();
  }
  std::string text;
  text.reserve(size);
  for (const auto part : parts) {
    text += part;
  }
  return text;
}

std::string ascii_lower(std::string_view value) {
  std::string lower(value);
  for (auto& c : lower) {
    if (c >= 'A' && c <= 'Z') {
      c = static_cast<char>(c - 'A' + 'a');
    }
  }
  return lower;
}

std::string errno_text() {
  return std::strerror(errno);
}

}  // namespace garm_edge
