//! The configuration file as written: one struct per TOML table, every key documented.
//!
//! This module is the configuration reference. Each table is parsed on its own (see [`Section`]),
//! so a mistake in one table is reported with its key path while the others are still checked.
//! Unknown keys are refused everywhere. Durations are written like `"300s"` or `"10m"`; sizes with
//! binary units like `"128MiB"` (2^20 bytes per MiB; `MB` is refused as ambiguous). Relative paths
//! are resolved against the directory of the configuration file. Secrets are never written in the
//! file: a Kafka client property may take its value from the environment (`"env:VARNAME"`).
//!
//! Validation into the typed [`Config`](super::Config) applies the defaults and the rules; the
//! `DEFAULT_*` constants of [`config`](super) hold the defaults quoted here.

use std::collections::BTreeMap;
use std::fmt;
use std::marker::PhantomData;

use serde::de::{DeserializeOwned, Deserializer};
use serde::Deserialize;

use super::{InitialPosition, OnPositionLost, RecordFormat};

/// The whole file.
///
/// ```toml
/// [worker]          # optional
/// [lease_store]     # required
/// [[channel]]       # one or more
/// ```
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConfigFile {
    /// `[worker]`: this process. Optional; every key has a default.
    #[serde(default)]
    pub worker: Section<WorkerSection>,
    /// `[aws]`: region, profile and endpoints of every AWS client. Optional.
    #[serde(default)]
    pub aws: Section<AwsSection>,
    /// `[lease_store]`: where workers coordinate leases, pending batches and channel state.
    pub lease_store: Section<LeaseStoreSection>,
    /// `[[channel]]`: one entry per channel (one source delivered to one destination).
    /// At least one is required.
    #[serde(default, rename = "channel")]
    pub channels: Vec<Section<ChannelSection>>,
}

/// `[worker]`: settings of this worker process.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkerSection {
    /// Identity of this worker in the lease store, shown as the owner of its leases.
    /// 1 to 128 characters from `A-Z a-z 0-9 . _ : -`. Default: `"<hostname>-<pid>"`.
    /// Two live workers must never share an id.
    pub id: Option<String>,
    /// Address of the HTTP endpoint serving Prometheus `/metrics`, `/healthz` and `/readyz`, as an
    /// IP socket address (`"0.0.0.0:9464"`; host names are not resolved), or `"off"` to serve
    /// nothing.
    /// Default: `"127.0.0.1:9464"`.
    pub metrics_address: Option<String>,
    /// Bound of the graceful drain on SIGTERM/SIGINT: stop reading, flush, commit, release leases.
    /// After it, pending work is abandoned (it is redelivered from the committed checkpoints, never
    /// lost). From 1s to 1h. Default: `"30s"`. Leases are renewed while draining, so this may exceed
    /// `lease_store.lease_duration`; set the supervisor's kill timeout (systemd `TimeoutStopSec`,
    /// ECS `stopTimeout`) above it.
    pub shutdown_timeout: Option<DurationText>,
}

/// `[aws]`: how floe reaches AWS. Credentials are never written here: they come from the AWS
/// SDK's default chain (environment, shared config/credentials files, SSO, ECS task role, EC2
/// instance profile).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AwsSection {
    /// Region such as `"us-east-1"`. Default: `AWS_REGION`, then the profile's region.
    pub region: Option<String>,
    /// Named profile of `~/.aws/config`. Default: `AWS_PROFILE`, then `default`.
    pub profile: Option<String>,
    /// Endpoint URL for every AWS service, `http(s)://host[:port]` (an emulator; a VPC endpoint).
    /// Default: AWS's own endpoints.
    pub endpoint_url: Option<String>,
    /// `[aws.endpoints]`: per-service endpoint URLs that win over `endpoint_url`; keys
    /// `dynamodb`, `kinesis`, `s3`, `glue`, `s3tables`.
    #[serde(default)]
    pub endpoints: BTreeMap<crate::config::aws::AwsService, String>,
    /// A PEM file of CA certificates to trust for HTTPS calls to AWS services besides the
    /// system's roots (as the AWS CLI's `ca_bundle`): endpoints behind a private CA, such as a
    /// TLS-intercepting proxy or a local emulator serving HTTPS. Relative to this file.
    /// Default: the system's roots only.
    pub ca_bundle: Option<String>,
}

/// `[lease_store]`: the store where workers take and renew leases. Tagged by `kind`.
#[derive(Debug)]
pub enum LeaseStoreSection {
    /// `kind = "sqlite"`: an SQLite file shared by the workers of one machine (embedded mode).
    Sqlite(SqlLeaseStoreSection),
    /// `kind = "dynamodb"`: a DynamoDB table shared by a fleet.
    Dynamodb(DynamodbLeaseStoreSection),
    /// `kind = "postgres"`: a PostgreSQL schema shared by a fleet of hosts (no AWS needed).
    Postgres(PostgresLeaseStoreSection),
}

/// `[lease_store]` with `kind = "postgres"`: floe's lease tables in one schema of a PostgreSQL
/// server (9.5 or later) shared by every worker of the fleet and by several channels (rows are
/// keyed by channel). Every lease operation is one conditional statement, so the lease counter is
/// the fencing token exactly as on DynamoDB.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PostgresLeaseStoreSection {
    /// Connection URL `"postgresql://USER@HOST:PORT/DATABASE"`, or `"env:VARNAME"` to read the
    /// whole URL (password included) from the environment. A URL written in the file must not
    /// hold a password: give it in `PGPASSWORD` or `~/.pgpass`. What the URL leaves out comes from
    /// the standard `PGHOST`, `PGPORT`, `PGUSER`, `PGPASSWORD`, `PGDATABASE` variables, as with
    /// libpq. Required.
    pub url: String,
    /// TLS, by libpq's `sslmode` names: `"disable"`, `"prefer"` (TLS when the server offers it),
    /// `"require"` (TLS, certificate not checked) or `"verify-full"` (TLS, certificate and host
    /// name checked; a private CA through `sslrootcert=PATH` in the URL). Wins over an `sslmode`
    /// in the URL. Default: `"prefer"`.
    pub ssl_mode: Option<String>,
    /// Most connections each `floe` process keeps open for the lease store, 1 to 100; presence
    /// renewals use one more connection of their own. Default: `4`.
    pub pool_size: Option<WholeNumber>,
    /// Schema of floe's tables, 1 to 63 characters from `a-z 0-9 _`, not starting with a
    /// digit. Default: `"floe"`.
    pub schema: Option<String>,
    /// Create the schema and tables when missing. Default `true`; with `false`, missing tables
    /// are refused at start (create them with `floe setup`, e.g. run once by an administrator
    /// whose role may create schemas).
    pub create_tables: Option<bool>,
    /// As for `kind = "sqlite"`. Default: `"10s"`.
    pub lease_duration: Option<DurationText>,
    /// As for `kind = "sqlite"`. Default: `lease_duration / 3`.
    pub renew_interval: Option<DurationText>,
    /// As for `kind = "sqlite"`. Default: `1`.
    pub max_leases_to_steal: Option<WholeNumber>,
}

