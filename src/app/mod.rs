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
//!
//! A channel is prepared by its destination kind (`iceberg`: schema, catalog,
//! table, DLQ; `raw`: source and bucket), then `tasks` starts its tasks. A channel with
//! `table = "{topic}"` (`topics`) or `table = "{route}"` (`routes`) runs as member channels,
//! each started the same way.

mod clients;
mod iceberg;
pub mod maintain;
mod raw;
mod routes;
mod tasks;
#[cfg(feature = "testsuite")]
pub use tasks::{committer_loop, CommitterWakeups};
mod topics;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::aws::AwsClients;
use crate::channel::activate::ActivateError;
use crate::config::{
    ChannelConfig, Config, DestinationConfig, LeaseStoreBackend, LeaseStoreConfig, SourceConfig,
};
use crate::lease::dynamodb::{DynamoDbLeaseStore, MissingTable};
use crate::lease::manager::SharedPresence;
use crate::lease::sql::SqlLeaseStore;
use crate::lease::{ChannelState, LeaseStore, Store};
use crate::retry::Backoff;
use crate::source::kinesis::{efo, KinesisSource};
use crate::source::{InitialPosition, Source};
use crate::worker::ChannelIo;

pub use self::clients::SharedClients;

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
    /// The process was told to stop (SIGTERM, SIGINT) while it was still starting, waiting for a
    /// dependency: not a failure. [`run`] drains what started and returns `Ok`.
    #[error("stopped while {0}")]
    Stopped(String),
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
/// its error is retryable. A `stop` (SIGTERM) ends it at once, even in the middle of an attempt
/// (a Kafka metadata request waits up to 30 s): [`AppError::Stopped`].
async fn with_retry<T, F, Fut>(
    what: &str,
    stop: &CancellationToken,
    mut f: F,
) -> Result<T, AppError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, AppError>>,
{
    let stopped = || AppError::Stopped(what.to_string());
    let mut backoff = Backoff::new(Duration::from_millis(500), Duration::from_secs(8));
    let mut attempt = 1;
    loop {
        let result = tokio::select! {
            result = f() => result,
            _ = stop.cancelled() => return Err(stopped()),
        };
        match result {
            Ok(v) => return Ok(v),
            Err(e) if e.is_retryable() && stop.is_cancelled() => return Err(stopped()),
            Err(e) if e.is_retryable() && attempt < 10 => {
                let delay = backoff.next_delay();
                tracing::warn!(error = %e, attempt, "{what} failed; retrying in {delay:?}");
                tokio::select! {
                    _ = stop.cancelled() => return Err(stopped()),
                    _ = tokio::time::sleep(delay) => {}
                }
                attempt += 1;
            }
            Err(e) => return Err(e),
        }
    }
}

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
    open_lease_stores(config, aws).await.map(|s| s.store)
}

/// The lease store of a `floe run` process and its presence lane.
pub struct LeaseStores {
    /// Every call but this worker's presence renewals.
    pub store: Arc<dyn Store>,
    /// The presence renewals (and the shared presences' listings): on SQLite and PostgreSQL a
    /// connection of its own ([`SqlLeaseStore::presence_lane`]), so that they never wait behind
    /// the rest of the traffic; on DynamoDB, whose calls share no small pool, the store itself.
    pub presence: Arc<dyn LeaseStore>,
}

impl LeaseStores {
    fn sql(store: SqlLeaseStore) -> Self {
        LeaseStores {
            presence: Arc::new(store.presence_lane()),
            store: Arc::new(store),
        }
    }
}

/// Opens the configured lease store with its presence lane ([`LeaseStores`]).
///
/// Errors: as [`open_lease_store`].
pub async fn open_lease_stores(
    config: &LeaseStoreConfig,
    aws: &AwsClients,
) -> Result<LeaseStores, AppError> {
    match &config.backend {
        LeaseStoreBackend::Sqlite { path } => {
            if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                std::fs::create_dir_all(dir).map_err(|e| {
                    AppError::LeaseStoreRefused(format!("cannot create {}: {e}", dir.display()))
                })?;
            }
            SqlLeaseStore::open_sqlite(path)
                .await
                .map(LeaseStores::sql)
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
            let store: Arc<dyn Store> = DynamoDbLeaseStore::open(aws.dynamodb(), table, missing)
                .await
                .map(Arc::new)
                .map_err(AppError::lease_store)?;
            Ok(LeaseStores {
                presence: store.clone(),
                store,
            })
        }
        LeaseStoreBackend::Postgres(options) => SqlLeaseStore::open_postgres(options)
            .await
            .map(LeaseStores::sql)
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
    shared: &SharedClients,
) -> Result<PreparedChannel, AppError> {
    match &config.destination {
        DestinationConfig::Iceberg(dest) => {
            iceberg::prepare_iceberg(index, config, dest, store, aws, shared).await
        }
        DestinationConfig::S3(dest) => {
            raw::prepare_raw(index, config, dest, store, aws, shared).await
        }
    }
}

