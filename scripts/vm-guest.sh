#!/bin/bash
# Runs INSIDE the test guest of scripts/vm-test.sh (Debian 12, kernel 6.1),
# from its test disk (/vmtest, read-only). Not for a real machine: as
# `init` it is PID 1 and sets the guest up; `tests` runs the checks.
#
# `init`: mounts what a systemd host has (proc, sys, devtmpfs, devpts,
# tmpfs /run /tmp /dev/shm, cgroup2 alone at /sys/fs/cgroup; tracefs is NOT
# mounted, stallscope mounts it), builds a cgroup tree like a stock Debian
# 12 (root subtree_control "memory pids", io off; init.scope, system.slice,
# user.slice/user-0.slice/session-1.scope), sets the clock from the host,
# loads `loop`, then runs `tests` (or a shell with vmtest.shell=1) inside
# the login session's scope and powers off.
#
# `tests`: each check prints `VMTEST PASS|FAIL <name> <figures>`; a
# diagnostic that is not a check prints `VMTEST DIAG`; the last line is
# `VMTEST DONE`. Output goes to the second serial port (ttyS1), which the
# host reads; the kernel's console is ttyS0.
set -uo pipefail
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export LANG=C.UTF-8 TERM=xterm-256color HOME=/root
CG=/sys/fs/cgroup
SESSION=$CG/user.slice/user-0.slice/session-1.scope

cmdline_arg() { tr ' ' '\n' </proc/cmdline | sed -n "s/^$1=//p" | tail -1; }

guest_init() {
  exec </dev/null >/dev/ttyS1 2>&1
  mountpoint -q /run || mount -t tmpfs -o mode=755,nosuid,nodev tmpfs /run
  mountpoint -q /tmp || mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs /tmp
  mkdir -p /dev/pts /dev/shm
  mountpoint -q /dev/pts || mount -t devpts -o gid=5,mode=620,ptmxmode=666 devpts /dev/pts
  mountpoint -q /dev/shm || mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs /dev/shm
  # cgroup v2 only, as systemd mounts it.
  mountpoint -q $CG || mount -t cgroup2 -o rw,nosuid,nodev,noexec,relatime,nsdelegate,memory_recursiveprot cgroup2 $CG
  echo "+memory +pids" >$CG/cgroup.subtree_control
  mkdir -p $CG/init.scope $CG/system.slice $SESSION
  echo "+memory +pids" >$CG/user.slice/cgroup.subtree_control
  echo "+memory +pids" >$CG/user.slice/user-0.slice/cgroup.subtree_control
  echo 1 >$CG/init.scope/cgroup.procs
  hostname stallscope-vm
  local epoch
  epoch=$(cmdline_arg vmtest.epoch)
  [ -z "$epoch" ] || date -u -s "@$epoch" >/dev/null
  modprobe loop 2>/dev/null || true
  if [ "$(cmdline_arg vmtest.shell)" = 1 ]; then
    echo "vm-guest: shell on ttyS0 (exit ends the guest)" >/dev/ttyS0
    cp /vmtest/stallscope /usr/local/bin/stallscope
    setsid -c sh -c "echo \$\$ > $SESSION/cgroup.procs; exec bash -l" </dev/ttyS0 >/dev/ttyS0 2>&1
  else
    sh -c "echo \$\$ > $SESSION/cgroup.procs; exec /vmtest/vm-guest.sh tests"
  fi
  sync
  echo o >/proc/sysrq-trigger
  sleep 60
}

# --- helpers ------------------------------------------------------------------
W=/root/vmtest
LAB=/var/tmp/stallscope-lab
MNT=$LAB/mnt/ext4
# shellcheck source=scripts/pg-lab.sh
. "$(dirname "${BASH_SOURCE[0]}")/pg-lab.sh" # pg_bin_dir, beside this script on the test disk
PGBIN=$(pg_bin_dir || echo /usr/lib/postgresql/none)
SOCK=/run/vmtest-pg
PGLOG=/var/log/vmtest-pg
FIX=$W/fixtures

