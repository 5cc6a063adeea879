//! Avro schema → Iceberg: the mapper of `avro` and `gsr_avro` channels (docs/schema-mapping.md
//! "Avro → Iceberg"), with the Iceberg spec's Avro appendix ("Appendix A: Format-specific
//! Requirements", Avro) as the reference and the Avro specification 1.11 for the schema
//! language and its "Schema Resolution".
//!
//! | Avro | Iceberg |
//! |---|---|
//! | `boolean`, `int`, `long`, `float`, `double`, `string` | same |
//! | `bytes` | `binary` |
//! | `fixed` (size L) | `fixed(L)` |
//! | `enum` | `string` (the symbol) |
//! | `bytes`/`fixed` + `decimal(P,S)` | `decimal(P,S)`, P ≤ 38 |
//! | `string` (or `fixed(16)`) + `uuid` | `uuid` |
//! | `int` + `date` | `date` |
//! | `int` + `time-millis`, `long` + `time-micros` | `time` |
//! | `long` + `timestamp-millis`/`timestamp-micros` | `timestamptz` |
//! | `long` + `local-timestamp-millis`/`local-timestamp-micros` | `timestamp` |
//! | `record` | `struct` |
//! | `array` | `list` |
//! | `map` | `map<string, V>` |
//! | `["null", T]` or `[T, "null"]` | optional `T` |
//!
//! Rules (docs/schema-mapping.md):
//! - A field is optional iff its type is a two-branch union with `null`; any other union with more
//!   than one branch is refused, naming the field (no wrapper struct of optional members: a
//!   table whose columns change meaning with the writer's branch order helps nobody). A
//!   one-branch union `[T]` is `T`.
//! - Refused: the `null` type alone, records without fields, `fixed` of size 0, recursive
//!   records, `big-decimal`, `duration`, nanosecond timestamps, decimals above precision 38, and
//!   nesting deeper than [`MAX_SCHEMA_DEPTH`] (counted as for JSON Schema).
//! - Field ids are assigned depth-first, pre-order, from 1, in the schema's field order (which
//!   Avro makes significant); a field's `doc` becomes the Iceberg field doc.
//! - The partition field is a top-level `timestamp-millis`/`timestamp-micros` field, required or
//!   `["null", …]`: its column is always required, and a record whose value is null is
//!   `MISSING_PARTITION_VALUE`.
//! - Schema resolution ([`MappedSchema::from_avro_resolved`]): the table's columns come from the
//!   reader (the subject's latest) schema; the record's writer schema is resolved against it:
//!   fields matched by name (or a reader field's alias), writer fields the reader lacks skipped,
//!   reader fields the writer lacks take the reader's default (or null), and the promotions of
//!   the Avro specification (`int` → `long`/`float`/`double`, `long` → `float`/`double`,
//!   `float` → `double`, `string` ↔ `bytes`).

use std::collections::HashMap;
use std::sync::Arc;

use apache_avro::schema::{Name, RecordField, RecordSchema, Schema};

use super::{
    escape_pointer_token, Additional, Decoding, FieldSpec, FieldType, IntSpec, ListSpec, MapSpec,
    MappedSchema, NumSpec, SchemaError, StrSpec, StructSpec, MAX_SCHEMA_DEPTH,
};

/// Custom attribute that marks a `fixed(16)` with logical type `uuid` (apache-avro 0.21 parses
/// both `uuid` forms to one `Schema::Uuid`, losing the encoding).
const FIXED_UUID_ATTR: &str = "floe.fixed-uuid";

/// The decode plan of one Avro writer schema resolved against the table's reader schema: what
/// [`crate::convert`]'s Avro decoder reads, field by field, and where each value goes.
#[derive(Debug)]
pub struct AvroWriter {
    pub(crate) root: RecordPlan,
}

/// How one record of the writer schema is read.
#[derive(Debug)]
pub(crate) struct RecordPlan {
    /// The writer's fields, in encoding order.
    pub fields: Vec<WriterField>,
    /// The reader's fields that the writer lacks but whose default the reader gives.
    pub defaults: Vec<DefaultFill>,
}

/// One field of the writer's record.
#[derive(Debug)]
pub(crate) struct WriterField {
    /// The reader's field name (the column's), or the writer's when skipped.
    pub name: Box<str>,
    /// Position of the reader's field (a hint for the column lookup); `None`: the reader lacks
    /// the field, its value is skipped.
    pub target: Option<usize>,
    /// The top-level partition field.
    pub is_partition: bool,
    /// How the value is read.
    pub node: Node,
}

