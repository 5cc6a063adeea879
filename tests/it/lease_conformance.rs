//! The lease-store conformance suite against the in-memory fake, the SQLite store, DynamoDB (the
//! emulator) and PostgreSQL (a real server, `deploy/local/postgres.sh`), plus SQLite races
//! between separate connection pools and separate processes sharing one file, and PostgreSQL's
//! refusals (missing tables, bad login, a newer floe's tables) and large batches.
//!
//! Needs the `testsuite` feature (tests/it/main.rs compiles it only with it):
//! `cargo test --features testsuite --test it -- lease_conformance::`.

use std::collections::BTreeMap;
use std::process::Command;

use floe::lease::memory::MemoryLeaseStore;
use floe::lease::{Lease, LeaseError, LeaseKey, LeaseSpec, LeaseStore, SqlLeaseStore};

async fn sqlite_store() -> (tempfile::TempDir, SqlLeaseStore) {
    let dir = tempfile::tempdir().unwrap();
    let store = SqlLeaseStore::open_sqlite(dir.path().join("leases.sqlite"))
        .await
        .unwrap();
    (dir, store)
}

use crate::common;

use floe::lease::dynamodb::{DynamoDbLeaseStore, MissingTable};

/// A DynamoDB store on a fresh table of the emulator (created by `open`).
async fn dynamodb_store() -> ((), DynamoDbLeaseStore) {
    let clients = common::aws_clients(&common::aws_endpoint()).await;
    let store = DynamoDbLeaseStore::open(
        clients.dynamodb(),
        common::unique_name("floe-leases"),
        MissingTable::Create,
    )
    .await
    .unwrap();
    ((), store)
}

floe::lease_store_conformance_tests!(memory, async { ((), MemoryLeaseStore::new()) });
floe::lease_store_conformance_tests!(sqlite, sqlite_store());
floe::lease_store_conformance_tests!(dynamodb, dynamodb_store());
floe::lease_store_conformance_tests!(postgres, postgres_store());

/// A PostgreSQL store in a fresh schema of the test server (`deploy/local/postgres.sh`).
async fn postgres_store() -> ((), SqlLeaseStore) {
    let store = SqlLeaseStore::open_postgres(&common::postgres_options())
        .await
        .unwrap();
    ((), store)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_missing_tables_are_refused_naming_floe_setup() {
    let options = floe::lease::PostgresOptions {
        create_tables: false,
        ..common::postgres_options()
    };
    let err = SqlLeaseStore::open_postgres(&options).await.unwrap_err();
    assert!(matches!(err, LeaseError::Fatal { .. }), "{err:?}");
    let message = err.to_string();
    assert!(
        message.contains("floe setup") && message.contains(&options.schema),
        "{message}"
    );
    // Created once, the same options open.
    SqlLeaseStore::open_postgres(&floe::lease::PostgresOptions {
        create_tables: true,
        ..options.clone()
    })
    .await
    .unwrap();
    SqlLeaseStore::open_postgres(&options).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_wrong_password_or_database_is_fatal_naming_the_key_without_the_password() {
    let good = url::Url::parse(&common::postgres_url()).unwrap();
    let mut wrong_password = good.clone();
    wrong_password
        .set_password(Some("not-the-password"))
        .unwrap();
    let mut wrong_database = good.clone();
    wrong_database.set_path("/no_such_database");
    for url in [wrong_password, wrong_database] {
        let options = floe::lease::PostgresOptions {
            url: url.to_string(),
            ..common::postgres_options()
        };
        let err = SqlLeaseStore::open_postgres(&options).await.unwrap_err();
        assert!(matches!(err, LeaseError::Fatal { .. }), "{url}: {err:?}");
        let message = err.to_string();
        assert!(message.contains("lease_store.url"), "{message}");
        assert!(!message.contains("not-the-password"), "{message}");
    }
}

/// A newer floe's tables (a higher version in `floe_schema_version`) are refused, not used.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_tables_of_a_newer_floe_are_refused() {
    let options = common::postgres_options();
    SqlLeaseStore::open_postgres(&options).await.unwrap();
    let pool = sqlx::PgPool::connect(&common::postgres_url())
        .await
        .unwrap();
    sqlx::query(&format!(
        "UPDATE \"{}\".floe_schema_version SET version = version + 1",
        options.schema
    ))
    .execute(&pool)
    .await
    .unwrap();
    let err = SqlLeaseStore::open_postgres(&options).await.unwrap_err();
    assert!(err.to_string().contains("newer floe"), "{err}");
}

/// Processes starting at once against an empty schema all open it (the DDL is serialised).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_concurrent_first_opens_all_succeed() {
    let options = common::postgres_options();
    let opens = (0..6).map(|_| SqlLeaseStore::open_postgres(&options));
    for result in futures::future::join_all(opens).await {
        result.unwrap();
    }
}

