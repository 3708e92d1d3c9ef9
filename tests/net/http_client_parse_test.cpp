#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "net/http_client.hpp"

using garm_edge::net::ClientRequest;
using garm_edge::net::ClientResponse;
using garm_edge::net::HttpClientError;
using garm_edge::net::HttpResponseParser;
using garm_edge::net::parse_http_response;
using garm_edge::net::parse_upstream_url;
using garm_edge::net::proxy_for;
using garm_edge::net::ProxySettings;
using garm_edge::net::serialize_client_request;
using garm_edge::net::UpstreamUrl;

using namespace std::string_literals;

namespace {

/// Feeds `raw` in pieces of `piece` bytes, as a slow connection would deliver it.
ClientResponse parse_in_pieces(const std::string& raw, std::size_t piece,
                               std::size_t max_body = 1024 * 1024) {
  HttpResponseParser parser(max_body);
  for (std::size_t at = 0; at < raw.size(); at += piece) {
    if (parser.feed(std::string_view(raw).substr(at, piece)) ==
        HttpResponseParser::Result::complete) {
      return parser.take();
    }
  }
  parser.finish();
  return parser.take();
}

const std::string kChunked =
    "HTTP/1.1 200 OK\r\n"
    "Content-Type: text/plain; charset=utf-8\r\n"
    "Transfer-Encoding: chunked\r\n"
    "\r\n"
    "5;name=value\r\nhello\r\n"
    "1 ; lone-extension\r\n,\r\n"
    "6\r\n world\r\n"
    "0\r\n"
    "X-Checksum: abc\r\n"
    "\r\n";

}  // namespace

TEST_CASE("parse_upstream_url accepts garm's URL forms", "[http_client]") {
  CHECK(parse_upstream_url("https://garm.example.com/api/v1/callbacks") ==
        UpstreamUrl{true, "garm.example.com", 443, "/api/v1/callbacks", ""});
  CHECK(parse_upstream_url("http://10.0.0.5:9997/api/v1/metadata/") ==
        UpstreamUrl{false, "10.0.0.5", 9997, "/api/v1/metadata", ""});
  CHECK(parse_upstream_url("HTTPS://garm:8443") == UpstreamUrl{true, "garm", 8443, "", ""});
  CHECK(parse_upstream_url("https://garm/") == UpstreamUrl{true, "garm", 443, "", ""});
  CHECK(parse_upstream_url("http://[::1]:8080/x%20y//") ==
        UpstreamUrl{false, "::1", 8080, "/x%20y", ""});
  CHECK(parse_upstream_url("https://[fe80::1]") == UpstreamUrl{true, "fe80::1", 443, "", ""});
}

TEST_CASE("parse_upstream_url refuses everything else, without quoting the URL", "[http_client]") {
  const std::vector<std::string> refused = {
      "",
      "garm.example.com",
      "ftp://garm/",
      "https://",
      "https:///path",
      "https://user:secret@garm/",
      "https://garm/path#fragment",
      "https://garm/path?query=1",
      "https://garm/pa th",
      "https://garm/\x01",
      "https://garm\t/",
      "https://garm/caf\xc3\xa9",
      "https://garm:0/",
      "https://garm:65536/",
      "https://garm:/",
      "https://garm:8a/",
      "https://garm:-1/",
      "https://[::1/",
      "https://[not-v6]/",
      "https://[::1]x/",
      "https://::1/",
      "https://garm/100%",
      "https://garm/%zz",
      "https://garm/back\\slash",
      "https://ga{rm/",
  };
  for (const auto& url : refused) {
    INFO(url);
    try {
      parse_upstream_url(url);
      FAIL("accepted");
    } catch (const HttpClientError& e) {
      CHECK(std::string(e.what()).starts_with("upstream URL: "));
      CHECK(std::string(e.what()).find("secret") == std::string::npos);
    }
  }
}

