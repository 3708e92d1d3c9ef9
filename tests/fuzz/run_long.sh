#!/usr/bin/env bash
# The long fuzz run (outside CI): every libFuzzer target, built with ASan + UBSan, for RUNS
# executions each from its seed corpus, two targets at a time; prints each target's executions,
# time and coverage, and fails on any crash, leak or sanitizer report.
# Usage: tests/fuzz/run_long.sh SOURCE_DIR [RUNS] [FUZZ_BUILD_DIR] [TARGET...]
#        (RUNS default 10000000; every target unless some are named)
set -euo pipefail
source_dir=$(cd "$1" && pwd)
runs=${2:-10000000}
build=${3:-$source_dir/build/fuzz}
shift $(($# < 3 ? $# : 3))
if [ ! -x "$build/tests/fuzz/fuzz_http_request" ]; then
  (cd "$source_dir" && cmake --preset fuzz >/dev/null && cmake --build --preset fuzz)
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
targets=(bootstrap_json agent_config domain_xml http_request http_response)
if [ "$#" -gt 0 ]; then targets=("$@"); fi
fuzz_one() {
  local target=$1
  mkdir -p "$work/$target"
  cp "$source_dir"/tests/fuzz/corpus/"$target"/* "$work/$target"/ 2>/dev/null || true
  local started status=0
  started=$(date +%s)
  # A domain's names and tag values are short: past 4 KiB an input only repeats the tag shape,
  # and each extra tag costs a linear search, so domain_xml's long inputs buy time, not coverage.
  local max_len=65536
  [ "$target" = domain_xml ] && max_len=4096
  "$build/tests/fuzz/fuzz_$target" -runs="$runs" -max_len="$max_len" -print_final_stats=1 \
    -artifact_prefix="$work/$target-" "$work/$target" > "$work/$target.log" 2>&1 || status=$?
  printf '%-15s exit %d, %s executions in %ss, %s\n' "$target" "$status" \
    "$(sed -n 's/^stat::number_of_executed_units: *//p' "$work/$target.log")" \
    "$(($(date +%s) - started))" "$(grep -o 'cov: [0-9]* ft: [0-9]*' "$work/$target.log" | tail -1)"
  if [ "$status" != 0 ]; then tail -n 40 "$work/$target.log"; fi
  return "$status"
}
failed=0
# Two at a time, the next target starting as soon as either finishes (their speeds differ by 20x).
running=0
for target in "${targets[@]}"; do
  if [ "$running" -ge 2 ]; then
    wait -n || failed=1
    running=$((running - 1))
  fi
  fuzz_one "$target" &
  running=$((running + 1))
done
while [ "$running" -gt 0 ]; do
  wait -n || failed=1
  running=$((running - 1))
done
[ "$failed" = 0 ] && echo "long fuzz run: ${targets[*]} each ran $runs executions without a finding"
exit "$failed"
