#!/usr/bin/env bash
# Package tier: builds the .deb packages and the provider tarball from BUILD_DIR, runs lintian,
# installs both packages with dpkg on this machine, checks files, the service account,
# permissions, the unit (systemd-analyze verify) and check-config, runs the installed agent on
# libvirt's test driver, runs the static provider in an empty chroot against it by host name,
# then removes and purges both packages. Needs root (exit 77 otherwise).
# Packages of another architecture (BUILD_DIR a cross build, such as build/cross-arm64) go
# through the same steps in a Debian root of that architecture (debootstrap --foreign, its
# programs run by qemu-user through binfmt_misc) instead of this machine.
# Usage: run_deb_install.sh SOURCE_DIR [BUILD_DIR]   (default: the `package` preset's build)
set -euo pipefail
if [ "$(id -u)" -ne 0 ]; then
  echo "skipped: the package tier needs root"
  exit 77
fi
if [ $# -ge 2 ]; then
  build=$(cd "$2" 2>/dev/null && pwd) || { echo "FAILED: no build directory $2"; exit 1; }
else
  (cd "$1" && cmake --preset package >/dev/null && cmake --build --preset package)
  build=$(cd "$1/build/package" && pwd)
fi
# shellcheck source-path=SCRIPTDIR source=../../scripts/lib/agent-ready.sh
. "$1/scripts/lib/agent-ready.sh"
# shellcheck source-path=SCRIPTDIR source=../../scripts/lib/foreign-root.sh
. "$1/scripts/lib/foreign-root.sh"
# shellcheck source-path=SCRIPTDIR source=../../scripts/lib/debian-mirror.sh
. "$1/scripts/lib/debian-mirror.sh"
fail() { echo "FAILED: $*"; [ -f "${work:-/nonexistent}/agent.log" ] && cat "$work/agent.log"; exit 1; }
section() { printf '\n== %s\n' "$*"; }
command -v lintian >/dev/null || DEBIAN_FRONTEND=noninteractive timeout 600 \
  apt-get install -y -q --no-install-recommends lintian >/dev/null

scratch=$(mktemp -d /tmp/garm-edge-package.XXXXXX)
# The packages are installed on this machine, or into $root when they are another
# architecture's. in_root runs a command there; $work is the same directory seen from here, and
# $inner as seen from in_root.
root=
work=$scratch
inner=$scratch
in_root() { if [ -n "$root" ]; then chroot "$root" "$@"; else "$@"; fi; }
agent_pid=
cleanup() {
  if [ -n "$agent_pid" ]; then kill "$agent_pid" 2>/dev/null && wait "$agent_pid" 2>/dev/null; fi || true
  if [ -n "$root" ]; then
    awk -v prefix="$root/" 'index($5, prefix) == 1 { print $5 }' /proc/self/mountinfo | sort -r |
      while read -r target; do umount -l "$target" 2>/dev/null || true; done
  else
    dpkg -P garm-edge-agent garm-provider-edge >/dev/null 2>&1 || true
  fi
  rm -rf --one-file-system "$scratch"
}
trap cleanup EXIT

section "build the packages and the provider tarball"
cmake --build "$build" --target package provider_tarball >"$scratch/build.out" 2>&1 ||
  { tail -n 30 "$scratch/build.out"; fail "building the packages in $build"; }
grep -E 'generated|tarball' "$scratch/build.out" || true
agent_deb=$(ls "$build"/garm-edge-agent_*.deb)
provider_deb=$(ls "$build"/garm-provider-edge_*.deb)
tarball=$(ls "$build"/garm-provider-edge_*_linux_*.tar.gz)
for file in "$agent_deb" "$provider_deb" "$tarball"; do
  printf '%-60s %8d bytes\n' "$(basename "$file")" "$(stat -c %s "$file")"
done
tar -tzf "$tarball" > "$work/tarball.txt"
grep -Eqx '(./)?garm-provider-edge' "$work/tarball.txt" || fail "the tarball holds no provider"

section "lintian"
lintian --fail-on error,warning --tag-display-limit 0 "$agent_deb" "$provider_deb" 2>&1 |
  grep -v 'root privileges' || true
lintian --fail-on error,warning "$agent_deb" "$provider_deb" >/dev/null 2>&1 ||
  fail "lintian reports errors or warnings"
echo "lintian: no errors or warnings (overrides: packaging/lintian/)"

deb_arch=$(dpkg-deb -f "$agent_deb" Architecture)
if [ "$deb_arch" != "$(dpkg --print-architecture)" ]; then
  section "a Debian 12 $deb_arch root to install into (qemu-user runs its programs)"
  root=$scratch/root
  started=$SECONDS
  # What apt would bring for the packages (their Depends, the first of alternatives), and
  # systemd for systemd-analyze.
  depends=$(dpkg-deb -f "$agent_deb" Depends |
    sed -e 's/([^)]*)//g' -e 's/|[^,]*//g' -e 's/[[:space:]]//g')
  for attempt in 1 2; do
    debootstrap --arch="$deb_arch" --foreign --variant=minbase --include="$depends,systemd" \
      bookworm "$root" "$(debian_mirror)" >"$scratch/debootstrap.out" 2>&1 && break
    tail -n 20 "$scratch/debootstrap.out"
    [ "$attempt" -lt 2 ] || fail "debootstrap --foreign of $deb_arch"
    rm -rf --one-file-system "$root"  # a flaky mirror is the usual cause: once more
  done
  place_static_qemu "$deb_arch" "$root" "$scratch" || fail "no qemu-user for $deb_arch"
  foreign_second_stage "$root" "$scratch/second-stage.out" || fail "the $deb_arch root's second stage"
  inner=/tmp/$(basename "$scratch")  # its own name: no process of another run matches it
  work=$root$inner
  mkdir -p "$work"
  cp "$agent_deb" "$provider_deb" "$work/"
  agent_deb=$inner/$(basename "$agent_deb") provider_deb=$inner/$(basename "$provider_deb")
  echo "$root: $(in_root dpkg --print-architecture), $(in_root dpkg-query -W | wc -l) packages, made in $((SECONDS - started)) s"
fi

section "install with dpkg"
in_root getent group libvirt >/dev/null || in_root groupadd -r libvirt  # as libvirt-daemon-system would
in_root dpkg -i "$agent_deb" "$provider_deb"
if [ ! -x "$root/usr/bin/garm-edge-agent" ] || [ ! -x "$root/usr/bin/garm-provider-edge" ]; then fail "binaries missing"; fi
[ -f "$root/lib/systemd/system/garm-edge-agent.service" ] || fail "unit missing"
[ -f "$root/usr/lib/sysusers.d/garm-edge.conf" ] || fail "sysusers file missing"
# shellcheck disable=SC2016  # dpkg-query's own field syntax
in_root dpkg-query -W -f='${Conffiles}\n' garm-edge-agent | grep -q '/etc/garm-edge/agent.toml' ||
  fail "agent.toml is not a conffile"
in_root getent passwd garm-edge >/dev/null || fail "no garm-edge user"
in_root id -nG garm-edge | grep -qw libvirt || fail "garm-edge is not in group libvirt"
owner_and_mode() { in_root stat -c "$1" "$2"; }
[ "$(owner_and_mode '%U:%G %a' /etc/garm-edge)" = "root:garm-edge 750" ] || fail "/etc/garm-edge: $(owner_and_mode '%U:%G %a' /etc/garm-edge)"
[ "$(owner_and_mode '%U %a' /etc/garm-edge/pki)" = "garm-edge 700" ] || fail "/etc/garm-edge/pki permissions"
[ "$(owner_and_mode '%U %a' /var/lib/garm-edge)" = "garm-edge 700" ] || fail "/var/lib/garm-edge permissions"
echo "files, conffile, user garm-edge (groups: $(in_root id -nG garm-edge)) and permissions as expected"
readelf -h "$root/usr/bin/garm-edge-agent" | grep Machine
readelf -d "$root/usr/bin/garm-edge-agent" | grep NEEDED
file "$root/usr/bin/garm-provider-edge" | grep -q 'statically linked' || fail "the provider is not static"
file "$root/usr/bin/garm-edge-hub" | grep -q 'statically linked' || fail "the hub is not static"
[ -f "$root/lib/systemd/system/garm-edge-hub.service" ] || fail "the hub's unit is missing"
for package in garm-edge-agent garm-provider-edge; do
  for file in garm-edge.rules.yml garm-edge-fleet.dashboard.json observability.md; do
    [ -f "$root/usr/share/$package/monitoring/$file" ] || fail "$package does not ship monitoring/$file"
  done
done
# shellcheck disable=SC2016  # dpkg-query's own field syntax
in_root dpkg-query -W -f='${Conffiles}\n' garm-provider-edge | grep -q '/etc/garm-edge-hub/hub.toml' ||
  fail "hub.toml is not a conffile"
in_root getent passwd garm-edge-hub >/dev/null || fail "no garm-edge-hub user"
[ ! -e "$root/etc/systemd/system/multi-user.target.wants/garm-edge-hub.service" ] ||
  fail "a fresh install enabled the hub before it has a CA"
[ "$(owner_and_mode '%U %a' /var/lib/garm-edge-hub)" = "garm-edge-hub 700" ] || fail "/var/lib/garm-edge-hub permissions"

section "systemd-analyze verify, pki init and check-config as the service account"
verify_unit() {
  in_root systemd-analyze verify /lib/systemd/system/garm-edge-agent.service 2>&1 |
    grep -v -e 'libvirtd.service' -e 'virtqemud.service' -e 'virtnetworkd.service' || true
}
verify_unit
[ -z "$(verify_unit)" ] || fail "systemd-analyze verify reports problems"
hub_verify=$(in_root systemd-analyze verify /lib/systemd/system/garm-edge-hub.service 2>&1 || true)
[ -z "$hub_verify" ] || fail "systemd-analyze verify of the hub's unit: $hub_verify"
in_root runuser -u garm-edge-hub -- garm-edge-hub init --state-dir /var/lib/garm-edge-hub \
  --dns localhost --ip 127.0.0.1 || fail "garm-edge-hub init as its account"
sed -e 's|^url = .*|url = "https://127.0.0.1:18444"|' -e 's|^port = 8444|port = 18444|' \
  -e 's|^port = 8445|port = 18445|' -e 's|^address = "0.0.0.0"|address = "127.0.0.1"|' \
  "$root/etc/garm-edge-hub/hub.toml" > "$root/etc/garm-edge-hub/test.toml"
in_root chgrp garm-edge-hub /etc/garm-edge-hub/test.toml
in_root chmod 0640 /etc/garm-edge-hub/test.toml
in_root runuser -u garm-edge-hub -- garm-edge-hub token create --config /etc/garm-edge-hub/test.toml \
  > "$work/token" || fail "garm-edge-hub token create as its account"
grep -q '^gejoin1\.' "$work/token" || fail "no join token printed"
echo "hub: static, unit verified, init and a token as user garm-edge-hub"
echo "systemd-analyze verify ($(in_root systemd-analyze --version | head -n1)): clean"
in_root runuser -u garm-edge -- garm-edge-agent pki init --dir /etc/garm-edge/pki --dns localhost \
  --dns edge-agent.test
in_root runuser -u garm-edge -- garm-edge-agent check-config --config /etc/garm-edge/agent.toml

section "the installed agent on test:///default"
# The test driver's host is a made-up 3 GiB one: room for more than one small instance.
sed -e 's|^uri = .*|uri = "test:///default"|' -e 's|^storage_pool = .*|storage_pool = "default-pool"|' \
  -e 's|^memory_overcommit = .*|memory_overcommit = 100.0|' \
  -e 's|^port = 8443 |port = 0 |' -e 's|^address = "0.0.0.0"|address = "127.0.0.1"|' \
  "$root/etc/garm-edge/agent.toml" | awk '/^\[guests\]/{skip=1; next} /^\[/{skip=0} !skip' > "$work/agent.toml"
sed -i 's|^base_volume = .*|base_path = "/var/lib/garm-edge/images/debian-12.qcow2"|' "$work/agent.toml"
in_root chown garm-edge "$inner" "$inner/agent.toml"
in_root runuser -u garm-edge -- garm-edge-agent check-config --config "$inner/agent.toml"
# Started as a command, not through in_root: $! must be runuser (or chroot, which execs it),
# which passes SIGTERM on to the agent; a backgrounded function would be a subshell.
serve=(runuser -u garm-edge -- /usr/bin/garm-edge-agent serve --config "$inner/agent.toml"
  --ready-file "$inner/agent.ready")
if [ -n "$root" ]; then serve=(chroot "$root" "${serve[@]}"); fi
"${serve[@]}" 2> "$work/agent.log" &
agent_pid=$!
wait_for_agent_ready "$agent_pid" "$work/agent.ready" "$work/agent.log" 200 || fail "the installed agent did not start"
port=$api_port
pgrep -u "$(in_root id -u garm-edge)" -f "serve --config $inner/agent.toml" >/dev/null ||
  fail "the agent does not run as garm-edge"
echo "installed agent listening on 127.0.0.1:$port as user garm-edge"

section "the static provider in an empty chroot, agent addressed by host name"
jail=$work/jail
mkdir -p "$jail/etc" "$jail/certs" "$jail/sessions"
cp "$root/usr/bin/garm-provider-edge" "$jail/"
cp "$root"/etc/garm-edge/pki/{ca.crt,clients/garm.crt,clients/garm.key} "$jail/certs/"
if [ -n "$root" ]; then  # the kernel looks for the provider's qemu inside the jail
  mkdir -p "$jail/$(dirname "${qemu_in_root#"$root"}")"
  cp "$qemu_in_root" "$jail/${qemu_in_root#"$root"}"
fi
echo "127.0.0.1 edge-agent.test" > "$jail/etc/hosts"
cat > "$jail/provider.toml" <<TOML
session_dir = "/sessions"
[[agents]]
name = "packaged"
url = "https://edge-agent.test:$port"
ca = "/certs/ca.crt"
certificate = "/certs/garm.crt"
key = "/certs/garm.key"
TOML
echo "jail: $(cd "$jail" && find . -type f | sort | tr '\n' ' ')"
controller=9dcf590a-1192-4a9c-b3e4-e0902974c2c0
pool=0f1e2d3c-4b5a-4968-8776-a5b4c3d2e1f0
garm_in_jail() {
  env -i GARM_COMMAND="$1" GARM_CONTROLLER_ID=$controller GARM_PROVIDER_CONFIG_FILE=/provider.toml \
    GARM_INTERFACE_VERSION=v0.1.0 "${@:2}" /usr/sbin/chroot "$jail" /garm-provider-edge
}
printf '{"name":"garm-packaged1","tools":[],"repo_url":"https://github.com/example","callback-url":"https://garm.example/api/v1/callbacks","metadata-url":"https://garm.example/api/v1/metadata","instance-token":"t","ssh-keys":null,"extra_specs":{},"github-runner-group":"","ca-cert-bundle":null,"arch":"amd64","os_type":"linux","flavor":"small","image":"debian-12","labels":null,"pool_id":"%s","user_data_options":{"disable_updates_on_boot":false,"extra_packages":null,"enable_boot_debug":false},"jit_config_enabled":true,"proxy_config":{"http_proxy":"","https_proxy":"","no_proxy":""}}' "$pool" > "$work/bootstrap.json"
created=$(garm_in_jail CreateInstance GARM_POOL_ID=$pool < "$work/bootstrap.json") || fail "CreateInstance in the jail"
echo "CreateInstance: $created"
got=$(garm_in_jail GetInstance GARM_INSTANCE_ID=garm-packaged1) || fail "GetInstance in the jail"
echo "GetInstance: $got"
case "$got" in *'"name":"garm-packaged1"'*'"status":"running"'*) ;; *) fail "unexpected GetInstance answer" ;; esac
garm_in_jail DeleteInstance GARM_INSTANCE_ID=garm-packaged1 || fail "DeleteInstance in the jail"

