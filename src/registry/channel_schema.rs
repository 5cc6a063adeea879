//! A channel's schema at activation, from wherever `[channel.schema]` says it comes from: a
//! file (with `[channel.schema.versions]` listing a registry's versions offline), the Glue Schema
//! Registry, or a Confluent-compatible registry ([`ChannelRegistry`], the registry client of the
//! channel). A schema that cannot be loaded is [`SchemaLoadError::Refused`] (the channel cannot
//! run) or [`SchemaLoadError::Unavailable`] (retry).
//!
//! ```text
//!  [channel.schema] file ──────────────> read, map ─────────────────────────┐
//!                   file + versions ───> read all, the channel's = equal doc ┤
//!                   glue_schema_arn ───> recorded id | N | latest (gsr/) ────┼─> ChannelSchema
//!                   registry_url ──────> recorded key | latest (confluent/) ─┘    (mapped schema,
//!                                                                                  version id, label)
//! ```

use std::path::Path;
use std::sync::Arc;

use serde_json::Value;
use uuid::Uuid;

use crate::config::{ChannelConfig, SchemaConfig};
use crate::registry::gsr::{RegistryClient, RegistryError, SchemaVersionInfo};
use crate::schema::MappedSchema;

/// Splits a registry's versions listed offline into the channel's version (the first whose
/// document equals `channel_doc`) and the others.
pub fn split_versions(
    channel_doc: &Value,
    versions: impl IntoIterator<Item = (Uuid, Value)>,
) -> (Option<Uuid>, Vec<Uuid>) {
    let mut channel = None;
    let mut others = Vec::new();
    for (id, doc) in versions {
        if channel.is_none() && doc == *channel_doc {
            channel = Some(id);
        } else {
            others.push(id);
        }
    }
    (channel, others)
}

/// The registry a channel's schema versions come from.
#[derive(Debug, Clone)]
pub enum ChannelRegistry {
    /// The AWS Glue Schema Registry (`glue_schema_arn`).
    Glue(Arc<RegistryClient>),
    /// A Confluent-compatible registry (`registry_url`).
    Confluent(Arc<crate::registry::confluent::ConfluentClient>),
}

impl ChannelRegistry {
    /// The registry of channel `config`'s schema (Glue through `glue`), `None` for a schema file.
    ///
    /// Errors: [`SchemaLoadError::Refused`] when the Confluent client cannot be built
    /// (credentials in the environment, CA bundle).
    pub fn of(
        config: &ChannelConfig,
        glue: impl FnOnce() -> aws_sdk_glue::Client,
    ) -> Result<Option<ChannelRegistry>, SchemaLoadError> {
        Ok(match &config.schema {
            Some(SchemaConfig::Glue { schema_arn, .. }) => Some(ChannelRegistry::Glue(Arc::new(
                RegistryClient::glue(glue(), schema_arn),
            ))),
            Some(SchemaConfig::Confluent(c)) => Some(ChannelRegistry::Confluent(Arc::new(
                crate::registry::confluent::ConfluentClient::from_config(c)
                    .map_err(|e| SchemaLoadError::Refused(e.to_string()))?,
            ))),
            _ => None,
        })
    }

    /// The Glue client, `None` for a Confluent registry.
    pub fn glue(&self) -> Option<&Arc<RegistryClient>> {
        match self {
            ChannelRegistry::Glue(g) => Some(g),
            ChannelRegistry::Confluent(_) => None,
        }
    }
}

