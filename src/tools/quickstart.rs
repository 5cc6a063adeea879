//! `floe quickstart`: the whole pipeline on one laptop, in one command.
//!
//! Starts an embedded Kafka-protocol broker (librdkafka's mock cluster) with a 4-partition
//! topic, produces `Event` records (about 1% bad ones of several kinds), runs two workers (one
//! of them the committer) on the embedded defaults (SQLite lease store, SQLite catalog, local
//! warehouse and DLQ) with a 10 s freshness, then reconciles by id: every produced record must
//! be in the table or in the DLQ exactly once.
//!
//! `--format json` (the default) produces JSON validated by `config/event.schema.json`.
//! `--format avro|protobuf` needs a Confluent-compatible schema registry (`--registry-url`,
//! default the local one of `deploy/local/schema-registry.sh`): the quickstart registers
//! `config/event.avsc` or `config/event.proto` under subject `events-value` (the topic-name
//! strategy), produces the same events in the Confluent wire format, and the channel creates the
//! table from the subject's latest version.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use futures::TryStreamExt;
use iceberg::table::Table;
use iceberg::{Catalog, NamespaceIdent, TableIdent};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::ClientConfig;
use tokio_util::sync::CancellationToken;

use crate::catalog::open_sql_catalog;
use crate::config::Config;
use crate::dlq::{Dlq, LocalDlq};
use crate::source::kafka::embedded::EmbeddedKafka;
use crate::tools::sample_events::{
    bad_event, confluent_frame, event_avro, event_json, event_protobuf, BadKind, EventValues,
    FramedBadKind,
};
use crate::tools::stdout;

/// Options of `floe quickstart`.
#[derive(Debug, Clone, clap::Args)]
pub struct QuickstartArgs {
    /// Directory for the catalog, warehouse, DLQ and lease store.
    #[arg(long, default_value = "floe-quickstart")]
    pub dir: PathBuf,
    /// How long to produce records, seconds.
    #[arg(long, default_value_t = 20)]
    pub seconds: u64,
    /// Records produced per second.
    #[arg(long, default_value_t = 500)]
    pub rate: u64,
    /// Record format: JSON, or Avro or Protobuf in the Confluent wire format (these two need a
    /// schema registry, `--registry-url`).
    #[arg(long, value_enum, default_value_t = QuickstartFormat::Json)]
    pub format: QuickstartFormat,
    /// The Confluent-compatible schema registry of `--format avro|protobuf` (the local one:
    /// `deploy/local/schema-registry.sh start`).
    #[arg(long, default_value = DEFAULT_REGISTRY_URL)]
    pub registry_url: String,
}

/// The record format of the quickstart.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum QuickstartFormat {
    /// JSON validated by `config/event.schema.json`.
    Json,
    /// Avro (`config/event.avsc`) in the Confluent wire format.
    Avro,
    /// Protobuf (`config/event.proto`) in the Confluent wire format.
    Protobuf,
}

impl QuickstartFormat {
    /// The channel's `record.format`.
    pub fn as_str(self) -> &'static str {
        match self {
            QuickstartFormat::Json => "json",
            QuickstartFormat::Avro => "avro",
            QuickstartFormat::Protobuf => "protobuf",
        }
    }
}

/// Where `deploy/local/schema-registry.sh start` runs its registry.
pub const DEFAULT_REGISTRY_URL: &str = "http://127.0.0.1:18081";
/// The subject the quickstart registers its schema under: the topic-name strategy's for topic
/// `events`, the channel's default.
pub const SUBJECT: &str = "events-value";

/// Errors of the quickstart.
#[derive(Debug, thiserror::Error)]
pub enum QuickstartError {
    /// Setting up the broker, config or directories failed.
    #[error("setup: {0}")]
    Setup(String),
    /// The pipeline failed.
    #[error("pipeline: {0}")]
    Pipeline(String),
}

/// The outcome of a reconciliation by id.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Reconciliation {
    /// Records produced.
    pub produced: u64,
    /// Rows in the table.
    pub delivered: u64,
    /// Entries in the DLQ.
    pub dead_lettered: u64,
    /// Produced ids found neither in the table nor in the DLQ.
    pub missing: u64,
    /// Ids found more than once (table and DLQ together).
    pub duplicated: u64,
}

