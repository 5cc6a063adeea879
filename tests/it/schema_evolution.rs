//! Schema evolution from the Glue Schema Registry (issue 19), end to end on the local emulator's
//! Glue: a `gsr_json` channel with `evolution = "compatible"` reads a Kafka topic whose records
//! move from version 1 to a compatible version 2 (an optional nested struct added, an int widened
//! to long), back to version 1, and to an incompatible version 3; PyIceberg reads the table.
//! - `compatible_versions_evolve_the_table_once_and_an_incompatible_one_is_dead_lettered`;
//! - `two_workers_meeting_a_new_version_make_one_schema_change`;
//! - `concurrent_schema_changes_of_one_version_commit_once` (the catalog swap, in process);
//! - `a_worker_killed_at_each_step_of_a_change_loses_and_doubles_nothing` (SIGKILL at the
//!   decision, after the swap, and of the committer after the change);
//! - `the_committer_killed_while_a_worker_changes_the_schema_loses_and_doubles_nothing`;
//! - `compaction_after_a_schema_change_reads_no_file_of_an_older_schema_as_the_new_one`.

use crate::common;

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use aws_sdk_glue::types::{Compatibility, DataFormat, RegistryId, SchemaId};
use common::*;
use floe::tools::sample_events::event_json;
use serde_json::{json, Value};
use uuid::Uuid;

/// Registry of these tests (moto allows 10 registries per account and region).
const REGISTRY: &str = "floe-evolution";

/// A schema with versions 1 (the Event schema), 2 (compatible) and 3 (incompatible).
struct Versions {
    arn: String,
    v1: Uuid,
    v2: Uuid,
    v3: Uuid,
    endpoint: String,
}

impl Versions {
    async fn delete(self) {
        let glue = aws_clients(&self.endpoint).await.glue();
        let _ = glue
            .delete_schema()
            .schema_id(SchemaId::builder().schema_arn(&self.arn).build())
            .send()
            .await;
    }
}

/// Version 2: `user.tier` loses its bounds (int → long), `user.device` is a new optional
/// struct, `note` a new optional field.
fn v2_schema() -> Value {
    let mut v: Value = serde_json::from_str(floe::tools::quickstart::EVENT_SCHEMA).unwrap();
    v["properties"]["user"]["properties"]["tier"] = json!({"type": "integer"});
    v["properties"]["user"]["properties"]["device"] = json!({
        "type": "object",
        "properties": {"os": {"type": "string"}, "build": {"type": "integer"}}
    });
    v["properties"]["note"] = json!({"type": "string"});
    v
}

/// Version 3: `source` becomes an integer (string → long): incompatible.
fn v3_schema() -> Value {
    let mut v = v2_schema();
    v["properties"]["source"] = json!({"type": "integer"});
    v
}

/// A new schema (unique name) in [`REGISTRY`] whose version 1 is the Event schema: its ARN and
/// version 1's id.
async fn create_schema(glue: &aws_sdk_glue::Client, prefix: &str) -> (String, Uuid) {
    if let Err(e) = glue.create_registry().registry_name(REGISTRY).send().await {
        let exists = e
            .as_service_error()
            .is_some_and(|s| s.is_already_exists_exception());
        assert!(exists, "create_registry: {e:?}");
    }
    let created = glue
        .create_schema()
        .registry_id(RegistryId::builder().registry_name(REGISTRY).build())
        .schema_name(unique_name(prefix))
        .data_format(DataFormat::Json)
        .compatibility(Compatibility::None)
        .schema_definition(floe::tools::quickstart::EVENT_SCHEMA)
        .send()
        .await
        .unwrap();
    let id = Uuid::parse_str(created.schema_version_id().unwrap()).unwrap();
    (created.schema_arn().unwrap().to_string(), id)
}

async fn register(endpoint: &str) -> Versions {
    let glue = aws_clients(endpoint).await.glue();
    let (arn, v1) = create_schema(&glue, "evolving").await;
    let mut ids = vec![v1];
    for doc in [v2_schema(), v3_schema()] {
        let r = glue
            .register_schema_version()
            .schema_id(SchemaId::builder().schema_arn(&arn).build())
            .schema_definition(doc.to_string())
            .send()
            .await
            .unwrap();
        ids.push(Uuid::parse_str(r.schema_version_id().unwrap()).unwrap());
    }
    Versions {
        arn,
        v1: ids[0],
        v2: ids[1],
        v3: ids[2],
        endpoint: endpoint.to_string(),
    }
}

