//! The committer: the one holder of a channel's committer lease turns pending batches into
//! Iceberg commits, exactly once (DESIGN.md, protocol steps 3–6).
//!
//! ```text
//!   load table ──> checkpoints = floe.checkpoints, committed = floe.batch-ids of all snapshots
//!      │
//!   plan (pure): per pending batch in batch-id order
//!      │   already in a snapshot            -> finish as committed (crash after commit)
//!      │   some shard range starts before the checkpoint
//!      │     (duplicate or overlapping)      -> dead                  ┐ permanent: files
//!      │   lease counter < shard's current   -> dead (stale worker)   ┘ deleted
//!      │   every shard range continues the checkpoint -> accept, advance checkpoints
//!      │   otherwise (a gap)                 -> keep pending
//!      │
//!   one transaction: fast append(accepted files) + floe.checkpoints + floe.last-commit-id
//!                    + floe.committer-epoch, fenced to the validated snapshot
//!      │   conflict        -> nothing finished; next round re-plans on the fresh table
//!      │   unknown outcome -> reload; committed iff floe.last-commit-id == this commit id
//!      │
//!   publish staged DLQ objects, finish batches, delete dead batches' files, checkpoint hints
//! ```
//!
//! Dead batches' files are deleted only once the table carries this committer's epoch (its
//! lease counter): from then on a stale committer's fenced commit can only fail, so no deleted
//! file can ever be referenced.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Instant;

use iceberg::table::Table;
use iceberg::transaction::{ApplyTransactionAction, Transaction};
use iceberg::{Catalog, ErrorKind, TableIdent};
use uuid::Uuid;

use crate::catalog::{
    referenced_data_files, FencedCatalog, PROP_CHECKPOINTS, PROP_COMMITTER_EPOCH,
    PROP_LAST_COMMIT_ID, SUMMARY_BATCH_IDS, SUMMARY_COMMIT_ID, SUMMARY_RANGES,
};
use crate::dlq::Dlq;
use crate::lease::{BatchStore, Delivered, DeliveryLog, LeaseError, LeaseKey, LeaseStore};
use crate::model::{Checkpoints, PendingBatch, RangeVerdict, ShardId};
use crate::raw::{RawObject, RawStore};
use crate::telemetry;
use crate::writer::{data_file_paths, parse_data_files};

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
    /// The table cannot be written (schema or data files do not fit it).
    #[error("table incompatible: {0}")]
    Incompatible(String),
    /// The catalog or storage failed; retry with backoff.
    #[error("catalog unavailable: {0}")]
    Unavailable(#[from] iceberg::Error),
    /// The lease store failed.
    #[error("lease store: {0}")]
    Lease(#[from] LeaseError),
}

impl CommitError {
    /// Whether retrying the round later may succeed.
    pub fn is_retryable(&self) -> bool {
        !matches!(
            self,
            CommitError::Fenced { .. } | CommitError::Incompatible(_)
        )
    }
}

/// Decision for one pending batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BatchDecision {
    /// Commit it in this round.
    Accept,
    /// A snapshot already holds it (a committer crashed after committing): finish it.
    AlreadyCommitted,
    /// It can never be committed (a range starting before the checkpoint, or a stale lease
    /// counter): reject it.
    Dead,
    /// A gap before it: leave it pending.
    Keep,
}

/// The plan of one commit round.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RoundPlan {
    /// Decision per pending batch, in the order given.
    pub decisions: Vec<BatchDecision>,
    /// Checkpoints after the accepted batches.
    pub checkpoints: Checkpoints,
}

