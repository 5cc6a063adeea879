//! Table maintenance by the committer (issue "keep every floe table fast"), against a real SQL
//! catalog: recovery of committed batches that needs no snapshot history, and snapshot expiry in
//! the same fenced commits as the data, with every retained snapshot still readable.

use crate::common;

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use common::race::{event_batch, records_at};
use floe::commit::Committer;
use floe::config::MaintenanceConfig;
use floe::dlq::{DlqEntry, LocalDlq};
use floe::iceberg::fence::DeletionFence;
use floe::iceberg::table_state::{table_checkpoints, PROP_UNFINISHED_BATCH_IDS};
use floe::iceberg::target::IcebergTarget;
use floe::lease::{BatchStore, LeaseStore, SqlLeaseStore};
use floe::model::{BatchFiles, CheckpointRange, PendingBatch, Position, ShardId, ShardRange};
use floe::schema::MappedSchema;
use iceberg::transaction::{ApplyTransactionAction, Transaction};
use iceberg::{Catalog, TableIdent};
use uuid::Uuid;

struct Fixture {
    dir: tempfile::TempDir,
    catalog: Arc<dyn Catalog>,
    ident: TableIdent,
    store: Arc<SqlLeaseStore>,
    dlq: LocalDlq,
    schema: Arc<MappedSchema>,
}

async fn fixture() -> Fixture {
    fixture_partitioned(&["hour(event_time)"]).await
}

/// A fixture whose table is partitioned by `terms` (docs/partitioning.md).
async fn fixture_partitioned(terms: &[&str]) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let (catalog, ident, schema) = common::event_table_partitioned(dir.path(), "m", terms).await;
    let store = Arc::new(
        SqlLeaseStore::open_sqlite(dir.path().join("leases.sqlite"))
            .await
            .unwrap(),
    );
    let dlq = LocalDlq::new(dir.path().join("dlq"), "m");
    Fixture {
        dir,
        catalog,
        ident,
        store,
        dlq,
        schema,
    }
}

fn committer(
    f: &Fixture,
    batches: Arc<dyn BatchStore>,
    maintenance: MaintenanceConfig,
) -> Committer {
    let leases: Arc<dyn LeaseStore> = f.store.clone();
    Committer::new(
        "m",
        IcebergTarget::new("m", f.ident.clone(), f.catalog.clone(), f.dlq.clone())
            .with_maintenance(maintenance),
        leases,
        batches,
        1,
    )
}

fn dlq_entry(offset: i64) -> DlqEntry {
    DlqEntry {
        channel: "m".into(),
        source: "events".into(),
        shard: ShardId::kafka_partition(0),
        position: Position::Offset(offset),
        arrival_time: "2026-07-09T20:00:00.000Z".into(),
        key: None,
        schema_version: "event.schema.json".into(),
        error_code: "TYPE_MISMATCH".into(),
        field: "/value".into(),
        message: "expected a number".into(),
        payload_base64: None,
    }
}