pass() { echo "VMTEST PASS $1 $2"; }
fail() { echo "VMTEST FAIL $1 $2"; }
# check NAME ok|"" DETAIL [SHORT]: SHORT (a few words with the figure) is
# what the host's last line says of a check that passed.
check() {
  if [ "$2" = ok ]; then pass "$1" "$3"; else fail "$1" "$3"; fi
  [ -z "${4:-}" ] || echo "VMTEST SHORT $1 $4"
}
diag() { echo "VMTEST DIAG $*"; }
say() { echo "[$(date +%T)] $*"; }
indent() { sed 's/^/    /'; }
median() { sort -g | awk '{a[NR]=$1} END {if (NR==0) print "none"; else if (NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }

# What lab down must leave as it was: cgroups (tree, controllers, io.max),
# the dirty sysctls, mounts and loop devices.
snapshot() {
  local d f c
  echo "# cgroup tree, subtree_control"
  find $CG -type d | sort | while read -r d; do echo "$d: $(cat "$d/cgroup.subtree_control")"; done
  echo "# io.max set"
  find $CG -name io.max | sort | while read -r f; do c=$(cat "$f"); [ -z "$c" ] || echo "$f: $c"; done
  echo "# this shell's cgroup"
  cat /proc/$$/cgroup
  echo "# sysctls"
  sysctl vm.dirty_bytes vm.dirty_background_bytes vm.dirty_ratio vm.dirty_background_ratio
  echo "# mounts"
  findmnt -rn -o TARGET,FSTYPE,SOURCE | sort
  echo "# loop devices"
  losetup -a
}

# Compares with a snapshot taken before: "ok" or the differing lines.
diff_snapshot() { # before-file name
  snapshot >"$W/$2.after"
  if diff -u "$1" "$W/$2.after" >"$W/$2.diff"; then
    echo ok
  else
    grep -E '^[-+][^-+]' "$W/$2.diff" | tr '\n' ' ' | cut -c1-400
  fi
}

# Kernel stacks of threads blocked in the write path, for fixtures: every
# 200 ms, D-state threads whose stack names balance_dirty_pages, a sync or
# a wait on writeback; two of each kind (the counts live in this loop, so
# a second catcher in the same run starts again at 1 and may overwrite; the
# README lines then say so twice, the last is the file's).
stack_catcher() {
  mkdir -p "$FIX/stacks"
  local -A count=()
  local s line st t stk sc kind n
  while :; do
    # bash builtins only: forks are dear under TCG
    for s in /proc/[0-9]*/task/[0-9]*/stat; do
      read -r line 2>/dev/null <"$s" || continue
      st=${line##*) }
      [ "${st%% *}" = D ] || continue
      t=${s%/stat}
      # the syscall read on both sides of the stack: a thread that moved on
      # in between is skipped, so the comment line says what it was in
      { sc=$(<"$t/syscall") && stk=$(<"$t/stack") && [ "$(<"$t/syscall")" = "$sc" ]; } 2>/dev/null || continue
      [ "$sc" != running ] || continue
      # <the cause stallscope should give>-<what waits>, as in tests/kernels.rs
      case $stk in
        *balance_dirty_pages*) kind=dirty_throttle-balance_dirty_pages ;;
        *msync*) kind=sync-msync ;;
        *fsync*|*fdatasync*|*sync_file_range*)
          case $stk in
            *folio_wait_writeback*|*wait_on_page_writeback*) kind=sync-fsync_data_writeback ;;
            *jbd2*|*xlog*) kind=sync-fsync_journal ;;
            *blkdev_issue_flush*) kind=sync-fsync_cache_flush ;;
            *) kind=sync-fsync_other ;;
          esac ;;
        *folio_wait_writeback*|*wait_on_page_writeback*) kind=writeback_wait-folio_wait_writeback ;;
        *) continue ;;
      esac
      n=${count[$kind]:-0}
      [ "$n" -lt 2 ] || continue
      n=$((n + 1))
      count[$kind]=$n
      echo "$stk" >"$FIX/stacks/$kind-$n.txt"
      echo "$kind-$n.txt: thread $(<"$t/comm"), /proc/PID/task/TID/syscall \"$sc\"" >>"$FIX/stacks/README.part"
    done
    sleep 0.2
  done
}
catcher_pid=""
catch_start() { stack_catcher & catcher_pid=$!; }
catch_stop() { [ -z "$catcher_pid" ] || { kill "$catcher_pid" 2>/dev/null; wait "$catcher_pid" 2>/dev/null; catcher_pid=""; }; }

# The run of the walk. --stall-threshold 20ms: once the kernel has learnt
# the device's bandwidth (a second workload on the same lab, as here after
# the dashboard), its throttle pauses settle at 20-50 ms, under the default
# 100 ms threshold (seen in this guest: 85 dirty_throttle stalls on a fresh
# lab, none after the dashboard, longest pause 44 ms).
RUN_ARGS="--duration 30s --stall-threshold 20ms --format jsonl"

