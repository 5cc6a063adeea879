//! Component test of the worker loop with the in-memory source: losing one shard's lease while a
//! multi-shard batch is in flight must not stall the shards the worker still holds.

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use floe::commit::{table_checkpoints, Committer};
use floe::dlq::LocalDlq;
use floe::events::event_json;
use floe::lease::{BatchStore, HeldLeases, LeaseKey, LeaseSpec, LeaseStore, SqliteLeaseStore};
use floe::model::{Position, ShardId};
use floe::source::memory::MemorySource;
use floe::source::Source;
use floe::worker::{ChannelIo, ChannelWorker, IcebergIo};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn losing_one_shard_mid_batch_rewinds_the_others_instead_of_stalling_them() {
    let dir = tempfile::tempdir().unwrap();
    let (catalog, ident, schema) = common::event_table(dir.path(), "wl").await;
    let store = Arc::new(
        SqliteLeaseStore::open(dir.path().join("leases.sqlite"))
            .await
            .unwrap(),
    );
    let (s0, s1) = (ShardId::kafka_partition(0), ShardId::kafka_partition(1));
    store
        .ensure_leases(
            "wl",
            &[
                LeaseSpec::new(LeaseKey::Shard(s0.clone())),
                LeaseSpec::new(LeaseKey::Shard(s1.clone())),
            ],
        )
        .await
        .unwrap();
    let mut leases = BTreeMap::new();
    for l in store.list_leases("wl").await.unwrap() {
        let taken = store.take_lease(&l, "w1").await.unwrap();
        leases.insert(taken.key.shard_id().unwrap().clone(), taken);
    }

    let source = Arc::new(MemorySource::with_partitions(2));
    let base = 1_783_627_200_000;
    for id in 0..10 {
        source.append(&s0, None, event_json(id, 3, base, 1).into_bytes(), base);
        source.append(
            &s1,
            None,
            event_json(100 + id, 3, base, 1).into_bytes(),
            base,
        );
    }
    let (held_tx, held_rx) = watch::channel(HeldLeases {
        shards: leases.clone(),
        committer: None,
    });
    let settings = common::worker_settings("wl", Duration::from_millis(200));
    let dlq = LocalDlq::new(dir.path().join("dlq"), "wl");
    let src: Arc<dyn Source> = source.clone();
    let batches: Arc<dyn BatchStore> = store.clone();
    let io = ChannelIo::iceberg(
        src,
        IcebergIo {
            catalog: catalog.clone(),
            ident: ident.clone(),
            schema,
            dlq: dlq.clone().into(),
        },
    );
    let mut worker = ChannelWorker::new(settings, io, batches, held_rx);
    let stop = CancellationToken::new();
    let worker_task = {
        let stop = stop.clone();
        tokio::spawn(async move { worker.run(stop, Duration::from_secs(1)).await })
    };

    // The first batch (both shards) is handed off but not committed yet.
    let deadline = Instant::now() + Duration::from_secs(10);
    while store.list_pending("wl").await.unwrap().is_empty() {
        assert!(Instant::now() < deadline, "no batch handed off");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Shard 1 is stolen by another worker: that batch is now stale as a whole.
    let l1 = leases.remove(&s1).unwrap();
    store.take_lease(&l1, "w2").await.unwrap();
    held_tx
        .send(HeldLeases {
            shards: leases.clone(),
            committer: None,
        })
        .unwrap();
    for id in 10..20 {
        source.append(&s0, None, event_json(id, 3, base, 1).into_bytes(), base);
    }

    // A committer commits what it can; shard 0 must reach offset 19.
    let committer = Committer::new(
        "wl",
        ident.clone(),
        catalog.clone(),
        store.clone(),
        store.clone(),
        dlq,
        1,
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        committer.run_round().await.unwrap();
        let table = catalog.load_table(&ident).await.unwrap();
        let cp = table_checkpoints(&table).unwrap();
        if cp.get(&s0) == Some(&Position::Offset(19)) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "shard 0 stalled at {:?}",
            cp.get(&s0)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    stop.cancel();
    worker_task.await.unwrap().unwrap();
    let table = catalog.load_table(&ident).await.unwrap();
    let mut ids = floe::quickstart::table_ids(&table).await.unwrap();
    ids.sort();
    assert_eq!(
        ids,
        (0..20).collect::<Vec<i64>>(),
        "shard 0 exactly once; shard 1 is the new owner's"
    );
}
