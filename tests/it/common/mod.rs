//! Helpers shared by the integration tests: config files, producing records, waiting for
//! delivery, and the independent PyIceberg reader.
#![allow(dead_code)]

pub mod kinesis;
pub mod race;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use floe::dlq::LocalDlq;
use floe::tools::sample_events::{bad_event, event_json, BadKind};
use iceberg::{NamespaceIdent, TableIdent};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::ClientConfig;

/// 2026-07-09T20:00:00Z in milliseconds.
pub const BASE_MS: i64 = 1_783_627_200_000;
/// Generator seed used by every test.
pub const SEED: u64 = 7;

/// The Python interpreter with PyIceberg (scripts/test.sh sets FLOE_PYTHON).
pub fn python() -> PathBuf {
    if let Ok(p) = std::env::var("FLOE_PYTHON") {
        return PathBuf::from(p);
    }
    let venv = Path::new(env!("CARGO_MANIFEST_DIR")).join(".venv/bin/python");
    assert!(
        venv.exists(),
        "PyIceberg is needed to read the table independently: run scripts/test.sh (it creates .venv), or set FLOE_PYTHON"
    );
    venv
}

/// The AWS emulator endpoint (patched moto serving DynamoDB, Kinesis, S3, Glue, S3 Tables), from
/// `FLOE_TEST_AWS_ENDPOINT`. Panics with instructions when unset: AWS tests never pass silently.
pub fn aws_endpoint() -> String {
    emulator_env("FLOE_TEST_AWS_ENDPOINT")
}

/// The kinesalite endpoint (56-digit sequence numbers), from `FLOE_TEST_KINESALITE_ENDPOINT`.
pub fn kinesalite_endpoint() -> String {
    emulator_env("FLOE_TEST_KINESALITE_ENDPOINT")
}

/// The Kinesis emulator with enhanced fan-out (deploy/local/kinesis-efo, HTTPS with HTTP/2, in
/// front of the kinesalite of [`kinesalite_endpoint`]: the same streams), from
/// `FLOE_TEST_KINESIS_EFO_ENDPOINT`.
pub fn kinesis_efo_endpoint() -> String {
    emulator_env("FLOE_TEST_KINESIS_EFO_ENDPOINT")
}

/// The CA certificate (PEM) the EFO emulator's HTTPS certificate is signed with, from
/// `FLOE_TEST_KINESIS_EFO_CA`: `[aws] ca_bundle` of configurations that call it.
pub fn kinesis_efo_ca() -> String {
    emulator_env("FLOE_TEST_KINESIS_EFO_CA")
}

/// AWS clients pointed at the EFO emulator, trusting its CA.
pub async fn kinesis_efo_clients() -> floe::aws::AwsClients {
    floe::aws::AwsClients::load(&floe::config::aws::AwsConfig {
        region: Some("us-east-1".into()),
        endpoint_url: Some(kinesis_efo_endpoint()),
        ca_bundle: Some(kinesis_efo_ca().into()),
        ..Default::default()
    })
    .await
}

/// The test PostgreSQL server's URL (`deploy/local/postgres.sh env`), from
/// `FLOE_TEST_POSTGRES_URL`.
pub fn postgres_url() -> String {
    std::env::var("FLOE_TEST_POSTGRES_URL").unwrap_or_else(|_| {
        panic!(
            "FLOE_TEST_POSTGRES_URL is not set: start PostgreSQL with `deploy/local/postgres.sh start` and `eval \"$(deploy/local/postgres.sh env)\"` (scripts/test.sh does both)"
        )
    })
}

/// Options of a PostgreSQL lease store in a fresh schema of the test server.
pub fn postgres_options() -> floe::lease::PostgresOptions {
    floe::lease::PostgresOptions {
        url: postgres_url(),
        ssl_mode: floe::lease::SslMode::Disable,
        pool_size: 4,
        schema: unique_name("floe").replace('-', "_"),
        create_tables: true,
    }
}

fn emulator_env(var: &str) -> String {
    for needed in [var, "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"] {
        assert!(
            std::env::var_os(needed).is_some(),
            "{needed} is not set: this test needs the local AWS emulators. Run scripts/test.sh, or `deploy/local/aws-emulators.sh start` and `eval \"$(deploy/local/aws-emulators.sh env)\"`"
        );
    }
    std::env::var(var).unwrap()
}