/// The test config of `common` as a `gsr_json` channel on `arn` version 1 with evolution.
fn config(dir: &Path, worker: &str, bootstrap: &str, endpoint: &str, arn: &str) -> String {
    let text = config_toml(dir, bootstrap, worker, 4);
    let file = format!(
        "file = \"{}/config/event.schema.json\"",
        env!("CARGO_MANIFEST_DIR")
    );
    assert!(text.contains(&file) && text.contains("format = \"json\""));
    let text = text
        .replacen(
            &file,
            &format!("glue_schema_arn = \"{arn}\"\n  version = 1\n  evolution = \"compatible\""),
            1,
        )
        .replacen("format = \"json\"", "format = \"gsr_json\"", 1);
    format!("[aws]\nregion = \"us-east-1\"\nendpoint_url = \"{endpoint}\"\n\n{text}")
}

/// The record of `id` in version `v` (1, 2 or 3) of the schema, GSR-framed.
fn record(vs: &Versions, v: u8, id: u64) -> Vec<u8> {
    let version = [vs.v1, vs.v2, vs.v3][usize::from(v.clamp(1, 3)) - 1];
    gsr_frame(version, id.is_multiple_of(2), &payload(v, id))
}

/// The JSON of the record of `id` in version `v` (1, 2 or 3) of the schema.
fn payload(v: u8, id: u64) -> Vec<u8> {
    let mut r: Value = serde_json::from_str(&event_json(id, SEED, BASE_MS, 3)).unwrap();
    match v {
        1 => {}
        2 => {
            r["user"] = json!({
                "country": "DE",
                "tier": 5_000_000_000u64 + id,
                "device": {"os": "ios", "build": id}
            });
            r["note"] = json!(format!("n{id}"));
        }
        _ => r["source"] = json!(id),
    }
    r.to_string().into_bytes()
}

/// The version of each id: 0..200 v1, 200..400 v2, 400..500 v1, 500..550 v3, 550..600 v2.
fn version_of(id: u64) -> u8 {
    match id {
        0..200 => 1,
        200..400 => 2,
        400..500 => 1,
        500..550 => 3,
        _ => 2,
    }
}

const TOTAL: u64 = 600;

fn produce_all(bootstrap: &str, vs: &Versions, ids: std::ops::Range<u64>) {
    produce_payloads(bootstrap, ids, |id| record(vs, version_of(id), id));
}

/// The table as PyIceberg reads it, for ids 0..TOTAL.
fn read(dir: &Path) -> Value {
    let ids: Vec<u64> = (0..TOTAL).collect();
    read_with_pyiceberg(dir, &ids)
}

/// The table's `floe.schema-history`.
fn history(table: &Value) -> Vec<Value> {
    let text = table["properties"]["floe.schema-history"]
        .as_str()
        .unwrap_or("[]");
    serde_json::from_str(text).unwrap()
}

