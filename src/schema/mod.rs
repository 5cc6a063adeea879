//! Schema → Iceberg schema mapping: the first step of the pipeline's `validate → convert` stage.
//! A channel's schema, in any of the three languages floe reads, is mapped to an Iceberg table
//! schema (Iceberg table spec, "Schemas and Data Types") and to the plan the
//! [`crate::convert::Converter`] runs on every record ([`MappedSchema`], its [`Decoding`]):
//!
//! - JSON Schema (`json`, `gsr_json`, `json_sr` channels): here and in `json_schema.rs`, the rules
//!   below;
//! - Avro (`gsr_avro`, `avro`): [`avro`], with the Avro schema resolution of older writers;
//! - Protobuf (`protobuf`): [`protobuf`], the `.proto` files compiled with their references.
//!
//! Beside them: [`partition`] (the partition spec and its transforms), [`sort`] (the sort order),
//! [`evolution`] (whether a new schema version is a compatible evolution of the table's). The
//! mapping runs at activation, and again for each schema version met under
//! `evolution = "compatible"`. Anything a mapping cannot map exactly is refused, naming the place
//! (for JSON Schema by JSON pointer, RFC 6901), so that validation never fails open.
//!
//! A JSON Schema (draft-04 or draft-07, see <https://json-schema.org/specification-links>) maps by
//! the table of docs/schema-mapping.md "JSON Schema → Iceberg":
//!
//! | JSON Schema | Iceberg |
//! |---|---|
//! | `string` | `string` |
//! | `string` + `format: date-time` / `date` / `time` / `uuid` | `timestamptz` (µs, UTC) / `date` / `time` (µs) / `uuid` |
//! | `string` + `contentEncoding: base64` (or `format`/`encoding`: `byte`/`base64`) | `binary` |
//! | `integer` whose every allowed value fits 32 bits | `int`, otherwise `long` |
//! | `number` + `multipleOf` | `decimal(38, s)`, s = fractional digits of `multipleOf` (see below) |
//! | `number` | `double` |
//! | `boolean` | `boolean` |
//! | `object` + `properties` | `struct` |
//! | `object` + schema-valued `additionalProperties` (no `properties`) | `map<string, V>` |
//! | `array` + `items` | `list<E>` |
//! | `enum` / `const` | `string` (non-string members as their JSON text) |
//!
//! Rules, decided in docs/design.md:
//! - Draft: `$schema` must name draft-04 or draft-07; without `$schema`, draft-07 with `format`
//!   asserted. Other drafts are refused.
//! - Field ids are assigned depth-first, pre-order, from 1: a field, then (for a struct) its fields, (for
//!   a list) its element, (for a map) its key and value, then the next field. Properties are visited in
//!   lexicographic byte order of their names, so the result does not depend on how the JSON document
//!   ordered them (nor on `serde_json`'s `preserve_order` feature): the same schema always yields the
//!   same table schema.
//! - Nullability: a column is non-nullable only when the key is `required` and its type does not admit
//!   `null`. The partition field is always required and non-nullable, must be a top-level
//!   `string` with `format: date-time`, and is the source of the `hour` partition transform.
//! - Nesting: the depth is the number of struct/list/map types on a path from the record root (not
//!   counted) to a value; 16 is accepted, 17 refused.
//! - Unions are refused except "T or null": a `type` array of one type plus `"null"`, or `oneOf`/`anyOf`
//!   of one schema plus `{"type": "null"}`. `allOf` is merged keyword by keyword (`properties` and
//!   `required` are united; any other keyword must agree), and refused when parts conflict.
//! - `$ref` may point only inside the document (`#/definitions/…`, `#/$defs/…`, any local JSON
//!   pointer); siblings of `$ref` are ignored (draft-04/-07 semantics). Remote, dangling and recursive
//!   references are refused.
//! - Keywords that constrain values in a way the converter does not check (`not`, `if`/`then`/`else`,
//!   `patternProperties`, `propertyNames`, `dependencies`, `contains`, `uniqueItems: true`, tuple
//!   `items`, `additionalItems`) are refused rather than ignored (no failing open).
//!   `additionalProperties: false` on a struct makes an unknown key a `VALUE_OUT_OF_RANGE` record;
//!   otherwise unknown keys are dropped.
//! - `format` is asserted for the mapped formats (`date-time`, `date`, `time`, `uuid`) and for `ipv4`
//!   and `ipv6`; other formats (`email`, `uri`, …) are annotations only.
//! - Decimal scale: `s` is the number of fractional digits of `multipleOf` written in plain decimal,
//!   trailing zeros not counted (`0.01` → 2, `0.010` → 2, `1e-10` → 10, `5` → 0, `2.5E1` → 0). When
//!   `multipleOf` is not a power of ten (`0.5`, `0.25`, `2.5`, `3`), `s` is still its fractional digit
//!   count (1, 2, 1, 0): every multiple of `m` has at most `s` fractional digits, so the column holds
//!   every allowed value exactly, and the `multipleOf` check itself stays exact (with `0.5`, `2.5` is
//!   stored as 2.5 and `2.3` or `2.25` is `VALUE_OUT_OF_RANGE`). A scale above 38 is refused.
//!   Precision is always 38; more than 38 digits at that scale is `VALUE_OUT_OF_RANGE`.
//! - `enum`/`const` members that are not strings are stored as their canonical JSON text (RFC 8785:
//!   `1.0` → `1`, keys sorted, no whitespace); a `null` member stores NULL. Sibling keywords apply
//!   to the members of their type ([`EnumSpec`]): a value of a type `type` allows that is not an
//!   allowed member — `null` included — is `VALUE_OUT_OF_RANGE`, one of a type `type` refuses is
//!   `TYPE_MISMATCH`.
//! - Numeric keywords are read exactly from their JSON text (integers) or from the shortest text of
//!   the double `serde_json` read (so `0.01` is the decimal 0.01).