# Figures of a `run --format jsonl` file: median written MiB/s of the
# intervals after the first 10 s (the device's too), the first
# dirty_throttle stall (any confidence, and the first with high), those of
# 100 ms or more, the longest throttle pause.
run_figures() { # jsonl cap_mib -> sets med dev_med first_t first_conf nstall bycause
  med=$(jq -r 'select(.type=="interval" and .t_s > 10) | .mib_per_s' "$1" | median)
  dev_med=$(jq -r 'select(.type=="interval" and .t_s > 10) | .dev.write_mib_per_s' "$1" | median)
  first_t=$(jq -rs '[.[] | select(.type=="stall" and .cause=="dirty_throttle")] | sort_by(.t_s) | .[0].t_s // "none"' "$1")
  first_conf=$(jq -rs '[.[] | select(.type=="stall" and .cause=="dirty_throttle")] | sort_by(.t_s) | .[0].confidence // "none"' "$1")
  first_high=$(jq -rs '[.[] | select(.type=="stall" and .cause=="dirty_throttle" and .confidence=="high")] | sort_by(.t_s) | .[0].t_s // "none"' "$1")
  nstall=$(jq -r 'select(.type=="stall") | .cause' "$1" | wc -l)
  bycause=$(jq -r 'select(.type=="stall") | .cause' "$1" | sort | uniq -c | awk '{printf "%s%s %s", (NR>1?", ":""), $2, $1}')
  dt100=$(jq -r 'select(.type=="stall" and .cause=="dirty_throttle" and .duration_ms >= 100) | .t_s' "$1" | wc -l)
  maxp=$(jq -r 'select(.type=="interval") | .bdp.max_pause_ms' "$1" | sort -g | tail -1)
}
within10() { awk -v m="$1" -v c="$2" 'BEGIN {exit !(m != "none" && m >= 0.9*c && m <= 1.1*c)}'; }
le() { awk -v a="$1" -v b="$2" 'BEGIN {exit !(a != "none" && a <= b)}'; }

# A dashboard frame: `stallscope --target $MNT` in a detached tmux 160x45,
# captured after 15 s, then q. Sets dash_ok and dash_detail.
dash_frame() { # tag
  say "dashboard: stallscope --target $MNT in tmux 160x45, 15 s, then q"
  rm -f "$W/$1.rc"
  tmux -u new-session -d -s "$1" -x 160 -y 45 "stallscope --target $MNT; echo EXIT=\$? > $W/$1.rc"
  sleep 15
  tmux capture-pane -p -t "$1" >"$W/$1.txt" 2>&1
  indent <"$W/$1.txt"
  tmux send-keys -t "$1" q
  # q must end it (writers blocked in an msync finish first): up to 30 s.
  local t0=$SECONDS quit_s=""
  while [ $((SECONDS - t0)) -lt 30 ]; do
    [ -f "$W/$1.rc" ] && { quit_s=$((SECONDS - t0)); break; }
    sleep 0.2
  done
  local header stalls dt exitrc
  header=$(grep -c "^stallscope  target 1/1 $MNT" "$W/$1.txt")
  stalls=$(sed -n 's/.*Stalls, newest first (\([0-9]*\) in all).*/\1/p' "$W/$1.txt")
  dt=$(grep -c 'dirty_throttle' "$W/$1.txt")
  exitrc=$(cat "$W/$1.rc" 2>/dev/null || echo "still running after 30 s")
  tmux kill-server 2>/dev/null
  # What comes next measures from a quiet start: no stallscope left, the
  # dashboard's dirty data written back.
  for _ in $(seq 120); do pgrep -x stallscope >/dev/null || break; sleep 0.5; done
  t0=$SECONDS
  sync
  say "sync after the dashboard: $((SECONDS - t0)) s"
  dash_ok=$([ "$header" -ge 1 ] && [ "${stalls:-0}" -ge 1 ] && [ "$dt" -ge 1 ] && [ "$exitrc" = EXIT=0 ] && echo ok)
  dash_short="${stalls:-no} stalls, q ${quit_s:-?} s"
  dash_detail="header $([ "$header" -ge 1 ] && echo yes || echo no), ${stalls:-no} stalls listed, $dt dirty_throttle rows, q: $exitrc${quit_s:+ after ${quit_s} s}"
}

# --- PostgreSQL on the lab filesystem (as user postgres, from /) --------------------------------------------
pg_start() { # pgdata
  install -d -o postgres -g postgres "$1" $SOCK
  install -d -o postgres -g postgres $PGLOG
  pgrun $PGBIN/initdb -A trust -D "$1" >"$W/initdb.log" 2>&1 || return 1
  cat >>"$1/postgresql.conf" <<EOC
shared_buffers = 512MB
checkpoint_timeout = 30s
max_wal_size = 4GB
listen_addresses = ''
unix_socket_directories = '$SOCK'
EOC
  pgrun $PGBIN/pg_ctl -D "$1" -l "$PGLOG/server.log" start -w >/dev/null
}
pg_stop() { # pgdata
  pgrun $PGBIN/pg_ctl -D "$1" stop -m fast -w >/dev/null 2>&1 ||
    pgrun $PGBIN/pg_ctl -D "$1" stop -m immediate -w >/dev/null 2>&1 || true
}
pgrun() { (cd / && runuser -u postgres -- "$@"); }
bench() { pgrun $PGBIN/pgbench -h $SOCK "$@" postgres; }