/// A reader field the writer lacks, with its default encoded in the reader's type.
#[derive(Debug)]
pub(crate) struct DefaultFill {
    /// The reader's field name.
    pub name: Box<str>,
    /// Position of the reader's field.
    pub target: usize,
    /// How the encoded default is read.
    pub node: Node,
    /// The default in Avro binary encoding.
    pub bytes: Box<[u8]>,
}

/// How one value of the writer's type is read, and converted to the reader's column.
#[derive(Debug)]
pub(crate) enum Node {
    /// `boolean`.
    Bool,
    /// `int` (into an int, long, float or double column).
    Int,
    /// `long` (into a long, float or double column).
    Long,
    /// `float` (into a float or double column).
    Float,
    /// `double`.
    Double,
    /// `string` (into a string or, promoted, binary column).
    Str,
    /// `bytes` (into a binary or, promoted, string column: UTF-8 checked).
    Bytes,
    /// `fixed(L)`.
    Fixed(usize),
    /// `enum`: the reader's symbol of each writer index, `None` when the reader has no such
    /// symbol and no default.
    Enum(Box<[Option<Box<str>>]>),
    /// `decimal` on `bytes` (`None`) or `fixed(L)`.
    Decimal(Option<usize>),
    /// `uuid` on `string` (text form).
    UuidStr,
    /// `uuid` on `fixed(16)`.
    UuidFixed,
    /// `date`: days.
    Date,
    /// `time-millis` (int).
    TimeMillis,
    /// `time-micros` (long).
    TimeMicros,
    /// `timestamp-millis` or `local-timestamp-millis`.
    TimestampMillis,
    /// `timestamp-micros` or `local-timestamp-micros`.
    TimestampMicros,
    /// `record`.
    Record(Box<RecordPlan>),
    /// `array`.
    Array(Box<Node>),
    /// `map`.
    Map(Box<Node>),
    /// `null` (no bytes): only inside [`Node::Union`].
    Null,
    /// Any other union, only in a writer field the reader lacks (read to be skipped).
    Union(Box<[Node]>),
    /// `["null", T]` / `[T, "null"]`: branch `null_index` is null.
    Optional {
        /// The union branch of `null` (0 or 1).
        null_index: u8,
        /// The other branch.
        value: Box<Node>,
    },
}

impl MappedSchema {
    /// Maps the Avro writer schema `schema` (its JSON text; `references` are the texts of the
    /// schemas it references, in dependency order) to an Iceberg schema, with `partition_field`
    /// (a top-level `timestamp-millis`/`timestamp-micros` field) as the `hour` partition source.
    /// Records are read with the writer schema as their own reader (no resolution).
    ///
    /// Errors: [`SchemaError`] naming the field by path.
    pub fn from_avro(
        schema: &str,
        references: &[String],
        partition_field: &str,
    ) -> Result<MappedSchema, SchemaError> {
        Self::from_avro_resolved(schema, references, schema, references, partition_field)
    }

    /// How records of `writer`, an older version of the schema than `reader` (the channel's
    /// version, which the table was created or evolved from), are read: resolved against
    /// `reader` ([`MappedSchema::from_avro_resolved`]: fields `writer` lacks take `reader`'s
    /// defaults) when `reader` has every field of `writer`, by dotted path; else as `writer`
    /// alone ([`MappedSchema::from_avro`]: fields it lacks are null). Avro resolution skips a
    /// writer field the reader lacks, but the table keeps every column a version ever had: a
    /// newer version that dropped a field must not drop the values older records carry in it.
    ///
    /// Errors: as [`MappedSchema::from_avro_resolved`], or [`MappedSchema::from_avro`] of
    /// `writer`.
    pub fn from_avro_older(
        writer: &str,
        writer_references: &[String],
        reader: &str,
        reader_references: &[String],
        partition_field: &str,
    ) -> Result<MappedSchema, SchemaError> {
        let own = Self::from_avro(writer, writer_references, partition_field)?;
        let resolved = Self::from_avro_resolved(
            writer,
            writer_references,
            reader,
            reader_references,
            partition_field,
        )?;
        let paths = |s: &iceberg::spec::Schema| -> std::collections::BTreeSet<String> {
            (0..=s.highest_field_id())
                .filter_map(|id| s.name_by_field_id(id).map(str::to_string))
                .collect()
        };
        let kept = paths(resolved.iceberg_schema());
        Ok(if paths(own.iceberg_schema()).is_subset(&kept) {
            resolved
        } else {
            own
        })
    }

