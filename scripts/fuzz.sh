#!/usr/bin/env bash
# Fuzz the recording reader and the config parser for a time budget: runs
# the property tests of tests/fuzz.rs again and again, each run with fresh
# random inputs and many cases per property, until the budget is used.
#
#   scripts/fuzz.sh [SECONDS] [TEST ARGS...]
#
# SECONDS defaults to 60 (the build is not counted). TEST ARGS go to the test
# binary: a name filter, `--skip NAME`, e.g. to leave out a known failure.
#
# Environment:
#   STALLSCOPE_FUZZ_CASES   cases per property in a run (default 2000; later
#                           runs shrink it to fit what is left of the budget)
#   STALLSCOPE_FUZZ_SAVE    where failing inputs are written
#                           (default $CARGO_TARGET_DIR/fuzz-failures)
#   STALLSCOPE_FUZZ_IGNORE  checks to skip while a known bug is open
#                           (time_order, memory, message, long_line)
#   CARGO_TARGET_DIR        as for cargo (default target)
#
# Prints the cases run per property and in all; exits 1 when a property
# failed (its smallest failing input is printed and saved), 2 on a bad
# argument or a failed build.
set -uo pipefail
cd "$(dirname "$0")/.."

budget=${1:-60}
shift $(($# > 0 ? 1 : 0))
case $budget in
  '' | *[!0-9]*) echo "usage: $0 [SECONDS]" >&2; exit 2 ;;
esac
cases=${STALLSCOPE_FUZZ_CASES:-2000}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-target}
export STALLSCOPE_FUZZ_SAVE=${STALLSCOPE_FUZZ_SAVE:-$CARGO_TARGET_DIR/fuzz-failures}
logdir=$(mktemp -d "${TMPDIR:-/tmp}/stallscope-fuzz.XXXXXX")
trap 'rm -rf "$logdir"' EXIT

echo "== building tests/fuzz.rs (release)"
if ! cargo test --release --test fuzz --no-run --message-format=json >"$logdir/build.json" 2>"$logdir/build.err"; then
  cat "$logdir/build.err" >&2
  exit 2
fi
# The test executable (not the stallscope binary, also an artifact).
exe=$(grep '"kind":\["test"\]' "$logdir/build.json" | grep '"name":"fuzz"' |
  sed -n 's/.*"executable":"\([^"]*\)".*/\1/p' | tail -n 1)
if [ -z "$exe" ] || [ ! -x "$exe" ]; then
  echo "cannot find the fuzz test executable" >&2
  exit 2
fi

echo "== fuzzing for ${budget}s, up to $cases cases per property per run"
start=$SECONDS
runs=0
failed=0
counts="$logdir/counts"
: >"$counts"
while :; do
  elapsed=$((SECONDS - start))
  left=$((budget - elapsed))
  [ "$runs" -gt 0 ] && [ "$left" -le 0 ] && break
  # Fit the next run into what is left, from the pace of the last one.
  if [ "$runs" -gt 0 ]; then
    n=$((last_cases * left / (last_secs > 0 ? last_secs : 1)))
    [ "$n" -gt "$cases" ] && n=$cases
    [ "$n" -lt 32 ] && break
  else
    n=$cases
  fi
  runs=$((runs + 1))
  log="$logdir/run$runs.log"
  t0=$SECONDS
  # A run that outlives the budget by 5 minutes is stuck: the properties
  # time each read themselves, so this only catches a hang elsewhere.
  STALLSCOPE_FUZZ_CASES=$n timeout -s KILL $((left + 300)) \
    "$exe" --nocapture --test-threads=2 "$@" >"$log" 2>&1
  rc=$?
  last_secs=$((SECONDS - t0))
  last_cases=$n
  run_total=$(sed -n 's/^FUZZ \([a-z_]*\): \([0-9]*\) cases run.*/\1 \2/p' "$log" |
    tee -a "$counts" | awk '{s += $2} END {print s + 0}')
  if [ "$rc" -eq 0 ]; then
    echo "run $runs: $run_total cases ($n per property) in ${last_secs}s, ok"
  else
    failed=1
    if [ "$rc" -eq 137 ]; then
      echo "run $runs: killed after ${last_secs}s (stuck)"
    else
      echo "run $runs: $run_total cases ($n per property) in ${last_secs}s, FAILED"
    fi
    echo "---- failures ----"
    # Each failing property's message, up to its backtrace.
    awk '/ failed: |panicked at/ {p = 1} /^stack backtrace:/ {p = 0} p' "$log" | head -n 200
    grep -E '^test .* FAILED$' "$log"
    mkdir -p "$STALLSCOPE_FUZZ_SAVE" && cp "$log" "$STALLSCOPE_FUZZ_SAVE/run.log" &&
      echo "---- full log: $STALLSCOPE_FUZZ_SAVE/run.log"
    break
  fi
done

total=$(awk '{s += $2} END {print s + 0}' "$counts")
echo "== cases per property:"
awk '{c[$1] += $2} END {for (k in c) printf "   %-36s %8d\n", k, c[k]}' "$counts" | sort
echo "== $total cases in $runs runs, $((SECONDS - start))s"
if [ "$failed" -ne 0 ]; then
  echo "== FAILED; failing inputs are saved under $STALLSCOPE_FUZZ_SAVE"
  ls -1 "$STALLSCOPE_FUZZ_SAVE" 2>/dev/null | sed 's/^/   /'
  exit 1
fi
echo "== no failures"