impl Reconciliation {
    /// True when every record is in the table or the DLQ exactly once.
    pub fn exactly_once(&self) -> bool {
        self.missing == 0
            && self.duplicated == 0
            && self.delivered + self.dead_lettered == self.produced
    }
}

impl std::fmt::Display for Reconciliation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "produced {}, delivered {}, dead-lettered {}, missing {}, duplicated {}",
            self.produced, self.delivered, self.dead_lettered, self.missing, self.duplicated
        )
    }
}

/// Reads the `id` column of every row of the table (through iceberg-rust's scan, which reads
/// only the data files the current snapshot references).
///
/// Errors: any catalog or storage error.
pub async fn table_ids(table: &Table) -> iceberg::Result<Vec<i64>> {
    if table.metadata().current_snapshot_id().is_none() {
        return Ok(Vec::new());
    }
    let scan = table.scan().select(["id"]).build()?;
    let batches: Vec<arrow_array::RecordBatch> = scan.to_arrow().await?.try_collect().await?;
    let mut ids = Vec::new();
    for b in batches {
        let col = b.column(0);
        if let Some(a) = col.as_any().downcast_ref::<arrow_array::Int64Array>() {
            ids.extend(a.iter().flatten());
        } else if let Some(a) = col.as_any().downcast_ref::<arrow_array::Int32Array>() {
            ids.extend(a.iter().flatten().map(i64::from));
        }
    }
    Ok(ids)
}

/// Reconciles produced ids `0..produced` against the table's ids and the DLQ entries' keys.
pub fn reconcile(produced: u64, table_ids: &[i64], dlq_keys: &[Option<String>]) -> Reconciliation {
    let mut seen: HashMap<i64, u32> = HashMap::new();
    for id in table_ids {
        *seen.entry(*id).or_default() += 1;
    }
    for key in dlq_keys.iter().flatten() {
        if let Ok(id) = key.parse::<i64>() {
            *seen.entry(id).or_default() += 1;
        }
    }
    let missing = (0..produced as i64)
        .filter(|id| !seen.contains_key(id))
        .count() as u64;
    let duplicated = seen.values().filter(|n| **n > 1).count() as u64;
    Reconciliation {
        produced,
        delivered: table_ids.len() as u64,
        dead_lettered: dlq_keys.len() as u64,
        missing,
        duplicated,
    }
}

fn config_toml(
    dir: &Path,
    bootstrap: &str,
    format: QuickstartFormat,
    registry_url: &str,
) -> String {
    let d = dir.display();
    let schema = match format {
        QuickstartFormat::Json => format!("file = \"{d}/event.schema.json\""),
        _ => format!(
            "registry_url = \"{registry_url}\"\n  # subject: by default \"{SUBJECT}\" (the topic-name strategy)"
        ),
    };
    let format = format.as_str();
    format!(
        r#"# Generated by `floe quickstart`.
[worker]
id = "quickstart"
metrics_address = "127.0.0.1:9464"
shutdown_timeout = "30s"

[lease_store]
kind = "sqlite"
path = "{d}/leases.sqlite"
lease_duration = "6s"
renew_interval = "2s"

[[channel]]
name = "quickstart"
  [channel.source]
  kind = "kafka"
  bootstrap_servers = "{bootstrap}"
  topic = "events"
  initial_position = "earliest"
  [channel.record]
  format = "{format}"
  [channel.schema]
  {schema}
  [channel.destination]
  kind = "iceberg"
  namespace = "quickstart"
  table = "events"
  partition_field = "event_time"
  compression = "zstd"
  data_freshness = "10s"
    [channel.destination.catalog]
    kind = "sql"
    name = "floe"
    uri = "{d}/catalog.sqlite"
    warehouse = "{d}/warehouse"
  [channel.dlq]
  kind = "local"
  path = "{d}/dlq"
"#
    )
}

/// The `Event` JSON Schema (shared/cases/event.schema.json), shipped with the binary.
pub const EVENT_SCHEMA: &str = include_str!("../../config/event.schema.json");
/// The `Event` in Avro (`config/event.avsc`), shipped with the binary.
pub const EVENT_AVRO_SCHEMA: &str = include_str!("../../config/event.avsc");
/// The `Event` in Protobuf (`config/event.proto`, `Event` its first message), shipped with the
/// binary.
pub const EVENT_PROTOBUF_SCHEMA: &str = include_str!("../../config/event.proto");

