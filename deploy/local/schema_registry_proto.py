"""Protobuf schemas for deploy/local/schema_registry.py: .proto text tokenised and parsed into a
FileDescriptorProto (as protoc would make it), a FileDescriptorProto printed back as .proto text, and the
registry's simplified Protobuf compatibility check. The parser and the printer need the `protobuf`
package; both were checked against protoc (grpcio-tools) on proto2 and proto3 files: the parser's
descriptor equals protoc's, and the printed text compiles with protoc to the same descriptor.
"""

import base64
import binascii
import re


class ProtoSchemaError(Exception):
    """An invalid Protobuf schema; the registry answers 422 with error_code 42201."""


PROTO_TOKEN = re.compile(
    r'\s+|//[^\n]*|/\*.*?\*/|("(?:[^"\\\n]|\\.)*"|\'(?:[^\'\\\n]|\\.)*\'|[A-Za-z_][\w.]*|'
    r"[0-9][\w.+-]*|\.[\w.]+|[{}()\[\];=<>,:+-])",
    re.S,
)


def proto_tokens(text):
    """Tokens of .proto text, comments and whitespace dropped; raises ApiError on stray characters."""
    tokens, pos = [], 0
    while pos < len(text):
        m = PROTO_TOKEN.match(text, pos)
        if not m:
            raise ProtoSchemaError(f"unexpected character {text[pos]!r} at offset {pos} of the .proto text")
        if m.group(1) is not None:
            tokens.append(m.group(1))
        pos = m.end()
    return tokens


def proto_text_canonical(text):
    """Normalised .proto text (comments dropped, one space between tokens) and the checks a parser
    would make first: balanced braces and a message, enum or service."""
    tokens = proto_tokens(text)
    depth = 0
    for t in tokens:
        depth += {"{": 1, "}": -1}.get(t, 0)
        if depth < 0:
            raise ProtoSchemaError("unbalanced '}' in the .proto text")
    if depth != 0:
        raise ProtoSchemaError("unbalanced '{' in the .proto text")
    if not any(t in ("message", "enum", "service") for t in tokens):
        raise ProtoSchemaError("the .proto text defines no message, enum or service")
    return " ".join(tokens)


def looks_base64_descriptor(text):
    s = text.strip()
    return bool(s) and re.fullmatch(r"[A-Za-z0-9+/=\s]+", s) is not None and "{" not in s


PROTO_TYPES = {
    1: "double", 2: "float", 3: "int64", 4: "uint64", 5: "int32", 6: "fixed64", 7: "fixed32", 8: "bool",
    9: "string", 10: "group", 11: "message", 12: "bytes", 13: "uint32", 14: "enum", 15: "sfixed32",
    16: "sfixed64", 17: "sint32", 18: "sint64",
}


def proto_quote(s):
    if isinstance(s, bytes):
        s = s.decode("latin-1")
    return '"' + "".join(
        c if 32 <= ord(c) < 127 and c not in '"\\' else ("\\" + c if c in '"\\' else f"\\{ord(c):03o}")
        for c in s) + '"'


def proto_option_value(field, value):
    from google.protobuf.descriptor import FieldDescriptor

    if field.type == FieldDescriptor.TYPE_BOOL:
        return "true" if value else "false"
    if field.type in (FieldDescriptor.TYPE_STRING, FieldDescriptor.TYPE_BYTES):
        return proto_quote(value)
    if field.type == FieldDescriptor.TYPE_ENUM:
        return field.enum_type.values_by_number[value].name
    if field.type in (FieldDescriptor.TYPE_MESSAGE, FieldDescriptor.TYPE_GROUP):
        return None  # aggregate options are not printed
    return repr(value) if isinstance(value, float) else str(value)


def proto_options(options, indent, inline=False):
    """`option name = value;` lines (or `name = value` items for inline field options)."""
    out = []
    for field, value in options.ListFields():
        repeated = field.is_repeated if hasattr(field, "is_repeated") else field.label == field.LABEL_REPEATED
        if repeated:
            continue
        rendered = proto_option_value(field, value)
        if rendered is None:
            continue
        name = f"({field.full_name})" if field.is_extension else field.name
        out.append(f"{name} = {rendered}" if inline else f"{indent}option {name} = {rendered};")
    return out


def default_json_name(name):
    parts = name.split("_")
    return parts[0] + "".join(p[:1].upper() + p[1:] for p in parts[1:])


