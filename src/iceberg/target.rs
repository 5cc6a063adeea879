//! The committer's side of the Iceberg destination (docs/design.md, protocol steps 4–6): the
//! accepted batches' data files go in as one fast append, in the same transaction as
//! `floe.checkpoints`, `floe.last-commit-id` and `floe.committer-epoch`, fenced to the snapshot
//! the round validated ([`FencedCatalog`]); an unknown outcome is decided by reloading the table
//! and reading `floe.last-commit-id`. After the commit, the batches' staged DLQ objects are
//! published; a rejected batch's data files and staged DLQ object are deleted.

use std::collections::HashSet;
use std::sync::{Arc, OnceLock};

use async_trait::async_trait;
use iceberg::table::Table;
use iceberg::transaction::{ApplyTransactionAction, Transaction};
use iceberg::{Catalog, ErrorKind, TableIdent};
use uuid::Uuid;

use super::fence::FencedCatalog;
use super::table::{check_same_table, referenced_data_files};
use super::table_state::{
    commit_properties, commit_summary, committed_batch_ids, last_commit_id, table_checkpoints,
    table_epoch,
};
use super::writer::{data_file_paths, parse_data_files};
use crate::config::MaintenanceConfig;
use crate::destination::{CommitError, CommitTarget, LoadedTarget};
use crate::dlq::Dlq;
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
    /// The table's uuid at the first load: a table replaced under the name is never written.
    uuid: OnceLock<Uuid>,
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
            catalog: FencedCatalog::new(catalog),
            dlq: dlq.into(),
            maintenance: MaintenanceConfig::default(),
            uuid: OnceLock::new(),
        }
    }

    /// The same target maintaining the table as `maintenance` says (default: on, snapshots
    /// older than 1 h expired, at least 10 kept).
    pub fn with_maintenance(mut self, maintenance: MaintenanceConfig) -> Self {
        self.maintenance = maintenance;
        self
    }
}

/// The snapshots of `table` that expiry under `m` would remove at `now_ms` (never the current
/// one, never one of the `min_snapshots` newest): the ones older than the retention.
fn expirable(table: &Table, m: &MaintenanceConfig, now_ms: i64) -> Vec<i64> {
    if !m.enabled {
        return Vec::new();
    }
    let metadata = table.metadata();
    let current = metadata.current_snapshot_id();
    let mut snapshots: Vec<_> = metadata.snapshots().collect();
    // Newest first; snapshots() comes in no particular order.
    snapshots.sort_by_key(|s| std::cmp::Reverse((s.timestamp_ms(), s.sequence_number())));
    let cutoff = now_ms.saturating_sub(m.snapshot_retention.as_millis() as i64);
    snapshots
        .iter()
        .skip(m.min_snapshots as usize)
        .filter(|s| s.timestamp_ms() < cutoff && Some(s.snapshot_id()) != current)
        .map(|s| s.snapshot_id())
        .collect()
}

#[async_trait]
impl CommitTarget for IcebergTarget {
    fn name(&self) -> String {
        self.ident.to_string()
    }

    async fn load(&self) -> Result<Box<dyn LoadedTarget + '_>, CommitError> {
        let table = self
            .catalog
            .inner()
            .load_table(&self.ident)
            .await
            .map_err(|e| CommitError::unavailable("load table", e))?;
        let first = self.uuid.get_or_init(|| table.metadata().uuid());
        check_same_table(&self.ident, first, &table)
            .map_err(|e| CommitError::unavailable("load table", e))?;
        Ok(Box::new(LoadedTable {
            target: self,
            table,
        }))
    }
}

/// The table as one round loaded it.
struct LoadedTable<'a> {
    target: &'a IcebergTarget,
    table: Table,
}

impl LoadedTable<'_> {
    /// After a commit landed as `after`: counts and logs the snapshots it expired and deletes
    /// their manifest lists (each belongs to exactly one snapshot, so no retained snapshot reaches
    /// it), off the committer's loop. Manifests and data files that only expired snapshots
    /// reached are left in place: floe's own commits never drop one from the current snapshot;
    /// files orphaned by other writers' rewrites are the orphan sweep's (not built yet).
    fn after_expiry(&self, after: &Table) {
        let retained: HashSet<i64> = after
            .metadata()
            .snapshots()
            .map(|s| s.snapshot_id())
            .collect();
        let expired: Vec<String> = self
            .table
            .metadata()
            .snapshots()
            .filter(|s| !retained.contains(&s.snapshot_id()))
            .map(|s| s.manifest_list().to_string())
            .collect();
        let channel = self.target.channel.clone();
        telemetry::set_table_snapshots(&channel, retained.len());
        if expired.is_empty() {
            return;
        }
        telemetry::record_snapshots_expired(&channel, expired.len() as u64);
        tracing::info!(channel = %channel, table = %self.target.ident, expired = expired.len(), retained = retained.len(), "snapshots expired");
        let file_io = after.file_io().clone();
        tokio::spawn(async move {
            let mut deleted = 0u64;
            for path in &expired {
                match file_io.delete(path).await {
                    Ok(()) => deleted += 1,
                    Err(e) => {
                        tracing::warn!(channel = %channel, path, error = %e, "could not delete an expired snapshot's manifest list (an orphan now)")
                    }
                }
            }
            telemetry::record_maintenance_files_deleted(&channel, "manifest_list", deleted);
        });
    }
}

/// The data files of an Iceberg batch (none for a batch of another kind).
fn iceberg_files(b: &PendingBatch) -> (&[String], Option<&String>) {
    match &b.files {
        BatchFiles::Iceberg {
            data_files,
            dlq_staged,
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
            files.extend(
                parse_data_files(table, data_files)
                    .map_err(|e| CommitError::Incompatible(e.to_string()))?,
            );
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
        let expire = expirable(table, &self.target.maintenance, now_ms());
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
        // data file name carries its batch's UUIDv7 (`<channel>-<batch id>-<n>.parquet`), and a
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
                self.after_expiry(&t);
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
                // Unknown outcome: the table decides.
                tracing::warn!(channel = %self.target.channel, table = %ident, error = %e, %commit_id, "commit outcome unknown, reconciling");
                let fresh = catalog.inner().load_table(ident).await.map_err(|e2| {
                    CommitError::OutcomeUnknown(format!("{e}; reload failed: {e2}"))
                })?;
                if last_commit_id(fresh.metadata().properties()) == Some(commit_id) {
                    self.after_expiry(&fresh);
                    Ok(fresh.metadata().current_snapshot_id())
                } else {
                    Err(CommitError::OutcomeUnknown(e.to_string()))
                }
            }
        }
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
        for path in data_file_paths(data_files) {
            if let Err(e) = self.table.file_io().delete(&path).await {
                tracing::warn!(channel, path, error = %e, "could not delete a rejected batch's data file");
            }
        }
        if let Some(staged) = dlq_staged {
            self.target.dlq.discard(staged).await;
        }
    }
}
