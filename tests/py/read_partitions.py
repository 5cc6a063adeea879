#!/usr/bin/env python3
"""Independent check of a table's partition values for floe's integration tests: opens floe's
SQLite catalog with PyIceberg, reads every data file of the current snapshot, applies
PyIceberg's own transforms (pyiceberg.transforms: IdentityTransform, DayTransform,
BucketTransform, ...) to each row's source values, and compares them with the partition tuple
the file's manifest entry carries. Prints one JSON object.

Usage: read_partitions.py CATALOG_SQLITE WAREHOUSE_DIR NAMESPACE.TABLE [--catalog-name floe]

Output keys: spec ([{source, transform, name}]), files, rows, tuples (distinct partition tuples),
mismatches (up to 20 {file, field, row_value, expected, recorded}), mixed_files (files whose
rows span several tuples), sort_order ([{source, direction, null_order}]), unsorted_files (files
whose rows are not in the table's sort order, as pyarrow sorts them), file_sort_order_ids (the
distinct sort_order_id of the data files), files_without_sort_order_id.
"""
import argparse
import datetime
import json
import os
import sys

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from read_table import open_catalog  # noqa: E402

EPOCH = datetime.date(1970, 1, 1)


def internal(value):
    """A partition value as Iceberg stores it (date as days since the epoch)."""
    if isinstance(value, datetime.date) and not isinstance(value, datetime.datetime):
        return (value - EPOCH).days
    return value


def is_sorted(table, order):
    """Whether the rows of `table` (pyarrow) are in `order` ([(column, direction, null order)]),
    as pyarrow's own sort of the same rows puts them (pyarrow places nulls alike for every key:
    the first key's null order)."""
    keys = [(n, "descending" if "desc" in d.lower() else "ascending") for n, d, _ in order]
    placement = "at_start" if "first" in order[0][2].lower() else "at_end"
    idx = pc.sort_indices(table, sort_keys=keys, null_placement=placement)
    resorted = table.take(idx)
    return all(
        table.column(n).to_pylist() == resorted.column(n).to_pylist() for n, _, _ in order
    )


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("catalog")
    ap.add_argument("warehouse")
    ap.add_argument("table")
    ap.add_argument("--catalog-name", default="floe")
    a = ap.parse_args()
    t = open_catalog(a.catalog, a.warehouse, a.catalog_name).load_table(a.table)
    schema = t.schema()
    terms = []
    for pf in t.spec().fields:
        field = schema.find_field(pf.source_id)
        terms.append((field.name, pf.name, str(pf.transform), pf.transform.transform(field.field_type)))
    order = [
        (schema.find_field(f.source_id).name, str(f.direction), str(f.null_order))
        for f in t.sort_order().fields
    ]
    files = [task.file for task in t.scan().plan_files()]
    rows = 0
    tuples = set()
    mismatches = []
    mixed = 0
    unsorted = 0
    for f in files:
        recorded = tuple(internal(f.partition[i]) for i in range(len(terms)))
        tuples.add(recorded)
        with t.io.new_input(f.file_path).open() as stream:
            table = pq.read_table(stream)
        rows += table.num_rows
        seen = set()
        columns = {}
        for source, _, _, _ in terms:
            col = table.column(source)
            if pa.types.is_timestamp(col.type):
                col = col.cast(pa.int64())  # µs since the epoch, what the transforms take
            columns[source] = col.to_pylist()
        for r in range(table.num_rows):
            expected = tuple(fn(columns[source][r]) for source, _, _, fn in terms)
            seen.add(expected)
            for i, (source, name, _, _) in enumerate(terms):
                if expected[i] != recorded[i] and len(mismatches) < 20:
                    mismatches.append(
                        {
                            "file": f.file_path,
                            "field": name,
                            "row_value": str(columns[source][r]),
                            "expected": str(expected[i]),
                            "recorded": str(recorded[i]),
                        }
                    )
        if len(seen) > 1:
            mixed += 1
        if order and not is_sorted(table, order):
            unsorted += 1
    out = {
        "spec": [{"source": s, "transform": tr, "name": n} for s, n, tr, _ in terms],
        "files": len(files),
        "rows": rows,
        "tuples": len(tuples),
        "mismatches": mismatches,
        "mixed_files": mixed,
        "sort_order": [{"source": n, "direction": d, "null_order": o} for n, d, o in order],
        "unsorted_files": unsorted,
        "file_sort_order_ids": sorted({f.sort_order_id for f in files if f.sort_order_id is not None}),
        "files_without_sort_order_id": sum(1 for f in files if f.sort_order_id is None),
    }
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
