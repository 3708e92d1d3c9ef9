#!/usr/bin/env bash
# Builds the guest image for the booting system tiers: a Debian 12 disk with cloud-init 22.4
# that the agent's domains (a qcow2 overlay on this image as virtio vda, SMBIOS serial
# ds=nocloud-net;s=URL/, <boot dev='hd'/>) boot with no direct kernel boot.
# - amd64 (q35, SeaBIOS): MBR, GRUB's boot.img and a core.img with an embedded config in the
#   gap before the one partition, which needs no grub-install.
# - arm64 (virt, UEFI from AAVMF): GPT with an EFI system partition holding GRUB's arm64 EFI
#   image at the removable-media path (EFI/BOOT/BOOTAA64.EFI, which fresh NVRAM boots), and the
#   root partition. debootstrap's second stage runs in a chroot under qemu-user (binfmt_misc).
# CI has neither loop devices nor mounts, so the disk is assembled from plain files:
# debootstrap into a directory, mkfs.ext4 -d writes that directory straight into the root
# partition inside the raw disk, mkfs.vfat and mtools write the ESP. Needs root (debootstrap,
# chroot); exits 77 (skipped) otherwise.
# Usage: build_guest_image.sh OUT_DIR [amd64|arm64]
# Writes OUT_DIR/debian-12-cloudinit.qcow2 (amd64) or debian-12-cloudinit-arm64.qcow2, 1 GiB
# virtual, and a .stamp beside it (the hash of this script and the libraries it sources): a
# later run with the same scripts and the image present does nothing. Two runs for one image
# take turns (a lock beside it); the second finds the image up to date.
set -euo pipefail

if [ $# -lt 1 ] || [ $# -gt 2 ]; then
  echo "usage: $0 OUT_DIR [amd64|arm64]" >&2
  exit 2
fi
out=$1
arch=${2:-amd64}
case $arch in
  amd64) name=debian-12-cloudinit ;;
  arm64) name=debian-12-cloudinit-arm64 ;;
  *) echo "unsupported architecture $arch (amd64 or arm64)" >&2; exit 2 ;;
esac
image=$out/$name.qcow2
stamp=$out/$name.stamp
scripts=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../scripts/lib" && pwd)
hash=$(cat "${BASH_SOURCE[0]}" "$scripts"/{debian-mirror,foreign-root,binfmt}.sh | sha256sum | cut -d' ' -f1)
up_to_date() {
  [ -s "$image" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$hash" ] || return 1
  echo "guest image up to date: $image"
}
up_to_date && exit 0
if [ "$(id -u)" -ne 0 ]; then
  echo "skipped: building the guest image needs root"
  exit 77
fi
mkdir -p "$out"
exec {image_lock}>"$out/$name.lock"
flock "$image_lock"
up_to_date && exit 0

label=garm-root
# The Linux build for clouds: it has virtio, ext4, netfilter and overlayfs but none of the
# wireless, sound, GPU or media drivers, a quarter of the size of the generic one, so nothing
# has to be pruned from /lib/modules by hand (and nothing the initramfs needs gets pruned).
# cloud-guest-utils brings growpart: overlays are flavor-sized (disk_gib), larger than this
# image, and cloud-init grows the root partition and ext4 into them on first boot. The SSH
# server is what the user-data's ssh_authorized_keys are for (without it cloud-init also warns
# about every host key it cannot generate).
# GRUB's arm64 EFI modules come from the guest's own grub-efi-arm64-bin (no grub-install, and
# nothing of it runs in the guest): an amd64 host cannot install that package for itself.
guest_packages=systemd-sysv,udev,cloud-init,python3-cffi-backend,linux-image-cloud-$arch
guest_packages+=,initramfs-tools,ifupdown,isc-dhcp-client,iproute2,netbase,ca-certificates
guest_packages+=,curl,sudo,cloud-guest-utils,openssh-server

host_packages=(debootstrap debian-archive-keyring qemu-utils fdisk e2fsprogs)
case $arch in
  amd64) host_packages+=(grub-pc-bin) ;;
  arm64)
    guest_packages+=,grub-efi-arm64-bin
    host_packages+=(grub-common dosfstools mtools qemu-user qemu-user-binfmt)
    ;;
esac
# shellcheck source-path=SCRIPTDIR source=apt.sh
. "$(dirname "${BASH_SOURCE[0]}")/apt.sh"
install_missing "${host_packages[@]}"

