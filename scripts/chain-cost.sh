#!/usr/bin/env bash
# What observing costs, wake-up chains and call boundaries, counted where
# it is paid, on three loads, each observed in turn by (the legs):
#
#   none      nothing
#   calls     stallscope run --observe PID (chains and call boundaries:
#             the scheduler's events, page waits, and sys_enter/sys_exit
#             of the 19 write-path calls, all in its raw instance)
#   chains    the same with STALLSCOPE_HIDE_EVENTS=syscalls:sys_enter_fdatasync
#             (as on a kernel without syscall events: no call boundaries)
#   offwake   bpftrace running scripts/offwake.bt (offwaketime without
#             stacks: every sleep of a watched thread and who woke it,
#             what chains gather)
#   calltime  bpftrace running scripts/calltime.bt (the wall time of the
#             same write-path calls per thread and call, what call
#             boundaries gather)
#   and on request (CHAIN_COST_LEGS, CHAIN_COST_KSTACK=1):
#   nochains  stallscope with --chains off (call boundaries still on)
#   offwake-kstack  offwake.bt keyed by the waker's kernel stack too
#
# Every observer watches one process and its children (stallscope run
# --observe PID; the bpftrace scripts filter on PID and its children the
# same way): other processes of the same name are left out. Rounds run
# every leg once, interleaved (each round starts one leg later); medians
# over rounds are printed.
#
# 1. pgbench: PostgreSQL under `pgbench -c 8 -j 2` on a lab ext4, capped
#    (cap=20MiB) or not (cap=0: the uncapped disk #23 measures on, where
#    pgbench is CPU-bound and an observer's cost shows in tps). Per leg,
#    over pgbench's window: tps and its drop against none (of the medians,
#    and the median of each round's drop against that round's none), the
#    observer's own CPU (utime+stime), bpftrace's BPF programs' run time
#    (kernel.bpf_stats_enabled=1, bpftool's run_time_ns), the whole
#    system's busy CPU (all CPUs, /proc/stat
#    user+nice+system+irq+softirq, % of one core), the postgres processes'
#    CPU per transaction, context switches per second. On a small VM the
#    whole-system figures move more between rounds than either tool
#    costs; tps needs >= 5 rounds on a quiet machine.
# 2. The cost in the traced threads' own context, measured exactly, on
#    two microloads pinned to CPU 0 that time their own bursts by the
#    wall clock (observers run on CPU 1). What a leg adds per unit over
#    none is what tracing costs in the traced tasks' context (the
#    kernel's tracepoints, filters and ring buffer for stallscope; the BPF
#    programs and their glue for bpftrace), whoever the kernel charges it
#    to. Whole cost = that, at the load's rate, plus the observer's own
#    CPU.
#    pingpong (examples/pingpong.rs): two threads handing a byte back and
#      forth 10 000 times a second over pipes; a round trip is two sleeps
#      in S and two wakeups (four scheduler events) and two write() calls
#      (four syscall events for calls and calltime).
#    syncloop (examples/syncloop.rs): one thread, write() of 64 bytes then
#      fdatasync() on a tmpfs file, 10 000 pairs a second; a call is two
#      syscall events and nothing else (neither sleeps on tmpfs).
# (perf cannot split kernel time on a VM without a PMU: cpu-clock samples
# never land in the scheduler's tracepoints, which run with interrupts off.)
#
# Usage (root): scripts/chain-cost.sh [rounds=5] [seconds=20] [cap=20MiB|0]
#   cap 0: the lab's ext4 without a write cap.
#   CHAIN_COST_LOADS="pgbench pingpong syncloop" (the default) picks the loads.
#   CHAIN_COST_LEGS="none calls chains offwake calltime" (the default)
#     picks the legs (none among them; also nochains, offwake-kstack).
#   CHAIN_COST_KSTACK=1 adds offwake-kstack.
# Takes about rounds x legs x (3 x seconds + 20 s) with all loads, plus a
# minute for the lab: 5 rounds of 20 s, 5 legs, 30-35 minutes.
# Needs PostgreSQL (the newest installed is used), bpftrace and bpftool (Debian: postgresql, bpftrace,
# bpftool). Leaves nothing behind: on any exit PostgreSQL and the
# microloads are stopped, the lab (/var/tmp/lab-cost) is taken down,
# kernel.bpf_stats_enabled is restored, observers are stopped and no
# tracefs instance of ours is left.
set -euo pipefail
rounds=${1:-5}
secs=${2:-20}
cap=${3:-20MiB}
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "needs root (lab, tracing, bpf)" >&2; exit 1; }
# shellcheck source=scripts/pg-lab.sh
. scripts/pg-lab.sh
pgbin=$(pg_bin_dir) || pgbin=""
read -r -a loads <<<"${CHAIN_COST_LOADS:-pgbench pingpong syncloop}"
read -r -a legs <<<"${CHAIN_COST_LEGS:-none calls chains offwake calltime}"
[ "${CHAIN_COST_KSTACK:-0}" = 1 ] && [[ " ${legs[*]} " != *" offwake-kstack "* ]] && legs+=(offwake-kstack)
for leg in "${legs[@]}"; do
  case $leg in
    none|calls|chains|nochains|offwake|offwake-kstack|calltime) ;;
    *) echo "unknown leg $leg (none calls chains nochains offwake offwake-kstack calltime)" >&2; exit 2 ;;
  esac
