#!/usr/bin/env bash
# `floe bench convert` per record format beside its peers, in one run, on the same records, one
# core each (taskset -c 0; the peers single-threaded), ZSTD level-3 Parquet, best of --repeat runs:
#
#   json      floe --format json          pyarrow read_json + write_table; DuckDB read_json_auto
#   avro      floe --format avro          fastavro reader + pyarrow; DuckDB read_avro
#   protobuf  floe --format protobuf      protobuf (upb) FromString + pyarrow
#
# The records: floe-loadgen's Event records (seed 42, 3 hours, no bad ones), written by
# loadtest/bench_formats.py in each format (an Avro object container file for the peers and the
# same datums varint-delimited for floe; varint-delimited Protobuf messages). floe's figures
# include where the time goes: decode and validation (Converter::push/finish) vs Parquet encoding.
# Last lines: `ratio floe/fastest peer <format> = R`.
#
#   loadtest/bench_formats.sh [--records N] [--work DIR] [--formats json,avro,protobuf]
#                             [--repeat 3] [--debug] [--quick]
#   --debug: debug binaries ($CARGO_TARGET_DIR/debug; figures are not representative).
#   --quick: 50,000 records, one run each, debug binaries when no release build exists.
# Binaries as loadtest/lib.sh's lt_binaries (cargo build --release --bins); FLOE_BIN measures
# another build, e.g. when a release build costs too much on a loaded machine: the dev profile
# with floe's own crate optimized (its dependencies already are, at opt-level 2):
#   cargo build --bin floe --config 'profile.dev.package.floe.opt-level=3' \
#     --config 'profile.dev.package.floe.debug-assertions=false' \
#     --config 'profile.dev.package.floe.overflow-checks=false'
# Python: a venv in the
# work directory with fastavro, protobuf, pyarrow, grpcio-tools (protoc), duckdb 1.4.4 and its
# avro extension wheel (loaded from the wheel, offline). Needs taskset.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
. "$root/loadtest/lib.sh"
n=1000000 work="" formats="json,avro,protobuf" repeat=3 profile=release quick=0
while [ $# -gt 0 ]; do
  case "$1" in
    --records) n="$2"; shift 2 ;;
    --work) work="$2"; shift 2 ;;
    --formats) formats="$2"; shift 2 ;;
    --repeat) repeat="$2"; shift 2 ;;
    --debug) profile=debug; shift ;;
    --quick) quick=1; shift ;;
    -h|--help) sed -n '2,27p' "$0"; exit 0 ;;
    *) echo "bench_formats: unknown argument $1" >&2; exit 2 ;;
  esac
done
if [ "$quick" = 1 ]; then
  n=50000 repeat=1
  [ -x "${CARGO_TARGET_DIR:-$root/target}/release/floe" ] || profile=debug
fi
lt_workdir bench_formats "${work:-/tmp/floe-bench-formats}"
venv="$dir/venv"
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c 'import fastavro, duckdb_ext, grpc_tools' 2>/dev/null; then
  say "python venv $venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q fastavro==1.13.1 protobuf==7.36.2 pyarrow==26.0.1 grpcio-tools==1.85.1 \
    duckdb==1.4.4 duckdb-ext-iceberg==1.4.4.20260205 duckdb-ext-avro==1.4.4.20260205
fi
FLOE_PYTHON="$venv/bin/python" lt_binaries bench_formats "$profile"
build="$profile build"
[ -z "${FLOE_BIN:-}" ] || build="FLOE_BIN $FLOE_BIN"
[ "$build" = "release build" ] || echo "note: floe is the $build: figures may not be representative"
helper="$root/loadtest/bench_formats.py"

# ---- the records, in every format ------------------------------------------------------------------
ndjson="$dir/events-$n.ndjson" data="$dir/data-$n"
[ -f "$ndjson" ] || "$loadgen" file --output "$ndjson" --records "$n" --seed 42 --spread-hours 3 \
  --bad-share 0 --progress-s 0 >/dev/null
# Generated again when the schemas changed since (config/event.avsc, config/event.proto).
if ! { [ -f "$data/events.pb.bin" ] && cmp -s "$root/config/event.avsc" "$data/event.avsc" \
  && cmp -s "$root/config/event.proto" "$data/event.proto"; }; then
  "$py" "$helper" generate "$ndjson" "$data" >/dev/null
