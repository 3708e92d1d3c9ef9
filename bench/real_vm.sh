#!/usr/bin/env bash
# Real-VM figures on a real libvirtd + QEMU (TCG where KVM is unusable), through
# garm-provider-edge run as garm runs it and `garm-edge-agent serve`:
#  - CreateInstance wall time (the provider process, until it returns `running`) for a base
#    image of 1 GiB and one of 10 GiB virtual size (the same sparse data, grown with
#    `qemu-img resize`), interleaved, each deleted again. Equal times mean the overlay copies
#    nothing of the base.
#  - With --boot: one guest booted alone, from CreateInstance to its first seed request and to
#    its `idle` report through the relay.
# Prints figures; asserts nothing beyond the steps working. Needs root (exit 77 otherwise).
# With --time-to-idle as its second argument it runs bench/time_to_idle.sh instead (cold, cold
# with the runner archive cache, warm; a third argument is the number of runners).
# Usage: bench/real_vm.sh BUILD_DIR [ROUNDS] [--boot] | bench/real_vm.sh BUILD_DIR --time-to-idle [N]
set -euo pipefail
if [ "${2:-}" = --time-to-idle ]; then
  exec "$(dirname "$0")/time_to_idle.sh" "$1" "${3:-1}"
fi
build=$(cd "$1" && pwd)
rounds=${2:-7}
boot=${3:-}
vm_fixture_extra_config='
[[images]]
name = "debian-12-10g"
base_volume = "debian-12-10g.qcow2"
os_type = "linux"
arch = "amd64"
[[flavors]]
name = "large"
vcpus = 1
memory_mib = 1024
disk_gib = 20'
# shellcheck source-path=SCRIPTDIR source=../tests/system/vm_fixture.sh
. "$(dirname "$0")/../tests/system/vm_fixture.sh"

cp --sparse=always "$pool_dir/debian-12.qcow2" "$pool_dir/debian-12-10g.qcow2"
qemu-img resize -q "$pool_dir/debian-12-10g.qcow2" 10G
virsh pool-refresh "$storage_pool" >/dev/null
for image in debian-12 debian-12-10g; do
  printf '%s: %s virtual, %s allocated\n' "$image" \
    "$(qemu-img info --output=json "$pool_dir/$image.qcow2" | sed -n 's/.*"virtual-size": \([0-9]*\).*/\1/p' | awk '{printf "%.0f GiB", $1 / 2^30}')" \
    "$(du -h "$pool_dir/$image.qcow2" | cut -f1)"
done
start_agent "$work/agent.log"
garm_instance token-bench '{}'

median() { sort -n | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
create_ms() {  # IMAGE NAME: CreateInstance wall time in ms, then DeleteInstance
  local image=$1 name=$2 started
  bootstrap_json "$name" token-bench "$(garm_wrapper token-bench)" |
    sed -e "s/\"image\": \"debian-12\"/\"image\": \"$image\"/" \
      -e 's/"flavor": "small"/"flavor": "large"/' > "$work/bench.json"
  started=$(date +%s%N)
  stdin_file=$work/bench.json garm CreateInstance GARM_POOL_ID="$pool_id"
  echo $((($(date +%s%N) - started) / 1000000)) >> "$work/create-$image.ms"
  [ "$last_status" = 0 ] || { echo "CreateInstance on $image failed: $out"; exit 1; }
  garm DeleteInstance GARM_INSTANCE_ID="$name"
}
for round in $(seq "$rounds"); do
  if [ $((round % 2)) = 1 ]; then order=(debian-12 debian-12-10g); else order=(debian-12-10g debian-12); fi
  for image in "${order[@]}"; do create_ms "$image" "garm-bench$(printf '%05d' "$round")"; done
done
small=$(median < "$work/create-debian-12.ms")
large=$(median < "$work/create-debian-12-10g.ms")
echo "CreateInstance median over $rounds runs: 1 GiB base ${small} ms, 10 GiB base ${large} ms" \
  "(all: $(paste -sd' ' "$work/create-debian-12.ms") / $(paste -sd' ' "$work/create-debian-12-10g.ms"))"
awk -v a="$small" -v b="$large" 'BEGIN { printf "10 GiB vs 1 GiB: %+.1f %%\n", (b - a) * 100 / a }'

if [ "$boot" = --boot ]; then
  token=jwt-boot-$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')
  script=$(cat <<SH
#!/bin/bash
curl -fsS --retry 5 --retry-delay 2 -X POST -H "Authorization: Bearer $token" \\
  -d '{"status": "idle", "message": "runner successfully installed"}' "@GARM_URL@/api/v1/callbacks/status"
SH
)
  garm_instance "$token" "$(/usr/bin/python3 -c 'import json,sys; print(json.dumps({"install_script": sys.argv[1]}))' "$script")"
  bootstrap_json garm-boot00001 "$token" "$(garm_wrapper "$token")" > "$work/boot.json"
  started=$(stamp)
  stdin_file=$work/boot.json garm CreateInstance GARM_POOL_ID="$pool_id"
  [ "$last_status" = 0 ] || { echo "CreateInstance failed: $out"; exit 1; }
  created=$(seconds_since "$started")
  for _ in $(seq 900); do
    /usr/bin/python3 - "$work/garm.log" "$token" <<'PY' && break
import base64, json, sys
sys.exit(0 if any(json.loads(l)["headers"].get("Authorization") == "Bearer " + sys.argv[2]
                  and b'"idle"' in base64.b64decode(json.loads(l)["body"]) for l in open(sys.argv[1])) else 1)
PY
    sleep 1
  done
  seed_at=$(control instances/garm-boot00001/guest | /usr/bin/python3 -c 'import json,sys,datetime; print(datetime.datetime.fromisoformat(json.load(sys.stdin)["seed_served_at"].replace("Z","+00:00")).timestamp())')
  idle_at=$(/usr/bin/python3 - "$work/garm.log" "$token" <<'PY'
import base64, json, sys
for l in open(sys.argv[1]):
    r = json.loads(l)
    if r["headers"].get("Authorization") == "Bearer " + sys.argv[2] and b'"idle"' in base64.b64decode(r["body"]):
        print(r["time"]); break
PY
)
  awk -v s="$started" -v c="$created" -v seed="$seed_at" -v idle="$idle_at" 'BEGIN {
    printf "one guest alone (TCG, 1 vCPU, 1 GiB): created in %.1f s; first seed request %.1f s and idle %.1f s after CreateInstance was called\n",
      c, seed - s, idle - s }'
  garm DeleteInstance GARM_INSTANCE_ID=garm-boot00001
fi
