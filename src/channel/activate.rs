//! Activation: the one path by which a channel's schema and table are resolved and recorded in
//! its channel state (docs/design.md, protocol steps 9–10). `floe channel create` and `floe run`
//! both call it; they differ only in how the channel state starts (CREATING, then ACTIVE, for
//! create; ACTIVE with the activation time, for a first `floe run`).
//!
//! ```text
//!   resolve_schema:  file ─────────────────────────────────────────────> mapped schema
//!                    Glue: version recorded in the state ─┬─> that version (config's number only warned)
//!                          none recorded ──> configured/latest ──> recorded in the state
//!                          refused at activation ──> FAILED     refused later ──> this worker stops
//!   ensure_table:    uuid recorded, table replaced ──> SUSPENDED (the whole fleet)
//!                    uuid recorded, table missing  ──> this worker stops (another catalog?)
//!                    create or check the table ──> incompatible at activation ──> FAILED
//!                    S3 Tables at activation: table encryption checked
//!                    uuid recorded in the state
//! ```
//!
//! "At activation" means the channel has not recorded the thing yet (or is still CREATING): a
//! problem then is the channel's, recorded FAILED for every worker. Once recorded, a problem is
//! this worker's configuration (a schema ARN or catalog edited on one machine): only it stops.

use std::sync::Arc;

use iceberg::table::Table;
use iceberg::Catalog;

use crate::catalog::CatalogError;
use crate::config::{
    CatalogConfig, ChannelConfig, GlueSchemaVersion, SchemaConfig, SchemaEvolution,
};
use crate::iceberg::table::{ensure_table, TableSpec};
use crate::iceberg::writer::ParquetCompression;
use crate::lease::{ChannelState, ChannelStatus, LeaseError, Store};
use crate::registry::channel_schema::{
    load_channel_schema, ChannelRegistry, ChannelSchema, SchemaLoadError,
};
use crate::time::now_ms;

/// Why activation did not complete, shaped by what the caller does next.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ActivateError {
    /// Refused, nothing recorded: fix the configuration at `path` (exit 78).
    #[error("{path}: {message}")]
    Refused {
        /// The key path to fix (`channel[0].schema.glue_schema_arn`).
        path: String,
        /// Why.
        message: String,
    },
    /// The channel was recorded FAILED with `reason`: delete it, `fix`, and create it again.
    #[error("{path}: {reason}")]
    Failed {
        /// The key path of the cause.
        path: String,
        /// Why (recorded as the channel's status reason).
        reason: String,
        /// What the operator changes before creating the channel again.
        fix: &'static str,
    },
    /// The channel's table was replaced under its name; the channel was recorded SUSPENDED.
    #[error("{0}")]
    Suspended(String),
    /// A dependency (lease store, catalog, registry) failed: retry.
    #[error("{0}")]
    Unavailable(String),
}

impl From<LeaseError> for ActivateError {
    fn from(e: LeaseError) -> Self {
        ActivateError::Unavailable(format!("lease store: {e}"))
    }
}

/// Whether `state` is still being activated: problems are then the channel's (FAILED).
fn activating(state: &ChannelState) -> bool {
    state.state == ChannelStatus::Creating
}

/// Writes `state` at its version; returns it with the new version.
///
/// Errors: `Unavailable` on a concurrent change (by a worker or another operator) or a failing
/// lease store.
async fn put(store: &dyn Store, state: &mut ChannelState) -> Result<(), ActivateError> {
    state.updated_at_ms = now_ms();
    match store.put_channel_state(state, Some(state.version)).await {
        Ok(v) => {
            state.version = v;
            Ok(())
        }
        Err(LeaseError::Conflict { .. }) => Err(ActivateError::Unavailable(format!(
            "channel {} was changed concurrently (by a worker or another operator); try again",
            state.channel
        ))),
        Err(e) => Err(e.into()),
    }
}

