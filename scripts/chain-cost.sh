#!/usr/bin/env bash
# What wake-up chains cost, counted where it is paid, on two loads:
#
# 1. PostgreSQL under `pgbench -c 8 -j 2` on a capped lab ext4, observed in
#    turn by nothing, stallscope with chains, stallscope without, and
#    bpftrace running scripts/offwake.bt (offwaketime without stacks: the
#    same information, every sleep of a postgres thread and who woke it).
#    Rounds alternate the legs (starting one leg later each round);
#    medians are printed. Both tools watch our postmaster and its children
#    (stallscope run --observe PID; offwake.bt PID): other PostgreSQL
#    servers on the machine are left out. Per leg, over pgbench's window:
#    the whole system's busy CPU (all CPUs, /proc/stat
#    user+nice+system+irq+softirq, % of one core), the observer's own CPU
#    (utime+stime), bpftrace's BPF programs' run time
#    (kernel.bpf_stats_enabled=1, bpftool's run_time_ns), the postgres
#    processes' CPU per transaction, context switches per second, tps.
#    On a small VM these whole-system figures move more between rounds
#    than either tool costs.
# 2. The cost in the traced threads' own context, measured exactly:
#    examples/pingpong.rs, two threads pinned to CPU 0 handing a byte back
#    and forth 10 000 times a second (each round trip: two sleeps in S,
#    two wakeups, so four scheduler events of watched threads), timing the
#    wall time of each burst of round trips on a CPU of their own. The
#    observers run on CPU 1. What a leg adds per round trip over "none"
#    is what tracing costs in the traced tasks' context (the kernel's
#    tracepoints, filters and ring buffer for stallscope; the BPF programs
#    and their glue for bpftrace), whoever the kernel charges it to.
#    Whole cost = that, at the load's rate, plus the observer's own CPU.
# (perf cannot split kernel time on a VM without a PMU: cpu-clock samples
# never land in the scheduler's tracepoints, which run with interrupts off.)
#
# Usage (root): scripts/chain-cost.sh [rounds=3] [seconds=20] [cap=20MiB]
#   CHAIN_COST_KSTACK=1 adds a leg with offwake.bt keyed by kernel stack.
#   CHAIN_COST_LOADS="pgbench pingpong" (the default) picks the loads.
# Needs PostgreSQL 15, bpftrace and bpftool (Debian: postgresql, bpftrace,
# bpftool). Leaves nothing behind: on any exit PostgreSQL and the pingpong
# are stopped, the lab (/var/tmp/lab-cost) is taken down,
# kernel.bpf_stats_enabled is restored, observers are stopped and no
# tracefs instance of ours is left.
set -euo pipefail
rounds=${1:-3}
secs=${2:-20}
cap=${3:-20MiB}
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "needs root (lab, tracing, bpf)" >&2; exit 1; }
pgbin=/usr/lib/postgresql/15/bin
[ -x "$pgbin/initdb" ] || { echo "PostgreSQL 15 missing (apt-get install postgresql)" >&2; exit 1; }
command -v bpftrace >/dev/null || { echo "bpftrace missing (apt-get install bpftrace)" >&2; exit 1; }
command -v bpftool >/dev/null || { echo "bpftool missing (apt-get install bpftool)" >&2; exit 1; }
cargo build --release --quiet
cargo build --release --quiet --example pingpong
bin=${CARGO_TARGET_DIR:-target}/release/stallscope
pingpong=${CARGO_TARGET_DIR:-target}/release/examples/pingpong
lab=/var/tmp/lab-cost
port=54393
tr=/sys/kernel/tracing
out=$(mktemp -d /tmp/chain-cost.XXXXXX)
legs=(none chains nochains bpftrace)
[ "${CHAIN_COST_KSTACK:-0}" = 1 ] && legs+=(bpftrace-kstack)
read -r -a loads <<<"${CHAIN_COST_LOADS:-pgbench pingpong}"
pp_rate=10000   # pingpong round trips a second
[ "$(nproc)" -ge 2 ] || { echo "the pingpong needs 2 CPUs (one for the load, one for the observer)" >&2; exit 1; }

