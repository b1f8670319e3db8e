#!/usr/bin/env bash
# Test stallscope for real in a Debian 12 guest (its 6.1 kernel, cgroup v2
# only) under QEMU with TCG (no hardware virtualisation needed).
#
#   sudo scripts/vm-test.sh [--binary PATH] [--keep] [--shell] [--save-fixtures]
#                           [--rebuild] [--timeout SECS] [--accel auto|kvm|tcg]
#                           [--tests LIST] [--no-checks]
#
#   --binary PATH     test this stallscope binary (default: `cargo build
#                     --release` in this checkout, target/release/stallscope)
#   --tests LIST      also run test binaries of this checkout in the guest,
#                     after the checks: built here (`cargo test --release
#                     --no-run`), copied into the guest with the stallscope
#                     binary they were built with and the sources they read,
#                     all at the same absolute paths, and run there one after
#                     another from the checkout's folder as root with
#                     STALLSCOPE_REQUIRE_ROOT_TESTS=1 (as cargo would). LIST:
#                     comma-separated names (NAME for tests/NAME.rs, `lib` for
#                     the crate's unit tests), `ci` (CI's set, CI_TESTS below)
#                     or `all` (every test binary, the README's whole suite).
#                     Each binary is a check of its own: `test:NAME`, with its
#                     counts, its failed tests and its time
#   --no-checks       skip the checks of vm-guest.sh (with --tests: the tests
#                     alone; the tracefs fixtures are not made then)
#   --accel A         kvm, tcg, or auto (the default): KVM when /dev/kvm can
#                     be opened and a guest ran under it here before (or, the
#                     first time, does: a guest that dies of a KVM error is
#                     booted again under TCG and KVM is not tried again on
#                     this host kernel; the verdict is kept in the cache)
#   --keep            keep the run's temp dir (serial logs, run outputs)
#   --shell           boot the guest set up as for the tests (cgroups, disks)
#                     but give a root shell on this terminal instead of the
#                     tests; `exit` ends it (and the guest)
#   --save-fixtures   copy the guest kernel's tracefs format files and
#                     /proc/PID/stack texts into tests/fixtures/kernels/<x.y>/
#   --rebuild         build the guest image again even if it is cached
#   --timeout SECS    hard limit on the guest's whole boot (default 1500,
#                     5400 with --tests)
#   --build-only      make sure qemu and the cached image are there, then stop
#
# What runs in the guest is scripts/vm-guest.sh (see there): probe, the
# README's first-stall walk (lab up, a dashboard frame in tmux, run against
# the capped lab, lab down and the guest as it was), PostgreSQL observed
# under pgbench, and the kernel's tracefs format files for fixtures. Each
# check prints `VMTEST PASS|FAIL <name> <figures>` on the guest's second
# serial port; this script collects them. Exit 0 only when every check
# passed; the last line says what was checked.
#
# The checks (scripts/vm-guest.sh): probe; lab-up, dashboard, lab-cap (median
# written MiB/s after 10 s within 10 % of 20), throttle-stall (the first
# high-confidence dirty_throttle stall within 10 s), lab-down-clean (cgroup
# tree and controllers, io.max, dirty sysctls, mounts, loop devices as
# before lab up); pg-lab-up, pg-sched-timing (every `observed` line timed
# "sched"), pg-sync-stalls, pg-call-bounds (fsync/fdatasync stalls bounded
# by their call), pg-lab-down-clean; fixtures. When a lab up
# cannot cap, a DIAG (no check) caps by hand the cgroup-v2 way.
#
# Measured 2026-12-04 on a 2-core host: a cold image build 95-121 s (whole
# cold run 5m16s); with the image cached a run takes 3m10s-3m45s (4m30s
# when lab up cannot cap and the diagnostic runs). 2026-12-06, image v2 (the
# test binaries' packages): a cold build 339 s; the checks and `--tests ci`
# 4m36s under TCG (lab 25 s, chains 14 s).
#
# Needs root, ~1.3 GiB in the cache, network access to the Debian mirror
# for a cold build (debootstrap; apt-get installs debootstrap if missing).
#
# CACHE (deliberate, survives runs): /var/cache/stallscope-vm/ (or
# $STALLSCOPE_VM_CACHE)
#   $IMAGE_VERSION/   root.img (sparse raw ext4, 16 GiB apparent, ~1.3 GiB
#                     used), vmlinuz, initrd.img, build.txt (how long the
#                     cold build took). Change IMAGE_VERSION below when the
#                     package list or the image's init changes.
#   qemu-deb12/       qemu-system-x86 unpacked with `dpkg -x` (only when no
#                     qemu-system-x86_64 is on PATH: installing the package
#                     would remove a backported qemu-utils on our machines)
# `rm -rf /var/cache/stallscope-vm` removes all of it. Nothing else is left
# on the host: the guest boots with -snapshot (the cached image is never
# written), the temp dir is removed, qemu is killed on every exit path.
set -euo pipefail