def proto_descriptor_to_text(fdp):
    """.proto text of a FileDescriptorProto (type names fully qualified, with a leading dot)."""
    lines = [f'syntax = "{fdp.syntax or "proto2"}";']
    proto3 = fdp.syntax == "proto3"
    if fdp.package:
        lines.append(f"package {fdp.package};")
    if fdp.dependency:
        lines.append("")
        public, weak = set(fdp.public_dependency), set(fdp.weak_dependency)
        for i, dep in enumerate(fdp.dependency):
            kind = "public " if i in public else "weak " if i in weak else ""
            lines.append(f"import {kind}{proto_quote(dep)};")
    file_options = proto_options(fdp.options, "")
    if file_options:
        lines.append("")
        lines.extend(file_options)

    def field_line(f, maps, indent, in_oneof=False):
        if f.type_name and f.type_name in maps:
            key, value = maps[f.type_name]
            ftype = f"map<{type_of(key)}, {type_of(value)}>"
            label = ""
        else:
            ftype = type_of(f)
            if f.label == 3:
                label = "repeated "
            elif in_oneof:
                label = ""
            elif proto3:
                label = "optional " if f.proto3_optional else ""
            else:
                label = "required " if f.label == 2 else "optional "
        opts = proto_options(f.options, "", inline=True)
        if f.HasField("default_value"):
            dv = f.default_value
            # a bytes default is stored C-escaped already
            opts.insert(0, f"default = {proto_quote(dv) if f.type == 9 else chr(34) + dv + chr(34) if f.type == 12 else dv}")
        if f.HasField("json_name") and f.json_name != default_json_name(f.name):
            opts.append(f"json_name = {proto_quote(f.json_name)}")
        suffix = f" [{', '.join(opts)}]" if opts else ""
        return f"{indent}{label}{ftype} {f.name} = {f.number}{suffix};"

    def type_of(f):
        return f.type_name if f.type in (10, 11, 14) else PROTO_TYPES[f.type]

    def enum_lines(e, indent):
        out = [f"{indent}enum {e.name} {{"]
        out.extend(proto_options(e.options, indent + "  "))
        for v in e.value:
            opts = proto_options(v.options, "", inline=True)
            out.append(f"{indent}  {v.name} = {v.number}{' [' + ', '.join(opts) + ']' if opts else ''};")
        for r in e.reserved_range:
            out.append(f"{indent}  reserved {r.start}{'' if r.end == r.start else f' to {r.end}'};")
        if e.reserved_name:
            out.append(f"{indent}  reserved {', '.join(proto_quote(n) for n in e.reserved_name)};")
        out.append(f"{indent}}}")
        return out

    def message_lines(m, scope, indent):
        full = f"{scope}.{m.name}"
        maps = {}
        for n in m.nested_type:
            if n.options.map_entry:
                fields = {f.name: f for f in n.field}
                maps[f"{full}.{n.name}"] = (fields["key"], fields["value"])
        out = [f"{indent}message {m.name} {{"]
        inner = indent + "  "
        out.extend(proto_options(m.options, inner))
        synthetic = {f.oneof_index for f in m.field if f.proto3_optional and f.HasField("oneof_index")}
        printed_oneofs = set()
        for f in m.field:
            if f.HasField("oneof_index") and f.oneof_index not in synthetic:
                idx = f.oneof_index
                if idx in printed_oneofs:
                    continue
                printed_oneofs.add(idx)
                out.append(f"{inner}oneof {m.oneof_decl[idx].name} {{")
                for g in m.field:
                    if g.HasField("oneof_index") and g.oneof_index == idx:
                        out.append(field_line(g, maps, inner + "  ", in_oneof=True))
                out.append(f"{inner}}}")
            else:
                out.append(field_line(f, maps, inner))
        for n in m.nested_type:
            if not n.options.map_entry:
                out.extend(message_lines(n, full, inner))
        for e in m.enum_type:
            out.extend(enum_lines(e, inner))
        for r in m.extension_range:
            out.append(f"{inner}extensions {r.start} to {'max' if r.end >= 536870912 else r.end - 1};")
        for r in m.reserved_range:
            out.append(f"{inner}reserved {r.start}{'' if r.end - 1 == r.start else f' to {r.end - 1}'};")
        if m.reserved_name:
            out.append(f"{inner}reserved {', '.join(proto_quote(n) for n in m.reserved_name)};")
        out.extend(extension_lines(m.extension, inner))
        out.append(f"{indent}}}")
        return out

    def extension_lines(extensions, indent):
        out = []
        by_extendee = {}
        for f in extensions:
            by_extendee.setdefault(f.extendee, []).append(f)
        for extendee, fields in by_extendee.items():
            out.append(f"{indent}extend {extendee} {{")
            out.extend(field_line(f, {}, indent + "  ") for f in fields)
            out.append(f"{indent}}}")
        return out

    scope = f".{fdp.package}" if fdp.package else ""
    for m in fdp.message_type:
        lines.append("")
        lines.extend(message_lines(m, scope, ""))
    for e in fdp.enum_type:
        lines.append("")
        lines.extend(enum_lines(e, ""))
    for s in fdp.service:
        lines.append("")
        lines.append(f"service {s.name} {{")
        lines.extend(proto_options(s.options, "  "))
        for rpc in s.method:
            cs = "stream " if rpc.client_streaming else ""
            ss = "stream " if rpc.server_streaming else ""
            head = f"  rpc {rpc.name}({cs}{rpc.input_type}) returns ({ss}{rpc.output_type})"
            method_options = proto_options(rpc.options, "    ")
            if method_options:
                lines.extend([head + " {", *method_options, "  }"])
            else:
                lines.append(head + ";")
        lines.append("}")
    if fdp.extension:
        lines.append("")
        lines.extend(extension_lines(fdp.extension, ""))
    return "\n".join(lines) + "\n"