# What the "chains" legs run: --chains once stallscope has it, else the
# scheduler's events (auto) against sampled /proc timing.
if "$bin" run --help | grep -q -- '--chains'; then
  on=(--chains auto); off=(--chains off)
else
  on=(--observe-timing auto); off=(--observe-timing sampled)
fi

stats_old=$(sysctl -n kernel.bpf_stats_enabled)
observer=""
load_pid=""
ours=()   # stallscope pids: their tracefs instances must be gone
ids=()    # the BPF programs of the bpftrace leg running now
wakeups=- # what stop_observer found
# shellcheck source=scripts/pg-lab.sh
. scripts/pg-lab.sh
cleanup() {
  set +e
  if [ -n "$observer" ] && kill -0 "$observer" 2>/dev/null; then
    kill -INT "$observer"; wait "$observer"
  fi
  [ -n "$load_pid" ] && kill "$load_pid" 2>/dev/null
  pg_stop
  "$bin" lab down --dir "$lab" >/dev/null 2>&1
  if ! grep -q " $lab/" /proc/mounts; then rm -rf --one-file-system "$lab"; fi
  sysctl -q kernel.bpf_stats_enabled="$stats_old"
  for p in "${ours[@]}"; do
    for i in "$tr"/instances/stallscope-"$p" "$tr"/instances/stallscope-"$p".*; do
      [ -d "$i" ] && { echo "removing left tracefs instance $i" >&2; rmdir "$i"; }
    done
  done
  rm -rf "$out"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

is_tracefs() { [ "$(stat -f -c %T "$tr" 2>/dev/null)" = tracefs ]; }
ticks=$(getconf CLK_TCK)

# Counters read at both ends of a window.
sys_busy() { awk '/^cpu / {print $2+$3+$4+$7+$8; exit}' /proc/stat; }
ctxt() { awk '/^ctxt/ {print $2}' /proc/stat; }
proc_cpu() { awk '{print $14+$15}' "/proc/$1/stat"; }
# Our server's CPU: the postmaster's and its live children's own time
# plus what the postmaster reaped from backends that exited
# (cutime+cstime). (Other PostgreSQL servers may run on the machine.)
pg_cpu() {
  # (cat, not awk FILES: mawk stops at the first process that went away.)
  { cat /proc/[0-9]*/stat 2>/dev/null || true; } |
    awk -v pm="$postmaster" '$2 == "(postgres)" && ($1 == pm || $4 == pm) {s += $14+$15} END {print s+0}' |
    awk -v pm="$(awk '{print $16+$17}' "/proc/$postmaster/stat")" '{print $1+pm}'
}
bpf_ids() { bpftool prog show | awk -F: '/^[0-9]+:/ {print $1}' | sort -n; }
# Sum of run_time_ns over prog ids $@ (0 while stats were off).
bpf_ns() {
  bpftool prog show | awk -v ids=" $* " '
    /^[0-9]+:/ { id = $1; sub(":", "", id); keep = index(ids, " " id " ") > 0 }
    keep { for (i = 1; i < NF; i++) if ($i == "run_time_ns") s += $(i+1) }
    END { printf "%d\n", s }'
}

# Starts leg $1's observer of process $2 (threads named $3, for
# offwake.bt), logs at $4.*, run as `$5 ...` (a CPU pinning, or nothing);
# sets observer and ids, and waits until it is attached.
start_observer() {
  local leg=$1 pid=$2 comm=$3 log=$4 before stack=0
  shift 4
  observer=""; ids=()
  case $leg in
    chains|nochains)
      local flags=("${on[@]}"); [ "$leg" = nochains ] && flags=("${off[@]}")
      "$@" "$bin" run --observe "$pid" "${flags[@]}" --format jsonl >"$log.jsonl" 2>"$log.err" &
      observer=$!; ours+=("$observer")
      sleep 1 ;;
    bpftrace*)
      before=" $(bpf_ids | tr '\n' ' ')"
      # bpftrace reads the tracepoints' formats from tracefs: mounted, if
      # absent, in a mount namespace of its own, so it goes when it exits.
      [ "$leg" = bpftrace-kstack ] && stack=1
      "$@" unshare -m sh -c "mountpoint -q $tr || mount -t tracefs nodev $tr; exec bpftrace scripts/offwake.bt $stack $pid $comm" \
        >"$log.bt" 2>"$log.err" &
      observer=$!
      for _ in $(seq 1 300); do   # until both probes are loaded (30 s)
        mapfile -t ids < <(bpftool prog show | awk -v b="$before" '
          /^[0-9]+:/ { id = $1; sub(":", "", id)
            if (index(b, " " id " ") == 0 && /name sched_(switch|waking)/) print id }')
        [ "${#ids[@]}" -ge 2 ] && break
        kill -0 "$observer" 2>/dev/null || { cat "$log.err" >&2; exit 1; }
        sleep 0.1
      done
      [ "${#ids[@]}" -ge 2 ] || { echo "bpftrace did not attach" >&2; exit 1; }
      sleep 0.5 ;;
  esac
}

