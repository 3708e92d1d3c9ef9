#!/usr/bin/env bash
# System tier, aarch64: the agent defines a Debian 12 arm64 guest exactly as on an arm64 host
# (virt machine, UEFI firmware that libvirt picks from qemu-efi-aarch64 with a per-domain NVRAM,
# virtio disk and NIC, the seed in the SMBIOS serial, a qcow2 overlay on the arm64 base image)
# on a real libvirtd driving qemu-system-aarch64 under TCG. The guest fetches its seed from the
# agent, reports `idle` through the relay to a fake garm, and DeleteInstance leaves nothing,
# its NVRAM included. With ARM64_AGENT the agent is that arm64 build, run through qemu-user
# (binfmt_misc) against the host's libvirtd, and the test fails if it cannot run; without it,
# the native build.
# Prints Linux-start, boot-to-seed and boot-to-idle times. GARM_EDGE_AARCH64_UNTIL=seed stops at
# the seed, without waiting for idle (the rest of the way is 100 s of TCG that the amd64 tier
# covers). GARM_EDGE_AARCH64_UNTIL=firmware (CI's form) builds no arm64 image: the base is a
# blank disk, and the guest's UEFI firmware must run with its NVRAM and try to boot the overlay
# (the image, 20 minutes of one core under qemu-user, and the boot are the long run's).
# Exit 77 (skipped) when not root.
# Usage: run_aarch64_guest.sh BUILD_DIR [ARM64_AGENT]
set -euo pipefail
build=$(cd "$1" && pwd)
arm64_agent=${2:-}
until=${GARM_EDGE_AARCH64_UNTIL:-idle}
case $until in
  firmware) vm_blank_base=1 ;;
  seed | idle) ;;
  *) echo "GARM_EDGE_AARCH64_UNTIL is firmware, seed or idle, not $until" >&2; exit 2 ;;
esac
deadline_seconds=${GARM_EDGE_VM_DEADLINE:-1500}

console_pid=
test_cleanup() {
  if [ -n "$console_pid" ]; then kill "$console_pid" 2>/dev/null || true; fi
}
vm_image_arch=arm64
# The arm64 build runs only where the kernel hands aarch64 programs to qemu (cross-build.sh
# registers it and points qemu at the sysroot's libraries).
agent_kind="the native build ($(uname -m))"
if [ -n "$arm64_agent" ]; then
  if ! "$arm64_agent" --version >/dev/null 2>&1; then
    echo "FAILED: the arm64 agent $arm64_agent is missing or cannot run here (scripts/cross-build.sh arm64 makes it and registers qemu-user)"
    exit 1
  fi
  vm_agent=$arm64_agent
  agent_kind="the arm64 build under qemu-user"
fi
GARM_EDGE_VM_NAME=${GARM_EDGE_VM_NAME:-aarch64} GARM_EDGE_VM_SUBNET=${GARM_EDGE_VM_SUBNET:-154}
# shellcheck source-path=SCRIPTDIR source=vm_fixture.sh
. "$(dirname "$0")/vm_fixture.sh"

machine_of() { readelf -h "$1" | sed -n 's/^ *Machine: *//p'; }
start_agent "$work/agent.log"
echo "agent: $agent_kind ($(machine_of "$agent")), serving on 127.0.0.1:$api_port; guests reach it at $guest_url"
if [ "$agent" != "$build/agent/garm-edge-agent" ]; then
  expect "$(machine_of "$agent")" AArch64 "the agent under test is an arm64 program"
fi

# ---- one arm64 guest ------------------------------------------------------------------------
token=jwt-aarch64-$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')
# The install script reports the guest's machine and firmware: the guest is aarch64 and booted
# by UEFI.
# shellcheck disable=SC2016  # expanded in the guest
machine_report='post /status "{\"status\": \"installing\", \"message\": \"machine $(uname -m), efi $([ -d /sys/firmware/efi ] && echo yes || echo no)\"}"'
create_guest garm-arm00001 "$token" "$(vm_helpers garm-instance-data "$(install_script "$token" 201 "$machine_report")")"
expect "$(printf '%s' "$out" | json_field status)" running "the arm64 guest runs"
domain=$(domain_of garm-arm00001)
tty=$(virsh ttyconsole "$domain")
# python3 itself, not the vm_helpers function (a subshell), so that cleanup's kill reaches it.
/usr/bin/python3 "$here/vm_helpers.py" stamp-lines < "$tty" > "$work/console-$domain.log" 2>/dev/null \
  {test_host_lock}>&- &
console_pid=$!
echo "guest $domain created in ${create_seconds}s"

