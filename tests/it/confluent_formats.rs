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
//! - `avro` (AvroSerializer): version 1 of the subject is registered and used for some records,
//!   then version 2 (an added field with a default) before the worker starts, so the table is
//!   created from version 2; every value (timestamp partition field, `["null", T]`, nested
//!   record, array, map, decimal, enum) is read back by PyIceberg, each record once; the
//!   version-1 records carry the reader's default in the added column (Avro schema resolution).
//! - `protobuf` (ProtobufSerializer, message classes built at run time from a descriptor set):
//!   Timestamp partition field, proto3 `optional`, a nested message, repeated, map, enum (the
//!   value's name, `KIND_UNSPECIFIED` when unset, an undeclared number as its text), read back
//!   value by value, each record once.
//! - For both: bad framing (magic byte 1), an unknown schema id and garbage after a valid header
//!   go to the DLQ as `DESERIALIZATION_ERROR`, `INVALID_SCHEMA` and `DESERIALIZATION_ERROR`.
//! - For both, mid-run: a table created from version 1 evolves when version 2 — a field added
//!   the way each language makes it compatible (Avro: required with a `default`; Protobuf: an
//!   implicit-presence field) — is registered and its records arrive; version-1 records produced
//!   after it keep landing (Avro: with version 2's default, as when the table starts at version
//!   2; Protobuf: null).

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::*;
use floe::dlq::LocalDlq;
use floe::tools::sample_events::event_json;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::ClientConfig;

/// A registry of the test's own on `port`, its state in `data` (so a restart keeps the ids).
fn own_registry(port: u16, data: &Path) -> OwnRegistry {
    OwnRegistry::start(
        &[
            "--port",
            &port.to_string(),
            "--data",
            data.to_str().unwrap(),
        ],
        &[],
    )
}

/// The records serialized by confluent-kafka's serializer for `format` with `schema` under
/// `subject` (registered by the serializer).
pub(crate) fn serialize(
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
    // Fed from a thread: the serializer writes while it reads, and a pipe holds only 64 KiB.
    let mut stdin = child.stdin.take().unwrap();
    let input: Vec<String> = records.to_vec();
    let feeder = std::thread::spawn(move || {
        for r in input {
            writeln!(stdin, "{r}").unwrap();
        }
    });
    let out = child.wait_with_output().unwrap();
    feeder.join().unwrap();
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

pub(crate) fn produce(bootstrap: &str, records: &[(u64, Vec<u8>)]) {
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

/// The config of [`config_toml`] with the channel reading `format` records of `subject` from the
/// registry at `url`, `evolution = "compatible"`.
pub(crate) fn confluent_config(
    dir: &Path,
    bootstrap: &str,
    url: &str,
    subject: &str,
    format: &str,
) -> String {
    let file = format!(
        "file = \"{}/config/event.schema.json\"",
        env!("CARGO_MANIFEST_DIR")
    );
    config_toml(dir, bootstrap, "w1", 4)
        .replacen(
            &file,
            &format!(
                "registry_url = \"{url}\"\n  subject = \"{subject}\"\n  evolution = \"compatible\""
            ),
            1,
        )
        .replacen("format = \"json\"", &format!("format = \"{format}\""), 1)
}

/// Published DLQ entries' codes by record key (the id).
fn dlq_codes(dir: &Path) -> BTreeMap<u64, String> {
    LocalDlq::new(dir.join("dlq"), "it")
        .read_published()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e.key.clone().unwrap().parse().unwrap(),
                e.error_code.clone(),
            )
        })
        .collect()
}

/// Records with their keys (ids).
pub(crate) type Keyed = Vec<(u64, Vec<u8>)>;

