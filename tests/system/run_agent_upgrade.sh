#!/usr/bin/env bash
# Upgrade tier on a real libvirtd + QEMU (guests need not boot): the agent's .deb of the
# previous commit is installed and serves instances made through garm-provider-edge; then this
# build's .deb is installed over it and the agent restarted. Every instance and record must
# survive: the same instances listed with the same provider IDs, domains still running, records
# unchanged, and the new agent's startup reconcile finding nothing to do. A provider of one
# version and agents of the other work together (docs/fleet.md, version skew): the old agent is
# also driven by this build's provider before the upgrade.
# Exit 77 (skipped) when not root, or when the clone holds no previous commit (a shallow one).
# Usage: run_agent_upgrade.sh SOURCE_DIR   (builds the `package` preset and the previous commit)
set -euo pipefail
source_dir=$(cd "$1" && pwd)
if [ "$(id -u)" -ne 0 ]; then
  echo "skipped: the upgrade tier needs root"
  exit 77
fi
previous=$(git -C "$source_dir" rev-parse --verify -q HEAD~1) || {
  echo "skipped: no previous commit in this clone"
  exit 77
}
section() { printf '\n== %s\n' "$1"; }
builds=$(mktemp -d /tmp/garm-edge-upgrade-builds.XXXXXX)
prev_tree=$builds/previous
remove_builds() {
  git -C "$source_dir" worktree remove --force "$prev_tree" 2>/dev/null || true
  rm -rf "$builds"
}
trap remove_builds EXIT

section "the agent's .deb of this build and of the previous commit ($(git -C "$source_dir" log --oneline -1 "$previous" | cut -c1-60))"
(cd "$source_dir" && cmake --preset package >/dev/null && cmake --build --preset package --target package \
  >"$builds/build.log" 2>&1) || { tail -n 30 "$builds/build.log"; echo "FAILED: this build's packages"; exit 1; }
build=$source_dir/build/package
new_deb=$(ls "$build"/garm-edge-agent_*.deb)
git -C "$source_dir" worktree add --detach -q "$prev_tree" "$previous"
started=$SECONDS
# Both trees hash their sources relative to their own root (cmake/Toolchain.cmake): what did not
# change between the commits comes from ccache.
# The same preset, so the same flags: only what differs misses.
(cd "$prev_tree" && cmake --preset package >/dev/null && cmake --build --preset package --target package \
  >"$builds/prev-build.log" 2>&1) ||
  { tail -n 30 "$builds/prev-build.log"; echo "FAILED: the previous commit does not build"; exit 1; }
prev_deb=$(ls "$prev_tree"/build/package/garm-edge-agent_*.deb)
echo "previous commit built in $((SECONDS - started)) s: $(basename "$prev_deb")"

tiny=upgrade
tiny_subnet=156
test_cleanup() {
  dpkg -P garm-edge-agent >/dev/null 2>&1 || true
  remove_builds
}
# shellcheck source-path=SCRIPTDIR source=tiny_host.sh
. "$(dirname "$0")/tiny_host.sh"
trap 'echo "FAILED: line $LINENO: \"$BASH_COMMAND\" exited $?"' ERR
fail() {
  echo "---- agent log (last 30 lines)"
  tail -n 30 "$work/agent.log" | grep -v 'event=' || true
  echo "FAILED: $*"
  exit 1
}

section "instances on the previous agent"
getent group libvirt >/dev/null || groupadd -r libvirt
dpkg -i "$prev_deb" >/dev/null
agent=/usr/bin/garm-edge-agent
start_agent
names=(garm-upgrade1 garm-upgrade2 garm-upgrade3)
for name in "${names[@]}"; do
  stdin_file=$work/$name.json
  bootstrap "$name" > "$stdin_file"
  garm CreateInstance GARM_POOL_ID="$pool_id"
  [ "$last_status" = 0 ] || fail "CreateInstance $name on the previous agent: $err"
done
stdin_file=
listed_before=$(garm ListInstances GARM_POOL_ID="$pool_id"; printf '%s' "$out" | grep -o '"provider_id":"[^"]*"' | sort)
[ "$(wc -l <<< "$listed_before")" = 3 ] || fail "three instances listed by this build's provider on the old agent: $listed_before"
records_before=$(cd "$state_dir/instances" && sha256sum ./*.json | sort)
domains_before=$(virsh list --name | grep "^garm-edge-$controller-" | sort)
echo "3 instances, listed by this build's provider from the previous agent"

section "this build's .deb over the running agent, then a restart"
dpkg -i "$new_deb" >/dev/null
[ "$(dpkg-query -W -f='${Version}' garm-edge-agent)" != "" ] || fail "not installed"
stop_agent
: > "$work/agent.log"
start_agent
listed_after=$(garm ListInstances GARM_POOL_ID="$pool_id"; printf '%s' "$out" | grep -o '"provider_id":"[^"]*"' | sort)
[ "$listed_after" = "$listed_before" ] || fail "instances after the upgrade differ: $listed_after"
records_after=$(cd "$state_dir/instances" && sha256sum ./*.json | sort)
[ "$records_after" = "$records_before" ] || fail "records changed: $records_after"
domains_after=$(virsh list --name | grep "^garm-edge-$controller-" | sort)
[ "$domains_after" = "$domains_before" ] || fail "running domains changed: $domains_after"
if grep -q "startup reconcile:" "$work/agent.log"; then
  fail "the new agent's startup reconcile acted: $(grep 'startup reconcile:' "$work/agent.log")"
fi
for name in "${names[@]}"; do
  garm DeleteInstance GARM_INSTANCE_ID="$name" GARM_POOL_ID="$pool_id"
  [ "$last_status" = 0 ] || fail "DeleteInstance $name after the upgrade: $err"
done
[ -z "$(host_domains)" ] || fail "domains left after the deletes"
echo "upgrade tier: every instance and record survived the upgrade, reconcile left them alone"
