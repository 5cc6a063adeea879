//! Delivery to an Iceberg REST catalog (`destination.catalog.kind = "rest"`), against the REST
//! catalog fixture of `tests/it/rest_fixture` (the OpenAPI endpoints floe and PyIceberg use, backed
//! by the SQL catalog, commit requirements enforced):
//! - the server rejects a commit built on a stale snapshot with 409 `CommitFailedException`,
//!   which iceberg-rust reports as `CatalogCommitConflicts`;
//! - floe's commit fence holds over REST: a stale commit is refused before it is sent, and one
//!   that passed the fence but lost the race is refused by the server; racing committers deliver
//!   each batch exactly once;
//! - end to end: Kafka → `floe run` (a separate process, OAuth2 client credentials from the
//!   environment) → the REST catalog, read back with PyIceberg's `RestCatalog`.

use crate::common;
use crate::rest_fixture;

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use floe::commit::{CommitError, Committer};
use floe::config::{PropertyValue, RestAuth, RestCatalogConfig};
use floe::dlq::LocalDlq;
use floe::iceberg::fence::FencedCatalog;
use floe::iceberg::table_state::committed_batch_ids;
use floe::lease::{BatchStore, LeaseStore, SqlLeaseStore};
use floe::model::PendingBatch;
use floe::schema::MappedSchema;
use floe::tools::sample_events::event_json;
use iceberg::table::Table;
use iceberg::transaction::{ApplyTransactionAction, Transaction};
use iceberg::{Catalog, ErrorKind, NamespaceIdent, TableIdent};
use rest_fixture::{FixtureAuth, FixtureSigV4, RestCatalogServer, WarehouseLocation};

use common::race::event_batch;
use common::*;

/// A REST catalog config pointing at `server` (no authentication).
fn rest_config(server: &RestCatalogServer) -> RestCatalogConfig {
    RestCatalogConfig {
        uri: server.uri.clone(),
        warehouse: None,
        auth: RestAuth::None,
        oauth2_server_uri: None,
        scope: None,
        kms_key_arn: None,
        vended_credentials: false,
    }
}

/// AWS clients of a configuration that names no AWS component (nothing is probed).
async fn no_aws() -> floe::aws::AwsClients {
    let text = config_toml(Path::new("/tmp"), "127.0.0.1:9092", "w", 10);
    let kafka_only = floe::config::Config::from_toml_str(&text, Path::new("/tmp")).unwrap();
    floe::aws::AwsClients::for_config(&kafka_only).await
}

/// floe's REST catalog client for `config`.
async fn open(config: &RestCatalogConfig) -> Arc<dyn Catalog> {
    floe::catalog::rest::open_rest_catalog(config, &no_aws().await)
        .await
        .unwrap()
}

/// The credentials, region and signing name the SigV4 fixture accepts.
fn fixture_sigv4() -> FixtureSigV4 {
    FixtureSigV4 {
        access_key_id: "AKIDFLOETEST".into(),
        secret_access_key: "floe/sigv4+test-secret".into(),
        region: "eu-west-1".into(),
        service: "s3tables".into(),
        session_token: Some("FwoGZXIvYXdzEXAMPLE/session+token=".into()),
    }
}

/// floe's REST catalog client for `server` signing with SigV4 as `name` in `region` with the
/// static credentials `key_id`/`secret`.
async fn open_signed(
    server: &RestCatalogServer,
    scope: (&str, &str),
    keys: (&str, &str),
) -> Arc<dyn Catalog> {
    open_signed_with_swap(server, scope, keys).await.0
}

/// [`open_signed`] and its swap for maintenance commits.
async fn open_signed_with_swap(
    server: &RestCatalogServer,
    (name, region): (&str, &str),
    (key_id, secret): (&str, &str),
) -> (Arc<dyn Catalog>, Arc<floe::catalog::rest::RestSwap>) {
    let mut config = rest_config(server);
    config.auth = RestAuth::SigV4 {
        signing_name: name.into(),
        signing_region: Some(region.into()),
    };
    // As on the S3 Tables endpoint: the warehouse is the table bucket ARN, sent in the query.
    config.warehouse = Some("arn:aws:s3tables:eu-west-1:111122223333:bucket/floe b".into());
    let credentials = aws_credential_types::Credentials::new(
        key_id,
        secret,
        fixture_sigv4().session_token,
        None,
        "test",
    );
    floe::catalog::rest::open_rest_catalog_with(
        &config,
        &no_aws().await,
        Some(aws_credential_types::provider::SharedCredentialsProvider::new(credentials)),
    )
    .await
    .unwrap()
}

struct Fixture {
    dir: tempfile::TempDir,
    server: RestCatalogServer,
    catalog: Arc<dyn Catalog>,
    /// The swap of the same client settings (maintenance commits).
    swap: Arc<floe::catalog::rest::RestSwap>,
    ident: TableIdent,
    store: Arc<SqlLeaseStore>,
    dlq: LocalDlq,
    schema: Arc<MappedSchema>,
}

/// The mapped `Event` schema of the quickstart, partitioned on `event_time`.
fn event_schema() -> Arc<MappedSchema> {
    let schema_json: serde_json::Value =
        serde_json::from_str(floe::tools::quickstart::EVENT_SCHEMA).unwrap();
    Arc::new(MappedSchema::from_json_schema(&schema_json, "event_time").unwrap())
}

