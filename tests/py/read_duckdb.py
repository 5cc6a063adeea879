#!/usr/bin/env python3
"""Second independent reader for floe's integration tests: DuckDB's iceberg extension
(`iceberg_scan` of the table's current metadata file), loaded offline from the
duckdb-ext-iceberg and duckdb-ext-avro wheels (autoinstall and autoload off).

Usage: read_duckdb.py METADATA_JSON [--where SQL_PREDICATE]

Prints one JSON object: rows, distinct_ids, and with --where, matching (rows the predicate
selects: DuckDB prunes files by their partition values and statistics, so a wrong value loses
rows here) and matching_unpruned (the same count over every row).
"""
import argparse
import glob
import json
import os
import sys

import duckdb


def extension(name):
    """The .duckdb_extension file a duckdb-ext-* wheel installed for this DuckDB version."""
    root = os.path.join(os.path.dirname(duckdb.__file__), "..", "duckdb_ext", "extensions")
    found = glob.glob(os.path.join(root, "v" + duckdb.__version__, "*", name + ".duckdb_extension"))
    if not found:
        sys.exit(f"no {name}.duckdb_extension for DuckDB {duckdb.__version__} under {root}")
    return os.path.abspath(found[0])


def connect():
    """An in-memory DuckDB connection with the avro and iceberg extensions loaded offline."""
    con = duckdb.connect(
        config={
            "autoinstall_known_extensions": False,
            "autoload_known_extensions": False,
            "allow_unsigned_extensions": True,
        }
    )
    con.execute(f"LOAD '{extension('avro')}'")
    con.execute(f"LOAD '{extension('iceberg')}'")
    return con


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("metadata")
    ap.add_argument("--where", default="")
    a = ap.parse_args()
    con = connect()
    scan = f"iceberg_scan('{a.metadata}')"
    rows, distinct = con.execute(f"SELECT count(*), count(DISTINCT id) FROM {scan}").fetchone()
    out = {"rows": rows, "distinct_ids": distinct}
    if a.where:
        # With WHERE, DuckDB prunes files by partition values and column statistics; the
        # CASE sum reads every row. Equal counts mean the pruning lost nothing.
        out["matching"] = con.execute(f"SELECT count(*) FROM {scan} WHERE {a.where}").fetchone()[0]
        out["matching_unpruned"] = con.execute(
            f"SELECT coalesce(sum(CASE WHEN {a.where} THEN 1 ELSE 0 END), 0) FROM {scan}"
        ).fetchone()[0]
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
