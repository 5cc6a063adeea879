//! The committer: the one holder of a channel's committer lease turns pending batches into
//! commits of the channel's destination, exactly once (docs/design.md, protocol steps 3–6). The
//! protocol is here; what a commit is for an Iceberg table or raw S3 objects is the
//! destination's ([`crate::destination::CommitTarget`]).
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
//!      │   then: drop each SHARD_END whose children (lease rows' parents) all have a checkpoint
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

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use uuid::Uuid;

use crate::destination::CommitTarget;
use crate::lease::{BatchStore, DeliveryLog, LeaseKey, LeaseStore};
use crate::model::{Checkpoints, PendingBatch, Position, ShardId};
use crate::telemetry;

pub use crate::destination::CommitError;
pub use plan::{plan_round, plan_round_aged, BatchDecision, RoundPlan};

mod plan;

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

/// The committer of one channel. Create it when this worker takes the channel's committer
/// lease, with that lease's counter as `epoch`; drop it when the lease is lost.
pub struct Committer {
    channel: String,
    target: Box<dyn CommitTarget>,
    leases: Arc<dyn LeaseStore>,
    batches: Arc<dyn BatchStore>,
    epoch: u64,
    /// When an idle round last checked the `SHARD_END` checkpoint hints.
    hints_checked: std::sync::Mutex<Option<std::time::Instant>>,
    /// A checkpoint hint write failed since the last check: the next idle round checks.
    hint_write_failed: AtomicBool,
    /// Whether a load showed the table carrying this committer's epoch (or this committer
    /// committed it): from then on an idle round with nothing pending loads nothing.
    epoch_in_table: AtomicBool,
}

/// How often an idle round (nothing pending) checks, at the least, that every shard ended in
/// the table has `SHARD_END` as its lease's checkpoint hint (a table load and a lease listing).
/// A hint goes missing when a committer is killed between a commit and its hint write (the
/// next committer's first idle round checks) or when a hint write fails (the next idle round
/// checks); this period is the backstop for a lease row created anew, such as under a lease
/// store replaced. Long, so that an idle table costs no catalog load (issue 43: a worker with
/// 1,000 tables loaded 33 tables a second with a 30 s period).
const IDLE_HINT_CHECK: std::time::Duration = std::time::Duration::from_secs(30 * 60);

impl Committer {
    /// A committer for `channel` committing into `target` (an
    /// [`IcebergTarget`](crate::iceberg::target::IcebergTarget) or a
    /// [`RawTarget`](crate::raw::target::RawTarget)).
    pub fn new(
        channel: impl Into<String>,
        target: impl CommitTarget + 'static,
        leases: Arc<dyn LeaseStore>,
        batches: Arc<dyn BatchStore>,
        epoch: u64,
    ) -> Self {
        Committer {
            channel: channel.into(),
            target: Box::new(target),
            leases,
            batches,
            epoch,
            hints_checked: std::sync::Mutex::new(None),
            hint_write_failed: AtomicBool::new(false),
            epoch_in_table: AtomicBool::new(false),
        }
    }

    /// Records `SHARD_END` as the checkpoint hint of every shard whose committed checkpoint is
    /// `SHARD_END` (or was, and is pruned: [`Checkpoints::is_ended`]) but whose lease row does
    /// not say so yet. A hint is written after the commit,
    /// so a committer killed in between (or a failed hint write) left it behind, and later
    /// rounds write hints only for checkpoints they change: the balancer never assigned the
    /// shard's children and the resharding stalled. The table is authoritative, so repairing
    /// from it is safe. A pruned shard's row created anew (a lease store replaced while the
    /// stream still lists the shard) is so marked finished, and the balancer leaves it alone.
    async fn repair_shard_end_hints(
        &self,
        checkpoints: &Checkpoints,
        leases: &[crate::lease::Lease],
    ) {
        let checkpoints = checkpoints.with_pruned_ended(&crate::lease::lineage(leases));
        for lease in leases {
            let Some(shard) = lease.key.shard_id() else {
                continue;
            };
            if checkpoints.get(shard) == Some(&Position::ShardEnd)
                && lease.checkpoint_hint != Some(Position::ShardEnd)
            {
                match self
                    .leases
                    .set_checkpoint_hint(&self.channel, &lease.key, &Position::ShardEnd)
                    .await
                {
                    Ok(()) => {
                        tracing::info!(channel = %self.channel, shard = %shard, "shard end recorded in its lease's checkpoint hint (it was missing)")
                    }
                    Err(err) => {
                        self.hint_write_failed.store(true, Ordering::Relaxed);
                        tracing::warn!(channel = %self.channel, shard = %shard, error = %err, "recording the shard end in the lease failed; retried next round")
                    }
                }
            }
        }
    }

