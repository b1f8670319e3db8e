# shellcheck shell=bash disable=SC2154
# Sourced by the cost scripts (observe-cost.sh, chain-cost.sh): PostgreSQL
# 15 on a capped lab ext4, the same server for every measurement.
# Expects: bin (stallscope), lab (its folder), cap, port, pgbin.
# Gives: pgdata, pg_lab_up, pg_stop, bench (pgbench), psql_ (one query).
pgdata=$lab/mnt/ext4/pg

bench() { runuser -u postgres -- pgbench -h "$lab/sock" -p "$port" "$@" postgres; }
psql_() { runuser -u postgres -- psql -h "$lab/sock" -p "$port" -qAtX -c "$1" postgres; }

# The lab, a fresh cluster on it (shared_buffers 512MB, checkpoints every
# 30 s, Unix socket only) and pgbench's tables at scale 10.
pg_lab_up() {
  "$bin" lab up --dir "$lab" --fs ext4 --size 4GiB --cap "$cap" --dirty-bytes 256M >/dev/null
  chmod 755 "$lab"
  install -d -o postgres -g postgres "$pgdata" "$lab/sock"
  runuser -u postgres -- "$pgbin/initdb" -A trust -D "$pgdata" >/dev/null
  cat >> "$pgdata/postgresql.conf" <<EOC
shared_buffers = 512MB
checkpoint_timeout = 30s
max_wal_size = 4GB
listen_addresses = ''
port = $port
unix_socket_directories = '$lab/sock'
EOC
  runuser -u postgres -- "$pgbin/pg_ctl" -D "$pgdata" -l "$pgdata/server.log" start -w >/dev/null
  bench -i -q -s 10 >/dev/null 2>&1
}

# Stops the server at once (on every exit path; quiet if it is not up).
pg_stop() {
  runuser -u postgres -- "$pgbin/pg_ctl" -D "$pgdata" stop -m immediate -w >/dev/null 2>&1 || true
}
