#pragma once

#include <string_view>

#include "common/log.hpp"

namespace garm_edge::testing {

/// A logger for tests that read nothing it is told.
class QuietLogger final : public Logger {
 public:
  void log(Level, std::string_view) override {}
};

}  // namespace garm_edge::testing