section "the static provider in a jail without /etc/hosts, agent addressed as localhost"
rm "$jail/etc/hosts"
sed -i "s|^url = .*|url = \"https://localhost:$port\"|" "$jail/provider.toml"
garm_in_jail GetInstance GARM_INSTANCE_ID=garm-packaged1 > /dev/null 2> "$work/localhost.err" || [ $? -eq 30 ] ||
  fail "GetInstance by localhost without /etc/hosts: $(cat "$work/localhost.err")"
echo "localhost resolved without /etc/hosts: the agent answered (not found, as it was deleted)"
kill "$agent_pid"; wait "$agent_pid" 2>/dev/null || true; agent_pid=
for _ in $(seq 50); do pgrep -f "serve --config $inner/agent.toml" >/dev/null || break; sleep 0.1; done
pgrep -f "serve --config $inner/agent.toml" >/dev/null && fail "the agent outlived its stop"

section "remove keeps config and state; purge removes them"
in_root dpkg -r garm-edge-agent garm-provider-edge
[ ! -e "$root/usr/bin/garm-edge-agent" ] || fail "the agent binary survived remove"
if [ ! -f "$root/etc/garm-edge/agent.toml" ] || [ ! -d "$root/var/lib/garm-edge" ]; then fail "remove took config or state"; fi
in_root dpkg -P garm-edge-agent garm-provider-edge
if [ -e "$root/etc/garm-edge" ] || [ -e "$root/var/lib/garm-edge" ] || [ -e "$root/etc/garm/garm-provider-edge.toml" ] ||
  [ -e "$root/var/lib/garm-edge-hub" ] || [ -e "$root/etc/garm-edge-hub" ]; then
  fail "purge left config or state behind"
fi
in_root dpkg-query -W garm-edge-agent >/dev/null 2>&1 && fail "the package is still known to dpkg"
echo "package tier ($deb_arch${root:+ in a chroot}): installed, ran, removed and purged cleanly"
