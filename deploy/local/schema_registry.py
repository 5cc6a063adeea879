#!/usr/bin/env python3
"""A small Confluent-compatible Schema Registry for floe's tests and for a laptop.

It serves the REST subset that floe and the official Confluent serializers use (deploy/local/README.md,
"Local schema registry"): register and look up schemas under subjects, fetch them by id and by
subject/version, references, soft and permanent deletes, compatibility levels and the compatibility
check (real Avro schema-resolution rules; a documented, simplified check for Protobuf and JSON Schema),
and the modes. Error bodies and codes are Confluent's: {"error_code": 40401, "message": "..."}.

State is in memory, or also in a JSON file (--data FILE, rewritten after every change).
Python's standard library only; the `protobuf` package (in .venv) is needed only to accept Protobuf
schemas sent as a base64 FileDescriptorProto, as confluent-kafka's ProtobufSerializer sends them.

    python3 deploy/local/schema_registry.py --host 127.0.0.1 --port 8085 [--data FILE]
        [--tls-cert PEM --tls-key PEM] [--quiet]

Authentication (off unless set): FLOE_SCHEMA_REGISTRY_BASIC_AUTH="user:password" (HTTP basic) and/or
FLOE_SCHEMA_REGISTRY_BEARER_TOKEN="token" (Authorization: Bearer). When either is set, every request
must carry one of them, or gets 401 {"error_code": 401, ...}.
"""

import argparse
import base64
import binascii
import hmac
import json
import os
import re
import ssl
import sys
import tempfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote, urlsplit

from schema_registry_proto import (
    WELL_KNOWN_MODULES,
    looks_base64_descriptor,
    ProtoParser,
    ProtoSchemaError,
    ProtoUnsupported,
    proto_compat,
    proto_decode_descriptor,
    proto_descriptor_to_text,
    proto_text_canonical,
)

CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"
SCHEMA_TYPES = ("AVRO", "PROTOBUF", "JSON")
LEVELS = (
    "NONE",
    "BACKWARD",
    "BACKWARD_TRANSITIVE",
    "FORWARD",
    "FORWARD_TRANSITIVE",
    "FULL",
    "FULL_TRANSITIVE",
)
MODES = ("READWRITE", "READONLY", "READONLY_OVERRIDE", "IMPORT")
DEFAULT_LEVEL = "BACKWARD"
DEFAULT_MODE = "READWRITE"
MAX_VERSION = 2**31 - 1


class ApiError(Exception):
    """An error answered as Confluent does: HTTP status and body {"error_code", "message"}."""

    def __init__(self, status, code, message):
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message


def subject_not_found(subject):
    return ApiError(404, 40401, f"Subject '{subject}' not found.")


def version_not_found(version):
    return ApiError(404, 40402, f"Version {version} not found.")


def schema_not_found(what=None):
    return ApiError(404, 40403, "Schema not found" if what is None else f"Schema {what} not found")


def invalid_schema(detail):
    return ApiError(422, 42201, f"Invalid schema {detail}")


def invalid_version(text):
    return ApiError(
        422,
        42202,
        f"The specified version '{text}' is not a valid version id. "
        'Allowed values are between [1, 2^31-1] and the string "latest"',
    )


# ---- Avro ----------------------------------------------------------------------------------------

AVRO_PRIMITIVES = ("null", "boolean", "int", "long", "float", "double", "bytes", "string")
AVRO_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# Key order of the canonical text (Avro's own Schema.toString order); other properties follow, sorted.
AVRO_KEY_ORDER = (
    "type",
    "name",
    "namespace",
    "doc",
    "fields",
    "symbols",
    "items",
    "values",
    "size",
    "default",
    "order",
    "aliases",
    "logicalType",
    "precision",
    "scale",
)

AVRO_FIELD_KEY_ORDER = ("name", "type", "doc", "default", "order", "aliases")


def avro_canonical(node):
    """Whitespace- and key-order-free text of an Avro schema, keeping every attribute (doc, default,
    logicalType, ...), in the form of Avro's Schema.toString: {"type": "string"} is "string", a named
    type's full name is split into "name" and a "namespace" written only where it differs from the
    enclosing one, and a reference to a type of the enclosing namespace is its short name."""

    def norm(n, ns, in_field=False):
        if isinstance(n, str):
            if "." in n and n.rsplit(".", 1)[0] == ns:
                return n.rsplit(".", 1)[1]
            return n
        if isinstance(n, list):
            return [norm(x, ns) for x in n]
        if not isinstance(n, dict):
            return n
        if not in_field and set(n) == {"type"} and isinstance(n["type"], str):
            return norm(n["type"], ns)
        n = dict(n)
        inner = ns
        if not in_field and n.get("type") in ("record", "error", "enum", "fixed") and isinstance(n.get("name"), str):
            name = n["name"]
            space = name.rsplit(".", 1)[0] if "." in name else (n.get("namespace") if "namespace" in n else ns)
            space = space or ""  # null and "" are the null namespace
            n["name"] = name.rsplit(".", 1)[-1]
            n.pop("namespace", None)
            if space != ns:
                n["namespace"] = space
            inner = space
        out = {}
        keys = AVRO_FIELD_KEY_ORDER if in_field else AVRO_KEY_ORDER
        order = [k for k in keys if k in n] + sorted(k for k in n if k not in keys)
        for k in order:
            v = n[k]
            if k == "fields" and isinstance(v, list):
                v = [norm(f, inner, in_field=True) for f in v]
            elif k in ("type", "items", "values"):
                v = norm(v, inner)
            out[k] = v
        return out

    return json.dumps(norm(node, ""), separators=(",", ":"), ensure_ascii=False)


