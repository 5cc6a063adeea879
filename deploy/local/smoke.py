#!/usr/bin/env python3
"""The local AWS emulators' own test: checks every patch of deploy/local/moto_server.py against the
running moto, and kinesalite's sequence numbers and resharding, through boto3.

    eval "$(deploy/local/aws-emulators.sh env)"
    .venv/bin/python deploy/local/smoke.py            # or --moto URL --kinesalite URL

Prints one line per check and "smoke: N passed, M failed"; exits 1 when a check fails.
Every run uses fresh stream/bucket names, so it can run again against the same servers.
"""
import argparse
import base64
import contextlib
import json
import os
import sys
import threading
import time
import traceback
import urllib.error
import urllib.request
import uuid

import boto3
from botocore.config import Config
from botocore.exceptions import ClientError

MAX_HASH = 2**128 - 1
U128_MAX = 2**128 - 1
RUN = uuid.uuid4().hex[:8]


class CheckFailed(Exception):
    pass


def check(condition, message):
    if not condition:
        raise CheckFailed(message)


def client(service, endpoint):
    return boto3.client(
        service,
        endpoint_url=endpoint,
        region_name=os.environ.get("AWS_REGION", "us-east-1"),
        aws_access_key_id=os.environ.get("AWS_ACCESS_KEY_ID", "test"),
        aws_secret_access_key=os.environ.get("AWS_SECRET_ACCESS_KEY", "test"),
        # No retries: an HTTP 500 must surface here, not be retried into a pass.
        config=Config(retries={"max_attempts": 1, "mode": "standard"}, connect_timeout=5, read_timeout=30),
    )


def expect_error(code, fn, *args, http_status=400, **kwargs):
    try:
        fn(*args, **kwargs)
    except ClientError as e:
        got = e.response.get("Error", {}).get("Code")
        status = e.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        check(got == code and status == http_status, f"expected HTTP {http_status} {code}, got HTTP {status} {got}: {e}")
        return e
    raise CheckFailed(f"expected HTTP {http_status} {code}, the call succeeded")


def seq_key(s):
    """Kinesis sequence numbers compare as big integers: length first, then digits."""
    return (len(s), s)


def check_sequence_number(s, what):
    check(isinstance(s, str) and s.isdigit() and len(s) == 56, f"{what}: {s!r} is not a 56-digit decimal string")
    check(int(s) > U128_MAX, f"{what}: {s} fits in u128")


def wait_active(kin, name, timeout=10.0):
    deadline = time.time() + timeout
    while True:
        status = kin.describe_stream_summary(StreamName=name)["StreamDescriptionSummary"]["StreamStatus"]
        if status == "ACTIVE":
            return
        check(time.time() < deadline, f"stream {name} still {status} after {timeout}s")
        time.sleep(0.05)


def shards_of(kin, name, **kwargs):
    return kin.list_shards(StreamName=name, **kwargs)["Shards"]


def put(kin, name, hash_key, n, tag):
    """n records with an explicit hash key; returns [(shard_id, seq)] in put order."""
    out = []
    resp = kin.put_records(
        StreamName=name,
        Records=[{"Data": f"{tag}-{i}".encode(), "PartitionKey": f"{tag}-{i}", "ExplicitHashKey": str(hash_key)} for i in range(n)],
    )
    check(resp.get("FailedRecordCount", 0) == 0, f"PutRecords failed: {resp}")
    for r in resp["Records"]:
        out.append((r["ShardId"], r["SequenceNumber"]))
    return out


def read_shard(kin, name, shard_id, iterator_type="TRIM_HORIZON", limit=None, max_calls=100, **kwargs):
    """Reads until the iterator ends or a call returns nothing; returns (records, last_response)."""
    it = kin.get_shard_iterator(StreamName=name, ShardId=shard_id, ShardIteratorType=iterator_type, **kwargs)["ShardIterator"]
    records, resp = [], None
    for _ in range(max_calls):
        args = {"ShardIterator": it}
        if limit:
            args["Limit"] = limit
        resp = kin.get_records(**args)
        records.extend(resp["Records"])
        it = resp.get("NextShardIterator")
        if it is None or not resp["Records"]:
            break
    return records, resp


def raw_kinesis_call(endpoint, target, payload):
    """An unsigned AWS-JSON call, to see the exact status and body (moto does not check signatures)."""
    req = urllib.request.Request(
        endpoint.rstrip("/") + "/",
        data=json.dumps(payload).encode(),
        headers={
            "Content-Type": "application/x-amz-json-1.1",
            "X-Amz-Target": f"Kinesis_20131202.{target}",
            "Authorization": "AWS4-HMAC-SHA256 Credential=test/20250101/us-east-1/kinesis/aws4_request, SignedHeaders=host, Signature=0",
        },
    )
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, json.loads(r.read() or b"{}")
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")