pub mod avro;
pub mod evolution;
mod json_schema;
mod number;
pub mod partition;
pub mod protobuf;
pub mod sort;

#[cfg(test)]
use json_schema::ecma_to_rust_regex;
pub use json_schema::{canonical_json, date_time_fields};

pub(crate) use number::{cmp_parts, normalize_number};
pub use number::{Dec, MultipleOf};

use std::sync::Arc;

use iceberg::spec::{
    ListType, MapType, NestedField, NestedFieldRef, PrimitiveType, Schema, StructType, Type,
};
use serde_json::Value;

/// The deepest struct/list/map nesting a schema may have (docs/schema-mapping.md "Nesting").
pub const MAX_SCHEMA_DEPTH: usize = 16;

/// Why a JSON Schema cannot become a channel's table schema. Every variant names the offending place
/// by JSON pointer into the schema document, walked through `$ref`s from the root (so a field's name
/// is always in it), `""` for the root. The caller refuses the channel (FAILED) in every case.
#[derive(Debug, thiserror::Error)]
pub enum SchemaError {
    /// A construct with no Iceberg mapping (a union, an untyped value, nesting beyond 16 levels, a
    /// validation keyword the converter cannot enforce, an unsupported draft).
    #[error("unsupported schema at #{pointer}: {message}")]
    Unsupported {
        /// JSON pointer into the schema document.
        pointer: String,
        /// What is wrong, lowercase.
        message: String,
    },
    /// A malformed schema (a keyword with a value of the wrong kind, a dangling or remote `$ref`, a
    /// `pattern` that does not compile).
    #[error("invalid schema at #{pointer}: {message}")]
    Invalid {
        /// JSON pointer into the schema document.
        pointer: String,
        /// What is wrong, lowercase.
        message: String,
    },
    /// The partition field is missing, or is not a top-level `string` with `format: date-time`.
    #[error("partition field refused at #{pointer}: {message}")]
    Partition {
        /// JSON pointer into the schema document.
        pointer: String,
        /// What is wrong, lowercase.
        message: String,
    },
    /// The table's Arrow schema does not have the structure of the mapped schema (converter setup).
    #[error("table schema does not match the mapped schema at {}: {message}", if pointer.is_empty() { "the top level" } else { pointer.as_str() })]
    TableMismatch {
        /// Path of the field in the table, as a JSON pointer over field names.
        pointer: String,
        /// What differs.
        message: String,
    },
}