/// The channel's source (a member of `table = "{topic}"` reads through the clients its
/// channel's members share, [`SharedClients`]). Built before the channel's state is touched: a
/// source this worker refuses (a client property librdkafka rejects) must stop it before it
/// records an activation.
///
/// Errors: [`AppError::ChannelRefused`] naming the channel and the reason.
fn open_source(
    index: usize,
    config: &ChannelConfig,
    aws: &AwsClients,
    shared: &SharedClients,
) -> Result<Arc<dyn Source>, AppError> {
    let name = config.name.as_str();
    Ok(match &config.source {
        SourceConfig::Kafka(_) => shared
            .kafka_source(index, config)
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

/// An error of channel `index`'s source with the key that says where the source is and its
/// value, so that the last line of a `floe run` that gave up names what to check: `… (channel[0]
/// .source.bootstrap_servers = "kafka-1:9092": check that it is reachable from this host)`.
fn source_error(index: usize, channel: &ChannelConfig, e: &crate::source::SourceError) -> String {
    let key = match &channel.source {
        // A missing topic is the topic's key to fix, not the broker's.
        SourceConfig::Kafka(kafka) => match (e, kafka.topics.single()) {
            (crate::source::SourceError::NotFound { .. }, Some(topic)) => {
                format!("channel[{index}].source.topic = \"{topic}\"")
            }
            _ => format!(
                "channel[{index}].source.bootstrap_servers = \"{}\"",
                kafka.bootstrap_servers
            ),
        },
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
    let LeaseStores { store, presence } =
        match with_retry("opening the lease store", &shutdown, || {
            open_lease_stores(&config.lease_store, &aws)
        })
        .await
        {
            Err(AppError::Stopped(what)) => {
                tracing::info!(
                    "stopped by a signal while {what}: nothing started, nothing to drain"
                );
                return Ok(());
            }
            stores => stores?,
        };
    let fleet = Arc::new(Fleet {
        config: config.clone(),
        store,
        presence_store: presence,
        aws,
        tracker: TaskTracker::new(),
        workers: TaskTracker::new(),
        stop_reading: CancellationToken::new(),
        stop_committing: CancellationToken::new(),
        stop_leases: CancellationToken::new(),
        fatal_token: CancellationToken::new(),
        fatal: Arc::default(),
        drain_switches: Arc::default(),
        presences: Default::default(),
        shutdown: shutdown.clone(),
        clients: SharedClients::default(),
    });
    match fleet.start_every_channel().await {
        // A signal while a dependency was awaited: the channels started so far are drained.
        Err(AppError::Stopped(what)) => {
            tracing::info!("stopped by a signal while {what}, before every channel had started");
        }
        started => started?,
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
    /// The lease store's presence lane ([`LeaseStores::presence`]).
    presence_store: Arc<dyn LeaseStore>,
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
    /// Per channel run as member channels, this worker's one presence row, shared by the
    /// members' lease managers (lease::manager::group).
    presences: std::sync::Mutex<std::collections::HashMap<String, Arc<SharedPresence>>>,
    /// The process's shutdown (SIGTERM).
    shutdown: CancellationToken,
    /// The Kafka and catalog clients the channels share.
    clients: SharedClients,
}

impl Fleet {
    /// Starts each configured channel in turn (a table per topic: its supervisor).
    ///
    /// Errors: the first channel that cannot start, [`AppError::Stopped`] on a signal.
    async fn start_every_channel(self: &Arc<Self>) -> Result<(), AppError> {
        for (index, channel) in self.config.channels.iter().enumerate() {
            if channel.is_table_per_topic() {
                let supervisor =
                    topics::TopicSupervisor::start(self.clone(), index, channel).await?;
                self.tracker.spawn(supervisor.run());
            } else if channel.is_routed() {
                self.start_routed(index, channel).await?;
            } else {
                self.start_channel(index, channel.clone(), FatalScope::Process, None)
                    .await?;
            }
        }
        Ok(())
    }

    /// This worker's presence in `channel`, a channel run as member channels, shared by its
    /// members' lease managers: made and started (renewed until the leases stop) at the first
    /// call.
    fn shared_presence(&self, channel: &str) -> Arc<SharedPresence> {
        let mut presences = self.presences.lock().expect("presences lock");
        presences
            .entry(channel.to_string())
            .or_insert_with(|| {
                let settings = &self.config.lease_store;
                let presence = SharedPresence::new(
                    channel,
                    self.config.worker.id.clone(),
                    settings.lease_duration,
                    settings.renew_interval,
                );
                self.tracker.spawn(
                    presence
                        .clone()
                        .run(self.presence_store.clone(), self.stop_leases.clone()),
                );
                presence
            })
            .clone()
    }

    /// Sets every channel's drain switch (shutdown): lease managers take no more leases.
    fn set_draining(&self) {
        for switch in self.drain_switches.lock().expect("drain switches").iter() {
            switch.store(true, std::sync::atomic::Ordering::SeqCst);
        }
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

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::source::SourceError;

    fn quickstart() -> Config {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("config");
        let text = std::fs::read_to_string(dir.join("quickstart.toml")).unwrap();
        Config::from_toml_str(&text, &dir).unwrap()
    }

    /// A topic that does not exist is the topic's key to fix (it named the brokers once); an
    /// unreachable broker is the brokers'.
    #[test]
    fn a_missing_topic_names_the_topic_key_and_an_outage_the_brokers() {
        let config = quickstart();
        let channel = &config.channels[0];
        let missing = SourceError::NotFound {
            what: "metadata of topic events".into(),
        };
        let line = source_error(0, channel, &missing);
        assert!(
            line.contains("(channel[0].source.topic = \"events\")"),
            "{line}"
        );
        let outage = SourceError::Unavailable {
            message: "all brokers down".into(),
        };
        let line = source_error(0, channel, &outage);
        assert!(
            line.contains("channel[0].source.bootstrap_servers = \"localhost:9092\""),
            "{line}"
        );
    }
}