TEST_CASE("a request is serialized with Host, Content-Length and Connection: close",
          "[http_client]") {
  const auto url = parse_upstream_url("https://garm:8443/api");
  const ClientRequest post{
      "POST",
      "/api/v1/callbacks/status",
      {{"Authorization", "Bearer t0ken"}, {"Content-Type", "application/json"}},
      "{}"};
  CHECK(serialize_client_request(url, post) ==
        "POST /api/v1/callbacks/status HTTP/1.1\r\nHost: garm:8443\r\n"
        "Authorization: Bearer t0ken\r\nContent-Type: application/json\r\n"
        "Content-Length: 2\r\nConnection: close\r\n\r\n{}");

  // Default ports are left out of Host; a bodiless GET has no Content-Length; POST always has.
  CHECK(serialize_client_request(parse_upstream_url("http://[::1]"), {"GET", "/a?b=c", {}, ""}) ==
        "GET /a?b=c HTTP/1.1\r\nHost: [::1]\r\nConnection: close\r\n\r\n");
  CHECK(serialize_client_request(parse_upstream_url("https://garm"), {"POST", "/", {}, ""}) ==
        "POST / HTTP/1.1\r\nHost: garm\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
}

TEST_CASE("a request with a header that could split it is refused, naming no value",
          "[http_client]") {
  const auto url = parse_upstream_url("https://garm");
  auto with_header = [](std::string name, std::string value) {
    return ClientRequest{"GET", "/", {{std::move(name), std::move(value)}}, ""};
  };
  const std::vector<ClientRequest> refused = {
      with_header("Authorization", "Bearer secret\r\nX-Injected: 1"),
      with_header("Authorization", "Bearer secret\n"),
      with_header("Authorization", "Bearer secret\0"s),
      with_header("Bad Name", "secret"),
      with_header("Bad:Name", "secret"),
      with_header("", "secret"),
      with_header("content-length", "5"),
      with_header("Host", "elsewhere"),
      with_header("Transfer-Encoding", "chunked"),
      with_header("Connection", "keep-alive"),
      {"GET", "relative", {}, ""},
      {"GET", "/with space", {}, ""},
      {"GET", "/with\r\nnewline", {}, ""},
      {"G T", "/", {}, ""},
      {"", "/", {}, ""},
  };
  for (const auto& request : refused) {
    INFO(request.method << " " << request.target);
    try {
      serialize_client_request(url, request);
      FAIL("accepted");
    } catch (const HttpClientError& e) {
      CHECK(std::string(e.what()).find("secret") == std::string::npos);
    }
  }
}

TEST_CASE("a Content-Length response is parsed, headers lower-cased, whole or byte by byte",
          "[http_client]") {
  const std::string raw =
      "HTTP/1.1 401 Unauthorized\r\nContent-Type:   application/json  \r\n"
      "CONTENT-LENGTH: 46\r\nX-Empty:\r\n\r\n"
      R"({"error":"Authentication failed","details":""})";
  for (const std::size_t piece : {raw.size(), std::size_t{1}, std::size_t{7}}) {
    const auto response = parse_in_pieces(raw, piece);
    CHECK(response.status == 401);
    CHECK(response.body == R"({"error":"Authentication failed","details":""})");
    CHECK(response.header("content-type") == "application/json");
    CHECK(response.header("x-empty") == "");
    CHECK_FALSE(response.header("Content-Type").has_value());
  }
}

TEST_CASE("a chunked response is decoded, extensions and trailers dropped", "[http_client]") {
  for (const std::size_t piece : {kChunked.size(), std::size_t{1}, std::size_t{3}}) {
    const auto response = parse_in_pieces(kChunked, piece);
    CHECK(response.status == 200);
    CHECK(response.body == "hello, world");
    CHECK_FALSE(response.header("x-checksum").has_value());
  }
  // Upper-case hex sizes and a body that spans many chunks, as Go writes a large script.
  std::string raw = "HTTP/1.1 200 OK\r\nTransfer-Encoding: Chunked\r\n\r\n";
  std::string expected;
  for (int i = 0; i < 40; ++i) {
    const std::string chunk(300, static_cast<char>('a' + i % 26));
    raw += "12C\r\n" + chunk + "\r\n";
    expected += chunk;
  }
  raw += "0\r\n\r\n";
  CHECK(parse_http_response(raw).body == expected);
}

TEST_CASE("a body without length runs until the connection closes", "[http_client]") {
  const std::string raw = "HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\nuntil the end\r\n";
  HttpResponseParser parser(1024);
  CHECK(parser.feed(raw) == HttpResponseParser::Result::incomplete);
  CHECK(parser.close_delimited());
  parser.finish();
  const auto response = parser.take();
  CHECK(response.status == 200);
  CHECK(response.body == "until the end\r\n");
}

TEST_CASE("answers without a body: HEAD, 204, 304, and an empty Content-Length", "[http_client]") {
  HttpResponseParser head(1024, true);
  CHECK(head.feed("HTTP/1.1 200 OK\r\nContent-Length: 99\r\n\r\n") ==
        HttpResponseParser::Result::complete);
  CHECK(head.take().body.empty());
  CHECK(parse_http_response("HTTP/1.1 204 No Content\r\n\r\n").status == 204);
  CHECK(parse_http_response("HTTP/1.1 304 Not Modified\r\n\r\n").status == 304);
  HttpResponseParser empty(1024);
  CHECK(empty.feed("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 0\r\n"
                   "\r\n") == HttpResponseParser::Result::complete);
  CHECK(empty.take().body.empty());
}

TEST_CASE("interim 1xx answers are skipped", "[http_client]") {
  const std::string raw =
      "HTTP/1.1 100 Continue\r\n\r\n"
      "HTTP/1.1 103 Early Hints\r\nLink: </style.css>\r\n\r\n"
      "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
  for (const std::size_t piece : {raw.size(), std::size_t{1}}) {
    const auto response = parse_in_pieces(raw, piece);
    CHECK(response.status == 200);
    CHECK(response.body == "ok");
    CHECK_FALSE(response.header("link").has_value());
  }
  CHECK_THROWS_AS(parse_http_response("HTTP/1.1 101 Switching Protocols\r\n\r\n"), HttpClientError);
}

TEST_CASE("a cut-off response is an error, never a short answer", "[http_client]") {
  const std::vector<std::string> cut_off = {
      "",
      "HTTP/1.1 200 OK\r\nContent-Le",
      "HTTP/1.1 100 Continue\r\n\r\n",
      "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort",
      "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n",
      "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhel",
      "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello",
      "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n",
      "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nTrailer: x\r\n",
  };
  for (const auto& raw : cut_off) {
    INFO(raw);
    CHECK_THROWS_AS(parse_http_response(raw), HttpClientError);
  }
}

TEST_CASE("bodies larger than the limit are refused in every framing", "[http_client]") {
  constexpr std::size_t kLimit = 16;
  const std::string big(kLimit + 1, 'x');
  // Declared too large: refused before any body byte arrives.
  HttpResponseParser declared(kLimit);
  CHECK_THROWS_WITH(declared.feed("HTTP/1.1 200 OK\r\nContent-Length: 17\r\n\r\n"),
                    Catch::Contains("larger than 16 bytes"));
  CHECK_THROWS_WITH(parse_http_response("HTTP/1.1 200 OK\r\nContent-Length: 99999999999999999999"
                                        "\r\n\r\n",
                                        kLimit),
                    Catch::Contains("Content-Length"));
  CHECK_THROWS_WITH(parse_http_response("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                                        "9\r\n123456789\r\n9\r\n123456789\r\n0\r\n\r\n",
                                        kLimit),
                    Catch::Contains("larger than 16 bytes"));
  CHECK_THROWS_WITH(parse_http_response("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                                        "ffffffffffffffff\r\n",
                                        kLimit),
                    Catch::Contains("chunk-size"));
  CHECK_THROWS_WITH(parse_http_response("HTTP/1.0 200 OK\r\n\r\n" + big, kLimit),
                    Catch::Contains("larger than 16 bytes"));
  // Exactly at the limit is fine.
  CHECK(parse_http_response("HTTP/1.0 200 OK\r\n\r\n" + big.substr(1), kLimit).body.size() ==
        kLimit);
  // A head that never ends is bounded too.
  HttpResponseParser endless(kLimit);
  const std::string header_line = "X-Filler: " + std::string(1000, 'y') + "\r\n";
  CHECK_THROWS_WITH(
      [&] {
        endless.feed("HTTP/1.1 200 OK\r\n");
        for (int i = 0; i < 100; ++i) {
          endless.feed(header_line);
        }
      }(),
      Catch::Contains("head is larger"));
}

TEST_CASE("garbage and ambiguous framing are refused without quoting header values",
          "[http_client]") {
  const std::vector<std::string> garbage = {
      "garbage\r\n\r\n",
      "HTTP/2 200\r\n\r\n",
      "HTTP/1.1 20 OK\r\n\r\n",
      "HTTP/1.1 2000 OK\r\n\r\n",
      "HTTP/1.1 abc OK\r\n\r\n",
      "HTTP/1.1 099 Low\r\n\r\n",
      "HTTP/1.2 200 OK\r\n\r\n",
      "HTTP/1.1  200 OK\r\n\r\n",
      "\r\n\r\n",
      "HTTP/1.1 200 OK\r\nno colon here\r\n\r\n",
      "HTTP/1.1 200 OK\r\nBad Name: secret\r\n\r\n",
      "HTTP/1.1 200 OK\r\nName : secret\r\n\r\n",
      "HTTP/1.1 200 OK\r\nX-A: secret\r\n folded\r\n\r\n",
      "HTTP/1.1 200 OK\r\nX-A: sec\rret\r\n\r\n",
      "HTTP/1.1 200 OK\r\nX-A: sec\0ret\r\n\r\n"s,
      "HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
      "HTTP/1.1 200 OK\r\nContent-Length: secret\r\n\r\n",
      "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nxy",
      "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n",
      "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n0\r\n\r\n",
      "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nxyz\r\n",
      "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n;ext\r\n",
      "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5 x\r\nhello\r\n0\r\n\r\n",
      "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhelloXX0\r\n\r\n",
      "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nno colon\r\n\r\n",
      "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + std::string(5000, '1'),
  };
  for (const auto& raw : garbage) {
    INFO(raw);
    try {
      parse_http_response(raw);
      FAIL("accepted");
    } catch (const HttpClientError& e) {
      CHECK(std::string(e.what()).find("secret") == std::string::npos);
    }
  }
}

TEST_CASE("repeated equal Content-Length headers and bytes after the body are tolerated",
          "[http_client]") {
  const auto response = parse_http_response(
      "HTTP/1.1 200 OK\r\nContent-Length: 2\r\ncontent-length: 2\r\n\r\nokEXTRA");
  CHECK(response.body == "ok");
}

TEST_CASE("proxy_for reads https_proxy, http_proxy and no_proxy as curl does", "[http_client]") {
  const auto https_url = parse_upstream_url("https://objects.github.example/runner.tgz");
  const auto http_url = parse_upstream_url("http://10.1.2.3:8080/runner.tgz");
  ProxySettings proxies{
      .http_proxy = "proxy.lan:3128", .https_proxy = "http://secure-proxy.lan", .no_proxy = ""};
  const auto https_proxy = proxy_for(https_url, proxies);
  REQUIRE(https_proxy);
  CHECK(https_proxy->host == "secure-proxy.lan");
  CHECK(https_proxy->port == 1080);  // curl's default proxy port
  CHECK_FALSE(https_proxy->tls);
  CHECK(proxy_for(http_url, proxies)->port == 3128);  // no scheme: an HTTP proxy
  CHECK(proxy_for(https_url, {.http_proxy = "", .https_proxy = "http://[fd00::1]", .no_proxy = ""})
            ->port == 1080);
  CHECK(proxy_for(https_url, {.http_proxy = "", .https_proxy = "", .no_proxy = ""}) ==
        std::nullopt);

  const auto bypassed = [&](const UpstreamUrl& url, const std::string& no_proxy) {
    proxies.no_proxy = no_proxy;
    return !proxy_for(url, proxies).has_value();
  };
  CHECK(bypassed(https_url, "*"));
  CHECK_FALSE(bypassed(https_url, "example.com, *"));  // "*" only counts alone
  CHECK(bypassed(https_url, "github.example"));
  CHECK(bypassed(https_url, ".github.example"));
  CHECK(bypassed(https_url, "lan, GITHUB.example:443"));
  CHECK_FALSE(bypassed(https_url, "hub.example"));  // a domain, not a suffix of letters
  CHECK(bypassed(http_url, "10.1.2.3"));
  CHECK(bypassed(http_url, "10.0.0.0/8"));
  CHECK_FALSE(bypassed(http_url, "10.1.2.0/31, 0.2.3"));  // no suffix matching of addresses
  CHECK_FALSE(bypassed(http_url, "11.0.0.0/8"));
  CHECK(bypassed(parse_upstream_url("https://[fd00::5]/x"), "fd00::/16"));
  CHECK_THROWS_AS(
      proxy_for(https_url,
                {.http_proxy = "", .https_proxy = "https://tls-proxy.lan", .no_proxy = ""}),
      HttpClientError);
}
