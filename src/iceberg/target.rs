//! The committer's side of the Iceberg destination (docs/design.md, protocol steps 4–6): the
//! accepted batches' data files go in as one fast append, in the same transaction as
//! `floe.checkpoints`, `floe.last-commit-id` and `floe.committer-epoch`, fenced to the snapshot
//! the round validated ([`FencedCatalog`]); an unknown outcome is decided by reloading the table
//! and reading `floe.last-commit-id`. After the commit, the batches' staged DLQ objects are
//! published; a rejected batch's data files and staged DLQ object are deleted.
//!
//! An upsert table ([`IcebergTarget::with_upsert`]) commits a row delta instead of the fast
//! append: the batches' data files and, for every key they replace or delete, a delete by
//! position of the key's previous row ([`super::deletes::upsert`]), with the same properties,
//! summary and expiry, swapped in on condition that the table is still at the round's snapshot.
//! The batches' deleted-keys files are deleted once the commit landed.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, OnceLock};

use async_trait::async_trait;
use iceberg::table::Table;
use iceberg::transaction::{ApplyTransactionAction, Transaction};
use iceberg::{Catalog, ErrorKind, TableIdent};
use tokio_util::task::TaskTracker;
use uuid::Uuid;

use super::deletes::upsert::{PrepareError, Upsert, UpsertBatch};
use super::deletes::{commit_row_delta, RowDeltaError};
use super::fence::{DeletionFence, FencedCatalog};
use super::maintenance::{Maintainer, MaintenanceReport};
use super::table::{check_same_table, referenced_data_files};
use super::table_state::{
    commit_properties, commit_summary, committed_batch_ids, last_commit_id, table_checkpoints,
    table_epoch,
};
use super::writer::WriterSettings;
use super::writer::{data_file_paths, parse_data_files};
use crate::catalog::swap::TableSwap;
use crate::config::MaintenanceConfig;
use crate::destination::{CommitError, CommitTarget, LoadedTarget};
use crate::dlq::Dlq;
use crate::lease::LeaseStore;
use crate::model::{BatchFiles, Checkpoints, PendingBatch};
use crate::telemetry;
use crate::time::now_ms;

/// The channel's table, as the committer writes it.
pub struct IcebergTarget {
    channel: String,
    ident: TableIdent,
    catalog: FencedCatalog,
    dlq: Dlq,
    /// Snapshot expiry in the data commits (`[channel.destination.maintenance]`).
    maintenance: MaintenanceConfig,
    /// The catalog's swap for replace and delete snapshots (`None`: expiry only).
    swap: Option<Arc<dyn TableSwap>>,
    /// The writer of compaction outputs (`None`: no compaction).
    writer: Option<WriterSettings>,
    /// Compaction, manifest rewrite, record expiration.
    maintainer: Maintainer,
    /// The maintenance planner's clock (`None`: the wall clock).
    clock: Option<super::maintenance::Clock>,
    /// How the orphan sweep lists the table location (`None`: no sweep).
    lister: Option<super::orphans::FileLister>,
    /// The table's uuid at the first load: a table replaced under the name is never written.
    uuid: OnceLock<Uuid>,
    /// The lease store whose committer lease the deletion fence renews (`None`: the fence
    /// checks the table's epoch only).
    leases: Option<Arc<dyn LeaseStore>>,
    /// Whether the deletion fence found this committer's epoch lost (for good).
    fence_lost: Arc<AtomicBool>,
    /// The cleanup tasks (deletions after commits) still running.
    cleanup: TaskTracker,
    /// An upsert table's key and key index (`None`: the table is appended to).
    upsert: Option<Upsert>,
}

impl IcebergTarget {
    /// The committer's side of channel `channel`'s table `ident` in `catalog`, publishing DLQ
    /// objects to `dlq`.
    pub fn new(
        channel: &str,
        ident: TableIdent,
        catalog: Arc<dyn Catalog>,
        dlq: impl Into<Dlq>,
    ) -> Self {
        IcebergTarget {
            channel: channel.to_string(),
            ident,
            catalog: FencedCatalog::new(catalog, channel),
            dlq: dlq.into(),
            maintenance: MaintenanceConfig::default(),
            swap: None,
            writer: None,
            maintainer: Maintainer::new(channel, MaintenanceConfig::default(), None, None),
            clock: None,
            lister: None,
            uuid: OnceLock::new(),
            leases: None,
            fence_lost: Arc::new(AtomicBool::new(false)),
            cleanup: TaskTracker::new(),
            upsert: None,
        }
    }

