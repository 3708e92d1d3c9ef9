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
agent=$build/agent/garm-edge-agent
# shellcheck disable=SC2034  # read by lib.sh
extra_packages=(dnsmasq-base iptables ebtables curl)
virsh() { command virsh -q -c qemu:///system "$@"; }
fail() { echo "FAILED: $*"; [ -f "$work/agent.log" ] && cat "$work/agent.log"; exit 1; }

work=$(mktemp -d /tmp/garm-edge-guestnet.XXXXXX)
agent_pid=
system_cleanup() {
  if [ -n "$agent_pid" ]; then kill "$agent_pid" 2>/dev/null && wait "$agent_pid" 2>/dev/null; fi || true
  for domain in $(virsh list --all --name | grep '^garm-edge-' || true); do
    virsh destroy "$domain" >/dev/null 2>&1 || true
    virsh undefine "$domain" >/dev/null 2>&1 || true
  done
  virsh net-destroy garm-edge-systest-net >/dev/null 2>&1 || true
  virsh net-undefine garm-edge-systest-net >/dev/null 2>&1 || true
  for filter in garm-edge-source-ip garm-edge-source-ip-{mac,arp-mac,arp-ip,ipv4}; do
    virsh nwfilter-undefine "$filter" >/dev/null 2>&1 || true
  done
  virsh pool-destroy garm-edge-systest >/dev/null 2>&1 || true
  virsh pool-undefine garm-edge-systest >/dev/null 2>&1 || true
  rm -rf /var/lib/garm-edge-systest "$work"
}
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"

pool=/var/lib/garm-edge-systest
rm -rf "$pool" && mkdir -p "$pool" && chmod 0755 "$pool"
qemu-img create -q -f qcow2 "$pool/base.qcow2" 1G
virsh pool-define-as garm-edge-systest dir --target "$pool" >/dev/null
virsh pool-start garm-edge-systest >/dev/null
cat > "$work/net.xml" <<'XML'
<network>
  <name>garm-edge-systest-net</name>
  <forward mode='nat'/>
  <bridge name='gesysbr0' stp='on' delay='0'/>
  <ip address='192.168.151.1' netmask='255.255.255.0'>
    <dhcp><range start='192.168.151.100' end='192.168.151.200'/></dhcp>
  </ip>
</network>
XML
virsh net-define "$work/net.xml" >/dev/null
virsh net-start garm-edge-systest-net >/dev/null

"$agent" pki init --dir "$work/pki" --dns localhost >/dev/null
controller=9dcf590a-1192-4a9c-b3e4-e0902974c2c0
cat > "$work/agent.toml" <<TOML
[agent]
id = "systest"
state_dir = "$work/state"
[libvirt]
uri = "qemu:///system"
storage_pool = "garm-edge-systest"
network = "garm-edge-systest-net"
[api]
address = "127.0.0.1"
port = 0
ca = "$work/pki/ca.crt"
certificate = "$work/pki/agent.crt"
key = "$work/pki/agent.key"
[[api.clients]]
identity = "garm"
controllers = ["$controller"]
[guests]
port = 0
anti_spoofing = "auto"
[[images]]
name = "debian-12"
base_volume = "base.qcow2"
[[flavors]]
name = "small"
vcpus = 1
memory_mib = 256
disk_gib = 2
TOML
"$agent" serve --config "$work/agent.toml" 2> "$work/agent.log" &
agent_pid=$!
for _ in $(seq 200); do grep -q ' (agent ' "$work/agent.log" 2>/dev/null && break; sleep 0.05; done
port=$(sed -n 's/^<[0-9]>listening on 127.0.0.1:\([0-9]*\) (agent.*/\1/p' "$work/agent.log")
guest_url=$(sed -n 's/.*guest service listening on \(http[^ ]*\).*/\1/p' "$work/agent.log")
[ -n "$port" ] || fail "the agent did not start"
echo "guest service: $guest_url"
case "$guest_url" in http://192.168.151.1:*) ;; *) fail "the guest service is not on the bridge address" ;; esac
virsh nwfilter-list | grep -q garm-edge-source-ip || fail "the agent defined no nwfilter"

api() {
  curl -sS --fail-with-body --cacert "$work/pki/ca.crt" --cert "$work/pki/clients/garm.crt" \
    --key "$work/pki/clients/garm.key" "https://localhost:$port/v1/controllers/$controller/$1" "${@:2}"
}
wrapper=$(printf '#!/bin/bash\necho runner\n' | base64 -w0)
api instances -X POST --data-binary @- > "$work/created.json" <<JSON ||
{"name":"garm-guestnet1","tools":[],"repo_url":"https://github.com/example","callback-url":"https://garm.example/api/v1/callbacks","metadata-url":"https://garm.example/api/v1/metadata","instance-token":"not-printed","ssh-keys":null,"extra_specs":{"runner_install_template":"$wrapper"},"github-runner-group":"","ca-cert-bundle":null,"arch":"amd64","os_type":"linux","flavor":"small","image":"debian-12","labels":null,"pool_id":"0f1e2d3c-4b5a-4968-8776-a5b4c3d2e1f0","user_data_options":{"disable_updates_on_boot":false,"extra_packages":null,"enable_boot_debug":false},"jit_config_enabled":true,"proxy_config":{"http_proxy":"","https_proxy":"","no_proxy":""}}
JSON
  fail "create failed: $(cat "$work/created.json")"
echo "created: $(cat "$work/created.json")"
grep -q '"status":"running"' "$work/created.json" || fail "the instance is not running"
grep -q '"address":"192.168.151.2"' "$work/created.json" || fail "the instance does not report its reserved address"

domain=garm-edge-$controller-garm-guestnet1
virsh dumpxml "$domain" > "$work/domain.xml"
mac=$(sed -n "s/.*<mac address='\([^']*\)'.*/\1/p" "$work/domain.xml" | head -1)
grep -q "<filterref filter='garm-edge-source-ip'>" "$work/domain.xml" || fail "no filterref on the interface"
grep -q "<parameter name='IP' value='192.168.151.2'/>" "$work/domain.xml" || fail "the filter does not pin the reserved IP"
grep -q "ds=nocloud-net;s=$guest_url/" "$work/domain.xml" || fail "no seed URL in the SMBIOS serial"
virsh net-dumpxml garm-edge-systest-net | grep -q "<host mac='$mac' ip='192.168.151.2'/>" ||
  fail "no live DHCP reservation for $mac"
# libvirt turned the filter into ebtables rules on the guest's tap: only the reserved source
# (and DHCP from 0.0.0.0) may leave it.
ebtables -t nat -L > "$work/ebtables.txt" 2>&1 || true
grep -q -- "--ip-src 192.168.151.2 -j RETURN" "$work/ebtables.txt" ||
  fail "no ebtables rule pins the guest's source address: $(cat "$work/ebtables.txt")"
grep -q -- "--arp-ip-src 192.168.151.2 -j RETURN" "$work/ebtables.txt" ||
  fail "no ebtables rule pins the guest's ARP sender address: $(cat "$work/ebtables.txt")"
short_mac=$(printf '%s' "$mac" | sed 's/\b0\([0-9a-f]\)/\1/g')  # some ebtables drop leading zeros
grep -qiE -- "-s ($mac|$short_mac) -j RETURN" "$work/ebtables.txt" ||
  fail "no ebtables rule pins the guest's source MAC: $(cat "$work/ebtables.txt")"
# The host is not the guest: its requests carry no guest's address and get the plain 404.
seed=$(sed -n 's/.*ds=nocloud-net;s=\([^<]*\)<.*/\1/p' "$work/domain.xml")
code=$(curl -s -o /dev/null -w '%{http_code}' "${seed}meta-data")
[ "$code" = 404 ] || fail "the seed was served to the host (HTTP $code)"
echo "domain carries MAC $mac, filter garm-edge-source-ip with IP 192.168.151.2, and the seed URL; reservation live; host refused ($code)"

api instances/garm-guestnet1 -X DELETE >/dev/null
virsh list --all --name | grep -q "^$domain\$" && fail "the domain is still there"
virsh net-dumpxml garm-edge-systest-net | grep -q "$mac" && fail "the reservation is still there"
echo "system tier: guest network set up and torn down on a real libvirtd"
