#!/usr/bin/env bash
# Package tier: builds the .deb packages and the provider tarball from BUILD_DIR, runs lintian,
# installs both packages with dpkg on this machine, checks files, the service account,
# permissions, the unit (systemd-analyze verify) and check-config, runs the installed agent on
# libvirt's test driver, runs the static provider in an empty chroot against it by host name,
# then removes and purges both packages. Needs root (exit 77 otherwise).
# Usage: run_deb_install.sh SOURCE_DIR [BUILD_DIR]   (default: the `package` preset's build)
set -euo pipefail
if [ "$(id -u)" -ne 0 ]; then
  echo "skipped: the package tier needs root"
  exit 77
fi
if [ $# -ge 2 ]; then
  build=$(cd "$2" && pwd)
else
  (cd "$1" && cmake --preset package >/dev/null && cmake --build --preset package)
  build=$(cd "$1/build/package" && pwd)
fi
# shellcheck source-path=SCRIPTDIR source=../../scripts/lib/agent-ready.sh
. "$1/scripts/lib/agent-ready.sh"
fail() { echo "FAILED: $*"; [ -f "${work:-/nonexistent}/agent.log" ] && cat "$work/agent.log"; exit 1; }
section() { printf '\n== %s\n' "$*"; }
command -v lintian >/dev/null || DEBIAN_FRONTEND=noninteractive timeout 600 \
  apt-get install -y -q --no-install-recommends lintian >/dev/null

work=$(mktemp -d /tmp/garm-edge-package.XXXXXX)
agent_pid=
cleanup() {
  if [ -n "$agent_pid" ]; then kill "$agent_pid" 2>/dev/null && wait "$agent_pid" 2>/dev/null; fi || true
  dpkg -P garm-edge-agent garm-provider-edge >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT

section "build the packages and the provider tarball"
cmake --build "$build" --target package provider_tarball | grep -E 'generated|tarball' || true
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

section "install with dpkg"
getent group libvirt >/dev/null || groupadd -r libvirt  # as libvirt-daemon-system would
dpkg -i "$agent_deb" "$provider_deb"
if [ ! -x /usr/bin/garm-edge-agent ] || [ ! -x /usr/bin/garm-provider-edge ]; then fail "binaries missing"; fi
[ -f /lib/systemd/system/garm-edge-agent.service ] || fail "unit missing"
[ -f /usr/lib/sysusers.d/garm-edge.conf ] || fail "sysusers file missing"
dpkg-query -W -f='${Conffiles}\n' garm-edge-agent | grep -q '/etc/garm-edge/agent.toml' ||
  fail "agent.toml is not a conffile"
getent passwd garm-edge >/dev/null || fail "no garm-edge user"
id -nG garm-edge | grep -qw libvirt || fail "garm-edge is not in group libvirt"
[ "$(stat -c '%U:%G %a' /etc/garm-edge)" = "root:garm-edge 750" ] || fail "/etc/garm-edge: $(stat -c '%U:%G %a' /etc/garm-edge)"
[ "$(stat -c '%U %a' /etc/garm-edge/pki)" = "garm-edge 700" ] || fail "/etc/garm-edge/pki permissions"
[ "$(stat -c '%U %a' /var/lib/garm-edge)" = "garm-edge 700" ] || fail "/var/lib/garm-edge permissions"
echo "files, conffile, user garm-edge (groups: $(id -nG garm-edge)) and permissions as expected"
readelf -d /usr/bin/garm-edge-agent | grep NEEDED
file /usr/bin/garm-provider-edge | grep -q 'statically linked' || fail "the provider is not static"

section "systemd-analyze verify, pki init and check-config as the service account"
systemd-analyze verify /lib/systemd/system/garm-edge-agent.service 2>&1 |
  grep -v -e 'libvirtd.service' -e 'virtqemud.service' -e 'virtnetworkd.service' || true
if systemd-analyze verify /lib/systemd/system/garm-edge-agent.service 2>&1 |
  grep -v -e 'libvirtd.service' -e 'virtqemud.service' -e 'virtnetworkd.service' | grep -q .; then
  fail "systemd-analyze verify reports problems"
fi
echo "systemd-analyze verify: clean"
runuser -u garm-edge -- garm-edge-agent pki init --dir /etc/garm-edge/pki --dns localhost \
  --dns edge-agent.test
runuser -u garm-edge -- garm-edge-agent check-config --config /etc/garm-edge/agent.toml

section "the installed agent on test:///default"
# The test driver's host is a made-up 3 GiB one: room for more than one small instance.
sed -e 's|^uri = .*|uri = "test:///default"|' -e 's|^storage_pool = .*|storage_pool = "default-pool"|' \
  -e 's|^memory_overcommit = .*|memory_overcommit = 100.0|' \
  -e 's|^port = 8443 |port = 0 |' -e 's|^address = "0.0.0.0"|address = "127.0.0.1"|' \
  /etc/garm-edge/agent.toml | awk '/^\[guests\]/{skip=1; next} /^\[/{skip=0} !skip' > "$work/agent.toml"
sed -i 's|^base_volume = .*|base_path = "/var/lib/garm-edge/images/debian-12.qcow2"|' "$work/agent.toml"
chown garm-edge "$work" "$work/agent.toml"
runuser -u garm-edge -- garm-edge-agent check-config --config "$work/agent.toml"
runuser -u garm-edge -- /usr/bin/garm-edge-agent serve --config "$work/agent.toml" \
  --ready-file "$work/agent.ready" 2> "$work/agent.log" &
agent_pid=$!
wait_for_agent_ready "$agent_pid" "$work/agent.ready" "$work/agent.log" 200 || fail "the installed agent did not start"
port=$api_port
pgrep -u garm-edge -f '/usr/bin/garm-edge-agent serve' >/dev/null || fail "the agent does not run as garm-edge"
echo "installed agent listening on 127.0.0.1:$port as user garm-edge"

section "the static provider in an empty chroot, agent addressed by host name"
jail=$work/jail
mkdir -p "$jail/etc" "$jail/certs" "$jail/sessions"
cp /usr/bin/garm-provider-edge "$jail/"
cp /etc/garm-edge/pki/ca.crt /etc/garm-edge/pki/clients/garm.crt /etc/garm-edge/pki/clients/garm.key "$jail/certs/"
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

section "remove keeps config and state; purge removes them"
dpkg -r garm-edge-agent garm-provider-edge
[ ! -e /usr/bin/garm-edge-agent ] || fail "the agent binary survived remove"
if [ ! -f /etc/garm-edge/agent.toml ] || [ ! -d /var/lib/garm-edge ]; then fail "remove took config or state"; fi
dpkg -P garm-edge-agent garm-provider-edge
if [ -e /etc/garm-edge ] || [ -e /var/lib/garm-edge ] || [ -e /etc/garm/garm-provider-edge.toml ]; then
  fail "purge left config or state behind"
fi
dpkg-query -W garm-edge-agent >/dev/null 2>&1 && fail "the package is still known to dpkg"
echo "package tier: installed, ran, removed and purged cleanly"
