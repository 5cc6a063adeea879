#!/usr/bin/env python3
"""Check an upsert (change data capture) table against the final state of the change events
`floe-loadgen --changes` produced (its manifest: per key the row of its last event, or deleted).

Reads the table's current snapshot with PyIceberg and with DuckDB's iceberg extension (DuckDB
1.4.4, loaded offline as tests/py/read_duckdb.py does; it reads format v3's deletion vectors
too), and its manifests directly:

  manifest         the manifests are complete and the sink acknowledged every message
  <reader> keys    no key twice
  <reader> deleted no key whose last event deleted it is alive
  <reader> missing every live key is there
  <reader> unexpected no key that was never produced
  <reader> values  every live key's row equals its last event's row, column by column
  equality deletes no delete file has content 2 (equality): floe deletes by position
  deletes per file at most one live delete file (position-delete file or deletion vector)
                   references each data file
  DLQ              (with --dlq) no DLQ entry: change events are all valid, and a tombstone is
                   never one

Usage:
  verify_cdc.py --manifest M.jsonl [--manifest M2.jsonl] --catalog CATALOG.sqlite
                --warehouse DIR|s3://B/P --table NS.TABLE [--catalog-name floe]
                [--dlq DIR|s3://BUCKET/PREFIX --channel NAME]
                [--s3-endpoint URL] [--wait-seconds N] [--json FILE] [--no-duckdb]

Several manifests: runs that produced to the same topic in turn (cdc.sh: the snapshot, then the
changes); the expected state is the last one's, acknowledgements and per-partition message counts
add up. --wait-seconds: first wait until the table's `floe.checkpoints` reach the last offset of
every Kafka partition the manifests produced to (offsets from 0).

Prints one line per check (`PASS name: detail` / `FAIL name: detail`), `INFO` lines, a figures line
`keys K, live L, deleted D, rows R, data files F, delete files X (position P, deletion vectors V,
equality E)` and last `N passed, N failed`. Exit status 0 only when every check passes.
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

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from verify import read_dlq  # noqa: E402  (verify.py's DLQ reader: local or S3)


def load_manifests(paths):
    """(expected: {id: row}, deleted: set, produced_ids: set, offsets: {partition: messages},
    problems: [str], header: dict)."""
    expected, deleted, problems, offsets, header = {}, set(), [], collections.Counter(), None
    for path in paths:
        header = done = None
        rows, gone = {}, set()
        with open(path, encoding="utf-8") as f:
            for line in f:
                d = json.loads(line)
                kind = d["kind"]
                if kind == "header":
                    header = d
                elif kind == "row":
                    rows[d["row"]["id"]] = d["row"]
                elif kind == "deleted":
                    gone.update(d["ids"])
                elif kind == "done":
                    done = d
        if header is None or done is None or header.get("mode") != "changes":
            problems.append(f"{path}: incomplete or not a --changes manifest")
            continue
        if done["acknowledged"] != done["messages"] or done["failed_messages"]:
            problems.append(
                f"{path}: {done['messages'] - done['acknowledged']} messages not acknowledged, "
                f"failed {done['failed_messages'][:10]}"
            )
        offsets.update({int(p): n for p, n in done["per_shard"].items()})
        expected, deleted = rows, gone  # the last manifest's state includes the earlier runs'
    return expected, deleted, offsets, problems, header


def open_table(a):
    return open_catalog(a.catalog, a.warehouse, a.catalog_name, a.s3_endpoint).load_table(a.table)


def wait_for_offsets(a, offsets):
    """Polls `floe.checkpoints` until every partition's checkpoint is its last offset."""
    deadline = time.monotonic() + a.wait_seconds
    last = None
    while True:
        try:
            cp = json.loads(open_table(a).properties.get("floe.checkpoints", "{}"))
        except Exception:  # no table yet
            cp = {}
        behind = {p: n - 1 - int(cp.get(str(p), -1)) for p, n in offsets.items()}
        lag = sum(max(0, b) for b in behind.values())
        if lag != last:
            print(f"waiting: {lag} messages not yet committed", file=sys.stderr, flush=True)
            last = lag
        if lag == 0 or time.monotonic() > deadline:
            return lag
        time.sleep(2)