# shellcheck source-path=SCRIPTDIR source=../../scripts/lib/debian-mirror.sh
. "$scripts/debian-mirror.sh"
# shellcheck source-path=SCRIPTDIR source=../../scripts/lib/foreign-root.sh
. "$scripts/foreign-root.sh"
mirror=$(debian_mirror)

work=$(mktemp -d "${TMPDIR:-/tmp}/garm-edge-image.XXXXXX")
root=$work/rootfs
# debootstrap mounts /proc, /sys (and in containers bind-mounts /dev nodes) inside the rootfs;
# it unmounts them itself, but not when it is killed: never let rm (or mkfs -d) walk into them.
release_mounts() {
  local target
  awk -v prefix="$work/" 'index($5, prefix) == 1 { print $5 }' /proc/self/mountinfo | sort -r |
    while read -r target; do umount -l "$target" 2>/dev/null || true; done
}
cleanup() {
  release_mounts
  rm -rf --one-file-system "$work"
  rm -f "$image.partial"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# The arm64 root's second debootstrap stage, in a chroot under qemu-user (foreign-root.sh).
# MODULES=most would make mkinitramfs copy and resolve every driver under emulation (90 s
# here); these guests boot only on virt from virtio-blk, and ext4 is built in.
second_stage_under_qemu() {
  place_static_qemu "$arch" "$root" "$work" || exit 1
  mkdir -p "$root/etc/initramfs-tools/conf.d" "$root/usr/share/initramfs-tools/modules.d"
  echo MODULES=list >"$root/etc/initramfs-tools/conf.d/90-garm-edge.conf"
  printf 'virtio_pci\nvirtio_blk\n' >"$root/usr/share/initramfs-tools/modules.d/garm-edge.conf"
  echo "debootstrap second stage under ${qemu_in_root#"$root"}"
  foreign_second_stage "$root" "$work/second-stage.out" || exit 1
}

# A stale stamp must not vouch for a half-replaced image.
rm -f "$stamp"
start=$SECONDS

foreign=()
[ "$arch" = amd64 ] || foreign=(--arch="$arch" --foreign)
echo "debootstrap bookworm ($arch) from $mirror"
for attempt in 1 2; do
  if debootstrap ${foreign[@]+"${foreign[@]}"} --variant=minbase --include="$guest_packages" \
    bookworm "$root" "$mirror" >"$work/debootstrap.out" 2>&1; then
    break
  fi
  tail -n 20 "$work/debootstrap.out" "$root/debootstrap/debootstrap.log" 2>/dev/null || true
  [ "$attempt" -lt 2 ] || { echo "FAILED: debootstrap" >&2; exit 1; }
  echo "debootstrap failed, retrying once (a flaky mirror is the usual cause)"
  release_mounts
  rm -rf --one-file-system "$root"
done
[ "$arch" = amd64 ] || second_stage_under_qemu
echo "debootstrap done after $((SECONDS - start)) s"
if grep -q " $root/" /proc/self/mountinfo; then
  echo "FAILED: something is still mounted under $root" >&2
  exit 1
fi

kernels=("$root"/boot/vmlinuz-*)
if [ ${#kernels[@]} -ne 1 ] || [ ! -f "${kernels[0]}" ]; then
  echo "FAILED: expected one kernel in /boot" >&2
  exit 1
fi
kver=${kernels[0]##*/vmlinuz-}
[ -f "$root/boot/initrd.img-$kver" ] || chroot "$root" update-initramfs -c -k "$kver"
# The root disk is virtio-blk on PCI (q35 or virt) with ext4: the kernel must reach it before
# the root fs is mounted, so each driver is built in or in the initramfs (MODULES=most puts
# them there on amd64, the list second_stage_under_qemu writes on arm64).
chroot "$root" lsinitramfs "/boot/initrd.img-$kver" >"$work/initrd.list"
for driver in VIRTIO_PCI:virtio_pci VIRTIO_BLK:virtio_blk EXT4_FS:ext4; do
  grep -q "^CONFIG_${driver%%:*}=y" "$root/boot/config-$kver" ||
    grep -q "/${driver##*:}\.ko" "$work/initrd.list" ||
    { echo "FAILED: ${driver##*:} is neither built in nor in the initramfs" >&2; exit 1; }
done

# Each clone must be its own machine: an empty machine-id makes systemd generate one on first
# boot, cloud-init makes the SSH host keys and sets the hostname from the seed's local-hostname.
echo "LABEL=$label / ext4 defaults,errors=remount-ro 0 1" >"$root/etc/fstab"
echo debian >"$root/etc/hostname"
printf '127.0.0.1\tlocalhost\n::1\t\tlocalhost ip6-localhost ip6-loopback\n' >"$root/etc/hosts"
: >"$root/etc/machine-id"
rm -f "$root/var/lib/dbus/machine-id" "$root"/etc/ssh/ssh_host_*
# cloud-init renders the DHCP config into interfaces.d for ifupdown: make sure it is read.
if ! grep -qs '^source.*/etc/network/interfaces.d' "$root/etc/network/interfaces"; then
  printf 'auto lo\niface lo inet loopback\n\nsource /etc/network/interfaces.d/*\n' >"$root/etc/network/interfaces"
fi
# A UTF-8 locale without locale-gen: C.UTF-8 is built into glibc.
echo LANG=C.UTF-8 >"$root/etc/default/locale"
cat >"$root/etc/cloud/cloud.cfg.d/90_garm_edge.cfg" <<'YAML'
# The agent seeds guests with ds=nocloud-net in the SMBIOS serial. Debian probes a long list of
# clouds by default, each costing seconds under emulation (and some wait for metadata servers).
datasource_list: [ NoCloud, None ]
# The same as /etc/default/locale, which cloud-init then leaves alone; its default en_US.UTF-8
# would run locale-gen, slow under TCG. User-data that names a locale still gets it.
locale: C.UTF-8
# Host keys are made per clone on first boot; RSA key generation alone takes seconds under TCG.
ssh_genkeytypes: [ ed25519 ]
# No GRUB package that installs a boot loader is in the guest (GRUB lives only in the MBR gap
# or the ESP), so there is nothing to tell debconf about.
grub_dpkg:
  enabled: false
YAML
# Runners are short-lived: an unattended apt run started by a timer would only race the job's
# own apt-get for the dpkg lock.
chroot "$root" systemctl disable --quiet apt-daily.timer apt-daily-upgrade.timer 2>/dev/null || true
# Keep packages installed later in the guest as lean as the image.
cat >"$root/etc/dpkg/dpkg.cfg.d/90-garm-edge-nodoc" <<'CFG'
path-exclude=/usr/share/doc/*
path-include=/usr/share/doc/*/copyright
path-exclude=/usr/share/man/*
path-exclude=/usr/share/info/*
path-exclude=/usr/share/locale/*
path-include=/usr/share/locale/locale.alias
CFG
find "$root/usr/share/doc" -mindepth 1 ! -name copyright ! -type d -delete
find "$root/usr/share/doc" -mindepth 1 -type d -empty -delete
find "$root/usr/share/locale" -mindepth 1 -maxdepth 1 ! -name locale.alias -exec rm -rf {} +
rm -rf "$root"/usr/share/man/* "$root"/usr/share/info/* "$root"/var/lib/apt/lists/* \
  "$root"/var/cache/apt/*.bin "$root"/var/cache/apt/archives/*.deb "$root"/var/cache/debconf/*-old \
  "$root"/var/log/*.log "$root"/var/log/apt/*

# The root file system at OFFSET (bytes) inside the raw disk, SIZE KiB. -E offset writes it
# inside the partition, no partition file or dd needed; -d copies the rootfs with owners,
# modes, hard links and xattrs (we are root). metadata_csum_seed is an incompatible feature
# GRUB 2.06 cannot read: keep it off whatever the host's mke2fs.conf says.
write_root_fs() {
  local offset=$1 size_kib=$2
  mkfs.ext4 -q -F -L "$label" -O ^metadata_csum_seed -E "offset=$offset,nodiscard,root_owner=0:0" \
    -d "$root" "$disk" "${size_kib}k"
  e2fsck -fn "$disk?offset=$offset" >"$work/fsck.out" 2>&1 ||
    { cat "$work/fsck.out" >&2; echo "FAILED: the new file system does not check clean" >&2; exit 1; }
  root_offset=$offset
}

# GRUB's commands, run by the parser of an image without normal.mod (no /boot/grub in the
# guest), so a plain list: find the root by label, boot Linux with CONSOLE.
grub_config() {
  local console=$1
  cat <<CFG
search --no-floppy --label $label --set=root
echo "garm-edge guest image: GRUB boots Linux $kver"
linux /boot/vmlinuz-$kver root=LABEL=$label ro console=tty0 console=$console,115200 net.ifnames=0
initrd /boot/initrd.img-$kver
boot
CFG
}

# amd64: MBR, one bootable Linux partition from 1 MiB to the end, GRUB in the gap before it.
# boot.img's default kernel_sector is 1 and diskboot.img's default blocklist starts at sector 2
# with the length grub-mkimage fills in, so core.img at sector 1 needs no patching by
# grub-bios-setup.
assemble_bios_disk() {
  printf 'label: dos\nstart=2048, type=83, bootable\n' | sfdisk -q --no-reread --no-tell-kernel "$disk"
  write_root_fs $((2048 * 512)) $(((1024 - 1) * 1024))
  { printf 'serial --unit=0 --speed=115200\nterminal_input serial console\nterminal_output serial console\n'
    grub_config ttyS0; } >"$work/early.cfg"
  grub-mkimage -O i386-pc -o "$work/core.img" -c "$work/early.cfg" -p "(hd0,msdos1)/boot/grub" \
    biosdisk part_msdos ext2 search search_label linux boot echo serial terminal
  local core_size
  core_size=$(stat -c %s "$work/core.img")
  [ "$core_size" -le $(((2048 - 1) * 512)) ] || { echo "FAILED: core.img ($core_size bytes) does not fit before the partition" >&2; exit 1; }
  # Bytes 440..511 of the MBR are the disk id and the partition table sfdisk wrote: keep them.
  dd if=/usr/lib/grub/i386-pc/boot.img of="$disk" bs=440 count=1 conv=notrunc status=none
  dd if="$work/core.img" of="$disk" bs=512 seek=1 conv=notrunc status=none
}

# arm64: GPT, a 32 MiB EFI system partition from 1 MiB, the root partition after it up to the
# last MiB (the backup GPT lives at the end). The ESP holds only GRUB, at the removable-media
# path the firmware boots when its (fresh, per-domain) NVRAM has no boot entry.
assemble_uefi_disk() {
  local esp_mib=32
  local root_start=$(((1 + esp_mib) * 2048)) root_mib=$((1024 - 1 - esp_mib - 1))
  printf 'label: gpt\nstart=2048, size=%d, type=U, name="EFI system"\nstart=%d, size=%d, type=L, name="root"\n' \
    $((esp_mib * 2048)) "$root_start" $((root_mib * 2048)) |
    sfdisk -q --no-reread --no-tell-kernel "$disk"
  write_root_fs $((root_start * 512)) $((root_mib * 1024))
  grub_config ttyAMA0 >"$work/early.cfg"
  grub-mkimage -O arm64-efi -d "$root/usr/lib/grub/arm64-efi" -o "$work/BOOTAA64.EFI" \
    -c "$work/early.cfg" -p /boot/grub part_gpt ext2 search search_label linux boot echo
  mkfs.vfat -C -n ESP "$work/esp.img" $((esp_mib * 1024)) >/dev/null
  mmd -i "$work/esp.img" ::/EFI ::/EFI/BOOT
  mcopy -i "$work/esp.img" "$work/BOOTAA64.EFI" ::/EFI/BOOT/BOOTAA64.EFI
  dd if="$work/esp.img" of="$disk" bs=1M seek=1 conv=notrunc status=none
}

if [ -n "${qemu_in_root:-}" ]; then
  rm -f "$qemu_in_root"
  rmdir --ignore-fail-on-non-empty "$(dirname "$qemu_in_root")"
fi
disk=$work/disk.raw
truncate -s 1G "$disk"
case $arch in
  amd64) assemble_bios_disk ;;
  arm64) assemble_uefi_disk ;;
esac

qemu-img convert -O qcow2 "$disk" "$work/image.qcow2"
size=$(qemu-img info --output=json "$work/image.qcow2" | sed -n 's/.*"virtual-size": *\([0-9]*\).*/\1/p')
[ "$size" = $((1 << 30)) ] || { echo "FAILED: virtual size $size, not 1 GiB" >&2; exit 1; }
blocks=$(dumpe2fs -h "$disk?offset=$root_offset" 2>/dev/null | awk -F: '/^Block count/ { total = $2 } /^Free blocks/ { free = $2 } END { print total - free }')

# Publish atomically (the partial copy is removed by the trap if this is interrupted), then the
# stamp that makes the next run a no-op.
cp "$work/image.qcow2" "$image.partial"
mv "$image.partial" "$image"
echo "$hash" >"$stamp"
echo "built $image in $((SECONDS - start)) s: kernel $kver, ext4 $((blocks * 4 / 1024)) MiB used, qcow2 $(du -m "$image" | cut -f1) MiB"
