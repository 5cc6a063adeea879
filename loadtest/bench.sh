#!/usr/bin/env bash
# floe's benchmark, one run, one generated dataset (floe-loadgen, seed 42: the same bytes every run).
#
# 1. Conversion on one core (taskset -c 0): `floe bench convert` (decode, validate, Arrow,
#    hour-partitioned ZSTD-3 Parquet on local disk) side by side with pyarrow's read_json +
#    write_table(compression="zstd") single-threaded (loadtest/bench_pyarrow.py, best of 3):
#    records/s, input MB/s and peak RSS of each.
# 2. End to end: the records preloaded into floe-mock-kafka (4 partitions, more when a partition
#    would exceed 4 MiB: the mock broker keeps 5 MiB per partition), then one `floe run`
#    worker pinned to one core delivers them into an Iceberg table (SQLite catalog, local
#    warehouse, freshness 10 s): records/s from its start until every record is committed, the
#    steady rate before the last freshness-bound flush, and the worker's peak RSS — once per
#    --buffers size (the memory bound: peak RSS against buffer_size), then once on two cores.
# Last line: `ratio floe/pyarrow records_per_s = R`.
#
#   loadtest/bench.sh [--records N] [--work DIR] [--buffers 16MiB,64MiB,256MiB] [--quick] [N [DIR]]
#   --quick: 50,000 records, one e2e run (16MiB), pyarrow once: proves it works in about a minute.
#   --e2e-only: skip the conversion benchmark. --bad-share F: that share of the records are bad
#   (DLQ entries; implies --e2e-only): the memory bound when the DLQ, not the table, takes the load.
# Binaries: $FLOE_BIN, $FLOE_LOADGEN_BIN, $FLOE_MOCK_KAFKA_BIN, else $CARGO_TARGET_DIR/release
# (cargo build --release --bins), or /debug with --quick when no release build exists.
# FLOE_BENCH_LOG=info shows the worker's log (default warn) in <work>/e2e-*/worker.log.
# Needs pyarrow (the .venv of scripts/test.sh), taskset and GNU time (/usr/bin/time).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
n=1000000 work=/tmp/floe-bench buffers="16MiB,64MiB,256MiB" quick=0 pos=0 e2e_only=0 bad_share=0
while [ $# -gt 0 ]; do
  case "$1" in
    --records) n="$2"; shift 2 ;;
    --work) work="$2"; shift 2 ;;
    --buffers) buffers="$2"; shift 2 ;;
    --quick) quick=1; shift ;;
    --e2e-only) e2e_only=1; shift ;;
    --bad-share) bad_share="$2"; e2e_only=1; shift 2 ;;
    -h|--help) sed -n '2,22p' "$0"; exit 0 ;;
    *) if [ "$pos" = 0 ]; then n="$1"; else work="$1"; fi; pos=$((pos + 1)); shift ;;
  esac
done
repeat=3 two_cores=1
if [ "$quick" = 1 ]; then
  [ "$pos" -ge 1 ] || n=50000
  buffers="${buffers%%,*}" repeat=1 two_cores=0