/// `[lease_store]` with `kind = "dynamodb"`: one DynamoDB table shared by the fleet (and by
/// several channels: items are keyed by channel).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DynamodbLeaseStoreSection {
    /// Name of the DynamoDB table (3 to 255 characters from `A-Z a-z 0-9 _ - .`). Required.
    pub table: String,
    /// Create the table (on-demand billing) when it does not exist. Default `true`; with `false`
    /// a missing table is refused at start (create it with `floe setup`).
    pub create_lease_table: Option<bool>,
    /// How long a worker's presence (and so its leases) lasts without renewal, e.g. `"10s"`.
    /// Default 10 s, 1 s to 10 min.
    pub lease_duration: Option<DurationText>,
    /// How often a worker renews its presence (and the committer lease, when held). Default
    /// `lease_duration / 3`; at most a third of it.
    pub renew_interval: Option<DurationText>,
    /// Most leases the balancer moves towards one worker per period to even out the fleet.
    /// Default 1.
    pub max_leases_to_steal: Option<WholeNumber>,
}

/// `[lease_store]` with `kind = "sqlite"`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SqlLeaseStoreSection {
    /// Path of the SQLite database file, created if missing. Every worker sharing the channels
    /// must use the same file. Required.
    pub path: String,
    /// How long a worker's presence (and so its leases) stays valid without renewal; a dead
    /// worker's shards are taken over after about this long plus two renewal periods. From 1s
    /// to 10m. Default: `"10s"`.
    pub lease_duration: Option<DurationText>,
    /// How often a worker renews its presence (one write, whatever it holds). At most a third of
    /// `lease_duration`, so a worker may miss two renewals before it loses its leases. At least
    /// 100ms. Default: `lease_duration / 3`.
    pub renew_interval: Option<DurationText>,
    /// At most this many leases the balancer moves from busier workers towards one worker per
    /// renewal period (at least 1). Default: `1`.
    pub max_leases_to_steal: Option<WholeNumber>,
}

/// `[[channel]]`: one source delivered to one destination.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChannelSection {
    /// Name of the channel: 1 to 64 characters from `a-z 0-9 _ -`, unique in the file. It names
    /// the channel's leases, data files and metrics, so renaming a channel starts a new one.
    /// Required.
    pub name: String,
    /// `[channel.source]`: where records are read. Required.
    pub source: Section<SourceSection>,
    /// `[channel.record]`: how records are encoded. Optional; not allowed for `kind = "s3"`
    /// destinations (records are delivered as read).
    #[serde(default)]
    pub record: Section<RecordSection>,
    /// `[channel.schema]`: the schema records are validated against and the table is made from
    /// (a JSON Schema file, the Glue Schema Registry, or a Confluent-compatible registry's
    /// JSON Schema, Avro or Protobuf subject). Required for an Iceberg destination; not allowed
    /// for `kind = "s3"` (raw records are not validated).
    #[serde(default)]
    pub schema: Section<SchemaSection>,
    /// `[channel.destination]`: where records are delivered. Required.
    pub destination: Section<DestinationSection>,
    /// `[channel.dlq]`: where rejected records are written (the dead-letter queue). Required for
    /// an Iceberg destination; not allowed for `kind = "s3"` (every record is delivered).
    #[serde(default)]
    pub dlq: Section<DlqSection>,
}

/// `[channel.source]`: the stream a channel reads. Tagged by `kind`.
#[derive(Debug)]
pub enum SourceSection {
    /// `kind = "kafka"`: a Kafka topic.
    Kafka(KafkaSourceSection),
    /// `kind = "kinesis"`: a Kinesis data stream.
    Kinesis(KinesisSourceSection),
}

/// `[channel.source]` with `kind = "kinesis"`. Exactly one of `stream_name` and `stream_arn`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KinesisSourceSection {
    /// Name of the data stream (1 to 128 characters from `A-Z a-z 0-9 _ . -`).
    pub stream_name: Option<String>,
    /// ARN of the data stream (`arn:aws:kinesis:REGION:ACCOUNT:stream/NAME`); wins for
    /// cross-account streams.
    pub stream_arn: Option<String>,
    /// Where a new channel starts reading: `"activation_time"` (AT_TIMESTAMP of the activation;
    /// no backfill) or `"trim_horizon"` (everything still retained; `"earliest"` is a synonym).
    /// Shards created later by resharding always start at their beginning. Default:
    /// `"activation_time"`.
    #[serde(default)]
    pub initial_position: InitialPosition,
    /// Most records per GetRecords call, 1 to 10000. Default 10000.
    pub max_records_per_call: Option<WholeNumber>,
    /// Pause between GetRecords calls on a shard that returned no records, e.g. `"1s"`; from
    /// 200ms (Kinesis allows 5 calls per second per shard, shared by all consumers). Polling
    /// only. Default 1s.
    pub poll_interval: Option<DurationText>,
    /// How the channel reads its shards: `"polling"` (GetRecords; shares each shard's 2 MB/s
    /// and 5 calls/s with the stream's other polling consumers) or `"enhanced_fan_out"`
    /// (SubscribeToShard as a registered consumer with its own 2 MB/s per shard, pushed over
    /// HTTP/2; billed per consumer-shard hour and per GB read; docs/kinesis.md). Default:
    /// `"polling"`.
    pub read_mode: Option<String>,
    /// The stream consumer an `"enhanced_fan_out"` channel registers at start and
    /// `floe channel delete` deregisters: 1 to 128 characters from `A-Z a-z 0-9 _ . -`, unique
    /// per stream (AWS allows 20 consumers per stream). Default: `"floe-<channel name>"`.
    pub consumer_name: Option<String>,
}

