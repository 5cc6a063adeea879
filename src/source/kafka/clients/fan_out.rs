//! A partition read once for several readers ([`FanOut`]): the member channels of a
//! `table = "{route}"` channel on one worker each hold the same partition (their shard leases
//! are co-located), and each reads it from its own table's checkpoint; the worker fetches it
//! once (docs/routing.md, "How it runs").
//!
//! ```text
//!   partition queue (orders, 3) ──poll──► FanOut buffer: fetched messages, in offset order
//!        assigned once, at the least           │  reader c.events_eu  next 1,204 ──► its batches
//!        next offset of its readers            │  reader c.events_us  next 1,180 ──► its batches
//!                                              └─ reader c.events_ap  next 1,211 ──► its batches
//! ```
//!
//! - Each reader has its own **next offset** (where its table's checkpoint resumes, then past
//!   every message it was given): it gets the buffered messages at or after it, in order, and
//!   never a position twice. Once every reader is past a message it may leave the buffer: the
//!   last [`FAN_OUT_RETAIN_BYTES`] of such messages stay for readers that join later.
//! - Whichever reader finds nothing buffered for it **polls the partition's queue** (no thread
//!   of its own) and appends what it got for all; the others are woken (the queue's nonempty
//!   callback and every append wake each reader's `Notify`).
//! - **A reader that starts below what was already dropped** (a member that resumes from an
//!   older checkpoint than the others have read past, beyond what is retained) moves the assignment back to its start:
//!   the buffer is emptied and the partition is fetched again from there, the others skipping
//!   what they had (bytes fetched twice for that stretch, counted nowhere else).
//! - **The window**: no poll starts once the buffer holds [`FAN_OUT_WINDOW_BYTES`] of keys and
//!   payloads that some reader still needs (one poll adds at most the polling reader's batch
//!   size); a reader that is that far
//!   ahead of the slowest (whose table's buffer is full or whose
//!   catalog is slow) gets nothing until the slowest reads on. The readers of one partition
//!   therefore move together within the window: one table that stops reading holds the other
//!   tables of the route back on that partition (its other partitions, and other channels,
//!   go on). A member that stops altogether (its table dropped, a fatal error) drops its
//!   reader and holds nothing back.
//! - Re-positioning (a message found on the main queue, a lost position skipped) assigns the
//!   partition again at the least next offset of the readers, never past any of them.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, TryLockError, Weak};

use rdkafka::Offset;
use tokio::sync::Notify;

use super::{PartitionHandle, PollJob, Polled, Release, Shared};
use crate::model::ShardId;
use crate::source::kafka::api::RawMessage;
use crate::source::kafka::lock;
use crate::source::SourceError;

/// At most this many bytes of record keys and payloads are kept fetched for the slowest reader
/// of a fanned-out partition: how far the fastest reader may run ahead of it.
pub(in crate::source::kafka) const FAN_OUT_WINDOW_BYTES: usize = 4 << 20;

/// Bytes of messages every reader is past that a fanned-out partition keeps for readers that
/// join later (the members of a routed channel open their readers seconds apart at start, and
/// a moved partition's members at checkpoints a batch or two apart): one that starts within
/// them is served without fetching the partition again.
pub(in crate::source::kafka) const FAN_OUT_RETAIN_BYTES: usize = 1 << 20;

/// Per partition, the fan-out serving its readers (kept while a reader holds it).
pub(in crate::source::kafka) type FanOuts = Mutex<HashMap<(String, i32), Weak<FanOut>>>;

/// One partition of the shared consumer read once for every reader holding it (see the module
/// docs).
pub(in crate::source::kafka) struct FanOut {
    /// The partition's assignment: the fan-out is its one reader in [`Shared`].
    pump: PartitionHandle,
    /// The channel whose clients fetch (the `channel` label of the fetched bytes).
    channel: String,
    state: Mutex<FanState>,
    /// Each reader's wake by reader id. Apart from `state`: the queue's nonempty callback takes
    /// this lock only, so it never waits for a poll in progress.
    wakes: Arc<Mutex<HashMap<u64, Arc<Notify>>>>,
}

#[derive(Default)]
struct FanState {
    /// Fetched messages not yet given to every reader, offsets increasing.
    buffer: VecDeque<RawMessage>,
    /// Bytes of keys and payloads in `buffer`.
    bytes: usize,
    /// The lowest offset a reader can start at without moving the assignment back: 1 + the
    /// highest offset dropped from the buffer, or where the partition was assigned.
    floor: i64,
    /// Each reader's next offset, by reader id.
    next: HashMap<u64, i64>,
    next_id: u64,
    /// The last reader left: a new one makes a new fan-out.
    closed: bool,
    /// Bytes of messages every reader is past kept for readers that join later
    /// ([`FAN_OUT_RETAIN_BYTES`]).
    retain: usize,
}