done
[[ " ${legs[*]} " == *" none "* ]] || { echo "the legs need none (the baseline)" >&2; exit 2; }
for l in "${loads[@]}"; do
  case $l in
    pgbench) [ -n "$pgbin" ] || { echo "PostgreSQL missing (apt-get install postgresql)" >&2; exit 1; } ;;
    pingpong|syncloop) [ "$(nproc)" -ge 2 ] || { echo "$l needs 2 CPUs (one for the load, one for the observer)" >&2; exit 1; } ;;
    *) echo "unknown load $l (pgbench, pingpong, syncloop)" >&2; exit 2 ;;
  esac
done
command -v bpftrace >/dev/null || { echo "bpftrace missing (apt-get install bpftrace)" >&2; exit 1; }
command -v bpftool >/dev/null || { echo "bpftool missing (apt-get install bpftool)" >&2; exit 1; }
cargo build --release --quiet
cargo build --release --quiet --example pingpong --example syncloop
bin=${CARGO_TARGET_DIR:-target}/release/stallscope
pingpong=${CARGO_TARGET_DIR:-target}/release/examples/pingpong
syncloop=${CARGO_TARGET_DIR:-target}/release/examples/syncloop
lab=/var/tmp/lab-cost
port=54393
tr=/sys/kernel/tracing
out=$(mktemp -d /tmp/chain-cost.XXXXXX)
pp_rate=10000   # pingpong round trips a second
sl_rate=10000   # syncloop write+fdatasync pairs a second
sl_dir=/dev/shm # syncloop's tmpfs
hide=syscalls:sys_enter_fdatasync   # hides every syscall event from stallscope

# What the stallscope legs run: --chains once stallscope has it, else the
# scheduler's events (auto) against sampled /proc timing.
if "$bin" run --help | grep -q -- '--chains'; then
  on=(--chains auto); off=(--chains off)
else
  on=(--observe-timing auto); off=(--observe-timing sampled)
fi

stats_old=$(sysctl -n kernel.bpf_stats_enabled)
# The dirty limits: the lab sets and restores them; another lab going up
# or down on the machine meanwhile can leave them changed (said on exit).
dirty() { sysctl vm.dirty_bytes vm.dirty_background_bytes vm.dirty_ratio vm.dirty_background_ratio | tr '\n' ' '; }
dirty_old=$(dirty)
observer=""
load_pid=""
ours=()   # stallscope pids: their tracefs instances must be gone
ids=()    # the BPF programs of the bpftrace leg running now
seen=-    # what stop_observer found

# Runs `sh -c $1 sh ARGS...` with tracefs at $tr, mounted in a mount
# namespace of its own if it is not there (stallscope unmounts what it
# mounted; tracefs instances and events are the same in every mount).
with_tracefs() {
  local script=$1
  shift
  unshare -m sh -c "mountpoint -q $tr || mount -t tracefs nodev $tr || exit 1; $script" sh "$@"
}
# The tracefs instances of stallscope pids $@, one a line.
instances_of() {
  [ "$#" -gt 0 ] || return 0
  # shellcheck disable=SC2016 # expanded by the inner sh
  with_tracefs 'for p; do for i in '"$tr"'/instances/stallscope-"$p" '"$tr"'/instances/stallscope-"$p".*; do [ -d "$i" ] && echo "$i"; done; done; true' "$@"
}