/// Every DLQ entry published under the DLQ directory.
fn published_dlq_entries(f: &Fixture) -> usize {
    let mut n = 0;
    for entry in walk(&f.dir.path().join("dlq")) {
        if entry.to_string_lossy().contains("_staging")
            || entry.extension().is_none_or(|e| e != "jsonl")
        {
            continue;
        }
        n += std::fs::read_to_string(&entry).unwrap().lines().count();
    }
    n
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    let Ok(rd) = std::fs::read_dir(dir) else {
        return out;
    };
    for e in rd {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

/// A batch of DLQ entries only (every record of it was rejected): no data file names it in the
/// table. Before recovery read `floe.unfinished-batch-ids`, a committer that crashed after
/// committing it and before finishing it left a batch that — once maintenance (or another
/// engine) had expired the snapshot that added it — the next committer took for a duplicate:
/// it deleted the staged DLQ object and the entries were lost.
#[tokio::test]
async fn a_committed_batch_is_recovered_after_its_snapshot_was_expired() {
    let f = fixture().await;
    let staged = f
        .dlq
        .stage(Uuid::now_v7(), &[dlq_entry(0), dlq_entry(1)])
        .unwrap()
        .expect("staged");
    let dlq_only = PendingBatch {
        channel: "m".into(),
        batch_id: Uuid::now_v7(),
        worker_id: "w".into(),
        shards: vec![ShardRange {
            shard: ShardId::kafka_partition(0),
            range: CheckpointRange {
                after_exclusive: None,
                last_inclusive: Position::Offset(1),
            },
            lease_counter: 0,
        }],
        files: BatchFiles::Iceberg {
            data_files: vec![],
            dlq_staged: Some(staged),
            deleted_keys: None,
        },
        num_rows: 0,
        num_dead_lettered: 2,
        dead_lettered_by_code: [("TYPE_MISMATCH".to_string(), 2)].into(),
        data_bytes: 0,
        oldest_read_at_ms: 0,
    };
    f.store.put_batch(&dlq_only).await.unwrap();
    // The committer commits, then fails before publishing and finishing the batch (as a crash
    // would): a file where the DLQ's published directory goes makes the publish fail.
    let blocker = f.dir.path().join("dlq").join("m");
    std::fs::create_dir_all(blocker.parent().unwrap()).unwrap();
    std::fs::write(&blocker, b"not a directory").unwrap();
    let crashing = committer(&f, f.store.clone(), MaintenanceConfig::default());
    assert!(crashing.run_round().await.is_err());
    let table = f.catalog.load_table(&f.ident).await.unwrap();
    assert_eq!(
        table_checkpoints(&table)
            .unwrap()
            .get(&ShardId::kafka_partition(0)),
        Some(&Position::Offset(1))
    );
    assert_eq!(
        published_dlq_entries(&f),
        0,
        "not published before the crash"
    );
    // Another writer commits after it, then the snapshot that added the batch is expired.
    let committing = table.metadata().current_snapshot_id().unwrap();
    let other = event_batch(&f.schema, "m", &table, None, 100, 110).await;
    let files =
        floe::iceberg::writer::parse_data_files(&table, other.files.iceberg_data_files().unwrap())
            .unwrap();
    let tx = Transaction::new(&table);
    let tx = tx.fast_append().add_data_files(files).apply(tx).unwrap();
    let table = tx.commit(f.catalog.as_ref()).await.unwrap();
    let tx = Transaction::new(&table);
    let tx = tx
        .expire_snapshots()
        .expire_snapshot_ids([committing])
        .expire_older_than_ms(i64::MIN)
        .apply(tx)
        .unwrap();
    let table = tx.commit(f.catalog.as_ref()).await.unwrap();
    assert!(table.metadata().snapshot_by_id(committing).is_none());
    assert!(table
        .metadata()
        .properties()
        .get(PROP_UNFINISHED_BATCH_IDS)
        .is_some_and(|ids| ids.contains(&dlq_only.batch_id.to_string())));
    std::fs::remove_file(&blocker).unwrap();
    // The next committer finds the batch still pending: committed, so it is published, not lost.
    let next = committer(&f, f.store.clone(), MaintenanceConfig::default());
    let report = next.run_round().await.unwrap();
    assert_eq!((report.recovered, report.rejected), (1, 0), "{report:?}");
    assert_eq!(
        published_dlq_entries(&f),
        2,
        "the DLQ entries were published"
    );
    assert!(f.store.list_pending("m").await.unwrap().is_empty());
}

/// Snapshot expiry rides in the data commits: with `min_snapshots = 3` and a retention every
/// snapshot is older than, the table keeps exactly 3 snapshots, each retained snapshot still
/// reads (time travel), the current one holds every row once, and the expired snapshots'
/// manifest lists are deleted.
#[tokio::test]
async fn commits_expire_old_snapshots_and_every_retained_snapshot_still_reads() {
    let f = fixture().await;
    let maintenance = MaintenanceConfig {
        enabled: true,
        snapshot_retention: Duration::from_millis(1),
        min_snapshots: 3,
        ..MaintenanceConfig::default()
    };
    let c = committer(&f, f.store.clone(), maintenance);
    let mut manifest_lists = HashSet::new();
    for round in 0..8u64 {
        let table = f.catalog.load_table(&f.ident).await.unwrap();
        let after = (round > 0).then(|| (round * 10 - 1) as i64);
        let b = event_batch(&f.schema, "m", &table, after, round * 10, round * 10 + 10).await;
        f.store.put_batch(&b).await.unwrap();
        tokio::time::sleep(Duration::from_millis(5)).await;
        let report = c.run_round().await.unwrap();
        assert_eq!(report.committed, 1, "round {round}: {report:?}");
        let table = f.catalog.load_table(&f.ident).await.unwrap();
        manifest_lists.extend(
            table
                .metadata()
                .snapshots()
                .map(|s| s.manifest_list().to_string()),
        );
    }
    let table = f.catalog.load_table(&f.ident).await.unwrap();
    // One expiry per commit keeps min_snapshots; the snapshot a commit adds makes it one more
    // until the next commit expires again.
    let retained: Vec<i64> = table
        .metadata()
        .snapshots()
        .map(|s| s.snapshot_id())
        .collect();
    assert!(retained.len() <= 4, "{} snapshots retained", retained.len());
    let current = table.metadata().current_snapshot_id().unwrap();
    assert_eq!(
        records_at(&table, current).await,
        80,
        "every row once in the current snapshot"
    );
    for id in &retained {
        let rows = records_at(&table, *id).await;
        assert!(rows > 0 && rows <= 80, "snapshot {id} reads {rows} rows");
    }
    // Manifest lists of expired snapshots are deleted (off the commit path: give it a moment).
    tokio::time::sleep(Duration::from_millis(300)).await;
    let live: HashSet<String> = table
        .metadata()
        .snapshots()
        .map(|s| s.manifest_list().to_string())
        .collect();
    let expired: Vec<&String> = manifest_lists.difference(&live).collect();
    assert!(
        expired.len() >= 4,
        "{} manifest lists expired",
        expired.len()
    );
    for path in expired {
        assert!(
            !table.file_io().exists(path).await.unwrap(),
            "expired manifest list {path} still exists"
        );
    }
    for path in &live {
        assert!(
            table.file_io().exists(path).await.unwrap(),
            "{path} deleted"
        );
    }
}

/// With maintenance off, nothing is expired.
#[tokio::test]
async fn with_maintenance_off_every_snapshot_is_kept() {
    let f = fixture().await;
    let off = MaintenanceConfig {
        enabled: false,
        ..MaintenanceConfig::default()
    };
    let c = committer(&f, f.store.clone(), off);
    for round in 0..5u64 {
        let table = f.catalog.load_table(&f.ident).await.unwrap();
        let after = (round > 0).then(|| (round * 10 - 1) as i64);
        let b = event_batch(&f.schema, "m", &table, after, round * 10, round * 10 + 10).await;
        f.store.put_batch(&b).await.unwrap();
        c.run_round().await.unwrap();
    }
    let table = f.catalog.load_table(&f.ident).await.unwrap();
    assert_eq!(table.metadata().snapshots().count(), 5);
}

// ---- compaction, manifest rewrite, record expiration (replace and delete snapshots) ----

/// Every retained snapshot of `m.events`, read by PyIceberg (tests/py/table_snapshots.py).
fn snapshots_py(f: &Fixture) -> serde_json::Value {
    let (catalog, warehouse) = (f.dir.path().join("catalog.sqlite"), f.dir.path().join("wh"));
    common::run_py_reader(
        "table_snapshots.py",
        &[
            catalog.as_os_str(),
            warehouse.as_os_str(),
            "m.events".as_ref(),
        ],
    )
}

fn py_snapshot(all: &serde_json::Value, id: i64) -> serde_json::Value {
    all["snapshots"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["id"] == id)
        .unwrap_or_else(|| panic!("snapshot {id} not retained: {all}"))
        .clone()
}

fn writer_settings(target_file_size: u64) -> floe::iceberg::writer::WriterSettings {
    floe::iceberg::writer::WriterSettings {
        channel: "m".into(),
        compression: floe::iceberg::writer::ParquetCompression::Zstd(3),
        target_file_size,
        max_open_partitions: 48,
    }
}

/// A committer of epoch 1 with maintenance `m` and the SQL catalog's swap, so compaction,
/// manifest rewrite and record expiration can commit.
async fn maintaining(f: &Fixture, m: MaintenanceConfig) -> Committer {
    maintained_target(f, m).await.1
}

/// A committer maintaining the table with `m` (rewrites swapped through the SQL catalog), and
/// its target, whose maintainer a test can watch.
async fn maintained_target(f: &Fixture, m: MaintenanceConfig) -> (Arc<IcebergTarget>, Committer) {
    let swap = floe::catalog::swap::SqlSwap::open(
        f.catalog.clone(),
        &floe::config::CatalogDatabase::Sqlite(f.dir.path().join("catalog.sqlite")),
        "floe",
    )
    .await
    .unwrap();
    let target = Arc::new(
        IcebergTarget::new("m", f.ident.clone(), f.catalog.clone(), f.dlq.clone())
            .with_maintenance(m)
            .with_rewrites(Some(Arc::new(swap)), writer_settings(128 << 20)),
    );
    let leases: Arc<dyn LeaseStore> = f.store.clone();
    let c = Committer::new("m", target.clone(), leases, f.store.clone(), 1);
    (target, c)
}

/// Puts the batch of rows `from..from + 10` (after `from - 1`), timestamped from `base_ms`.
async fn put_batch_at(f: &Fixture, from: u64, base_ms: i64) {
    let table = f.catalog.load_table(&f.ident).await.unwrap();
    let after = (from > 0).then(|| from as i64 - 1);
    let b =
        common::race::event_batch_at(&f.schema, "m", &table, after, from, from + 10, base_ms, 0)
            .await;
    f.store.put_batch(&b).await.unwrap();
}

/// Maintenance that looks at every round, compacts closed hours at once and expires nothing.
fn eager() -> MaintenanceConfig {
    MaintenanceConfig {
        snapshot_expiry: false,
        compaction_delay: Duration::ZERO,
        interval: Duration::from_millis(1),
        manifest_rewrite: false,
        ..MaintenanceConfig::default()
    }
}

/// Commits rounds `rounds` of 10 `Event` rows each (ids `10 r ..10 r + 10`, July 2026, two
/// hours), one batch and one commit per round.
async fn commit_rounds(f: &Fixture, c: &Committer, rounds: std::ops::Range<u64>) {
    for round in rounds {
        let table = f.catalog.load_table(&f.ident).await.unwrap();
        let after = (round > 0).then(|| (round * 10 - 1) as i64);
        let b = event_batch(&f.schema, "m", &table, after, round * 10, round * 10 + 10).await;
        f.store.put_batch(&b).await.unwrap();
        let report = c.run_round().await.unwrap();
        assert_eq!(report.committed, 1, "round {round}: {report:?}");
    }
}

/// Commits `rounds` with a committer that maintains the table but does not compact; the table
/// after them.
async fn committed_without_compaction(
    f: &Fixture,
    rounds: std::ops::Range<u64>,
) -> iceberg::table::Table {
    let c = maintaining(
        f,
        MaintenanceConfig {
            compaction: false,
            ..eager()
        },
    )
    .await;
    commit_rounds(f, &c, rounds).await;
    drop(c);
    f.catalog.load_table(&f.ident).await.unwrap()
}

/// Runs idle rounds until the current snapshot's operation is `operation` (30 s at most).
async fn until_operation(f: &Fixture, c: &Committer, operation: &str) -> iceberg::table::Table {
    for _ in 0..300 {
        c.run_round().await.unwrap();
        let table = f.catalog.load_table(&f.ident).await.unwrap();
        let op = table
            .metadata()
            .current_snapshot()
            .map(|s| s.summary().operation.as_str().to_string());
        if op.as_deref() == Some(operation) {
            return table;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("no {operation} snapshot within 30 s");
}

fn summary_number(table: &iceberg::table::Table, key: &str) -> u64 {
    table
        .metadata()
        .current_snapshot()
        .unwrap()
        .summary()
        .additional_properties
        .get(key)
        .unwrap_or_else(|| panic!("summary has no {key}"))
        .parse()
        .unwrap()
}

/// Compaction: 6 commits wrote 12 small files into two closed hours; the committer rewrites
/// them as one `replace` snapshot with one file per hour (ceil(bytes / target) + 1 at most),
/// added and deleted records equal, the same rows in every column (PyIceberg, sorted rows
/// hashed), `floe.*` properties unchanged; the snapshot before it still reads (time travel);
/// and once snapshot expiry removed every snapshot that reached them, the replaced files are
/// deleted while every retained snapshot still reads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compaction_rewrites_closed_hours_with_the_same_rows_and_expiry_deletes_the_old_files() {
    let f = fixture().await;
    let before = committed_without_compaction(&f, 0..6).await;
    let before_id = before.metadata().current_snapshot_id().unwrap();
    let inputs = floe::iceberg::rewrite::CurrentFiles::load(&before)
        .await
        .unwrap();
    let input_paths: Vec<String> = inputs.live().map(|e| e.file_path().to_string()).collect();
    assert_eq!(input_paths.len(), 12, "two hours, one file each per commit");

    let c = maintaining(&f, eager()).await;
    let after = until_operation(&f, &c, "replace").await;
    assert_eq!(summary_number(&after, "deleted-data-files"), 12);
    assert_eq!(summary_number(&after, "added-data-files"), 2);
    assert_eq!(
        summary_number(&after, "added-records"),
        summary_number(&after, "deleted-records")
    );
    assert_eq!(summary_number(&after, "total-records"), 60);
    for key in [
        floe::iceberg::table_state::PROP_CHECKPOINTS,
        floe::iceberg::table_state::PROP_LAST_COMMIT_ID,
        floe::iceberg::table_state::PROP_COMMITTER_EPOCH,
        PROP_UNFINISHED_BATCH_IDS,
    ] {
        assert_eq!(
            before.metadata().properties().get(key),
            after.metadata().properties().get(key),
            "{key} unchanged by compaction"
        );
    }
    let current = floe::iceberg::rewrite::CurrentFiles::load(&after)
        .await
        .unwrap();
    let bytes: u64 = current.live().map(|e| e.file_size_in_bytes()).sum();
    let bound = bytes.div_ceil(128 << 20) + 1;
    for (group, files) in floe::iceberg::maintenance::files_by_partition(&current) {
        assert!(
            files.len() as u64 <= bound,
            "partition {group:?}: {} files",
            files.len()
        );
    }
    let py = snapshots_py(&f);
    let (old, new) = (
        py_snapshot(&py, before_id),
        py_snapshot(&py, after.metadata().current_snapshot_id().unwrap()),
    );
    assert_eq!(new["operation"], "replace");
    assert_eq!(old["rows"], 60);
    assert_eq!(
        old["digest"], new["digest"],
        "the same rows in every column"
    );
    assert_eq!(new["files_by_partition"].as_object().unwrap().len(), 2);
    for count in new["files_by_partition"].as_object().unwrap().values() {
        assert_eq!(count, 1, "{new}");
    }
    for path in &input_paths {
        assert!(
            after.file_io().exists(path).await.unwrap(),
            "{path} deleted while the snapshot before the replace is retained"
        );
    }

    // Expiry (2 snapshots kept, any age) removes every snapshot before the replace: the
    // replaced files go, the retained snapshots read.
    drop(c);
    let c = maintaining(
        &f,
        MaintenanceConfig {
            snapshot_expiry: true,
            snapshot_retention: Duration::from_millis(1),
            min_snapshots: 2,
            compaction: false,
            ..eager()
        },
    )
    .await;
    commit_rounds(&f, &c, 6..9).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let table = f.catalog.load_table(&f.ident).await.unwrap();
    assert!(
        table.metadata().snapshot_by_id(before_id).is_none(),
        "the snapshot before the replace expired"
    );
    for path in &input_paths {
        assert!(
            !table.file_io().exists(path).await.unwrap(),
            "{path}: no retained snapshot reaches it, it is deleted"
        );
    }
    let py = snapshots_py(&f);
    for s in py["snapshots"].as_array().unwrap() {
        assert!(s["rows"].as_u64().unwrap() >= 60, "snapshot reads: {s}");
    }
    let current = py_snapshot(&py, py["current"].as_i64().unwrap());
    assert_eq!(current["rows"], 90);
    let ids: Vec<u64> = serde_json::from_value(current["ids"].clone()).unwrap();
    assert_eq!(ids, (0..90).collect::<Vec<u64>>(), "every row once");
}

/// Manifest rewrite: beyond `max_manifests` the committer bin-packs the manifests into one
/// (`replace`, no data file added or removed), the rows unchanged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn manifests_beyond_the_maximum_are_rewritten_into_one_with_the_same_rows() {
    let f = fixture().await;
    let c = maintaining(
        &f,
        MaintenanceConfig {
            compaction: false,
            manifest_rewrite: true,
            max_manifests: 5,
            ..eager()
        },
    )
    .await;
    commit_rounds(&f, &c, 0..5).await;
    let table = f.catalog.load_table(&f.ident).await.unwrap();
    let before_id = table.metadata().current_snapshot_id().unwrap();
    assert_eq!(
        floe::iceberg::rewrite::CurrentFiles::load(&table)
            .await
            .unwrap()
            .manifests
            .len(),
        5,
        "one manifest per commit, not more than the maximum yet"
    );
    commit_rounds(&f, &c, 5..6).await;
    let after = until_operation(&f, &c, "replace").await;
    let current = floe::iceberg::rewrite::CurrentFiles::load(&after)
        .await
        .unwrap();
    assert_eq!(current.manifests.len(), 1);
    assert_eq!(current.live().count(), 12);
    assert_eq!(summary_number(&after, "added-data-files"), 0);
    assert_eq!(summary_number(&after, "deleted-data-files"), 0);
    let py = snapshots_py(&f);
    let new = py_snapshot(&py, after.metadata().current_snapshot_id().unwrap());
    assert_eq!(new["rows"], 60);
    assert!(
        py_snapshot(&py, before_id)["rows"] == 50,
        "time travel before the rewrite"
    );
    // Appends after the rewrite carry the rewritten manifest on.
    commit_rounds(&f, &c, 6..7).await;
    let table = f.catalog.load_table(&f.ident).await.unwrap();
    let files = floe::iceberg::rewrite::CurrentFiles::load(&table)
        .await
        .unwrap();
    assert_eq!(files.manifests.len(), 2);
    assert_eq!(files.live().count(), 14);
}

/// Record expiration: with `record_retention = 1h`, the July hours are removed in one `delete`
/// snapshot; the rows of an hour that ended less than the retention ago stay, identical.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn record_expiration_deletes_whole_old_hours_and_keeps_the_recent_rows() {
    let f = fixture().await;
    let c = expire_all_but_recent_rows(&f).await;
    // Checkpoints are untouched: the next batch continues them.
    commit_rounds(&f, &c, 4..5).await;
}

/// Commits 30 rows of July 2026 and 10 of the last minutes, then expires with a one-hour
/// retention: a `delete` of the 30, the 10 recent rows left. Returns the committer.
async fn expire_all_but_recent_rows(f: &Fixture) -> Committer {
    let c = maintaining(
        f,
        MaintenanceConfig {
            compaction: false,
            ..eager()
        },
    )
    .await;
    commit_rounds(f, &c, 0..3).await;
    // Ten rows of the last few minutes (the open hour, or one that ended minutes ago).
    let table = f.catalog.load_table(&f.ident).await.unwrap();
    let recent = common::race::event_batch_at(
        &f.schema,
        "m",
        &table,
        Some(29),
        30,
        40,
        floe::time::now_ms() - 5 * 60_000,
        0,
    )
    .await;
    f.store.put_batch(&recent).await.unwrap();
    c.run_round().await.unwrap();
    drop(c);
    let before = snapshots_py(f);
    let before = py_snapshot(&before, before["current"].as_i64().unwrap());
    assert_eq!(before["rows"], 40);

    let c = maintaining(
        f,
        MaintenanceConfig {
            compaction: false,
            record_retention: Some(Duration::from_secs(3600)),
            ..eager()
        },
    )
    .await;
    let after = until_operation(f, &c, "delete").await;
    assert_eq!(summary_number(&after, "deleted-records"), 30);
    assert_eq!(summary_number(&after, "total-records"), 10);
    let py = snapshots_py(f);
    let now = py_snapshot(&py, py["current"].as_i64().unwrap());
    let ids: Vec<u64> = serde_json::from_value(now["ids"].clone()).unwrap();
    assert_eq!(ids, (30..40).collect::<Vec<u64>>(), "only the recent rows");
    c
}

/// Record expiration of a `day` spec with a second field: the days of July 2026 ended long
/// ago and go, whatever their `source`; today's rows (a day not ended an hour ago) stay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn record_expiration_of_a_day_spec_deletes_ended_days_only() {
    let f = fixture_partitioned(&["day(event_time)", "identity(source)"]).await;
    expire_all_but_recent_rows(&f).await;
}