/// `[channel.source]` with `kind = "kafka"`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KafkaSourceSection {
    /// Comma-separated `host:port` list of brokers used to bootstrap (`"b1:9092,b2:9092"`).
    /// Required.
    pub bootstrap_servers: String,
    /// The topic to read; each of its partitions is a shard. Exactly one of `topic`, `topics`
    /// and `topic_pattern` is required.
    pub topic: Option<String>,
    /// Several topics read by one channel, e.g. `["orders", "refunds"]`: each partition of each
    /// topic is a shard (`<topic>:<partition>` in checkpoints, leases and logs). Into one table
    /// (`table = "name"`) or a table per topic (`table = "{topic}"`). 1 to 1000 valid topic
    /// names, no duplicates.
    pub topics: Option<Vec<String>>,
    /// A regular expression (Rust `regex` syntax) every topic the channel reads matches in
    /// full, e.g. `"events\\..*"`: topics created later that match are read within
    /// `topic_refresh_interval`; a matching topic that is deleted stops being read (its leases
    /// released, its table and checkpoints kept). Topics whose names start with `__` (Kafka's
    /// internal topics) never match.
    pub topic_pattern: Option<String>,
    /// How often the topics of `topics`/`topic_pattern` are listed again (new and deleted
    /// topics), from 5s to 10min. Default `"60s"`.
    pub topic_refresh_interval: Option<DurationText>,
    /// Where a new channel starts reading: `"activation_time"` (records produced from the moment
    /// the channel is activated; no backfill) or `"earliest"` (everything still retained).
    /// Applies only to a channel's first start; afterwards floe resumes from the checkpoints in the
    /// table. Default: `"activation_time"`.
    #[serde(default)]
    pub initial_position: InitialPosition,
    /// What a worker does when the records after a partition's checkpoint are gone — retention
    /// deleted them while floe was down or too far behind: `"fail"` (stop, exit 78, naming the
    /// partition and the offsets gone) or `"skip"` (resume at the oldest offset the broker holds;
    /// the skipped range is logged at error level and counted in
    /// `floe_source_offsets_skipped_total`). A checkpoint past the end of the partition (the topic
    /// was deleted and recreated) always fails. Default: `"fail"`.
    #[serde(default)]
    pub on_position_lost: OnPositionLost,
    /// `[channel.source.properties]`: librdkafka client properties passed through as given
    /// (string → string), e.g. `"security.protocol" = "SASL_SSL"`. A value written
    /// `"env:VARNAME"` is read from the environment variable `VARNAME` when the file is loaded;
    /// secrets (keys containing `password` or `secret`, `sasl.oauthbearer.config`, `ssl.key.pem`)
    /// must be given this way. Keys floe owns are refused: `bootstrap.servers`,
    /// `metadata.broker.list`, `group.id`, `group.instance.id`, `enable.auto.commit`,
    /// `auto.commit.enable`, `enable.auto.offset.store`, `auto.offset.reset`,
    /// `enable.partition.eof`, `isolation.level` (always `read_committed`),
    /// `statistics.interval.ms`.
    #[serde(default)]
    pub properties: BTreeMap<String, toml::Value>,
}

/// `[channel.record]`: how records are encoded.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RecordSection {
    /// `"json"` (each record is one UTF-8 JSON document), `"gsr_json"` (a JSON document behind
    /// the AWS Glue Schema Registry header, optionally zlib-compressed), `"gsr_avro"` (Avro
    /// binary behind that header; `glue_schema_arn` names an `AVRO` schema), or, in the Confluent
    /// wire format with `[channel.schema] registry_url`: `"avro"`, `"protobuf"` or `"json_sr"`
    /// (JSON Schema). Default: `"json"`.
    pub format: Option<RecordFormat>,
    /// Largest record accepted (after GSR decompression); larger records go to the DLQ as
    /// `RECORD_TOO_LARGE`. From 1KiB to 64MiB. Default: `"10MiB"`.
    pub max_record_size: Option<SizeText>,
    /// How each record carries its change (docs/cdc.md): `"none"` (the record is the row),
    /// `"debezium"` (a Debezium change event, with or without the JSON converter's
    /// `schemas.enable` wrapper: `op` `c`/`r`/`u` write the `after` row, `d` deletes the
    /// `before` row's key, `t` is skipped) or `"upsert"` (the record is the row; a Kafka
    /// tombstone deletes the row of the message key). The schema describes the row. Only with
    /// the JSON formats (`"json"`, `"json_sr"`, `"gsr_json"`) for now; `"debezium"` needs the
    /// row's schema as a `file`, so not `"json_sr"` (whose registry subject holds the envelope's
    /// schema). Default: `"none"`.
    pub envelope: Option<crate::config::Envelope>,
}

/// `[channel.schema]`: the channel's schema: a JSON Schema (draft-04 or draft-07) from a file or
/// from the AWS Glue Schema Registry, or a subject of a Confluent-compatible schema registry.
/// Exactly one of `file`, `glue_schema_arn` and `registry_url`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SchemaSection {
    /// Path of the JSON Schema file (relative to this file's directory). It is read when the
    /// channel starts and by `floe validate`.
    pub file: Option<String>,
    /// The schema in the Glue Schema Registry,
    /// `"arn:aws:glue:REGION:ACCOUNT:schema/REGISTRY/SCHEMA"`; its data format must be `JSON`. The
    /// version chosen at activation is recorded with the channel and used from then on (with
    /// `evolution = "compatible"`, the table follows compatible new versions).
    pub glue_schema_arn: Option<String>,
    /// With `glue_schema_arn`: the schema version number (at least 1) or `"latest"`. Default:
    /// `"latest"` (the latest version at the channel's activation).
    pub version: Option<SchemaVersionText>,
    /// With `file` and `record.format = "gsr_json"`: the registry's schema versions, offline, as
    /// `"VERSION-UUID" = "FILE"`. The channel's version is the one whose document equals `file`;
    /// records of another listed version go to the DLQ as `SCHEMA_MISMATCH`, unlisted versions as
    /// `INVALID_SCHEMA`.
    #[serde(default)]
    pub versions: BTreeMap<String, String>,
    /// With `glue_schema_arn` or `registry_url`: `"none"` (a record of another version than the table's current
    /// one is `SCHEMA_MISMATCH`) or `"compatible"` (a compatible new version of the schema evolves
    /// the table; docs/glue-schema-registry.md "Schema evolution"). Default: `"none"`.
    pub evolution: Option<String>,
    /// With `evolution = "compatible"`, `record.format = "json"` and `version = "latest"`: how
    /// often the registry is asked for a new latest version. Default `"60s"`, from 1 s to 1 h.
    pub poll_interval: Option<DurationText>,
    /// A Confluent-compatible schema registry (`record.format` `"avro"`, `"protobuf"` or
    /// `"json_sr"`): its base URL, `"https://registry:8081"` (or `http`), or a list of URLs tried
    /// in order when one is unavailable. Credentials come from the environment only:
    /// `FLOE_SCHEMA_REGISTRY_BASIC_AUTH="user:password"` or
    /// `FLOE_SCHEMA_REGISTRY_BEARER_TOKEN="token"`.
    pub registry_url: Option<RegistryUrlText>,
    /// With `registry_url`: the subject. The table is created from its latest version at the
    /// channel's activation; a record whose schema id belongs to no version of it goes to the DLQ
    /// as `SCHEMA_MISMATCH`. Default: the topic-name strategy, `"<topic>-value"` (the stream name
    /// for Kinesis). For producers using the record-name strategies, give the subject they
    /// register: the record's full name (`RecordNameStrategy`) or `"<topic>-<full name>"`
    /// (`TopicRecordNameStrategy`).
    pub subject: Option<String>,
    /// With an `https` `registry_url`: a PEM file of CA certificates to trust beside the system
    /// roots (relative to this file's directory).
    pub ca_bundle: Option<String>,
    /// With `record.format = "protobuf"`: the full name of the message the table is created
    /// from (`"com.acme.Event"`). Default: the first message of the subject's file (Confluent
    /// message indexes `[0]`).
    pub message: Option<String>,
}

