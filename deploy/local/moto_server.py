#!/usr/bin/env python3
"""floe's local AWS emulator: moto's server (moto[server]==5.2.1) with compatibility patches.

    .venv/bin/python deploy/local/moto_server.py --host 127.0.0.1 --port 5056 [--iterator-ttl 300]

One port serves every service moto has (Kinesis, DynamoDB, S3, S3 Tables, Glue, ...). Stock moto is
wrong in a few places that floe's Kinesis and S3 Tables code depends on; each patch below is small,
says what stock moto does and what AWS does instead, and is checked by deploy/local/smoke.py.
The patches reach into moto's internals, so they are written against moto 5.2.1 exactly (pinned by
deploy/local/aws-emulators.sh); the server refuses to start on another version unless
FLOE_MOTO_ANY_VERSION=1.

Kinesis sequence numbers here are 56-digit decimal strings:
    "49" + 36-digit process-wide counter + 18-digit shard index
so they are strictly increasing within a shard, unique across shards, and above u128::MAX.

Shard iterators and ListShards NextTokens are base64 of a small JSON object
{"s": stream name, "h": shard id, "p": position, "t": issued-at epoch ms}; a test that wants an
ExpiredIteratorException can forge one with "t" in the past (see deploy/local/README.md).
"""
import argparse
import base64
import itertools
import json
import os
import sys
import threading
import time
from collections import OrderedDict

MOTO_VERSION = "5.2.1"

import moto  # noqa: E402

if moto.__version__ != MOTO_VERSION and os.environ.get("FLOE_MOTO_ANY_VERSION") != "1":
    sys.exit(
        f"moto_server.py: moto {moto.__version__} is installed but the patches are written for "
        f"moto {MOTO_VERSION}; run deploy/local/aws-emulators.sh start (it installs the pinned "
        "version) or set FLOE_MOTO_ANY_VERSION=1 to try anyway"
    )

import moto.kinesis.models as km  # noqa: E402
import moto.kinesis.responses as kr  # noqa: E402
import moto.s3tables.responses as s3tr  # noqa: E402
from moto.core.exceptions import JsonRESTError  # noqa: E402
from moto.core.responses import ActionResult  # noqa: E402
from moto.kinesis.exceptions import InvalidArgumentError, ResourceNotFoundError  # noqa: E402

# Seconds a shard iterator / ListShards NextToken stays valid (AWS: 5 minutes). Set by --iterator-ttl.
ITERATOR_TTL_SECONDS = 300.0


def _error(kind: str, message: str) -> JsonRESTError:
    # Rendered by moto as HTTP 400 with {"__type": kind, "message": message}, like AWS's JSON protocol.
    return JsonRESTError(error_type=kind, message=message)


def _now_ms() -> int:
    return int(time.time() * 1000)


# --------------------------------------------------------------------------------------------------
# Kinesis 0. One request at a time.
# Stock: moto's server is threaded and the Kinesis backend is plain dicts, so a GetRecords iterating a
# shard while a PutRecords inserts into it fails with "OrderedDict mutated during iteration" (HTTP 500),
# and two concurrent puts to one shard can insert out of sequence order (a reader then skips a record).
_KINESIS_LOCK = threading.RLock()
_stock_call_action = kr.KinesisResponse.call_action


def _call_action_locked(self):
    with _KINESIS_LOCK:
        return _stock_call_action(self)


kr.KinesisResponse.call_action = _call_action_locked

# --------------------------------------------------------------------------------------------------
# Kinesis 1. Realistic sequence numbers.
# Stock: a shard's sequence numbers are 1, 2, 3, ... (the same values on every shard), a shard's
# StartingSequenceNumber is "0" until it has a record, and a closed shard's EndingSequenceNumber is its
# last record's number ("0" when empty). AWS: 56-digit numbers (beyond u128), unique in the stream,
# increasing within a shard; a shard has a Starting/EndingSequenceNumber of its own that is not a
# record's. Records stay keyed by int, so stock iterator arithmetic (AT_SEQUENCE_NUMBER = n - 1) works.
_SEQ_COUNTER = itertools.count(1)


def _next_sequence_number(shard) -> int:
    return int(f"49{next(_SEQ_COUNTER):036d}{shard._shard_id:018d}")


