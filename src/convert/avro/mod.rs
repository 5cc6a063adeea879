//! The Avro decoder: one record's Avro binary encoding (Avro specification 1.11, "Binary
//! Encoding"), read in one pass straight into the table's column buffers, driven by the decode
//! plan of the record's writer schema resolved against the table's reader schema
//! ([`crate::schema::avro`]). No value tree is built per record.
//!
//! Codes (docs/schema-mapping.md "Avro → Iceberg"): bytes that are not a value of the writer
//! schema (truncated, a varint longer than 10 bytes or out of `int` range, a negative length,
//! invalid UTF-8, a union or enum index out of range, bytes left after the record) are
//! `DESERIALIZATION_ERROR`; a value the column cannot hold (a decimal beyond its precision, a
//! `timestamp-millis` beyond the µs range, a time outside the day, a malformed uuid string, an
//! enum symbol the reader lacks without a default) is `VALUE_OUT_OF_RANGE`; null in a required
//! column is `MISSING_REQUIRED_FIELD` (`MISSING_PARTITION_VALUE` for the partition field).

use super::column::{Col, Data, StructCol};
use crate::model::{DlqCode, DlqReason};
use crate::schema::avro::{AvroWriter, Node, RecordPlan};

/// Decodes one record of writer schema `writer` from `payload` (the bytes after the wire
/// framing) into one row of `root`; returns the partition field's value in µs since
/// 1970-01-01T00:00Z (`i64::MIN` when the schema has no partition field). On error the caller
/// truncates every column back.
pub(crate) fn decode_record(
    writer: &AvroWriter,
    payload: &[u8],
    root: &mut StructCol,
    _names: &[Box<str>],
) -> Result<i64, DlqReason> {
    let mut r = Reader {
        buf: payload,
        pos: 0,
    };
    let mut partition = i64::MIN;
    record(&writer.root, &mut r, root, Some(&mut partition)).map_err(Fail::into_reason)?;
    if r.pos != payload.len() {
        return Err(DlqReason::record(
            DlqCode::DeserializationError,
            format!(
                "{} bytes left after the Avro record ({} bytes)",
                payload.len() - r.pos,
                payload.len()
            ),
        ));
    }
    Ok(partition)
}

/// A failed value: the code, what is wrong, and the path to it (innermost segment first).
struct Fail {
    code: DlqCode,
    message: String,
    path: Vec<String>,
}

impl Fail {
    fn new(code: DlqCode, message: impl Into<String>) -> Fail {
        Fail {
            code,
            message: message.into(),
            path: Vec::new(),
        }
    }

    fn bad(message: impl Into<String>) -> Fail {
        Fail::new(DlqCode::DeserializationError, message)
    }

    fn range(message: impl Into<String>) -> Fail {
        Fail::new(DlqCode::ValueOutOfRange, message)
    }

    fn at(mut self, segment: impl Into<String>) -> Fail {
        self.path.push(segment.into());
        self
    }

    fn into_reason(self) -> DlqReason {
        let field = self
            .path
            .iter()
            .rev()
            .map(|s| format!("/{}", crate::schema::escape_pointer_token(s)))
            .collect();
        DlqReason {
            code: self.code,
            field,
            message: self.message,
        }
    }
}

type Res<T> = Result<T, Fail>;

