#!/usr/bin/env bash
# Side-by-side conversion benchmark on one core: floe's real conversion path (decode, validate,
# Arrow, hour-partitioned ZSTD Parquet) against pyarrow read_json + write_table.
#
# Usage: loadtest/bench.sh [N_RECORDS=1000000] [WORKDIR=/tmp/floe-bench]
# Needs a release build (cargo build --release) and pyarrow (the test command's .venv has it).
# Prints each tool's JSON line, peak RSS, then `ratio floe/pyarrow records_per_s = R`.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
n="${1:-1000000}"
work="${2:-/tmp/floe-bench}"
py="${FLOE_PYTHON:-$root/.venv/bin/python}"
floe="${CARGO_TARGET_DIR:-$root/target}/release/floe"
[ -x "$floe" ] || { echo "build first: cargo build --release" >&2; exit 2; }
mkdir -p "$work"
input="$work/events-$n.ndjson"
[ -f "$input" ] || "$py" "$root/loadtest/gen_events.py" "$n" "$input" --seed 42
echo "input: $input ($(stat -c %s "$input") bytes)"


rm -rf "$work/floe-out"
floe_line=$(taskset -c 0 /usr/bin/time -f 'peak_rss_kib %M' "$floe" bench convert \
  --schema "$root/config/event.schema.json" --partition-field event_time \
  --input "$input" --output "$work/floe-out" --compression zstd --level 3 2>"$work/floe.rss")
echo "floe:    $floe_line $(tail -1 "$work/floe.rss")"
py_line=$(taskset -c 0 /usr/bin/time -f 'peak_rss_kib %M' "$py" "$root/loadtest/bench_pyarrow.py" \
  "$input" "$work/pyarrow.parquet" --level 3 --repeat 3 2>"$work/py.rss")
echo "pyarrow: $py_line $(tail -1 "$work/py.rss")"
"$py" - "$floe_line" "$py_line" <<'PY'
import json, sys
f, p = json.loads(sys.argv[1]), json.loads(sys.argv[2])
print(f"ratio floe/pyarrow records_per_s = {f['records_per_s'] / p['records_per_s']:.2f}")
PY
