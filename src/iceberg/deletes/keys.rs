//! Row keys of an upsert table, as 128-bit hashes, and the staged key files a worker hands the
//! committer for the keys its batch deletes.
//!
//! A key is the tuple of the table's key columns (`destination.key`, the table's identifier
//! fields). The committer's key index maps each live key to its row (data file, position); it
//! holds [`KeyHash`]es, not the values: 16 bytes per key whatever the key's width. Two keys
//! collide with a probability of about n²/2¹²⁹ (10⁻²³ for 100 million keys), far below any
//! storage fault, so a hash names a key.
//!
//! The hash is computed from Arrow columns, the same way wherever the key comes from: the rows
//! a worker converted, the key columns the committer reads back from a Parquet data file, the
//! key of a deleted row. Each column value is encoded canonically before hashing, so the widths
//! Arrow happens to use do not matter (`Utf8` and `LargeUtf8`, `Int32` and `Int64` after an
//! `int` → `long` promotion, a timestamp's time zone annotation):
//!
//! ```text
//!  per column:  null -> 0x00
//!               bool -> 0x01 b
//!               int, long, date, time, timestamp -> 0x02 i64 LE (the stored value)
//!               decimal -> 0x03 i128 LE (the unscaled value)
//!               string, binary, uuid, fixed -> 0x04 u32 LE length, bytes
//!  hash = XXH3-128 (seed 0) of the concatenation
//! ```
//!
//! Float and double columns cannot be keys (Iceberg spec, "Identifier Field IDs"): refused.
//!
//! A key file (`.keys`) is `FLK1`, a u64 LE count, then each hash as u128 LE.

use arrow_array::cast::AsArray;
use arrow_array::types::{
    Date32Type, Decimal128Type, Int16Type, Int32Type, Int64Type, Int8Type, Time64MicrosecondType,
    TimestampMicrosecondType, TimestampMillisecondType, TimestampNanosecondType,
    TimestampSecondType,
};
use arrow_array::{Array, ArrayRef};
use arrow_schema::{DataType, TimeUnit};
use iceberg::io::FileIO;
use iceberg::{Error, ErrorKind};

/// The 128-bit hash of one row's key (XXH3-128 of its canonical encoding).
pub type KeyHash = u128;

/// The first bytes of a key file.
const KEY_FILE_MAGIC: &[u8; 4] = b"FLK1";

/// Why key columns cannot be hashed.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    /// A column of a type that cannot be a key (float, double, nested).
    #[error("a key column cannot be of type {0}")]
    UnsupportedType(DataType),
    /// The key columns have different lengths.
    #[error("key columns of different lengths ({0} and {1} rows)")]
    Ragged(usize, usize),
    /// No key column given.
    #[error("no key column")]
    NoColumns,
}

/// Whether an Arrow type can be a key column ([`key_hashes`] accepts it).
pub fn is_key_type(t: &DataType) -> bool {
    matches!(
        t,
        DataType::Boolean
            | DataType::Int8
            | DataType::Int16
            | DataType::Int32
            | DataType::Int64
            | DataType::Date32
            | DataType::Time64(TimeUnit::Microsecond)
            | DataType::Timestamp(_, _)
            | DataType::Decimal128(_, _)
            | DataType::Utf8
            | DataType::LargeUtf8
            | DataType::Utf8View
            | DataType::Binary
            | DataType::LargeBinary
            | DataType::BinaryView
            | DataType::FixedSizeBinary(_)
    )
}

/// The key hash of every row of `columns` (the key columns, in the key's order; all of one
/// length), in row order.
///
/// Errors: [`KeyError`] for a column type that cannot be a key, ragged or no columns.
pub fn key_hashes(columns: &[ArrayRef]) -> Result<Vec<KeyHash>, KeyError> {
    let first = columns.first().ok_or(KeyError::NoColumns)?;
    let rows = first.len();
    for c in columns {
        if c.len() != rows {
            return Err(KeyError::Ragged(rows, c.len()));
        }
        if !is_key_type(c.data_type()) {
            return Err(KeyError::UnsupportedType(c.data_type().clone()));
        }
    }
    let mut buf = Vec::with_capacity(64);
    let mut out = Vec::with_capacity(rows);
    for row in 0..rows {
        buf.clear();
        for c in columns {
            encode(c.as_ref(), row, &mut buf);
        }
        out.push(twox_hash::XxHash3_128::oneshot(&buf));
    }
    Ok(out)
}