    /// The same target committing an upsert table whose key is the top-level columns `key`
    /// (`destination.key`): each commit deletes, by position, the previous row of every key its
    /// batches write and the row of every key they delete. The names are resolved to field ids
    /// against the table's current schema at each commit (an unknown column: `Incompatible`).
    /// Commits go through the catalog's swap ([`IcebergTarget::with_rewrites`]); without one
    /// they are refused (`Incompatible`).
    pub fn with_upsert(mut self, key: Vec<String>) -> Self {
        self.upsert = Some(Upsert::new(&self.channel, key));
        self
    }

    /// [`IcebergTarget::with_upsert`] when `key` is `Some` (an upsert table's key), the same
    /// target otherwise.
    pub fn with_upsert_if(self, key: Option<Vec<String>>) -> Self {
        match key {
            Some(key) => self.with_upsert(key),
            None => self,
        }
    }

    /// The same target deleting files (expired snapshots', dropped metadata, orphans,
    /// abandoned compaction outputs) only after renewing the committer lease in `leases` with
    /// its epoch as counter ([`DeletionFence`]); without it only the table's epoch is checked.
    pub fn with_lease_fence(mut self, leases: Arc<dyn LeaseStore>) -> Self {
        self.leases = Some(leases);
        self
    }

    /// The fence every deletion of the committer of `epoch` goes through.
    fn fence(&self, epoch: u64) -> DeletionFence {
        let fence = DeletionFence::new(
            &self.channel,
            self.ident.clone(),
            self.catalog.inner().clone(),
            epoch,
        )
        .sharing(self.fence_lost.clone());
        match &self.leases {
            Some(leases) => fence.with_leases(leases.clone()),
            None => fence,
        }
    }

    /// Waits for the deletions started after commits to end (for tests and `floe maintain`).
    pub async fn wait_for_cleanup(&self) {
        self.cleanup.close();
        self.cleanup.wait().await;
        self.cleanup.reopen();
    }

    /// The same target maintaining the table as `maintenance` says (default: on, snapshots
    /// older than 1 h expired, at least 10 kept; compaction and the other rewrites need
    /// [`IcebergTarget::with_rewrites`]).
    pub fn with_maintenance(mut self, maintenance: MaintenanceConfig) -> Self {
        self.maintenance = maintenance;
        self.rebuild_maintainer()
    }

    /// The same target committing compaction, manifest rewrite and record expiration through
    /// `swap` (the catalog's, [`crate::catalog::open_channel_catalog_and_swap`]; `None`: not on this
    /// catalog), compaction outputs written with `writer` (the workers' settings: compression,
    /// target file size, file name prefix).
    pub fn with_rewrites(
        mut self,
        swap: Option<Arc<dyn TableSwap>>,
        writer: WriterSettings,
    ) -> Self {
        self.swap = swap;
        self.writer = Some(writer);
        self.rebuild_maintainer()
    }

    /// The same target whose maintenance decides which hours are closed or expired by `clock`
    /// (`floe bench commits` replays a stream's time faster than it passes).
    pub fn with_clock(mut self, clock: super::maintenance::Clock) -> Self {
        self.clock = Some(clock);
        self.rebuild_maintainer()
    }

    /// The same target sweeping orphans (`orphan_sweep`), listing the table location with
    /// `lister` (the local file system, or S3 with the `[aws]` client).
    pub fn with_orphan_sweep(mut self, lister: super::orphans::FileLister) -> Self {
        self.lister = Some(lister);
        self.rebuild_maintainer()
    }

    /// [`IcebergTarget::with_orphan_sweep`] when there is a lister.
    pub fn with_orphan_sweep_if(self, lister: Option<super::orphans::FileLister>) -> Self {
        match lister {
            Some(lister) => self.with_orphan_sweep(lister),
            None => self,
        }
    }

    fn rebuild_maintainer(mut self) -> Self {
        let mut maintainer = Maintainer::new(
            &self.channel,
            self.maintenance,
            self.swap.clone(),
            self.writer.clone(),
        );
        if let Some(lister) = &self.lister {
            maintainer = maintainer.with_lister(lister.clone());
        }
        self.maintainer = match &self.clock {
            Some(clock) => maintainer.with_clock(clock.clone()),
            None => maintainer,
        };
        self
    }

    /// The maintainer (for tests and `floe maintain`: to wait for a compaction task).
    pub fn maintainer(&self) -> &Maintainer {
        &self.maintainer
    }
}

