# shellcheck shell=bash disable=SC2034,SC2154  # variables shared with the sourcing script
# Sourced by the real-VM end-to-end test and its benchmark: a production-shaped host on a real
# libvirtd with QEMU (TCG where KVM is unusable). It builds (or reuses) the Debian 12 cloud-init
# base image, defines a storage pool and a libvirt NAT network for guests, starts a fake garm
# over HTTPS on loopback, writes the agent's config (guest service on the network's gateway,
# relay mode) and garm-provider-edge's config, and offers start_agent / garm / bootstrap_json.
# Expects $build (a build directory). Sets $work, $pool_dir, $controller, $pool_id, $fake_garm_url.
# Optional: $vm_image_arch (amd64, the default, or arm64: the guests are aarch64 on the virt
# machine with UEFI), $vm_agent (another agent binary, such as the arm64 build under qemu-user),
# $vm_pulled_image (1: the agent pulls the base image from the fake garm's HTTPS server, matched
# in a SHA256SUMS file there, into $pulled_dir, instead of finding it in the storage pool),
# $vm_blank_base (1: the base image is a blank disk, nothing built: the domain and its firmware
# run, no OS boots).
# Exits 77 (skipped) when not root.

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
agent=${vm_agent:-$build/agent/garm-edge-agent}
provider=$build/provider/garm-provider-edge
image_arch=${vm_image_arch:-amd64}
# shellcheck disable=SC2034  # read by lib.sh
extra_packages=(dnsmasq-base iptables ebtables curl openssl python3)
case $image_arch in
  amd64) image_file=debian-12-cloudinit.qcow2 base_volume=debian-12.qcow2 ;;
  arm64)
    image_file=debian-12-cloudinit-arm64.qcow2 base_volume=debian-12-arm64.qcow2
    extra_packages+=(qemu-system-arm qemu-efi-aarch64)
    ;;
  *) echo "FAILED: no guest image for $image_arch"; exit 1 ;;
