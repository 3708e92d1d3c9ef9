#!/usr/bin/env bash
# Installs what the build needs, builds garm-edge and runs every test tier: unit and
# integration tests (libvirt test driver), then the heavy tiers (lint, ASan+UBSan, fuzz, cross,
# packages, real VMs, garm). Pass -LE heavy to skip the heavy tiers while developing.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
cmake --preset debug >/dev/null
cmake --build --preset debug

# A failed tier's own words, last, where a log cut in the middle still shows them: its output
# runs to thousands of lines (log tails), and ctest's summary names only the test.
say_why_tests_failed() {
  local status=$?
  echo "--- the failing checks, from build/debug/Testing/Temporary/LastTest.log:"
  grep -a -E '(^|[] ])FAILED: |^not ok |FAILED:$|^-+ *FAILED' build/debug/Testing/Temporary/LastTest.log |
    cut -c1-600 | head -n 30 || true
  return "$status"
}

ctest --preset debug -LE heavy "$@" || say_why_tests_failed
# The heavy tiers three at a time: their resource locks keep the builds and booting guests
# (`cpu`) one at a time, and the third slot takes the tiers that mostly wait (the fault tier on
# libvirtd, garm's own loops) or use one core (the arm64 chroot, the hub's namespaces), which with
# two slots held both of them for twenty minutes while the builds waited.
ctest --preset debug -L heavy -j3 "$@" || say_why_tests_failed
