//! The pure core of a commit round: which pending batches to accept, recover, keep or reject,
//! given the committed checkpoints, the ids of committed batches and the shards' current lease
//! counters (docs/design.md, protocol step 3), and which ended shards' `SHARD_END` it prunes
//! (step 8). No I/O; table-tested below.

use std::collections::{HashMap, HashSet};

use uuid::Uuid;

use crate::model::{Checkpoints, Lineage, PendingBatch, RangeVerdict, ShardId};

/// Decision for one pending batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BatchDecision {
    /// Commit it in this round.
    Accept,
    /// A snapshot already holds it (a committer crashed after committing): finish it.
    AlreadyCommitted,
    /// It can never be committed (a range starting before the checkpoint, or a stale lease
    /// counter): reject it.
    Dead,
    /// A gap before it: leave it pending.
    Keep,
}

/// The plan of one commit round.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RoundPlan {
    /// Decision per pending batch, in the order given.
    pub decisions: Vec<BatchDecision>,
    /// Checkpoints after the accepted batches, ended shards pruned
    /// ([`Checkpoints::prune_ended`]).
    pub checkpoints: Checkpoints,
}

/// Plans a round (pure; docs/design.md protocol step 3). `pending` must be in batch-id order;
/// `lease_counters` holds each shard lease's current counter (the fencing token).
pub fn plan_round(
    checkpoints: &Checkpoints,
    committed_batch_ids: &HashSet<Uuid>,
    lease_counters: &HashMap<ShardId, u64>,
    pending: &[PendingBatch],
) -> RoundPlan {
    plan_round_aged(
        checkpoints,
        committed_batch_ids,
        lease_counters,
        pending,
        None,
        &Lineage::default(),
    )
}

