//! Schemas from a Confluent-compatible schema registry (issue 31): where the schema of an `avro`,
//! `protobuf` or `json_sr` channel comes from (`[channel.schema] registry_url`), and how the
//! schema id in each record's Confluent framing ([`crate::registry::framing::confluent`]) is
//! resolved.
//!
//! ```text
//!  activation:  GET /subjects/{subject}/versions/latest ─> map to Iceberg ─> create the table
//!
//!  per record:  framing ─bad─> DESERIALIZATION_ERROR
//!               schema id (+ message indexes) ─> converter cache ─hit─> decode
//!                 └─miss─> GET /schemas/ids/{id}            (cached for the process)
//!                          GET /schemas/ids/{id}/versions   (the subjects of the id)
//!                            └─not found─> GET /subjects/{subject}/versions[/{n}]: the
//!                              channel subject's versions that are the id (logged once)
//!                          GET /subjects/{s}/versions/{n}   (each reference, recursively)
//!                          404 ─> INVALID_SCHEMA; another subject's id ─> SCHEMA_MISMATCH
//!                          unavailable (every URL, after retries) ─> the worker restarts from
//!                            the table's checkpoints: nothing to the DLQ, nothing lost
//! ```
//!
//! An id's schema never changes (Confluent: ids are immutable), so a resolved id is kept for the
//! process. A lookup is bounded: [`ATTEMPT_TIMEOUT`] per HTTP request, every URL tried in turn
//! per attempt, [`LOOKUP_ATTEMPTS`] attempts with backoff within [`LOOKUP_BUDGET`]; after a failed
//! lookup, lookups fail at once for [`UNAVAILABLE_COOLDOWN`]. The raw calls are in [`api`]; they
//! are tested against the local registry of deploy/local.
//!
//! Schemas are keyed for the evolution machinery ([`crate::iceberg`]'s `floe.schema-history`)
//! by a [`SchemaKey`]: the id and the message indexes packed into a UUID ([`SchemaKey::to_uuid`]),
//! so a Confluent id is recorded where a Glue schema version id is.

pub mod api;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::config::{ConfluentSchemaConfig, ENV_REGISTRY_BASIC_AUTH, ENV_REGISTRY_BEARER_TOKEN};
use crate::model::{DlqCode, DlqReason};
use crate::registry::framing::confluent::SchemaKey;
use crate::retry::{with_retries, Backoff};
use crate::schema::protobuf::MessageSelector;
use crate::schema::MappedSchema;
use api::{Auth, HttpRegistry, RawSchema, RawSubjectVersion};

/// Timeout of connecting to one registry URL.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
/// Timeout of one HTTP request to one registry URL.
pub const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(5);
/// Attempts of one lookup (each over every URL) while the registry is unavailable.
pub const LOOKUP_ATTEMPTS: u32 = 4;
/// Time budget of one lookup, attempts and backoff included.
pub const LOOKUP_BUDGET: Duration = Duration::from_secs(20);
/// After a lookup failed every attempt, lookups fail at once for this long.
pub const UNAVAILABLE_COOLDOWN: Duration = Duration::from_secs(10);
/// How long an id the registry does not know stays unknown before it is asked again.
pub const NEGATIVE_TTL: Duration = Duration::from_secs(300);
/// Deepest chain of schema references followed.
pub const MAX_REFERENCE_DEPTH: usize = 32;

/// Why a lookup failed, shaped by what the caller does next.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RegistryError {
    /// The subject, version or id does not exist (HTTP 404): definitive.
    #[error("not found in the schema registry: {0}")]
    NotFound(String),
    /// Refused (401, 403, another 4xx, bad credentials or configuration): an operator must act.
    #[error("refused by the schema registry: {0}")]
    Refused(String),
    /// Every URL failed to connect, timed out or answered 5xx/429: retry later.
    #[error("schema registry unavailable: {0}")]
    Unavailable(String),
}

impl RegistryError {
    /// Whether retrying may succeed.
    pub fn is_retryable(&self) -> bool {
        matches!(self, RegistryError::Unavailable(_))
    }
}

/// The schema language of a registered schema (`schemaType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SchemaType {
    /// `AVRO` (the registry omits `schemaType` for it).
    Avro,
    /// `PROTOBUF`.
    Protobuf,
    /// `JSON` (JSON Schema).
    Json,
}

