//! The conformance suite every [`LeaseStore`] + [`BatchStore`] implementation passes (memory,
//! SQLite, later DynamoDB): one public async function per rule, each working in its own freshly
//! named channel so the cases can share one store (or one DynamoDB table) and run in parallel.
//!
//! Run them all with [`run_all`], or one `#[tokio::test]` per case with
//! [`lease_store_conformance_tests!`](crate::lease_store_conformance_tests).

use std::collections::BTreeMap;

use futures::future::join_all;
use uuid::Uuid;

use super::{
    BatchStore, ChannelState, ChannelStatus, Delivered, Lease, LeaseError, LeaseKey, LeaseSpec,
    LeaseStore, Presence,
};
use crate::model::{CheckpointRange, PendingBatch, Position, SequenceNumber, ShardId, ShardRange};

/// Generates one `#[tokio::test]` per conformance case in a module named `$module`.
///
/// `$make` is an expression evaluating to a future of `(guard, store)`: the guard (e.g. a
/// `tempfile::TempDir`) lives as long as the test.
///
/// ```ignore
/// floe::lease_store_conformance_tests!(memory, async { ((), MemoryLeaseStore::new()) });
/// ```
#[macro_export]
macro_rules! lease_store_conformance_tests {
    ($module:ident, $make:expr) => {
        mod $module {
            #[allow(unused_imports)]
            use super::*;
            $crate::lease_store_conformance_tests!(@cases $make;
                ensure_creates_unowned_rows_and_keeps_existing_ones,
                list_is_ordered_by_key_and_scoped_to_the_channel,
                take_of_unowned_lease_sets_owner_and_bumps_counter,
                take_with_stale_counter_conflicts,
                take_with_stale_heartbeat_conflicts,
                take_of_missing_row_conflicts,
                steal_of_owned_lease_bumps_counter,
                renew_bumps_heartbeat_only,
                renew_after_steal_is_lost,
                renew_of_released_or_unowned_lease_is_lost,
                release_clears_owner_and_bumps_counter,
                release_after_steal_is_lost,
                delete_is_conditional_on_the_counter,
                concurrent_takers_exactly_one_wins,
                checkpoint_hint_round_trips_and_does_not_touch_the_lease,
                get_lease_reads_one_row,
                presence_renew_creates_then_bumps_only_the_heartbeat,
                notify_bumps_notice_and_replaces_handoffs_and_needs_a_row,
                presence_is_listed_per_channel_and_removed_idempotently,
                batches_list_in_batch_id_order,
                put_batch_is_idempotent_and_refuses_a_different_batch_under_the_same_id,
                finish_removes_committed_and_rejected_batches,
                channel_state_put_is_conditional_on_version,
                delivered_put_is_conditional_on_version_and_epoch,
            );
        }
    };
    (@cases $make:expr; $($case:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                let (_guard, store) = $make.await;
                $crate::lease::conformance::$case(&store).await;
            }
        )*
    };
}

/// Runs every case of the suite against `store`, one after the other.
pub async fn run_all<S: LeaseStore + BatchStore>(store: &S) {
    ensure_creates_unowned_rows_and_keeps_existing_ones(store).await;
    list_is_ordered_by_key_and_scoped_to_the_channel(store).await;
    take_of_unowned_lease_sets_owner_and_bumps_counter(store).await;
    take_with_stale_counter_conflicts(store).await;
    take_with_stale_heartbeat_conflicts(store).await;
    take_of_missing_row_conflicts(store).await;
    steal_of_owned_lease_bumps_counter(store).await;
    renew_bumps_heartbeat_only(store).await;
    renew_after_steal_is_lost(store).await;
    renew_of_released_or_unowned_lease_is_lost(store).await;
    release_clears_owner_and_bumps_counter(store).await;
    release_after_steal_is_lost(store).await;
    delete_is_conditional_on_the_counter(store).await;
    concurrent_takers_exactly_one_wins(store).await;
    checkpoint_hint_round_trips_and_does_not_touch_the_lease(store).await;
    get_lease_reads_one_row(store).await;
    presence_renew_creates_then_bumps_only_the_heartbeat(store).await;
    notify_bumps_notice_and_replaces_handoffs_and_needs_a_row(store).await;
    presence_is_listed_per_channel_and_removed_idempotently(store).await;
    batches_list_in_batch_id_order(store).await;
    put_batch_is_idempotent_and_refuses_a_different_batch_under_the_same_id(store).await;
    finish_removes_committed_and_rejected_batches(store).await;
    channel_state_put_is_conditional_on_version(store).await;
    delivered_put_is_conditional_on_version_and_epoch(store).await;
}