def _sequence_number_is_for_shard(text: str, shard) -> bool:
    return len(text) == 56 and text.isdigit() and text.startswith("49") and int(text[-18:]) == shard._shard_id


_stock_shard_init = km.Shard.__init__


def _shard_init(self, *args, **kwargs):
    _stock_shard_init(self, *args, **kwargs)  # sets self.is_open = True through the property below
    self.created_at = time.time()
    self.starting_sequence_number = _next_sequence_number(self)


def _shard_is_open(self) -> bool:
    return self.__dict__.get("_floe_open", True)


def _shard_set_open(self, value: bool) -> None:
    # Stock closes a shard by assigning is_open = False; record when, and its EndingSequenceNumber.
    if self.__dict__.get("_floe_open", True) and not value:
        self.closed_at = time.time()
        self.ending_sequence_number = _next_sequence_number(self)
    self.__dict__["_floe_open"] = bool(value)


def _shard_put_record(self, partition_key, data, explicit_hash_key):
    sequence_number = _next_sequence_number(self)
    self.records[sequence_number] = km.Record(partition_key, data, sequence_number, explicit_hash_key)
    return str(sequence_number)


_stock_shard_to_json = km.Shard.to_json


def _shard_to_json(self):
    out = _stock_shard_to_json(self)
    out["SequenceNumberRange"]["StartingSequenceNumber"] = str(self.starting_sequence_number)
    if not self.is_open:
        out["SequenceNumberRange"]["EndingSequenceNumber"] = str(self.ending_sequence_number)
    return out


km.Shard.__init__ = _shard_init
km.Shard.is_open = property(_shard_is_open, _shard_set_open)
km.Shard.closed_at = None
km.Shard.put_record = _shard_put_record
km.Shard.to_json = _shard_to_json

# --------------------------------------------------------------------------------------------------
# Kinesis 2. Route puts to OPEN shards, hash ranges inclusive.
# Stock: the hash-key lookup scans every shard, closed ones included, so after SplitShard/MergeShards new
# records land in the closed parent; it also tests `start <= key < end`, so a key equal to a shard's
# EndingHashKey (e.g. ExplicitHashKey 2^128-1) finds no shard and PutRecord fails with HTTP 500; a
# non-numeric ExplicitHashKey is HTTP 500 too. AWS: only open shards, inclusive ranges, 400 on bad input.
def _get_shard_for_key(self, partition_key, explicit_hash_key):
    if not isinstance(partition_key, str) or not 1 <= len(partition_key) <= 256:
        raise InvalidArgumentError("PartitionKey must be a string of 1 to 256 characters")
    if explicit_hash_key:
        if not isinstance(explicit_hash_key, str) or not explicit_hash_key.isdigit() or int(explicit_hash_key) >= 2**128:
            raise InvalidArgumentError(f"ExplicitHashKey {explicit_hash_key!r} is not a decimal number in [0, 2^128)")
        key = int(explicit_hash_key)
    else:
        key = int(km.md5_hash(partition_key.encode("utf-8")).hexdigest(), 16)
    for shard in self.shards.values():
        if shard.is_open and shard.starting_hash <= key <= shard.ending_hash:
            return shard
    raise InvalidArgumentError(f"no open shard of stream {self.stream_name} covers hash key {key}")


km.Stream.get_shard_for_key = _get_shard_for_key

# --------------------------------------------------------------------------------------------------
# Kinesis 3. SplitShard / MergeShards leave the records in the parents; children start empty.
# Stock SplitShard re-puts the parent's records into the children (the parent becomes empty, the
# records get new sequence numbers); stock MergeShards copies both parents' records into the child
# (every record readable twice), does not refuse closed shards, and accepts/ranges a pair given in
# descending hash order wrongly. AWS: parents keep their records until retention, children start empty.
_stock_split_shard = km.Stream.split_shard


def _split_shard(self, shard_to_split, new_starting_hash_key):
    parent = self.shards[shard_to_split]
    kept, parent.records = parent.records, OrderedDict()  # stock then has nothing to re-put
    try:
        _stock_split_shard(self, shard_to_split, new_starting_hash_key)
    finally:
        parent.records = kept
    for child in self.shards.values():
        if child.parent == parent.shard_id:  # start after the parent's EndingSequenceNumber, as on AWS
            child.starting_sequence_number = _next_sequence_number(child)


