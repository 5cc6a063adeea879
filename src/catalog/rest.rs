//! The Iceberg REST catalog (`destination.catalog.kind = "rest"`): Polaris, Lakekeeper, Nessie,
//! Gravitino, Unity, or any server of the Apache Iceberg REST OpenAPI specification, through
//! iceberg-rust's `iceberg-catalog-rest`.
//!
//! The commit fence of [`crate::iceberg::fence::FencedCatalog`] holds unchanged: fast append sends its
//! `assert-ref-snapshot-id` requirement with `POST /v1/namespaces/{ns}/tables/{table}`, the server
//! checks it against its current metadata and answers 409 (`CommitFailedException`) when the
//! table moved, which the client reports as `ErrorKind::CatalogCommitConflicts`:
//!
//! ```text
//!  committer ──load_table──► GET  /v1/namespaces/ns/tables/t      (fence: still at s1?)
//!            ──update_table► POST /v1/namespaces/ns/tables/t
//!                            {requirements: [assert-ref-snapshot-id main = s1], updates: [...]}
//!                            ◄── 200 new metadata | 409 CommitFailedException → Conflict
//! ```
//!
//! Authentication: none, a bearer token, or OAuth2 client credentials exchanged at the token
//! endpoint. The client caches the token and does not refresh it before it expires;
//! [`RestCatalogClient`] fetches a new one when the server answers 401 or 419 and repeats the
//! call once (a commit is not repeated: the committer reconciles it). With `sigv4 = true` the
//! client talks through floe's in-process SigV4 signing relay ([`crate::catalog::sigv4`]).
//!
//! File IO: the server decides table locations. `s3://` locations are written through OpenDAL
//! with the `[aws]` region and S3 endpoint (path-style addressing when the endpoint is
//! overridden, as emulators need) and the configured SSE-KMS key; credentials the server vends in
//! `LoadTableResult.config` (or its `/v1/config` defaults and overrides) are used as given.
//! `file://` locations and plain absolute paths are written to the local file system
//! ([`RestStorageFactory`]).

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use async_trait::async_trait;
use aws_credential_types::provider::SharedCredentialsProvider;
use futures::stream::BoxStream;
use futures::StreamExt;
use hyper::body::Bytes;
use iceberg::io::{
    FileMetadata, FileRead, FileWrite, InputFile, LocalFsStorage, OutputFile, Storage,
    StorageConfig, StorageFactory,
};
use iceberg::table::Table;
use iceberg::{
    Catalog, CatalogBuilder, Namespace, NamespaceIdent, TableCommit, TableCreation, TableIdent,
    TableRequirement, TableUpdate,
};
use iceberg_catalog_rest::{
    RestCatalog, RestCatalogBuilder, REST_CATALOG_PROP_URI, REST_CATALOG_PROP_WAREHOUSE,
};
use iceberg_storage_opendal::OpenDalResolvingStorageFactory;

use crate::aws::AwsClients;
use crate::catalog::sigv4::{start_signing_relay, SigV4Signer, SigningRelay};
use crate::catalog::swap::TableSwap;
use crate::catalog::{CatalogError, REST_CONNECT_TIMEOUT, REST_REQUEST_TIMEOUT};
use crate::config::{AwsConfig, AwsService};
use crate::config::{RestAuth, RestCatalogConfig};

/// Header of the REST specification asking the server to vend storage credentials.
pub const ACCESS_DELEGATION_HEADER: &str = "X-Iceberg-Access-Delegation";

/// Name the REST catalog is given in iceberg-rust (a label; the server does not see it).
const CATALOG_LABEL: &str = "floe";

/// Opens the REST catalog of `config`; `aws` gives the region and S3 endpoint for `s3://` table
/// locations. No request is made here: the first catalog call fetches `/v1/config` (and the
/// OAuth2 token).
///
/// Errors: [`CatalogError::Unavailable`] when the HTTP client cannot be built.
pub async fn open_rest_catalog(
    config: &RestCatalogConfig,
    aws: &AwsClients,
) -> Result<Arc<dyn Catalog>, CatalogError> {
    Ok(
        open_rest_catalog_with(config, aws, aws.sdk_config().credentials_provider())
            .await?
            .0,
    )
}

