//! Schemas from the AWS Glue Schema Registry (issue 5): where a channel's JSON Schema comes from
//! when `[channel.schema]` names `glue_schema_arn`, and how the schema version id in each GSR
//! record header is resolved.
//!
//! ```text
//!  activation:  state.schema_version_id? ──yes──> GetSchemaVersion(SchemaVersionId)   (pinned)
//!                                        └─no───> GetSchemaVersion(SchemaArn, N | latest)
//!               DataFormat JSON? ─> map to Iceberg ─> record the version id with the channel
//!               not found / not JSON / unmappable ─> the channel is FAILED with the reason
//!
//!  per record (gsr_json): header id == channel's ─> convert
//!                         other id ─> cache ─hit──> SCHEMA_MISMATCH
//!                                          └─miss─> negative cache ─hit─> INVALID_SCHEMA
//!                                                   └─miss─> GetSchemaVersion(id), bounded retries
//!                                                            found -> cache; not found -> negative cache
//!                                                            unavailable/refused -> worker restarts
//!                                                              from the table's checkpoints (no DLQ)
//! ```
//!
//! A lookup is bounded: [`GLUE_ATTEMPT_TIMEOUT`] per HTTP attempt, [`GLUE_OPERATION_TIMEOUT`] per
//! call, [`LOOKUP_ATTEMPTS`] calls within [`LOOKUP_BUDGET`]. On an ACTIVE channel a schema that
//! this worker cannot use (another ARN, not found from its region, refused) stops this worker only;
//! the channel is FAILED only at activation ([`crate::app`], [`crate::channel`]).
//!
//! Invariant: a channel's table schema is the one of the version recorded at activation; no other
//! version's records reach the table (no schema evolution), and an unknown version id costs at most
//! one bounded lookup per [`NEGATIVE_TTL`].
//!
//! The raw SDK calls are in [`api`]; the cache, retries and resolution here are tested against
//! the in-memory [`MemoryRegistry`].

pub mod api;
pub mod wire;

use std::collections::{HashMap, VecDeque};
use std::hash::Hash;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use serde_json::Value;
use uuid::Uuid;

use crate::config::{ChannelConfig, GlueSchemaVersion, SchemaConfig};
use crate::retry::{with_retries, Backoff};
use crate::schema::MappedSchema;

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

/// The registry a channel's schema versions come from.
#[derive(Debug, Clone)]
pub enum ChannelRegistry {
    /// The AWS Glue Schema Registry (`glue_schema_arn`).
    Glue(Arc<RegistryClient>),
    /// A Confluent-compatible registry (`registry_url`).
    Confluent(Arc<crate::confluent::ConfluentClient>),
}

impl ChannelRegistry {
    /// The registry of channel `config`'s schema (Glue through `glue`), `None` for a schema file.
    ///
    /// Errors: [`SchemaLoadError::Refused`] when the Confluent client cannot be built
    /// (credentials in the environment, CA bundle).
    pub fn of(
        config: &ChannelConfig,
        glue: impl FnOnce() -> aws_sdk_glue::Client,
    ) -> Result<Option<ChannelRegistry>, SchemaLoadError> {
        Ok(match &config.schema {
            Some(SchemaConfig::Glue { schema_arn, .. }) => Some(ChannelRegistry::Glue(Arc::new(
                RegistryClient::glue(glue(), schema_arn),
            ))),
            Some(SchemaConfig::Confluent(c)) => Some(ChannelRegistry::Confluent(Arc::new(
                crate::confluent::ConfluentClient::from_config(c)
                    .map_err(|e| SchemaLoadError::Refused(e.to_string()))?,
            ))),
            _ => None,
        })
    }

    /// The Glue client, `None` for a Confluent registry.
    pub fn glue(&self) -> Option<&Arc<RegistryClient>> {
        match self {
            ChannelRegistry::Glue(g) => Some(g),
            ChannelRegistry::Confluent(_) => None,
        }
    }
}