def _merge_shards(self, shard_to_merge, adjacent_shard_to_merge):
    a, b = self.shards[shard_to_merge], self.shards[adjacent_shard_to_merge]
    for s in (a, b):
        if not s.is_open:
            raise InvalidArgumentError(
                f"Shard {s.shard_id} in stream {self.stream_name} under account {self.account_id} has already "
                "been merged or split, and thus is not eligible for merging or splitting."
            )
    low, high = sorted((a, b), key=lambda s: s.starting_hash)
    if low.ending_hash + 1 != high.starting_hash:
        raise InvalidArgumentError(
            f"Shards {shard_to_merge} and {adjacent_shard_to_merge} in stream {self.stream_name} under account "
            f"{self.account_id} are not an adjacent pair of shards eligible for merging"
        )
    a.is_open = False
    b.is_open = False
    child = km.Shard(
        max(s._shard_id for s in self.shards.values()) + 1,
        starting_hash=low.starting_hash,
        ending_hash=high.ending_hash,
        parent=a.shard_id,
        adjacent_parent=b.shard_id,
    )
    self.shards[child.shard_id] = child


_stock_to_json_summary = km.Stream.to_json_summary


def _to_json_summary(self):
    # Stock keeps OpenShardCount at the creation count after SplitShard/MergeShards.
    out = _stock_to_json_summary(self)
    out["StreamDescriptionSummary"]["OpenShardCount"] = sum(1 for s in self.shards.values() if s.is_open)
    return out


km.Stream.split_shard = _split_shard
km.Stream.merge_shards = _merge_shards
km.Stream.to_json_summary = _to_json_summary

# --------------------------------------------------------------------------------------------------
# Kinesis 4. Shard iterators: validated, expiring, ARN-safe; GetRecords ends a closed shard.
# Stock: an iterator is base64("name:shard:position") and anything that does not decode that way is
# an HTTP 500 (binascii/ValueError); iterators never expire; an iterator taken with StreamARN alone
# embeds the stream name "None" and GetRecords then fails; a non-numeric StartingSequenceNumber is an
# HTTP 500; a sequence number from another shard is accepted. Stock GetRecords on a closed shard
# returns a NextShardIterator forever and never ChildShards.
# AWS: InvalidArgumentException for a malformed iterator or a sequence number that is not this shard's,
# ExpiredIteratorException after 5 minutes, and once a reader is past the last record of a closed shard
# the response has no NextShardIterator and lists ChildShards.
def _encode_token(**fields) -> str:
    fields["t"] = _now_ms()
    return base64.b64encode(json.dumps(fields, separators=(",", ":")).encode()).decode()


def _decode_token(token, what: str, expired_kind: str) -> dict:
    try:
        fields = json.loads(base64.b64decode(token, validate=True))
        issued = int(fields["t"])
    except Exception:
        raise _error("InvalidArgumentException", f"Invalid {what}.")
    age_ms = _now_ms() - issued
    if age_ms > ITERATOR_TTL_SECONDS * 1000:
        raise _error(
            expired_kind,
            f"{what} expired. It was created at time {issued} while right now it is {issued + age_ms} which is "
            f"further in the future than the tolerated delay of {int(ITERATOR_TTL_SECONDS * 1000)} milliseconds.",
        )
    return fields


def _epoch_seconds(value) -> float:
    if isinstance(value, (int, float)):
        return float(value)
    try:
        return float(value)
    except (TypeError, ValueError):
        raise _error("InvalidArgumentException", f"Timestamp {value!r} is not epoch seconds")


