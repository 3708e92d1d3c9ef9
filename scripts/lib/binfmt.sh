# shellcheck shell=bash
# Sourced by scripts that run ARM programs on the build machine (the cross tiers, the arm64
# guest image's second debootstrap stage). register_qemu_binfmt QEMU (qemu-aarch64, qemu-arm):
# registers qemu-user-binfmt's entry for QEMU with binfmt_misc, as systemd-binfmt would at boot
# (without systemd nothing loads them), and leaves it registered. Returns non-zero when the
# entry is not enabled afterwards (not root, or no binfmt_misc in this kernel).
register_qemu_binfmt() {
  local qemu=$1 binfmt=/proc/sys/fs/binfmt_misc
  if [ -e "$binfmt/$qemu" ]; then
    if [ "$(head -n1 "$binfmt/$qemu")" = disabled ] && [ "$(id -u)" -eq 0 ]; then
      echo 1 > "$binfmt/$qemu"
    fi
  elif [ "$(id -u)" -eq 0 ]; then
    [ -e "$binfmt/register" ] || mount -t binfmt_misc binfmt_misc "$binfmt" || true
    grep -v '^[#;]' "/usr/lib/binfmt.d/$qemu.conf" > "$binfmt/register" || true
  fi
  [ "$(head -n1 "$binfmt/$qemu" 2>/dev/null)" = enabled ]
}

# The interpreter the kernel runs for QEMU's programs (its path is resolved inside a chroot).
binfmt_interpreter() {
  sed -n 's/^interpreter //p' "/proc/sys/fs/binfmt_misc/$1"
}