cleanup() {
  set +e
  if [ -n "$observer" ] && kill -0 "$observer" 2>/dev/null; then
    kill -INT "$observer"; wait "$observer"
  fi
  if [ -n "$load_pid" ]; then
    kill "$load_pid" 2>/dev/null; wait "$load_pid" 2>/dev/null
    rm -f "$sl_dir/syncloop.$load_pid"
  fi
  pg_stop
  "$bin" lab down --dir "$lab" >/dev/null 2>&1
  if ! grep -q " $lab/" /proc/mounts; then rm -rf --one-file-system "$lab"; fi
  sysctl -q kernel.bpf_stats_enabled="$stats_old"
  local left
  left=$(instances_of "${ours[@]}")
  if [ -n "$left" ]; then
    echo "removing left tracefs instances: $left" >&2
    # shellcheck disable=SC2016,SC2086 # expanded by the inner sh; one path a word
    with_tracefs 'for i; do rmdir "$i"; done' $left
  fi
  rm -rf "$out"
  [ "$(dirty)" = "$dirty_old" ] ||
    echo "warning: the dirty limits were $dirty_old and are now $(dirty)(another lab on the machine meanwhile?)" >&2
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# calltime.bt for this kernel: the calls whose sys_enter and sys_exit
# tracepoints are both there. Sets ncalls.
# shellcheck source=scripts/calltime-lib.sh
. scripts/calltime-lib.sh
ncalls=0
if [[ " ${legs[*]} " == *" calltime "* ]]; then
  # shellcheck disable=SC2016 # expanded by the inner sh
  mapfile -t have < <(grep -o 'sys_enter_[a-z0-9_]*' scripts/calltime.bt | sed 's/^sys_enter_//' |
    with_tracefs 'while read -r c; do [ -d '"$tr"'/events/syscalls/sys_enter_$c ] && [ -d '"$tr"'/events/syscalls/sys_exit_$c ] && echo "$c"; done; true')
  ncalls=${#have[@]}
  [ "$ncalls" -gt 0 ] || { echo "this kernel has no syscall tracepoints (CONFIG_FTRACE_SYSCALLS): drop calltime" >&2; exit 1; }
  calltime_for "${have[*]}" "$out/calltime.bt"
fi

# Call boundaries as stallscope sees them (probe's row), for the header.
calls_row=$("$bin" probe 2>/dev/null | awk '$1 == "call" && $2 == "boundaries" {$1 = $2 = ""; sub(/^ +/, ""); print; exit}')
[ -n "$calls_row" ] || calls_row="(no such row: this stallscope has no call boundaries, calls = chains)"

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
  local leg=$1 pid=$2 comm=$3 log=$4 before want pat script
  shift 4
  observer=""; ids=()
  case $leg in
    calls|chains|nochains)
      local flags=("${on[@]}") env=(env -u STALLSCOPE_HIDE_EVENTS)
      [ "$leg" = nochains ] && flags=("${off[@]}")
      [ "$leg" = chains ] && env=(env STALLSCOPE_HIDE_EVENTS="$hide")
      "${env[@]}" "$@" "$bin" run --observe "$pid" "${flags[@]}" --format jsonl >"$log.jsonl" 2>"$log.err" &
      observer=$!; ours+=("$observer")
      sleep 1 ;;
    offwake*|calltime)
      case $leg in
        offwake) script="scripts/offwake.bt 0 $pid $comm"; want=2; pat='sched_(switch|waking)' ;;
        offwake-kstack) script="scripts/offwake.bt 1 $pid $comm"; want=2; pat='sched_(switch|waking)' ;;
        calltime) script="$out/calltime.bt $pid"; want=$((2 * ncalls)); pat='sys_(enter|exit)_' ;;
      esac
      before=" $(bpf_ids | tr '\n' ' ')"
      # bpftrace reads the tracepoints' formats from tracefs: mounted, if
      # absent, in a mount namespace of its own, so it goes when it exits.
      "$@" unshare -m sh -c "mountpoint -q $tr || mount -t tracefs nodev $tr; exec bpftrace $script" \
        >"$log.bt" 2>"$log.err" &
      observer=$!
      for _ in $(seq 1 300); do   # until every probe is loaded (30 s)
        mapfile -t ids < <(bpftool prog show | awk -v b="$before" -v pat="name $pat" '
          /^[0-9]+:/ { id = $1; sub(":", "", id)
            if (index(b, " " id " ") == 0 && $0 ~ pat) print id }')
        [ "${#ids[@]}" -ge "$want" ] && break
        kill -0 "$observer" 2>/dev/null || { cat "$log.err" >&2; exit 1; }
        sleep 0.1
      done
      [ "${#ids[@]}" -ge "$want" ] || { echo "bpftrace did not attach ($leg: ${#ids[@]} of $want programs)" >&2; exit 1; }
      sleep 0.5 ;;
  esac
}

