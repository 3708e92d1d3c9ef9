#include "hypervisor/guest_arch.hpp"

namespace garm_edge::hypervisor {

const ArchDefaults& defaults_for(GuestArch arch) {
  static constexpr ArchDefaults kX86_64{"x86_64", "q35", false};
  static constexpr ArchDefaults kAarch64{"aarch64", "virt", true};
  static constexpr ArchDefaults kArmv7l{"armv7l", "virt", false};
  switch (arch) {
    case GuestArch::x86_64:
      return kX86_64;
    case GuestArch::aarch64:
      return kAarch64;
    case GuestArch::armv7l:
      return kArmv7l;
  }
  return kX86_64;
}

std::optional<GuestArch> parse_guest_arch(std::string_view libvirt_arch) {
  for (auto arch : {GuestArch::x86_64, GuestArch::aarch64, GuestArch::armv7l}) {
    if (defaults_for(arch).libvirt_arch == libvirt_arch) {
      return arch;
    }
  }
  return std::nullopt;
}

std::string_view to_string(GuestArch arch) {
  return defaults_for(arch).libvirt_arch;
}

GuestArch native_guest_arch() {
#if defined(__aarch64__)
  return GuestArch::aarch64;
#elif defined(__arm__)
  return GuestArch::armv7l;
#else
  return GuestArch::x86_64;
#endif
}

std::string_view to_string(VirtType type) {
  switch (type) {
    case VirtType::test:
      return "test";
    case VirtType::kvm:
      return "kvm";
    case VirtType::qemu:
      return "qemu";
  }
  return "qemu";
}

std::optional<VirtType> parse_virt_type(std::string_view text) {
  for (auto type : {VirtType::test, VirtType::kvm, VirtType::qemu}) {
    if (to_string(type) == text) {
      return type;
    }
  }
  return std::nullopt;
}

std::string_view to_string(PowerState state) {
  switch (state) {
    case PowerState::running:
      return "running";
    case PowerState::paused:
      return "paused";
    case PowerState::shutoff:
      return "shutoff";
    case PowerState::crashed:
      return "crashed";
    case PowerState::other:
      return "other";
  }
  return "other";
}

}  // namespace garm_edge::hypervisor
