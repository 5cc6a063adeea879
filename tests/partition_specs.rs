//! Partition specs beyond the hour (docs/partitioning.md): a channel whose table is partitioned
//! by `day(event_time)`, `identity(source)` and `bucket(4, id)` delivers every record once, and
//! every data file's partition tuple is what PyIceberg's own transforms give for its rows.

mod common;

use std::time::Duration;

use floe::source::kafka::embedded::EmbeddedKafka;
use floe::tools::sample_events::event_json;
use tokio_util::sync::CancellationToken;

use common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_multi_field_spec_writes_the_partition_values_pyiceberg_computes() {
    let dir = tempfile::tempdir().unwrap();
    let kafka = EmbeddedKafka::start(3).unwrap();
    kafka.create_topic("events", 4).unwrap();
    let bootstrap = kafka.bootstrap_servers().to_string();
    let total = 2_000u64;
    // 72 hours of event times: several days.
    produce_payloads(&bootstrap, 0..total, |id| {
        event_json(id, SEED, BASE_MS, 72).into_bytes()
    });

    let text = config_toml(dir.path(), &bootstrap, "w1", 6).replace(
        "partition_field = \"event_time\"",
        "partition = [\"day(event_time)\", \"identity(source)\", \"bucket(4, id)\"]",
    );
    let config = floe::config::Config::from_toml_str(&text, dir.path()).unwrap();
    let shutdown = CancellationToken::new();
    let token = shutdown.clone();
    let worker = tokio::spawn(async move { floe::app::run(config, token).await });
    let (rows, dlq) = wait_delivered(dir.path(), total, Duration::from_secs(120)).await;
    shutdown.cancel();
    worker.await.unwrap().unwrap();
    assert_eq!((rows, dlq), (total, 0));

    let (catalog, warehouse) = (
        dir.path().join("catalog.sqlite"),
        dir.path().join("warehouse"),
    );
    let p = run_py_reader(
        "read_partitions.py",
        &[
            catalog.as_os_str(),
            warehouse.as_os_str(),
            "it.events".as_ref(),
        ],
    );
    assert_eq!(
        p["spec"],
        serde_json::json!([
            {"source": "event_time", "transform": "day", "name": "event_time_day"},
            {"source": "source", "transform": "identity", "name": "source"},
            {"source": "id", "transform": "bucket[4]", "name": "id_bucket"},
        ])
    );
    assert_eq!(p["rows"], total);
    assert_eq!(p["mismatches"], serde_json::json!([]), "{p}");
    assert_eq!(p["mixed_files"], 0, "{p}");
    // 3+ days × sources × 4 buckets: many tuples, each in its own files.
    assert!(p["tuples"].as_u64().unwrap() >= 12, "{p}");
    let t = read_with_pyiceberg(dir.path(), &[]);
    assert_eq!(t["distinct_ids"], total, "every record once");
}
