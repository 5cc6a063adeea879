//! Protobuf schema → Iceberg: the mapper of `protobuf` channels (docs/schema-mapping.md
//! "Protobuf → Iceberg").
//!
//! The registry serves `.proto` source text; it is compiled here at run time by protox (a
//! pure-Rust protoc, which also ships the well-known `google/protobuf/*.proto` files) into a
//! prost-reflect descriptor pool, and the record's message (picked by Confluent message indexes or
//! by full name) is mapped once to the table's [`StructSpec`] and to the [`ProtoMessage`] plan the
//! one-pass decoder (`convert/protobuf.rs`) follows on every record.
//!
//! | Protobuf | Iceberg |
//! |---|---|
//! | `int32`, `sint32`, `sfixed32` | `int` |
//! | `int64`, `sint64`, `sfixed64`, `uint32`, `fixed32` | `long` |
//! | `uint64`, `fixed64` | `long` (values above 2^63−1: `VALUE_OUT_OF_RANGE`) |
//! | `float` / `double` / `bool` / `string` / `bytes` | `float` / `double` / `boolean` / `string` / `binary` |
//! | enum | `string`: the value's name (an unknown number: its decimal text) |
//! | message | `struct` (optional) |
//! | `repeated T` / `map<K, V>` | `list<T>` / `map<string, V>` (keys as their canonical text) |
//! | `google.protobuf.Timestamp` / `Duration` | `timestamptz` / `long` (µs) |
//! | wrappers (`Int64Value`, `StringValue`, …) | the optional scalar |
//! | `Struct`, `Value`, `ListValue`, `Any` | `string` (canonical JSON) |
//!
//! Fields keep their declaration order; ids are assigned depth-first, pre-order, from 1 (a field,
//! then its children). Presence follows the field: explicit presence (message fields, oneof
//! members, proto3 `optional`, proto2 `optional`) → nullable; implicit presence (proto3 plain
//! scalars) → required, absent on the wire meaning the type's default; proto2 `required` →
//! required, absent → `MISSING_REQUIRED_FIELD`. Groups, recursive messages, messages without
//! fields and nesting beyond [`MAX_SCHEMA_DEPTH`] are refused, naming the field's path.

use std::collections::HashMap;
use std::sync::Arc;

use prost_reflect::{DescriptorPool, FieldDescriptor, Kind, MessageDescriptor};

use super::{
    escape_pointer_token, Additional, Decoding, FieldSpec, FieldType, IntSpec, ListSpec, MapSpec,
    MappedSchema, NumSpec, SchemaError, StrSpec, StructSpec, MAX_SCHEMA_DEPTH,
};

/// What the Protobuf decoder needs of a record's message beyond the mapped fields: the plan of
/// its fields by field number, mirroring the mapped [`StructSpec`].
#[derive(Debug)]
pub struct ProtoMessage {
    /// The record's message (full name).
    pub name: String,
    pub(crate) root: MsgPlan,
}

/// One `.proto` file as the registry serves it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProtoFile {
    /// The name other files import it by (`files[0]`, the schema itself, any name).
    pub name: String,
    /// The `.proto` source text.
    pub text: String,
}

/// Which message of a schema a record holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MessageSelector {
    /// Confluent message indexes: `[0]` is the first top-level message of the file, `[1, 2]` the
    /// third nested message of the second top-level one (map entry types count among the nested
    /// messages, as descriptors list them). Empty means `[0]`.
    Indexes(Vec<i32>),
    /// The message's full name (`package.Outer.Inner`).
    Name(String),
}

/// The decoding plan of one message: its mapped fields in column order.
#[derive(Debug)]
pub(crate) struct MsgPlan {
    /// The fields, in the order of the [`StructSpec`]'s fields.
    pub fields: Vec<FieldPlan>,
    /// `(field number, index in fields)`, sorted by number.
    pub by_number: Vec<(u32, u32)>,
    /// Field indexes of each (non-synthetic) oneof's members.
    pub oneofs: Vec<Vec<u32>>,
}

impl MsgPlan {
    /// Index of the field numbered `number`, if mapped.
    #[inline]
    pub fn field_of(&self, number: u32) -> Option<u32> {
        self.by_number
            .binary_search_by_key(&number, |&(n, _)| n)
            .ok()
            .map(|i| self.by_number[i].1)
    }
}

