//! Iceberg catalogs: opening the configured catalog, creating the channel's table, and the
//! compare-and-swap commit fence the committer relies on (docs/design.md, protocol step 4).
//!
//! iceberg-rust's `Transaction::commit` reloads the table at every attempt and re-applies its
//! actions: a commit built from a stale view would be silently rebased onto a newer snapshot.
//! [`FencedCatalog`] wraps a catalog so that `load_table` of the fenced table fails unless the
//! table is still at the snapshot the committer validated; fast append's own
//! `AssertRefSnapshotId(main)` requirement, checked by the catalog against its current metadata,
//! then makes the swap atomic:
//!
//! ```text
//!  committer: load T@s1 -> validate batches against T@s1.floe.checkpoints -> fence(s1)
//!  Transaction::commit --load_table--> FencedCatalog: current == s1 ? ok : Conflict
//!                      --update_table(requires main == s1)--> catalog CAS on metadata location
//! ```
//!
//! The other fence is for destruction: a commit can be refused, a delete cannot be taken back.
//! Every file maintenance deletes (files of expired snapshots, metadata files the log dropped,
//! orphans, compaction outputs given up) goes through [`DeletionFence::delete`], which first
//! checks that this committer still owns the table — its committer lease renews with the same
//! lease counter, and the table still carries that counter as `floe.committer-epoch` — and
//! otherwise deletes nothing. A committer paused past its lease (a zombie) that resumes while a
//! newer committer expires snapshots therefore never deletes what it computed from its stale
//! view:
//!
//! ```text
//!  delete(paths) -> lost before?                         yes -> nothing deleted
//!                -> renew committer lease (counter == epoch)  fails -> lost (logged once)
//!                -> load table: floe.committer-epoch == epoch ?  no -> lost (logged once)
//!                -> delete every path
//! ```
use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use iceberg::io::FileIO;
use iceberg::table::Table;
use iceberg::{
    Catalog, Error, ErrorKind, Namespace, NamespaceIdent, TableCommit, TableCreation, TableIdent,
};

use crate::lease::{LeaseKey, LeaseStore};

/// A catalog wrapper that fences commits to one validated snapshot (see the module docs).
///
/// While a fence is set for a table, `load_table` of that table fails with
/// `ErrorKind::CatalogCommitConflicts` (not retryable) unless the table's current snapshot id
/// is the fenced one. Every other call is delegated unchanged.
pub struct FencedCatalog {
    inner: Arc<dyn Catalog>,
    fence: Mutex<Option<(TableIdent, Option<i64>)>>,
    /// The channel whose committer loads through this wrapper (counted in
    /// [`crate::telemetry::CATALOG_TABLE_LOADS_TOTAL`]).
    channel: String,
}

impl fmt::Debug for FencedCatalog {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FencedCatalog").finish_non_exhaustive()
    }
}

impl FencedCatalog {
    /// Wraps `inner` with no fence set; its loads count as `channel`'s committer's.
    pub fn new(inner: Arc<dyn Catalog>, channel: &str) -> Self {
        FencedCatalog {
            inner,
            fence: Mutex::new(None),
            channel: channel.to_string(),
        }
    }

    /// Fences `table` to `snapshot_id` (`None`: the table has no snapshot yet).
    pub fn set_fence(&self, table: TableIdent, snapshot_id: Option<i64>) {
        *self.fence.lock().expect("fence lock") = Some((table, snapshot_id));
    }

    /// Removes the fence.
    pub fn clear_fence(&self) {
        *self.fence.lock().expect("fence lock") = None;
    }

    /// Loads `table` from the wrapped catalog, ignoring the fence (the committer's loads
    /// outside a commit: planning, after maintenance, reconciling an unknown outcome). Counted
    /// like [`Catalog::load_table`].
    pub async fn load_unfenced(&self, table: &TableIdent) -> iceberg::Result<Table> {
        crate::telemetry::record_catalog_table_load(&self.channel, "committer");
        self.inner.load_table(table).await
    }

    /// The wrapped catalog.
    pub fn inner(&self) -> &Arc<dyn Catalog> {
        &self.inner
    }
}

