#!/usr/bin/env python3
"""Independent readers of a table with deletes by position (tests/it/row_delta.rs): PyIceberg through
floe's SQLite catalog, and DuckDB's iceberg extension (`iceberg_scan` of the metadata file, loaded
offline as in read_duckdb.py).

Usage: read_row_delta.py CATALOG_SQLITE WAREHOUSE_DIR NAMESPACE.TABLE [--catalog-name floe]

Prints one JSON object:
  pyiceberg: ids (sorted), format_version, delete_files ([{content, format, record_count}] of
             the scan's tasks, deduplicated by path, content and count), properties, snapshots
             ([summary dicts with operation, first_row_id, added_rows] by sequence number)
  duckdb:    ids (sorted), or error (the message DuckDB raised)
"""
import argparse
import json
import sys

import duckdb

from read_duckdb import extension
from read_table import open_catalog


def pyiceberg_view(table):
    arrow = table.scan().to_arrow()
    deletes = {}
    for task in table.scan().plan_files():
        for f in task.delete_files:
            deletes[(f.file_path, f.content.name, f.record_count)] = {
                "content": f.content.name,
                "format": f.file_format.name,
                "record_count": f.record_count,
            }
    snaps = []
    for s in sorted(table.metadata.snapshots, key=lambda s: s.sequence_number):
        d = {"operation": s.summary.operation.value if s.summary else None}
        if s.summary:
            d.update(s.summary.additional_properties)
        d["first_row_id"] = getattr(s, "first_row_id", None)
        d["added_rows"] = getattr(s, "added_rows", None)
        snaps.append(d)
    return {
        "ids": sorted(arrow.column("id").to_pylist()),
        "format_version": table.metadata.format_version,
        "delete_files": sorted(deletes.values(), key=lambda d: json.dumps(d, sort_keys=True)),
        "properties": dict(table.properties),
        "snapshots": snaps,
    }


def duckdb_view(metadata_location, columns=("id",)):
    """DuckDB's view: the ids (sorted), or with more `columns` the rows as lists."""
    con = duckdb.connect(
        config={
            "autoinstall_known_extensions": False,
            "autoload_known_extensions": False,
            "allow_unsigned_extensions": True,
        }
    )
    con.execute(f"LOAD '{extension('avro')}'")
    con.execute(f"LOAD '{extension('iceberg')}'")
    try:
        names = ", ".join(columns)
        rows = con.execute(f"SELECT {names} FROM iceberg_scan('{metadata_location}') ORDER BY {names}").fetchall()
    except Exception as e:  # the test asserts on what DuckDB says
        return {"error": f"{type(e).__name__}: {e}", "version": duckdb.__version__}
    if len(columns) == 1:
        return {"ids": [r[0] for r in rows], "version": duckdb.__version__}
    return {"rows": [list(r) for r in rows], "version": duckdb.__version__}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("catalog")
    ap.add_argument("warehouse")
    ap.add_argument("table")
    ap.add_argument("--catalog-name", default="floe")
    a = ap.parse_args()
    table = open_catalog(a.catalog, a.warehouse, a.catalog_name).load_table(a.table)
    json.dump({"pyiceberg": pyiceberg_view(table), "duckdb": duckdb_view(table.metadata_location)}, sys.stdout)


if __name__ == "__main__":
    main()
