//! Configuration: the TOML file, parsed and validated into typed [`Config`].
//!
//! Role in the pipeline: every component is built from a [`Config`]; nothing reads the file
//! afterwards. Invariants upheld here:
//! - a [`Config`] names only components this build supports (kinds not supported yet are parsed
//!   and refused, naming the key), and satisfies every cross-field rule;
//! - settings exactly-once depends on are not configurable (Kafka offset auto-commit, consumer
//!   groups, the Iceberg commit retry): client properties that would change them are refused;
//! - secrets never come from the file: client properties take them from the environment.
//!
//! ```text
//!   TOML text --toml--> ConfigFile (one Section per table, unknown keys refused)
//!             --validate (no I/O; env vars and hostname passed in)--> Config | ConfigErrors
//! ```
//!
//! Every problem is reported, each with its key path (`channel[0].destination.data_freshness`).
//! The file format and its documentation are in [`file`](mod@file); `floe validate` additionally reads the
//! schema files (see [`crate::cli::validate`]).

pub mod aws;
pub mod cdc;
pub mod file;
pub mod postgres;
pub mod raw;
mod route;
pub(crate) mod units;
mod unknown_keys;
pub(crate) mod validate;

#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

pub use aws::{AwsConfig, AwsService};
pub use cdc::{Envelope, TableFormatVersion, WriteMode};
pub use route::{RouteConfig, Unroutable, TABLE_ROUTED};

/// Default of `worker.metrics_address`.
pub const DEFAULT_METRICS_ADDRESS: &str = "127.0.0.1:9464";
/// Default of `worker.shutdown_timeout`.
pub const DEFAULT_SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(30);
/// Default of `lease_store.lease_duration`.
pub const DEFAULT_LEASE_DURATION: Duration = Duration::from_secs(10);
/// Default of `lease_store.max_leases_to_steal`.
pub const DEFAULT_MAX_LEASES_TO_STEAL: u32 = 1;
/// Default of `channel.record.max_record_size`: 10 MiB.
pub const DEFAULT_MAX_RECORD_SIZE: u64 = 10 << 20;
/// Default of `channel.destination.catalog.name`.
pub const DEFAULT_CATALOG_NAME: &str = "floe";
/// Default of `channel.destination.compression_level` (ZSTD).
pub const DEFAULT_ZSTD_LEVEL: i32 = 3;
/// Default of `channel.destination.data_freshness`.
pub const DEFAULT_DATA_FRESHNESS: Duration = Duration::from_secs(300);
/// Default of `channel.destination.target_file_size`: 128 MiB.
pub const DEFAULT_TARGET_FILE_SIZE: u64 = 128 << 20;
/// Default of `channel.destination.buffer_size`: 256 MiB.
pub const DEFAULT_BUFFER_SIZE: u64 = 256 << 20;
/// Default of `channel.destination.max_open_partitions`.
pub const DEFAULT_MAX_OPEN_PARTITIONS: u32 = 48;
/// Default `channel.destination.max_tables` (`table = "{topic}"`).
pub const DEFAULT_MAX_TABLES: u32 = 1000;
/// Default `channel.source.topic_refresh_interval`.
pub const DEFAULT_TOPIC_REFRESH_INTERVAL: Duration = Duration::from_secs(60);
/// Default `max_records_per_call` of a Kinesis source (the GetRecords maximum).
pub const DEFAULT_KINESIS_MAX_RECORDS_PER_CALL: u32 = 10_000;
/// Default `poll_interval` of a Kinesis source: 1 s, as the Kinesis Client Library.
pub const DEFAULT_KINESIS_POLL_INTERVAL: Duration = Duration::from_secs(1);

/// Validated configuration of one worker process. Durations are [`Duration`]s, sizes are bytes,
/// paths are resolved against the configuration file's directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// `[worker]`.
    pub worker: WorkerConfig,
    /// `[lease_store]`.
    pub lease_store: LeaseStoreConfig,
    /// `[aws]`: region, profile and endpoints of the AWS clients.
    pub aws: crate::config::aws::AwsConfig,
    /// `[[channel]]`, in file order; at least one, names and destination tables unique.
    pub channels: Vec<ChannelConfig>,
}

/// `[worker]`, see [`file::WorkerSection`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerConfig {
    /// Identity of this worker in the lease store (default `"<hostname>-<pid>"`).
    pub id: String,
    /// Address of the Prometheus `/metrics` endpoint; `None` when `"off"`.
    pub metrics_address: Option<SocketAddr>,
    /// Bound of the graceful drain on SIGTERM/SIGINT.
    pub shutdown_timeout: Duration,
}

/// `[lease_store]`, see [`file::LeaseStoreSection`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseStoreConfig {
    /// The store implementation and where it lives.
    pub backend: LeaseStoreBackend,
    /// Validity of a lease without renewal.
    pub lease_duration: Duration,
    /// Renewal period; at most `lease_duration / 3`.
    pub renew_interval: Duration,
    /// Leases the balancer moves towards one worker per renewal period (at least 1).
    pub max_leases_to_steal: u32,
}

