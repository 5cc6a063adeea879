#!/usr/bin/env bash
# floe's local AWS emulators (deploy/local/README.md):
#   moto      patched moto server (deploy/local/moto_server.py): Kinesis, DynamoDB, S3, S3 Tables, Glue, ...
#   kinesalite  a second Kinesis (kinesalite 3.3.3): its own sequence numbers and resharding
#   kinesis-efo enhanced fan-out (deploy/local/kinesis-efo/kinesis-efo.js) over TLS, in front of that
#               kinesalite (upstream mode): the same streams, plus consumers and SubscribeToShard
#
#   deploy/local/aws-emulators.sh start    install what is missing, start all three, wait until they answer
#   deploy/local/aws-emulators.sh stop     stop all three (TERM, then KILL after a bound)
#   deploy/local/aws-emulators.sh status   one line each; exit 0 only when all three run and answer
#   deploy/local/aws-emulators.sh env      the exports for clients:  eval "$(deploy/local/aws-emulators.sh env)"
#
# Settings (environment): FLOE_MOTO_PORT (5056), FLOE_KINESALITE_PORT (4567), FLOE_KINESIS_EFO_PORT
# (4568), FLOE_EMULATOR_START_TIMEOUT (60 s to answer after launch). All listen on 127.0.0.1 only.
# State under .local/emulators/: NAME.pid, NAME.port, NAME.log, and kinesis-efo-tls/ (its CA and
# server certificate, generated once and reused). Installs: .venv (moto, boto3) and .local/node
# (kinesalite), both inside the repository; kinesis-efo needs only node.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
here="$root/deploy/local"
state="$root/.local/emulators"
venv="${FLOE_VENV:-$root/.venv}"  # FLOE_VENV: another virtualenv (deploy/local/README.md)
node_prefix="$root/.local/node"

MOTO_VERSION=5.2.1
BOTO3_VERSION=1.43.11 # a boto3 whose botocore models moto 5.2.1's response serializer handles (smoke.py passes)
KINESALITE_VERSION=3.3.3
HOST=127.0.0.1
moto_port="${FLOE_MOTO_PORT:-5056}"
kinesalite_port="${FLOE_KINESALITE_PORT:-4567}"
efo_port="${FLOE_KINESIS_EFO_PORT:-4568}"
efo_tls_dir="$state/kinesis-efo-tls"
# kinesis-efo: every subscription ends after 20 s, so every test that reads with EFO also crosses
# re-subscriptions; a re-subscription is refused for 2 s after the previous one (AWS: 5 s; shorter for
# the tests' speed, the takeover semantics are the same).
EFO_SUBSCRIPTION_SECONDS=20
EFO_RESUBSCRIBE_COOLDOWN_MS=2000
start_timeout="${FLOE_EMULATOR_START_TIMEOUT:-60}"
stop_timeout=10

say() { echo "aws-emulators: $*"; }
die() { echo "aws-emulators: $*" >&2; exit 1; }
# alive, running_pid, recorded_port, port_open, stop_one, lock
. "$here/service.sh"

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
marker() { case "$1" in moto) echo moto_server.py ;; kinesalite) echo kinesalite.js ;; kinesis-efo) echo kinesis-efo.js ;; esac; }

scheme() { case "$1" in kinesis-efo) echo https ;; *) echo http ;; esac; }

# Does NAME answer HTTP on PORT? moto: its dashboard answers 200; kinesalite and kinesis-efo (over
# https, its certificate not checked here: the CA is its own): any HTTP status.
answers() {
  local name="$1" port="$2" code url
  url="$(scheme "$name")://$HOST:$port/moto-api/"
  if command -v curl >/dev/null; then
    code="$(curl -k -s -o /dev/null -m 2 -w '%{http_code}' "$url" || true)"
  else
    code="$(python3 - "$url" <<'EOF' 2>/dev/null || true
import ssl, sys, urllib.request, urllib.error
try:
    print(urllib.request.urlopen(sys.argv[1], timeout=2, context=ssl._create_unverified_context()).status)
except urllib.error.HTTPError as e:
    print(e.code)
EOF
)"
  fi
  case "$name" in
    moto) [ "$code" = 200 ] ;;
    kinesalite | kinesis-efo) [ -n "$code" ] && [ "$code" != 000 ] ;;
  esac
}

log_tail() { echo "---- last lines of $1 ----" >&2; tail -n 30 "$1" >&2 || true; echo "----" >&2; }

launch() {
  local name="$1" port="$2" pid log="$state/$1.log"
  shift 2
  if pid="$(running_pid "$name")"; then
    say "$name already running (pid $pid, $(scheme "$name")://$HOST:$(cat "$state/$name.port"))"
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
      die "$name did not answer on $(scheme "$name")://$HOST:$port within ${start_timeout}s (log: $log)"
    fi
    sleep 0.1
  done
  say "$name started (pid $pid, $(scheme "$name")://$HOST:$port, log $log)"
}

port_var() { case "$1" in moto) echo FLOE_MOTO_PORT ;; kinesalite) echo FLOE_KINESALITE_PORT ;; kinesis-efo) echo FLOE_KINESIS_EFO_PORT ;; esac; }

cmd_start() {
  lock 300
  install_python
  install_node
  launch moto "$moto_port" \
    "$venv/bin/python" "$here/moto_server.py" --host "$HOST" --port "$moto_port"
  launch kinesalite "$kinesalite_port" \
    env NODE_PATH="$node_prefix/node_modules" node "$here/kinesalite.js" --host "$HOST" --port "$kinesalite_port" \
    --shardLimit 100 --createStreamMs 50 --deleteStreamMs 50 --updateStreamMs 50
  # In front of the kinesalite just started (or already running): no kinesalite of its own, no npm install.
  if [ ! -s "$efo_tls_dir/server.pem" ] && ! command -v openssl >/dev/null; then
    die "openssl is needed once, to generate kinesis-efo's CA and server certificate in $efo_tls_dir"
  fi
  launch kinesis-efo "$efo_port" \
    env FLOE_EFO_TLS=1 FLOE_EFO_TLS_DIR="$efo_tls_dir" \
    FLOE_EFO_SUBSCRIPTION_SECONDS="$EFO_SUBSCRIPTION_SECONDS" FLOE_EFO_RESUBSCRIBE_COOLDOWN_MS="$EFO_RESUBSCRIBE_COOLDOWN_MS" \
    node "$here/kinesis-efo/kinesis-efo.js" --host "$HOST" --port "$efo_port" \
    --upstream "http://$HOST:$(recorded_port kinesalite "$kinesalite_port")"
}

cmd_stop() {
  lock 300
  stop_one kinesis-efo # before its upstream
  stop_one kinesalite
  stop_one moto
}

cmd_status() {
  local name pid port ok=0
  for name in moto kinesalite kinesis-efo; do
    if pid="$(running_pid "$name")"; then
      port="$(cat "$state/$name.port")"
      if answers "$name" "$port"; then
        echo "$name: running (pid $pid) at $(scheme "$name")://$HOST:$port"
      else
        echo "$name: running (pid $pid) but not answering at $(scheme "$name")://$HOST:$port (log: $state/$name.log)"
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
export FLOE_TEST_KINESIS_EFO_ENDPOINT=https://$HOST:$(recorded_port kinesis-efo "$efo_port")
export FLOE_TEST_KINESIS_EFO_CA=$efo_tls_dir/ca.pem
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
