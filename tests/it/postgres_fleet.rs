//! A fleet of hosts without AWS, end to end with real processes: three `floe run` workers with
//! their own ids share a PostgreSQL lease store and an SQL catalog on PostgreSQL (a real server,
//! `deploy/local/postgres.sh`), write data files to an S3-compatible warehouse and DLQ objects to
//! an S3-compatible bucket (the local S3 emulator: endpoint URL, path-style addressing, static
//! credentials from the environment), and read a Kafka topic (a Kafka-protocol broker). Faults in
//! the middle of the run: one worker SIGKILLed and restarted, one SIGSTOPped past its lease, and
//! PostgreSQL itself stopped and started again. Then PyIceberg (SqlCatalog on PostgreSQL) finds
//! count(*) == count(distinct id) == produced − DLQ, and the DLQ holds exactly the bad records.
//!
//! The measured takeover time and the lease store's statements per second per shard in steady
//! state are printed (`--nocapture`).
//!
//! The only test of its binary: it stops the shared PostgreSQL server, which no concurrently
//! running test may depend on (cargo runs test binaries one after another).

use crate::common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::*;
use floe::config::{CatalogDatabase, S3Location};
use floe::dlq::{Dlq, S3Dlq};
use floe::lease::{LeaseStore, SqlLeaseStore};
use iceberg::{NamespaceIdent, TableIdent};

const LEASE_SECONDS: u64 = 4;
const PARTITIONS: usize = 4;

struct Fleet {
    endpoint: String,
    pg_url: String,
    schema: String,
    catalog_name: String,
    warehouse_bucket: String,
    dlq_bucket: String,
}

impl Fleet {
    async fn new() -> Fleet {
        let options = postgres_options();
        let fleet = Fleet {
            endpoint: aws_endpoint(),
            pg_url: postgres_url(),
            schema: options.schema,
            catalog_name: unique_name("fleet"),
            warehouse_bucket: unique_name("wh"),
            dlq_bucket: unique_name("dlq"),
        };
        let s3 = aws_clients(&fleet.endpoint).await.s3();
        for bucket in [&fleet.warehouse_bucket, &fleet.dlq_bucket] {
            s3.create_bucket().bucket(bucket).send().await.unwrap();
        }
        fleet
    }

    /// Worker `id`'s configuration: every secret from the environment (`FLOE_TEST_POSTGRES_URL`
    /// holds the password; the S3 keys are the AWS_* variables the emulator's env exports).
    fn config(&self, bootstrap: &str, id: &str) -> String {
        format!(
            r#"[worker]
id = "{id}"
shutdown_timeout = "20s"
metrics_address = "off"

[aws]
region = "us-east-1"
endpoint_url = "{endpoint}"

[lease_store]
kind = "postgres"
url = "env:FLOE_TEST_POSTGRES_URL"
ssl_mode = "disable"
schema = "{schema}"
lease_duration = "{LEASE_SECONDS}s"
renew_interval = "1s"

[[channel]]
name = "it"
  [channel.source]
  kind = "kafka"
  bootstrap_servers = "{bootstrap}"
  topic = "events"
  initial_position = "earliest"
  [channel.record]
  format = "json"
  [channel.schema]
  file = "{manifest}/config/event.schema.json"
  [channel.destination]
  kind = "iceberg"
  namespace = "it"
  table = "events"
  partition_field = "event_time"
  data_freshness = "10s"
    [channel.destination.catalog]
    kind = "sql"
    name = "{catalog}"
    uri = "env:FLOE_TEST_POSTGRES_URL"
    warehouse = "s3://{warehouse}/floe"
  [channel.dlq]
  kind = "s3"
  bucket = "{dlq}"
  prefix = "dlq/"
"#,
            endpoint = self.endpoint,
            schema = self.schema,
            catalog = self.catalog_name,
            warehouse = self.warehouse_bucket,
            dlq = self.dlq_bucket,
            manifest = env!("CARGO_MANIFEST_DIR"),
        )
    }

    async fn store(&self) -> SqlLeaseStore {
        SqlLeaseStore::open_postgres(&floe::lease::PostgresOptions {
            schema: self.schema.clone(),
            ..postgres_options()
        })
        .await
        .unwrap()
    }

