#!/usr/bin/env bash
# Kinesis read modes side by side on the local emulators (docs/kinesis.md): polling and enhanced
# fan-out read the same kind of stream, each by one `floe run` worker (SQLite leases and catalog,
# local warehouse, freshness 10 s), both through one EFO emulator started here in front of the
# emulators' kinesalite with AWS's polling limits on (5 GetRecords calls/s and 2 MiB/s per shard,
# summed over every polling consumer) and 5-minute subscriptions.
#
# Per mode, on a fresh stream of --shards shards:
# 1. Throughput: --records records (floe-loadgen) preloaded, then the worker starts and delivers
#    them: read records/s per worker and per shard (its floe_records_read_total reaching N,
#    counted from the worker's start), and the time from its start until the table holds them all.
# 2. Latency, with the worker caught up: floe-loadgen produces --rate records/s in the background
#    while --probes probe records are put one per second; a probe's latency runs from its
#    PutRecord to the commit whose checkpoint covers it (the catalog's metadata, polled every
#    50 ms): median, p90, max.
# 3. Sharing: during phase 2 a second polling consumer of the same stream (boto3, GetRecords on
#    every shard 3 times a second, as an application with its own iterators) counts its calls and
#    its ProvisionedThroughputExceeded answers; the emulator counts every GetRecords on the stream
#    (floe's included) and its refusals.
#
#   loadtest/kinesis_read_modes.sh [--records N] [--shards S] [--probes K] [--rate R] [--work DIR] [--quick]
#   --quick: 20,000 records, 2 shards, 10 probes.
# Needs the emulators (deploy/local/aws-emulators.sh start; started here if not running), node,
# openssl, the .venv (boto3). Binaries: $FLOE_BIN, $FLOE_LOADGEN_BIN, else $CARGO_TARGET_DIR/debug
# (or /release when built). Prints one line per figure and last `read modes: PASS`.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
n=100000 shards=4 probes=30 rate=500 work="" quick=0
while [ $# -gt 0 ]; do
  case "$1" in
    --records) n="$2"; shift 2 ;;
    --shards) shards="$2"; shift 2 ;;
    --probes) probes="$2"; shift 2 ;;
    --rate) rate="$2"; shift 2 ;;
    --work) work="$2"; shift 2 ;;
    --quick) quick=1; shift ;;
    -h|--help) sed -n '2,25p' "$0"; exit 0 ;;
    *) echo "read modes: unknown argument $1" >&2; exit 2 ;;
  esac
done
[ "$quick" = 0 ] || { n=20000 shards=2 probes=10; }
work="${work:-$(mktemp -d /tmp/floe-read-modes.XXXXXX)}"
mkdir -p "$work"
target="${CARGO_TARGET_DIR:-$root/target}"
profile=debug; [ -x "$target/release/floe" ] && profile=release
floe="${FLOE_BIN:-$target/$profile/floe}"
loadgen="${FLOE_LOADGEN_BIN:-$target/$profile/floe-loadgen}"
py="${FLOE_PYTHON:-$root/.venv/bin/python}"
for b in "$floe" "$loadgen" "$py"; do [ -x "$b" ] || { echo "read modes: $b is missing" >&2; exit 2; }; done
say() { echo "read modes: $*"; }

pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT
trap 'exit 130' INT TERM

if [ -z "${FLOE_TEST_KINESALITE_ENDPOINT:-}" ]; then
  "$root/deploy/local/aws-emulators.sh" status >/dev/null 2>&1 || "$root/deploy/local/aws-emulators.sh" start >&2
  eval "$("$root/deploy/local/aws-emulators.sh" env)"
fi
export AWS_ACCESS_KEY_ID="${AWS_ACCESS_KEY_ID:-test}" AWS_SECRET_ACCESS_KEY="${AWS_SECRET_ACCESS_KEY:-test}"
export AWS_REGION="${AWS_REGION:-us-east-1}" AWS_EC2_METADATA_DISABLED=true
kinesalite="$FLOE_TEST_KINESALITE_ENDPOINT"

