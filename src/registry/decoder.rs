//! The registry-neutral record decoder: how a channel's worker turns a record into the payload
//! its converter reads (`record.format`), whatever registry framed it, and why a record has none
//! ([`PayloadError`]: a DLQ reason, or a registry that cannot be asked).
//!
//! ```text
//!  record ──> RecordDecoder ─ json ──────────────> the record is the payload
//!                           ├ gsr_json/gsr_avro ─> GSR header (framing/gsr.rs): the channel's
//!                           │                      version, or a lookup (gsr/) to tell
//!                           │                      SCHEMA_MISMATCH from INVALID_SCHEMA; inflate
//!                           └ avro/protobuf/ ────> Confluent framing (framing/confluent.rs): the
//!                             json_sr              channel's schema key, or a lookup (confluent/)
//! ```
//!
//! Under schema evolution the caller asks for the record's schema key first
//! ([`RecordDecoder::schema_key`]), resolves it ([`crate::registry::versions`]) and takes the
//! payload of any version ([`RecordDecoder::payload_of`]).

use std::sync::Arc;

use uuid::Uuid;

use crate::model::{DlqCode, DlqReason};
use crate::registry::confluent;
use crate::registry::framing::confluent::{self as confluent_framing, SchemaKey};
use crate::registry::framing::gsr::{parse_header, GsrDecoder};
use crate::registry::gsr::{RegistryClient, RegistryError};

/// How a channel's worker turns a record into its JSON payload (`record.format`).
#[derive(Debug, Clone, Default)]
pub enum RecordDecoder {
    /// `json`: the record is the payload (the converter says when it carries a GSR header).
    #[default]
    Json,
    /// `gsr_json`: the header is checked against the channel's version; another version id is
    /// looked up in the registry (when there is one) to tell `SCHEMA_MISMATCH` from
    /// `INVALID_SCHEMA`.
    Gsr {
        /// The decoder (channel version, versions known so far).
        decoder: GsrDecoder,
        /// The registry, absent when the versions are listed offline.
        registry: Option<Arc<RegistryClient>>,
    },
    /// `avro`, `protobuf`, `json_sr`: the Confluent wire format ([`crate::registry::framing::confluent`]).
    /// Without evolution only the channel's schema key is delivered; another id is looked up to
    /// tell `SCHEMA_MISMATCH` (a schema the registry has) from `INVALID_SCHEMA` (one it has not).
    Confluent {
        /// Whether message indexes follow the schema id (`protobuf`).
        protobuf: bool,
        /// The channel's schema key (id and message indexes packed, see
        /// [`SchemaKey::to_uuid`]).
        channel_key: Uuid,
        /// The registry.
        client: Arc<confluent::ConfluentClient>,
    },
}

/// Why [`RecordDecoder::payload`] has no payload.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PayloadError {
    /// The record goes to the DLQ with this reason.
    #[error("{}", .0.message)]
    Record(DlqReason),
    /// The record's schema version id could not be looked up (the registry is unavailable or
    /// refuses): not a property of the record. The worker restarts from the table's checkpoints
    /// with backoff; nothing goes to the DLQ.
    #[error("schema version {id} could not be looked up: {error}")]
    Registry {
        /// The version id.
        id: Uuid,
        /// The registry's answer after its retries.
        error: RegistryError,
    },
    /// As [`PayloadError::Registry`], for a Confluent schema id.
    #[error("schema id {id} could not be looked up: {error}")]
    ConfluentRegistry {
        /// The schema id.
        id: u32,
        /// The registry's answer after its retries.
        error: confluent::RegistryError,
    },
}

impl From<DlqReason> for PayloadError {
    fn from(reason: DlqReason) -> Self {
        PayloadError::Record(reason)
    }
}

impl RecordDecoder {
    /// The JSON payload of `record`.
    ///
    /// Errors: [`PayloadError::Record`] with the record's [`DlqReason`] (a version id Glue answers
    /// "not found" for is `INVALID_SCHEMA`, a version it knows `SCHEMA_MISMATCH`);
    /// [`PayloadError::Registry`] when the id could not be looked up (unavailable, refused).
    pub async fn payload<'a>(&'a mut self, record: &'a [u8]) -> Result<&'a [u8], PayloadError> {
        match self {
            RecordDecoder::Json => Ok(record),
            RecordDecoder::Gsr { decoder, registry } => {
                if let (Some(registry), Some(id)) = (registry, decoder.unresolved(record)) {
                    match registry.by_id(id).await {
                        Ok(_) => decoder.add_known(id),
                        Err(RegistryError::NotFound(_)) => {}
                        Err(error) => return Err(PayloadError::Registry { id, error }),
                    }
                }
                Ok(decoder.decode(record)?)
            }
            RecordDecoder::Confluent {
                protobuf,
                channel_key,
                client,
            } => {
                let framed = confluent_framing::parse(record, *protobuf)?;
                let key = SchemaKey {
                    id: framed.id,
                    indexes: framed.indexes,
                };
                if key.to_uuid() == Some(*channel_key) {
                    return Ok(framed.payload);
                }
                match client.by_id(key.id).await {
                    Ok(resolved) => Err(PayloadError::Record(confluent::not_the_channels(
                        &resolved,
                        &key,
                        client.subject(),
                    ))),
                    Err(confluent::RegistryError::NotFound(_)) => {
                        Err(PayloadError::Record(confluent::unknown_id(&key)))
                    }
                    Err(error) => Err(PayloadError::ConfluentRegistry { id: key.id, error }),
                }
            }
        }
    }

    /// The key of `record`'s schema under evolution: a GSR record's version id, or a Confluent
    /// record's [`SchemaKey`] packed into a UUID.
    ///
    /// Errors: the framing's [`DlqReason`]; `SCHEMA_MISMATCH` for message indexes floe cannot
    /// record; `INVALID_SCHEMA` on a `json` channel (no key).
    pub fn schema_key(&self, record: &[u8]) -> Result<Uuid, DlqReason> {
        match self {
            RecordDecoder::Json => Err(DlqReason::record(
                DlqCode::InvalidSchema,
                "a json record names no schema version".to_string(),
            )),
            RecordDecoder::Gsr { .. } => Ok(parse_header(record)?.0.schema_version),
            RecordDecoder::Confluent { protobuf, .. } => {
                let framed = confluent_framing::parse(record, *protobuf)?;
                let key = SchemaKey {
                    id: framed.id,
                    indexes: framed.indexes,
                };
                key.to_uuid().ok_or_else(|| {
                    DlqReason::record(
                        DlqCode::SchemaMismatch,
                        format!("{key}: message indexes above 255 are not supported"),
                    )
                })
            }
        }
    }

    /// The payload of `record` whatever its schema version (decided by the caller from
    /// [`RecordDecoder::schema_key`]).
    ///
    /// Errors: the framing's [`DlqReason`] (and, for GSR, inflate errors).
    pub fn payload_of<'a>(&'a mut self, record: &'a [u8]) -> Result<&'a [u8], DlqReason> {
        match self {
            RecordDecoder::Json => Ok(record),
            RecordDecoder::Gsr { decoder, .. } => decoder.payload_of(record),
            RecordDecoder::Confluent { protobuf, .. } => {
                Ok(confluent_framing::parse(record, *protobuf)?.payload)
            }
        }
    }
}
