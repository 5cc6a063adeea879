#!/usr/bin/env python3
"""Writes tests/data/avro_confluent_serializer.json: Avro records framed by the real Confluent
serializer (confluent-kafka's AvroSerializer, fastavro underneath, with the library's in-process
mock registry: schema id 1), decoded by floe's unit test convert::avro::tests. Regenerate with
the pinned serializers (deploy/local/schema-registry-requirements.txt):

    .venv/bin/python tests/py/avro_serializer_fixture.py > tests/data/avro_confluent_serializer.json
"""
import json, sys, datetime, decimal, uuid
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import SerializationContext, MessageField
schema = json.dumps({"type": "record", "name": "Event", "namespace": "floe.test", "fields": [
  {"name": "event_time", "type": {"type": "long", "logicalType": "timestamp-micros"}},
  {"name": "id", "type": {"type": "string", "logicalType": "uuid"}},
  {"name": "n", "type": "int"},
  {"name": "amount", "type": {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2}},
  {"name": "note", "type": ["null", "string"], "default": None},
  {"name": "tags", "type": {"type": "array", "items": "string"}},
  {"name": "attrs", "type": {"type": "map", "values": "long"}},
  {"name": "day", "type": {"type": "int", "logicalType": "date"}},
  {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["A", "B"]}}]})
c = SchemaRegistryClient.new_client({"url": "mock://floe"})
ser = AvroSerializer(c, schema)
ctx = SerializationContext("events", MessageField.VALUE)
recs = [
  {"event_time": datetime.datetime(2024, 6, 1, 10, 0, tzinfo=datetime.timezone.utc), "id": uuid.UUID("67e55044-10b1-426f-9247-bb680e5fe0c8"), "n": -5, "amount": decimal.Decimal("-12.34"), "note": None, "tags": ["x", "y"], "attrs": {"k": 2**40}, "day": datetime.date(1969, 12, 31), "kind": "B"},
  {"event_time": datetime.datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=datetime.timezone.utc), "id": uuid.UUID(int=0), "n": 2**31 - 1, "amount": decimal.Decimal("99999999.99"), "note": "héllo", "tags": [], "attrs": {}, "day": datetime.date(2024, 2, 29), "kind": "A"},
]
print(json.dumps({"schema": schema, "records": [ser(r, ctx).hex() for r in recs]}, indent=1))