fn fresh_channel(case: &str) -> String {
    format!("{case}-{}", Uuid::new_v4().simple())
}

async fn one_lease<S: LeaseStore>(store: &S, channel: &str, key: LeaseKey) -> Lease {
    store
        .ensure_leases(channel, &[LeaseSpec::new(key.clone())])
        .await
        .expect("ensure_leases");
    find(store, channel, &key).await
}

async fn find<S: LeaseStore>(store: &S, channel: &str, key: &LeaseKey) -> Lease {
    store
        .list_leases(channel)
        .await
        .expect("list_leases")
        .into_iter()
        .find(|l| &l.key == key)
        .expect("lease row exists")
}

fn assert_conflict<T: std::fmt::Debug>(result: Result<T, LeaseError>) {
    match result {
        Err(LeaseError::Conflict { .. }) => {}
        other => panic!("expected Conflict, got {other:?}"),
    }
}

fn assert_lost<T: std::fmt::Debug>(result: Result<T, LeaseError>) {
    match result {
        Err(LeaseError::Lost { .. }) => {}
        other => panic!("expected Lost, got {other:?}"),
    }
}

/// New rows are unowned with counter and heartbeat 0; ensuring again changes nothing (owner,
/// counter, parents kept).
pub async fn ensure_creates_unowned_rows_and_keeps_existing_ones<S: LeaseStore>(store: &S) {
    let ch = fresh_channel("ensure");
    let parents = vec![ShardId("shardId-000000000000".into())];
    let specs = [
        LeaseSpec::new(LeaseKey::shard("shardId-000000000001")).with_parents(parents.clone()),
        LeaseSpec::new(LeaseKey::Committer),
    ];
    store.ensure_leases(&ch, &specs).await.unwrap();
    let leases = store.list_leases(&ch).await.unwrap();
    assert_eq!(leases.len(), 2);
    for lease in &leases {
        assert_eq!(lease.channel, ch);
        assert_eq!(lease.owner, None);
        assert_eq!((lease.lease_counter, lease.heartbeat), (0, 0));
        assert_eq!(lease.checkpoint_hint, None);
    }
    let shard = find(store, &ch, &LeaseKey::shard("shardId-000000000001")).await;
    assert_eq!(shard.parents, parents);

    let taken = store.take_lease(&shard, "w1").await.unwrap();
    store
        .ensure_leases(&ch, &[LeaseSpec::new(shard.key.clone())])
        .await
        .unwrap();
    assert_eq!(find(store, &ch, &shard.key).await, taken);
    store.ensure_leases(&ch, &[]).await.unwrap();
}

/// `list_leases` returns only the channel's rows, ordered by key.
pub async fn list_is_ordered_by_key_and_scoped_to_the_channel<S: LeaseStore>(store: &S) {
    let ch = fresh_channel("list");
    let other = fresh_channel("list-other");
    let keys = [
        LeaseKey::Committer,
        LeaseKey::shard("3"),
        LeaseKey::shard("1"),
        LeaseKey::shard("2"),
    ];
    let specs: Vec<_> = keys.iter().cloned().map(LeaseSpec::new).collect();
    store.ensure_leases(&ch, &specs).await.unwrap();
    store
        .ensure_leases(&other, &[LeaseSpec::new(LeaseKey::shard("9"))])
        .await
        .unwrap();
    let listed: Vec<_> = store
        .list_leases(&ch)
        .await
        .unwrap()
        .into_iter()
        .map(|l| l.key)
        .collect();
    let mut expected = keys.to_vec();
    expected.sort();
    assert_eq!(listed, expected);
    assert!(store
        .list_leases(&fresh_channel("empty"))
        .await
        .unwrap()
        .is_empty());
}

