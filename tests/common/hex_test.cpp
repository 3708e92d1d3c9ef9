#include "common/hex.hpp"

#include <array>
#include <set>

#include <catch2/catch.hpp>

#include "agent/instances/identifiers.hpp"
#include "net/secret_token.hpp"
#include "wire/validate.hpp"

using namespace garm_edge;

TEST_CASE("hex: two lower-case digits per byte, and back", "[hex]") {
  const std::array<unsigned char, 4> bytes{0x00, 0x0f, 0xa0, 0xff};
  CHECK(to_hex(bytes) == "000fa0ff");
  CHECK(to_hex({}).empty());
  for (const char c : std::string_view("0123456789abcdefABCDEF")) {
    CHECK(is_hex_digit(c));
  }
  for (const char c : std::string_view("gG-: \x7f")) {
    CHECK_FALSE(is_hex_digit(c));
    CHECK(hex_digit_value(c) == -1);
  }
  CHECK(hex_digit_value('7') == 7);
  CHECK(hex_digit_value('b') == 11);
  CHECK(hex_digit_value('F') == 15);
}

TEST_CASE("UUIDs are formatted 8-4-4-4-12 and random ones are version 4", "[hex]") {
  std::array<unsigned char, 16> bytes{};
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    bytes[i] = static_cast<unsigned char>(i * 17);
  }
  CHECK(format_uuid(bytes) == "00112233-4455-6677-8899-aabbccddeeff");

  std::set<std::string> seen;
  for (int i = 0; i < 64; ++i) {
    const auto uuid = agent::random_uuid();
    CHECK(wire::is_uuid(uuid));
    CHECK(uuid[14] == '4');                                                    // version 4
    CHECK(std::string_view("89ab").find(uuid[19]) != std::string_view::npos);  // RFC 4122
    seen.insert(uuid);
  }
  CHECK(seen.size() == 64);
}

TEST_CASE("token hashes are the hex SHA-256 of the token", "[hex]") {
  CHECK(net::sha256_hex("abc") ==
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST_CASE("upper-case hex where a standard asks for it", "[hex]") {
  std::string out;
  append_hex(out, 0xab, HexCase::upper);
  append_hex(out, 0xab);
  CHECK(out == "ABab");
}
