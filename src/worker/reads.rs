//! What this process has read of each shard, kept across buffer drops, rewinds, lease changes
//! and restarts of the worker loop, so that the metrics tell the truth (docs/observability.md,
//! "Freshness and re-reads"):
//!
//! - `floe_data_freshness_seconds` is the age of the oldest record not yet committed, counted
//!   from when the stream accepted it (its timestamp: Kafka's message timestamp, Kinesis'
//!   `ApproximateArrivalTimestamp`), or from when this process first read it if that is
//!   earlier (a timestamp in the future, or none: the source then gives the read time). A
//!   record read again after a rewind keeps what its first read gave until a commit covers it;
//! - `floe_records_reread_total{cause}` counts records read at a position at or before the
//!   highest position this process read of the shard, under the cause of the last rewind.
//!
//! ```text
//!   read(S, [(position, accepted)], now)
//!                        ─> positions ≤ max_read(S): re-read (counted under cause(S));
//!                           new ones: max_read(S) advances to the newest, and with
//!                           t = min(accepted, now) over them, the last mark (last, t')
//!                           becomes (newest, min(t, t')) when |t − t'| < MARK_SPACING, else
//!                           a mark (newest, t) is added
//!   rewound(S, cause)    ─> cause(S) = cause
//!   committed(cp)        ─> marks with last ≤ cp(S) are dropped
//!   oldest(held)         ─> the oldest t over the remaining marks of held shards: the freshness
//! ```
//!
//! Why the timestamp of every newly read record, not only of a shard this process did not
//! hold before (taken at start, after a crash, in a hand-off): the count used to start at the
//! first read, so a backlog a SIGKILLed worker left was counted from the new owner's first
//! read, a lease_duration or more after it was produced, and the gauge peaked at 31.8 s while
//! records waited 46.1 s (issue 43). Counting only taken shards from their timestamps would
//! need a "held before" state kept right through lease flaps, moves and loop restarts, and
//! would still hide records waiting in the stream while a reader falls behind; counting every
//! record needs no state and says how long records wait before they are in the table, which is
//! what the freshness alert is about. A record read promptly has a timestamp within
//! milliseconds of its read (clock skew aside), so the steady state does not change. The price
//! is the same under both rules for a fresh start with `initial_position = "earliest"` (every
//! shard is new): the backlog shows its age until it is committed. Under this rule only, a
//! timestamp a producer sets in the past (Kafka `CreateTime` set to an event time, a slow
//! producer clock) counts as waiting on any shard; a topic with `LogAppendTime` avoids it. A
//! timestamp in the future is clamped to the read instant: never younger than the first read.
//!
//! A mark keeps the last position of its records, so a commit up to it drops it at once (not
//! only once the commit passes the next mark's first record, which overstated the age after
//! an idle gap).
//!
//! No I/O and no clock of its own: pure, fed by the worker loop, which maps each record's
//! timestamp onto the monotonic clock of its `now`.

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

/// Marks of a shard closer than this in time are merged (keeping the older instant): the
/// freshness is exact to it.
const MARK_SPACING: Duration = Duration::from_secs(1);

/// When the stream accepted a record whose timestamp is `arrival_ms` (milliseconds since the
/// Unix epoch), on the monotonic clock: `now` moved by the timestamp's distance from `now_ms`,
/// the wall clock at `now`. A timestamp in the future gives `now` ([`ReadHistory::read`] would
/// clamp it anyway), as does one too old for the monotonic clock to express (none on Linux).
pub(super) fn accepted_at(arrival_ms: i64, now: Instant, now_ms: i64) -> Instant {
    match now_ms.checked_sub(arrival_ms) {
        Some(age) if age > 0 => now
            .checked_sub(Duration::from_millis(age.unsigned_abs()))
            .unwrap_or(now),
        _ => now,
    }
}

#[derive(Debug)]
struct ShardReads {
    /// The highest position read; `None` before the first read.
    max_read: Option<Position>,
    /// The cause of the last rewind.
    cause: RereadCause,
    /// `(last, t)`: the records after the previous mark up to `last` were accepted by the
    /// stream, or first read, at or after `t`; in position order (their `t` need not be:
    /// timestamps may go back), only records not known to be committed.
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

