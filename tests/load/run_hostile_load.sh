#!/usr/bin/env bash
# Hostile load tier: `garm-edge-agent serve` on libvirt's test driver (mutual-TLS control API and
# the plain-HTTP guest service on loopback) under silent, slow, foreign and oversized clients,
# deep JSON, token guessing and request smuggling (tests/load/hostile_load.py), while garm's
# GetInstance must still be answered within 1 s. Prints the table of times and RSS.
# Usage: run_hostile_load.sh BUILD_DIR
set -euo pipefail
build=$(cd "$1" && pwd)
uri="test://$(cd "$(dirname "$0")/../data" && pwd)/hostile-load.xml"
announce() { :; }
# Guests on loopback addresses, so that the load can speak from each guest's reserved address.
guest_addresses=127.0.3.1-127.0.3.60
# shellcheck source-path=SCRIPTDIR source=../../scripts/lib/agent-fixture.sh
. "$(dirname "$0")/../../scripts/lib/agent-fixture.sh" > /dev/null

# 40 guests: 20 whose addresses probe, 20 whose addresses attack.
for i in $(seq -w 1 40); do
  printf '{"name":"garm-hostile%s","tools":[],"repo_url":"https://github.com/example","callback-url":"https://garm.example/api/v1/callbacks","metadata-url":"https://garm.example/api/v1/metadata","instance-token":"not-printed","ssh-keys":null,"extra_specs":{"runner_install_template":"IyEvYmluL2Jhc2gK"},"github-runner-group":"","ca-cert-bundle":null,"arch":"amd64","os_type":"linux","flavor":"small","image":"debian-12","labels":null,"pool_id":"%s","user_data_options":{"disable_updates_on_boot":false,"extra_packages":null,"enable_boot_debug":false},"jit_config_enabled":true,"proxy_config":{"http_proxy":"","https_proxy":"","no_proxy":""}}' "$i" "$pool" > "$work/bootstrap.json"
  env -i GARM_COMMAND=CreateInstance GARM_CONTROLLER_ID="$controller" GARM_POOL_ID="$pool" \
    GARM_PROVIDER_CONFIG_FILE="$work/provider.toml" GARM_INTERFACE_VERSION=v0.1.0 "$provider" \
    < "$work/bootstrap.json" > /dev/null
done
guest_addresses_json=$(env -i GARM_COMMAND=ListInstances GARM_CONTROLLER_ID="$controller" GARM_POOL_ID="$pool" \
  GARM_PROVIDER_CONFIG_FILE="$work/provider.toml" GARM_INTERFACE_VERSION=v0.1.0 "$provider" |
  /usr/bin/python3 -c 'import json, sys; print(json.dumps(sorted(a["address"] for i in json.load(sys.stdin) for a in i["addresses"])))')
"$agent" pki init --dir "$work/foreign" --dns localhost > /dev/null

guest_port=${guest_url##*:}
/usr/bin/python3 - "$work/load.json" <<PY
import json, sys
json.dump({"agent_pid": $agent_pid, "api_port": $port, "guest_host": "${guest_url#http://}".split(":")[0],
           "guest_port": $guest_port, "controller": "$controller", "instance": "garm-hostile01",
           "guest_addresses": $guest_addresses_json,
           "provider": "$provider", "provider_config": "$work/provider.toml",
           "ca": "$work/pki/ca.crt", "garm_cert": "$work/pki/clients/garm.crt",
           "garm_key": "$work/pki/clients/garm.key",
           "foreign_cert": "$work/foreign/clients/garm.crt",
           "foreign_key": "$work/foreign/clients/garm.key"}, open(sys.argv[1], "w"))
PY
/usr/bin/python3 "$(dirname "$0")/hostile_load.py" "$work/load.json"
kill -0 "$agent_pid" || { echo "FAILED: the agent is gone"; exit 1; }
