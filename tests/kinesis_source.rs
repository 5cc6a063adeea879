//! The Kinesis source against the local emulators (deploy/local): patched moto
//! (`FLOE_TEST_AWS_ENDPOINT`) and kinesalite (`FLOE_TEST_KINESALITE_ENDPOINT`), both with
//! realistic 56-digit sequence numbers, so positions are compared as big integers. Shard listing
//! with parents after a split and a merge, every start position, the end of a closed shard, KPL
//! de-aggregation, and resharding end to end through `floe run` with PyIceberg as the reader.
//!
//! Without the emulators' environment every test fails with instructions (scripts/test.sh, or
//! `deploy/local/aws-emulators.sh start` and its `env`): none passes silently.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::kinesis::TestStream;
use common::*;
use floe::model::{Position, SequenceNumber, ShardId};
use floe::source::kinesis::KinesisSource;
use floe::source::{ShardReader, Source, SourceError, SourceRecord, StartAt};
use md5::Digest;

/// A stream created for one test, with a unique name; [`TestStream::delete`] removes it.

/// Runs the check `$check(endpoint)` as two tests, `$check::moto` and `$check::kinesalite`.
macro_rules! on_both_emulators {
    ($check:ident) => {
        mod $check {
            #[tokio::test]
            async fn moto() {
                super::$check(&super::aws_endpoint()).await;
            }

            #[tokio::test]
            async fn kinesalite() {
                super::$check(&super::kinesalite_endpoint()).await;
            }
        }
    };
}

fn shard(id: u32) -> ShardId {
    ShardId(format!("shardId-{id:012}"))
}

fn seq(text: &str) -> Position {
    Position::Sequence(SequenceNumber::try_new(text).unwrap())
}

async fn open(source: &KinesisSource, shard: &ShardId, start: StartAt) -> Box<dyn ShardReader> {
    match source.open(shard, start).await {
        Ok(reader) => reader,
        Err(e) => panic!("open {shard}: {e}"),
    }
}

/// Reads until `n` records came or the shard ended (20 s at most), `batch` records per call.
async fn read(reader: &mut Box<dyn ShardReader>, n: usize, batch: usize) -> Vec<SourceRecord> {
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut out = Vec::new();
    while out.len() < n && !reader.shard_ended() && Instant::now() < deadline {
        out.extend(
            reader
                .next_batch(batch, Duration::from_millis(500))
                .await
                .unwrap(),
        );
    }
    out
}

/// Polls a reader that returned its shard's last record until it ends (10 s at most), checking
/// that no record comes.
async fn ends_without_another_record(reader: &mut Box<dyn ShardReader>) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !reader.shard_ended() {
        let got = reader
            .next_batch(2, Duration::from_millis(300))
            .await
            .unwrap();
        assert!(
            got.is_empty(),
            "a record after the last: {:?}",
            positions(&got)
        );
        assert!(Instant::now() < deadline, "closed shard never ended");
    }
}

fn positions(records: &[SourceRecord]) -> Vec<Position> {
    records.iter().map(|r| r.position.clone()).collect()
}

fn payloads(records: &[SourceRecord]) -> Vec<String> {
    records
        .iter()
        .map(|r| String::from_utf8(r.payload.clone()).unwrap())
        .collect()
}

fn assert_increasing(records: &[SourceRecord]) {
    assert!(
        records.windows(2).all(|w| w[0].position < w[1].position),
        "positions not increasing: {:?}",
        positions(records)
    );
}

// ---- shard listing ---------------------------------------------------------------------------

async fn lists_shards_with_parents_after_a_split_and_a_merge(endpoint: &str) {
    let stream = TestStream::create(endpoint, 2).await;
    stream.split_in_half("shardId-000000000000").await;
    // Open now: 2 and 3 (the halves of 0) and 1; 3 and 1 are adjacent.
    let open: Vec<String> = stream
        .open_shards()
        .await
        .iter()
        .map(|s| s.shard_id().to_string())
        .collect();
    assert_eq!(
        open,
        vec![
            "shardId-000000000002",
            "shardId-000000000003",
            "shardId-000000000001"
        ]
    );
    stream
        .merge("shardId-000000000003", "shardId-000000000001")
        .await;

    let mut listed = stream.source(100).list_shards().await.unwrap();
    listed.sort_by(|a, b| a.id.cmp(&b.id));
    let parents: Vec<(ShardId, Vec<ShardId>)> =
        listed.into_iter().map(|s| (s.id, s.parents)).collect();
    assert_eq!(
        parents,
        vec![
            (shard(0), vec![]),
            (shard(1), vec![]),
            (shard(2), vec![shard(0)]),
            (shard(3), vec![shard(0)]),
            (shard(4), vec![shard(3), shard(1)]),
        ]
    );
    stream.delete().await;
}

