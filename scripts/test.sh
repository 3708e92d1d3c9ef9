#!/usr/bin/env bash
# Installs what the build needs, builds garm-edge and runs every test tier: unit and
# integration tests (libvirt test driver), then the heavy tiers (ASan+UBSan build of the same
# tests). Pass -LE heavy to skip the heavy tiers while developing.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
cmake --preset debug >/dev/null
cmake --build --preset debug
ctest --preset debug "$@"
