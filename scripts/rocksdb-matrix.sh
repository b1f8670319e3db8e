#!/usr/bin/env bash
# The whole RocksDB matrix of tests/rocksdb_matrix.rs (issue #23): 16 cells
# of db_bench fillrandom (WAL on/off × a 12 MiB/s user write-rate limit or
# none × 1/4 writers × level-0 triggers making slowdowns or stops dominate)
# on a loop ext4 capped at 20 MiB/s, each compared with RocksDB's own
# `rocksdb.stall.micros`. CI runs three of the cells; this runs all of them
# (about 10 minutes with 25 s a cell) and prints the Markdown table the
# README shows. The test makes and undoes the lab itself (loop device,
# mount, write cap, dirty limits).
#
# Usage: sudo scripts/rocksdb-matrix.sh [seconds_per_cell=25] [cells]
#   cells: comma-separated parts of cell names (wal-on_limit-off_4w_slowdowns,
#   4w, stops, ...); all by default.
# The cells' files (db_bench output, LOG, stallscope's JSON lines) and the
# table (matrix.md) are kept in a folder it names at the end.
set -euo pipefail
secs=${1:-25}
cells=${2:-}
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "needs root (loop devices, mount, sysctls, tracing)" >&2; exit 1; }
command -v db_bench >/dev/null || { echo "db_bench missing (apt-get install rocksdb-tools)" >&2; exit 1; }
keep=${STALLSCOPE_TEST_KEEP:-$(mktemp -d /var/tmp/rocksdb-matrix.XXXXXX)}
log=$keep/test.log
set +e
STALLSCOPE_ROCKS_MATRIX=full STALLSCOPE_ROCKS_CELL_S=$secs STALLSCOPE_ROCKS_CELLS=$cells \
  STALLSCOPE_TEST_KEEP=$keep \
  cargo test --release --test rocksdb_matrix -- --nocapture --test-threads=1 \
  rocksdb_matrix_writers_held_time_matches_stall_micros >"$log" 2>&1
rc=$?
set -e
grep -E '^cell |^  [0-9.]+ s:' "$log" || true
echo
if [ -f "$keep/matrix.md" ]; then
  cat "$keep/matrix.md"
else
  tail -40 "$log"
fi
grep -E "cells outside|panicked" "$log" || true
echo
echo "files: $keep (test output: $log); test exit $rc"
exit $rc
