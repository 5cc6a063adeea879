#!/usr/bin/env python3
"""Independent reader for floe's maintenance tests: opens floe's SQLite catalog with PyIceberg and
reads every retained snapshot of a table (time travel), printing one JSON object.

Usage: table_snapshots.py CATALOG_SQLITE WAREHOUSE_DIR NAMESPACE.TABLE [--catalog-name floe]

Output: {"current": id, "snapshots": [{"id", "parent", "operation", "summary", "rows",
"digest" (sha256 of the sorted rows, every column rendered as JSON), "ids" (sorted id column),
"files_by_partition" ({partition: data files})}] sorted by sequence number}.
"""
import argparse
import hashlib
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from read_table import open_catalog, render  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("catalog")
    ap.add_argument("warehouse")
    ap.add_argument("table")
    ap.add_argument("--catalog-name", default="floe")
    args = ap.parse_args()
    table = open_catalog(args.catalog, args.warehouse, args.catalog_name).load_table(args.table)
    current = table.current_snapshot()
    out = {"current": current.snapshot_id if current else None, "snapshots": []}
    for snap in sorted(table.metadata.snapshots, key=lambda s: s.sequence_number):
        scan = table.scan(snapshot_id=snap.snapshot_id)
        rows = [json.dumps(render(r), sort_keys=True) for r in scan.to_arrow().to_pylist()]
        rows.sort()
        files = {}
        for task in scan.plan_files():
            key = str(task.file.partition)
            files[key] = files.get(key, 0) + 1
        summary = snap.summary
        out["snapshots"].append(
            {
                "id": snap.snapshot_id,
                "parent": snap.parent_snapshot_id,
                "operation": summary.operation.value if summary else None,
                "summary": {k: v for k, v in (summary.additional_properties if summary else {}).items()},
                "rows": len(rows),
                "digest": hashlib.sha256("\n".join(rows).encode()).hexdigest(),
                "ids": sorted(json.loads(r)["id"] for r in rows),
                "files_by_partition": files,
            }
        )
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
