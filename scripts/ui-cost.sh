#!/usr/bin/env bash
# CPU used by the dashboard's UI thread (the process's main thread: event
# loop + drawing) while 4 writers run at the default fps, measured from
# /proc/PID/task/PID/stat over a window, in a real terminal (tmux).
# Usage: scripts/ui-cost.sh [seconds=30] [target=/dev/shm]
set -euo pipefail
secs=${1:-30}
base=${2:-/dev/shm}
cd "$(dirname "$0")/.."
command -v tmux >/dev/null || { echo "tmux is not installed" >&2; exit 1; }
cargo build --release --quiet
bin=${CARGO_TARGET_DIR:-$PWD/target}/release/stallscope
dir=$(mktemp -d "$base/ui-cost.XXXXXX")
sess=ui-cost-$$
trap 'tmux kill-session -t $sess 2>/dev/null; rm -rf "$dir"' EXIT
tmux new-session -d -s $sess -x 200 -y 50 "$bin --target $dir --threads 4"
sleep 5
shell=$(tmux list-panes -t $sess -F '#{pane_pid}')
pid=$(cat /proc/$shell/task/$shell/children 2>/dev/null | awk '{print $1}')
[ -n "$pid" ] || pid=$shell
hz=$(getconf CLK_TCK)
ticks() { awk '{print $14 + $15}' "/proc/$pid/task/$pid/stat"; }
all() { awk '{print $14 + $15}' "/proc/$pid/stat"; }
t0=$(ticks); a0=$(all)
sleep "$secs"
t1=$(ticks); a1=$(all)
tmux send-keys -t $sess q
python3 - "$t0" "$t1" "$a0" "$a1" "$hz" "$secs" <<'PY'
import sys
t0, t1, a0, a1, hz, secs = map(float, sys.argv[1:])
ui = (t1 - t0) / hz / secs * 100
print(f"UI thread: {ui:.2f}% of one core over {secs:.0f} s (whole process {(a1-a0)/hz/secs*100:.0f}%, 4 writers)")
PY
