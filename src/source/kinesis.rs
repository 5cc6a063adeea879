//! Kinesis Data Streams implementation of the [`Source`] seam (aws-sdk-kinesis, polling with
//! GetRecords).
//!
//! ```text
//!   KinesisSource ── list_shards: ListShards (paginated), parents = ParentShardId, AdjacentParentShardId
//!        │           start_position: AT_TIMESTAMP(activation) | TRIM_HORIZON, no I/O
//!        └── open(shard, start) ──► KinesisShardReader
//!               cursor ──GetShardIterator──► iterator ──GetRecords──► records ──KPL de-aggregation──► pending
//!                 ▲                                        │ NextShardIterator = null: closed shard,
//!                 └── after the last record fetched ◄──────┘ ended once `pending` is returned
//! ```
//!
//! Positions and resuming (docs/design.md, protocol step 1):
//! - A plain record is at `Position::Sequence(n)`; the user records of a KPL aggregate at
//!   sequence number `n` are at `n.0`, `n.1`, … ([`kpl`]), which order after `n` and before `n + 1`.
//! - [`StartAt::After`]`(n)` reads with `AFTER_SEQUENCE_NUMBER n`. `After(n.i)` reads with
//!   `AT_SEQUENCE_NUMBER n` and drops the aggregate's user records `≤ i`, so resuming inside an
//!   aggregate delivers `n.(i+1)`, … exactly once.
//! - Generally the reader keeps a **cursor**, the last position it fetched, and drops any record at
//!   or before it: after an `ExpiredIteratorException` it takes a new iterator at the cursor and
//!   goes on, never skipping or repeating a record.
//!
//! Pacing and errors:
//! - GetRecords is called at most every [`MIN_CALL_INTERVAL`] per shard (4 calls/s, under the
//!   service's 5), and `poll_interval` after a response with no records while the reader is caught
//!   up (`MillisBehindLatest = 0`).
//! - ProvisionedThroughputExceeded, LimitExceeded, KMS throttling → [`SourceError::Throttled`];
//!   timeouts and 5xx → [`SourceError::Unavailable`]. The reader stays usable and backs off by
//!   itself (1 s doubling to 10 s): calls within the backoff return no records.
//! - ResourceNotFound → [`SourceError::NotFound`]; a checkpoint the shard refuses
//!   (InvalidArgumentException on an `AT/AFTER_SEQUENCE_NUMBER` iterator) →
//!   [`SourceError::InvalidPosition`]; access denied and other client errors →
//!   [`SourceError::Fatal`].
//! - [`SourceError::PositionLost`] is not produced: the API gives no reliable signal that records
//!   after a checkpoint were trimmed by retention (sequence numbers have gaps, so the first record
//!   returned after a checkpoint cannot tell whether others came between). Keep the stream's
//!   retention above the longest outage of the channel.
//! - A closed shard (after a split or merge) answers GetRecords with no `NextShardIterator` once
//!   its last record is returned: [`ShardReader::shard_ended`] becomes `true` when the reader has
//!   handed out every record it fetched, and the worker checkpoints the shard as `SHARD_END`
//!   (docs/design.md step 8).
//! - Lag is `MillisBehindLatest` of the last response ([`Lag::Millis`]); arrival time is
//!   `ApproximateArrivalTimestamp`.
//!
//! # Enhanced fan-out
//!
//! With `read_mode = "enhanced_fan_out"` the channel registers a stream consumer at start
//! ([`efo::register_consumer`]) and [`KinesisSource::open`] returns an [`efo::EfoShardReader`]:
//! SubscribeToShard pushes records over HTTP/2 with the consumer's own 2 MB/s per shard, from
//! the same cursor rules, KPL de-aggregation and shard-end handling as polling (see [`efo`]).
//! Discovery (ListShards) and the lease store are the same in both modes.

pub mod api;
pub mod efo;
pub mod kpl;

use crate::time::now_ms;
use std::collections::VecDeque;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tokio::time::Instant;

use self::api::{ApiError, IteratorStart, KinesisApi, RawRecord, SdkKinesis, StreamRef};
use super::{
    InitialPosition, Lag, ShardInfo, ShardReader, Source, SourceError, SourceRecord, StartAt,
};
use crate::config::KinesisSourceConfig;
use crate::model::{Position, SequenceNumber, ShardId};

