//! Kafka tombstones (records with a null value: deletes in a compacted topic, Debezium's
//! follow-up to a delete) through `floe run`: skipped, never a row nor a DLQ entry, counted in
//! `floe_tombstones_total`, and passed by the checkpoint; an empty (non-null) value still goes
//! to the DLQ as `DESERIALIZATION_ERROR`. The real binary, the standalone Kafka-protocol broker
//! (`floe-mock-kafka`), SQLite leases and an SQL catalog.

use crate::common;

use std::path::Path;
use std::time::{Duration, Instant};

use floe::dlq::LocalDlq;
use floe::tools::sample_events::event_json;
use iceberg::{NamespaceIdent, TableIdent};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::ClientConfig;

use common::*;

const PARTITIONS: i32 = 4;
const PER_PARTITION: u64 = 100;
/// The one record with an empty (non-null) value: partition 1, its 11th record.
const EMPTY_ID: u64 = 1_010;

/// Record `i` of partition `p`: its id and value, `None` for a tombstone (every 4th record,
/// the last of each partition among them).
fn record(p: i32, i: u64) -> (u64, Option<Vec<u8>>) {
    let id = p as u64 * 1_000 + i;
    let value = match i % 4 {
        3 => None,
        _ if id == EMPTY_ID => Some(Vec::new()),
        _ => Some(event_json(id, SEED, BASE_MS, 3).into_bytes()),
    };
    (id, value)
}

fn produce_with_tombstones(bootstrap: &str) {
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("linger.ms", "5")
        .create()
        .unwrap();
    for p in 0..PARTITIONS {
        for i in 0..PER_PARTITION {
            let (id, value) = record(p, i);
            let key = id.to_string();
            let mut r = BaseRecord::<str, [u8]>::to("events")
                .key(key.as_str())
                .partition(p);
            if let Some(value) = &value {
                r = r.payload(value.as_slice());
            }
            while let Err((_, back)) = producer.send(r) {
                r = back;
                producer.poll(Duration::from_millis(10));
            }
            producer.poll(Duration::ZERO);
        }
    }
    producer.flush(Duration::from_secs(30)).unwrap();
}

/// The offsets the table's `floe.checkpoints` property covers (last offset + 1, summed over
/// the partitions); 0 before the first commit.
async fn checkpointed(dir: &Path) -> u64 {
    let Some(catalog) = sql_catalog(dir).await else {
        return 0;
    };
    let ident = TableIdent::new(NamespaceIdent::new("it".into()), "events".into());
    let Ok(table) = catalog.load_table(&ident).await else {
        return 0;
    };
    table
        .metadata()
        .properties()
        .get("floe.checkpoints")
        .map_or(0, |text| {
            checkpointed_offsets(&serde_json::json!({ "floe.checkpoints": text }))
        })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tombstones_are_skipped_counted_and_passed_by_the_checkpoint_never_dead_lettered() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start();
    produce_with_tombstones(&broker.bootstrap);
    let total = PARTITIONS as u64 * PER_PARTITION;
    let tombstones = (0..PARTITIONS)
        .flat_map(|p| (0..PER_PARTITION).map(move |i| record(p, i)))
        .filter(|(_, v)| v.is_none())
        .count() as u64;
    assert_eq!(tombstones, total / 4);

    let port = free_port();
    let toml = config_toml(dir.path(), &broker.bootstrap, "w1", 4).replace(
        "metrics_address = \"off\"",
        &format!("metrics_address = \"127.0.0.1:{port}\""),
    );
    let worker = Worker::start_with(dir.path(), "w1", &toml);
    // Every partition ends on a tombstone: the checkpoints reach the end of the log only if
    // the batch ranges cover the skipped tombstones.
    let deadline = Instant::now() + Duration::from_secs(120);
    while checkpointed(dir.path()).await < total && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let log = log_of(dir.path(), "w1");
    assert_eq!(
        checkpointed(dir.path()).await,
        total,
        "the checkpoints pass every offset, tombstones included\n{log}"
    );
    let (rows, dlq) = delivered(dir.path()).await;
    assert_eq!(
        rows,
        total - tombstones - 1,
        "a row per non-tombstone record"
    );
    assert_eq!(dlq, 1, "only the empty value is dead-lettered\n{log}");
    let entries = LocalDlq::new(dir.path().join("dlq"), "it")
        .read_published()
        .unwrap();
    assert_eq!(entries[0].key.as_deref(), Some("1010"));
    assert_eq!(entries[0].error_code, "DESERIALIZATION_ERROR");

    let scrape = samples(&get(&format!("127.0.0.1:{port}"), "/metrics").unwrap().1);
    assert_eq!(
        sum(&scrape, "floe_tombstones_total", &["channel=\"it\""]) as u64,
        tombstones
    );
    assert_eq!(sum(&scrape, "floe_records_skipped_total", &[]), 0.0);
    assert!(worker.terminate().success());
}
