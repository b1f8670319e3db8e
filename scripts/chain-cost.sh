#!/usr/bin/env bash
# What wake-up chains cost, counted where it is paid: PostgreSQL under
# `pgbench -c 8 -j 2` on a capped lab ext4, observed in turn by nothing,
# stallscope with chains, stallscope without, and bpftrace running
# scripts/offwake.bt (offwaketime without stacks: the same information,
# every sleep of a postgres thread and who woke it). Rounds alternate the
# legs (starting one leg later each round); medians are printed. Both
# tools watch our postmaster and its children (stallscope run --observe
# PID; offwake.bt PID): other PostgreSQL servers on the machine are left out.
#
# Per leg, over pgbench's window: the whole system's busy CPU (all CPUs,
# /proc/stat user+nice+system+irq+softirq, % of one core), the
# observer's own CPU (utime+stime), bpftrace's BPF programs' run time
# (kernel.bpf_stats_enabled=1, bpftool's run_time_ns), the postgres
# processes' CPU per transaction (the traced tasks pay the tracing in
# their own context), context switches per second, and pgbench's tps.
# (perf cannot help on a VM without a PMU: cpu-clock samples never land
# in the scheduler's tracepoints, which run with interrupts off.)
#
# Usage (root): scripts/chain-cost.sh [rounds=3] [seconds=20] [cap=20MiB]
#   CHAIN_COST_KSTACK=1 adds a leg with offwake.bt keyed by kernel stack.
# Needs PostgreSQL 15, bpftrace and bpftool (Debian: postgresql, bpftrace,
# bpftool). Leaves nothing behind: on any exit PostgreSQL is stopped, the
# lab (/var/tmp/lab-cost) is taken down, kernel.bpf_stats_enabled is
# restored, observers are stopped and no tracefs instance of ours is left.
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
bin=${CARGO_TARGET_DIR:-target}/release/stallscope
lab=/var/tmp/lab-cost
port=54393
tr=/sys/kernel/tracing
out=$(mktemp -d /tmp/chain-cost.XXXXXX)
legs=(none chains nochains bpftrace)
[ "${CHAIN_COST_KSTACK:-0}" = 1 ] && legs+=(bpftrace-kstack)

# What the "chains" legs run: --chains once stallscope has it, else the
# scheduler's events (auto) against sampled /proc timing.
if "$bin" run --help | grep -q -- '--chains'; then
  on=(--chains auto); off=(--chains off)
else
  on=(--observe-timing auto); off=(--observe-timing sampled)
fi

stats_old=$(sysctl -n kernel.bpf_stats_enabled)
observer=""
ours=()   # stallscope pids: their tracefs instances must be gone
# shellcheck source=scripts/pg-lab.sh
. scripts/pg-lab.sh
cleanup() {
  set +e
  if [ -n "$observer" ] && kill -0 "$observer" 2>/dev/null; then
    kill -INT "$observer"; wait "$observer"
  fi
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

"$bin" lab down --dir "$lab" >/dev/null 2>&1 || true
pg_lab_up
sysctl -q kernel.bpf_stats_enabled=1
ticks=$(getconf CLK_TCK)
postmaster=$(head -1 "$pgdata/postmaster.pid")

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

# One round of leg $1: prints "tps sys% obs% bpf% pg_us/tx ctxt/s wake/s".
round() {
  local leg=$1 log="$out/$1.$2" ids=() before t0 t1 s0 s1 x0 x1 o0=0 o1=0 p0 p1 b0=0 b1=0 wake=- n
  observer=""
  psql_ CHECKPOINT >/dev/null
  case $leg in
    chains|nochains)
      local flags=("${on[@]}"); [ "$leg" = nochains ] && flags=("${off[@]}")
      "$bin" run --observe "$postmaster" "${flags[@]}" --format jsonl >"$log.jsonl" 2>"$log.err" &
      observer=$!; ours+=("$observer")
      sleep 1 ;;
    bpftrace*)
      before=" $(bpf_ids | tr '\n' ' ')"
      # bpftrace reads the tracepoints' formats from tracefs: mounted, if
      # absent, in a mount namespace of its own, so it goes when it exits.
      local stack=0; [ "$leg" = bpftrace-kstack ] && stack=1
      unshare -m sh -c "mountpoint -q $tr || mount -t tracefs nodev $tr; exec bpftrace scripts/offwake.bt $stack $postmaster" \
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
  [ -n "$observer" ] && o0=$(proc_cpu "$observer")
  [ "${#ids[@]}" -gt 0 ] && b0=$(bpf_ns "${ids[@]}")
  p0=$(pg_cpu); s0=$(sys_busy); x0=$(ctxt); t0=$(date +%s.%N)
  bench -c 8 -j 2 -T "$secs" >"$log.pgbench" 2>&1
  sleep 0.3   # let the postmaster reap the backends
  t1=$(date +%s.%N); s1=$(sys_busy); x1=$(ctxt); p1=$(pg_cpu)
  [ "${#ids[@]}" -gt 0 ] && b1=$(bpf_ns "${ids[@]}")
  [ -n "$observer" ] && o1=$(proc_cpu "$observer")
  if [ -n "$observer" ]; then
    kill -INT "$observer"; wait "$observer" || true
    case $leg in
      bpftrace*) n=$(awk '/^@wakeups:/ {print $2}' "$log.bt")
                 wake=$(awk -v n="${n:-0}" -v a="$t0" -v b="$t1" 'BEGIN {printf "%.0f", n/(b-a)}') ;;
      *) if is_tracefs && compgen -G "$tr/instances/stallscope-$observer*" >/dev/null; then
           echo "tracefs instance of stallscope $observer left behind" >&2
         fi ;;
    esac
    observer=""
  fi
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