impl IcebergTarget {
    /// After this committer's commit from `before_table` to `after` (the table as that commit
    /// left it, never a reload: a reload may show a newer committer's table): counts and logs
    /// the snapshots it expired and, off the committer's loop, deletes through the committer of
    /// `epoch`'s [`DeletionFence`] (one check for all of them) the files that only expired
    /// snapshots reached:
    /// - each expired snapshot's manifest list (it belongs to that snapshot alone);
    /// - where an expired snapshot's child is not an `append` (a replace or delete, floe's own
    ///   maintenance or another engine's): the manifests of the expired snapshot the child no
    ///   longer lists, and the data files the child's own manifests mark `DELETED`;
    /// - the metadata files `before_table`'s metadata log named that `after`'s no longer does
    ///   (the log keeps the newest `write.metadata.previous-versions-max`, 100 by default) —
    ///   what Java's `write.metadata.delete-after-commit.enabled` does — only where floe writes
    ///   the metadata files itself (SQL, Glue: [`TableSwap::client_writes_metadata`]) and
    ///   maintenance is on; a REST server or S3 Tables owns its metadata files.
    ///
    /// History is linear (floe writes `main` only) and a file, once removed, never comes back,
    /// so a file an expired snapshot reached that its child dropped is reached by no retained
    /// snapshot: retained snapshots are the newest ones, descendants of that child. Only files
    /// under the table location are deleted.
    pub(crate) fn clean_up_after_commit(&self, before_table: &Table, after: &Table, epoch: u64) {
        let retained: HashSet<i64> = after
            .metadata()
            .snapshots()
            .map(|s| s.snapshot_id())
            .collect();
        let before = before_table.metadata();
        let expired: Vec<_> = before
            .snapshots()
            .filter(|s| !retained.contains(&s.snapshot_id()))
            .cloned()
            .collect();
        let channel = self.channel.clone();
        telemetry::set_table_snapshots(&channel, retained.len());
        if !expired.is_empty() {
            telemetry::record_snapshots_expired(&channel, expired.len() as u64);
            tracing::info!(channel = %channel, table = %self.ident, expired = expired.len(), retained = retained.len(), "snapshots expired");
        }
        let metadata = self.dropped_metadata(before_table, after);
        if expired.is_empty() && metadata.is_empty() {
            return;
        }
        // (expired snapshot, its child) where the child removed something.
        let pairs: Vec<_> = expired
            .iter()
            .filter_map(|e| {
                let child = before
                    .snapshots()
                    .find(|c| c.parent_snapshot_id() == Some(e.snapshot_id()))?;
                (child.summary().operation != iceberg::spec::Operation::Append)
                    .then(|| (e.clone(), child.clone()))
            })
            .collect();
        let table = before_table.clone();
        let fence = self.fence(epoch);
        self.cleanup.spawn(async move {
            let file_io = table.file_io();
            let location = table.metadata().location().to_string();
            // What each child removed is read first: it needs the expired manifest lists.
            let mut removed = Vec::new();
            for (e, child) in &pairs {
                match removed_by(&table, e, child).await {
                    Ok(r) => removed.push(r),
                    Err(err) => {
                        tracing::warn!(channel = %channel, snapshot_id = child.snapshot_id(), error = %err, "could not read what a snapshot removed: its files stay (orphans now)");
                    }
                }
            }
            let lists: HashSet<String> = expired
                .iter()
                .map(|e| e.manifest_list().to_string())
                .collect();
            let manifests: HashSet<String> = removed
                .iter()
                .flat_map(|r| r.manifests.iter())
                .filter(|p| p.starts_with(&location))
                .cloned()
                .collect();
            let data_files: HashMap<String, u64> = removed
                .iter()
                .flat_map(|r| r.data_files.iter())
                .filter(|(p, _)| p.starts_with(&location))
                .cloned()
                .collect();
            let paths: Vec<String> = lists
                .iter()
                .chain(&manifests)
                .chain(data_files.keys())
                .chain(&metadata)
                .cloned()
                .collect();
            let deleted = fence
                .delete(file_io, "files of expired snapshots, dropped metadata", &paths)
                .await;
            let count = |kind: &dyn Fn(&String) -> bool| deleted.iter().filter(|p| kind(p)).count() as u64;
            let lists_deleted = count(&|p| lists.contains(p));
            let manifests_deleted = count(&|p| manifests.contains(p));
            let data_deleted = count(&|p| data_files.contains_key(p));
            let bytes: u64 = deleted.iter().filter_map(|p| data_files.get(p)).sum();
            telemetry::record_maintenance_files_deleted(&channel, "manifest_list", lists_deleted);
            telemetry::record_maintenance_files_deleted(&channel, "manifest", manifests_deleted);
            telemetry::record_maintenance_files_deleted(&channel, "data_file", data_deleted);
            telemetry::record_maintenance_bytes_deleted(&channel, bytes);
            telemetry::record_maintenance_files_deleted(
                &channel,
                "metadata",
                count(&|p| metadata.contains(p)),
            );
            if manifests_deleted + data_deleted > 0 {
                tracing::info!(channel = %channel, manifests = manifests_deleted, data_files = data_deleted, bytes, "files of expired snapshots deleted");
            }
        });
    }

