#!/usr/bin/env bash
# A PostgreSQL server of the project's own for the history tests: Debian's
# postgresql, a cluster under a private directory owned by the postgres
# user (0700: made here, or refused when it is a link or another user's), listening on loopback only at a known port, with a trust login for
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
# The folder is the postgres user's alone (issue 52): made here 0700 and
# given to postgres without following a link, or refused when it is a
# link, not a folder or another user's (a predictable name under /var/tmp
# that another user could have made first, for root to chown or write
# through). One of postgres' own that others may enter is closed (0700).
pg_uid=$(id -u postgres)
if [ ! -e "$DIR" ] && [ ! -L "$DIR" ]; then
  mkdir -m 700 "$DIR" 2>/dev/null && chown -h postgres:postgres "$DIR" || true
fi
if [ -L "$DIR" ] || [ ! -d "$DIR" ] || [ "$(stat -c %u "$DIR")" != "$pg_uid" ]; then
  echo "error: $DIR is not a private folder of the postgres user (a link, not a folder, or another user's): remove it, or set LAZYINIT_PG_DIR to a new path, then rerun" >&2
  exit 2
fi
chmod 700 "$DIR"
if [ ! -f "$DIR/data/PG_VERSION" ]; then
  run_pg "$BIN/initdb" -D "$DIR/data" -A trust -U postgres >&2
  # As postgres, in its own folder: no link of another user's is followed.
  run_pg tee -a "$DIR/data/postgresql.conf" >/dev/null <<CONF
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
