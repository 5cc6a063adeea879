//! Wiring, supervision and shutdown of a worker process (`floe run`).
//!
//! One task per concern, all under a `TaskTracker`: per channel a lease manager, a shard
//! discovery loop, the worker loop (reads the leased shards) and the committer loop (active
//! while this worker holds the channel's committer lease). Shutdown has three phases:
//!
//! ```text
//!  SIGTERM ─> 1. stop reading      (worker loops stop polling)
//!             2. drain             (flush, hand off, wait for the commit; committers keep
//!                                   committing; bounded by shutdown_timeout)
//!             3. release leases    (another worker takes over at once), exit 0
//! ```

pub mod maintain;
mod routes;
mod topics;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use iceberg::{NamespaceIdent, TableIdent};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::aws::AwsClients;
use crate::channel::activate::{self, ActivateError};
use crate::commit::{CommitError, Committer};
use crate::config::{
    ChannelConfig, Config, DestinationConfig, DlqLocation, LeaseStoreBackend, LeaseStoreConfig,
    RecordFormat, SchemaConfig, SourceConfig,
};
use crate::dlq::{Dlq, LocalDlq, S3Dlq};
use crate::iceberg::target::IcebergTarget;
use crate::iceberg::writer::{ParquetCompression, WriterSettings};
use crate::iceberg::IcebergIo;
use crate::lease::dynamodb::{DynamoDbLeaseStore, MissingTable};
use crate::lease::manager::{HeldLeases, LeaseManager, LeaseManagerConfig};
use crate::lease::sql::SqlLeaseStore;
use crate::lease::Store;
use crate::lease::{BatchStore, ChannelState, ChannelStatus, LeaseKey, LeaseSpec, LeaseStore};
use crate::raw::target::RawTarget;
use crate::raw::RawIo;
use crate::raw::RawStore;
use crate::registry::channel_schema::{load_channel_schema, ChannelRegistry};
use crate::registry::decoder::RecordDecoder;
use crate::registry::framing::gsr::GsrDecoder;
use crate::retry::Backoff;
use crate::source::kinesis::{efo, KinesisSource};
use crate::source::{InitialPosition, Source};
use crate::worker::{
    commit_spacing, ChannelIo, ChannelWorker, DestinationIo, WorkerError, WorkerSettings,
};

/// Errors that stop `floe run` (or `floe setup`) at start, shaped by what the operator does
/// next: fix something (`*Refused`, exit 78), or wait for a dependency (`*Unavailable`, exit 1;
/// floe already retried with backoff, a supervisor restarts it).
#[derive(Debug, thiserror::Error)]
pub enum AppError {
    /// A channel cannot start and retrying cannot help: its configuration, schema or table must
    /// change (or the channel is FAILED, SUSPENDED, DELETING).
    #[error("channel {channel}: {message}")]
    ChannelRefused {
        /// Channel name.
        channel: String,
        /// Why, naming the key to fix where there is one.
        message: String,
    },
    /// A dependency of a channel (catalog, lease store, registry, broker, S3) failed past the
    /// retries.
    #[error("channel {channel}: {message}")]
    ChannelUnavailable {
        /// Channel name.
        channel: String,
        /// What failed.
        message: String,
    },
    /// The lease store refuses: not a floe lease store, or it cannot be created.
    #[error("lease store: {0}")]
    LeaseStoreRefused(String),
    /// The lease store cannot be reached (locked, unreachable, throttled).
    #[error("lease store: {0}")]
    LeaseStoreUnavailable(String),
    /// The configuration uses AWS and the SDK's credential chain found no credentials: one line
    /// saying where floe looked and what to set ([`AppError::detail`] has the SDK's chain).
    #[error("{0}")]
    AwsCredentialsMissing(crate::aws::CredentialsMissing),
}

impl AppError {
    /// Whether retrying may succeed (a dependency was unavailable), as opposed to a
    /// configuration or data problem that needs an operator.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            AppError::ChannelUnavailable { .. } | AppError::LeaseStoreUnavailable(_)
        )
    }

    /// What the one-line message leaves out, for debug logs and `--log-format json`: the AWS
    /// SDK's whole chain of causes when no credentials were found.
    pub fn detail(&self) -> Option<&str> {
        match self {
            AppError::AwsCredentialsMissing(e) => Some(&e.chain),
            _ => None,
        }
    }

    /// The lease store's error, by its own decision ([`crate::lease::LeaseError::is_retryable`]).
    fn lease_store(e: crate::lease::LeaseError) -> Self {
        if e.is_retryable() {
            AppError::LeaseStoreUnavailable(e.to_string())
        } else {
            AppError::LeaseStoreRefused(e.to_string())
        }
    }
}

/// A permanent channel error (configuration, schema, table ownership).
fn channel_err(channel: &str, message: impl ToString) -> AppError {
    AppError::ChannelRefused {
        channel: channel.to_string(),
        message: message.to_string(),
    }
}

