//! Validation of the parsed file into typed [`Config`]: defaults, ranges, names and cross-field
//! rules. Pure: no I/O (the environment comes in as [`ConfigEnv`]). Every problem is collected.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::ops::RangeInclusive;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::file::{
    AwsSection, CatalogSection, ChannelSection, CompressionCodec, ConfigFile, DestinationSection,
    DlqSection, DurationText, FromSection, GlueCatalogSection, IcebergDestinationSection,
    KafkaSourceSection, KinesisSourceSection, LeaseStoreSection, S3DestinationSection,
    S3DlqSection, S3TablesCatalogSection, Section, SizeText, SourceSection, WholeNumber,
    WorkerSection,
};
use super::units::{format_duration, format_size, parse_duration, parse_size};
use super::*;
use crate::schema::partition::PartitionTerm;

mod rest;

/// Default of `channel.destination.maintenance.snapshot_retention`.
const DEFAULT_SNAPSHOT_RETENTION: Duration = Duration::from_secs(3600);
const SNAPSHOT_RETENTION_RANGE: RangeInclusive<Duration> =
    Duration::from_secs(60)..=Duration::from_secs(3650 * 86_400);
/// Default of `channel.destination.maintenance.min_snapshots`.
const DEFAULT_MIN_SNAPSHOTS: u32 = 10;
const MIN_SNAPSHOTS_RANGE: RangeInclusive<u32> = 1..=100_000;
const COMPACTION_DELAY_RANGE: RangeInclusive<Duration> =
    Duration::ZERO..=Duration::from_secs(7 * 86_400);
const MAX_MANIFESTS_RANGE: RangeInclusive<u32> = 2..=100_000;
const RECORD_RETENTION_RANGE: RangeInclusive<Duration> =
    Duration::from_secs(3600)..=Duration::from_secs(36_500 * 86_400);
const ORPHAN_AGE_RANGE: RangeInclusive<Duration> =
    Duration::from_secs(3600)..=Duration::from_secs(365 * 86_400);
const MAINTENANCE_INTERVAL_RANGE: RangeInclusive<Duration> =
    Duration::from_secs(1)..=Duration::from_secs(86_400);
const SHUTDOWN_TIMEOUT_RANGE: RangeInclusive<Duration> =
    Duration::from_secs(1)..=Duration::from_secs(3600);
const LEASE_DURATION_RANGE: RangeInclusive<Duration> =
    Duration::from_secs(1)..=Duration::from_secs(600);
const MIN_RENEW_INTERVAL: Duration = Duration::from_millis(100);
const MAX_RECORD_SIZE_RANGE: RangeInclusive<u64> = (1 << 10)..=(64 << 20);
pub(crate) const DATA_FRESHNESS_RANGE: RangeInclusive<Duration> =
    Duration::from_secs(10)..=Duration::from_secs(900);
const TARGET_FILE_SIZE_RANGE: RangeInclusive<u64> = (1 << 20)..=(2 << 30);
const BUFFER_SIZE_RANGE: RangeInclusive<u64> = (1 << 10)..=(64 << 30);
const MAX_OPEN_PARTITIONS_RANGE: RangeInclusive<u32> = 1..=1000;
const MAX_TABLES_RANGE: RangeInclusive<u32> = 1..=1000;
const MAX_TOPICS_LISTED: usize = 1000;
const TOPIC_REFRESH_RANGE: RangeInclusive<Duration> =
    Duration::from_secs(5)..=Duration::from_secs(600);
const ZSTD_LEVEL_RANGE: RangeInclusive<i64> = 1..=22;

/// Kafka client properties floe sets itself, with the reason given to the user. The one list:
/// config validation refuses them at their key path and [`crate::source::kafka::KafkaSource`]
/// refuses them too (see [`owned_kafka_property`]).
const OWNED_KAFKA_PROPERTIES: [(&str, &str); 11] = [
    ("bootstrap.servers", "set `bootstrap_servers` instead"),
    ("metadata.broker.list", "set `bootstrap_servers` instead"),
    (
        "group.id",
        "floe assigns partitions itself and uses no consumer group",
    ),
    (
        "enable.auto.commit",
        "floe never commits offsets to Kafka: checkpoints live in the table",
    ),
    (
        "auto.commit.enable",
        "floe never commits offsets to Kafka: checkpoints live in the table",
    ),
    (
        "enable.auto.offset.store",
        "floe never stores offsets in Kafka: checkpoints live in the table",
    ),
    (
        "auto.offset.reset",
        "set `initial_position` instead; floe resumes from the table's checkpoints",
    ),
    ("enable.partition.eof", "floe sets it itself"),
    ("group.instance.id", "floe never joins a consumer group"),
    (
        "isolation.level",
        "floe always reads committed records only (read_committed): aborted transactional records never reach the table",
    ),
    (
        "statistics.interval.ms",
        "floe uses librdkafka statistics for lag reporting",
    ),
];

/// Why floe refuses the Kafka client property `key` from the user, if it is one floe sets itself.
pub(crate) fn owned_kafka_property(key: &str) -> Option<&'static str> {
    OWNED_KAFKA_PROPERTIES
        .iter()
        .find(|(owned, _)| *owned == key)
        .map(|(_, why)| *why)
}

pub(super) fn validate(
    file: ConfigFile,
    base_dir: &Path,
    env: &ConfigEnv,
) -> Result<Config, ConfigErrors> {
    let mut cx = Checker {
        errors: Vec::new(),
        base_dir,
        env,
    };
    let worker = cx.worker(file.worker);
    let aws = cx.aws(file.aws);
    let lease_store = cx.lease_store(file.lease_store);
    if file.channels.is_empty() {
        cx.error("channel", "at least one [[channel]] is required");
    }
    let channels: Vec<Option<ChannelConfig>> = file
        .channels
        .into_iter()
        .enumerate()
        .map(|(i, section)| cx.channel(i, section))
        .collect();
    cx.across_channels(&channels);
    match (worker, aws, lease_store, cx.errors.is_empty()) {
        (Some(worker), Some(aws), Some(lease_store), true) => Ok(Config {
            worker,
            aws,
            lease_store,
            channels: channels.into_iter().flatten().collect(),
            members: Vec::new(),
        }),
        _ => Err(ConfigErrors(cx.errors)),
    }
}

struct Checker<'a> {
    errors: Vec<ConfigError>,
    base_dir: &'a Path,
    env: &'a ConfigEnv,
}