    /// Maps the table's reader schema `reader` (normally the subject's latest version, the one
    /// the table was created or evolved from) exactly as [`MappedSchema::from_avro`] does, with
    /// a decode plan for records written with `writer` (the record's schema id) resolved against
    /// it by the Avro specification's "Schema Resolution": fields matched by name or reader
    /// alias, writer-only fields skipped, reader-only fields filled with the reader's default
    /// (null when it has none and the field is optional), numeric and string/bytes promotions.
    /// Pass the result to [`crate::convert::Converter::for_evolved_table`].
    ///
    /// Errors: [`SchemaError`] naming the field by path, when either schema has no mapping or
    /// the writer's cannot be resolved against the reader's (another type, a required reader
    /// field the writer lacks without a default).
    pub fn from_avro_resolved(
        writer: &str,
        writer_references: &[String],
        reader: &str,
        reader_references: &[String],
        partition_field: &str,
    ) -> Result<MappedSchema, SchemaError> {
        let reader = Parsed::parse(reader, reader_references, "reader")?;
        let writer = Parsed::parse(writer, writer_references, "writer")?;
        let Schema::Record(r) = reader.root() else {
            return Err(SchemaError::unsupported(
                "",
                "the schema is not a record (the table needs one)",
            ));
        };
        let mut mapper = Mapper {
            names: &reader.names,
            stack: Vec::new(),
            next_id: 1,
        };
        let mut root = mapper.record(r, "", 0)?;
        check_partition(&mut root, r, &reader, partition_field)?;
        let mut resolver = Resolver {
            writer: &writer,
            reader: &reader,
            stack: Vec::new(),
        };
        let Schema::Record(w) = resolver.writer.deref(writer.root(), "")? else {
            return Err(SchemaError::unsupported(
                "",
                "the writer schema is not a record",
            ));
        };
        let mut plan = resolver.record(w, r, "", 0)?;
        for f in &mut plan.fields {
            f.is_partition = !partition_field.is_empty() && &*f.name == partition_field;
        }
        if !partition_field.is_empty() && !plan.fields.iter().any(|f| f.is_partition) {
            return Err(SchemaError::Partition {
                pointer: format!("/{}", escape_pointer_token(partition_field)),
                message: format!("the writer schema lacks the partition field {partition_field:?}"),
            });
        }
        MappedSchema::from_parts(
            root,
            partition_field,
            Decoding::Avro(Arc::new(AvroWriter { root: plan })),
        )
    }
}

/// Refuses a partition field that is not a top-level timestamp; makes its column required.
fn check_partition(
    root: &mut StructSpec,
    r: &RecordSchema,
    reader: &Parsed,
    partition: &str,
) -> Result<(), SchemaError> {
    if partition.is_empty() {
        return Ok(());
    }
    let pointer = format!("/{}", escape_pointer_token(partition));
    let Some(rf) = r.fields.iter().find(|f| f.name == partition) else {
        return Err(SchemaError::Partition {
            pointer: String::new(),
            message: format!("partition field {partition:?} is not a top-level field"),
        });
    };
    let (inner, _) = optional_of(&rf.schema);
    let is_ts = matches!(
        reader.deref(inner, &pointer)?,
        Schema::TimestampMillis | Schema::TimestampMicros
    );
    if !is_ts {
        return Err(SchemaError::Partition {
            pointer,
            message: format!(
                "partition field {partition:?} must be a long with logical type timestamp-millis or timestamp-micros"
            ),
        });
    }
    if let Some(f) = root.fields.iter_mut().find(|f| f.name == partition) {
        f.required = true;
        f.admits_null = false;
        f.is_partition = true;
    }
    Ok(())
}

/// A parsed schema with its named types.
struct Parsed {
    schemata: Vec<Schema>,
    names: HashMap<Name, Schema>,
}

impl Parsed {
    fn parse(text: &str, references: &[String], which: &str) -> Result<Parsed, SchemaError> {
        let bad = |e: &dyn std::fmt::Display| {
            SchemaError::invalid("", format!("{which} schema does not parse: {e}"))
        };
        let text = mark_fixed_uuids(text).map_err(|e| bad(&e))?;
        let refs = references
            .iter()
            .map(|r| mark_fixed_uuids(r))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| bad(&e))?;
        let (root, refs) = Schema::parse_str_with_list(&text, &refs).map_err(|e| bad(&e))?;
        let mut schemata = vec![root];
        schemata.extend(refs);
        let mut names = HashMap::new();
        for s in &schemata {
            collect_names(s, &mut names);
        }
        Ok(Parsed { schemata, names })
    }

    fn root(&self) -> &Schema {
        &self.schemata[0]
    }

    /// Follows a named reference.
    fn deref<'a>(&'a self, s: &'a Schema, ptr: &str) -> Result<&'a Schema, SchemaError> {
        match s {
            Schema::Ref { name } => self.names.get(name).ok_or_else(|| {
                SchemaError::invalid(ptr, format!("unknown type {:?}", name.fullname(None)))
            }),
            other => Ok(other),
        }
    }
}

