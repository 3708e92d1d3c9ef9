#pragma once

// Internal to net/: the character classes and small text steps of HTTP/1.1 (RFC 9110, 9112)
// shared by the request parser, the response parser and the client. ASCII only, independent
// of the locale.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "common/hex.hpp"

namespace garm_edge::net::http_syntax {

inline bool is_digit(char c) {
  return c >= '0' && c <= '9';
}

inline bool is_alpha(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

using garm_edge::is_hex_digit;

/// tchar: what header names and methods are made of.
inline bool is_token_char(char c) {
  return is_alpha(c) || is_digit(c) ||
         std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
}

inline bool is_token(std::string_view text) {
  return !text.empty() && std::all_of(text.begin(), text.end(), is_token_char);
}

/// Visible ASCII, space, tab and obs-text: never another control character.
inline bool is_field_char(char c) {
  const auto byte = static_cast<unsigned char>(c);
  return c == ' ' || c == '\t' || (byte >= 0x21 && byte != 0x7f);
}

inline bool is_field_value(std::string_view value) {
  return std::all_of(value.begin(), value.end(), is_field_char);
}

/// Printable ASCII without space: a request target on the wire.
inline bool is_target_char(char c) {
  const auto byte = static_cast<unsigned char>(c);
  return byte > 0x20 && byte < 0x7f;
}

inline std::string lower(std::string_view text) {
  std::string out(text);
  std::transform(out.begin(), out.end(), out.begin(), [](char c) {
    return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c;
  });
  return out;
}

inline bool equals_ignoring_case(std::string_view a, std::string_view b) {
  return a.size() == b.size() && lower(a) == lower(b);
}

/// Without the optional whitespace (spaces and tabs) around a field value.
inline std::string_view trim(std::string_view text) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) {
    text.remove_prefix(1);
  }
  while (!text.empty() && (text.back() == ' ' || text.back() == '\t')) {
    text.remove_suffix(1);
  }
  return text;
}

/// A decimal number of 1 to `max_digits` (at most 19) digits and nothing else (no sign, no
/// spaces).
inline std::optional<std::uint64_t> parse_decimal(std::string_view text, std::size_t max_digits) {
  if (text.empty() || text.size() > max_digits ||
      !std::all_of(text.begin(), text.end(), is_digit)) {
    return std::nullopt;
  }
  std::uint64_t value = 0;
  for (const char digit : text) {
    value = value * 10 + static_cast<std::uint64_t>(digit - '0');
  }
  return value;
}

}  // namespace garm_edge::net::http_syntax
