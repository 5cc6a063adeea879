//! Issue 43: the sources of many topics read through one set of Kafka clients
//! ([`KafkaClients`]: one metadata client, one consumer assigned the union of the partitions,
//! probes made on demand), against librdkafka's mock cluster. Each topic keeps its own readers:
//! one that is not polled (its table's buffer full) never stalls another.

use std::time::{Duration, Instant};

use floe::model::{Position, ShardId};
use floe::source::kafka::embedded::{EmbeddedKafka, EmbeddedProducer};
use floe::source::kafka::{KafkaClients, KafkaSource, KafkaSourceConfig};
use floe::source::{ShardReader, Source, StartAt};

/// Produces `n` records of `size` bytes to each partition of `topic` (`partitions` of them).
fn produce(producer: &EmbeddedProducer, topic: &str, partitions: i32, n: usize, size: usize) {
    let payload = vec![b'x'; size];
    for i in 0..n {
        for p in 0..partitions {
            producer
                .send(topic, Some(p), i.to_string().as_bytes(), &payload, None)
                .unwrap();
        }
    }
    producer.flush(Duration::from_secs(30)).unwrap();
}

/// Reads `reader` until `n` records came or `within` passed; returns their offsets.
pub(crate) async fn read_n(reader: &mut dyn ShardReader, n: usize, within: Duration) -> Vec<i64> {
    let deadline = Instant::now() + within;
    let mut out = Vec::new();
    while out.len() < n && Instant::now() < deadline {
        for r in reader
            .next_batch(1000, Duration::from_millis(200))
            .await
            .unwrap()
        {
            match r.position {
                Position::Offset(o) => out.push(o),
                ref p => panic!("not an offset: {p}"),
            }
        }
    }
    out
}

fn settings(bootstrap: &str, topic: &str) -> KafkaSourceConfig {
    KafkaSourceConfig::new(bootstrap, topic).with_request_timeout(Duration::from_secs(5))
}

/// Twenty topics of two partitions, each read by its own source, through one set of clients:
/// every record of every partition is read, exactly once and in order, and the clients are
/// two (the metadata client and the one consumer) — not three per topic as when each source
/// had clients of its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sources_of_many_topics_read_through_one_consumer() {
    let kafka = EmbeddedKafka::start(1).unwrap();
    let producer = kafka.producer().unwrap();
    let topics: Vec<String> = (0..20).map(|i| format!("t{i:02}")).collect();
    for t in &topics {
        kafka.create_topic(t, 2).unwrap();
        produce(&producer, t, 2, 30, 100);
    }
    let clients = KafkaClients::try_new(&settings(kafka.bootstrap_servers(), "many")).unwrap();
    let mut readers = Vec::new();
    for t in &topics {
        let source =
            KafkaSource::with_clients(settings(kafka.bootstrap_servers(), t), clients.clone());
        assert_eq!(source.list_shards().await.unwrap().len(), 2);
        for p in 0..2 {
            let reader = source
                .open(&ShardId::kafka_partition(p), StartAt::Earliest)
                .await
                .unwrap();
            readers.push((t.clone(), p, reader));
        }
    }
    for (t, p, reader) in readers.iter_mut() {
        let got = read_n(reader.as_mut(), 30, Duration::from_secs(20)).await;
        assert_eq!(got, (0..30).collect::<Vec<i64>>(), "{t}:{p}");
    }
    assert_eq!(clients.num_clients(), 2, "metadata client and one consumer");
}