class AvroSchemaParser:
    """Parses an Avro schema (JSON) into a graph for validation and compatibility: primitives as
    {"type": p}, named types by full name in `named`, references to them as {"type": "ref", "name": full}."""

    def __init__(self, named=None):
        self.named = dict(named or {})

    def full_name(self, name, namespace):
        if "." in name:
            return name
        return f"{namespace}.{name}" if namespace else name

    def define(self, node, namespace):
        name = node.get("name")
        if not isinstance(name, str) or not name:
            raise invalid_schema(f"{node.get('type')} has no name: {json.dumps(node)[:200]}")
        ns = node.get("namespace", namespace)
        if ns is not None and not isinstance(ns, str):
            raise invalid_schema(f"namespace of '{name}' must be a string")
        full = self.full_name(name, ns)
        for part in full.split("."):
            if not AVRO_NAME.match(part):
                raise invalid_schema(f"illegal name '{full}'")
        if full in self.named:
            raise invalid_schema(f"Can't redefine: {full}")
        space = full.rsplit(".", 1)[0] if "." in full else ""
        aliases = [self.full_name(a, space) for a in node.get("aliases", []) if isinstance(a, str)]
        return full, space, aliases

    def parse(self, node, namespace=""):
        if isinstance(node, str):
            if node in AVRO_PRIMITIVES:
                return {"type": node}
            for candidate in (self.full_name(node, namespace), node):
                if candidate in self.named:
                    return {"type": "ref", "name": candidate}
            raise invalid_schema(f"Undefined name: \"{node}\"")
        if isinstance(node, list):
            branches = [self.parse(b, namespace) for b in node]
            seen = set()
            for b in branches:
                if b["type"] == "union":
                    raise invalid_schema("Nested union: unions may not immediately contain other unions")
                key = b["name"] if b["type"] in ("ref", "record", "enum", "fixed") else b["type"]
                if key in seen:
                    raise invalid_schema(f"Duplicate in union: {key}")
                seen.add(key)
            return {"type": "union", "branches": branches}
        if not isinstance(node, dict) or "type" not in node:
            raise invalid_schema(f"No type: {json.dumps(node)[:200]}")
        t = node["type"]
        if isinstance(t, (dict, list)):
            return self.parse(t, namespace)  # {"type": {...}} or {"type": [...]}: the inner schema
        if not isinstance(t, str):
            raise invalid_schema(f"type must be a string, an object or a list: {json.dumps(node)[:200]}")
        if t not in AVRO_PRIMITIVES + ("record", "error", "enum", "fixed", "array", "map"):
            return self.parse(t, namespace)  # {"type": "some.Named"}
        if t in AVRO_PRIMITIVES:
            return {"type": t}
        if t == "array":
            if "items" not in node:
                raise invalid_schema("array has no items")
            return {"type": "array", "items": self.parse(node["items"], namespace)}
        if t == "map":
            if "values" not in node:
                raise invalid_schema("map has no values")
            return {"type": "map", "values": self.parse(node["values"], namespace)}
        full, space, aliases = self.define(node, namespace)
        if t == "enum":
            symbols = node.get("symbols")
            if not isinstance(symbols, list) or not all(isinstance(s, str) and AVRO_NAME.match(s) for s in symbols):
                raise invalid_schema(f"enum {full}: symbols must be a list of names")
            if len(set(symbols)) != len(symbols):
                raise invalid_schema(f"enum {full}: duplicate symbol")
            if "default" in node and node["default"] not in symbols:
                raise invalid_schema(f"enum {full}: default '{node['default']}' is not a symbol")
            out = {"type": "enum", "name": full, "aliases": aliases, "symbols": symbols, "default": node.get("default")}
            self.named[full] = out
            return out
        if t == "fixed":
            size = node.get("size")
            if not isinstance(size, int) or isinstance(size, bool) or size < 0:
                raise invalid_schema(f"fixed {full}: size must be a non-negative integer")
            out = {"type": "fixed", "name": full, "aliases": aliases, "size": size}
            self.named[full] = out
            return out
        # record / error
        fields = node.get("fields")
        if not isinstance(fields, list):
            raise invalid_schema(f"record {full} has no fields")
        out = {"type": "record", "name": full, "aliases": aliases, "fields": []}
        self.named[full] = out  # before the fields: a record may refer to itself
        names = set()
        for f in fields:
            if not isinstance(f, dict) or not isinstance(f.get("name"), str) or "type" not in f:
                raise invalid_schema(f"record {full}: every field needs a name and a type")
            if not AVRO_NAME.match(f["name"]):
                raise invalid_schema(f"record {full}: illegal field name '{f['name']}'")
            if f["name"] in names:
                raise invalid_schema(f"record {full}: duplicate field {f['name']}")
            names.add(f["name"])
            out["fields"].append(
                {
                    "name": f["name"],
                    "aliases": [a for a in f.get("aliases", []) if isinstance(a, str)],
                    "type": self.parse(f["type"], space),
                    "has_default": "default" in f,
                }
            )
        return out


def avro_type_name(node):
    return node["type"] if node["type"] not in ("record", "enum", "fixed") else f"{node['type']} {node['name']}"


AVRO_PROMOTIONS = {
    "int": ("long", "float", "double"),
    "long": ("float", "double"),
    "float": ("double",),
    "string": ("bytes",),
    "bytes": ("string",),
}


