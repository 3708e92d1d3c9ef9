#include "common/toml_reader.hpp"

#include <fstream>
#include <sstream>

#include "common/text.hpp"
#include "common/toml_guard.hpp"

namespace garm_edge {

std::string read_config_file(const std::filesystem::path& path, std::string_view what) {
  std::ifstream file(path, std::ios::binary);
  if (!file) {
    throw ConfigError(path.string() + ": cannot open the " + std::string(what));
  }
  std::ostringstream text;
  text << file.rdbuf();
  return text.str();
}

toml::table parse_toml_document(std::string_view text, const std::string& source) {
  if (const auto found = find_unreadable_toml_character(text)) {
    throw ConfigError(describe_unreadable_toml_character(source, *found));
  }
  try {
    return toml::parse(text, source);
  } catch (const toml::parse_error& e) {
    std::ostringstream message;
    message << source << ":" << e.source().begin.line << ":" << e.source().begin.column << ": "
            << e.description();
    throw ConfigError(message.str());
  }
}

void TomlTableReader::fail(const toml::node* node, const std::string& problem) const {
  std::ostringstream message;
  message << source_;
  if (node != nullptr && node->source().begin.line > 0) {
    message << ":" << node->source().begin.line << ":" << node->source().begin.column;
  }
  message << ": " << where_ << ": " << problem;
  throw ConfigError(message.str());
}

const toml::node* TomlTableReader::node(std::string_view key) {
  used_.insert(std::string(key));
  return table_.get(key);
}

std::optional<std::string> TomlTableReader::string(std::string_view key) {
  const auto* value = node(key);
  if (value == nullptr) {
    return std::nullopt;
  }
  if (!value->is_string()) {
    fail(value, std::string(key) + " must be a string");
  }
  auto text = value->value<std::string>().value_or("");
  if (!is_plain_text(text)) {
    fail(value, std::string(key) + " must be UTF-8 text without control characters");
  }
  return text;
}

std::string TomlTableReader::required_string(std::string_view key) {
  auto text = string(key);
  if (!text || text->empty()) {
    fail(table_.get(key), std::string(key) + " is required");
  }
  return *text;
}

std::filesystem::path TomlTableReader::absolute_path(std::string_view key, bool required) {
  const auto text = required ? required_string(key) : string(key).value_or("");
  if (!text.empty() && text.front() != '/') {
    fail(node(key), std::string(key) + " must be an absolute path");
  }
  return text;
}

std::optional<double> TomlTableReader::number(std::string_view key, double min, double max) {
  const auto* value = node(key);
  if (value == nullptr) {
    return std::nullopt;
  }
  if (!value->is_number()) {
    fail(value, std::string(key) + " must be a number");
  }
  const auto number = value->value<double>().value_or(0.0);
  if (!(number >= min && number <= max)) {  // also refuses nan
    std::ostringstream range;
    range << key << " must be between " << min << " and " << max;
    fail(value, range.str());
  }
  return number;
}

std::optional<bool> TomlTableReader::boolean(std::string_view key) {
  const auto* value = node(key);
  if (value == nullptr) {
    return std::nullopt;
  }
  if (!value->is_boolean()) {
    fail(value, std::string(key) + " must be true or false");
  }
  return value->value<bool>();
}

std::vector<std::string> TomlTableReader::string_list(std::string_view key) {
  std::vector<std::string> items;
  const auto* value = node(key);
  if (value == nullptr) {
    return items;
  }
  if (!value->is_array()) {
    fail(value, std::string(key) + " must be a list of strings");
  }
  for (const auto& item : *value->as_array()) {
    const auto text = item.value<std::string>();
    if (!text || !is_plain_text(*text)) {
      fail(&item, std::string(key) + ": each entry must be UTF-8 text without control characters");
    }
    items.push_back(*text);
  }
  return items;
}

const toml::table* TomlTableReader::table(std::string_view key) {
  const auto* value = node(key);
  if (value == nullptr) {
    return nullptr;
  }
  if (!value->is_table()) {
    fail(value, "[" + std::string(key) + "] must be a table");
  }
  return value->as_table();
}

const toml::array* TomlTableReader::array_of_tables(std::string_view key) {
  const auto* value = node(key);
  if (value == nullptr) {
    return nullptr;
  }
  if (!value->is_array_of_tables()) {
    fail(value, std::string(key) + " must be an array of tables ([[" + std::string(key) + "]])");
  }
  return value->as_array();
}

void TomlTableReader::reject_unknown_keys() const {
  for (const auto& [key, value] : table_) {
    if (used_.count(std::string(key.str())) == 0) {
      fail(&value, "unknown key \"" + printable_excerpt(key.str()) + "\"");
    }
  }
}

}  // namespace garm_edge
