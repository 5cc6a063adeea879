//! The committer's compare-and-swap (docs/design.md, protocol step 4) against a real SQL catalog:
//! iceberg-rust's `Transaction::commit` silently rebases a commit built from a stale table,
//! so floe fences it to the validated snapshot; two committers racing on the same pending
//! batch produce exactly one commit.

use crate::common;

use std::sync::Arc;

use common::race::{event_batch, total_records, GateCatalog};
use floe::commit::Committer;
use floe::dlq::LocalDlq;
use floe::iceberg::fence::FencedCatalog;
use floe::iceberg::table_state::{committed_batch_ids, table_checkpoints};
use floe::lease::{BatchStore, LeaseStore, SqlLeaseStore};
use floe::model::{PendingBatch, Position, ShardId};
use floe::schema::MappedSchema;
use iceberg::table::Table;
use iceberg::transaction::{ApplyTransactionAction, Transaction};
use iceberg::{Catalog, ErrorKind, TableIdent};
use uuid::Uuid;

/// The database under the catalog and the lease store: the embedded SQLite files, or the test
/// PostgreSQL server (`deploy/local/postgres.sh`; a fresh catalog name and lease schema per test).
#[derive(Debug, Clone, Copy)]
enum Db {
    Sqlite,
    Postgres,
}

/// A lease store on `db`: a file in `dir`, or a fresh schema of the test server.
async fn lease_store(db: Db, dir: &std::path::Path) -> SqlLeaseStore {
    match db {
        Db::Sqlite => SqlLeaseStore::open_sqlite(dir.join(format!("{}.sqlite", Uuid::new_v4())))
            .await
            .unwrap(),
        Db::Postgres => SqlLeaseStore::open_postgres(&common::postgres_options())
            .await
            .unwrap(),
    }
}

struct Fixture {
    _dir: tempfile::TempDir,
    db: Db,
    catalog: Arc<dyn Catalog>,
    ident: TableIdent,
    store: Arc<SqlLeaseStore>,
    dlq: LocalDlq,
    schema: Arc<MappedSchema>,
}

async fn fixture(db: Db) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let (catalog, ident, schema) = match db {
        Db::Sqlite => common::event_table(dir.path(), "race").await,
        Db::Postgres => {
            // Rows of the SQL catalog are keyed by the catalog name: a fresh one per test.
            let catalog = floe::catalog::open_sql_catalog_local(
                &floe::config::CatalogDatabase::Postgres(common::postgres_url()),
                &dir.path().join("wh"),
                &common::unique_name("race"),
            )
            .await
            .unwrap();
            let (ident, schema) = common::event_table_in(catalog.as_ref(), "race", "race").await;
            (catalog, ident, schema)
        }
    };
    let store = Arc::new(lease_store(db, dir.path()).await);
    let dlq = LocalDlq::new(dir.path().join("dlq"), "race");
    Fixture {
        _dir: dir,
        db,
        catalog,
        ident,
        store,
        dlq,
        schema,
    }
}

/// Writes data files for ids `from..to` and returns the pending batch covering offsets
/// `(after, to - 1]` of partition 0.
async fn batch(f: &Fixture, table: &Table, after: Option<i64>, from: u64, to: u64) -> PendingBatch {
    event_batch(&f.schema, "race", table, after, from, to).await
}

fn committer(f: &Fixture, epoch: u64) -> Committer {
    let leases: Arc<dyn LeaseStore> = f.store.clone();
    let batches: Arc<dyn BatchStore> = f.store.clone();
    Committer::new(
        "race",
        floe::iceberg::target::IcebergTarget::new(
            "race",
            f.ident.clone(),
            f.catalog.clone(),
            f.dlq.clone(),
        ),
        leases,
        batches,
        epoch,
    )
}

