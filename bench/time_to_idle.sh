#!/usr/bin/env bash
# Time from CreateInstance to a runner that reports `idle`, on a real libvirtd + QEMU (TCG where
# KVM is unusable), through garm-provider-edge run as garm runs it, in one run:
#   1. cold, no runner archive cache ([guests] runner_cache_mib = 0): the guest downloads the
#      archive from "GitHub" itself;
#   2. cold, with the cache: the agent downloads it once (from CreateInstance on) and the guest
#      fetches it over the bridge;
#   3. warm: a guest booted ahead of demand ([[warm]] count = 1) is bound by CreateInstance
#      (whose own time is printed too), and the resident memory its QEMU holds while it waits;
#   4. saved: SAVED (default 8) guests booted ahead of demand and saved to disk ([[warm]]
#      count = 0, saved = SAVED): the seconds each save took, the memory their QEMU processes
#      hold (none: they are gone), the disk their memory files take, then CreateInstance restores
#      one and its runner reports idle.
# "GitHub" is a plain-HTTP server on the host's bridge address serving a runner archive of
# ARCHIVE_MIB (default 40) MiB at RATE_MBIT (default 100) Mbit/s, the link a lab has to the
# internet; it counts downloads. The install script is garm's Linux flow in short: download and
# unpack the archive unless ~/actions-runner exists, run installdependencies.sh, report idle.
# With RUNNERS > 1 (second argument), phase 2 creates that many guests at once and reports how
# many archive downloads and bytes left the host for them.
# With REFERENCE_AGENT (another build's garm-edge-agent, e.g. of the commit before a change to
# what guests run), phase 2 runs first with that agent, then with this build's: today's path and
# the new one side by side, on the same image, flavor and host, in one run.
# Each phase prints garm's timeline, the guest's boot phases from its console, and the slowest
# cloud-init modules (`cloud-init analyze blame`, written to its console after its `idle`).
# Prints figures; asserts only that each step works. Needs root (exit 77 otherwise).
# Usage: [REFERENCE_AGENT=PATH] [PHASES="cold cache warm saved"] [SAVED=N] bench/time_to_idle.sh
#        BUILD_DIR [RUNNERS]
set -euo pipefail
build=$(cd "$1" && pwd)
runners=${2:-1}
archive_mib=${ARCHIVE_MIB:-40}
rate_mbit=${RATE_MBIT:-100}
# shellcheck source-path=SCRIPTDIR source=../tests/system/vm_fixture.sh
. "$(dirname "$0")/../tests/system/vm_fixture.sh"

# ---- "GitHub": the runner archive on the bridge address --------------------------------------
mkdir -p "$work/github/files" "$work/runner/bin"
printf '#!/bin/bash\n' > "$work/runner/config.sh"
printf '#!/bin/bash\nexit 0\n' > "$work/runner/bin/installdependencies.sh"
chmod +x "$work/runner/config.sh" "$work/runner/bin/installdependencies.sh"
head -c "$((archive_mib << 20))" /dev/urandom > "$work/runner/bin/Runner.Worker.dll"
archive_name=actions-runner-linux-x64-2.330.0.tar.gz
tar -czf "$work/github/files/$archive_name" -C "$work/runner" .
archive_sha=$(sha256sum "$work/github/files/$archive_name" | cut -d' ' -f1)
archive_bytes=$(stat -c %s "$work/github/files/$archive_name")
: > "$work/github/log"
/usr/bin/python3 "$here/../support/fake_garm.py" --plain --bind "$gateway" \
  --port-file "$work/github/port" --log "$work/github/log" --downloads "$work/github/files" \
  --download-rate "$((rate_mbit * 1000000 / 8))" {test_host_lock}>&- &
github_pid=$!
test_cleanup() { kill "$github_pid" "${console_pids[@]}" 2>/dev/null || true; }
for _ in $(seq 100); do [ -s "$work/github/port" ] && break; sleep 0.1; done
download_url="http://$gateway:$(cat "$work/github/port")/downloads/$archive_name"
echo "runner archive: $((archive_bytes >> 20)) MiB at $rate_mbit Mbit/s from $download_url"
downloads() { vm_helpers count-downloads "$work/github/log" "/downloads/$archive_name"; }