impl SchemaError {
    fn unsupported(pointer: &str, message: impl Into<String>) -> Self {
        SchemaError::Unsupported {
            pointer: pointer.to_string(),
            message: message.into(),
        }
    }
    fn invalid(pointer: &str, message: impl Into<String>) -> Self {
        SchemaError::Invalid {
            pointer: pointer.to_string(),
            message: message.into(),
        }
    }
}

/// Which JSON Schema draft the document follows (changes `exclusiveMaximum` and what an integer is).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Draft {
    /// Draft-04: `exclusiveMinimum`/`exclusiveMaximum` are booleans; only an integer literal is an
    /// integer.
    Draft04,
    /// Draft-07: exclusive bounds are numbers; any number with a zero fractional part is an integer.
    Draft07,
}

/// A numeric bound (`minimum`, `exclusiveMaximum`, …), exact.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Bound {
    /// The bound's value.
    pub value: Dec,
    /// Strict (`exclusive*`).
    pub exclusive: bool,
}

/// Constraints of a numeric value: bounds and `multipleOf`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NumSpec {
    /// Lower bounds (all must hold).
    pub lower: Vec<Bound>,
    /// Upper bounds (all must hold).
    pub upper: Vec<Bound>,
    /// `multipleOf`, when given.
    pub multiple_of: Option<MultipleOf>,
}

impl NumSpec {
    /// Whether there is anything to check.
    pub fn is_empty(&self) -> bool {
        self.lower.is_empty() && self.upper.is_empty() && self.multiple_of.is_none()
    }

    /// Whether `v` satisfies every bound and `multipleOf`, exactly.
    pub fn allows(&self, v: &Dec) -> bool {
        let in_lower = self.lower.iter().all(|b| {
            let o = cmp_parts(v.parts(), b.value.parts());
            o.is_gt() || (o.is_eq() && !b.exclusive)
        });
        let in_upper = self.upper.iter().all(|b| {
            let o = cmp_parts(v.parts(), b.value.parts());
            o.is_lt() || (o.is_eq() && !b.exclusive)
        });
        let multiple = match &self.multiple_of {
            Some(m) => m.divides(&v.digits, v.exp),
            None => true,
        };
        in_lower && in_upper && multiple
    }
}

/// Constraints of an integer value, folded into an inclusive range.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IntSpec {
    /// Smallest allowed value (schema bounds, rounded up to an integer; `i128::MIN` when unbounded).
    pub lo: i128,
    /// Largest allowed value (`i128::MAX` when unbounded).
    pub hi: i128,
    /// `multipleOf`, when given.
    pub multiple_of: Option<MultipleOf>,
}

/// Constraints of a string value (before any format conversion), in Unicode code points.
#[derive(Clone, Debug, Default)]
pub struct StrSpec {
    /// `minLength`.
    pub min_len: Option<u64>,
    /// `maxLength`.
    pub max_len: Option<u64>,
    /// `pattern` (an unanchored search), compiled.
    pub pattern: Option<regex::Regex>,
    /// The pattern as written, for messages.
    pub pattern_text: Option<String>,
    /// Asserted format that keeps the string type (`ipv4`, `ipv6`; any asserted format on an `enum`).
    pub format: Option<StrFormat>,
}

impl StrSpec {
    /// Whether there is anything to check.
    pub fn is_empty(&self) -> bool {
        self.min_len.is_none()
            && self.max_len.is_none()
            && self.pattern.is_none()
            && self.format.is_none()
    }
}

/// Formats asserted on string columns: `ipv4` and `ipv6` on plain strings, and every asserted
/// format on `enum`/`const` strings (which stay strings; the others map to their own types).
/// A string not in its format is `VALUE_OUT_OF_RANGE`: its type is string either way.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StrFormat {
    /// Dotted-quad IPv4 (RFC 2673 §3.2).
    Ipv4,
    /// IPv6 (RFC 4291 §2.2).
    Ipv6,
    /// RFC 3339 `date-time`.
    DateTime,
    /// RFC 3339 `full-date`.
    Date,
    /// RFC 3339 `full-time`.
    Time,
    /// Hyphenated 8-4-4-4-12 uuid.
    Uuid,
}