/// [`open_rest_catalog`] signing with `credentials` when `config` asks for SigV4 (instead of
/// the `[aws]` credential chain; `None`: refused); returns the catalog and its [`RestSwap`] (the
/// same connection settings and credentials).
///
/// Errors: as [`open_rest_catalog`]; [`CatalogError::Refused`] when SigV4 has no region or no
/// credentials.
pub async fn open_rest_catalog_with(
    config: &RestCatalogConfig,
    aws: &AwsClients,
    credentials: Option<SharedCredentialsProvider>,
) -> Result<(Arc<dyn Catalog>, Arc<RestSwap>), CatalogError> {
    // reqwest's rustls needs a process-wide crypto provider: the aws-lc-rs one the AWS SDK
    // uses. Installing fails harmlessly when one is installed already.
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let mut client = reqwest::Client::builder()
        .connect_timeout(REST_CONNECT_TIMEOUT)
        .timeout(REST_REQUEST_TIMEOUT);
    if matches!(config.auth, RestAuth::SigV4 { .. }) {
        // The client talks to the signing relay on the loopback interface: never through an
        // HTTP(S)_PROXY of the environment (which would see the relay's secret). The relay's
        // own outbound client uses the proxy settings.
        client = client.no_proxy();
    }
    let client = client.build().map_err(|e| {
        CatalogError::Unavailable(iceberg::Error::new(
            iceberg::ErrorKind::Unexpected,
            format!("rest catalog http client: {e}"),
        ))
    })?;
    let mut props = rest_props(config, aws.config(), aws.region());
    let relay = match &config.auth {
        RestAuth::SigV4 {
            signing_name,
            signing_region,
        } => {
            let region = signing_region.as_deref().or(aws.region());
            let relay = sigv4_relay(config, signing_name, region, credentials).await?;
            props.insert(REST_CATALOG_PROP_URI.to_string(), relay.base.clone());
            props.insert("token".to_string(), relay.secret.clone());
            Some(relay)
        }
        _ => None,
    };
    let swap_auth = match (&relay, &config.auth) {
        (Some(relay), _) => SwapAuth::Bearer(relay.secret.clone()),
        (None, RestAuth::None) | (None, RestAuth::SigV4 { .. }) => SwapAuth::None,
        (None, RestAuth::Token(token)) => SwapAuth::Bearer(token.value().to_string()),
        (None, RestAuth::OAuth2 { .. }) => SwapAuth::OAuth2 {
            endpoint: config
                .oauth2_server_uri
                .clone()
                .unwrap_or_else(|| format!("{}/v1/oauth/tokens", config.uri)),
            credential: props.get("credential").cloned().unwrap_or_default(),
            scope: config
                .scope
                .clone()
                .unwrap_or_else(|| "catalog".to_string()),
        },
    };
    let base = props
        .get(REST_CATALOG_PROP_URI)
        .cloned()
        .unwrap_or_else(|| config.uri.clone());
    let catalog = RestCatalogBuilder::default()
        .with_client(client.clone())
        .with_storage_factory(Arc::new(RestStorageFactory))
        .load(CATALOG_LABEL, props)
        .await?;
    let catalog = Arc::new(RestCatalogClient {
        inner: catalog,
        refreshes_token: matches!(config.auth, RestAuth::OAuth2 { .. }),
        _relay: relay,
    });
    let swap = Arc::new(RestSwap {
        http: client,
        base,
        warehouse: config.warehouse.clone(),
        vended_credentials: config.vended_credentials,
        auth: swap_auth,
        token: tokio::sync::Mutex::new(None),
        prefix: tokio::sync::OnceCell::new(),
        catalog: catalog.clone(),
    });
    Ok((catalog, swap))
}

/// How [`RestSwap`] authenticates.
enum SwapAuth {
    None,
    Bearer(String),
    OAuth2 {
        endpoint: String,
        /// `id:secret` or `secret`.
        credential: String,
        scope: String,
    },
}

/// The [`TableSwap`] of a REST catalog: `POST <uri>/v1/<prefix>/namespaces/<ns>/tables/<t>` with
/// a `CommitTableRequest` (`identifier`, `requirements`, `updates`: the Iceberg REST OpenAPI
/// specification, `updateTable`); the server checks the requirements and swaps the metadata
/// itself, answering 409 (`CommitFailedException`) when the table moved. `prefix` comes from
/// `GET /v1/config` (its `overrides`), the token from the configured one, the SigV4 relay's, or
/// the OAuth2 client-credentials exchange (fetched again once when refused with 401 or 419).
pub struct RestSwap {
    http: reqwest::Client,
    base: String,
    warehouse: Option<String>,
    vended_credentials: bool,
    auth: SwapAuth,
    token: tokio::sync::Mutex<Option<String>>,
    prefix: tokio::sync::OnceCell<Option<String>>,
    catalog: Arc<RestCatalogClient>,
}

