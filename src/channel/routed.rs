//! `floe channel create` and `delete` of a channel with `table = "{route}"` (docs/routing.md,
//! "Fan-out by a field"): the channel has a state of its own (its activation, whether it is
//! deleted) and no table; its tables are its member channels', created and deleted with it.

use crate::config::Config;
use crate::lease::{ChannelState, ChannelStatus, Store};

use super::{create_decision, delete, member_names, put, state_path, ControlError, CreateDecision};

/// Records routed channel `name` as ACTIVE, activated now, when it has no state or was
/// deleted (the members are then created one by one, by [`super::create`]); an ACTIVE one is
/// returned as it is.
///
/// Errors: [`ControlError::Refused`] for a FAILED or SUSPENDED channel, or a name that is not a
/// routed channel of `config`; [`ControlError::Unavailable`] when the lease store fails.
pub async fn activate_routed(
    config: &Config,
    name: &str,
    store: &dyn Store,
) -> Result<ChannelState, ControlError> {
    if member_names(config, name).is_empty() {
        return Err(ControlError::refused(
            "channel",
            format!("{name:?} is not a channel with table = \"{{route}}\""),
        ));
    }
    let current = store.get_channel_state(name).await?;
    match create_decision(current.as_ref()) {
        CreateDecision::AlreadyActive => Ok(current.expect("active state")),
        CreateDecision::Refuse(message) => Err(ControlError::refused(state_path(name), message)),
        CreateDecision::Start | CreateDecision::Resume => {
            let expected = current.as_ref().map(|s| s.version);
            let state = ChannelState {
                channel: name.to_string(),
                state: ChannelStatus::Active,
                status_reason: None,
                activated_at_ms: Some(crate::time::now_ms()),
                table_uuid: None,
                schema_version_id: None,
                version: 0,
                updated_at_ms: 0,
                overrides: current.map(|s| s.overrides).unwrap_or_default(),
            };
            put(store, state, expected).await
        }
    }
}

/// `floe channel delete` of routed channel `name`: records DELETING for the channel and for
/// each of its members that has a state (running workers stop every member either way).
/// Returns the states recorded.
///
/// Errors: [`ControlError::Refused`] when neither the channel nor any member was ever created.
pub async fn delete_routed(
    config: &Config,
    name: &str,
    store: &dyn Store,
) -> Result<Vec<ChannelState>, ControlError> {
    let mut states = Vec::new();
    let mut missing = None;
    for n in std::iter::once(name.to_string()).chain(member_names(config, name)) {
        match delete(config, &n, store).await {
            Ok(state) => states.push(state),
            // Never created: nothing to delete for this one.
            Err(e @ ControlError::Refused(_)) => missing = Some(e),
            Err(e) => return Err(e),
        }
    }
    match (states.is_empty(), missing) {
        (true, Some(e)) => Err(e),
        _ => Ok(states),
    }
}