impl SchemaType {
    fn parse(text: Option<&str>) -> Result<Self, RegistryError> {
        match text {
            None | Some("AVRO") => Ok(SchemaType::Avro),
            Some("PROTOBUF") => Ok(SchemaType::Protobuf),
            Some("JSON") => Ok(SchemaType::Json),
            Some(other) => Err(RegistryError::Refused(format!(
                "unknown schemaType \"{other}\""
            ))),
        }
    }

    /// The registry's name: `AVRO`, `PROTOBUF`, `JSON`.
    pub fn as_str(&self) -> &'static str {
        match self {
            SchemaType::Avro => "AVRO",
            SchemaType::Protobuf => "PROTOBUF",
            SchemaType::Json => "JSON",
        }
    }
}

/// A referenced schema, resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedReference {
    /// The name the referencing schema uses (Protobuf: the import path).
    pub name: String,
    /// Its subject and version.
    pub subject: String,
    /// Its version.
    pub version: i64,
    /// Its text.
    pub schema: String,
}

/// A schema id, resolved: its text, its references (recursively, dependencies first) and the
/// subject versions registered with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedSchema {
    /// The schema id.
    pub id: u32,
    /// Its language.
    pub schema_type: SchemaType,
    /// Its text.
    pub schema: String,
    /// Every schema it references, directly or not, each once, dependencies before dependents.
    pub references: Vec<ResolvedReference>,
    /// The subject versions that are this schema.
    pub subjects: Vec<(String, i64)>,
}

impl ResolvedSchema {
    /// The version of `subject` this schema is, if any.
    pub fn version_in(&self, subject: &str) -> Option<i64> {
        self.subjects
            .iter()
            .filter(|(s, _)| s == subject)
            .map(|(_, v)| *v)
            .max()
    }
}

#[derive(Debug, Default)]
struct Caches {
    by_id: HashMap<u32, Arc<ResolvedSchema>>,
    unknown: HashMap<u32, Instant>,
    unavailable_until: Option<Instant>,
}

/// A Confluent-compatible schema registry as the pipeline uses it: ids resolved once per
/// process, lookups retried with backoff over the configured URLs.
pub struct ConfluentClient {
    http: HttpRegistry,
    /// The channel's subject.
    subject: String,
    caches: Mutex<Caches>,
    first_backoff: Duration,
    cooldown: Duration,
    lookups: AtomicU64,
    /// Whether the registry was found without `GET /schemas/ids/{id}/versions` (logged once).
    versions_endpoint_missing: AtomicBool,
}

impl std::fmt::Debug for ConfluentClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConfluentClient")
            .field("http", &self.http)
            .field("subject", &self.subject)
            .finish_non_exhaustive()
    }
}

/// The credentials of the environment: [`ENV_REGISTRY_BASIC_AUTH`] (`user:password`) or
/// [`ENV_REGISTRY_BEARER_TOKEN`].
///
/// Errors: [`RegistryError::Refused`] when both are set, or the basic one has no `:`.
pub fn auth_from_env(vars: impl Fn(&str) -> Option<String>) -> Result<Auth, RegistryError> {
    let basic = vars(ENV_REGISTRY_BASIC_AUTH).filter(|v| !v.is_empty());
    let bearer = vars(ENV_REGISTRY_BEARER_TOKEN).filter(|v| !v.is_empty());
    match (basic, bearer) {
        (Some(_), Some(_)) => Err(RegistryError::Refused(format!(
            "both {ENV_REGISTRY_BASIC_AUTH} and {ENV_REGISTRY_BEARER_TOKEN} are set: set one"
        ))),
        (Some(b), None) if !b.contains(':') => Err(RegistryError::Refused(format!(
            "{ENV_REGISTRY_BASIC_AUTH} must be \"user:password\""
        ))),
        (Some(b), None) => Ok(Auth::Basic(b)),
        (None, Some(t)) => Ok(Auth::Bearer(t)),
        (None, None) => Ok(Auth::None),
    }
}

impl ConfluentClient {
    /// A client for channel `config`'s registry, credentials from the process environment.
    ///
    /// Errors: [`RegistryError::Refused`] (credentials, CA bundle, URLs).
    pub fn from_config(config: &ConfluentSchemaConfig) -> Result<Self, RegistryError> {
        let auth = auth_from_env(|k| std::env::var(k).ok())?;
        let pem = match &config.ca_bundle {
            Some(path) => Some(std::fs::read(path).map_err(|e| {
                RegistryError::Refused(format!("ca_bundle {}: {e}", path.display()))
            })?),
            None => None,
        };
        Ok(Self::new(
            HttpRegistry::new(&config.urls, auth, pem.as_deref())?,
            &config.subject,
        ))
    }