def proto_decode_descriptor(text):
    """FileDescriptorProto of a base64 schema; raises ApiError when it is not one."""
    try:
        from google.protobuf import descriptor_pb2
        from google.protobuf.message import DecodeError
    except ImportError:
        raise ProtoSchemaError(
            "sent as a base64 FileDescriptorProto: this registry needs the `protobuf` Python package "
            "to read it (run it with the project's .venv)"
        )
    try:
        raw = base64.b64decode("".join(text.split()), validate=True)
        fdp = descriptor_pb2.FileDescriptorProto()
        fdp.ParseFromString(raw)
    except (binascii.Error, DecodeError, ValueError) as e:
        raise ProtoSchemaError(f"neither .proto text nor a base64 FileDescriptorProto: {e}")
    if not (fdp.message_type or fdp.enum_type or fdp.service):
        raise ProtoSchemaError("the FileDescriptorProto defines no message, enum or service")
    return fdp


class ProtoUnsupported(Exception):
    """Valid .proto this parser does not handle (groups, editions): the text is kept as sent."""


PROTO_SCALARS = {name: number for number, name in PROTO_TYPES.items() if name not in ("group", "message", "enum")}
PROTO_MAX_FIELD = 536870911
WELL_KNOWN_MODULES = ("any", "api", "duration", "empty", "field_mask", "source_context", "struct", "timestamp",
                      "type", "wrappers", "descriptor")


def proto_unescape(token):
    """The bytes of a quoted .proto string literal, as latin-1 text (descriptor strings are UTF-8)."""
    body, out, i = token[1:-1], bytearray(), 0
    simple = {"n": 10, "t": 9, "r": 13, "a": 7, "b": 8, "f": 12, "v": 11, "\\": 92, "'": 39, '"': 34, "?": 63}
    while i < len(body):
        c = body[i]
        if c != "\\":
            out += c.encode()
            i += 1
            continue
        n = body[i + 1]
        if n in simple:
            out.append(simple[n])
            i += 2
        elif n in "xX":
            m = re.match(r"[0-9A-Fa-f]{1,2}", body[i + 2:])
            out.append(int(m.group(0), 16))
            i += 2 + len(m.group(0))
        elif n.isdigit():
            m = re.match(r"[0-7]{1,3}", body[i + 1:])
            out.append(int(m.group(0), 8) & 0xFF)
            i += 1 + len(m.group(0))
        else:
            raise ProtoSchemaError(f"unknown escape \\{n} in {token}")
    return out.decode("utf-8", errors="surrogateescape")


def proto_c_escape(text):
    """protoc's CEscape of bytes (given as latin-1/surrogate-escaped text)."""
    out = []
    for b in text.encode("utf-8", errors="surrogateescape"):
        c = chr(b)
        if c in "\n\r\t\"'\\":
            out.append({"\n": "\\n", "\r": "\\r", "\t": "\\t", '"': '\\"', "'": "\\'", "\\": "\\\\"}[c])
        elif 32 <= b < 127:
            out.append(c)
        else:
            out.append(f"\\{b:03o}")
    return "".join(out)


