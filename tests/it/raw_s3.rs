//! Raw delivery to a general-purpose S3 bucket (`destination.kind = "s3"`, issue 9), end to end
//! with real processes against the local emulators: Kafka (the Kafka-protocol mock broker) and
//! Kinesis (kinesalite) into objects on moto's S3, SQLite leases. The objects are listed, read,
//! decompressed and split into records independently of floe's own code paths, and compared with
//! what was produced: every record exactly once, JSON or not, each object one shard's contiguous
//! range under a key naming its first and last position. The Kafka run SIGKILLs a worker
//! mid-flight and restarts it.
//!
//! Component tests (committer and S3 store, in-process) pin the parts a process test cannot aim
//! at: a committer that crashed between its checkpoint write and publishing, a rejected batch's
//! staged objects, multipart uploads, SSE-KMS and the expected bucket owner.

use crate::common;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::kinesis::TestStream;
use common::*;
use floe::commit::Committer;
use floe::config::raw::RawCompression;
use floe::config::S3Location;
use floe::lease::memory::MemoryLeaseStore;
use floe::lease::{BatchStore, Delivered, LeaseKey, LeaseSpec, LeaseStore};
use floe::model::{
    BatchFiles, CheckpointRange, PendingBatch, Position, RawObject, ShardId, ShardRange,
};
use floe::raw::target::RawTarget;
use floe::raw::{EncodedObject, RawStore};

/// A customer-managed key ARN (the emulator records it on each object; it does not check it).
const KMS_KEY: &str = "arn:aws:kms:us-east-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab";
/// The emulator's account.
const OWNER: &str = "123456789012";

/// Record `id`'s payload: a JSON document, a line of text that is not JSON, or bytes that are not
/// even UTF-8 — raw means raw. Never a newline (the objects are newline-delimited).
fn payload(id: u64) -> Vec<u8> {
    match id % 3 {
        0 => format!(
            "{{\"id\":{id},\"pad\":\"{}\"}}",
            "x".repeat((id % 40) as usize)
        )
        .into_bytes(),
        1 => format!("not json {id} {{").into_bytes(),
        _ => {
            let mut b = vec![0xff, 0x00, 0xfe];
            b.extend_from_slice(format!("bin {id}").as_bytes());
            b
        }
    }
}

/// `floe run` config: channel "it" from `source` (a `[channel.source]` body) to raw objects in
/// `bucket`, compressed with `compression`; SQLite leases under `dir`.
fn raw_config(
    dir: &Path,
    worker_id: &str,
    aws: &str,
    source: &str,
    bucket: &str,
    compression: &str,
) -> String {
    format!(
        r#"[worker]
id = "{worker_id}"
shutdown_timeout = "20s"
metrics_address = "off"

{aws}

[lease_store]
kind = "sqlite"
path = "{d}/leases.sqlite"
lease_duration = "4s"
renew_interval = "1s"

[[channel]]
name = "it"
  [channel.source]
{source}
  [channel.destination]
  kind = "s3"
  bucket = "{bucket}"
  expected_bucket_owner = "{OWNER}"
  kms_key_arn = "{KMS_KEY}"
  key_template = "raw/{{channel}}/{{yyyy}}/{{MM}}/{{dd}}/{{HH}}/"
  compression = "{compression}"
  data_freshness = "10s"
"#,
        d = dir.display()
    )
}

/// One published object, read back.
#[derive(Debug)]
struct Object {
    key: String,
    shard: String,
    first: String,
    last: String,
    records: Vec<Vec<u8>>,
}

