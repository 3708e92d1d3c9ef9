#include "wire/json_fields.hpp"

#include "wire/base64.hpp"

namespace garm_edge::wire {
namespace {

std::string type_name(const nlohmann::json& value) {
  return value.type_name();
}

}  // namespace

ObjectReader::ObjectReader(const nlohmann::json& object, std::string path)
    : object_(object), path_(std::move(path)) {
  if (!object_.is_object()) {
    throw WireError(path_.empty() ? "(document)" : path_,
                    "expected a JSON object, got " + type_name(object_));
  }
}

std::string ObjectReader::path_of(std::string_view key) const {
  return path_.empty() ? std::string(key) : path_ + "." + std::string(key);
}

const nlohmann::json* ObjectReader::find(std::string_view key) const {
  const auto it = object_.find(key);
  return it == object_.end() ? nullptr : &*it;
}

std::string ObjectReader::required_string(std::string_view key) const {
  const auto* value = find(key);
  if (value == nullptr || value->is_null()) {
    throw WireError(path_of(key), "required field is missing");
  }
  auto text = string_or_empty(key);
  if (text.empty()) {
    throw WireError(path_of(key), "required field is empty");
  }
  return text;
}

std::string ObjectReader::string_or_empty(std::string_view key) const {
  return optional_string(key).value_or(std::string());
}

std::optional<std::string> ObjectReader::optional_string(std::string_view key) const {
  const auto* value = find(key);
  if (value == nullptr || value->is_null()) {
    return std::nullopt;
  }
  if (!value->is_string()) {
    throw WireError(path_of(key), "expected a string, got " + type_name(*value));
  }
  return value->get<std::string>();
}

bool ObjectReader::boolean(std::string_view key) const {
  const auto* value = find(key);
  if (value == nullptr || value->is_null()) {
    return false;
  }
  if (!value->is_boolean()) {
    throw WireError(path_of(key), "expected a boolean, got " + type_name(*value));
  }
  return value->get<bool>();
}

std::uint64_t ObjectReader::unsigned_integer(std::string_view key) const {
  const auto* value = find(key);
  if (value == nullptr || value->is_null()) {
    return 0;
  }
  if (!value->is_number_unsigned()) {
    throw WireError(path_of(key), "expected a non-negative integer, got " + type_name(*value));
  }
  return value->get<std::uint64_t>();
}

std::optional<std::vector<std::string>> ObjectReader::string_list(std::string_view key) const {
  const auto* value = find(key);
  if (value == nullptr || value->is_null()) {
    return std::nullopt;
  }
  if (!value->is_array()) {
    throw WireError(path_of(key), "expected an array of strings, got " + type_name(*value));
  }
  std::vector<std::string> items;
  items.reserve(value->size());
  for (std::size_t i = 0; i < value->size(); ++i) {
    const auto& item = (*value)[i];
    if (!item.is_string()) {
      throw WireError(path_of(key) + "[" + std::to_string(i) + "]",
                      "expected a string, got " + type_name(item));
    }
    items.push_back(item.get<std::string>());
  }
  return items;
}

std::optional<std::string> ObjectReader::base64_bytes(std::string_view key) const {
  const auto text = optional_string(key);
  if (!text) {
    return std::nullopt;
  }
  auto bytes = base64_decode(*text);
  if (!bytes) {
    throw WireError(path_of(key), "expected base64 (a Go []byte), got invalid base64");
  }
  return bytes;
}

std::string to_go_json_text(const nlohmann::ordered_json& value) {
  // These characters can only occur inside JSON strings, so escaping them in the text is safe.
  const std::string text = value.dump();
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '<') {
      out += "\\u003c";
    } else if (c == '>') {
      out += "\\u003e";
    } else if (c == '&') {
      out += "\\u0026";
    } else if (c == '\xe2' && i + 2 < text.size() && text[i + 1] == '\x80' &&
               (text[i + 2] == '\xa8' || text[i + 2] == '\xa9')) {
      out += text[i + 2] == '\xa8' ? "\\u2028" : "\\u2029";
      i += 2;
    } else {
      out += c;
    }
  }
  return out;
}

bool json_depth_within(std::string_view text, std::size_t max_depth) {
  std::size_t depth = 0;
  bool in_string = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;  // the escaped character cannot end the string
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth) {
        return false;
      }
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return true;
}

nlohmann::json parse_json_text(std::string_view text, const std::string& what) {
  if (!json_depth_within(text)) {
    throw WireError(
        what, "invalid JSON: nested deeper than " + std::to_string(kMaxJsonDepth) + " levels");
  }
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    throw WireError(what, "invalid JSON at byte " + std::to_string(e.byte));
  } catch (const nlohmann::json::exception&) {
    // e.g. out_of_range for a number too large for a double (found by fuzzing: "6e661")
    throw WireError(what, "invalid JSON: a value is out of range");
  }
}

}  // namespace garm_edge::wire
