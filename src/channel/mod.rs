//! The control plane: a channel's life cycle in the lease store (`floe channel
//! create|describe|list|update|delete`), what `floe run` accepts to start, and the watch that
//! stops a running channel when it is deleted.
//!
//! ```text
//!            create (validated)            table created or checked
//!  (none) ───────────────────> CREATING ─────────────────────────────> ACTIVE <── floe run
//!    │                            │ table refused (not floe's, incompatible)   │  (first start,
//!    │                            v                                            │   no create)
//!    │                         FAILED ──┐                 table dropped        v
//!    │                                  │ delete        (workers) ────────> SUSPENDED
//!    │                                  v                                      │
//!    │                              DELETING <──────── delete ─────────────────┘ (and ACTIVE)
//!    │                                  │ create: a new activation; the table's checkpoints
//!    └──────────────────────────────────┘ still decide where every shard resumes
//! ```
//!
//! Invariant: nothing here moves a checkpoint or touches a table's data. A deleted channel
//! keeps everything it delivered; re-creating it resumes after the table's checkpoints, so no
//! record is delivered twice. Every state write is conditional on the version read (the
//! store's compare-and-swap), so concurrent operators and workers never lose an update.

pub mod activate;
pub mod schema_file;

use activate::ActivateError;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use iceberg::table::Table;
use iceberg::{Catalog, NamespaceIdent, TableIdent};
use serde::Serialize;
use tokio_util::sync::CancellationToken;

use crate::config::{ChannelConfig, Config, ConfigError, DestinationConfig, DlqLocation};
use crate::iceberg::table_state::SUMMARY_RANGES;
use crate::lease::{
    ChannelOverrides, ChannelState, ChannelStatus, DeliveryLog, LeaseError, LeaseKey, Store,
};
use crate::time::now_ms;

pub use crate::lease::STATE_POLL_INTERVAL;

/// An error of a control-plane operation, by what the operator does next.
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    /// The request is refused: fix the configuration or the request (exit 78). Each problem
    /// names its key path, as `floe validate` does.
    #[error("{}", crate::config::ConfigErrors(.0.clone()))]
    Refused(Vec<ConfigError>),
    /// The lease store or the catalog cannot be reached: retry later (exit 1).
    #[error("unavailable: {0}")]
    Unavailable(String),
}

impl ControlError {
    fn refused(path: impl Into<String>, message: impl Into<String>) -> Self {
        ControlError::Refused(vec![ConfigError {
            path: path.into(),
            message: message.into(),
        }])
    }

    /// The process exit code: 78 (`EX_CONFIG`) for a refusal, 1 for an unavailable dependency.
    pub fn exit_code(&self) -> u8 {
        match self {
            ControlError::Refused(_) => 78,
            ControlError::Unavailable(_) => 1,
        }
    }
}

impl From<ActivateError> for ControlError {
    fn from(e: ActivateError) -> Self {
        match e {
            ActivateError::Refused { path, message } => ControlError::refused(path, message),
            ActivateError::Failed { path, reason, fix } => ControlError::refused(
                path,
                format!("{reason}; the channel is FAILED: delete it, {fix}, and create it again"),
            ),
            ActivateError::Suspended(reason) => {
                ControlError::refused("channel", format!("SUSPENDED: {reason}"))
            }
            ActivateError::Unavailable(m) => ControlError::Unavailable(m),
        }
    }
}

impl From<LeaseError> for ControlError {
    fn from(e: LeaseError) -> Self {
        ControlError::Unavailable(format!("lease store: {e}"))
    }
}

fn state_path(channel: &str) -> String {
    format!("channel {channel:?}")
}

// ---------------------------------------------------------------------------------------------
// The state machine, pure

/// What `floe run` does with a channel's stored state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunDecision {
    /// No state yet: activate it now (first start without `floe channel create`).
    Activate,
    /// ACTIVE: deliver.
    Deliver,
    /// Refused, with the message for the operator.
    Refuse(String),
}

/// Decides whether `floe run` may deliver a channel in this state.
pub fn run_decision(state: Option<&ChannelState>) -> RunDecision {
    let Some(state) = state else {
        return RunDecision::Activate;
    };
    let reason = state
        .status_reason
        .as_deref()
        .unwrap_or("no reason recorded");
    match state.state {
        ChannelStatus::Active => RunDecision::Deliver,
        ChannelStatus::Suspended => RunDecision::Refuse(format!(
            "the channel is SUSPENDED: {reason}; it is not restarted automatically: floe never writes into a table that replaced the one it delivered to (records would be delivered twice). To start over into a new table, give the channel a new name"
        )),
        ChannelStatus::Failed => RunDecision::Refuse(format!(
            "the channel is FAILED: {reason}; it is not recoverable: `floe channel delete` it, fix the configuration, then `floe channel create` it"
        )),
        ChannelStatus::Deleting => RunDecision::Refuse(
            "the channel is DELETING (deleted with `floe channel delete`): remove it from the configuration, or `floe channel create` it again".to_string(),
        ),
        ChannelStatus::Creating => RunDecision::Refuse(
            "the channel is CREATING: `floe channel create` did not finish; run it again".to_string(),
        ),
    }
}

/// What `floe channel create` does with a channel's stored state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CreateDecision {
    /// Record CREATING (no state, or a deleted channel created again), then create the table.
    Start,
    /// CREATING already (an earlier create stopped halfway): go on.
    Resume,
    /// ACTIVE already: nothing to do (create is idempotent).
    AlreadyActive,
    /// Refused, with the message.
    Refuse(String),
}

/// Decides what `floe channel create` does.
pub fn create_decision(state: Option<&ChannelState>) -> CreateDecision {
    match state.map(|s| s.state) {
        None | Some(ChannelStatus::Deleting) => CreateDecision::Start,
        Some(ChannelStatus::Creating) => CreateDecision::Resume,
        Some(ChannelStatus::Active) => CreateDecision::AlreadyActive,
        Some(s @ (ChannelStatus::Failed | ChannelStatus::Suspended)) => {
            CreateDecision::Refuse(format!(
                "the channel exists and is {}: {}; `floe channel delete` it first",
                status_name(s),
                state
                    .and_then(|s| s.status_reason.as_deref())
                    .unwrap_or("no reason recorded")
            ))
        }
    }
}

/// Whether `floe channel update` may change a channel in this state.
pub fn update_allowed(state: Option<&ChannelState>) -> Result<(), String> {
    match state.map(|s| s.state) {
        Some(ChannelStatus::Active | ChannelStatus::Suspended) => Ok(()),
        None => Err("the channel does not exist: `floe channel create` it first".into()),
        Some(s) => Err(format!(
            "the channel is {}: only an ACTIVE or SUSPENDED channel can be updated",
            status_name(s)
        )),
    }
}

/// The state's name as operators see it (`ACTIVE`, …).
pub fn status_name(status: ChannelStatus) -> &'static str {
    match status {
        ChannelStatus::Creating => "CREATING",
        ChannelStatus::Active => "ACTIVE",
        ChannelStatus::Failed => "FAILED",
        ChannelStatus::Suspended => "SUSPENDED",
        ChannelStatus::Deleting => "DELETING",
    }
}

/// The data freshness a channel runs with: the override of `floe channel update`, else the
/// configuration's.
pub fn effective_freshness(config: &ChannelConfig, overrides: &ChannelOverrides) -> Duration {
    overrides
        .data_freshness_ms
        .map(Duration::from_millis)
        .unwrap_or(config.destination.data_freshness())
}