    /// The metadata files `before`'s metadata log named that `after`'s no longer does, where
    /// floe writes them and maintenance is on (see [`IcebergTarget::clean_up_after_commit`]).
    fn dropped_metadata(&self, before: &Table, after: &Table) -> Vec<String> {
        if !self.maintenance.enabled
            || !self
                .swap
                .as_ref()
                .is_some_and(|s| s.client_writes_metadata())
        {
            return Vec::new();
        }
        let kept: HashSet<&str> = after
            .metadata()
            .metadata_log()
            .iter()
            .map(|m| m.metadata_file.as_str())
            .chain(after.metadata_location())
            .collect();
        before
            .metadata()
            .metadata_log()
            .iter()
            .map(|m| m.metadata_file.as_str())
            .chain(before.metadata_location())
            .filter(|f| !kept.contains(f))
            .map(str::to_string)
            .collect()
    }

    /// The table, refused (`Unavailable`) when it is not the table first loaded (replaced
    /// under its name).
    async fn load_same_table(&self) -> Result<Table, CommitError> {
        let table = self
            .catalog
            .load_unfenced(&self.ident)
            .await
            .map_err(|e| CommitError::unavailable("load table", e))?;
        let first = self.uuid.get_or_init(|| table.metadata().uuid());
        check_same_table(&self.ident, first, &table)
            .map_err(|e| CommitError::unavailable("load table", e))?;
        Ok(table)
    }
}

#[async_trait]
impl CommitTarget for IcebergTarget {
    fn name(&self) -> String {
        self.ident.to_string()
    }

    async fn load(&self) -> Result<Box<dyn LoadedTarget + '_>, CommitError> {
        let table = self.load_same_table().await?;
        Ok(Box::new(LoadedTable {
            target: self,
            table,
        }))
    }

    fn max_batch_age(&self) -> Option<std::time::Duration> {
        self.maintainer.max_batch_age()
    }

    async fn maintain(
        &self,
        epoch: u64,
        batches: &dyn crate::lease::BatchStore,
    ) -> Result<(), CommitError> {
        // Nothing due (the usual case between looks): no catalog call at all.
        if !self.maintainer.due().await {
            return Ok(());
        }
        let table = match self.table_at_epoch(epoch).await {
            Ok(Some(table)) => table,
            Ok(None) => return Ok(()),
            Err(e) => {
                self.maintainer.look_failed().await;
                return Err(e);
            }
        };
        let fence = self.fence(epoch);
        self.maintainer
            .sweep_if_due(&table, batches, false, &fence)
            .await
            .map_err(|e| CommitError::unavailable("sweep orphans", e))?;
        self.maintain_table(&table, &fence).await.map(|_| ())
    }
}

impl IcebergTarget {
    /// The table, if it carries `epoch`: maintenance acts only on the table as this committer
    /// left it (a newer epoch means the lease moved).
    async fn table_at_epoch(&self, epoch: u64) -> Result<Option<Table>, CommitError> {
        let table = self.load_same_table().await?;
        Ok((table_epoch(&table) == epoch).then_some(table))
    }

