# shellcheck shell=bash disable=SC2154
# Sourced by the cost scripts (observe-cost.sh, chain-cost.sh, pg-fixture.sh):
# PostgreSQL on a capped lab ext4, the same server for every measurement;
# also by .ci/run and vm-guest.sh for pg_bin_dir alone.
# Expects: bin (stallscope), lab (its folder), cap, port, pgbin (pg_bin_dir's).
# Gives: pg_bin_dir, pg_lab_up (and pgdata), pg_stop, bench (pgbench), psql_
# (one query). Sourced before lab is set: each function reads it when called.

# The bin folder of the newest PostgreSQL installed (Debian's
# /usr/lib/postgresql/N/bin with an initdb, the highest N), found, not
# assumed; status 1 and nothing printed when there is none.
pg_bin_dir() {
  local i newest
  newest=$(for i in "${PG_ROOT:-/usr/lib/postgresql}"/*/bin/initdb; do
    [ -x "$i" ] && echo "${i%/initdb}"
  done | sort -V | tail -1)
  [ -n "$newest" ] && echo "$newest"
}

# pg_conf DATA PORT SOCKDIR CHECKPOINT: the settings every measurement's
# server runs with (shared_buffers 512MB, Unix socket only), appended to
# DATA/postgresql.conf, checkpoint_timeout CHECKPOINT.
pg_conf() {
  cat >>"$1/postgresql.conf" <<EOC
shared_buffers = 512MB
checkpoint_timeout = $4
max_wal_size = 4GB
listen_addresses = ''
port = $2
unix_socket_directories = '$3'
EOC
}

bench() { runuser -u postgres -- pgbench -h "$lab/sock" -p "$port" "$@" postgres; }
psql_() { runuser -u postgres -- psql -h "$lab/sock" -p "$port" -qAtX -c "$1" postgres; }

# The lab, a fresh cluster on it (shared_buffers 512MB, checkpoints every
# 30 s, Unix socket only) and pgbench's tables at scale 10.
pg_lab_up() {
  pgdata=$lab/mnt/ext4/pg
  "$bin" lab up --dir "$lab" --fs ext4 --size 4GiB --cap "$cap" --dirty-bytes 256M >/dev/null
  chmod 755 "$lab"
  install -d -o postgres -g postgres "$pgdata" "$lab/sock"
  # The server's processes write in the lab's capped group on cgroup v2
  # (lab exec; on v1, where the root group is capped, it runs them as is).
  "$bin" lab exec --dir "$lab" -- runuser -u postgres -- "$pgbin/initdb" -A trust -D "$pgdata" >/dev/null
  pg_conf "$pgdata" "$port" "$lab/sock" 30s
  "$bin" lab exec --dir "$lab" -- runuser -u postgres -- "$pgbin/pg_ctl" -D "$pgdata" \
    -l "$pgdata/server.log" start -w >/dev/null
  bench -i -q -s 10 >/dev/null 2>&1
}

# Stops the server at once (on every exit path; quiet if it is not up).
pg_stop() {
  runuser -u postgres -- "$pgbin/pg_ctl" -D "${pgdata:-$lab/mnt/ext4/pg}" stop -m immediate -w >/dev/null 2>&1 || true
}
