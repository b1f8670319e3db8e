#!/usr/bin/env bash
# What observing costs the server: PostgreSQL on the root disk (not capped,
# so pgbench is CPU-bound and any cost shows in its tps), one `pgbench -c 8
# -j 2` run for the whole measurement, and the observer switched on and off
# under it in blocks: none, leg, none, leg, ... Each leg's block is judged
# against the mean of the `none` blocks either side of it, by pgbench's own
# figures (its per-transaction log: transactions per second and the p99 of
# their latencies in the block), and the medians of those ratios are
# printed. One long run with blocks side by side cancels what moved whole
# windows before (a checkpoint in one window and not in another, the
# tables growing, connection set-up): five 15 s windows per leg moved one
# median by ±8 %.
#
# Legs (COST_LEGS, default "calls nocalls sampled calltime"; `none`,
# nothing observing, sits between every two of them):
#   calls     `stallscope run --observe-name postgres` as shipped (root:
#             the scheduler's events, wake-up chains, call boundaries)
#   nocalls   the same with --call-bounds off
#   nochains  the same with --chains off
#   nopattern calls without counting the write pattern (`calls` on the
#             observed lines; STALLSCOPE_NO_CALL_PATTERN=1): what capturing
#             it costs (no event of its own: only stallscope's fold work)
#   normal    calls, but under the normal scheduling policy instead of the
#             guest's SCHED_BATCH (STALLSCOPE_NORMAL_SCHED=1)
#   sampled   --observe-timing sampled (no tracing of the server's threads)
#   slow      sampled, reading /proc once a second (--observe-every 1s)
#   calltime  bpftrace timing the same write-path calls (scripts/calltime.bt)
#   idle      a process that only sleeps: the method's own control (its
#             ratio is what starting and stopping a process between blocks
#             costs, nothing of observing)
#   burn      a process that only burns CPU, BURN_PCT (default 1.4) % of
#             one core in slices every 50 ms, as the observer's own CPU
#             does: what any process taking that much CPU costs the
#             saturated server, nothing of tracing or /proc
#
# Usage (root): scripts/server-cost.sh [pairs=8] [block=15] [settle=3]
#   PAIRS blocks per leg, each BLOCK seconds, its first SETTLE not measured
#   (the observer starting, or the last one's teardown). It takes
#   (2 x PAIRS x legs + 1) x BLOCK seconds: 8 pairs of 3 legs, 12.5 min.
# Needs Debian's postgresql (any major version: the newest found is used);
# bpftrace for the calltime leg. Leaves nothing behind: the server is
# stopped and its folder removed on any exit.
set -euo pipefail
pairs=${1:-8}
block=${2:-15}
settle=${3:-3}
((pairs >= 1 && block > settle + 1)) || { echo "need pairs >= 1 and block > settle + 1" >&2; exit 2; }
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "needs root (tracing, runuser)" >&2; exit 1; }
# shellcheck source=scripts/pg-lab.sh
. scripts/pg-lab.sh   # pg_bin_dir and pg_conf: this script runs its own server
pgbin=$(pg_bin_dir) || { echo "PostgreSQL missing (apt-get install postgresql)" >&2; exit 1; }
read -r -a legs <<<"${COST_LEGS:-calls nocalls sampled calltime}"
for leg in "${legs[@]}"; do
  case $leg in
    calls|nocalls|nochains|nopattern|normal|sampled|slow|calltime|idle|burn) ;;
    *) echo "unknown leg $leg (calls nocalls nochains nopattern normal sampled slow calltime idle burn; none is always measured)" >&2; exit 2 ;;
  esac
done
if [[ " ${legs[*]} " == *" calltime "* ]]; then
  command -v bpftrace >/dev/null || { echo "bpftrace missing (apt-get install bpftrace) or drop the calltime leg" >&2; exit 1; }
