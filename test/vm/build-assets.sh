#!/usr/bin/env bash
# Builds what the GRE test VM boots, into a cache directory (TUNNELGATE_VM_CACHE, default
# /var/cache/tunnelgate-vm); does nothing when the cache is already current. Needs root, apt,
# busybox-static, cpio and kmod (depmod). Prints progress on stderr and, last, the path of the
# `current` file (KVER=, VMLINUX=, INITRD=, HZ=) on stdout.
#
# Why these pieces: this host's kernel has no GRE, so the VM boots Debian's own kernel package.
#   <kver>/vmlinux      the uncompressed kernel ELF: QEMU boots it directly (PVH entry), skipping the
#                       real-mode setup and the decompressor, both slow under software emulation
#   <kver>/modules.cpio.gz  busybox-static plus only the modules the tests need (and their dependencies),
#                       indexed by depmod so the kernel can autoload them (request_module → busybox modprobe)
#   initrd-<kver>-<hash>.cpio.gz  the modules archive with our init appended (the kernel unpacks
#                       concatenated archives), so editing test/vm/init rebuilds only a few bytes
# The 70 MB .deb and its 400 MB module tree are deleted once the pieces are cut out of them.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CACHE=${TUNNELGATE_VM_CACHE:-/var/cache/tunnelgate-vm}
say() { printf 'vm-assets: %s\n' "$*" >&2; }

# Modules the guest needs. Boot: virtio over MMIO (the microvm machine), the 9p host root, the overlay.
# Tests: GRE, nftables NAT, conntrack over netlink (the agent's flush and `conntrack -L`), veth for the
# lab wiring, virtio-net for the port the host reaches the agent on, socket diag for `ss`. Every nftables
# expression module comes too: Debian's 6.1 builds some that newer kernels have built in (nft_objref,
# which the agent's per-tunnel counters need) as modules, and a missing one fails as a bare ENOENT. The flowtable
# types (nf_flow_table_inet: the fast path's flowtables in ip and inet tables) are not an expression: named here.
MODULES=(virtio_mmio 9pnet_virtio 9p overlay virtio_net
  ip_gre nf_tables nft_nat nft_chain_nat nft_ct nf_conntrack_netlink nf_flow_table_inet
  veth tcp_diag udp_diag crc32c_generic crc32c-intel)
for p in busybox-static cpio kmod; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || { say "missing Debian package $p"; exit 1; }
done
mkdir -p "$CACHE"
# One builder at a time (two test runs starting together share the cache).
exec 9>"$CACHE/.lock"
flock 9

# linux-image-amd64 is a meta package; the real one is linux-image-<kver>.
kernel_package() { apt-cache depends linux-image-amd64 2>/dev/null | sed -n 's/^ *Depends: \(linux-image-[0-9].*\)$/\1/p' | head -n1; }
PKG=$(kernel_package)
if [[ -z $PKG ]]; then
  say "apt knows no linux-image-amd64 yet: apt-get update"
  apt-get update -q >&2
  PKG=$(kernel_package)