def proto_int(text):
    t = text.lower()
    base = 16 if t.startswith("0x") else 8 if len(t) > 1 and t.startswith("0") else 10
    return int(t, base)


def camel_entry_name(field_name):
    return "".join(p[:1].upper() + p[1:] for p in field_name.split("_")) + "Entry"


class ProtoParser:
    """A .proto (proto2/proto3) text parser producing a FileDescriptorProto, as protoc would: maps as
    nested `…Entry` messages, proto3 `optional` as synthetic oneofs, type names resolved against the
    file and its imports. Custom options (`(name)`) are skipped; groups and editions are ProtoUnsupported."""

    def __init__(self, text, imports):
        from google.protobuf import descriptor_pb2

        self.pb = descriptor_pb2
        self.toks = proto_tokens(text)
        self.i = 0
        self.imports = imports  # import path -> FileDescriptorProto
        self.fdp = descriptor_pb2.FileDescriptorProto()
        self.unresolved = []  # (field-like message, attribute, scope)

    # -- tokens
    def peek(self, k=0):
        return self.toks[self.i + k] if self.i + k < len(self.toks) else None

    def next(self):
        t = self.peek()
        if t is None:
            raise ProtoSchemaError("unexpected end of the .proto text")
        self.i += 1
        return t

    def expect(self, want):
        t = self.next()
        if t != want:
            raise ProtoSchemaError(f"expected {want!r}, found {t!r} (token {self.i}) in the .proto text")
        return t

    def accept(self, want):
        if self.peek() == want:
            self.i += 1
            return True
        return False

    def ident(self):
        t = self.next()
        if not re.match(r"^\.?[A-Za-z_][\w.]*$", t):
            raise ProtoSchemaError(f"expected a name, found {t!r} in the .proto text")
        return t

    def string(self):
        t = self.next()
        if t[:1] not in "\"'":
            raise ProtoSchemaError(f"expected a string, found {t!r} in the .proto text")
        out = proto_unescape(t)
        while self.peek() and self.peek()[:1] in "\"'":
            out += proto_unescape(self.next())
        return out

    def integer(self):
        sign = -1 if self.accept("-") else 1
        t = self.next()
        try:
            return sign * proto_int(t)
        except ValueError:
            raise ProtoSchemaError(f"expected an integer, found {t!r} in the .proto text")

    def constant(self):
        """An option value as text: string contents, identifier, or number (with its sign)."""
        t = self.peek()
        if t[:1] in "\"'":
            return self.string(), "string"
        if t == "{":
            self.skip_block()
            return None, "aggregate"
        sign = "-" if self.accept("-") else ""
        self.accept("+")
        return sign + self.next(), "plain"

    def skip_block(self):
        depth = 0
        while True:
            t = self.next()
            depth += {"{": 1, "}": -1}.get(t, 0)
            if depth == 0:
                return

    # -- options
    def option_name(self):
        if self.accept("("):
            name = "(" + self.ident() + ")"
            self.expect(")")
            while self.peek() and self.peek().startswith("."):
                name += self.next()
            return name
        return self.ident()

    def set_option(self, options, name, value, kind):
        if name.startswith("(") or kind == "aggregate" or "." in name:
            return  # custom options are not kept
        field = options.DESCRIPTOR.fields_by_name.get(name)
        if field is None:
            raise ProtoSchemaError(f"unknown option {name!r} in the .proto text")
        if field.type == field.TYPE_BOOL:
            setattr(options, name, value == "true")
        elif field.type == field.TYPE_ENUM:
            setattr(options, name, field.enum_type.values_by_name[value].number)
        elif field.type == field.TYPE_STRING:
            setattr(options, name, value)
        elif field.type in (field.TYPE_DOUBLE, field.TYPE_FLOAT):
            setattr(options, name, float(value))
        else:
            setattr(options, name, proto_int(value.lstrip("-")) * (-1 if value.startswith("-") else 1))

    def option_statement(self, options):
        name = self.option_name()
        self.expect("=")
        value, kind = self.constant()
        self.expect(";")
        self.set_option(options, name, value, kind)

    def field_options(self, f):
        """`[default = x, json_name = "y", packed = true, ...]` after a field."""
        if not self.accept("["):
            return
        while True:
            name = self.option_name()
            self.expect("=")
            value, kind = self.constant()
            if name == "default":
                # protoc keeps a bytes default C-escaped, a string default as it is
                f.default_value = proto_c_escape(value) if f.type == f.TYPE_BYTES else value
            elif name == "json_name":
                f.json_name = value
            else:
                self.set_option(f.options, name, value, kind)
            if self.accept("]"):
                return
            self.expect(",")

    # -- file
    def parse(self):
        fdp = self.fdp
        if self.accept("syntax"):
            self.expect("=")
            fdp.syntax = self.string()
            self.expect(";")
        elif self.peek() == "edition":
            raise ProtoUnsupported("editions")
        else:
            fdp.syntax = "proto2"
        if fdp.syntax not in ("proto2", "proto3"):
            raise ProtoSchemaError(f"unknown syntax {fdp.syntax!r}")
        if fdp.syntax == "proto2":
            fdp.ClearField("syntax")  # protoc leaves proto2's syntax unset
        while self.peek() is not None:
            t = self.next()
            if t == ";":
                continue
            if t == "package":
                fdp.package = self.ident()
                self.expect(";")
            elif t == "import":
                kind = self.next() if self.peek() in ("public", "weak") else None
                if kind == "public":
                    fdp.public_dependency.append(len(fdp.dependency))
                elif kind == "weak":
                    fdp.weak_dependency.append(len(fdp.dependency))
                fdp.dependency.append(self.string())
                self.expect(";")
            elif t == "option":
                self.option_statement(fdp.options)
            elif t == "message":
                self.message(fdp.message_type.add(), self.scope_of_file())
            elif t == "enum":
                self.enum(fdp.enum_type.add())
            elif t == "service":
                self.service(fdp.service.add())
            elif t == "extend":
                self.extend(fdp.extension, self.scope_of_file())
            else:
                raise ProtoSchemaError(f"unexpected {t!r} at the top level of the .proto text")
        self.resolve()
        return fdp

    def scope_of_file(self):
        return "." + self.fdp.package if self.fdp.package else ""

    # -- declarations
    def message(self, m, scope):
        m.name = self.ident()
        full = f"{scope}.{m.name}"
        self.expect("{")
        synthetic = []  # proto3 optional fields, their oneofs added after the real ones
        while not self.accept("}"):
            t = self.peek()
            if t == ";":
                self.next()
            elif t == "message":
                self.next()
                self.message(m.nested_type.add(), full)
            elif t == "enum":
                self.next()
                self.enum(m.enum_type.add())
            elif t == "option":
                self.next()
                self.option_statement(m.options)
            elif t == "oneof":
                self.next()
                index = len(m.oneof_decl)
                m.oneof_decl.add(name=self.ident())
                self.expect("{")
                while not self.accept("}"):
                    if self.accept("option"):
                        self.option_statement(m.oneof_decl[index].options)
                    elif not self.accept(";"):
                        f = self.field(m, full, label=None)
                        f.oneof_index = index
            elif t == "reserved":
                self.next()
                self.reserved(m.reserved_range, m.reserved_name, exclusive_end=True, maximum=PROTO_MAX_FIELD + 1)
            elif t == "extensions":
                self.next()
                while True:
                    start = self.integer()
                    end = start
                    if self.accept("to"):
                        end = PROTO_MAX_FIELD if self.accept("max") else self.integer()
                    m.extension_range.add(start=start, end=end + 1)
                    if not self.accept(","):
                        break
                if self.peek() == "[":
                    self.field_options(self.pb.FieldDescriptorProto())
                self.expect(";")
            elif t == "extend":
                self.next()
                self.extend(m.extension, full)
            elif t == "map":
                self.map_field(m, full)
            else:
                label = None
                if t in ("optional", "required", "repeated"):
                    label = self.next()
                f = self.field(m, full, label)
                if label == "optional" and self.fdp.syntax == "proto3":
                    f.proto3_optional = True
                    synthetic.append(f)
        for f in synthetic:
            name = "_" + f.name
            while any(o.name == name for o in m.oneof_decl):
                name = "X" + name
            f.oneof_index = len(m.oneof_decl)
            m.oneof_decl.add(name=name)

    def field(self, m, scope, label, into=None):
        pb = self.pb.FieldDescriptorProto
        if self.peek() == "group":
            raise ProtoUnsupported("groups")
        f = (into if into is not None else m.field).add()
        type_name = self.ident()
        f.name = self.ident()
        self.expect("=")
        f.number = self.integer()
        f.label = {"repeated": pb.LABEL_REPEATED, "required": pb.LABEL_REQUIRED}.get(label, pb.LABEL_OPTIONAL)
        if type_name in PROTO_SCALARS:
            f.type = PROTO_SCALARS[type_name]
        else:
            f.type_name = type_name
            self.unresolved.append((f, scope))
        self.field_options(f)
        self.expect(";")
        return f

    def map_field(self, m, scope):
        pb = self.pb.FieldDescriptorProto
        self.expect("map")
        self.expect("<")
        key = self.ident()
        self.expect(",")
        value = self.ident()
        self.expect(">")
        name = self.ident()
        self.expect("=")
        number = self.integer()
        entry = m.nested_type.add(name=camel_entry_name(name))
        entry.options.map_entry = True
        for n, (fname, ftype) in enumerate((("key", key), ("value", value)), 1):
            ef = entry.field.add(name=fname, number=n, label=pb.LABEL_OPTIONAL)
            if ftype in PROTO_SCALARS:
                ef.type = PROTO_SCALARS[ftype]
            else:
                ef.type_name = ftype
                self.unresolved.append((ef, scope))
        f = m.field.add(name=name, number=number, label=pb.LABEL_REPEATED, type=pb.TYPE_MESSAGE,
                        type_name=f"{scope}.{entry.name}")
        self.field_options(f)
        self.expect(";")

    def enum(self, e):
        e.name = self.ident()
        self.expect("{")
        while not self.accept("}"):
            t = self.peek()
            if t == ";":
                self.next()
            elif t == "option":
                self.next()
                self.option_statement(e.options)
            elif t == "reserved":
                self.next()
                self.reserved(e.reserved_range, e.reserved_name, exclusive_end=False, maximum=2**31 - 1)
            else:
                v = e.value.add(name=self.ident())
                self.expect("=")
                v.number = self.integer()
                if self.accept("["):
                    while True:
                        name = self.option_name()
                        self.expect("=")
                        value, kind = self.constant()
                        self.set_option(v.options, name, value, kind)
                        if self.accept("]"):
                            break
                        self.expect(",")
                self.expect(";")

    def reserved(self, ranges, names, exclusive_end, maximum):
        while True:
            if self.peek()[:1] in "\"'":
                names.append(self.string())
            elif re.match(r"^[A-Za-z_]\w*$", self.peek()):
                names.append(self.next())
            else:
                start = self.integer()
                end = start
                if self.accept("to"):
                    end = (maximum - 1 if exclusive_end else maximum) if self.accept("max") else self.integer()
                ranges.add(start=start, end=end + 1 if exclusive_end else end)
            if not self.accept(","):
                break
        self.expect(";")

    def service(self, s):
        s.name = self.ident()
        self.expect("{")
        while not self.accept("}"):
            t = self.next()
            if t == ";":
                continue
            if t == "option":
                self.option_statement(s.options)
                continue
            if t != "rpc":
                raise ProtoSchemaError(f"unexpected {t!r} in service {s.name}")
            method = s.method.add(name=self.ident())
            self.expect("(")
            if self.accept("stream"):
                method.client_streaming = True
            method.input_type = self.ident()
            self.expect(")")
            self.expect("returns")
            self.expect("(")
            if self.accept("stream"):
                method.server_streaming = True
            method.output_type = self.ident()
            self.expect(")")
            self.unresolved.append((method, self.scope_of_file()))
            if self.accept("{"):
                while not self.accept("}"):
                    if self.accept("option"):
                        self.option_statement(method.options)
                    else:
                        self.expect(";")
            else:
                self.expect(";")

    def extend(self, into, scope):
        extendee = self.ident()
        self.expect("{")
        while not self.accept("}"):
            if self.accept(";"):
                continue
            label = self.next() if self.peek() in ("optional", "required", "repeated") else None
            f = self.field(None, scope, label, into=into)
            f.extendee = extendee
            self.unresolved.append((f, scope, "extendee"))

    # -- names
    def symbols(self):
        table = {}

        def walk_file(f):
            pkg = "." + f.package if f.package else ""
            for m in f.message_type:
                walk_message(m, pkg)
            for e in f.enum_type:
                table[f"{pkg}.{e.name}"] = "enum"

        def walk_message(m, scope):
            full = f"{scope}.{m.name}"
            table[full] = "message"
            for n in m.nested_type:
                walk_message(n, full)
            for e in m.enum_type:
                table[f"{full}.{e.name}"] = "enum"

        walk_file(self.fdp)
        for dep in self.fdp.dependency:
            if dep not in self.imports:
                raise ProtoSchemaError(f"import {dep!r} is neither a reference of the schema nor a well-known type")
            walk_file(self.imports[dep])
        return table

    def lookup(self, table, name, scope):
        if name.startswith("."):
            if name in table:
                return name
            raise ProtoSchemaError(f"type {name} is not defined")
        parts = scope.split(".") if scope else [""]
        while True:
            candidate = ".".join(parts + [name]) if parts != [""] else "." + name
            if not candidate.startswith("."):
                candidate = "." + candidate
            if candidate in table:
                return candidate
            if len(parts) <= 1:
                break
            parts = parts[:-1]
        if "." + name in table:
            return "." + name
        raise ProtoSchemaError(f"type {name} is not defined (in {scope.lstrip('.') or 'the file'})")

    def resolve(self):
        table = self.symbols()
        pb = self.pb.FieldDescriptorProto
        for item in self.unresolved:
            target, scope = item[0], item[1]
            if len(item) == 3:
                target.extendee = self.lookup(table, target.extendee, scope)
            elif hasattr(target, "input_type"):
                target.input_type = self.lookup(table, target.input_type, scope)
                target.output_type = self.lookup(table, target.output_type, scope)
            else:
                full = self.lookup(table, target.type_name, scope)
                target.type_name = full
                target.type = pb.TYPE_ENUM if table[full] == "enum" else pb.TYPE_MESSAGE