    /// A client over `http` for the channel's `subject`.
    pub fn new(http: HttpRegistry, subject: &str) -> Self {
        ConfluentClient {
            http,
            subject: subject.to_string(),
            caches: Mutex::default(),
            first_backoff: Duration::from_millis(200),
            cooldown: UNAVAILABLE_COOLDOWN,
            lookups: AtomicU64::new(0),
            versions_endpoint_missing: AtomicBool::new(false),
        }
    }

    /// Sets the first retry delay (doubling) and the cooldown after an outage.
    pub fn with_backoff(self, first_backoff: Duration, cooldown: Duration) -> Self {
        ConfluentClient {
            first_backoff,
            cooldown,
            ..self
        }
    }

    /// The channel's subject.
    pub fn subject(&self) -> &str {
        &self.subject
    }

    /// Remote requests made so far (each retry counts).
    pub fn lookups(&self) -> u64 {
        self.lookups.load(Ordering::Relaxed)
    }

    /// One GET, retried with backoff while unavailable, within [`LOOKUP_BUDGET`].
    async fn get<T: serde::de::DeserializeOwned>(
        &self,
        segments: &[&str],
    ) -> Result<T, RegistryError> {
        self.get_with_query(segments, &[]).await
    }

    /// [`Self::get`] with query parameters.
    async fn get_with_query<T: serde::de::DeserializeOwned>(
        &self,
        segments: &[&str],
        query: &[(&str, &str)],
    ) -> Result<T, RegistryError> {
        let attempts = with_retries(
            LOOKUP_ATTEMPTS,
            Backoff::new(self.first_backoff, Duration::MAX),
            "schema registry request",
            RegistryError::is_retryable,
            || {
                self.lookups.fetch_add(1, Ordering::Relaxed);
                self.http.get_with_query(segments, query)
            },
        );
        match tokio::time::timeout(LOOKUP_BUDGET, attempts).await {
            Ok(r) => r,
            Err(_) => Err(RegistryError::Unavailable(format!(
                "no answer within {}s",
                LOOKUP_BUDGET.as_secs()
            ))),
        }
    }

    /// Version `version` (`"latest"` or a number) of `subject`, its references resolved.
    ///
    /// Errors: as [`ConfluentClient::by_id`].
    pub async fn subject_version(
        &self,
        subject: &str,
        version: &str,
    ) -> Result<Arc<ResolvedSchema>, RegistryError> {
        let raw: RawSchema = self
            .get(&["subjects", subject, "versions", version])
            .await?;
        let (Some(id), Some(v)) = (raw.id, raw.version) else {
            return Err(RegistryError::Unavailable(format!(
                "GET /subjects/{subject}/versions/{version} answered without id or version"
            )));
        };
        if let Some(known) = self.cached(id) {
            return Ok(known);
        }
        let resolved = self
            .resolve(id, raw, vec![(subject.to_string(), v)])
            .await?;
        Ok(self.remember(resolved))
    }

    /// The latest version of the channel's subject.
    ///
    /// Errors: as [`ConfluentClient::by_id`].
    pub async fn latest(&self) -> Result<Arc<ResolvedSchema>, RegistryError> {
        self.subject_version(&self.subject.clone(), "latest").await
    }

    fn cached(&self, id: u32) -> Option<Arc<ResolvedSchema>> {
        self.caches
            .lock()
            .expect("cache lock")
            .by_id
            .get(&id)
            .cloned()
    }

    fn remember(&self, r: ResolvedSchema) -> Arc<ResolvedSchema> {
        let r = Arc::new(r);
        let mut c = self.caches.lock().expect("cache lock");
        c.unknown.remove(&r.id);
        c.by_id.entry(r.id).or_insert(r).clone()
    }

