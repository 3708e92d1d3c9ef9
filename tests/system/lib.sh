# shellcheck shell=bash
# Sourced by the system-tier scripts: installs QEMU and the libvirt daemon (plus anything in
# $extra_packages), sets up what libvirt-daemon-system would, and starts libvirtd by hand when
# none runs. Sets $started (pids to kill) and a cleanup hook: define `system_cleanup` before
# sourcing to add your own steps. Exits 77 (skipped) when not root.

if [ "$(id -u)" -ne 0 ]; then
  echo "skipped: the system tier needs root"
  exit 77
fi

packages=(qemu-system-x86 qemu-utils libvirt-daemon libvirt-daemon-driver-qemu libvirt-clients
  ${extra_packages[@]+"${extra_packages[@]}"})
# shellcheck source-path=SCRIPTDIR source=apt.sh
. "$(dirname "${BASH_SOURCE[0]}")/apt.sh"
install_missing "${packages[@]}"

# What libvirt-daemon-system would set up: the account QEMU runs as, and /dev/kvm usable by it
# (with /dev/kvm root-only, libvirt re-probes QEMU on every call and a define takes ~50 s).
getent group libvirt-qemu >/dev/null || groupadd -r libvirt-qemu
getent group kvm >/dev/null || groupadd -r kvm
getent passwd libvirt-qemu >/dev/null || useradd -r -g libvirt-qemu -G kvm -d /var/lib/libvirt libvirt-qemu
if [ -e /dev/kvm ]; then
  chgrp kvm /dev/kvm && chmod 0660 /dev/kvm
fi

started=()
run_cleanup() {
  if declare -F system_cleanup >/dev/null; then system_cleanup; fi
  for pid in ${started[@]+"${started[@]}"}; do kill "$pid" 2>/dev/null || true; done
  # The next system test checks for the daemons' sockets: let them go away first.
  for pid in ${started[@]+"${started[@]}"}; do
    for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  done
}
trap run_cleanup EXIT

# libvirtd probes for dnsmasq and the firewall tools when it starts: one started before they
# were installed cannot run NAT networks, so this tier's own daemon is restarted when needed.
if [ -S /run/libvirt/libvirt-sock ] && [ ${#missing[@]} -gt 0 ] && [ -f /run/garm-edge-systest-libvirtd.pid ]; then
  kill "$(cat /run/garm-edge-systest-libvirtd.pid)" 2>/dev/null || true
  for _ in $(seq 100); do [ -S /run/libvirt/libvirt-sock ] || break; sleep 0.1; done
fi
mkdir -p /var/log/libvirt /run/libvirt
# QEMU domains log through virtlogd: start it on its own when its socket is missing.
if [ ! -S /run/libvirt/virtlogd-sock ]; then
  /usr/sbin/virtlogd -d --pid-file /run/garm-edge-systest-virtlogd.pid
  for _ in $(seq 100); do [ -S /run/libvirt/virtlogd-sock ] && break; sleep 0.1; done
  started+=("$(cat /run/garm-edge-systest-virtlogd.pid)")
fi
if [ ! -S /run/libvirt/libvirt-sock ]; then
  /usr/sbin/libvirtd -d --pid-file /run/garm-edge-systest-libvirtd.pid
  for _ in $(seq 100); do [ -S /run/libvirt/libvirt-sock ] && break; sleep 0.1; done
  started+=("$(cat /run/garm-edge-systest-libvirtd.pid)")
fi