impl Checker<'_> {
    fn error(&mut self, path: impl Into<String>, message: impl Into<String>) {
        self.errors.push(ConfigError {
            path: path.into(),
            message: message.into(),
        });
    }

    fn section<T: FromSection>(&mut self, section: Section<T>, path: &str) -> Option<T> {
        // Parsed without its unknown keys (each reported), the rest is still checked.
        let (value, errors) = section.parse();
        for e in errors {
            let path = if e.key.is_empty() {
                path.to_owned()
            } else {
                format!("{path}.{}", e.key)
            };
            self.error(path, e.message);
        }
        value
    }

    fn duration(
        &mut self,
        path: &str,
        text: Option<DurationText>,
        default: Duration,
        range: RangeInclusive<Duration>,
    ) -> Option<Duration> {
        let Some(DurationText(text)) = text else {
            return Some(default);
        };
        let value = parse_duration(&text)
            .map_err(|e| self.error(path, e))
            .ok()?;
        self.in_range(path, &text, value, &range, |d| format_duration(*d))
    }

    fn size(
        &mut self,
        path: &str,
        text: Option<SizeText>,
        default: u64,
        range: RangeInclusive<u64>,
    ) -> Option<u64> {
        let Some(SizeText(text)) = text else {
            return Some(default);
        };
        let value = parse_size(&text).map_err(|e| self.error(path, e)).ok()?;
        self.in_range(path, &text, value, &range, |s| format_size(*s))
    }

    fn number<T: Copy + Into<i64> + TryFrom<i64>>(
        &mut self,
        path: &str,
        value: Option<WholeNumber>,
        default: T,
        range: RangeInclusive<T>,
    ) -> Option<T> {
        let Some(WholeNumber(value)) = value else {
            return Some(default);
        };
        let range: RangeInclusive<i64> = (*range.start()).into()..=(*range.end()).into();
        let toml::Value::Integer(n) = value else {
            let written = match &value {
                toml::Value::String(s) => {
                    format!("the string \"{s}\" (write a number without quotes)")
                }
                other => format!("the {} {other}", other.type_str()),
            };
            self.error(
                path,
                format!(
                    "expected a whole number from {} to {}, not {written}",
                    range.start(),
                    range.end()
                ),
            );
            return None;
        };
        let n = self.in_range(path, &n.to_string(), n, &range, i64::to_string)?;
        T::try_from(n).ok()
    }

    fn in_range<T: PartialOrd>(
        &mut self,
        path: &str,
        text: &str,
        value: T,
        range: &RangeInclusive<T>,
        show: impl Fn(&T) -> String,
    ) -> Option<T> {
        if value < *range.start() {
            self.error(
                path,
                format!("{text} is below the minimum {}", show(range.start())),
            );
            None
        } else if value > *range.end() {
            self.error(
                path,
                format!("{text} is above the maximum {}", show(range.end())),
            );
            None
        } else {
            Some(value)
        }
    }

    /// A local path, relative paths resolved against the configuration file's directory.
    fn local_path(&mut self, path: &str, text: &str) -> Option<PathBuf> {
        if text.trim().is_empty() {
            self.error(path, "must not be empty");
            return None;
        }
        if text.contains("://") {
            let message = if text.starts_with("s3://") {
                format!("\"{text}\": s3:// locations are not supported yet in this build")
            } else {
                format!("\"{text}\" is not a local path")
            };
            self.error(path, message);
            return None;
        }
        Some(self.base_dir.join(text))
    }

    /// A string value written literally or as `"env:VARNAME"` (read from the environment);
    /// a `secret` must come from the environment.
    fn property_value(&mut self, path: &str, value: String, secret: bool) -> Option<PropertyValue> {
        match value.strip_prefix("env:") {
            Some(var) => {
                let valid_name = !var.is_empty()
                    && !var.starts_with(|c: char| c.is_ascii_digit())
                    && var.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
                if !valid_name {
                    self.error(
                        path,
                        format!("\"env:{var}\": not a valid environment variable name"),
                    );
                    return None;
                }
                match self.env.vars.get(var) {
                    Some(v) => Some(PropertyValue::FromEnv {
                        var: var.to_owned(),
                        value: v.clone(),
                    }),
                    None => {
                        self.error(path, format!("environment variable {var} is not set"));
                        None
                    }
                }
            }
            None if secret => {
                self.error(
                    path,
                    "secrets must not be written in the file: write \"env:VARNAME\" and set VARNAME in the worker's environment",
                );
                None
            }
            None => Some(PropertyValue::Literal(value)),
        }
    }

    fn name(
        &mut self,
        path: &str,
        value: String,
        max_len: usize,
        allowed: &str,
        ok: fn(char) -> bool,
    ) -> Option<String> {
        if value.is_empty() || value.len() > max_len || !value.chars().all(ok) {
            self.error(
                path,
                format!(
                    "\"{value}\" is not a valid name: use 1 to {max_len} characters from {allowed}"
                ),
            );
            return None;
        }
        Some(value)
    }

    fn worker(&mut self, section: Section<WorkerSection>) -> Option<WorkerConfig> {
        let w = self.section(section, "worker")?;
        let id = match w.id {
            Some(id) => self.name("worker.id", id, 128, "A-Z a-z 0-9 . _ : -", |c| {
                c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | ':' | '-')
            }),
            None => Some(format!("{}-{}", self.env.hostname, self.env.pid)),
        };
        let metrics_address = match w.metrics_address.as_deref() {
            None => Some(Some(
                DEFAULT_METRICS_ADDRESS.parse().expect("valid default"),
            )),
            Some("off") => Some(None),
            Some(text) => match text.parse::<SocketAddr>() {
                Ok(address) => Some(Some(address)),
                Err(_) => {
                    self.error(
                        "worker.metrics_address",
                        format!("\"{text}\" is not an IP socket address such as \"127.0.0.1:9464\" (host names are not resolved); \"off\" disables the endpoint"),
                    );
                    None
                }
            },
        };
        let shutdown_timeout = self.duration(
            "worker.shutdown_timeout",
            w.shutdown_timeout,
            DEFAULT_SHUTDOWN_TIMEOUT,
            SHUTDOWN_TIMEOUT_RANGE,
        );
        Some(WorkerConfig {
            id: id?,
            metrics_address: metrics_address?,
            shutdown_timeout: shutdown_timeout?,
        })
    }

    fn aws(&mut self, section: Section<AwsSection>) -> Option<crate::config::aws::AwsConfig> {
        let s = self.section(section, "aws")?;
        let mut ok = true;
        if let Some(region) = &s.region {
            let valid = !region.is_empty()
                && region
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
            if !valid {
                ok = false;
                self.error(
                    "aws.region",
                    format!("\"{region}\" is not an AWS region name such as \"us-east-1\""),
                );
            }
        }
        let mut endpoint_ok = |path: String, url: &str| {
            let valid = url
                .strip_prefix("http://")
                .or_else(|| url.strip_prefix("https://"))
                .is_some_and(|rest| !rest.is_empty() && !rest.contains(char::is_whitespace));
            if !valid {
                self.error(
                    path,
                    format!("\"{url}\" is not an endpoint URL such as \"http://127.0.0.1:5056\""),
                );
            }
            valid
        };
        if let Some(url) = &s.endpoint_url {
            ok &= endpoint_ok("aws.endpoint_url".to_owned(), url);
        }
        for (service, url) in &s.endpoints {
            ok &= endpoint_ok(format!("aws.endpoints.{service}"), url);
        }
        let ca_bundle = match &s.ca_bundle {
            None => None,
            Some(text) => {
                let path = self.ca_bundle("aws.ca_bundle", text);
                ok &= path.is_some();
                path
            }
        };
        ok.then_some(crate::config::aws::AwsConfig {
            region: s.region,
            profile: s.profile,
            endpoint_url: s.endpoint_url,
            endpoints: s.endpoints,
            ca_bundle,
        })
    }

    fn lease_store(&mut self, section: Section<LeaseStoreSection>) -> Option<LeaseStoreConfig> {
        let (backend, lease_duration, renew_interval, max_leases_to_steal) = match self
            .section(section, "lease_store")?
        {
            LeaseStoreSection::Sqlite(s) => (
                self.local_path("lease_store.path", &s.path)
                    .map(|path| LeaseStoreBackend::Sqlite { path }),
                s.lease_duration,
                s.renew_interval,
                s.max_leases_to_steal,
            ),
            LeaseStoreSection::Dynamodb(s) => {
                let valid = (3..=255).contains(&s.table.len())
                    && s.table
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
                if !valid {
                    self.error(
                            "lease_store.table",
                            format!("\"{}\" is not a DynamoDB table name: 3 to 255 characters from A-Z a-z 0-9 _ - .", s.table),
                        );
                }
                (
                    valid.then(|| LeaseStoreBackend::Dynamodb {
                        table: s.table,
                        create_lease_table: s.create_lease_table.unwrap_or(true),
                    }),
                    s.lease_duration,
                    s.renew_interval,
                    s.max_leases_to_steal,
                )
            }
            LeaseStoreSection::Postgres(s) => (
                self.postgres_lease_store(&s),
                s.lease_duration,
                s.renew_interval,
                s.max_leases_to_steal,
            ),
        };
        let lease_duration = self.duration(
            "lease_store.lease_duration",
            lease_duration,
            DEFAULT_LEASE_DURATION,
            LEASE_DURATION_RANGE,
        );
        let renew_default = lease_duration.unwrap_or(DEFAULT_LEASE_DURATION) / 3;
        let renew_text = renew_interval;
        let renew_interval = self.duration(
            "lease_store.renew_interval",
            renew_text.clone(),
            renew_default,
            MIN_RENEW_INTERVAL..=Duration::MAX,
        );
        let mut renew_ok = true;
        if let (Some(lease), Some(renew), Some(DurationText(text))) =
            (lease_duration, renew_interval, &renew_text)
        {
            if renew.saturating_mul(3) > lease {
                renew_ok = false;
                self.error(
                    "lease_store.renew_interval",
                    format!(
                        "{text} is more than a third of lease_duration ({}): a worker must be able to miss two renewals before its leases expire",
                        format_duration(lease)
                    ),
                );
            }
        }
        let max_leases_to_steal = self.number(
            "lease_store.max_leases_to_steal",
            max_leases_to_steal,
            DEFAULT_MAX_LEASES_TO_STEAL,
            1..=u32::MAX,
        );
        Some(LeaseStoreConfig {
            backend: backend?,
            lease_duration: lease_duration?,
            renew_interval: renew_interval.filter(|_| renew_ok)?,
            max_leases_to_steal: max_leases_to_steal?,
        })
    }

    /// `[lease_store] kind = "postgres"`: the URL (literal without a password, or from the
    /// environment), TLS mode, pool size and schema.
    fn postgres_lease_store(
        &mut self,
        s: &crate::config::file::PostgresLeaseStoreSection,
    ) -> Option<LeaseStoreBackend> {
        let url = self.postgres_url("lease_store.url", &s.url);
        let ssl_mode = match s.ssl_mode.as_deref().unwrap_or("prefer").parse() {
            Ok(mode) => Some(mode),
            Err(message) => {
                self.error("lease_store.ssl_mode", message);
                None
            }
        };
        let pool_size = self.number("lease_store.pool_size", s.pool_size.clone(), 4, 1..=100);
        let schema = s.schema.clone().unwrap_or_else(|| "floe".to_string());
        let schema_ok = !schema.is_empty()
            && schema.len() <= 63
            && !schema.starts_with(|c: char| c.is_ascii_digit())
            && schema
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
        if !schema_ok {
            self.error(
                "lease_store.schema",
                format!("\"{schema}\" is not a schema name: 1 to 63 characters from a-z 0-9 _, not starting with a digit"),
            );
        }
        Some(LeaseStoreBackend::Postgres(
            crate::config::postgres::PostgresOptions {
                url: url?,
                ssl_mode: ssl_mode?,
                pool_size: pool_size?,
                schema: schema_ok.then_some(schema)?,
                create_tables: s.create_tables.unwrap_or(true),
            },
        ))
    }

    /// A PostgreSQL connection URL at `path`: `"env:VARNAME"` (read from the environment, may
    /// hold a password) or a literal `postgres://`/`postgresql://` URL without a password.
    fn postgres_url(&mut self, path: &str, text: &str) -> Option<String> {
        let from_env = text.starts_with("env:");
        let value = self.property_value(path, text.to_string(), false)?;
        let url = value.value().to_string();
        match url::Url::parse(&url) {
            Ok(parsed) if matches!(parsed.scheme(), "postgres" | "postgresql") => {
                if parsed.password().is_some() && !from_env {
                    self.error(
                        path,
                        "the URL holds a password: secrets must not be written in the file; give it in PGPASSWORD or ~/.pgpass, or write \"env:VARNAME\" with the whole URL in VARNAME",
                    );
                    return None;
                }
                Some(url)
            }
            Ok(parsed) => {
                self.error(
                    path,
                    format!(
                        "scheme \"{}\" is not postgresql:// (e.g. \"postgresql://floe@db.internal:5432/floe\")",
                        parsed.scheme()
                    ),
                );
                None
            }
            Err(e) => {
                self.error(
                    path,
                    format!(
                        "not a URL ({e}); write \"postgresql://USER@HOST:PORT/DATABASE\"{}",
                        if from_env { " in the variable" } else { "" }
                    ),
                );
                None
            }
        }
    }

    fn channel(&mut self, i: usize, section: Section<ChannelSection>) -> Option<ChannelConfig> {
        let p = format!("channel[{i}]");
        let c = self.section(section, &p)?;
        let name = self.name(&format!("{p}.name"), c.name, 64, "a-z 0-9 _ -", |c| {
            c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '_' | '-')
        });
        let source = self.source(&format!("{p}.source"), c.source);
        let record_present = c.record.is_present();
        let record = self.record(&format!("{p}.record"), c.record);
        let format = record.as_ref().map(|r| r.format);
        let raw = c.destination.is_present() && self.is_raw(&c.destination);
        let destination = self.destination(&format!("{p}.destination"), c.destination);
        // A raw destination delivers every record unvalidated: no schema, nothing to reject.
        let (schema, dlq) = if raw {
            for (present, key, why) in [
                (record_present, "record", "records are delivered as read, whatever their framing or size"),
                (c.schema.is_present(), "schema", "records are delivered as read, not validated"),
                (c.dlq.is_present(), "dlq", "every record is delivered (raw means raw); a failed delivery is retried, never dropped"),
            ] {
                if present {
                    self.error(
                        format!("{p}.{key}"),
                        format!("not allowed with destination.kind = \"s3\": {why}; remove [channel.{key}]"),
                    );
                }
            }
            (Some(None), Some(None))
        } else {
            let missing = |v: &mut Self, key: &str| {
                v.error(
                    format!("{p}.{key}"),
                    format!("missing [channel.{key}]: required for an Iceberg destination"),
                );
            };
            let schema = if c.schema.is_present() {
                let mut section = c.schema;
                // Credentials never come from the file: named, with the variable to use.
                for (key, var) in section
                    .take_keys(&["basic_auth", "username", "password", "bearer_token"])
                    .into_iter()
                    .map(|k| {
                        (
                            k,
                            if k == "bearer_token" {
                                ENV_REGISTRY_BEARER_TOKEN
                            } else {
                                ENV_REGISTRY_BASIC_AUTH
                            },
                        )
                    })
                {
                    self.error(
                        format!("{p}.schema.{key}"),
                        format!("credentials are never read from the file: set the environment variable {var}"),
                    );
                }
                self.section(section, &format!("{p}.schema"))
                    .and_then(|s| {
                        let per_topic = matches!(&destination, Some(DestinationConfig::Iceberg(d)) if d.table == TABLE_PER_TOPIC);
                        self.schema(&format!("{p}.schema"), s, format, default_subject(&source, per_topic))
                    })
                    .map(Some)
            } else {
                missing(self, "schema");
                None
            };
            let dlq = if c.dlq.is_present() {
                self.dlq(&format!("{p}.dlq"), c.dlq).map(Some)
            } else {
                missing(self, "dlq");
                None
            };
            (schema, dlq)
        };
        if let (Some(record), Some(DestinationConfig::Iceberg(d))) = (&record, &destination) {
            if d.buffer_size < record.max_record_size {
                self.error(
                    format!("{p}.destination.buffer_size"),
                    format!(
                        "{} is smaller than record.max_record_size ({}): the largest record must fit in the buffer",
                        format_size(d.buffer_size),
                        format_size(record.max_record_size)
                    ),
                );
                return None;
            }
        }
        if let (Some(Some(schema)), Some(DestinationConfig::Iceberg(d))) = (&schema, &destination) {
            if schema.evolution() == SchemaEvolution::Compatible
                && matches!(d.catalog, CatalogConfig::S3Tables(_))
            {
                self.error(
                    format!("{p}.schema.evolution"),
                    "\"compatible\" needs a catalog floe commits schema changes to (sql, rest or glue); S3 Tables has no compare-and-swap floe can use",
                );
                return None;
            }
        }
        // A raw object's key names its stream (`{topic}`): one topic per raw channel.
        if let (Some(DestinationConfig::S3(_)), Some(SourceConfig::Kafka(k))) =
            (&destination, &source)
        {
            if k.topics.single().is_none() {
                self.error(
                    format!("{p}.source.topic"),
                    "a raw S3 destination reads one topic (its object keys name it): use `topic`, and a channel per topic",
                );
                return None;
            }
        }
        if let Some(DestinationConfig::Iceberg(d)) = &destination {
            if d.table == TABLE_PER_TOPIC && matches!(source, Some(SourceConfig::Kinesis(_))) {
                self.error(
                    format!("{p}.destination.table"),
                    "\"{topic}\" (a table per topic) needs a Kafka source",
                );
                return None;
            }
        }
        if let (Some(DestinationConfig::Iceberg(d)), Some(record)) = (&destination, &record) {
            // The route value is read from the JSON document (docs/routing.md).
            let json = matches!(
                record.format,
                RecordFormat::Json | RecordFormat::GsrJson | RecordFormat::JsonSr
            );
            // Enhanced fan-out: each member registers its own consumer, `floe-<member>`.
            if let (Some(route), Some(SourceConfig::Kinesis(k))) = (&d.route, &source) {
                if let KinesisReadMode::EnhancedFanOut { consumer_name } = &k.read_mode {
                    if consumer_name.is_some() {
                        self.error(
                            format!("{p}.source.consumer_name"),
                            "not with table = \"{route}\": each table's member channel registers its own consumer, floe-<channel>.<table>",
                        );
                        return None;
                    }
                    let longest = route.tables().into_iter().map(str::len).max().unwrap_or(0);
                    let consumer_len =
                        "floe-".len() + name.as_deref().map_or(0, str::len) + 1 + longest;
                    if consumer_len > 128 {
                        self.error(
                            format!("{p}.destination.routes"),
                            format!("with read_mode = \"enhanced_fan_out\" each table's consumer is floe-<channel>.<table>, at most 128 characters: this channel's longest is {consumer_len}"),
                        );
                        return None;
                    }
                }
            }
            if d.route.is_some() && !json {
                self.error(
                    format!("{p}.record.format"),
                    format!(
                        "\"{}\" cannot be routed by a field yet: table = \"{{route}}\" needs a JSON format (\"json\", \"gsr_json\" or \"json_sr\")",
                        record.format.as_str()
                    ),
                );
                return None;
            }
        }
        Some(ChannelConfig {
            name: name?,
            source: source?,
            record: record?,
            schema: schema?,
            destination: destination?,
            dlq: dlq?,
        })
    }

    fn source(&mut self, p: &str, section: Section<SourceSection>) -> Option<SourceConfig> {
        match self.section(section, p)? {
            SourceSection::Kafka(kafka) => self.kafka(p, kafka).map(SourceConfig::Kafka),
            SourceSection::Kinesis(kinesis) => self.kinesis(p, kinesis).map(SourceConfig::Kinesis),
        }
    }

    fn kinesis(&mut self, p: &str, s: KinesisSourceSection) -> Option<KinesisSourceConfig> {
        let stream = match (s.stream_name, s.stream_arn) {
            (Some(name), None) => {
                let valid = (1..=128).contains(&name.len())
                    && name
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'));
                if valid {
                    Some(KinesisStream::Name(name))
                } else {
                    self.error(
                        format!("{p}.stream_name"),
                        format!("\"{name}\" is not a Kinesis stream name: 1 to 128 characters from A-Z a-z 0-9 _ . -"),
                    );
                    None
                }
            }
            (None, Some(arn)) => {
                let parts: Vec<&str> = arn.splitn(6, ':').collect();
                let valid = matches!(parts.as_slice(), ["arn", _, "kinesis", region, account, resource]
                    if !region.is_empty() && account.len() == 12
                        && resource.strip_prefix("stream/").is_some_and(|n| !n.is_empty()));
                if valid {
                    Some(KinesisStream::Arn(arn))
                } else {
                    self.error(
                        format!("{p}.stream_arn"),
                        format!("\"{arn}\" is not a Kinesis stream ARN such as \"arn:aws:kinesis:us-east-1:123456789012:stream/NAME\""),
                    );
                    None
                }
            }
            (Some(_), Some(_)) => {
                self.error(p, "give one of `stream_name` and `stream_arn`, not both");
                None
            }
            (None, None) => {
                self.error(p, "missing field `stream_name` (or `stream_arn`)");
                None
            }
        };
        let polling_keys_set = [
            ("max_records_per_call", s.max_records_per_call.is_some()),
            ("poll_interval", s.poll_interval.is_some()),
        ];
        let max_records_per_call = self.number(
            &format!("{p}.max_records_per_call"),
            s.max_records_per_call,
            DEFAULT_KINESIS_MAX_RECORDS_PER_CALL,
            1..=10_000,
        );
        let poll_interval = self.duration(
            &format!("{p}.poll_interval"),
            s.poll_interval,
            DEFAULT_KINESIS_POLL_INTERVAL,
            Duration::from_millis(200)..=Duration::from_secs(60),
        );
        let read_mode = match s.read_mode.as_deref() {
            None | Some("polling") => {
                if s.consumer_name.is_some() {
                    self.error(
                        format!("{p}.consumer_name"),
                        "applies to read_mode = \"enhanced_fan_out\" only (the channel reads with polling)",
                    );
                }
                Some(KinesisReadMode::Polling)
            }
            Some("enhanced_fan_out") => {
                for (key, set) in polling_keys_set {
                    if set {
                        self.error(
                            format!("{p}.{key}"),
                            "applies to read_mode = \"polling\" only: enhanced fan-out is pushed by the service",
                        );
                    }
                }
                match s.consumer_name {
                    Some(name)
                        if name.is_empty()
                            || name.len() > 128
                            || !name.chars().all(|c| {
                                c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-')
                            }) =>
                    {
                        self.error(
                            format!("{p}.consumer_name"),
                            format!("\"{name}\" is not a Kinesis consumer name: 1 to 128 characters from A-Z a-z 0-9 _ . -"),
                        );
                        None
                    }
                    consumer_name => Some(KinesisReadMode::EnhancedFanOut { consumer_name }),
                }
            }
            Some(other) => {
                self.error(
                    format!("{p}.read_mode"),
                    format!("\"{other}\" is not a read mode: \"polling\" or \"enhanced_fan_out\""),
                );
                None
            }
        };
        Some(KinesisSourceConfig {
            stream: stream?,
            initial_position: s.initial_position,
            max_records_per_call: max_records_per_call?,
            poll_interval: poll_interval?,
            read_mode: read_mode?,
        })
    }

    fn s3_location(
        &mut self,
        p: &str,
        bucket: String,
        prefix: String,
        expected_bucket_owner: Option<String>,
        kms_key_arn: Option<String>,
    ) -> Option<S3Location> {
        let mut ok = true;
        let bucket_ok = (3..=63).contains(&bucket.len())
            && bucket
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '.' | '-'))
            && !bucket.starts_with(['.', '-'])
            && !bucket.ends_with(['.', '-']);
        if !bucket_ok {
            ok = false;
            self.error(
                format!("{p}.bucket"),
                format!("\"{bucket}\" is not an S3 bucket name: 3 to 63 characters from a-z 0-9 . -, starting and ending with a letter or digit"),
            );
        }
        if prefix.starts_with('/') {
            ok = false;
            self.error(
                format!("{p}.prefix"),
                format!("\"{prefix}\" starts with '/': S3 keys are relative to the bucket"),
            );
        }
        if let Some(owner) = &expected_bucket_owner {
            ok &= self.account_id(&format!("{p}.expected_bucket_owner"), owner);
        }
        if let Some(arn) = &kms_key_arn {
            ok &= self.kms_key(&format!("{p}.kms_key_arn"), arn);
        }
        ok.then_some(S3Location {
            bucket,
            prefix,
            expected_bucket_owner,
            kms_key_arn,
        })
    }

    /// `topic`, `topics` or `topic_pattern`: exactly one, with valid names (no duplicates) or
    /// a pattern that compiles.
    fn topics(
        &mut self,
        p: &str,
        topic: Option<String>,
        topics: Option<Vec<String>>,
        pattern: Option<String>,
    ) -> Option<TopicSelection> {
        let given = [topic.is_some(), topics.is_some(), pattern.is_some()];
        match given.iter().filter(|g| **g).count() {
            1 => {}
            0 => {
                self.error(
                    format!("{p}.topic"),
                    "missing: give `topic`, `topics` or `topic_pattern`",
                );
                return None;
            }
            _ => {
                self.error(
                    format!("{p}.topic"),
                    "`topic`, `topics` and `topic_pattern` exclude each other: give one",
                );
                return None;
            }
        }
        let valid = |t: &str| {
            !t.is_empty()
                && t.len() <= 249
                && t != "."
                && t != ".."
                && t.chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
        };
        const NAME_RULE: &str = "1 to 249 characters from A-Z a-z 0-9 . _ -";
        if let Some(t) = topic {
            if !valid(&t) {
                self.error(
                    format!("{p}.topic"),
                    format!("\"{t}\" is not a valid Kafka topic name: {NAME_RULE}"),
                );
                return None;
            }
            return Some(TopicSelection::One(t));
        }
        if let Some(list) = topics {
            let mut ok = true;
            if list.is_empty() || list.len() > MAX_TOPICS_LISTED {
                self.error(
                    format!("{p}.topics"),
                    format!(
                        "must list 1 to {MAX_TOPICS_LISTED} topics (use topic_pattern for more)"
                    ),
                );
                ok = false;
            }
            let mut seen = std::collections::BTreeSet::new();
            for (i, t) in list.iter().enumerate() {
                if !valid(t) {
                    self.error(
                        format!("{p}.topics[{i}]"),
                        format!("\"{t}\" is not a valid Kafka topic name: {NAME_RULE}"),
                    );
                    ok = false;
                } else if !seen.insert(t.as_str()) {
                    self.error(
                        format!("{p}.topics[{i}]"),
                        format!("\"{t}\" is listed twice"),
                    );
                    ok = false;
                }
            }
            return ok.then_some(TopicSelection::List(list));
        }
        let text = pattern.unwrap_or_default();
        if text.is_empty() {
            self.error(format!("{p}.topic_pattern"), "must not be empty");
            return None;
        }
        match super::TopicPattern::new(&text) {
            Ok(pattern) => Some(TopicSelection::Pattern(pattern)),
            Err(e) => {
                self.error(
                    format!("{p}.topic_pattern"),
                    format!("not a regular expression: {e}"),
                );
                None
            }
        }
    }

    fn kafka(&mut self, p: &str, s: KafkaSourceSection) -> Option<KafkaSourceConfig> {
        let mut ok = true;
        let servers: Vec<&str> = s.bootstrap_servers.split(',').map(str::trim).collect();
        let bad_server = servers.iter().find(|server| {
            server
                .rsplit_once(':')
                .is_none_or(|(host, port)| host.is_empty() || port.parse::<u16>().is_err())
        });
        if let Some(bad) = bad_server {
            ok = false;
            self.error(
                format!("{p}.bootstrap_servers"),
                format!("\"{bad}\" is not host:port (write e.g. \"broker1:9092,broker2:9092\")"),
            );
        }
        let topics = self.topics(p, s.topic, s.topics, s.topic_pattern);
        let topic_refresh_interval = self.duration(
            &format!("{p}.topic_refresh_interval"),
            s.topic_refresh_interval,
            super::DEFAULT_TOPIC_REFRESH_INTERVAL,
            TOPIC_REFRESH_RANGE,
        );
        let mut properties = BTreeMap::new();
        for (key, value) in s.properties {
            let path = format!("{p}.properties.{}", quote_key(&key));
            if let Some(why) = owned_kafka_property(&key) {
                ok = false;
                self.error(path, format!("floe sets this property itself: {why}"));
                continue;
            }
            let toml::Value::String(value) = value else {
                ok = false;
                self.error(
                    path,
                    format!(
                        "invalid type: {}, expected a string (client properties are strings: write \"{value}\")",
                        value.type_str()
                    ),
                );
                continue;
            };
            let Some(value) = self.property_value(&path, value, is_secret_property(&key)) else {
                ok = false;
                continue;
            };
            // The check librdkafka makes when `floe run` creates the client (no connection).
            if let Err(why) = check_kafka_client_property(&key, value.value()) {
                ok = false;
                let secret = value.value();
                let why = if is_secret_property(&key) && !secret.is_empty() {
                    why.replace(secret, "(secret)")
                } else {
                    why
                };
                self.error(path, why);
                continue;
            }
            properties.insert(key, value);
        }
        ok.then_some(KafkaSourceConfig {
            bootstrap_servers: s.bootstrap_servers,
            topics: topics?,
            topic_refresh_interval: topic_refresh_interval?,
            initial_position: s.initial_position,
            on_position_lost: s.on_position_lost,
            properties,
        })
    }

    fn record(
        &mut self,
        p: &str,
        section: Section<super::file::RecordSection>,
    ) -> Option<RecordConfig> {
        let r = self.section(section, p)?;
        let max_record_size = self.size(
            &format!("{p}.max_record_size"),
            r.max_record_size,
            DEFAULT_MAX_RECORD_SIZE,
            MAX_RECORD_SIZE_RANGE,
        )?;
        let format = r.format.unwrap_or_default();
        Some(RecordConfig {
            format,
            max_record_size,
        })
    }

    /// A CA bundle file (`key`): resolved, readable, and every certificate in it usable.
    fn ca_bundle(&mut self, key: &str, text: &str) -> Option<PathBuf> {
        let path = self.local_path(key, text)?;
        match std::fs::read_to_string(&path) {
            Ok(pem) if pem.contains("-----BEGIN CERTIFICATE-----") => {
                match check_ca_bundle(pem.as_bytes()) {
                    Ok(()) => Some(path),
                    Err(why) => {
                        self.error(key, format!("{}: {why}", path.display()));
                        None
                    }
                }
            }
            Ok(_) => {
                self.error(
                    key,
                    format!(
                        "{} holds no PEM certificate (-----BEGIN CERTIFICATE-----)",
                        path.display()
                    ),
                );
                None
            }
            Err(e) => {
                self.error(key, format!("cannot read {}: {e}", path.display()));
                None
            }
        }
    }

    /// Refuses the keys of a Confluent registry (`subject`, `ca_bundle`, `message`) with `why`.
    /// Returns whether none was present.
    fn refuse_registry_keys(&mut self, p: &str, s: &super::file::SchemaSection, why: &str) -> bool {
        let mut ok = true;
        for (present, key) in [
            (s.subject.is_some(), "subject"),
            (s.ca_bundle.is_some(), "ca_bundle"),
            (s.message.is_some(), "message"),
        ] {
            if present {
                self.error(format!("{p}.{key}"), why.to_string());
                ok = false;
            }
        }
        ok
    }

    /// `[channel.schema]` with `registry_url`: the URLs (http or https, at least one), the
    /// subject (default `default_subject`, the topic-name strategy), `evolution`, `ca_bundle`,
    /// `message` (protobuf only); the format must be a Confluent one.
    fn confluent_schema(
        &mut self,
        p: &str,
        url: super::file::RegistryUrlText,
        s: super::file::SchemaSection,
        format: Option<RecordFormat>,
        default_subject: Option<String>,
    ) -> Option<SchemaConfig> {
        use super::file::RegistryUrlText;
        let mut ok = true;
        if let Some(f) = format.filter(|f| !f.is_confluent()) {
            self.error(
                format!("{p}.registry_url"),
                format!(
                    "a Confluent schema registry applies to record.format \"avro\", \"protobuf\" or \"json_sr\", not \"{}\"",
                    f.as_str()
                ),
            );
            ok = false;
        }
        for (present, key) in [
            (s.file.is_some(), "file"),
            (s.glue_schema_arn.is_some(), "glue_schema_arn"),
        ] {
            if present {
                self.error(
                    format!("{p}.{key}"),
                    "give one of `file`, `glue_schema_arn` and `registry_url`",
                );
                ok = false;
            }
        }
        for (present, key, why) in [
            (s.version.is_some(), "version", "the table is created from the subject's latest version; each record names its schema id"),
            (!s.versions.is_empty(), "versions", "the registry is asked for each schema id"),
            (s.poll_interval.is_some(), "poll_interval", "each record names its schema id: nothing to poll"),
        ] {
            if present {
                self.error(format!("{p}.{key}"), format!("not with `registry_url`: {why}"));
                ok = false;
            }
        }
        if s.message.is_some() && format.is_some_and(|f| f != RecordFormat::Protobuf) {
            self.error(
                format!("{p}.message"),
                "`message` applies to record.format = \"protobuf\" only",
            );
            ok = false;
        }
        let key = format!("{p}.registry_url");
        let urls = match url {
            RegistryUrlText::One(u) => vec![u],
            RegistryUrlText::Many(us) => us,
            RegistryUrlText::Other(v) => {
                self.error(
                    &key,
                    format!("{v} is not a URL: a string or a list of strings"),
                );
                Vec::new()
            }
        };
        if urls.is_empty() {
            self.error(&key, "needs at least one URL");
            ok = false;
        }
        let mut clean = Vec::new();
        for u in urls {
            match check_registry_url(&u) {
                Ok(u) => clean.push(u),
                Err(why) => {
                    self.error(&key, format!("\"{u}\": {why}"));
                    ok = false;
                }
            }
        }
        let subject = match s.subject.or(default_subject) {
            Some(subject) if !subject.trim().is_empty() => Some(subject),
            Some(_) => {
                self.error(format!("{p}.subject"), "must not be empty");
                None
            }
            None => {
                self.error(
                    format!("{p}.subject"),
                    "missing: a channel reading several topics into one table names the subject its table is made from (the topic-name strategy gives one subject per topic)",
                );
                None
            }
        };
        let evolution = self.evolution(p, s.evolution.as_deref());
        let ca_bundle = match &s.ca_bundle {
            Some(path) => {
                let resolved = self.ca_bundle(&format!("{p}.ca_bundle"), path);
                ok &= resolved.is_some();
                resolved
            }
            None => None,
        };
        ok.then_some(SchemaConfig::Confluent(super::ConfluentSchemaConfig {
            urls: clean,
            subject: subject?,
            evolution: evolution?,
            ca_bundle,
            message: s.message,
        }))
    }

    /// `channel.schema.evolution`: `"none"` (default) or `"compatible"`.
    fn evolution(&mut self, p: &str, text: Option<&str>) -> Option<SchemaEvolution> {
        match text {
            None | Some("none") => Some(SchemaEvolution::None),
            Some("compatible") => Some(SchemaEvolution::Compatible),
            Some(other) => {
                self.error(
                    format!("{p}.evolution"),
                    format!("\"{other}\" is not a schema evolution: \"none\" or \"compatible\""),
                );
                None
            }
        }
    }

    /// `[channel.schema]`: exactly one of `file` and `glue_schema_arn`; `version` only with the
    /// ARN; `versions` only with `file` on a `gsr_json` channel, which needs it (`format` is `None`
    /// when `[channel.record]` itself is invalid).
    fn schema(
        &mut self,
        p: &str,
        s: super::file::SchemaSection,
        format: Option<RecordFormat>,
        default_subject: Option<String>,
    ) -> Option<SchemaConfig> {
        use super::file::SchemaVersionText;
        let mut s = s;
        if let Some(url) = s.registry_url.take() {
            return self.confluent_schema(p, url, s, format, default_subject);
        }
        if format.is_some_and(|f| f.is_confluent()) {
            self.error(
                format!("{p}.registry_url"),
                "record.format \"avro\", \"protobuf\" and \"json_sr\" read the Confluent wire format: set `registry_url` (the schema registry)",
            );
            return None;
        }
        if !self.refuse_registry_keys(p, &s, "apply to `registry_url` only") {
            return None;
        }
        if format == Some(RecordFormat::GsrAvro) && s.glue_schema_arn.is_none() {
            self.error(
                format!("{p}.glue_schema_arn"),
                "record.format = \"gsr_avro\" needs `glue_schema_arn` (an AVRO schema of the Glue Schema Registry)",
            );
            return None;
        }
        match (s.file, s.glue_schema_arn) {
            (Some(_), Some(_)) => {
                self.error(
                    format!("{p}.glue_schema_arn"),
                    "give either `file` or `glue_schema_arn`, not both",
                );
                None
            }
            (None, None) => {
                self.error(
                    p,
                    "missing the schema: set `file` (a JSON Schema file), `glue_schema_arn` (a schema of the Glue Schema Registry) or `registry_url` (a Confluent-compatible schema registry)",
                );
                None
            }
            (Some(file), None) => {
                let mut ok = true;
                for (present, key) in [
                    (
                        s.evolution.as_deref().is_some_and(|e| e != "none"),
                        "evolution",
                    ),
                    (s.poll_interval.is_some(), "poll_interval"),
                ] {
                    if present {
                        self.error(
                            format!("{p}.{key}"),
                            "schema evolution follows the Glue Schema Registry: it applies to `glue_schema_arn` only",
                        );
                        ok = false;
                    }
                }
                if s.version.is_some() {
                    self.error(
                        format!("{p}.version"),
                        "`version` applies to `glue_schema_arn` only",
                    );
                    ok = false;
                }
                let file = self.local_path(&format!("{p}.file"), &file);
                let gsr = format == Some(RecordFormat::GsrJson);
                if s.versions.is_empty() {
                    if gsr {
                        self.error(
                            format!("{p}.versions"),
                            "record.format = \"gsr_json\" with a schema file needs the registry's versions: `[channel.schema.versions]` \"VERSION-UUID\" = \"FILE\" (or use `glue_schema_arn`)",
                        );
                        return None;
                    }
                    return file.filter(|_| ok).map(SchemaConfig::File);
                }
                if format == Some(RecordFormat::Json) {
                    self.error(
                        format!("{p}.versions"),
                        "schema versions apply to record.format = \"gsr_json\" only",
                    );
                    return None;
                }
                let mut versions = BTreeMap::new();
                for (id, path) in s.versions {
                    let key = format!("{p}.versions.{}", quote_key(&id));
                    let id = match uuid::Uuid::parse_str(&id) {
                        Ok(id) => Some(id),
                        Err(_) => {
                            self.error(&key, format!("\"{id}\" is not a schema version id (a UUID such as \"3f36e6d8-d20e-43b7-90ea-3ad724880d60\")"));
                            None
                        }
                    };
                    match (id, self.local_path(&key, &path)) {
                        (Some(id), Some(path)) => {
                            versions.insert(id, path);
                        }
                        _ => ok = false,
                    }
                }
                ok.then_some(SchemaConfig::FileVersions {
                    file: file?,
                    versions,
                })
            }
            (None, Some(arn)) => {
                let mut ok = true;
                if let Err(why) = crate::config::aws::check_schema_arn(&arn) {
                    self.error(format!("{p}.glue_schema_arn"), why);
                    ok = false;
                }
                if !s.versions.is_empty() {
                    self.error(
                        format!("{p}.versions"),
                        "`versions` applies to a schema `file`; with `glue_schema_arn` the registry is asked",
                    );
                    ok = false;
                }
                let version = match s.version {
                    None => Some(GlueSchemaVersion::Latest),
                    Some(SchemaVersionText::Text(t)) if t == "latest" => {
                        Some(GlueSchemaVersion::Latest)
                    }
                    Some(SchemaVersionText::Number(n)) if n >= 1 => {
                        Some(GlueSchemaVersion::Number(n))
                    }
                    Some(other) => {
                        let shown = match other {
                            SchemaVersionText::Number(n) => n.to_string(),
                            SchemaVersionText::Text(t) => format!("\"{t}\""),
                            SchemaVersionText::Other(v) => v.to_string(),
                        };
                        self.error(
                            format!("{p}.version"),
                            format!(
                                "{shown} is not a schema version: a number from 1, or \"latest\""
                            ),
                        );
                        None
                    }
                };
                let evolution = self.evolution(p, s.evolution.as_deref());
                let polls = evolution == Some(SchemaEvolution::Compatible)
                    && format == Some(RecordFormat::Json);
                if polls && matches!(version, Some(GlueSchemaVersion::Number(_))) {
                    self.error(
                        format!("{p}.version"),
                        "with record.format = \"json\" and evolution = \"compatible\" the table follows the latest version: set version = \"latest\" (or record.format = \"gsr_json\", where each record names its version)",
                    );
                    ok = false;
                }
                if s.poll_interval.is_some() && !polls {
                    self.error(
                        format!("{p}.poll_interval"),
                        "applies only with evolution = \"compatible\" on a record.format = \"json\" channel (a gsr_json record names its version)",
                    );
                    ok = false;
                }
                let poll_interval = self.duration(
                    &format!("{p}.poll_interval"),
                    s.poll_interval,
                    DEFAULT_SCHEMA_POLL_INTERVAL,
                    Duration::from_secs(1)..=Duration::from_secs(3600),
                );
                ok.then_some(SchemaConfig::Glue {
                    schema_arn: arn,
                    version: version?,
                    evolution: evolution?,
                    poll_interval: poll_interval?,
                })
            }
        }
    }

    /// Whether a `[channel.destination]` section says `kind = "s3"` (checked before parsing it,
    /// which decides whether `[channel.schema]` and `[channel.dlq]` belong).
    fn is_raw(&self, section: &Section<DestinationSection>) -> bool {
        section.kind() == Some("s3")
    }

    fn destination(
        &mut self,
        p: &str,
        section: Section<DestinationSection>,
    ) -> Option<DestinationConfig> {
        match self.section(section, p)? {
            DestinationSection::Iceberg(d) => self.iceberg(p, d).map(DestinationConfig::Iceberg),
            DestinationSection::S3(d) => self.raw(p, d).map(DestinationConfig::S3),
        }
    }

    fn raw(
        &mut self,
        p: &str,
        d: S3DestinationSection,
    ) -> Option<crate::config::raw::RawDestinationConfig> {
        let location = self.s3_location(
            p,
            d.bucket,
            String::new(),
            d.expected_bucket_owner,
            d.kms_key_arn,
        );
        let key_template = match crate::config::raw::KeyTemplate::parse(
            d.key_template
                .as_deref()
                .unwrap_or(crate::config::raw::DEFAULT_KEY_TEMPLATE),
        ) {
            Ok(t) => Some(t),
            Err(why) => {
                self.error(format!("{p}.key_template"), why);
                None
            }
        };
        let bounds = self.delivery_bounds(
            p,
            d.data_freshness,
            ("target_object_size", d.target_object_size),
            d.buffer_size,
        );
        let (data_freshness, target_object_size, buffer_size) = bounds?;
        Some(crate::config::raw::RawDestinationConfig {
            location: location?,
            key_template: key_template?,
            compression: d.compression.unwrap_or_default(),
            record_delimiter: d.record_delimiter.unwrap_or_default(),
            data_freshness,
            target_object_size,
            buffer_size,
        })
    }

    /// `data_freshness`, the target size of a file or object (`(key, value)`) and `buffer_size`
    /// of a destination, each with its default and range.
    fn delivery_bounds(
        &mut self,
        p: &str,
        data_freshness: Option<DurationText>,
        (target_key, target): (&str, Option<SizeText>),
        buffer_size: Option<SizeText>,
    ) -> Option<(Duration, u64, u64)> {
        let data_freshness = self.duration(
            &format!("{p}.data_freshness"),
            data_freshness,
            DEFAULT_DATA_FRESHNESS,
            DATA_FRESHNESS_RANGE,
        );
        let target = self.size(
            &format!("{p}.{target_key}"),
            target,
            DEFAULT_TARGET_FILE_SIZE,
            TARGET_FILE_SIZE_RANGE,
        );
        let buffer_size = self.size(
            &format!("{p}.buffer_size"),
            buffer_size,
            DEFAULT_BUFFER_SIZE,
            BUFFER_SIZE_RANGE,
        );
        Some((data_freshness?, target?, buffer_size?))
    }

    fn iceberg(
        &mut self,
        p: &str,
        d: IcebergDestinationSection,
    ) -> Option<IcebergDestinationConfig> {
        let catalog = self.catalog(&format!("{p}.catalog"), d.catalog);
        let lower = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_';
        let namespace = self.name(
            &format!("{p}.namespace"),
            d.namespace,
            255,
            "a-z 0-9 _",
            lower,
        );
        let several_tables = d.table == super::TABLE_PER_TOPIC || d.table == super::TABLE_ROUTED;
        let table = if several_tables {
            Some(d.table)
        } else {
            self.name(&format!("{p}.table"), d.table, 255, "a-z 0-9 _", lower)
        };
        let max_tables = if d.max_tables.is_some() && !several_tables {
            self.error(
                format!("{p}.max_tables"),
                "applies only with table = \"{topic}\" or \"{route}\" (this channel writes one table)",
            );
            None
        } else {
            self.number(
                &format!("{p}.max_tables"),
                d.max_tables,
                super::DEFAULT_MAX_TABLES,
                MAX_TABLES_RANGE,
            )
        };
        let (namespace, table) = match &catalog {
            Some(CatalogConfig::S3Tables(_)) => (
                namespace.and_then(|n| self.s3tables_name(&format!("{p}.namespace"), n)),
                table.and_then(|t| {
                    if t == super::TABLE_PER_TOPIC || t == super::TABLE_ROUTED {
                        Some(t)
                    } else {
                        self.s3tables_name(&format!("{p}.table"), t)
                    }
                }),
            ),
            _ => (namespace, table),
        };
        let route = self.route(
            p,
            table.as_deref(),
            (d.route_field, d.routes, d.unroutable),
            max_tables,
            matches!(catalog, Some(CatalogConfig::S3Tables(_))),
        );
        let partition = self.partition(p, d.partition_field, d.partition);
        let mut sort = Some(Vec::new());
        for (i, text) in d.sort.unwrap_or_default().iter().enumerate() {
            match crate::schema::sort::SortTerm::parse(text) {
                Ok(t) => {
                    if let Some(terms) = sort.as_mut() {
                        terms.push(t)
                    }
                }
                Err(e) => {
                    self.error(format!("{p}.sort[{i}]"), e);
                    sort = None;
                }
            }
        }
        let compression = match (
            d.compression.unwrap_or(CompressionCodec::Zstd),
            d.compression_level,
        ) {
            (CompressionCodec::Zstd, level) => self
                .number(
                    &format!("{p}.compression_level"),
                    level,
                    i64::from(DEFAULT_ZSTD_LEVEL),
                    ZSTD_LEVEL_RANGE,
                )
                .map(|level| Compression::Zstd {
                    level: level as i32,
                }),
            (codec, Some(_)) => {
                let name = if codec == CompressionCodec::Snappy {
                    "snappy"
                } else {
                    "none"
                };
                self.error(
                    format!("{p}.compression_level"),
                    format!("applies only to compression = \"zstd\", not \"{name}\""),
                );
                None
            }
            (CompressionCodec::Snappy, None) => Some(Compression::Snappy),
            (CompressionCodec::None, None) => Some(Compression::Uncompressed),
        };
        let bounds = self.delivery_bounds(
            p,
            d.data_freshness,
            ("target_file_size", d.target_file_size),
            d.buffer_size,
        );
        let max_open_partitions = self.number(
            &format!("{p}.max_open_partitions"),
            d.max_open_partitions,
            DEFAULT_MAX_OPEN_PARTITIONS,
            MAX_OPEN_PARTITIONS_RANGE,
        );
        let maintenance = self.maintenance(
            &format!("{p}.maintenance"),
            d.maintenance,
            matches!(catalog, Some(CatalogConfig::S3Tables(_))),
        );
        // Record expiration drops partitions whose time period ended: it needs a time
        // transform (docs/partitioning.md, "Maintenance").
        if let (Some(m), Some((field, _))) = (&maintenance, &partition) {
            if m.record_retention.is_some() && field.is_empty() {
                self.error(
                    format!("{p}.maintenance.record_retention"),
                    format!(
                        "record expiration needs a time transform (year, month, day or hour) in \
                         {p}.partition: without one there is no period to expire by"
                    ),
                );
            }
        }
        Some(IcebergDestinationConfig {
            maintenance: maintenance?,
            catalog: catalog?,
            namespace: namespace?,
            table: table?,
            max_tables: max_tables?,
            route: route?,
            partition_field: partition.clone()?.0,
            partition: partition?.1,
            sort: sort?,
            compression: compression?,
            data_freshness: bounds?.0,
            target_file_size: bounds?.1,
            buffer_size: bounds?.2,
            max_open_partitions: max_open_partitions?,
        })
    }

    /// `route_field`, `routes` and `unroutable`: required with `table = "{route}"` (1 to
    /// `max_tables` routes to valid table names), refused without it.
    fn route(
        &mut self,
        p: &str,
        table: Option<&str>,
        (field, routes, unroutable): (
            Option<String>,
            Option<BTreeMap<String, String>>,
            Option<String>,
        ),
        max_tables: Option<u32>,
        s3tables: bool,
    ) -> Option<Option<super::RouteConfig>> {
        if table != Some(super::TABLE_ROUTED) {
            let mut ok = true;
            for (given, key) in [
                (field.is_some(), "route_field"),
                (routes.is_some(), "routes"),
                (unroutable.is_some(), "unroutable"),
            ] {
                if given {
                    self.error(
                        format!("{p}.{key}"),
                        format!("applies only to {p}.table = \"{{route}}\" (a table per value of route_field)"),
                    );
                    ok = false;
                }
            }
            return ok.then_some(None);
        }
        let lower = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_';
        let table_name = |v: &mut Self, path: String, t: String| {
            let t = v.name(&path, t, 255, "a-z 0-9 _", lower)?;
            if s3tables {
                v.s3tables_name(&path, t)
            } else {
                Some(t)
            }
        };
        let field = match field {
            Some(f) if !f.trim().is_empty() => Some(f),
            Some(_) => {
                self.error(format!("{p}.route_field"), "must not be empty");
                None
            }
            None => {
                self.error(
                    format!("{p}.route_field"),
                    format!("required with {p}.table = \"{{route}}\": the top-level field whose value picks each record's table"),
                );
                None
            }
        };
        let mut checked = Some(BTreeMap::new());
        match routes {
            None => {
                self.error(
                    format!("{p}.routes"),
                    format!("required with {p}.table = \"{{route}}\": route value -> table, e.g. {{ eu = \"events_eu\" }}"),
                );
                checked = None;
            }
            Some(routes) => {
                if routes.is_empty() {
                    self.error(
                        format!("{p}.routes"),
                        "must map at least one value to a table",
                    );
                    checked = None;
                }
                for (value, t) in routes {
                    let path = format!("{p}.routes.{}", quote_key(&value));
                    match table_name(self, path, t) {
                        Some(t) => {
                            if let Some(c) = checked.as_mut() {
                                c.insert(value, t);
                            }
                        }
                        None => checked = None,
                    }
                }
            }
        }
        let unroutable = match unroutable.as_deref() {
            None | Some("dlq") => Some(super::Unroutable::Dlq),
            Some(_) => table_name(
                self,
                format!("{p}.unroutable"),
                unroutable.unwrap_or_default(),
            )
            .map(super::Unroutable::Table),
        };
        let route = super::RouteConfig {
            field: field?,
            routes: checked?,
            unroutable: unroutable?,
        };
        let num_tables = route.tables().len();
        if let Some(max) = max_tables {
            if num_tables > max as usize {
                self.error(
                    format!("{p}.routes"),
                    format!("routes to {num_tables} tables (with the unroutable table), more than {p}.max_tables = {max}"),
                );
                return None;
            }
        }
        Some(Some(route))
    }

    /// `partition_field` or `partition` (exactly one of them): the time field and the spec's
    /// terms (docs/partitioning.md). The types of the terms' fields are checked when the schema
    /// is mapped.
    fn partition(
        &mut self,
        p: &str,
        partition_field: Option<String>,
        partition: Option<Vec<String>>,
    ) -> Option<(String, Vec<PartitionTerm>)> {
        let texts = match (partition_field, partition) {
            (Some(_), Some(_)) => {
                self.error(
                    format!("{p}.partition"),
                    format!(
                        "give {p}.partition or {p}.partition_field (its hour shorthand), not both"
                    ),
                );
                return None;
            }
            (None, None) => {
                self.error(
                    format!("{p}.partition_field"),
                    format!("required (or {p}.partition)"),
                );
                return None;
            }
            (Some(field), None) => {
                if field.trim().is_empty() {
                    self.error(format!("{p}.partition_field"), "must not be empty");
                    return None;
                }
                return Some((field.clone(), vec![PartitionTerm::hour(&field)]));
            }
            (None, Some(texts)) => texts,
        };
        let mut terms = Vec::with_capacity(texts.len());
        for (i, text) in texts.iter().enumerate() {
            match PartitionTerm::parse(text) {
                Ok(t) => terms.push(t),
                Err(e) => self.error(format!("{p}.partition[{i}]"), e),
            }
        }
        if terms.len() < texts.len() {
            return None;
        }
        if let Err((i, e)) = crate::schema::partition::check_terms(&terms) {
            self.error(format!("{p}.partition[{i}]"), e);
            return None;
        }
        // No time transform (`[]`, `["identity(region)"]`): no time field, "" (records need
        // none).
        let field = crate::schema::partition::time_field(&terms).unwrap_or_default();
        Some((field.to_string(), terms))
    }

    /// `[channel.destination.maintenance]`; off by default on S3 Tables, which maintains its
    /// tables itself.
    fn maintenance(
        &mut self,
        p: &str,
        section: Section<super::file::MaintenanceSection>,
        s3tables: bool,
    ) -> Option<crate::config::MaintenanceConfig> {
        let m = self.section(section, p)?;
        let snapshot_retention = self.duration(
            &format!("{p}.snapshot_retention"),
            m.snapshot_retention,
            DEFAULT_SNAPSHOT_RETENTION,
            SNAPSHOT_RETENTION_RANGE,
        );
        let min_snapshots = self.number(
            &format!("{p}.min_snapshots"),
            m.min_snapshots,
            DEFAULT_MIN_SNAPSHOTS,
            MIN_SNAPSHOTS_RANGE,
        );
        let d = crate::config::MaintenanceConfig::default();
        let compaction_delay = self.duration(
            &format!("{p}.compaction_delay"),
            m.compaction_delay,
            d.compaction_delay,
            COMPACTION_DELAY_RANGE,
        );
        let max_manifests = self.number(
            &format!("{p}.max_manifests"),
            m.max_manifests,
            d.max_manifests,
            MAX_MANIFESTS_RANGE,
        );
        let record_retention = match m.record_retention {
            None => Some(None),
            // floe cannot commit the delete snapshot there: refused rather than silently ignored.
            Some(_) if s3tables => {
                self.error(
                    format!("{p}.record_retention"),
                    "S3 Tables maintains its own tables and floe cannot commit a delete snapshot there: use S3 Tables' own record expiration, or another catalog".to_string(),
                );
                None
            }
            text => self
                .duration(
                    &format!("{p}.record_retention"),
                    text,
                    Duration::ZERO,
                    RECORD_RETENTION_RANGE,
                )
                .map(Some),
        };
        let interval = self.duration(
            &format!("{p}.interval"),
            m.interval,
            d.interval,
            MAINTENANCE_INTERVAL_RANGE,
        );
        let orphan_age = self.duration(
            &format!("{p}.orphan_age"),
            m.orphan_age,
            d.orphan_age,
            ORPHAN_AGE_RANGE,
        );
        Some(crate::config::MaintenanceConfig {
            enabled: m.enabled.unwrap_or(!s3tables),
            orphan_sweep: m.orphan_sweep.unwrap_or(true),
            orphan_age: orphan_age?,
            snapshot_expiry: m.snapshot_expiry.unwrap_or(true),
            snapshot_retention: snapshot_retention?,
            min_snapshots: min_snapshots?,
            compaction: m.compaction.unwrap_or(true),
            compaction_delay: compaction_delay?,
            manifest_rewrite: m.manifest_rewrite.unwrap_or(true),
            max_manifests: max_manifests?,
            record_retention: record_retention?,
            interval: interval?,
        })
    }

    fn catalog(&mut self, p: &str, section: Section<CatalogSection>) -> Option<CatalogConfig> {
        let sql = match self.section(section, p)? {
            CatalogSection::Sql(sql) => sql,
            CatalogSection::Rest(rest) => {
                return self.rest_catalog(p, rest).map(CatalogConfig::Rest);
            }
            CatalogSection::Glue(glue) => return self.glue_catalog(p, glue),
            CatalogSection::S3Tables(s3t) => return self.s3tables_catalog(p, s3t),
        };
        let name = self.name(
            &format!("{p}.name"),
            sql.name.unwrap_or_else(|| DEFAULT_CATALOG_NAME.to_owned()),
            255,
            "A-Z a-z 0-9 _ -",
            |c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-'),
        );
        let uri_path = format!("{p}.uri");
        let database = match sql
            .uri
            .strip_prefix("sqlite://")
            .or_else(|| sql.uri.strip_prefix("sqlite:"))
        {
            Some(":memory:") | Some("") => {
                self.error(
                    &uri_path,
                    "an in-memory catalog cannot be shared by workers: give a database file path",
                );
                None
            }
            Some(rest) if rest.contains(['?', '#']) => {
                self.error(
                    &uri_path,
                    "query parameters are not supported: give only the database file path",
                );
                None
            }
            Some(rest) => self
                .local_path(&uri_path, rest)
                .map(CatalogDatabase::Sqlite),
            None if sql.uri.starts_with("env:")
                || sql.uri.starts_with("postgres://")
                || sql.uri.starts_with("postgresql://") =>
            {
                self.postgres_url(&uri_path, &sql.uri)
                    .map(CatalogDatabase::Postgres)
            }
            None if sql.uri.contains("://") => {
                self.error(
                    &uri_path,
                    format!("\"{}\": an SQL catalog is an SQLite file (\"sqlite:PATH\" or a plain path) or a PostgreSQL database (\"postgresql://USER@HOST:PORT/DATABASE\" or \"env:VARNAME\")", sql.uri),
                );
                None
            }
            None => self
                .local_path(&uri_path, &sql.uri)
                .map(CatalogDatabase::Sqlite),
        };
        let warehouse = match sql.warehouse.starts_with("s3://") {
            true => self
                .s3_warehouse(&format!("{p}.warehouse"), &sql.warehouse)
                .map(Warehouse::S3),
            false => self
                .local_path(&format!("{p}.warehouse"), &sql.warehouse)
                .map(Warehouse::Local),
        };
        let mut kms_ok = true;
        if let Some(arn) = &sql.kms_key_arn {
            if !self.kms_key(&format!("{p}.kms_key_arn"), arn) {
                kms_ok = false;
            } else if matches!(warehouse, Some(Warehouse::Local(_))) {
                kms_ok = false;
                self.error(
                    format!("{p}.kms_key_arn"),
                    "applies only to an s3:// warehouse; a local warehouse is not encrypted by floe",
                );
            }
        }
        if let Some(owner) = &sql.expected_bucket_owner {
            if !self.account_id(&format!("{p}.expected_bucket_owner"), owner) {
                kms_ok = false;
            } else if matches!(warehouse, Some(Warehouse::Local(_))) {
                kms_ok = false;
                self.error(
                    format!("{p}.expected_bucket_owner"),
                    "applies only to an s3:// warehouse",
                );
            }
        }
        Some(CatalogConfig::Sql(SqlCatalogConfig {
            name: name?,
            database: database?,
            warehouse: warehouse?,
            kms_key_arn: sql.kms_key_arn,
            expected_bucket_owner: sql.expected_bucket_owner,
        }))
        .filter(|_| kms_ok)
    }

    fn dlq(&mut self, p: &str, section: Section<DlqSection>) -> Option<DlqConfig> {
        match self.section(section, p)? {
            DlqSection::Local(local) => {
                let path = self.local_path(&format!("{p}.path"), &local.path)?;
                Some(DlqConfig {
                    location: DlqLocation::Local(path),
                    include_payload: local.include_payload,
                })
            }
            DlqSection::S3(S3DlqSection {
                bucket,
                prefix,
                expected_bucket_owner,
                kms_key_arn,
                include_payload,
            }) => {
                let location =
                    self.s3_location(p, bucket, prefix, expected_bucket_owner, kms_key_arn)?;
                Some(DlqConfig {
                    location: DlqLocation::S3(location),
                    include_payload,
                })
            }
        }
    }

    /// Rules across channels: unique names; no two channels writing the same table.
    fn across_channels(&mut self, channels: &[Option<ChannelConfig>]) {
        let mut names: HashMap<&str, usize> = HashMap::new();
        let mut tables: HashMap<(String, &str, &str), usize> = HashMap::new();
        let mut raw_buckets: HashMap<&str, (usize, bool)> = HashMap::new();
        for (i, channel) in channels.iter().enumerate() {
            let Some(channel) = channel else { continue };
            if let Some(first) = names.insert(&channel.name, i) {
                names.insert(&channel.name, first);
                self.error(
                    format!("channel[{i}].name"),
                    format!(
                        "duplicate channel name \"{}\" (also channel[{first}])",
                        channel.name
                    ),
                );
            }
            let d = match &channel.destination {
                DestinationConfig::Iceberg(d) => d,
                DestinationConfig::S3(raw) => {
                    // Channels sharing a bucket must name themselves in their keys.
                    if let Some((first, other)) = raw_buckets.get(raw.location.bucket.as_str()) {
                        if !raw.key_template.has_channel() || !*other {
                            self.error(
                                format!("channel[{i}].destination.key_template"),
                                format!(
                                    "bucket {} is also written by channel[{first}]: every key template of a shared bucket must contain {{channel}}",
                                    raw.location.bucket
                                ),
                            );
                        }
                    } else {
                        raw_buckets.insert(
                            raw.location.bucket.as_str(),
                            (i, raw.key_template.has_channel()),
                        );
                    }
                    continue;
                }
            };
            // A routed channel writes each of its routes' tables (and its default table).
            let (written, key_path): (Vec<&str>, &str) = match &d.route {
                Some(route) => (route.tables().into_iter().collect(), "routes"),
                None => (vec![d.table.as_str()], "table"),
            };
            for table in written {
                let key = (d.catalog.identity(), d.namespace.as_str(), table);
                if let Some(first) = tables.get(&key) {
                    self.error(
                        format!("channel[{i}].destination.{key_path}"),
                        format!(
                            "table {}.{table} is already written by channel[{first}] \"{}\": each table has one channel",
                            d.namespace,
                            channels[*first].as_ref().map_or("", |c| c.name.as_str())
                        ),
                    );
                } else {
                    tables.insert(key, i);
                }
            }
        }
    }
}