    /// Records of `shard` were read at `now`: their positions in read order, each with when
    /// the stream accepted it (its timestamp on the clock of `now`; clamped to `now` when
    /// later, see the module documentation). Returns how many were read before by this
    /// process, with the cause.
    pub fn read<'a>(
        &mut self,
        shard: &ShardId,
        records: impl IntoIterator<Item = (&'a Position, Instant)>,
        now: Instant,
    ) -> Option<(u64, RereadCause)> {
        let mut records = records.into_iter().peekable();
        records.peek()?;
        let s = self
            .shards
            .entry(shard.clone())
            .or_insert_with(|| ShardReads {
                max_read: None,
                cause: RereadCause::Restart,
                marks: VecDeque::new(),
            });
        let mut reread = 0u64;
        // The newest position and the oldest instant of the new records.
        let mut new: Option<(&Position, Instant)> = None;
        for (p, accepted) in records {
            let since = accepted.min(now);
            match &mut new {
                Some((newest, t)) => {
                    *newest = p;
                    *t = (*t).min(since);
                }
                None if s.max_read.as_ref().is_some_and(|m| p <= m) => reread += 1,
                None => new = Some((p, since)),
            }
        }
        if let Some((newest, t)) = new {
            match s.marks.back_mut() {
                // How far apart the two instants are (one of the two terms is zero).
                Some((last, t_last))
                    if t.saturating_duration_since(*t_last)
                        + t_last.saturating_duration_since(t)
                        < MARK_SPACING =>
                {
                    *last = newest.clone();
                    *t_last = t.min(*t_last);
                }
                _ => s.marks.push_back((newest.clone(), t)),
            }
            s.max_read = Some(newest.clone());
        }
        (reread > 0).then_some((reread, s.cause))
    }

    /// The committed checkpoints now: what they cover is no longer pending.
    pub fn committed(&mut self, checkpoints: &Checkpoints) {
        for (shard, cp) in &checkpoints.0 {
            let Some(s) = self.shards.get_mut(shard) else {
                continue;
            };
            while s.marks.front().is_some_and(|(last, _)| last <= cp) {
                s.marks.pop_front();
            }
        }
    }

