#!/usr/bin/env bash
# floe's local Confluent-compatible schema registry (deploy/local/README.md, "Local schema registry"):
# deploy/local/schema_registry.py, Python's standard library plus `protobuf`, state in memory.
#
#   deploy/local/schema-registry.sh install  the pinned serializers (schema-registry-requirements.txt) into the venv
#   deploy/local/schema-registry.sh start    install when missing, start, wait until it answers; a no-op when running
#   deploy/local/schema-registry.sh stop     TERM, then KILL after a bound; removes the pid file
#   deploy/local/schema-registry.sh status   one line; exit 0 only when it runs and answers (3 when stopped)
#   deploy/local/schema-registry.sh env      the exports for clients:  eval "$(deploy/local/schema-registry.sh env)"
#
# Settings (environment): FLOE_SCHEMA_REGISTRY_PORT (18081), FLOE_SCHEMA_REGISTRY_DATA (a JSON file keeping
# the state across restarts; default: memory only), FLOE_SCHEMA_REGISTRY_START_TIMEOUT (30 s to answer after
# launch), FLOE_VENV (the Python virtualenv it installs into and runs with: default .venv in the checkout,
# ignored by git and shared with scripts/test.sh; point it at a cache directory to keep the checkout clean).
# Listens on 127.0.0.1 only, without authentication (a test that needs basic auth, a bearer token
# or TLS starts its own instance: see the README). State under .local/schema-registry/: registry.pid,
# registry.port, registry.log, lock.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
here="$root/deploy/local"
state="$root/.local/schema-registry"
venv="${FLOE_VENV:-$root/.venv}"
requirements="$here/schema-registry-requirements.txt"

HOST=127.0.0.1
port="${FLOE_SCHEMA_REGISTRY_PORT:-18081}"
data="${FLOE_SCHEMA_REGISTRY_DATA:-}"
start_timeout="${FLOE_SCHEMA_REGISTRY_START_TIMEOUT:-30}"
stop_timeout=10
MARKER=schema_registry.py

say() { echo "schema-registry: $*"; }
die() { echo "schema-registry: $*" >&2; exit 1; }
marker() { echo "$MARKER"; }
# alive, running_pid, recorded_port, port_open, stop_one, lock
. "$here/service.sh"

case "$port" in '' | *[!0-9]*) die "FLOE_SCHEMA_REGISTRY_PORT must be a port number, not '$port'" ;; esac

# ---- install -------------------------------------------------------------------------------------
# Exit 0 when every `name==version` of the requirements file is installed in $venv at that version.
installed() {
  [ -x "$venv/bin/python" ] && "$venv/bin/python" - "$requirements" 2>/dev/null <<'EOF'
import re, sys
from importlib.metadata import version, PackageNotFoundError
for line in open(sys.argv[1]):
    m = re.match(r"\s*([A-Za-z0-9_.-]+)(\[[^\]]*\])?==(\S+)", line)
    if not m:
        continue
    try:
        if version(m.group(1)) != m.group(3):
            sys.exit(1)
    except PackageNotFoundError:
        sys.exit(1)
EOF
}

cmd_install() {
  if installed; then
    say "the pinned serializers are installed in $venv (FLOE_VENV)"
    return
  fi
  if [ ! -x "$venv/bin/python" ]; then
    command -v python3 >/dev/null || die "python3 is needed (to create $venv)"
    say "creating $venv"
    python3 -m venv "$venv"
  fi
  say "installing $(grep -v '^#' "$requirements" | tr '\n' ' ')into $venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check -r "$requirements" ||
    die "pip install -r $requirements failed (PyPI must be reachable)"
}

# ---- process -------------------------------------------------------------------------------------
# The registry's own pid and port file names in $state (service.sh).
NAME=registry

# GET / answers 200 {} on a Confluent registry.
answers() {
  "$venv/bin/python" - "http://$HOST:$1/" 2>/dev/null <<'EOF'
import sys, urllib.request
sys.exit(0 if urllib.request.urlopen(sys.argv[1], timeout=2).status == 200 else 1)
EOF
}

cmd_start() {
  lock 120
  cmd_install
  local pid log="$state/registry.log"
  if pid="$(running_pid "$NAME")"; then
    say "already running (pid $pid, http://$HOST:$(cat "$state/registry.port"))"
    return
  fi
  rm -f "$state/registry.pid" "$state/registry.port"
  if port_open "$port"; then
    die "port $port on $HOST is already in use by another process; free it or set FLOE_SCHEMA_REGISTRY_PORT"
  fi
  local args=(--host "$HOST" --port "$port")
  if [ -n "$data" ]; then args+=(--data "$data"); fi
  echo "=== $(date -u +%FT%TZ) start on $HOST:$port" >"$log"
  # Never the caller's credentials: the shared instance runs without authentication.
  nohup env -u FLOE_SCHEMA_REGISTRY_BASIC_AUTH -u FLOE_SCHEMA_REGISTRY_BEARER_TOKEN \
    "$venv/bin/python" "$here/schema_registry.py" "${args[@]}" >>"$log" 2>&1 </dev/null 9>&- &
  pid=$!
  echo "$pid" >"$state/registry.pid"
  echo "$port" >"$state/registry.port"
  local deadline=$((SECONDS + start_timeout))
  until answers "$port"; do
    if ! alive "$pid"; then
      rm -f "$state/registry.pid" "$state/registry.port"
      echo "---- last lines of $log ----" >&2
      tail -n 30 "$log" >&2 || true
      die "exited during start-up (log: $log)"
    fi
    if [ "$SECONDS" -ge "$deadline" ]; then
      cmd_stop_unlocked >/dev/null
      die "did not answer on http://$HOST:$port within ${start_timeout}s (log: $log)"
    fi
    sleep 0.1
  done
  say "started (pid $pid, http://$HOST:$port, state ${data:-in memory}, log $log)"
}

cmd_stop_unlocked() { stop_one "$NAME"; }

cmd_stop() {
  lock 120
  cmd_stop_unlocked
}

cmd_status() {
  local pid p
  if pid="$(running_pid "$NAME")"; then
    p="$(cat "$state/registry.port")"
    if answers "$p"; then
      echo "schema-registry: running (pid $pid) at http://$HOST:$p"
      return 0
    fi
    echo "schema-registry: running (pid $pid) but not answering at http://$HOST:$p (log: $state/registry.log)"
    return 1
  fi
  echo "schema-registry: stopped"
  return 3
}

cmd_env() {
  cat <<EOF
export FLOE_TEST_SCHEMA_REGISTRY_URL=http://$HOST:$(recorded_port "$NAME" "$port")
export FLOE_TEST_SCHEMA_REGISTRY_SERVER=$here/schema_registry.py
EOF
}

case "${1:-}" in
  install)
    lock 120
    cmd_install
    ;;
  start) cmd_start ;;
  stop) cmd_stop ;;
  status) cmd_status ;;
  env) cmd_env ;;
  *)
    echo "usage: $0 install|start|stop|status|env" >&2
    exit 2
    ;;
esac