/// Taking an unowned lease sets the owner and increments the counter; heartbeat unchanged.
pub async fn take_of_unowned_lease_sets_owner_and_bumps_counter<S: LeaseStore>(store: &S) {
    let ch = fresh_channel("take");
    let lease = one_lease(store, &ch, LeaseKey::shard("0")).await;
    let taken = store.take_lease(&lease, "w1").await.unwrap();
    assert_eq!(taken.owner.as_deref(), Some("w1"));
    assert_eq!(taken.lease_counter, lease.lease_counter + 1);
    assert_eq!(taken.heartbeat, lease.heartbeat);
    assert_eq!(find(store, &ch, &lease.key).await, taken);
}

/// A take based on a stale counter (someone took the lease since it was listed) conflicts and
/// changes nothing.
pub async fn take_with_stale_counter_conflicts<S: LeaseStore>(store: &S) {
    let ch = fresh_channel("take-stale-counter");
    let listed = one_lease(store, &ch, LeaseKey::shard("0")).await;
    let by_w1 = store.take_lease(&listed, "w1").await.unwrap();
    assert_conflict(store.take_lease(&listed, "w2").await);
    // Same owner and heartbeat as stored, but an older counter.
    let mut stale = by_w1.clone();
    stale.lease_counter -= 1;
    assert_conflict(store.take_lease(&stale, "w2").await);
    assert_eq!(find(store, &ch, &listed.key).await, by_w1);
}

/// A take based on a stale heartbeat (the holder renewed since) conflicts: a renewed lease is
/// not expired.
pub async fn take_with_stale_heartbeat_conflicts<S: LeaseStore>(store: &S) {
    let ch = fresh_channel("take-stale-heartbeat");
    let listed = one_lease(store, &ch, LeaseKey::shard("0")).await;
    let by_w1 = store.take_lease(&listed, "w1").await.unwrap();
    let renewed = store.renew_lease(&by_w1).await.unwrap();
    assert_conflict(store.take_lease(&by_w1, "w2").await);
    assert_eq!(find(store, &ch, &listed.key).await, renewed);
}

/// Taking a lease whose row does not exist conflicts and does not create it.
pub async fn take_of_missing_row_conflicts<S: LeaseStore>(store: &S) {
    let ch = fresh_channel("take-missing");
    let ghost = Lease {
        channel: ch.clone(),
        key: LeaseKey::shard("0"),
        owner: None,
        lease_counter: 0,
        heartbeat: 0,
        checkpoint_hint: None,
        parents: Vec::new(),
    };
    assert_conflict(store.take_lease(&ghost, "w1").await);
    assert!(store.list_leases(&ch).await.unwrap().is_empty());
}

/// Stealing (taking a lease owned by another worker, as listed) succeeds and bumps the counter.
pub async fn steal_of_owned_lease_bumps_counter<S: LeaseStore>(store: &S) {
    let ch = fresh_channel("steal");
    let listed = one_lease(store, &ch, LeaseKey::shard("0")).await;
    let by_w1 = store.take_lease(&listed, "w1").await.unwrap();
    let by_w2 = store.take_lease(&by_w1, "w2").await.unwrap();
    assert_eq!(by_w2.owner.as_deref(), Some("w2"));
    assert_eq!(by_w2.lease_counter, by_w1.lease_counter + 1);
}

