//! The Kinesis source against the local emulators (deploy/local): patched moto
//! (`FLOE_TEST_AWS_ENDPOINT`) and kinesalite (`FLOE_TEST_KINESALITE_ENDPOINT`), both with
//! realistic 56-digit sequence numbers, so positions are compared as big integers. Shard listing
//! with parents after a split and a merge, every start position, the end of a closed shard, KPL
//! de-aggregation, and resharding end to end through `floe run` with PyIceberg as the reader.
//!
//! Without the emulators' environment every test fails with instructions (scripts/test.sh, or
//! `deploy/local/aws-emulators.sh start` and its `env`): none passes silently.

use crate::common;

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

/// Where a check runs: the emulator its stream is created on, and how the source reads it.
#[derive(Debug, Clone)]
struct Target {
    /// The emulator the test stream lives on (and that a polling source calls).
    endpoint: String,
    /// Read with enhanced fan-out through the EFO emulator in front of kinesalite.
    efo: bool,
}

impl Target {
    fn moto() -> Self {
        Target {
            endpoint: aws_endpoint(),
            efo: false,
        }
    }

    fn kinesalite() -> Self {
        Target {
            endpoint: kinesalite_endpoint(),
            efo: false,
        }
    }

    fn efo() -> Self {
        Target {
            endpoint: kinesalite_endpoint(),
            efo: true,
        }
    }

    /// The source reading `stream`: polling with `max_records_per_call`, or with enhanced
    /// fan-out as a consumer registered for this test.
    async fn source(&self, stream: &TestStream, max_records_per_call: u32) -> KinesisSource {
        if self.efo {
            stream.fan_out_source().await
        } else {
            stream.source(max_records_per_call)
        }
    }
}

