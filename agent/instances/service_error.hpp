#pragma once

#include <exception>
#include <stdexcept>
#include <string>
#include <string_view>

namespace garm_edge::agent {

/// A failed command, with a stable code for transports to map (HTTP status, exit code).
class ServiceError : public std::runtime_error {
 public:
  enum class Code {
    invalid_argument,
    not_found,
    conflict,
    unavailable,
    timeout,
    internal,
    no_capacity,  // the host is full: placement tries another agent
    draining,     // the host takes no new creates: placement tries another agent
  };

  ServiceError(Code code, const std::string& message) : std::runtime_error(message), code_(code) {}
  Code code() const noexcept { return code_; }

 private:
  Code code_;
};

std::string_view to_string(ServiceError::Code code);

/// The code a failure from any layer below maps to (see docs/error-policy.md).
ServiceError::Code code_of(const std::exception& error);
/// `error` as a ServiceError whose message starts with `context`.
ServiceError service_error(const std::string& context, const std::exception& error);

/// Runs one command and turns every failure into a ServiceError carrying `context`.
template <class Fn>
auto guarded(const std::string& context, Fn&& fn) -> decltype(fn()) {
  try {
    return fn();
  } catch (const ServiceError&) {
    throw;
  } catch (const std::exception& e) {
    throw service_error(context, e);
  }
}

}  // namespace garm_edge::agent
