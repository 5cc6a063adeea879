//! `floe channel update`: settings recorded in the lease store that win over the file.

use std::time::Duration;

use super::{find_channel, put, state_path, update_allowed, ControlError, Members};
use crate::config::Config;
use crate::lease::{ChannelState, DeliveryLog, Store};

/// What `floe channel update` may change.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Update {
    /// New `data_freshness`.
    pub data_freshness: Option<Duration>,
    /// New delivery log setting.
    pub delivery_log: Option<DeliveryLog>,
}

/// `floe channel update`: records new settings (data freshness, delivery logs) that win over
/// the configuration file; running workers pick them up within [`STATE_POLL_INTERVAL`](super::STATE_POLL_INTERVAL).
/// `name` is a channel of `config` or one of its `members`.
///
/// Errors: [`ControlError::Refused`] when nothing is to change, a value is out of range, or the
/// channel is not ACTIVE or SUSPENDED.
pub async fn update(
    config: &Config,
    members: &Members,
    name: &str,
    store: &dyn Store,
    change: &Update,
) -> Result<ChannelState, ControlError> {
    find_channel(config, members, name)?;
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
