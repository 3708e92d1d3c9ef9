#!/usr/bin/env bash
# VM tier with garm itself: garm, built from its source, creates a real Debian 12 guest under
# QEMU through garm-provider-edge's fleet path, the guest runs garm's own install template
# through the agent's relay, garm shows the runner idle, then deletes it and nothing is left.
# The host (libvirtd, image, NAT network, agent config) is tests/system/vm_fixture.sh's.
# Exit 77 (skipped) when not root or without garm's source tarball (unless
# GARM_EDGE_REQUIRE_GARM is set). Usage: run_garm_real_vm.sh BUILD_DIR
set -euo pipefail
build=$(cd "$1" && pwd)
garm_dir=$(cd "$(dirname "$0")" && pwd)

status=0
garm_bin=$("$garm_dir/build_garm.sh" | tail -n 1) || status=$?
if [ "$status" -eq 77 ]; then
  if [ -n "${GARM_EDGE_REQUIRE_GARM:-}" ]; then echo "FAILED: garm's source tarball is absent"; exit 1; fi
  echo "skipped: garm's source tarball is absent"
  exit 77
elif [ "$status" -ne 0 ]; then
  echo "FAILED: building garm"
  exit 1
fi

test_cleanup() {
  # garm's controller, not the fixture's, named this run's domains.
  if [ -s "$work/garm-controller" ]; then controller=$(cat "$work/garm-controller"); fi
}
# shellcheck source-path=SCRIPTDIR source=../system/vm_fixture.sh
. "$garm_dir/../system/vm_fixture.sh"
pool_dir=$pool_dir gateway=$gateway python3 "$garm_dir/run_garm_real_vm.py" "$build" "$work" "$garm_bin"