impl StrFormat {
    /// The format's name, as in a schema.
    pub fn name(self) -> &'static str {
        match self {
            StrFormat::Ipv4 => "ipv4",
            StrFormat::Ipv6 => "ipv6",
            StrFormat::DateTime => "date-time",
            StrFormat::Date => "date",
            StrFormat::Time => "time",
            StrFormat::Uuid => "uuid",
        }
    }

    /// The asserted format a `format` keyword names, if any.
    fn asserted(name: &str) -> Option<StrFormat> {
        match name {
            "ipv4" => Some(StrFormat::Ipv4),
            "ipv6" => Some(StrFormat::Ipv6),
            "date-time" => Some(StrFormat::DateTime),
            "date" => Some(StrFormat::Date),
            "time" => Some(StrFormat::Time),
            "uuid" => Some(StrFormat::Uuid),
            _ => None,
        }
    }
}

/// A JSON Schema `type` name (draft-04/-07 §"type").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum JsonType {
    /// `"null"`.
    Null,
    /// `"boolean"`.
    Boolean,
    /// `"integer"`: a number that is an integer (per draft, see [`Draft`]).
    Integer,
    /// `"number"`.
    Number,
    /// `"string"`.
    String,
    /// `"object"`.
    Object,
    /// `"array"`.
    Array,
}

impl JsonType {
    /// The type a `type` name names.
    fn named(name: &str) -> Option<JsonType> {
        Some(match name {
            "null" => JsonType::Null,
            "boolean" => JsonType::Boolean,
            "integer" => JsonType::Integer,
            "number" => JsonType::Number,
            "string" => JsonType::String,
            "object" => JsonType::Object,
            "array" => JsonType::Array,
            _ => return None,
        })
    }

    /// The name, as in a schema.
    pub fn name(self) -> &'static str {
        match self {
            JsonType::Null => "null",
            JsonType::Boolean => "boolean",
            JsonType::Integer => "integer",
            JsonType::Number => "number",
            JsonType::String => "string",
            JsonType::Object => "object",
            JsonType::Array => "array",
        }
    }
}

/// One allowed value of an `enum`/`const`.
#[derive(Clone, Debug)]
pub enum EnumMember {
    /// A string member: stored as is.
    Str(String),
    /// A number member (compared exactly); stored as its JSON text.
    Num {
        /// The value.
        value: Dec,
        /// Its JSON text as stored.
        text: String,
    },
    /// `true`/`false`; stored as `"true"`/`"false"`.
    Bool(bool),
    /// `null`: the value stays NULL.
    Null,
    /// An array or object member; stored as its JSON text.
    Other {
        /// The member.
        value: Value,
        /// Its JSON text as stored.
        text: String,
    },
}

/// An `enum` (or `const`) column: a string column whose values are the members' texts.
///
/// A value of a JSON type the sibling `type` refuses is `TYPE_MISMATCH`; a value of an allowed
/// type that is not a member is `VALUE_OUT_OF_RANGE` — `null` too, where `type` admits it.
#[derive(Clone, Debug)]
pub struct EnumSpec {
    /// The allowed values: members that the sibling keywords (`type`, bounds, `multipleOf`,
    /// counts, `required`) rule out are dropped; string keywords are checked on the value.
    pub members: Vec<EnumMember>,
    /// The non-null type the sibling `type` keyword names; `None` without one (every type).
    pub ty: Option<JsonType>,
    /// `null` passes the `type` keyword (it lists `"null"`, or there is none) but is not a
    /// member: a `null` is `VALUE_OUT_OF_RANGE` (not the `TYPE_MISMATCH` or
    /// `MISSING_REQUIRED_FIELD` of a type without null).
    pub null_refused_by_enum: bool,
}

/// What to do with a key that is not among a struct's properties.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Additional {
    /// Drop it (default; docs/schema-mapping.md "extra fields are dropped").
    Drop,
    /// `additionalProperties: false`: the record is not allowed (VALUE_OUT_OF_RANGE).
    Forbid,
}