/// The lease store implementation (`lease_store.kind`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeaseStoreBackend {
    /// `kind = "sqlite"`.
    Sqlite {
        /// SQLite database file.
        path: PathBuf,
    },
    /// `kind = "dynamodb"`: a DynamoDB table shared by the fleet.
    Dynamodb {
        /// Table name.
        table: String,
        /// Create the table when missing (otherwise refuse to start).
        create_lease_table: bool,
    },
    /// `kind = "postgres"`: a PostgreSQL schema shared by the fleet.
    Postgres(postgres::PostgresOptions),
}

/// `[[channel]]`, see [`file::ChannelSection`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChannelConfig {
    /// Channel name, `[a-z0-9_-]{1,64}`, unique.
    pub name: String,
    /// Where records are read.
    pub source: SourceConfig,
    /// How records are encoded.
    pub record: RecordConfig,
    /// The channel's JSON Schema; `None` for a raw S3 destination (records are not validated).
    pub schema: Option<SchemaConfig>,
    /// Where records are delivered.
    pub destination: DestinationConfig,
    /// Where rejected records are written; `None` for a raw S3 destination (nothing is rejected).
    pub dlq: Option<DlqConfig>,
}

impl ChannelConfig {
    /// Whether the channel writes a table per topic (`table = "{topic}"`): it then runs as one
    /// member channel per topic ([`ChannelConfig::member`]).
    pub fn is_table_per_topic(&self) -> bool {
        matches!(&self.destination, DestinationConfig::Iceberg(d) if d.table == TABLE_PER_TOPIC)
    }
}

/// `[channel.source]` (`kind`), see [`file::SourceSection`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SourceConfig {
    /// `kind = "kafka"`.
    Kafka(KafkaSourceConfig),
    /// `kind = "kinesis"`.
    Kinesis(KinesisSourceConfig),
}

/// `[channel.source]` with `kind = "kinesis"`, see [`file::KinesisSourceSection`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KinesisSourceConfig {
    /// The stream, by name or ARN.
    pub stream: KinesisStream,
    /// Where a new channel starts.
    pub initial_position: InitialPosition,
    /// GetRecords `Limit`, 1 to 10000.
    pub max_records_per_call: u32,
    /// Pause after an empty GetRecords, at least 200 ms.
    pub poll_interval: Duration,
    /// How shards are read: GetRecords polling or enhanced fan-out.
    pub read_mode: KinesisReadMode,
}

/// `channel.source.read_mode` of a Kinesis source: how the channel reads its shards.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KinesisReadMode {
    /// `"polling"`: GetRecords, sharing each shard's 2 MB/s and 5 calls/s with every other
    /// polling consumer of the stream.
    Polling,
    /// `"enhanced_fan_out"`: SubscribeToShard as a registered stream consumer, with its own
    /// 2 MB/s per shard pushed over HTTP/2.
    EnhancedFanOut {
        /// `channel.source.consumer_name` as written; `None` for the default
        /// ([`KinesisReadMode::consumer_name`]).
        consumer_name: Option<String>,
    },
}

impl KinesisReadMode {
    /// The stream consumer name channel `channel` registers: `consumer_name` when configured,
    /// else `floe-<channel>`. `None` for polling.
    pub fn consumer_name(&self, channel: &str) -> Option<String> {
        match self {
            KinesisReadMode::Polling => None,
            KinesisReadMode::EnhancedFanOut { consumer_name } => Some(
                consumer_name
                    .clone()
                    .unwrap_or_else(|| format!("floe-{channel}")),
            ),
        }
    }
}

/// How a Kinesis stream is named in API calls.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KinesisStream {
    /// `StreamName`.
    Name(String),
    /// `StreamARN`.
    Arn(String),
}

impl KinesisStream {
    /// The name or ARN, as written.
    pub fn as_str(&self) -> &str {
        match self {
            KinesisStream::Name(s) | KinesisStream::Arn(s) => s,
        }
    }
}

/// `[channel.source]` with `kind = "kafka"`, see [`file::KafkaSourceSection`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KafkaSourceConfig {
    /// Comma-separated `host:port` bootstrap brokers, as written.
    pub bootstrap_servers: String,
    /// The topics the channel reads.
    pub topics: TopicSelection,
    /// How often `topics` is resolved again (new and deleted topics of a list or a pattern).
    pub topic_refresh_interval: Duration,
    /// Where a new channel starts reading.
    pub initial_position: InitialPosition,
    /// What a reader does when the records after its checkpoint were deleted by retention.
    pub on_position_lost: OnPositionLost,
    /// librdkafka client properties, environment references resolved; never contains a key floe
    /// owns.
    pub properties: BTreeMap<String, PropertyValue>,
}

/// The topics of a Kafka channel: `channel.source.topic`, `topics` or `topic_pattern`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TopicSelection {
    /// `topic`: one topic, whose partitions are the shards `"0"`, `"1"`, ….
    One(String),
    /// `topics`: the listed topics (shards `<topic>:<partition>`).
    List(Vec<String>),
    /// `topic_pattern`: every topic whose whole name matches (shards `<topic>:<partition>`).
    Pattern(TopicPattern),
}

impl TopicSelection {
    /// Whether `topic` is one of the selected topics (Kafka's internal `__*` topics never match
    /// a pattern).
    pub fn selects(&self, topic: &str) -> bool {
        match self {
            TopicSelection::One(t) => t == topic,
            TopicSelection::List(ts) => ts.iter().any(|t| t == topic),
            TopicSelection::Pattern(p) => p.matches(topic),
        }
    }

