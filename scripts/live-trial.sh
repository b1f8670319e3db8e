#!/usr/bin/env bash
# A live trial on PostgreSQL, judged by pgbench's own figures: PostgreSQL
# on a capped lab ext4 (scripts/pg-lab.sh, the README's scenario) under
# one long `pgbench -c 8 -j 2 --log`, and `stallscope trial --observe-name
# postgres` flipping a device dirty limit under it (B: the lab device's
# bdi max_bytes 32 MiB with strict_limit, so the server's dirty pages are
# written back in small steps instead of piling up to the global limit).
# Stalls from 20 ms (pgbench's p99 here is 10-60 ms: the default 100 ms
# threshold would judge waits its clients do not feel). Then, over each
# window's measured part (the trial's JSON: start and end
# in seconds since the epoch), pgbench's own p99 latency and tps from its
# per-transaction log: the medians of the A and B windows, and the
# median over pairs of B/A, printed beside stallscope's verdict.
#
# Usage (root): scripts/live-trial.sh [trials=1] [window=auto] [pairs=6] [cap=20MiB]
#   window auto: the trial's own warm-up sizes the windows. The trials
#   run back to back under one pgbench, started WARM (default 60) seconds
#   before the first.
#   PLACEBO=1: B sets strict_limit to the value it has (a placebo), and
#   the verdicts are counted (no_change expected in all).
#   SETTINGS="KNOB=VALUE ...": B sets these instead (trial --setting).
#   CAP_B=RATE: B raises (or lowers) the lab's own cap to RATE (v1 blkio;
#   a stand-in for a faster disk: the control that a real gain is seen,
#   and by pgbench too).
#   NEIGHBOUR=1: the slow-neighbour case ("one slow device stalls all"):
#   PostgreSQL on an uncapped lab, and a second lab capped at cap where
#   dd rewrites a file without pause, holding the machine's dirty pool
#   (256 MiB); B limits the neighbour's device (its bdi max_bytes 32 MiB
#   with strict_limit), not the server's.
# Needs Debian's postgresql and jq. Leaves nothing behind: pgbench and the
# server are stopped and `lab down` undoes the lab on any exit.
set -euo pipefail
trials=${1:-1}
window=${2:-auto}
pairs=${3:-6}
cap=${4:-20MiB}
warm=${WARM:-60}
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "needs root (lab, tracing, knobs)" >&2; exit 1; }
command -v jq >/dev/null || { echo "jq missing (apt-get install jq)" >&2; exit 1; }
# shellcheck source=scripts/pg-lab.sh
. scripts/pg-lab.sh
pgbin=$(pg_bin_dir) || { echo "PostgreSQL missing (apt-get install postgresql)" >&2; exit 1; }
cargo build --release --quiet
bin=${CARGO_TARGET_DIR:-target}/release/stallscope
lab=$(mktemp -d /var/tmp/live-trial.XXXXXX)
chmod 755 "$lab"
nlab="" neigh_pid=""
if [ "${NEIGHBOUR:-0}" = 1 ]; then
  ncap=$cap cap=0
  nlab=$(mktemp -d /var/tmp/live-neighbour.XXXXXX)
