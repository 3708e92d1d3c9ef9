#!/usr/bin/env bash
# Fault tier on a real libvirtd + QEMU (guests need not boot: an empty 64 MiB image):
#  kills     kill -9 of the agent at random moments during bursts of concurrent creates and
#            deletes, and of provider processes mid-create (as garm's runner_bootstrap_timeout
#            does); after each, a restart and garm's follow-up calls (DeleteInstance by name,
#            then a new CreateInstance). Every round: what garm wants exists exactly once, and no
#            domain, overlay, reservation, nwfilter binding or record is left of anything else.
#  libvirtd  libvirtd stopped for 10 s while garm lists: every answer is the full list or a
#            clear error (never [] or a partial list); the agent reconnects by itself.
#  disk      the state directory on a full tmpfs: creates fail clearly and leave nothing, reads
#            are served, and creates work again once there is room, without a restart.
#  record    a record file corrupted on disk: the agent names it, leaves its instance alone and
#            serves everything else.
# Prints the table of kill points hit and the libvirtd gap. Exit 77 (skipped) when not root.
# Usage: run_faults.sh BUILD_DIR [KILLS]
set -euo pipefail
build=$(cd "$1" && pwd)
kills=${2:-100}
tiny=faults
tiny_subnet=155
tiny_guest_extra='addresses = "192.168.155.2-192.168.155.90"
address_quarantine_seconds = 0'
tiny_state_dir=/run/garm-edge-faults-state
test_cleanup() {
  umount "$tiny_state_dir" 2>/dev/null || true
  rmdir "$tiny_state_dir" 2>/dev/null || true
}
# shellcheck source-path=SCRIPTDIR source=tiny_host.sh
. "$(dirname "$0")/tiny_host.sh"
trap 'echo "FAILED: line $LINENO: \"$BASH_COMMAND\" exited $?"' ERR

fail() {
  echo "FAILED: $*"
  echo "---- agent log (last 40 lines)"
  tail -n 40 "$work/agent.log" | grep -v 'event=' || true
  echo "FAILED: $*"  # again, last: CI shows only the end of a failed test's output
  exit 1
}
mkdir -p "$tiny_state_dir" "$work/runs"
mount -t tmpfs -o size=8m,mode=0700 garm-edge-faults "$tiny_state_dir"

wanted=()  # the instances garm believes exist, by name
next_name=0
new_name() {  # sets $fresh to a name garm has not used
  next_name=$((next_name + 1))
  printf -v fresh 'garm-fault%04d' "$next_name"
}
one_line() { tr '\n' ' '; }
wanted_sorted() { printf '%s\n' ${wanted[@]+"${wanted[@]}"} | sed '/^$/d' | sort; }
forget_wanted() {
  local keep=() name
  for name in ${wanted[@]+"${wanted[@]}"}; do [ "$name" = "$1" ] || keep+=("$name"); done
  wanted=(${keep[@]+"${keep[@]}"})
}

create_now() {  # NAME: garm's CreateInstance, which must succeed
  stdin_file=$work/runs/$1.json
  bootstrap "$1" > "$stdin_file"
  garm CreateInstance GARM_POOL_ID="$pool_id"
  stdin_file=
  [ "$last_status" = 0 ] || fail "CreateInstance $1 exited $last_status: $err"
  wanted+=("$1")
}
delete_now() {  # NAME: garm's DeleteInstance by name, which must succeed
  garm DeleteInstance GARM_INSTANCE_ID="$1" GARM_POOL_ID="$pool_id"
  [ "$last_status" = 0 ] || fail "DeleteInstance $1 exited $last_status: $err"
  forget_wanted "$1"
}

# In a background follow-up: true when garm's last call succeeded, else false with a line
# for the round's check in $work/runs/*.failed.
followup_done() {
  [ "$last_status" = 0 ] && return 0
  printf '%s exited %s: %s\n' "$1" "$last_status" "$err" > "$work/runs/$BASHPID.failed"
  return 1
}