// ---------------------------------------------------------------------------------------------
// Helpers shared by the operations

/// The channel named `name` in `config`, with the index of its `[[channel]]` (for key paths):
/// a configured channel, a member `<channel>.<table>` of a channel with `table = "{route}"`, or
/// a member `<channel>.<topic>` of a channel with `table = "{topic}"` resolved by
/// [`resolve_members`] (docs/routing.md).
///
/// Errors: [`ControlError::Refused`] when the file has no such channel.
pub fn find_channel(config: &Config, name: &str) -> Result<(usize, ChannelConfig), ControlError> {
    config
        .channels
        .iter()
        .enumerate()
        .find_map(|(i, c)| {
            if c.name == name {
                return Some((i, c.clone()));
            }
            let route = c.destination.iceberg()?.route.as_ref()?;
            let table = route
                .tables()
                .into_iter()
                .find(|t| crate::config::member_name(&c.name, t) == name)?;
            Some((i, c.route_member(table)))
        })
        .or_else(|| {
            config
                .members
                .iter()
                .find(|(_, c)| c.name == name)
                .map(|(i, c)| (*i, c.clone()))
        })
        .ok_or_else(|| {
            ControlError::refused(
                "channel",
                format!(
                    "no channel {name:?} in the configuration file (it has {})",
                    config
                        .channels
                        .iter()
                        .map(|c| c.name.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            )
        })
}

/// Resolves the member channels of every channel of `config` with `table = "{topic}"` (one per
/// topic the cluster has now, [`ChannelConfig::member`]) or `table = "{route}"` (one per table,
/// [`ChannelConfig::route_member`]) into `config.members`, so that the control plane can
/// create, list, describe, update and delete them by name. Topics past
/// `max_tables`, or whose table name another topic has, are left out as `floe run` leaves them
/// out.
///
/// Errors: [`ControlError::Unavailable`] when a Kafka cluster does not answer the topic listing;
/// [`ControlError::Refused`] when librdkafka refuses the client properties.
pub async fn resolve_members(
    config: &mut Config,
    store: &dyn Store,
) -> Result<Vec<(String, String, crate::config::TopicRefusal)>, ControlError> {
    let mut members = Vec::new();
    let mut left_out = Vec::new();
    for (index, channel) in config.channels.iter().enumerate() {
        // A routed channel's members are its tables, known from the file.
        if let Some(route) = channel.destination.iceberg().and_then(|d| d.route.as_ref()) {
            for table in route.tables() {
                members.push((index, channel.route_member(table)));
            }
            continue;
        }
        let (crate::config::SourceConfig::Kafka(kafka), Some(dest)) =
            (&channel.source, channel.destination.iceberg())
        else {
            continue;
        };
        if !channel.is_table_per_topic() {
            continue;
        }
        let lister = crate::source::kafka::topics::KafkaTopicsSource::try_new(&channel.name, kafka)
            .map_err(|e| ControlError::refused(format!("channel[{index}].source"), e.to_string()))?
            .at_index(index);
        let topics = lister.topics().await.map_err(|e| {
            ControlError::Unavailable(format!(
                "listing the topics of channel {}: {e}",
                channel.name
            ))
        })?;
        // The choice `floe run` makes (crate::config::admit_topics): members with a state
        // first, whatever the limit, so the control plane reaches every table delivered.
        let mut known = std::collections::BTreeSet::new();
        for topic in &topics {
            let member = crate::config::member_name(&channel.name, topic);
            if store.get_channel_state(&member).await?.is_some() {
                known.insert(topic.clone());
            }
        }
        let (admitted, refused) =
            crate::config::admit_topics(&channel.name, &topics, &known, dest.max_tables as usize);
        members.extend(admitted.iter().map(|t| (index, channel.member(t))));
        left_out.extend(
            refused
                .into_iter()
                .map(|(topic, why)| (channel.name.clone(), topic, why)),
        );
    }
    members.sort_by(|a, b| (a.0, &a.1.name).cmp(&(b.0, &b.1.name)));
    config.members = members;
    Ok(left_out)
}

/// The member channels of channel `name`: `<channel>.<table>` of each table of a channel with
/// `table = "{route}"`, in table order; `<channel>.<topic>` of each topic of a channel with
/// `table = "{topic}"` resolved by [`resolve_members`], in topic order; none for any other
/// channel.
pub fn member_names(config: &Config, name: &str) -> Vec<String> {
    let Some(index) = config.channels.iter().position(|c| c.name == name) else {
        return Vec::new();
    };
    let channel = &config.channels[index];
    if let Some(route) = channel.destination.iceberg().and_then(|d| d.route.as_ref()) {
        return route
            .tables()
            .into_iter()
            .map(|t| crate::config::member_name(name, t))
            .collect();
    }
    config
        .members
        .iter()
        .filter(|(i, _)| *i == index)
        .map(|(_, c)| c.name.clone())
        .collect()
}

/// `floe channel create` of a channel with `table = "{topic}"` or `table = "{route}"` itself
/// (its members are created as channels of their own): records it ACTIVE with its activation
/// time, every member's. A DELETING channel is activated anew.
///
/// Errors: [`ControlError::Refused`] for a FAILED or SUSPENDED state; [`ControlError::Unavailable`]
/// when the lease store fails.
pub async fn activate_parent(name: &str, store: &dyn Store) -> Result<ChannelState, ControlError> {
    let current = store.get_channel_state(name).await?;
    match create_decision(current.as_ref()) {
        CreateDecision::AlreadyActive => Ok(current.expect("active state")),
        CreateDecision::Refuse(message) => Err(ControlError::refused(state_path(name), message)),
        CreateDecision::Start | CreateDecision::Resume => {
            let expected = current.as_ref().map(|s| s.version);
            let now = now_ms();
            let active = ChannelState {
                channel: name.to_string(),
                state: ChannelStatus::Active,
                status_reason: None,
                activated_at_ms: Some(now),
                table_uuid: None,
                schema_version_id: None,
                version: 0,
                updated_at_ms: 0,
                overrides: current.map(|s| s.overrides).unwrap_or_default(),
                from_first_record: false,
            };
            let active = put(store, active, expected).await?;
            tracing::info!(
                channel = name,
                activated_at_ms = now,
                "channel (a table per topic or route) activated"
            );
            Ok(active)
        }
    }
}

/// The channel's table identifier; `None` for a raw S3 destination.
pub fn table_ident(config: &ChannelConfig) -> Option<TableIdent> {
    let dest = config.destination.iceberg()?;
    Some(TableIdent::new(
        NamespaceIdent::new(dest.namespace.clone()),
        dest.table.clone(),
    ))
}

/// What `describe` and `list` show as the destination: `namespace.table`, or
/// `s3://bucket/key template` for a raw channel.
pub fn destination_name(config: &ChannelConfig) -> String {
    match &config.destination {
        DestinationConfig::S3(raw) => {
            format!("s3://{}/{}", raw.location.bucket, raw.key_template.as_str())
        }
        DestinationConfig::Iceberg(_) => table_ident(config)
            .map(|i| i.to_string())
            .unwrap_or_default(),
    }
}

/// Opens the catalog of channel `config` (at `channel[index]` of the configuration).
///
/// Errors: [`ControlError::Refused`] naming the catalog key to fix; [`ControlError::Unavailable`].
pub async fn open_catalog(
    index: usize,
    config: &ChannelConfig,
    aws: &crate::aws::AwsClients,
) -> Result<Arc<dyn Catalog>, ControlError> {
    Ok(activate::open_catalog(index, config, aws).await?)
}

/// Checks that the DLQ can be written. A local directory is created, and a probe file written,
/// synced and removed; an S3 bucket must exist, be owned by the expected account and accept a
/// put.
///
/// Errors: the problem, at key path `channel[index].dlq.path` (or `.bucket`).
pub async fn check_dlq_writable(
    index: usize,
    config: &ChannelConfig,
    aws: &crate::aws::AwsClients,
) -> Result<(), ConfigError> {
    let Some(dlq) = &config.dlq else {
        // A raw channel has no DLQ: its bucket must take a staged object instead.
        let DestinationConfig::S3(raw) = &config.destination else {
            return Ok(());
        };
        let store = crate::raw::RawStore::new(aws.s3(), raw.location.clone(), &config.name);
        return store.check_writable().await.map_err(|e| ConfigError {
            path: format!("channel[{index}].destination.bucket"),
            message: format!(
                "s3://{}/{} is not writable: {e}",
                raw.location.bucket,
                crate::raw::STAGING_PREFIX
            ),
        });
    };
    let dir = match &dlq.location {
        DlqLocation::Local(dir) => dir,
        DlqLocation::S3(location) => {
            let dlq: crate::dlq::Dlq =
                crate::dlq::S3Dlq::new(aws.s3(), location.clone(), &config.name).into();
            return dlq.check_writable().await.map_err(|e| ConfigError {
                path: format!("channel[{index}].dlq.bucket"),
                message: format!(
                    "s3://{}/{} is not writable: {e}",
                    location.bucket, location.prefix
                ),
            });
        }
    };
    let error = |message: String| ConfigError {
        path: format!("channel[{index}].dlq.path"),
        message,
    };
    std::fs::create_dir_all(dir)
        .map_err(|e| error(format!("cannot create {}: {e}", dir.display())))?;
    let probe = dir.join(format!(".floe-probe-{}", uuid::Uuid::new_v4()));
    let written = std::fs::File::create(&probe).and_then(|f| f.sync_all());
    let _ = std::fs::remove_file(&probe);
    written.map_err(|e| error(format!("{} is not writable: {e}", dir.display())))
}

/// Everything `floe channel create` checks before it records anything, as the managed services
/// do: the configuration itself (names lowercase, ranges) was validated when it was loaded; here
/// the schema (resolvable, nesting at most 16, one top-level `date-time` partition field of the
/// hour transform) and the DLQ (writable). The KMS key ARN's form is checked with the
/// configuration (`channel[i].dlq.kms_key_arn`). Returns the mapped schema of a schema file;
/// `None` for a Glue schema, which [`create`] resolves (and records FAILED when it is missing).
///
/// Errors: every problem, each with its key path.
pub async fn preflight(
    index: usize,
    config: &ChannelConfig,
    aws: &crate::aws::AwsClients,
) -> Result<Option<crate::schema::MappedSchema>, ControlError> {
    let schema = schema_file::check_schema(index, config);
    let dlq = check_dlq_writable(index, config, aws).await;
    let source = check_source(index, config);
    match (schema, dlq, source) {
        (Ok(schema), Ok(()), Ok(())) => Ok(schema),
        (schema, dlq, source) => Err(ControlError::Refused(
            schema
                .err()
                .into_iter()
                .chain(dlq.err())
                .chain(source.err())
                .collect(),
        )),
    }
}

/// Builds the channel's Kafka client the way `floe run` does (no connection): librdkafka
/// refuses some property sets only then (`reconnect.backoff.max.ms` below
/// `reconnect.backoff.ms`), and `create` must refuse what `run` would, before it records an
/// activation.
fn check_source(index: usize, config: &ChannelConfig) -> Result<(), ConfigError> {
    let crate::config::SourceConfig::Kafka(kafka) = &config.source else {
        return Ok(());
    };
    crate::source::kafka::KafkaSource::try_new(
        crate::source::kafka::KafkaSourceConfig::from_channel(
            &config.name,
            kafka,
            kafka.topics.single().unwrap_or("floe-property-check"),
        ),
    )
    .map(drop)
    .map_err(|e| ConfigError {
        path: format!("channel[{index}].source.properties"),
        message: e.to_string(),
    })
}

/// Writes `state` at `expected` version; returns it with the new version.
async fn put(
    store: &dyn Store,
    mut state: ChannelState,
    expected: Option<u64>,
) -> Result<ChannelState, ControlError> {
    state.updated_at_ms = now_ms();
    match store.put_channel_state(&state, expected).await {
        Ok(v) => {
            state.version = v;
            Ok(state)
        }
        Err(LeaseError::Conflict { .. }) => Err(ControlError::Unavailable(format!(
            "channel {} was changed concurrently (by a worker or another operator); run the command again",
            state.channel
        ))),
        Err(e) => Err(e.into()),
    }
}

// ---------------------------------------------------------------------------------------------
// The operations

/// `floe channel create`: validates the channel, records CREATING, creates (or checks) its
/// table, and records ACTIVE with the activation time. Idempotent: an ACTIVE channel is
/// returned as it is; a CREATING one is finished.
///
/// Errors: [`ControlError::Refused`] for a validation failure (nothing recorded), a channel
/// FAILED or SUSPENDED, or a table floe must not write (the channel is recorded FAILED);
/// [`ControlError::Unavailable`] when the lease store or the catalog cannot be reached (the
/// channel stays CREATING: run create again).
pub async fn create(
    config: &Config,
    name: &str,
    store: &dyn Store,
    aws: &crate::aws::AwsClients,
) -> Result<ChannelState, ControlError> {
    create_at(config, name, store, aws, None).await
}

/// [`create`], recording `activated_at` (epoch ms) instead of the time of activation: a member
/// channel of a table per topic takes its channel's activation time (see
/// [`activate::record_activation_at`]).
///
/// Errors: as [`create`].
pub async fn create_at(
    config: &Config,
    name: &str,
    store: &dyn Store,
    aws: &crate::aws::AwsClients,
    activated_at: Option<i64>,
) -> Result<ChannelState, ControlError> {
    let (index, channel) = find_channel(config, name)?;
    let channel = &channel;
    if channel.is_routed() {
        // Its tables are its members' (docs/routing.md, "Fan-out by a field").
        let members = member_names(config, name);
        return Err(ControlError::refused(
            "channel",
            format!(
                "{name:?} (table = \"{{route}}\") writes its tables through member channels: create them by name ({}), or let floe run create them",
                members.join(", ")
            ),
        ));
    }
    let file_schema = preflight(index, channel, aws).await?;
    let current = store.get_channel_state(name).await?;
    let state = match create_decision(current.as_ref()) {
        CreateDecision::AlreadyActive => {
            let active = current.expect("active state");
            check_active_glue_schema(index, channel, &active, aws).await?;
            return Ok(active);
        }
        CreateDecision::Refuse(message) => {
            return Err(ControlError::refused(state_path(name), message))
        }
        CreateDecision::Resume => current.expect("creating state"),
        CreateDecision::Start => {
            let expected = current.as_ref().map(|s| s.version);
            let creating = ChannelState {
                channel: name.to_string(),
                state: ChannelStatus::Creating,
                status_reason: None,
                activated_at_ms: None,
                table_uuid: None,
                schema_version_id: None,
                version: 0,
                updated_at_ms: 0,
                // Settings changed by update survive a delete and create.
                overrides: current.map(|s| s.overrides).unwrap_or_default(),
                from_first_record: false,
            };
            put(store, creating, expected).await?
        }
    };
    if channel.destination.iceberg().is_none() {
        // A raw S3 channel has no table: it is active once its bucket took a staged object.
        let active = ChannelState {
            state: ChannelStatus::Active,
            status_reason: None,
            activated_at_ms: Some(now_ms()),
            ..state
        };
        let expected = Some(active.version);
        let active = put(store, active, expected).await?;
        tracing::info!(channel = name, activated_at_ms = active.activated_at_ms, destination = %destination_name(channel), "channel created: ACTIVE");
        return Ok(active);
    };
    let mut state = state;
    let creating = |e: ActivateError| match e {
        ActivateError::Unavailable(m) => {
            ControlError::Unavailable(format!("{m}; the channel stays CREATING: run create again"))
        }
        e => e.into(),
    };
    let catalog = activate::open_catalog(index, channel, aws)
        .await
        .map_err(creating)?;
    let schema = match file_schema {
        Some(schema) => schema,
        None => {
            let registry =
                crate::registry::channel_schema::ChannelRegistry::of(channel, || aws.glue())
                    .map_err(|e| {
                        ControlError::refused(format!("channel[{index}].schema"), e.to_string())
                    })?;
            activate::resolve_schema(index, channel, store, &mut state, registry.as_ref())
                .await
                .map_err(creating)?
                .mapped
        }
    };
    activate::ensure_channel_table(
        index,
        channel,
        store,
        &mut state,
        catalog.as_ref(),
        &schema,
        aws,
    )
    .await
    .map_err(creating)?;
    let expected = Some(state.version);
    // A member of a topic that appeared after its channel's activation reads it from its first
    // record, as `floe run` would start it (activate::appeared_later).
    let late = match (activated_at, &channel.source) {
        (Some(at), crate::config::SourceConfig::Kafka(k))
            if config
                .members
                .iter()
                .any(|(i, m)| m.name == name && config.channels[*i].is_table_per_topic()) =>
        {
            activate::appeared_later(at, now_ms(), k.topic_refresh_interval)
        }
        _ => false,
    };
    let active = ChannelState {
        state: ChannelStatus::Active,
        status_reason: None,
        activated_at_ms: Some(activated_at.unwrap_or_else(now_ms)),
        from_first_record: late || state.from_first_record,
        ..state
    };
    let active = put(store, active, expected).await?;
    tracing::info!(channel = name, activated_at_ms = active.activated_at_ms, table = %destination_name(channel), "channel created: ACTIVE");
    Ok(active)
}

/// For `create` on an ACTIVE channel with a Glue schema: checks that the configuration still
/// names the schema of the version recorded at activation (warns when `version` differs, the
/// recorded version wins). Nothing is recorded: the channel stays ACTIVE.
///
/// Errors: [`ControlError::Refused`] at `channel[N].schema.glue_schema_arn` when the recorded
/// version is of another schema, or Glue (as this configuration reaches it) does not have it or
/// refuses; an unavailable registry is only a warning.
async fn check_active_glue_schema(
    index: usize,
    channel: &ChannelConfig,
    active: &ChannelState,
    aws: &crate::aws::AwsClients,
) -> Result<(), ControlError> {
    use crate::registry::channel_schema::{load_channel_schema, ChannelRegistry, SchemaLoadError};
    use crate::registry::gsr::RegistryClient;
    let Some(crate::config::SchemaConfig::Glue {
        version,
        schema_arn,
        ..
    }) = &channel.schema
    else {
        return Ok(());
    };
    let Some(recorded) = activate::recorded_schema_version(active)? else {
        return Ok(());
    };
    let registry = ChannelRegistry::Glue(std::sync::Arc::new(RegistryClient::glue(
        aws.glue(),
        schema_arn,
    )));
    match load_channel_schema(channel, Some(recorded), Some(&registry)).await {
        Ok(resolved) => {
            // Under evolution the channel's version follows its table: nothing to warn about.
            let evolving = channel.schema.as_ref().map(|s| s.evolution())
                == Some(crate::config::SchemaEvolution::Compatible);
            if let crate::config::GlueSchemaVersion::Number(n) = version {
                if resolved.version_number != Some(*n) && !evolving {
                    tracing::warn!(
                        channel = %channel.name,
                        configured = n,
                        recorded = ?resolved.version_number,
                        schema_version_id = %recorded,
                        "channel[{index}].schema.version differs from the version recorded at activation: the recorded version is used"
                    );
                }
            }
            Ok(())
        }
        Err(SchemaLoadError::Unavailable(m)) => {
            tracing::warn!(channel = %channel.name, error = %m, "the channel is ACTIVE; its recorded schema version could not be checked against this configuration");
            Ok(())
        }
        Err(SchemaLoadError::Refused(reason)) => Err(ControlError::refused(
            format!("channel[{index}].schema.glue_schema_arn"),
            format!("{reason}; the channel is ACTIVE and stays as it is: fix this configuration"),
        )),
    }
}

/// What `floe channel update` may change.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Update {
    /// New `data_freshness`.
    pub data_freshness: Option<Duration>,
    /// New delivery log setting.
    pub delivery_log: Option<DeliveryLog>,
}

/// `floe channel update`: records new settings (data freshness, delivery logs) that win over
/// the configuration file; running workers pick them up within [`STATE_POLL_INTERVAL`].
///
/// Errors: [`ControlError::Refused`] when nothing is to change, a value is out of range, or the
/// channel is not ACTIVE or SUSPENDED.
pub async fn update(
    config: &Config,
    name: &str,
    store: &dyn Store,
    change: &Update,
) -> Result<ChannelState, ControlError> {
    find_channel(config, name)?;
    if change == &Update::default() {
        return Err(ControlError::refused(
            "update",
            "nothing to change: give --data-freshness and/or --delivery-log",
        ));
    }
    if let Some(d) = change.data_freshness {
        let range = crate::config::validate::DATA_FRESHNESS_RANGE;
        if !range.contains(&d) {
            return Err(ControlError::refused(
                "data_freshness",
                format!(
                    "{} is outside {} to {}",
                    crate::config::units::format_duration(d),
                    crate::config::units::format_duration(*range.start()),
                    crate::config::units::format_duration(*range.end())
                ),
            ));
        }
    }
    let current = store.get_channel_state(name).await?;
    update_allowed(current.as_ref()).map_err(|m| ControlError::refused(state_path(name), m))?;
    let mut state = current.expect("state present");
    let expected = Some(state.version);
    if let Some(d) = change.data_freshness {
        state.overrides.data_freshness_ms = Some(d.as_millis() as u64);
    }
    if let Some(l) = change.delivery_log {
        state.overrides.delivery_log = Some(l);
    }
    put(store, state, expected).await
}

/// `floe channel delete`: records DELETING. Workers stop delivering the channel within
/// [`STATE_POLL_INTERVAL`] (they drain what they buffered, commit it, and release their
/// leases); the table and the DLQ keep everything delivered. Deleting a DELETING channel is a
/// no-op.
///
/// Errors: [`ControlError::Refused`] when the channel was never created.
pub async fn delete(
    config: &Config,
    name: &str,
    store: &dyn Store,
) -> Result<ChannelState, ControlError> {
    find_channel(config, name)?;
    let Some(mut state) = store.get_channel_state(name).await? else {
        return Err(ControlError::refused(
            state_path(name),
            "the channel does not exist: nothing to delete",
        ));
    };
    if state.state == ChannelStatus::Deleting {
        return Ok(state);
    }
    let expected = Some(state.version);
    state.status_reason = Some(format!(
        "deleted by an operator (was {})",
        status_name(state.state)
    ));
    state.state = ChannelStatus::Deleting;
    put(store, state, expected).await
}

/// After `floe channel delete`: deregisters the stream consumer of a Kinesis channel that reads
/// with `read_mode = "enhanced_fan_out"` (AWS bills each consumer per shard hour while it is
/// registered). Returns the consumer's name when one was registered, `None` for any other
/// channel or when none was. Idempotent; workers still draining lose their subscriptions and
/// stop reading, which a deleted channel does anyway.
///
/// Errors: [`ControlError::Unavailable`] when the Kinesis service fails or refuses (run the
/// delete again).
pub async fn deregister_consumer(
    config: &Config,
    name: &str,
    aws: &crate::aws::AwsClients,
) -> Result<Option<String>, ControlError> {
    let (_, channel) = find_channel(config, name)?;
    let Some((_, stream, consumer)) = crate::source::kinesis::efo::channel_consumer(&channel)
    else {
        return Ok(None);
    };
    match crate::source::kinesis::efo::deregister_consumer(&aws.kinesis(), &stream, &consumer)
        .await
    {
        Ok(true) => Ok(Some(consumer)),
        Ok(false) => Ok(None),
        Err(e) => Err(ControlError::Unavailable(format!(
            "channel {name} is DELETING but its stream consumer \"{consumer}\" was not deregistered ({e}); run `floe channel delete` again"
        ))),
    }
}

/// Waits until no worker holds a lease of `name` (after a delete), up to `timeout`.
/// Returns whether that happened.
///
/// Errors: [`ControlError::Unavailable`] when the lease store fails.
pub async fn wait_released(
    store: &dyn Store,
    name: &str,
    timeout: Duration,
) -> Result<bool, ControlError> {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let held = store
            .list_leases(name)
            .await?
            .iter()
            .any(|l| l.owner.is_some());
        if !held {
            return Ok(true);
        }
        if tokio::time::Instant::now() >= deadline {
            return Ok(false);
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// One shard of `floe channel describe`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ShardDescription {
    /// Shard id (Kafka partition).
    pub shard: String,
    /// Worker holding its lease, if any.
    pub owner: Option<String>,
    /// Its lease counter (fencing token).
    pub lease_counter: u64,
    /// The committed checkpoint from the table's `floe.checkpoints` (authoritative).
    pub checkpoint: Option<String>,
    /// Records behind the newest one (Kafka high watermark − 1 − checkpoint; 0 when only
    /// transaction markers follow the checkpoint), when the broker answered quickly.
    pub lag_records: Option<u64>,
    /// Kafka: why the broker no longer holds the records after the checkpoint (retention
    /// deleted them, or the topic was recreated): a worker taking the shard stops with exit 78
    /// (docs/kafka.md).
    pub position_lost: Option<String>,
    /// When a snapshot last added records of this shard (RFC 3339).
    pub last_commit_at: Option<String>,
}

/// `floe channel describe`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ChannelDescription {
    /// Channel name.
    pub channel: String,
    /// `ACTIVE`, …, or `NOT_CREATED` when the lease store has no state for it.
    pub state: String,
    /// Why it is FAILED, SUSPENDED or DELETING.
    pub status_reason: Option<String>,
    /// When it was activated (RFC 3339).
    pub activated_at: Option<String>,
    /// When its state was last written (RFC 3339).
    pub updated_at: Option<String>,
    /// `namespace.table`.
    pub table: String,
    /// `"no topic matches channel[i].source.topic_pattern = …"` when the channel's `topics` or
    /// `topic_pattern` selects no topic of the cluster now (a channel with `table = "{topic}"`
    /// then has no member: `floe channel describe` prints the same line under its name).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub no_topic_matches: Option<String>,
    /// The catalog the table was read from, as its identity (`sql:<name>:<database path or URL
    /// without password>`, `rest:<uri>:<warehouse>`, `s3tables:<table bucket ARN>`,
    /// `glue:<catalog id>`); absent for a raw S3 destination.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub catalog: Option<String>,
    /// The table's UUID recorded at creation.
    pub table_uuid: Option<String>,
    /// The channel's Glue schema version id (Glue schemas only): the table's current version
    /// when it evolved (`floe.schema-version-id`), otherwise the one recorded at activation.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub schema_version_id: Option<String>,
    /// The configured Glue schema ARN (Glue schemas only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub glue_schema_arn: Option<String>,
    /// The Confluent subject (`registry_url` schemas only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub subject: Option<String>,
    /// The channel's Confluent schema id, as `schema_version_id` (the table's current one when it
    /// evolved, otherwise the one recorded at activation), with its message indexes for
    /// Protobuf: `"42"`, `"42 message [1, 0]"`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub schema_id: Option<String>,
    /// The data freshness in force, seconds (override or configuration).
    pub data_freshness_seconds: f64,
    /// The configuration's data freshness, seconds.
    pub configured_data_freshness_seconds: f64,
    /// `batches` or `failures`.
    pub delivery_log: DeliveryLog,
    /// Worker holding the committer lease.
    pub committer: Option<String>,
    /// Pending batches waiting for the committer.
    pub pending_batches: usize,
    /// When the table's last data commit landed (RFC 3339): the last snapshot that delivered
    /// records. Maintenance snapshots and a new committer's commit of its epoch alone (`floe
    /// maintain`, a takeover) are not counted; the last maintenance is in `table_health`.
    pub last_commit_at: Option<String>,
    /// The snapshot of that commit.
    pub snapshot_id: Option<i64>,
    /// Per shard.
    pub shards: Vec<ShardDescription>,
    /// Why the table could not be read, if it could not.
    pub catalog_error: Option<String>,
    /// The table's shape (Iceberg destinations whose table could be read).
    pub table_health: Option<crate::iceberg::maintenance::TableHealth>,
    /// The table's schema history (`floe.schema-history`, oldest first): the versions applied
    /// by `evolution = "compatible"`; empty when the table never evolved.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub schema_history: Vec<SchemaHistoryEntry>,
    /// The Kinesis stream consumer of a channel with `read_mode = "enhanced_fan_out"`; absent
    /// for other channels.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stream_consumer: Option<StreamConsumerDescription>,
}

/// The stream consumer of an enhanced fan-out channel, as `floe channel describe` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StreamConsumerDescription {
    /// `ConsumerName` (`channel.source.consumer_name`, default `floe-<channel>`).
    pub name: String,
    /// `ACTIVE`, `CREATING`, `DELETING`, `NOT_REGISTERED` (workers register it at start), or
    /// `UNKNOWN` when Kinesis could not be asked (see `error`).
    pub status: String,
    /// `ConsumerARN`, when registered.
    pub arn: Option<String>,
    /// Why the status is `UNKNOWN`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// One schema version of the table's history, as `floe channel describe` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SchemaHistoryEntry {
    /// Glue `SchemaVersionId` (for a Confluent schema: its id packed, see `schema_id`).
    pub version_id: String,
    /// The Confluent schema id (and message indexes) the entry records; absent for Glue.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub schema_id_applied: Option<String>,
    /// Glue `VersionNumber`.
    pub version_number: i64,
    /// The table's schema id from then on.
    pub schema_id: i32,
    /// When it was applied (RFC 3339).
    pub applied_at: String,
    /// What changed (empty: the channel's first version, or one that fit the table as it was).
    pub changes: Vec<String>,
}