def _get_shard_iterator(self, stream_arn, stream_name, shard_id, shard_iterator_type, starting_sequence_number, at_timestamp):
    stream = self.describe_stream(stream_arn=stream_arn, stream_name=stream_name)
    if shard_id not in stream.shards:
        raise ResourceNotFoundError(
            f"Shard {shard_id} in stream {stream.stream_name} under account {self.account_id} does not exist"
        )
    shard = stream.shards[shard_id]
    if shard_iterator_type in ("AT_SEQUENCE_NUMBER", "AFTER_SEQUENCE_NUMBER"):
        text = str(starting_sequence_number) if starting_sequence_number is not None else ""
        if not _sequence_number_is_for_shard(text, shard):
            raise InvalidArgumentError(
                f"StartingSequenceNumber {text} used in GetShardIterator on shard {shard_id} in stream "
                f"{stream.stream_name} under account {self.account_id} is invalid because it did not come from this shard."
            )
        position = int(text) - 1 if shard_iterator_type == "AT_SEQUENCE_NUMBER" else int(text)
    elif shard_iterator_type == "TRIM_HORIZON":
        position = 0
    elif shard_iterator_type == "LATEST":
        position = shard.get_max_sequence_number()
    elif shard_iterator_type == "AT_TIMESTAMP":
        if at_timestamp is None:
            raise InvalidArgumentError("Must specify timestampInMillis parameter for iterator of type AT_TIMESTAMP.")
        position = shard.get_sequence_number_at(_epoch_seconds(at_timestamp))
    else:
        raise _error("ValidationException", f"Invalid ShardIteratorType: {shard_iterator_type}")
    return _encode_token(s=stream.stream_name, h=shard.shard_id, p=str(position))


def _get_records(self):  # KinesisResponse.get_records
    fields = _decode_token(self._get_param("ShardIterator"), "Iterator", "ExpiredIteratorException")
    limit = self._get_param("Limit")
    if limit is not None and not (isinstance(limit, int) and 1 <= limit <= 10000):
        raise InvalidArgumentError(f"Limit {limit} is not in [1, 10000]")
    try:
        stream_name, shard_id, position = fields["s"], fields["h"], int(fields["p"])
    except Exception:
        raise _error("InvalidArgumentException", "Invalid Iterator.")
    stream = self.kinesis_backend.describe_stream(stream_arn=self._get_param("StreamARN"), stream_name=stream_name)
    shard = stream.get_shard(shard_id)
    records, position, millis_behind = shard.get_records(position, limit)
    body = {"Records": [r.to_json() for r in records], "MillisBehindLatest": millis_behind}
    if not shard.is_open and position >= shard.get_max_sequence_number():
        body["MillisBehindLatest"] = 0
        body["ChildShards"] = [
            {
                "ShardId": child.shard_id,
                "ParentShards": [p for p in (child.parent, child.adjacent_parent) if p],
                "HashKeyRange": {"StartingHashKey": str(child.starting_hash), "EndingHashKey": str(child.ending_hash)},
            }
            for child in stream.shards.values()
            if shard_id in (child.parent, child.adjacent_parent)
        ]
    else:
        body["NextShardIterator"] = _encode_token(s=stream.stream_name, h=shard_id, p=str(position))
    return ActionResult(body)


km.KinesisBackend.get_shard_iterator = _get_shard_iterator
kr.KinesisResponse.get_records = _get_records

# --------------------------------------------------------------------------------------------------
# Kinesis 5. ListShards: ShardFilter, ExclusiveStartShardId, MaxResults/NextToken (and DescribeStream paging).
# Stock ignores ShardFilter and ExclusiveStartShardId, and its NextToken only works with the
# StreamName repeated (which AWS refuses). AWS: the filter selects shards by their open/closed times,
# ExclusiveStartShardId skips ids up to and including it, NextToken alone identifies the stream and
# the filter, expires after 5 minutes, and may not be combined with StreamName,
# StreamCreationTimestamp or ExclusiveStartShardId.
_SHARD_FILTER_TYPES = ("AFTER_SHARD_ID", "AT_TRIM_HORIZON", "FROM_TRIM_HORIZON", "AT_LATEST", "AT_TIMESTAMP", "FROM_TIMESTAMP")


