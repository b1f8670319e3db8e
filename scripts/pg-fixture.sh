#!/usr/bin/env bash
# Records the fixture tests/fixtures/recording/pgbench-observed.jsonl.gz:
# PostgreSQL (the newest installed; the fixture was made with 15) observed
# (`run --observe-name postgres --record`) under
# `pgbench -c 8 -j 2` on a lab ext4 capped at 10 MiB/s (the README's
# "Diagnosing PostgreSQL" setup), stallscope started before pgbench.
# `tests/advise_servers.rs` reads it: an observed server's cards are
# tagged honestly (its own knobs `direction`, nothing `verified`).
#
# Usage (root): scripts/pg-fixture.sh [seconds=20] [out=the fixture]
# Needs Debian's postgresql. Leaves nothing behind: the server is stopped
# and `lab down` undoes the lab on any exit. Run it under the lab lock
# where others share the machine.
set -euo pipefail
secs=${1:-20}
cd "$(dirname "$0")/.."
out=${2:-tests/fixtures/recording/pgbench-observed.jsonl.gz}
[ "$(id -u)" = 0 ] || { echo "needs root (lab, tracing)" >&2; exit 1; }
# shellcheck source=scripts/pg-lab.sh
. scripts/pg-lab.sh
pgbin=$(pg_bin_dir) || { echo "PostgreSQL missing (apt-get install postgresql)" >&2; exit 1; }
cargo build --release --quiet
bin=${CARGO_TARGET_DIR:-target}/release/stallscope
lab=$(mktemp -d /var/tmp/pg-fixture.XXXXXX)
chmod 755 "$lab"
port=54392
cap=10MiB
cleanup() {
  pg_stop
  "$bin" lab down --dir "$lab" >/dev/null 2>&1 || true
  rm -rf "$lab"
}
trap cleanup EXIT
pg_lab_up
rm -f "$out"
"$bin" run --observe-name postgres --stall-threshold 20ms --duration "$((secs + 4))s" \
  --record "$out" --format jsonl >/dev/null &
ss=$!
sleep 2
bench -c 8 -j 2 -T "$secs" 2>/dev/null | grep -E '^(tps|number of transactions actually)' || true
wait $ss
ls -l "$out"
