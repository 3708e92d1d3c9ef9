#!/usr/bin/env bash
# The fleet's figures, measured in one run on four loopback agents, each on its own libvirt test
# driver host, with garm-provider-edge run as garm runs it (a whole process per command):
#  - ListInstances of 1,000 instances spread over the 4 agents, against one agent listing its
#    250 (bar: within 1.5x);
#  - CreateInstance through the 4-agent config (probe every agent, place, create) against a
#    config of one agent (create only) (bar: placement adds at most 30 %);
#  - a burst of 40 creates, 8 at a time, during which one agent is killed (kill -9): how many
#    succeed, how many fail and with what, how long each took, and garm's retries of the failed.
# Prints figures; asserts only that the steps work. Usage: bench/fleet.sh BUILD_DIR [RUNS]
set -euo pipefail
build=$(cd "$1" && pwd)
runs=${2:-21}
agent=$build/agent/garm-edge-agent
provider=$build/provider/garm-provider-edge
# shellcheck source-path=SCRIPTDIR source=../scripts/lib/agent-toml.sh
. "$(dirname "$0")/../scripts/lib/agent-toml.sh"
# shellcheck source-path=SCRIPTDIR source=../scripts/lib/agent-ready.sh
. "$(dirname "$0")/../scripts/lib/agent-ready.sh"
work=$(mktemp -d /tmp/garm-edge-fleet.XXXXXX)
pids=()
cleanup() {
  for pid in ${pids[@]+"${pids[@]}"}; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
controller=9dcf590a-1192-4a9c-b3e4-e0902974c2c0
pool=0f1e2d3c-4b5a-4968-8776-a5b4c3d2e1f0
names=(rack1 rack2 rack3 rack4)

"$agent" pki init --dir "$work/pki" --dns localhost --ip 127.0.0.1 > /dev/null
# The operator reads each agent's /metrics (garm's client acts for one controller only).
"$agent" pki issue-client operator --dir "$work/pki" > /dev/null
declare -A port_of
for name in "${names[@]}"; do
  mkdir -p "$work/$name"
  cat > "$work/$name/node.xml" <<XML
<node>
  <cpu><mhz>2000</mhz><model>x86_64</model><nodes>1</nodes><sockets>1</sockets><cores>64</cores><threads>1</threads></cpu>
  <memory>1073741824</memory>
  <pool type='dir'><name>bench-pool</name><target><path>/bench-pool</path></target>
    <volume type='file'><name>base.qcow2</name><capacity unit='GiB'>2</capacity><target><format type='qcow2'/></target></volume>
  </pool>
</node>
XML
  cat > "$work/$name/agent.toml" <<TOML
[agent]
id = "$name"
state_dir = "$work/$name/state"
[capacity]
cpu_overcommit = 100.0
[libvirt]
uri = "test://$work/$name/node.xml"
storage_pool = "bench-pool"
$(agent_api_toml "$work/pki" "$controller")
[[api.clients]]
identity = "operator"
controllers = ["*"]
[[images]]
name = "debian-12"
base_volume = "base.qcow2"
[[flavors]]
name = "small"
vcpus = 2
memory_mib = 2048
disk_gib = 20
TOML
  "$agent" serve --config "$work/$name/agent.toml" --ready-file "$work/$name/ready" \
    2> "$work/$name/agent.log" &
  pids+=($!)
  wait_for_agent_ready "${pids[-1]}" "$work/$name/ready" "$work/$name/agent.log" 200
  port_of[$name]=$api_port
  provider_toml "$name" "$api_port" "$work/pki" "$work/sessions" > "$work/$name/provider.toml"
done
{
  echo "session_dir = \"$work/sessions\""
  for name in "${names[@]}"; do provider_toml "$name" "${port_of[$name]}" "$work/pki" "$work/sessions" | sed 1d; done
} > "$work/fleet.toml"

garm() {  # CONFIG COMMAND [VAR=VALUE...] (stdin: the bootstrap for creates)
  env -i GARM_COMMAND="$2" GARM_CONTROLLER_ID=$controller GARM_PROVIDER_CONFIG_FILE="$1" \
    GARM_INTERFACE_VERSION=v0.1.0 GARM_POOL_ID=$pool "${@:3}" "$provider"
}
create() {  # CONFIG NAME
  garm_bootstrap "$2" "$pool" | garm "$1" CreateInstance > /dev/null
}
now_us() { echo $(( $(date +%s%N) / 1000 )); }
declare -A samples
measure() {  # LABEL COMMAND...
  local started
  started=$(now_us)
  "${@:2}"
  samples[$1]+="$(( $(now_us) - started )) "
}
median_ms() {
  tr ' ' '\n' <<< "${samples[$1]}" | grep -v '^$' | sort -n | awk '{a[NR]=$1} END {printf "%.1f", a[int((NR+1)/2)]/1000}'
}

echo "== CreateInstance: 4-agent placement against one agent, $runs each, interleaved"
create "$work/fleet.toml" garm-warm0 && create "$work/rack1/provider.toml" garm-warm1  # sessions
for i in $(seq "$runs"); do
  measure fleet_create create "$work/fleet.toml" "garm-fleet$i"
  measure single_create create "$work/rack1/provider.toml" "garm-single$i"
done
fleet=$(median_ms fleet_create)
single=$(median_ms single_create)
echo "  4 agents (probe all, place, create): $fleet ms"
echo "  1 agent (create)                   : $single ms"
awk -v a="$fleet" -v b="$single" 'BEGIN {printf "  placement adds                     : %.0f %% (bar: at most 30 %%)\n", (a / b - 1) * 100}'

echo "== filling the agents to 250 instances each (1,000 in all)"
# At most N of the background jobs in $@ still run (the agents are jobs of this shell too).
wait_below() {  # N PID...
  local n=$1 alive pid
  shift
  while true; do
    alive=0
    for pid in "$@"; do kill -0 "$pid" 2>/dev/null && alive=$((alive + 1)); done
    [ "$alive" -lt "$n" ] && return
    sleep 0.01
  done
}
for name in "${names[@]}"; do
  have=$(garm "$work/$name/provider.toml" ListInstances | grep -o '"provider_id"' | wc -l)
  fillers=()
  for i in $(seq "$have" 249); do
    create "$work/$name/provider.toml" "garm-$name-$i" &
    fillers+=($!)
    wait_below 4 "${fillers[@]}"
  done
  wait_below 1 "${fillers[@]}"
done
total=$(garm "$work/fleet.toml" ListInstances | grep -o '"provider_id"' | wc -l)
one=$(garm "$work/rack1/provider.toml" ListInstances | grep -o '"provider_id"' | wc -l)
echo "  listed: $total in the fleet, $one on rack1"

echo "== ListInstances: 1,000 over 4 agents against 250 on one agent, $runs each, interleaved"
list() { garm "$1" ListInstances > /dev/null; }
# The agent's own time per list (its /metrics): the part of a list that is not the provider's.
agent_list_seconds() {  # NAME: "sum count" of rack NAME's list route
  curl -s --cacert "$work/pki/ca.crt" --cert "$work/pki/clients/operator.crt" \
    --key "$work/pki/clients/operator.key" "https://localhost:${port_of[$1]}/metrics" |
    awk '/^garm_edge_request_duration_seconds_sum\{route="list"/ {s=$2} /^garm_edge_request_duration_seconds_count\{route="list"/ {c=$2} END {print s+0, c+0}'
}
for _ in $(seq "$runs"); do measure single_list list "$work/rack1/provider.toml"; done
read -r single_sum single_count <<< "$(agent_list_seconds rack1)"
samples[single_list]=""
for _ in $(seq "$runs"); do
  measure fleet_list list "$work/fleet.toml"
  measure single_list list "$work/rack1/provider.toml"
done
read -r both_sum _ <<< "$(agent_list_seconds rack1)"
fleet=$(median_ms fleet_list)
single=$(median_ms single_list)
echo "  4 agents, $total instances: $fleet ms"
echo "  1 agent, $one instances   : $single ms"
awk -v a="$fleet" -v b="$single" 'BEGIN {printf "  ratio                     : %.2f (bar: at most 1.5)\n", a / b}'
# In the interleaved phase rack1 served $runs fleet lists (beside its neighbours) and $runs lists
# alone, which take what they took in the first phase.
awk -v s="$single_sum" -v c="$single_count" -v S="$both_sum" -v n="$runs" 'BEGIN {
  alone = s / c; beside = (S - s - n * alone) / n
  printf "  the agent'"'"'s own time per list of 250 (its /metrics): %.1f ms alone, %.1f ms while 3 more agents list on the same 2 cores\n", alone * 1000, beside * 1000 }'

echo "== a burst of 40 creates, 8 at a time; rack3 is killed (-9) after the 10th has started"
burst() {  # NAME
  local started status
  started=$(now_us)
  status=0
  garm_bootstrap "$1" "$pool" | garm "$work/fleet.toml" CreateInstance > "$work/burst-$1.out" 2> "$work/burst-$1.err" || status=$?
  echo "$1 $status $(( ($(now_us) - started) / 1000 ))" >> "$work/burst.log"
}
: > "$work/burst.log"
burst_started=$(now_us)
bursts=()
for i in $(seq 40); do
  burst "garm-burst$i" &
  bursts+=($!)
  if [ "$i" = 10 ]; then kill -9 "${pids[2]}"; echo "  rack3 killed at $(( ($(now_us) - burst_started) / 1000 )) ms"; fi
  wait_below 8 "${bursts[@]}"
done
wait_below 1 "${bursts[@]}"
ok=$(awk '$2 == 0' "$work/burst.log" | wc -l)
echo "  $ok of 40 created in $(( ($(now_us) - burst_started) / 1000 )) ms"
awk '{print $3}' "$work/burst.log" | sort -n | awk '{a[NR]=$1} END {printf "  per create: median %d ms, slowest %d ms\n", a[int((NR+1)/2)], a[NR]}'
placed=$(cat "$work"/burst-*.out | grep -o '"provider_id":"[a-z0-9]*' | sed 's/.*"//' | sort | uniq -c | tr '\n' ' ')
echo "  placed: $placed"
mapfile -t failed < <(awk '$2 != 0 {print $1}' "$work/burst.log")
for name in ${failed[@]+"${failed[@]}"}; do
  echo "  $name failed: $(head -c 300 "$work/burst-$name.err" | tr '\n' ' ')"
done
retried=0
for name in ${failed[@]+"${failed[@]}"}; do
  create "$work/fleet.toml" "$name" && retried=$((retried + 1))
done
echo "  garm's retries of the ${#failed[@]} failed creates: $retried succeeded"
if garm "$work/fleet.toml" ListInstances > /dev/null 2> "$work/list.err"; then
  echo "  ListInstances with rack3 dead: answered (wrong: it must fail)"
else
  echo "  ListInstances with rack3 dead: fails, as it must: $(head -c 200 "$work/list.err" | tr '\n' ' ')"
fi