/// Compaction of an unpartitioned table: no partition ever closes, so its small files are
/// compacted once they come from two writes or more and the newest is older than
/// `compaction_delay` (zero here): one `replace` with the same rows in fewer files.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unpartitioned_tables_small_files_are_compacted_by_age() {
    assert_eq!(
        compacted_by_age(&[]).await,
        (4, 1),
        "one file per commit, then one"
    );
}

/// Compaction of a spec with an `identity` term. iceberg-rust's reader, given a file's
/// partition, puts identity columns back as run-end-encoded constants that its partition
/// splitter then refuses: every compaction failed (and was planned again every minute) until the
/// reader was no longer told the partition; the column is in the file anyway.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_identity_specs_small_files_are_compacted() {
    let (before, after) = compacted_by_age(&["identity(source)"]).await;
    assert!(after < before, "{after} files left of {before}");
}

/// Commits 4 rounds of 10 rows into a table partitioned by `terms` with compaction off, then
/// turns it on and waits for its `replace`: the same 40 rows; returns the live files before and
/// after it.
async fn compacted_by_age(terms: &[&str]) -> (usize, usize) {
    let f = fixture_partitioned(terms).await;
    let before = committed_without_compaction(&f, 0..4).await;
    let inputs = floe::iceberg::rewrite::CurrentFiles::load(&before)
        .await
        .unwrap();
    let c = maintaining(&f, eager()).await;
    let after = until_operation(&f, &c, "replace").await;
    assert_eq!(summary_number(&after, "added-records"), 40);
    assert_eq!(summary_number(&after, "deleted-records"), 40);
    let current = floe::iceberg::rewrite::CurrentFiles::load(&after)
        .await
        .unwrap();
    let py = snapshots_py(&f);
    let now = py_snapshot(&py, py["current"].as_i64().unwrap());
    let ids: Vec<u64> = serde_json::from_value(now["ids"].clone()).unwrap();
    assert_eq!(ids, (0..40).collect::<Vec<u64>>());
    (inputs.live().count(), current.live().count())
}

