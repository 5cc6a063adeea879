#!/usr/bin/env bash
# Soak benchmark of the committer: COMMITS commits of small batches into one table, with table
# maintenance on and then off, through the same Committer and IcebergTarget `floe run` uses
# (`floe bench commits`: a stream's time replayed at one commit per 10 s of stream time, so
# hours close as it goes; compaction, manifest rewrite and expiry at their defaults, the
# maintenance planner looking every 6 commits), then PyIceberg's scan planning time on each table.
# Prints one table: commit latency p50/p99 over the 100 commits up to commit 100 and up to the
# last, the maintenance looks' times, snapshots, manifests in the current snapshot,
# metadata.json size, data files per closed hour (max) and in the open hour, plan time.
#
#   loadtest/soak.sh [--commits 2000] [--release] [--dir DIR]
#
# Commits run as fast as the committer goes (milliseconds apart, not 10 s apart), so the snapshot
# retention is scaled down to 2 s: what matters is that the snapshot count stays bounded, as a
# 1 h retention bounds it at a 10 s freshness (docs/operations.md, "Table maintenance").
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
commits=2000 profile=debug dir=""
while [ $# -gt 0 ]; do
  case "$1" in
    --commits) commits="$2"; shift 2 ;;
    --release) profile=release; shift ;;
    --dir) dir="$2"; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
target="${CARGO_TARGET_DIR:-$root/target}/$profile"
floe="${FLOE_BIN:-$target/floe}"
py="${FLOE_PYTHON:-$root/.venv/bin/python}"
[ -x "$floe" ] || { echo "build floe first (cargo build --bins)" >&2; exit 2; }
dir="${dir:-$(mktemp -d)}"
mkdir -p "$dir"
for mode in on off; do
  rm -rf "$dir/$mode"
  "$floe" bench commits --dir "$dir/$mode" --commits "$commits" --maintenance "$mode" \
    --snapshot-retention 2s --min-snapshots 10 >"$dir/$mode.jsonl"
  "$py" "$root/loadtest/soak_plan.py" "$dir/$mode/catalog.sqlite" bench.events >>"$dir/$mode.jsonl"
done
"$py" - "$dir" "$commits" <<'PY'
import json, sys
d, n = sys.argv[1], sys.argv[2]
print(f"| maintenance | commit p50/p99 ms @100 | commit p50/p99 ms @{n} | look p50/p99/max ms | snapshots "
      f"| manifests | metadata.json | files/closed hour max | files in the open hour | plan s |")
print("|---|---|---|---|---|---|---|---|---|---|")
for mode in ("on", "off"):
    lines = [json.loads(l) for l in open(f"{d}/{mode}.jsonl")]
    w = {l["window"]: l for l in lines if "window" in l}
    looks = next(l for l in lines if "maintenance_looks" in l)
    shape = next(l for l in lines if "snapshots" in l)
    plan = next(l for l in lines if "plan_s" in l)
    b = w[f"commit {n}"]
    a = w.get("commit 100", b)
    look = f"{looks['p50_ms']}/{looks['p99_ms']}/{looks['max_ms']}" if looks["maintenance_looks"] and mode == "on" else "-"
    print(f"| {mode} | {a['p50_ms']}/{a['p99_ms']} | {b['p50_ms']}/{b['p99_ms']} | {look} | {shape['snapshots']} "
          f"| {shape['manifests']} | {shape['metadata_json_bytes']} B | {shape['closed_hour_files_max']} "
          f"| {shape['data_files_per_hour_max']} | {plan['plan_s']} |")
PY
