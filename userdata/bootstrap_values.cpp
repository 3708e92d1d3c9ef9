// Checks and normal forms for the bootstrap values the renderers share.

#include <algorithm>
#include <cctype>
#include <string>

#include "common/text.hpp"
#include "userdata/internal.hpp"
#include "wire/base64.hpp"
#include "wire/validate.hpp"

namespace garm_edge::userdata::detail {
namespace {

constexpr std::string_view kBeginCertificate = "-----BEGIN CERTIFICATE-----";
constexpr std::string_view kEndCertificate = "-----END CERTIFICATE-----";
constexpr std::size_t kSha256HexDigits = 64;

std::string without_whitespace(std::string_view text) {
  std::string out;
  for (char c : text) {
    if (!std::isspace(static_cast<unsigned char>(c))) {
      out += c;
    }
  }
  return out;
}

void check_proxy_value(std::string_view value, std::string_view field) {
  // apt.conf strings have no escapes and the runner's .env is one variable per line.
  if (!is_plain_text(value) || value.find_first_of("\"\\") != std::string_view::npos) {
    throw UserDataError("proxy_config." + std::string(field) +
                        ": must be a URL without quotes, backslashes or control characters");
  }
}

}  // namespace

std::string without_trailing_slashes(std::string_view url) {
  while (url.ends_with('/')) {
    url.remove_suffix(1);
  }
  return std::string(url);
}

std::vector<std::string> pem_certificates(std::string_view bundle) {
  std::vector<std::string> certificates;
  for (auto begin = bundle.find(kBeginCertificate); begin != std::string_view::npos;
       begin = bundle.find(kBeginCertificate, begin + 1)) {
    const auto end = bundle.find(kEndCertificate, begin);
    if (end == std::string_view::npos) {
      throw UserDataError("ca_cert_bundle: a certificate block is not closed by " +
                          std::string(kEndCertificate));
    }
    const auto block = bundle.substr(begin, end + kEndCertificate.size() - begin);
    if (!wire::base64_decode(pem_body(block))) {
      throw UserDataError("ca_cert_bundle: certificate " + std::to_string(certificates.size() + 1) +
                          " is not valid base64");
    }
    certificates.emplace_back(block);
  }
  if (certificates.empty()) {
    throw UserDataError("ca_cert_bundle: is not PEM (no " + std::string(kBeginCertificate) +
                        " block)");
  }
  return certificates;
}

std::string pem_body(std::string_view certificate) {
  const auto body_start = certificate.find(kBeginCertificate) + kBeginCertificate.size();
  const auto body_end = certificate.rfind(kEndCertificate);
  return without_whitespace(certificate.substr(body_start, body_end - body_start));
}

const wire::ProxyConfig& checked_proxy_config(const wire::BootstrapInstance& bootstrap) {
  const auto& proxy = bootstrap.proxy_config;
  check_proxy_value(proxy.http_proxy, "http_proxy");
  check_proxy_value(proxy.https_proxy, "https_proxy");
  check_proxy_value(proxy.no_proxy, "no_proxy");
  return proxy;
}

std::string joined_labels(const wire::BootstrapInstance& bootstrap) {
  std::string labels;
  for (const auto& label : bootstrap.labels.value_or(std::vector<std::string>{})) {
    labels += (labels.empty() ? "" : ",") + label;
  }
  return labels;
}

void check_endpoint_urls(const GuestEndpoints& endpoints) {
  if (!wire::is_http_url(endpoints.callback_url)) {
    throw UserDataError("callback URL: must be an http(s) URL, got \"" +
                        printable_excerpt(endpoints.callback_url) + "\"");
  }
  if (!wire::is_http_url(endpoints.metadata_url)) {
    throw UserDataError("metadata URL: must be an http(s) URL, got \"" +
                        printable_excerpt(endpoints.metadata_url) + "\"");
  }
}

std::vector<std::string> checked_ssh_keys(const wire::BootstrapInstance& bootstrap) {
  auto keys = bootstrap.ssh_keys.value_or(std::vector<std::string>{});
  for (std::size_t i = 0; i < keys.size(); ++i) {
    if (!is_plain_text(keys[i])) {
      throw UserDataError("ssh-keys[" + std::to_string(i) +
                          "]: must be one line of UTF-8 text without control characters");
    }
  }
  return keys;
}

std::string normalized_sha256(const wire::RunnerApplicationDownload& tool) {
  std::string checksum = tool.sha256_checksum.value_or("");
  if (checksum.empty()) {
    return checksum;
  }
  const bool is_hex = std::all_of(checksum.begin(), checksum.end(), [](char c) {
    return std::isxdigit(static_cast<unsigned char>(c)) != 0;
  });
  if (checksum.size() != kSha256HexDigits || !is_hex) {
    throw UserDataError("tools.sha256_checksum: must be 64 hex digits, got \"" +
                        printable_excerpt(checksum) + "\"");
  }
  std::transform(checksum.begin(), checksum.end(), checksum.begin(), [](char c) {
    return static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  });
  return checksum;
}

std::string required_download_url(const wire::RunnerApplicationDownload& tool) {
  const auto url = tool.download_url.value_or("");
  if (!wire::is_http_url(url)) {
    throw UserDataError("tools.download_url: must be an http(s) URL, got \"" +
                        printable_excerpt(url) + "\"");
  }
  return url;
}

}  // namespace garm_edge::userdata::detail

namespace garm_edge::userdata {

std::string callback_base(std::string_view callback_url) {
  auto base = detail::without_trailing_slashes(callback_url);
  if (base.ends_with("/status")) {
    base.resize(base.size() - std::string_view("/status").size());
  }
  return base;
}

}  // namespace garm_edge::userdata
