#!/usr/bin/env bash
# Installs what the build needs, builds garm-edge and runs every test tier: unit and
# integration tests (libvirt test driver), then the heavy tiers (ASan+UBSan build of the same
# tests). Pass -LE heavy to skip the heavy tiers while developing.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
# The full run (ctest runs two tests at a time): the arm64 tier's packages now, not beside the
# tests that use libvirtd (Multi-Arch may upgrade the host's own libraries, libvirt's among them).
if [ $# -eq 0 ] && [ "$(id -u)" -eq 0 ]; then
  scripts/cross-build.sh arm64 --deps-only
fi
cmake --preset debug >/dev/null
cmake --build --preset debug
ctest --preset debug "$@"
