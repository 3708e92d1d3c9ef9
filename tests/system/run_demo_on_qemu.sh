#!/usr/bin/env bash
# System tier: the instance-service demo against a real libvirtd with QEMU, so the domain and
# volume XML meet the real drivers (qemu-img overlays on a backing file, q35, virtio devices,
# undefine with NVRAM) and not only libvirt's test driver. Needs root: it installs QEMU and the
# libvirt daemon, and starts libvirtd by hand if none runs. Exit 77 (skipped) when not root.
# Usage: run_demo_on_qemu.sh AGENT_BINARY
set -euo pipefail
agent=$1
if [ "$(id -u)" -ne 0 ]; then
  echo "skipped: the system tier needs root"
  exit 77
fi

packages=(qemu-system-x86 qemu-utils libvirt-daemon libvirt-daemon-driver-qemu libvirt-clients)
missing=()
for package in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q 'install ok installed' || missing+=("$package")
done
if [ ${#missing[@]} -gt 0 ]; then
  export DEBIAN_FRONTEND=noninteractive
  timeout 300 apt-get update -q -o Acquire::Retries=3 >/dev/null
  timeout 900 apt-get install -y -q --no-install-recommends -o DPkg::Lock::Timeout=300 "${missing[@]}" >/dev/null
fi

# What libvirt-daemon-system would set up: the account QEMU runs as, and /dev/kvm usable by it
# (with /dev/kvm root-only, libvirt re-probes QEMU on every call and a define takes ~50 s).
getent group libvirt-qemu >/dev/null || groupadd -r libvirt-qemu
getent group kvm >/dev/null || groupadd -r kvm
getent passwd libvirt-qemu >/dev/null || useradd -r -g libvirt-qemu -G kvm -d /var/lib/libvirt libvirt-qemu
if [ -e /dev/kvm ]; then
  chgrp kvm /dev/kvm && chmod 0660 /dev/kvm
fi

started=()
cleanup() {
  virsh -q -c qemu:///system pool-destroy garm-edge-systest >/dev/null 2>&1 || true
  virsh -q -c qemu:///system pool-undefine garm-edge-systest >/dev/null 2>&1 || true
  rm -rf /var/lib/garm-edge-systest
  for pid in "${started[@]}"; do kill "$pid" 2>/dev/null || true; done
}
trap cleanup EXIT

if [ ! -S /run/libvirt/libvirt-sock ]; then
  mkdir -p /var/log/libvirt /run/libvirt
  /usr/sbin/virtlogd -d --pid-file /run/garm-edge-systest-virtlogd.pid
  /usr/sbin/libvirtd -d --pid-file /run/garm-edge-systest-libvirtd.pid
  for _ in $(seq 100); do [ -S /run/libvirt/libvirt-sock ] && break; sleep 0.1; done
  started+=("$(cat /run/garm-edge-systest-libvirtd.pid)" "$(cat /run/garm-edge-systest-virtlogd.pid)")
fi

pool=/var/lib/garm-edge-systest
rm -rf "$pool" && mkdir -p "$pool" && chmod 0755 "$pool"
qemu-img create -q -f qcow2 "$pool/base.qcow2" 1G
virsh -q -c qemu:///system pool-define-as garm-edge-systest dir --target "$pool" >/dev/null
virsh -q -c qemu:///system pool-start garm-edge-systest >/dev/null

"$agent" demo --uri qemu:///system --storage-pool garm-edge-systest --network "" --base-image base.qcow2

leftovers=$(virsh -q -c qemu:///system list --all --name | grep '^garm-edge-' || true)
volumes=$(virsh -q -c qemu:///system vol-list garm-edge-systest | awk '{print $1}' | grep -c '^garm-edge-' || true)
if [ -n "$leftovers" ] || [ "$volumes" != "0" ]; then
  echo "FAILED: the demo left domains or overlays behind: $leftovers ($volumes volumes)"
  exit 1
fi
echo "system tier: no domain or overlay left behind"