/// Three bad records with ids `first..first + 3`, made from a good `frame` whose framing (magic
/// byte, schema id and, for Protobuf, message indexes) is its first `header` bytes: magic byte 1,
/// an id the registry does not have, and bytes no schema reads after the valid header (an
/// 11-byte varint). With the codes they get.
pub(crate) fn bad_frames(
    frame: &[u8],
    header: usize,
    first: u64,
) -> (Keyed, BTreeMap<u64, String>) {
    let mut magic = frame.to_vec();
    magic[0] = 1;
    let mut unknown = frame.to_vec();
    unknown[1..5].copy_from_slice(&2_000_000_000u32.to_be_bytes());
    let mut garbage = frame[..header].to_vec();
    garbage.extend_from_slice(&[0xff; 11]);
    let codes = [
        "DESERIALIZATION_ERROR",
        "INVALID_SCHEMA",
        "DESERIALIZATION_ERROR",
    ];
    let ids = first..first + 3;
    (
        ids.clone().zip([magic, unknown, garbage]).collect(),
        ids.zip(codes.map(String::from)).collect(),
    )
}

/// `BASE_MS` + `offset_us` as Python's `isoformat` of a UTC datetime prints it ("…+00:00"), or
/// in RFC 3339 with `Z` (protobuf's JSON form) when `zulu`. Offsets within a few days only.
fn iso(offset_us: i64, zulu: bool) -> String {
    let secs = 20 * 3600 + offset_us / 1_000_000; // BASE_MS is 2026-07-09T20:00:00Z
    let (day, s) = (9 + secs / 86_400, secs % 86_400);
    let frac = match offset_us % 1_000_000 {
        0 => String::new(),
        us => format!(".{us:06}"),
    };
    let zone = if zulu { "Z" } else { "+00:00" };
    format!(
        "2026-07-{day:02}T{:02}:{:02}:{:02}{frac}{zone}",
        s / 3600,
        s / 60 % 60,
        s % 60
    )
}

/// The event time of record `id` after `BASE_MS`, in µs: 7 minutes and `id` µs apart, so the
/// records span several hour partitions and a day boundary.
fn offset_us(id: u64) -> i64 {
    id as i64 * 420_000_000 + id as i64
}

/// A channel under test: its own registry (a subject of its own) and a directory for the
/// table, the DLQ and the worker.
pub(crate) struct FormatRig {
    pub(crate) dir: tempfile::TempDir,
    pub(crate) url: String,
    pub(crate) subject: String,
    _registry: OwnRegistry,
}

impl FormatRig {
    pub(crate) fn new() -> FormatRig {
        let dir = tempfile::tempdir().unwrap();
        let port = free_port();
        let registry = own_registry(port, &dir.path().join("registry.json"));
        FormatRig {
            dir,
            url: format!("http://127.0.0.1:{port}"),
            subject: unique_name("events-value"),
            _registry: registry,
        }
    }

    /// `records` serialized by the `format` serializer with the schema text `schema`, registered
    /// under the rig's subject.
    pub(crate) fn serialize(&self, format: &str, schema: &str, records: &[String]) -> Vec<Vec<u8>> {
        let path = self.dir.path().join(unique_name("schema"));
        std::fs::write(&path, schema).unwrap();
        serialize(&self.url, &self.subject, format, &path, records)
    }

