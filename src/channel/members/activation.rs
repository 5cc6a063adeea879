//! A parent channel's activation (its time is every member's), a member's activation at its
//! parent's time, and the watch that stops a running member when its parent is deleted.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::super::activate::{self, ActivateError};
use super::super::{create_decision, put, state_path, ControlError, CreateDecision};
use super::super::{watch_channel, ChannelStops};
use crate::lease::{ChannelState, ChannelStatus, Store};
use crate::time::now_ms;

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

/// Whether the member of a topic, first met now, of a channel activated at
/// `parent_activated_at` (epoch ms) with topic listing interval `topic_refresh`, is of a topic
/// that appeared after the activation ([`activate::appeared_later`]): its shards then start at
/// their first record. `false` without an activation time or for a member that is no topic's
/// (`topic_refresh` `None`: a routed table's member, whose tables are known from the start).
pub fn topic_appeared_later(
    parent_activated_at: Option<i64>,
    topic_refresh: Option<Duration>,
) -> bool {
    match (parent_activated_at, topic_refresh) {
        (Some(at), Some(refresh)) => activate::appeared_later(at, now_ms(), refresh),
        _ => false,
    }
}

/// Records the activation of member channel `member` at its parent's activation time
/// `parent_activated_at` (epoch ms) when it has no state yet ([`activate::record_activation_at`]),
/// from its shards' first record when it is the member of a topic that appeared later
/// ([`topic_appeared_later`]; `topic_refresh` is the parent's `topic_refresh_interval`, `None`
/// for a routed table's member). Returns its state.
///
/// Errors: as [`activate::record_activation_at`].
pub async fn activate_member(
    store: &dyn Store,
    member: &str,
    parent_activated_at: Option<i64>,
    topic_refresh: Option<Duration>,
) -> Result<ChannelState, ActivateError> {
    let late = topic_appeared_later(parent_activated_at, topic_refresh);
    activate::record_activation_at(store, member, parent_activated_at, late).await
}

/// Stops a running member (its `stops`) when its channel `parent` is no longer ACTIVE, as
/// [`watch_channel`] does for a channel's own state (draining within `shutdown_timeout` and 2
/// s more): `floe channel delete <channel>` stops every member, as each member's own state
/// stops it alone. Returns when `stop` is cancelled (`false`) or the member was stopped.
pub async fn watch_parent(
    store: Arc<dyn Store>,
    parent: String,
    stops: ChannelStops,
    shutdown_timeout: Duration,
    stop: CancellationToken,
) -> bool {
    watch_channel(
        store,
        parent,
        stops,
        shutdown_timeout + Duration::from_secs(2),
        stop,
    )
    .await
}