/// Creates table `ident` as the channel named like its namespace would.
async fn ensure_event_table(
    catalog: &dyn Catalog,
    ident: &TableIdent,
    schema: &MappedSchema,
) -> Table {
    let spec = floe::iceberg::table::TableSpec {
        ident: ident.clone(),
        channel: ident.namespace().to_url_string(),
        compression_codec: "zstd".into(),
        target_file_size_bytes: 128 << 20,
        partition: vec![floe::schema::partition::PartitionTerm::hour("event_time")],
        sort: Vec::new(),
        key: Vec::new(),
        format_version: iceberg::spec::FormatVersion::V2,
    };
    floe::iceberg::table::ensure_table(catalog, &spec, schema)
        .await
        .unwrap()
}

/// A fixture server holding table `race.events` created as a channel would, through floe's REST
/// catalog client.
async fn fixture() -> Fixture {
    fixture_with(false).await
}

/// [`fixture`], with every request signed with SigV4 (`signed`).
async fn fixture_with(signed: bool) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let (server, (catalog, swap)) = if signed {
        let sigv4 = fixture_sigv4();
        let server = RestCatalogServer::start_sigv4(&dir.path().join("rest"), sigv4.clone(), None);
        let scope = (sigv4.service.as_str(), sigv4.region.as_str());
        let keys = (
            sigv4.access_key_id.as_str(),
            sigv4.secret_access_key.as_str(),
        );
        let opened = open_signed_with_swap(&server, scope, keys).await;
        (server, opened)
    } else {
        let server = RestCatalogServer::start(&dir.path().join("rest"));
        let opened = floe::catalog::rest::open_rest_catalog_with(
            &rest_config(&server),
            &no_aws().await,
            None,
        )
        .await
        .unwrap();
        (server, opened)
    };
    let schema = event_schema();
    let ident = TableIdent::new(NamespaceIdent::new("race".into()), "events".into());
    ensure_event_table(catalog.as_ref(), &ident, &schema).await;
    let store = Arc::new(
        SqlLeaseStore::open_sqlite(dir.path().join("leases.sqlite"))
            .await
            .unwrap(),
    );
    let dlq = LocalDlq::new(dir.path().join("dlq"), "race");
    Fixture {
        dir,
        server,
        catalog,
        swap,
        ident,
        store,
        dlq,
        schema,
    }
}

impl Fixture {
    async fn batch(&self, table: &Table, after: Option<i64>, from: u64, to: u64) -> PendingBatch {
        event_batch(&self.schema, "race", table, after, from, to).await
    }

    fn committer(&self, catalog: Arc<dyn Catalog>) -> Committer {
        self.committer_with(catalog, floe::config::MaintenanceConfig::default())
    }

    fn committer_with(
        &self,
        catalog: Arc<dyn Catalog>,
        maintenance: floe::config::MaintenanceConfig,
    ) -> Committer {
        let leases: Arc<dyn LeaseStore> = self.store.clone();
        let batches: Arc<dyn BatchStore> = self.store.clone();
        Committer::new(
            "race",
            floe::iceberg::target::IcebergTarget::new(
                "race",
                self.ident.clone(),
                catalog,
                self.dlq.clone(),
            )
            .with_maintenance(maintenance),
            leases,
            batches,
            1,
        )
    }

    async fn table(&self) -> Table {
        self.catalog.load_table(&self.ident).await.unwrap()
    }
}

