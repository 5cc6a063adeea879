//! Fan-out by a field: a channel with `table = "{route}"` runs as one member channel per
//! routed table (docs/routing.md, "Fan-out by a field").
//!
//! ```text
//!   channel `c` (table = "{route}") ── activation time recorded once, for `c`
//!       ├─ member `c.events_ap` ── reads the whole source, keeps region=ap (+ UNROUTABLE DLQ)
//!       ├─ member `c.events_eu` ── reads the whole source, keeps region=eu
//!       └─ member `c.events_us` ── reads the whole source, keeps region=us
//!   (Kafka: the members on a worker read through one consumer that fetches each partition
//!   once for all of them, each from its own checkpoints; see `SharedClients::kafka_source`)
//! ```
//!
//! The set of tables is static (the configuration's `routes` and default table), so the
//! members start with the process: no lister. Each member is a channel of its own in the lease
//! store (leases, committer lease and epoch, checkpoints in its table), so exactly-once per
//! table is the single-table protocol of docs/design.md; a member skips the other tables'
//! records and checkpoints past them. Each member watches the channel's state besides its own:
//! `floe channel delete <channel>` stops them all. Naming, member activation and the parent
//! watch are [`crate::channel::members`]'s, shared with `floe run`'s table per topic and the
//! control plane.

use crate::channel::{activate, members};
use crate::config::ChannelConfig;

use super::{activate_err, channel_err, AppError, FatalScope, Fleet};

impl Fleet {
    /// Records the activation of `name`, a channel that runs as member channels (`table =
    /// "{route}"` or `table = "{topic}"`): its activation time is every member's.
    ///
    /// Errors: [`AppError::ChannelRefused`] for a channel that is not ACTIVE (being deleted);
    /// [`AppError::ChannelUnavailable`] when the lease store fails.
    pub(super) async fn activate_parent(
        &self,
        name: &str,
    ) -> Result<crate::lease::ChannelState, AppError> {
        let state = activate::record_activation(self.store.as_ref(), name)
            .await
            .map_err(|e| activate_err(name, e))?;
        if let crate::channel::RunDecision::Refuse(message) =
            crate::channel::run_decision(Some(&state))
        {
            return Err(channel_err(name, message));
        }
        Ok(state)
    }

    /// Stops a member (its `stops`) when its channel `parent` is no longer ACTIVE
    /// ([`members::watch_parent`], in a task of the fleet's).
    pub(super) fn watch_parent(&self, parent: &str, stops: crate::channel::ChannelStops) {
        self.tracker.spawn(members::watch_parent(
            self.store.clone(),
            parent.to_string(),
            stops,
            self.config.worker.shutdown_timeout,
            self.stop_reading.clone(),
        ));
    }
}

impl Fleet {
    /// Activates routed channel `channel` (its activation time is every member's) and starts
    /// a member channel per table of its route, each stopping alone on a fatal error.
    ///
    /// Errors: [`AppError::ChannelRefused`] for a channel that is not ACTIVE or a member
    /// refused at start (a foreign table, a route field the schema lacks);
    /// [`AppError::ChannelUnavailable`] when the lease store fails.
    pub(super) async fn start_routed(
        &self,
        index: usize,
        channel: &ChannelConfig,
    ) -> Result<(), AppError> {
        let name = channel.name.as_str();
        let Some(route) = channel.destination.iceberg().and_then(|d| d.route.as_ref()) else {
            return Err(channel_err(name, "table = \"{route}\" needs a route"));
        };
        let state = self.activate_parent(name).await?;
        for table in route.tables() {
            let member = channel.route_member(table);
            members::activate_member(
                self.store.as_ref(),
                &member.name,
                state.activated_at_ms,
                None,
            )
            .await
            .map_err(|e| activate_err(&member.name, e))?;
            let stops = self
                .start_channel(
                    index,
                    member.clone(),
                    FatalScope::Member,
                    Some(self.shared_presence(name)),
                )
                .await?;
            self.watch_parent(name, stops);
            tracing::info!(channel = %name, member = %member.name, table, "routed table started");
        }
        Ok(())
    }
}