class AvroCompat:
    """Can a reader schema read data written with a writer schema? Avro's schema-resolution rules
    (the specification's "Schema Resolution", as Avro's SchemaCompatibility applies them)."""

    def __init__(self, reader_named, writer_named):
        self.rn = reader_named
        self.wn = writer_named
        self.seen = set()
        self.errors = []

    def deref(self, node, named):
        while node["type"] == "ref":
            node = named[node["name"]]
        return node

    def error(self, kind, path, description):
        self.errors.append({"errorType": kind, "path": path or "/", "description": description})

    @staticmethod
    def short(name):
        return name.rsplit(".", 1)[-1]

    def names_match(self, r, w):
        return self.short(r["name"]) == self.short(w["name"]) or w["name"] in r.get("aliases", [])

    def check(self, r, w, path=""):
        """Appends to self.errors; returns whether r reads w."""
        before = len(self.errors)
        self._check(self.deref(r, self.rn), self.deref(w, self.wn), path)
        return len(self.errors) == before

    def _check(self, r, w, path):
        if w["type"] == "union":
            for i, b in enumerate(w["branches"]):
                self.check(r, b, f"{path}/{i}")
            return
        if r["type"] == "union":
            for b in r["branches"]:
                probe = AvroCompat(self.rn, self.wn)
                probe.seen = set(self.seen)
                if probe.check(b, w, path):
                    return
            self.error(
                "MISSING_UNION_BRANCH",
                path,
                f"The new schema's union at path '{path or '/'}' has no branch that reads the old "
                f"schema's {avro_type_name(w)}",
            )
            return
        rt, wt = r["type"], w["type"]
        if rt != wt:
            if rt in AVRO_PROMOTIONS.get(wt, ()):
                return
            self.error(
                "TYPE_MISMATCH",
                path,
                f"The type (path '{path or '/'}') of a field in the new schema does not match with the old "
                f"schema: reader {avro_type_name(r)} cannot read writer {avro_type_name(w)}",
            )
            return
        if rt in AVRO_PRIMITIVES:
            return
        if rt == "array":
            self.check(r["items"], w["items"], f"{path}/items")
            return
        if rt == "map":
            self.check(r["values"], w["values"], f"{path}/values")
            return
        if not self.names_match(r, w):
            self.error(
                "NAME_MISMATCH",
                f"{path}/name",
                f"The name of the schema has changed (path '{path}/name'): reader {r['name']}, writer {w['name']}",
            )
            return
        if rt == "fixed":
            if r["size"] != w["size"]:
                self.error(
                    "FIXED_SIZE_MISMATCH",
                    f"{path}/size",
                    f"The size of FIXED type field at path '{path}/size' in the new schema does not match "
                    f"with the old schema: reader {r['size']}, writer {w['size']}",
                )
            return
        if rt == "enum":
            missing = [s for s in w["symbols"] if s not in r["symbols"]]
            if missing and r.get("default") is None:
                self.error(
                    "MISSING_ENUM_SYMBOLS",
                    f"{path}/symbols",
                    f"The new schema is missing enum symbols '{missing}' at path '{path}/symbols' in the "
                    "old schema",
                )
            return
        # record
        key = (id(r), id(w))
        if key in self.seen:
            return
        self.seen.add(key)
        by_name = {f["name"]: f for f in w["fields"]}
        for i, rf in enumerate(r["fields"]):
            wf = by_name.get(rf["name"])
            if wf is None:
                for alias in rf["aliases"]:
                    if alias in by_name:
                        wf = by_name[alias]
                        break
            if wf is None:
                if not rf["has_default"]:
                    self.error(
                        "READER_FIELD_MISSING_DEFAULT_VALUE",
                        f"{path}/fields/{i}",
                        f"The field '{rf['name']}' at path '{path}/fields/{i}' in the new schema has no "
                        "default value and is missing in the old schema",
                    )
                continue
            self.check(rf["type"], wf["type"], f"{path}/fields/{i}/type")


# ---- JSON Schema ---------------------------------------------------------------------------------


def json_types(schema):
    """The JSON types a (sub)schema admits, or None when it says nothing about types."""
    if not isinstance(schema, dict):
        return None if schema is True or schema is None else set()
    t = schema.get("type")
    if t is None:
        return None
    types = set(t) if isinstance(t, list) else {t}
    if "number" in types:
        types.add("integer")
    return types


def json_compat(reader, writer, path, errors):
    """Simplified JSON Schema compatibility: can every document valid under `writer` be read under
    `reader`? Checks types (integer within number), properties recursively, array items, required
    properties and closed objects (additionalProperties: false). $ref, combinators (allOf, anyOf,
    oneOf, not), patterns, bounds and enums are not compared."""
    if not isinstance(reader, dict) or not isinstance(writer, dict):
        return
    rt, wt = json_types(reader), json_types(writer)
    if rt is not None:
        if wt is None:
            errors.append(f"TYPE_NARROWED at '{path or '#'}': the reader restricts the type to {sorted(rt)}, the writer allows any")
            return
        lost = sorted(t for t in wt if t not in rt)
        if lost:
            errors.append(f"TYPE_NARROWED at '{path or '#'}': the reader does not admit {lost}")
    rprops, wprops = reader.get("properties", {}), writer.get("properties", {})
    if isinstance(rprops, dict) and isinstance(wprops, dict):
        wrequired = set(writer.get("required", []) or [])
        for name in reader.get("required", []) or []:
            if name not in wrequired:
                errors.append(
                    f"REQUIRED_PROPERTY_ADDED at '{path}/properties/{name}': required by the reader, "
                    "optional or absent in the writer"
                )
        for name, wsub in wprops.items():
            if name in rprops:
                json_compat(rprops[name], wsub, f"{path}/properties/{name}", errors)
            elif reader.get("additionalProperties") is False:
                errors.append(
                    f"PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL at '{path}/properties/{name}': the writer "
                    "allows it, the reader's object is closed"
                )
    if isinstance(reader.get("items"), dict) and isinstance(writer.get("items"), dict):
        json_compat(reader["items"], writer["items"], f"{path}/items", errors)


# ---- the registry --------------------------------------------------------------------------------