/// The AWS catalogs (`kind = "s3tables"`, `kind = "glue"`) and the checks they share with the
/// SQL catalog's `s3://` warehouse.
impl Checker<'_> {
    /// `kind = "s3tables"`: a table bucket ARN and an optional KMS key.
    fn s3tables_catalog(&mut self, p: &str, s: S3TablesCatalogSection) -> Option<CatalogConfig> {
        let mut ok = true;
        if let Err(why) = check_table_bucket_arn(&s.table_bucket_arn) {
            ok = false;
            self.error(format!("{p}.table_bucket_arn"), why);
        }
        if let Some(arn) = &s.kms_key_arn {
            ok &= self.kms_key(&format!("{p}.kms_key_arn"), arn);
        }
        ok.then_some(CatalogConfig::S3Tables(S3TablesCatalogConfig {
            table_bucket_arn: s.table_bucket_arn,
            kms_key_arn: s.kms_key_arn,
        }))
    }

    /// `kind = "glue"`: an `s3://` warehouse, optional catalog id, KMS key and bucket owner.
    fn glue_catalog(&mut self, p: &str, s: GlueCatalogSection) -> Option<CatalogConfig> {
        let warehouse = self.s3_warehouse(&format!("{p}.warehouse"), &s.warehouse);
        let mut ok = true;
        if let Some(id) = &s.catalog_id {
            ok &= self.account_id(&format!("{p}.catalog_id"), id);
        }
        if let Some(arn) = &s.kms_key_arn {
            ok &= self.kms_key(&format!("{p}.kms_key_arn"), arn);
        }
        if let Some(owner) = &s.expected_bucket_owner {
            ok &= self.account_id(&format!("{p}.expected_bucket_owner"), owner);
        }
        let warehouse = warehouse?;
        ok.then_some(CatalogConfig::Glue(GlueCatalogConfig {
            warehouse,
            catalog_id: s.catalog_id,
            kms_key_arn: s.kms_key_arn,
            expected_bucket_owner: s.expected_bucket_owner,
        }))
    }

    /// An `s3://bucket[/prefix]` location (trailing slashes removed); `None` after an error.
    fn s3_warehouse(&mut self, path: &str, text: &str) -> Option<String> {
        let rest = text.strip_prefix("s3://").map(|r| r.trim_end_matches('/'));
        let bucket = rest.and_then(|r| r.split('/').next()).unwrap_or_default();
        let bucket_ok = (3..=63).contains(&bucket.len())
            && bucket
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '.' | '-'));
        match rest {
            Some(rest) if bucket_ok => Some(format!("s3://{rest}")),
            _ => {
                self.error(
                    path,
                    format!("\"{text}\" is not an S3 location such as \"s3://bucket/prefix\""),
                );
                None
            }
        }
    }

    /// Whether `id` is a 12-digit AWS account id (error at `path` when not).
    fn account_id(&mut self, path: &str, id: &str) -> bool {
        let ok = id.len() == 12 && id.bytes().all(|b| b.is_ascii_digit());
        if !ok {
            self.error(path, format!("\"{id}\" is not a 12-digit AWS account id"));
        }
        ok
    }

    /// Whether `arn` is a customer-managed KMS key ARN ([`crate::config::aws::check_kms_key_arn`]).
    fn kms_key(&mut self, path: &str, arn: &str) -> bool {
        match crate::config::aws::check_kms_key_arn(arn) {
            Ok(()) => true,
            Err(why) => {
                self.error(path, why);
                false
            }
        }
    }

    /// S3 Tables names (namespaces and tables) also begin and end with a letter or digit
    /// (S3 Tables user guide, "Naming rules"); floe's own rule already limits them to
    /// `[a-z0-9_]{1,255}`.
    fn s3tables_name(&mut self, path: &str, name: String) -> Option<String> {
        if name.starts_with('_') || name.ends_with('_') {
            self.error(
                path,
                format!("\"{name}\": S3 Tables names begin and end with a letter or digit"),
            );
            return None;
        }
        Some(name)
    }
}

