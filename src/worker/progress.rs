//! The worker's pure core: per held shard, where its next batch starts and what is buffered, and
//! the batches handed off but not yet seen committed (docs/design.md, protocol steps 2 and 7).
//! No I/O and no clock of its own: the worker loop feeds it leases, records, checkpoints and the
//! pending set, and acts on what it answers (which readers to reopen, after which position).
//!
//! ```text
//!   take(S, counter, checkpoint) ─> next_after(S) = checkpoint
//!   record(S, p)                 ─> buffered_last(S) = p
//!   batch_ranges()               ─> per shard with records (or a SHARD_END due): (next_after, last]
//!   handed_off(id, ranges)       ─> next_after(S) = last; in flight += id
//!   drop_buffer()                ─> reopen every shard after next_after (its last hand-off)
//!   lose(shards)                 ─> a batch in flight covers one: it is doomed, every shard
//!                                   rewinds to the table's checkpoints, nothing stays in flight
//!   reconcile(pending, cp)       ─> committed: forgotten; gone and not committed: rejected, rewind
//! ```
//!
//! Invariant: a batch range always continues the shard's previous hand-off or its committed
//! checkpoint, and never covers a record that was dropped from the buffer.

use std::collections::{BTreeMap, HashSet};

use tokio::time::Instant;
use uuid::Uuid;

use crate::model::{CheckpointRange, Checkpoints, Position, ShardId, ShardRange};

/// One held shard's progress.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ShardProgress {
    /// The lease counter the shard is held under (every range handed off carries it).
    pub lease_counter: u64,
    /// `after_exclusive` of the next batch: the last handed-off position, or the checkpoint.
    pub next_after: Option<Position>,
    /// Last position in the buffer, if any record of this shard is buffered.
    pub buffered_last: Option<Position>,
    /// The reader returned every record of the (closed) shard: it is not read any more, and the
    /// next batch ends its range at `SHARD_END` unless `next_after` already is `SHARD_END`.
    pub ended: bool,
}

impl ShardProgress {
    /// Whether the next batch must carry this shard's `SHARD_END`.
    pub fn end_due(&self) -> bool {
        self.ended && self.next_after != Some(Position::ShardEnd)
    }
}

/// A batch handed off and not yet seen committed or rejected.
#[derive(Debug, Clone)]
pub(crate) struct InFlight {
    /// The batch.
    pub batch_id: Uuid,
    /// Per shard, the last position of its range.
    pub ranges: Vec<(ShardId, Position)>,
    /// When the batch's oldest record was read.
    pub oldest_read: Instant,
}

/// What [`Progress::reconcile`] found.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Reconciled {
    /// Some batch was committed (the freshness carried from a failed loop ends).
    pub any_committed: bool,
    /// Some batch was rejected: every shard was rewound to the checkpoints; reopen them all.
    pub rejected: bool,
}

/// The per-shard book of one worker loop.
#[derive(Debug, Default)]
pub(crate) struct Progress {
    shards: BTreeMap<ShardId, ShardProgress>,
    in_flight: Vec<InFlight>,
}

impl Progress {
    /// The held shards.
    pub fn shards(&self) -> &BTreeMap<ShardId, ShardProgress> {
        &self.shards
    }

    /// The batches in flight.
    pub fn in_flight(&self) -> &[InFlight] {
        &self.in_flight
    }

    /// Whether no shard is held.
    pub fn is_empty(&self) -> bool {
        self.shards.is_empty()
    }

    /// Whether `shard` is held.
    pub fn holds(&self, shard: &ShardId) -> bool {
        self.shards.contains_key(shard)
    }

    /// Takes `shard`, held under `lease_counter`, whose committed checkpoint is `checkpoint`.
    pub fn take(&mut self, shard: ShardId, lease_counter: u64, checkpoint: Option<Position>) {
        let ended = checkpoint == Some(Position::ShardEnd);
        self.shards.insert(
            shard,
            ShardProgress {
                lease_counter,
                next_after: checkpoint,
                buffered_last: None,
                ended,
            },
        );
    }

    /// The shards no longer held under the counter they were taken with (`held`: shard → the
    /// counter this worker holds it under now).
    pub fn lost(&self, held: &BTreeMap<ShardId, u64>) -> Vec<ShardId> {
        self.shards
            .iter()
            .filter(|(id, st)| held.get(*id) != Some(&st.lease_counter))
            .map(|(id, _)| id.clone())
            .collect()
    }

