// The guest service's way to the host's registry mirror (docs/caches.md): guests pull through
// it at the guest service's address; nothing else reaches the mirror.
#include <filesystem>

#include "agent/guests/guest_endpoint_support.hpp"
#include "agent/guests/guest_service.hpp"
#include "common/text.hpp"

namespace garm_edge::agent {
namespace {

constexpr std::size_t kMaxTarget = 2048;

net::HttpResponse registry_error(int status, std::string_view code, std::string_view message) {
  return {.status = status,
          .content_type = "application/json",
          .body = R"({"errors":[{"code":")" + std::string(code) + R"(","message":")" +
                  std::string(message) + R"("}]})",
          .headers = {}};
}

/// Plain registry paths only: no "..", nothing a shell or a log could misread, and no
/// percent-encoding in the path (no registry name, tag or digest needs it, and the registry
/// would decode "/v2/%5Fcatalog" into the catalog).
bool plain_target(std::string_view path, std::string_view query) {
  constexpr std::string_view kPlain =
      "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789/._-:@=&+";
  return path.size() + query.size() <= kMaxTarget &&
         path.find_first_not_of(kPlain) == std::string_view::npos &&
         query.find_first_not_of(std::string(kPlain) + "%") == std::string_view::npos &&
         path.find("..") == std::string_view::npos;
}

/// `/v2/<name>/blobs/sha256:<hex>`: the file the registry keeps it in.
std::optional<std::filesystem::path> blob_file(std::string_view path,
                                               const std::filesystem::path& blob_root) {
  constexpr std::string_view kBlobs = "/blobs/sha256:";
  const auto at = path.rfind(kBlobs);
  if (at == std::string_view::npos) {
    return std::nullopt;
  }
  const auto hex = path.substr(at + kBlobs.size());
  if (hex.size() != 64 || hex.find_first_not_of("0123456789abcdef") != std::string_view::npos) {
    return std::nullopt;
  }
  return blob_root / "sha256" / std::string(hex.substr(0, 2)) / std::string(hex) / "data";
}

/// The registry's headers a client needs: the digest, the API version, pagination.
void pass_registry_headers(const net::ClientResponse& from, net::HttpResponse& to) {
  for (const char* name :
       {"docker-content-digest", "docker-distribution-api-version", "etag", "link"}) {
    if (const auto value = from.header(name)) {
      to.headers.emplace_back(name, std::string(*value));
    }
  }
}

}  // namespace

void GuestService::relay_to_mirror(const net::HttpRequest& request, const std::string& source_ip,
                                   const Respond& respond) {
  if (!index_.holds_address(source_ip)) {
    return respond(refuse(source_ip));
  }
  ++counters_.mirror_requests;
  if (request.method != "GET" && request.method != "HEAD") {
    return respond(registry_error(405, "UNSUPPORTED", "the mirror only serves pulls"));
  }
  if (!plain_target(request.path, request.query)) {
    return respond(registry_error(400, "NAME_INVALID", "not a registry path"));
  }
  // The catalog names every repository any tenant pulled: no pull needs it.
  if (request.path == "/v2/_catalog" || request.path.starts_with("/v2/_catalog/")) {
    return respond(registry_error(403, "DENIED", "the mirror does not list its repositories"));
  }
  const bool head = request.method == "HEAD";
  std::uint64_t held = 0;
  if (const auto blob = blob_file(request.path, mirror_->blob_root); blob && !head) {
    std::error_code ec;
    held = std::filesystem::file_size(*blob, ec);
    (ec ? counters_.mirror_misses : counters_.mirror_hits) += 1;
    if (ec) {
      held = 0;
    }
  }
  // Only what a pull needs: the guest's own credentials (a job's token) never reach the
  // mirror, which pulls with the operator's.
  net::ClientRequest upstream{
      .method = request.method,
      .target = request.path + (request.query.empty() ? "" : "?" + request.query),
      .headers = {},
      .body = ""};
  for (const auto& [name, value] : request.headers) {
    if (name == "accept") {
      upstream.headers.emplace_back("Accept", value);
    }
  }
  const auto timeout = std::chrono::milliseconds(config_.guests.runner_download_timeout);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::shared_ptr<net::BodyPipe> pipe;
  std::string whole;
  auto on_head = [&](const net::ClientResponse& answer) -> net::BodySink {
    if (head || answer.status != 200) {
      return [&whole](int, std::string_view data) {
        if (data.size() > kMaxWholeAnswerBytes - whole.size()) {
          throw net::HttpClientError("the mirror's answer is larger than the agent reads whole");
        }
        whole.append(data);
      };
    }
    pipe = std::make_shared<net::BodyPipe>();
    auto response = answer_for_guest(answer, "", pipe);
    pass_registry_headers(answer, response);
    respond(std::move(response));
    return [this, pipe = pipe, deadline](int, std::string_view data) {
      const auto stalled = std::chrono::steady_clock::now() + kMaxGuestStall;
      if (!pipe->write(data, std::min(deadline, stalled))) {
        throw net::HttpClientError("the guest stopped reading the answer");
      }
      counters_.mirror_bytes_served += data.size();
    };
  };
  net::ClientResponse answer;
  try {
    // Straight to the registry's socket: never through a proxy, and not garm's relay.
    answer = net::send_request_with_head(net::unix_socket_url(mirror_->socket), upstream,
                                         {.connect_timeout = std::chrono::seconds(5),
                                          .request_timeout = timeout,
                                          .max_response_bytes = HttpGarmRelay::kMaxBodyBytes,
                                          .proxy = std::nullopt,
                                          .stop = nullptr},
                                         nullptr, on_head);
  } catch (const std::exception& e) {
    log_.warning("a pull of " + printable_excerpt(request.path, 200) + " from " + source_ip +
                 " through the registry mirror failed: " + e.what());
    if (pipe) {
      return pipe->finish(false);
    }
    return respond(registry_error(502, "UNAVAILABLE", "the registry mirror did not answer"));
  }
  if (pipe) {
    counters_.mirror_bytes_saved += held;
    return pipe->finish(true);
  }
  auto response = answer_for_guest(answer, std::move(whole), nullptr);
  pass_registry_headers(answer, response);
  if (head) {
    const auto length = answer.header("content-length");
    response.head_length = length ? std::stoull(std::string(*length)) : 0;
  } else {
    counters_.mirror_bytes_served += response.body.size();
  }
  respond(std::move(response));
}

}  // namespace garm_edge::agent