/// A Confluent schema key packed in a UUID, as text (`"42"`, `"42 message [1, 0]"`); `None` for
/// a Glue version id.
fn confluent_id_text(id: uuid::Uuid) -> Option<String> {
    let key = crate::registry::framing::confluent::SchemaKey::from_uuid(id)?;
    Some(match key.indexes.as_slice() {
        [] => key.id.to_string(),
        i => format!("{} message {i:?}", key.id),
    })
}

/// `floe channel describe`: state, leases, checkpoints and commits of one channel. A catalog
/// that cannot be read is reported in `catalog_error` (the rest is still described).
///
/// Errors: [`ControlError::Unavailable`] when the lease store fails.
pub async fn describe(
    config: &Config,
    name: &str,
    store: &dyn Store,
) -> Result<ChannelDescription, ControlError> {
    let aws = crate::aws::AwsClients::for_config(config).await;
    let (index, channel) = find_channel(config, name)?;
    let channel = &channel;
    let state = store.get_channel_state(name).await?;
    let leases = store.list_leases(name).await?;
    let pending = store.list_pending(name).await?.len();
    let overrides = state
        .as_ref()
        .map(|s| s.overrides.clone())
        .unwrap_or_default();
    let (table, delivered) = match table_ident(channel) {
        Some(ident) => (
            load_described_table(index, channel, &aws, &ident).await,
            None,
        ),
        None => (Ok(None), store.get_delivered(name).await?),
    };
    let (table, catalog_error) = match table {
        Ok(t) => (t, None),
        Err(e) => (None, Some(e)),
    };
    let checkpoints = match &delivered {
        Some(d) => d.checkpoints.clone(),
        None => table
            .as_ref()
            .and_then(|t| crate::iceberg::table_state::table_checkpoints(t).ok())
            .unwrap_or_default(),
    };
    // A shard whose SHARD_END was pruned (docs/design.md step 8) still shows as ended.
    let checkpoints = checkpoints.with_pruned_ended(&crate::lease::lineage(&leases));
    // A raw channel's last commit: the time in its commit id (a UUIDv7).
    let raw_commit_ms = delivered
        .as_ref()
        .and_then(|d| d.last_commit_id)
        .and_then(|id| crate::time::uuid_v7_ms(&id));
    let mut description = describe_with(
        name,
        channel,
        state,
        &leases,
        pending,
        overrides,
        table,
        checkpoints,
        raw_commit_ms,
        catalog_error,
    )
    .await?;
    description.stream_consumer = describe_stream_consumer(channel, &aws).await;
    description.no_topic_matches = topic_match_note(index, channel).await;
    Ok(description)
}