on_both_emulators!(lists_shards_with_parents_after_a_split_and_a_merge);

async fn refusals_map_to_source_errors(endpoint: &str) {
    let stream = TestStream::create(endpoint, 2).await;
    let source = stream.source(10);
    let Err(err) = source.open(&shard(7), StartAt::Earliest).await else {
        panic!("opened a shard that does not exist");
    };
    assert!(matches!(err, SourceError::NotFound { .. }), "{err}");
    // A checkpoint that is not this shard's: a corrupted checkpoint, not retryable.
    let (other, other_seq) = loop {
        let (s, n) = stream.put(&unique_name("k"), b"{}").await;
        if s == shard(1) {
            break (s, n);
        }
    };
    assert_eq!(other, shard(1));
    let Err(err) = source
        .open(&shard(0), StartAt::After(seq(&other_seq)))
        .await
    else {
        panic!("opened shard 0 after a sequence number of shard 1");
    };
    assert!(
        matches!(err, SourceError::InvalidPosition { .. }) && !err.is_retryable(),
        "{err}"
    );
    stream.delete().await;

    let missing = TestStream {
        client: aws_clients(endpoint).await.kinesis(),
        name: unique_name("floe-missing"),
    };
    let err = missing.source(10).list_shards().await.unwrap_err();
    assert!(matches!(err, SourceError::NotFound { .. }), "{err}");
}

on_both_emulators!(refusals_map_to_source_errors);

// ---- start positions -------------------------------------------------------------------------

async fn reads_from_trim_horizon_a_timestamp_and_after_a_checkpoint(endpoint: &str) {
    let stream = TestStream::create(endpoint, 1).await;
    let mut seqs = Vec::new();
    for i in 0..3 {
        seqs.push(stream.put("k", format!("r{i}").as_bytes()).await.1);
    }
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let between = floe_now_ms();
    tokio::time::sleep(Duration::from_millis(1100)).await;
    for i in 3..6 {
        seqs.push(stream.put("k", format!("r{i}").as_bytes()).await.1);
    }
    assert!(
        seqs.iter().all(|s| s.len() == 56),
        "realistic sequence numbers: {seqs:?}"
    );
    let source = stream.source(2);
    let s0 = shard(0);

    let mut reader = open(&source, &s0, StartAt::Earliest).await;
    let all = read(&mut reader, 6, 4).await;
    assert_eq!(
        positions(&all),
        seqs.iter().map(|s| seq(s)).collect::<Vec<_>>()
    );
    assert_eq!(payloads(&all), ["r0", "r1", "r2", "r3", "r4", "r5"]);
    assert_increasing(&all);
    assert!(all.iter().all(|r| r.key.as_deref() == Some(&b"k"[..])));
    assert!(all[0].arrival_ms < between && all[3].arrival_ms >= between);
    assert!(!reader.shard_ended(), "an open shard never ends");
    assert!(matches!(reader.lag(), Some(floe::source::Lag::Millis(_))));

    let mut reader = open(&source, &s0, StartAt::AtTimestamp(between)).await;
    assert_eq!(
        payloads(&read(&mut reader, 3, 10).await),
        ["r3", "r4", "r5"]
    );

    let mut reader = open(&source, &s0, StartAt::After(seq(&seqs[1]))).await;
    let resumed = read(&mut reader, 4, 10).await;
    assert_eq!(payloads(&resumed), ["r2", "r3", "r4", "r5"]);

    // Resuming after the newest record waits for new ones.
    let mut reader = open(&source, &s0, StartAt::After(seq(&seqs[5]))).await;
    assert!(reader
        .next_batch(10, Duration::from_millis(500))
        .await
        .unwrap()
        .is_empty());
    stream.put("k", b"r6").await;
    assert_eq!(payloads(&read(&mut reader, 1, 10).await), ["r6"]);
    stream.delete().await;
}