/// How one field of a message is decoded.
#[derive(Debug)]
pub(crate) struct FieldPlan {
    /// The field number.
    pub number: u32,
    /// The column name (the field's name).
    pub name: Box<str>,
    /// Singular, repeated or map.
    pub shape: Shape,
    /// The value (of a singular field, of each element, of each map value).
    pub value: ValuePlan,
    /// Explicit presence: absent → null (otherwise absent → the default value).
    pub presence: bool,
    /// proto2 `required`: absent → `MISSING_REQUIRED_FIELD`.
    pub required: bool,
    /// The partition field (a top-level `google.protobuf.Timestamp`).
    pub is_partition: bool,
    /// Index of the oneof it belongs to in [`MsgPlan::oneofs`].
    pub oneof: Option<u32>,
}

/// A field's cardinality.
#[derive(Debug)]
pub(crate) enum Shape {
    Single,
    List,
    /// The entry message: field 0 the key (a scalar), field 1 the value.
    Map(Box<MsgPlan>),
}

/// A scalar type of the wire format.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Scalar {
    Int32,
    Sint32,
    Sfixed32,
    Int64,
    Sint64,
    Sfixed64,
    Uint32,
    Fixed32,
    Uint64,
    Fixed64,
    Float,
    Double,
    Bool,
    String,
    Bytes,
}

impl Scalar {
    /// The wire type of one value (Protocol Buffers "Encoding": 0 varint, 1 I64, 2 LEN, 5 I32).
    pub fn wire_type(self) -> u8 {
        match self {
            Scalar::Int32
            | Scalar::Sint32
            | Scalar::Int64
            | Scalar::Sint64
            | Scalar::Uint32
            | Scalar::Uint64
            | Scalar::Bool => 0,
            Scalar::Sfixed64 | Scalar::Fixed64 | Scalar::Double => 1,
            Scalar::String | Scalar::Bytes => 2,
            Scalar::Sfixed32 | Scalar::Fixed32 | Scalar::Float => 5,
        }
    }

    fn of_kind(kind: &Kind) -> Option<Scalar> {
        Some(match kind {
            Kind::Int32 => Scalar::Int32,
            Kind::Sint32 => Scalar::Sint32,
            Kind::Sfixed32 => Scalar::Sfixed32,
            Kind::Int64 => Scalar::Int64,
            Kind::Sint64 => Scalar::Sint64,
            Kind::Sfixed64 => Scalar::Sfixed64,
            Kind::Uint32 => Scalar::Uint32,
            Kind::Fixed32 => Scalar::Fixed32,
            Kind::Uint64 => Scalar::Uint64,
            Kind::Fixed64 => Scalar::Fixed64,
            Kind::Float => Scalar::Float,
            Kind::Double => Scalar::Double,
            Kind::Bool => Scalar::Bool,
            Kind::String => Scalar::String,
            Kind::Bytes => Scalar::Bytes,
            Kind::Message(_) | Kind::Enum(_) => return None,
        })
    }

    fn field_type(self) -> FieldType {
        let range = |lo: i128, hi: i128| IntSpec {
            lo,
            hi,
            multiple_of: None,
        };
        match self {
            Scalar::Int32 | Scalar::Sint32 | Scalar::Sfixed32 => {
                FieldType::Int(range(i32::MIN.into(), i32::MAX.into()))
            }
            Scalar::Int64 | Scalar::Sint64 | Scalar::Sfixed64 => {
                FieldType::Long(range(i64::MIN.into(), i64::MAX.into()))
            }
            Scalar::Uint32 | Scalar::Fixed32 => FieldType::Long(range(0, u32::MAX.into())),
            Scalar::Uint64 | Scalar::Fixed64 => FieldType::Long(range(0, i64::MAX.into())),
            Scalar::Float => FieldType::Float(NumSpec::default()),
            Scalar::Double => FieldType::Double(NumSpec::default()),
            Scalar::Bool => FieldType::Boolean,
            Scalar::String => FieldType::String(StrSpec::default()),
            Scalar::Bytes => FieldType::Binary(StrSpec::default()),
        }
    }
}