# Stops the observer of leg $1 (log $2); sets wakeups to bpftrace's count
# of them, or "-". (Not in a subshell: only this shell can wait for it.)
stop_observer() {
  local leg=$1 log=$2
  wakeups=-
  [ -n "$observer" ] || return 0
  kill -INT "$observer"; wait "$observer" || true
  case $leg in
    bpftrace*) wakeups=$(awk '/^@wakeups:/ {print $2; f=1} END {if (!f) print 0}' "$log.bt") ;;
    *) if is_tracefs && compgen -G "$tr/instances/stallscope-$observer*" >/dev/null; then
         echo "tracefs instance of stallscope $observer left behind" >&2
       fi ;;
  esac
  observer=""
}

# One pgbench round of leg $1: prints "tps sys% obs% bpf% pg_us/tx ctxt/s wake/s".
round() {
  local leg=$1 log="$out/$1.$2" t0 t1 s0 s1 x0 x1 o0=0 o1=0 p0 p1 b0=0 b1=0 wake=-
  psql_ CHECKPOINT >/dev/null
  [ "$leg" = none ] || start_observer "$leg" "$postmaster" postgres "$log"
  [ -n "$observer" ] && o0=$(proc_cpu "$observer")
  [ "${#ids[@]}" -gt 0 ] && b0=$(bpf_ns "${ids[@]}")
  p0=$(pg_cpu); s0=$(sys_busy); x0=$(ctxt); t0=$(date +%s.%N)
  bench -c 8 -j 2 -T "$secs" >"$log.pgbench" 2>&1
  sleep 0.3   # let the postmaster reap the backends
  t1=$(date +%s.%N); s1=$(sys_busy); x1=$(ctxt); p1=$(pg_cpu)
  [ "${#ids[@]}" -gt 0 ] && b1=$(bpf_ns "${ids[@]}")
  [ -n "$observer" ] && o1=$(proc_cpu "$observer")
  stop_observer "$leg" "$log"
  [ "$wakeups" = - ] || wake=$(awk -v n="$wakeups" -v a="$t0" -v b="$t1" 'BEGIN {printf "%.0f", n/(b-a)}')
  ids=()
  local tps tx
  tps=$(awk '/^tps/ {print $3; exit}' "$log.pgbench")
  tx=$(awk '/number of transactions actually processed/ {print $NF; exit}' "$log.pgbench")
  [ -n "$tps" ] || { cat "$log.pgbench" >&2; exit 1; }
  awk -v tps="$tps" -v tx="$tx" -v hz="$ticks" -v t="$t0" -v e="$t1" \
      -v s="$((s1 - s0))" -v o="$((o1 - o0))" -v b="$((b1 - b0))" -v p="$((p1 - p0))" \
      -v x="$((x1 - x0))" -v w="$wake" 'BEGIN {
    d = e - t
    printf "%s %.2f %.3f %.3f %.1f %.0f %s\n", tps, s/hz/d*100, o/hz/d*100, b/1e9/d*100,
      p/hz*1e6/tx, x/d, w }'
}