/// `channel.schema.registry_url` as written: one URL or a list.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(untagged)]
pub enum RegistryUrlText {
    /// One URL.
    One(String),
    /// URLs tried in order.
    Many(Vec<String>),
    /// Anything else: refused by validation naming the key.
    Other(toml::Value),
}

/// `channel.schema.version` as written: a number or a string (`"latest"`).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(untagged)]
pub enum SchemaVersionText {
    /// A version number.
    Number(i64),
    /// `"latest"` (anything else is refused by validation).
    Text(String),
    /// Any other value (a float, a boolean, a table): refused by validation naming the key.
    Other(toml::Value),
}

// Parsed once per channel at start: the size of the Iceberg variant does not matter.
/// `[channel.destination]`: where a channel delivers. Tagged by `kind`.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub enum DestinationSection {
    /// `kind = "iceberg"`: an Apache Iceberg table, partitioned by hour or by its `partition`
    /// spec.
    Iceberg(IcebergDestinationSection),
    /// `kind = "s3"`: raw records, batched into objects of a general-purpose S3 bucket.
    S3(S3DestinationSection),
}

/// `[channel.destination]` with `kind = "s3"`: records exactly as read (no decoding, no
/// validation, no DLQ), batched per shard into objects, compressed, under keys from
/// `key_template`; staged under `_floe_staging/<channel>/` and published by the committer.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct S3DestinationSection {
    /// Bucket name. Required.
    pub bucket: String,
    /// Account id (12 digits) that must own the bucket, sent with every request
    /// (`x-amz-expected-bucket-owner`): a request to a bucket owned by another account fails.
    pub expected_bucket_owner: Option<String>,
    /// Full ARN of a customer-managed KMS key for SSE-KMS
    /// (`arn:aws:kms:REGION:ACCOUNT:key/KEY-ID`); aliases and the AWS-managed key are refused.
    /// Default: the bucket's default encryption.
    pub kms_key_arn: Option<String>,
    /// Output key template. Placeholders: `{channel}`, `{stream}` (or `{topic}`), `{shard}`,
    /// `{first}`, `{last}` (positions of the object's first and last record) and the arrival time
    /// of the object's first record in UTC: `{yyyy}`, `{MM}`, `{dd}`, `{HH}`, `{mm}`. A template
    /// ending in `/` is a prefix: the object name `{channel}-{shard}-{first}-{last}` is appended.
    /// Otherwise the object name (after the last `/`) must contain `{shard}` and `{first}`. The
    /// compression's extension is appended to every key. Default:
    /// `"{channel}/{yyyy}/{MM}/{dd}/{HH}/"`.
    pub key_template: Option<String>,
    /// Compression of objects: `"none"`, `"gzip"` (`.gz`), `"zstd"` (`.zst`) or `"snappy"`
    /// (framing format, `.snappy`). Default: `"none"`.
    pub compression: Option<crate::config::raw::RawCompression>,
    /// What follows each record in an object: `"newline"` or `"none"`. Default: `"newline"`.
    pub record_delimiter: Option<crate::config::raw::RecordDelimiter>,
    /// Maximum age of a record before it is delivered. From 10s to 900s. Default: `"300s"`.
    pub data_freshness: Option<DurationText>,
    /// Target size of an object before compression: an object ends before the record that would
    /// take it past this size (a record is never split). From 1MiB to 2GiB. Default: `"128MiB"`.
    pub target_object_size: Option<SizeText>,
    /// Memory bound for this channel's buffered records in this worker; when full, reading
    /// pauses and the buffer is delivered. From 1KiB to 64GiB. Default: `"256MiB"`.
    pub buffer_size: Option<SizeText>,
}

