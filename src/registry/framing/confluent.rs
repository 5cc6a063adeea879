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

use uuid::Uuid;

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

/// What is wrong with a record's framing: the message of its `DESERIALIZATION_ERROR`, made a
/// [`DlqReason`] once, by the public functions ([`dlq_reason`]).
struct Malformed(String);

fn bad(message: String) -> Malformed {
    Malformed(message)
}

fn dlq_reason(m: Malformed) -> DlqReason {
    DlqReason::record(DlqCode::DeserializationError, m.0)
}

/// The schema id of a framed record, without reading the rest.
///
/// Errors: `DESERIALIZATION_ERROR` for an empty record, another magic byte, a truncated id.
pub fn schema_id(record: &[u8]) -> Result<u32, DlqReason> {
    read_schema_id(record).map_err(dlq_reason)
}

fn read_schema_id(record: &[u8]) -> Result<u32, Malformed> {
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
// Kept over prost's decode_varint (64-bit, one error): the framing's `int` stops at 5 bytes and
// its DLQ message tells a truncated index from an overlong one.
fn zigzag_varint(bytes: &[u8], at: &mut usize) -> Result<i32, Malformed> {
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

/// A schema id with the Protobuf message indexes of the record's message (empty for Avro and
/// JSON Schema): what decides a record's converter.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SchemaKey {
    /// The schema id.
    pub id: u32,
    /// Protobuf message indexes (`[0]`: the first message).
    pub indexes: Vec<i32>,
}

/// Byte 4 of a [`SchemaKey`] packed into a UUID.
const KEY_MARK: u8 = 0xcf;

impl SchemaKey {
    /// The key packed into a UUID (bytes 0–3 the id, big-endian; byte 4 `0xcf`; byte 5 the
    /// number of indexes; then each index as one byte), as the table's schema history records
    /// it. `None` when an index is above 255 or there are more than 10 (such records are refused).
    pub fn to_uuid(&self) -> Option<Uuid> {
        if self.indexes.len() > MAX_MESSAGE_INDEXES {
            return None;
        }
        let mut b = [0u8; 16];
        b[..4].copy_from_slice(&self.id.to_be_bytes());
        b[4] = KEY_MARK;
        b[5] = self.indexes.len() as u8;
        for (i, index) in self.indexes.iter().enumerate() {
            b[6 + i] = u8::try_from(*index).ok()?;
        }
        Some(Uuid::from_bytes(b))
    }

    /// The key a UUID of [`SchemaKey::to_uuid`] packs; `None` for any other UUID.
    pub fn from_uuid(u: Uuid) -> Option<SchemaKey> {
        let b = u.as_bytes();
        let n = b[5] as usize;
        if b[4] != KEY_MARK || n > MAX_MESSAGE_INDEXES || b[6 + n..].iter().any(|&x| x != 0) {
            return None;
        }
        Some(SchemaKey {
            id: u32::from_be_bytes([b[0], b[1], b[2], b[3]]),
            indexes: b[6..6 + n].iter().map(|&x| i32::from(x)).collect(),
        })
    }
}

impl std::fmt::Display for SchemaKey {
    /// `schema id 7`, or `schema id 7 message [1, 0]`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "schema id {}", self.id)?;
        if !self.indexes.is_empty() {
            write!(f, " message {:?}", self.indexes)?;
        }
        Ok(())
    }
}

/// Parses the framing of a record; `protobuf` says whether message indexes follow the id.
///
/// Errors: `DESERIALIZATION_ERROR` naming what is wrong (magic byte, truncated id or indexes, a
/// negative count or index, more than [`MAX_MESSAGE_INDEXES`] indexes).
pub fn parse(record: &[u8], protobuf: bool) -> Result<Framed<'_>, DlqReason> {
    read_framing(record, protobuf).map_err(dlq_reason)
}

fn read_framing(record: &[u8], protobuf: bool) -> Result<Framed<'_>, Malformed> {
    let id = read_schema_id(record)?;
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

    #[test]
    fn schema_keys_pack_into_uuids_and_back() {
        for key in [
            SchemaKey {
                id: 1,
                indexes: vec![],
            },
            SchemaKey {
                id: u32::MAX,
                indexes: vec![0],
            },
            SchemaKey {
                id: 258,
                indexes: vec![1, 0, 255],
            },
            SchemaKey {
                id: 7,
                indexes: vec![9; 10],
            },
        ] {
            let u = key.to_uuid().unwrap();
            assert_eq!(SchemaKey::from_uuid(u), Some(key.clone()), "{key}");
        }
        assert_eq!(
            SchemaKey {
                id: 1,
                indexes: vec![256]
            }
            .to_uuid(),
            None
        );
        assert_eq!(
            SchemaKey::from_uuid(Uuid::parse_str("3f36e6d8-d20e-43b7-90ea-3ad724880d60").unwrap()),
            None
        );
        assert_ne!(
            SchemaKey {
                id: 1,
                indexes: vec![]
            }
            .to_uuid(),
            SchemaKey {
                id: 1,
                indexes: vec![0]
            }
            .to_uuid()
        );
    }
}