async fn fence_refuses_a_commit_built_on_a_stale_snapshot_that_iceberg_would_rebase(db: Db) {
    let f = fixture(db).await;
    let stale = f.catalog.load_table(&f.ident).await.unwrap();
    let b1 = batch(&f, &stale, None, 0, 10).await;
    let b2 = batch(&f, &stale, None, 10, 20).await;
    let files = |t: &Table, b: &PendingBatch| {
        floe::iceberg::writer::parse_data_files(t, b.files.iceberg_data_files().unwrap()).unwrap()
    };

    // Someone else commits first.
    let tx = Transaction::new(&stale);
    let tx = tx
        .fast_append()
        .add_data_files(files(&stale, &b1))
        .apply(tx)
        .unwrap();
    tx.commit(f.catalog.as_ref()).await.unwrap();

    // Fenced to the stale snapshot: refused as a conflict.
    let fenced = FencedCatalog::new(f.catalog.clone(), "test");
    fenced.set_fence(f.ident.clone(), stale.metadata().current_snapshot_id());
    let tx = Transaction::new(&stale);
    let tx = tx
        .fast_append()
        .add_data_files(files(&stale, &b2))
        .apply(tx)
        .unwrap();
    let err = tx.commit(&fenced).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::CatalogCommitConflicts);
    assert_eq!(
        total_records(&f.catalog.load_table(&f.ident).await.unwrap()),
        10
    );

    // The trap the fence exists for: unfenced, the stale commit is silently rebased.
    let tx = Transaction::new(&stale);
    let tx = tx
        .fast_append()
        .add_data_files(files(&stale, &b2))
        .apply(tx)
        .unwrap();
    tx.commit(f.catalog.as_ref()).await.unwrap();
    assert_eq!(
        total_records(&f.catalog.load_table(&f.ident).await.unwrap()),
        20
    );
}

async fn two_committers_racing_on_the_same_batches_commit_each_exactly_once(db: Db) {
    let f = fixture(db).await;
    let a = committer(&f, 1);
    let b = committer(&f, 1);
    let mut after = None;
    let mut expected_rows = 0;
    for round in 0..8u64 {
        let table = f.catalog.load_table(&f.ident).await.unwrap();
        let pb = batch(&f, &table, after, round * 10, round * 10 + 10).await;
        after = Some(round as i64 * 10 + 9);
        expected_rows += pb.num_rows;
        f.store.put_batch(&pb).await.unwrap();
        let (ra, rb) = tokio::join!(a.run_round(), b.run_round());
        // Whoever lost the race either saw a conflict or found nothing left to do.
        let committed = ra.as_ref().map(|r| r.committed).unwrap_or(0)
            + rb.as_ref().map(|r| r.committed).unwrap_or(0);
        assert!(committed <= 1, "round {round}: {ra:?} {rb:?}");
        // Let a round settle conflicts.
        a.run_round().await.unwrap();
        let table = f.catalog.load_table(&f.ident).await.unwrap();
        assert!(
            committed_batch_ids(&table).contains(&pb.batch_id),
            "round {round}"
        );
        assert_eq!(total_records(&table), expected_rows, "round {round}");
        assert!(f.store.list_pending("race").await.unwrap().is_empty());
    }
    let table = f.catalog.load_table(&f.ident).await.unwrap();
    let cp = table_checkpoints(&table).unwrap();
    assert_eq!(
        cp.get(&ShardId::kafka_partition(0)),
        Some(&Position::Offset(79))
    );
    let ids = floe::tools::quickstart::table_ids(&table).await.unwrap();
    let mut sorted = ids.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(sorted.len(), ids.len(), "no row twice");
    assert_eq!(ids.len(), 80);
}

async fn stale_committer_is_fenced_by_a_newer_epoch_and_a_duplicate_batch_is_rejected(db: Db) {
    let f = fixture(db).await;
    let old = committer(&f, 1);
    let new = committer(&f, 2);
    let table = f.catalog.load_table(&f.ident).await.unwrap();
    let first = batch(&f, &table, None, 0, 10).await;
    f.store.put_batch(&first).await.unwrap();
    assert_eq!(new.run_round().await.unwrap().committed, 1);
    // A second worker read the same range: a duplicate, rejected and its files deleted.
    let dup = batch(&f, &table, None, 0, 10).await;
    f.store.put_batch(&dup).await.unwrap();
    let paths = floe::iceberg::writer::data_file_paths(dup.files.iceberg_data_files().unwrap());
    assert!(std::path::Path::new(&paths[0]).exists());
    match old.run_round().await {
        Err(floe::commit::CommitError::Fenced {
            table_epoch: 2,
            own: 1,
        }) => {}
        other => panic!("stale committer must be fenced, got {other:?}"),
    }
    let report = new.run_round().await.unwrap();
    assert_eq!((report.committed, report.rejected), (0, 1));
    assert!(
        !std::path::Path::new(&paths[0]).exists(),
        "rejected batch's file deleted"
    );
    let table = f.catalog.load_table(&f.ident).await.unwrap();
    assert_eq!(total_records(&table), 10);
}

