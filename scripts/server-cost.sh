#!/usr/bin/env bash
# What observing costs the server: PostgreSQL on the root disk (not capped,
# so pgbench is CPU-bound and any cost shows in its tps), `pgbench -c 8 -j
# 2 -T SECONDS`, legs interleaved round by round (the order rotated each
# round), medians printed. A CHECKPOINT before every window (and none
# within one: checkpoint_timeout 30 min) keeps a checkpoint's cost out of
# the comparison: with checkpoints every 30 s, whether one fell in a
# 20 s window moved tps more than any observer. Judged by pgbench's own figures: its tps and the
# p99 of its per-transaction latencies (pgbench --log), as ratios to the
# same round's `none` leg and of the medians.
#
# Legs (COST_LEGS, default "none calls nocalls sampled calltime"):
#   none      nothing observes
#   calls     `stallscope run --observe-name postgres` as shipped (root:
#             the scheduler's events, wake-up chains, call boundaries)
#   nocalls   the same with --call-bounds off
#   nochains  the same with --chains off
#   normal    calls, but under the normal scheduling policy instead of the
#             guest's SCHED_BATCH (STALLSCOPE_NORMAL_SCHED=1)
#   sampled   --observe-timing sampled (no tracing of the server's threads)
#   slow      sampled, reading /proc once a second (--observe-every 1s)
#   calltime  bpftrace timing the same write-path calls (scripts/calltime.bt)
#
# Usage (root): scripts/server-cost.sh [rounds=5] [seconds=20]
# Needs Debian's postgresql (any major version: the newest found is used);
# bpftrace for the calltime leg. Leaves nothing behind: the server is
# stopped and its folder removed on any exit.
set -euo pipefail
rounds=${1:-5}
secs=${2:-20}
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "needs root (tracing, runuser)" >&2; exit 1; }
# shellcheck source=scripts/pg-lab.sh
. scripts/pg-lab.sh   # pg_bin_dir and pg_conf: this script runs its own server
pgbin=$(pg_bin_dir) || { echo "PostgreSQL missing (apt-get install postgresql)" >&2; exit 1; }
read -r -a legs <<<"${COST_LEGS:-none calls nocalls sampled calltime}"
for leg in "${legs[@]}"; do
  case $leg in
    none|calls|nocalls|nochains|normal|sampled|slow|calltime) ;;
    *) echo "unknown leg $leg (none calls nocalls nochains normal sampled slow calltime)" >&2; exit 2 ;;
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
pg() { runuser -u postgres -- "$@"; }
cleanup() {
  # A round runs in a subshell (`< <(round ...)`): its observer's pid is
  # in a file, not in this shell's variable.
  if [ -s "$dir/observer.pid" ]; then
    kill -INT "$(cat "$dir/observer.pid")" 2>/dev/null || true
    sleep 2
  fi
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

# Starts the observer of leg $1 (none: nothing); sets $observer.
start_observer() {
  observer=""
  local log=$dir/observer.err
  case $1 in
    none) return ;;
    calls) "$bin" run --observe-name postgres --format jsonl >/dev/null 2>"$log" & ;;
    nocalls) "$bin" run --observe-name postgres --call-bounds off --format jsonl >/dev/null 2>"$log" & ;;
    nochains) "$bin" run --observe-name postgres --chains off --format jsonl >/dev/null 2>"$log" & ;;
    normal) STALLSCOPE_NORMAL_SCHED=1 "$bin" run --observe-name postgres --format jsonl >/dev/null 2>"$log" & ;;
    slow) "$bin" run --observe-name postgres --observe-timing sampled --observe-every 1s --format jsonl >/dev/null 2>"$log" & ;;
    sampled) "$bin" run --observe-name postgres --observe-timing sampled --format jsonl >/dev/null 2>"$log" & ;;
    calltime) bpftrace "$bt" "$postmaster" >/dev/null 2>"$log" & ;;
  esac
  observer=$!
  echo "$observer" >"$dir/observer.pid"
  sleep 2
  kill -0 "$observer" 2>/dev/null || { echo "leg $1: the observer exited:" >&2; cat "$log" >&2; exit 1; }
}
stop_observer() {
  [ -n "$observer" ] || return 0
  kill -INT "$observer" 2>/dev/null || true
  wait "$observer" 2>/dev/null || true
  observer=""
  : >"$dir/observer.pid"
}

