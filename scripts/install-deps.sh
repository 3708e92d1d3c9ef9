#!/usr/bin/env bash
# Installs the Debian 12 packages garm-edge builds and tests with. Idempotent: does nothing
# when every package is already installed. With --demo, only what the demo needs: a compiler,
# CMake and Ninja, and the libraries of the two executables (scripts/demo.sh).
set -euo pipefail

demo_packages=(
  g++ cmake ninja-build pkg-config openssl ca-certificates curl
  libvirt-dev libasio-dev nlohmann-json3-dev libmbedtls-dev nettle-dev
  libtomlplusplus-dev libpugixml-dev libcurl4-openssl-dev
)
packages=(
  "${demo_packages[@]}"
  build-essential ccache clang-format clang clang-tidy libclang-rt-14-dev cloud-init shellcheck catch2
  # Image pulls: qemu-img (below) and xz for .xz sources, the images tests run both.
  xz-utils
  # Host tools of the heavy tiers, installed before any tier runs: ctest runs two tests at a
  # time, and an apt-get beside the tests that use libvirtd could replace it under them (the
  # tiers' scripts still install what is missing when run on their own).
  qemu-system-x86 qemu-utils libvirt-daemon libvirt-daemon-driver-qemu libvirt-clients tini
  dnsmasq-base iptables ebtables python3 busybox iproute2 lintian procps
  debootstrap debian-archive-keyring grub-pc-bin fdisk e2fsprogs
  # The aarch64 guest: its emulator and UEFI firmware, and the image's EFI system partition.
  qemu-system-arm qemu-efi-aarch64 dosfstools mtools
  # The registry mirror's tests: Debian's docker-registry as mirror and upstream, skopeo pushes.
  docker-registry skopeo
  # The alert rules' tests (promtool) and the hub tier's real scrape (prometheus).
  prometheus python3-yaml
  # garm, built by the garm tiers against Debian's SQLite (Go itself is unpacked privately).
  libsqlite3-dev
  # PostgreSQL's server binaries: the hub's database tests start their own temporary cluster.
  postgresql-15
  # The cross tiers' compilers and emulators (the target's libraries come from a sysroot).
  g++-aarch64-linux-gnu g++-arm-linux-gnueabihf qemu-user qemu-user-binfmt
)

if [ "${1:-}" = --demo ]; then packages=("${demo_packages[@]}"); fi

missing=()
for package in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q 'install ok installed'; then
    missing+=("$package")
  fi
done
[ ${#missing[@]} -eq 0 ] && exit 0

if [ "$(id -u)" -ne 0 ]; then
  echo "install-deps: missing packages (${missing[*]}); run as root to install them" >&2
  exit 1
fi

export DEBIAN_FRONTEND=noninteractive UCF_FORCE_CONFFOLD=1
# Tests start PostgreSQL clusters of their own: the package makes no system cluster to run.
if [ ! -e /etc/postgresql-common/createcluster.conf ]; then
  mkdir -p /etc/postgresql-common
  echo "create_main_cluster = false" > /etc/postgresql-common/createcluster.conf
fi
for attempt in 1 2 3; do
  timeout 300 apt-get update -q -o Acquire::Retries=3 && break
  [ "$attempt" -eq 3 ] && exit 1
  sleep 10
done
timeout 900 apt-get install -y -q --no-install-recommends -o DPkg::Lock::Timeout=300 "${missing[@]}"
