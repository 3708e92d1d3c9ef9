// to_yaml: the only YAML writer. Every string is a double-quoted scalar, so no value can start
// a new key, list item, comment, anchor or document, and nothing depends on YAML 1.1's implicit
// typing ("no", "on", "1e3", "0755" would otherwise change type in cloud-init's PyYAML).

#include <array>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "userdata/userdata.hpp"

namespace garm_edge::userdata {
namespace {

using nlohmann::ordered_json;

struct CodePoint {
  std::uint32_t value = 0;
  std::size_t length = 0;
};

struct LeadByte {
  std::size_t length = 0;
  std::uint32_t bits = 0;
  std::uint32_t minimum = 0;  // smaller values are overlong encodings
};

std::optional<LeadByte> classify_lead(unsigned char lead) {
  if (lead >= 0xc2 && lead <= 0xdf) {
    return LeadByte{2, lead & 0x1fU, 0x80};
  }
  if (lead >= 0xe0 && lead <= 0xef) {
    return LeadByte{3, lead & 0x0fU, 0x800};
  }
  if (lead >= 0xf0 && lead <= 0xf4) {
    return LeadByte{4, lead & 0x07U, 0x10000};
  }
  return std::nullopt;
}

/// Decodes one UTF-8 sequence at `start`; nothing for overlong forms, surrogates, values above
/// U+10FFFF and truncated or stray bytes.
std::optional<CodePoint> decode_utf8(std::string_view text, std::size_t start) {
  const auto first = static_cast<unsigned char>(text[start]);
  if (first < 0x80) {
    return CodePoint{first, 1};
  }
  const auto lead = classify_lead(first);
  if (!lead || start + lead->length > text.size()) {
    return std::nullopt;
  }
  std::uint32_t value = lead->bits;
  for (std::size_t k = 1; k < lead->length; ++k) {
    const auto byte = static_cast<unsigned char>(text[start + k]);
    if ((byte & 0xc0U) != 0x80U) {
      return std::nullopt;
    }
    value = (value << 6U) | (byte & 0x3fU);
  }
  if (value < lead->minimum || value > 0x10ffff || (value >= 0xd800 && value <= 0xdfff)) {
    return std::nullopt;
  }
  return CodePoint{value, lead->length};
}

std::string hex_escape(char prefix, std::uint32_t value, int digits) {
  static constexpr std::string_view kHex = "0123456789ABCDEF";
  std::string out = {'\\', prefix};
  for (int shift = (digits - 1) * 4; shift >= 0; shift -= 4) {
    out += kHex[(value >> static_cast<unsigned>(shift)) & 0xfU];
  }
  return out;
}

/// The escape for a code point YAML may not carry raw in a double-quoted scalar, if any. Raw
/// C0/C1 controls and U+FFFE/U+FFFF make PyYAML's reader refuse the stream; NEL, U+2028 and
/// U+2029 are line breaks in YAML 1.1 and would be folded; a BOM inside a document is an error.
std::optional<std::string> escape_for(std::uint32_t code_point) {
  switch (code_point) {
    case '\\':
      return "\\\\";
    case '"':
      return "\\\"";
    case '\n':
      return "\\n";
    case '\t':
      return "\\t";
    case '\r':
      return "\\r";
    case 0x2028:
    case 0x2029:
    case 0xfeff:
    case 0xfffe:
    case 0xffff:
      return hex_escape('u', code_point, 4);
    default:
      break;
  }
  if (code_point < 0x20 || code_point == 0x7f || (code_point >= 0x80 && code_point <= 0x9f)) {
    return hex_escape('x', code_point, 2);
  }
  return std::nullopt;
}

std::string double_quoted(std::string_view text, const std::string& path) {
  std::string out = "\"";
  for (std::size_t i = 0; i < text.size();) {
    const auto code_point = decode_utf8(text, i);
    if (!code_point) {
      throw UserDataError("user-data value " + (path.empty() ? "/" : path) + " is not valid UTF-8");
    }
    if (const auto escape = escape_for(code_point->value)) {
      out += *escape;
    } else {
      out.append(text.substr(i, code_point->length));
    }
    i += code_point->length;
  }
  out += '"';
  return out;
}

/// Keys such as `write_files` or `local-hostname` stay plain for readability; anything else,
/// and the words YAML 1.1 reads as booleans or null, is quoted.
bool is_plain_key(std::string_view key) {
  static constexpr std::array<std::string_view, 11> kSpecialWords = {
      "y", "n", "yes", "no", "on", "off", "true", "false", "null", "nan", "inf"};
  if (key.empty() || !(std::isalpha(static_cast<unsigned char>(key[0])) || key[0] == '_')) {
    return false;
  }
  std::string lowered;
  for (char c : key) {
    const auto byte = static_cast<unsigned char>(c);
    if (!std::isalnum(byte) && c != '_' && c != '-') {
      return false;
    }
    lowered += static_cast<char>(std::tolower(byte));
  }
  for (auto word : kSpecialWords) {
    if (lowered == word) {
      return false;
    }
  }
  return true;
}

/// PyYAML (YAML 1.1) reads a float only with a '.', so "1e+20" would come back as a string.
std::string float_scalar(double value) {
  if (std::isnan(value)) {
    return ".nan";
  }
  if (std::isinf(value)) {
    return value > 0 ? ".inf" : "-.inf";
  }
  std::string text = ordered_json(value).dump();
  if (text.find('.') == std::string::npos) {
    const auto exponent = text.find_first_of("eE");
    text.insert(exponent == std::string::npos ? text.size() : exponent, ".0");
  }
  return text;
}

std::string scalar(const ordered_json& node, const std::string& path) {
  switch (node.type()) {
    case ordered_json::value_t::string:
      return double_quoted(node.get_ref<const std::string&>(), path);
    case ordered_json::value_t::number_float:
      return float_scalar(node.get<double>());
    case ordered_json::value_t::object:
      return "{}";
    case ordered_json::value_t::array:
      return "[]";
    case ordered_json::value_t::binary:
    case ordered_json::value_t::discarded:
      throw UserDataError("user-data value " + path + " is not a JSON value YAML can carry");
    default:
      return node.dump();  // null, booleans and integers read back the same in YAML 1.1
  }
}

bool is_nested_block(const ordered_json& node) {
  return (node.is_object() || node.is_array()) && !node.empty();
}

/// Writes `node` with its lines at column `indent`. The caller has already written the first
/// line's indentation (and "- " for a list item), which lets items and nested blocks share it.
void write_block(std::string& out, const ordered_json& node, std::size_t indent,
                 const std::string& path) {
  if (!is_nested_block(node)) {
    out += scalar(node, path);
    out += '\n';
    return;
  }
  bool first = true;
  if (node.is_array()) {
    std::size_t index = 0;
    for (const auto& item : node) {
      out.append(first ? 0 : indent, ' ');
      out += "- ";
      write_block(out, item, indent + 2, path + "/" + std::to_string(index++));
      first = false;
    }
    return;
  }
  for (const auto& [key, value] : node.items()) {
    const auto child_path = path + "/" + key;
    out.append(first ? 0 : indent, ' ');
    out += is_plain_key(key) ? key : double_quoted(key, child_path);
    if (is_nested_block(value)) {
      out += ":\n";
      out.append(indent + 2, ' ');
      write_block(out, value, indent + 2, child_path);
    } else {
      out += ": ";
      write_block(out, value, indent, child_path);
    }
    first = false;
  }
}

}  // namespace

std::string to_yaml(const nlohmann::ordered_json& document) {
  std::string out;
  write_block(out, document, 0, "");
  return out;
}

}  // namespace garm_edge::userdata
