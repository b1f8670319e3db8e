#!/usr/bin/env bash
# stallscope vs fio, same workload, back to back, in one run:
# buffered write() of 4 KiB records, 2 threads/jobs, a tmpfs target, no sync.
# Both write fresh pages: stallscope rolls to new segments and deletes old
# ones past its budget; fio unlinks its file after each loop
# (--unlink_each_loop) instead of overwriting cached pages with --time_based.
# Prints each round, then medians and the ratio stallscope/fio.
#
# Usage: scripts/bench-vs-fio.sh [rounds=5] [seconds=5] [dir=/dev/shm]
set -euo pipefail
rounds=${1:-5}
secs=${2:-5}
base=${3:-/dev/shm}
cd "$(dirname "$0")/.."
command -v fio >/dev/null || { echo "fio is not installed (apt-get install fio)" >&2; exit 1; }
cargo build --release --quiet
bin=${CARGO_TARGET_DIR:-target}/release/stallscope
work=$(mktemp -d "$base/bench-vs-fio.XXXXXX")
trap 'rm -rf "$work"' EXIT

echo "workload: buffered 4KiB writes, 2 threads, no sync, ${secs}s, target $(stat -f -c %T "$base") ($base)"
printf '%-6s %14s %14s %8s\n' round stallscope_ops fio_ops ratio
ss_all=(); fio_all=()
for r in $(seq 1 "$rounds"); do
  ss=$("$bin" run --target "$work" --mode buffered --threads 2 --record-size 4KiB \
        --sync none --duration "${secs}s" --format jsonl \
      | python3 -c 'import json,sys
for l in sys.stdin:
    j=json.loads(l)
    if j["type"]=="summary": print(j["ops_per_s"])')
  mkdir -p "$work/fio"
  fio_ops=$(fio --name=w --directory="$work/fio" --ioengine=psync --rw=write --bs=4k \
        --numjobs=2 --size=512m --loops=100000 --unlink_each_loop=1 --runtime="$secs" \
        --group_reporting --output-format=json \
      | python3 -c 'import json,sys; print(json.load(sys.stdin)["jobs"][0]["write"]["iops"])')
  rm -rf "$work/fio"
  ratio=$(python3 -c "print(f'{$ss/$fio_ops:.3f}')")
  printf '%-6s %14.0f %14.0f %8s\n' "$r" "$ss" "$fio_ops" "$ratio"
  ss_all+=("$ss"); fio_all+=("$fio_ops")
done
python3 - "${ss_all[*]}" "${fio_all[*]}" <<'PY'
import statistics, sys
ss = [float(x) for x in sys.argv[1].split()]
fio = [float(x) for x in sys.argv[2].split()]
ms, mf = statistics.median(ss), statistics.median(fio)
ratios = [a / b for a, b in zip(ss, fio)]
print(f"median  {ms:14.0f} {mf:14.0f} {ms/mf:8.3f}")
print(f"median of per-round ratios: {statistics.median(ratios):.3f} (target >= 0.95)")
PY