    /// The one topic of `topic = "..."`; `None` for a list or a pattern.
    pub fn single(&self) -> Option<&str> {
        match self {
            TopicSelection::One(t) => Some(t),
            _ => None,
        }
    }

    /// The selection as written, for logs and `channel describe`: the topic, the list joined
    /// with commas, or `/pattern/`.
    pub fn describe(&self) -> String {
        match self {
            TopicSelection::One(t) => t.clone(),
            TopicSelection::List(ts) => ts.join(","),
            TopicSelection::Pattern(p) => format!("/{}/", p.as_str()),
        }
    }
}

/// `channel.source.topic_pattern`, compiled to match whole topic names.
#[derive(Debug, Clone)]
pub struct TopicPattern {
    text: String,
    regex: regex::Regex,
}

impl TopicPattern {
    /// Compiles `text` anchored at both ends (`^(?:text)$`).
    ///
    /// Errors: the regex crate's message for a pattern it cannot compile.
    pub fn new(text: &str) -> Result<Self, String> {
        let regex = regex::Regex::new(&format!("^(?:{text})$")).map_err(|e| e.to_string())?;
        Ok(TopicPattern {
            text: text.to_string(),
            regex,
        })
    }

    /// The pattern as written.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// Whether the whole of `topic` matches; Kafka's internal topics (`__consumer_offsets`,
    /// `__transaction_state`, any name starting with `__`) never do.
    pub fn matches(&self, topic: &str) -> bool {
        !topic.starts_with("__") && self.regex.is_match(topic)
    }
}

impl PartialEq for TopicPattern {
    fn eq(&self, other: &Self) -> bool {
        self.text == other.text
    }
}

impl Eq for TopicPattern {}

/// `table = "{topic}"`: a table per topic of the channel's source (docs/routing.md).
pub const TABLE_PER_TOPIC: &str = "{topic}";

/// Where a new channel starts reading (`channel.source.initial_position`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum InitialPosition {
    /// `"activation_time"`: records produced from the channel's activation on; no backfill.
    #[default]
    ActivationTime,
    /// `"earliest"` (Kinesis also `"trim_horizon"`): everything the source still retains.
    #[serde(alias = "trim_horizon")]
    Earliest,
}

/// What a Kafka reader does when the records after its checkpoint are gone
/// (`channel.source.on_position_lost`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnPositionLost {
    /// `"fail"`: stop with an error naming the partition and the offsets gone (exit 78).
    #[default]
    Fail,
    /// `"skip"`: resume at the oldest offset the broker holds; the skipped range is logged and
    /// counted.
    Skip,
}

/// A client property value, written literally or read from the environment (`"env:VARNAME"`).
/// Its `Debug` hides values read from the environment.
#[derive(Clone, PartialEq, Eq)]
pub enum PropertyValue {
    /// Written in the file.
    Literal(String),
    /// Read from environment variable `var` when the file was loaded.
    FromEnv {
        /// Name of the environment variable.
        var: String,
        /// Its value.
        value: String,
    },
}

impl PropertyValue {
    /// The value to hand to the client.
    pub fn value(&self) -> &str {
        match self {
            PropertyValue::Literal(value) | PropertyValue::FromEnv { value, .. } => value,
        }
    }
}

impl fmt::Debug for PropertyValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PropertyValue::Literal(value) => write!(f, "{value:?}"),
            PropertyValue::FromEnv { var, .. } => write!(f, "env:{var} (redacted)"),
        }
    }
}

/// `[channel.record]`, see [`file::RecordSection`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordConfig {
    /// Record encoding.
    pub format: RecordFormat,
    /// Largest record accepted, in bytes (after GSR decompression).
    pub max_record_size: u64,
    /// How each record carries its change (docs/cdc.md).
    pub envelope: Envelope,
}

/// Record encoding (`channel.record.format`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RecordFormat {
    /// `"json"`: one UTF-8 JSON document per record.
    #[default]
    Json,
    /// `"gsr_json"`: a JSON document behind the Glue Schema Registry header.
    GsrJson,
    /// `"avro"`: Avro binary in the Confluent wire format (magic byte 0, 4-byte big-endian schema
    /// id, the payload), the schema from a Confluent-compatible schema registry.
    Avro,
    /// `"protobuf"`: Protobuf in the Confluent wire format (magic byte, schema id, the message
    /// indexes, the payload).
    Protobuf,
    /// `"json_sr"`: a JSON document in the Confluent wire format (magic byte, schema id, the
    /// document), its JSON Schema from the registry.
    JsonSr,
    /// `"gsr_avro"`: Avro binary behind the Glue Schema Registry header (a Glue schema whose data
    /// format is `AVRO`).
    GsrAvro,
}

impl RecordFormat {
    /// Whether records carry the Confluent wire format (`avro`, `protobuf`, `json_sr`).
    pub fn is_confluent(&self) -> bool {
        matches!(
            self,
            RecordFormat::Avro | RecordFormat::Protobuf | RecordFormat::JsonSr
        )
    }

