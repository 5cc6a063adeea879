#!/usr/bin/env python3
"""DuckDB scan time of Iceberg table states (loadtest/upsert_compaction.sh): for each metadata file
given, the best of N timed full scans (`SELECT count(*), sum(hash(id, v))` over `iceberg_scan`), with
the iceberg and avro extensions loaded offline as in read_duckdb.py.

Usage: scan_time.py [--runs N] METADATA_JSON...

Prints one JSON object: {"version": duckdb version, "scans": [{metadata, seconds, rows, checksum}]}
"""
import argparse
import json
import sys
import time

import duckdb

from read_duckdb import connect


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("metadata", nargs="+")
    ap.add_argument("--runs", type=int, default=5)
    a = ap.parse_args()
    con = connect()
    scans = []
    for m in a.metadata:
        best, result = None, None
        for _ in range(a.runs):
            started = time.perf_counter()
            result = con.execute(f"SELECT count(*), sum(hash(id, v)) FROM iceberg_scan('{m}')").fetchone()
            took = time.perf_counter() - started
            best = took if best is None else min(best, took)
        scans.append({"metadata": m, "seconds": best, "rows": result[0], "checksum": str(result[1])})
    json.dump({"version": duckdb.__version__, "scans": scans}, sys.stdout)


if __name__ == "__main__":
    main()
