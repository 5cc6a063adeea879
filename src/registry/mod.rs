//! The registry room: everything between a record's bytes and the schema they were written with.
//! A record read from the source is framed by a schema registry's serializer (or not, on a `json`
//! channel); this room unframes it, names its schema version, resolves that version in the
//! channel's registry, and hands the destination the payload its converter reads.
//!
//! ```text
//!  record bytes ─> decoder ─> framing/{gsr,confluent}   header, schema id, message indexes
//!  (source)          │                                  (pure; bad framing -> DLQ reason)
//!                    ├─> gsr/, confluent/               the registries' clients: lookups,
//!                    │                                  retries, caches (no DLQ when down)
//!                    └─> payload ─> convert (the destination's converter)
//!  evolution: schema key ─> versions ─> Candidate (mapped) ─> iceberg applies it to the table
//!  activation: channel_schema ─> ChannelSchema (the channel's registry, version and mapping)
//!  DLQ: schema_label ─> the version a rejected record names
//! ```
//!
//! - [`framing`]: the wire formats (GSR header, Confluent framing), parsed without I/O.
//! - [`decoder`]: [`decoder::RecordDecoder`], the registry-neutral decoder, and its error
//!   [`decoder::PayloadError`] (a DLQ reason, or a registry that cannot be asked).
//! - [`versions`]: schema-version resolution for Glue and Confluent under schema evolution.
//! - [`channel_schema`]: a channel's registry ([`channel_schema::ChannelRegistry`]) and its
//!   schema at activation.
//! - [`gsr`], [`confluent`]: the registry clients (API calls, caches, bounded retries).
//!
//! Invariant: a registry that cannot be asked is never a property of the record: nothing goes
//! to the DLQ for it (the worker restarts from the table's checkpoints); a record is refused
//! (`INVALID_SCHEMA`, `SCHEMA_MISMATCH`, `DESERIALIZATION_ERROR`) only for what its bytes say.

pub mod channel_schema;
pub mod confluent;
pub mod decoder;
pub mod framing;
pub mod gsr;
pub mod versions;

pub use framing::gsr::looks_like_gsr;

/// The schema version a rejected record names, for its DLQ entry: a GSR record's schema version
/// id (`3f36e6d8-…`), else a Confluent record's `schema id N`; `None` for bytes with neither
/// framing (the caller labels those with the channel's schema).
pub fn schema_label(record: &[u8]) -> Option<String> {
    framing::gsr::parse_header(record)
        .map(|(h, _)| h.schema_version.to_string())
        .or_else(|_| framing::confluent::schema_id(record).map(|id| format!("schema id {id}")))
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schema_label_names_the_gsr_version_else_the_confluent_id() {
        let mut gsr = vec![3, 0];
        gsr.extend_from_slice(
            uuid::Uuid::parse_str("3f36e6d8-d20e-43b7-90ea-3ad724880d60")
                .unwrap()
                .as_bytes(),
        );
        gsr.extend_from_slice(b"{}");
        assert_eq!(
            schema_label(&gsr).as_deref(),
            Some("3f36e6d8-d20e-43b7-90ea-3ad724880d60")
        );
        assert_eq!(
            schema_label(&[0, 0, 0, 1, 2, b'{', b'}']).as_deref(),
            Some("schema id 258")
        );
        assert_eq!(schema_label(b"{\"a\":1}"), None);
        assert!(looks_like_gsr(&gsr));
        assert!(!looks_like_gsr(b"{\"a\":1}"));
    }
}
