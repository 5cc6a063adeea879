//! Row-delta snapshots with deletes by position (`floe::iceberg::deletes`), read back by
//! independent readers: PyIceberg and DuckDB's iceberg extension, for format v2 (position-delete
//! files) and format v3 (deletion vectors).

use std::collections::BTreeSet;
use std::sync::Arc;

use crate::common;
use arrow_array::{Int64Array, RecordBatch, StringArray};
use floe::catalog::swap::{SqlSwap, TableSwap};
use floe::iceberg::deletes::{commit_row_delta, RowDelta, RowDeltaBase, RowDeltaError};
use iceberg::spec::{
    DataContentType, DataFile, FormatVersion, ManifestContentType, NestedField, PrimitiveType,
    Schema, Transform, Type, UnboundPartitionSpec,
};
use iceberg::table::Table;
use iceberg::{Catalog, NamespaceIdent, TableCreation, TableIdent};
use serde_json::Value;
use uuid::Uuid;

struct Rig {
    _dir: tempfile::TempDir,
    catalog_path: std::path::PathBuf,
    warehouse: std::path::PathBuf,
    catalog: Arc<dyn Catalog>,
    swap: SqlSwap,
    ident: TableIdent,
}

/// A table `cdc.t` (id long, part string, v string; partitioned by `identity(part)`) of format
/// `version` in a fresh SQLite catalog.
async fn rig(version: FormatVersion) -> Rig {
    let dir = tempfile::tempdir().unwrap();
    let (catalog_path, warehouse, catalog, swap) =
        common::sql_catalog_with_swap(dir.path(), "cdc").await;
    let ns = NamespaceIdent::new("cdc".into());
    let schema = Schema::builder()
        .with_fields(vec![
            NestedField::required(1, "id", Type::Primitive(PrimitiveType::Long)).into(),
            NestedField::required(2, "part", Type::Primitive(PrimitiveType::String)).into(),
            NestedField::optional(3, "v", Type::Primitive(PrimitiveType::String)).into(),
        ])
        .build()
        .unwrap();
    let spec = UnboundPartitionSpec::builder()
        .add_partition_field(2, "part", Transform::Identity)
        .unwrap()
        .build();
    let creation = TableCreation::builder()
        .name("t".into())
        .schema(schema)
        .partition_spec(spec)
        .format_version(version)
        .build();
    let table = catalog.create_table(&ns, creation).await.unwrap();
    assert_eq!(table.metadata().format_version(), version);
    Rig {
        _dir: dir,
        catalog_path,
        warehouse,
        catalog,
        swap,
        ident: TableIdent::new(ns, "t".into()),
    }
}

impl Rig {
    async fn table(&self) -> Table {
        self.catalog.load_table(&self.ident).await.unwrap()
    }

    /// One data file of partition `part` holding ids `ids` in that order (row position = index).
    async fn data_file(&self, part: &str, ids: std::ops::Range<i64>) -> DataFile {
        let table = self.table().await;
        let arrow = Arc::new(
            iceberg::arrow::schema_to_arrow_schema(table.metadata().current_schema()).unwrap(),
        );
        let n = ids.clone().count();
        let batch = RecordBatch::try_new(
            arrow,
            vec![
                Arc::new(Int64Array::from_iter_values(ids.clone())),
                Arc::new(StringArray::from_iter_values(std::iter::repeat_n(part, n))),
                Arc::new(StringArray::from_iter_values(ids.map(|i| format!("v{i}")))),
            ],
        )
        .unwrap();
        let settings = floe::iceberg::writer::WriterSettings {
            channel: "cdc".into(),
            compression: floe::iceberg::writer::ParquetCompression::Zstd(3),
            target_file_size: 128 << 20,
            max_open_partitions: 8,
        };
        let written =
            floe::iceberg::writer::write_data_files(&table, &settings, Uuid::now_v7(), batch)
                .await
                .unwrap();
        let mut files =
            floe::iceberg::writer::parse_data_files(&table, &written.data_files_json).unwrap();
        assert_eq!(files.len(), 1);
        files.pop().unwrap()
    }

    async fn commit(&self, delta: &RowDelta) -> Result<Option<i64>, RowDeltaError> {
        let base = RowDeltaBase::load(&self.table().await).await.unwrap();
        let swap: &dyn TableSwap = &self.swap;
        commit_row_delta(&base, delta, swap, Uuid::now_v7())
            .await
            .map(|c| c.snapshot_id)
    }

    /// What tests/py/read_row_delta.py prints for the table.
    fn read(&self) -> Value {
        common::run_py_reader(
            "read_row_delta.py",
            &[
                self.catalog_path.as_os_str(),
                self.warehouse.as_os_str(),
                "cdc.t".as_ref(),
            ],
        )
    }

