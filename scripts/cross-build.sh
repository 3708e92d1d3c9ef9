#!/usr/bin/env bash
# Cross builds garm-edge for ARM on an x86_64 Debian 12 machine and runs its unit and integration
# tests under qemu-user. Usage: scripts/cross-build.sh arm64|armhf [--deps-only]
#
# As root it first installs what the build needs (idempotent: no apt call when everything is
# there): the architecture (dpkg --add-architecture), crossbuild-essential-ARCH, the :ARCH -dev
# packages and qemu-user. Then it configures and builds the cross-ARCH preset, runs
# `ctest --preset cross-ARCH -L unit` and `-L integration`, and prints the stripped sizes and
# the NEEDED list of the agent and the provider, and the time of each phase.
#
# ctest runs the test binaries under qemu-ARCH (the toolchain's CMAKE_CROSSCOMPILING_EMULATOR);
# some tests exec the provider or the agent themselves (the provider tests, the sd_notify test,
# the garm flow): the script registers qemu-user-binfmt's qemu-ARCH with binfmt_misc (left
# registered, as systemd-binfmt would at boot) so that the kernel runs those through qemu too.
# Then the CPack .debs are made and their Architecture checked.
#
# armhf: when apt-get fails for armhf (the Debian mirror's armhf index has been broken), the
# script removes the armhf architecture again (a broken foreign index makes every apt-get
# update fail), says why and exits 77 (skipped).
set -euo pipefail
cd "$(dirname "$0")/.."

case ${1:-} in
  arm64) triplet=aarch64-linux-gnu qemu=qemu-aarch64 ;;
  armhf) triplet=arm-linux-gnueabihf qemu=qemu-arm ;;
  *)
    echo "usage: $0 arm64|armhf" >&2
    exit 2
    ;;
esac
arch=$1
deps_only=
case ${2:-} in
  "") ;;
  --deps-only) deps_only=yes ;;  # only the packages and the binfmt registration
  *)
    echo "usage: $0 arm64|armhf [--deps-only]" >&2
    exit 2
    ;;
esac
preset=cross-$arch
build=build/$preset
export DEBIAN_FRONTEND=noninteractive

phases=()
phase_started=
phase() {  # phase NAME: ends the running phase (printing its time) and starts NAME
  local now=$EPOCHREALTIME
  if [ -n "$phase_started" ]; then
    phases+=("$(printf '%-28s %7.1f s' "$phase_name" "$(awk "BEGIN { print $now - $phase_started }")")")
    printf '== %s\n' "${phases[-1]}"
  fi
  phase_name=${1:-}
  phase_started=$now
  [ -n "$phase_name" ] && printf '\n== %s (%s)\n' "$phase_name" "$arch"
  return 0
}

# --- packages -----------------------------------------------------------------------------
packages=(
  "crossbuild-essential-$arch" qemu-user qemu-user-binfmt
  "libvirt-dev:$arch" "libmbedtls-dev:$arch" "libtomlplusplus-dev:$arch" "libpugixml-dev:$arch"
)
# libasio-dev and nlohmann-json3-dev (Architecture: all) and catch2 (Multi-Arch: foreign, headers
# and CMake files only) serve every architecture: scripts/install-deps.sh installs them.

installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'install ok installed'; }

# First line of apt's output that says what failed.
apt_error() {
  grep -m1 -E "Failed to fetch|:$arch : Depends|^E: " "$1" | sed 's/^ *//' || echo "apt-get failed"
}

