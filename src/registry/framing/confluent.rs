//! The Confluent wire format (Confluent Platform documentation, "Schema Registry: Wire format"):
//!
//! ```text
//!  byte 0      1..5                    (protobuf only)                          rest
//!  +------+----------------------+-------------------------------------------+-----------+
//!  |  0   | schema id (u32, BE)  | message indexes: count, then each index,  |  payload  |
//!  |magic |                      | zigzag varints; the single byte 0 = [0]   |           |
//!  +------+----------------------+-------------------------------------------+-----------+
//! ```
//!
//! A record that does not follow it is `DESERIALIZATION_ERROR`. The message indexes name the
//! record's message in the schema's `.proto` file: `[0]` is its first message, `[1, 0]` the first
//! message nested in its second.

use crate::model::{DlqCode, DlqReason};

/// The magic byte opening every record.
pub const MAGIC: u8 = 0;
/// Bytes before the payload of Avro and JSON Schema records (magic byte and schema id).
pub const HEADER_LEN: usize = 5;
/// The first byte of the Glue Schema Registry header (named in the error for such records).
const GSR_HEADER_VERSION: u8 = 3;
/// Most message indexes floe reads (nesting depth of the record's message); more is refused.
pub const MAX_MESSAGE_INDEXES: usize = 10;

/// A framed record: its schema id, its message indexes (Protobuf), its payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Framed<'a> {
    /// The registry's schema id.
    pub id: u32,
    /// Protobuf message indexes (`[0]` for the first message); empty for Avro and JSON Schema.
    pub indexes: Vec<i32>,
    /// The bytes after the framing.
    pub payload: &'a [u8],
}

fn bad(message: String) -> DlqReason {
    DlqReason::record(DlqCode::DeserializationError, message)
}

/// The schema id of a framed record, without reading the rest.
///
/// Errors: `DESERIALIZATION_ERROR` for an empty record, another magic byte, a truncated id.
pub fn schema_id(record: &[u8]) -> Result<u32, DlqReason> {
    match record.first() {
        None => return Err(bad("empty record (no Confluent framing)".into())),
        Some(&MAGIC) => {}
        Some(&b) => {
            let hint = if matches!(b, b'{' | b'[' | b' ' | b'\n') {
                ": the record looks like plain JSON"
            } else if b == GSR_HEADER_VERSION {
                ": the record may carry the Glue Schema Registry header"
            } else {
                ""
            };
            return Err(bad(format!(
                "not the Confluent wire format: magic byte {b}, expected 0{hint}"
            )));
        }
    }
    if record.len() < HEADER_LEN {
        return Err(bad(format!(
            "truncated Confluent framing ({} bytes, the schema id needs 5)",
            record.len()
        )));
    }
    Ok(u32::from_be_bytes([
        record[1], record[2], record[3], record[4],
    ]))
}

/// Reads one zigzag varint (at most 5 bytes, an `int` as Confluent writes it) from `bytes` at
/// `*at`, advancing `*at`.
fn zigzag_varint(bytes: &[u8], at: &mut usize) -> Result<i32, DlqReason> {
    let mut value: u32 = 0;
    for shift in (0..35).step_by(7) {
        let Some(&b) = bytes.get(*at) else {
            return Err(bad("truncated message indexes".into()));
        };
        *at += 1;
        value |= u32::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return Ok(((value >> 1) as i32) ^ -((value & 1) as i32));
        }
    }
    Err(bad("message index varint longer than 5 bytes".into()))
}

/// Parses the framing of a record; `protobuf` says whether message indexes follow the id.
///
/// Errors: `DESERIALIZATION_ERROR` naming what is wrong (magic byte, truncated id or indexes, a
/// negative count or index, more than [`MAX_MESSAGE_INDEXES`] indexes).
pub fn parse(record: &[u8], protobuf: bool) -> Result<Framed<'_>, DlqReason> {
    let id = schema_id(record)?;
    if !protobuf {
        return Ok(Framed {
            id,
            indexes: Vec::new(),
            payload: &record[HEADER_LEN..],
        });
    }
    let mut at = HEADER_LEN;
    let count = zigzag_varint(record, &mut at)?;
    let indexes = match count {
        0 => vec![0],
        n if n < 0 => return Err(bad(format!("negative message index count {n}"))),
        n if n as usize > MAX_MESSAGE_INDEXES => {
            return Err(bad(format!(
            "{n} message indexes (floe reads messages nested at most {MAX_MESSAGE_INDEXES} deep)"
        )))
        }
        n => {
            let mut out = Vec::with_capacity(n as usize);
            for _ in 0..n {
                let i = zigzag_varint(record, &mut at)?;
                if i < 0 {
                    return Err(bad(format!("negative message index {i}")));
                }
                out.push(i);
            }
            out
        }
    };
    Ok(Framed {
        id,
        indexes,
        payload: &record[at..],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    #[test]
    fn avro_and_json_framing_reads_a_big_endian_id() {
        // JSONSerializer bytes for schema id 258: 00 00000102 {"a":1}
        let r = hex("00000001027b2261223a317d");
        let f = parse(&r, false).unwrap();
        assert_eq!(f.id, 258);
        assert!(f.indexes.is_empty());
        assert_eq!(f.payload, b"{\"a\":1}");
        let r = hex("00ffffffff");
        assert_eq!(parse(&r, false).unwrap().id, u32::MAX);
        assert_eq!(parse(&r, false).unwrap().payload, b"");
    }

    #[test]
    fn protobuf_message_indexes_as_the_serializer_writes_them() {
        // [0] as the single byte 0; [1] as 02 02; [1, 1] as 04 02 02 (deploy/local/README.md).
        for (bytes, want) in [
            ("000000000700", vec![0]),
            ("00000000070202", vec![1]),
            ("0000000007040202", vec![1, 1]),
            ("00000000070200", vec![0]),
            ("000000000702ac02", vec![150]),
        ] {
            let mut r = hex(bytes);
            r.extend_from_slice(&[0x08, 0x96, 0x01]);
            let f = parse(&r, true).unwrap();
            assert_eq!((f.id, &f.indexes), (7, &want), "{bytes}");
            assert_eq!(f.payload, [0x08, 0x96, 0x01], "{bytes}");
        }
    }

    #[test]
    fn bad_framing_is_a_deserialization_error() {
        for (bytes, protobuf, why) in [
            ("", false, "empty record"),
            ("7b7d", false, "plain JSON"),
            ("0300", false, "Glue Schema Registry header"),
            ("01000000017b7d", false, "magic byte 1"),
            ("00000001", false, "truncated Confluent framing (4 bytes"),
            ("0000000001", true, "truncated message indexes"),
            ("000000000101", true, "negative message index count -1"),
            ("00000000010201", true, "negative message index -1"),
            ("000000000104", true, "truncated message indexes"),
            ("000000000116", true, "11 message indexes"),
            ("0000000001ffffffffff01", true, "longer than 5 bytes"),
        ] {
            let e = parse(&hex(bytes), protobuf).unwrap_err();
            assert_eq!(e.code, DlqCode::DeserializationError, "{bytes}");
            assert!(e.message.contains(why), "{bytes}: {}", e.message);
        }
    }
}