/// The SQL catalog's swap refuses a rewrite built on a snapshot that is no longer current (a
/// data commit landed in between), commits nothing, and deletes the manifests it wrote.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rewrite_built_on_a_stale_snapshot_is_refused_by_the_sql_catalog() {
    let f = fixture().await;
    let c = committer(&f, f.store.clone(), MaintenanceConfig::default());
    commit_rounds(&f, &c, 0..2).await;
    let stale = f.catalog.load_table(&f.ident).await.unwrap();
    let files = floe::iceberg::rewrite::CurrentFiles::load(&stale)
        .await
        .unwrap();
    commit_rounds(&f, &c, 2..3).await;
    let swap = floe::catalog::swap::SqlSwap::open(
        f.catalog.clone(),
        &floe::config::CatalogDatabase::Sqlite(f.dir.path().join("catalog.sqlite")),
        "floe",
    )
    .await
    .unwrap();
    let rewrite = floe::iceberg::rewrite::Rewrite {
        merge_manifests: true,
        tasks: vec!["manifest-rewrite"],
        ..Default::default()
    };
    let commit_id = Uuid::now_v7();
    let e = floe::iceberg::rewrite::commit_rewrite(&stale, &files, &rewrite, &swap, commit_id)
        .await
        .expect_err("stale rewrite refused");
    assert!(
        e.to_string().contains("snapshot"),
        "the refusal names the snapshot: {e}"
    );
    let table = f.catalog.load_table(&f.ident).await.unwrap();
    assert_eq!(table.metadata().snapshots().count(), 3);
    assert_eq!(
        table
            .metadata()
            .current_snapshot()
            .unwrap()
            .summary()
            .operation,
        iceberg::spec::Operation::Append
    );
    let metadata_dir = f.dir.path().join("wh/m/events/metadata");
    let leftovers: Vec<_> = std::fs::read_dir(&metadata_dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
        .filter(|n| n.contains(&commit_id.to_string()))
        .collect();
    assert!(leftovers.is_empty(), "refused rewrite left {leftovers:?}");
}

