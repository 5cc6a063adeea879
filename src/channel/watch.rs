//! The running side: the switches that stop a channel of a running worker, and the watch that
//! stops it when it is deleted, suspended or failed.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::{status_name, STATE_POLL_INTERVAL};
use crate::lease::{ChannelStatus, Store};

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