fn floe_now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

on_both_emulators!(reads_from_trim_horizon_a_timestamp_and_after_a_checkpoint);

// ---- the end of a closed shard ---------------------------------------------------------------

async fn a_closed_shard_ends_exactly_after_its_last_record(endpoint: &str) {
    let stream = TestStream::create(endpoint, 1).await;
    let mut parent_seqs = Vec::new();
    for i in 0..5 {
        parent_seqs.push(
            stream
                .put(&format!("k{i}"), format!("p{i}").as_bytes())
                .await
                .1,
        );
    }
    stream.split_in_half("shardId-000000000000").await;
    let mut child_seqs = Vec::new();
    for i in 0..4 {
        let (shard, s) = stream
            .put(&format!("k{i}"), format!("c{i}").as_bytes())
            .await;
        assert_ne!(
            shard,
            self::shard(0),
            "a put after the split goes to a child"
        );
        child_seqs.push(s);
    }
    let source = stream.source(2);

    let mut reader = open(&source, &shard(0), StartAt::Earliest).await;
    let mut got = Vec::new();
    while got.len() < 5 {
        assert!(!reader.shard_ended(), "ended before its last record");
        got.extend(
            reader
                .next_batch(2, Duration::from_millis(500))
                .await
                .unwrap(),
        );
    }
    assert_eq!(payloads(&got), ["p0", "p1", "p2", "p3", "p4"]);
    // The end is known with the last records (moto) or with the next, empty, response
    // (kinesalite): either way it comes without another record.
    ends_without_another_record(&mut reader).await;

    // A reader resuming after the last record ends without a record.
    let mut reader = open(&source, &shard(0), StartAt::After(seq(&parent_seqs[4]))).await;
    ends_without_another_record(&mut reader).await;

    // Children start above the parent's sequence numbers (56 digits: big-integer order).
    let last_parent = seq(&parent_seqs[4]);
    let mut readers = [
        open(&source, &shard(1), StartAt::Earliest).await,
        open(&source, &shard(2), StartAt::Earliest).await,
    ];
    let mut per_child: Vec<Vec<SourceRecord>> = vec![Vec::new(), Vec::new()];
    let deadline = Instant::now() + Duration::from_secs(20);
    while per_child.iter().map(Vec::len).sum::<usize>() < 4 {
        assert!(Instant::now() < deadline, "children records missing");
        for (reader, got) in readers.iter_mut().zip(per_child.iter_mut()) {
            got.extend(
                reader
                    .next_batch(10, Duration::from_millis(100))
                    .await
                    .unwrap(),
            );
            assert!(!reader.shard_ended());
        }
    }
    per_child
        .iter()
        .for_each(|records| assert_increasing(records));
    let children: Vec<SourceRecord> = per_child.into_iter().flatten().collect();
    assert_eq!(children.len(), 4);
    assert!(children.iter().all(|r| r.position > last_parent));
    let mut child_positions = positions(&children);
    child_positions.sort();
    let mut expected: Vec<Position> = child_seqs.iter().map(|s| seq(s)).collect();
    expected.sort();
    assert_eq!(child_positions, expected);
    stream.delete().await;
}

on_both_emulators!(a_closed_shard_ends_exactly_after_its_last_record);

// ---- KPL aggregation -------------------------------------------------------------------------

fn varint(mut v: u64, out: &mut Vec<u8>) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn length_delimited(field: u64, bytes: &[u8], out: &mut Vec<u8>) {
    varint((field << 3) | 2, out);
    varint(bytes.len() as u64, out);
    out.extend_from_slice(bytes);
}

/// A KPL aggregated record written out byte by byte (independent of floe's encoder): magic,
/// protobuf `AggregatedRecord { partition_key_table = 1; records = 3 { partition_key_index = 1;
/// data = 3 } }`, MD5 of the protobuf.
fn kpl_aggregate(keys: &[&str], records: &[(u64, &str)]) -> Vec<u8> {
    let mut message = Vec::new();
    for key in keys {
        length_delimited(1, key.as_bytes(), &mut message);
    }
    for (key_index, data) in records {
        let mut record = Vec::new();
        varint(1 << 3, &mut record);
        varint(*key_index, &mut record);
        length_delimited(3, data.as_bytes(), &mut record);
        length_delimited(3, &record, &mut message);
    }
    let mut out = vec![0xF3, 0x89, 0x9A, 0xC2];
    out.extend_from_slice(&message);
    out.extend_from_slice(&md5::Md5::digest(&message));
    out
}

