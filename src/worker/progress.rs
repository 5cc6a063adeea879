//! The worker's pure core: per held shard, where its next batch starts and what is buffered, and
//! the batches handed off but not yet seen committed (docs/design.md, protocol steps 2 and 7).
//! No I/O and no clock of its own: the worker loop feeds it leases, records, checkpoints and the
//! pending set, and acts on what it answers (which readers to reopen, after which position).
//!
//! ```text
//!   take(S, counter, checkpoint) ─> next_after(S) = checkpoint
//!   record(S, p, now)            ─> buffered_last(S) = p
//!   batch_ranges(pick)           ─> per picked shard with records (or a SHARD_END due):
//!                                   (next_after, last]
//!   handed_off(id, ranges)       ─> next_after(S) = last; in flight += id
//!   drop_shard(S)                ─> S is read again after next_after (its last hand-off)
//!   lose(shards)                 ─> forgotten; whether a batch in flight covers one (doomed)
//!   doom(seeds, cp)              ─> batches in flight that cannot be committed any more: the
//!                                   seeds (a lost shard's, a rejected one) and, per shard they
//!                                   cover, every later batch of it (its chain is broken); each
//!                                   shard they cover is read again after the start of its
//!                                   first doomed range. Other shards are untouched.
//!   reconcile(pending, cp)       ─> committed: forgotten; gone and not committed: doomed
//! ```
//!
//! Invariant: a batch range always continues the shard's previous hand-off or its committed
//! checkpoint, and never covers a record that was dropped from the buffer.

use std::collections::{BTreeMap, BTreeSet, HashSet};

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
    /// When the oldest record of this shard in the buffer was read.
    pub buffered_since: Option<Instant>,
    /// The reader returned every record of the (closed) shard: it is not read any more, and the
    /// next batch ends its range at `SHARD_END` unless `next_after` already is `SHARD_END`.
    pub ended: bool,
}

impl ShardProgress {
    /// Whether the next batch must carry this shard's `SHARD_END`.
    pub fn end_due(&self) -> bool {
        self.ended && self.next_after != Some(Position::ShardEnd)
    }

    /// Forgets what is buffered: the shard is read again after `next_after`.
    fn clear_buffer(&mut self) {
        self.buffered_last = None;
        self.buffered_since = None;
        self.ended = self.next_after == Some(Position::ShardEnd);
    }
}

/// One shard's range in a batch in flight.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct InFlightRange {
    /// The shard.
    pub shard: ShardId,
    /// Where the range starts (exclusive).
    pub after: Option<Position>,
    /// Where it ends (inclusive).
    pub last: Position,
}

/// A batch handed off and not yet seen committed or rejected.
#[derive(Debug, Clone)]
pub(crate) struct InFlight {
    /// The batch.
    pub batch_id: Uuid,
    /// Its ranges.
    pub ranges: Vec<InFlightRange>,
}

impl InFlight {
    fn covers(&self, shard: &ShardId) -> bool {
        self.ranges.iter().any(|r| r.shard == *shard)
    }

    fn committed(&self, checkpoints: &Checkpoints) -> bool {
        self.ranges
            .iter()
            .all(|r| checkpoints.get(&r.shard).is_some_and(|c| *c >= r.last))
    }
}