/// A well-known type stored as its canonical JSON text.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum JsonKind {
    /// `google.protobuf.Struct`: a JSON object.
    Struct,
    /// `google.protobuf.Value`: any JSON value.
    Value,
    /// `google.protobuf.ListValue`: a JSON array.
    ListValue,
    /// `google.protobuf.Any`: `{"@type": type_url, "value": base64 of the bytes}`.
    Any,
}

/// How one value is decoded.
#[derive(Debug)]
pub(crate) enum ValuePlan {
    Scalar(Scalar),
    /// Value names by number, sorted by number (the first name of an aliased number).
    Enum(Box<[(i32, Box<str>)]>),
    Message(Box<MsgPlan>),
    /// `google.protobuf.Timestamp` → timestamptz.
    Timestamp,
    /// `google.protobuf.Duration` → long µs.
    Duration,
    /// A wrapper (`google.protobuf.Int64Value`, …): the scalar of its field 1.
    Wrapper(Scalar),
    Json(JsonKind),
}

impl MappedSchema {
    /// Maps the message `message` of `files[0]` (compiled with the other `files` as its imports)
    /// to an Iceberg schema, with `partition_field` (a top-level `google.protobuf.Timestamp`) as
    /// the time partition source; an empty `partition_field` means none (a spec without a time
    /// transform).
    ///
    /// Errors: [`SchemaError`] naming the field by path (`/field/sub`): `Invalid` when the files
    /// do not compile or the selector names no message, `Unsupported` for a construct without a
    /// mapping, `Partition` for a bad partition field.
    pub fn from_protobuf(
        files: &[ProtoFile],
        message: &MessageSelector,
        partition_field: &str,
    ) -> Result<MappedSchema, SchemaError> {
        let pool = compile(files)?;
        let md = select_message(&pool, files, message)?;
        let mut mapper = Mapper {
            next_id: 1,
            stack: Vec::new(),
        };
        let (mut root, mut plan) = mapper.message(&md, "", 0)?;
        if partition_field.is_empty() {
            // No time field (a partition spec without a time transform): no field is required
            // for partitioning.
            let decoding = Decoding::Protobuf(Arc::new(ProtoMessage {
                name: md.full_name().to_string(),
                root: plan,
            }));
            return MappedSchema::from_parts(root, partition_field, decoding);
        }
        let Some(i) = root.fields.iter().position(|f| f.name == partition_field) else {
            return Err(SchemaError::Partition {
                pointer: String::new(),
                message: format!(
                    "partition field {partition_field:?} is not a field of message {}",
                    md.full_name()
                ),
            });
        };
        let fp = &mut plan.fields[i];
        if !matches!(
            (&fp.shape, &fp.value),
            (Shape::Single, ValuePlan::Timestamp)
        ) {
            return Err(SchemaError::Partition {
                pointer: format!("/{}", escape_pointer_token(partition_field)),
                message: format!(
                    "partition field {partition_field:?} must be a singular google.protobuf.Timestamp"
                ),
            });
        }
        fp.is_partition = true;
        let f = &mut root.fields[i];
        f.is_partition = true;
        f.required = true;
        f.admits_null = false;
        let decoding = Decoding::Protobuf(Arc::new(ProtoMessage {
            name: md.full_name().to_string(),
            root: plan,
        }));
        MappedSchema::from_parts(root, partition_field, decoding)
    }
}

/// The top-level singular `google.protobuf.Timestamp` fields of the message `message` of
/// `files[0]`, in field order: the candidates for the partition field.
///
/// Errors: [`SchemaError::Invalid`] when the files do not compile or the selector names no message.
pub fn timestamp_fields(
    files: &[ProtoFile],
    message: &MessageSelector,
) -> Result<Vec<String>, SchemaError> {
    let pool = compile(files)?;
    let md = select_message(&pool, files, message)?;
    Ok(md
        .fields()
        .filter(|f| {
            !f.is_list()
                && !f.is_map()
                && matches!(f.kind(), Kind::Message(m) if m.full_name() == "google.protobuf.Timestamp")
        })
        .map(|f| f.name().to_string())
        .collect())
}

/// The name `files[0]` is compiled under when it has none.
const DEFAULT_FILE_NAME: &str = "schema.proto";

fn file_name(f: &ProtoFile) -> &str {
    if f.name.is_empty() {
        DEFAULT_FILE_NAME
    } else {
        &f.name
    }
}

/// Resolves imports from the given files, then from the well-known files protox ships.
struct MemoryResolver {
    files: HashMap<String, String>,
    google: protox::file::GoogleFileResolver,
}