/// Renewal increments the heartbeat only.
pub async fn renew_bumps_heartbeat_only<S: LeaseStore>(store: &S) {
    let ch = fresh_channel("renew");
    let listed = one_lease(store, &ch, LeaseKey::Committer).await;
    let held = store.take_lease(&listed, "w1").await.unwrap();
    let once = store.renew_lease(&held).await.unwrap();
    assert_eq!(once.heartbeat, held.heartbeat + 1);
    assert_eq!(
        (once.owner.as_deref(), once.lease_counter),
        (Some("w1"), held.lease_counter)
    );
    // Renewing with the older copy still works: the heartbeat is not part of the condition.
    let twice = store.renew_lease(&held).await.unwrap();
    assert_eq!(twice.heartbeat, held.heartbeat + 2);
    assert_eq!(find(store, &ch, &listed.key).await, twice);
}

/// After another worker stole the lease, the old holder's renewal is `Lost`.
pub async fn renew_after_steal_is_lost<S: LeaseStore>(store: &S) {
    let ch = fresh_channel("renew-stolen");
    let listed = one_lease(store, &ch, LeaseKey::shard("0")).await;
    let by_w1 = store.take_lease(&listed, "w1").await.unwrap();
    let by_w2 = store.take_lease(&by_w1, "w2").await.unwrap();
    assert_lost(store.renew_lease(&by_w1).await);
    assert_eq!(find(store, &ch, &listed.key).await, by_w2);
    // A worker taking back its own lease gets a new counter; the old copy stays dead.
    let back = store.take_lease(&by_w2, "w1").await.unwrap();
    assert_lost(store.renew_lease(&by_w1).await);
    store.renew_lease(&back).await.unwrap();
}

/// Renewing a released lease, or a copy without owner, is `Lost`.
pub async fn renew_of_released_or_unowned_lease_is_lost<S: LeaseStore>(store: &S) {
    let ch = fresh_channel("renew-released");
    let listed = one_lease(store, &ch, LeaseKey::shard("0")).await;
    assert_lost(store.renew_lease(&listed).await);
    let held = store.take_lease(&listed, "w1").await.unwrap();
    store.release_lease(&held).await.unwrap();
    assert_lost(store.renew_lease(&held).await);
}

/// Release clears the owner and increments the counter; a second release is `Lost`.
pub async fn release_clears_owner_and_bumps_counter<S: LeaseStore>(store: &S) {
    let ch = fresh_channel("release");
    let listed = one_lease(store, &ch, LeaseKey::shard("0")).await;
    let held = store.take_lease(&listed, "w1").await.unwrap();
    store.release_lease(&held).await.unwrap();
    let after = find(store, &ch, &listed.key).await;
    assert_eq!(after.owner, None);
    assert_eq!(after.lease_counter, held.lease_counter + 1);
    assert_lost(store.release_lease(&held).await);
    // The released lease can be taken again, with a higher counter still.
    let again = store.take_lease(&after, "w2").await.unwrap();
    assert_eq!(again.lease_counter, held.lease_counter + 2);
}

/// Release by a worker whose lease was stolen is `Lost` and leaves the thief's lease intact.
pub async fn release_after_steal_is_lost<S: LeaseStore>(store: &S) {
    let ch = fresh_channel("release-stolen");
    let listed = one_lease(store, &ch, LeaseKey::shard("0")).await;
    let by_w1 = store.take_lease(&listed, "w1").await.unwrap();
    let by_w2 = store.take_lease(&by_w1, "w2").await.unwrap();
    assert_lost(store.release_lease(&by_w1).await);
    assert_eq!(find(store, &ch, &listed.key).await, by_w2);
}

/// Delete removes the row only while its counter is the one listed (owned or not), and a deleted
/// row is gone from the listing; deleting it again conflicts.
pub async fn delete_is_conditional_on_the_counter<S: LeaseStore>(store: &S) {
    let ch = fresh_channel("delete");
    let listed = one_lease(store, &ch, LeaseKey::shard("0")).await;
    let held = store.take_lease(&listed, "w1").await.unwrap();
    assert_conflict(store.delete_lease(&listed).await);
    assert_eq!(find(store, &ch, &listed.key).await, held);
    store.delete_lease(&held).await.unwrap();
    assert!(store.list_leases(&ch).await.unwrap().is_empty());
    assert_eq!(store.get_lease(&ch, &listed.key).await.unwrap(), None);
    assert_conflict(store.delete_lease(&held).await);
}