/// What [`Progress::reconcile`] found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Reconciled {
    /// Some batch was committed.
    pub any_committed: bool,
    /// Some batch was rejected: these held shards were rewound (see [`Progress::doom`]);
    /// drop their buffered records and reopen their readers after each position.
    pub rewound: Vec<(ShardId, Option<Position>)>,
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
                buffered_since: None,
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
    /// stale lease counter and the committer will reject it unless it was committed already —
    /// the caller loads the checkpoints and calls [`Progress::doom`] with those batches. The
    /// caller drops the lost shards' buffered records.
    pub fn lose(&mut self, lost: &[ShardId]) -> bool {
        for id in lost {
            self.shards.remove(id);
        }
        self.in_flight
            .iter()
            .any(|f| lost.iter().any(|s| f.covers(s)))
    }

    /// Whether a batch in flight covers `shard`.
    pub fn in_flight_covers(&self, shard: &ShardId) -> bool {
        self.in_flight.iter().any(|f| f.covers(shard))
    }

    /// Settles the batches in flight that `checkpoints` shows committed, then dooms those that
    /// `seed` picks and, per shard they cover, every later batch of that shard (its chain is
    /// broken there). Every held shard a doomed batch covers is read again after the start of
    /// its first doomed range (or the checkpoint, if it is beyond). Returns those shards with
    /// the position each restarts after; the caller drops their buffered records and reopens
    /// their readers. Shards no doomed batch covers keep their buffer and batches.
    pub fn doom(
        &mut self,
        seed: impl Fn(&InFlight) -> bool,
        checkpoints: &Checkpoints,
    ) -> Vec<(ShardId, Option<Position>)> {
        self.in_flight.retain(|f| !f.committed(checkpoints));
        let mut restart: BTreeMap<ShardId, Option<Position>> = BTreeMap::new();
        self.in_flight.retain(|f| {
            let doomed = seed(f) || f.ranges.iter().any(|r| restart.contains_key(&r.shard));
            if doomed {
                for r in &f.ranges {
                    restart
                        .entry(r.shard.clone())
                        .or_insert_with(|| r.after.clone());
                }
            }
            !doomed
        });
        let mut rewound = Vec::new();
        for (id, after) in restart {
            let Some(st) = self.shards.get_mut(&id) else {
                continue;
            };
            let after = match (after, checkpoints.get(&id)) {
                (Some(a), Some(c)) if *c > a => Some(c.clone()),
                (None, Some(c)) => Some(c.clone()),
                (a, _) => a,
            };
            st.next_after = after.clone();
            st.clear_buffer();
            rewound.push((id, after));
        }
        rewound
    }

    /// Drops what `shard` buffered; returns the position its reader restarts after.
    pub fn drop_shard(&mut self, shard: &ShardId) -> Option<Position> {
        let st = self.shards.get_mut(shard)?;
        st.clear_buffer();
        st.next_after.clone()
    }

    /// A record of `shard` at `position`, read at `now`, is in the buffer.
    pub fn record(&mut self, shard: &ShardId, position: Position, now: Instant) {
        if let Some(st) = self.shards.get_mut(shard) {
            st.buffered_last = Some(position);
            st.buffered_since.get_or_insert(now);
        }
    }

    /// When the oldest record in the buffer was read.
    pub fn oldest_buffered(&self) -> Option<Instant> {
        self.shards
            .values()
            .filter_map(|st| st.buffered_since)
            .min()
    }

    /// Whether some record (or a `SHARD_END`) waits to be handed off.
    pub fn has_buffered(&self) -> bool {
        self.shards
            .values()
            .any(|st| st.buffered_last.is_some() || st.end_due())
    }

    /// Whether `shard` has nothing buffered, no `SHARD_END` due and no batch in flight: every
    /// record read of it is committed (a graceful hand-off may go on).
    pub fn settled(&self, shard: &ShardId) -> bool {
        self.shards
            .get(shard)
            .is_some_and(|st| st.buffered_last.is_none() && !st.end_due())
            && !self.in_flight_covers(shard)
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
    #[cfg(test)]
    pub fn all_ended(&self) -> bool {
        self.shards.values().all(|st| st.ended)
    }

    /// The ranges the next batch covers: per shard with buffered records or a `SHARD_END` due,
    /// `(next_after, last]` under the shard's lease counter.
    #[cfg(test)]
    pub fn batch_ranges(&self) -> Vec<ShardRange> {
        self.batch_ranges_of(|_| true)
    }

    /// [`Progress::batch_ranges`] of the shards `pick` picks.
    pub fn batch_ranges_of(&self, pick: impl Fn(&ShardId) -> bool) -> Vec<ShardRange> {
        self.shards
            .iter()
            .filter(|(id, _)| pick(id))
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

    /// The shards of `ranges`.
    pub fn shards_of(ranges: &[ShardRange]) -> BTreeSet<ShardId> {
        ranges.iter().map(|r| r.shard.clone()).collect()
    }

    /// Batch `batch_id` covering `ranges` was handed off: the next batches continue after it.
    pub fn handed_off(&mut self, batch_id: Uuid, ranges: &[ShardRange]) {
        for s in ranges {
            if let Some(st) = self.shards.get_mut(&s.shard) {
                st.next_after = Some(s.range.last_inclusive.clone());
                st.buffered_last = None;
                st.buffered_since = None;
            }
        }
        self.in_flight.push(InFlight {
            batch_id,
            ranges: ranges
                .iter()
                .map(|s| InFlightRange {
                    shard: s.shard.clone(),
                    after: s.range.after_exclusive.clone(),
                    last: s.range.last_inclusive.clone(),
                })
                .collect(),
        });
    }

    /// Settles the batches in flight against `pending`, the pending set read FIRST, and
    /// `checkpoints`, the committed checkpoints read AFTER it. The committer commits a batch
    /// before it removes it from the pending set, so a batch missing from `pending` is either
    /// covered by `checkpoints` (committed) or was rejected; read in the other order, a commit
    /// landing between the two reads would make a committed batch look rejected. A rejected
    /// batch is doomed with every later batch of its shards ([`Progress::doom`]).
    pub fn reconcile(&mut self, pending: &HashSet<Uuid>, checkpoints: &Checkpoints) -> Reconciled {
        let before = self.in_flight.len();
        let mut out = Reconciled::default();
        let rejected: HashSet<Uuid> = self
            .in_flight
            .iter()
            .filter(|f| !f.committed(checkpoints) && !pending.contains(&f.batch_id))
            .map(|f| f.batch_id)
            .collect();
        let committed = self
            .in_flight
            .iter()
            .filter(|f| f.committed(checkpoints))
            .count();
        out.any_committed = committed > 0;
        if !rejected.is_empty() {
            out.rewound = self.doom(|f| rejected.contains(&f.batch_id), checkpoints);
        } else {
            self.in_flight.retain(|f| !f.committed(checkpoints));
        }
        debug_assert!(self.in_flight.len() <= before);
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
        p.record(&s(0), off(10), Instant::now());
        p.record(&s(0), off(14), Instant::now());
        let b1 = p.batch_ranges();
        assert_eq!(
            b1.iter().map(range).collect::<Vec<_>>(),
            [(Some(off(9)), off(14))]
        );
        p.handed_off(Uuid::from_u128(1), &b1);
        assert!(
            p.batch_ranges().is_empty(),
            "nothing buffered after a hand-off"
        );
        p.record(&s(0), off(20), Instant::now());
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
        p.record(&s(0), off(12), Instant::now());
        let first = p.batch_ranges();
        p.handed_off(Uuid::from_u128(1), &first);
        p.record(&s(0), off(30), Instant::now());
        p.record(&s(1), off(5), Instant::now());
        // The write took longer than the lease; the lease came back under the same counter.
        let ranges = p.batch_ranges();
        assert!(Progress::still_held(&ranges, &held(&[(0, 1), (1, 1)])));
        let restart = [p.drop_shard(&s(0)), p.drop_shard(&s(1))];
        assert_eq!(restart, [Some(off(12)), None]);
        assert!(
            p.batch_ranges().is_empty(),
            "the dropped records are in no range"
        );
        // Read again from the restart points: the ranges continue the hand-off exactly.
        p.record(&s(0), off(30), Instant::now());
        p.record(&s(1), off(5), Instant::now());
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
        p.record(&s(0), off(3), Instant::now());
        p.record(&s(1), off(4), Instant::now());
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

    /// A lost shard whose batch is in flight dooms that batch (stale lease counter) and every
    /// later batch of the shards it covers: those shards are read again after their first doomed
    /// range; a shard no doomed batch covers keeps its buffer and its batches.
    #[test]
    fn losing_a_shard_of_a_batch_in_flight_rewinds_only_the_shards_of_the_doomed_batches() {
        let mut p = Progress::default();
        for (id, cp) in [(0, 9), (1, 19), (2, 29), (3, 39)] {
            p.take(s(id), 1, Some(off(cp)));
        }
        // Batch 1: shards 0 and 1. Batch 2: shards 1 and 2 (after batch 1). Batch 3: shard 3.
        p.record(&s(0), off(12), Instant::now());
        p.record(&s(1), off(25), Instant::now());
        let b1 = p.batch_ranges();
        p.handed_off(Uuid::from_u128(1), &b1);
        p.record(&s(1), off(27), Instant::now());
        p.record(&s(2), off(31), Instant::now());
        let b2 = p.batch_ranges();
        p.handed_off(Uuid::from_u128(2), &b2);
        p.record(&s(3), off(41), Instant::now());
        let b3 = p.batch_ranges();
        p.handed_off(Uuid::from_u128(3), &b3);
        p.record(&s(2), off(33), Instant::now());
        p.record(&s(3), off(44), Instant::now());
        assert!(p.lose(&[s(0)]), "batch 1 covers the lost shard");
        let lost: Vec<ShardId> = vec![s(0)];
        let rewound = p.doom(
            |f| lost.iter().any(|l| f.covers(l)),
            &cp(&[(1, 19), (2, 29)]),
        );
        assert_eq!(
            rewound,
            [(s(1), Some(off(19))), (s(2), Some(off(29)))],
            "shard 1 from batch 1's start, shard 2 (batch 2 chains after batch 1) from batch 2's"
        );
        assert_eq!(
            p.in_flight().iter().map(|f| f.batch_id).collect::<Vec<_>>(),
            [Uuid::from_u128(3)]
        );
        assert_eq!(
            p.shards()[&s(2)].buffered_last,
            None,
            "its buffer continued batch 2"
        );
        assert_eq!(p.shards()[&s(3)].buffered_last, Some(off(44)), "untouched");
        assert!(!p.holds(&s(0)));
        // A lost shard no batch in flight covers dooms nothing.
        let mut q = Progress::default();
        q.take(s(0), 1, None);
        q.take(s(1), 1, None);
        q.record(&s(0), off(1), Instant::now());
        let only0 = q.batch_ranges();
        q.handed_off(Uuid::from_u128(2), &only0);
        assert!(!q.lose(&[s(1)]));
        assert_eq!(q.in_flight().len(), 1);
        // A doomed batch the checkpoints show committed is settled, not rewound.
        let mut r = Progress::default();
        r.take(s(0), 1, Some(off(9)));
        r.record(&s(0), off(12), Instant::now());
        let b = r.batch_ranges();
        r.handed_off(Uuid::from_u128(4), &b);
        assert!(r.doom(|_| true, &cp(&[(0, 12)])).is_empty());
        assert!(r.in_flight().is_empty());
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
            p.record(&s(0), off(14), Instant::now());
            let r = p.batch_ranges();
            p.handed_off(id, &r);
            let pending_set: HashSet<Uuid> = if pending { [id].into() } else { HashSet::new() };
            let out = p.reconcile(&pending_set, &cp(&[(0, at)]));
            assert_eq!(
                (
                    p.in_flight().len(),
                    out.any_committed,
                    !out.rewound.is_empty()
                ),
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
        p.handed_off(Uuid::from_u128(1), &r);
        assert!(!p.end_due(), "SHARD_END is handed off once");
        assert!(p.batch_ranges().is_empty());
        // Taken again after SHARD_END was committed: finished from the start.
        let mut q = Progress::default();
        q.take(s(0), 2, Some(Position::ShardEnd));
        assert!(q.all_ended() && !q.end_due());
    }
}
