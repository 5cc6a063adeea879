#!/usr/bin/env python3
"""Serializes records with confluent-kafka's own serializers against a schema registry, so that
floe's tests read the bytes production sends (Confluent wire format).

Usage: confluent_serialize.py REGISTRY_URL SUBJECT FORMAT SCHEMA_FILE < records.jsonl > frames.hex

FORMAT is json_sr (JSONSerializer; the schema file is a JSON Schema) or avro (AvroSerializer; an
Avro schema, records as its JSON form with logical values as numbers). Each input line is one JSON
record; each output line is the hex of its serialized bytes. The schema is registered under
SUBJECT (auto.register.schemas, as the serializer does by default) and its id printed to stderr.
"""
import json
import sys

from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.serialization import MessageField, SerializationContext


def main():
    url, subject, fmt, schema_file = sys.argv[1:5]
    client = SchemaRegistryClient({"url": url})
    schema = open(schema_file).read()
    conf = {"subject.name.strategy": lambda ctx, record_name: subject}
    if fmt == "json_sr":
        from confluent_kafka.schema_registry.json_schema import JSONSerializer

        # validate=False: the tests also send records the schema refuses (floe's DLQ codes).
        serializer = JSONSerializer(schema, client, conf={**conf, "validate": False})
    elif fmt == "avro":
        from confluent_kafka.schema_registry.avro import AvroSerializer

        serializer = AvroSerializer(client, schema, conf=conf)
    else:
        sys.exit(f"unknown format {fmt}")
    ctx = SerializationContext("events", MessageField.VALUE)
    for line in sys.stdin:
        if line.strip():
            print(serializer(json.loads(line), ctx).hex())
    print(client.get_latest_version(subject).schema_id, file=sys.stderr)


if __name__ == "__main__":
    main()
