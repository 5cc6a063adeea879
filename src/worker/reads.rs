//! What this process has read of each shard, kept across buffer drops, rewinds, lease changes
//! and restarts of the worker loop, so that the metrics tell the truth (docs/observability.md,
//! "Freshness and re-reads"):
//!
//! - `floe_data_freshness_seconds` is the age of the oldest record not yet committed, counted
//!   from when this process FIRST read it: a record read again after a rewind keeps its first
//!   read instant until a commit covers it;
//! - `floe_records_reread_total{cause}` counts records read at a position at or before the
//!   highest position this process read of the shard, under the cause of the last rewind.
//!
//! ```text
//!   read(S, positions)   ─> positions ≤ max_read(S): re-read (counted under cause(S));
//!                           new ones: max_read(S) advances, a mark (first new position, now)
//!                           is added (at most one per MARK_SPACING per shard)
//!   rewound(S, cause)    ─> cause(S) = cause
//!   committed(cp)        ─> marks whose span the checkpoint covers are dropped
//!   oldest(held)         ─> the oldest remaining mark of a held shard: the freshness
//! ```
//!
//! No I/O and no clock of its own: pure, fed by the worker loop.

use std::collections::{HashMap, VecDeque};
use std::time::Duration;

use tokio::time::Instant;

use crate::model::{Checkpoints, Position, ShardId};

/// Why a shard's records are read again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum RereadCause {
    /// A lease was lost (not renewed in time, taken over) with the shard's records buffered or
    /// in flight, or in a batch in flight with such a shard.
    LeaseLost,
    /// The shard moved to another worker before its handed-off records were committed (the
    /// graceful hand-off's wait ran out), or came back to this worker after a move.
    Moved,
    /// A batch was rejected by the committer.
    Rejected,
    /// The worker loop restarted after an error (it starts again from the table's checkpoints).
    Restart,
}

impl RereadCause {
    /// Every cause, in label order: each series is exported from the start (at 0), so a ratio
    /// of re-read to read records shows 0 on a healthy fleet instead of no data.
    pub const ALL: [RereadCause; 4] = [
        RereadCause::LeaseLost,
        RereadCause::Moved,
        RereadCause::Rejected,
        RereadCause::Restart,
    ];

    /// The `cause` label of `floe_records_reread_total`.
    pub fn as_str(&self) -> &'static str {
        match self {
            RereadCause::LeaseLost => "lease_lost",
            RereadCause::Moved => "moved",
            RereadCause::Rejected => "rejected",
            RereadCause::Restart => "restart",
        }
    }
}

/// At most one first-read mark per shard per this interval: the freshness is exact to it.
const MARK_SPACING: Duration = Duration::from_secs(1);

#[derive(Debug)]
struct ShardReads {
    /// The highest position read.
    max_read: Position,
    /// The cause of the last rewind.
    cause: RereadCause,
    /// `(p, t)`: the records from `p` (up to the next mark) were first read at or after `t`;
    /// oldest first, only records not known to be committed.
    marks: VecDeque<(Position, Instant)>,
}

/// Per shard, what this process has read (see the module documentation).
#[derive(Debug, Default)]
pub struct ReadHistory {
    shards: HashMap<ShardId, ShardReads>,
}

impl ReadHistory {
    /// A new worker loop starts (after a failed one): what it reads again is counted as
    /// [`RereadCause::Restart`].
    pub fn new_loop(&mut self) {
        for s in self.shards.values_mut() {
            s.cause = RereadCause::Restart;
        }
    }

    /// `shard`'s reader went back for `cause`.
    pub fn rewound(&mut self, shard: &ShardId, cause: RereadCause) {
        if let Some(s) = self.shards.get_mut(shard) {
            s.cause = cause;
        }
    }