/// A reader that is not polled — its table's buffer full, its catalog slow — fills its own
/// partition queue to `queued.max.messages.kbytes` and librdkafka stops fetching that partition
/// alone: the reader of another topic on the same consumer reads its records meanwhile, and the
/// stalled reader, polled again, reads all of its own from where it stopped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_not_polled_does_not_stall_another_topic_on_the_shared_consumer() {
    let kafka = EmbeddedKafka::start(1).unwrap();
    let producer = kafka.producer().unwrap();
    kafka.create_topic("busy", 1).unwrap();
    kafka.create_topic("other", 1).unwrap();
    // About 4 MiB on the busy topic, far more than its queue may hold (64 KiB).
    produce(&producer, "busy", 1, 4000, 1000);
    let small = |topic: &str| {
        settings(kafka.bootstrap_servers(), topic)
            .with_client_property("queued.max.messages.kbytes", "64")
            .with_client_property("queued.min.messages", "10")
    };
    let clients = KafkaClients::try_new(&small("both")).unwrap();
    let busy = KafkaSource::with_clients(small("busy"), clients.clone());
    let other = KafkaSource::with_clients(small("other"), clients.clone());
    let p0 = ShardId::kafka_partition(0);
    let mut stalled = busy.open(&p0, StartAt::Earliest).await.unwrap();
    let mut reader = other.open(&p0, StartAt::Earliest).await.unwrap();
    // The busy reader reads a little, then is left alone while its queue fills up.
    let first = read_n(stalled.as_mut(), 1, Duration::from_secs(10)).await;
    assert!(!first.is_empty());
    tokio::time::sleep(Duration::from_secs(1)).await;
    produce(&producer, "other", 1, 500, 100);
    let got = read_n(reader.as_mut(), 500, Duration::from_secs(20)).await;
    assert_eq!(
        got,
        (0..500).collect::<Vec<i64>>(),
        "the other topic is read"
    );
    let mut all = first;
    all.extend(read_n(stalled.as_mut(), 4000 - all.len(), Duration::from_secs(60)).await);
    assert_eq!(
        all,
        (0..4000).collect::<Vec<i64>>(),
        "nothing lost, nothing repeated"
    );
    assert_eq!(clients.num_clients(), 2, "metadata client and one consumer");
}

/// Readers with nothing to read wait without holding a thread each: with forty readers
/// waiting on a runtime whose blocking pool has two threads, the one reader whose partition
/// gets a record is woken by it at once (a reader blocking a thread for its whole wait left it
/// queued behind two others until their waits ended).
#[test]
fn readers_waiting_for_records_hold_no_blocking_thread() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .max_blocking_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let kafka = EmbeddedKafka::start(1).unwrap();
        let producer = kafka.producer().unwrap();
        kafka.create_topic("idle", 40).unwrap();
        let clients = KafkaClients::try_new(&settings(kafka.bootstrap_servers(), "idle")).unwrap();
        let source =
            KafkaSource::with_clients(settings(kafka.bootstrap_servers(), "idle"), clients);
        let mut readers = Vec::new();
        for p in 0..40 {
            readers.push(
                source
                    .open(&ShardId::kafka_partition(p), StartAt::Earliest)
                    .await
                    .unwrap(),
            );
        }
        let started = Instant::now();
        let waits: Vec<_> = readers
            .into_iter()
            .map(|mut r| {
                tokio::spawn(async move {
                    let batch = r.next_batch(10, Duration::from_secs(8)).await.unwrap();
                    (batch.len(), started.elapsed())
                })
            })
            .collect();
        tokio::time::sleep(Duration::from_millis(500)).await;
        producer.send("idle", Some(39), b"k", b"v", None).unwrap();
        producer.flush(Duration::from_secs(10)).unwrap();
        let mut results = Vec::new();
        for w in waits {
            results.push(w.await.unwrap());
        }
        let (n, after) = results[39];
        assert_eq!(n, 1);
        assert!(
            after < Duration::from_secs(4),
            "woken by its record after {after:?}, not at the end of other readers' waits"
        );
        assert!(results[..39].iter().all(|(n, _)| *n == 0));
    });
}