    async fn maintain_table(
        &self,
        table: &Table,
        fence: &DeletionFence,
    ) -> Result<MaintenanceReport, CommitError> {
        let mut report = self.maintain_step(table, fence).await?;
        if self.upsert.is_some() && report.compaction_started {
            // Every round of an upsert table deletes rows of older files: a compaction running
            // beside the rounds is overtaken by the next delete of one of its inputs and given
            // up, so a table updated everywhere would never be compacted. Its committer waits
            // for the compaction and commits it before its next round instead (rounds wait the
            // compaction's time).
            if let Some(failure) = self.maintainer.wait_for_compaction().await {
                tracing::warn!(channel = %self.channel, table = %self.ident, error = %failure, "compaction of an upsert table failed; planned again at the next look");
                return Ok(report);
            }
            let base = report.table.clone().unwrap_or_else(|| table.clone());
            let committed = self.maintain_step(&base, fence).await?;
            report.snapshots.extend(committed.snapshots);
            report.tasks.extend(committed.tasks);
            report.files_removed += committed.files_removed;
            report.files_added += committed.files_added;
            report.snapshot_id = committed.snapshot_id.or(report.snapshot_id);
            report.table = committed.table.or(report.table);
        }
        Ok(report)
    }

    /// One [`Maintainer::maintain`] look at `table`, and the cleanup after what it committed.
    async fn maintain_step(
        &self,
        table: &Table,
        fence: &DeletionFence,
    ) -> Result<MaintenanceReport, CommitError> {
        let report = self
            .maintainer
            .maintain(table, fence)
            .await
            .map_err(|e| CommitError::unavailable("maintain the table", e))?;
        if let Some(after) = &report.table {
            // A maintenance commit also expires (a table that only gets maintenance commits,
            // with no data arriving, would keep every one of its snapshots otherwise).
            self.clean_up_after_commit(table, after, fence.epoch());
        }
        Ok(report)
    }

    /// One maintenance look now (`floe maintain`): what [`CommitTarget::maintain`] does after
    /// a round, without the sweep, returning what it did (nothing when the table does not carry
    /// `epoch`).
    ///
    /// Errors: `Unavailable`.
    pub async fn maintain_once(&self, epoch: u64) -> Result<MaintenanceReport, CommitError> {
        self.maintainer.look_now().await;
        match self.table_at_epoch(epoch).await? {
            Some(table) => self.maintain_table(&table, &self.fence(epoch)).await,
            None => Ok(MaintenanceReport::default()),
        }
    }

    /// Starts an orphan sweep now (`floe maintain`); `false` when the sweep is off or the table
    /// does not carry this committer's epoch. Wait for it with [`Maintainer::wait_for_sweep`].
    ///
    /// Errors: `Unavailable`.
    pub async fn sweep_now(
        &self,
        epoch: u64,
        batches: &dyn crate::lease::BatchStore,
    ) -> Result<bool, CommitError> {
        let Some(table) = self.table_at_epoch(epoch).await? else {
            return Ok(false);
        };
        self.maintainer
            .sweep_if_due(&table, batches, true, &self.fence(epoch))
            .await
            .map_err(|e| CommitError::unavailable("sweep orphans", e))
    }
}

/// The table as one round loaded it.
struct LoadedTable<'a> {
    target: &'a IcebergTarget,
    table: Table,
}

impl LoadedTable<'_> {
    /// The error for a batch whose data files do not parse against the table as loaded. A
    /// worker writes files of a new schema only after its schema change is committed
    /// (`evolution = "compatible"`, [`super::evolve`]), so when the table's schema moved since
    /// this round loaded it, the files are of the newer schema: a conflict, re-planned on the
    /// fresh table. Otherwise the batch does not fit the table.
    async fn unparsable(&self, batch_id: Uuid, e: iceberg::Error) -> CommitError {
        let loaded = self.table.metadata().current_schema_id();
        match self.target.catalog.inner().load_table(&self.target.ident).await {
            Ok(fresh) if fresh.metadata().current_schema_id() != loaded => {
                CommitError::Conflict(format!(
                    "the table's schema changed (schema {loaded} -> {}) since the round was planned",
                    fresh.metadata().current_schema_id()
                ))
            }
            Ok(_) => CommitError::Incompatible(format!(
                "batch {batch_id}: its data files do not fit the table: {e}"
            )),
            Err(load) => CommitError::unavailable("load table", load),
        }
    }
}