fn rest_error(what: &str, e: impl std::fmt::Display) -> iceberg::Error {
    iceberg::Error::new(
        iceberg::ErrorKind::Unexpected,
        format!("rest catalog {what}: {e}"),
    )
}

/// `s` as one path segment (RFC 3986: unreserved characters kept, every other byte `%XX`).
fn path_segment(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

impl RestSwap {
    /// The bearer token to send (`None`: no `Authorization` header); with `renew`, a new one.
    async fn token(&self, renew: bool) -> iceberg::Result<Option<String>> {
        let (endpoint, credential, scope) = match &self.auth {
            SwapAuth::None => return Ok(None),
            SwapAuth::Bearer(t) => return Ok(Some(t.clone())),
            SwapAuth::OAuth2 {
                endpoint,
                credential,
                scope,
            } => (endpoint, credential, scope),
        };
        let mut cached = self.token.lock().await;
        if let (Some(t), false) = (cached.as_ref(), renew) {
            return Ok(Some(t.clone()));
        }
        let (id, secret) = credential
            .split_once(':')
            .map_or((None, credential.as_str()), |(i, s)| (Some(i), s));
        let mut form = vec![
            ("grant_type", "client_credentials"),
            ("client_secret", secret),
            ("scope", scope.as_str()),
        ];
        if let Some(id) = id {
            form.push(("client_id", id));
        }
        let body: String = form
            .iter()
            .map(|(k, v)| format!("{k}={}", path_segment(v)))
            .collect::<Vec<_>>()
            .join("&");
        let answer = self
            .http
            .post(endpoint)
            .header("content-type", "application/x-www-form-urlencoded")
            .body(body)
            .send()
            .await
            .map_err(|e| rest_error("oauth2 token", e))?;
        let status = answer.status();
        let bytes = answer
            .bytes()
            .await
            .map_err(|e| rest_error("oauth2 token", e))?;
        if !status.is_success() {
            return Err(rest_error("oauth2 token", format!("HTTP {status}")));
        }
        let v: serde_json::Value =
            serde_json::from_slice(&bytes).map_err(|e| rest_error("oauth2 token", e))?;
        let token = v["access_token"]
            .as_str()
            .ok_or_else(|| rest_error("oauth2 token", "no access_token in the answer"))?
            .to_string();
        *cached = Some(token.clone());
        Ok(Some(token))
    }

    /// The `prefix` of the server's `GET /v1/config` overrides, fetched once.
    async fn prefix(&self) -> iceberg::Result<Option<String>> {
        self.prefix
            .get_or_try_init(|| async {
                let mut url = format!("{}/v1/config", self.base);
                if let Some(w) = &self.warehouse {
                    url.push_str(&format!("?warehouse={}", path_segment(w)));
                }
                let (status, body) = self.send(reqwest::Method::GET, &url, None).await?;
                if !status.is_success() {
                    return Err(rest_error("config", format!("HTTP {status}")));
                }
                let v: serde_json::Value =
                    serde_json::from_slice(&body).map_err(|e| rest_error("config", e))?;
                Ok(v["overrides"]["prefix"]
                    .as_str()
                    .or(v["defaults"]["prefix"].as_str())
                    .filter(|p| !p.is_empty())
                    .map(str::to_string))
            })
            .await
            .cloned()
    }

    /// Sends one request, renewing an OAuth2 token once when the server refuses it.
    async fn send(
        &self,
        method: reqwest::Method,
        url: &str,
        body: Option<&[u8]>,
    ) -> iceberg::Result<(reqwest::StatusCode, Vec<u8>)> {
        let mut renew = false;
        loop {
            let mut req = self.http.request(method.clone(), url);
            if let Some(token) = self.token(renew).await? {
                req = req.bearer_auth(token);
            }
            if self.vended_credentials {
                req = req.header(ACCESS_DELEGATION_HEADER, "vended-credentials");
            }
            if let Some(body) = body {
                req = req
                    .header("content-type", "application/json")
                    .body(body.to_vec());
            }
            let answer = req.send().await.map_err(|e| rest_error("request", e))?;
            let status = answer.status();
            let refused = status.as_u16() == 401 || status.as_u16() == 419;
            if refused && !renew && matches!(self.auth, SwapAuth::OAuth2 { .. }) {
                renew = true;
                continue;
            }
            let bytes = answer.bytes().await.map_err(|e| rest_error("request", e))?;
            return Ok((status, bytes.to_vec()));
        }
    }
}

#[async_trait]
impl TableSwap for RestSwap {
    async fn swap(
        &self,
        ident: &TableIdent,
        requirements: Vec<TableRequirement>,
        updates: Vec<TableUpdate>,
    ) -> iceberg::Result<Table> {
        let prefix = self.prefix().await?;
        let namespace = ident
            .namespace()
            .as_ref()
            .iter()
            .map(|p| path_segment(p))
            .collect::<Vec<_>>()
            .join("%1F");
        let url = format!(
            "{}/v1/{}namespaces/{namespace}/tables/{}",
            self.base,
            prefix.map(|p| format!("{p}/")).unwrap_or_default(),
            path_segment(ident.name())
        );
        let body = serde_json::to_vec(&serde_json::json!({
            "identifier": {"namespace": ident.namespace().as_ref(), "name": ident.name()},
            "requirements": requirements,
            "updates": updates,
        }))
        .map_err(|e| rest_error("commit body", e))?;
        let (status, answer) = self.send(reqwest::Method::POST, &url, Some(&body)).await?;
        let message = || {
            serde_json::from_slice::<serde_json::Value>(&answer)
                .ok()
                .and_then(|v| v["error"]["message"].as_str().map(str::to_string))
                .unwrap_or_else(|| String::from_utf8_lossy(&answer).into_owned())
        };
        match status.as_u16() {
            200 => self.catalog.load_table(ident).await,
            409 => Err(iceberg::Error::new(
                iceberg::ErrorKind::CatalogCommitConflicts,
                format!("table {ident}: {}", message()),
            )),
            404 => Err(iceberg::Error::new(
                iceberg::ErrorKind::TableNotFound,
                format!("table {ident}: {}", message()),
            )),
            // 500, 502, 504 and the rest: the commit may or may not have landed.
            _ => Err(rest_error(
                "commit",
                format!("HTTP {status} (outcome unknown): {}", message()),
            )),
        }
    }

    fn client_writes_metadata(&self) -> bool {
        false
    }
}

/// Starts the SigV4 signing relay of `config` ([`crate::catalog::sigv4`]) signing for
/// `signing_name` in `signing_region` with `credentials`.
///
/// Errors: [`CatalogError::Refused`] when there is no region or no credentials provider;
/// [`CatalogError::Unavailable`] when the loopback port cannot be bound.
async fn sigv4_relay(
    config: &RestCatalogConfig,
    signing_name: &str,
    signing_region: Option<&str>,
    credentials: Option<SharedCredentialsProvider>,
) -> Result<SigningRelay, CatalogError> {
    let Some(region) = signing_region else {
        return Err(CatalogError::Refused {
            key: "signing_region",
            message: format!(
                "rest catalog {}: sigv4 needs a signing region: set signing_region, or the [aws] region (or AWS_REGION)",
                config.uri
            ),
        });
    };
    let Some(provider) = credentials else {
        return Err(CatalogError::Refused {
            key: "sigv4",
            message: format!(
                "rest catalog {}: sigv4 needs AWS credentials, and no credential chain is configured",
                config.uri
            ),
        });
    };
    let signer = SigV4Signer::new(signing_name, region, provider);
    start_signing_relay(&config.uri, signer).await.map_err(|e| {
        CatalogError::Unavailable(iceberg::Error::new(
            iceberg::ErrorKind::Unexpected,
            format!("rest catalog sigv4 relay: {e}"),
        ))
    })
}

/// iceberg-rust's REST catalog, fetching a new OAuth2 token when the server no longer accepts
/// the cached one (HTTP 401, or 419 "authentication timeout" of the REST specification) and
/// repeating the call once. A refused `update_table` is not repeated (the commit cannot be
/// rebuilt here): its error reaches the committer, which reconciles it against the table, and
/// the next commit uses the new token. Its `Debug` output holds no token or secret.
pub struct RestCatalogClient {
    inner: RestCatalog,
    refreshes_token: bool,
    /// The SigV4 signing relay the client talks through (`sigv4 = true`); stops when dropped.
    _relay: Option<SigningRelay>,
}

impl std::fmt::Debug for RestCatalogClient {
    /// Leaves the inner catalog out: its properties hold the token (or the relay's secret).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RestCatalogClient")
            .field("refreshes_token", &self.refreshes_token)
            .field("relay", &self._relay)
            .finish_non_exhaustive()
    }
}