/// `[channel.destination]` with `kind = "iceberg"`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IcebergDestinationSection {
    /// `[channel.destination.catalog]`: the Iceberg catalog holding the table. Required.
    pub catalog: Section<CatalogSection>,
    /// Namespace of the table: 1 to 255 characters from `a-z 0-9 _`. Created if missing. Required.
    pub namespace: String,
    /// Name of the table: 1 to 255 characters from `a-z 0-9 _`. Created by the channel on first
    /// delivery; floe never writes to a table it did not create. Or `"{topic}"` (a Kafka source):
    /// a table per topic, named after the topic (lowercased, every character outside `a-z 0-9 _`
    /// becoming `_`; docs/routing.md), each with its own checkpoints, committer and maintenance.
    /// Or `"{route}"`: a table per value of `route_field`, as `routes` maps them. Required.
    pub table: String,
    /// With `table = "{topic}"`: the most tables (topics) the channel delivers to, 1 to 1000; a
    /// topic beyond them is not read (logged at error level, counted in
    /// `floe_topics_refused_total`). Bounds the channel's tasks, buffers and metric label
    /// values (docs/routing.md, "Limits"). Default 1000.
    pub max_tables: Option<WholeNumber>,
    /// With `table = "{route}"`: the top-level field of each record whose value picks its table
    /// in `routes` (a string or an enum symbol as is; an integer or a boolean as its JSON text,
    /// `42`, `true`; a missing field, `null` or another type is unroutable). Required with
    /// `table = "{route}"` and refused without it; the schema must have it as a top-level field
    /// (checked at activation). With `"avro"` and `"protobuf"` it is read by each record's
    /// writer schema (its schema id); not with `"gsr_avro"` for now. Each table is written by a
    /// member channel `<channel>.<table>` that reads the whole source from its own checkpoints;
    /// on Kafka the members on a worker share one fetch of each partition (docs/routing.md,
    /// "Fan-out by a field").
    pub route_field: Option<String>,
    /// With `table = "{route}"`: route value → table, e.g. `{ eu = "events_eu", us =
    /// "events_us" }`: 1 to `max_tables` values, table names of 1 to 255 characters from `a-z
    /// 0-9 _` (several values may share a table). Required with `table = "{route}"`.
    pub routes: Option<BTreeMap<String, String>>,
    /// With `table = "{route}"`: where a record whose route value matches no route goes:
    /// `"dlq"` (a DLQ entry with code `UNROUTABLE`, written once, by the member of the first
    /// routed table in name order) or a table name (a default table, one of the routes' or
    /// another). Default: `"dlq"`.
    pub unroutable: Option<String>,
    /// Top-level schema field the table is partitioned on, by `hour(...)`: the shorthand of
    /// `partition = ["hour(<field>)"]`. It must map to `timestamptz`: a `string` with `format:
    /// date-time` (JSON Schema), a `timestamp-millis` or `timestamp-micros` long (Avro), a
    /// `google.protobuf.Timestamp` (Protobuf); it is always a required column (a record without
    /// it goes to the DLQ as `MISSING_PARTITION_VALUE`). Required unless `partition` is given
    /// (not both).
    pub partition_field: Option<String>,
    /// The table's partition spec, one term per partition field: `"identity(f)"`, `"year(f)"`,
    /// `"month(f)"`, `"day(f)"`, `"hour(f)"`, `"bucket(N, f)"`, `"truncate(W, f)"`, `"void(f)"`
    /// on top-level fields whose type the transform takes (docs/partitioning.md); `[]` for an
    /// unpartitioned table. At most one time transform (`year`, `month`, `day`, `hour`), whose
    /// field is required like `partition_field` (and which record expiration needs). Instead
    /// of `partition_field` (not both).
    pub partition: Option<Vec<String>>,
    /// The table's sort order, one term per field: `"field"`, `"field desc"`,
    /// `"field asc nulls last"` (nulls first when ascending, last when descending, by default)
    /// on top-level primitive fields. Each flush's data files are written sorted by it, and it
    /// is the table's sort order (docs/partitioning.md). Default: `[]` (unsorted).
    pub sort: Option<Vec<String>>,
    /// Parquet compression of data files: `"zstd"`, `"snappy"` or `"none"`. Default: `"zstd"`.
    pub compression: Option<CompressionCodec>,
    /// ZSTD level, 1 (fastest) to 22 (smallest); only with `compression = "zstd"`. Default: `3`.
    pub compression_level: Option<WholeNumber>,
    /// Maximum age of a record before it is committed to the table: a worker hands its buffered
    /// records off when the oldest reaches half this age (or the buffer fills), and the committer
    /// commits every worker's batches together at most once per the other half. From 10s to
    /// 900s. Default: `"300s"`.
    pub data_freshness: Option<DurationText>,
    /// Target size of a data file: a flush rolls to a new file of the same partition once a file
    /// reaches it (files of a flush are usually smaller: one per partition per flush; a sorted
    /// table's compaction writes files well under it, docs/partitioning.md).
    /// From 1MiB to 2GiB. Default: `"128MiB"`.
    pub target_file_size: Option<SizeText>,
    /// Memory bound for this channel's buffered rows in this worker; when full, reading pauses
    /// (back-pressure) and the buffer is flushed. At least `channel.record.max_record_size`,
    /// at most 64GiB. Default: `"256MiB"`.
    pub buffer_size: Option<SizeText>,
    /// Data files a flush or a compaction holds open at once, one per partition (an hour, or a
    /// tuple of the `partition` spec): past it, the open files are closed before the next
    /// partition's opens (more, smaller files; docs/partitioning.md). Each open file holds its
    /// Parquet buffers: about 0.7 MB measured, beside `buffer_size`. From 1 to 1000.
    /// Default: `48`.
    pub max_open_partitions: Option<WholeNumber>,
    /// `[channel.destination.maintenance]`: what the committer does to keep the table fast
    /// (snapshot expiry, compaction, manifest rewrite, record expiration). Optional.
    #[serde(default)]
    pub maintenance: Section<MaintenanceSection>,
    /// `"append"` (every row is appended; with an envelope, a changelog of the `after` rows and
    /// no deletes) or `"upsert"` (the table holds one row per `key`, the key's last change;
    /// deletes remove it, by position: docs/cdc.md). Not with `table = "{route}"` for now.
    /// Default: `"append"`.
    pub mode: Option<crate::config::WriteMode>,
    /// With `mode = "upsert"` (required then, refused otherwise): the key columns, e.g.
    /// `["id"]`: top-level fields the schema requires, not float, double or nested. The table
    /// records them as its identifier fields.
    pub key: Option<Vec<String>>,
    /// The Iceberg format version of the table: `2` (deletes are position-delete files) or `3`
    /// (deletion vectors). An existing table must have it. Default: `2`.
    pub format_version: Option<WholeNumber>,
}

/// `[channel.destination.maintenance]`: table maintenance by the committer — snapshot expiry in
/// its data commits, compaction, manifest rewrite and record expiration as conditional snapshots
/// of their own, file cleanup and the orphan sweep (docs/operations.md, "Table maintenance").
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MaintenanceSection {
    /// Whether the committer maintains the table. Default: `true`, except on S3 Tables (which
    /// maintains its tables itself): `false`.
    pub enabled: Option<bool>,
    /// Snapshots older than this are expired (with their manifest lists) when the committer
    /// commits; time travel reaches back this far. From 1m to 3650d. Default: `"1h"`.
    pub snapshot_retention: Option<DurationText>,
    /// Snapshots always kept, however old (the current one is never expired). From 1 to
    /// 100000. Default: `10`.
    pub min_snapshots: Option<WholeNumber>,
    /// Whether snapshots are expired (and the files only they reached deleted). Default: `true`.
    pub snapshot_expiry: Option<bool>,
    /// Whether the small data files of a closed partition (an hour, or a period of the
    /// `partition` time transform, that ended; without a time transform, a partition whose
    /// newest file is `compaction_delay` old) are rewritten into files of about
    /// `target_file_size` (a `replace` snapshot; SQL, REST and Glue catalogs). Default: `true`.
    pub compaction: Option<bool>,
    /// How long after an hour (or the period of the `partition` time transform) ends its
    /// partition is first compacted (late records after that are compacted again later);
    /// without a time transform, how old a partition's newest file must be. From 0s to 7d.
    /// Default: `"10m"`.
    pub compaction_delay: Option<DurationText>,
    /// Whether the current snapshot's manifests are bin-packed into few when there are more
    /// than `max_manifests` (a `replace` snapshot; SQL, REST and Glue catalogs). Default: `true`.
    pub manifest_rewrite: Option<bool>,
    /// Manifests the current snapshot may hold before they are rewritten. From 2 to 100000.
    /// Default: `100`.
    pub max_manifests: Option<WholeNumber>,
    /// Records older than this (by their hour partition, or the period of the `partition` time
    /// transform) are removed, whole partitions at a time, in a `delete` snapshot (SQL, REST and
    /// Glue catalogs; refused on S3 Tables, and for a `partition` without a time transform); the
    /// open hour or period never is. From 1h to 36500d. Default: none (records are kept).
    pub record_retention: Option<DurationText>,
    /// How often the committer looks for compaction, manifest rewrite and record expiration
    /// work. From 1s to 1d. Default: `"1m"`.
    pub interval: Option<DurationText>,
    /// Whether the committer sweeps orphans: floe-named files under the table location that no
    /// snapshot, metadata or pending batch reaches (daily, the first an hour after the committer
    /// starts; `floe maintain` sweeps at once). Needs `s3:ListBucket` on `s3://` locations.
    /// Default: `true`.
    pub orphan_sweep: Option<bool>,
    /// The sweep's safety age: only files whose UUIDv7 is older are deleted, and a pending batch
    /// older than half of it is rejected (its records read again). From 1h to 365d. Default:
    /// `"24h"`.
    pub orphan_age: Option<DurationText>,
}

