#!/usr/bin/env bash
# Change data capture benchmark (issue 42 item 8): floe's upsert mode beside PyIceberg's
# `Table.upsert` on the same Debezium change events, in one run.
#
# Data (floe-loadgen --changes, seed 42): an initial snapshot of --keys rows (op r), then
# --changes change events: --updates updates, --deletes deletes (each followed by a tombstone),
# the rest inserts (new ids, or deleted ids coming back).
#
# 1. Peer (loadtest/cdc_peer.py, one core: taskset -c 0): PyIceberg 0.12 applies the same events
#    in batches of --batch events (last event per key; deletes and an upsert in one transaction),
#    SQLite catalog, local warehouse; then loadtest/verify_cdc.py checks its table.
# 2. floe (one `floe run` worker pinned to core 0; floe-mock-kafka on the other core):
#    a. the snapshot preloaded into the topic; floe (envelope debezium, mode upsert, key id)
#       runs until its checkpoints reach the topic's end: the snapshot's events/s; SIGTERM.
#    b. the change events preloaded after them; floe starts again (its committer rebuilds the
#       key index from the table) and runs until the end: the change events/s (restart and
#       rebuild included); /metrics scraped before SIGTERM: commit latency, key index figures.
#    c. loadtest/verify_cdc.py checks the table against the final state (PyIceberg, DuckDB,
#       no equality deletes, at most one delete file per data file).
#    d. the same topic, every message, into a new table with mode = "append" (the changelog):
#       floe's append rate on the same data, for the goal "upsert >= 70% of append".
# Last lines: the figures side by side and `ratio floe/peer change events/s = R`.
#
#   loadtest/cdc.sh [--keys 1000000] [--changes 1000000] [--updates 0.7] [--deletes 0.1]
#                   [--batch 50000] [--work DIR] [--format-version 2|3] [--schemas-enable]
#                   [--peer-only | --no-peer] [--quick]
#   --quick: 20,000 keys, 20,000 changes, batch 5,000: proves it works in a few minutes.
#   --peer-only: only step 1 (needs floe-loadgen and the .venv; no floe build).
# Binaries: $FLOE_BIN, $FLOE_LOADGEN_BIN, $FLOE_MOCK_KAFKA_BIN, else $CARGO_TARGET_DIR/release
# (cargo build --release --bins), or /debug with --quick or --peer-only.
# Needs taskset, the .venv (PyIceberg 0.12, DuckDB 1.4.4 with its iceberg and avro wheels).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
keys=1000000 changes=1000000 updates=0.7 deletes=0.1 batch="" work=/tmp/floe-cdc format_version=2
schemas="" peer=1 floe_side=1 quick=0
while [ $# -gt 0 ]; do
  case "$1" in
    --keys) keys="$2"; shift 2 ;;
    --changes) changes="$2"; shift 2 ;;
    --updates) updates="$2"; shift 2 ;;
    --deletes) deletes="$2"; shift 2 ;;
    --batch) batch="$2"; shift 2 ;;
    --work) work="$2"; shift 2 ;;
    --format-version) format_version="$2"; shift 2 ;;
    --schemas-enable) schemas=--schemas-enable; shift ;;
    --peer-only) floe_side=0; shift ;;
    --no-peer) peer=0; shift ;;
    --quick) quick=1; keys=20000 changes=20000; shift ;;
    -h|--help) sed -n '2,31p' "$0"; exit 0 ;;
    *) echo "cdc: unknown argument $1" >&2; exit 2 ;;
  esac
