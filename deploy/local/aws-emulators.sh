#!/usr/bin/env bash
# floe's local AWS emulators (deploy/local/README.md):
#   moto      patched moto server (deploy/local/moto_server.py): Kinesis, DynamoDB, S3, S3 Tables, Glue, ...
#   kinesalite  a second Kinesis (kinesalite 3.3.3): its own sequence numbers and resharding
#
#   deploy/local/aws-emulators.sh start    install what is missing, start both, wait until they answer
#   deploy/local/aws-emulators.sh stop     stop both (TERM, then KILL after a bound)
#   deploy/local/aws-emulators.sh status   one line each; exit 0 only when both run and answer
#   deploy/local/aws-emulators.sh env      the exports for clients:  eval "$(deploy/local/aws-emulators.sh env)"
#
# Settings (environment): FLOE_MOTO_PORT (5056), FLOE_KINESALITE_PORT (4567),
# FLOE_EMULATOR_START_TIMEOUT (60 s to answer after launch). Both listen on 127.0.0.1 only.
# State under .local/emulators/: NAME.pid, NAME.port, NAME.log. Installs: .venv (moto, boto3) and
# .local/node (kinesalite), both inside the repository.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
here="$root/deploy/local"
state="$root/.local/emulators"
venv="$root/.venv"
node_prefix="$root/.local/node"

MOTO_VERSION=5.2.1
BOTO3_VERSION=1.43.11 # a boto3 whose botocore models moto 5.2.1's response serializer handles (smoke.py passes)
KINESALITE_VERSION=3.3.3
HOST=127.0.0.1
moto_port="${FLOE_MOTO_PORT:-5056}"
kinesalite_port="${FLOE_KINESALITE_PORT:-4567}"
start_timeout="${FLOE_EMULATOR_START_TIMEOUT:-60}"
stop_timeout=10

say() { echo "aws-emulators: $*"; }
die() { echo "aws-emulators: $*" >&2; exit 1; }

# ---- install -------------------------------------------------------------------------------------
install_python() {
  if [ ! -x "$venv/bin/python" ]; then
    command -v python3 >/dev/null || die "python3 is needed (to create $venv)"
    say "creating $venv"
    python3 -m venv "$venv"
  fi
  if ! "$venv/bin/python" - "$MOTO_VERSION" "$BOTO3_VERSION" 2>/dev/null <<'EOF'
import sys, boto3, flask, flask_cors, moto
sys.exit(0 if (moto.__version__, boto3.__version__) == (sys.argv[1], sys.argv[2]) else 1)
EOF
  then
    say "installing moto[server]==$MOTO_VERSION boto3==$BOTO3_VERSION into $venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check \
      "moto[server]==$MOTO_VERSION" "boto3==$BOTO3_VERSION" ||
      die "pip install of moto[server]==$MOTO_VERSION failed (PyPI must be reachable)"
  fi
}

install_node() {
  local pkg="$node_prefix/node_modules/kinesalite/package.json"
  if [ -f "$pkg" ] && grep -q "\"version\": \"$KINESALITE_VERSION\"" "$pkg"; then
    return
  fi
  command -v node >/dev/null || die "node is needed for kinesalite (Node.js 20 works)"
  command -v npm >/dev/null || die "npm is needed to install kinesalite"
  say "installing kinesalite@$KINESALITE_VERSION into $node_prefix"
  mkdir -p "$node_prefix"
  npm install --prefix "$node_prefix" --no-audit --no-fund --loglevel=error "kinesalite@$KINESALITE_VERSION" >&2 ||
    die "npm install of kinesalite@$KINESALITE_VERSION failed (the npm registry must be reachable)"
}

# ---- processes -----------------------------------------------------------------------------------
# NAME -> the text its command line must contain (so a recycled pid is never taken for ours).
marker() { case "$1" in moto) echo moto_server.py ;; kinesalite) echo kinesalite.js ;; esac; }

# A process that has exited but is not reaped yet (a zombie, e.g. under a PID 1 that reaps slowly) is not alive.
alive() {
  kill -0 "$1" 2>/dev/null || return 1
  local st
  st="$(sed -n 's/^State:[[:space:]]*\([A-Z]\).*/\1/p' "/proc/$1/status" 2>/dev/null)"
  [ "$st" != Z ]
}

# Prints the pid of NAME when it is ours and alive; fails otherwise.
running_pid() {
  local name="$1" pid
  [ -f "$state/$name.pid" ] || return 1
  pid="$(cat "$state/$name.pid" 2>/dev/null)" || return 1
  [ -n "$pid" ] && alive "$pid" || return 1
  tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q "$(marker "$name")" || return 1
  echo "$pid"
}

recorded_port() {
  local name="$1" default="$2"
  if running_pid "$name" >/dev/null && [ -s "$state/$name.port" ]; then cat "$state/$name.port"; else echo "$default"; fi
}

port_open() { (exec 3<>"/dev/tcp/$HOST/$1") 2>/dev/null; }