fi
KVER=${PKG#linux-image-}
KDIR=$CACHE/$KVER
# The kernel pieces are rebuilt when this script changes (the module list is in it).
BUILDER=$(sha256sum "${BASH_SOURCE[0]}" | cut -c1-12)

if [[ $(cat "$KDIR/ready" 2>/dev/null) != "$BUILDER" ]]; then
  t0=$SECONDS
  rm -rf "$KDIR" && mkdir -p "$KDIR/deb"
  chown _apt "$KDIR/deb" 2>/dev/null || true # apt drops privileges while downloading
  say "downloading $PKG (about 70 MB)"
  if ! (cd "$KDIR/deb" && apt-get download -q "$PKG" >&2); then
    # The security archive keeps only the newest build: refresh the lists and take that one.
    say "download failed: apt-get update and retry"
    apt-get update -q >&2
    PKG=$(kernel_package) KVER=${PKG#linux-image-}
    rm -rf "$KDIR"
    KDIR=$CACHE/$KVER
    mkdir -p "$KDIR/deb"
    chown _apt "$KDIR/deb" 2>/dev/null || true
    (cd "$KDIR/deb" && apt-get download -q "$PKG" >&2)
  fi
  say "unpacking $PKG ($((SECONDS - t0)) s so far)"
  X=$KDIR/x
  dpkg-deb -x "$KDIR"/deb/*.deb "$X"
  cp "$X/boot/config-$KVER" "$KDIR/config"
  for opt in NET_IPGRE NF_TABLES NFT_NAT NF_CT_NETLINK VIRTIO_MMIO NET_9P_VIRTIO 9P_FS OVERLAY_FS VETH; do
    grep -Eq "^CONFIG_$opt=[ym]$" "$KDIR/config" || { say "kernel $KVER lacks CONFIG_$opt"; exit 1; }
  done

  # vmlinux: the bzImage carries it as one compressed stream; find the stream's magic and inflate it.
  img=$X/boot/vmlinuz-$KVER
  for codec in 'xz:\xfd7zXZ\x00' 'zstd:\x28\xb5\x2f\xfd' 'gzip:\x1f\x8b\x08'; do
    tool=${codec%%:*}
    at=$(LC_ALL=C grep -obUaP -m1 "${codec#*:}" "$img" | head -n1 | cut -d: -f1 || true)
    [[ -n $at ]] || continue
    tail -c "+$((at + 1))" "$img" | "$tool" -dc >"$KDIR/vmlinux" 2>/dev/null || true
    [[ $(head -c 4 "$KDIR/vmlinux" | od -An -tx1 | tr -d ' \n') == 7f454c46 ]] && break
    rm -f "$KDIR/vmlinux"
  done
  [[ -f $KDIR/vmlinux ]] || { say "found no ELF kernel inside $img"; exit 1; }

  # The modules archive: busybox (every applet a link to it), the chosen modules with what they depend on.
  say "building the modules archive"
  depmod -b "$X" "$KVER"
  MD=$X/lib/modules/$KVER
  mapfile -t -O "${#MODULES[@]}" MODULES < <(find "$MD/kernel/net" -name 'nft_*.ko*' -printf '%f\n' | sed 's/\.ko.*//')
  S=$KDIR/stage
  mkdir -p "$S"/{bin,sbin,usr/bin,usr/sbin,proc,sys,dev,host,upper,newroot,etc,lib/modules/"$KVER"}
  cp /bin/busybox "$S/bin/busybox"
  for applet in $("$S/bin/busybox" --list-full); do [[ -e $S/$applet ]] || ln -s /bin/busybox "$S/$applet"; done
  for m in "${MODULES[@]}"; do
    path=$(modinfo -b "$X" -k "$KVER" -n "$m")
    rel=${path#"$MD"/}
    # modules.dep lists every module this one needs, transitively.
    for f in "$rel" $(sed -n "s|^$rel: *||p" "$MD/modules.dep"); do
      mkdir -p "$S/lib/modules/$KVER/$(dirname "$f")"
      cp -n "$MD/$f" "$S/lib/modules/$KVER/$f"
    done
  done
  cp "$MD"/modules.builtin "$MD"/modules.builtin.modinfo "$MD"/modules.order "$S/lib/modules/$KVER/"
  depmod -b "$S" "$KVER"
  (cd "$S" && find . -print0 | cpio --null -o -H newc -R 0:0 --quiet | gzip -1) >"$KDIR/modules.cpio.gz"
  sed -n 's/^CONFIG_HZ=//p' "$KDIR/config" >"$KDIR/hz"
  rm -rf "$X" "$S" "$KDIR/deb"
  echo "$BUILDER" >"$KDIR/ready"
  say "kernel $KVER ready in $((SECONDS - t0)) s ($(du -sh "$KDIR" | cut -f1) in $KDIR)"
fi

# Our init goes last, in an archive of its own (tiny, rebuilt whenever test/vm/init changes).
HASH=$(cat "$HERE/init" "$KDIR/ready" | sha256sum | cut -c1-12)
INITRD=$CACHE/initrd-$KVER-$HASH.cpio.gz
if [[ ! -f $INITRD ]]; then
  S=$(mktemp -d)
  install -m 0755 "$HERE/init" "$S/init"
  (cd "$S" && echo init | cpio -o -H newc -R 0:0 --quiet | gzip -1) >"$S/init.cpio.gz"
  cat "$KDIR/modules.cpio.gz" "$S/init.cpio.gz" >"$INITRD.tmp" && mv "$INITRD.tmp" "$INITRD"
  rm -rf "$S"
  find "$CACHE" -maxdepth 1 -name "initrd-*.cpio.gz" ! -path "$INITRD" -delete
fi

printf 'KVER=%s\nVMLINUX=%s\nINITRD=%s\nHZ=%s\n' "$KVER" "$KDIR/vmlinux" "$INITRD" "$(cat "$KDIR/hz")" >"$CACHE/current.tmp"
mv "$CACHE/current.tmp" "$CACHE/current"
echo "$CACHE/current"
