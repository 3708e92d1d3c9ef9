#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "net/curl_get.hpp"
#include "net/http_client.hpp"

namespace garm_edge::agent {

/// Where one runner archive comes from, as garm's bootstrap names it (its `tools` entry for
/// the guest's OS and architecture, and the pool's proxy).
struct ArchiveSource {
  std::string url;
  std::string sha256;        // 64 lower-case hex digits: the only name the cache knows
  std::string bearer_token;  // GHES's temp_download_token, sent only to the URL's own host
  std::string ca_bundle;     // PEM trusted besides the system CAs
  net::ProxySettings proxies;

  bool operator==(const ArchiveSource&) const = default;
};

/// A download that failed; the message names the step and the host, never a token.
class ArchiveError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct FetchedArchive {
  std::string sha256;  // of the bytes written, lower-case hex
  std::uint64_t size = 0;
};

/// The disk an archive may take. A refusal ends the download.
struct WriteBudget {
  /// Asked once the server announces the archive's size, before anything is written: could
  /// an archive of that size fit at all?
  std::function<bool(std::uint64_t)> could_fit;
  /// Asked before each piece is written, with the piece's size.
  std::function<bool(std::uint64_t)> may_write;
};

/// The boundary to the internet: downloads an archive into an open file.
class ArchiveFetcher {
 public:
  virtual ~ArchiveFetcher() = default;
  /// Writes the archive to `fd` (positioned at 0, empty) and returns what was written. Throws
  /// ArchiveError when the download fails, `may_write` refuses a piece, or `stop` becomes true
  /// (within moments, even while the server sends nothing).
  virtual FetchedArchive fetch(const ArchiveSource& source, int fd, const WriteBudget& may_write,
                               const std::atomic<bool>& stop) = 0;
};

/// HTTPS (or HTTP) GET through libcurl (net/curl_get.hpp) with up to 5 redirects (GitHub
/// answers with a signed URL on another host; never from https down to http), through the
/// source's proxy, all within `timeout`.
class HttpArchiveFetcher final : public ArchiveFetcher {
 public:
  explicit HttpArchiveFetcher(std::chrono::seconds timeout) : timeout_(timeout) {}

  FetchedArchive fetch(const ArchiveSource& source, int fd, const WriteBudget& may_write,
                       const std::atomic<bool>& stop) override;

 private:
  std::chrono::seconds timeout_;
};

}  // namespace garm_edge::agent