fi
cargo build --release --quiet
bin=${CARGO_TARGET_DIR:-target}/release/stallscope
dir=$(mktemp -d /var/tmp/server-cost.XXXXXX)
chmod 755 "$dir"
pgdata=$dir/pg
port=$((54400 + RANDOM % 500))
mounted=""
bench_pid=""
pg() { runuser -u postgres -- "$@"; }
cleanup() {
  # A round runs in a subshell (`< <(round ...)`): its observer's pid is
  # in a file, not in this shell's variable.
  if [ -s "$dir/observer.pid" ]; then
    kill -INT "$(cat "$dir/observer.pid")" 2>/dev/null || true
    sleep 2
  fi
  [ -z "$bench_pid" ] || kill "$bench_pid" 2>/dev/null || true
  pg "$pgbin/pg_ctl" -D "$pgdata" stop -m immediate -w >/dev/null 2>&1 || true
  rm -rf "$dir"
  [ -z "$mounted" ] || umount "$mounted" || true
}
trap cleanup EXIT
trap 'exit 130' INT TERM
# bpftrace reads tracepoints' formats from tracefs: mount it if missing
# (unmounted on exit; stallscope mounts and unmounts its own).
if [[ " ${legs[*]} " == *" calltime "* ]] && ! mountpoint -q /sys/kernel/tracing; then
  mount -t tracefs nodev /sys/kernel/tracing && mounted=/sys/kernel/tracing
fi
install -d -o postgres -g postgres "$pgdata" "$dir/sock" "$dir/log"
pg "$pgbin/initdb" -A trust -D "$pgdata" >/dev/null
pg_conf "$pgdata" "$port" "$dir/sock" 30min
pg "$pgbin/pg_ctl" -D "$pgdata" -l "$pgdata/server.log" start -w >/dev/null
bench() { (cd "$dir/log" && runuser -u postgres -- pgbench -h "$dir/sock" -p "$port" "$@" postgres); }
psql_() { runuser -u postgres -- psql -h "$dir/sock" -p "$port" -qAtX -c "$1" postgres; }
bench -i -q -s 10 >/dev/null 2>&1
postmaster=$(head -1 "$pgdata/postmaster.pid")

# calltime.bt with only the calls this kernel has both tracepoints for.
# shellcheck source=scripts/calltime-lib.sh
. scripts/calltime-lib.sh
bt=$dir/calltime.bt
if [[ " ${legs[*]} " == *" calltime "* ]]; then
  ev=/sys/kernel/tracing/events/syscalls
  have=" "
  for c in $(grep -o 'sys_enter_[a-z0-9_]*' scripts/calltime.bt | sed 's/^sys_enter_//'); do
    [ -d "$ev/sys_enter_$c" ] && [ -d "$ev/sys_exit_$c" ] && have+="$c "
  done
  [ "$have" != " " ] || { echo "this kernel has no syscall tracepoints: drop calltime" >&2; exit 1; }
  calltime_for "$have" "$bt"
fi

# The burn leg: PCT % of one core, busy in a slice every 50 ms.
burn_py='
import sys, time
busy = 0.05 * float(sys.argv[1]) / 100
while True:
    t = time.perf_counter()
    while time.perf_counter() - t < busy:
        pass
    time.sleep(0.05 - busy)
