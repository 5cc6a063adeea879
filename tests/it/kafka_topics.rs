//! A Kafka channel reading several topics into one table (`topic_pattern`), on librdkafka's
//! in-process mock cluster, read back with PyIceberg.

use crate::common;

use std::time::Duration;

use floe::source::kafka::embedded::EmbeddedKafka;
use floe::tools::sample_events::event_json;
use tokio_util::sync::CancellationToken;

use common::*;

/// Produces ids `ids` (keys = id) to `topic`, id `i` to partition `i % partitions`.
fn produce_to(kafka: &EmbeddedKafka, topic: &str, partitions: u64, ids: std::ops::Range<u64>) {
    let producer = kafka.producer().unwrap();
    for id in ids {
        let payload = event_json(id, SEED, BASE_MS, 3);
        producer
            .send(
                topic,
                Some((id % partitions) as i32),
                id.to_string().as_bytes(),
                payload.as_bytes(),
                None,
            )
            .unwrap();
    }
    producer.flush(Duration::from_secs(10)).unwrap();
}

/// Two topics matching the pattern land in one table; a third created while the worker runs is
/// picked up within `topic_refresh_interval` (5 s) and lands too; a topic that does not match is
/// never read. Every record is in the table exactly once, and the checkpoints name each shard
/// `<topic>:<partition>`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_topic_pattern_reads_matching_topics_into_one_table_including_one_created_later() {
    let dir = tempfile::tempdir().unwrap();
    let kafka = EmbeddedKafka::start(1).unwrap();
    kafka.create_topic("events.a", 2).unwrap();
    kafka.create_topic("events.b", 3).unwrap();
    kafka.create_topic("other", 2).unwrap();
    produce_to(&kafka, "events.a", 2, 0..300);
    produce_to(&kafka, "events.b", 3, 300..700);
    produce_to(&kafka, "other", 2, 10_000..10_200);

    let text = config_toml(dir.path(), kafka.bootstrap_servers(), "w1", 6).replace(
        "topic = \"events\"",
        "topic_pattern = \"events\\\\..*\"\n  topic_refresh_interval = \"5s\"",
    );
    let config_path = dir.path().join("w1.toml");
    std::fs::write(&config_path, &text).unwrap();
    let config = floe::config::Config::from_toml_str(&text, dir.path()).unwrap();
    let shutdown = CancellationToken::new();
    let worker = tokio::spawn({
        let token = shutdown.clone();
        async move { floe::app::run(config, token).await }
    });
    let (rows, _) = wait_delivered(dir.path(), 700, Duration::from_secs(60)).await;
    assert_eq!(rows, 700, "both matching topics delivered");

    // A matching topic created mid-run.
    kafka.create_topic("events.c", 2).unwrap();
    produce_to(&kafka, "events.c", 2, 700..900);
    let started = std::time::Instant::now();
    let (rows, dlq) = wait_delivered(dir.path(), 900, Duration::from_secs(45)).await;
    let took = started.elapsed();
    shutdown.cancel();
    worker.await.unwrap().unwrap();
    assert_eq!(
        (rows, dlq),
        (900, 0),
        "the new topic delivered, nothing in the DLQ"
    );
    // Discovery every 5 s (not the 30 s of one topic), then the table's data_freshness (10 s)
    // for the commit: 9 to 11 s measured; ~30 s with discovery every 30 s.
    assert!(
        took < Duration::from_secs(22),
        "new topic delivered in {took:?}"
    );

    let t = read_with_pyiceberg(dir.path(), &[0, 299, 300, 699, 700, 899, 10_000, 10_199]);
    assert_eq!(t["rows"], 900);
    assert_eq!(t["distinct_ids"], 900, "no duplicate ids");
    let sample = t["sample"].as_object().unwrap();
    for id in ["0", "299", "300", "699", "700", "899"] {
        assert!(
            sample.contains_key(id),
            "id {id} of a matching topic is in the table"
        );
    }
    for id in ["10000", "10199"] {
        assert!(!sample.contains_key(id), "id {id} of topic `other` is not");
    }
    let checkpoints: serde_json::Value =
        serde_json::from_str(t["properties"]["floe.checkpoints"].as_str().unwrap()).unwrap();
    let mut shards: Vec<&str> = checkpoints
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    shards.sort();
    assert_eq!(
        shards,
        [
            "events.a:0",
            "events.a:1",
            "events.b:0",
            "events.b:1",
            "events.b:2",
            "events.c:0",
            "events.c:1"
        ]
    );
    assert_eq!(checkpointed_offsets(&t["properties"]), 900);

    // `floe channel describe` asks each shard's topic for its lag: all delivered.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_floe"))
        .args(["channel", "describe", "it", "--json", "--config"])
        .arg(&config_path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let d: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let d = if d.is_array() { &d[0] } else { &d };
    let lags: Vec<(String, serde_json::Value)> = d["shards"]
        .as_array()
        .unwrap_or_else(|| panic!("{d}"))
        .iter()
        .map(|s| {
            (
                s["shard"].as_str().unwrap().to_string(),
                s["lag_records"].clone(),
            )
        })
        .collect();
    let want: Vec<(String, serde_json::Value)> = shards
        .iter()
        .map(|s| (s.to_string(), serde_json::json!(0)))
        .collect();
    assert_eq!(lags, want, "{d}");
}
