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
use crate::destination::{CommitError, CommitTarget, LoadedTarget};
use crate::dlq::Dlq;
use crate::model::{BatchFiles, Checkpoints, PendingBatch};
use crate::telemetry;

/// The channel's table, as the committer writes it.
pub struct IcebergTarget {
    channel: String,
    ident: TableIdent,
    catalog: FencedCatalog,
    dlq: Dlq,
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
            uuid: OnceLock::new(),
        }
    }
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
        _recovered: &[&PendingBatch],
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
        let tx = Transaction::new(table);
        let tx = tx
            .fast_append()
            .add_data_files(files)
            .set_snapshot_properties(summary)
            .apply(tx)
            .map_err(|e| CommitError::unavailable("build the commit", e))?;
        let tx = commit_properties(checkpoints, commit_id, epoch)
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
                tracing::warn!(channel = %self.target.channel, table = %ident, error = %e, %commit_id, "commit outcome unknown, reconciling");
                let fresh = catalog.inner().load_table(ident).await.map_err(|e2| {
                    CommitError::OutcomeUnknown(format!("{e}; reload failed: {e2}"))
                })?;
                if last_commit_id(fresh.metadata().properties()) == Some(commit_id) {
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