# Does NAME answer HTTP on PORT? moto: its dashboard answers 200; kinesalite: any HTTP status.
answers() {
  local name="$1" port="$2" code
  if command -v curl >/dev/null; then
    code="$(curl -s -o /dev/null -m 2 -w '%{http_code}' "http://$HOST:$port/moto-api/" || true)"
  else
    code="$(python3 - "http://$HOST:$port/moto-api/" <<'EOF' 2>/dev/null || true
import sys, urllib.request, urllib.error
try:
    print(urllib.request.urlopen(sys.argv[1], timeout=2).status)
except urllib.error.HTTPError as e:
    print(e.code)
EOF
)"
  fi
  case "$name" in
    moto) [ "$code" = 200 ] ;;
    kinesalite) [ -n "$code" ] && [ "$code" != 000 ] ;;
  esac
}

log_tail() { echo "---- last lines of $1 ----" >&2; tail -n 30 "$1" >&2 || true; echo "----" >&2; }

launch() {
  local name="$1" port="$2" pid log="$state/$1.log"
  shift 2
  if pid="$(running_pid "$name")"; then
    say "$name already running (pid $pid, http://$HOST:$(cat "$state/$name.port"))"
    return
  fi
  rm -f "$state/$name.pid" "$state/$name.port"
  if port_open "$port"; then
    die "$name: port $port on $HOST is already in use by another process; free it or set $(port_var "$name")"
  fi
  echo "=== $(date -u +%FT%TZ) start $name on $HOST:$port" >"$log"
  nohup "$@" >>"$log" 2>&1 </dev/null 9>&- & # 9: the lock; the emulator must not hold it
  pid=$!
  echo "$pid" >"$state/$name.pid"
  echo "$port" >"$state/$name.port"
  local deadline=$((SECONDS + start_timeout))
  until answers "$name" "$port"; do
    if ! alive "$pid"; then
      rm -f "$state/$name.pid" "$state/$name.port"
      log_tail "$log"
      die "$name exited during start-up (log: $log)"
    fi
    if [ "$SECONDS" -ge "$deadline" ]; then
      log_tail "$log"
      stop_one "$name" >/dev/null
      die "$name did not answer on http://$HOST:$port within ${start_timeout}s (log: $log)"
    fi
    sleep 0.1
  done
  say "$name started (pid $pid, http://$HOST:$port, log $log)"
}

port_var() { case "$1" in moto) echo FLOE_MOTO_PORT ;; kinesalite) echo FLOE_KINESALITE_PORT ;; esac; }

stop_one() {
  local name="$1" pid
  if ! pid="$(running_pid "$name")"; then
    rm -f "$state/$name.pid" "$state/$name.port"
    say "$name not running"
    return
  fi
  kill -TERM "$pid" 2>/dev/null || true
  local deadline=$((SECONDS + stop_timeout))
  while alive "$pid" && [ "$SECONDS" -lt "$deadline" ]; do sleep 0.1; done
  if alive "$pid"; then
    say "$name (pid $pid) still running ${stop_timeout}s after TERM; sending KILL"
    kill -KILL "$pid" 2>/dev/null || true
    while alive "$pid"; do sleep 0.1; done
  fi
  rm -f "$state/$name.pid" "$state/$name.port"
  say "$name stopped (pid $pid)"
}

# One start/stop at a time per checkout (two test runs starting together must not race).
lock() {
  mkdir -p "$state"
  if command -v flock >/dev/null; then
    exec 9>"$state/lock"
    flock -w 300 9 || die "another aws-emulators.sh holds $state/lock"
  fi
}

cmd_start() {
  lock
  install_python
  install_node
  launch moto "$moto_port" \
    "$venv/bin/python" "$here/moto_server.py" --host "$HOST" --port "$moto_port"
  launch kinesalite "$kinesalite_port" \
    env NODE_PATH="$node_prefix/node_modules" node "$here/kinesalite.js" --host "$HOST" --port "$kinesalite_port" \
    --shardLimit 100 --createStreamMs 50 --deleteStreamMs 50 --updateStreamMs 50
}

cmd_stop() {
  lock
  stop_one moto
  stop_one kinesalite
}

cmd_status() {
  local name pid port ok=0
  for name in moto kinesalite; do
    if pid="$(running_pid "$name")"; then
      port="$(cat "$state/$name.port")"
      if answers "$name" "$port"; then
        echo "$name: running (pid $pid) at http://$HOST:$port"
      else
        echo "$name: running (pid $pid) but not answering at http://$HOST:$port (log: $state/$name.log)"
        ok=1
      fi
    else
      echo "$name: stopped"
      ok=3
    fi
  done
  return "$ok"
}

cmd_env() {
  cat <<EOF
export FLOE_TEST_AWS_ENDPOINT=http://$HOST:$(recorded_port moto "$moto_port")
export FLOE_TEST_KINESALITE_ENDPOINT=http://$HOST:$(recorded_port kinesalite "$kinesalite_port")
export AWS_ACCESS_KEY_ID=test
export AWS_SECRET_ACCESS_KEY=test
export AWS_REGION=us-east-1
export AWS_DEFAULT_REGION=us-east-1
export AWS_EC2_METADATA_DISABLED=true
# moto's account for these credentials: 123456789012
EOF
}

case "${1:-}" in
  start) cmd_start ;;
  stop) cmd_stop ;;
  status) cmd_status ;;
  env) cmd_env ;;
  *)
    echo "usage: $0 start|stop|status|env" >&2
    exit 2
    ;;
esac
