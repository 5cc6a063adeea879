//! The AWS Glue Schema Registry (GSR) wire format, as written by the GSR serializer library
//! (`GlueSchemaRegistryDeserializerDataParser`): it frames each record before it reaches the
//! converter ([`crate::convert`]). Pure: the lookups of unknown versions are the decoder's
//! ([`crate::registry::decoder`]).
//!
//! ```text
//!  byte 0      byte 1        bytes 2..18                       bytes 18..
//!  version=3   compression   schema version id (UUID, big-     payload (JSON; zlib stream
//!              0 none,       endian: 3f36e6d8-d20e-… is the    with header and Adler-32
//!              5 zlib        bytes 3f 36 e6 d8 d2 0e …)        when compression = 5)
//! ```
//!
//! Errors (docs/schema-mapping.md "DLQ error codes", issue 5): plain JSON, an empty record, a header version other
//! than 3, a compression byte other than 0 or 5, a header shorter than 18 bytes, a schema version
//! the registry answers "not found" for → `INVALID_SCHEMA` (a registry that cannot be asked is no
//! DLQ reason: [`crate::registry::decoder::PayloadError::Registry`], the worker retries); a known version that is not the channel's → `SCHEMA_MISMATCH`; a zlib
//! payload that does not inflate (truncated, raw deflate without the RFC 1950 header, Adler-32
//! mismatch, trailing bytes) → `DESERIALIZATION_ERROR`; an inflated payload beyond the maximum record
//! size (a decompression bomb) → `RECORD_TOO_LARGE`, found after inflating at most that many bytes.

use std::collections::HashSet;
use std::io::Read;

use uuid::Uuid;

use crate::model::{DlqCode, DlqReason};

/// Header version byte written by the GSR serializer.
pub const HEADER_VERSION: u8 = 3;
/// Compression byte: none.
pub const COMPRESSION_NONE: u8 = 0;
/// Compression byte: zlib (RFC 1950).
pub const COMPRESSION_ZLIB: u8 = 5;
/// Header length in bytes.
pub const HEADER_LEN: usize = 18;

/// Whether `record` starts like a GSR-framed record (version 3, a known compression byte, a full
/// header): used on `json` channels to say why such bytes are not JSON.
pub fn looks_like_gsr(record: &[u8]) -> bool {
    record.len() >= HEADER_LEN
        && record[0] == HEADER_VERSION
        && matches!(record[1], COMPRESSION_NONE | COMPRESSION_ZLIB)
}

/// A parsed GSR header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GsrHeader {
    /// Compression byte (0 or 5).
    pub compression: u8,
    /// Schema version id.
    pub schema_version: Uuid,
}

/// Parses the 18-byte header. Errors: `INVALID_SCHEMA` for an empty record, plain JSON, a bad
/// version or compression byte, or a truncated header.
pub fn parse_header(record: &[u8]) -> Result<(GsrHeader, &[u8]), DlqReason> {
    let invalid = |m: String| Err(DlqReason::record(DlqCode::InvalidSchema, m));
    let Some(&version) = record.first() else {
        return invalid("empty record (no GSR header)".to_string());
    };
    if version != HEADER_VERSION {
        if matches!(version, b'{' | b'[' | b' ' | b'\t' | b'\r' | b'\n') {
            return invalid(
                "not GSR framing: the record looks like plain JSON on a gsr_json channel"
                    .to_string(),
            );
        }
        return invalid(format!("unknown GSR header version {version}"));
    }
    if record.len() < 2 {
        return invalid(format!("truncated GSR header ({} bytes)", record.len()));
    }
    let compression = record[1];
    if !matches!(compression, COMPRESSION_NONE | COMPRESSION_ZLIB) {
        return invalid(format!("unknown GSR compression byte {compression}"));
    }
    if record.len() < HEADER_LEN {
        return invalid(format!("truncated GSR header ({} bytes)", record.len()));
    }
    let mut id = [0u8; 16];
    id.copy_from_slice(&record[2..HEADER_LEN]);
    Ok((
        GsrHeader {
            compression,
            schema_version: Uuid::from_bytes(id),
        },
        &record[HEADER_LEN..],
    ))
}

