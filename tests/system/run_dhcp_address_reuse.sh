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
agent=$build/agent/garm-edge-agent
# shellcheck disable=SC2034  # read by lib.sh
extra_packages=(dnsmasq-base iptables ebtables curl busybox iproute2)
virsh() { command virsh -q -c qemu:///system "$@"; }
fail() { echo "FAILED: $*"; [ -f "$work/agent.log" ] && tail -n 40 "$work/agent.log"; exit 1; }

work=$(mktemp -d /tmp/garm-edge-dhcp.XXXXXX)
network=garm-edge-dhcptest-net
bridge=gedhcpbr0
storage_pool=garm-edge-dhcptest
pool_dir=/var/lib/garm-edge-dhcptest
namespace=garm-edge-dhcp
controller=9dcf590a-1192-4a9c-b3e4-e0902974c2c0
agent_pid=
system_cleanup() {
  if [ -n "$agent_pid" ]; then kill "$agent_pid" 2>/dev/null && wait "$agent_pid" 2>/dev/null; fi || true
  ip netns del "$namespace" 2>/dev/null || true
  ip link del gedhcp-host 2>/dev/null || true
  for domain in $(virsh list --all --name | grep "^garm-edge-$controller-garm-dhcp" || true); do
    virsh destroy "$domain" >/dev/null 2>&1 || true
    virsh undefine "$domain" >/dev/null 2>&1 || true
  done
  virsh net-destroy "$network" >/dev/null 2>&1 || true
  virsh net-undefine "$network" >/dev/null 2>&1 || true
  virsh pool-destroy "$storage_pool" >/dev/null 2>&1 || true
  virsh pool-undefine "$storage_pool" >/dev/null 2>&1 || true
  rm -rf "$pool_dir" "$work"
}
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"

rm -rf "$pool_dir" && mkdir -p "$pool_dir" && chmod 0755 "$pool_dir"
qemu-img create -q -f qcow2 "$pool_dir/base.qcow2" 64M
virsh pool-define-as "$storage_pool" dir --target "$pool_dir" >/dev/null
virsh pool-start "$storage_pool" >/dev/null
cat > "$work/net.xml" <<XML
<network>
  <name>$network</name>
  <forward mode='nat'/>
  <bridge name='$bridge' stp='off' delay='0'/>
  <ip address='192.168.153.1' netmask='255.255.255.0'>
    <dhcp><range start='192.168.153.100' end='192.168.153.200'><lease expiry='1' unit='hours'/></range></dhcp>
  </ip>
</network>
XML
virsh net-define "$work/net.xml" >/dev/null
virsh net-start "$network" >/dev/null

"$agent" pki init --dir "$work/pki" --dns localhost >/dev/null
cat > "$work/agent.toml" <<TOML
[agent]
id = "dhcptest"
state_dir = "$work/state"
[libvirt]
uri = "qemu:///system"
storage_pool = "$storage_pool"
network = "$network"
virt_type = "qemu"
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
addresses = "192.168.153.2-192.168.153.3"
address_quarantine_seconds = 0
[[images]]
name = "tiny"
base_volume = "base.qcow2"
[[flavors]]
name = "small"
vcpus = 1
memory_mib = 128
disk_gib = 1
TOML
"$agent" serve --config "$work/agent.toml" 2> "$work/agent.log" &
agent_pid=$!
for _ in $(seq 200); do grep -q ' (agent ' "$work/agent.log" 2>/dev/null && break; sleep 0.05; done
port=$(sed -n 's/^<[0-9]>listening on 127.0.0.1:\([0-9]*\) (agent.*/\1/p' "$work/agent.log")
[ -n "$port" ] || fail "the agent did not start"

api() {
  curl -sS --fail-with-body --cacert "$work/pki/ca.crt" --cert "$work/pki/clients/garm.crt" \
    --key "$work/pki/clients/garm.key" "https://localhost:$port/v1/controllers/$controller/$1" "${@:2}"
}
create() {  # NAME: prints the reserved address and the domain's MAC
  local name=$1
  api instances -X POST --data-binary @- > "$work/$name.json" <<JSON || fail "create $name: $(cat "$work/$name.json")"
{"name":"$name","tools":[],"repo_url":"https://github.com/example","callback-url":"https://garm.example/api/v1/callbacks","metadata-url":"https://garm.example/api/v1/metadata","instance-token":"not-printed","ssh-keys":null,"extra_specs":{"runner_install_template":"IyEvYmluL2Jhc2gK"},"github-runner-group":"","ca-cert-bundle":null,"arch":"amd64","os_type":"linux","flavor":"small","image":"tiny","labels":null,"pool_id":"0f1e2d3c-4b5a-4968-8776-a5b4c3d2e1f0","user_data_options":{"disable_updates_on_boot":false,"extra_packages":null,"enable_boot_debug":false},"jit_config_enabled":true,"proxy_config":{"http_proxy":"","https_proxy":"","no_proxy":""}}
JSON
  local domain=garm-edge-$controller-$name
  local mac
  mac=$(virsh dumpxml "$domain" | sed -n "s/.*<mac address='\([^']*\)'.*/\1/p" | head -1)
  # The domain's own NIC leaves the bridge: the veth below is this guest's DHCP client.
  virsh destroy "$domain" >/dev/null
  printf '%s %s\n' "$(sed -n 's/.*"address":"\([0-9.]*\)".*/\1/p' "$work/$name.json")" "$mac"
}
# The address dnsmasq hands to a DHCP client with MAC (busybox udhcpc in the namespace).
dhcp_address() {
  local mac=$1
  ip netns exec "$namespace" ip link set gedhcp-guest down
  ip netns exec "$namespace" ip link set gedhcp-guest address "$mac"
  ip netns exec "$namespace" ip link set gedhcp-guest up
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

read -r first_ip first_mac < <(create garm-dhcp0001)
echo "garm-dhcp0001: reserved $first_ip for $first_mac"
leased=$(dhcp_address "$first_mac")
[ "$leased" = "$first_ip" ] || fail "the first guest got $leased by DHCP, reserved $first_ip"
api instances/garm-dhcp0001 -X DELETE >/dev/null
grep -q "$first_mac" "/var/lib/libvirt/dnsmasq/$bridge.status" ||
  fail "dnsmasq forgot the first lease (nothing to reproduce)"
echo "deleted garm-dhcp0001; dnsmasq keeps its lease of $first_ip for an hour"

read -r second_ip second_mac < <(create garm-dhcp0002)
echo "garm-dhcp0002: reserved $second_ip for $second_mac (quarantine 0 s: the same address)"
[ "$second_ip" = "$first_ip" ] || fail "the second guest was not given the released address"
leased=$(dhcp_address "$second_mac")
[ "$leased" = "$second_ip" ] ||
  fail "the second guest got $leased by DHCP while reserved $second_ip (dnsmasq still leases it to $first_mac)"
api instances/garm-dhcp0002 -X DELETE >/dev/null
echo "system tier: a reused address reached the next guest through a real dnsmasq"