    fn dlq(&self, s3: aws_sdk_s3::Client) -> Dlq {
        S3Dlq::new(
            s3,
            S3Location {
                bucket: self.dlq_bucket.clone(),
                prefix: "dlq/".into(),
                expected_bucket_owner: None,
                kms_key_arn: None,
            },
            "it",
        )
        .into()
    }

    /// Rows in the table's current snapshot and published DLQ entries; (0, 0) while PostgreSQL
    /// or the table is not there.
    async fn delivered(&self) -> (u64, u64) {
        let s3 = aws_clients(&self.endpoint).await.s3();
        let dlq = self.dlq(s3);
        let config = floe::config::aws::AwsConfig {
            region: Some("us-east-1".into()),
            endpoint_url: Some(self.endpoint.clone()),
            ..Default::default()
        };
        let Ok(catalog) = floe::catalog::open_sql_catalog_s3(
            &CatalogDatabase::Postgres(self.pg_url.clone()),
            &format!("s3://{}/floe", self.warehouse_bucket),
            &self.catalog_name,
            &config,
            Some("us-east-1"),
            None,
        )
        .await
        else {
            return (0, 0);
        };
        let ident = TableIdent::new(NamespaceIdent::new("it".into()), "events".into());
        floe::tools::quickstart::counts(catalog.as_ref(), &ident, &dlq).await
    }
}