# pgbench -i, then stallscope observing postgres while pgbench runs 30 s.
# Leaves $W/$1.jsonl, $W/$1-pgbench.txt; sets tps.
pg_observe() { # tag
  say "pgbench -i -s 10"
  bench -i -q -s 10 >"$W/$1-init.txt" 2>&1 || { tail -5 "$W/$1-init.txt"; return 1; }
  say "stallscope run --observe-name postgres --stall-threshold 20ms --format jsonl (pgbench -c 8 -j 2 -T 30, CHECKPOINT at 12 s)"
  stallscope run --observe-name postgres --stall-threshold 20ms --format jsonl >"$W/$1.jsonl" 2>"$W/$1.err" &
  local obs=$!
  sleep 3
  catch_start
  # A CHECKPOINT 12 s in makes the checkpointer fsync what it wrote behind
  # the cap: fsyncs of seconds, every run. Without it the only long calls
  # are WAL fdatasyncs, and whether one passes 20 ms under TCG is chance
  # (CI saw 0 of 16 stalls call-bounded once, 2 of 34 the next run).
  (sleep 12; pgrun $PGBIN/psql -h $SOCK -qc CHECKPOINT postgres >"$W/$1-checkpoint.txt" 2>&1) &
  local ckpt=$!
  bench -c 8 -j 2 -T 30 -P 5 >"$W/$1-pgbench.txt" 2>&1
  wait $ckpt
  catch_stop
  sleep 1
  kill -INT $obs
  wait $obs
  local orc=$?
  sed -n 's/^progress/  progress/p' "$W/$1-pgbench.txt" | indent
  tps=$(sed -n 's/^tps = \([0-9.]*\).*/\1/p' "$W/$1-pgbench.txt" | head -1)
  echo "  stallscope (rc $orc) stderr:"
  head -5 "$W/$1.err" | indent
}

pg_figures() { # jsonl -> sets nobs timings nstall nsync nsync_high bycause
  nobs=$(jq -r 'select(.type=="observed") | .timing' "$1" | wc -l)
  timings=$(jq -r 'select(.type=="observed") | .timing' "$1" | sort | uniq -c | awk '{printf "%s%s×%s", (NR>1?",":""), $2, $1}')
  nstall=$(jq -r 'select(.type=="stall") | .cause' "$1" | wc -l)
  nsync=$(jq -r 'select(.type=="stall" and .cause=="sync") | .cause' "$1" | wc -l)
  nsync_high=$(jq -r 'select(.type=="stall" and .cause=="sync" and .confidence=="high") | .cause' "$1" | wc -l)
  bycause=$(jq -r 'select(.type=="stall") | .cause' "$1" | sort | uniq -c | awk '{printf "%s%s %s", (NR>1?", ":""), $2, $1}')
  # One stall per system call (#23): sync stalls bounded by the call's entry and exit.
  ncall=$(jq -r 'select(.type=="stall" and .bounds=="syscall") | .syscall' "$1" | grep -cE '^(fsync|fdatasync)$')
  bybounds=$(jq -r 'select(.type=="stall") | .bounds // "none"' "$1" | sort | uniq -c | awk '{printf "%s%s %s", (NR>1?", ":""), $2, $1}')
}

# --- the test binaries (vm-test.sh --tests) --------------------------------------------
# Each binary of /vmtest/tests.list ("NAME PATH") from the checkout's folder,
# as cargo runs it, as root with STALLSCOPE_REQUIRE_ROOT_TESTS=1 (a skip
# fails); its output indented, then one check `test:NAME`.
test_binaries() {
  local repo name exe rc t0 took res failed
  repo=$(cat /vmtest/tests.repo)
  say "test binaries: unpacking into $repo (and the stallscope binary they were built with)"
  tar -C / -xf /vmtest/tests.tar || { fail tests "tests.tar did not unpack"; return; }
  # Loopback for the servers the tests start (PostgreSQL, etcd, /metrics).
  ip link set lo up
  while read -r name exe; do
    say "test binary $name: $exe"
    t0=$SECONDS
    (cd "$repo" && STALLSCOPE_REQUIRE_ROOT_TESTS=1 TMPDIR=/var/tmp RUST_BACKTRACE=1 \
      timeout -k 10 1200 "$exe") >"$W/test-$name.txt" 2>&1
    rc=$?
    took=$((SECONDS - t0))
    indent <"$W/test-$name.txt"
    res=$(grep '^test result:' "$W/test-$name.txt" | sed 's/^test result: //; s/; finished in .*//' |
      awk -F'[ ;.]+' '{p+=$2; f+=$4} END {if (NR) printf "%d passed, %d failed", p, f}')
    failed=$(sed -n 's/^test \(.*\) \.\.\. FAILED$/\1/p' "$W/test-$name.txt" | tr '\n' ' ')
    [ $rc != 124 ] || failed="${failed}(killed after 1200 s) "
    check "test:$name" "$([ $rc = 0 ] && echo ok)" "rc $rc in $took s: ${res:-no test result line}${failed:+; failed: $failed}" "$name ${took} s"
  done </vmtest/tests.list
}