# ---- the domain as libvirt runs it ----------------------------------------------------------
virsh dumpxml "$domain" > "$work/domain.xml"
xml_has() { grep -Eq "$1" "$work/domain.xml" || fail "the running domain has no $2: $(grep -E "<os|<type|<loader|<nvram" "$work/domain.xml")"; }
xml_has "<type arch=['\"]aarch64['\"] machine=['\"]virt" "aarch64 virt machine"
# libvirt picks the firmware (firmware='efi'): the one without Secure Boot, or an image with an
# unsigned boot loader stops at "Access Denied". The code is the same file either way
# (AAVMF_CODE.ms.fd links to it); Secure Boot comes with the NVRAM template AAVMF_VARS.ms.fd,
# whose variables enroll Microsoft's keys.
xml_has "<loader [^>]*>/usr/share/AAVMF/AAVMF_CODE\.fd</loader>" "AAVMF code from qemu-efi-aarch64"
xml_has "<nvram template=['\"]/usr/share/AAVMF/AAVMF_VARS\.fd['\"]" "NVRAM from the template without Secure Boot"
nvram=$(sed -n 's/.*<nvram[^>]*>\([^<]*\)<\/nvram>.*/\1/p' "$work/domain.xml")
{ [ -n "$nvram" ] && [ -f "$nvram" ]; } || fail "the domain's NVRAM file ($nvram) does not exist"
case "$nvram" in *"$domain"*) ;; *) fail "the NVRAM file $nvram is not the domain's own" ;; esac
xml_has "<entry name=['\"]serial['\"]>ds=nocloud-net;s=http://$gateway:[0-9]+/" "seed URL in the SMBIOS serial"
xml_has "<target dev=['\"]vda['\"] bus=['\"]virtio['\"]" "virtio disk"
xml_has "<model type=['\"]virtio['\"]" "virtio NIC"
overlay=$(sed -n "s/.*<source file='\([^']*\)'.*/\1/p" "$work/domain.xml" | head -1)
qemu-img info -U --output=json "$overlay" | grep -q "\"backing-filename\": \"$pool_dir/$base_volume\"" ||
  fail "the overlay is not backed by the arm64 base image: $(qemu-img info -U "$overlay")"
echo "domain: aarch64 virt, UEFI $(sed -n 's/.*<loader[^>]*>\([^<]*\)<.*/\1/p' "$work/domain.xml"), NVRAM $nvram"

# ---- boot, seed, idle -----------------------------------------------------------------------
if [ "$until" = firmware ]; then
  # edk2 names the virtio disk "UEFI Misc Device"; on a blank one its boot fails, as it should.
  firmware_tried_disk() { grep -aq 'BdsDxe: .*"UEFI Misc Device"' "$work/console-$domain.log"; }
  wait_for "the arm64 guest's UEFI firmware to try its disk" "$deadline_seconds" firmware_tried_disk
  firmware_at=$(awk '/BdsDxe: / {print $1; exit}' "$work/console-$domain.log")
  echo "aarch64 guest (TCG): its UEFI firmware tried the disk $(awk -v a="$created" -v b="$firmware_at" 'BEGIN { printf "%.1f", b - a }')s after CreateInstance was called"
  outcome="tried to boot its overlay (a blank disk: CI's form)"
else
  seed_served_at() { control instances/garm-arm00001/guest | json_field seed_served_at 2>/dev/null; }
  seed_fetched() { [ -n "$(seed_served_at)" ]; }
  wait_for "the arm64 guest to fetch its seed" "$deadline_seconds" seed_fetched
  to_seed=$(vm_helpers seconds-between "$(seed_served_at)" "$created")
  vcpus=$(sed -n "s/.*<vcpu[^>]*>\([0-9]*\)<.*/\1/p" "$work/domain.xml")
  kernel_at=$(awk '/Linux version/ {print $1; exit}' "$work/console-$domain.log")
  to_kernel=$(awk -v a="$created" -v b="${kernel_at:-0}" 'BEGIN { printf "%.1f", (b > 0 ? b - a : -1) }')
  outcome="fetched its seed from the agent"
  to_idle=
  if [ "$until" = idle ]; then
    reported_idle() { garm_requests "$token" | grep -q 'callbacks/status {"status": "idle"'; }
    wait_for "the arm64 guest to report idle" "$deadline_seconds" reported_idle
    report=$(garm_requests "$token" | grep -o 'machine [a-z0-9_]*, efi [a-z]*' | head -1 || true)
    expect "$report" "machine aarch64, efi yes" "the guest's own report of its machine and firmware"
    agent_saw_idle() { [ "$(control instances/garm-arm00001/guest | json_field runner_status)" = idle ]; }
    wait_for "the agent to record the guest's idle" 60 agent_saw_idle
    garm GetInstance GARM_INSTANCE_ID=garm-arm00001
    expect "$(printf '%s' "$out" | json_field os_arch)" arm64 "GetInstance shows the instance as arm64"
    expect "$(printf '%s' "$out" | json_field os_name)" "Debian GNU/Linux" "GetInstance shows the OS the guest reported"
    idle_at=$(garm_requests "$token" | awk '/callbacks\/status {"status": "idle"/ {print $1; exit}')
    to_idle=", idle reported $(awk -v a="$created" -v b="$idle_at" 'BEGIN { printf "%.1f", b - a }')s"
    outcome="reported idle through the relay"
fi
echo "aarch64 guest (TCG, $vcpus vCPU): Linux started ${to_kernel}s, seed fetched ${to_seed}s${to_idle} after CreateInstance was called"
fi

# ---- delete: nothing left, the NVRAM included ------------------------------------------------
garm DeleteInstance GARM_INSTANCE_ID=garm-arm00001
expect "$last_status" 0 "DeleteInstance of the arm64 guest"
virsh dominfo "$domain" >/dev/null 2>&1 && fail "the domain is still defined after DeleteInstance"
[ ! -e "$nvram" ] || fail "DeleteInstance left the NVRAM file $nvram"
[ ! -e "$overlay" ] || fail "DeleteInstance left the overlay $overlay"
expect "$(compgen -G "$work/state/instances/*.json" || true)" "" "no instance record is left"
echo "aarch64 tier: an arm64 guest booted by UEFI, $outcome, and was deleted with its NVRAM (agent: $agent_kind)"
