//! TEST FIXTURE: a small Iceberg REST catalog server, for floe's REST catalog tests only.
//!
//! No REST catalog server installs here from the package registries, so the tests carry this
//! one. It serves the endpoints of the Apache Iceberg REST OpenAPI specification
//! (open-api/rest-catalog-open-api.yaml) that floe (iceberg-catalog-rest) and PyIceberg's
//! `RestCatalog` use, backed by iceberg-rust's SQL catalog (SQLite) with a local `file://`
//! warehouse, on `127.0.0.1:<random port>`:
//!
//! ```text
//!  GET  /v1/config                                  {defaults, overrides}
//!  POST /v1/oauth/tokens                            client_credentials → access_token
//!  GET|POST /v1/namespaces                          list | create (409 if it exists)
//!  GET|HEAD|DELETE /v1/namespaces/{ns}              load | exists (204/404) | drop
//!  GET|POST /v1/namespaces/{ns}/tables              list | create (LoadTableResult)
//!  GET|HEAD|DELETE /v1/namespaces/{ns}/tables/{t}   load | exists | drop
//!  POST /v1/namespaces/{ns}/tables/{t}              commit {requirements, updates}
//! ```
//!
//! Commits are enforced as the specification says: every requirement (`assert-ref-snapshot-id`,
//! `assert-table-uuid`, `assert-current-schema-id`, …) is checked against the current metadata
//! under a lock, and the metadata pointer is swapped with a compare-and-swap on the SQL catalog's
//! row (`UPDATE … WHERE metadata_location = <current>`). A failed requirement or a lost swap is
//! answered `409` with a `CommitFailedException` error model:
//! `{"error": {"message": "...", "type": "CommitFailedException", "code": 409}}`.
//!
//! Optionally every request (but `/v1/config` and `/v1/oauth/tokens`) must carry
//! `Authorization: Bearer <token>` ([`RestCatalogServer::start_with_auth`]); the token is the
//! configured one or the one the OAuth2 endpoint hands out for the configured client credentials.
//!
//! Or, as the AWS Iceberg REST endpoints do, every request must be signed with AWS Signature
//! Version 4 ([`RestCatalogServer::start_sigv4`], checked by [`sigv4::verify`]): the catalog is
//! then served under `/iceberg` (`uri` = `http://127.0.0.1:<port>/iceberg`, like
//! `https://s3tables.REGION.amazonaws.com/iceberg`), and an unsigned or wrongly signed request is
//! answered 403.
//!
//! Not implemented (answered 404/405): views, rename, register, metrics reports, pagination,
//! staged creates, multi-table transactions.

#![allow(dead_code)]

pub mod sigv4;

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use iceberg::io::LocalFsStorageFactory;
use iceberg::{
    Catalog, CatalogBuilder, Error, ErrorKind, MetadataLocation, NamespaceIdent, TableCreation,
    TableIdent,
};
use iceberg_catalog_rest::{
    CommitTableRequest, CommitTableResponse, CreateNamespaceRequest, CreateTableRequest,
    ListNamespaceResponse, ListTablesResponse, LoadTableResult, NamespaceResponse,
};
use iceberg_catalog_sql::{
    SqlCatalog, SqlCatalogBuilder, SQL_CATALOG_PROP_URI, SQL_CATALOG_PROP_WAREHOUSE,
};
use serde_json::json;
pub use sigv4::FixtureSigV4;

/// Name of the fixture's SQL catalog (rows of its SQLite file are keyed by it).
pub const CATALOG_NAME: &str = "rest_fixture";

/// OAuth2 client credentials the fixture accepts, and the token it grants for them.
#[derive(Debug, Clone)]
pub struct FixtureAuth {
    /// A bearer token accepted as is.
    pub token: String,
    /// Client id and secret exchanged for `token` at `/v1/oauth/tokens`.
    pub client: Option<(String, String)>,
}

/// Another warehouse than the default local `file://` one: an `s3://` location, where the
/// fixture writes metadata through OpenDAL with `props` and vends `props` in the
/// `LoadTableResult.config` of clients sending `X-Iceberg-Access-Delegation: vended-credentials`
/// (as a catalog vending storage settings and credentials does); or a
/// plain local path (table locations without a scheme).
#[derive(Debug, Clone)]
pub struct WarehouseLocation {
    /// `s3://bucket/prefix`, or an absolute local path.
    pub location: String,
    /// `s3.endpoint`, `s3.region`, `s3.access-key-id`, … (iceberg's FileIO property names).
    pub props: HashMap<String, String>,
}