/// Checks the outcome every test shares: rows == distinct ids, v3 in the DLQ, the rest in the
/// table, version 2 applied exactly once.
fn assert_delivered_once(dir: &Path, vs: &Versions, logs: &str) -> Value {
    let table = read(dir);
    assert_eq!(table["rows"], table["distinct_ids"], "duplicates\n{logs}");
    let in_table: BTreeSet<u64> = table["sample"]
        .as_object()
        .unwrap()
        .keys()
        .map(|k| k.parse().unwrap())
        .collect();
    let want: BTreeSet<u64> = (0..TOTAL).filter(|id| version_of(*id) != 3).collect();
    assert_eq!(in_table, want, "{logs}");
    assert_eq!(table["rows"], want.len() as u64);
    let dlq = floe::dlq::LocalDlq::new(dir.join("dlq"), "it")
        .read_published()
        .unwrap();
    let dead: BTreeSet<u64> = dlq
        .iter()
        .map(|e| e.key.as_ref().unwrap().parse().unwrap())
        .collect();
    assert_eq!(dead, (500..550).collect(), "{logs}");
    assert_eq!(dlq.len(), 50, "one DLQ entry per v3 record");
    for e in &dlq {
        assert_eq!(e.error_code, "SCHEMA_MISMATCH");
        assert_eq!(
            e.schema_version,
            vs.v3.to_string(),
            "the record's own version"
        );
        assert!(
            e.message
                .contains("is not a compatible evolution of the table: source: the type changes from string to long"),
            "{}",
            e.message
        );
    }
    let h = history(&table);
    let ids: Vec<&str> = h
        .iter()
        .map(|v| v["version-id"].as_str().unwrap())
        .collect();
    assert_eq!(
        ids,
        vec![vs.v1.to_string(), vs.v2.to_string()],
        "one history entry per applied version: {h:?}"
    );
    assert_eq!(
        table["properties"]["floe.schema-version-id"],
        json!(vs.v2.to_string())
    );
    table
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compatible_versions_evolve_the_table_once_and_an_incompatible_one_is_dead_lettered() {
    let endpoint = aws_endpoint();
    let vs = register(&endpoint).await;
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start();
    let metrics = format!("127.0.0.1:{}", free_port());
    let text = config(dir.path(), "w1", &broker.bootstrap, &endpoint, &vs.arn).replacen(
        "metrics_address = \"off\"",
        &format!("metrics_address = \"{metrics}\""),
        1,
    );
    let worker = Worker::start_with(dir.path(), "w1", &text);
    produce_all(&broker.bootstrap, &vs, 0..TOTAL);
    let (rows, dead) = wait_delivered(dir.path(), TOTAL, Duration::from_secs(120)).await;
    let scrape = get(&metrics, "/metrics").map(|r| r.1).unwrap_or_default();
    assert!(worker.terminate().success(), "{}", log_of(dir.path(), "w1"));
    let log = log_of(dir.path(), "w1");
    assert_eq!((rows, dead), (TOTAL - 50, 50), "{log}");
    let table = assert_delivered_once(dir.path(), &vs, &log);

    assert_evolved_schema_and_rows(&table);
    assert_history_names_the_changes(&table);
    assert_describe_shows_the_history(dir.path(), &vs);
    assert_one_evolution_and_one_incompatible_version_counted(&scrape);
    assert!(log.contains("schema evolved"), "{log}");
    with_evolution_off_version_1_is_dead_lettered(dir.path(), &text, &broker, &vs).await;
    vs.delete().await;
}

/// The evolved schema: new fields optional, the int widened, nothing else changed. Old rows
/// read the new columns as null, new rows have values; v1 rows after v2 too.
fn assert_evolved_schema_and_rows(table: &Value) {
    let schema = &table["schema"];
    assert_eq!(schema["user.tier"], "long", "{schema}");
    assert_eq!(schema["user.device.os"], "string", "{schema}");
    assert_eq!(schema["user.device.build"], "long", "{schema}");
    assert_eq!(schema["note"], "string", "{schema}");
    assert_eq!(schema["source"], "string", "{schema}");
    let required: Vec<&str> = table["required"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert!(!required.contains(&"note") && !required.contains(&"user.device"));
    // Old rows read the new columns as null, new rows have values; v1 rows after v2 too.
    let sample = &table["sample"];
    // What the run shows (`--nocapture`): the history and a row of each version.
    eprintln!(
        "schema history: {}\nschema: {}\nv1 row 0: {}\nv2 row 200: {}\nv1 row 450: {}",
        serde_json::to_string_pretty(&history(table)).unwrap(),
        table["schema"],
        sample["0"],
        sample["200"],
        sample["450"]
    );
    for id in [0u64, 150, 450] {
        let row = &sample[id.to_string()];
        assert!(row["note"].is_null(), "v1 row {id}: {row}");
        if !row["user"].is_null() {
            assert!(row["user"]["device"].is_null(), "v1 row {id}: {row}");
            assert!(row["user"]["tier"].as_i64().unwrap() <= 10, "{row}");
        }
    }
    for id in [200u64, 399, 599] {
        let row = &sample[id.to_string()];
        assert_eq!(row["note"], json!(format!("n{id}")), "v2 row {id}: {row}");
        assert_eq!(row["user"]["tier"], json!(5_000_000_000u64 + id), "{row}");
        assert_eq!(row["user"]["device"]["os"], "ios", "{row}");
        assert_eq!(row["user"]["device"]["build"], json!(id), "{row}");
    }
}

/// The history: v1 (activation), then v2 with its changes.
fn assert_history_names_the_changes(table: &Value) {
    let h = history(table);
    assert!(h[0]["changes"].as_array().unwrap().is_empty());
    let changes: Vec<&str> = h[1]["changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap())
        .collect();
    for want in [
        "widened user.tier from int to long",
        "added user.device (struct<build: long, os: string>",
        "added note (string",
    ] {
        assert!(
            changes.iter().any(|c| c.starts_with(want)),
            "{want}: {changes:?}"
        );
    }
}

/// The history as `floe channel describe` shows it, and the channel's version: the table's
/// current one, before any worker restarted.
fn assert_describe_shows_the_history(dir: &Path, vs: &Versions) {
    let out = Command::new(env!("CARGO_BIN_EXE_floe"))
        .args(["channel", "describe", "it", "--json", "--config"])
        .arg(dir.join("w1.toml"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let d: Value = serde_json::from_slice(&out.stdout).unwrap();
    let described = d[0]["schema_history"]
        .as_array()
        .cloned()
        .unwrap_or_else(|| {
            d["schema_history"]
                .as_array()
                .cloned()
                .unwrap_or_else(|| panic!("no schema_history in {d}"))
        });
    assert_eq!(described.len(), 2, "{d}");
    // The channel's version is the table's current one, before any worker restarted.
    let described_version = if d.is_array() {
        &d[0]["schema_version_id"]
    } else {
        &d["schema_version_id"]
    };
    assert_eq!(described_version, &json!(vs.v2.to_string()), "{d}");
    assert_eq!(described[1]["version_number"], 2);
    assert_eq!(described[1]["version_id"], json!(vs.v2.to_string()));
}

/// The metric of the change: one version evolved the table, one was incompatible.
fn assert_one_evolution_and_one_incompatible_version_counted(scrape: &str) {
    let s = samples(scrape);
    assert_eq!(
        sum(&s, "floe_schema_changes_total", &["outcome=\"evolved\""]),
        1.0,
        "{scrape}"
    );
    assert_eq!(
        sum(
            &s,
            "floe_schema_changes_total",
            &["outcome=\"incompatible\""]
        ),
        1.0,
        "{scrape}"
    );
}

/// Evolution switched off: the table keeps its evolved schema and its current version (2)
/// stays the channel's; version 1's records are SCHEMA_MISMATCH again.
async fn with_evolution_off_version_1_is_dead_lettered(
    dir: &Path,
    text: &str,
    broker: &Broker,
    vs: &Versions,
) {
    let off = text.replacen("evolution = \"compatible\"", "evolution = \"none\"", 1);
    let worker = Worker::start_with(dir, "w1", &off);
    produce_all(&broker.bootstrap, vs, 550..560);
    produce_payloads(&broker.bootstrap, 600..610, |id| record(vs, 1, id));
    let (rows, dead) = wait_delivered(dir, TOTAL + 20, Duration::from_secs(90)).await;
    assert!(worker.terminate().success());
    let log = log_of(dir, "w1");
    assert_eq!((rows, dead), (TOTAL - 50 + 10, 50 + 10), "{log}");
    assert!(!log.contains("differs from the version recorded"), "{log}");
    let dlq = floe::dlq::LocalDlq::new(dir.join("dlq"), "it")
        .read_published()
        .unwrap();
    let off_dead: Vec<_> = dlq
        .iter()
        .filter(|e| e.key.as_ref().unwrap().parse::<u64>().unwrap() >= 600)
        .collect();
    assert_eq!(off_dead.len(), 10);
    for e in off_dead {
        assert_eq!(e.error_code, "SCHEMA_MISMATCH");
        assert_eq!(e.schema_version, vs.v1.to_string());
        assert!(e.message.contains("evolution is \"none\""), "{}", e.message);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_workers_meeting_a_new_version_make_one_schema_change() {
    let endpoint = aws_endpoint();
    let vs = register(&endpoint).await;
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start();
    let w1 = Worker::start_with(
        dir.path(),
        "w1",
        &config(dir.path(), "w1", &broker.bootstrap, &endpoint, &vs.arn),
    );
    let w2 = Worker::start_with(
        dir.path(),
        "w2",
        &config(dir.path(), "w2", &broker.bootstrap, &endpoint, &vs.arn),
    );
    // v1 first, so both workers hold partitions and the table exists; then every partition
    // meets v2 at once.
    produce_all(&broker.bootstrap, &vs, 0..200);
    wait_delivered(dir.path(), 200, Duration::from_secs(90)).await;
    produce_all(&broker.bootstrap, &vs, 200..TOTAL);
    let (rows, dead) = wait_delivered(dir.path(), TOTAL, Duration::from_secs(120)).await;
    assert!(w1.terminate().success());
    assert!(w2.terminate().success());
    let logs = format!(
        "w1:\n{}\nw2:\n{}",
        log_of(dir.path(), "w1"),
        log_of(dir.path(), "w2")
    );
    assert_eq!(rows + dead, TOTAL, "{logs}");
    assert_delivered_once(dir.path(), &vs, &logs);
    let evolved = logs.matches("schema evolved").count();
    assert_eq!(evolved, 1, "one schema change in the fleet\n{logs}");
    let schemas = table_schema_ids(dir.path()).await;
    assert_eq!(schemas, vec![0, 1], "one schema added");
    vs.delete().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_committer_killed_while_a_worker_changes_the_schema_loses_and_doubles_nothing() {
    let endpoint = aws_endpoint();
    let vs = register(&endpoint).await;
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start();
    let pause = [("FLOE_PAUSE_AT", "evolution-decided")];
    let text = |w: &str| config(dir.path(), w, &broker.bootstrap, &endpoint, &vs.arn);
    let w1 = Worker::start_with_env(dir.path(), "w1", &text("w1"), &pause);
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while !log_of(dir.path(), "w1").contains("lease=committer") {
        assert!(
            std::time::Instant::now() < deadline,
            "{}",
            log_of(dir.path(), "w1")
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let w2 = Worker::start_with_env(dir.path(), "w2", &text("w2"), &pause);
    produce_all(&broker.bootstrap, &vs, 0..200);
    wait_delivered(dir.path(), 200, Duration::from_secs(90)).await;
    produce_all(&broker.bootstrap, &vs, 200..TOTAL);
    // A worker holds its schema change between the decision and the swap: SIGKILL the
    // committer (w1) then, with batches of both workers pending, and start it again.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let paused = |w: &str| log_of(dir.path(), w).contains("FLOE_PAUSE_AT=evolution-decided");
    while !paused("w1") && !paused("w2") {
        assert!(
            std::time::Instant::now() < deadline,
            "no schema change began"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    w1.signal("KILL");
    let first = log_of(dir.path(), "w1");
    let w1 = Worker::start_with(dir.path(), "w1", &text("w1"));
    let (rows, dead) = wait_delivered(dir.path(), TOTAL, Duration::from_secs(120)).await;
    assert!(w1.terminate().success());
    assert!(w2.terminate().success());
    let logs = format!(
        "w1 (killed):\n{first}\nw1:\n{}\nw2:\n{}",
        log_of(dir.path(), "w1"),
        log_of(dir.path(), "w2")
    );
    assert_eq!(rows + dead, TOTAL, "{logs}");
    assert_delivered_once(dir.path(), &vs, &logs);
    assert_eq!(table_schema_ids(dir.path()).await, vec![0, 1], "{logs}");
    vs.delete().await;
}

/// The schema ids of table it.events.
async fn table_schema_ids(dir: &Path) -> Vec<i32> {
    let catalog = floe::catalog::open_sql_catalog(
        &dir.join("catalog.sqlite"),
        &dir.join("warehouse"),
        "floe",
    )
    .await
    .unwrap();
    let t = catalog
        .load_table(&iceberg::TableIdent::from_strs(["it", "events"]).unwrap())
        .await
        .unwrap();
    let mut ids: Vec<i32> = t.metadata().schemas_iter().map(|s| s.schema_id()).collect();
    ids.sort();
    ids
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_schema_changes_of_one_version_commit_once() {
    use floe::iceberg::evolve::{apply_version, schema_history, Applied, VersionRef};
    let dir = tempfile::tempdir().unwrap();
    let database = floe::config::CatalogDatabase::Sqlite(dir.path().join("catalog.sqlite"));
    let catalog =
        floe::catalog::open_sql_catalog_local(&database, &dir.path().join("warehouse"), "floe")
            .await
            .unwrap();
    let swap: Arc<dyn floe::catalog::swap::TableSwap> = Arc::new(
        floe::catalog::swap::SqlSwap::open(catalog.clone(), &database, "floe")
            .await
            .unwrap(),
    );
    let (ident, v1) = event_table_in(catalog.as_ref(), "it", "it").await;
    let v2 =
        Arc::new(floe::schema::MappedSchema::from_json_schema(&v2_schema(), "event_time").unwrap());
    let table = catalog.load_table(&ident).await.unwrap();
    let uuid = table.metadata().uuid();
    let base = VersionRef {
        id: Uuid::now_v7(),
        number: 1,
    };
    let version = VersionRef {
        id: Uuid::now_v7(),
        number: 2,
    };
    let mut tasks = Vec::new();
    for _ in 0..4 {
        let (catalog, swap, ident, v2) = (catalog.clone(), swap.clone(), ident.clone(), v2.clone());
        tasks.push(tokio::spawn(async move {
            apply_version(
                "it",
                catalog.as_ref(),
                swap.as_ref(),
                &ident,
                uuid,
                Some(base),
                version,
                &v2,
            )
            .await
            .unwrap()
        }));
    }
    let mut committed = 0;
    for t in tasks {
        if let Applied::Committed { changes, .. } = t.await.unwrap() {
            assert!(!changes.is_empty());
            committed += 1;
        }
    }
    assert_eq!(committed, 1, "one of four concurrent changes commits");
    let t = catalog.load_table(&ident).await.unwrap();
    assert_eq!(t.metadata().schemas_iter().count(), 2);
    let h = schema_history(&t).unwrap();
    assert_eq!(
        h.iter().map(|v| v.version_id).collect::<Vec<_>>(),
        vec![base.id, version.id]
    );
    // The field ids of version 1's columns never change.
    for f in v1.iceberg_schema().as_struct().fields() {
        let before = table
            .metadata()
            .current_schema()
            .field_by_name(&f.name)
            .unwrap()
            .id;
        let after = t
            .metadata()
            .current_schema()
            .field_by_name(&f.name)
            .unwrap()
            .id;
        assert_eq!(before, after, "{}", f.name);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_killed_at_each_step_of_a_change_loses_and_doubles_nothing() {
    let endpoint = aws_endpoint();
    for step in ["evolution-decided", "evolution-committed", "after-change"] {
        let vs = register(&endpoint).await;
        let dir = tempfile::tempdir().unwrap();
        let broker = Broker::start();
        let text = config(dir.path(), "w1", &broker.bootstrap, &endpoint, &vs.arn);
        produce_all(&broker.bootstrap, &vs, 0..TOTAL);
        let mut first = match step {
            "after-change" => Worker::start_with(dir.path(), "w1", &text),
            crash => Worker::start_with_env(dir.path(), "w1", &text, &[("FLOE_CRASH_AT", crash)]),
        };
        if step == "after-change" {
            // SIGKILL the worker (it is the committer too) right after its schema change,
            // with batches of both schemas in flight.
            let deadline = std::time::Instant::now() + Duration::from_secs(90);
            while !log_of(dir.path(), "w1").contains("schema evolved") {
                assert!(
                    std::time::Instant::now() < deadline,
                    "{}",
                    log_of(dir.path(), "w1")
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            first.signal("KILL");
        }
        let status = first.wait_exit(Duration::from_secs(90)).await;
        let log1 = log_of(dir.path(), "w1");
        assert!(
            status.is_some_and(|s| !s.success()),
            "{step}: the first worker dies\n{log1}"
        );
        let second = Worker::start_with(dir.path(), "w1", &text);
        let (rows, dead) = wait_delivered(dir.path(), TOTAL, Duration::from_secs(120)).await;
        assert!(second.terminate().success());
        let logs = format!(
            "{step}\nfirst:\n{log1}\nsecond:\n{}",
            log_of(dir.path(), "w1")
        );
        assert_eq!(rows + dead, TOTAL, "{logs}");
        assert_delivered_once(dir.path(), &vs, &logs);
        assert_eq!(table_schema_ids(dir.path()).await, vec![0, 1], "{logs}");
        // The channel's recorded version follows the table once a start finds it evolved.
        if step != "evolution-decided" {
            let store = floe::lease::SqlLeaseStore::open_sqlite(dir.path().join("leases.sqlite"))
                .await
                .unwrap();
            let state = floe::lease::BatchStore::get_channel_state(&store, "it")
                .await
                .unwrap()
                .unwrap();
            assert_eq!(state.schema_version_id, Some(vs.v2.to_string()), "{logs}");
        }
        vs.delete().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compaction_after_a_schema_change_reads_no_file_of_an_older_schema_as_the_new_one() {
    let endpoint = aws_endpoint();
    let vs = register(&endpoint).await;
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start();
    let text = config(dir.path(), "w1", &broker.bootstrap, &endpoint, &vs.arn).replacen(
        "  [channel.dlq]",
        "    [channel.destination.maintenance]\n    interval = \"1s\"\n    compaction_delay = \"0s\"\n  [channel.dlq]",
        1,
    );
    let worker = Worker::start_with(dir.path(), "w1", &text);
    // In several hand-offs, so that every hour has files of both schemas.
    for ids in [0..200, 200..400, 400..600] {
        produce_all(&broker.bootstrap, &vs, ids.clone());
        wait_delivered(dir.path(), ids.end, Duration::from_secs(90)).await;
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(90);
    loop {
        let table = read(dir.path());
        let replaced = table["snapshots"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|s| s["operation"] == "replace")
            .count();
        // Compacted after the last hand-off: a replace snapshot newer than every append.
        let last = table["snapshots"].as_array().unwrap().last().cloned();
        if replaced > 0 && last.is_some_and(|s| s["operation"] == "replace") {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no compaction\n{}",
            log_of(dir.path(), "w1")
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert!(worker.terminate().success());
    let log = log_of(dir.path(), "w1");
    assert!(log.contains("compaction written"), "{log}");
    assert!(!log.contains("compaction failed"), "{log}");
    let table = assert_delivered_once(dir.path(), &vs, &log);
    let sample = &table["sample"];
    assert!(sample["150"]["note"].is_null(), "{}", sample["150"]);
    assert_eq!(
        sample["250"]["user"]["device"]["os"], "ios",
        "{}",
        sample["250"]
    );
    assert_eq!(
        sample["250"]["user"]["tier"],
        json!(5_000_000_250u64),
        "{}",
        sample["250"]
    );
    vs.delete().await;
}

/// Waits until `w1`'s log contains `needle`.
async fn wait_log(dir: &Path, needle: &str) {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while !log_of(dir, "w1").contains(needle) {
        assert!(
            std::time::Instant::now() < deadline,
            "no {needle:?} in\n{}",
            log_of(dir, "w1")
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_json_channel_follows_the_latest_compatible_version() {
    let endpoint = aws_endpoint();
    let glue = aws_clients(&endpoint).await.glue();
    // Start from a schema of version 1 only: versions 2 and 3 are registered while it runs.
    let (arn, _) = create_schema(&glue, "latest").await;
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start();
    let text = config(dir.path(), "w1", &broker.bootstrap, &endpoint, &arn)
        .replacen("format = \"gsr_json\"", "format = \"json\"", 1)
        .replacen(
            "  version = 1\n  evolution = \"compatible\"",
            "  evolution = \"compatible\"\n  poll_interval = \"1s\"",
            1,
        );
    let worker = Worker::start_with(dir.path(), "w1", &text);
    produce_payloads(&broker.bootstrap, 0..200, |id| payload(1, id));
    wait_delivered(dir.path(), 200, Duration::from_secs(90)).await;
    let register = |doc: Value| {
        let glue = glue.clone();
        let arn = arn.clone();
        async move {
            glue.register_schema_version()
                .schema_id(SchemaId::builder().schema_arn(&arn).build())
                .schema_definition(doc.to_string())
                .send()
                .await
                .unwrap()
        }
    };
    register(v2_schema()).await;
    wait_log(
        dir.path(),
        "records are validated by the new latest schema version",
    )
    .await;
    produce_payloads(&broker.bootstrap, 200..400, |id| payload(2, id));
    wait_delivered(dir.path(), 400, Duration::from_secs(90)).await;
    // An incompatible latest version changes nothing: records of version 2 are still taken.
    register(v3_schema()).await;
    wait_log(
        dir.path(),
        "records are still validated by the version applied before it",
    )
    .await;
    produce_payloads(&broker.bootstrap, 400..450, |id| payload(2, id));
    let (rows, dead) = wait_delivered(dir.path(), 450, Duration::from_secs(90)).await;
    assert!(worker.terminate().success());
    let log = log_of(dir.path(), "w1");
    assert_eq!((rows, dead), (450, 0), "{log}");
    // A restart converts by the table's current version from the first record on, long before
    // its first poll (the channel state still names version 1 until this start).
    let text = text.replacen("poll_interval = \"1s\"", "poll_interval = \"1h\"", 1);
    let worker = Worker::start_with(dir.path(), "w1", &text);
    produce_payloads(&broker.bootstrap, 450..500, |id| payload(2, id));
    let (rows, dead) = wait_delivered(dir.path(), 500, Duration::from_secs(90)).await;
    assert!(worker.terminate().success());
    assert_eq!((rows, dead), (500, 0), "{}", log_of(dir.path(), "w1"));
    let ids: Vec<u64> = (0..500).collect();
    let table = read_with_pyiceberg(dir.path(), &ids);
    assert_eq!(table["rows"], 500);
    assert_eq!(table["distinct_ids"], 500);
    let sample = &table["sample"];
    assert!(sample["10"]["note"].is_null(), "{}", sample["10"]);
    for id in [200u64, 420, 470] {
        assert_eq!(sample[id.to_string()]["note"], json!(format!("n{id}")));
        assert_eq!(sample[id.to_string()]["user"]["device"]["os"], "ios");
    }
    let h = history(&table);
    assert_eq!(h.len(), 2, "{h:?}");
    assert_eq!(h[1]["version-number"], 2);
    let _ = glue
        .delete_schema()
        .schema_id(SchemaId::builder().schema_arn(&arn).build())
        .send()
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_committer_round_planned_before_a_schema_change_re_plans_instead_of_refusing() {
    use floe::destination::{CommitError, CommitTarget};
    use floe::iceberg::evolve::{apply_version, VersionRef};
    use floe::model::{Position, ShardId};
    let dir = tempfile::tempdir().unwrap();
    let database = floe::config::CatalogDatabase::Sqlite(dir.path().join("catalog.sqlite"));
    let catalog =
        floe::catalog::open_sql_catalog_local(&database, &dir.path().join("warehouse"), "floe")
            .await
            .unwrap();
    let swap = floe::catalog::swap::SqlSwap::open(catalog.clone(), &database, "floe")
        .await
        .unwrap();
    let (ident, _v1) = event_table_in(catalog.as_ref(), "it", "it").await;
    let target = floe::iceberg::target::IcebergTarget::new(
        "it",
        ident.clone(),
        catalog.clone(),
        floe::dlq::LocalDlq::new(dir.path().join("dlq"), "it"),
    );
    // The committer's round loads the table at schema 0 ...
    let loaded = target.load().await.unwrap();
    // ... a worker evolves it (user.tier int -> long) and hands off a batch of the new schema.
    let v2 = floe::schema::MappedSchema::from_json_schema(&v2_schema(), "event_time").unwrap();
    let uuid = catalog.load_table(&ident).await.unwrap().metadata().uuid();
    let version = |number| VersionRef {
        id: Uuid::now_v7(),
        number,
    };
    let evolved = apply_version(
        "it",
        catalog.as_ref(),
        &swap,
        &ident,
        uuid,
        Some(version(1)),
        version(2),
        &v2,
    )
    .await
    .unwrap()
    .table();
    let batch = common::race::event_batch(&Arc::new(v2), "it", &evolved, None, 0, 10).await;
    let checkpoints =
        floe::model::Checkpoints([(ShardId::kafka_partition(0), Position::Offset(9))].into());
    // The round's commit does not parse the new schema's files against schema 0: a conflict
    // (re-planned on the fresh table), not a refusal that would stop the committer.
    let err = loaded
        .commit(&[&batch], &[], &checkpoints, 1, Uuid::now_v7())
        .await
        .unwrap_err();
    assert!(matches!(err, CommitError::Conflict(_)), "{err}");
    drop(loaded);
    // The next round, on the fresh table, commits it.
    let fresh = target.load().await.unwrap();
    fresh
        .commit(&[&batch], &[], &checkpoints, 1, Uuid::now_v7())
        .await
        .unwrap();
    let t = catalog.load_table(&ident).await.unwrap();
    assert_eq!(floe::tools::quickstart::total_records(&t), 10);
}

#[test]
fn records_check_shows_how_a_new_version_would_evolve_the_table_or_why_not() {
    let dir = tempfile::tempdir().unwrap();
    let (v1, v2, v3) = (Uuid::now_v7(), Uuid::now_v7(), Uuid::now_v7());
    let vs = Versions {
        arn: String::new(),
        v1,
        v2,
        v3,
        endpoint: String::new(),
    };
    let file = |name: &str, doc: &str| {
        let p = dir.path().join(name);
        std::fs::write(&p, doc).unwrap();
        p
    };
    let f1 = file("v1.json", floe::tools::quickstart::EVENT_SCHEMA);
    let f2 = file("v2.json", &v2_schema().to_string());
    let f3 = file("v3.json", &v3_schema().to_string());
    let hex = |b: Vec<u8>| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
    let input: String = [(1, 1), (2, 201), (2, 203), (3, 501), (1, 401)]
        .iter()
        .map(|&(v, id)| hex(record(&vs, v, id)) + "\n")
        .collect();
    let run = |evolution: &str| {
        let mut child = Command::new(env!("CARGO_BIN_EXE_floe"))
            .args([
                "records",
                "check",
                "--format",
                "gsr_json",
                "--encoding",
                "hex",
            ])
            .args(["--evolution", evolution, "--schema"])
            .arg(&f1)
            .arg("--schema-version")
            .arg(format!("{v1}={}", f1.display()))
            .arg("--schema-version")
            .arg(format!("{v2}={}", f2.display()))
            .arg("--schema-version")
            .arg(format!("{v3}={}", f3.display()))
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        std::io::Write::write_all(child.stdin.as_mut().unwrap(), input.as_bytes()).unwrap();
        let out = child.wait_with_output().unwrap();
        let lines = String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str::<Value>(l).unwrap())
            .collect::<Vec<_>>();
        // Exit 0 when every record is a row, 1 when one goes to the DLQ (issue 44).
        let dead_lettered = lines.iter().any(|l| l.get("dlq").is_some());
        assert_eq!(out.status.code(), Some(i32::from(dead_lettered)));
        lines
    };
    let lines = run("compatible");
    assert_eq!(lines.len(), 5);
    assert!(lines[0]["row"].is_object() && lines[0].get("evolution").is_none());
    let evolution = &lines[1]["evolution"];
    assert_eq!(evolution["schema_version"], json!(v2.to_string()));
    let changes: Vec<&str> = evolution["changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap())
        .collect();
    assert!(
        changes.contains(&"widened user.tier from int to long"),
        "{changes:?}"
    );
    assert_eq!(lines[1]["row"]["note"], "n201");
    assert!(
        lines[2].get("evolution").is_none(),
        "applied once: {}",
        lines[2]
    );
    assert_eq!(lines[3]["dlq"]["code"], "SCHEMA_MISMATCH");
    assert!(
        lines[3]["dlq"]["message"]
            .as_str()
            .unwrap()
            .contains("source: the type changes from string to long"),
        "{}",
        lines[3]
    );
    assert!(lines[4]["row"]["note"].is_null(), "{}", lines[4]);
    // Without evolution, every record of another version is SCHEMA_MISMATCH.
    let lines = run("none");
    let codes: Vec<&Value> = lines.iter().map(|l| &l["dlq"]["code"]).collect();
    assert_eq!(
        codes,
        [
            &Value::Null,
            &json!("SCHEMA_MISMATCH"),
            &json!("SCHEMA_MISMATCH"),
            &json!("SCHEMA_MISMATCH"),
            &Value::Null
        ]
    );
}
