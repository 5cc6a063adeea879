//! The seam between the delivery protocol and where batches go. The worker and the committer
//! ([`crate::worker`], [`crate::commit`]) run the protocol — leases, ranges, pending batches, the
//! round plan — and name no destination; each destination implements both sides:
//!
//! ```text
//!   worker ──BatchSink──> buffer records (per shard), write a batch of some shards, drop one
//!                         shard's records, undo a batch, read committed checkpoints
//!   committer ──CommitTarget::load──> LoadedTarget: epoch, checkpoints, commit, publish, discard
//!
//!              | Iceberg (crate::iceberg)                 | Raw S3 (crate::raw)
//!   batch      | Parquet data files + staged DLQ object   | staged objects, one or more per shard
//!   checkpoints| table property floe.checkpoints          | lease store item (lease::Delivered)
//!   commit     | fenced Iceberg transaction               | compare-and-swap of that item
//!   publish    | the staged DLQ object                    | copy each object to its key
//! ```
//!
//! Errors are shaped by what the caller does next ([`SinkError`], [`CommitError`]), mapped where
//! the dependency is called.

use std::collections::{BTreeSet, HashSet};

use async_trait::async_trait;
use uuid::Uuid;

use crate::convert::DlqReason;
use crate::dlq::DlqEntry;
use crate::lease::LeaseError;
use crate::model::{BatchFiles, Checkpoints, PendingBatch, Position, ShardId};
use crate::source::SourceRecord;

/// A boxed error source, kept typed for logs (`{:#}` shows the chain).
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Error of a destination's worker side, shaped by what the worker does next.
#[derive(Debug, thiserror::Error)]
pub enum SinkError {
    /// A dependency (catalog, storage, S3, the schema registry) failed: restart the loop with
    /// backoff from the committed checkpoints; nothing is lost.
    #[error("{what}: {source}")]
    Unavailable {
        /// What was being done (`load table`, `stage dlq`, `stage raw objects`).
        what: &'static str,
        /// The dependency's error.
        #[source]
        source: BoxError,
    },
    /// The channel's table was dropped or replaced under its name: the channel is suspended.
    #[error("{0}")]
    TableGone(String),
    /// The table does not fit this worker's channel configuration: this worker stops.
    #[error("{0}")]
    Incompatible(String),
}

impl SinkError {
    /// [`SinkError::Unavailable`] of `source` while doing `what`.
    pub fn unavailable(what: &'static str, source: impl Into<BoxError>) -> Self {
        SinkError::Unavailable {
            what,
            source: source.into(),
        }
    }

    /// Maps an iceberg error by kind: a missing table or namespace means the table is gone,
    /// anything else is a failing catalog or storage.
    pub fn from_iceberg(what: &'static str, e: iceberg::Error) -> Self {
        match e.kind() {
            iceberg::ErrorKind::TableNotFound | iceberg::ErrorKind::NamespaceNotFound => {
                SinkError::TableGone(e.to_string())
            }
            _ => SinkError::unavailable(what, e),
        }
    }
}

/// What [`BatchSink::push`] did with one record.
#[derive(Debug)]
pub enum Pushed {
    /// The record, at this position, is in the buffer.
    Buffered(Position),
    /// The record, at this position, is another table's (`table = "{route}"`,
    /// docs/routing.md): no row and no DLQ entry here, but the batch's range covers it, so
    /// the checkpoint moves past it.
    Skipped(Position),
    /// The record cannot be delivered: it goes to the DLQ with `reason` (the record is handed
    /// back to build the DLQ entry).
    Rejected {
        /// Why.
        reason: DlqReason,
        /// The record.
        record: SourceRecord,
    },
}

/// A batch written by a sink and not yet handed off.
#[derive(Debug)]
pub struct Written {
    /// What the batch wrote, as the pending batch carries it.
    pub files: BatchFiles,
    /// Size of each file or object, bytes (for `floe_data_file_size_bytes`).
    pub sizes: Vec<u64>,
    /// Rows (records) written.
    pub num_rows: u64,
    /// Bytes written.
    pub num_bytes: u64,
}

/// The worker's side of a destination: buffers records and writes batches.
#[async_trait]
pub trait BatchSink: Send {
    /// Bytes buffered (part of the worker's memory bound, `buffer_size`).
    fn buffered_bytes(&self) -> usize;

