#include "agent/instances/service_error.hpp"

#include "agent/instances/instance_store.hpp"
#include "hypervisor/hypervisor.hpp"
#include "userdata/userdata.hpp"
#include "wire/error.hpp"

namespace garm_edge::agent {
namespace {

using hypervisor::HypervisorError;
using Code = ServiceError::Code;

Code code_for(HypervisorError::Kind kind) {
  switch (kind) {
    case HypervisorError::Kind::not_found:
      return Code::not_found;
    case HypervisorError::Kind::already_exists:
      return Code::conflict;
    case HypervisorError::Kind::invalid_argument:
      return Code::invalid_argument;
    case HypervisorError::Kind::unavailable:
      return Code::unavailable;
    case HypervisorError::Kind::timeout:
      return Code::timeout;
    default:
      return Code::internal;
  }
}

}  // namespace

std::string_view to_string(ServiceError::Code code) {
  switch (code) {
    case Code::invalid_argument:
      return "invalid_argument";
    case Code::not_found:
      return "not_found";
    case Code::conflict:
      return "conflict";
    case Code::unavailable:
      return "unavailable";
    case Code::timeout:
      return "timeout";
    case Code::internal:
      return "internal";
    case Code::no_capacity:
      return "no_capacity";
    case Code::draining:
      return "draining";
  }
  return "internal";
}

Code code_of(const std::exception& error) {
  if (const auto* service = dynamic_cast<const ServiceError*>(&error)) {
    return service->code();
  }
  if (const auto* hv = dynamic_cast<const HypervisorError*>(&error)) {
    return code_for(hv->kind());
  }
  // garm's input that cannot be rendered for the guest is garm's to fix, not an agent fault.
  if (dynamic_cast<const wire::WireError*>(&error) != nullptr ||
      dynamic_cast<const userdata::UserDataError*>(&error) != nullptr) {
    return Code::invalid_argument;
  }
  return Code::internal;
}

ServiceError service_error(const std::string& context, const std::exception& error) {
  if (dynamic_cast<const StoreError*>(&error) != nullptr) {
    return ServiceError(Code::internal, context + ": state directory: " + error.what());
  }
  return ServiceError(code_of(error), context + ": " + error.what());
}

}  // namespace garm_edge::agent
