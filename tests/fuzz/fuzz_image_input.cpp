// What an image server sends: a checksum file looked up by name and a Content-Range header.
// Neither lookup crashes, and what they find is what they promise: a digest of 64 or 128
// lower-case hex digits, a range that starts inside its total.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "agent/images/image_digest.hpp"
#include "agent/images/image_fetcher.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace garm_edge::agent;
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  // The first line names the file to look up; the rest is the checksum file.
  const auto newline = input.find('\n');
  const auto name = input.substr(0, newline);
  const auto file = newline == std::string_view::npos ? std::string_view() : input.substr(newline);
  if (const auto digest = digest_in_checksum_file(file, name)) {
    const bool sized =
        digest->hex.size() == (digest->algorithm == ImageDigest::Algorithm::sha256 ? 64U : 128U);
    for (const char c : digest->hex) {
      if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) {
        std::abort();
      }
    }
    if (!sized) {
      std::abort();
    }
  }
  if (const auto range = parse_content_range(input);
      range && range->total && range->first >= *range->total) {
    std::abort();
  }
  return 0;
}