/// Plans a round (pure; DESIGN.md protocol step 3). `pending` must be in batch-id order;
/// `lease_counters` holds each shard lease's current counter (the fencing token).
pub fn plan_round(
    checkpoints: &Checkpoints,
    committed_batch_ids: &HashSet<Uuid>,
    lease_counters: &HashMap<ShardId, u64>,
    pending: &[PendingBatch],
) -> RoundPlan {
    let mut cp = checkpoints.clone();
    let mut decisions = Vec::with_capacity(pending.len());
    for batch in pending {
        let decision = if committed_batch_ids.contains(&batch.batch_id) {
            BatchDecision::AlreadyCommitted
        } else if batch.shards.iter().any(|s| {
            cp.verdict(&s.shard, &s.range).is_permanent_rejection()
                || lease_counters
                    .get(&s.shard)
                    .is_some_and(|current| s.lease_counter < *current)
        }) {
            BatchDecision::Dead
        } else if batch
            .shards
            .iter()
            .all(|s| cp.verdict(&s.shard, &s.range) == RangeVerdict::Contiguous)
        {
            for s in &batch.shards {
                cp.advance(&s.shard, &s.range);
            }
            BatchDecision::Accept
        } else {
            BatchDecision::Keep
        };
        decisions.push(decision);
    }
    RoundPlan {
        decisions,
        checkpoints: cp,
    }
}

/// Reads the committed checkpoints of a table (`{}` when unset).
///
/// Errors: [`CommitError::Incompatible`] when the property is not valid JSON checkpoints.
pub fn table_checkpoints(table: &Table) -> Result<Checkpoints, CommitError> {
    match table.metadata().properties().get(PROP_CHECKPOINTS) {
        None => Ok(Checkpoints::default()),
        Some(text) => Checkpoints::from_property(text)
            .map_err(|e| CommitError::Incompatible(format!("bad {PROP_CHECKPOINTS}: {e}"))),
    }
}

/// Ids of every batch that some snapshot of the table added.
pub fn committed_batch_ids(table: &Table) -> HashSet<Uuid> {
    table
        .metadata()
        .snapshots()
        .filter_map(|s| s.summary().additional_properties.get(SUMMARY_BATCH_IDS))
        .flat_map(|ids| ids.split(',').filter_map(|id| Uuid::parse_str(id).ok()))
        .collect()
}

fn table_epoch(table: &Table) -> u64 {
    table
        .metadata()
        .properties()
        .get(PROP_COMMITTER_EPOCH)
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// What a round did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RoundReport {
    /// Batches committed by this round's snapshot.
    pub committed: usize,
    /// Batches found already committed and finished.
    pub recovered: usize,
    /// Batches rejected (files deleted).
    pub rejected: usize,
    /// Batches left pending (a gap before them).
    pub kept: usize,
    /// Rows appended.
    pub rows: u64,
    /// Records dead-lettered by the committed batches.
    pub dead_lettered: u64,
    /// The snapshot created, if any.
    pub snapshot_id: Option<i64>,
}

/// Where a committer commits: the Iceberg table (checkpoints in the table, fenced transaction)
/// or a raw S3 destination (checkpoints in the lease store, compare-and-swap).
enum Target {
    Iceberg {
        ident: TableIdent,
        catalog: FencedCatalog,
        dlq: Dlq,
        /// The uuid of the table as first loaded: a table replaced under the same name is never
        /// committed into ([`crate::catalog::check_same_table`]).
        uuid: std::sync::OnceLock<uuid::Uuid>,
    },
    Raw(RawStore),
}

/// What a round starts from: the committed state of the destination.
enum Loaded {
    Iceberg(Box<Table>),
    /// The lease store's item, `None` before the first commit.
    Raw(Option<Delivered>),
}

impl Loaded {
    fn epoch(&self) -> u64 {
        match self {
            Loaded::Iceberg(t) => table_epoch(t),
            Loaded::Raw(d) => d.as_ref().map_or(0, |d| d.committer_epoch),
        }
    }

    fn checkpoints(&self) -> Result<Checkpoints, CommitError> {
        match self {
            Loaded::Iceberg(t) => table_checkpoints(t),
            Loaded::Raw(d) => Ok(d
                .as_ref()
                .map(|d| d.checkpoints.clone())
                .unwrap_or_default()),
        }
    }

    fn committed_batch_ids(&self) -> HashSet<Uuid> {
        match self {
            Loaded::Iceberg(t) => committed_batch_ids(t),
            Loaded::Raw(d) => d
                .iter()
                .flat_map(|d| d.committed_batch_ids.iter().copied())
                .collect(),
        }
    }
}

/// The committer of one channel. Create it when this worker takes the channel's committer
/// lease, with that lease's counter as `epoch`; drop it when the lease is lost.
pub struct Committer {
    channel: String,
    target: Target,
    leases: Arc<dyn LeaseStore>,
    batches: Arc<dyn BatchStore>,
    epoch: u64,
}