/// `"no topic matches …"` when channel `index`'s `topics`/`topic_pattern` selects no topic of
/// the cluster now (one listing); `None` for a single topic, a Kinesis stream, when a topic
/// matches, or when the brokers cannot be listed (describe then shows what it can).
pub async fn topic_match_note(index: usize, channel: &ChannelConfig) -> Option<String> {
    use crate::source::kafka::topics::{unmatched_channels, KafkaTopicsSource};
    let crate::config::SourceConfig::Kafka(kafka) = &channel.source else {
        return None;
    };
    kafka.topics.single().is_none().then_some(())?;
    let lister = KafkaTopicsSource::try_new(&channel.name, kafka)
        .ok()?
        .at_index(index);
    let selected = lister.topics().await.ok()?;
    if !selected.is_empty() {
        return None;
    }
    unmatched_channels().get(&channel.name).cloned()
}

/// The stream consumer of an enhanced fan-out Kinesis channel, `None` for other channels.
async fn describe_stream_consumer(
    channel: &ChannelConfig,
    aws: &crate::aws::AwsClients,
) -> Option<StreamConsumerDescription> {
    let (_, stream, name) = crate::source::kinesis::efo::channel_consumer(channel)?;
    let (status, arn, error) = match crate::source::kinesis::efo::describe_consumer(
        &aws.kinesis(),
        &stream,
        &name,
    )
    .await
    {
        Ok(Some((arn, status))) => (status, Some(arn), None),
        Ok(None) => ("NOT_REGISTERED".to_string(), None, None),
        Err(e) => ("UNKNOWN".to_string(), None, Some(e.to_string())),
    };
    Some(StreamConsumerDescription {
        name,
        status,
        arn,
        error,
    })
}