class Registry:
    """Subjects, versions, schemas by id, configuration; every method runs under one lock."""

    def __init__(self, data_file=None):
        self.lock = threading.RLock()
        self.data_file = data_file
        self.schemas = {}  # id -> {"schemaType", "schema", "references", "key", "serialized"}
        self.by_key = {}  # identity key -> id
        self.subjects = {}  # subject -> [{"version", "id", "deleted"}] in version order
        self.config = {}  # subject -> level
        self.global_level = DEFAULT_LEVEL
        self.modes = {}  # subject -> mode
        self.global_mode = DEFAULT_MODE
        self.next_id = 1
        if data_file and os.path.exists(data_file):
            self.load()

    # -- persistence
    def load(self):
        with open(self.data_file) as f:
            d = json.load(f)
        self.schemas = {int(k): v for k, v in d["schemas"].items()}
        self.by_key = {v["key"]: k for k, v in self.schemas.items()}
        self.subjects = d["subjects"]
        self.config = d["config"]
        self.global_level = d["global_level"]
        self.modes = d["modes"]
        self.global_mode = d["global_mode"]
        self.next_id = d["next_id"]

    def save(self):
        if not self.data_file:
            return
        d = {
            "schemas": self.schemas,
            "subjects": self.subjects,
            "config": self.config,
            "global_level": self.global_level,
            "modes": self.modes,
            "global_mode": self.global_mode,
            "next_id": self.next_id,
        }
        directory = os.path.dirname(os.path.abspath(self.data_file))
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=".schema-registry-")
        with os.fdopen(fd, "w") as f:
            json.dump(d, f)
        os.replace(tmp, self.data_file)

    # -- lookups
    def versions(self, subject, deleted=False):
        return [v for v in self.subjects.get(subject, []) if deleted or not v["deleted"]]

    def live_versions_or_404(self, subject, deleted=False):
        vs = self.versions(subject, deleted)
        if not vs:
            raise subject_not_found(subject)
        return vs

    def find_version(self, subject, version_text, deleted=False):
        vs = self.live_versions_or_404(subject, deleted)
        n = parse_version(version_text)
        if n == -1:
            live = [v for v in vs if not v["deleted"]] or vs
            return live[-1]
        for v in vs:
            if v["version"] == n:
                return v
        raise version_not_found(n)

    def schema(self, schema_id):
        s = self.schemas.get(schema_id)
        if s is None or not any(v["id"] == schema_id for vs in self.subjects.values() for v in vs):
            raise ApiError(404, 40403, f"Schema {schema_id} not found")
        return s

    def schema_body(self, schema_id, fmt=None):
        s = self.schema(schema_id)
        body = {"schema": s["schema"]}
        if fmt == "serialized" and s["schemaType"] == "PROTOBUF":
            if not s.get("serialized"):
                raise ApiError(
                    422,
                    42201,
                    f"Schema {schema_id} is .proto text this registry cannot compile (groups, editions, or no "
                    "`protobuf` package): format=serialized is not available for it (deploy/local/README.md)",
                )
            body["schema"] = s["serialized"]
        if s["schemaType"] != "AVRO":
            body["schemaType"] = s["schemaType"]
        if s["references"]:
            body["references"] = s["references"]
        return body

    def version_body(self, subject, v, fmt=None):
        body = {"subject": subject, "version": v["version"], "id": v["id"]}
        body.update(self.schema_body(v["id"], fmt))
        return body

    # -- parsing
    def resolve_references(self, refs):
        """Checks each reference names a registered subject version; returns them normalised."""
        if refs is None:
            return []
        if not isinstance(refs, list):
            raise invalid_schema("references must be a list")
        out = []
        for r in refs:
            if not isinstance(r, dict) or not all(k in r for k in ("name", "subject", "version")):
                raise invalid_schema(f"a reference needs name, subject and version: {json.dumps(r)}")
            try:
                v = self.find_version(r["subject"], str(r["version"]), deleted=True)
            except ApiError as e:
                raise invalid_schema(f"reference {r['name']!r} to {r['subject']} version {r['version']}: {e.message}")
            out.append({"name": r["name"], "subject": r["subject"], "version": v["version"]})
        return out

    def avro_named(self, refs, seen=None):
        """Named types defined by the referenced Avro schemas (recursively), in definition order."""
        parser = AvroSchemaParser()
        seen = set() if seen is None else seen
        for r in refs:
            v = self.find_version(r["subject"], str(r["version"]), deleted=True)
            if v["id"] in seen:
                continue
            seen.add(v["id"])
            s = self.schemas[v["id"]]
            if s["schemaType"] != "AVRO":
                raise invalid_schema(f"reference {r['name']!r} is a {s['schemaType']} schema")
            parser.named.update(self.avro_named(s["references"], seen))
            parser.named.update(self.parse_avro(s["schema"], parser.named)[1])
        return parser.named

    def parse_avro(self, text, named):
        try:
            node = json.loads(text)
        except ValueError as e:
            raise invalid_schema(f"{text[:200]!r}, details: {e}")
        parser = AvroSchemaParser(named)
        root = parser.parse(node)
        own = {k: v for k, v in parser.named.items() if k not in named}
        return root, own, node

    def prepare(self, body):
        """Validates a request's schema; returns (schemaType, stored text, references, identity key,
        serialized descriptor or None, parsed form for compatibility)."""
        if not isinstance(body, dict):
            raise ApiError(400, 400, "the request body must be a JSON object")
        text = body.get("schema")
        if not isinstance(text, str) or not text.strip():
            raise ApiError(422, 42201, "Empty schema")
        stype = body.get("schemaType") or "AVRO"
        if stype not in SCHEMA_TYPES:
            raise invalid_schema(f"of unknown type {stype!r}: AVRO, PROTOBUF or JSON")
        refs = self.resolve_references(body.get("references"))
        serialized = None
        if stype == "AVRO":
            named = self.avro_named(refs)
            root, own, node = self.parse_avro(text, named)
            stored = avro_canonical(node)
            parsed = (root, {**named, **own})
            key_text = stored
        elif stype == "JSON":
            try:
                node = json.loads(text)
            except ValueError as e:
                raise invalid_schema(f"{text[:200]!r}, details: {e}")
            if not isinstance(node, (dict, bool)):
                raise invalid_schema("a JSON Schema is an object or a boolean")
            stored = json.dumps(node, separators=(",", ":"), ensure_ascii=False)
            key_text = json.dumps(node, separators=(",", ":"), sort_keys=True, ensure_ascii=False)
            parsed = node
        else:
            if looks_base64_descriptor(text):
                fdp = proto_decode_descriptor(text)
                serialized = "".join(text.split())
            else:
                fdp = self.parse_proto(text, refs)
                if fdp is not None:
                    serialized = base64.b64encode(fdp.SerializeToString()).decode("ascii")
            if fdp is not None:
                # Text and descriptor alike are served, and compared, as the text printed from the descriptor.
                stored = key_text = proto_descriptor_to_text(fdp)
            else:
                stored, key_text = text, proto_text_canonical(text)
            parsed = fdp
        key = json.dumps([stype, key_text, refs], separators=(",", ":"))
        return stype, stored, refs, key, serialized, parsed

    def proto_file(self, schema_id):
        """The FileDescriptorProto of a stored Protobuf schema, or None (text this parser cannot read)."""
        s = self.schemas[schema_id]
        if s.get("serialized"):
            return proto_decode_descriptor(s["serialized"])
        return self.parse_proto(s["schema"], s["references"])

    def parse_proto(self, text, refs):
        """FileDescriptorProto of .proto text, its imports taken from the references and the well-known
        types; None when the `protobuf` package is missing or the text uses what the parser lacks."""
        try:
            import importlib

            from google.protobuf import descriptor_pb2, descriptor_pool
        except ImportError:
            return None
        proto_text_canonical(text)  # the basic checks, with their messages
        imports = {}
        for r in refs:
            v = self.find_version(r["subject"], str(r["version"]), deleted=True)
            dep = self.proto_file(v["id"])
            if dep is None:
                return None
            dep.name = r["name"]
            imports[r["name"]] = dep
        pool = descriptor_pool.Default()
        for module in WELL_KNOWN_MODULES:
            try:
                importlib.import_module(f"google.protobuf.{module}_pb2")
            except ImportError:
                pass
        for t in re.findall(r'import\s+(?:public\s+|weak\s+)?"(google/protobuf/[\w/]+\.proto)"', text):
            if t not in imports:
                try:
                    fdp = descriptor_pb2.FileDescriptorProto()
                    pool.FindFileByName(t).CopyToProto(fdp)
                    imports[t] = fdp
                except KeyError:
                    pass
        try:
            return ProtoParser(text, imports).parse()
        except ProtoUnsupported:
            return None

    def parsed_of(self, schema_id):
        """The compatibility form of a stored schema."""
        s = self.schemas[schema_id]
        return self.prepare({"schema": s.get("serialized") or s["schema"], "schemaType": s["schemaType"],
                             "references": s["references"]})[5]

    # -- compatibility
    def level(self, subject):
        return self.config.get(subject, self.global_level)

    def compatibility_errors(self, subject, stype, parsed, against, level=None, transitive=None):
        """Messages explaining why the new schema is incompatible with the versions `against` (empty:
        compatible): all of them when the level is transitive (or `transitive`), else the last one."""
        level = level or self.level(subject)
        if level == "NONE" or not against:
            return []
        if transitive is None:
            transitive = level.endswith("_TRANSITIVE")
        if not transitive:
            against = against[-1:]
        errors = []
        for v in against:
            old = self.schemas[v["id"]]
            if old["schemaType"] != stype:
                errors.append(
                    f"{{errorType:'SCHEMA_TYPE_CHANGED', description:'{old['schemaType']} -> {stype}', "
                    f"oldSchemaVersion: {v['version']}}}"
                )
                continue
            old_parsed = self.parsed_of(v["id"])
            directions = []
            if level.startswith(("BACKWARD", "FULL")):
                directions.append(("new", parsed, old_parsed))  # the new schema reads the old one's data
            if level.startswith(("FORWARD", "FULL")):
                directions.append(("old", old_parsed, parsed))  # the old schema reads the new one's data
            found = []
            for _, reader, writer in directions:
                found.extend(self.compare(stype, reader, writer))
            if found:
                errors.extend(found)
                errors.append(f"{{oldSchemaVersion: {v['version']}}}")
                errors.append(f"{{oldSchema: '{old['schema']}'}}")
        if errors:
            errors.append(f"{{compatibility: '{level}'}}")
        return errors

    def compare(self, stype, reader, writer):
        if stype == "AVRO":
            c = AvroCompat(reader[1], writer[1])
            c.check(reader[0], writer[0])
            return [
                f"{{errorType:'{e['errorType']}', description:'{e['description']}', additionalInfo:'{e['path']}'}}"
                for e in c.errors
            ]
        if stype == "JSON":
            out = []
            json_compat(reader, writer, "", out)
            return [f"{{errorType:'{m.split(' ', 1)[0]}', description:'{m}'}}" for m in out]
        if reader is None or writer is None:
            return []  # .proto text: not compared (deploy/local/README.md)
        out = []
        proto_compat(reader, writer, out)
        return [f"{{errorType:'{m.split(':', 1)[0]}', description:'{m}'}}" for m in out]

    # -- writes
    def mode(self, subject):
        return self.modes.get(subject, self.global_mode)

    def register(self, subject, body, normalize=False):
        with self.lock:
            if self.mode(subject) in ("READONLY", "READONLY_OVERRIDE"):
                raise ApiError(422, 42205, f"Subject {subject} is in read-only mode")
            stype, stored, refs, key, serialized, parsed = self.prepare(body)
            live = self.versions(subject)
            existing_id = self.by_key.get(key)
            for v in live:
                if v["id"] == existing_id:
                    return {"id": existing_id}
            errors = self.compatibility_errors(subject, stype, parsed, live)
            if errors:
                raise ApiError(
                    409,
                    409,
                    f'Schema being registered is incompatible with an earlier schema for subject "{subject}", '
                    f"details: [{', '.join(errors)}]",
                )
            if existing_id is None:
                wanted = body.get("id")
                if self.mode(subject) == "IMPORT" and isinstance(wanted, int) and wanted > 0:
                    if wanted in self.schemas:
                        raise ApiError(422, 42205, f"Overwrite new schema with id {wanted} is not permitted.")
                    existing_id = wanted
                else:
                    existing_id = self.next_id
                self.next_id = max(self.next_id, existing_id + 1)
                self.schemas[existing_id] = {
                    "schemaType": stype,
                    "schema": stored,
                    "references": refs,
                    "key": key,
                    "serialized": serialized,
                }
                self.by_key[key] = existing_id
            all_versions = self.subjects.setdefault(subject, [])
            number = (all_versions[-1]["version"] + 1) if all_versions else 1
            all_versions.append({"version": number, "id": existing_id, "deleted": False})
            self.save()
            return {"id": existing_id}

    def lookup(self, subject, body, deleted=False):
        with self.lock:
            vs = self.live_versions_or_404(subject, deleted)
            key = self.prepare(body)[3]
            schema_id = self.by_key.get(key)
            for v in reversed(vs):
                if v["id"] == schema_id:
                    return self.version_body(subject, v)
            raise schema_not_found()

    def referenced_by(self, subject, number):
        return sorted(
            sid
            for sid, s in self.schemas.items()
            if any(r["subject"] == subject and r["version"] == number for r in s["references"])
            and any(v["id"] == sid for vs in self.subjects.values() for v in vs)
        )

    def delete_version(self, subject, version_text, permanent):
        with self.lock:
            n = parse_version(version_text)
            vs = self.subjects.get(subject, [])
            if not vs:
                raise subject_not_found(subject)
            if n == -1:
                live = [v for v in vs if not v["deleted"]]
                if not live:
                    raise subject_not_found(subject)
                v = live[-1]
            else:
                v = next((v for v in vs if v["version"] == n), None)
                if v is None:
                    raise version_not_found(n)
            if self.referenced_by(subject, v["version"]):
                raise ApiError(
                    422, 42206, f"One or more references exist to the schema {{subject={subject},version={v['version']}}}."
                )
            if permanent:
                if not v["deleted"]:
                    raise ApiError(
                        404,
                        40407,
                        f"Subject '{subject}' Version {v['version']} was not deleted first before being "
                        "permanently deleted",
                    )
                vs.remove(v)
                if not vs:
                    del self.subjects[subject]
            else:
                if v["deleted"]:
                    raise ApiError(
                        404,
                        40406,
                        f"Subject '{subject}' Version {v['version']} was soft deleted. Set permanent=true to "
                        "delete permanently",
                    )
                v["deleted"] = True
            self.save()
            return v["version"]

    def delete_subject(self, subject, permanent):
        with self.lock:
            vs = self.subjects.get(subject, [])
            if not vs:
                raise subject_not_found(subject)
            for v in vs:
                if self.referenced_by(subject, v["version"]):
                    raise ApiError(
                        422, 42206, f"One or more references exist to the schema {{subject={subject},version={v['version']}}}."
                    )
            if permanent:
                if any(not v["deleted"] for v in vs):
                    raise ApiError(
                        404, 40405, f"Subject '{subject}' was not deleted first before being permanently deleted"
                    )
                del self.subjects[subject]
                self.config.pop(subject, None)
                self.modes.pop(subject, None)
                out = [v["version"] for v in vs]
            else:
                live = [v for v in vs if not v["deleted"]]
                if not live:
                    raise ApiError(
                        404, 40404, f"Subject '{subject}' was soft deleted.Set permanent=true to delete permanently"
                    )
                for v in live:
                    v["deleted"] = True
                out = [v["version"] for v in live]
            self.save()
            return out