# What garm wants exists exactly once, and nothing else is left.
check_converged() {
  local context=$1 expected listed
  expected=$(wanted_sorted)
  garm ListInstances GARM_POOL_ID="$pool_id"
  [ "$last_status" = 0 ] || fail "$context: ListInstances exited $last_status: $err"
  listed=$(printf '%s' "$out" | /usr/bin/python3 -c 'import json,sys; print("\n".join(sorted(i["name"] for i in json.load(sys.stdin))))' | sed '/^$/d')
  [ "$listed" = "$expected" ] || fail "$context: ListInstances shows [$(one_line <<< "$listed")], garm wants [$(one_line <<< "$expected")]"
  [ "$(host_domains)" = "$expected" ] || fail "$context: domains [$(host_domains | one_line)], wanted [$(one_line <<< "$expected")]"
  [ "$(host_overlays)" = "$expected" ] || fail "$context: overlays [$(host_overlays | one_line)], wanted [$(one_line <<< "$expected")]"
  local count=${#wanted[@]}
  [ "$(host_reservations)" = "$count" ] || fail "$context: $(host_reservations) DHCP reservations for $count instances"
  [ "$(host_bindings | wc -l)" = "$count" ] || fail "$context: $(host_bindings | wc -l) nwfilter bindings for $count instances"
  [ -z "$(host_stray_bindings)" ] || fail "$context: nwfilter bindings of no domain: $(host_stray_bindings | one_line)"
  [ "$(find "$state_dir/instances" -name '*.json' | wc -l)" = "$count" ] ||
    fail "$context: $(find "$state_dir/instances" -name '*.json' | wc -l) records for $count instances"
}

# Where a kill left each interrupted operation, read off the host in one pass before the
# restart: OPERATION:NAME pairs in, one line per pair out ("create: record=... domain=...").
declare -A kill_points
note_kill_points() {
  virsh list --all | awk 'NF >= 3 {state = $3; for (i = 4; i <= NF; i++) state = state $i; print $2, state}' > "$work/domains.now"
  /usr/bin/python3 - "$state_dir/instances" "$pool_dir" "garm-edge-$controller-" "$work/domains.now" "$@" <<'PY' > "$work/points.now"
import json, os, sys
records, pool, prefix, domains_file = sys.argv[1:5]
states = dict(line.split(None, 1) for line in open(domains_file) if line.strip())
for pair in sys.argv[5:]:
    operation, name = pair.split(":", 1)
    domain = prefix + name
    try:
        intent = json.load(open(os.path.join(records, domain + ".json"))).get("intent", "?")
    except FileNotFoundError:
        intent = "none"
    except ValueError:
        intent = "torn"
    overlay = "yes" if os.path.exists(os.path.join(pool, domain + ".qcow2")) else "no"
    print("%s: record=%s domain=%s overlay=%s" % (operation, intent, states.get(domain, "no").strip(), overlay))
PY
  local key
  while read -r key; do
    kill_points[$key]=$(( ${kill_points[$key]:-0} + 1 ))
  done < "$work/points.now"
}

descendants() {
  local child
  for child in $(pgrep -P "$1"); do
    echo "$child"
    descendants "$child"
  done
}
kill_provider_under() {  # PID: kill -9 the provider process started below it
  local pid
  for pid in $(descendants "$1"); do
    [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = garm-provider-e ] && kill -9 "$pid" 2>/dev/null
  done
  return 0
}

# ---- kills -----------------------------------------------------------------------------------
start_agent
for _ in 1 2 3; do
  new_name
  create_now "$fresh"
done
check_converged "before the kills"
kills_started=$(date +%s)
provider_kills=0
for round in $(seq "$kills"); do
  creating=()
  deleting=()
  pids=()
  declare -A pid_of=()
  for _ in 1 2 3; do
    new_name
    name=$fresh
    creating+=("$name")
    bootstrap "$name" > "$work/runs/$name.json"
    ( stdin_file=$work/runs/$name.json garm CreateInstance GARM_POOL_ID="$pool_id"; echo "$last_status" > "$work/runs/$name.create" ) &
    pid_of[$name]=$!
    pids+=($!)
  done
  # Up to two of garm's instances are deleted in the same burst.
  for victim in $(printf '%s\n' "${wanted[@]}" | shuf -n 2 --random-source=<(yes "$round")); do
    deleting+=("$victim")
    rm -f "$work/runs/$victim.delete"
    ( garm DeleteInstance GARM_INSTANCE_ID="$victim" GARM_POOL_ID="$pool_id"; echo "$last_status" > "$work/runs/$victim.delete" ) &
    pids+=($!)
  done
  sleep "0.$(printf '%03d' $((RANDOM % 1000)))"
  if [ $((round % 2)) = 0 ]; then
    # garm's timeout: the provider process of one create is killed; the agent lives on.
    victim=${creating[$((RANDOM % 3))]}
    kill_provider_under "${pid_of[$victim]}"
    provider_kills=$((provider_kills + 1))
    sleep "0.$(printf '%03d' $((RANDOM % 500)))"
  fi
  kill -9 "$agent_pid"
  wait "$agent_pid" 2>/dev/null || true
  agent_pid=
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  pairs=()
  for name in "${creating[@]}"; do pairs+=("create:$name"); done
  for name in ${deleting[@]+"${deleting[@]}"}; do pairs+=("delete:$name"); done
  note_kill_points "${pairs[@]}"

  start_agent
  # garm's follow-ups, all at once as garm's pool manager sends them: a create it got no answer
  # for is deleted by name, then replaced by a new instance; a delete it got no answer for is
  # sent again.
  followups=()
  for name in "${creating[@]}"; do
    if [ "$(cat "$work/runs/$name.create" 2>/dev/null)" = 0 ]; then
      wanted+=("$name")
      continue
    fi
    new_name
    bootstrap "$fresh" > "$work/runs/$fresh.json"
    (
      garm DeleteInstance GARM_INSTANCE_ID="$name" GARM_POOL_ID="$pool_id"
      followup_done "DeleteInstance $name after the kill" || exit 0
      stdin_file=$work/runs/$fresh.json garm CreateInstance GARM_POOL_ID="$pool_id"
      followup_done "CreateInstance $fresh"
    ) &
    followups+=($!)
    wanted+=("$fresh")
  done
  for name in ${deleting[@]+"${deleting[@]}"}; do
    forget_wanted "$name"
    [ "$(cat "$work/runs/$name.delete" 2>/dev/null)" = 0 ] && continue
    (
      garm DeleteInstance GARM_INSTANCE_ID="$name" GARM_POOL_ID="$pool_id"
      followup_done "DeleteInstance $name again"
    ) &
    followups+=($!)
  done
  for pid in ${followups[@]+"${followups[@]}"}; do wait "$pid" || true; done
  if failed=$(cat "$work"/runs/*.failed 2>/dev/null) && [ -n "$failed" ]; then
    fail "round $round: $failed"
  fi
  while [ "${#wanted[@]}" -gt 6 ]; do delete_now "${wanted[0]}"; done
  check_converged "round $round"
  rm -f "$work"/runs/*
done
echo "== kill points hit ($kills agent kills, $provider_kills provider kills mid-create, $(($(date +%s) - kills_started)) s)"
printf '%s\n' "${!kill_points[@]}" | sort | while read -r key; do
  printf '%5d  %s\n' "${kill_points[$key]}" "$key"
done
echo "after every round: 0 leaked domains, overlays, reservations, filter bindings or records; 0 duplicates; garm's ${#wanted[@]} instances each exactly once"

# ---- libvirtd stopped for 10 s while garm lists ----------------------------------------------
libvirtd_pid=$(pidof libvirtd | awk '{print $1}')
[ -n "$libvirtd_pid" ] || fail "no libvirtd to stop"
expected=$(wanted_sorted | tr '\n' ' ')
: > "$work/lists.log"
rm -f "$work/lister.stop"
(
  while [ ! -e "$work/lister.stop" ]; do
    call_started=$(date +%s.%N)
    garm ListInstances GARM_POOL_ID="$pool_id"
    names=$(printf '%s' "$out" | /usr/bin/python3 -c 'import json,sys
try: print(" ".join(sorted(i["name"] for i in json.load(sys.stdin))))
except Exception: print("<not JSON>")' 2>/dev/null)
    printf '%s|%s|%s|%s|%s\n' "$call_started" "$(date +%s.%N)" "$last_status" "$names" "$(printf '%s' "$err" | head -1)" >> "$work/lists.log"
    sleep 0.2
  done
) {test_host_lock}>&- &
lister=$!
sleep 3
stopped_at=$(date +%s.%N)
kill "$libvirtd_pid"
for _ in $(seq 100); do [ -S /run/libvirt/libvirt-sock ] || break; sleep 0.1; done
sleep 10
restarted_at=$(date +%s.%N)
# libvirtd is back once it answers, which takes it a while after its socket appears (it
# reconnects to its running QEMU domains first): the agent cannot be faster than that.
start_libvirtd
back_at=$(date +%s.%N)
echo "libvirtd answered $(awk -v a="$restarted_at" -v b="$back_at" 'BEGIN { printf "%.1f", b - a }') s after it was started again"
# Stopped at the end only if this test's lib.sh had started the one it replaced.
for i in "${!started[@]}"; do
  [ "${started[$i]}" = "$libvirtd_pid" ] && started[i]=$(cat /run/garm-edge-systest-libvirtd.pid)
done
sleep 3
touch "$work/lister.stop"
wait "$lister"
reconnected=$(grep -c 'reconnected to libvirt' "$work/agent.log" || true)
lost=$(grep -c 'lost the connection to libvirt' "$work/agent.log" || true)
/usr/bin/python3 - "$work/lists.log" "$expected" "$stopped_at" "$back_at" <<'PY' || fail "a ListInstances in the libvirtd gap answered wrongly"
import sys
path, expected, stopped, back = sys.argv[1], sys.argv[2].split(), float(sys.argv[3]), float(sys.argv[4])
ok = failed = wrong = 0
first_after = None
errors = set()
for line in open(path):
    start, end, status, names, err = line.rstrip("\n").split("|", 4)
    start, end = float(start), float(end)
    if status == "0":
        if sorted(names.split()) != sorted(expected):
            wrong += 1
            print("WRONG ANSWER: exit 0 with [%s]" % names)
        ok += 1
    else:
        failed += 1
        errors.add(err[:150])
    if start >= back and first_after is None:
        first_after = (end - start, status)
print("libvirtd stopped for %.1f s: %d ListInstances answered in full, %d failed with a clear error, %d wrong" % (back - stopped, ok, failed, wrong))
for e in sorted(errors):
    print("  error seen: " + e)
if first_after:
    print("first ListInstances started after libvirtd answered again: exit %s in %.0f ms" % (first_after[1], first_after[0] * 1000))
slow_return = first_after and first_after[0] > 1.0
sys.exit(1 if wrong or failed == 0 or not first_after or first_after[1] != "0" or slow_return else 0)
PY
[ "$lost" -ge 1 ] || fail "the agent logged no loss of its libvirt connection"
[ "$reconnected" -ge 1 ] || fail "the agent did not reconnect to libvirt by itself"
grep -E 'lost the connection|reconnected to libvirt' "$work/agent.log" | tail -2
kill -0 "$agent_pid" || fail "the agent is gone"
check_converged "after libvirtd's restart"

# ---- the state directory on a full file system -----------------------------------------------
dd if=/dev/zero of="$tiny_state_dir/filler" bs=64k 2>/dev/null || true
before=$(wanted_sorted)
new_name
name=$fresh
bootstrap "$name" > "$work/runs/$name.json"
stdin_file=$work/runs/$name.json garm CreateInstance GARM_POOL_ID="$pool_id"
stdin_file=
[ "$last_status" != 0 ] || fail "a create with a full state directory succeeded"
echo "create with a full state directory: exit $last_status: $err"
case "$err" in *"No space left"*) ;; *) fail "the create's error does not say the disk is full" ;; esac
check_converged "after the refused create"
[ "$(wanted_sorted)" = "$before" ] || fail "garm's set changed"
garm GetInstance GARM_INSTANCE_ID="${wanted[0]}"
[ "$last_status" = 0 ] || fail "GetInstance with a full state directory exited $last_status: $err"
rm -f "$tiny_state_dir/filler"
create_now "$name"
check_converged "after space came back"
echo "full state directory: the create failed clearly and left nothing; reads were served; creates work again without a restart"

# ---- a corrupted record ----------------------------------------------------------------------
torn=${wanted[0]}
torn_record="$state_dir/instances/garm-edge-$controller-$torn.json"
head -c 100 "$torn_record" > "$work/torn" && cat "$work/torn" > "$torn_record"
stop_agent
start_agent
grep -q "garm-edge-$controller-$torn.json.*left alone" "$work/agent.log" ||
  fail "the agent did not name the unreadable record and what it leaves alone"
grep "garm-edge-$controller-$torn.json" "$work/agent.log" | tail -1
[ "$(virsh domstate "garm-edge-$controller-$torn" | tr -d ' ')" = running ] ||
  fail "the instance of the unreadable record was touched"
garm DeleteInstance GARM_INSTANCE_ID="$torn" GARM_POOL_ID="$pool_id"
[ "$last_status" != 0 ] || fail "a delete acted on an unreadable record"
echo "delete of $torn refused: $err"
new_name
other=$fresh
create_now "$other"
garm GetInstance GARM_INSTANCE_ID="$other"
[ "$last_status" = 0 ] || fail "GetInstance of $other beside an unreadable record exited $last_status"
rm -f "$torn_record"  # the operator's repair: the record is gone, so is the instance
forget_wanted "$torn"
stop_agent
start_agent
for name in ${wanted[@]+"${wanted[@]}"}; do delete_now "$name"; done
check_converged "at the end"
echo "fault tier: $kills kills survived, libvirtd's restart, a full disk and a torn record, nothing leaked"
