//! Rows of a converted batch as JSON, in the Iceberg spec's JSON single-value serialization (Iceberg
//! table spec, Appendix D): `timestamptz` as `2026-07-09T20:00:00.000000+00:00`, `date` as
//! `YYYY-MM-DD`, `time` as `HH:MM:SS.ffffff`, `decimal` as a string with exactly `scale` fractional
//! digits, `binary` as lowercase hex, `uuid` lowercase hyphenated; structs as objects by field name,
//! lists as arrays, maps as objects. Used by `floe records check` (a user's preview) and by tests —
//! never on the hot path.

use arrow_array::cast::AsArray;
use arrow_array::types::{
    Date32Type, Decimal128Type, Float64Type, Int32Type, Int64Type, Time64MicrosecondType,
    TimestampMicrosecondType,
};
use arrow_array::{Array, RecordBatch};
use arrow_schema::{DataType, TimeUnit};
use serde_json::{Map, Value};

use super::time::{format_date, format_time, format_timestamptz};

/// Row `row` of `batch` as a JSON object by column name.
pub fn row_to_json(batch: &RecordBatch, row: usize) -> Map<String, Value> {
    let mut m = Map::new();
    for (f, col) in batch.schema().fields().iter().zip(batch.columns()) {
        m.insert(f.name().clone(), value_to_json(col.as_ref(), row));
    }
    m
}

/// Decimal text with exactly `scale` fractional digits.
pub fn format_decimal(v: i128, scale: u32) -> String {
    let neg = v < 0;
    let digits = v.unsigned_abs().to_string();
    let scale = scale as usize;
    let mut s = String::new();
    if neg {
        s.push('-');
    }
    if scale == 0 {
        s.push_str(&digits);
    } else if digits.len() > scale {
        s.push_str(&digits[..digits.len() - scale]);
        s.push('.');
        s.push_str(&digits[digits.len() - scale..]);
    } else {
        s.push_str("0.");
        for _ in 0..scale - digits.len() {
            s.push('0');
        }
        s.push_str(&digits);
    }
    s
}

fn hex(b: &[u8]) -> String {
    let mut s = String::with_capacity(b.len() * 2);
    for x in b {
        s.push_str(&format!("{x:02x}"));
    }
    s
}

/// Value `i` of `a` as JSON (null when null).
pub fn value_to_json(a: &dyn Array, i: usize) -> Value {
    if a.is_null(i) {
        return Value::Null;
    }
    match a.data_type() {
        DataType::Boolean => Value::Bool(a.as_boolean().value(i)),
        DataType::Int32 => Value::from(a.as_primitive::<Int32Type>().value(i)),
        DataType::Int64 => Value::from(a.as_primitive::<Int64Type>().value(i)),
        DataType::Float64 => {
            let x = a.as_primitive::<Float64Type>().value(i);
            serde_json::Number::from_f64(x)
                .map(Value::Number)
                .unwrap_or(Value::Null)
        }
        DataType::Decimal128(_, s) => Value::String(format_decimal(
            a.as_primitive::<Decimal128Type>().value(i),
            (*s).max(0) as u32,
        )),
        DataType::Utf8 => Value::String(a.as_string::<i32>().value(i).to_string()),
        DataType::LargeBinary => Value::String(hex(a.as_binary::<i64>().value(i))),
        DataType::FixedSizeBinary(16) => {
            let b = a.as_fixed_size_binary().value(i);
            let mut u = [0u8; 16];
            u.copy_from_slice(b);
            Value::String(uuid::Uuid::from_bytes(u).to_string())
        }
        DataType::Timestamp(TimeUnit::Microsecond, _) => Value::String(format_timestamptz(
            a.as_primitive::<TimestampMicrosecondType>().value(i),
        )),
        DataType::Date32 => Value::String(format_date(a.as_primitive::<Date32Type>().value(i))),
        DataType::Time64(TimeUnit::Microsecond) => Value::String(format_time(
            a.as_primitive::<Time64MicrosecondType>().value(i),
        )),
        DataType::Struct(fields) => {
            let s = a.as_struct();
            let mut m = Map::new();
            for (f, c) in fields.iter().zip(s.columns()) {
                m.insert(f.name().clone(), value_to_json(c.as_ref(), i));
            }
            Value::Object(m)
        }
        DataType::List(_) => {
            let l = a.as_list::<i32>();
            let v = l.value(i);
            Value::Array((0..v.len()).map(|k| value_to_json(v.as_ref(), k)).collect())
        }
        DataType::Map(_, _) => {
            let m = a.as_map();
            let entries = m.value(i);
            let keys = entries.column(0);
            let vals = entries.column(1);
            let mut o = Map::new();
            for k in 0..entries.len() {
                let key = match value_to_json(keys.as_ref(), k) {
                    Value::String(s) => s,
                    other => other.to_string(),
                };
                o.insert(key, value_to_json(vals.as_ref(), k));
            }
            Value::Object(o)
        }
        other => Value::String(format!("<unsupported type {other}>")),
    }
}
