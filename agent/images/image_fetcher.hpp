#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

#include "agent/base/config.hpp"
#include "net/curl_get.hpp"

namespace garm_edge::agent {

/// A pull that failed; the message names the step and the host, never a credential.
class ImagePullError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Where a download's bytes go, in order.
class ImageSink {
 public:
  virtual ~ImageSink() = default;
  /// Once, before any byte: the offset the bytes start at (0 when the server sends the whole
  /// file again: what was kept must be dropped) and the file's whole size, when known.
  virtual void begin(std::uint64_t from, std::optional<std::uint64_t> total) = 0;
  virtual void take(std::string_view piece) = 0;
};

/// The boundary to the image server.
class ImageFetcher {
 public:
  virtual ~ImageFetcher() = default;
  /// A small file (a checksum list) of at most `limit` bytes.
  virtual std::string fetch_text(const std::string& url, std::size_t limit,
                                 const std::atomic<bool>& stop) = 0;
  /// The file from byte `offset` on (a Range request when offset > 0), into `sink`. Throws
  /// ImagePullError; what `sink` throws ends the download and comes through.
  virtual void fetch(const std::string& url, std::uint64_t offset, ImageSink& sink,
                     const std::atomic<bool>& stop) = 0;
};

/// HTTP(S) through libcurl (net/curl_get.hpp): redirects, [pull]'s proxies and CA bundle,
/// [pull]'s timeout for each request and its stall limit; a time-out names its setting.
class HttpImageFetcher final : public ImageFetcher {
 public:
  /// Reads the CA bundle; throws ConfigError when it cannot be read.
  explicit HttpImageFetcher(const PullConfig& config);

  std::string fetch_text(const std::string& url, std::size_t limit,
                         const std::atomic<bool>& stop) override;
  void fetch(const std::string& url, std::uint64_t offset, ImageSink& sink,
             const std::atomic<bool>& stop) override;

 private:
  net::CurlGet image_get(const std::string& url, const std::atomic<bool>& stop) const;

  PullConfig limits_;  // proxies, timeout, stall
  std::string ca_bundle_;
};

/// "bytes FIRST-LAST/TOTAL" of a 206 answer: FIRST and TOTAL (TOTAL unknown: "*").
struct ContentRange {
  std::uint64_t first = 0;
  std::optional<std::uint64_t> total;
};
std::optional<ContentRange> parse_content_range(std::string_view value);

}  // namespace garm_edge::agent