# Stops the observer of leg $1 (log $2); sets seen to bpftrace's count of
# what it saw (offwake: wakeups; calltime: calls), or "-". (Not in a
# subshell: only this shell can wait for it.)
stop_observer() {
  local leg=$1 log=$2
  seen=-
  [ -n "$observer" ] || return 0
  kill -INT "$observer"; wait "$observer" || true
  case $leg in
    offwake*) seen=$(awk '/^@wakeups:/ {print $2; f=1} END {if (!f) print 0}' "$log.bt") ;;
    calltime) seen=$(awk '/^@ns\[/ {for (i = 1; i < NF; i++) if ($i == "count") s += $(i+1)} END {print s+0}' "$log.bt") ;;
    *) if [ -n "$(instances_of "$observer")" ]; then
         echo "tracefs instance of stallscope $observer left behind" >&2
       fi
       # Did the leg get what it stands for? (stallscope's notes say.)
       if [ "$leg" = chains ]; then
         grep -q 'tracing without syscalls' "$log.err" ||
           echo "warning: leg chains had call boundaries ($log.err: $(tr '\n' ' ' <"$log.err"))" >&2
       elif grep -q 'without call boundaries' "$log.err"; then
         echo "warning: leg $leg ran without call boundaries ($log.err: $(tr '\n' ' ' <"$log.err"))" >&2
       fi ;;
  esac
  observer=""
}

# One pgbench round of leg $1: prints "tps sys% obs% bpf% pg_us/tx ctxt/s seen/s".
round() {
  local leg=$1 log="$out/$1.$2" t0 t1 s0 s1 x0 x1 o0=0 o1=0 p0 p1 b0=0 b1=0 rate=-
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
  [ "$seen" = - ] || rate=$(awk -v n="$seen" -v a="$t0" -v b="$t1" 'BEGIN {printf "%.0f", n/(b-a)}')
  ids=()
  local tps tx
  tps=$(awk '/^tps/ {print $3; exit}' "$log.pgbench")
  tx=$(awk '/number of transactions actually processed/ {print $NF; exit}' "$log.pgbench")
  [ -n "$tps" ] || { cat "$log.pgbench" >&2; exit 1; }
  awk -v tps="$tps" -v tx="$tx" -v hz="$ticks" -v t="$t0" -v e="$t1" \
      -v s="$((s1 - s0))" -v o="$((o1 - o0))" -v b="$((b1 - b0))" -v p="$((p1 - p0))" \
      -v x="$((x1 - x0))" -v w="$rate" 'BEGIN {
    d = e - t
    printf "%s %.2f %.3f %.3f %.1f %.0f %s\n", tps, s/hz/d*100, o/hz/d*100, b/1e9/d*100,
      p/hz*1e6/tx, x/d, w }'
}

