#!/usr/bin/env bash
# Manual check of the image build_guest_image.sh makes, independent of libvirt and the agent:
# boots it the way the agent's domains do (q35, SeaBIOS from the disk, a qcow2 overlay larger
# than the image as virtio disk, virtio NIC and rng, SMBIOS serial ds=nocloud-net;s=URL/) under
# plain QEMU TCG, with user networking so the seed server is a python http.server on loopback
# (the guest reaches the host's 127.0.0.1 as 10.0.2.2). Passes when cloud-init fetched the seed,
# ran write_files, users (sudo), SSH host keys and runcmd without schema warnings, grew the root
# fs into the overlay, and the guest's curl reached the host. Prints the timings from QEMU's start.
# Usage: check_guest_image.sh IMAGE   (GUEST_LOG_DIR=DIR keeps the serial and seed server logs)
set -euo pipefail

if [ $# -ne 1 ]; then
  echo "usage: $0 IMAGE" >&2
  exit 2
fi
image=$(readlink -f "$1")
[ -f "$image" ] || { echo "no image at $image" >&2; exit 2; }
# shellcheck source-path=SCRIPTDIR source=apt.sh
. "$(dirname "${BASH_SOURCE[0]}")/apt.sh"
install_missing qemu-system-x86 qemu-utils

work=$(mktemp -d "${TMPDIR:-/tmp}/garm-edge-imagecheck.XXXXXX")
qemu_pid=
server_pid=
cleanup() {
  if [ -n "${GUEST_LOG_DIR:-}" ]; then
    { mkdir -p "$GUEST_LOG_DIR" && cp "$work"/*.log "$GUEST_LOG_DIR"/; } 2>/dev/null || true
  fi
  for pid in "$qemu_pid" "$server_pid"; do
    if [ -n "$pid" ]; then kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null; fi || true
  done
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
fail() {
  echo "FAILED: $*"
  echo "--- seed server log"; cat "$work/server.log" 2>/dev/null || true
  echo "--- serial log (last 60 lines)"; tail -n 60 "$work/serial.log" 2>/dev/null || true
  exit 1
}

# The seed server logs each request with its wall-clock time, so timings can be taken against
# QEMU's start. It binds port 0 and reports the port, so parallel runs do not collide.
cat >"$work/server.py" <<'PY'
import http.server, sys, time
work = sys.argv[1]
routes = {"/tok/meta-data": "meta-data", "/tok/user-data": "user-data", "/tok/vendor-data": "vendor-data"}
class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        path = self.path.split("?")[0]
        body, code = b"", 404
        if path in routes:
            with open(f"{work}/{routes[path]}", "rb") as f:
                body, code = f.read(), 200
        elif path == "/done":
            code = 200
        self.send_response(code)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
        with open(f"{work}/server.log", "a") as log:
            log.write(f"{time.time():.3f} {code} {self.path} {self.headers.get('User-Agent', '')}\n")
    def log_message(self, *args):
        pass
server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
with open(f"{work}/port", "w") as f:
    f.write(str(server.server_address[1]))
server.serve_forever()
PY
/usr/bin/python3 "$work/server.py" "$work" &
server_pid=$!
for _ in $(seq 100); do [ -s "$work/port" ] && break; sleep 0.1; done
[ -s "$work/port" ] || fail "the seed server did not start"
port=$(cat "$work/port")
host=http://10.0.2.2:$port

printf 'instance-id: x1\nlocal-hostname: x1\n' >"$work/meta-data"
: >"$work/vendor-data"
# The groups and sudo rule are those the agent's user-data gives its runner user (docker does
# not exist in the image: cloud-init has to create it). package_update is off as in the tier.
cat >"$work/user-data" <<YAML
#cloud-config
package_update: false
package_upgrade: false
users:
  - name: runner
    shell: /bin/bash
    groups: [sudo, adm, netdev, docker]
    sudo: ALL=(ALL) NOPASSWD:ALL
write_files:
  - path: /etc/garm-edge-check
    content: "written by write_files\n"
    permissions: "0644"
runcmd:
  - [sh, -c, '{ echo "GARM-EDGE-CHECK runcmd: \$(cat /etc/garm-edge-check)"; cat /etc/os-release; su -l runner -c "sudo -n id -un" | sed "s/^/GARM-EDGE-CHECK runner sudo: /"; df -m / | sed "s/^/GARM-EDGE-CHECK df: /"; dpkg-query -W cloud-init | sed "s/^/GARM-EDGE-CHECK /"; echo "GARM-EDGE-CHECK ssh host keys: \$(ls /etc/ssh/*_key.pub)"; } >/dev/ttyS0 2>&1']
  - [sh, -c, 'curl -fsS "$host/done?root_mib=\$(df -m --output=size / | tail -n 1 | tr -d " ")"']
YAML

# Like the agent: an overlay with the image as backing file, flavor-sized (2 GiB here).
qemu-img create -q -f qcow2 -b "$image" -F qcow2 "$work/overlay.qcow2" 2G
started=$(date +%s.%N)
qemu-system-x86_64 -machine q35 -accel tcg -cpu max -m 1024 -smp 2 -display none -nodefaults \
  -no-reboot -serial "file:$work/serial.log" \
  -drive "file=$work/overlay.qcow2,if=virtio,format=qcow2" \
  -netdev user,id=n0 -device virtio-net-pci,netdev=n0 -device virtio-rng-pci \
  -smbios "type=1,serial=ds=nocloud-net;s=$host/tok/" &
qemu_pid=$!

echo "booting $image (seed at $host/tok/, serial log $work/serial.log)"
for _ in $(seq 900); do
  grep -qs ' /done' "$work/server.log" && break
  kill -0 "$qemu_pid" 2>/dev/null || fail "QEMU exited before the guest called back"
  sleep 1
done
grep -qs ' /done' "$work/server.log" || fail "no callback from the guest within 900 s"
sleep 2 # let the serial file catch up with the runcmd output

seconds_to() {
  awk -v start="$started" -v path="$1" '$3 ~ path { printf "%.0f", $1 - start; exit }' "$work/server.log"
}
grep -q 'garm-edge guest image: GRUB boots Linux' "$work/serial.log" || fail "no GRUB message on the serial console"
grep -q 'Command line: BOOT_IMAGE=/boot/vmlinuz-' "$work/serial.log" || fail "the kernel was not started by GRUB"
for seed in meta-data user-data vendor-data; do
  grep -q "200 /tok/$seed " "$work/server.log" || fail "cloud-init did not fetch $seed"
done
grep -q 'GARM-EDGE-CHECK runcmd: written by write_files' "$work/serial.log" || fail "runcmd or write_files did not run"
grep -q 'VERSION_CODENAME=bookworm' "$work/serial.log" || fail "no os-release from the guest"
grep -q 'GARM-EDGE-CHECK runner sudo: root' "$work/serial.log" || fail "the runner user has no password-less sudo"
grep -q 'GARM-EDGE-CHECK ssh host keys: /etc/ssh/ssh_host_ed25519_key.pub' "$work/serial.log" || fail "cloud-init made no SSH host key"
# The image's own cloud.cfg.d must validate, so that a schema warning points at the user-data.
if grep -q 'Invalid cloud-config provided' "$work/serial.log"; then fail "cloud-init reports an invalid cloud-config"; fi
root_mib=$(sed -n 's/.* \/done?root_mib=\([0-9]*\) .*/\1/p' "$work/server.log")
[ "${root_mib:-0}" -gt 1500 ] || fail "the root fs was not grown into the 2 GiB overlay (${root_mib:-?} MiB)"

awk -v start="$started" '{ printf "seed server: +%.0f s %s %s\n", $1 - start, $2, $3 }' "$work/server.log"
grep 'GARM-EDGE-CHECK' "$work/serial.log" | tr -d '\r'
echo "first seed request after $(seconds_to /tok/) s, /done after $(seconds_to /done) s from QEMU's start"
echo "image check passed: GRUB booted the disk, cloud-init ran the NoCloud seed, the guest reached the host"