fi
say "$n Event records: json $(stat -c %s "$ndjson") B, avro $(stat -c %s "$data/events.avro.bin") B, protobuf $(stat -c %s "$data/events.pb.bin") B"

results="$dir/results.jsonl"
: >"$results"
# One measurement: format, tool, command (prints one JSON line with records_per_s) -> results.
measure() {
  local format="$1" tool="$2" line rc=0
  shift 2
  line=$(taskset -c 0 "$@" 2>"$dir/last.err") || rc=$?
  if [ "$rc" != 0 ]; then
    echo "{\"format\": \"$format\", \"tool\": \"$tool\", \"error\": $("$py" -c 'import json,sys; print(json.dumps(sys.stdin.read().strip()[-300:]))' <"$dir/last.err")}" >>"$results"
  else
    "$py" -c 'import json,sys; d=json.loads(sys.argv[3]); d.update(format=sys.argv[1], tool=sys.argv[2]); print(json.dumps(d))' \
      "$format" "$tool" "$line" >>"$results"
  fi
}
# floe, best of $repeat (by records_per_s).
floe_best() {
  local format="$1" i
  shift
  for i in $(seq "$repeat"); do
    rm -rf "$dir/out-$format"
    measure "$format" floe "$floe" bench convert --format "$format" "$@" --output "$dir/out-$format" \
      --partition-field event_time --compression zstd --level 3
  done
}

IFS=, read -ra fs <<<"$formats"
for f in "${fs[@]}"; do
  say "measuring $f"
  case "$f" in
    json)
      floe_best json --schema "$root/config/event.schema.json" --input "$ndjson"
      measure json "pyarrow read_json" "$py" "$root/loadtest/bench_pyarrow.py" "$ndjson" "$dir/pyarrow.parquet" --level 3 --repeat "$repeat"
      measure json "duckdb read_json_auto" "$py" "$helper" duckdb-json "$ndjson" "$dir/duckdb-json.parquet" --level 3 --repeat "$repeat"
      ;;
    avro)
      floe_best avro --schema "$data/event.avsc" --input "$data/events.avro.bin"
      measure avro "fastavro+pyarrow" "$py" "$helper" fastavro "$data/events.avro" "$dir/fastavro.parquet" --level 3 --repeat "$repeat"
      measure avro "duckdb read_avro" "$py" "$helper" duckdb-avro "$data/events.avro" "$dir/duckdb-avro.parquet" --level 3 --repeat "$repeat"
      ;;
    protobuf)
      floe_best protobuf --schema "$data/event.proto" --message floe.Event --input "$data/events.pb.bin"
      measure protobuf "protobuf upb+pyarrow" "$py" "$helper" protobuf "$data/events.pb.bin" "$data" "$dir/protobuf.parquet" --level 3 --repeat "$repeat"
      ;;
    *) echo "bench_formats: unknown format $f" >&2; exit 2 ;;
  esac
done

"$py" - "$results" "$build" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
def rate(r):
    return f"{r['records_per_s']:>12,.0f} records/s" if "records_per_s" in r else "      failed: " + r["error"]
for fmt in dict.fromkeys(r["format"] for r in rows):
    mine = [r for r in rows if r["format"] == fmt]
    floe = [r for r in mine if r["tool"] == "floe" and "records_per_s" in r]
    best = max(floe, key=lambda r: r["records_per_s"]) if floe else next(r for r in mine if r["tool"] == "floe")
    peers = [r for r in mine if r["tool"] != "floe"]
    split = ""
    if "decode_s" in best:
        split = (f"  (decode+validation {best['decode_s']:.2f} s = {best['decode_records_per_s']:,.0f}/s,"
                 f" parquet {best['encode_s']:.2f} s = {best['encode_records_per_s']:,.0f}/s,"
                 f" read {best['read_s']:.2f} s; dlq {best['dlq']})")
    print(f"{fmt:<9} {'floe bench convert':<24}{rate(best)}{split}")
    for p in peers:
        print(f"{fmt:<9} {p['tool']:<24}{rate(p)}")
    ok = [p["records_per_s"] for p in peers if "records_per_s" in p]
    if floe and ok:
        print(f"ratio floe/fastest peer {fmt} = {best['records_per_s'] / max(ok):.2f} ({sys.argv[2]})")
PY