/// Least time between two GetRecords calls on one shard: 4 calls per second, under the service's
/// limit of 5 per shard (shared by every consumer of the stream).
pub const MIN_CALL_INTERVAL: Duration = Duration::from_millis(250);
/// First backoff after a throttled or failed call; doubled at each failure in a row.
const FIRST_BACKOFF: Duration = Duration::from_secs(1);
/// Largest backoff after throttled or failed calls.
const MAX_BACKOFF: Duration = Duration::from_secs(10);
/// Iterators that expire in a row before the reader reports the shard unavailable.
const MAX_EXPIRED_IN_A_ROW: u32 = 3;
/// ListShards restarts after an expired NextToken before it gives up.
const MAX_LIST_RESTARTS: u32 = 3;

/// How a [`KinesisSource`] reads: GetRecords batch size and idle polling.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReaderSettings {
    /// GetRecords `Limit`, 1 to 10 000.
    pub max_records_per_call: i32,
    /// Wait after a GetRecords response without records, when caught up.
    pub poll_interval: Duration,
}

/// A Kinesis data stream as a [`Source`]: shards are its shards (`shardId-000000000000`, …),
/// positions are sequence numbers ([`Position::Sequence`], with a sub-sequence number for the
/// user records of KPL aggregates).
pub struct KinesisSource {
    api: Arc<dyn KinesisApi>,
    stream: String,
    settings: ReaderSettings,
    fan_out: Option<FanOut>,
}

/// The registered consumer an enhanced fan-out source subscribes as.
#[derive(Debug, Clone)]
struct FanOut {
    consumer_arn: String,
    channel: String,
}

impl fmt::Debug for KinesisSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KinesisSource")
            .field("stream", &self.stream)
            .field("settings", &self.settings)
            .field("fan_out", &self.fan_out)
            .finish()
    }
}

impl KinesisSource {
    /// The source for the stream `config` names, called through `client` (see
    /// [`crate::aws::AwsClients::kinesis`]). No network call.
    pub fn new(client: aws_sdk_kinesis::Client, config: &KinesisSourceConfig) -> Self {
        let stream = StreamRef::from(&config.stream);
        let settings = ReaderSettings {
            max_records_per_call: config.max_records_per_call.clamp(1, 10_000) as i32,
            poll_interval: config.poll_interval,
        };
        let name = stream.to_string();
        Self::with_api(Arc::new(SdkKinesis::new(client, stream)), name, settings)
    }

    /// The source over any [`KinesisApi`] (tests use a fake).
    pub fn with_api(
        api: Arc<dyn KinesisApi>,
        stream: impl Into<String>,
        settings: ReaderSettings,
    ) -> Self {
        KinesisSource {
            api,
            stream: stream.into(),
            settings,
            fan_out: None,
        }
    }

    /// This source read with enhanced fan-out as the registered consumer `consumer_arn` (see
    /// [`efo::register_consumer`]); `channel` labels the subscription metrics. No network call.
    pub fn with_fan_out(
        mut self,
        consumer_arn: impl Into<String>,
        channel: impl Into<String>,
    ) -> Self {
        self.fan_out = Some(FanOut {
            consumer_arn: consumer_arn.into(),
            channel: channel.into(),
        });
        self
    }

    /// The consumer ARN an enhanced fan-out source subscribes as; `None` when it polls.
    pub fn consumer_arn(&self) -> Option<&str> {
        self.fan_out.as_ref().map(|f| f.consumer_arn.as_str())
    }

    /// The stream's name or ARN, as configured.
    pub fn stream(&self) -> &str {
        &self.stream
    }
}

