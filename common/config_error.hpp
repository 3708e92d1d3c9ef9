#pragma once

#include <stdexcept>

namespace garm_edge {

/// A config file that cannot be used; the message says where (file:line:column) and why.
class ConfigError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace garm_edge
