#!/usr/bin/env bash
# A throwaway PostgreSQL for the store tests: Debian's packages, a private cluster in a temporary directory,
# listening on 127.0.0.1 only, with a test role and database.
#
#   eval "$(bash .ci/postgres.sh start)"   # installs if missing, starts, exports MCPSIM_TEST_POSTGRES_URL
#   bash .ci/postgres.sh url               # prints the export line again
#   bash .ci/postgres.sh stop              # stops the cluster and deletes its directory
#
# Progress goes to stderr; stdout carries only the `export` line, so `eval` is safe.
# Settings (environment): MCPSIM_PG_DIR (default /tmp/mcpsim-postgres), MCPSIM_PG_PORT (default 54329).
set -euo pipefail

PG_DIR="${MCPSIM_PG_DIR:-/tmp/mcpsim-postgres}"
PG_PORT="${MCPSIM_PG_PORT:-54329}"
PG_ROLE="mcpsim"
PG_PASSWORD="mcpsim-test"
PG_DATABASE="mcpsim_test"
DATA="$PG_DIR/data"
LOG="$PG_DIR/server.log"
URL="postgres://$PG_ROLE:$PG_PASSWORD@127.0.0.1:$PG_PORT/$PG_DATABASE"

say() { echo "postgres.sh: $*" >&2; }

bin_dir() {
  local dir
  dir="$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)"
  if [[ -z "$dir" || ! -x "$dir/initdb" ]]; then
    return 1
  fi
  echo "$dir"
}

as_postgres() {
  # initdb and the server refuse to run as root.
  if [[ "$(id -u)" == "0" ]]; then
    runuser -u postgres -- "$@"
  else
    "$@"
  fi
}

install_if_missing() {
  if bin_dir >/dev/null; then
    return
  fi
  if [[ "$(id -u)" != "0" ]]; then
    say "PostgreSQL is not installed and this is not root: run 'apt-get install -y postgresql' first"
    exit 1
  fi
  say "installing PostgreSQL from Debian's packages"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >&2
  apt-get install -y -qq postgresql >&2
  # The package starts a system cluster on port 5432; this script uses its own, so stop that one.
  if command -v pg_ctlcluster >/dev/null; then
    pg_lsclusters --no-header 2>/dev/null | while read -r version cluster _; do
      pg_ctlcluster "$version" "$cluster" stop >&2 2>/dev/null || true
    done
  fi
}

running() {
  local bin
  bin="$(bin_dir)" || return 1
  [[ -d "$DATA" ]] && as_postgres "$bin/pg_ctl" -D "$DATA" status >/dev/null 2>&1
}

start() {
  install_if_missing
  local bin
  bin="$(bin_dir)"
  if running; then
    say "already running on 127.0.0.1:$PG_PORT ($DATA)"
    echo "export MCPSIM_TEST_POSTGRES_URL='$URL'"
    return
  fi
  rm -rf "$PG_DIR"
  mkdir -p "$PG_DIR"
  local password_file="$PG_DIR/superuser-password"
  head -c 24 /dev/urandom | base64 >"$password_file"
  chown -R postgres:postgres "$PG_DIR" 2>/dev/null || true
  chmod 700 "$PG_DIR"
  say "initializing a cluster in $DATA"
  as_postgres "$bin/initdb" -D "$DATA" -U postgres --pwfile="$password_file" \
    --auth-local=trust --auth-host=scram-sha-256 --encoding=UTF8 --locale=C.UTF-8 >"$PG_DIR/initdb.log" 2>&1 || {
    cat "$PG_DIR/initdb.log" >&2
    exit 1
  }
  # Loopback only; the Unix socket lives in the cluster directory so nothing else's socket is touched.
  as_postgres "$bin/pg_ctl" -D "$DATA" -l "$LOG" -w -t 60 \
    -o "-c listen_addresses=127.0.0.1 -p $PG_PORT -k $PG_DIR -c max_connections=200 -c fsync=on" start >&2 || {
    cat "$LOG" >&2
    exit 1
  }
  say "creating role $PG_ROLE and database $PG_DATABASE"
  as_postgres "$bin/psql" -h "$PG_DIR" -p "$PG_PORT" -U postgres -d postgres -v ON_ERROR_STOP=1 -q >&2 <<SQL
CREATE ROLE $PG_ROLE LOGIN CREATEDB PASSWORD '$PG_PASSWORD';
CREATE DATABASE $PG_DATABASE OWNER $PG_ROLE;
SQL
  say "ready on 127.0.0.1:$PG_PORT"
  echo "export MCPSIM_TEST_POSTGRES_URL='$URL'"
}

stop() {
  local bin
  if bin="$(bin_dir)" && [[ -d "$DATA" ]]; then
    as_postgres "$bin/pg_ctl" -D "$DATA" -m fast -w stop >&2 2>/dev/null || true
  fi
  rm -rf "$PG_DIR"
  say "stopped and removed $PG_DIR"
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  url) echo "export MCPSIM_TEST_POSTGRES_URL='$URL'" ;;
  *)
    echo "usage: bash .ci/postgres.sh start|stop|url" >&2
    exit 2
    ;;
esac