async fn kpl_aggregate_deaggregates_and_resumes_after_a_sub_record(endpoint: &str) {
    let stream = TestStream::create(endpoint, 1).await;
    let (_, first) = stream.put("plain", b"before").await;
    let aggregate = kpl_aggregate(
        &["a", "b"],
        &[(0, "u0"), (1, "u1"), (0, "u2"), (1, "u3"), (0, "u4")],
    );
    let (_, agg) = stream.put("outer", &aggregate).await;
    let mut corrupt = kpl_aggregate(&["a"], &[(0, "x")]);
    *corrupt.last_mut().unwrap() ^= 0xFF;
    let (_, bad) = stream.put("plain", &corrupt).await;
    let (_, last) = stream.put("plain", b"after").await;

    let source = stream.source(100);
    let mut reader = open(&source, &shard(0), StartAt::Earliest).await;
    let got = read(&mut reader, 8, 100).await;
    let sub =
        |i: u64| Position::Sequence(SequenceNumber::try_new(&agg).unwrap().with_sub_sequence(i));
    assert_eq!(
        positions(&got),
        vec![
            seq(&first),
            sub(0),
            sub(1),
            sub(2),
            sub(3),
            sub(4),
            seq(&bad),
            seq(&last)
        ]
    );
    assert_increasing(&got);
    assert_eq!(got[2].payload, b"u1");
    assert_eq!(
        got[2].key.as_deref(),
        Some(&b"b"[..]),
        "the user record's key"
    );
    assert_eq!(
        got[6].payload, corrupt,
        "a bad MD5 makes it a plain record, kept whole"
    );

    // A checkpoint after user record k resumes at k + 1, each once, then the next record.
    for k in 0..5u64 {
        let mut reader = open(&source, &shard(0), StartAt::After(sub(k))).await;
        let resumed = read(&mut reader, 6 - k as usize, 100).await;
        let mut expected: Vec<Position> = (k + 1..5).map(sub).collect();
        expected.extend([seq(&bad), seq(&last)]);
        assert_eq!(positions(&resumed), expected, "after sub-record {k}");
    }
    stream.delete().await;
}

on_both_emulators!(kpl_aggregate_deaggregates_and_resumes_after_a_sub_record);

// ---- resharding end to end -------------------------------------------------------------------

/// `floe run` config: channel "it" reads `stream` from TRIM_HORIZON on the emulator at
/// `endpoint` into it.events under `dir` (SQLite leases and catalog, local DLQ).
fn kinesis_config(dir: &Path, endpoint: &str, stream: &str, worker_id: &str) -> String {
    let kafka = config_toml(dir, "unused:9092", worker_id, 4);
    let kafka_source = "  kind = \"kafka\"\n  bootstrap_servers = \"unused:9092\"\n  topic = \"events\"\n  initial_position = \"earliest\"\n";
    assert!(kafka.contains(kafka_source));
    let kinesis_source = format!(
        "  kind = \"kinesis\"\n  stream_name = \"{stream}\"\n  initial_position = \"trim_horizon\"\n  max_records_per_call = 500\n  poll_interval = \"200ms\"\n"
    );
    let aws =
        format!("[aws]\nregion = \"us-east-1\"\nendpoint_url = \"{endpoint}\"\n\n[lease_store]");
    kafka
        .replacen(kafka_source, &kinesis_source, 1)
        .replacen("[lease_store]", &aws, 1)
}

