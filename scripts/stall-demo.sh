#!/usr/bin/env bash
# Reproduces the seed's mmap-vs-buffered stall pattern on one box (root):
# a loop-mounted ext4 on a sparse image, its writes capped at 50 MiB/s with
# the cgroup v1 blkio throttle, dirty limits lowered to 256M/64M; then
# stallscope mmap and buffered (4 threads, 15 s each) and an uncapped tmpfs
# run (10 s). Every change is undone on exit, error or Ctrl-C.
#
# Usage: sudo scripts/stall-demo.sh [fs=ext4] [cap_bytes_per_s=52428800]
set -euo pipefail
fs=${1:-ext4}
cap=${2:-52428800}
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "needs root (loop devices, mount, sysctls)" >&2; exit 1; }
command -v "mkfs.$fs" >/dev/null || { echo "mkfs.$fs missing (apt-get install e2fsprogs/xfsprogs/btrfs-progs)" >&2; exit 1; }
cargo build --release --quiet
bin=${CARGO_TARGET_DIR:-$PWD/target}/release/stallscope

work=$(mktemp -d /var/tmp/stall-demo.XXXXXX)
vm=/proc/sys/vm
orig_db=$(cat $vm/dirty_bytes) orig_dr=$(cat $vm/dirty_ratio)
orig_bb=$(cat $vm/dirty_background_bytes) orig_br=$(cat $vm/dirty_background_ratio)
dev="" majmin=""
cleanup() {
  set +e
  [ -n "$majmin" ] && echo "$majmin 0" > /sys/fs/cgroup/blkio/blkio.throttle.write_bps_device
  if [ "$orig_bb" != 0 ]; then echo "$orig_bb" > $vm/dirty_background_bytes; else echo "$orig_br" > $vm/dirty_background_ratio; fi
  if [ "$orig_db" != 0 ]; then echo "$orig_db" > $vm/dirty_bytes; else echo "$orig_dr" > $vm/dirty_ratio; fi
  mountpoint -q "$work/mnt" && umount "$work/mnt"
  [ -n "$dev" ] && losetup -d "$dev"
  rm -rf "$work"
}
trap cleanup EXIT INT TERM HUP

truncate -s 4G "$work/$fs.img"
dev=$(losetup --direct-io=on -f --show "$work/$fs.img")
"mkfs.$fs" -q $([ "$fs" = ext4 ] && echo -F || echo -f) "$dev" >/dev/null
mkdir -p "$work/mnt" && mount "$dev" "$work/mnt"
mm=$(stat -L -c '%t:%T' "$dev"); majmin=$((16#${mm%%:*})):$((16#${mm##*:}))
echo "$majmin $cap" > /sys/fs/cgroup/blkio/blkio.throttle.write_bps_device
echo $((64 << 20)) > $vm/dirty_background_bytes
echo $((256 << 20)) > $vm/dirty_bytes
echo "== $fs on $dev ($majmin), writes capped at $((cap >> 20)) MiB/s, dirty 256M / background 64M"

for mode in mmap buffered; do
  echo; echo "== $mode, 4 threads, 15 s"
  "$bin" run --target "$work/mnt" --mode "$mode" --threads 4 --duration 15s --disk-budget 3GiB \
    | grep -E '^(summary|latency|stalls by cause)|~ stall' | tail -n 8
done
shm=$(mktemp -d /dev/shm/stall-demo.XXXXXX)
echo; echo "== uncapped tmpfs, mmap, 4 threads, 10 s"
"$bin" run --target "$shm" --mode mmap --threads 4 --duration 10s | grep -E '^(summary|latency)'
rmdir "$shm"
