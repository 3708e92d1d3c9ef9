#pragma once

// How LibvirtHypervisor runs one libvirt operation; internal to hypervisor/, shared by the
// files that implement its members.

#include "hypervisor/libvirt_hypervisor.hpp"
#include "hypervisor/libvirt_session.hpp"
#include "hypervisor/libvirt_support.hpp"

namespace garm_edge::hypervisor {

template <class Fn>
auto LibvirtHypervisor::call(const std::string& what, Fn fn) {
  return call_within(options_.call_timeout, what, std::move(fn));
}

template <class Fn>
auto LibvirtHypervisor::call_within(std::chrono::milliseconds deadline, const std::string& what,
                                    Fn fn) {
  // The job may outlive this frame and even this object (the caller gives up at the
  // deadline), so it owns everything it touches.
  return runner_.run(deadline, what, [session = session_, fn = std::move(fn)]() mutable {
    auto conn = session->connection();
    try {
      return fn(*session, conn.get());
    } catch (const HypervisorError& e) {
      if (e.kind() == HypervisorError::Kind::unavailable) {
        session->forget(conn, e.what());
      }
      throw;
    }
  });
}

}  // namespace garm_edge::hypervisor
