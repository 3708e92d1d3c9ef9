#include "wire/base64.hpp"

#include <catch2/catch.hpp>

using garm_edge::wire::base64_decode;
using garm_edge::wire::base64_encode;

TEST_CASE("base64 matches Go's StdEncoding", "[wire][base64]") {
  CHECK(base64_encode("") == "");
  CHECK(base64_encode("f") == "Zg==");
  CHECK(base64_encode("fo") == "Zm8=");
  CHECK(base64_encode("foo") == "Zm9v");
  CHECK(base64_encode("null") == "bnVsbA==");
  CHECK(base64_decode("cXVvdGEgZXhjZWVkZWQ=") == "quota exceeded");
  CHECK(base64_decode("Zm9v\r\nYmFy") == "foobar");
  std::string all_bytes;
  for (int i = 0; i < 256; ++i) {
    all_bytes += static_cast<char>(i);
  }
  CHECK(base64_decode(base64_encode(all_bytes)) == all_bytes);
}

TEST_CASE("base64 rejects what Go rejects", "[wire][base64]") {
  CHECK_FALSE(base64_decode("Zg").has_value());    // missing padding
  CHECK_FALSE(base64_decode("Zg=a").has_value());  // data after padding
  CHECK_FALSE(base64_decode("Z===").has_value());  // too much padding
  CHECK_FALSE(base64_decode("Zm9v!A==").has_value());
  CHECK_FALSE(base64_decode("Zg==Zg==").has_value());  // padding before the end
}
