#!/usr/bin/env bash
# The agent side by side with nginx and curl, measured in one run with the same clients:
#  - GetInstance as one garm-provider-edge process (as garm runs it) against `curl --cert`;
#  - keep-alive requests/s over mTLS (`ab -k`, 1 and 50 connections; on GetInstance and on
#    /healthz, which needs no libvirt call) and full mTLS handshakes/s (`ab` without -k, 1, 2 and
#    8 at a time) against nginx 1.22 serving the agent's own answers as static files, with
#    `ssl_verify_client on`, one worker, and the same certificates: ECDSA P-256, TLS 1.2,
#    ECDHE-ECDSA-AES128-GCM-SHA256, ECDHE on P-256;
#  - ListInstances of 1,000 instances as a whole provider process, the first list right after
#    the burst of creates apart from the rest;
#  - the agent's RSS idle on qemu:///system (opt-in: GARM_EDGE_COMPARE_SYSTEM=1, with a
#    libvirtd answering there), and on the test driver idle, with 500 and with 1,000 instances;
#  - the floors under those bars: libvirt's own RSS, and mbedTLS's public-key work per handshake.
# The rows run interleaved: every round measures each row on both servers, and the medians of
# the rounds are printed with their ratio and the bar. Prints figures; asserts only that every
# request was answered. Usage: bench/compare.sh BUILD_DIR [ROUNDS] [SECONDS_PER_AB_RUN]
set -euo pipefail
export LC_ALL=C  # $EPOCHREALTIME and awk agree on the decimal point
build=$(cd "$1" && pwd)
rounds=${2:-5}
seconds=${3:-2}
here=$(cd "$(dirname "$0")" && pwd)
announce() { :; }

PATH=$PATH:/usr/sbin
if ! command -v nginx > /dev/null || ! command -v ab > /dev/null; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "needs nginx and ab: apt-get install nginx-light apache2-utils (as root)"
    exit 1
  fi
  DEBIAN_FRONTEND=noninteractive timeout 600 apt-get install -y -q nginx-light apache2-utils > /dev/null
fi
nginx_bin=$(command -v nginx)

# A test-driver host with room for 1,000 guests: 64 cores, 1 TiB, a /20 network.
host=$(mktemp -d /tmp/garm-edge-compare.XXXXXX)
cat > "$host/node.xml" <<XML
<node>
  <cpu><mhz>2000</mhz><model>x86_64</model><nodes>1</nodes><sockets>1</sockets><cores>64</cores><threads>1</threads></cpu>
  <memory>1073741824</memory>
  <network><name>default</name><bridge name='virbr0'/><forward/>
    <ip address='10.88.0.1' netmask='255.255.240.0'/></network>
  <pool type='dir'><name>default-pool</name><target><path>/default-pool</path></target></pool>
</node>
XML
uri=test://$host/node.xml
guest_addresses=10.88.1.0-10.88.15.250
# shellcheck source-path=SCRIPTDIR source=../scripts/lib/agent-fixture.sh
. "$here/../scripts/lib/agent-fixture.sh" > /dev/null
pki=$work/pki
nginx_pid=
system_agent_pid=
floor_pid=
stop_everything() {
  for pid in $(jobs -p) $nginx_pid $system_agent_pid $floor_pid; do
    if kill "$pid" 2>/dev/null; then wait "$pid" 2>/dev/null || true; fi
  done
  cleanup
  rm -rf "$host"
}
trap stop_everything EXIT

garm() {  # COMMAND [VAR=VALUE...] (stdin: the bootstrap for creates)
  env -i GARM_COMMAND="$1" GARM_CONTROLLER_ID=$controller GARM_PROVIDER_CONFIG_FILE="$work/provider.toml" \
    GARM_INTERFACE_VERSION=v0.1.0 GARM_POOL_ID=$pool "${@:2}" "$provider"
}
create() { garm_bootstrap "$1" "$pool" | garm CreateInstance > /dev/null; }
client_curl() {  # CURL_ARGUMENTS...: curl with garm's client certificate
  curl --cacert "$pki/ca.crt" --cert "$pki/clients/garm.crt" --key "$pki/clients/garm.key" "$@"
}
rss_mb() { awk '/^VmRSS/ {printf "%.1f", $2 / 1024}' "/proc/$1/status"; }
threads_of() { awk '/^Threads/ {print $2}' "/proc/$1/status"; }

