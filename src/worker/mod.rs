//! The worker side of a channel: read the leased shards, convert records into one columnar
//! buffer, and when the oldest record is half `data_freshness` old (or the buffer is full) write the data files,
//! stage the DLQ entries and hand the batch to the committer (docs/design.md, protocol steps 1, 2
//! and 7).
//!
//! ```text
//!  lease taken ──> start after checkpoint(S) from the TABLE (never the lease store)
//!  read ──> convert ──> buffer ──(age >= freshness / 2 | bytes >= buffer_size)──> flush
//!  flush: data files + staged DLQ + PendingBatch{ per shard (after, last], lease counter }
//!         next batch of S starts after `last` (batches chain)
//!  reconcile: batch committed (checkpoint >= last) -> forget it
//!             batch gone but not committed (rejected) -> the shards it covers (and those of
//!             later batches chained on them) drop their buffered rows and are read again
//!             after the rejected range; the other shards go on
//!  lease lost ──> drop the lost shard's buffered rows, DLQ entries and reader at once; the
//!                 other shards go on. A batch in flight covering it is doomed (stale lease
//!                 counter): only the shards of doomed batches are read again
//!  asked to hand a shard over (HeldLeases::handing_off) ──> stop reading it, hand its buffered
//!                 rows off in a batch of their own, answer "ready" once every batch of it is
//!                 committed; the lease manager then writes the new owner (docs/design.md,
//!                 "Graceful hand-off")
//!  shard ended (closed Kinesis shard, every record read) ──> hand off at once a batch whose range
//!                 for it is (after, SHARD_END] (no rows needed); stop reading it, keep its lease
//!                 (the lease manager never counts a finished shard)
//! ```
//!
//! Invariant: a worker never hands off a range that does not continue its own previous batch
//! or the table's checkpoint, and never hands off a shard it no longer holds.

use futures::StreamExt;
use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

mod progress;
mod reads;

use reads::accepted_at;
pub use reads::{ReadHistory, RereadCause};

use crate::destination::{BatchSink, BoxError, Pushed, SinkError};
use crate::dlq::DlqEntry;
use crate::iceberg::sink::IcebergSink;
use crate::iceberg::IcebergIo;
use crate::lease::manager::HandOffReplies;
use crate::lease::{BatchStore, HeldLeases, LeaseError};
use crate::model::{Checkpoints, PendingBatch, Position, ShardId};
use crate::raw::sink::RawSink;
use crate::raw::RawIo;
use crate::source::{resolve_start, InitialPosition, ShardReader, Source, SourceError};
use crate::telemetry;
use crate::time::{now_ms, rfc3339_ms};
use progress::Progress;

/// Settings of one channel's worker loop.
#[derive(Debug, Clone)]
pub struct WorkerSettings {
    /// Channel name.
    pub channel: String,
    /// This worker's id (recorded in pending batches).
    pub worker_id: String,
    /// Topic or stream name, recorded in DLQ entries.
    pub source_name: String,
    /// Label of the schema version recorded in DLQ entries.
    pub schema_version: String,
    /// The freshness bound: a batch is handed off when its oldest record is half this old
    /// ([`hand_off_age`]), the committer commits at most every other half.
    pub data_freshness: Duration,
    /// Hand off a batch when the buffered rows reach this many bytes (memory bound).
    pub buffer_size: u64,
    /// Records larger than this go to the DLQ as `RECORD_TOO_LARGE`, bytes.
    pub max_record_size: u64,
    /// Keep the payload in DLQ entries.
    pub include_payload: bool,
    /// Where a shard without a checkpoint starts.
    pub initial_position: InitialPosition,
}

/// Errors that stop a worker loop, shaped by what the supervisor does next: restart it with
/// backoff (`Unavailable`), suspend the channel (`TableGone`), or stop this worker
/// (`Incompatible`, `Refused`). Each dependency's error is mapped where it is called.
#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    /// A dependency (source, lease store, catalog, storage, DLQ, schema registry) failed:
    /// restart the loop with backoff from the committed checkpoints; nothing is lost (a record
    /// whose GSR schema version could not be looked up is not dead-lettered, cases GSR-39).
    #[error("{what}: {source}")]
    Unavailable {
        /// What failed (`source`, `lease store`, `load table`, `stage dlq entries`).
        what: &'static str,
        /// The dependency's error.
        #[source]
        source: BoxError,
    },
    /// The channel's table was dropped or replaced: the channel is suspended for every worker.
    #[error("{0}")]
    TableGone(String),
    /// The table does not fit this worker's channel configuration (say, a schema edited on one
    /// machine): this worker stops.
    #[error("{0}")]
    Incompatible(String),
    /// A dependency refuses for good (the source's position was lost to retention, a bad
    /// configuration, a lease store that refuses): an operator must act.
    #[error("{what}: {source}")]
    Refused {
        /// What refused (`source`, `lease store`).
        what: &'static str,
        /// The dependency's error.
        #[source]
        source: BoxError,
    },
}

impl WorkerError {
    /// Whether restarting the loop may help (only [`WorkerError::Unavailable`]).
    pub fn is_retryable(&self) -> bool {
        matches!(self, WorkerError::Unavailable { .. })
    }

    /// Whether the channel's table is gone (dropped or replaced): the channel is suspended for
    /// every worker, unlike a mismatch between this worker's configuration and the table, which
    /// stops only this worker.
    pub fn is_table_gone(&self) -> bool {
        matches!(self, WorkerError::TableGone(_))
    }
}

impl From<SinkError> for WorkerError {
    fn from(e: SinkError) -> Self {
        match e {
            SinkError::Unavailable { what, source } => WorkerError::Unavailable { what, source },
            SinkError::TableGone(m) => WorkerError::TableGone(m),
            SinkError::Incompatible(m) => WorkerError::Incompatible(m),
        }
    }
}