/// Checks the shape of an S3 Tables table bucket ARN,
/// `arn:<partition>:s3tables:<region>:<12-digit account>:bucket/<name>` with a bucket name of 3 to
/// 63 characters from `a-z 0-9 -`, beginning and ending with a letter or digit (the pattern of the
/// S3 Tables API's `tableBucketARN`). Returns the reason when it is not one.
pub(crate) fn check_table_bucket_arn(arn: &str) -> Result<(), String> {
    let parts: Vec<&str> = arn.splitn(6, ':').collect();
    let ok = match parts.as_slice() {
        ["arn", partition, "s3tables", region, account, resource] => {
            partition.starts_with("aws")
                && !region.is_empty()
                && account.len() == 12
                && account.bytes().all(|b| b.is_ascii_digit())
                && resource.strip_prefix("bucket/").is_some_and(|name| {
                    (3..=63).contains(&name.len())
                        && name
                            .bytes()
                            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                        && !name.starts_with('-')
                        && !name.ends_with('-')
                })
        }
        _ => false,
    };
    if ok {
        Ok(())
    } else {
        Err(format!(
            "\"{arn}\" is not an S3 Tables table bucket ARN; expected arn:aws:s3tables:REGION:ACCOUNT:bucket/NAME"
        ))
    }
}

