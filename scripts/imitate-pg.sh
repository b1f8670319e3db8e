#!/usr/bin/env bash
# PostgreSQL imitated in the lab, behind the fidelity gate: PostgreSQL on a
# capped lab ext4 (scripts/pg-lab.sh, the README's scenario) under
# `pgbench -c 8 -j 2`, observed for SECS into pg.rec; pgbench stopped, the
# server left idle; then `stallscope run --imitate pg.rec` on the same lab
# for SECS into imit.rec; then `stallscope imitate pg.rec --check
# imit.rec`, the gate, printed. Stalls from 20 ms (pgbench's p99 here is
# 10-60 ms).
#
# Usage (root): scripts/imitate-pg.sh [secs=60] [cap=20MiB]
#   CAP_B=RATE: then a live trial on the looping imitation (B: the lab's
#   cap at RATE) and the same trial on the real server under pgbench,
#   verdicts and ratios side by side (about 2 × 15 minutes).
#   KEEP=DIR: copy the recordings (and trial JSON) there.
# Needs Debian's postgresql and jq. Leaves nothing behind: pgbench, the
# imitation and the server are stopped and `lab down` undoes the lab on
# any exit.
set -euo pipefail
secs=${1:-60}
cap=${2:-20MiB}
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "needs root (lab, tracing)" >&2; exit 1; }
command -v jq >/dev/null || { echo "jq missing (apt-get install jq)" >&2; exit 1; }
# shellcheck source=scripts/pg-lab.sh
. scripts/pg-lab.sh
pgbin=$(pg_bin_dir) || { echo "PostgreSQL missing (apt-get install postgresql)" >&2; exit 1; }
cargo build --release --quiet
bin=$(pwd)/${CARGO_TARGET_DIR:-target}/release/stallscope
lab=$(mktemp -d /var/tmp/imitate-pg.XXXXXX)
chmod 755 "$lab"
port=$((54300 + RANDOM % 100))
bench_pid="" imit_pid=""
cleanup() {
  [ -z "$bench_pid" ] || kill "$bench_pid" 2>/dev/null || true
  [ -z "$imit_pid" ] || kill -INT "$imit_pid" 2>/dev/null || true
  wait 2>/dev/null || true
  pg_stop
  "$bin" lab down --dir "$lab" >/dev/null 2>&1 || true
  rm -rf "$lab"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
pg_lab_up
mnt=$lab/mnt/ext4
dev=$(findmnt -no MAJ:MIN "$mnt" | tr -d ' ')
out=$lab/out
mkdir "$out"
echo "PostgreSQL $(basename "$(dirname "$pgbin")") on ext4 capped at $cap, kernel $(uname -r); ${secs} s each"

bench -c 8 -j 2 -T 100000 >/dev/null 2>&1 &
bench_pid=$!
sleep "${WARM:-30}"
echo "recording the server (pgbench -c 8 -j 2) ..."
"$bin" run --observe-name postgres --duration "${secs}s" --stall-threshold 20ms \
  --format jsonl --record "$out/pg.rec" >/dev/null 2>"$out/pg.err"
kill "$bench_pid"; wait "$bench_pid" 2>/dev/null || true; bench_pid=""
sleep 5
echo "recording the imitation on the same lab ..."
"$bin" run --imitate "$out/pg.rec" --target "$mnt" --duration "${secs}s" --stall-threshold 20ms \
  --format jsonl --record "$out/imit.rec" >/dev/null 2>"$out/imit.err"
tail -1 "$out/imit.err" | grep '^imitate' || true
echo
echo "the gate (stallscope imitate pg.rec --check imit.rec):"
"$bin" imitate "$out/pg.rec" --check "$out/imit.rec" | tee "$out/gate.txt"

if [ -n "${CAP_B:-}" ]; then
  trial() { # $1: what, then the observe flags
    local what=$1; shift
    "$bin" trial "$@" --setting "/sys/fs/cgroup/blkio/blkio.throttle.write_bps_device=$dev $CAP_B" \
      --pairs "${PAIRS:-6}" --format json -- --stall-threshold 20ms >"$out/trial-$what.json" 2>"$out/trial-$what.err" \
      || { tail -5 "$out/trial-$what.err" >&2; return 1; }
    jq -r --arg w "$what" '"\($w): \(.verdict) (\(.measure) ×\(.difference | exp * 100 | round / 100))"' "$out/trial-$what.json"
  }
  echo
  echo "live trials of the lab's cap $cap -> $CAP_B:"
  "$bin" imitate "$out/pg.rec" --dir "$mnt" --loop 2>/dev/null &
  imit_pid=$!
  sleep 5
  trial imitation --observe "$imit_pid"
  kill -INT "$imit_pid"; wait "$imit_pid" 2>/dev/null || true; imit_pid=""
  bench -c 8 -j 2 -T 100000 >/dev/null 2>&1 &
  bench_pid=$!
  sleep "${WARM:-30}"
  trial server --observe-name postgres
fi
[ -z "${KEEP:-}" ] || { mkdir -p "$KEEP"; cp "$out"/* "$KEEP"/; echo "kept in $KEEP"; }
