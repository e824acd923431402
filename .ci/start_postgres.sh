#!/usr/bin/env bash
# Install (if needed) and start a throwaway PostgreSQL server on 127.0.0.1 for the tests.
# Prints the storage URL on its last line. Idempotent: a running server is reused.
set -euo pipefail
PORT="${AUTOTUNE_PG_PORT:-54329}"
DATA="${AUTOTUNE_PG_DATA:-/tmp/autotune-pg}"
if ! ls /usr/lib/postgresql/*/bin/pg_ctl >/dev/null 2>&1; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >&2
  apt-get install -y -qq postgresql >&2
fi
BIN="$(dirname "$(ls -d /usr/lib/postgresql/*/bin/pg_ctl | sort -V | tail -1)")"
run_pg() { if [ "$(id -u)" = 0 ]; then su postgres -s /bin/bash -c "$*"; else bash -c "$*"; fi; }
if ! run_pg "$BIN/pg_isready -h 127.0.0.1 -p $PORT -q" 2>/dev/null; then
  if [ ! -f "$DATA/PG_VERSION" ]; then
    mkdir -p "$DATA"
    [ "$(id -u)" = 0 ] && chown postgres:postgres "$DATA"
    run_pg "$BIN/initdb -D $DATA -U postgres --auth=trust -E UTF8" >&2
  fi
  run_pg "$BIN/pg_ctl -D $DATA -l $DATA/server.log -w -o '-c listen_addresses=127.0.0.1 -p $PORT -c max_connections=200 -c fsync=off' start" >&2
fi
run_pg "$BIN/psql -h 127.0.0.1 -p $PORT -U postgres -tAc \"SELECT 1 FROM pg_roles WHERE rolname='autotune'\"" | grep -q 1 \
  || run_pg "$BIN/psql -h 127.0.0.1 -p $PORT -U postgres -c \"CREATE ROLE autotune LOGIN PASSWORD 'autotune' SUPERUSER\"" >&2
echo "postgresql+psycopg://autotune:autotune@127.0.0.1:$PORT/postgres"