impl LoadedTable<'_> {
    /// After a commit whose outcome is unknown (`error`): the table as reloaded if it carries
    /// `commit_id` as `floe.last-commit-id` (the commit landed).
    ///
    /// Errors: `OutcomeUnknown` when the reload fails or shows another commit id.
    async fn reconcile(
        &self,
        commit_id: Uuid,
        error: &(dyn std::fmt::Display + Sync),
    ) -> Result<Table, CommitError> {
        let (channel, ident) = (&self.target.channel, &self.target.ident);
        tracing::warn!(channel = %channel, table = %ident, error = %error, %commit_id, "commit outcome unknown, reconciling");
        let fresh = self
            .target
            .catalog
            .load_unfenced(ident)
            .await
            .map_err(|e2| CommitError::OutcomeUnknown(format!("{error}; reload failed: {e2}")))?;
        if last_commit_id(fresh.metadata().properties()) == Some(commit_id) {
            Ok(fresh)
        } else {
            Err(CommitError::OutcomeUnknown(error.to_string()))
        }
    }

    /// [`LoadedTarget::commit`] of an append table: the batches' data files, snapshot expiry
    /// and the checkpoints in one fenced `append` snapshot.
    async fn commit_append(
        &self,
        accepted: &[&PendingBatch],
        recovered: &[&PendingBatch],
        checkpoints: &Checkpoints,
        epoch: u64,
        commit_id: Uuid,
    ) -> Result<Option<i64>, CommitError> {
        let table = &self.table;
        let mut files = Vec::new();
        for b in accepted {
            let BatchFiles::Iceberg { data_files, .. } = &b.files else {
                return Err(CommitError::Incompatible(format!(
                    "batch {} is a {} batch, not an Iceberg one",
                    b.batch_id,
                    b.files.kind()
                )));
            };
            match parse_data_files(table, data_files) {
                Ok(parsed) => files.extend(parsed),
                Err(e) => return Err(self.unparsable(b.batch_id, e).await),
            }
        }
        let summary = commit_summary(commit_id, accepted);
        let unfinished: Vec<Uuid> = accepted
            .iter()
            .chain(recovered)
            .map(|b| b.batch_id)
            .collect();
        let mut tx = Transaction::new(table);
        // Snapshot expiry rides in the same fenced commit (same epoch, same compare-and-swap),
        // applied before the append so that its requirement (main is the validated snapshot) is
        // the append's own. It only removes metadata; the files only expired snapshots reached
        // are deleted after the commit landed.
        let expire = super::maintenance::expirable(table, &self.target.maintenance, now_ms());
        if !expire.is_empty() {
            tx = tx
                .expire_snapshots()
                .expire_snapshot_ids(expire.iter().copied())
                // Explicit ids only: the table's own `history.expire.*` age never applies.
                .expire_older_than_ms(i64::MIN)
                .apply(tx)
                .map_err(|e| CommitError::unavailable("build the commit", e))?;
        }
        // No duplicate check: it reads every manifest of the current snapshot on every commit
        // (commit time growing with the table's age), and floe cannot add a file twice: every
        // data file name carries its batch's UUIDv7 (`<channel>-<batch id>-<n>.parquet`; the files of
        // rows sealed by a schema change carry a fresh UUIDv7 instead), and a
        // batch's range is accepted only if it continues the checkpoint this same fenced commit
        // advances, so a committed batch is never accepted again (docs/design.md, step 3).
        let tx = tx
            .fast_append()
            .with_check_duplicate(false)
            // Manifests and the manifest list are named after floe's commit id.
            .set_commit_uuid(commit_id)
            .add_data_files(files)
            .set_snapshot_properties(summary)
            .apply(tx)
            .map_err(|e| CommitError::unavailable("build the commit", e))?;
        let tx = commit_properties(checkpoints, commit_id, epoch, &unfinished)
            .into_iter()
            .fold(tx.update_table_properties(), |u, (k, v)| u.set(k, v))
            .apply(tx)
            .map_err(|e| CommitError::unavailable("build the commit", e))?;
        let catalog = &self.target.catalog;
        let ident = &self.target.ident;
        catalog.set_fence(ident.clone(), table.metadata().current_snapshot_id());
        let result = tx.commit(catalog).await;
        catalog.clear_fence();
        match result {
            Ok(t) => {
                self.target.clean_up_after_commit(&self.table, &t, epoch);
                Ok(t.metadata().current_snapshot_id())
            }
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
                let fresh = self.reconcile(commit_id, &e).await?;
                self.target
                    .clean_up_after_commit(&self.table, &fresh, epoch);
                Ok(fresh.metadata().current_snapshot_id())
            }
        }
    }

    /// The commit of an upsert table: one row delta (see the module docs).
    async fn commit_upsert(
        &self,
        upsert: &Upsert,
        accepted: &[&PendingBatch],
        recovered: &[&PendingBatch],
        checkpoints: &Checkpoints,
        epoch: u64,
        commit_id: Uuid,
    ) -> Result<Option<i64>, CommitError> {
        let Some(swap) = &self.target.swap else {
            return Err(CommitError::Incompatible(
                "an upsert table commits through the catalog's table swap, which this catalog lacks"
                    .into(),
            ));
        };
        let table = &self.table;
        let mut batches = Vec::with_capacity(accepted.len());
        for b in accepted {
            let BatchFiles::Iceberg {
                data_files,
                deleted_keys,
                ..
            } = &b.files
            else {
                return Err(CommitError::Incompatible(format!(
                    "batch {} is a {} batch, not an Iceberg one",
                    b.batch_id,
                    b.files.kind()
                )));
            };
            let data_files = match parse_data_files(table, data_files) {
                Ok(parsed) => parsed,
                Err(e) => return Err(self.unparsable(b.batch_id, e).await),
            };
            batches.push(UpsertBatch {
                data_files,
                deleted_keys: deleted_keys.clone(),
            });
        }
        let mut prepared = upsert.prepare(table, &batches).await.map_err(|e| match e {
            PrepareError::Incompatible(m) => CommitError::Incompatible(m),
            PrepareError::Unavailable { what, source } => CommitError::unavailable(what, source),
        })?;
        let unfinished: Vec<Uuid> = accepted
            .iter()
            .chain(recovered)
            .map(|b| b.batch_id)
            .collect();
        prepared.delta.properties = commit_properties(checkpoints, commit_id, epoch, &unfinished)
            .into_iter()
            .collect();
        prepared.delta.summary = commit_summary(commit_id, accepted);
        prepared.delta.expire_snapshot_ids =
            super::maintenance::expirable(table, &self.target.maintenance, now_ms());
        let deletes = prepared.num_deletes();
        let result =
            commit_row_delta(&prepared.base, &prepared.delta, swap.as_ref(), commit_id).await;
        let (after, snapshot_id) = match result {
            Ok(c) => (c.table, c.snapshot_id),
            Err(RowDeltaError::Conflict { reason, .. }) => {
                return Err(CommitError::Conflict(reason))
            }
            Err(RowDeltaError::Invalid(m)) => return Err(CommitError::Incompatible(m)),
            Err(RowDeltaError::Unavailable { what, source }) => {
                return Err(CommitError::unavailable(what, source))
            }
            Err(e @ RowDeltaError::OutcomeUnknown { snapshot_id, .. }) => {
                (self.reconcile(commit_id, &e).await?, snapshot_id)
            }
        };
        prepared.committed(snapshot_id);
        tracing::info!(channel = %self.target.channel, table = %self.target.ident, ?snapshot_id, batches = accepted.len(), rows_deleted = deletes, "upsert committed");
        self.target.clean_up_after_commit(table, &after, epoch);
        let key_files: Vec<String> = accepted.iter().filter_map(|b| deleted_keys(b)).collect();
        if !key_files.is_empty() {
            let (io, channel) = (after.file_io().clone(), self.target.channel.clone());
            self.target.cleanup.spawn(async move {
                for path in key_files {
                    if let Err(e) = io.delete(&path).await {
                        tracing::warn!(channel = %channel, path, error = %e, "could not delete a committed batch's deleted-keys file (the orphan sweep's now)");
                    }
                }
            });
        }
        Ok(after.metadata().current_snapshot_id())
    }
}