# One pingpong round of leg $1: prints "ns/round-trip obs% bpf%". The
# load runs on CPU 0, the observer on CPU 1; the observer's and BPF's
# CPU are counted over the load's measured seconds (its first second,
# while observers attach, is left out by pingpong itself).
pp_round() {
  local leg=$1 log="$out/pp.$1.$2" run=$((secs + 2)) o0=0 o1=0 b0=0 b1=0 t0 t1
  "$pingpong" "$run" "$pp_rate" 0 >"$log.out" &
  load_pid=$!
  [ "$leg" = none ] || start_observer "$leg" "$load_pid" pingpong "$log" taskset -c 1
  sleep 1
  [ -n "$observer" ] && o0=$(proc_cpu "$observer")
  [ "${#ids[@]}" -gt 0 ] && b0=$(bpf_ns "${ids[@]}")
  t0=$(date +%s.%N)
  wait "$load_pid"; load_pid=""
  t1=$(date +%s.%N)
  [ "${#ids[@]}" -gt 0 ] && b1=$(bpf_ns "${ids[@]}")
  [ -n "$observer" ] && o1=$(proc_cpu "$observer")
  stop_observer "$leg" "$log"
  ids=()
  local ns
  ns=$(awk '/^median/ {print $2}' "$log.out")
  if [ -z "$ns" ] || [ "$ns" = - ]; then cat "$log.out" >&2; exit 1; fi
  awk -v ns="$ns" -v hz="$ticks" -v t="$t0" -v e="$t1" -v o="$((o1 - o0))" -v b="$((b1 - b0))" \
    'BEGIN { d = e - t; printf "%s %.3f %.3f\n", ns, o/hz/d*100, b/1e9/d*100 }'
}

