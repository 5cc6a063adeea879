//! `floe channel delete`: DELETING recorded, the stream consumer of an enhanced fan-out channel
//! deregistered, and the wait until no worker holds a lease of the channel.

use std::time::Duration;

use super::{find_channel, put, state_path, status_name, ControlError, Members};
use crate::config::Config;
use crate::lease::{ChannelState, ChannelStatus, Store};

/// `floe channel delete`: records DELETING. Workers stop delivering the channel within
/// [`STATE_POLL_INTERVAL`](super::STATE_POLL_INTERVAL) (they drain what they buffered, commit it, and release their
/// leases); the table and the DLQ keep everything delivered. Deleting a DELETING channel is a
/// no-op. `name` is a channel of `config` or one of its `members`.
///
/// Errors: [`ControlError::Refused`] when the channel was never created.
pub async fn delete(
    config: &Config,
    members: &Members,
    name: &str,
    store: &dyn Store,
) -> Result<ChannelState, ControlError> {
    find_channel(config, members, name)?;
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
    members: &Members,
    name: &str,
    aws: &crate::aws::AwsClients,
) -> Result<Option<String>, ControlError> {
    let (_, channel) = find_channel(config, members, name)?;
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
