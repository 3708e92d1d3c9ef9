#include "hypervisor/libvirt_event_loop.hpp"

#include <mutex>
#include <thread>

#include <libvirt/libvirt.h>
#include <libvirt/virterror.h>

#include "hypervisor/hypervisor.hpp"

namespace garm_edge::hypervisor {

void ensure_libvirt_event_loop() {
  static std::once_flag once;
  std::call_once(once, [] {
    virSetErrorFunc(nullptr, [](void*, virErrorPtr) {});
    if (virInitialize() < 0 || virEventRegisterDefaultImpl() < 0) {
      throw HypervisorError(HypervisorError::Kind::failed,
                            "cannot initialize libvirt's event loop");
    }
    // virEventRunDefaultImpl blocks until some handle or timer fires; a periodic no-op timer
    // keeps the loop turning even when no connection has registered anything yet.
    constexpr int kTickMs = 1000;
    virEventAddTimeout(
        kTickMs, [](int, void*) {}, nullptr, nullptr);
    std::thread([] {
      for (;;) {
        virEventRunDefaultImpl();
      }
    }).detach();
  });
}

}  // namespace garm_edge::hypervisor