/// The size that counts against the window and as fetched: key and payload bytes.
pub(in crate::source::kafka) fn size_of(m: &RawMessage) -> usize {
    m.payload.len() + m.key.as_ref().map_or(0, Vec::len)
}

impl FanState {
    /// The least next offset of the readers (`i64::MAX` without readers).
    fn least_next(&self) -> i64 {
        self.next.values().copied().min().unwrap_or(i64::MAX)
    }

    /// Up to `max` buffered messages at or after reader `id`'s next offset, moving it past
    /// them.
    fn take_for(&mut self, id: u64, max: usize) -> Vec<RawMessage> {
        let Some(next) = self.next.get(&id).copied() else {
            return Vec::new();
        };
        let start = self.buffer.partition_point(|m| m.offset < next);
        let out: Vec<RawMessage> = self.buffer.range(start..).take(max).cloned().collect();
        if let Some(last) = out.last() {
            self.next.insert(id, last.offset + 1);
        }
        out
    }

    /// Bytes of the buffered messages every reader is past.
    fn passed_bytes(&self) -> usize {
        let least = self.least_next();
        self.buffer
            .iter()
            .take_while(|m| m.offset < least)
            .map(size_of)
            .sum()
    }

    /// Bytes of the buffered messages some reader still needs: what the window bounds.
    fn pending_bytes(&self) -> usize {
        self.bytes - self.passed_bytes()
    }

    /// Drops the oldest messages every reader is past while they hold more than `retain`
    /// bytes; whether any was dropped.
    fn trim(&mut self) -> bool {
        let least = self.least_next();
        let mut passed = self.passed_bytes();
        let mut trimmed = false;
        while passed > self.retain && self.buffer.front().is_some_and(|m| m.offset < least) {
            let m = self.buffer.pop_front().expect("front present");
            let size = size_of(&m);
            self.bytes -= size;
            passed -= size;
            self.floor = self.floor.max(m.offset + 1);
            trimmed = true;
        }
        trimmed
    }

    /// Appends polled `messages` that come after the buffer's last (a re-fetch after a
    /// re-positioning repeats some) and that a reader still needs; their bytes.
    fn append(&mut self, messages: Vec<RawMessage>) -> usize {
        let least = self.least_next();
        let mut bytes = 0;
        for m in messages {
            if self.buffer.back().is_some_and(|b| m.offset <= b.offset) {
                continue;
            }
            if m.offset < least {
                self.floor = self.floor.max(m.offset + 1);
                continue;
            }
            bytes += size_of(&m);
            self.buffer.push_back(m);
        }
        self.bytes += bytes;
        bytes
    }

    /// Empties the buffer so that the partition is fetched again from `start`, below the floor.
    fn rewind_to(&mut self, start: i64) {
        self.buffer.clear();
        self.bytes = 0;
        self.floor = start;
    }
}

/// A reader's place in a [`FanOut`]: what its polls and its release need.
pub(in crate::source::kafka) struct FanOutReader {
    fan: Arc<FanOut>,
    id: u64,
    /// Woken when the partition's queue turns nonempty, when another reader appends to the
    /// buffer and when the slowest reader frees the window.
    pub(in crate::source::kafka) wake: Arc<Notify>,
}

/// Locks `m`, or `None` when another thread holds it.
fn try_lock<T>(m: &Mutex<T>) -> Option<MutexGuard<'_, T>> {
    match m.try_lock() {
        Ok(guard) => Some(guard),
        Err(TryLockError::Poisoned(e)) => Some(e.into_inner()),
        Err(TryLockError::WouldBlock) => None,
    }
}

/// Joins partition `partition` of `topic` at offset `start` (the next offset the reader
/// returns): the partition's fan-out if it has one, else a new one that assigns the partition
/// at `start` (blocking: an assignment waits for librdkafka).
///
/// Errors: [`SourceError::NotFound`] when the consumer has no such partition; assignment errors.
pub(in crate::source::kafka) fn join(
    shared: &Arc<Shared>,
    channel: &str,
    topic: &str,
    partition: i32,
    start: i64,
) -> Result<FanOutReader, SourceError> {
    let key = (topic.to_string(), partition);
    let mut fan_outs = lock(&shared.fan_outs);
    if let Some(fan) = fan_outs.get(&key).and_then(Weak::upgrade) {
        if let Some(reader) = fan.add(start) {
            return Ok(reader);
        }
    }
    let wakes: Arc<Mutex<HashMap<u64, Arc<Notify>>>> = Arc::default();
    let for_callback = wakes.clone();
    let opened =
        shared.open_partition_with(topic, partition, Offset::Offset(start), move || {
            for wake in lock(&for_callback).values() {
                wake.notify_one();
            }
        })?;
    let fan = Arc::new(FanOut {
        pump: PartitionHandle {
            shared: shared.clone(),
            queue: Arc::new(opened.queue),
            poll_lock: shared.poll_lock(topic, partition),
            topic: topic.to_string(),
            partition,
            generation: opened.generation,
        },
        channel: channel.to_string(),
        state: Mutex::new(FanState {
            floor: start,
            retain: FAN_OUT_RETAIN_BYTES,
            ..FanState::default()
        }),
        wakes,
    });
    fan_outs.insert(key, Arc::downgrade(&fan));
    Ok(fan.add(start).expect("a new fan-out is open"))
}

