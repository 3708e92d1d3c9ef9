// Any bytes from the network, fed in arbitrary pieces: the parser never crashes, never
// consumes more than it was given, and a request it completes has a path starting with '/'.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "net/http_request.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace garm_edge::net;
  if (size == 0) {
    return 0;
  }
  std::string_view input(reinterpret_cast<const char*>(data) + 1, size - 1);
  const std::size_t piece = 1 + data[0] % 64;  // the first byte chooses how input trickles in
  HttpRequestParser parser(
      HttpLimits{.max_header_bytes = 2048, .max_headers = 16, .max_body_bytes = 4096});
  while (!input.empty()) {
    const auto chunk = input.substr(0, piece);
    std::size_t consumed = 0;
    const auto result = parser.feed(chunk, consumed);
    if (consumed > chunk.size()) {
      std::abort();
    }
    if (result == HttpRequestParser::Result::error) {
      return 0;
    }
    if (result == HttpRequestParser::Result::complete) {
      const auto request = parser.take();
      if (request.path.empty() || request.path.front() != '/' || request.body.size() > 4096) {
        std::abort();
      }
    }
    input.remove_prefix(consumed);
  }
  return 0;
}
