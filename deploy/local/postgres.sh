#!/usr/bin/env bash
# floe's local PostgreSQL (deploy/local/README.md): Debian's PostgreSQL server (the `postgresql` package),
# one throw-away cluster on loopback, with role `floe` (password `floe`, LOGIN CREATEDB CREATEROLE: it may create the least-privilege roles of docs/operations.md) owning database `floe`.
#
#   deploy/local/postgres.sh start     install the server when missing, create the cluster the first time, start
#                                      it, wait until floe logs in; a no-op when it already runs
#   deploy/local/postgres.sh stop      fast shutdown (sessions are cut, data is kept); a no-op when stopped
#   deploy/local/postgres.sh restart   stop, then start the same cluster on the same port (an outage and recovery)
#   deploy/local/postgres.sh status    one line; exit 0 only when it runs and accepts connections, 1 otherwise
#   deploy/local/postgres.sh env       the exports for clients:  eval "$(deploy/local/postgres.sh env)"
#   deploy/local/postgres.sh psql ARG... psql as floe over 127.0.0.1, e.g.  psql -c 'select version()'
#
# Settings (environment): FLOE_PG_PORT (55432), FLOE_PG_DIR (the state directory, ${TMPDIR:-/tmp}/floe-postgres),
# FLOE_PG_START_TIMEOUT (60 s for the server to accept floe's login after launch), FLOE_PG_BIN (a directory
# holding initdb, pg_ctl, postgres, psql and pg_isready, instead of Debian's newest /usr/lib/postgresql/*/bin).
# TCP on 127.0.0.1 only, scram-sha-256 passwords; the unix socket is in the state directory and admits only the
# OS user running the server (peer), which the script uses to create floe. The credentials are for tests only.
# State in FLOE_PG_DIR: data/ (the cluster), postgres.log (initdb and the server), lock, .floe-postgres (marker).
# initdb and the server refuse to run as root: as root they run as the OS user `postgres`, which owns FLOE_PG_DIR.
set -euo pipefail

self="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/$(basename "${BASH_SOURCE[0]}")"
state="${FLOE_PG_DIR:-${TMPDIR:-/tmp}/floe-postgres}"
case "$state" in /*) ;; *) state="$PWD/$state" ;; esac # the server, the socket and `env` need it absolute
state="${state%/}"
data="$state/data"
log="$state/postgres.log"

HOST=127.0.0.1
port="${FLOE_PG_PORT:-55432}"
start_timeout="${FLOE_PG_START_TIMEOUT:-60}"
stop_timeout=60
DB_USER=floe
DB_PASSWORD=floe # test-only
DB_NAME=floe

say() { echo "postgres: $*"; }
die() { echo "postgres: $*" >&2; exit 1; }

case "$port" in '' | *[!0-9]*) die "FLOE_PG_PORT must be a port number, not '$port'" ;; esac

# libpq and the server read PG* variables (PGHOST, PGPORT, PGUSER, PGSSLMODE, PGDATA, ...): use none of the caller's.
for v in $(compgen -e); do
  case "$v" in PG*) unset "$v" ;; esac
done

if [ "$(id -u)" = 0 ]; then server_user=postgres; else server_user="$(id -un)"; fi

# Runs a command as the server's OS user, from the state directory (root's cwd may be closed to it).
as_server() {
  if [ "$(id -u)" = 0 ]; then
    (cd "$state" && runuser -u "$server_user" -- "$@")
  else
    (cd "$state" && "$@")
  fi
}

# ---- install -------------------------------------------------------------------------------------
has_server() { for t in initdb pg_ctl postgres psql pg_isready; do [ -x "$1/$t" ] || return 1; done; }

# Sets bin, the directory of the server's programs; fails when there is none. An existing cluster needs
# its own major version (data/PG_VERSION); a new one gets the newest installed.
find_bin() {
  if [ -n "${FLOE_PG_BIN:-}" ]; then
    has_server "$FLOE_PG_BIN" || die "FLOE_PG_BIN=$FLOE_PG_BIN lacks one of initdb, pg_ctl, postgres, psql, pg_isready"
    bin="$FLOE_PG_BIN"
    return
  fi
  local major="" d
  major="$(cat "$data/PG_VERSION" 2>/dev/null)" || true
  if [ -n "$major" ]; then
    has_server "/usr/lib/postgresql/$major/bin" ||
      die "the cluster in $data is PostgreSQL $major, whose server is not installed (/usr/lib/postgresql/$major/bin): install postgresql-$major, or remove $state for a new cluster"
    bin="/usr/lib/postgresql/$major/bin"
    return
  fi
  bin=""
  while read -r d; do
    if has_server "$d"; then bin="$d"; fi
  done < <(printf '%s\n' /usr/lib/postgresql/*/bin | sort -V)
  [ -n "$bin" ]
}

