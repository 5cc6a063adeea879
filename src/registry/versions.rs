//! Schema-version resolution under `[channel.schema] evolution = "compatible"`: a schema
//! version met in a record (a Glue version id, a Confluent schema key) is looked up in the
//! channel's registry and mapped to Iceberg, as a [`Candidate`] the destination decides on
//! (apply it to the table, or refuse its records). Avro versions older than the channel's base
//! are read through the base (Avro 1.11 "Schema Resolution": the reader's defaults for the
//! fields the writer lacks).
//!
//! ```text
//!  version id ──> Glue: GetSchemaVersion(id) ─> another schema's? ─> SCHEMA_MISMATCH
//!   (record)          (+ the base, gsr_avro)    map (JSON Schema | Avro, read through the base)
//!             └─> Confluent: /schemas/ids/{id} ─> another subject's / type? ─> SCHEMA_MISMATCH
//!                     (+ the base, avro)          map (its format; Avro read through the base)
//!  not found ─> INVALID_SCHEMA (not remembered); unavailable ─> PayloadError (the worker retries)
//! ```

use std::sync::Arc;

use uuid::Uuid;

use crate::model::{DlqCode, DlqReason};
use crate::registry::channel_schema::{
    json_schema_of, map_glue_avro_resolved, map_glue_version, ChannelRegistry,
};
use crate::registry::confluent;
use crate::registry::decoder::PayloadError;
use crate::registry::framing::confluent::SchemaKey;
use crate::registry::gsr::{self, RegistryError};
use crate::schema::protobuf::MessageSelector;
use crate::schema::{Decoding, MappedSchema};

fn mismatch(message: String) -> DlqReason {
    DlqReason::record(DlqCode::SchemaMismatch, message)
}

/// Version `id` of a record, looked up in `registry` and mapped for a channel of schema
/// `schema_arn` (Glue) whose mapped schema is `channel` and whose base version is `base_id`.
/// `Ok(Err(reason))`: the registry does not have the version (`INVALID_SCHEMA`); its records go
/// to the DLQ and the version is asked again when next met.
///
/// Errors: [`PayloadError::Registry`] / [`PayloadError::ConfluentRegistry`] when the version (or
/// the base, for Avro) could not be looked up.
pub async fn candidate(
    registry: &ChannelRegistry,
    id: Uuid,
    base_id: Option<Uuid>,
    schema_arn: &str,
    channel: &MappedSchema,
) -> Result<Result<Candidate, DlqReason>, PayloadError> {
    match registry {
        ChannelRegistry::Glue(registry) => {
            match glue_version_and_reader(registry, id, base_id, channel).await {
                Ok((info, reader)) => Ok(Ok(glue_candidate(
                    &info,
                    reader.as_deref(),
                    schema_arn,
                    channel,
                ))),
                Err(RegistryError::NotFound(_)) => Ok(Err(DlqReason::record(
                    DlqCode::InvalidSchema,
                    format!("unknown schema version {id}"),
                ))),
                Err(error) => Err(PayloadError::Registry { id, error }),
            }
        }
        ChannelRegistry::Confluent(client) => {
            let key = SchemaKey::from_uuid(id).expect("a Confluent channel's keys");
            let base = base_id.and_then(SchemaKey::from_uuid);
            let looked_up = match client.by_id(key.id).await {
                Ok(resolved) => older_avro_reader(client, &resolved, base.as_ref())
                    .await
                    .map(|reader| (resolved, reader)),
                Err(e) => Err(e),
            };
            match looked_up {
                Ok((resolved, reader)) => Ok(Ok(confluent_candidate(
                    &resolved,
                    reader.as_deref(),
                    key,
                    client.subject(),
                    channel,
                ))),
                Err(confluent::RegistryError::NotFound(_)) => Ok(Err(confluent::unknown_id(&key))),
                Err(error) => Err(PayloadError::ConfluentRegistry { id: key.id, error }),
            }
        }
    }
}

/// A schema version met in a record, looked up and mapped, as the evolution decides on it.
#[derive(Debug)]
pub struct Candidate {
    /// Its id: a Glue `SchemaVersionId`, or a Confluent [`SchemaKey`] packed into a UUID.
    pub id: Uuid,
    /// Its number: the Glue `VersionNumber`, or its version of the channel's subject (0 for a
    /// schema of another subject).
    pub number: i64,
    /// How messages name it: `schema version N (ID)`, `schema id N`.
    pub label: String,
    /// Its mapped schema, or why its records go to the DLQ (another schema's, unmappable).
    pub mapped: Result<Arc<MappedSchema>, DlqReason>,
}

/// Glue version `id` and, on a `gsr_avro` channel (`channel` decodes Avro) when it is an older
/// version of the schema than the channel's base `base_id` (the version the table was created or
/// evolved from), the base as the Avro reader schema its records are resolved against, so that
/// the fields it lacks take the reader's defaults (Avro 1.11 "Schema Resolution").
///
/// Errors: the lookups (cached for the process, the base's since activation).
async fn glue_version_and_reader(
    registry: &gsr::RegistryClient,
    id: Uuid,
    base_id: Option<Uuid>,
    channel: &MappedSchema,
) -> Result<
    (
        Arc<gsr::SchemaVersionInfo>,
        Option<Arc<gsr::SchemaVersionInfo>>,
    ),
    RegistryError,