impl WorkerError {
    /// `Unavailable` when the dependency's own error says a retry may help, else `Refused`.
    fn of(what: &'static str, retryable: bool, source: BoxError) -> Self {
        if retryable {
            WorkerError::Unavailable { what, source }
        } else {
            WorkerError::Refused { what, source }
        }
    }
}

impl From<SourceError> for WorkerError {
    fn from(e: SourceError) -> Self {
        WorkerError::of("source", e.is_retryable(), Box::new(e))
    }
}

impl From<LeaseError> for WorkerError {
    fn from(e: LeaseError) -> Self {
        WorkerError::of("lease store", e.is_retryable(), Box::new(e))
    }
}

/// The I/O side of a held shard; its protocol state is in [`Progress`].
struct ShardReaderState {
    reader: Box<dyn ShardReader>,
    /// When a retryable read error of this shard was last logged.
    read_error_logged_at: Option<Instant>,
}

/// First wait before retrying a failed hand-off of a batch to the lease store; doubled at
/// every failure up to [`HANDOFF_RETRY_MAX`].
const HANDOFF_RETRY_FIRST: Duration = Duration::from_millis(250);
/// Longest wait between two hand-off attempts.
const HANDOFF_RETRY_MAX: Duration = Duration::from_secs(4);
/// How long a hand-off is retried at most (while its leases are held) before the worker loop
/// restarts with backoff from the committed checkpoints.
const HANDOFF_RETRY_BOUND: Duration = Duration::from_secs(120);

/// Shards a worker opens at once when it takes several (a checkpoint check and a reader each).
const CONCURRENT_OPENS: usize = 16;

/// At most one log line per this interval for the retryable read errors of one shard.
const READ_ERROR_LOG_INTERVAL: Duration = Duration::from_secs(30);

/// A reader of `id` after `after` (the table's checkpoint or the last handed-off position), or
/// from the channel's initial position; nothing to read after `SHARD_END`.
async fn open_reader(
    channel: &str,
    source: &dyn Source,
    initial: &InitialPosition,
    id: &ShardId,
    after: Option<&Position>,
) -> Result<Box<dyn ShardReader>, WorkerError> {
    if after == Some(&Position::ShardEnd) {
        return Ok(Box::new(FinishedShard));
    }
    let opened = async {
        let start = resolve_start(source, id, after, initial).await?;
        source.open(id, start).await
    };
    match opened.await {
        Ok(reader) => Ok(reader),
        Err(SourceError::NotFound { what }) if shard_left_the_stream(source, id).await => {
            // A closed Kinesis shard whose records are all past retention leaves ListShards and
            // cannot be read any more. Its unread records are gone whatever floe does; stopping
            // here would stall its children until they expire too. So the shard ends (its
            // checkpoint becomes SHARD_END with no rows), loudly.
            tracing::error!(channel = %channel, shard = %id, checkpoint = ?after, error = %what, "shard gone from the stream (past retention) before its checkpoint reached SHARD_END: its records after the checkpoint expired unread; ending it so that its children are read (raise the stream's retention above the channel's longest outage)");
            telemetry::record_shard_expired(channel);
            Ok(Box::new(FinishedShard))
        }
        Err(e) => Err(e.into()),
    }
}

/// Whether `id` is absent from a successful listing of the stream's shards: a `NotFound` for the
/// whole stream (deleted, or a wrong name) or a failed listing is not a gone shard.
async fn shard_left_the_stream(source: &dyn Source, id: &ShardId) -> bool {
    match source.list_shards().await {
        Ok(shards) => !shards.is_empty() && shards.iter().all(|s| s.id != *id),
        Err(_) => false,
    }
}

/// The reader of a shard whose checkpoint is already `SHARD_END`: nothing left to read.
struct FinishedShard;

#[async_trait::async_trait]
impl ShardReader for FinishedShard {
    async fn next_batch(
        &mut self,
        _max_records: usize,
        _wait: Duration,
    ) -> Result<Vec<crate::source::SourceRecord>, crate::source::SourceError> {
        Ok(Vec::new())
    }

    fn lag(&self) -> Option<crate::source::Lag> {
        None
    }

    fn shard_ended(&self) -> bool {
        true
    }
}

/// What a channel's loops share: where records come from and where they go.
#[derive(Clone)]
pub struct ChannelIo {
    /// The stream the channel reads.
    pub source: Arc<dyn Source>,
    /// Where the channel delivers.
    pub destination: DestinationIo,
}

impl ChannelIo {
    /// A channel delivering to an Iceberg table.
    pub fn iceberg(source: Arc<dyn Source>, iceberg: IcebergIo) -> Self {
        ChannelIo {
            source,
            destination: DestinationIo::Iceberg(iceberg),
        }
    }
}

/// The age of its oldest record at which a worker hands a batch off: half the freshness bound.
/// The committer commits at most once per the other half ([`commit_spacing`]), gathering every
/// worker's batches into one commit, so a record is committed within `data_freshness` of being
/// read and a table gets about `2 × 3600 / data_freshness` snapshots an hour however many
/// workers a channel has (docs/design.md, protocol step 2).
pub fn hand_off_age(data_freshness: Duration) -> Duration {
    data_freshness / 2
}

/// The committer's wait after a commit before the next one: half the freshness bound (see
/// [`hand_off_age`]).
pub fn commit_spacing(data_freshness: Duration) -> Duration {
    data_freshness / 2
}