    /// Whether records carry the Glue Schema Registry header (`gsr_json`, `gsr_avro`).
    pub fn is_gsr(&self) -> bool {
        matches!(self, RecordFormat::GsrJson | RecordFormat::GsrAvro)
    }

    /// The format as written in the configuration (a bounded metric label).
    pub fn as_str(&self) -> &'static str {
        match self {
            RecordFormat::Json => "json",
            RecordFormat::GsrJson => "gsr_json",
            RecordFormat::Avro => "avro",
            RecordFormat::Protobuf => "protobuf",
            RecordFormat::JsonSr => "json_sr",
            RecordFormat::GsrAvro => "gsr_avro",
        }
    }
}

/// `[channel.schema]`: where the channel's JSON Schema comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SchemaConfig {
    /// `file = "..."`: a JSON Schema file, path resolved.
    File(PathBuf),
    /// `file` with `[channel.schema.versions]` (`record.format = "gsr_json"` only): the registry's
    /// versions given offline; the channel's version is the one whose document equals `file`.
    FileVersions {
        /// The channel's schema file, path resolved.
        file: PathBuf,
        /// Version id → schema file, paths resolved.
        versions: BTreeMap<uuid::Uuid, PathBuf>,
    },
    /// `glue_schema_arn` (+ `version`): a schema of the AWS Glue Schema Registry.
    Glue {
        /// `arn:PARTITION:glue:REGION:ACCOUNT:schema/REGISTRY/SCHEMA`.
        schema_arn: String,
        /// Which version the channel takes at activation.
        version: GlueSchemaVersion,
        /// `evolution`: whether later versions evolve the table.
        evolution: SchemaEvolution,
        /// `poll_interval`: how often a `json` channel with `version = "latest"` and
        /// `evolution = "compatible"` asks the registry for a new latest version.
        poll_interval: std::time::Duration,
    },
    /// `registry_url` (+ `subject`): a subject of a Confluent-compatible schema registry
    /// (`record.format` `avro`, `protobuf` or `json_sr`).
    Confluent(ConfluentSchemaConfig),
}

/// `[channel.schema]` with `registry_url`: a Confluent-compatible schema registry (Confluent,
/// Redpanda, Apicurio, Karapace). Credentials come from the environment only:
/// [`ENV_REGISTRY_BASIC_AUTH`] or [`ENV_REGISTRY_BEARER_TOKEN`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfluentSchemaConfig {
    /// Base URLs (`http` or `https`, no trailing slash), tried in order (fail-over).
    pub urls: Vec<String>,
    /// The subject whose latest version creates the table and whose ids the records carry.
    pub subject: String,
    /// `evolution`: whether a new id of the subject evolves the table.
    pub evolution: SchemaEvolution,
    /// `ca_bundle`: PEM file of CA certificates trusted for `https` (beside the system roots),
    /// path resolved.
    pub ca_bundle: Option<PathBuf>,
    /// `message` (protobuf): the full name of the message the table is created from; `None`:
    /// the first message of the file (Confluent message indexes `[0]`).
    pub message: Option<String>,
}

/// Environment variable with the schema registry's basic-auth credentials, `user:password`.
pub const ENV_REGISTRY_BASIC_AUTH: &str = "FLOE_SCHEMA_REGISTRY_BASIC_AUTH";
/// Environment variable with a bearer token for the schema registry.
pub const ENV_REGISTRY_BEARER_TOKEN: &str = "FLOE_SCHEMA_REGISTRY_BEARER_TOKEN";

impl SchemaConfig {
    /// The channel's `evolution` setting (`None` for a schema file: no evolution).
    pub fn evolution(&self) -> SchemaEvolution {
        match self {
            SchemaConfig::Glue { evolution, .. } => *evolution,
            SchemaConfig::Confluent(c) => c.evolution,
            _ => SchemaEvolution::None,
        }
    }
}

/// `channel.schema.evolution` (docs/schema-mapping.md "Schema evolution").
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum SchemaEvolution {
    /// `"none"` (default): records of another schema version than the channel's go to the DLQ
    /// as `SCHEMA_MISMATCH`; the table's schema never changes.
    #[default]
    None,
    /// `"compatible"`: a new version of the channel's schema whose mapped Iceberg schema is a
    /// compatible evolution of the table's evolves the table (one fenced schema commit) and its
    /// records are delivered; an incompatible one is `SCHEMA_MISMATCH`, naming the difference.
    Compatible,
}

/// Default of `channel.schema.poll_interval`.
pub const DEFAULT_SCHEMA_POLL_INTERVAL: std::time::Duration = std::time::Duration::from_secs(60);

impl SchemaConfig {
    /// The key path (below `channel[i].schema`) that names the schema's origin in errors.
    pub fn key(&self) -> &'static str {
        match self {
            SchemaConfig::File(_) | SchemaConfig::FileVersions { .. } => "file",
            SchemaConfig::Glue { .. } => "glue_schema_arn",
            SchemaConfig::Confluent(_) => "registry_url",
        }
    }
}

/// `channel.schema.version`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum GlueSchemaVersion {
    /// The latest version at activation.
    #[default]
    Latest,
    /// A version number (≥ 1).
    Number(i64),
}

