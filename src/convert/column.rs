//! Column buffers the converter appends to, one per Iceberg field, shaped exactly like the table's
//! Arrow schema (iceberg-rust's `schema_to_arrow_schema`: uuid → `FixedSizeBinary(16)`, timestamptz →
//! `Timestamp(µs, "+00:00")`, decimal → `Decimal128(38, s)`, binary → `LargeBinary`, date → `Date32`,
//! time → `Time64(µs)`, lists with an `element` field, maps with `key_value{key, value}`).
//!
//! Buffers are plain `Vec`s so that a failed record is rolled back by truncating every column to the
//! length it had before the record ([`Col::truncate`]); [`Col::finish`] hands them to Arrow without
//! copying and leaves empty buffers of the same capacity behind.

use std::sync::Arc;

use arrow_array::types::{
    Date32Type, Decimal128Type, Float32Type, Float64Type, Int32Type, Int64Type,
    Time64MicrosecondType, TimestampMicrosecondType,
};
use arrow_array::{
    ArrayRef, BooleanArray, FixedSizeBinaryArray, LargeBinaryArray, ListArray, MapArray,
    PrimitiveArray, StringArray, StructArray,
};
use arrow_buffer::{BooleanBufferBuilder, Buffer, NullBuffer, OffsetBuffer, ScalarBuffer};
use arrow_schema::{DataType, FieldRef, Fields, TimeUnit};

use crate::schema::{
    FieldSpec, FieldType, IntSpec, ListSpec, MapSpec, NumSpec, SchemaError, StrSpec, StructSpec,
};

/// What the decoder needs to know about a field besides its buffers.
pub(crate) struct Meta {
    /// Index of the field's name in the converter's name table (for JSON pointers).
    pub name_id: u32,
    /// The key must be present (struct fields only).
    pub required: bool,
    /// `null` is an allowed value.
    pub admits_null: bool,
    /// The partition field.
    pub is_partition: bool,
    /// A table column the record's schema version does not have ([`BuildMode::Evolved`]): never
    /// matched by a key (a key of that name is an unknown key of the version), always null.
    pub absent: bool,
}

/// How the converter's columns are matched to the table's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum BuildMode {
    /// The table has exactly the schema's structure (names, types, nullability).
    Exact,
    /// The table's schema is an evolution of the schema's (docs/schema-mapping.md "Schema
    /// evolution"): it may have more fields (null in these records), `long` where the schema has
    /// `int`, and optional fields where the schema's are required.
    Evolved,
}

pub(crate) struct Col {
    pub meta: Meta,
    /// Present iff the Arrow field is nullable.
    pub validity: Option<BooleanBufferBuilder>,
    pub data: Data,
    pub field: FieldRef,
}

pub(crate) enum Data {
    Bool(BooleanBufferBuilder),
    Int(Vec<i32>, IntSpec),
    Long(Vec<i64>, IntSpec),
    Float(Vec<f32>),
    Double(Vec<f64>, Box<NumSpec>),
    Decimal(Vec<i128>, Box<DecimalPlan>),
    Str(VarBuf, Box<StrSpec>),
    Enum(VarBuf, Box<EnumPlan>),
    Timestamptz(Vec<i64>, Box<StrSpec>),
    Date(Vec<i32>, Box<StrSpec>),
    Time(Vec<i64>, Box<StrSpec>),
    Uuid(Vec<u8>, Box<StrSpec>),
    Binary(LargeVarBuf, Box<StrSpec>),
    /// `fixed(L)`: `L` bytes a value, `L` as Arrow's `i32`.
    Fixed(Vec<u8>, i32),
    /// `timestamp` without zone: µs.
    Timestamp(Vec<i64>),
    Struct(Box<StructCol>),
    List(Box<ListCol>),
    Map(Box<MapCol>),
}

pub(crate) struct EnumPlan {
    pub members: Vec<crate::schema::EnumMember>,
    pub str_spec: StrSpec,
    /// The type the schema's `type` keyword names (`None`: every type).
    pub ty: Option<crate::schema::JsonType>,
    /// A `null` passes `type` but is not a member (`VALUE_OUT_OF_RANGE`).
    pub null_refused_by_enum: bool,
}

pub(crate) struct DecimalPlan {
    /// Total digits (1..=38): a value needs `|unscaled| < 10^precision`.
    pub precision: u32,
    pub scale: u32,
    /// Bounds only (`multipleOf` is checked on the unscaled value).
    pub bounds: NumSpec,
    pub multiple: DecMultiple,
}