    /// Whether an idle round is due to check the `SHARD_END` hints: the first idle round of this
    /// committer, the first after a failed hint write, and every [`IDLE_HINT_CHECK`]; `true`
    /// marks the check as done now.
    fn take_idle_hint_check(&self) -> bool {
        let mut checked = self.hints_checked.lock().expect("not poisoned");
        let due = self.hint_write_failed.swap(false, Ordering::Relaxed)
            || checked.is_none_or(|t| t.elapsed() >= IDLE_HINT_CHECK);
        if due {
            *checked = Some(std::time::Instant::now());
        }
        due
    }

    /// The committer lease counter this committer writes as `floe.committer-epoch`.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// Runs one round: plan, commit, finish. Returns what it did; an idle round (nothing
    /// pending, epoch already in the table) lists the pending batches and, when a check is due
    /// ([`IDLE_HINT_CHECK`]), loads the table to check the `SHARD_END` hints; nothing else.
    ///
    /// Errors: see [`CommitError`]; on `Conflict` nothing was finished and the next round
    /// re-plans; on `Fenced` the caller must stop acting as committer.
    pub async fn run_round(&self) -> Result<RoundReport, CommitError> {
        let report = self.commit_round().await?;
        self.maintain().await;
        Ok(report)
    }

    /// The destination's maintenance after a round ([`CommitTarget::maintain`]): its error is
    /// logged, never returned (it never fails the round), and it is tried again at the next look
    /// (a look that could not load its table, a minute later at most: [`crate::iceberg::maintenance::Maintainer::look_failed`]).
    pub async fn maintain(&self) {
        if let Err(e) = self
            .target
            .maintain(self.epoch, self.batches.as_ref())
            .await
        {
            tracing::warn!(channel = %self.channel, table = %self.target.name(), error = %e, "table maintenance failed; tried again at the next look");
        }
    }