# -- the answers both servers give: the agent's GetInstance of a real instance, and its health
# (no libvirt call: the transport alone) -------------------------------------------------------
create garm-bench
path=/v1/controllers/$controller/instances/garm-bench
mkdir -p "$work/www$(dirname "$path")"
for served in "$path" /healthz; do
  client_curl -sf "https://127.0.0.1:$port$served" > "$work/www$served"
done
chmod 711 "$work" && chmod -R a+rX "$work/www"  # nginx's worker runs as www-data under root
cat "$pki/clients/garm.crt" "$pki/clients/garm.key" > "$work/client.pem"

# -- nginx, configured as the agent is ----------------------------------------------------------
free_port() {
  local candidate
  while true; do
    candidate=$((20000 + RANDOM % 40000))
    ss -Hltn "sport = :$candidate" | grep -q . || { echo "$candidate"; return; }
  done
}
nginx_port=$(free_port)
mkdir -p "$work/nginx"
cat > "$work/nginx/nginx.conf" <<CONF
worker_processes 1;
daemon off;
pid $work/nginx/nginx.pid;
error_log $work/nginx/error.log;
events { worker_connections 1024; }
http {
  access_log off;
  default_type application/json;
  keepalive_requests 10000000;
  client_body_temp_path $work/nginx;
  server {
    listen 127.0.0.1:$nginx_port ssl;
    ssl_certificate $pki/agent.crt;
    ssl_certificate_key $pki/agent.key;
    ssl_client_certificate $pki/ca.crt;
    ssl_verify_client on;
    ssl_protocols TLSv1.2;
    ssl_ciphers ECDHE-ECDSA-AES128-GCM-SHA256;
    ssl_ecdh_curve prime256v1;
    root $work/www;
  }
}
CONF
"$nginx_bin" -c "$work/nginx/nginx.conf" -e "$work/nginx/error.log" &
nginx_pid=$!
for _ in $(seq 100); do ss -Hltn "sport = :$nginx_port" | grep -q . && break; sleep 0.05; done
agent_base="https://127.0.0.1:$port"
nginx_base="https://127.0.0.1:$nginx_port"
agent_url=$agent_base$path
nginx_url=$nginx_base$path
if ! cmp -s <(client_curl -s "$nginx_url") "$work/www$path"; then
  echo "FAILED: nginx does not serve the agent's answer"; cat "$work/nginx/error.log"; exit 1
fi
echo "agent on 127.0.0.1:$port (pid $agent_pid), nginx 1.22 on 127.0.0.1:$nginx_port (pid $nginx_pid, 1 worker)"
echo "the answer: $(wc -c < "$work/www$path") bytes of GetInstance JSON; $rounds rounds, ab runs of $seconds s"

# -- the rows -------------------------------------------------------------------------------
declare -A samples
add_sample() { samples[$1]+="$2 "; }
median() {
  tr ' ' '\n' <<< "${samples[$1]:-}" | grep -v '^$' | sort -g | awk '{a[NR]=$1} END {if (NR) print a[int((NR+1)/2)]; else print "nan"}'
}
ab_rate() {  # URL AB_OPTIONS...: requests per second, failing on any failed or non-2xx request
  local out
  out=$(ab -q -t "$seconds" -n 10000000 -E "$work/client.pem" -f TLS1.2 -Z ECDHE-ECDSA-AES128-GCM-SHA256 "${@:2}" "$1" 2>&1) || {
    echo "FAILED: ab ${*:2} $1: $out" >&2; return 1
  }
  if grep -q '^Non-2xx' <<< "$out" || ! grep -q '^Failed requests: *0$' <<< "$out"; then
    echo "FAILED: ab ${*:2} $1 had failed requests: $(grep -E '^(Failed|Non-2xx)' <<< "$out")" >&2
    return 1
  fi
  awk '/^Requests per second/ {print $4}' <<< "$out"
}
timed_ms() {  # COMMAND...: wall time in ms (its output discarded); fails when the command does
  local started=$EPOCHREALTIME
  "$@" > /dev/null || return 1
  awk -v a="$started" -v b="$EPOCHREALTIME" 'BEGIN {printf "%.2f", (b - a) * 1000}'
}
sample() {  # NAME COMMAND...: one timed sample of COMMAND, the run stopped when it fails
  local ms
  ms=$(timed_ms "${@:2}") || { echo "FAILED: ${*:2}" >&2; exit 1; }
  add_sample "$1" "$ms"
}
provider_get() {
  garm GetInstance GARM_INSTANCE_ID=garm-bench < /dev/null > /dev/null
}
curl_get() {
  client_curl -sf -o /dev/null "$agent_url"
}