/// The committer's wait after an idle round (nothing pending, and no round had work for
/// `data_freshness`: a table between its workers' batches still polls every second) that
/// waited `previous` (`None`: the round before it was not idle): 1 s, doubling with each idle
/// round up to a quarter of `data_freshness` (at least 1 s). Each idle round lists the pending batches once, so an idle
/// table costs the lease store one read per that cap, not one per second (1,000 tables polled
/// about 1,000 listings a second; issue 43). A batch handed off by a worker on the same process
/// wakes the committer at once; one from another worker waits at most the cap, so a record is
/// still committed within about `hand_off_age + cap` = ¾ of `data_freshness` of being read.
pub fn idle_poll_after(previous: Option<Duration>, data_freshness: Duration) -> Duration {
    let cap = (data_freshness / 4).max(IDLE_POLL_FIRST);
    previous.map_or(IDLE_POLL_FIRST, |p| (p * 2).clamp(IDLE_POLL_FIRST, cap))
}

/// The committer's first wait after an idle round ([`idle_poll_after`]).
pub const IDLE_POLL_FIRST: Duration = Duration::from_secs(1);

/// A channel's destination, as its loops are given it ([`crate::destination`] says what each
/// kind does).
// One per channel, built once at start: the size difference costs nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Clone)]
pub enum DestinationIo {
    /// An Iceberg table.
    Iceberg(IcebergIo),
    /// Raw objects in a general-purpose S3 bucket.
    Raw(RawIo),
}

impl DestinationIo {
    /// Opens the worker's side of the destination.
    ///
    /// Errors: see [`BatchSink`]'s implementations.
    async fn open_sink(
        &self,
        settings: &WorkerSettings,
        batches: &Arc<dyn BatchStore>,
    ) -> Result<Box<dyn BatchSink>, SinkError> {
        Ok(match self {
            DestinationIo::Iceberg(io) => Box::new(
                IcebergSink::open(
                    &settings.channel,
                    io.clone(),
                    settings.max_record_size as usize,
                )
                .await?,
            ),
            DestinationIo::Raw(io) => Box::new(RawSink::new(
                &settings.channel,
                &settings.source_name,
                io.clone(),
                batches.clone(),
            )),
        })
    }
}

/// One channel's worker loop.
pub struct ChannelWorker {
    settings: WorkerSettings,
    io: ChannelIo,
    batches: Arc<dyn BatchStore>,
    held: watch::Receiver<HeldLeases>,
    sink: Option<Box<dyn BatchSink>>,
    dlq_entries: Vec<DlqEntry>,
    /// [`DlqEntry::approx_bytes`] of `dlq_entries`: part of the buffer (back-pressure).
    dlq_bytes: usize,
    /// Per held shard: where its next batch starts, what is buffered, what is in flight.
    progress: Progress,
    readers: BTreeMap<ShardId, ShardReaderState>,
    /// `data_freshness` of the configuration, before any `floe channel update` override.
    configured_freshness: Option<Duration>,
    /// Fraction of a second of back-pressure not yet counted.
    backpressure_carry: Duration,
    /// What this process read of each shard, carried over from a failed loop (the freshness
    /// and the re-read count).
    history: ReadHistory,
    /// The shards the lease manager last asked this worker to hand over.
    handing_off: BTreeSet<ShardId>,
    /// Where this worker says which of them are ready to move; `None`: it never says, and the
    /// lease manager moves them when its wait runs out.
    handoff_replies: Option<HandOffReplies>,
    /// Signalled after each batch this worker hands off, to wake its channel's committer on
    /// this process at once when it holds the committer lease ([`ChannelWorker::with_batch_signal`]).
    batch_signal: Option<Arc<tokio::sync::Notify>>,
    /// When this worker last loaded the table (for its checkpoints).
    last_table_load: Option<Instant>,
    /// Whether the last listing of the pending batches failed (lease store unreachable): one
    /// log line per outage.
    pending_unreachable: bool,
}

/// How long batches may wait in the pending set before a worker loads the table anyway (at
/// least `data_freshness`): a batch that is not committed for that long may be waiting on a
/// table that was dropped or replaced, which only a load finds (and which suspends the channel).
const STUCK_BATCH_CHECK: Duration = Duration::from_secs(30);

impl ChannelWorker {
    /// A worker loop for one channel.
    pub fn new(
        settings: WorkerSettings,
        io: ChannelIo,
        batches: Arc<dyn BatchStore>,
        held: watch::Receiver<HeldLeases>,
    ) -> Self {
        for cause in RereadCause::ALL {
            telemetry::record_reread(&settings.channel, cause.as_str(), 0);
        }
        ChannelWorker {
            settings,
            io,
            batches,
            held,
            sink: None,
            dlq_entries: Vec::new(),
            dlq_bytes: 0,
            progress: Progress::default(),
            readers: BTreeMap::new(),
            configured_freshness: None,
            backpressure_carry: Duration::ZERO,
            history: ReadHistory::default(),
            handing_off: BTreeSet::new(),
            handoff_replies: None,
            batch_signal: None,
            last_table_load: None,
            pending_unreachable: false,
        }
    }

    /// Carries what a failed loop read ([`ChannelWorker::take_history`]) into this one, so
    /// `floe_data_freshness_seconds` keeps counting from a record's timestamp (or first read)
    /// while the loop restarts, and what is read again is counted as re-read (cause `restart`).
    pub fn with_history(mut self, mut history: ReadHistory) -> Self {
        history.new_loop();
        self.history = history;
        self
    }

    /// Answers the lease manager's graceful hand-offs through `replies`
    /// ([`crate::lease::manager::LeaseManager::handoff_replies`]).
    pub fn with_handoff_replies(mut self, replies: HandOffReplies) -> Self {
        self.handoff_replies = Some(replies);
        self
    }

    /// Signals `signal` after each batch handed off: the channel's committer loop on this
    /// process waits on it between idle rounds ([`idle_poll_after`]).
    pub fn with_batch_signal(mut self, signal: Arc<tokio::sync::Notify>) -> Self {
        self.batch_signal = Some(signal);
        self
    }