/// A channel error from a dependency that may recover (catalog, lease store, broker).
fn channel_unavailable(channel: &str, message: impl ToString) -> AppError {
    AppError::ChannelUnavailable {
        channel: channel.to_string(),
        message: message.to_string(),
    }
}

/// Retries `f` with exponential backoff (0.5 s doubling to 8 s, about 1 minute in all) while
/// its error is retryable and `stop` is not cancelled.
async fn with_retry<T, F, Fut>(
    what: &str,
    stop: &CancellationToken,
    mut f: F,
) -> Result<T, AppError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, AppError>>,
{
    let mut backoff = Backoff::new(Duration::from_millis(500), Duration::from_secs(8));
    let mut attempt = 1;
    loop {
        match f().await {
            Ok(v) => return Ok(v),
            Err(e) if e.is_retryable() && attempt < 10 && !stop.is_cancelled() => {
                let delay = backoff.next_delay();
                tracing::warn!(error = %e, attempt, "{what} failed; retrying in {delay:?}");
                tokio::select! {
                    _ = stop.cancelled() => return Err(e),
                    _ = tokio::time::sleep(delay) => {}
                }
                attempt += 1;
            }
            Err(e) => return Err(e),
        }
    }
}

/// A worker loop that ran at least this long before failing restarts after the first backoff
/// (0.5 s) again, not after the longest one reached by earlier failures.
const WORKER_BACKOFF_RESET: Duration = Duration::from_secs(60);

/// Everything a channel needs, prepared before its tasks start.
pub struct PreparedChannel {
    /// The channel's configuration.
    pub config: ChannelConfig,
    /// Its source, table and DLQ.
    pub io: ChannelIo,
    /// Where shards without a checkpoint start.
    pub initial_position: InitialPosition,
    /// The schema's origin recorded in DLQ entries (a file path, or the schema version id).
    pub schema_label: String,
}

/// Opens the configured lease store.
///
/// Errors: [`AppError::LeaseStoreRefused`] or [`AppError::LeaseStoreUnavailable`] when it cannot be opened.
pub async fn open_lease_store(
    config: &LeaseStoreConfig,
    aws: &AwsClients,
) -> Result<Arc<dyn Store>, AppError> {
    match &config.backend {
        LeaseStoreBackend::Sqlite { path } => {
            if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                std::fs::create_dir_all(dir).map_err(|e| {
                    AppError::LeaseStoreRefused(format!("cannot create {}: {e}", dir.display()))
                })?;
            }
            SqlLeaseStore::open_sqlite(path)
                .await
                .map(|s| Arc::new(s) as Arc<dyn Store>)
                .map_err(AppError::lease_store)
        }
        LeaseStoreBackend::Dynamodb {
            table,
            create_lease_table,
        } => {
            let missing = if *create_lease_table {
                MissingTable::Create
            } else {
                MissingTable::Refuse
            };
            DynamoDbLeaseStore::open(aws.dynamodb(), table, missing)
                .await
                .map(|s| Arc::new(s) as Arc<dyn Store>)
                .map_err(AppError::lease_store)
        }
        LeaseStoreBackend::Postgres(options) => SqlLeaseStore::open_postgres(options)
            .await
            .map(|s| Arc::new(s) as Arc<dyn Store>)
            .map_err(AppError::lease_store),
    }
}

/// `floe setup`: creates the lease store (the DynamoDB table, on-demand billing, or the SQLite
/// file) when missing and checks it. Returns what was done, for the operator.
///
/// Errors: [`AppError::AwsCredentialsMissing`] when the configuration uses AWS and there are no
/// credentials; [`AppError::LeaseStoreRefused`] or [`AppError::LeaseStoreUnavailable`] when it cannot be created or is not a floe lease store.
pub async fn setup(config: &Config) -> Result<String, AppError> {
    let aws = AwsClients::for_config(config).await;
    aws.check_credentials()
        .await
        .map_err(AppError::AwsCredentialsMissing)?;
    let mut lease_store = config.lease_store.clone();
    match &mut lease_store.backend {
        LeaseStoreBackend::Dynamodb {
            create_lease_table, ..
        } => *create_lease_table = true,
        LeaseStoreBackend::Postgres(options) => options.create_tables = true,
        LeaseStoreBackend::Sqlite { .. } => {}
    }
    open_lease_store(&lease_store, &aws).await?;
    Ok(match &lease_store.backend {
        LeaseStoreBackend::Sqlite { path } => {
            format!("lease store ready: SQLite file {}", path.display())
        }
        LeaseStoreBackend::Dynamodb { table, .. } => format!(
            "lease store ready: DynamoDB table {table} in {}",
            aws.region().unwrap_or("the default region")
        ),
        LeaseStoreBackend::Postgres(options) => format!(
            "lease store ready: PostgreSQL schema {} at {} (tables at version {})",
            options.schema,
            crate::lease::sql::redact_url(&options.url),
            crate::lease::sql::SCHEMA_VERSION
        ),
    })
}

