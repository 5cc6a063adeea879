//! `floe channel list`: every channel of the configuration file with its stored state.

use serde::Serialize;

use super::{destination_name, status_name, ControlError, Members};
use crate::config::Config;
use crate::lease::Store;

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

/// `floe channel list`: every channel of the configuration file, then every one of its
/// `members`, with its stored state.
///
/// Errors: [`ControlError::Unavailable`] when the lease store fails.
pub async fn list(
    config: &Config,
    members: &Members,
    store: &dyn Store,
) -> Result<Vec<ChannelSummary>, ControlError> {
    let mut out = Vec::new();
    let members = members.channels.iter().map(|(_, c)| c);
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
