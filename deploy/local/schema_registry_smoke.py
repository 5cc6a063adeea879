#!/usr/bin/env python3
"""Checks deploy/local/schema_registry.py with the real Confluent serializers (confluent-kafka's
AvroSerializer, ProtobufSerializer and JSONSerializer, and their deserializers) and with raw HTTP:
the wire bytes, idempotent ids, references, compatibility (409 on an incompatible change), the
error codes, deletes, authentication and the state file. Prints 'N passed, M failed'; exits 1 on a
failure.

    eval "$(deploy/local/schema-registry.sh env)"
    .venv/bin/python deploy/local/schema_registry_smoke.py [URL]     # URL: $FLOE_TEST_SCHEMA_REGISTRY_URL

The registry is shared and never reset: every subject here carries this run's random suffix.
"""

import base64
import datetime
import json
import os
import secrets
import struct
import subprocess
import sys
import tempfile
import time
import traceback
import urllib.error
import urllib.request

from confluent_kafka.schema_registry import Schema, SchemaRegistryClient, SchemaRegistryError
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.json_schema import JSONDeserializer, JSONSerializer
from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer, ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, timestamp_pb2

HERE = os.path.dirname(os.path.abspath(__file__))
URL = (sys.argv[1] if len(sys.argv) > 1 else os.environ.get("FLOE_TEST_SCHEMA_REGISTRY_URL", "")).rstrip("/")
RUN = secrets.token_hex(4)
results = {"passed": 0, "failed": 0}


def check(name, fn):
    started = time.monotonic()
    try:
        fn()
        results["passed"] += 1
        print(f"ok   {name} ({time.monotonic() - started:.2f} s)")
    except Exception:  # noqa: BLE001: every failure is reported, the run goes on
        results["failed"] += 1
        print(f"FAIL {name}")
        traceback.print_exc()


def expect(cond, what):
    if not cond:
        raise AssertionError(what)


def http(method, path, body=None, headers=None, base=None):
    """(status, parsed JSON or text) of a raw request."""
    req = urllib.request.Request(
        (base or URL) + path,
        method=method,
        data=None if body is None else json.dumps(body).encode(),
        headers={"Content-Type": "application/vnd.schemaregistry.v1+json", **(headers or {})},
    )
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            status, raw, ctype = r.status, r.read(), r.headers.get("Content-Type", "")
    except urllib.error.HTTPError as e:
        status, raw, ctype = e.code, e.read(), e.headers.get("Content-Type", "")
    return status, (json.loads(raw) if "json" in ctype else raw.decode())


def expect_error(status_code, error_code, method, path, body=None):
    status, payload = http(method, path, body)
    expect(
        status == status_code and isinstance(payload, dict) and payload.get("error_code") == error_code,
        f"{method} {path}: want HTTP {status_code} error_code {error_code}, got {status} {payload}",
    )


def framed_id(data):
    """The schema id of Confluent-framed bytes (magic byte 0, 4-byte big-endian id)."""
    expect(data[0] == 0, f"magic byte is {data[0]}, not 0")
    return struct.unpack(">I", data[1:5])[0]


client = SchemaRegistryClient({"url": URL}) if URL else None

# ---- Avro ----------------------------------------------------------------------------------------

avro_topic = f"smoke-avro-{RUN}"
avro_subject = f"{avro_topic}-value"
EVENT_V1 = {
    "type": "record",
    "name": "Event",
    "namespace": "floe.smoke",
    "fields": [
        {"name": "id", "type": "string"},
        {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-micros"}},
        {"name": "amount", "type": "long"},
        {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["A", "B"]}},
        {"name": "tags", "type": {"type": "array", "items": "string"}},
    ],
}
EVENT_V2 = json.loads(json.dumps(EVENT_V1))
EVENT_V2["fields"].append({"name": "note", "type": ["null", "string"], "default": None})
V1_RECORD = {"id": "e1", "ts": 1_700_000_000_000_000, "amount": -5, "kind": "B", "tags": ["x", "y"]}
# fastavro reads timestamp-micros as an aware datetime.
V1_READ = dict(V1_RECORD, ts=datetime.datetime(2023, 11, 14, 22, 13, 20, tzinfo=datetime.timezone.utc))
avro_bytes = {}