    /// Runs a `floe run` worker on a `format` channel over `records` (keys = ids) until
    /// `rows` rows and `dead` DLQ entries are there; then reads the table with PyIceberg
    /// (`ids` sampled).
    async fn deliver(
        &self,
        format: &str,
        records: &[(u64, Vec<u8>)],
        (rows, dead): (u64, u64),
        ids: &[u64],
    ) -> serde_json::Value {
        let dir = self.dir.path();
        let broker = Broker::start();
        let config = confluent_config(dir, &broker.bootstrap, &self.url, &self.subject, format);
        let worker = Worker::start_with(dir, "w1", &config);
        produce(&broker.bootstrap, records);
        let got = wait_delivered(dir, rows + dead, Duration::from_secs(60)).await;
        assert!(worker.terminate().success(), "{}", log_of(dir, "w1"));
        assert_eq!(got, (rows, dead), "{}", log_of(dir, "w1"));
        let table = read_with_pyiceberg(dir, ids);
        assert_eq!(table["rows"], rows, "each record once");
        assert_eq!(table["distinct_ids"], rows, "each record once");
        assert_eq!(table["partition_spec"][0]["source"], "event_time");
        assert_eq!(table["schema"]["event_time"], "timestamptz");
        table
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_sr_is_delivered_dead_lettered_evolved_and_waits_out_a_registry_outage() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let url = format!("http://127.0.0.1:{port}");
    let data = dir.path().join("registry.json");
    let registry = own_registry(port, &data);
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
    let config = confluent_config(dir.path(), &broker.bootstrap, &url, &subject, "json_sr");
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
    let _registry = own_registry(port, &data);
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
    assert_eq!(dlq_codes(dir.path()), expected_codes);
    let entries = LocalDlq::new(dir.path().join("dlq"), "it")
        .read_published()
        .unwrap();
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

/// Avro schema version `v` (1 or 2: 2 adds `region`, a string with a default).
fn avro_event_schema(v: u8) -> String {
    let mut fields = serde_json::json!([
        {"name": "id", "type": "long"},
        {"name": "event_time", "type": {"type": "long", "logicalType": "timestamp-micros"}},
        {"name": "note", "type": ["null", "string"], "default": null},
        {"name": "address", "type": {"type": "record", "name": "Address", "fields": [
            {"name": "city", "type": "string"},
            {"name": "zip", "type": ["string", "null"]}
        ]}},
        {"name": "tags", "type": {"type": "array", "items": "string"}},
        {"name": "attrs", "type": {"type": "map", "values": "long"}},
        {"name": "amount", "type": {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2}},
        {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["A", "B", "C"]}}
    ]);
    if v == 2 {
        fields
            .as_array_mut()
            .unwrap()
            .push(serde_json::json!({"name": "region", "type": "string", "default": "eu"}));
    }
    serde_json::json!({"type": "record", "name": "Event", "namespace": "floe.e2e", "fields": fields})
        .to_string()
}

/// Avro record `id` in the serializer's JSON form (with `region` from version 2 on; the decimal
/// as a JSON number), and the row PyIceberg reads back (`region` the reader's default "eu" for a
/// version-1 record).
fn avro_event(id: u64, v: u8) -> (String, serde_json::Value) {
    let note = (!id.is_multiple_of(3)).then(|| format!("note {id}"));
    let zip = id.is_multiple_of(2).then(|| format!("{:04}", id * 7));
    let amount = format!(
        "{}{}.{:02}",
        if id % 4 == 1 { "-" } else { "" },
        id * 3,
        id % 100
    );
    let kind = ["A", "B", "C"][id as usize % 3];
    let mut record = serde_json::json!({
        "id": id,
        "event_time": BASE_MS * 1000 + offset_us(id),
        "note": note,
        "address": {"city": format!("city {id}"), "zip": zip},
        "tags": [format!("t{id}"), "u"],
        "attrs": {"a": id, "b": -(id as i64)},
        "amount": amount,
        "kind": kind,
    });
    let region = if v == 2 {
        record["region"] = format!("r{id}").into();
        format!("r{id}")
    } else {
        "eu".to_string()
    };
    let mut row = record.clone();
    row["event_time"] = iso(offset_us(id), false).into();
    row["region"] = region.into();
    let line = record.to_string().replace(
        &format!("\"amount\":\"{amount}\""),
        &format!("\"amount\":{amount}"),
    );
    (line, row)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn avro_is_delivered_once_with_every_value_and_older_records_take_the_readers_default() {
    let rig = FormatRig::new();
    let older_ids: Vec<u64> = (101..=110).collect();
    let (older, older_rows): (Vec<String>, Vec<_>) =
        older_ids.iter().map(|&id| avro_event(id, 1)).unzip();
    let v1_frames = rig.serialize("avro", &avro_event_schema(1), &older);
    let ids: Vec<u64> = (1..=40).collect();
    let (good, good_rows): (Vec<String>, Vec<_>) = ids.iter().map(|&id| avro_event(id, 2)).unzip();
    let frames = rig.serialize("avro", &avro_event_schema(2), &good);
    assert!(
        schema_id(&frames[0]) > schema_id(&v1_frames[0]),
        "v2 registered after v1"
    );
    let (bad, codes) = bad_frames(&frames[0], 5, 200);
    let mut records: Vec<(u64, Vec<u8>)> = ids.iter().copied().zip(frames).collect();
    records.extend(older_ids.iter().copied().zip(v1_frames));
    records.extend(bad);

    let all: Vec<u64> = ids.iter().chain(&older_ids).copied().collect();
    let table = rig.deliver("avro", &records, (50, 3), &all).await;
    // The table is version 2's: the added column is there.
    assert_eq!(table["schema"]["region"], "string", "{}", table["schema"]);
    assert_eq!(table["schema"]["amount"], "decimal(10, 2)");
    for (id, want) in all.iter().zip(good_rows.iter().chain(&older_rows)) {
        assert_eq!(table["sample"][id.to_string()], *want, "record {id}");
    }
    assert_eq!(dlq_codes(rig.dir.path()), codes);
}

/// `floe/e2e.proto` as a FileDescriptorSet in protobuf's JSON form: `Event` (the file's first
/// message, so the channel's; a second one follows) with a Timestamp, a proto3 `optional`, a
/// field of its nested message `Address`, a repeated field, a map and an enum. Version 2 adds
/// `string region = 8` (implicit presence: the most common compatible change of a `.proto`).
fn proto_event_schema(v: u8) -> String {
    let field = |name: &str, number: u32, ty: &str| serde_json::json!({"name": name, "number": number, "type": ty, "label": "LABEL_OPTIONAL"});
    let typed = |name: &str, number: u32, ty: &str, type_name: &str| {
        let mut f = field(name, number, ty);
        f["typeName"] = type_name.into();
        f
    };
    let mut note = field("note", 3, "TYPE_STRING");
    note["oneofIndex"] = 0.into();
    note["proto3Optional"] = true.into();
    let mut tags = field("tags", 5, "TYPE_STRING");
    tags["label"] = "LABEL_REPEATED".into();
    let mut attrs = typed("attrs", 6, "TYPE_MESSAGE", ".floe.e2e.Event.AttrsEntry");
    attrs["label"] = "LABEL_REPEATED".into();
    let kinds = ["KIND_UNSPECIFIED", "KIND_A", "KIND_B"];
    let mut event_fields = vec![
        field("id", 1, "TYPE_INT64"),
        typed(
            "event_time",
            2,
            "TYPE_MESSAGE",
            ".google.protobuf.Timestamp",
        ),
        note,
        typed("address", 4, "TYPE_MESSAGE", ".floe.e2e.Event.Address"),
        tags,
        attrs,
        typed("kind", 7, "TYPE_ENUM", ".floe.e2e.Kind"),
    ];
    if v == 2 {
        event_fields.push(field("region", 8, "TYPE_STRING"));
    }
    serde_json::json!({"file": [{
        "name": "floe/e2e.proto",
        "package": "floe.e2e",
        "syntax": "proto3",
        "dependency": ["google/protobuf/timestamp.proto"],
        "messageType": [
            {
                "name": "Event",
                "field": event_fields,
                "nestedType": [
                    {
                        "name": "AttrsEntry",
                        "options": {"mapEntry": true},
                        "field": [field("key", 1, "TYPE_STRING"), field("value", 2, "TYPE_INT64")],
                    },
                    {
                        "name": "Address",
                        "field": [field("city", 1, "TYPE_STRING"), field("zip", 2, "TYPE_STRING")],
                    },
                ],
                "oneofDecl": [{"name": "_note"}],
            },
            {"name": "Envelope", "field": [field("note", 1, "TYPE_STRING")]},
        ],
        "enumType": [{
            "name": "Kind",
            "value": kinds.iter().enumerate().map(|(i, k)| serde_json::json!({"name": k, "number": i})).collect::<Vec<_>>(),
        }],
    }]})
    .to_string()
}

/// Protobuf record `id` in protobuf's JSON mapping, and the row PyIceberg reads back: an unset
/// `optional` or message is null, an unset enum its value 0's name, an undeclared enum number its
/// text, an empty repeated field `[]`.
fn proto_event(id: u64) -> (String, serde_json::Value) {
    let mut record = serde_json::json!({
        "id": id,
        "event_time": iso(offset_us(id), true),
        "attrs": {"a": id, "b": -(id as i64)},
    });
    let mut row = serde_json::json!({
        "id": id,
        "event_time": iso(offset_us(id), false),
        "note": null,
        "address": null,
        "tags": [],
        "attrs": {"a": id, "b": -(id as i64)},
        "kind": "KIND_UNSPECIFIED",
    });
    if !id.is_multiple_of(3) {
        record["note"] = format!("note {id}").into();
        row["note"] = record["note"].clone();
    }
    if !id.is_multiple_of(4) {
        let address =
            serde_json::json!({"city": format!("city {id}"), "zip": format!("{:04}", id * 7)});
        record["address"] = address.clone();
        row["address"] = address;
    }
    if !id.is_multiple_of(5) {
        record["tags"] = serde_json::json!([format!("t{id}"), "u"]);
        row["tags"] = record["tags"].clone();
    }
    if id % 10 == 7 {
        // A number the enum does not declare (proto3 enums are open): stored as its text.
        record["kind"] = 7.into();
        row["kind"] = "7".into();
    } else if id % 3 != 1 {
        let kind = ["KIND_A", "KIND_B"][id as usize % 2];
        record["kind"] = kind.into();
        row["kind"] = kind.into();
    }
    (record.to_string(), row)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn protobuf_is_delivered_once_with_every_value() {
    let rig = FormatRig::new();
    let ids: Vec<u64> = (1..=40).collect();
    let (good, rows): (Vec<String>, Vec<_>) = ids.iter().map(|&id| proto_event(id)).unzip();
    let frames = rig.serialize("protobuf", &proto_event_schema(1), &good);
    // The file's first message: message indexes [0], the single byte 0.
    assert_eq!(frames[0][5], 0, "message indexes");
    let (bad, codes) = bad_frames(&frames[0], 6, 200);
    let mut records: Vec<(u64, Vec<u8>)> = ids.iter().copied().zip(frames).collect();
    records.extend(bad);

    let table = rig.deliver("protobuf", &records, (40, 3), &ids).await;
    assert_eq!(table["schema"]["kind"], "string", "{}", table["schema"]);
    assert_eq!(
        table["schema"]["address.city"], "string",
        "{}",
        table["schema"]
    );
    for (id, want) in ids.iter().zip(&rows) {
        assert_eq!(table["sample"][id.to_string()], *want, "record {id}");
    }
    assert_eq!(dlq_codes(rig.dir.path()), codes);
}

/// A table created from version 1 of the subject evolves when version 2 (one added field) is
/// registered and its records arrive mid-run; records of version 1 keep landing after it. `v2`
/// makes record `id` of version 2 and its row; `v1_row_after` is what a version-1 row reads in
/// the added column once the table has evolved.
async fn evolves_mid_run(
    format: &str,
    schemas: [String; 2],
    record: impl Fn(u64, u8) -> (String, serde_json::Value),
    region_of_late_v1: serde_json::Value,
) {
    let rig = FormatRig::new();
    let dir = rig.dir.path();
    let (v1_ids, v2_ids, late_ids) = (1..=20u64, 21..=40u64, 41..=50u64);
    let (v1, v1_rows): (Vec<String>, Vec<_>) = v1_ids.clone().map(|id| record(id, 1)).unzip();
    let v1_frames = rig.serialize(format, &schemas[0], &v1);
    let broker = Broker::start();
    let config = confluent_config(dir, &broker.bootstrap, &rig.url, &rig.subject, format);
    let worker = Worker::start_with(dir, "w1", &config);
    produce(
        &broker.bootstrap,
        &v1_ids.clone().zip(v1_frames).collect::<Vec<_>>(),
    );
    let got = wait_delivered(dir, 20, Duration::from_secs(60)).await;
    assert_eq!(got, (20, 0), "{}", log_of(dir, "w1"));

    // Version 2 is registered while the worker runs; its records and more of version 1 follow.
    let (v2, v2_rows): (Vec<String>, Vec<_>) = v2_ids.clone().map(|id| record(id, 2)).unzip();
    let v2_frames = rig.serialize(format, &schemas[1], &v2);
    let (late, late_rows): (Vec<String>, Vec<_>) = late_ids.clone().map(|id| record(id, 1)).unzip();
    let late_frames = rig.serialize(format, &schemas[0], &late);
    let mut phase2: Vec<(u64, Vec<u8>)> = v2_ids.clone().zip(v2_frames).collect();
    phase2.extend(late_ids.clone().zip(late_frames));
    produce(&broker.bootstrap, &phase2);
    let got = wait_delivered(dir, 50, Duration::from_secs(90)).await;
    assert!(worker.terminate().success(), "{}", log_of(dir, "w1"));
    assert_eq!(got, (50, 0), "{}", log_of(dir, "w1"));

    let ids: Vec<u64> = (1..=50).collect();
    let table = read_with_pyiceberg(dir, &ids);
    assert_eq!(table["rows"], 50, "each record once");
    assert_eq!(table["distinct_ids"], 50, "each record once");
    assert_eq!(table["schema"]["region"], "string", "{}", table["schema"]);
    for (id, mut want) in v1_ids.zip(v1_rows) {
        // Written before the column existed.
        want["region"] = serde_json::Value::Null;
        assert_eq!(table["sample"][id.to_string()], want, "record {id}");
    }
    for (id, want) in v2_ids.zip(v2_rows) {
        assert_eq!(table["sample"][id.to_string()], want, "record {id}");
    }
    for (id, mut want) in late_ids.zip(late_rows) {
        want["region"] = region_of_late_v1.clone();
        assert_eq!(table["sample"][id.to_string()], want, "record {id}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn avro_table_evolves_mid_run_when_a_field_with_a_default_is_added() {
    // Version 1 records after the evolution are read with version 2 as the reader schema: the
    // added field's default.
    evolves_mid_run(
        "avro",
        [avro_event_schema(1), avro_event_schema(2)],
        avro_event,
        "eu".into(),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn protobuf_table_evolves_mid_run_when_a_field_is_added() {
    // Protobuf has no reader-schema resolution: a version-1 record has no `region`, null.
    evolves_mid_run(
        "protobuf",
        [proto_event_schema(1), proto_event_schema(2)],
        |id, v| {
            let (mut record, mut row) = proto_event(id);
            if v == 2 {
                let mut r: serde_json::Value = serde_json::from_str(&record).unwrap();
                r["region"] = format!("r{id}").into();
                record = r.to_string();
                row["region"] = format!("r{id}").into();
            }
            (record, row)
        },
        serde_json::Value::Null,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn avro_worker_killed_mid_run_loses_and_doubles_nothing() {
    // Two workers; the first is SIGKILLed while it holds records of the second half not yet
    // committed: the second takes its leases over and resumes from the table's checkpoints.
    let rig = FormatRig::new();
    let dir = rig.dir.path();
    let ids: Vec<u64> = (1..=3000).collect();
    let records: Vec<String> = ids.iter().map(|&id| avro_event(id, 2).0).collect();
    let frames = rig.serialize("avro", &avro_event_schema(2), &records);
    let mut keyed: Vec<(u64, Vec<u8>)> = ids.iter().copied().zip(frames).collect();
    let second = keyed.split_off(1500);
    let broker = Broker::start();
    let config = confluent_config(dir, &broker.bootstrap, &rig.url, &rig.subject, "avro");
    let w1 = Worker::start_with(dir, "w1", &config);
    let w2 = Worker::start_with(dir, "w2", &config.replacen("id = \"w1\"", "id = \"w2\"", 1));
    produce(&broker.bootstrap, &keyed);
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while delivered(dir).await.0 == 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "{}",
            log_of(dir, "w1")
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    produce(&broker.bootstrap, &second);
    w1.signal("KILL");
    let got = wait_delivered(dir, 3000, Duration::from_secs(120)).await;
    assert!(w2.terminate().success(), "{}", log_of(dir, "w2"));
    assert_eq!(got, (3000, 0), "{}", log_of(dir, "w2"));
    let table = read_with_pyiceberg(dir, &[1, 1500, 1501, 3000]);
    assert_eq!(table["rows"], 3000, "nothing doubled");
    assert_eq!(table["distinct_ids"], 3000, "nothing lost");
    assert_eq!(table["sample"]["3000"], avro_event(3000, 2).1);
}
