//! Fan-out by a field for Avro and Protobuf records (docs/routing.md "Fan-out by a field"): the
//! bytes come from confluent-kafka's own serializers against a local Confluent-compatible
//! registry, go through a Kafka broker and one `floe run` worker whose member channels route
//! them by the `region` field of each record's writer schema into three tables; PyIceberg then
//! checks by id that every table holds exactly its records once, and the first table's member's
//! DLQ exactly the unroutable and unreadable records once, each with its code.
//!
//! - Avro: `region` is `["null", "string"]` after an array field (skipped to reach it); `null`
//!   and an unknown region are `UNROUTABLE`.
//! - Protobuf: `region` is an enum (routed by the value's name; an undeclared number by its
//!   text); unset, it reads as its default `REGION_UNSPECIFIED`, which no route names.
//! - For both: records of another subject's schema without `region` are `UNROUTABLE`; bad
//!   framing, an unknown schema id and garbage after a valid header are converted by the first
//!   table's member: `DESERIALIZATION_ERROR`, `INVALID_SCHEMA`, `DESERIALIZATION_ERROR`.

use crate::common;
use crate::confluent_formats::{
    bad_frames, confluent_config, produce, serialize, FormatRig, Keyed,
};
use crate::route_field::{landed_once, wait_everywhere, Fate};

use common::*;

/// The first good record id of another subject's schema, and the first bad frame's.
const OTHER: u64 = 200;
const BAD: u64 = 210;

/// Record `id`'s region (`None`: null or unset) and where a record of the channel's subject
/// with it lands.
fn region(id: u64) -> (Option<&'static str>, Fate) {
    match id % 10 {
        0..=2 => (Some("eu"), Fate::Row("events_eu")),
        3..=5 => (Some("us"), Fate::Row("events_us")),
        6 | 7 => (Some("ap"), Fate::Row("events_ap")),
        8 => (Some("mars"), Fate::Dead("events_ap", "UNROUTABLE")),
        _ => (None, Fate::Dead("events_ap", "UNROUTABLE")),
    }
}

/// The channel routed by `region` with `routes`, reading `format` records of the rig's subject.
fn routed_config(rig: &FormatRig, bootstrap: &str, format: &str, routes: &str) -> String {
    confluent_config(rig.dir.path(), bootstrap, &rig.url, &rig.subject, format).replacen(
        "  table = \"events\"\n",
        &format!("  table = \"{{route}}\"\n  route_field = \"region\"\n  routes = {routes}\n"),
        1,
    )
}

/// Produces `records` (keys = ids `0..total`), runs one worker until every record has landed
/// and checks each by `fate`.
async fn deliver_routed(
    rig: &FormatRig,
    format: &str,
    routes: &str,
    records: &[(u64, Vec<u8>)],
    fate: impl Fn(u64) -> Fate,
) {
    let d = rig.dir.path();
    let total = records.len() as u64;
    let broker = Broker::start();
    let worker = Worker::start_with(
        d,
        "w1",
        &routed_config(rig, &broker.bootstrap, format, routes),
    );
    produce(&broker.bootstrap, records);
    let seen = wait_everywhere(d, total).await;
    assert!(worker.terminate().success(), "{}", log_of(d, "w1"));
    assert_eq!(seen, total, "all delivered:\n{}", log_of(d, "w1"));
    landed_once(d, total, fate);
}

/// The records of ids `0..OTHER` (the rig's subject), `OTHER..BAD` (`other`'s frames, a
/// subject without `region`) and three bad frames after them; with the fate of each id.
fn all_records(
    good: Vec<Vec<u8>>,
    other: Vec<Vec<u8>>,
    header: usize,
) -> (Keyed, impl Fn(u64) -> Fate) {
    let (bad, codes) = bad_frames(&good[0], header, BAD);
    let mut records: Vec<(u64, Vec<u8>)> = (0..OTHER).zip(good).collect();
    records.extend((OTHER..BAD).zip(other));
    records.extend(bad);
    let fate = move |id: u64| match id {
        id if id < OTHER => region(id).1,
        id if id < BAD => Fate::Dead("events_ap", "UNROUTABLE"),
        id => Fate::Dead(
            "events_ap",
            match codes[&id].as_str() {
                "INVALID_SCHEMA" => "INVALID_SCHEMA",
                _ => "DESERIALIZATION_ERROR",
            },
        ),
    };
    (records, fate)
}

/// An Avro event schema named `name`, with `region` (`["null", "string"]`) after an array.
fn avro_schema(name: &str, with_region: bool) -> String {
    let mut fields = serde_json::json!([
        {"name": "id", "type": "long"},
        {"name": "event_time", "type": {"type": "long", "logicalType": "timestamp-micros"}},
        {"name": "tags", "type": {"type": "array", "items": "string"}},
        {"name": "value", "type": "double"}
    ]);
    if with_region {
        fields.as_array_mut().unwrap().insert(
            3,
            serde_json::json!({"name": "region", "type": ["null", "string"], "default": null}),
        );
    }
    serde_json::json!({"type": "record", "name": name, "namespace": "floe.route", "fields": fields})
        .to_string()
}

