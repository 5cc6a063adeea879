//! Helpers shared by the integration tests: config files, producing records, waiting for
//! delivery, and the independent PyIceberg reader.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use floe::dlq::LocalDlq;
use floe::events::{bad_event, event_json, BadKind};
use iceberg::{NamespaceIdent, TableIdent};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::ClientConfig;

/// 2026-07-09T20:00:00Z in milliseconds.
pub const BASE_MS: i64 = 1_783_627_200_000;
/// Generator seed used by every test.
pub const SEED: u64 = 7;

/// The Python interpreter with PyIceberg (scripts/test.sh sets FLOE_PYTHON).
pub fn python() -> PathBuf {
    if let Ok(p) = std::env::var("FLOE_PYTHON") {
        return PathBuf::from(p);
    }
    let venv = Path::new(env!("CARGO_MANIFEST_DIR")).join(".venv/bin/python");
    assert!(
        venv.exists(),
        "PyIceberg is needed to read the table independently: run scripts/test.sh (it creates .venv), or set FLOE_PYTHON"
    );
    venv
}

/// Reads the table with PyIceberg; returns the JSON that tests/py/read_table.py prints.
pub fn read_with_pyiceberg(dir: &Path, ids: &[u64]) -> serde_json::Value {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/py/read_table.py");
    let ids: Vec<String> = ids.iter().map(|i| i.to_string()).collect();
    let out = Command::new(python())
        .arg(script)
        .arg(dir.join("catalog.sqlite"))
        .arg(dir.join("warehouse"))
        .arg("it.events")
        .arg("--ids")
        .arg(ids.join(","))
        .output()
        .expect("run python");
    assert!(
        out.status.success(),
        "PyIceberg reader failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("reader prints JSON")
}

/// A config for channel "it" writing table it.events under `dir`.
pub fn config_toml(dir: &Path, bootstrap: &str, worker_id: &str, lease_s: u64) -> String {
    let d = dir.display();
    format!(
        r#"[worker]
id = "{worker_id}"
shutdown_timeout = "20s"
metrics_address = "off"

[lease_store]
kind = "sqlite"
path = "{d}/leases.sqlite"
lease_duration = "{lease_s}s"
renew_interval = "1s"

[[channel]]
name = "it"
  [channel.source]
  kind = "kafka"
  bootstrap_servers = "{bootstrap}"
  topic = "events"
  initial_position = "earliest"
  [channel.record]
  format = "json"
  [channel.schema]
  file = "{manifest}/config/event.schema.json"
  [channel.destination]
  kind = "iceberg"
  namespace = "it"
  table = "events"
  partition_field = "event_time"
  data_freshness = "10s"
    [channel.destination.catalog]
    kind = "sql"
    name = "floe"
    uri = "{d}/catalog.sqlite"
    warehouse = "{d}/warehouse"
  [channel.dlq]
  kind = "local"
  path = "{d}/dlq"
"#,
        manifest = env!("CARGO_MANIFEST_DIR")
    )
}

/// Whether id `id` is produced as a bad record, and which kind.
pub fn bad_kind(id: u64) -> Option<BadKind> {
    (id % 50 == 13).then(|| BadKind::ALL[(id / 50) as usize % BadKind::ALL.len()])
}

/// Produces ids `from..to` (keys = id), 2% of them bad.
pub fn produce(bootstrap: &str, from: u64, to: u64) {
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("linger.ms", "5")
        .create()
        .expect("producer");
    for id in from..to {
        let payload = match bad_kind(id) {
            Some(kind) => bad_event(id, kind).0,
            None => event_json(id, SEED, BASE_MS, 3).into_bytes(),
        };
        let key = id.to_string();
        loop {
            match producer.send(BaseRecord::to("events").key(&key).payload(&payload)) {
                Ok(()) => break,
                Err(_) => {
                    producer.poll(Duration::from_millis(10));
                }
            }
        }
        producer.poll(Duration::ZERO);
    }
    producer.flush(Duration::from_secs(30)).expect("flush");
}

/// Rows in the current snapshot (from its summary) and published DLQ entries.
pub async fn delivered(dir: &Path) -> (u64, u64) {
    let dlq = LocalDlq::new(dir.join("dlq"), "it");
    let Ok(catalog) = floe::catalog::open_sql_catalog(
        &dir.join("catalog.sqlite"),
        &dir.join("warehouse"),
        "floe",
    )
    .await
    else {
        return (0, dlq.read_published().map(|e| e.len() as u64).unwrap_or(0));
    };
    let ident = TableIdent::new(NamespaceIdent::new("it".into()), "events".into());
    floe::quickstart::counts(catalog.as_ref(), &ident, &dlq).await
}

/// Waits until rows + DLQ entries reach `total`, or `timeout` passes. Returns the last counts.
pub async fn wait_delivered(dir: &Path, total: u64, timeout: Duration) -> (u64, u64) {
    let deadline = Instant::now() + timeout;
    loop {
        let (rows, dlq) = delivered(dir).await;
        if rows + dlq >= total || Instant::now() > deadline {
            return (rows, dlq);
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Published DLQ keys (ids as text).
pub fn dlq_keys(dir: &Path) -> Vec<Option<String>> {
    LocalDlq::new(dir.join("dlq"), "it")
        .read_published()
        .expect("read DLQ")
        .into_iter()
        .map(|e| e.key)
        .collect()
}

/// An `Event` table `<channel>.events` created as a channel would, in a SQL catalog under `dir`;
/// returns the catalog, the table and the mapped schema.
pub async fn event_table(
    dir: &Path,
    channel: &str,
) -> (
    std::sync::Arc<dyn iceberg::Catalog>,
    TableIdent,
    std::sync::Arc<floe::schema::MappedSchema>,
) {
    let catalog =
        floe::catalog::open_sql_catalog(&dir.join("catalog.sqlite"), &dir.join("wh"), "floe")
            .await
            .unwrap();
    let schema_json: serde_json::Value =
        serde_json::from_str(floe::quickstart::EVENT_SCHEMA).unwrap();
    let schema = std::sync::Arc::new(
        floe::schema::MappedSchema::from_json_schema(&schema_json, "event_time").unwrap(),
    );
    let ident = TableIdent::new(NamespaceIdent::new(channel.into()), "events".into());
    let spec = floe::catalog::TableSpec {
        ident: ident.clone(),
        channel: channel.into(),
        compression_codec: "zstd".into(),
        target_file_size_bytes: 128 << 20,
    };
    floe::catalog::ensure_table(catalog.as_ref(), &spec, &schema)
        .await
        .unwrap();
    (catalog, ident, schema)
}

/// Settings of a worker loop in component tests: channel `channel`, worker "w1", shards without
/// a checkpoint read from the earliest record, batches handed off after `data_freshness`.
pub fn worker_settings(channel: &str, data_freshness: Duration) -> floe::worker::WorkerSettings {
    floe::worker::WorkerSettings {
        channel: channel.into(),
        worker_id: "w1".into(),
        source_name: "events".into(),
        schema_version: "event.schema.json".into(),
        data_freshness,
        buffer_size: 64 << 20,
        max_record_size: 10 << 20,
        include_payload: false,
        initial_position: floe::source::InitialPosition::Earliest,
        writer: floe::writer::WriterSettings {
            channel: channel.into(),
            compression: floe::writer::ParquetCompression::Zstd(1),
            target_file_size: 128 << 20,
        },
    }
}
