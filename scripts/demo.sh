#!/usr/bin/env bash
# Installs what the build needs, builds garm-edge and runs the instance-service demo
# (by default on libvirt's built-in test:///default driver). Extra arguments go to the demo,
# e.g. --uri qemu:///system --storage-pool default --network default.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
cmake --preset release >/dev/null
cmake --build --preset release
exec build/release/agent/garm-edge-agent demo "$@"
