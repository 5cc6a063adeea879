//! `floe channel create`: the checks before anything is recorded (schema, DLQ, source), then
//! CREATING, the table created or checked, and ACTIVE with the activation time.

use super::activate::{self, ActivateError};
use super::members::topic_appeared_later;
use super::{
    create_decision, destination_name, find_channel, put, schema_file, state_path, ControlError,
    CreateDecision, Members,
};
use crate::config::{ChannelConfig, Config, ConfigError, DestinationConfig, DlqLocation};
use crate::lease::{ChannelState, ChannelStatus, Store};
use crate::time::now_ms;

/// `floe channel create`: validates the channel, records CREATING, creates (or checks) its
/// table, and records ACTIVE with the activation time. Idempotent: an ACTIVE channel is
/// returned as it is; a CREATING one is finished. `name` is a channel of `config` or one of its
/// `members`.
///
/// Errors: [`ControlError::Refused`] for a validation failure (nothing recorded), a channel
/// FAILED or SUSPENDED, or a table floe must not write (the channel is recorded FAILED);
/// [`ControlError::Unavailable`] when the lease store or the catalog cannot be reached (the
/// channel stays CREATING: run create again).
pub async fn create(
    config: &Config,
    members: &Members,
    name: &str,
    store: &dyn Store,
    aws: &crate::aws::AwsClients,
) -> Result<ChannelState, ControlError> {
    create_at(config, members, name, store, aws, None).await
}

/// [`create`], recording `activated_at` (epoch ms) instead of the time of activation: a member
/// channel of a table per topic takes its channel's activation time (see
/// [`activate::record_activation_at`]).
///
/// Errors: as [`create`].
pub async fn create_at(
    config: &Config,
    members: &Members,
    name: &str,
    store: &dyn Store,
    aws: &crate::aws::AwsClients,
    activated_at: Option<i64>,
) -> Result<ChannelState, ControlError> {
    let (index, channel) = find_channel(config, members, name)?;
    let channel = &channel;
    if channel.is_routed() {
        // Its tables are its members' (docs/routing.md, "Fan-out by a field").
        let names = members.names_of(config, name);
        return Err(ControlError::refused(
            "channel",
            format!(
                "{name:?} (table = \"{{route}}\") writes its tables through member channels: create them by name ({}), or let floe run create them",
                names.join(", ")
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
    // record, as `floe run` would start it.
    let late = topic_appeared_later(activated_at, members.topic_refresh(config, name));
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