#[async_trait]
impl Catalog for FencedCatalog {
    async fn list_namespaces(
        &self,
        parent: Option<&NamespaceIdent>,
    ) -> iceberg::Result<Vec<NamespaceIdent>> {
        self.inner.list_namespaces(parent).await
    }
    async fn create_namespace(
        &self,
        namespace: &NamespaceIdent,
        properties: HashMap<String, String>,
    ) -> iceberg::Result<Namespace> {
        self.inner.create_namespace(namespace, properties).await
    }
    async fn get_namespace(&self, namespace: &NamespaceIdent) -> iceberg::Result<Namespace> {
        self.inner.get_namespace(namespace).await
    }
    async fn namespace_exists(&self, namespace: &NamespaceIdent) -> iceberg::Result<bool> {
        self.inner.namespace_exists(namespace).await
    }
    async fn update_namespace(
        &self,
        namespace: &NamespaceIdent,
        properties: HashMap<String, String>,
    ) -> iceberg::Result<()> {
        self.inner.update_namespace(namespace, properties).await
    }
    async fn drop_namespace(&self, namespace: &NamespaceIdent) -> iceberg::Result<()> {
        self.inner.drop_namespace(namespace).await
    }
    async fn list_tables(&self, namespace: &NamespaceIdent) -> iceberg::Result<Vec<TableIdent>> {
        self.inner.list_tables(namespace).await
    }
    async fn create_table(
        &self,
        namespace: &NamespaceIdent,
        creation: TableCreation,
    ) -> iceberg::Result<Table> {
        self.inner.create_table(namespace, creation).await
    }
    async fn load_table(&self, table: &TableIdent) -> iceberg::Result<Table> {
        crate::telemetry::record_catalog_table_load(&self.channel, "committer");
        let loaded = self.inner.load_table(table).await?;
        let fence = self.fence.lock().expect("fence lock").clone();
        if let Some((ident, snapshot_id)) = fence {
            if ident == *table && loaded.metadata().current_snapshot_id() != snapshot_id {
                return Err(Error::new(
                    ErrorKind::CatalogCommitConflicts,
                    format!(
                        "table {table} moved from the validated snapshot {snapshot_id:?} to {:?}",
                        loaded.metadata().current_snapshot_id()
                    ),
                )
                .with_retryable(false));
            }
        }
        Ok(loaded)
    }
    async fn drop_table(&self, table: &TableIdent) -> iceberg::Result<()> {
        self.inner.drop_table(table).await
    }
    async fn purge_table(&self, table: &TableIdent) -> iceberg::Result<()> {
        self.inner.purge_table(table).await
    }
    async fn table_exists(&self, table: &TableIdent) -> iceberg::Result<bool> {
        self.inner.table_exists(table).await
    }
    async fn rename_table(&self, src: &TableIdent, dest: &TableIdent) -> iceberg::Result<()> {
        self.inner.rename_table(src, dest).await
    }
    async fn register_table(
        &self,
        table: &TableIdent,
        metadata_location: String,
    ) -> iceberg::Result<Table> {
        self.inner.register_table(table, metadata_location).await
    }
    async fn update_table(&self, commit: TableCommit) -> iceberg::Result<Table> {
        self.inner.update_table(commit).await
    }
}

/// The check every destructive maintenance step goes through (see the module docs): deletes
/// only while this committer's epoch is the table's and its committer lease renews. Cheap: one
/// lease renewal and one table load per call (a call deletes a whole step's files), nothing at
/// all once the epoch was found lost (it never comes back). Clones share that state.
#[derive(Clone)]
pub struct DeletionFence {
    catalog: Arc<dyn Catalog>,
    ident: TableIdent,
    channel: String,
    epoch: u64,
    leases: Option<Arc<dyn LeaseStore>>,
    lost: Arc<AtomicBool>,
}

impl fmt::Debug for DeletionFence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeletionFence")
            .field("table", &self.ident)
            .field("epoch", &self.epoch)
            .finish_non_exhaustive()
    }
}