/// Rewrites `{"type": "fixed", "logicalType": "uuid", …}` objects so that the `fixed` survives
/// parsing, marked by [`FIXED_UUID_ATTR`].
fn mark_fixed_uuids(text: &str) -> Result<String, serde_json::Error> {
    fn walk(v: &mut serde_json::Value) {
        match v {
            serde_json::Value::Object(o) => {
                if o.get("type").and_then(|t| t.as_str()) == Some("fixed")
                    && o.get("logicalType").and_then(|t| t.as_str()) == Some("uuid")
                    && o.get("size").and_then(|t| t.as_u64()) == Some(16)
                {
                    o.remove("logicalType");
                    o.insert(FIXED_UUID_ATTR.into(), serde_json::Value::Bool(true));
                }
                o.values_mut().for_each(walk);
            }
            serde_json::Value::Array(a) => a.iter_mut().for_each(walk),
            _ => {}
        }
    }
    let mut v: serde_json::Value = serde_json::from_str(text)?;
    walk(&mut v);
    serde_json::to_string(&v)
}

fn collect_names(s: &Schema, names: &mut HashMap<Name, Schema>) {
    match s {
        Schema::Record(r) => {
            names.insert(r.name.clone(), s.clone());
            for f in &r.fields {
                collect_names(&f.schema, names);
            }
        }
        Schema::Enum(e) => {
            names.insert(e.name.clone(), s.clone());
        }
        Schema::Fixed(f) => {
            names.insert(f.name.clone(), s.clone());
        }
        Schema::Decimal(d) => collect_names(&d.inner, names),
        Schema::Array(a) => collect_names(&a.items, names),
        Schema::Map(m) => collect_names(&m.types, names),
        Schema::Union(u) => u.variants().iter().for_each(|v| collect_names(v, names)),
        _ => {}
    }
}

fn is_fixed_uuid(s: &Schema) -> bool {
    matches!(s, Schema::Fixed(f) if f.attributes.contains_key(FIXED_UUID_ATTR))
}

/// A field's default (JSON) as an Avro value of type `s`. A `bytes` or `fixed` default is a JSON
/// string whose code points 0–255 are the byte values (Avro 1.11 "Complex Types", the table of
/// default values), not its UTF-8: `"\u00ff"` is the one byte 0xff. Followed through arrays, maps
/// and a union's first branch (the branch a default is of); anything else as apache-avro reads
/// JSON.
fn default_value(s: &Schema, d: &serde_json::Value) -> apache_avro::types::Value {
    use apache_avro::types::Value as V;
    use serde_json::Value as J;
    let latin1 = |t: &str| -> Option<Vec<u8>> {
        t.chars().map(|c| u8::try_from(u32::from(c)).ok()).collect()
    };
    match (s, d) {
        (Schema::Bytes, J::String(t)) => latin1(t).map(V::Bytes),
        (Schema::Fixed(f), J::String(t)) => latin1(t).map(|b| V::Fixed(f.size, b)),
        (Schema::Array(a), J::Array(xs)) => Some(V::Array(
            xs.iter().map(|x| default_value(&a.items, x)).collect(),
        )),
        (Schema::Map(m), J::Object(o)) => Some(V::Map(
            o.iter()
                .map(|(k, x)| (k.clone(), default_value(&m.types, x)))
                .collect(),
        )),
        (Schema::Union(u), _) => u.variants().first().map(|first| default_value(first, d)),
        _ => None,
    }
    .unwrap_or_else(|| V::from(d.clone()))
}

/// `["null", T]` / `[T, "null"]` → (`T`, Some(index of null)); a one-branch union → its branch;
/// anything else → (itself, None).
fn optional_of(s: &Schema) -> (&Schema, Option<u8>) {
    if let Schema::Union(u) = s {
        match u.variants() {
            [Schema::Null, t] => return (t, Some(0)),
            [t, Schema::Null] => return (t, Some(1)),
            [t] => return (t, None),
            _ => {}
        }
    }
    (s, None)
}