def normalize(table):
    """An Arrow table as {id: row}: timestamps as microseconds since the epoch. Also the ids in
    read order (duplicates kept)."""
    columns = {}
    for name in table.column_names:
        col = table.column(name)
        if pa.types.is_timestamp(col.type):
            col = pc.cast(pc.cast(col, pa.timestamp("us", tz="UTC")), pa.int64())
        columns[name] = col.to_pylist()
    ids = columns["id"]
    rows = {}
    names = list(columns)
    for i, key in enumerate(ids):
        rows[key] = {n: columns[n][i] for n in names}
    return ids, rows


def expected_value(value, actual):
    """The manifest's JSON value as the reader returns it (a date-time string as microseconds)."""
    if isinstance(value, str) and isinstance(actual, int) and not isinstance(actual, bool):
        t = datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
        epoch = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)
        delta = t - epoch
        return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
    return value


def compare(reader, ids, rows, expected, deleted, check):
    counts = collections.Counter(ids)
    twice = {k: n for k, n in counts.items() if n > 1}
    alive = deleted & counts.keys()
    missing = expected.keys() - counts.keys()
    unexpected = counts.keys() - expected.keys() - deleted
    wrong = []
    for key, want in expected.items():
        got = rows.get(key)
        if got is None:
            continue
        diff = {c: (got.get(c), v) for c, v in want.items() if expected_value(v, got.get(c)) != got.get(c)}
        if diff:
            wrong.append((key, diff))

    def sample(s):
        s = sorted(s)
        return f"{len(s)}" + (f" (e.g. {s[:8]})" if s else "")

    check(f"{reader} keys", not twice, f"{len(twice)} keys more than once" + (f" (e.g. {sorted(twice.items())[:8]})" if twice else f", {len(ids)} rows"))
    check(f"{reader} deleted", not alive, sample(alive) + " deleted keys alive")
    check(f"{reader} missing", not missing, sample(missing) + " live keys missing")
    check(f"{reader} unexpected", not unexpected, sample(unexpected) + " keys never produced")
    check(f"{reader} values", not wrong, f"{len(wrong)} rows not their last event's" + (f" (e.g. {wrong[:3]})" if wrong else f", {len(expected)} compared"))


def delete_files(table, io):
    """Live manifest entries of the current snapshot: (data files [path], delete files
    [(content, format, path, referenced data files)])."""
    snap = table.current_snapshot()
    data, deletes = [], []
    if snap is None:
        return data, deletes
    for manifest in snap.manifests(io):
        for entry in manifest.fetch_manifest_entry(io, discard_deleted=True):
            f = entry.data_file
            content = int(f.content)
            if content == 0:
                data.append(f.file_path)
                continue
            refs = set()
            ref = getattr(f, "referenced_data_file", None)
            if ref:
                refs.add(ref)
            elif content == 1 and f.file_format.name == "PARQUET":
                with io.new_input(f.file_path).open() as fh:
                    refs.update(pc.unique(pq.read_table(fh, columns=["file_path"]).column("file_path")).to_pylist())
            deletes.append((content, f.file_format.name, f.file_path, refs))
    return data, deletes