def _shard_filter_selects(shard, stream, shard_filter: dict, now: float) -> bool:
    kind = shard_filter.get("Type")
    opened = 0.0 if not shard.parent else shard.created_at  # the stream's first shards exist "forever"
    closed = shard.closed_at  # None while open
    horizon = now - stream.retention_period_hours * 3600

    def open_at(t):
        return opened <= t and (closed is None or closed >= t)

    if kind is None:
        return True
    if kind == "AT_LATEST":
        return closed is None
    if kind == "AT_TRIM_HORIZON":
        return open_at(horizon)
    if kind == "FROM_TRIM_HORIZON":
        return closed is None or closed >= horizon
    if kind == "AT_TIMESTAMP":
        return open_at(max(shard_filter["Timestamp"], horizon))
    if kind == "FROM_TIMESTAMP":
        return closed is None or closed >= max(shard_filter["Timestamp"], horizon)
    if kind == "AFTER_SHARD_ID":
        return shard.shard_id > shard_filter["ShardId"]
    raise AssertionError(kind)


def _normalize_shard_filter(raw) -> dict:
    if raw is None:
        return {}
    kind = raw.get("Type")
    if kind not in _SHARD_FILTER_TYPES:
        raise _error(
            "ValidationException",
            f"1 validation error detected: Value '{kind}' at 'shardFilter.type' failed to satisfy constraint: "
            f"Member must satisfy enum value set: [{', '.join(_SHARD_FILTER_TYPES)}]",
        )
    out = {"Type": kind}
    if kind in ("AT_TIMESTAMP", "FROM_TIMESTAMP"):
        if raw.get("Timestamp") is None:
            raise InvalidArgumentError(f"Timestamp must be specified for ShardFilter type {kind}")
        out["Timestamp"] = _epoch_seconds(raw["Timestamp"])
    if kind == "AFTER_SHARD_ID":
        if not raw.get("ShardId"):
            raise InvalidArgumentError("ShardId must be specified for ShardFilter type AFTER_SHARD_ID")
        out["ShardId"] = raw["ShardId"]
    return out


def _list_shards(self):  # KinesisResponse.list_shards
    next_token = self._get_param("NextToken")
    max_results = self._get_param("MaxResults")
    if max_results is None:
        max_results = 10000
    if not isinstance(max_results, int) or not 1 <= max_results <= 10000:
        raise _error(
            "ValidationException",
            f"1 validation error detected: Value '{max_results}' at 'maxResults' failed to satisfy constraint: "
            "Member must have value between 1 and 10000",
        )
    if next_token:
        for name in ("StreamName", "StreamCreationTimestamp", "ExclusiveStartShardId"):
            if self._get_param(name) is not None:
                raise InvalidArgumentError(f"NextToken and {name} cannot be provided together.")
        fields = _decode_token(next_token, "NextToken", "ExpiredNextTokenException")
        stream = self.kinesis_backend.describe_stream(stream_arn=None, stream_name=fields.get("s"))
        shard_filter, after = fields.get("f") or {}, fields.get("a")
    else:
        stream = self.kinesis_backend.describe_stream(
            stream_arn=self._get_param("StreamARN"), stream_name=self._get_param("StreamName")
        )
        shard_filter = _normalize_shard_filter(self._get_param("ShardFilter"))
        after = self._get_param("ExclusiveStartShardId")
    now = time.time()
    shards = sorted(
        (s for s in stream.shards.values() if _shard_filter_selects(s, stream, shard_filter, now)),
        key=lambda s: s.shard_id,
    )
    if after:
        shards = [s for s in shards if s.shard_id > after]
    page = shards[:max_results]
    body = {"Shards": [s.to_json() for s in page]}
    if len(shards) > len(page):
        body["NextToken"] = _encode_token(s=stream.stream_name, f=shard_filter, a=page[-1].shard_id)
    return ActionResult(body)


kr.KinesisResponse.list_shards = _list_shards


# Stock DescribeStream ignores ExclusiveStartShardId (a client paging with HasMoreShards loops forever)
# and returns every shard by default. AWS: pages start after ExclusiveStartShardId, Limit defaults to 100.
def _describe_stream(self):  # KinesisResponse.describe_stream
    stream = self.kinesis_backend.describe_stream(self._get_param("StreamARN"), self._get_param("StreamName"))
    limit = self._get_param("Limit") or 100
    after = self._get_param("ExclusiveStartShardId")
    shards = sorted((s for s in stream.shards.values() if not after or s.shard_id > after), key=lambda s: s.shard_id)
    out = stream.to_json()
    out["StreamDescription"]["Shards"] = [s.to_json() for s in shards[:limit]]
    out["StreamDescription"]["HasMoreShards"] = len(shards) > limit
    return ActionResult(out)