impl Committer {
    /// A committer for `channel` writing `ident` through `catalog`.
    pub fn new(
        channel: impl Into<String>,
        ident: TableIdent,
        catalog: Arc<dyn Catalog>,
        leases: Arc<dyn LeaseStore>,
        batches: Arc<dyn BatchStore>,
        dlq: impl Into<Dlq>,
        epoch: u64,
    ) -> Self {
        Committer {
            channel: channel.into(),
            target: Target::Iceberg {
                ident,
                catalog: FencedCatalog::new(catalog),
                dlq: dlq.into(),
                uuid: std::sync::OnceLock::new(),
            },
            leases,
            batches,
            epoch,
        }
    }

    /// A committer for raw channel `channel`, publishing through `store`; its checkpoints live in
    /// `batches` ([`BatchStore::get_delivered`]).
    pub fn raw(
        channel: impl Into<String>,
        store: RawStore,
        leases: Arc<dyn LeaseStore>,
        batches: Arc<dyn BatchStore>,
        epoch: u64,
    ) -> Self {
        Committer {
            channel: channel.into(),
            target: Target::Raw(store),
            leases,
            batches,
            epoch,
        }
    }

    /// What the commit log lines name as the destination.
    fn destination(&self) -> String {
        match &self.target {
            Target::Iceberg { ident, .. } => ident.to_string(),
            Target::Raw(store) => format!("s3://{}", store.bucket()),
        }
    }

    async fn load(&self) -> Result<Loaded, CommitError> {
        Ok(match &self.target {
            Target::Iceberg {
                ident,
                catalog,
                uuid,
                ..
            } => {
                let table = catalog.inner().load_table(ident).await?;
                let first = uuid.get_or_init(|| table.metadata().uuid());
                crate::catalog::check_same_table(ident, first, &table)?;
                Loaded::Iceberg(Box::new(table))
            }
            Target::Raw(_) => Loaded::Raw(self.batches.get_delivered(&self.channel).await?),
        })
    }