/// Loads the schema, opens the catalog and the source, activates the channel (records its
/// activation time in the lease store on first start) and creates its table; for a raw S3
/// destination, activates it, opens the source and checks the bucket accepts a staged put.
///
/// Errors: [`AppError::ChannelRefused`] or [`AppError::ChannelUnavailable`], naming the channel and the reason.
pub async fn prepare_channel(
    index: usize,
    config: &ChannelConfig,
    store: &dyn Store,
    aws: &AwsClients,
) -> Result<PreparedChannel, AppError> {
    match &config.destination {
        DestinationConfig::Iceberg(dest) => prepare_iceberg(index, config, dest, store, aws).await,
        DestinationConfig::S3(dest) => prepare_raw(config, dest, store, aws).await,
    }
}

async fn prepare_raw(
    config: &ChannelConfig,
    dest: &crate::config::raw::RawDestinationConfig,
    store: &dyn Store,
    aws: &AwsClients,
) -> Result<PreparedChannel, AppError> {
    let name = config.name.as_str();
    // Everything this worker could refuse is checked before the channel's state changes.
    let source = open_source(config, aws)?;
    let raw = RawStore::new(aws.s3(), dest.location.clone(), name);
    raw.check_writable().await.map_err(|e| {
        let message = format!(
            "bucket {} does not accept a staged object: {e}",
            dest.location.bucket
        );
        if e.kind() == std::io::ErrorKind::PermissionDenied {
            // Retrying cannot help: exit 78 for the operator.
            channel_err(
                name,
                format!("{message} (check channel.destination.expected_bucket_owner and this worker's s3:PutObject permission)"),
            )
        } else {
            channel_unavailable(name, message)
        }
    })?;
    let state = activate::record_activation(store, name)
        .await
        .map_err(|e| activate_err(name, e))?;
    if let crate::channel::RunDecision::Refuse(message) = crate::channel::run_decision(Some(&state))
    {
        return Err(channel_err(name, message));
    }
    let source = register_fan_out(config, aws, source).await?;
    let initial_position = initial_position_of(config, &state);
    Ok(PreparedChannel {
        config: config.clone(),
        io: ChannelIo {
            source,
            destination: DestinationIo::Raw(RawIo {
                store: raw,
                config: Arc::new(dest.clone()),
            }),
        },
        initial_position,
        schema_label: String::new(),
    })
}

/// The channel's source. Built before the channel's state is touched: a source this worker
/// refuses (a client property librdkafka rejects) must stop it before it records an activation.
///
/// Errors: [`AppError::ChannelRefused`] naming the channel and the reason.
fn open_source(config: &ChannelConfig, aws: &AwsClients) -> Result<Arc<dyn Source>, AppError> {
    let name = config.name.as_str();
    Ok(match &config.source {
        SourceConfig::Kafka(kafka) => crate::source::kafka::open_channel_source(name, kafka)
            .map_err(|e| channel_err(name, e))?,
        SourceConfig::Kinesis(kinesis) => Arc::new(KinesisSource::new(aws.kinesis(), kinesis)),
    })
}

/// The source a channel reads with, once its state lets it run: for a Kinesis channel with
/// `read_mode = "enhanced_fan_out"`, registers its stream consumer (idempotent; waits until it is
/// ACTIVE) and returns the source subscribing as it; `source` unchanged otherwise. Registered
/// only after the run decision, so a worker of a deleted channel does not register the consumer
/// `floe channel delete` deregistered.
///
/// Errors: [`AppError::ChannelRefused`] for a stream with its 20 consumers, a consumer being
/// deleted, a missing stream or access denied; [`AppError::ChannelUnavailable`] when the service
/// fails.
async fn register_fan_out(
    config: &ChannelConfig,
    aws: &AwsClients,
    source: Arc<dyn Source>,
) -> Result<Arc<dyn Source>, AppError> {
    let name = config.name.as_str();
    let Some((kinesis, stream, consumer_name)) = efo::channel_consumer(config) else {
        return Ok(source);
    };
    let client = aws.kinesis();
    let consumer = efo::register_consumer(
        &client,
        &stream,
        &consumer_name,
        "channel.source.consumer_name",
        efo::CONSUMER_ACTIVE_TIMEOUT,
    )
    .await
    .map_err(|e| match e {
        efo::ConsumerError::Refused(m) | efo::ConsumerError::MissingStream(m) => {
            channel_err(name, m)
        }
        efo::ConsumerError::Unavailable(m) => channel_unavailable(name, m),
    })?;
    Ok(Arc::new(
        KinesisSource::new(client, kinesis).with_fan_out(consumer.arn, name),
    ))
}