/// A running fixture server; it stops when dropped.
pub struct RestCatalogServer {
    /// `http://127.0.0.1:<port>` (the catalog `uri`).
    pub uri: String,
    /// The `file://` warehouse under which tables are written.
    pub warehouse: String,
    /// The SQLite file of the backing SQL catalog.
    pub database: PathBuf,
    state: Arc<State>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for RestCatalogServer {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

struct State {
    catalog: SqlCatalog,
    pool: sqlx::SqlitePool,
    commit_lock: tokio::sync::Mutex<()>,
    auth: std::sync::Mutex<Option<FixtureAuth>>,
    sigv4: Option<FixtureSigV4>,
    signed: AtomicUsize,
    refusals: std::sync::Mutex<Vec<String>>,
    vended: HashMap<String, String>,
    commits: AtomicUsize,
    conflicts: AtomicUsize,
    hold: CommitHold,
}

/// Holds the next commit request before it is checked, so a test can move the table under it
/// (a deterministic interleaving of a race between a fence check and the commit).
#[derive(Clone, Default)]
pub struct CommitHold {
    armed: Arc<std::sync::atomic::AtomicBool>,
    arrived: Arc<tokio::sync::Notify>,
    release: Arc<tokio::sync::Notify>,
}

impl CommitHold {
    /// Waits until the held commit request has arrived.
    pub async fn arrived(&self) {
        self.arrived.notified().await;
    }

    /// Lets the held commit request proceed.
    pub fn release(&self) {
        self.release.notify_one();
    }

    async fn pass(&self) {
        if self.armed.swap(false, Ordering::SeqCst) {
            self.arrived.notify_one();
            self.release.notified().await;
        }
    }
}

impl RestCatalogServer {
    /// Starts a server without authentication, its catalog and warehouse under `dir`.
    pub fn start(dir: &Path) -> RestCatalogServer {
        Self::start_with_auth(dir, None)
    }

    /// Starts a server requiring `auth` (when given) on every catalog request. The server runs
    /// on its own thread and runtime, so that tests may block (waiting on processes) meanwhile.
    pub fn start_with_auth(dir: &Path, auth: Option<FixtureAuth>) -> RestCatalogServer {
        Self::start_with(dir, auth, None)
    }

    /// Starts a server requiring `auth` (when given) whose tables live in `warehouse` (when
    /// given; otherwise in a local `file://` warehouse under `dir`).
    pub fn start_with(
        dir: &Path,
        auth: Option<FixtureAuth>,
        warehouse: Option<WarehouseLocation>,
    ) -> RestCatalogServer {
        Self::start_inner(dir, auth, warehouse, None)
    }

    /// Starts a server under `/iceberg` that accepts requests signed with SigV4 for `sigv4`, and
    /// (for the test's own checks) requests with `token`, if given, as their bearer token.
    pub fn start_sigv4(dir: &Path, sigv4: FixtureSigV4, token: Option<&str>) -> RestCatalogServer {
        let auth = token.map(|token| FixtureAuth {
            token: token.to_owned(),
            client: None,
        });
        Self::start_inner(dir, auth, None, Some(sigv4))
    }

    fn start_inner(
        dir: &Path,
        auth: Option<FixtureAuth>,
        warehouse: Option<WarehouseLocation>,
        sigv4: Option<FixtureSigV4>,
    ) -> RestCatalogServer {
        let prefix = if sigv4.is_some() { "/iceberg" } else { "" };
        std::fs::create_dir_all(dir.join("warehouse")).unwrap();
        let database = dir.join("catalog.sqlite");
        let s3 = warehouse;
        let warehouse = match &s3 {
            Some(s3) => s3.location.clone(),
            None => format!(
                "file://{}",
                std::fs::canonicalize(dir.join("warehouse"))
                    .unwrap()
                    .display()
            ),
        };
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let (db, wh) = (database.clone(), warehouse.clone());
        let thread = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async move {
                let state = Arc::new(State::open(&db, &wh, auth, s3, sigv4).await);
                let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
                let addr = listener.local_addr().unwrap();
                ready_tx.send((addr, state.clone())).unwrap();
                tokio::select! {
                    _ = serve(listener, state) => {}
                    _ = stop_rx => {}
                }
            });
        });
        let (addr, state): (SocketAddr, Arc<State>) = ready_rx.recv().expect("fixture starts");
        RestCatalogServer {
            uri: format!("http://{addr}{prefix}"),
            warehouse,
            database,
            state,
            stop: Some(stop_tx),
            thread: Some(thread),
        }
    }

    /// Holds the next commit request until [`CommitHold::release`].
    pub fn hold_next_commit(&self) -> CommitHold {
        self.state.hold.armed.store(true, Ordering::SeqCst);
        self.state.hold.clone()
    }

    /// Replaces the accepted token (as when tokens expire): requests with the old one get 401,
    /// the OAuth2 endpoint hands out the new one.
    pub fn rotate_token(&self, token: &str) {
        if let Some(auth) = self.state.auth.lock().unwrap().as_mut() {
            auth.token = token.to_owned();
        }
    }

    /// Commits the server accepted.
    pub fn commits(&self) -> usize {
        self.state.commits.load(Ordering::SeqCst)
    }

    /// Requests whose SigV4 signature the server verified.
    pub fn signed_requests(&self) -> usize {
        self.state.signed.load(Ordering::SeqCst)
    }

    /// The reasons of the last requests refused for their SigV4 signature (newest last).
    pub fn signature_refusals(&self) -> Vec<String> {
        self.state.refusals.lock().unwrap().clone()
    }

    /// Commits the server refused with 409 (a failed requirement or a lost swap).
    pub fn conflicts(&self) -> usize {
        self.state.conflicts.load(Ordering::SeqCst)
    }
}