def avro_v1():
    ser = AvroSerializer(client, json.dumps(EVENT_V1))
    data = ser(V1_RECORD, SerializationContext(avro_topic, MessageField.VALUE))
    latest = client.get_latest_version(avro_subject)
    expect(latest.version == 1, f"version {latest.version}")
    expect(framed_id(data) == latest.schema_id, f"framed id {framed_id(data)} != registered {latest.schema_id}")
    # The Avro body: "e1" is 0x04 'e' '1' (zigzag length 2).
    expect(data[5:8] == b"\x04e1", f"payload starts {data[5:8]!r}")
    back = AvroDeserializer(client)(data, SerializationContext(avro_topic, MessageField.VALUE))
    expect(back == V1_READ, f"deserialized {back}")
    avro_bytes["v1"] = data


def avro_same_schema_same_id():
    v1_id = client.get_latest_version(avro_subject).schema_id
    spaced = json.dumps(EVENT_V1, indent=4)  # other whitespace, same schema
    expect(client.register_schema(avro_subject, Schema(spaced, "AVRO")) == v1_id, "re-registration got a new id")
    expect(client.get_versions(avro_subject) == [1], "re-registration added a version")
    full_names = json.loads(json.dumps(EVENT_V1))
    del full_names["namespace"]
    full_names["name"] = "floe.smoke.Event"  # the same name, written whole
    full_names["fields"][3]["type"]["name"] = "floe.smoke.Kind"
    expect(client.register_schema(avro_subject, Schema(json.dumps(full_names), "AVRO")) == v1_id, "full names: a new id")
    other = f"smoke-avro-other-{RUN}-value"
    expect(client.register_schema(other, Schema(spaced, "AVRO")) == v1_id, "another subject got another id")
    found = client.lookup_schema(other, Schema(json.dumps(EVENT_V1), "AVRO"))
    expect((found.schema_id, found.version) == (v1_id, 1), f"lookup {found}")
    status, subjects = http("GET", f"/schemas/ids/{v1_id}/subjects")
    # (the registry is shared: earlier runs' subjects hold the same schema too)
    expect(status == 200 and {avro_subject, other} <= set(subjects), f"subjects of id: {subjects}")


def avro_v2_compatible():
    expect(client.test_compatibility(avro_subject, Schema(json.dumps(EVENT_V2), "AVRO")), "v2 found incompatible")
    ser = AvroSerializer(client, json.dumps(EVENT_V2))
    rec = dict(V1_RECORD, note="hello")
    data = ser(rec, SerializationContext(avro_topic, MessageField.VALUE))
    _, latest = http("GET", f"/subjects/{avro_subject}/versions/latest")  # the client caches "latest"
    expect(latest["version"] == 2 and framed_id(data) == latest["id"], f"v2 registered as {latest}")
    expect(latest["id"] > framed_id(avro_bytes["v1"]), "ids must increase")
    back = AvroDeserializer(client)(data, SerializationContext(avro_topic, MessageField.VALUE))
    expect(back == dict(V1_READ, note="hello"), f"deserialized {back}")
    # v1 bytes read with the v2 reader schema: the added field takes its default.
    old = AvroDeserializer(client, json.dumps(EVENT_V2))(avro_bytes["v1"], SerializationContext(avro_topic, MessageField.VALUE))
    expect(old == dict(V1_READ, note=None), f"v1 read as v2: {old}")


def avro_incompatible_refused():
    v3 = json.loads(json.dumps(EVENT_V2))
    v3["fields"][2]["type"] = "string"  # amount: long -> string
    v3["fields"].append({"name": "region", "type": "string"})  # no default
    expect(not client.test_compatibility(avro_subject, Schema(json.dumps(v3), "AVRO")), "v3 found compatible")
    status, verdict = http(
        "POST", f"/compatibility/subjects/{avro_subject}/versions/latest?verbose=true", {"schema": json.dumps(v3)}
    )
    text = " ".join(verdict.get("messages", []))
    expect(status == 200 and verdict["is_compatible"] is False, f"verdict {verdict}")
    expect("READER_FIELD_MISSING_DEFAULT_VALUE" in text and "TYPE_MISMATCH" in text, f"messages {text}")
    try:
        client.register_schema(avro_subject, Schema(json.dumps(v3), "AVRO"))
    except SchemaRegistryError as e:
        expect(e.http_status_code == 409 and e.error_code == 409, f"got {e.http_status_code} {e.error_code}")
    else:
        raise AssertionError("an incompatible schema was registered")
    expect(client.get_versions(avro_subject) == [1, 2], "the refused schema added a version")


