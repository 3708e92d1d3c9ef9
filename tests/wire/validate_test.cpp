#include "wire/validate.hpp"

#include <random>

#include <catch2/catch.hpp>

#include "common/text.hpp"
#include "wire/error.hpp"

using namespace garm_edge::wire;

TEST_CASE("instance names: garm's form passes, anything that could escape is refused",
          "[validate]") {
  CHECK_NOTHROW(validate_instance_name("garm-2xkq8mfj3d0a"));
  CHECK_NOTHROW(validate_instance_name("Runner_01.a"));
  for (const std::string& bad : std::vector<std::string>{
           "", "-leading", "../etc", "a/b", "a b", "x';rm -rf /", "a\nb", "<x>", "a&b", "na\"me",
           "a..b", std::string(64, 'a'), std::string(5000, 'a')}) {
    INFO(bad.substr(0, 40));
    CHECK_THROWS_AS(validate_instance_name(bad), WireError);
  }
}

TEST_CASE("UUIDs and pool IDs, including scale-set pseudo IDs", "[validate]") {
  CHECK(is_uuid("9dcf590a-1192-4a9c-b3e4-e0902974c2c0"));
  CHECK(is_uuid("9DCF590A-1192-4A9C-B3E4-E0902974C2C0"));
  CHECK_FALSE(is_uuid("9dcf590a11924a9cb3e4e0902974c2c0"));
  CHECK_FALSE(is_uuid("9dcf590a-1192-4a9c-b3e4-e0902974c2cg"));
  CHECK_NOTHROW(validate_pool_id("9dcf590a-1192-4a9c-b3e4-e0902974c2c0"));
  CHECK_NOTHROW(validate_pool_id("my-scale-set-9dcf590a-1192-4a9c-b3e4-e0902974c2c0"));
  CHECK_NOTHROW(validate_pool_id("scale set <&'\"> -9dcf590a-1192-4a9c-b3e4-e0902974c2c0"));
  CHECK_THROWS_AS(validate_pool_id("-9dcf590a-1192-4a9c-b3e4-e0902974c2c0"), WireError);
  CHECK_THROWS_AS(validate_pool_id("pool"), WireError);
  CHECK_THROWS_AS(validate_pool_id("a\x01-9dcf590a-1192-4a9c-b3e4-e0902974c2c0"), WireError);
  CHECK_THROWS_AS(validate_pool_id(std::string(200, 'a') + "-9dcf590a-1192-4a9c-b3e4-e0902974c2c0"),
                  WireError);
}

TEST_CASE("image and flavor names can never act as paths", "[validate]") {
  CHECK_NOTHROW(validate_resource_name("ubuntu:24.04", "image"));
  CHECK_NOTHROW(validate_resource_name("debian-12@sha+1", "image"));
  for (const std::string& bad :
       std::vector<std::string>{"", "..", "../../etc/passwd", "/abs", "a/b", "a\\b", ".hidden",
                                "a..b", "a b", std::string(129, 'a')}) {
    INFO(bad);
    CHECK_THROWS_AS(validate_resource_name(bad, "image"), WireError);
  }
}

TEST_CASE("labels and extra specs have size limits", "[validate]") {
  CHECK_NOTHROW(validate_labels(std::vector<std::string>{"linux", "gpu", "runner-pool-id=x"}));
  CHECK_THROWS_AS(validate_labels(std::vector<std::string>(65, "x")), WireError);
  CHECK_THROWS_AS(validate_labels(std::vector<std::string>{std::string(257, 'x')}), WireError);
  CHECK_THROWS_AS(validate_labels(std::vector<std::string>{"a,b"}), WireError);
  CHECK_THROWS_AS(validate_labels(std::vector<std::string>{"a\nb"}), WireError);
  CHECK_NOTHROW(validate_extra_specs(nlohmann::json{{"k", "v"}}));
  CHECK_THROWS_AS(validate_extra_specs(nlohmann::json{{"k", std::string(300 * 1024, 'v')}}),
                  WireError);
  CHECK_THROWS_AS(validate_extra_specs(nlohmann::json::array()), WireError);
}

TEST_CASE("plain text: valid UTF-8 without control characters", "[validate]") {
  using garm_edge::is_plain_text;
  CHECK(is_plain_text("ümlaut ✓ 🚀"));
  CHECK_FALSE(is_plain_text("tab\there"));
  CHECK_FALSE(is_plain_text(std::string("nul\0x", 5)));
  CHECK_FALSE(is_plain_text("\x7f"));
  CHECK_FALSE(is_plain_text("\xc2\x85"));      // C1 control NEL
  CHECK_FALSE(is_plain_text("\xc0\xaf"));      // overlong '/'
  CHECK_FALSE(is_plain_text("\xed\xa0\x80"));  // surrogate
  CHECK_FALSE(is_plain_text("\xe2\x82"));      // truncated
  CHECK_FALSE(is_plain_text("\xef\xbf\xbe"));  // U+FFFE
  CHECK_FALSE(is_plain_text("\xef\xbf\xbf"));  // U+FFFF
  CHECK(is_plain_text("\xef\xbf\xbd"));        // U+FFFD is fine
  CHECK(garm_edge::printable_excerpt("a\nb\x1b", 64) == "a b?");
  CHECK(garm_edge::printable_excerpt(std::string(100, 'x'), 10) == "xxxxxxxxxx...");
}

TEST_CASE("an excerpt is valid UTF-8 whatever bytes it quotes", "[validate]") {
  using garm_edge::printable_excerpt;
  CHECK(printable_excerpt("a\xff"
                          "b") == "a?b");
  CHECK(printable_excerpt("\xc0\xaf") == "??");       // overlong
  CHECK(printable_excerpt("x\xe2\x82") == "x??");     // truncated at the end
  CHECK(printable_excerpt("\xed\xa0\x80") == "???");  // surrogate
  CHECK(printable_excerpt("\xc2\x85") == "??");       // C1 control
  CHECK(printable_excerpt("ü✓🚀") == "ü✓🚀");
  std::mt19937 random(17);
  for (int round = 0; round < 2000; ++round) {
    std::string bytes(static_cast<std::size_t>(random() % 40), '\0');
    for (auto& byte : bytes) {
      byte = static_cast<char>(random() % 256);
    }
    const auto excerpt = printable_excerpt(bytes, 24);
    const auto body = excerpt.ends_with("...") ? excerpt.substr(0, excerpt.size() - 3) : excerpt;
    INFO(round);
    REQUIRE(garm_edge::is_plain_text(body));
    REQUIRE(body.size() <= 24);
  }
}

TEST_CASE("extra specs deeper than 16 levels are refused the same way by provider and agent",
          "[validate]") {
  const auto nested = [](int levels) {
    nlohmann::json value = 1;
    for (int i = 1; i < levels; ++i) {
      value = nlohmann::json::array({value});
    }
    return nlohmann::json{{"deep", value}};  // the object itself is one more level
  };
  CHECK_NOTHROW(validate_extra_specs(nested(16)));
  CHECK_THROWS_WITH(validate_extra_specs(nested(17)),
                    "extra_specs: is nested deeper than 16 levels");
}

TEST_CASE("http(s) URLs are recognised whatever the scheme's case", "[validate]") {
  CHECK(is_http_url("https://garm.example/api"));
  CHECK(is_http_url("HTTPS://garm.example/api"));
  CHECK(is_http_url("Http://10.0.0.1:9997"));
  CHECK_FALSE(is_http_url("ftp://garm.example"));
  CHECK_FALSE(is_http_url("https://"));
  CHECK_FALSE(is_http_url("httpsx://a"));
}