class MotoKinesis:
    """State shared by the moto Kinesis checks, which run in order."""

    def __init__(self, endpoint):
        self.endpoint = endpoint
        self.kin = client("kinesis", endpoint)
        self.name = f"smoke-{RUN}"
        self.kin.create_stream(StreamName=self.name, ShardCount=2)
        wait_active(self.kin, self.name)
        s = shards_of(self.kin, self.name)
        check([x["ShardId"] for x in s] == ["shardId-000000000000", "shardId-000000000001"], f"unexpected shards {s}")
        self.s0, self.s1 = s
        self.mid = int(self.s0["HashKeyRange"]["EndingHashKey"]) // 2

    def sequence_numbers(self):
        a = put(self.kin, self.name, 0, 5, "a")
        b = put(self.kin, self.name, MAX_HASH, 5, "b")  # == shard 1's EndingHashKey: stock moto gave HTTP 500
        check({sh for sh, _ in a} == {"shardId-000000000000"}, f"hash key 0 went to {a}")
        check({sh for sh, _ in b} == {"shardId-000000000001"}, f"hash key 2^128-1 went to {b}")
        for sh, s in a + b:
            check_sequence_number(s, f"SequenceNumber on {sh}")
        for batch in (a, b):
            seqs = [s for _, s in batch]
            check(all(seq_key(x) < seq_key(y) for x, y in zip(seqs, seqs[1:])), f"not strictly increasing: {seqs}")
        check(len({s for _, s in a + b}) == 10, "sequence numbers repeat across shards")
        self.a, self.b = a, b
        for sh in shards_of(self.kin, self.name):
            check_sequence_number(sh["SequenceNumberRange"]["StartingSequenceNumber"], f"{sh['ShardId']} StartingSequenceNumber")

    def iterator_types(self):
        kin, name, sid = self.kin, self.name, "shardId-000000000000"
        seqs = [s for _, s in self.a]
        recs, _ = read_shard(kin, name, sid)
        check([r["SequenceNumber"] for r in recs] == seqs, f"TRIM_HORIZON read {[r['SequenceNumber'] for r in recs]}, want {seqs}")
        check([r["Data"] for r in recs] == [f"a-{i}".encode() for i in range(5)], "TRIM_HORIZON data differs")
        recs, _ = read_shard(kin, name, sid, "AT_SEQUENCE_NUMBER", StartingSequenceNumber=seqs[2])
        check([r["SequenceNumber"] for r in recs] == seqs[2:], "AT_SEQUENCE_NUMBER did not start at that record")
        recs, _ = read_shard(kin, name, sid, "AFTER_SEQUENCE_NUMBER", StartingSequenceNumber=seqs[2])
        check([r["SequenceNumber"] for r in recs] == seqs[3:], "AFTER_SEQUENCE_NUMBER did not start after that record")
        recs, _ = read_shard(kin, name, sid, "AFTER_SEQUENCE_NUMBER", StartingSequenceNumber=seqs[-1])
        check(recs == [], "AFTER_SEQUENCE_NUMBER of the last record returned records")
        # LATEST: nothing now, then exactly what is put after the iterator was taken.
        it = kin.get_shard_iterator(StreamName=name, ShardId=sid, ShardIteratorType="LATEST")["ShardIterator"]
        r1 = kin.get_records(ShardIterator=it)
        check(r1["Records"] == [], "LATEST returned old records")
        new = put(kin, name, 0, 2, "latest")
        r2 = kin.get_records(ShardIterator=r1["NextShardIterator"])
        check([r["SequenceNumber"] for r in r2["Records"]] == [s for _, s in new], "LATEST missed new records")
        # AT_TIMESTAMP: only the records put after the timestamp (a whole second: boto3 sends whole seconds).
        t = int(time.time()) + 1
        time.sleep(t - time.time() + 0.02)
        after = put(kin, name, 0, 3, "ts")
        recs, _ = read_shard(kin, name, sid, "AT_TIMESTAMP", Timestamp=t)
        check([r["SequenceNumber"] for r in recs] == [s for _, s in after], "AT_TIMESTAMP did not start at the timestamp")
        # A sequence number of another shard is refused, as on AWS.
        expect_error("InvalidArgumentException", kin.get_shard_iterator, StreamName=name, ShardId=sid,
                     ShardIteratorType="AT_SEQUENCE_NUMBER", StartingSequenceNumber=self.b[0][1])
        expect_error("InvalidArgumentException", kin.get_shard_iterator, StreamName=name, ShardId=sid,
                     ShardIteratorType="AFTER_SEQUENCE_NUMBER", StartingSequenceNumber="not-a-number")

    def stream_arn_only(self):
        kin = self.kin
        arn = kin.describe_stream_summary(StreamName=self.name)["StreamDescriptionSummary"]["StreamARN"]
        it = kin.get_shard_iterator(StreamARN=arn, ShardId="shardId-000000000001", ShardIteratorType="TRIM_HORIZON")["ShardIterator"]
        r = kin.get_records(ShardIterator=it)  # without StreamARN: stock moto looked up a stream named "None"
        check([x["SequenceNumber"] for x in r["Records"]] == [s for _, s in self.b], "read by StreamARN iterator differs")
        r = kin.get_records(ShardIterator=it, StreamARN=arn)
        check(len(r["Records"]) == 5, "read with StreamARN differs")

    def bad_iterators(self):
        kin = self.kin
        expect_error("InvalidArgumentException", kin.get_records, ShardIterator="not-an-iterator")
        expect_error("InvalidArgumentException", kin.get_records, ShardIterator=base64.b64encode(b"smoke:shardId-000000000000:abc").decode())
        status, body = raw_kinesis_call(self.endpoint, "GetRecords", {"ShardIterator": "%%%garbage%%%"})
        check(status == 400 and body.get("__type") == "InvalidArgumentException", f"raw bad iterator: HTTP {status} {body}")
        it = kin.get_shard_iterator(StreamName=self.name, ShardId="shardId-000000000000", ShardIteratorType="TRIM_HORIZON")["ShardIterator"]
        fields = json.loads(base64.b64decode(it))
        fields["t"] -= 301_000  # issued 5 min 1 s ago
        expired = base64.b64encode(json.dumps(fields).encode()).decode()
        expect_error("ExpiredIteratorException", kin.get_records, ShardIterator=expired)
        status, body = raw_kinesis_call(self.endpoint, "GetRecords", {"ShardIterator": expired})
        check(status == 400 and body.get("__type") == "ExpiredIteratorException", f"raw expired iterator: HTTP {status} {body}")

    def split(self):
        kin, name = self.kin, self.name
        before, _ = read_shard(kin, name, "shardId-000000000000")
        self.t_before_split = time.time()
        time.sleep(0.02)
        kin.split_shard(StreamName=name, ShardToSplit="shardId-000000000000", NewStartingHashKey=str(self.mid))
        wait_active(kin, name)
        shards = {s["ShardId"]: s for s in shards_of(kin, name)}
        check(set(shards) == {f"shardId-00000000000{i}" for i in range(4)}, f"after split: {sorted(shards)}")
        c2, c3 = shards["shardId-000000000002"], shards["shardId-000000000003"]
        check(c2.get("ParentShardId") == c3.get("ParentShardId") == "shardId-000000000000", "children lack ParentShardId")
        end = shards["shardId-000000000000"]["SequenceNumberRange"].get("EndingSequenceNumber")
        check(end is not None, "closed parent has no EndingSequenceNumber")
        check_sequence_number(end, "parent EndingSequenceNumber")
        check(seq_key(end) > seq_key(before[-1]["SequenceNumber"]), "EndingSequenceNumber below the parent's last record")
        after, _ = read_shard(kin, name, "shardId-000000000000")
        check([r["SequenceNumber"] for r in after] == [r["SequenceNumber"] for r in before],
              "the parent's records changed by SplitShard (stock moto moves them into the children)")
        for c in ("shardId-000000000002", "shardId-000000000003"):
            recs, _ = read_shard(kin, name, c)
            check(recs == [], f"child {c} is not empty after SplitShard: {len(recs)} records")
            check(seq_key(shards[c]["SequenceNumberRange"]["StartingSequenceNumber"]) > seq_key(end),
                  f"child {c} starts before the parent's end")
        low = put(kin, name, 0, 2, "split-low")
        high = put(kin, name, self.mid, 2, "split-high")
        check({s for s, _ in low} == {"shardId-000000000002"}, f"after split, hash 0 went to {low}")
        check({s for s, _ in high} == {"shardId-000000000003"}, f"after split, hash mid went to {high}")
        summary = kin.describe_stream_summary(StreamName=name)["StreamDescriptionSummary"]
        check(summary["OpenShardCount"] == 3, f"OpenShardCount {summary['OpenShardCount']} after split")

    def closed_shard_end(self):
        kin, name = self.kin, self.name
        n = len(read_shard(kin, name, "shardId-000000000000")[0])
        it = kin.get_shard_iterator(StreamName=name, ShardId="shardId-000000000000", ShardIteratorType="TRIM_HORIZON")["ShardIterator"]
        got, calls, resp = 0, 0, None
        while it is not None and calls < 50:
            resp = kin.get_records(ShardIterator=it, Limit=4)
            got += len(resp["Records"])
            calls += 1
            if got < n:
                check(resp.get("NextShardIterator"), f"iterator ended after {got} of {n} records")
                check(not resp.get("ChildShards"), "ChildShards before the end of the closed shard")
            it = resp.get("NextShardIterator")
        check(got == n, f"read {got} of {n} records from the closed parent")
        check(it is None, "closed shard read to the end still returns a NextShardIterator")
        children = sorted(resp.get("ChildShards") or [], key=lambda c: c["ShardId"])
        check([c["ShardId"] for c in children] == ["shardId-000000000002", "shardId-000000000003"], f"ChildShards {children}")
        check(all(c["ParentShards"] == ["shardId-000000000000"] for c in children), f"ChildShards parents {children}")
        check(children[1]["HashKeyRange"]["StartingHashKey"] == str(self.mid), f"child hash range {children[1]}")
        # LATEST on a closed shard is at its end at once.
        r = kin.get_records(ShardIterator=kin.get_shard_iterator(StreamName=name, ShardId="shardId-000000000000",
                                                                 ShardIteratorType="LATEST")["ShardIterator"])
        check("NextShardIterator" not in r and r.get("ChildShards"), "LATEST on a closed shard did not end it")
        # An open shard never ends.
        _, last = read_shard(kin, name, "shardId-000000000001")
        check(last.get("NextShardIterator") and not last.get("ChildShards"), "open shard returned an end")

    def merge(self):
        kin, name = self.kin, self.name
        before = {c: [r["SequenceNumber"] for r in read_shard(kin, name, c)[0]] for c in ("shardId-000000000002", "shardId-000000000003")}
        # Given in descending hash order on purpose (stock moto refused or mis-ranged that).
        kin.merge_shards(StreamName=name, ShardToMerge="shardId-000000000003", AdjacentShardToMerge="shardId-000000000002")
        wait_active(kin, name)
        shards = {s["ShardId"]: s for s in shards_of(kin, name)}
        m = shards.get("shardId-000000000004")
        check(m is not None, f"no merged shard: {sorted(shards)}")
        check(m["HashKeyRange"] == self.s0["HashKeyRange"], f"merged hash range {m['HashKeyRange']}, want {self.s0['HashKeyRange']}")
        check({m.get("ParentShardId"), m.get("AdjacentParentShardId")} == {"shardId-000000000002", "shardId-000000000003"}, f"merged parents {m}")
        for c, seqs in before.items():
            check([r["SequenceNumber"] for r in read_shard(kin, name, c)[0]] == seqs, f"{c} records changed by MergeShards")
        recs, _ = read_shard(kin, name, "shardId-000000000004")
        check(recs == [], f"merged child is not empty: {len(recs)} records (stock moto copies the parents')")
        new = put(kin, name, 0, 1, "merged") + put(kin, name, self.mid, 1, "merged")
        check({s for s, _ in new} == {"shardId-000000000004"}, f"after merge, puts went to {new}")
        _, last = read_shard(kin, name, "shardId-000000000002")
        check("NextShardIterator" not in last, "merged parent read to end still has a NextShardIterator")
        check([(c["ShardId"], sorted(c["ParentShards"])) for c in last.get("ChildShards", [])]
              == [("shardId-000000000004", ["shardId-000000000002", "shardId-000000000003"])], f"ChildShards {last.get('ChildShards')}")
        expect_error("InvalidArgumentException", kin.merge_shards, StreamName=name,
                     ShardToMerge="shardId-000000000002", AdjacentShardToMerge="shardId-000000000003")
        summary = kin.describe_stream_summary(StreamName=name)["StreamDescriptionSummary"]
        check(summary["OpenShardCount"] == 2, f"OpenShardCount {summary['OpenShardCount']} after merge")

    def list_shards(self):
        kin, name = self.kin, self.name
        ids = lambda shards: [s["ShardId"] for s in shards]  # noqa: E731
        every = [f"shardId-00000000000{i}" for i in range(5)]
        check(ids(shards_of(kin, name)) == every, "no filter")
        check(ids(shards_of(kin, name, ShardFilter={"Type": "AT_LATEST"})) == ["shardId-000000000001", "shardId-000000000004"], "AT_LATEST")
        check(ids(shards_of(kin, name, ShardFilter={"Type": "AT_TRIM_HORIZON"})) == every[:2], "AT_TRIM_HORIZON")
        check(ids(shards_of(kin, name, ShardFilter={"Type": "FROM_TRIM_HORIZON"})) == every, "FROM_TRIM_HORIZON")
        check(ids(shards_of(kin, name, ShardFilter={"Type": "AT_TIMESTAMP", "Timestamp": self.t_before_split})) == every[:2], "AT_TIMESTAMP before the split")
        check(ids(shards_of(kin, name, ShardFilter={"Type": "FROM_TIMESTAMP", "Timestamp": int(time.time()) + 1})) == ["shardId-000000000001", "shardId-000000000004"], "FROM_TIMESTAMP now")
        check(ids(shards_of(kin, name, ShardFilter={"Type": "AFTER_SHARD_ID", "ShardId": "shardId-000000000002"})) == every[3:], "AFTER_SHARD_ID")
        check(ids(shards_of(kin, name, ExclusiveStartShardId="shardId-000000000001")) == every[2:], "ExclusiveStartShardId")
        # Pagination: MaxResults 2 -> 2 + 2 + 1, NextToken alone continues.
        pages, resp = [], kin.list_shards(StreamName=name, MaxResults=2)
        pages.append(ids(resp["Shards"]))
        while resp.get("NextToken"):
            check(len(pages) < 10, "NextToken never ends")
            resp = kin.list_shards(NextToken=resp["NextToken"], MaxResults=2)
            pages.append(ids(resp["Shards"]))
        check(pages == [every[:2], every[2:4], every[4:]], f"pages {pages}")
        resp = kin.list_shards(StreamName=name, MaxResults=1, ShardFilter={"Type": "AT_LATEST"})
        check(ids(resp["Shards"]) == ["shardId-000000000001"] and resp.get("NextToken"), "AT_LATEST page 1")
        resp = kin.list_shards(NextToken=resp["NextToken"])
        check(ids(resp["Shards"]) == ["shardId-000000000004"] and not resp.get("NextToken"), "the filter does not carry over NextToken")
        token = kin.list_shards(StreamName=name, MaxResults=1)["NextToken"]
        expect_error("InvalidArgumentException", kin.list_shards, NextToken=token, StreamName=name)
        expect_error("InvalidArgumentException", kin.list_shards, NextToken="garbage")
        # DescribeStream pages with Limit / ExclusiveStartShardId / HasMoreShards.
        d = kin.describe_stream(StreamName=name, Limit=3)["StreamDescription"]
        check(ids(d["Shards"]) == every[:3] and d["HasMoreShards"], "DescribeStream Limit 3")
        d = kin.describe_stream(StreamName=name, Limit=3, ExclusiveStartShardId=every[2])["StreamDescription"]
        check(ids(d["Shards"]) == every[3:] and not d["HasMoreShards"], "DescribeStream ExclusiveStartShardId")
        status, body = raw_kinesis_call(self.endpoint, "ListShards", {"StreamName": name, "MaxResults": 0})
        check(status == 400 and body.get("__type") == "ValidationException", f"MaxResults 0: HTTP {status} {body}")

    def concurrent_puts_and_reads(self):
        kin, name = self.kin, self.name
        errors, per_thread, threads = [], 40, 4

        def producer(k):
            try:
                c = client("kinesis", self.endpoint)
                for i in range(per_thread):
                    c.put_record(StreamName=name, Data=f"c{k}-{i}".encode(), PartitionKey="p", ExplicitHashKey=str(MAX_HASH - 1))
            except Exception as e:  # noqa: BLE001
                errors.append(f"producer {k}: {e}")

        def reader(stop):
            try:
                c = client("kinesis", self.endpoint)
                it = c.get_shard_iterator(StreamName=name, ShardId="shardId-000000000001", ShardIteratorType="LATEST")["ShardIterator"]
                while not stop.is_set():
                    it = c.get_records(ShardIterator=it)["NextShardIterator"]
            except Exception as e:  # noqa: BLE001
                errors.append(f"reader: {e}")

        stop = threading.Event()
        rt = threading.Thread(target=reader, args=(stop,))
        rt.start()
        ps = [threading.Thread(target=producer, args=(k,)) for k in range(threads)]
        for p in ps:
            p.start()
        for p in ps:
            p.join()
        stop.set()
        rt.join()
        check(not errors, "; ".join(errors[:3]))
        recs = [r for r in read_shard(kin, name, "shardId-000000000001", limit=10000)[0] if r["Data"].startswith(b"c")]
        seqs = [r["SequenceNumber"] for r in recs]
        check(len(recs) == per_thread * threads, f"read {len(recs)} of {per_thread * threads} concurrently put records")
        check(all(seq_key(x) < seq_key(y) for x, y in zip(seqs, seqs[1:])), "concurrent puts read back out of order")

    def cleanup(self):
        self.kin.delete_stream(StreamName=self.name, EnforceConsumerDeletion=True)


