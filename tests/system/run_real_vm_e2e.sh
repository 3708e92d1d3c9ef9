#!/usr/bin/env bash
# System tier, end to end on a real hypervisor: Debian 12 guests with cloud-init boot under
# QEMU (TCG here) on a libvirt NAT network, created by garm-provider-edge run exactly as garm
# runs it, through `garm-edge-agent serve`. Each guest fetches its NoCloud seed from the agent,
# runs garm's wrapper, which reports through the agent's relay to a fake garm over HTTPS, and
# ends `idle`. A second guest tries to read the first one's seed, from its own address and from
# the first one's, and tries to take the first one's address over ARP; it also tries a warm
# guest's assignment with that guest's token, from its own address and from the warm guest's.
# The warm guest ([[warm]] count = 1) is then bound by a third CreateInstance and reports idle;
# with [[warm]] removed, the agent retires the warm guest it made next. Two saved warm guests
# ([[warm]] saved = 2) boot, are saved to disk (QEMU gone, memory files 0600) and survive an
# agent restart; garm's create restores one, which reaches idle with its clock within 2 s of the
# host's, a renewed lease on its reserved address, its CRNG reseeded and no second boot; the
# other's memory file damaged, the next create goes cold and that
# guest is removed. Before all that, the
# agent is killed with SIGKILL in the middle of a create, and reconcile must leave nothing
# behind. The base image is pulled by the agent from an HTTPS image server (a SHA256SUMS file
# names its digest); a new version published while guests run is pulled by the fleet command
# (`garm-provider-edge images pull`), the next guest backs onto it and the running ones keep the
# old base.
# Prints the boot-to-seed and boot-to-idle times. Exit 77 (skipped) when not root.
# Usage: run_real_vm_e2e.sh BUILD_DIR
set -euo pipefail
build=$(cd "$1" && pwd)
deadline_seconds=${GARM_EDGE_VM_DEADLINE:-900}

console_pids=()
fixture_warm_guests=1
vm_pulled_image=1
test_cleanup() {
  for pid in ${console_pids[@]+"${console_pids[@]}"}; do kill "$pid" 2>/dev/null || true; done
}
# shellcheck source-path=SCRIPTDIR source=vm_fixture.sh
. "$(dirname "$0")/vm_fixture.sh"

leftovers() {  # what is left of instances named like NAME: domain, overlay, reservation, record
  local name=$1 found=()
  virsh list --all --name | grep -q -- "$name" && found+=(domain)
  compgen -G "$pool_dir/*$name*" >/dev/null && found+=(overlay)
  virsh net-dumpxml "$network" | grep -q "<host " && found+=(reservation)
  grep -rqs "\"$name\"" "$work/state" && found+=(record)
  echo "${found[*]}"
}

# The second guest's pool asks for a root disk 2 GiB larger than its flavor's and a scratch disk.
cat >> "$work/agent.toml" <<TOML
[extra_specs]
max_root_disk_gib = 8
[[scratch_pools]]
name = "scratch"
storage_pool = "$storage_pool"
max_disk_gib = 2
TOML
start_agent "$work/agent-1.log"
echo "agent serving on 127.0.0.1:$api_port; guests reach it at $guest_url"
case "$guest_url" in "http://$gateway:"*) ;; *) fail "the guest service is not on the gateway address" ;; esac

# ---- SIGKILL in the middle of a real create, then garm's retry ------------------------------
echo "== kill -9 while CreateInstance is in flight"
garm_instance token-crash '{}'
bootstrap_json garm-crash00001 token-crash "$(garm_wrapper token-crash)" > "$work/crash.json"
stdin_file=$work/crash.json garm CreateInstance GARM_POOL_ID="$pool_id" &
create_pid=$!
for _ in $(seq 1000); do compgen -G "$pool_dir/*garm-crash00001*" >/dev/null && break; sleep 0.01; done
kill -9 "$agent_pid"
wait "$agent_pid" 2>/dev/null || true
wait "$create_pid" 2>/dev/null || true
echo "killed the agent with these in place: $(leftovers garm-crash00001)"
[ -n "$(leftovers garm-crash00001)" ] || fail "the kill landed before the create had started"
start_agent "$work/agent-2.log"
expect "$(leftovers garm-crash00001)" "" "reconcile after the restart leaves nothing of the interrupted create"
grep -q "rolled back the interrupted create of garm-crash00001" "$work/agent-2.log" ||
  fail "the restarted agent did not report the rollback"
garm DeleteInstance GARM_INSTANCE_ID=garm-crash00001
expect "$last_status" 0 "garm's DeleteInstance by name after the crash"
stdin_file=$work/crash.json garm CreateInstance GARM_POOL_ID="$pool_id"
expect "$last_status" 0 "garm's retried CreateInstance with the same name"
expect "$(printf '%s' "$out" | json_field status)" running "the retried instance runs"
garm DeleteInstance GARM_INSTANCE_ID=garm-crash00001
expect "$(leftovers garm-crash00001)" "" "DeleteInstance removes the retried instance"
echo "reconcile rolled the interrupted create back; garm's delete-then-create retry succeeded"

