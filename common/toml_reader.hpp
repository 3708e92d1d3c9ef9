#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <toml++/toml.h>

#include "common/config_error.hpp"

namespace garm_edge {

/// The one TOML reading layer of the agent's and the provider's configs. Reads `path` whole;
/// throws ConfigError naming `what` when it cannot be opened.
std::string read_config_file(const std::filesystem::path& path, std::string_view what);

/// Parses `text` as TOML, refusing first what toml++ 3.3 cannot read safely (see
/// toml_guard.hpp). Throws ConfigError "source:line:column: problem".
toml::table parse_toml_document(std::string_view text, const std::string& source);

/// Reads one TOML table, remembering which keys were used so the rest can be reported. Every
/// failure is a ConfigError "source:line:column: where: problem".
class TomlTableReader {
 public:
  TomlTableReader(const toml::table& table, std::string source, std::string where)
      : table_(table), source_(std::move(source)), where_(std::move(where)) {}

  [[noreturn]] void fail(const toml::node* node, const std::string& problem) const;
  /// The key's node, if present; the key counts as known from now on.
  const toml::node* node(std::string_view key);
  /// Strings are UTF-8 text without control characters, or refused.
  std::optional<std::string> string(std::string_view key);
  std::string required_string(std::string_view key);
  /// An absolute path (or, when not `required`, an empty one when absent).
  std::filesystem::path absolute_path(std::string_view key, bool required);
  /// An integer or a float within [min, max].
  std::optional<double> number(std::string_view key, double min, double max);
  std::optional<bool> boolean(std::string_view key);
  /// A list of strings, each UTF-8 text without control characters; empty when absent.
  std::vector<std::string> string_list(std::string_view key);
  const toml::table* table(std::string_view key);
  const toml::array* array_of_tables(std::string_view key);
  /// Fails on the first key nothing asked for: a typo must not fall back to a default.
  void reject_unknown_keys() const;

  template <class Int>
  std::optional<Int> integer(std::string_view key, std::int64_t min, std::int64_t max) {
    const auto* value = node(key);
    if (value == nullptr) {
      return std::nullopt;
    }
    if (!value->is_integer()) {
      fail(value, std::string(key) + " must be an integer");
    }
    const auto number = value->value<std::int64_t>().value_or(0);
    if (number < min || number > max) {
      fail(value, std::string(key) + " must be between " + std::to_string(min) + " and " +
                      std::to_string(max));
    }
    return static_cast<Int>(number);
  }

  const std::string& source() const { return source_; }

 private:
  const toml::table& table_;
  std::string source_;
  std::string where_;
  std::set<std::string> used_;
};

}  // namespace garm_edge
