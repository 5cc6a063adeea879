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
use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use iceberg::table::Table;
use iceberg::{
    Catalog, Error, ErrorKind, Namespace, NamespaceIdent, TableCommit, TableCreation, TableIdent,
};

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