'
# Starts the observer of leg $1 (none: nothing); sets $observer.
start_observer() {
  observer=""
  local log=$dir/observer.err
  case $1 in
    none) return ;;
    calls) "$bin" run --observe-name postgres --format jsonl >/dev/null 2>"$log" & ;;
    nocalls) "$bin" run --observe-name postgres --call-bounds off --format jsonl >/dev/null 2>"$log" & ;;
    nochains) "$bin" run --observe-name postgres --chains off --format jsonl >/dev/null 2>"$log" & ;;
    nopattern) STALLSCOPE_NO_CALL_PATTERN=1 "$bin" run --observe-name postgres --format jsonl >/dev/null 2>"$log" & ;;
    normal) STALLSCOPE_NORMAL_SCHED=1 "$bin" run --observe-name postgres --format jsonl >/dev/null 2>"$log" & ;;
    slow) "$bin" run --observe-name postgres --observe-timing sampled --observe-every 1s --format jsonl >/dev/null 2>"$log" & ;;
    sampled) "$bin" run --observe-name postgres --observe-timing sampled --format jsonl >/dev/null 2>"$log" & ;;
    calltime) bpftrace "$bt" "$postmaster" >/dev/null 2>"$log" & ;;
    idle) sleep 100000 & ;;
    burn) python3 -c "$burn_py" "${BURN_PCT:-1.4}" & ;;
  esac
  observer=$!
  echo "$observer" >"$dir/observer.pid"
  sleep 2
  kill -0 "$observer" 2>/dev/null || { echo "leg $1: the observer exited:" >&2; cat "$log" >&2; exit 1; }
}
stop_observer() {
  [ -n "$observer" ] || return 0
  kill -INT "$observer" 2>/dev/null || true
  # A background job of a script ignores SIGINT unless it handles it
  # itself (stallscope and bpftrace do; the idle leg's sleep does not).
  local i
  for i in $(seq 50); do kill -0 "$observer" 2>/dev/null || break; sleep 0.1; done
  kill -TERM "$observer" 2>/dev/null || true
  wait "$observer" 2>/dev/null || true
  observer=""
  : >"$dir/observer.pid"
}