impl FanOut {
    /// A new reader at `start`; `None` when the fan-out closed (its last reader left).
    fn add(self: &Arc<Self>, start: i64) -> Option<FanOutReader> {
        let mut st = lock(&self.state);
        if st.closed {
            return None;
        }
        if start < st.floor {
            tracing::info!(topic = %self.pump.topic, partition = self.pump.partition, start, floor = st.floor, "a reader starts below what its partition's other readers read past: fetching the partition again from its start");
            st.rewind_to(start);
            self.pump.flag_reposition();
        }
        let id = st.next_id;
        st.next_id += 1;
        st.next.insert(id, start);
        let wake = Arc::new(Notify::new());
        lock(&self.wakes).insert(id, wake.clone());
        Some(FanOutReader {
            fan: self.clone(),
            id,
            wake,
        })
    }

    /// Wakes every reader but `id`.
    fn wake_others(&self, id: u64) {
        for (other, wake) in lock(&self.wakes).iter() {
            if *other != id {
                wake.notify_one();
            }
        }
    }

    /// Serves reader `id` (see [`FanOutReader::try_now`]); `may_block`: waits for the locks and
    /// re-positions, else `None` when it would have to.
    fn serve(
        &self,
        id: u64,
        shard: &ShardId,
        max: usize,
        may_block: bool,
    ) -> Option<Result<Polled, SourceError>> {
        let mut st = match may_block {
            true => lock(&self.state),
            false => try_lock(&self.state)?,
        };
        if !st.next.contains_key(&id) {
            // A poll in flight for a reader that left.
            return Some(Ok((Vec::new(), None)));
        }
        let least = st.least_next();
        let served = st.take_for(id, max);
        if !served.is_empty() {
            st.trim();
            // The slowest reader read on: a reader held by the window may go on.
            let freed = st.least_next() > least;
            drop(st);
            if freed {
                self.wake_others(id);
            }
            return Some(Ok((served, None)));
        }
        if st.bytes >= FAN_OUT_WINDOW_BYTES && st.pending_bytes() >= FAN_OUT_WINDOW_BYTES {
            // The slowest reader holds the window: nothing for this one until it reads on.
            return Some(Ok((Vec::new(), None)));
        }
        let job = PollJob {
            handle: self.pump.clone(),
            resume_at: Offset::Offset(st.least_next()),
        };
        let polled = match may_block {
            true => job.run(shard, max),
            false => job.try_now(shard, max)?,
        };
        let (messages, error) = match polled {
            Ok(polled) => polled,
            Err(e) => return Some(Err(e)),
        };
        let fetched: usize = messages.iter().map(size_of).sum();
        let appended = st.append(messages);
        let served = st.take_for(id, max);
        st.trim();
        drop(st);
        self.pump.shared.count_fetched(&self.channel, fetched);
        if appended > 0 {
            self.wake_others(id);
        }
        Some(Ok((served, error)))
    }
}

impl FanOutReader {
    /// Up to `max` messages at or after this reader's next offset, without waiting: buffered
    /// ones, or (none buffered and the window not full) what a poll of the partition's queue
    /// fetched for every reader. `None` when it cannot be done without blocking (another
    /// reader polls, a re-positioning is due): then [`FanOutReader::run`] on a blocking thread.
    pub(in crate::source::kafka) fn try_now(
        &self,
        shard: &ShardId,
        max: usize,
    ) -> Option<Result<Polled, SourceError>> {
        self.fan.serve(self.id, shard, max, false)
    }

    /// [`FanOutReader::try_now`], waiting for the locks and re-positioning when due (blocking).
    pub(in crate::source::kafka) fn run(
        &self,
        shard: &ShardId,
        max: usize,
    ) -> Result<Polled, SourceError> {
        self.fan
            .serve(self.id, shard, max, true)
            .expect("a blocking serve always answers")
    }

    /// Moves this reader's next offset to `next` (a lost position skipped): forward as any read;
    /// below what was dropped, the partition is fetched again from there.
    pub(in crate::source::kafka) fn skip_to(&self, next: i64) {
        let mut st = lock(&self.fan.state);
        if next < st.floor {
            st.rewind_to(next);
        }
        st.next.insert(self.id, next);
        // Assigned again at the least next offset before the next poll.
        self.fan.pump.flag_reposition();
    }