    /// [`Committer::run_round`] without the maintenance after it.
    ///
    /// Errors: as [`Committer::run_round`].
    pub async fn commit_round(&self) -> Result<RoundReport, CommitError> {
        // The pending set first: with nothing pending and the table known to carry this epoch,
        // an idle round loads no table (each load reads metadata.json). Only this committer
        // commits, so listing before loading changes no decision; a newer committer is still
        // found at the next round with work, and by the lease manager.
        let pending = self.batches.list_pending(&self.channel).await?;
        let check_hints = pending.is_empty() && self.take_idle_hint_check();
        if pending.is_empty() && self.epoch_in_table.load(Ordering::Relaxed) && !check_hints {
            return Ok(RoundReport::default());
        }
        let loaded = self.target.load().await?;
        let t_epoch = loaded.epoch();
        if t_epoch > self.epoch {
            return Err(CommitError::Fenced {
                table_epoch: t_epoch,
                own: self.epoch,
            });
        }
        if t_epoch == self.epoch {
            self.epoch_in_table.store(true, Ordering::Relaxed);
        }
        if pending.is_empty() && t_epoch == self.epoch {
            if check_hints {
                let leases = self.leases.list_leases(&self.channel).await?;
                self.repair_shard_end_hints(&loaded.checkpoints()?, &leases)
                    .await;
            }
            return Ok(RoundReport::default());
        }
        let checkpoints = loaded.checkpoints()?;
        let committed_ids = loaded.committed_batch_ids();
        let leases = self.leases.list_leases(&self.channel).await?;
        self.repair_shard_end_hints(&checkpoints, &leases).await;
        let lineage = crate::lease::lineage(&leases);
        let lease_counters: HashMap<ShardId, u64> = leases
            .into_iter()
            .filter_map(|l| match &l.key {
                LeaseKey::Shard(shard) => Some((shard.clone(), l.lease_counter)),
                LeaseKey::Committer => None,
            })
            .collect();
        let oldest = self
            .target
            .max_batch_age()
            .map(|age| crate::time::now_ms() - age.as_millis() as i64);
        let plan = plan_round_aged(
            &checkpoints,
            &committed_ids,
            &lease_counters,
            &pending,
            oldest,
            &lineage,
        );

        let mut report = RoundReport::default();
        let accepted: Vec<&PendingBatch> = pick(&pending, &plan, BatchDecision::Accept);
        let mut recovered = pick(&pending, &plan, BatchDecision::AlreadyCommitted);
        let needs_commit = !accepted.is_empty() || t_epoch < self.epoch;
        if needs_commit {
            let commit_id = Uuid::now_v7();
            let started = Instant::now();
            let result = loaded
                .commit(
                    &accepted,
                    &recovered,
                    &plan.checkpoints,
                    self.epoch,
                    commit_id,
                )
                .await;
            let took = started.elapsed();
            let outcome = match &result {
                Ok(_) => "committed",
                Err(e) => e.outcome(),
            };
            telemetry::record_commit(&self.channel, outcome, took);
            if let Err(e) = &result {
                tracing::warn!(
                    channel = %self.channel,
                    table = %self.target.name(),
                    batches = accepted.len(),
                    rows = accepted.iter().map(|b| b.num_rows).sum::<u64>(),
                    commit_latency_ms = took.as_millis() as u64,
                    error = %e,
                    "commit failed"
                );
            }
            report.snapshot_id = result?;
            self.epoch_in_table.store(true, Ordering::Relaxed);
            self.log_committed(&accepted, took, report.snapshot_id)
                .await;
            report.committed = accepted.len();
            report.rows = accepted.iter().map(|b| b.num_rows).sum();
            report.dead_lettered = accepted.iter().map(|b| b.num_dead_lettered).sum();
        }

        // From here on the table carries this committer's epoch and every decision is final.
        let mut dead = pick(&pending, &plan, BatchDecision::Dead);
        let anyway = loaded.committed_anyway(&dead).await?;
        if !anyway.is_empty() {
            let (committed_anyway, really_dead): (Vec<_>, Vec<_>) =
                dead.into_iter().partition(|b| anyway.contains(&b.batch_id));
            recovered.extend(committed_anyway);
            dead = really_dead;
        }
        if !dead.is_empty() {
            // Discarding deletes files, which no table fence guards: only the holder of the
            // committer lease may (found by the fresh review of issue 43: a stale committer whose
            // table still carried its epoch rejected a batch the new committer then committed,
            // its files gone). A lease counter past this epoch means another worker took over.
            if let Some(lease) = self
                .leases
                .get_lease(&self.channel, &LeaseKey::Committer)
                .await?
            {
                if lease.lease_counter != self.epoch {
                    return Err(CommitError::Fenced {
                        table_epoch: lease.lease_counter,
                        own: self.epoch,
                    });
                }
            }
        }
        let mut committed_ids: Vec<Uuid> = Vec::new();
        for b in accepted.iter().chain(recovered.iter()) {
            loaded.publish(b).await?;
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
            loaded.discard(b).await;
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
                // A hint only: the table (or the delivered item) is authoritative; a failed
                // write is repaired by the next idle round.
                let written = self
                    .leases
                    .set_checkpoint_hint(&self.channel, &LeaseKey::Shard(shard.clone()), pos)
                    .await;
                if written.is_err() {
                    self.hint_write_failed.store(true, Ordering::Relaxed);
                }
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
                table = %self.target.name(),
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
                .map(|s| format!("{}:{}", s.shard, s.range))
                .collect();
            tracing::info!(
                channel = %self.channel,
                table = %self.target.name(),
                batch_id = %b.batch_id,
                worker_id = %b.worker_id,
                shards = %ranges.join(" "),
                rows = b.num_rows,
                dlq_rows = b.num_dead_lettered,
                files = b.files.len(),
                bytes = b.data_bytes,
                commit_latency_ms = took.as_millis() as u64,
                snapshot_id = snapshot_id.unwrap_or(-1),
                "batch committed"
            );
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
