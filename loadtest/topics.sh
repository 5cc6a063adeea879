#!/usr/bin/env bash
# What a table per topic costs a worker (issue 43): one `floe run` worker, a channel with
# `table = "{topic}"` over N topics of P partitions on the mock broker (floe-mock-kafka), R JSON
# records per topic produced before the worker starts, SQLite lease store and catalog.
#
# Prints, while the worker delivers and once it is idle: its threads (/proc/<pid>/status
# Threads), open file descriptors (/proc/<pid>/fd), RSS, how long until every table held its R
# records (floe_rows_delivered_total of each member channel), catalog table loads per second
# over the last 30 s of the idle period (floe_catalog_table_loads_total), and lease-store rows
# written per renew_interval once idle (rows of floe_leases and floe_workers whose heartbeat
# changed between two snapshots one renew_interval apart). With --restart, the worker is then
# stopped (SIGTERM), R more records go to each topic and a worker starts again over the tables'
# checkpoints: the same figures once more (a restart opens every shard after checking its
# checkpoint). A benchmark, not a test: it fails only when the worker dies.
#
#   loadtest/topics.sh [--topics N] [--partitions P] [--records R] [--idle-seconds S]
#                      [--deadline-seconds D] [--restart] [--profile release|debug] [--dir DIR]
#
# Defaults: 100 topics, 4 partitions, 20 records, 60 s idle, 900 s deadline, release build
# (cargo build --release --bins). The issue's figure: --topics 1000 --partitions 4.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
# shellcheck source=loadtest/lib.sh
. "$root/loadtest/lib.sh"

topics=100 partitions=4 records=20 idle=60 deadline=900 profile=release workdir="" restart=no
while [ $# -gt 0 ]; do
  case "$1" in
    --topics) topics="$2"; shift 2 ;;
    --partitions) partitions="$2"; shift 2 ;;
    --records) records="$2"; shift 2 ;;
    --idle-seconds) idle="$2"; shift 2 ;;
    --deadline-seconds) deadline="$2"; shift 2 ;;
    --restart) restart=yes; shift ;;
    --profile) profile="$2"; shift 2 ;;
    --dir) workdir="$2"; shift 2 ;;
    *) echo "topics.sh: unknown option $1" >&2; exit 2 ;;
  esac
done

lt_binaries topics "$profile"
lt_workdir topics "$workdir"
say "work directory $dir: $topics topics x $partitions partitions, $records records each"

names=()
for i in $(seq 0 $((topics - 1))); do names+=("$(printf 't%04d' "$i")"); done
topic_args=()
for t in "${names[@]}"; do topic_args+=(--topic "$t"); done
coproc BROKER { exec "$mock_kafka" "${topic_args[@]}" --partitions "$partitions" --exit-on-stdin-eof 2>"$dir/broker.log"; }
broker_pid=$BROKER_PID
read -r line <&"${BROKER[0]}"
bootstrap="${line#bootstrap=}"
worker_pid=""
cleanup() {
  if [ -n "$worker_pid" ] && kill -0 "$worker_pid" 2>/dev/null; then
    kill -TERM "$worker_pid" 2>/dev/null || true
    wait "$worker_pid" 2>/dev/null || true
  fi
  kill "$broker_pid" 2>/dev/null || true
}
trap cleanup EXIT
trap 'exit 130' INT TERM

"$loadgen" file --output "$dir/records.ndjson" --records "$records" --bad-share 0 >/dev/null
"$py" "$root/loadtest/topics_watch.py" produce --bootstrap "$bootstrap" \
  --records "$dir/records.ndjson" --partitions "$partitions" "${names[@]}"
say "produced $records records to each of $topics topics"

port=$("$py" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()')
renew=3
cat >"$dir/worker.toml" <<EOF
[worker]
id = "w1"
shutdown_timeout = "30s"
metrics_address = "127.0.0.1:$port"

[lease_store]
kind = "sqlite"
path = "$dir/leases.sqlite"
lease_duration = "10s"
renew_interval = "${renew}s"

[[channel]]
name = "many"
  [channel.source]
  kind = "kafka"
  bootstrap_servers = "$bootstrap"
  topic_pattern = "t[0-9]+"
  initial_position = "earliest"
  [channel.record]
  format = "json"
  [channel.schema]
  file = "$root/config/event.schema.json"
  [channel.destination]
  kind = "iceberg"
  namespace = "many"
  table = "{topic}"
  max_tables = $topics
  partition_field = "event_time"
  data_freshness = "10s"
    [channel.destination.catalog]
    kind = "sql"
    name = "floe"
    uri = "$dir/catalog.sqlite"
    warehouse = "$dir/warehouse"
  [channel.dlq]
  kind = "local"
  path = "$dir/dlq"
EOF

# A worker of 1,000 member channels may open more files than a shell's default limit allows.
ulimit -n 20000 2>/dev/null || true
# One worker run: starts it, watches until every table held R more records and it was idle.
run_worker() {
  local log="$1"
  RUST_LOG=info "$floe" run --config "$dir/worker.toml" >"$log" 2>&1 &
  worker_pid=$!
  say "worker pid $worker_pid, metrics on 127.0.0.1:$port"
  "$py" "$root/loadtest/topics_watch.py" watch --pid "$worker_pid" \
    --metrics "http://127.0.0.1:$port/metrics" --leases "$dir/leases.sqlite" \
    --channel many --topics "$topics" --records "$records" --renew-seconds "$renew" \
    --idle-seconds "$idle" --deadline-seconds "$deadline"
  errors=$(grep -c ' ERROR ' "$log" || true)
  say "worker log: $errors ERROR lines ($log)"
}

run_worker "$dir/worker.log"
if [ "$restart" = yes ]; then
  kill -TERM "$worker_pid"
  wait "$worker_pid" || true
  worker_pid=""
  say "worker stopped; producing $records more records to each topic and starting it again"
  "$py" "$root/loadtest/topics_watch.py" produce --bootstrap "$bootstrap" \
    --records "$dir/records.ndjson" --partitions "$partitions" "${names[@]}"
  run_worker "$dir/worker-restart.log"
fi
