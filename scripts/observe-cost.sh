#!/usr/bin/env bash
# What observing costs: stallscope's own CPU while it observes PostgreSQL
# under `pgbench -c 8 -j 2`, and pgbench's tps with and without it, for
# the two ways of timing blocks (sampled /proc, the scheduler's events).
# Rounds alternate none / sampled / sched; medians are printed.
#
# Usage (root): scripts/observe-cost.sh [rounds=3] [seconds=20] [cap=20MiB]
# Needs Debian's postgresql (apt-get install postgresql). Leaves nothing
# behind: the server is stopped and `lab down` undoes the lab on any exit.
set -euo pipefail
rounds=${1:-3}
secs=${2:-20}
cap=${3:-20MiB}
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "needs root (lab, tracing)" >&2; exit 1; }
# shellcheck source=scripts/pg-lab.sh
. scripts/pg-lab.sh
pgbin=$(pg_bin_dir) || { echo "PostgreSQL missing (apt-get install postgresql)" >&2; exit 1; }
cargo build --release --quiet
bin=${CARGO_TARGET_DIR:-target}/release/stallscope
lab=$(mktemp -d /var/tmp/observe-cost.XXXXXX)
chmod 755 "$lab"
port=54391
cleanup() {
  pg_stop
  "$bin" lab down --dir "$lab" >/dev/null 2>&1 || true
  rm -rf "$lab"
}
trap cleanup EXIT
pg_lab_up
ticks=$(getconf CLK_TCK)

# One round: pgbench for $secs with stallscope in mode $1 (none, sampled,
# sched); prints "tps cpu%".
round() {
  local mode=$1 pid="" t0 c0 c1 t1
  if [ "$mode" != none ]; then
    local timing=auto; [ "$mode" = sampled ] && timing=sampled
    "$bin" run --observe-name postgres --observe-timing "$timing" --format jsonl >/dev/null 2>&1 &
    pid=$!
    sleep 1
    c0=$(awk '{print $14+$15}' /proc/$pid/stat); t0=$(date +%s.%N)
  fi
  local tps
  tps=$(bench -c 8 -j 2 -T "$secs" 2>/dev/null | awk '/^tps/ {print $3; exit}')
  if [ -n "$pid" ]; then
    c1=$(awk '{print $14+$15}' /proc/$pid/stat); t1=$(date +%s.%N)
    kill -INT $pid; wait $pid || true
    echo "$tps $(awk -v a="$c0" -v b="$c1" -v t="$ticks" -v s="$t0" -v e="$t1" 'BEGIN {print (b-a)/t/(e-s)*100}')"
  else
    echo "$tps 0"
  fi
}

median() { sort -n | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
declare -A tps cpu
echo "PostgreSQL $(basename "$(dirname "$pgbin")"), pgbench -c 8 -j 2 -T $secs, ext4 capped at $cap; $rounds rounds"
printf '%-6s %-8s %10s %12s\n' round mode tps stallscope_cpu%
for r in $(seq 1 "$rounds"); do
  for m in none sampled sched; do
    read -r t c < <(round $m)
    printf '%-6s %-8s %10.1f %12.2f\n' "$r" "$m" "$t" "$c"
    tps[$m]+="$t "; cpu[$m]+="$c "
  done
done
echo
printf '%-8s %10s %12s %10s\n' mode tps_median cpu%_median tps_ratio
base=$(echo ${tps[none]} | tr ' ' '\n' | median)
for m in none sampled sched; do
  t=$(echo ${tps[$m]} | tr ' ' '\n' | median)
  c=$(echo ${cpu[$m]} | tr ' ' '\n' | median)
  printf '%-8s %10.1f %12.2f %10.3f\n' $m "$t" "$c" "$(awk -v a="$t" -v b="$base" 'BEGIN {print a/b}')"
done
echo "cpu%: stallscope's own user+system time as % of one core over the pgbench window"