    /// Schema `id`, its references and its subjects: from the cache, or from the registry (then
    /// cached for the process). An id the registry does not know is answered from a negative
    /// cache for [`NEGATIVE_TTL`]; after the retries failed, lookups fail at once for
    /// [`UNAVAILABLE_COOLDOWN`].
    ///
    /// Errors: [`RegistryError::NotFound`] (unknown id), [`RegistryError::Refused`],
    /// [`RegistryError::Unavailable`].
    pub async fn by_id(&self, id: u32) -> Result<Arc<ResolvedSchema>, RegistryError> {
        {
            let c = self.caches.lock().expect("cache lock");
            if let Some(r) = c.by_id.get(&id) {
                return Ok(r.clone());
            }
            if let Some(at) = c.unknown.get(&id) {
                if at.elapsed() < NEGATIVE_TTL {
                    return Err(RegistryError::NotFound(format!(
                        "schema id {id} (looked up {}s ago)",
                        at.elapsed().as_secs()
                    )));
                }
            }
            if c.unavailable_until.is_some_and(|t| Instant::now() < t) {
                return Err(RegistryError::Unavailable(format!(
                    "schema id {id} not looked up: the registry failed recently"
                )));
            }
        }
        let found = self.fetch_id(id).await;
        let mut c = self.caches.lock().expect("cache lock");
        c.unavailable_until = match &found {
            Err(RegistryError::Unavailable(_)) => Some(Instant::now() + self.cooldown),
            _ => None,
        };
        if let Err(RegistryError::NotFound(_)) = &found {
            c.unknown.insert(id, Instant::now());
        }
        drop(c);
        found.map(|r| self.remember(r))
    }

    async fn fetch_id(&self, id: u32) -> Result<ResolvedSchema, RegistryError> {
        let text = id.to_string();
        let raw: RawSchema = self.get(&["schemas", "ids", &text]).await?;
        // `deleted=true`: a version soft-deleted after its records were produced still names the
        // subject its records belong to (Confluent hides such versions by default).
        let subjects: Vec<(String, i64)> = match self
            .get_with_query::<Vec<RawSubjectVersion>>(
                &["schemas", "ids", &text, "versions"],
                &[("deleted", "true")],
            )
            .await
        {
            Ok(s) => s.into_iter().map(|s| (s.subject, s.version)).collect(),
            // The id exists (answered above): a registry without the endpoint, such as a
            // minimal one serving only the serializers' calls. Before deciding the id belongs to
            // no subject, look among the channel subject's versions.
            Err(RegistryError::NotFound(_)) => self.subject_versions_of(id).await?,
            Err(e) => return Err(e),
        };
        self.resolve(id, raw, subjects).await
    }

    /// The versions of the channel's subject that are schema `id`, for a registry without
    /// `GET /schemas/ids/{id}/versions`: `GET /subjects/{subject}/versions`, then each version,
    /// newest first, until one is `id` (soft-deleted versions included, as above). Logs once
    /// per client which endpoint is missing. Empty when no version of the subject is `id`.
    ///
    /// Errors: as [`ConfluentClient::by_id`].
    async fn subject_versions_of(&self, id: u32) -> Result<Vec<(String, i64)>, RegistryError> {
        if !self.versions_endpoint_missing.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                subject = %self.subject,
                "the schema registry answers GET /schemas/ids/{{id}}/versions with not found: a new schema id's subject is looked up among the channel subject's versions instead (GET /subjects/{{subject}}/versions)"
            );
        }
        let deleted = [("deleted", "true")];
        let versions: Vec<i64> = match self
            .get_with_query(&["subjects", &self.subject, "versions"], &deleted)
            .await
        {
            Ok(versions) => versions,
            Err(RegistryError::NotFound(_)) => return Ok(Vec::new()),
            Err(e) => return Err(e),
        };
        for version in versions.into_iter().rev() {
            let text = version.to_string();
            let raw: RawSchema = self
                .get_with_query(&["subjects", &self.subject, "versions", &text], &deleted)
                .await?;
            if raw.id == Some(id) {
                return Ok(vec![(self.subject.clone(), version)]);
            }
        }
        Ok(Vec::new())
    }

    /// Resolves `raw`'s references (depth first, each subject version once).
    async fn resolve(
        &self,
        id: u32,
        raw: RawSchema,
        subjects: Vec<(String, i64)>,
    ) -> Result<ResolvedSchema, RegistryError> {
        let schema_type = SchemaType::parse(raw.schema_type.as_deref())?;
        let mut references = Vec::new();
        // (reference, depth, children pushed?)
        let mut stack: Vec<(api::RawReference, usize, Option<String>)> = raw
            .references
            .into_iter()
            .rev()
            .map(|r| (r, 1, None))
            .collect();
        while let Some((r, depth, text)) = stack.pop() {
            if references
                .iter()
                .any(|d: &ResolvedReference| d.subject == r.subject && d.version == r.version)
            {
                continue;
            }
            if let Some(schema) = text {
                references.push(ResolvedReference {
                    name: r.name,
                    subject: r.subject,
                    version: r.version,
                    schema,
                });
                continue;
            }
            if depth > MAX_REFERENCE_DEPTH {
                return Err(RegistryError::Refused(format!(
                    "schema id {id}: references nested deeper than {MAX_REFERENCE_DEPTH}"
                )));
            }
            let version = r.version.to_string();
            let found: RawSchema = self
                .get(&["subjects", &r.subject, "versions", &version])
                .await
                .map_err(|e| match e {
                    RegistryError::NotFound(why) => RegistryError::NotFound(format!(
                        "schema id {id} references {} version {}: {why}",
                        r.subject, r.version
                    )),
                    e => e,
                })?;
            let children = found.references;
            stack.push((r, depth, Some(found.schema)));
            stack.extend(children.into_iter().rev().map(|c| (c, depth + 1, None)));
        }
        Ok(ResolvedSchema {
            id,
            schema_type,
            schema: raw.schema,
            references,
            subjects,
        })
    }
}