/// Found by the fresh review of issue 43: a committer whose lease another worker had taken, but
/// whose epoch the table still carried (the new committer had not committed yet), rejected a
/// batch and deleted its files, which the new committer then committed. Discarding needs the
/// committer lease: the stale committer steps down and the files stay.
async fn a_committer_whose_lease_was_taken_discards_no_batch(db: Db) {
    let f = fixture(db).await;
    f.store
        .ensure_leases(
            "race",
            &[floe::lease::LeaseSpec::new(
                floe::lease::LeaseKey::Committer,
            )],
        )
        .await
        .unwrap();
    let committer_lease = || async {
        f.store
            .get_lease("race", &floe::lease::LeaseKey::Committer)
            .await
            .unwrap()
            .unwrap()
    };
    let held = f
        .store
        .take_lease(&committer_lease().await, "a")
        .await
        .unwrap();
    let old = committer(&f, held.lease_counter);
    let table = f.catalog.load_table(&f.ident).await.unwrap();
    let first = batch(&f, &table, None, 0, 10).await;
    f.store.put_batch(&first).await.unwrap();
    assert_eq!(old.run_round().await.unwrap().committed, 1);
    // Another worker takes the committer lease; a duplicate of the first batch arrives.
    f.store
        .take_lease(&committer_lease().await, "b")
        .await
        .unwrap();
    let dup = batch(&f, &table, None, 0, 10).await;
    f.store.put_batch(&dup).await.unwrap();
    let paths = floe::iceberg::writer::data_file_paths(dup.files.iceberg_data_files().unwrap());
    match old.run_round().await {
        Err(floe::commit::CommitError::Fenced { .. }) => {}
        other => panic!("a committer whose lease was taken must step down, got {other:?}"),
    }
    assert!(
        std::path::Path::new(&paths[0]).exists(),
        "a stale committer deleted a pending batch's file"
    );
    let pending = f.store.list_pending("race").await.unwrap();
    assert!(
        pending.iter().any(|b| b.batch_id == dup.batch_id),
        "still pending"
    );
}

async fn committers_with_different_lease_views_validating_the_same_snapshot_commit_once(db: Db) {
    // Worker 1 read offsets 0..=9 under lease counter 1; worker 2 took the lease (counter 2)
    // and read 0..=11 again. Committer A's lease view is stale (it sees counter 1: batch X is
    // current), committer B's is fresh (X is stale, Z is current). Both validate against the
    // empty table; without the fence both commits would land and rows 0..=9 would be doubled.
    let f = fixture(db).await;
    let other = tempfile::tempdir().unwrap();
    let store_a = Arc::new(lease_store(f.db, other.path()).await);
    let table = f.catalog.load_table(&f.ident).await.unwrap();
    let mut x = batch(&f, &table, None, 0, 10).await;
    x.shards[0].lease_counter = 1;
    let mut z = batch(&f, &table, None, 0, 12).await;
    z.shards[0].lease_counter = 2;
    for store in [&f.store, &store_a] {
        store.put_batch(&x).await.unwrap();
        store.put_batch(&z).await.unwrap();
        store
            .ensure_leases(
                "race",
                &[floe::lease::LeaseSpec::new(floe::lease::LeaseKey::shard(
                    "0",
                ))],
            )
            .await
            .unwrap();
    }
    // Store B's lease moved to counter 2 (two takes); store A still shows counter 1 (one take).
    let lease = |s: &Arc<SqlLeaseStore>| {
        let s = s.clone();
        async move {
            s.list_leases("race")
                .await
                .unwrap()
                .into_iter()
                .next()
                .unwrap()
        }
    };
    let l = lease(&store_a).await;
    store_a.take_lease(&l, "w1").await.unwrap();
    let l = lease(&f.store).await;
    let l = f.store.take_lease(&l, "w1").await.unwrap();
    f.store.take_lease(&l, "w2").await.unwrap();

    let gate = Arc::new(GateCatalog::gate(f.catalog.clone()));
    let a = Committer::new(
        "race",
        floe::iceberg::target::IcebergTarget::new(
            "race",
            f.ident.clone(),
            f.catalog.clone(),
            f.dlq.clone(),
        ),
        store_a.clone(),
        store_a.clone(),
        1,
    );
    let b = Committer::new(
        "race",
        floe::iceberg::target::IcebergTarget::new(
            "race",
            f.ident.clone(),
            gate.clone(),
            f.dlq.clone(),
        ),
        f.store.clone(),
        f.store.clone(),
        1,
    );
    // B loads the empty table and is held; A validates the same snapshot and commits X; then B
    // resumes with its view of the empty table and tries to commit Z.
    let b_round = tokio::spawn(async move { b.run_round().await });
    gate.first_loaded.notified().await;
    let ra = a.run_round().await;
    gate.release.notify_one();
    let rb = b_round.await.unwrap();
    let outcomes = [&ra, &rb].map(|r| matches!(r, Ok(rep) if rep.committed == 1));
    assert_eq!(
        outcomes.iter().filter(|c| **c).count(),
        1,
        "exactly one commit lands: {ra:?} / {rb:?}"
    );
    assert!(
        matches!(ra, Err(floe::commit::CommitError::Conflict(_)))
            || matches!(rb, Err(floe::commit::CommitError::Conflict(_))),
        "the loser sees a conflict: {ra:?} / {rb:?}"
    );
    let table = f.catalog.load_table(&f.ident).await.unwrap();
    let ids = floe::tools::quickstart::table_ids(&table).await.unwrap();
    let mut distinct = ids.clone();
    distinct.sort();
    distinct.dedup();
    assert_eq!(distinct.len(), ids.len(), "no row twice");
}

