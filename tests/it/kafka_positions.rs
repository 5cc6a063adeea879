//! What `floe run` does when a Kafka partition no longer holds the records after its
//! checkpoint: retention deleted them while floe was down. The real binary, the standalone
//! Kafka-protocol broker (`floe-mock-kafka`: librdkafka's mock cluster keeps 5 MiB of record
//! batches per partition and deletes the oldest beyond that, as retention does), SQLite leases
//! and an SQL catalog.

use crate::common;

use std::time::Duration;

use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::ClientConfig;

use common::*;
use floe::model::ShardId;
use floe::source::kafka::{KafkaSource, KafkaSourceConfig};

/// Records still held by the broker, over the 4 partitions of `events`.
async fn held(bootstrap: &str) -> (u64, Vec<(i64, i64)>) {
    let source = KafkaSource::try_new(KafkaSourceConfig::new(bootstrap, "events")).unwrap();
    let mut marks = Vec::new();
    for p in 0..4 {
        marks.push(
            source
                .watermarks(&ShardId::kafka_partition(p))
                .await
                .unwrap(),
        );
    }
    (marks.iter().map(|(l, h)| (h - l) as u64).sum(), marks)
}

/// Starts worker `w2` on `bootstrap` and waits for it to exit 78 (`why_not`: the failure if it
/// keeps running); returns its log.
async fn refused_at_start(dir: &std::path::Path, bootstrap: &str, why_not: &str) -> String {
    let mut w2 = Worker::start(dir, bootstrap, "w2");
    let status = w2.wait_exit(Duration::from_secs(60)).await.expect(why_not);
    let log = log_of(dir, "w2");
    assert_eq!(status.code(), Some(78), "{log}");
    log
}

/// Exit 78 naming the partition and the offsets gone; with `on_position_lost = "skip"`, the
/// worker resumes at the oldest offsets the broker holds, logs and counts the skipped ranges,
/// and delivers every record still held exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_deleted_by_retention_while_floe_was_down_stop_the_worker_or_are_skipped_on_request(
) {
    let broker = Broker::start();
    let dir = tempfile::tempdir().unwrap();
    let first = 2_000u64;
    produce(&broker.bootstrap, 0, first);
    let w1 = Worker::start(dir.path(), &broker.bootstrap, "w1");
    let (rows, dlq) = wait_delivered(dir.path(), first, Duration::from_secs(120)).await;
    assert_eq!(rows + dlq, first, "{}", log_of(dir.path(), "w1"));
    assert!(w1.terminate().success());

    // While floe is down: enough records that the broker deletes the oldest of every partition,
    // including ones floe never read.
    let total = 200_000u64;
    produce(&broker.bootstrap, first, total);
    let (still_held, marks) = held(&broker.bootstrap).await;
    assert!(
        marks.iter().all(|(low, _)| *low as u64 > first),
        "retention did not reach past the checkpoints: {marks:?}"
    );

    let log = refused_at_start(
        dir.path(),
        &broker.bootstrap,
        "the worker went on without the deleted records",
    )
    .await;
    assert!(
        log.contains("were deleted by retention before floe read them")
            && log.contains("of partition")
            && log.contains("on_position_lost = "),
        "{log}"
    );
    assert_eq!(
        delivered(dir.path()).await,
        (rows, dlq),
        "nothing committed"
    );
    // `floe channel describe` shows the lost positions instead of a lag.
    let described = std::process::Command::new(env!("CARGO_BIN_EXE_floe"))
        .args(["channel", "describe", "it", "--config"])
        .arg(dir.path().join("w2.toml"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&described.stdout);
    assert!(
        text.contains("LOST") && text.contains("position lost: offsets"),
        "{text}{}",
        String::from_utf8_lossy(&described.stderr)
    );

    let port = free_port();
    let toml = config_toml(dir.path(), &broker.bootstrap, "w3", 4)
        .replace(
            "metrics_address = \"off\"",
            &format!("metrics_address = \"127.0.0.1:{port}\""),
        )
        .replace(
            "  initial_position = \"earliest\"\n",
            "  initial_position = \"earliest\"\n  on_position_lost = \"skip\"\n",
        );
    assert!(toml.contains("on_position_lost"));
    let w3 = Worker::start_with(dir.path(), "w3", &toml);
    let (rows3, dlq3) =
        wait_delivered(dir.path(), first + still_held, Duration::from_secs(180)).await;
    let log = log_of(dir.path(), "w3");
    assert_eq!(rows3 + dlq3, first + still_held, "{log}");
    assert!(log.contains("skipping ahead to offset"), "{log}");
    let scrape = get(&format!("127.0.0.1:{port}"), "/metrics").unwrap().1;
    let skipped = sum(&samples(&scrape), "floe_source_offsets_skipped_total", &[]);
    let never_read = total - first - still_held;
    assert_eq!(skipped as u64, never_read, "{scrape}");
    assert!(w3.terminate().success());
    // Exactly once: no record delivered twice after the skip.
    let (rows_end, dlq_end) = delivered(dir.path()).await;
    assert_eq!(rows_end + dlq_end, first + still_held);
}

/// The topic was deleted and recreated under the same name while floe was down (here: a new
/// broker serving `events`, the same name and partitions), and its new log grew past the
/// checkpoints. Its records carry CreateTime two hours after floe's last commit, as they would
/// after two hours of downtime. The worker refuses to read the new log from the old log's
/// offsets (exit 78, naming the partition) and commits nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_topic_recreated_while_floe_was_down_is_not_read_from_the_old_checkpoints() {
    let dir = tempfile::tempdir().unwrap();
    let old = Broker::start();
    let first = 2_000u64;
    produce(&old.bootstrap, 0, first);
    let w1 = Worker::start(dir.path(), &old.bootstrap, "w1");
    let (rows, dlq) = wait_delivered(dir.path(), first, Duration::from_secs(120)).await;
    assert_eq!(rows + dlq, first, "{}", log_of(dir.path(), "w1"));
    assert!(w1.terminate().success());
    drop(old);

    let new = Broker::start();
    let later = floe::time::now_ms() + 2 * 3_600_000;
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", &new.bootstrap)
        .create()
        .unwrap();
    for id in 0..4_000u64 {
        let payload = floe::tools::sample_events::event_json(id, 1, later, 3);
        let key = id.to_string();
        let mut record = BaseRecord::to("events")
            .key(&key)
            .payload(&payload)
            .timestamp(later);
        while let Err((_, r)) = producer.send(record) {
            record = r;
            producer.poll(Duration::from_millis(10));
        }
    }
    producer.flush(Duration::from_secs(30)).unwrap();

    let log = refused_at_start(
        dir.path(),
        &new.bootstrap,
        "the worker read the recreated topic from the old checkpoints",
    )
    .await;
    assert!(
        log.contains("deleted and recreated under the same name") && log.contains("of partition"),
        "{log}"
    );
    assert_eq!(
        delivered(dir.path()).await,
        (rows, dlq),
        "nothing committed"
    );
}