/// Maps a resolved schema to Iceberg. JSON Schema: the document (references are refused);
/// Avro and Protobuf through their mappers (the record's message by `indexes`, or `message`).
///
/// Errors: the mapping's reason, naming the schema id.
pub fn map_schema(
    resolved: &ResolvedSchema,
    partition_field: &str,
    message: Option<&MessageSelector>,
) -> Result<MappedSchema, String> {
    let id = resolved.id;
    match resolved.schema_type {
        SchemaType::Json => {
            if !resolved.references.is_empty() {
                return Err(format!(
                    "schema id {id}: JSON Schema references to other subjects are not supported"
                ));
            }
            let doc: serde_json::Value = serde_json::from_str(&resolved.schema)
                .map_err(|e| format!("schema id {id}: not JSON: {e}"))?;
            MappedSchema::from_json_schema(&doc, partition_field)
                .map_err(|e| format!("schema id {id}: {e}"))
        }
        SchemaType::Avro => {
            let references: Vec<String> = resolved
                .references
                .iter()
                .map(|r| r.schema.clone())
                .collect();
            MappedSchema::from_avro(&resolved.schema, &references, partition_field)
                .map_err(|e| format!("schema id {id}: {e}"))
        }
        SchemaType::Protobuf => {
            let files = proto_files(resolved);
            let first = MessageSelector::Indexes(vec![0]);
            MappedSchema::from_protobuf(&files, message.unwrap_or(&first), partition_field)
                .map_err(|e| format!("schema id {id}: {e}"))
        }
    }
}

/// Maps Avro writer schema `writer`, an older version than `reader`, for the table
/// ([`MappedSchema::from_avro_older`]): resolved against `reader` (Avro 1.11 "Schema
/// Resolution": the reader's defaults for the fields the writer lacks, its promotions) unless
/// that would skip a field the writer has.
///
/// Errors: either schema has no mapping, or the pair cannot be resolved; naming both ids.
pub fn map_avro_resolved(
    writer: &ResolvedSchema,
    reader: &ResolvedSchema,
    partition_field: &str,
) -> Result<MappedSchema, String> {
    let texts = |r: &ResolvedSchema| -> Vec<String> {
        r.references.iter().map(|x| x.schema.clone()).collect()
    };
    MappedSchema::from_avro_older(
        &writer.schema,
        &texts(writer),
        &reader.schema,
        &texts(reader),
        partition_field,
    )
    .map_err(|e| {
        format!(
            "schema id {} read as schema id {}: {e}",
            writer.id, reader.id
        )
    })
}

/// The Confluent message indexes of the message `name` (a full name) in Protobuf schema
/// `resolved` (compiled with its references and the well-known types).
///
/// Errors: the schema does not compile, or its file has no such message.
pub fn message_indexes(resolved: &ResolvedSchema, name: &str) -> Result<Vec<i32>, String> {
    crate::schema::protobuf::message_indexes(&proto_files(resolved), name)
        .map_err(|e| format!("schema id {}: {e}", resolved.id))
}