/// Appends the canonical encoding of `column[row]` (the type was checked by [`is_key_type`]).
fn encode(column: &dyn Array, row: usize, buf: &mut Vec<u8>) {
    if column.is_null(row) {
        buf.push(0);
        return;
    }
    let int = |buf: &mut Vec<u8>, v: i64| {
        buf.push(2);
        buf.extend_from_slice(&v.to_le_bytes());
    };
    let bytes = |buf: &mut Vec<u8>, v: &[u8]| {
        buf.push(4);
        buf.extend_from_slice(&(v.len() as u32).to_le_bytes());
        buf.extend_from_slice(v);
    };
    match column.data_type() {
        DataType::Boolean => buf.extend_from_slice(&[1, column.as_boolean().value(row) as u8]),
        DataType::Int8 => int(buf, column.as_primitive::<Int8Type>().value(row).into()),
        DataType::Int16 => int(buf, column.as_primitive::<Int16Type>().value(row).into()),
        DataType::Int32 => int(buf, column.as_primitive::<Int32Type>().value(row).into()),
        DataType::Int64 => int(buf, column.as_primitive::<Int64Type>().value(row)),
        DataType::Date32 => int(buf, column.as_primitive::<Date32Type>().value(row).into()),
        DataType::Time64(_) => int(
            buf,
            column.as_primitive::<Time64MicrosecondType>().value(row),
        ),
        DataType::Timestamp(unit, _) => int(
            buf,
            match unit {
                TimeUnit::Second => column.as_primitive::<TimestampSecondType>().value(row),
                TimeUnit::Millisecond => {
                    column.as_primitive::<TimestampMillisecondType>().value(row)
                }
                TimeUnit::Microsecond => {
                    column.as_primitive::<TimestampMicrosecondType>().value(row)
                }
                TimeUnit::Nanosecond => column.as_primitive::<TimestampNanosecondType>().value(row),
            },
        ),
        DataType::Decimal128(_, _) => {
            buf.push(3);
            buf.extend_from_slice(
                &column
                    .as_primitive::<Decimal128Type>()
                    .value(row)
                    .to_le_bytes(),
            );
        }
        DataType::Utf8 => bytes(buf, column.as_string::<i32>().value(row).as_bytes()),
        DataType::LargeUtf8 => bytes(buf, column.as_string::<i64>().value(row).as_bytes()),
        DataType::Utf8View => bytes(buf, column.as_string_view().value(row).as_bytes()),
        DataType::Binary => bytes(buf, column.as_binary::<i32>().value(row)),
        DataType::LargeBinary => bytes(buf, column.as_binary::<i64>().value(row)),
        DataType::BinaryView => bytes(buf, column.as_binary_view().value(row)),
        DataType::FixedSizeBinary(_) => bytes(buf, column.as_fixed_size_binary().value(row)),
        other => unreachable!("key type {other} passed is_key_type"),
    }
}

/// The bytes of a key file holding `keys`.
pub fn encode_key_file(keys: &[KeyHash]) -> Vec<u8> {
    let mut out = Vec::with_capacity(12 + keys.len() * 16);
    out.extend_from_slice(KEY_FILE_MAGIC);
    out.extend_from_slice(&(keys.len() as u64).to_le_bytes());
    for k in keys {
        out.extend_from_slice(&k.to_le_bytes());
    }
    out
}

/// The keys of a key file's bytes.
///
/// Errors: `DataInvalid` for a wrong magic, or a length that does not match the count.
pub fn decode_key_file(bytes: &[u8]) -> iceberg::Result<Vec<KeyHash>> {
    let invalid = |m: &str| Error::new(ErrorKind::DataInvalid, format!("key file: {m}"));
    if bytes.len() < 12 || &bytes[..4] != KEY_FILE_MAGIC {
        return Err(invalid("not a floe key file (magic FLK1)"));
    }
    let count = u64::from_le_bytes(bytes[4..12].try_into().expect("8 bytes"));
    let body = &bytes[12..];
    if body.len() as u64 != count.saturating_mul(16) {
        return Err(invalid(&format!(
            "{count} keys announced, {} bytes follow",
            body.len()
        )));
    }
    Ok(body
        .chunks_exact(16)
        .map(|c| u128::from_le_bytes(c.try_into().expect("16 bytes")))
        .collect())
}