runner_script() {  # TOKEN: garm's install flow in short, with the tool's URL as garm renders it
  cat <<SH
#!/bin/bash
set -euo pipefail
CALLBACK_URL="@GARM_URL@/api/v1/callbacks"
DOWNLOAD_URL="$download_url"
post() {
  curl -fsS --retry 5 --retry-delay 2 --retry-connrefused -X POST -H 'Content-Type: application/json' \\
    -H "Authorization: Bearer $1" -d "\$2" "\$CALLBACK_URL\$1"
}
if [ ! -d "\$HOME/actions-runner" ]; then
  post /status "{\"status\": \"installing\", \"message\": \"downloading tools from \$DOWNLOAD_URL\"}"
  curl --retry 5 --retry-delay 5 --retry-connrefused --fail -sS -L -o "\$HOME/runner.tar.gz" "\$DOWNLOAD_URL"
  mkdir -p "\$HOME/actions-runner"
  tar -xzf "\$HOME/runner.tar.gz" -C "\$HOME/actions-runner"
  rm -f "\$HOME/runner.tar.gz"
  (cd "\$HOME/actions-runner" && sudo ./bin/installdependencies.sh)
else
  post /status '{"status": "installing", "message": "using cached runner"}'
fi
post /status '{"status": "idle", "message": "runner successfully installed"}'
# After idle (its access is closed then): cloud-init's and systemd's own timings, to the
# console, from a unit of their own (cloud-final's leftovers are killed when it ends), once the
# boot is finished (the runner may be idle before cloud-final is done).
sudo systemd-run --quiet --no-block /bin/sh -c \
  '{ timeout 120 systemctl is-system-running --wait > /dev/null 2>&1
     cloud-init analyze blame 2>&1 | grep -E "^ +[0-9]" | head -12 | sed "s/^/blame /"
     systemd-analyze critical-chain cloud-init-local.service 2>&1 | grep -E "[0-9]s" | sed "s/^/chain /"
     systemd-analyze blame 2>&1 | head -12 | sed "s/^/units /"
     grep -m1 "model name" /proc/cpuinfo | sed "s/^/guest /"
     grep -H . /sys/devices/system/clocksource/clocksource0/current_clocksource | sed "s/^/guest /"
   } | sed "s/^/garm-edge-blame /" > /dev/ttyS0' || true
SH
}

# ---- one runner: CreateInstance, then wait for idle ------------------------------------------
new_token() { echo "jwt-$1-$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')"; }
create_runner() {  # NAME TOKEN: prints CreateInstance's own seconds; sets created_at
  local name=$1 token=$2 started
  garm_instance "$token" "$(vm_helpers garm-instance-data "$(runner_script "$token")")"
  bootstrap_json "$name" "$token" "$(garm_wrapper "$token")" |
    vm_helpers add-tool "$download_url" "$archive_name" "$archive_sha" > "$work/$name.json"
  started=$(stamp)
  stdin_file=$work/$name.json garm CreateInstance GARM_POOL_ID="$pool_id"
  [ "$last_status" = 0 ] || fail "CreateInstance of $name: $out"
  [ "$(printf '%s' "$out" | json_field status)" = running ] || fail "$name is not running: $out"
  created_at=$started
  seconds_since "$started"
}
idle_seconds() {  # TOKEN SINCE: waits for the runner's idle, prints seconds since SINCE
  local token=$1 since=$2 at
  is_idle() { garm_requests "$token" | grep -q 'callbacks/status {"status": "idle"'; }
  wait_for "idle of $token" 900 is_idle
  at=$(garm_requests "$token" | awk '/callbacks\/status {"status": "idle"/ {print $1; exit}')
  awk -v a="$since" -v b="$at" 'BEGIN { printf "%.1f", b - a }'
}
console_pids=()
capture_console() {  # DOMAIN (name or UUID) LABEL: its console, each line stamped, for timelines
  local tty
  tty=$(virsh ttyconsole "$1") || return 0
  # python3 itself in the background (not the vm_helpers function's subshell), so the kill at
  # exit reaches it; the host lock stays with this script.
  /usr/bin/python3 "$here/vm_helpers.py" stamp-lines < "$tty" > "$work/console-$2.log" 2>/dev/null \
    {test_host_lock}>&- &
  console_pids+=($!)
}
timeline() {  # TOKEN SINCE [LABEL]: what garm heard from the runner, in seconds since SINCE;
  # with LABEL, the boot phases from that console and cloud-init's slowest modules
  garm_requests "$1" |
    awk -v since="$2" '{ $1 = sprintf("    +%5.1f s", $1 - since); print }' | cut -c1-140
  [ -n "${3:-}" ] || return 0
  echo "   boot phases (console):"
  vm_helpers boot-phases "$work/console-$3.log" "$2"
  echo "   slowest cloud-init modules (blame), units before cloud-init (chain), slowest units:"
  blamed() { grep -qaE '^[0-9.]+ garm-edge-blame units ' "$work/console-$1.log"; }
  for _ in $(seq 60); do blamed "$3" && break; sleep 2; done
  grep -aE '^[0-9.]+ garm-edge-blame ' "$work/console-$3.log" | tr -d '\r' | sed 's/^[0-9.]* garm-edge-blame */      /' || true
}
qemu_rss_mib() {  # DOMAIN NAME: its QEMU's resident memory, 0 when it has none
  local pid
  pid=$(pgrep -f "guest=$1," | head -1) || true
  [ -n "$pid" ] || { echo 0; return; }
  awk '/^VmRSS:/ {print int($2 / 1024)}' "/proc/$pid/status"
}
flavor_memory_mib() { awk '/^\[\[flavors\]\]/ {f=1} f && /^memory_mib/ {print $3; exit}' "$work/agent.toml"; }
set_guests_key() {  # KEY VALUE in [guests]
  sed -i "/^\[guests\]/a $1 = $2" "$work/agent.toml"
}