/// A pending batch of 50 MB (200,000 data files) round-trips and is finished (PostgreSQL has no
/// item limit to split around; `TEXT` holds up to 1 GB).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_batch_of_50_mb_round_trips() {
    use floe::lease::BatchStore;
    let (_, store) = postgres_store().await;
    let batch = big_batch("big", 200_000);
    let size = serde_json::to_string(&batch).unwrap().len();
    assert!(size >= 50_000_000, "{size} bytes");
    store.put_batch(&batch).await.unwrap();
    store.put_batch(&batch).await.unwrap(); // idempotent
    assert_eq!(
        store.list_pending("big").await.unwrap(),
        vec![batch.clone()]
    );
    store
        .finish_batches("big", &[batch.batch_id], &[])
        .await
        .unwrap();
    assert!(store.list_pending("big").await.unwrap().is_empty());
}

/// A pending batch of one shard whose files are `files` data-file JSON strings of ~250 bytes.
fn big_batch(channel: &str, files: usize) -> floe::model::PendingBatch {
    use floe::model::{CheckpointRange, PendingBatch, Position, ShardId, ShardRange};
    PendingBatch {
        channel: channel.into(),
        batch_id: uuid::Uuid::now_v7(),
        worker_id: "w".into(),
        shards: vec![ShardRange {
            shard: ShardId("shardId-000000000000".into()),
            range: CheckpointRange {
                after_exclusive: None,
                last_inclusive: Position::Offset(9),
            },
            lease_counter: 1,
        }],
        files: floe::model::BatchFiles::Iceberg {
            data_files: (0..files)
                .map(|i| {
                    format!(
                        "{{\"file_path\":\"s3://bucket/warehouse/db/table/data/event_time_hour=2026-12-02-17/{}-{i:08}.parquet\",\"record_count\":1000,\"file_size_in_bytes\":123456,\"pad\":\"{}\"}}",
                        uuid::Uuid::new_v4(),
                        "x".repeat(80)
                    )
                })
                .collect(),
            dlq_staged: None,
            deleted_keys: None,
        },
        num_rows: 10,
        num_dead_lettered: 0,
        dead_lettered_by_code: BTreeMap::new(),
        data_bytes: 1,
        oldest_read_at_ms: 0,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dynamodb_missing_table_is_refused_with_how_to_create_it() {
    let clients = common::aws_clients(&common::aws_endpoint()).await;
    let name = common::unique_name("floe-missing");
    let err = DynamoDbLeaseStore::open(clients.dynamodb(), &name, MissingTable::Refuse)
        .await
        .unwrap_err();
    assert!(matches!(err, LeaseError::Fatal { .. }), "{err:?}");
    let message = err.to_string();
    assert!(
        message.contains(&name) && message.contains("floe setup"),
        "{message}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dynamodb_table_with_another_key_schema_is_refused() {
    use aws_sdk_dynamodb::types::{
        AttributeDefinition, BillingMode, KeySchemaElement, KeyType, ScalarAttributeType,
    };
    let clients = common::aws_clients(&common::aws_endpoint()).await;
    let name = common::unique_name("not-floe");
    clients
        .dynamodb()
        .create_table()
        .table_name(&name)
        .attribute_definitions(
            AttributeDefinition::builder()
                .attribute_name("id")
                .attribute_type(ScalarAttributeType::S)
                .build()
                .unwrap(),
        )
        .key_schema(
            KeySchemaElement::builder()
                .attribute_name("id")
                .key_type(KeyType::Hash)
                .build()
                .unwrap(),
        )
        .billing_mode(BillingMode::PayPerRequest)
        .send()
        .await
        .unwrap();
    let err = DynamoDbLeaseStore::open(clients.dynamodb(), &name, MissingTable::Create)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("not a floe lease table"), "{err}");
}

/// A pending batch far beyond DynamoDB's 400 KB item limit round-trips through parts, and
/// finishing it removes every part.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dynamodb_batch_beyond_the_item_limit_round_trips() {
    use floe::lease::BatchStore;
    let (_, store) = dynamodb_store().await;
    let batch = big_batch("big", 30_000);
    store.put_batch(&batch).await.unwrap();
    store.put_batch(&batch).await.unwrap(); // idempotent
    assert_eq!(
        store.list_pending("big").await.unwrap(),
        vec![batch.clone()]
    );
    store
        .finish_batches("big", &[batch.batch_id], &[])
        .await
        .unwrap();
    assert!(store.list_pending("big").await.unwrap().is_empty());
    let items = store_items(&store, "big").await;
    assert_eq!(items, 0, "parts left behind");
}

async fn store_items(store: &DynamoDbLeaseStore, channel: &str) -> usize {
    let clients = common::aws_clients(&common::aws_endpoint()).await;
    clients
        .dynamodb()
        .query()
        .table_name(store.table())
        .key_condition_expression("channel = :c")
        .expression_attribute_values(
            ":c",
            aws_sdk_dynamodb::types::AttributeValue::S(channel.into()),
        )
        .send()
        .await
        .unwrap()
        .count as usize
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_reopen_keeps_rows_and_schema() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("leases.sqlite");
    let store = SqlLeaseStore::open_sqlite(&path).await.unwrap();
    store
        .ensure_leases("c", &[LeaseSpec::new(LeaseKey::shard("0"))])
        .await
        .unwrap();
    let lease = store.list_leases("c").await.unwrap().remove(0);
    let held = store.take_lease(&lease, "w1").await.unwrap();
    store.close().await;
    let again = SqlLeaseStore::open_sqlite(&path).await.unwrap();
    assert_eq!(again.list_leases("c").await.unwrap(), vec![held]);
}

/// Two stores (separate connection pools, as two processes would have) race to take the same
/// leases: every lease has exactly one winner and the loser sees `Conflict`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_two_pools_on_one_file_take_each_lease_once() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("leases.sqlite");
    let a = SqlLeaseStore::open_sqlite(&path).await.unwrap();
    let b = SqlLeaseStore::open_sqlite(&path).await.unwrap();
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
    let store = SqlLeaseStore::open_sqlite(&db).await.unwrap();
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
    let store = SqlLeaseStore::open_sqlite(&path).await.unwrap();
    let specs: Vec<_> = (0..NUM_RACE_LEASES)
        .map(|i| LeaseSpec::new(LeaseKey::shard(format!("{i:03}"))))
        .collect();
    store.ensure_leases("c", &specs).await.unwrap();

    let exe = std::env::current_exe().unwrap();
    // The child runs this module's `child_racer` alone; test names leave out the crate's name.
    let child_test = concat!(module_path!(), "::child_racer")
        .split_once("::")
        .map_or("child_racer", |(_, name)| name);
    let children: Vec<_> = (0..NUM_RACE_PROCESSES)
        .map(|i| {
            Command::new(&exe)
                .args(["--exact", child_test, "--nocapture", "--test-threads=1"])
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

/// An SQL catalog on PostgreSQL whose login is refused stops `floe run` at start with exit 78,
/// naming the key and not the password (no retry helps).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_catalog_with_a_wrong_password_is_refused_at_start_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let mut url = url::Url::parse(&common::postgres_url()).unwrap();
    url.set_password(Some("not-the-password")).unwrap();
    let sqlite_uri = format!("uri = \"{}/catalog.sqlite\"", dir.path().display());
    let text = common::config_toml(dir.path(), "127.0.0.1:9", "w1", 4);
    assert!(text.contains(&sqlite_uri));
    let config = dir.path().join("w1.toml");
    std::fs::write(
        &config,
        text.replacen(&sqlite_uri, "uri = \"env:FLOE_TEST_CATALOG_URL\"", 1),
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_floe"))
        .args(["run", "--config"])
        .arg(&config)
        .env("FLOE_TEST_CATALOG_URL", url.as_str())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(78), "{stderr}");
    assert!(
        stderr.contains("channel[0].destination.catalog.uri")
            && stderr.contains("password authentication failed"),
        "{stderr}"
    );
    assert!(!stderr.contains("not-the-password"), "{stderr}");
}
