//! Schemas from the Glue Schema Registry (issue 5), end to end on the local emulator's Glue: a
//! registry, a schema and its versions are created with the Rust SDK, records go through a
//! standalone Kafka broker and a `floe run` worker into an Iceberg table that PyIceberg reads,
//! and the DLQ is checked code by code.
//! - `record.format = "json"` with `glue_schema_arn` (the latest version, recorded at activation);
//! - `record.format = "gsr_json"`: the channel's version (plain and zlib) is delivered, another
//!   version of the schema is `SCHEMA_MISMATCH`, an id Glue does not know and plain JSON are
//!   `INVALID_SCHEMA`;
//! - a schema Glue does not have, or one in Avro: `floe channel create` records the channel FAILED.

mod common;

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
    let glue = aws_clients(endpoint).await.glue();
    let registry = REGISTRY;
    if let Err(e) = glue.create_registry().registry_name(registry).send().await {
        let exists = e
            .as_service_error()
            .is_some_and(|s| s.is_already_exists_exception());
        assert!(exists, "create_registry: {e:?}");
    }
    let v1 = floe::tools::quickstart::EVENT_SCHEMA.to_string();
    let created = glue
        .create_schema()
        .registry_id(RegistryId::builder().registry_name(registry).build())
        .schema_name(unique_name("events"))
        .data_format(DataFormat::Json)
        .compatibility(Compatibility::None)
        .schema_definition(&v1)
        .send()
        .await
        .unwrap();
    let arn = created.schema_arn().unwrap().to_string();
    let mut v2: serde_json::Value = serde_json::from_str(&v1).unwrap();
    v2["properties"]["note"] = serde_json::json!({"type": "string"});
    let registered = glue
        .register_schema_version()
        .schema_id(SchemaId::builder().schema_arn(&arn).build())
        .schema_definition(v2.to_string())
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
        let endpoint = aws_endpoint();
        let schema = register_event_schema(&endpoint).await;
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
/// recorded with the channel, and the worker's `/metrics` once everything was committed.
struct Delivered {
    ids: BTreeSet<u64>,
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
        let e = floe::channel::create(&config, "it", &store, &aws)
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
    let status = (0..600)
        .find_map(|_| {
            std::thread::sleep(Duration::from_millis(100));
            worker.child.try_wait().unwrap()
        })
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
fn exit_code_of(mut worker: Worker) -> i32 {
    let status = (0..600)
        .find_map(|_| {
            std::thread::sleep(Duration::from_millis(100));
            worker.child.try_wait().unwrap()
        })
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
        assert_eq!(exit_code_of(worker), 78, "{what}: {}", log_of(dir, "w2"));
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
    let warned = (0..300).any(|_| {
        std::thread::sleep(Duration::from_millis(100));
        log_of(dir, "w3").contains("channel[0].schema.version differs")
    });
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
    use floe::gsr::{RegistryClient, RegistryError, LOOKUP_BUDGET};
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
