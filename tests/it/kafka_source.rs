//! The Kafka source against a real Kafka-protocol broker (librdkafka's mock cluster, in process
//! and as the standalone `floe-mock-kafka` binary). No mocks of rdkafka.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use floe::model::{Position, ShardId};
use floe::source::kafka::embedded::{EmbeddedKafka, EmbeddedProducer};
use floe::source::kafka::{KafkaSource, KafkaSourceConfig};
use floe::source::{InitialPosition, Lag, ShardReader, Source, SourceError, SourceRecord, StartAt};
use floe::tools::sample_events::{event_json, event_key};

const BASE_MS: i64 = 1_783_627_200_000; // 2026-07-09T20:00:00Z
const TOPIC: &str = "events";

fn source(kafka_bootstrap: &str, topic: &str) -> KafkaSource {
    KafkaSource::try_new(
        KafkaSourceConfig::new(kafka_bootstrap, topic).with_request_timeout(Duration::from_secs(2)),
    )
    .unwrap()
}

/// Produces records `ids` with key = id, partition = id % partitions, flushed.
fn produce(producer: &EmbeddedProducer, topic: &str, ids: std::ops::Range<u64>, partitions: u64) {
    for id in ids {
        let payload = event_json(id, 7, BASE_MS, 2);
        producer
            .send(
                topic,
                Some((id % partitions) as i32),
                event_key(id).as_bytes(),
                payload.as_bytes(),
                None,
            )
            .unwrap();
    }
    producer.flush(Duration::from_secs(10)).unwrap();
}

/// Reads until `n` records are read or 10 s pass.
async fn read_n(reader: &mut dyn ShardReader, n: usize) -> Vec<SourceRecord> {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut out = Vec::new();
    while out.len() < n && Instant::now() < deadline {
        let batch = reader
            .next_batch(n - out.len(), Duration::from_millis(500))
            .await
            .unwrap();
        out.extend(batch);
    }
    out
}

fn offsets(records: &[SourceRecord]) -> Vec<i64> {
    records
        .iter()
        .map(|r| match r.position {
            Position::Offset(o) => o,
            ref p => panic!("not an offset: {p}"),
        })
        .collect()
}