/// `deploy/local/postgres.sh <action>` (`stop`, `start`).
fn postgres_ctl(action: &str) {
    let ctl = std::env::var("FLOE_TEST_POSTGRES_CTL")
        .unwrap_or_else(|_| format!("{}/deploy/local/postgres.sh", env!("CARGO_MANIFEST_DIR")));
    let out = Command::new(ctl).arg(action).output().unwrap();
    assert!(
        out.status.success(),
        "postgres.sh {action}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Owners of the shard leases, by shard.
async fn owners(store: &SqlLeaseStore) -> Vec<(String, Option<String>)> {
    store
        .list_leases("it")
        .await
        .unwrap()
        .into_iter()
        .filter(|l| l.key.shard_id().is_some())
        .map(|l| (l.key.to_string(), l.owner))
        .collect()
}

/// Transactions committed in the test database so far (`pg_stat_database`): every lease-store
/// statement outside an explicit transaction is one.
async fn transactions(url: &str) -> i64 {
    let pool = sqlx::PgPool::connect(url).await.unwrap();
    let n: i64 = sqlx::query_scalar(
        "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    pool.close().await;
    n
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_workers_on_postgres_deliver_exactly_once_across_sigkill_sigstop_and_a_postgres_restart(
) {
    python(); // fail early without the PyIceberg reader
    let fleet = Fleet::new().await;
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start();
    let store = fleet.store().await;
    let lease = Duration::from_secs(LEASE_SECONDS);
    let total = 9_000u64;
    produce(&broker.bootstrap, 0, total / 3);
    let start = |id: &str| Worker::start_with(dir.path(), id, &fleet.config(&broker.bootstrap, id));
    let w1 = start("w1");
    let w2 = start("w2");
    let w3 = start("w3");

    // Every partition held, w1 among the holders.
    let started = Instant::now();
    let held_by_w1 = loop {
        let o = owners(&store).await;
        let w1: Vec<String> = o
            .iter()
            .filter(|(_, owner)| owner.as_deref() == Some("w1"))
            .map(|(k, _)| k.clone())
            .collect();
        if o.len() == PARTITIONS && o.iter().all(|(_, w)| w.is_some()) && !w1.is_empty() {
            break w1;
        }
        assert!(
            started.elapsed() < 15 * lease,
            "partitions not spread over the fleet: {o:?}\n{}",
            log_of(dir.path(), "w1")
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    produce(&broker.bootstrap, total / 3, 2 * total / 3);

    // SIGKILL w1: its partitions are taken over by the others.
    w1.signal("KILL");
    let killed = Instant::now();
    drop(w1);
    let takeover = loop {
        let o = owners(&store).await;
        let orphaned = o
            .iter()
            .any(|(k, w)| held_by_w1.contains(k) && (w.is_none() || w.as_deref() == Some("w1")));
        if !orphaned {
            break killed.elapsed();
        }
        assert!(killed.elapsed() < 4 * lease, "not taken over: {o:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    eprintln!(
        "postgres fleet: {} partition(s) of the SIGKILLed worker taken over {takeover:?} after the kill (lease_duration {lease:?})",
        held_by_w1.len()
    );
    assert!(
        takeover <= lease * 5 / 2,
        "takeover {takeover:?} > 2.5 × {lease:?}"
    );
    let w1 = start("w1");

    // SIGSTOP w2 past its lease, then let it go on.
    w2.signal("STOP");
    tokio::time::sleep(3 * lease).await;
    w2.signal("CONT");

    // PostgreSQL goes away for longer than a lease, then comes back.
    postgres_ctl("stop");
    tokio::time::sleep(Duration::from_secs(8)).await;
    postgres_ctl("start");
    let restarted = Instant::now();
    produce(&broker.bootstrap, 2 * total / 3, total);

    let (rows, dead) = poll_delivered(total, Duration::from_secs(240), || fleet.delivered()).await;
    eprintln!(
        "postgres fleet: all {total} delivered {:?} after PostgreSQL came back",
        restarted.elapsed()
    );
    let logs = || {
        ["w1", "w2", "w3"]
            .map(|id| format!("--- {id}\n{}", log_of(dir.path(), id)))
            .join("\n")
    };
    assert_eq!(rows + dead, total, "all delivered:\n{}", logs());

    // Steady state: the lease store's statements per second per partition, idle fleet.
    let before = transactions(&fleet.pg_url).await;
    let window = Duration::from_secs(20);
    tokio::time::sleep(window).await;
    let after = transactions(&fleet.pg_url).await;
    eprintln!(
        "postgres fleet: {:.3} statements/s per partition in steady state ({} in {window:?}, 3 workers, {PARTITIONS} partitions, renew_interval 1s)",
        (after - before - 1) as f64 / window.as_secs_f64() / PARTITIONS as f64,
        after - before - 1
    );

    for (id, w) in [("w1", w1), ("w2", w2), ("w3", w3)] {
        assert!(w.terminate().success(), "{id}:\n{}", log_of(dir.path(), id));
    }

    // The DLQ on S3: every bad record once, nothing else.
    let expected_bad: Vec<u64> = (0..total).filter(|id| bad_kind(*id).is_some()).collect();
    let mut dlq_ids: Vec<u64> = fleet
        .dlq(aws_clients(&fleet.endpoint).await.s3())
        .read_published()
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.key.unwrap().parse().unwrap())
        .collect();
    dlq_ids.sort();
    assert_eq!(dlq_ids, expected_bad, "DLQ holds exactly the bad records");

    // PyIceberg's SqlCatalog on the same PostgreSQL database, the warehouse on the S3 emulator.
    let sqlalchemy_url = std::env::var("FLOE_TEST_POSTGRES_SQLALCHEMY_URL")
        .expect("FLOE_TEST_POSTGRES_SQLALCHEMY_URL (deploy/local/postgres.sh env)");
    let t = run_py_reader(
        "read_table.py",
        &[
            sqlalchemy_url.as_ref(),
            format!("s3://{}/floe", fleet.warehouse_bucket).as_ref(),
            "it.events".as_ref(),
            "--catalog-name".as_ref(),
            fleet.catalog_name.as_ref(),
            "--s3-endpoint".as_ref(),
            fleet.endpoint.as_ref(),
        ],
    );
    let good = total - expected_bad.len() as u64;
    assert_eq!(t["rows"], good, "count(*) == produced - DLQ");
    assert_eq!(t["distinct_ids"], good, "count(distinct id) == count(*)");

    // Graceful shutdown handed every lease back and removed every presence row.
    let store = fleet.store().await;
    let leases = store.list_leases("it").await.unwrap();
    assert!(leases.iter().all(|l| l.owner.is_none()), "{leases:?}");
    assert!(store.list_presence("it").await.unwrap().is_empty());
}