/// AWS clients pointed at `endpoint` in us-east-1.
pub async fn aws_clients(endpoint: &str) -> floe::aws::AwsClients {
    floe::aws::AwsClients::load(&floe::config::aws::AwsConfig {
        region: Some("us-east-1".into()),
        endpoint_url: Some(endpoint.to_owned()),
        ..Default::default()
    })
    .await
}

/// Creates a bucket named `<prefix>-<unique suffix>` on the S3 emulator at `endpoint`; returns
/// its name.
pub async fn create_bucket(endpoint: &str, prefix: &str) -> String {
    let bucket = unique_name(prefix);
    aws_clients(endpoint)
        .await
        .s3()
        .create_bucket()
        .bucket(&bucket)
        .send()
        .await
        .unwrap();
    bucket
}

/// A name unique to this test run: `<prefix>-<uuid v4 simple, 12 chars>`.
pub fn unique_name(prefix: &str) -> String {
    format!(
        "{prefix}-{}",
        &uuid::Uuid::new_v4().simple().to_string()[..12]
    )
}

/// Reads the table with PyIceberg; returns the JSON that tests/py/read_table.py prints.
pub fn read_with_pyiceberg(dir: &Path, ids: &[u64]) -> serde_json::Value {
    let ids: Vec<String> = ids.iter().map(|i| i.to_string()).collect();
    let (catalog, warehouse) = (dir.join("catalog.sqlite"), dir.join("warehouse"));
    let ids = ids.join(",");
    run_py_reader(
        "read_table.py",
        &[
            catalog.as_os_str(),
            warehouse.as_os_str(),
            "it.events".as_ref(),
            "--ids".as_ref(),
            ids.as_ref(),
        ],
    )
}