    /// The committed checkpoints, read from where the destination keeps them (never the lease
    /// hints). Iceberg also checks the table is still the one the sink opened.
    ///
    /// Errors: [`SinkError::TableGone`] for a replaced or dropped table; `Unavailable`.
    async fn committed_checkpoints(&mut self) -> Result<Checkpoints, SinkError>;

    /// An instant (epoch ms) at or after the commit of every checkpoint the last
    /// [`BatchSink::committed_checkpoints`] returned (the table's current snapshot time), for
    /// [`crate::source::Source::check_checkpoint`]; `None` when unknown.
    fn checkpoints_committed_by_ms(&self) -> Option<i64> {
        None
    }

    /// Buffers `records` of `shard` (one read batch, in order); returns what happened to each,
    /// in the same order. One call per read batch keeps the boxed future off the per-record path.
    ///
    /// Errors: `Unavailable` when a dependency needed to read a record failed (a schema
    /// registry lookup, Glue or Confluent): that record is not dead-lettered, the loop restarts and reads it again.
    async fn push(
        &mut self,
        shard: &ShardId,
        records: Vec<SourceRecord>,
    ) -> Result<Vec<Pushed>, SinkError>;

    /// Drops everything buffered.
    fn clear(&mut self);

    /// Whether Kafka tombstones are pushed to this sink (an `"upsert"` envelope: each deletes
    /// the row of its message key); otherwise the worker skips them (counted) before pushing.
    fn takes_tombstones(&self) -> bool {
        false
    }

    /// Drops the records of `shard` buffered so far (its lease was lost, or its reader
    /// rewinds); the other shards' records stay buffered.
    fn drop_shard(&mut self, shard: &ShardId);

    /// Writes the records of `shards` buffered (and `dlq_entries`, where the destination has a
    /// DLQ) as batch `batch_id`; the other shards' records stay buffered. On error nothing stays
    /// written.
    async fn write(
        &mut self,
        batch_id: Uuid,
        shards: &BTreeSet<ShardId>,
        dlq_entries: &[DlqEntry],
    ) -> Result<Written, SinkError>;

    /// Deletes what [`BatchSink::write`] wrote for a batch that was not handed off (best effort).
    async fn undo(&mut self, files: &BatchFiles);
}

/// Errors of a commit round, shaped by what the committer does next.
#[derive(Debug, thiserror::Error)]
pub enum CommitError {
    /// Another commit landed after validation: re-plan on the fresh table.
    #[error("commit conflict: {0}")]
    Conflict(String),
    /// The table carries a newer committer epoch: this committer is stale and must stop.
    #[error("committer is fenced: table epoch {table_epoch} > own lease counter {own}")]
    Fenced {
        /// Epoch in the table.
        table_epoch: u64,
        /// This committer's lease counter.
        own: u64,
    },
    /// The outcome could not be determined even after reloading the table; retry the round.
    #[error("commit outcome unknown: {0}")]
    OutcomeUnknown(String),
    /// The table cannot be written (schema or data files do not fit it, a batch of another
    /// destination kind, unreadable `floe.*` state).
    #[error("table incompatible: {0}")]
    Incompatible(String),
    /// The catalog, storage, S3 or the DLQ failed; retry with backoff.
    #[error("{what}: {source}")]
    Unavailable {
        /// What was being done (`load table`, `publish dlq object`).
        what: &'static str,
        /// The dependency's error.
        #[source]
        source: BoxError,
    },
    /// The lease store failed.
    #[error("lease store: {0}")]
    Lease(#[from] LeaseError),
}

impl CommitError {
    /// [`CommitError::Unavailable`] of `source` while doing `what`.
    pub fn unavailable(what: &'static str, source: impl Into<BoxError>) -> Self {
        CommitError::Unavailable {
            what,
            source: source.into(),
        }
    }

    /// The `outcome` label this error is counted under in `floe_commits_total`: `conflict`,
    /// `fenced`, `unknown` (outcome unknown, reconciled by reloading the table) or `rejected`.
    pub fn outcome(&self) -> &'static str {
        match self {
            CommitError::Conflict(_) => "conflict",
            CommitError::Fenced { .. } => "fenced",
            CommitError::OutcomeUnknown(_) => "unknown",
            _ => "rejected",
        }
    }