/// Records `state` FAILED with `reason` and returns the matching error.
async fn fail(
    store: &dyn Store,
    state: &mut ChannelState,
    path: String,
    reason: String,
    fix: &'static str,
) -> ActivateError {
    tracing::error!(channel = %state.channel, reason = %reason, "channel FAILED");
    state.state = ChannelStatus::Failed;
    state.status_reason = Some(reason.clone());
    if let Err(e) = put(store, state).await {
        return e;
    }
    ActivateError::Failed { path, reason, fix }
}

/// Records channel `channel` ACTIVE with the activation time now, unless a state exists already
/// (then that state is returned): what the first `floe run` of a channel nobody created does.
///
/// Errors: `Unavailable` when the lease store fails or keeps changing under it.
pub async fn record_activation(
    store: &dyn Store,
    channel: &str,
) -> Result<ChannelState, ActivateError> {
    record_activation_at(store, channel, None, false).await
}

/// Whether the member channel of a topic of a `table = "{topic}"` channel activated at
/// `activated_at_ms`, first met `now_ms`, is of a topic that appeared after the activation: more
/// than a topic listing (`refresh`) and a minute later. Its shards then start at their first
/// record: the activation-time lookup would skip the records a mirrored or replayed topic
/// carries with older timestamps (docs/routing.md, "Choosing topics"). A topic that existed at
/// the activation but got its table only later (left out by `max_tables`, the brokers
/// unreachable at the first listing) is so read from its first record too: older records
/// delivered, none lost.
pub fn appeared_later(activated_at_ms: i64, now_ms: i64, refresh: std::time::Duration) -> bool {
    now_ms - activated_at_ms > (refresh + std::time::Duration::from_secs(60)).as_millis() as i64
}

/// [`record_activation`], recording `at` (epoch ms) instead of now as the activation time of a
/// channel without state: a member channel of a channel with `table = "{topic}"` or `table =
/// "{route}"` takes its channel's activation time. A member of a topic that appeared after
/// that ([`appeared_later`]) is recorded to start its shards at their first record
/// ([`ChannelState::from_first_record`]).
///
/// Errors: as [`record_activation`].
pub async fn record_activation_at(
    store: &dyn Store,
    channel: &str,
    at: Option<i64>,
    from_first_record: bool,
) -> Result<ChannelState, ActivateError> {
    for _ in 0..5 {
        if let Some(state) = store.get_channel_state(channel).await? {
            return Ok(state);
        }
        let now = now_ms();
        let activated_at = at.unwrap_or(now);
        let state = ChannelState {
            channel: channel.to_string(),
            state: ChannelStatus::Active,
            status_reason: None,
            activated_at_ms: Some(activated_at),
            table_uuid: None,
            schema_version_id: None,
            version: 0,
            updated_at_ms: now,
            overrides: Default::default(),
            from_first_record,
        };
        if store.put_channel_state(&state, None).await.is_ok() {
            tracing::info!(
                channel,
                activated_at_ms = activated_at,
                from_first_record,
                "channel activated"
            );
        }
    }
    Err(ActivateError::Unavailable(
        "could not record the channel's activation".into(),
    ))
}

/// The Glue schema version id recorded in `state` at activation, if any.
///
/// Errors: `Refused` when the recorded text is not a UUID (the lease store was edited by hand):
/// never dropped silently, or the channel would record another version over it.
pub fn recorded_schema_version(state: &ChannelState) -> Result<Option<uuid::Uuid>, ActivateError> {
    match &state.schema_version_id {
        None => Ok(None),
        Some(id) => uuid::Uuid::parse_str(id).map(Some).map_err(|e| ActivateError::Refused {
            path: format!("channel {}", state.channel),
            message: format!(
                "the schema version id recorded in the channel state, {id:?}, is not a UUID ({e}): the lease store was edited; delete and create the channel"
            ),
        }),
    }
}

