#!/usr/bin/env bash
# The first run of the demo on a fresh Debian 12 machine: a debootstrap'd bookworm (nothing but
# its base system) gets a clean copy of this checkout's HEAD and runs `scripts/demo.sh` as root,
# timed from the first command to the demo's last line. The chroot reaches Debian's archive
# through this host's network, as a fresh machine would.
# Prints the demo's own step times and the total. Needs root (exit 77 otherwise).
# Usage: bench/fresh_demo.sh [CHROOT_DIR]   (default: a new one under /var/tmp, removed after)
set -euo pipefail
[ "$(id -u)" = 0 ] || { echo "bench/fresh_demo.sh needs root (debootstrap, chroot)"; exit 77; }
for tool in debootstrap git bc findmnt; do
  command -v "$tool" >/dev/null || { echo "bench/fresh_demo.sh needs $tool"; exit 77; }
done
source_dir=$(cd "$(dirname "$0")/.." && pwd)
root=${1:-}
made_root=
if [ -z "$root" ]; then
  root=$(mktemp -d /var/tmp/garm-edge-fresh.XXXXXX)
  made_root=1
fi
mounted=()
cleanup() {
  for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do umount -l "${mounted[i]}" 2>/dev/null || true; done
  [ -n "$made_root" ] || return 0
  # Never through a bind mount that is still there: it is this host's /dev, /proc or /sys.
  if findmnt -R "$root" >/dev/null 2>&1; then
    echo "left $root in place: something is still mounted under it" >&2
    return 0
  fi
  rm -rf --one-file-system "$root" "$root.debootstrap.log" "$root.demo.log"
}
trap cleanup EXIT

if [ ! -x "$root/usr/bin/apt-get" ]; then
  started=$(date +%s)
  debootstrap bookworm "$root" http://deb.debian.org/debian > "$root.debootstrap.log" 2>&1 ||
    { tail -20 "$root.debootstrap.log"; exit 1; }
  echo "fresh Debian 12 (debootstrap) in $(($(date +%s) - started)) s: $root"
fi
rm -rf "$root/root/garm-edge"
mkdir -p "$root/root/garm-edge"
git -C "$source_dir" archive HEAD | tar -x -C "$root/root/garm-edge"
cp /etc/resolv.conf "$root/etc/resolv.conf"
for fs in proc sys dev dev/pts; do
  mount --bind "/$fs" "$root/$fs"
  mounted+=("$root/$fs")
done

started=$(date +%s.%N)
status=0
chroot "$root" /usr/bin/env -i HOME=/root PATH=/usr/sbin:/usr/bin:/sbin:/bin TERM=dumb \
  bash -c 'cd /root/garm-edge && scripts/demo.sh' > "$root.demo.log" 2>&1 || status=$?
total=$(echo "$(date +%s.%N) - $started" | bc)
[ "$status" = 0 ] || { tail -30 "$root.demo.log"; echo "FAILED: the demo exited with $status"; exit 1; }
grep -v '^\[[0-9]*/[0-9]*\]\|^Get:\|^Selecting\|^Preparing\|^Unpacking\|^Setting up\|^Processing' \
  "$root.demo.log" | tail -40
printf 'first demo on a fresh Debian 12 machine: %.0f s (bar: 150 s)\n' "$total"