def avro_rules():
    """Each schema-resolution rule, through the compatibility endpoint, in each level's direction."""
    subject = f"smoke-avro-rules-{RUN}-value"
    base = {"type": "record", "name": "R", "fields": [{"name": "a", "type": "int"}, {"name": "b", "type": "string", "default": "x"}]}
    client.register_schema(subject, Schema(json.dumps(base), "AVRO"))

    def variant(**changes):
        s = json.loads(json.dumps(base))
        for k, v in changes.items():
            s[k] = v
        return json.dumps(s)

    cases = [
        # (level, new schema, compatible?)
        ("BACKWARD", variant(fields=[{"name": "a", "type": "long"}]), True),  # int -> long promotion, b dropped
        ("BACKWARD", variant(fields=[{"name": "a", "type": "double"}, {"name": "b", "type": "bytes"}]), True),
        ("BACKWARD", variant(fields=[{"name": "a", "type": "string"}]), False),  # int -> string
        ("FORWARD", variant(fields=[{"name": "a", "type": "long"}]), False),  # old int cannot read long
        ("FORWARD", variant(fields=[{"name": "a", "type": "int"}]), True),  # b removed: the old reader has its default
        ("FORWARD", variant(fields=[{"name": "b", "type": "string"}]), False),  # a removed, no default
        ("FULL", variant(fields=base["fields"] + [{"name": "c", "type": ["null", "int"], "default": None}]), True),
        ("FULL", variant(fields=base["fields"] + [{"name": "c", "type": "int"}]), False),
        ("BACKWARD", variant(fields=[{"name": "a", "type": ["null", "int"]}]), True),  # writer int into a union
        ("FORWARD", variant(fields=[{"name": "a", "type": ["null", "int"]}]), False),  # null cannot be read as int
        ("NONE", variant(fields=[{"name": "z", "type": "boolean"}]), True),
        ("BACKWARD", variant(name="Renamed"), False),
        ("BACKWARD", variant(name="Renamed", aliases=["R"]), True),
    ]
    for level, schema, want in cases:
        status, _ = http("PUT", f"/config/{subject}", {"compatibility": level})
        expect(status == 200, f"PUT config {level}: {status}")
        got = client.test_compatibility(subject, Schema(schema, "AVRO"))
        expect(got == want, f"{level} {schema}: compatible={got}, want {want}")

    enum_subject = f"smoke-avro-enum-{RUN}-value"
    e1 = {"type": "enum", "name": "E", "symbols": ["A", "B"]}
    client.register_schema(enum_subject, Schema(json.dumps(e1), "AVRO"))
    http("PUT", f"/config/{enum_subject}", {"compatibility": "FORWARD"})
    added = json.dumps(dict(e1, symbols=["A", "B", "C"]))
    expect(not client.test_compatibility(enum_subject, Schema(added, "AVRO")), "a new symbol is not forward compatible")
    http("PUT", f"/config/{enum_subject}", {"compatibility": "BACKWARD"})
    expect(client.test_compatibility(enum_subject, Schema(added, "AVRO")), "a new symbol is backward compatible")
    removed = json.dumps(dict(e1, symbols=["A"]))
    expect(not client.test_compatibility(enum_subject, Schema(removed, "AVRO")), "a removed symbol is not backward compatible")
    defaulted = json.dumps(dict(e1, symbols=["A"], default="A"))
    expect(client.test_compatibility(enum_subject, Schema(defaulted, "AVRO")), "an enum default reads removed symbols")


def avro_transitive():
    subject = f"smoke-avro-transitive-{RUN}-value"
    v1 = {"type": "record", "name": "T", "fields": [{"name": "a", "type": "int"}]}
    v2 = {"type": "record", "name": "T", "fields": [{"name": "a", "type": "int"}, {"name": "b", "type": "int", "default": 0}]}
    v3 = {"type": "record", "name": "T", "fields": [{"name": "a", "type": "int"}, {"name": "b", "type": "int"}]}  # reads v2 only
    http("PUT", f"/config/{subject}", {"compatibility": "BACKWARD"})
    client.register_schema(subject, Schema(json.dumps(v1), "AVRO"))
    client.register_schema(subject, Schema(json.dumps(v2), "AVRO"))
    expect(client.test_compatibility(subject, Schema(json.dumps(v3), "AVRO")), "BACKWARD checks the latest only")
    http("PUT", f"/config/{subject}", {"compatibility": "BACKWARD_TRANSITIVE"})
    expect(not client.test_compatibility(subject, Schema(json.dumps(v3), "AVRO")), "latest under a transitive level: all")
    _, one = http("POST", f"/compatibility/subjects/{subject}/versions/2", {"schema": json.dumps(v3)})
    expect(one == {"is_compatible": True}, f"a named version is checked alone: {one}")
    try:
        client.register_schema(subject, Schema(json.dumps(v3), "AVRO"))
    except SchemaRegistryError as e:
        expect(e.http_status_code == 409, f"got {e.http_status_code}")
    else:
        raise AssertionError("BACKWARD_TRANSITIVE let v3 in, which cannot read v1's data")