/// A struct: fields in field-id order.
#[derive(Clone, Debug)]
pub struct StructSpec {
    /// The fields.
    pub fields: Vec<FieldSpec>,
    /// Unknown keys.
    pub additional: Additional,
    /// `minProperties` (counting every key, known or not).
    pub min_props: Option<u64>,
    /// `maxProperties`.
    pub max_props: Option<u64>,
}

/// A list.
#[derive(Clone, Debug)]
pub struct ListSpec {
    /// The element (`name` = `"element"`, always `required`).
    pub element: Box<FieldSpec>,
    /// `minItems`.
    pub min_items: Option<u64>,
    /// `maxItems`.
    pub max_items: Option<u64>,
}

/// A map with string keys.
#[derive(Clone, Debug)]
pub struct MapSpec {
    /// The value (`name` = `"value"`, always `required`).
    pub value: Box<FieldSpec>,
    /// Key field id.
    pub key_id: i32,
    /// `minProperties`.
    pub min_props: Option<u64>,
    /// `maxProperties`.
    pub max_props: Option<u64>,
}

/// The type of a field, with the constraints the converter checks.
#[derive(Clone, Debug)]
pub enum FieldType {
    /// `boolean`.
    Boolean,
    /// `int` (32 bits).
    Int(IntSpec),
    /// `long` (64 bits).
    Long(IntSpec),
    /// `float` (32-bit IEEE 754; Avro `float`, Protobuf `float`).
    Float(NumSpec),
    /// `double`.
    Double(NumSpec),
    /// `decimal(precision, scale)` (JSON Schema: always precision 38).
    Decimal {
        /// Total digits, 1..=38 (Iceberg spec, "Primitive Types").
        precision: u32,
        /// Digits after the point.
        scale: u32,
        /// Bounds and `multipleOf`.
        spec: NumSpec,
    },
    /// `string`.
    String(StrSpec),
    /// `string` holding an `enum` member.
    Enum(EnumSpec, StrSpec),
    /// `timestamptz` (µs since 1970-01-01T00:00Z).
    Timestamptz(StrSpec),
    /// `date` (days since 1970-01-01).
    Date(StrSpec),
    /// `time` (µs since midnight, UTC).
    Time(StrSpec),
    /// `uuid`.
    Uuid(StrSpec),
    /// `binary` (base64 in JSON); length keywords apply to the base64 text.
    Binary(StrSpec),
    /// `fixed(L)`: exactly this many bytes (Avro `fixed`).
    Fixed(u32),
    /// `timestamp` without zone (µs since 1970-01-01T00:00, local time; Avro
    /// `local-timestamp-*`).
    Timestamp(StrSpec),
    /// `struct`.
    Struct(StructSpec),
    /// `list`.
    List(ListSpec),
    /// `map<string, V>`.
    Map(MapSpec),
}

/// One field of the mapped schema (a struct field, a list element or a map value).
#[derive(Clone, Debug)]
pub struct FieldSpec {
    /// Iceberg field id (ours; the table's may differ).
    pub id: i32,
    /// Field name (`element` / `value` for list elements and map values).
    pub name: String,
    /// The key must be present (`required`, or the partition field). Always true for elements.
    pub required: bool,
    /// JSON `null` is an allowed value (the type admits null).
    pub admits_null: bool,
    /// The partition field.
    pub is_partition: bool,
    /// The type.
    pub ty: FieldType,
    /// `description`, kept as the Iceberg field doc.
    pub doc: Option<String>,
    /// The schema gives the field a value where a record of an older version lacks it, so adding
    /// it is a compatible change ([`evolution`]): an Avro record field with a `default` (Avro
    /// 1.11 "Schema Resolution"), a Protobuf field without `required` (absent means the type's
    /// default or empty: protobuf.dev "Updating A Message Type"). JSON Schema's `default` is an
    /// annotation (JSON Schema Validation §9.2), never applied: false.
    pub has_default: bool,
}

impl FieldSpec {
    /// The column is nullable in Iceberg/Arrow: the key may be absent or the value may be `null`.
    pub fn nullable(&self) -> bool {
        self.admits_null || !self.required
    }
}

