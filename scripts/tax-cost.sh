#!/usr/bin/env bash
# What observing costs the tasks that are NOT observed: every process on
# the machine pays for the tracepoints an observer turns on, watched or
# not. examples/pingpong.rs (two threads on CPU 0 handing a byte over two
# pipes: per round trip 2 sched_switch, 2 sched_waking, 2 write and 2 read
# system calls) times its round trips while an observer on CPU 1 watches
# something else (a sleeping process), leg by leg, rounds interleaved:
#
#   none       nothing
#   ss         stallscope run --observe SLEEPER (the default: scheduler
#              timing, chains, call boundaries)
#   ss-nocalls the same with --call-bounds off (no syscall events)
#   ss-sampled --observe-timing sampled (no tracing of anyone)
#   bpf-sched  bpftrace: sched_switch and sched_waking tracepoints, each
#              a lookup in an empty map (the least an eBPF observer
#              keyed by thread can do there)
#   bpf-calls  bpftrace: scripts/calltime.bt for the sleeper (the 19
#              write-path syscall tracepoints, keyed by thread)
#   bpf-rawtp  scripts/tax-rawtp.bpf.c through libbpf: raw_tp programs on
#              sched_switch and sched_waking, each a lookup of the current
#              thread in an empty hash map: what a hand-written eBPF
#              backend pays per event at the least (no record is filled,
#              as a perf tracepoint does for bpftrace). Needs clang and
#              libbpf-dev; not in the default legs.
#   bpf-rawtp-sys  the same with raw_tp programs on sys_enter and sys_exit
#              too (every system call of every task: the slow path call
#              boundaries would pay in eBPF).
#
# Prints, per leg, the median ns per round trip and the median of each
# round's difference to that round's `none`.
#
# Usage: sudo scripts/tax-cost.sh [rounds=5] [seconds=15]
#   TAX_LEGS="none ss ..." picks the legs (none is always run).
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-5}
secs=${2:-15}
[ "$(id -u)" = 0 ] || { echo "tax-cost: root needed (tracefs, bpftrace)" >&2; exit 1; }
[ "$(nproc)" -ge 2 ] || { echo "tax-cost: needs 2 CPUs (the load on one, the observer on the other)" >&2; exit 1; }
read -r -a legs <<<"${TAX_LEGS:-ss ss-nocalls ss-sampled bpf-sched bpf-calls}"
for l in "${legs[@]}"; do
  case $l in
    ss | ss-nocalls | ss-sampled) ;;
    bpf-rawtp | bpf-rawtp-sys) { command -v clang >/dev/null && [ -e /usr/include/bpf/libbpf.h ]; } || { echo "bpf-rawtp needs clang and libbpf-dev (apt-get install clang libbpf-dev)" >&2; exit 1; } ;;
    bpf-sched | bpf-calls) command -v bpftrace >/dev/null || { echo "bpftrace missing (apt-get install bpftrace) or drop $l" >&2; exit 1; } ;;
    *) echo "unknown leg $l (ss ss-nocalls ss-sampled bpf-sched bpf-calls bpf-rawtp bpf-rawtp-sys)" >&2; exit 2 ;;
  esac
done
cargo build --release --quiet --example pingpong
bin=${CARGO_TARGET_DIR:-target}/release/stallscope
pp=${CARGO_TARGET_DIR:-target}/release/examples/pingpong
dir=$(mktemp -d /tmp/tax-cost.XXXXXX)
sleeper=""
observer=""
mounted=""
cleanup() {
  [ -z "$observer" ] || kill -INT "$observer" 2>/dev/null || true
  [ -z "$observer" ] || wait "$observer" 2>/dev/null || true
  [ -z "$sleeper" ] || kill "$sleeper" 2>/dev/null || true
  rm -rf "$dir"
  [ -z "$mounted" ] || umount "$mounted" || true
}
trap cleanup EXIT
trap 'exit 130' INT TERM
# bpftrace reads tracepoints' formats from tracefs.
if ! mountpoint -q /sys/kernel/tracing; then
  mount -t tracefs nodev /sys/kernel/tracing && mounted=/sys/kernel/tracing
fi
cat >"$dir/sched.bt" <<'EOF'
BEGIN { @w[0] = 1; }
tracepoint:sched:sched_switch { if (@w[args->prev_pid]) { @n = count(); } }
tracepoint:sched:sched_waking { if (@w[args->pid]) { @m = count(); } }
EOF
# shellcheck source=scripts/calltime-lib.sh
. scripts/calltime-lib.sh
ev=/sys/kernel/tracing/events/syscalls
have=" "
for c in $(grep -o 'sys_enter_[a-z0-9_]*' scripts/calltime.bt | sed 's/^sys_enter_//'); do
  [ -d "$ev/sys_enter_$c" ] && [ -d "$ev/sys_exit_$c" ] && have+="$c "