/// The channel's schema: a schema file's, or the Glue version recorded in `state`; with none
/// recorded, the configured version (a number, or the latest), which is then recorded in
/// `state`. A configured version number that differs from the recorded one is only warned
/// about: the schema of a channel does not change.
///
/// Errors: `Refused` for an unreadable recorded version id, or a refused schema once the
/// channel is active (this worker's configuration); `Failed` for a schema refused at
/// activation; `Unavailable` when the registry or the lease store cannot be reached.
pub async fn resolve_schema(
    index: usize,
    config: &ChannelConfig,
    store: &dyn Store,
    state: &mut ChannelState,
    registry: Option<&ChannelRegistry>,
) -> Result<ChannelSchema, ActivateError> {
    let key = config
        .schema
        .as_ref()
        .map_or("glue_schema_arn", |s| s.key());
    let path = format!("channel[{index}].schema.{key}");
    let recorded = recorded_schema_version(state)?;
    let resolved = match load_channel_schema(config, recorded, registry).await {
        Ok(s) => s,
        Err(SchemaLoadError::Unavailable(m)) => {
            // The last line of a `floe run` that gave up names the key to check, as for a broker.
            let value = match &config.schema {
                Some(SchemaConfig::Confluent(c)) => c.urls.join(","),
                Some(SchemaConfig::Glue { schema_arn, .. }) => schema_arn.clone(),
                _ => String::new(),
            };
            return Err(ActivateError::Unavailable(format!(
                "{m} ({path} = \"{value}\": check that it is reachable from this host)"
            )));
        }
        Err(SchemaLoadError::Refused(reason)) if recorded.is_none() || activating(state) => {
            return Err(fail(store, state, path, reason, "fix the schema").await);
        }
        Err(SchemaLoadError::Refused(reason)) => {
            tracing::error!(channel = %config.name, reason = %reason, "this worker cannot use the channel's schema (the channel stays as it is)");
            return Err(ActivateError::Refused {
                path,
                message: format!(
                    "this worker cannot use the channel's schema (the channel stays as it is; check channel[{index}].schema.{key}, and this worker's access to the registry): {reason}"
                ),
            });
        }
    };
    if let (
        Some(_),
        Some(SchemaConfig::Glue {
            version: GlueSchemaVersion::Number(n),
            evolution,
            ..
        }),
    ) = (recorded, &config.schema)
    {
        // With evolution the channel's version follows its table: nothing to warn about.
        if resolved.version_number != Some(*n) && *evolution == SchemaEvolution::None {
            tracing::warn!(
                channel = %config.name,
                configured = n,
                recorded = ?resolved.version_number,
                schema_version_id = %resolved.label,
                "channel[{index}].schema.version differs from the version recorded at activation: the recorded version is used (the schema of a channel does not change; delete and create the channel to use another version)"
            );
        }
    }
    if recorded.is_none() && resolved.version_id.is_some() {
        state.schema_version_id = resolved.version_id.map(|id| id.to_string());
        put(store, state).await.map_err(|e| {
            ActivateError::Unavailable(format!("recording the schema version: {e}"))
        })?;
        tracing::info!(channel = %config.name, schema_version_id = ?state.schema_version_id, "schema version recorded at activation");
    }
    Ok(resolved)
}

/// With `evolution = "compatible"`: records in `state` the schema version the table was last
/// evolved for (`floe.schema-version-id`), so that the channel's recorded version follows the
/// table and the next start resolves the schema from it. Best effort: a lost write (another
/// worker's) is logged, and the next start tries again.
pub async fn follow_table_version(store: &dyn Store, state: &mut ChannelState, table: &Table) {
    let Some(current) = crate::iceberg::evolve::current_version(table) else {
        return;
    };
    let current = current.to_string();
    if state.schema_version_id.as_deref() == Some(current.as_str()) {
        return;
    }
    let was = state.schema_version_id.replace(current.clone());
    match put(store, state).await {
        Ok(()) => {
            tracing::info!(channel = %state.channel, from = ?was, to = %current, "the channel's recorded schema version follows the table")
        }
        Err(e) => {
            tracing::debug!(channel = %state.channel, error = %e, "recording the table's schema version: lost to another worker");
        }
    }
}