/// Every object under `prefix` (never the staging prefix), decompressed and split into records.
async fn read_objects(
    endpoint: &str,
    bucket: &str,
    prefix: &str,
    codec: RawCompression,
) -> Vec<Object> {
    let s3 = aws_clients(endpoint).await.s3();
    let mut out = Vec::new();
    let mut pages = s3
        .list_objects_v2()
        .bucket(bucket)
        .prefix(prefix)
        .into_paginator()
        .send();
    while let Some(page) = pages.next().await {
        for o in page.unwrap().contents() {
            let key = o.key().unwrap().to_string();
            let got = s3
                .get_object()
                .bucket(bucket)
                .key(&key)
                .send()
                .await
                .unwrap();
            assert_eq!(
                got.server_side_encryption(),
                Some(&aws_sdk_s3::types::ServerSideEncryption::AwsKms),
                "{key} is SSE-KMS"
            );
            assert_eq!(got.ssekms_key_id(), Some(KMS_KEY), "{key} under the key");
            let body = got.body.collect().await.unwrap().into_bytes();
            let data = codec.decompress(&body).unwrap();
            assert_eq!(data.last(), Some(&b'\n'), "{key} ends with the delimiter");
            let records: Vec<Vec<u8>> = data[..data.len() - 1]
                .split(|b| *b == b'\n')
                .map(<[u8]>::to_vec)
                .collect();
            // <prefix><yyyy>/<MM>/<dd>/<HH>/it-<shard>-<first>-<last><ext>
            let name = key.rsplit('/').next().unwrap();
            let name = name.strip_suffix(codec.extension()).unwrap();
            let parts: Vec<&str> = name.rsplitn(3, '-').collect();
            let (last, first, head) = (parts[0], parts[1], parts[2]);
            let shard = head.strip_prefix("it-").unwrap().to_string();
            let dated = &key[prefix.len()..key.len() - key.rsplit('/').next().unwrap().len()];
            assert_eq!(dated.len(), "2026/07/09/20/".len(), "{key}");
            out.push(Object {
                key: key.clone(),
                shard,
                first: first.to_string(),
                last: last.to_string(),
                records,
            });
        }
    }
    out
}

