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

}  // namespace garm_edge::testing
