#!/usr/bin/env bash
# Builds the guest image for the booting system tier: a BIOS-bootable Debian 12 disk with
# cloud-init 22.4 that the agent's domains (q35, SeaBIOS, <boot dev='hd'/>, a qcow2 overlay on
# this image as virtio vda, SMBIOS serial ds=nocloud-net;s=URL/) boot with no direct kernel
# boot. CI has neither loop devices nor mounts, so the disk is assembled from plain files:
# debootstrap into a directory, mkfs.ext4 -d writes that directory straight into the partition
# inside the raw disk, and GRUB's boot.img and a core.img with an embedded config are written
# into the MBR gap, which needs no grub-install. Needs root (debootstrap, chroot); exits 77
# (skipped) otherwise.
# Usage: build_guest_image.sh OUT_DIR
# Writes OUT_DIR/debian-12-cloudinit.qcow2 (1 GiB virtual) and OUT_DIR/debian-12-cloudinit.stamp
# (this script's hash): a later run with the same script and the image present does nothing.
set -euo pipefail

if [ $# -ne 1 ]; then
  echo "usage: $0 OUT_DIR" >&2
  exit 2
fi
out=$1
image=$out/debian-12-cloudinit.qcow2
stamp=$out/debian-12-cloudinit.stamp
hash=$(sha256sum "${BASH_SOURCE[0]}" | cut -d' ' -f1)
if [ -s "$image" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$hash" ]; then
  echo "guest image up to date: $image"
  exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "skipped: building the guest image needs root"
  exit 77
fi

label=garm-root
# The Linux build for clouds: it has virtio, ext4, netfilter and overlayfs but none of the
# wireless, sound, GPU or media drivers, a quarter of the size of the generic one, so nothing
# has to be pruned from /lib/modules by hand (and nothing the initramfs needs gets pruned).
# cloud-guest-utils brings growpart: overlays are flavor-sized (disk_gib), larger than this
# image, and cloud-init grows the root partition and ext4 into them on first boot. The SSH
# server is what the user-data's ssh_authorized_keys are for (without it cloud-init also warns
# about every host key it cannot generate).
guest_packages=systemd-sysv,udev,cloud-init,python3-cffi-backend,linux-image-cloud-amd64
guest_packages+=,initramfs-tools,ifupdown,isc-dhcp-client,iproute2,netbase,ca-certificates
guest_packages+=,curl,sudo,cloud-guest-utils,openssh-server

host_packages=(debootstrap debian-archive-keyring grub-pc-bin qemu-utils fdisk e2fsprogs)
# shellcheck source-path=SCRIPTDIR source=apt.sh
. "$(dirname "${BASH_SOURCE[0]}")/apt.sh"
install_missing "${host_packages[@]}"

# shellcheck source-path=SCRIPTDIR source=../../scripts/lib/debian-mirror.sh
. "$(dirname "${BASH_SOURCE[0]}")/../../scripts/lib/debian-mirror.sh"
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

# A stale stamp must not vouch for a half-replaced image.
mkdir -p "$out"
rm -f "$stamp"
start=$SECONDS

echo "debootstrap bookworm from $mirror"
for attempt in 1 2; do
  if debootstrap --variant=minbase --include="$guest_packages" bookworm "$root" "$mirror" \
    >"$work/debootstrap.out" 2>&1; then
    break
  fi
  tail -n 20 "$work/debootstrap.out" "$root/debootstrap/debootstrap.log" 2>/dev/null || true
  [ "$attempt" -lt 2 ] || { echo "FAILED: debootstrap" >&2; exit 1; }
  echo "debootstrap failed, retrying once (a flaky mirror is the usual cause)"
  release_mounts
  rm -rf --one-file-system "$root"
done
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
# The root disk is virtio-blk on PCI (q35) with ext4: the kernel must reach it before the root
# fs is mounted, so each driver is built in or in the initramfs (MODULES=most puts them there).
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
# There is no grub-pc package in the guest (GRUB lives only in the MBR gap) to tell debconf about.
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

# The disk: MBR, one bootable Linux partition from 1 MiB to the end, GRUB in the gap before it.
disk=$work/disk.raw
part_offset=$((2048 * 512))
truncate -s 1G "$disk"
printf 'label: dos\nstart=2048, type=83, bootable\n' | sfdisk -q --no-reread --no-tell-kernel "$disk"
# -E offset writes the file system inside the partition of the raw disk, no partition file or
# dd needed; -d copies the rootfs with owners, modes, hard links and xattrs (we are root).
# metadata_csum_seed is an incompatible feature GRUB 2.06 cannot read: keep it off whatever
# the host's mke2fs.conf says.
mkfs.ext4 -q -F -L "$label" -O ^metadata_csum_seed -E "offset=$part_offset,nodiscard,root_owner=0:0" \
  -d "$root" "$disk" $(((1024 - 1) * 1024))k
e2fsck -fn "$disk?offset=$part_offset" >"$work/fsck.out" 2>&1 ||
  { cat "$work/fsck.out" >&2; echo "FAILED: the new file system does not check clean" >&2; exit 1; }

# GRUB without grub-install: boot.img's default kernel_sector is 1 and diskboot.img's default
# blocklist starts at sector 2 with the length grub-mkimage fills in, so core.img at sector 1
# needs no patching by grub-bios-setup. The embedded config runs in GRUB's rescue parser
# (no normal.mod, no /boot/grub in the guest), so it is a plain list of commands.
cat >"$work/early.cfg" <<CFG
serial --unit=0 --speed=115200
terminal_input serial console
terminal_output serial console
search --no-floppy --label $label --set=root
echo "garm-edge guest image: GRUB boots Linux $kver"
linux /boot/vmlinuz-$kver root=LABEL=$label ro console=tty0 console=ttyS0,115200 net.ifnames=0
initrd /boot/initrd.img-$kver
boot
CFG
grub-mkimage -O i386-pc -o "$work/core.img" -c "$work/early.cfg" -p "(hd0,msdos1)/boot/grub" \
  biosdisk part_msdos ext2 search search_label linux boot echo serial terminal
core_size=$(stat -c %s "$work/core.img")
[ "$core_size" -le $(((2048 - 1) * 512)) ] || { echo "FAILED: core.img ($core_size bytes) does not fit before the partition" >&2; exit 1; }
# Bytes 440..511 of the MBR are the disk id and the partition table sfdisk wrote: keep them.
dd if=/usr/lib/grub/i386-pc/boot.img of="$disk" bs=440 count=1 conv=notrunc status=none
dd if="$work/core.img" of="$disk" bs=512 seek=1 conv=notrunc status=none

qemu-img convert -O qcow2 "$disk" "$work/image.qcow2"
size=$(qemu-img info --output=json "$work/image.qcow2" | sed -n 's/.*"virtual-size": *\([0-9]*\).*/\1/p')
[ "$size" = $((1 << 30)) ] || { echo "FAILED: virtual size $size, not 1 GiB" >&2; exit 1; }
blocks=$(dumpe2fs -h "$disk?offset=$part_offset" 2>/dev/null | awk -F: '/^Block count/ { total = $2 } /^Free blocks/ { free = $2 } END { print total - free }')

# Publish atomically (the partial copy is removed by the trap if this is interrupted), then the
# stamp that makes the next run a no-op.
cp "$work/image.qcow2" "$image.partial"
mv "$image.partial" "$image"
echo "$hash" >"$stamp"
echo "built $image in $((SECONDS - start)) s: kernel $kver, ext4 $((blocks * 4 / 1024)) MiB used, qcow2 $(du -m "$image" | cut -f1) MiB"
