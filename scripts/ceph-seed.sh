#!/usr/bin/env bash
# The rados-bench seed (seeds/004: "rados bench -t 2 drops to 0 MB/s") on
# real Ceph, observed by stallscope, and the properties of issue #23
# checked against Ceph's own account of itself.
#
# The cluster: Debian's Ceph 16.2 (Pacific), one monitor, one manager, one
# FileStore OSD on 127.0.0.1, auth off, a pool of size 1:
#   data    = xfs on a `stallscope lab` loop device, writes capped at CAP
#   journal = a second loop device, not capped, O_DIRECT + aio
# Then `rados bench SECS write -t 1` and `-t 4`, each with
# `stallscope run --observe-name ceph-osd --format jsonl --record` beside
# it; rados bench's per-second lines and the OSD's perf counters (admin
# socket `perf dump`, before and after) are kept, and
# scripts/ceph-seed-check.py checks, for each property, stallscope's
# stalls against them and prints a table (exit 1 when one fails).
#
# The cap is `stallscope lab`'s: on cgroup v1 the root blkio group's
# throttle on the data loop device (every process, the kernel's writeback
# included); on cgroup v2 `lab up` makes the group stallscope-lab with
# io.max on the device and the OSD is started in it with `lab exec`
# (buffered writeback is charged to it only with memory on v2 too and a
# filesystem with cgroup writeback, xfs on 5.3+; `lab up` warns otherwise).
# Only v1 has been run. vm.dirty_* are left as they are unless DIRTY_BYTES
# is set (then `lab up --dirty-bytes`, restored by `lab down`).
#
# The client is held to about 40 MB/s per thread as in the seed (there by
# the network): rados delays each reply from the OSD by U(0, DELAY) s
# (Ceph's ms_inject_delay_*, on the client only; the OSD is untouched).
#
# Usage (root): scripts/ceph-seed.sh [OUT]
#   OUT: where results stay (default /tmp/ceph-seed-<date>); everything
#   else (images, cluster, mounts, loop devices, the cap) is undone on
#   every exit path, Ctrl-C included.
# Knobs (env): SECS=60 CAP=48MiB DELAY=0.2 THREADS="1 4" DIRTY_BYTES=
#   STALL_THRESHOLD=100ms SYNC_MAX=5 (filestore max sync interval, s)
# About 3 minutes with the defaults (176 s on the 2-core dev VM). Installs
# ceph-mon ceph-mgr ceph-osd ceph-common xfsprogs with apt-get when they
# are missing.
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "needs root (loop devices, the cap, tracing)" >&2; exit 1; }

SECS=${SECS:-60}
CAP=${CAP:-48MiB}
DELAY=${DELAY:-0.2}
THREADS=${THREADS:-1 4}
DIRTY_BYTES=${DIRTY_BYTES:-}
STALL_THRESHOLD=${STALL_THRESHOLD:-100ms}
SYNC_MAX=${SYNC_MAX:-5}
OUT=${1:-/tmp/ceph-seed-$(date +%Y%m%d-%H%M%S)}
POOL=bench

log() { echo "[$(date +%T)] $*" >&2; }

# --- what it needs ---------------------------------------------------------
need=()
for c in ceph-mon ceph-mgr ceph-osd ceph rados monmaptool ceph-authtool mkfs.xfs python3; do
  command -v "$c" >/dev/null || need+=("$c")
