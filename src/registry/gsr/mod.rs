//! The AWS Glue Schema Registry client (issue 5), the registry room's Glue side: the one remote
//! call (`GetSchemaVersion`, in [`api`]), its bounded retries, and the caches of version ids.
//! A `gsr_json` or `gsr_avro` channel names its schema with `[channel.schema] glue_schema_arn`;
//! each record's GSR header ([`crate::registry::framing::gsr`]) names the version it was written
//! with, and this client resolves that id.
//!
//! ```text
//!  activation:  state.schema_version_id? ──yes──> GetSchemaVersion(SchemaVersionId)   (pinned)
//!                                        └─no───> GetSchemaVersion(SchemaArn, N | latest)
//!               DataFormat JSON (gsr_json) or AVRO (gsr_avro)? ─> map to Iceberg ─> record the
//!               version id with the channel; not found / another format / unmappable ─> the
//!               channel is FAILED with the reason   ([`crate::registry::channel_schema`])
//!
//!  per record:  header id == channel's ─> convert
//!               other id ─> cache ─hit──> known version
//!                                └─miss─> negative cache ─hit─> INVALID_SCHEMA
//!                                         └─miss─> GetSchemaVersion(id), bounded retries
//!                                                  found -> cache; not found -> negative cache
//!                                                  unavailable/refused -> worker restarts
//!                                                    from the table's checkpoints (no DLQ)
//! ```
//!
//! What a known version that is not the channel's becomes depends on `[channel.schema]
//! evolution`: with `"none"` its records are `SCHEMA_MISMATCH` ([`crate::registry::decoder`]);
//! with `"compatible"` a version of the channel's schema is mapped and applied to the table when
//! it is a compatible evolution ([`crate::registry::versions`], then [`crate::iceberg`]'s
//! evolution), and its records are converted by their own version.
//!
//! A lookup is bounded: [`GLUE_ATTEMPT_TIMEOUT`] per HTTP attempt, [`GLUE_OPERATION_TIMEOUT`] per
//! call, [`LOOKUP_ATTEMPTS`] calls within [`LOOKUP_BUDGET`]. On an ACTIVE channel a schema that
//! this worker cannot use (another ARN, not found from its region, refused) stops this worker only;
//! the channel is FAILED only at activation ([`crate::app`], [`crate::channel`]).
//!
//! Invariant: an unknown version id costs at most one bounded lookup per [`NEGATIVE_TTL`], and a
//! registry that cannot be asked never sends a record to the DLQ.
//!
//! The raw SDK calls are in [`api`]; the cache, retries and resolution here are tested against
//! the in-memory [`MemoryRegistry`].

pub mod api;

use std::collections::{HashMap, VecDeque};
use std::hash::Hash;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use uuid::Uuid;

use crate::config::GlueSchemaVersion;
use crate::retry::{with_retries, Backoff};

/// Schema versions kept per channel (positive cache).
pub const CACHE_CAPACITY: usize = 256;
/// Unknown version ids remembered per channel (negative cache).
pub const NEGATIVE_CAPACITY: usize = 1024;
/// How long an unknown version id stays unknown before it is looked up again.
pub const NEGATIVE_TTL: Duration = Duration::from_secs(300);
/// Attempts of one lookup while the registry is unavailable (throttled, 5xx, timeouts).
pub const LOOKUP_ATTEMPTS: u32 = 4;
/// Timeout of one Glue `GetSchemaVersion` call, the SDK's retries included: a registry that
/// accepts connections and never answers costs at most this per attempt of a lookup.
pub const GLUE_OPERATION_TIMEOUT: Duration = Duration::from_secs(5);
/// Timeout of one HTTP attempt of a Glue call (the SDK retries within [`GLUE_OPERATION_TIMEOUT`]).
pub const GLUE_ATTEMPT_TIMEOUT: Duration = Duration::from_secs(3);
/// Time budget of one lookup, its [`LOOKUP_ATTEMPTS`] attempts and backoff included: a hung
/// registry stalls a worker at most this long per lookup (then the lookup is
/// [`RegistryError::Unavailable`]).
pub const LOOKUP_BUDGET: Duration = Duration::from_secs(15);
/// After a lookup by id failed every attempt, lookups by id fail at once for this long (a registry
/// outage costs the worker one retry sequence per cooldown, not one per record).
pub const UNAVAILABLE_COOLDOWN: Duration = Duration::from_secs(10);