# --- the checks -----------------------------------------------------------------------
guest_tests() {
  exec </dev/null
  mkdir -p $W $FIX
  cd $W || exit 1
  cp /vmtest/stallscope /usr/local/bin/stallscope
  echo "VMTEST INFO kernel $(uname -r)"
  echo "VMTEST INFO cgroup cgroup v2 only (root subtree_control: $(cat $CG/cgroup.subtree_control); tests in $(cut -d: -f3 /proc/self/cgroup))"
  echo "VMTEST INFO binary $(cat /vmtest/binary-version)"
  echo "VMTEST INFO mounts $(findmnt -rn -o FSTYPE | sort | uniq -c | awk '{printf "%s %s, ", $2, $1}') v1 cgroup mounts: $(findmnt -rn -t cgroup | wc -l)"
  echo "VMTEST INFO disk $(df -h / | awk 'NR==2 {print $4 " free on /"}'), memory $(free -m | awk '/Mem:/ {print $2 " MiB"}'), $(nproc) CPUs"
  [ "$(cat /vmtest/checks 2>/dev/null)" = 0 ] || the_checks
  [ ! -f /vmtest/tests.list ] || test_binaries
  echo "VMTEST DONE"
}

the_checks() {

  # 1. probe
  say "check 1: stallscope probe"
  stallscope probe >"$W/probe.txt" 2>&1
  local rc=$?
  indent <"$W/probe.txt"
  check probe "$([ $rc = 0 ] && [ -s "$W/probe.txt" ] && echo ok)" "rc $rc, $(wc -l <"$W/probe.txt") lines" probe

  # 2. the README's first-stall walk
  say "check 2: the first-stall walk (README): lab up --fs ext4 --cap 20MiB --dirty-bytes 256M"
  snapshot >"$W/walk.before"
  stallscope lab up --fs ext4 --cap 20MiB --dirty-bytes 256M >"$W/labup.txt" 2>&1
  rc=$?
  indent <"$W/labup.txt"
  local labup_ok=""
  [ $rc = 0 ] && mountpoint -q $MNT && labup_ok=ok
  check lab-up "$labup_ok" "rc $rc$([ -n "$labup_ok" ] || echo ": $(grep -v '^$' "$W/labup.txt" | tail -1 | cut -c1-200)")" "lab up --cap 20MiB"
  if [ -n "$labup_ok" ]; then
    dash_frame dash
    check dashboard "$dash_ok" "$dash_detail" "dashboard $dash_short"

    say "stallscope run --target $MNT $RUN_ARGS"
    catch_start
    # shellcheck disable=SC2086
    stallscope run --target $MNT $RUN_ARGS >"$W/run.jsonl" 2>"$W/run.err"
    rc=$?
    catch_stop
    indent <"$W/run.err" | head -10
    jq -c 'select(.type=="interval") | {t_s, mib_per_s, dev: .dev.write_mib_per_s, dirty_kib, stalls, bdp}' "$W/run.jsonl" | indent
    run_figures "$W/run.jsonl"
    check lab-cap "$(within10 "$med" 20 && [ $rc = 0 ] && echo ok)" \
      "written ${med} MiB/s of 20 (median of intervals after 10 s; device ${dev_med} MiB/s; rc $rc)" \
      "lab cap $(printf %.1f "$med" 2>/dev/null) MiB/s of 20"
    echo "  the first dirty_throttle stalls:"
    jq -c 'select(.type=="stall" and .cause=="dirty_throttle")' "$W/run.jsonl" | head -3 | cut -c1-400 | indent
    # The issue's "the first dirty_throttle stall with high confidence
    # within 10 s": the first high one; an earlier low one is said.
    check throttle-stall "$(le "$first_high" 10 && echo ok)" \
      "first high-confidence dirty_throttle stall at ${first_high} s (first of any confidence at ${first_t} s, ${first_conf}); ${nstall} stalls (≥ 20 ms): ${bycause:-none}; ${dt100} dirty_throttle ≥ 100 ms; longest throttle pause ${maxp} ms" \
      "dirty_throttle (high) at ${first_high} s"
  else
    fail dashboard "not run: lab up failed"
    fail lab-cap "not run: lab up failed"
    fail throttle-stall "not run: lab up failed"
  fi
  say "stallscope lab down"
  stallscope lab down >"$W/labdown.txt" 2>&1
  rc=$?
  indent <"$W/labdown.txt"
  local d
  d=$(diff_snapshot "$W/walk.before" walk)
  check lab-down-clean "$([ $rc = 0 ] && [ "$d" = ok ] && echo ok)" "rc $rc, guest as before: $d" "lab down clean"
  local walk_up_ok=$labup_ok

  # 3. PostgreSQL observed under pgbench (docs/observing-servers.md: Diagnosing PostgreSQL)
  say "check 3: PostgreSQL observed: lab up --fs ext4 --cap 10MiB --dirty-bytes 256M"
  snapshot >"$W/pg.before"
  stallscope lab up --fs ext4 --cap 10MiB --dirty-bytes 256M >"$W/pglabup.txt" 2>&1
  rc=$?
  indent <"$W/pglabup.txt"
  labup_ok=""
  [ $rc = 0 ] && mountpoint -q $MNT && labup_ok=ok
  check pg-lab-up "$labup_ok" "rc $rc$([ -n "$labup_ok" ] || echo ": $(grep -v '^$' "$W/pglabup.txt" | tail -1 | cut -c1-200)")" "lab up --cap 10MiB"
  if [ -n "$labup_ok" ]; then
    chmod 755 $LAB
    if pg_start $MNT/pg; then
      # A binary that can put a running server in the lab's capped cgroup does.
      if stallscope lab --help 2>&1 | grep -qw adopt; then
        local pm
        pm=$(head -1 $MNT/pg/postmaster.pid)
        say "stallscope lab adopt $pm (the postmaster and its children)"
        stallscope lab adopt "$pm" 2>&1 | indent
      fi
      pg_observe pg
      pg_stop $MNT/pg
      pg_figures "$W/pg.jsonl"
      check pg-sched-timing "$([ "$nobs" -gt 0 ] && [ "$timings" = "sched×$nobs" ] && echo ok)" \
        "$nobs observed lines, timing: ${timings:-none}; pgbench ${tps:-?} tps" "postgres timing sched"
      check pg-sync-stalls "$([ "$nsync" -gt 0 ] && echo ok)" \
        "$nsync sync stalls ($nsync_high high confidence) of $nstall: ${bycause:-none}" "postgres $nsync sync stalls"
      check pg-call-bounds "$([ "$ncall" -gt 0 ] && echo ok)" \
        "$ncall fsync/fdatasync stalls bounded by their call; bounds: ${bybounds:-none}" "postgres $ncall call-bounded"
    else
      tail -5 "$W/initdb.log" "$PGLOG/server.log" 2>/dev/null | indent
      fail pg-sched-timing "PostgreSQL did not start"
      fail pg-sync-stalls "PostgreSQL did not start"
      fail pg-call-bounds "PostgreSQL did not start"
    fi
  else
    fail pg-sched-timing "not run: lab up failed"
    fail pg-sync-stalls "not run: lab up failed"
    fail pg-call-bounds "not run: lab up failed"
  fi
  say "stallscope lab down"
  stallscope lab down >"$W/pglabdown.txt" 2>&1
  rc=$?
  indent <"$W/pglabdown.txt"
  d=$(diff_snapshot "$W/pg.before" pg)
  check pg-lab-down-clean "$([ $rc = 0 ] && [ "$d" = ok ] && echo ok)" "rc $rc, guest as before: $d" "lab down clean"

  # Diagnostic, not a check: when lab up could not cap, cap by hand the
  # cgroup-v2 way (a child cgroup with +io +memory, io.max on the lab's loop
  # device, the writers moved in) to show the guest itself can.
  if [ -z "$walk_up_ok" ] || [ -z "$labup_ok" ]; then
    manual_cap_diag
  fi

  # 4. the kernel's tracefs formats, for fixtures
  say "check 4: tracefs format files and kernel stacks for fixtures"
  fixtures
}

