#!/usr/bin/env bash
# Churn tier: one-job runner VMs created and destroyed back to back on a real libvirtd + QEMU,
# two at a time, on three reserved addresses, so every address is reused several times and some
# reuses come right after the released-address quarantine ends. Each guest is a Debian 12
# cloud-init guest created by garm-provider-edge run exactly as garm runs it; it must get exactly
# its reserved address (DHCP lease, the source of its seed request and GetInstance agree), fetch
# its seed and report `idle` through the relay to a fake garm, and is then deleted. Afterwards
# nothing may be left (domain, overlay, reservation, nwfilter binding, record, blocking lease),
# and the agent's RSS and open descriptors after the last cycle must be within 10 % of the
# first. Prints a line per cycle and the address reuse table. Exit 77 (skipped) when not root.
# Usage: run_churn.sh BUILD_DIR [CYCLES]   (GARM_EDGE_CHURN_QUARANTINE: seconds, default 30)
# Soak mode (bench/soak.sh): GARM_EDGE_SOAK_SECONDS=N runs cycles until N seconds have passed,
# counts a failed guest (printed with its console, then deleted) instead of stopping, and prints
# the RSS and descriptor trend every 10 cycles.
set -euo pipefail
build=$(cd "$1" && pwd)
cycles=${2:-12}
soak_seconds=${GARM_EDGE_SOAK_SECONDS:-0}
if [ "$soak_seconds" -gt 0 ]; then cycles=1000000000; fi
in_flight_max=2
quarantine=${GARM_EDGE_CHURN_QUARANTINE:-30}
guest_deadline=${GARM_EDGE_VM_DEADLINE:-900}
subnet=192.168.${GARM_EDGE_VM_SUBNET:-152}
# shellcheck disable=SC2034  # read by vm_fixture.sh
vm_guest_addresses="$subnet.2-$subnet.4"
# shellcheck disable=SC2034  # read by vm_fixture.sh
vm_address_quarantine=$quarantine
addresses=("$subnet.2" "$subnet.3" "$subnet.4")

console_pids=()
test_cleanup() {
  for pid in ${console_pids[@]+"${console_pids[@]}"}; do kill "$pid" 2>/dev/null || true; done
}
# shellcheck source-path=SCRIPTDIR source=vm_fixture.sh
. "$(dirname "$0")/vm_fixture.sh"
trap 'echo "FAILED: line $LINENO: \"$BASH_COMMAND\" exited $?"' ERR

# shellcheck disable=SC2317  # called through `fail`
show_console() {
  local log="$work/console-$1.log"
  [ -f "$log" ] && { echo "---- console of $1 (last 80 lines)"; tail -n 80 "$log" | tr -d '\033'; }
  return 0
}
agent_rss_kib() { awk '/^VmRSS:/ {print $2}' "/proc/$agent_pid/status"; }
agent_fds() { find "/proc/$agent_pid/fd" -mindepth 1 -maxdepth 1 | wc -l; }

declare -A token_of created_at address_of mac_of released_at reuses
in_flight=()
launched=0
finished=0
failed=0
trend=()

# A guest that did not do its part: the end of a churn run, one more failure in a soak.
guest_failed() {  # NAME REASON
  show_console "$1"
  if [ "$soak_seconds" -eq 0 ]; then fail "$2"; fi
  echo "FAILURE (soak goes on): $2"
  failed=$((failed + 1))
  garm DeleteInstance GARM_INSTANCE_ID="$1"
  [ -n "${address_of[$1]:-}" ] && released_at[${address_of[$1]}]=$(stamp)
  drop_in_flight "$1"
}
drop_in_flight() {
  local remaining=() other
  for other in "${in_flight[@]}"; do [ "$other" = "$1" ] || remaining+=("$other"); done
  in_flight=(${remaining[@]+"${remaining[@]}"})
}
soak_over() { [ "$soak_seconds" -gt 0 ] && [ "$(seconds_since "$churn_started" | cut -d. -f1)" -ge "$soak_seconds" ]; }