/// Whether a client property holds a secret that must come from the environment.
/// Whether every certificate of a PEM bundle is one a TLS client can trust: the same check
/// the AWS SDK's HTTPS client makes when it builds its trust store (where a bad one panics).
fn check_ca_bundle(pem: &[u8]) -> Result<(), String> {
    use rustls::pki_types::{pem::PemObject, CertificateDer};
    let mut store = rustls::RootCertStore::empty();
    for (i, cert) in CertificateDer::pem_slice_iter(pem).enumerate() {
        let cert = cert.map_err(|e| format!("certificate {} is not valid PEM: {e:?}", i + 1))?;
        store.add(cert).map_err(|e| {
            format!(
                "certificate {} is not a usable X.509 certificate: {e}",
                i + 1
            )
        })?;
    }
    Ok(())
}

/// A schema registry URL: `http://` or `https://` with a host, no user info (credentials come
/// from the environment only), no query or fragment; returned without a trailing `/`.
fn check_registry_url(url: &str) -> Result<String, String> {
    let rest = url
        .strip_prefix("https://")
        .or_else(|| url.strip_prefix("http://"))
        .ok_or("not an http or https URL such as \"https://registry:8081\"")?;
    if rest.is_empty() || rest.starts_with('/') || rest.contains(char::is_whitespace) {
        return Err("has no host".into());
    }
    if rest.contains(['?', '#']) {
        return Err("must not have a query or fragment".into());
    }
    if rest
        .split('/')
        .next()
        .is_some_and(|authority| authority.contains('@'))
    {
        return Err(format!(
            "must not carry credentials (user info before `@`): set {ENV_REGISTRY_BASIC_AUTH} (\"user:password\") or {ENV_REGISTRY_BEARER_TOKEN} in the environment instead"
        ));
    }
    Ok(url.trim_end_matches('/').to_string())
}