done
if [ ${#need[@]} -gt 0 ]; then
  log "missing ${need[*]}: installing Debian's Ceph packages"
  apt-get update -q >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
    ceph-mon ceph-mgr ceph-osd ceph-common xfsprogs python3 >/dev/null
fi
if [ -z "${STALLSCOPE:-}" ] && command -v cargo >/dev/null; then
  nice -n 10 cargo build --release --quiet
fi
bin=${STALLSCOPE:-${CARGO_TARGET_DIR:-target}/release/stallscope}
[ -x "$bin" ] || { echo "no stallscope at $bin (cargo build --release, or STALLSCOPE=path)" >&2; exit 1; }
for port in 3300 6789; do
  if ss -Hltn "sport = :$port" | grep -q .; then
    echo "port $port is in use (another Ceph monitor?): not starting a second one" >&2; exit 1
  fi
done

# --- the work folder and its undo -------------------------------------------
W=$(mktemp -d /var/tmp/ceph-seed.XXXXXX)
mkdir -p "$OUT"
CONF=$W/ceph.conf
LAB=$W/lab
OSD_DIR=$LAB/mnt/xfs/osd-0
ss_pid="" bench_pid=""

# shellcheck disable=SC2317  # (called from the trap)
stop_pid() {  # stop_pid PID: TERM, up to 30 s, then KILL
  local p=$1
  kill "$p" 2>/dev/null || return 0
  for _ in $(seq 60); do kill -0 "$p" 2>/dev/null || return 0; sleep 0.5; done
  kill -KILL "$p" 2>/dev/null || true
}

# shellcheck disable=SC2317  # (the trap)
cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  set +e
  [ -n "$bench_pid" ] && stop_pid "$bench_pid"
  [ -n "$ss_pid" ] && kill -TERM "$ss_pid" 2>/dev/null && wait "$ss_pid" 2>/dev/null
  for n in osd.0 mgr.x mon.a; do
    [ -s "$W/run/ceph-$n.pid" ] && stop_pid "$(cat "$W/run/ceph-$n.pid")"
  done
  if [ -e "$LAB/state.json" ]; then
    "$bin" lab down --dir "$LAB" >/dev/null 2>&1 || "$bin" lab down --dir "$LAB" --force >&2
  fi
  [ -s "$W/journal.dev" ] && losetup -d "$(cat "$W/journal.dev")"
  # never under a mount still up, nor an image a loop device still holds
  if findmnt -rno TARGET | grep -q "^$W/" || losetup -a | grep -q "($W/"; then
    log "left $W: still mounted or attached (see findmnt, losetup -a; then $bin lab down --dir $LAB)"
  else
    rm -rf "$W"
  fi
  log "down: results in $OUT"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

C() { timeout 60 ceph -c "$CONF" "$@"; }
asok() { timeout 30 ceph --admin-daemon "$W/run/ceph-osd.0.asok" "$@"; }

# --- the cluster ----------------------------------------------------------
up() {
  mkdir -p "$W/run" "$W/log" "$W/mon" "$W/mgr/ceph-x"
  local lab_args=(--dir "$LAB" --fs xfs --size 6GiB --cap "$CAP")
  [ -n "$DIRTY_BYTES" ] && lab_args+=(--dirty-bytes "$DIRTY_BYTES")
  "$bin" lab up "${lab_args[@]}" >"$OUT/lab.txt"
  truncate -s 1G "$W/journal.img"
  local jdev fsid osd_uuid id
  jdev=$(losetup --direct-io=on -f --show "$W/journal.img")
  echo "$jdev" >"$W/journal.dev"
  mkdir -p "$OSD_DIR"
  # the devices by MAJ:MIN, as stallscope's evidence names them (bdi)
  echo "$(findmnt -no MAJ:MIN "$LAB/mnt/xfs" | tr -d ' ') data $(findmnt -no SOURCE "$LAB/mnt/xfs")" >"$OUT/data-dev.txt"
  echo "$(lsblk -dno MAJ:MIN "$jdev" | tr -d ' ') journal $jdev" >>"$OUT/data-dev.txt"
  fsid=$(uuidgen)
  cat >"$CONF" <<EOF
[global]
fsid = $fsid
mon initial members = a
mon host = [v2:127.0.0.1:3300,v1:127.0.0.1:6789]
public addr = 127.0.0.1
cluster addr = 127.0.0.1
auth cluster required = none
auth service required = none
auth client required = none
mon allow pool size one = true
mon warn on pool no redundancy = false
osd pool default size = 1
osd pool default min size = 1
osd pool default pg autoscale mode = off
osd crush chooseleaf type = 0
run dir = $W/run
admin socket = $W/run/\$cluster-\$name.asok
log file = $W/log/\$cluster-\$name.log
pid file = $W/run/\$cluster-\$name.pid
mon data = $W/mon/\$cluster-\$id
mgr data = $W/mgr/\$cluster-\$id
osd data = $OSD_DIR
[osd]
osd objectstore = filestore
osd journal = $jdev
journal dio = true
journal aio = true
filestore max sync interval = $SYNC_MAX
filestore min sync interval = 0.01
EOF
  monmaptool --create --clobber --fsid "$fsid" --addv a '[v2:127.0.0.1:3300,v1:127.0.0.1:6789]' "$W/monmap" >/dev/null
  ceph-authtool --create-keyring "$W/mon.keyring" --gen-key -n mon. --cap mon 'allow *' >/dev/null
  ceph-mon -c "$CONF" --mkfs -i a --monmap "$W/monmap" --keyring "$W/mon.keyring"
  ceph-mon -c "$CONF" -i a
  ceph-mgr -c "$CONF" -i x
  osd_uuid=$(uuidgen)
  id=$(C osd new "$osd_uuid")
  [ "$id" = 0 ] || { log "osd id $id, expected 0"; exit 1; }
  ceph-osd -c "$CONF" -i 0 --mkfs --osd-uuid "$osd_uuid" --osd-objectstore filestore \
    --osd-journal "$jdev" >"$W/log/mkfs.txt" 2>&1
  # cgroup v2: in the lab's capped group (v1: the cap is global, run as is)
  "$bin" lab exec --dir "$LAB" -- ceph-osd -c "$CONF" -i 0 2>"$OUT/osd-start.txt"
  for _ in $(seq 60); do C osd stat 2>/dev/null | grep -q '1 up' && break; sleep 1; done
  C osd pool create "$POOL" 32 32 >/dev/null 2>&1
  C osd pool set "$POOL" size 1 --yes-i-really-mean-it >/dev/null 2>&1
  C osd pool set "$POOL" min_size 1 >/dev/null 2>&1
  C osd pool application enable "$POOL" rados >/dev/null 2>&1 || true
  for _ in $(seq 120); do
    C pg stat 2>/dev/null | grep -q 'active+clean' && ! C pg stat | grep -qE 'creating|peering|unknown' && break
    sleep 1
  done
  C -s >"$OUT/ceph-status.txt"
  asok config show | grep -E '"(osd_objectstore|journal_dio|journal_aio|filestore_max_sync_interval|filestore_queue_max_bytes|filestore_queue_max_ops|journal_max_write_bytes|filestore_wbthrottle_enable)"' \
    >"$OUT/osd-config.txt"
  log "cluster up: $(C pg stat)"
}

# What else shares the machine (other labs may run their own loads).
envsnap() {
  date +%s.%N
  for k in dirty_bytes dirty_background_bytes dirty_ratio dirty_background_ratio; do
    echo "vm.$k=$(cat /proc/sys/vm/$k)"
  done
  [ -e /sys/fs/cgroup/blkio/blkio.throttle.write_bps_device ] &&
    echo "blkio: $(tr '\n' ' ' </sys/fs/cgroup/blkio/blkio.throttle.write_bps_device)"
  echo "loadavg: $(cat /proc/loadavg)"
  ps -eo pid,pcpu,etimes,args --sort=-pcpu | head -6 | cut -c1-160
}

# Each line with the wall time it came at (bash's clock: no fork a line).
stamp() { while IFS= read -r l; do printf '%s %s\n' "$EPOCHREALTIME" "$l"; done; }

# Quiet between runs: objects gone, the data disk drained.
quiesce() {
  timeout 120 rados -c "$CONF" -p "$POOL" cleanup >/dev/null 2>&1 || true
  sync -f "$OSD_DIR"
  sleep 8
}

# bench T: rados bench SECS write -t T with stallscope observing ceph-osd.
bench() {
  local t=$1 r=$OUT/t$1 osd_pid
  quiesce
  osd_pid=$(cat "$W/run/ceph-osd.0.pid")
  asok perf dump >"$r.perf-before.json"
  envsnap >"$r.env-before"
  log "rados bench $SECS write -t $t, stallscope observing ceph-osd (pid $osd_pid)"
  # when it was started: stallscope's clock (t_s) starts a few ms later,
  # its recording header's start_unix_s is written ~0.1 s later (after the
  # tracing is set up)
  echo "$EPOCHREALTIME" >"$r.ss-launch"
  "$bin" run --observe-name ceph-osd --stall-threshold "$STALL_THRESHOLD" \
    --duration "$((SECS + 8))s" --format jsonl --record "$r.rec.jsonl" >"$r.jsonl" 2>"$r.err" &
  ss_pid=$!
  sleep 3
  # the OSD's threads by name, for reading the stalls
  for d in /proc/"$osd_pid"/task/*; do echo "${d##*/} $(cat "$d/comm")"; done >"$r.threads.txt"
  local net=()
  [ "$DELAY" != 0 ] && net=(--ms_inject_delay_type osd --ms_inject_delay_probability 1 --ms_inject_delay_max "$DELAY")
  date +%s.%N >"$r.bench-start"
  # each line of rados bench with the wall time it came at; in the
  # background so that Ctrl-C is taken at once (and rados stopped by pid)
  rados -c "$CONF" "${net[@]}" -p "$POOL" bench "$SECS" write -t "$t" --no-cleanup \
    > >(stamp >"$r.bench.txt") 2>&1 &
  bench_pid=$!
  wait "$bench_pid" || log "rados bench exited $?"
  bench_pid=""
  sleep 1  # the last lines through the time stamper
  date +%s.%N >"$r.bench-end"
  wait "$ss_pid" || log "stallscope exited $?"
  ss_pid=""
  # after stallscope: Ceph's counters cover all of its window
  asok perf dump >"$r.perf-after.json"
  envsnap >"$r.env-after"
  "$bin" report "$r.rec.jsonl" >"$r.report.txt" 2>&1 || true
}

up
for t in $THREADS; do bench "$t"; done
{
  echo "kernel $(uname -r), $(nproc) cores, $(ceph --version | cut -d' ' -f1-3)"
  echo "cap $CAP on the data device, client delay U(0, $DELAY) s, filestore max sync interval $SYNC_MAX s, stall threshold $STALL_THRESHOLD"
} >"$OUT/setup.txt"
cat "$OUT/setup.txt"
# shellcheck disable=SC2086  # one argument per thread count
python3 scripts/ceph-seed-check.py "$OUT" $THREADS | tee "$OUT/table.txt"
exit "${PIPESTATUS[0]}"
