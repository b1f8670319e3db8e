#!/usr/bin/env bash
# Soak: stallscope headless with recording on a capped lab filesystem for N
# minutes (root). Every 10 s it samples the process's anonymous resident
# memory (RssAnon: the mapped segments are file pages, not ours), open
# file descriptors and the scratch folder's disk footprint; at the end it
# checks: RSS after the first minute grew by at most 10 %, the fd count does
# not rise (±1 while a segment rolls), the footprint stayed within the disk budget, and the recording
# reads back. Everything (lab, recording) is removed on exit.
# Usage: sudo scripts/soak.sh [minutes=30] [mode=mmap]
set -euo pipefail
minutes=${1:-30}
mode=${2:-mmap}
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "soak needs root (lab up)" >&2; exit 1; }
cargo build --release --quiet
bin=${CARGO_TARGET_DIR:-$PWD/target}/release/stallscope
work=$(mktemp -d /var/tmp/soak.XXXXXX)
lab=$work/lab
budget=$((512 << 20))
pid=""
cleanup() {
  set +e
  [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
  "$bin" lab down --dir "$lab" >/dev/null 2>&1
  rm -rf "$work"
}
trap cleanup EXIT INT TERM HUP

"$bin" lab up --fs ext4 --size 4GiB --dir "$lab" --cap 50MiB --dirty-bytes 256M >/dev/null
target=$lab/mnt/ext4
"$bin" run --target "$target" --mode "$mode" --disk-budget "$budget" \
  --duration "${minutes}m" --record "$work/soak.jsonl" --format jsonl > "$work/out.jsonl" 2> "$work/err.txt" &
pid=$!
echo "soak: $mode on capped ext4 for $minutes min (pid $pid), sampling every 10 s"
printf '%6s %10s %5s %12s\n' t_s anon_kib fds scratch_kib
samples=$work/samples.txt
t=0
while kill -0 "$pid" 2>/dev/null; do
  sleep 10; t=$((t + 10))
  kill -0 "$pid" 2>/dev/null || break
  rss=$(awk '/^RssAnon/ {print $2}' /proc/$pid/status 2>/dev/null || echo 0)
  fds=$(ls /proc/$pid/fd 2>/dev/null | wc -l)
  disk=$(du -sk "$target"/.stallscope-* 2>/dev/null | awk '{s += $1} END {print s + 0}')
  printf '%6d %10d %5d %12d\n' "$t" "$rss" "$fds" "$disk" | tee -a "$samples"
done
rc=0; wait "$pid" || rc=$?; pid=""
[ "$rc" = 0 ] || { echo "soak: stallscope exited $rc"; cat "$work/err.txt"; exit 1; }
python3 - "$samples" "$budget" "$minutes" <<'PY'
import sys
rows = [list(map(int, l.split())) for l in open(sys.argv[1]) if l.strip()]
budget_kib = int(sys.argv[2]) // 1024
end = int(sys.argv[3]) * 60
# From the first minute on, and not while it is stopping at the end.
after = [r for r in rows if 60 <= r[0] <= end - 10] or rows[-1:]
# Growth = the mean of the last three samples over the first three (single
# samples jitter by a few hundred KiB as buffers come and go).
k = min(3, len(after))
base = sum(r[1] for r in after[:k]) / k
last = sum(r[1] for r in after[-k:]) / k
peak = max(r[1] for r in after)
growth = (last - base) / base * 100 if base else 0.0
fds = sorted({r[2] for r in after})
# A segment roll opens the next file and closes the old one, so a sample
# can catch one fd more or one less; a leak is a count that keeps rising.
# Pass: every sample within 1 of the usual count, and the last third's
# median no higher than the first third's.
counts = [r[2] for r in after]
usual = max(set(counts), key=counts.count)
third = max(1, len(after) // 3)
med = lambda xs: sorted(xs)[len(xs) // 2]
fds_ok = all(abs(c - usual) <= 1 for c in counts) and med(counts[-third:]) <= med(counts[:third])
disk = max(r[3] for r in rows)
print(f"anonymous RSS after 1 min {base:.0f} KiB, at the end {last:.0f} KiB (peak {peak}), growth {growth:.1f} % (limit 10 %)")
print(f"open fds after 1 min: {fds}, usually {usual} (within 1 of it, not rising)")
print(f"max scratch footprint {disk} KiB (budget {budget_kib} KiB)")
ok = growth <= 10 and fds_ok and disk <= budget_kib * 1.05
sys.exit(0 if ok else 1)
PY
"$bin" report "$work/soak.jsonl" | tail -n 3
echo "soak: passed"
