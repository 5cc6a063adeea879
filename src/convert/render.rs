//! Rows of a converted batch as JSON, in the Iceberg spec's JSON single-value serialization (Iceberg
//! table spec, Appendix D): `timestamptz` as `2026-07-09T20:00:00.000000+00:00`, `timestamp` (no
//! zone) as `2026-07-09T20:00:00.000000`, `date` as `YYYY-MM-DD`, `time` as `HH:MM:SS.ffffff`,
//! `decimal` as a string with exactly `scale` fractional digits, `float` and `double` as numbers
//! (`float` by its shortest `f32` digits; NaN and infinities as null), `binary` and `fixed(L)` as
//! lowercase hex, `uuid` lowercase hyphenated; structs as objects by field name, lists as arrays,
//! maps as objects. Arrow holds `uuid` and `fixed(16)` alike (`FixedSizeBinary(16)`): both render
//! as a uuid. Used by `floe records check` (a user's preview) and by tests —
//! never on the hot path.

use arrow_array::cast::AsArray;
use arrow_array::types::{
    Date32Type, Decimal128Type, Float32Type, Float64Type, Int32Type, Int64Type,
    Time64MicrosecondType, TimestampMicrosecondType,
};
use arrow_array::{Array, RecordBatch};
use arrow_schema::{DataType, TimeUnit};
use serde_json::{Map, Value};

use super::time::{format_date, format_time, format_timestamp, format_timestamptz};

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

/// `x` as a JSON number; NaN and infinities (which JSON cannot hold) as null.
fn number(x: f64) -> Value {
    serde_json::Number::from_f64(x)
        .map(Value::Number)
        .unwrap_or(Value::Null)
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
        DataType::Float32 => {
            // The shortest digits that read back as this f32 (1.1, not 1.100000023841858).
            let x = a.as_primitive::<Float32Type>().value(i);
            number(x.to_string().parse::<f64>().unwrap_or(f64::NAN))
        }
        DataType::Float64 => number(a.as_primitive::<Float64Type>().value(i)),
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
        DataType::FixedSizeBinary(_) => Value::String(hex(a.as_fixed_size_binary().value(i))),
        DataType::Timestamp(TimeUnit::Microsecond, Some(_)) => Value::String(format_timestamptz(
            a.as_primitive::<TimestampMicrosecondType>().value(i),
        )),
        DataType::Timestamp(TimeUnit::Microsecond, None) => Value::String(format_timestamp(
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

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow_array::{
        ArrayRef, FixedSizeBinaryArray, Float32Array, Float64Array, TimestampMicrosecondArray,
    };
    use serde_json::json;

    use super::*;

    fn rendered(a: ArrayRef) -> Vec<Value> {
        (0..a.len()).map(|i| value_to_json(a.as_ref(), i)).collect()
    }

    #[test]
    fn float_columns_render_their_shortest_digits() {
        let a = Arc::new(Float32Array::from(vec![
            Some(1.1),
            Some(-0.5),
            Some(f32::MAX),
            None,
            Some(f32::NAN),
        ]));
        assert_eq!(
            rendered(a),
            [
                json!(1.1),
                json!(-0.5),
                json!(3.4028235e38),
                Value::Null,
                Value::Null
            ]
        );
        let d = Arc::new(Float64Array::from(vec![Some(1.1), Some(f64::INFINITY)]));
        assert_eq!(rendered(d), [json!(1.1), Value::Null]);
    }

    #[test]
    fn fixed_columns_render_as_hex_and_fixed_16_as_a_uuid() {
        let three = FixedSizeBinaryArray::try_from_sparse_iter_with_size(
            [Some(vec![0x01u8, 0xab, 0xff]), None].into_iter(),
            3,
        )
        .unwrap();
        assert_eq!(rendered(Arc::new(three)), [json!("01abff"), Value::Null]);
        let one = FixedSizeBinaryArray::try_from_iter([vec![0u8]].into_iter()).unwrap();
        assert_eq!(rendered(Arc::new(one)), [json!("00")]);
        let u = uuid::Uuid::parse_str("67e55044-10b1-426f-9247-bb680e5fe0c8").unwrap();
        let sixteen =
            FixedSizeBinaryArray::try_from_iter([u.as_bytes().to_vec()].into_iter()).unwrap();
        assert_eq!(
            rendered(Arc::new(sixteen)),
            [json!("67e55044-10b1-426f-9247-bb680e5fe0c8")]
        );
    }

    #[test]
    fn timestamps_without_zone_render_without_offset() {
        let local =
            TimestampMicrosecondArray::from(vec![Some(-1), Some(1_783_627_200_000_001), None]);
        assert_eq!(
            rendered(Arc::new(local)),
            [
                json!("1969-12-31T23:59:59.999999"),
                json!("2026-07-09T20:00:00.000001"),
                Value::Null
            ]
        );
        let utc = TimestampMicrosecondArray::from(vec![0]).with_timezone("+00:00");
        assert_eq!(
            rendered(Arc::new(utc)),
            [json!("1970-01-01T00:00:00.000000+00:00")]
        );
    }
}