/// Loads the schema `key` of a Confluent registry ([`crate::registry::framing::confluent::SchemaKey`] packed in a
/// UUID), or the subject's latest version when `key` is `None`, and maps it. A recorded key
/// must be a version of the channel's subject, and of the schema type `format` reads (`avro`:
/// AVRO, `protobuf`: PROTOBUF, `json_sr`: JSON).
///
/// Errors: [`SchemaLoadError`] naming the subject and id (and `channel.record.format` when the
/// schema type differs).
pub async fn load_confluent_schema(
    config: &crate::config::ConfluentSchemaConfig,
    format: crate::config::RecordFormat,
    partition_field: &str,
    key: Option<Uuid>,
    client: &crate::registry::confluent::ConfluentClient,
) -> Result<ChannelSchema, SchemaLoadError> {
    use crate::registry::confluent::{map_schema, RegistryError as E, SchemaType};
    use crate::registry::framing::confluent::SchemaKey;
    use crate::schema::protobuf::MessageSelector;
    let subject = &config.subject;
    // A refusal (401, 403: credentials) is this worker's to fix, not the channel's: retried like
    // an outage, never a FAILED channel. Only a missing subject, version or id is definitive.
    let unavailable = |e: E| match e {
        E::NotFound(_) => SchemaLoadError::Refused(format!("subject {subject}: {e}")),
        e => SchemaLoadError::Unavailable(format!("subject {subject}: {e}")),
    };
    let (resolved, indexes) = match key {
        Some(k) => {
            let Some(k) = SchemaKey::from_uuid(k) else {
                return Err(SchemaLoadError::Refused(format!(
                    "the recorded schema version {k} is not a Confluent schema id (the channel was created with another registry: delete and create the channel)"
                )));
            };
            (client.by_id(k.id).await.map_err(unavailable)?, k.indexes)
        }
        None => (client.latest().await.map_err(unavailable)?, Vec::new()),
    };
    let Some(version) = resolved.version_in(subject) else {
        return Err(SchemaLoadError::Refused(format!(
            "schema id {} is not a version of the channel's subject {subject}",
            resolved.id
        )));
    };
    let expected = match format {
        crate::config::RecordFormat::Avro => Some(SchemaType::Avro),
        crate::config::RecordFormat::Protobuf => Some(SchemaType::Protobuf),
        crate::config::RecordFormat::JsonSr => Some(SchemaType::Json),
        _ => None,
    };
    if expected.is_some_and(|t| t != resolved.schema_type) {
        return Err(SchemaLoadError::Refused(format!(
            "subject {subject} version {version} (schema id {}) is a {} schema; channel.record.format = \"{}\" reads {} schemas",
            resolved.id,
            resolved.schema_type.as_str(),
            format.as_str(),
            expected.map_or("", |t| t.as_str()),
        )));
    }
    let choice = match (resolved.schema_type, &config.message) {
        (SchemaType::Protobuf, _) if !indexes.is_empty() => Some(MessageSelector::Indexes(indexes)),
        (SchemaType::Protobuf, Some(name)) => Some(MessageSelector::Name(name.clone())),
        (SchemaType::Protobuf, None) => Some(MessageSelector::Indexes(vec![0])),
        _ => None,
    };
    let mapped = map_schema(&resolved, partition_field, choice.as_ref()).map_err(|e| {
        SchemaLoadError::Refused(format!("subject {subject} version {version}: {e}"))
    })?;
    let key = SchemaKey {
        id: resolved.id,
        indexes: match &choice {
            Some(MessageSelector::Indexes(i)) => i.clone(),
            Some(MessageSelector::Name(name)) => {
                crate::registry::confluent::message_indexes(&resolved, name).map_err(|e| {
                    SchemaLoadError::Refused(format!("subject {subject} version {version}: {e}"))
                })?
            }
            None => Vec::new(),
        },
    };
    let uuid = key.to_uuid().ok_or_else(|| {
        SchemaLoadError::Refused(format!("{key}: message indexes beyond what floe records"))
    })?;
    Ok(ChannelSchema {
        mapped,
        version_id: Some(uuid),
        version_number: Some(version),
        other_versions: Vec::new(),
        label: format!("{subject} version {version} ({key})"),
    })
}

