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
# What the merge wrote from every input the fuzzer kept, read by Prometheus's own parser: a
# parse error there (promtool's exit code 1; 3 is only its style lint) is a scrape Prometheus
# would refuse whole.
merged="$work/merged"
mkdir -p "$merged"
GARM_EDGE_FUZZ_MERGE_OUT="$merged" build/fuzz/tests/fuzz/fuzz_hub_input -runs=0 \
  "$work/hub_input" > "$work/replay.log" 2>&1 || failed+=(hub_input_replay)
checked=0
for text in "$merged"/*.prom; do
  [ -e "$text" ] || continue
  checked=$((checked + 1))
  status=0
  promtool check metrics < "$text" > "$work/promtool.log" 2>&1 || status=$?
  if [ "$status" -ne 0 ] && [ "$status" -ne 3 ]; then
    echo "Prometheus's parser refused the merge of $text:"
    cat "$work/promtool.log"
    head -c 2000 "$text"
    failed+=(hub_input_promtool)
    break
  fi
done
echo "promtool read $checked merged expositions"
if [ ${#failed[@]} -gt 0 ]; then
  echo "FAILED: fuzz targets ${failed[*]}"
  exit 1
fi
