//! Component test of Kinesis resharding through the worker, the committer and the lease manager
//! with the in-memory source (docs/design.md, protocol step 8): a closed shard is handed off with a
//! range ending at SHARD_END (with rows, or with none when nothing was read since its checkpoint),
//! the commit stores SHARD_END in `floe.checkpoints` and in the lease's checkpoint hint, and only
//! then does the lease manager take the child shard; once the child is committed and the parents'
//! leases released, a commit prunes the parents' SHARD_END.

use crate::common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use floe::commit::Committer;
use floe::iceberg::table_state::table_checkpoints;
use floe::lease::{
    BatchStore, LeaseKey, LeaseManager, LeaseManagerConfig, LeaseSpec, LeaseStore, SqlLeaseStore,
};
use floe::model::{Checkpoints, Lineage, Position, ShardId};
use floe::source::memory::MemorySource;
use floe::source::Source;
use floe::tools::sample_events::event_json;

const BASE: i64 = 1_783_627_200_000;

fn append(source: &MemorySource, shard: &ShardId, ids: std::ops::Range<u64>) {
    for id in ids {
        source.append(
            shard,
            Some(id.to_string().into_bytes()),
            event_json(id, 3, BASE, 1).into_bytes(),
            BASE,
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closed_shards_end_at_shard_end_and_their_child_is_read_only_afterwards() {
    let rig = common::WorkerRig::new("rs").await;
    let (source, family) = two_parents_and_their_child(&rig).await;
    let (mut manager, epoch) = take_the_parents_not_the_child(&rig, &family).await;
    let (stop, worker_task) = rig.spawn_worker(
        source.clone(),
        Duration::from_millis(300),
        Duration::from_secs(2),
        manager.subscribe(),
    );
    let committer = rig.committer(epoch);
    commit_until_the_child_is_read(&rig, &committer, &mut manager, &source, &family).await;
    let cp =
        release_the_parents_until_pruned(&rig, &committer, &mut manager, &source, &family).await;
    let Family { p, q, c } = &family;
    assert_eq!(
        cp.0.keys().collect::<Vec<_>>(),
        vec![c],
        "the ended parents' SHARD_END is pruned: {cp:?}"
    );
    let lineage = Lineage::from_parents([(c, [p.clone(), q.clone()].as_slice())]);
    assert!(cp.is_ended(p, &lineage) && cp.is_ended(q, &lineage));
    stop.cancel();
    worker_task.await.unwrap().unwrap();
    assert_every_record_once_and_the_parents_finished(&rig, &family).await;
}

/// Two parent shards and the child they were merged into.
struct Family {
    p: ShardId,
    q: ShardId,
    c: ShardId,
}

/// The in-memory source with the family's shards and their leases in the rig's store: p is
/// closed from the start; q is closed only after its records are committed
/// ([`commit_until_the_child_is_read`]), so its end comes in a batch of its own with no rows.
async fn two_parents_and_their_child(rig: &common::WorkerRig) -> (Arc<MemorySource>, Family) {
    let store = &rig.store;
    let (p, q, c) = (
        ShardId("shardId-p".into()),
        ShardId("shardId-q".into()),
        ShardId("shardId-c".into()),
    );
    let source = Arc::new(MemorySource::new());
    source.add_shard(p.clone(), Vec::new());
    source.add_shard(q.clone(), Vec::new());
    source.add_shard(c.clone(), vec![p.clone(), q.clone()]);
    append(&source, &p, 0..5);
    source.close(&p);
    append(&source, &q, 100..103);
    let specs: Vec<LeaseSpec> = source
        .list_shards()
        .await
        .unwrap()
        .into_iter()
        .map(|s| LeaseSpec::new(LeaseKey::Shard(s.id)).with_parents(s.parents))
        .collect();
    store.ensure_leases("rs", &specs).await.unwrap();
    (source, Family { p, q, c })
}

/// The lease manager of the lone worker once it holds the parents (and not the child, whose
/// parents have not ended), with its committer lease's counter.
async fn take_the_parents_not_the_child(
    rig: &common::WorkerRig,
    Family { p, q, c }: &Family,
) -> (LeaseManager<SqlLeaseStore>, u64) {
    let mut manager = LeaseManager::new(
        rig.store.clone(),
        LeaseManagerConfig::new("rs", "w1", Duration::from_secs(30)),
    );
    // Period 1: the lone worker takes the committer lease and becomes the balancer; period 2:
    // it assigns the shards whose parents are done; period 3: it reads its notice.
    for _ in 0..3 {
        manager.tick().await.unwrap();
    }
    let held = manager.held();
    assert!(held.shards.contains_key(p) && held.shards.contains_key(q));
    assert!(
        !held.shards.contains_key(c),
        "a child waits for its parents' SHARD_END"
    );
    let epoch = held.committer.as_ref().unwrap().lease_counter;
    (manager, epoch)
}

/// Commits until the child's records are: q is closed once its records are committed, and the
/// child, once leased (never before both parents ended), is fed its records.
async fn commit_until_the_child_is_read(
    rig: &common::WorkerRig,
    committer: &Committer,
    manager: &mut LeaseManager<SqlLeaseStore>,
    source: &MemorySource,
    Family { p, q, c }: &Family,
) {
    let (catalog, ident) = (&rig.catalog, &rig.ident);
    let deadline = Instant::now() + Duration::from_secs(60);
    let (mut q_closed, mut child_fed) = (false, false);
    loop {
        committer.run_round().await.unwrap();
        manager.tick().await.unwrap();
        let cp = table_checkpoints(&catalog.load_table(ident).await.unwrap()).unwrap();
        if !q_closed && cp.get(q) == Some(&Position::Offset(2)) {
            source.close(q);
            q_closed = true;
        }
        let parents_ended =
            cp.get(p) == Some(&Position::ShardEnd) && cp.get(q) == Some(&Position::ShardEnd);
        if manager.held().shards.contains_key(c) {
            assert!(
                parents_ended,
                "child leased before its parents ended: {cp:?}"
            );
            if !child_fed {
                append(source, c, 200..204);
                child_fed = true;
            }
        }
        if cp.get(c) == Some(&Position::Offset(3)) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "resharding stalled: checkpoints {cp:?}, q closed {q_closed}, child fed {child_fed}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Issue 33: the child is committed, but the worker still holds the parents' leases (it
/// would read them again from no checkpoint after a rewind): their SHARD_END stays until their
/// holder lets them go (as a worker that stops does). Returns the checkpoints once the child's
/// next records are committed.
async fn release_the_parents_until_pruned(
    rig: &common::WorkerRig,
    committer: &Committer,
    manager: &mut LeaseManager<SqlLeaseStore>,
    source: &MemorySource,
    Family { p, q, c }: &Family,
) -> Checkpoints {
    let (catalog, ident, store) = (&rig.catalog, &rig.ident, &rig.store);
    let cp = table_checkpoints(&catalog.load_table(ident).await.unwrap()).unwrap();
    assert_eq!(cp.get(p), Some(&Position::ShardEnd), "{cp:?}");
    assert_eq!(cp.get(q), Some(&Position::ShardEnd), "{cp:?}");
    // Their holder lets them go (as a worker that stops does); the next commit prunes them.
    for lease in store.list_leases("rs").await.unwrap() {
        if lease.key.shard_id().is_some_and(|s| s == p || s == q) {
            store.release_lease(&lease).await.unwrap();
        }
    }
    append(source, c, 204..206);
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        committer.run_round().await.unwrap();
        manager.tick().await.unwrap();
        for lease in store.list_leases("rs").await.unwrap() {
            if lease.key.shard_id().is_some_and(|s| s == p || s == q) {
                assert_eq!(lease.owner, None, "a finished parent leased again");
            }
        }
        let cp = table_checkpoints(&catalog.load_table(ident).await.unwrap()).unwrap();
        if cp.get(c) == Some(&Position::Offset(5)) {
            break cp;
        }
        assert!(Instant::now() < deadline, "the child stalled: {cp:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Every record in the table exactly once; q's end committed on its own, p's with its rows; the
/// parents' leases hinted finished; nothing pending.
async fn assert_every_record_once_and_the_parents_finished(
    rig: &common::WorkerRig,
    Family { p, q, .. }: &Family,
) {
    let (catalog, ident, store) = (&rig.catalog, &rig.ident, &rig.store);
    let table = catalog.load_table(ident).await.unwrap();
    let mut ids = floe::tools::quickstart::table_ids(&table).await.unwrap();
    ids.sort();
    let expected: Vec<i64> = (0..5).chain(100..103).chain(200..206).collect();
    assert_eq!(ids, expected, "every record exactly once");
    // q's end was committed on its own: a range (2, SHARD_END] with no rows.
    let ranges: Vec<String> = table
        .metadata()
        .snapshots()
        .filter_map(|s| {
            s.summary()
                .additional_properties
                .get("floe.ranges")
                .cloned()
        })
        .collect();
    assert!(
        ranges
            .iter()
            .any(|r| r.contains(r#""shardId-q":["(2,SHARD_END]"]"#)),
        "{ranges:?}"
    );
    assert!(
        ranges
            .iter()
            .any(|r| r.contains(r#""shardId-p":["(,SHARD_END]"]"#)),
        "{ranges:?}"
    );
    // The committer told the lease store: the parents are finished.
    for lease in store.list_leases("rs").await.unwrap() {
        match lease.key.shard_id() {
            Some(s) if s == p || s == q => {
                assert_eq!(lease.checkpoint_hint, Some(Position::ShardEnd), "{s}")
            }
            _ => {}
        }
    }
    assert!(store.list_pending("rs").await.unwrap().is_empty());
}

/// The resharding stall of the Kinesis chaos run (issue 17): a committer killed after it
/// committed a parent's `SHARD_END` but before it recorded it in the lease's checkpoint hint
/// (or whose hint write failed) left the hint behind for good, because later rounds wrote hints
/// only for checkpoints they changed; the child shard was never leased and its records never
/// delivered. A committer round now repairs a missing `SHARD_END` hint from the table.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shard_end_committed_without_its_hint_is_repaired_and_the_child_then_leased() {
    let rig = common::WorkerRig::new("rh").await;
    let (catalog, ident, store) = (rig.catalog.clone(), rig.ident.clone(), rig.store.clone());
    let (p, c) = (ShardId("shardId-p".into()), ShardId("shardId-c".into()));
    let source = Arc::new(MemorySource::new());
    source.add_shard(p.clone(), Vec::new());
    source.add_shard(c.clone(), vec![p.clone()]);
    append(&source, &p, 0..3);
    source.close(&p);
    let specs = [
        LeaseSpec::new(LeaseKey::Shard(p.clone())),
        LeaseSpec::new(LeaseKey::Shard(c.clone())).with_parents(vec![p.clone()]),
    ];
    store.ensure_leases("rh", &specs).await.unwrap();
    let mut manager = LeaseManager::new(
        store.clone(),
        LeaseManagerConfig::new("rh", "w1", Duration::from_secs(30)),
    );
    for _ in 0..3 {
        manager.tick().await.unwrap();
    }
    assert!(manager.held().shards.contains_key(&p));
    let epoch = manager.held().committer.as_ref().unwrap().lease_counter;
    let (stop, worker_task) = rig.spawn_worker(
        source.clone(),
        Duration::from_millis(300),
        Duration::from_secs(2),
        manager.subscribe(),
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        rig.committer(epoch).run_round().await.unwrap();
        let cp = table_checkpoints(&catalog.load_table(&ident).await.unwrap()).unwrap();
        if cp.get(&p) == Some(&Position::ShardEnd) {
            break;
        }
        assert!(Instant::now() < deadline, "the parent never ended: {cp:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    stop.cancel();
    worker_task.await.unwrap().unwrap();

    // The crash between the commit and the hint: the hint as it was before the commit.
    store
        .set_checkpoint_hint("rh", &LeaseKey::Shard(p.clone()), &Position::Offset(2))
        .await
        .unwrap();
    // The next committer's round, with nothing pending, repairs it from the table.
    rig.committer(epoch).run_round().await.unwrap();
    let hint = store
        .get_lease("rh", &LeaseKey::Shard(p.clone()))
        .await
        .unwrap()
        .unwrap()
        .checkpoint_hint;
    assert_eq!(
        hint,
        Some(Position::ShardEnd),
        "the SHARD_END hint was not repaired"
    );
    // And the balancer assigns the child.
    for _ in 0..3 {
        manager.tick().await.unwrap();
    }
    assert!(
        manager.held().shards.contains_key(&c),
        "the child was never leased"
    );
}

/// Issue 17: a closed shard that has left the stream (ListShards no longer returns it: its
/// records are past retention) while its checkpoint is not `SHARD_END` made opening its reader
/// fail with `NotFound` at every loop restart, which stopped the worker's other shards too and
/// kept the child from ever being leased. Now the shard is ended (a `SHARD_END` with no rows,
/// logged as an error and counted) and the child is read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shard_gone_past_retention_is_ended_and_its_child_then_read() {
    let rig = common::WorkerRig::new("rg").await;
    let (catalog, ident, store) = (rig.catalog.clone(), rig.ident.clone(), rig.store.clone());
    let (p, c) = (ShardId("shardId-p".into()), ShardId("shardId-c".into()));
    let source = Arc::new(MemorySource::new());
    source.add_shard(p.clone(), Vec::new());
    source.add_shard(c.clone(), vec![p.clone()]);
    append(&source, &p, 0..3);
    source.close(&p);
    let specs = [
        LeaseSpec::new(LeaseKey::Shard(p.clone())),
        LeaseSpec::new(LeaseKey::Shard(c.clone())).with_parents(vec![p.clone()]),
    ];
    store.ensure_leases("rg", &specs).await.unwrap();
    // The channel was down for longer than the stream's retention: p is gone, unread.
    source.remove_shard(&p);
    append(&source, &c, 200..204);
    let mut manager = LeaseManager::new(
        store.clone(),
        LeaseManagerConfig::new("rg", "w1", Duration::from_secs(30)),
    );
    for _ in 0..3 {
        manager.tick().await.unwrap();
    }
    assert!(manager.held().shards.contains_key(&p));
    let epoch = manager.held().committer.as_ref().unwrap().lease_counter;
    let (stop, worker_task) = rig.spawn_worker(
        source.clone(),
        Duration::from_millis(300),
        Duration::from_secs(2),
        manager.subscribe(),
    );
    let committer = rig.committer(epoch);
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        committer.run_round().await.unwrap();
        manager.tick().await.unwrap();
        let cp = table_checkpoints(&catalog.load_table(&ident).await.unwrap()).unwrap();
        if cp.get(&c) == Some(&Position::Offset(3)) {
            assert_eq!(cp.get(&p), Some(&Position::ShardEnd), "{cp:?}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the gone shard stalled its child: {cp:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    stop.cancel();
    worker_task.await.unwrap().unwrap();
    let table = catalog.load_table(&ident).await.unwrap();
    let mut ids = floe::tools::quickstart::table_ids(&table).await.unwrap();
    ids.sort();
    assert_eq!(
        ids,
        (200..204).collect::<Vec<i64>>(),
        "the child's records, once"
    );
}
