#!/usr/bin/env bash
# Prints, side by side in one run against one loopback agent on libvirt's test driver:
#  - the median wall time of one garm-provider-edge GetInstance process (as garm runs it), with
#    its TLS session resumed from the previous invocation, and without any saved session;
#  - the median wall time of `curl --cert` doing the same GET;
#  - requests per second over one keep-alive mTLS connection (curl with many URLs).
#  - with OTHER_PROVIDERS="LABEL=PATH ...", other builds' providers (e.g. of an older commit) in
#    the same run, interleaved, each with a session directory of its own.
# Usage: [OTHER_PROVIDERS=...] bench/provider_vs_curl.sh BUILD_DIR [RUNS]
set -euo pipefail
build=$(cd "$1" && pwd)
runs=${2:-41}
uri=test:///default
announce() { :; }
# shellcheck source-path=SCRIPTDIR source=../scripts/lib/agent-fixture.sh
. "$(dirname "$0")/../scripts/lib/agent-fixture.sh" > /dev/null

url="https://localhost:$port/v1/controllers/$controller/instances/garm-bench"
provider_get() {
  env -i GARM_COMMAND=GetInstance GARM_CONTROLLER_ID="$controller" GARM_INSTANCE_ID=garm-bench \
    GARM_PROVIDER_CONFIG_FILE="$work/provider.toml" GARM_INTERFACE_VERSION=v0.1.0 "$provider" \
    < /dev/null > /dev/null 2>&1 || [ $? -eq 30 ]   # 30: not found, a full round trip all the same
}
curl_get() {
  curl -s -o /dev/null --cacert "$work/pki/ca.crt" --cert "$work/pki/clients/garm.crt" \
    --key "$work/pki/clients/garm.key" "$url"
}
fresh_provider_get() { rm -f "$work"/sessions/*; provider_get; }

# Each other provider: its own config (its own session directory), measured like provider_get.
declare -A other_binary
others=()
for entry in ${OTHER_PROVIDERS:-}; do
  label=${entry%%=*}
  other_binary[$label]=${entry#*=}
  mkdir -p "$work/sessions-$label"
  sed "s|^session_dir = .*|session_dir = \"$work/sessions-$label\"|" "$work/provider.toml" \
    > "$work/provider-$label.toml"
  others+=("$label")
done
other_get() {  # LABEL
  env -i GARM_COMMAND=GetInstance GARM_CONTROLLER_ID="$controller" GARM_INSTANCE_ID=garm-bench \
    GARM_PROVIDER_CONFIG_FILE="$work/provider-$1.toml" GARM_INTERFACE_VERSION=v0.1.0 \
    "${other_binary[$1]}" < /dev/null > /dev/null 2>&1 || [ $? -eq 30 ]
}

# Median wall time in ms of running "$1" $runs times, interleaved with the others by the caller.
declare -A samples
measure() {
  local name=$1 started ended
  started=$(date +%s%N)
  "$name"
  ended=$(date +%s%N)
  samples[$name]+="$(( (ended - started) / 1000 )) "
}
measure_other() {  # LABEL
  local started ended
  started=$(date +%s%N)
  other_get "$1"
  ended=$(date +%s%N)
  samples[other_$1]+="$(( (ended - started) / 1000 )) "
}
median_ms() {
  tr ' ' '\n' <<< "${samples[$1]}" | grep -v '^$' | sort -n | awk '{a[NR]=$1} END {printf "%.1f", a[int((NR+1)/2)]/1000}'
}

provider_get  # warm up: the first call saves a session
for label in "${others[@]}"; do
  other_get "$label"
done
for _ in $(seq "$runs"); do
  measure provider_get
  measure curl_get
  measure fresh_provider_get
  for label in "${others[@]}"; do
    measure_other "$label"
  done
done
resumed=$(median_ms provider_get)
plain=$(median_ms curl_get)
full=$(median_ms fresh_provider_get)
echo "GetInstance round trip, median of $runs whole processes against a loopback agent:"
echo "  garm-provider-edge, session resumed : $resumed ms"
echo "  garm-provider-edge, full handshake  : $full ms"
echo "  curl --cert (OpenSSL)               : $plain ms"
awk -v a="$resumed" -v b="$plain" 'BEGIN {printf "  provider (resumed) / curl           : %.2f\n", a / b}'
for label in "${others[@]}"; do
  other=$(median_ms "other_$label")
  awk -v l="$label" -v a="$other" -v b="$plain" \
    'BEGIN {printf "  %-12s session resumed : %s ms (%.2f x curl)\n", l, a, a / b}'
done

requests=2000
list=$(for _ in $(seq $requests); do printf '%s ' "https://localhost:$port/healthz"; done)
started=$(date +%s%N)
# shellcheck disable=SC2086
curl -s --cacert "$work/pki/ca.crt" --cert "$work/pki/clients/garm.crt" \
  --key "$work/pki/clients/garm.key" $list > /dev/null
ended=$(date +%s%N)
awk -v n=$requests -v ns=$((ended - started)) \
  'BEGIN {printf "keep-alive: %d requests on one mTLS connection: %.0f requests/s\n", n, n / (ns / 1e9)}'