/// Whether `e` is the REST server refusing the request's credentials.
fn is_auth_refused(e: &iceberg::Error) -> bool {
    let shown = e.to_string();
    shown.contains("status: 401 ") || shown.contains("status: 419 ")
}

impl RestCatalogClient {
    /// Runs `call`; when the token is refused and can be renewed, renews it and runs `call`
    /// again.
    async fn with_token<T, F, Fut>(&self, call: F) -> iceberg::Result<T>
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = iceberg::Result<T>>,
    {
        match call().await {
            Err(e) if self.refreshes_token && is_auth_refused(&e) => {
                tracing::info!("rest catalog refused the oauth2 token, fetching a new one");
                self.inner.regenerate_token().await?;
                call().await
            }
            other => other,
        }
    }
}

#[async_trait]
impl Catalog for RestCatalogClient {
    async fn list_namespaces(
        &self,
        parent: Option<&NamespaceIdent>,
    ) -> iceberg::Result<Vec<NamespaceIdent>> {
        self.with_token(|| self.inner.list_namespaces(parent)).await
    }
    async fn create_namespace(
        &self,
        namespace: &NamespaceIdent,
        properties: HashMap<String, String>,
    ) -> iceberg::Result<Namespace> {
        self.with_token(|| self.inner.create_namespace(namespace, properties.clone()))
            .await
    }
    async fn get_namespace(&self, namespace: &NamespaceIdent) -> iceberg::Result<Namespace> {
        self.with_token(|| self.inner.get_namespace(namespace))
            .await
    }
    async fn namespace_exists(&self, namespace: &NamespaceIdent) -> iceberg::Result<bool> {
        self.with_token(|| self.inner.namespace_exists(namespace))
            .await
    }
    async fn update_namespace(
        &self,
        namespace: &NamespaceIdent,
        properties: HashMap<String, String>,
    ) -> iceberg::Result<()> {
        self.with_token(|| self.inner.update_namespace(namespace, properties.clone()))
            .await
    }
    async fn drop_namespace(&self, namespace: &NamespaceIdent) -> iceberg::Result<()> {
        self.with_token(|| self.inner.drop_namespace(namespace))
            .await
    }
    async fn list_tables(&self, namespace: &NamespaceIdent) -> iceberg::Result<Vec<TableIdent>> {
        self.with_token(|| self.inner.list_tables(namespace)).await
    }
    async fn create_table(
        &self,
        namespace: &NamespaceIdent,
        creation: TableCreation,
    ) -> iceberg::Result<Table> {
        // `TableCreation` is not `Clone`: each attempt gets a copy of its fields.
        let copy = || TableCreation {
            name: creation.name.clone(),
            location: creation.location.clone(),
            schema: creation.schema.clone(),
            partition_spec: creation.partition_spec.clone(),
            sort_order: creation.sort_order.clone(),
            properties: creation.properties.clone(),
            format_version: creation.format_version,
        };
        self.with_token(|| self.inner.create_table(namespace, copy()))
            .await
    }
    async fn load_table(&self, table: &TableIdent) -> iceberg::Result<Table> {
        self.with_token(|| self.inner.load_table(table)).await
    }
    async fn drop_table(&self, table: &TableIdent) -> iceberg::Result<()> {
        self.with_token(|| self.inner.drop_table(table)).await
    }
    async fn purge_table(&self, table: &TableIdent) -> iceberg::Result<()> {
        self.with_token(|| self.inner.purge_table(table)).await
    }
    async fn table_exists(&self, table: &TableIdent) -> iceberg::Result<bool> {
        self.with_token(|| self.inner.table_exists(table)).await
    }
    async fn rename_table(&self, src: &TableIdent, dest: &TableIdent) -> iceberg::Result<()> {
        self.with_token(|| self.inner.rename_table(src, dest)).await
    }
    async fn register_table(
        &self,
        table: &TableIdent,
        metadata_location: String,
    ) -> iceberg::Result<Table> {
        self.with_token(|| self.inner.register_table(table, metadata_location.clone()))
            .await
    }
    async fn update_table(&self, commit: TableCommit) -> iceberg::Result<Table> {
        let result = self.inner.update_table(commit).await;
        if let Err(e) = &result {
            if self.refreshes_token && is_auth_refused(e) {
                tracing::info!(
                    "rest catalog refused the oauth2 token on a commit, fetching a new one"
                );
                self.inner.regenerate_token().await?;
            }
        }
        result
    }
}