/// Inflates a zlib stream (RFC 1950) into `out` (cleared first), reading at most `limit + 1` bytes of
/// output. Errors: `DESERIALIZATION_ERROR` when the stream is not valid zlib (or has trailing bytes),
/// `RECORD_TOO_LARGE` when the output exceeds `limit`.
pub fn inflate(payload: &[u8], limit: usize, out: &mut Vec<u8>) -> Result<(), DlqReason> {
    out.clear();
    let mut z = flate2::read::ZlibDecoder::new(payload);
    let cap = (limit as u64).saturating_add(1);
    let r = (&mut z).take(cap).read_to_end(out);
    match r {
        Err(e) => Err(DlqReason::record(
            DlqCode::DeserializationError,
            format!("GSR payload does not inflate: {e}"),
        )),
        Ok(_) if out.len() > limit => Err(DlqReason::record(
            DlqCode::RecordTooLarge,
            format!("decompressed size exceeds the limit of {limit} bytes"),
        )),
        Ok(_) => {
            let consumed = z.total_in() as usize;
            if consumed != payload.len() {
                return Err(DlqReason::record(
                    DlqCode::DeserializationError,
                    format!(
                        "GSR payload has {} bytes after the zlib stream",
                        payload.len() - consumed
                    ),
                ));
            }
            Ok(())
        }
    }
}

/// Decodes GSR framing for one channel: knows the channel's schema version and the other versions of
/// the registry, and inflates payloads into a reused buffer.
#[derive(Debug, Clone)]
pub struct GsrDecoder {
    channel_version: Option<Uuid>,
    known_versions: HashSet<Uuid>,
    max_record_size: usize,
    buf: Vec<u8>,
}

impl GsrDecoder {
    /// A decoder accepting `channel_version` (when known) and refusing the other `known_versions`
    /// with `SCHEMA_MISMATCH`; unknown ids get `INVALID_SCHEMA`. `max_record_size` bounds inflated
    /// payloads.
    pub fn new(
        channel_version: Option<Uuid>,
        known_versions: impl IntoIterator<Item = Uuid>,
        max_record_size: usize,
    ) -> Self {
        let mut known: HashSet<Uuid> = known_versions.into_iter().collect();
        known.extend(channel_version);
        GsrDecoder {
            channel_version,
            known_versions: known,
            max_record_size,
            buf: Vec::new(),
        }
    }

    /// The schema version id of `record` when its header parses and the id is neither the
    /// channel's nor known: the id to look up before [`GsrDecoder::decode`].
    pub fn unresolved(&self, record: &[u8]) -> Option<Uuid> {
        let (h, _) = parse_header(record).ok()?;
        (Some(h.schema_version) != self.channel_version
            && !self.known_versions.contains(&h.schema_version))
        .then_some(h.schema_version)
    }

    /// Records `id` as a known version of the registry (not the channel's).
    pub fn add_known(&mut self, id: Uuid) {
        self.known_versions.insert(id);
    }

    /// The JSON payload of a GSR record of any schema version (borrowed when uncompressed): the
    /// caller has decided the version from [`parse_header`].
    ///
    /// Errors: the header's `INVALID_SCHEMA`, an inflate error's `DESERIALIZATION_ERROR` or
    /// `RECORD_TOO_LARGE`.
    pub fn payload_of<'a>(&'a mut self, record: &'a [u8]) -> Result<&'a [u8], DlqReason> {
        let (h, payload) = parse_header(record)?;
        match h.compression {
            COMPRESSION_ZLIB => {
                inflate(payload, self.max_record_size, &mut self.buf)?;
                Ok(&self.buf)
            }
            _ => Ok(payload),
        }
    }

    /// The JSON payload of a GSR record (borrowed when uncompressed).
    pub fn decode<'a>(&'a mut self, record: &'a [u8]) -> Result<&'a [u8], DlqReason> {
        let (h, payload) = parse_header(record)?;
        if Some(h.schema_version) != self.channel_version {
            if self.known_versions.contains(&h.schema_version) {
                return Err(DlqReason::record(
                    DlqCode::SchemaMismatch,
                    format!(
                        "schema version {} is not the channel's (channel.schema.evolution is \"none\")",
                        h.schema_version
                    ),
                ));
            }
            return Err(DlqReason::record(
                DlqCode::InvalidSchema,
                format!("unknown schema version {}", h.schema_version),
            ));
        }
        match h.compression {
            COMPRESSION_ZLIB => {
                inflate(payload, self.max_record_size, &mut self.buf)?;
                Ok(&self.buf)
            }
            _ => Ok(payload),
        }
    }
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

    const UUID: &str = "3f36e6d8-d20e-43b7-90ea-3ad724880d60";
    const PLAIN: &str = "03003f36e6d8d20e43b790ea3ad724880d607b226576656e745f74696d65223a22323032342d30362d30315431303a30303a30305a222c226465766963655f6964223a226465762d303031227d";
    const ZLIB: &str = "03053f36e6d8d20e43b790ea3ad724880d60789cab564a2d4bcd2b892fc9cc4d55b25232323032d13530d335300c3134b03200a128251da594d4b2cce4d4f8cc14a012205bd7c0c050a91600000e109e";