impl protox::file::FileResolver for MemoryResolver {
    fn open_file(&self, name: &str) -> Result<protox::file::File, protox::Error> {
        match self.files.get(name) {
            Some(text) => protox::file::File::from_source(name, text),
            None => self.google.open_file(name),
        }
    }
}

fn compile(files: &[ProtoFile]) -> Result<DescriptorPool, SchemaError> {
    let Some(first) = files.first() else {
        return Err(SchemaError::invalid("", "no .proto file given"));
    };
    let resolver = MemoryResolver {
        files: files
            .iter()
            .map(|f| (file_name(f).to_string(), f.text.clone()))
            .collect(),
        google: protox::file::GoogleFileResolver::new(),
    };
    let mut compiler = protox::Compiler::with_file_resolver(resolver);
    compiler
        .open_file(file_name(first))
        .map_err(|e| SchemaError::invalid("", format!("the .proto files do not compile: {e}")))?;
    Ok(compiler.descriptor_pool())
}

/// The Confluent message indexes of the message `name` (a full name, leading `.` allowed) of
/// `files[0]`, compiled with the other `files`: its position among its parent's nested messages
/// (map entries included, where protoc puts them), from the file's top level down
/// (Confluent wire format, "message indexes"). The inverse of [`MessageSelector::Indexes`].
///
/// Errors: the files do not compile, or `files[0]` declares no such message.
pub fn message_indexes(files: &[ProtoFile], name: &str) -> Result<Vec<i32>, SchemaError> {
    let pool = compile(files)?;
    let name = name.trim_start_matches('.');
    let root = file_name(&files[0]);
    let mut current = pool
        .get_message_by_name(name)
        .filter(|m| m.parent_file().name() == root)
        .ok_or_else(|| SchemaError::invalid("", format!("no message {name} in the schema")))?;
    let mut indexes = Vec::new();
    loop {
        let parent = current.parent_message();
        let position = match &parent {
            Some(p) => p.child_messages().position(|m| m == current),
            None => current.parent_file().messages().position(|m| m == current),
        };
        indexes.push(position.expect("a message is among its parent's") as i32);
        match parent {
            Some(p) => current = p,
            None => break,
        }
    }
    indexes.reverse();
    Ok(indexes)
}

fn select_message(
    pool: &DescriptorPool,
    files: &[ProtoFile],
    selector: &MessageSelector,
) -> Result<MessageDescriptor, SchemaError> {
    match selector {
        MessageSelector::Name(name) => pool
            .get_message_by_name(name.trim_start_matches('.'))
            .ok_or_else(|| SchemaError::invalid("", format!("no message named {name:?}"))),
        MessageSelector::Indexes(indexes) => {
            let file = pool
                .get_file_by_name(file_name(&files[0]))
                .ok_or_else(|| SchemaError::invalid("", "the schema file did not compile"))?;
            let path: &[i32] = if indexes.is_empty() { &[0] } else { indexes };
            let nth = |mut it: Box<dyn ExactSizeIterator<Item = MessageDescriptor> + '_>,
                       i: i32| {
                usize::try_from(i).ok().and_then(|i| it.nth(i))
            };
            let mut md = nth(Box::new(file.messages()), path[0]);
            for &i in &path[1..] {
                md = md.and_then(|m| nth(Box::new(m.child_messages()), i));
            }
            md.ok_or_else(|| {
                SchemaError::invalid("", format!("message indexes {path:?} name no message"))
            })
        }
    }
}

struct Mapper {
    next_id: i32,
    /// Full names of the messages being mapped (recursion check).
    stack: Vec<String>,
}

impl Mapper {
    fn id(&mut self) -> i32 {
        let id = self.next_id;
        self.next_id += 1;
        id
    }