def avro_references():
    """An Avro schema naming a type defined in another subject (references)."""
    ref_subject = f"smoke-avro-address-{RUN}"
    address = {"type": "record", "name": "Address", "namespace": "floe.smoke", "fields": [{"name": "city", "type": "string"}]}
    client.register_schema(ref_subject, Schema(json.dumps(address), "AVRO"))
    from confluent_kafka.schema_registry import SchemaReference

    person = {"type": "record", "name": "Person", "namespace": "floe.smoke",
              "fields": [{"name": "home", "type": "floe.smoke.Address"}]}
    refs = [SchemaReference("floe.smoke.Address", ref_subject, 1)]
    topic = f"smoke-avro-person-{RUN}"
    ser = AvroSerializer(client, Schema(json.dumps(person), "AVRO", refs))
    data = ser({"home": {"city": "Lyon"}}, SerializationContext(topic, MessageField.VALUE))
    back = AvroDeserializer(client)(data, SerializationContext(topic, MessageField.VALUE))
    expect(back == {"home": {"city": "Lyon"}}, f"deserialized {back}")
    status, body = http("GET", f"/schemas/ids/{framed_id(data)}")
    expect(body.get("references") == [{"name": "floe.smoke.Address", "subject": ref_subject, "version": 1}], f"{body}")
    status, users = http("GET", f"/subjects/{ref_subject}/versions/1/referencedby")
    expect(users == [framed_id(data)], f"referencedby {users}")
    expect_error(422, 42206, "DELETE", f"/subjects/{ref_subject}/versions/1")
    undefined = {"type": "record", "name": "P2", "fields": [{"name": "home", "type": "floe.smoke.Address"}]}
    expect_error(422, 42201, "POST", f"/subjects/smoke-avro-noref-{RUN}/versions", {"schema": json.dumps(undefined)})


# ---- Protobuf ------------------------------------------------------------------------------------

F = descriptor_pb2.FieldDescriptorProto


def field(name, number, ftype, type_name=None, label=F.LABEL_OPTIONAL, **kw):
    f = F(name=name, number=number, type=ftype, label=label, **kw)
    if type_name:
        f.type_name = type_name
    return f


def proto_files():
    """floe/common.proto and floe/event.proto as FileDescriptorProtos (what protoc would make of them)."""
    common = descriptor_pb2.FileDescriptorProto(name="floe/common.proto", package="floe.common", syntax="proto3")
    common.message_type.add(name="Address", field=[field("city", 1, F.TYPE_STRING), field("zip", 2, F.TYPE_STRING)])
    level = common.enum_type.add(name="Level")
    for i, n in enumerate(["LEVEL_UNSPECIFIED", "LEVEL_INFO", "LEVEL_ERROR"]):
        level.value.add(name=n, number=i)

    event_file = descriptor_pb2.FileDescriptorProto(
        name="floe/event.proto",
        package="floe.test",
        syntax="proto3",
        dependency=["floe/common.proto", "google/protobuf/timestamp.proto"],
    )
    event_file.options.go_package = "example.com/floe/test"
    event_file.message_type.add(name="Envelope", field=[field("note", 1, F.TYPE_STRING)])
    event = event_file.message_type.add(name="Event")
    entry = event.nested_type.add(
        name="CountsEntry", field=[field("key", 1, F.TYPE_STRING), field("value", 2, F.TYPE_INT64)]
    )
    entry.options.map_entry = True
    event.nested_type.add(
        name="Inner", field=[field("n", 1, F.TYPE_INT32), field("tags", 2, F.TYPE_STRING, label=F.LABEL_REPEATED)]
    )
    event.oneof_decl.add(name="payload")
    event.oneof_decl.add(name="_comment")  # proto3 `optional`: a synthetic oneof, after the real ones
    event.field.extend(
        [
            field("id", 1, F.TYPE_STRING),
            field("ts", 2, F.TYPE_MESSAGE, ".google.protobuf.Timestamp"),
            field("counts", 3, F.TYPE_MESSAGE, ".floe.test.Event.CountsEntry", label=F.LABEL_REPEATED),
            field("text", 4, F.TYPE_STRING, oneof_index=0),
            field("address", 5, F.TYPE_MESSAGE, ".floe.common.Address", oneof_index=0),
            field("inner", 6, F.TYPE_MESSAGE, ".floe.test.Event.Inner"),
            field("level", 7, F.TYPE_ENUM, ".floe.common.Level"),
            field("comment", 8, F.TYPE_STRING, oneof_index=1, proto3_optional=True),
            field("readings", 9, F.TYPE_DOUBLE, label=F.LABEL_REPEATED),
        ]
    )
    pool = descriptor_pool.Default()
    assert timestamp_pb2.Timestamp  # google/protobuf/timestamp.proto is in the default pool
    for fdp in (common, event_file):
        try:
            pool.FindFileByName(fdp.name)
        except KeyError:
            pool.AddSerializedFile(fdp.SerializeToString())
    cls = lambda name: message_factory.GetMessageClass(pool.FindMessageTypeByName(name))  # noqa: E731
    return cls("floe.test.Event"), cls("floe.test.Event.Inner"), cls("floe.common.Address")


