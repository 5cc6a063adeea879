//! Records in the Confluent wire format (issue 31), end to end: the bytes come from
//! confluent-kafka's own serializers (`tests/py/confluent_serialize.py`) against the local
//! Confluent-compatible registry of deploy/local, go through a standalone Kafka broker and a
//! `floe run` worker into an Iceberg table that PyIceberg reads; the DLQ is checked code by code.
//!
//! - `json_sr`: the subject's latest version creates the table; bad framing, an unknown id and an
//!   id of another subject go to the DLQ with their codes; a second, compatible version of the
//!   subject evolves the table (`evolution = "compatible"`), registered and produced while the
//!   registry is down: the worker waits for it (nothing lost, nothing in the DLQ) and delivers
//!   once it is back.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::*;
use floe::dlq::LocalDlq;
use floe::tools::sample_events::event_json;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::ClientConfig;

/// A registry of the test's own on `port`, its state in `data` (so a restart keeps the ids).
struct OwnRegistry {
    child: Child,
}

impl OwnRegistry {
    fn start(port: u16, data: &Path) -> OwnRegistry {
        let server = std::env::var("FLOE_TEST_SCHEMA_REGISTRY_SERVER").expect(
            "the schema registry is needed: eval \"$(deploy/local/schema-registry.sh env)\" (scripts/test.sh does it)",
        );
        let mut child = Command::new(python())
            .arg(server)
            .args(["--port", &port.to_string(), "--quiet", "--data"])
            .arg(data)
            .env_remove("FLOE_SCHEMA_REGISTRY_BASIC_AUTH")
            .env_remove("FLOE_SCHEMA_REGISTRY_BEARER_TOKEN")
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert!(line.contains("listening"), "{line:?}");
        OwnRegistry { child }
    }

    fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for OwnRegistry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The records serialized by confluent-kafka's serializer for `format` with `schema` under
/// `subject` (registered by the serializer).
fn serialize(
    url: &str,
    subject: &str,
    format: &str,
    schema: &Path,
    records: &[String],
) -> Vec<Vec<u8>> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/py/confluent_serialize.py");
    let mut child = Command::new(python())
        .arg(script)
        .args([url, subject, format])
        .arg(schema)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    {
        let mut stdin = child.stdin.take().unwrap();
        for r in records {
            writeln!(stdin, "{r}").unwrap();
        }
    }
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "serializer: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| {
            (0..l.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(&l[i..i + 2], 16).unwrap())
                .collect()
        })
        .collect()
}

fn schema_id(frame: &[u8]) -> u32 {
    assert_eq!(frame[0], 0, "magic byte");
    u32::from_be_bytes(frame[1..5].try_into().unwrap())
}

