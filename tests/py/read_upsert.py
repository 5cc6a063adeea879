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

from read_row_delta import duckdb_view
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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("catalog")
    ap.add_argument("warehouse")
    ap.add_argument("table")
    ap.add_argument("--catalog-name", default="floe")
    a = ap.parse_args()
    table = open_catalog(a.catalog, a.warehouse, a.catalog_name).load_table(a.table)
    json.dump({"pyiceberg": pyiceberg_view(table), "duckdb": duckdb_view(table.metadata_location, ("id", "v"))}, sys.stdout)


if __name__ == "__main__":
    main()
