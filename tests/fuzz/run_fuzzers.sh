#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (ASan + UBSan) and runs each for a while from its
# seed corpus. Usage: run_fuzzers.sh SOURCE_DIR [SECONDS_PER_TARGET]
set -euo pipefail
cd "$1"
seconds="${2:-30}"
cmake --preset fuzz >/dev/null
cmake --build --preset fuzz
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# Two targets at a time: the tier holds both cores, and each libFuzzer process uses one.
fuzz() {  # TARGET: runs it for $seconds into $work/TARGET.log
  local target=$1
  mkdir -p "$work/$target"
  cp tests/fuzz/corpus/"$target"/* "$work/$target"/ 2>/dev/null || true
  build/fuzz/tests/fuzz/fuzz_"$target" -max_total_time="$seconds" -max_len=65536 \
    -print_final_stats=1 "$work/$target" > "$work/$target.log" 2>&1
}
failed=()
run_pair() {
  local pids=() targets=("$@") i
  for target in "${targets[@]}"; do
    echo "fuzzing $target for ${seconds}s"
    fuzz "$target" &
    pids+=($!)
  done
  for i in "${!pids[@]}"; do
    wait "${pids[$i]}" || failed+=("${targets[$i]}")
    tail -n 12 "$work/${targets[$i]}.log"
  done
}
run_pair bootstrap_json agent_config
run_pair domain_xml http_request
run_pair http_response hub_input
run_pair image_input
if [ ${#failed[@]} -gt 0 ]; then
  echo "FAILED: fuzz targets ${failed[*]}"
  exit 1
fi