/// Writes `keys` as a key file at `path`.
///
/// Errors: the storage's.
pub async fn write_key_file(file_io: &FileIO, path: &str, keys: &[KeyHash]) -> iceberg::Result<()> {
    file_io
        .new_output(path)?
        .write(encode_key_file(keys).into())
        .await
}

/// Reads the key file at `path`.
///
/// Errors: the storage's; `DataInvalid` as [`decode_key_file`].
pub async fn read_key_file(file_io: &FileIO, path: &str) -> iceberg::Result<Vec<KeyHash>> {
    let bytes = file_io.new_input(path)?.read().await?;
    decode_key_file(&bytes)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow_array::{
        BooleanArray, Decimal128Array, FixedSizeBinaryArray, Float64Array, Int32Array, Int64Array,
        LargeStringArray, StringArray, TimestampMicrosecondArray,
    };

    use super::*;

    #[test]
    fn widths_do_not_change_a_key() {
        let narrow: Vec<ArrayRef> = vec![
            Arc::new(Int32Array::from(vec![Some(7), None])),
            Arc::new(StringArray::from(vec!["a", "b"])),
        ];
        let wide: Vec<ArrayRef> = vec![
            Arc::new(Int64Array::from(vec![Some(7), None])),
            Arc::new(LargeStringArray::from(vec!["a", "b"])),
        ];
        assert_eq!(key_hashes(&narrow).unwrap(), key_hashes(&wide).unwrap());
        let tz: ArrayRef =
            Arc::new(TimestampMicrosecondArray::from(vec![5]).with_timezone("+00:00"));
        let no_tz: ArrayRef = Arc::new(TimestampMicrosecondArray::from(vec![5]));
        assert_eq!(key_hashes(&[tz]).unwrap(), key_hashes(&[no_tz]).unwrap());
    }

    #[test]
    fn distinct_keys_hash_apart() {
        // The length prefix keeps ("ab", "c") and ("a", "bc") apart; the null tag keeps a null
        // apart from every value.
        let a: Vec<ArrayRef> = vec![
            Arc::new(StringArray::from(vec![
                Some("ab"),
                Some("a"),
                None,
                Some(""),
            ])),
            Arc::new(StringArray::from(vec!["c", "bc", "", ""])),
        ];
        let h = key_hashes(&a).unwrap();
        let unique: std::collections::HashSet<_> = h.iter().collect();
        assert_eq!(unique.len(), 4, "{h:?}");
        let other_types: Vec<ArrayRef> = vec![
            Arc::new(BooleanArray::from(vec![true, false])),
            Arc::new(
                Decimal128Array::from(vec![1, 2])
                    .with_precision_and_scale(38, 2)
                    .unwrap(),
            ),
            Arc::new(FixedSizeBinaryArray::try_from_iter([[1u8; 16], [2u8; 16]].iter()).unwrap()),
        ];
        let h = key_hashes(&other_types).unwrap();
        assert_ne!(h[0], h[1]);
    }

    #[test]
    fn floats_and_ragged_columns_are_refused() {
        let f: ArrayRef = Arc::new(Float64Array::from(vec![1.0]));
        assert!(matches!(
            key_hashes(&[f]),
            Err(KeyError::UnsupportedType(_))
        ));
        let a: ArrayRef = Arc::new(Int32Array::from(vec![1, 2]));
        let b: ArrayRef = Arc::new(Int32Array::from(vec![1]));
        assert!(matches!(key_hashes(&[a, b]), Err(KeyError::Ragged(2, 1))));
        assert!(matches!(key_hashes(&[]), Err(KeyError::NoColumns)));
    }

    #[test]
    fn key_files_round_trip_and_refuse_damage() {
        let keys = vec![
            0u128,
            1,
            u128::MAX,
            0x0123_4567_89ab_cdef_0011_2233_4455_6677,
        ];
        let bytes = encode_key_file(&keys);
        assert_eq!(decode_key_file(&bytes).unwrap(), keys);
        assert!(decode_key_file(&bytes[..bytes.len() - 1]).is_err());
        assert!(decode_key_file(b"XXXX\0\0\0\0\0\0\0\0").is_err());
        assert_eq!(
            decode_key_file(&encode_key_file(&[])).unwrap(),
            Vec::<u128>::new()
        );
    }
}