# `stallscope run` on the lab inside the hand-capped cgroup $1.
diag_run() { # cgroup tag
  say "stallscope run --target $MNT $RUN_ARGS in $1 ($2)"
  catch_start
  sh -c "echo \$\$ > $1/cgroup.procs; exec stallscope run --target $MNT $RUN_ARGS" >"$W/diag-run-$2.jsonl" 2>"$W/diag-run-$2.err"
  local rc=$?
  catch_stop
  jq -c 'select(.type=="interval") | {t_s, mib_per_s, dev: .dev.write_mib_per_s, dirty_kib, stalls, bdp}' "$W/diag-run-$2.jsonl" | indent
  run_figures "$W/diag-run-$2.jsonl"
  diag "manual-v2-cap run ($2): written ${med} MiB/s of 20 (median after 10 s; device ${dev_med}; rc $rc), first dirty_throttle stall at ${first_t} s (${first_conf}), first high at ${first_high} s; ${nstall} stalls (≥ 20 ms): ${bycause:-none}; ${dt100} dirty_throttle ≥ 100 ms; longest throttle pause ${maxp} ms"
}

manual_cap_diag() {
  say "DIAGNOSTIC (not a check): manual cgroup-v2 cap, lab up --cap 0"
  local before rc dev m=$CG/vmtest-manual
  before=$(cat $CG/cgroup.subtree_control)
  if ! stallscope lab up --fs ext4 --cap 0 --dirty-bytes 256M >"$W/diag-labup.txt" 2>&1; then
    indent <"$W/diag-labup.txt"
    diag "manual-v2-cap lab up --cap 0 failed"
    stallscope lab down >/dev/null 2>&1
    return
  fi
  dev=$(mountpoint -d $MNT)
  echo "+io +memory" >$CG/cgroup.subtree_control
  mkdir -p $m
  echo "$dev wbps=20971520" >$m/io.max
  say "$m: io.max $(cat $m/io.max)"
  # The run on a fresh lab, then the dashboard, then the run again (the
  # README's order), to tell the kernel's throttling history from the cap.
  diag_run "$m" fresh
  echo $$ >$m/cgroup.procs
  dash_frame diag-dash
  echo $$ >$SESSION/cgroup.procs
  diag "manual-v2-cap dashboard: $dash_detail"
  diag_run "$m" after-dashboard
  # PostgreSQL in the same hand-capped cgroup (at 10 MiB/s), observed.
  echo "$dev wbps=10485760" >$m/io.max
  chmod 755 $LAB
  echo $$ >$m/cgroup.procs
  pg_start $MNT/pg
  rc=$?
  echo $$ >$SESSION/cgroup.procs
  if [ $rc = 0 ]; then
    pg_observe diag-pg
    pg_stop $MNT/pg
    pg_figures "$W/diag-pg.jsonl"
    diag "manual-v2-cap postgres: $nobs observed lines, timing ${timings:-none}; $nsync sync stalls ($nsync_high high) of $nstall: ${bycause:-none}; pgbench ${tps:-?} tps"
  else
    tail -5 "$W/initdb.log" "$PGLOG/server.log" 2>/dev/null | indent
    diag "manual-v2-cap postgres did not start"
  fi
  rmdir $m
  echo "-io" >$CG/cgroup.subtree_control
  [ "$(cat $CG/cgroup.subtree_control)" = "$before" ] || diag "manual-v2-cap root subtree_control not restored: $(cat $CG/cgroup.subtree_control)"
  stallscope lab down >"$W/diag-labdown.txt" 2>&1 || indent <"$W/diag-labdown.txt"
}