#[async_trait]
impl Source for KinesisSource {
    /// Every shard ListShards returns (open and closed ones still within retention), following
    /// NextToken; an expired token restarts the listing.
    async fn list_shards(&self) -> Result<Vec<ShardInfo>, SourceError> {
        let mut restarts = 0;
        'listing: loop {
            let mut shards = Vec::new();
            let mut token: Option<String> = None;
            loop {
                match self.api.list_shards(token.as_deref()).await {
                    Ok(page) => {
                        shards.extend(page.shards);
                        match page.next_token {
                            Some(next) => token = Some(next),
                            None => return Ok(shards),
                        }
                    }
                    Err(ApiError::Expired) if restarts < MAX_LIST_RESTARTS => {
                        restarts += 1;
                        continue 'listing;
                    }
                    Err(ApiError::Expired) => {
                        return Err(SourceError::Unavailable {
                            message: format!(
                                "list shards of stream {}: the NextToken kept expiring",
                                self.stream
                            ),
                        })
                    }
                    Err(ApiError::Source(e)) => return Err(e),
                }
            }
        }
    }

    /// `AT_TIMESTAMP` for the channel's activation time, `TRIM_HORIZON` for earliest; no I/O.
    /// Both are deterministic: every worker opening the shard starts at the same record.
    async fn start_position(
        &self,
        _shard: &ShardId,
        initial: &InitialPosition,
    ) -> Result<StartAt, SourceError> {
        Ok(match initial {
            InitialPosition::Earliest => StartAt::Earliest,
            InitialPosition::Latest => StartAt::Latest,
            InitialPosition::AtTimestamp(ms) => StartAt::AtTimestamp(*ms),
        })
    }

    /// Polling: takes the first shard iterator at once, so a missing shard
    /// ([`SourceError::NotFound`]) or a refused checkpoint ([`SourceError::InvalidPosition`])
    /// fails here; a throttled or unavailable service does not: the reader retries it.
    /// Enhanced fan-out: subscribes at once, with the same errors here; then the reader's task
    /// forwards the events and re-subscribes.
    async fn open(
        &self,
        shard: &ShardId,
        start: StartAt,
    ) -> Result<Box<dyn ShardReader>, SourceError> {
        let cursor = Cursor::from_start(shard, &start)?;
        if let Some(fan_out) = &self.fan_out {
            // The first subscription is made here, so that a missing shard or a refused
            // checkpoint fails `open` as with polling; a refused or unavailable one is retried
            // by the reader.
            let first = match self
                .api
                .subscribe_to_shard(&fan_out.consumer_arn, shard, &cursor.iterator_start())
                .await
            {
                Ok(subscription) => Some(subscription),
                Err(e) if e.is_retryable() => {
                    tracing::warn!(stream = %self.stream, shard = %shard, error = %e, "no subscription yet; the reader retries");
                    None
                }
                Err(e) => return Err(e),
            };
            tracing::info!(stream = %self.stream, shard = %shard, start = ?start, consumer_arn = %fan_out.consumer_arn, "kinesis enhanced fan-out reader opened");
            return Ok(Box::new(efo::EfoShardReader::start(
                self.api.clone(),
                fan_out.consumer_arn.clone(),
                shard.clone(),
                cursor,
                fan_out.channel.clone(),
                first,
            )));
        }
        let mut reader = KinesisShardReader {
            api: self.api.clone(),
            shard: shard.clone(),
            settings: self.settings,
            cursor,
            iterator: None,
            pending: VecDeque::new(),
            ended: false,
            child_shards: Vec::new(),
            next_call_at: Instant::now(),
            backoff: FIRST_BACKOFF,
            expired_in_a_row: 0,
            lag_ms: None,
        };
        match reader.acquire_iterator().await {
            Ok(()) => {}
            Err(e) if e.is_retryable() => {
                tracing::warn!(stream = %self.stream, shard = %shard, error = %e, "no shard iterator yet; the reader retries");
                reader.back_off();
            }
            Err(e) => return Err(e),
        }
        tracing::info!(stream = %self.stream, shard = %shard, start = ?start, "kinesis reader opened");
        Ok(Box::new(reader))
    }
}

/// Where the reader (re)starts: the start it was opened with until it fetched a record, then
/// after the last record it fetched.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Cursor {
    TrimHorizon,
    Latest,
    AtTimestamp(i64),
    /// At this sequence number, inclusive (sub-sequence numbers below it dropped).
    At(SequenceNumber),
    /// After this position (a record, or a user record of an aggregate).
    After(SequenceNumber),
}

impl Cursor {
    fn from_start(shard: &ShardId, start: &StartAt) -> Result<Self, SourceError> {
        let invalid = |p: &Position| SourceError::InvalidPosition {
            shard: shard.clone(),
            message: format!("cannot read a kinesis shard from {p}"),
        };
        Ok(match start {
            StartAt::After(Position::Sequence(s)) => Cursor::After(s.clone()),
            StartAt::At(Position::Sequence(s)) => Cursor::At(s.clone()),
            StartAt::After(p) | StartAt::At(p) => return Err(invalid(p)),
            StartAt::AtTimestamp(ms) => Cursor::AtTimestamp(*ms),
            StartAt::Earliest => Cursor::TrimHorizon,
            StartAt::Latest => Cursor::Latest,
        })
    }