kr.KinesisResponse.describe_stream = _describe_stream

# --------------------------------------------------------------------------------------------------
# S3 Tables: two response shapes the Rust SDK (aws-sdk-s3tables) cannot parse.
# Stock GetTable sends "managedByService": false (a boolean; the model says string) -> Rust
# DeserializeError "expected ValueString or ValueNull". We send null.
# Stock UpdateTableMetadataLocation sends "namespace" as a string (model: list of strings) and the key
# "tableArn" (model: "tableARN") -> Rust DeserializeError "expected start array or null".
_stock_get_table = s3tr.S3TablesResponse.get_table
_stock_update_table_metadata_location = s3tr.S3TablesResponse.update_table_metadata_location


def _rewrite_json_body(response, rewrite):
    status, headers, body = response
    if not (isinstance(status, int) and 200 <= status < 300):
        return response
    data = json.loads(body)
    rewrite(data)
    return status, headers, json.dumps(data)


def _get_table(self):
    return _rewrite_json_body(_stock_get_table(self), lambda d: d.update(managedByService=None))


def _fix_update_table_metadata_location(d):
    if isinstance(d.get("namespace"), str):
        d["namespace"] = [d["namespace"]]
    if "tableArn" in d:
        d["tableARN"] = d.pop("tableArn")


def _update_table_metadata_location(self):
    return _rewrite_json_body(_stock_update_table_metadata_location(self), _fix_update_table_metadata_location)


s3tr.S3TablesResponse.get_table = _get_table
s3tr.S3TablesResponse.update_table_metadata_location = _update_table_metadata_location

# S3 Tables CreateTable of a name that exists: stock moto builds TableAlreadyExists but does not
# raise it, and silently replaces the table (a second creator wipes the first one's metadata
# location). AWS answers 409 ConflictException; so do we.
# Stock CreateTable ignores encryptionConfiguration and GetTableEncryption is not implemented: we
# keep the configuration on the table (AES256 when none was given, as a bucket's default) and
# serve GET /tables/{arn}/{namespace}/{name}/encryption. (Objects of the table's storage bucket are
# not marked encrypted: moto's S3 does not apply it.)
import moto.s3tables.exceptions as s3te  # noqa: E402
import moto.s3tables.urls as s3turls  # noqa: E402
from urllib.parse import unquote  # noqa: E402

_stock_create_table = s3tr.S3TablesResponse.create_table


def _create_table(self):
    _, arn, namespace = self.raw_path.lstrip("/").split("/")
    arn = unquote(arn)
    body = json.loads(self.body)
    bucket = self.s3tables_backend.table_buckets.get(arn)
    if bucket and namespace in bucket.namespaces and body.get("name") in bucket.namespaces[namespace].tables:
        raise s3te.TableAlreadyExists()
    response = _stock_create_table(self)
    table = self.s3tables_backend.get_table(arn, namespace, body["name"])
    table.encryption_configuration = body.get("encryptionConfiguration") or {"sseAlgorithm": "AES256"}
    return response


def _get_table_encryption(self):
    table = self.s3tables_backend.get_table(
        unquote(self._get_param("tableBucketARN")), self._get_param("namespace"), self._get_param("name")
    )
    config = getattr(table, "encryption_configuration", None) or {"sseAlgorithm": "AES256"}
    return 200, self.default_response_headers, json.dumps({"encryptionConfiguration": config})


s3tr.S3TablesResponse.create_table = _create_table
s3tr.S3TablesResponse.get_table_encryption = _get_table_encryption
# Two routes, as moto's own: the server decodes the ARN's %2F, so it may span two path segments.
s3turls.url_paths[
    "{0}/tables/(?P<tableBucketARN>[^/]+)/(?P<namespace>[^/]+)/(?P<name>[^/]+)/encryption$"
] = s3tr.S3TablesResponse.dispatch
s3turls.url_paths[
    "{0}/tables/(?P<tableBucketARN_pt_1>[^/]+)/(?P<tableBucketARN_pt_2>[^/]+)/(?P<namespace>[^/]+)/(?P<name>[^/]+)/encryption$"
] = s3tr.S3TablesResponse.dispatch