/// `multipleOf` of a decimal column, on unscaled values.
pub(crate) enum DecMultiple {
    /// No `multipleOf`, or exactly `10^-scale`: implied by the scale check.
    Implied,
    /// The unscaled value must be a multiple of this.
    Unscaled(i128),
    /// The divisor exceeds decimal(38): only zero is a multiple.
    OnlyZero,
}

impl DecimalPlan {
    fn new(precision: u32, scale: u32, spec: &NumSpec) -> Self {
        let multiple = match &spec.multiple_of {
            None => DecMultiple::Implied,
            Some(m) => {
                // m = M·10^e with e + scale ≥ 0 (the scale is m's fractional digit count).
                let shift = m.exp + i64::from(scale);
                let mut v = Some(i128::from(m.m));
                for _ in 0..shift.clamp(0, 40) {
                    v = v.and_then(|v| v.checked_mul(10));
                }
                match v {
                    Some(1) => DecMultiple::Implied,
                    Some(v) if shift >= 0 => DecMultiple::Unscaled(v),
                    _ => DecMultiple::OnlyZero,
                }
            }
        };
        let mut bounds = spec.clone();
        bounds.multiple_of = None;
        DecimalPlan {
            precision,
            scale,
            bounds,
            multiple,
        }
    }
}

/// Utf8 values: i32 offsets (starting with 0) and bytes.
pub(crate) struct VarBuf {
    pub offsets: Vec<i32>,
    pub data: Vec<u8>,
}

impl VarBuf {
    fn new() -> Self {
        VarBuf {
            offsets: vec![0],
            data: Vec::new(),
        }
    }
    #[inline]
    pub fn len(&self) -> usize {
        self.offsets.len() - 1
    }
    /// Ends the value whose bytes were appended to `data`.
    #[inline]
    pub fn commit(&mut self) {
        self.offsets.push(self.data.len() as i32);
    }
    fn truncate(&mut self, n: usize) {
        self.offsets.truncate(n + 1);
        let end = self.offsets.last().copied().unwrap_or(0) as usize;
        self.data.truncate(end);
    }
}

/// LargeBinary values: i64 offsets and bytes.
pub(crate) struct LargeVarBuf {
    pub offsets: Vec<i64>,
    pub data: Vec<u8>,
}

impl LargeVarBuf {
    #[inline]
    pub fn commit(&mut self) {
        self.offsets.push(self.data.len() as i64);
    }
}

pub(crate) struct StructCol {
    pub children: Vec<Col>,
    /// Names as bytes, for key lookup.
    pub names: Vec<Box<[u8]>>,
    /// Names that a raw key token can be compared with byte for byte (no `"`, `\\`, control
    /// characters), as patterns `name"`: `None` for the others.
    pub plain_names: Vec<Option<KeyPattern>>,
    /// For each field (and, at index `len`, the start of the object): the field that followed it
    /// in the last record — the decoder's guess for the next key.
    pub next_after: Vec<usize>,
    pub spec_additional_forbid: bool,
    pub min_props: Option<u64>,
    pub max_props: Option<u64>,
    pub len: usize,
    pub fields: Fields,
}

impl StructCol {
    /// Index of the field named `key`, trying `hint` first (records usually follow one order).
    #[inline]
    pub fn lookup(&self, key: &[u8], hint: usize) -> Option<usize> {
        if let Some(n) = self.names.get(hint) {
            if &**n == key && !self.children[hint].meta.absent {
                return Some(hint);
            }
        }
        self.names
            .iter()
            .zip(&self.children)
            .position(|(n, c)| &**n == key && !c.meta.absent)
    }
}

/// `name"` as 8-byte words, to recognize a key token in a few word compares.
pub(crate) struct KeyPattern {
    bytes: Box<[u8]>,
    words: Box<[u64]>,
    last_mask: u64,
}

impl KeyPattern {
    pub fn new(name: &[u8]) -> Self {
        let mut bytes = name.to_vec();
        bytes.push(b'"');
        let words = bytes
            .chunks(8)
            .map(|c| {
                let mut a = [0u8; 8];
                a[..c.len()].copy_from_slice(c);
                u64::from_le_bytes(a)
            })
            .collect();
        let rem = bytes.len() % 8;
        let last_mask = if rem == 0 {
            u64::MAX
        } else {
            (1u64 << (rem * 8)) - 1
        };
        KeyPattern {
            bytes: bytes.into_boxed_slice(),
            words,
            last_mask,
        }
    }