@contextlib.contextmanager
def table_bucket(st, name):
    """An S3 Tables table bucket for one check, deleted afterwards (whatever the check left)."""
    arn = st.create_table_bucket(name=name)["arn"]
    try:
        yield arn
    finally:
        try:
            st.delete_table_bucket(tableBucketARN=arn)
        except Exception:  # noqa: BLE001
            pass


def s3tables_shapes(endpoint):
    st = client("s3tables", endpoint)
    raw = {}

    def keep_body(http_response, model, **_):
        raw[model.name] = json.loads(http_response.content or b"{}")

    st.meta.events.register("after-call.s3tables", keep_body)
    with table_bucket(st, f"smoke-{RUN}") as bucket:
        st.create_namespace(tableBucketARN=bucket, namespace=["smoke"])
        st.create_table(tableBucketARN=bucket, namespace="smoke", name="events", format="ICEBERG")
        t = st.get_table(tableBucketARN=bucket, namespace="smoke", name="events")
        body = raw["GetTable"]
        check("managedByService" not in body or body["managedByService"] is None or isinstance(body["managedByService"], str),
              f"GetTable.managedByService is {body.get('managedByService')!r} (the model says string)")
        st.update_table_metadata_location(
            tableBucketARN=bucket, namespace="smoke", name="events",
            versionToken=t["versionToken"], metadataLocation=f"{t['warehouseLocation']}/metadata/00001.metadata.json",
        )
        body = raw["UpdateTableMetadataLocation"]
        check(isinstance(body.get("namespace"), list) and body["namespace"] == ["smoke"],
              f"UpdateTableMetadataLocation.namespace is {body.get('namespace')!r} (the model says list)")
        check("tableARN" in body and "tableArn" not in body, f"UpdateTableMetadataLocation keys {sorted(body)} (the model says tableARN)")
        t2 = st.get_table(tableBucketARN=bucket, namespace="smoke", name="events")
        check(t2["metadataLocation"].endswith("00001.metadata.json") and t2["versionToken"] != t["versionToken"],
              "metadata location not updated")
        st.delete_table(tableBucketARN=bucket, namespace="smoke", name="events")
        st.delete_namespace(tableBucketARN=bucket, namespace="smoke")


