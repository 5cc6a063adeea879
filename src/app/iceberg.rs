//! Wiring of a channel with an Iceberg destination, before its tasks start: its schema (a file,
//! or a registry version resolved at activation and then following the table's current one),
//! catalog, table, DLQ, record decoder and schema evolution.

use std::sync::Arc;

use iceberg::table::Table;
use iceberg::{NamespaceIdent, TableIdent};

use crate::aws::AwsClients;
use crate::channel::activate;
use crate::config::{
    ChannelConfig, DlqConfig, DlqLocation, IcebergDestinationConfig, RecordFormat, SchemaConfig,
    SchemaEvolution,
};
use crate::dlq::{Dlq, LocalDlq, S3Dlq};
use crate::iceberg::evolve::VersionRef;
use crate::iceberg::writer::{ParquetCompression, WriterSettings};
use crate::iceberg::{EvolutionSettings, IcebergIo};
use crate::lease::{ChannelState, Store};
use crate::registry::channel_schema::{load_channel_schema, ChannelRegistry};
use crate::registry::decoder::RecordDecoder;
use crate::registry::framing::gsr::GsrDecoder;
use crate::schema::MappedSchema;
use crate::worker::ChannelIo;

use super::{
    activate_err, channel_err, initial_position_of, open_source, register_fan_out, AppError,
    PreparedChannel, SharedClients,
};

/// Loads the schema, opens the catalog and the source, activates the channel (records its
/// activation time in the lease store on first start) and creates its table.
///
/// Errors: [`AppError::ChannelRefused`] or [`AppError::ChannelUnavailable`], naming the channel
/// and the reason.
pub(super) async fn prepare_iceberg(
    index: usize,
    config: &ChannelConfig,
    dest: &IcebergDestinationConfig,
    store: &dyn Store,
    aws: &AwsClients,
    shared: &SharedClients,
) -> Result<PreparedChannel, AppError> {
    let name = config.name.as_str();
    let (Some(schema_config), Some(dlq_config)) = (&config.schema, &config.dlq) else {
        return Err(channel_err(
            name,
            "an Iceberg channel needs a schema and a DLQ",
        ));
    };
    // A schema file is checked before activation; a Glue schema is resolved at activation.
    let registry = ChannelRegistry::of(config, || aws.glue()).map_err(|e| channel_err(name, e))?;
    let file_schema = match registry {
        Some(_) => None,
        None => Some(
            load_channel_schema(config, None, None)
                .await
                .map_err(|e| channel_err(name, e))?,
        ),
    };
    let (catalog, swap) = shared
        .catalog(index, config, aws)
        .await
        .map_err(|e| activate_err(name, e))?;
    // Refused before activation (see `open_source`).
    let source = open_source(index, config, aws, shared)?;
    let ident = TableIdent::new(
        NamespaceIdent::new(dest.namespace.clone()),
        dest.table.clone(),
    );
    // Activation: the first worker records the activation time; every worker starts shards
    // without a checkpoint from it (docs/design.md protocol step 9).
    let mut state = activate::record_activation(store, name)
        .await
        .map_err(|e| activate_err(name, e))?;
    // FAILED, SUSPENDED, DELETING and CREATING channels are refused (see `channel`).
    if let crate::channel::RunDecision::Refuse(message) = crate::channel::run_decision(Some(&state))
    {
        return Err(channel_err(name, message));
    }
    let source = register_fan_out(config, aws, source).await?;
    let channel_schema = match file_schema {
        Some(s) => s,
        None => activate::resolve_schema(index, config, store, &mut state, registry.as_ref())
            .await
            .map_err(|e| activate_err(name, e))?,
    };
    let schema = Arc::new(channel_schema.mapped);
    let table = activate::ensure_channel_table(
        index,
        config,
        store,
        &mut state,
        catalog.as_ref(),
        &schema,
        aws,
    )
    .await
    .map_err(|e| activate_err(name, e))?;
    let mut version = StartVersion {
        schema,
        base: version_ref(channel_schema.version_id, channel_schema.version_number),
        label: channel_schema.label,
    };
    if let Some(registry) = &registry {
        version
            .follow_table(index, config, registry, &table, store, &mut state)
            .await?;
    }
    let evolution = evolution_settings(config, schema_config, registry.as_ref(), version.base);
    let initial_position = initial_position_of(config, &state);
    let dlq = open_dlq(dlq_config, name, aws);
    crate::telemetry::set_channel_info(name, config.record.format.as_str(), &ident.to_string());
    let record_decoder = record_decoder(
        config,
        registry.as_ref(),
        version.base.map(|b| b.id).or(channel_schema.version_id),
        channel_schema.other_versions,
    )?;
    Ok(PreparedChannel {
        config: config.clone(),
        io: ChannelIo::iceberg(
            source,
            IcebergIo {
                catalog,
                ident,
                schema: version.schema,
                dlq,
                writer: WriterSettings {
                    channel: name.to_string(),
                    compression: ParquetCompression::from(&dest.compression),
                    target_file_size: dest.target_file_size,
                    max_open_partitions: dest.max_open_partitions as usize,
                },
                record_decoder,
                maintenance: dest.maintenance,
                swap,
                lister: orphan_lister(&dest.catalog, aws),
                evolution,
                route: config.member_route().map(|(route, table)| {
                    Arc::new(crate::convert::route::Router::new(
                        route,
                        table,
                        config.record.max_record_size as usize,
                    ))
                }),
                changes: change_settings(config),
            },
        ),
        initial_position,
        schema_label: version.label,
    })
}