/// What snapshot `child` removed from its parent `parent`.
struct Removed {
    /// Manifests `parent` lists and `child` does not.
    manifests: Vec<String>,
    /// Data files (path, bytes) `child`'s own manifests mark `DELETED`.
    data_files: Vec<(String, u64)>,
}

async fn removed_by(
    table: &Table,
    parent: &iceberg::spec::SnapshotRef,
    child: &iceberg::spec::SnapshotRef,
) -> iceberg::Result<Removed> {
    let old = table.manifest_list_reader(parent).load().await?;
    let new = table.manifest_list_reader(child).load().await?;
    let kept: HashSet<&str> = new
        .entries()
        .iter()
        .map(|m| m.manifest_path.as_str())
        .collect();
    let manifests = old
        .entries()
        .iter()
        .map(|m| m.manifest_path.clone())
        .filter(|p| !kept.contains(p.as_str()))
        .collect();
    let mut data_files = Vec::new();
    for m in new
        .entries()
        .iter()
        .filter(|m| m.added_snapshot_id == child.snapshot_id() && m.has_deleted_files())
    {
        let manifest = m.load_manifest(table.file_io()).await?;
        for entry in manifest.entries() {
            if entry.status() == iceberg::spec::ManifestStatus::Deleted
                && entry.snapshot_id() == Some(child.snapshot_id())
            {
                data_files.push((entry.file_path().to_string(), entry.file_size_in_bytes()));
            }
        }
    }
    Ok(Removed {
        manifests,
        data_files,
    })
}