    /// The committer lease counter this committer writes as `floe.committer-epoch`.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// Runs one round: plan, commit, finish. Returns what it did; an idle round (nothing
    /// pending, epoch already in the table) touches nothing.
    ///
    /// Errors: see [`CommitError`]; on `Conflict` nothing was finished and the next round
    /// re-plans; on `Fenced` the caller must stop acting as committer.
    pub async fn run_round(&self) -> Result<RoundReport, CommitError> {
        let loaded = self.load().await?;
        let t_epoch = loaded.epoch();
        if t_epoch > self.epoch {
            return Err(CommitError::Fenced {
                table_epoch: t_epoch,
                own: self.epoch,
            });
        }
        let pending = self.batches.list_pending(&self.channel).await?;
        if pending.is_empty() && t_epoch == self.epoch {
            return Ok(RoundReport::default());
        }
        let checkpoints = loaded.checkpoints()?;
        let committed_ids = loaded.committed_batch_ids();
        let lease_counters: HashMap<ShardId, u64> = self
            .leases
            .list_leases(&self.channel)
            .await?
            .into_iter()
            .filter_map(|l| match &l.key {
                LeaseKey::Shard(shard) => Some((shard.clone(), l.lease_counter)),
                LeaseKey::Committer => None,
            })
            .collect();
        let plan = plan_round(&checkpoints, &committed_ids, &lease_counters, &pending);

        let mut report = RoundReport::default();
        let accepted: Vec<&PendingBatch> = pick(&pending, &plan, BatchDecision::Accept);
        let needs_commit = !accepted.is_empty() || t_epoch < self.epoch;
        if needs_commit {
            let commit_id = Uuid::now_v7();
            let started = Instant::now();
            let result = match &loaded {
                Loaded::Iceberg(table) => {
                    self.commit(table, &accepted, &plan.checkpoints, commit_id)
                        .await
                }
                Loaded::Raw(delivered) => {
                    let recovered = pick(&pending, &plan, BatchDecision::AlreadyCommitted);
                    self.commit_raw(
                        delivered.as_ref(),
                        &accepted,
                        &recovered,
                        &plan.checkpoints,
                        commit_id,
                    )
                    .await
                }
            };
            let took = started.elapsed();
            telemetry::record_commit(&self.channel, &result, took);
            if let Err(e) = &result {
                tracing::warn!(
                    channel = %self.channel,
                    table = %self.destination(),
                    batches = accepted.len(),
                    rows = accepted.iter().map(|b| b.num_rows).sum::<u64>(),
                    commit_latency_ms = took.as_millis() as u64,
                    error = %e,
                    "commit failed"
                );
            }
            report.snapshot_id = result?;
            self.log_committed(&accepted, took, report.snapshot_id)
                .await;
            report.committed = accepted.len();
            report.rows = accepted.iter().map(|b| b.num_rows).sum();
            report.dead_lettered = accepted.iter().map(|b| b.num_dead_lettered).sum();
        }

        // From here on the table carries this committer's epoch and every decision is final.
        let mut recovered = pick(&pending, &plan, BatchDecision::AlreadyCommitted);
        let mut dead = pick(&pending, &plan, BatchDecision::Dead);
        if let (false, Loaded::Iceberg(table)) = (dead.is_empty(), &loaded) {
            // A batch committed in a snapshot that maintenance has since expired is no longer
            // named by any snapshot summary: before deleting files, ask the table itself.
            let referenced: HashSet<String> =
                referenced_data_files(table).await?.into_iter().collect();
            let (committed_anyway, really_dead): (Vec<_>, Vec<_>) =
                dead.into_iter().partition(|b| {
                    data_file_paths(&b.data_files)
                        .iter()
                        .any(|p| referenced.contains(p))
                });
            recovered.extend(committed_anyway);
            dead = really_dead;
        }
        let mut committed_ids: Vec<Uuid> = Vec::new();
        for b in accepted.iter().chain(recovered.iter()) {
            self.publish(b).await?;
            committed_ids.push(b.batch_id);
        }
        for b in accepted.iter() {
            for (code, n) in &b.dead_lettered_by_code {
                telemetry::record_dead_lettered(&self.channel, code, *n);
            }
        }
        for b in &dead {
            let stale = b.shards.iter().any(|s| {
                lease_counters
                    .get(&s.shard)
                    .is_some_and(|current| s.lease_counter < *current)
            });
            let reason = if stale { "stale_lease" } else { "duplicate" };
            tracing::warn!(channel = %self.channel, batch_id = %b.batch_id, worker_id = %b.worker_id, reason, rows = b.num_rows, "batch rejected: its files are deleted and its records read again");
            self.discard(&loaded, b).await;
            telemetry::record_batch_rejected(&self.channel, reason);
        }
        self.finish(&plan, &checkpoints, committed_ids, &dead, report)
            .await
    }

    /// After the commit: finishes batches, updates the checkpoint hints, reports.
    async fn finish(
        &self,
        plan: &RoundPlan,
        checkpoints: &Checkpoints,
        committed_ids: Vec<Uuid>,
        dead: &[&PendingBatch],
        mut report: RoundReport,
    ) -> Result<RoundReport, CommitError> {
        let rejected_ids: Vec<Uuid> = dead.iter().map(|b| b.batch_id).collect();
        if !committed_ids.is_empty() || !rejected_ids.is_empty() {
            self.batches
                .finish_batches(&self.channel, &committed_ids, &rejected_ids)
                .await?;
        }
        for (shard, pos) in &plan.checkpoints.0 {
            if checkpoints.get(shard) != Some(pos) {
                // A hint only: the table (or the delivered item) is authoritative.
                let _ = self
                    .leases
                    .set_checkpoint_hint(&self.channel, &LeaseKey::Shard(shard.clone()), pos)
                    .await;
            }
        }
        report.recovered = committed_ids.len() - report.committed;
        report.rejected = dead.len();
        report.kept = plan
            .decisions
            .iter()
            .filter(|d| **d == BatchDecision::Keep)
            .count();
        telemetry::set_pending_batches(&self.channel, report.kept);
        if report.committed + report.recovered + report.rejected > 0 {
            tracing::info!(
                channel = %self.channel,
                table = %self.destination(),
                committed = report.committed,
                recovered = report.recovered,
                rejected = report.rejected,
                kept = report.kept,
                rows = report.rows,
                dead_lettered = report.dead_lettered,
                snapshot_id = ?report.snapshot_id,
                "commit round"
            );
        }
        Ok(report)
    }

