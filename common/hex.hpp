#pragma once

#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace garm_edge {

inline bool is_hex_digit(char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

/// "xx:xx:xx:xx:xx:xx" of hex digits: a MAC address as libvirt and the guest's sysfs write it.
inline bool is_mac_address(std::string_view mac) {
  if (mac.size() != 17) {
    return false;
  }
  for (std::size_t i = 0; i < mac.size(); ++i) {
    if (i % 3 == 2 ? mac[i] != ':' : !is_hex_digit(mac[i])) {
      return false;
    }
  }
  return true;
}

/// Exactly `length` lower-case hex digits: a digest or fingerprint as this project writes them.
inline bool is_lower_hex(std::string_view text, std::size_t length) {
  return text.size() == length &&
         text.find_first_not_of("0123456789abcdef") == std::string_view::npos;
}

/// The value of one hex digit; -1 when `c` is none.
inline int hex_digit_value(char c) {
  if (c >= '0' && c <= '9') {
    return c - '0';
  }
  if (c >= 'a' && c <= 'f') {
    return c - 'a' + 10;
  }
  if (c >= 'A' && c <= 'F') {
    return c - 'A' + 10;
  }
  return -1;
}

enum class HexCase { lower, upper };

/// Appends `byte` as two hex digits (upper case where a standard asks for it: percent-encoding).
void append_hex(std::string& out, unsigned char byte, HexCase letters = HexCase::lower);

/// Lower-case hex of `bytes`, two digits each.
std::string to_hex(std::span<const unsigned char> bytes);

/// The bytes of an even number of hex digits; nothing when `text` is not that.
std::optional<std::string> from_hex(std::string_view text);

/// The 8-4-4-4-12 lower-case text of a 16-byte binary UUID.
std::string format_uuid(std::span<const unsigned char, 16> uuid);

}  // namespace garm_edge