# ---- a warm guest, booted ahead of demand ---------------------------------------------------
cp "$work/agent.toml" "$work/agent-without-warm.toml"
# Room for three guests: the warm one and the two below; none is replaced while they boot.
cat >> "$work/agent.toml" <<TOML
[[warm]]
controller = "$controller"
image = "debian-12"
flavor = "small"
count = 1
ready_timeout_seconds = 86400
[capacity]
max_instances = 3
[[api.clients]]
identity = "operator"
controllers = ["*"]
TOML
"$agent" pki issue-client operator --dir "$work/pki" >/dev/null
restart_agent "$work/agent-3.log"
# The operator reads /metrics: it names every controller's pools, so garm's client may not.
agent_metrics() {
  curl -sS --cacert "$work/pki/ca.crt" --cert "$work/pki/clients/operator.crt" \
    --key "$work/pki/clients/operator.key" "https://localhost:$api_port/metrics"
}
read_warm_token() {  # from its record, once the agent has written its seed there
  local record
  record=$(compgen -G "$work/state/instances/garm-edge-6761726d-*.json" | head -1) &&
    warm_token=$(vm_helpers warm-token "$record" 2>/dev/null)
}
wait_for "the agent to start a warm guest" 120 read_warm_token
warm_field() { control_root warm | json_field "0.$1" 2>/dev/null; }
# Listed once libvirt has its domain: a warm guest whose create is under way is listed before
# its domain is defined (virsh then answers "failed to get domain").
listed_warm() {
  warm_uuid=$(warm_field provider_id) && warm_address=$(warm_field address) &&
    virsh dominfo "$warm_uuid" >/dev/null 2>&1
}
wait_for "the warm guest in GET /v1/warm" 60 listed_warm
warm_mac=$(virsh domiflist "$warm_uuid" | awk '$5 ~ /:/ {print $5; exit}')
warm_url=$guest_url/warm/assignment
echo "warm guest $warm_uuid at $warm_address: $(warm_field state)"

# ---- two real guests ------------------------------------------------------------------------
echo "== two Debian 12 guests with cloud-init"
token1=jwt-first-$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')
token2=jwt-second-$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')
# The first guest runs in garm's agent mode: it opens garm-agent's WebSocket at the AGENT_URL
# garm rendered (which the relay rewrites to its own /agent), with the agent JWT garm issued it,
# sends a text frame and a ping, and reports what came back.
agent_token1=$(vm_helpers agent-token garm-guest00001)
agent_socket=$(cat <<SH
AGENT_URL="@AGENT_URL@"
AGENT_TOKEN="@AGENT_TOKEN@"
echo '$(vm_helpers ws-client-program)' | base64 -d > /tmp/ws_client.py
socket=\$({ /usr/bin/python3 /tmp/ws_client.py "\$AGENT_URL" 0.0.0.0 "\$AGENT_TOKEN" \
  --send 'hello from garm-guest00001' --ping || echo '{"status": "client failed"}'; } | base64 -w0)
post /status "{\"status\": \"installing\", \"message\": \"agent socket \$AGENT_URL: \$socket\"}"
# garm's CA (the bootstrap's ca-cert-bundle), added early in boot: the fake garm's certificate
# verifies against the system's CA directory and bundle.
echo '$(base64 -w0 "$work/garm-pki/server.crt")' | base64 -d > /tmp/garm-server.crt
ca=untrusted
if openssl verify -CApath /etc/ssl/certs /tmp/garm-server.crt >/dev/null 2>&1 &&
  openssl verify -CAfile /etc/ssl/certs/ca-certificates.crt /tmp/garm-server.crt >/dev/null 2>&1; then
  ca=trusted
fi
post /status "{\"status\": \"installing\", \"message\": \"garm's CA: \$ca\"}"
# Who runs this: with nothing to install first, garm-edge's early unit, not cloud-final.
post /status "{\"status\": \"installing\", \"message\": \"run by \$(cut -d: -f3- /proc/self/cgroup | head -1)\"}"
SH
)
# The first guest's `idle` is answered only once the second guest has made its attempts: until
# garm answers, its seed stays open, so a refusal is the identity check and not a closed door.
create_guest garm-guest00001 "$token1" "$(vm_helpers garm-instance-data \
  "$(install_script "$token1" 101 "$agent_socket")" "$work/second-guest-done" "$agent_token1")"
created1=$created create1_seconds=$create_seconds
expect "$(printf '%s' "$out" | json_field status)" running "the first guest runs"
address1=$(printf '%s' "$out" | json_field addresses.0.address)
domain1=$(domain_of garm-guest00001)
virsh dumpxml "$domain1" > "$work/domain1.xml"
seed1=$(sed -n 's/.*ds=nocloud-net;s=\([^<]*\)<.*/\1/p' "$work/domain1.xml")
[ -n "$seed1" ] || fail "no seed URL in the first domain's SMBIOS serial"
echo "guest 1: $domain1 at $address1, created in ${create1_seconds}s"
# Devices a runner never uses are not there, though QEMU's libvirt adds them by default.
grep -q "<controller type='usb' index='0' model='none'" "$work/domain1.xml" ||
  fail "the first guest has a USB controller: $(grep -o "<controller type='usb'[^>]*>" "$work/domain1.xml")"
