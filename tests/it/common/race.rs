//! Commit-race helpers shared by the stale-commit tests of every catalog (`tests/it/commit_race.rs`
//! on SQL, `tests/it/aws_catalogs.rs` on S3 Tables and Glue): a catalog wrapper that holds or
//! replays a view of the table, and pending batches of `Event` rows.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use floe::convert::Converter;
use floe::iceberg::writer::{write_data_files, ParquetCompression, WriterSettings};
use floe::model::{CheckpointRange, PendingBatch, Position, ShardId, ShardRange};
use floe::schema::MappedSchema;
use floe::tools::sample_events::event_json;
use iceberg::table::Table;
use iceberg::{Catalog, NamespaceIdent, TableIdent};
use uuid::Uuid;

/// A catalog wrapper for deterministic interleavings:
/// - gate: the first `load_table` call, once loaded, waits until `release` is notified (the
///   committer making it validates against a snapshot another committer then moves past);
/// - stale view: while `stale_view` holds a table, `load_table` returns it instead of the
///   catalog's current table, so a `Transaction` builds its commit on that stale snapshot and
///   sends it to the real catalog's `update_table` (which must refuse it).
#[derive(Debug, Default)]
pub struct GateCatalog {
    /// The real catalog.
    pub inner: Option<Arc<dyn Catalog>>,
    /// Notified when the first `load_table` has loaded (with `gated`).
    pub first_loaded: tokio::sync::Notify,
    /// Notify to let the first `load_table` return (with `gated`).
    pub release: tokio::sync::Notify,
    /// Whether the first `load_table` waits.
    pub gated: bool,
    /// The view `load_table` returns instead of the current table, when set.
    pub stale_view: Mutex<Option<Table>>,
    calls: std::sync::atomic::AtomicUsize,
}

impl GateCatalog {
    /// Gates the first `load_table` of `inner`.
    pub fn gate(inner: Arc<dyn Catalog>) -> Self {
        GateCatalog {
            inner: Some(inner),
            gated: true,
            ..Default::default()
        }
    }

    /// Returns `stale` from every `load_table` of `inner`.
    pub fn stale_view(inner: Arc<dyn Catalog>, stale: Table) -> Self {
        GateCatalog {
            inner: Some(inner),
            stale_view: Mutex::new(Some(stale)),
            ..Default::default()
        }
    }

    fn inner(&self) -> &Arc<dyn Catalog> {
        self.inner.as_ref().expect("inner catalog")
    }
}

#[async_trait::async_trait]
impl Catalog for GateCatalog {
    async fn list_namespaces(
        &self,
        p: Option<&NamespaceIdent>,
    ) -> iceberg::Result<Vec<NamespaceIdent>> {
        self.inner().list_namespaces(p).await
    }
    async fn create_namespace(
        &self,
        n: &NamespaceIdent,
        p: HashMap<String, String>,
    ) -> iceberg::Result<iceberg::Namespace> {
        self.inner().create_namespace(n, p).await
    }
    async fn get_namespace(&self, n: &NamespaceIdent) -> iceberg::Result<iceberg::Namespace> {
        self.inner().get_namespace(n).await
    }
    async fn namespace_exists(&self, n: &NamespaceIdent) -> iceberg::Result<bool> {
        self.inner().namespace_exists(n).await
    }
    async fn update_namespace(
        &self,
        n: &NamespaceIdent,
        p: HashMap<String, String>,
    ) -> iceberg::Result<()> {
        self.inner().update_namespace(n, p).await
    }
    async fn drop_namespace(&self, n: &NamespaceIdent) -> iceberg::Result<()> {
        self.inner().drop_namespace(n).await
    }
    async fn list_tables(&self, n: &NamespaceIdent) -> iceberg::Result<Vec<TableIdent>> {
        self.inner().list_tables(n).await
    }
    async fn create_table(
        &self,
        n: &NamespaceIdent,
        c: iceberg::TableCreation,
    ) -> iceberg::Result<Table> {
        self.inner().create_table(n, c).await
    }
    async fn load_table(&self, t: &TableIdent) -> iceberg::Result<Table> {
        if let Some(stale) = self.stale_view.lock().unwrap().clone() {
            return Ok(stale);
        }
        let loaded = self.inner().load_table(t).await;
        if self.gated && self.calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 0 {
            self.first_loaded.notify_one();
            self.release.notified().await;
        }
        loaded
    }
    async fn drop_table(&self, t: &TableIdent) -> iceberg::Result<()> {
        self.inner().drop_table(t).await
    }
    async fn purge_table(&self, t: &TableIdent) -> iceberg::Result<()> {
        self.inner().purge_table(t).await
    }
    async fn table_exists(&self, t: &TableIdent) -> iceberg::Result<bool> {
        self.inner().table_exists(t).await
    }
    async fn rename_table(&self, a: &TableIdent, b: &TableIdent) -> iceberg::Result<()> {
        self.inner().rename_table(a, b).await
    }
    async fn register_table(&self, t: &TableIdent, m: String) -> iceberg::Result<Table> {
        self.inner().register_table(t, m).await
    }
    async fn update_table(&self, c: iceberg::TableCommit) -> iceberg::Result<Table> {
        self.inner().update_table(c).await
    }
}