# One round of microload $1 (pingpong, syncloop) under leg $2: prints
# "ns/unit units/s obs% bpf%". The load runs on CPU 0, the observer on
# CPU 1; the observer's and BPF's CPU are counted over the load's measured
# seconds (its first second, while observers attach, is left out by the
# load itself); units/s is the median of the load's seconds after its first.
micro_round() {
  local load=$1 leg=$2 log="$out/$1.$2.$3" run=$((secs + 2)) o0=0 o1=0 b0=0 b1=0 t0 t1 comm=$1
  case $load in
    pingpong) "$pingpong" "$run" "$pp_rate" 0 >"$log.out" & ;;
    syncloop) "$syncloop" "$run" "$sl_rate" 0 "$sl_dir" >"$log.out" & ;;
  esac
  load_pid=$!
  [ "$leg" = none ] || start_observer "$leg" "$load_pid" "$comm" "$log" taskset -c 1
  sleep 1
  [ -n "$observer" ] && o0=$(proc_cpu "$observer")
  [ "${#ids[@]}" -gt 0 ] && b0=$(bpf_ns "${ids[@]}")
  t0=$(date +%s.%N)
  wait "$load_pid" || { load_pid=""; cat "$log.out" >&2; exit 1; }
  load_pid=""
  t1=$(date +%s.%N)
  [ "${#ids[@]}" -gt 0 ] && b1=$(bpf_ns "${ids[@]}")
  [ -n "$observer" ] && o1=$(proc_cpu "$observer")
  stop_observer "$leg" "$log"
  ids=()
  local ns per_s
  ns=$(awk '/^median/ {print $2}' "$log.out")
  if [ -z "$ns" ] || [ "$ns" = - ]; then cat "$log.out" >&2; exit 1; fi
  per_s=$(awk '/^[0-9]/ && $1 > 1 {print $2}' "$log.out" | median)
  awk -v ns="$ns" -v u="$per_s" -v hz="$ticks" -v t="$t0" -v e="$t1" -v o="$((o1 - o0))" -v b="$((b1 - b0))" \
    'BEGIN { d = e - t; printf "%s %s %.3f %.3f\n", ns, u, o/hz/d*100, b/1e9/d*100 }'
}
pp_round() { micro_round pingpong "$@"; }
sl_round() { micro_round syncloop "$@"; }

