#!/usr/bin/env bash
# Builds the asan preset (ASan + UBSan) and runs its unit and integration tests.
set -euo pipefail
cd "$1"
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
cmake --preset asan >/dev/null
cmake --build --preset asan
ctest --preset asan -LE heavy