def s3tables_conflicts_and_encryption(endpoint):
    st = client("s3tables", endpoint)
    key = "arn:aws:kms:us-east-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab"
    with table_bucket(st, f"smoke-enc-{RUN}") as bucket:
        st.create_namespace(tableBucketARN=bucket, namespace=["smoke"])
        st.create_table(tableBucketARN=bucket, namespace="smoke", name="enc", format="ICEBERG",
                        encryptionConfiguration={"sseAlgorithm": "aws:kms", "kmsKeyArn": key})
        st.create_table(tableBucketARN=bucket, namespace="smoke", name="plain", format="ICEBERG")
        got = st.get_table_encryption(tableBucketARN=bucket, namespace="smoke", name="enc")["encryptionConfiguration"]
        check(got == {"sseAlgorithm": "aws:kms", "kmsKeyArn": key}, f"GetTableEncryption gave {got}")
        got = st.get_table_encryption(tableBucketARN=bucket, namespace="smoke", name="plain")["encryptionConfiguration"]
        check(got == {"sseAlgorithm": "AES256"}, f"GetTableEncryption of a table without one gave {got}")
        first = st.get_table(tableBucketARN=bucket, namespace="smoke", name="enc")
        # Stock moto: the call succeeds and replaces the table.
        expect_error("ConflictException", st.create_table, http_status=409,
                     tableBucketARN=bucket, namespace="smoke", name="enc", format="ICEBERG")
        again = st.get_table(tableBucketARN=bucket, namespace="smoke", name="enc")
        check(again["versionToken"] == first["versionToken"], "the existing table was replaced")
        # A stale version token is refused (stock moto already does this; floe's stale-commit tests rely on it).
        st.update_table_metadata_location(
            tableBucketARN=bucket, namespace="smoke", name="enc", versionToken=first["versionToken"],
            metadataLocation=f"{first['warehouseLocation']}/metadata/00001.metadata.json")
        expect_error("ConflictException", st.update_table_metadata_location, http_status=409,
                     tableBucketARN=bucket, namespace="smoke", name="enc", versionToken=first["versionToken"],
                     metadataLocation=f"{first['warehouseLocation']}/metadata/00002.metadata.json")
        for name in ("enc", "plain"):
            st.delete_table(tableBucketARN=bucket, namespace="smoke", name=name)
        st.delete_namespace(tableBucketARN=bucket, namespace="smoke")