async fn load_described_table(
    index: usize,
    channel: &ChannelConfig,
    aws: &crate::aws::AwsClients,
    ident: &TableIdent,
) -> Result<Option<Table>, String> {
    match open_catalog(index, channel, aws).await {
        Ok(catalog) => match catalog.table_exists(ident).await {
            Ok(true) => catalog
                .load_table(ident)
                .await
                .map(Some)
                .map_err(|e| e.to_string()),
            Ok(false) => Ok(None),
            Err(e) => Err(e.to_string()),
        },
        Err(e) => Err(e.to_string()),
    }
}

#[allow(clippy::too_many_arguments)]
async fn describe_with(
    name: &str,
    channel: &ChannelConfig,
    state: Option<ChannelState>,
    leases: &[crate::lease::Lease],
    pending: usize,
    overrides: ChannelOverrides,
    table: Option<Table>,
    checkpoints: crate::model::Checkpoints,
    raw_commit_ms: Option<i64>,
    catalog_error: Option<String>,
) -> Result<ChannelDescription, ControlError> {
    let last_commits = table
        .as_ref()
        .map(last_commit_per_shard)
        .unwrap_or_default();
    let lags = kafka_lags(channel, &checkpoints).await;
    let shards = leases
        .iter()
        .filter_map(|l| {
            let shard = l.key.shard_id()?;
            let checkpoint = checkpoints.get(shard);
            let (lag_records, position_lost) = match lags.get(&shard.to_string()) {
                Some(Ok(lag)) => (Some(*lag), None),
                Some(Err(why)) => (None, Some(why.clone())),
                None => (None, None),
            };
            Some(ShardDescription {
                shard: shard.to_string(),
                owner: l.owner.clone(),
                lease_counter: l.lease_counter,
                checkpoint: checkpoint.map(|p| p.to_string()),
                lag_records: if checkpoint.is_some() {
                    lag_records
                } else {
                    None
                },
                position_lost: if checkpoint.is_some() {
                    position_lost
                } else {
                    None
                },
                last_commit_at: last_commits
                    .get(&shard.to_string())
                    .map(|ms| crate::time::rfc3339_ms(*ms)),
            })
        })
        .collect();
    // The last data commit: maintenance snapshots (compaction, expiry) and a new committer's
    // commit of its epoch alone (`floe maintain`'s first commit, a takeover) would hide a
    // stalled pipeline (found by fresh-user reviews).
    let snapshot = table.as_ref().and_then(|t| {
        t.metadata()
            .snapshots()
            .filter(|s| is_data_commit(s))
            .max_by_key(|s| (s.sequence_number(), s.timestamp_ms()))
            .cloned()
    });
    let (table_health, catalog_error) = match (&table, channel.destination.iceberg()) {
        (Some(t), Some(dest)) => match crate::iceberg::maintenance::table_health(
            t,
            dest.target_file_size,
            dest.maintenance.compaction_delay.as_millis() as i64,
            crate::time::now_ms(),
        )
        .await
        {
            Ok(h) => (Some(h), catalog_error),
            Err(e) => (
                None,
                catalog_error.or(Some(format!("table manifests: {e}"))),
            ),
        },
        _ => (None, catalog_error),
    };
    let schema_history = table
        .as_ref()
        .and_then(|t| crate::iceberg::evolve::schema_history(t).ok())
        .unwrap_or_default()
        .into_iter()
        .map(|v| SchemaHistoryEntry {
            schema_id_applied: confluent_id_text(v.version_id),
            version_id: v.version_id.to_string(),
            version_number: v.version_number,
            schema_id: v.schema_id,
            applied_at: crate::time::rfc3339_ms(v.applied_at_ms),
            changes: v.changes,
        })
        .collect();
    let schema_version_id = table
        .as_ref()
        .and_then(crate::iceberg::evolve::current_version)
        .map(|id| id.to_string())
        .or_else(|| state.as_ref().and_then(|s| s.schema_version_id.clone()));
    let confluent = match &channel.schema {
        Some(crate::config::SchemaConfig::Confluent(c)) => Some(c),
        _ => None,
    };
    Ok(ChannelDescription {
        subject: confluent.map(|c| c.subject.clone()),
        schema_id: confluent
            .and(schema_version_id.as_deref())
            .and_then(|id| uuid::Uuid::parse_str(id).ok())
            .and_then(confluent_id_text),
        schema_history,
        stream_consumer: None,
        channel: name.to_string(),
        state: state
            .as_ref()
            .map_or("NOT_CREATED", |s| status_name(s.state))
            .to_string(),
        status_reason: state.as_ref().and_then(|s| s.status_reason.clone()),
        activated_at: state
            .as_ref()
            .and_then(|s| s.activated_at_ms)
            .map(crate::time::rfc3339_ms),
        updated_at: state
            .as_ref()
            .map(|s| crate::time::rfc3339_ms(s.updated_at_ms)),
        table: destination_name(channel),
        catalog: channel.destination.iceberg().map(|d| d.catalog.identity()),
        no_topic_matches: None,
        table_uuid: state.as_ref().and_then(|s| s.table_uuid.clone()),
        // An evolved table's current version is the channel's (workers record it in the
        // channel state at their next start).
        schema_version_id: schema_version_id.filter(|_| confluent.is_none()),
        glue_schema_arn: match &channel.schema {
            Some(crate::config::SchemaConfig::Glue { schema_arn, .. }) => Some(schema_arn.clone()),
            _ => None,
        },
        data_freshness_seconds: effective_freshness(channel, &overrides).as_secs_f64(),
        configured_data_freshness_seconds: channel.destination.data_freshness().as_secs_f64(),
        delivery_log: overrides.delivery_log.unwrap_or_default(),
        committer: leases
            .iter()
            .find(|l| l.key == LeaseKey::Committer)
            .and_then(|l| l.owner.clone()),
        pending_batches: pending,
        last_commit_at: snapshot
            .as_ref()
            .map(|s| s.timestamp_ms())
            .or(raw_commit_ms)
            .map(crate::time::rfc3339_ms),
        snapshot_id: snapshot.map(|s| s.snapshot_id()),
        shards,
        catalog_error,
        table_health,
    })
}