/// [`plan_round`], where a batch whose id (a UUIDv7) is older than `oldest_batch_ms` is also
/// dead unless already committed: the orphan sweep may have deleted the files of a batch handed
/// off that late (`crate::iceberg::orphans`); its records are read again. With the shards'
/// `lineage` (Kinesis parents and children), the resulting checkpoints drop every `SHARD_END`
/// whose children all have a checkpoint, and a range of a shard so pruned earlier is dead (a
/// duplicate, as against its `SHARD_END`), never taken for the shard's first range.
pub fn plan_round_aged(
    checkpoints: &Checkpoints,
    committed_batch_ids: &HashSet<Uuid>,
    lease_counters: &HashMap<ShardId, u64>,
    pending: &[PendingBatch],
    oldest_batch_ms: Option<i64>,
    lineage: &Lineage,
) -> RoundPlan {
    let pruned_before = checkpoints.pruned_ended(lineage);
    let mut cp = checkpoints.with_pruned_ended(lineage);
    let mut decisions = Vec::with_capacity(pending.len());
    for batch in pending {
        let too_old = oldest_batch_ms.is_some_and(|oldest| {
            crate::time::uuid_v7_ms(&batch.batch_id).is_none_or(|t| t < oldest)
        });
        let decision = if committed_batch_ids.contains(&batch.batch_id) {
            BatchDecision::AlreadyCommitted
        } else if too_old
            || batch.shards.iter().any(|s| {
                cp.verdict(&s.shard, &s.range).is_permanent_rejection()
                    || lease_counters
                        .get(&s.shard)
                        .is_some_and(|current| s.lease_counter < *current)
            })
        {
            BatchDecision::Dead
        } else if batch
            .shards
            .iter()
            .all(|s| cp.verdict(&s.shard, &s.range) == RangeVerdict::Contiguous)
        {
            for s in &batch.shards {
                cp.advance(&s.shard, &s.range);
            }
            BatchDecision::Accept
        } else {
            BatchDecision::Keep
        };
        decisions.push(decision);
    }
    cp.prune_ended(lineage);
    // A shard pruned before that is still there has a child without a checkpoint (one the
    // lineage learned of later): it stays pruned, since the lineage still shows it ended.
    cp.0.retain(|shard, _| !pruned_before.contains(shard));
    RoundPlan {
        decisions,
        checkpoints: cp,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{CheckpointRange, Position, ShardRange};

    fn batch(id: u128, shard: i32, after: Option<i64>, last: i64, counter: u64) -> PendingBatch {
        PendingBatch {
            channel: "c".into(),
            batch_id: Uuid::from_u128(id),
            worker_id: "w".into(),
            shards: vec![ShardRange {
                shard: ShardId::kafka_partition(shard),
                range: CheckpointRange {
                    after_exclusive: after.map(Position::Offset),
                    last_inclusive: Position::Offset(last),
                },
                lease_counter: counter,
            }],
            files: crate::model::BatchFiles::Iceberg {
                data_files: vec![],
                dlq_staged: None,
                deleted_keys: None,
            },
            num_rows: 1,
            num_dead_lettered: 0,
            dead_lettered_by_code: Default::default(),
            data_bytes: 0,
            oldest_read_at_ms: 0,
        }
    }

    #[test]
    fn plan_accepts_a_chain_and_rejects_the_duplicate_from_a_second_worker() {
        let pending = vec![
            batch(1, 0, None, 9, 1),
            batch(2, 0, Some(9), 19, 1),
            // A second worker read the same range (0..=9) again: a duplicate.
            batch(3, 0, None, 9, 1),
        ];
        let plan = plan_round(
            &Checkpoints::default(),
            &HashSet::new(),
            &HashMap::new(),
            &pending,
        );
        assert_eq!(
            plan.decisions,
            vec![
                BatchDecision::Accept,
                BatchDecision::Accept,
                BatchDecision::Dead
            ]
        );
        assert_eq!(
            plan.checkpoints.get(&ShardId::kafka_partition(0)),
            Some(&Position::Offset(19))
        );
    }

    #[test]
    fn plan_rejects_a_batch_overlapping_the_checkpoint_instead_of_keeping_it_forever() {
        // Worker 1's range 0..=9 was committed; worker 2 had read 0..=11 from the start.
        let mut cp = Checkpoints::default();
        cp.0.insert(ShardId::kafka_partition(0), Position::Offset(9));
        let pending = vec![batch(1, 0, None, 11, 2), batch(2, 0, Some(11), 20, 2)];
        let plan = plan_round(&cp, &HashSet::new(), &HashMap::new(), &pending);
        // The overlapping batch is dead; the one chained after it is a gap and waits.
        assert_eq!(
            plan.decisions,
            vec![BatchDecision::Dead, BatchDecision::Keep]
        );
    }

    #[test]
    fn commit_rejects_batch_from_stale_lease() {
        let pending = vec![batch(1, 0, None, 9, 1), batch(2, 0, None, 12, 2)];
        let counters = HashMap::from([(ShardId::kafka_partition(0), 2)]);
        let plan = plan_round(
            &Checkpoints::default(),
            &HashSet::new(),
            &counters,
            &pending,
        );
        assert_eq!(
            plan.decisions,
            vec![BatchDecision::Dead, BatchDecision::Accept]
        );
    }

    fn kinesis_batch(
        id: u128,
        shard: &str,
        after: Option<Position>,
        last: Position,
        num_rows: u64,
    ) -> PendingBatch {
        let mut b = batch(id, 0, None, 0, 1);
        b.shards[0].shard = ShardId(shard.into());
        b.shards[0].range = CheckpointRange {
            after_exclusive: after,
            last_inclusive: last,
        };
        b.num_rows = num_rows;
        b
    }

    fn seq(text: &str) -> Position {
        text.parse().unwrap()
    }

    #[test]
    fn plan_accepts_shard_end_after_the_checkpoint_even_without_rows() {
        let s = ShardId("shardId-000000000000".into());
        let last = "49590338271490256608559692538361571095921575989136588898";
        let mut cp = Checkpoints::default();
        cp.0.insert(s.clone(), seq(last));
        // The shard's last records and its end in one batch, then a batch with only the end.
        let pending = vec![kinesis_batch(
            1,
            s.as_str(),
            Some(seq(last)),
            Position::ShardEnd,
            0,
        )];
        let plan = plan_round(&cp, &HashSet::new(), &HashMap::new(), &pending);
        assert_eq!(plan.decisions, vec![BatchDecision::Accept]);
        assert_eq!(plan.checkpoints.get(&s), Some(&Position::ShardEnd));
    }

    #[test]
    fn plan_accepts_records_and_shard_end_of_a_shard_never_checkpointed() {
        let s = "shardId-000000000003";
        let pending = vec![
            kinesis_batch(1, s, None, Position::ShardEnd, 7),
            // The same shard read again by a second worker: a duplicate of SHARD_END.
            kinesis_batch(2, s, None, seq("4959.2"), 3),
        ];
        let plan = plan_round(
            &Checkpoints::default(),
            &HashSet::new(),
            &HashMap::new(),
            &pending,
        );
        assert_eq!(
            plan.decisions,
            vec![BatchDecision::Accept, BatchDecision::Dead]
        );
        assert_eq!(
            plan.checkpoints.get(&ShardId(s.into())),
            Some(&Position::ShardEnd)
        );
    }

    #[test]
    fn plan_rejects_anything_after_shard_end() {
        let s = ShardId("shardId-000000000001".into());
        let mut cp = Checkpoints::default();
        cp.0.insert(s.clone(), Position::ShardEnd);
        let pending = vec![
            kinesis_batch(1, s.as_str(), Some(seq("4959")), Position::ShardEnd, 0),
            kinesis_batch(
                2,
                s.as_str(),
                Some(Position::ShardEnd),
                Position::ShardEnd,
                0,
            ),
        ];
        let plan = plan_round(&cp, &HashSet::new(), &HashMap::new(), &pending);
        assert_eq!(
            plan.decisions,
            vec![BatchDecision::Dead, BatchDecision::Dead],
            "a shard at SHARD_END takes nothing more"
        );
    }

    #[test]
    fn plan_keeps_a_batch_after_a_gap_and_recovers_committed_ones() {
        let mut cp = Checkpoints::default();
        cp.0.insert(ShardId::kafka_partition(0), Position::Offset(9));
        let pending = vec![batch(1, 0, None, 9, 1), batch(2, 0, Some(15), 20, 1)];
        let committed = HashSet::from([Uuid::from_u128(1)]);
        let plan = plan_round(&cp, &committed, &HashMap::new(), &pending);
        assert_eq!(
            plan.decisions,
            vec![BatchDecision::AlreadyCommitted, BatchDecision::Keep]
        );
        assert_eq!(plan.checkpoints, cp);
    }

    fn lineage(pairs: &[(&str, &[&str])]) -> Lineage {
        let owned: Vec<(ShardId, Vec<ShardId>)> = pairs
            .iter()
            .map(|(c, ps)| {
                (
                    ShardId(c.to_string()),
                    ps.iter().map(|p| ShardId(p.to_string())).collect(),
                )
            })
            .collect();
        Lineage::from_parents(owned.iter().map(|(c, ps)| (c, ps.as_slice())))
    }

    /// Issue 33: a parent's `SHARD_END` is dropped in the commit that gives its last child a
    /// checkpoint; a parent with a child not committed yet keeps it.
    #[test]
    fn plan_prunes_a_parents_shard_end_once_every_child_has_a_checkpoint() {
        // p split into c1 and c2.
        let lin = lineage(&[("c1", &["p"]), ("c2", &["p"])]);
        let mut cp = Checkpoints::default();
        cp.0.insert(ShardId("p".into()), Position::ShardEnd);
        let first = vec![kinesis_batch(1, "c1", None, seq("4960"), 3)];
        let plan = plan_round_aged(&cp, &HashSet::new(), &HashMap::new(), &first, None, &lin);
        assert_eq!(plan.decisions, vec![BatchDecision::Accept]);
        assert_eq!(
            plan.checkpoints.get(&ShardId("p".into())),
            Some(&Position::ShardEnd),
            "c2 has no checkpoint yet"
        );
        let second = vec![kinesis_batch(2, "c2", None, seq("4961"), 3)];
        let plan = plan_round_aged(
            &plan.checkpoints,
            &HashSet::new(),
            &HashMap::new(),
            &second,
            None,
            &lin,
        );
        assert_eq!(plan.decisions, vec![BatchDecision::Accept]);
        assert_eq!(
            plan.checkpoints
                .0
                .keys()
                .map(|s| s.as_str())
                .collect::<Vec<_>>(),
            vec!["c1", "c2"]
        );
    }

    /// A pruned parent read again from its start (a lease row lost and created anew) must not be
    /// taken for a shard never read: its ranges are duplicates, and it stays pruned.
    #[test]
    fn plan_rejects_a_pruned_parents_first_range_as_a_duplicate() {
        let lin = lineage(&[("c", &["p", "q"])]);
        let mut cp = Checkpoints::default();
        cp.0.insert(ShardId("c".into()), seq("4970"));
        let pending = vec![
            kinesis_batch(1, "p", None, seq("4950"), 5),
            kinesis_batch(2, "q", None, Position::ShardEnd, 5),
            kinesis_batch(3, "c", Some(seq("4970")), seq("4971"), 1),
        ];
        let plan = plan_round_aged(&cp, &HashSet::new(), &HashMap::new(), &pending, None, &lin);
        assert_eq!(
            plan.decisions,
            vec![
                BatchDecision::Dead,
                BatchDecision::Dead,
                BatchDecision::Accept
            ]
        );
        assert_eq!(
            plan.checkpoints
                .0
                .keys()
                .map(|s| s.as_str())
                .collect::<Vec<_>>(),
            vec!["c"]
        );
        // Without the lineage the same batch of p would have been accepted: a duplicate.
        let blind = plan_round(&cp, &HashSet::new(), &HashMap::new(), &pending[..1]);
        assert_eq!(blind.decisions, vec![BatchDecision::Accept]);
    }

    /// A batch older than the bound is dead (its files may have been swept), and the batch
    /// after it in its chain is kept (a gap) rather than accepted; a committed old batch is
    /// still recovered.
    #[test]
    fn a_batch_older_than_the_bound_is_dead_unless_already_committed() {
        let v7 = |secs| Uuid::new_v7(uuid::Timestamp::from_unix(uuid::NoContext, secs, 0));
        let (old, young, bound) = (v7(1_000), v7(2_000), 1_500_000);
        let mut first = batch(0, 0, None, 9, 1);
        first.batch_id = old;
        let mut second = batch(0, 0, Some(9), 19, 1);
        second.batch_id = young;
        let pending = vec![first.clone(), second.clone()];
        let plan = plan_round_aged(
            &Checkpoints::default(),
            &HashSet::new(),
            &HashMap::new(),
            &pending,
            Some(bound),
            &Lineage::default(),
        );
        assert_eq!(
            plan.decisions,
            vec![BatchDecision::Dead, BatchDecision::Keep]
        );
        let plan = plan_round_aged(
            &Checkpoints::default(),
            &HashSet::from([old]),
            &HashMap::new(),
            &pending,
            Some(bound),
            &Lineage::default(),
        );
        assert_eq!(plan.decisions[0], BatchDecision::AlreadyCommitted);
        let plan = plan_round(
            &Checkpoints::default(),
            &HashSet::new(),
            &HashMap::new(),
            &pending,
        );
        assert_eq!(
            plan.decisions,
            vec![BatchDecision::Accept, BatchDecision::Accept]
        );
    }
}