/// Loads the schema `key` of a Confluent registry ([`crate::confluent::SchemaKey`] packed in a
/// UUID), or the subject's latest version when `key` is `None`, and maps it. A recorded key
/// must be a version of the channel's subject, and of the schema type `format` reads (`avro`:
/// AVRO, `protobuf`: PROTOBUF, `json_sr`: JSON).
///
/// Errors: [`SchemaLoadError`] naming the subject and id (and `channel.record.format` when the
/// schema type differs).
pub async fn load_confluent_schema(
    config: &crate::config::ConfluentSchemaConfig,
    format: crate::config::RecordFormat,
    partition_field: &str,
    key: Option<Uuid>,
    client: &crate::confluent::ConfluentClient,
) -> Result<ChannelSchema, SchemaLoadError> {
    use crate::confluent::{map_schema, RegistryError as E, SchemaKey, SchemaType};
    use crate::schema::protobuf::MessageSelector;
    let subject = &config.subject;
    // A refusal (401, 403: credentials) is this worker's to fix, not the channel's: retried like
    // an outage, never a FAILED channel. Only a missing subject, version or id is definitive.
    let unavailable = |e: E| match e {
        E::NotFound(_) => SchemaLoadError::Refused(format!("subject {subject}: {e}")),
        e => SchemaLoadError::Unavailable(format!("subject {subject}: {e}")),
    };
    let (resolved, indexes) = match key {
        Some(k) => {
            let Some(k) = SchemaKey::from_uuid(k) else {
                return Err(SchemaLoadError::Refused(format!(
                    "the recorded schema version {k} is not a Confluent schema id (the channel was created with another registry: delete and create the channel)"
                )));
            };
            (client.by_id(k.id).await.map_err(unavailable)?, k.indexes)
        }
        None => (client.latest().await.map_err(unavailable)?, Vec::new()),
    };
    let Some(version) = resolved.version_in(subject) else {
        return Err(SchemaLoadError::Refused(format!(
            "schema id {} is not a version of the channel's subject {subject}",
            resolved.id
        )));
    };
    let expected = match format {
        crate::config::RecordFormat::Avro => Some(SchemaType::Avro),
        crate::config::RecordFormat::Protobuf => Some(SchemaType::Protobuf),
        crate::config::RecordFormat::JsonSr => Some(SchemaType::Json),
        _ => None,
    };
    if expected.is_some_and(|t| t != resolved.schema_type) {
        return Err(SchemaLoadError::Refused(format!(
            "subject {subject} version {version} (schema id {}) is a {} schema; channel.record.format = \"{}\" reads {} schemas",
            resolved.id,
            resolved.schema_type.as_str(),
            format.as_str(),
            expected.map_or("", |t| t.as_str()),
        )));
    }
    let choice = match (resolved.schema_type, &config.message) {
        (SchemaType::Protobuf, _) if !indexes.is_empty() => Some(MessageSelector::Indexes(indexes)),
        (SchemaType::Protobuf, Some(name)) => Some(MessageSelector::Name(name.clone())),
        (SchemaType::Protobuf, None) => Some(MessageSelector::Indexes(vec![0])),
        _ => None,
    };
    let mapped = map_schema(&resolved, partition_field, choice.as_ref()).map_err(|e| {
        SchemaLoadError::Refused(format!("subject {subject} version {version}: {e}"))
    })?;
    let key = SchemaKey {
        id: resolved.id,
        indexes: match &choice {
            Some(MessageSelector::Indexes(i)) => i.clone(),
            Some(MessageSelector::Name(name)) => crate::confluent::message_indexes(&resolved, name)
                .map_err(|e| {
                    SchemaLoadError::Refused(format!("subject {subject} version {version}: {e}"))
                })?,
            None => Vec::new(),
        },
    };
    let uuid = key.to_uuid().ok_or_else(|| {
        SchemaLoadError::Refused(format!("{key}: message indexes beyond what floe records"))
    })?;
    Ok(ChannelSchema {
        mapped,
        version_id: Some(uuid),
        version_number: Some(version),
        other_versions: Vec::new(),
        label: format!("{subject} version {version} ({key})"),
    })
}

