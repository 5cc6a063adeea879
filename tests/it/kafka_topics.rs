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

/// The first `toml` block of `docs/routing.md`, as written.
fn routing_page_example() -> String {
    let page =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/routing.md")).unwrap();
    let start = page.find("```toml\n").expect("a toml block") + "```toml\n".len();
    let end = start + page[start..].find("```").unwrap();
    page[start..end].to_string()
}

/// Issue 44: the example block of docs/routing.md, pasted into a channel, does what the text
/// around it says: a table per topic matching the pattern, holding the records the topics
/// already had. The test adds only what the block leaves out (the worker, lease store, record
/// format, schema, catalog, DLQ, a broker's address) and a short `data_freshness` for speed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_routing_page_example_reads_the_records_the_topics_already_hold() {
    let dir = tempfile::tempdir().unwrap();
    let kafka = EmbeddedKafka::start(1).unwrap();
    kafka.create_topic("events.a", 2).unwrap();
    kafka.create_topic("events.b", 2).unwrap();
    produce_to(&kafka, "events.a", 2, 0..100);
    produce_to(&kafka, "events.b", 2, 100..250);

    let block = routing_page_example();
    assert!(
        block.contains("bootstrap_servers = \"broker1:9092\""),
        "{block}"
    );
    let block = block
        .replace("broker1:9092", kafka.bootstrap_servers())
        .replace(
            "[channel.destination]\n",
            "[channel.destination]\ndata_freshness = \"10s\"\n",
        );
    let d = dir.path().display();
    let text = format!(
        r#"[worker]
id = "w1"
metrics_address = "off"
[lease_store]
kind = "sqlite"
path = "{d}/leases.sqlite"
[[channel]]
name = "it"
{block}
[channel.destination.catalog]
kind = "sql"
uri = "{d}/catalog.sqlite"
warehouse = "{d}/warehouse"
[channel.record]
format = "json"
[channel.schema]
file = "{manifest}/config/event.schema.json"
[channel.dlq]
kind = "local"
path = "{d}/dlq"
"#,
        manifest = env!("CARGO_MANIFEST_DIR")
    );
    let config = floe::config::Config::from_toml_str(&text, dir.path()).unwrap();
    let shutdown = CancellationToken::new();
    let worker = tokio::spawn({
        let token = shutdown.clone();
        async move { floe::app::run(config, token).await }
    });
    let counts = || async {
        let a = delivered_to(dir.path(), "lake", "events_a", "it.events.a").await;
        let b = delivered_to(dir.path(), "lake", "events_b", "it.events.b").await;
        (a.0 + b.0, a.1 + b.1)
    };
    let (rows, dlq) = poll_delivered(250, Duration::from_secs(60), counts).await;
    shutdown.cancel();
    worker.await.unwrap().unwrap();
    assert_eq!(
        (rows, dlq),
        (250, 0),
        "every record the topics held, a table per topic"
    );
}

/// Issue 44: a channel left at `initial_position = "activation_time"` on a topic whose records
/// all predate its activation reads nothing until new records come; the worker says so once
/// (not once per partition), with the activation time, instead of staying silent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_channel_whose_records_all_predate_its_activation_says_so_once() {
    let dir = tempfile::tempdir().unwrap();
    let kafka = EmbeddedKafka::start(1).unwrap();
    kafka.create_topic("events", 3).unwrap();
    produce_to(&kafka, "events", 3, 0..30);
    let text = config_toml(dir.path(), kafka.bootstrap_servers(), "w1", 6)
        .replace("initial_position = \"earliest\"\n", "");
    let worker = Worker::start_with(dir.path(), "w1", &text);
    let said = "every record of the partition predates the channel's activation time";
    let deadline = std::time::Instant::now() + Duration::from_secs(40);
    while !log_of(dir.path(), "w1").contains(said) && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // The three partitions are leased within a few seconds: each would have said it.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let status = worker.terminate();
    let log = log_of(dir.path(), "w1");
    assert_eq!(log.matches(said).count(), 1, "said once: {log}");
    let line = log.lines().find(|l| l.contains(said)).unwrap();
    assert!(
        line.contains("activation_time=")
            && line.contains("records=10")
            && line.contains("earliest"),
        "{line}"
    );
    assert!(status.success(), "{status:?}");
    assert_eq!(delivered(dir.path()).await, (0, 0), "nothing read");
}

