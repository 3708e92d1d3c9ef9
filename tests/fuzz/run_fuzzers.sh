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
for target in bootstrap_json agent_config domain_xml http_request http_response; do
  mkdir -p "$work/$target"
  cp tests/fuzz/corpus/"$target"/* "$work/$target"/ 2>/dev/null || true
  echo "fuzzing $target for ${seconds}s"
  build/fuzz/tests/fuzz/fuzz_"$target" -max_total_time="$seconds" -max_len=65536 \
    -print_final_stats=1 "$work/$target" 2>&1 | tail -n 12
done