/// How the quickstart writes its records.
enum Encoder {
    /// JSON text (`config/event.schema.json`).
    Json,
    /// Avro under the registered schema `id`.
    Avro {
        schema: apache_avro::Schema,
        id: u32,
    },
    /// Protobuf under the registered schema `id`.
    Protobuf { id: u32 },
}

impl Encoder {
    /// Record `id` (its event from `seed`, `base_ms`, `spread_hours` as [`event_json`]), or a bad
    /// record when `id % 100 == 37` (about 1%, the kinds in turn).
    fn record(
        &self,
        id: u64,
        seed: u64,
        base_ms: i64,
        spread_hours: u32,
    ) -> Result<Vec<u8>, String> {
        let bad = id % 100 == 37;
        let turn = (id / 100) as usize;
        let frame = match self {
            Encoder::Json if bad => {
                return Ok(bad_event(id, BadKind::ALL[turn % BadKind::ALL.len()]).0)
            }
            Encoder::Json => return Ok(event_json(id, seed, base_ms, spread_hours).into_bytes()),
            Encoder::Avro {
                schema,
                id: schema_id,
            } => {
                let e = EventValues::generate(id, seed, base_ms, spread_hours);
                let datum = event_avro(schema, &e).map_err(|e| format!("avro encoding: {e}"))?;
                confluent_frame(*schema_id, false, &datum)
            }
            Encoder::Protobuf { id: schema_id } => {
                let e = EventValues::generate(id, seed, base_ms, spread_hours);
                confluent_frame(*schema_id, true, &event_protobuf(&e))
            }
        };
        if !bad {
            return Ok(frame);
        }
        let kind = FramedBadKind::ALL[turn % FramedBadKind::ALL.len()];
        Ok(kind.make(&frame, &event_json(id, seed, base_ms, spread_hours)))
    }
}

/// Checks that a schema registry answers at `url`, then registers the quickstart's schema of
/// `format` under [`SUBJECT`] and returns its id.
///
/// Errors: a setup message naming the registry and what to do.
async fn register_schema(url: &str, format: QuickstartFormat) -> Result<u32, QuickstartError> {
    let (schema_type, schema) = match format {
        QuickstartFormat::Avro => ("AVRO", EVENT_AVRO_SCHEMA),
        QuickstartFormat::Protobuf => ("PROTOBUF", EVENT_PROTOBUF_SCHEMA),
        QuickstartFormat::Json => unreachable!("json registers no schema"),
    };
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let setup = |m: String| QuickstartError::Setup(m);
    let client = reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(3))
        .timeout(Duration::from_secs(10))
        .build()
        .map_err(|e| setup(format!("schema registry http client: {e}")))?;
    let base = url.trim_end_matches('/');
    let answered = client.get(format!("{base}/subjects")).send().await;
    if !matches!(&answered, Ok(r) if r.status().is_success()) {
        let why = match answered {
            Ok(r) => format!("HTTP {}", r.status()),
            Err(e) => e.to_string(),
        };
        return Err(setup(format!(
            "--format {} needs a Confluent-compatible schema registry, and {url} does not answer \
             as one (GET /subjects: {why}): start the local one with \
             `deploy/local/schema-registry.sh start`, or pass --registry-url",
            format.as_str()
        )));
    }
    let body = serde_json::json!({"schemaType": schema_type, "schema": schema});
    let response = client
        .post(format!("{base}/subjects/{SUBJECT}/versions"))
        .header("content-type", "application/vnd.schemaregistry.v1+json")
        .body(body.to_string())
        .send()
        .await
        .map_err(|e| setup(format!("registering subject {SUBJECT} at {url}: {e}")))?;
    let status = response.status();
    let text = response
        .text()
        .await
        .map_err(|e| setup(format!("registering subject {SUBJECT} at {url}: {e}")))?;
    if status.as_u16() == 409 {
        return Err(setup(format!(
            "the registry at {url} refuses the quickstart's {schema_type} schema under subject \
             {SUBJECT} ({text}): the subject holds an incompatible schema, perhaps from a \
             quickstart in another format; restart the local registry (`deploy/local/schema-registry.sh \
             stop`, then `start`: without FLOE_SCHEMA_REGISTRY_DATA it keeps nothing) or delete the subject \
             (`curl -X DELETE {base}/subjects/{SUBJECT}`, then again with `?permanent=true`)"
        )));
    }
    if !status.is_success() {
        return Err(setup(format!(
            "registering subject {SUBJECT} at {url}: HTTP {status}: {text}"
        )));
    }
    serde_json::from_str::<serde_json::Value>(&text)
        .ok()
        .and_then(|v| v["id"].as_u64())
        .and_then(|id| u32::try_from(id).ok())
        .ok_or_else(|| {
            setup(format!(
                "registering subject {SUBJECT} at {url}: unexpected answer {text}"
            ))
        })
}

