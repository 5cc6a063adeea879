//! The committer of an upsert table (`IcebergTarget::with_upsert`, issue 42): pending batches
//! written here as the worker writes them (data files with each key at most once a batch, a
//! deleted-keys file), committed round after round as row deltas, read back by PyIceberg and
//! DuckDB equal to the expected state, with deletes by position only and at most one delete
//! file per data file. A committer change rebuilds the key index; a conflict applies nothing.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use crate::common;
use arrow_array::{ArrayRef, Int64Array, RecordBatch, StringArray};
use floe::catalog::swap::SqlSwap;
use floe::destination::{CommitError, CommitTarget};
use floe::dlq::LocalDlq;
use floe::iceberg::deletes::keys::{key_hashes, write_key_file};
use floe::iceberg::deletes::RowDeltaBase;
use floe::iceberg::target::IcebergTarget;
use floe::iceberg::writer::{write_data_files, ParquetCompression, WriterSettings};
use floe::model::{
    BatchFiles, CheckpointRange, Checkpoints, PendingBatch, Position, ShardId, ShardRange,
};
use iceberg::spec::{FormatVersion, NestedField, PrimitiveType, Schema, Type};
use iceberg::table::Table;
use iceberg::{Catalog, NamespaceIdent, TableCreation, TableIdent};
use serde_json::Value;
use uuid::Uuid;

pub(crate) struct Rig {
    pub(crate) dir: tempfile::TempDir,
    pub(crate) catalog_path: std::path::PathBuf,
    pub(crate) warehouse: std::path::PathBuf,
    pub(crate) catalog: Arc<dyn Catalog>,
    pub(crate) swap: Arc<SqlSwap>,
    pub(crate) ident: TableIdent,
    /// The last offset handed out (batches cover consecutive offsets of partition 0).
    offset: std::sync::atomic::AtomicI64,
}

pub(crate) fn settings() -> WriterSettings {
    WriterSettings {
        channel: "cdc".into(),
        compression: ParquetCompression::Zstd(3),
        target_file_size: 128 << 20,
        max_open_partitions: 8,
    }
}

/// A table `cdc.t` (id long required, v string) of format `version` in a fresh SQLite catalog.
pub(crate) async fn rig(version: FormatVersion) -> Rig {
    let dir = tempfile::tempdir().unwrap();
    let (catalog_path, warehouse, catalog, swap) =
        common::sql_catalog_with_swap(dir.path(), "cdc").await;
    let ns = NamespaceIdent::new("cdc".into());
    let schema = Schema::builder()
        .with_fields(vec![
            NestedField::required(1, "id", Type::Primitive(PrimitiveType::Long)).into(),
            NestedField::optional(2, "v", Type::Primitive(PrimitiveType::String)).into(),
        ])
        .with_identifier_field_ids([1])
        .build()
        .unwrap();
    let creation = TableCreation::builder()
        .name("t".into())
        .schema(schema)
        .format_version(version)
        .properties(HashMap::from([(
            "commit.retry.num-retries".to_string(),
            "0".to_string(),
        )]))
        .build();
    catalog.create_table(&ns, creation).await.unwrap();
    Rig {
        dir,
        catalog_path,
        warehouse,
        catalog,
        swap: Arc::new(swap),
        ident: TableIdent::new(ns, "t".into()),
        offset: std::sync::atomic::AtomicI64::new(-1),
    }
}

/// The rows a batch writes: one data file per slice, each `(id, v)`.
pub(crate) type Files<'a> = &'a [&'a [(i64, &'a str)]];

impl Rig {
    pub(crate) async fn table(&self) -> Table {
        self.catalog.load_table(&self.ident).await.unwrap()
    }

    /// A fresh committer of the table (an empty key index); `upsert` false: an append target.
    pub(crate) fn target(&self, upsert: bool) -> IcebergTarget {
        let target = IcebergTarget::new(
            "cdc",
            self.ident.clone(),
            self.catalog.clone(),
            LocalDlq::new(self.dir.path().join("dlq"), "cdc"),
        )
        .with_rewrites(Some(self.swap.clone()), settings());
        if upsert {
            target.with_upsert(vec!["id".into()])
        } else {
            target
        }
    }