fn produce(bootstrap: &str, records: &[(u64, Vec<u8>)]) {
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

/// The event JSON Schema with `extra` string properties.
fn event_schema(dir: &Path, name: &str, extra: &[&str]) -> PathBuf {
    let mut doc: serde_json::Value =
        serde_json::from_str(floe::tools::quickstart::EVENT_SCHEMA).unwrap();
    for p in extra {
        doc["properties"][p] = serde_json::json!({"type": "string"});
    }
    let path = dir.join(name);
    std::fs::write(&path, doc.to_string()).unwrap();
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_sr_is_delivered_dead_lettered_evolved_and_waits_out_a_registry_outage() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let url = format!("http://127.0.0.1:{port}");
    let data = dir.path().join("registry.json");
    let registry = OwnRegistry::start(port, &data);
    let subject = unique_name("events-value");
    let v1 = event_schema(dir.path(), "v1.json", &[]);
    let good: Vec<String> = (0..200)
        .map(|id| event_json(id, SEED, BASE_MS, 3))
        .collect();
    let frames = serialize(&url, &subject, "json_sr", &v1, &good);
    let id1 = schema_id(&frames[0]);
    let other = serialize(
        &url,
        &unique_name("other-value"),
        "json_sr",
        &event_schema(dir.path(), "other.json", &["title"]),
        &[event_json(202, SEED, BASE_MS, 3)],
    );
    assert_ne!(schema_id(&other[0]), id1);
    let json = event_json(201, SEED, BASE_MS, 3);
    let mut unknown = vec![0u8];
    unknown.extend_from_slice(&2_000_000_000u32.to_be_bytes());
    unknown.extend_from_slice(json.as_bytes());
    let mut not_json = frames[0][..5].to_vec();
    not_json.extend_from_slice(b"{\"id\": 203,");
    let mut magic = frames[0].clone();
    magic[0] = 1;
    let mut phase1: Vec<(u64, Vec<u8>)> = (0..200).zip(frames).collect();
    phase1.extend([
        (200, magic),
        (201, unknown),
        (202, other[0].clone()),
        (203, not_json),
        (204, event_json(204, SEED, BASE_MS, 3).into_bytes()),
    ]);
    let expected_codes: BTreeMap<u64, String> = [
        (200, "DESERIALIZATION_ERROR"),
        (201, "INVALID_SCHEMA"),
        (202, "SCHEMA_MISMATCH"),
        (203, "DESERIALIZATION_ERROR"),
        (204, "DESERIALIZATION_ERROR"),
    ]
    .into_iter()
    .map(|(id, c)| (id, c.to_string()))
    .collect();

    let broker = Broker::start();
    let file = format!(
        "file = \"{}/config/event.schema.json\"",
        env!("CARGO_MANIFEST_DIR")
    );
    let config = config_toml(dir.path(), &broker.bootstrap, "w1", 4)
        .replacen(
            &file,
            &format!(
                "registry_url = \"{url}\"\n  subject = \"{subject}\"\n  evolution = \"compatible\""
            ),
            1,
        )
        .replacen("format = \"json\"", "format = \"json_sr\"", 1);
    let worker = Worker::start_with(dir.path(), "w1", &config);
    produce(&broker.bootstrap, &phase1);
    let (rows, dead) = wait_delivered(dir.path(), 205, Duration::from_secs(90)).await;
    assert_eq!((rows, dead), (200, 5), "{}", log_of(dir.path(), "w1"));

    // Version 2 adds an optional field; it is registered, then the registry goes down before
    // the worker meets it.
    let v2 = event_schema(dir.path(), "v2.json", &["note"]);
    let with_note: Vec<String> = (300..400)
        .map(|id| {
            let mut e: serde_json::Value =
                serde_json::from_str(&event_json(id, SEED, BASE_MS, 3)).unwrap();
            e["note"] = format!("n{id}").into();
            e.to_string()
        })
        .collect();
    let frames2 = serialize(&url, &subject, "json_sr", &v2, &with_note);
    let id2 = schema_id(&frames2[0]);
    assert_ne!(id2, id1);
    registry.kill();
    produce(
        &broker.bootstrap,
        &(300..400).zip(frames2).collect::<Vec<_>>(),
    );
    // The worker meets the new id, cannot look it up, and restarts from the table's checkpoints.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while !log_of(dir.path(), "w1").contains("schema registry unavailable") {
        assert!(
            std::time::Instant::now() < deadline,
            "no outage logged:\n{}",
            log_of(dir.path(), "w1")
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(
        delivered(dir.path()).await,
        (200, 5),
        "nothing delivered, nothing dead-lettered during the outage"
    );
    let _registry = OwnRegistry::start(port, &data);
    let (rows, dead) = wait_delivered(dir.path(), 305, Duration::from_secs(120)).await;
    assert!(worker.terminate().success(), "{}", log_of(dir.path(), "w1"));
    assert_eq!((rows, dead), (300, 5), "{}", log_of(dir.path(), "w1"));

    let ids: Vec<u64> = (0..200).chain(300..400).collect();
    let table = read_with_pyiceberg(dir.path(), &ids);
    assert_eq!(table["rows"], 300);
    assert_eq!(table["distinct_ids"], 300);
    let sample = table["sample"].as_object().unwrap();
    let delivered_ids: BTreeSet<u64> = sample.keys().map(|k| k.parse().unwrap()).collect();
    assert_eq!(delivered_ids, ids.iter().copied().collect());
    for id in 300..400u64 {
        assert_eq!(sample[&id.to_string()]["note"], format!("n{id}"), "{id}");
    }
    assert_eq!(sample["7"]["note"], serde_json::Value::Null);
    let entries = LocalDlq::new(dir.path().join("dlq"), "it")
        .read_published()
        .unwrap();
    let codes: BTreeMap<u64, String> = entries
        .iter()
        .map(|e| {
            (
                e.key.clone().unwrap().parse().unwrap(),
                e.error_code.clone(),
            )
        })
        .collect();
    assert_eq!(codes, expected_codes);
    // Each entry names the schema id its record carries.
    let named: BTreeMap<u64, String> = entries
        .iter()
        .map(|e| {
            (
                e.key.clone().unwrap().parse().unwrap(),
                e.schema_version.clone(),
            )
        })
        .collect();
    assert_eq!(named[&201], "schema id 2000000000");
    assert_eq!(named[&202], format!("schema id {}", schema_id(&other[0])));
    assert_eq!(named[&203], format!("schema id {id1}"));

    // `floe channel describe` names the subject, the channel's schema id (the table's current
    // one) and the ids applied.
    let out = Command::new(env!("CARGO_BIN_EXE_floe"))
        .args(["channel", "describe", "it", "--json", "--config"])
        .arg(dir.path().join("w1.toml"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let d: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let d = if d.is_array() { &d[0] } else { &d };
    assert_eq!(d["subject"], subject.as_str(), "{d}");
    assert_eq!(d["schema_id"], id2.to_string(), "{d}");
    let applied: Vec<&str> = d["schema_history"]
        .as_array()
        .unwrap_or_else(|| panic!("{d}"))
        .iter()
        .map(|v| v["schema_id_applied"].as_str().unwrap())
        .collect();
    assert_eq!(applied, [id1.to_string(), id2.to_string()], "{d}");
}
