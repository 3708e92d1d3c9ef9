#!/usr/bin/env bash
# The churn loop for hours (outside CI): real Debian 12 guests created, booted to `idle` and
# deleted two at a time on three reused addresses, as tests/system/run_churn.sh does, until
# HOURS have passed. Prints every cycle, the RSS and descriptor trend every 10 cycles, and at
# the end the cycles per hour, the failures (each with its guest's console), the address reuse
# table and the leftovers. As root, on a host with libvirtd and QEMU (installed if missing).
# Usage: bench/soak.sh BUILD_DIR HOURS
set -euo pipefail
build=$(cd "$1" && pwd)
hours=${2:?usage: bench/soak.sh BUILD_DIR HOURS}
seconds=$(awk -v h="$hours" 'BEGIN { printf "%d", h * 3600 }')
# Its own network, pool and subnet, so the CI tiers can run beside it.
GARM_EDGE_VM_NAME=soak GARM_EDGE_VM_SUBNET=157 GARM_EDGE_SOAK_SECONDS=$seconds exec "$(dirname "$0")/../tests/system/run_churn.sh" "$build"