median() { sort -g | awk '{a[NR]=$1} END {if (!NR) print "-"; else print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
declare -A col
med() { tr ' ' '\n' <<<"${col[$1.$2]}" | { grep -v '^-\?$' || true; } | median; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {if (b > 0) printf "%.2f", a/b; else print "n/a (bpftrace cost <= 0)"}'; }
nl=${#legs[@]}

# $rounds rounds of every leg, each round starting one leg later: runs
# round function $1 (in this shell: cleanup must see the observer),
# prints each row with format $3 and keeps the columns named $4... as
# col[$2.LEG.NAME].
all_rounds() {
  local fn=$1 key=$2 fmt=$3 r k leg v i
  shift 3
  local names=("$@")
  for r in $(seq 1 "$rounds"); do
    for k in $(seq 0 $((nl - 1))); do
      leg=${legs[$(( (k + r - 1) % nl ))]}
      "$fn" "$leg" "$r" >"$out/round"
      read -r -a v <"$out/round"
      # shellcheck disable=SC2059 # the format is the caller's
      printf "$fmt" "$r" "$leg" "${v[@]}"
      for i in "${!names[@]}"; do col[$key.$leg.${names[$i]}]+="${v[$i]} "; done
    done
  done
}
sysctl -q kernel.bpf_stats_enabled=1

pgbench_load() {
  pg_lab_up
  postmaster=$(head -1 "$pgdata/postmaster.pid")
  local leg
  echo "PostgreSQL 15, pgbench -c 8 -j 2 -T $secs, ext4 capped at $cap, $(nproc) CPUs; $rounds rounds"
  echo "chains: stallscope run --observe POSTMASTER ${on[*]} --format jsonl; nochains: ${off[*]}"
  printf '%-5s %-15s %8s %8s %8s %8s %9s %8s %8s\n' round leg tps sys% obs% bpf% pg_us/tx ctxt/s wake/s
  all_rounds round pg '%-5s %-15s %8.1f %8.2f %8.3f %8.3f %9.1f %8s %8s\n' tps sys obs bpf pgus ctxt wake
  pg_stop
  "$bin" lab down --dir "$lab" >/dev/null 2>&1

  echo
  echo "medians of $rounds"
  printf '%-15s %8s %8s %8s %8s %8s %9s %8s %8s %9s %9s\n' leg tps tps_loss% sys% obs% bpf% pg_us/tx ctxt/s wake/s sys_cost pg_cost
  local base_tps base_sys base_pg t s p loss sc pc
  base_tps=$(med pg.none tps); base_sys=$(med pg.none sys); base_pg=$(med pg.none pgus)
  declare -A cost
  for leg in "${legs[@]}"; do
    t=$(med "pg.$leg" tps); s=$(med "pg.$leg" sys); p=$(med "pg.$leg" pgus)
    read -r loss sc pc < <(awk -v t="$t" -v bt="$base_tps" -v s="$s" -v bs="$base_sys" -v p="$p" -v bp="$base_pg" \
      'BEGIN {printf "%.1f %.2f %.2f\n", (1-t/bt)*100, s-bs, (p-bp)*t/1e4}')
    cost[$leg.sys]=$sc; cost[$leg.pg]=$pc
    printf '%-15s %8.1f %8s %8.2f %8.3f %8.3f %9.1f %8s %8s %9s %9s\n' "$leg" "$t" "$loss" "$s" \
      "$(med "pg.$leg" obs)" "$(med "pg.$leg" bpf)" "$p" "$(med "pg.$leg" ctxt)" "$(med "pg.$leg" wake)" "$sc" "$pc"
  done
  echo
  echo "stallscope chains / bpftrace, whole cost: sys_cost $(ratio "${cost[chains.sys]}" "${cost[bpftrace.sys]}"), pg_cost $(ratio "${cost[chains.pg]}" "${cost[bpftrace.pg]}")"
  cat <<'EOT'
tps: pgbench's; tps_loss%: against none's median. sys%: whole-system busy CPU
(all CPUs, user+nice+system+irq+softirq) in % of one core; obs%: the observer
process's own utime+stime; bpf%: its BPF programs' run time (bpf_stats);
pg_us/tx: CPU of the postgres processes per transaction (µs); ctxt/s: context
switches per second (system-wide); wake/s: postgres sleeps ended by a wakeup
per second (bpftrace's count). sys_cost: sys% over none's (% of one core);
pg_cost: the postgres processes' extra CPU per transaction over none's, at
the leg's tps (% of one core). The whole system includes everything else
running on the machine: with other load the figures are noisy.
EOT
}

pingpong_load() {
  local leg
  echo "pingpong: 2 threads on CPU 0, $pp_rate round trips/s (4 scheduler events each), $secs s; observers on CPU 1; $rounds rounds"
  printf '%-5s %-15s %10s %8s %8s\n' round leg ns/trip obs% bpf%
  all_rounds pp_round pp '%-5s %-15s %10s %8s %8s\n' ns obs bpf
  echo
  echo "medians of $rounds"
  printf '%-15s %10s %12s %12s %8s %8s %10s\n' leg ns/trip in-context ns/event obs% bpf% whole%
  local base ns add ev o b w
  base=$(med pp.none ns)
  declare -A whole
  for leg in "${legs[@]}"; do
    ns=$(med "pp.$leg" ns); o=$(med "pp.$leg" obs); b=$(med "pp.$leg" bpf)
    read -r add ev w < <(awk -v n="$ns" -v b0="$base" -v o="$o" -v r="$pp_rate" \
      'BEGIN { a = n - b0; printf "%.0f %.0f %.2f\n", a, a/4, a*r/1e9*100 + o }')
    whole[$leg]=$w
    printf '%-15s %10s %12s %12s %8s %8s %10s\n' "$leg" "$ns" "$add" "$ev" "$o" "$b" "$w"
  done
  echo
  echo "whole cost, stallscope chains / bpftrace: $(ratio "${whole[chains]}" "${whole[bpftrace]}")"
  [ -n "${whole[bpftrace-kstack]:-}" ] &&
    echo "whole cost, stallscope chains / bpftrace with kernel stacks: $(ratio "${whole[chains]}" "${whole[bpftrace-kstack]}")"
  cat <<'EOT'
ns/trip: median wall time of a round trip (per-second medians, then the
median over rounds); in-context: what the leg adds per round trip over
none's, paid in the traced threads' context (ns); ns/event: that over the
4 scheduler events of a round trip; obs%: the observer process's own CPU
(% of one core); bpf%: BPF run time (part of in-context already);
whole%: in-context at the load's rate plus obs%, in % of one core.
EOT
}

for l in "${loads[@]}"; do
  case $l in
    pgbench) pgbench_load ;;
    pingpong) pingpong_load ;;
    *) echo "unknown load $l (pgbench, pingpong)" >&2; exit 2 ;;
  esac
  echo
done
