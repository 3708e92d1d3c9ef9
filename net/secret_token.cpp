#include "net/secret_token.hpp"

#include <array>
#include <stdexcept>

#include <mbedtls/sha256.h>

#include "common/hex.hpp"
#include "net/random.hpp"

namespace garm_edge::net {
namespace {

constexpr std::string_view kBase64Url =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
constexpr std::size_t kTokenBytes = 32;
constexpr std::size_t kTokenLength = 43;  // 256 bits in 6-bit characters, unpadded

}  // namespace

std::string random_token() {
  std::array<unsigned char, kTokenBytes + 1> bytes{};  // one spare: 43 * 6 > 32 * 8
  random_bytes(std::span(bytes).first(kTokenBytes));
  std::string token;
  unsigned bits = 0;
  unsigned buffer = 0;
  std::size_t next = 0;
  while (token.size() < kTokenLength) {
    if (bits < 6) {
      buffer = (buffer << 8U) | bytes[next++];
      bits += 8;
    }
    bits -= 6;
    token += kBase64Url[(buffer >> bits) & 0x3FU];
  }
  return token;
}

std::string sha256_hex(std::string_view data) {
  std::array<unsigned char, 32> digest{};
  mbedtls_sha256_ret(reinterpret_cast<const unsigned char*>(data.data()), data.size(),
                     digest.data(), 0);
  return to_hex(digest);
}

bool constant_time_equal(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) {
    return false;  // only hashes of equal length are compared; the length is no secret
  }
  unsigned char difference = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    difference |= static_cast<unsigned char>(a[i] ^ b[i]);
  }
  return difference == 0;
}

bool looks_like_token(std::string_view text) {
  return text.size() == kTokenLength && text.find_first_not_of(kBase64Url) == std::string::npos;
}

}  // namespace garm_edge::net
