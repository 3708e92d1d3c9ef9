#include "net/curl_get.hpp"

#include <algorithm>
#include <cctype>
#include <curl/curl.h>
#include <exception>
#include <fstream>
#include <memory>
#include <mutex>
#include <sstream>

namespace garm_edge::net {
namespace {

using SteadyClock = std::chrono::steady_clock;

constexpr const char* kSystemBundle = "/etc/ssl/certs/ca-certificates.crt";
/// Bigger reads mean fewer calls into the sink; still far below the pull's memory bar.
constexpr long kBufferBytes = 128 * 1024;
/// A head with more lines than this is no file server's.
constexpr std::size_t kMaxHeaders = 200;

struct EasyCleanup {
  void operator()(CURL* easy) const { curl_easy_cleanup(easy); }
};
struct ListCleanup {
  void operator()(curl_slist* list) const { curl_slist_free_all(list); }
};
using Easy = std::unique_ptr<CURL, EasyCleanup>;
using HeaderList = std::unique_ptr<curl_slist, ListCleanup>;

void initialize_libcurl_once() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

bool is_redirect(long status) {
  return status == 301 || status == 302 || status == 303 || status == 307 || status == 308;
}

/// The system's CAs and the extra ones, as one PEM blob: libcurl then trusts exactly these.
const std::string& system_bundle() {
  static const std::string text = [] {
    std::ifstream in(kSystemBundle, std::ios::binary);
    std::ostringstream out;
    out << in.rdbuf();
    return out.str();
  }();
  return text;
}

std::string trim(std::string_view text) {
  const auto first = text.find_first_not_of(" \t\r\n");
  const auto last = text.find_last_not_of(" \t\r\n");
  return first == std::string_view::npos ? "" : std::string(text.substr(first, last - first + 1));
}

/// One hop's exchange as libcurl's callbacks see it.
struct Transfer {
  CURL* easy = nullptr;
  const HeadHandler* on_head = nullptr;
  const std::atomic<bool>* stop = nullptr;
  ClientResponse head;  // the latest response's head (a proxy's CONNECT answer comes first)
  bool head_delivered = false;
  bool redirect = false;
  bool dropped = false;  // the body is not wanted: the transfer was ended on purpose
  bool stopped = false;
  BodySink sink;
  std::exception_ptr failure;