/// Metadata files dropped from the metadata log (`write.metadata.previous-versions-max`, here 2)
/// are deleted after the commit; the ones the log names and the current one stay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metadata_files_dropped_from_the_log_are_deleted() {
    let f = fixture().await;
    let table = f.catalog.load_table(&f.ident).await.unwrap();
    let tx = Transaction::new(&table);
    let tx = tx
        .update_table_properties()
        .set("write.metadata.previous-versions-max".into(), "2".into())
        .apply(tx)
        .unwrap();
    tx.commit(f.catalog.as_ref()).await.unwrap();
    let c = maintaining(&f, eager()).await;
    commit_rounds(&f, &c, 0..6).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let table = f.catalog.load_table(&f.ident).await.unwrap();
    let named: HashSet<String> = table
        .metadata()
        .metadata_log()
        .iter()
        .map(|m| m.metadata_file.trim_start_matches("file://").to_string())
        .chain(
            table
                .metadata_location()
                .map(|l| l.trim_start_matches("file://").to_string()),
        )
        .collect();
    assert_eq!(named.len(), 3, "{named:?}");
    let on_disk: HashSet<String> = walk(&f.dir.path().join("wh/m/events/metadata"))
        .into_iter()
        .map(|p| p.display().to_string())
        .filter(|p| p.ends_with(".metadata.json"))
        .collect();
    assert_eq!(on_disk, named, "only the logged metadata files remain");
}