# One round of leg $1: prints "tps p99_ms cpu%" (cpu%: the observer's own
# user+system time as % of one core over pgbench's window).
round() {
  local leg=$1 c0=0 c1=0 t0 t1 tps p99
  rm -f "$dir/log"/pgbench_log.*
  # Every window starts from the same state: no checkpoint falls in one
  # window and not in another (checkpoint_timeout is 30 min).
  psql_ CHECKPOINT
  start_observer "$leg"
  [ -n "$observer" ] && c0=$(awk '{print $14+$15}' /proc/"$observer"/stat)
  t0=$(date +%s.%N)
  tps=$(bench -c 8 -j 2 -T "$secs" -l 2>/dev/null | awk '/^tps/ {print $3; exit}')
  t1=$(date +%s.%N)
  [ -n "$observer" ] && c1=$(awk '{print $14+$15}' /proc/"$observer"/stat)
  stop_observer
  # pgbench --log: column 3 is each transaction's latency in µs.
  p99=$(cat "$dir/log"/pgbench_log.* | awk '{print $3}' | sort -n |
    awk '{a[NR]=$1} END {i=int(NR*0.99); if (i<1) i=1; printf "%.3f", a[i]/1000}')
  echo "$tps $p99 $(awk -v a="$c0" -v b="$c1" -v t="$(getconf CLK_TCK)" -v s="$t0" -v e="$t1" 'BEGIN {printf "%.2f", (b-a)/t/(e-s)*100}')"
}

median() { sort -g | awk '{a[NR]=$1} END {if (NR==0) print "nan"; else print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
declare -A tps p99 cpu rtps rp99
echo "PostgreSQL $(basename "$(dirname "$pgbin")"), pgbench -c 8 -j 2 -T $secs on the root disk ($(findmnt -no FSTYPE -T "$dir")), kernel $(uname -r); $rounds rounds, legs: ${legs[*]}"
printf '%-6s %-9s %10s %9s %8s\n' round leg tps p99_ms obs_cpu%
n=${#legs[@]}
for r in $(seq 1 "$rounds"); do
  declare -A this_tps=() this_p99=()
  for i in $(seq 0 $((n - 1))); do
    leg=${legs[$(((i + r - 1) % n))]}
    read -r t p c < <(round "$leg")
    printf '%-6s %-9s %10.1f %9.2f %8.2f\n' "$r" "$leg" "$t" "$p" "$c"
    tps[$leg]+="$t "; p99[$leg]+="$p "; cpu[$leg]+="$c "
    this_tps[$leg]=$t; this_p99[$leg]=$p
  done
  if [ -n "${this_tps[none]:-}" ]; then
    for leg in "${legs[@]}"; do
      rtps[$leg]+="$(awk -v a="${this_tps[$leg]}" -v b="${this_tps[none]}" 'BEGIN {print a/b}') "
      rp99[$leg]+="$(awk -v a="${this_p99[$leg]}" -v b="${this_p99[none]}" 'BEGIN {print a/b}') "
    done
  fi
done
echo
printf '%-9s %10s %9s %8s %10s %10s\n' leg tps p99_ms obs_cpu% tps_ratio p99_ratio
for leg in "${legs[@]}"; do
  t=$(echo ${tps[$leg]} | tr ' ' '\n' | median)
  p=$(echo ${p99[$leg]} | tr ' ' '\n' | median)
  c=$(echo ${cpu[$leg]} | tr ' ' '\n' | median)
  rt=$(echo ${rtps[$leg]:-} | tr ' ' '\n' | median)
  rp=$(echo ${rp99[$leg]:-} | tr ' ' '\n' | median)
  printf '%-9s %10.1f %9.2f %8.2f %10s %10s\n' "$leg" "$t" "$p" "$c" "$rt" "$rp"
done
echo "medians of $rounds; tps_ratio, p99_ratio: the median of each round's leg / that round's none"
echo "(p99 ratio above 1 is worse); obs_cpu%: the observer's own CPU, % of one core"