def parse_version(text):
    """-1 for latest, else the version number; raises 42202."""
    if text in ("latest", "-1"):
        return -1
    try:
        n = int(text)
    except (TypeError, ValueError):
        raise invalid_version(text)
    if n < 1 or n > MAX_VERSION or str(n) != str(text).strip():
        raise invalid_version(text)
    return n


def flag(query, name, default=False):
    vals = query.get(name)
    if not vals:
        return default
    return vals[-1].strip().lower() == "true"


# ---- HTTP ----------------------------------------------------------------------------------------


class Handler(BaseHTTPRequestHandler):
    """One request; routes by method and path (segments percent-decoded: subjects may hold '/')."""

    protocol_version = "HTTP/1.1"
    # Headers and body are two writes: without TCP_NODELAY, Nagle holds the body until the client's
    # delayed ACK (40 ms per request on keep-alive connections).
    disable_nagle_algorithm = True
    server_version = "floe-schema-registry/1"
    registry = None  # set by main
    basic_auth = None  # "user:password"
    bearer_token = None
    quiet = False

    def log_message(self, fmt, *args):
        if not self.quiet:
            sys.stderr.write("%s %s\n" % (self.log_date_time_string(), fmt % args))

    def do_GET(self):
        self.handle_api("GET")

    def do_POST(self):
        self.handle_api("POST")

    def do_PUT(self):
        self.handle_api("PUT")

    def do_DELETE(self):
        self.handle_api("DELETE")

    def send(self, status, payload, raw=False):
        data = payload.encode() if raw else json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "text/plain" if raw else self.response_type())
        self.send_header("Content-Length", str(len(data)))
        if status == 401:
            self.send_header("WWW-Authenticate", 'Basic realm="floe-schema-registry"')
        self.end_headers()
        self.wfile.write(data)

    def response_type(self):
        """Confluent's content negotiation: the first of its JSON types the Accept header names,
        else application/vnd.schemaregistry.v1+json."""
        for item in self.headers.get("Accept", "").split(","):
            kind = item.split(";")[0].strip().lower()
            if kind in (CONTENT_TYPE, "application/vnd.schemaregistry+json", "application/json"):
                return kind
        return CONTENT_TYPE

    def authorized(self):
        if not self.basic_auth and not self.bearer_token:
            return True
        header = self.headers.get("Authorization", "")
        scheme, _, value = header.partition(" ")
        if self.basic_auth and scheme.lower() == "basic":
            try:
                given = base64.b64decode(value.strip(), validate=True).decode()
            except (binascii.Error, UnicodeDecodeError):
                return False
            return hmac.compare_digest(given, self.basic_auth)
        if self.bearer_token and scheme.lower() == "bearer":
            return hmac.compare_digest(value.strip(), self.bearer_token)
        return False

    def read_body(self):
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        if not raw:
            return None
        try:
            return json.loads(raw)
        except ValueError as e:
            raise ApiError(400, 400, f"Unrecognized request body (not JSON): {e}")

    def handle_api(self, method):
        try:
            parts = urlsplit(self.path)
            query = parse_qs(parts.query)
            segs = [unquote(s) for s in parts.path.strip("/").split("/")] if parts.path.strip("/") else []
            # Read the body before answering, so the connection stays usable (keep-alive).
            body = self.read_body() if method in ("POST", "PUT") else None
            if not self.authorized():
                raise ApiError(401, 401, "Unauthorized")
            status, payload, raw = self.route(method, segs, query, body)
            self.send(status, payload, raw)
        except ApiError as e:
            self.send(e.status, {"error_code": e.code, "message": e.message})
        except ProtoSchemaError as e:
            self.send(422, {"error_code": 42201, "message": f"Invalid schema {e}"})
        except Exception as e:  # noqa: BLE001: a bug answers 500 with its text, as Confluent's 50001
            self.log_message("internal error: %r", e)
            self.send(500, {"error_code": 50001, "message": f"Error in the backend data store: {e!r}"})

    def route(self, method, segs, query, body):
        reg = self.registry
        n = len(segs)
        ok = lambda payload: (200, payload, False)  # noqa: E731
        if n == 0 and method == "GET":
            return ok({})
        head = segs[0] if segs else ""
        with reg.lock:
            if head == "schemas":
                if n == 1 and method == "GET":
                    deleted = flag(query, "deleted")
                    prefix = query.get("subjectPrefix", [""])[-1]
                    latest_only = flag(query, "latestOnly")
                    out = []
                    for subject in sorted(reg.subjects):
                        if not subject.startswith(prefix):
                            continue
                        vs = reg.versions(subject, deleted)
                        for v in vs[-1:] if latest_only else vs:
                            out.append(reg.version_body(subject, v))
                    return ok(out)
                if n == 2 and segs[1] == "types" and method == "GET":
                    return ok(["JSON", "PROTOBUF", "AVRO"])  # Confluent's order
                if n >= 3 and segs[1] == "ids" and method == "GET":
                    try:
                        schema_id = int(segs[2])
                    except ValueError:
                        raise ApiError(404, 40403, f"Schema {segs[2]} not found")
                    if n == 3:
                        return ok(reg.schema_body(schema_id, query.get("format", [None])[-1]))
                    if n == 4 and segs[3] == "schema":
                        return 200, reg.schema(schema_id)["schema"], True
                    if n == 4 and segs[3] in ("subjects", "versions"):
                        reg.schema(schema_id)
                        deleted = flag(query, "deleted")
                        only = query.get("subject", [None])[-1]
                        pairs = [
                            (s, v["version"])
                            for s, vs in sorted(reg.subjects.items())
                            for v in vs
                            if v["id"] == schema_id and (deleted or not v["deleted"]) and (only in (None, s))
                        ]
                        if segs[3] == "subjects":
                            return ok(sorted({s for s, _ in pairs}))
                        return ok([{"subject": s, "version": ver} for s, ver in pairs])
            elif head == "subjects":
                if n == 1 and method == "GET":
                    deleted = flag(query, "deleted")
                    prefix = query.get("subjectPrefix", [""])[-1]
                    return ok(sorted(s for s in reg.subjects if s.startswith(prefix) and reg.versions(s, deleted)))
                if n >= 2:
                    subject = segs[1]
                    if n == 2 and method == "POST":
                        return ok(reg.lookup(subject, body, flag(query, "deleted")))
                    if n == 2 and method == "DELETE":
                        return ok(reg.delete_subject(subject, flag(query, "permanent")))
                    if n == 3 and segs[2] == "versions":
                        if method == "GET":
                            return ok([v["version"] for v in reg.live_versions_or_404(subject, flag(query, "deleted"))])
                        if method == "POST":
                            return ok(reg.register(subject, body, flag(query, "normalize")))
                    if n >= 4 and segs[2] == "versions":
                        if n == 4 and method == "DELETE":
                            return ok(reg.delete_version(subject, segs[3], flag(query, "permanent")))
                        if method == "GET":
                            v = reg.find_version(subject, segs[3], flag(query, "deleted"))
                            if n == 4:
                                return ok(reg.version_body(subject, v, query.get("format", [None])[-1]))
                            if n == 5 and segs[4] == "schema":
                                return 200, reg.schemas[v["id"]]["schema"], True
                            if n == 5 and segs[4] == "referencedby":
                                return ok(reg.referenced_by(subject, v["version"]))
            elif head == "config" and n <= 2:
                subject = segs[1] if n == 2 else None
                if method == "GET":
                    if subject is None:
                        return ok({"compatibilityLevel": reg.global_level})
                    if subject in reg.config:
                        return ok({"compatibilityLevel": reg.config[subject]})
                    if flag(query, "defaultToGlobal"):
                        return ok({"compatibilityLevel": reg.global_level})
                    raise ApiError(
                        404, 40408, f"Subject '{subject}' does not have subject-level compatibility configured"
                    )
                if method == "PUT":
                    level = (body or {}).get("compatibility") if isinstance(body, dict) else None
                    if level not in LEVELS:
                        raise ApiError(422, 42203, "Invalid compatibility level. Valid values are none, backward, "
                                       "forward, full, backward_transitive, forward_transitive, and full_transitive")
                    if subject is None:
                        reg.global_level = level
                    else:
                        reg.config[subject] = level
                    reg.save()
                    return ok({"compatibility": level})
                if method == "DELETE":
                    if subject is None:
                        old, reg.global_level = reg.global_level, DEFAULT_LEVEL
                    else:
                        if subject not in reg.subjects and subject not in reg.config:
                            raise subject_not_found(subject)
                        old = reg.config.pop(subject, reg.global_level)
                    reg.save()
                    return ok({"compatibilityLevel": old})
            elif head == "mode" and n <= 2:
                subject = segs[1] if n == 2 else None
                if method == "GET":
                    if subject is None:
                        return ok({"mode": reg.global_mode})
                    if subject in reg.modes:
                        return ok({"mode": reg.modes[subject]})
                    if flag(query, "defaultToGlobal"):
                        return ok({"mode": reg.global_mode})
                    raise ApiError(404, 40409, f"Subject '{subject}' does not have subject-level mode configured")
                if method == "PUT":
                    mode = (body or {}).get("mode") if isinstance(body, dict) else None
                    if mode not in MODES:
                        raise ApiError(422, 42204, "Invalid mode. Valid values are READWRITE, READONLY, "
                                       "READONLY_OVERRIDE and IMPORT.")
                    if subject is None:
                        reg.global_mode = mode
                    else:
                        reg.modes[subject] = mode
                    reg.save()
                    return ok({"mode": mode})
                if method == "DELETE" and subject is not None:
                    old = reg.modes.pop(subject, reg.global_mode)
                    reg.save()
                    return ok({"mode": old})
            elif head == "compatibility" and method == "POST" and n >= 4 and segs[1] == "subjects" and segs[3] == "versions":
                subject = segs[2]
                verbose = flag(query, "verbose")
                stype, _, _, _, _, parsed = reg.prepare(body)
                if n == 5:
                    n_version = parse_version(segs[4])
                    vs = reg.versions(subject)
                    if n_version == -1:
                        # As Confluent: every live version, the level deciding between the latest and all.
                        against, transitive = vs, None
                    else:
                        transitive = False
                        if not vs:
                            raise subject_not_found(subject)
                        against = [v for v in vs if v["version"] == n_version]
                        if not against:
                            raise version_not_found(n_version)
                    errors = reg.compatibility_errors(subject, stype, parsed, against, transitive=transitive)
                elif n == 4:
                    # Every live version, whatever the level's transitivity (Confluent's "all versions").
                    errors = reg.compatibility_errors(subject, stype, parsed, reg.versions(subject), transitive=True)
                else:
                    errors = None
                if errors is not None:
                    out = {"is_compatible": not errors}
                    if verbose:
                        out["messages"] = errors
                    return ok(out)
            elif head == "contexts" and n == 1 and method == "GET":
                return ok(["."])
        raise ApiError(404, 404, "HTTP 404 Not Found")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8085, help="0: any free port (printed on the first line)")
    p.add_argument("--data", help="JSON file keeping the state across restarts (rewritten after each change)")
    p.add_argument("--tls-cert", help="PEM certificate (chain): serve HTTPS")
    p.add_argument("--tls-key", help="PEM private key of --tls-cert")
    p.add_argument("--quiet", action="store_true", help="no request log")
    a = p.parse_args()
    if bool(a.tls_cert) != bool(a.tls_key):
        p.error("--tls-cert and --tls-key go together")
    Handler.registry = Registry(a.data)
    Handler.basic_auth = os.environ.get("FLOE_SCHEMA_REGISTRY_BASIC_AUTH") or None
    Handler.bearer_token = os.environ.get("FLOE_SCHEMA_REGISTRY_BEARER_TOKEN") or None
    Handler.quiet = a.quiet
    if Handler.basic_auth and ":" not in Handler.basic_auth:
        p.error("FLOE_SCHEMA_REGISTRY_BASIC_AUTH must be user:password")
    server = ThreadingHTTPServer((a.host, a.port), Handler)
    server.daemon_threads = True
    scheme = "http"
    if a.tls_cert:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(a.tls_cert, a.tls_key)
        server.socket = ctx.wrap_socket(server.socket, server_side=True)
        scheme = "https"
    auth = [x for x, on in (("basic", Handler.basic_auth), ("bearer", Handler.bearer_token)) if on]
    print(
        f"schema registry listening on {scheme}://{a.host}:{server.server_address[1]}"
        f" (auth: {', '.join(auth) or 'none'}; state: {a.data or 'memory'})",
        flush=True,
    )
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