impl State {
    async fn open(
        database: &Path,
        warehouse: &str,
        auth: Option<FixtureAuth>,
        s3: Option<WarehouseLocation>,
        sigv4: Option<FixtureSigV4>,
    ) -> State {
        let url = format!("sqlite:{}?mode=rwc", database.display());
        let vended = s3.map(|s3| s3.props).unwrap_or_default();
        let mut props = vended.clone();
        props.insert(SQL_CATALOG_PROP_URI.to_string(), url.clone());
        props.insert(
            SQL_CATALOG_PROP_WAREHOUSE.to_string(),
            warehouse.to_string(),
        );
        let builder = SqlCatalogBuilder::default();
        let builder = if warehouse.starts_with("s3://") {
            builder.with_storage_factory(Arc::new(
                iceberg_storage_opendal::OpenDalStorageFactory::S3 {
                    customized_credential_load: None,
                },
            ))
        } else {
            builder.with_storage_factory(Arc::new(LocalFsStorageFactory))
        };
        let catalog = builder
            .load(CATALOG_NAME, props)
            .await
            .expect("open the fixture's SQL catalog");
        let pool = sqlx::SqlitePool::connect(&url).await.expect("open SQLite");
        State {
            catalog,
            pool,
            commit_lock: tokio::sync::Mutex::new(()),
            auth: std::sync::Mutex::new(auth),
            sigv4,
            signed: AtomicUsize::new(0),
            refusals: std::sync::Mutex::new(Vec::new()),
            vended,
            commits: AtomicUsize::new(0),
            conflicts: AtomicUsize::new(0),
            hold: CommitHold::default(),
        }
    }
}

async fn serve(listener: tokio::net::TcpListener, state: Arc<State>) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let state = state.clone();
        tokio::spawn(async move {
            let service = service_fn(move |req| {
                let state = state.clone();
                async move { Ok::<_, Infallible>(handle(&state, req).await) }
            });
            let _ = http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

/// An error answered with the specification's `ErrorModel`.
struct ApiError {
    status: StatusCode,
    kind: &'static str,
    message: String,
}

impl ApiError {
    fn new(status: StatusCode, kind: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            kind,
            message: message.into(),
        }
    }

    fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "BadRequestException", message)
    }

    fn commit_failed(message: impl Into<String>) -> Self {
        Self::new(StatusCode::CONFLICT, "CommitFailedException", message)
    }
}