PROTO_WIRE_GROUPS = [
    {"int32", "int64", "uint32", "uint64", "bool"},
    {"sint32", "sint64"},
    {"fixed32", "sfixed32"},
    {"fixed64", "sfixed64"},
    {"string", "bytes"},
]


def proto_messages(fdp):
    """{full message name: {field number: (type, type_name, label)}} of a FileDescriptorProto."""
    out = {}

    def walk(m, scope):
        full = f"{scope}.{m.name}"
        out[full] = {f.number: (PROTO_TYPES[f.type], f.type_name, f.label) for f in m.field}
        for n in m.nested_type:
            walk(n, full)

    for m in fdp.message_type:
        walk(m, f".{fdp.package}" if fdp.package else "")
    return out


def proto_compat(new_fdp, old_fdp, errors):
    """Simplified Protobuf compatibility (both directions alike, as wire compatibility is symmetric):
    a message of the old file missing from the new one, the first message renamed (a record's message
    index 0 would name another), or a field number whose type changed between wire-incompatible kinds
    or to another message or enum type. Adding or removing fields is compatible."""
    new, old = proto_messages(new_fdp), proto_messages(old_fdp)
    if old_fdp.message_type and new_fdp.message_type and old_fdp.message_type[0].name != new_fdp.message_type[0].name:
        errors.append(
            f"MESSAGE_MOVED: the first message was {old_fdp.message_type[0].name}, is now "
            f"{new_fdp.message_type[0].name}"
        )
    for name, old_fields in old.items():
        if name not in new:
            errors.append(f"MESSAGE_REMOVED: {name.lstrip('.')}")
            continue
        for number, (otype, oname, olabel) in old_fields.items():
            if number not in new[name]:
                continue
            ntype, nname, nlabel = new[name][number]
            where = f"{name.lstrip('.')} field {number}"
            if otype in ("message", "group", "enum") or ntype in ("message", "group", "enum"):
                if otype != ntype or oname != nname:
                    errors.append(f"FIELD_NAMED_TYPE_CHANGED: {where}: {oname or otype} -> {nname or ntype}")
            elif otype != ntype and not any(otype in g and ntype in g for g in PROTO_WIRE_GROUPS):
                errors.append(f"FIELD_SCALAR_KIND_CHANGED: {where}: {otype} -> {ntype}")
            if (olabel == 3) != (nlabel == 3) and not (otype in ("string", "bytes", "message")):
                errors.append(f"FIELD_KIND_CHANGED: {where}: repeated changed")