# A few real trace_pipe lines of the writeback events we read (a private
# instance, all processes), while a capped lab takes buffered writes with
# an fdatasync every 2 s: up to 12 lines of each event.
trace_pipe_capture() { # tracefs
  local inst=$1/instances/vmtest-fixture e cpid
  mkdir "$inst" || return
  for e in balance_dirty_pages folio_wait_writeback wait_on_page_writeback writeback_start; do
    [ ! -e "$inst/events/writeback/$e/enable" ] || echo 1 >"$inst/events/writeback/$e/enable"
  done
  # The lab's own cap, else (a binary whose lab cannot cap here) by hand,
  # as the diagnostic does: the capture is of the kernel, not of the lab.
  local how="capped at 10 MiB/s by lab up" m=$CG/vmtest-fixture before=""
  if ! stallscope lab up --fs ext4 --cap 10MiB --dirty-bytes 64M >"$W/tp-labup.txt" 2>&1; then
    how="capped at 10 MiB/s by hand (io.max in a child cgroup; lab up --cap failed)"
    stallscope lab up --fs ext4 --cap 0 --dirty-bytes 64M >"$W/tp-labup.txt" 2>&1
    before=$(cat $CG/cgroup.subtree_control)
    echo "+io +memory" >$CG/cgroup.subtree_control
    mkdir -p $m
    echo "$(mountpoint -d $MNT) wbps=10485760" >$m/io.max
  fi
  : >"$inst/trace" # not mkfs's writes: the run's
  cat "$inst/trace_pipe" >"$W/trace_pipe.raw" &
  cpid=$!
  if [ -n "$before" ]; then
    sh -c "echo \$\$ > $m/cgroup.procs; exec stallscope run --target $MNT --mode buffered --sync periodic:2s --duration 8s --format jsonl" >/dev/null 2>&1
    rmdir $m
    echo "-io" >$CG/cgroup.subtree_control
  else
    stallscope run --target $MNT --mode buffered --sync periodic:2s --duration 8s --format jsonl >/dev/null 2>&1
  fi
  stallscope lab down >/dev/null 2>&1
  kill $cpid
  wait $cpid 2>/dev/null
  echo 0 >"$inst/tracing_on"
  rmdir "$inst"
  {
    echo "# trace_pipe of a tracefs instance with writeback:balance_dirty_pages, folio_wait_writeback, writeback_start;"
    echo "# Debian 12 kernel $(uname -r), scripts/vm-guest.sh: stallscope run --mode buffered --sync periodic:2s on a lab ext4"
    echo "# ($how, vm.dirty_bytes 64M), all processes. Up to 12 lines of each event (balance_dirty_pages: 4 unthrottled, 8 with a pause)."
    # balance_dirty_pages: 4 lines before throttling (pause <= 0), 8 throttled
    awk '{ e = ""; for (i = 1; i <= NF; i++) if ($i ~ /^[a-z_]+:$/ && $(i+1) == "bdi") { e = $i; break } }
         e == "balance_dirty_pages:" { e = e (/ pause=[1-9]/ ? "+" : "-") }
         e != "" && c[e]++ < (e ~ /\+$/ ? 8 : e ~ /-$/ ? 4 : 12) { print }' "$W/trace_pipe.raw"
  } >"$FIX/trace_pipe.txt"
}