    /// Length of the name (without the quote).
    #[inline]
    pub fn name_len(&self) -> usize {
        self.bytes.len() - 1
    }

    /// Whether `buf[p..]` starts with `name"`.
    #[inline]
    pub fn matches(&self, buf: &[u8], p: usize) -> bool {
        let n = self.words.len();
        let Some(region) = buf.get(p..p + n * 8) else {
            return buf.get(p..p + self.bytes.len()) == Some(&self.bytes[..]);
        };
        for (k, (w, c)) in self.words.iter().zip(region.chunks_exact(8)).enumerate() {
            let Ok(a) = <[u8; 8]>::try_from(c) else {
                return false;
            };
            let mask = if k + 1 == n { self.last_mask } else { u64::MAX };
            if (u64::from_le_bytes(a) ^ w) & mask != 0 {
                return false;
            }
        }
        true
    }
}

pub(crate) struct ListCol {
    pub offsets: Vec<i32>,
    pub child: Col,
    pub min_items: Option<u64>,
    pub max_items: Option<u64>,
}

pub(crate) struct MapCol {
    pub offsets: Vec<i32>,
    pub keys: VarBuf,
    pub values: Col,
    pub min_props: Option<u64>,
    pub max_props: Option<u64>,
    pub entries_field: FieldRef,
}

fn mismatch(ptr: &str, message: impl Into<String>) -> SchemaError {
    SchemaError::TableMismatch {
        pointer: ptr.to_string(),
        message: message.into(),
    }
}

fn expect_type(ptr: &str, field: &FieldRef, want: &DataType) -> Result<(), SchemaError> {
    if field.data_type() == want {
        Ok(())
    } else {
        Err(mismatch(
            ptr,
            format!("expected {want}, the table has {}", field.data_type()),
        ))
    }
}

impl Data {
    /// The buffers of a column of scalar type `ty` for the table's Arrow field `field`.
    ///
    /// Errors: the field's Arrow type is not the one `ty` maps to.
    fn scalar(
        ty: &FieldType,
        field: &FieldRef,
        ptr: &str,
        mode: BuildMode,
    ) -> Result<Data, SchemaError> {
        Ok(match ty {
            FieldType::Boolean => {
                expect_type(ptr, field, &DataType::Boolean)?;
                Data::Bool(BooleanBufferBuilder::new(0))
            }
            FieldType::Int(s)
                if mode == BuildMode::Evolved && field.data_type() == &DataType::Int64 =>
            {
                Data::Long(Vec::new(), s.clone())
            }
            FieldType::Int(s) => {
                expect_type(ptr, field, &DataType::Int32)?;
                Data::Int(Vec::new(), s.clone())
            }
            FieldType::Long(s) => {
                expect_type(ptr, field, &DataType::Int64)?;
                Data::Long(Vec::new(), s.clone())
            }
            FieldType::Float(_) => {
                expect_type(ptr, field, &DataType::Float32)?;
                Data::Float(Vec::new())
            }
            FieldType::Double(s) => {
                expect_type(ptr, field, &DataType::Float64)?;
                Data::Double(Vec::new(), Box::new(s.clone()))
            }
            FieldType::Decimal {
                precision,
                scale,
                spec,
            } => {
                expect_type(
                    ptr,
                    field,
                    &DataType::Decimal128(*precision as u8, *scale as i8),
                )?;
                Data::Decimal(
                    Vec::new(),
                    Box::new(DecimalPlan::new(*precision, *scale, spec)),
                )
            }
            FieldType::Fixed(len) => {
                expect_type(ptr, field, &DataType::FixedSizeBinary(*len as i32))?;
                Data::Fixed(Vec::new(), *len as i32)
            }
            FieldType::Timestamp(_) => {
                expect_type(
                    ptr,
                    field,
                    &DataType::Timestamp(TimeUnit::Microsecond, None),
                )?;
                Data::Timestamp(Vec::new())
            }
            FieldType::String(s) => {
                expect_type(ptr, field, &DataType::Utf8)?;
                Data::Str(VarBuf::new(), Box::new(s.clone()))
            }
            FieldType::Enum(e, ss) => {
                expect_type(ptr, field, &DataType::Utf8)?;
                Data::Enum(
                    VarBuf::new(),
                    Box::new(EnumPlan {
                        members: e.members.clone(),
                        str_spec: ss.clone(),
                        ty: e.ty,
                        null_refused_by_enum: e.null_refused_by_enum,
                    }),
                )
            }
            FieldType::Timestamptz(s) => {
                expect_type(
                    ptr,
                    field,
                    &DataType::Timestamp(TimeUnit::Microsecond, Some("+00:00".into())),
                )?;
                Data::Timestamptz(Vec::new(), Box::new(s.clone()))
            }
            FieldType::Date(s) => {
                expect_type(ptr, field, &DataType::Date32)?;
                Data::Date(Vec::new(), Box::new(s.clone()))
            }
            FieldType::Time(s) => {
                expect_type(ptr, field, &DataType::Time64(TimeUnit::Microsecond))?;
                Data::Time(Vec::new(), Box::new(s.clone()))
            }
            FieldType::Uuid(s) => {
                expect_type(ptr, field, &DataType::FixedSizeBinary(16))?;
                Data::Uuid(Vec::new(), Box::new(s.clone()))
            }
            FieldType::Binary(s) => {
                expect_type(ptr, field, &DataType::LargeBinary)?;
                Data::Binary(
                    LargeVarBuf {
                        offsets: vec![0],
                        data: Vec::new(),
                    },
                    Box::new(s.clone()),
                )
            }
            FieldType::Struct(_) | FieldType::List(_) | FieldType::Map(_) => {
                unreachable!("nested types are built by Col::build")
            }
        })
    }
}