impl From<Error> for ApiError {
    fn from(e: Error) -> Self {
        let (status, kind) = match e.kind() {
            ErrorKind::NamespaceNotFound => (StatusCode::NOT_FOUND, "NoSuchNamespaceException"),
            ErrorKind::TableNotFound => (StatusCode::NOT_FOUND, "NoSuchTableException"),
            ErrorKind::NamespaceAlreadyExists | ErrorKind::TableAlreadyExists => {
                (StatusCode::CONFLICT, "AlreadyExistsException")
            }
            ErrorKind::DataInvalid => (StatusCode::BAD_REQUEST, "BadRequestException"),
            _ => (StatusCode::INTERNAL_SERVER_ERROR, "ServerErrorException"),
        };
        ApiError::new(status, kind, e.to_string())
    }
}

type Answer = Result<Response<Full<Bytes>>, ApiError>;

fn json_response<T: serde::Serialize>(body: &T) -> Answer {
    Ok(Response::builder()
        .status(StatusCode::OK)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(serde_json::to_vec(body).unwrap())))
        .unwrap())
}

fn no_content() -> Answer {
    Ok(Response::builder()
        .status(StatusCode::NO_CONTENT)
        .body(Full::new(Bytes::new()))
        .unwrap())
}

async fn handle(state: &State, req: Request<Incoming>) -> Response<Full<Bytes>> {
    let method = req.method().clone();
    let (parts, body) = req.into_parts();
    let answer = match body.collect().await {
        Ok(body) => route(state, Request::from_parts(parts, body.to_bytes())).await,
        Err(e) => Err(ApiError::bad_request(e.to_string())),
    };
    match answer {
        Ok(response) => response,
        Err(e) => {
            let body = if method == Method::HEAD {
                Bytes::new()
            } else {
                Bytes::from(
                    json!({"error": {"message": e.message, "type": e.kind, "code": e.status.as_u16()}})
                        .to_string(),
                )
            };
            Response::builder()
                .status(e.status)
                .header("content-type", "application/json")
                .body(Full::new(body))
                .unwrap()
        }
    }
}

/// Percent-decodes one path segment or form value (`form`: `+` is a space).
fn decode_with(segment: &str, form: bool) -> String {
    let bytes = segment.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            if let Ok(b) = u8::from_str_radix(&segment[i + 1..i + 3], 16) {
                out.push(b);
                i += 3;
                continue;
            }
        }
        out.push(if form && bytes[i] == b'+' {
            b' '
        } else {
            bytes[i]
        });
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn decode(segment: &str) -> String {
    decode_with(segment, false)
}

/// A namespace path segment: levels separated by the unit separator (0x1F).
fn namespace(segment: &str) -> Result<NamespaceIdent, ApiError> {
    let levels: Vec<String> = decode(segment).split('\u{1f}').map(str::to_owned).collect();
    NamespaceIdent::from_vec(levels).map_err(|e| ApiError::bad_request(e.to_string()))
}

fn body<T: serde::de::DeserializeOwned>(req: Request<Bytes>) -> Result<T, ApiError> {
    serde_json::from_slice(req.body())
        .map_err(|e| ApiError::bad_request(format!("malformed request body: {e}")))
}

fn authorized(state: &State, req: &Request<Bytes>) -> Result<(), ApiError> {
    if let Some(expected) = &state.sigv4 {
        let token = state
            .auth
            .lock()
            .unwrap()
            .as_ref()
            .map(|a| format!("Bearer {}", a.token));
        let given = req
            .headers()
            .get("authorization")
            .and_then(|v| v.to_str().ok());
        if token.is_some() && given == token.as_deref() {
            return Ok(());
        }
        return match sigv4::verify(expected, req) {
            Ok(()) => {
                state.signed.fetch_add(1, Ordering::SeqCst);
                Ok(())
            }
            Err(why) => {
                state.refusals.lock().unwrap().push(why.clone());
                Err(ApiError::new(
                    StatusCode::FORBIDDEN,
                    "NotAuthorizedException",
                    &why,
                ))
            }
        };
    }
    let Some(expected) = state
        .auth
        .lock()
        .unwrap()
        .as_ref()
        .map(|a| format!("Bearer {}", a.token))
    else {
        return Ok(());
    };
    match req
        .headers()
        .get("authorization")
        .and_then(|v| v.to_str().ok())
    {
        Some(given) if given == expected => Ok(()),
        _ => Err(ApiError::new(
            StatusCode::UNAUTHORIZED,
            "NotAuthorizedException",
            "missing or wrong bearer token",
        )),
    }
}

