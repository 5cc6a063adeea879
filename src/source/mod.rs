//! The `Source` seam: where records enter floe (docs/design.md, "Components", Source).
//!
//! A [`Source`] lists the shards of one stream (Kafka partitions of a topic, Kinesis shards of a
//! stream), resolves where a shard without a committed checkpoint starts, and opens one
//! [`ShardReader`] per leased shard. Implementations: [`kafka`] (rdkafka, manual `assign()`), [`kinesis`] (aws-sdk-kinesis,
//! GetRecords polling or enhanced fan-out with SubscribeToShard, KPL de-aggregation) and,
//! for tests, `memory` (with the `testsuite` feature).
//!
//! ```text
//!   table floe.checkpoints ──► checkpoint(S)? ──yes──► StartAt::After(checkpoint)  (after_exclusive = checkpoint)
//!                                      │
//!                                      no ──► Source::start_position(S, initial) (after_exclusive = None)
//!                                                        │
//!                                     Source::open(S, start) ──► ShardReader::next_batch ──► records, in position order
//! ```
//!
//! Invariant this seam upholds (docs/design.md, protocol steps 1 and 9): the worker always knows the
//! `after_exclusive` end of the first range it reads from a shard — the committed checkpoint, or
//! `None` for a shard with no checkpoint — and the start of a shard with no checkpoint is
//! deterministic: every worker that takes that shard starts at the same record (see
//! [`Source::start_position`]). Records come out of a reader in strictly increasing position order,
//! with no position skipped that the stream still holds.

use std::time::{Duration, Instant};

use async_trait::async_trait;

use crate::model::{Position, ShardId};

pub mod kafka;
pub mod kinesis;
#[cfg(any(test, feature = "testsuite"))]
pub mod memory;

/// One record read from a shard.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceRecord {
    /// The shard the record was read from.
    pub shard: ShardId,
    /// The record's position in its shard (Kafka: [`Position::Offset`]).
    pub position: Position,
    /// The record key (Kafka message key, Kinesis partition key), `None` when the record has none.
    pub key: Option<Vec<u8>>,
    /// The record value, exactly as stored in the stream; empty for a tombstone.
    pub payload: Vec<u8>,
    /// Whether the record is a Kafka tombstone: a null value (a delete in a compacted topic,
    /// Debezium's follow-up to a delete), as opposed to an empty one (`payload` is empty for
    /// both). The worker skips tombstones: no row, no DLQ entry, counted in
    /// `floe_tombstones_total`, passed by the checkpoint. Always `false` for Kinesis, whose
    /// records cannot be null.
    pub tombstone: bool,
    /// When the stream accepted the record, in milliseconds since the Unix epoch (Kafka: the
    /// message timestamp, CreateTime or LogAppendTime; Kinesis: ApproximateArrivalTimestamp).
    /// Falls back to the read time when the stream has no timestamp for the record.
    /// `floe_data_freshness_seconds` counts from it (`worker::reads`).
    pub arrival_ms: i64,
    /// When this worker read the record (monotonic clock): the freshness deadline counts from here.
    pub read_at: Instant,
}

/// A shard of the stream and the shards it was split or merged from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardInfo {
    /// The shard id.
    pub id: ShardId,
    /// Parent shards that must be read to `SHARD_END` before this one (Kinesis resharding,
    /// docs/design.md step 8). Always empty for Kafka.
    pub parents: Vec<ShardId>,
}

/// Where a channel starts reading a shard that has no committed checkpoint (the channel's
/// `initial_position`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InitialPosition {
    /// The oldest record the stream still holds (Kinesis `TRIM_HORIZON`, Kafka `earliest`).
    Earliest,
    /// Only records appended after the reader opens. **Not deterministic**: two workers opening
    /// the shard at different times start at different records, so a takeover before the first
    /// commit can skip records. For tools and tests; channels use [`InitialPosition::AtTimestamp`]
    /// with their activation time instead.
    Latest,
    /// The first record whose timestamp is at or after this instant, in milliseconds since the
    /// Unix epoch (a channel's activation time; docs/design.md step 9).
    AtTimestamp(i64),
}