/// A JSON Schema mapped to an Iceberg schema, with the validation plan of its records.
#[derive(Clone, Debug)]
pub struct MappedSchema {
    iceberg: Schema,
    arrow: arrow_schema::SchemaRef,
    partition_field: String,
    root: StructSpec,
    decoding: Decoding,
}

/// How a record of a mapped schema is read: the schema language it was mapped from, with what
/// its decoder needs beyond the [`FieldSpec`]s.
#[derive(Clone, Debug)]
pub enum Decoding {
    /// A JSON document validated by a JSON Schema of this draft (`json`, `gsr_json`, `json_sr`).
    JsonSchema(Draft),
    /// Avro binary encoding of this writer schema (`avro`, `gsr_avro`).
    Avro(Arc<avro::AvroWriter>),
    /// Protobuf binary encoding of this message (`protobuf`).
    Protobuf(Arc<protobuf::ProtoMessage>),
}

impl MappedSchema {
    /// The mapped schema of `root`'s fields (ids from [`FieldSpec::id`], which the mapper assigned),
    /// with `partition_field` (a top-level required `timestamptz` field of `root`) as the source of
    /// the `hour` partition; every schema language's mapper ends here.
    ///
    /// Errors: [`SchemaError::Invalid`] when iceberg-rust refuses the schema (duplicate ids or
    /// names) or its Arrow conversion.
    pub fn from_parts(
        root: StructSpec,
        partition_field: &str,
        decoding: Decoding,
    ) -> Result<Self, SchemaError> {
        let fields = root.fields.iter().map(iceberg_field).collect::<Vec<_>>();
        let iceberg = Schema::builder()
            .with_schema_id(0)
            .with_fields(fields)
            .build()
            .map_err(|e| SchemaError::invalid("", format!("iceberg schema: {e}")))?;
        let arrow = iceberg::arrow::schema_to_arrow_schema(&iceberg)
            .map_err(|e| SchemaError::invalid("", format!("arrow schema: {e}")))?;
        Ok(MappedSchema {
            iceberg,
            arrow: Arc::new(arrow),
            partition_field: partition_field.to_string(),
            root,
            decoding,
        })
    }

    /// The Iceberg table schema (schema id 0, field ids from 1, depth-first).
    pub fn iceberg_schema(&self) -> &Schema {
        &self.iceberg
    }

    /// Name of the partition field (a top-level `timestamptz`, required), the source of the
    /// table's time transform; empty when the spec has none (docs/partitioning.md).
    pub fn partition_field(&self) -> &str {
        &self.partition_field
    }

    /// The Arrow schema of [`Self::iceberg_schema`], as `iceberg::arrow::schema_to_arrow_schema`
    /// gives it (with `PARQUET:field_id` metadata).
    pub fn arrow_schema(&self) -> arrow_schema::SchemaRef {
        self.arrow.clone()
    }

    /// The top-level fields with their validation rules.
    pub fn root(&self) -> &StructSpec {
        &self.root
    }

    /// Dotted paths (`address.zip`, `tags.element.note`, `attrs.value.n`: list elements and map
    /// values as `element` and `value`, as [`evolution`] names them) of the fields whose schema
    /// gives older records a value ([`FieldSpec::has_default`]), so that adding them evolves a
    /// table.
    pub fn defaulted_fields(&self) -> std::collections::BTreeSet<String> {
        fn walk(s: &StructSpec, prefix: &str, out: &mut std::collections::BTreeSet<String>) {
            for f in &s.fields {
                let path = if prefix.is_empty() {
                    f.name.clone()
                } else {
                    format!("{prefix}.{}", f.name)
                };
                below(f, &path, out);
            }
        }
        fn below(f: &FieldSpec, path: &str, out: &mut std::collections::BTreeSet<String>) {
            if f.has_default {
                out.insert(path.to_string());
            }
            match &f.ty {
                FieldType::Struct(s) => walk(s, path, out),
                FieldType::List(l) => below(&l.element, &format!("{path}.element"), out),
                FieldType::Map(m) => below(&m.value, &format!("{path}.value"), out),
                _ => {}
            }
        }
        let mut out = std::collections::BTreeSet::new();
        walk(&self.root, "", &mut out);
        out
    }

