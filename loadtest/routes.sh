#!/usr/bin/env bash
# Routing by a field reads the source once (issue 43, item 5): a fleet of `floe run` workers
# delivers one topic into N tables by each record's `region` (`table = "{route}"`), on the mock
# broker (floe-mock-kafka), SQLite lease store and catalog. Half the records are produced before
# the workers start, half while they run (paced at --rate records/s); with --kill, one worker is
# SIGKILLed halfway through the second half and started again 30 s later.
#
# Prints the bytes of record keys and payloads produced, the bytes every worker's Kafka consumer
# fetched (floe_kafka_fetched_bytes_total of the routed channel, scraped every second from each
# worker; a SIGKILLed worker's last scrape), their ratio beside what a consumer per table (the
# design before) fetches, records read by all members over records produced (each member
# decodes every record: N), how long until every table held its records, and exactly-once per
# table by PyIceberg. A benchmark, not a test: it fails when a worker dies or a table is wrong.
#
#   loadtest/routes.sh [--routes N] [--workers W] [--partitions P] [--records R] [--rate S] [--kill]
#                      [--deadline-seconds D] [--profile release|debug] [--dir DIR]
#
# Defaults: 20 routes, 3 workers, 12 partitions, 200,000 records, 2,500 records/s, 600 s deadline, release build
# (cargo build --release --bins). Figures in docs/routing.md ("Cost").
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
# shellcheck source=loadtest/lib.sh
. "$root/loadtest/lib.sh"

routes=20 workers=3 partitions=12 records=200000 rate=2500 deadline=600 profile=release workdir="" kill=no
while [ $# -gt 0 ]; do
  case "$1" in
    --routes) routes="$2"; shift 2 ;;
    --workers) workers="$2"; shift 2 ;;
    --partitions) partitions="$2"; shift 2 ;;
    --records) records="$2"; shift 2 ;;
    --rate) rate="$2"; shift 2 ;;
    --kill) kill=yes; shift ;;
    --deadline-seconds) deadline="$2"; shift 2 ;;
    --profile) profile="$2"; shift 2 ;;
    --dir) workdir="$2"; shift 2 ;;
    *) echo "routes.sh: unknown option $1" >&2; exit 2 ;;
  esac
done

lt_binaries routes "$profile"
lt_workdir routes "$workdir"
say "work directory $dir: $routes routes, $workers workers, $partitions partitions, $records records"
lt_start_mock_kafka "$dir/broker.log" events "$partitions"

pids=() ports=() scraper=""
cleanup() {
  local p
  for p in "${pids[@]}"; do
    if [ -n "$p" ] && kill -0 "$p" 2>/dev/null; then kill -TERM "$p" 2>/dev/null || true; fi
  done
  for p in "${pids[@]}"; do [ -n "$p" ] && wait "$p" 2>/dev/null || true; done
  [ -n "$scraper" ] && kill "$scraper" 2>/dev/null || true
  kill "$broker_pid" 2>/dev/null || true
}
trap cleanup EXIT
trap 'exit 130' INT TERM

cat >"$dir/region.schema.json" <<'EOF'
{"type":"object","properties":{"id":{"type":"integer"},"event_time":{"type":"string","format":"date-time"},"value":{"type":"number"},"region":{"type":"string"}},"required":["id","event_time","value","region"]}
EOF
route_map=""
for k in $(seq 0 $((routes - 1))); do
  route_map+="$(printf 'r%02d = "t%02d", ' "$k" "$k")"
done
route_map="{ ${route_map%, } }"

config() { # worker id, metrics port
  cat <<EOF
[worker]
id = "$1"
shutdown_timeout = "30s"
metrics_address = "127.0.0.1:$2"

[lease_store]
kind = "sqlite"
path = "$dir/leases.sqlite"
lease_duration = "10s"

[[channel]]
name = "routed"
  [channel.source]
  kind = "kafka"
  bootstrap_servers = "$bootstrap"
  topic = "events"
  initial_position = "earliest"
  [channel.record]
  format = "json"
  [channel.schema]
  file = "$dir/region.schema.json"
  [channel.destination]
  kind = "iceberg"
  namespace = "routed"
  table = "{route}"
  route_field = "region"
  routes = $route_map
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
}

free_port() { "$py" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'; }
start_worker() { # index
  local i="$1"
  config "w$i" "${ports[$i]}" >"$dir/w$i.toml"
  RUST_LOG=info "$floe" run --config "$dir/w$i.toml" >>"$dir/w$i.log" 2>&1 &
  pids[i]=$!
}

half=$((records / 2))
produce() { # start, count, rate
  "$py" "$root/loadtest/routes_watch.py" produce --bootstrap "$bootstrap" --topic events \
    --start "$1" --records "$2" --routes "$routes" --partitions "$partitions" --rate "$3"
}
bytes1=$(produce 0 "$half" 0)
say "produced $half records ($bytes1 bytes of keys and payloads)"

urls=()
for i in $(seq 1 "$workers"); do
  ports[i]=$(free_port)
  urls+=("http://127.0.0.1:${ports[$i]}/metrics")
  start_worker "$i"
done
say "started $workers workers"
"$py" "$root/loadtest/routes_watch.py" scrape --channel routed --state "$dir/scrape.json" "${urls[@]}" &
scraper=$!
started=$SECONDS
produce "$half" "$((records - half))" "$rate" >"$dir/bytes2" &
producer=$!
if [ "$kill" = yes ]; then
  sleep "$(( (records - half) / rate / 2 ))"
  kill -KILL "${pids[1]}"
  wait "${pids[1]}" 2>/dev/null || true
  say "w1 SIGKILLed halfway through the second half; starting it again in 30 s"
  sleep 30
  start_worker 1
fi
wait "$producer"
bytes2=$(cat "$dir/bytes2")
say "produced $((records - half)) more records at $rate/s ($bytes2 bytes)"
took=$("$py" "$root/loadtest/routes_watch.py" wait --catalog "$dir/catalog.sqlite" \
  --warehouse "$dir/warehouse" --routes "$routes" --records "$records" --deadline-seconds "$deadline")
say "every table held its records $((SECONDS - started)) s after the workers started (waited $took s)"
sleep 3 # a last scrape of every worker
for i in $(seq 1 "$workers"); do
  if ! kill -0 "${pids[$i]}" 2>/dev/null; then say "w$i died: $dir/w$i.log"; exit 1; fi
done
"$py" "$root/loadtest/routes_watch.py" verify --state "$dir/scrape.json" \
  --catalog "$dir/catalog.sqlite" --warehouse "$dir/warehouse" --records "$records" \
  --routes "$routes" --workers "$workers" --produced-bytes "$((bytes1 + bytes2))"
for i in $(seq 1 "$workers"); do
  say "w$i: $(grep -c ' ERROR ' "$dir/w$i.log" || true) ERROR lines, $(grep -c 'fetching the partition again' "$dir/w$i.log" || true) re-fetches ($dir/w$i.log)"
done
