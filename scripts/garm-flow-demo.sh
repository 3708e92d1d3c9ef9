#!/usr/bin/env bash
# The whole garm flow on libvirt's test driver: certificates from `pki init`, the agent serving
# its mTLS API, and garm-provider-edge run exactly as garm runs it (no arguments, a clean
# environment with only garm's variables, the bootstrap on stdin). Prints every step.
# Usage: garm-flow-demo.sh BUILD_DIR [LIBVIRT_URI]
set -euo pipefail
build=$(cd "$1" && pwd)
uri=${2:-test:///default}
agent=$build/agent/garm-edge-agent
provider=$build/provider/garm-provider-edge
work=$(mktemp -d /tmp/garm-edge-flow.XXXXXX)
agent_pid=
cleanup() {
  [ -n "$agent_pid" ] && kill "$agent_pid" 2>/dev/null && wait "$agent_pid" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT

controller=9dcf590a-1192-4a9c-b3e4-e0902974c2c0
pool=0f1e2d3c-4b5a-4968-8776-a5b4c3d2e1f0
step() { printf '\n== %s\n' "$*"; }
expect() { [ "$1" = "$2" ] || { echo "FAILED: $3 (got '$1', wanted '$2')"; exit 1; }; }

step "garm-edge-agent pki init: a CA, the agent's server certificate, garm's client certificate"
"$agent" pki init --dir "$work/pki" --dns localhost --ip 127.0.0.1

cat > "$work/agent.toml" <<TOML
[agent]
id = "demo-host"
state_dir = "$work/state"
[libvirt]
uri = "$uri"
storage_pool = "default-pool"
network = "default"
[api]
address = "127.0.0.1"
port = 0
ca = "$work/pki/ca.crt"
certificate = "$work/pki/agent.crt"
key = "$work/pki/agent.key"
[[api.clients]]
identity = "garm"
controllers = ["$controller"]
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
TOML
step "garm-edge-agent check-config, then serve (mTLS control API on a free loopback port)"
"$agent" check-config --config "$work/agent.toml"
"$agent" serve --config "$work/agent.toml" 2> "$work/agent.log" &
agent_pid=$!
for _ in $(seq 100); do grep -q 'listening on' "$work/agent.log" 2>/dev/null && break; sleep 0.05; done
port=$(sed -n 's/.*listening on 127.0.0.1:\([0-9]*\).*/\1/p' "$work/agent.log")
[ -n "$port" ] || { cat "$work/agent.log"; exit 1; }
echo "agent listening on 127.0.0.1:$port"

mkdir -p "$work/sessions"
cat > "$work/provider.toml" <<TOML
session_dir = "$work/sessions"
[[agents]]
name = "demo-host"
url = "https://localhost:$port"
ca = "$work/pki/ca.crt"
certificate = "$work/pki/clients/garm.crt"
key = "$work/pki/clients/garm.key"
TOML

# garm's exec: only GARM_* variables (no PATH, no HOME), stdin a pipe.
garm() {
  local command=$1; shift
  local started ended status=0
  started=$(date +%s%N)
  out=$(env -i GARM_COMMAND="$command" GARM_CONTROLLER_ID="$controller" \
        GARM_PROVIDER_CONFIG_FILE="$work/provider.toml" GARM_INTERFACE_VERSION=v0.1.0 "$@" "$provider" \
        < "${stdin_file:-/dev/null}") || status=$?
  ended=$(date +%s%N)
  printf '%s -> exit %d in %d ms\n' "$command" "$status" $(((ended - started) / 1000000))
  [ -n "$out" ] && printf '   %s\n' "$out"
  last_status=$status
  return 0
}
bootstrap() {
  printf '{"name":"%s","tools":[],"repo_url":"https://github.com/example","callback-url":"https://garm.example/api/v1/callbacks","metadata-url":"https://garm.example/api/v1/metadata","instance-token":"not-printed","ssh-keys":null,"extra_specs":{},"github-runner-group":"","ca-cert-bundle":null,"arch":"amd64","os_type":"linux","flavor":"small","image":"debian-12","labels":null,"pool_id":"%s","user_data_options":{"disable_updates_on_boot":false,"extra_packages":null,"enable_boot_debug":false},"jit_config_enabled":true,"proxy_config":{"http_proxy":"","https_proxy":"","no_proxy":""}}' "$1" "$pool" > "$work/bootstrap.json"
}

step "CreateInstance twice (BootstrapInstance on stdin)"
bootstrap garm-demo00001; stdin_file=$work/bootstrap.json garm CreateInstance GARM_POOL_ID=$pool
first_id=$(printf '%s' "$out" | sed -n 's/.*"provider_id":"\([^"]*\)".*/\1/p')
expect "${first_id%%:*}" demo-host "CreateInstance returns a provider ID routed to its agent"
bootstrap garm-demo00002; stdin_file=$work/bootstrap.json garm CreateInstance GARM_POOL_ID=$pool
step "CreateInstance again for garm-demo00001 (garm retries): the same instance"
bootstrap garm-demo00001; stdin_file=$work/bootstrap.json garm CreateInstance GARM_POOL_ID=$pool
expect "$(printf '%s' "$out" | sed -n 's/.*"provider_id":"\([^"]*\)".*/\1/p')" "$first_id" "a repeated create returns the same instance"
step "ListInstances for the pool"
garm ListInstances GARM_POOL_ID=$pool
step "GetInstance by provider ID, StopInstance, GetInstance, StartInstance"
garm GetInstance GARM_INSTANCE_ID="$first_id"
garm StopInstance GARM_INSTANCE_ID="$first_id"
garm GetInstance GARM_INSTANCE_ID=garm-demo00001
garm StartInstance GARM_INSTANCE_ID="$first_id"
step "DeleteInstance by provider ID and by name; deleting what is gone succeeds"
garm DeleteInstance GARM_INSTANCE_ID="$first_id"
garm DeleteInstance GARM_INSTANCE_ID=garm-demo00002
garm DeleteInstance GARM_INSTANCE_ID=garm-demo00002
garm GetInstance GARM_INSTANCE_ID=garm-demo00002
expect "$last_status" 30 "GetInstance of a deleted instance exits 30"
step "ListInstances of the now empty pool, and GetVersion"
garm ListInstances GARM_POOL_ID=$pool
expect "$out" "[]" "an empty pool lists as []"
garm GetVersion
step "what the agent logged"
cat "$work/agent.log"
printf '\nflow finished\n'
