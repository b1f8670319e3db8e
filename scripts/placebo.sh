#!/bin/sh
# Placebo check of the trial verdict (issue 24): N trials of a change that
# changes nothing (vm.dirty_background_bytes, or the ratio when the bytes
# are 0, set to the value it has) must say no_change in (almost) all.
#
#   scripts/placebo.sh [N]        (root; default N=10)
#
# Uses the lab at $LAB_DIR (default /var/tmp/stallscope-lab) when it is up,
# else brings one up (ext4, 20 MiB/s cap, dirty limits 256 MiB / 64 MiB)
# and takes it down at the end. Short runs ($RUN_SECS, default 4 s) of a
# rate-limited buffered writer ($WORKLOAD) are enough for this: a placebo
# needs the noise, not the stalls. Prints one line per trial and the count.
# $STALLSCOPE is the binary (default: stallscope on PATH).
set -eu
n=${1:-10}
bin=${STALLSCOPE:-stallscope}
lab=${LAB_DIR:-/var/tmp/stallscope-lab}
secs=${RUN_SECS:-4}
pairs=${PAIRS:-6}
workload=${WORKLOAD:---mode buffered --threads 2 --record-size 4KiB --rate 3000 --sync every:2000}

brought_up=0
if ! "$bin" lab status --dir "$lab" | grep -q ', mounted,'; then
    "$bin" lab up --dir "$lab" --fs ext4 --cap 20MiB --dirty-bytes 256MiB \
        --dirty-background-bytes 64MiB >/dev/null
    brought_up=1
fi
cleanup() {
    if [ "$brought_up" = 1 ]; then "$bin" lab down --dir "$lab"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

knob=vm.dirty_background_bytes
value=$(sysctl -n $knob)
if [ "$value" = 0 ]; then
    knob=vm.dirty_background_ratio
    value=$(sysctl -n $knob)
fi

same=0
i=1
out=$(mktemp)
while [ "$i" -le "$n" ]; do
    # shellcheck disable=SC2086 # the workload is words
    "$bin" trial --lab-dir "$lab" --setting "$knob=$value" --pairs "$pairs" \
        --run-secs "$secs" --format json -- $workload >"$out" 2>/dev/null
    line=$(jq -r '"\(.verdict) ×\(.difference|exp*100|round/100) [×\(.interval[0]|exp*100|round/100), ×\(.interval[1]|exp*100|round/100)] noise ±\((.noise|exp-1)*100|round) %"' "$out")
    echo "placebo $i/$n ($knob=$value): $line"
    case $line in no_change*) same=$((same + 1)) ;; esac
    i=$((i + 1))
done
rm -f "$out"
echo "no_change in $same of $n placebo trials"