/// The deleted-keys file of an upsert table's batch, if any.
fn deleted_keys(b: &PendingBatch) -> Option<String> {
    match &b.files {
        BatchFiles::Iceberg { deleted_keys, .. } => deleted_keys.clone(),
        BatchFiles::Raw { .. } => None,
    }
}

/// The data files of an Iceberg batch (none for a batch of another kind).
fn iceberg_files(b: &PendingBatch) -> (&[String], Option<&String>) {
    match &b.files {
        BatchFiles::Iceberg {
            data_files,
            dlq_staged,
            ..
        } => (data_files, dlq_staged.as_ref()),
        BatchFiles::Raw { .. } => (&[], None),
    }
}

#[async_trait]
impl LoadedTarget for LoadedTable<'_> {
    fn epoch(&self) -> u64 {
        table_epoch(&self.table)
    }

    fn checkpoints(&self) -> Result<Checkpoints, CommitError> {
        table_checkpoints(&self.table).map_err(|e| CommitError::Incompatible(e.to_string()))
    }

    fn committed_batch_ids(&self) -> HashSet<Uuid> {
        committed_batch_ids(&self.table)
    }

    async fn commit(
        &self,
        accepted: &[&PendingBatch],
        recovered: &[&PendingBatch],
        checkpoints: &Checkpoints,
        epoch: u64,
        commit_id: Uuid,
    ) -> Result<Option<i64>, CommitError> {
        let committed = match &self.target.upsert {
            Some(upsert) => {
                self.commit_upsert(upsert, accepted, recovered, checkpoints, epoch, commit_id)
                    .await
            }
            None => {
                self.commit_append(accepted, recovered, checkpoints, epoch, commit_id)
                    .await
            }
        };
        if committed.is_ok() {
            // New rows, new files: maintenance looks at the table again at its interval.
            self.target.maintainer.note_commit().await;
        }
        committed
    }
    async fn committed_anyway(&self, dead: &[&PendingBatch]) -> Result<HashSet<Uuid>, CommitError> {
        if dead.is_empty() {
            return Ok(HashSet::new());
        }
        // A batch committed in a snapshot that maintenance has since expired is no longer named
        // by any snapshot summary: before deleting files, ask the table itself.
        let referenced: HashSet<String> = referenced_data_files(&self.table)
            .await
            .map_err(|e| CommitError::unavailable("read the table's manifests", e))?
            .into_iter()
            .collect();
        Ok(dead
            .iter()
            .filter(|b| {
                data_file_paths(iceberg_files(b).0)
                    .iter()
                    .any(|p| referenced.contains(p))
            })
            .map(|b| b.batch_id)
            .collect())
    }

    async fn publish(&self, b: &PendingBatch) -> Result<(), CommitError> {
        let channel = self.target.channel.as_str();
        let Some(staged) = iceberg_files(b).1 else {
            return Ok(());
        };
        let published = self.target.dlq.publish(b.batch_id, staged).await;
        telemetry::record_dlq_write(channel, "publish", published.is_ok());
        match published {
            Ok(()) => Ok(()),
            // Staged object gone and never published: its entries are lost; say so loudly, but
            // do not stop delivering every later batch.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                tracing::error!(channel, batch_id = %b.batch_id, staged, num_dead_lettered = b.num_dead_lettered, "staged DLQ object is missing: its entries cannot be published");
                Ok(())
            }
            Err(e) => Err(CommitError::unavailable("publish the staged DLQ object", e)),
        }
    }

    async fn discard(&self, b: &PendingBatch) {
        let channel = self.target.channel.as_str();
        let (data_files, dlq_staged) = iceberg_files(b);
        for path in data_file_paths(data_files)
            .into_iter()
            .chain(deleted_keys(b))
        {
            if let Err(e) = self.table.file_io().delete(&path).await {
                tracing::warn!(channel, path, error = %e, "could not delete a rejected batch's data file or deleted-keys file");
            }
        }
        if let Some(staged) = dlq_staged {
            self.target.dlq.discard(staged).await;
        }
    }
}
