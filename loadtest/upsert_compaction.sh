#!/usr/bin/env bash
# DuckDB scan time of a steadily updated upsert table (format v2, position-delete files) against the
# same table compacted with its deletes applied (issue 42, item 6: goal within 1.5x). Runs the
# ignored measurement in tests/it/upsert_maintenance.rs and prints its figures.
#
# Usage: loadtest/upsert_compaction.sh [rounds]   (default 40; FLOE_PYTHON: a Python with
#        DuckDB and its iceberg/avro extensions, see tests/py/read_duckdb.py)
set -euo pipefail
cd "$(dirname "$0")/.."
FLOE_SCAN_ROUNDS="${1:-40}" cargo test --features testsuite --test it -- \
  --ignored --nocapture upsert_maintenance::measure_scan_time 2>&1 | grep -E '^upsert scan:|test result|panicked'