/// Whether `snapshot` is a floe commit that delivered records: its `floe.ranges` names a shard.
/// Maintenance snapshots carry no ranges, and a committer's first commit with nothing pending
/// (it writes only its epoch, `floe.committer-epoch`) carries empty ones.
fn is_data_commit(snapshot: &iceberg::spec::Snapshot) -> bool {
    snapshot
        .summary()
        .additional_properties
        .get(SUMMARY_RANGES)
        .and_then(|r| crate::iceberg::table_state::decode_ranges(r))
        .is_some_and(|ranges| !ranges.is_empty())
}

/// When a snapshot last added records of each shard (from the snapshots' `floe.ranges`).
fn last_commit_per_shard(table: &Table) -> BTreeMap<String, i64> {
    let mut out = BTreeMap::new();
    for snapshot in table.metadata().snapshots() {
        let Some(ranges) = snapshot.summary().additional_properties.get(SUMMARY_RANGES) else {
            continue;
        };
        let Some(ranges) = crate::iceberg::table_state::decode_ranges(ranges) else {
            continue;
        };
        for shard in ranges.keys() {
            let at = out.entry(shard.clone()).or_insert(i64::MIN);
            *at = (*at).max(snapshot.timestamp_ms());
        }
    }
    out
}

/// Kafka lag of the channel's shards after their checkpoints ([`KafkaSource::lag_after`]: 0
/// once only transaction markers are left), or why the position is lost, for the shards the
/// broker answers for within 3 s in all; nothing is shown for the others. Shards of several
/// topics (`<topic>:<partition>`) are asked of their topic.
///
/// [`KafkaSource::lag_after`]: crate::source::kafka::KafkaSource::lag_after
async fn kafka_lags(
    channel: &ChannelConfig,
    checkpoints: &crate::model::Checkpoints,
) -> BTreeMap<String, Result<u64, String>> {
    let crate::config::SourceConfig::Kafka(kafka) = &channel.source else {
        // Kinesis lag (MillisBehindLatest) is only known to the readers: see the metrics.
        return BTreeMap::new();
    };
    use crate::source::kafka::{topics::KafkaTopicsSource, KafkaSource, KafkaSourceConfig};
    let source_config =
        KafkaSourceConfig::from_channel(&channel.name, kafka, &kafka.topics.describe())
            .with_request_timeout(Duration::from_secs(2));
    // One topic: shards "0", "1", …; several: "<topic>:<partition>".
    enum Topics {
        One(KafkaSource),
        Several(KafkaTopicsSource),
    }
    let source = match kafka.topics.single() {
        Some(_) => KafkaSource::try_new(source_config).map(Topics::One),
        None => KafkaTopicsSource::with_settings(source_config, kafka.topics.clone())
            .map(Topics::Several),
    };
    let Ok(source) = source else {
        return BTreeMap::new();
    };
    let mut out = BTreeMap::new();
    let fetch = async {
        for (shard, position) in &checkpoints.0 {
            let crate::model::Position::Offset(checkpoint) = position else {
                continue;
            };
            let lag = match &source {
                Topics::One(one) => one.lag_after(shard, *checkpoint).await,
                Topics::Several(several) => several.lag_after(shard, *checkpoint).await,
            };
            let lag = match lag {
                Ok(lag) => Ok(lag),
                Err(crate::source::SourceError::PositionLost { message, .. }) => Err(message),
                Err(_) => continue,
            };
            out.insert(shard.to_string(), lag);
        }
    };
    // The shards answered within the bound keep their entries.
    let _ = tokio::time::timeout(Duration::from_secs(3), fetch).await;
    out
}