/// Eight workers take the same listed lease at once: exactly one wins, the others conflict.
pub async fn concurrent_takers_exactly_one_wins<S: LeaseStore>(store: &S) {
    for round in 0..5 {
        let ch = fresh_channel("race");
        let listed = one_lease(store, &ch, LeaseKey::shard("0")).await;
        let workers: Vec<String> = (0..8).map(|i| format!("w{i}")).collect();
        let results = join_all(workers.iter().map(|w| store.take_lease(&listed, w))).await;
        let winners: Vec<_> = results.iter().filter_map(|r| r.as_ref().ok()).collect();
        assert_eq!(winners.len(), 1, "round {round}: {results:?}");
        for r in &results {
            if let Err(e) = r {
                assert!(
                    matches!(e, LeaseError::Conflict { .. }),
                    "round {round}: {e:?}"
                );
            }
        }
        let stored = find(store, &ch, &listed.key).await;
        assert_eq!(&stored, winners[0]);
        assert_eq!(stored.lease_counter, 1);
    }
}

/// The checkpoint hint round-trips exactly (an offset is not confused with a short sequence
/// number; `SHARD_END` kept) and does not change owner, counter or heartbeat; a missing row
/// conflicts.
pub async fn checkpoint_hint_round_trips_and_does_not_touch_the_lease<S: LeaseStore>(store: &S) {
    let ch = fresh_channel("hint");
    let listed = one_lease(store, &ch, LeaseKey::shard("0")).await;
    let held = store.take_lease(&listed, "w1").await.unwrap();
    let big = "49590338271490256608559692538361571095921575989136588898";
    for position in [
        Position::Offset(41),
        Position::Sequence(SequenceNumber::try_new("41").unwrap()),
        Position::Sequence(SequenceNumber::try_new(big).unwrap().with_sub_sequence(3)),
        Position::ShardEnd,
    ] {
        store
            .set_checkpoint_hint(&ch, &listed.key, &position)
            .await
            .unwrap();
        let now = find(store, &ch, &listed.key).await;
        assert_eq!(now.checkpoint_hint.as_ref(), Some(&position));
        assert_eq!(
            (now.owner.clone(), now.lease_counter, now.heartbeat),
            (held.owner.clone(), held.lease_counter, held.heartbeat)
        );
    }
    // The hint is not part of any condition.
    store.renew_lease(&held).await.unwrap();
    assert_conflict(
        store
            .set_checkpoint_hint(&ch, &LeaseKey::shard("nope"), &Position::Offset(1))
            .await,
    );
}

/// `get_lease` returns the row exactly as `list_leases` does, and `None` for a missing key.
pub async fn get_lease_reads_one_row<S: LeaseStore>(store: &S) {
    let ch = fresh_channel("get");
    let listed = one_lease(store, &ch, LeaseKey::Committer).await;
    let held = store.take_lease(&listed, "w1").await.unwrap();
    assert_eq!(
        store.get_lease(&ch, &LeaseKey::Committer).await.unwrap(),
        Some(held)
    );
    assert_eq!(
        store
            .get_lease(&ch, &LeaseKey::shard("nope"))
            .await
            .unwrap(),
        None
    );
}

/// The first renewal creates the row (heartbeat 1, notice 0, no handoffs); later ones bump the
/// heartbeat alone and return the row as written, the balancer's notice included.
pub async fn presence_renew_creates_then_bumps_only_the_heartbeat<S: LeaseStore>(store: &S) {
    let ch = fresh_channel("presence");
    let first = store.renew_presence(&ch, "w1").await.unwrap();
    assert_eq!(
        (first.worker.as_str(), first.heartbeat, first.notice),
        ("w1", 1, 0)
    );
    assert!(first.handoffs.is_empty());
    let handoffs = BTreeMap::from([(ShardId("7".into()), "w2".to_string())]);
    store.notify_worker(&ch, "w1", &handoffs).await.unwrap();
    let second = store.renew_presence(&ch, "w1").await.unwrap();
    assert_eq!((second.heartbeat, second.notice), (2, 1));
    assert_eq!(second.handoffs, handoffs);
}