/// Waits until the objects under `prefix` hold `total` records (or the deadline), checking the
/// workers are alive. Returns the objects.
async fn wait_objects(
    endpoint: &str,
    bucket: &str,
    codec: RawCompression,
    total: usize,
    dir: &Path,
    workers: &mut [(&str, &mut Worker)],
) -> Vec<Object> {
    let deadline = Instant::now() + Duration::from_secs(180);
    loop {
        let objects = read_objects(endpoint, bucket, "raw/it/", codec).await;
        let n: usize = objects.iter().map(|o| o.records.len()).sum();
        if n >= total || Instant::now() > deadline {
            return objects;
        }
        for (id, w) in workers.iter_mut() {
            if let Some(status) = w.child.try_wait().unwrap() {
                panic!("{id} exited early ({status}):\n{}", log_of(dir, id));
            }
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// The concatenation of every object, compared with what was produced: no duplicate, none
/// missing.
fn assert_exactly_once(objects: &[Object], produced: &[Vec<u8>]) {
    let mut got: Vec<&Vec<u8>> = objects.iter().flat_map(|o| &o.records).collect();
    let mut want: Vec<&Vec<u8>> = produced.iter().collect();
    got.sort();
    want.sort();
    let dups = got.windows(2).filter(|w| w[0] == w[1]).count();
    assert_eq!(dups, 0, "{dups} records delivered twice");
    assert_eq!(got.len(), want.len(), "records delivered");
    assert!(got == want, "the objects hold exactly the produced records");
}

/// Kafka → raw gzip objects; a worker is SIGKILLed mid-flight and restarted: the concatenated
/// objects are exactly the produced records; every object is one partition's contiguous offsets
/// `first..=last` as its key says; `floe channel describe` shows the delivered checkpoints.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_to_raw_objects_exactly_once_across_a_sigkill() {
    let endpoint = aws_endpoint();
    let bucket = create_bucket(&endpoint, "raw").await;
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start();
    let total = 3_000u64;
    let mut produced = produce_payloads(&broker.bootstrap, 0..total / 2, payload);
    let aws = format!("[aws]\nregion = \"us-east-1\"\nendpoint_url = \"{endpoint}\"");
    let source = format!(
        "  kind = \"kafka\"\n  bootstrap_servers = \"{}\"\n  topic = \"events\"\n  initial_position = \"earliest\"",
        broker.bootstrap
    );
    let config = |id: &str| raw_config(dir.path(), id, &aws, &source, &bucket, "gzip");
    let start = |id: &str| Worker::start_with(dir.path(), id, &config(id));
    let w1 = start("w1");
    let w2 = start("w2");
    tokio::time::sleep(Duration::from_secs(12)).await;
    produced.extend(produce_payloads(
        &broker.bootstrap,
        total / 2..total,
        payload,
    ));
    // Mid-flight: w1 holds buffered records and maybe batches not committed yet.
    tokio::time::sleep(Duration::from_secs(3)).await;
    w1.signal("KILL");
    drop(w1);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let mut w1 = start("w1");
    // And the other worker (one of them is the committer) a little later.
    tokio::time::sleep(Duration::from_secs(5)).await;
    w2.signal("KILL");
    drop(w2);
    let mut w2 = start("w2");
    let objects = wait_objects(
        &endpoint,
        &bucket,
        RawCompression::Gzip,
        total as usize,
        dir.path(),
        &mut [("w1", &mut w1), ("w2", &mut w2)],
    )
    .await;
    assert!(
        w1.terminate().success(),
        "w1:\n{}",
        log_of(dir.path(), "w1")
    );
    assert!(
        w2.terminate().success(),
        "w2:\n{}",
        log_of(dir.path(), "w2")
    );
    // Nothing more after the drain.
    let objects_after = read_objects(&endpoint, &bucket, "raw/it/", RawCompression::Gzip).await;
    assert_eq!(objects_after.len(), objects.len());
    assert_exactly_once(&objects_after, &produced);

    // Each object: one partition's contiguous offsets, named by its first and last.
    let mut by_shard: BTreeMap<String, Vec<(i64, i64)>> = BTreeMap::new();
    for o in &objects_after {
        let (first, last): (i64, i64) = (o.first.parse().unwrap(), o.last.parse().unwrap());
        assert_eq!(
            (last - first + 1) as usize,
            o.records.len(),
            "{} holds offsets {first}..={last}",
            o.key
        );
        by_shard
            .entry(o.shard.clone())
            .or_default()
            .push((first, last));
    }
    assert_eq!(by_shard.len(), 4, "every partition delivered");
    for (shard, mut ranges) in by_shard {
        ranges.sort();
        let mut next = 0;
        for (first, last) in ranges {
            assert_eq!(
                first, next,
                "partition {shard}: objects are contiguous, no overlap"
            );
            next = last + 1;
        }
    }

    // describe shows the raw channel like an Iceberg one: destination, checkpoints, last commit.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_floe"))
        .args(["channel", "describe", "it", "--json", "--config"])
        .arg(dir.path().join("w1.toml"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let d: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let d = &d[0];
    assert_eq!(d["state"], "ACTIVE", "{d}");
    assert_eq!(
        d["table"],
        format!("s3://{bucket}/raw/{{channel}}/{{yyyy}}/{{MM}}/{{dd}}/{{HH}}/"),
        "{d}"
    );
    assert!(d["last_commit_at"].is_string(), "{d}");
    let checkpoints: u64 = d["shards"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["checkpoint"].as_str().unwrap().parse::<u64>().unwrap() + 1)
        .sum();
    assert_eq!(checkpoints, total, "checkpoints cover every offset: {d}");
}

/// Kinesis (kinesalite, 56-digit sequence numbers) → raw zstd objects, two shards, JSON and
/// non-JSON records: exactly once, each object named by its shard and first/last sequence
/// numbers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kinesis_to_raw_objects_exactly_once() {
    let endpoint = aws_endpoint();
    let kinesalite = kinesalite_endpoint();
    let bucket = create_bucket(&endpoint, "raw").await;
    let dir = tempfile::tempdir().unwrap();
    let stream = TestStream::create(&kinesalite, 2).await;
    let total = 600u64;
    let records: Vec<(String, Vec<u8>)> = (0..total)
        .map(|id| (format!("key-{}", id % 16), payload(id)))
        .collect();
    stream.put_all(&records[..300]).await;
    let aws = format!(
        "[aws]\nregion = \"us-east-1\"\nendpoint_url = \"{endpoint}\"\n[aws.endpoints]\nkinesis = \"{kinesalite}\""
    );
    let source = format!(
        "  kind = \"kinesis\"\n  stream_name = \"{}\"\n  initial_position = \"trim_horizon\"\n  max_records_per_call = 500\n  poll_interval = \"200ms\"",
        stream.name
    );
    let config = raw_config(dir.path(), "w1", &aws, &source, &bucket, "zstd");
    // `floe channel create` checks the bucket takes a staged object and records ACTIVE.
    std::fs::write(dir.path().join("w1.toml"), &config).unwrap();
    let created = std::process::Command::new(env!("CARGO_BIN_EXE_floe"))
        .args(["channel", "create", "it", "--config"])
        .arg(dir.path().join("w1.toml"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&created.stdout);
    assert!(
        created.status.success() && text.contains("ACTIVE"),
        "{text}{}",
        String::from_utf8_lossy(&created.stderr)
    );
    assert!(
        read_staged(&endpoint, &bucket).await.is_empty(),
        "the check object is removed"
    );
    let metrics = format!("127.0.0.1:{}", free_port());
    let config = config.replace(
        "metrics_address = \"off\"",
        &format!("metrics_address = \"{metrics}\""),
    );
    let mut w1 = Worker::start_with(dir.path(), "w1", &config);
    tokio::time::sleep(Duration::from_secs(4)).await;
    stream.put_all(&records[300..]).await;
    let objects = wait_objects(
        &endpoint,
        &bucket,
        RawCompression::Zstd,
        total as usize,
        dir.path(),
        &mut [("w1", &mut w1)],
    )
    .await;
    // The metrics of a raw channel are an Iceberg channel's: records read, rows delivered,
    // commits, objects written, freshness target. The last objects are published inside the
    // round and its rows counted when the round returns: scrape until the count caught up
    // (found by a full run under load: one scrape landed in between).
    let mut scrape = String::new();
    for _ in 0..50 {
        let (status, text) = get(&metrics, "/metrics").expect("scrape /metrics");
        assert_eq!(status, 200);
        scrape = text;
        if sum(
            &samples(&scrape),
            "floe_rows_delivered_total",
            &["channel=\"it\""],
        ) >= total as f64
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let m = samples(&scrape);
    let ch = "channel=\"it\"";
    assert_eq!(
        sum(&m, "floe_records_read_total", &[ch]),
        total as f64,
        "{scrape}"
    );
    assert_eq!(
        sum(&m, "floe_rows_delivered_total", &[ch]),
        total as f64,
        "{scrape}"
    );
    assert!(
        sum(&m, "floe_commits_total", &[ch, "outcome=\"committed\""]) >= 1.0,
        "{scrape}"
    );
    assert!(
        sum(&m, "floe_data_files_written_total", &[ch]) >= 2.0,
        "{scrape}"
    );
    assert_eq!(
        sum(&m, "floe_data_freshness_target_seconds", &[ch]),
        10.0,
        "{scrape}"
    );
    assert!(
        w1.terminate().success(),
        "w1:\n{}",
        log_of(dir.path(), "w1")
    );
    let produced: Vec<Vec<u8>> = records.into_iter().map(|(_, p)| p).collect();
    assert_exactly_once(&objects, &produced);
    let shards: std::collections::BTreeSet<&str> =
        objects.iter().map(|o| o.shard.as_str()).collect();
    assert_eq!(
        shards.into_iter().collect::<Vec<_>>(),
        ["shardId-000000000000", "shardId-000000000001"]
    );
    for o in &objects {
        let (first, last): (Position, Position) =
            (o.first.parse().unwrap(), o.last.parse().unwrap());
        assert_eq!(o.first.len(), 56, "{}", o.key);
        assert!(first <= last, "{}", o.key);
    }
    // No staged object left behind after a clean shutdown.
    let staged = read_staged(&endpoint, &bucket).await;
    assert!(staged.is_empty(), "{staged:?}");
    stream.delete().await;
}

async fn read_staged(endpoint: &str, bucket: &str) -> Vec<String> {
    aws_clients(endpoint)
        .await
        .s3()
        .list_objects_v2()
        .bucket(bucket)
        .prefix(floe::raw::STAGING_PREFIX)
        .send()
        .await
        .unwrap()
        .contents()
        .iter()
        .filter_map(|o| o.key().map(str::to_string))
        .collect()
}

// ---- component tests: committer and S3 store ------------------------------------------------

fn location(bucket: &str) -> S3Location {
    S3Location {
        bucket: bucket.into(),
        prefix: String::new(),
        expected_bucket_owner: Some(OWNER.into()),
        kms_key_arn: Some(KMS_KEY.into()),
    }
}

fn object(key: &str, body: &[u8]) -> EncodedObject {
    EncodedObject {
        key: key.into(),
        shard: ShardId::kafka_partition(0),
        records: 1,
        body: body.to_vec(),
    }
}

fn raw_batch(objects: &[RawObject], after: Option<i64>, last: i64, counter: u64) -> PendingBatch {
    PendingBatch {
        channel: "c".into(),
        batch_id: uuid::Uuid::now_v7(),
        worker_id: "w".into(),
        shards: vec![ShardRange {
            shard: ShardId::kafka_partition(0),
            range: CheckpointRange {
                after_exclusive: after.map(Position::Offset),
                last_inclusive: Position::Offset(last),
            },
            lease_counter: counter,
        }],
        files: BatchFiles::Raw {
            objects: objects.to_vec(),
        },
        num_rows: 1,
        num_dead_lettered: 0,
        dead_lettered_by_code: Default::default(),
        data_bytes: 1,
        oldest_read_at_ms: 0,
    }
}

async fn object_bytes(endpoint: &str, bucket: &str, key: &str) -> Option<Vec<u8>> {
    aws_clients(endpoint)
        .await
        .s3()
        .get_object()
        .bucket(bucket)
        .key(key)
        .send()
        .await
        .ok()?
        .body
        .collect()
        .await
        .ok()
        .map(|b| b.into_bytes().to_vec())
}

/// A committer that wrote the checkpoints and crashed before publishing: the next committer
/// (higher epoch) finds the batch listed as committed, publishes it (not treated as a
/// duplicate), and a duplicate of the same range staged by another worker is rejected: its
/// staged object deleted, never published. A stale committer cannot move the checkpoints.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_committed_batch_is_published_by_the_next_committer_and_a_duplicate_never_is() {
    let endpoint = aws_endpoint();
    let bucket = create_bucket(&endpoint, "raw").await;
    let s3 = aws_clients(&endpoint).await.s3();
    let store = RawStore::new(s3, location(&bucket), "c");
    let leases = Arc::new(MemoryLeaseStore::new());
    leases
        .ensure_leases("c", &[LeaseSpec::new(LeaseKey::shard("0"))])
        .await
        .unwrap();

    let a_objects = store
        .stage(uuid::Uuid::now_v7(), vec![object("raw/c-0-0-9", b"a\n")])
        .await
        .unwrap();
    let a = raw_batch(&a_objects, None, 9, 0);
    let dup_objects = store
        .stage(uuid::Uuid::now_v7(), vec![object("raw/c-0-0-11", b"dup\n")])
        .await
        .unwrap();
    let dup = raw_batch(&dup_objects, None, 11, 0);
    leases.put_batch(&a).await.unwrap();
    leases.put_batch(&dup).await.unwrap();
    // Committer epoch 1 committed `a` (the compare-and-swap) and crashed before publishing.
    let mut checkpoints = floe::model::Checkpoints::default();
    checkpoints
        .0
        .insert(ShardId::kafka_partition(0), Position::Offset(9));
    leases
        .put_delivered(
            &Delivered {
                channel: "c".into(),
                checkpoints,
                committer_epoch: 1,
                last_commit_id: Some(uuid::Uuid::now_v7()),
                committed_batch_ids: vec![a.batch_id],
                version: 0,
            },
            None,
        )
        .await
        .unwrap();
    assert_eq!(object_bytes(&endpoint, &bucket, "raw/c-0-0-9").await, None);

    let l: Arc<dyn LeaseStore> = leases.clone();
    let b: Arc<dyn BatchStore> = leases.clone();
    let committer = Committer::new(
        "c",
        RawTarget::new("c", store.clone(), b.clone()),
        l.clone(),
        b.clone(),
        2,
    );
    let report = committer.run_round().await.unwrap();
    assert_eq!((report.recovered, report.rejected), (1, 1), "{report:?}");
    assert_eq!(
        object_bytes(&endpoint, &bucket, "raw/c-0-0-9")
            .await
            .as_deref(),
        Some(&b"a\n"[..])
    );
    assert_eq!(
        object_bytes(&endpoint, &bucket, "raw/c-0-0-11").await,
        None,
        "duplicate never published"
    );
    assert!(
        read_staged(&endpoint, &bucket).await.is_empty(),
        "staged objects deleted"
    );
    assert!(leases.list_pending("c").await.unwrap().is_empty());
    let delivered = leases.get_delivered("c").await.unwrap().unwrap();
    assert_eq!(delivered.committer_epoch, 2);

    // The stale committer (epoch 1) steps down and moves nothing.
    let next_objects = store
        .stage(uuid::Uuid::now_v7(), vec![object("raw/c-0-10-12", b"n\n")])
        .await
        .unwrap();
    leases
        .put_batch(&raw_batch(&next_objects, Some(9), 12, 0))
        .await
        .unwrap();
    let stale = Committer::new("c", RawTarget::new("c", store.clone(), b.clone()), l, b, 1);
    assert!(matches!(
        stale.run_round().await,
        Err(floe::commit::CommitError::Fenced { .. })
    ));
    assert_eq!(
        object_bytes(&endpoint, &bucket, "raw/c-0-10-12").await,
        None
    );
    let report = committer.run_round().await.unwrap();
    assert_eq!(report.committed, 1);
    assert_eq!(
        object_bytes(&endpoint, &bucket, "raw/c-0-10-12")
            .await
            .as_deref(),
        Some(&b"n\n"[..])
    );
    let delivered = leases.get_delivered("c").await.unwrap().unwrap();
    assert_eq!(
        delivered.checkpoints.get(&ShardId::kafka_partition(0)),
        Some(&Position::Offset(12))
    );
}

/// Objects above the threshold go up as multipart uploads (parts of 5 MiB), with SSE-KMS and the
/// expected owner on every request; publishing copies them whole. A bucket of another account
/// is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_objects_use_multipart_uploads_and_the_owner_is_checked() {
    let endpoint = aws_endpoint();
    let bucket = create_bucket(&endpoint, "raw").await;
    let s3 = aws_clients(&endpoint).await.s3();
    let store = RawStore::new(s3.clone(), location(&bucket), "c").with_multipart(6 << 20, 5 << 20);
    let body: Vec<u8> = (0..(12u32 << 20) / 8)
        .flat_map(|i| format!("{i:07}\n").into_bytes())
        .collect();
    let staged = store
        .stage(uuid::Uuid::now_v7(), vec![object("big/c-0-0-1", &body)])
        .await
        .unwrap();
    let head = s3
        .head_object()
        .bucket(&bucket)
        .key(&staged[0].staged_key)
        .send()
        .await
        .unwrap();
    assert!(
        head.e_tag().unwrap_or_default().contains("-3"),
        "a 3-part multipart upload: {:?}",
        head.e_tag()
    );
    assert_eq!(head.ssekms_key_id(), Some(KMS_KEY));
    store.publish(&staged).await.unwrap();
    // Idempotent: publishing again (a committer that crashed before finishing) is a no-op.
    store.publish(&staged).await.unwrap();
    assert_eq!(
        object_bytes(&endpoint, &bucket, "big/c-0-0-1").await,
        Some(body)
    );
    assert!(read_staged(&endpoint, &bucket).await.is_empty());

    let mut other = location(&bucket);
    other.expected_bucket_owner = Some("111111111111".into());
    let refused = RawStore::new(s3, other, "c").check_writable().await;
    // Refused as a permission problem, which `floe run` reports with exit 78 instead of
    // retrying forever (found by a review).
    assert_eq!(
        refused
            .expect_err("a bucket of another account is refused")
            .kind(),
        std::io::ErrorKind::PermissionDenied
    );
}