    /// Whether retrying the round later may succeed: not for a fenced committer, an
    /// incompatible table, or a lease store that refuses for good ([`LeaseError::is_retryable`]).
    pub fn is_retryable(&self) -> bool {
        match self {
            CommitError::Fenced { .. } | CommitError::Incompatible(_) => false,
            CommitError::Lease(e) => e.is_retryable(),
            _ => true,
        }
    }
}

/// The committer's side of a destination.
#[async_trait]
pub trait CommitTarget: Send + Sync {
    /// What log lines name as the destination (`ns.table`, `s3://bucket`).
    fn name(&self) -> String;

    /// Loads the committed state this round plans against.
    ///
    /// Errors: `Unavailable`; a table replaced under its name is `Unavailable` with the reason
    /// (nothing is committed into it).
    async fn load(&self) -> Result<Box<dyn LoadedTarget + '_>, CommitError>;

    /// The age beyond which a pending batch is never accepted (its batch id's UUIDv7 time):
    /// half the orphan sweep's safety age where the destination sweeps (a batch handed off that
    /// late may name swept files; it is rejected and its records read again). `None`: any age.
    fn max_batch_age(&self) -> Option<std::time::Duration> {
        None
    }

    /// Table maintenance after a round, by the committer of lease counter `epoch`: only where
    /// the destination carries that epoch, and never failing the round (the caller logs the
    /// error); `batches` lists the pending batches whose files the orphan sweep spares.
    /// Default: nothing to do.
    ///
    /// Errors: `Unavailable`.
    async fn maintain(
        &self,
        epoch: u64,
        batches: &dyn crate::lease::BatchStore,
    ) -> Result<(), CommitError> {
        let _ = (epoch, batches);
        Ok(())
    }
}

/// A shared target is a target (`floe maintain` keeps a handle on the one its committer uses).
#[async_trait]
impl<T: CommitTarget + ?Sized> CommitTarget for std::sync::Arc<T> {
    fn name(&self) -> String {
        (**self).name()
    }
    async fn load(&self) -> Result<Box<dyn LoadedTarget + '_>, CommitError> {
        (**self).load().await
    }
    fn max_batch_age(&self) -> Option<std::time::Duration> {
        (**self).max_batch_age()
    }
    async fn maintain(
        &self,
        epoch: u64,
        batches: &dyn crate::lease::BatchStore,
    ) -> Result<(), CommitError> {
        (**self).maintain(epoch, batches).await
    }
}

/// One round's view of the destination, as loaded.
#[async_trait]
pub trait LoadedTarget: Send + Sync {
    /// The committer epoch the destination carries (0 before the first commit).
    fn epoch(&self) -> u64;

    /// The committed checkpoints.
    ///
    /// Errors: [`CommitError::Incompatible`] when the stored checkpoints cannot be read.
    fn checkpoints(&self) -> Result<Checkpoints, CommitError>;

    /// Ids of the batches committed but possibly not finished (their pending entry may still
    /// exist): the plan recovers these instead of rejecting them.
    fn committed_batch_ids(&self) -> HashSet<Uuid>;

    /// Commits `accepted` (and, where the destination records it, keeps `recovered` listed as
    /// committed) with the new `checkpoints` and `epoch`, conditional on the state loaded.
    /// Returns the new snapshot id, if the destination has snapshots.
    ///
    /// Errors: `Conflict` (the state changed since load: re-plan), `OutcomeUnknown`,
    /// `Incompatible`, `Unavailable`.
    async fn commit(
        &self,
        accepted: &[&PendingBatch],
        recovered: &[&PendingBatch],
        checkpoints: &Checkpoints,
        epoch: u64,
        commit_id: Uuid,
    ) -> Result<Option<i64>, CommitError>;

    /// Of the batches the plan found dead, those the destination shows committed anyway (an
    /// Iceberg batch whose snapshot was expired but whose files the table still references).
    ///
    /// Errors: `Unavailable` (nothing is deleted then).
    async fn committed_anyway(&self, dead: &[&PendingBatch]) -> Result<HashSet<Uuid>, CommitError>;

    /// Publishes what a committed batch staged (DLQ object, raw objects).
    ///
    /// Errors: `Unavailable` (the round is retried; publishing is idempotent).
    async fn publish(&self, batch: &PendingBatch) -> Result<(), CommitError>;

    /// Deletes what a rejected batch wrote (best effort; logged).
    async fn discard(&self, batch: &PendingBatch);
}
