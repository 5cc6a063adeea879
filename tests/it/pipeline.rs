//! End to end on the embedded defaults: a real Kafka-protocol broker (librdkafka's mock
//! cluster) → two workers → an hour-partitioned Iceberg table, read back independently with
//! PyIceberg (values, types, partition spec, checkpoints, snapshot summaries).

use crate::common;

use std::time::Duration;

use floe::source::kafka::embedded::EmbeddedKafka;
use floe::tools::sample_events::event_json;
use tokio_util::sync::CancellationToken;

use common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_topic_lands_in_iceberg_exactly_once_and_pyiceberg_reads_it() {
    let dir = tempfile::tempdir().unwrap();
    let kafka = EmbeddedKafka::start(3).unwrap();
    kafka.create_topic("events", 4).unwrap();
    let bootstrap = kafka.bootstrap_servers().to_string();
    let total = 3_000u64;
    produce(&bootstrap, 0, total);

    let shutdown = CancellationToken::new();
    let mut handles = Vec::new();
    for n in 1..=2 {
        let text = config_toml(dir.path(), &bootstrap, &format!("w{n}"), 6);
        let config = floe::config::Config::from_toml_str(&text, dir.path()).unwrap();
        let token = shutdown.clone();
        handles.push(tokio::spawn(
            async move { floe::app::run(config, token).await },
        ));
    }
    let (rows, dlq) = wait_delivered(dir.path(), total, Duration::from_secs(120)).await;
    shutdown.cancel();
    for h in handles {
        h.await.unwrap().unwrap();
    }
    let expected_bad = (0..total).filter(|id| bad_kind(*id).is_some()).count() as u64;
    assert_eq!(dlq, expected_bad, "every bad record is in the DLQ once");
    assert_eq!(rows, total - expected_bad);

    // The independent reader.
    let sample_ids = [0u64, 1, 2, 999, 2_998];
    let t = read_with_pyiceberg(dir.path(), &sample_ids);
    assert_eq!(t["rows"], rows);
    assert_eq!(t["distinct_ids"], rows, "no duplicate ids");
    let keys = dlq_keys(dir.path());
    let ids: Vec<i64> = Vec::new();
    let _ = ids;
    assert_eq!(keys.len() as u64, expected_bad);

    assert_types_and_partition_spec(&t);
    // Checkpoints: every partition's last offset, in the table.
    let props = &t["properties"];
    assert_eq!(props["floe.channel"], "it");
    assert_eq!(props["write.parquet.compression-codec"], "zstd");
    let offsets = checkpointed_offsets(props);
    assert_eq!(offsets, total, "checkpoints cover every produced offset");

    assert_snapshot_summaries(&t, rows);
    assert_sample_rows_equal_what_was_produced(&t, &sample_ids);
}

/// Types as the mapping table says; partition spec hour(event_time).
fn assert_types_and_partition_spec(t: &serde_json::Value) {
    let schema = &t["schema"];
    assert_eq!(schema["id"], "long");
    assert_eq!(schema["event_time"], "timestamptz");
    assert_eq!(schema["source"], "string");
    assert_eq!(schema["value"], "double");
    assert_eq!(schema["amount"], "decimal(38, 2)");
    assert_eq!(schema["user.country"], "string");
    assert_eq!(schema["user.tier"], "int");
    assert_eq!(schema["tags"], "list<string>");
    assert_eq!(schema["attrs"], "map<string, string>");
    let required: Vec<&str> = t["required"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert!(
        required.contains(&"id") && required.contains(&"event_time") && required.contains(&"value")
    );
    assert!(!required.contains(&"source"));

    // Partition spec hour(event_time).
    assert_eq!(
        t["partition_spec"],
        serde_json::json!([{"source": "event_time", "transform": "hour", "name": "event_time_hour"}])
    );
}

/// Snapshot summaries: added-records adds up; each floe snapshot names its batches, none twice.
fn assert_snapshot_summaries(t: &serde_json::Value, rows: u64) {
    let snaps = t["snapshots"].as_array().unwrap();
    let added: u64 = snaps
        .iter()
        .map(|s| {
            s["added-records"]
                .as_str()
                .map(|v| v.parse::<u64>().unwrap())
                .unwrap_or(0)
        })
        .sum();
    assert_eq!(added, rows);
    // The other standard summary totals match the data files the current snapshot references
    // (Iceberg spec, "Snapshot summary": engines and maintenance read them).
    let summed = |key: &str| -> u64 {
        snaps
            .iter()
            .map(|s| {
                s[key]
                    .as_str()
                    .map(|v| v.parse::<u64>().unwrap())
                    .unwrap_or(0)
            })
            .sum()
    };
    assert_eq!(
        summed("added-data-files"),
        t["data_files"].as_u64().unwrap()
    );
    assert_eq!(
        summed("added-files-size"),
        t["data_files_bytes"].as_u64().unwrap()
    );
    assert_eq!(t["data_file_records"].as_u64().unwrap(), rows);
    for s in snaps.iter().filter(|s| s["floe.batch-ids"].is_string()) {
        for key in ["total-records", "total-data-files", "total-files-size"] {
            assert!(s[key].is_string(), "snapshot summary lacks {key}: {s}");
        }
    }
    // Metadata files are gzip-compressed (write.metadata.compression-codec).
    assert!(
        t["metadata_location"]
            .as_str()
            .unwrap()
            .ends_with(".gz.metadata.json"),
        "{}",
        t["metadata_location"]
    );
    let mut batch_ids: Vec<&str> = snaps
        .iter()
        .filter_map(|s| s["floe.batch-ids"].as_str())
        .flat_map(|s| s.split(',').filter(|x| !x.is_empty()))
        .collect();
    let n = batch_ids.len();
    batch_ids.sort();
    batch_ids.dedup();
    assert_eq!(batch_ids.len(), n, "no batch committed twice");
}

/// Values: sample rows equal what was produced.
fn assert_sample_rows_equal_what_was_produced(t: &serde_json::Value, sample_ids: &[u64]) {
    for &id in sample_ids {
        if bad_kind(id).is_some() {
            continue;
        }
        let produced: serde_json::Value =
            serde_json::from_str(&event_json(id, SEED, BASE_MS, 3)).unwrap();
        let row = &t["sample"][id.to_string()];
        assert_eq!(row["id"], produced["id"]);
        assert_eq!(row["source"], produced["source"]);
        assert_eq!(row["value"].as_f64(), produced["value"].as_f64());
        assert_eq!(row["tags"], produced["tags"]);
        assert_eq!(row["user"]["country"], produced["user"]["country"]);
        // Timestamps: same instant, normalized to UTC.
        let ts = row["event_time"].as_str().unwrap();
        assert!(ts.ends_with("+00:00"), "timestamptz in UTC: {ts}");
        let amount = row["amount"].as_str().unwrap();
        let want = format!("{:.2}", produced["amount"].as_f64().unwrap());
        assert_eq!(amount, want, "decimal(38,2) exact");
    }
}