impl DeletionFence {
    /// The fence of `channel`'s committer of epoch `epoch` (its committer lease counter) on
    /// `table` in `catalog`; without [`DeletionFence::with_leases`] only the table's epoch is
    /// checked.
    pub fn new(channel: &str, table: TableIdent, catalog: Arc<dyn Catalog>, epoch: u64) -> Self {
        DeletionFence {
            catalog,
            ident: table,
            channel: channel.to_string(),
            epoch,
            leases: None,
            lost: Arc::new(AtomicBool::new(false)),
        }
    }

    /// The same fence also renewing the committer lease in `leases` before each delete.
    pub fn with_leases(mut self, leases: Arc<dyn LeaseStore>) -> Self {
        self.leases = Some(leases);
        self
    }

    /// The same fence sharing `lost` (one flag per committer: lost once, lost for good, and
    /// logged once).
    pub fn sharing(mut self, lost: Arc<AtomicBool>) -> Self {
        self.lost = lost;
        self
    }

    /// The committer epoch this fence holds for.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// Whether this committer still owns the table: its lease renews with counter `epoch` and
    /// the table carries `epoch`. `Err` says why not; a store or catalog that does not answer
    /// also refuses (deleting can wait, a wrong delete cannot be undone).
    pub async fn check(&self) -> Result<(), String> {
        if self.lost.load(Ordering::Relaxed) {
            return Err("the committer epoch was lost earlier".into());
        }
        let lost = match self.owns_table().await {
            Ok(()) => return Ok(()),
            Err(Ownership::Lost(why)) => why,
            Err(Ownership::Unknown(why)) => return Err(why),
        };
        if !self.lost.swap(true, Ordering::Relaxed) {
            tracing::warn!(channel = %self.channel, table = %self.ident, epoch = self.epoch, reason = %lost, "committer no longer owns the table: it deletes nothing from now on");
        }
        Err(lost)
    }

    async fn owns_table(&self) -> Result<(), Ownership> {
        if let Some(leases) = &self.leases {
            let row = leases
                .get_lease(&self.channel, &LeaseKey::Committer)
                .await
                .map_err(|e| Ownership::Unknown(format!("lease store: {e}")))?;
            let Some(row) = row.filter(|r| r.lease_counter == self.epoch && r.owner.is_some())
            else {
                return Err(Ownership::Lost(format!(
                    "the committer lease moved past counter {}",
                    self.epoch
                )));
            };
            leases.renew_lease(&row).await.map_err(|e| match e {
                crate::lease::LeaseError::Lost { .. } => Ownership::Lost(format!(
                    "the committer lease of counter {} could not be renewed: {e}",
                    self.epoch
                )),
                e => Ownership::Unknown(format!("lease store: {e}")),
            })?;
        }
        crate::telemetry::record_catalog_table_load(&self.channel, "committer");
        let table = self
            .catalog
            .load_table(&self.ident)
            .await
            .map_err(|e| Ownership::Unknown(format!("load table: {e}")))?;
        let table_epoch = super::table_state::table_epoch(&table);
        if table_epoch != self.epoch {
            return Err(Ownership::Lost(format!(
                "the table carries committer epoch {table_epoch}, not {}",
                self.epoch
            )));
        }
        Ok(())
    }

    /// Deletes `paths` with `file_io` if [`DeletionFence::check`] passes, and nothing
    /// otherwise; returns the paths deleted (a failed delete is left out: the file is an
    /// orphan for the sweep). `what` names the step in the log line of a refusal.
    pub async fn delete(&self, file_io: &FileIO, what: &str, paths: &[String]) -> Vec<String> {
        if paths.is_empty() {
            return Vec::new();
        }
        if let Err(why) = self.check().await {
            tracing::debug!(channel = %self.channel, table = %self.ident, what, files = paths.len(), reason = %why, "deletion refused by the fence");
            return Vec::new();
        }
        let mut deleted = Vec::with_capacity(paths.len());
        for path in paths {
            if file_io.delete(path).await.is_ok() {
                deleted.push(path.clone());
            }
        }
        deleted
    }
}

enum Ownership {
    /// A newer committer owns the table (or the lease is gone): never again.
    Lost(String),
    /// The store or catalog did not answer: not now.
    Unknown(String),
}