/// The orphan sweep deletes old floe-named files nothing reaches (a data file, a manifest),
/// and spares young ones, files a pending batch names, files of other writers and everything
/// the table reaches; the table reads the same afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_orphan_sweep_removes_only_old_unreferenced_floe_files() {
    use floe::iceberg::orphans::{sweep, FileLister};
    let f = fixture().await;
    let c = committer(&f, f.store.clone(), MaintenanceConfig::default());
    commit_rounds(&f, &c, 0..2).await;
    let table = f.catalog.load_table(&f.ident).await.unwrap();
    let location = table.metadata().location().to_string();
    let now = floe::time::now_ms();
    let v7_at = |ms: i64| {
        Uuid::new_v7(uuid::Timestamp::from_unix(
            uuid::NoContext,
            (ms / 1000) as u64,
            0,
        ))
    };
    let old = v7_at(now - 2 * 86_400_000);
    let write = |path: String| {
        std::fs::create_dir_all(std::path::Path::new(&path).parent().unwrap()).unwrap();
        std::fs::write(&path, b"x").unwrap();
        path
    };
    let hour_dir = format!("{location}/data/event_time_hour=495452");
    let old_data = write(format!("{hour_dir}/m-{old}-00000.parquet"));
    let old_manifest = write(format!("{location}/metadata/{old}-m0.avro"));
    let young_data = write(format!("{hour_dir}/m-{}-00000.parquet", Uuid::now_v7()));
    let foreign = write(format!("{hour_dir}/00000-0-{}.parquet", Uuid::new_v4()));
    let other_channel = write(format!("{hour_dir}/n-{old}-00000.parquet"));
    let pending_file = write(format!(
        "{hour_dir}/m-{}-00000.parquet",
        v7_at(now - 3 * 86_400_000)
    ));
    let pending: HashSet<String> = [pending_file.clone()].into();
    let referenced = floe::iceberg::orphans::reachable_files(&table)
        .await
        .unwrap();
    assert!(referenced.len() > 5, "{referenced:?}");

    let fence = DeletionFence::new("m", f.ident.clone(), f.catalog.clone(), 1);
    let report = sweep(
        &table,
        "m",
        &FileLister::Local,
        &pending,
        86_400_000,
        now,
        &fence,
    )
    .await
    .unwrap();
    assert_eq!(report.deleted, 2, "{report:?}");
    assert_eq!(report.young, 1, "{report:?}");
    for gone in [&old_data, &old_manifest] {
        assert!(!std::path::Path::new(gone).exists(), "{gone} swept");
    }
    for kept in [&young_data, &foreign, &other_channel, &pending_file] {
        assert!(std::path::Path::new(kept).exists(), "{kept} spared");
    }
    for path in &referenced {
        assert!(
            table.file_io().exists(path).await.unwrap(),
            "{path} is referenced and must stay"
        );
    }
    let current = table.metadata().current_snapshot_id().unwrap();
    assert_eq!(records_at(&table, current).await, 20);
}

/// With the sweep on, a pending batch older than half its safety age is rejected (its files may
/// have been swept before it was handed off) and its files deleted; the next one is kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pending_batch_older_than_half_the_orphan_age_is_rejected() {
    let f = fixture().await;
    let leases: Arc<dyn LeaseStore> = f.store.clone();
    let c = Committer::new(
        "m",
        IcebergTarget::new("m", f.ident.clone(), f.catalog.clone(), f.dlq.clone())
            .with_maintenance(MaintenanceConfig {
                orphan_age: Duration::from_secs(3600),
                ..MaintenanceConfig::default()
            })
            .with_orphan_sweep(floe::iceberg::orphans::FileLister::Local),
        leases,
        f.store.clone(),
        1,
    );
    let table = f.catalog.load_table(&f.ident).await.unwrap();
    let mut b = event_batch(&f.schema, "m", &table, None, 0, 10).await;
    b.batch_id = Uuid::new_v7(uuid::Timestamp::from_unix(
        uuid::NoContext,
        (floe::time::now_ms() / 1000 - 31 * 60) as u64,
        0,
    ));
    let files = floe::iceberg::writer::data_file_paths(b.files.iceberg_data_files().unwrap());
    f.store.put_batch(&b).await.unwrap();
    let report = c.run_round().await.unwrap();
    assert_eq!((report.committed, report.rejected), (0, 1), "{report:?}");
    for path in files {
        assert!(!std::path::Path::new(&path).exists(), "{path} deleted");
    }
}

/// Late records keep arriving for an hour past `record_retention`, so every look commits a
/// record expiry; compaction of a closed recent hour still happens (it is planned on the table
/// the expiry committed, in the same look). Found by a fresh-user test: every look returned after
/// its commit and compaction never started.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn record_expiry_at_every_look_does_not_starve_compaction() {
    let f = fixture().await;
    let c = maintaining(
        &f,
        MaintenanceConfig {
            record_retention: Some(Duration::from_secs(3600)),
            ..eager()
        },
    )
    .await;
    // Two writes into the hour before the current one: closed, within the retention.
    let last_hour = (floe::time::now_ms() / 3_600_000 - 1) * 3_600_000 + 60_000;
    let july = 1_783_627_200_000;
    let mut after: Option<i64> = None;
    let mut next = 0u64;
    // One round committing a batch per base time (ten records each, one chain).
    let mut round = |bases: Vec<i64>| {
        let mut batches = Vec::new();
        for base in bases {
            batches.push((next, after, base));
            next += 10;
            after = Some((next - 1) as i64);
        }
        let (f, c) = (&f, &c);
        async move {
            for (from, prev, base) in batches {
                let table = f.catalog.load_table(&f.ident).await.unwrap();
                let b = common::race::event_batch_at(
                    &f.schema,
                    "m",
                    &table,
                    prev,
                    from,
                    from + 10,
                    base,
                    0,
                )
                .await;
                f.store.put_batch(&b).await.unwrap();
            }
            c.run_round().await.unwrap();
        }
    };
    // Late July records in every round: every look has an expiry to commit. The hour before
    // the current one (closed, within the retention) gets two writes.
    round(vec![july, last_hour]).await;
    round(vec![july, last_hour]).await;
    let mut compacted = false;
    for _ in 0..30 {
        round(vec![july]).await;
        tokio::time::sleep(Duration::from_millis(100)).await;
        let table = f.catalog.load_table(&f.ident).await.unwrap();
        compacted = table.metadata().snapshots().any(|s| {
            s.summary()
                .additional_properties
                .get(floe::iceberg::rewrite::SUMMARY_MAINTENANCE)
                .is_some_and(|t| t.contains("compaction"))
        });
        if compacted {
            break;
        }
    }
    let table = f.catalog.load_table(&f.ident).await.unwrap();
    let mut history: Vec<_> = table
        .metadata()
        .snapshots()
        .map(|s| {
            (
                s.sequence_number(),
                s.summary().operation.as_str().to_string(),
                s.summary()
                    .additional_properties
                    .get(floe::iceberg::rewrite::SUMMARY_MAINTENANCE)
                    .cloned(),
            )
        })
        .collect();
    history.sort();
    assert!(
        compacted,
        "the recent closed hour was compacted: {history:?}"
    );
}

// ---- each maintenance snapshot tells the truth; a committer that lost its epoch deletes nothing ----

