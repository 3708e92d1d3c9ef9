#!/usr/bin/env bash
# Installs what the build needs, builds garm-edge and runs the whole garm flow on libvirt's
# built-in test:///default driver: `pki init`, the agent serving its mTLS API, and
# garm-provider-edge run exactly as garm runs it through a full lifecycle.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
cmake --preset release >/dev/null
cmake --build --preset release
exec scripts/garm-flow-demo.sh build/release "$@"
