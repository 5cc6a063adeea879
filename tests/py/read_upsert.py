#!/usr/bin/env python3
"""Independent readers of an upsert table (tests/it/upsert_commit.rs): PyIceberg through floe's SQLite
catalog, and DuckDB's iceberg extension (`iceberg_scan` of the metadata file, loaded offline as in
read_duckdb.py).

Usage: read_upsert.py CATALOG_SQLITE WAREHOUSE_DIR NAMESPACE.TABLE [--catalog-name floe]

Prints one JSON object:
  pyiceberg: rows ([id, v] sorted by id), format_version, delete_files ([{path, content, format,
             record_count}] of the scan's tasks, deduplicated), data_files (paths the scan reads)
  duckdb:    rows ([id, v] sorted by id), or error (the message DuckDB raised), version
"""
import argparse
import json
import sys

import duckdb

from read_duckdb import extension
from read_table import open_catalog


def pyiceberg_view(table):
    arrow = table.scan().to_arrow()
    rows = sorted(zip(arrow.column("id").to_pylist(), arrow.column("v").to_pylist()))
    deletes = {}
    data_files = []
    for task in table.scan().plan_files():
        data_files.append(task.file.file_path)
        for f in task.delete_files:
            deletes[(f.file_path, task.file.file_path, f.content.name, f.record_count)] = {
                "path": f.file_path,
                "content": f.content.name,
                "format": f.file_format.name,
                "record_count": f.record_count,
                "data_file": task.file.file_path,
            }
    return {
        "rows": [list(r) for r in rows],
        "format_version": table.metadata.format_version,
        "delete_files": sorted(deletes.values(), key=lambda d: json.dumps(d, sort_keys=True)),
        "data_files": sorted(data_files),
    }


def duckdb_view(metadata_location):
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
        rows = con.execute(f"SELECT id, v FROM iceberg_scan('{metadata_location}') ORDER BY id, v").fetchall()
    except Exception as e:  # the test asserts on what DuckDB says
        return {"error": f"{type(e).__name__}: {e}", "version": duckdb.__version__}
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
