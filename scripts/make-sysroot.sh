#!/usr/bin/env bash
# Makes a Debian 12 sysroot for cross building garm-edge: the target's libc, the -dev packages
# the build needs and their dependencies, unpacked into a folder. No multiarch: nothing is
# installed on the build machine, so the target's package versions need not match the host's,
# and a broken index for one architecture (the mirror's armhf security index has been) cannot
# block the build: only the main suite is read.
#
# Usage: scripts/make-sysroot.sh arm64|armhf [DIR]
#   DIR defaults to /var/cache/garm-edge-sysroot/ARCH. A sysroot made from the same package
#   list and mirror is reused (its stamp says so); otherwise it is made anew beside DIR and
#   moved into place, so an interrupted run never leaves a half sysroot at DIR.
#
# debootstrap --download-only resolves the dependencies and downloads the .debs for ARCH; each
# is then unpacked with dpkg-deb and tar. Nothing of the target runs, not even a maintainer
# script, which a sysroot does not need. What a build does not read (programs, /etc,
# documentation) is removed, and absolute symlinks are made relative so that they resolve
# inside the sysroot.
set -euo pipefail

arch=${1:-}
case $arch in
  arm64 | armhf) ;;
  *)
    echo "usage: $0 arm64|armhf [DIR]" >&2
    exit 2
    ;;
esac
dir=${2:-/var/cache/garm-edge-sysroot/$arch}
suite=bookworm
# shellcheck source-path=SCRIPTDIR source=lib/debian-mirror.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib/debian-mirror.sh"
mirror=$(debian_mirror)  # the one apt uses: CI reaches no other
# The build's libraries (CMakeLists.txt) and the header-only ones, from the target's archive.
packages=libc6-dev,libstdc++-12-dev,libvirt-dev,libmbedtls-dev,nettle-dev,libtomlplusplus-dev,libpugixml-dev
packages+=,nlohmann-json3-dev,libasio-dev,catch2,libcurl4-openssl-dev
stamp="suite=$suite mirror=$mirror packages=$packages layout=3"

if [ -f "$dir/.garm-edge-sysroot" ] && [ "$(cat "$dir/.garm-edge-sysroot")" = "$stamp" ]; then
  echo "sysroot $dir is up to date"
  exit 0
fi
if ! command -v debootstrap > /dev/null; then
  echo "make-sysroot: debootstrap is missing (apt-get install debootstrap)" >&2
  exit 1
fi

mkdir -p "$(dirname "$dir")"
exec {lock}> "$dir.lock"
flock "$lock"  # two runs for one ARCH take turns; the second finds the first's sysroot
if [ -f "$dir/.garm-edge-sysroot" ] && [ "$(cat "$dir/.garm-edge-sysroot")" = "$stamp" ]; then
  echo "sysroot $dir is up to date"
  exit 0
fi
started=$EPOCHREALTIME
work=
trap 'rm -rf "${work:-}" "${work:-}.log"' EXIT
for attempt in 1 2 3; do  # a flaky mirror is the usual failure
  work=$(mktemp -d "$dir.new.XXXXXX")
  if debootstrap --download-only --arch="$arch" --variant=minbase --include="$packages" \
    "$suite" "$work" "$mirror" > "$work.log" 2>&1; then
    break
  fi
  tail -n 20 "$work.log" >&2
  rm -rf "$work" "$work.log"
  if [ "$attempt" -eq 3 ]; then
    echo "make-sysroot: debootstrap failed for $arch" >&2
    exit 1
  fi
  echo "make-sysroot: debootstrap failed (attempt $attempt), retrying in 10 s" >&2
  sleep 10
done
rm -f "$work.log"
debs=("$work"/var/cache/apt/archives/*.deb)
# Merged /usr, as on the target: /lib is a link to usr/lib, and tar keeps it a link.
mkdir -p "$work/usr/lib"
ln -s usr/lib "$work/lib"
for deb in "${debs[@]}"; do
  dpkg-deb --fsys-tarfile "$deb" | tar -x --keep-directory-symlink -C "$work"
done
# shellcheck disable=SC2016 # dpkg-deb's format, not the shell's
versions=$(for deb in "${debs[@]}"; do dpkg-deb --show --showformat='${Package} ${Version}\n' "$deb"; done)

# Only headers, libraries, pkg-config and CMake files are read: the rest goes, and with it
# what qemu-user would otherwise take from the sysroot instead of the host (/etc, /bin/sh).
find "$work" -mindepth 1 -maxdepth 1 ! -name usr ! -name lib -exec rm -rf {} +
find "$work/usr" -mindepth 1 -maxdepth 1 ! -name include ! -name lib ! -name share \
  -exec rm -rf {} +
find "$work/usr/share" -mindepth 1 -maxdepth 1 ! -name pkgconfig ! -name cmake \
  -exec rm -rf {} +
# Absolute links would resolve on the build machine: make them relative, inside the sysroot
# (-s: the target path is not resolved through other links, which may still be absolute).
while IFS= read -r -d '' link; do
  target=$(readlink "$link")
  ln -sfn "$(realpath -m -s --relative-to="$(dirname "$link")" "$work$target")" "$link"
done < <(find "$work" -type l -lname '/*' -print0)

printf '%s\n' "$versions" > "$work/.garm-edge-packages"
printf '%s\n' "$stamp" > "$work/.garm-edge-sysroot"
# The old stamp goes first: a replace cut short never leaves a stamp on a half tree.
rm -f "$dir/.garm-edge-sysroot"
rm -rf "$dir"
mv -T "$work" "$dir"
work=
printf 'sysroot %s: %d packages, %s, made in %.0f s\n' "$dir" "${#debs[@]}" \
  "$(du -sh "$dir" | cut -f1)" "$(awk "BEGIN { print $EPOCHREALTIME - $started }")"
grep -E '^(libc6|libvirt0|libmbedtls14|libstdc\+\+6) ' "$dir/.garm-edge-packages" | paste -sd';' |
  sed 's/;/; /g'
