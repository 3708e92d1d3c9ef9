#!/usr/bin/env bash
# Image pull figures, side by side in one run, from one loopback HTTP server (python3):
#  - `garm-edge-agent images pull` of a qcow2 image of SIZE_MIB MiB of random bytes: download,
#    SHA-256 while it streams, qemu-img convert to the base, rename into place;
#  - by hand: `curl -o` of the same file, then `qemu-img convert -O qcow2` (the issue's
#    reference: no verification, and the base is not flushed to disk);
#  - by hand as the agent does it: `curl -o`, `sha256sum -c`, `qemu-img convert -t writeback`
#    (verified before use, on disk when done);
#  - the pulling process's own largest RSS (VmRSS, sampled every 20 ms; qemu-img and xz are
#    processes of their own) less the largest RSS of the same program doing no pull (`images
#    list`, no children): the growth a pull costs (streamed to disk, nothing held in memory).
# Rounds alternate (agent, by hand); the median of each is printed with its ratio.
# Usage: bench/images.sh BUILD_DIR [SIZE_MIB] [ROUNDS]
set -euo pipefail
build=$(cd "$1" && pwd)
size_mib=${2:-400}
rounds=${3:-3}
agent=$build/agent/garm-edge-agent
for tool in curl qemu-img python3 /usr/bin/time; do
  command -v "$tool" >/dev/null || { echo "bench/images.sh needs $tool"; exit 77; }
done
work=$(mktemp -d)
server_pid=
trap '[ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null; rm -rf "$work"' EXIT
mkdir -p "$work/srv" "$work/state" "$work/bases" "$work/hand"
head -c "$((size_mib << 20))" /dev/urandom > "$work/raw"
qemu-img convert -f raw -O qcow2 "$work/raw" "$work/srv/image.qcow2"
rm "$work/raw"
sha=$(sha256sum "$work/srv/image.qcow2" | cut -c1-64)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
(cd "$work/srv" && exec python3 -m http.server "$port" --bind 127.0.0.1 >/dev/null 2>&1) &
server_pid=$!
for _ in $(seq 100); do curl -fsI "http://127.0.0.1:$port/image.qcow2" >/dev/null 2>&1 && break; sleep 0.05; done
cat > "$work/agent.toml" <<EOF
[agent]
id = "bench-images"
state_dir = "$work/state"
[libvirt]
uri = "test:///default"
[pull]
directory = "$work/bases"
[[images]]
name = "bench"
source = "http://127.0.0.1:$port/image.qcow2"
sha256 = "$sha"
[[flavors]]
name = "small"
EOF

seconds() { date +%s.%N; }
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
agent_times=() hand_times=() verified_times=() peaks=()
for round in $(seq "$rounds"); do
  rm -rf "${work:?}/state" "${work:?}/bases"/* && mkdir -p "$work/state"
  start=$(seconds)
  "$agent" images pull bench --config "$work/agent.toml" > /dev/null 2> "$work/pull.log" &
  pid=$!
  low=0 high=0
  while rss=$(awk '/^VmRSS/ {print $2}' "/proc/$pid/status" 2>/dev/null) && [ -n "$rss" ]; do
    if [ "$low" = 0 ] || [ "$rss" -lt "$low" ]; then low=$rss; fi
    if [ "$rss" -gt "$high" ]; then high=$rss; fi
    sleep 0.02
  done
  wait "$pid" || { cat "$work/pull.log"; exit 1; }
  agent_times+=("$(echo "$(seconds) - $start" | bc)")
  peaks+=("$high")
  rm -f "$work/hand/"*
  start=$(seconds)
  curl -fsS -o "$work/hand/image.qcow2" "http://127.0.0.1:$port/image.qcow2"
  qemu-img convert -f qcow2 -O qcow2 "$work/hand/image.qcow2" "$work/hand/base.qcow2"
  hand_times+=("$(echo "$(seconds) - $start" | bc)")
  rm -f "$work/hand/"*
  start=$(seconds)
  curl -fsS -o "$work/hand/image.qcow2" "http://127.0.0.1:$port/image.qcow2"
  echo "$sha  $work/hand/image.qcow2" | sha256sum -c --quiet
  qemu-img convert -t writeback -f qcow2 -O qcow2 "$work/hand/image.qcow2" "$work/hand/base.qcow2"
  verified_times+=("$(echo "$(seconds) - $start" | bc)")
  echo "round $round: agent ${agent_times[-1]} s, curl + qemu-img ${hand_times[-1]} s," \
    "curl + sha256sum + qemu-img -t writeback ${verified_times[-1]} s, RSS ${low} -> ${high} KiB"
done
agent_median=$(printf '%s\n' "${agent_times[@]}" | median)
hand_median=$(printf '%s\n' "${hand_times[@]}" | median)
verified_median=$(printf '%s\n' "${verified_times[@]}" | median)
/usr/bin/time -f %M -o "$work/idle" "$agent" images list --config "$work/agent.toml" > /dev/null
idle=$(cat "$work/idle")
growth=$(( $(printf '%s\n' "${peaks[@]}" | sort -n | tail -1) - idle ))
echo "image pull of ${size_mib} MiB from loopback HTTP, median of $rounds:"
printf '  garm-edge-agent images pull   %6.2f s\n' "$agent_median"
printf '  curl + qemu-img convert       %6.2f s\n' "$hand_median"
printf '  ratio                         %6.2fx (bar: 1.1x)\n' "$(echo "$agent_median / $hand_median" | bc -l)"
printf '  curl + sha256sum + qemu-img   %6.2f s (verified and flushed, as the agent does)\n' "$verified_median"
printf '  ratio to that                 %6.2fx\n' "$(echo "$agent_median / $verified_median" | bc -l)"
printf '  RSS: %d KiB listing, largest pulling %d KiB: growth %.1f MiB (bar: 8 MiB)\n' "$idle" \
  "$((idle + growth))" "$(echo "$growth / 1024" | bc -l)"