    /// Publishes a committed batch: its staged DLQ object (Iceberg), or its staged objects under
    /// their final keys (raw).
    async fn publish(&self, b: &PendingBatch) -> Result<(), CommitError> {
        match &self.target {
            Target::Raw(store) => {
                let objects = RawObject::parse_all(&b.data_files)
                    .map_err(|e| CommitError::Incompatible(format!("batch {}: {e}", b.batch_id)))?;
                match store.publish(&objects).await {
                    Ok(()) => Ok(()),
                    // Neither staged nor published: lost; say so loudly, go on.
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                        tracing::error!(channel = %self.channel, batch_id = %b.batch_id, error = %e, "staged object is missing: a committed batch cannot be published");
                        Ok(())
                    }
                    Err(e) => Err(CommitError::Unavailable(iceberg::Error::new(
                        ErrorKind::Unexpected,
                        format!("publish batch {}: {e}", b.batch_id),
                    ))),
                }
            }
            Target::Iceberg { dlq, .. } => {
                let Some(staged) = &b.dlq_staged else {
                    return Ok(());
                };
                let published = dlq.publish(b.batch_id, staged).await;
                telemetry::record_dlq_write(&self.channel, "publish", published.is_ok());
                match published {
                    Ok(()) => Ok(()),
                    // Staged object gone and never published: its entries are lost; say so
                    // loudly, but do not stop delivering every later batch.
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                        tracing::error!(channel = %self.channel, batch_id = %b.batch_id, staged, num_dead_lettered = b.num_dead_lettered, "staged DLQ object is missing: its entries cannot be published");
                        Ok(())
                    }
                    Err(e) => Err(CommitError::Unavailable(iceberg::Error::new(
                        ErrorKind::Unexpected,
                        format!("publish DLQ object {staged}: {e}"),
                    ))),
                }
            }
        }
    }

    /// Deletes what a rejected batch wrote: data files and staged DLQ object, or staged objects.
    async fn discard(&self, loaded: &Loaded, b: &PendingBatch) {
        match (&self.target, loaded) {
            (Target::Iceberg { dlq, .. }, Loaded::Iceberg(table)) => {
                for path in data_file_paths(&b.data_files) {
                    if let Err(e) = table.file_io().delete(&path).await {
                        tracing::warn!(channel = %self.channel, path, error = %e, "could not delete a rejected batch's data file");
                    }
                }
                if let Some(staged) = &b.dlq_staged {
                    dlq.discard(staged).await;
                }
            }
            (Target::Raw(store), _) => match RawObject::parse_all(&b.data_files) {
                Ok(objects) => store.discard(&objects).await,
                Err(e) => {
                    tracing::warn!(channel = %self.channel, batch_id = %b.batch_id, error = %e, "a rejected batch's objects are not raw objects")
                }
            },
            _ => {}
        }
    }

    /// Raw destination: one compare-and-swap of the lease store's delivered checkpoints, on the
    /// version read (and, in the store, on no newer committer epoch). Returns `None` (no
    /// snapshot).
    async fn commit_raw(
        &self,
        read: Option<&Delivered>,
        accepted: &[&PendingBatch],
        recovered: &[&PendingBatch],
        checkpoints: &Checkpoints,
        commit_id: Uuid,
    ) -> Result<Option<i64>, CommitError> {
        // Every committed batch not yet finished stays listed, so a committer that crashes before
        // publishing leaves the next one able to tell it from a duplicate.
        let delivered = Delivered {
            channel: self.channel.clone(),
            checkpoints: checkpoints.clone(),
            committer_epoch: self.epoch,
            last_commit_id: Some(commit_id),
            committed_batch_ids: accepted
                .iter()
                .chain(recovered)
                .map(|b| b.batch_id)
                .collect(),
            version: 0,
        };
        match self
            .batches
            .put_delivered(&delivered, read.map(|d| d.version))
            .await
        {
            Ok(_) => Ok(None),
            Err(LeaseError::Conflict { .. }) => Err(CommitError::Conflict(format!(
                "the delivered checkpoints of {} changed since they were read",
                self.channel
            ))),
            Err(e) if e.is_retryable() => {
                // Unknown outcome: the stored item decides.
                tracing::warn!(channel = %self.channel, error = %e, %commit_id, "checkpoint write outcome unknown, reconciling");
                let fresh = self
                    .batches
                    .get_delivered(&self.channel)
                    .await
                    .map_err(|e2| {
                        CommitError::OutcomeUnknown(format!("{e}; reload failed: {e2}"))
                    })?;
                if fresh.and_then(|d| d.last_commit_id) == Some(commit_id) {
                    Ok(None)
                } else {
                    Err(CommitError::OutcomeUnknown(e.to_string()))
                }
            }
            Err(e) => Err(e.into()),
        }
    }

    /// The delivery log: one structured line per committed batch, unless the channel was
    /// updated to log failures only.
    async fn log_committed(
        &self,
        accepted: &[&PendingBatch],
        took: std::time::Duration,
        snapshot_id: Option<i64>,
    ) {
        if accepted.is_empty() {
            return;
        }
        let delivery_log = match self.batches.get_channel_state(&self.channel).await {
            Ok(Some(state)) => state.overrides.delivery_log.unwrap_or_default(),
            _ => DeliveryLog::default(),
        };
        if delivery_log != DeliveryLog::Batches {
            return;
        }
        for b in accepted {
            let ranges: Vec<String> = b
                .shards
                .iter()
                .map(|s| {
                    format!(
                        "{}:({},{}]",
                        s.shard,
                        s.range
                            .after_exclusive
                            .as_ref()
                            .map(|p| p.to_string())
                            .unwrap_or_default(),
                        s.range.last_inclusive
                    )
                })
                .collect();
            tracing::info!(
                channel = %self.channel,
                table = %self.destination(),
                batch_id = %b.batch_id,
                worker_id = %b.worker_id,
                shards = %ranges.join(" "),
                rows = b.num_rows,
                dlq_rows = b.num_dead_lettered,
                files = b.data_files.len(),
                bytes = b.data_bytes,
                commit_latency_ms = took.as_millis() as u64,
                snapshot_id = snapshot_id.unwrap_or(-1),
                "batch committed"
            );
        }
    }

    /// One fenced transaction. Returns the new snapshot id.
    async fn commit(
        &self,
        table: &Table,
        accepted: &[&PendingBatch],
        checkpoints: &Checkpoints,
        commit_id: Uuid,
    ) -> Result<Option<i64>, CommitError> {
        let mut files = Vec::new();
        for b in accepted {
            files.extend(
                parse_data_files(table, &b.data_files)
                    .map_err(|e| CommitError::Incompatible(e.to_string()))?,
            );
        }
        let ranges: BTreeMap<String, Vec<String>> = accepted
            .iter()
            .flat_map(|b| b.shards.iter())
            .fold(BTreeMap::new(), |mut m, s| {
                m.entry(s.shard.to_string()).or_default().push(format!(
                    "({},{}]",
                    s.range
                        .after_exclusive
                        .as_ref()
                        .map(|p| p.to_string())
                        .unwrap_or_default(),
                    s.range.last_inclusive
                ));
                m
            });
        let summary = HashMap::from([
            (SUMMARY_COMMIT_ID.to_string(), commit_id.to_string()),
            (
                SUMMARY_BATCH_IDS.to_string(),
                accepted
                    .iter()
                    .map(|b| b.batch_id.to_string())
                    .collect::<Vec<_>>()
                    .join(","),
            ),
            (
                SUMMARY_RANGES.to_string(),
                serde_json::to_string(&ranges).expect("ranges serialize"),
            ),
        ]);
        let tx = Transaction::new(table);
        let tx = tx
            .fast_append()
            .add_data_files(files)
            .set_snapshot_properties(summary)
            .apply(tx)?;
        let tx = tx
            .update_table_properties()
            .set(PROP_CHECKPOINTS.to_string(), checkpoints.to_property())
            .set(PROP_LAST_COMMIT_ID.to_string(), commit_id.to_string())
            .set(PROP_COMMITTER_EPOCH.to_string(), self.epoch.to_string())
            .apply(tx)?;
        let Target::Iceberg { ident, catalog, .. } = &self.target else {
            return Err(CommitError::Incompatible(
                "an Iceberg commit on a raw channel".into(),
            ));
        };
        catalog.set_fence(ident.clone(), table.metadata().current_snapshot_id());
        let result = tx.commit(catalog).await;
        catalog.clear_fence();
        match result {
            Ok(t) => Ok(t.metadata().current_snapshot_id()),
            Err(e) if e.kind() == ErrorKind::CatalogCommitConflicts => {
                Err(CommitError::Conflict(e.to_string()))
            }
            Err(e)
                if e.kind() == ErrorKind::DataInvalid
                    || e.kind() == ErrorKind::PreconditionFailed =>
            {
                // A requirement failed against the catalog's current metadata: a conflict.
                Err(CommitError::Conflict(e.to_string()))
            }
            Err(e) => {
                // Unknown outcome: the table decides.
                tracing::warn!(channel = %self.channel, error = %e, %commit_id, "commit outcome unknown, reconciling");
                let fresh = catalog.inner().load_table(ident).await.map_err(|e2| {
                    CommitError::OutcomeUnknown(format!("{e}; reload failed: {e2}"))
                })?;
                let last = fresh.metadata().properties().get(PROP_LAST_COMMIT_ID);
                if last.map(String::as_str) == Some(commit_id.to_string().as_str()) {
                    Ok(fresh.metadata().current_snapshot_id())
                } else {
                    Err(CommitError::OutcomeUnknown(e.to_string()))
                }
            }
        }
    }
}

