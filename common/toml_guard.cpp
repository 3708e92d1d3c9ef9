#include "common/toml_guard.hpp"

#include <cstdint>
#include <cstdio>

namespace garm_edge {
namespace {

/// Number of continuation bytes a UTF-8 lead byte announces (0 for ASCII and stray bytes).
int continuation_bytes(unsigned char lead) {
  if (lead >= 0xF0) {
    return 3;
  }
  if (lead >= 0xE0) {
    return 2;
  }
  return lead >= 0xC0 ? 1 : 0;
}

}  // namespace

bool toml_plusplus_cannot_classify(char32_t code_point) {
  // Mirrors toml++ 3.3's generated table: 64 slices of 0x3FA code points from U+00A0, of
  // which slices 0, 5, 7, 11 and 63 are examined further and only 5 and 7 have a case.
  if (code_point < U'\xA0' || code_point > U'\uFEFF') {
    return false;
  }
  const auto slice = (static_cast<std::uint64_t>(code_point) - 0xA0U) / 0x3FAU;
  if (((std::uint64_t{1} << slice) & 0x7FFFFFFFFFFFF75EULL) != 0) {
    return false;
  }
  if (code_point == U'\xA0' || code_point == U'\u3000' || code_point == U'\uFEFF') {
    return false;
  }
  return slice != 5 && slice != 7;
}

std::optional<UnreadableTomlCharacter> find_unreadable_toml_character(std::string_view toml) {
  std::size_t line = 1;
  for (std::size_t i = 0; i < toml.size(); ++i) {
    const auto lead = static_cast<unsigned char>(toml[i]);
    if (lead == '\n') {
      ++line;
      continue;
    }
    const int more = continuation_bytes(lead);
    if (more == 0) {
      continue;
    }
    char32_t code_point = lead & (0x3FU >> more);
    std::size_t next = i + 1;
    for (; next < toml.size() && next <= i + static_cast<std::size_t>(more); ++next) {
      const auto byte = static_cast<unsigned char>(toml[next]);
      if ((byte & 0xC0U) != 0x80U) {
        break;
      }
      code_point = (code_point << 6U) | (byte & 0x3FU);
    }
    if (toml_plusplus_cannot_classify(code_point)) {
      return UnreadableTomlCharacter{line, code_point};
    }
    i = next - 1;
  }
  return std::nullopt;
}

std::string describe_unreadable_toml_character(const std::string& source,
                                               const UnreadableTomlCharacter& found) {
  char code[16];
  std::snprintf(code, sizeof code, "%04X", static_cast<unsigned>(found.code_point));
  return source + ":" + std::to_string(found.line) + ": character U+" + code +
         " cannot be read by this build's TOML parser (toml++ 3.3), not even in a comment; "
         "write it as \\u" +
         code + " inside a double-quoted string, or use ASCII";
}

}  // namespace garm_edge