/// A channel's schema, resolved at activation.
#[derive(Debug)]
pub struct ChannelSchema {
    /// The mapped schema the table is created from and records are converted with.
    pub mapped: MappedSchema,
    /// The schema version id (Glue, or the matching `[channel.schema.versions]` entry).
    pub version_id: Option<Uuid>,
    /// The Glue `VersionNumber` of the version (Glue schemas only).
    pub version_number: Option<i64>,
    /// The registry's other versions listed offline (`[channel.schema.versions]`).
    pub other_versions: Vec<Uuid>,
    /// Where the schema came from, for DLQ entries and logs (a path or `ARN@version-id`).
    pub label: String,
}

/// Why a channel's schema cannot be loaded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SchemaLoadError {
    /// Missing, not JSON Schema, or refused by the mapping: the channel cannot run (for a Glue
    /// schema, the channel is FAILED with this reason).
    #[error("{0}")]
    Refused(String),
    /// The registry could not be reached: retry.
    #[error("{0}")]
    Unavailable(String),
}

fn read_json(path: &Path) -> Result<Value, SchemaLoadError> {
    let text = std::fs::read(path)
        .map_err(|e| SchemaLoadError::Refused(format!("schema file {}: {e}", path.display())))?;
    serde_json::from_slice(&text).map_err(|e| {
        SchemaLoadError::Refused(format!("schema file {} is not JSON: {e}", path.display()))
    })
}

/// The Iceberg-mappable JSON Schema of a registry version; refuses formats other than JSON.
///
/// Errors: [`SchemaLoadError::Refused`] naming the version.
pub fn json_schema_of(v: &SchemaVersionInfo) -> Result<Value, SchemaLoadError> {
    if v.data_format != "JSON" {
        return Err(SchemaLoadError::Refused(format!(
            "schema {} version {} ({}) has data format {}: Iceberg destinations take JSON Schema only",
            v.schema_arn, v.version_number, v.version_id, v.data_format
        )));
    }
    serde_json::from_str(&v.definition).map_err(|e| {
        SchemaLoadError::Refused(format!(
            "schema {} version {}: the definition is not JSON: {e}",
            v.schema_arn, v.version_number
        ))
    })
}

/// Maps Glue version `v`: a JSON Schema, or with `avro` (`record.format = "gsr_avro"`) an Avro
/// schema; the version's data format must be the channel's.
///
/// Errors: [`SchemaLoadError::Refused`] naming the version.
pub fn map_glue_version(
    v: &SchemaVersionInfo,
    avro: bool,
    partition_field: &str,
) -> Result<MappedSchema, SchemaLoadError> {
    let origin = format!("{} version {}", v.schema_arn, v.version_number);
    if !avro {
        let doc = json_schema_of(v)?;
        return MappedSchema::from_json_schema(&doc, partition_field)
            .map_err(|e| SchemaLoadError::Refused(format!("schema {origin}: {e}")));
    }
    if v.data_format != "AVRO" {
        return Err(SchemaLoadError::Refused(format!(
            "schema {origin} ({}) has data format {}: record.format = \"gsr_avro\" takes AVRO schemas",
            v.version_id, v.data_format
        )));
    }
    MappedSchema::from_avro(&v.definition, &[], partition_field)
        .map_err(|e| SchemaLoadError::Refused(format!("schema {origin}: {e}")))
}

/// Maps Avro Glue version `writer` read through version `reader` (Avro 1.11 "Schema
/// Resolution": the fields `writer` lacks take `reader`'s defaults) unless that would skip a
/// field `writer` has ([`MappedSchema::from_avro_older`]).
///
/// Errors: [`SchemaLoadError::Refused`] naming both versions.
pub fn map_glue_avro_resolved(
    writer: &SchemaVersionInfo,
    reader: &SchemaVersionInfo,
    partition_field: &str,
) -> Result<MappedSchema, SchemaLoadError> {
    for v in [writer, reader] {
        if v.data_format != "AVRO" {
            return Err(SchemaLoadError::Refused(format!(
                "schema {} version {} ({}) has data format {}: record.format = \"gsr_avro\" takes AVRO schemas",
                v.schema_arn, v.version_number, v.version_id, v.data_format
            )));
        }
    }
    MappedSchema::from_avro_older(
        &writer.definition,
        &[],
        &reader.definition,
        &[],
        partition_field,
    )
    .map_err(|e| {
        SchemaLoadError::Refused(format!(
            "schema {} version {} read as version {}: {e}",
            writer.schema_arn, writer.version_number, reader.version_number
        ))
    })
}

