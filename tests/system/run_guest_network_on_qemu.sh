#!/usr/bin/env bash
# System tier: the guest side of `garm-edge-agent serve` against a real libvirtd, QEMU and a
# libvirt NAT network (bridge, dnsmasq, iptables): the agent defines its anti-spoofing nwfilter,
# reserves each guest's address in the live network, binds its guest service to the bridge's
# address, and QEMU starts a domain carrying the filter (with the reserved IP) and the SMBIOS
# seed serial. Delete removes the domain and the reservation. The base image is empty: no guest
# OS boots here (a booting guest is the next tier). Exit 77 (skipped) when not root.
# Usage: run_guest_network_on_qemu.sh BUILD_DIR
set -euo pipefail
build=$(cd "$1" && pwd)
tiny=guestnet
tiny_subnet=151
# shellcheck source-path=SCRIPTDIR source=tiny_host.sh
. "$(dirname "$0")/tiny_host.sh"
fail() { echo "FAILED: $*"; [ -f "$work/agent.log" ] && cat "$work/agent.log"; exit 1; }

start_agent
echo "guest service: $guest_url"
case "$guest_url" in "http://$subnet.1:"*) ;; *) fail "the guest service is not on the bridge address" ;; esac
virsh nwfilter-list | grep -q garm-edge-source-ip || fail "the agent defined no nwfilter"

bootstrap garm-guestnet1 > "$work/guestnet1.json"
stdin_file=$work/guestnet1.json garm CreateInstance GARM_POOL_ID="$pool_id"
[ "$last_status" = 0 ] || fail "create failed: $err"
printf '%s' "$out" > "$work/created.json"
echo "created: $(cat "$work/created.json")"
grep -q '"status":"running"' "$work/created.json" || fail "the instance is not running"
grep -q "\"address\":\"$subnet.2\"" "$work/created.json" || fail "the instance does not report its reserved address"

domain=garm-edge-$controller-garm-guestnet1
virsh dumpxml "$domain" > "$work/domain.xml"
mac=$(sed -n "s/.*<mac address='\([^']*\)'.*/\1/p" "$work/domain.xml" | head -1)
grep -q "<filterref filter='garm-edge-source-ip'>" "$work/domain.xml" || fail "no filterref on the interface"
grep -q "<parameter name='IP' value='$subnet.2'/>" "$work/domain.xml" || fail "the filter does not pin the reserved IP"
grep -q "ds=nocloud-net;s=$guest_url/" "$work/domain.xml" || fail "no seed URL in the SMBIOS serial"
virsh net-dumpxml "$network" | grep -q "<host mac='$mac' ip='$subnet.2'/>" ||
  fail "no live DHCP reservation for $mac"
# libvirt turned the filter into ebtables rules on the guest's tap: only the reserved source
# (and DHCP from 0.0.0.0) may leave it.
ebtables -t nat -L > "$work/ebtables.txt" 2>&1 || true
grep -q -- "--ip-src $subnet.2 -j RETURN" "$work/ebtables.txt" ||
  fail "no ebtables rule pins the guest's source address: $(cat "$work/ebtables.txt")"
grep -q -- "--arp-ip-src $subnet.2 -j RETURN" "$work/ebtables.txt" ||
  fail "no ebtables rule pins the guest's ARP sender address: $(cat "$work/ebtables.txt")"
short_mac=$(printf '%s' "$mac" | sed 's/\b0\([0-9a-f]\)/\1/g')  # some ebtables drop leading zeros
grep -qiE -- "-s ($mac|$short_mac) -j RETURN" "$work/ebtables.txt" ||
  fail "no ebtables rule pins the guest's source MAC: $(cat "$work/ebtables.txt")"
# The host is not the guest: its address is no guest's, so the service does not even keep its
# connection (curl's 000).
seed=$(sed -n 's/.*ds=nocloud-net;s=\([^<]*\)<.*/\1/p' "$work/domain.xml")
code=$(curl -s -o /dev/null -w '%{http_code}' "${seed}meta-data" || true)
[ "$code" = 000 ] || fail "the host's connection was served (HTTP $code)"
echo "domain carries MAC $mac, filter garm-edge-source-ip with IP $subnet.2, and the seed URL; reservation live; host refused ($code)"

garm DeleteInstance GARM_INSTANCE_ID=garm-guestnet1
[ "$last_status" = 0 ] || fail "delete failed: $err"
virsh list --all --name | grep -q "^$domain\$" && fail "the domain is still there"
virsh net-dumpxml "$network" | grep -q "$mac" && fail "the reservation is still there"
echo "system tier: guest network set up and torn down on a real libvirtd"