/// The schema version a channel starts delivering with: the one activation resolved, or the
/// table's current one where the table evolved past it.
struct StartVersion {
    /// The mapped schema records are converted with.
    schema: Arc<MappedSchema>,
    /// The registry version it is (`None` for a schema file).
    base: Option<VersionRef>,
    /// Where the schema came from, for DLQ entries and logs.
    label: String,
}

impl StartVersion {
    /// Where the table evolved past the version this start resolved (evolution on now, or
    /// before it was switched off), takes the table's current version: the channel's version
    /// from the first record on. Records the table's version in the channel's state.
    ///
    /// Errors: [`AppError::ChannelRefused`] or [`AppError::ChannelUnavailable`] when the
    /// table's version cannot be loaded from the registry.
    async fn follow_table(
        &mut self,
        index: usize,
        config: &ChannelConfig,
        registry: &ChannelRegistry,
        table: &Table,
        store: &dyn Store,
        state: &mut ChannelState,
    ) -> Result<(), AppError> {
        if let Some(current) =
            activate::table_version_schema(index, config, registry, table, self.base.map(|b| b.id))
                .await
                .map_err(|e| activate_err(&config.name, e))?
        {
            self.schema = Arc::new(current.mapped);
            self.base = version_ref(current.version_id, current.version_number);
            self.label = current.label;
        }
        activate::follow_table_version(store, state, table).await;
        Ok(())
    }
}

/// A registry version from its id and number, when both are known.
fn version_ref(id: Option<uuid::Uuid>, number: Option<i64>) -> Option<VersionRef> {
    id.zip(number).map(|(id, number)| VersionRef { id, number })
}

/// How the channel's records carry changes and how its table takes them: `None` for a channel
/// without an envelope in append mode (every record is a row to append).
fn change_settings(config: &ChannelConfig) -> Option<crate::iceberg::changes::ChangeSettings> {
    let dest = config.destination.iceberg()?;
    let envelope = config.record.envelope;
    if envelope == crate::config::Envelope::None && dest.mode == crate::config::WriteMode::Append {
        return None;
    }
    Some(crate::iceberg::changes::ChangeSettings {
        envelope,
        mode: dest.mode,
        key: dest.key.clone(),
    })
}