provider_get  # the first call saves the TLS session every later process resumes, as under garm
declare -a ab_rows=("keepalive_c1|$path|-k -c1" "keepalive_c50|$path|-k -c50"
  "health_c1|/healthz|-k -c1" "health_c50|/healthz|-k -c50"
  "handshake_c1|$path|-c1" "handshake_c2|$path|-c2" "handshake_c8|$path|-c8")
for round in $(seq "$rounds"); do
  for _ in $(seq 9); do
    sample provider_get provider_get
    sample curl_get curl_get
  done
  for row in "${ab_rows[@]}"; do
    IFS='|' read -r name served options <<< "$row"
    for server in agent nginx; do
      base_var=${server}_base
      # shellcheck disable=SC2086  # the options are words
      rate=$(ab_rate "${!base_var}$served" $options) || exit 1
      add_sample "${server}_$name" "$rate"
    done
  done
  echo "round $round of $rounds done"
done
sleep 5  # idle: the last round's connections closed
idle_rss=$(rss_mb "$agent_pid")
idle_threads=$(threads_of "$agent_pid")

# -- 1,000 instances --------------------------------------------------------------------------
fill_to() {  # N: creates instances 4 at a time, as garm's pool manager does, until N exist
  local have i running=0
  have=$(garm ListInstances | grep -o '"provider_id"' | wc -l)
  for i in $(seq "$have" $(($1 - 1))); do
    create "garm-fill-$i" &
    running=$((running + 1))
    if [ "$running" -ge 4 ]; then wait -n; running=$((running - 1)); fi
  done
  wait_fillers
}
wait_fillers() {  # every filler, not the servers (they are this shell's jobs too)
  local job
  for job in $(jobs -p); do
    [ "$job" = "$agent_pid" ] || [ "$job" = "$nginx_pid" ] || wait "$job"
  done
}
fill_to 500
rss_500=$(rss_mb "$agent_pid")
fill_to 1000
sample first_list garm ListInstances
first_list=$(median first_list)
listed=$(garm ListInstances | grep -o '"provider_id"' | wc -l)
for _ in $(seq $((rounds * 4 + 1))); do sample list garm ListInstances; done  # odd: a true median
rss_1000=$(rss_mb "$agent_pid")

# -- idle on qemu:///system ----------------------------------------------------------------
# Opt-in: the second agent reconciles that host's domains and volumes like any agent would.
system_rss="not measured: set GARM_EDGE_COMPARE_SYSTEM=1 on a host whose libvirtd it may use"
if [ "${GARM_EDGE_COMPARE_SYSTEM:-0}" = 1 ] && timeout 10 virsh -c qemu:///system uri > /dev/null 2>&1; then
  sed -e "s|^uri = .*|uri = \"qemu:///system\"|" -e "s|^state_dir = .*|state_dir = \"$work/system-state\"|" \
    -e '/^\[guests\]/,/^anti_spoofing/d' "$work/agent.toml" > "$work/system-agent.toml"
  "$agent" serve --config "$work/system-agent.toml" --ready-file "$work/system.ready" 2> "$work/system-agent.log" &
  system_agent_pid=$!
  if wait_for_agent_ready "$system_agent_pid" "$work/system.ready" "$work/system-agent.log" 400 > /dev/null; then
    sleep 2  # its first reconcile and libvirt's event thread settle
    system_rss_mb=$(rss_mb "$system_agent_pid")
    system_rss="$system_rss_mb MB, $(threads_of "$system_agent_pid") threads"
  else
    system_rss="not measured: the agent did not start on qemu:///system (see below)"
    tail -n 5 "$work/system-agent.log"
  fi
fi

