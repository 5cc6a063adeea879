//! Issue 43, item 5: the member channels of a `table = "{route}"` channel read the same
//! partitions, each from its own table's checkpoint; on one worker they read through clients
//! that fan out ([`KafkaClients::try_new_fanning_out`]), so each partition is fetched once for
//! all of them. Against librdkafka's mock cluster; what was fetched is counted by the clients
//! ([`KafkaClients::fetched_bytes`]).

use std::time::{Duration, Instant};

use floe::model::{Position, ShardId};
use floe::source::kafka::embedded::{EmbeddedKafka, EmbeddedProducer};
use floe::source::kafka::{KafkaClients, KafkaSource, KafkaSourceConfig};
use floe::source::{Source, StartAt};

use crate::kafka_shared_clients::read_n;

/// Produces records `from..to` (key: the number, payload: `size` bytes) to partition 0 of
/// `topic`; their key and payload bytes.
fn produce(producer: &EmbeddedProducer, topic: &str, from: usize, to: usize, size: usize) -> u64 {
    let payload = vec![b'x'; size];
    let mut bytes = 0;
    for i in from..to {
        let key = i.to_string();
        producer
            .send(topic, Some(0), key.as_bytes(), &payload, None)
            .unwrap();
        bytes += (key.len() + size) as u64;
    }
    producer.flush(Duration::from_secs(30)).unwrap();
    bytes
}

fn settings(bootstrap: &str, channel: &str) -> KafkaSourceConfig {
    KafkaSourceConfig::new(bootstrap, "events")
        .with_channel(channel)
        .with_request_timeout(Duration::from_secs(5))
}

/// Three members' sources of one topic through fanning-out clients.
fn member_sources(
    kafka: &EmbeddedKafka,
    clients: &std::sync::Arc<KafkaClients>,
) -> Vec<KafkaSource> {
    ["c.a", "c.b", "c.c"]
        .iter()
        .map(|m| KafkaSource::with_clients(settings(kafka.bootstrap_servers(), m), clients.clone()))
        .collect()
}

/// Three readers of one partition, started at three checkpoints, each get every record from
/// their own start once and in order, while the partition is fetched once: the bytes fetched
/// are those produced (not three times them, as with a consumer per member).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_of_one_partition_at_their_own_checkpoints_share_one_fetch() {
    let kafka = EmbeddedKafka::start(1).unwrap();
    kafka.create_topic("events", 1).unwrap();
    let producer = kafka.producer().unwrap();
    let produced = produce(&producer, "events", 0, 300, 200);
    let clients =
        KafkaClients::try_new_fanning_out(&settings(kafka.bootstrap_servers(), "c")).unwrap();
    let sources = member_sources(&kafka, &clients);
    let p0 = ShardId::kafka_partition(0);
    // The least first: the partition is assigned there and read forward once.
    let starts = [
        StartAt::Earliest,
        StartAt::After(Position::Offset(99)),
        StartAt::After(Position::Offset(199)),
    ];
    let mut readers = Vec::new();
    for (source, start) in sources.iter().zip(starts) {
        readers.push(source.open(&p0, start).await.unwrap());
    }
    // Read together, a batch each in turn, as the members' worker loops do.
    let mut got: Vec<Vec<i64>> = vec![Vec::new(); 3];
    let deadline = Instant::now() + Duration::from_secs(30);
    while got.iter().map(Vec::len).sum::<usize>() < 600 && Instant::now() < deadline {
        for (i, reader) in readers.iter_mut().enumerate() {
            for r in reader
                .next_batch(50, Duration::from_millis(100))
                .await
                .unwrap()
            {
                let Position::Offset(o) = r.position else {
                    panic!("not an offset")
                };
                got[i].push(o);
            }
        }
    }
    assert_eq!(got[0], (0..300).collect::<Vec<i64>>());
    assert_eq!(got[1], (100..300).collect::<Vec<i64>>());
    assert_eq!(got[2], (200..300).collect::<Vec<i64>>());
    assert_eq!(
        clients.fetched_bytes(),
        produced,
        "every record fetched once"
    );
    assert_eq!(clients.num_clients(), 2, "metadata client and one consumer");

    // New records: fetched once more, each to all three.
    let more = produce(&producer, "events", 300, 400, 200);
    for reader in readers.iter_mut() {
        let got = read_n(reader.as_mut(), 100, Duration::from_secs(20)).await;
        assert_eq!(got, (300..400).collect::<Vec<i64>>());
    }
    assert_eq!(clients.fetched_bytes(), produced + more);
}