esac
virsh() { command virsh -q -c qemu:///system "$@"; }

work=$(mktemp -d /tmp/garm-edge-vm.XXXXXX)
# GARM_EDGE_VM_NAME and GARM_EDGE_VM_SUBNET (third octet) let a second run (a soak) share the
# host with the CI tiers.
vm_name=${GARM_EDGE_VM_NAME:-vmtest}
vm_subnet=192.168.${GARM_EDGE_VM_SUBNET:-152}
pool_dir=/var/lib/garm-edge-$vm_name
pulled_dir=$pool_dir-images
caches_dir=$pool_dir-caches  # QEMU opens generations there: not under the 0700 $work
network=garm-edge-$vm_name-net
storage_pool=garm-edge-$vm_name
bridge=ge${vm_name:0:8}br0
agent_pid=
fake_garm_pid=
made_pool=
made_network=
vm_fixture_cleanup() {
  if [ -n "$agent_pid" ]; then kill "$agent_pid" 2>/dev/null && wait "$agent_pid" 2>/dev/null; fi || true
  if [ -n "$fake_garm_pid" ]; then kill "$fake_garm_pid" 2>/dev/null; fi || true
  # Only what this run made: its own controller's domains, the warm guests its agent recorded,
  # and the network and pool only if it defined them (another run may be using them).
  local warm_domains=()
  if [ -n "${fixture_warm_guests:-}" ]; then
    for record in "$work"/state/instances/garm-edge-6761726d-*.json; do
      [ -e "$record" ] && warm_domains+=("$(basename "$record" .json)")
    done
  fi
  for domain in $(virsh list --all --name | grep "^garm-edge-${controller:-none}-" || true) \
    ${warm_domains[@]+"${warm_domains[@]}"}; do
    virsh destroy "$domain" >/dev/null 2>&1 || true
    virsh undefine --remove-all-storage --nvram "$domain" >/dev/null 2>&1 || true
  done
  if [ -n "$made_network" ]; then
    virsh net-destroy "$network" >/dev/null 2>&1 || true
    virsh net-undefine "$network" >/dev/null 2>&1 || true
  fi
  for filter in garm-edge-source-ip garm-edge-source-ip-{mac,arp-mac,arp-ip,ipv4}; do
    virsh nwfilter-undefine "$filter" >/dev/null 2>&1 || true  # refused while in use
  done
  if [ -n "$made_pool" ]; then
    virsh pool-destroy "$storage_pool" >/dev/null 2>&1 || true
    virsh pool-undefine "$storage_pool" >/dev/null 2>&1 || true
    rm -rf "$pool_dir" "$pulled_dir" "$caches_dir"
  fi
  if [ -n "${GARM_EDGE_KEEP_WORK:-}" ]; then echo "work directory kept: $work"; else rm -rf "$work"; fi
}
system_cleanup() {
  if declare -F test_cleanup >/dev/null; then test_cleanup; fi
  vm_fixture_cleanup
}
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$here/lib.sh"
vm_helpers() { /usr/bin/python3 "$here/vm_helpers.py" "$@"; }
# shellcheck source-path=SCRIPTDIR source=../../scripts/lib/agent-toml.sh
. "$here/../../scripts/lib/agent-toml.sh"
# shellcheck source-path=SCRIPTDIR source=../../scripts/lib/agent-ready.sh
. "$here/../../scripts/lib/agent-ready.sh"

stamp() { date +%s.%N; }
seconds_since() { awk -v a="$1" -v b="$(stamp)" 'BEGIN { printf "%.1f", b - a }'; }

# ---- base image and storage pool ------------------------------------------------------------
image_cache=${GARM_EDGE_IMAGE_CACHE:-/var/cache/garm-edge-vmtest}
image_started=$(stamp)
if [ -n "${vm_blank_base:-}" ]; then
  image_cache=$work/blank-base
  mkdir -p "$image_cache"
  qemu-img create -q -f qcow2 "$image_cache/$image_file" 64M
  echo "base image: a blank 64 MiB disk, nothing on it to boot"
else
  "$here/build_guest_image.sh" "$image_cache" "$image_arch"
  echo "base image ready in $(seconds_since "$image_started") s: $image_cache/$image_file"
fi
claim_test_host "$vm_name"
made_pool=1
mkdir -p "$pool_dir" && chmod 0755 "$pool_dir"
if [ -z "${vm_pulled_image:-}" ]; then
  cp --sparse=always "$image_cache/$image_file" "$pool_dir/$base_volume"
fi
virsh pool-define-as "$storage_pool" dir --target "$pool_dir" >/dev/null
virsh pool-start "$storage_pool" >/dev/null

# ---- the guests' NAT network ----------------------------------------------------------------
gateway=$vm_subnet.1
cat > "$work/net.xml" <<XML
<network>
  <name>$network</name>
  <forward mode='nat'/>
  <bridge name='$bridge' stp='on' delay='0'/>
  <ip address='$gateway' netmask='255.255.255.0'>
    <dhcp><range start='$vm_subnet.100' end='$vm_subnet.200'/></dhcp>
  </ip>
</network>
XML
made_network=1
virsh net-define "$work/net.xml" >/dev/null
virsh net-start "$network" >/dev/null

# ---- fake garm: HTTPS on loopback, its own CA (the bootstrap's ca-cert-bundle) --------------
mkdir -p "$work/garm-pki"
(
  cd "$work/garm-pki" || exit 1
  openssl ecparam -name prime256v1 -genkey -noout -out ca.key
  openssl req -x509 -new -key ca.key -sha256 -days 2 -subj "/CN=fake garm CA" \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign" -out ca.crt
  openssl ecparam -name prime256v1 -genkey -noout -out server.key
  openssl req -new -key server.key -subj "/CN=localhost" -out server.csr
  printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n' > server.ext
  openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 2 -sha256 \
    -extfile server.ext -out server.crt
) 2>/dev/null
echo '{}' > "$work/garm-instances.json"
mkdir -p "$work/downloads"
if [ -n "${vm_pulled_image:-}" ]; then  # a publisher's image server, as cloud images are served
  cp --sparse=always "$image_cache/$image_file" "$work/downloads/$image_file"
  (cd "$work/downloads" && sha256sum "$image_file" > SHA256SUMS)
fi
: > "$work/garm.log"
/usr/bin/python3 "$here/../support/fake_garm.py" --cert "$work/garm-pki/server.crt" \
  --key "$work/garm-pki/server.key" --port-file "$work/garm.port" --log "$work/garm.log" \
  --instances "$work/garm-instances.json" --downloads "$work/downloads" {test_host_lock}>&- &
fake_garm_pid=$!
for _ in $(seq 100); do [ -s "$work/garm.port" ] && break; sleep 0.1; done
fake_garm_url="https://localhost:$(cat "$work/garm.port")"
echo "fake garm listening at $fake_garm_url"

# Adds (or replaces) an instance in the fake garm: TOKEN, then a JSON object.
garm_instance() {
  vm_helpers set-garm-instance "$work/garm-instances.json" "$1" "$2"
}

# ---- the agent, as it runs in production ----------------------------------------------------
# TCG unless asked for KVM: on nested hosts /dev/kvm may exist and still fail (measured here:
# QEMU aborts on MSR 0x10a with host-passthrough, and with that feature off the guest crawls).
# KVM runs only guests of the host's own architecture.
virt_type=qemu
if [ -n "${GARM_EDGE_VM_KVM:-}" ] && [ "$image_arch" = "$(dpkg --print-architecture)" ]; then virt_type=kvm; fi
controller=$(cat /proc/sys/kernel/random/uuid)  # this run's own: cleanup touches no other
pool_id=0f1e2d3c-4b5a-4968-8776-a5b4c3d2e1f0
"$agent" pki init --dir "$work/pki" --dns localhost >/dev/null
image_location_toml() {
  [ -n "${vm_pulled_image:-}" ] || return 0
  printf '[pull]\ndirectory = "%s"\nca_bundle = "%s"\n' "$pulled_dir" "$work/garm-pki/ca.crt"
}
image_source_toml() {
  if [ -z "${vm_pulled_image:-}" ]; then
    echo "base_volume = \"$base_volume\""
    return
  fi
  echo "source = \"$fake_garm_url/downloads/$image_file\""
  echo "checksums = \"$fake_garm_url/downloads/SHA256SUMS\""
}
cat > "$work/agent.toml" <<TOML
[agent]
id = "$vm_name"
state_dir = "$work/state"
[libvirt]
uri = "qemu:///system"
storage_pool = "$storage_pool"
network = "$network"
call_timeout_seconds = 60
virt_type = "$virt_type"
$(agent_api_toml "$work/pki" "$controller")
[guests]
# The network's gateway, a free port, guests relayed to the fake garm.
address = ""
port = 0
mode = "relay"
anti_spoofing = "auto"
# The test's fake garm may hold an answer while a second guest probes the first one.
relay_timeout_seconds = 600
addresses = "${vm_guest_addresses:-}"
address_quarantine_seconds = ${vm_address_quarantine:-120}
$(image_location_toml)
[[images]]
name = "debian-12"
$(image_source_toml)
os_type = "linux"
os_name = "debian"
os_version = "12"
arch = "$image_arch"
[[flavors]]
name = "small"
vcpus = 1
memory_mib = 1024
disk_gib = 4
TOML
if [ -n "${vm_fixture_extra_config:-}" ]; then printf '%s\n' "$vm_fixture_extra_config" >> "$work/agent.toml"; fi

# Starts `garm-edge-agent serve` with its log in LOGFILE; sets agent_pid, api_port, guest_url.
start_agent() {
  local log=$1
  rm -f "$work/agent.ready"
  "$agent" serve --config "$work/agent.toml" --ready-file "$work/agent.ready" 2> "$log" \
    {test_host_lock}>&- &
  agent_pid=$!
  wait_for_agent_ready "$agent_pid" "$work/agent.ready" "$log" || exit 1
  write_provider_config
  if [ -n "${vm_pulled_image:-}" ]; then wait_for "the agent to pull the base image" 300 image_ready; fi
}
image_ready() {  # the first image's state in GET /v1/images; a failed pull ends the test
  local state
  state=$(control_root images | json_field 0.state 2>/dev/null) || return 1
  [ "$state" != failed ] || fail "the pull failed: $(control_root images)"
  [ "$state" = ready ]
}
restart_agent() {  # LOG: stops the agent (SIGTERM) and starts it with agent.toml as it is now
  if [ -n "$agent_pid" ]; then
    kill "$agent_pid" 2>/dev/null || true
    wait "$agent_pid" 2>/dev/null || true
  fi
  start_agent "$1"
}

write_provider_config() {
  provider_toml "$vm_name" "$api_port" "$work/pki" "$work/sessions" > "$work/provider.toml"
}

# The agent's control API (what an operator sees), for PATH under this controller.
control() {
  curl -sS --cacert "$work/pki/ca.crt" --cert "$work/pki/clients/garm.crt" \
    --key "$work/pki/clients/garm.key" "https://localhost:$api_port/v1/controllers/$controller/$1"
}

# The agent's control API outside any controller (GET /v1/PATH): warm guests, capacity.
control_root() {
  curl -sS --cacert "$work/pki/ca.crt" --cert "$work/pki/clients/garm.crt" \
    --key "$work/pki/clients/garm.key" "https://localhost:$api_port/v1/$1"
}

# garm's exec of the provider: GARM_* and garm's proxy variables only (no PATH, no HOME), stdin from
# $stdin_file. Sets $out (stdout) and $last_status; never fails itself.
garm() {
  local command=$1
  shift
  last_status=0
  out=$(env -i ${garm_proxy_env[@]+"${garm_proxy_env[@]}"} GARM_COMMAND="$command" GARM_CONTROLLER_ID="$controller" \
    GARM_PROVIDER_CONFIG_FILE="$work/provider.toml" GARM_INTERFACE_VERSION=v0.1.0 "$@" \
    "$provider" < "${stdin_file:-/dev/null}") || last_status=$?
}

# A BootstrapInstance as garm sends it: NAME, TOKEN, then the runner_install_template script
# (garm's wrapper). URLs point at the fake garm; its CA is the ca-cert-bundle.
bootstrap_json() {
  vm_helpers bootstrap-json "$1" "$2" "$3" "$fake_garm_url" "$work/garm-pki/ca.crt" "$pool_id" "$image_arch" \
    "${guest_shape:-{\}}"
}

# garm's CreateInstance of NAME with garm's wrapper for TOKEN, whose instance the fake garm
# knows as INSTANCE_DATA (vm_helpers garm-instance-data); $guest_shape (a JSON object) adds
# pool-shape extra specs. Sets $out, $created (when garm called
# the provider) and $create_seconds; fails the test unless the provider succeeded.
create_guest() {  # NAME TOKEN INSTANCE_DATA
  local name=$1 token=$2
  garm_instance "$token" "$3"
  bootstrap_json "$name" "$token" "$(garm_wrapper "$token")" > "$work/$name.json"
  created=$(stamp)
  stdin_file=$work/$name.json garm CreateInstance GARM_POOL_ID="$pool_id"
  expect "$last_status" 0 "CreateInstance of $name: $out"
  create_seconds=$(seconds_since "$created")
}

# garm's Linux wrapper (linux_wrapper.tmpl) in short: garm's URLs and the token substituted,
# report `installing`, fetch the install script from the metadata endpoint, run it.
garm_wrapper() {
  local token=$1
  cat <<SH
#!/bin/bash
set -ex
set -o pipefail
CALLBACK_URL="$fake_garm_url/api/v1/callbacks"
METADATA_URL="$fake_garm_url/api/v1/metadata"
BEARER_TOKEN="$token"
function call() {
  PAYLOAD="\$1"
  curl --retry 5 --retry-delay 5 --retry-connrefused --fail -s -X POST -d "\${PAYLOAD}" \\
    -H 'Accept: application/json' -H "Authorization: Bearer \${BEARER_TOKEN}" "\${CALLBACK_URL}/status" ||
    echo "failed to call home: exit code (\$?)"
}
function fail() { call "{\"status\": \"failed\", \"message\": \"\$1\"}"; exit 1; }
call '{"status": "installing", "message": "fetching the install script"}'
CODE=\$(curl -s -o /tmp/real-install.sh -w '%{http_code}' -H "Authorization: Bearer \${BEARER_TOKEN}" "\${METADATA_URL}/install-script/")
[ "\$CODE" = 200 ] || fail "failed to fetch install script (HTTP \$CODE)"
chmod +x /tmp/real-install.sh
/tmp/real-install.sh
rm -f /tmp/real-install.sh
SH
}

# ---- helpers the VM-tier scripts share ------------------------------------------------------
fail() {
  echo "FAILED: $*"
  for log in "$work"/agent*.log "$work"/console-*.log; do
    [ -f "$log" ] && { echo "---- $log (last 30 lines)"; tail -n 30 "$log"; }
  done
  echo "---- fake garm requests"
  vm_helpers garm-log-summary "$work/garm.log" || true
  echo "FAILED: $*"  # again, last: CI shows only the end of a failed test's output
  exit 1
}
expect() { [ "$1" = "$2" ] || fail "$3 (got '$1', wanted '$2')"; }
domain_of() { echo "garm-edge-$controller-$1"; }
json_field() {  # DOTTED.PATH of the JSON on stdin (list indexes are numbers)
  vm_helpers json-field "$1"
}
# The fake garm's requests carrying TOKEN, one line each: "TIME PATH BODY".
garm_requests() {
  vm_helpers garm-requests "$work/garm.log" "$1"
}
wait_for() {  # DESCRIPTION SECONDS COMMAND...
  local what=$1 seconds=$2 started
  shift 2
  started=$(date +%s)
  until "$@"; do
    [ $(($(date +%s) - started)) -lt "$seconds" ] || fail "timed out after ${seconds}s waiting for $what"
    sleep 2
  done
}
# garm's install script in short: report, send system-info from /etc/os-release, end `idle`.
install_script() {  # TOKEN AGENT_ID [EXTRA COMMANDS]
  cat <<SH
#!/bin/bash
set -euo pipefail
CALLBACK_URL="@GARM_URL@/api/v1/callbacks"
post() {
  curl -fsS --retry 5 --retry-delay 2 --retry-connrefused -X POST -H 'Content-Type: application/json' \\
    -H "Authorization: Bearer $1" -d "\$2" "\$CALLBACK_URL\$1"
}
post /status '{"status": "installing", "message": "configuring runner"}'
${3:-}
. /etc/os-release
post /system-info/ "{\"os_name\": \"\$NAME\", \"os_version\": \"\$VERSION_ID\", \"agent_id\": $2}"
post /status '{"status": "idle", "message": "runner successfully installed", "agent_id": $2}'
SH
}
