#!/usr/bin/env python3
"""Independent reader for floe's AWS catalog tests: reads a table delivered to Amazon S3 Tables or
the AWS Glue Data Catalog (the local emulator) with PyIceberg and prints one JSON object:
rows, distinct_ids, properties, partition_spec, metadata_location, how (the way it was opened).

Usage: read_aws_table.py glue NAMESPACE.TABLE --endpoint URL
       read_aws_table.py s3tables NAMESPACE.TABLE --endpoint URL --table-bucket-arn ARN

- glue: PyIceberg's Glue catalog (`glue.endpoint`, `s3.endpoint`), as a user would open it.
- s3tables: PyIceberg 0.12 has no S3 Tables catalog (AWS serves S3 Tables to it through the S3
  Tables Iceberg REST endpoint, which the emulator does not have), so the current metadata
  location is taken from the S3 Tables API (GetTableMetadataLocation, boto3) and the table is
  read with PyIceberg's StaticTable from that metadata file.
"""
import argparse
import json
import os
import sys

import boto3
from pyiceberg.catalog.glue import GlueCatalog
from pyiceberg.table import StaticTable


def s3_props(endpoint):
    return {
        "s3.endpoint": endpoint,
        "s3.region": os.environ.get("AWS_REGION", "us-east-1"),
        "s3.access-key-id": os.environ.get("AWS_ACCESS_KEY_ID", ""),
        "s3.secret-access-key": os.environ.get("AWS_SECRET_ACCESS_KEY", ""),
        "s3.force-virtual-addressing": "false",
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("kind", choices=["glue", "s3tables"])
    ap.add_argument("table")
    ap.add_argument("--endpoint", required=True)
    ap.add_argument("--table-bucket-arn", default="")
    a = ap.parse_args()
    namespace, name = a.table.split(".", 1)
    region = os.environ.get("AWS_REGION", "us-east-1")
    if a.kind == "glue":
        catalog = GlueCatalog(
            "glue",
            **{"glue.endpoint": a.endpoint, "glue.region": region},
            **s3_props(a.endpoint),
        )
        t = catalog.load_table(a.table)
        location = t.metadata_location
        how = "pyiceberg GlueCatalog"
    else:
        st = boto3.client("s3tables", endpoint_url=a.endpoint, region_name=region)
        location = st.get_table_metadata_location(
            tableBucketARN=a.table_bucket_arn, namespace=namespace, name=name
        )["metadataLocation"]
        t = StaticTable.from_metadata(location, properties=s3_props(a.endpoint))
        how = "pyiceberg StaticTable from S3 Tables GetTableMetadataLocation"
    arrow = t.scan().to_arrow()
    ids = arrow.column("id").to_pylist() if arrow.num_rows else []
    spec = [
        {"source": t.schema().find_field(pf.source_id).name, "transform": str(pf.transform)}
        for pf in t.spec().fields
    ]
    json.dump(
        {
            "rows": arrow.num_rows,
            "distinct_ids": len(set(ids)),
            "properties": dict(t.properties),
            "partition_spec": spec,
            "metadata_location": location,
            "how": how,
        },
        sys.stdout,
    )


if __name__ == "__main__":
    main()