    /// The schema of a key: the top-level fields named by `key` (in field-id order, with their
    /// rules), unknown keys dropped, no partition field. Records of it are objects holding at
    /// least the key's fields (a deleted row's `before`, a message key): converted by the same
    /// code as whole rows, their key columns hold the same values as the rows' (change data
    /// capture, docs/cdc.md).
    ///
    /// Errors: [`SchemaError::Invalid`] naming a key column that is not a top-level field.
    pub fn key_projection(&self, key: &[String]) -> Result<MappedSchema, SchemaError> {
        if let Some(missing) = key
            .iter()
            .find(|k| !self.root.fields.iter().any(|f| &f.name == *k))
        {
            return Err(SchemaError::invalid(
                "",
                format!("key column \"{missing}\" is not a top-level field"),
            ));
        }
        let fields = self
            .root
            .fields
            .iter()
            .filter(|f| key.contains(&f.name))
            .map(|f| FieldSpec {
                is_partition: false,
                ..f.clone()
            })
            .collect();
        let root = StructSpec {
            fields,
            additional: Additional::Drop,
            min_props: None,
            max_props: None,
        };
        MappedSchema::from_parts(root, "", self.decoding.clone())
    }

    /// How records of this schema are read.
    pub fn decoding(&self) -> &Decoding {
        &self.decoding
    }

    /// The JSON Schema draft the document follows (draft-07 for schemas of other languages, whose
    /// records are never JSON).
    pub fn draft(&self) -> Draft {
        match self.decoding {
            Decoding::JsonSchema(d) => d,
            _ => Draft::Draft07,
        }
    }
}

fn iceberg_type(f: &FieldSpec) -> Type {
    match &f.ty {
        FieldType::Boolean => Type::Primitive(PrimitiveType::Boolean),
        FieldType::Int(_) => Type::Primitive(PrimitiveType::Int),
        FieldType::Long(_) => Type::Primitive(PrimitiveType::Long),
        FieldType::Float(_) => Type::Primitive(PrimitiveType::Float),
        FieldType::Double(_) => Type::Primitive(PrimitiveType::Double),
        FieldType::Decimal {
            precision, scale, ..
        } => Type::Primitive(PrimitiveType::Decimal {
            precision: *precision,
            scale: *scale,
        }),
        FieldType::Fixed(len) => Type::Primitive(PrimitiveType::Fixed(u64::from(*len))),
        FieldType::Timestamp(_) => Type::Primitive(PrimitiveType::Timestamp),
        FieldType::String(_) | FieldType::Enum(..) => Type::Primitive(PrimitiveType::String),
        FieldType::Timestamptz(_) => Type::Primitive(PrimitiveType::Timestamptz),
        FieldType::Date(_) => Type::Primitive(PrimitiveType::Date),
        FieldType::Time(_) => Type::Primitive(PrimitiveType::Time),
        FieldType::Uuid(_) => Type::Primitive(PrimitiveType::Uuid),
        FieldType::Binary(_) => Type::Primitive(PrimitiveType::Binary),
        FieldType::Struct(s) => Type::Struct(StructType::new(
            s.fields.iter().map(iceberg_field).collect(),
        )),
        FieldType::List(l) => Type::List(ListType::new(Arc::new(NestedField::list_element(
            l.element.id,
            iceberg_type(&l.element),
            !l.element.nullable(),
        )))),
        FieldType::Map(m) => Type::Map(MapType::new(
            Arc::new(NestedField::map_key_element(
                m.key_id,
                Type::Primitive(PrimitiveType::String),
            )),
            Arc::new(NestedField::map_value_element(
                m.value.id,
                iceberg_type(&m.value),
                !m.value.nullable(),
            )),
        )),
    }
}

fn iceberg_field(f: &FieldSpec) -> NestedFieldRef {
    let mut nf = NestedField::new(f.id, &f.name, iceberg_type(f), !f.nullable());
    if let Some(doc) = &f.doc {
        nf = nf.with_doc(doc);
    }
    Arc::new(nf)
}

/// Escapes a JSON pointer token (RFC 6901 §3).
pub(crate) fn escape_pointer_token(s: &str) -> String {
    s.replace('~', "~0").replace('/', "~1")
}

#[cfg(test)]
mod tests;
