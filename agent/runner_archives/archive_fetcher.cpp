#include "agent/runner_archives/archive_fetcher.hpp"

#include <array>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <limits>
#include <unistd.h>

#include <mbedtls/sha256.h>

#include "common/hex.hpp"

namespace garm_edge::agent {
namespace {

constexpr int kMaxRedirects = 5;

bool is_redirect(int status) {
  return status == 301 || status == 302 || status == 303 || status == 307 || status == 308;
}

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

/// The bytes of one 200 answer: into the file and the running hash.
class ArchiveWriter {
 public:
  ArchiveWriter(int fd, const WriteBudget& budget, const std::atomic<bool>& stop)
      : fd_(fd), budget_(budget), stop_(stop) {
    mbedtls_sha256_init(&hash_);
    mbedtls_sha256_starts_ret(&hash_, 0);
  }
  ~ArchiveWriter() { mbedtls_sha256_free(&hash_); }
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
    write_all(fd_, data);
    mbedtls_sha256_update_ret(&hash_, reinterpret_cast<const unsigned char*>(data.data()),
                              data.size());
    size_ += data.size();
  }

  FetchedArchive finish() {
    std::array<unsigned char, 32> digest{};
    mbedtls_sha256_finish_ret(&hash_, digest.data());
    return {.sha256 = to_hex(digest), .size = size_};
  }

 private:
  int fd_;
  const WriteBudget& budget_;
  const std::atomic<bool>& stop_;
  mbedtls_sha256_context hash_;
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

LocatedUrl locate(std::string_view text) {
  text = text.substr(0, text.find('#'));
  const auto question = text.find('?');
  LocatedUrl located{.url = net::parse_upstream_url(text.substr(0, question)), .target = ""};
  located.target = located.url.path.empty() ? "/" : located.url.path;
  if (question != std::string_view::npos) {
    located.target += std::string(text.substr(question));
  }
  return located;
}

LocatedUrl resolve_redirect(const LocatedUrl& from, std::string_view location) {
  if (location.starts_with("/") && !location.starts_with("//")) {
    const auto scheme = from.url.tls ? "https://" : "http://";
    const bool ipv6 = from.url.host.find(':') != std::string::npos;
    const auto host = ipv6 ? "[" + from.url.host + "]" : from.url.host;
    return locate(scheme + host + ":" + std::to_string(from.url.port) + std::string(location));
  }
  return locate(location);
}

namespace {

/// Where a redirect points, or an error that says it came from `here`'s redirect (a
/// `file://` or `ftp://` Location is refused as such, not as a URL of the config).
LocatedUrl followable_redirect(const LocatedUrl& from, std::string_view location,
                               const std::string& here) {
  try {
    return resolve_redirect(from, location);
  } catch (const std::exception& e) {
    throw ArchiveError(here + " redirected to a location that is not followed: " + e.what());
  }
}

}  // namespace

FollowedAnswer get_following_redirects(
    const RedirectingGet& get, const std::function<std::shared_ptr<const net::TlsConfig>()>& trust,
    const net::HeadHandler& on_head) {
  const std::atomic<bool> never{false};
  const auto& stop = get.stop != nullptr ? *get.stop : never;
  const auto deadline = std::chrono::steady_clock::now() + get.timeout;
  auto located = locate(get.url);
  const auto origin = located.url;
  for (int hop = 0; hop <= kMaxRedirects; ++hop) {
    if (stop) {
      throw ArchiveError("the download was stopped");
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      throw ArchiveError(
          "the download did not finish within " +
          std::to_string(std::chrono::duration_cast<std::chrono::seconds>(get.timeout).count()) +
          " s");
    }
    // The connect's time comes out of the same budget.
    const auto connect = std::min<std::chrono::milliseconds>(left, std::chrono::seconds(10));
    net::HttpClientOptions options{.connect_timeout = connect,
                                   .request_timeout = std::max<std::chrono::milliseconds>(
                                       left - connect, std::chrono::seconds(1)),
                                   // the sink bounds what is kept; nothing is held
                                   .max_response_bytes = std::numeric_limits<std::size_t>::max(),
                                   .proxy = net::proxy_for(located.url, get.proxies),
                                   .stop = &stop,
                                   .stall_timeout = get.stall};
    net::ClientRequest request{
        .method = "GET", .target = located.target, .headers = get.headers, .body = ""};
    if (!get.bearer_token.empty() && located.url.host == origin.host &&
        located.url.port == origin.port && located.url.tls == origin.tls) {
      request.headers.emplace_back("Authorization", "Bearer " + get.bearer_token);
    }
    const auto answer = net::send_request_with_head(
        located.url, request, options, located.url.tls ? trust() : nullptr,
        [&](const net::ClientResponse& head) -> net::BodySink {
          const net::BodySink dropped = [](int, std::string_view) {};
          if (is_redirect(head.status) && head.header("location")) {
            return dropped;
          }
          auto sink = on_head(head);
          return sink ? sink : dropped;  // never held: a hostile server sends no end
        });
    const auto location = answer.header("location");
    if (!is_redirect(answer.status) || !location) {
      return {.response = answer,
              .where = located.url.host + ":" + std::to_string(located.url.port)};
    }
    const auto here = located.url.host + ":" + std::to_string(located.url.port);
    auto next = followable_redirect(located, *location, here);
    if (located.url.tls && !next.url.tls) {
      throw ArchiveError(located.url.host + ":" + std::to_string(located.url.port) +
                         " redirected from https to plain http");
    }
    located = std::move(next);
  }
  throw ArchiveError("more than " + std::to_string(kMaxRedirects) + " redirects");
}

FetchedArchive HttpArchiveFetcher::fetch(const ArchiveSource& source, int fd,
                                         const WriteBudget& budget, const std::atomic<bool>& stop) {
  ArchiveWriter writer(fd, budget, stop);
  const RedirectingGet get{
      .url = source.url,
      .headers = {{"User-Agent", "garm-edge-agent"}, {"Accept", "application/octet-stream"}},
      .bearer_token = source.bearer_token,
      .proxies = source.proxies,
      .timeout = timeout_,
      .stop = &stop,
      .stall = {}};
  const auto answer = get_following_redirects(
      get, [&] { return trust_.trusting(source.ca_bundle); },
      [&](const net::ClientResponse& head) -> net::BodySink {
        if (head.status != 200) {
          return nullptr;
        }
        refuse_if_too_large(head, budget);
        return [&writer](int status, std::string_view data) { writer.take(status, data); };
      });
  if (answer.response.status != 200) {
    throw ArchiveError("HTTP " + std::to_string(answer.response.status) + " from " + answer.where);
  }
  return writer.finish();
}

}  // namespace garm_edge::agent
