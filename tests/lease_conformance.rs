//! The lease-store conformance suite against the in-memory fake and the SQLite store, plus
//! SQLite races between separate connection pools and separate processes sharing one file.
//!
//! Needs the `testsuite` feature: `cargo test --features testsuite --test lease_conformance`.
#![cfg(feature = "testsuite")]

use std::collections::BTreeMap;
use std::process::Command;

use floe::lease::memory::MemoryLeaseStore;
use floe::lease::{Lease, LeaseError, LeaseKey, LeaseSpec, LeaseStore, SqliteLeaseStore};

async fn sqlite_store() -> (tempfile::TempDir, SqliteLeaseStore) {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteLeaseStore::open(dir.path().join("leases.sqlite"))
        .await
        .unwrap();
    (dir, store)
}

floe::lease_store_conformance_tests!(memory, async { ((), MemoryLeaseStore::new()) });
floe::lease_store_conformance_tests!(sqlite, sqlite_store());

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_reopen_keeps_rows_and_schema() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("leases.sqlite");
    let store = SqliteLeaseStore::open(&path).await.unwrap();
    store
        .ensure_leases("c", &[LeaseSpec::new(LeaseKey::shard("0"))])
        .await
        .unwrap();
    let lease = store.list_leases("c").await.unwrap().remove(0);
    let held = store.take_lease(&lease, "w1").await.unwrap();
    store.close().await;
    let again = SqliteLeaseStore::open(&path).await.unwrap();
    assert_eq!(again.list_leases("c").await.unwrap(), vec![held]);
}

/// Two stores (separate connection pools, as two processes would have) race to take the same
/// leases: every lease has exactly one winner and the loser sees `Conflict`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_two_pools_on_one_file_take_each_lease_once() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("leases.sqlite");
    let a = SqliteLeaseStore::open(&path).await.unwrap();
    let b = SqliteLeaseStore::open(&path).await.unwrap();
    let specs: Vec<_> = (0..40)
        .map(|i| LeaseSpec::new(LeaseKey::shard(i.to_string())))
        .collect();
    a.ensure_leases("c", &specs).await.unwrap();
    let listed = b.list_leases("c").await.unwrap();
    let (ra, rb) = tokio::join!(
        async {
            let mut won = Vec::new();
            for l in &listed {
                match a.take_lease(l, "a").await {
                    Ok(t) => won.push(t.key),
                    Err(LeaseError::Conflict { .. }) => {}
                    Err(e) => panic!("a: {e:?}"),
                }
            }
            won
        },
        async {
            let mut won = Vec::new();
            for l in listed.iter().rev() {
                match b.take_lease(l, "b").await {
                    Ok(t) => won.push(t.key),
                    Err(LeaseError::Conflict { .. }) => {}
                    Err(e) => panic!("b: {e:?}"),
                }
            }
            won
        }
    );
    assert_eq!(ra.len() + rb.len(), 40);
    for lease in a.list_leases("c").await.unwrap() {
        let expected = if ra.contains(&lease.key) { "a" } else { "b" };
        assert_eq!(lease.owner.as_deref(), Some(expected));
        assert_eq!(lease.lease_counter, 1);
    }
}

const CHILD_DB_ENV: &str = "FLOE_LEASE_RACE_DB";
const CHILD_ID_ENV: &str = "FLOE_LEASE_RACE_WORKER";
const NUM_RACE_LEASES: usize = 60;
const NUM_RACE_PROCESSES: usize = 4;

/// Child side of [`sqlite_processes_race_for_leases`]: a no-op unless started by it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn child_racer() {
    let (Ok(db), Ok(worker)) = (std::env::var(CHILD_DB_ENV), std::env::var(CHILD_ID_ENV)) else {
        return;
    };
    let store = SqliteLeaseStore::open(&db).await.unwrap();
    let listed = store.list_leases("c").await.unwrap();
    assert_eq!(listed.len(), NUM_RACE_LEASES);
    for lease in &listed {
        // Every process takes from the initial, unowned state, whenever it starts: a take based
        // on a later listing would be a legitimate steal.
        let initial = Lease {
            owner: None,
            lease_counter: 0,
            heartbeat: 0,
            ..lease.clone()
        };
        match store.take_lease(&initial, &worker).await {
            Ok(taken) => {
                // Renew a few times so writes of several kinds interleave between processes.
                let mut held = taken;
                for _ in 0..3 {
                    held = store.renew_lease(&held).await.unwrap();
                }
                println!("WON {}", lease.key);
            }
            Err(LeaseError::Conflict { .. }) => {}
            Err(e) => panic!("{worker}: {e:?}"),
        }
    }
}

/// Several processes share one SQLite file and race for the same leases: each lease is won
/// by exactly one process, and the store agrees with what each process was told.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_processes_race_for_leases() {
    if std::env::var(CHILD_DB_ENV).is_ok() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("leases.sqlite");
    let store = SqliteLeaseStore::open(&path).await.unwrap();
    let specs: Vec<_> = (0..NUM_RACE_LEASES)
        .map(|i| LeaseSpec::new(LeaseKey::shard(format!("{i:03}"))))
        .collect();
    store.ensure_leases("c", &specs).await.unwrap();

    let exe = std::env::current_exe().unwrap();
    let children: Vec<_> = (0..NUM_RACE_PROCESSES)
        .map(|i| {
            Command::new(&exe)
                .args(["--exact", "child_racer", "--nocapture", "--test-threads=1"])
                .env(CHILD_DB_ENV, &path)
                .env(CHILD_ID_ENV, format!("p{i}"))
                .stdout(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let mut claimed: BTreeMap<String, String> = BTreeMap::new();
    for (i, child) in children.into_iter().enumerate() {
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "child p{i} failed");
        for line in String::from_utf8(out.stdout).unwrap().lines() {
            // The test harness may print its own text on the same line.
            if let Some((_, key)) = line.split_once("WON ") {
                let previous = claimed.insert(key.to_string(), format!("p{i}"));
                assert_eq!(previous, None, "{key} won twice");
            }
        }
    }
    assert_eq!(claimed.len(), NUM_RACE_LEASES);
    for lease in store.list_leases("c").await.unwrap() {
        assert_eq!(lease.owner.as_ref(), claimed.get(&lease.key.to_string()));
        assert_eq!((lease.lease_counter, lease.heartbeat), (1, 3));
    }
}