median() { sort -g | awk '{a[NR]=$1} END {if (!NR) print "-"; else print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
declare -A col
names=(tps sys obs bpf pgus ctxt wake)
echo "PostgreSQL 15, pgbench -c 8 -j 2 -T $secs, ext4 capped at $cap, $(nproc) CPUs; $rounds rounds"
echo "chains: stallscope run --observe POSTMASTER ${on[*]} --format jsonl; nochains: ${off[*]}"
printf '%-5s %-15s %8s %8s %8s %8s %9s %8s %8s\n' round leg tps sys% obs% bpf% pg_us/tx ctxt/s wake/s
nl=${#legs[@]}
for r in $(seq 1 "$rounds"); do
  for k in $(seq 0 $((nl - 1))); do
    leg=${legs[$(( (k + r - 1) % nl ))]}
    round "$leg" "$r" >"$out/round"   # in this shell: cleanup must see the observer
    read -r -a v <"$out/round"
    printf '%-5s %-15s %8.1f %8.2f %8.3f %8.3f %9.1f %8s %8s\n' "$r" "$leg" "${v[@]}"
    for i in "${!names[@]}"; do col[$leg.${names[$i]}]+="${v[$i]} "; done
  done
done

med() { tr ' ' '\n' <<<"${col[$1.$2]}" | { grep -v '^-\?$' || true; } | median; }
echo
echo "medians of $rounds"
printf '%-15s %8s %8s %8s %8s %8s %9s %8s %8s %9s %9s\n' leg tps tps_loss% sys% obs% bpf% pg_us/tx ctxt/s wake/s sys_cost pg_cost
base_tps=$(med none tps); base_sys=$(med none sys); base_pg=$(med none pgus)
declare -A cost
for leg in "${legs[@]}"; do
  t=$(med "$leg" tps); s=$(med "$leg" sys); p=$(med "$leg" pgus)
  read -r loss sc pc < <(awk -v t="$t" -v bt="$base_tps" -v s="$s" -v bs="$base_sys" -v p="$p" -v bp="$base_pg" \
    'BEGIN {printf "%.1f %.2f %.2f\n", (1-t/bt)*100, s-bs, (p-bp)*t/1e4}')
  cost[$leg.sys]=$sc; cost[$leg.pg]=$pc
  printf '%-15s %8.1f %8s %8.2f %8.3f %8.3f %9.1f %8s %8s %9s %9s\n' "$leg" "$t" "$loss" "$s" \
    "$(med "$leg" obs)" "$(med "$leg" bpf)" "$p" "$(med "$leg" ctxt)" "$(med "$leg" wake)" "$sc" "$pc"
done
echo
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {if (b > 0) printf "%.2f", a/b; else print "n/a (bpftrace cost <= 0)"}'; }
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