    /// The struct of message `md` at `ptr`; `depth` = the struct's own depth (0 for the root).
    fn message(
        &mut self,
        md: &MessageDescriptor,
        ptr: &str,
        depth: usize,
    ) -> Result<(StructSpec, MsgPlan), SchemaError> {
        if self.stack.iter().any(|n| n == md.full_name()) {
            return Err(SchemaError::unsupported(
                ptr,
                format!("recursive message {} (unbounded depth)", md.full_name()),
            ));
        }
        if md.fields().len() == 0 {
            return Err(SchemaError::unsupported(
                ptr,
                format!(
                    "message {} has no fields (an empty struct has no Iceberg mapping)",
                    md.full_name()
                ),
            ));
        }
        self.stack.push(md.full_name().to_string());
        let mut specs = Vec::with_capacity(md.fields().len());
        let mut plans = Vec::with_capacity(md.fields().len());
        let mut oneof_names: Vec<String> = Vec::new();
        let mut oneofs: Vec<Vec<u32>> = Vec::new();
        for fd in md.fields() {
            let fptr = format!("{ptr}/{}", escape_pointer_token(fd.name()));
            let (mut spec, mut plan) = self.field(&fd, &fptr, depth)?;
            if let Some(o) = fd.containing_oneof().filter(|o| !o.is_synthetic()) {
                let k = match oneof_names.iter().position(|n| n == o.name()) {
                    Some(k) => k,
                    None => {
                        oneof_names.push(o.name().to_string());
                        oneofs.push(Vec::new());
                        oneof_names.len() - 1
                    }
                };
                oneofs[k].push(plans.len() as u32);
                plan.oneof = Some(k as u32);
            }
            spec.doc = None;
            specs.push(spec);
            plans.push(plan);
        }
        self.stack.pop();
        let mut by_number: Vec<(u32, u32)> = plans
            .iter()
            .enumerate()
            .map(|(i, p)| (p.number, i as u32))
            .collect();
        by_number.sort_unstable();
        Ok((
            StructSpec {
                fields: specs,
                additional: Additional::Drop,
                min_props: None,
                max_props: None,
            },
            MsgPlan {
                fields: plans,
                by_number,
                oneofs,
            },
        ))
    }

    /// One field of a message whose struct is at `depth`.
    fn field(
        &mut self,
        fd: &FieldDescriptor,
        ptr: &str,
        depth: usize,
    ) -> Result<(FieldSpec, FieldPlan), SchemaError> {
        if fd.is_group() {
            return Err(SchemaError::unsupported(
                ptr,
                "proto2 groups are not supported (use a message field)",
            ));
        }
        let id = self.id();
        let (ty, shape, value, nullable) = if fd.is_map() {
            check_depth(ptr, depth + 1)?;
            let Kind::Message(entry) = fd.kind() else {
                unreachable!("a map field's kind is its entry message")
            };
            let key_fd = entry.map_entry_key_field();
            let value_fd = entry.map_entry_value_field();
            let key_id = self.id();
            let value_id = self.id();
            let vptr = format!("{ptr}/value");
            let (vty, vplan) = self.value(&value_fd.kind(), &vptr, depth + 1)?;
            let Some(key) = Scalar::of_kind(&key_fd.kind()) else {
                return Err(SchemaError::invalid(ptr, "a map key must be a scalar"));
            };
            let entry_plan = MsgPlan {
                fields: vec![
                    plain_plan(key_fd.number(), "key", ValuePlan::Scalar(key)),
                    plain_plan(value_fd.number(), "value", vplan),
                ],
                by_number: vec![(key_fd.number(), 0), (value_fd.number(), 1)],
                oneofs: Vec::new(),
            };
            let map = MapSpec {
                value: Box::new(element_spec(value_id, "value", vty)),
                key_id,
                min_props: None,
                max_props: None,
            };
            (
                FieldType::Map(map),
                Shape::Map(Box::new(entry_plan)),
                ValuePlan::Scalar(key),
                false,
            )
        } else if fd.is_list() {
            check_depth(ptr, depth + 1)?;
            let elem_id = self.id();
            let (ety, eplan) = self.value(&fd.kind(), &format!("{ptr}/element"), depth + 1)?;
            let list = ListSpec {
                element: Box::new(element_spec(elem_id, "element", ety)),
                min_items: None,
                max_items: None,
            };
            (FieldType::List(list), Shape::List, eplan, false)
        } else {
            let (ty, plan) = self.value(&fd.kind(), ptr, depth)?;
            (
                ty,
                Shape::Single,
                plan,
                fd.supports_presence() && !fd.is_required(),
            )
        };
        let presence = fd.supports_presence() && !fd.is_list() && !fd.is_map();
        Ok((
            FieldSpec {
                id,
                name: fd.name().to_string(),
                required: !nullable,
                admits_null: nullable,
                is_partition: false,
                ty,
                doc: None,
                has_default: !fd.is_required(),
            },
            FieldPlan {
                number: fd.number(),
                name: fd.name().into(),
                shape,
                value,
                presence,
                required: fd.is_required(),
                is_partition: false,
                oneof: None,
            },
        ))
    }