> {
    let info = registry.by_id(id).await?;
    let avro = matches!(channel.decoding(), Decoding::Avro(_));
    let Some(base_id) = base_id.filter(|b| avro && *b != id) else {
        return Ok((info, None));
    };
    let base = registry.by_id(base_id).await?;
    let older = base.schema_arn == info.schema_arn && info.version_number < base.version_number;
    Ok((info, older.then_some(base)))
}

/// A Glue version `info` of the channel's schema `schema_arn`, mapped as JSON Schema or, on a
/// `gsr_avro` channel (`channel` decodes Avro), as Avro: read through `reader` when it is an
/// older version than the channel's base ([`glue_version_and_reader`]).
pub fn glue_candidate(
    info: &gsr::SchemaVersionInfo,
    reader: Option<&gsr::SchemaVersionInfo>,
    schema_arn: &str,
    channel: &MappedSchema,
) -> Candidate {
    let partition_field = channel.partition_field();
    let label = format!(
        "schema version {} ({})",
        info.version_number, info.version_id
    );
    let mapped = if info.schema_arn != schema_arn {
        Err(mismatch(format!(
            "{label} is a version of {}, not of the channel's schema {schema_arn}",
            info.schema_arn
        )))
    } else if matches!(channel.decoding(), Decoding::Avro(_)) {
        match reader {
            Some(reader) => map_glue_avro_resolved(info, reader, partition_field),
            None => map_glue_version(info, true, partition_field),
        }
        .map(Arc::new)
        .map_err(|e| {
            mismatch(format!(
                "{label} cannot be mapped to an Iceberg schema: {e}"
            ))
        })
    } else {
        json_schema_of(info)
            .map_err(|e| mismatch(format!("{label}: {e}")))
            .and_then(|doc| {
                MappedSchema::from_json_schema(&doc, partition_field).map_err(|e| {
                    mismatch(format!(
                        "{label} cannot be mapped to an Iceberg schema: {e}"
                    ))
                })
            })
            .map(Arc::new)
    };
    Candidate {
        id: info.version_id,
        number: info.version_number,
        label,
        mapped,
    }
}

/// The Avro reader schema records of `writer` are resolved against: the channel's base schema
/// (`base`, the subject's latest version at activation, which the table was created or evolved
/// from) when `writer` is an older version of the subject, so that the fields it lacks take the
/// reader's defaults (Avro 1.11 "Schema Resolution"). `None` for other formats and for versions
/// at or after the base (their own schema is the reader; the table evolves to it).
///
/// Errors: the base's lookup (cached for the process after activation, so a failure is rare).
async fn older_avro_reader(
    client: &confluent::ConfluentClient,
    writer: &confluent::ResolvedSchema,
    base: Option<&SchemaKey>,
) -> Result<Option<Arc<confluent::ResolvedSchema>>, confluent::RegistryError> {
    let Some(base) = base else {
        return Ok(None);
    };
    if writer.schema_type != confluent::SchemaType::Avro || base.id == writer.id {
        return Ok(None);
    }
    let reader = client.by_id(base.id).await?;
    let subject = client.subject();
    match (writer.version_in(subject), reader.version_in(subject)) {
        (Some(w), Some(r)) if w < r => Ok(Some(reader)),
        _ => Ok(None),
    }
}

/// A Confluent schema `resolved` met as `key` on a channel of `subject`: a version of another
/// subject is refused. An Avro writer older than the channel's base is read through `reader`
/// ([`older_avro_reader`]).
fn confluent_candidate(
    resolved: &confluent::ResolvedSchema,
    reader: Option<&confluent::ResolvedSchema>,
    key: SchemaKey,
    subject: &str,
    channel: &MappedSchema,
) -> Candidate {
    let partition_field = channel.partition_field();
    let number = resolved.version_in(subject);
    let label = match number {
        Some(n) => format!("{key} (version {n} of {subject})"),
        None => key.to_string(),
    };
    let channel_type = match channel.decoding() {
        Decoding::Avro(_) => confluent::SchemaType::Avro,
        Decoding::Protobuf(_) => confluent::SchemaType::Protobuf,
        Decoding::JsonSchema(_) => confluent::SchemaType::Json,
    };
    let choice = (resolved.schema_type == confluent::SchemaType::Protobuf)
        .then(|| MessageSelector::Indexes(key.indexes.clone()));
    let mapped = match number {
        None => Err(confluent::not_the_channels(resolved, &key, subject)),
        // A version of another schema type (the subject's compatibility allowed it): its
        // records cannot be read as the channel's format.
        Some(_) if resolved.schema_type != channel_type => Err(mismatch(format!(
            "{label} is a {} schema; the channel reads {}",
            resolved.schema_type.as_str(),
            channel_type.as_str()
        ))),
        Some(_) => match reader {
            Some(reader) => confluent::map_avro_resolved(resolved, reader, partition_field),
            None => confluent::map_schema(resolved, partition_field, choice.as_ref()),
        }
        .map(Arc::new)
        .map_err(|e| {
            mismatch(format!(
                "{label} cannot be mapped to an Iceberg schema: {e}"
            ))
        }),
    };
    Candidate {
        id: key.to_uuid().expect("a key from a record"),
        number: number.unwrap_or(0),
        label,
        mapped,
    }
}