IMAGE_VERSION=bookworm-v2
SUITE=bookworm
# v2: what the test binaries need (--tests): btrfs-progs, rocksdb-tools
# (db_bench), etcd-server, gcc and libc6-dev (tests/call_bounds.rs compiles a
# log writer), prometheus (promtool, tests/metrics.rs), iproute2 (loopback up
# for the servers they start).
GUEST_PKGS="linux-image-amd64,initramfs-tools,postgresql,xfsprogs,tmux,procps,util-linux,kmod,e2fsprogs,jq,psmisc,btrfs-progs,rocksdb-tools,etcd-server,gcc,libc6-dev,prometheus,iproute2"
# The test binaries CI runs in the guest (--tests ci): the lab's own moves
# and caps on v2 (lab), and a test process that joins the lab's group and is
# capped there (chains). The other root tests measure against a real server
# or the kernel under 20-100 ms thresholds and fail under TCG, 5-10x slower
# than the host (docs/where-it-runs.md's test section lists them with their reasons).
CI_TESTS="lab,chains"

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)
cache=${STALLSCOPE_VM_CACHE:-/var/cache/stallscope-vm}
binary=""
keep=0
shell=0
save_fixtures=0
rebuild=0
build_only=0
boot_timeout=""
tests=""
checks=1
accel=auto

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; }
while [ $# -gt 0 ]; do
  case $1 in
    --binary) binary=$(realpath "$2"); shift 2 ;;
    --keep) keep=1; shift ;;
    --shell) shell=1; shift ;;
    --save-fixtures) save_fixtures=1; shift ;;
    --rebuild) rebuild=1; shift ;;
    --build-only) build_only=1; shift ;;
    --timeout) boot_timeout=$2; shift 2 ;;
    --tests) tests=$2; shift 2 ;;
    --no-checks) checks=0; shift ;;
    --accel) accel=$2; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "vm-test: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done

say() { printf 'vm-test: %s\n' "$*" >&2; }
die() { say "error: $*"; exit 1; }
[ "$(id -u)" = 0 ] || die "needs root (debootstrap, chroot); run with sudo"
case $accel in auto|kvm|tcg) ;; *) die "--accel takes auto, kvm or tcg" ;; esac
[ "$checks" = 1 ] || [ -n "$tests" ] || die "--no-checks leaves nothing to run without --tests"
[ "$tests" != ci ] || tests=$CI_TESTS
[ -n "$boot_timeout" ] || boot_timeout=$([ -n "$tests" ] && echo 5400 || echo 1500)

t_start=$(date +%s)
tmp=$(mktemp -d /tmp/stallscope-vm.XXXXXX)
qemu_pid=""
tail_pid=""
cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  if [ -n "$qemu_pid" ] && kill -0 "$qemu_pid" 2>/dev/null; then
    kill "$qemu_pid" 2>/dev/null || true
    sleep 1
    kill -9 "$qemu_pid" 2>/dev/null || true
  fi
  # The progress pipeline's tail follows qemu (--pid) and ends with it.
  if [ -n "$tail_pid" ]; then wait "$tail_pid" 2>/dev/null || true; fi
  if [ "$keep" = 1 ]; then say "kept $tmp"; else rm -rf "$tmp"; fi
  exit "$rc"
}
trap cleanup EXIT
trap 'say interrupted; exit 130' INT TERM