/// Where a [`ShardReader`] starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StartAt {
    /// Resume after a committed checkpoint: the first record returned is the first one whose
    /// position is greater than this. The first batch's `after_exclusive` is this position.
    After(Position),
    /// Start at this position, inclusive (Kafka: the first offset to read). Used for shards with
    /// no checkpoint once their start is resolved; `after_exclusive` is `None`.
    At(Position),
    /// Start at the first record whose timestamp is at or after this instant (milliseconds since
    /// the Unix epoch); `after_exclusive` is `None`. Kafka resolves it to [`StartAt::At`] in
    /// [`Source::start_position`]; Kinesis passes it to `AT_TIMESTAMP`.
    AtTimestamp(i64),
    /// Start at the oldest record the stream still holds; `after_exclusive` is `None`.
    Earliest,
    /// Start after the newest record at open time; `after_exclusive` is `None`. Not deterministic
    /// (see [`InitialPosition::Latest`]).
    Latest,
}

impl StartAt {
    /// The `after_exclusive` end of the first range read from this start: the checkpoint for
    /// [`StartAt::After`], `None` (no checkpoint yet) otherwise.
    pub fn after_exclusive(&self) -> Option<&Position> {
        match self {
            StartAt::After(p) => Some(p),
            _ => None,
        }
    }
}

/// How far a reader is behind the newest record of its shard.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lag {
    /// Records not yet returned (Kafka: high watermark − next offset). Metric
    /// `floe_source_lag_records`.
    Records(u64),
    /// Milliseconds behind the newest record (Kinesis `MillisBehindLatest`).
    Millis(u64),
}

/// Errors of a [`Source`] or [`ShardReader`], named for what the caller does next.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// The stream's service cannot be reached or timed out (broker down, leader election,
    /// network): retry the same call with backoff.
    #[error("source unavailable: {message}")]
    Unavailable {
        /// What failed.
        message: String,
    },
    /// The service refused the call for a quota or throughput limit: retry with backoff.
    #[error("source throttled: {message}")]
    Throttled {
        /// What was throttled.
        message: String,
    },
    /// The topic/stream or the shard does not exist: stop reading it; shard discovery decides
    /// what happens next.
    #[error("not found: {what}")]
    NotFound {
        /// The topic, stream or shard that is missing.
        what: String,
    },
    /// The records the reader must start at are gone (removed by retention): continuing would
    /// silently skip them, so the shard stops and an operator decides.
    #[error("position lost on shard {shard}: {message}")]
    PositionLost {
        /// The shard.
        shard: ShardId,
        /// What is gone.
        message: String,
    },
    /// A position of the wrong kind for this source (a Kinesis sequence number given to Kafka,
    /// `SHARD_END` to resume from): a bug or a corrupted checkpoint; not retryable.
    #[error("invalid position on shard {shard}: {message}")]
    InvalidPosition {
        /// The shard.
        shard: ShardId,
        /// Why the position is invalid.
        message: String,
    },
    /// The source configuration is refused (a correctness setting overridden, a bad client
    /// property): fix the configuration.
    #[error("invalid source configuration: {message}")]
    Config {
        /// What is wrong.
        message: String,
    },
    /// Any other failure of the client (authorization, fatal client error): not retryable.
    #[error("source failed: {message}")]
    Fatal {
        /// What failed.
        message: String,
    },
}

impl SourceError {
    /// Whether the same call may succeed if retried after a backoff.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            SourceError::Unavailable { .. } | SourceError::Throttled { .. }
        )
    }
}

/// A stream of shards (a Kafka topic, a Kinesis stream).
#[async_trait]
pub trait Source: Send + Sync {
    /// Lists the shards the stream has now. Re-reads the service's metadata on every call, so
    /// partitions added to a Kafka topic appear on the next call.
    async fn list_shards(&self) -> Result<Vec<ShardInfo>, SourceError>;

