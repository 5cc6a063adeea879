#!/usr/bin/env python3
"""The peer of loadtest/cdc.sh: PyIceberg's `Table.upsert` applying the change events of
`floe-loadgen file --changes` to an Iceberg table, batch by batch, as floe's upsert mode does.

Input: one Kafka value a line (Debezium JSON, bare or `{"schema":…,"payload":…}`; a tombstone is
the line `null` and is skipped). Per batch of `--batch` events: the last event of each key wins
(as floe keeps it); in ONE transaction, keys whose last event is a delete are deleted
(`Transaction.delete(In("id", …))`) and the other keys' `after` rows are upserted
(`Transaction.upsert(rows, join_cols=["id"])`: PyIceberg finds the matching rows by scanning the
table, rewrites the files holding them without them (copy-on-write) and appends the new rows).
A batch never straddles the end of the initial snapshot (op `r`), so the snapshot and the change
events are timed apart.

The table: a SQLite catalog and a local warehouse in --work (created afresh), format v2,
unpartitioned, `id` its identifier field, the columns of loadtest/cdc_row.schema.json.

Usage: cdc_peer.py --events FILE --work DIR [--batch 50000] [--limit N] [--table peer.customers]

Prints one JSON line: events, snapshot_events, snapshot_s, change_events, change_s,
change_events_per_s, events_per_s (all events over all time), batches, batch, commit_p50_s,
commit_max_s, rows (the table's rows at the end), catalog, warehouse, table.
"""
import argparse
import datetime
import json
import os
import shutil
import sys
import time

import pyarrow as pa
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.expressions import In
from pyiceberg.schema import Schema
from pyiceberg.types import DoubleType, LongType, NestedField, StringType, TimestamptzType

SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=True),
    NestedField(2, "name", StringType(), required=True),
    NestedField(3, "email", StringType(), required=False),
    NestedField(4, "tier", StringType(), required=True),
    NestedField(5, "balance", DoubleType(), required=True),
    NestedField(6, "version", LongType(), required=True),
    NestedField(7, "updated_at", TimestamptzType(), required=True),
    identifier_field_ids=[1],
)
ARROW = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("name", pa.string(), nullable=False),
        pa.field("email", pa.string(), nullable=True),
        pa.field("tier", pa.string(), nullable=False),
        pa.field("balance", pa.float64(), nullable=False),
        pa.field("version", pa.int64(), nullable=False),
        pa.field("updated_at", pa.timestamp("us", tz="UTC"), nullable=False),
    ]
)


def parse_ts(text):
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))


def read_events(path, limit):
    """[(op, id, after row or None)] in file order (tombstones skipped)."""
    out = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            d = json.loads(line)
            if d is None:
                continue
            if "payload" in d and "schema" in d:
                d = d["payload"]
            op = d["op"]
            row = d["after"] if op != "d" else None
            key = (d["before"] if op == "d" else row)["id"]
            out.append((op, key, row))
            if limit and len(out) >= limit:
                break
    return out


def batches(events, size):
    """Slices of at most `size` events; the snapshot (op r) and the changes never share one."""
    start = 0
    while start < len(events):
        end = min(start + size, len(events))
        snap = events[start][0] == "r"
        for i in range(start, end):
            if (events[i][0] == "r") != snap:
                end = i
                break
        yield snap, events[start:end]
        start = end


def apply(table, batch):
    """One transaction: the batch's deletes and upserts (last event per key)."""
    last = {}
    for _, key, row in batch:
        last[key] = row
    deleted = [k for k, row in last.items() if row is None]
    rows = [row for row in last.values() if row is not None]
    with table.transaction() as tx:
        if deleted:
            tx.delete(In("id", deleted))
        if rows:
            for r in rows:
                r["updated_at"] = parse_ts(r["updated_at"])
            tx.upsert(pa.Table.from_pylist(rows, schema=ARROW), join_cols=["id"])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--events", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--batch", type=int, default=50_000)
    ap.add_argument("--limit", type=int, default=0, help="only the first N events")
    ap.add_argument("--table", default="peer.customers")
    a = ap.parse_args()

    events = read_events(a.events, a.limit)
    shutil.rmtree(a.work, ignore_errors=True)
    os.makedirs(os.path.join(a.work, "warehouse"))
    catalog_path = os.path.join(a.work, "catalog.sqlite")
    catalog = SqlCatalog(
        "peer", uri=f"sqlite:///{catalog_path}", warehouse=f"file://{os.path.abspath(a.work)}/warehouse"
    )
    ns = a.table.split(".")[0]
    catalog.create_namespace(ns)
    table = catalog.create_table(a.table, schema=SCHEMA, properties={"format-version": "2"})

    spent = {True: 0.0, False: 0.0}
    counted = {True: 0, False: 0}
    commits = []
    for snap, batch in batches(events, a.batch):
        t = time.perf_counter()
        apply(table, batch)
        dt = time.perf_counter() - t
        spent[snap] += dt
        counted[snap] += len(batch)
        commits.append(dt)
        print(
            f"cdc_peer: {'snapshot' if snap else 'changes'} batch of {len(batch)} events in {dt:.2f} s",
            file=sys.stderr,
            flush=True,
        )
    commits.sort()
    total_s = spent[True] + spent[False]
    table = catalog.load_table(a.table)
    rows = table.scan().to_arrow().num_rows
    print(
        json.dumps(
            {
                "events": len(events),
                "snapshot_events": counted[True],
                "snapshot_s": spent[True],
                "change_events": counted[False],
                "change_s": spent[False],
                "change_events_per_s": counted[False] / spent[False] if spent[False] else None,
                "events_per_s": len(events) / total_s if total_s else None,
                "batches": len(commits),
                "batch": a.batch,
                "commit_p50_s": commits[len(commits) // 2] if commits else None,
                "commit_max_s": commits[-1] if commits else None,
                "rows": rows,
                "catalog": catalog_path,
                "warehouse": os.path.join(os.path.abspath(a.work), "warehouse"),
                "table": a.table,
            }
        )
    )


if __name__ == "__main__":
    main()