# --- Glue: UpdateTable VersionId -----------------------------------------------------------------
# Stock moto ignores UpdateTable's VersionId, so a commit based on a stale table version succeeds.
# AWS refuses it (ConcurrentModificationException, HTTP 400) when VersionId is not the table's
# current version; so do we. Iceberg's Glue catalogs (floe's, PyIceberg's, Java's) send it to
# make a commit a compare-and-swap.
import moto.glue.responses as gr  # noqa: E402


class _GlueConcurrentModification(JsonRESTError):
    code = 400

    def __init__(self, message):
        super().__init__("ConcurrentModificationException", message)


_stock_glue_update_table = gr.GlueResponse.update_table


def _glue_update_table(self):
    version_id = self.parameters.get("VersionId")
    if version_id is not None:
        table_input = self.parameters.get("TableInput") or {}
        table = self.glue_backend.get_table(self.parameters.get("DatabaseName"), table_input.get("Name"))
        if str(version_id) != str(table._current_version):
            raise _GlueConcurrentModification(
                f"Update table failed due to concurrent modifications: VersionId {version_id} "
                f"is not the current version {table._current_version}"
            )
    return _stock_glue_update_table(self)


gr.GlueResponse.update_table = _glue_update_table


# --- S3: CompleteMultipartUpload -----------------------------------------------------------------
# Stock moto serializes the CompleteMultipartUpload result under the root element
# <CompleteMultipartUploadResponse>; AWS (and the S3 model) use <CompleteMultipartUploadResult>. boto3
# does not mind; the Rust SDK refuses the response ("expected CompleteMultipartUploadResult"), so a
# multipart upload (floe's raw objects above 16 MiB) would fail. We rename the root element.
import moto.s3.responses as s3r  # noqa: E402

_stock_key_response_post = s3r.S3Response._key_response_post


def _key_response_post(self, *args, **kwargs):
    status, headers, body = _stock_key_response_post(self, *args, **kwargs)
    if isinstance(body, (str, bytes)):
        text = body.decode() if isinstance(body, bytes) else body
        if "<CompleteMultipartUploadResponse" in text:
            text = text.replace("CompleteMultipartUploadResponse", "CompleteMultipartUploadResult")
            body = text.encode() if isinstance(body, bytes) else text
    return status, headers, body


s3r.S3Response._key_response_post = _key_response_post


# --- S3: expected bucket owner ------------------------------------------------------------------
# Stock moto ignores x-amz-expected-bucket-owner (and x-amz-source-expected-bucket-owner), so a
# request naming another account succeeds. AWS answers 403 AccessDenied; so do we. Every bucket of
# this emulator belongs to moto's one account.
from moto.core import DEFAULT_ACCOUNT_ID
from moto.moto_server.werkzeug_app import DomainDispatcherApplication

_stock_dispatch = DomainDispatcherApplication.__call__


def _dispatch(self, environ, start_response):
    for header in ("HTTP_X_AMZ_EXPECTED_BUCKET_OWNER", "HTTP_X_AMZ_SOURCE_EXPECTED_BUCKET_OWNER"):
        owner = environ.get(header)
        if owner is not None and owner != DEFAULT_ACCOUNT_ID:
            body = (
                '<?xml version="1.0" encoding="UTF-8"?><Error><Code>AccessDenied</Code>'
                "<Message>Access Denied</Message></Error>"
            ).encode()
            start_response("403 Forbidden", [("Content-Type", "application/xml"), ("Content-Length", str(len(body)))])
            return [body]
    return _stock_dispatch(self, environ, start_response)


DomainDispatcherApplication.__call__ = _dispatch


def main(argv=None) -> None:
    global ITERATOR_TTL_SECONDS
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-H", "--host", default="127.0.0.1")
    parser.add_argument("-p", "--port", type=int, default=5056)
    parser.add_argument(
        "--iterator-ttl", type=float, default=300.0,
        help="seconds a Kinesis shard iterator or ListShards NextToken stays valid (AWS: 300)",
    )
    args = parser.parse_args(argv)
    ITERATOR_TTL_SECONDS = args.iterator_ttl
    from moto.server import main as moto_main

    moto_main(["--host", args.host, "--port", str(args.port)])


if __name__ == "__main__":
    main()