install_server() {
  find_bin && return
  [ "$(id -u)" = 0 ] ||
    die "no PostgreSQL server (initdb, pg_ctl under /usr/lib/postgresql/*/bin): run this once as root to apt-get install postgresql, or install it and set FLOE_PG_BIN"
  command -v apt-get >/dev/null || die "no PostgreSQL server and no apt-get: install PostgreSQL and set FLOE_PG_BIN to its bin directory"
  say "installing Debian's postgresql (apt-get install -y --no-install-recommends postgresql)"
  # The first try uses the package lists as they are; on failure (e.g. stale lists), update them once.
  (DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends postgresql >&2 ||
    (apt-get update -q >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends postgresql >&2)) ||
    die "apt-get install postgresql failed (a Debian mirror must be reachable)"
  find_bin || die "apt-get installed postgresql, but there is no initdb/pg_ctl under /usr/lib/postgresql/*/bin"
}

# As root: the server's OS user (Debian's package creates `postgres`; a bare system user does too).
ensure_server_user() {
  [ "$(id -u)" = 0 ] || return 0
  command -v runuser >/dev/null || die "runuser (util-linux) is needed to run PostgreSQL as the OS user $server_user"
  getent passwd "$server_user" >/dev/null && return
  say "creating the system user $server_user"
  useradd --system --user-group --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin "$server_user" ||
    die "could not create the system user $server_user"
}