impl Col {
    /// Builds the buffers of `spec` for the table's Arrow field `field` (same name and structure).
    pub fn build(
        spec: &FieldSpec,
        field: &FieldRef,
        ptr: &str,
        names: &mut Vec<Box<str>>,
        mode: BuildMode,
    ) -> Result<Col, SchemaError> {
        let name_id = names.len() as u32;
        names.push(spec.name.clone().into_boxed_str());
        let relaxed = mode == BuildMode::Evolved && field.is_nullable();
        if field.is_nullable() != spec.nullable() && !relaxed {
            return Err(mismatch(
                ptr,
                format!(
                    "nullability differs (schema nullable: {}, table: {})",
                    spec.nullable(),
                    field.is_nullable()
                ),
            ));
        }
        let data = match &spec.ty {
            FieldType::Struct(s) => {
                let DataType::Struct(fields) = field.data_type() else {
                    return Err(mismatch(
                        ptr,
                        format!("expected a struct, the table has {}", field.data_type()),
                    ));
                };
                Data::Struct(Box::new(StructCol::build(s, fields, ptr, names, mode)?))
            }
            FieldType::List(l) => {
                let DataType::List(elem) = field.data_type() else {
                    return Err(mismatch(
                        ptr,
                        format!("expected a list, the table has {}", field.data_type()),
                    ));
                };
                Data::List(Box::new(ListCol::build(l, elem, ptr, names, mode)?))
            }
            FieldType::Map(m) => {
                let DataType::Map(entries, _) = field.data_type() else {
                    return Err(mismatch(
                        ptr,
                        format!("expected a map, the table has {}", field.data_type()),
                    ));
                };
                Data::Map(Box::new(MapCol::build(m, entries, ptr, names, mode)?))
            }
            scalar => Data::scalar(scalar, field, ptr, mode)?,
        };
        Ok(Col {
            meta: Meta {
                name_id,
                required: spec.required,
                admits_null: spec.admits_null,
                is_partition: spec.is_partition,
                absent: false,
            },
            validity: field.is_nullable().then(|| BooleanBufferBuilder::new(0)),
            data,
            field: field.clone(),
        })
    }

    /// A column of the table that the record's schema version lacks: always null, its key never
    /// matched. It must be nullable (an evolution makes a field it drops optional).
    fn absent(field: &FieldRef, ptr: &str, names: &mut Vec<Box<str>>) -> Result<Col, SchemaError> {
        if !field.is_nullable() {
            return Err(mismatch(
                ptr,
                "the table's column is required, the schema version does not have it",
            ));
        }
        let spec = spec_of_arrow(field, ptr)?;
        let mut col = Col::build(&spec, field, ptr, names, BuildMode::Evolved)?;
        col.meta.absent = true;
        col.meta.required = false;
        Ok(col)
    }