grep -q "<memballoon model='none'" "$work/domain1.xml" || fail "the first guest has a memory balloon"
grep -q "<rom enabled='no'/>" "$work/domain1.xml" || fail "the first guest's NIC has a boot ROM"
if [ "$image_arch" = amd64 ] && [ "$virt_type" = kvm ]; then
  grep -q "<feature policy='disable' name='vmx'/>" "$work/domain1.xml" ||
    fail "the first guest's CPU offers nested virtualization though its pool did not ask for it"
fi

# The second guest's install script makes its attempts on the first guest and reports them.
probe=$(cat <<SH
peer_seed=\$(curl -s -o /dev/null -w '%{http_code}' --max-time 15 '${seed1}meta-data' || true)
dev=\$(ip -o -4 route show default | awk '{print \$5; exit}')
mac=\$(cat /sys/class/net/\$dev/address)
# Claim the first guest's address over ARP (gratuitous replies) and send from it.
sudo sysctl -qw net.ipv4.conf.all.arp_ignore=8 net.ipv4.conf.all.arp_announce=2
echo '$(vm_helpers arp-claim-program)' | base64 -d | sudo /usr/bin/python3 - "\$dev" "\$mac" '$address1'
sudo ip addr add '$address1/32' dev "\$dev"
spoofed=\$(curl -s -o /dev/null -w '%{http_code}' --max-time 15 --interface '$address1' '${seed1}meta-data' || true)
sudo ip addr del '$address1/32' dev "\$dev"
# The warm guest's assignment, with its token: from here, then from its address.
warm=(-s -o /dev/null -w '%{http_code}' --max-time 15 -H 'Authorization: Bearer $warm_token' '$warm_url')
peer_warm=\$(curl "\${warm[@]}" || true)
echo '$(vm_helpers arp-claim-program)' | base64 -d | sudo /usr/bin/python3 - "\$dev" "\$mac" '$warm_address'
sudo ip addr add '$warm_address/32' dev "\$dev"
spoofed_warm=\$(curl --interface '$warm_address' "\${warm[@]}" || true)
sudo ip addr del '$warm_address/32' dev "\$dev"
root_disk=\$(lsblk -bdno SIZE /dev/vda)
root_fs=\$(df -B1 --output=size / | tail -1 | tr -d ' ')
scratch=/dev/disk/by-id/virtio-garm-scratch-0
scratch_disk=\$(lsblk -bdno SIZE \$scratch || echo none)
scratch_fs=\$(sudo blkid -o value -s TYPE \$scratch || echo unformatted)
scratch_fstab=\$(awk '\$1 == "'"\$scratch"'" {print \$2}' /etc/fstab)
scratch_mounted=\$(findmnt -no TARGET \$(readlink -f \$scratch) | head -1 || true)
post /status "{\"status\": \"installing\", \"message\": \"shape: root disk \$root_disk root fs \$root_fs scratch \$scratch_disk \$scratch_fs \$scratch_fstab mounted at \${scratch_mounted:-none}\"}"
post /status "{\"status\": \"installing\", \"message\": \"probe: peer seed HTTP \$peer_seed, from the peer address HTTP \$spoofed; warm assignment HTTP \$peer_warm, from its address HTTP \$spoofed_warm\"}"
SH
)
guest_shape='{"root_disk_gib": 6, "scratch_disks": [{"pool": "scratch", "size_gib": 1}]}' \
  create_guest garm-guest00002 "$token2" "$(vm_helpers garm-instance-data "$(install_script "$token2" 102 "$probe")")"
create2_seconds=$create_seconds
address2=$(printf '%s' "$out" | json_field addresses.0.address)
domain2=$(domain_of garm-guest00002)
echo "guest 2: $domain2 at $address2, created in ${create2_seconds}s"
for domain in "$domain1" "$domain2"; do
  tty=$(virsh ttyconsole "$domain")
  cat "$tty" > "$work/console-$domain.log" 2>/dev/null &
  console_pids+=($!)
done