/// A notice bumps `notice` by one and replaces the handoffs (an empty map clears them), leaves
/// the heartbeat alone, and conflicts for a worker without a presence row.
pub async fn notify_bumps_notice_and_replaces_handoffs_and_needs_a_row<S: LeaseStore>(store: &S) {
    let ch = fresh_channel("notify");
    store.renew_presence(&ch, "w1").await.unwrap();
    let two = BTreeMap::from([
        (ShardId("1".into()), "w2".to_string()),
        (ShardId("2".into()), "w3".to_string()),
    ]);
    store.notify_worker(&ch, "w1", &two).await.unwrap();
    store
        .notify_worker(&ch, "w1", &BTreeMap::new())
        .await
        .unwrap();
    let rows = store.list_presence(&ch).await.unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!((rows[0].heartbeat, rows[0].notice), (1, 2));
    assert!(rows[0].handoffs.is_empty());
    assert_conflict(store.notify_worker(&ch, "ghost", &two).await);
    assert!(store.list_presence(&ch).await.unwrap().len() == 1);
}

/// Presence rows are listed by worker id within their channel only, and removing one (twice)
/// leaves the others; a removed worker's next renewal starts it afresh.
pub async fn presence_is_listed_per_channel_and_removed_idempotently<S: LeaseStore>(store: &S) {
    let ch = fresh_channel("workers");
    let other = fresh_channel("workers-other");
    for w in ["w3", "w1", "w2"] {
        store.renew_presence(&ch, w).await.unwrap();
    }
    store.renew_presence(&other, "w9").await.unwrap();
    let names = |rows: Vec<Presence>| rows.into_iter().map(|p| p.worker).collect::<Vec<_>>();
    assert_eq!(
        names(store.list_presence(&ch).await.unwrap()),
        ["w1", "w2", "w3"]
    );
    store.remove_presence(&ch, "w2").await.unwrap();
    store.remove_presence(&ch, "w2").await.unwrap();
    assert_eq!(names(store.list_presence(&ch).await.unwrap()), ["w1", "w3"]);
    assert_eq!(names(store.list_presence(&other).await.unwrap()), ["w9"]);
    assert_eq!(store.renew_presence(&ch, "w2").await.unwrap().heartbeat, 1);
}

fn batch(channel: &str, batch_id: Uuid, last: i64) -> PendingBatch {
    PendingBatch {
        channel: channel.to_string(),
        batch_id,
        worker_id: "w1".into(),
        shards: vec![ShardRange {
            shard: ShardId::kafka_partition(0),
            range: CheckpointRange {
                after_exclusive: Some(Position::Offset(last - 10)),
                last_inclusive: Position::Offset(last),
            },
            lease_counter: 3,
        }],
        files: crate::model::BatchFiles::Iceberg {
            data_files: vec![format!("{{\"file_path\":\"f-{batch_id}.parquet\"}}")],
            dlq_staged: Some(format!("dlq/staged/{batch_id}.jsonl")),
            deleted_keys: None,
        },
        num_rows: 10,
        num_dead_lettered: 0,
        dead_lettered_by_code: Default::default(),
        data_bytes: 1234,
        oldest_read_at_ms: 1_700_000_000_000,
    }
}