fi
py="${FLOE_PYTHON:-$root/.venv/bin/python}"
target="${CARGO_TARGET_DIR:-$root/target}"
bin() { # name env-override
  local v="${!2:-}"
  if [ -n "$v" ]; then echo "$v"; elif [ -x "$target/release/$1" ]; then echo "$target/release/$1";
  elif [ "$quick" = 1 ] && [ -x "$target/debug/$1" ]; then echo "$target/debug/$1";
  else echo "bench: $target/release/$1 is missing: cargo build --release --bins" >&2; exit 2; fi
}
floe=$(bin floe FLOE_BIN) loadgen=$(bin floe-loadgen FLOE_LOADGEN_BIN) mock_kafka=$(bin floe-mock-kafka FLOE_MOCK_KAFKA_BIN)
case "$floe" in */debug/*) echo "note: debug binaries (--quick): figures are not representative" ;; esac
mkdir -p "$work"
work="$(cd "$work" && pwd)"
pids=()
cleanup() { local p; for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---- dataset --------------------------------------------------------------------------------------
gen=(--records "$n" --seed 42 --spread-hours 3 --bad-share "$bad_share")
input="$work/events-$n-bad$bad_share.ndjson"
[ -f "$input" ] || "$loadgen" file --output "$input" "${gen[@]}" --progress-s 0 >/dev/null
in_bytes=$(stat -c %s "$input")
echo "input: $input ($n Event records, $in_bytes bytes, $((in_bytes / n)) B/record, floe-loadgen seed 42)"

figures() { # JSON line, rss KiB -> "records/s R, input MB/s M, peak RSS K MiB"
  "$py" - "$1" "$in_bytes" "$2" <<'PY'
import json, sys
d, b, r = json.loads(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3] or 0)
print(f"records/s {d['records_per_s']:,.0f}, input MB/s {b / d['work_s'] / 1e6:.1f}, peak RSS {r / 1024:.0f} MiB, work {d['work_s']:.2f} s")
PY
}

# ---- 1. conversion, one core ------------------------------------------------------------------------
if [ "$e2e_only" = 0 ]; then
rm -rf "$work/floe-out"
floe_line=$(taskset -c 0 /usr/bin/time -f 'peak_rss_kib %M' "$floe" bench convert \
  --schema "$root/config/event.schema.json" --partition-field event_time \
  --input "$input" --output "$work/floe-out" --compression zstd --level 3 2>"$work/floe.rss")
floe_rss=$(sed -n 's/^peak_rss_kib //p' "$work/floe.rss")
echo "floe bench convert (1 core):  $(figures "$floe_line" "$floe_rss")"
echo "  $floe_line"
py_line=$(taskset -c 0 /usr/bin/time -f 'peak_rss_kib %M' "$py" "$root/loadtest/bench_pyarrow.py" \
  "$input" "$work/pyarrow.parquet" --level 3 --repeat "$repeat" 2>"$work/py.rss")
py_rss=$(sed -n 's/^peak_rss_kib //p' "$work/py.rss")
echo "pyarrow read_json+write_table (1 thread): $(figures "$py_line" "$py_rss")"
echo "  $py_line"
fi

# ---- 2. end to end through Kafka ------------------------------------------------------------------
# librdkafka's mock cluster keeps at most 5 MiB / 100,000 messages per partition and deletes the
# oldest beyond that (bin/floe-mock-kafka.rs): size the partitions so the whole dataset stays.
partitions=$(( (in_bytes + 4 * 1048576 - 1) / (4 * 1048576) ))
[ $(( (n + 79999) / 80000 )) -gt "$partitions" ] && partitions=$(( (n + 79999) / 80000 ))
[ "$partitions" -ge 4 ] || partitions=4
coproc BROKER { exec "$mock_kafka" --topic events --partitions "$partitions" --exit-on-stdin-eof 2>"$work/broker.log"; }
pids+=("$BROKER_PID")
read -r line <&"${BROKER[0]}"
bootstrap="${line#bootstrap=}"
lg=$("$loadgen" kafka --bootstrap "$bootstrap" --topic events "${gen[@]}" --progress-s 0)
echo "e2e: preloaded $n records into floe-mock-kafka ($partitions partitions): $lg"

e2e() { # buffer_size cpus
  local buf="$1" cpus="$2" d="$work/e2e-$1-$2"
  rm -rf "$d"; mkdir -p "$d"
  cat >"$d/floe.toml" <<EOF
[worker]
id = "bench"
metrics_address = "off"
[lease_store]
kind = "sqlite"
path = "$d/leases.sqlite"
[[channel]]
name = "bench"
  [channel.source]
  kind = "kafka"
  bootstrap_servers = "$bootstrap"
  topic = "events"
  initial_position = "earliest"
  [channel.schema]
  file = "$root/config/event.schema.json"
  [channel.destination]
  kind = "iceberg"
  namespace = "bench"
  table = "events"
  partition_field = "event_time"
  data_freshness = "10s"
  buffer_size = "$buf"
    [channel.destination.catalog]
    kind = "sql"
    name = "floe"
    uri = "$d/catalog.sqlite"
    warehouse = "$d/warehouse"
  [channel.dlq]
  kind = "local"
  path = "$d/dlq"
EOF
  local start_ns pid rc=0
  start_ns=$(date +%s%N)
  # taskset execs floe: $! is the worker itself (its VmHWM is read before it is stopped)
  RUST_LOG="${FLOE_BENCH_LOG:-warn}" taskset -c "$cpus" "$floe" run --config "$d/floe.toml" >/dev/null 2>"$d/worker.log" &
  pid=$!; pids+=("$pid")
  # Poll the catalog's metadata pointer (no PyIceberg: cheap) until every record is committed.
  "$py" - "$d" "$n" "$start_ns" 600 >"$d/result.json" <<'PY' || rc=$?
import gzip, json, os, sqlite3, sys, time
d, n, start_ns, bound = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
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
    with (gzip.open(path) if path.endswith(".gz.metadata.json") else open(path)) as f:
        return json.load(f)
def dlq_entries():
    p = os.path.join(d, "dlq", "bench")
    if not os.path.isdir(p):
        return 0
    return sum(sum(1 for _ in open(os.path.join(p, f))) for f in os.listdir(p) if f.endswith(".jsonl"))
while True:
    m = meta()
    snaps = sorted((m or {}).get("snapshots", []), key=lambda s: s["sequence-number"])
    total = int(snaps[-1]["summary"].get("total-records", 0)) if snaps else 0
    total += dlq_entries()
    if total >= n:
        break
    if time.time_ns() - start_ns > bound * 1e9:
        print(json.dumps({"error": f"only {total} of {n} records after {bound} s"})); sys.exit(1)
    time.sleep(0.2)
done_s = (time.time_ns() - start_ns) / 1e9
first_s = (snaps[0]["timestamp-ms"] * 1e6 - start_ns) / 1e9
steady = None
if len(snaps) >= 2:  # records committed before the last snapshot, over the time they took
    before_last = int(snaps[-2]["summary"].get("total-records", 0))
    steady_s = (snaps[-2]["timestamp-ms"] * 1e6 - start_ns) / 1e9
    steady = before_last / steady_s if steady_s > 0 and before_last > 0 else None
print(json.dumps({"records": total, "seconds": done_s, "records_per_s": total / done_s,
                  "steady_records_per_s": steady, "snapshots": len(snaps), "first_commit_s": first_s}))
PY
  local rss; rss=$(sed -n 's/^VmHWM:[[:space:]]*\([0-9]*\) kB/\1/p' "/proc/$pid/status" 2>/dev/null || echo 0)
  kill -TERM "$pid" 2>/dev/null || true
  wait "$pid" || true
  if [ "$rc" != 0 ]; then echo "e2e buffer_size $buf cpus $cpus: FAILED $(cat "$d/result.json") (log $d/worker.log)"; return 1; fi
  "$py" - "$d/result.json" "$rss" "$buf" "$cpus" <<'PY'
import json, sys
r, rss, b, c = json.load(open(sys.argv[1])), int(sys.argv[2] or 0), sys.argv[3], sys.argv[4]
st = f"{r['steady_records_per_s']:,.0f}" if r["steady_records_per_s"] else "n/a"
print(f"e2e mock Kafka -> Iceberg, 1 worker, cpus {c}, buffer_size {b}: {r['records']} records in {r['seconds']:.1f} s"
      f" = {r['records_per_s']:,.0f} records/s (steady before the last flush {st} records/s, {r['snapshots']} snapshots);"
      f" peak RSS {rss / 1024:.0f} MiB")
PY
}
e2e_ok=0
IFS=, read -ra bufs <<<"$buffers"
for b in "${bufs[@]}"; do e2e "$b" 0 || e2e_ok=1; done
if [ "$two_cores" = 1 ]; then e2e "${bufs[-1]}" 0,1 || e2e_ok=1; fi

[ "$e2e_only" = 1 ] || "$py" - "$floe_line" "$py_line" <<'PY'
import json, sys
f, p = json.loads(sys.argv[1]), json.loads(sys.argv[2])
print(f"ratio floe/pyarrow records_per_s = {f['records_per_s'] / p['records_per_s']:.2f}")
PY
exit "$e2e_ok"