/// A channel's schema, resolved at activation.
#[derive(Debug)]
pub struct ChannelSchema {
    /// The mapped schema the table is created from and records are converted with.
    pub mapped: MappedSchema,
    /// The schema version id (Glue, or the matching `[channel.schema.versions]` entry).
    pub version_id: Option<Uuid>,
    /// The Glue `VersionNumber` of the version (Glue schemas only).
    pub version_number: Option<i64>,
    /// The registry's other versions listed offline (`[channel.schema.versions]`).
    pub other_versions: Vec<Uuid>,
    /// Where the schema came from, for DLQ entries and logs (a path or `ARN@version-id`).
    pub label: String,
}

/// Why a channel's schema cannot be loaded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SchemaLoadError {
    /// Missing, not JSON Schema, or refused by the mapping: the channel cannot run (for a Glue
    /// schema, the channel is FAILED with this reason).
    #[error("{0}")]
    Refused(String),
    /// The registry could not be reached: retry.
    #[error("{0}")]
    Unavailable(String),
}

fn read_json(path: &Path) -> Result<Value, SchemaLoadError> {
    let text = std::fs::read(path)
        .map_err(|e| SchemaLoadError::Refused(format!("schema file {}: {e}", path.display())))?;
    serde_json::from_slice(&text).map_err(|e| {
        SchemaLoadError::Refused(format!("schema file {} is not JSON: {e}", path.display()))
    })
}

/// The Iceberg-mappable JSON Schema of a registry version; refuses formats other than JSON.
///
/// Errors: [`SchemaLoadError::Refused`] naming the version.
pub fn json_schema_of(v: &SchemaVersionInfo) -> Result<Value, SchemaLoadError> {
    if v.data_format != "JSON" {
        return Err(SchemaLoadError::Refused(format!(
            "schema {} version {} ({}) has data format {}: Iceberg destinations take JSON Schema only",
            v.schema_arn, v.version_number, v.version_id, v.data_format
        )));
    }
    serde_json::from_str(&v.definition).map_err(|e| {
        SchemaLoadError::Refused(format!(
            "schema {} version {}: the definition is not JSON: {e}",
            v.schema_arn, v.version_number
        ))
    })
}

/// Maps Glue version `v`: a JSON Schema, or with `avro` (`record.format = "gsr_avro"`) an Avro
/// schema; the version's data format must be the channel's.
///
/// Errors: [`SchemaLoadError::Refused`] naming the version.
pub fn map_glue_version(
    v: &SchemaVersionInfo,
    avro: bool,
    partition_field: &str,
) -> Result<MappedSchema, SchemaLoadError> {
    let origin = format!("{} version {}", v.schema_arn, v.version_number);
    if !avro {
        let doc = json_schema_of(v)?;
        return MappedSchema::from_json_schema(&doc, partition_field)
            .map_err(|e| SchemaLoadError::Refused(format!("schema {origin}: {e}")));
    }
    if v.data_format != "AVRO" {
        return Err(SchemaLoadError::Refused(format!(
            "schema {origin} ({}) has data format {}: record.format = \"gsr_avro\" takes AVRO schemas",
            v.version_id, v.data_format
        )));
    }
    MappedSchema::from_avro(&v.definition, &[], partition_field)
        .map_err(|e| SchemaLoadError::Refused(format!("schema {origin}: {e}")))
}

/// Maps Avro Glue version `writer` read through version `reader` (Avro 1.11 "Schema
/// Resolution": the fields `writer` lacks take `reader`'s defaults) unless that would skip a
/// field `writer` has ([`MappedSchema::from_avro_older`]).
///
/// Errors: [`SchemaLoadError::Refused`] naming both versions.
pub fn map_glue_avro_resolved(
    writer: &SchemaVersionInfo,
    reader: &SchemaVersionInfo,
    partition_field: &str,
) -> Result<MappedSchema, SchemaLoadError> {
    for v in [writer, reader] {
        if v.data_format != "AVRO" {
            return Err(SchemaLoadError::Refused(format!(
                "schema {} version {} ({}) has data format {}: record.format = \"gsr_avro\" takes AVRO schemas",
                v.schema_arn, v.version_number, v.version_id, v.data_format
            )));
        }
    }
    MappedSchema::from_avro_older(
        &writer.definition,
        &[],
        &reader.definition,
        &[],
        partition_field,
    )
    .map_err(|e| {
        SchemaLoadError::Refused(format!(
            "schema {} version {} read as version {}: {e}",
            writer.schema_arn, writer.version_number, reader.version_number
        ))
    })
}

