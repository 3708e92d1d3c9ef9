#!/usr/bin/env bash
# System tier: a reserved address that a deleted guest held goes to the next guest, on a real
# libvirt network's dnsmasq. dnsmasq keeps a lease for the network's lease time (1 h here) after
# its guest is gone, and will not hand a leased address to another MAC: a new guest reserved the
# same address with a new MAC got a dynamic one instead, and its seed request came from the
# wrong address. A veth in a network namespace plays each guest's DHCP client (busybox udhcpc,
# with the MAC of the agent's domain), so no guest has to boot. Exit 77 (skipped) when not root.
# Usage: run_dhcp_address_reuse.sh BUILD_DIR
set -euo pipefail
build=$(cd "$1" && pwd)
tiny=dhcp
tiny_subnet=153
tiny_packages=(busybox iproute2)
tiny_guest_extra='addresses = "192.168.153.2-192.168.153.3"
address_quarantine_seconds = 0'
namespace=garm-edge-dhcp-$$
test_cleanup() {
  ip netns del "$namespace" 2>/dev/null || true
  ip link del gedhcp-host 2>/dev/null || true
}
# shellcheck source-path=SCRIPTDIR source=tiny_host.sh
. "$(dirname "$0")/tiny_host.sh"
fail() { echo "FAILED: $*"; tail -n 40 "$work/agent.log"; exit 1; }
start_agent

create() {  # NAME: garm's CreateInstance; sets $reserved and $mac
  local name=$1 domain=garm-edge-$controller-$1
  bootstrap "$name" > "$work/$name.json"
  stdin_file=$work/$name.json garm CreateInstance GARM_POOL_ID="$pool_id"
  stdin_file=
  [ "$last_status" = 0 ] || fail "create $name exited $last_status: $err"
  reserved=$(printf '%s' "$out" | sed -n 's/.*"address":"\([0-9.]*\)".*/\1/p')
  mac=$(virsh dumpxml "$domain" | sed -n "s/.*<mac address='\([^']*\)'.*/\1/p" | head -1)
  # The domain's own NIC leaves the bridge: the veth below is this guest's DHCP client.
  virsh destroy "$domain" >/dev/null
}
# The address dnsmasq hands to a DHCP client with MAC (busybox udhcpc in the namespace).
dhcp_address() {
  local mac=$1
  ip netns exec "$namespace" ip link set gedhcp-guest down
  ip netns exec "$namespace" ip link set gedhcp-guest address "$mac"
  ip netns exec "$namespace" ip link set gedhcp-guest up
  # shellcheck disable=SC2016  # expanded by udhcpc's script, not here
  printf '#!/bin/sh\n[ "$1" = bound ] && echo "$ip" > %s\nexit 0\n' "$work/leased" > "$work/udhcpc.sh"
  chmod +x "$work/udhcpc.sh"
  rm -f "$work/leased"
  ip netns exec "$namespace" busybox udhcpc -i gedhcp-guest -n -q -f -t 10 -T 1 \
    -s "$work/udhcpc.sh" >/dev/null 2>&1 || true
  cat "$work/leased" 2>/dev/null || echo none
}

ip netns add "$namespace"
ip link add gedhcp-host type veth peer name gedhcp-guest
ip link set gedhcp-guest netns "$namespace"
ip link set gedhcp-host master "$bridge" up

create garm-dhcp0001
first_ip=$reserved first_mac=$mac
echo "garm-dhcp0001: reserved $first_ip for $first_mac"
leased=$(dhcp_address "$first_mac")
[ "$leased" = "$first_ip" ] || fail "the first guest got $leased by DHCP, reserved $first_ip"
garm DeleteInstance GARM_INSTANCE_ID=garm-dhcp0001
[ "$last_status" = 0 ] || fail "delete garm-dhcp0001: $err"
grep -q "$first_mac" "/var/lib/libvirt/dnsmasq/$bridge.status" ||
  fail "dnsmasq forgot the first lease (nothing to reproduce)"
echo "deleted garm-dhcp0001; dnsmasq keeps its lease of $first_ip for an hour"

create garm-dhcp0002
echo "garm-dhcp0002: reserved $reserved for $mac (quarantine 0 s: the same address)"
[ "$reserved" = "$first_ip" ] || fail "the second guest was not given the released address"
leased=$(dhcp_address "$mac")
[ "$leased" = "$reserved" ] ||
  fail "the second guest got $leased by DHCP while reserved $reserved (dnsmasq still leases it to $first_mac)"
garm DeleteInstance GARM_INSTANCE_ID=garm-dhcp0002
[ "$last_status" = 0 ] || fail "delete garm-dhcp0002: $err"
echo "system tier: a reused address reached the next guest through a real dnsmasq"