/// Found by the fresh review of issue 43: a restarted 1,000-table worker queued its checkpoint
/// probes on the probe clients' locks in blocking threads, filled tokio's blocking pool and
/// starved every other blocking call (2 readers opened in 10 minutes). Callers now wait for a
/// probe holding no thread: with one probe stuck and 30 checks queued, a metadata call still
/// runs at once.
#[test]
fn callers_waiting_for_a_probe_hold_no_blocking_thread() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .max_blocking_threads(4)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let kafka = EmbeddedKafka::start(1).unwrap();
        kafka.create_topic("probed", 1).unwrap();
        let producer = kafka.producer().unwrap();
        for _ in 0..10 {
            producer.send("probed", Some(0), b"k", b"v", None).unwrap();
        }
        producer.flush(Duration::from_secs(10)).unwrap();
        let clients =
            KafkaClients::try_new(&settings(kafka.bootstrap_servers(), "probed")).unwrap();
        let source = std::sync::Arc::new(KafkaSource::with_clients(
            settings(kafka.bootstrap_servers(), "probed"),
            clients,
        ));
        let p0 = ShardId::kafka_partition(0);
        // One probe hangs for 10 s (a stuck broker); 30 checkpoint checks queue behind them.
        floe::failpoint::block_next("kafka-probe", Duration::from_secs(10));
        let checks: Vec<_> = (0..30)
            .map(|_| {
                let (source, p0) = (source.clone(), p0.clone());
                tokio::spawn(async move {
                    source
                        .check_checkpoint(&p0, &Position::Offset(5), floe::time::now_ms())
                        .await
                })
            })
            .collect();
        tokio::time::sleep(Duration::from_millis(500)).await;
        let started = Instant::now();
        source.watermarks(&p0).await.unwrap();
        let took = started.elapsed();
        assert!(
            took < Duration::from_secs(5),
            "a metadata call waited {took:?} behind the queued probes"
        );
        for check in checks {
            check.await.unwrap().unwrap();
        }
    });
}

/// Found by the fresh review of issue 43: a worker restarted over 1,000 tables checked each
/// table's checkpoints through a probe assignment of its own, two at a time (2–3 tables a
/// second). The checks the sources of many topics ask at once now share probe assignments:
/// forty tables' checks take a handful, and each table still gets its own verdict (the one
/// whose checkpoint record is newer than its commit, a recreated topic, alone is refused).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_checkpoint_checks_of_many_topics_share_probe_assignments() {
    const TOPICS: usize = 40;
    const BASE_MS: i64 = 1_700_000_000_000;
    let kafka = EmbeddedKafka::start(1).unwrap();
    let producer = kafka.producer().unwrap();
    let topics: Vec<String> = (0..TOPICS).map(|i| format!("c{i:02}")).collect();
    for t in &topics {
        kafka.create_topic(t, 2).unwrap();
        for i in 0..10i64 {
            for p in 0..2 {
                producer
                    .send(t, Some(p), b"k", b"{}", Some(BASE_MS + 1000 * i))
                    .unwrap();
            }
        }
    }
    producer.flush(Duration::from_secs(30)).unwrap();
    let clients = KafkaClients::try_new(&settings(kafka.bootstrap_servers(), "many")).unwrap();
    let sources: Vec<KafkaSource> = topics
        .iter()
        .map(|t| KafkaSource::with_clients(settings(kafka.bootstrap_servers(), t), clients.clone()))
        .collect();
    let checks: Vec<(ShardId, Position)> = (0..2)
        .map(|p| (ShardId::kafka_partition(p), Position::Offset(5)))
        .collect();
    // The record at offset 5 was produced at BASE + 5 s: a commit a minute later recorded it;
    // the table of c07 says its commit came two hours before (the topic was recreated since).
    let committed_by = |i: usize| match i {
        7 => BASE_MS + 5_000 - 7_200_000,
        _ => BASE_MS + 65_000,
    };
    let verdicts = futures::future::join_all(
        sources
            .iter()
            .enumerate()
            .map(|(i, s)| s.check_checkpoints(&checks, committed_by(i))),
    )
    .await;
    for (i, verdict) in verdicts.iter().enumerate() {
        match (i, verdict) {
            (7, Err(floe::source::SourceError::PositionLost { message, .. })) => {
                assert!(
                    message.contains("c07") && message.contains("recreated"),
                    "{message}"
                )
            }
            (7, other) => panic!("c07's recreated checkpoint passed: {other:?}"),
            (_, verdict) => assert!(verdict.is_ok(), "{}: {verdict:?}", topics[i]),
        }
    }
    let assignments = clients.probe_assignments();
    assert!(
        assignments <= 5,
        "{TOPICS} tables' checks took {assignments} probe assignments"
    );
}