/// Writes data files (into `table`'s location) for `Event` ids `from..to` and returns channel
/// `channel`'s pending batch covering offsets `(after, to - 1]` of Kafka partition 0.
pub async fn event_batch(
    schema: &Arc<MappedSchema>,
    channel: &str,
    table: &Table,
    after: Option<i64>,
    from: u64,
    to: u64,
) -> PendingBatch {
    event_batch_at(
        schema,
        channel,
        table,
        after,
        from,
        to,
        1_783_627_200_000,
        2,
    )
    .await
}

/// [`event_batch`] with event times from `base_time_ms` over `spread_hours` hours.
#[allow(clippy::too_many_arguments, dead_code)]
pub async fn event_batch_at(
    schema: &Arc<MappedSchema>,
    channel: &str,
    table: &Table,
    after: Option<i64>,
    from: u64,
    to: u64,
    base_time_ms: i64,
    spread_hours: u32,
) -> PendingBatch {
    let arrow = Arc::new(
        iceberg::arrow::schema_to_arrow_schema(table.metadata().current_schema()).unwrap(),
    );
    let mut conv = Converter::try_new(schema.clone(), arrow).unwrap();
    for id in from..to {
        conv.push(event_json(id, 1, base_time_ms, spread_hours).as_bytes())
            .unwrap();
    }
    let batch_id = Uuid::now_v7();
    let settings = WriterSettings {
        channel: channel.into(),
        compression: ParquetCompression::Zstd(3),
        target_file_size: 128 << 20,
        max_open_partitions: 48,
    };
    let written = write_data_files(table, &settings, batch_id, conv.finish())
        .await
        .unwrap();
    PendingBatch {
        channel: channel.into(),
        batch_id,
        worker_id: "w".into(),
        shards: vec![ShardRange {
            shard: ShardId::kafka_partition(0),
            range: CheckpointRange {
                after_exclusive: after.map(Position::Offset),
                last_inclusive: Position::Offset(to as i64 - 1),
            },
            lease_counter: 0,
        }],
        files: floe::model::BatchFiles::Iceberg {
            data_files: written.data_files_json,
            dlq_staged: None,
            deleted_keys: None,
        },
        num_rows: written.num_rows,
        num_dead_lettered: 0,
        dead_lettered_by_code: Default::default(),
        data_bytes: written.num_bytes,
        oldest_read_at_ms: 0,
    }
}

/// `total-records` of the table's current snapshot summary (0 without a snapshot).
#[allow(unused_imports)]
pub use floe::tools::quickstart::total_records;

/// Rows of `table` as of snapshot `snapshot_id`, read through its manifests and data files (a
/// time-travel scan: fails if a file it reaches is gone).
pub async fn records_at(table: &Table, snapshot_id: i64) -> usize {
    use futures::TryStreamExt;
    let batches: Vec<arrow_array::RecordBatch> = table
        .scan()
        .snapshot_id(snapshot_id)
        .build()
        .unwrap()
        .to_arrow()
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    batches.iter().map(|b| b.num_rows()).sum()
}