/// Runs the PyIceberg reader `tests/py/<script>` with `args`; returns the JSON it prints.
pub fn run_py_reader(script: &str, args: &[&std::ffi::OsStr]) -> serde_json::Value {
    let script = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/py")
        .join(script);
    let out = Command::new(python())
        .arg(script)
        .args(args)
        .output()
        .expect("run python");
    assert!(
        out.status.success(),
        "PyIceberg reader failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("reader prints JSON")
}

/// A config for channel "it" writing table it.events under `dir`.
pub fn config_toml(dir: &Path, bootstrap: &str, worker_id: &str, lease_s: u64) -> String {
    let d = dir.display();
    format!(
        r#"[worker]
id = "{worker_id}"
shutdown_timeout = "20s"
metrics_address = "off"

[lease_store]
kind = "sqlite"
path = "{d}/leases.sqlite"
lease_duration = "{lease_s}s"
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
    name = "floe"
    uri = "{d}/catalog.sqlite"
    warehouse = "{d}/warehouse"
  [channel.dlq]
  kind = "local"
  path = "{d}/dlq"
"#,
        manifest = env!("CARGO_MANIFEST_DIR")
    )
}

/// A worker's log (`<dir>/<id>.log`).
pub fn log_of(dir: &Path, id: &str) -> String {
    std::fs::read_to_string(dir.join(format!("{id}.log"))).unwrap_or_default()
}

/// A standalone Kafka-protocol broker (`floe-mock-kafka`, topic `events`, 4 partitions) that
/// outlives the workers; killed on drop.
pub struct Broker {
    child: Child,
    /// `host:port` list to bootstrap from.
    pub bootstrap: String,
}

impl Broker {
    /// Starts the broker and waits for its bootstrap line.
    pub fn start() -> Broker {
        Broker::start_topics(&["events"], 4)
    }

    /// Starts the broker with `topics`, each of `partitions` partitions.
    pub fn start_topics(topics: &[&str], partitions: i32) -> Broker {
        let mut args: Vec<String> = topics
            .iter()
            .flat_map(|t| ["--topic".to_string(), t.to_string()])
            .collect();
        args.extend(["--partitions".to_string(), partitions.to_string()]);
        let mut child = Command::new(env!("CARGO_BIN_EXE_floe-mock-kafka"))
            .args(&args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start floe-mock-kafka");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let bootstrap = line
            .trim()
            .strip_prefix("bootstrap=")
            .expect("bootstrap line")
            .to_string();
        Broker { child, bootstrap }
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A `floe run` process logging to `<dir>/<id>.log`; killed on drop.
pub struct Worker {
    /// The process.
    pub child: Child,
}

impl Worker {
    /// Starts worker `id` with the SQLite/Kafka config of [`config_toml`] (4 s leases).
    pub fn start(dir: &Path, bootstrap: &str, id: &str) -> Worker {
        Worker::start_with(dir, id, &config_toml(dir, bootstrap, id, 4))
    }

    /// Starts worker `id` with config text `toml` (written to `<dir>/<id>.toml`).
    pub fn start_with(dir: &Path, id: &str, toml: &str) -> Worker {
        Worker::start_with_env(dir, id, toml, &[])
    }

    /// [`Worker::start_with`] with extra environment variables (secrets given as `env:VAR`).
    pub fn start_with_env(dir: &Path, id: &str, toml: &str, env: &[(&str, &str)]) -> Worker {
        let config = dir.join(format!("{id}.toml"));
        std::fs::write(&config, toml).unwrap();
        let log = std::fs::File::create(dir.join(format!("{id}.log"))).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_floe"))
            .arg("run")
            .arg("--config")
            .arg(&config)
            .env("RUST_LOG", "info,aws_config=warn,aws_smithy_runtime=warn")
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start floe run");
        Worker { child }
    }

    /// Sends `sig` (`KILL`, `STOP`, `CONT`, `TERM`) to the process.
    pub fn signal(&self, sig: &str) {
        let ok = Command::new("kill")
            .arg(format!("-{sig}"))
            .arg(self.child.id().to_string())
            .status()
            .unwrap()
            .success();
        assert!(ok, "kill -{sig}");
    }

    /// Waits up to `timeout` for the process to exit by itself; its status, or `None`.
    pub async fn wait_exit(&mut self, timeout: Duration) -> Option<std::process::ExitStatus> {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Some(status) = self.child.try_wait().unwrap() {
                return Some(status);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        None
    }

    /// SIGTERM, then waits up to 60 s for the exit status.
    // Blocking on purpose: the test has nothing else to run while its worker drains, and a sync
    // helper keeps `terminate` usable from sync tests and `Drop`-like clean-up paths.
    #[allow(clippy::disallowed_methods)]
    pub fn terminate(mut self) -> std::process::ExitStatus {
        self.signal("TERM");
        for _ in 0..600 {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = self.child.kill();
        panic!("worker did not exit within 60 s of SIGTERM");
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Whether id `id` is produced as a bad record, and which kind.
pub fn bad_kind(id: u64) -> Option<BadKind> {
    (id % 50 == 13).then(|| BadKind::ALL[(id / 50) as usize % BadKind::ALL.len()])
}

/// Produces ids `from..to` (keys = id), 2% of them bad.
pub fn produce(bootstrap: &str, from: u64, to: u64) {
    produce_payloads(bootstrap, from..to, |id| match bad_kind(id) {
        Some(kind) => bad_event(id, kind).0,
        None => event_json(id, SEED, BASE_MS, 3).into_bytes(),
    });
}

/// Produces `payload(id)` for each id of `ids` (keys = id) to topic `events`; returns the
/// payloads in production order.
pub fn produce_payloads(
    bootstrap: &str,
    ids: std::ops::Range<u64>,
    payload: impl Fn(u64) -> Vec<u8>,
) -> Vec<Vec<u8>> {
    produce_payloads_to(bootstrap, "events", ids, payload)
}

/// [`produce_payloads`] to topic `topic`.
pub fn produce_payloads_to(
    bootstrap: &str,
    topic: &str,
    ids: std::ops::Range<u64>,
    payload: impl Fn(u64) -> Vec<u8>,
) -> Vec<Vec<u8>> {
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("linger.ms", "5")
        .create()
        .expect("producer");
    let mut produced = Vec::with_capacity(ids.clone().count());
    for id in ids {
        let payload = payload(id);
        let key = id.to_string();
        loop {
            match producer.send(BaseRecord::to(topic).key(&key).payload(&payload)) {
                Ok(()) => break,
                Err(_) => {
                    producer.poll(Duration::from_millis(10));
                }
            }
        }
        producer.poll(Duration::ZERO);
        produced.push(payload);
    }
    producer.flush(Duration::from_secs(30)).expect("flush");
    produced
}

/// Rows in the current snapshot (from its summary) and published DLQ entries.
pub async fn delivered(dir: &Path) -> (u64, u64) {
    delivered_to(dir, "it", "events", "it").await
}

/// Rows of table `namespace.table` of the SQL catalog under `dir` (from its current snapshot's
/// summary; 0 before the table exists) and the published DLQ entries of channel `channel`
/// (a member channel's own, for a table per topic or route).
pub async fn delivered_to(dir: &Path, namespace: &str, table: &str, channel: &str) -> (u64, u64) {
    let dlq: floe::dlq::Dlq = LocalDlq::new(dir.join("dlq"), channel).into();
    let Some(catalog) = sql_catalog(dir).await else {
        return (
            0,
            dlq.read_published()
                .await
                .map(|e| e.len() as u64)
                .unwrap_or(0),
        );
    };
    let ident = TableIdent::new(NamespaceIdent::new(namespace.into()), table.into());
    floe::tools::quickstart::counts(catalog.as_ref(), &ident, &dlq).await
}

/// A fresh SQLite catalog under `dir` (`catalog.sqlite`, warehouse `warehouse/`) with the
/// namespace `namespace` created, and the catalog's swap for floe's own commits: (catalog file,
/// warehouse, catalog, swap).
pub async fn sql_catalog_with_swap(
    dir: &Path,
    namespace: &str,
) -> (
    PathBuf,
    PathBuf,
    std::sync::Arc<dyn iceberg::Catalog>,
    floe::catalog::swap::SqlSwap,
) {
    let catalog_path = dir.join("catalog.sqlite");
    let warehouse = dir.join("warehouse");
    let database = floe::config::CatalogDatabase::Sqlite(catalog_path.clone());
    let catalog = floe::catalog::open_sql_catalog_local(&database, &warehouse, "floe")
        .await
        .unwrap();
    let swap = floe::catalog::swap::SqlSwap::open(catalog.clone(), &database, "floe")
        .await
        .unwrap();
    let ns = NamespaceIdent::new(namespace.into());
    catalog
        .create_namespace(&ns, std::collections::HashMap::new())
        .await
        .unwrap();
    (catalog_path, warehouse, catalog, swap)
}

/// The SQL catalog `floe` of [`config_toml`] under `dir` (`catalog.sqlite`, `warehouse/`);
/// `None` when it cannot be opened (before the first worker created it).
pub async fn sql_catalog(dir: &Path) -> Option<std::sync::Arc<dyn iceberg::Catalog>> {
    floe::catalog::open_sql_catalog(&dir.join("catalog.sqlite"), &dir.join("warehouse"), "floe")
        .await
        .ok()
}

/// Polls `counts` (rows, DLQ entries) every 500 ms until their sum reaches `total`, or `timeout`
/// passes. Returns the last counts.
pub async fn poll_delivered<F, Fut>(total: u64, timeout: Duration, mut counts: F) -> (u64, u64)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = (u64, u64)>,
{
    let deadline = Instant::now() + timeout;
    loop {
        let (rows, dlq) = counts().await;
        if rows + dlq >= total || Instant::now() > deadline {
            return (rows, dlq);
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Asserts that every object of `bucket` is encrypted with SSE-KMS under `key_arn`; returns
/// their keys (at least one).
pub async fn assert_objects_sse_kms(
    s3: &aws_sdk_s3::Client,
    bucket: &str,
    key_arn: &str,
) -> Vec<String> {
    let listed = s3.list_objects_v2().bucket(bucket).send().await.unwrap();
    let keys: Vec<String> = listed
        .contents()
        .iter()
        .filter_map(|o| o.key().map(str::to_owned))
        .collect();
    assert!(!keys.is_empty(), "objects in {bucket}");
    for key in &keys {
        let head = s3
            .head_object()
            .bucket(bucket)
            .key(key)
            .send()
            .await
            .unwrap();
        assert_eq!(
            head.server_side_encryption().map(|e| e.as_str()),
            Some("aws:kms"),
            "s3://{bucket}/{key}"
        );
        assert_eq!(head.ssekms_key_id(), Some(key_arn), "s3://{bucket}/{key}");
    }
    keys
}

/// Waits until rows + DLQ entries reach `total`, or `timeout` passes. Returns the last counts.
pub async fn wait_delivered(dir: &Path, total: u64, timeout: Duration) -> (u64, u64) {
    let deadline = Instant::now() + timeout;
    loop {
        let (rows, dlq) = delivered(dir).await;
        if rows + dlq >= total || Instant::now() > deadline {
            return (rows, dlq);
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Published DLQ keys (ids as text).
pub fn dlq_keys(dir: &Path) -> Vec<Option<String>> {
    LocalDlq::new(dir.join("dlq"), "it")
        .read_published()
        .expect("read DLQ")
        .into_iter()
        .map(|e| e.key)
        .collect()
}

/// An `Event` table `<channel>.events` created as a channel would, in a SQL catalog under `dir`;
/// returns the catalog, the table and the mapped schema.
pub async fn event_table(
    dir: &Path,
    channel: &str,
) -> (
    std::sync::Arc<dyn iceberg::Catalog>,
    TableIdent,
    std::sync::Arc<floe::schema::MappedSchema>,
) {
    event_table_partitioned(dir, channel, &["hour(event_time)"]).await
}

/// [`event_table`] partitioned by `terms` (`partition` terms, docs/partitioning.md).
pub async fn event_table_partitioned(
    dir: &Path,
    channel: &str,
    terms: &[&str],
) -> (
    std::sync::Arc<dyn iceberg::Catalog>,
    TableIdent,
    std::sync::Arc<floe::schema::MappedSchema>,
) {
    let catalog =
        floe::catalog::open_sql_catalog(&dir.join("catalog.sqlite"), &dir.join("wh"), "floe")
            .await
            .unwrap();
    let terms: Vec<_> = terms
        .iter()
        .map(|t| floe::schema::partition::PartitionTerm::parse(t).unwrap())
        .collect();
    let (ident, schema) = event_table_with(catalog.as_ref(), channel, channel, terms).await;
    (catalog, ident, schema)
}

/// The `Event` table `<namespace>.events` of channel `channel`, created in `catalog` as a channel
/// would; returns the table and the mapped schema.
pub async fn event_table_in(
    catalog: &dyn iceberg::Catalog,
    namespace: &str,
    channel: &str,
) -> (TableIdent, std::sync::Arc<floe::schema::MappedSchema>) {
    let hour = vec![floe::schema::partition::PartitionTerm::hour("event_time")];
    event_table_with(catalog, namespace, channel, hour).await
}

/// [`event_table_in`] partitioned by `terms`; the time field is the source of their time
/// transform (none without one).
async fn event_table_with(
    catalog: &dyn iceberg::Catalog,
    namespace: &str,
    channel: &str,
    terms: Vec<floe::schema::partition::PartitionTerm>,
) -> (TableIdent, std::sync::Arc<floe::schema::MappedSchema>) {
    let schema_json: serde_json::Value =
        serde_json::from_str(floe::tools::quickstart::EVENT_SCHEMA).unwrap();
    let time_field = floe::schema::partition::time_field(&terms).unwrap_or_default();
    let schema = std::sync::Arc::new(
        floe::schema::MappedSchema::from_json_schema(&schema_json, time_field).unwrap(),
    );
    let ident = TableIdent::new(NamespaceIdent::new(namespace.into()), "events".into());
    let spec = floe::iceberg::table::TableSpec {
        ident: ident.clone(),
        channel: channel.into(),
        compression_codec: "zstd".into(),
        target_file_size_bytes: 128 << 20,
        partition: terms,
        sort: Vec::new(),
        key: Vec::new(),
        format_version: iceberg::spec::FormatVersion::V2,
    };
    floe::iceberg::table::ensure_table(catalog, &spec, &schema)
        .await
        .unwrap();
    (ident, schema)
}

/// Settings of a worker loop in component tests: channel `channel`, worker "w1", shards without
/// a checkpoint read from the earliest record, batches handed off after `data_freshness`.
pub fn worker_settings(channel: &str, data_freshness: Duration) -> floe::worker::WorkerSettings {
    floe::worker::WorkerSettings {
        channel: channel.into(),
        worker_id: "w1".into(),
        source_name: "events".into(),
        schema_version: "event.schema.json".into(),
        data_freshness,
        buffer_size: 64 << 20,
        max_record_size: 10 << 20,
        include_payload: false,
        initial_position: floe::source::InitialPosition::Earliest,
    }
}

/// A worker loop under test with the in-memory source (component tests of the worker, the
/// committer and the lease manager): an `Event` table in an SQL catalog, an SQLite lease store
/// and a local DLQ, all under one temporary directory.
pub struct WorkerRig {
    /// Holds every file; removed on drop.
    pub dir: tempfile::TempDir,
    /// Channel name.
    pub channel: String,
    /// The catalog holding `<channel>.events`.
    pub catalog: std::sync::Arc<dyn iceberg::Catalog>,
    /// The channel's table.
    pub ident: TableIdent,
    /// The mapped `Event` schema.
    pub schema: std::sync::Arc<floe::schema::MappedSchema>,
    /// The lease and batch store.
    pub store: std::sync::Arc<floe::lease::SqlLeaseStore>,
    /// The channel's DLQ.
    pub dlq: LocalDlq,
}

impl WorkerRig {
    /// Creates the table, the lease store and the DLQ for `channel`.
    pub async fn new(channel: &str) -> WorkerRig {
        let dir = tempfile::tempdir().unwrap();
        let (catalog, ident, schema) = event_table(dir.path(), channel).await;
        let store = std::sync::Arc::new(
            floe::lease::SqlLeaseStore::open_sqlite(dir.path().join("leases.sqlite"))
                .await
                .unwrap(),
        );
        let dlq = LocalDlq::new(dir.path().join("dlq"), channel);
        WorkerRig {
            dir,
            channel: channel.into(),
            catalog,
            ident,
            schema,
            store,
            dlq,
        }
    }

    /// Creates a lease per shard and takes each for worker "w1"; returns them by shard.
    pub async fn take_shard_leases(
        &self,
        shards: &[floe::model::ShardId],
    ) -> std::collections::BTreeMap<floe::model::ShardId, floe::lease::Lease> {
        use floe::lease::{LeaseKey, LeaseSpec, LeaseStore};
        let specs: Vec<LeaseSpec> = shards
            .iter()
            .map(|s| LeaseSpec::new(LeaseKey::Shard(s.clone())))
            .collect();
        self.store
            .ensure_leases(&self.channel, &specs)
            .await
            .unwrap();
        let mut leases = std::collections::BTreeMap::new();
        for l in self.store.list_leases(&self.channel).await.unwrap() {
            let taken = self.store.take_lease(&l, "w1").await.unwrap();
            leases.insert(taken.key.shard_id().unwrap().clone(), taken);
        }
        leases
    }

    /// Starts the worker loop ([`worker_settings`] with `data_freshness`) reading `source`
    /// while it holds the leases `held` announces; cancel the token to stop it (it drains for
    /// up to `drain`).
    pub fn spawn_worker(
        &self,
        source: std::sync::Arc<dyn floe::source::Source>,
        data_freshness: Duration,
        drain: Duration,
        held: tokio::sync::watch::Receiver<floe::lease::HeldLeases>,
    ) -> (
        tokio_util::sync::CancellationToken,
        tokio::task::JoinHandle<Result<(), floe::worker::WorkerError>>,
    ) {
        self.spawn_worker_with(
            worker_settings(&self.channel, data_freshness),
            source,
            drain,
            held,
        )
    }

    /// [`WorkerRig::spawn_worker`] with explicit settings.
    pub fn spawn_worker_with(
        &self,
        settings: floe::worker::WorkerSettings,
        source: std::sync::Arc<dyn floe::source::Source>,
        drain: Duration,
        held: tokio::sync::watch::Receiver<floe::lease::HeldLeases>,
    ) -> (
        tokio_util::sync::CancellationToken,
        tokio::task::JoinHandle<Result<(), floe::worker::WorkerError>>,
    ) {
        self.spawn_worker_on(settings, source, self.store.clone(), drain, held)
    }

    /// [`WorkerRig::spawn_worker_with`] handing batches off to `batches` instead of the rig's
    /// store.
    pub fn spawn_worker_on(
        &self,
        settings: floe::worker::WorkerSettings,
        source: std::sync::Arc<dyn floe::source::Source>,
        batches: std::sync::Arc<dyn floe::lease::BatchStore>,
        drain: Duration,
        held: tokio::sync::watch::Receiver<floe::lease::HeldLeases>,
    ) -> (
        tokio_util::sync::CancellationToken,
        tokio::task::JoinHandle<Result<(), floe::worker::WorkerError>>,
    ) {
        self.spawn_worker_replying(settings, source, batches, drain, held, None)
    }

    /// [`WorkerRig::spawn_worker_on`] answering graceful hand-offs through `replies` (from its
    /// lease manager).
    pub fn spawn_worker_replying(
        &self,
        settings: floe::worker::WorkerSettings,
        source: std::sync::Arc<dyn floe::source::Source>,
        batches: std::sync::Arc<dyn floe::lease::BatchStore>,
        drain: Duration,
        held: tokio::sync::watch::Receiver<floe::lease::HeldLeases>,
        replies: Option<floe::lease::manager::HandOffReplies>,
    ) -> (
        tokio_util::sync::CancellationToken,
        tokio::task::JoinHandle<Result<(), floe::worker::WorkerError>>,
    ) {
        let io = floe::worker::ChannelIo::iceberg(source, self.iceberg_io(&settings.channel));
        let mut worker = floe::worker::ChannelWorker::new(settings, io, batches, held);
        if let Some(replies) = replies {
            worker = worker.with_handoff_replies(replies);
        }
        let stop = tokio_util::sync::CancellationToken::new();
        let task = {
            let stop = stop.clone();
            tokio::spawn(async move { worker.run(stop, drain).await })
        };
        (stop, task)
    }

    /// The channel's table as a worker or a committer loop of channel `channel` writes it.
    pub fn iceberg_io(&self, channel: &str) -> floe::iceberg::IcebergIo {
        floe::iceberg::IcebergIo {
            catalog: self.catalog.clone(),
            ident: self.ident.clone(),
            schema: self.schema.clone(),
            dlq: self.dlq.clone().into(),
            writer: floe::iceberg::writer::WriterSettings {
                channel: channel.to_string(),
                compression: floe::iceberg::writer::ParquetCompression::Zstd(1),
                target_file_size: 128 << 20,
                max_open_partitions: 48,
            },
            record_decoder: Default::default(),
            maintenance: Default::default(),
            swap: None,
            lister: None,
            evolution: None,
            route: None,
            changes: None,
        }
    }

    /// The channel's committer with committer lease counter `epoch`.
    pub fn committer(&self, epoch: u64) -> floe::commit::Committer {
        floe::commit::Committer::new(
            &self.channel,
            floe::iceberg::target::IcebergTarget::new(
                &self.channel,
                self.ident.clone(),
                self.catalog.clone(),
                self.dlq.clone(),
            ),
            self.store.clone(),
            self.store.clone(),
            epoch,
        )
    }

    /// Waits up to `timeout` until the table's checkpoint of `shard` is `position`, running a
    /// commit round with `committer` (when given) before each look. Panics on timeout.
    pub async fn wait_for_checkpoint(
        &self,
        shard: &floe::model::ShardId,
        position: floe::model::Position,
        timeout: Duration,
        committer: Option<&floe::commit::Committer>,
    ) {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(c) = committer {
                c.run_round().await.unwrap();
            }
            let table = self.catalog.load_table(&self.ident).await.unwrap();
            let cp = floe::iceberg::table_state::table_checkpoints(&table).unwrap();
            if cp.get(shard) == Some(&position) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "shard {shard} stalled at {:?}, waiting for {position:?}",
                cp.get(shard)
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The `id` of every row of the table, sorted (duplicates kept).
    pub async fn sorted_table_ids(&self) -> Vec<i64> {
        let table = self.catalog.load_table(&self.ident).await.unwrap();
        let mut ids = floe::tools::quickstart::table_ids(&table).await.unwrap();
        ids.sort();
        ids
    }
}

/// The offsets the `floe.checkpoints` table property covers (last offset + 1, summed over the
/// partitions), from the properties that tests/py/read_table.py prints.
pub fn checkpointed_offsets(properties: &serde_json::Value) -> u64 {
    let checkpoints: serde_json::Value =
        serde_json::from_str(properties["floe.checkpoints"].as_str().unwrap()).unwrap();
    checkpoints
        .as_object()
        .unwrap()
        .values()
        .map(|v| v.as_i64().unwrap() as u64 + 1)
        .sum()
}

/// `GET path` over HTTP/1.1; returns (status, body).
pub fn get(addr: &str, path: &str) -> Option<(u16, String)> {
    let mut stream = TcpStream::connect(addr).ok()?;
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .ok()?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let status = response.split(' ').nth(1)?.parse().ok()?;
    let body = response.split_once("\r\n\r\n")?.1.to_string();
    Some((status, body))
}

/// The samples of a scrape: `name{labels}` → value.
pub fn samples(scrape: &str) -> BTreeMap<String, f64> {
    scrape
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .filter_map(|l| {
            let (k, v) = l.rsplit_once(' ')?;
            Some((k.to_string(), v.parse().ok()?))
        })
        .collect()
}

/// Sum of the samples of metric `name` whose labels contain every `filter` (`k="v"`).
pub fn sum(s: &BTreeMap<String, f64>, name: &str, filters: &[&str]) -> f64 {
    s.iter()
        .filter(|(k, _)| {
            k.split_once('{').map_or(k.as_str(), |(n, _)| n) == name
                && filters.iter().all(|f| k.contains(f))
        })
        .map(|(_, v)| v)
        .sum()
}

/// `json` in the GSR wire format: header version 3, compression 0 or zlib (5), `version`.
pub fn gsr_frame(version: uuid::Uuid, zlib: bool, json: &[u8]) -> Vec<u8> {
    let mut r = vec![3u8, if zlib { 5 } else { 0 }];
    r.extend_from_slice(version.as_bytes());
    if zlib {
        let mut e = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
        std::io::Write::write_all(&mut e, json).unwrap();
        r.extend_from_slice(&e.finish().unwrap());
    } else {
        r.extend_from_slice(json);
    }
    r
}

/// A schema registry of the test's own: deploy/local's `schema_registry.py` (from
/// `FLOE_TEST_SCHEMA_REGISTRY_SERVER`) started quiet with `args` (`--port 0` for any free port,
/// `--data FILE`, `--tls-cert`/`--tls-key`) and `env` (credentials; none otherwise). Killed on
/// drop.
pub struct OwnRegistry {
    child: Child,
    /// Its base URL, from the line it prints when listening.
    pub url: String,
}

impl OwnRegistry {
    /// Starts it and waits until it listens.
    pub fn start(args: &[&str], env: &[(&str, &str)]) -> OwnRegistry {
        let server = std::env::var("FLOE_TEST_SCHEMA_REGISTRY_SERVER").expect(
            "the schema registry is needed: eval \"$(deploy/local/schema-registry.sh env)\" (scripts/test.sh does it)",
        );
        let mut child = Command::new(python())
            .arg(server)
            .arg("--quiet")
            .args(args)
            .env_remove("FLOE_SCHEMA_REGISTRY_BASIC_AUTH")
            .env_remove("FLOE_SCHEMA_REGISTRY_BEARER_TOKEN")
            .envs(env.iter().copied())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let url = line
            .split_whitespace()
            .find(|w| w.starts_with("http://") || w.starts_with("https://"))
            .unwrap_or_else(|| panic!("no URL in {line:?}"))
            .to_string();
        OwnRegistry { child, url }
    }

    /// Stops it now (an outage).
    pub fn kill(self) {}
}

impl Drop for OwnRegistry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A TCP port free on 127.0.0.1 right now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Creates someone else's table `it.events` (not created by floe) in the test's SQL catalog.
pub async fn foreign_table(dir: &Path) {
    use iceberg::spec::{NestedField, PrimitiveType, Schema, Type};
    use iceberg::{NamespaceIdent, TableCreation};
    let catalog = floe::catalog::open_sql_catalog(
        &dir.join("catalog.sqlite"),
        &dir.join("warehouse"),
        "floe",
    )
    .await
    .unwrap();
    let ns = NamespaceIdent::new("it".into());
    catalog
        .create_namespace(&ns, Default::default())
        .await
        .unwrap();
    let schema = Schema::builder()
        .with_fields(vec![NestedField::required(
            1,
            "id",
            Type::Primitive(PrimitiveType::Long),
        )
        .into()])
        .build()
        .unwrap();
    catalog
        .create_table(
            &ns,
            TableCreation::builder()
                .name("events".into())
                .schema(schema)
                .build(),
        )
        .await
        .unwrap();
}