    /// Number of values.
    pub fn len(&self) -> usize {
        match &self.data {
            Data::Bool(b) => b.len(),
            Data::Int(v, _) => v.len(),
            Data::Long(v, _) => v.len(),
            Data::Float(v) => v.len(),
            Data::Double(v, _) => v.len(),
            Data::Decimal(v, _) => v.len(),
            Data::Fixed(v, n) => v.len() / *n as usize,
            Data::Timestamp(v) => v.len(),
            Data::Str(v, _) | Data::Enum(v, _) => v.len(),
            Data::Timestamptz(v, _) => v.len(),
            Data::Date(v, _) => v.len(),
            Data::Time(v, _) => v.len(),
            Data::Uuid(v, _) => v.len() / 16,
            Data::Binary(v, _) => v.offsets.len() - 1,
            Data::Struct(s) => s.len,
            Data::List(l) => l.offsets.len() - 1,
            Data::Map(m) => m.offsets.len() - 1,
        }
    }

    /// Appends a null (or, for a non-nullable column under a null parent, a default value).
    pub fn push_null(&mut self) {
        if let Some(v) = &mut self.validity {
            v.append(false);
        }
        match &mut self.data {
            Data::Bool(b) => b.append(false),
            Data::Int(v, _) => v.push(0),
            Data::Long(v, _) => v.push(0),
            Data::Float(v) => v.push(0.0),
            Data::Double(v, _) => v.push(0.0),
            Data::Decimal(v, _) => v.push(0),
            Data::Fixed(v, n) => v.resize(v.len() + *n as usize, 0),
            Data::Timestamp(v) => v.push(0),
            Data::Str(v, _) | Data::Enum(v, _) => v.commit(),
            Data::Timestamptz(v, _) => v.push(0),
            Data::Date(v, _) => v.push(0),
            Data::Time(v, _) => v.push(0),
            Data::Uuid(v, _) => v.extend_from_slice(&[0; 16]),
            Data::Binary(v, _) => v.commit(),
            Data::Struct(s) => {
                for c in &mut s.children {
                    c.push_null();
                }
                s.len += 1;
            }
            Data::List(l) => {
                let n = l.child.len() as i32;
                l.offsets.push(n);
            }
            Data::Map(m) => {
                let n = m.keys.len() as i32;
                m.offsets.push(n);
            }
        }
    }

    /// Restores the column to `n` values (rollback of a failed record).
    pub fn truncate(&mut self, n: usize) {
        if let Some(v) = &mut self.validity {
            v.truncate(n);
        }
        match &mut self.data {
            Data::Bool(b) => b.truncate(n),
            Data::Int(v, _) => v.truncate(n),
            Data::Long(v, _) => v.truncate(n),
            Data::Float(v) => v.truncate(n),
            Data::Double(v, _) => v.truncate(n),
            Data::Decimal(v, _) => v.truncate(n),
            Data::Fixed(v, len) => v.truncate(n * *len as usize),
            Data::Timestamp(v) => v.truncate(n),
            Data::Str(v, _) | Data::Enum(v, _) => v.truncate(n),
            Data::Timestamptz(v, _) => v.truncate(n),
            Data::Date(v, _) => v.truncate(n),
            Data::Time(v, _) => v.truncate(n),
            Data::Uuid(v, _) => v.truncate(n * 16),
            Data::Binary(v, _) => {
                v.offsets.truncate(n + 1);
                let end = v.offsets.last().copied().unwrap_or(0) as usize;
                v.data.truncate(end);
            }
            Data::Struct(s) => {
                s.truncate(n);
            }
            Data::List(l) => {
                l.offsets.truncate(n + 1);
                let end = l.offsets.last().copied().unwrap_or(0) as usize;
                l.child.truncate(end);
            }
            Data::Map(m) => {
                m.offsets.truncate(n + 1);
                let end = m.offsets.last().copied().unwrap_or(0) as usize;
                m.keys.truncate(end);
                m.values.truncate(end);
            }
        }
    }

    /// Approximate bytes held.
    pub fn buffered_bytes(&self) -> usize {
        let v = self.validity.as_ref().map(|b| b.len() / 8).unwrap_or(0);
        v + match &self.data {
            Data::Bool(b) => b.len() / 8,
            Data::Int(x, _) | Data::Date(x, _) => x.len() * 4,
            Data::Long(x, _) | Data::Timestamptz(x, _) | Data::Time(x, _) | Data::Timestamp(x) => {
                x.len() * 8
            }
            Data::Float(x) => x.len() * 4,
            Data::Double(x, _) => x.len() * 8,
            Data::Fixed(x, _) => x.len(),
            Data::Decimal(x, _) => x.len() * 16,
            Data::Str(x, _) | Data::Enum(x, _) => x.data.len() + x.len() * 4,
            Data::Uuid(x, _) => x.len(),
            Data::Binary(x, _) => x.data.len() + (x.offsets.len() - 1) * 8,
            Data::Struct(s) => s.children.iter().map(Col::buffered_bytes).sum(),
            Data::List(l) => (l.offsets.len() - 1) * 4 + l.child.buffered_bytes(),
            Data::Map(m) => {
                (m.offsets.len() - 1) * 4
                    + m.keys.data.len()
                    + m.keys.len() * 4
                    + m.values.buffered_bytes()
            }
        }
    }