fn pick<'a>(
    pending: &'a [PendingBatch],
    plan: &RoundPlan,
    decision: BatchDecision,
) -> Vec<&'a PendingBatch> {
    pending
        .iter()
        .zip(&plan.decisions)
        .filter(|(_, d)| **d == decision)
        .map(|(b, _)| b)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{CheckpointRange, Position, ShardRange};

    fn batch(id: u128, shard: i32, after: Option<i64>, last: i64, counter: u64) -> PendingBatch {
        PendingBatch {
            channel: "c".into(),
            batch_id: Uuid::from_u128(id),
            worker_id: "w".into(),
            shards: vec![ShardRange {
                shard: ShardId::kafka_partition(shard),
                range: CheckpointRange {
                    after_exclusive: after.map(Position::Offset),
                    last_inclusive: Position::Offset(last),
                },
                lease_counter: counter,
            }],
            data_files: vec![],
            dlq_staged: None,
            num_rows: 1,
            num_dead_lettered: 0,
            dead_lettered_by_code: Default::default(),
            data_bytes: 0,
            oldest_read_at_ms: 0,
        }
    }

    #[test]
    fn plan_accepts_a_chain_and_rejects_the_duplicate_from_a_second_worker() {
        let pending = vec![
            batch(1, 0, None, 9, 1),
            batch(2, 0, Some(9), 19, 1),
            // A second worker read the same range (0..=9) again: a duplicate.
            batch(3, 0, None, 9, 1),
        ];
        let plan = plan_round(
            &Checkpoints::default(),
            &HashSet::new(),
            &HashMap::new(),
            &pending,
        );
        assert_eq!(
            plan.decisions,
            vec![
                BatchDecision::Accept,
                BatchDecision::Accept,
                BatchDecision::Dead
            ]
        );
        assert_eq!(
            plan.checkpoints.get(&ShardId::kafka_partition(0)),
            Some(&Position::Offset(19))
        );
    }

    #[test]
    fn plan_rejects_a_batch_overlapping_the_checkpoint_instead_of_keeping_it_forever() {
        // Worker 1's range 0..=9 was committed; worker 2 had read 0..=11 from the start.
        let mut cp = Checkpoints::default();
        cp.0.insert(ShardId::kafka_partition(0), Position::Offset(9));
        let pending = vec![batch(1, 0, None, 11, 2), batch(2, 0, Some(11), 20, 2)];
        let plan = plan_round(&cp, &HashSet::new(), &HashMap::new(), &pending);
        // The overlapping batch is dead; the one chained after it is a gap and waits.
        assert_eq!(
            plan.decisions,
            vec![BatchDecision::Dead, BatchDecision::Keep]
        );
    }

    #[test]
    fn commit_rejects_batch_from_stale_lease() {
        let pending = vec![batch(1, 0, None, 9, 1), batch(2, 0, None, 12, 2)];
        let counters = HashMap::from([(ShardId::kafka_partition(0), 2)]);
        let plan = plan_round(
            &Checkpoints::default(),
            &HashSet::new(),
            &counters,
            &pending,
        );
        assert_eq!(
            plan.decisions,
            vec![BatchDecision::Dead, BatchDecision::Accept]
        );
    }

    fn kinesis_batch(
        id: u128,
        shard: &str,
        after: Option<Position>,
        last: Position,
        num_rows: u64,
    ) -> PendingBatch {
        let mut b = batch(id, 0, None, 0, 1);
        b.shards[0].shard = ShardId(shard.into());
        b.shards[0].range = CheckpointRange {
            after_exclusive: after,
            last_inclusive: last,
        };
        b.num_rows = num_rows;
        b
    }

    fn seq(text: &str) -> Position {
        text.parse().unwrap()
    }

    #[test]
    fn plan_accepts_shard_end_after_the_checkpoint_even_without_rows() {
        let s = ShardId("shardId-000000000000".into());
        let last = "49590338271490256608559692538361571095921575989136588898";
        let mut cp = Checkpoints::default();
        cp.0.insert(s.clone(), seq(last));
        // The shard's last records and its end in one batch, then a batch with only the end.
        let pending = vec![kinesis_batch(
            1,
            s.as_str(),
            Some(seq(last)),
            Position::ShardEnd,
            0,
        )];
        let plan = plan_round(&cp, &HashSet::new(), &HashMap::new(), &pending);
        assert_eq!(plan.decisions, vec![BatchDecision::Accept]);
        assert_eq!(plan.checkpoints.get(&s), Some(&Position::ShardEnd));
    }

    #[test]
    fn plan_accepts_records_and_shard_end_of_a_shard_never_checkpointed() {
        let s = "shardId-000000000003";
        let pending = vec![
            kinesis_batch(1, s, None, Position::ShardEnd, 7),
            // The same shard read again by a second worker: a duplicate of SHARD_END.
            kinesis_batch(2, s, None, seq("4959.2"), 3),
        ];
        let plan = plan_round(
            &Checkpoints::default(),
            &HashSet::new(),
            &HashMap::new(),
            &pending,
        );
        assert_eq!(
            plan.decisions,
            vec![BatchDecision::Accept, BatchDecision::Dead]
        );
        assert_eq!(
            plan.checkpoints.get(&ShardId(s.into())),
            Some(&Position::ShardEnd)
        );
    }

    #[test]
    fn plan_rejects_anything_after_shard_end() {
        let s = ShardId("shardId-000000000001".into());
        let mut cp = Checkpoints::default();
        cp.0.insert(s.clone(), Position::ShardEnd);
        let pending = vec![
            kinesis_batch(1, s.as_str(), Some(seq("4959")), Position::ShardEnd, 0),
            kinesis_batch(
                2,
                s.as_str(),
                Some(Position::ShardEnd),
                Position::ShardEnd,
                0,
            ),
        ];
        let plan = plan_round(&cp, &HashSet::new(), &HashMap::new(), &pending);
        assert_eq!(
            plan.decisions,
            vec![BatchDecision::Dead, BatchDecision::Dead],
            "a shard at SHARD_END takes nothing more"
        );
    }

    #[test]
    fn plan_keeps_a_batch_after_a_gap_and_recovers_committed_ones() {
        let mut cp = Checkpoints::default();
        cp.0.insert(ShardId::kafka_partition(0), Position::Offset(9));
        let pending = vec![batch(1, 0, None, 9, 1), batch(2, 0, Some(15), 20, 1)];
        let committed = HashSet::from([Uuid::from_u128(1)]);
        let plan = plan_round(&cp, &committed, &HashMap::new(), &pending);
        assert_eq!(
            plan.decisions,
            vec![BatchDecision::AlreadyCommitted, BatchDecision::Keep]
        );
        assert_eq!(plan.checkpoints, cp);
    }
}