def glue_update_table_version_id(endpoint):
    glue = client("glue", endpoint)
    db = f"smoke_{RUN}"
    glue.create_database(DatabaseInput={"Name": db})
    try:
        def table_input(location):
            return {"Name": "t", "Parameters": {"table_type": "ICEBERG", "metadata_location": location}}

        glue.create_table(DatabaseName=db, TableInput=table_input("s3://b/1.json"))
        v1 = glue.get_table(DatabaseName=db, Name="t")["Table"]["VersionId"]
        glue.update_table(DatabaseName=db, TableInput=table_input("s3://b/2.json"), VersionId=v1, SkipArchive=True)
        expect_error("ConcurrentModificationException", glue.update_table, DatabaseName=db,
                     TableInput=table_input("s3://b/3.json"), VersionId=v1, SkipArchive=True)
        got = glue.get_table(DatabaseName=db, Name="t")["Table"]
        check(got["Parameters"]["metadata_location"] == "s3://b/2.json", f"stale update applied: {got['Parameters']}")
        check(got["VersionId"] != v1, "VersionId did not change on update")
        glue.update_table(DatabaseName=db, TableInput=table_input("s3://b/4.json"))  # no VersionId: unconditional
        glue.delete_table(DatabaseName=db, Name="t")
    finally:
        glue.delete_database(Name=db)