fixture_warm_guests=1  # phase 3's warm guests are removed at exit too
if [ "$runners" -gt 8 ]; then  # 1-vCPU guests beyond the default 4 per core
  printf '[capacity]\ncpu_overcommit = %s\n' "$runners" >> "$work/agent.toml"
fi

phases=${PHASES:-cold cache warm saved}
runs() { case " $phases " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }
cold='' cached='' reference='' warm='' saved=''

# 1. cold, no cache
if runs cold; then
  set_guests_key runner_cache_mib 0
  restart_agent "$work/agent-cold.log"
  token=$(new_token cold)
  create_runner garm-cold0001 "$token" > "$work/create-cold"
  capture_console "$(domain_of garm-cold0001)" cold
  cold=$(idle_seconds "$token" "$created_at")
  echo "  cold timeline:"; timeline "$token" "$created_at" cold
  cold_downloads=$(downloads)
  garm DeleteInstance GARM_INSTANCE_ID=garm-cold0001
  echo "cold, no cache: CreateInstance $(cat "$work/create-cold") s, idle after $cold s ($cold_downloads download)"
  sed -i '/^runner_cache_mib = 0$/d' "$work/agent.toml"
fi

# 2. cold, with the cache (RUNNERS at once): LABEL, its result's variable
cold_with_cache() {
  local label=$1 result i
  # Each run starts with an empty cache: the first one's download must not favour the next.
  if [ -n "${agent_pid:-}" ]; then
    kill "$agent_pid" 2>/dev/null || true
    wait "$agent_pid" 2>/dev/null || true
  fi
  rm -rf "$work/state/runner-archives"
  start_agent "$work/agent-$label.log"
  before=$(downloads)
  tokens=()
  for i in $(seq "$runners"); do
    tokens+=("$(new_token "$label$i")")
    create_runner "garm-$label$(printf '%04d' "$i")" "${tokens[-1]}" > "$work/create-$label-$i"
    starts[i]=$created_at
    capture_console "$(domain_of "garm-$label$(printf '%04d' "$i")")" "$label$i"
  done
  result=$(idle_seconds "${tokens[0]}" "${starts[1]}")
  echo "  cold with cache ($label) timeline (first runner):"; timeline "${tokens[0]}" "${starts[1]}" "${label}1"
  for i in $(seq 2 "$runners"); do idle_seconds "${tokens[i - 1]}" "${starts[i]}" > /dev/null; done
  cache_downloads=$(($(downloads) - before))
  for i in $(seq "$runners"); do garm DeleteInstance GARM_INSTANCE_ID="garm-$label$(printf '%04d' "$i")"; done
  echo "cold, with cache ($label): CreateInstance $(cat "$work/create-$label-1") s, idle after $result s;" \
    "$runners runners, $cache_downloads download(s) from outside the host ($((cache_downloads * archive_bytes)) bytes)"
  printf -v "$2" '%s' "$result"
}
if runs cache && [ -n "${REFERENCE_AGENT:-}" ]; then
  this_agent=$agent
  agent=$REFERENCE_AGENT
  cold_with_cache reference reference
  agent=$this_agent
fi
if runs cache; then cold_with_cache cache cached; fi

# 3. warm
if runs warm; then
  cat >> "$work/agent.toml" <<TOML
[[warm]]
image = "debian-12"
flavor = "small"
count = 1
TOML
  restart_agent "$work/agent-warm.log"
  warm_ready() { control_root warm | grep -q '"state": *"ready"'; }
  warm_started=$(stamp)
  warm_uuid() { control_root warm | json_field 0.provider_id 2>/dev/null; }
  warm_console() { virsh ttyconsole "$(warm_uuid)" > /dev/null 2>&1; }
  wait_for "a warm guest's console" 120 warm_console
  capture_console "$(warm_uuid)" warm
  wait_for "a warm guest to be ready" 900 warm_ready
  echo "  a warm guest was ready $(seconds_since "$warm_started") s after the agent started"
  warm_rss=$(qemu_rss_mib "$(virsh domname "$(warm_uuid)")")
  echo "  the waiting warm guest's QEMU holds $warm_rss MiB resident"
  token=$(new_token warm)
  create_runner garm-warm0001 "$token" > "$work/create-warm"  # not in $(): it sets created_at
  warm=$(idle_seconds "$token" "$created_at")
  echo "  warm timeline:"; timeline "$token" "$created_at"
  garm DeleteInstance GARM_INSTANCE_ID=garm-warm0001
  echo "warm: CreateInstance $(cat "$work/create-warm") s, idle after $warm s"