median() { sort -g | awk '{a[NR]=$1} END {if (!NR) print "-"; else print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
declare -A col
med() { tr ' ' '\n' <<<"${col[$1.$2]}" | { grep -v '^-\?$' || true; } | median; }
# $1 / $2 to 2 places, or why not.
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {if (b > 0) printf "%.2f", a/b; else print "n/a (denominator <= 0)"}'; }
has_leg() { [[ " ${legs[*]} " == *" $1 "* ]]; }
nl=${#legs[@]}

# $rounds rounds of every leg, each round starting one leg later: runs
# round function $1 (in this shell: cleanup must see the observer),
# prints each row with format $3 and keeps the columns named $4... as
# col[$2.LEG.NAME] (in round order).
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

echo "legs: ${legs[*]}; $rounds rounds of $secs s, interleaved; $(nproc) CPUs, kernel $(uname -r)"
echo "calls: stallscope run --observe PID ${on[*]} --format jsonl; call boundaries: $calls_row"
echo "chains: the same with STALLSCOPE_HIDE_EVENTS=$hide (no call boundaries)"
has_leg nochains && echo "nochains: ${off[*]} (call boundaries on)"
has_leg calltime && echo "calltime: scripts/calltime.bt on $ncalls calls (sys_enter+sys_exit each)"
echo

pgbench_load() {
  local leg capword
  if [ "$cap" = 0 ]; then capword="no write cap"; else capword="capped at $cap"; fi
  pg_lab_up
  postmaster=$(head -1 "$pgdata/postmaster.pid")
  echo "PostgreSQL $(basename "$(dirname "$pgbin")"), pgbench -c 8 -j 2 -T $secs, ext4 $capword"
  printf '%-5s %-15s %8s %8s %8s %8s %9s %8s %8s\n' round leg tps sys% obs% bpf% pg_us/tx ctxt/s seen/s
  all_rounds round pg '%-5s %-15s %8.1f %8.2f %8.3f %8.3f %9.1f %8s %8s\n' tps sys obs bpf pgus ctxt seen
  pg_stop
  "$bin" lab down --dir "$lab" >/dev/null 2>&1

  echo
  echo "pgbench, medians of $rounds"
  printf '%-15s %8s %7s %7s %8s %8s %8s %9s %8s %8s %9s %9s\n' \
    leg tps drop% pdrop% obs% bpf% sys% pg_us/tx ctxt/s seen/s sys_cost pg_cost
  local base_tps base_sys base_pg t s p drop pdrop sc pc
  base_tps=$(med pg.none tps); base_sys=$(med pg.none sys); base_pg=$(med pg.none pgus)
  declare -A cost
  for leg in "${legs[@]}"; do
    t=$(med "pg.$leg" tps); s=$(med "pg.$leg" sys); p=$(med "pg.$leg" pgus)
    # The median of each round's drop against that round's none.
    pdrop=$(paste <(tr ' ' '\n' <<<"${col[pg.$leg.tps]}") <(tr ' ' '\n' <<<"${col[pg.none.tps]}") |
      awk 'NF == 2 && $2 > 0 {printf "%.2f\n", (1 - $1/$2) * 100}' | median)
    read -r drop sc pc < <(awk -v t="$t" -v bt="$base_tps" -v s="$s" -v bs="$base_sys" -v p="$p" -v bp="$base_pg" \
      'BEGIN {printf "%.2f %.2f %.2f\n", (1-t/bt)*100, s-bs, (p-bp)*t/1e4}')
    cost[$leg.sys]=$sc; cost[$leg.pg]=$pc
    printf '%-15s %8.1f %7s %7s %8.3f %8.3f %8.2f %9.1f %8s %8s %9s %9s\n' "$leg" "$t" "$drop" "$pdrop" \
      "$(med "pg.$leg" obs)" "$(med "pg.$leg" bpf)" "$s" "$p" "$(med "pg.$leg" ctxt)" "$(med "pg.$leg" seen)" "$sc" "$pc"
  done
  echo
  has_leg calls && has_leg calltime &&
    echo "whole cost, stallscope calls / bpftrace calltime: sys_cost $(ratio "${cost[calls.sys]}" "${cost[calltime.sys]}"), pg_cost $(ratio "${cost[calls.pg]}" "${cost[calltime.pg]}")"
  has_leg chains && has_leg offwake &&
    echo "whole cost, stallscope chains / bpftrace offwake: sys_cost $(ratio "${cost[chains.sys]}" "${cost[offwake.sys]}"), pg_cost $(ratio "${cost[chains.pg]}" "${cost[offwake.pg]}")"
  cat <<'EOT'
tps: pgbench's; drop%: 1 - the leg's median tps / none's median tps (%);
pdrop%: the median over rounds of each round's drop against that round's
none (paired: less moved by a machine that drifts). obs%: the observer
process's own utime+stime (% of one core); bpf%: its BPF programs' run
time (bpf_stats); sys%: whole-system busy CPU (all CPUs,
user+nice+system+irq+softirq) in % of one core; pg_us/tx: CPU of the
postgres processes per transaction (µs); ctxt/s: context switches per
second (system-wide); seen/s: what bpftrace counted per second (offwake:
postgres sleeps ended by a wakeup; calltime: write-path calls timed).
sys_cost: sys% over none's (% of one core); pg_cost: the postgres
processes' extra CPU per transaction over none's, at the leg's tps (% of
one core). The whole system includes everything else running on the
machine: with other load the figures are noisy.
EOT
}

# The summary of microload $1 (key $2): $3 describes its unit.
micro_summary() {
  local load=$1 key=$2 unit=$3 leg base ns add ev per u o b w
  echo
  echo "$load, medians of $rounds"
  printf '%-15s %9s %10s %9s %10s %8s %8s %8s %10s\n' leg "ns/$unit" in-context "ev/$unit" ns/event "${unit}s/s" obs% bpf% whole%
  base=$(med "$key.none" ns)
  declare -A whole
  for leg in "${legs[@]}"; do
    ns=$(med "$key.$leg" ns); u=$(med "$key.$leg" rate); o=$(med "$key.$leg" obs); b=$(med "$key.$leg" bpf)
    ev=$(events "$load" "$leg")
    read -r add per w < <(awk -v n="$ns" -v b0="$base" -v o="$o" -v u="$u" -v ev="$ev" \
      'BEGIN { a = n - b0; printf "%.0f %s %.3f\n", a, (ev > 0 ? sprintf("%.0f", a/ev) : "-"), a*u/1e9*100 + o }')
    whole[$leg]=$w
    printf '%-15s %9s %10s %9s %10s %8s %8s %8s %10s\n' "$leg" "$ns" "$add" "$ev" "$per" "$u" "$o" "$b" "$w"
  done
  echo
  has_leg calls && has_leg calltime &&
    echo "whole cost, stallscope calls / bpftrace calltime: $(ratio "${whole[calls]}" "${whole[calltime]}")"
  has_leg calls && has_leg calltime && has_leg offwake &&
    echo "whole cost, stallscope calls / (offwake + calltime, the two legs' sum): $(ratio "${whole[calls]}" "$(awk -v a="${whole[offwake]}" -v b="${whole[calltime]}" 'BEGIN {print a+b}')")"
  has_leg calls && has_leg chains && has_leg calltime &&
    echo "call boundaries alone, (stallscope calls - chains) / bpftrace calltime: $(ratio "$(awk -v a="${whole[calls]}" -v b="${whole[chains]}" 'BEGIN {print a-b}')" "${whole[calltime]}")"
  # (syncloop does not sleep in its timed bursts: nothing there for chains.)
  [ "$load" = pingpong ] && has_leg chains && has_leg offwake &&
    echo "whole cost, stallscope chains / bpftrace offwake: $(ratio "${whole[chains]}" "${whole[offwake]}")"
  [ "$load" = pingpong ] && has_leg chains && has_leg offwake-kstack &&
    echo "whole cost, stallscope chains / bpftrace offwake with kernel stacks: $(ratio "${whole[chains]}" "${whole[offwake-kstack]}")"
  return 0
}

# Events of watched threads in one unit of microload $1 that leg $2's
# tracepoints see (what its in-context cost is spread over).
events() {
  case $1.$2 in
    *.none) echo 0 ;;
    # 2 sleeps + 2 wakeups; 2 write() calls, entry and exit.
    pingpong.calls|pingpong.nochains) echo 8 ;;
    pingpong.*) echo 4 ;;
    # A call's entry and exit; no sleeps in the timed bursts.
    syncloop.calls|syncloop.nochains|syncloop.calltime) echo 2 ;;
    syncloop.*) echo 0 ;;
  esac
}

