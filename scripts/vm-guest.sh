#!/usr/bin/env bash
# Builds a small virtual machine guest for the tests and benchmarks that boot one (a real
# virtio-net guest behind a qbridge port): Debian's own kernel (downloaded with apt-get, never
# installed) and an initramfs of busybox-static, iperf3 and ethtool (their libraries copied
# in). Everything comes from Debian's packages; nothing else is fetched.
#
#   scripts/vm-guest.sh [DIR]      (default DIR: target/vm; prints the kernel to boot, DIR's
#                                   vmlinux or vmlinuz, and DIR/initrd.gz)
#
# The guest's /init loads the virtio modules (virtio_ring … virtio_net, in dependency order),
# sets eth0 up with the address of the kernel command line (`qb.ip=10.0.0.5/24`), prints
# `QB-READY`, and then runs each line it reads on the serial console as a shell command,
# answering `QB-DONE STATUS` after its output (stty -echo: what it prints is only the output).
# Run it with `qemu-system-x86_64 -accel tcg -kernel DIR/vmlinux -initrd DIR/initrd.gz
# -append "console=ttyS0 quiet qb.ip=…" -serial stdio -display none -netdev tap,…
# -device virtio-net-pci,…`. Idempotent: an existing image is kept (delete DIR to rebuild).
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-target/vm}
# vmlinuz's kernel, decompressed: an ELF with a PVH entry point, which qemu boots directly
# (`-kernel vmlinux`), saving the 3-4 s the guest takes to decompress itself under TCG. Only
# when vmlinuz is xz-compressed (Debian's are) and xz is there; else the guest boots vmlinuz.
elf() {
    [ -s "$dir/vmlinux" ] && return 0
    local off
    off=$(LC_ALL=C grep -obUaP '\xfd7zXZ\x00' "$dir/vmlinuz" | head -n 1 | cut -d: -f1) || true
    { [ -n "$off" ] && command -v xz >/dev/null; } || return 0
    # xz stops at the stream's end and complains of what follows it.
    tail -c +$((off + 1)) "$dir/vmlinuz" | xz -dcq >"$dir/vmlinux.tmp" 2>/dev/null || true
    if [ "$(head -c 4 "$dir/vmlinux.tmp" | od -An -c | tr -d ' ')" = '177ELF' ]; then
        mv "$dir/vmlinux.tmp" "$dir/vmlinux"
    else
        rm -f "$dir/vmlinux.tmp"
    fi
}
# What to boot: "KERNEL INITRD".
show() {
    if [ -s "$dir/vmlinux" ]; then
        echo "$dir/vmlinux $dir/initrd.gz"
    else
        echo "$dir/vmlinuz $dir/initrd.gz"
    fi
}
if [ -s "$dir/vmlinuz" ] && [ -s "$dir/initrd.gz" ]; then
    elf
    show
    exit 0
fi
for t in apt-get dpkg-deb gzip; do
    command -v $t >/dev/null || { echo "vm-guest.sh: $t is missing" >&2; exit 1; }
done
for f in /bin/busybox /usr/bin/iperf3 /usr/sbin/ethtool; do
    [ -x $f ] || { echo "vm-guest.sh: $f is missing (scripts/deps.sh's tests group installs it)" >&2; exit 1; }
done
mkdir -p "$dir"
work=$(mktemp -d "$dir/build.XXXXXX")
trap 'rm -rf "$work"' EXIT

# The newest generic 6.1 kernel image the archive has (not -cloud or -rt).
pkg=$(apt-cache search --names-only '^linux-image-[0-9.]+-[0-9]+-amd64$' 2>/dev/null |
    awk '{print $1}' | sort -V | tail -n 1)
if [ -z "$pkg" ]; then
    apt-get update -qq >/dev/null 2>&1 || true
    pkg=$(apt-cache search --names-only '^linux-image-[0-9.]+-[0-9]+-amd64$' |
        awk '{print $1}' | sort -V | tail -n 1)
fi
[ -n "$pkg" ] || { echo "vm-guest.sh: no linux-image package found" >&2; exit 1; }
(cd "$work" && apt-get download "$pkg" >/dev/null 2>&1)
dpkg-deb -x "$work"/"$pkg"_*.deb "$work/k"
kver=${pkg#linux-image-}
cp "$work/k/boot/vmlinuz-$kver" "$work/vmlinuz"

root=$work/root
mkdir -p "$root"/{bin,sbin,lib,lib64,proc,sys,dev,tmp,etc,lib/modules,usr/lib}
cp /bin/busybox "$root/bin/busybox"
for a in $("$root/bin/busybox" --list); do
    [ -e "$root/bin/$a" ] || ln -s busybox "$root/bin/$a"
done
for m in virtio_ring virtio virtio_pci_modern_dev virtio_pci_legacy_dev virtio_pci failover \
    net_failover virtio_net; do
    f=$(find "$work/k/lib/modules/$kver" -name "$m.ko*" | head -n 1)
    [ -n "$f" ] || { echo "vm-guest.sh: module $m not in $pkg" >&2; exit 1; }
    case "$f" in
        *.ko.xz) xz -dc "$f" >"$root/lib/modules/$m.ko" ;;
        *.ko.zst) zstd -qdc "$f" >"$root/lib/modules/$m.ko" ;;
        *) cp "$f" "$root/lib/modules/$m.ko" ;;
    esac
done
# iperf3 and ethtool with the libraries ldd names (same paths inside).
for b in /usr/bin/iperf3 /usr/sbin/ethtool; do
    cp "$b" "$root/bin/"
    for l in $(ldd "$b" | grep -oE '/[^ ]+\.so[^ ]*'); do
        mkdir -p "$root$(dirname "$l")"
        cp -L "$l" "$root$l"
    done
done
cat >"$root/init" <<'EOF'
#!/bin/sh
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev 2>/dev/null
mount -t tmpfs tmp /tmp
for m in virtio_ring virtio virtio_pci_modern_dev virtio_pci_legacy_dev virtio_pci failover net_failover virtio_net; do
    insmod /lib/modules/$m.ko 2>/dev/null
done
ip=
for w in $(cat /proc/cmdline); do
    case "$w" in qb.ip=*) ip=${w#qb.ip=} ;; esac
done
ip link set lo up
n=0
while [ ! -e /sys/class/net/eth0 ] && [ $n -lt 50 ]; do sleep 0.1; n=$((n + 1)); done
ip link set eth0 up
[ -n "$ip" ] && ip addr add "$ip" dev eth0
stty -echo -F /dev/ttyS0 2>/dev/null
echo QB-READY >/dev/ttyS0
while read -r line </dev/ttyS0; do
    sh -c "$line" >/dev/ttyS0 2>&1 </dev/null
    echo "QB-DONE $?" >/dev/ttyS0
done
poweroff -f
EOF
chmod 755 "$root/init"
(cd "$root" && find . | /bin/busybox cpio -o -H newc 2>/dev/null | gzip -1) >"$work/initrd.gz"
mv "$work/vmlinuz" "$dir/vmlinuz"
mv "$work/initrd.gz" "$dir/initrd.gz"
elf
show
