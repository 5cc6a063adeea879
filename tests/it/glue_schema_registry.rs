//! Schemas from the Glue Schema Registry (issue 5), end to end on the local emulator's Glue: a
//! registry, a schema and its versions are created with the Rust SDK, records go through a
//! standalone Kafka broker and a `floe run` worker into an Iceberg table that PyIceberg reads,
//! and the DLQ is checked code by code.
//! - `record.format = "json"` with `glue_schema_arn` (the latest version, recorded at activation);
//! - `record.format = "gsr_json"`: the channel's version (plain and zlib) is delivered, another
//!   version of the schema is `SCHEMA_MISMATCH`, an id Glue does not know and plain JSON are
//!   `INVALID_SCHEMA`;
//! - `record.format = "gsr_avro"`: Avro datums written by apache-avro behind the header (plain and
//!   zlib) land value for value (timestamp-micros partition, pre-epoch included, nullable unions
//!   in both orders, a nested record, an enum); a second version adding an optional field evolves
//!   the table (`evolution = "compatible"`) while version 1 keeps landing; an unknown version is
//!   `INVALID_SCHEMA`, a datum that does not decode `DESERIALIZATION_ERROR`, a null partition
//!   `MISSING_PARTITION_VALUE`;
//! - a schema Glue does not have, or one in Avro: `floe channel create` records the channel FAILED.

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::Path;
use std::time::Duration;

use aws_sdk_glue::types::{Compatibility, DataFormat, RegistryId, SchemaId};
use common::*;
use floe::dlq::LocalDlq;
use floe::lease::BatchStore;
use floe::tools::sample_events::event_json;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::ClientConfig;
use uuid::Uuid;

struct GlueSchema {
    arn: String,
    versions: Vec<Uuid>,
    endpoint: String,
}

impl GlueSchema {
    /// Deletes the schema (the emulator outlives the test; moto allows 1000 schemas).
    async fn delete(self) {
        let glue = aws_clients(&self.endpoint).await.glue();
        glue.delete_schema()
            .schema_id(SchemaId::builder().schema_arn(&self.arn).build())
            .send()
            .await
            .unwrap();
    }
}

/// Registry of these tests. One for all runs: moto (like Glue's default quota) allows 10
/// registries per account and region, and the emulator outlives test runs.
const REGISTRY: &str = "floe-it";

/// A schema (unique name) in [`REGISTRY`] whose version 1 is the Event schema and version 2 adds
/// an optional field.
async fn register_event_schema(endpoint: &str) -> GlueSchema {
    let v1 = floe::tools::quickstart::EVENT_SCHEMA.to_string();
    let mut v2: serde_json::Value = serde_json::from_str(&v1).unwrap();
    v2["properties"]["note"] = serde_json::json!({"type": "string"});
    register_schema(endpoint, DataFormat::Json, &v1, &v2.to_string()).await
}

/// A schema (unique name) in [`REGISTRY`] of data format `format` with versions `v1` and `v2`.
async fn register_schema(endpoint: &str, format: DataFormat, v1: &str, v2: &str) -> GlueSchema {
    let glue = aws_clients(endpoint).await.glue();
    let registry = REGISTRY;
    if let Err(e) = glue.create_registry().registry_name(registry).send().await {
        let exists = e
            .as_service_error()
            .is_some_and(|s| s.is_already_exists_exception());
        assert!(exists, "create_registry: {e:?}");
    }
    let created = glue
        .create_schema()
        .registry_id(RegistryId::builder().registry_name(registry).build())
        .schema_name(unique_name("events"))
        .data_format(format)
        .compatibility(Compatibility::None)
        .schema_definition(v1)
        .send()
        .await
        .unwrap();
    let arn = created.schema_arn().unwrap().to_string();
    let registered = glue
        .register_schema_version()
        .schema_id(SchemaId::builder().schema_arn(&arn).build())
        .schema_definition(v2)
        .send()
        .await
        .unwrap();
    let ids = [
        created.schema_version_id().unwrap(),
        registered.schema_version_id().unwrap(),
    ];
    GlueSchema {
        arn,
        versions: ids.iter().map(|s| Uuid::parse_str(s).unwrap()).collect(),
        endpoint: endpoint.to_string(),
    }
}

/// The test config of `common`, with the schema from Glue and the AWS endpoint.
fn glue_config(dir: &Path, bootstrap: &str, endpoint: &str, format: &str, schema: &str) -> String {
    let text = config_toml(dir, bootstrap, "w1", 4);
    let file = format!(
        "file = \"{}/config/event.schema.json\"",
        env!("CARGO_MANIFEST_DIR")
    );
    assert!(text.contains(&file) && text.contains("format = \"json\""));
    let text = text.replacen(&file, schema, 1).replacen(
        "format = \"json\"",
        &format!("format = \"{format}\""),
        1,
    );
    format!("[aws]\nregion = \"us-east-1\"\nendpoint_url = \"{endpoint}\"\n\n{text}")
}