async fn route(state: &State, req: Request<Bytes>) -> Answer {
    let mut path = req.uri().path().to_owned();
    if state.sigv4.is_some() {
        // Signed everywhere, as on AWS, and served under /iceberg.
        authorized(state, &req)?;
        path = match path.strip_prefix("/iceberg/") {
            Some(rest) => format!("/{rest}"),
            None => {
                return Err(ApiError::new(
                    StatusCode::NOT_FOUND,
                    "NotFoundException",
                    "not under /iceberg",
                ))
            }
        };
    }
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    let method = req.method().clone();
    // Storage settings are vended only to clients that ask (X-Iceberg-Access-Delegation).
    let vend = req
        .headers()
        .get("x-iceberg-access-delegation")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.contains("vended-credentials"));
    match (method.clone(), segments.as_slice()) {
        (Method::GET, ["v1", "config"]) => json_response(&json!({"defaults": {}, "overrides": {}})),
        (Method::POST, ["v1", "oauth", "tokens"]) => oauth_token(state, req).await,
        _ => {
            if state.sigv4.is_none() {
                authorized(state, &req)?;
            }
            match (method, segments.as_slice()) {
                (Method::GET, ["v1", "namespaces"]) => {
                    let parent = req
                        .uri()
                        .query()
                        .and_then(|q| q.split('&').find_map(|kv| kv.strip_prefix("parent=")))
                        .map(namespace)
                        .transpose()?;
                    let namespaces = state.catalog.list_namespaces(parent.as_ref()).await?;
                    json_response(&ListNamespaceResponse {
                        namespaces,
                        next_page_token: None,
                    })
                }
                (Method::POST, ["v1", "namespaces"]) => {
                    let r: CreateNamespaceRequest = body(req)?;
                    let ns = state
                        .catalog
                        .create_namespace(&r.namespace, r.properties)
                        .await?;
                    json_response(&NamespaceResponse {
                        namespace: ns.name().clone(),
                        properties: ns.properties().clone(),
                    })
                }
                (Method::GET, ["v1", "namespaces", ns]) => {
                    let ns = state.catalog.get_namespace(&namespace(ns)?).await?;
                    json_response(&NamespaceResponse {
                        namespace: ns.name().clone(),
                        properties: ns.properties().clone(),
                    })
                }
                (Method::HEAD, ["v1", "namespaces", ns]) => {
                    if state.catalog.namespace_exists(&namespace(ns)?).await? {
                        no_content()
                    } else {
                        Err(ApiError::new(
                            StatusCode::NOT_FOUND,
                            "NoSuchNamespaceException",
                            "no such namespace",
                        ))
                    }
                }
                (Method::DELETE, ["v1", "namespaces", ns]) => {
                    state.catalog.drop_namespace(&namespace(ns)?).await?;
                    no_content()
                }
                (Method::GET, ["v1", "namespaces", ns, "tables"]) => {
                    let identifiers = state.catalog.list_tables(&namespace(ns)?).await?;
                    json_response(&ListTablesResponse {
                        identifiers,
                        next_page_token: None,
                    })
                }
                (Method::POST, ["v1", "namespaces", ns, "tables"]) => {
                    let ns = namespace(ns)?;
                    let r: CreateTableRequest = body(req)?;
                    if r.stage_create == Some(true) {
                        return Err(ApiError::bad_request(
                            "staged creates are not supported by the fixture",
                        ));
                    }
                    let creation = TableCreation::builder()
                        .name(r.name)
                        .location_opt(r.location)
                        .schema(r.schema)
                        .partition_spec_opt(r.partition_spec)
                        .sort_order_opt(r.write_order)
                        .properties(r.properties)
                        .build();
                    let table = state.catalog.create_table(&ns, creation).await?;
                    json_response(&load_result(state, &table, vend))
                }
                (Method::GET, ["v1", "namespaces", ns, "tables", t]) => {
                    let ident = TableIdent::new(namespace(ns)?, decode(t));
                    let table = state.catalog.load_table(&ident).await?;
                    json_response(&load_result(state, &table, vend))
                }
                (Method::HEAD, ["v1", "namespaces", ns, "tables", t]) => {
                    let ident = TableIdent::new(namespace(ns)?, decode(t));
                    if state.catalog.table_exists(&ident).await? {
                        no_content()
                    } else {
                        Err(ApiError::new(
                            StatusCode::NOT_FOUND,
                            "NoSuchTableException",
                            "no such table",
                        ))
                    }
                }
                (Method::DELETE, ["v1", "namespaces", ns, "tables", t]) => {
                    let ident = TableIdent::new(namespace(ns)?, decode(t));
                    state.catalog.drop_table(&ident).await?;
                    no_content()
                }
                (Method::POST, ["v1", "namespaces", ns, "tables", t]) => {
                    let ident = TableIdent::new(namespace(ns)?, decode(t));
                    let r: CommitTableRequest = body(req)?;
                    state.hold.pass().await;
                    let answer = commit(state, &ident, r).await;
                    match &answer {
                        Ok(_) => state.commits.fetch_add(1, Ordering::SeqCst),
                        Err(e) if e.status == StatusCode::CONFLICT => {
                            state.conflicts.fetch_add(1, Ordering::SeqCst)
                        }
                        Err(_) => 0,
                    };
                    json_response(&answer?)
                }
                _ => Err(ApiError::new(
                    StatusCode::NOT_FOUND,
                    "NoSuchEndpointException",
                    format!("the fixture does not serve {path}"),
                )),
            }
        }
    }
}

