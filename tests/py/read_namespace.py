#!/usr/bin/env python3
"""Independent reader for floe's routing tests: every table of a namespace of floe's SQLite
catalog, read with PyIceberg in one process.

Usage: read_namespace.py CATALOG_SQLITE WAREHOUSE_DIR NAMESPACE

Prints one JSON object: {table name: {rows, distinct_ids, ids (sorted), commits (snapshots
whose summary carries floe.commit-id), owner (the floe.channel property)}}.
"""
import json
import os
import sys

from pyiceberg.catalog.sql import SqlCatalog


def main():
    catalog, warehouse, namespace = sys.argv[1:4]
    cat = SqlCatalog(
        "floe",
        uri=f"sqlite:///{catalog}",
        warehouse=f"file://{os.path.abspath(warehouse)}",
    )
    out = {}
    for ident in cat.list_tables(namespace):
        t = cat.load_table(ident)
        arrow = t.scan().to_arrow()
        ids = sorted(arrow.column("id").to_pylist()) if arrow.num_rows else []
        commits = sum(
            1
            for s in t.metadata.snapshots
            if s.summary and "floe.commit-id" in s.summary.additional_properties
        )
        out[ident[-1]] = {
            "rows": arrow.num_rows,
            "distinct_ids": len(set(ids)),
            "ids": ids,
            "commits": commits,
            "owner": t.properties.get("floe.channel"),
        }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
