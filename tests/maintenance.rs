//! Table maintenance by the committer (issue "keep every floe table fast"), against a real SQL
//! catalog: recovery of committed batches that needs no snapshot history, and snapshot expiry in
//! the same fenced commits as the data, with every retained snapshot still readable.

mod common;

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use common::race::{event_batch, records_at};
use floe::commit::Committer;
use floe::config::MaintenanceConfig;
use floe::dlq::{DlqEntry, LocalDlq};
use floe::iceberg::table_state::{table_checkpoints, PROP_UNFINISHED_BATCH_IDS};
use floe::iceberg::target::IcebergTarget;
use floe::lease::{BatchStore, LeaseStore, SqliteLeaseStore};
use floe::model::{BatchFiles, CheckpointRange, PendingBatch, Position, ShardId, ShardRange};
use floe::schema::MappedSchema;
use iceberg::transaction::{ApplyTransactionAction, Transaction};
use iceberg::{Catalog, TableIdent};
use uuid::Uuid;

struct Fixture {
    dir: tempfile::TempDir,
    catalog: Arc<dyn Catalog>,
    ident: TableIdent,
    store: Arc<SqliteLeaseStore>,
    dlq: LocalDlq,
    schema: Arc<MappedSchema>,
}

async fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let (catalog, ident, schema) = common::event_table(dir.path(), "m").await;
    let store = Arc::new(
        SqliteLeaseStore::open(dir.path().join("leases.sqlite"))
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