fn produce_payloads(bootstrap: &str, records: &[(u64, Vec<u8>)]) {
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("linger.ms", "5")
        .create()
        .expect("producer");
    for (id, payload) in records {
        let key = id.to_string();
        while producer
            .send(BaseRecord::to("events").key(&key).payload(payload))
            .is_err()
        {
            producer.poll(Duration::from_millis(10));
        }
        producer.poll(Duration::ZERO);
    }
    producer.flush(Duration::from_secs(30)).expect("flush");
}

fn frame(version: Uuid, zlib: bool, json: &[u8]) -> Vec<u8> {
    gsr_frame(version, zlib, json)
}

/// A registered schema, a broker and a channel config (metrics served on `metrics`).
struct Run {
    dir: tempfile::TempDir,
    broker: Broker,
    config: String,
    metrics: String,
}

impl Run {
    async fn new(format: &str, schema_lines: impl Fn(&GlueSchema) -> String) -> (GlueSchema, Run) {
        let schema = register_event_schema(&aws_endpoint()).await;
        Run::on(schema, format, schema_lines)
    }

    /// A run of a channel on `schema` (already registered).
    fn on(
        schema: GlueSchema,
        format: &str,
        schema_lines: impl Fn(&GlueSchema) -> String,
    ) -> (GlueSchema, Run) {
        let endpoint = aws_endpoint();
        let dir = tempfile::tempdir().unwrap();
        let broker = Broker::start();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let metrics = format!("127.0.0.1:{port}");
        let config = glue_config(
            dir.path(),
            &broker.bootstrap,
            &endpoint,
            format,
            &schema_lines(&schema),
        )
        .replacen(
            "metrics_address = \"off\"",
            &format!("metrics_address = \"{metrics}\""),
            1,
        );
        let run = Run {
            dir,
            broker,
            config,
            metrics,
        };
        (schema, run)
    }

    /// Runs one worker until every record is in the table or the DLQ.
    async fn deliver(&self, records: &[(u64, Vec<u8>)]) -> Delivered {
        deliver(
            self.dir.path(),
            &self.config,
            &self.broker.bootstrap,
            &self.metrics,
            records,
        )
        .await
    }
}

/// What a run delivered: the ids PyIceberg reads, the DLQ codes by id, the schema version id
/// recorded with the channel, the worker's `/metrics` once everything was committed, and what
/// PyIceberg read (tests/py/read_table.py, every id sampled).
struct Delivered {
    ids: BTreeSet<u64>,
    table: serde_json::Value,
    codes: BTreeMap<u64, String>,
    recorded: Option<String>,
    metrics: String,
}