EXPECTED_EVENT_PROTO = """syntax = "proto3";
package floe.test;

import "floe/common.proto";
import "google/protobuf/timestamp.proto";

option go_package = "example.com/floe/test";

message Envelope {
  string note = 1;
}

message Event {
  string id = 1;
  .google.protobuf.Timestamp ts = 2;
  map<string, int64> counts = 3;
  oneof payload {
    string text = 4;
    .floe.common.Address address = 5;
  }
  .floe.test.Event.Inner inner = 6;
  .floe.common.Level level = 7;
  optional string comment = 8;
  repeated double readings = 9;
  message Inner {
    int32 n = 1;
    repeated string tags = 2;
  }
}
"""


def protobuf():
    Event, Inner, Address = proto_files()
    topic = f"smoke-proto-{RUN}"
    ctx = SerializationContext(topic, MessageField.VALUE)
    msg = Event(id="p1", counts={"a": 1, "b": -2}, address=Address(city="Oslo", zip="0150"),
                inner=Inner(n=7, tags=["t"]), level=2, comment="", readings=[0.5, -1.25])
    msg.ts.FromMicroseconds(-1_500_000)  # before the epoch
    data = ProtobufSerializer(Event, client)(msg, ctx)
    schema_id = framed_id(data)
    # Event is the file's second message: message indexes [1], zigzag varints: count 1 -> 0x02, 1 -> 0x02.
    expect(data[5:7] == b"\x02\x02", f"message indexes {data[5:7]!r}")
    expect(data[7:] == msg.SerializeToString(), "payload differs from the message's own encoding")
    back = ProtobufDeserializer(Event, {}, client)(data, ctx)
    expect(back == msg and back.HasField("comment") and back.WhichOneof("payload") == "address", f"deserialized {back}")

    nested = Inner(n=-3, tags=["u", "v"])
    ndata = ProtobufSerializer(Inner, client)(nested, ctx)
    expect(framed_id(ndata) == schema_id, "the nested message's file got another id")
    # Event.Inner: indexes [1, 1] -> count 2 (0x04), 1 (0x02), 1 (0x02). Inner is Event's second nested
    # type: the map field's synthetic CountsEntry is the first (as protoc makes it), and counts.
    expect(ndata[5:8] == b"\x04\x02\x02" and ndata[8:] == nested.SerializeToString(), f"nested bytes {ndata[:12]!r}")
    expect(ProtobufDeserializer(Inner, {}, client)(ndata, ctx) == nested, "nested round trip")

    # The serializer registered floe/common.proto itself, under the subject named by the file;
    # google/protobuf/timestamp.proto is a well-known type and is not registered.
    status, body = http("GET", f"/schemas/ids/{schema_id}")
    expect(body.get("schemaType") == "PROTOBUF", f"{body}")
    refs = body.get("references")
    expect(refs is not None and [(r["name"], r["subject"]) for r in refs] == [("floe/common.proto", "floe/common.proto")],
           f"references {refs}")
    expect(body["schema"] == EXPECTED_EVENT_PROTO, "the .proto text differs:\n" + body["schema"])
    status, ser = http("GET", f"/schemas/ids/{schema_id}?format=serialized")
    fdp = descriptor_pb2.FileDescriptorProto.FromString(base64.b64decode(ser["schema"]))
    expect([m.name for m in fdp.message_type] == ["Envelope", "Event"], "format=serialized")
    status, common = http("GET", f"/subjects/floe%2Fcommon.proto/versions/{refs[0]['version']}")
    expect(status == 200 and "enum Level {" in common["schema"] and "message Address {" in common["schema"], f"{common}")

    # The same file sent as .proto text (comments, other whitespace, relative type names) is the
    # same schema: the same id under another subject, and format=serialized gives its descriptor.
    text_subject = f"smoke-proto-text-{RUN}"
    relative = (EXPECTED_EVENT_PROTO.replace(".floe.test.Event.Inner", "Inner").replace(".floe.common.", "floe.common.")
                .replace(".google.protobuf.", "google.protobuf."))
    body = {"schemaType": "PROTOBUF", "schema": "// Event, by hand\n" + relative.replace("  ", "\t"), "references": refs}
    status, a = http("POST", f"/subjects/{text_subject}/versions", body)
    expect(status == 200 and a == {"id": schema_id}, f"text registration {status} {a}, descriptor id {schema_id}")
    own = dict(body, schema=relative.replace("message Envelope", "message Wrapper"))
    _, b = http("POST", f"/subjects/{text_subject}-2/versions", own)
    _, served = http("GET", f"/schemas/ids/{b['id']}?format=serialized")
    got = descriptor_pb2.FileDescriptorProto.FromString(base64.b64decode(served["schema"]))
    want = descriptor_pb2.FileDescriptorProto()
    descriptor_pool.Default().FindFileByName("floe/event.proto").CopyToProto(want)
    want.message_type[0].name = "Wrapper"
    got.name, want.name = "", ""
    expect(got == want, f"the text's descriptor differs:\n{got}\nwant\n{want}")
    expect_error(422, 42201, "POST", f"/subjects/{text_subject}/versions",
                 {"schemaType": "PROTOBUF", "schema": "syntax = \"proto3\"; message X { Missing m = 1; }"})
    expect_error(422, 42201, "POST", f"/subjects/{text_subject}/versions",
                 {"schemaType": "PROTOBUF", "schema": "message X { int32 a = 1;"})