    /// Moves the values out as an Arrow array of exactly `self.field`'s type; the column is left
    /// empty, keeping its capacity.
    pub fn finish(&mut self) -> ArrayRef {
        let nulls = self.validity.as_mut().and_then(|v| {
            let cap = v.capacity();
            let b = NullBuffer::new(v.finish());
            *v = BooleanBufferBuilder::new(cap);
            (b.null_count() > 0).then_some(b)
        });
        let dt = self.field.data_type().clone();
        match &mut self.data {
            Data::Bool(b) => {
                let cap = b.capacity();
                let vals = b.finish();
                *b = BooleanBufferBuilder::new(cap);
                Arc::new(BooleanArray::new(vals, nulls))
            }
            Data::Int(v, _) => {
                Arc::new(PrimitiveArray::<Int32Type>::new(take_vec(v).into(), nulls))
            }
            Data::Long(v, _) => {
                Arc::new(PrimitiveArray::<Int64Type>::new(take_vec(v).into(), nulls))
            }
            Data::Float(v) => Arc::new(PrimitiveArray::<Float32Type>::new(
                take_vec(v).into(),
                nulls,
            )),
            Data::Double(v, _) => Arc::new(PrimitiveArray::<Float64Type>::new(
                take_vec(v).into(),
                nulls,
            )),
            Data::Fixed(v, n) => Arc::new(FixedSizeBinaryArray::new(
                *n,
                Buffer::from_vec(take_vec(v)),
                nulls,
            )),
            Data::Timestamp(v) => Arc::new(PrimitiveArray::<TimestampMicrosecondType>::new(
                take_vec(v).into(),
                nulls,
            )),
            Data::Decimal(v, _) => Arc::new(
                PrimitiveArray::<Decimal128Type>::new(take_vec(v).into(), nulls).with_data_type(dt),
            ),
            Data::Timestamptz(v, _) => Arc::new(
                PrimitiveArray::<TimestampMicrosecondType>::new(take_vec(v).into(), nulls)
                    .with_data_type(dt),
            ),
            Data::Date(v, _) => {
                Arc::new(PrimitiveArray::<Date32Type>::new(take_vec(v).into(), nulls))
            }
            Data::Time(v, _) => Arc::new(PrimitiveArray::<Time64MicrosecondType>::new(
                take_vec(v).into(),
                nulls,
            )),
            Data::Str(v, _) | Data::Enum(v, _) => Arc::new(finish_utf8(v, nulls)),
            Data::Uuid(v, _) => Arc::new(FixedSizeBinaryArray::new(
                16,
                Buffer::from_vec(take_vec(v)),
                nulls,
            )),
            Data::Binary(v, _) => {
                let offsets = std::mem::replace(&mut v.offsets, vec![0]);
                let data = take_vec(&mut v.data);
                Arc::new(LargeBinaryArray::new(
                    OffsetBuffer::new(ScalarBuffer::from(offsets)),
                    Buffer::from_vec(data),
                    nulls,
                ))
            }
            Data::Struct(s) => Arc::new(s.finish(nulls)),
            Data::List(l) => {
                let offsets = take_offsets(&mut l.offsets);
                let values = l.child.finish();
                let DataType::List(elem) = dt else {
                    unreachable_type()
                };
                Arc::new(ListArray::new(elem, offsets, values, nulls))
            }
            Data::Map(m) => {
                let offsets = take_offsets(&mut m.offsets);
                let keys: ArrayRef = Arc::new(finish_utf8(&mut m.keys, None));
                let values = m.values.finish();
                let DataType::Struct(entry_fields) = m.entries_field.data_type().clone() else {
                    unreachable_type()
                };
                let entries = StructArray::new(entry_fields, vec![keys, values], None);
                Arc::new(MapArray::new(
                    m.entries_field.clone(),
                    offsets,
                    entries,
                    nulls,
                    false,
                ))
            }
        }
    }
}

/// Types were checked against the field in `Col::build`; this cannot be reached.
#[cold]
fn unreachable_type() -> ! {
    unreachable!("column type checked at build")
}