# The schedule: blocks of BLOCK seconds, every other one `none`, the
# others the legs in turn (none L1 none L2 ... none L1 ...), PAIRS blocks
# per leg. The first SETTLE seconds of a block (an observer starting or
# stopping) are not measured.
measure() {
  local t0 k leg at
  : >"$dir/blocks"
  rm -f "$dir/log"/pgbench_log.*
  psql_ CHECKPOINT
  local nblocks=$((2 * pairs * (${#legs[@]}) + 1))
  local total=$((nblocks * block + 5))
  # One pgbench for the whole run: no connection set-up, warm-up or
  # checkpoint difference between the legs; --log keeps each
  # transaction's end time and latency.
  bench -c 8 -j 2 -T "$total" -l >"$dir/pgbench.out" 2>&1 &
  bench_pid=$!
  sleep 5
  t0=$(date +%s.%N)
  for k in $(seq 0 $((nblocks - 1))); do
    if ((k % 2 == 0)); then leg=none; else leg=${legs[$(((k / 2) % ${#legs[@]}))]}; fi
    at=$(awk -v t="$t0" -v k="$k" -v b="$block" 'BEGIN {printf "%.3f", t + k * b}')
    sleep_until "$at"
    start_observer "$leg"
    local c0=0 c1=0
    [ -n "$observer" ] && c0=$(awk '{print $14+$15}' /proc/"$observer"/stat)
    local from to
    from=$(awk -v a="$at" -v s="$settle" 'BEGIN {printf "%.3f", a + s}')
    to=$(awk -v a="$at" -v b="$block" 'BEGIN {printf "%.3f", a + b - 0.5}')
    sleep_until "$to"
    [ -n "$observer" ] && c1=$(awk '{print $14+$15}' /proc/"$observer"/stat)
    stop_observer
    local cpu
    cpu=$(awk -v a="$c0" -v b="$c1" -v t="$(getconf CLK_TCK)" -v s="$at" -v e="$to" 'BEGIN {printf "%.2f", (b-a)/t/(e-s)*100}')
    echo "$k $leg $from $to $cpu" >>"$dir/blocks"
    printf '%-6s %-9s %8s\n' "$k" "$leg" "$cpu" >&2
  done
  wait "$bench_pid" || { echo "pgbench failed:" >&2; cat "$dir/pgbench.out" >&2; exit 1; }
  bench_pid=""
}
sleep_until() {
  local d
  d=$(awk -v t="$1" -v n="$(date +%s.%N)" 'BEGIN {d = t - n; printf "%.3f", (d > 0 ? d : 0)}')
  sleep "$d"
}

# Per block: "k leg tps p99_ms cpu" from pgbench's log (columns: client,
# transaction, latency µs, script, end time s, end time µs).
per_block() {
  cat "$dir/log"/pgbench_log.* | awk -v blocks="$dir/blocks" '
    BEGIN { while ((getline l < blocks) > 0) { split(l, f, " "); n++; k[n] = f[1]; from[n] = f[3]; to[n] = f[4] } }
    { t = $5 + $6 / 1e6; for (i = 1; i <= n; i++) if (t >= from[i] && t < to[i]) { print k[i], $3; break } }' |
    sort -k1,1n -k2,2n | awk -v blocks="$dir/blocks" '
    BEGIN { while ((getline l < blocks) > 0) { split(l, f, " "); leg[f[1]] = f[2]; len[f[1]] = f[4] - f[3]; cpu[f[1]] = f[5] } }
    function out() { if (cnt) { i = int(cnt * 0.99); if (i < 1) i = 1; printf "%d %s %.1f %.3f %s\n", cur, leg[cur], cnt / len[cur], lat[i] / 1000, cpu[cur] } }
    NR == 1 || $1 != cur { out(); cur = $1; cnt = 0 }
    { lat[++cnt] = $2 }
    END { out() }'
}

median() { sort -g | awk '{a[NR]=$1} END {if (NR==0) print "nan"; else print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }

echo "PostgreSQL $(basename "$(dirname "$pgbin")"), one pgbench -c 8 -j 2 on the root disk ($(findmnt -no FSTYPE -T "$dir")), kernel $(uname -r); blocks of ${block} s (first ${settle} s not measured), $pairs per leg, legs: ${legs[*]}"
printf '%-6s %-9s %8s\n' block leg obs_cpu% >&2
measure
per_block >"$dir/per_block"
echo
printf '%-6s %-9s %10s %9s %8s\n' block leg tps p99_ms obs_cpu%
awk '{printf "%-6s %-9s %10.1f %9.3f %8s\n", $1, $2, $3, $4, $5}' "$dir/per_block"
# Each leg's block against the mean of the `none` blocks either side.
awk '{tps[$1] = $3; p99[$1] = $4; leg[$1] = $2}
  END { for (k in leg) if (leg[k] != "none" && ((k-1) in tps) && ((k+1) in tps))
    printf "%s %.4f %.4f\n", leg[k], 2 * tps[k] / (tps[k-1] + tps[k+1]), 2 * p99[k] / (p99[k-1] + p99[k+1]) }' \
  "$dir/per_block" >"$dir/ratios"
echo
printf '%-9s %10s %9s %8s %10s %10s %6s\n' leg tps p99_ms obs_cpu% tps_ratio p99_ratio pairs
for leg in none "${legs[@]}"; do
  t=$(awk -v l="$leg" '$2 == l {print $3}' "$dir/per_block" | median)
  p=$(awk -v l="$leg" '$2 == l {print $4}' "$dir/per_block" | median)
  c=$(awk -v l="$leg" '$2 == l {print $5}' "$dir/per_block" | median)
  if [ "$leg" = none ]; then rt=1; rp=1; np=-; else
    rt=$(awk -v l="$leg" '$1 == l {print $2}' "$dir/ratios" | median)
    rp=$(awk -v l="$leg" '$1 == l {print $3}' "$dir/ratios" | median)
    np=$(awk -v l="$leg" '$1 == l' "$dir/ratios" | wc -l)
  fi
  printf '%-9s %10.1f %9.3f %8s %10s %10s %6s\n' "$leg" "$t" "$p" "$c" "$rt" "$rp" "$np"
done
echo "tps_ratio, p99_ratio: medians over the leg's blocks of block / mean of the none blocks either side"
echo "(p99 ratio above 1 is worse); obs_cpu%: the observer's own CPU, % of one core"