/// The input, read front to back.
struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    fn take(&mut self, n: usize) -> Res<&'a [u8]> {
        if n > self.remaining() {
            return Err(Fail::bad(format!(
                "truncated: {n} bytes needed at byte {}, {} left",
                self.pos,
                self.remaining()
            )));
        }
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    /// A base-128 varint of at most `max_bytes` bytes.
    // Kept over prost's decode_varint: Avro's `int` stops at 5 bytes, and the error names the byte.
    #[inline]
    fn varint(&mut self, max_bytes: usize) -> Res<u64> {
        let mut v = 0u64;
        for i in 0..max_bytes {
            let Some(&b) = self.buf.get(self.pos) else {
                return Err(Fail::bad(format!("truncated varint at byte {}", self.pos)));
            };
            self.pos += 1;
            v |= u64::from(b & 0x7f) << (7 * i);
            if b & 0x80 == 0 {
                if i == 9 && b > 1 {
                    break;
                }
                return Ok(v);
            }
        }
        Err(Fail::bad(format!(
            "varint longer than {max_bytes} bytes or out of range at byte {}",
            self.pos
        )))
    }

    /// `long`: zigzag varint, 64 bits.
    #[inline]
    fn long(&mut self) -> Res<i64> {
        let v = self.varint(10)?;
        Ok((v >> 1) as i64 ^ -((v & 1) as i64))
    }

    /// `int`: zigzag varint, 32 bits.
    #[inline]
    fn int(&mut self) -> Res<i32> {
        let v = self.varint(5)?;
        let v = u32::try_from(v).map_err(|_| Fail::bad("int varint out of 32-bit range"))?;
        Ok((v >> 1) as i32 ^ -((v & 1) as i32))
    }

    /// A length (`long`, not negative, not beyond the input).
    fn len(&mut self) -> Res<usize> {
        let n = self.long()?;
        usize::try_from(n)
            .ok()
            .filter(|n| *n <= self.remaining())
            .ok_or_else(|| {
                Fail::bad(format!(
                    "length {n} at byte {} is negative or beyond the input",
                    self.pos
                ))
            })
    }

    fn bytes(&mut self) -> Res<&'a [u8]> {
        let n = self.len()?;
        self.take(n)
    }

    fn str(&mut self) -> Res<&'a str> {
        let b = self.bytes()?;
        std::str::from_utf8(b).map_err(|e| Fail::bad(format!("string is not UTF-8: {e}")))
    }

    fn float(&mut self) -> Res<f32> {
        let b = self.take(4)?;
        Ok(f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn double(&mut self) -> Res<f64> {
        let mut a = [0u8; 8];
        a.copy_from_slice(self.take(8)?);
        Ok(f64::from_le_bytes(a))
    }

    /// The item count of the next array/map block (0: the end), after a negative count's byte
    /// size. Every item is at least one byte (the mapper refuses zero-size types), so a count
    /// beyond the input is refused before anything is appended.
    fn block(&mut self) -> Res<usize> {
        let mut n = self.long()?;
        if n < 0 {
            n = n
                .checked_neg()
                .ok_or_else(|| Fail::bad("block count out of range"))?;
            let size = self.long()?;
            if size < 0 {
                return Err(Fail::bad(format!("negative block size {size}")));
            }
        }
        let n = n as u64;
        if n > self.remaining() as u64 {
            return Err(Fail::bad(format!(
                "block of {n} items at byte {} is longer than the input",
                self.pos
            )));
        }
        Ok(n as usize)
    }
}

/// Reads one record of plan `p` into `s` (one row). `partition` is `Some` at the top level.
fn record(
    p: &RecordPlan,
    r: &mut Reader<'_>,
    s: &mut StructCol,
    mut partition: Option<&mut i64>,
) -> Res<()> {
    let row = s.len;
    for f in &p.fields {
        let Some(hint) = f.target else {
            skip(&f.node, r).map_err(|e| e.at(&*f.name))?;
            continue;
        };
        let Some(i) = s.lookup(f.name.as_bytes(), hint) else {
            return Err(
                Fail::new(DlqCode::SchemaMismatch, "the table has no such column").at(&*f.name),
            );
        };
        let col = &mut s.children[i];
        if f.is_partition {
            let before = col.len();
            value(&f.node, r, col).map_err(|e| {
                let e = e.at(&*f.name);
                if e.code == DlqCode::MissingRequiredField {
                    Fail {
                        code: DlqCode::MissingPartitionValue,
                        ..e
                    }
                } else {
                    e
                }
            })?;
            if let (Some(out), Data::Timestamptz(v, _)) = (partition.as_deref_mut(), &col.data) {
                if col.len() > before {
                    *out = v[before];
                }
            }
        } else {
            value(&f.node, r, col).map_err(|e| e.at(&*f.name))?;
        }
    }
    for d in &p.defaults {
        let Some(i) = s.lookup(d.name.as_bytes(), d.target) else {
            continue;
        };
        let mut dr = Reader {
            buf: &d.bytes,
            pos: 0,
        };
        value(&d.node, &mut dr, &mut s.children[i]).map_err(|e| e.at(&*d.name))?;
    }
    for (c, name) in s.children.iter_mut().zip(&s.names) {
        if c.len() == row {
            null(c).map_err(|e| e.at(String::from_utf8_lossy(name)))?;
        }
    }
    s.len += 1;
    Ok(())
}

/// Appends null to `c`; refused when the column is required.
fn null(c: &mut Col) -> Res<()> {
    if c.validity.is_none() {
        return Err(Fail::new(
            DlqCode::MissingRequiredField,
            "null or absent in a required column",
        ));
    }
    c.push_null();
    Ok(())
}

/// Marks the value just appended to `c` as valid.
#[inline]
fn valid(c: &mut Col) {
    if let Some(v) = &mut c.validity {
        v.append(true);
    }
}

/// A column whose type the plan cannot fill (the table differs from the mapped reader schema).
#[cold]
fn mismatch(c: &Col, what: &str) -> Fail {
    Fail::new(
        DlqCode::TypeMismatch,
        format!(
            "an Avro {what} cannot be stored in the table's {} column",
            c.field.data_type()
        ),
    )
}

/// Reads one value of `n` into `c`.
fn value(n: &Node, r: &mut Reader<'_>, c: &mut Col) -> Res<()> {
    match n {
        Node::Optional {
            null_index,
            value: v,
        } => {
            let b = r.long()?;
            if b == i64::from(*null_index) {
                null(c)
            } else if b == i64::from(1 - *null_index) {
                value(v, r, c)
            } else {
                Err(Fail::bad(format!("union branch {b} of a 2-branch union")))
            }
        }
        Node::Record(p) => {
            let Data::Struct(s) = &mut c.data else {
                return Err(mismatch(c, "record"));
            };
            record(p, r, s, None)?;
            valid(c);
            Ok(())
        }
        Node::Array(item) => {
            let Data::List(l) = &mut c.data else {
                return Err(mismatch(c, "array"));
            };
            let mut k = 0usize;
            loop {
                let n = r.block()?;
                if n == 0 {
                    break;
                }
                for _ in 0..n {
                    value(item, r, &mut l.child).map_err(|e| e.at(k.to_string()))?;
                    k += 1;
                }
            }
            let end = l.child.len() as i32;
            l.offsets.push(end);
            valid(c);
            Ok(())
        }
        Node::Map(item) => {
            let Data::Map(m) = &mut c.data else {
                return Err(mismatch(c, "map"));
            };
            loop {
                let n = r.block()?;
                if n == 0 {
                    break;
                }
                for _ in 0..n {
                    let key = r.str()?;
                    m.keys.data.extend_from_slice(key.as_bytes());
                    m.keys.commit();
                    value(item, r, &mut m.values).map_err(|e| e.at(key))?;
                }
            }
            let end = m.keys.len() as i32;
            m.offsets.push(end);
            valid(c);
            Ok(())
        }
        _ => {
            scalar(n, r, c)?;
            valid(c);
            Ok(())
        }
    }
}

/// Reads one scalar of `n` into `c`'s data (validity is the caller's).
fn scalar(n: &Node, r: &mut Reader<'_>, c: &mut Col) -> Res<()> {
    match (n, &mut c.data) {
        (Node::Bool, Data::Bool(b)) => match r.take(1)?[0] {
            0 => b.append(false),
            1 => b.append(true),
            x => return Err(Fail::bad(format!("boolean byte {x}"))),
        },
        (Node::Int, Data::Int(v, _)) => v.push(r.int()?),
        (Node::Int, Data::Long(v, _)) => v.push(r.int()?.into()),
        (Node::Int, Data::Float(v)) => v.push(r.int()? as f32),
        (Node::Int, Data::Double(v, _)) => v.push(r.int()?.into()),
        (Node::Long, Data::Long(v, _)) => v.push(r.long()?),
        (Node::Long, Data::Float(v)) => v.push(r.long()? as f32),
        (Node::Long, Data::Double(v, _)) => v.push(r.long()? as f64),
        (Node::Float, Data::Float(v)) => v.push(r.float()?),
        (Node::Float, Data::Double(v, _)) => v.push(r.float()?.into()),
        (Node::Double, Data::Double(v, _)) => v.push(r.double()?),
        (Node::Str, Data::Str(v, _)) => {
            v.data.extend_from_slice(r.str()?.as_bytes());
            v.commit();
        }
        (Node::Str, Data::Binary(v, _)) => {
            v.data.extend_from_slice(r.str()?.as_bytes());
            v.commit();
        }
        (Node::Bytes, Data::Binary(v, _)) => {
            v.data.extend_from_slice(r.bytes()?);
            v.commit();
        }
        (Node::Bytes, Data::Str(v, _)) => {
            v.data.extend_from_slice(r.str()?.as_bytes());
            v.commit();
        }
        (Node::Fixed(len), Data::Fixed(v, n)) if *len == *n as usize => {
            v.extend_from_slice(r.take(*len)?);
        }
        (Node::Enum(symbols), Data::Str(v, _)) => {
            let i = r.int()?;
            let Some(s) = usize::try_from(i).ok().and_then(|i| symbols.get(i)) else {
                return Err(Fail::bad(format!(
                    "enum index {i} of {} symbols",
                    symbols.len()
                )));
            };
            let Some(s) = s else {
                return Err(Fail::range(format!(
                    "enum symbol {i} of the writer is not a symbol of the reader, which has no default"
                )));
            };
            v.data.extend_from_slice(s.as_bytes());
            v.commit();
        }
        (Node::Decimal(fixed), Data::Decimal(v, plan)) => {
            let b = match fixed {
                Some(len) => r.take(*len)?,
                None => r.bytes()?,
            };
            let x = twos_complement(b)?;
            if x.unsigned_abs() >= 10u128.pow(plan.precision) {
                return Err(Fail::range(format!(
                    "decimal of more than {} digits",
                    plan.precision
                )));
            }
            v.push(x);
        }
        (Node::UuidStr, Data::Uuid(v, _)) => {
            let s = r.str()?;
            let u = parse_uuid(s.as_bytes()).ok_or_else(|| {
                Fail::range(format!("{s:?} is not a uuid (8-4-4-4-12 hex digits)"))
            })?;
            v.extend_from_slice(&u);
        }
        (Node::UuidFixed, Data::Uuid(v, _)) => v.extend_from_slice(r.take(16)?),
        (Node::Date, Data::Date(v, _)) => v.push(r.int()?),
        (Node::TimeMillis, Data::Time(v, _)) => {
            let ms = r.int()?;
            if !(0..86_400_000).contains(&ms) {
                return Err(Fail::range(format!("time-millis {ms} is outside the day")));
            }
            v.push(i64::from(ms) * 1000);
        }
        (Node::TimeMicros, Data::Time(v, _)) => {
            let us = r.long()?;
            if !(0..86_400_000_000).contains(&us) {
                return Err(Fail::range(format!("time-micros {us} is outside the day")));
            }
            v.push(us);
        }
        (Node::TimestampMillis, Data::Timestamptz(v, _) | Data::Timestamp(v)) => {
            let ms = r.long()?;
            let us = ms.checked_mul(1000).ok_or_else(|| {
                Fail::range(format!("timestamp-millis {ms} is beyond the µs range"))
            })?;
            v.push(us);
        }
        (Node::TimestampMicros, Data::Timestamptz(v, _) | Data::Timestamp(v)) => v.push(r.long()?),
        _ => return Err(mismatch(c, &format!("{n:?}"))),
    }
    Ok(())
}

/// A big-endian two's-complement integer (Avro `decimal`'s unscaled value) as i128.
fn twos_complement(b: &[u8]) -> Res<i128> {
    let negative = b.first().is_some_and(|x| x & 0x80 != 0);
    let sign = if negative { 0xff } else { 0 };
    let (high, low) = b.split_at(b.len().saturating_sub(16));
    if high.iter().any(|&x| x != sign) || (!high.is_empty() && (low[0] & 0x80 != 0) != negative) {
        return Err(Fail::range("decimal beyond 38 digits"));
    }
    let mut a = [sign; 16];
    a[16 - low.len()..].copy_from_slice(low);
    Ok(i128::from_be_bytes(a))
}

/// The 16 bytes of a uuid's text form `8-4-4-4-12` (hex, either case).
fn parse_uuid(s: &[u8]) -> Option<[u8; 16]> {
    if s.len() != 36 || [8, 13, 18, 23].iter().any(|&i| s[i] != b'-') {
        return None;
    }
    let mut out = [0u8; 16];
    let mut digits = s.iter().filter(|&&c| c != b'-');
    for o in &mut out {
        let hi = (*digits.next()? as char).to_digit(16)?;
        let lo = (*digits.next()? as char).to_digit(16)?;
        *o = (hi * 16 + lo) as u8;
    }
    Some(out)
}

/// Reads past one value of `n` (a writer field the reader lacks).
fn skip(n: &Node, r: &mut Reader<'_>) -> Res<()> {
    match n {
        Node::Bool => {
            r.take(1)?;
        }
        Node::Int | Node::Date | Node::TimeMillis | Node::Enum(_) => {
            r.int()?;
        }
        Node::Long | Node::TimeMicros | Node::TimestampMillis | Node::TimestampMicros => {
            r.long()?;
        }
        Node::Float => {
            r.take(4)?;
        }
        Node::Double => {
            r.take(8)?;
        }
        Node::Str | Node::UuidStr => {
            r.str()?;
        }
        Node::Bytes | Node::Decimal(None) => {
            r.bytes()?;
        }
        Node::Fixed(len) | Node::Decimal(Some(len)) => {
            r.take(*len)?;
        }
        Node::UuidFixed => {
            r.take(16)?;
        }
        Node::Null => {}
        Node::Union(branches) => {
            let b = r.long()?;
            let Some(branch) = usize::try_from(b).ok().and_then(|b| branches.get(b)) else {
                return Err(Fail::bad(format!(
                    "union branch {b} of a {}-branch union",
                    branches.len()
                )));
            };
            skip(branch, r)?;
        }
        Node::Optional { null_index, value } => {
            let b = r.long()?;
            if b == i64::from(1 - *null_index) {
                skip(value, r)?;
            } else if b != i64::from(*null_index) {
                return Err(Fail::bad(format!("union branch {b} of a 2-branch union")));
            }
        }
        Node::Record(p) => {
            for f in &p.fields {
                skip(&f.node, r).map_err(|e| e.at(&*f.name))?;
            }
        }
        Node::Array(item) => loop {
            let n = r.block()?;
            if n == 0 {
                break;
            }
            for _ in 0..n {
                skip(item, r)?;
            }
        },
        Node::Map(item) => loop {
            let n = r.block()?;
            if n == 0 {
                break;
            }
            for _ in 0..n {
                r.str()?;
                skip(item, r)?;
            }
        },
    }
    Ok(())
}

pub(crate) mod route;

#[cfg(test)]
mod tests;