/// The schema of the version the table was last evolved for (`floe.schema-version-id`), when
/// it is not `resolved` (the version this start resolved from the channel state); `None` when
/// they are the same or the table never evolved. Loaded as activation loads a recorded version
/// ([`load_channel_schema`]: same schema ARN, JSON, mappable).
///
/// Errors: `Unavailable` when the registry cannot be asked; `Refused` (this worker stops) when
/// the version cannot be used.
pub async fn table_version_schema(
    index: usize,
    config: &ChannelConfig,
    registry: &ChannelRegistry,
    table: &Table,
    resolved: Option<uuid::Uuid>,
) -> Result<Option<ChannelSchema>, ActivateError> {
    let Some(current) = crate::iceberg::evolve::current_version(table) else {
        return Ok(None);
    };
    if resolved == Some(current) {
        return Ok(None);
    }
    match load_channel_schema(config, Some(current), Some(registry)).await {
        Ok(schema) => Ok(Some(schema)),
        Err(SchemaLoadError::Unavailable(m)) => Err(ActivateError::Unavailable(m)),
        Err(SchemaLoadError::Refused(reason)) => Err(ActivateError::Refused {
            path: format!(
                "channel[{index}].schema.{}",
                config
                    .schema
                    .as_ref()
                    .map_or("glue_schema_arn", |s| s.key())
            ),
            message: format!(
                "the table's current schema version (floe.schema-version-id): {reason}"
            ),
        }),
    }
}

/// Opens channel `channel[index]`'s catalog.
///
/// Errors: `Refused` naming the catalog key to fix (and for a raw channel, which has none);
/// `Unavailable`.
pub async fn open_catalog(
    index: usize,
    config: &ChannelConfig,
    aws: &crate::aws::AwsClients,
) -> Result<Arc<dyn Catalog>, ActivateError> {
    Ok(open_catalog_and_swap(index, config, aws).await?.0)
}

/// [`open_catalog`] and the catalog's swap for maintenance commits
/// ([`crate::catalog::open_channel_catalog_and_swap`]).
///
/// Errors: as [`open_catalog`].
pub async fn open_catalog_and_swap(
    index: usize,
    config: &ChannelConfig,
    aws: &crate::aws::AwsClients,
) -> Result<
    (
        Arc<dyn Catalog>,
        Option<Arc<dyn crate::catalog::swap::TableSwap>>,
    ),
    ActivateError,
> {
    let Some(dest) = config.destination.iceberg() else {
        return Err(ActivateError::Refused {
            path: format!("channel[{index}].destination.kind"),
            message: "a raw S3 destination has no catalog".into(),
        });
    };
    crate::catalog::open_channel_catalog_and_swap(&dest.catalog, aws)
        .await
        .map_err(|e| match e {
            CatalogError::Refused { key, message } => ActivateError::Refused {
                path: format!("channel[{index}].destination.catalog.{key}"),
                message,
            },
            e => ActivateError::Unavailable(format!("catalog: {e}")),
        })
}

