#!/usr/bin/env bash
# Job cache figures on a real libvirtd with QEMU (TCG unless GARM_EDGE_VM_KVM=1), side by side
# in one run on one host (tests/system/vm_fixture.sh):
#  - a job-like script that needs a container image (IMAGE_MIB MiB of layers, unpacked as a
#    pull unpacks them) and a toolcache (TOOLS_MIB MiB, a tar.gz unpacked): its time from start
#    to "ready to build" in a guest of a pool with both caches (the content on its cache disks)
#    beside a guest of a pool without (it downloads and unpacks both from the upstream, an HTTP
#    server on the host) (bar: <= 0.2x);
#  - what the upstream served: for the refreshes that made both caches, and for one job
#    without them: per host per day that is one refresh, however many jobs run;
#  - CreateInstance as garm runs it, with two cache disks beside none: ROUNDS creates of each,
#    alternating, each deleted at once, medians (bar: <= 1.1x).
# Usage: bench/caches.sh BUILD_DIR [IMAGE_MIB] [TOOLS_MIB] [ROUNDS]   (as root; exit 77 if not)
set -euo pipefail
build=$(cd "$1" && pwd)
image_mib=${2:-300}
tools_mib=${3:-200}
rounds=${4:-5}
deadline_seconds=${GARM_EDGE_VM_DEADLINE:-1800}
fixture_warm_guests=1  # the fixture's cleanup also removes the builders it finds recorded
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source-path=SCRIPTDIR source=../tests/system/vm_fixture.sh
. "$here/../tests/system/vm_fixture.sh"

median() { sort -n | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }

# ---- the upstream: an HTTP server on the guests' gateway, the job's two downloads ------------
upstream_dir=$work/upstream
mkdir -p "$upstream_dir/stage/image" "$upstream_dir/stage/tools"
for i in 1 2 3; do  # three "layers"
  head -c "$((image_mib * 1024 * 1024 / 3))" /dev/urandom > "$upstream_dir/stage/image/layer$i.bin"
done
head -c "$((tools_mib * 1024 * 1024))" /dev/urandom > "$upstream_dir/stage/tools/go.bin"
tar -C "$upstream_dir/stage" -cf "$upstream_dir/image.tar" image
tar -C "$upstream_dir/stage" -czf "$upstream_dir/tools.tar.gz" tools
rm -rf "$upstream_dir/stage"
upstream_port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("", 0)); print(s.getsockname()[1])')
python3 -m http.server --bind "$gateway" --directory "$upstream_dir" "$upstream_port" \
  2> "$work/upstream.log" {test_host_lock}>&- &
upstream_pid=$!
test_cleanup() { kill "$upstream_pid" 2>/dev/null || true; }
upstream=http://$gateway:$upstream_port
# Bytes the upstream served: each GET of a file costs the file.
served_bytes() {
  local total=0 file count
  for file in image.tar tools.tar.gz; do
    count=$(grep -c "\"GET /$file HTTP/1.[01]\" 200" "$work/upstream.log" || true)
    total=$((total + count * $(stat -c %s "$upstream_dir/$file")))
  done
  echo "$total"
}

# ---- two caches for one pool -----------------------------------------------------------------
cat > "$work/refresh-images.sh" <<SH
#!/bin/bash
set -euo pipefail
rm -rf "\$GARM_EDGE_CACHE_PATH/image"
curl -fsS "$upstream/image.tar" | tar -x -C "\$GARM_EDGE_CACHE_PATH"
SH
cat > "$work/refresh-tools.sh" <<SH
#!/bin/bash
set -euo pipefail
rm -rf "\$GARM_EDGE_CACHE_PATH/tools"
curl -fsS "$upstream/tools.tar.gz" | tar -xz -C "\$GARM_EDGE_CACHE_PATH"
SH
cached_pool=$pool_id
plain_pool=$(cat /proc/sys/kernel/random/uuid)
size_gib=$(((image_mib + tools_mib) / 1024 + 2))
for cache in images:/var/lib/bench-images tools:/opt/hostedtoolcache; do
  cat >> "$work/agent.toml" <<TOML
