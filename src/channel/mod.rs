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
//!
//! This file holds the state machine (pure) and the helpers every operation uses; each command
//! has its own file (`create.rs`, `update.rs`, `delete.rs`, `describe.rs`, `list.rs`),
//! `members/` holds the member channels of a table per topic or per route (naming, admission,
//! activation, the parent watch; shared with `floe run`), and `watch.rs` stops a running channel
//! that is deleted.

pub mod activate;
mod create;
mod delete;
mod describe;
mod list;
pub mod members;
pub mod schema_file;
mod update;
mod watch;

pub use create::{check_dlq_writable, create, create_at, preflight};
pub use delete::{delete, deregister_consumer, wait_released};
pub use describe::{
    describe, ChannelDescription, SchemaHistoryEntry, ShardDescription, StreamConsumerDescription,
};
pub use list::{list, ChannelSummary};
pub use members::{resolve_members, Members};
pub use update::{update, Update};
pub use watch::{watch_channel, ChannelStops};

use activate::ActivateError;

use std::sync::Arc;
use std::time::Duration;

use iceberg::{Catalog, NamespaceIdent, TableIdent};

use crate::config::{ChannelConfig, Config, ConfigError, DestinationConfig};
use crate::lease::{ChannelOverrides, ChannelState, ChannelStatus, LeaseError, Store};
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
/// a configured channel, or a member channel of `members` ([`Members::find`]: a member
/// `<channel>.<table>` of a channel with `table = "{route}"`, or a member `<channel>.<topic>`
/// of a channel with `table = "{topic}"` resolved by [`resolve_members`], docs/routing.md).
///
/// Errors: [`ControlError::Refused`] when the file has no such channel.
pub fn find_channel(
    config: &Config,
    members: &Members,
    name: &str,
) -> Result<(usize, ChannelConfig), ControlError> {
    config
        .channels
        .iter()
        .enumerate()
        .find(|(_, c)| c.name == name)
        .map(|(i, c)| (i, c.clone()))
        .or_else(|| members.find(config, name))
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

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;

    use tokio_util::sync::CancellationToken;

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