fn append(table: &Table, b: &PendingBatch) -> Transaction {
    let files =
        floe::iceberg::writer::parse_data_files(table, b.files.iceberg_data_files().unwrap())
            .unwrap();
    let tx = Transaction::new(table);
    tx.fast_append().add_data_files(files).apply(tx).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_answers_a_commit_on_a_stale_snapshot_with_409_commit_failed() {
    let f = fixture().await;
    let stale = f.table().await;
    let b1 = f.batch(&stale, None, 0, 10).await;
    append(&stale, &b1)
        .commit(f.catalog.as_ref())
        .await
        .unwrap();
    let current = f.table().await.metadata().current_snapshot_id().unwrap();

    // The request iceberg-rust's fast append sends, built on the stale (empty) table: the
    // specification's answer is 409 with a CommitFailedException error model.
    let url = format!("{}/v1/namespaces/race/tables/events", f.server.uri);
    let commit = serde_json::json!({
        "requirements": [{"type": "assert-ref-snapshot-id", "ref": "main", "snapshot-id": null}],
        "updates": [{"action": "set-properties", "updates": {"stale": "true"}}],
    });
    let response = reqwest::Client::new()
        .post(&url)
        .json(&commit)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 409);
    let body: serde_json::Value = response.json().await.unwrap();
    assert_eq!(body["error"]["type"], "CommitFailedException");
    assert_eq!(body["error"]["code"], 409);
    // Against the current snapshot the same request is accepted.
    let fresh = serde_json::json!({
        "requirements": [{"type": "assert-ref-snapshot-id", "ref": "main", "snapshot-id": current}],
        "updates": [{"action": "set-properties", "updates": {"fresh": "true"}}],
    });
    let response = reqwest::Client::new()
        .post(&url)
        .json(&fresh)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 200);
    let table = f.table().await;
    assert_eq!(
        table
            .metadata()
            .properties()
            .get("fresh")
            .map(String::as_str),
        Some("true")
    );
    assert!(!table.metadata().properties().contains_key("stale"));
    assert_eq!(f.server.conflicts(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigv4_signed_requests_are_accepted_and_the_fence_holds() {
    let dir = tempfile::tempdir().unwrap();
    let sigv4 = fixture_sigv4();
    let server = RestCatalogServer::start_sigv4(&dir.path().join("rest"), sigv4.clone(), None);
    assert!(server.uri.ends_with("/iceberg"), "{}", server.uri);
    let scope = (sigv4.service.as_str(), sigv4.region.as_str());
    let keys = (
        sigv4.access_key_id.as_str(),
        sigv4.secret_access_key.as_str(),
    );
    let catalog = open_signed(&server, scope, keys).await;
    // A namespace whose name needs encoding in the path (and so in the canonical URI).
    let ident = TableIdent::new(NamespaceIdent::new("sig v4".into()), "events".into());
    let schema = event_schema();
    let stale = ensure_event_table(catalog.as_ref(), &ident, &schema).await;
    let b1 = event_batch(&schema, "sig v4", &stale, None, 0, 10).await;
    let b2 = event_batch(&schema, "sig v4", &stale, None, 10, 20).await;
    append(&stale, &b1).commit(catalog.as_ref()).await.unwrap();
    let signed = server.signed_requests();
    assert!(signed >= 4, "{signed} signed requests");

    // floe's fence holds over the signed client.
    let fenced = FencedCatalog::new(catalog.clone(), "test");
    fenced.set_fence(ident.clone(), stale.metadata().current_snapshot_id());
    let err = append(&stale, &b2).commit(&fenced).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::CatalogCommitConflicts);
    let table = catalog.load_table(&ident).await.unwrap();
    assert_eq!(floe::tools::quickstart::total_records(&table), 10);
    assert!(server.signed_requests() > signed);
    assert!(
        server.signature_refusals().is_empty(),
        "{:?}",
        server.signature_refusals()
    );

    // Unsigned, the server refuses (403).
    let unsigned = reqwest::get(format!("{}/v1/config", server.uri))
        .await
        .unwrap();
    assert_eq!(unsigned.status().as_u16(), 403);
    assert!(server.signature_refusals()[0].contains("missing Authorization"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_signing_relay_signs_only_for_requests_carrying_its_secret() {
    use floe::catalog::sigv4::{start_signing_relay, SigV4Signer};
    let dir = tempfile::tempdir().unwrap();
    let sigv4 = fixture_sigv4();
    let server = RestCatalogServer::start_sigv4(&dir.path().join("rest"), sigv4.clone(), None);
    let credentials = aws_credential_types::Credentials::new(
        &sigv4.access_key_id,
        &sigv4.secret_access_key,
        sigv4.session_token.clone(),
        None,
        "test",
    );
    let signer = SigV4Signer::new(
        &sigv4.service,
        &sigv4.region,
        aws_credential_types::provider::SharedCredentialsProvider::new(credentials),
    );
    let relay = start_signing_relay(&server.uri, signer).await.unwrap();
    let config = format!("{}/v1/config?warehouse=a+b", relay.base);
    let http = reqwest::Client::new();
    for refused in [
        http.get(&config),
        http.get(&config).bearer_auth("not-the-secret"),
    ] {
        let answer = refused.send().await.unwrap();
        assert_eq!(answer.status().as_u16(), 403);
    }
    assert_eq!(server.signed_requests(), 0, "nothing was signed for them");
    let answer = http
        .get(&config)
        .bearer_auth(&relay.secret)
        .send()
        .await
        .unwrap();
    assert_eq!(
        answer.status().as_u16(),
        200,
        "{:?}",
        server.signature_refusals()
    );
    assert_eq!(server.signed_requests(), 1);
    assert!(!format!("{relay:?}").contains(&relay.secret));

    // The catalog client's Debug output holds neither a token nor the relay's secret.
    let mut with_token = rest_config(&server);
    with_token.auth = RestAuth::Token(PropertyValue::FromEnv {
        var: "T".into(),
        value: "bearer-secret-value".into(),
    });
    let catalog = open(&with_token).await;
    assert!(!format!("{catalog:?}").contains("bearer-secret-value"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigv4_with_a_wrong_secret_region_or_service_is_refused_by_the_server() {
    let dir = tempfile::tempdir().unwrap();
    let sigv4 = fixture_sigv4();
    let server = RestCatalogServer::start_sigv4(&dir.path().join("rest"), sigv4.clone(), None);
    let ns = NamespaceIdent::new("refused".into());
    let key_id = sigv4.access_key_id.as_str();
    for (scope, secret, reason) in [
        (
            ("s3tables", "eu-west-1"),
            "not-the-secret",
            "SignatureDoesNotMatch",
        ),
        (
            ("s3tables", "us-east-1"),
            sigv4.secret_access_key.as_str(),
            "credential scope",
        ),
        (
            ("glue", "eu-west-1"),
            sigv4.secret_access_key.as_str(),
            "credential scope",
        ),
    ] {
        let catalog = open_signed(&server, scope, (key_id, secret)).await;
        let err = catalog.namespace_exists(&ns).await.unwrap_err();
        assert!(err.to_string().contains("403"), "{scope:?}: {err}");
        let refusal = server.signature_refusals().pop().unwrap();
        assert!(refusal.contains(reason), "{scope:?}: {refusal}");
        assert!(
            !err.to_string().contains(secret),
            "the secret is in the error: {err}"
        );
    }
    assert_eq!(server.signed_requests(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fence_refuses_a_stale_commit_over_rest_that_iceberg_would_rebase() {
    let f = fixture().await;
    let stale = f.table().await;
    let b1 = f.batch(&stale, None, 0, 10).await;
    let b2 = f.batch(&stale, None, 10, 20).await;
    append(&stale, &b1)
        .commit(f.catalog.as_ref())
        .await
        .unwrap();

    let fenced = FencedCatalog::new(f.catalog.clone(), "test");
    fenced.set_fence(f.ident.clone(), stale.metadata().current_snapshot_id());
    let err = append(&stale, &b2).commit(&fenced).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::CatalogCommitConflicts);
    assert_eq!(floe::tools::quickstart::total_records(&f.table().await), 10);

    // The trap the fence exists for holds over REST too: unfenced, the stale commit is rebased.
    append(&stale, &b2)
        .commit(f.catalog.as_ref())
        .await
        .unwrap();
    assert_eq!(floe::tools::quickstart::total_records(&f.table().await), 20);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commit_that_passed_the_fence_but_lost_the_race_is_refused_by_the_server() {
    lost_race_is_refused_by_the_server(fixture().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigv4_signed_commit_that_lost_the_race_is_refused_by_the_server() {
    let f = fixture_with(true).await;
    lost_race_is_refused_by_the_server(f).await;
}

/// Committer B validates the empty table, passes its fence and sends its commit; the server
/// holds it while committer A commits the same offsets; released, B's request still asserts
/// the empty table's snapshot: 409, a conflict, and the rows are in the table once.
async fn lost_race_is_refused_by_the_server(f: Fixture) {
    let table = f.table().await;
    let x = f.batch(&table, None, 0, 10).await;
    f.store.put_batch(&x).await.unwrap();
    let other = tempfile::tempdir().unwrap();
    let store_a = Arc::new(
        SqlLeaseStore::open_sqlite(other.path().join("a.sqlite"))
            .await
            .unwrap(),
    );
    store_a.put_batch(&x).await.unwrap();
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
    let b = f.committer(f.catalog.clone());

    let hold = f.server.hold_next_commit();
    let b_round = tokio::spawn(async move { b.run_round().await });
    hold.arrived().await;
    let ra = a.run_round().await;
    assert_eq!(ra.as_ref().map(|r| r.committed).ok(), Some(1), "{ra:?}");
    hold.release();
    let rb = b_round.await.unwrap();
    assert!(
        matches!(rb, Err(CommitError::Conflict(_))),
        "B must see a conflict: {rb:?}"
    );
    assert_eq!(f.server.conflicts(), 1, "the server refused B's commit");

    let table = f.table().await;
    assert_eq!(floe::tools::quickstart::total_records(&table), 10);
    let ids = floe::tools::quickstart::table_ids(&table).await.unwrap();
    assert_eq!(ids.len(), 10, "no row twice");
    // B's next round finds its batch committed and settles it without a second commit.
    let report = f.committer(f.catalog.clone()).run_round().await.unwrap();
    assert_eq!(report.committed, 0, "{report:?}");
    assert_eq!(floe::tools::quickstart::total_records(&f.table().await), 10);
    assert!(
        f.server.signature_refusals().is_empty(),
        "{:?}",
        f.server.signature_refusals()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_committers_racing_over_rest_commit_each_batch_exactly_once() {
    racing_over_rest(floe::config::MaintenanceConfig::default(), None).await
}

/// The same race with snapshot expiry in every commit (a retention every snapshot is older
/// than, 2 kept): the server applies `remove-snapshots` with the data in one conditional
/// commit, the race still commits each batch once, and the table keeps at most 3 snapshots.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_over_rest_with_snapshot_expiry_in_every_commit_still_commits_each_batch_once() {
    let m = floe::config::MaintenanceConfig {
        enabled: true,
        snapshot_retention: std::time::Duration::from_millis(1),
        min_snapshots: 2,
        ..floe::config::MaintenanceConfig::default()
    };
    racing_over_rest(m, Some(3)).await
}

async fn racing_over_rest(
    maintenance: floe::config::MaintenanceConfig,
    max_snapshots: Option<usize>,
) {
    let f = fixture().await;
    let a = f.committer_with(f.catalog.clone(), maintenance);
    let b = f.committer_with(open(&rest_config(&f.server)).await, maintenance);
    let mut after = None;
    let mut expected_rows = 0;
    for round in 0..6u64 {
        let table = f.table().await;
        let pb = f.batch(&table, after, round * 10, round * 10 + 10).await;
        after = Some(round as i64 * 10 + 9);
        expected_rows += pb.num_rows;
        f.store.put_batch(&pb).await.unwrap();
        let (ra, rb) = tokio::join!(a.run_round(), b.run_round());
        let committed = ra.as_ref().map(|r| r.committed).unwrap_or(0)
            + rb.as_ref().map(|r| r.committed).unwrap_or(0);
        assert!(committed <= 1, "round {round}: {ra:?} {rb:?}");
        a.run_round().await.unwrap();
        let table = f.table().await;
        assert!(
            committed_batch_ids(&table).contains(&pb.batch_id),
            "round {round}"
        );
        assert_eq!(
            floe::tools::quickstart::total_records(&table),
            expected_rows,
            "round {round}"
        );
        assert!(f.store.list_pending("race").await.unwrap().is_empty());
    }
    let ids = floe::tools::quickstart::table_ids(&f.table().await)
        .await
        .unwrap();
    let mut distinct = ids.clone();
    distinct.sort();
    distinct.dedup();
    assert_eq!((distinct.len(), ids.len()), (60, 60), "no row twice");
    if let Some(max) = max_snapshots {
        let n = f.table().await.metadata().snapshots().count();
        assert!(n <= max, "{n} snapshots retained");
    }
    drop(f.dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn table_locations_without_a_scheme_are_local_paths() {
    // A server with a plain-path warehouse answers locations like `/tmp/…/lake/events`.
    let dir = tempfile::tempdir().unwrap();
    let plain = dir.path().join("plain");
    std::fs::create_dir_all(&plain).unwrap();
    let location = std::fs::canonicalize(&plain).unwrap().display().to_string();
    let server = RestCatalogServer::start_with(
        &dir.path().join("rest"),
        None,
        Some(WarehouseLocation {
            location: location.clone(),
            props: Default::default(),
        }),
    );
    let catalog = open(&rest_config(&server)).await;
    let schema = event_schema();
    let ident = TableIdent::new(NamespaceIdent::new("p".into()), "events".into());
    let table = ensure_event_table(catalog.as_ref(), &ident, &schema).await;
    assert!(
        table.metadata().location().starts_with(&location),
        "{}",
        table.metadata().location()
    );
    let batch = event_batch(&schema, "p", &table, None, 0, 5).await;
    let files =
        floe::iceberg::writer::parse_data_files(&table, batch.files.iceberg_data_files().unwrap())
            .unwrap();
    let tx = Transaction::new(&table);
    let tx = tx.fast_append().add_data_files(files).apply(tx).unwrap();
    let table = tx.commit(catalog.as_ref()).await.unwrap();
    assert_eq!(
        floe::tools::quickstart::table_ids(&table)
            .await
            .unwrap()
            .len(),
        5
    );
    let files = floe::iceberg::table::referenced_data_files(&table)
        .await
        .unwrap();
    assert!(files.iter().all(|f| f.starts_with(&location)), "{files:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oauth2_tokens_are_fetched_renewed_when_refused_and_a_wrong_secret_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let server = RestCatalogServer::start_with_auth(
        dir.path(),
        Some(FixtureAuth {
            token: "granted-token".into(),
            client: Some(("floe".into(), "s3cret".into())),
        }),
    );
    let secret = |value: &str| PropertyValue::FromEnv {
        var: "SECRET".into(),
        value: value.into(),
    };
    let mut config = rest_config(&server);
    config.auth = RestAuth::OAuth2 {
        client_id: Some("floe".into()),
        client_secret: secret("s3cret"),
    };
    let ns = NamespaceIdent::new("auth".into());
    let catalog = open(&config).await;
    catalog
        .create_namespace(&ns, Default::default())
        .await
        .unwrap();
    assert!(catalog.namespace_exists(&ns).await.unwrap());

    // The token expires: the server answers 401, the client fetches a new one and goes on.
    server.rotate_token("second-token");
    assert!(catalog.namespace_exists(&ns).await.unwrap());
    assert_eq!(
        catalog.list_namespaces(None).await.unwrap(),
        vec![ns.clone()]
    );

    // A committer whose token expired between two commits goes on.
    let schema = event_schema();
    let ident = TableIdent::new(NamespaceIdent::new("auth".into()), "events".into());
    let table = ensure_event_table(catalog.as_ref(), &ident, &schema).await;
    let store = Arc::new(
        SqlLeaseStore::open_sqlite(dir.path().join("l.sqlite"))
            .await
            .unwrap(),
    );
    let committer = Committer::new(
        "auth",
        floe::iceberg::target::IcebergTarget::new(
            "auth",
            ident.clone(),
            catalog.clone(),
            LocalDlq::new(dir.path().join("dlq"), "auth"),
        ),
        store.clone(),
        store.clone(),
        1,
    );
    for (round, token) in ["third-token", "fourth-token"].into_iter().enumerate() {
        let from = round as u64 * 5;
        let after = (round > 0).then(|| from as i64 - 1);
        let batch = event_batch(&schema, "auth", &table, after, from, from + 5).await;
        store.put_batch(&batch).await.unwrap();
        server.rotate_token(token);
        assert_eq!(
            committer.run_round().await.unwrap().committed,
            1,
            "round {round}"
        );
    }
    let table = catalog.load_table(&ident).await.unwrap();
    assert_eq!(floe::tools::quickstart::total_records(&table), 10);

    config.auth = RestAuth::Token(secret("fourth-token"));
    assert!(open(&config).await.namespace_exists(&ns).await.unwrap());

    config.auth = RestAuth::OAuth2 {
        client_id: Some("floe".into()),
        client_secret: secret("wrong"),
    };
    let err = open(&config).await.namespace_exists(&ns).await.unwrap_err();
    assert!(
        !err.to_string().contains("wrong"),
        "secret in the error: {err}"
    );
    config.auth = RestAuth::None;
    assert!(open(&config).await.namespace_exists(&ns).await.is_err());
}

/// How the PyIceberg reader authenticates.
enum PyAuth<'a> {
    /// A bearer token.
    Token(&'a str),
    /// SigV4 with the fixture's credentials (botocore signs).
    SigV4(&'a FixtureSigV4),
}

/// The AWS environment of a process signing with `sigv4`'s credentials.
fn aws_env(sigv4: &FixtureSigV4) -> [(&'static str, String); 5] {
    [
        ("AWS_ACCESS_KEY_ID", sigv4.access_key_id.clone()),
        ("AWS_SECRET_ACCESS_KEY", sigv4.secret_access_key.clone()),
        (
            "AWS_SESSION_TOKEN",
            sigv4.session_token.clone().unwrap_or_default(),
        ),
        ("AWS_REGION", sigv4.region.clone()),
        ("AWS_EC2_METADATA_DISABLED", "true".into()),
    ]
}

/// Runs tests/py/read_table.py against the REST catalog at `uri` (PyIceberg's `RestCatalog`,
/// storage settings as the server vends them) for table `table`, sampling `ids`.
async fn read_with_pyiceberg_rest(
    uri: &str,
    auth: &PyAuth<'_>,
    table: &str,
    ids: &[u64],
) -> serde_json::Value {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/py/read_table.py");
    let ids: Vec<String> = ids.iter().map(u64::to_string).collect();
    let mut command = std::process::Command::new(python());
    command
        .arg(script)
        .args(["-", "-", table, "--rest-uri", uri])
        .arg("--ids")
        .arg(ids.join(","));
    match auth {
        PyAuth::Token(token) => {
            command.args(["--rest-token", token]);
        }
        PyAuth::SigV4(sigv4) => {
            command
                .arg("--rest-sigv4")
                .arg(format!("{}:{}", sigv4.region, sigv4.service))
                .envs(aws_env(sigv4));
        }
    }
    let out = tokio::task::spawn_blocking(move || command.output().expect("run python"))
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "PyIceberg RestCatalog reader failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s3_table_locations_are_written_with_the_storage_settings_the_server_vends() {
    // The server's tables live in an S3 bucket (the emulator); floe is given no [aws] endpoint:
    // it asks for vended credentials and writes data files where the server says, with the
    // endpoint and credentials the server vends with the table (only to clients that ask), and
    // PyIceberg (which asks by default) reads them back the same way.
    let endpoint = aws_endpoint();
    let bucket = create_bucket(&endpoint, "floe-rest").await;
    let vended = std::collections::HashMap::from([
        (iceberg::io::S3_ENDPOINT.to_string(), endpoint.clone()),
        (iceberg::io::S3_REGION.to_string(), "us-east-1".to_string()),
        (
            iceberg::io::S3_PATH_STYLE_ACCESS.to_string(),
            "true".to_string(),
        ),
        (
            iceberg::io::S3_ACCESS_KEY_ID.to_string(),
            std::env::var("AWS_ACCESS_KEY_ID").unwrap(),
        ),
        (
            iceberg::io::S3_SECRET_ACCESS_KEY.to_string(),
            std::env::var("AWS_SECRET_ACCESS_KEY").unwrap(),
        ),
    ]);
    let dir = tempfile::tempdir().unwrap();
    let server = RestCatalogServer::start_with(
        dir.path(),
        None,
        Some(WarehouseLocation {
            location: format!("s3://{bucket}/warehouse"),
            props: vended,
        }),
    );
    let mut config = rest_config(&server);
    config.vended_credentials = true;
    let catalog = open(&config).await;
    let schema = event_schema();
    let ident = TableIdent::new(NamespaceIdent::new("lake".into()), "events".into());
    let table = ensure_event_table(catalog.as_ref(), &ident, &schema).await;
    assert!(table
        .metadata()
        .location()
        .starts_with(&format!("s3://{bucket}/")));
    let batch = event_batch(&schema, "lake", &table, None, 0, 25).await;
    let store = Arc::new(
        SqlLeaseStore::open_sqlite(dir.path().join("leases.sqlite"))
            .await
            .unwrap(),
    );
    store.put_batch(&batch).await.unwrap();
    let committer = Committer::new(
        "lake",
        floe::iceberg::target::IcebergTarget::new(
            "lake",
            ident.clone(),
            catalog.clone(),
            LocalDlq::new(dir.path().join("dlq"), "lake"),
        ),
        store.clone(),
        store.clone(),
        1,
    );
    assert_eq!(committer.run_round().await.unwrap().committed, 1);
    let files =
        floe::iceberg::table::referenced_data_files(&catalog.load_table(&ident).await.unwrap())
            .await
            .unwrap();
    assert!(
        !files.is_empty()
            && files
                .iter()
                .all(|f| f.starts_with(&format!("s3://{bucket}/warehouse/lake/events/"))),
        "{files:?}"
    );

    let t =
        read_with_pyiceberg_rest(&server.uri, &PyAuth::Token(""), "lake.events", &[0, 24]).await;
    assert_eq!(t["rows"], 25);
    assert_eq!(t["distinct_ids"], 25);
    assert_eq!(t["sample"]["24"]["id"], 24);
}

/// Rows in the table and DLQ entries, through the REST catalog (0 rows before the table exists).
async fn delivered_rest(catalog: &dyn Catalog, dir: &Path) -> (u64, u64) {
    let dlq: floe::dlq::Dlq = LocalDlq::new(dir.join("dlq"), "it").into();
    let ident = TableIdent::new(NamespaceIdent::new("it".into()), "events".into());
    floe::tools::quickstart::counts(catalog, &ident, &dlq).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_to_rest_catalog_end_to_end_and_pyiceberg_reads_it_back() {
    kafka_to_rest_end_to_end(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_to_a_sigv4_rest_catalog_end_to_end_and_pyiceberg_reads_it_back_signed() {
    kafka_to_rest_end_to_end(true).await;
}

/// Kafka → `floe run` (OAuth2 client credentials, or SigV4 with `signed`) → the REST fixture,
/// read back with PyIceberg's `RestCatalog` (bearer token, or SigV4 signed by botocore).
async fn kafka_to_rest_end_to_end(signed: bool) {
    let dir = tempfile::tempdir().unwrap();
    let token = "e2e-token";
    let sigv4 = fixture_sigv4();
    let server = if signed {
        // The token is for this test's own client only; floe and PyIceberg sign.
        RestCatalogServer::start_sigv4(&dir.path().join("rest"), sigv4.clone(), Some(token))
    } else {
        RestCatalogServer::start_with_auth(
            &dir.path().join("rest"),
            Some(FixtureAuth {
                token: token.into(),
                client: Some(("floe-e2e".into(), "e2e-secret".into())),
            }),
        )
    };
    let broker = Broker::start();
    let total = 2_000u64;
    produce(&broker.bootstrap, 0, total);

    let sql_catalog = format!(
        "    [channel.destination.catalog]\n    kind = \"sql\"\n    name = \"floe\"\n    uri = \"{d}/catalog.sqlite\"\n    warehouse = \"{d}/warehouse\"\n",
        d = dir.path().display()
    );
    let auth = if signed {
        format!(
            "sigv4 = true\n    signing_name = \"{}\"\n    signing_region = \"{}\"",
            sigv4.service, sigv4.region
        )
    } else {
        "credential = \"env:FLOE_TEST_REST_CREDENTIAL\"\n    scope = \"catalog\"".to_string()
    };
    let rest_catalog = format!(
        "    [channel.destination.catalog]\n    kind = \"rest\"\n    uri = \"{}\"\n    {auth}\n",
        server.uri
    );
    let text = config_toml(dir.path(), &broker.bootstrap, "w1", 4);
    assert!(
        text.contains(&sql_catalog),
        "config_toml's catalog table changed"
    );
    let text = text.replace(&sql_catalog, &rest_catalog);
    let mut env = vec![(
        "FLOE_TEST_REST_CREDENTIAL".to_string(),
        "floe-e2e:e2e-secret".to_string(),
    )];
    if signed {
        env.extend(aws_env(&sigv4).map(|(k, v)| (k.to_string(), v)));
    }
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let mut worker = Worker::start_with_env(dir.path(), "w1", &text, &env);

    let mut config = rest_config(&server);
    config.auth = RestAuth::Token(PropertyValue::FromEnv {
        var: "T".into(),
        value: token.into(),
    });
    let catalog = open(&config).await;
    let deadline = Instant::now() + Duration::from_secs(120);
    let (rows, dlq) = loop {
        let (rows, dlq) = delivered_rest(catalog.as_ref(), dir.path()).await;
        if let Some(status) = worker.child.try_wait().unwrap() {
            panic!(
                "worker exited early: {status:?}\n{}",
                log_of(dir.path(), "w1")
            );
        }
        if rows + dlq >= total || Instant::now() > deadline {
            break (rows, dlq);
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let status = worker.terminate();
    assert!(
        status.success(),
        "worker exit: {status:?}\n{}",
        log_of(dir.path(), "w1")
    );
    let expected_bad = (0..total).filter(|id| bad_kind(*id).is_some()).count() as u64;
    assert_eq!(
        (rows, dlq),
        (total - expected_bad, expected_bad),
        "{}",
        log_of(dir.path(), "w1")
    );
    assert!(server.commits() >= 1);
    let log = log_of(dir.path(), "w1");
    assert!(
        !log.contains("e2e-secret")
            && !log.contains(token)
            && !log.contains(&sigv4.secret_access_key),
        "a secret is in the log"
    );
    if signed {
        assert!(server.signed_requests() >= 3, "floe signed its requests");
        assert!(
            server.signature_refusals().is_empty(),
            "{:?}",
            server.signature_refusals()
        );
    }
    let signed_by_floe = server.signed_requests();

    // The independent reader: PyIceberg's RestCatalog against the same server.
    let sample_ids = [0u64, 1, 2, 999, 1_998];
    let py_auth = if signed {
        PyAuth::SigV4(&sigv4)
    } else {
        PyAuth::Token(token)
    };
    let t = read_with_pyiceberg_rest(&server.uri, &py_auth, "it.events", &sample_ids).await;
    if signed {
        assert!(
            server.signed_requests() > signed_by_floe,
            "PyIceberg (botocore) signed its requests"
        );
    }
    assert_eq!(t["rows"], rows);
    assert_eq!(t["distinct_ids"], rows, "no duplicate ids");
    assert_eq!(
        t["partition_spec"],
        serde_json::json!([{"source": "event_time", "transform": "hour", "name": "event_time_hour"}])
    );
    let props = &t["properties"];
    assert_eq!(props["floe.channel"], "it");
    let offsets = checkpointed_offsets(props);
    assert_eq!(offsets, total, "checkpoints cover every produced offset");
    let added: u64 = t["snapshots"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|s| s["added-records"].as_str())
        .map(|v| v.parse::<u64>().unwrap())
        .sum();
    assert_eq!(added, rows, "snapshot summaries add up to the rows");
    for id in sample_ids.into_iter().filter(|id| bad_kind(*id).is_none()) {
        let produced: serde_json::Value =
            serde_json::from_str(&event_json(id, SEED, BASE_MS, 3)).unwrap();
        let row = &t["sample"][id.to_string()];
        assert_eq!(row["id"], produced["id"]);
        assert_eq!(row["source"], produced["source"]);
        assert_eq!(row["value"].as_f64(), produced["value"].as_f64());
        assert_eq!(row["tags"], produced["tags"]);
    }
}

/// A replace snapshot (manifest rewrite) over REST: the swap sends `assert-ref-snapshot-id` with
/// `add-snapshot` and `set-snapshot-ref`; the server refuses one built on a stale snapshot (409,
/// a conflict; nothing committed, its manifests deleted) and applies a current one, after which
/// the table reads the same rows from one manifest.
async fn replace_over_rest(f: Fixture) {
    let c = f.committer(f.catalog.clone());
    let mut after = None;
    for round in 0..3u64 {
        if round == 2 {
            let stale = f.table().await;
            let files = floe::iceberg::rewrite::CurrentFiles::load(&stale)
                .await
                .unwrap();
            let b = f.batch(&stale, after, 20, 30).await;
            f.store.put_batch(&b).await.unwrap();
            c.run_round().await.unwrap();
            let rewrite = floe::iceberg::rewrite::Rewrite {
                merge_manifests: true,
                tasks: vec!["manifest-rewrite"],
                ..Default::default()
            };
            let id = uuid::Uuid::now_v7();
            let e = floe::iceberg::rewrite::commit_rewrite(
                &stale,
                &files,
                &rewrite,
                f.swap.as_ref(),
                id,
            )
            .await
            .expect_err("a rewrite of a stale snapshot is refused");
            assert_eq!(e.kind(), iceberg::ErrorKind::CatalogCommitConflicts, "{e}");
            let table = f.table().await;
            assert_eq!(table.metadata().snapshots().count(), 3);
            assert!(
                !stale
                    .file_io()
                    .exists(format!(
                        "{}/metadata/{id}-r0.avro",
                        stale.metadata().location()
                    ))
                    .await
                    .unwrap(),
                "the refused rewrite's manifest is deleted"
            );
            break;
        }
        let table = f.table().await;
        let b = f.batch(&table, after, round * 10, round * 10 + 10).await;
        f.store.put_batch(&b).await.unwrap();
        c.run_round().await.unwrap();
        after = Some((round * 10 + 9) as i64);
    }
    let table = f.table().await;
    let files = floe::iceberg::rewrite::CurrentFiles::load(&table)
        .await
        .unwrap();
    assert_eq!(files.manifests.len(), 3);
    let rewrite = floe::iceberg::rewrite::Rewrite {
        merge_manifests: true,
        tasks: vec!["manifest-rewrite"],
        ..Default::default()
    };
    let done = floe::iceberg::rewrite::commit_rewrite(
        &table,
        &files,
        &rewrite,
        f.swap.as_ref(),
        uuid::Uuid::now_v7(),
    )
    .await
    .unwrap();
    let table = f.table().await;
    assert_eq!(
        table.metadata().current_snapshot_id(),
        Some(done.snapshot_id)
    );
    assert_eq!(
        table
            .metadata()
            .current_snapshot()
            .unwrap()
            .summary()
            .operation,
        iceberg::spec::Operation::Replace
    );
    let now = floe::iceberg::rewrite::CurrentFiles::load(&table)
        .await
        .unwrap();
    assert_eq!(now.manifests.len(), 1);
    assert_eq!(common::race::records_at(&table, done.snapshot_id).await, 30);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replace_snapshot_commits_over_rest_and_a_stale_one_is_refused() {
    replace_over_rest(fixture().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replace_snapshot_commits_over_a_sigv4_signed_rest_catalog() {
    replace_over_rest(fixture_with(true).await).await;
}