# ---- the EFO emulator with AWS's limits, on a free port ------------------------------------------
port=$("$py" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
FLOE_EFO_TLS=1 FLOE_EFO_TLS_DIR="$work/tls" FLOE_EFO_UPSTREAM="$kinesalite" FLOE_EFO_POLLING_LIMITS=1 \
  FLOE_EFO_SUBSCRIPTION_SECONDS=300 FLOE_EFO_RESUBSCRIBE_COOLDOWN_MS=5000 FLOE_EFO_PUSH_MS=50 \
  node "$root/deploy/local/kinesis-efo/kinesis-efo.js" --port "$port" >"$work/efo.log" 2>&1 &
pids+=("$!")
for _ in $(seq 100); do grep -q "^Listening at" "$work/efo.log" && break; sleep 0.1; done
grep -q "^Listening at" "$work/efo.log" || { cat "$work/efo.log" >&2; echo "read modes: the EFO emulator did not start" >&2; exit 1; }
front="https://127.0.0.1:$port" ca="$work/tls/ca.pem"
say "EFO emulator at $front (upstream $kinesalite, polling limits on), $shards shards, $n records, $probes probes at $rate records/s of background load"

create_stream() {
  "$py" - "$kinesalite" "$1" "$shards" <<'PY'
import sys, time, boto3
k = boto3.client("kinesis", endpoint_url=sys.argv[1], region_name="us-east-1")
k.create_stream(StreamName=sys.argv[2], ShardCount=int(sys.argv[3]))
while k.describe_stream_summary(StreamName=sys.argv[2])["StreamDescriptionSummary"]["StreamStatus"] != "ACTIVE":
    time.sleep(0.1)
PY
}

config() { # dir stream mode metrics-address
  local source_extra=""
  [ "$3" = polling ] || source_extra='read_mode = "enhanced_fan_out"'
  cat <<EOF
[worker]
id = "bench-$3"
metrics_address = "$4"
[aws]
region = "us-east-1"
endpoint_url = "$front"
ca_bundle = "$ca"
[lease_store]
kind = "sqlite"
path = "$1/leases.sqlite"
[[channel]]
name = "bench"
  [channel.source]
  kind = "kinesis"
  stream_name = "$2"
  initial_position = "trim_horizon"
  $source_extra
  [channel.schema]
  file = "$root/config/event.schema.json"
  [channel.destination]
  kind = "iceberg"
  namespace = "bench"
  table = "events"
  partition_field = "event_time"
  data_freshness = "10s"
    [channel.destination.catalog]
    kind = "sql"
    name = "floe"
    uri = "$1/catalog.sqlite"
    warehouse = "$1/warehouse"
  [channel.dlq]
  kind = "local"
  path = "$1/dlq"
EOF
}

results=()
for mode in polling enhanced_fan_out; do
  d="$work/$mode" stream="read-modes-${mode//_/-}-$(date +%s)-$$"
  rm -rf "$d"; mkdir -p "$d"
  create_stream "$stream"
  "$loadgen" kinesis --stream "$stream" --endpoint-url "$kinesalite" --region us-east-1 \
    --records "$n" --seed 42 --bad-share 0 --progress-s 0 >"$d/preload.json"
  metrics="127.0.0.1:$("$py" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
  config "$d" "$stream" "$mode" "$metrics" >"$d/floe.toml"
  start_ns=$(date +%s%N)
  RUST_LOG="${FLOE_BENCH_LOG:-warn}" "$floe" run --config "$d/floe.toml" >/dev/null 2>"$d/worker.log" &
  worker=$!; pids+=("$worker")
  # Phase 1, then phases 2 and 3 with background load, in one Python process.

  "$py" - "$d" "$n" "$start_ns" "$front" "$ca" "$kinesalite" "$stream" "$probes" "$loadgen" "$rate" "$shards" "$mode" "$metrics" >"$d/result.json" <<'PY'
import gzip, json, os, sqlite3, subprocess, sys, threading, time
import ssl, urllib.request
import boto3, botocore.config
d, n, start_ns, front, ca, kinesalite, stream, probes, loadgen, rate, shards, mode, metrics = sys.argv[1:]
n, start_ns, probes, rate, shards = int(n), int(start_ns), int(probes), int(rate), int(shards)

def meta():
    try:
        con = sqlite3.connect(f"file:{d}/catalog.sqlite?mode=ro", uri=True, timeout=1)
        row = con.execute("select metadata_location from iceberg_tables where table_namespace='bench' and table_name='events'").fetchone()
        con.close()
    except sqlite3.Error:
        return None
    if not row or not row[0]:
        return None
    path = row[0].removeprefix("file://")
    try:
        with (gzip.open(path) if path.endswith(".gz.metadata.json") else open(path)) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None

def total_records(m):
    snaps = sorted((m or {}).get("snapshots", []), key=lambda s: s["sequence-number"])
    return int(snaps[-1]["summary"].get("total-records", 0)) if snaps else 0

def checkpoints(m):
    text = ((m or {}).get("properties") or {}).get("floe.checkpoints")
    return json.loads(text) if text else {}

def records_read():
    try:
        text = urllib.request.urlopen(f"http://{metrics}/metrics", timeout=1).read().decode()
    except OSError:
        return 0
    return sum(float(l.rsplit(" ", 1)[1]) for l in text.splitlines() if l.startswith("floe_records_read_total"))

# 1. throughput: reading (the worker's floe_records_read_total, from its first record to the
# last) and end to end (from the worker's start until the table holds every record)
first_read = last_read = None
while total_records(meta()) < n:
    if time.time_ns() - start_ns > 600e9:
        print(json.dumps({"error": f"only {total_records(meta())} of {n} records after 600 s"})); sys.exit(1)
    got = records_read()
    now = time.time_ns()
    if got > 0 and first_read is None:
        first_read = (now, got)
    if got >= n and last_read is None:
        last_read = now
    time.sleep(0.05)
elapsed = (time.time_ns() - start_ns) / 1e9
if last_read is None:
    last_read = time.time_ns()
# From the worker's start (configuration, catalog, consumer registration included): the first
# scrape can already see most records, so the time of the first one is not measurable here.
read_s = max((last_read - start_ns) / 1e9, 0.05)
read_rate = n / read_s

# 3. the second polling consumer, through the same front (AWS's shared limits)
cfg = botocore.config.Config(retries={"max_attempts": 1, "mode": "standard"})
other = boto3.client("kinesis", endpoint_url=front, region_name="us-east-1", verify=ca, config=cfg)
stop = threading.Event()
counts = {"calls": 0, "throttled": 0, "records": 0}
def poll_shard(shard):
    it = other.get_shard_iterator(StreamName=stream, ShardId=shard, ShardIteratorType="LATEST")["ShardIterator"]
    while not stop.is_set():
        try:
            out = other.get_records(ShardIterator=it, Limit=10000)
            counts["calls"] += 1
            counts["records"] += len(out["Records"])
            it = out.get("NextShardIterator") or it
        except other.exceptions.ProvisionedThroughputExceededException:
            counts["calls"] += 1
            counts["throttled"] += 1
        time.sleep(1 / 3)
shard_ids = [s["ShardId"] for s in other.list_shards(StreamName=stream)["Shards"]]
pollers = [threading.Thread(target=poll_shard, args=(s,), daemon=True) for s in shard_ids]
for t in pollers:
    t.start()

# 2. latency under background load
background = subprocess.Popen([loadgen, "kinesis", "--stream", stream, "--endpoint-url", kinesalite,
    "--region", "us-east-1", "--records", str(rate * (probes + 30)), "--start-id", str(n + 1000),
    "--rate", str(rate), "--seed", "7", "--bad-share", "0", "--progress-s", "0"],
    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
k = boto3.client("kinesis", endpoint_url=kinesalite, region_name="us-east-1")
time.sleep(3)
sent, latency = [], [None] * probes
lock = threading.Lock()
def watch():
    while not stop.is_set():
        cps = checkpoints(meta())
        now = time.time()
        with lock:
            for i, (shard, seq, t0) in enumerate(sent):
                cp = cps.get(shard)
                if latency[i] is None and cp and cp != "SHARD_END" and int(cp.split(".")[0]) >= seq:
                    latency[i] = now - t0
        time.sleep(0.05)
watcher = threading.Thread(target=watch, daemon=True)
watcher.start()
for i in range(probes):
    rec = json.dumps({"id": n + 500 + i, "event_time": "2026-01-01T00:00:00Z", "name": "probe",
                      "tier": 1, "tags": [], "attrs": {}, "score": 0.5, "active": True, "note": None})
    t0 = time.time()
    out = k.put_record(StreamName=stream, PartitionKey=f"probe-{i}", Data=rec.encode())
    with lock:
        sent.append((out["ShardId"], int(out["SequenceNumber"]), t0))
    time.sleep(1)
deadline = time.time() + 120
while time.time() < deadline:
    with lock:
        if all(l is not None for l in latency):
            break
    time.sleep(0.1)
stop.set()
background.terminate()
for t in pollers:
    t.join(timeout=5)
stats = json.load(urllib.request.urlopen(front + "/_floe/stats", context=ssl.create_default_context(cafile=ca)))
polled = [v for key, v in stats.get("GetRecords", {}).items() if key.startswith(stream + "/")]
stream_calls = {"calls": sum(v["Calls"] for v in polled), "throttled": sum(v["Throttled"] for v in polled)}
seen = sorted(l for l in latency if l is not None)
q = lambda p: seen[min(len(seen) - 1, int(p * len(seen)))] if seen else float("nan")
print(json.dumps({
    "mode": mode, "records": n, "shards": shards, "seconds_to_table": round(elapsed, 2),
    "read_seconds": round(read_s, 2), "read_records_per_s": round(read_rate),
    "read_records_per_s_per_shard": round(read_rate / shards),
    "latency_s": {"median": round(q(0.5), 2), "p90": round(q(0.9), 2), "max": round(seen[-1], 2) if seen else None,
                  "probes": probes, "missing": latency.count(None)},
    "other_consumer": counts, "stream_get_records": stream_calls,
}))
sys.exit(0 if latency.count(None) == 0 else 1)
PY
  kill -TERM "$worker" 2>/dev/null || true; wait "$worker" 2>/dev/null || true
  r=$(cat "$d/result.json")
  results+=("$r")
  "$py" - "$r" <<'PY'
import json, sys
r = json.loads(sys.argv[1])
l, o, g = r["latency_s"], r["other_consumer"], r["stream_get_records"]
print(f"read modes: {r['mode']:<17} read {r['read_records_per_s']:>7,} records/s per worker, {r['read_records_per_s_per_shard']:>6,} per shard "
      f"({r['records']:,} records, {r['shards']} shards, all read {r['read_seconds']} s and all in the table {r['seconds_to_table']} s after start); latency median {l['median']} s, p90 {l['p90']} s, "
      f"max {l['max']} s ({l['probes']} probes); second polling consumer: {o['calls']} GetRecords, {o['throttled']} throttled; "
      f"all GetRecords on the stream (floe's and the other's): {g['calls']}, {g['throttled']} throttled")
PY
done
curl -sk "$front/_floe/stats" >"$work/efo-stats.json" || true
say "emulator counters: $work/efo-stats.json; work dir $work"
say "PASS"
