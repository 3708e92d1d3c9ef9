#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/text.hpp"
#include "wire/enums.hpp"
#include "wire/error.hpp"

namespace garm_edge::wire {

/// Reads the fields of one JSON object the way Go's encoding/json fills a struct: unknown keys
/// are ignored, a missing key or `null` leaves the zero value, and a value of the wrong type is
/// an error that names the field by its path (e.g. `tools[1].download_url`).
class ObjectReader {
 public:
  ObjectReader(const nlohmann::json& object, std::string path);

  /// A string that must be present and non-empty.
  std::string required_string(std::string_view key) const;
  std::string string_or_empty(std::string_view key) const;
  std::optional<std::string> optional_string(std::string_view key) const;
  bool boolean(std::string_view key) const;
  /// A non-negative integer; 0 when absent or null.
  std::uint64_t unsigned_integer(std::string_view key) const;
  std::optional<std::vector<std::string>> string_list(std::string_view key) const;
  /// A Go []byte: base64 text or null.
  std::optional<std::string> base64_bytes(std::string_view key) const;

  template <class Enum>
  std::optional<Enum> enum_value(std::string_view key) const {
    const auto text = string_or_empty(key);
    if (text.empty()) {
      return std::nullopt;
    }
    auto parsed = parse_enum<Enum>(text);
    if (!parsed) {
      throw WireError(path_of(key), "unknown value \"" + printable_excerpt(text) + "\"");
    }
    return parsed;
  }

  /// The raw member, or nullptr when the key is absent.
  const nlohmann::json* find(std::string_view key) const;
  std::string path_of(std::string_view key) const;

 private:
  const nlohmann::json& object_;
  std::string path_;
};

/// JSON text exactly as Go's encoding/json writes it: compact, with <, >, &, U+2028 and U+2029
/// escaped as \u sequences (Go's HTML-safe default), so output matches garm byte for byte.
std::string to_go_json_text(const nlohmann::ordered_json& value);

/// garm's documents are a few levels deep; pool extra specs are the operator's own JSON.
inline constexpr std::size_t kMaxJsonDepth = 32;

/// Whether no array or object in `text` opens deeper than `max_depth`. A scan of the text, run
/// before parsing: a parser holds every open level in memory (500,000 `[` cost 100 MB).
bool json_depth_within(std::string_view text, std::size_t max_depth = kMaxJsonDepth);

/// Parses JSON text no deeper than kMaxJsonDepth, turning a syntax error into a WireError about
/// `what`.
nlohmann::json parse_json_text(std::string_view text, const std::string& what);

}  // namespace garm_edge::wire
