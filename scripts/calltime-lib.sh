# shellcheck shell=bash
# Sourced by the cost scripts (chain-cost.sh, server-cost.sh).
# calltime_for "CALLS" OUT: scripts/calltime.bt cut to the calls in CALLS
# (a space-separated list, e.g. those whose sys_enter and sys_exit
# tracepoints this kernel has), written to OUT. The script has one probe a
# line; the last kept probe of each list loses its comma.
calltime_for() {
  awk -v have=" $1 " '
    function flush() { if (n) { sub(/,$/, "", buf[n]); for (i = 1; i <= n; i++) print buf[i]; n = 0 } }
    /^tracepoint:syscalls:sys_(enter|exit)_[a-z0-9_]+,?$/ {
      c = $0; sub(/^tracepoint:syscalls:sys_(enter|exit)_/, "", c); sub(/,$/, "", c)
      if (index(have, " " c " ")) buf[++n] = $0 (/,$/ ? "" : ",")
      next
    }
    { flush(); print }
    END { flush() }' "$(dirname "${BASH_SOURCE[0]}")/calltime.bt" >"$2"
}