/// The channel's table, created when missing or checked: a table replaced under the name
/// since its uuid was recorded suspends the channel; at activation a table floe must not write
/// fails the channel, an S3 Tables table is checked for the configured encryption, and the
/// table's uuid is recorded in `state`.
///
/// Errors: `Suspended`, `Failed`, `Refused` (the recorded table is missing from this worker's
/// catalog, or no longer fits this worker's configuration), `Unavailable`.
pub async fn ensure_channel_table(
    index: usize,
    config: &ChannelConfig,
    store: &dyn Store,
    state: &mut ChannelState,
    catalog: &dyn Catalog,
    schema: &crate::schema::MappedSchema,
    aws: &crate::aws::AwsClients,
) -> Result<Table, ActivateError> {
    let name = config.name.as_str();
    let Some(dest) = config.destination.iceberg() else {
        return Err(ActivateError::Refused {
            path: format!("channel[{index}].destination.kind"),
            message: "a raw S3 destination has no table".into(),
        });
    };
    let spec = TableSpec {
        ident: iceberg::TableIdent::new(
            iceberg::NamespaceIdent::new(dest.namespace.clone()),
            dest.table.clone(),
        ),
        channel: name.to_string(),
        compression_codec: ParquetCompression::from(&dest.compression)
            .codec_name()
            .to_string(),
        target_file_size_bytes: dest.target_file_size,
        partition: dest.partition.clone(),
        sort: dest.sort.clone(),
        key: dest.key.clone(),
        format_version: dest.format_version.iceberg(),
    };
    let ident = &spec.ident;
    check_recorded_table(index, name, store, state, catalog, ident).await?;
    let at_activation = state.table_uuid.is_none() || activating(state);
    // The partition spec's and sort order's terms against the schema (a registry schema is first
    // seen here; a schema file was checked by `floe validate` already).
    if let Err((key, message)) = check_table_terms(dest, schema) {
        let path = format!("channel[{index}].destination.{key}");
        if at_activation {
            return Err(fail(
                store,
                state,
                path,
                message,
                "fix the partition spec, sort order, route field or key",
            )
            .await);
        }
        return Err(ActivateError::Refused { path, message });
    }
    let table = match ensure_table(catalog, &spec, schema).await {
        Ok(table) => table,
        Err(e @ CatalogError::Incompatible { key, .. }) if at_activation => {
            return Err(fail(
                store,
                state,
                format!("channel[{index}].destination.{key}"),
                e.to_string(),
                "point it at another table",
            )
            .await);
        }
        // The table recorded at activation no longer fits this worker's configuration (a
        // schema edited on one machine): only this worker stops.
        Err(e @ CatalogError::Incompatible { key, .. }) => {
            return Err(ActivateError::Refused {
                path: format!("channel[{index}].destination.{key}"),
                message: e.to_string(),
            })
        }
        Err(e @ CatalogError::Refused { .. }) => {
            return Err(ActivateError::Refused {
                path: format!("channel[{index}].destination.catalog"),
                message: e.to_string(),
            })
        }
        Err(CatalogError::Unavailable(e)) => return Err(catalog_unavailable(e)),
    };
    if at_activation {
        if let CatalogConfig::S3Tables(s3t) = &dest.catalog {
            check_s3tables_encryption(index, name, store, state, s3t, aws, ident).await?;
        }
    }
    if state.table_uuid.is_none() {
        state.table_uuid = Some(table.metadata().uuid().to_string());
        match put(store, state).await {
            Ok(()) => {}
            // Another worker recorded it first: the same table, checked on its next start.
            Err(e) => {
                tracing::debug!(channel = name, error = %e, "table uuid recorded by another worker")
            }
        }
    }
    Ok(table)
}

/// An Iceberg error of the catalog, as the operation's error.
fn catalog_unavailable(e: iceberg::Error) -> ActivateError {
    ActivateError::Unavailable(format!("catalog: {e}"))
}