# The earliest moment one of the three addresses is neither held nor in quarantine.
next_free_at() {
  local best="" address name held free_at
  for address in "${addresses[@]}"; do
    held=""
    for name in ${in_flight[@]+"${in_flight[@]}"}; do
      [ "${address_of[$name]:-}" = "$address" ] && held=1
    done
    [ -n "$held" ] && continue
    free_at=0
    if [ -n "${released_at[$address]:-}" ]; then
      free_at=$(awk -v t="${released_at[$address]}" -v q="$quarantine" 'BEGIN { printf "%.3f", t + q + 1 }')
    fi
    if [ -z "$best" ] || awk -v a="$free_at" -v b="$best" 'BEGIN { exit !(a < b) }'; then best=$free_at; fi
  done
  echo "${best:-0}"
}
# A create whose answer has not come yet holds an address we do not know.
create_pending() {
  local name
  for name in ${in_flight[@]+"${in_flight[@]}"}; do
    [ -n "${address_of[$name]:-}" ] || return 0
  done
  return 1
}

launch() {
  launched=$((launched + 1))
  local name token
  name=$(printf 'garm-churn%04d' "$launched")
  token=jwt-churn-$launched-$(head -c 8 /dev/urandom | od -An -tx1 | tr -d ' \n')
  token_of[$name]=$token
  garm_instance "$token" "$(vm_helpers garm-instance-data "$(install_script "$token" "$((200 + launched))")")"
  bootstrap_json "$name" "$token" "$(garm_wrapper "$token")" > "$work/$name.json"
  created_at[$name]=$(stamp)
  (
    stdin_file=$work/$name.json garm CreateInstance GARM_POOL_ID="$pool_id"
    printf '%s' "$out" > "$work/$name.out"
    echo "$last_status" > "$work/$name.status"
  ) &
  in_flight+=("$name")
}

# Once CreateInstance answered: the reserved address, the domain's MAC, its console.
created() {
  local name=$1
  [ -f "$work/$name.status" ] || return 1
  [ -n "${address_of[$name]:-}" ] && return 0
  expect "$(cat "$work/$name.status")" 0 "CreateInstance of $name: $(cat "$work/$name.out")"
  address_of[$name]=$(json_field addresses.0.address < "$work/$name.out")
  local address=${address_of[$name]}
  mac_of[$name]=$(virsh dumpxml "$(domain_of "$name")" | sed -n "s/.*<mac address='\([^']*\)'.*/\1/p" | head -1)
  if [ -n "${released_at[$address]:-}" ]; then
    local gap
    gap=$(awk -v r="${released_at[$address]}" -v c="${created_at[$name]}" 'BEGIN { printf "%.0f", c - r }')
    reuses[$address]="${reuses[$address]:-} ${gap}s"
  fi
  local tty
  tty=$(virsh ttyconsole "$(domain_of "$name")")
  cat "$tty" > "$work/console-$name.log" 2>/dev/null &
  console_pids+=($!)
}

# The guest reported idle: check its address three ways, then delete it as garm does.
finish() {
  local name=$1 address=${address_of[$1]} mac=${mac_of[$1]}
  local idle_seconds lease seed_from
  idle_seconds=$(seconds_since "${created_at[$name]}")
  lease=$(virsh net-dhcp-leases "$network" --mac "$mac" | awk '/ipv4/ {print $5}' | tail -1)
  if [ "${lease%/*}" != "$address" ]; then
    guest_failed "$name" "$name was reserved $address but leased ${lease:-nothing} (MAC $mac)"
    return
  fi
  seed_from=$(control "events?instance=$name" | sed -n 's/.*the guest fetched its seed from \([0-9.]*\).*/\1/p' | head -1)
  if [ "$seed_from" != "$address" ]; then
    guest_failed "$name" "$name fetched its seed from '${seed_from}', reserved $address"
    return
  fi
  garm GetInstance GARM_INSTANCE_ID="$name"
  expect "$(printf '%s' "$out" | json_field addresses.0.address)" "$address" "GetInstance of $name shows its reserved address"
  garm DeleteInstance GARM_INSTANCE_ID="$name"
  expect "$last_status" 0 "DeleteInstance of $name"
  released_at[$address]=$(stamp)
  finished=$((finished + 1))
  echo "cycle $finished: $name at $address (MAC $mac): lease, seed source and GetInstance agree; idle after ${idle_seconds}s"
  drop_in_flight "$name"
  if [ "$finished" = 1 ]; then
    first_rss=$(agent_rss_kib)
    first_fds=$(agent_fds)
  fi
  if [ $((finished % 10)) = 0 ]; then
    trend+=("after $finished cycles ($(seconds_since "$churn_started")s): RSS $(agent_rss_kib) KiB, $(agent_fds) descriptors")
    if [ "$soak_seconds" -gt 0 ]; then echo "${trend[-1]}"; fi
  fi
}

reported_idle() { garm_requests "$1" | grep -q 'callbacks/status {"status": "idle"'; }