fn avro_record(id: u64, with_region: bool) -> String {
    let mut r = serde_json::json!({
        "id": id,
        "event_time": BASE_MS * 1000 + id as i64 * 1_000_000,
        "tags": [format!("t{id}")],
        "value": 1.5,
    });
    if with_region {
        r["region"] = region(id).0.into();
    }
    r.to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn avro_records_are_routed_by_their_writer_schemas_field() {
    let rig = FormatRig::new();
    let good: Vec<String> = (0..OTHER).map(|id| avro_record(id, true)).collect();
    let good = rig.serialize("avro", &avro_schema("Event", true), &good);
    let path = rig.dir.path().join("other.avsc");
    std::fs::write(&path, avro_schema("Other", false)).unwrap();
    let other: Vec<String> = (OTHER..BAD).map(|id| avro_record(id, false)).collect();
    let other = serialize(&rig.url, &unique_name("other-value"), "avro", &path, &other);
    let (records, fate) = all_records(good, other, 5);
    let routes = "{ eu = \"events_eu\", us = \"events_us\", ap = \"events_ap\" }";
    deliver_routed(&rig, "avro", routes, &records, fate).await;
}

/// `floe/route.proto` as a FileDescriptorSet in protobuf's JSON form: its first message
/// (`Event`, or `Other` without `region`) with a Timestamp, a repeated field, the enum `region`
/// and a double.
fn proto_schema(name: &str, with_region: bool) -> String {
    let field = |name: &str, number: u32, ty: &str| serde_json::json!({"name": name, "number": number, "type": ty, "label": "LABEL_OPTIONAL"});
    let mut event_time = field("event_time", 2, "TYPE_MESSAGE");
    event_time["typeName"] = ".google.protobuf.Timestamp".into();
    let mut tags = field("tags", 3, "TYPE_STRING");
    tags["label"] = "LABEL_REPEATED".into();
    let mut fields = vec![
        field("id", 1, "TYPE_INT64"),
        event_time,
        tags,
        field("value", 5, "TYPE_DOUBLE"),
    ];
    if with_region {
        let mut region = field("region", 4, "TYPE_ENUM");
        region["typeName"] = ".floe.route.Region".into();
        fields.insert(3, region);
    }
    let regions = ["REGION_UNSPECIFIED", "EU", "US", "AP", "MARS"];
    serde_json::json!({"file": [{
        "name": format!("floe/{}.proto", name.to_lowercase()),
        "package": "floe.route",
        "syntax": "proto3",
        "dependency": ["google/protobuf/timestamp.proto"],
        "messageType": [{"name": name, "field": fields}],
        "enumType": [{
            "name": "Region",
            "value": regions.iter().enumerate().map(|(i, r)| serde_json::json!({"name": r, "number": i})).collect::<Vec<_>>(),
        }],
    }]})
    .to_string()
}

/// Protobuf record `id` in protobuf's JSON mapping: `region` unset where [`region`] has none;
/// ids 17, 37, … carry the undeclared enum number 9 (routed by its text "9").
fn proto_record(id: u64, with_region: bool) -> String {
    let mut r = serde_json::json!({
        "id": id,
        "event_time": format!("2026-07-09T20:{:02}:{:02}Z", id / 60, id % 60),
        "tags": [format!("t{id}")],
        "value": 1.5,
    });
    if with_region && id % 20 == 17 {
        r["region"] = 9.into();
    } else if let (true, Some(region)) = (with_region, region(id).0) {
        r["region"] = region.to_uppercase().into();
    }
    r.to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn protobuf_records_are_routed_by_their_messages_field() {
    let rig = FormatRig::new();
    let good: Vec<String> = (0..OTHER).map(|id| proto_record(id, true)).collect();
    let good = rig.serialize("protobuf", &proto_schema("Event", true), &good);
    let path = rig.dir.path().join("other.json");
    std::fs::write(&path, proto_schema("Other", false)).unwrap();
    let other: Vec<String> = (OTHER..BAD).map(|id| proto_record(id, false)).collect();
    let other = serialize(
        &rig.url,
        &unique_name("other-value"),
        "protobuf",
        &path,
        &other,
    );
    let (records, fate) = all_records(good, other, 6);
    // Id 17, 37, …: region 9 (id % 10 == 7: an "ap" id), routed by its text to events_ap.
    let routes =
        "{ EU = \"events_eu\", US = \"events_us\", AP = \"events_ap\", \"9\" = \"events_ap\" }";
    deliver_routed(&rig, "protobuf", routes, &records, fate).await;
}
