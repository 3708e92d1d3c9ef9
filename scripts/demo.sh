#!/usr/bin/env bash
# Installs what the demo needs, builds the two executables and runs the whole garm flow on
# libvirt's built-in test:///default driver: `pki init`, the agent serving its mTLS API, and
# garm-provider-edge run exactly as garm runs it through a full lifecycle. The tests' tools
# (cross compilers, QEMU, clang-tidy, ...) are scripts/test.sh's to install.
set -euo pipefail
cd "$(dirname "$0")/.."
started=$(date +%s)
scripts/install-deps.sh --demo
echo "demo: build dependencies installed ($(($(date +%s) - started)) s)"
cmake --preset demo >/dev/null
cmake --build --preset demo --target garm-edge-agent garm-provider-edge
echo "demo: garm-edge-agent and garm-provider-edge built ($(($(date +%s) - started)) s)"
exec scripts/garm-flow-demo.sh build/demo "$@"
