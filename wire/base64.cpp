#include "wire/base64.hpp"

#include <array>
#include <cstdint>

namespace garm_edge::wire {
namespace {

constexpr std::string_view kAlphabet =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

constexpr std::array<int8_t, 256> make_decode_table() {
  std::array<int8_t, 256> table{};
  table.fill(-1);
  for (std::size_t i = 0; i < kAlphabet.size(); ++i) {
    table[static_cast<unsigned char>(kAlphabet[i])] = static_cast<int8_t>(i);
  }
  return table;
}

constexpr auto kDecodeTable = make_decode_table();

}  // namespace

std::string base64_encode(std::string_view bytes) {
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  std::size_t i = 0;
  for (; i + 2 < bytes.size(); i += 3) {
    const uint32_t n = static_cast<uint32_t>(static_cast<unsigned char>(bytes[i]) << 16) |
                       static_cast<uint32_t>(static_cast<unsigned char>(bytes[i + 1]) << 8) |
                       static_cast<unsigned char>(bytes[i + 2]);
    out += kAlphabet[(n >> 18) & 63];
    out += kAlphabet[(n >> 12) & 63];
    out += kAlphabet[(n >> 6) & 63];
    out += kAlphabet[n & 63];
  }
  const std::size_t rest = bytes.size() - i;
  if (rest > 0) {
    uint32_t n = static_cast<uint32_t>(static_cast<unsigned char>(bytes[i]) << 16);
    if (rest == 2) {
      n |= static_cast<uint32_t>(static_cast<unsigned char>(bytes[i + 1]) << 8);
    }
    out += kAlphabet[(n >> 18) & 63];
    out += kAlphabet[(n >> 12) & 63];
    out += rest == 2 ? kAlphabet[(n >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

std::optional<std::string> base64_decode(std::string_view text) {
  std::string clean;
  clean.reserve(text.size());
  for (char c : text) {
    if (c != '\r' && c != '\n') {
      clean += c;
    }
  }
  if (clean.size() % 4 != 0) {
    return std::nullopt;
  }
  std::string out;
  out.reserve(clean.size() / 4 * 3);
  for (std::size_t i = 0; i < clean.size(); i += 4) {
    const bool last = i + 4 == clean.size();
    int padding = 0;
    uint32_t n = 0;
    for (std::size_t k = 0; k < 4; ++k) {
      const char c = clean[i + k];
      if (c == '=') {
        // Padding only at the end of the last quantum, and at most two characters of it.
        if (!last || k < 2 || (k == 2 && clean[i + 3] != '=')) {
          return std::nullopt;
        }
        ++padding;
        n <<= 6;
        continue;
      }
      const int8_t v = kDecodeTable[static_cast<unsigned char>(c)];
      if (v < 0 || padding > 0) {
        return std::nullopt;
      }
      n = (n << 6) | static_cast<uint32_t>(v);
    }
    out += static_cast<char>((n >> 16) & 0xff);
    if (padding < 2) {
      out += static_cast<char>((n >> 8) & 0xff);
    }
    if (padding < 1) {
      out += static_cast<char>(n & 0xff);
    }
  }
  return out;
}

}  // namespace garm_edge::wire