/// Parquet compression codec as written in the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CompressionCodec {
    /// `"zstd"`.
    Zstd,
    /// `"snappy"`.
    Snappy,
    /// `"none"`: uncompressed.
    None,
}

/// `[channel.destination.catalog]`: the Iceberg catalog. Tagged by `kind`.
#[derive(Debug)]
pub enum CatalogSection {
    /// `kind = "sql"`: an SQL catalog in an SQLite database (the embedded default) or in
    /// PostgreSQL.
    Sql(SqlCatalogSection),
    /// `kind = "rest"`: an Iceberg REST catalog (Polaris, Lakekeeper, Nessie, Gravitino, …).
    Rest(RestCatalogSection),
    /// `kind = "glue"`: the AWS Glue Data Catalog.
    Glue(GlueCatalogSection),
    /// `kind = "s3tables"`: an Amazon S3 Tables table bucket.
    S3Tables(S3TablesCatalogSection),
}

/// `[channel.destination.catalog]` with `kind = "s3tables"`: an Amazon S3 Tables table bucket
/// (through the `[aws]` region, endpoint and credentials).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct S3TablesCatalogSection {
    /// ARN of the table bucket, `"arn:aws:s3tables:REGION:ACCOUNT:bucket/NAME"`. The namespace is
    /// created in it if missing, and the table when the channel is activated. Required.
    pub table_bucket_arn: String,
    /// Full ARN of a customer-managed KMS key: the table is created with this SSE-KMS encryption
    /// configuration (S3 Tables `CreateTable` `encryptionConfiguration`), so its data and metadata
    /// files are encrypted under it (`arn:aws:kms:REGION:ACCOUNT:key/KEY-ID`; aliases and the
    /// AWS-managed key are refused). Default: the table bucket's default encryption.
    pub kms_key_arn: Option<String>,
}

/// `[channel.destination.catalog]` with `kind = "glue"`: the AWS Glue Data Catalog, tables on
/// S3 (through the `[aws]` region, endpoint and credentials).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GlueCatalogSection {
    /// S3 location under which new tables are written, `"s3://bucket/prefix"`; a table goes to
    /// `<warehouse>/<namespace>.db/<table>` (a Glue database's own location is not used: every
    /// file stays under the warehouse, whose owner floe checks). Required.
    pub warehouse: String,
    /// Account id (12 digits) of the Glue Data Catalog. Default: the caller's account.
    pub catalog_id: Option<String>,
    /// Full ARN of a customer-managed KMS key: data and metadata files are written with SSE-KMS
    /// under it (`arn:aws:kms:REGION:ACCOUNT:key/KEY-ID`; aliases and the AWS-managed key are
    /// refused). Default: the bucket's default encryption.
    pub kms_key_arn: Option<String>,
    /// Account id (12 digits) that must own the warehouse bucket: checked with
    /// `GetBucketLocation` + `x-amz-expected-bucket-owner` whenever the catalog is opened.
    pub expected_bucket_owner: Option<String>,
}

/// `[channel.destination.catalog]` with `kind = "sql"`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SqlCatalogSection {
    /// Catalog name recorded in the SQL catalog's tables (readers such as PyIceberg must use the
    /// same name). 1 to 255 characters from `A-Z a-z 0-9 _ -`. Default: `"floe"`.
    pub name: Option<String>,
    /// The catalog database: an SQLite file, `"sqlite:PATH"` or a plain path (relative to this
    /// file's directory), created if missing; or a PostgreSQL database,
    /// `"postgresql://USER@HOST:PORT/DATABASE"` (no password in the file: `PGPASSWORD` or
    /// `~/.pgpass`; TLS with `?sslmode=require` or `verify-full`) or `"env:VARNAME"` holding such
    /// a URL, password included. On PostgreSQL the catalog's tables (`iceberg_tables`,
    /// `iceberg_namespace_properties`, as Spark's JdbcCatalog and PyIceberg's SqlCatalog name
    /// them) are created in the URL's default schema when missing. Required.
    pub uri: String,
    /// Directory under which table data and metadata files are written (relative to this file's
    /// directory), or an S3 location `"s3://bucket/prefix"` written through the `[aws]` settings.
    /// Required.
    pub warehouse: String,
    /// Full ARN of a customer-managed KMS key: data and metadata files of an `s3://` warehouse
    /// are written with SSE-KMS under it (`arn:aws:kms:REGION:ACCOUNT:key/KEY-ID`; aliases and
    /// the AWS-managed key are refused). Only with an `s3://` warehouse. Default: the bucket's
    /// default encryption.
    pub kms_key_arn: Option<String>,
    /// Account id (12 digits) that must own the `s3://` warehouse's bucket: checked with
    /// `GetBucketLocation` + `x-amz-expected-bucket-owner` whenever the catalog is opened (channel start,
    /// `floe channel create`); a bucket of another account stops the channel. Only with an
    /// `s3://` warehouse.
    pub expected_bucket_owner: Option<String>,
}

