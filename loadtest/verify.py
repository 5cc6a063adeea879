#!/usr/bin/env python3
"""Reconcile an Iceberg table and a DLQ against floe-loadgen manifests, by id.

Reads the table with PyIceberg (floe's SQLite catalog; local or s3:// warehouse) — only the data
files the current snapshot references, each with its partition tuple — and the published
DLQ entries (local directory or S3 prefix), then checks:

  manifest      every manifest is complete and the sink acknowledged every record
  missing       every produced id is in the table or the DLQ
  duplicated    no id is there twice (table and DLQ together)
  unexpected    no id that no manifest produced
  bad in table  no record meant for the DLQ is in the table
  good in DLQ   no valid record is in the DLQ
  DLQ <CODE>    the DLQ holds exactly the ids expected under each error code
  partition     every row's partition values (PyIceberg's transforms of its source values, any
                spec) equal its data file's partition tuple
  deletes       the snapshot has no delete files (floe only appends)

Usage:
  verify.py --manifest M.jsonl [--manifest ...] --catalog CATALOG.sqlite --warehouse DIR|s3://B/P
            --table NS.TABLE --dlq DIR|s3://BUCKET/PREFIX --channel NAME
            [--s3-endpoint URL] [--catalog-name floe]
            [--wait-seconds N]   (first wait until rows + DLQ entries reach the produced count)
            [--json FILE]        (also write the figures as JSON)

Prints one line per check (`PASS name: detail` / `FAIL name: detail`), a figures line
`records R, delivered D, dead-lettered Q, missing M, duplicated U, wrong-partition P`, and last
`N passed, N failed`. Exit status 0 only when every check passes.
"""
import argparse
import collections
import datetime
import json
import os
import sys
import time

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "py"))
from read_table import open_catalog  # noqa: E402  (the integration tests' PyIceberg reader)

EPOCH = datetime.date(1970, 1, 1)


def load_manifests(paths):
    """Returns (ids: set, bad: {code: set}, problems: [str], records: int)."""
    ids, bad, problems, records = set(), collections.defaultdict(set), [], 0
    for path in paths:
        header = done = None
        with open(path, encoding="utf-8") as f:
            for line in f:
                d = json.loads(line)
                if d["kind"] == "header":
                    header = d
                elif d["kind"] == "bad":
                    bad[d["code"]].update(d["ids"])
                elif d["kind"] == "done":
                    done = d
        if header is None or done is None:
            problems.append(f"{path}: incomplete (no header or done line)")
            continue
        start, n = header["start_id"], header["records"]
        new = set(range(start, start + n))
        if ids & new:
            problems.append(f"{path}: ids overlap another manifest")
        ids |= new
        records += n
        if done["acknowledged"] != n or done["failed_ids"]:
            problems.append(
                f"{path}: {n - done['acknowledged']} records not acknowledged, failed ids {done['failed_ids'][:10]}"
            )
    return ids, bad, problems, records


def s3_client(endpoint):
    import boto3

    return boto3.client(
        "s3",
        endpoint_url=endpoint or None,
        region_name=os.environ.get("AWS_REGION", "us-east-1"),
    )


def read_dlq(location, channel, endpoint):
    """Published DLQ entries of `channel` (staged ones are not published yet)."""
    entries = []
    if location.startswith("s3://"):
        bucket, _, prefix = location[5:].partition("/")
        prefix = f"{prefix}{channel}/"
        s3 = s3_client(endpoint)
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
            for obj in page.get("Contents", []):
                if not obj["Key"].endswith(".jsonl"):
                    continue
                body = s3.get_object(Bucket=bucket, Key=obj["Key"])["Body"].read().decode()
                entries += [json.loads(l) for l in body.splitlines() if l]
    else:
        d = os.path.join(location, channel)
        if os.path.isdir(d):
            for name in sorted(os.listdir(d)):
                if name.endswith(".jsonl"):
                    with open(os.path.join(d, name), encoding="utf-8") as f:
                        entries += [json.loads(l) for l in f if l.strip()]
    return entries


def open_table(a):
    return open_catalog(a.catalog, a.warehouse, a.catalog_name, a.s3_endpoint).load_table(a.table)


def table_rows(a):
    """Rows of the current snapshot (summary total-records), 0 when the table is missing."""
    try:
        t = open_table(a)
    except Exception:
        return 0
    snap = t.current_snapshot()
    if snap is None or snap.summary is None:
        return 0
    return int(snap.summary.additional_properties.get("total-records", 0))


def internal(value):
    """A partition value as Iceberg stores it (a date as days since the epoch)."""
    if isinstance(value, datetime.date) and not isinstance(value, datetime.datetime):
        return (value - EPOCH).days
    return value