    /// Drops the lost shards. Returns whether a batch in flight covers one of them: it carries a
    /// stale lease counter and the committer will reject it whole, so the shards still held must
    /// not continue after it — the caller rewinds them with [`Progress::rewind_to`] the table's
    /// checkpoints. Either way the buffer holds the lost shards' rows: the caller drops it
    /// ([`Progress::drop_buffer`]).
    pub fn lose(&mut self, lost: &[ShardId]) -> bool {
        for id in lost {
            self.shards.remove(id);
        }
        self.in_flight
            .iter()
            .any(|f| f.ranges.iter().any(|(s, _)| lost.contains(s)))
    }

    /// Forgets every batch in flight and restarts every shard after its committed checkpoint.
    pub fn rewind_to(&mut self, checkpoints: &Checkpoints) {
        self.in_flight.clear();
        for (id, st) in self.shards.iter_mut() {
            st.next_after = checkpoints.get(id).cloned();
        }
    }

    /// Drops the buffer: every shard is read again after its last hand-off (or checkpoint).
    /// Returns where each shard's reader restarts.
    pub fn drop_buffer(&mut self) -> Vec<(ShardId, Option<Position>)> {
        self.shards
            .iter_mut()
            .map(|(id, st)| {
                st.buffered_last = None;
                st.ended = st.next_after == Some(Position::ShardEnd);
                (id.clone(), st.next_after.clone())
            })
            .collect()
    }

    /// A record of `shard` at `position` is in the buffer.
    pub fn record(&mut self, shard: &ShardId, position: Position) {
        if let Some(st) = self.shards.get_mut(shard) {
            st.buffered_last = Some(position);
        }
    }

    /// Every record of `shard` (a closed Kinesis shard) was read.
    pub fn end(&mut self, shard: &ShardId) {
        if let Some(st) = self.shards.get_mut(shard) {
            st.ended = true;
        }
    }

    /// Whether some shard's `SHARD_END` is due: a closed shard is handed off at once, since its
    /// children wait for it.
    pub fn end_due(&self) -> bool {
        self.shards.values().any(ShardProgress::end_due)
    }

    /// Whether every held shard is finished (nothing to read).
    pub fn all_ended(&self) -> bool {
        self.shards.values().all(|st| st.ended)
    }

    /// The ranges the next batch covers: per shard with buffered records or a `SHARD_END` due,
    /// `(next_after, last]` under the shard's lease counter.
    pub fn batch_ranges(&self) -> Vec<ShardRange> {
        self.shards
            .iter()
            .filter_map(|(id, st)| {
                let last = if st.end_due() {
                    // Every record of the closed shard is in this batch or already handed off.
                    Some(Position::ShardEnd)
                } else {
                    st.buffered_last.clone()
                };
                last.map(|last| ShardRange {
                    shard: id.clone(),
                    range: CheckpointRange {
                        after_exclusive: st.next_after.clone(),
                        last_inclusive: last,
                    },
                    lease_counter: st.lease_counter,
                })
            })
            .collect()
    }

    /// Whether every range is still held under its lease counter (`held` as for
    /// [`Progress::lost`]): a batch is never handed off for a shard lost while it was written.
    pub fn still_held(ranges: &[ShardRange], held: &BTreeMap<ShardId, u64>) -> bool {
        ranges
            .iter()
            .all(|s| held.get(&s.shard) == Some(&s.lease_counter))
    }

    /// Batch `batch_id` covering `ranges` was handed off: the next batches continue after it.
    pub fn handed_off(&mut self, batch_id: Uuid, ranges: &[ShardRange], oldest_read: Instant) {
        for s in ranges {
            if let Some(st) = self.shards.get_mut(&s.shard) {
                st.next_after = Some(s.range.last_inclusive.clone());
                st.buffered_last = None;
            }
        }
        self.in_flight.push(InFlight {
            batch_id,
            oldest_read,
            ranges: ranges
                .iter()
                .map(|s| (s.shard.clone(), s.range.last_inclusive.clone()))
                .collect(),
        });
    }