/// One line of `floe channel list`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ChannelSummary {
    /// Channel name.
    pub channel: String,
    /// `ACTIVE`, …, or `NOT_CREATED`.
    pub state: String,
    /// Why it is FAILED, SUSPENDED or DELETING.
    pub status_reason: Option<String>,
    /// Shards (leases) of the channel.
    pub shards: usize,
    /// Distinct workers holding one of its leases.
    pub workers: usize,
    /// `namespace.table`.
    pub table: String,
}

/// `floe channel list`: every channel of the configuration file with its stored state.
///
/// Errors: [`ControlError::Unavailable`] when the lease store fails.
pub async fn list(config: &Config, store: &dyn Store) -> Result<Vec<ChannelSummary>, ControlError> {
    let mut out = Vec::new();
    let members = config.members.iter().map(|(_, c)| c);
    for channel in config.channels.iter().chain(members) {
        let state = store.get_channel_state(&channel.name).await?;
        let leases = store.list_leases(&channel.name).await?;
        let mut workers: Vec<&str> = leases.iter().filter_map(|l| l.owner.as_deref()).collect();
        workers.sort();
        workers.dedup();
        out.push(ChannelSummary {
            channel: channel.name.clone(),
            state: state
                .as_ref()
                .map_or("NOT_CREATED", |s| status_name(s.state))
                .to_string(),
            status_reason: state.and_then(|s| s.status_reason),
            shards: leases.iter().filter(|l| l.key.shard_id().is_some()).count(),
            workers: workers.len(),
            table: destination_name(channel),
        });
    }
    Ok(out)
}

