//! The AWS side of a fleet, end to end with real processes: two `floe run` workers share a
//! DynamoDB lease table, write data files to an S3 warehouse and DLQ objects to an S3 bucket
//! (the local emulator), read a Kafka topic (a standalone Kafka-protocol broker); one worker is
//! SIGKILLed mid-run and restarted. PyIceberg then reads the table from S3 and the DLQ is listed
//! from S3: every record exactly once.

use crate::common;

use std::path::Path;
use std::time::Duration;

use common::*;
use floe::config::S3Location;
use floe::dlq::{Dlq, S3Dlq};
use iceberg::{NamespaceIdent, TableIdent};

/// A customer-managed key ARN (the emulator records it on each object; it does not check it).
const KMS_KEY: &str = "arn:aws:kms:us-east-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab";

struct Fleet {
    endpoint: String,
    table: String,
    warehouse_bucket: String,
    dlq_bucket: String,
}

impl Fleet {
    async fn new() -> Fleet {
        let endpoint = aws_endpoint();
        let fleet = Fleet {
            table: unique_name("floe-it"),
            warehouse_bucket: unique_name("wh"),
            dlq_bucket: unique_name("dlq"),
            endpoint,
        };
        let s3 = aws_clients(&fleet.endpoint).await.s3();
        for bucket in [&fleet.warehouse_bucket, &fleet.dlq_bucket] {
            s3.create_bucket().bucket(bucket).send().await.unwrap();
        }
        fleet
    }

    fn config(&self, dir: &Path, bootstrap: &str, worker_id: &str) -> String {
        let sqlite = config_toml(dir, bootstrap, worker_id, 4);
        let sqlite_store = format!(
            "[lease_store]\nkind = \"sqlite\"\npath = \"{}/leases.sqlite\"",
            dir.display()
        );
        assert!(sqlite.contains(&sqlite_store));
        let aws = format!(
            "[aws]\nregion = \"us-east-1\"\nendpoint_url = \"{}\"\n\n[lease_store]\nkind = \"dynamodb\"\ntable = \"{}\"",
            self.endpoint, self.table
        );
        let text = sqlite.replacen(&sqlite_store, &aws, 1);
        let local_wh = format!("warehouse = \"{}/warehouse\"", dir.display());
        assert!(text.contains(&local_wh));
        let text = text.replacen(
            &local_wh,
            &format!(
                "warehouse = \"s3://{}/floe\"\n    kms_key_arn = \"{KMS_KEY}\"\n    expected_bucket_owner = \"123456789012\"",
                self.warehouse_bucket
            ),
            1,
        );
        let local_dlq = format!("kind = \"local\"\n  path = \"{}/dlq\"", dir.display());
        assert!(text.contains(&local_dlq));
        text.replacen(
            &local_dlq,
            &format!(
                "kind = \"s3\"\n  bucket = \"{}\"\n  prefix = \"dlq/\"\n  expected_bucket_owner = \"123456789012\"\n  kms_key_arn = \"{KMS_KEY}\"",
                self.dlq_bucket
            ),
            1,
        )
    }

    async fn dlq(&self) -> Dlq {
        let s3 = aws_clients(&self.endpoint).await.s3();
        S3Dlq::new(
            s3,
            S3Location {
                bucket: self.dlq_bucket.clone(),
                prefix: "dlq/".into(),
                expected_bucket_owner: Some("123456789012".into()),
                kms_key_arn: Some(KMS_KEY.into()),
            },
            "it",
        )
        .into()
    }

    async fn delivered(&self, dir: &Path) -> (u64, u64) {
        let dlq = self.dlq().await;
        let config = floe::config::aws::AwsConfig {
            region: Some("us-east-1".into()),
            endpoint_url: Some(self.endpoint.clone()),
            ..Default::default()
        };
        let catalog = floe::catalog::open_sql_catalog_s3(
            &floe::config::CatalogDatabase::Sqlite(dir.join("catalog.sqlite")),
            &format!("s3://{}/floe", self.warehouse_bucket),
            "floe",
            &config,
            Some("us-east-1"),
            Some(KMS_KEY),
        )
        .await
        .unwrap();
        let ident = TableIdent::new(NamespaceIdent::new("it".into()), "events".into());
        floe::tools::quickstart::counts(catalog.as_ref(), &ident, &dlq).await
    }
}

