#!/usr/bin/env bash
# Cross builds garm-edge for ARM on an x86_64 Debian 12 machine and runs its unit and integration
# tests under qemu-user. Usage: scripts/cross-build.sh arm64|armhf [--deps-only|--unit-tests-only]
# (--unit-tests-only: everything is built, only the unit tests run: CI's form).
#
# As root it first installs what the build needs through scripts/install-deps.sh (idempotent:
# no apt call when everything is there): the cross compiler g++-TRIPLET, qemu-user and
# debootstrap, all packages of the build machine's own architecture. The target's libraries
# come from a Debian sysroot that scripts/make-sysroot.sh makes (cached in
# /var/cache/garm-edge-sysroot/ARCH, or $GARM_EDGE_SYSROOT), not from multiarch packages:
# nothing of the target is installed on the build machine, and a lagging or broken index of one
# architecture cannot hold the build.
# Then it configures and builds the cross-ARCH preset, runs `ctest --preset cross-ARCH -L unit`
# and `-L integration`, makes the .debs and the static provider tarball, and prints their
# sizes, the stripped sizes and the NEEDED list of the agent and the provider, and the time of
# each phase.
#
# ctest runs the test binaries under qemu-ARCH -L SYSROOT (the toolchain's
# CMAKE_CROSSCOMPILING_EMULATOR); some tests exec the provider or the agent themselves (the
# provider tests, the sd_notify test, the garm flow): the script registers qemu-user-binfmt's
# qemu-ARCH with binfmt_misc (left registered, as systemd-binfmt would at boot) and links
# /etc/qemu-binfmt/QEMU_ARCH (aarch64, arm) to the sysroot so that the kernel runs those
# through qemu too.
set -euo pipefail
cd "$(dirname "$0")/.."

case ${1:-} in
  arm64) triplet=aarch64-linux-gnu qemu=qemu-aarch64 ;;
  armhf) triplet=arm-linux-gnueabihf qemu=qemu-arm ;;
  *)
    echo "usage: $0 arm64|armhf [--deps-only|--unit-tests-only]" >&2
    exit 2
    ;;
esac
arch=$1
deps_only=
unit_tests_only=
case ${2:-} in
  "") ;;
  --deps-only) deps_only=yes ;;  # only the packages, the sysroot and the binfmt registration
  --unit-tests-only) unit_tests_only=yes ;;  # everything built, the integration tests not run
  *)
    echo "usage: $0 arm64|armhf [--deps-only|--unit-tests-only]" >&2
    exit 2
    ;;
esac
preset=cross-$arch
build=build/$preset

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

# --- packages and the sysroot ----------------------------------------------------------------
# scripts/install-deps.sh has the cross compilers, qemu-user and debootstrap (all packages of the
# build machine's own architecture); the target's libraries come from a sysroot.
phase "install packages"
scripts/install-deps.sh

phase "sysroot"
sysroot=$(realpath -m "${GARM_EDGE_SYSROOT:-/var/cache/garm-edge-sysroot/$arch}")
export GARM_EDGE_SYSROOT=$sysroot
scripts/make-sysroot.sh "$arch" "$sysroot"

# Let the kernel run ARM executables through qemu (qemu-user-binfmt ships the registrations;
# without systemd nothing loads them). Tests exec the provider and the agent directly.
phase "binfmt_misc registration"
# shellcheck source-path=SCRIPTDIR source=lib/binfmt.sh
. scripts/lib/binfmt.sh
if register_qemu_binfmt "$qemu"; then
  echo "$qemu is registered: $(binfmt_interpreter "$qemu")"
else
  # Without it the provider tests, the sd_notify test and the garm flow fail (ENOEXEC).
  echo "cross-build: $qemu is not registered with binfmt_misc and cannot be (run as root):" \
    "the integration tests exec the ARM provider and agent" >&2
  exit 1
fi
# Through binfmt_misc, Debian's qemu-user takes the loader and libraries from
# /etc/qemu-binfmt/<qemu arch> (its interp prefix), as -L does for ctest.
interp_prefix=/etc/qemu-binfmt/${qemu#qemu-}
if [ "$(readlink -f "$interp_prefix" 2>/dev/null)" != "$(readlink -f "$sysroot")" ]; then
  if [ -e "$interp_prefix" ] && [ ! -L "$interp_prefix" ]; then
    echo "cross-build: $interp_prefix is not a link to the sysroot; move it away" >&2
    exit 1
  fi
  if [ "$(id -u)" -ne 0 ]; then
    echo "cross-build: $interp_prefix must link to $sysroot (run as root)" >&2
    exit 1
  fi
  mkdir -p /etc/qemu-binfmt
  ln -sfn "$sysroot" "$interp_prefix"
fi
echo "$qemu runs ARM programs with the sysroot's libraries ($interp_prefix -> $sysroot)"
if [ -n "$deps_only" ]; then
  phase
  exit 0
fi

# --- build and tests ----------------------------------------------------------------------
phase "configure"
fresh=()  # a build configured against another sysroot (or multiarch) starts its cache anew
grep -qx "GARM_EDGE_SYSROOT:PATH=$sysroot" "$build/CMakeCache.txt" 2>/dev/null || fresh=(--fresh)
cmake --preset "$preset" "${fresh[@]}" > /dev/null
phase "build"
cmake --build --preset "$preset" -j2
phase "unit tests (qemu-user)"
ctest --preset "$preset" -L unit -j2
if [ -z "$unit_tests_only" ]; then
  phase "integration tests (qemu-user)"
  ctest --preset "$preset" -L integration -j2  # the tier holds both cores
fi

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
trap 'rm -rf "$stripped"' EXIT
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