fn take_vec<T>(v: &mut Vec<T>) -> Vec<T> {
    let cap = v.capacity();
    std::mem::replace(v, Vec::with_capacity(cap))
}

fn take_offsets(v: &mut Vec<i32>) -> OffsetBuffer<i32> {
    let cap = v.capacity();
    let mut fresh = Vec::with_capacity(cap);
    fresh.push(0);
    OffsetBuffer::new(ScalarBuffer::from(std::mem::replace(v, fresh)))
}

fn finish_utf8(v: &mut VarBuf, nulls: Option<NullBuffer>) -> StringArray {
    let offsets = take_offsets(&mut v.offsets);
    let data = take_vec(&mut v.data);
    StringArray::new(offsets, Buffer::from_vec(data), nulls)
}

impl StructCol {
    pub fn build(
        spec: &StructSpec,
        fields: &Fields,
        ptr: &str,
        names: &mut Vec<Box<str>>,
        mode: BuildMode,
    ) -> Result<StructCol, SchemaError> {
        if fields.len() != spec.fields.len() && mode == BuildMode::Exact {
            let table: Vec<&str> = fields.iter().map(|f| f.name().as_str()).collect();
            let schema: Vec<&str> = spec.fields.iter().map(|f| f.name.as_ref()).collect();
            let extra: Vec<&&str> = table.iter().filter(|n| !schema.contains(n)).collect();
            let missing: Vec<&&str> = schema.iter().filter(|n| !table.contains(n)).collect();
            return Err(mismatch(
                ptr,
                format!(
                    "the table has {} fields, the schema {} (only in the table: {extra:?}; only in the schema: {missing:?})",
                    fields.len(),
                    spec.fields.len()
                ),
            ));
        }
        let mut children = Vec::with_capacity(fields.len());
        for f in &spec.fields {
            let Some((_, af)) = fields.find(&f.name) else {
                return Err(mismatch(
                    ptr,
                    format!("the table has no field {:?}", f.name),
                ));
            };
            let cptr = format!("{ptr}/{}", crate::schema::escape_pointer_token(&f.name));
            children.push(Col::build(f, af, &cptr, names, mode)?);
        }
        // Keep the table's field order for the arrays.
        let mut ordered = Vec::with_capacity(children.len());
        let mut pool: Vec<Option<Col>> = children.into_iter().map(Some).collect();
        for af in fields.iter() {
            let idx = spec.fields.iter().position(|f| &f.name == af.name());
            match idx.and_then(|i| pool[i].take()) {
                Some(c) => ordered.push(c),
                None if idx.is_none() && mode == BuildMode::Evolved => {
                    let cptr = format!("{ptr}/{}", crate::schema::escape_pointer_token(af.name()));
                    ordered.push(Col::absent(af, &cptr, names)?);
                }
                None => return Err(mismatch(ptr, format!("duplicate field {:?}", af.name()))),
            }
        }
        let names_b: Vec<Box<[u8]>> = ordered
            .iter()
            .map(|c| c.field.name().as_bytes().to_vec().into_boxed_slice())
            .collect();
        let plain_names = names_b
            .iter()
            .zip(&ordered)
            .map(|(n, c)| {
                let plain = n.iter().all(|&c| c >= 0x20 && c != b'"' && c != b'\\');
                (plain && !c.meta.absent).then(|| KeyPattern::new(n))
            })
            .collect();
        let n = names_b.len();
        let next_after = (0..=n)
            .map(|i| if i == n { 0 } else { (i + 1) % n.max(1) })
            .collect();
        Ok(StructCol {
            children: ordered,
            names: names_b,
            plain_names,
            next_after,
            spec_additional_forbid: spec.additional == crate::schema::Additional::Forbid,
            min_props: spec.min_props,
            max_props: spec.max_props,
            len: 0,
            fields: fields.clone(),
        })
    }

    pub fn truncate(&mut self, n: usize) {
        for c in &mut self.children {
            c.truncate(n);
        }
        self.len = self.len.min(n);
    }

    pub fn finish(&mut self, nulls: Option<NullBuffer>) -> StructArray {
        let arrays = self.children.iter_mut().map(Col::finish).collect();
        let len = self.len;
        self.len = 0;
        StructArray::try_new_with_length(self.fields.clone(), arrays, nulls, len)
            .unwrap_or_else(|e| panic!("struct arrays are built consistently: {e}"))
    }
}