done
[ -n "$batch" ] || { if [ "$quick" = 1 ]; then batch=5000; else batch=50000; fi; }
py="${FLOE_PYTHON:-$root/.venv/bin/python}"
target="${CARGO_TARGET_DIR:-$root/target}"
bin() { # name env-override
  local v="${!2:-}"
  if [ -n "$v" ]; then echo "$v"; elif [ -x "$target/release/$1" ]; then echo "$target/release/$1";
  elif { [ "$quick" = 1 ] || [ "$floe_side" = 0 ]; } && [ -x "$target/debug/$1" ]; then echo "$target/debug/$1";
  else echo "cdc: $target/release/$1 is missing: cargo build --release --bins" >&2; exit 2; fi
}
loadgen=$(bin floe-loadgen FLOE_LOADGEN_BIN)
if [ "$floe_side" = 1 ]; then
  floe=$(bin floe FLOE_BIN) mock_kafka=$(bin floe-mock-kafka FLOE_MOCK_KAFKA_BIN)
  case "$floe" in */debug/*) echo "note: debug binaries: floe's figures are not representative" ;; esac
fi
mkdir -p "$work"
work="$(cd "$work" && pwd)"
pids=()
cleanup() { local p; for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT
trap 'exit 130' INT TERM
t0=$SECONDS
say() { printf 'cdc [%4ds] %s\n' "$((SECONDS - t0))" "$*"; }

gen=(--changes --keys "$keys" --updates "$updates" --deletes "$deletes" --seed 42 --progress-s 0 $schemas)
events="$work/events-$keys-$changes.ndjson"
"$loadgen" file --output "$events" --records "$changes" "${gen[@]}" --manifest "$work/manifest-file.jsonl" >"$work/file.out"
say "events: $events ($(cat "$work/file.out"))"

# ---- 1. peer ------------------------------------------------------------------------------------
peer_line=""
if [ "$peer" = 1 ]; then
  say "peer: PyIceberg Table.upsert, batches of $batch events, core 0"
  peer_line=$(taskset -c 0 "$py" "$root/loadtest/cdc_peer.py" --events "$events" --work "$work/peer" \
    --batch "$batch" 2>"$work/peer.log")
  say "peer: $peer_line"
  "$py" "$root/loadtest/verify_cdc.py" --manifest "$work/manifest-file.jsonl" --catalog "$work/peer/catalog.sqlite" \
    --warehouse "$work/peer/warehouse" --table peer.customers --catalog-name peer >"$work/peer-verify.out" 2>&1 \
    && say "peer table: verify_cdc passed" || { say "peer table: verify_cdc FAILED"; cat "$work/peer-verify.out"; exit 1; }
fi
[ "$floe_side" = 1 ] || {
  "$py" - "$peer_line" <<'PY'
import json, sys
p = json.loads(sys.argv[1])
print(f"peer PyIceberg upsert (1 core, batch {p['batch']}): snapshot {p['snapshot_events']} events in {p['snapshot_s']:.1f} s = {p['snapshot_events'] / p['snapshot_s']:,.0f} events/s; "
      f"changes {p['change_events']} in {p['change_s']:.1f} s = {p['change_events_per_s']:,.0f} events/s; commit p50 {p['commit_p50_s']:.2f} s, max {p['commit_max_s']:.2f} s")
PY
  exit 0
}

# ---- 2. floe ------------------------------------------------------------------------------------
bytes=$(stat -c %s "$events")
messages=$(wc -l <"$events")
# The mock broker keeps 5 MiB / 100,000 messages per partition: stay under 4 MiB / 80,000.
partitions=$(( (bytes + 4194303) / 4194304 ))
[ $(( (messages + 79999) / 80000 )) -gt "$partitions" ] && partitions=$(( (messages + 79999) / 80000 ))
[ "$partitions" -ge 4 ] || partitions=4
coproc BROKER { exec taskset -c 1 "$mock_kafka" --topic customers --partitions "$partitions" --exit-on-stdin-eof 2>"$work/broker.log"; }
pids+=("$BROKER_PID")
read -r line <&"${BROKER[0]}"
bootstrap="${line#bootstrap=}"
say "floe-mock-kafka at $bootstrap (topic customers, $partitions partitions)"

"$loadgen" kafka --bootstrap "$bootstrap" --topic customers --records 0 "${gen[@]}" \
  --manifest "$work/manifest-a.jsonl" >"$work/load-a.out"
say "preloaded the snapshot: $(cat "$work/load-a.out")"

config() { # dir table mode port
  cat <<EOF
[worker]
id = "cdc"
metrics_address = "127.0.0.1:$4"
[lease_store]
kind = "sqlite"
path = "$1/leases.sqlite"
[[channel]]
name = "cdc"
  [channel.source]
  kind = "kafka"
  bootstrap_servers = "$bootstrap"
  topic = "customers"
  initial_position = "earliest"
  [channel.record]
  format = "json"
  envelope = "debezium"
  [channel.schema]
  file = "$root/loadtest/cdc_row.schema.json"
  [channel.destination]
  kind = "iceberg"
  namespace = "cdc"
  table = "$2"
  partition = []
  mode = "$3"
$( [ "$3" = upsert ] && echo '  key = ["id"]' )
  format_version = $format_version
  data_freshness = "10s"
  buffer_size = "64MiB"
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
[ "$format_version" = 2 ] || [ "$format_version" = 3 ] || { echo "cdc: --format-version 2|3" >&2; exit 2; }
port=$(( 20000 + RANDOM % 20000 ))

# run NAME DIR TABLE MODE MANIFEST...: one pinned worker until the table's checkpoints reach the
# manifests' offsets; writes DIR/NAME.json (seconds, commits) and DIR/NAME.prom (its /metrics).
run() {
  local name="$1" d="$2" table="$3" mode="$4"; shift 4
  local manifests=() m; for m in "$@"; do manifests+=(--manifest "$m"); done
  mkdir -p "$d"
  config "$d" "$table" "$mode" "$port" >"$d/floe.toml"
  "$floe" validate --config "$d/floe.toml" >/dev/null
  local start_ns pid rc=0
  start_ns=$(date +%s%N)
  RUST_LOG="${FLOE_BENCH_LOG:-info}" taskset -c 0 "$floe" run --config "$d/floe.toml" >/dev/null 2>"$d/$name.log" &
  pid=$!; pids+=("$pid")
  "$py" - "$d" "$table" "$start_ns" 1800 "${manifests[@]}" >"$d/$name.json" <<'PY' || rc=$?
import gzip, json, sqlite3, sys, time
d, table, start_ns, bound = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
offsets = {}
for i in range(5, len(sys.argv), 2):
    for line in open(sys.argv[i + 1]):
        m = json.loads(line)
        if m["kind"] == "done":
            for p, n in m["per_shard"].items():
                offsets[p] = offsets.get(p, 0) + n
def meta():
    try:
        con = sqlite3.connect(f"file:{d}/catalog.sqlite?mode=ro", uri=True, timeout=1)
        row = con.execute("select metadata_location from iceberg_tables where table_namespace='cdc' and table_name=?", (table,)).fetchone()
        con.close()
    except sqlite3.Error:
        return None
    if not row or not row[0]:
        return None
    path = row[0].removeprefix("file://")
    with (gzip.open(path) if path.endswith(".gz.metadata.json") else open(path)) as f:
        return json.load(f)
while True:
    m = meta() or {}
    cp = json.loads(m.get("properties", {}).get("floe.checkpoints", "{}"))
    if all(int(cp.get(p, -1)) >= n - 1 for p, n in offsets.items()):
        break
    if time.time_ns() - start_ns > bound * 1e9:
        print(json.dumps({"error": f"checkpoints {cp} short of {offsets} after {bound} s"})); sys.exit(1)
    time.sleep(0.2)
snaps = sorted(m.get("snapshots", []), key=lambda s: s["sequence-number"])
mine = [s for s in snaps if s["timestamp-ms"] * 1e6 >= start_ns]
first = (mine[0]["timestamp-ms"] * 1e6 - start_ns) / 1e9 if mine else None
print(json.dumps({"seconds": (time.time_ns() - start_ns) / 1e9, "commits": len(mine), "first_commit_s": first,
                  "messages": sum(offsets.values())}))
PY
  curl -sf "http://127.0.0.1:$port/metrics" >"$d/$name.prom" 2>/dev/null || true
  local rss; rss=$(sed -n 's/^VmHWM:[[:space:]]*\([0-9]*\) kB/\1/p' "/proc/$pid/status" 2>/dev/null || echo 0)
  kill -TERM "$pid" 2>/dev/null || true
  wait "$pid" || true
  if [ "$rc" != 0 ]; then say "$name: FAILED $(cat "$d/$name.json") (log $d/$name.log)"; exit 1; fi
  "$py" - "$d/$name.json" "$rss" <<'PY'
import json, sys
p, rss = sys.argv[1], int(sys.argv[2] or 0)
r = json.load(open(p)); r["peak_rss_kib"] = rss; json.dump(r, open(p, "w"))
PY
  say "$name: $(cat "$d/$name.json")"
}

up="$work/floe-upsert"
run snapshot "$up" customers upsert "$work/manifest-a.jsonl"
"$loadgen" kafka --bootstrap "$bootstrap" --topic customers --records "$changes" "${gen[@]}" --skip-snapshot \
  --manifest "$work/manifest-b.jsonl" >"$work/load-b.out"
say "preloaded the changes: $(cat "$work/load-b.out")"
run changes "$up" customers upsert "$work/manifest-a.jsonl" "$work/manifest-b.jsonl"
vrc=0
"$py" "$root/loadtest/verify_cdc.py" --manifest "$work/manifest-a.jsonl" --manifest "$work/manifest-b.jsonl" \
  --catalog "$up/catalog.sqlite" --warehouse "$up/warehouse" --table cdc.customers >"$work/verify.out" 2>&1 || vrc=$?
cat "$work/verify.out"
run append "$work/floe-append" customers_append append "$work/manifest-a.jsonl" "$work/manifest-b.jsonl"

# ---- report -------------------------------------------------------------------------------------
"$py" - "$work" "$keys" "$changes" "$peer_line" <<'PY'
import json, re, sys
work, keys, changes, peer = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
up = f"{work}/floe-upsert"
snap, chg = json.load(open(f"{up}/snapshot.json")), json.load(open(f"{up}/changes.json"))
app = json.load(open(f"{work}/floe-append/append.json"))

def prom(path):
    out = {}
    for line in open(path) if __import__("os").path.exists(path) else []:
        if line.startswith("#") or not line.strip():
            continue
        name, _, value = line.rpartition(" ")
        try:
            out[name] = float(value)
        except ValueError:
            pass
    return out

def commit_latency(m):
    s = sum(v for k, v in m.items() if k.startswith("floe_commit_duration_seconds_sum"))
    n = sum(v for k, v in m.items() if k.startswith("floe_commit_duration_seconds_count"))
    buckets = {}
    for k, v in m.items():
        b = re.match(r'floe_commit_duration_seconds_bucket\{.*le="([^"]+)".*\}', k)
        if b:
            le = float("inf") if b.group(1) == "+Inf" else float(b.group(1))
            buckets[le] = buckets.get(le, 0) + v
    def q(p):
        for le in sorted(buckets):
            if buckets[le] >= p * n:
                return le
        return None
    return (s / n if n else None), q(0.5), q(0.99), int(n)

m = prom(f"{up}/changes.prom")
mean, p50, p99, n = commit_latency(m)
chg_events = changes  # tombstones are read too, but not events
events_total = keys + changes
up_rate = chg_events / chg["seconds"]
up_all = events_total / (snap["seconds"] + chg["seconds"])
app_rate = events_total / app["seconds"]
print(f"floe upsert (1 core): snapshot {keys} events in {snap['seconds']:.1f} s = {keys / snap['seconds']:,.0f} events/s; "
      f"changes {changes} events in {chg['seconds']:.1f} s = {up_rate:,.0f} events/s (restart and key index rebuild included, "
      f"first commit after {chg['first_commit_s'] or 0:.1f} s, {chg['commits']} commits); all events {up_all:,.0f} events/s; "
      f"peak RSS {chg['peak_rss_kib'] / 1024:.0f} MiB")
if n:
    print(f"floe commit latency (changes run, {n} commits): mean {mean:.3f} s, p50 <= {p50} s, p99 <= {p99} s (histogram buckets)")
# The key index as the committer exports it after the changes run (keys, last build's seconds).
index = {k: v for k, v in m.items() if "key_index" in k}
print("floe key index metrics: " + (", ".join(f"{k} {v:g}" for k, v in sorted(index.items())) or "none exported"))
print(f"floe append, same {events_total} events (changelog, 1 core): {app['seconds']:.1f} s = {app_rate:,.0f} events/s")
print(f"ratio floe upsert/append events/s = {up_all / app_rate:.2f} (all events), {up_rate / app_rate:.2f} (change events) — goal >= 0.70")

# The same runs without a worker's start: from the last partition opened (the worker holds and
# reads every partition) to the last commit, from the worker's log. A start (lease protocol:
# leases assigned after one renew interval and taken at the next; opening every partition) is a
# cost per start, not per event, and dominates runs of a million events.
from datetime import datetime
def window(log):
    opened = committed = None
    for line in open(log, errors="replace"):
        if "shard lease taken: reading" in line:
            opened = line[:27]
        elif "commit round" in line and "committed=0" not in line:
            committed = line[:27]
    if not (opened and committed):
        return None
    t = lambda s: datetime.fromisoformat(s.rstrip("Z").replace("Z", ""))
    return (t(committed) - t(opened)).total_seconds()
w_chg, w_app = window(f"{up}/changes.log"), window(f"{work}/floe-append/append.log")
if w_chg and w_app:
    print(f"floe without the start (last partition opened -> last commit): changes {changes / w_chg:,.0f} events/s ({w_chg:.1f} s), "
          f"append {events_total / w_app:,.0f} events/s ({w_app:.1f} s); ratio upsert/append = {changes / w_chg / (events_total / w_app):.2f}")
if peer:
    p = json.loads(peer)
    print(f"peer PyIceberg upsert (1 core, batch {p['batch']}): snapshot {p['snapshot_events'] / p['snapshot_s']:,.0f} events/s, "
          f"changes {p['change_events_per_s']:,.0f} events/s, commit p50 {p['commit_p50_s']:.2f} s, max {p['commit_max_s']:.2f} s")
    print(f"ratio floe/peer change events/s = {up_rate / p['change_events_per_s']:.1f} — goal >= 20")
    if w_chg:
        print(f"ratio floe/peer change events/s without floe's start = {changes / w_chg / p['change_events_per_s']:.1f}")
PY
grep -iE "key index built" "$up/changes.log" | head -5 | sed 's/^/floe log: /' || true
[ "$vrc" = 0 ] && echo "cdc: verify_cdc PASS" || { echo "cdc: verify_cdc FAIL (see $work/verify.out)"; exit 1; }