    /// Records of `shard` at `positions` (in read order) were read at `now`. Returns how many
    /// were read before by this process, with the cause.
    pub fn read<'a>(
        &mut self,
        shard: &ShardId,
        positions: impl IntoIterator<Item = &'a Position>,
        now: Instant,
    ) -> Option<(u64, RereadCause)> {
        let mut positions = positions.into_iter().peekable();
        let first = positions.peek().copied()?;
        let s = match self.shards.entry(shard.clone()) {
            std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::hash_map::Entry::Vacant(e) => {
                let first = first.clone();
                let last = positions.last().expect("peeked").clone();
                e.insert(ShardReads {
                    max_read: last,
                    cause: RereadCause::Restart,
                    marks: VecDeque::from([(first, now)]),
                });
                return None;
            }
        };
        let mut reread = 0u64;
        let mut first_new = None;
        let mut newest = None;
        for p in positions {
            if first_new.is_none() {
                if *p <= s.max_read {
                    reread += 1;
                } else {
                    first_new = Some(p);
                }
            }
            newest = Some(p);
        }
        if let Some(p) = first_new {
            if s.marks
                .back()
                .is_none_or(|(_, t)| now.saturating_duration_since(*t) >= MARK_SPACING)
            {
                s.marks.push_back((p.clone(), now));
            }
            s.max_read = newest.expect("read").clone();
        }
        (reread > 0).then_some((reread, s.cause))
    }

    /// The committed checkpoints now: what they cover is no longer pending.
    pub fn committed(&mut self, checkpoints: &Checkpoints) {
        for (shard, cp) in &checkpoints.0 {
            let Some(s) = self.shards.get_mut(shard) else {
                continue;
            };
            if *cp >= s.max_read {
                s.marks.clear();
                continue;
            }
            while s.marks.len() >= 2 && s.marks[1].0 <= *cp {
                s.marks.pop_front();
            }
        }
    }

    /// When the oldest record not known to be committed of a shard for which `held` holds was
    /// first read.
    pub fn oldest(&self, held: impl Fn(&ShardId) -> bool) -> Option<Instant> {
        self.shards
            .iter()
            .filter(|(id, _)| held(id))
            .filter_map(|(_, s)| s.marks.front().map(|(_, t)| *t))
            .min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(n: i32) -> ShardId {
        ShardId::kafka_partition(n)
    }

    fn offs(r: std::ops::RangeInclusive<i64>) -> Vec<Position> {
        r.map(Position::Offset).collect()
    }

    fn cp(shard: i32, at: i64) -> Checkpoints {
        Checkpoints([(s(shard), Position::Offset(at))].into_iter().collect())
    }

    /// The freshness of a rewound shard keeps counting from the first read of its oldest
    /// uncommitted record; a commit moves it on; a re-read is counted under its cause.
    #[tokio::test(start_paused = true)]
    async fn a_rewind_keeps_the_first_read_instant_until_a_commit_covers_it() {
        let mut h = ReadHistory::default();
        let t0 = Instant::now();
        assert_eq!(h.read(&s(0), &offs(0..=9), t0), None, "first reads");
        tokio::time::advance(Duration::from_secs(5)).await;
        let t1 = Instant::now();
        assert_eq!(h.read(&s(0), &offs(10..=19), t1), None);
        assert_eq!(h.oldest(|_| true), Some(t0));
        // The buffer is dropped; the reader goes back to 5.
        h.rewound(&s(0), RereadCause::LeaseLost);
        tokio::time::advance(Duration::from_secs(5)).await;
        let t2 = Instant::now();
        assert_eq!(
            h.read(&s(0), &offs(5..=24), t2),
            Some((15, RereadCause::LeaseLost)),
            "5..=19 read again"
        );
        assert_eq!(h.oldest(|_| true), Some(t0), "not young again");
        h.committed(&cp(0, 12));
        assert_eq!(h.oldest(|_| true), Some(t1), "10.. first read at t1");
        h.committed(&cp(0, 24));
        assert_eq!(h.oldest(|_| true), None, "everything read is committed");
        assert_eq!(h.oldest(|id| *id != s(0)), None);
        h.new_loop();
        assert_eq!(
            h.read(&s(0), &offs(20..=25), t2),
            Some((5, RereadCause::Restart))
        );
    }
}