/// Loads channel `config`'s schema: from its file (and `[channel.schema.versions]`), or from the
/// Glue Schema Registry — the version `recorded` at activation when there is one, otherwise the
/// configured number or the latest.
///
/// Errors: [`SchemaLoadError`].
pub async fn load_channel_schema(
    config: &ChannelConfig,
    recorded: Option<Uuid>,
    registry: Option<&ChannelRegistry>,
) -> Result<ChannelSchema, SchemaLoadError> {
    let (Some(dest), Some(schema)) = (config.destination.iceberg(), &config.schema) else {
        return Err(SchemaLoadError::Refused(
            "a raw S3 channel has no schema".into(),
        ));
    };
    let map = |doc: &Value, origin: &str| {
        MappedSchema::from_json_schema(doc, &dest.partition_field)
            .map_err(|e| SchemaLoadError::Refused(format!("schema {origin}: {e}")))
    };
    match schema {
        SchemaConfig::File(file) => Ok(ChannelSchema {
            mapped: map(&read_json(file)?, &file.display().to_string())?,
            version_id: None,
            version_number: None,
            other_versions: Vec::new(),
            label: file.display().to_string(),
        }),
        SchemaConfig::FileVersions { file, versions } => {
            let doc = read_json(file)?;
            let mut listed = Vec::new();
            for (id, path) in versions {
                listed.push((*id, read_json(path)?));
            }
            let (channel, others) = crate::gsr::wire::split_versions(&doc, listed);
            let Some(id) = channel else {
                return Err(SchemaLoadError::Refused(format!(
                    "none of channel.schema.versions is the schema file {} (the channel's version is the one whose document equals it)",
                    file.display()
                )));
            };
            Ok(ChannelSchema {
                mapped: map(&doc, &file.display().to_string())?,
                version_id: Some(id),
                version_number: None,
                other_versions: others,
                label: id.to_string(),
            })
        }
        SchemaConfig::Confluent(c) => {
            let Some(ChannelRegistry::Confluent(client)) = registry else {
                return Err(SchemaLoadError::Unavailable(
                    "no schema registry client".to_string(),
                ));
            };
            load_confluent_schema(
                c,
                config.record.format,
                &dest.partition_field,
                recorded,
                client,
            )
            .await
        }
        SchemaConfig::Glue {
            schema_arn,
            version,
            ..
        } => {
            let registry = registry
                .and_then(ChannelRegistry::glue)
                .ok_or_else(|| SchemaLoadError::Unavailable("no Glue client".to_string()))?;
            let found = match recorded {
                Some(id) => registry.by_id(id).await,
                None => registry.by_arn(schema_arn, *version).await,
            };
            let v = found.map_err(|e| match e {
                RegistryError::Unavailable(_) => SchemaLoadError::Unavailable(e.to_string()),
                e => SchemaLoadError::Refused(match recorded {
                    Some(id) => format!("schema version {id} recorded at activation: {e}"),
                    None => format!("schema {schema_arn}, {version}: {e}"),
                }),
            })?;
            if v.schema_arn != *schema_arn {
                return Err(SchemaLoadError::Refused(format!(
                    "the channel was activated with schema version {} of {}, not of {schema_arn}: the schema of a channel does not change (delete and create the channel)",
                    v.version_id, v.schema_arn
                )));
            }
            let mapped = map_glue_version(
                &v,
                config.record.format == crate::config::RecordFormat::GsrAvro,
                &dest.partition_field,
            )?;
            Ok(ChannelSchema {
                mapped,
                version_id: Some(v.version_id),
                version_number: Some(v.version_number),
                other_versions: Vec::new(),
                label: v.version_id.to_string(),
            })
        }
    }
}

#[cfg(test)]
mod tests;
