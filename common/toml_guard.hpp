#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace garm_edge {

/// Where a TOML text holds a character that toml++ 3.3 (Debian 12) cannot classify.
struct UnreadableTomlCharacter {
  std::size_t line = 0;  // 1-based
  char32_t code_point = 0;
};

/// True for the code points on which toml++ 3.3's is_non_ascii_horizontal_whitespace reaches
/// __builtin_unreachable (U+00A1..U+0499, U+2C5E..U+3057 and U+FB26..U+FEFE, minus U+3000):
/// its generated lookup table misses them. toml++ runs that test wherever it scans for
/// whitespace, including inside bare values and after a line-ending backslash, so no cheaper
/// rule than "not anywhere" is safe. Found by fuzzing.
bool toml_plusplus_cannot_classify(char32_t code_point);

/// The first such character in `toml`, if any. UTF-8 is decoded leniently (a malformed
/// sequence still yields its value) so that nothing toml++ might decode slips through.
std::optional<UnreadableTomlCharacter> find_unreadable_toml_character(std::string_view toml);

/// "source:LINE: character U+XXXX ..." with the way around it.
std::string describe_unreadable_toml_character(const std::string& source,
                                               const UnreadableTomlCharacter& found);

}  // namespace garm_edge