/// Pending batches list in `batch_id` order (UUIDv7 time order), whatever the put order, and
/// only the channel's own.
pub async fn batches_list_in_batch_id_order<S: BatchStore>(store: &S) {
    let ch = fresh_channel("batches");
    let other = fresh_channel("batches-other");
    // Ids whose order differs from insertion order; high bits vary as in UUIDv7 timestamps.
    let ids: Vec<Uuid> = [
        0x0190_0000_0000_7000_8000_0000_0000_0003u128,
        0x0190_0000_0000_7000_8000_0000_0000_0001,
        0x0191_0000_0000_7000_8000_0000_0000_0000,
        0x018f_ffff_ffff_7fff_bfff_ffff_ffff_ffff,
        0x0190_0000_0000_7000_8000_0000_0000_0002,
    ]
    .into_iter()
    .map(Uuid::from_u128)
    .collect();
    for (i, id) in ids.iter().enumerate() {
        store
            .put_batch(&batch(&ch, *id, 10 * i as i64 + 10))
            .await
            .unwrap();
    }
    store
        .put_batch(&batch(&other, Uuid::now_v7(), 10))
        .await
        .unwrap();
    let listed: Vec<Uuid> = store
        .list_pending(&ch)
        .await
        .unwrap()
        .into_iter()
        .map(|b| b.batch_id)
        .collect();
    let mut sorted = ids.clone();
    sorted.sort();
    assert_eq!(listed, sorted);
    let first = &store.list_pending(&ch).await.unwrap()[0];
    assert_eq!(first, &batch(&ch, sorted[0], 40));
}

/// Putting the same batch twice succeeds (a retried put after an unknown outcome); a different
/// batch under an existing id conflicts.
pub async fn put_batch_is_idempotent_and_refuses_a_different_batch_under_the_same_id<
    S: BatchStore,
>(
    store: &S,
) {
    let ch = fresh_channel("batch-idempotent");
    let id = Uuid::now_v7();
    store.put_batch(&batch(&ch, id, 10)).await.unwrap();
    store.put_batch(&batch(&ch, id, 10)).await.unwrap();
    assert_conflict(store.put_batch(&batch(&ch, id, 20)).await);
    assert_eq!(
        store.list_pending(&ch).await.unwrap(),
        vec![batch(&ch, id, 10)]
    );
}

/// Finishing removes committed and rejected batches; unknown ids are ignored.
pub async fn finish_removes_committed_and_rejected_batches<S: BatchStore>(store: &S) {
    let ch = fresh_channel("finish");
    let ids: Vec<Uuid> = (1..=4u128)
        .map(|i| Uuid::from_u128(0x0190_0000_0000_7000_8000_0000_0000_0000 + i))
        .collect();
    for id in &ids {
        store.put_batch(&batch(&ch, *id, 10)).await.unwrap();
    }
    store
        .finish_batches(&ch, &[ids[0], Uuid::now_v7()], &[ids[2]])
        .await
        .unwrap();
    let left: Vec<Uuid> = store
        .list_pending(&ch)
        .await
        .unwrap()
        .into_iter()
        .map(|b| b.batch_id)
        .collect();
    assert_eq!(left, vec![ids[1], ids[3]]);
    store.finish_batches(&ch, &[ids[0]], &[]).await.unwrap();
    store
        .finish_batches(&ch, &[ids[1]], &[ids[3]])
        .await
        .unwrap();
    assert!(store.list_pending(&ch).await.unwrap().is_empty());
}