    /// Settles the batches in flight against `pending`, the pending set read FIRST, and
    /// `checkpoints`, the committed checkpoints read AFTER it. The committer commits a batch
    /// before it removes it from the pending set, so a batch missing from `pending` is either
    /// covered by `checkpoints` (committed) or was rejected; read in the other order, a commit
    /// landing between the two reads would make a committed batch look rejected. A rejected
    /// batch rewinds every shard to `checkpoints` (see [`Reconciled::rejected`]).
    pub fn reconcile(&mut self, pending: &HashSet<Uuid>, checkpoints: &Checkpoints) -> Reconciled {
        let mut out = Reconciled::default();
        self.in_flight.retain(|f| {
            let committed = f
                .ranges
                .iter()
                .all(|(s, last)| checkpoints.get(s).is_some_and(|c| c >= last));
            if committed {
                out.any_committed = true;
                return false;
            }
            if !pending.contains(&f.batch_id) {
                out.rejected = true;
                return false;
            }
            true
        });
        if out.rejected {
            self.rewind_to(checkpoints);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(n: i32) -> ShardId {
        ShardId::kafka_partition(n)
    }

    fn off(n: i64) -> Position {
        Position::Offset(n)
    }

    fn held(pairs: &[(i32, u64)]) -> BTreeMap<ShardId, u64> {
        pairs.iter().map(|(id, c)| (s(*id), *c)).collect()
    }

    fn cp(pairs: &[(i32, i64)]) -> Checkpoints {
        Checkpoints(pairs.iter().map(|(id, p)| (s(*id), off(*p))).collect())
    }

    fn range(r: &ShardRange) -> (Option<Position>, Position) {
        (
            r.range.after_exclusive.clone(),
            r.range.last_inclusive.clone(),
        )
    }

    #[test]
    fn batches_of_a_shard_chain_from_its_checkpoint() {
        let mut p = Progress::default();
        p.take(s(0), 1, Some(off(9)));
        p.record(&s(0), off(10));
        p.record(&s(0), off(14));
        let b1 = p.batch_ranges();
        assert_eq!(
            b1.iter().map(range).collect::<Vec<_>>(),
            [(Some(off(9)), off(14))]
        );
        p.handed_off(Uuid::from_u128(1), &b1, Instant::now());
        assert!(
            p.batch_ranges().is_empty(),
            "nothing buffered after a hand-off"
        );
        p.record(&s(0), off(20));
        assert_eq!(
            p.batch_ranges().iter().map(range).collect::<Vec<_>>(),
            [(Some(off(14)), off(20))]
        );
    }

    /// Recorded bug (loadtest/bench.sh): a lease dropped locally during a long flush and renewed
    /// under the same counter; the batch was not handed off and the buffer was dropped, but the
    /// readers were not rewound, so the next range covered records that were in neither the
    /// table nor the DLQ. Dropping the buffer must restart every reader after its last hand-off
    /// and leave no range that covers the dropped records.
    #[test]
    fn dropping_the_buffer_restarts_every_shard_after_its_last_hand_off() {
        let mut p = Progress::default();
        p.take(s(0), 1, Some(off(9)));
        p.take(s(1), 1, None);
        p.record(&s(0), off(12));
        let first = p.batch_ranges();
        p.handed_off(Uuid::from_u128(1), &first, Instant::now());
        p.record(&s(0), off(30));
        p.record(&s(1), off(5));
        // The write took longer than the lease; the lease came back under the same counter.
        let ranges = p.batch_ranges();
        assert!(Progress::still_held(&ranges, &held(&[(0, 1), (1, 1)])));
        let restart = p.drop_buffer();
        assert_eq!(restart, [(s(0), Some(off(12))), (s(1), None)]);
        assert!(
            p.batch_ranges().is_empty(),
            "the dropped records are in no range"
        );
        // Read again from the restart points: the ranges continue the hand-off exactly.
        p.record(&s(0), off(30));
        p.record(&s(1), off(5));
        assert_eq!(
            p.batch_ranges().iter().map(range).collect::<Vec<_>>(),
            [(Some(off(12)), off(30)), (None, off(5))]
        );
    }

    #[test]
    fn a_shard_lost_while_its_batch_was_written_is_not_handed_off() {
        let mut p = Progress::default();
        p.take(s(0), 1, None);
        p.take(s(1), 1, None);
        p.record(&s(0), off(3));
        p.record(&s(1), off(4));
        let ranges = p.batch_ranges();
        for (now_held, expect) in [
            (held(&[(0, 1), (1, 1)]), true),
            (held(&[(0, 1)]), false),         // shard 1 lost
            (held(&[(0, 1), (1, 2)]), false), // shard 1 lost and taken again: another counter
        ] {
            assert_eq!(
                Progress::still_held(&ranges, &now_held),
                expect,
                "{now_held:?}"
            );
        }
        assert_eq!(p.lost(&held(&[(0, 1), (1, 2)])), [s(1)]);
    }

    /// A lost shard whose batch is in flight dooms that batch (stale lease counter): the shards
    /// still held rewind to the table's checkpoints instead of continuing after the doomed batch.
    #[test]
    fn losing_a_shard_of_a_batch_in_flight_rewinds_the_others_to_the_checkpoints() {
        let mut p = Progress::default();
        p.take(s(0), 1, Some(off(9)));
        p.take(s(1), 1, Some(off(19)));
        p.record(&s(0), off(12));
        p.record(&s(1), off(25));
        let both = p.batch_ranges();
        p.handed_off(Uuid::from_u128(1), &both, Instant::now());
        assert!(p.lose(&[s(1)]), "the batch in flight covers the lost shard");
        p.rewind_to(&cp(&[(0, 9), (1, 19)]));
        assert!(p.in_flight().is_empty());
        assert_eq!(p.shards()[&s(0)].next_after, Some(off(9)));
        assert!(!p.holds(&s(1)));
        // A lost shard no batch in flight covers dooms nothing.
        let mut q = Progress::default();
        q.take(s(0), 1, None);
        q.take(s(1), 1, None);
        q.record(&s(0), off(1));
        let only0 = q.batch_ranges();
        q.handed_off(Uuid::from_u128(2), &only0, Instant::now());
        assert!(!q.lose(&[s(1)]));
        assert_eq!(q.in_flight().len(), 1);
    }

    /// Recorded bug (a break test): the checkpoints were read before the pending set, and a commit
    /// landing between the two reads made a committed batch look rejected. With the pending set
    /// read first, every combination settles correctly.
    #[test]
    fn reconcile_settles_batches_by_the_pending_set_read_before_the_checkpoints() {
        let id = Uuid::from_u128(7);
        // (still pending?, checkpoint after the reads) -> (in flight after, committed, rejected)
        let table = [
            (true, 9, (1, false, false)),  // not committed yet
            (true, 14, (0, true, false)),  // committed, not yet finished
            (false, 14, (0, true, false)), // committed and finished (the racing commit)
            (false, 9, (0, false, true)),  // gone without a commit: rejected
            (false, 20, (0, true, false)), // committed, then more batches after it
        ];
        for (pending, at, (left, committed, rejected)) in table {
            let mut p = Progress::default();
            p.take(s(0), 1, Some(off(9)));
            p.record(&s(0), off(14));
            let r = p.batch_ranges();
            p.handed_off(id, &r, Instant::now());
            let pending_set: HashSet<Uuid> = if pending { [id].into() } else { HashSet::new() };
            let out = p.reconcile(&pending_set, &cp(&[(0, at)]));
            assert_eq!(
                (p.in_flight().len(), out.any_committed, out.rejected),
                (left, committed, rejected),
                "pending {pending}, checkpoint {at}"
            );
            if rejected {
                assert_eq!(p.shards()[&s(0)].next_after, Some(off(at)), "rewound");
            } else {
                assert_eq!(p.shards()[&s(0)].next_after, Some(off(14)));
            }
        }
    }

    #[test]
    fn a_closed_shard_hands_off_shard_end_once() {
        let mut p = Progress::default();
        p.take(s(0), 1, Some(off(9)));
        p.end(&s(0));
        assert!(p.end_due());
        let r = p.batch_ranges();
        assert_eq!(
            r.iter().map(range).collect::<Vec<_>>(),
            [(Some(off(9)), Position::ShardEnd)]
        );
        p.handed_off(Uuid::from_u128(1), &r, Instant::now());
        assert!(!p.end_due(), "SHARD_END is handed off once");
        assert!(p.batch_ranges().is_empty());
        // Taken again after SHARD_END was committed: finished from the start.
        let mut q = Progress::default();
        q.take(s(0), 2, Some(Position::ShardEnd));
        assert!(q.all_ended() && !q.end_due());
    }
}