async fn files_the_table_references_are_never_deleted_even_if_no_summary_names_the_batch(db: Db) {
    // As after snapshot expiration removed the summary that named a committed batch, and a
    // committer crash left that batch pending: it looks like a duplicate, but its files are
    // live data.
    let f = fixture(db).await;
    let c = committer(&f, 1);
    let table = f.catalog.load_table(&f.ident).await.unwrap();
    let first = batch(&f, &table, None, 0, 10).await;
    f.store.put_batch(&first).await.unwrap();
    assert_eq!(c.run_round().await.unwrap().committed, 1);
    let mut orphan_looking = first.clone();
    orphan_looking.batch_id = Uuid::now_v7();
    f.store.put_batch(&orphan_looking).await.unwrap();
    let report = c.run_round().await.unwrap();
    assert_eq!((report.rejected, report.recovered), (0, 1));
    for p in floe::iceberg::writer::data_file_paths(first.files.iceberg_data_files().unwrap()) {
        assert!(std::path::Path::new(&p).exists(), "{p} must survive");
    }
    let table = f.catalog.load_table(&f.ident).await.unwrap();
    assert_eq!(
        floe::tools::quickstart::table_ids(&table)
            .await
            .unwrap()
            .len(),
        10
    );
    assert!(f.store.list_pending("race").await.unwrap().is_empty());
}

/// A table dropped and created again under the same name (no checkpoints) is never committed
/// into: a first batch (no `after`) would otherwise land in it before any worker noticed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_committer_never_commits_into_a_table_replaced_under_its_name() {
    let rig = common::WorkerRig::new("rp").await;
    let committer = rig.committer(1);
    committer.run_round().await.unwrap(); // sees (and remembers) the table
    rig.catalog.drop_table(&rig.ident).await.unwrap();
    common::event_table_in(rig.catalog.as_ref(), "rp", "rp").await;
    let replaced = rig.catalog.load_table(&rig.ident).await.unwrap();
    let batch = event_batch(&rig.schema, "rp", &replaced, None, 0, 10).await;
    rig.store.put_batch(&batch).await.unwrap();
    let err = committer.run_round().await.unwrap_err();
    assert!(err.to_string().contains("dropped and replaced"), "{err}");
    let table = rig.catalog.load_table(&rig.ident).await.unwrap();
    assert_eq!(
        total_records(&table),
        0,
        "nothing committed into the new table"
    );
}

/// Every race above, on SQLite and on PostgreSQL (the catalog's swap and the lease store's
/// conditional writes are the database's own on each).
macro_rules! on_both_databases {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name(super::Db::Sqlite).await
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name(super::Db::Postgres).await
                }
            )*
        }
    };
}

on_both_databases!(
    fence_refuses_a_commit_built_on_a_stale_snapshot_that_iceberg_would_rebase,
    two_committers_racing_on_the_same_batches_commit_each_exactly_once,
    stale_committer_is_fenced_by_a_newer_epoch_and_a_duplicate_batch_is_rejected,
    a_committer_whose_lease_was_taken_discards_no_batch,
    committers_with_different_lease_views_validating_the_same_snapshot_commit_once,
    files_the_table_references_are_never_deleted_even_if_no_summary_names_the_batch
);