fn load_result(state: &State, table: &iceberg::table::Table, vend: bool) -> LoadTableResult {
    LoadTableResult {
        metadata_location: table.metadata_location().map(str::to_owned),
        metadata: table.metadata().clone(),
        config: if vend {
            state.vended.clone()
        } else {
            HashMap::new()
        },
        storage_credentials: None,
    }
}

/// `POST /v1/oauth/tokens` with `grant_type=client_credentials` (form-encoded).
async fn oauth_token(state: &State, req: Request<Bytes>) -> Answer {
    let bytes = req.body();
    let form: HashMap<String, String> = String::from_utf8_lossy(bytes)
        .split('&')
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (decode_with(k, true), decode_with(v, true)))
        .collect();
    let granted = state.auth.lock().unwrap().as_ref().and_then(|auth| {
        let (id, secret) = auth.client.as_ref()?;
        (form.get("grant_type").map(String::as_str) == Some("client_credentials")
            && form.get("client_id") == Some(id)
            && form.get("client_secret") == Some(secret))
        .then(|| auth.token.clone())
    });
    match granted {
        Some(token) => json_response(&json!({
            "access_token": token,
            "token_type": "bearer",
            "expires_in": 3600,
            "issued_token_type": "urn:ietf:params:oauth:token-type:access_token"
        })),
        None => Err(ApiError::new(
            StatusCode::UNAUTHORIZED,
            "NotAuthorizedException",
            "invalid client credentials",
        )),
    }
}

/// Checks `r.requirements` against the current metadata, applies `r.updates`, writes the new
/// metadata file and swaps the catalog's pointer to it if it is still the one checked.
async fn commit(
    state: &State,
    ident: &TableIdent,
    r: CommitTableRequest,
) -> Result<CommitTableResponse, ApiError> {
    let _serial = state.commit_lock.lock().await;
    let table = state.catalog.load_table(ident).await?;
    for requirement in &r.requirements {
        requirement
            .check(Some(table.metadata()))
            .map_err(|e| ApiError::commit_failed(format!("requirement failed: {e}")))?;
    }
    let current = table
        .metadata_location()
        .ok_or_else(|| ApiError::bad_request("table has no metadata location"))?
        .to_owned();
    let mut builder = table.metadata().clone().into_builder(Some(current.clone()));
    for update in r.updates {
        builder = update.apply(builder)?;
    }
    let metadata = builder.build()?.metadata;
    let location = MetadataLocation::from_str(&current)?
        .with_next_version()
        .with_new_metadata(&metadata);
    metadata.write_to(table.file_io(), &location).await?;
    let location = location.to_string();
    let swapped = sqlx::query(
        "UPDATE iceberg_tables SET metadata_location = ?, previous_metadata_location = ?
         WHERE catalog_name = ? AND table_namespace = ? AND table_name = ? AND metadata_location = ?",
    )
    .bind(&location)
    .bind(&current)
    .bind(CATALOG_NAME)
    .bind(ident.namespace().join("."))
    .bind(ident.name())
    .bind(&current)
    .execute(&state.pool)
    .await
    .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "ServerErrorException", e.to_string()))?;
    if swapped.rows_affected() != 1 {
        return Err(ApiError::commit_failed(format!(
            "table {ident} changed concurrently"
        )));
    }
    Ok(CommitTableResponse {
        metadata_location: location,
        metadata,
    })
}