/// Issue 44, item 1: a `topic_pattern` that matches nothing was silent. Both table kinds now say
/// so the same way: a warning naming `channel[i].source.topic_pattern` and the topics it was
/// matched against, `/readyz` 503 with `no_topic_matches` per channel, `floe_channel_topics` 0,
/// and `floe channel describe` printing the same line.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_topic_pattern_matching_nothing_is_said_by_the_log_readyz_metrics_and_describe() {
    let dir = tempfile::tempdir().unwrap();
    let kafka = EmbeddedKafka::start(1).unwrap();
    kafka.create_topic("events", 2).unwrap();
    let port = free_port();
    // Two channels of the tests' configuration, each selecting topics by a pattern that matches
    // nothing: one into a named table, one a table per topic.
    let base = config_toml(dir.path(), kafka.bootstrap_servers(), "w1", 6).replace(
        "metrics_address = \"off\"",
        &format!("metrics_address = \"127.0.0.1:{port}\""),
    );
    let (head, channel) = base.split_at(base.find("[[channel]]").unwrap());
    let channel = |name: &str, table: &str| {
        channel
            .replace("name = \"it\"", &format!("name = \"{name}\""))
            .replace(
                "topic = \"events\"",
                "topic_pattern = \"orders\\\\..*\"\n  topic_refresh_interval = \"5s\"",
            )
            .replace("table = \"events\"", &format!("table = \"{table}\""))
    };
    let toml = format!(
        "{head}{}{}",
        channel("named", "orders"),
        channel("pertopic", "{topic}")
    );
    let worker = Worker::start_with(dir.path(), "w1", &toml);
    let said = |i: usize| {
        format!(
            "no topic matches channel[{i}].source.topic_pattern = \"orders\\\\..*\" (matched against the cluster's 1 topics: events)"
        )
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(40);
    let addr = format!("127.0.0.1:{port}");
    let ready = loop {
        let log = log_of(dir.path(), "w1");
        let ready = get(&addr, "/readyz");
        if log.contains(&said(0)) && log.contains(&said(1)) {
            if let Some((503, body)) = &ready {
                let body: serde_json::Value = serde_json::from_str(body).unwrap();
                if body["channels"].as_array().is_some_and(|c| c.len() == 2) {
                    break body;
                }
            }
        }
        assert!(std::time::Instant::now() < deadline, "{ready:?}\n{log}");
        tokio::time::sleep(Duration::from_millis(300)).await;
    };
    for (i, name) in ["named", "pertopic"].iter().enumerate() {
        let c = ready["channels"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["channel"] == *name)
            .unwrap_or_else(|| panic!("{ready}"));
        assert_eq!(c["ready"], false, "{ready}");
        assert_eq!(c["no_topic_matches"], said(i).as_str(), "{ready}");
    }
    let (_, scrape) = get(&addr, "/metrics").unwrap();
    let s = samples(&scrape);
    for name in ["named", "pertopic"] {
        let key = format!("floe_channel_topics{{channel=\"{name}\"}}");
        assert_eq!(s.get(&key), Some(&0.0), "{key}\n{scrape}");
    }
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_floe"))
        .args(["channel", "describe", "--json", "--config"])
        .arg(dir.path().join("w1.toml"))
        .output()
        .unwrap();
    let described: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    for (i, name) in ["named", "pertopic"].iter().enumerate() {
        let d = described
            .as_array()
            .unwrap()
            .iter()
            .find(|d| d["channel"] == *name)
            .unwrap_or_else(|| panic!("{described}"));
        assert_eq!(d["no_topic_matches"], said(i).as_str(), "{described}");
    }
    let status = worker.terminate();
    assert!(status.success(), "{status:?}");
}