def s3_expected_bucket_owner(endpoint):
    s3 = client("s3", endpoint)
    bucket = f"smoke-owner-{uuid.uuid4().hex[:8]}"
    s3.create_bucket(Bucket=bucket)
    s3.put_object(Bucket=bucket, Key="mine", Body=b"x", ExpectedBucketOwner="123456789012")
    for call in (
        lambda: s3.put_object(Bucket=bucket, Key="theirs", Body=b"x", ExpectedBucketOwner="111111111111"),
        lambda: s3.head_bucket(Bucket=bucket, ExpectedBucketOwner="111111111111"),
    ):
        try:
            call()
        except ClientError as e:
            status = e.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            check(status == 403, f"expected HTTP 403 for another account's bucket, got {status}: {e}")
            continue
        raise CheckFailed("a request naming another account as bucket owner succeeded")


def s3_complete_multipart_upload_root(endpoint):
    s3 = client("s3", endpoint)
    raw = {}

    def keep_body(http_response, model, **_):
        raw[model.name] = http_response.content

    s3.meta.events.register("after-call.s3.CompleteMultipartUpload", keep_body)
    bucket = f"smoke-mpu-{uuid.uuid4().hex[:8]}"
    s3.create_bucket(Bucket=bucket)
    upload = s3.create_multipart_upload(Bucket=bucket, Key="k")["UploadId"]
    part = s3.upload_part(Bucket=bucket, Key="k", UploadId=upload, PartNumber=1, Body=b"x" * 10)
    s3.complete_multipart_upload(
        Bucket=bucket, Key="k", UploadId=upload,
        MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": part["ETag"]}]},
    )
    body = raw["CompleteMultipartUpload"].decode()
    check("<CompleteMultipartUploadResult" in body, f"CompleteMultipartUpload root element: {body[:120]!r}")
    check(s3.get_object(Bucket=bucket, Key="k")["Body"].read() == b"x" * 10, "object not assembled")


