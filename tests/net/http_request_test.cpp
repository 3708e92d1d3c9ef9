#include "net/http_request.hpp"

#include <catch2/catch.hpp>

using namespace garm_edge::net;
using Result = HttpRequestParser::Result;

namespace {

struct Parsed {
  Result result;
  int status = 0;
  std::size_t consumed = 0;
  HttpRequest request;
};

Parsed parse(std::string_view text, HttpLimits limits = {}) {
  HttpRequestParser parser(limits);
  Parsed out;
  out.result = parser.feed(text, out.consumed);
  out.status = parser.error_status();
  if (out.result == Result::complete) {
    out.request = parser.take();
  }
  return out;
}

}  // namespace

TEST_CASE("a request with a body parses into its parts", "[http]") {
  const auto parsed = parse(
      "POST /v1/instances?dry_run=true HTTP/1.1\r\nHost: agent\r\nContent-Type: "
      "application/json\r\n"
      "Content-Length: 7\r\nX-Trailing:  spaced  \r\n\r\n{\"a\":1}");
  REQUIRE(parsed.result == Result::complete);
  CHECK(parsed.request.method == "POST");
  CHECK(parsed.request.path == "/v1/instances");
  CHECK(parsed.request.query == "dry_run=true");
  CHECK(parsed.request.body == "{\"a\":1}");
  CHECK(parsed.request.header("content-type") ==
        std::optional<std::string_view>("application/json"));
  CHECK(parsed.request.header("x-trailing") == std::optional<std::string_view>("spaced"));
  CHECK(parsed.request.keep_alive);
}

TEST_CASE("bytes arriving one at a time give the same request", "[http]") {
  const std::string text = "GET /healthz HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n";
  HttpRequestParser parser;
  Result result = Result::incomplete;
  for (char c : text) {
    std::size_t consumed = 0;
    result = parser.feed(std::string_view(&c, 1), consumed);
    CHECK(consumed == 1);
  }
  REQUIRE(result == Result::complete);
  const auto request = parser.take();
  CHECK(request.path == "/healthz");
  CHECK_FALSE(request.keep_alive);
}

TEST_CASE("pipelined requests: the parser stops at the end of the first", "[http]") {
  const std::string first = "GET /a HTTP/1.1\r\nHost: a\r\n\r\n";
  const std::string both = first + "GET /b HTTP/1.1\r\nHost: a\r\n\r\n";
  HttpRequestParser parser;
  std::size_t consumed = 0;
  REQUIRE(parser.feed(both, consumed) == Result::complete);
  CHECK(consumed == first.size());
  CHECK(parser.take().path == "/a");
  REQUIRE(parser.feed(std::string_view(both).substr(consumed), consumed) == Result::complete);
  CHECK(parser.take().path == "/b");
}

TEST_CASE("malformed and hostile requests are refused with the right status", "[http]") {
  struct Case {
    const char* what;
    std::string text;
    int status;
  };
  const std::vector<Case> cases = {
      {"bare LF", "GET / HTTP/1.1\nHost: a\n\n", 400},
      {"bare CR inside a header", "GET / HTTP/1.1\r\nHost: a\rb\r\n\r\n", 400},
      {"lower-case method", "get / HTTP/1.1\r\nHost: a\r\n\r\n", 400},
      {"absolute-form target", "GET http://x/ HTTP/1.1\r\nHost: a\r\n\r\n", 400},
      {"space in target", "GET /a b HTTP/1.1\r\nHost: a\r\n\r\n", 400},
      {"HTTP/2.0", "GET / HTTP/2.0\r\nHost: a\r\n\r\n", 505},
      {"no version", "GET /\r\nHost: a\r\n\r\n", 400},
      {"missing Host", "GET / HTTP/1.1\r\n\r\n", 400},
      {"folded header", "GET / HTTP/1.1\r\nHost: a\r\n b\r\n\r\n", 400},
      {"space before colon", "GET / HTTP/1.1\r\nHost : a\r\n\r\n", 400},
      {"control character in a value", "GET / HTTP/1.1\r\nHost: a\x01\r\n\r\n", 400},
      {"chunked body", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n", 501},
      {"conflicting lengths",
       "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n", 400},
      {"duplicate equal lengths",
       "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\nx", 400},
      {"negative length", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: -1\r\n\r\n", 400},
      {"length with junk", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1x\r\n\r\n", 400},
      {"body over the limit", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 2000000\r\n\r\n", 413},
      {"head over the limit",
       "GET / HTTP/1.1\r\nHost: a\r\nX: " + std::string(20000, 'a') + "\r\n\r\n", 431},
  };
  for (const auto& c : cases) {
    INFO(c.what);
    const auto parsed = parse(c.text);
    CHECK(parsed.result == Result::error);
    CHECK(parsed.status == c.status);
  }
}

TEST_CASE("an endless head is refused once it passes the limit, without buffering more", "[http]") {
  HttpRequestParser parser(
      HttpLimits{.max_header_bytes = 64, .max_headers = 8, .max_body_bytes = 16});
  std::size_t consumed = 0;
  CHECK(parser.feed("GET / HTTP/1.1\r\nHost: a\r\n", consumed) == Result::incomplete);
  const std::string flood(10000, 'x');
  CHECK(parser.feed(flood, consumed) == Result::error);
  CHECK(consumed < 100);
  CHECK(parser.error_status() == 431);
}

TEST_CASE("HTTP/1.0 closes unless asked to keep alive", "[http]") {
  CHECK_FALSE(parse("GET / HTTP/1.0\r\n\r\n").request.keep_alive);
  CHECK(parse("GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n").request.keep_alive);
  CHECK_FALSE(
      parse("GET / HTTP/1.1\r\nHost: a\r\nConnection: foo, Close\r\n\r\n").request.keep_alive);
}