# Takes the architecture away again: a foreign architecture whose index is broken on the mirror
# makes every `apt-get update` on the machine fail.
remove_arch() {
  local packages
  mapfile -t packages < <(dpkg-query -W -f='${db:Status-Status} ${binary:Package}\n' "*:$arch" \
    2>/dev/null | awk '$1 != "not-installed" { print $2 }')
  if [ ${#packages[@]} -gt 0 ]; then
    apt-get purge -y -q --allow-remove-essential -o DPkg::Lock::Timeout=300 "${packages[@]}" \
      > /dev/null || true
  fi
  dpkg --remove-architecture "$arch" || echo "warning: dpkg --remove-architecture $arch failed" >&2
  timeout 300 apt-get update -q -o Acquire::Retries=3 > /dev/null 2>&1 || true
}

apt_failed() {  # apt_failed LOG: armhf is skipped (the mirror's armhf index breaks for days)
  local line
  line=$(apt_error "$1")
  if [ "$arch" = armhf ]; then
    remove_arch
    if grep -E '^(E|W|Err):|armhf : Depends' "$1" | grep -q armhf; then
      echo "armhf: skipped, the Debian mirror's armhf index is broken: $line"
    else
      echo "armhf: skipped, apt-get failed: $line"
    fi
    exit 77
  fi
  if [ -n "$added_arch" ]; then remove_arch; fi
  echo "$arch: apt-get failed: $line" >&2
  exit 1
}

phase "install packages"
scripts/install-deps.sh
missing=()
for package in "${packages[@]}"; do
  installed "$package" || missing+=("$package")
done
if [ ${#missing[@]} -gt 0 ] || ! dpkg --print-foreign-architectures | grep -qx "$arch"; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "cross-build: missing packages (${missing[*]}); run as root to install them" >&2
    exit 1
  fi
  log=$(mktemp)
  trap 'rm -f "$log"' EXIT
  added_arch=
  if ! dpkg --print-foreign-architectures | grep -qx "$arch"; then
    dpkg --add-architecture "$arch"
    added_arch=yes
  fi
  updated=
  for attempt in 1 2 3; do
    if timeout 300 apt-get update -q -o Acquire::Retries=3 > "$log" 2>&1; then
      updated=yes
      break
    fi
    echo "apt-get update failed (attempt $attempt): $(apt_error "$log")"
    [ "$attempt" -lt 3 ] && sleep 10
  done
  [ -n "$updated" ] || apt_failed "$log"
  # Multi-Arch: same packages need equal versions on every architecture, so this may upgrade
  # some of the build machine's libraries to the mirror's versions.
  if ! timeout 900 apt-get install -y -q --no-install-recommends -o DPkg::Lock::Timeout=300 \
      "${missing[@]}" > "$log" 2>&1; then
    tail -n 20 "$log"
    apt_failed "$log"
  fi
  grep -E '^[0-9]+ upgraded' "$log" || true
fi

# Let the kernel run ARM executables through qemu (qemu-user-binfmt ships the registrations;
# without systemd nothing loads them). Tests exec the provider and the agent directly.
phase "binfmt_misc registration"
binfmt=/proc/sys/fs/binfmt_misc
if [ -e "$binfmt/$qemu" ]; then
  if [ "$(head -n1 "$binfmt/$qemu")" = disabled ] && [ "$(id -u)" -eq 0 ]; then
    echo 1 > "$binfmt/$qemu"
  fi
  echo "$qemu is registered: $(head -n1 "$binfmt/$qemu")"
elif [ "$(id -u)" -eq 0 ]; then
  [ -e "$binfmt/register" ] || mount -t binfmt_misc binfmt_misc "$binfmt" || true
  if grep -v '^[#;]' "/usr/lib/binfmt.d/$qemu.conf" > "$binfmt/register"; then
    echo "registered $qemu: $(grep '^interpreter' "$binfmt/$qemu")"
  fi
fi
if [ "$(head -n1 "$binfmt/$qemu" 2>/dev/null)" != enabled ]; then
  # Without it the provider tests, the sd_notify test and the garm flow fail (ENOEXEC).
  echo "cross-build: $qemu is not registered with binfmt_misc and cannot be (run as root):" \
    "the integration tests exec the ARM provider and agent" >&2
  exit 1
fi
if [ -n "$deps_only" ]; then
  phase
  exit 0
fi

# --- build and tests ----------------------------------------------------------------------
phase "configure"
cmake --preset "$preset" > /dev/null
phase "build"
cmake --build --preset "$preset" -j2
phase "unit tests (qemu-user)"
ctest --preset "$preset" -L unit -j2
phase "integration tests (qemu-user)"
ctest --preset "$preset" -L integration

# --- packages (.deb) -----------------------------------------------------------------------
# cmake/Packaging.cmake (CPack): the agent's and the provider's .deb for the target architecture,
# and the static provider's tarball for garm's container image.
if [ -f "$build/CPackConfig.cmake" ]; then
  phase "package (.deb)"
  rm -f "$build"/*.deb "$build"/garm-provider-edge_*.tar.gz
  (cd "$build" && cpack -G DEB)
  for deb in "$build"/*.deb; do
    deb_arch=$(dpkg-deb -f "$deb" Architecture)
    printf '%s: %s bytes, Architecture: %s\n' "$deb" "$(stat -c %s "$deb")" "$deb_arch"
    if [ "$deb_arch" != "$arch" ]; then
      echo "FAILED: $deb is labelled $deb_arch, not $arch" >&2
      exit 1
    fi
  done
  if grep -q '^build provider_tarball:' "$build/build.ninja"; then
    cmake --build --preset "$preset" --target provider_tarball > /dev/null
    for tarball in "$build"/garm-provider-edge_*.tar.gz; do
      printf '%s: %s bytes\n' "$tarball" "$(stat -c %s "$tarball")"
    done
  fi
fi

# --- what ships ---------------------------------------------------------------------------
phase
echo
needed() {
  local libraries
  libraries=$("$triplet-readelf" -d "$1" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | paste -sd ' ')
  echo "${libraries:-none (static)}"
}
stripped=$(mktemp -d)
trap 'rm -rf "$stripped" "${log:-}"' EXIT
for binary in agent/garm-edge-agent provider/garm-provider-edge; do
  name=$(basename "$binary")
  "$triplet-strip" -o "$stripped/$name" "$build/$binary"
  printf '%s (%s): %s bytes, stripped %s bytes; NEEDED: %s\n' "$name" "$arch" \
    "$(stat -c %s "$build/$binary")" "$(stat -c %s "$stripped/$name")" \
    "$(needed "$build/$binary")"
done
echo
printf '%s\n' "${phases[@]}"
echo "$arch: cross build and tests passed"