/// Operation, tasks and record counts of every snapshot of `table`, oldest first.
fn history(table: &iceberg::table::Table) -> Vec<floe::iceberg::maintenance::MaintenanceSnapshot> {
    let mut snapshots: Vec<_> = table.metadata().snapshots().collect();
    snapshots.sort_by_key(|s| s.sequence_number());
    snapshots
        .iter()
        .map(|s| floe::iceberg::maintenance::MaintenanceSnapshot::of(table, s.snapshot_id()))
        .collect()
}

/// Record expiration and compaction due in the same look: the expired hour goes in a `delete`
/// snapshot (deleted-records = its rows, nothing added), then the compaction in a `replace`
/// whose added and deleted records are equal; the totals are exact in each, and PyIceberg reads
/// each snapshot with exactly those rows. Before, both went into one `replace` that dropped the
/// expired rows (deleted-records > added-records), a change incremental readers skip.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn record_expiry_and_compaction_in_one_look_commit_a_delete_then_a_replace() {
    let f = fixture().await;
    let (target, c) = maintained_target(
        &f,
        MaintenanceConfig {
            record_retention: Some(Duration::from_secs(3600)),
            ..eager()
        },
    )
    .await;
    let last_hour = (floe::time::now_ms() / 3_600_000 - 1) * 3_600_000 + 60_000;
    let july = 1_783_627_200_000;
    let put = |from: u64, base: i64| put_batch_at(&f, from, base);
    // Two writes into the hour before the current one (closed, within the retention): the look
    // after the second starts their compaction.
    put(0, last_hour).await;
    c.run_round().await.unwrap();
    put(10, last_hour).await;
    tokio::time::sleep(Duration::from_millis(5)).await;
    c.run_round().await.unwrap();
    target.maintainer().wait_for_compaction().await;
    // Late July records (expired) arrive before the next look, which then has both to commit.
    put(20, july).await;
    assert_eq!(c.commit_round().await.unwrap().committed, 1);
    let before = f.catalog.load_table(&f.ident).await.unwrap();
    let before_id = before.metadata().current_snapshot_id().unwrap();
    tokio::time::sleep(Duration::from_millis(5)).await;
    c.maintain().await;

    let table = f.catalog.load_table(&f.ident).await.unwrap();
    let history = history(&table);
    eprintln!(
        "snapshot | operation | floe.maintenance | added-records | deleted-records | total-records"
    );
    for s in &history {
        eprintln!(
            "{} | {} | {} | {} | {} | {}",
            s.snapshot_id,
            s.operation,
            s.tasks,
            s.added_records,
            s.deleted_records,
            s.total_records
        );
    }
    let at = history
        .iter()
        .position(|s| s.snapshot_id == before_id)
        .unwrap();
    let new = &history[at + 1..];
    assert_eq!(new.len(), 2, "a delete, then a replace: {history:?}");
    let (delete, replace) = (&new[0], &new[1]);
    assert_eq!(
        (delete.operation.as_str(), delete.tasks.as_str()),
        ("delete", "record-expiry")
    );
    assert_eq!(
        (
            delete.added_records,
            delete.deleted_records,
            delete.total_records
        ),
        (0, 10, 20)
    );
    assert_eq!(
        (replace.operation.as_str(), replace.tasks.as_str()),
        ("replace", "compaction")
    );
    assert_eq!(
        (
            replace.added_records,
            replace.deleted_records,
            replace.total_records
        ),
        (20, 20, 20)
    );
    for s in history.iter().filter(|s| s.operation == "replace") {
        assert_eq!(s.added_records, s.deleted_records, "{s:?}");
    }

    let py = snapshots_py(&f);
    let (old, deleted, replaced) = (
        py_snapshot(&py, before_id),
        py_snapshot(&py, delete.snapshot_id),
        py_snapshot(&py, replace.snapshot_id),
    );
    assert_eq!(old["rows"], 30);
    assert_eq!(deleted["operation"], "delete");
    assert_eq!(deleted["summary"]["deleted-records"], "10");
    assert_eq!(deleted["summary"]["total-records"], "20");
    let ids: Vec<u64> = serde_json::from_value(deleted["ids"].clone()).unwrap();
    assert_eq!(ids, (0..20).collect::<Vec<u64>>(), "the July rows are gone");
    assert_eq!(replaced["operation"], "replace");
    assert_eq!(replaced["summary"]["added-records"], "20");
    assert_eq!(replaced["summary"]["deleted-records"], "20");
    assert_eq!(replaced["rows"], 20);
    assert_eq!(
        deleted["digest"], replaced["digest"],
        "the replace keeps every row of the delete before it"
    );
    assert_eq!(replaced["files_by_partition"].as_object().unwrap().len(), 1);
}

/// A swap that, once armed, lets a newer committer take the table over right after its next
/// successful swap and before the swap returns: the committer that swapped goes on as a zombie
/// (what a committer paused past its lease at that point sees when it resumes).
struct TakeoverAfterSwap {
    inner: floe::catalog::swap::SqlSwap,
    takeover: tokio::sync::Mutex<Option<futures::future::BoxFuture<'static, ()>>>,
}

#[async_trait::async_trait]
impl floe::catalog::swap::TableSwap for TakeoverAfterSwap {
    async fn swap(
        &self,
        ident: &TableIdent,
        requirements: Vec<iceberg::TableRequirement>,
        updates: Vec<iceberg::TableUpdate>,
    ) -> iceberg::Result<iceberg::table::Table> {
        let swapped = self.inner.swap(ident, requirements, updates).await?;
        let takeover = self.takeover.lock().await.take();
        if let Some(takeover) = takeover {
            takeover.await;
        }
        Ok(swapped)
    }
}

/// Every file under the table location.
fn table_files(f: &Fixture) -> std::collections::BTreeSet<std::path::PathBuf> {
    walk(&f.dir.path().join("wh/m/events"))
        .into_iter()
        .collect()
}