start_agent "$work/agent.log"
echo "churn: $cycles cycles, $in_flight_max guests at a time, addresses ${addresses[*]}, quarantine ${quarantine}s"
churn_started=$(stamp)
while [ "$((finished + failed))" -lt "$cycles" ]; do
  if soak_over; then
    [ "${#in_flight[@]}" -gt 0 ] || break
  elif [ "$launched" -lt "$cycles" ] && [ "${#in_flight[@]}" -lt "$in_flight_max" ] && ! create_pending; then
    free_at=$(next_free_at)
    now=$(stamp)
    if awk -v f="$free_at" -v n="$now" 'BEGIN { exit !(f <= n) }'; then
      launch
      continue
    fi
  fi
  for name in ${in_flight[@]+"${in_flight[@]}"}; do
    created "$name" || continue
    if reported_idle "${token_of[$name]}"; then
      finish "$name"
    elif [ "$(seconds_since "${created_at[$name]}" | cut -d. -f1)" -ge "$guest_deadline" ]; then
      guest_failed "$name" "$name did not report idle within ${guest_deadline}s"
    fi
  done
  sleep 1
done
last_rss=$(agent_rss_kib)
last_fds=$(agent_fds)
churn_seconds=$(seconds_since "$churn_started")

echo "== address reuse (time from release to the next create at that address; quarantine ${quarantine}s)"
reused=0
for address in "${addresses[@]}"; do
  count=$(wc -w <<< "${reuses[$address]:-}")
  reused=$((reused + count))
  echo "$address: reused $count times:${reuses[$address]:- never}"
done

echo "== leftovers"
left=()
virsh list --all --name | grep -q "garm-churn" && left+=(domains)
compgen -G "$pool_dir/*garm-churn*" >/dev/null && left+=(overlays)
virsh net-dumpxml "$network" | grep -q "<host " && left+=(reservations)
virsh nwfilter-binding-list 2>/dev/null | grep -q "vnet" && left+=(nwfilter-bindings)
grep -rqs '"garm-churn' "$work/state" && left+=(records)
# dnsmasq keeps a lease for the network's lease time after its guest is gone; what must not be
# left is a lease that blocks an address: one held by a MAC other than the address's own.
blocking=$(/usr/bin/python3 - "/var/lib/libvirt/dnsmasq/$bridge.status" "${addresses[@]}" <<'PY'
import json, sys
leases = json.load(open(sys.argv[1])) if open(sys.argv[1]).read().strip() else []
ours = set(sys.argv[2:])
def own_mac(ip):
    a, b, c, d = (int(x) for x in ip.split("."))
    return "52:47:45:%02x:%02x:%02x" % (b, c, d)
print(sum(1 for l in leases if l["ip-address"] in ours and l["mac-address"] != own_mac(l["ip-address"])))
PY
)
[ "$blocking" = 0 ] || left+=("$blocking blocking leases")
lingering=$(virsh net-dhcp-leases "$network" | grep -c ipv4 || true)
echo "domains, overlays, reservations, nwfilter bindings, records, blocking leases left: ${left[*]:-none}"
echo "leases dnsmasq still keeps until they expire (each on its address's own MAC): $lingering"
[ ${#left[@]} -eq 0 ] || fail "left behind: ${left[*]}"

if [ ${#trend[@]} -gt 0 ]; then
  echo "== agent footprint every 10 cycles"
  printf '%s\n' "${trend[@]}"
fi
echo "== agent footprint after the first and the last cycle"
echo "RSS: ${first_rss} KiB -> ${last_rss} KiB; open descriptors: ${first_fds} -> ${last_fds}"
within_10_percent() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(b <= a * 1.10) }'; }
within_10_percent "$first_rss" "$last_rss" || fail "RSS grew by more than 10 % over the churn"
within_10_percent "$first_fds" "$last_fds" || fail "open descriptors grew by more than 10 % over the churn"
if [ "$soak_seconds" -gt 0 ]; then
  echo "soak: $finished cycles and $failed failures in ${churn_seconds}s: $(awk -v c="$finished" -v s="$churn_seconds" 'BEGIN { printf "%.1f", c * 3600 / s }') cycles per hour, $reused address reuses"
  exit 0
fi
[ "$reused" -ge $((cycles - ${#addresses[@]})) ] || fail "only $reused address reuses in $cycles cycles"
echo "churn tier: $cycles cycles in ${churn_seconds}s, $reused address reuses, every guest on its reserved address, nothing left behind"