/// Runs the check `$check(target)` as three tests: `$check::moto` and `$check::kinesalite`
/// (polling) and `$check::efo` (enhanced fan-out, kinesalite behind the EFO emulator).
macro_rules! on_every_emulator {
    ($check:ident) => {
        mod $check {
            #[tokio::test]
            async fn moto() {
                super::$check(super::Target::moto()).await;
            }

            #[tokio::test]
            async fn kinesalite() {
                super::$check(super::Target::kinesalite()).await;
            }

            #[tokio::test]
            async fn efo() {
                super::$check(super::Target::efo()).await;
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
        out.extend(batch_of(reader, batch, 500).await);
    }
    out
}

/// One `next_batch(max, wait_ms)`. A retryable error leaves a reader usable (the
/// [`ShardReader`] contract) and counts as an empty batch: an enhanced fan-out reader reports
/// a refused re-subscription once and goes on by itself. Any other error fails the test.
async fn batch_of(
    reader: &mut Box<dyn ShardReader>,
    max: usize,
    wait_ms: u64,
) -> Vec<SourceRecord> {
    match reader.next_batch(max, Duration::from_millis(wait_ms)).await {
        Ok(batch) => batch,
        Err(e) if e.is_retryable() => Vec::new(),
        Err(e) => panic!("next_batch: {e}"),
    }
}

/// Reads whatever comes until `until`.
async fn read_until(reader: &mut Box<dyn ShardReader>, until: Instant) -> Vec<SourceRecord> {
    let mut out = Vec::new();
    while Instant::now() < until {
        out.extend(batch_of(reader, 50, 200).await);
    }
    out
}

/// The error a reader of `shard` from `start` fails with: from `open` (polling), or from its
/// first `next_batch` calls (enhanced fan-out subscribes in the background), within 20 s.
async fn open_error(source: &KinesisSource, shard: &ShardId, start: StartAt) -> SourceError {
    let mut reader = match source.open(shard, start).await {
        Err(e) => return e,
        Ok(reader) => reader,
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        match reader.next_batch(10, Duration::from_millis(500)).await {
            Err(e) if !e.is_retryable() => return e,
            Ok(batch) => assert!(batch.is_empty(), "records from a refused start"),
            Err(_) => {}
        }
        assert!(Instant::now() < deadline, "{shard} opened without an error");
    }
}

/// Polls a reader that returned its shard's last record until it ends (10 s at most), checking
/// that no record comes.
async fn ends_without_another_record(reader: &mut Box<dyn ShardReader>) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !reader.shard_ended() {
        let got = batch_of(reader, 2, 300).await;
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

async fn lists_shards_with_parents_after_a_split_and_a_merge(target: Target) {
    let stream = TestStream::create(&target.endpoint, 2).await;
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

    let mut listed = target
        .source(&stream, 100)
        .await
        .list_shards()
        .await
        .unwrap();
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

on_every_emulator!(lists_shards_with_parents_after_a_split_and_a_merge);

async fn refusals_map_to_source_errors(target: Target) {
    let stream = TestStream::create(&target.endpoint, 2).await;
    let source = target.source(&stream, 10).await;
    let err = open_error(&source, &shard(7), StartAt::Earliest).await;
    assert!(matches!(err, SourceError::NotFound { .. }), "{err}");
    // A checkpoint that is not this shard's: a corrupted checkpoint, not retryable.
    let (other, other_seq) = loop {
        let (s, n) = stream.put(&unique_name("k"), b"{}").await;
        if s == shard(1) {
            break (s, n);
        }
    };
    assert_eq!(other, shard(1));
    let err = open_error(&source, &shard(0), StartAt::After(seq(&other_seq))).await;
    assert!(
        matches!(err, SourceError::InvalidPosition { .. }) && !err.is_retryable(),
        "{err}"
    );
    stream.delete().await;

    let missing = TestStream {
        client: aws_clients(&target.endpoint).await.kinesis(),
        name: unique_name("floe-missing"),
    };
    // Shards are listed by ListShards in both read modes.
    let err = missing.source(10).list_shards().await.unwrap_err();
    assert!(matches!(err, SourceError::NotFound { .. }), "{err}");
}

on_every_emulator!(refusals_map_to_source_errors);

// ---- start positions -------------------------------------------------------------------------

async fn reads_from_trim_horizon_a_timestamp_and_after_a_checkpoint(target: Target) {
    let stream = TestStream::create(&target.endpoint, 1).await;
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
    let source = target.source(&stream, 2).await;
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

    drop(reader);
    let mut reader = open(&source, &s0, StartAt::AtTimestamp(between)).await;
    assert_eq!(
        payloads(&read(&mut reader, 3, 10).await),
        ["r3", "r4", "r5"]
    );

    drop(reader);
    let mut reader = open(&source, &s0, StartAt::After(seq(&seqs[1]))).await;
    let resumed = read(&mut reader, 4, 10).await;
    assert_eq!(payloads(&resumed), ["r2", "r3", "r4", "r5"]);

    // Resuming after the newest record waits for new ones.
    drop(reader);
    let mut reader = open(&source, &s0, StartAt::After(seq(&seqs[5]))).await;
    assert!(batch_of(&mut reader, 10, 500).await.is_empty());
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

on_every_emulator!(reads_from_trim_horizon_a_timestamp_and_after_a_checkpoint);

// ---- the end of a closed shard ---------------------------------------------------------------

async fn a_closed_shard_ends_exactly_after_its_last_record(target: Target) {
    let stream = TestStream::create(&target.endpoint, 1).await;
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
    let source = target.source(&stream, 2).await;

    let mut reader = open(&source, &shard(0), StartAt::Earliest).await;
    let mut got = Vec::new();
    while got.len() < 5 {
        assert!(!reader.shard_ended(), "ended before its last record");
        got.extend(batch_of(&mut reader, 2, 500).await);
    }
    assert_eq!(payloads(&got), ["p0", "p1", "p2", "p3", "p4"]);
    // The end is known with the last records (moto) or with the next, empty, response
    // (kinesalite): either way it comes without another record.
    ends_without_another_record(&mut reader).await;

    // A reader resuming after the last record ends without a record.
    drop(reader);
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
            got.extend(batch_of(reader, 10, 100).await);
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

on_every_emulator!(a_closed_shard_ends_exactly_after_its_last_record);

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

async fn kpl_aggregate_deaggregates_and_resumes_after_a_sub_record(target: Target) {
    let stream = TestStream::create(&target.endpoint, 1).await;
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

    let source = target.source(&stream, 100).await;
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
    drop(reader);
    for k in 0..5u64 {
        let mut reader = open(&source, &shard(0), StartAt::After(sub(k))).await;
        let resumed = read(&mut reader, 6 - k as usize, 100).await;
        let mut expected: Vec<Position> = (k + 1..5).map(sub).collect();
        expected.extend([seq(&bad), seq(&last)]);
        assert_eq!(positions(&resumed), expected, "after sub-record {k}");
    }
    stream.delete().await;
}

on_every_emulator!(kpl_aggregate_deaggregates_and_resumes_after_a_sub_record);

// ---- resharding end to end -------------------------------------------------------------------

/// `floe run` config: channel "it" reads `stream` from TRIM_HORIZON on the emulator at
/// `endpoint` into it.events under `dir` (SQLite leases and catalog, local DLQ); with `efo`,
/// with enhanced fan-out through the EFO emulator instead (trusting its CA).
fn kinesis_config(dir: &Path, endpoint: &str, stream: &str, worker_id: &str, efo: bool) -> String {
    let kafka = config_toml(dir, "unused:9092", worker_id, 4);
    let kafka_source = "  kind = \"kafka\"\n  bootstrap_servers = \"unused:9092\"\n  topic = \"events\"\n  initial_position = \"earliest\"\n";
    assert!(kafka.contains(kafka_source));
    let (kinesis_source, aws) = if efo {
        (
            format!("  kind = \"kinesis\"\n  stream_name = \"{stream}\"\n  initial_position = \"trim_horizon\"\n  read_mode = \"enhanced_fan_out\"\n"),
            format!(
                "[aws]\nregion = \"us-east-1\"\nendpoint_url = \"{}\"\nca_bundle = \"{}\"\n\n[lease_store]",
                kinesis_efo_endpoint(),
                kinesis_efo_ca()
            ),
        )
    } else {
        (
            format!("  kind = \"kinesis\"\n  stream_name = \"{stream}\"\n  initial_position = \"trim_horizon\"\n  max_records_per_call = 500\n  poll_interval = \"200ms\"\n"),
            format!("[aws]\nregion = \"us-east-1\"\nendpoint_url = \"{endpoint}\"\n\n[lease_store]"),
        )
    };
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
    resharding_end_to_end(Target::moto()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn efo_resharding_end_to_end_delivers_each_record_once_in_per_key_order() {
    resharding_end_to_end(Target::efo()).await;
}

/// Two `floe run` workers deliver a 2-shard stream while shard 0 is split and a child merged
/// with shard 1: each record once, per-key order across parents and children, parents
/// checkpointed at SHARD_END; once the workers stopped (releasing the parents' leases), a worker
/// started afresh reads only the children and its commit prunes the parents' SHARD_END.
async fn resharding_end_to_end(target: Target) {
    let endpoint = target.endpoint.clone();
    let dir = tempfile::tempdir().unwrap();
    let stream = TestStream::create(&endpoint, 2).await;
    let (mut counters, mut next_id) = (vec![0u64; 12], 0u64);
    produce(&stream, &mut counters, &mut next_id, 10).await;

    let start = |id: &str| {
        Worker::start_with(
            dir.path(),
            id,
            &kinesis_config(dir.path(), &endpoint, &stream.name, id, target.efo),
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

    let table = read_rows_in_commit_order(dir.path());
    assert_each_record_once_in_key_order(&table, total, counters.len(), 40);

    // The parents are checkpointed at SHARD_END (their leases were held until the workers
    // stopped); the open shards at a sequence number.
    let checkpoints = table_checkpoints_of(&table);
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

    // Issue 33: the parents' leases are released now; the next commit prunes their SHARD_END,
    // and a worker started afresh reads only the children, after their checkpoints.
    produce(&stream, &mut counters, &mut next_id, 10).await;
    let total = next_id;
    let mut w3 = start("w3");
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let (rows, dlq) = delivered(dir.path()).await;
        if rows + dlq >= total {
            break;
        }
        if let Some(status) = w3.child.try_wait().unwrap() {
            panic!("w3 exited early ({status}):\n{}", log_of(dir.path(), "w3"));
        }
        assert!(
            Instant::now() < deadline,
            "{rows} of {total} delivered after the restart:\n{}",
            log_of(dir.path(), "w3")
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert!(w3.terminate().success(), "{}", log_of(dir.path(), "w3"));
    let table = read_rows_in_commit_order(dir.path());
    assert_each_record_once_in_key_order(&table, total, counters.len(), 50);
    let checkpoints = table_checkpoints_of(&table);
    assert_eq!(
        checkpoints.keys().cloned().collect::<Vec<_>>(),
        vec![shard(2).0, shard(4).0],
        "only the open shards keep a checkpoint: {checkpoints:?}"
    );
    stream.delete().await;
}

/// `floe.checkpoints` of a table read by [`read_rows_in_commit_order`].
fn table_checkpoints_of(table: &serde_json::Value) -> BTreeMap<String, serde_json::Value> {
    serde_json::from_str(table["properties"]["floe.checkpoints"].as_str().unwrap()).unwrap()
}

/// The independent reader: it.events under `dir` read by PyIceberg, rows in commit order
/// (snapshot, data file, row), with the table's properties.
fn read_rows_in_commit_order(dir: &Path) -> serde_json::Value {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/py/read_order.py");
    let out = Command::new(python())
        .arg(script)
        .arg(dir.join("catalog.sqlite"))
        .arg(dir.join("warehouse"))
        .arg("it.events")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "PyIceberg reader failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Every id `0..total` exactly once, and per partition key (`keys` of them, `per_key` records
/// each, see [`produce`]) commit order is production order, which is sequence-number order
/// across parent and child shards.
fn assert_each_record_once_in_key_order(
    table: &serde_json::Value,
    total: u64,
    keys: usize,
    per_key: u64,
) {
    let rows = table["rows"].as_array().unwrap();
    let mut ids: Vec<u64> = rows.iter().map(|r| r[3].as_u64().unwrap()).collect();
    ids.sort();
    assert_eq!(
        ids,
        (0..total).collect::<Vec<_>>(),
        "each record exactly once"
    );
    let mut by_key: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for r in rows {
        let attrs = &r[4];
        by_key
            .entry(attrs["pk"].as_str().unwrap().to_string())
            .or_default()
            .push(attrs["n"].as_str().unwrap().parse().unwrap());
    }
    assert_eq!(by_key.len(), keys);
    for (key, ns) in &by_key {
        assert_eq!(
            ns,
            &(0..per_key).collect::<Vec<u64>>(),
            "rows of {key} out of sequence order"
        );
    }
}

// ---- enhanced fan-out: subscriptions that end, zombies, back-pressure --------------------------

/// Calls the EFO emulator's test hooks (`POST /_floe/cut`, `GET /_floe/subscriptions`;
/// deploy/local/kinesis-efo/README.md) over HTTPS, trusting its CA.
async fn efo_hook(method: &str, path: &str, body: serde_json::Value) -> serde_json::Value {
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let ca = std::fs::read(kinesis_efo_ca()).unwrap();
    let client = reqwest::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(&ca).unwrap())
        .build()
        .unwrap();
    let url = format!("{}{path}", kinesis_efo_endpoint());
    let request = match method {
        "POST" => client.post(&url).json(&body),
        _ => client.get(&url),
    };
    let response = request.send().await.unwrap();
    assert!(
        response.status().is_success(),
        "{method} {path}: {}",
        response.status()
    );
    response.json().await.unwrap()
}

/// The emulator's subscriptions of `consumer_arn` (oldest first): `EndReason` is `null` while
/// open, else `expired`, `cut`, `taken_over`, `client_gone`, `shard_end`, ….
async fn subscriptions_of(consumer_arn: &str) -> Vec<serde_json::Value> {
    let all = efo_hook("GET", "/_floe/subscriptions", serde_json::Value::Null).await;
    all["Subscriptions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["ConsumerARN"] == consumer_arn)
        .cloned()
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn efo_subscriptions_that_expire_or_are_cut_resume_without_gap_or_repeat() {
    let target = Target::efo();
    let stream = TestStream::create(&target.endpoint, 1).await;
    let source = stream.fan_out_source().await;
    let consumer = source.consumer_arn().unwrap().to_string();
    // The producer puts a record every 40 ms until told to stop.
    let producing = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let producer = {
        let (stream, producing) = (
            TestStream {
                client: stream.client.clone(),
                name: stream.name.clone(),
            },
            producing.clone(),
        );
        tokio::spawn(async move {
            let mut seqs = Vec::new();
            while producing.load(std::sync::atomic::Ordering::SeqCst) {
                let n = seqs.len();
                seqs.push(stream.put("k", format!("r{n}").as_bytes()).await.1);
                tokio::time::sleep(Duration::from_millis(40)).await;
            }
            seqs
        })
    };
    let mut reader = open(&source, &shard(0), StartAt::Earliest).await;
    let mut got: Vec<SourceRecord> = Vec::new();
    let started = Instant::now();
    // The emulator ends each subscription after FLOE_EFO_SUBSCRIPTION_SECONDS (20 s in
    // deploy/local/aws-emulators.sh): read across that end first, then cut three times.
    let expiry = Duration::from_secs(23);
    got.extend(read_until(&mut reader, started + expiry).await);
    let mut at = expiry;
    // The last one ends the stream with ResourceNotFoundException, as a deregistered consumer
    // does: retried like the others, not an error that stops the worker.
    for (mode, error) in [
        ("close", "InternalFailureException"),
        ("error", "InternalFailureException"),
        ("reset", "InternalFailureException"),
        ("error", "ResourceNotFoundException"),
    ] {
        let cut = efo_hook(
            "POST",
            "/_floe/cut",
            serde_json::json!({"ConsumerARN": consumer, "Mode": mode, "ErrorType": error}),
        )
        .await;
        assert_eq!(cut["Cut"], 1, "one open subscription to cut ({mode})");
        at += Duration::from_secs(4);
        got.extend(read_until(&mut reader, started + at).await);
    }
    producing.store(false, std::sync::atomic::Ordering::SeqCst);
    let seqs = producer.await.unwrap();
    got.extend(read(&mut reader, seqs.len().saturating_sub(got.len()), 100).await);

    assert_eq!(
        positions(&got),
        seqs.iter().map(|s| seq(s)).collect::<Vec<_>>(),
        "every record once, in order, across {} subscriptions",
        subscriptions_of(&consumer).await.len()
    );
    let ends: Vec<String> = subscriptions_of(&consumer)
        .await
        .iter()
        .map(|s| s["EndReason"].as_str().unwrap_or("open").to_string())
        .collect();
    assert!(
        ends.iter().filter(|e| *e == "expired").count() >= 1
            && ends.iter().filter(|e| *e == "cut").count() == 4,
        "the subscriptions ended by expiry and by the four cuts: {ends:?}"
    );
    drop(reader);
    stream.delete().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn efo_a_reader_that_is_not_pulled_stops_the_subscription_within_its_bound() {
    let target = Target::efo();
    let stream = TestStream::create(&target.endpoint, 1).await;
    // 24 MiB in 96 records of 256 KiB: far more than the reader may hold.
    for i in 0..96 {
        let data = format!("{i:>8}").repeat(32 * 1024);
        stream.put(&format!("k{i}"), data.as_bytes()).await;
    }
    let source = stream.fan_out_source().await;
    let consumer = source.consumer_arn().unwrap().to_string();
    let mut reader = open(&source, &shard(0), StartAt::Earliest).await;
    let first = read(&mut reader, 1, 1).await;
    assert_eq!(first.len(), 1);
    // The worker stops pulling (its buffer is full): the event stream must stop too.
    let sent = || async {
        subscriptions_of(&consumer).await[0]["Bytes"]
            .as_u64()
            .unwrap()
    };
    tokio::time::sleep(Duration::from_secs(3)).await;
    let held = sent().await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let later = sent().await;
    assert_eq!(
        held, later,
        "the emulator kept sending to a reader nobody pulls"
    );
    // The documented bound (floe::source::kinesis::efo): BUFFERED_EVENTS + 2 events plus the
    // HTTP/2 stream window (2 MiB). Events of this emulator are at most ~1 MiB of JSON.
    let bound = (floe::source::kinesis::efo::BUFFERED_EVENTS as u64 + 2) * (1 << 20) + (2 << 20);
    eprintln!("efo back-pressure: {held} bytes sent to a reader that stopped pulling (bound {bound} + one event)");
    assert!(
        held <= bound + (1 << 20),
        "{held} bytes sent while the worker pulled one record (bound {bound})"
    );
    assert!(
        held < 24 << 20,
        "back-pressure reached the emulator: {held} bytes sent"
    );
    // Pulling again gets everything, in order.
    let mut all = first;
    all.extend(read(&mut reader, 95, 10).await);
    assert_eq!(
        payloads(&all).iter().map(|p| p.len()).collect::<Vec<_>>(),
        vec![256 * 1024; 96]
    );
    assert_increasing(&all);
    drop(reader);
    stream.delete().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn efo_a_worker_stopped_past_its_lease_makes_the_new_owner_lose_or_repeat_nothing() {
    let target = Target::efo();
    let dir = tempfile::tempdir().unwrap();
    let stream = TestStream::create(&target.endpoint, 2).await;
    let (mut counters, mut next_id) = (vec![0u64; 8], 0u64);
    produce(&stream, &mut counters, &mut next_id, 5).await;
    let start = |id: &str| {
        Worker::start_with(
            dir.path(),
            id,
            &kinesis_config(dir.path(), &target.endpoint, &stream.name, id, true),
        )
    };
    let (w1, w2) = (start("w1"), start("w2"));
    tokio::time::sleep(Duration::from_secs(6)).await;
    produce(&stream, &mut counters, &mut next_id, 5).await;
    // w1 freezes holding its subscriptions; its leases (4 s) expire and w2 takes its shards,
    // subscribing as the same consumer while the zombie's subscriptions are still open.
    w1.signal("STOP");
    produce(&stream, &mut counters, &mut next_id, 5).await;
    tokio::time::sleep(Duration::from_secs(14)).await;
    produce(&stream, &mut counters, &mut next_id, 5).await;
    w1.signal("CONT");
    produce(&stream, &mut counters, &mut next_id, 5).await;
    let total = next_id;
    let deadline = Instant::now() + Duration::from_secs(180);
    loop {
        let (rows, dlq) = delivered(dir.path()).await;
        if rows + dlq >= total || Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    // Let the resumed zombie run on for a while: it must not deliver anything twice.
    tokio::time::sleep(Duration::from_secs(6)).await;
    let (s1, s2) = (w1.terminate(), w2.terminate());
    let logs = format!(
        "--- w1\n{}\n--- w2\n{}",
        log_of(dir.path(), "w1"),
        log_of(dir.path(), "w2")
    );
    assert!(
        s1.success() && s2.success(),
        "workers exit 0 on SIGTERM:\n{logs}"
    );
    assert_eq!(delivered(dir.path()).await, (total, 0), "{logs}");
    let table = read_rows_in_commit_order(dir.path());
    assert_each_record_once_in_key_order(&table, total, counters.len(), 25);
    // The zombie's subscription was taken over by the new owner's (same consumer, same shard).
    let consumer = format!("stream/{}/consumer/floe-it:", stream.name);
    let all = efo_hook("GET", "/_floe/subscriptions", serde_json::Value::Null).await;
    let ends: Vec<&str> = all["Subscriptions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["ConsumerARN"].as_str().unwrap().contains(&consumer))
        .filter_map(|s| s["EndReason"].as_str())
        .collect();
    assert!(
        ends.contains(&"taken_over"),
        "no subscription was taken over: {ends:?}\n{logs}"
    );
    stream.delete().await;
}

/// `floe ARGS` to completion.
fn floe_cli(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_floe"))
        .args(args)
        .output()
        .unwrap()
}

/// The status of the stream consumer `name` of `stream` (`ACTIVE`, …), `None` when there is none.
async fn consumer_status(stream: &TestStream, name: &str) -> Option<String> {
    use floe::source::kinesis::{api::StreamRef, efo};
    let client = kinesis_efo_clients().await.kinesis();
    efo::describe_consumer(&client, &StreamRef::Name(stream.name.clone()), name)
        .await
        .unwrap()
        .map(|(_, status)| status)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn efo_the_channel_registers_its_consumer_and_channel_delete_deregisters_it() {
    let target = Target::efo();
    let dir = tempfile::tempdir().unwrap();
    let stream = TestStream::create(&target.endpoint, 1).await;
    stream.put("k", b"{}").await;
    let toml = kinesis_config(dir.path(), &target.endpoint, &stream.name, "w1", true);
    let config = dir.path().join("floe.toml");
    std::fs::write(&config, &toml).unwrap();
    assert_eq!(consumer_status(&stream, "floe-it").await, None);

    let worker = Worker::start_with(dir.path(), "w1", &toml);
    let deadline = Instant::now() + Duration::from_secs(30);
    while consumer_status(&stream, "floe-it").await.as_deref() != Some("ACTIVE") {
        assert!(
            Instant::now() < deadline,
            "no ACTIVE consumer:\n{}",
            log_of(dir.path(), "w1")
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let config = config.display().to_string();
    let described = |out: std::process::Output| -> serde_json::Value {
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()[0]["stream_consumer"]
            .clone()
    };
    let describe = ["channel", "describe", "--config", &config, "it", "--json"];
    let consumer = described(floe_cli(&describe));
    assert_eq!(consumer["name"], "floe-it");
    assert_eq!(consumer["status"], "ACTIVE");
    assert!(
        consumer["arn"]
            .as_str()
            .unwrap()
            .contains("/consumer/floe-it:"),
        "{consumer}"
    );
    let out = floe_cli(&[
        "channel", "delete", "--config", &config, "it", "--wait", "30s",
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("deregistered the stream consumer \"floe-it\""),
        "{stdout}"
    );
    assert!(worker.terminate().success(), "{}", log_of(dir.path(), "w1"));
    let status = consumer_status(&stream, "floe-it").await;
    assert!(
        matches!(status.as_deref(), None | Some("DELETING")),
        "{status:?}"
    );
    // Deleting again is harmless; a worker of the deleted channel does not register it again.
    let again = floe_cli(&["channel", "delete", "--config", &config, "it"]);
    assert!(
        again.status.success(),
        "{}",
        String::from_utf8_lossy(&again.stderr)
    );
    tokio::time::sleep(Duration::from_secs(1)).await;
    let w2 = floe_cli(&["run", "--config", &config]);
    assert_eq!(
        w2.status.code(),
        Some(78),
        "{}",
        String::from_utf8_lossy(&w2.stderr)
    );
    assert_eq!(consumer_status(&stream, "floe-it").await, None);
    let consumer = described(floe_cli(&describe));
    assert_eq!(consumer["status"], "NOT_REGISTERED", "{consumer}");
    stream.delete().await;
}

#[tokio::test]
async fn efo_a_stream_with_20_consumers_or_a_deleting_consumer_is_refused_naming_the_key() {
    use floe::source::kinesis::{api::StreamRef, efo};
    let target = Target::efo();
    let stream = TestStream::create(&target.endpoint, 1).await;
    let client = kinesis_efo_clients().await.kinesis();
    let name = StreamRef::Name(stream.name.clone());
    let key = "channel.source.consumer_name";
    let wait = Duration::from_secs(30);
    // Registering twice is one consumer.
    let first = efo::register_consumer(&client, &name, "c0", key, wait)
        .await
        .unwrap();
    let again = efo::register_consumer(&client, &name, "c0", key, wait)
        .await
        .unwrap();
    assert_eq!(first, again);
    // A consumer being deleted.
    assert!(efo::deregister_consumer(&client, &name, "c0")
        .await
        .unwrap());
    let e = efo::register_consumer(&client, &name, "c0", key, wait)
        .await
        .unwrap_err();
    assert!(
        matches!(&e, efo::ConsumerError::Refused(m) if m.contains(key) && m.contains("DELETING")),
        "{e}"
    );
    // The stream's 20 consumers.
    for i in 1..=20 {
        efo::register_consumer(&client, &name, &format!("c{i}"), key, wait)
            .await
            .unwrap();
    }
    let e = efo::register_consumer(&client, &name, "c21", key, wait)
        .await
        .unwrap_err();
    assert!(
        matches!(&e, efo::ConsumerError::Refused(m) if m.contains(key) && m.contains("20 registered consumers")),
        "{e}"
    );
    stream.delete().await;
}

/// Fan-out by a field on Kinesis with enhanced fan-out (docs/routing.md, "Fan-out by a
/// field"): each table's member channel registers its own consumer `floe-<channel>.<table>` and
/// reads the whole stream; every table holds exactly its records; `floe channel delete`
/// deregisters every member's consumer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn efo_a_routed_channel_registers_a_consumer_per_table_and_delete_deregisters_them() {
    let target = Target::efo();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let stream = TestStream::create(&target.endpoint, 2).await;
    let total = 120u64;
    let mut expected: BTreeMap<String, u64> = BTreeMap::new();
    for id in 0..total {
        let json = floe::tools::sample_events::event_json(id, SEED, BASE_MS, 0);
        let source = serde_json::from_str::<serde_json::Value>(&json).unwrap()["source"]
            .as_str()
            .unwrap()
            .to_string();
        let table = match source.as_str() {
            "checkout" | "search" => format!("t_{source}"),
            _ => "t_other".to_string(),
        };
        *expected.entry(table).or_default() += 1;
        stream.put(&id.to_string(), json.as_bytes()).await;
    }
    let toml = kinesis_config(d, &target.endpoint, &stream.name, "w1", true).replacen(
        "  table = \"events\"\n",
        "  table = \"{route}\"\n  route_field = \"source\"\n  routes = { checkout = \"t_checkout\", search = \"t_search\" }\n  unroutable = \"t_other\"\n",
        1,
    );
    let config = d.join("floe.toml");
    std::fs::write(&config, &toml).unwrap();
    let worker = Worker::start_with(d, "w1", &toml);
    let rows = |table: &str| {
        let read = run_py_reader(
            "read_table.py",
            &[
                d.join("catalog.sqlite").as_os_str(),
                d.join("warehouse").as_os_str(),
                format!("it.{table}").as_ref(),
            ],
        );
        (
            read["rows"].as_u64().unwrap(),
            read["distinct_ids"].as_u64().unwrap(),
        )
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let mut delivered = 0;
        for table in expected.keys() {
            let dlq: floe::dlq::Dlq =
                floe::dlq::LocalDlq::new(d.join("dlq"), format!("it.{table}")).into();
            let catalog = floe::catalog::open_sql_catalog(
                &d.join("catalog.sqlite"),
                &d.join("warehouse"),
                "floe",
            )
            .await;
            if let Ok(catalog) = catalog {
                let ident = iceberg::TableIdent::new(
                    iceberg::NamespaceIdent::new("it".into()),
                    table.clone(),
                );
                let (r, dead) =
                    floe::tools::quickstart::counts(catalog.as_ref(), &ident, &dlq).await;
                delivered += r + dead;
            }
        }
        if delivered >= total {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "delivered {delivered} of {total}:\n{}",
            log_of(d, "w1")
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    for (table, n) in &expected {
        assert_eq!(rows(table), (*n, *n), "{table}: exactly its records once");
        let consumer = format!("floe-it.{table}");
        assert_eq!(
            consumer_status(&stream, &consumer).await.as_deref(),
            Some("ACTIVE"),
            "{consumer}"
        );
    }
    let config = config.display().to_string();
    let out = floe_cli(&[
        "channel", "delete", "--config", &config, "it", "--wait", "30s",
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for table in expected.keys() {
        assert!(
            stdout.contains(&format!(
                "deregistered the stream consumer \"floe-it.{table}\""
            )),
            "{stdout}"
        );
    }
    assert!(worker.terminate().success(), "{}", log_of(d, "w1"));
    stream.delete().await;
}
