//! In-memory fake of the [`Source`] seam for component tests (worker, discovery, takeover): shards
//! are vectors of records with Kafka-like offsets; tests append records, add shards (partition
//! growth, Kinesis children with parents), close shards (a Kinesis split or merge: the reader
//! reports `shard_ended` after the last record), trim (retention) and make the source unavailable.
//! Waits use `tokio::time`, so it also works under paused time.
//!
//! It follows the same contract as [`super::kafka`]: records in increasing offset order, resume
//! at `checkpoint + 1`, a trimmed start offset is [`SourceError::PositionLost`].

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use tokio::sync::Notify;

use super::{
    InitialPosition, Lag, ShardInfo, ShardReader, Source, SourceError, SourceRecord, StartAt,
};
use crate::model::{Position, ShardId};

/// A stored record: `(offset, key, payload, timestamp_ms)`.
type StoredRecord = (i64, Option<Vec<u8>>, Vec<u8>, i64);

#[derive(Default)]
struct ShardLog {
    parents: Vec<ShardId>,
    /// Records `(offset, key, payload, timestamp_ms)` from the low watermark up.
    records: Vec<StoredRecord>,
    /// Offset of the next appended record (high watermark).
    high: i64,
    /// Oldest offset held (low watermark).
    low: i64,
    /// Closed (Kinesis resharding): no more appends; readers end after the last record.
    closed: bool,
    /// Readers opened on this shard.
    opens: usize,
    /// Records returned by its readers.
    records_read: u64,
}

#[derive(Default)]
struct State {
    shards: BTreeMap<ShardId, ShardLog>,
    unavailable: bool,
}

/// An in-memory [`Source`]. Clones share the same shards.
#[derive(Clone, Default)]
pub struct MemorySource {
    state: Arc<Mutex<State>>,
    appended: Arc<Notify>,
}

impl std::fmt::Debug for MemorySource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemorySource").finish_non_exhaustive()
    }
}

impl MemorySource {
    /// An empty source with no shards.
    pub fn new() -> Self {
        Self::default()
    }

    /// A source with Kafka-like shards `"0"`, …, `num_shards - 1`.
    pub fn with_partitions(num_shards: i32) -> Self {
        let s = Self::new();
        for p in 0..num_shards {
            s.add_shard(ShardId::kafka_partition(p), Vec::new());
        }
        s
    }

    /// How many readers were opened on `shard` (a worker reopens them when it drops its
    /// buffer); 0 for an unknown shard.
    pub fn opens(&self, shard: &ShardId) -> usize {
        self.lock().shards.get(shard).map_or(0, |l| l.opens)
    }

    /// How many records the readers of `shard` returned in all (a record read twice counts
    /// twice); 0 for an unknown shard.
    pub fn records_read(&self, shard: &ShardId) -> u64 {
        self.lock().shards.get(shard).map_or(0, |l| l.records_read)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Adds an empty shard (a new Kafka partition, a Kinesis child of `parents`); no-op if it exists.
    pub fn add_shard(&self, shard: ShardId, parents: Vec<ShardId>) {
        self.lock().shards.entry(shard).or_insert(ShardLog {
            parents,
            ..ShardLog::default()
        });
    }

    /// Appends a record with timestamp `timestamp_ms` (ms since the Unix epoch) and returns its
    /// position. Panics if the shard does not exist.
    pub fn append(
        &self,
        shard: &ShardId,
        key: Option<Vec<u8>>,
        payload: Vec<u8>,
        timestamp_ms: i64,
    ) -> Position {
        let mut state = self.lock();
        let log = state
            .shards
            .get_mut(shard)
            .expect("append to an unknown shard");
        assert!(!log.closed, "append to a closed shard");
        let offset = log.high;
        log.records.push((offset, key, payload, timestamp_ms));
        log.high += 1;
        drop(state);
        self.appended.notify_waiters();
        Position::Offset(offset)
    }

    /// Closes a shard, as a Kinesis split or merge closes its parents: a reader reports
    /// [`ShardReader::shard_ended`] once it returned the last record. Panics if the shard does
    /// not exist.
    pub fn close(&self, shard: &ShardId) {
        self.lock()
            .shards
            .get_mut(shard)
            .expect("close an unknown shard")
            .closed = true;
        self.appended.notify_waiters();
    }

    /// Removes the shard from the stream, as Kinesis does with a closed shard once its records
    /// are past retention: ListShards no longer returns it and reading it is `NotFound`.
    pub fn remove_shard(&self, shard: &ShardId) {
        self.lock().shards.remove(shard);
        self.appended.notify_waiters();
    }

    /// Removes records below `offset` (retention).
    pub fn trim(&self, shard: &ShardId, offset: i64) {
        let mut state = self.lock();
        if let Some(log) = state.shards.get_mut(shard) {
            log.records.retain(|r| r.0 >= offset);
            log.low = log.low.max(offset.min(log.high));
        }
    }

    /// Makes every call fail with [`SourceError::Unavailable`] while `true`.
    pub fn set_unavailable(&self, unavailable: bool) {
        self.lock().unavailable = unavailable;
        self.appended.notify_waiters();
    }

    fn check_available(state: &State) -> Result<(), SourceError> {
        if state.unavailable {
            Err(SourceError::Unavailable {
                message: "memory source set unavailable".to_string(),
            })
        } else {
            Ok(())
        }
    }
}

fn not_found(shard: &ShardId) -> SourceError {
    SourceError::NotFound {
        what: format!("shard {shard}"),
    }
}

#[async_trait]
impl Source for MemorySource {
    async fn list_shards(&self) -> Result<Vec<ShardInfo>, SourceError> {
        let state = self.lock();
        Self::check_available(&state)?;
        Ok(state
            .shards
            .iter()
            .map(|(id, log)| ShardInfo {
                id: id.clone(),
                parents: log.parents.clone(),
            })
            .collect())
    }

