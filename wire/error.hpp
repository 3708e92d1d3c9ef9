#pragma once

#include <stdexcept>
#include <string>

namespace garm_edge::wire {

/// A value from garm (or for garm) that does not fit the contract. `field()` names the JSON
/// path or the input that was wrong, so the message can be shown to an operator as is.
class WireError : public std::runtime_error {
 public:
  WireError(std::string field, const std::string& problem)
      : std::runtime_error(field + ": " + problem), field_(std::move(field)) {}

  const std::string& field() const noexcept { return field_; }

 private:
  std::string field_;
};

}  // namespace garm_edge::wire