    /// What this loop read, for the next loop ([`ChannelWorker::with_history`]).
    pub fn take_history(&mut self) -> ReadHistory {
        std::mem::take(&mut self.history)
    }

    /// When the oldest record of a held shard not yet committed was accepted by the stream (its
    /// timestamp, or its first read by this process if earlier; buffered, in flight, or read
    /// again since); `None` when there is none.
    pub fn oldest_pending(&self) -> Option<Instant> {
        let held = self.held.borrow();
        self.history
            .oldest(|id| self.progress.holds(id) || held.shards.contains_key(id))
    }

    /// Runs until `stop` is cancelled, then flushes what it buffered and waits up to `drain`
    /// for its batches to be committed.
    ///
    /// Errors: a failing dependency; the caller restarts the loop with backoff (nothing is
    /// lost: the next loop starts from the table's checkpoints).
    pub async fn run(
        &mut self,
        stop: CancellationToken,
        drain: Duration,
    ) -> Result<(), WorkerError> {
        let result = self.run_loop(stop, drain).await;
        if result.is_err() {
            // The freshness of what this loop read stays visible while it restarts.
            self.publish_gauges();
        }
        result
    }

    async fn run_loop(
        &mut self,
        stop: CancellationToken,
        drain: Duration,
    ) -> Result<(), WorkerError> {
        self.open_sink().await?;
        let mut last_reconcile = Instant::now();
        let mut last_settings: Option<Instant> = None;
        while !stop.is_cancelled() {
            if last_settings.is_none_or(|t| t.elapsed() >= crate::lease::STATE_POLL_INTERVAL) {
                self.apply_channel_settings().await;
                last_settings = Some(Instant::now());
            }
            self.sync_leases(true).await?;
            self.hand_off_moving().await?;
            // Nothing to read (no shard, or only finished ones or ones moving away): wait for a
            // lease change.
            if self.nothing_to_read() && !self.flush_due() {
                tokio::select! {
                    _ = stop.cancelled() => break,
                    _ = self.held.changed() => {},
                    _ = tokio::time::sleep(Duration::from_millis(500)) => {},
                }
                self.reconcile().await?;
                self.publish_gauges();
                continue;
            }
            self.poll_shards().await?;
            if self.flush_due() {
                let paused = self.buffer_full().then(Instant::now);
                self.flush(|_| true).await?;
                if let Some(paused) = paused {
                    // Reading stood still from the full buffer until the flush made room.
                    telemetry::record_backpressure(
                        &self.settings.channel,
                        &mut self.backpressure_carry,
                        paused.elapsed(),
                    );
                }
            }
            if last_reconcile.elapsed() >= Duration::from_secs(1) {
                self.reconcile().await?;
                last_reconcile = Instant::now();
            }
            self.publish_gauges();
        }
        // Drain: hand off what is buffered (shards still held only; no new ones), then wait
        // for the committer.
        self.sync_leases(false).await?;
        if self.progress.has_buffered() {
            self.flush(|_| true).await?;
        }
        let deadline = Instant::now() + drain;
        while !self.progress.in_flight().is_empty() && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(200)).await;
            self.reconcile().await?;
            // Shards asked to move whose batches are committed may go at once.
            self.sync_leases(false).await?;
            self.answer_handoffs();
        }
        if !self.progress.in_flight().is_empty() {
            tracing::warn!(channel = %self.settings.channel, pending = self.progress.in_flight().len(), "drain deadline passed with batches not yet committed; the next owner re-reads them");
        }
        Ok(())
    }

    async fn open_sink(&mut self) -> Result<(), WorkerError> {
        self.last_table_load = Some(Instant::now());
        self.sink = Some(
            self.io
                .destination
                .open_sink(&self.settings, &self.batches)
                .await?,
        );
        Ok(())
    }

    /// The committed checkpoints, from where the destination keeps them (never the lease
    /// hints).
    async fn table_checkpoints(&mut self) -> Result<Checkpoints, WorkerError> {
        self.last_table_load = Some(Instant::now());
        Ok(self
            .sink
            .as_mut()
            .expect("sink open")
            .committed_checkpoints()
            .await?)
    }

    /// The shards this worker holds now, with their lease counters.
    fn held_counters(&self) -> BTreeMap<ShardId, u64> {
        self.held
            .borrow()
            .shards
            .iter()
            .map(|(id, l)| (id.clone(), l.lease_counter))
            .collect()
    }

    /// Opens readers for newly held shards, drops lost ones: a lost shard's buffered rows, DLQ
    /// entries and reader go; the other shards keep theirs, unless a batch in flight covering
    /// the lost shard dooms batches of theirs ([`Progress::doom`]).
    async fn sync_leases(&mut self, open_new: bool) -> Result<(), WorkerError> {
        self.held.borrow_and_update();
        let held = self.held_counters();
        let lost = self.progress.lost(&held);
        if !lost.is_empty() {
            // Lost while asked to hand it over: the graceful wait ran out (or the answer came
            // too late); anything else is a plain loss.
            let cause = |id: &ShardId| {
                if self.handing_off.contains(id) {
                    RereadCause::Moved
                } else {
                    RereadCause::LeaseLost
                }
            };
            let causes: Vec<(ShardId, RereadCause)> =
                lost.iter().map(|id| (id.clone(), cause(id))).collect();
            for id in &lost {
                self.readers.remove(id);
                self.drop_shard_buffer(id);
            }
            let in_flight = self.progress.lose(&lost);
            for (id, cause) in &causes {
                self.history.rewound(id, *cause);
            }
            if in_flight {
                let cp = self.table_checkpoints().await?;
                self.history.committed(&cp);
                let rewound = self.progress.doom(
                    |f| lost.iter().any(|l| f.ranges.iter().any(|r| r.shard == *l)),
                    &cp,
                );
                let cause = causes
                    .iter()
                    .map(|(_, c)| *c)
                    .find(|c| *c == RereadCause::LeaseLost)
                    .unwrap_or(RereadCause::Moved);
                tracing::info!(channel = %self.settings.channel, shards = ?lost, rewound = ?rewound.iter().map(|(id, _)| id).collect::<Vec<_>>(), "lease lost with a batch in flight: its shards and the shards of the batches it dooms are read again");
                self.reopen(rewound, cause).await?;
            } else if causes.iter().all(|(_, c)| *c == RereadCause::Moved) {
                // A graceful hand-off: the lease manager wrote the new owner once this worker's
                // batches of the shard were committed (or its wait ran out).
                tracing::info!(channel = %self.settings.channel, shards = ?lost, "shard handed over to another worker");
            } else {
                tracing::info!(channel = %self.settings.channel, shards = ?lost, "lease lost: its buffered rows dropped, the other shards go on");
            }
        }
        self.handing_off = self.held.borrow().handing_off.clone();
        if !open_new {
            return Ok(());
        }
        let new: Vec<(ShardId, u64)> = held
            .into_iter()
            .filter(|(id, _)| !self.progress.holds(id))
            .collect();
        if !new.is_empty() {
            let cp = self.table_checkpoints().await?;
            self.history.committed(&cp);
            let committed_by = self
                .sink
                .as_ref()
                .and_then(|s| s.checkpoints_committed_by_ms());
            let (channel, source) = (&self.settings.channel, self.io.source.as_ref());
            let initial = &self.settings.initial_position;
            // A checkpoint of the table must name a record of the same log (a topic recreated
            // under the same name is another log): checked for every shard taken at once in
            // one lookup (Kafka: one probe assignment), not one probe per shard.
            if let Some(by) = committed_by {
                let checks: Vec<(ShardId, Position)> = new
                    .iter()
                    .filter_map(|(id, _)| cp.get(id).map(|p| (id.clone(), p.clone())))
                    .collect();
                if !checks.is_empty() {
                    source.check_checkpoints(&checks, by).await?;
                }
            }
            // The shards taken at once are opened concurrently (a reader each: a few broker or
            // Kinesis calls), not one after another: a worker taking 250 partitions opened them
            // over 7 s, its records waiting.
            let opened: Vec<_> = futures::stream::iter(new)
                .map(|(id, counter)| {
                    let after = cp.get(&id).cloned();
                    async move {
                        let reader =
                            open_reader(channel, source, initial, &id, after.as_ref()).await?;
                        Ok::<_, WorkerError>((id, counter, after, reader))
                    }
                })
                .buffer_unordered(CONCURRENT_OPENS)
                .collect()
                .await;
            let mut failed = None;
            for result in opened {
                let (id, counter, after, reader) = match result {
                    Ok(opened) => opened,
                    Err(e) => {
                        failed.get_or_insert(e);
                        continue;
                    }
                };
                tracing::info!(channel = %self.settings.channel, shard = %id, lease_counter = counter, checkpoint = ?after, "shard lease taken: reading after the table checkpoint");
                self.readers.insert(
                    id.clone(),
                    ShardReaderState {
                        reader,
                        read_error_logged_at: None,
                    },
                );
                self.progress.take(id, counter, after);
            }
            if let Some(e) = failed {
                return Err(e);
            }
        }
        Ok(())
    }

    /// Drops what `shard` buffered: its rows in the sink and its DLQ entries (the caller
    /// updates its progress).
    fn drop_shard_buffer(&mut self, shard: &ShardId) {
        if let Some(sink) = self.sink.as_mut() {
            sink.drop_shard(shard);
        }
        if self.dlq_entries.iter().any(|e| e.shard == *shard) {
            self.dlq_entries.retain(|e| e.shard != *shard);
            self.dlq_bytes = self.dlq_entries.iter().map(DlqEntry::approx_bytes).sum();
        }
    }

    /// Drops the buffered rows of each shard of `restart` and reopens its reader after the
    /// position given (its progress was rewound already); what is read again is counted under
    /// `cause`.
    async fn reopen(
        &mut self,
        restart: Vec<(ShardId, Option<Position>)>,
        cause: RereadCause,
    ) -> Result<(), WorkerError> {
        for (id, after) in restart {
            self.drop_shard_buffer(&id);
            self.history.rewound(&id, cause);
            let reader = open_reader(
                &self.settings.channel,
                self.io.source.as_ref(),
                &self.settings.initial_position,
                &id,
                after.as_ref(),
            )
            .await?;
            if let Some(r) = self.readers.get_mut(&id) {
                r.reader = reader;
            }
        }
        Ok(())
    }

    /// Whether no held shard is to be read: none held, or each finished or moving away.
    fn nothing_to_read(&self) -> bool {
        self.progress
            .shards()
            .iter()
            .all(|(id, st)| st.ended || self.handing_off.contains(id))
    }

    /// The graceful hand-off (docs/design.md): the shards asked to move are not read any more;
    /// what they buffered is handed off at once in a batch of their own; once every batch of
    /// a shard is committed, the worker says it is ready to move.
    async fn hand_off_moving(&mut self) -> Result<(), WorkerError> {
        if self.handing_off.is_empty() {
            return self.answer_handoffs_ok();
        }
        let moving = self.handing_off.clone();
        if !self
            .progress
            .batch_ranges_of(|id| moving.contains(id))
            .is_empty()
        {
            tracing::info!(channel = %self.settings.channel, shards = ?moving, "shards asked to move: handing off their buffered rows in a batch of their own");
            self.flush(|id| moving.contains(id)).await?;
        }
        self.answer_handoffs_ok()
    }

    fn answer_handoffs_ok(&mut self) -> Result<(), WorkerError> {
        self.answer_handoffs();
        Ok(())
    }

    /// Tells the lease manager which shards asked to move are ready: held, nothing buffered
    /// and every batch committed.
    fn answer_handoffs(&self) {
        let Some(replies) = &self.handoff_replies else {
            return;
        };
        let ready: BTreeSet<ShardId> = self
            .handing_off
            .iter()
            .filter(|id| self.progress.settled(id))
            .cloned()
            .collect();
        replies.set_ready(ready);
    }

    async fn poll_shards(&mut self) -> Result<(), WorkerError> {
        let per_shard_wait =
            Duration::from_millis((200 / self.readers.len().max(1) as u64).max(10));
        let sink = self.sink.as_mut().expect("sink open");
        let mut records = 0u64;
        let mut bytes = 0u64;
        let mut skipped = 0u64;
        let mut tombstones = 0u64;
        let mut reread: BTreeMap<RereadCause, u64> = BTreeMap::new();
        for (id, st) in self.readers.iter_mut() {
            if (sink.buffered_bytes() + self.dlq_bytes) as u64 >= self.settings.buffer_size {
                break; // back-pressure: flush before reading more
            }
            // A shard moving away is not read any more (its lease goes once what it read is
            // committed).
            if self.progress.shards().get(id).is_none_or(|p| p.ended)
                || self.handing_off.contains(id)
            {
                continue;
            }
            let batch = match st.reader.next_batch(1000, per_shard_wait).await {
                Ok(batch) => batch,
                // The reader stays usable and paces its own retries: go on with the other
                // shards instead of restarting the loop (which would drop the buffer).
                Err(e) if e.is_retryable() => {
                    // Logged once per READ_ERROR_LOG_INTERVAL per shard (throttling can last).
                    if st
                        .read_error_logged_at
                        .is_none_or(|t| t.elapsed() >= READ_ERROR_LOG_INTERVAL)
                    {
                        tracing::warn!(channel = %self.settings.channel, shard = %id, error = %e, "shard read failed; the reader retries with backoff");
                        st.read_error_logged_at = Some(Instant::now());
                    }
                    continue;
                }
                Err(e) => return Err(e.into()),
            };
            records += batch.len() as u64;
            bytes += batch.iter().map(|r| r.payload.len() as u64).sum::<u64>();
            // The freshness counts from each record's timestamp (reads.rs), mapped here onto the
            // monotonic clock the gauge is published on.
            let now = Instant::now();
            let wall_ms = now_ms();
            if let Some((n, cause)) = self.history.read(
                id,
                batch
                    .iter()
                    .map(|r| (&r.position, accepted_at(r.arrival_ms, now, wall_ms))),
                now,
            ) {
                *reread.entry(cause).or_default() += n;
            }
            // A tombstone (a Kafka record with a null value: a delete in a compacted topic,
            // Debezium's follow-up to a delete) has no row to write, in any destination, and
            // is no error: skipped here, never pushed nor dead-lettered, and covered by the
            // batch range (recorded below) so the checkpoint passes it.
            // Records in front of the last one are covered by its position; a tombstone at the
            // end must be recorded itself (below). Filtered in place: no copy of the batch.
            // A sink of an `"upsert"` envelope takes them: each deletes its message key's row.
            let skip_tombstones = !sink.takes_tombstones();
            let trailing_tombstone = batch
                .last()
                .filter(|r| r.tombstone && skip_tombstones)
                .map(|r| r.position.clone());
            let mut batch = batch;
            let read = batch.len();
            if skip_tombstones {
                batch.retain(|r| !r.tombstone);
            }
            tombstones += (read - batch.len()) as u64;
            // One call per read batch (not per record): the sink's future is boxed. Also for an
            // empty batch (nothing read, or only tombstones): a push is where the sink does its
            // timed work, such as asking the registry for the latest schema version.
            for pushed in sink.push(id, batch).await? {
                let position = match pushed {
                    Pushed::Buffered(position) => position,
                    Pushed::Skipped(position) => {
                        skipped += 1;
                        position
                    }
                    Pushed::Rejected {
                        reason,
                        record: rec,
                    } => {
                        let mut entry = DlqEntry {
                            channel: self.settings.channel.clone(),
                            source: self.settings.source_name.clone(),
                            shard: id.clone(),
                            position: rec.position.clone(),
                            arrival_time: rfc3339_ms(rec.arrival_ms),
                            key: rec
                                .key
                                .as_ref()
                                .map(|k| String::from_utf8_lossy(k).into_owned()),
                            // A GSR or Confluent record names its version: the one it was
                            // checked (or refused) as, whatever the channel's.
                            schema_version: crate::registry::schema_label(&rec.payload)
                                .unwrap_or_else(|| self.settings.schema_version.clone()),
                            error_code: reason.code.as_str().to_string(),
                            field: reason.field,
                            message: reason.message,
                            payload_base64: None,
                        };
                        if self.settings.include_payload {
                            entry = entry.with_payload(&rec.payload);
                        }
                        self.dlq_bytes += entry.approx_bytes();
                        self.dlq_entries.push(entry);
                        rec.position
                    }
                };
                self.progress.record(id, position, now);
            }
            if let Some(last) = trailing_tombstone {
                self.progress.record(id, last, now);
            }
            if st.reader.shard_ended() {
                tracing::info!(channel = %self.settings.channel, shard = %id, "shard ended: every record read; handing off SHARD_END");
                self.progress.end(id);
            }
        }
        if records > 0 {
            telemetry::record_read(&self.settings.channel, records, bytes);
        }
        if skipped > 0 {
            telemetry::record_skipped(&self.settings.channel, skipped);
        }
        if tombstones > 0 {
            telemetry::record_tombstones(&self.settings.channel, tombstones);
        }
        for (cause, n) in reread {
            telemetry::record_reread(&self.settings.channel, cause.as_str(), n);
        }
        Ok(())
    }

    fn flush_due(&self) -> bool {
        // A closed shard is handed off at once: its children wait for its SHARD_END.
        if self.progress.end_due() {
            return true;
        }
        let Some(oldest) = self.progress.oldest_buffered() else {
            return false;
        };
        oldest.elapsed() >= hand_off_age(self.settings.data_freshness) || self.buffer_full()
    }

    /// Rows and DLQ entries buffered reach `buffer_size`: flush before reading more.
    fn buffer_full(&self) -> bool {
        self.sink.as_ref().is_some_and(|s| {
            (s.buffered_bytes() + self.dlq_bytes) as u64 >= self.settings.buffer_size
        })
    }

    /// Applies the settings changed with `floe channel update` (data freshness); the
    /// configured value when there is no override. A lease store error keeps the current one.
    async fn apply_channel_settings(&mut self) {
        let configured = *self
            .configured_freshness
            .get_or_insert(self.settings.data_freshness);
        let overrides = match self.batches.get_channel_state(&self.settings.channel).await {
            Ok(state) => state.map(|s| s.overrides).unwrap_or_default(),
            Err(e) => {
                tracing::debug!(channel = %self.settings.channel, error = %e, "could not read the channel's settings");
                return;
            }
        };
        let freshness = overrides
            .data_freshness_ms
            .map(Duration::from_millis)
            .unwrap_or(configured);
        if freshness != self.settings.data_freshness {
            tracing::info!(channel = %self.settings.channel, data_freshness_s = freshness.as_secs_f64(), "data freshness changed");
            self.settings.data_freshness = freshness;
        }
    }

    /// Writes what the shards `pick` picks buffered as data files and hands the batch to the
    /// committer; the other shards' rows stay buffered.
    async fn flush(&mut self, pick: impl Fn(&ShardId) -> bool) -> Result<(), WorkerError> {
        let mut shards = self.progress.batch_ranges_of(&pick);
        if !Progress::still_held(&shards, &self.held_counters()) {
            // A lease went since the last sync: drop only that shard's rows first.
            self.sync_leases(false).await?;
            shards = self.progress.batch_ranges_of(&pick);
        }
        if shards.is_empty() {
            return Ok(());
        }
        let in_batch = Progress::shards_of(&shards);
        let (dlq_entries, dlq_rest): (Vec<DlqEntry>, Vec<DlqEntry>) =
            std::mem::take(&mut self.dlq_entries)
                .into_iter()
                .partition(|e| in_batch.contains(&e.shard));
        self.dlq_entries = dlq_rest;
        self.dlq_bytes = self.dlq_entries.iter().map(DlqEntry::approx_bytes).sum();
        let oldest_read = shards
            .iter()
            .filter_map(|r| self.progress.shards().get(&r.shard)?.buffered_since)
            .min();
        let batch_id = Uuid::now_v7();
        let written = self
            .sink
            .as_mut()
            .expect("sink open")
            .write(batch_id, &in_batch, &dlq_entries)
            .await?;
        // Never hand off a shard whose lease was lost while writing (or while the hand-off was
        // being retried, below).
        if !Progress::still_held(&shards, &self.held_counters()) {
            self.sink
                .as_mut()
                .expect("sink open")
                .undo(&written.files)
                .await;
            // The batch's rows are dropped, so the readers of its shards must go back to their
            // last hand-off, whether or not `sync_leases` still finds a lost lease: the lease
            // manager may have dropped a lease locally (not renewed within lease_duration, e.g.
            // a long flush) and renewed it again under the same counter by now. Without the
            // rewind, the next batch's range would cover the dropped records (found by
            // loadtest/bench.sh: records checkpointed but in neither the table nor the DLQ).
            self.sync_leases(false).await?;
            return self.rewind_batch(&in_batch).await;
        }
        let dead_lettered_by_code = {
            let mut codes: BTreeMap<String, u64> = BTreeMap::new();
            for e in &dlq_entries {
                *codes.entry(e.error_code.clone()).or_default() += 1;
            }
            codes
        };
        let batch = PendingBatch {
            channel: self.settings.channel.clone(),
            batch_id,
            worker_id: self.settings.worker_id.clone(),
            shards: shards.clone(),
            files: written.files,
            num_rows: written.num_rows,
            num_dead_lettered: dlq_entries.len() as u64,
            dead_lettered_by_code,
            data_bytes: written.num_bytes,
            oldest_read_at_ms: now_ms() - oldest_read.map_or(0, |t| t.elapsed().as_millis() as i64),
        };
        // The lease store may be briefly unreachable (a PostgreSQL restart or failover, a
        // DynamoDB hiccup): the hand-off is idempotent, so it is retried with backoff while
        // every shard of the batch is still held, keeping the buffer and the written files
        // instead of re-reading from the last hand-off. Reading waits meanwhile. Once a lease
        // is gone (the lease manager drops what it could not renew within lease_duration), the
        // readers are rewound as above.
        let mut backoff = crate::retry::Backoff::new(HANDOFF_RETRY_FIRST, HANDOFF_RETRY_MAX);
        let mut failures = 0u32;
        let retrying_since = Instant::now();
        loop {
            match self.batches.put_batch(&batch).await {
                Ok(()) => {
                    if let Some(signal) = &self.batch_signal {
                        signal.notify_one();
                    }
                    break;
                }
                Err(e) if e.is_retryable() && retrying_since.elapsed() < HANDOFF_RETRY_BOUND => {
                    // Leases may have changed while the store was away.
                    self.held.borrow_and_update();
                    if !Progress::still_held(&shards, &self.held_counters()) {
                        tracing::warn!(channel = %self.settings.channel, batch_id = %batch_id, error = %e, "a lease of the batch was lost while its hand-off was retried; re-reading from the last hand-off");
                        // The files stay: a failed put's outcome is unknown, and a batch that
                        // did land needs them until the committer decides it. The orphan sweep
                        // removes them otherwise.
                        self.sync_leases(false).await?;
                        return self.rewind_batch(&in_batch).await;
                    }
                    if failures == 0 {
                        tracing::warn!(channel = %self.settings.channel, batch_id = %batch_id, error = %e, "handing the batch off failed; retrying with backoff while its leases are held");
                    }
                    failures += 1;
                    tokio::time::sleep(backoff.next_delay()).await;
                }
                Err(e) => return Err(e.into()),
            }
        }
        if failures > 0 {
            tracing::info!(channel = %self.settings.channel, batch_id = %batch_id, failures, retried_for_s = retrying_since.elapsed().as_secs_f64(), "batch handed off after retries");
        }
        telemetry::record_files(&self.settings.channel, written.sizes.iter().copied());
        tracing::debug!(channel = %self.settings.channel, batch_id = %batch_id, rows = written.num_rows, dead_lettered = batch.num_dead_lettered, files = written.sizes.len(), "batch handed off");
        self.progress.handed_off(batch_id, &shards);
        Ok(())
    }

    /// A batch of `shards` was written but not handed off (a lease went meanwhile): each of
    /// them still held is read again after its last hand-off.
    async fn rewind_batch(&mut self, shards: &BTreeSet<ShardId>) -> Result<(), WorkerError> {
        let mut restart: Vec<(ShardId, Option<Position>)> = Vec::new();
        for id in shards {
            if self.progress.holds(id) {
                restart.push((id.clone(), self.progress.drop_shard(id)));
            }
        }
        self.reopen(restart, RereadCause::LeaseLost).await
    }

    /// Forgets committed batches; on a rejected one, restarts from the table's checkpoints.
    async fn reconcile(&mut self) -> Result<(), WorkerError> {
        if self.progress.in_flight().is_empty() {
            return Ok(());
        }
        // Pending first, then the checkpoints: the committer commits a batch before it removes
        // it from the pending set, so a batch missing from the pending set read first is either
        // in the checkpoints read after, or rejected. In the other order, a commit landing
        // between the two reads made a committed batch look rejected (found by a break test:
        // false "rejected" warnings and re-reads).
        // An unreachable lease store (a PostgreSQL restart) only postpones the reconciliation:
        // the buffer and the batches in flight are kept, reading goes on until the leases
        // lapse, and the next loop tries again.
        let pending: HashSet<Uuid> = match self.batches.list_pending(&self.settings.channel).await {
            Ok(pending) => {
                if std::mem::take(&mut self.pending_unreachable) {
                    tracing::info!(channel = %self.settings.channel, "pending batches readable again");
                }
                pending.into_iter().map(|b| b.batch_id).collect()
            }
            Err(e) if e.is_retryable() => {
                if !std::mem::replace(&mut self.pending_unreachable, true) {
                    tracing::warn!(channel = %self.settings.channel, error = %e, "cannot list the pending batches; keeping the buffer and trying again");
                }
                return Ok(());
            }
            Err(e) => return Err(e.into()),
        };
        // Every batch in flight still pending: nothing can have settled, and the table is not
        // loaded. A worker so loads the table once per batch that leaves the pending set, not
        // once per second (at 100 workers that was ~100 metadata.json reads a second) — except
        // every STUCK_BATCH_CHECK (at least data_freshness) while batches stay pending, which
        // finds a dropped or replaced table.
        let stuck_check = STUCK_BATCH_CHECK.max(self.settings.data_freshness);
        if self
            .progress
            .in_flight()
            .iter()
            .all(|f| pending.contains(&f.batch_id))
            && self
                .last_table_load
                .is_some_and(|t| t.elapsed() < stuck_check)
        {
            return Ok(());
        }
        let cp = self.table_checkpoints().await?;
        self.history.committed(&cp);
        let settled = self.progress.reconcile(&pending, &cp);
        if !settled.rewound.is_empty() {
            tracing::warn!(channel = %self.settings.channel, shards = ?settled.rewound.iter().map(|(id, _)| id).collect::<Vec<_>>(), "a batch was rejected: re-reading its shards after the rejected ranges");
            self.reopen(settled.rewound, RereadCause::Rejected).await?;
        }
        Ok(())
    }

    fn publish_gauges(&self) {
        // Age of the oldest record of a held shard not yet committed, from its timestamp or its
        // first read by this process if earlier (docs/observability.md, "Freshness and re-reads").
        let oldest = self.oldest_pending();
        let freshness = oldest.map(|t| t.elapsed().as_secs_f64()).unwrap_or(0.0);
        let buffered = self.sink.as_ref().map(|s| s.buffered_bytes()).unwrap_or(0);
        let committer = self.held.borrow().committer.is_some();
        let lag: u64 = self
            .readers
            .values()
            .filter_map(|st| match st.reader.lag() {
                Some(crate::source::Lag::Records(n)) => Some(n),
                _ => None,
            })
            .sum();
        telemetry::set_source_lag_records(&self.settings.channel, lag);
        telemetry::set_freshness_target(&self.settings.channel, self.settings.data_freshness);
        let behind_ms = self
            .readers
            .values()
            .filter_map(|st| match st.reader.lag() {
                Some(crate::source::Lag::Millis(ms)) => Some(ms),
                _ => None,
            })
            .max();
        if let Some(ms) = behind_ms {
            telemetry::set_source_lag_seconds(&self.settings.channel, ms as f64 / 1000.0);
        }
        if !committer {
            // Only the committer knows the pending batches; others report none.
            telemetry::set_pending_batches(&self.settings.channel, 0);
        }
        telemetry::set_worker_gauges(
            &self.settings.channel,
            freshness,
            buffered,
            self.readers.len(),
            committer,
        );
    }
}