/// `[channel.destination.catalog]` with `kind = "rest"`: a catalog speaking the Iceberg REST
/// protocol (the Apache Iceberg REST OpenAPI specification). Table locations, and possibly storage
/// credentials, come from the server; floe writes `s3://` locations through the `[aws]` region and
/// endpoint, and local (`file://`) locations directly. Secrets are read from the environment:
/// `token`, `credential` and `client_secret` must be written `"env:VARNAME"`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RestCatalogSection {
    /// Base URI of the catalog, `http(s)://host[:port][/path]`, without the `/v1` suffix (e.g.
    /// `"https://polaris.example.com/api/catalog"`). Required.
    pub uri: String,
    /// Warehouse to ask the server for (`GET /v1/config?warehouse=…`): a warehouse or catalog name
    /// for Polaris, Lakekeeper or Gravitino, a location for others. Default: none (the server's
    /// default).
    pub warehouse: Option<String>,
    /// Bearer token sent as `Authorization: Bearer …`, as `"env:VARNAME"`. At most one of
    /// `token`, `credential` and `client_id` + `client_secret`. Default: none.
    pub token: Option<String>,
    /// OAuth2 client credentials `"CLIENT_ID:CLIENT_SECRET"` (or a bare secret), as `"env:VARNAME"`,
    /// exchanged for a token at `oauth2_server_uri`. Default: none.
    pub credential: Option<String>,
    /// OAuth2 client id, with `client_secret` (the credential in two parts). Default: none.
    pub client_id: Option<String>,
    /// OAuth2 client secret, with `client_id`, as `"env:VARNAME"`. Default: none.
    pub client_secret: Option<String>,
    /// Token endpoint of the OAuth2 client-credentials exchange. Default: `<uri>/v1/oauth/tokens`.
    pub oauth2_server_uri: Option<String>,
    /// OAuth2 scope requested with the client credentials (e.g. `"PRINCIPAL_ROLE:ALL"` for
    /// Polaris). Default: `"catalog"`.
    pub scope: Option<String>,
    /// Ask the server for storage credentials with each table (`X-Iceberg-Access-Delegation:
    /// vended-credentials`), as Polaris and Lakekeeper hand out when so configured. Default:
    /// `false` (floe's own credentials from the environment chain).
    pub vended_credentials: Option<bool>,
    /// AWS SigV4 request signing with the `[aws]` credential chain, as the S3 Tables and Glue
    /// Iceberg REST endpoints and API Gateway IAM authorization need; instead of `token` or
    /// OAuth2 credentials. Default: `false`.
    pub sigv4: Option<bool>,
    /// SigV4 signing name: the AWS service of the endpoint (`"s3tables"`, `"glue"`,
    /// `"execute-api"`); only with `sigv4 = true`. Default: `"s3tables"` or `"glue"` for
    /// `s3tables.REGION.amazonaws.com` and `glue.REGION.amazonaws.com`, else `"execute-api"`.
    pub signing_name: Option<String>,
    /// SigV4 signing region (`"us-east-1"`); only with `sigv4 = true`. Default: the region in an
    /// `*.REGION.amazonaws.com` host, else the `[aws]` region.
    pub signing_region: Option<String>,
    /// Full ARN of a customer-managed KMS key: files floe writes to `s3://` table locations are
    /// written with SSE-KMS under it (`arn:aws:kms:REGION:ACCOUNT:key/KEY-ID`). Default: the
    /// bucket's default encryption.
    pub kms_key_arn: Option<String>,
}

/// `[channel.dlq]`: the dead-letter queue, JSON Lines entries for rejected records. Tagged by
/// `kind`.
#[derive(Debug)]
pub enum DlqSection {
    /// `kind = "local"`: files in a local directory.
    Local(LocalDlqSection),
    /// `kind = "s3"`: objects under an S3 prefix.
    S3(S3DlqSection),
}

/// `[channel.dlq]` with `kind = "s3"`: one JSON Lines object per committed batch, under
/// `<prefix><channel>/<batch id>.jsonl` (staged first under `<prefix>_staging/`).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct S3DlqSection {
    /// Bucket name. Required.
    pub bucket: String,
    /// Key prefix, e.g. `"floe-dlq/"`. Default: empty.
    #[serde(default)]
    pub prefix: String,
    /// Account id (12 digits) that must own the bucket, sent with every request
    /// (`x-amz-expected-bucket-owner`): a request to a bucket owned by another account fails.
    pub expected_bucket_owner: Option<String>,
    /// Full ARN of a customer-managed KMS key for SSE-KMS
    /// (`arn:aws:kms:REGION:ACCOUNT:key/KEY-ID`); aliases and the AWS-managed key are refused.
    /// Default: the bucket's default encryption.
    pub kms_key_arn: Option<String>,
    /// Whether each entry carries the rejected record's payload (base64). Default: `false`.
    #[serde(default)]
    pub include_payload: bool,
}

/// `[channel.dlq]` with `kind = "local"`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LocalDlqSection {
    /// Directory of the DLQ files (relative to this file's directory), created if missing.
    /// Required.
    pub path: String,
    /// Whether each entry carries the rejected record's payload (base64). Off by default, since
    /// payloads may hold personal data. Default: `false`.
    #[serde(default)]
    pub include_payload: bool,
}

/// A duration as written, e.g. `"300s"`; parsed during validation so errors carry the key path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DurationText(pub String);

/// A size as written, e.g. `"128MiB"`; parsed during validation so errors carry the key path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SizeText(pub String);

macro_rules! text_newtype {
    ($name:ident, $expecting:literal) => {
        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                struct TextVisitor;
                impl serde::de::Visitor<'_> for TextVisitor {
                    type Value = $name;
                    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                        f.write_str($expecting)
                    }
                    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<$name, E> {
                        Ok($name(v.to_owned()))
                    }
                }
                deserializer.deserialize_str(TextVisitor)
            }
        }
    };
}
text_newtype!(
    DurationText,
    "a duration string such as \"300s\" or \"10m\""
);
text_newtype!(SizeText, "a size string such as \"128MiB\"");

/// A whole number as written (any TOML value): validation checks that it is an integer in the
/// key's range, so a wrong value is reported in the key's terms ("a whole number from 1 to 1000").
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(transparent)]
pub struct WholeNumber(pub toml::Value);

/// One table of the file, kept as TOML until validation parses it on its own, so that its errors
/// carry its key path and do not hide the errors of other tables.
pub struct Section<T> {
    value: Option<toml::Value>,
    of: PhantomData<fn() -> T>,
}

impl<T> Default for Section<T> {
    fn default() -> Self {
        Section {
            value: None,
            of: PhantomData,
        }
    }
}

impl<T> fmt::Debug for Section<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Section").field(&self.value).finish()
    }
}

impl<T> Section<T> {
    /// The `kind` of a tagged section as written, if it is a string.
    pub fn kind(&self) -> Option<&str> {
        self.value.as_ref()?.get("kind")?.as_str()
    }

    /// Whether the section was written in the file.
    pub fn is_present(&self) -> bool {
        self.value.is_some()
    }

    /// Takes `keys` out of the section as written; returns those that were there.
    pub fn take_keys(&mut self, keys: &[&'static str]) -> Vec<&'static str> {
        let Some(table) = self.value.as_mut().and_then(|v| v.as_table_mut()) else {
            return Vec::new();
        };
        keys.iter()
            .copied()
            .filter(|k| table.remove(*k).is_some())
            .collect()
    }

    /// A section holding `value`.
    pub fn new(value: toml::Value) -> Self {
        Section {
            value: Some(value),
            of: PhantomData,
        }
    }
}

impl<'de, T> Deserialize<'de> for Section<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        toml::Value::deserialize(deserializer).map(Section::new)
    }
}