def protobuf_compat():
    subject = f"smoke-proto-compat-{RUN}"
    old = descriptor_pb2.FileDescriptorProto(name="c.proto", package="c", syntax="proto3")
    old.message_type.add(name="M", field=[field("a", 1, F.TYPE_INT32), field("s", 2, F.TYPE_STRING)])
    b64 = lambda f: base64.b64encode(f.SerializeToString()).decode()  # noqa: E731
    status, _ = http("POST", f"/subjects/{subject}/versions", {"schemaType": "PROTOBUF", "schema": b64(old)})
    expect(status == 200, f"register {status}")
    widened = descriptor_pb2.FileDescriptorProto()
    widened.CopyFrom(old)
    widened.message_type[0].field[0].type = F.TYPE_INT64  # int32 -> int64: same wire type
    widened.message_type[0].field.add(name="extra", number=3, type=F.TYPE_BOOL, label=F.LABEL_OPTIONAL)
    broken = descriptor_pb2.FileDescriptorProto()
    broken.CopyFrom(old)
    broken.message_type[0].field[1].type = F.TYPE_DOUBLE  # string -> double
    for fdp, want in ((widened, True), (broken, False)):
        _, verdict = http("POST", f"/compatibility/subjects/{subject}/versions/latest", {"schemaType": "PROTOBUF", "schema": b64(fdp)})
        expect(verdict.get("is_compatible") is want, f"{verdict}, want {want}")


# ---- JSON Schema ---------------------------------------------------------------------------------

ORDER_SCHEMA = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    "title": "Order",
    "type": "object",
    "properties": {
        "id": {"type": "string"},
        "qty": {"type": "integer", "minimum": 0},
        "price": {"type": "number"},
        "at": {"type": "string", "format": "date-time"},
        "tags": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["id", "qty"],
    "additionalProperties": False,
}