def duckdb_rows(metadata_location):
    """DuckDB's rows of the table, or the exception it raised."""
    import duckdb
    from read_duckdb import connect

    con = connect()
    try:
        return con.execute(f"SELECT * FROM iceberg_scan('{metadata_location}')").fetch_arrow_table(), None
    except Exception as e:
        return None, f"{type(e).__name__}: {str(e).splitlines()[0]} (DuckDB {duckdb.__version__})"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--manifest", action="append", required=True)
    ap.add_argument("--catalog", required=True)
    ap.add_argument("--warehouse", required=True)
    ap.add_argument("--table", required=True)
    ap.add_argument("--catalog-name", default="floe")
    ap.add_argument("--s3-endpoint", default=os.environ.get("FLOE_TEST_AWS_ENDPOINT", ""))
    ap.add_argument("--wait-seconds", type=float, default=0)
    ap.add_argument("--json", default="")
    ap.add_argument("--no-duckdb", action="store_true", help="PyIceberg only")
    ap.add_argument("--dlq", default="", help="the channel's DLQ location: check it is empty")
    ap.add_argument("--channel", default="")
    a = ap.parse_args()

    expected, deleted, offsets, problems, _ = load_manifests(a.manifest)
    checks, infos = [], []

    def check(name, ok, detail):
        checks.append((name, ok, detail))

    if a.wait_seconds > 0:
        lag = wait_for_offsets(a, offsets)
        if lag:
            infos.append(f"drain: {lag} messages not committed after {a.wait_seconds:.0f} s")

    check("manifest", not problems, "; ".join(problems) or f"{len(a.manifest)} complete, every message acknowledged")
    table = open_table(a)
    version = table.metadata.format_version
    data, deletes = delete_files(table, table.io)
    by_content = collections.Counter(c for c, _, _, _ in deletes)
    dvs = sum(1 for c, fmt, _, _ in deletes if c == 1 and fmt == "PUFFIN")
    equality = [p for c, _, p, _ in deletes if c == 2]
    check("equality deletes", not equality, f"{len(equality)} equality-delete files" + (f" (e.g. {equality[:2]})" if equality else ""))
    per_data = collections.Counter(r for c, _, _, refs in deletes if c == 1 for r in refs)
    over = {p: n for p, n in per_data.items() if n > 1}
    dangling = set(per_data) - set(data)
    check("deletes per file", not over, f"{len(over)} data files with more than one delete file" + (f" (e.g. {sorted(over.items())[:3]})" if over else f", {len(per_data)} data files with one"))
    if dangling:
        infos.append(f"delete files: {len(dangling)} referenced data files are not in the snapshot")

    if equality:
        infos.append("pyiceberg: not read (PyIceberg cannot apply equality deletes)")
        ids, rows = [], {}
    else:
        ids, rows = normalize(table.scan().to_arrow())
        compare("pyiceberg", ids, rows, expected, deleted, check)

    if a.dlq:
        entries = read_dlq(a.dlq, a.channel, a.s3_endpoint)
        codes = collections.Counter(e.get("error_code") for e in entries)
        check("DLQ", not entries, f"{len(entries)} entries" + (f" by code {dict(codes)}" if entries else ""))

    if not a.no_duckdb:
        arrow, error = duckdb_rows(table.metadata_location)
        if error:
            check("duckdb read", False, error)
        else:
            d_ids, d_rows = normalize(arrow)
            compare("duckdb", d_ids, d_rows, expected, deleted, check)

    for name, ok, detail in checks:
        print(f"{'PASS' if ok else 'FAIL'} {name}: {detail}")
    for line in infos:
        print(f"INFO {line}")
    figures = {
        "format_version": version,
        "keys": len(expected) + len(deleted),
        "live": len(expected),
        "deleted": len(deleted),
        "rows": len(ids),
        "data_files": len(data),
        "delete_files": len(deletes),
        "position_delete_files": by_content.get(1, 0) - dvs,
        "deletion_vectors": dvs,
        "equality_delete_files": len(equality),
        "passed": sum(ok for _, ok, _ in checks),
        "failed": sum(not ok for _, ok, _ in checks),
    }
    print(
        f"keys {figures['keys']}, live {figures['live']}, deleted {figures['deleted']}, rows {figures['rows']}, "
        f"data files {figures['data_files']}, delete files {figures['delete_files']} (position "
        f"{figures['position_delete_files']}, deletion vectors {figures['deletion_vectors']}, equality "
        f"{figures['equality_delete_files']}), format v{version}"
    )
    print(f"{figures['passed']} passed, {figures['failed']} failed")
    if a.json:
        with open(a.json, "w", encoding="utf-8") as f:
            json.dump(figures, f)
    sys.exit(1 if figures["failed"] else 0)


if __name__ == "__main__":
    main()