fn child_ptr(ptr: &str, name: &str) -> String {
    format!("{ptr}/{}", escape_pointer_token(name))
}

/// Maps the reader schema to the table's fields.
struct Mapper<'a> {
    names: &'a HashMap<Name, Schema>,
    /// Records being mapped (recursion check).
    stack: Vec<Name>,
    next_id: i32,
}

impl Mapper<'_> {
    fn take_id(&mut self) -> i32 {
        let id = self.next_id;
        self.next_id += 1;
        id
    }

    fn record(
        &mut self,
        r: &RecordSchema,
        ptr: &str,
        depth: usize,
    ) -> Result<StructSpec, SchemaError> {
        if r.fields.is_empty() {
            return Err(SchemaError::unsupported(
                ptr,
                format!("record {:?} has no fields", r.name.fullname(None)),
            ));
        }
        self.stack.push(r.name.clone());
        let fields = r
            .fields
            .iter()
            .map(|f| self.field(f, &child_ptr(ptr, &f.name), depth))
            .collect::<Result<Vec<_>, _>>();
        self.stack.pop();
        Ok(StructSpec {
            fields: fields?,
            additional: Additional::Drop,
            min_props: None,
            max_props: None,
        })
    }

    fn field(
        &mut self,
        f: &RecordField,
        ptr: &str,
        depth: usize,
    ) -> Result<FieldSpec, SchemaError> {
        let mut spec = self.value(&f.name, &f.schema, ptr, depth)?;
        spec.doc = f.doc.clone();
        spec.has_default = f.default.is_some();
        Ok(spec)
    }

    /// A field, list element or map value named `name` of type `s`.
    fn value(
        &mut self,
        name: &str,
        s: &Schema,
        ptr: &str,
        depth: usize,
    ) -> Result<FieldSpec, SchemaError> {
        let id = self.take_id();
        let (inner, null_index) = optional_of(s);
        let ty = self.ty(inner, ptr, depth)?;
        Ok(FieldSpec {
            id,
            name: name.to_string(),
            required: true,
            admits_null: null_index.is_some(),
            is_partition: false,
            ty,
            doc: None,
            has_default: false,
        })
    }

    fn ty(&mut self, s: &Schema, ptr: &str, depth: usize) -> Result<FieldType, SchemaError> {
        let nested = |what: &str| {
            if depth + 1 > MAX_SCHEMA_DEPTH {
                Err(SchemaError::unsupported(
                    ptr,
                    format!("{what}: nesting depth {} > {MAX_SCHEMA_DEPTH}", depth + 1),
                ))
            } else {
                Ok(())
            }
        };
        let int = |lo: i128, hi: i128| IntSpec {
            lo,
            hi,
            multiple_of: None,
        };
        Ok(match s {
            Schema::Ref { name } => {
                if self.stack.contains(name) {
                    return Err(SchemaError::unsupported(
                        ptr,
                        format!("recursive record {:?}", name.fullname(None)),
                    ));
                }
                let Some(t) = self.names.get(name) else {
                    return Err(SchemaError::invalid(
                        ptr,
                        format!("unknown type {:?}", name.fullname(None)),
                    ));
                };
                let t = t.clone();
                return self.ty(&t, ptr, depth);
            }
            Schema::Null => {
                return Err(SchemaError::unsupported(
                    ptr,
                    "the null type alone has no Iceberg type",
                ))
            }
            Schema::Union(u) => {
                return Err(SchemaError::unsupported(
                    ptr,
                    format!(
                        "a union of {} types; only [\"null\", T] is mapped (to an optional T)",
                        u.variants().len()
                    ),
                ))
            }
            Schema::Boolean => FieldType::Boolean,
            Schema::Int => FieldType::Int(int(i32::MIN.into(), i32::MAX.into())),
            Schema::Long => FieldType::Long(int(i64::MIN.into(), i64::MAX.into())),
            Schema::Float => FieldType::Float(NumSpec::default()),
            Schema::Double => FieldType::Double(NumSpec::default()),
            Schema::String | Schema::Enum(_) => FieldType::String(StrSpec::default()),
            Schema::Bytes => FieldType::Binary(StrSpec::default()),
            Schema::Fixed(_) if is_fixed_uuid(s) => FieldType::Uuid(StrSpec::default()),
            Schema::Fixed(f) => {
                if f.size == 0 || f.size > i32::MAX as usize {
                    return Err(SchemaError::unsupported(
                        ptr,
                        format!("fixed of size {}", f.size),
                    ));
                }
                FieldType::Fixed(f.size as u32)
            }
            Schema::Decimal(d) => {
                if d.precision > 38 || d.precision == 0 || d.scale > d.precision {
                    return Err(SchemaError::unsupported(
                        ptr,
                        format!(
                            "decimal({}, {}): Iceberg decimals have precision 1..=38 and scale ≤ precision",
                            d.precision, d.scale
                        ),
                    ));
                }
                FieldType::Decimal {
                    precision: d.precision as u32,
                    scale: d.scale as u32,
                    spec: NumSpec::default(),
                }
            }
            Schema::Uuid => FieldType::Uuid(StrSpec::default()),
            Schema::Date => FieldType::Date(StrSpec::default()),
            Schema::TimeMillis | Schema::TimeMicros => FieldType::Time(StrSpec::default()),
            Schema::TimestampMillis | Schema::TimestampMicros => {
                FieldType::Timestamptz(StrSpec::default())
            }
            Schema::LocalTimestampMillis | Schema::LocalTimestampMicros => {
                FieldType::Timestamp(StrSpec::default())
            }
            Schema::TimestampNanos | Schema::LocalTimestampNanos => {
                return Err(SchemaError::unsupported(
                    ptr,
                    "nanosecond timestamps need Iceberg v3 (timestamp_ns), which floe does not write",
                ))
            }
            Schema::BigDecimal | Schema::Duration => {
                return Err(SchemaError::unsupported(
                    ptr,
                    format!("logical type {s:?} has no Iceberg type"),
                ))
            }
            Schema::Record(r) => {
                nested("record")?;
                if self.stack.contains(&r.name) {
                    return Err(SchemaError::unsupported(
                        ptr,
                        format!("recursive record {:?}", r.name.fullname(None)),
                    ));
                }
                FieldType::Struct(self.record(r, ptr, depth + 1)?)
            }
            Schema::Array(a) => {
                nested("array")?;
                let element = self.value("element", &a.items, &child_ptr(ptr, "element"), depth + 1)?;
                FieldType::List(ListSpec {
                    element: Box::new(element),
                    min_items: None,
                    max_items: None,
                })
            }
            Schema::Map(m) => {
                nested("map")?;
                let key_id = self.take_id();
                let value = self.value("value", &m.types, &child_ptr(ptr, "value"), depth + 1)?;
                FieldType::Map(MapSpec {
                    value: Box::new(value),
                    key_id,
                    min_props: None,
                    max_props: None,
                })
            }
        })
    }
}