def json_schema():
    topic = f"smoke-json-{RUN}"
    ctx = SerializationContext(topic, MessageField.VALUE)
    doc = {"id": "o1", "qty": 3, "price": 9.5, "at": "2026-12-03T10:00:00Z", "tags": ["a"]}
    data = JSONSerializer(json.dumps(ORDER_SCHEMA), client)(doc, ctx)
    schema_id = framed_id(data)
    expect(json.loads(data[5:]) == doc, f"payload {data[5:]!r}")
    back = JSONDeserializer(None, schema_registry_client=client)(data, ctx)
    expect(back == doc, f"deserialized {back}")
    status, body = http("GET", f"/subjects/{topic}-value/versions/latest")
    expect(body.get("schemaType") == "JSON" and body["id"] == schema_id and json.loads(body["schema"]) == ORDER_SCHEMA, f"{body}")
    again = client.register_schema(f"{topic}-value", Schema(json.dumps(ORDER_SCHEMA, indent=2, sort_keys=True), "JSON"))
    expect(again == schema_id, "key order or whitespace gave a new id")
    required_added = json.loads(json.dumps(ORDER_SCHEMA))
    required_added["required"].append("price")
    expect(not client.test_compatibility(f"{topic}-value", Schema(json.dumps(required_added), "JSON")),
           "a newly required property is not backward compatible")
    optional_added = json.loads(json.dumps(ORDER_SCHEMA))
    optional_added["properties"]["note"] = {"type": "string"}
    expect(client.test_compatibility(f"{topic}-value", Schema(json.dumps(optional_added), "JSON")), "an optional property is")
    narrowed = json.loads(json.dumps(ORDER_SCHEMA))
    narrowed["properties"]["price"] = {"type": "integer"}
    expect(not client.test_compatibility(f"{topic}-value", Schema(json.dumps(narrowed), "JSON")), "number -> integer is not")


# ---- raw HTTP: errors, deletes, config, mode -----------------------------------------------------


def errors_and_deletes():
    s = f"smoke-raw-{RUN}"
    expect_error(404, 40401, "GET", f"/subjects/{s}/versions")
    expect_error(404, 40401, "GET", f"/subjects/{s}/versions/latest")
    expect_error(404, 40403, "GET", "/schemas/ids/999999999")
    expect_error(422, 42201, "POST", f"/subjects/{s}/versions", {"schema": "{not json"})
    expect_error(422, 42201, "POST", f"/subjects/{s}/versions", {"schema": '"string"', "schemaType": "XML"})
    expect_error(404, 404, "GET", "/no/such/endpoint")
    http("PUT", f"/config/{s}", {"compatibility": "NONE"})  # string -> long is refused by BACKWARD
    status, r1 = http("POST", f"/subjects/{s}/versions", {"schema": '{"type":"string"}'})
    status, r2 = http("POST", f"/subjects/{s}/versions", {"schema": '"long"'})
    expect(status == 200 and r2["id"] > r1["id"], f"{r1} {r2}")
    expect_error(404, 40402, "GET", f"/subjects/{s}/versions/7")
    expect_error(422, 42202, "GET", f"/subjects/{s}/versions/0")
    expect_error(422, 42202, "GET", f"/subjects/{s}/versions/abc")
    expect_error(404, 40403, "POST", f"/subjects/{s}", {"schema": '"int"'})
    status, found = http("POST", f"/subjects/{s}", {"schema": '"string"'})
    expect(found == {"subject": s, "version": 1, "id": r1["id"], "schema": '"string"'}, f"lookup {found}")
    status, raw = http("GET", f"/subjects/{s}/versions/1/schema")
    expect(raw == '"string"', f"raw schema {raw!r}")
    expect_error(404, 40407, "DELETE", f"/subjects/{s}/versions/1?permanent=true")
    expect(http("DELETE", f"/subjects/{s}/versions/1") == (200, 1), "soft delete of version 1")
    expect_error(404, 40406, "DELETE", f"/subjects/{s}/versions/1")
    expect(http("GET", f"/subjects/{s}/versions") == (200, [2]), "versions after the soft delete")
    expect(http("GET", f"/subjects/{s}/versions?deleted=true") == (200, [1, 2]), "versions with deleted=true")
    expect(http("GET", f"/schemas/ids/{r1['id']}")[0] == 200, "a soft-deleted version's schema is still served by id")
    expect_error(404, 40405, "DELETE", f"/subjects/{s}?permanent=true")
    expect(http("DELETE", f"/subjects/{s}") == (200, [2]), "soft delete of the subject")
    expect_error(404, 40404, "DELETE", f"/subjects/{s}")
    expect(s not in http("GET", "/subjects")[1] and s in http("GET", "/subjects?deleted=true")[1], "subject listing")
    expect(http("DELETE", f"/subjects/{s}?permanent=true") == (200, [1, 2]), "permanent delete")
    expect_error(404, 40401, "GET", f"/subjects/{s}/versions?deleted=true")


