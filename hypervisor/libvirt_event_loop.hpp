#pragma once

namespace garm_edge::hypervisor {

/// Registers libvirt's default event loop and runs it on a thread of its own, once per
/// process, before the first connection is opened: keepalive, close callbacks and domain
/// events need it. Also silences libvirt's default error printing (errors are read per call).
void ensure_libvirt_event_loop();

}  // namespace garm_edge::hypervisor