/// The ids produced on `partition`, in offset order, for records `0..total` on `partitions`.
fn expected_ids(partition: u64, total: u64, partitions: u64) -> Vec<u64> {
    (0..total)
        .filter(|id| id % partitions == partition)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_each_partition_from_the_start_and_after_a_checkpoint_exactly() {
    let kafka = EmbeddedKafka::start(3).unwrap();
    kafka.create_topic(TOPIC, 4).unwrap();
    produce(&kafka.producer().unwrap(), TOPIC, 0..1000, 4);
    let src = source(kafka.bootstrap_servers(), TOPIC);

    let shards = src.list_shards().await.unwrap();
    let ids: Vec<&str> = shards.iter().map(|s| s.id.as_str()).collect();
    assert_eq!(ids, ["0", "1", "2", "3"]);
    assert!(shards.iter().all(|s| s.parents.is_empty()));

    for p in 0..4u64 {
        let shard = ShardId::kafka_partition(p as i32);
        let want = expected_ids(p, 1000, 4);
        assert_eq!(want.len(), 250);
        assert_eq!(
            src.start_position(&shard, &InitialPosition::Earliest)
                .await
                .unwrap(),
            StartAt::Earliest
        );

        // From the start: offsets 0..250, payloads and keys in produce order.
        let mut reader = src.open(&shard, StartAt::Earliest).await.unwrap();
        let records = read_n(reader.as_mut(), 250).await;
        assert_eq!(offsets(&records), (0..250).collect::<Vec<_>>());
        for (r, id) in records.iter().zip(&want) {
            assert_eq!(r.shard, shard);
            assert_eq!(r.payload, event_json(*id, 7, BASE_MS, 2).into_bytes());
            assert_eq!(r.key.as_deref(), Some(event_key(*id).as_bytes()));
            assert!(
                r.arrival_ms > BASE_MS - 365 * 86_400_000,
                "broker timestamp"
            );
        }
        // Nothing more.
        let more = reader
            .next_batch(10, Duration::from_millis(300))
            .await
            .unwrap();
        assert!(more.is_empty());

        // After a checkpoint k: exactly k+1..250.
        for k in [0i64, 99, 248] {
            let mut reader = src
                .open(&shard, StartAt::After(Position::Offset(k)))
                .await
                .unwrap();
            let records = read_n(reader.as_mut(), (249 - k) as usize).await;
            assert_eq!(
                offsets(&records),
                ((k + 1)..250).collect::<Vec<_>>(),
                "after {k}"
            );
            assert_eq!(
                records[0].payload,
                event_json(want[(k + 1) as usize], 7, BASE_MS, 2).into_bytes()
            );
            let more = reader
                .next_batch(10, Duration::from_millis(200))
                .await
                .unwrap();
            assert!(more.is_empty(), "after {k}: extra records");
        }

        // At an explicit offset (a resolved start): inclusive.
        let mut reader = src
            .open(&shard, StartAt::At(Position::Offset(200)))
            .await
            .unwrap();
        assert_eq!(
            offsets(&read_n(reader.as_mut(), 50).await),
            (200..250).collect::<Vec<_>>()
        );
    }

    // A caught-up reader returns nothing, then exactly the next record.
    let shard = ShardId::kafka_partition(1);
    let mut reader = src
        .open(&shard, StartAt::After(Position::Offset(249)))
        .await
        .unwrap();
    assert!(reader
        .next_batch(10, Duration::from_millis(300))
        .await
        .unwrap()
        .is_empty());
    produce(&kafka.producer().unwrap(), TOPIC, 1001..1002, 4); // 1001 % 4 == 1
    let records = read_n(reader.as_mut(), 1).await;
    assert_eq!(offsets(&records), [250]);
    assert_eq!(records[0].key.as_deref(), Some(&b"1001"[..]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batches_respect_max_records_and_never_repeat_a_position() {
    let kafka = EmbeddedKafka::start(1).unwrap();
    kafka.create_topic(TOPIC, 1).unwrap();
    produce(&kafka.producer().unwrap(), TOPIC, 0..300, 1);
    let src = source(kafka.bootstrap_servers(), TOPIC);
    let mut reader = src
        .open(&ShardId::kafka_partition(0), StartAt::Earliest)
        .await
        .unwrap();
    let mut all = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while all.len() < 300 && Instant::now() < deadline {
        let batch = reader
            .next_batch(7, Duration::from_millis(500))
            .await
            .unwrap();
        assert!(batch.len() <= 7);
        all.extend(offsets(&batch));
    }
    assert_eq!(all, (0..300).collect::<Vec<_>>());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resolves_activation_time_to_the_first_record_at_or_after_it() {
    let kafka = EmbeddedKafka::start(1).unwrap();
    kafka.create_topic(TOPIC, 2).unwrap();
    let producer = kafka.producer().unwrap();
    // Partition 0: 100 records one second apart, from BASE_MS.
    for i in 0..100i64 {
        producer
            .send(
                TOPIC,
                Some(0),
                i.to_string().as_bytes(),
                b"{}",
                Some(BASE_MS + i * 1000),
            )
            .unwrap();
    }
    producer.flush(Duration::from_secs(10)).unwrap();
    let src = source(kafka.bootstrap_servers(), TOPIC);
    let p0 = ShardId::kafka_partition(0);
    let at = |ts: i64| InitialPosition::AtTimestamp(ts);

    for (ts, want) in [
        (BASE_MS - 3_600_000, 0),
        (BASE_MS, 0),
        (BASE_MS + 1, 1),
        (BASE_MS + 41_500, 42),
        (BASE_MS + 42_000, 42),
        (BASE_MS + 99_000, 99),
        (BASE_MS + 99_001, 100),
        (BASE_MS + 3_600_000, 100),
    ] {
        assert_eq!(
            src.start_position(&p0, &at(ts)).await.unwrap(),
            StartAt::At(Position::Offset(want)),
            "timestamp {ts}"
        );
    }
    // Empty partition: its high watermark.
    assert_eq!(
        src.start_position(&ShardId::kafka_partition(1), &at(BASE_MS))
            .await
            .unwrap(),
        StartAt::At(Position::Offset(0))
    );

    // A start resolved before newer records arrive equals the one resolved after: deterministic.
    let activation = BASE_MS + 200_000;
    let before = src.start_position(&p0, &at(activation)).await.unwrap();
    for i in 0..5i64 {
        producer
            .send(TOPIC, Some(0), b"k", b"{}", Some(activation + i * 10))
            .unwrap();
    }
    producer.flush(Duration::from_secs(10)).unwrap();
    let after = src.start_position(&p0, &at(activation)).await.unwrap();
    assert_eq!(before, StartAt::At(Position::Offset(100)));
    assert_eq!(after, before);

    // Reading from the resolved start, and from StartAt::AtTimestamp directly.
    let mut reader = src.open(&p0, after).await.unwrap();
    assert_eq!(
        offsets(&read_n(reader.as_mut(), 5).await),
        (100..105).collect::<Vec<_>>()
    );
    let mut reader = src
        .open(&p0, StartAt::AtTimestamp(BASE_MS + 98_000))
        .await
        .unwrap();
    assert_eq!(
        offsets(&read_n(reader.as_mut(), 7).await),
        (98..105).collect::<Vec<_>>()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reports_lag_as_high_watermark_minus_next_offset() {
    let kafka = EmbeddedKafka::start(1).unwrap();
    kafka.create_topic(TOPIC, 1).unwrap();
    produce(&kafka.producer().unwrap(), TOPIC, 0..500, 1);
    let src = source(kafka.bootstrap_servers(), TOPIC);
    let mut reader = src
        .open(
            &ShardId::kafka_partition(0),
            StartAt::After(Position::Offset(99)),
        )
        .await
        .unwrap();
    let mut read = 100i64;
    // Statistics (and so the high watermark) arrive every second while polling.
    let deadline = Instant::now() + Duration::from_secs(10);
    while reader.lag().is_none() && Instant::now() < deadline {
        read += reader
            .next_batch(1, Duration::from_millis(100))
            .await
            .unwrap()
            .len() as i64;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(reader.lag(), Some(Lag::Records((500 - read) as u64)));
    let rest = read_n(reader.as_mut(), (500 - read) as usize).await;
    assert_eq!(rest.len() as i64, 500 - read);
    assert_eq!(reader.lag(), Some(Lag::Records(0)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sees_a_topic_and_partitions_created_after_the_source() {
    let kafka = EmbeddedKafka::start(3).unwrap();
    let src = source(kafka.bootstrap_servers(), "later");
    match src.list_shards().await {
        Err(SourceError::NotFound { .. }) => {}
        other => panic!("expected NotFound, got {other:?}"),
    }
    kafka.create_topic("later", 3).unwrap();
    let shards = src.list_shards().await.unwrap();
    assert_eq!(shards.len(), 3);
    // A reader over the partition that appeared: starts at its beginning.
    let p2 = ShardId::kafka_partition(2);
    let start = src
        .start_position(&p2, &InitialPosition::Earliest)
        .await
        .unwrap();
    let mut reader = src.open(&p2, start).await.unwrap();
    produce(&kafka.producer().unwrap(), "later", 0..9, 3);
    let records = read_n(reader.as_mut(), 3).await;
    assert_eq!(offsets(&records), [0, 1, 2]);
    assert_eq!(records[2].key.as_deref(), Some(&b"8"[..]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refuses_bad_shards_positions_and_correctness_overrides() {
    let kafka = EmbeddedKafka::start(1).unwrap();
    kafka.create_topic(TOPIC, 2).unwrap();
    let src = source(kafka.bootstrap_servers(), TOPIC);
    assert!(matches!(
        src.open(&ShardId::kafka_partition(7), StartAt::Earliest)
            .await,
        Err(SourceError::NotFound { .. })
    ));
    assert!(matches!(
        src.open(&ShardId("shardId-000000000000".into()), StartAt::Earliest)
            .await,
        Err(SourceError::InvalidPosition { .. })
    ));
    assert!(matches!(
        src.open(
            &ShardId::kafka_partition(0),
            StartAt::After(Position::ShardEnd)
        )
        .await,
        Err(SourceError::InvalidPosition { .. })
    ));
    for (key, value) in [
        ("enable.auto.commit", "true"),
        ("enable.auto.offset.store", "true"),
        ("group.id", "mine"),
        ("auto.offset.reset", "latest"),
        ("isolation.level", "read_uncommitted"),
    ] {
        let err = KafkaSource::try_new(
            KafkaSourceConfig::new(kafka.bootstrap_servers(), TOPIC)
                .with_client_property(key, value),
        )
        .unwrap_err();
        assert!(matches!(err, SourceError::Config { .. }), "{key}");
        assert!(!err.is_retryable());
        assert!(err.to_string().contains(key));
    }
    // A harmless passthrough property is accepted.
    KafkaSource::try_new(
        KafkaSourceConfig::new(kafka.bootstrap_servers(), TOPIC)
            .with_client_property("fetch.wait.max.ms", "50"),
    )
    .unwrap();
}

/// A checkpoint past the end of the log: the topic was deleted and recreated under the same name
/// (or its log truncated). Refused when the reader opens, naming the offsets; never read from,
/// even with `on_position_lost = "skip"`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_checkpoint_beyond_the_log_is_position_lost_not_a_silent_skip() {
    let kafka = EmbeddedKafka::start(1).unwrap();
    kafka.create_topic(TOPIC, 1).unwrap();
    produce(&kafka.producer().unwrap(), TOPIC, 0..10, 1);
    for skip in [false, true] {
        let src = KafkaSource::try_new(
            KafkaSourceConfig::new(kafka.bootstrap_servers(), TOPIC)
                .with_request_timeout(Duration::from_secs(2))
                .with_skip_lost_positions(skip),
        )
        .unwrap();
        match src
            .open(
                &ShardId::kafka_partition(0),
                StartAt::After(Position::Offset(5000)),
            )
            .await
        {
            Err(SourceError::PositionLost { shard, message }) => {
                assert_eq!(shard, ShardId::kafka_partition(0));
                assert!(
                    message.contains("next offset is 5001")
                        && message.contains("holds offsets 0 to 9")
                        && message.contains("give the channel a new table name")
                        && message.contains("deleted and recreated"),
                    "{message}"
                );
            }
            Ok(_) => panic!("opened a reader past the log end (skip = {skip})"),
            Err(e) => panic!("unexpected error {e}"),
        }
    }
}

/// Produces `n` records of about 1 KiB each on partition 0 of `topic`, one batch each (the mock
/// cluster keeps 5 MiB of batches per partition and deletes the oldest beyond: retention).
fn produce_bulk(producer: &EmbeddedProducer, topic: &str, ids: std::ops::Range<u64>) {
    let pad = "x".repeat(1000);
    for id in ids {
        let payload = format!("{{\"id\":{id},\"pad\":\"{pad}\"}}");
        producer
            .send(
                topic,
                Some(0),
                event_key(id).as_bytes(),
                payload.as_bytes(),
                None,
            )
            .unwrap();
        if id % 500 == 499 {
            producer.flush(Duration::from_secs(10)).unwrap();
        }
    }
    producer.flush(Duration::from_secs(10)).unwrap();
}

/// Retention deleted records after the checkpoint while floe was down: the reader refuses,
/// naming the partition and the offsets gone — unless the channel skips lost positions, then it
/// resumes at the oldest offset the broker holds and reads on from there without a gap.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_deleted_by_retention_after_the_checkpoint_fail_the_reader_or_are_skipped_on_request(
) {
    let kafka = EmbeddedKafka::start(1).unwrap();
    kafka.create_topic(TOPIC, 1).unwrap();
    produce_bulk(&kafka.producer().unwrap(), TOPIC, 0..8000);
    let src = source(kafka.bootstrap_servers(), TOPIC);
    let p0 = ShardId::kafka_partition(0);
    let (low, high) = src.watermarks(&p0).await.unwrap();
    assert!(low > 100 && high == 8000, "the broker kept {low}..{high}");
    match src.open(&p0, StartAt::After(Position::Offset(99))).await {
        Err(SourceError::PositionLost { shard, message }) => {
            assert_eq!(shard, p0);
            assert!(
                message.contains(&format!("offsets 100 to {}", low - 1))
                    && message.contains(&format!("holds offsets {low} to {}", high - 1))
                    && message.contains("on_position_lost = \"skip\""),
                "{message}"
            );
        }
        Ok(_) => panic!("opened a reader whose next records are gone"),
        Err(e) => panic!("unexpected error {e}"),
    }
    let skipping = KafkaSource::try_new(
        KafkaSourceConfig::new(kafka.bootstrap_servers(), TOPIC)
            .with_request_timeout(Duration::from_secs(2))
            .with_skip_lost_positions(true),
    )
    .unwrap();
    let mut reader = skipping
        .open(&p0, StartAt::After(Position::Offset(99)))
        .await
        .unwrap();
    let records = read_n(reader.as_mut(), 10).await;
    assert_eq!(offsets(&records), (low..low + 10).collect::<Vec<_>>());
    // `floe channel describe` shows the position lost, not a lag, even when the channel skips.
    for src in [&src, &skipping] {
        assert!(matches!(
            src.lag_after(&p0, 99).await,
            Err(SourceError::PositionLost { .. })
        ));
        assert!(matches!(
            src.lag_after(&p0, 9000).await,
            Err(SourceError::PositionLost { .. })
        ));
    }
    // A checkpoint the broker still holds is resumed exactly, skip or not.
    let mut reader = skipping
        .open(&p0, StartAt::After(Position::Offset(low + 5)))
        .await
        .unwrap();
    let records = read_n(reader.as_mut(), 3).await;
    assert_eq!(offsets(&records), [low + 6, low + 7, low + 8]);
}

/// Kafka's CRC-32C (Castagnoli), of a record batch from its attributes on.
fn crc32c(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in data {
        crc ^= b as u32;
        for _ in 0..8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ 0x82F6_3B78
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

/// Kafka's zig-zag varint.
fn varint(out: &mut Vec<u8>, v: i64) {
    let mut z = ((v << 1) ^ (v >> 63)) as u64;
    loop {
        if z < 0x80 {
            out.push(z as u8);
            return;
        }
        out.push((z as u8 & 0x7f) | 0x80);
        z >>= 7;
    }
}

/// Appends a transaction commit marker — a control record batch, as a transaction coordinator
/// writes at the end of each committed transaction — to `partition` of `topic`, with a raw
/// Produce v3 request (record batch format v2, KIP-98). librdkafka's mock cluster accepts
/// transactions but writes no markers itself (its EndTxn only answers), and no client library
/// writes control batches, so the test writes the bytes a broker would.
fn append_commit_marker(bootstrap: &str, topic: &str, partition: i32) {
    use std::io::{Read, Write};
    let mut record = vec![0u8]; // attributes
    varint(&mut record, 0); // timestamp delta
    varint(&mut record, 0); // offset delta
    varint(&mut record, 4);
    record.extend_from_slice(&[0, 0, 0, 1]); // control key: version 0, type 1 = COMMIT
    varint(&mut record, 6);
    record.extend_from_slice(&[0, 0, 0, 0, 0, 0]); // version 0, coordinator epoch 0
    varint(&mut record, 0); // headers
    let mut records = Vec::new();
    varint(&mut records, record.len() as i64);
    records.extend_from_slice(&record);
    let now = floe::time::now_ms();
    let mut from_attributes = Vec::new();
    from_attributes.extend_from_slice(&0x30i16.to_be_bytes()); // transactional | control
    from_attributes.extend_from_slice(&0i32.to_be_bytes()); // last offset delta
    from_attributes.extend_from_slice(&now.to_be_bytes());
    from_attributes.extend_from_slice(&now.to_be_bytes());
    from_attributes.extend_from_slice(&4242i64.to_be_bytes()); // producer id
    from_attributes.extend_from_slice(&0i16.to_be_bytes()); // producer epoch
    from_attributes.extend_from_slice(&(-1i32).to_be_bytes()); // base sequence
    from_attributes.extend_from_slice(&1i32.to_be_bytes()); // record count
    from_attributes.extend_from_slice(&records);
    let mut batch = Vec::new();
    batch.extend_from_slice(&0i64.to_be_bytes()); // base offset (the broker assigns it)
    batch.extend_from_slice(&((4 + 1 + 4 + from_attributes.len()) as i32).to_be_bytes());
    batch.extend_from_slice(&0i32.to_be_bytes()); // partition leader epoch
    batch.push(2); // magic
    batch.extend_from_slice(&crc32c(&from_attributes).to_be_bytes());
    batch.extend_from_slice(&from_attributes);
    let mut req = Vec::new();
    req.extend_from_slice(&0i16.to_be_bytes()); // api key: Produce
    req.extend_from_slice(&3i16.to_be_bytes()); // api version
    req.extend_from_slice(&7i32.to_be_bytes()); // correlation id
    req.extend_from_slice(&4i16.to_be_bytes());
    req.extend_from_slice(b"test");
    req.extend_from_slice(&(-1i16).to_be_bytes()); // transactional id: null
    req.extend_from_slice(&(-1i16).to_be_bytes()); // acks: all
    req.extend_from_slice(&10_000i32.to_be_bytes());
    req.extend_from_slice(&1i32.to_be_bytes());
    req.extend_from_slice(&(topic.len() as i16).to_be_bytes());
    req.extend_from_slice(topic.as_bytes());
    req.extend_from_slice(&1i32.to_be_bytes());
    req.extend_from_slice(&partition.to_be_bytes());
    req.extend_from_slice(&(batch.len() as i32).to_be_bytes());
    req.extend_from_slice(&batch);
    let addr = bootstrap.split(',').next().unwrap();
    let mut conn = std::net::TcpStream::connect(addr).unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    conn.write_all(&(req.len() as i32).to_be_bytes()).unwrap();
    conn.write_all(&req).unwrap();
    let mut len = [0u8; 4];
    conn.read_exact(&mut len).unwrap();
    let mut resp = vec![0u8; i32::from_be_bytes(len) as usize];
    conn.read_exact(&mut resp).unwrap();
    // correlation id, 1 topic (name), 1 partition (index), then its error code.
    let name_end = 4 + 4 + 2 + topic.len();
    let error = i16::from_be_bytes([resp[name_end + 8], resp[name_end + 9]]);
    assert_eq!(error, 0, "the broker refused the marker");
}

/// A transactional topic: each committed transaction ends with a commit marker that takes an
/// offset and is never returned, so offsets have gaps. Everything is delivered (gaps are gaps,
/// not loss) and the lag reaches 0 once the last record is read — it used to stay at 1 per
/// partition for ever (high watermark − (last record + 1)), on the reader and in
/// `floe channel describe` (`lag_after`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lag_reaches_zero_on_a_transactional_topic_and_marker_gaps_lose_nothing() {
    let kafka = EmbeddedKafka::start(1).unwrap();
    kafka.create_topic(TOPIC, 1).unwrap();
    let producer = kafka.producer().unwrap();
    for tx in 0..3u64 {
        produce(&producer, TOPIC, tx * 20..tx * 20 + 20, 1);
        append_commit_marker(kafka.bootstrap_servers(), TOPIC, 0);
    }
    let src = source(kafka.bootstrap_servers(), TOPIC);
    let p0 = ShardId::kafka_partition(0);
    let (_, high) = src.watermarks(&p0).await.unwrap();
    assert!(
        high > 60,
        "no transaction markers written (high watermark {high})"
    );
    let mut reader = src.open(&p0, StartAt::Earliest).await.unwrap();
    let records = read_n(reader.as_mut(), 60).await;
    assert_eq!(records.len(), 60);
    let keys: Vec<String> = records
        .iter()
        .map(|r| String::from_utf8(r.key.clone().unwrap()).unwrap())
        .collect();
    assert_eq!(keys, (0..60).map(event_key).collect::<Vec<_>>());
    let got = offsets(&records);
    assert!(
        got.windows(2).any(|w| w[1] > w[0] + 1),
        "no gap from transaction markers in {got:?}"
    );
    let last = *got.last().unwrap();
    assert!(
        last < high - 1,
        "the marker after the last record is missing"
    );
    // Keep polling (the marker is stepped over on the partition's queue) until statistics
    // report the position.
    let deadline = Instant::now() + Duration::from_secs(10);
    while reader.lag() != Some(Lag::Records(0)) && Instant::now() < deadline {
        assert!(reader
            .next_batch(10, Duration::from_millis(200))
            .await
            .unwrap()
            .is_empty());
    }
    assert_eq!(reader.lag(), Some(Lag::Records(0)));
    assert_eq!(src.lag_after(&p0, last).await.unwrap(), 0);
    // A real record after the checkpoint still counts.
    assert!(src.lag_after(&p0, got[got.len() - 2]).await.unwrap() >= 1);
}

/// The record at a checkpoint cannot be newer than the commit that recorded it (beyond Kafka's
/// 1 h bound on producer clocks): a newer one belongs to another log — the topic was deleted
/// and recreated under the same name and grew past the checkpoint.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_checkpoint_whose_record_is_newer_than_its_commit_is_a_recreated_topic() {
    let kafka = EmbeddedKafka::start(1).unwrap();
    kafka.create_topic(TOPIC, 1).unwrap();
    let producer = kafka.producer().unwrap();
    for i in 0..100i64 {
        producer
            .send(TOPIC, Some(0), b"k", b"{}", Some(BASE_MS + 1000 * i))
            .unwrap();
    }
    producer.flush(Duration::from_secs(10)).unwrap();
    let src = source(kafka.bootstrap_servers(), TOPIC);
    let p0 = ShardId::kafka_partition(0);
    let at_50 = BASE_MS + 50_000;
    // Committed a few minutes after the record was read: the same log.
    src.check_checkpoint(&p0, &Position::Offset(50), at_50 + 300_000)
        .await
        .unwrap();
    // Within the skew producers' clocks are allowed.
    src.check_checkpoint(&p0, &Position::Offset(50), at_50 - 1_800_000)
        .await
        .unwrap();
    // Committed two hours before the record at its offset was produced.
    match src
        .check_checkpoint(&p0, &Position::Offset(50), at_50 - 7_200_000)
        .await
    {
        Err(SourceError::PositionLost { shard, message }) => {
            assert_eq!(shard, p0);
            assert!(
                message.contains("checkpoint offset 50") && message.contains("recreated"),
                "{message}"
            );
        }
        other => panic!("expected PositionLost, got {other:?}"),
    }
    // Offsets the broker does not hold are left to `open`.
    src.check_checkpoint(&p0, &Position::Offset(500), 0)
        .await
        .unwrap();
}

/// The checkpoints of many partitions are checked through one probe assignment
/// (`check_checkpoints`, what a worker taking many shards calls): the same verdicts as one by
/// one, the refused one named by its own partition.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_checkpoints_of_many_partitions_are_checked_at_once_and_the_recreated_one_named() {
    const PARTITIONS: i32 = 8;
    let kafka = EmbeddedKafka::start(1).unwrap();
    kafka.create_topic(TOPIC, PARTITIONS).unwrap();
    let producer = kafka.producer().unwrap();
    for p in 0..PARTITIONS {
        for i in 0..20i64 {
            producer
                .send(TOPIC, Some(p), b"k", b"{}", Some(BASE_MS + 1000 * i))
                .unwrap();
        }
    }
    producer.flush(Duration::from_secs(10)).unwrap();
    let src = source(kafka.bootstrap_servers(), TOPIC);
    let at_10 = BASE_MS + 10_000;
    let checks = |offset_of: &dyn Fn(i32) -> i64| -> Vec<(ShardId, Position)> {
        (0..PARTITIONS)
            .map(|p| (ShardId::kafka_partition(p), Position::Offset(offset_of(p))))
            .collect()
    };
    // Every checkpoint of the same log (one beyond the log's end, left to `open`).
    src.check_checkpoints(&checks(&|p| if p == 3 { 500 } else { 10 }), at_10 + 60_000)
        .await
        .unwrap();
    // A commit an hour (the allowed skew) before record 10's timestamp: checkpoints at offset
    // 4 pass, partition 5's at offset 19 names a record too new for it: refused, by name.
    let commit = BASE_MS + 10_000 - 3_600_000;
    match src
        .check_checkpoints(&checks(&|p| if p == 5 { 19 } else { 4 }), commit)
        .await
    {
        Err(SourceError::PositionLost { shard, message }) => {
            assert_eq!(shard, ShardId::kafka_partition(5), "{message}");
            assert!(message.contains("checkpoint offset 19"), "{message}");
        }
        other => panic!("expected PositionLost of partition 5, got {other:?}"),
    }
}

/// A partition that appears after the channel's activation (a partition added to the topic)
/// starts at its beginning under `activation_time`: its records are all newer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partition_that_appears_after_activation_is_read_from_its_beginning() {
    let kafka = EmbeddedKafka::start(1).unwrap();
    let activated_at = floe::time::now_ms();
    let src = source(kafka.bootstrap_servers(), "later");
    kafka.create_topic("later", 2).unwrap();
    let p1 = ShardId::kafka_partition(1);
    let start = src
        .start_position(&p1, &InitialPosition::AtTimestamp(activated_at))
        .await
        .unwrap();
    assert_eq!(start, StartAt::At(Position::Offset(0)));
    let mut reader = src.open(&p1, start).await.unwrap();
    produce(&kafka.producer().unwrap(), "later", 0..6, 2);
    let records = read_n(reader.as_mut(), 3).await;
    assert_eq!(offsets(&records), [0, 1, 2]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn surfaces_a_broker_outage_as_retryable_and_resumes_without_loss() {
    let kafka = EmbeddedKafka::start(1).unwrap();
    kafka.create_topic(TOPIC, 1).unwrap();
    let producer = kafka.producer().unwrap();
    produce(&producer, TOPIC, 0..20, 1);
    let src = source(kafka.bootstrap_servers(), TOPIC);
    let mut reader = src
        .open(&ShardId::kafka_partition(0), StartAt::Earliest)
        .await
        .unwrap();
    assert_eq!(
        offsets(&read_n(reader.as_mut(), 20).await),
        (0..20).collect::<Vec<_>>()
    );

    kafka.broker_down(1).unwrap();
    let err = src.list_shards().await.unwrap_err();
    assert!(err.is_retryable(), "{err}");
    let deadline = Instant::now() + Duration::from_secs(15);
    let mut saw_retryable = false;
    while Instant::now() < deadline && !saw_retryable {
        match reader.next_batch(10, Duration::from_millis(500)).await {
            Ok(batch) => assert!(batch.is_empty()),
            Err(e) => {
                assert!(e.is_retryable(), "{e}");
                saw_retryable = true;
            }
        }
    }
    assert!(saw_retryable, "the outage was never reported");

    kafka.broker_up(1).unwrap();
    produce(&producer, TOPIC, 20..30, 1);
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut got = Vec::new();
    while got.len() < 10 && Instant::now() < deadline {
        match reader.next_batch(10, Duration::from_millis(500)).await {
            Ok(batch) => got.extend(offsets(&batch)),
            Err(e) => assert!(e.is_retryable(), "{e}"),
        }
    }
    assert_eq!(got, (20..30).collect::<Vec<_>>());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_standalone_broker_binary_serves_another_process() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_floe-mock-kafka"))
        .args([
            "--topic",
            "orders",
            "--partitions",
            "2",
            "--exit-on-stdin-eof",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let bootstrap = line
        .trim()
        .strip_prefix("bootstrap=")
        .unwrap_or_else(|| panic!("first line: {line:?}"))
        .to_string();
    assert!(bootstrap.contains("127.0.0.1:"), "{bootstrap}");

    let producer = EmbeddedProducer::connect(&bootstrap).unwrap();
    produce(&producer, "orders", 0..100, 2);
    let src = source(&bootstrap, "orders");
    assert_eq!(src.list_shards().await.unwrap().len(), 2);
    for p in 0..2u64 {
        let mut reader = src
            .open(&ShardId::kafka_partition(p as i32), StartAt::Earliest)
            .await
            .unwrap();
        let records = read_n(reader.as_mut(), 50).await;
        assert_eq!(offsets(&records), (0..50).collect::<Vec<_>>());
        let keys: Vec<u64> = records
            .iter()
            .map(|r| {
                std::str::from_utf8(r.key.as_deref().unwrap())
                    .unwrap()
                    .parse()
                    .unwrap()
            })
            .collect();
        assert_eq!(keys, expected_ids(p, 100, 2));
    }

    // Closing its stdin stops it.
    drop(child.stdin.take());
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            assert!(status.success(), "{status}");
            break;
        }
        if Instant::now() > deadline {
            child.kill().unwrap();
            panic!("floe-mock-kafka did not exit on stdin EOF");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reopening_a_partition_at_an_earlier_offset_reads_from_there_again() {
    let kafka = EmbeddedKafka::start(1).unwrap();
    kafka.create_topic(TOPIC, 2).unwrap();
    produce(&kafka.producer().unwrap(), TOPIC, 0..400, 2); // 200 records per partition
    let src = source(kafka.bootstrap_servers(), TOPIC);
    let p0 = ShardId::kafka_partition(0);
    let p1 = ShardId::kafka_partition(1);
    let mut other = src.open(&p1, StartAt::Earliest).await.unwrap();
    assert_eq!(
        offsets(&read_n(other.as_mut(), 10).await),
        (0..10).collect::<Vec<_>>()
    );

    // Read 0..100 (more is prefetched), drop, reopen at 50: exactly 50.. again.
    let mut reader = src.open(&p0, StartAt::Earliest).await.unwrap();
    assert_eq!(
        offsets(&read_n(reader.as_mut(), 100).await),
        (0..100).collect::<Vec<_>>()
    );
    drop(reader);
    let mut reader = src
        .open(&p0, StartAt::At(Position::Offset(50)))
        .await
        .unwrap();
    assert_eq!(
        offsets(&read_n(reader.as_mut(), 150).await),
        (50..200).collect::<Vec<_>>()
    );
    assert!(reader
        .next_batch(10, Duration::from_millis(300))
        .await
        .unwrap()
        .is_empty());

    // The worker's way: open the new reader first (at the last hand-off), then drop the old
    // one. The new one takes the partition over; the old one fails if polled; dropping it
    // changes nothing for the new one.
    let mut old = src
        .open(&p0, StartAt::After(Position::Offset(9)))
        .await
        .unwrap();
    assert_eq!(
        offsets(&read_n(old.as_mut(), 30).await),
        (10..40).collect::<Vec<_>>()
    );
    let mut new = src
        .open(&p0, StartAt::After(Position::Offset(19)))
        .await
        .unwrap();
    let stale = old.next_batch(10, Duration::from_millis(100)).await;
    assert!(
        matches!(stale, Err(SourceError::Fatal { .. })),
        "{:?}",
        stale.map(|b| offsets(&b))
    );
    drop(old);
    tokio::time::sleep(Duration::from_millis(200)).await; // let the drop's release run
    assert_eq!(
        offsets(&read_n(new.as_mut(), 180).await),
        (20..200).collect::<Vec<_>>()
    );
    drop(reader); // an older generation: nothing happens to `new`
    tokio::time::sleep(Duration::from_millis(200)).await;
    produce(&kafka.producer().unwrap(), TOPIC, 400..402, 2); // offset 200 on each partition
    assert_eq!(offsets(&read_n(new.as_mut(), 1).await), [200]);

    // The other partition never noticed.
    assert_eq!(
        offsets(&read_n(other.as_mut(), 191).await),
        (10..201).collect::<Vec<_>>()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reopening_at_an_offset_the_broker_does_not_hold_fails_only_that_reader() {
    let kafka = EmbeddedKafka::start(1).unwrap();
    kafka.create_topic(TOPIC, 2).unwrap();
    produce(&kafka.producer().unwrap(), TOPIC, 0..200, 2);
    let src = source(kafka.bootstrap_servers(), TOPIC);
    let p0 = ShardId::kafka_partition(0);
    let p1 = ShardId::kafka_partition(1);
    let mut other = src.open(&p1, StartAt::Earliest).await.unwrap();
    let mut reader = src.open(&p0, StartAt::Earliest).await.unwrap();
    assert_eq!(
        offsets(&read_n(reader.as_mut(), 50).await),
        (0..50).collect::<Vec<_>>()
    );
    drop(reader);

    // At an offset, not after a checkpoint: a checkpoint past the log is refused at open, this
    // start fails at the first fetch — the stale error of that assignment must not leak.
    let mut lost = src
        .open(&p0, StartAt::At(Position::Offset(5000)))
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match lost.next_batch(10, Duration::from_millis(500)).await {
            Err(SourceError::PositionLost { shard, .. }) => {
                assert_eq!(shard, p0);
                break;
            }
            Ok(batch) => assert!(batch.is_empty(), "read records past the log end"),
            Err(e) => panic!("unexpected error {e}"),
        }
        assert!(Instant::now() < deadline, "no PositionLost");
    }
    // The other partition reads on, untouched.
    assert_eq!(
        offsets(&read_n(other.as_mut(), 100).await),
        (0..100).collect::<Vec<_>>()
    );

    // Reopened at a held offset (before the failed reader is dropped, as the worker does):
    // reads from there, no stale error of the previous assignment.
    let mut again = src
        .open(&p0, StartAt::At(Position::Offset(60)))
        .await
        .unwrap();
    drop(lost);
    assert_eq!(
        offsets(&read_n(again.as_mut(), 40).await),
        (60..100).collect::<Vec<_>>()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reports_lag_of_each_partition_of_the_shared_consumer() {
    let kafka = EmbeddedKafka::start(1).unwrap();
    kafka.create_topic(TOPIC, 2).unwrap();
    produce(&kafka.producer().unwrap(), TOPIC, 0..300, 2); // 150 per partition
    let src = source(kafka.bootstrap_servers(), TOPIC);
    let mut a = src
        .open(
            &ShardId::kafka_partition(0),
            StartAt::At(Position::Offset(0)),
        )
        .await
        .unwrap();
    let mut b = src
        .open(
            &ShardId::kafka_partition(1),
            StartAt::At(Position::Offset(100)),
        )
        .await
        .unwrap();
    assert_eq!(read_n(a.as_mut(), 10).await.len(), 10);
    assert_eq!(read_n(b.as_mut(), 20).await.len(), 20);
    // Statistics arrive every second, served by the source's main-queue thread.
    let deadline = Instant::now() + Duration::from_secs(10);
    while (a.lag().is_none() || b.lag().is_none()) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        (a.lag(), b.lag()),
        (Some(Lag::Records(140)), Some(Lag::Records(30)))
    );
}
