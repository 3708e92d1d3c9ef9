#!/usr/bin/env bash
# Image pull and runner archive figures, side by side in one run, from one loopback HTTPS
# server (nginx, a certificate of a CA made for the run), as cloud images are served:
#  - `garm-edge-agent images pull` of a qcow2 image of SIZE_MIB MiB of random bytes: download,
#    SHA-256 while it streams, qemu-img convert to the base, rename into place;
#  - by hand as the agent does it: `curl -o`, `sha256sum -c`, `qemu-img convert -t writeback`
#    (verified before use, on disk when done): the bar (<= 1.1x);
#  - by hand without verification: `curl -o`, then `qemu-img convert -O qcow2` (not flushed);
#  - the download alone: the agent's rate (its log line "downloaded and hashed … MiB/s")
#    beside `curl -o`'s (`%{speed_download}`) of the same file (bar: >= 0.8x);
#  - a runner archive of ARCHIVE_MIB MiB through the agent's archive cache
#    (garm-edge-download-bench: download, SHA-256, into the cache) beside `curl -o`;
#  - the pulling process's own largest RSS (VmRSS, sampled every 20 ms; qemu-img is a process
#    of its own) less the largest RSS of the same program doing no pull (`images list`): the
#    growth a pull costs (bar: 8 MiB).
# Rounds alternate (agent, by hand); medians are printed with their ratios.
# Usage: bench/images.sh BUILD_DIR [SIZE_MIB] [ROUNDS] [ARCHIVE_MIB]   (as root: installs nginx)
set -euo pipefail
build=$(cd "$1" && pwd)
size_mib=${2:-400}
rounds=${3:-3}
archive_mib=${4:-200}
agent=$build/agent/garm-edge-agent
archive_bench=$build/bench/garm-edge-download-bench
if ! command -v nginx > /dev/null; then
  [ "$(id -u)" = 0 ] || { echo "bench/images.sh needs nginx: apt-get install nginx-light"; exit 77; }
  DEBIAN_FRONTEND=noninteractive timeout 600 apt-get install -y -q nginx-light > /dev/null
fi
for tool in curl qemu-img openssl python3 /usr/bin/time bc "$archive_bench"; do
  command -v "$tool" >/dev/null || { echo "bench/images.sh needs $tool"; exit 77; }
done
work=$(mktemp -d)
trap '[ -f "$work/nginx.pid" ] && kill "$(cat "$work/nginx.pid")" 2>/dev/null; rm -rf "$work"' EXIT
mkdir -p "$work/srv" "$work/state" "$work/bases" "$work/hand" "$work/archives" "$work/nginx-tmp"
chmod 755 "$work" "$work/srv"  # nginx's worker runs as www-data

# The server's certificate, of a CA made here: the agent trusts it through [pull] ca_bundle.
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj /CN=bench-ca \
  -keyout "$work/ca.key" -out "$work/ca.crt" 2>/dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=localhost \
  -keyout "$work/server.key" -out "$work/server.csr" 2>/dev/null
printf 'subjectAltName = DNS:localhost, IP:127.0.0.1\n' > "$work/san.ext"
openssl x509 -req -in "$work/server.csr" -CA "$work/ca.crt" -CAkey "$work/ca.key" \
  -CAcreateserial -days 2 -extfile "$work/san.ext" -out "$work/server.crt" 2>/dev/null

head -c "$((size_mib << 20))" /dev/urandom > "$work/raw"
qemu-img convert -f raw -O qcow2 "$work/raw" "$work/srv/image.qcow2"
rm "$work/raw"
head -c "$((archive_mib << 20))" /dev/urandom > "$work/srv/runner.tar.gz"
sha=$(sha256sum "$work/srv/image.qcow2" | cut -c1-64)
archive_sha=$(sha256sum "$work/srv/runner.tar.gz" | cut -c1-64)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
cat > "$work/nginx.conf" <<NGINX_END
worker_processes 1;
pid $work/nginx.pid;
error_log $work/nginx.error.log;
events { worker_connections 64; }
http {
  access_log off;
  client_body_temp_path $work/nginx-tmp;
  proxy_temp_path $work/nginx-tmp;
  fastcgi_temp_path $work/nginx-tmp;
  uwsgi_temp_path $work/nginx-tmp;
  scgi_temp_path $work/nginx-tmp;
  sendfile on;
  server {
    listen 127.0.0.1:$port ssl;
    ssl_certificate $work/server.crt;
    ssl_certificate_key $work/server.key;
    root $work/srv;
  }
}
NGINX_END
nginx -c "$work/nginx.conf"
url=https://localhost:$port
for _ in $(seq 100); do curl -fsI --cacert "$work/ca.crt" "$url/image.qcow2" >/dev/null 2>&1 && break; sleep 0.05; done
cat > "$work/agent.toml" <<AGENT_END
[agent]
id = "bench-images"
state_dir = "$work/state"
[libvirt]
uri = "test:///default"
[pull]
directory = "$work/bases"
ca_bundle = "$work/ca.crt"
[[images]]
name = "bench"
source = "$url/image.qcow2"
sha256 = "$sha"
[[flavors]]
name = "small"
AGENT_END