/// Where the shards of a channel without a checkpoint start, from its recorded state.
fn initial_position_of(config: &ChannelConfig, state: &ChannelState) -> InitialPosition {
    let initial = match &config.source {
        SourceConfig::Kafka(kafka) => kafka.initial_position,
        SourceConfig::Kinesis(kinesis) => kinesis.initial_position,
    };
    match initial {
        crate::config::InitialPosition::Earliest => InitialPosition::Earliest,
        // A member of a topic that appeared after its channel's activation: from the first
        // record, whatever the records' timestamps.
        crate::config::InitialPosition::ActivationTime if state.from_first_record => {
            InitialPosition::Earliest
        }
        crate::config::InitialPosition::ActivationTime => {
            InitialPosition::AtTimestamp(state.activated_at_ms.unwrap_or(0))
        }
    }
}

async fn prepare_iceberg(
    index: usize,
    config: &ChannelConfig,
    dest: &crate::config::IcebergDestinationConfig,
    store: &dyn Store,
    aws: &AwsClients,
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
    let (catalog, swap) = activate::open_catalog_and_swap(index, config, aws)
        .await
        .map_err(|e| activate_err(name, e))?;
    // Refused before activation (see `open_source`).
    let source = open_source(config, aws)?;
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
    let mut schema = Arc::new(channel_schema.mapped);
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
    let mut base = match (channel_schema.version_id, channel_schema.version_number) {
        (Some(id), Some(number)) => Some(crate::iceberg::evolve::VersionRef { id, number }),
        _ => None,
    };
    let mut schema_label = channel_schema.label;
    if let Some(registry) = &registry {
        // The table evolved past the version this start resolved (evolution on now, or before
        // it was switched off): the channel's version is the table's current one, from the
        // first record on.
        if let Some(current) =
            activate::table_version_schema(index, config, registry, &table, base.map(|b| b.id))
                .await
                .map_err(|e| activate_err(name, e))?
        {
            schema = Arc::new(current.mapped);
            base = current
                .version_id
                .zip(current.version_number)
                .map(|(id, number)| crate::iceberg::evolve::VersionRef { id, number });
            schema_label = current.label;
        }
        activate::follow_table_version(store, &mut state, &table).await;
    }
    let evolution = match (schema_config, &registry) {
        (
            SchemaConfig::Glue {
                schema_arn,
                evolution: crate::config::SchemaEvolution::Compatible,
                poll_interval,
                ..
            },
            Some(registry),
        ) => Some(crate::iceberg::EvolutionSettings {
            schema_arn: schema_arn.clone(),
            registry: registry.clone(),
            base,
            poll_latest: (config.record.format == RecordFormat::Json).then_some(*poll_interval),
        }),
        (SchemaConfig::Confluent(c), Some(registry))
            if c.evolution == crate::config::SchemaEvolution::Compatible =>
        {
            Some(crate::iceberg::EvolutionSettings {
                schema_arn: c.subject.clone(),
                registry: registry.clone(),
                base,
                poll_latest: None,
            })
        }
        _ => None,
    };
    let initial_position = initial_position_of(config, &state);
    let dlq: Dlq = match &dlq_config.location {
        DlqLocation::Local(path) => LocalDlq::new(path, name).into(),
        DlqLocation::S3(location) => S3Dlq::new(aws.s3(), location.clone(), name).into(),
    };
    crate::telemetry::set_channel_info(name, config.record.format.as_str(), &ident.to_string());
    let record_decoder = match config.record.format {
        RecordFormat::Json => RecordDecoder::Json,
        RecordFormat::GsrJson | RecordFormat::GsrAvro => RecordDecoder::Gsr {
            decoder: GsrDecoder::new(
                base.map(|b| b.id).or(channel_schema.version_id),
                channel_schema.other_versions,
                config.record.max_record_size as usize,
            ),
            registry: registry.as_ref().and_then(|r| r.glue().cloned()),
        },
        RecordFormat::Avro | RecordFormat::Protobuf | RecordFormat::JsonSr => {
            let (Some(ChannelRegistry::Confluent(client)), Some(channel_key)) =
                (&registry, base.map(|b| b.id).or(channel_schema.version_id))
            else {
                return Err(channel_err(
                    name,
                    "record.format avro, protobuf and json_sr need [channel.schema] registry_url",
                ));
            };
            RecordDecoder::Confluent {
                protobuf: config.record.format == RecordFormat::Protobuf,
                channel_key,
                client: client.clone(),
            }
        }
    };
    Ok(PreparedChannel {
        config: config.clone(),
        io: ChannelIo::iceberg(
            source,
            IcebergIo {
                catalog,
                ident,
                schema,
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
            },
        ),
        initial_position,
        schema_label,
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

/// An error of channel `index`'s source with the key that says where the source is and its
/// value, so that the last line of a `floe run` that gave up names what to check: `… (channel[0]
/// .source.bootstrap_servers = "kafka-1:9092": check that it is reachable from this host)`.
fn source_error(index: usize, channel: &ChannelConfig, e: &crate::source::SourceError) -> String {
    let key = match &channel.source {
        SourceConfig::Kafka(kafka) => format!(
            "channel[{index}].source.bootstrap_servers = \"{}\"",
            kafka.bootstrap_servers
        ),
        SourceConfig::Kinesis(kinesis) => {
            let key = match kinesis.stream {
                crate::config::KinesisStream::Name(_) => "stream_name",
                crate::config::KinesisStream::Arn(_) => "stream_arn",
            };
            format!(
                "channel[{index}].source.{key} = \"{}\"",
                kinesis.stream.as_str()
            )
        }
    };
    if e.is_retryable() {
        format!("{e} ({key}: check that it is reachable from this host)")
    } else {
        format!("{e} ({key})")
    }
}

/// The start error of a channel whose activation did not complete.
fn activate_err(channel: &str, e: ActivateError) -> AppError {
    match e {
        ActivateError::Unavailable(m) => channel_unavailable(channel, m),
        ActivateError::Failed { reason, .. } => channel_err(channel, format!("FAILED: {reason}")),
        ActivateError::Suspended(reason) => channel_err(channel, format!("suspended: {reason}")),
        ActivateError::Refused { path, message } => {
            channel_err(channel, format!("{path}: {message}"))
        }
    }
}

/// Runs every channel of `config` until `shutdown` is cancelled, then drains and releases
/// leases within `worker.shutdown_timeout`.
///
/// Errors: a channel that cannot start (bad schema, unreachable catalog, table not owned).
pub async fn run(config: Config, shutdown: CancellationToken) -> Result<(), AppError> {
    let aws = AwsClients::for_config(&config).await;
    aws.check_credentials()
        .await
        .map_err(AppError::AwsCredentialsMissing)?;
    let store = with_retry("opening the lease store", &shutdown, || {
        open_lease_store(&config.lease_store, &aws)
    })
    .await?;
    let fleet = Arc::new(Fleet {
        config: config.clone(),
        store,
        aws,
        tracker: TaskTracker::new(),
        workers: TaskTracker::new(),
        stop_reading: CancellationToken::new(),
        stop_committing: CancellationToken::new(),
        stop_leases: CancellationToken::new(),
        fatal_token: CancellationToken::new(),
        fatal: Arc::default(),
        drain_switches: Arc::default(),
        shutdown: shutdown.clone(),
    });
    for (index, channel) in config.channels.iter().enumerate() {
        if channel.is_table_per_topic() {
            let supervisor = topics::TopicSupervisor::start(fleet.clone(), index, channel).await?;
            fleet.tracker.spawn(supervisor.run());
        } else if channel.is_routed() {
            fleet.start_routed(index, channel).await?;
        } else {
            fleet
                .start_channel(index, channel.clone(), FatalScope::Process)
                .await?;
        }
    }
    fleet.tracker.close();
    fleet.workers.close();

    tokio::select! {
        _ = shutdown.cancelled() => {}
        _ = fleet.fatal_token.cancelled() => {}
    }
    tracing::info!("shutting down: stop reading, drain, release leases");
    fleet.set_draining();
    // Phase 1 and 2: workers stop reading, hand off what they buffered and wait for the
    // commit (bounded by their drain deadline); committers keep running meanwhile.
    fleet.stop_reading.cancel();
    let drain_deadline = config.worker.shutdown_timeout + Duration::from_secs(2);
    if tokio::time::timeout(drain_deadline, fleet.workers.wait())
        .await
        .is_err()
    {
        tracing::warn!("drain deadline passed; releasing leases anyway");
    }
    // Phase 3: release leases so other workers take over at once.
    fleet.stop_committing.cancel();
    fleet.stop_leases.cancel();
    let _ = tokio::time::timeout(Duration::from_secs(10), fleet.tracker.wait()).await;
    let fatal = fleet.fatal.lock().expect("fatal lock").take();
    match fatal {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// What a fatal error of a channel's worker loop stops.
#[derive(Clone)]
enum FatalScope {
    /// The whole process (a configured channel: an operator must act).
    Process,
    /// This channel alone: a member of a channel with `table = "{topic}"`, whose table's
    /// trouble must not stop the other tables (docs/routing.md).
    Member,
}

/// What every channel of a `floe run` process shares: the configuration, the lease store, the
/// task trackers and the shutdown switches.
struct Fleet {
    config: Config,
    store: Arc<dyn Store>,
    aws: AwsClients,
    /// Lease managers, committers, watchers (and topic supervisors).
    tracker: TaskTracker,
    /// Worker loops: waited for (drained) first at shutdown.
    workers: TaskTracker,
    stop_reading: CancellationToken,
    stop_committing: CancellationToken,
    stop_leases: CancellationToken,
    /// Cancelled when a channel cannot go on (table dropped or incompatible): the process stops
    /// with an error an operator must act on.
    fatal_token: CancellationToken,
    fatal: Arc<std::sync::Mutex<Option<AppError>>>,
    /// Every started channel's lease-manager drain switch, set at shutdown.
    drain_switches: Arc<std::sync::Mutex<Vec<Arc<std::sync::atomic::AtomicBool>>>>,
    /// The process's shutdown (SIGTERM).
    shutdown: CancellationToken,
}

impl Fleet {
    /// Sets every channel's drain switch (shutdown): lease managers take no more leases.
    fn set_draining(&self) {
        for switch in self.drain_switches.lock().expect("drain switches").iter() {
            switch.store(true, std::sync::atomic::Ordering::SeqCst);
        }
    }

    /// Prepares channel `channel` (activation, table, source; retried with backoff while
    /// retryable), ensures its leases and starts its tasks: lease manager, state watcher,
    /// committer loop and worker loop. Returns the switches that stop it alone.
    ///
    /// Errors: [`AppError::ChannelRefused`] (not retryable) or the last retryable error.
    async fn start_channel(
        &self,
        index: usize,
        channel: ChannelConfig,
        scope: FatalScope,
    ) -> Result<crate::channel::ChannelStops, AppError> {
        let LeaseStoreConfig {
            lease_duration,
            renew_interval,
            max_leases_to_steal,
            ..
        } = self.config.lease_store.clone();
        let (store, aws) = (&self.store, &self.aws);
        let channel = &channel;
        let name = channel.name.clone();
        let prepared = with_retry("starting the channel", &self.shutdown, || async {
            let prepared = prepare_channel(index, channel, store.as_ref(), aws).await?;
            let shards = prepared.io.source.list_shards().await.map_err(|e| {
                let message = source_error(index, channel, &e);
                if e.is_retryable() {
                    channel_unavailable(&name, message)
                } else {
                    channel_err(&name, message)
                }
            })?;
            let mut specs: Vec<LeaseSpec> = shards
                .iter()
                .map(|s| {
                    LeaseSpec::new(LeaseKey::Shard(s.id.clone())).with_parents(s.parents.clone())
                })
                .collect();
            specs.push(LeaseSpec::new(LeaseKey::Committer));
            store
                .ensure_leases(&name, &specs)
                .await
                .map_err(|e| channel_unavailable(&name, e))?;
            Ok(prepared)
        })
        .await?;
        let store = self.store.clone();
        // Shard discovery, by the balancer alone: new Kafka partitions and Kinesis child shards
        // get leases. A child's keys wait for it after their parent ends, so Kinesis is listed
        // more often.
        let discovery_period = match channel.source {
            // Topics of a list or pattern come and go: within topic_refresh_interval.
            SourceConfig::Kafka(ref k) if k.topics.single().is_none() => {
                Duration::from_secs(30).min(k.topic_refresh_interval)
            }
            SourceConfig::Kafka(_) => Duration::from_secs(30),
            SourceConfig::Kinesis(_) => Duration::from_secs(10),
        };
        let mut manager = LeaseManager::new(
            store.clone(),
            LeaseManagerConfig {
                channel: name.clone(),
                worker_id: self.config.worker.id.clone(),
                lease_duration,
                renew_interval,
                max_leases_to_steal: max_leases_to_steal as usize,
            },
        )
        .with_discovery(
            Arc::new(SourceShards(prepared.io.source.clone())),
            discovery_period,
        );
        let held = manager.subscribe();
        // Balancing moves are graceful: the worker hands a moving shard's rows off and says when
        // they are committed (docs/design.md, "Graceful hand-off").
        let handoff_replies = manager.handoff_replies();
        {
            let mut switches = self.drain_switches.lock().expect("drain switches");
            switches.push(manager.drain_switch());
            // A member started while the process shuts down takes no lease.
            if self.stop_reading.is_cancelled() {
                manager
                    .drain_switch()
                    .store(true, std::sync::atomic::Ordering::SeqCst);
            }
        }
        // Per-channel stops: `floe channel delete` stops this channel alone (see `control`).
        let stops = crate::channel::ChannelStops {
            drain_switch: manager.drain_switch(),
            reading: self.stop_reading.child_token(),
            worker_done: CancellationToken::new(),
            committing: self.stop_committing.child_token(),
            leases: self.stop_leases.child_token(),
        };
        let tracker = &self.tracker;
        tracker.spawn(manager.run(stops.leases.clone()));
        tracker.spawn(crate::channel::watch_channel(
            store.clone(),
            name.clone(),
            stops.clone(),
            self.config.worker.shutdown_timeout + Duration::from_secs(2),
            self.stop_reading.clone(),
        ));
        match &prepared.io.destination {
            DestinationIo::Iceberg(io) => crate::health::Readiness::global().register(
                &name,
                held.clone(),
                io.catalog.clone(),
                io.ident.clone(),
            ),
            DestinationIo::Raw(_) => {
                crate::health::Readiness::global().register_raw(&name, held.clone())
            }
        }

        // Committer loop.
        tracker.spawn(committer_loop(
            name.clone(),
            prepared.io.destination.clone(),
            store.clone(),
            held.clone(),
            stops.committing.clone(),
            prepared.config.destination.data_freshness(),
            self.stop_reading.child_token(),
        ));

        // Worker loop, restarted with backoff on failure.
        let settings = worker_settings(&self.config, channel, &prepared);
        let stop = stops.reading.clone();
        let done = stops.worker_done.clone();
        let drain = self.config.worker.shutdown_timeout;
        let fatal = self.fatal.clone();
        let fatal_token = self.fatal_token.clone();
        let member_stops = stops.clone();
        self.workers.spawn(async move {
            let _done = done.drop_guard();
            let mut backoff = Backoff::new(Duration::from_millis(500), Duration::from_secs(30));
            // What a failed loop read: the freshness and the re-read count carry over.
            let mut history = crate::worker::ReadHistory::default();
            loop {
                let mut worker = ChannelWorker::new(
                    settings.clone(),
                    prepared.io.clone(),
                    store.clone(),
                    held.clone(),
                )
                .with_history(history)
                .with_handoff_replies(handoff_replies.clone());
                let started = std::time::Instant::now();
                let result = worker.run(stop.clone(), drain).await;
                history = worker.take_history();
                match result {
                    Ok(()) => return,
                    Err(e) if !e.is_retryable() => {
                        // Stop delivering (nothing is checkpointed past the last commit) and
                        // let an operator decide. A dropped table suspends the channel for
                        // the whole fleet; a table that does not fit this worker's
                        // configuration (say, a schema edited on one machine) stops only
                        // this worker.
                        let what = if e.is_table_gone() {
                            tracing::error!(channel = %settings.channel, error = %e, "channel suspended: the table is gone; stopping delivery");
                            suspend(store.as_ref(), &settings.channel, &e.to_string()).await;
                            "suspended"
                        } else if matches!(e, WorkerError::Incompatible(_)) {
                            tracing::error!(channel = %settings.channel, error = %e, "stopping: the table does not fit this worker's configuration");
                            "stopped (the table does not fit this worker's configuration)"
                        } else {
                            tracing::error!(channel = %settings.channel, error = %e, "stopping: an error retrying cannot fix");
                            "stopped"
                        };
                        match scope {
                            FatalScope::Process => {
                                *fatal.lock().expect("fatal lock") = Some(channel_err(
                                    &settings.channel,
                                    format!("{what}: {e}"),
                                ));
                                fatal_token.cancel();
                            }
                            FatalScope::Member => {
                                // This table alone stops; its leases are released once this
                                // loop has returned.
                                tracing::error!(channel = %settings.channel, "this table's member channel stopped; the channel's other tables go on");
                                crate::health::Readiness::global().deregister(&settings.channel);
                                tokio::spawn(async move { member_stops.stop(drain).await });
                            }
                        }
                        return;
                    }
                    Err(e) => {
                        // A loop that ran a while failed afresh: back off from the start.
                        if started.elapsed() >= WORKER_BACKOFF_RESET {
                            backoff.reset();
                        }
                        tracing::error!(channel = %settings.channel, error = %e, "worker loop failed; restarting from the table's checkpoints");
                        tokio::select! {
                            _ = stop.cancelled() => return,
                            _ = tokio::time::sleep(backoff.next_delay()) => {}
                        }
                    }
                }
            }
        });
        Ok(stops)
    }
}

fn worker_settings(
    config: &Config,
    channel: &ChannelConfig,
    p: &PreparedChannel,
) -> WorkerSettings {
    let source_name = match &channel.source {
        SourceConfig::Kafka(kafka) => kafka.topics.describe(),
        SourceConfig::Kinesis(kinesis) => kinesis.stream.as_str().to_owned(),
    };
    let include_payload = channel.dlq.as_ref().is_some_and(|d| d.include_payload);
    WorkerSettings {
        channel: channel.name.clone(),
        worker_id: config.worker.id.clone(),
        source_name,
        schema_version: p.schema_label.clone(),
        data_freshness: channel.destination.data_freshness(),
        buffer_size: channel.destination.buffer_size(),
        max_record_size: channel.record.max_record_size,
        include_payload,
        initial_position: p.initial_position.clone(),
    }
}

/// The source's shards as lease specs, for the balancer's shard discovery.
struct SourceShards(Arc<dyn Source>);

#[async_trait::async_trait]
impl crate::lease::manager::ShardDiscovery for SourceShards {
    async fn shards(&self) -> Result<Vec<LeaseSpec>, String> {
        let shards = self.0.list_shards().await.map_err(|e| e.to_string())?;
        Ok(shards
            .iter()
            .map(|s| LeaseSpec::new(LeaseKey::Shard(s.id.clone())).with_parents(s.parents.clone()))
            .collect())
    }

    fn unlisted_shards_are_gone(&self) -> bool {
        self.0.unlisted_shards_are_gone()
    }
}

/// The committer of one channel while this worker holds its lease: a round every second, and
/// after a commit a wait of [`commit_spacing`] of the freshness in force (`data_freshness`, or
/// its `floe channel update` override), so batches handed off meanwhile by every worker go in
/// one commit; once `draining` (shutdown), or while graceful hand-offs this worker balances wait
/// for their commit ([`HeldLeases::moves_pending`]), every second again.
async fn committer_loop(
    channel: String,
    destination: DestinationIo,
    store: Arc<dyn Store>,
    mut held: watch::Receiver<HeldLeases>,
    stop: CancellationToken,
    data_freshness: Duration,
    draining: CancellationToken,
) {
    let mut committer: Option<Committer> = None;
    let mut fenced_at: Option<u64> = None;
    let mut backoff = Backoff::new(Duration::from_millis(200), Duration::from_secs(30));
    loop {
        let lease = held.borrow_and_update().committer.clone();
        match lease {
            None => committer = None,
            Some(l)
                if committer.as_ref().map(|c| c.epoch()) != Some(l.lease_counter)
                    && fenced_at != Some(l.lease_counter) =>
            {
                tracing::info!(channel = %channel, lease_counter = l.lease_counter, "committer lease taken");
                let leases: Arc<dyn LeaseStore> = store.clone();
                let batches: Arc<dyn BatchStore> = store.clone();
                committer = Some(match &destination {
                    DestinationIo::Iceberg(io) => Committer::new(
                        channel.clone(),
                        IcebergTarget::new(
                            &channel,
                            io.ident.clone(),
                            io.catalog.clone(),
                            io.dlq.clone(),
                        )
                        .with_maintenance(io.maintenance)
                        .with_rewrites(io.swap.clone(), io.writer.clone())
                        .with_orphan_sweep_if(io.lister.clone())
                        .with_lease_fence(leases.clone()),
                        leases,
                        batches,
                        l.lease_counter,
                    ),
                    DestinationIo::Raw(io) => Committer::new(
                        channel.clone(),
                        RawTarget::new(&channel, io.store.clone(), batches.clone()),
                        leases,
                        batches,
                        l.lease_counter,
                    ),
                });
            }
            Some(_) => {}
        }
        let mut wait = Duration::from_millis(1000);
        if let Some(c) = &committer {
            match c.run_round().await {
                Ok(report) => {
                    crate::telemetry::record_delivered(&channel, report.rows);
                    backoff.reset();
                    // Graceful hand-offs wait for their batches' commit: no spacing meanwhile.
                    let moves_pending = held.borrow().moves_pending;
                    if report.committed > 0 && !draining.is_cancelled() && !moves_pending {
                        let freshness = match store.get_channel_state(&channel).await {
                            Ok(Some(state)) => state
                                .overrides
                                .data_freshness_ms
                                .map(Duration::from_millis)
                                .unwrap_or(data_freshness),
                            _ => data_freshness,
                        };
                        wait = commit_spacing(freshness).max(wait);
                    }
                }
                Err(CommitError::Fenced { table_epoch, own }) => {
                    tracing::warn!(channel = %channel, table_epoch, own, "committer is stale: stepping down");
                    fenced_at = Some(own);
                    committer = None;
                }
                Err(CommitError::Conflict(e)) => {
                    tracing::info!(channel = %channel, error = %e, "commit conflict: re-planning");
                    wait = Duration::from_millis(50);
                }
                Err(e) => {
                    tracing::warn!(channel = %channel, error = %e, "commit round failed; retrying with backoff");
                    wait = backoff.next_delay();
                }
            }
        }
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = held.changed() => {},
            _ = draining.cancelled(), if !draining.is_cancelled() => {},
            _ = tokio::time::sleep(wait) => {},
        }
    }
}

/// Records a channel as SUSPENDED with its reason (best effort: the log has it too).
async fn suspend(store: &dyn Store, channel: &str, reason: &str) {
    set_status(store, channel, ChannelStatus::Suspended, reason).await
}

/// Records a channel's status with its reason (best effort: the log has it too).
async fn set_status(store: &dyn Store, channel: &str, status: ChannelStatus, reason: &str) {
    let Ok(Some(mut state)) = store.get_channel_state(channel).await else {
        return;
    };
    let expected = state.version;
    state.state = status;
    state.status_reason = Some(reason.to_string());
    state.updated_at_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0);
    if let Err(e) = store.put_channel_state(&state, Some(expected)).await {
        tracing::warn!(channel, error = %e, "could not record the channel as suspended");
    }
}

/// Resolves a path relative to a base directory.
pub fn resolve(base: &Path, p: &Path) -> std::path::PathBuf {
    if p.is_absolute() {
        p.to_path_buf()
    } else {
        base.join(p)
    }
}