    /// Resolves where a shard with **no committed checkpoint** starts, from the channel's
    /// initial position. Deterministic for [`InitialPosition::Earliest`] (the stream's beginning)
    /// and [`InitialPosition::AtTimestamp`] (the first record at or after the instant — every
    /// worker resolving it finds the same record, as long as record timestamps grow with
    /// positions); see [`InitialPosition::Latest`] for the exception. The returned start has
    /// `after_exclusive() == None`.
    async fn start_position(
        &self,
        shard: &ShardId,
        initial: &InitialPosition,
    ) -> Result<StartAt, SourceError>;

    /// Opens a reader on `shard` starting at `start`.
    async fn open(
        &self,
        shard: &ShardId,
        start: StartAt,
    ) -> Result<Box<dyn ShardReader>, SourceError>;

    /// Checks that the record at a committed `checkpoint` of `shard` can still be the record
    /// that was delivered: it was read before the commit that recorded it, so it cannot be
    /// newer than `committed_by_ms` (an instant at or after that commit, epoch ms) by more than
    /// the clock skew a source allows. A newer record means the shard's log is another one — a
    /// Kafka topic deleted and recreated under the same name and grown past the checkpoint —
    /// and resuming there would deliver records of the new log from an offset of the old one.
    /// Sources that cannot tell accept every checkpoint (the default).
    ///
    /// Errors: [`SourceError::PositionLost`] for a checkpoint of another log; retryable errors
    /// of the lookup.
    async fn check_checkpoint(
        &self,
        _shard: &ShardId,
        _checkpoint: &Position,
        _committed_by_ms: i64,
    ) -> Result<(), SourceError> {
        Ok(())
    }

    /// [`Source::check_checkpoint`] of several shards at once, as a worker taking many shards
    /// needs: sources that can look many up in one request override it (Kafka: one probe
    /// assignment). The default checks them one after another.
    ///
    /// Errors: the first shard's error, as [`Source::check_checkpoint`].
    async fn check_checkpoints(
        &self,
        checks: &[(ShardId, Position)],
        committed_by_ms: i64,
    ) -> Result<(), SourceError> {
        for (shard, checkpoint) in checks {
            self.check_checkpoint(shard, checkpoint, committed_by_ms)
                .await?;
        }
        Ok(())
    }

    /// Whether a shard this source stops listing is gone for good, finished or not, so that
    /// shard discovery deletes its lease row (releasing it): `true` for a Kafka channel reading
    /// several topics, whose deleted topics leave the listing. `false` by default: a Kinesis
    /// shard leaves only once finished, a topic's partitions never leave it.
    fn unlisted_shards_are_gone(&self) -> bool {
        false
    }
}

/// Reads one shard, in position order.
#[async_trait]
pub trait ShardReader: Send {
    /// Returns the next records, at most `max_records` (≥ 1), in strictly increasing position
    /// order, continuing exactly where the previous batch stopped. Waits up to `wait` for the
    /// first record, then returns what is available without waiting more; an empty batch means
    /// nothing arrived within `wait`. Retryable errors ([`SourceError::is_retryable`]) leave the
    /// reader usable: call again after a backoff.
    async fn next_batch(
        &mut self,
        max_records: usize,
        wait: Duration,
    ) -> Result<Vec<SourceRecord>, SourceError>;

    /// How far the reader is behind the newest record of its shard, as last observed (no I/O);
    /// `None` until known.
    fn lag(&self) -> Option<Lag>;

    /// `true` once every record of a closed shard has been returned (Kinesis, after a split or
    /// merge): the shard's checkpoint may then become `SHARD_END`. Always `false` for Kafka.
    fn shard_ended(&self) -> bool {
        false
    }
}

/// Where the worker starts a shard it just leased: after the committed checkpoint taken from the
/// table when there is one, else the channel's initial position resolved by the source.
///
/// Errors: those of [`Source::start_position`].
pub async fn resolve_start(
    source: &dyn Source,
    shard: &ShardId,
    checkpoint: Option<&Position>,
    initial: &InitialPosition,
) -> Result<StartAt, SourceError> {
    match checkpoint {
        Some(p) => Ok(StartAt::After(p.clone())),
        None => source.start_position(shard, initial).await,
    }
}