    /// Every live delete file is a position delete (no equality deletes), and no data file has
    /// more than one: read from the manifests themselves.
    async fn assert_one_position_delete_file_per_data_file(&self) {
        let table = self.table().await;
        let base = RowDeltaBase::load(&table).await.unwrap();
        assert!(!base.has_equality_deletes());
        let snapshot = table.metadata().current_snapshot().unwrap();
        let list = table.manifest_list_reader(snapshot).load().await.unwrap();
        let mut targets = BTreeSet::new();
        for m in list.entries() {
            let manifest = m.load_manifest(table.file_io()).await.unwrap();
            for e in manifest.entries().iter().filter(|e| e.is_alive()) {
                match m.content {
                    ManifestContentType::Data => {
                        assert_eq!(e.content_type(), DataContentType::Data);
                        assert!(base.deletes_of(e.file_path()).len() <= 1);
                    }
                    ManifestContentType::Deletes => {
                        assert_eq!(e.content_type(), DataContentType::PositionDeletes);
                        let target = e.data_file().referenced_data_file().unwrap();
                        assert!(targets.insert(target), "two delete files for one data file");
                    }
                }
            }
        }
    }
}

/// A row delta adding `data_files`.
fn adding(data_files: Vec<DataFile>) -> RowDelta {
    RowDelta {
        data_files,
        ..RowDelta::default()
    }
}

/// The summary of the snapshot with sequence number `seq` (1-based), as PyIceberg reads it.
fn summary(read: &Value, seq: usize) -> &serde_json::Map<String, Value> {
    read["pyiceberg"]["snapshots"][seq - 1].as_object().unwrap()
}

fn assert_summary(read: &Value, seq: usize, expected: &[(&str, &str)]) {
    let s = summary(read, seq);
    for (key, value) in expected {
        assert_eq!(
            s.get(*key).and_then(Value::as_str),
            Some(*value),
            "snapshot {seq} {key}: {s:?}"
        );
    }
}

/// Three row deltas on `version`: data with same-commit deletes, data with deletes of old and
/// new files (one merging with its file's earlier delete), deletes only (merging again).
/// Returns the readers' view.
async fn three_row_deltas(rig: &Rig) -> Value {
    let a1 = rig.data_file("a", 0..10).await;
    let b1 = rig.data_file("b", 10..20).await;
    let (a1_path, b1_path) = (a1.file_path().to_string(), b1.file_path().to_string());
    // 1. Add a1, b1; delete id 2 (a1 row 2) in the same commit; set a checkpoint.
    let mut d1 = adding(vec![a1, b1]);
    d1.delete(&a1_path, 2);
    d1.properties
        .insert("floe.checkpoint.test".into(), "1".into());
    rig.commit(&d1).await.unwrap().unwrap();
    // 2. Add a2; delete ids 5 (a1: merges with {2}), 10 (b1 row 0), 24 (a2 row 4, same commit).
    let a2 = rig.data_file("a", 20..25).await;
    let a2_path = a2.file_path().to_string();
    let mut d2 = adding(vec![a2]);
    d2.delete(&a1_path, 5);
    d2.delete(&b1_path, 0);
    d2.delete(&a2_path, 4);
    d2.properties
        .insert("floe.checkpoint.test".into(), "2".into());
    rig.commit(&d2).await.unwrap().unwrap();
    // 3. Deletes only: id 9 (a1 row 9: merges with {2, 5}).
    let mut d3 = RowDelta::default();
    d3.delete(&a1_path, 9);
    rig.commit(&d3).await.unwrap().unwrap();
    rig.assert_one_position_delete_file_per_data_file().await;
    rig.read()
}

/// The values of `field` (`content`, `format`) over the delete files PyIceberg's scan applies.
fn delete_files<'a>(read: &'a Value, field: &str) -> BTreeSet<&'a str> {
    read["pyiceberg"]["delete_files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f[field].as_str().unwrap())
        .collect()
}

fn expected_ids() -> Vec<i64> {
    (0..25).filter(|i| ![2, 5, 9, 10, 24].contains(i)).collect()
}