    /// Leaves the fan-out: the last reader releases the partition (blocking).
    pub(in crate::source::kafka) fn leave(&self) {
        let fan = &self.fan;
        let shared = fan.pump.shared.clone();
        let mut fan_outs = lock(&shared.fan_outs);
        let mut st = lock(&fan.state);
        st.next.remove(&self.id);
        lock(&fan.wakes).remove(&self.id);
        if !st.next.is_empty() {
            // The one leaving may have been the slowest: the others may go on.
            st.trim();
            drop(st);
            drop(fan_outs);
            fan.wake_others(self.id);
            return;
        }
        st.closed = true;
        st.rewind_to(i64::MAX);
        let key = (fan.pump.topic.clone(), fan.pump.partition);
        if fan_outs
            .get(&key)
            .is_some_and(|w| std::ptr::eq(w.as_ptr(), Arc::as_ptr(fan)))
        {
            fan_outs.remove(&key);
        }
        drop(st);
        drop(fan_outs);
        Release(fan.pump.clone()).run();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(offset: i64, len: usize) -> RawMessage {
        RawMessage {
            partition: 0,
            offset,
            key: None,
            payload: vec![b'x'; len],
            tombstone: false,
            timestamp_ms: None,
        }
    }

    fn state(readers: &[(u64, i64)], floor: i64) -> FanState {
        FanState {
            floor,
            retain: 0,
            next: readers.iter().copied().collect(),
            next_id: readers.len() as u64,
            ..FanState::default()
        }
    }

    fn offsets(messages: &[RawMessage]) -> Vec<i64> {
        messages.iter().map(|m| m.offset).collect()
    }

    #[test]
    fn each_reader_gets_the_messages_from_its_own_next_offset_once() {
        let mut st = state(&[(0, 10), (1, 12)], 10);
        // Offsets with a gap (a compacted or transactional log).
        st.append((10..14).chain(16..18).map(|o| message(o, 5)).collect());
        assert_eq!(offsets(&st.take_for(1, 3)), vec![12, 13, 16]);
        assert_eq!(offsets(&st.take_for(0, 100)), vec![10, 11, 12, 13, 16, 17]);
        assert!(st.take_for(0, 100).is_empty(), "never a position twice");
        assert!(st.trim());
        assert_eq!(
            offsets(&st.buffer.iter().cloned().collect::<Vec<_>>()),
            vec![17]
        );
        assert_eq!(st.bytes, 5);
        assert_eq!(
            st.floor, 17,
            "a reader starting at 17 is still served from the buffer"
        );
        assert_eq!(offsets(&st.take_for(1, 100)), vec![17]);
        assert!(st.trim());
        assert_eq!((st.bytes, st.floor), (0, 18));
    }

    #[test]
    fn the_last_passed_messages_are_kept_for_readers_that_join_later() {
        let mut st = state(&[(0, 0)], 0);
        st.retain = 10;
        st.append((0..8).map(|o| message(o, 4)).collect());
        assert_eq!(st.take_for(0, 5).len(), 5);
        // 20 bytes passed: the oldest dropped until at most 10 are left.
        assert!(st.trim());
        assert_eq!(
            offsets(&st.buffer.iter().cloned().collect::<Vec<_>>()),
            vec![3, 4, 5, 6, 7]
        );
        assert_eq!(
            (st.floor, st.passed_bytes(), st.pending_bytes()),
            (3, 8, 12)
        );
        // A reader joining at 3 is served from the buffer.
        st.next.insert(1, 3);
        assert_eq!(offsets(&st.take_for(1, 100)), vec![3, 4, 5, 6, 7]);
    }

    #[test]
    fn a_re_fetch_after_a_re_positioning_appends_nothing_twice() {
        let mut st = state(&[(0, 0), (1, 3)], 0);
        assert_eq!(st.append((0..4).map(|o| message(o, 1)).collect()), 4);
        // The assignment moved back to the least next offset (0): the same messages again.
        assert_eq!(st.append((0..6).map(|o| message(o, 1)).collect()), 2);
        assert_eq!(offsets(&st.take_for(0, 100)), vec![0, 1, 2, 3, 4, 5]);
        assert_eq!(offsets(&st.take_for(1, 100)), vec![3, 4, 5]);
    }

    #[test]
    fn messages_no_reader_needs_are_not_kept_and_raise_the_floor() {
        let mut st = state(&[(0, 7)], 0);
        assert_eq!(st.append((5..9).map(|o| message(o, 1)).collect()), 2);
        assert_eq!(st.floor, 7);
        assert_eq!(offsets(&st.take_for(0, 100)), vec![7, 8]);
    }
}
