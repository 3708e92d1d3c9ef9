#pragma once

#include <optional>
#include <string_view>

#include "hypervisor/hypervisor.hpp"

namespace garm_edge::hypervisor {

/// How a guest of one architecture is defined. The one place per-architecture choices live.
struct ArchDefaults {
  std::string_view libvirt_arch;
  std::string_view machine;
  bool uefi;  // <os firmware='efi'>: libvirt picks the firmware and keeps per-domain NVRAM
};

const ArchDefaults& defaults_for(GuestArch arch);
std::optional<GuestArch> parse_guest_arch(std::string_view libvirt_arch);
/// The architecture this agent was compiled for; KVM only helps guests of this architecture.
GuestArch native_guest_arch();

std::string_view to_string(VirtType type);
std::optional<VirtType> parse_virt_type(std::string_view text);

}  // namespace garm_edge::hypervisor