/// Channel state: create only when absent; update only at the expected version; the store
/// numbers versions 1, 2, ….
pub async fn channel_state_put_is_conditional_on_version<S: BatchStore>(store: &S) {
    let ch = fresh_channel("state");
    assert_eq!(store.get_channel_state(&ch).await.unwrap(), None);
    let mut state = ChannelState {
        channel: ch.clone(),
        state: ChannelStatus::Creating,
        status_reason: None,
        activated_at_ms: None,
        table_uuid: None,
        schema_version_id: None,
        version: 99,
        updated_at_ms: 1_700_000_000_000,
        overrides: Default::default(),
        from_first_record: false,
    };
    assert_conflict(store.put_channel_state(&state, Some(0)).await);
    assert_eq!(store.put_channel_state(&state, None).await.unwrap(), 1);
    assert_conflict(store.put_channel_state(&state, None).await);
    let got = store.get_channel_state(&ch).await.unwrap().unwrap();
    assert_eq!(got.version, 1);
    assert_eq!(got.state, ChannelStatus::Creating);

    state.state = ChannelStatus::Active;
    state.activated_at_ms = Some(1_700_000_000_500);
    state.overrides.data_freshness_ms = Some(60_000);
    state.overrides.delivery_log = Some(super::DeliveryLog::Failures);
    state.table_uuid = Some(Uuid::new_v4().to_string());
    state.schema_version_id = Some(Uuid::new_v4().to_string());
    assert_eq!(store.put_channel_state(&state, Some(1)).await.unwrap(), 2);
    assert_conflict(store.put_channel_state(&state, Some(1)).await);
    let got = store.get_channel_state(&ch).await.unwrap().unwrap();
    assert_eq!(
        got,
        ChannelState {
            version: 2,
            ..state.clone()
        }
    );

    state.state = ChannelStatus::Suspended;
    state.status_reason = Some("table was dropped and recreated".into());
    assert_eq!(store.put_channel_state(&state, Some(2)).await.unwrap(), 3);
    assert_eq!(
        store
            .get_channel_state(&ch)
            .await
            .unwrap()
            .unwrap()
            .status_reason,
        state.status_reason
    );
}

/// Delivered checkpoints (raw channels): created only when absent; updated only at the expected
/// version **and** by a committer whose epoch is not lower than the stored one, so a stale
/// committer can never move them; the store numbers versions 1, 2, ….
pub async fn delivered_put_is_conditional_on_version_and_epoch<S: BatchStore>(store: &S) {
    let ch = fresh_channel("delivered");
    assert_eq!(store.get_delivered(&ch).await.unwrap(), None);
    let shard = ShardId::kafka_partition(0);
    let kinesis = ShardId("shardId-000000000001".into());
    let mut d = Delivered {
        channel: ch.clone(),
        committer_epoch: 3,
        version: 42,
        ..Delivered::default()
    };
    assert_conflict(store.put_delivered(&d, Some(0)).await);
    assert_eq!(store.put_delivered(&d, None).await.unwrap(), 1);
    assert_conflict(store.put_delivered(&d, None).await);
    let got = store.get_delivered(&ch).await.unwrap().unwrap();
    assert_eq!(
        got,
        Delivered {
            version: 1,
            ..d.clone()
        }
    );

    d.checkpoints.0.insert(shard.clone(), Position::Offset(9));
    d.checkpoints.0.insert(
        kinesis.clone(),
        Position::Sequence(
            SequenceNumber::try_new("49590338271490256608559692538361571095921575989136588898")
                .unwrap(),
        ),
    );
    d.last_commit_id = Some(Uuid::now_v7());
    d.committed_batch_ids = vec![Uuid::now_v7(), Uuid::now_v7()];
    assert_eq!(store.put_delivered(&d, Some(1)).await.unwrap(), 2);
    // The same version again (a committer that read version 1): refused.
    assert_conflict(store.put_delivered(&d, Some(1)).await);
    assert_eq!(
        store.get_delivered(&ch).await.unwrap().unwrap(),
        Delivered {
            version: 2,
            ..d.clone()
        }
    );

    // A newer committer takes over (epoch 4) ...
    d.committer_epoch = 4;
    d.checkpoints.0.insert(shard.clone(), Position::Offset(19));
    assert_eq!(store.put_delivered(&d, Some(2)).await.unwrap(), 3);
    // ... and the stale one (epoch 3), even at the current version, cannot move anything.
    let mut stale = d.clone();
    stale.committer_epoch = 3;
    stale
        .checkpoints
        .0
        .insert(shard.clone(), Position::Offset(29));
    assert_conflict(store.put_delivered(&stale, Some(3)).await);
    let got = store.get_delivered(&ch).await.unwrap().unwrap();
    assert_eq!(got.checkpoints.get(&shard), Some(&Position::Offset(19)));
    assert_eq!(got.committer_epoch, 4);
    assert_eq!(got.version, 3);
    // Another channel's item is separate.
    assert_eq!(
        store.get_delivered(&fresh_channel("other")).await.unwrap(),
        None
    );
}