# The domain boots from a qcow2 overlay whose backing file is the base the agent pulled.
pulled_base() { "$agent" images list --config "$work/agent.toml" | awk '$1 == "debian-12" && $2 == "ready" {print $4}'; }
base_of() { qemu-img info -U --output=json "$1" | json_field backing-filename; }
base1=$(pulled_base)
case "$base1" in "$pulled_dir"/garm-image-debian-12-*.qcow2) ;; *) fail "no pulled base listed: $("$agent" images list --config "$work/agent.toml")" ;; esac
overlay1=$(sed -n "s/.*<source file='\([^']*\)'.*/\1/p" "$work/domain1.xml" | head -1)
case "$overlay1" in "$pool_dir"/*.qcow2) ;; *) fail "the first guest's disk is not an overlay in the pool: $overlay1" ;; esac
expect "$(base_of "$overlay1")" "$base1" "the first guest's overlay backs onto the pulled base"
expect "$(stat -c %a "$base1")" 444 "the pulled base is read-only"
echo "guest 1 boots from $overlay1, backed by the pulled $base1"

# ---- the publisher's next build, pulled while both guests boot from the old one -------------
echo "== a new version of the image"
qemu-img convert -f qcow2 -O qcow2 -o cluster_size=131072 "$work/downloads/$image_file" "$work/next.qcow2"
mv "$work/next.qcow2" "$work/downloads/$image_file"
(cd "$work/downloads" && sha256sum "$image_file" > SHA256SUMS)
# The operator's fleet command, with the operator's certificate (every controller's agent).
sed 's#clients/garm\.#clients/operator.#' "$work/provider.toml" > "$work/operator.toml"
fleet_pull=$(env -i "$provider" images pull debian-12 --config "$work/operator.toml" 2>&1) ||
  fail "garm-provider-edge images pull: $fleet_pull"
echo "fleet pull: $fleet_pull"
rotated() { base2=$(pulled_base) && [ -n "$base2" ] && [ "$base2" != "$base1" ]; }
wait_for "the agent to pull the new version" 300 rotated
echo "new base $base2"
[ -f "$base1" ] || fail "the old base was removed while guests back onto it"

second_reported() { garm_requests "$token2" | grep -q 'probe: '; }
wait_for "the second guest's probe report" "$deadline_seconds" second_reported
probe_report=$(garm_requests "$token2" | grep -o 'probe: [^"]*')
echo "second guest: $probe_report"
neighbour=$(ip neigh show "$address1" dev "$bridge" | awk '{print $3}')
mac1=$(sed -n "s/.*<mac address='\([^']*\)'.*/\1/p" "$work/domain1.xml" | head -1)
touch "$work/second-guest-done"
shape_report=$(garm_requests "$token2" | grep -o 'shape: [^"]*' | head -1)
echo "second guest: $shape_report"
read -r _ _ _ root_disk _ _ root_fs _ scratch_disk scratch_fs scratch_fstab _ _ scratch_mounted <<<"$shape_report"
expect "$root_disk $scratch_disk $scratch_fs $scratch_fstab $scratch_mounted" \
  "$((6 << 30)) $((1 << 30)) ext4 /mnt/scratch /mnt/scratch" \
  "the second guest has its pool's 6 GiB root disk (the flavor's 4 + 2) and a 1 GiB ext4 scratch disk mounted at /mnt/scratch"
[ "${root_fs:-0}" -gt $((5 << 30)) ] || fail "the second guest's root filesystem did not grow: $root_fs bytes"
expect "$probe_report" "probe: peer seed HTTP 404, from the peer address HTTP 000; warm assignment HTTP 404, from its address HTTP 000" \
  "the second guest cannot read the first one's seed nor the warm guest's assignment, from its own address or theirs"
expect "$neighbour" "$mac1" "the host still reaches the first guest's address at the first guest's MAC"
# A warm guest still booting (a loaded host) has no neighbour entry yet: wait until it answers,
# then whoever claimed its address last shows.
warm_neighbour() {
  ping -c1 -W1 "$warm_address" >/dev/null 2>&1 || true
  [ -n "$(ip neigh show "$warm_address" dev "$bridge" | awk '{print $3}')" ]
}
wait_for "the warm guest's neighbour entry" "$deadline_seconds" warm_neighbour
expect "$(ip neigh show "$warm_address" dev "$bridge" | awk '{print $3}')" "$warm_mac" \
  "the host still reaches the warm guest's address at its MAC"

reported_idle() { garm_requests "$1" | grep -q 'callbacks/status {"status": "idle"'; }
both_idle() { reported_idle "$token1" && reported_idle "$token2"; }
wait_for "both guests to report idle" "$deadline_seconds" both_idle
[ -f "$base1" ] || fail "the old base was removed while guests back onto it"
echo "both guests reached idle on the old base, after the new version was in place"

# ---- garm's create binds the warm guest -----------------------------------------------------
warm_ready() { [ "$(warm_field state)" = ready ]; }
wait_for "the warm guest to be ready" "$deadline_seconds" warm_ready
token3=jwt-third-$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')
create_guest garm-warm00003 "$token3" "$(vm_helpers garm-instance-data "$(install_script "$token3" 103)")"
created3=$created bind_seconds=$create_seconds
expect "$(printf '%s' "$out" | json_field provider_id)" "$vm_name:$warm_uuid" "garm's instance is the warm guest"
expect "$(printf '%s' "$out" | json_field addresses.0.address)" "$warm_address" "the bound guest keeps its address"
wait_for "the bound warm guest to report idle" "$deadline_seconds" reported_idle "$token3"
idle3=$(garm_requests "$token3" | awk '/callbacks\/status {"status": "idle"/ {print $1; exit}')
echo "warm guest bound in ${bind_seconds}s; idle $(awk -v a="$created3" -v b="$idle3" 'BEGIN { printf "%.1f", b - a }')s after CreateInstance"

# ---- what garm and the agent saw ------------------------------------------------------------
requests1=$(garm_requests "$token1")
for expected in '/api/v1/callbacks/status .*fetching the install script' \
  '/api/v1/metadata/install-script/ ' '/api/v1/callbacks/status .*configuring runner' \
  '/api/v1/callbacks/system-info/ {"os_name": "Debian GNU/Linux", "os_version": "12", "agent_id": 101}' \
  '/api/v1/callbacks/status {"status": "idle"'; do
  printf '%s\n' "$requests1" | grep -q "$expected" || fail "the fake garm did not receive $expected: $requests1"