    fn iterator_start(&self) -> IteratorStart {
        match self {
            Cursor::TrimHorizon => IteratorStart::TrimHorizon,
            Cursor::Latest => IteratorStart::Latest,
            Cursor::AtTimestamp(ms) => IteratorStart::AtTimestamp(*ms),
            Cursor::At(s) => IteratorStart::AtSequence(s.digits().to_string()),
            // Inside an aggregate: read it again and drop what was already returned.
            Cursor::After(s) if s.sub_sequence().is_some() => {
                IteratorStart::AtSequence(s.digits().to_string())
            }
            Cursor::After(s) => IteratorStart::AfterSequence(s.digits().to_string()),
        }
    }

    /// Whether a record at `position` is still to be returned.
    fn admits(&self, position: &SequenceNumber) -> bool {
        match self {
            Cursor::At(s) => position >= s,
            Cursor::After(s) => position > s,
            _ => true,
        }
    }
}

/// De-aggregates one Kinesis record of `shard` into `out` (KPL user records at their
/// sub-sequence numbers), dropping what `cursor` already passed, and moves `cursor` after it.
/// Shared by the polling and the enhanced fan-out readers, so both deliver the same records at
/// the same positions.
///
/// Errors: [`SourceError::Fatal`] for a sequence number that is not decimal digits.
fn accept(
    shard: &ShardId,
    cursor: &mut Cursor,
    raw: RawRecord,
    out: &mut Vec<SourceRecord>,
) -> Result<(), SourceError> {
    let seq = SequenceNumber::try_new(&raw.sequence_number).map_err(|e| SourceError::Fatal {
        message: format!("shard {shard}: the service returned {e}"),
    })?;
    let read_at = std::time::Instant::now();
    let arrival_ms = raw.arrival_ms.unwrap_or_else(now_ms);
    let record = |position: SequenceNumber, key: String, payload: Vec<u8>| SourceRecord {
        shard: shard.clone(),
        position: Position::Sequence(position),
        key: Some(key.into_bytes()),
        payload,
        // A Kinesis record's data is a blob, possibly empty but never null: Kinesis has no
        // tombstones (an empty record is converted, or dead-lettered, as any other).
        tombstone: false,
        arrival_ms,
        read_at,
    };
    let last = match kpl::deaggregate(&raw.data) {
        None => {
            if cursor.admits(&seq) {
                out.push(record(seq.clone(), raw.partition_key, raw.data));
            }
            seq
        }
        Some(users) => {
            let num = users.len() as u64;
            for (i, user) in users.into_iter().enumerate() {
                let position = seq.clone().with_sub_sequence(i as u64);
                if cursor.admits(&position) {
                    out.push(record(position, user.partition_key, user.data));
                }
            }
            match num {
                // An aggregate without user records: continue after the Kinesis record.
                0 => seq,
                n => seq.with_sub_sequence(n - 1),
            }
        }
    };
    if cursor.admits(&last) {
        *cursor = Cursor::After(last);
    }
    Ok(())
}

/// Reads one shard with GetShardIterator + GetRecords (see the module docs).
pub struct KinesisShardReader {
    api: Arc<dyn KinesisApi>,
    shard: ShardId,
    settings: ReaderSettings,
    cursor: Cursor,
    /// The iterator to call GetRecords with; `None` until taken, after expiry, or at the end.
    iterator: Option<String>,
    /// Records fetched and not yet returned, in position order.
    pending: VecDeque<SourceRecord>,
    /// GetRecords answered without a next iterator: the shard is closed and fully fetched.
    ended: bool,
    child_shards: Vec<ShardId>,
    /// No remote call before this instant (pacing, backoff).
    next_call_at: Instant,
    backoff: Duration,
    expired_in_a_row: u32,
    lag_ms: Option<u64>,
}

impl fmt::Debug for KinesisShardReader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KinesisShardReader")
            .field("shard", &self.shard)
            .field("cursor", &self.cursor)
            .field("pending", &self.pending.len())
            .field("ended", &self.ended)
            .finish()
    }
}

impl KinesisShardReader {
    /// The child shards GetRecords named when the shard ended (empty before).
    pub fn child_shards(&self) -> &[ShardId] {
        &self.child_shards
    }

