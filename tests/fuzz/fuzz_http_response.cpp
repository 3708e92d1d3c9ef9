// Any bytes from garm (or whatever answers at its URL), fed in arbitrary pieces: the response
// parser never crashes, only ever fails with HttpClientError, and never returns a body larger
// than its limit.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "net/http_client.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace garm_edge::net;
  if (size == 0) {
    return 0;
  }
  std::string_view input(reinterpret_cast<const char*>(data) + 1, size - 1);
  const std::size_t piece = 1 + data[0] % 64;  // the first byte chooses how input trickles in
  constexpr std::size_t kLimit = 4096;
  HttpResponseParser parser(kLimit, (data[0] & 0x80U) != 0);
  try {
    while (!input.empty() && !parser.complete()) {
      parser.feed(input.substr(0, piece));
      input.remove_prefix(std::min(piece, input.size()));
    }
    if (!parser.complete()) {
      parser.finish();
    }
    const auto response = parser.take();
    if (response.body.size() > kLimit || response.status < 100 || response.status > 999) {
      std::abort();
    }
  } catch (const HttpClientError&) {
  }
  return 0;
}