impl std::fmt::Display for GlueSchemaVersion {
    /// `version N`, or `the latest version`, for messages.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            GlueSchemaVersion::Latest => f.write_str("the latest version"),
            GlueSchemaVersion::Number(n) => write!(f, "version {n}"),
        }
    }
}

/// `[channel.destination]` (`kind`), see [`file::DestinationSection`].
// One per channel, built once at start: the size difference costs nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DestinationConfig {
    /// `kind = "iceberg"`.
    Iceberg(IcebergDestinationConfig),
    /// `kind = "s3"`: raw objects in a general-purpose bucket.
    S3(crate::config::raw::RawDestinationConfig),
}

impl DestinationConfig {
    /// Maximum age of a record before it is delivered.
    pub fn data_freshness(&self) -> Duration {
        match self {
            DestinationConfig::Iceberg(d) => d.data_freshness,
            DestinationConfig::S3(d) => d.data_freshness,
        }
    }

    /// Memory bound of the channel's buffer in one worker, bytes.
    pub fn buffer_size(&self) -> u64 {
        match self {
            DestinationConfig::Iceberg(d) => d.buffer_size,
            DestinationConfig::S3(d) => d.buffer_size,
        }
    }

    /// The Iceberg destination, `None` for a raw one.
    pub fn iceberg(&self) -> Option<&IcebergDestinationConfig> {
        match self {
            DestinationConfig::Iceberg(d) => Some(d),
            DestinationConfig::S3(_) => None,
        }
    }
}

/// `[channel.destination]` with `kind = "iceberg"`, see [`file::IcebergDestinationSection`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IcebergDestinationConfig {
    /// The catalog holding the table.
    pub catalog: CatalogConfig,
    /// Namespace, `[a-z0-9_]{1,255}`.
    pub namespace: String,
    /// Table name, `[a-z0-9_]{1,255}`, or [`TABLE_PER_TOPIC`] (a table per topic; each
    /// topic's member channel, [`ChannelConfig::member`], carries its table's name).
    pub table: String,
    /// `table = "{topic}"`: the most tables (topics) the channel delivers to; a topic past it is
    /// not read (logged, counted). Bounds the channel's tasks, clients and metric labels.
    pub max_tables: u32,
    /// `table = "{route}"`: how records pick their table ([`RouteConfig`]); `None` otherwise.
    /// Each routed table's member channel ([`ChannelConfig::route_member`]) keeps it.
    pub route: Option<RouteConfig>,
    /// The time field: the top-level field of the spec's time transform, which every record
    /// must carry (`partition_field`, or the source of `hour`/`day`/`month`/`year` in
    /// `partition`); empty when the spec has no time transform.
    pub partition_field: String,
    /// The partition spec's terms (`[hour(partition_field)]` for the shorthand).
    pub partition: Vec<crate::schema::partition::PartitionTerm>,
    /// The table's sort order (empty: unsorted).
    pub sort: Vec<crate::schema::sort::SortTerm>,
    /// Parquet compression of data files.
    pub compression: Compression,
    /// Maximum age of a record before it is committed, 10 s to 900 s.
    pub data_freshness: Duration,
    /// Target data file size in bytes.
    pub target_file_size: u64,
    /// Memory bound of this channel's buffered rows in this worker, in bytes
    /// (≥ `record.max_record_size`).
    pub buffer_size: u64,
    /// Data files a write holds open at once (one per partition).
    pub max_open_partitions: u32,
    /// Table maintenance by the committer.
    pub maintenance: MaintenanceConfig,
    /// Whether rows are appended or upserted by [`IcebergDestinationConfig::key`].
    pub mode: WriteMode,
    /// With [`WriteMode::Upsert`]: the key columns (top-level, required, not float or double),
    /// the table's identifier fields; empty in append mode.
    pub key: Vec<String>,
    /// The format version of the tables the channel creates (and must find).
    pub format_version: TableFormatVersion,
}

/// The validated `[channel.destination.maintenance]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MaintenanceConfig {
    /// Whether the committer maintains the table at all.
    pub enabled: bool,
    /// Whether snapshots are expired.
    pub snapshot_expiry: bool,
    /// Snapshots older than this are expired.
    pub snapshot_retention: Duration,
    /// Snapshots always kept (at least 1: the current one).
    pub min_snapshots: u32,
    /// Whether closed hours' small data files are compacted.
    pub compaction: bool,
    /// Time after an hour's end before its partition is compacted.
    pub compaction_delay: Duration,
    /// Whether manifests are rewritten when there are more than `max_manifests`.
    pub manifest_rewrite: bool,
    /// Manifests the current snapshot may hold before a rewrite.
    pub max_manifests: u32,
    /// Hours older than this are deleted (`None`: kept).
    pub record_retention: Option<Duration>,
    /// How often the committer looks for compaction, manifest and record-expiration work.
    pub interval: Duration,
    /// Whether the committer sweeps orphan files.
    pub orphan_sweep: bool,
    /// The sweep's safety age.
    pub orphan_age: Duration,
}