    fn dec() -> GsrDecoder {
        GsrDecoder::new(Some(Uuid::parse_str(UUID).unwrap()), [], 1 << 20)
    }

    #[test]
    fn uuid_is_read_big_endian_and_both_compressions_decode() {
        let plain = hex(PLAIN);
        let (h, _) = parse_header(&plain).unwrap();
        assert_eq!(h.schema_version.to_string(), UUID);
        let mut d = dec();
        let a = d.decode(&plain).unwrap().to_vec();
        let z = hex(ZLIB);
        let b = d.decode(&z).unwrap().to_vec();
        assert_eq!(a, b);
        assert!(a.starts_with(b"{\"event_time\""));
    }

    #[test]
    fn header_errors_are_invalid_schema() {
        let mut d = dec();
        for (bad, why) in [
            ("", "empty record"),
            (
                "02003f36e6d8d20e43b790ea3ad724880d607b7d",
                "header version 2",
            ),
            (
                "00003f36e6d8d20e43b790ea3ad724880d607b7d",
                "header version 0",
            ),
            (
                "03013f36e6d8d20e43b790ea3ad724880d607b7d",
                "compression byte 1",
            ),
            (
                "03ff3f36e6d8d20e43b790ea3ad724880d607b7d",
                "compression byte 255",
            ),
            (
                "03003f36e6d8d20e43b790ea3ad724880d",
                "truncated GSR header (17 bytes)",
            ),
            ("0305", "truncated GSR header (2 bytes)"),
            ("03", "truncated GSR header (1 bytes)"),
            ("7b7d", "plain JSON"),
            ("0a7b7d", "plain JSON"),
            ("5b5d", "plain JSON"),
        ] {
            let r = hex(bad);
            let e = d.decode(&r).unwrap_err();
            assert_eq!(e.code, DlqCode::InvalidSchema, "{bad}");
            assert!(e.message.contains(why), "{bad}: {}", e.message);
        }
    }

    #[test]
    fn unknown_and_foreign_versions() {
        let other = Uuid::parse_str("1b4e28ba-2fa1-11d2-883f-0016d3cca427").unwrap();
        let mut d = GsrDecoder::new(Some(Uuid::parse_str(UUID).unwrap()), [other], 1 << 20);
        let mut r = hex(PLAIN);
        r[2..18].copy_from_slice(other.as_bytes());
        assert_eq!(d.decode(&r).unwrap_err().code, DlqCode::SchemaMismatch);
        r[2..18].copy_from_slice(&[
            0xd8, 0xe6, 0x36, 0x3f, 0x0e, 0xd2, 0xb7, 0x43, 0x90, 0xea, 0x3a, 0xd7, 0x24, 0x88,
            0x0d, 0x60,
        ]);
        assert_eq!(d.decode(&r).unwrap_err().code, DlqCode::InvalidSchema);
    }

    #[test]
    fn bad_zlib_is_a_deserialization_error() {
        let mut d = dec();
        for bad in [
            "03053f36e6d8d20e43b790ea3ad724880d60789cab564a2d4bcd2b892fc9cc4d55b252323230",
            "03053f36e6d8d20e43b790ea3ad724880d60ab564a2d4bcd2b892fc9cc4d55b25232323032d13530d335300c3134b03200a128251da594d4b2cce4d4f8cc14a012205bd7c0c050a91600",
            "03053f36e6d8d20e43b790ea3ad724880d60789cab564a2d4bcd2b892fc9cc4d55b25232323032d13530d335300c3134b03200a128251da594d4b2cce4d4f8cc14a012205bd7c0c050a9160000000000",
        ] {
            let r = hex(bad);
            assert_eq!(d.decode(&r).unwrap_err().code, DlqCode::DeserializationError, "{bad}");
        }
    }

    #[test]
    fn decompression_bomb_is_record_too_large_in_bounded_work() {
        use std::io::Write;
        let mut e = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::best());
        e.write_all(b"{\"a\":1}").unwrap();
        let spaces = vec![b' '; 1 << 20];
        for _ in 0..64 {
            e.write_all(&spaces).unwrap(); // 64 MiB of spaces
        }
        let z = e.finish().unwrap();
        let mut rec = hex(&PLAIN[..36]);
        rec[1] = COMPRESSION_ZLIB;
        rec.extend_from_slice(&z);
        let mut d = GsrDecoder::new(Some(Uuid::parse_str(UUID).unwrap()), [], 10 << 20);
        assert_eq!(d.decode(&rec).unwrap_err().code, DlqCode::RecordTooLarge);
    }

    #[test]
    fn gsr_bytes_are_recognized_on_json_channels() {
        assert!(looks_like_gsr(&hex(PLAIN)));
        assert!(!looks_like_gsr(b"{\"a\":1}"));
    }
}
