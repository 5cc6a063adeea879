#!/usr/bin/env python3
"""Independent reader for floe's integration tests: opens floe's SQLite catalog with PyIceberg
and prints, as one JSON object, what the Rust tests assert on.

Usage: read_table.py CATALOG_SQLITE|SQLALCHEMY_URL WAREHOUSE_DIR|s3://BUCKET/PREFIX NAMESPACE.TABLE [--catalog-name floe]
       [--ids 1,2,3] [--s3-endpoint URL]
       read_table.py - - NAMESPACE.TABLE --rest-uri URI [--rest-token TOKEN | --rest-sigv4 REGION:NAME]
       [--ids 1,2,3] (an Iceberg REST catalog, read with PyIceberg's RestCatalog; SigV4 signed by
       botocore with the AWS_* credentials of the environment)

Output keys: rows, distinct_ids, schema (field name -> Iceberg type string, nested included),
required (field names that are required), partition_spec ([{source, transform, name}]),
properties, snapshots ([summary dicts] sorted by sequence number), sample ({id: row} for --ids,
values rendered as text: timestamps ISO 8601 UTC, decimals as strings).
"""
import argparse
import json
import os
import sys

from pyiceberg.catalog.sql import SqlCatalog


def render(v):
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    if isinstance(v, dict):
        return {k: render(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        # map columns arrive as lists of (key, value) tuples
        if v and all(isinstance(x, tuple) and len(x) == 2 for x in v):
            return {str(k): render(x) for k, x in v}
        return [render(x) for x in v]
    if hasattr(v, "isoformat"):
        return v.isoformat()
    return str(v)


def open_catalog(catalog, warehouse, name="floe", s3_endpoint=""):
    """floe's SQLite catalog with a local directory or s3:// warehouse (an emulator's endpoint)."""
    props = {}
    if warehouse.startswith("s3://"):
        if s3_endpoint:
            props = {
                "s3.endpoint": s3_endpoint,
                "s3.region": os.environ.get("AWS_REGION", "us-east-1"),
                "s3.access-key-id": os.environ.get("AWS_ACCESS_KEY_ID", ""),
                "s3.secret-access-key": os.environ.get("AWS_SECRET_ACCESS_KEY", ""),
                "s3.force-virtual-addressing": "false",
            }
    else:
        warehouse = f"file://{os.path.abspath(warehouse)}"
    # A SQLAlchemy URL (postgresql+psycopg2://…) is the catalog database itself; a path is SQLite.
    uri = catalog if "://" in catalog else f"sqlite:///{catalog}"
    return SqlCatalog(name, uri=uri, warehouse=warehouse, **props)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("catalog")
    ap.add_argument("warehouse")
    ap.add_argument("table")
    ap.add_argument("--catalog-name", default="floe")
    ap.add_argument("--ids", default="")
    ap.add_argument("--s3-endpoint", default="", help="S3 endpoint of an s3:// warehouse (emulator)")
    ap.add_argument("--rest-uri", default="", help="read through this Iceberg REST catalog instead")
    ap.add_argument("--rest-token", default="", help="bearer token of the REST catalog")
    ap.add_argument(
        "--rest-sigv4",
        default="",
        help="REGION:SIGNING_NAME: sign REST requests with SigV4 (credentials from AWS_* variables)",
    )
    a = ap.parse_args()
    if a.rest_uri:
        from pyiceberg.catalog.rest import RestCatalog

        props = {"uri": a.rest_uri}
        if a.rest_token:
            props["token"] = a.rest_token
        if a.rest_sigv4:
            region, name = a.rest_sigv4.split(":")
            props.update(
                {
                    "rest.sigv4-enabled": "true",
                    "rest.signing-region": region,
                    "rest.signing-name": name,
                    "rest.sigv4.max-retries": "0",
                }
            )
        cat = RestCatalog("rest", **props)
    else:
        cat = open_catalog(a.catalog, a.warehouse, a.catalog_name, a.s3_endpoint)
    t = cat.load_table(a.table)
    arrow = t.scan().to_arrow()
    ids = arrow.column("id").to_pylist() if arrow.num_rows else []
    schema = {}
    required = []

    def walk(prefix, fields):
        for f in fields:
            name = prefix + f.name
            schema[name] = str(f.field_type)
            if f.required:
                required.append(name)
            ft = f.field_type
            if hasattr(ft, "fields"):
                walk(name + ".", ft.fields)

    walk("", t.schema().fields)
    spec = [
        {"source": t.schema().find_field(pf.source_id).name, "transform": str(pf.transform), "name": pf.name}
        for pf in t.spec().fields
    ]
    snaps = sorted(t.metadata.snapshots, key=lambda s: s.sequence_number)
    summaries = []
    for s in snaps:
        d = {"operation": str(s.summary.operation.value) if s.summary else None}
        if s.summary:
            d.update(s.summary.additional_properties)
        summaries.append(d)
    # The data files of the current snapshot, from its manifests (what a query engine plans).
    files = [task.file for task in t.scan().plan_files()]
    sample = {}
    wanted = {int(x) for x in a.ids.split(",") if x}
    if wanted:
        for row in arrow.to_pylist():
            if row["id"] in wanted:
                sample[str(row["id"])] = render(row)
    out = {
        "rows": arrow.num_rows,
        "distinct_ids": len(set(ids)),
        "schema": schema,
        "required": required,
        "partition_spec": spec,
        "properties": dict(t.properties),
        "snapshots": summaries,
        "data_files": len(files),
        "data_files_bytes": sum(f.file_size_in_bytes for f in files),
        "data_file_records": sum(f.record_count for f in files),
        "metadata_location": t.metadata_location,
        "sample": sample,
    }
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
