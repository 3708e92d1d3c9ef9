#include "agent/guests/guest_endpoint_support.hpp"

#include <algorithm>

#include "common/text.hpp"
#include "net/secret_token.hpp"

namespace garm_edge::agent {

net::HttpResponse service_unavailable() {
  return {.status = 503,
          .content_type = "text/plain; charset=utf-8",
          .body = "service unavailable\n",
          .headers = {{"Retry-After", "5"}}};
}

bool is_one_of(std::string_view suffix, std::initializer_list<std::string_view> paths) {
  if (suffix.ends_with('/')) {
    suffix.remove_suffix(1);
  }
  return std::find(paths.begin(), paths.end(), suffix) != paths.end();
}

/// garm's answer as the guest gets it: status, content type, disposition; `body` or `stream`.
net::HttpResponse answer_for_guest(const net::ClientResponse& answer, std::string body,
                                   std::shared_ptr<net::BodyPipe> stream) {
  net::HttpResponse response{
      .status = answer.status,
      .content_type = std::string(answer.header("content-type").value_or("text/plain")),
      .body = std::move(body),
      .headers = {},
      .stream = std::move(stream)};
  if (const auto disposition = answer.header("content-disposition")) {
    response.headers.emplace_back("Content-Disposition", std::string(*disposition));
  }
  return response;
}

net::HttpResponse not_found() {
  // Go's default 404, so a probe learns nothing about which check failed.
  return {.status = 404,
          .content_type = "text/plain; charset=utf-8",
          .body = "404 page not found\n",
          .headers = {}};
}

net::HttpResponse bad_gateway() {
  return {.status = 502,
          .content_type = "application/json",
          .body = R"({"error":"Server error","details":"garm could not be reached"})",
          .headers = {}};
}

/// garm's own parsing of the header: split on single spaces, exactly two parts, take the
/// second (the scheme word is not checked).
std::optional<std::string> bearer_token(const net::HttpRequest& request) {
  const auto header = request.header("authorization");
  if (!header) {
    return std::nullopt;
  }
  const auto space = header->find(' ');
  if (space == std::string_view::npos || header->find(' ', space + 1) != std::string_view::npos ||
      space + 1 == header->size()) {
    return std::nullopt;
  }
  return std::string(header->substr(space + 1));
}

/// Guest-supplied text made safe to store and log: UTF-8 without control characters, bounded.
std::string guest_text(const nlohmann::json& value, std::size_t max_bytes) {
  if (!value.is_string()) {
    return "";
  }
  const auto text = value.get<std::string>().substr(0, max_bytes);
  if (is_plain_text(text)) {
    return text;
  }
  std::string ascii;
  for (const char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    ascii += (byte < 0x20 || byte >= 0x7f) ? '?' : c;
  }
  return ascii;
}

std::optional<std::int64_t> agent_id_of(const nlohmann::json& body) {
  const auto it = body.find("agent_id");
  if (it != body.end() && it->is_number_integer()) {
    return it->get<std::int64_t>();
  }
  return std::nullopt;
}

/// garm's instance endpoints (garm-contract §3.3), each with or without a trailing slash.
/// Nothing else is forwarded: a guest must not reach garm's other routes through the relay.
bool is_garm_endpoint(bool callback, std::string_view suffix) {
  if (suffix.ends_with('/')) {
    suffix.remove_suffix(1);
  }
  if (suffix.find("..") != std::string_view::npos || suffix.find("//") != std::string_view::npos ||
      suffix.find('%') != std::string_view::npos) {
    return false;
  }
  if (callback) {
    return suffix == "/status" || suffix == "/system-info";
  }
  for (const std::string_view exact :
       {"/install-script", "/runner-registration-token", "/credentials/runner",
        "/credentials/credentials", "/credentials/credentials_rsaparams", "/system/service-name",
        "/systemd/unit-file", "/system/cert-bundle", "/runner-metadata", "/tools/garm-agent"}) {
    if (suffix == exact) {
      return true;
    }
  }
  // /tools/garm-agent/{id} and /tools/garm-agent/{id}/download
  constexpr std::string_view kTool = "/tools/garm-agent/";
  if (!suffix.starts_with(kTool)) {
    return false;
  }
  auto rest = suffix.substr(kTool.size());
  if (rest.ends_with("/download")) {
    rest.remove_suffix(std::string_view("/download").size());
  }
  return !rest.empty() &&
         rest.find_first_not_of("0123456789abcdefABCDEF-") == std::string_view::npos;
}

/// The record read after the index lookup still belongs to the same guest: the instance may
/// have been closed, or deleted and created again under its name, in between.
bool still_admits(const std::optional<InstanceRecord>& record, const std::string& token_hash,
                  std::string GuestRecord::*hash, const std::string& source_ip) {
  return record && record->intent == Intent::created && record->guest && !record->guest->closed &&
         record->guest->ip == source_ip &&
         net::constant_time_equal(record->guest.value().*hash, token_hash);
}

bool is_seed_file(std::string_view file) {
  return file == "meta-data" || file == "user-data" || file == "vendor-data";
}

}  // namespace garm_edge::agent
