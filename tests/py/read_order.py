#!/usr/bin/env python3
"""Independent reader for floe's resharding test: opens floe's SQLite catalog with PyIceberg and
prints, as one JSON object, every row of the current snapshot in commit order, so the Rust test
can check per-key ordering across parent and child shards.

Usage: read_order.py CATALOG_SQLITE WAREHOUSE_DIR NAMESPACE.TABLE [--catalog-name floe]

Output: {"rows": [[data_sequence_number, file_path, row_position, id, attrs], ...],
         "properties": {...}}
Rows are listed per data file referenced by the current snapshot (live manifest entries only),
files ordered by the data sequence number of the commit that added them, then by path (floe's
file names carry the batch id, a UUIDv7, so files of one commit sort in hand-off order), rows in
file order. Files are opened through the table's FileIO, never by listing the data directory.
"""
import argparse
import json
import sys

import pyarrow.parquet as pq
from pyiceberg.catalog.sql import SqlCatalog


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("catalog")
    ap.add_argument("warehouse")
    ap.add_argument("table")
    ap.add_argument("--catalog-name", default="floe")
    a = ap.parse_args()
    cat = SqlCatalog(a.catalog_name, uri=f"sqlite:///{a.catalog}", warehouse=f"file://{a.warehouse}")
    t = cat.load_table(a.table)
    snap = t.current_snapshot()
    files = []
    if snap is not None:
        for manifest in snap.manifests(t.io):
            for entry in manifest.fetch_manifest_entry(t.io, discard_deleted=True):
                files.append((entry.sequence_number, entry.data_file.file_path))
    files.sort()
    rows = []
    for seq, path in files:
        with t.io.new_input(path).open() as f:
            data = pq.read_table(f, columns=["id", "attrs"]).to_pylist()
        for pos, row in enumerate(data):
            attrs = row["attrs"]
            if isinstance(attrs, list):  # map columns arrive as (key, value) pairs
                attrs = dict(attrs)
            rows.append([seq, path, pos, row["id"], attrs])
    json.dump({"rows": rows, "properties": dict(t.properties)}, sys.stdout)


if __name__ == "__main__":
    main()
