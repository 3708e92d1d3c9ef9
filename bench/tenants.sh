#!/usr/bin/env bash
# Issue 25's tenant attacks against two builds of the agent, side by side: each probe starts a
# fresh `garm-edge-agent serve` of each build (scripts/lib/agent-fixture.sh: libvirt's test
# driver, the mTLS API and the guest service on loopback, guests at 127.0.3.x, a second
# controller's client `other`), a fake garm (tests/support/fake_garm.py, plain HTTP) for the
# guests' relayed calls, and runs bench/tenants.py PROBE: the attack, the other tenant's
# requests meanwhile, and the agent's highest RSS, threads and descriptors during it. Both agents
# run with the same config (what the old one accepts) and a descriptor limit of 8192.
# Usage (as root): bench/tenants.sh OLD_BUILD_DIR NEW_BUILD_DIR
# (TENANTS_ONLY="PROBE ..." runs only those probes; the names are in the table below.)
set -euo pipefail
old=$(cd "$1" && pwd)
new=$(cd "$2" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
uri="test://$root/tests/data/hostile-load.xml"
guest_addresses=127.0.3.1-127.0.3.60
other_controller=5b0e9d7c-3a41-4c2e-9f8d-6e7a1b2c3d4e
token_a=eyJhbGciOiJIUzI1NiJ9.tenant-a.signature
token_b=eyJhbGciOiJIUzI1NiJ9.tenant-b.signature
ulimit -n 8192

shared=$(mktemp -d /tmp/garm-edge-tenants.XXXXXX)
trap 'rm -rf "$shared"' EXIT
# 36 distinct CA bundles (item 7), a runner archive served at 64 KiB/s (item 6), the fake garm's two guests.
for i in $(seq -w 1 36); do
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj "/CN=tenant CA $i" \
    -keyout /dev/null -out "$shared/ca$i.pem" 2>/dev/null
done
mkdir "$shared/downloads"
head -c 4194304 /dev/zero > "$shared/downloads/runner.tar.gz"
cat > "$shared/instances.json" <<JSON
{"$token_a": {"install_script": "#!/bin/bash\n# install A\n", "agent_tool_bytes": 40000000},
 "$token_b": {"install_script": "#!/bin/bash\n# install B\n", "agent_tool_bytes": 3000000}}
JSON

# run_probe BUILD PROBE: a fresh agent of BUILD and a fake garm (both stopped and their work
# directory removed on return), then one line of JSON from tenants.py PROBE.
run_probe() (
  build=$1
  announce() { :; }
  agent_extra_toml="[[api.clients]]
identity = \"other\"
controllers = [\"$other_controller\"]"
  # shellcheck source-path=SCRIPTDIR source=../scripts/lib/agent-fixture.sh
  . "$root/scripts/lib/agent-fixture.sh" > /dev/null
  "$agent" pki issue-client other --dir "$work/pki" > /dev/null
  "$agent" pki issue-client stranger --dir "$work/pki" > /dev/null
  /usr/bin/python3 "$root/tests/support/fake_garm.py" --plain --port-file "$work/garm.port" \
    --log "$work/garm.log" --instances "$shared/instances.json" --downloads "$shared/downloads" \
    --download-rate 65536 2> "$work/garm.err" &
  garm_pid=$!
  trap 'kill "$garm_pid" 2>/dev/null; wait "$garm_pid" 2>/dev/null; cleanup' EXIT
  for _ in $(seq 100); do [ -s "$work/garm.port" ] && break; sleep 0.05; done
  /usr/bin/python3 - "$work/probe.json" <<PY
import glob, json, sys
json.dump({"agent_pid": $agent_pid, "api_port": $port, "guest_host": "${guest_url#http://}".split(":")[0],
           "guest_port": ${guest_url##*:}, "garm_port": $(cat "$work/garm.port"),
           "pki": "$work/pki", "pool": "$pool", "state_dir": "$work/state",
           "agent_log": "$work/agent.log", "max_connections": 256,
           "controllers": {"garm": "$controller", "stranger": "$controller",
                           "other": "$other_controller"},
           "token_a": "$token_a", "token_b": "$token_b",
           "ca_bundles": sorted(glob.glob("$shared/ca*.pem"))}, open(sys.argv[1], "w"))
PY
  /usr/bin/python3 "$here/tenants.py" "$2" "$work/probe.json" ||
    echo '{"legit": "probe failed", "slowest": "-", "rss": 0, "threads": 0, "fds": 0, "note": ""}'
  kill -0 "$agent_pid" 2>/dev/null || echo '{"note": "the agent is gone"}'
)

# cell JSON_LINE: legit / slowest / RSS / threads / fds
cell() {
  /usr/bin/python3 -c '
import json, sys
r = json.loads(sys.argv[1].splitlines()[0])
print("%s / %s / %.1f MiB / %d / %d" % (r["legit"], r["slowest"], r["rss"], r["threads"], r["fds"]))' "$1"
}
note() { /usr/bin/python3 -c 'import json, sys; print(json.loads(sys.argv[1].splitlines()[0])["note"])' "$1"; }

rows=(
  "1|4 addresses x 16 stalled ClientHellos + 1,000 silent sockets; garm asks 20 times|stalled-hellos"
  "1|200 silent sockets reopened from garm's own address; garm asks 20 times|silent-own-address"
  "3|garm's certificate holds 256 kept-alive connections; another controller asks 10 times|one-client-holds"
  "3|a CA certificate in no [[api.clients]] opens 256 connections; garm asks 10 times|unlisted-holds"
  "4|32 addresses that are no guest's x 16 idle guest-service connections; a guest's 11 relay calls|strangers-guest-service"
  "8|one guest reads 4 garm-agent downloads slowly; another guest downloads 3 times|slow-reader-downloads"
  "9|one guest sends 2,050 status reports; another controller's event history, log lines|report-flood"
  "6|8 create+delete naming slow archive URLs (64 KiB/s, distinct SHA-256)|slow-archives"
  "6|8 create+delete naming archive URLs that stall after 64 KiB (distinct SHA-256)|stalled-archives"
  "7|36 creates with distinct CA bundles, then all deleted|ca-bundles"
)
notes=()
table="| item | attack | old: legit answered / slowest / RSS / threads / fds | new: legit answered / slowest / RSS / threads / fds |
|---|---|---|---|"
for row in "${rows[@]}"; do
  IFS='|' read -r item attack probe <<< "$row"
  [[ -z "${TENANTS_ONLY:-}" || " $TENANTS_ONLY " == *" $probe "* ]] || continue
  echo "== item $item: $attack" >&2
  before=$(run_probe "$old" "$probe")
  after=$(run_probe "$new" "$probe")
  table+="
| $item | $attack | $(cell "$before") | $(cell "$after") |"
  notes+=("item $item ($probe): $(note "$after")")
done
echo "$table"
echo
printf '%s\n' "${notes[@]}"
cat <<'TEXT'

Slowest: the slowest legitimate request ("none": at least one got no answer in time; the legit
count is of those answered within 1 s). RSS, threads and fds: the agent's highest while the
attack ran (fds include the attack's connections the agent accepted).
Not probed here:
- item 2 (warm guests prepared with one controller's archive handed to another): warm guests
  become ready only when a booted guest fetches its seed and reports; the test driver boots
  nothing. Settled by tests/agent/guests/guest_service_test.cpp (warm guests per controller).
- item 5 (address exhaustion invisible to placement): a correctness answer (503 unavailable vs
  no_capacity), not a figure under attack; settled by tests/provider/fleet_test.cpp.
TEXT