/// The iceberg-catalog-rest properties of `config`: connection and authentication, then the
/// S3 file IO settings that floe decides (region, endpoint, SSE-KMS). A property given here wins
/// over the same property vended by the server.
pub fn rest_props(
    config: &RestCatalogConfig,
    aws: &AwsConfig,
    region: Option<&str>,
) -> HashMap<String, String> {
    let mut props = HashMap::from([(REST_CATALOG_PROP_URI.to_string(), config.uri.clone())]);
    if let Some(warehouse) = &config.warehouse {
        props.insert(REST_CATALOG_PROP_WAREHOUSE.to_string(), warehouse.clone());
    }
    match &config.auth {
        // SigV4: the signing relay's address and secret replace `uri` and `token` when the
        // catalog opens.
        RestAuth::None | RestAuth::SigV4 { .. } => {}
        RestAuth::Token(token) => {
            props.insert("token".to_string(), token.value().to_string());
        }
        RestAuth::OAuth2 {
            client_id,
            client_secret,
        } => {
            let credential = match client_id {
                Some(id) => format!("{id}:{}", client_secret.value()),
                None => client_secret.value().to_string(),
            };
            props.insert("credential".to_string(), credential);
        }
    }
    if let Some(uri) = &config.oauth2_server_uri {
        props.insert("oauth2-server-uri".to_string(), uri.clone());
    }
    if let Some(scope) = &config.scope {
        props.insert("scope".to_string(), scope.clone());
    }
    if config.vended_credentials {
        props.insert(
            format!("header.{ACCESS_DELEGATION_HEADER}"),
            "vended-credentials".to_string(),
        );
    }
    if let Some(region) = region {
        props.insert(iceberg::io::S3_REGION.to_string(), region.to_string());
    }
    if let Some(endpoint) = aws.endpoint(AwsService::S3) {
        props.insert(iceberg::io::S3_ENDPOINT.to_string(), endpoint.to_string());
        props.insert(
            iceberg::io::S3_PATH_STYLE_ACCESS.to_string(),
            "true".to_string(),
        );
    }
    if let Some(key) = &config.kms_key_arn {
        props.insert(iceberg::io::S3_SSE_TYPE.to_string(), "kms".to_string());
        props.insert(iceberg::io::S3_SSE_KEY.to_string(), key.clone());
    }
    props
}

