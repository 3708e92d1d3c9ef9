# shellcheck shell=bash disable=SC2034,SC2154  # variables shared with the sourcing script
# Sourced by the system-tier scripts whose guests need not boot: a real libvirtd with QEMU (TCG),
# a directory storage pool holding an empty 64 MiB base image, a NAT network for guests with
# DHCP reservations and the agent's anti-spoofing nwfilter, and the agent's and the provider's
# configs. Offers start_agent (and stop_agent), api (the control API with garm's certificate)
# and garm (the provider as garm runs it). Before sourcing, set $build and $tiny (a short name,
# unique per script: it names the pool, network and bridge) and optionally $tiny_subnet (third
# octet, default 154), $tiny_guest_extra (more lines for [guests]) and $tiny_state_dir.
# Exits 77 (skipped) when not root.

agent=$build/agent/garm-edge-agent
provider=$build/provider/garm-provider-edge
extra_packages=(dnsmasq-base iptables ebtables curl python3 ${tiny_packages[@]+"${tiny_packages[@]}"})
virsh() { command virsh -q -c qemu:///system "$@"; }

work=$(mktemp -d "/tmp/garm-edge-$tiny.XXXXXX")
network=garm-edge-$tiny-net
bridge=ge${tiny:0:8}br0
storage_pool=garm-edge-$tiny
pool_dir=/var/lib/garm-edge-$tiny
subnet=192.168.${tiny_subnet:-154}
state_dir=${tiny_state_dir:-$work/state}
controller=$(cat /proc/sys/kernel/random/uuid)  # this run's own: cleanup touches no other
pool_id=0f1e2d3c-4b5a-4968-8776-a5b4c3d2e1f0
agent_pid=
made_host=
stop_agent() {
  if [ -n "$agent_pid" ]; then kill "$agent_pid" 2>/dev/null && wait "$agent_pid" 2>/dev/null; fi || true
  agent_pid=
}
tiny_host_cleanup() {
  stop_agent
  for domain in $(virsh list --all --name | grep "^garm-edge-$controller-" || true); do
    virsh destroy "$domain" >/dev/null 2>&1 || true
    virsh undefine "$domain" >/dev/null 2>&1 || true
  done
  if [ -n "$made_host" ]; then  # never another run's network or pool of the same name
    virsh net-destroy "$network" >/dev/null 2>&1 || true
    virsh net-undefine "$network" >/dev/null 2>&1 || true
    virsh pool-destroy "$storage_pool" >/dev/null 2>&1 || true
    virsh pool-undefine "$storage_pool" >/dev/null 2>&1 || true
    rm -rf "$pool_dir"
  fi
  for filter in garm-edge-source-ip garm-edge-source-ip-{mac,arp-mac,arp-ip,ipv4}; do
    virsh nwfilter-undefine "$filter" >/dev/null 2>&1 || true  # refused while in use
  done
  rm -rf "$work"
}
system_cleanup() {
  if declare -F test_cleanup >/dev/null; then test_cleanup; fi
  tiny_host_cleanup
}
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
# shellcheck source-path=SCRIPTDIR source=../../scripts/lib/agent-toml.sh
. "$(dirname "${BASH_SOURCE[0]}")/../../scripts/lib/agent-toml.sh"
# shellcheck source-path=SCRIPTDIR source=../../scripts/lib/agent-ready.sh
. "$(dirname "${BASH_SOURCE[0]}")/../../scripts/lib/agent-ready.sh"

claim_test_host "$tiny"
made_host=1
mkdir -p "$pool_dir" && chmod 0755 "$pool_dir"
qemu-img create -q -f qcow2 "$pool_dir/base.qcow2" 64M
virsh pool-define-as "$storage_pool" dir --target "$pool_dir" >/dev/null
virsh pool-start "$storage_pool" >/dev/null
cat > "$work/net.xml" <<XML
<network>
  <name>$network</name>
  <forward mode='nat'/>
  <bridge name='$bridge' stp='off' delay='0'/>
  <ip address='$subnet.1' netmask='255.255.255.0'>
    <dhcp><range start='$subnet.100' end='$subnet.200'/></dhcp>
  </ip>
</network>
XML
virsh net-define "$work/net.xml" >/dev/null
virsh net-start "$network" >/dev/null

"$agent" pki init --dir "$work/pki" --dns localhost >/dev/null
cat > "$work/agent.toml" <<TOML
[agent]
id = "$tiny"
state_dir = "$state_dir"
[libvirt]
uri = "qemu:///system"
storage_pool = "$storage_pool"
network = "$network"
virt_type = "qemu"
$(agent_api_toml "$work/pki" "$controller")
[guests]
port = 0
${tiny_guest_extra:-}
[capacity]
# Tiny guests that need not boot: far more of them than the host's CPUs times the default 4.
cpu_overcommit = 100
[[images]]
name = "tiny"
base_volume = "base.qcow2"
[[flavors]]
name = "small"
vcpus = 1
memory_mib = 64
disk_gib = 1
TOML

# Starts `garm-edge-agent serve` with its log appended to $work/agent.log; sets agent_pid and
# port, and writes the provider's config for that port.
start_agent() {
  rm -f "$work/agent.ready"
  "$agent" serve --config "$work/agent.toml" --ready-file "$work/agent.ready" \
    2>> "$work/agent.log" {test_host_lock}>&- &
  agent_pid=$!
  wait_for_agent_ready "$agent_pid" "$work/agent.ready" "$work/agent.log" 400 || exit 1
  port=$api_port
  provider_toml "$tiny" "$port" "$work/pki" "$work/sessions" > "$work/provider.toml"
}

api() {
  curl -sS --max-time 60 --cacert "$work/pki/ca.crt" --cert "$work/pki/clients/garm.crt" \
    --key "$work/pki/clients/garm.key" "https://localhost:$port/v1/controllers/$controller/$1" "${@:2}"
}

# garm's exec of the provider: GARM_* and garm's proxy variables only (no PATH, no HOME), stdin from
# $stdin_file. Sets $out, $err and $last_status; never fails itself.
garm() {
  local command=$1 err_file=$work/garm.$BASHPID.err  # its own: garm runs providers concurrently
  shift
  last_status=0
  out=$(env -i ${garm_proxy_env[@]+"${garm_proxy_env[@]}"} GARM_COMMAND="$command" GARM_CONTROLLER_ID="$controller" \
    GARM_PROVIDER_CONFIG_FILE="$work/provider.toml" GARM_INTERFACE_VERSION=v0.1.0 "$@" \
    "$provider" < "${stdin_file:-/dev/null}" 2> "$err_file") || last_status=$?
  err=$(cat "$err_file")
  rm -f "$err_file"
}

# A BootstrapInstance for NAME on the tiny image, as garm sends it.
bootstrap() {
  printf '{"name":"%s","tools":[],"repo_url":"https://github.com/example","callback-url":"https://garm.example/api/v1/callbacks","metadata-url":"https://garm.example/api/v1/metadata","instance-token":"token-%s","ssh-keys":null,"extra_specs":{"runner_install_template":"IyEvYmluL2Jhc2gK"},"github-runner-group":"","ca-cert-bundle":null,"arch":"amd64","os_type":"linux","flavor":"small","image":"tiny","labels":null,"pool_id":"%s","user_data_options":{"disable_updates_on_boot":false,"extra_packages":null,"enable_boot_debug":false},"jit_config_enabled":true,"proxy_config":{"http_proxy":"","https_proxy":"","no_proxy":""}}\n' "$1" "$1" "$pool_id"
}

# What is on the host for this controller, one name per line, sorted: domains, overlays,
# reservations, nwfilter bindings (by interface), records.
host_domains() { virsh list --all --name | sed -n "s/^garm-edge-$controller-//p" | sort; }
host_overlays() { find "$pool_dir" -name "garm-edge-$controller-*" -printf '%f\n' | sed "s/^garm-edge-$controller-//; s/\.qcow2\$//" | sort; }
host_reservations() { virsh net-dumpxml "$network" | grep -c "<host " || true; }
# Interfaces of running domains whose names start with PREFIX.
domain_interfaces() {
  local domain
  for domain in $(virsh list --name | grep "^$1" || true); do
    virsh domiflist "$domain" | awk 'NF {print $1}'
  done | sort
}
# nwfilter bindings of this run's domains; host_stray_bindings: those of no running domain.
host_bindings() {
  virsh nwfilter-binding-list | awk 'NF {print $1}' | sort |
    comm -12 - <(domain_interfaces "garm-edge-$controller-")
}
host_stray_bindings() {
  virsh nwfilter-binding-list | awk 'NF {print $1}' | sort | comm -23 - <(domain_interfaces "")
}
host_records() { find "$state_dir" -name '*.json' -path '*instances*' 2>/dev/null | wc -l; }