fi

# 4. saved
if runs saved; then
  saved_wanted=${SAVED:-8}
  sed -i '/^\[\[warm\]\]$/,$d' "$work/agent.toml"  # phase 3's entry, the file's last table
  cat >> "$work/agent.toml" <<TOML
[[warm]]
image = "debian-12"
flavor = "small"
count = 0
saved = $saved_wanted
TOML
  restart_agent "$work/agent-saved.log"
  saved_uuids() { control_root warm | python3 -c '
import json, sys
print(" ".join(g["provider_id"] for g in json.load(sys.stdin) if g["state"] == "saved"))'; }
  all_saved() { [ "$(saved_uuids | wc -w)" -ge "$saved_wanted" ]; }
  saved_started=$(stamp)
  wait_for "$saved_wanted warm guests to be saved" $((600 * saved_wanted)) all_saved
  echo "  $saved_wanted guests booted, ready and saved $(seconds_since "$saved_started") s after the agent started"
  echo "  each save (agent log): $(grep -o 'saved to disk in [0-9]* ms' "$work/agent-saved.log" |
    awk '{printf "%s%.1f s", sep, $5 / 1000; sep=", "}')"
  saved_rss=0 saved_disk=0
  for uuid in $(saved_uuids); do
    name=$(virsh domname "$uuid")
    saved_rss=$((saved_rss + $(qemu_rss_mib "$name")))
    saved_disk=$((saved_disk + $(du -m "$pool_dir/$name.memory" | cut -f1)))
  done
  echo "  $saved_wanted saved guests: QEMU resident $saved_rss MiB in all; memory files $saved_disk MiB on disk ($((saved_disk / saved_wanted)) MiB each, of $(flavor_memory_mib) MiB guests)"
  token=$(new_token saved)
  create_runner garm-saved0001 "$token" > "$work/create-saved"
  saved=$(idle_seconds "$token" "$created_at")
  echo "  saved timeline:"; timeline "$token" "$created_at"
  echo "  restore (agent log): $(grep -o 'restored in [0-9]* ms' "$work/agent-saved.log" | tail -1)"
  garm DeleteInstance GARM_INSTANCE_ID=garm-saved0001
  echo "saved: CreateInstance $(cat "$work/create-saved") s, idle after $saved s"
fi

if [ "$runners" -gt 1 ]; then
  echo "(cold with cache ran $runners guests at once on this host's CPUs: its ratio to one cold guest says nothing about the cache)"
fi
echo "CreateInstance -> idle (TCG, 1 vCPU):"
[ -z "$cold" ] || printf '  cold, no cache                   %6.1f s\n' "$cold"
[ -z "$reference" ] || printf '  cold with cache, reference agent %6.1f s\n' "$reference"
[ -z "$cached" ] || printf '  cold with cache, this build      %6.1f s (bar: 60 s)\n' "$cached"
[ -z "$reference" ] || [ -z "$cached" ] ||
  awk -v r="$reference" -v c="$cached" 'BEGIN { printf "  this build / reference           %6.2fx\n", c / r }'
[ -z "$cold" ] || [ -z "$cached" ] ||
  awk -v a="$cold" -v c="$cached" 'BEGIN { printf "  cache cold ratio (with / without) %5.2fx (bar: 0.8)\n", c / a }'
[ -z "$warm" ] || printf '  warm                             %6.1f s\n' "$warm"
[ -z "$warm" ] || [ -z "$cold" ] ||
  awk -v w="$warm" -v a="$cold" 'BEGIN { printf "  warm / cold                      %6.2fx (bar: 0.3)\n", w / a }'
[ -z "$saved" ] || printf '  saved (restored on create)       %6.1f s\n' "$saved"
[ -z "$saved" ] || [ -z "$warm" ] ||
  awk -v s="$saved" -v w="$warm" 'BEGIN { printf "  saved / warm                     %6.2fx (bar: 2)\n", s / w }'
[ -z "$saved" ] || [ -z "$cold" ] ||
  awk -v s="$saved" -v a="$cold" 'BEGIN { printf "  saved / cold                     %6.2fx (bar: 0.15)\n", s / a }'
[ -z "$saved" ] || echo "  memory held while waiting: running warm guest $warm_rss MiB; $saved_wanted saved guests $saved_rss MiB in all (bar: 64)"
