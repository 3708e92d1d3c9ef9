#!/usr/bin/env bash
# System tier: the instance-service demo against a real libvirtd with QEMU, so the domain and
# volume XML meet the real drivers (qemu-img overlays on a backing file, q35, virtio devices,
# undefine with NVRAM) and not only libvirt's test driver. Needs root: it installs QEMU and the
# libvirt daemon, and starts libvirtd by hand if none runs. Exit 77 (skipped) when not root.
# Usage: run_demo_on_qemu.sh AGENT_BINARY
set -euo pipefail
agent=$1
storage_pool=garm-edge-systest
pool_dir=/var/lib/$storage_pool
network=
made_pool=
system_cleanup() {
  [ -n "$made_pool" ] || return 0  # never a live run's pool of the same name
  virsh -q -c qemu:///system pool-destroy "$storage_pool" >/dev/null 2>&1 || true
  virsh -q -c qemu:///system pool-undefine "$storage_pool" >/dev/null 2>&1 || true
  rm -rf "$pool_dir"
}
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"

claim_test_host systest
made_pool=1
pool=$pool_dir
mkdir -p "$pool" && chmod 0755 "$pool"
qemu-img create -q -f qcow2 "$pool/base.qcow2" 1G
virsh -q -c qemu:///system pool-define-as "$storage_pool" dir --target "$pool" >/dev/null
virsh -q -c qemu:///system pool-start garm-edge-systest >/dev/null

# TCG unless asked for KVM (see vm_fixture.sh: /dev/kvm can exist and still fail on nested hosts).
virt_type=qemu
if [ -n "${GARM_EDGE_VM_KVM:-}" ]; then virt_type=kvm; fi
"$agent" demo --uri qemu:///system --storage-pool garm-edge-systest --network "" --base-image base.qcow2 \
  --virt-type "$virt_type" | tee "$pool/demo.out"
# Only the demo's own controller: other runs may have guests on this host.
controller=$(sed -n 's/^controller \([0-9a-f-]*\),.*/\1/p' "$pool/demo.out")
leftovers=$(virsh -q -c qemu:///system list --all --name | grep "^garm-edge-${controller:-none}-" || true)
volumes=$(virsh -q -c qemu:///system vol-list garm-edge-systest | awk '{print $1}' | grep -c '^garm-edge-' || true)
if [ -n "$leftovers" ] || [ "$volumes" != "0" ]; then
  echo "FAILED: the demo left domains or overlays behind: $leftovers ($volumes volumes)"
  exit 1
fi
echo "system tier: no domain or overlay left behind"