    /// When the oldest record not known to be committed of a shard for which `held` holds was
    /// accepted by the stream (or first read, if earlier).
    pub fn oldest(&self, held: impl Fn(&ShardId) -> bool) -> Option<Instant> {
        self.shards
            .iter()
            .filter(|(id, _)| held(id))
            .flat_map(|(_, s)| s.marks.iter().map(|(_, t)| *t))
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

    /// The records at `positions`, all accepted by the stream at `accepted`.
    fn accepted(positions: &[Position], accepted: Instant) -> Vec<(&Position, Instant)> {
        positions.iter().map(|p| (p, accepted)).collect()
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
        let read = |h: &mut ReadHistory, r, t| h.read(&s(0), accepted(&offs(r), t), t);
        assert_eq!(read(&mut h, 0..=9, t0), None, "first reads");
        tokio::time::advance(Duration::from_secs(5)).await;
        let t1 = Instant::now();
        assert_eq!(read(&mut h, 10..=19, t1), None);
        assert_eq!(h.oldest(|_| true), Some(t0));
        // The buffer is dropped; the reader goes back to 5.
        h.rewound(&s(0), RereadCause::LeaseLost);
        tokio::time::advance(Duration::from_secs(5)).await;
        let t2 = Instant::now();
        assert_eq!(
            read(&mut h, 5..=24, t2),
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
        assert_eq!(read(&mut h, 20..=25, t2), Some((5, RereadCause::Restart)));
    }

    /// A backlog (left by a worker that died, or read at a fresh start) shows the age its
    /// records have in the stream, not 0 at its first read here; read again, a record keeps
    /// what its first read gave.
    #[tokio::test(start_paused = true)]
    async fn a_backlog_counts_from_the_records_timestamps_and_a_reread_keeps_them() {
        let mut h = ReadHistory::default();
        tokio::time::advance(Duration::from_secs(60)).await;
        let now = Instant::now();
        let produced = now - Duration::from_secs(40);
        assert_eq!(h.read(&s(0), accepted(&offs(0..=9), produced), now), None);
        assert_eq!(
            h.oldest(|_| true).map(|t| now - t),
            Some(Duration::from_secs(40)),
            "40 s in the stream before this process read them"
        );
        // Newer records of the backlog, 30 s old: the oldest stays the 40 s ones.
        let later = now - Duration::from_secs(30);
        assert_eq!(h.read(&s(0), accepted(&offs(10..=19), later), now), None);
        assert_eq!(h.oldest(|_| true), Some(produced));
        // The buffer is dropped and 0.. read again 5 s later, the source giving (say) newer
        // timestamps: the first read's instants stay.
        h.rewound(&s(0), RereadCause::LeaseLost);
        tokio::time::advance(Duration::from_secs(5)).await;
        let now = Instant::now();
        assert_eq!(
            h.read(&s(0), accepted(&offs(0..=19), now), now),
            Some((20, RereadCause::LeaseLost))
        );
        assert_eq!(
            h.oldest(|_| true).map(|t| now - t),
            Some(Duration::from_secs(45))
        );
        h.committed(&cp(0, 9));
        assert_eq!(h.oldest(|_| true), Some(later), "10.. accepted at `later`");
    }

    /// A commit up to the last record read before an idle minute leaves only what was read
    /// after it: the gauge does not keep the minute.
    #[tokio::test(start_paused = true)]
    async fn a_commit_up_to_a_marks_last_record_drops_the_mark() {
        let mut h = ReadHistory::default();
        let t0 = Instant::now();
        assert_eq!(h.read(&s(0), accepted(&offs(0..=9), t0), t0), None);
        tokio::time::advance(Duration::from_secs(60)).await;
        let t1 = Instant::now();
        assert_eq!(h.read(&s(0), accepted(&offs(10..=19), t1), t1), None);
        h.committed(&cp(0, 9));
        assert_eq!(h.oldest(|_| true), Some(t1));
        h.committed(&cp(0, 15));
        assert_eq!(h.oldest(|_| true), Some(t1), "16..=19 are pending");
        h.committed(&cp(0, 19));
        assert_eq!(h.oldest(|_| true), None);
    }

    /// A record with a timestamp after its read counts from its read; timestamps that go back
    /// within a shard count from the oldest.
    #[tokio::test(start_paused = true)]
    async fn a_timestamp_in_the_future_is_clamped_to_the_read_instant() {
        let mut h = ReadHistory::default();
        tokio::time::advance(Duration::from_secs(60)).await;
        let now = Instant::now();
        let ahead = now + Duration::from_secs(3600);
        assert_eq!(h.read(&s(0), accepted(&offs(0..=4), ahead), now), None);
        assert_eq!(h.oldest(|_| true), Some(now), "not younger than its read");
        // 5..=7 at 10 s, 20 s and 30 s ago (out of order): 30 s.
        let ago = |secs| now - Duration::from_secs(secs);
        let later = offs(5..=7);
        let records = [
            (&later[0], ago(10)),
            (&later[1], ago(20)),
            (&later[2], ago(30)),
        ];
        assert_eq!(h.read(&s(1), records, now), None);
        assert_eq!(h.oldest(|_| true), Some(ago(30)));
        assert_eq!(h.oldest(|id| *id == s(0)), Some(now));
        // A shard's older records read after younger ones: the oldest counts, not the first.
        tokio::time::advance(Duration::from_secs(2)).await;
        let then = Instant::now();
        let older = offs(5..=5);
        assert_eq!(h.read(&s(0), [(&older[0], ago(50))], then), None);
        assert_eq!(h.oldest(|id| *id == s(0)), Some(ago(50)));
    }

    /// A record's timestamp is read onto the monotonic clock by its distance from the wall
    /// clock; one in the future, or none (the source gives the read time), is the read instant.
    #[tokio::test(start_paused = true)]
    async fn accepted_at_moves_the_read_instant_by_the_timestamps_age() {
        tokio::time::advance(Duration::from_secs(60)).await;
        let now = Instant::now();
        let wall = 1_783_627_200_000;
        assert_eq!(
            accepted_at(wall - 40_000, now, wall),
            now - Duration::from_secs(40)
        );
        assert_eq!(accepted_at(wall, now, wall), now);
        assert_eq!(accepted_at(wall + 3_600_000, now, wall), now);
        assert_eq!(accepted_at(i64::MAX, now, wall), now);
        assert_eq!(accepted_at(i64::MIN, now, wall), now, "no overflow");
    }
}