/// The file IO of REST catalog tables, whose locations the server chooses: URLs (`s3://`,
/// `file://`, …) through OpenDAL's resolving storage, plain absolute paths (`/warehouse/…`, as
/// servers with a local warehouse may answer) through iceberg's local file system storage.
#[derive(Debug, Clone, Copy, Default, serde::Serialize, serde::Deserialize)]
pub struct RestStorageFactory;

#[typetag::serde]
impl StorageFactory for RestStorageFactory {
    fn build(&self, config: &StorageConfig) -> iceberg::Result<Arc<dyn Storage>> {
        Ok(Arc::new(RestStorage {
            props: config.props().clone(),
            urls: OnceLock::new(),
            local: LocalFsStorage::new(),
        }))
    }
}

/// See [`RestStorageFactory`]. Serialized as its properties; the OpenDAL storage is built on
/// first use of a URL.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct RestStorage {
    props: HashMap<String, String>,
    #[serde(skip)]
    urls: OnceLock<Arc<dyn Storage>>,
    #[serde(skip)]
    local: LocalFsStorage,
}

impl RestStorage {
    /// The storage serving `path`: a path without a scheme is local.
    fn resolve(&self, path: &str) -> iceberg::Result<&dyn Storage> {
        if path.starts_with('/') {
            Ok(&self.local)
        } else {
            self.urls()
        }
    }

    /// The OpenDAL resolving storage serving URLs.
    fn urls(&self) -> iceberg::Result<&dyn Storage> {
        if let Some(storage) = self.urls.get() {
            return Ok(storage.as_ref());
        }
        let storage = OpenDalResolvingStorageFactory::new()
            .build(&StorageConfig::from_props(self.props.clone()))?;
        Ok(self.urls.get_or_init(|| storage).as_ref())
    }
}