fi
port=$((54100 + RANDOM % 200))
bench_pid=""
cleanup() {
  [ -z "$bench_pid" ] || kill "$bench_pid" 2>/dev/null || true
  if [ -n "$nlab" ]; then
    [ -z "$neigh_pid" ] || kill -- -"$neigh_pid" 2>/dev/null || true
    wait 2>/dev/null || true
    "$bin" lab down --dir "$nlab" >/dev/null 2>&1 || true
    rm -rf "$nlab"
  fi
  pg_stop
  "$bin" lab down --dir "$lab" >/dev/null 2>&1 || true
  rm -rf "$lab"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
pg_lab_up
# {bdi}: the trial finds the device under the postmaster's working
# directory (its data directory, on the lab).
dev=$(findmnt -no MAJ:MIN "$lab/mnt/ext4" | tr -d ' ')
if [ -n "$nlab" ]; then
  "$bin" lab up --dir "$nlab" --fs ext4 --size 2GiB --cap "$ncap" >/dev/null
  ndev=$(findmnt -no MAJ:MIN "$nlab/mnt/ext4" | tr -d ' ')
  # Its own process group, so that cleanup stops the loop and its dd.
  setsid "$bin" lab exec --dir "$nlab" -- sh -c \
    "while :; do dd if=/dev/zero of=$nlab/mnt/ext4/fill bs=1M count=1024 conv=notrunc status=none; done" &
  neigh_pid=$!
fi
if [ -n "${SETTINGS:-}" ]; then
  read -r -a b <<<"$SETTINGS"
  settings=()
  for kv in "${b[@]}"; do settings+=(--setting "$kv"); done
elif [ -n "${CAP_B:-}" ]; then
  settings=(--setting "/sys/fs/cgroup/blkio/blkio.throttle.write_bps_device=$dev $CAP_B")
elif [ -n "$nlab" ]; then
  settings=(--setting "/sys/class/bdi/$ndev/max_bytes=33554432" --setting "/sys/class/bdi/$ndev/strict_limit=1")
elif [ "${PLACEBO:-0}" = 1 ]; then
  settings=(--setting "/sys/class/bdi/{bdi}/strict_limit=$(cat "/sys/class/bdi/$dev/strict_limit")")
else
  settings=(--setting "/sys/class/bdi/{bdi}/max_bytes=33554432" --setting "/sys/class/bdi/{bdi}/strict_limit=1")
fi
install -d -o postgres "$lab/log"

# pgbench's p99 latency (ms) and tps of the transactions of this trial
# (trial_log) that ended in [from, to) (its log: client, transaction, latency µs, script, end s, end µs).
window_figures() {
  awk -v f="$1" -v t="$2" '
    { e = $5 + $6 / 1e6; if (e >= f && e < t) print $3 }' "$lab/trial_log" | sort -n |
    awk -v f="$1" -v t="$2" '{a[NR] = $1} END {
      if (NR == 0) { print "nan 0"; exit }
      i = int(NR * 0.99); if (i < 1) i = 1; printf "%.2f %.1f\n", a[i] / 1000, NR / (t - f) }'
}
median() { sort -g | awk '{a[NR]=$1} END {if (NR==0) print "nan"; else print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }

declare -A verdicts
echo "PostgreSQL $(basename "$(dirname "$pgbin")") on ext4 $([ "$cap" = 0 ] && echo uncapped || echo "capped at $cap")${nlab:+, a dd neighbour on ext4 capped at $ncap}, kernel $(uname -r); $trials trial(s), window $window, $pairs pairs; B: ${settings[*]}"
# One pgbench for every trial, as on a server that was running before
# anyone looked: its start (cold tables, the first checkpoints, which
# made one trial's A/A pair differ by ×4) is over before the first window.
(cd "$lab/log" && exec runuser -u postgres -- pgbench -h "$lab/sock" -p "$port" \
  -c 8 -j 2 -T 360000 -l postgres >/dev/null 2>&1) &
bench_pid=$!
sleep "$warm"
for n in $(seq 1 "$trials"); do
  wflag=(); [ "$window" = auto ] || wflag=(--window "$window")
  "$bin" trial --observe-name postgres "${settings[@]}" "${wflag[@]}" --pairs "$pairs" \
    --format json -- --stall-threshold 20ms >"$lab/trial.json" 2>"$lab/trial.err" || { cat "$lab/trial.err" >&2; exit 1; }
  kill -0 "$bench_pid" 2>/dev/null || { echo "pgbench stopped" >&2; exit 1; }
  verdict=$(jq -r .verdict "$lab/trial.json")
  verdicts[$verdict]=$((${verdicts[$verdict]:-0} + 1))
  echo
  echo "trial $n: stallscope says $verdict ($(jq -r '.measure' "$lab/trial.json") ×$(jq -r '.difference | exp * 100 | round / 100' "$lab/trial.json"))${PLACEBO:+ (placebo)}"
  # This trial's transactions (the log holds every trial's).
  first=$(jq -r '.windows[0].start_unix' "$lab/trial.json")
  cat "$lab/log"/pgbench_log.* | awk -v f="$first" '$5 + $6 / 1e6 >= f' >"$lab/trial_log"
  printf '%3s %4s %4s %12s %10s %11s %10s\n' '#' side pair stall_ms/GiB max_ms pg_p99_ms pg_tps
  : >"$lab/rows"
  i=0
  while read -r side pair from to stall max; do
    i=$((i + 1))
    read -r p99 tps < <(window_figures "$from" "$to")
    printf '%3s %4s %4s %12.0f %10.0f %11s %10s\n' "$i" "$side" "$pair" "$stall" "$max" "$p99" "$tps"
    echo "$side $pair $p99 $tps" >>"$lab/rows"
  done < <(jq -r '.windows[] | "\(.side) \(.pair) \(.measured_from_unix) \(.end_unix) \(.stall_ms_per_gib) \(.max_stall_ms)"' "$lab/trial.json")
  a=$(awk '$1 == "A" && $2 > 0 {print $3}' "$lab/rows" | median)
  b=$(awk '$1 == "B" {print $3}' "$lab/rows" | median)
  paired=$(awk '$2 > 0 {p[$2, $1] = $3} END {for (k = 1; k <= '"$pairs"'; k++) if (p[k, "A"] > 0) print p[k, "B"] / p[k, "A"]}' "$lab/rows" | median)
  lower=$(awk '$2 > 0 {p[$2, $1] = $3} END {n = 0; for (k = 1; k <= '"$pairs"'; k++) if (p[k, "B"] < p[k, "A"]) n++; print n}' "$lab/rows")
  echo "pgbench's own p99 (ms): A windows median $a, B windows median $b; B/A per pair, median ×$paired ($lower of $pairs pairs lower)"
done
echo
echo "verdicts:$(for v in "${!verdicts[@]}"; do printf ' %s %s' "$v" "${verdicts[$v]}"; done)"
