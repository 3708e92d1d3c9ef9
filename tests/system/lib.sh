# shellcheck shell=bash
# Sourced by the system-tier scripts: installs QEMU and the libvirt daemon (plus anything in
# $extra_packages), sets up what libvirt-daemon-system would, and starts libvirtd by hand when
# none runs. Sets $started (pids to kill) and a cleanup hook: define `system_cleanup` before
# sourcing to add your own steps. Exits 77 (skipped) when not root.

if [ "$(id -u)" -ne 0 ]; then
  echo "skipped: the system tier needs root"
  exit 77
fi

packages=(qemu-system-x86 qemu-utils libvirt-daemon libvirt-daemon-driver-qemu libvirt-clients tini
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

# A host whose daemons were killed (a power cut, a session stopped mid-test) keeps their socket
# files, and a client then gets "Connection refused" from a socket nobody listens on: such a
# file is removed. A socket something listens on is kept (systemd's socket activation listens
# for a libvirtd or virtlogd that is not running yet).
system_virsh() { timeout 60 virsh -q -c qemu:///system "$@"; }  # a hung libvirtd fails the test
clear_stale_sockets() {
  local socket
  for socket in "$@"; do
    [ -S "$socket" ] || continue
    ss -Hxl src "$socket" | grep -q . || rm -f "$socket"
  done
}
clear_stale_sockets /run/libvirt/libvirt-sock /run/libvirt/libvirt-sock-ro \
  /run/libvirt/libvirt-admin-sock /run/libvirt/virtlogd-sock /run/libvirt/virtlogd-admin-sock

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
# Starts libvirtd in the background under tini as a child subreaper and returns once it
# answers. QEMU processes are orphans of libvirtd, and libvirt's destroy waits until the killed
# QEMU's pid is gone: where PID 1 reaps orphans only every few seconds (the init of the
# firecracker VMs CI runs on), every destroy took ~2 s. A systemd host reaps at once.
start_libvirtd() {
  local log=/var/log/libvirt/garm-edge-systest-libvirtd.log
  rm -f /run/garm-edge-systest-libvirtd.pid
  (
    # Not the test's host lock (claim_test_host): a libvirtd that outlives the test must not
    # keep holding it.
    if [ -n "${test_host_lock:-}" ]; then exec {test_host_lock}>&-; fi
    exec setsid tini -s -- /usr/sbin/libvirtd --pid-file /run/garm-edge-systest-libvirtd.pid \
      </dev/null >>"$log" 2>&1
  ) &
  local tini_pid=$!
  # Its socket appears before it answers (it first reconnects to what a previous run left).
  for _ in $(seq 300); do
    [ -s /run/garm-edge-systest-libvirtd.pid ] && system_virsh uri >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  kill "$tini_pid" 2>/dev/null || true  # tini passes it on to libvirtd
  echo "FAILED: libvirtd did not answer within 30 s of its start; the end of $log:"
  tail -n 20 "$log"
  exit 1
}
if [ ! -S /run/libvirt/libvirt-sock ]; then
  start_libvirtd
  started+=("$(cat /run/garm-edge-systest-libvirtd.pid)")
fi

# Claims the host names of one test (its network, storage pool and pool directory, from
# $network, $storage_pool and $pool_dir) for this run, with a lock that dies with the run: a
# second live run of the same test fails at once, and what a dead run left under these names
# (domains on the network, the network, the pool and its files) is removed first. The lock is
# on the file descriptor $test_host_lock: a background process that could outlive the test
# (the agent, a fake garm, libvirtd) is started with `{test_host_lock}>&-`.
# shellcheck disable=SC2154  # $storage_pool and $pool_dir are set by the sourcing script
claim_test_host() {
  local lock=/run/lock/garm-edge-systest-$1.lock domain
  mkdir -p /run/lock
  exec {test_host_lock}> "$lock"
  if ! flock -n "$test_host_lock"; then
    echo "FAILED: another run of this test ($1) is using this host"
    exit 1
  fi
  for domain in $(if [ -n "$network" ]; then system_virsh list --all --name; fi); do
    system_virsh domiflist "$domain" 2>/dev/null | awk -v net="$network" '$3 == net {f = 1} END {exit !f}' || continue
    echo "removing $domain, left by a run of $1 that did not finish"
    system_virsh destroy "$domain" >/dev/null 2>&1 || true
    system_virsh undefine --nvram "$domain" >/dev/null 2>&1 || true
  done
  if [ -n "$network" ] && system_virsh net-info "$network" >/dev/null 2>&1; then
    echo "removing network $network, left by a run of $1 that did not finish"
    system_virsh net-destroy "$network" >/dev/null 2>&1 || true
    system_virsh net-undefine "$network" >/dev/null 2>&1 || true
  fi
  if system_virsh pool-info "$storage_pool" >/dev/null 2>&1; then
    echo "removing storage pool $storage_pool, left by a run of $1 that did not finish"
    system_virsh pool-destroy "$storage_pool" >/dev/null 2>&1 || true
    system_virsh pool-undefine "$storage_pool" >/dev/null 2>&1 || true
  fi
  rm -rf "$pool_dir"
}
