#!/usr/bin/env bash
# A PostgreSQL server of the project's own for the history tests: Debian's
# postgresql, a cluster under a private directory owned by the postgres
# user, listening on loopback only at a known port, with a trust login for
# the `lazyinit` role on 127.0.0.1. Idempotent: a running cluster is kept.
# Prints the URL the tests read (scripts/test.sh exports it as
# LAZYINIT_TEST_POSTGRES).
set -euo pipefail
PORT="${LAZYINIT_PG_PORT:-55432}"
DIR="${LAZYINIT_PG_DIR:-/var/tmp/lazyinit-postgres}"
if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
  apt-get install -y postgresql >&2 || { apt-get update >&2 && apt-get install -y postgresql >&2; }
fi
BIN="$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)"
run_pg() { runuser -u postgres -- "$@"; }
if [ ! -f "$DIR/data/PG_VERSION" ]; then
  mkdir -p "$DIR"
  chown postgres:postgres "$DIR"
  run_pg "$BIN/initdb" -D "$DIR/data" -A trust -U postgres >&2
  cat >>"$DIR/data/postgresql.conf" <<CONF
listen_addresses = '127.0.0.1'
port = $PORT
unix_socket_directories = '$DIR'
fsync = off
CONF
fi
if ! run_pg "$BIN/pg_ctl" -D "$DIR/data" status >/dev/null 2>&1; then
  run_pg "$BIN/pg_ctl" -D "$DIR/data" -l "$DIR/server.log" -w -t 60 start >&2
fi
psql_pg() { run_pg "$BIN/psql" -h 127.0.0.1 -p "$PORT" -U postgres -v ON_ERROR_STOP=1 -qtA "$@"; }
if [ "$(psql_pg -c "SELECT 1 FROM pg_roles WHERE rolname = 'lazyinit'")" != 1 ]; then
  psql_pg -c "CREATE ROLE lazyinit LOGIN CREATEDB" >&2
fi
if [ "$(psql_pg -c "SELECT 1 FROM pg_database WHERE datname = 'lazyinit'")" != 1 ]; then
  psql_pg -c "CREATE DATABASE lazyinit OWNER lazyinit" >&2
fi
echo "postgres://lazyinit@127.0.0.1:$PORT/lazyinit"