#[async_trait]
#[typetag::serde]
impl Storage for RestStorage {
    async fn exists(&self, path: &str) -> iceberg::Result<bool> {
        self.resolve(path)?.exists(path).await
    }
    async fn metadata(&self, path: &str) -> iceberg::Result<FileMetadata> {
        self.resolve(path)?.metadata(path).await
    }
    async fn read(&self, path: &str) -> iceberg::Result<Bytes> {
        self.resolve(path)?.read(path).await
    }
    async fn reader(&self, path: &str) -> iceberg::Result<Box<dyn FileRead>> {
        self.resolve(path)?.reader(path).await
    }
    async fn write(&self, path: &str, bs: Bytes) -> iceberg::Result<()> {
        self.resolve(path)?.write(path, bs).await
    }
    async fn writer(&self, path: &str) -> iceberg::Result<Box<dyn FileWrite>> {
        self.resolve(path)?.writer(path).await
    }
    async fn delete(&self, path: &str) -> iceberg::Result<()> {
        self.resolve(path)?.delete(path).await
    }
    async fn delete_prefix(&self, path: &str) -> iceberg::Result<()> {
        self.resolve(path)?.delete_prefix(path).await
    }
    async fn delete_stream(&self, paths: BoxStream<'static, String>) -> iceberg::Result<()> {
        let paths: Vec<String> = paths.collect().await;
        let (local, urls): (Vec<String>, Vec<String>) =
            paths.into_iter().partition(|p| p.starts_with('/'));
        for (group, storage) in [(local, &self.local as &dyn Storage), (urls, self.urls()?)] {
            if !group.is_empty() {
                storage
                    .delete_stream(futures::stream::iter(group).boxed())
                    .await?;
            }
        }
        Ok(())
    }
    fn new_input(&self, path: &str) -> iceberg::Result<InputFile> {
        self.resolve(path)?.new_input(path)
    }
    fn new_output(&self, path: &str) -> iceberg::Result<OutputFile> {
        self.resolve(path)?.new_output(path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::PropertyValue;

    fn config(auth: RestAuth) -> RestCatalogConfig {
        RestCatalogConfig {
            uri: "https://polaris.example.com/api/catalog".into(),
            warehouse: Some("lake".into()),
            auth,
            oauth2_server_uri: None,
            scope: Some("PRINCIPAL_ROLE:ALL".into()),
            kms_key_arn: None,
            vended_credentials: false,
        }
    }

    #[test]
    fn client_credentials_become_the_credential_property() {
        let secret = PropertyValue::FromEnv {
            var: "S".into(),
            value: "s3cr3t".into(),
        };
        let props = rest_props(
            &config(RestAuth::OAuth2 {
                client_id: Some("floe".into()),
                client_secret: secret,
            }),
            &AwsConfig::default(),
            None,
        );
        assert_eq!(props["credential"], "floe:s3cr3t");
        assert_eq!(props["scope"], "PRINCIPAL_ROLE:ALL");
        assert_eq!(props["warehouse"], "lake");
        assert!(!props.contains_key("token"));
        assert!(!props.contains_key(iceberg::io::S3_ENDPOINT));
        assert!(!props.contains_key("header.X-Iceberg-Access-Delegation"));
    }

    #[test]
    fn aws_endpoint_region_and_kms_key_reach_the_s3_file_io() {
        let aws = AwsConfig {
            endpoint_url: Some("http://127.0.0.1:5056".into()),
            ..AwsConfig::default()
        };
        let mut c = config(RestAuth::None);
        c.kms_key_arn = Some("arn:aws:kms:us-east-1:123456789012:key/k".into());
        c.vended_credentials = true;
        let props = rest_props(&c, &aws, Some("us-east-1"));
        assert_eq!(props[iceberg::io::S3_ENDPOINT], "http://127.0.0.1:5056");
        assert_eq!(props[iceberg::io::S3_PATH_STYLE_ACCESS], "true");
        assert_eq!(props[iceberg::io::S3_REGION], "us-east-1");
        assert_eq!(props[iceberg::io::S3_SSE_TYPE], "kms");
        assert!(!props.contains_key("credential") && !props.contains_key("token"));
        assert_eq!(
            props["header.X-Iceberg-Access-Delegation"],
            "vended-credentials"
        );
    }
}