/// Checks that the table recorded at activation (its uuid in `state`) is still the table under
/// `ident`; nothing to check before a table was recorded.
///
/// Errors: `Suspended` (recorded) when another table took its name; `Refused` when this
/// worker's catalog lacks it; `Unavailable`.
async fn check_recorded_table(
    index: usize,
    name: &str,
    store: &dyn Store,
    state: &mut ChannelState,
    catalog: &dyn Catalog,
    ident: &iceberg::TableIdent,
) -> Result<(), ActivateError> {
    // The table recorded at activation must still be the same table: a table that was dropped
    // (and maybe recreated) is not written to, or records would be delivered again.
    let Some(uuid) = state.table_uuid.clone() else {
        return Ok(());
    };
    let current = if catalog
        .table_exists(ident)
        .await
        .map_err(catalog_unavailable)?
    {
        Some(
            catalog
                .load_table(ident)
                .await
                .map_err(catalog_unavailable)?
                .metadata()
                .uuid()
                .to_string(),
        )
    } else {
        None
    };
    match current {
        Some(current) if current == uuid => Ok(()),
        // Another table under the name: affirmative evidence that the channel's table was
        // replaced. The channel is suspended for the whole fleet.
        Some(current) => {
            let reason =
                format!("table {ident} (uuid {uuid}) was dropped and replaced (now {current})");
            tracing::error!(channel = name, reason = %reason, "channel SUSPENDED");
            state.state = ChannelStatus::Suspended;
            state.status_reason = Some(reason.clone());
            if let Err(e) = put(store, state).await {
                tracing::warn!(channel = name, error = %e, "could not record the channel as suspended");
            }
            Err(ActivateError::Suspended(reason))
        }
        // Missing from *this worker's* catalog: a dropped table, or a worker configured with
        // another catalog (a typo in `uri`, another `name`, another host's SQLite file).
        // Only this worker stops; a worker that sees the drop while delivering suspends the
        // channel (the worker loop's table-gone path).
        None => Err(ActivateError::Refused {
            path: format!("channel[{index}].destination.catalog"),
            message: format!(
                "table {ident} (uuid {uuid}, recorded when the channel was activated) is not in this worker's catalog: check channel.destination.catalog (every worker of a channel must use the same catalog); if the table was dropped, the channel is suspended by the workers that deliver to it"
            ),
        }),
    }
}

/// The partition spec's and sort order's terms, the route field and the upsert key, against the table's
/// schema: `(key under channel[i].destination, why)` of the first that does not fit.
fn check_table_terms(
    dest: &crate::config::IcebergDestinationConfig,
    schema: &crate::schema::MappedSchema,
) -> Result<(), (String, String)> {
    crate::schema::partition::unbound_spec(&dest.partition, schema.iceberg_schema())
        .map(|_| ())
        .map_err(|(i, message)| (format!("partition[{i}]"), message))
        .and_then(|()| {
            crate::schema::sort::sort_order(&dest.sort, schema.iceberg_schema())
                .map(|_| ())
                .map_err(|(i, message)| (format!("sort[{i}]"), message))
        })
        .and_then(|()| match &dest.route {
            Some(route) => crate::convert::route::check_route_field(route, schema)
                .map_err(|message| ("route_field".to_string(), message))
                .and_then(|()| {
                    route
                        .check_routes(schema.iceberg_schema())
                        .map_err(|message| ("routes".to_string(), message))
                }),
            None => Ok(()),
        })
        .and_then(|()| {
            crate::config::cdc::check_key(&dest.key, schema.iceberg_schema())
                .map_err(|message| ("key".to_string(), message))
        })
}

/// At activation, checks that an S3 Tables table is encrypted as configured.
///
/// Errors: `Failed` (recorded) for a table encrypted otherwise; `Refused` naming the catalog
/// key; `Unavailable`.
async fn check_s3tables_encryption(
    index: usize,
    name: &str,
    store: &dyn Store,
    state: &mut ChannelState,
    s3t: &crate::config::S3TablesCatalogConfig,
    aws: &crate::aws::AwsClients,
    ident: &iceberg::TableIdent,
) -> Result<(), ActivateError> {
    match crate::catalog::aws::check_table_encryption(s3t, aws, ident, name).await {
        Ok(()) => Ok(()),
        Err(e @ CatalogError::Incompatible { .. }) => Err(fail(
            store,
            state,
            format!("channel[{index}].destination.table"),
            e.to_string(),
            "point it at another table",
        )
        .await),
        Err(CatalogError::Refused { key, message }) => Err(ActivateError::Refused {
            path: format!("channel[{index}].destination.catalog.{key}"),
            message,
        }),
        Err(CatalogError::Unavailable(e)) => Err(catalog_unavailable(e)),
    }
}