def config_and_mode():
    s = f"smoke-config-{RUN}"
    expect(http("GET", "/config")[1].get("compatibilityLevel") in ("BACKWARD", "NONE", "FULL", "FORWARD",
           "BACKWARD_TRANSITIVE", "FORWARD_TRANSITIVE", "FULL_TRANSITIVE"), "global config")
    expect_error(404, 40408, "GET", f"/config/{s}")
    expect(http("GET", f"/config/{s}?defaultToGlobal=true")[0] == 200, "defaultToGlobal")
    expect_error(422, 42203, "PUT", f"/config/{s}", {"compatibility": "SIDEWAYS"})
    expect(http("PUT", f"/config/{s}", {"compatibility": "NONE"}) == (200, {"compatibility": "NONE"}), "PUT config")
    expect(client.get_compatibility(s) == "NONE", "client get_compatibility")
    expect(http("GET", "/mode") == (200, {"mode": "READWRITE"}), "GET /mode")
    expect(http("PUT", f"/mode/{s}", {"mode": "READONLY"}) == (200, {"mode": "READONLY"}), "PUT mode")
    expect_error(422, 42205, "POST", f"/subjects/{s}/versions", {"schema": '"int"'})
    expect_error(422, 42204, "PUT", f"/mode/{s}", {"mode": "SOMETIMES"})
    http("DELETE", f"/mode/{s}")
    expect(http("POST", f"/subjects/{s}/versions", {"schema": '"int"'})[0] == 200, "writable again")
    expect(http("GET", "/schemas/types") == (200, ["JSON", "PROTOBUF", "AVRO"]), "schema types")


# ---- a second instance: authentication and the state file ---------------------------------------


def auth_and_state_file():
    with tempfile.TemporaryDirectory() as tmp:
        data_file = os.path.join(tmp, "state.json")
        env = dict(os.environ, FLOE_SCHEMA_REGISTRY_BASIC_AUTH="floe:secret", FLOE_SCHEMA_REGISTRY_BEARER_TOKEN="tok")

        def start():
            p = subprocess.Popen(
                [sys.executable, os.path.join(HERE, "schema_registry.py"), "--port", "0", "--quiet", "--data", data_file],
                env=env, stdout=subprocess.PIPE, text=True,
            )
            line = p.stdout.readline()
            expect("listening on http://" in line, f"start-up line {line!r}")
            return p, line.split("listening on ")[1].split()[0]

        p, base = start()
        try:
            status, body = http("GET", "/subjects", base=base)
            expect(status == 401 and body.get("error_code") == 401, f"no credentials: {status} {body}")
            wrong = base64.b64encode(b"floe:nope").decode()
            expect(http("GET", "/subjects", headers={"Authorization": f"Basic {wrong}"}, base=base)[0] == 401, "wrong password")
            expect(http("GET", "/subjects", headers={"Authorization": "Bearer tok"}, base=base) == (200, []), "bearer token")
            authed = SchemaRegistryClient({"url": base, "basic.auth.user.info": "floe:secret"})
            sid = authed.register_schema("kept-value", Schema('{"type":"record","name":"K","fields":[]}', "AVRO"))
        finally:
            p.terminate()
            p.wait(10)
        p, base = start()
        try:
            authed = SchemaRegistryClient({"url": base, "basic.auth.user.info": "floe:secret"})
            expect(authed.get_latest_version("kept-value").schema_id == sid, "the state file kept the schema")
            nxt = authed.register_schema("kept-value", Schema('{"type":"record","name":"K","fields":[{"name":"a","type":"int","default":0}]}', "AVRO"))
            expect(nxt == sid + 1, f"ids continue after a restart: {nxt} after {sid}")
        finally:
            p.terminate()
            p.wait(10)


def main():
    if not URL:
        sys.exit("set FLOE_TEST_SCHEMA_REGISTRY_URL (eval \"$(deploy/local/schema-registry.sh env)\") or pass the URL")
    check("avro: v1 serialized, framed and read back", avro_v1)
    check("avro: the same schema (other whitespace, other subject) keeps its id", avro_same_schema_same_id)
    check("avro: v2 adds an optional field; compatible, registered, v1 bytes read with v2", avro_v2_compatible)
    check("avro: an incompatible change is refused with 409", avro_incompatible_refused)
    check("avro: schema-resolution rules per level", avro_rules)
    check("avro: BACKWARD_TRANSITIVE checks every version", avro_transitive)
    check("avro: references", avro_references)
    check("protobuf: nested, map, oneof, Timestamp, imported file; indexes; round trip", protobuf)
    check("protobuf: simplified compatibility", protobuf_compat)
    check("json schema: framed, read back, compatibility", json_schema)
    check("http: error codes and deletes", errors_and_deletes)
    check("http: config and mode", config_and_mode)
    check("auth and the state file (second instance)", auth_and_state_file)
    print(f"{results['passed']} passed, {results['failed']} failed")
    sys.exit(1 if results["failed"] else 0)


if __name__ == "__main__":
    main()