[[caches]]
name = "${cache%%:*}"
size_gib = $size_gib
mount = "${cache#*:}"
controller = "$controller"
pools = ["$cached_pool"]
refresh_script = "$work/refresh-${cache%%:*}.sh"
refresh_every_hours = 24
refresh_timeout_minutes = 60
TOML
done
sed -i "s#^\\[agent\\]\$#[agent]\\ncaches_dir = \"$caches_dir\"#" "$work/agent.toml"
sed -i 's/^memory_mib = 1024$/memory_mib = 2048/; s/^disk_gib = 4$/disk_gib = 8/' "$work/agent.toml"
start_agent "$work/agent.log"
cache_list() { "$agent" caches list --config "$work/agent.toml"; }
both_ready() {
  local listed
  listed=$(cache_list)
  case "$listed" in *"refresh failed"*) fail "a refresh failed: $listed" ;; esac
  [ "$(printf '%s\n' "$listed" | grep -c ': generation 1,')" = 2 ]
}
refresh_started=$(stamp)
wait_for "both caches' first refresh" "$deadline_seconds" both_ready
refresh_seconds=$(seconds_since "$refresh_started")
refresh_bytes=$(served_bytes)
echo "both caches refreshed in ${refresh_seconds}s (builders in parallel): $(cache_list | tr '\n' ' ')"
du -sh "$caches_dir"/*/gen-1.qcow2

# ---- the job, with and without the caches ----------------------------------------------------
job=$(cat <<SH
started=\$(date +%s.%N)
if [ -e /var/lib/bench-images/image/layer3.bin ] && [ -e /opt/hostedtoolcache/tools/go.bin ]; then
  how=cached
  ls -l /var/lib/bench-images/image /opt/hostedtoolcache/tools > /dev/null
else
  how=fetched
  mkdir -p /tmp/job
  curl -fsS "$upstream/image.tar" | tar -x -C /tmp/job
  curl -fsS "$upstream/tools.tar.gz" | tar -xz -C /tmp/job
fi
took=\$(awk -v a="\$started" -v b="\$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
post /status "{\"status\": \"installing\", \"message\": \"job ready to build: \$how in \$took s\"}"
SH
)
reported_idle() { garm_requests "$1" | grep -q 'callbacks/status {"status": "idle"'; }
job_report() { garm_requests "$1" | grep -o 'job ready to build: [a-z]* in [0-9.]* s' | head -1; }
token_cached=jwt-cached-$(head -c 8 /dev/urandom | od -An -tx1 | tr -d ' \n')
token_plain=jwt-plain-$(head -c 8 /dev/urandom | od -An -tx1 | tr -d ' \n')
before_jobs=$(served_bytes)
create_guest bench-cached01 "$token_cached" "$(vm_helpers garm-instance-data "$(install_script "$token_cached" 201 "$job")")"
pool_id=$plain_pool create_guest bench-plain01 "$token_plain" "$(vm_helpers garm-instance-data "$(install_script "$token_plain" 202 "$job")")"
both_idle() { reported_idle "$token_cached" && reported_idle "$token_plain"; }
wait_for "both jobs" "$deadline_seconds" both_idle
cached_report=$(job_report "$token_cached")
plain_report=$(job_report "$token_plain")
job_bytes=$(($(served_bytes) - before_jobs))
case "$cached_report" in *cached*) ;; *) fail "the cached guest did not find its caches: $cached_report" ;; esac
case "$plain_report" in *fetched*) ;; *) fail "the plain guest did not fetch: $plain_report" ;; esac
cached_seconds=$(printf '%s' "$cached_report" | awk '{print $(NF-1)}')
plain_seconds=$(printf '%s' "$plain_report" | awk '{print $(NF-1)}')
garm DeleteInstance GARM_INSTANCE_ID=bench-cached01
garm DeleteInstance GARM_INSTANCE_ID=bench-plain01

# ---- CreateInstance with two cache disks and without ------------------------------------------
: > "$work/create-cached" && : > "$work/create-plain"
for round in $(seq "$rounds"); do
  for kind in cached plain; do
    name=bench-$kind-c$round
    token=jwt-$kind-$round
    garm_instance "$token" '{}'
    pool=$cached_pool
    [ "$kind" = plain ] && pool=$plain_pool
    pool_id=$pool bootstrap_json "$name" "$token" "$(garm_wrapper "$token")" > "$work/$name.json"
    started=$(stamp)
    pool_id=$pool stdin_file=$work/$name.json garm CreateInstance GARM_POOL_ID="$pool"
    expect "$last_status" 0 "CreateInstance of $name: $out"
    seconds_since "$started" >> "$work/create-$kind"
    echo >> "$work/create-$kind"
    disks=$(virsh domblklist "$(domain_of "$name")" | awk '$1 ~ /^vd/' | wc -l)
    expect "$disks" "$([ "$kind" = cached ] && echo 3 || echo 1)" "the $kind guest's disks"
    garm DeleteInstance GARM_INSTANCE_ID="$name"
  done
done
create_cached=$(grep . "$work/create-cached" | median)
create_plain=$(grep . "$work/create-plain" | median)

echo
echo "job cache figures ($virt_type, image ${image_mib} MiB + toolcache ${tools_mib} MiB):"
printf '  job start to ready to build:  cached %6.1f s   uncached %6.1f s   ratio %s (bar <= 0.2)\n' \
  "$cached_seconds" "$plain_seconds" "$(ratio "$cached_seconds" "$plain_seconds")"
printf '  upstream bytes:  both refreshes %d MiB, one uncached job %d MiB: a day of N jobs costs %d MiB with the caches (refresh_every_hours = 24), N x %d MiB without\n' \
  "$((refresh_bytes >> 20))" "$((job_bytes >> 20))" "$((refresh_bytes >> 20))" "$((job_bytes >> 20))"
printf '  CreateInstance (median of %d):  two cache disks %s s   none %s s   ratio %s (bar <= 1.1)\n' \
  "$rounds" "$create_cached" "$create_plain" "$(ratio "$create_cached" "$create_plain")"
printf '  first refresh of both caches (two builders at once): %s s\n' "$refresh_seconds"