/// Builds the decode plan of the writer schema against the reader schema.
struct Resolver<'a> {
    writer: &'a Parsed,
    reader: &'a Parsed,
    /// Writer records being resolved (the mapper refused reader recursion already).
    stack: Vec<Name>,
}

impl Resolver<'_> {
    fn record(
        &mut self,
        w: &RecordSchema,
        r: &RecordSchema,
        ptr: &str,
        depth: usize,
    ) -> Result<RecordPlan, SchemaError> {
        if self.stack.contains(&w.name) || depth > MAX_SCHEMA_DEPTH {
            return Err(SchemaError::unsupported(
                ptr,
                format!("recursive writer record {:?}", w.name.fullname(None)),
            ));
        }
        self.stack.push(w.name.clone());
        let res = self.record_fields(w, r, ptr, depth);
        self.stack.pop();
        res
    }

    fn record_fields(
        &mut self,
        w: &RecordSchema,
        r: &RecordSchema,
        ptr: &str,
        depth: usize,
    ) -> Result<RecordPlan, SchemaError> {
        let reader_index = |wf: &RecordField| {
            r.fields
                .iter()
                .position(|rf| rf.name == wf.name)
                .or_else(|| {
                    r.fields
                        .iter()
                        .position(|rf| rf.aliases.as_ref().is_some_and(|a| a.contains(&wf.name)))
                })
        };
        let mut fields = Vec::with_capacity(w.fields.len());
        let mut matched = vec![false; r.fields.len()];
        for wf in &w.fields {
            let fptr = child_ptr(ptr, &wf.name);
            match reader_index(wf) {
                Some(i) => {
                    matched[i] = true;
                    let rf = &r.fields[i];
                    fields.push(WriterField {
                        name: rf.name.as_str().into(),
                        target: Some(i),
                        is_partition: false,
                        node: self.value(&wf.schema, &rf.schema, &fptr, depth)?,
                    });
                }
                None => fields.push(WriterField {
                    name: wf.name.as_str().into(),
                    target: None,
                    is_partition: false,
                    node: self.skipped(&wf.schema, &fptr, depth)?,
                }),
            }
        }
        let mut defaults = Vec::new();
        for (i, rf) in r.fields.iter().enumerate().filter(|(i, _)| !matched[*i]) {
            let fptr = child_ptr(ptr, &rf.name);
            let optional = optional_of(&rf.schema).1.is_some();
            match &rf.default {
                // A null default of an optional field is what an absent column holds anyway.
                Some(serde_json::Value::Null) if optional => {}
                Some(d) => defaults.push(DefaultFill {
                    name: rf.name.as_str().into(),
                    target: i,
                    node: Resolver {
                        writer: self.reader,
                        reader: self.reader,
                        stack: Vec::new(),
                    }
                    .value(&rf.schema, &rf.schema, &fptr, depth)?,
                    bytes: self.encode_default(&rf.schema, d, &fptr)?,
                }),
                None if optional => {}
                None => {
                    return Err(SchemaError::unsupported(
                        &fptr,
                        format!(
                            "the reader's required field {:?} has no default and the writer schema lacks it",
                            rf.name
                        ),
                    ))
                }
            }
        }
        Ok(RecordPlan { fields, defaults })
    }

    /// The plan of a writer value the reader lacks: any type, read only to be skipped.
    fn skipped(&mut self, w: &Schema, ptr: &str, depth: usize) -> Result<Node, SchemaError> {
        if depth > MAX_SCHEMA_DEPTH {
            return Err(SchemaError::unsupported(
                ptr,
                format!("nesting depth > {MAX_SCHEMA_DEPTH}"),
            ));
        }
        Ok(match self.writer.deref(w, ptr)? {
            Schema::Null => Node::Null,
            Schema::Union(u) => Node::Union(
                u.variants()
                    .iter()
                    .map(|v| self.skipped(v, ptr, depth + 1))
                    .collect::<Result<_, _>>()?,
            ),
            Schema::Array(a) => Node::Array(Box::new(self.skipped(&a.items, ptr, depth + 1)?)),
            Schema::Map(m) => Node::Map(Box::new(self.skipped(&m.types, ptr, depth + 1)?)),
            Schema::Record(r) => {
                if self.stack.contains(&r.name) {
                    return Err(SchemaError::unsupported(
                        ptr,
                        format!("recursive writer record {:?}", r.name.fullname(None)),
                    ));
                }
                self.stack.push(r.name.clone());
                let fields = r
                    .fields
                    .iter()
                    .map(|f| {
                        Ok(WriterField {
                            name: f.name.as_str().into(),
                            target: None,
                            is_partition: false,
                            node: self.skipped(&f.schema, &child_ptr(ptr, &f.name), depth + 1)?,
                        })
                    })
                    .collect::<Result<_, SchemaError>>();
                self.stack.pop();
                Node::Record(Box::new(RecordPlan {
                    fields: fields?,
                    defaults: Vec::new(),
                }))
            }
            Schema::Decimal(d) => match self.writer.deref(&d.inner, ptr)? {
                Schema::Fixed(f) => Node::Fixed(f.size),
                _ => Node::Bytes,
            },
            Schema::Fixed(f) => Node::Fixed(f.size),
            Schema::BigDecimal => Node::Bytes,
            Schema::Duration => Node::Fixed(12),
            Schema::TimestampNanos | Schema::LocalTimestampNanos => Node::Long,
            other => self.plain(other, other, ptr, depth)?,
        })
    }

    /// The reader's default `d` of a field of type `s`, in Avro binary encoding.
    fn encode_default(
        &self,
        s: &Schema,
        d: &serde_json::Value,
        ptr: &str,
    ) -> Result<Box<[u8]>, SchemaError> {
        let schemata: Vec<&Schema> = self.reader.schemata.iter().collect();
        let bad = |e: apache_avro::Error| {
            SchemaError::invalid(
                ptr,
                format!("the field's default does not fit its type: {e}"),
            )
        };
        let value = default_value(s, d)
            .resolve_schemata(s, schemata.clone())
            .map_err(bad)?;
        let bytes = apache_avro::to_avro_datum_schemata(s, schemata, value).map_err(bad)?;
        Ok(bytes.into_boxed_slice())
    }

    /// The plan of a writer value of type `w` read as the reader's type `r`.
    fn value(
        &mut self,
        w: &Schema,
        r: &Schema,
        ptr: &str,
        depth: usize,
    ) -> Result<Node, SchemaError> {
        let w = self.writer.deref(w, ptr)?;
        let r = self.reader.deref(r, ptr)?;
        let (w_inner, w_null) = optional_of(w);
        let (r_inner, _) = optional_of(r);
        let node = self.plain(
            self.writer.deref(w_inner, ptr)?,
            self.reader.deref(r_inner, ptr)?,
            ptr,
            depth,
        )?;
        Ok(match w_null {
            Some(null_index) => Node::Optional {
                null_index,
                value: Box::new(node),
            },
            None => node,
        })
    }

    fn plain(
        &mut self,
        w: &Schema,
        r: &Schema,
        ptr: &str,
        depth: usize,
    ) -> Result<Node, SchemaError> {
        use Schema as S;
        let refuse = || {
            SchemaError::unsupported(
                ptr,
                format!(
                    "the writer's {} cannot be read as the reader's {} (Avro schema resolution)",
                    kind(w),
                    kind(r)
                ),
            )
        };
        Ok(match (w, r) {
            (S::Boolean, S::Boolean) => Node::Bool,
            (S::Int, S::Int | S::Long | S::Float | S::Double) => Node::Int,
            (S::Long, S::Long | S::Float | S::Double) => Node::Long,
            (S::Float, S::Float | S::Double) => Node::Float,
            (S::Double, S::Double) => Node::Double,
            (S::String, S::String | S::Bytes) => Node::Str,
            (S::Bytes, S::Bytes | S::String) => Node::Bytes,
            (S::Enum(we), S::Enum(re)) => Node::Enum(
                we.symbols
                    .iter()
                    .map(|s| {
                        if re.symbols.contains(s) {
                            Some(s.as_str().into())
                        } else {
                            re.default.as_deref().map(Into::into)
                        }
                    })
                    .collect(),
            ),
            (S::Fixed(_), S::Fixed(_)) if is_fixed_uuid(w) && is_fixed_uuid(r) => Node::UuidFixed,
            (S::Uuid, S::Uuid) => Node::UuidStr,
            (S::Fixed(wf), S::Fixed(rf))
                if wf.size == rf.size && !is_fixed_uuid(w) && !is_fixed_uuid(r) =>
            {
                Node::Fixed(wf.size)
            }
            (S::Decimal(wd), S::Decimal(rd))
                if wd.scale == rd.scale && wd.precision <= rd.precision =>
            {
                match self.writer.deref(&wd.inner, ptr)? {
                    S::Fixed(f) => Node::Decimal(Some(f.size)),
                    _ => Node::Decimal(None),
                }
            }
            (S::Date, S::Date) => Node::Date,
            (S::TimeMillis, S::TimeMillis | S::TimeMicros) => Node::TimeMillis,
            (S::TimeMicros, S::TimeMillis | S::TimeMicros) => Node::TimeMicros,
            (S::TimestampMillis, S::TimestampMillis | S::TimestampMicros)
            | (S::LocalTimestampMillis, S::LocalTimestampMillis | S::LocalTimestampMicros) => {
                Node::TimestampMillis
            }
            (S::TimestampMicros, S::TimestampMillis | S::TimestampMicros)
            | (S::LocalTimestampMicros, S::LocalTimestampMillis | S::LocalTimestampMicros) => {
                Node::TimestampMicros
            }
            (S::Record(wr), S::Record(rr)) => {
                Node::Record(Box::new(self.record(wr, rr, ptr, depth + 1)?))
            }
            (S::Array(wa), S::Array(ra)) => Node::Array(Box::new(self.value(
                &wa.items,
                &ra.items,
                &child_ptr(ptr, "element"),
                depth + 1,
            )?)),
            (S::Map(wm), S::Map(rm)) => Node::Map(Box::new(self.value(
                &wm.types,
                &rm.types,
                &child_ptr(ptr, "value"),
                depth + 1,
            )?)),
            _ => return Err(refuse()),
        })
    }
}

fn kind(s: &Schema) -> String {
    match s {
        Schema::Record(r) => format!("record {}", r.name.fullname(None)),
        Schema::Enum(e) => format!("enum {}", e.name.fullname(None)),
        Schema::Fixed(f) => format!("fixed({})", f.size),
        Schema::Decimal(d) => format!("decimal({}, {})", d.precision, d.scale),
        Schema::Union(u) => format!("union of {} types", u.variants().len()),
        other => format!("{:?}", apache_avro::schema::SchemaKind::from(other)).to_lowercase(),
    }
}

#[cfg(test)]
mod tests;
