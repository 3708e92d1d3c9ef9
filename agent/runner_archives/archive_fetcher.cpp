#include "agent/runner_archives/archive_fetcher.hpp"

#include <array>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <future>
#include <limits>
#include <nettle/sha2.h>
#include <unistd.h>

#include "common/hex.hpp"

namespace garm_edge::agent {
namespace {

void write_all(int fd, std::string_view data) {
  while (!data.empty()) {
    const auto written = ::write(fd, data.data(), data.size());
    if (written < 0 && errno == EINTR) {
      continue;
    }
    if (written <= 0) {
      throw ArchiveError(std::string("writing the archive to the cache: ") + std::strerror(errno));
    }
    data.remove_prefix(static_cast<std::size_t>(written));
  }
}

/// The bytes of one 200 answer: into the file and the running hash. Written a block at a time,
/// each block hashed on a thread of its own while the next one arrives: on a fast link the
/// digest no longer adds to the download's time (as the image pulls do).
class ArchiveWriter {
 public:
  ArchiveWriter(int fd, const WriteBudget& budget, const std::atomic<bool>& stop)
      : fd_(fd), budget_(budget), stop_(stop) {
    sha256_init(&hash_);
  }
  ~ArchiveWriter() { wait_for_hash(); }
  ArchiveWriter(const ArchiveWriter&) = delete;
  ArchiveWriter& operator=(const ArchiveWriter&) = delete;

  void take(int status, std::string_view data) {
    if (stop_) {
      throw ArchiveError("the agent is stopping");
    }
    if (status != 200) {
      return;  // a redirect's or an error's body
    }
    if (!budget_.may_write(data.size())) {
      throw ArchiveError("the runner archive cache has no room for the archive");
    }
    pending_.append(data);
    size_ += data.size();
    if (pending_.size() >= kBlockSize) {
      flush();
    }
  }

  FetchedArchive finish() {
    flush();
    wait_for_hash();
    std::array<std::uint8_t, SHA256_DIGEST_SIZE> digest{};
    sha256_digest(&hash_, digest.size(), digest.data());
    return {.sha256 = to_hex(digest), .size = size_};
  }

 private:
  static constexpr std::size_t kBlockSize = 1 << 20;

  void flush() {
    if (pending_.empty()) {
      return;
    }
    write_all(fd_, pending_);
    wait_for_hash();
    std::swap(hashing_, pending_);
    pending_.clear();
    hashed_ = std::async(std::launch::async, [this] {
      sha256_update(&hash_, hashing_.size(),
                    reinterpret_cast<const std::uint8_t*>(hashing_.data()));
    });
  }
  void wait_for_hash() {
    if (hashed_.valid()) {
      hashed_.get();
    }
  }

  int fd_;
  const WriteBudget& budget_;
  const std::atomic<bool>& stop_;
  sha256_ctx hash_{};    // nettle: the CPU's SHA extensions where it has them
  std::string pending_;  // arrived, not written yet
  std::string hashing_;  // written; a thread hashes it now, untouched here until hashed_ is done
  std::future<void> hashed_;
  std::uint64_t size_ = 0;
};

/// An archive whose announced size cannot fit is refused before a byte is written, so it
/// evicts nothing of the cache on its way to failing.
void refuse_if_too_large(const net::ClientResponse& head, const WriteBudget& budget) {
  const auto length = head.header("content-length");
  std::uint64_t size = 0;
  if (!length ||
      std::from_chars(length->data(), length->data() + length->size(), size).ec != std::errc()) {
    return;  // chunked: each piece is asked for
  }
  if (!budget.could_fit(size)) {
    throw ArchiveError("the runner archive cache has no room for an archive of " +
                       std::to_string(size) + " bytes");
  }
}

}  // namespace

FetchedArchive HttpArchiveFetcher::fetch(const ArchiveSource& source, int fd,
                                         const WriteBudget& budget, const std::atomic<bool>& stop) {
  ArchiveWriter writer(fd, budget, stop);
  const net::CurlGet get{
      .url = source.url,
      .headers = {{"User-Agent", "garm-edge-agent"}, {"Accept", "application/octet-stream"}},
      .bearer_token = source.bearer_token,
      .proxies = source.proxies,
      .extra_ca_pem = source.ca_bundle,
      .timeout = timeout_,
      .connect_timeout = std::chrono::seconds(10),
      .stall = {},
      .stop = &stop,
      .max_redirects = 5};
  net::CurlAnswer answer;
  try {
    answer = net::curl_get(get, [&](const net::ClientResponse& head) -> net::BodySink {
      if (head.status != 200) {
        return nullptr;
      }
      refuse_if_too_large(head, budget);
      return [&writer](int status, std::string_view data) { writer.take(status, data); };
    });
  } catch (const net::HttpClientError& e) {
    throw ArchiveError(e.what());
  }
  if (answer.response.status != 200) {
    throw ArchiveError("HTTP " + std::to_string(answer.response.status) + " from " + answer.where);
  }
  return writer.finish();
}

}  // namespace garm_edge::agent
