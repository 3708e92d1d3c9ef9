#!/usr/bin/env bash
# The whole garm flow on libvirt's test driver: certificates from `pki init`, the agent serving
# its mTLS API, and garm-provider-edge run exactly as garm runs it (no arguments, a clean
# environment with only garm's variables, the bootstrap on stdin). Prints every step.
# Usage: garm-flow-demo.sh BUILD_DIR [LIBVIRT_URI]
set -euo pipefail
build=$(cd "$1" && pwd)
uri=${2:-test:///default}

step() { printf '\n== %s\n' "$*"; }
announce() { step "$@"; }
expect() { [ "$1" = "$2" ] || { echo "FAILED: $3 (got '$1', wanted '$2')"; exit 1; }; }
# shellcheck source-path=SCRIPTDIR source=lib/agent-fixture.sh
. "$(dirname "$0")/lib/agent-fixture.sh"

# garm's exec: GARM_* and garm's proxy variables only (no PATH, no HOME), stdin a pipe.
garm() {
  local command=$1; shift
  local started ended status=0
  started=$(date +%s%N)
  # shellcheck disable=SC2154 # garm_proxy_env: scripts/lib/agent-toml.sh, through agent-fixture.sh
  out=$(env -i ${garm_proxy_env[@]+"${garm_proxy_env[@]}"} GARM_COMMAND="$command" \
        GARM_CONTROLLER_ID="$controller" GARM_PROVIDER_CONFIG_FILE="$work/provider.toml" \
        GARM_INTERFACE_VERSION=v0.1.0 "$@" "$provider" \
        < "${stdin_file:-/dev/null}") || status=$?
  ended=$(date +%s%N)
  printf '%s -> exit %d in %d ms\n' "$command" "$status" $(((ended - started) / 1000000))
  [ -n "$out" ] && printf '   %s\n' "$out"
  last_status=$status
  return 0
}
# garm's wrapper, as garm puts it into extra_specs.runner_install_template (base64).
# shellcheck disable=SC2016 # the guest's shell expands these, not this one
wrapper=$(printf '#!/bin/bash\nset -ex\nCALLBACK_URL="https://garm.example/api/v1/callbacks"\nMETADATA_URL="https://garm.example/api/v1/metadata"\ncurl -fsSL -H "Authorization: Bearer $BEARER_TOKEN" "$METADATA_URL/install-script/" -o /tmp/real-install.sh\n' | base64 -w0)
bootstrap() {
  printf '{"name":"%s","tools":[],"repo_url":"https://github.com/example","callback-url":"https://garm.example/api/v1/callbacks","metadata-url":"https://garm.example/api/v1/metadata","instance-token":"not-printed","ssh-keys":null,"extra_specs":{"runner_install_template":"%s"},"github-runner-group":"","ca-cert-bundle":null,"arch":"amd64","os_type":"linux","flavor":"small","image":"debian-12","labels":null,"pool_id":"%s","user_data_options":{"disable_updates_on_boot":false,"extra_packages":null,"enable_boot_debug":false},"jit_config_enabled":true,"proxy_config":{"http_proxy":"","https_proxy":"","no_proxy":""}}' "$1" "$wrapper" "$pool" > "$work/bootstrap.json"
}

step "CreateInstance twice (BootstrapInstance on stdin)"
bootstrap garm-demo00001; stdin_file=$work/bootstrap.json garm CreateInstance GARM_POOL_ID="$pool"
first_id=$(printf '%s' "$out" | sed -n 's/.*"provider_id":"\([^"]*\)".*/\1/p')
expect "${first_id%%:*}" demo-host "CreateInstance returns a provider ID routed to its agent"
bootstrap garm-demo00002; stdin_file=$work/bootstrap.json garm CreateInstance GARM_POOL_ID="$pool"
step "CreateInstance again for garm-demo00001 (garm retries): the same instance"
bootstrap garm-demo00001; stdin_file=$work/bootstrap.json garm CreateInstance GARM_POOL_ID="$pool"
expect "$(printf '%s' "$out" | sed -n 's/.*"provider_id":"\([^"]*\)".*/\1/p')" "$first_id" "a repeated create returns the same instance"
step "ListInstances for the pool"
garm ListInstances GARM_POOL_ID="$pool"
step "GetInstance by provider ID, StopInstance, GetInstance, StartInstance"
garm GetInstance GARM_INSTANCE_ID="$first_id"
garm StopInstance GARM_INSTANCE_ID="$first_id"
garm GetInstance GARM_INSTANCE_ID=garm-demo00001
garm StartInstance GARM_INSTANCE_ID="$first_id"
step "the guest side: its reserved address, its lifecycle events, and a stranger's seed request"
control() {
  curl -sS --cacert "$work/pki/ca.crt" --cert "$work/pki/clients/garm.crt" \
    --key "$work/pki/clients/garm.key" "https://localhost:$port/v1/controllers/$controller/$1"
}
printf '   guest: %s\n' "$(control instances/garm-demo00001/guest)"
printf '   events: %s\n' "$(control 'events?instance=garm-demo00001')"
expect "$(control instances/garm-demo00001/guest | sed -n 's/.*"address":"\([^"]*\)".*/\1/p')" 192.168.122.200 "the first guest gets the first reserved address"
stranger=$(curl -s -o /dev/null -w '%{http_code}' "$guest_url/AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA/user-data" || true)
printf '   GET %s/<a guessed token>/user-data from an address that is no guest'"'"'s -> %s\n' "$guest_url" "$stranger"
expect "$stranger" 000 "an address that is no guest's gets no connection at all"
step "DeleteInstance by provider ID and by name; deleting what is gone succeeds"
garm DeleteInstance GARM_INSTANCE_ID="$first_id"
garm DeleteInstance GARM_INSTANCE_ID=garm-demo00002
garm DeleteInstance GARM_INSTANCE_ID=garm-demo00002
garm GetInstance GARM_INSTANCE_ID=garm-demo00002
expect "$last_status" 30 "GetInstance of a deleted instance exits 30"
step "ListInstances of the now empty pool, and GetVersion"
garm ListInstances GARM_POOL_ID="$pool"
expect "$out" "[]" "an empty pool lists as []"
garm GetVersion
step "what the agent logged"
cat "$work/agent.log"
printf '\nflow finished\n'