fixtures() {
  local t=/sys/kernel/tracing mounted=0 f n=0 missing=""
  if [ ! -e $t/events/header_page ]; then mount -t tracefs nodev $t && mounted=1; fi
  uname -r >"$FIX/uname-r"
  mkdir -p "$FIX/events"
  for f in header_page header_event \
    writeback/balance_dirty_pages writeback/folio_wait_writeback writeback/wait_on_page_writeback \
    writeback/writeback_start sched/sched_switch sched/sched_waking sched/sched_wakeup; do
    local src=$t/events/$f
    [ "${f%/*}" = "$f" ] || src=$src/format
    if [ -r "$src" ]; then
      if [ "$src" = "$t/events/$f" ]; then
        cat "$src" >"$FIX/events/$f"
      else
        mkdir -p "$FIX/events/$f"
        cat "$src" >"$FIX/events/$f/format"
      fi
      n=$((n + 1))
    else
      missing="$missing ${f#*/}"
    fi
  done
  trace_pipe_capture $t
  [ $mounted = 0 ] || umount $t
  local ns tp
  ns=$(find "$FIX/stacks" -name '*.txt' 2>/dev/null | wc -l)
  tp=$(grep -v '^#' "$FIX/trace_pipe.txt" 2>/dev/null | sed -n 's/.*: \([a-z_]*\): bdi .*/\1/p' | sort | uniq -c | awk '{printf "%s%s %s", (NR>1?", ":""), $2, $1}')
  {
    echo "# /proc/PID/stack texts, Debian 12 kernel $(uname -r) (x86_64), caught by scripts/vm-guest.sh"
    echo "# from D-state threads (stallscope's writers under a 20 MiB/s io.max cap, PostgreSQL under pgbench)."
    echo "# Name = <cause stallscope should give>-<what waits>-<n>.txt. Per file, the thread and its syscall"
    echo "# line (read before and after the stack, equal; x86_64 numbers: 26 msync, 74 fsync, 75 fdatasync, -1 = in a fault)."
    sort "$FIX/stacks/README.part" 2>/dev/null
  } >"$FIX/stacks/README"
  rm -f "$FIX/stacks/README.part"
  check fixtures "$([ $n -ge 6 ] && [ "$ns" -ge 3 ] && grep -v '^#' "$FIX/trace_pipe.txt" | grep -q ' balance_dirty_pages: ' && echo ok)" \
    "$n format files (absent:${missing:- none}), $ns kernel stacks ($(find "$FIX/stacks" -name '*.txt' -printf '%f ' | sort)), trace_pipe: ${tp:-nothing}" \
    "fixtures: $n formats, $ns stacks"
  echo "VMTEST-FIXTURES-BEGIN"
  tar -czf - -C "$FIX" . | base64 -w 76
  echo "VMTEST-FIXTURES-END"
}

case ${1:-} in
  init) guest_init ;;
  tests) guest_tests ;;
  *) echo "usage: $0 init|tests (inside the vm-test guest only)" >&2; exit 2 ;;
esac
