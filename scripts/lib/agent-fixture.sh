# shellcheck shell=bash disable=SC2034,SC2154 # shares its variables with the script that sources it
# Sourced by the demo and the benchmark: certificates from `pki init`, an agent serving its mTLS
# API on a free loopback port over libvirt URI $uri, and a provider config for it. Expects $build
# (a build directory), $uri and an `announce` function (and takes $guest_addresses, a range on
# the network `default`, and $agent_extra_toml, appended to agent.toml, when set); sets $agent,
# $provider, $work (removed on exit, with the agent stopped), $controller, $pool and $port, and
# writes $work/provider.toml.

# shellcheck source-path=SCRIPTDIR source=agent-toml.sh
. "$(dirname "${BASH_SOURCE[0]}")/agent-toml.sh"
# shellcheck source-path=SCRIPTDIR source=agent-ready.sh
. "$(dirname "${BASH_SOURCE[0]}")/agent-ready.sh"
agent=$build/agent/garm-edge-agent
provider=$build/provider/garm-provider-edge
work=$(mktemp -d /tmp/garm-edge.XXXXXX)
agent_pid=
cleanup() {
  if [ -n "$agent_pid" ]; then kill "$agent_pid" 2>/dev/null && wait "$agent_pid" 2>/dev/null; fi || true
  rm -rf "$work"
}
trap cleanup EXIT

controller=9dcf590a-1192-4a9c-b3e4-e0902974c2c0
pool=0f1e2d3c-4b5a-4968-8776-a5b4c3d2e1f0

announce "garm-edge-agent pki init: a CA, the agent's server certificate, garm's client certificate"
"$agent" pki init --dir "$work/pki" --dns localhost --ip 127.0.0.1

cat > "$work/agent.toml" <<TOML
[agent]
id = "demo-host"
state_dir = "$work/state"
[libvirt]
uri = "$uri"
storage_pool = "default-pool"
network = "default"
$(agent_api_toml "$work/pki" "$controller")
[guests]
# Guests on the test driver's network are not real: serve them on loopback, reserve addresses
# outside the part a demo would use, and skip nwfilters (the test driver has none).
address = "127.0.0.1"
port = 0
addresses = "${guest_addresses:-192.168.122.200-192.168.122.250}"
anti_spoofing = "off"
[capacity]
# The test driver's host is a made-up 3 GiB one whose guests run nowhere: room for hundreds.
cpu_overcommit = 1000
memory_overcommit = 1000
reserved_memory_mib = 0
[[images]]
name = "debian-12"
base_path = "/var/lib/garm-edge/images/debian-12.qcow2"
os_name = "debian"
os_version = "12"
[[flavors]]
name = "small"
vcpus = 2
memory_mib = 2048
disk_gib = 20
${agent_extra_toml:-}
TOML
announce "garm-edge-agent check-config, then serve (mTLS control API on a free loopback port)"
"$agent" check-config --config "$work/agent.toml"
"$agent" serve --config "$work/agent.toml" --ready-file "$work/agent.ready" 2> "$work/agent.log" &
agent_pid=$!
wait_for_agent_ready "$agent_pid" "$work/agent.ready" "$work/agent.log" 200 || exit 1
port=$api_port
echo "agent listening on 127.0.0.1:$port; guests reach it at $guest_url"

provider_toml demo-host "$port" "$work/pki" "$work/sessions" > "$work/provider.toml"