/// Committer A (epoch 1) commits a manifest rewrite that expires 4 snapshots; right after its
/// swap, committer B takes the committer lease (counter 2; with `lease_fence` off, A's fence
/// checks the table only) and commits, expiring snapshots and deleting their files. A, now a
/// zombie, must delete nothing — not the files of the snapshots its own commit expired, not
/// those B deleted — and the table loses nothing.
async fn a_zombie_committer_deletes_nothing(lease_fence: bool) {
    use floe::lease::{LeaseKey, LeaseSpec};
    use futures::FutureExt;
    let f = fixture().await;
    let p = committer(
        &f,
        f.store.clone(),
        MaintenanceConfig {
            snapshot_expiry: false,
            ..MaintenanceConfig::default()
        },
    );
    commit_rounds(&f, &p, 0..6).await;
    drop(p);
    let expiring = MaintenanceConfig {
        snapshot_expiry: true,
        snapshot_retention: Duration::from_millis(1),
        min_snapshots: 2,
        compaction: false,
        manifest_rewrite: true,
        max_manifests: 3,
        ..eager()
    };
    f.store
        .ensure_leases("m", &[LeaseSpec::new(LeaseKey::Committer)])
        .await
        .unwrap();
    let row = f
        .store
        .get_lease("m", &LeaseKey::Committer)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        f.store.take_lease(&row, "a").await.unwrap().lease_counter,
        1
    );

    // B, armed to take over inside A's next swap.
    let b_target = {
        let t = IcebergTarget::new("m", f.ident.clone(), f.catalog.clone(), f.dlq.clone())
            .with_maintenance(expiring);
        Arc::new(if lease_fence {
            t.with_lease_fence(f.store.clone())
        } else {
            t
        })
    };
    let b_leases: Arc<dyn LeaseStore> = f.store.clone();
    let b = Committer::new("m", b_target.clone(), b_leases, f.store.clone(), 2);
    let after_b: Arc<std::sync::Mutex<Option<std::collections::BTreeSet<std::path::PathBuf>>>> =
        Arc::default();
    let takeover = {
        let (store, after_b, root) = (
            f.store.clone(),
            after_b.clone(),
            f.dir.path().join("wh/m/events"),
        );
        async move {
            if lease_fence {
                let row = store
                    .get_lease("m", &LeaseKey::Committer)
                    .await
                    .unwrap()
                    .unwrap();
                assert_eq!(store.take_lease(&row, "b").await.unwrap().lease_counter, 2);
            }
            b.commit_round().await.unwrap();
            b_target.wait_for_cleanup().await;
            *after_b.lock().unwrap() = Some(walk(&root).into_iter().collect());
        }
        .boxed()
    };
    let swap = TakeoverAfterSwap {
        inner: floe::catalog::swap::SqlSwap::open(
            f.catalog.clone(),
            &floe::config::CatalogDatabase::Sqlite(f.dir.path().join("catalog.sqlite")),
            "floe",
        )
        .await
        .unwrap(),
        takeover: tokio::sync::Mutex::new(Some(takeover)),
    };
    let a_target = {
        let t = IcebergTarget::new("m", f.ident.clone(), f.catalog.clone(), f.dlq.clone())
            .with_maintenance(expiring)
            .with_rewrites(Some(Arc::new(swap)), writer_settings(128 << 20));
        Arc::new(if lease_fence {
            t.with_lease_fence(f.store.clone())
        } else {
            t
        })
    };
    let a_leases: Arc<dyn LeaseStore> = f.store.clone();
    let a = Committer::new("m", a_target.clone(), a_leases, f.store.clone(), 1);
    let before_a = f.catalog.load_table(&f.ident).await.unwrap();
    assert_eq!(before_a.metadata().snapshots().count(), 6);

    let report = a_target.maintain_once(a.epoch()).await.unwrap();
    a_target.wait_for_cleanup().await;
    assert_eq!(report.tasks, vec!["manifest-rewrite"], "{report:?}");
    let after_b = after_b.lock().unwrap().clone().expect("B took over");
    let after_a = table_files(&f);
    assert_eq!(
        after_a.symmetric_difference(&after_b).collect::<Vec<_>>(),
        Vec::<&std::path::PathBuf>::new(),
        "the zombie deleted files"
    );
    // What A's commit expired is still on disk (an orphan for B's sweep), never deleted by A.
    let table = f.catalog.load_table(&f.ident).await.unwrap();
    let a_expired: Vec<_> = before_a
        .metadata()
        .snapshots()
        .filter(|s| table.metadata().snapshot_by_id(s.snapshot_id()).is_none())
        .map(|s| s.manifest_list().to_string())
        .collect();
    assert!(a_expired.len() >= 4, "{a_expired:?}");
    assert!(
        a_expired
            .iter()
            .filter(|p| std::path::Path::new(p.trim_start_matches("file://")).exists())
            .count()
            >= 4,
        "the manifest lists of the snapshots A expired stay: {a_expired:?}"
    );
    // The table loses nothing: every file it reaches exists, every snapshot reads every row.
    assert_eq!(floe::iceberg::table_state::table_epoch(&table), 2);
    for path in floe::iceberg::orphans::reachable_files(&table)
        .await
        .unwrap()
    {
        assert!(
            table.file_io().exists(&path).await.unwrap(),
            "{path} is referenced"
        );
    }
    let py = snapshots_py(&f);
    for s in py["snapshots"].as_array().unwrap() {
        assert_eq!(s["rows"], 60, "{s}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_committer_whose_lease_moved_deletes_nothing_and_the_table_loses_nothing() {
    a_zombie_committer_deletes_nothing(true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_committer_whose_epoch_the_table_no_longer_carries_deletes_nothing() {
    a_zombie_committer_deletes_nothing(false).await;
}

/// An idle table costs no maintenance looks (issue 43): after a look that found nothing to do,
/// the next one waits for a commit (then `interval` after the last look) or an hour, however
/// short `interval` is; each look loads the table from the catalog.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_tables_maintenance_looks_again_only_after_a_commit() {
    let f = fixture().await;
    let (target, c) = maintained_target(&f, eager()).await;
    // Rows of the open hour: nothing for compaction to do.
    let put = |from: u64| put_batch_at(&f, from, floe::time::now_ms());
    put(0).await;
    assert_eq!(c.run_round().await.unwrap().committed, 1);
    // The look after that round found nothing to do: however often idle rounds come and
    // however short the interval (1 ms), no look is due until the next commit.
    for _ in 0..3 {
        tokio::time::sleep(Duration::from_millis(5)).await;
        assert!(
            !target.maintainer().due().await,
            "an idle table is not looked at"
        );
        assert_eq!(c.run_round().await.unwrap().committed, 0);
    }
    put(10).await;
    assert_eq!(c.commit_round().await.unwrap().committed, 1);
    assert!(
        target.maintainer().due().await,
        "a commit makes the next look due again, `interval` after the last"
    );
}