pingpong_load() {
  echo "pingpong: 2 threads on CPU 0, $pp_rate round trips/s (2 sleeps, 2 wakeups, 2 write() each), $secs s; observers on CPU 1"
  printf '%-5s %-15s %10s %8s %8s %8s\n' round leg ns/trip trips/s obs% bpf%
  all_rounds pp_round pp '%-5s %-15s %10s %8s %8s %8s\n' ns rate obs bpf
  micro_summary pingpong pp trip
  cat <<'EOT'
ns/trip: median wall time of a round trip (per-second medians, then the
median over rounds); in-context: what the leg adds per round trip over
none's, paid in the traced threads' context (ns); ev/trip: the watched
threads' events per round trip the leg's tracepoints record (scheduler
and syscall events); ns/event: in-context over them; trips/s: achieved
rate; obs%: the observer process's own CPU (% of one core); bpf%: BPF
run time (part of in-context already); whole%: in-context at the
achieved rate plus obs%, in % of one core.
EOT
}

syncloop_load() {
  echo "syncloop: 1 thread on CPU 0, $sl_rate write(64 B)+fdatasync pairs/s on $sl_dir ($(stat -f -c %T "$sl_dir")), $secs s; observers on CPU 1"
  printf '%-5s %-15s %10s %8s %8s %8s\n' round leg ns/call calls/s obs% bpf%
  all_rounds sl_round sl '%-5s %-15s %10s %8s %8s %8s\n' ns rate obs bpf
  micro_summary syncloop sl call
  cat <<'EOT'
ns/call: median wall time of one write() or fdatasync() (per-second
medians, then the median over rounds); in-context: what the leg adds per
call over none's, in the calling thread's context (ns); ev/call: the
syscall events per call the leg records (entry, exit); ns/event:
in-context over them; calls/s: achieved rate; obs%, bpf%, whole%: as for
pingpong.
EOT
}

for l in "${loads[@]}"; do
  case $l in
    pgbench) pgbench_load ;;
    pingpong) pingpong_load ;;
    syncloop) syncloop_load ;;
  esac
  echo
done
