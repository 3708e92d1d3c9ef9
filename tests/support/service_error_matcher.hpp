#pragma once

#include <string>

#include <catch2/catch.hpp>

#include "agent/instances/service_error.hpp"

namespace garm_edge::testing {

/// For CHECK_THROWS_MATCHES: a ServiceError with `code`.
inline auto has_code(agent::ServiceError::Code code) {
  return Catch::Predicate<agent::ServiceError>(
      [code](const agent::ServiceError& e) { return e.code() == code; },
      "error code " + std::string(agent::to_string(code)));
}

/// For CHECK_THROWS_MATCHES: a ServiceError whose message holds `text`.
inline auto message_contains(const std::string& text) {
  return Catch::Predicate<agent::ServiceError>(
      [text](const agent::ServiceError& e) {
        return std::string(e.what()).find(text) != std::string::npos;
      },
      "message containing \"" + text + "\"");
}

}  // namespace garm_edge::testing