impl Default for MaintenanceConfig {
    /// On; snapshots older than 1 h expired, at least 10 kept; closed hours compacted 10 min
    /// after they end; manifests rewritten beyond 100; records kept; checked every minute;
    /// orphans older than 24 h swept daily (the file format's defaults).
    fn default() -> Self {
        MaintenanceConfig {
            enabled: true,
            snapshot_expiry: true,
            snapshot_retention: Duration::from_secs(3600),
            min_snapshots: 10,
            compaction: true,
            compaction_delay: Duration::from_secs(600),
            manifest_rewrite: true,
            max_manifests: 100,
            record_retention: None,
            interval: Duration::from_secs(60),
            orphan_sweep: true,
            orphan_age: Duration::from_secs(86_400),
        }
    }
}

/// Parquet compression of data files.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compression {
    /// ZSTD at `level` (1..=22).
    Zstd {
        /// Compression level.
        level: i32,
    },
    /// Snappy.
    Snappy,
    /// No compression.
    Uncompressed,
}

impl Compression {
    /// The value of the Iceberg table property `write.parquet.compression-codec`.
    pub fn iceberg_codec_name(&self) -> &'static str {
        match self {
            Compression::Zstd { .. } => "zstd",
            Compression::Snappy => "snappy",
            Compression::Uncompressed => "uncompressed",
        }
    }
}

/// `[channel.destination.catalog]` (`kind`), see [`file::CatalogSection`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CatalogConfig {
    /// `kind = "sql"` on SQLite.
    Sql(SqlCatalogConfig),
    /// `kind = "rest"`: an Iceberg REST catalog.
    Rest(RestCatalogConfig),
    /// `kind = "s3tables"`: an Amazon S3 Tables table bucket.
    S3Tables(S3TablesCatalogConfig),
    /// `kind = "glue"`: the AWS Glue Data Catalog.
    Glue(GlueCatalogConfig),
}

impl CatalogConfig {
    /// What identifies the catalog's tables across channels: two channels with the same key and
    /// the same namespace and table write the same table (`sql:<name>:<database>`,
    /// `rest:<uri>:<warehouse>`, `s3tables:<table bucket ARN>`, `glue:<catalog id or
    /// "default">`).
    pub fn identity(&self) -> String {
        match self {
            CatalogConfig::Sql(sql) => format!("sql:{}:{}", sql.name, sql.database),
            CatalogConfig::Rest(rest) => format!(
                "rest:{}:{}",
                rest.uri,
                rest.warehouse.as_deref().unwrap_or_default()
            ),
            CatalogConfig::S3Tables(s3t) => format!("s3tables:{}", s3t.table_bucket_arn),
            CatalogConfig::Glue(glue) => {
                format!("glue:{}", glue.catalog_id.as_deref().unwrap_or("default"))
            }
        }
    }

    /// Whether the catalog itself needs the AWS configuration (an `s3://` warehouse of an SQL
    /// catalog, S3 Tables, Glue, a REST catalog signing with SigV4).
    pub fn uses_aws(&self) -> bool {
        match self {
            CatalogConfig::Sql(sql) => matches!(sql.warehouse, Warehouse::S3(_)),
            CatalogConfig::Rest(rest) => matches!(rest.auth, RestAuth::SigV4 { .. }),
            CatalogConfig::S3Tables(_) | CatalogConfig::Glue(_) => true,
        }
    }
}

/// `[channel.destination.catalog]` with `kind = "rest"`, see [`file::RestCatalogSection`].
/// Its `Debug` shows where secrets come from, never their values.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RestCatalogConfig {
    /// Base URI, `http(s)://…`, without a trailing `/` (requests go to `<uri>/v1/…`).
    pub uri: String,
    /// Warehouse asked for in `GET /v1/config`.
    pub warehouse: Option<String>,
    /// How requests are authenticated.
    pub auth: RestAuth,
    /// Token endpoint of the OAuth2 exchange (default `<uri>/v1/oauth/tokens`).
    pub oauth2_server_uri: Option<String>,
    /// OAuth2 scope (default `catalog`).
    pub scope: Option<String>,
    /// KMS key ARN for SSE-KMS of files written to `s3://` table locations.
    pub kms_key_arn: Option<String>,
    /// Whether requests ask for vended storage credentials.
    pub vended_credentials: bool,
}

/// Authentication of REST catalog requests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RestAuth {
    /// No `Authorization` header.
    None,
    /// A bearer token, from the environment.
    Token(PropertyValue),
    /// OAuth2 client credentials exchanged for a token.
    OAuth2 {
        /// Client id (`None`: the server takes the secret alone).
        client_id: Option<String>,
        /// Client secret, from the environment.
        client_secret: PropertyValue,
    },
    /// AWS Signature Version 4 with the `[aws]` credential chain
    /// ([`crate::catalog::sigv4`]).
    SigV4 {
        /// Signing name: the AWS service of the endpoint (`s3tables`, `glue`, `execute-api`).
        signing_name: String,
        /// Signing region; `None`: the `[aws]` region, resolved when the catalog opens.
        signing_region: Option<String>,
    },
}

/// `[channel.destination.catalog]` with `kind = "s3tables"`, see
/// [`file::S3TablesCatalogSection`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct S3TablesCatalogConfig {
    /// Table bucket ARN, `arn:<partition>:s3tables:<region>:<account>:bucket/<name>`.
    pub table_bucket_arn: String,
    /// KMS key ARN of the table's SSE-KMS encryption configuration.
    pub kms_key_arn: Option<String>,
}