/// One schema version as the registry describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SchemaVersionInfo {
    /// `SchemaVersionId`.
    pub version_id: Uuid,
    /// ARN of the schema the version belongs to.
    pub schema_arn: String,
    /// `VersionNumber`.
    pub version_number: i64,
    /// `DataFormat`: `JSON`, `AVRO` or `PROTOBUF`.
    pub data_format: String,
    /// `SchemaDefinition`, the document as registered.
    pub definition: String,
}

/// Which version to get.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VersionSelector {
    /// By `SchemaVersionId`.
    Id(Uuid),
    /// By schema ARN and version number, or the latest version.
    Arn {
        /// The schema's ARN.
        schema_arn: String,
        /// Number or latest.
        version: GlueSchemaVersion,
    },
}

impl std::fmt::Display for VersionSelector {
    /// `schema version ID`, or `schema ARN, version N` / `…, the latest version`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            VersionSelector::Id(id) => write!(f, "schema version {id}"),
            VersionSelector::Arn {
                schema_arn,
                version,
            } => write!(f, "schema {schema_arn}, {version}"),
        }
    }
}

/// Why a lookup failed, shaped by what the caller does next.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RegistryError {
    /// The registry, schema or version does not exist (`EntityNotFoundException`): definitive.
    #[error("not found in the Glue Schema Registry: {0}")]
    NotFound(String),
    /// The request is refused (access denied, invalid input): an operator must act.
    #[error("refused by the Glue Schema Registry: {0}")]
    Refused(String),
    /// Throttled, a 5xx, a timeout: retry later.
    #[error("Glue Schema Registry unavailable: {0}")]
    Unavailable(String),
}

impl RegistryError {
    /// Whether retrying may succeed.
    pub fn is_retryable(&self) -> bool {
        matches!(self, RegistryError::Unavailable(_))
    }
}

/// The registry's one remote call: `GetSchemaVersion`.
#[async_trait]
pub trait SchemaRegistry: Send + Sync {
    /// Gets one schema version.
    ///
    /// Errors: [`RegistryError`], mapped once at the edge.
    async fn get_schema_version(
        &self,
        selector: &VersionSelector,
    ) -> Result<SchemaVersionInfo, RegistryError>;
}

/// An in-memory registry (the fake for tests), counting calls; `unavailable` calls fail first.
#[cfg(any(test, feature = "testsuite"))]
#[derive(Debug, Default)]
pub struct MemoryRegistry {
    versions: Mutex<Vec<SchemaVersionInfo>>,
    /// Calls made so far.
    pub calls: AtomicU64,
    /// The next this many calls fail with [`RegistryError::Unavailable`].
    pub unavailable: AtomicU64,
}

#[cfg(any(test, feature = "testsuite"))]
impl MemoryRegistry {
    /// Registers a version.
    pub fn add(&self, version: SchemaVersionInfo) {
        self.versions.lock().expect("registry lock").push(version);
    }
}

#[cfg(any(test, feature = "testsuite"))]
#[async_trait]
impl SchemaRegistry for MemoryRegistry {
    async fn get_schema_version(
        &self,
        selector: &VersionSelector,
    ) -> Result<SchemaVersionInfo, RegistryError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let failing = self
            .unavailable
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1));
        if failing.is_ok() {
            return Err(RegistryError::Unavailable("injected".into()));
        }
        let versions = self.versions.lock().expect("registry lock");
        let found = match selector {
            VersionSelector::Id(id) => versions.iter().find(|v| v.version_id == *id),
            VersionSelector::Arn {
                schema_arn,
                version,
            } => {
                let of_schema = versions.iter().filter(|v| &v.schema_arn == schema_arn);
                match version {
                    GlueSchemaVersion::Latest => of_schema.max_by_key(|v| v.version_number),
                    GlueSchemaVersion::Number(n) => {
                        of_schema.into_iter().find(|v| v.version_number == *n)
                    }
                }
            }
        };
        found
            .cloned()
            .ok_or_else(|| RegistryError::NotFound(selector.to_string()))
    }
}