done
printf '%s\n' "$requests1" | grep -q "garm's CA: trusted" ||
  fail "the first guest does not trust garm's CA: $(printf '%s\n' "$requests1" | grep -o "garm's CA: [a-z]*")"
echo "guest 1 verifies the fake garm's certificate: garm's CA was added to its trust store early in boot"
printf '%s\n' "$requests1" | grep -q 'run by /system.slice/garm-edge-runner-start.service' ||
  fail "guest 1's install script did not run in the early unit: $(printf '%s\n' "$requests1" | grep -o 'run by [^"]*')"
echo "guest 1's install script ran in garm-edge-runner-start.service, ahead of cloud-final"
strangers=$(vm_helpers count-strangers "$work/garm.log" "$token1" "$token2" "$token3" token-crash \
  "$agent_token1")
expect "$strangers" 0 "every request reached the fake garm with its guest's bearer token"
# garm-agent's socket, as the guest saw it and as garm saw it.
socket_report=$(printf '%s\n' "$requests1" | grep -o 'agent socket [^ ]*: [A-Za-z0-9+/=]*' | head -1)
[ -n "$socket_report" ] || fail "the first guest did not report its agent socket: $requests1"
expect "${socket_report%%: *}" "agent socket $guest_url/agent" "the guest's AGENT_URL is the relay's"
socket_seen=$(printf '%s' "${socket_report##*: }" | base64 -d)
echo "guest 1's garm-agent socket through the relay: $socket_seen"
for field in status:101 accept_ok:True garm_ping:True echo.0:"hello from garm-guest00001" pong:True; do
  expect "$(printf '%s' "$socket_seen" | json_field "${field%%:*}")" "${field#*:}" "the guest's socket: ${field%%:*}"
done
garm_requests "$agent_token1" | grep -q ' /agent ' || fail "garm saw no upgrade with guest 1's agent token"
vm_helpers agent-frames "$work/garm.log" | grep -qx 'hello from garm-guest00001' ||
  fail "garm did not receive the guest's frame on /agent"