/// An error inside one section: the key path relative to the section (empty for the section
/// itself) and the message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SectionError {
    pub(crate) key: String,
    pub(crate) message: String,
}

impl SectionError {
    /// Takes the key path out of a TOML value deserialization error (toml reports it only in its
    /// `Display`, as a trailing ``in `a.b` `` line).
    fn from_toml(error: toml::de::Error) -> Self {
        let message = error.message().trim_end().to_owned();
        let shown = error.to_string();
        let key = shown
            .lines()
            .rev()
            .find_map(|line| line.strip_prefix("in `")?.strip_suffix('`'))
            .unwrap_or_default()
            .to_owned();
        SectionError { key, message }
    }
}

/// A type parsed from one section.
pub(crate) trait FromSection: Sized {
    /// Parses the section; `None` when the section is absent (a defaulted optional table).
    /// Returns the section without its unknown keys when the rest parses (so that what it holds
    /// is still checked), and the problems: every unknown key, then the first other problem.
    fn from_section(value: Option<toml::Value>) -> (Option<Self>, Vec<SectionError>);
}

impl<T> Section<T> {
    /// See [`FromSection::from_section`]: the section without its unknown keys (if the rest
    /// parses) and every problem.
    pub(crate) fn parse(self) -> (Option<T>, Vec<SectionError>)
    where
        T: FromSection,
    {
        T::from_section(self.value)
    }
}

/// Deserializes `T` from `value`, reporting every key `T` does not know: serde stops at the first
/// one, so each is taken out of the value in turn and `T` deserialized again. Returns `T` parsed
/// from the rest (if it parses) and the errors: the unknown keys (serde's `unknown field`
/// message, at the table holding the key), then `T`'s own first other error, if any.
pub(crate) fn parse_past_unknown_keys<T: DeserializeOwned>(
    mut value: toml::Value,
) -> (Option<T>, Vec<SectionError>) {
    let mut errors = Vec::new();
    loop {
        match T::deserialize(value.clone()) {
            Ok(parsed) => return (Some(parsed), errors),
            Err(e) => {
                let error = SectionError::from_toml(e);
                let removed = super::unknown_keys::unknown_key_of(&error.message)
                    .is_some_and(|key| remove_key(&mut value, &error.key, key));
                errors.push(error);
                if !removed {
                    return (None, errors);
                }
            }
        }
    }
}

/// Removes `key` from the table at the dotted `table_path` (empty: `value` itself) of `value`;
/// whether it was there.
fn remove_key(value: &mut toml::Value, table_path: &str, key: &str) -> bool {
    let mut at = value;
    for segment in table_path.split('.').filter(|s| !s.is_empty()) {
        let next = match at {
            toml::Value::Table(table) => table.get_mut(segment),
            toml::Value::Array(items) => {
                segment.parse::<usize>().ok().and_then(|i| items.get_mut(i))
            }
            _ => None,
        };
        match next {
            Some(next) => at = next,
            None => return false,
        }
    }
    at.as_table_mut().is_some_and(|t| t.remove(key).is_some())
}

macro_rules! plain_section {
    ($($t:ty),*) => {$(
        impl FromSection for $t {
            fn from_section(value: Option<toml::Value>) -> (Option<Self>, Vec<SectionError>) {
                let value = value.unwrap_or_else(|| toml::Value::Table(toml::Table::new()));
                parse_past_unknown_keys(value)
            }
        }
    )*};
}
plain_section!(
    WorkerSection,
    AwsSection,
    ChannelSection,
    RecordSection,
    MaintenanceSection,
    SchemaSection
);

/// Splits a tagged table into its `kind` (deserialized as `K`) and the remaining keys.
fn tagged<K: DeserializeOwned>(
    value: Option<toml::Value>,
) -> Result<(K, toml::Table), SectionError> {
    let section_error = |key: &str, message: String| SectionError {
        key: key.to_owned(),
        message,
    };
    let mut table = match value {
        Some(toml::Value::Table(table)) => table,
        Some(other) => {
            return Err(section_error(
                "",
                format!("invalid type: {}, expected a table", other.type_str()),
            ))
        }
        None => return Err(section_error("", "missing table".to_owned())),
    };
    let kind = table
        .remove("kind")
        .ok_or_else(|| section_error("", "missing field `kind`".to_owned()))?;
    let kind = K::deserialize(kind).map_err(|e| section_error("kind", e.message().to_owned()))?;
    Ok((kind, table))
}

fn variant<T: DeserializeOwned>(table: toml::Table) -> (Option<T>, Vec<SectionError>) {
    parse_past_unknown_keys(toml::Value::Table(table))
}

/// Implements [`FromSection`] for a section tagged by `kind`: a closed enum of kinds, each with
/// its own struct (and its own unknown-key check). Kinds not supported yet keep their keys as a
/// TOML table; validation refuses them.
macro_rules! tagged_section {
    ($section:ident { $($kind:literal => $variant:ident($parse:tt)),* $(,)? }) => {
        impl FromSection for $section {
            fn from_section(value: Option<toml::Value>) -> (Option<Self>, Vec<SectionError>) {
                #[derive(Deserialize)]
                enum Kind { $(#[serde(rename = $kind)] $variant),* }
                let (kind, table) = match tagged::<Kind>(value) {
                    Ok(tagged) => tagged,
                    Err(e) => return (None, vec![e]),
                };
                match kind {
                    $(Kind::$variant => tagged_section!(@parse $section $variant $parse table)),*
                }
            }
        }
    };
    (@parse $section:ident $variant:ident table $table:ident) => { (Some($section::$variant($table)), Vec::new()) };
    (@parse $section:ident $variant:ident struct $table:ident) => {{
        let (parsed, errors) = variant($table);
        (parsed.map($section::$variant), errors)
    }};
}

tagged_section!(LeaseStoreSection {
    "sqlite" => Sqlite(struct),
    "dynamodb" => Dynamodb(struct),
    "postgres" => Postgres(struct),
});
tagged_section!(SourceSection { "kafka" => Kafka(struct), "kinesis" => Kinesis(struct) });
tagged_section!(DestinationSection { "iceberg" => Iceberg(struct), "s3" => S3(struct) });
tagged_section!(CatalogSection {
    "sql" => Sql(struct),
    "rest" => Rest(struct),
    "glue" => Glue(struct),
    "s3tables" => S3Tables(struct),
});
tagged_section!(DlqSection { "local" => Local(struct), "s3" => S3(struct) });
