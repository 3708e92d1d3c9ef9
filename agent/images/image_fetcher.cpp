#include "agent/images/image_fetcher.hpp"

#include <charconv>

#include "common/durable_file.hpp"
#include "net/tls_config.hpp"

namespace garm_edge::agent {
namespace {

std::optional<std::uint64_t> parse_number(std::string_view text) {
  std::uint64_t value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || text.empty()) {
    return std::nullopt;
  }
  return value;
}

std::optional<std::uint64_t> content_length(const net::ClientResponse& head) {
  const auto length = head.header("content-length");
  return length ? parse_number(*length) : std::nullopt;
}

std::string seconds_text(std::chrono::seconds value) {
  return std::to_string(value.count()) + " s";
}

/// Runs one GET; a time-out comes out naming the setting that ended it, not as the TLS
/// layer's "operation timed out". `last_byte` is when the source last sent something.
template <typename Get>
auto naming_time_outs(const PullConfig& limits, Get&& get) {
  const auto started = std::chrono::steady_clock::now();
  auto last_byte = started;
  try {
    return get(last_byte);
  } catch (const ImagePullError&) {
    throw;
  } catch (const std::exception& e) {
    const auto now = std::chrono::steady_clock::now();
    if (now - started >= limits.timeout) {
      throw ImagePullError(std::string(e.what()) + ": the request did not finish within [pull] " +
                           "timeout_minutes (" + std::to_string(limits.timeout.count() / 60) +
                           " min)");
    }
    if (now - last_byte >= limits.stall) {
      throw ImagePullError(std::string(e.what()) + ": the source sent nothing for " +
                           seconds_text(limits.stall) + " ([pull] stall_seconds)");
    }
    throw;
  }
}

/// Where the body of the answer to a download starts, or why it cannot be used.
std::uint64_t start_of(const net::ClientResponse& head, std::uint64_t offset) {
  if (head.status == 200) {
    return 0;
  }
  const auto range = head.header("content-range");
  const auto parsed = range ? parse_content_range(*range) : std::nullopt;
  if (!parsed || parsed->first != offset) {
    throw ImagePullError(
        "the server answered a resumed download with a range that does not "
        "start where the download stopped");
  }
  return offset;
}

}  // namespace

std::optional<ContentRange> parse_content_range(std::string_view value) {
  if (!value.starts_with("bytes ")) {
    return std::nullopt;
  }
  value.remove_prefix(6);
  const auto dash = value.find('-');
  const auto slash = value.find('/');
  if (dash == std::string_view::npos || slash == std::string_view::npos || slash < dash) {
    return std::nullopt;
  }
  const auto first = parse_number(value.substr(0, dash));
  const auto last = parse_number(value.substr(dash + 1, slash - dash - 1));
  const auto total_text = value.substr(slash + 1);
  const auto total = total_text == "*" ? std::nullopt : parse_number(total_text);
  if (!first || !last || *last < *first || (total_text != "*" && (!total || *last >= *total))) {
    return std::nullopt;
  }
  return ContentRange{.first = *first, .total = total};
}

HttpImageFetcher::HttpImageFetcher(const PullConfig& config) : limits_(config) {
  if (!config.ca_bundle.empty()) {
    try {
      ca_bundle_ = read_file(config.ca_bundle).value_or("");
    } catch (const std::exception& e) {
      throw ConfigError(std::string("[pull] ca_bundle: ") + e.what());
    }
    if (ca_bundle_.empty()) {
      throw ConfigError("[pull] ca_bundle " + config.ca_bundle.string() + " is missing or empty");
    }
    try {  // every certificate must parse: a typo would silently drop the CA a source needs
      net::TlsConfig::client_trusting(ca_bundle_, "");
    } catch (const std::exception& e) {
      throw ConfigError("[pull] ca_bundle " + config.ca_bundle.string() + ": " + e.what());
    }
  }
}

net::CurlGet HttpImageFetcher::image_get(const std::string& url,
                                         const std::atomic<bool>& stop) const {
  return {.url = url,
          .headers = {{"User-Agent", "garm-edge-agent"}},
          .bearer_token = "",
          .proxies = limits_.proxies,
          .extra_ca_pem = ca_bundle_,
          .timeout = limits_.timeout,
          .connect_timeout = std::chrono::seconds(10),
          .stall = limits_.stall,
          .stop = &stop,
          .max_redirects = 5};
}

std::string HttpImageFetcher::fetch_text(const std::string& url, std::size_t limit,
                                         const std::atomic<bool>& stop) {
  std::string text;
  const auto answer = naming_time_outs(limits_, [&](auto& last_byte) {
    return net::curl_get(
        image_get(url, stop), [&](const net::ClientResponse& head) -> net::BodySink {
          if (head.status != 200) {
            return nullptr;
          }
          return [&text, &last_byte, limit](int, std::string_view data) {
            last_byte = std::chrono::steady_clock::now();
            if (text.size() + data.size() > limit) {
              throw ImagePullError("more than " + std::to_string(limit) + " bytes");
            }
            text.append(data);
          };
        });
  });
  if (answer.response.status != 200) {
    throw ImagePullError("HTTP " + std::to_string(answer.response.status) + " from " +
                         answer.where);
  }
  return text;
}

void HttpImageFetcher::fetch(const std::string& url, std::uint64_t offset, ImageSink& sink,
                             const std::atomic<bool>& stop) {
  auto get = image_get(url, stop);
  if (offset > 0) {
    get.headers.emplace_back("Range", "bytes=" + std::to_string(offset) + "-");
  }
  const auto answer = naming_time_outs(limits_, [&](auto& last_byte) {
    return net::curl_get(get, [&](const net::ClientResponse& head) -> net::BodySink {
      if (head.status != 200 && head.status != 206) {
        return nullptr;
      }
      const auto from = start_of(head, offset);
      const auto length = content_length(head);
      std::optional<std::uint64_t> total =
          head.status == 206 ? parse_content_range(*head.header("content-range"))->total : length;
      sink.begin(from, total);
      return [&sink, &last_byte](int, std::string_view data) {
        last_byte = std::chrono::steady_clock::now();
        sink.take(data);
      };
    });
  });
  const auto status = answer.response.status;
  if (status == 416 && offset > 0) {
    // What was kept is no prefix of the file the server has now: start over.
    fetch(url, 0, sink, stop);
    return;
  }
  if (status != 200 && status != 206) {
    throw ImagePullError("HTTP " + std::to_string(status) + " from " + answer.where);
  }
}

}  // namespace garm_edge::agent
