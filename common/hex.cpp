#include "common/hex.hpp"

namespace garm_edge {

void append_hex(std::string& out, unsigned char byte, HexCase letters) {
  const std::string_view digits =
      letters == HexCase::upper ? "0123456789ABCDEF" : "0123456789abcdef";
  out += digits[byte >> 4U];
  out += digits[byte & 0x0FU];
}

std::string to_hex(std::span<const unsigned char> bytes) {
  std::string hex;
  hex.reserve(bytes.size() * 2);
  for (const unsigned char byte : bytes) {
    append_hex(hex, byte);
  }
  return hex;
}

std::string format_uuid(std::span<const unsigned char, 16> uuid) {
  std::string text;
  text.reserve(36);
  for (std::size_t i = 0; i < uuid.size(); ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) {
      text += '-';
    }
    append_hex(text, uuid[i]);
  }
  return text;
}

std::optional<std::string> from_hex(std::string_view text) {
  if (text.size() % 2 != 0) {
    return std::nullopt;
  }
  std::string bytes;
  for (std::size_t at = 0; at < text.size(); at += 2) {
    const int high = hex_digit_value(text[at]);
    const int low = hex_digit_value(text[at + 1]);
    if (high < 0 || low < 0) {
      return std::nullopt;
    }
    bytes += static_cast<char>(high * 16 + low);
  }
  return bytes;
}

}  // namespace garm_edge