    /// A pending batch as the worker hands it off: one data file per element of `files`, and
    /// the keys of `deleted` in a deleted-keys file.
    pub(crate) async fn batch(&self, files: Files<'_>, deleted: &[i64]) -> PendingBatch {
        let table = self.table().await;
        let arrow = Arc::new(
            iceberg::arrow::schema_to_arrow_schema(table.metadata().current_schema()).unwrap(),
        );
        let batch_id = Uuid::now_v7();
        let mut data_files = Vec::new();
        let mut num_rows = 0;
        for rows in files {
            let columns: Vec<ArrayRef> = vec![
                Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.0))),
                Arc::new(StringArray::from_iter_values(rows.iter().map(|r| r.1))),
            ];
            let batch = RecordBatch::try_new(arrow.clone(), columns).unwrap();
            // A fresh id per file: a reused prefix would overwrite the batch's first file.
            let written = write_data_files(&table, &settings(), Uuid::now_v7(), batch)
                .await
                .unwrap();
            num_rows += written.num_rows;
            data_files.extend(written.data_files_json);
        }
        let deleted_keys = if deleted.is_empty() {
            None
        } else {
            let ids: ArrayRef = Arc::new(Int64Array::from(deleted.to_vec()));
            let path = format!(
                "{}/data/floe-keys/cdc-{batch_id}.keys",
                table.metadata().location()
            );
            write_key_file(table.file_io(), &path, &key_hashes(&[ids]).unwrap())
                .await
                .unwrap();
            Some(path)
        };
        let count = (files.len() + deleted.len()) as i64;
        let last = self
            .offset
            .fetch_add(count, std::sync::atomic::Ordering::SeqCst);
        PendingBatch {
            channel: "cdc".into(),
            batch_id,
            worker_id: "w".into(),
            shards: vec![ShardRange {
                shard: ShardId::kafka_partition(0),
                range: CheckpointRange {
                    after_exclusive: (last >= 0).then_some(Position::Offset(last)),
                    last_inclusive: Position::Offset(last + count),
                },
                lease_counter: 1,
            }],
            files: BatchFiles::Iceberg {
                data_files,
                dlq_staged: None,
                deleted_keys,
            },
            num_rows,
            num_dead_lettered: 0,
            dead_lettered_by_code: Default::default(),
            data_bytes: 0,
            oldest_read_at_ms: 0,
        }
    }

    /// One round of `target` committing `batches` (the checkpoint: the last one's offset).
    pub(crate) async fn commit(
        &self,
        target: &IcebergTarget,
        batches: &[&PendingBatch],
    ) -> Result<Option<i64>, CommitError> {
        let loaded = target.load().await?;
        commit_loaded(loaded.as_ref(), batches).await
    }

    /// What tests/py/read_upsert.py prints for the table.
    pub(crate) fn read(&self) -> Value {
        common::run_py_reader(
            "read_upsert.py",
            &[
                self.catalog_path.as_os_str(),
                self.warehouse.as_os_str(),
                "cdc.t".as_ref(),
            ],
        )
    }

    /// No equality deletes, no delete file of several data files, at most one delete file per
    /// live data file (from the manifests), and the same as PyIceberg's scan plans them.
    pub(crate) async fn assert_deletes_by_position_only(&self, read: &Value) {
        let base = RowDeltaBase::load(&self.table().await).await.unwrap();
        assert!(!base.has_equality_deletes() && !base.has_unscoped_deletes());
        for path in base.data_files().keys() {
            assert!(base.deletes_of(path).len() <= 1, "{path}");
        }
        let mut per_data_file: BTreeMap<&str, usize> = BTreeMap::new();
        for f in read["pyiceberg"]["delete_files"].as_array().unwrap() {
            assert_eq!(f["content"], "POSITION_DELETES", "{f}");
            // PyIceberg 0.12 plans every deletion vector of the partition with each data file
            // (it picks the data file's own when reading): only v2 files are counted here.
            if f["format"] != "PARQUET" {
                continue;
            }
            *per_data_file
                .entry(f["data_file"].as_str().unwrap())
                .or_default() += 1;
        }
        assert!(per_data_file.values().all(|n| *n == 1), "{per_data_file:?}");
    }
}

