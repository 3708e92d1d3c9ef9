#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "net/http_response.hpp"

namespace garm_edge::hub {

inline net::HttpResponse json_answer(int status, const nlohmann::json& body) {
  return {.status = status, .content_type = "application/json", .body = body.dump(), .headers = {}};
}

inline net::HttpResponse error_answer(int status, const std::string& code,
                                      const std::string& message) {
  return json_answer(status, {{"code", code}, {"message", message}});
}

}  // namespace garm_edge::hub