/// A warehouse bucket owned by another account (per `expected_bucket_owner`) is refused before
/// anything is written: `floe channel create` exits 78 naming the field, `floe run` exits 78.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_warehouse_bucket_of_another_account_is_refused() {
    let fleet = Fleet::new().await;
    let dir = tempfile::tempdir().unwrap();
    let text = fleet.config(dir.path(), "127.0.0.1:9", "w1").replacen(
        "    expected_bucket_owner = \"123456789012\"",
        "    expected_bucket_owner = \"111111111111\"",
        1,
    );
    let config = dir.path().join("w1.toml");
    std::fs::write(&config, text).unwrap();
    let floe = |args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_floe"))
            .args(args)
            .arg("--config")
            .arg(&config)
            .output()
            .unwrap()
    };
    let create = floe(&["channel", "create", "it"]);
    let stderr = String::from_utf8_lossy(&create.stderr);
    assert_eq!(create.status.code(), Some(78), "{stderr}");
    assert!(
        stderr.contains("channel[0].destination.catalog.expected_bucket_owner")
            && stderr.contains("111111111111"),
        "{stderr}"
    );
    let run = floe(&["run"]);
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert_eq!(run.status.code(), Some(78), "{stderr}");
    assert!(
        stderr.contains("not owned by account 111111111111"),
        "{stderr}"
    );
    let s3 = aws_clients(&fleet.endpoint).await.s3();
    let listed = s3
        .list_objects_v2()
        .bucket(&fleet.warehouse_bucket)
        .send()
        .await
        .unwrap();
    assert_eq!(listed.key_count(), Some(0), "nothing written to the bucket");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dynamodb_leases_s3_warehouse_and_s3_dlq_deliver_exactly_once_across_a_sigkill() {
    let fleet = Fleet::new().await;
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start();
    let total = 4_000u64;
    produce(&broker.bootstrap, 0, total / 2);
    let start = |id: &str| {
        Worker::start_with(
            dir.path(),
            id,
            &fleet.config(dir.path(), &broker.bootstrap, id),
        )
    };
    let w1 = start("w1");
    let w2 = start("w2");
    tokio::time::sleep(Duration::from_secs(12)).await;
    produce(&broker.bootstrap, total / 2, total);
    w1.signal("KILL");
    drop(w1);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let w1 = start("w1");
    let (rows, dead) = poll_delivered(total, Duration::from_secs(150), || {
        fleet.delivered(dir.path())
    })
    .await;
    assert!(
        w1.terminate().success(),
        "w1:\n{}",
        log_of(dir.path(), "w1")
    );
    assert!(
        w2.terminate().success(),
        "w2:\n{}",
        log_of(dir.path(), "w2")
    );
    assert_eq!(
        rows + dead,
        total,
        "all delivered; w2 log:\n{}",
        log_of(dir.path(), "w2")
    );

    // The DLQ on S3: every bad record once, nothing else.
    let expected_bad: Vec<u64> = (0..total).filter(|id| bad_kind(*id).is_some()).collect();
    let mut dlq_ids: Vec<u64> = fleet
        .dlq()
        .await
        .read_published()
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.key.unwrap().parse().unwrap())
        .collect();
    dlq_ids.sort();
    assert_eq!(dlq_ids, expected_bad, "DLQ holds exactly the bad records");

    // The table on S3, read by PyIceberg.
    let out = std::process::Command::new(python())
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/py/read_table.py"))
        .arg(dir.path().join("catalog.sqlite"))
        .arg(format!("s3://{}/floe", fleet.warehouse_bucket))
        .arg("it.events")
        .arg("--s3-endpoint")
        .arg(&fleet.endpoint)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "PyIceberg: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let t: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let good = total - expected_bad.len() as u64;
    assert_eq!(t["rows"], good, "count(*) == produced - DLQ");
    assert_eq!(t["distinct_ids"], good, "count(distinct id) == count(*)");

    // Every object written — data files, metadata, DLQ objects — is encrypted with the key.
    let s3 = aws_clients(&fleet.endpoint).await.s3();
    for bucket in [&fleet.warehouse_bucket, &fleet.dlq_bucket] {
        assert_objects_sse_kms(&s3, bucket, KMS_KEY).await;
    }

    // Leases live in DynamoDB: both workers released theirs on SIGTERM.
    let store = floe::lease::DynamoDbLeaseStore::open(
        aws_clients(&fleet.endpoint).await.dynamodb(),
        &fleet.table,
        floe::lease::dynamodb::MissingTable::Refuse,
    )
    .await
    .unwrap();
    let leases = floe::lease::LeaseStore::list_leases(&store, "it")
        .await
        .unwrap();
    assert_eq!(leases.len(), 5, "4 partitions + committer: {leases:?}");
    assert!(
        leases.iter().all(|l| l.owner.is_none()),
        "released on shutdown: {leases:?}"
    );
}