done
calltime_for "$have" "$dir/calltime.bt"
if [[ " ${legs[*]} " == *" bpf-rawtp"* ]]; then
  clang -O2 -g -target bpf -I"/usr/include/$(uname -m)-linux-gnu" -c scripts/tax-rawtp.bpf.c -o "$dir/rawtp.bpf.o"
  clang -O2 -g -target bpf -DSYSCALLS -I"/usr/include/$(uname -m)-linux-gnu" -c scripts/tax-rawtp.bpf.c -o "$dir/rawtp-sys.bpf.o"
  cc -O2 scripts/tax-rawtp-load.c -o "$dir/rawtp-load" -lbpf
fi
sleep 100000 &
sleeper=$!

# One round of leg $1: prints the median ns per round trip.
round() {
  observer=""
  case $1 in
    none) ;;
    ss) taskset -c 1 "$bin" run --observe "$sleeper" --format jsonl >/dev/null 2>"$dir/err" & observer=$! ;;
    ss-nocalls) taskset -c 1 "$bin" run --observe "$sleeper" --call-bounds off --format jsonl >/dev/null 2>"$dir/err" & observer=$! ;;
    ss-sampled) taskset -c 1 "$bin" run --observe "$sleeper" --observe-timing sampled --format jsonl >/dev/null 2>"$dir/err" & observer=$! ;;
    bpf-sched) taskset -c 1 bpftrace "$dir/sched.bt" >/dev/null 2>"$dir/err" & observer=$! ;;
    bpf-calls) taskset -c 1 bpftrace "$dir/calltime.bt" "$sleeper" >/dev/null 2>"$dir/err" & observer=$! ;;
    bpf-rawtp) taskset -c 1 "$dir/rawtp-load" "$dir/rawtp.bpf.o" >/dev/null 2>"$dir/err" & observer=$! ;;
    bpf-rawtp-sys) taskset -c 1 "$dir/rawtp-load" "$dir/rawtp-sys.bpf.o" >/dev/null 2>"$dir/err" & observer=$! ;;
  esac
  sleep 3
  if [ -n "$observer" ] && ! kill -0 "$observer" 2>/dev/null; then
    echo "leg $1: the observer exited:" >&2
    cat "$dir/err" >&2
    exit 1
  fi
  "$pp" "$secs" 10000 0 >"$dir/pp.out"
  if [ -n "$observer" ]; then
    kill -INT "$observer" 2>/dev/null || true
    wait "$observer" 2>/dev/null || true
  fi
  observer=""
  awk '/^median/ {print $2}' "$dir/pp.out"
}
median() { sort -g | awk '{a[NR]=$1} END {if (NR==0) print "nan"; else print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }

echo "kernel $(uname -r), $(nproc) CPUs, $(cat /sys/devices/system/cpu/vulnerabilities/spectre_v2 2>/dev/null || echo '?'); $rounds rounds of ${secs} s, pingpong 10 000 round trips/s on CPU 0, observers on CPU 1 watching a sleeping process"
: >"$dir/rows"
for r in $(seq "$rounds"); do
  base=$(round none)
  echo "$r none $base 0" >>"$dir/rows"
  printf 'round %s: none %s' "$r" "$base" >&2
  for l in "${legs[@]}"; do
    ns=$(round "$l")
    echo "$r $l $ns $((ns - base))" >>"$dir/rows"
    printf ', %s %s' "$l" "$ns" >&2
  done
  echo >&2
done
printf '%-11s %14s %22s %18s\n' leg ns_per_trip added_ns_per_trip added_per_event
for l in none "${legs[@]}"; do
  ns=$(awk -v l="$l" '$2 == l {print $3}' "$dir/rows" | median)
  d=$(awk -v l="$l" '$2 == l {print $4}' "$dir/rows" | median)
  # Tracepoint hits per round trip each leg hooks: 4 scheduler; 4 of the
  # write-path calls (2 writes' entries and exits); 8 of all calls.
  case $l in
    ss) n=8 ;; bpf-rawtp-sys) n=12 ;; ss-nocalls | bpf-sched | bpf-calls | bpf-rawtp) n=4 ;; *) n=0 ;;
  esac
  per=$(awk -v d="$d" -v n="$n" 'BEGIN { if (n) printf "%.0f", d / n; else print "-" }')
  printf '%-11s %14s %22s %18s\n' "$l" "$ns" "$d" "$per"
done
echo "added: the median over rounds of (leg - that round's none); per event: over the tracepoint hits of an unwatched round trip the leg hooks"