/// Protobuf schema `resolved` as `.proto` files: `[0]` the schema itself, then its references
/// by the import names it uses.
fn proto_files(resolved: &ResolvedSchema) -> Vec<crate::schema::protobuf::ProtoFile> {
    use crate::schema::protobuf::ProtoFile;
    let mut files = vec![ProtoFile {
        name: format!("confluent-schema-{}.proto", resolved.id),
        text: resolved.schema.clone(),
    }];
    files.extend(resolved.references.iter().map(|r| ProtoFile {
        name: r.name.clone(),
        text: r.schema.clone(),
    }));
    files
}

/// Why a record of schema `key` (resolved, not the channel's) goes to the DLQ: a schema of
/// another subject, or another version of the channel's subject under `evolution = "none"`, is
/// `SCHEMA_MISMATCH`.
pub fn not_the_channels(resolved: &ResolvedSchema, key: &SchemaKey, subject: &str) -> DlqReason {
    let message = match resolved.version_in(subject) {
        Some(v) => format!(
            "{key} (version {v} of subject {subject}) is not the channel's schema (channel.schema.evolution is \"none\")"
        ),
        None => {
            let subjects: Vec<&str> = resolved.subjects.iter().map(|(s, _)| s.as_str()).collect();
            format!("{key} is not a version of the channel's subject {subject} (its subjects: {subjects:?})")
        }
    };
    DlqReason::record(DlqCode::SchemaMismatch, message)
}

/// Why a record whose schema id the registry does not know goes to the DLQ: `INVALID_SCHEMA`.
pub fn unknown_id(key: &SchemaKey) -> DlqReason {
    DlqReason::record(
        DlqCode::InvalidSchema,
        format!("unknown {key}: the schema registry does not have it"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_name_gives_the_confluent_indexes() {
        // As deploy/local/README.md: in `message Event { map<string, int64> counts = 3; message
        // Inner {…} }`, Event.Inner is [1, 1] when Event is the file's second message.
        let resolved = ResolvedSchema {
            id: 9,
            schema_type: SchemaType::Protobuf,
            schema: "syntax = \"proto3\";\npackage acme;\nimport \"common.proto\";\nimport \"google/protobuf/timestamp.proto\";\nmessage First { int64 a = 1; }\nmessage Event { map<string, int64> counts = 3; message Inner { acme.common.Id id = 1; } google.protobuf.Timestamp at = 4; }\n".into(),
            references: vec![ResolvedReference {
                name: "common.proto".into(),
                subject: "common.proto".into(),
                version: 1,
                schema: "syntax = \"proto3\";\npackage acme.common;\nmessage Id { string v = 1; }\n".into(),
            }],
            subjects: vec![],
        };
        assert_eq!(message_indexes(&resolved, "acme.First"), Ok(vec![0]));
        assert_eq!(message_indexes(&resolved, "acme.Event"), Ok(vec![1]));
        assert_eq!(
            message_indexes(&resolved, ".acme.Event.Inner"),
            Ok(vec![1, 1])
        );
        assert!(
            message_indexes(&resolved, "acme.common.Id").is_err(),
            "a reference's message"
        );
        assert!(message_indexes(&resolved, "acme.Nope").is_err());
    }

    #[test]
    fn credentials_come_from_one_environment_variable() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |k: &str| {
                pairs
                    .iter()
                    .find(|(n, _)| *n == k)
                    .map(|(_, v)| v.to_string())
            }
        };
        assert_eq!(auth_from_env(env(&[])), Ok(Auth::None));
        assert_eq!(
            auth_from_env(env(&[(ENV_REGISTRY_BASIC_AUTH, "u:p")])),
            Ok(Auth::Basic("u:p".into()))
        );
        assert_eq!(
            auth_from_env(env(&[(ENV_REGISTRY_BEARER_TOKEN, "t")])),
            Ok(Auth::Bearer("t".into()))
        );
        assert!(auth_from_env(env(&[(ENV_REGISTRY_BASIC_AUTH, "nocolon")])).is_err());
        assert!(auth_from_env(env(&[
            (ENV_REGISTRY_BASIC_AUTH, "u:p"),
            (ENV_REGISTRY_BEARER_TOKEN, "t")
        ]))
        .is_err());
    }
}