/// A map bounded to `capacity` entries, evicting the oldest insertion first.
#[derive(Debug)]
struct Bounded<K, V> {
    capacity: usize,
    map: HashMap<K, V>,
    order: VecDeque<K>,
}

impl<K: Hash + Eq + Clone, V> Bounded<K, V> {
    fn new(capacity: usize) -> Self {
        Bounded {
            capacity: capacity.max(1),
            map: HashMap::new(),
            order: VecDeque::new(),
        }
    }

    fn get(&self, k: &K) -> Option<&V> {
        self.map.get(k)
    }

    fn insert(&mut self, k: K, v: V) {
        if self.map.insert(k.clone(), v).is_none() {
            self.order.push_back(k);
        }
        while self.map.len() > self.capacity {
            if let Some(old) = self.order.pop_front() {
                self.map.remove(&old);
            }
        }
    }

    fn remove(&mut self, k: &K) {
        if self.map.remove(k).is_some() {
            self.order.retain(|o| o != k);
        }
    }

    fn len(&self) -> usize {
        self.map.len()
    }
}

#[derive(Debug)]
struct Caches {
    known: Bounded<Uuid, Arc<SchemaVersionInfo>>,
    unknown: Bounded<Uuid, Instant>,
    /// Lookups by id fail fast until then (see [`UNAVAILABLE_COOLDOWN`]).
    unavailable_until: Option<Instant>,
}

/// The registry as the pipeline uses it: lookups by version id are cached (bounded), unknown ids
/// are remembered for [`NEGATIVE_TTL`] (bounded), and an unavailable registry is retried with
/// exponential backoff, [`LOOKUP_ATTEMPTS`] times.
pub struct RegistryClient {
    registry: Arc<dyn SchemaRegistry>,
    caches: Mutex<Caches>,
    negative_ttl: Duration,
    cooldown: Duration,
    first_backoff: Duration,
    lookups: AtomicU64,
}

impl std::fmt::Debug for RegistryClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RegistryClient")
            .field("lookups", &self.lookups)
            .finish_non_exhaustive()
    }
}

impl RegistryClient {
    /// A client with the default bounds.
    pub fn new(registry: Arc<dyn SchemaRegistry>) -> Self {
        RegistryClient {
            registry,
            caches: Mutex::new(Caches {
                known: Bounded::new(CACHE_CAPACITY),
                unknown: Bounded::new(NEGATIVE_CAPACITY),
                unavailable_until: None,
            }),
            negative_ttl: NEGATIVE_TTL,
            cooldown: UNAVAILABLE_COOLDOWN,
            first_backoff: Duration::from_millis(200),
            lookups: AtomicU64::new(0),
        }
    }

    /// A client calling Glue with `client`, in the region of `schema_arn` (when it names one).
    pub fn glue(client: aws_sdk_glue::Client, schema_arn: &str) -> Self {
        let region = schema_arn.split(':').nth(3).filter(|r| !r.is_empty());
        Self::new(Arc::new(api::GlueRegistry::new(client, region)))
    }

    /// Sets the cache capacities and the negative cache's time to live.
    pub fn with_bounds(self, known: usize, unknown: usize, negative_ttl: Duration) -> Self {
        RegistryClient {
            caches: Mutex::new(Caches {
                known: Bounded::new(known),
                unknown: Bounded::new(unknown),
                unavailable_until: None,
            }),
            negative_ttl,
            ..self
        }
    }

    /// Sets the first retry delay (doubling at each attempt) and the cooldown after an outage.
    pub fn with_backoff(self, first_backoff: Duration, cooldown: Duration) -> Self {
        RegistryClient {
            first_backoff,
            cooldown,
            ..self
        }
    }