    /// The type of one value of kind `kind` inside a container at `depth` (the field's own
    /// struct depth for a singular field).
    fn value(
        &mut self,
        kind: &Kind,
        ptr: &str,
        depth: usize,
    ) -> Result<(FieldType, ValuePlan), SchemaError> {
        if let Some(s) = Scalar::of_kind(kind) {
            return Ok((s.field_type(), ValuePlan::Scalar(s)));
        }
        match kind {
            Kind::Enum(ed) => {
                let mut names: Vec<(i32, Box<str>)> = Vec::new();
                for v in ed.values() {
                    if !names.iter().any(|(n, _)| *n == v.number()) {
                        names.push((v.number(), v.name().into()));
                    }
                }
                names.sort_by_key(|(n, _)| *n);
                Ok((
                    FieldType::String(StrSpec::default()),
                    ValuePlan::Enum(names.into_boxed_slice()),
                ))
            }
            Kind::Message(md) => {
                if let Some(wkt) = well_known(md.full_name()) {
                    return Ok(wkt);
                }
                check_depth(ptr, depth + 1)?;
                let (st, plan) = self.message(md, ptr, depth + 1)?;
                Ok((FieldType::Struct(st), ValuePlan::Message(Box::new(plan))))
            }
            _ => unreachable!("scalar kinds handled above"),
        }
    }
}

fn check_depth(ptr: &str, depth: usize) -> Result<(), SchemaError> {
    if depth > MAX_SCHEMA_DEPTH {
        return Err(SchemaError::unsupported(
            ptr,
            format!("nesting depth {depth} > {MAX_SCHEMA_DEPTH}"),
        ));
    }
    Ok(())
}

/// The mapping of a well-known message type stored as a scalar (docs/schema-mapping.md).
fn well_known(full_name: &str) -> Option<(FieldType, ValuePlan)> {
    let wrapper = |s: Scalar| Some((s.field_type(), ValuePlan::Wrapper(s)));
    let json = |k: JsonKind| Some((FieldType::String(StrSpec::default()), ValuePlan::Json(k)));
    match full_name {
        "google.protobuf.Timestamp" => Some((
            FieldType::Timestamptz(StrSpec::default()),
            ValuePlan::Timestamp,
        )),
        "google.protobuf.Duration" => Some((Scalar::Int64.field_type(), ValuePlan::Duration)),
        "google.protobuf.DoubleValue" => wrapper(Scalar::Double),
        "google.protobuf.FloatValue" => wrapper(Scalar::Float),
        "google.protobuf.Int64Value" => wrapper(Scalar::Int64),
        "google.protobuf.UInt64Value" => wrapper(Scalar::Uint64),
        "google.protobuf.Int32Value" => wrapper(Scalar::Int32),
        "google.protobuf.UInt32Value" => wrapper(Scalar::Uint32),
        "google.protobuf.BoolValue" => wrapper(Scalar::Bool),
        "google.protobuf.StringValue" => wrapper(Scalar::String),
        "google.protobuf.BytesValue" => wrapper(Scalar::Bytes),
        "google.protobuf.Struct" => json(JsonKind::Struct),
        "google.protobuf.Value" => json(JsonKind::Value),
        "google.protobuf.ListValue" => json(JsonKind::ListValue),
        "google.protobuf.Any" => json(JsonKind::Any),
        _ => None,
    }
}

/// A list element or map value: required, never null (absent map values take the default).
fn element_spec(id: i32, name: &str, ty: FieldType) -> FieldSpec {
    FieldSpec {
        id,
        name: name.to_string(),
        required: true,
        admits_null: false,
        is_partition: false,
        ty,
        doc: None,
        has_default: false,
    }
}

fn plain_plan(number: u32, name: &str, value: ValuePlan) -> FieldPlan {
    FieldPlan {
        number,
        name: name.into(),
        shape: Shape::Single,
        value,
        presence: false,
        required: false,
        is_partition: false,
        oneof: None,
    }
}

#[cfg(test)]
mod tests;