/// Runs the quickstart and prints its report; returns the reconciliation.
///
/// Errors: setup or pipeline failures (the reconciliation itself is returned, not an error).
pub async fn run(args: &QuickstartArgs) -> Result<Reconciliation, QuickstartError> {
    let setup = |e: &dyn std::fmt::Display| QuickstartError::Setup(e.to_string());
    std::fs::create_dir_all(&args.dir).map_err(|e| setup(&e))?;
    let dir = std::fs::canonicalize(&args.dir).map_err(|e| setup(&e))?;
    if dir.join("catalog.sqlite").exists() || dir.join("leases.sqlite").exists() {
        return Err(QuickstartError::Setup(format!(
            "{} holds an earlier quickstart; remove it or pass --dir",
            dir.display()
        )));
    }
    let encoder = prepare_encoder(args, &dir).await?;

    stdout::println("starting an embedded Kafka broker (librdkafka mock cluster), topic `events` with 4 partitions");
    let kafka = EmbeddedKafka::start(3).map_err(|e| setup(&e))?;
    kafka.create_topic("events", 4).map_err(|e| setup(&e))?;
    let bootstrap = kafka.bootstrap_servers().to_string();
    let config_path = dir.join("floe.toml");
    std::fs::write(
        &config_path,
        config_toml(&dir, &bootstrap, args.format, &args.registry_url),
    )
    .map_err(|e| setup(&e))?;
    let config = Config::load(&config_path).map_err(|e| setup(&e))?;

    // Two workers in this process, sharing the lease store like two processes would.
    let shutdown = CancellationToken::new();
    let mut handles = Vec::new();
    for n in 1..=2 {
        let mut cfg = config.clone();
        cfg.worker.id = format!("quickstart-worker-{n}");
        let token = shutdown.clone();
        handles.push(tokio::spawn(
            async move { crate::app::run(cfg, token).await },
        ));
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    stdout::println(format!(
        "running 2 workers; data freshness 10 s; producing {} records/s for {} s",
        args.rate, args.seconds
    ));

    // Produce.
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", &bootstrap)
        .set("linger.ms", "5")
        .create()
        .map_err(|e| setup(&e))?;
    let total = args.rate * args.seconds;
    let base_ms = 1_783_627_200_000i64; // 2026-07-09T20:00:00Z: events spread over 3 hours
    let started = Instant::now();
    let catalog = open_sql_catalog(&dir.join("catalog.sqlite"), &dir.join("warehouse"), "floe")
        .await
        .map_err(|e| setup(&e))?;
    let ident = TableIdent::new(NamespaceIdent::new("quickstart".into()), "events".into());
    let local_dlq = LocalDlq::new(dir.join("dlq"), "quickstart");
    let dlq: Dlq = local_dlq.clone().into();
    let mut last_progress = Instant::now();
    for id in 0..total {
        let payload = encoder
            .record(id, 42, base_ms, 3)
            .map_err(QuickstartError::Pipeline)?;
        let key = id.to_string();
        loop {
            match producer.send(BaseRecord::to("events").key(&key).payload(&payload)) {
                Ok(()) => break,
                Err((_, _)) => {
                    producer.poll(Duration::from_millis(10));
                }
            }
        }
        producer.poll(Duration::ZERO);
        // Pace to the requested rate.
        let due = Duration::from_secs_f64((id + 1) as f64 / args.rate as f64);
        if let Some(wait) = due.checked_sub(started.elapsed()) {
            tokio::time::sleep(wait).await;
        }
        if last_progress.elapsed() >= Duration::from_secs(2) {
            progress(catalog.as_ref(), &ident, &dlq, id + 1).await;
            last_progress = Instant::now();
        }
    }
    producer
        .flush(Duration::from_secs(10))
        .map_err(|e| QuickstartError::Pipeline(e.to_string()))?;
    stdout::println(format!(
        "produced {total} records; waiting for the last commits"
    ));

    // Wait until everything is delivered (or a bound passes).
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let (rows, dead) = counts(catalog.as_ref(), &ident, &dlq).await;
        if rows + dead >= total || Instant::now() > deadline {
            break;
        }
        if last_progress.elapsed() >= Duration::from_secs(2) {
            progress(catalog.as_ref(), &ident, &dlq, total).await;
            last_progress = Instant::now();
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    shutdown.cancel();
    for h in handles {
        match h.await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(QuickstartError::Pipeline(e.to_string())),
            Err(e) => return Err(QuickstartError::Pipeline(e.to_string())),
        }
    }

    let rec = report(&dir, catalog.as_ref(), &ident, &local_dlq, &dlq, total).await?;
    // The broker lives until the process exits: dropping it here would make the workers'
    // lingering Kafka clients log disconnects after the summary line.
    std::mem::forget(kafka);
    Ok(rec)
}

/// The quickstart's record encoder for `--format`: JSON (its schema file written into `dir`), or
/// Avro or Protobuf with the schema registered at `--registry-url`.
///
/// Errors: the schema file cannot be written, or the registry refuses the schema.
async fn prepare_encoder(args: &QuickstartArgs, dir: &Path) -> Result<Encoder, QuickstartError> {
    let setup = |e: &dyn std::fmt::Display| QuickstartError::Setup(e.to_string());
    Ok(match args.format {
        QuickstartFormat::Json => {
            std::fs::write(dir.join("event.schema.json"), EVENT_SCHEMA).map_err(|e| setup(&e))?;
            Encoder::Json
        }
        QuickstartFormat::Avro => {
            let id = register_schema(&args.registry_url, args.format).await?;
            let schema =
                apache_avro::Schema::parse_str(EVENT_AVRO_SCHEMA).map_err(|e| setup(&e))?;
            stdout::println(format!(
                "registered config/event.avsc under subject {SUBJECT} at {} (schema id {id})",
                args.registry_url
            ));
            Encoder::Avro { schema, id }
        }
        QuickstartFormat::Protobuf => {
            let id = register_schema(&args.registry_url, args.format).await?;
            stdout::println(format!(
                "registered config/event.proto under subject {SUBJECT} at {} (schema id {id})",
                args.registry_url
            ));
            Encoder::Protobuf { id }
        }
    })
}

/// Prints what was delivered (rows, snapshots, files per hour, DLQ entries by code) and how to
/// query it, and reconciles it with the `total` records produced.
///
/// Errors: the table or the DLQ cannot be read.
async fn report(
    dir: &Path,
    catalog: &dyn Catalog,
    ident: &TableIdent,
    local_dlq: &LocalDlq,
    dlq: &Dlq,
    total: u64,
) -> Result<Reconciliation, QuickstartError> {
    let table = catalog
        .load_table(ident)
        .await
        .map_err(|e| QuickstartError::Pipeline(e.to_string()))?;
    let ids = table_ids(&table)
        .await
        .map_err(|e| QuickstartError::Pipeline(e.to_string()))?;
    let entries = dlq
        .read_published()
        .await
        .map_err(|e| QuickstartError::Pipeline(e.to_string()))?;
    let mut by_code: BTreeMap<&str, u64> = BTreeMap::new();
    for e in &entries {
        *by_code.entry(e.error_code.as_str()).or_default() += 1;
    }
    let files = data_files_by_partition(&table)
        .await
        .map_err(|e| QuickstartError::Pipeline(e.to_string()))?;
    stdout::println("");
    stdout::println(format!(
        "table quickstart.events ({})",
        table.metadata_location().unwrap_or("")
    ));
    stdout::println(format!("  rows delivered: {}", ids.len()));
    stdout::println(format!(
        "  snapshots: {}",
        table.metadata().snapshots().len()
    ));
    stdout::println("  data files per hour partition:");
    for (partition, n) in &files {
        stdout::println(format!("    {}: {n}", hour_label(partition)));
    }
    stdout::println(format!(
        "DLQ ({}): {} entries",
        local_dlq.published_dir().display(),
        entries.len()
    ));
    for (code, n) in &by_code {
        stdout::println(format!("  {code}: {n}"));
    }
    stdout::println("");
    stdout::println("query it with PyIceberg (pip install 'pyiceberg[sql-sqlite,pyarrow]'):");
    stdout::println("  from pyiceberg.catalog.sql import SqlCatalog");
    stdout::println(format!(
        "  cat = SqlCatalog(\"floe\", uri=\"sqlite:///{}/catalog.sqlite\", warehouse=\"file://{}/warehouse\")",
        dir.display(),
        dir.display()
    ));
    stdout::println("  t = cat.load_table(\"quickstart.events\").scan().to_arrow()");
    stdout::println("  print(t.num_rows, t.schema)");
    stdout::println("");
    let keys: Vec<Option<String>> = entries.into_iter().map(|e| e.key).collect();
    let rec = reconcile(total, &ids, &keys);
    stdout::println(rec.to_string());
    Ok(rec)
}

/// Rows in the table's current snapshot, from its `total-records` summary (0 without a
/// snapshot or summary).
pub fn total_records(table: &Table) -> u64 {
    table
        .metadata()
        .current_snapshot()
        .and_then(|s| {
            s.summary()
                .additional_properties
                .get("total-records")
                .cloned()
        })
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// Rows in the table's current snapshot (its `total-records` summary) and published DLQ
/// entries: how far delivery has come. `(0, n)` while the table is missing or empty.
pub async fn counts(catalog: &dyn Catalog, ident: &TableIdent, dlq: &Dlq) -> (u64, u64) {
    let rows = match catalog.load_table(ident).await {
        Ok(t) => total_records(&t),
        Err(_) => 0,
    };
    let dead = dlq
        .read_published()
        .await
        .map(|e| e.len() as u64)
        .unwrap_or(0);
    (rows, dead)
}

async fn progress(catalog: &dyn Catalog, ident: &TableIdent, dlq: &Dlq, produced: u64) {
    let (rows, dead) = counts(catalog, ident, dlq).await;
    stdout::println(format!(
        "  produced {produced:>7}  delivered {rows:>7}  dead-lettered {dead:>5}"
    ));
}

/// Counts the data files of the current snapshot per hour partition directory.
///
/// Errors: any catalog or storage error.
pub async fn data_files_by_partition(table: &Table) -> iceberg::Result<BTreeMap<String, usize>> {
    let mut out = BTreeMap::new();
    for path in crate::iceberg::table::referenced_data_files(table).await? {
        let partition = path
            .rsplit('/')
            .nth(1)
            .unwrap_or("(unpartitioned)")
            .to_string();
        *out.entry(partition).or_default() += 1;
    }
    Ok(out)
}

/// `event_time_hour=495452` → `event_time_hour=2026-07-09-20` (hours since the epoch, as the
/// Iceberg spec's human-readable hour partition value).
fn hour_label(partition: &str) -> String {
    match partition.split_once('=') {
        Some((name, hours)) => match hours.parse::<i64>() {
            Ok(h) => format!("{name}={}", crate::time::hour_text(h)),
            Err(_) => partition.to_string(),
        },
        None => partition.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hour_partition_labels_are_human_readable() {
        assert_eq!(
            hour_label("event_time_hour=495452"),
            "event_time_hour=2026-07-09-20"
        );
        assert_eq!(
            hour_label("event_time_hour=-1"),
            "event_time_hour=1969-12-31-23"
        );
    }

    #[test]
    fn reconciliation_counts_missing_and_duplicated_ids() {
        let rec = reconcile(5, &[0, 1, 1, 3], &[Some("4".into()), Some("3".into())]);
        assert_eq!(rec.missing, 1); // id 2
        assert_eq!(rec.duplicated, 2); // id 1 twice in the table, id 3 in table and DLQ
        assert!(!rec.exactly_once());
        let ok = reconcile(3, &[0, 2], &[Some("1".into())]);
        assert!(ok.exactly_once());
        assert_eq!(
            ok.to_string(),
            "produced 3, delivered 2, dead-lettered 1, missing 0, duplicated 0"
        );
    }
}