seconds() { date +%s.%N; }
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
curl_rate() {  # MiB/s of one `curl -o`
  curl -fsS --cacert "$work/ca.crt" -o "$2" -w '%{speed_download}\n' "$url/$1" | awk '{print $1 / 1048576}'
}
agent_times=() hand_times=() verified_times=() agent_rates=() curl_rates=() peaks=()
archive_rates=() archive_curl_rates=() archive_synced_rates=()
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
  agent_rates+=("$(sed -n 's/.*downloaded and hashed .* s, \([0-9]*\) MiB\/s.*/\1/p' "$work/pull.log")")
  peaks+=("$high")
  rm -f "$work/hand/"*
  start=$(seconds)
  curl -fsS --cacert "$work/ca.crt" -o "$work/hand/image.qcow2" "$url/image.qcow2"
  echo "$sha  $work/hand/image.qcow2" | sha256sum -c --quiet
  qemu-img convert -t writeback -f qcow2 -O qcow2 "$work/hand/image.qcow2" "$work/hand/base.qcow2"
  verified_times+=("$(echo "$(seconds) - $start" | bc)")
  rm -f "$work/hand/"*
  start=$(seconds)
  curl_rates+=("$(curl_rate image.qcow2 "$work/hand/image.qcow2")")
  qemu-img convert -f qcow2 -O qcow2 "$work/hand/image.qcow2" "$work/hand/base.qcow2"
  hand_times+=("$(echo "$(seconds) - $start" | bc)")
  rm -rf "${work:?}/archives" "$work/hand/"*
  archive_rates+=("$("$archive_bench" "$url/runner.tar.gz" "$archive_sha" "$work/ca.crt" "$work/archives" | awk '{print $3}')")
  archive_curl_rates+=("$(curl_rate runner.tar.gz "$work/hand/runner.tar.gz")")
  rm -f "$work/hand/"*
  start=$(seconds)  # as the cache keeps it: on disk before it is served
  curl -fsS --cacert "$work/ca.crt" -o "$work/hand/runner.tar.gz" "$url/runner.tar.gz"
  sync "$work/hand/runner.tar.gz"
  archive_synced_rates+=("$(echo "$archive_mib / ($(seconds) - $start)" | bc -l)")
  echo "round $round: pull: agent ${agent_times[-1]} s," \
    "curl + sha256sum + qemu-img -t writeback ${verified_times[-1]} s, curl + qemu-img ${hand_times[-1]} s;" \
    "download: agent ${agent_rates[-1]} MiB/s, curl ${curl_rates[-1]} MiB/s;" \
    "archive: agent ${archive_rates[-1]} MiB/s, curl ${archive_curl_rates[-1]} MiB/s," \
    "curl + sync ${archive_synced_rates[-1]} MiB/s; RSS ${low} -> ${high} KiB"
done
m() { printf '%s\n' "$@" | median; }
agent_median=$(m "${agent_times[@]}")
hand_median=$(m "${hand_times[@]}")
verified_median=$(m "${verified_times[@]}")
agent_rate=$(m "${agent_rates[@]}")
curl_rate_median=$(m "${curl_rates[@]}")
archive_rate=$(m "${archive_rates[@]}")
archive_curl_rate=$(m "${archive_curl_rates[@]}")
archive_synced_rate=$(m "${archive_synced_rates[@]}")
/usr/bin/time -f %M -o "$work/idle" "$agent" images list --config "$work/agent.toml" > /dev/null
idle=$(cat "$work/idle")
growth=$(( $(printf '%s\n' "${peaks[@]}" | sort -n | tail -1) - idle ))
echo "image pull of ${size_mib} MiB from loopback HTTPS ($(nginx -v 2>&1 | sed 's/.*: //')), median of $rounds:"
printf '  garm-edge-agent images pull   %6.2f s\n' "$agent_median"
printf '  curl + sha256sum + qemu-img   %6.2f s (verified and flushed, as the agent does)\n' "$verified_median"
printf '  ratio                         %6.2fx (bar: 1.1x)\n' "$(echo "$agent_median / $verified_median" | bc -l)"
printf '  curl + qemu-img convert       %6.2f s (unverified, not flushed)\n' "$hand_median"
printf '  ratio to that                 %6.2fx\n' "$(echo "$agent_median / $hand_median" | bc -l)"
printf '  download: agent %6.0f MiB/s, curl -o %6.0f MiB/s: %.2fx (bar: 0.8x)\n' "$agent_rate" \
  "$curl_rate_median" "$(echo "$agent_rate / $curl_rate_median" | bc -l)"
printf '  RSS: %d KiB listing, largest pulling %d KiB: growth %.1f MiB (bar: 8 MiB)\n' "$idle" \
  "$((idle + growth))" "$(echo "$growth / 1024" | bc -l)"
printf 'runner archive of %d MiB through the archive cache:\n' "$archive_mib"
printf '  download: agent %6.0f MiB/s, curl -o %6.0f MiB/s: %.2fx (bar: 0.8x)\n' "$archive_rate" \
  "$archive_curl_rate" "$(echo "$archive_rate / $archive_curl_rate" | bc -l)"
printf '  curl -o + sync of the file (on disk, as the cache keeps it) %6.0f MiB/s: %.2fx\n' \
  "$archive_synced_rate" "$(echo "$archive_rate / $archive_synced_rate" | bc -l)"