/// Loads channel `config`'s schema: from its file (and `[channel.schema.versions]`), or from the
/// Glue Schema Registry — the version `recorded` at activation when there is one, otherwise the
/// configured number or the latest.
///
/// Errors: [`SchemaLoadError`].
pub async fn load_channel_schema(
    config: &ChannelConfig,
    recorded: Option<Uuid>,
    registry: Option<&ChannelRegistry>,
) -> Result<ChannelSchema, SchemaLoadError> {
    let (Some(dest), Some(schema)) = (config.destination.iceberg(), &config.schema) else {
        return Err(SchemaLoadError::Refused(
            "a raw S3 channel has no schema".into(),
        ));
    };
    let map = |doc: &Value, origin: &str| {
        MappedSchema::from_json_schema(doc, &dest.partition_field)
            .map_err(|e| SchemaLoadError::Refused(format!("schema {origin}: {e}")))
    };
    match schema {
        SchemaConfig::File(file) => Ok(ChannelSchema {
            mapped: map(&read_json(file)?, &file.display().to_string())?,
            version_id: None,
            version_number: None,
            other_versions: Vec::new(),
            label: file.display().to_string(),
        }),
        SchemaConfig::FileVersions { file, versions } => {
            let doc = read_json(file)?;
            let mut listed = Vec::new();
            for (id, path) in versions {
                listed.push((*id, read_json(path)?));
            }
            let (channel, others) = split_versions(&doc, listed);
            let Some(id) = channel else {
                return Err(SchemaLoadError::Refused(format!(
                    "none of channel.schema.versions is the schema file {} (the channel's version is the one whose document equals it)",
                    file.display()
                )));
            };
            Ok(ChannelSchema {
                mapped: map(&doc, &file.display().to_string())?,
                version_id: Some(id),
                version_number: None,
                other_versions: others,
                label: id.to_string(),
            })
        }
        SchemaConfig::Confluent(c) => {
            let Some(ChannelRegistry::Confluent(client)) = registry else {
                return Err(SchemaLoadError::Unavailable(
                    "no schema registry client".to_string(),
                ));
            };
            load_confluent_schema(
                c,
                config.record.format,
                &dest.partition_field,
                recorded,
                client,
            )
            .await
        }
        SchemaConfig::Glue {
            schema_arn,
            version,
            ..
        } => {
            let registry = registry
                .and_then(ChannelRegistry::glue)
                .ok_or_else(|| SchemaLoadError::Unavailable("no Glue client".to_string()))?;
            let found = match recorded {
                Some(id) => registry.by_id(id).await,
                None => registry.by_arn(schema_arn, *version).await,
            };
            let v = found.map_err(|e| match e {
                RegistryError::Unavailable(_) => SchemaLoadError::Unavailable(e.to_string()),
                e => SchemaLoadError::Refused(match recorded {
                    Some(id) => format!("schema version {id} recorded at activation: {e}"),
                    None => format!("schema {schema_arn}, {version}: {e}"),
                }),
            })?;
            if v.schema_arn != *schema_arn {
                return Err(SchemaLoadError::Refused(format!(
                    "the channel was activated with schema version {} of {}, not of {schema_arn}: the schema of a channel does not change (delete and create the channel)",
                    v.version_id, v.schema_arn
                )));
            }
            let mapped = map_glue_version(
                &v,
                config.record.format == crate::config::RecordFormat::GsrAvro,
                &dest.partition_field,
            )?;
            Ok(ChannelSchema {
                mapped,
                version_id: Some(v.version_id),
                version_number: Some(v.version_number),
                other_versions: Vec::new(),
                label: v.version_id.to_string(),
            })
        }
    }
}