    /// Remote lookups made so far (each retry counts).
    pub fn lookups(&self) -> u64 {
        self.lookups.load(Ordering::Relaxed)
    }

    async fn fetch(&self, selector: &VersionSelector) -> Result<SchemaVersionInfo, RegistryError> {
        match tokio::time::timeout(LOOKUP_BUDGET, self.fetch_with_retries(selector)).await {
            Ok(found) => found,
            Err(_) => Err(RegistryError::Unavailable(format!(
                "no answer within {}s",
                LOOKUP_BUDGET.as_secs()
            ))),
        }
    }

    async fn fetch_with_retries(
        &self,
        selector: &VersionSelector,
    ) -> Result<SchemaVersionInfo, RegistryError> {
        with_retries(
            LOOKUP_ATTEMPTS,
            Backoff::new(self.first_backoff, Duration::MAX),
            "schema registry lookup",
            RegistryError::is_retryable,
            || {
                self.lookups.fetch_add(1, Ordering::Relaxed);
                self.registry.get_schema_version(selector)
            },
        )
        .await
    }

    fn remember(&self, v: SchemaVersionInfo) -> Arc<SchemaVersionInfo> {
        let v = Arc::new(v);
        let mut c = self.caches.lock().expect("cache lock");
        c.unknown.remove(&v.version_id);
        c.known.insert(v.version_id, v.clone());
        v
    }

    /// The version `id`. An id the registry does not know is answered from the negative cache
    /// (no call) until [`NEGATIVE_TTL`] passes; after the retries failed, lookups fail at once
    /// for [`UNAVAILABLE_COOLDOWN`].
    ///
    /// Errors: [`RegistryError::NotFound`] (possibly cached), or the last error after the retries
    /// ([`RegistryError::Unavailable`] during the cooldown).
    pub async fn by_id(&self, id: Uuid) -> Result<Arc<SchemaVersionInfo>, RegistryError> {
        {
            let c = self.caches.lock().expect("cache lock");
            if let Some(v) = c.known.get(&id) {
                return Ok(v.clone());
            }
            if let Some(at) = c.unknown.get(&id) {
                if at.elapsed() < self.negative_ttl {
                    return Err(RegistryError::NotFound(format!(
                        "schema version {id} (looked up {}s ago)",
                        at.elapsed().as_secs()
                    )));
                }
            }
            if c.unavailable_until.is_some_and(|t| Instant::now() < t) {
                return Err(RegistryError::Unavailable(format!(
                    "schema version {id} not looked up: the registry failed recently"
                )));
            }
        }
        let found = self.fetch(&VersionSelector::Id(id)).await;
        let mut c = self.caches.lock().expect("cache lock");
        c.unavailable_until = match &found {
            Err(RegistryError::Unavailable(_)) => Some(Instant::now() + self.cooldown),
            _ => None,
        };
        drop(c);
        match found {
            Ok(v) => Ok(self.remember(v)),
            Err(e @ RegistryError::NotFound(_)) => {
                let mut c = self.caches.lock().expect("cache lock");
                c.unknown.insert(id, Instant::now());
                Err(e)
            }
            Err(e) => Err(e),
        }
    }

    /// The version `version` of the schema `schema_arn` (cached under its id).
    ///
    /// Errors: as [`RegistryClient::by_id`], never negative-cached.
    pub async fn by_arn(
        &self,
        schema_arn: &str,
        version: GlueSchemaVersion,
    ) -> Result<Arc<SchemaVersionInfo>, RegistryError> {
        let v = self
            .fetch(&VersionSelector::Arn {
                schema_arn: schema_arn.to_string(),
                version,
            })
            .await?;
        Ok(self.remember(v))
    }

    /// Entries in the positive and the negative cache.
    pub fn cached(&self) -> (usize, usize) {
        let c = self.caches.lock().expect("cache lock");
        (c.known.len(), c.unknown.len())
    }
}

#[cfg(test)]
mod tests;