/// The subject of the topic-name strategy: `<topic>-value` (the stream name for Kinesis);
/// `{topic}-value` for a table per topic (each member's topic replaces `{topic}`); none for
/// several topics into one table.
fn default_subject(source: &Option<SourceConfig>, per_topic: bool) -> Option<String> {
    match source.as_ref()? {
        SourceConfig::Kafka(_) if per_topic => Some(format!("{TABLE_PER_TOPIC}-value")),
        SourceConfig::Kafka(k) => Some(format!("{}-value", k.topics.single()?)),
        SourceConfig::Kinesis(k) => {
            let name = k.stream.as_str();
            Some(format!("{}-value", name.rsplit('/').next().unwrap_or(name)))
        }
    }
}

fn is_secret_property(key: &str) -> bool {
    key.contains("password")
        || key.contains("secret")
        || key == "sasl.oauthbearer.config"
        || key == "ssl.key.pem"
}

/// A key as TOML writes it in a path: bare when it can be, quoted otherwise.
fn quote_key(key: &str) -> String {
    if !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-'))
    {
        key.to_owned()
    } else {
        format!("\"{key}\"")
    }
}

/// Checks that librdkafka accepts `key` = `value` as a client property (a known property, a
/// valid value, supported by this build), as it checks them when a client is created. Creates no
/// client and connects to nothing: config validation calls it, so `floe validate` refuses what
/// would stop `floe run`.
///
/// Errors: librdkafka's reason.
fn check_kafka_client_property(key: &str, value: &str) -> Result<(), String> {
    rdkafka::ClientConfig::new()
        .set(key, value)
        .create_native_config()
        .map(drop)
        .map_err(|e| match e {
            rdkafka::error::KafkaError::ClientConfig(_, description, _, _) => {
                format!("librdkafka refuses it: {description}")
            }
            e => format!("librdkafka refuses it: {e}"),
        })
}