fn scrape(addr: &str) -> Option<String> {
    use std::io::Read;
    let mut stream = std::net::TcpStream::connect(addr).ok()?;
    write!(
        stream,
        "GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    Some(response)
}

async fn deliver(
    dir: &Path,
    config: &str,
    bootstrap: &str,
    metrics_address: &str,
    records: &[(u64, Vec<u8>)],
) -> Delivered {
    let worker = Worker::start_with(dir, "w1", config);
    produce_payloads(bootstrap, records);
    let total = records.len() as u64;
    let (rows, dead) = wait_delivered(dir, total, Duration::from_secs(120)).await;
    let metrics = scrape(metrics_address)
        .unwrap_or_else(|| panic!("no /metrics; worker log:\n{}", log_of(dir, "w1")));
    assert!(worker.terminate().success(), "{}", log_of(dir, "w1"));
    assert_eq!(rows + dead, total, "log:\n{}", log_of(dir, "w1"));
    let ids: Vec<u64> = records.iter().map(|(id, _)| *id).collect();
    let table = read_with_pyiceberg(dir, &ids);
    assert_eq!(table["rows"], table["distinct_ids"]);
    let delivered: BTreeSet<u64> = table["sample"]
        .as_object()
        .unwrap()
        .keys()
        .map(|k| k.parse().unwrap())
        .collect();
    assert_eq!(table["rows"], delivered.len() as u64);
    let codes = LocalDlq::new(dir.join("dlq"), "it")
        .read_published()
        .unwrap()
        .into_iter()
        .map(|e| (e.key.unwrap().parse().unwrap(), e.error_code))
        .collect();
    let store = floe::lease::SqlLeaseStore::open_sqlite(dir.join("leases.sqlite"))
        .await
        .unwrap();
    let state = store.get_channel_state("it").await.unwrap().unwrap();
    Delivered {
        ids: delivered,
        table,
        codes,
        recorded: state.schema_version_id,
        metrics,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_json_with_a_glue_schema_arn_is_delivered_with_the_version_recorded() {
    // The latest version at activation (2) is the channel's; version 2 adds an optional field.
    let (schema, run) = Run::new("json", |s| format!("glue_schema_arn = \"{}\"", s.arn)).await;
    let records: Vec<(u64, Vec<u8>)> = (0..300)
        .map(|id| (id, event_json(id, SEED, BASE_MS, 3).into_bytes()))
        .chain([(300, frame(schema.versions[1], false, b"{}"))])
        .collect();
    let d = run.deliver(&records).await;
    assert_eq!(d.ids, (0..300).collect());
    assert_eq!(
        d.codes,
        [(300, "DESERIALIZATION_ERROR".to_string())].into(),
        "GSR bytes on a json channel"
    );
    assert_eq!(d.recorded, Some(schema.versions[1].to_string()));
    schema.delete().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gsr_json_delivers_the_channels_version_and_dead_letters_the_others() {
    let (schema, run) = Run::new("gsr_json", |s| {
        format!("glue_schema_arn = \"{}\"\n  version = 1", s.arn)
    })
    .await;
    let (v1, v2, unknown) = (schema.versions[0], schema.versions[1], Uuid::new_v4());
    let mut expected_codes = BTreeMap::new();
    let records: Vec<(u64, Vec<u8>)> = (0..400u64)
        .map(|id| {
            let json = event_json(id, SEED, BASE_MS, 3).into_bytes();
            let (payload, code) = match id % 10 {
                3 => (frame(v2, false, &json), Some("SCHEMA_MISMATCH")),
                4 => (frame(v2, true, &json), Some("SCHEMA_MISMATCH")),
                7 => (frame(unknown, false, &json), Some("INVALID_SCHEMA")),
                9 => (json, Some("INVALID_SCHEMA")),
                5 => (frame(v1, true, &json), None),
                _ => (frame(v1, false, &json), None),
            };
            if let Some(code) = code {
                expected_codes.insert(id, code.to_string());
            }
            (id, payload)
        })
        .collect();
    let d = run.deliver(&records).await;
    let good: BTreeSet<u64> = (0..400)
        .filter(|id| !expected_codes.contains_key(id))
        .collect();
    assert_eq!(d.ids, good);
    assert_eq!(d.codes, expected_codes);
    assert_eq!(d.recorded, Some(v1.to_string()));
    // Versions 2 of ids ending in 3 and 4: 80 records, counted once committed.
    assert!(
        d.metrics
            .lines()
            .any(|l| l == "floe_schema_mismatch_total{channel=\"it\"} 80"),
        "{}",
        d.metrics
    );
    schema.delete().await;
}

/// Version 1 of the `gsr_avro` test schema: a timestamp-micros partition field (nullable, so that
/// a null one reaches the value rules), a nullable union, a nested record with a union in the
/// other order, and an enum.
const AVRO_V1: &str = r#"{"type": "record", "name": "Event", "namespace": "floe.it", "fields": [
  {"name": "id", "type": "long"},
  {"name": "event_time", "type": ["null", {"type": "long", "logicalType": "timestamp-micros"}]},
  {"name": "amount", "type": ["null", "double"], "default": null},
  {"name": "user", "type": {"type": "record", "name": "User", "fields": [
    {"name": "name", "type": "string"},
    {"name": "age", "type": ["int", "null"]}]}},
  {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["CLICK", "VIEW", "BUY"]}}
]}"#;

/// Version 2: version 1 with an added optional field `note`.
fn avro_v2() -> String {
    avro_v1_with(serde_json::json!({"name": "note", "type": ["null", "string"], "default": null}))
}

/// Version 1 with the field `added` appended.
fn avro_v1_with(added: serde_json::Value) -> String {
    let mut v2: serde_json::Value = serde_json::from_str(AVRO_V1).unwrap();
    v2["fields"].as_array_mut().unwrap().push(added);
    v2.to_string()
}

/// Event `id` written by apache-avro under `schema` (`note` only under version 2; no
/// `event_time` with `null_partition`), and the row PyIceberg reads back for it.
fn avro_event(
    schema: &apache_avro::Schema,
    id: u64,
    v2: bool,
    null_partition: bool,
) -> (Vec<u8>, serde_json::Value) {
    use apache_avro::types::Value as AV;
    use serde_json::json;
    // Micros never zero (Python's isoformat drops a zero fraction), pre-epoch included.
    let micros = if id % 10 == 5 {
        -86_400_000_000 * 365 - 123_457 - id as i64
    } else {
        BASE_MS * 1000 + id as i64 * 1_234_567_891 + 1
    };
    let iso = iso_micros(micros);
    let kinds = ["CLICK", "VIEW", "BUY"];
    let kind = (id % 3) as usize;
    let amount = (!id.is_multiple_of(4)).then_some(id as f64 * 0.25 - 3.125);
    let age = (!id.is_multiple_of(3)).then_some(20 + id as i32);
    let note = (v2 && id % 4 != 1).then(|| format!("n{id} ☃"));
    let mut fields = vec![
        ("id".to_string(), AV::Long(id as i64)),
        (
            "event_time".to_string(),
            match null_partition {
                true => AV::Union(0, Box::new(AV::Null)),
                false => AV::Union(1, Box::new(AV::TimestampMicros(micros))),
            },
        ),
        (
            "amount".to_string(),
            match amount {
                Some(a) => AV::Union(1, Box::new(AV::Double(a))),
                None => AV::Union(0, Box::new(AV::Null)),
            },
        ),
        (
            "user".to_string(),
            AV::Record(vec![
                ("name".to_string(), AV::String(format!("u{id}"))),
                (
                    "age".to_string(),
                    match age {
                        Some(a) => AV::Union(0, Box::new(AV::Int(a))),
                        None => AV::Union(1, Box::new(AV::Null)),
                    },
                ),
            ]),
        ),
        (
            "kind".to_string(),
            AV::Enum(kind as u32, kinds[kind].to_string()),
        ),
    ];
    if v2 {
        fields.push((
            "note".to_string(),
            match &note {
                Some(n) => AV::Union(1, Box::new(AV::String(n.clone()))),
                None => AV::Union(0, Box::new(AV::Null)),
            },
        ));
    }
    let bytes = apache_avro::to_avro_datum(schema, AV::Record(fields)).unwrap();
    let row = json!({
        "id": id,
        "event_time": iso,
        "amount": amount,
        "user": {"name": format!("u{id}"), "age": age},
        "kind": kinds[kind],
        "note": note,
    });
    (bytes, row)
}

/// `micros` since the epoch as Python's `datetime.isoformat()` prints a UTC timestamp with a
/// non-zero fraction (days to civil date: H. Hinnant's `civil_from_days`).
fn iso_micros(micros: i64) -> String {
    let (days, in_day) = (
        micros.div_euclid(86_400_000_000),
        micros.rem_euclid(86_400_000_000),
    );
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    let (s, frac) = (in_day / 1_000_000, in_day % 1_000_000);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{frac:06}+00:00",
        s / 3600,
        s / 60 % 60,
        s % 60
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gsr_avro_delivers_every_value_evolves_the_table_and_dead_letters_bad_records() {
    let schema = register_schema(&aws_endpoint(), DataFormat::Avro, AVRO_V1, &avro_v2()).await;
    let (schema, run) = Run::on(schema, "gsr_avro", |s| {
        format!(
            "glue_schema_arn = \"{}\"\n  version = 1\n  evolution = \"compatible\"",
            s.arn
        )
    });
    let (v1, v2, unknown) = (schema.versions[0], schema.versions[1], Uuid::new_v4());
    let s1 = apache_avro::Schema::parse_str(AVRO_V1).unwrap();
    let s2 = apache_avro::Schema::parse_str(&avro_v2()).unwrap();
    let mut rows = BTreeMap::new();
    let mut expected_codes = BTreeMap::new();
    let records: Vec<(u64, Vec<u8>)> = (0..200u64)
        .map(|id| {
            let (payload, code) = match id % 10 {
                // Version 2 (plain and zlib) among version 1's records, before and after.
                2 | 3 => {
                    let (bytes, row) = avro_event(&s2, id, true, false);
                    rows.insert(id, row);
                    (frame(v2, id % 10 == 3, &bytes), None)
                }
                6 => {
                    let (bytes, _) = avro_event(&s1, id, false, false);
                    (frame(unknown, false, &bytes), Some("INVALID_SCHEMA"))
                }
                // A varint that never ends: not an Avro datum.
                7 => (frame(v1, false, &[0x80; 3]), Some("DESERIALIZATION_ERROR")),
                8 => {
                    let (bytes, _) = avro_event(&s1, id, false, true);
                    (
                        frame(v1, id % 20 == 8, &bytes),
                        Some("MISSING_PARTITION_VALUE"),
                    )
                }
                n => {
                    let (bytes, row) = avro_event(&s1, id, false, false);
                    rows.insert(id, row);
                    (frame(v1, n == 1 || n == 5, &bytes), None)
                }
            };
            if let Some(code) = code {
                expected_codes.insert(id, code.to_string());
            }
            (id, payload)
        })
        .collect();
    let d = run.deliver(&records).await;
    assert_eq!(d.codes, expected_codes);
    assert_eq!(d.ids, rows.keys().copied().collect());
    let sample = d.table["sample"].as_object().unwrap();
    for (id, row) in &rows {
        assert_eq!(&sample[&id.to_string()], row, "id {id}");
    }
    let types = &d.table["schema"];
    assert_eq!(types["event_time"], "timestamptz");
    assert_eq!(types["amount"], "double");
    assert_eq!(types["user.age"], "int");
    assert_eq!(types["kind"], "string");
    assert_eq!(types["note"], "string", "the table evolved to version 2");
    let required: BTreeSet<&str> = d.table["required"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert_eq!(
        required,
        ["id", "event_time", "user", "user.name", "kind"].into()
    );
    assert_eq!(d.recorded, Some(v1.to_string()));
    schema.delete().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gsr_avro_records_of_an_older_version_take_the_channels_defaults() {
    // The channel's version is the latest (2), which adds a required field with a default:
    // version 1's records are read through it (Avro 1.11 "Schema Resolution").
    let v2 = avro_v1_with(serde_json::json!({"name": "tag", "type": "string", "default": "none"}));
    let schema = register_schema(&aws_endpoint(), DataFormat::Avro, AVRO_V1, &v2).await;
    let (schema, run) = Run::on(schema, "gsr_avro", |s| {
        format!(
            "glue_schema_arn = \"{}\"\n  evolution = \"compatible\"",
            s.arn
        )
    });
    let s1 = apache_avro::Schema::parse_str(AVRO_V1).unwrap();
    let mut rows = BTreeMap::new();
    let records: Vec<(u64, Vec<u8>)> = (0..20u64)
        .map(|id| {
            let (bytes, mut row) = avro_event(&s1, id, false, false);
            let row_fields = row.as_object_mut().unwrap();
            row_fields.remove("note");
            row_fields.insert("tag".into(), "none".into());
            rows.insert(id, row);
            (id, frame(schema.versions[0], id % 2 == 1, &bytes))
        })
        .collect();
    let d = run.deliver(&records).await;
    assert_eq!(d.codes, BTreeMap::new());
    let sample = d.table["sample"].as_object().unwrap();
    for (id, row) in &rows {
        assert_eq!(&sample[&id.to_string()], row, "id {id}");
    }
    assert_eq!(d.recorded, Some(schema.versions[1].to_string()));
    schema.delete().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schema_glue_does_not_have_fails_the_channel_at_create() {
    let endpoint = aws_endpoint();
    let schema = register_event_schema(&endpoint).await;
    let avro = aws_clients(&endpoint)
        .await
        .glue()
        .create_schema()
        .registry_id(RegistryId::builder().registry_name(REGISTRY).build())
        .schema_name(unique_name("avro"))
        .data_format(DataFormat::Avro)
        .compatibility(Compatibility::None)
        .schema_definition(r#"{"type":"record","name":"e","fields":[{"name":"id","type":"long"}]}"#)
        .send()
        .await
        .unwrap();
    let avro = GlueSchema {
        arn: avro.schema_arn().unwrap().to_string(),
        versions: Vec::new(),
        endpoint: endpoint.clone(),
    };
    let dir = tempfile::tempdir().unwrap();
    for (n, (schema_lines, reason)) in [
        (
            format!("glue_schema_arn = \"{}-missing\"", schema.arn),
            "not found",
        ),
        (
            format!("glue_schema_arn = \"{}\"\n  version = 9", schema.arn),
            "not found",
        ),
        (
            format!("glue_schema_arn = \"{}\"", avro.arn),
            "data format AVRO",
        ),
    ]
    .iter()
    .enumerate()
    {
        let sub = dir.path().join(n.to_string());
        std::fs::create_dir_all(&sub).unwrap();
        let text = glue_config(&sub, "127.0.0.1:9", &endpoint, "json", schema_lines);
        let config = floe::config::Config::from_toml_str(&text, &sub).unwrap();
        let aws = floe::aws::AwsClients::load(&config.aws).await;
        let store = floe::lease::SqlLeaseStore::open_sqlite(sub.join("leases.sqlite"))
            .await
            .unwrap();
        let members = floe::channel::Members::default();
        let e = floe::channel::create(&config, &members, "it", &store, &aws)
            .await
            .unwrap_err();
        assert!(e.to_string().contains("FAILED"), "{e}");
        let state = store.get_channel_state("it").await.unwrap().unwrap();
        assert_eq!(state.state, floe::lease::ChannelStatus::Failed);
        let status_reason = state.status_reason.as_deref().unwrap();
        assert!(status_reason.contains(reason), "{state:?}");
        // One short line for operators: the Glue error code and message, no SDK Debug dump.
        assert!(
            !status_reason.contains('\n') && status_reason.len() < 600,
            "{status_reason}"
        );
        for debug in ["ServiceError", "raw:", "Response", "Number(", "(Latest)"] {
            assert!(!status_reason.contains(debug), "{status_reason}");
        }
        if *reason == "not found" {
            assert!(
                status_reason.contains("EntityNotFoundException: "),
                "{status_reason}"
            );
        }
    }
    // `floe run` on a channel never created: activation finds no schema, the channel is FAILED
    // and the worker exits with the reason.
    let sub = dir.path().join("run");
    std::fs::create_dir_all(&sub).unwrap();
    let text = glue_config(
        &sub,
        "127.0.0.1:9",
        &endpoint,
        "gsr_json",
        &format!("glue_schema_arn = \"{}-missing\"", schema.arn),
    );
    let mut worker = Worker::start_with(&sub, "w1", &text);
    let status = worker
        .wait_exit(Duration::from_secs(60))
        .await
        .expect("floe run exits");
    assert!(!status.success());
    let log = log_of(&sub, "w1");
    assert!(log.contains("FAILED") && log.contains("not found"), "{log}");
    let store = floe::lease::SqlLeaseStore::open_sqlite(sub.join("leases.sqlite"))
        .await
        .unwrap();
    let state = store.get_channel_state("it").await.unwrap().unwrap();
    assert_eq!(state.state, floe::lease::ChannelStatus::Failed, "{state:?}");
    schema.delete().await;
    avro.delete().await;
}

/// A Glue endpoint that answers every request with `AccessDeniedException`; returns its port.
fn glue_denying_access() -> u16 {
    use std::io::Read;
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { continue };
            let mut request = [0u8; 65536];
            let _ = conn.read(&mut request);
            let body = r#"{"__type":"AccessDeniedException","Message":"not authorized to perform glue:GetSchemaVersion"}"#;
            let _ = write!(
                conn,
                "HTTP/1.1 400 Bad Request\r\nx-amzn-errortype: AccessDeniedException\r\ncontent-type: application/x-amz-json-1.1\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    port
}

/// Plain JSON Event records with ids `ids`.
fn events(ids: std::ops::Range<u64>) -> Vec<(u64, Vec<u8>)> {
    ids.map(|id| (id, event_json(id, SEED, BASE_MS, 3).into_bytes()))
        .collect()
}

/// Runs the `floe` binary with `args`; returns (exit code, stdout, stderr).
fn floe_cli(args: &[&str]) -> (i32, String, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_floe"))
        .args(args)
        .output()
        .expect("run floe");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The channel's state as `floe channel describe --json` prints it.
fn described(config: &Path) -> serde_json::Value {
    let (code, out, err) = floe_cli(&[
        "channel",
        "describe",
        "it",
        "--json",
        "--config",
        config.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    if v.is_array() {
        v[0].clone()
    } else {
        v
    }
}

/// Waits up to 60 s for `worker` to exit; returns its exit code.
async fn exit_code_of(mut worker: Worker) -> i32 {
    let status = worker
        .wait_exit(Duration::from_secs(60))
        .await
        .expect("floe run exits");
    status.code().unwrap_or(-1)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_whose_glue_config_does_not_fit_exits_78_and_the_channel_stays_active() {
    let (schema, run) = Run::new("json", |s| format!("glue_schema_arn = \"{}\"", s.arn)).await;
    let other = register_event_schema(&aws_endpoint()).await;
    let dir = run.dir.path();
    let w1 = Worker::start_with(dir, "w1", &run.config);
    produce_payloads(&run.broker.bootstrap, &events(0..100));
    let (rows, _) = wait_delivered(dir, 100, Duration::from_secs(120)).await;
    assert_eq!(rows, 100, "{}", log_of(dir, "w1"));
    let second = run
        .config
        .replacen("id = \"w1\"", "id = \"w2\"", 1)
        .replacen(
            &format!("metrics_address = \"{}\"", run.metrics),
            "metrics_address = \"off\"",
            1,
        );
    assert_ne!(second, run.config);
    // (A) another schema ARN than the one recorded at activation; (C) a Glue that refuses this
    // worker (AccessDeniedException: moto has no IAM, so a canned Glue answers it).
    let endpoint_line = format!("endpoint_url = \"{}\"\n", aws_endpoint());
    let denied = format!(
        "{endpoint_line}\n[aws.endpoints]\nglue = \"http://127.0.0.1:{}\"\n",
        glue_denying_access()
    );
    let bad = [
        ("other-arn", second.replacen(&schema.arn, &other.arn, 1)),
        ("access-denied", second.replacen(&endpoint_line, &denied, 1)),
    ];
    for (what, text) in &bad {
        assert_ne!(text, &second, "{what}");
        let worker = Worker::start_with(dir, "w2", text);
        assert_eq!(
            exit_code_of(worker).await,
            78,
            "{what}: {}",
            log_of(dir, "w2")
        );
        let log = log_of(dir, "w2");
        assert!(log.contains("the channel stays"), "{what}: {log}");
        let state = described(&dir.join("w2.toml"));
        assert_eq!(state["state"], "ACTIVE", "{what}: {state}");
    }
    // Another version than the recorded one (2, the latest at activation): the worker warns and
    // runs on the recorded version.
    let arn_line = format!("glue_schema_arn = \"{}\"", schema.arn);
    let worker = Worker::start_with(
        dir,
        "w3",
        &second.replacen("id = \"w2\"", "id = \"w3\"", 1).replacen(
            &arn_line,
            &format!("{arn_line}\n  version = 1"),
            1,
        ),
    );
    let mut warned = false;
    for _ in 0..300 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        if log_of(dir, "w3").contains("channel[0].schema.version differs") {
            warned = true;
            break;
        }
    }
    let log = log_of(dir, "w3");
    assert!(worker.terminate().success(), "{log}");
    assert!(warned && log.contains("configured=1"), "{log}");
    // `floe channel create` with these configurations refuses (78) naming the key and changes
    // nothing: the channel stays ACTIVE.
    for (what, text) in &bad {
        let path = dir.join(format!("{what}.toml"));
        std::fs::write(&path, text).unwrap();
        let (code, _, err) = floe_cli(&[
            "channel",
            "create",
            "it",
            "--config",
            path.to_str().unwrap(),
        ]);
        assert_eq!(code, 78, "{what}: {err}");
        assert!(
            err.contains("channel[0].schema.glue_schema_arn"),
            "{what}: {err}"
        );
        assert_eq!(described(&path)["state"], "ACTIVE", "{what}");
    }
    // The healthy worker went on delivering.
    produce_payloads(&run.broker.bootstrap, &events(100..200));
    let (rows, _) = wait_delivered(dir, 200, Duration::from_secs(120)).await;
    assert_eq!(rows, 200, "{}", log_of(dir, "w1"));
    assert!(w1.terminate().success(), "{}", log_of(dir, "w1"));
    schema.delete().await;
    other.delete().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_glue_lookup_against_a_registry_that_never_answers_fails_within_the_bound() {
    use floe::registry::gsr::{RegistryClient, RegistryError, LOOKUP_BUDGET};
    // Accepts connections and never answers.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for conn in listener.incoming() {
            held.push(conn);
        }
    });
    let glue = aws_clients(&format!("http://127.0.0.1:{port}"))
        .await
        .glue();
    let arn = "arn:aws:glue:us-east-1:123456789012:schema/floe-it/never";
    let client = RegistryClient::glue(glue, arn);
    let started = std::time::Instant::now();
    let e = client.by_id(Uuid::new_v4()).await.unwrap_err();
    let took = started.elapsed();
    assert!(matches!(e, RegistryError::Unavailable(_)), "{e}");
    assert!(
        took <= LOOKUP_BUDGET + Duration::from_secs(2),
        "{took:?}: {e}"
    );
    let started = std::time::Instant::now();
    let e = client
        .by_arn(arn, floe::config::GlueSchemaVersion::Latest)
        .await
        .unwrap_err();
    assert!(e.is_retryable(), "{e}");
    assert!(started.elapsed() <= LOOKUP_BUDGET + Duration::from_secs(2));
}

/// A TCP proxy to `upstream` that can be switched off: then it closes every connection (open
/// ones too) as soon as it is accepted.
struct Proxy {
    port: u16,
    up: std::sync::Arc<std::sync::atomic::AtomicBool>,
    open: std::sync::Arc<std::sync::Mutex<Vec<std::net::TcpStream>>>,
}

impl Proxy {
    fn start(upstream: &str) -> Proxy {
        use std::net::{TcpListener, TcpStream};
        use std::sync::atomic::Ordering;
        let upstream = upstream.trim_start_matches("http://").to_string();
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let proxy = Proxy {
            port: listener.local_addr().unwrap().port(),
            up: Default::default(),
            open: Default::default(),
        };
        proxy.up.store(true, Ordering::SeqCst);
        let (up, open) = (proxy.up.clone(), proxy.open.clone());
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(client) = conn else { continue };
                if !up.load(Ordering::SeqCst) {
                    continue; // dropped: closed at once
                }
                let Ok(server) = TcpStream::connect(&upstream) else {
                    continue;
                };
                open.lock()
                    .unwrap()
                    .extend([client.try_clone().unwrap(), server.try_clone().unwrap()]);
                for (mut from, mut to) in [
                    (client.try_clone().unwrap(), server.try_clone().unwrap()),
                    (server, client),
                ] {
                    std::thread::spawn(move || {
                        let _ = std::io::copy(&mut from, &mut to);
                        let _ = to.shutdown(std::net::Shutdown::Both);
                    });
                }
            }
        });
        proxy
    }

    fn set_up(&self, up: bool) {
        self.up.store(up, std::sync::atomic::Ordering::SeqCst);
        if !up {
            for s in self.open.lock().unwrap().drain(..) {
                let _ = s.shutdown(std::net::Shutdown::Both);
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unavailable_registry_holds_records_back_instead_of_dead_lettering_them() {
    let proxy = Proxy::start(&aws_endpoint());
    let (schema, mut run) = Run::new("gsr_json", |s| {
        format!("glue_schema_arn = \"{}\"\n  version = 1", s.arn)
    })
    .await;
    let endpoint_line = format!("endpoint_url = \"{}\"\n", aws_endpoint());
    assert!(run.config.contains(&endpoint_line));
    run.config = run.config.replacen(
        &endpoint_line,
        &format!(
            "{endpoint_line}\n[aws.endpoints]\nglue = \"http://127.0.0.1:{}\"\n",
            proxy.port
        ),
        1,
    );
    let dir = run.dir.path();
    let (v1, v2) = (schema.versions[0], schema.versions[1]);
    let framed = |ids: std::ops::Range<u64>, version: Uuid| -> Vec<(u64, Vec<u8>)> {
        ids.map(|id| {
            (
                id,
                frame(version, false, event_json(id, SEED, BASE_MS, 3).as_bytes()),
            )
        })
        .collect()
    };
    let worker = Worker::start_with(dir, "w1", &run.config);
    produce_payloads(&run.broker.bootstrap, &framed(0..50, v1));
    let (rows, _) = wait_delivered(dir, 50, Duration::from_secs(120)).await;
    assert_eq!(rows, 50, "{}", log_of(dir, "w1"));
    // Glue goes away; a record of version 2 (not in the worker's cache) needs a lookup.
    proxy.set_up(false);
    produce_payloads(&run.broker.bootstrap, &framed(50..51, v2));
    produce_payloads(&run.broker.bootstrap, &framed(51..60, v1));
    tokio::time::sleep(Duration::from_secs(25)).await;
    let (rows, dead) = delivered(dir).await;
    let log = log_of(dir, "w1");
    assert_eq!(dead, 0, "no DLQ entry while Glue is unavailable: {log}");
    assert!(rows < 60, "record 50 held back: {log}");
    assert!(log.contains("could not be looked up"), "{log}");
    assert!(
        !log.contains("DispatchFailure {"),
        "no SDK Debug dump: {log}"
    );
    let metrics = scrape(&run.metrics).unwrap();
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("floe_schema_lookup_errors_total{channel=\"it\"}")),
        "{metrics}"
    );
    // The stall shows: record 50 was read 25 s ago and is not committed.
    let freshness: f64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("floe_data_freshness_seconds{channel=\"it\"} "))
        .unwrap_or_else(|| panic!("{metrics}"))
        .parse()
        .unwrap();
    assert!(freshness >= 10.0, "freshness {freshness}: {metrics}");
    // Glue is back: version 2 is a known version of the schema (SCHEMA_MISMATCH), the rest is
    // delivered.
    proxy.set_up(true);
    let (rows, dead) = wait_delivered(dir, 60, Duration::from_secs(120)).await;
    let log = log_of(dir, "w1");
    assert_eq!((rows, dead), (59, 1), "{log}");
    assert!(worker.terminate().success(), "{log}");
    let codes: BTreeMap<u64, String> = LocalDlq::new(dir.join("dlq"), "it")
        .read_published()
        .unwrap()
        .into_iter()
        .map(|e| (e.key.unwrap().parse().unwrap(), e.error_code))
        .collect();
    assert_eq!(codes, [(50, "SCHEMA_MISMATCH".to_string())].into());
    let ids: Vec<u64> = (0..60).collect();
    let table = read_with_pyiceberg(dir, &ids);
    assert_eq!(table["rows"], 59);
    assert_eq!(table["distinct_ids"], 59);
    schema.delete().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schema_arn_of_another_region_is_looked_up_in_its_region() {
    let endpoint = aws_endpoint();
    let schema = register_event_schema(&endpoint).await;
    let dir = tempfile::tempdir().unwrap();
    // The schema is in us-east-1; floe's other clients use eu-west-1.
    let text = glue_config(
        dir.path(),
        "127.0.0.1:9",
        &endpoint,
        "json",
        &format!("glue_schema_arn = \"{}\"", schema.arn),
    )
    .replacen("region = \"us-east-1\"", "region = \"eu-west-1\"", 1);
    assert!(text.contains("eu-west-1"));
    let config_path = dir.path().join("floe.toml");
    std::fs::write(&config_path, &text).unwrap();
    let config_arg = config_path.to_str().unwrap();
    let (code, _, err) = floe_cli(&["channel", "create", "it", "--config", config_arg]);
    assert_eq!(code, 0, "{err}");
    // `floe channel describe` shows the schema and the version recorded at activation.
    let (code, out, err) = floe_cli(&["channel", "describe", "it", "--config", config_arg]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("ACTIVE"), "{out}");
    let line = |key: &str| {
        out.lines()
            .find(|l| l.trim_start().starts_with(key))
            .unwrap_or_else(|| panic!("no {key} in:\n{out}"))
            .to_string()
    };
    assert!(line("glue_schema_arn").contains(&schema.arn), "{out}");
    assert!(
        line("schema_version_id").contains(&schema.versions[1].to_string()),
        "{out}"
    );
    // `version` changed on the active channel: create warns, the recorded version wins.
    let arn_line = format!("glue_schema_arn = \"{}\"", schema.arn);
    std::fs::write(
        &config_path,
        text.replacen(&arn_line, &format!("{arn_line}\n  version = 1"), 1),
    )
    .unwrap();
    let (code, _, err) = floe_cli(&["channel", "create", "it", "--config", config_arg]);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("channel[0].schema.version differs"), "{err}");
    assert_eq!(
        described(&config_path)["schema_version_id"],
        schema.versions[1].to_string()
    );
    schema.delete().await;
}