def kinesalite_checks(endpoint):
    kin = client("kinesis", endpoint)
    name = f"smoke-{RUN}"
    kin.create_stream(StreamName=name, ShardCount=2)
    wait_active(kin, name)
    try:
        s0 = shards_of(kin, name)[0]
        mid = (int(s0["HashKeyRange"]["EndingHashKey"]) + 1) // 2
        a = put(kin, name, 0, 3, "k")
        seqs = [s for _, s in a]
        for s in seqs:
            check_sequence_number(s, "kinesalite SequenceNumber")
        check(all(seq_key(x) < seq_key(y) for x, y in zip(seqs, seqs[1:])), f"kinesalite not increasing: {seqs}")
        recs, _ = read_shard(kin, name, "shardId-000000000000", "AFTER_SEQUENCE_NUMBER", StartingSequenceNumber=seqs[0])
        check([r["SequenceNumber"] for r in recs] == seqs[1:], "kinesalite AFTER_SEQUENCE_NUMBER")
        kin.split_shard(StreamName=name, ShardToSplit="shardId-000000000000", NewStartingHashKey=str(mid))
        wait_active(kin, name)
        ids = [s["ShardId"] for s in shards_of(kin, name)]
        check(ids == [f"shardId-00000000000{i}" for i in range(4)], f"kinesalite after split: {ids}")
        check([r["SequenceNumber"] for r in read_shard(kin, name, "shardId-000000000000")[0]] == seqs, "kinesalite parent lost records")
        low, high = put(kin, name, 0, 1, "kl"), put(kin, name, mid, 1, "kh")
        check(low[0][0] == "shardId-000000000002" and high[0][0] == "shardId-000000000003", f"kinesalite split routing {low} {high}")
        check_sequence_number(low[0][1], "kinesalite child SequenceNumber")
        kin.merge_shards(StreamName=name, ShardToMerge="shardId-000000000002", AdjacentShardToMerge="shardId-000000000003")
        wait_active(kin, name)
        ids = [s["ShardId"] for s in shards_of(kin, name)]
        check(ids[-1] == "shardId-000000000004", f"kinesalite after merge: {ids}")
        m = put(kin, name, 0, 1, "km")
        check(m[0][0] == "shardId-000000000004", f"kinesalite merge routing {m}")
    finally:
        kin.delete_stream(StreamName=name)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--moto", default=os.environ.get("FLOE_TEST_AWS_ENDPOINT"))
    ap.add_argument("--kinesalite", default=os.environ.get("FLOE_TEST_KINESALITE_ENDPOINT"))
    args = ap.parse_args()
    if not args.moto or not args.kinesalite:
        sys.exit('smoke.py: no endpoints: run  eval "$(deploy/local/aws-emulators.sh env)"  first (or pass --moto/--kinesalite)')

    passed, failed = 0, 0

    def run(label, fn, *a):
        nonlocal passed, failed
        t0 = time.time()
        try:
            fn(*a)
        except CheckFailed as e:
            failed += 1
            print(f"FAIL {label}: {e}", flush=True)
            return False
        except Exception as e:  # noqa: BLE001
            failed += 1
            print(f"FAIL {label}: {type(e).__name__}: {e}", flush=True)
            traceback.print_exc(limit=3)
            return False
        passed += 1
        print(f"ok   {label} ({time.time() - t0:.2f}s)", flush=True)
        return True

    state = {}
    if run("moto kinesis: create stream", lambda: state.setdefault("m", MotoKinesis(args.moto))):
        m = state["m"]
        for label, fn in [
            ("moto kinesis: 56-digit sequence numbers, increasing per shard, unique, inclusive hash ranges", m.sequence_numbers),
            ("moto kinesis: TRIM_HORIZON, AT/AFTER_SEQUENCE_NUMBER, LATEST, AT_TIMESTAMP", m.iterator_types),
            ("moto kinesis: iterator taken by StreamARN", m.stream_arn_only),
            ("moto kinesis: bad and expired iterators are HTTP 400 with __type", m.bad_iterators),
            ("moto kinesis: SplitShard keeps records in the parent, children empty, puts go to open shards", m.split),
            ("moto kinesis: closed shard ends with no NextShardIterator and ChildShards", m.closed_shard_end),
            ("moto kinesis: MergeShards keeps records in the parents, child empty, puts go to it", m.merge),
            ("moto kinesis: ListShards ShardFilter, ExclusiveStartShardId, MaxResults/NextToken; DescribeStream paging", m.list_shards),
            ("moto kinesis: concurrent puts and reads", m.concurrent_puts_and_reads),
        ]:
            if "m" in state and not run(label, fn) and label.startswith("moto kinesis: 56"):
                break  # the later checks use its records
        run("moto kinesis: delete stream", m.cleanup)
    run("moto s3tables: GetTable / UpdateTableMetadataLocation shapes", s3tables_shapes, args.moto)
    run("moto s3tables: CreateTable conflict (409), encryptionConfiguration, GetTableEncryption, stale versionToken",
        s3tables_conflicts_and_encryption, args.moto)
    run("moto glue: UpdateTable with a stale VersionId is ConcurrentModificationException", glue_update_table_version_id, args.moto)
    run("moto s3: x-amz-expected-bucket-owner of another account is refused (403)", s3_expected_bucket_owner, args.moto)
    run("moto s3: CompleteMultipartUpload answers <CompleteMultipartUploadResult> (the Rust SDK needs it)", s3_complete_multipart_upload_root, args.moto)
    run("kinesalite: 56-digit sequence numbers, SplitShard, MergeShards", kinesalite_checks, args.kinesalite)

    print(f"smoke: {passed} passed, {failed} failed", flush=True)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