/// How the channel's table follows new registry versions: `None` unless the schema comes from
/// a registry with `evolution = "compatible"`.
fn evolution_settings(
    config: &ChannelConfig,
    schema_config: &SchemaConfig,
    registry: Option<&ChannelRegistry>,
    base: Option<VersionRef>,
) -> Option<EvolutionSettings> {
    match (schema_config, registry) {
        (
            SchemaConfig::Glue {
                schema_arn,
                evolution: SchemaEvolution::Compatible,
                poll_interval,
                ..
            },
            Some(registry),
        ) => Some(EvolutionSettings {
            schema_arn: schema_arn.clone(),
            registry: registry.clone(),
            base,
            poll_latest: (config.record.format == RecordFormat::Json).then_some(*poll_interval),
        }),
        (SchemaConfig::Confluent(c), Some(registry))
            if c.evolution == SchemaEvolution::Compatible =>
        {
            Some(EvolutionSettings {
                schema_arn: c.subject.clone(),
                registry: registry.clone(),
                base,
                poll_latest: None,
            })
        }
        _ => None,
    }
}

/// The channel's DLQ, where its configuration puts it.
fn open_dlq(dlq_config: &DlqConfig, channel: &str, aws: &AwsClients) -> Dlq {
    match &dlq_config.location {
        DlqLocation::Local(path) => LocalDlq::new(path, channel).into(),
        DlqLocation::S3(location) => S3Dlq::new(aws.s3(), location.clone(), channel).into(),
    }
}

/// How the channel's records are framed and decoded, by `record.format`: `channel_key` is the
/// channel's schema version, `other_versions` the versions listed offline.
///
/// Errors: [`AppError::ChannelRefused`] for a Confluent format without a Confluent registry.
fn record_decoder(
    config: &ChannelConfig,
    registry: Option<&ChannelRegistry>,
    channel_key: Option<uuid::Uuid>,
    other_versions: Vec<uuid::Uuid>,
) -> Result<RecordDecoder, AppError> {
    Ok(match config.record.format {
        RecordFormat::Json => RecordDecoder::Json,
        RecordFormat::GsrJson | RecordFormat::GsrAvro => RecordDecoder::Gsr {
            decoder: GsrDecoder::new(
                channel_key,
                other_versions,
                config.record.max_record_size as usize,
            ),
            registry: registry.and_then(|r| r.glue().cloned()),
        },
        RecordFormat::Avro | RecordFormat::Protobuf | RecordFormat::JsonSr => {
            let (Some(ChannelRegistry::Confluent(client)), Some(channel_key)) =
                (registry, channel_key)
            else {
                return Err(channel_err(
                    &config.name,
                    "record.format avro, protobuf and json_sr need [channel.schema] registry_url",
                ));
            };
            RecordDecoder::Confluent {
                protobuf: config.record.format == RecordFormat::Protobuf,
                channel_key,
                client: client.clone(),
            }
        }
    })
}

/// How the orphan sweep lists the tables of `catalog`: where floe writes the table files itself
/// (SQL: the local directory or the `s3://` warehouse; Glue: S3). REST servers and S3 Tables
/// manage their storage: no sweep.
fn orphan_lister(
    catalog: &crate::config::CatalogConfig,
    aws: &crate::aws::AwsClients,
) -> Option<crate::iceberg::orphans::FileLister> {
    use crate::config::{CatalogConfig, Warehouse};
    use crate::iceberg::orphans::FileLister;
    match catalog {
        CatalogConfig::Sql(sql) => Some(match &sql.warehouse {
            Warehouse::Local(_) => FileLister::Local,
            Warehouse::S3(_) => FileLister::S3(aws.s3()),
        }),
        CatalogConfig::Glue(_) => Some(FileLister::S3(aws.s3())),
        CatalogConfig::Rest(_) | CatalogConfig::S3Tables(_) => None,
    }
}