def read_table(a):
    """(ids: list, wrong: [(id, field, expected, recorded)], delete_files: int, data_files: int).

    Every row's partition tuple, computed with PyIceberg's own transforms of its source values
    (any spec: identity, year, month, day, hour, bucket, truncate, void), against the tuple its
    data file's manifest entry records."""
    t = open_table(a)
    ids, wrong, deletes, files = [], [], 0, 0
    if t.current_snapshot() is None:
        return ids, wrong, deletes, files
    schema = t.schema()
    terms = []
    for pf in t.spec().fields:
        field = schema.find_field(pf.source_id)
        terms.append((field.name, pf.name, pf.transform.transform(field.field_type)))
    sources = sorted({source for source, _, _ in terms} | {"id"})
    for task in t.scan().plan_files():
        files += 1
        deletes += len(task.delete_files)
        with t.io.new_input(task.file.file_path).open() as f:
            data = pq.read_table(f, columns=sources)
        file_ids = data.column("id").to_pylist()
        ids += file_ids
        columns = {}
        for source in sources:
            col = data.column(source)
            if pa.types.is_timestamp(col.type):
                col = pc.cast(pc.cast(col, pa.timestamp("us", tz="UTC")), pa.int64())
            columns[source] = col.to_pylist()
        for k, (source, name, fn) in enumerate(terms):
            recorded = internal(task.file.partition[k])
            for i, v in zip(file_ids, columns[source]):
                expected = fn(v)
                if expected != recorded:
                    wrong.append((i, name, expected, recorded))
    return ids, wrong, deletes, files


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--manifest", action="append", required=True)
    ap.add_argument("--catalog", required=True)
    ap.add_argument("--warehouse", required=True)
    ap.add_argument("--table", required=True)
    ap.add_argument("--dlq", required=True)
    ap.add_argument("--channel", required=True)
    ap.add_argument("--catalog-name", default="floe")
    # Accepted for older scripts; the spec's own fields are checked.
    ap.add_argument("--partition-field", default="event_time", help=argparse.SUPPRESS)
    ap.add_argument("--s3-endpoint", default=os.environ.get("FLOE_TEST_AWS_ENDPOINT", ""))
    ap.add_argument("--wait-seconds", type=float, default=0)
    ap.add_argument("--json", default="")
    a = ap.parse_args()

    produced, bad, manifest_problems, records = load_manifests(a.manifest)

    if a.wait_seconds > 0:
        deadline = time.monotonic() + a.wait_seconds
        last = None
        while True:
            rows = table_rows(a)
            dead = len(read_dlq(a.dlq, a.channel, a.s3_endpoint))
            if (rows, dead) != last:
                print(f"waiting: rows {rows} + DLQ {dead} of {records}", file=sys.stderr, flush=True)
                last = (rows, dead)
            if rows + dead >= records or time.monotonic() > deadline:
                break
            time.sleep(2)

    ids, wrong_partition, delete_files, data_files = read_table(a)
    entries = read_dlq(a.dlq, a.channel, a.s3_endpoint)

    seen = collections.Counter(ids)
    dlq_by_code = collections.defaultdict(list)
    unparsed_keys = []
    for e in entries:
        key = e.get("key")
        try:
            i = int(key)
        except (TypeError, ValueError):
            unparsed_keys.append(key)
            continue
        seen[i] += 1
        dlq_by_code[e["error_code"]].append(i)
    all_bad = set().union(*bad.values()) if bad else set()
    table_set = set(ids)
    dlq_set = {i for v in dlq_by_code.values() for i in v}

    missing = produced - seen.keys()
    duplicated = {i: n for i, n in seen.items() if n > 1}
    unexpected = seen.keys() - produced
    bad_in_table = all_bad & table_set
    good_in_dlq = dlq_set - all_bad

    checks = []

    def check(name, ok, detail):
        checks.append((name, ok, detail))

    def sample(s):
        s = sorted(s)
        return f"{len(s)}" + (f" (e.g. {s[:8]})" if s else "")

    check("manifest", not manifest_problems, "; ".join(manifest_problems) or f"{len(a.manifest)} complete, {records} records acknowledged")
    check("missing", not missing, sample(missing))
    check("duplicated", not duplicated, f"{len(duplicated)}" + (f" (e.g. {sorted(duplicated.items())[:8]})" if duplicated else ""))
    check("unexpected", not unexpected and not unparsed_keys, sample(unexpected) + (f", DLQ keys not ids: {unparsed_keys[:5]}" if unparsed_keys else ""))
    check("bad in table", not bad_in_table, sample(bad_in_table))
    check("good in DLQ", not good_in_dlq, sample(good_in_dlq))
    for code in sorted(set(bad) | set(dlq_by_code)):
        want, got = bad.get(code, set()), set(dlq_by_code.get(code, []))
        ok = want == got and len(dlq_by_code.get(code, [])) == len(got)
        detail = f"expected {len(want)}, found {len(dlq_by_code.get(code, []))}"
        if want != got:
            detail += f"; missing {sample(want - got)}, extra {sample(got - want)}"
        check(f"DLQ {code}", ok, detail)
    check("partition", not wrong_partition, f"{len(wrong_partition)} partition values that are not the transform of their row" + (f" (e.g. {wrong_partition[:5]})" if wrong_partition else f" of {len(ids)} rows in {data_files} data files"))
    check("deletes", delete_files == 0, f"{delete_files} delete files")

    for name, ok, detail in checks:
        print(f"{'PASS' if ok else 'FAIL'} {name}: {detail}")
    figures = {
        "records": records,
        "delivered": len(ids),
        "dead_lettered": len(entries),
        "missing": len(missing),
        "duplicated": len(duplicated),
        "wrong_partition": len(wrong_partition),
        "data_files": data_files,
        "passed": sum(ok for _, ok, _ in checks),
        "failed": sum(not ok for _, ok, _ in checks),
    }
    print(
        f"records {records}, delivered {len(ids)}, dead-lettered {len(entries)}, "
        f"missing {len(missing)}, duplicated {len(duplicated)}, wrong-partition {len(wrong_partition)}"
    )
    print(f"{figures['passed']} passed, {figures['failed']} failed")
    if a.json:
        with open(a.json, "w", encoding="utf-8") as f:
            json.dump(figures, f)
    sys.exit(1 if figures["failed"] else 0)


if __name__ == "__main__":
    main()