  void deliver_head() {
    head_delivered = true;
    long status = 0;
    curl_easy_getinfo(easy, CURLINFO_RESPONSE_CODE, &status);
    head.status = static_cast<int>(status);
    if (is_redirect(status) && head.header("location")) {
      redirect = true;
      return;
    }
    sink = (*on_head)(head);
  }
};

std::size_t on_header_line(char* data, std::size_t size, std::size_t count, void* user) {
  auto& transfer = *static_cast<Transfer*>(user);
  const std::string_view line(data, size * count);
  if (line.starts_with("HTTP/")) {
    transfer.head = {};  // a new response: an interim or a proxy's answer came before
  } else if (const auto colon = line.find(':'); colon != std::string_view::npos) {
    if (transfer.head.headers.size() >= kMaxHeaders) {
      return 0;
    }
    auto name = std::string(line.substr(0, colon));
    std::transform(name.begin(), name.end(), name.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    transfer.head.headers.emplace_back(std::move(name), trim(line.substr(colon + 1)));
  }
  return size * count;
}

std::size_t on_body(char* data, std::size_t size, std::size_t count, void* user) {
  auto& transfer = *static_cast<Transfer*>(user);
  try {
    if (!transfer.head_delivered) {
      transfer.deliver_head();
    }
    if (!transfer.sink) {
      transfer.dropped = true;  // a redirect's body, or one the caller refused: never read
      return 0;
    }
    transfer.sink(transfer.head.status, {data, size * count});
    return size * count;
  } catch (...) {
    transfer.failure = std::current_exception();
    return 0;
  }
}

int on_progress(void* user, curl_off_t, curl_off_t, curl_off_t, curl_off_t) {
  auto& transfer = *static_cast<Transfer*>(user);
  if (transfer.stop != nullptr && *transfer.stop) {
    transfer.stopped = true;
    return 1;
  }
  return 0;
}

/// "https://host/path?query" checked as the agent's client checks a URL: http or https, a
/// host, a port. Gives "host:port" for messages.
UpstreamUrl checked_url(std::string_view url) {
  url = url.substr(0, url.find_first_of("?#"));
  return parse_upstream_url(url);
}

std::string where_of(const UpstreamUrl& url) {
  const bool ipv6 = url.host.find(':') != std::string::npos;
  return (ipv6 ? "[" + url.host + "]" : url.host) + ":" + std::to_string(url.port);
}

template <typename Value>
void set(CURL* easy, CURLoption option, Value value) {
  if (const auto rc = curl_easy_setopt(easy, option, value); rc != CURLE_OK) {
    throw HttpClientError(std::string("libcurl: ") + curl_easy_strerror(rc));
  }
}

class Hop {
 public:
  Hop(CURL* easy, const CurlGet& get, const std::string& url, const UpstreamUrl& located,
      bool to_origin)
      : easy_(easy) {
    curl_easy_reset(easy);
    set(easy, CURLOPT_URL, url.c_str());
    set(easy, CURLOPT_PROTOCOLS_STR, "http,https");
    set(easy, CURLOPT_FOLLOWLOCATION, 0L);
    set(easy, CURLOPT_NOSIGNAL, 1L);
    set(easy, CURLOPT_BUFFERSIZE, kBufferBytes);
    set(easy, CURLOPT_ERRORBUFFER, error_);
    const auto proxy = proxy_for(located, get.proxies);
    proxy_ = proxy ? "http://" + where_of(*proxy) : "";  // "": not the environment's either
    set(easy, CURLOPT_PROXY, proxy_.c_str());
    if (!get.extra_ca_pem.empty()) {
      auto pem = system_bundle() + "\n" + get.extra_ca_pem;  // copied by libcurl
      curl_blob blob{.data = pem.data(), .len = pem.size(), .flags = CURL_BLOB_COPY};
      set(easy, CURLOPT_CAINFO_BLOB, &blob);
    }
    for (const auto& [name, value] : get.headers) {
      add_header(name + ": " + value);
    }
    if (!get.bearer_token.empty() && to_origin) {
      add_header("Authorization: Bearer " + get.bearer_token);
    }
    set(easy, CURLOPT_HTTPHEADER, headers_.get());
  }

  /// The handle outlives the hop: it keeps no pointer into it.
  ~Hop() {
    curl_easy_setopt(easy_, CURLOPT_ERRORBUFFER, nullptr);
    curl_easy_setopt(easy_, CURLOPT_HTTPHEADER, nullptr);
  }
  Hop(const Hop&) = delete;
  Hop& operator=(const Hop&) = delete;

  void add_header(const std::string& line) {
    auto* grown = curl_slist_append(headers_.get(), line.c_str());
    if (grown == nullptr) {
      throw HttpClientError("libcurl: out of memory for a header");
    }
    static_cast<void>(headers_.release());
    headers_.reset(grown);
  }

  void limit_time(std::chrono::milliseconds left, const CurlGet& get) {
    set(easy_, CURLOPT_TIMEOUT_MS, static_cast<long>(left.count()));
    set(easy_, CURLOPT_CONNECTTIMEOUT_MS,
        static_cast<long>(std::min(left, get.connect_timeout).count()));
    if (get.stall.count() > 0) {
      set(easy_, CURLOPT_LOW_SPEED_LIMIT, 1L);
      set(easy_, CURLOPT_LOW_SPEED_TIME,
          static_cast<long>(std::max<long>(1, static_cast<long>(get.stall.count() / 1000))));
    }
  }

  CURLcode perform(Transfer& transfer) {
    set(easy_, CURLOPT_HEADERFUNCTION, on_header_line);
    set(easy_, CURLOPT_HEADERDATA, &transfer);
    set(easy_, CURLOPT_WRITEFUNCTION, on_body);
    set(easy_, CURLOPT_WRITEDATA, &transfer);
    set(easy_, CURLOPT_XFERINFOFUNCTION, on_progress);
    set(easy_, CURLOPT_XFERINFODATA, &transfer);
    set(easy_, CURLOPT_NOPROGRESS, 0L);
    return curl_easy_perform(easy_);
  }

  std::string error(CURLcode rc) const {
    return error_[0] != '\0' ? std::string(error_) : curl_easy_strerror(rc);
  }

 private:
  CURL* easy_;
  std::string proxy_;
  HeaderList headers_;
  char error_[CURL_ERROR_SIZE] = {};
};

}  // namespace

CurlAnswer curl_get(const CurlGet& get, const HeadHandler& on_head) {
  initialize_libcurl_once();
  const Easy easy(curl_easy_init());
  if (!easy) {
    throw HttpClientError("libcurl: cannot make a handle");
  }
  const auto deadline = SteadyClock::now() + get.timeout;
  std::string url = get.url;
  auto located = checked_url(url);
  const auto origin = located;
  for (int hop = 0; hop <= get.max_redirects; ++hop) {
    if (get.stop != nullptr && *get.stop) {
      throw HttpClientError("the download was stopped");
    }
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - SteadyClock::now());
    if (left.count() <= 0) {
      throw HttpClientError("the download did not finish within " +
                            std::to_string(get.timeout.count() / 1000) + " s");
    }
    const auto where = where_of(located);
    Hop exchange(
        easy.get(), get, url, located,
        located.host == origin.host && located.port == origin.port && located.tls == origin.tls);
    exchange.limit_time(left, get);
    Transfer transfer{.easy = easy.get(), .on_head = &on_head, .stop = get.stop};
    const auto rc = exchange.perform(transfer);
    if (transfer.failure) {
      std::rethrow_exception(transfer.failure);
    }
    if (transfer.stopped) {
      throw HttpClientError("the download was stopped");
    }
    if (rc != CURLE_OK && !(rc == CURLE_WRITE_ERROR && transfer.dropped)) {
      throw HttpClientError(where + ": " + exchange.error(rc));
    }
    if (!transfer.head_delivered) {
      transfer.deliver_head();  // an answer without a body
    }
    if (!transfer.redirect) {
      return {.response = std::move(transfer.head), .where = where};
    }
    const char* next = nullptr;
    curl_easy_getinfo(easy.get(), CURLINFO_REDIRECT_URL, &next);
    if (next == nullptr) {
      throw HttpClientError(where + " redirected to a location that cannot be resolved");
    }
    UpstreamUrl next_located;
    try {
      next_located = checked_url(next);
    } catch (const std::exception& e) {
      throw HttpClientError(where + " redirected to a location that is not followed: " + e.what());
    }
    if (located.tls && !next_located.tls) {
      throw HttpClientError(where + " redirected from https to plain http");
    }
    located = std::move(next_located);
    url = next;
  }
  throw HttpClientError("more than " + std::to_string(get.max_redirects) + " redirects");
}

}  // namespace garm_edge::net