# The agent records a report once garm has answered it, a moment after garm logged it.
agent_saw_idle() { [ "$(control instances/garm-guest00001/guest | json_field runner_status)" = idle ]; }
wait_for "the agent to record the first guest's idle" 60 agent_saw_idle
guest1=$(control instances/garm-guest00001/guest)
expect "$(printf '%s' "$guest1" | json_field access_closed)" True "the first guest's access closed after idle"
# Its start, phase by phase, in order (docs/observability.md), in its details and in /metrics.
phases=$(printf '%s' "$guest1" | python3 -c '
import json, sys
phases = json.load(sys.stdin)["startup"]["phases"]
seconds = [p["after_seconds"] for p in phases]
print(" ".join(p["phase"] for p in phases), "in-order" if seconds == sorted(seconds) else "out-of-order")
print(" ".join("%s=%.1f" % (p["phase"], p["after_seconds"]) for p in phases), file=sys.stderr)')
expect "$phases" "received defined started seed_fetched first_status idle in-order" \
  "the first guest's start-up timeline has every phase, in order"
startup_metrics=$(agent_metrics | grep '^garm_edge_startup') || fail "no start-up series in /metrics"
for phase in defined started seed_fetched first_status idle; do
  printf '%s\n' "$startup_metrics" | grep -q "^garm_edge_startup_phase_seconds_count{start=\"cold\".*phase=\"$phase\"} [1-9]" ||
    fail "no start-up histogram of phase $phase in /metrics"
done
printf '%s\n' "$startup_metrics" | grep -q '^garm_edge_startup_seconds_count{start="cold".*} [1-9]' ||
  fail "no whole start-up histogram in /metrics"
seed_served=$(agent_metrics | sed -n 's/^garm_edge_guest_requests_total{outcome="seed_served"} //p')
[ "${seed_served:-0}" -ge 6 ] || fail "the agent served ${seed_served:-0} seed files, wanted meta-data, user-data and vendor-data for both guests"
control 'events?instance=garm-guest00001' | grep -q "the guest fetched its seed from $address1" ||
  fail "no event shows the first guest fetching its seed from $address1"
lease=$(virsh domifaddr "$domain1" --source lease | awk '/ipv4/ {print $4}')
expect "${lease%/*}" "$address1" "the first guest's DHCP lease is its reserved address"
garm GetInstance GARM_INSTANCE_ID=garm-guest00001
expect "$(printf '%s' "$out" | json_field addresses.0.address)" "$address1" "GetInstance shows the guest's address"
expect "$(printf '%s' "$out" | json_field os_name)" "Debian GNU/Linux" "GetInstance shows the OS the guest reported"
seed_at=$(printf '%s' "$guest1" | json_field seed_served_at)
idle_at=$(garm_requests "$token1" | awk '/callbacks\/status {"status": "idle"/ {print $1; exit}')
to_seed=$(vm_helpers seconds-between "$seed_at" "$created1")
to_idle=$(awk -v a="$created1" -v b="$idle_at" 'BEGIN { printf "%.1f", b - a }')
echo "guest 1 (TCG, 1 vCPU, two guests booting at once): seed fetched ${to_seed}s and idle reported ${to_idle}s after CreateInstance was called"

# ---- delete: nothing left -------------------------------------------------------------------
garm DeleteInstance GARM_INSTANCE_ID=garm-guest00001
expect "$last_status" 0 "DeleteInstance of the first guest"
garm DeleteInstance GARM_INSTANCE_ID=garm-guest00002
expect "$last_status" 0 "DeleteInstance of the second guest"
garm DeleteInstance GARM_INSTANCE_ID=garm-warm00003
expect "$last_status" 0 "DeleteInstance of the bound warm guest"
# With room again, the pool starts the next warm guest, on the new base; without [[warm]], the
# agent retires it.
wait_for "the pool to start the next warm guest" 120 listed_warm
next_overlay=$(virsh domblklist "$warm_uuid" | awk '$2 ~ /\.qcow2$/ {print $2; exit}')
expect "$(base_of "$next_overlay")" "$base2" "the next guest backs onto the new version"
cp "$work/agent-without-warm.toml" "$work/agent.toml"
restart_agent "$work/agent-4.log"
warm_records() { compgen -G "$work/state/instances/garm-edge-6761726d-*.json"; }
retired() { [ "$(control_root warm)" = "[]" ] && ! warm_records >/dev/null && ! virsh dominfo "$warm_uuid" >/dev/null 2>&1; }
wait_for "the agent to retire the warm guest $warm_uuid" 120 retired
expect "$(leftovers "garm-edge-$controller-")" "" "DeleteInstance removes domains, overlays, reservations and records"
expect "$(compgen -G "$work/state/instances/*.json" || true)" "" "no instance record is left"
garm ListInstances GARM_POOL_ID="$pool_id"
expect "$out" "[]" "ListInstances of the emptied pool"
# ---- saved warm guests: memory on disk, restored on create ----------------------------------
echo "== saved warm guests"
cp "$work/agent.toml" "$work/agent-without-saved.toml"
# Room for three instances: a warm guest starts only with room for one more of its flavor
# beside it, so both saved ones start, yet no refill boots beside the restored guest.
cat >> "$work/agent.toml" <<TOML
[[warm]]
controller = "$controller"
image = "debian-12"
flavor = "small"
count = 0
saved = 2
ready_timeout_seconds = 86400
[capacity]
max_instances = 3
TOML
restart_agent "$work/agent-saved-1.log"
saved_guests() { control_root warm | python3 -c '
import json, sys
print(" ".join(g["provider_id"] for g in json.load(sys.stdin) if g["state"] == "saved"))'; }
two_saved() { [ "$(saved_guests | wc -w)" = 2 ]; }
wait_for "two warm guests to boot, get ready and be saved" "$deadline_seconds" two_saved
read -r saved_a saved_b <<< "$(saved_guests)"
for uuid in "$saved_a" "$saved_b"; do
  expect "$(virsh domstate "$uuid")" "shut off" "a saved guest's domain is shut off"
  pgrep -f "guest=$(virsh domname "$uuid")" >/dev/null && fail "a saved guest's QEMU still runs"
  # Not `| grep -q`: under pipefail its early exit can fail virsh with SIGPIPE.
  case "$(virsh dumpxml --inactive "$uuid")" in *"<genid>"*) ;; *) fail "a saved guest has no VM generation ID" ;; esac
done
memory_files=("$pool_dir"/*.memory)
expect "${#memory_files[@]}" 2 "one memory file per saved guest in the storage pool"
for file in "${memory_files[@]}"; do
  expect "$(stat -c %a "$file")" 600 "a memory file is readable by its owner only"
  echo "saved guest: $(du -m "$file" | cut -f1) MiB on disk ($(stat -c %s "$file") bytes) for a 1024 MiB guest"
done
mac_of() { virsh domiflist "$1" | awk '$5 ~ /:/ {print $5; exit}'; }
lease_expiry() {  # MAC: the expiry of its lease in libvirt's dnsmasq, as Unix seconds
  date -d "$(virsh net-dhcp-leases "$network" --mac "$1" | awk '/ipv4/ {print $1, $2; exit}')" +%s
}
declare -A expiry_before
for uuid in "$saved_a" "$saved_b"; do expiry_before[$uuid]=$(lease_expiry "$(mac_of "$uuid")"); done
# They are records and files: a restarted agent keeps them. Their seeds name the guest service's
# port, which an operator's agent.toml fixes (the fixture's port = 0 picks one per start).
sed -i "s/^port = 0\$/port = ${guest_url##*:}/" "$work/agent.toml"
restart_agent "$work/agent-saved-2.log"
expect "$(saved_guests)" "$saved_a $saved_b" "a restarted agent keeps both saved guests"
sleep 10  # long enough asleep that a restored guest's clock is visibly behind
restored_probe=$(cat <<'SH'
# The host receives the probe between the guest's two readings if their clocks agree: the
# distance outside that interval is the skew, whatever the request's own latency.
before=$(date -u +%s.%N)
post /status '{"status": "installing", "message": "clock probe"}'
after=$(date -u +%s.%N)
forks=$(sudo dmesg | grep -c 'crng reseeded due to virtual machine fork' || true)
reseeds=$(sudo dmesg | grep -c "garm-edge: CRNG reseeded with the agent's entropy" || true)
kernels=$(sudo dmesg | grep -c 'Linux version' || true)
post /status "{\"status\": \"installing\", \"message\": \"restored: clock $before to $after, vm forks $forks, reseeds $reseeds, kernel starts $kernels\"}"
SH
)
token6=jwt-sixth-$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')
create_guest garm-saved00006 "$token6" "$(vm_helpers garm-instance-data "$(install_script "$token6" 106 "$restored_probe")")"
created6=$created restore_create_seconds=$create_seconds
restored_uuid=$(printf '%s' "$out" | json_field provider_id)
restored_uuid=${restored_uuid#"$vm_name:"}
case " $saved_a $saved_b " in *" $restored_uuid "*) ;; *) fail "garm's instance is no saved guest: $out" ;; esac
wait_for "the restored guest to report idle" "$deadline_seconds" reported_idle "$token6"
idle6=$(garm_requests "$token6" | awk '/callbacks\/status {"status": "idle"/ {print $1; exit}')
report6=$(garm_requests "$token6" | grep -o '^[0-9.]* /api/v1/callbacks/status {"status": "installing", "message": "restored: [^"]*' | head -1)
[ -n "$report6" ] || fail "the restored guest did not report its clock"
probe6=$(garm_requests "$token6" | awk '/"message": "clock probe"/ {print $1; exit}')
[ -n "$probe6" ] || fail "the restored guest's clock probe did not reach garm: $(garm_requests "$token6")"
skew=$(awk -v line="$report6" -v received="$probe6" 'BEGIN {
  split(line, f, " "); for (i = 1; i <= length(f); i++) if (f[i] == "clock") { a = f[i + 1]; b = f[i + 3] }
  d = (a - received > received - b) ? a - received : received - b; printf "%.2f", (d > 0 ? d : 0) }')
echo "restored guest's clock is ${skew}s from the host's when its install script ran (probe answered in $(awk -v line="$report6" 'BEGIN { split(line, f, " "); for (i = 1; i <= length(f); i++) if (f[i] == "clock") printf "%.2f", f[i + 3] - f[i + 1] }') s)"
awk -v s="$skew" 'BEGIN { exit !(s <= 2) }' || fail "the restored guest's clock is ${skew}s off the host's"
case "$report6" in *"reseeds 1, kernel starts 1"*) ;; *) fail "the restored guest's CRNG was not reseeded, or it booted again: $report6" ;; esac
# Debian 12's cloud kernel has no vmgenid driver (CONFIG_VMGENID is unset in it, =y in the
# generic one): the assignment's reseed is what this image gets; a VM fork is reported.
echo "the restored guest ran on without a second boot and reseeded its CRNG ($(printf '%s' "$report6" | grep -o 'vm forks [0-9]*') from vmgenid)"
restored_mac=$(mac_of "$restored_uuid")
restored_lease=$(virsh net-dhcp-leases "$network" --mac "$restored_mac" | awk '/ipv4/ {print $5; exit}')
expect "${restored_lease%/*}" "$(printf '%s' "$out" | json_field addresses.0.address)" "the restored guest's lease is its reserved address"
[ "$(lease_expiry "$restored_mac")" -gt "${expiry_before[$restored_uuid]}" ] ||
  fail "the restored guest's DHCP lease was not renewed"
echo "saved guest restored and bound in ${restore_create_seconds}s; idle $(awk -v a="$created6" -v b="$idle6" 'BEGIN { printf "%.1f", b - a }')s after CreateInstance"
# The other one's memory file damaged: the create goes cold and that guest is removed.
other_uuid=$saved_a; [ "$other_uuid" = "$restored_uuid" ] && other_uuid=$saved_b
other_file=$pool_dir/$(virsh domname "$other_uuid").memory
head -c 4096 /dev/urandom | dd of="$other_file" bs=4096 seek=1 conv=notrunc status=none
token7=jwt-seventh-$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')
create_guest garm-saved00007 "$token7" "$(vm_helpers garm-instance-data "$(install_script "$token7" 107)")"
cold_uuid=$(printf '%s' "$out" | json_field provider_id)
[ "${cold_uuid#"$vm_name:"}" != "$other_uuid" ] || fail "a damaged saved guest was bound"
virsh dominfo "$other_uuid" >/dev/null 2>&1 && fail "the damaged saved guest was not removed"
[ -e "$other_file" ] && fail "the damaged guest's memory file is left"
grep -q "could not be restored" "$work/agent-saved-2.log" || fail "the agent did not say why it went cold"
echo "a damaged memory file sent the create cold and its guest was removed"
garm DeleteInstance GARM_INSTANCE_ID=garm-saved00007
expect "$last_status" 0 "DeleteInstance of the cold fallback"
garm DeleteInstance GARM_INSTANCE_ID=garm-saved00006
expect "$last_status" 0 "DeleteInstance of the restored guest"
cp "$work/agent-without-saved.toml" "$work/agent.toml"
restart_agent "$work/agent-saved-3.log"
no_saved_left() { [ "$(control_root warm)" = "[]" ] && ! compgen -G "$pool_dir/*.memory" >/dev/null; }
wait_for "the agent to retire what is left of the saved guests" 120 no_saved_left
# ---- job caches: a builder makes each generation, jobs write only to their own overlay -------
echo "== a job cache"
cat > "$work/cache-refresh.sh" <<'SH'
#!/bin/bash
set -eu
echo "refreshed by $(hostname)" >> "$GARM_EDGE_CACHE_PATH/marker"
SH
cat >> "$work/agent.toml" <<TOML
[[caches]]
name = "tools"
size_gib = 1
mount = "/opt/hostedtoolcache"
controller = "$controller"
images = ["debian-12"]
refresh_script = "$work/cache-refresh.sh"
refresh_every_hours = 0
refresh_timeout_minutes = 15
TOML
sed -i "s#^\[agent\]\$#[agent]\nreplaced_grace_seconds = 0\ncaches_dir = \"$caches_dir\"#" "$work/agent.toml"
cache_list() { "$agent" caches list --config "$work/agent.toml"; }
restart_agent "$work/agent-5.log"
first_generation() {
  local listed
  listed=$(cache_list)
  case "$listed" in *"the last refresh failed"*) fail "the first refresh failed: $listed" ;; esac
  printf '%s\n' "$listed" | grep -q '^tools: generation 1,'
}
wait_for "the agent's first refresh of the cache (a builder guest)" "$deadline_seconds" first_generation
expect "$(virsh list --all --name | grep -c 6761726d-6564-6765-6361 || true)" 0 "the builder is gone once its generation is in"
# What a job sees at the cache's path when its install script runs, and what it leaves there.
cache_probe=$(cat <<'SH'
lines=$(wc -l < /opt/hostedtoolcache/marker 2>/dev/null || echo none)
source=$(findmnt -n -o SOURCE /opt/hostedtoolcache || echo none)
jobs=$(ls /opt/hostedtoolcache | grep -c '^job-' || true)
sudo touch "/opt/hostedtoolcache/job-$(hostname)"
post /status "{\"status\": \"installing\", \"message\": \"cache: $lines marker lines on $source, $jobs job files\"}"
SH
)
cache_report() { garm_requests "$1" | grep -o 'cache: [^"]*' | head -1; }
token4=jwt-fourth-$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')
create_guest garm-cache00004 "$token4" "$(vm_helpers garm-instance-data "$(install_script "$token4" 104 "$cache_probe")")"
wait_for "the first cached guest to report idle" "$deadline_seconds" reported_idle "$token4"
expect "$(cache_report "$token4")" "cache: 1 marker lines on /dev/vdb, 0 job files" \
  "the guest finds generation 1 mounted before its install script runs"
cache_overlay4=$(virsh domblklist "$(domain_of garm-cache00004)" | awk '$1 == "vdb" {print $2}')
expect "$(base_of "$cache_overlay4")" "$caches_dir/tools/gen-1.qcow2" "the guest's cache disk is an overlay on generation 1"
refreshed=$("$agent" caches refresh tools --config "$work/agent.toml") || fail "caches refresh: $refreshed"
echo "$refreshed"
case "$refreshed" in "cache tools: generation 2 is current"*) ;; *) fail "the refresh made no generation 2: $refreshed" ;; esac
[ -f "$caches_dir/tools/gen-1.qcow2" ] || fail "generation 1 went while a guest backs onto it"
token5=jwt-fifth-$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')
create_guest garm-cache00005 "$token5" "$(vm_helpers garm-instance-data "$(install_script "$token5" 105 "$cache_probe")")"
wait_for "the second cached guest to report idle" "$deadline_seconds" reported_idle "$token5"
expect "$(cache_report "$token5")" "cache: 2 marker lines on /dev/vdb, 0 job files" \
  "the next guest gets generation 2, without the first job's file"
garm DeleteInstance GARM_INSTANCE_ID=garm-cache00004
first_gone() { [ ! -e "$caches_dir/tools/gen-1.qcow2" ]; }
wait_for "generation 1 to go after its last guest" 120 first_gone
printf '#!/bin/bash\necho "the registry refused us"\nexit 3\n' > "$work/cache-refresh.sh"
failed_refresh=$("$agent" caches refresh tools --config "$work/agent.toml" 2>&1) && fail "a failing script made a generation: $failed_refresh"
case "$failed_refresh" in *"exited with 3: the registry refused us"*) ;; *) fail "the failed refresh does not say why: $failed_refresh" ;; esac
cache_list | grep -q '^tools: generation 2,.*the last refresh failed' || fail "the last generation did not stay: $(cache_list)"
garm DeleteInstance GARM_INSTANCE_ID=garm-cache00005
expect "$(leftovers "garm-edge-$controller-")" "" "the cached guests leave nothing behind"
echo "job cache: generations 1 and 2 made by builders, each job on its own overlay, the replaced generation gone after its guest, a failed refresh kept generation 2"
echo "system tier: real guests booted, reported idle through the relay, and were deleted without a trace"
