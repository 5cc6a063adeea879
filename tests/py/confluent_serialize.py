#!/usr/bin/env python3
"""Serializes records with confluent-kafka's own serializers against a schema registry, so that
floe's tests read the bytes production sends (Confluent wire format).

Usage: confluent_serialize.py REGISTRY_URL SUBJECT FORMAT SCHEMA_FILE < records.jsonl > frames.hex

FORMAT is
- json_sr (JSONSerializer; the schema file is a JSON Schema);
- avro (AvroSerializer; an Avro schema, records as its JSON form with logical values as numbers,
  decimals as JSON numbers read exactly);
- protobuf (ProtobufSerializer; the schema file is a FileDescriptorSet in protobuf's JSON form,
  what `protoc --descriptor_set_out` makes, dependencies first; well-known imports such as
  google/protobuf/timestamp.proto need not be in it). The message classes are built at run time
  from it; records are the first message of the last file, in protobuf's JSON mapping
  (timestamps as RFC 3339 strings).

Each input line is one JSON record; each output line is the hex of its serialized bytes. The
schema is registered under SUBJECT (auto.register.schemas, as the serializer does by default) and
its id printed to stderr.
"""
import decimal
import json
import sys

from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.serialization import MessageField, SerializationContext


def protobuf_message(schema_text):
    """The class of the first message of the last file of a FileDescriptorSet (JSON form)."""
    from google.protobuf import descriptor_pb2, descriptor_pool, json_format, message_factory
    from google.protobuf import timestamp_pb2  # noqa: F401: puts timestamp.proto in the default pool

    files = json_format.Parse(schema_text, descriptor_pb2.FileDescriptorSet()).file
    pool = descriptor_pool.Default()
    for fdp in files:
        pool.AddSerializedFile(fdp.SerializeToString())
    last = files[-1]
    name = ".".join(p for p in (last.package, last.message_type[0].name) if p)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(name))


def main():
    url, subject, fmt, schema_file = sys.argv[1:5]
    client = SchemaRegistryClient({"url": url})
    schema = open(schema_file).read()
    conf = {"subject.name.strategy": lambda ctx, record_name: subject}
    to_value = json.loads
    if fmt == "json_sr":
        from confluent_kafka.schema_registry.json_schema import JSONSerializer

        # validate=False: the tests also send records the schema refuses (floe's DLQ codes).
        serializer = JSONSerializer(schema, client, conf={**conf, "validate": False})
    elif fmt == "avro":
        from confluent_kafka.schema_registry.avro import AvroSerializer

        serializer = AvroSerializer(client, schema, conf=conf)
        # fastavro writes a decimal from a Decimal (and a double from it too).
        to_value = lambda line: json.loads(line, parse_float=decimal.Decimal)  # noqa: E731
    elif fmt == "protobuf":
        from google.protobuf import json_format
        from confluent_kafka.schema_registry.protobuf import ProtobufSerializer

        message = protobuf_message(schema)
        serializer = ProtobufSerializer(message, client, conf=conf)
        to_value = lambda line: json_format.Parse(line, message())  # noqa: E731
    else:
        sys.exit(f"unknown format {fmt}")
    ctx = SerializationContext("events", MessageField.VALUE)
    for line in sys.stdin:
        if line.strip():
            print(serializer(to_value(line), ctx).hex())
    print(client.get_latest_version(subject).schema_id, file=sys.stderr)


if __name__ == "__main__":
    main()