// ---------------------------------------------------------------------------------------------
// The running side

/// The switches that stop one channel of a running worker, in the order of a graceful
/// shutdown: stop taking leases and reading, wait for the worker loop to drain (flush, commit),
/// then stop the committer and release the leases.
#[derive(Clone)]
pub struct ChannelStops {
    /// Stops the lease manager from taking new leases.
    pub drain_switch: Arc<AtomicBool>,
    /// Stops reading (worker loop and shard discovery).
    pub reading: CancellationToken,
    /// Cancelled by the worker loop when it has returned (drained).
    pub worker_done: CancellationToken,
    /// Stops the committer loop.
    pub committing: CancellationToken,
    /// Stops the lease manager, which then releases every lease.
    pub leases: CancellationToken,
}

impl ChannelStops {
    /// Stops the channel gracefully; waits at most `drain` for the worker loop.
    pub async fn stop(&self, drain: Duration) {
        self.drain_switch.store(true, Ordering::SeqCst);
        self.reading.cancel();
        let _ = tokio::time::timeout(drain, self.worker_done.cancelled()).await;
        self.committing.cancel();
        self.leases.cancel();
    }
}

/// Watches a running channel's state every [`STATE_POLL_INTERVAL`] until `stop` is cancelled:
/// when the channel is DELETING, SUSPENDED or FAILED (recorded by `floe channel delete` or by
/// another worker that found the table dropped or replaced), stops it (gracefully, bounded by
/// `drain`) and returns `true`.
/// Lease store errors are logged and retried at the next poll. (Updated settings are applied
/// by the worker and committer loops themselves.)
pub async fn watch_channel(
    store: Arc<dyn Store>,
    channel: String,
    stops: ChannelStops,
    drain: Duration,
    stop: CancellationToken,
) -> bool {
    loop {
        tokio::select! {
            _ = stop.cancelled() => return false,
            _ = tokio::time::sleep(STATE_POLL_INTERVAL) => {}
        }
        match store.get_channel_state(&channel).await {
            Ok(Some(state)) => {
                if matches!(
                    state.state,
                    ChannelStatus::Deleting | ChannelStatus::Suspended | ChannelStatus::Failed
                ) {
                    let status = status_name(state.state);
                    let reason = state.status_reason.as_deref().unwrap_or("");
                    tracing::warn!(channel = %channel, status, reason, "channel is no longer ACTIVE: stopping delivery (draining, then releasing leases)");
                    crate::health::Readiness::global().deregister(&channel);
                    stops.stop(drain).await;
                    crate::telemetry::set_worker_gauges(&channel, 0.0, 0, 0, false);
                    tracing::info!(channel = %channel, status, "channel stopped: delivery stopped, leases released");
                    return true;
                }
            }
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(channel = %channel, error = %e, "could not read the channel's state")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(s: ChannelStatus) -> ChannelState {
        ChannelState {
            channel: "c".into(),
            state: s,
            status_reason: Some("why".into()),
            activated_at_ms: Some(1),
            table_uuid: None,
            schema_version_id: None,
            version: 3,
            updated_at_ms: 2,
            overrides: Default::default(),
            from_first_record: false,
        }
    }

    const ALL: [ChannelStatus; 5] = [
        ChannelStatus::Creating,
        ChannelStatus::Active,
        ChannelStatus::Failed,
        ChannelStatus::Suspended,
        ChannelStatus::Deleting,
    ];

    #[test]
    fn run_delivers_only_active_channels_and_activates_new_ones() {
        assert_eq!(run_decision(None), RunDecision::Activate);
        for s in ALL {
            let d = run_decision(Some(&state(s)));
            if s == ChannelStatus::Active {
                assert_eq!(d, RunDecision::Deliver);
            } else {
                let RunDecision::Refuse(m) = d else {
                    panic!("{s:?} must be refused")
                };
                assert!(m.contains(status_name(s)), "{m}");
            }
        }
    }

    #[test]
    fn create_starts_resumes_is_idempotent_and_refuses_failed_and_suspended() {
        assert_eq!(create_decision(None), CreateDecision::Start);
        let expected = |s| match s {
            ChannelStatus::Creating => Some(CreateDecision::Resume),
            ChannelStatus::Active => Some(CreateDecision::AlreadyActive),
            ChannelStatus::Deleting => Some(CreateDecision::Start),
            ChannelStatus::Failed | ChannelStatus::Suspended => None,
        };
        for s in ALL {
            match (create_decision(Some(&state(s))), expected(s)) {
                (d, Some(e)) => assert_eq!(d, e, "{s:?}"),
                (CreateDecision::Refuse(m), None) => {
                    assert!(m.contains("delete") && m.contains("why"), "{m}")
                }
                (d, None) => panic!("{s:?}: {d:?}"),
            }
        }
    }

    #[test]
    fn update_only_active_or_suspended() {
        assert!(update_allowed(None).is_err());
        for s in ALL {
            assert_eq!(
                update_allowed(Some(&state(s))).is_ok(),
                matches!(s, ChannelStatus::Active | ChannelStatus::Suspended),
                "{s:?}"
            );
        }
    }

    #[tokio::test]
    async fn watch_stops_a_deleted_channel_gracefully() {
        tokio::time::pause();
        let store: Arc<dyn Store> = Arc::new(crate::lease::memory::MemoryLeaseStore::new());
        let mut s = state(ChannelStatus::Active);
        let v = store.put_channel_state(&s, None).await.unwrap();
        let stops = ChannelStops {
            drain_switch: Arc::default(),
            reading: CancellationToken::new(),
            worker_done: CancellationToken::new(),
            committing: CancellationToken::new(),
            leases: CancellationToken::new(),
        };
        let task = tokio::spawn(watch_channel(
            store.clone(),
            "c".into(),
            stops.clone(),
            Duration::from_secs(30),
            CancellationToken::new(),
        ));
        tokio::time::sleep(STATE_POLL_INTERVAL * 2).await;
        assert!(!stops.reading.is_cancelled(), "an ACTIVE channel goes on");
        s.state = ChannelStatus::Deleting;
        store.put_channel_state(&s, Some(v)).await.unwrap();
        tokio::time::sleep(STATE_POLL_INTERVAL * 2).await;
        assert!(stops.reading.is_cancelled());
        assert!(stops.drain_switch.load(Ordering::SeqCst));
        // The worker loop has not returned yet: the committer keeps committing.
        assert!(!stops.committing.is_cancelled());
        stops.worker_done.cancel();
        assert!(task.await.unwrap());
        assert!(stops.committing.is_cancelled() && stops.leases.is_cancelled());
    }
}