/// Produces `per_key` records for each of `counters.len()` partition keys, round robin, one put at
/// a time (so a key's records get increasing sequence numbers): `Event`s with a unique id and
/// `attrs = {"pk": key, "n": per-key counter}`.
async fn produce(stream: &TestStream, counters: &mut [u64], next_id: &mut u64, per_key: u64) {
    for _ in 0..per_key {
        for (k, counter) in counters.iter_mut().enumerate() {
            let key = format!("key-{k}");
            let mut event: serde_json::Value = serde_json::from_str(
                &floe::tools::sample_events::event_json(*next_id, SEED, BASE_MS, 0),
            )
            .unwrap();
            event["attrs"] = serde_json::json!({"pk": key, "n": counter.to_string()});
            stream.put(&key, event.to_string().as_bytes()).await;
            *counter += 1;
            *next_id += 1;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resharding_end_to_end_delivers_each_record_once_in_per_key_order() {
    let endpoint = aws_endpoint();
    let python = python();
    let dir = tempfile::tempdir().unwrap();
    let stream = TestStream::create(&endpoint, 2).await;
    let (mut counters, mut next_id) = (vec![0u64; 12], 0u64);
    produce(&stream, &mut counters, &mut next_id, 10).await;

    let start = |id: &str| {
        Worker::start_with(
            dir.path(),
            id,
            &kinesis_config(dir.path(), &endpoint, &stream.name, id),
        )
    };
    let (w1, w2) = (start("w1"), start("w2"));
    tokio::time::sleep(Duration::from_secs(4)).await;
    produce(&stream, &mut counters, &mut next_id, 10).await;
    // Split shard 0 while its records are read but not committed yet.
    stream.split_in_half("shardId-000000000000").await;
    produce(&stream, &mut counters, &mut next_id, 10).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    // Merge the upper half of 0 with 1: a child with two parents.
    stream
        .merge("shardId-000000000003", "shardId-000000000001")
        .await;
    produce(&stream, &mut counters, &mut next_id, 10).await;
    let total = next_id;

    let (mut w1, mut w2) = (w1, w2);
    let deadline = Instant::now() + Duration::from_secs(240);
    let (rows, dlq) = loop {
        let (rows, dlq) = delivered(dir.path()).await;
        if rows + dlq >= total || Instant::now() > deadline {
            break (rows, dlq);
        }
        for (id, w) in [("w1", &mut w1), ("w2", &mut w2)] {
            if let Some(status) = w.child.try_wait().unwrap() {
                panic!("{id} exited early ({status}):\n{}", log_of(dir.path(), id));
            }
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let s1 = w1.terminate();
    let s2 = w2.terminate();
    assert!(
        s1.success() && s2.success(),
        "workers exit 0 on SIGTERM:\n{}\n{}",
        log_of(dir.path(), "w1"),
        log_of(dir.path(), "w2")
    );
    assert_eq!(
        (rows, dlq),
        (total, 0),
        "every record delivered:\n{}",
        log_of(dir.path(), "w1")
    );

    // The independent reader: every row, in commit order.
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/py/read_order.py");
    let out = Command::new(python)
        .arg(script)
        .arg(dir.path().join("catalog.sqlite"))
        .arg(dir.path().join("warehouse"))
        .arg("it.events")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "PyIceberg reader failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let table: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let rows = table["rows"].as_array().unwrap();
    let mut ids: Vec<u64> = rows.iter().map(|r| r[3].as_u64().unwrap()).collect();
    ids.sort();
    assert_eq!(
        ids,
        (0..total).collect::<Vec<_>>(),
        "each record exactly once"
    );

    // Per partition key, commit order (snapshot, data file, row) is production order, which is
    // sequence-number order across the parent and child shards.
    let mut by_key: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for r in rows {
        let attrs = &r[4];
        by_key
            .entry(attrs["pk"].as_str().unwrap().to_string())
            .or_default()
            .push(attrs["n"].as_str().unwrap().parse().unwrap());
    }
    assert_eq!(by_key.len(), counters.len());
    for (key, ns) in &by_key {
        assert_eq!(
            ns,
            &(0..40).collect::<Vec<u64>>(),
            "rows of {key} out of sequence order"
        );
    }

    // The parents are checkpointed at SHARD_END; the open shards at a sequence number.
    let checkpoints: BTreeMap<String, serde_json::Value> =
        serde_json::from_str(table["properties"]["floe.checkpoints"].as_str().unwrap()).unwrap();
    for closed in [0, 1, 3] {
        assert_eq!(
            checkpoints.get(&shard(closed).0).and_then(|v| v.as_str()),
            Some("SHARD_END"),
            "{checkpoints:?}"
        );
    }
    for open in [2, 4] {
        let v = checkpoints[&shard(open).0].as_str().unwrap();
        assert_eq!(v.len(), 56, "{checkpoints:?}");
    }
    stream.delete().await;
}