/// The summaries every format writes (sequence numbers 1..=3).
fn assert_common_summaries(read: &Value) {
    let ops: Vec<&str> = (1..=3)
        .map(|s| summary(read, s)["operation"].as_str().unwrap())
        .collect();
    assert_eq!(ops, ["overwrite", "overwrite", "delete"]);
    assert_summary(
        read,
        1,
        &[
            ("added-data-files", "2"),
            ("added-records", "20"),
            ("added-delete-files", "1"),
            ("added-position-deletes", "1"),
            ("total-records", "20"),
            ("total-data-files", "2"),
            ("total-delete-files", "1"),
            ("total-position-deletes", "1"),
            ("total-equality-deletes", "0"),
            ("changed-partition-count", "2"),
        ],
    );
    assert_summary(
        read,
        2,
        &[
            ("added-data-files", "1"),
            ("added-records", "5"),
            ("added-delete-files", "3"),
            ("removed-delete-files", "1"),
            // a1 {2, 5}, b1 {0}, a2 {4}; a1's {2} removed.
            ("added-position-deletes", "4"),
            ("removed-position-deletes", "1"),
            ("total-records", "25"),
            ("total-delete-files", "3"),
            ("total-position-deletes", "4"),
        ],
    );
    assert_summary(
        read,
        3,
        &[
            ("added-delete-files", "1"),
            ("removed-delete-files", "1"),
            ("added-position-deletes", "3"),
            ("removed-position-deletes", "2"),
            ("total-records", "25"),
            ("total-data-files", "3"),
            ("total-delete-files", "3"),
            ("total-position-deletes", "5"),
        ],
    );
    for seq in 1..=3 {
        for key in [
            "deleted-records",
            "deleted-data-files",
            "added-equality-deletes",
        ] {
            assert!(!summary(read, seq).contains_key(key), "{seq} {key}");
        }
    }
    let py = &read["pyiceberg"];
    assert_eq!(py["properties"]["floe.checkpoint.test"], "2");
    assert_eq!(
        delete_files(read, "content"),
        BTreeSet::from(["POSITION_DELETES"]),
        "{py}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v2_position_deletes_read_back_by_pyiceberg_and_duckdb() {
    let rig = rig(FormatVersion::V2).await;
    let read = three_row_deltas(&rig).await;
    eprintln!("v2 readers: {read}");
    assert_eq!(read["pyiceberg"]["ids"], serde_json::json!(expected_ids()));
    assert_eq!(read["duckdb"]["ids"], serde_json::json!(expected_ids()));
    assert_common_summaries(&read);
    for seq in 1..=3 {
        assert!(!summary(&read, seq).contains_key("added-dvs"));
    }
    assert_summary(&read, 2, &[("added-position-delete-files", "3")]);
    assert_summary(&read, 3, &[("removed-position-delete-files", "1")]);
    assert_eq!(delete_files(&read, "format"), BTreeSet::from(["PARQUET"]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v3_deletion_vectors_read_back_by_pyiceberg_and_duckdb() {
    let rig = rig(FormatVersion::V3).await;
    let read = three_row_deltas(&rig).await;
    eprintln!("v3 readers: {read}");
    assert_eq!(read["pyiceberg"]["format_version"], 3);
    assert_eq!(read["pyiceberg"]["ids"], serde_json::json!(expected_ids()));
    assert_common_summaries(&read);
    assert_summary(&read, 1, &[("added-dvs", "1")]);
    assert_summary(&read, 2, &[("added-dvs", "3"), ("removed-dvs", "1")]);
    assert_summary(&read, 3, &[("added-dvs", "1"), ("removed-dvs", "1")]);
    assert_eq!(delete_files(&read, "format"), BTreeSet::from(["PUFFIN"]));
    // Row lineage: each snapshot's first-row-id is the table's next-row-id before it.
    let table = rig.table().await;
    let mut snapshots: Vec<_> = table.metadata().snapshots().collect();
    snapshots.sort_by_key(|s| s.sequence_number());
    let ranges: Vec<_> = snapshots.iter().map(|s| s.row_range()).collect();
    assert_eq!(ranges, [Some((0, 20)), Some((20, 5)), Some((25, 0))]);
    assert_eq!(table.metadata().next_row_id(), 25);
    // DuckDB 1.4.4 with the iceberg extension of its wheel (build 2026-02-05) reads the v3
    // table and applies its deletion vectors.
    assert_eq!(read["duckdb"]["ids"], serde_json::json!(expected_ids()));
}

/// Files under `dir` whose name contains `needle`.
fn files_named(dir: &std::path::Path, needle: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else if path.display().to_string().contains(needle) {
                out.push(path.display().to_string());
            }
        }
    }
    out
}

/// A row delta built on a snapshot that is no longer current is refused as a conflict (not
/// rebased): nothing is committed and its files are deleted. A delete past a file's rows or of a
/// file that is not live is refused before anything is written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_row_delta_on_a_moved_base_is_a_conflict() {
    for version in [FormatVersion::V2, FormatVersion::V3] {
        let rig = rig(version).await;
        let a1 = rig.data_file("a", 0..10).await;
        let a1_path = a1.file_path().to_string();
        let mut d1 = adding(vec![a1]);
        d1.delete(&a1_path, 1);
        rig.commit(&d1).await.unwrap();
        let stale = RowDeltaBase::load(&rig.table().await).await.unwrap();
        let mut d2 = RowDelta::default();
        d2.delete(&a1_path, 2);
        let landed = rig.commit(&d2).await.unwrap();

        let mut d3 = RowDelta::default();
        d3.delete(&a1_path, 3);
        d3.properties
            .insert("floe.checkpoint.test".into(), "3".into());
        let commit_id = Uuid::now_v7();
        let e = commit_row_delta(&stale, &d3, &rig.swap, commit_id)
            .await
            .unwrap_err();
        assert!(matches!(e, RowDeltaError::Conflict { .. }), "{e}");
        assert!(e.is_retryable() && e.outcome_known());
        let table = rig.table().await;
        assert_eq!(table.metadata().current_snapshot_id(), landed);
        assert!(!table
            .metadata()
            .properties()
            .contains_key("floe.checkpoint.test"));
        assert_eq!(
            files_named(&rig.warehouse, &commit_id.to_string()),
            Vec::<String>::new()
        );
        // A properties-only delta on the stale base conflicts too.
        let mut d4 = RowDelta::default();
        d4.properties
            .insert("floe.checkpoint.test".into(), "4".into());
        let e = commit_row_delta(&stale, &d4, &rig.swap, Uuid::now_v7())
            .await
            .unwrap_err();
        assert!(matches!(e, RowDeltaError::Conflict { .. }), "{e}");

        let fresh = RowDeltaBase::load(&rig.table().await).await.unwrap();
        let mut past = RowDelta::default();
        past.delete(&a1_path, 10);
        let e = commit_row_delta(&fresh, &past, &rig.swap, Uuid::now_v7())
            .await
            .unwrap_err();
        assert!(
            matches!(e, RowDeltaError::Invalid(_)) && !e.is_retryable(),
            "{e}"
        );
        let mut absent = RowDelta::default();
        absent.delete("file:/nowhere.parquet", 0);
        let e = commit_row_delta(&fresh, &absent, &rig.swap, Uuid::now_v7())
            .await
            .unwrap_err();
        assert!(e.to_string().contains("not live"), "{e}");
    }
}

/// A v2 table upgraded to v3: the next delete of a data file with a position-delete file writes
/// a deletion vector holding both files' positions and removes the Parquet file (v3 adds no
/// position-delete files); the data manifest written before the upgrade gets its first row id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_an_upgrade_to_v3_a_deletion_vector_absorbs_the_position_delete_file() {
    use iceberg::transaction::{ApplyTransactionAction, Transaction};
    let rig = rig(FormatVersion::V2).await;
    let a1 = rig.data_file("a", 0..10).await;
    let a1_path = a1.file_path().to_string();
    let mut d1 = adding(vec![a1]);
    d1.delete(&a1_path, 1);
    rig.commit(&d1).await.unwrap();
    let tx = Transaction::new(&rig.table().await);
    let tx = tx
        .upgrade_table_version()
        .set_format_version(FormatVersion::V3)
        .apply(tx)
        .unwrap();
    tx.commit(rig.catalog.as_ref()).await.unwrap();

    let mut d2 = RowDelta::default();
    d2.delete(&a1_path, 3);
    rig.commit(&d2).await.unwrap();
    rig.assert_one_position_delete_file_per_data_file().await;
    let read = rig.read();
    eprintln!("upgraded: {read}");
    let expected: Vec<i64> = (0..10).filter(|i| ![1, 3].contains(i)).collect();
    assert_eq!(read["pyiceberg"]["ids"], serde_json::json!(expected));
    assert_eq!(read["duckdb"]["ids"], serde_json::json!(expected));
    assert_eq!(delete_files(&read, "format"), BTreeSet::from(["PUFFIN"]));
    assert_summary(
        &read,
        2,
        &[
            ("operation", "delete"),
            ("added-dvs", "1"),
            ("removed-position-delete-files", "1"),
            ("added-position-deletes", "2"),
            ("removed-position-deletes", "1"),
            ("total-delete-files", "1"),
            ("total-position-deletes", "2"),
        ],
    );
    let table = rig.table().await;
    assert_eq!(
        table.metadata().current_snapshot().unwrap().row_range(),
        Some((0, 10))
    );
    assert_eq!(table.metadata().next_row_id(), 10);
}