# ---- state directory -----------------------------------------------------------------------------
# Creates the state directory, or accepts an existing one only when it is empty or already ours (the
# script chowns and chmods it: a mistyped FLOE_PG_DIR must not take over some other directory).
prepare_state() {
  # The server's socket is STATE/.s.PGSQL.PORT, and a socket path has at most 107 bytes.
  [ $((${#state} + 10 + ${#port})) -le 107 ] ||
    die "$state is too long for the server's unix socket (at most 107 bytes with /.s.PGSQL.$port): set a shorter FLOE_PG_DIR"
  if [ -d "$state" ] && [ ! -e "$state/.floe-postgres" ] && [ -n "$(ls -A "$state" 2>/dev/null)" ]; then
    die "FLOE_PG_DIR=$state exists, is not empty and is not a floe-postgres state directory (no .floe-postgres)"
  fi
  mkdir -p "$state"
  : >>"$state/.floe-postgres"
  : >>"$log"
  if [ "$(id -u)" = 0 ]; then chown "$server_user:" "$state" "$state/.floe-postgres" "$log"; fi
  chmod 700 "$state"
  as_server test -w "$state" ||
    die "the OS user $server_user cannot write $state (is a parent directory private to root?): set FLOE_PG_DIR, e.g. under /tmp"
}

# One start/stop at a time per state directory (two test runs starting together must not race).
lock() {
  prepare_state
  if command -v flock >/dev/null; then
    exec 9>"$state/lock"
    flock -w 300 9 || die "another postgres.sh holds $state/lock"
  fi
}

# ---- cluster -------------------------------------------------------------------------------------
# A process's state letter (R, S, Z, ...); fails when it does not exist or there is no /proc.
proc_state() { sed -n 's/^State:[[:space:]]*\([A-Z]\).*/\1/p' "/proc/$1/status" 2>/dev/null; }

# pg_ctl status takes a killed server that PID 1 has not reaped yet (a zombie) for a running one: it is not.
running() {
  [ -f "$data/PG_VERSION" ] && as_server "$bin/pg_ctl" status -D "$data" >/dev/null 2>&1 || return 1
  [ -d /proc/self ] || return 0 # no /proc (e.g. macOS): trust pg_ctl
  local st
  st="$(proc_state "$(server_pid)")" || return 1
  [ -n "$st" ] && [ "$st" != Z ]
}

# A killed server that is still a zombie keeps its postmaster.pid valid: the next server refuses to start
# ("lock file postmaster.pid already exists") until PID 1 reaps it, so wait for that.
wait_reaped() {
  local pid limit=$((SECONDS + start_timeout))
  pid="$(server_pid)"
  [ -n "$pid" ] || return 0
  while [ "$(proc_state "$pid")" = Z ]; do
    [ "$SECONDS" -lt "$limit" ] ||
      die "the previous server (pid $pid) is a zombie that PID 1 has not reaped within ${start_timeout}s"
    sleep 0.1
  done
}

# postmaster.pid: line 1 the pid, line 4 the port.
server_pid() { sed -n 1p "$data/postmaster.pid" 2>/dev/null || true; }
server_port() {
  local p
  p="$(sed -n 4p "$data/postmaster.pid" 2>/dev/null)" || true
  echo "${p:-$port}"
}
# The port of the running server, else FLOE_PG_PORT (55432).
running_port() { if running; then server_port; else echo "$port"; fi; }

log_tail() { echo "---- last lines of $log ----" >&2; tail -n 30 "$log" >&2 || true; echo "----" >&2; }

port_open() { (exec 3<>"/dev/tcp/$HOST/$1") 2>/dev/null; }

init_cluster() {
  local new="$state/data.new"
  rm -rf "$new" # left by an initdb that was killed
  say "creating a PostgreSQL $("$bin/pg_ctl" --version | sed 's/.*) //') cluster in $data"
  echo "=== $(date -u +%FT%TZ) initdb $data" >>"$log"
  as_server "$bin/initdb" -D "$new" -U "$server_user" --auth-local=peer --auth-host=scram-sha-256 \
    -E UTF8 --no-locale --no-sync >>"$log" 2>&1 || { log_tail; die "initdb failed (log: $log)"; }
  echo "include 'floe.conf'" | as_server tee -a "$new/postgresql.conf" >/dev/null
  mv "$new" "$data" # only a complete cluster is ever at $data
}

# Rewritten at every start, so the cluster always has this script's settings and FLOE_PG_PORT.
write_config() {
  as_server tee "$data/floe.conf" >/dev/null <<EOF
# Written by deploy/local/postgres.sh at every start: edits here are lost.
listen_addresses = '$HOST'
port = $port
unix_socket_directories = '${state//\'/\'\'}'
max_connections = 200
password_encryption = 'scram-sha-256'
# A throw-away test cluster needs no durability: without fsync and synchronous commit it is much faster on
# slow disks. A clean stop (stop, restart) keeps everything; kill -9 of the server can lose the last commits,
# and a crash of the machine can corrupt the cluster (remove FLOE_PG_DIR then).
fsync = off
synchronous_commit = off
EOF
  as_server tee "$data/pg_hba.conf" >/dev/null <<EOF
# Written by deploy/local/postgres.sh at every start: edits here are lost.
# The socket (in the state directory) admits the OS user running the server as the superuser of that name;
# TCP admits any role with its password (scram-sha-256), so a wrong password is refused.
# TYPE  DATABASE  USER  ADDRESS       METHOD
local   all       all                 peer
host    all       all   $HOST/32  scram-sha-256
EOF
}

# psql as the superuser over the socket (peer authentication).
super_psql() {
  as_server "$bin/psql" -X -q -v ON_ERROR_STOP=1 -h "$state" -p "$1" -U "$server_user" -d postgres "${@:2}"
}

# Creates role and database floe when missing (a cluster whose first start was interrupted lacks them).
ensure_floe() {
  local p="$1"
  if [ "$(super_psql "$p" -tAc "select 1 from pg_roles where rolname = '$DB_USER'")" != 1 ]; then
    say "creating role $DB_USER (LOGIN CREATEDB CREATEROLE, password $DB_PASSWORD)"
    super_psql "$p" -c "create role $DB_USER login createdb createrole password '$DB_PASSWORD'" || return 1
  else
    # Clusters made before the role could create roles (a test-only server).
    super_psql "$p" -qc "alter role $DB_USER createrole" || return 1
  fi
  if [ "$(super_psql "$p" -tAc "select 1 from pg_database where datname = '$DB_NAME'")" != 1 ]; then
    say "creating database $DB_NAME owned by $DB_USER"
    super_psql "$p" -c "create database $DB_NAME owner $DB_USER" || return 1
  fi
}

floe_logs_in() {
  [ "$(PGPASSWORD="$DB_PASSWORD" PGCONNECT_TIMEOUT=2 "$bin/psql" -X -q -tA -h "$HOST" -p "$1" -U "$DB_USER" \
    -d "$DB_NAME" -c 'select 1' 2>/dev/null)" = 1 ]
}

# Waits until the server accepts connections, creates floe when missing, and waits until floe logs in;
# gives up at $deadline (SECONDS), set before the launch.
wait_ready() {
  local p="$1"
  until "$bin/pg_isready" -q -h "$HOST" -p "$p" -t 2; do
    if ! running; then
      log_tail
      die "the server exited during start-up (log: $log)"
    fi
    if [ "$SECONDS" -ge "$deadline" ]; then
      log_tail
      die "the server did not accept connections on $HOST:$p within ${start_timeout}s (log: $log)"
    fi
    sleep 0.1
  done
  ensure_floe "$p" || { log_tail; die "could not create role and database $DB_NAME (log: $log)"; }
  until floe_logs_in "$p"; do
    if [ "$SECONDS" -ge "$deadline" ]; then
      log_tail
      die "$DB_USER could not log in on $HOST:$p within ${start_timeout}s (log: $log)"
    fi
    sleep 0.1
  done
}

start_cluster() {
  deadline=$((SECONDS + start_timeout))
  if running; then
    local p
    p="$(server_port)"
    wait_ready "$p"
    say "already running (pid $(server_pid), $HOST:$p, data $data)"
    return
  fi
  if port_open "$port"; then
    die "port $port on $HOST is already in use by another process; free it or set FLOE_PG_PORT"
  fi
  [ -f "$data/PG_VERSION" ] || init_cluster
  wait_reaped
  write_config
  echo "=== $(date -u +%FT%TZ) start on $HOST:$port" >>"$log"
  deadline=$((SECONDS + start_timeout)) # one bound for pg_ctl's wait, floe's creation and its login
  # -w: pg_ctl returns once the server is ready (or failed). 9: the lock; the server must not hold it.
  as_server "$bin/pg_ctl" start -D "$data" -l "$log" -s -w -t "$start_timeout" 9>&- ||
    { log_tail; die "the server did not start (log: $log)"; }
  wait_ready "$port"
  say "started (pid $(server_pid), $HOST:$port, data $data, log $log)"
}

stop_cluster() {
  if ! running; then
    say "not running"
    return
  fi
  local pid
  pid="$(server_pid)"
  echo "=== $(date -u +%FT%TZ) stop" >>"$log"
  if ! as_server "$bin/pg_ctl" stop -D "$data" -m fast -s -w -t "$stop_timeout" 9>&-; then
    say "still running ${stop_timeout}s after a fast shutdown; stopping it in immediate mode"
    as_server "$bin/pg_ctl" stop -D "$data" -m immediate -s -w -t "$stop_timeout" 9>&- ||
      die "could not stop the server (pid $pid, log: $log)"
  fi
  say "stopped (pid $pid)"
}

# ---- commands ------------------------------------------------------------------------------------
cmd_start() {
  ensure_server_user
  lock
  install_server
  start_cluster
}

cmd_stop() {
  if [ ! -f "$state/.floe-postgres" ] || ! find_bin; then
    say "not running"
    return
  fi
  lock
  stop_cluster
}

cmd_restart() {
  ensure_server_user
  lock
  install_server
  # The same port as now, unless FLOE_PG_PORT asks for another.
  if [ -z "${FLOE_PG_PORT:-}" ]; then port="$(running_port)"; fi
  stop_cluster
  start_cluster
}

cmd_status() {
  if ! find_bin; then
    echo "postgres: not installed (no initdb/pg_ctl under /usr/lib/postgresql/*/bin)"
    return 1
  fi
  if ! running; then
    echo "postgres: stopped (data $data)"
    return 1
  fi
  local p
  p="$(server_port)"
  if "$bin/pg_isready" -q -h "$HOST" -p "$p" -t 5; then
    echo "postgres: running (pid $(server_pid), PostgreSQL $(cat "$data/PG_VERSION")) at $HOST:$p, data $data"
  else
    echo "postgres: running (pid $(server_pid)) but not accepting connections at $HOST:$p (log: $log)"
    return 1
  fi
}

# FLOE_PG_DIR and FLOE_PG_PORT too, so that a test calling FLOE_TEST_POSTGRES_CTL acts on this same cluster.
cmd_env() {
  local p=$port
  if find_bin; then p="$(running_port)"; fi
  cat <<EOF
export FLOE_TEST_POSTGRES_URL=postgresql://$DB_USER:$DB_PASSWORD@$HOST:$p/$DB_NAME
export FLOE_TEST_POSTGRES_SQLALCHEMY_URL=postgresql+psycopg2://$DB_USER:$DB_PASSWORD@$HOST:$p/$DB_NAME
export FLOE_TEST_POSTGRES_CTL=$(printf %q "$self")
export FLOE_PG_DIR=$(printf %q "$state")
export FLOE_PG_PORT=$p
EOF
}

cmd_psql() {
  find_bin || die "no PostgreSQL installed: run $0 start first"
  local p
  p="$(running_port)"
  PGPASSWORD="$DB_PASSWORD" exec "$bin/psql" -X -h "$HOST" -p "$p" -U "$DB_USER" -d "$DB_NAME" "$@"
}

case "${1:-}" in
  start) cmd_start ;;
  stop) cmd_stop ;;
  restart) cmd_restart ;;
  status) cmd_status ;;
  env) cmd_env ;;
  psql) shift && cmd_psql "$@" ;;
  *)
    echo "usage: $0 start|stop|restart|status|env|psql [psql arguments]" >&2
    exit 2
    ;;
esac
