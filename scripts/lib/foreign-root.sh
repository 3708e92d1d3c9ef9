# shellcheck shell=bash
# Sourced by scripts that make a Debian root of another architecture without booting it (the
# arm64 guest image, the arm64 package tier): `debootstrap --arch=ARCH --foreign` unpacks it,
# then its second stage runs in a chroot, the kernel handing its programs to qemu-user through
# binfmt_misc. qemu-user-binfmt's entries have no F flag, so the interpreter's path is looked up
# inside the chroot: a static qemu goes there. qemu-user-static itself conflicts with
# qemu-user-binfmt, so only its binary is taken from its package.
# shellcheck source-path=SCRIPTDIR source=binfmt.sh
. "$(dirname "${BASH_SOURCE[0]}")/binfmt.sh"

# The qemu-user name for a Debian architecture.
qemu_for_arch() {
  case $1 in
    arm64) echo qemu-aarch64 ;;
    armhf) echo qemu-arm ;;
    *) echo "no qemu-user for $1" >&2; return 1 ;;
  esac
}

# place_static_qemu ARCH ROOT DOWNLOAD_DIR: registers ARCH's qemu with binfmt_misc and puts its
# static build at the interpreter's path under ROOT (its package is fetched into DOWNLOAD_DIR
# unless already there). Sets $qemu_in_root to that file, for the caller to remove once it no
# longer runs programs in ROOT.
place_static_qemu() {
  local arch=$1 root=$2 downloads=$3 qemu interpreter
  qemu=$(qemu_for_arch "$arch")
  register_qemu_binfmt "$qemu" ||
    { echo "FAILED: $qemu cannot be registered with binfmt_misc (run as root)" >&2; return 1; }
  interpreter=$(binfmt_interpreter "$qemu")
  [ -n "$interpreter" ] || { echo "FAILED: binfmt_misc names no interpreter for $qemu" >&2; return 1; }
  if ! compgen -G "$downloads/qemu-user-static_*.deb" >/dev/null; then
    # Callers run this under `|| exit`, where errexit is off: every step checks itself.
    (cd "$downloads" && { timeout 300 apt-get download -q -o APT::Sandbox::User=root qemu-user-static >/dev/null 2>&1 ||
      { timeout 300 apt-get update -q >/dev/null &&
        timeout 300 apt-get download -q -o APT::Sandbox::User=root qemu-user-static; }; }) ||
      { echo "FAILED: apt-get download qemu-user-static" >&2; return 1; }
  fi
  mkdir -p "$root/$(dirname "$interpreter")" || return 1
  if ! dpkg-deb --fsys-tarfile "$downloads"/qemu-user-static_*.deb |
    tar -xO "./usr/bin/$qemu-static" >"$root/$interpreter" || [ ! -s "$root/$interpreter" ]; then
    echo "FAILED: no $qemu-static in qemu-user-static's package" >&2
    return 1
  fi
  chmod 0755 "$root/$interpreter"
  # shellcheck disable=SC2034  # the caller's
  qemu_in_root=$root/$interpreter
}

# foreign_second_stage ROOT LOG: debootstrap's second stage in ROOT (a --foreign first stage
# with place_static_qemu done), its output in LOG; shows the end of it on failure.
foreign_second_stage() {
  local root=$1 log=$2
  chroot "$root" /debootstrap/debootstrap --second-stage >"$log" 2>&1 && return 0
  tail -n 20 "$log" "$root/debootstrap/debootstrap.log" 2>/dev/null || true
  echo "FAILED: debootstrap --second-stage in $root" >&2
  return 1
}