    async fn acquire_iterator(&mut self) -> Result<(), SourceError> {
        let start = self.cursor.iterator_start();
        let iterator = self.api.get_shard_iterator(&self.shard, &start).await?;
        self.iterator = Some(iterator);
        Ok(())
    }

    fn back_off(&mut self) {
        self.next_call_at = Instant::now() + self.backoff;
        self.backoff = (self.backoff * 2).min(MAX_BACKOFF);
    }

    /// Records a failed call: retryable errors delay the next call.
    fn failed(&mut self, e: SourceError) -> SourceError {
        if e.is_retryable() {
            self.back_off();
        }
        e
    }

    /// One GetRecords call (taking an iterator first if needed); fetched records go to `pending`.
    async fn fetch(&mut self) -> Result<(), SourceError> {
        if self.iterator.is_none() {
            if let Err(e) = self.acquire_iterator().await {
                return Err(self.failed(e));
            }
        }
        let iterator = self.iterator.clone().expect("iterator acquired");
        let result = self
            .api
            .get_records(&iterator, self.settings.max_records_per_call)
            .await;
        let now = Instant::now();
        match result {
            Ok(page) => {
                self.backoff = FIRST_BACKOFF;
                self.expired_in_a_row = 0;
                let fetched = !page.records.is_empty();
                let behind = page.millis_behind_latest.unwrap_or(0) > 0;
                self.lag_ms = page.millis_behind_latest.map(|m| m.max(0) as u64);
                for raw in page.records {
                    self.accept(raw)?;
                }
                match page.next_iterator {
                    Some(next) => self.iterator = Some(next),
                    None => {
                        self.iterator = None;
                        self.ended = true;
                        self.child_shards = page.child_shards;
                        tracing::info!(shard = %self.shard, children = ?self.child_shards, "kinesis shard closed: every record fetched");
                    }
                }
                self.next_call_at = now
                    + if fetched || behind {
                        MIN_CALL_INTERVAL
                    } else {
                        self.settings.poll_interval.max(MIN_CALL_INTERVAL)
                    };
                Ok(())
            }
            Err(ApiError::Expired) => {
                // Take a new iterator at the cursor: after the last record fetched.
                self.iterator = None;
                self.expired_in_a_row += 1;
                tracing::debug!(shard = %self.shard, cursor = ?self.cursor, "shard iterator expired; taking a new one");
                if self.expired_in_a_row >= MAX_EXPIRED_IN_A_ROW {
                    self.expired_in_a_row = 0;
                    return Err(self.failed(SourceError::Unavailable {
                        message: format!(
                            "shard {}: {MAX_EXPIRED_IN_A_ROW} shard iterators expired in a row",
                            self.shard
                        ),
                    }));
                }
                Ok(())
            }
            Err(ApiError::Source(e)) => Err(self.failed(e)),
        }
    }

    /// De-aggregates one Kinesis record into `pending`, dropping what the cursor already passed.
    fn accept(&mut self, raw: RawRecord) -> Result<(), SourceError> {
        let mut out = Vec::new();
        accept(&self.shard, &mut self.cursor, raw, &mut out)?;
        self.pending.extend(out);
        Ok(())
    }

    fn take(&mut self, max_records: usize) -> Vec<SourceRecord> {
        let n = max_records.max(1).min(self.pending.len());
        self.pending.drain(..n).collect()
    }
}

#[async_trait]
impl ShardReader for KinesisShardReader {
    async fn next_batch(
        &mut self,
        max_records: usize,
        wait: Duration,
    ) -> Result<Vec<SourceRecord>, SourceError> {
        let deadline = Instant::now() + wait;
        loop {
            if !self.pending.is_empty() {
                return Ok(self.take(max_records));
            }
            if self.ended {
                return Ok(Vec::new());
            }
            if self.next_call_at > Instant::now() {
                if self.next_call_at > deadline {
                    tokio::time::sleep_until(deadline).await;
                    return Ok(Vec::new());
                }
                tokio::time::sleep_until(self.next_call_at).await;
            }
            self.fetch().await?;
            if self.pending.is_empty() && !self.ended && Instant::now() >= deadline {
                return Ok(Vec::new());
            }
        }
    }

    fn lag(&self) -> Option<Lag> {
        self.lag_ms.map(Lag::Millis)
    }

    fn shard_ended(&self) -> bool {
        self.ended && self.pending.is_empty()
    }
}

#[cfg(test)]
mod tests;