/// `[channel.destination.catalog]` with `kind = "glue"`, see [`file::GlueCatalogSection`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GlueCatalogConfig {
    /// Warehouse location, `s3://bucket/prefix` (no trailing slash).
    pub warehouse: String,
    /// Glue Data Catalog account id (12 digits); `None`: the caller's.
    pub catalog_id: Option<String>,
    /// KMS key ARN for SSE-KMS of the table's files.
    pub kms_key_arn: Option<String>,
    /// Account that must own the warehouse bucket.
    pub expected_bucket_owner: Option<String>,
}

/// `[channel.destination.catalog]` with `kind = "sql"`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SqlCatalogConfig {
    /// Catalog name (default `"floe"`).
    pub name: String,
    /// The catalog database.
    pub database: CatalogDatabase,
    /// Where table files are written.
    pub warehouse: Warehouse,
    /// KMS key ARN for SSE-KMS of an `s3://` warehouse's files.
    pub kms_key_arn: Option<String>,
    /// Account that must own an `s3://` warehouse's bucket.
    pub expected_bucket_owner: Option<String>,
}

/// The database of an SQL catalog (`[channel.destination.catalog] uri`).
#[derive(Clone, PartialEq, Eq)]
pub enum CatalogDatabase {
    /// An SQLite file, path resolved (the embedded default).
    Sqlite(PathBuf),
    /// A PostgreSQL database: its `postgresql://` URL (may hold a password when it came from
    /// the environment: never logged, see the `Debug` impl).
    Postgres(String),
}

impl std::fmt::Debug for CatalogDatabase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CatalogDatabase::Sqlite(path) => f.debug_tuple("Sqlite").field(path).finish(),
            CatalogDatabase::Postgres(url) => f
                .debug_tuple("Postgres")
                .field(&crate::config::postgres::redact_url(url))
                .finish(),
        }
    }
}

impl CatalogDatabase {
    /// The sqlx connection URL: `sqlite:<path>?mode=rwc` (created if missing) or the PostgreSQL
    /// URL as configured.
    pub fn url(&self) -> String {
        match self {
            CatalogDatabase::Sqlite(path) => format!("sqlite:{}?mode=rwc", path.display()),
            CatalogDatabase::Postgres(url) => url.clone(),
        }
    }
}

impl std::fmt::Display for CatalogDatabase {
    /// The path, or the URL without its password: for messages and the catalog's identity.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CatalogDatabase::Sqlite(path) => write!(f, "{}", path.display()),
            CatalogDatabase::Postgres(url) => {
                f.write_str(&crate::config::postgres::redact_url(url))
            }
        }
    }
}

/// Where a catalog writes table files (`warehouse`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Warehouse {
    /// A local directory, path resolved.
    Local(PathBuf),
    /// An S3 location, `s3://bucket/prefix` (no trailing slash).
    S3(String),
}

/// `[channel.dlq]`, see [`file::DlqSection`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DlqConfig {
    /// Where entries are written.
    pub location: DlqLocation,
    /// Whether entries carry the record payload.
    pub include_payload: bool,
}

/// Where DLQ entries are written (`channel.dlq.kind`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DlqLocation {
    /// `kind = "local"`: a local directory, path resolved.
    Local(PathBuf),
    /// `kind = "s3"`: objects under an S3 prefix.
    S3(S3Location),
}

/// An S3 bucket and key prefix with the request options floe sends with every call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct S3Location {
    /// Bucket name.
    pub bucket: String,
    /// Key prefix, as written (empty, or typically ending in `/`).
    pub prefix: String,
    /// Account id that must own the bucket (`x-amz-expected-bucket-owner`).
    pub expected_bucket_owner: Option<String>,
    /// Customer-managed KMS key ARN for SSE-KMS.
    pub kms_key_arn: Option<String>,
}

impl Config {
    /// Whether any component needs AWS: the DynamoDB lease store, a Kinesis source, a Glue
    /// schema, an S3 DLQ or warehouse, or settings in `[aws]`.
    pub fn uses_aws(&self) -> bool {
        self.aws != crate::config::aws::AwsConfig::default()
            || matches!(self.lease_store.backend, LeaseStoreBackend::Dynamodb { .. })
            || self.channels.iter().any(|c| {
                let aws_destination = match &c.destination {
                    DestinationConfig::Iceberg(d) => d.catalog.uses_aws(),
                    DestinationConfig::S3(_) => true,
                };
                aws_destination
                    || matches!(c.source, SourceConfig::Kinesis(_))
                    || matches!(c.schema, Some(SchemaConfig::Glue { .. }))
                    || c.dlq
                        .as_ref()
                        .is_some_and(|d| matches!(d.location, DlqLocation::S3(_)))
            })
    }
}

/// What validation may know about the process, passed in so that validation does no I/O.
#[derive(Clone, Default)]
pub struct ConfigEnv {
    /// Host name, for the default worker id.
    pub hostname: String,
    /// Process id, for the default worker id.
    pub pid: u32,
    /// Environment variables, for `"env:VARNAME"` property values.
    pub vars: BTreeMap<String, String>,
}

