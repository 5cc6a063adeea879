//! Component test of the worker loop with the in-memory source: losing one shard's lease while a
//! multi-shard batch is in flight must not stall the shards the worker still holds.

use crate::common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use floe::lease::{BatchStore, HeldLeases, LeaseStore};
use floe::model::{Position, ShardId};
use floe::source::memory::MemorySource;
use floe::tools::sample_events::event_json;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn losing_one_shard_mid_batch_rewinds_the_others_instead_of_stalling_them() {
    let rig = common::WorkerRig::new("wl").await;
    let (s0, s1) = (ShardId::kafka_partition(0), ShardId::kafka_partition(1));
    let mut leases = rig.take_shard_leases(&[s0.clone(), s1.clone()]).await;
    let store = rig.store.clone();

    let source = Arc::new(MemorySource::with_partitions(2));
    let base = 1_783_627_200_000;
    for id in 0..10 {
        source.append(&s0, None, event_json(id, 3, base, 1).into_bytes(), base);
        source.append(
            &s1,
            None,
            event_json(100 + id, 3, base, 1).into_bytes(),
            base,
        );
    }
    let (held_tx, held_rx) = watch::channel(HeldLeases {
        shards: leases.clone(),
        committer: None,
        ..Default::default()
    });
    let (stop, worker_task) = rig.spawn_worker(
        source.clone(),
        Duration::from_millis(200),
        Duration::from_secs(1),
        held_rx,
    );

    // The first batch (both shards) is handed off but not committed yet.
    let deadline = Instant::now() + Duration::from_secs(10);
    while store.list_pending("wl").await.unwrap().is_empty() {
        assert!(Instant::now() < deadline, "no batch handed off");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Shard 1 is stolen by another worker: that batch is now stale as a whole.
    let l1 = leases.remove(&s1).unwrap();
    store.take_lease(&l1, "w2").await.unwrap();
    held_tx
        .send(HeldLeases {
            shards: leases.clone(),
            committer: None,
            ..Default::default()
        })
        .unwrap();
    for id in 10..20 {
        source.append(&s0, None, event_json(id, 3, base, 1).into_bytes(), base);
    }

    // A committer commits what it can; shard 0 must reach offset 19.
    let committer = rig.committer(1);
    rig.wait_for_checkpoint(
        &s0,
        Position::Offset(19),
        Duration::from_secs(20),
        Some(&committer),
    )
    .await;
    stop.cancel();
    worker_task.await.unwrap().unwrap();
    let ids = rig.sorted_table_ids().await;
    assert_eq!(
        ids,
        (0..20).collect::<Vec<i64>>(),
        "shard 0 exactly once; shard 1 is the new owner's"
    );
}

/// Regression (issue 8, found by loadtest/bench.sh): the lease manager drops a lease from its
/// held set when renewals stall past lease_duration and adds it back, under the same counter,
/// once a renewal succeeds. A flush that sees the lease missing drops its buffer; if the lease
/// is back by the time the worker syncs its leases, the readers must still rewind to their last
/// hand-off, or the next batch's range covers the dropped records (checkpointed, never written).
/// The flapping is random, so the test repeats it over many flushes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_that_flaps_during_flushes_loses_no_record() {
    let rig = common::WorkerRig::new("wf").await;
    let s0 = ShardId::kafka_partition(0);
    let leases = rig.take_shard_leases(std::slice::from_ref(&s0)).await;
    let held = HeldLeases {
        shards: leases,
        committer: None,
        ..Default::default()
    };
    let (held_tx, held_rx) = watch::channel(held.clone());

    let source = Arc::new(MemorySource::with_partitions(1));
    let (stop, worker_task) = rig.spawn_worker(
        source.clone(),
        Duration::from_millis(5),
        Duration::from_secs(1),
        held_rx,
    );
    let committer = rig.committer(1);
    let (committing, committer_task) = run_committer(committer, Duration::from_millis(20));

    // Records arrive while another thread drops the lease from the held set and puts it back
    // after 0–300 µs: some flushes see it missing and their lease sync (microseconds later)
    // sees it back. Tokio's timer is too coarse for such gaps, so the thread spins.
    let held_tx = Arc::new(held_tx);
    let flapping = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let flapper = {
        let (held_tx, flapping, held) = (held_tx.clone(), flapping.clone(), held.clone());
        std::thread::spawn(move || {
            let spin = |us: u64| {
                let until = Instant::now() + Duration::from_micros(us);
                while Instant::now() < until {
                    std::hint::spin_loop();
                }
            };
            let mut gap_us = 1u64;
            let mut flaps = 0u64;
            while flapping.load(std::sync::atomic::Ordering::Relaxed) {
                held_tx.send_replace(HeldLeases {
                    shards: BTreeMap::new(),
                    committer: None,
                    ..Default::default()
                });
                gap_us = (gap_us * 7 + 13) % 300;
                spin(gap_us);
                held_tx.send_replace(held.clone());
                spin(700);
                flaps += 1;
            }
            flaps
        })
    };
    let base = 1_783_627_200_000;
    let total = 3000i64;
    for id in 0..total {
        source.append(
            &s0,
            None,
            event_json(id as u64, 3, base, 1).into_bytes(),
            base,
        );
        if id % 2 == 0 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
    flapping.store(false, std::sync::atomic::Ordering::Relaxed);
    let flaps = flapper.join().unwrap();
    assert!(flaps > 100, "the lease flapped only {flaps} times");

    rig.wait_for_checkpoint(
        &s0,
        Position::Offset(total - 1),
        Duration::from_secs(30),
        None,
    )
    .await;
    stop.cancel();
    worker_task.await.unwrap().unwrap();
    committing.cancel();
    committer_task.await.unwrap();
    let ids = rig.sorted_table_ids().await;
    let missing: Vec<i64> = (0..total)
        .filter(|i| ids.binary_search(i).is_err())
        .collect();
    assert!(
        missing.is_empty(),
        "{} records missing, e.g. {:?}",
        missing.len(),
        &missing[..missing.len().min(10)]
    );
    assert_eq!(ids.len() as i64, total, "duplicates in the table");
}

/// Back-pressure counts DLQ entries too (issue 8, memory bound): a stream of bad records is
/// handed off when the entries reach `buffer_size`, not held until `data_freshness`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_lettered_records_fill_the_buffer_like_rows() {
    let rig = common::WorkerRig::new("wd").await;
    let s0 = ShardId::kafka_partition(0);
    let leases = rig.take_shard_leases(std::slice::from_ref(&s0)).await;
    let (_held_tx, held_rx) = watch::channel(HeldLeases {
        shards: leases,
        committer: None,
        ..Default::default()
    });
    let source = Arc::new(MemorySource::with_partitions(1));
    let base = 1_783_627_200_000;
    let total = 3000u64;
    for id in 0..total {
        // Not JSON: each becomes a DLQ entry of a few hundred bytes.
        source.append(&s0, None, format!("not json {id}").into_bytes(), base);
    }
    let mut settings = common::worker_settings("wd", Duration::from_secs(600));
    settings.buffer_size = 64 << 10;
    let (stop, worker_task) =
        rig.spawn_worker_with(settings, source.clone(), Duration::from_secs(1), held_rx);
    let deadline = Instant::now() + Duration::from_secs(20);
    let batches = loop {
        let pending = rig.store.list_pending("wd").await.unwrap();
        if pending.len() >= 2 {
            break pending;
        }
        assert!(
            Instant::now() < deadline,
            "DLQ entries were not handed off by size ({} batches)",
            pending.len()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    stop.cancel();
    worker_task.await.unwrap().unwrap();
    for b in &batches {
        assert!(
            b.num_dead_lettered < total,
            "a batch held every entry: {}",
            b.num_dead_lettered
        );
        assert_eq!(b.num_rows, 0);
    }
}

/// The lease store's pending set with faults at the worst moments for the worker: with a
/// `committer`, a committer round runs whenever the worker lists the pending batches, before they
/// are listed (counting what the rounds rejected); while `failing_puts` (`failing_lists`) is
/// above 0, a hand-off (a listing of the pending set) fails as an unreachable store's does, and
/// counts down.
struct HookedBatches {
    inner: Arc<floe::lease::SqlLeaseStore>,
    committer: Option<floe::commit::Committer>,
    rejected: std::sync::atomic::AtomicUsize,
    failing_puts: std::sync::atomic::AtomicUsize,
    failing_lists: std::sync::atomic::AtomicUsize,
}

/// Takes one from `n` unless it is 0; whether it did (the call should fail).
fn count_down(n: &std::sync::atomic::AtomicUsize) -> bool {
    use std::sync::atomic::Ordering::SeqCst;
    n.fetch_update(SeqCst, SeqCst, |n| n.checked_sub(1)).is_ok()
}

fn unreachable() -> floe::lease::LeaseError {
    floe::lease::LeaseError::Unavailable {
        message: "connection refused (test)".into(),
    }
}

#[async_trait::async_trait]
impl floe::lease::BatchStore for HookedBatches {
    async fn put_batch(
        &self,
        batch: &floe::model::PendingBatch,
    ) -> Result<(), floe::lease::LeaseError> {
        if count_down(&self.failing_puts) {
            return Err(unreachable());
        }
        self.inner.put_batch(batch).await
    }
    async fn list_pending(
        &self,
        channel: &str,
    ) -> Result<Vec<floe::model::PendingBatch>, floe::lease::LeaseError> {
        if count_down(&self.failing_lists) {
            return Err(unreachable());
        }
        if let Some(committer) = &self.committer {
            let report = committer.run_round().await.unwrap();
            self.rejected
                .fetch_add(report.rejected, std::sync::atomic::Ordering::SeqCst);
        }
        self.inner.list_pending(channel).await
    }
    async fn finish_batches(
        &self,
        channel: &str,
        committed: &[uuid::Uuid],
        rejected: &[uuid::Uuid],
    ) -> Result<(), floe::lease::LeaseError> {
        self.inner
            .finish_batches(channel, committed, rejected)
            .await
    }
    async fn get_channel_state(
        &self,
        channel: &str,
    ) -> Result<Option<floe::lease::ChannelState>, floe::lease::LeaseError> {
        self.inner.get_channel_state(channel).await
    }
    async fn put_channel_state(
        &self,
        state: &floe::lease::ChannelState,
        expected_version: Option<u64>,
    ) -> Result<u64, floe::lease::LeaseError> {
        self.inner.put_channel_state(state, expected_version).await
    }
    async fn get_delivered(
        &self,
        channel: &str,
    ) -> Result<Option<floe::lease::Delivered>, floe::lease::LeaseError> {
        self.inner.get_delivered(channel).await
    }
    async fn put_delivered(
        &self,
        delivered: &floe::lease::Delivered,
        expected_version: Option<u64>,
    ) -> Result<u64, floe::lease::LeaseError> {
        self.inner.put_delivered(delivered, expected_version).await
    }
}

/// Found by a break test: the worker read the table's checkpoints, then the pending set; a
/// commit landing between the two reads made the committed batch look rejected, and the worker
/// re-read and re-delivered it (rejected again as a duplicate).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_committed_while_the_worker_reconciles_is_not_taken_for_rejected() {
    let rig = common::WorkerRig::new("wr").await;
    let s0 = ShardId::kafka_partition(0);
    let leases = rig.take_shard_leases(std::slice::from_ref(&s0)).await;
    let (_held_tx, held_rx) = watch::channel(HeldLeases {
        shards: leases,
        committer: None,
        ..Default::default()
    });
    let store = Arc::new(HookedBatches {
        inner: rig.store.clone(),
        committer: Some(rig.committer(1)),
        rejected: std::sync::atomic::AtomicUsize::new(0),
        failing_puts: std::sync::atomic::AtomicUsize::new(0),
        failing_lists: std::sync::atomic::AtomicUsize::new(0),
    });
    let source = Arc::new(MemorySource::with_partitions(1));
    let (stop, task) = rig.spawn_worker_on(
        common::worker_settings(&rig.channel, Duration::from_millis(50)),
        source.clone(),
        store.clone(),
        Duration::from_secs(5),
        held_rx,
    );
    let base = 1_783_627_200_000;
    let total = 300i64;
    for id in 0..total {
        source.append(
            &s0,
            None,
            event_json(id as u64, 3, base, 1).into_bytes(),
            base,
        );
        if id % 30 == 0 {
            tokio::time::sleep(Duration::from_millis(120)).await;
        }
    }
    rig.wait_for_checkpoint(
        &s0,
        Position::Offset(total - 1),
        Duration::from_secs(30),
        None,
    )
    .await;
    stop.cancel();
    task.await.unwrap().unwrap();
    assert_eq!(
        store.rejected.load(std::sync::atomic::Ordering::SeqCst),
        0,
        "no batch re-delivered after a false rejection"
    );
    let ids = rig.sorted_table_ids().await;
    assert_eq!(ids, (0..total).collect::<Vec<_>>());
}

/// Issue 17 (catalog load at scale): a worker reconciled every second by loading the table
/// (the whole metadata.json) while a batch was in flight. Now it reads the pending set and loads
/// the table only once one of its batches has left it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_loads_the_table_only_when_a_batch_leaves_the_pending_set() {
    let metrics = metrics();
    let loads = || {
        common::sum(
            &common::samples(&metrics.render()),
            "floe_catalog_table_loads_total",
            &[r#"channel="wp""#, r#"by="worker""#],
        )
    };
    let rig = common::WorkerRig::new("wp").await;
    let s0 = ShardId::kafka_partition(0);
    let leases = rig.take_shard_leases(std::slice::from_ref(&s0)).await;
    let (_held_tx, held_rx) = watch::channel(HeldLeases {
        shards: leases,
        committer: None,
        ..Default::default()
    });
    let source = Arc::new(MemorySource::with_partitions(1));
    let base = 1_783_627_200_000;
    for id in 0..10 {
        source.append(&s0, None, event_json(id, 3, base, 1).into_bytes(), base);
    }
    let (stop, task) = rig.spawn_worker(
        source.clone(),
        Duration::from_millis(200),
        Duration::from_secs(1),
        held_rx,
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    while rig.store.list_pending("wp").await.unwrap().is_empty() {
        assert!(Instant::now() < deadline, "no batch handed off");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // No committer runs: the batch waits in the pending set, and the worker loads nothing.
    let before = loads();
    assert!(before >= 1.0, "the sink's open is counted");
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert_eq!(
        loads(),
        before,
        "a batch waiting to be committed costs no table load"
    );
    assert_eq!(rig.store.list_pending("wp").await.unwrap().len(), 1);

    // Committed: the worker learns it with one load, then loads nothing again.
    rig.committer(1).run_round().await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while loads() == before {
        assert!(
            Instant::now() < deadline,
            "the worker never settled its batch"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(loads(), before + 1.0);
    stop.cancel();
    task.await.unwrap().unwrap();
    assert_eq!(rig.sorted_table_ids().await, (0..10).collect::<Vec<i64>>());
}

/// Issue 17 (freshness during handoffs): losing any lease dropped the whole buffer and reopened
/// every shard, even when the lost shard had nothing buffered or in flight (a finished shard,
/// an idle partition). Now only a lost shard with rows in the buffer or in flight costs that.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn losing_an_idle_shard_keeps_the_buffer_of_the_others() {
    let rig = common::WorkerRig::new("wi").await;
    let (s0, s1) = (ShardId::kafka_partition(0), ShardId::kafka_partition(1));
    let mut leases = rig.take_shard_leases(&[s0.clone(), s1.clone()]).await;
    let source = Arc::new(MemorySource::with_partitions(2));
    let base = 1_783_627_200_000;
    let (held_tx, held_rx) = watch::channel(HeldLeases {
        shards: leases.clone(),
        committer: None,
        ..Default::default()
    });
    // A long freshness: what s0 reads stays buffered for the whole test.
    let (stop, task) = rig.spawn_worker(
        source.clone(),
        Duration::from_secs(30),
        Duration::from_secs(5),
        held_rx,
    );
    for id in 0..10 {
        source.append(&s0, None, event_json(id, 3, base, 1).into_bytes(), base);
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while source.opens(&s0) == 0 || source.opens(&s1) == 0 {
        assert!(Instant::now() < deadline, "readers never opened");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    // s1 (nothing read from it) goes to another worker.
    let l1 = leases.remove(&s1).unwrap();
    rig.store.take_lease(&l1, "w2").await.unwrap();
    held_tx
        .send(HeldLeases {
            shards: leases.clone(),
            committer: None,
            ..Default::default()
        })
        .unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        source.opens(&s0),
        1,
        "s0's buffer was dropped and its reader reopened"
    );
    // Drain: what s0 buffered is handed off and committed once.
    drain_until_committed(&rig, stop, task, &s0, 9).await;
}

/// A lease store unreachable for a few calls (a PostgreSQL restart) costs the worker nothing but
/// time: a hand-off is retried with backoff while the leases are held, a failed listing of the
/// pending set postpones the reconciliation; the buffer is kept and no reader is reopened; every
/// record lands once. (Found by a break test: the first listing failure restarted the loop.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_hand_off_is_retried_keeping_the_buffer() {
    let rig = common::WorkerRig::new("wu").await;
    let s0 = ShardId::kafka_partition(0);
    let leases = rig.take_shard_leases(std::slice::from_ref(&s0)).await;
    let (_held_tx, held_rx) = watch::channel(HeldLeases {
        shards: leases,
        committer: None,
        ..Default::default()
    });
    let store = Arc::new(HookedBatches {
        inner: rig.store.clone(),
        committer: None,
        rejected: std::sync::atomic::AtomicUsize::new(0),
        failing_puts: std::sync::atomic::AtomicUsize::new(3),
        failing_lists: std::sync::atomic::AtomicUsize::new(1),
    });
    let source = Arc::new(MemorySource::with_partitions(1));
    let (stop, task) = rig.spawn_worker_on(
        common::worker_settings(&rig.channel, Duration::from_millis(200)),
        source.clone(),
        store.clone(),
        Duration::from_secs(5),
        held_rx,
    );
    let base = 1_783_627_200_000;
    // Three waves, so several batches are in flight and listed in turn.
    for id in 0..20 {
        source.append(&s0, None, event_json(id, 3, base, 1).into_bytes(), base);
        if id % 7 == 6 {
            tokio::time::sleep(Duration::from_millis(700)).await;
        }
    }
    let committer = rig.committer(1);
    rig.wait_for_checkpoint(
        &s0,
        Position::Offset(19),
        Duration::from_secs(30),
        Some(&committer),
    )
    .await;
    for (left, what) in [
        (&store.failing_puts, "hand-off"),
        (&store.failing_lists, "listing"),
    ] {
        assert_eq!(
            left.load(std::sync::atomic::Ordering::SeqCst),
            0,
            "every failing {what} was tried"
        );
    }
    assert_eq!(
        source.opens(&s0),
        1,
        "the reader was reopened: the buffer was dropped instead of the hand-off retried"
    );
    stop.cancel();
    task.await.unwrap().unwrap();
    assert_eq!(rig.sorted_table_ids().await, (0..20).collect::<Vec<i64>>());
}

/// Stops the worker, runs a committer until `shard`'s checkpoint reaches `last`, and checks that
/// the table holds ids `0..=last` exactly once.
async fn drain_until_committed(
    rig: &common::WorkerRig,
    stop: CancellationToken,
    task: tokio::task::JoinHandle<Result<(), floe::worker::WorkerError>>,
    shard: &ShardId,
    last: i64,
) {
    stop.cancel();
    let committer = rig.committer(1);
    rig.wait_for_checkpoint(
        shard,
        Position::Offset(last),
        Duration::from_secs(20),
        Some(&committer),
    )
    .await;
    task.await.unwrap().unwrap();
    assert_eq!(
        rig.sorted_table_ids().await,
        (0..=last).collect::<Vec<i64>>()
    );
}

/// The process-wide Prometheus recorder (installed once in the test binary; only this module
/// installs one).
fn metrics() -> &'static metrics_exporter_prometheus::PrometheusHandle {
    static HANDLE: std::sync::OnceLock<metrics_exporter_prometheus::PrometheusHandle> =
        std::sync::OnceLock::new();
    HANDLE.get_or_init(|| floe::telemetry::install_prometheus().unwrap())
}

fn metric(name: &str, filters: &[&str]) -> f64 {
    common::sum(&common::samples(&metrics().render()), name, filters)
}

/// Waits up to 10 s until `source` returned `n` records of `shard`.
async fn wait_read(source: &MemorySource, shard: &ShardId, n: u64) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while source.records_read(shard) < n {
        assert!(
            Instant::now() < deadline,
            "shard {shard}: {} of {n} records read",
            source.records_read(shard)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Issue 33 (item 1): the buffer mixed every shard's rows, so losing one shard with rows in it
/// dropped the whole buffer and reopened every reader. Now only the lost shard's rows go: the
/// other shards keep their readers and their buffered rows, which are committed once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn losing_one_shard_drops_only_its_rows_and_reopens_no_other_reader() {
    let rig = common::WorkerRig::new("w3").await;
    let shards: Vec<ShardId> = (0..3).map(ShardId::kafka_partition).collect();
    let mut leases = rig.take_shard_leases(&shards).await;
    let source = Arc::new(MemorySource::with_partitions(3));
    let base = 1_783_627_200_000;
    let append = |from: u64, to: u64| {
        for (p, shard) in shards.iter().enumerate() {
            for i in from..to {
                let id = p as u64 * 1000 + i;
                source.append(shard, None, event_json(id, 3, base, 1).into_bytes(), base);
            }
        }
    };
    append(0, 10);
    let (held_tx, held_rx) = watch::channel(HeldLeases {
        shards: leases.clone(),
        ..Default::default()
    });
    // A long freshness: every row read stays buffered until the drain.
    let (stop, task) = rig.spawn_worker(
        source.clone(),
        Duration::from_secs(60),
        Duration::from_secs(10),
        held_rx,
    );
    for s in &shards {
        wait_read(&source, s, 10).await;
    }
    // Shard 1, with rows of its own in the buffer, goes to another worker.
    let l1 = leases.remove(&shards[1]).unwrap();
    rig.store.take_lease(&l1, "w2").await.unwrap();
    held_tx
        .send(HeldLeases {
            shards: leases.clone(),
            ..Default::default()
        })
        .unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    append(10, 20);
    for s in [&shards[0], &shards[2]] {
        wait_read(&source, s, 20).await;
    }
    for s in [&shards[0], &shards[2]] {
        assert_eq!(source.opens(s), 1, "shard {s}'s reader was reopened");
    }
    // Drain: the two shards' rows, read once, are committed once; none of shard 1's.
    stop.cancel();
    let committer = rig.committer(1);
    for s in [&shards[0], &shards[2]] {
        rig.wait_for_checkpoint(
            s,
            Position::Offset(19),
            Duration::from_secs(20),
            Some(&committer),
        )
        .await;
    }
    task.await.unwrap().unwrap();
    let expected: Vec<i64> = (0..20).chain(2000..2020).collect();
    assert_eq!(rig.sorted_table_ids().await, expected);
    for s in [&shards[0], &shards[2]] {
        assert_eq!(source.records_read(s), 20, "shard {s} read again");
    }
}

/// Issue 33 (item 5): a dropped buffer reset the freshness (the records read again started
/// young). The gauge counts from the first read of the oldest uncommitted record (records
/// stamped as they are produced here, so the timestamp does not make it older), through a
/// loss and a re-take of the shard on this worker, and the records read again are counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_freshness_keeps_growing_across_a_dropped_buffer_and_a_re_read() {
    let channel = "wg";
    let rig = common::WorkerRig::new(channel).await;
    let s0 = ShardId::kafka_partition(0);
    let mut leases = rig.take_shard_leases(std::slice::from_ref(&s0)).await;
    let source = Arc::new(MemorySource::with_partitions(1));
    let base = 1_783_627_200_000;
    for id in 0..10 {
        let produced = floe::time::now_ms();
        source.append(&s0, None, event_json(id, 3, base, 1).into_bytes(), produced);
    }
    let (held_tx, held_rx) = watch::channel(HeldLeases {
        shards: leases.clone(),
        ..Default::default()
    });
    let _ = metrics();
    let (stop, task) = rig.spawn_worker(
        source.clone(),
        Duration::from_secs(60),
        Duration::from_secs(5),
        held_rx,
    );
    wait_read(&source, &s0, 10).await;
    let first_read = Instant::now();
    tokio::time::sleep(Duration::from_secs(3)).await;
    // The lease flaps: lost (the buffer is dropped), then taken again under a new counter.
    held_tx.send(HeldLeases::default()).unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let l0 = leases.remove(&s0).unwrap();
    let again = rig.store.take_lease(&l0, "w1").await.unwrap();
    leases.insert(s0.clone(), again);
    held_tx
        .send(HeldLeases {
            shards: leases.clone(),
            ..Default::default()
        })
        .unwrap();
    wait_read(&source, &s0, 20).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let freshness = metric(
        "floe_data_freshness_seconds",
        &[&format!(r#"channel="{channel}""#)],
    );
    assert!(
        freshness >= first_read.elapsed().as_secs_f64() - 1.0,
        "freshness {freshness} s, first read {} s ago",
        first_read.elapsed().as_secs_f64()
    );
    assert_eq!(
        metric(
            "floe_records_reread_total",
            &[&format!(r#"channel="{channel}""#), r#"cause="lease_lost""#]
        ),
        10.0
    );
    drain_until_committed(&rig, stop, task, &s0, 9).await;
}

/// Issue 43: after a SIGKILL, the new owner of a shard counted the backlog the dead worker
/// left from its own first read, a lease_duration or more after the records were produced (the
/// gauge peaked at 31.8 s while records waited 46.1 s). Records the stream accepted 40 s ago,
/// read now by a worker that takes the shard, show 40 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_freshness_of_a_backlog_taken_over_counts_from_the_records_timestamps() {
    let channel = "wt";
    let rig = common::WorkerRig::new(channel).await;
    let s0 = ShardId::kafka_partition(0);
    let leases = rig.take_shard_leases(std::slice::from_ref(&s0)).await;
    let source = Arc::new(MemorySource::with_partitions(1));
    let base = 1_783_627_200_000;
    let produced = floe::time::now_ms() - 40_000;
    for id in 0..10 {
        source.append(&s0, None, event_json(id, 3, base, 1).into_bytes(), produced);
    }
    let (_held_tx, held_rx) = watch::channel(HeldLeases {
        shards: leases,
        ..Default::default()
    });
    let _ = metrics();
    let (stop, task) = rig.spawn_worker(
        source.clone(),
        Duration::from_secs(60),
        Duration::from_secs(5),
        held_rx,
    );
    wait_read(&source, &s0, 10).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let freshness = metric(
        "floe_data_freshness_seconds",
        &[&format!(r#"channel="{channel}""#)],
    );
    let waited = (floe::time::now_ms() - produced) as f64 / 1000.0;
    assert!(
        freshness >= 40.0 && freshness <= waited + 1.0,
        "freshness {freshness} s, records produced {waited} s ago"
    );
    drain_until_committed(&rig, stop, task, &s0, 9).await;
}

/// One worker of a fleet under test: its lease manager (graceful hand-offs) and its worker
/// loop.
struct FleetWorker {
    held: watch::Receiver<HeldLeases>,
    leases: CancellationToken,
    manager: tokio::task::JoinHandle<()>,
    stop: CancellationToken,
    task: tokio::task::JoinHandle<Result<(), floe::worker::WorkerError>>,
}

fn start_fleet_worker(
    rig: &common::WorkerRig,
    id: &str,
    source: Arc<MemorySource>,
    data_freshness: Duration,
) -> FleetWorker {
    use floe::lease::manager::{LeaseManager, LeaseManagerConfig};
    let config = LeaseManagerConfig::new(&rig.channel, id, Duration::from_secs(3));
    let mut manager =
        LeaseManager::new(rig.store.clone(), config).with_handoff_wait(Duration::from_secs(30));
    let replies = manager.handoff_replies();
    let held = manager.subscribe();
    let leases = CancellationToken::new();
    let manager = tokio::spawn(manager.run(leases.clone()));
    let mut settings = common::worker_settings(&rig.channel, data_freshness);
    settings.worker_id = id.into();
    let (stop, task) = rig.spawn_worker_replying(
        settings,
        source,
        rig.store.clone(),
        Duration::from_secs(10),
        held.clone(),
        Some(replies),
    );
    FleetWorker {
        held,
        leases,
        manager,
        stop,
        task,
    }
}

impl FleetWorker {
    async fn stop(self) {
        self.stop.cancel();
        self.task.await.unwrap().unwrap();
        self.leases.cancel();
        self.manager.await.unwrap();
    }
}

async fn wait_until(what: &str, timeout: Duration, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Issue 33 (items 2 and 3): a balancing move discarded the handing worker's buffered rows and
/// its pending batch, and the new owner read them again. Now the owner stops reading the shard,
/// hands its rows off in a batch of their own, and writes the new owner only once every batch
/// of it is committed: the new owner starts after them. Nothing is read twice, nothing is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_graceful_move_reads_nothing_twice_and_loses_nothing() {
    use floe::lease::{LeaseKey, LeaseSpec};
    let rig = common::WorkerRig::new("wm").await;
    let shards: Vec<ShardId> = (0..2).map(ShardId::kafka_partition).collect();
    let specs: Vec<LeaseSpec> = shards
        .iter()
        .map(|s| LeaseSpec::new(LeaseKey::Shard(s.clone())))
        .collect();
    rig.store.ensure_leases("wm", &specs).await.unwrap();
    let source = Arc::new(MemorySource::with_partitions(2));
    // Records arrive all along, 5 per shard every 100 ms.
    let appending = CancellationToken::new();
    let appender = {
        let (source, shards, appending) = (source.clone(), shards.clone(), appending.clone());
        tokio::spawn(async move {
            let base = 1_783_627_200_000;
            let mut n = 0u64;
            while !appending.is_cancelled() {
                for (p, shard) in shards.iter().enumerate() {
                    for i in 0..5 {
                        let id = p as u64 * 100_000 + n + i;
                        source.append(shard, None, event_json(id, 3, base, 1).into_bytes(), base);
                    }
                }
                n += 5;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            n
        })
    };
    // w1 alone: it balances, takes both shards and hands batches off every second; no
    // committer yet, so they stay pending.
    let w1 = start_fleet_worker(&rig, "w1", source.clone(), Duration::from_secs(2));
    wait_until("w1 holds both shards", Duration::from_secs(20), || {
        w1.held.borrow().shards.len() == 2
    })
    .await;
    let deadline = Instant::now() + Duration::from_secs(10);
    while rig.store.list_pending("wm").await.unwrap().is_empty() {
        assert!(Instant::now() < deadline, "no batch handed off");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // w2 joins: the balancer asks w1 to hand one shard over.
    let w2 = start_fleet_worker(&rig, "w2", source.clone(), Duration::from_secs(2));
    wait_until("a hand-off is asked for", Duration::from_secs(20), || {
        !w1.held.borrow().handing_off.is_empty()
    })
    .await;
    let moving = w1.held.borrow().handing_off.first().unwrap().clone();
    assert!(
        rig.store
            .list_pending("wm")
            .await
            .unwrap()
            .iter()
            .any(|b| b.shards.iter().any(|r| r.shard == moving)),
        "a batch of the moving shard is pending"
    );
    assert!(
        w1.held.borrow().shards.contains_key(&moving),
        "held until its batches are committed"
    );
    // The committer now runs.
    let (committing, committer_task) = run_committer(rig.committer(1), Duration::from_millis(200));
    wait_until("w2 holds the moved shard", Duration::from_secs(20), || {
        w2.held.borrow().shards.contains_key(&moving)
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    appending.cancel();
    let per_shard = appender.await.unwrap();
    for s in &shards {
        rig.wait_for_checkpoint(
            s,
            Position::Offset(per_shard as i64 - 1),
            Duration::from_secs(30),
            None,
        )
        .await;
    }
    w1.stop().await;
    w2.stop().await;
    committing.cancel();
    committer_task.await.unwrap();
    let expected: Vec<i64> = (0..per_shard as i64)
        .chain(100_000..100_000 + per_shard as i64)
        .collect();
    assert_eq!(rig.sorted_table_ids().await, expected, "exactly once");
    for s in &shards {
        assert_eq!(
            source.records_read(s),
            per_shard,
            "shard {s}: records read twice (moved: {moving})"
        );
    }
}

/// Runs a commit round with `committer` every `every` until the token is cancelled.
fn run_committer(
    committer: floe::commit::Committer,
    every: Duration,
) -> (CancellationToken, tokio::task::JoinHandle<()>) {
    let committing = CancellationToken::new();
    let task = {
        let committing = committing.clone();
        tokio::spawn(async move {
            while !committing.is_cancelled() {
                committer.run_round().await.unwrap();
                tokio::time::sleep(every).await;
            }
        })
    };
    (committing, task)
}

/// Issue 43: an idle table's committer listed its pending batches every second (1,000 tables:
/// about 1,000 lease-store reads a second doing nothing). Idle rounds now wait from 1 s up to a
/// quarter of the freshness (here 20 s), and a batch handed off by the worker on the same
/// process wakes the committer at once instead of at its next idle round.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_committer_backs_off_and_a_batch_of_its_own_worker_wakes_it() {
    use floe::lease::{LeaseKey, LeaseSpec};
    let rig = common::WorkerRig::new("wi").await;
    let s0 = ShardId::kafka_partition(0);
    let shards = rig.take_shard_leases(std::slice::from_ref(&s0)).await;
    rig.store
        .ensure_leases("wi", &[LeaseSpec::new(LeaseKey::Committer)])
        .await
        .unwrap();
    let row = rig
        .store
        .get_lease("wi", &LeaseKey::Committer)
        .await
        .unwrap()
        .unwrap();
    let committer = rig.store.take_lease(&row, "w1").await.unwrap();
    let (counting, counters) = floe::lease::sim::CountingStore::counting(rig.store.clone());
    let store: Arc<dyn floe::lease::Store> = Arc::new(counting);
    let (_held_tx, held) = watch::channel(HeldLeases {
        shards,
        committer: Some(committer),
        committer_valid_until: Some(tokio::time::Instant::now() + Duration::from_secs(3600)),
        ..Default::default()
    });
    let batch_signal = Arc::new(tokio::sync::Notify::new());
    let stop = CancellationToken::new();
    // Freshness 80 s: idle rounds at 0, 1, 3, 7, 15, 31 s, then every 20 s.
    let committer_loop = tokio::spawn(floe::app::committer_loop(
        "wi".into(),
        floe::worker::DestinationIo::Iceberg(rig.iceberg_io("wi")),
        store.clone(),
        floe::app::CommitterWakeups {
            held: held.clone(),
            batches: batch_signal.clone(),
        },
        stop.clone(),
        Duration::from_secs(80),
        CancellationToken::new(),
    ));
    tokio::time::sleep(Duration::from_secs(16)).await;
    let idle_listings = counters.pending_listings();
    assert!(
        (1..=7).contains(&idle_listings),
        "{idle_listings} listings of the pending batches in 16 idle seconds (once a second: 16)"
    );

    // This process's worker hands a batch off (its freshness 1 s: after 0.5 s): committed at
    // once, not at the idle committer's next round (31 s, 15 s from now).
    let source = Arc::new(MemorySource::with_partitions(1));
    let base = 1_783_627_200_000;
    for id in 0..10 {
        source.append(&s0, None, event_json(id, 3, base, 1).into_bytes(), base);
    }
    let batches: Arc<dyn BatchStore> = store.clone();
    let mut worker = floe::worker::ChannelWorker::new(
        common::worker_settings("wi", Duration::from_secs(1)),
        floe::worker::ChannelIo::iceberg(source, rig.iceberg_io("wi")),
        batches,
        held,
    )
    .with_batch_signal(batch_signal);
    let worker_stop = CancellationToken::new();
    let worker_task = {
        let stop = worker_stop.clone();
        tokio::spawn(async move { worker.run(stop, Duration::from_secs(1)).await })
    };
    let started = Instant::now();
    while rig.sorted_table_ids().await.len() < 10 {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the batch was never committed"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let took = started.elapsed();
    assert!(
        took < Duration::from_secs(9),
        "the batch waited {took:?} for the idle committer's next round"
    );
    worker_stop.cancel();
    worker_task.await.unwrap().unwrap();
    stop.cancel();
    committer_loop.await.unwrap();
    assert_eq!(rig.sorted_table_ids().await, (0..10).collect::<Vec<i64>>());
}