# --- qemu -----------------------------------------------------------------
qemu=() # the command, with its environment
find_qemu() {
  if command -v qemu-system-x86_64 >/dev/null; then
    qemu=(qemu-system-x86_64)
    return
  fi
  local q=$cache/qemu-deb12
  if [ ! -x "$q/root/usr/bin/qemu-system-x86_64" ]; then
    say "qemu-system-x86_64 not found: unpacking Debian's qemu-system-x86 into $q (apt-get download + dpkg -x)"
    rm -rf "$q.part"
    mkdir -p "$q.part/debs"
    local pkgs
    pkgs=$(apt-get install -s --no-install-recommends qemu-system-x86 2>/dev/null | awk '/^Inst /{print $2}') || true
    if [ -z "$pkgs" ]; then
      apt-get update -qq
      pkgs=$(apt-get install -s --no-install-recommends qemu-system-x86 | awk '/^Inst /{print $2}')
    fi
    # shellcheck disable=SC2086
    if ! (cd "$q.part/debs" && apt-get download -q $pkgs >../download.log 2>&1); then
      cat "$q.part/download.log" >&2
      die "apt-get download of qemu-system-x86 failed"
    fi
    local d
    for d in "$q.part"/debs/*.deb; do dpkg -x "$d" "$q.part/root"; done
    rm -rf "$q.part/debs" "$q.part/download.log" "$q"
    mv "$q.part" "$q"
  fi
  qemu=(env "LD_LIBRARY_PATH=$q/root/usr/lib/x86_64-linux-gnu:$q/root/lib/x86_64-linux-gnu"
    "$q/root/usr/bin/qemu-system-x86_64" -L "$q/root/usr/share/qemu" -L "$q/root/usr/share/seabios")
}

# --- the guest image --------------------------------------------------------
img=$cache/$IMAGE_VERSION
mirror() {
  # The mirror this host's apt uses (deb822 URIs: or one-line deb), else deb.debian.org.
  local m
  m=$(grep -hs -E '^URIs:' /etc/apt/sources.list.d/*.sources 2>/dev/null | awk '{print $2}' | grep -m1 -E '/debian/?$' || true)
  [ -n "$m" ] || m=$(grep -hs -E '^deb ' /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null |
    awk '{for (i=2;i<=NF;i++) if ($i ~ /^https?:/) {print $i; exit}}' | grep -m1 -E '/debian/?$' || true)
  echo "${m:-http://deb.debian.org/debian}"
}

build_image() {
  local t0 part root m
  t0=$(date +%s)
  part=$img.part
  root=$part/root
  if ! command -v debootstrap >/dev/null; then
    say "installing debootstrap (apt-get)"
    apt-get install -y -qq debootstrap >/dev/null 2>&1 ||
      { apt-get update -qq && apt-get install -y -qq debootstrap >/dev/null; }
  fi
  command -v mkfs.ext4 >/dev/null || die "mkfs.ext4 missing (apt-get install e2fsprogs)"
  m=$(mirror)
  rm -rf "$part"
  mkdir -p "$root"
  say "image: debootstrap --variant=minbase $SUITE from $m (a few minutes)"
  # A private mount namespace: whatever debootstrap and the chroot mount
  # (proc, sys) goes away with them, even if this script is killed.
  unshare --mount --propagation private \
    debootstrap --variant=minbase "$SUITE" "$root" "$m" >"$part/debootstrap.log" 2>&1 ||
    { tail -20 "$part/debootstrap.log" >&2; die "debootstrap failed (log: $part/debootstrap.log)"; }
  say "image: apt-get install in the chroot: ${GUEST_PKGS//,/ }"
  printf '#!/bin/sh\nexit 101\n' >"$root/usr/sbin/policy-rc.d"
  chmod 755 "$root/usr/sbin/policy-rc.d"
  mkdir -p "$root/etc/postgresql-common"
  echo "create_main_cluster = false" >"$root/etc/postgresql-common/createcluster.conf"
  # shellcheck disable=SC2016 # expanded by that sh, from its arguments
  unshare --mount --propagation private sh -c '
    set -e
    mount -t proc proc "$1/proc"
    mount -t sysfs sys "$1/sys"
    mount -t tmpfs tmpfs "$1/tmp"
    chroot "$1" env DEBIAN_FRONTEND=noninteractive LC_ALL=C.UTF-8 \
      apt-get install -y --no-install-recommends $(echo "$2" | tr , " ")
    chroot "$1" apt-get clean
  ' sh "$root" "$GUEST_PKGS" >"$part/apt.log" 2>&1 ||
    { tail -30 "$part/apt.log" >&2; die "apt-get in the chroot failed (log: $part/apt.log)"; }
  rm -f "$root/usr/sbin/policy-rc.d"
  rm -rf "$root/var/lib/apt/lists/"* "$root/var/cache/apt/"*.bin
  # The guest's own init: mounts the test disk and hands over to the
  # vm-guest.sh shipped on it (so changing the tests needs no new image).
  cat >"$root/stallscope-init" <<'EOF'
#!/bin/sh
# PID 1 of the stallscope test guest (scripts/vm-test.sh).
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
mountpoint -q /proc || mount -t proc proc /proc
mountpoint -q /sys || mount -t sysfs sys /sys
mountpoint -q /dev || mount -t devtmpfs dev /dev
mkdir -p /vmtest
if mount -o ro /dev/vdb /vmtest && [ -x /vmtest/vm-guest.sh ]; then
  exec /vmtest/vm-guest.sh init
fi
echo "stallscope-init: no test disk (/dev/vdb with vm-guest.sh); powering off" >/dev/console
echo o >/proc/sysrq-trigger
sleep 30
EOF
  chmod 755 "$root/stallscope-init"
  echo stallscope-vm >"$root/etc/hostname"
  printf '127.0.0.1 localhost\n127.0.1.1 stallscope-vm\n' >"$root/etc/hosts"
  : >"$root/etc/fstab"
  local kver
  kver=$(basename "$(ls -d "$root"/lib/modules/*)")
  cp "$root/boot/vmlinuz-$kver" "$part/vmlinuz"
  cp "$root/boot/initrd.img-$kver" "$part/initrd.img"
  # The initrd must mount the root itself: virtio_blk and ext4.
  if command -v lsinitramfs >/dev/null; then
    lsinitramfs "$part/initrd.img" | grep -q 'virtio_blk.ko' || die "initrd has no virtio_blk"
  fi
  say "image: mkfs.ext4 -d (16 GiB sparse root image, no loop device)"
  truncate -s 16G "$part/root.img"
  mkfs.ext4 -q -F -L stallscope-vm -d "$root" "$part/root.img"
  rm -rf "$root"
  local t1=$(($(date +%s) - t0))
  printf 'built %s by scripts/vm-test.sh: Debian %s (%s), kernel %s, cold build %d s\n' \
    "$(date -u +%FT%TZ)" "$SUITE" "$IMAGE_VERSION" "$kver" "$t1" >"$part/build.txt"
  echo "$kver" >"$part/kernel-version"
  rm -rf "$img"
  mv "$part" "$img"
  say "image: cold build took ${t1} s ($(du -sh "$img" | cut -f1) on disk in $img)"
}

# --- the test binaries (--tests) -------------------------------------------------
# Builds them and lists the chosen ones in $tmp/tests.list ("NAME PATH", in
# cargo's order: lib, bin, then tests by name); sets target (cargo's folder).
build_tests() {
  local want=$1 json=$tmp/cargo-test.json all n
  say "cargo test --release --no-run in $repo"
  (cd "$repo" && cargo test --release --no-run --message-format=json -q >"$json") ||
    die "cargo test --no-run failed"
  all=$(jq -r 'select(.reason == "compiler-artifact" and .profile.test and .executable != null)
      | "\(if .target.kind[0] == "test" then .target.name else .target.kind[0] end) \(.executable)"' "$json" |
    awk '{print ($1 == "lib" ? 0 : $1 == "bin" ? 1 : 2), $0}' | sort -k1,1n -k2,2 | cut -d' ' -f2-)
  if [ "$want" = all ]; then
    echo "$all" >"$tmp/tests.list"
  else
    : >"$tmp/tests.list"
    for n in ${want//,/ }; do
      grep -m1 "^$n " <<<"$all" >>"$tmp/tests.list" || die "--tests: no test binary $n (have: $(cut -d' ' -f1 <<<"$all" | tr '\n' ' '))"
    done
  fi
  target=$(cd "$repo" && cargo metadata --format-version 1 --no-deps | jq -r .target_directory)
}

# The test disk's part for --tests: tests.tar (the binaries, the stallscope
# binary built with them, the checkout's sources and fixtures, at their
# absolute paths), tests.list, tests.repo (the folder they run from).
pack_tests() {
  local d=$1 f paths=()
  [ -x "$target/release/stallscope" ] || die "no $target/release/stallscope beside the tests"
  cp "$tmp/tests.list" "$d/tests.list"
  echo "$repo" >"$d/tests.repo"
  for f in Cargo.toml Cargo.lock README.md ARCHITECTURE.md clippy.toml src tests scripts assets examples benches; do
    [ -e "$repo/$f" ] && paths+=("${repo#/}/$f")
  done
  paths+=("${target#/}/release/stallscope")
  while read -r _ f; do paths+=("${f#/}"); done <"$tmp/tests.list"
  tar -C / -cf "$d/tests.tar" "${paths[@]}"
  say "test disk: $(wc -l <"$tmp/tests.list") test binaries ($(cut -d' ' -f1 "$tmp/tests.list" | tr '\n' ' ')), $(du -sh "$d/tests.tar" | cut -f1)"
}

# --- main -------------------------------------------------------------------
if [ -n "$tests" ] && [ "$build_only" = 0 ]; then
  build_tests "$tests"
  # The checks test the binary built with the tests unless told otherwise.
  [ -n "$binary" ] || binary=$target/release/stallscope
fi
if [ "$build_only" = 1 ]; then
  :
elif [ -z "$binary" ]; then
  say "cargo build --release in $repo"
  (cd "$repo" && cargo build --release -q)
  binary=$(cd "$repo" && cargo metadata --format-version 1 --no-deps | jq -r .target_directory)/release/stallscope
fi
if [ "$build_only" = 0 ]; then
  [ -x "$binary" ] || die "no binary at $binary"
  [ -f "$here/vm-guest.sh" ] || die "missing $here/vm-guest.sh"
fi

find_qemu
if [ "$rebuild" = 1 ] || [ ! -f "$img/root.img" ]; then
  say "no cached image in $img: building it (cold build)"
  build_image
else
  say "cached image: $(cat "$img/build.txt")"
fi
kver=$(cat "$img/kernel-version")
[ "$build_only" = 0 ] || { say "image and qemu ready (--build-only)"; exit 0; }

say "test disk: $binary and vm-guest.sh (mkfs.ext4 -d)"
mkdir -p "$tmp/disk" "$tmp/qtmp"
cp "$binary" "$tmp/disk/stallscope"
cp "$here/vm-guest.sh" "$here/pg-lab.sh" "$tmp/disk/"
chmod 755 "$tmp/disk/stallscope" "$tmp/disk/vm-guest.sh"
[ -z "$tests" ] || pack_tests "$tmp/disk"
echo "$checks" >"$tmp/disk/checks"
"$binary" --version >"$tmp/disk/binary-version" 2>/dev/null || echo unknown >"$tmp/disk/binary-version"
disk_mib=$(($(du -sm "$tmp/disk" | cut -f1) + 32))
truncate -s "${disk_mib}M" "$tmp/test.img"
mkfs.ext4 -q -F -L vmtest -d "$tmp/disk" "$tmp/test.img"

append="root=/dev/vda rw console=ttyS0 init=/stallscope-init panic=-1 loglevel=4 vmtest.epoch=$(date +%s) vmtest.shell=$shell"
# The accelerator: KVM where /dev/kvm opens and this guest's kernel boots
# under it here, else TCG. Whether it boots is tried once per host kernel
# (a boot without the test disk, whose init says so and powers off) and
# kept in the cache: on our machines' kvm_pvm the Debian kernel hangs right
# after it is decompressed.
kvm_verdict=$cache/kvm-verdict-$(uname -r)
kvm_opens() { [ -c /dev/kvm ] && { : <>/dev/kvm; } 2>/dev/null; }
kvm_boots() {
  local log=$tmp/kvm-probe.log
  : >"$log"
  # (in a subshell: the shell's own "Aborted" of a qemu that asserts goes to the log too)
  (TMPDIR=$tmp/qtmp timeout -k 5 45 "${qemu[@]}" -accel kvm -cpu host -m 1G -smp 2 \
    -display none -vga none -nic none -no-reboot -snapshot \
    -kernel "$img/vmlinuz" -initrd "$img/initrd.img" \
    -append "root=/dev/vda rw console=ttyS0 init=/stallscope-init panic=-1 loglevel=4" \
    -drive "file=$img/root.img,format=raw,if=virtio" -serial "file:$log") >"$log.err" 2>&1 || true
  grep -q 'stallscope-init: no test disk' "$log"
}
if [ "$accel" = auto ]; then
  if ! kvm_opens; then
    accel=tcg
    say "accel: TCG (/dev/kvm cannot be opened here)"
  else
    if [ ! -s "$kvm_verdict" ]; then
      say "accel: does the guest's kernel boot under KVM here? (once per host kernel, up to 45 s)"
      if kvm_boots; then echo boots >"$kvm_verdict"; else echo fails >"$kvm_verdict"; fi
    fi
    if [ "$(cat "$kvm_verdict")" = boots ]; then
      accel=kvm-try
    else
      accel=tcg
      say "accel: TCG (the guest's kernel did not boot under KVM on this host kernel: $kvm_verdict; rm it to try again)"
    fi
  fi
elif [ "$accel" = kvm ] && ! kvm_opens; then
  die "--accel kvm: /dev/kvm cannot be opened"
fi
qargs_for() { # accel -> sets qargs
  local a=(-accel tcg,thread=multi -cpu max)
  [ "$1" = tcg ] || a=(-accel kvm -cpu host)
  # shellcheck disable=SC2054 # the commas are qemu's
  qargs=("${a[@]}" -m 4G -smp 2
    -display none -vga none -nic none -no-reboot -snapshot
    -kernel "$img/vmlinuz" -initrd "$img/initrd.img" -append "$append"
    -drive "file=$img/root.img,format=raw,if=virtio"
    -drive "file=$tmp/test.img,format=raw,if=virtio,readonly=on"
    -rtc base=utc)
}

if [ "$shell" = 1 ]; then
  [ "$accel" != kvm-try ] || accel=kvm
  qargs_for "$accel"
  say "booting a shell ($accel; ttyS0 here; exit ends the guest, Ctrl-A X quits qemu)"
  TMPDIR=$tmp/qtmp timeout -k 10 "$boot_timeout" "${qemu[@]}" "${qargs[@]}" \
    -serial mon:stdio -serial "file:$tmp/guest.log" || true
  exit 0
fi

# One boot of the guest under $1; sets qrc, t_guest, used_accel and $tmp/guest.txt.
boot() {
  used_accel=$1
  qargs_for "$1"
  : >"$tmp/guest.log"
  : >"$tmp/console.log"
  say "booting the guest (${1^^}, 2 vCPUs, 4 GiB; kernel $kver; limit ${boot_timeout} s)"
  t_boot=$(date +%s)
  TMPDIR=$tmp/qtmp timeout -k 10 "$boot_timeout" "${qemu[@]}" "${qargs[@]}" \
    -serial "file:$tmp/console.log" -serial "file:$tmp/guest.log" 2> >(tee "$tmp/qemu.err" >&2) &
  qemu_pid=$!
  # Progress: the guest's lines as they come, minus the fixture payload.
  # tail ends by itself within a second of qemu (--pid), so the pipeline does too.
  # (the CRs dropped by awk itself: tr would hold the lines back in its buffer)
  tail -n +1 -F --pid="$qemu_pid" "$tmp/guest.log" 2>/dev/null |
    awk '{sub(/\r$/, "")} /^VMTEST-FIXTURES-BEGIN/{skip=1; print "  (fixtures: receiving)"; next}
         /^VMTEST-FIXTURES-END/{skip=0; next}
         !skip {print "  | " $0; fflush()}' >&2 &
  tail_pid=$!
  qrc=0
  wait "$qemu_pid" || qrc=$?
  qemu_pid=""
  wait "$tail_pid" 2>/dev/null || true
  tail_pid=""
  t_guest=$(($(date +%s) - t_boot))
  tr -d '\r' <"$tmp/guest.log" >"$tmp/guest.txt"
  if [ "$qrc" = 124 ] || [ "$qrc" = 137 ]; then
    say "the guest did not finish within ${boot_timeout} s: killed (console tail below)"
    tail -20 "$tmp/console.log" >&2 || true
  fi
}

if [ "$accel" = kvm-try ]; then
  boot kvm
  # Did KVM kill it (qemu's KVM errors: an MSR or an emulation failure)?
  why=$(grep -m1 -iE 'kvm|emulation failure' "$tmp/qemu.err" || true)
  if ! grep -q '^VMTEST DONE' "$tmp/guest.txt" && [ -n "$why" ]; then
    echo fails >"$kvm_verdict"
    say "the guest died under KVM ($why): booting it again under TCG; KVM is not tried again on this host kernel ($kvm_verdict)"
    boot tcg
  fi
else
  boot "$accel"
fi

# Fixtures: a base64 tar between markers.
if grep -q '^VMTEST-FIXTURES-END' "$tmp/guest.txt"; then
  sed -n '/^VMTEST-FIXTURES-BEGIN/,/^VMTEST-FIXTURES-END/p' "$tmp/guest.txt" | sed '1d;$d' |
    base64 -d >"$tmp/fixtures.tar.gz" 2>/dev/null || true
  mkdir -p "$tmp/fixtures"
  if tar -xzf "$tmp/fixtures.tar.gz" -C "$tmp/fixtures" 2>/dev/null; then
    say "fixtures: $(find "$tmp/fixtures" -type f | wc -l) files from the guest"
    if [ "$save_fixtures" = 1 ]; then
      kx=$(echo "$kver" | cut -d. -f1,2)
      dest=$repo/tests/fixtures/kernels/$kx
      rm -rf "$dest"
      mkdir -p "$dest"
      cp -r "$tmp/fixtures/." "$dest/"
      say "fixtures: saved into $dest"
    fi
  else
    say "fixtures: the guest's tar did not decode"
  fi
fi

mapfile -t results < <(grep -E '^VMTEST (PASS|FAIL) ' "$tmp/guest.txt" || true)
pass=0
fail=0
summary=() # one line per check, with its figures
short=()   # what the last line says of each
for r in "${results[@]}"; do
  read -r _ verdict name detail <<<"$r"
  if [ "$verdict" = PASS ]; then
    pass=$((pass + 1))
    s=$(grep -m1 "^VMTEST SHORT $name " "$tmp/guest.txt" | cut -d' ' -f4- || true)
    short+=("${s:-$name}")
  else
    fail=$((fail + 1))
    short+=("$name FAILED")
  fi
  summary+=("$verdict $name: ${detail:-}")
done
if ! grep -q '^VMTEST DONE' "$tmp/guest.txt"; then
  fail=$((fail + 1))
  summary+=("FAIL guest: did not finish (qemu rc $qrc)")
  short+=("guest did not finish")
fi
if [ "$pass" = 0 ] && [ "$fail" = 0 ]; then
  fail=1
  summary+=("FAIL guest: no results")
  short+=("no results")
fi
gk=$(grep -m1 '^VMTEST INFO kernel ' "$tmp/guest.txt" | cut -d' ' -f4 || true)
say "guest ran ${t_guest} s; whole run $(($(date +%s) - t_start)) s"
say "results:"
for s in "${summary[@]}"; do printf '  %s\n' "$s" >&2; done
joined=$(printf '%s, ' "${short[@]}")
echo "vm-test: $pass passed, $fail failed (Debian 12 guest, kernel ${gk:-$kver}, cgroup v2 only, ${used_accel^^}): ${joined%, }"
[ "$fail" = 0 ]