impl fmt::Debug for ConfigEnv {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConfigEnv")
            .field("hostname", &self.hostname)
            .field("pid", &self.pid)
            .field("vars", &self.vars.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl ConfigEnv {
    /// This process: its host name, pid and environment.
    pub fn from_process() -> Self {
        let hostname = ["/proc/sys/kernel/hostname", "/etc/hostname"]
            .iter()
            .find_map(|p| std::fs::read_to_string(p).ok())
            .map(|h| h.trim().to_owned())
            .or_else(|| std::env::var("HOSTNAME").ok())
            .filter(|h| !h.is_empty())
            .unwrap_or_else(|| "localhost".to_owned());
        ConfigEnv {
            hostname,
            pid: std::process::id(),
            vars: std::env::vars().collect(),
        }
    }
}

/// One problem in a configuration: the key path (`channel[0].destination.data_freshness`, or
/// `line L, column C` for TOML syntax, after the file's path when read from a file) and what is
/// wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{path}: {message}")]
pub struct ConfigError {
    /// Key path of the problem.
    pub path: String,
    /// What is wrong, lowercase.
    pub message: String,
}

/// Every problem found in a configuration, in file order.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct ConfigErrors(pub Vec<ConfigError>);

impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, error) in self.0.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{error}")?;
        }
        Ok(())
    }
}

impl Config {
    /// Parses and validates `text`, resolving relative paths against `base_dir`, taking the
    /// default worker id and `"env:VARNAME"` values from this process.
    ///
    /// Errors: every problem, each with its key path.
    pub fn from_toml_str(text: &str, base_dir: &Path) -> Result<Config, ConfigErrors> {
        Self::from_toml_str_with_env(text, base_dir, &ConfigEnv::from_process())
    }

    /// [`Config::from_toml_str`] with the process facts given: a pure function of its inputs.
    ///
    /// Errors: every problem, each with its key path.
    pub fn from_toml_str_with_env(
        text: &str,
        base_dir: &Path,
        env: &ConfigEnv,
    ) -> Result<Config, ConfigErrors> {
        Self::from_toml_in(text, None, base_dir, env)
    }

    /// [`Config::from_toml_str_with_env`] of the text of `source_file`: a TOML error's path names
    /// the file (`floe.toml, line L, column C`).
    fn from_toml_in(
        text: &str,
        source_file: Option<&Path>,
        base_dir: &Path,
        env: &ConfigEnv,
    ) -> Result<Config, ConfigErrors> {
        let file_name = source_file.map(|f| f.display().to_string());
        let located = |position: Option<(usize, usize)>| match (&file_name, position) {
            (Some(file), Some((line, column))) => format!("{file}, line {line}, column {column}"),
            (Some(file), None) => file.clone(),
            (None, Some((line, column))) => format!("line {line}, column {column}"),
            (None, None) => "toml".to_owned(),
        };
        let (file, mut errors) = match toml::from_str::<file::ConfigFile>(text) {
            Ok(file) => (file, Vec::new()),
            Err(e) if unknown_keys::unknown_key_of(e.message()).is_some() => {
                // Every unknown top-level key, each at its line; the sections are still checked.
                let value: toml::Value = toml::from_str(text).map_err(|e| {
                    ConfigErrors(vec![ConfigError {
                        path: located(None),
                        message: e.message().trim_end().to_owned(),
                    }])
                })?;
                let (file, section_errors) = file::parse_past_unknown_keys(value);
                let errors = section_errors
                    .into_iter()
                    .map(|e| {
                        let key = unknown_keys::unknown_key_of(&e.message).unwrap_or(&e.key);
                        let position = unknown_keys::key_position(text, "", key);
                        ConfigError {
                            path: located(position),
                            message: unknown_keys::explained(&e.message, None),
                        }
                    })
                    .collect();
                match file {
                    Some(file) => (file, errors),
                    None => return Err(ConfigErrors(errors)),
                }
            }
            Err(e) => {
                let position = e
                    .span()
                    .map(|span| unknown_keys::line_and_column(text, span.start));
                return Err(ConfigErrors(vec![ConfigError {
                    path: located(position),
                    message: e.message().trim_end().to_owned(),
                }]));
            }
        };
        match validate::validate(file, base_dir, env) {
            Ok(config) if errors.is_empty() => Ok(config),
            Ok(_) => Err(ConfigErrors(errors)),
            Err(ConfigErrors(more)) => {
                errors.extend(unknown_keys::explain_all(more, text));
                Err(ConfigErrors(errors))
            }
        }
    }

    /// Reads and validates the file at `path`; relative paths in it are resolved against its
    /// directory (made absolute with the current directory).
    ///
    /// Errors: the file cannot be read (path = the file), or every problem in it.
    pub fn load(path: &Path) -> Result<Config, ConfigErrors> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            ConfigErrors(vec![ConfigError {
                path: path.display().to_string(),
                message: format!("cannot read the configuration file: {e}"),
            }])
        })?;
        let dir = path.parent().unwrap_or(Path::new(""));
        let base_dir = if dir.is_absolute() {
            dir.to_path_buf()
        } else {
            std::env::current_dir()
                .map(|cwd| cwd.join(dir))
                .unwrap_or_else(|_| dir.to_path_buf())
        };
        Self::from_toml_in(&text, Some(path), &base_dir, &ConfigEnv::from_process())
    }
}