async fn commit_loaded(
    loaded: &dyn floe::destination::LoadedTarget,
    batches: &[&PendingBatch],
) -> Result<Option<i64>, CommitError> {
    let last = batches
        .last()
        .map(|b| b.shards[0].range.last_inclusive.clone())
        .unwrap();
    let checkpoints = Checkpoints(BTreeMap::from([(ShardId::kafka_partition(0), last)]));
    loaded
        .commit(batches, &[], &checkpoints, 1, Uuid::now_v7())
        .await
}

/// The readers' rows as `{id: v}`.
pub(crate) fn rows(view: &Value) -> BTreeMap<i64, String> {
    view["rows"]
        .as_array()
        .unwrap_or_else(|| panic!("no rows: {view}"))
        .iter()
        .map(|r| (r[0].as_i64().unwrap(), r[1].as_str().unwrap().to_string()))
        .collect()
}

/// The formats of the delete files PyIceberg's scan applies.
pub(crate) fn delete_formats(read: &Value) -> Vec<&str> {
    read["pyiceberg"]["delete_files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["format"].as_str().unwrap())
        .collect()
}

pub(crate) fn expect(pairs: &[(i64, &str)]) -> BTreeMap<i64, String> {
    pairs.iter().map(|(k, v)| (*k, v.to_string())).collect()
}

/// Three rounds with updates and deletes, then a fresh committer (index rebuilt), then a
/// conflict. Returns the readers' view of the final table and the expected rows.
async fn rounds(rig: &Rig) -> (Value, BTreeMap<i64, String>) {
    let target = rig.target(true);
    // Round 1, two batches. A: ids 0..10; key 3 written again in a second file of the same
    // batch (the later row wins); key 100 deleted, never written. B: keys 5, 6 updated; key 8
    // deleted (written by A in the same commit).
    let first: Vec<(i64, String)> = (0..10).map(|i| (i, format!("a{i}"))).collect();
    let first: Vec<(i64, &str)> = first.iter().map(|(i, v)| (*i, v.as_str())).collect();
    let a = rig.batch(&[&first, &[(3, "a3-again")]], &[100]).await;
    let b = rig.batch(&[&[(5, "b5"), (6, "b6")]], &[8]).await;
    rig.commit(&target, &[&a, &b]).await.unwrap();
    let mut expected: BTreeMap<i64, String> = (0..10).map(|i| (i, format!("a{i}"))).collect();
    expected.extend(expect(&[(3, "a3-again"), (5, "b5"), (6, "b6")]));
    expected.remove(&8);
    // Round 2: keys 0, 1 deleted; key 20 new, key 3 updated.
    let c = rig.batch(&[&[(20, "c20"), (3, "c3")]], &[0, 1]).await;
    rig.commit(&target, &[&c]).await.unwrap();
    // Round 3: key 0 re-inserted; key 20 deleted; deletes only in a second batch.
    let d = rig.batch(&[&[(0, "d0")]], &[20]).await;
    let e = rig.batch(&[], &[2]).await;
    rig.commit(&target, &[&d, &e]).await.unwrap();
    expected.extend(expect(&[(3, "c3"), (0, "d0")]));
    for k in [1, 2] {
        expected.remove(&k);
    }
    // The committed batches' deleted-keys files are deleted after the commits.
    target.wait_for_cleanup().await;
    let keys_dir = rig.warehouse.join("cdc/t/data/floe-keys");
    let left: Vec<_> = std::fs::read_dir(&keys_dir)
        .map(|d| d.map(|e| e.unwrap().path()).collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "{left:?}");

    // A committer change: a fresh target builds its index from the table.
    let fresh = rig.target(true);
    let f = rig.batch(&[&[(4, "f4"), (30, "f30")]], &[9]).await;
    rig.commit(&fresh, &[&f]).await.unwrap();
    expected.extend(expect(&[(4, "f4"), (30, "f30")]));
    expected.remove(&9);

    // A conflict: `target` (index bound to round 3's snapshot) plans on the table, the fresh
    // committer lands first; nothing of the planned round is applied, and its retry on the
    // moved table rebuilds the index.
    let loaded = target.load().await.unwrap();
    let g = rig.batch(&[&[(5, "g5")]], &[6]).await;
    let h = rig.batch(&[&[(5, "h5"), (7, "h7")]], &[]).await;
    rig.commit(&fresh, &[&h]).await.unwrap();
    let e = commit_loaded(loaded.as_ref(), &[&g]).await.unwrap_err();
    assert!(matches!(e, CommitError::Conflict(_)), "{e}");
    drop(loaded);
    let g2 = rig.batch(&[&[(5, "g5")]], &[6]).await;
    rig.commit(&target, &[&g2]).await.unwrap();
    expected.extend(expect(&[(5, "g5"), (7, "h7")]));
    expected.remove(&6);
    let read = rig.read();
    rig.assert_deletes_by_position_only(&read).await;
    (read, expected)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v2_upsert_rounds_read_back_by_pyiceberg_and_duckdb() {
    let rig = rig(FormatVersion::V2).await;
    let (read, expected) = rounds(&rig).await;
    eprintln!("v2 readers: {read}");
    assert_eq!(rows(&read["pyiceberg"]), expected);
    assert_eq!(rows(&read["duckdb"]), expected);
    let formats = delete_formats(&read);
    assert!(!formats.is_empty() && formats.iter().all(|f| *f == "PARQUET"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v3_upsert_rounds_read_back_by_pyiceberg_and_duckdb() {
    let rig = rig(FormatVersion::V3).await;
    let (read, expected) = rounds(&rig).await;
    eprintln!("v3 readers: {read}");
    assert_eq!(read["pyiceberg"]["format_version"], 3);
    assert_eq!(rows(&read["pyiceberg"]), expected);
    let formats = delete_formats(&read);
    assert!(!formats.is_empty() && formats.iter().all(|f| *f == "PUFFIN"));
    // DuckDB 1.4.4's iceberg extension reads the v3 table and applies its deletion vectors.
    assert_eq!(rows(&read["duckdb"]), expected);
}

/// A table appended to (a key twice) and then committed as an upsert table: the index keeps
/// each key's newest row and the first upsert commit deletes the older ones.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_append_table_switched_to_upsert_converges_to_one_row_per_key() {
    let rig = rig(FormatVersion::V2).await;
    let append = rig.target(false);
    let a = rig.batch(&[&[(1, "old1"), (2, "old2")]], &[]).await;
    rig.commit(&append, &[&a]).await.unwrap();
    let b = rig.batch(&[&[(1, "new1"), (3, "new3")]], &[]).await;
    rig.commit(&append, &[&b]).await.unwrap();
    let upsert = rig.target(true);
    let c = rig.batch(&[&[(4, "c4")]], &[]).await;
    rig.commit(&upsert, &[&c]).await.unwrap();
    let read = rig.read();
    let expected = expect(&[(1, "new1"), (2, "old2"), (3, "new3"), (4, "c4")]);
    assert_eq!(rows(&read["pyiceberg"]), expected, "{read}");
    assert_eq!(rows(&read["duckdb"]), expected, "{read}");
    rig.assert_deletes_by_position_only(&read).await;
}

/// An unknown key column is refused as incompatible, before anything is written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_key_column_is_incompatible() {
    let rig = rig(FormatVersion::V2).await;
    let target = IcebergTarget::new(
        "cdc",
        rig.ident.clone(),
        rig.catalog.clone(),
        LocalDlq::new(rig.dir.path().join("dlq"), "cdc"),
    )
    .with_rewrites(Some(rig.swap.clone()), settings())
    .with_upsert(vec!["nope".into()]);
    let a = rig.batch(&[&[(1, "x")]], &[]).await;
    let e = rig.commit(&target, &[&a]).await.unwrap_err();
    assert!(
        matches!(&e, CommitError::Incompatible(m) if m.contains("nope")),
        "{e}"
    );
    assert!(rig.table().await.metadata().current_snapshot().is_none());
}
