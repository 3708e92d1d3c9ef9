#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace garm_edge::net {

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;
};

std::string_view reason_phrase(int status);
/// The status line, headers (Content-Length, Connection) and body.
std::string serialize(const HttpResponse& response, bool keep_alive);

}  // namespace garm_edge::net
