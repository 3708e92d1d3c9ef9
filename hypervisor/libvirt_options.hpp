#pragma once

#include <chrono>
#include <cstddef>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>

#include "hypervisor/guest_arch.hpp"

namespace garm_edge::hypervisor {

/// How LibvirtHypervisor connects and calls; apart from it so configs can name these settings
/// without the libvirt implementation.
struct LibvirtOptions {
  /// Any libvirt URI: test:///default, test:///abs/node.xml, qemu:///system, qemu:///embed?root=…
  std::string uri = "qemu:///system";
  /// Unset: kvm where the host's capabilities offer it for the guest's architecture, else qemu
  /// (TCG); the test driver always gets "test".
  std::optional<VirtType> virt_type;
  /// Where the kvm_intel and kvm_amd modules' parameters are read from: their `nested` says
  /// whether guests may run KVM themselves. The agent runs on the host it manages.
  std::filesystem::path kernel_modules = "/sys/module";
  /// The deadline of each hypervisor operation, queueing included.
  std::chrono::milliseconds call_timeout{std::chrono::seconds(30)};
  std::size_t workers = 8;
  /// How often the connection is checked (and, once lost, retried) in the background, so the
  /// first call after libvirtd's return finds it open and health is never older than 3 of these.
  std::chrono::milliseconds reconnect_interval{std::chrono::seconds(1)};
  /// Told when the connection is lost and when it is back (for the log).
  std::function<void(bool connected, const std::string& message)> on_connection_change;
};

}  // namespace garm_edge::hypervisor