impl ListCol {
    fn build(
        spec: &ListSpec,
        elem: &FieldRef,
        ptr: &str,
        names: &mut Vec<Box<str>>,
        mode: BuildMode,
    ) -> Result<ListCol, SchemaError> {
        let mut child = Col::build(&spec.element, elem, &format!("{ptr}/element"), names, mode)?;
        child.meta.required = false;
        Ok(ListCol {
            offsets: vec![0],
            child,
            min_items: spec.min_items,
            max_items: spec.max_items,
        })
    }
}

impl MapCol {
    fn build(
        spec: &MapSpec,
        entries: &FieldRef,
        ptr: &str,
        names: &mut Vec<Box<str>>,
        mode: BuildMode,
    ) -> Result<MapCol, SchemaError> {
        let DataType::Struct(kv) = entries.data_type() else {
            return Err(mismatch(ptr, "map entries are not a struct"));
        };
        if kv.len() != 2 || kv[0].data_type() != &DataType::Utf8 {
            return Err(mismatch(ptr, "map entries must be (key: string, value)"));
        }
        let mut values = Col::build(&spec.value, &kv[1], &format!("{ptr}/value"), names, mode)?;
        values.meta.required = false;
        Ok(MapCol {
            offsets: vec![0],
            keys: VarBuf::new(),
            values,
            min_props: spec.min_props,
            max_props: spec.max_props,
            entries_field: entries.clone(),
        })
    }
}

/// A field spec without constraints for the Arrow field `field` (iceberg-rust's Arrow mapping of
/// the Iceberg types floe maps to), for a column built only to hold nulls.
fn spec_of_arrow(field: &FieldRef, ptr: &str) -> Result<FieldSpec, SchemaError> {
    let any_int = |lo: i128, hi: i128| IntSpec {
        lo,
        hi,
        multiple_of: None,
    };
    let ty = match field.data_type() {
        DataType::Boolean => FieldType::Boolean,
        DataType::Int32 => FieldType::Int(any_int(i32::MIN as i128, i32::MAX as i128)),
        DataType::Int64 => FieldType::Long(any_int(i64::MIN as i128, i64::MAX as i128)),
        DataType::Float32 => FieldType::Float(NumSpec::default()),
        DataType::Float64 => FieldType::Double(NumSpec::default()),
        DataType::Decimal128(precision, scale) if *scale >= 0 => FieldType::Decimal {
            precision: u32::from(*precision),
            scale: *scale as u32,
            spec: NumSpec::default(),
        },
        DataType::Utf8 => FieldType::String(StrSpec::default()),
        DataType::Timestamp(TimeUnit::Microsecond, Some(_)) => {
            FieldType::Timestamptz(StrSpec::default())
        }
        DataType::Date32 => FieldType::Date(StrSpec::default()),
        DataType::Time64(TimeUnit::Microsecond) => FieldType::Time(StrSpec::default()),
        DataType::FixedSizeBinary(16) => FieldType::Uuid(StrSpec::default()),
        DataType::FixedSizeBinary(n) if *n > 0 => FieldType::Fixed(*n as u32),
        DataType::Timestamp(TimeUnit::Microsecond, None) => {
            FieldType::Timestamp(StrSpec::default())
        }
        DataType::LargeBinary => FieldType::Binary(StrSpec::default()),
        DataType::Struct(fields) => FieldType::Struct(StructSpec {
            fields: fields
                .iter()
                .map(|f| spec_of_arrow(f, ptr))
                .collect::<Result<_, _>>()?,
            additional: crate::schema::Additional::Drop,
            min_props: None,
            max_props: None,
        }),
        DataType::List(elem) => FieldType::List(ListSpec {
            element: Box::new(spec_of_arrow(elem, ptr)?),
            min_items: None,
            max_items: None,
        }),
        DataType::Map(entries, _) => {
            let DataType::Struct(kv) = entries.data_type() else {
                return Err(mismatch(ptr, "map entries are not a struct"));
            };
            if kv.len() != 2 {
                return Err(mismatch(ptr, "map entries must be (key, value)"));
            }
            FieldType::Map(MapSpec {
                value: Box::new(spec_of_arrow(&kv[1], ptr)?),
                key_id: 0,
                min_props: None,
                max_props: None,
            })
        }
        other => {
            return Err(mismatch(
                ptr,
                format!("the table's column has type {other}, which floe does not write"),
            ))
        }
    };
    Ok(FieldSpec {
        id: 0,
        name: field.name().clone(),
        required: !field.is_nullable(),
        admits_null: field.is_nullable(),
        is_partition: false,
        ty,
        doc: None,
        has_default: false,
    })
}