# -- the floors under the bars: libvirt's own pages, and one handshake's public-key work ------
# A process that only opens libvirt on the agent's URI (the same host XML) and lists its
# domains: the shared libraries libvirt brings (gnutls, glib, libxml2, libcrypto, ...) are mapped
# and touched by it alone. Given the agent's own domain XML (from a dry-run create) and N, it
# first defines and starts N copies: what the test driver's domains cost without the agent.
cat > "$work/libvirt_floor.c" <<'C'
#include <libvirt/libvirt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
static char* read_all(const char* path) {
  FILE* f = fopen(path, "r");
  static char text[1 << 20];
  size_t got = f ? fread(text, 1, sizeof text - 1, f) : 0;
  if (f) fclose(f);
  text[got] = 0;
  return got ? text : NULL;
}
int main(int argc, char** argv) {
  virConnectPtr conn = virConnectOpen(argv[1]);
  if (conn == NULL) return 1;
  char* xml = argc > 3 ? read_all(argv[2]) : NULL;
  int copies = xml ? atoi(argv[3]) : 0;
  char* name = xml ? strstr(xml, "<name>") : NULL;
  char* uuid = xml ? strstr(xml, "<uuid>") : NULL;
  if (uuid) memset(uuid, ' ', strstr(uuid, "</uuid>") + 7 - uuid);
  for (int i = 0; name && i < copies; i++) {
    static char copy[1 << 20];
    char* end = strstr(name, "</name>");
    snprintf(copy, sizeof copy, "%.*s<name>floor-%d%s", (int)(name - xml), xml, i, end);
    virDomainPtr domain = virDomainDefineXML(conn, copy);
    if (domain == NULL || virDomainCreate(domain) < 0) return 1;
    virDomainFree(domain);
  }
  virDomainPtr* domains = NULL;
  if (virConnectListAllDomains(conn, &domains, 0) < 0) return 1;
  puts("open");
  fflush(stdout);
  pause();
  return 0;
}
C
# The server's public-key operations in one full handshake (ECDHE-ECDSA, P-256, a client
# certificate): an ephemeral key, the shared secret, the ServerKeyExchange signature, and two
# verifications (the client certificate's signature by the CA, and CertificateVerify).
cat > "$work/handshake_crypto.c" <<'C'
#include <mbedtls/ctr_drbg.h>
#include <mbedtls/ecdh.h>
#include <mbedtls/ecdsa.h>
#include <mbedtls/entropy.h>
#include <stdio.h>
#include <time.h>
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec / 1e9; }
int main(void) {
  mbedtls_entropy_context entropy; mbedtls_ctr_drbg_context rng; mbedtls_ecp_group group;
  mbedtls_mpi d, peer_d, z, r, s; mbedtls_ecp_point q, peer_q;
  unsigned char hash[32] = {1};
  mbedtls_entropy_init(&entropy); mbedtls_ctr_drbg_init(&rng); mbedtls_ecp_group_init(&group);
  mbedtls_mpi_init(&d); mbedtls_mpi_init(&peer_d); mbedtls_mpi_init(&z); mbedtls_mpi_init(&r); mbedtls_mpi_init(&s);
  mbedtls_ecp_point_init(&q); mbedtls_ecp_point_init(&peer_q);
  mbedtls_ctr_drbg_seed(&rng, mbedtls_entropy_func, &entropy, NULL, 0);
  mbedtls_ecp_group_load(&group, MBEDTLS_ECP_DP_SECP256R1);
  mbedtls_ecdh_gen_public(&group, &peer_d, &peer_q, mbedtls_ctr_drbg_random, &rng);
  const int n = 200;
  double t[6]; t[0] = now();
  for (int i = 0; i < n; i++) mbedtls_ecdh_gen_public(&group, &d, &q, mbedtls_ctr_drbg_random, &rng);
  t[1] = now();
  for (int i = 0; i < n; i++) mbedtls_ecdh_compute_shared(&group, &z, &peer_q, &d, mbedtls_ctr_drbg_random, &rng);
  t[2] = now();
  for (int i = 0; i < n; i++) mbedtls_ecdsa_sign(&group, &r, &s, &d, hash, 32, mbedtls_ctr_drbg_random, &rng);
  t[3] = now();
  for (int i = 0; i < n; i++) if (mbedtls_ecdsa_verify(&group, hash, 32, &q, &r, &s) != 0) return 1;
  t[4] = now();
  printf("%.3f %.3f %.3f %.3f\n", (t[1] - t[0]) / n * 1e3, (t[2] - t[1]) / n * 1e3, (t[3] - t[2]) / n * 1e3, (t[4] - t[3]) / n * 1e3);
  return 0;
}
C
floor_rss() {  # [XML N]: the RSS of the floor program, once it is ready
  rm -f "$work/floor.out"
  "$work/libvirt_floor" "$uri" "$@" > "$work/floor.out" &
  floor_pid=$!
  for _ in $(seq 600); do [ -s "$work/floor.out" ] && break; sleep 0.05; done
  if [ -s "$work/floor.out" ]; then rss_mb "$floor_pid"; else echo -; fi
  kill "$floor_pid"
  wait "$floor_pid" 2>/dev/null || true
  floor_pid=
}
floor_idle=-
floor_system=-
floor_1000=-
crypto_floor=
if cc -O2 -o "$work/libvirt_floor" "$work/libvirt_floor.c" -lvirt; then
  floor_idle=$(floor_rss)
  if [ -n "${system_rss_mb:-}" ]; then floor_system=$(uri=qemu:///system floor_rss); fi
  garm_bootstrap garm-floor "$pool" |
    client_curl -sf --data-binary @- "$agent_base/v1/controllers/$controller/instances?dry_run=true" |
    python3 -c 'import json, sys; print(json.load(sys.stdin)["domain_xml"])' > "$work/domain.xml" &&
    floor_1000=$(floor_rss "$work/domain.xml" "$listed")
fi
if cc -O2 -o "$work/handshake_crypto" "$work/handshake_crypto.c" -lmbedcrypto &&
  read -r keygen shared sign verify < <("$work/handshake_crypto"); then
  crypto_floor=$(awk -v k="$keygen" -v x="$shared" -v s="$sign" -v v="$verify" 'BEGIN {printf "%.2f", k + x + s + 2 * v}')
  openssl_ms=$(openssl speed -seconds 1 ecdhp256 ecdsap256 2>/dev/null | awk '
    /ecdsa \(nistp256\)/ {sign = 1000 / $(NF - 1); verify = 1000 / $NF}
    /ecdh \(nistp256\)/ {derive = 1000 / $NF}
    END {printf "%.3f", sign + derive + sign + 2 * verify}' || echo -)  # a key costs about a signature
fi

# -- the table ------------------------------------------------------------------------------
row() {  # LABEL AGENT REFERENCE RATIO BAR
  printf '| %-52s | %12s | %12s | %6s | %-26s |\n' "$@"
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.2f", (b > 0 ? a / b : 0)}'; }
rate_row() {  # LABEL NAME BAR
  local a n
  a=$(median "agent_$2")
  n=$(median "nginx_$2")
  row "$1" "$(printf '%.0f' "$a")" "$(printf '%.0f' "$n")" "$(ratio "$a" "$n")" "$3"
}
echo
row "figure (medians of $rounds rounds)" "agent" "nginx / curl" "ratio" "bar"
row "GetInstance: provider process vs curl --cert (ms)" "$(median provider_get)" "$(median curl_get)" \
  "$(ratio "$(median provider_get)" "$(median curl_get)")" "<= 0.5"
rate_row "keep-alive req/s, 1 connection (ab -k -c1)" keepalive_c1 ">= 1.0"
rate_row "keep-alive req/s, 50 connections (ab -k -c50)" keepalive_c50 ">= 1.0"
rate_row "  /healthz (no libvirt call), ab -k -c1" health_c1 "-"
rate_row "  /healthz (no libvirt call), ab -k -c50" health_c50 "-"
rate_row "full mTLS handshakes/s, ab -c1" handshake_c1 ">= 0.5"
rate_row "full mTLS handshakes/s, ab -c2" handshake_c2 ">= 0.5"
rate_row "full mTLS handshakes/s, ab -c8" handshake_c8 ">= 0.5"
row "ListInstances of $listed, provider process (ms)" "$(median list)" "-" "-" "<= 50 ms"
row "  the first list right after the burst (ms)" "$first_list" "-" "-" "as fast as the rest"
row "agent RSS idle, qemu:///system (MB)" "${system_rss_mb:--}" "-" "-" "<= 10 MB"
row "  floor: a process that only opens qemu:///system" "$floor_system" "-" "-" "-"
row "agent RSS, test driver: idle (MB, $idle_threads threads)" "$idle_rss" "-" "-" "<= 10 MB"
row "agent RSS, test driver: 500 instances (MB)" "$rss_500" "-" "-" "-"
row "agent RSS, test driver: 1,000 instances (MB)" "$rss_1000" "-" "-" "<= 24 MB"
row "floor: a process that only opens libvirt (MB)" "$floor_idle" "-" "-" "-"
row "floor: the same, holding $listed such domains (MB)" "$floor_1000" "-" "-" "-"
if [ -n "$crypto_floor" ]; then
  row "floor: public-key ms per full handshake, mbedTLS" "$crypto_floor" "$openssl_ms" \
    "$(awk -v a="$openssl_ms" -v b="$crypto_floor" 'BEGIN {printf "%.2f", a / b}')" "(OpenSSL; ratio = speed)"
  echo "mbedTLS P-256, ms per operation: key $keygen, shared secret $shared, sign $sign, verify $verify"
fi
echo
echo "qemu:///system: $system_rss"