/// A reader that starts below what the others already read past (a member resuming from an
/// older checkpoint) has the partition fetched again from its start: it gets every record from
/// there, and the others get none twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_starting_below_what_the_others_read_past_is_served_without_a_repeat() {
    let kafka = EmbeddedKafka::start(1).unwrap();
    kafka.create_topic("events", 1).unwrap();
    let producer = kafka.producer().unwrap();
    let produced = produce(&producer, "events", 0, 200, 100);
    let clients =
        KafkaClients::try_new_fanning_out(&settings(kafka.bootstrap_servers(), "c")).unwrap();
    let sources = member_sources(&kafka, &clients);
    let p0 = ShardId::kafka_partition(0);
    let mut a = sources[0]
        .open(&p0, StartAt::After(Position::Offset(49)))
        .await
        .unwrap();
    let got = read_n(a.as_mut(), 150, Duration::from_secs(20)).await;
    assert_eq!(got, (50..200).collect::<Vec<i64>>());
    let mut b = sources[1].open(&p0, StartAt::Earliest).await.unwrap();
    let got = read_n(b.as_mut(), 200, Duration::from_secs(20)).await;
    assert_eq!(got, (0..200).collect::<Vec<i64>>());
    let more = produce(&producer, "events", 200, 250, 100);
    let got = read_n(a.as_mut(), 50, Duration::from_secs(20)).await;
    assert_eq!(got, (200..250).collect::<Vec<i64>>(), "nothing twice");
    let got = read_n(b.as_mut(), 50, Duration::from_secs(20)).await;
    assert_eq!(got, (200..250).collect::<Vec<i64>>());
    let fetched = clients.fetched_bytes();
    // Offsets 50..200 were fetched before b came and again for it; nothing else twice.
    let again: u64 = (50..200u64).map(|i| i.to_string().len() as u64 + 100).sum();
    assert!(
        fetched >= produced + more && fetched <= produced + more + again,
        "fetched {fetched}, produced {}",
        produced + more
    );
}

/// A reader that stops reading (its table's buffer full) holds the others back by the fan-out's
/// window (4 MiB, and one poll) only; once it is dropped (its member stopped), they read on to
/// the end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_that_stops_reading_holds_the_others_within_the_window_until_it_leaves() {
    let kafka = EmbeddedKafka::start(1).unwrap();
    kafka.create_topic("events", 1).unwrap();
    let producer = kafka.producer().unwrap();
    // 4.7 MiB, over the window (the mock cluster keeps 5 MiB of a partition).
    produce(&producer, "events", 0, 120, 40 << 10);
    let clients =
        KafkaClients::try_new_fanning_out(&settings(kafka.bootstrap_servers(), "c")).unwrap();
    let sources = member_sources(&kafka, &clients);
    let p0 = ShardId::kafka_partition(0);
    let stalled = sources[0].open(&p0, StartAt::Earliest).await.unwrap();
    let mut reading = sources[1].open(&p0, StartAt::Earliest).await.unwrap();
    let mut got = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        for r in reading
            .next_batch(10, Duration::from_millis(200))
            .await
            .unwrap()
        {
            let Position::Offset(o) = r.position else {
                panic!("not an offset")
            };
            got.push(o);
        }
    }
    // 4 MiB is 102 records of 40 KiB; one more poll of at most 10 may go past it.
    assert!(
        (100..=112).contains(&got.len()),
        "held within the window: {} of 120",
        got.len()
    );
    drop(stalled);
    let rest = read_n(reading.as_mut(), 120 - got.len(), Duration::from_secs(30)).await;
    let all: Vec<i64> = got.into_iter().chain(rest).collect();
    assert_eq!(all, (0..120).collect::<Vec<i64>>());
}

/// A reader that joins after another read past its start, by less than the last MiB (members
/// open their readers seconds apart), is served from what the fan-out kept: nothing is fetched
/// twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_joining_a_little_behind_is_served_from_what_was_kept() {
    let kafka = EmbeddedKafka::start(1).unwrap();
    kafka.create_topic("events", 1).unwrap();
    let producer = kafka.producer().unwrap();
    let produced = produce(&producer, "events", 0, 200, 1000);
    let clients =
        KafkaClients::try_new_fanning_out(&settings(kafka.bootstrap_servers(), "c")).unwrap();
    let sources = member_sources(&kafka, &clients);
    let p0 = ShardId::kafka_partition(0);
    let mut a = sources[0].open(&p0, StartAt::Earliest).await.unwrap();
    let got = read_n(a.as_mut(), 200, Duration::from_secs(20)).await;
    assert_eq!(got, (0..200).collect::<Vec<i64>>());
    let mut b = sources[1].open(&p0, StartAt::Earliest).await.unwrap();
    let got = read_n(b.as_mut(), 200, Duration::from_secs(20)).await;
    assert_eq!(got, (0..200).collect::<Vec<i64>>());
    assert_eq!(clients.fetched_bytes(), produced, "nothing fetched twice");
}