    async fn start_position(
        &self,
        shard: &ShardId,
        initial: &InitialPosition,
    ) -> Result<StartAt, SourceError> {
        let state = self.lock();
        Self::check_available(&state)?;
        let log = state.shards.get(shard).ok_or_else(|| not_found(shard))?;
        Ok(match initial {
            InitialPosition::Earliest => StartAt::Earliest,
            InitialPosition::Latest => StartAt::Latest,
            InitialPosition::AtTimestamp(ts) => StartAt::At(Position::Offset(
                log.records
                    .iter()
                    .find(|r| r.3 >= *ts)
                    .map(|r| r.0)
                    .unwrap_or(log.high),
            )),
        })
    }

    async fn open(
        &self,
        shard: &ShardId,
        start: StartAt,
    ) -> Result<Box<dyn ShardReader>, SourceError> {
        let next = {
            let mut state = self.lock();
            Self::check_available(&state)?;
            let log = state
                .shards
                .get_mut(shard)
                .ok_or_else(|| not_found(shard))?;
            log.opens += 1;
            match &start {
                StartAt::After(Position::Offset(o)) => o + 1,
                StartAt::At(Position::Offset(o)) => *o,
                StartAt::AtTimestamp(ts) => log
                    .records
                    .iter()
                    .find(|r| r.3 >= *ts)
                    .map(|r| r.0)
                    .unwrap_or(log.high),
                StartAt::Earliest => log.low,
                StartAt::Latest => log.high,
                StartAt::After(p) | StartAt::At(p) => {
                    return Err(SourceError::InvalidPosition {
                        shard: shard.clone(),
                        message: format!("{p} is not an offset"),
                    })
                }
            }
        };
        Ok(Box::new(MemoryShardReader {
            source: self.clone(),
            shard: shard.clone(),
            next,
            lag: None,
        }))
    }
}

/// A reader of one [`MemorySource`] shard.
#[derive(Debug)]
pub struct MemoryShardReader {
    source: MemorySource,
    shard: ShardId,
    next: i64,
    lag: Option<u64>,
}

impl MemoryShardReader {
    fn take(&mut self, max_records: usize) -> Result<Vec<SourceRecord>, SourceError> {
        let mut state = self.source.lock();
        MemorySource::check_available(&state)?;
        let log = state
            .shards
            .get(&self.shard)
            .ok_or_else(|| not_found(&self.shard))?;
        if self.next < log.low {
            return Err(SourceError::PositionLost {
                shard: self.shard.clone(),
                message: format!(
                    "offset {} is below the low watermark {}",
                    self.next, log.low
                ),
            });
        }
        let read_at = Instant::now();
        let out: Vec<SourceRecord> = log
            .records
            .iter()
            .filter(|r| r.0 >= self.next)
            .take(max_records.max(1))
            .map(|(o, k, p, ts)| SourceRecord {
                shard: self.shard.clone(),
                position: Position::Offset(*o),
                key: k.clone(),
                payload: p.clone(),
                tombstone: false,
                arrival_ms: *ts,
                read_at,
            })
            .collect();
        if let Some(SourceRecord {
            position: Position::Offset(o),
            ..
        }) = out.last()
        {
            self.next = o + 1;
        }
        self.lag = Some((log.high - self.next).max(0) as u64);
        if let Some(log) = state.shards.get_mut(&self.shard) {
            log.records_read += out.len() as u64;
        }
        Ok(out)
    }
}

#[async_trait]
impl ShardReader for MemoryShardReader {
    async fn next_batch(
        &mut self,
        max_records: usize,
        wait: Duration,
    ) -> Result<Vec<SourceRecord>, SourceError> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let appended = self.source.appended.clone();
            let notified = appended.notified();
            let out = self.take(max_records)?;
            if !out.is_empty() || tokio::time::Instant::now() >= deadline {
                return Ok(out);
            }
            let _ = tokio::time::timeout_at(deadline, notified).await;
        }
    }

    fn lag(&self) -> Option<Lag> {
        self.lag.map(Lag::Records)
    }

    fn shard_ended(&self) -> bool {
        let state = self.source.lock();
        state
            .shards
            .get(&self.shard)
            .is_some_and(|log| log.closed && self.next >= log.high)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::resolve_start;

    fn offsets(records: &[SourceRecord]) -> Vec<i64> {
        records
            .iter()
            .map(|r| match r.position {
                Position::Offset(o) => o,
                _ => unreachable!(),
            })
            .collect()
    }

    #[tokio::test]
    async fn resumes_after_the_checkpoint_and_starts_fresh_shards_at_the_initial_position() {
        let src = MemorySource::with_partitions(1);
        let p0 = ShardId::kafka_partition(0);
        for i in 0..10 {
            src.append(&p0, None, vec![i as u8], 1_000 + i * 100);
        }
        let initial = InitialPosition::AtTimestamp(1_450);
        let start = resolve_start(&src, &p0, Some(&Position::Offset(3)), &initial)
            .await
            .unwrap();
        assert_eq!(start.after_exclusive(), Some(&Position::Offset(3)));
        let mut r = src.open(&p0, start).await.unwrap();
        assert_eq!(
            offsets(&r.next_batch(100, Duration::ZERO).await.unwrap()),
            (4..10).collect::<Vec<_>>()
        );
        assert_eq!(r.lag(), Some(Lag::Records(0)));

        let start = resolve_start(&src, &p0, None, &initial).await.unwrap();
        assert_eq!(start, StartAt::At(Position::Offset(5)));
        assert_eq!(start.after_exclusive(), None);
    }

    #[tokio::test]
    async fn a_closed_shard_ends_after_its_last_record() {
        let src = MemorySource::with_partitions(1);
        let p0 = ShardId::kafka_partition(0);
        for i in 0..3 {
            src.append(&p0, None, vec![i as u8], 1_000);
        }
        src.close(&p0);
        let mut r = src.open(&p0, StartAt::Earliest).await.unwrap();
        assert_eq!(
            offsets(&r.next_batch(2, Duration::ZERO).await.unwrap()),
            vec![0, 1]
        );
        assert!(!r.shard_ended());
        assert_eq!(
            offsets(&r.next_batch(2, Duration::ZERO).await.unwrap()),
            vec![2]
        );
        assert!(r.shard_ended());
    }

    #[tokio::test]
    async fn waits_for_records_then_returns_what_is_available() {
        let src = MemorySource::with_partitions(1);
        let p0 = ShardId::kafka_partition(0);
        let mut r = src.open(&p0, StartAt::Earliest).await.unwrap();
        assert!(r
            .next_batch(10, Duration::from_millis(100))
            .await
            .unwrap()
            .is_empty());
        let writer = src.clone();
        let shard = p0.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            writer.append(&shard, None, b"x".to_vec(), 0);
        });
        let batch = r.next_batch(10, Duration::from_secs(5)).await.unwrap();
        assert_eq!(offsets(&batch), [0]);
    }

    #[tokio::test]
    async fn reports_new_shards_trimmed_positions_and_outages() {
        let src = MemorySource::with_partitions(2);
        src.add_shard(ShardId::kafka_partition(2), Vec::new());
        assert_eq!(src.list_shards().await.unwrap().len(), 3);
        let p0 = ShardId::kafka_partition(0);
        for _ in 0..5 {
            src.append(&p0, None, Vec::new(), 0);
        }
        src.trim(&p0, 3);
        let mut r = src
            .open(&p0, StartAt::After(Position::Offset(0)))
            .await
            .unwrap();
        assert!(matches!(
            r.next_batch(10, Duration::ZERO).await,
            Err(SourceError::PositionLost { .. })
        ));
        let mut r = src.open(&p0, StartAt::Earliest).await.unwrap();
        src.set_unavailable(true);
        let err = r.next_batch(10, Duration::ZERO).await.unwrap_err();
        assert!(err.is_retryable());
        src.set_unavailable(false);
        assert_eq!(
            offsets(&r.next_batch(10, Duration::ZERO).await.unwrap()),
            [3, 4]
        );
    }
}
