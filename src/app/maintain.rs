//! `floe maintain`: one maintenance pass now, for channels whose workers are stopped (or to
//! catch a table up after maintenance was off): every enabled task once — pending batches
//! committed, snapshot expiry, compaction of closed hours (waited for), manifest rewrite,
//! record expiration, metadata cleanup and the orphan sweep.
//!
//! It acts as the channel's committer, so it never runs beside one: it takes the committer
//! lease (a new lease counter: a new epoch, written to the table by its first commit, which
//! fences any committer that held the lease before) and renews it while it works. When a worker
//! holds the lease and renews it, the pass is refused for that channel — that committer
//! maintains the table itself, every `interval`.
//!
//! ```text
//!  committer lease: free, or its heartbeat stood still for lease_duration -> take it
//!                   renewed by a live worker                              -> refused
//!  commit round (pending batches, the epoch) -> expiry rides in it
//!  look: record expiry + manifest rewrite + finished compaction -> start compaction, wait, look
//!  orphan sweep (now), wait -> release the lease
//! ```

use std::sync::Arc;
use std::time::Duration;

use super::{open_lease_store, prepare_channel, AppError, SharedClients};
use crate::aws::AwsClients;
use crate::channel::Members;
use crate::commit::Committer;
use crate::config::{ChannelConfig, Config};
use crate::iceberg::target::IcebergTarget;
use crate::lease::{BatchStore, LeaseKey, LeaseStore, Store};
use crate::worker::DestinationIo;

/// Looks at most this many times per channel (each may commit one maintenance snapshot).
const MAX_LOOKS: usize = 20;

/// What one channel's pass did, one line for the operator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MaintainReport {
    /// Channel name.
    pub channel: String,
    /// What was done, or why nothing was.
    pub summary: String,
}

/// Runs one maintenance pass on every Iceberg channel of `config` (only `channel` when given).
///
/// Errors: the channel named does not exist or has a raw destination
/// ([`AppError::ChannelRefused`]); a live committer holds a channel's lease
/// ([`AppError::ChannelUnavailable`], retry when its workers are stopped); a dependency failed.
pub async fn maintain(
    config: &Config,
    channel: Option<&str>,
) -> Result<Vec<MaintainReport>, AppError> {
    let aws = AwsClients::for_config(config).await;
    aws.check_credentials()
        .await
        .map_err(AppError::AwsCredentialsMissing)?;
    let store = open_lease_store(&config.lease_store, &aws).await?;
    // A channel with a table per topic or per route is maintained table by table: its member
    // channels (each with its committer lease), named `<channel>.<topic>` / `<channel>.<table>`.
    let mut members = Members::default();
    if config.channels.iter().any(|c| c.has_members()) {
        members = crate::channel::resolve_members(config, store.as_ref())
            .await
            .map_err(|e| AppError::ChannelUnavailable {
                channel: channel.unwrap_or_default().to_string(),
                message: e.to_string(),
            })?;
    }
    let chosen: Vec<(usize, &ChannelConfig)> = config
        .channels
        .iter()
        .enumerate()
        .filter(|(_, c)| !c.has_members())
        .chain(members.channels.iter().map(|(i, c)| (*i, c)))
        .filter(|(i, c)| channel.is_none_or(|n| c.name == n || config.channels[*i].name == n))
        .collect();
    if let Some(name) = channel {
        match chosen.first() {
            None => {
                return Err(AppError::ChannelRefused {
                    channel: name.to_string(),
                    message: "no such channel in the config file".into(),
                })
            }
            Some((_, c)) if c.destination.iceberg().is_none() => {
                return Err(AppError::ChannelRefused {
                    channel: name.to_string(),
                    message: "a raw S3 destination has no table to maintain".into(),
                })
            }
            Some(_) => {}
        }
    }
    let mut reports = Vec::new();
    for (index, c) in chosen {
        if c.destination.iceberg().is_none() {
            continue;
        }
        reports.push(maintain_channel(config, index, c, &store, &aws).await?);
    }
    Ok(reports)
}

async fn maintain_channel(
    config: &Config,
    index: usize,
    channel: &ChannelConfig,
    store: &Arc<dyn Store>,
    aws: &AwsClients,
) -> Result<MaintainReport, AppError> {
    let name = channel.name.clone();
    let unavailable = |message: String| AppError::ChannelUnavailable {
        channel: name.clone(),
        message,
    };
    let lease = take_committer_lease(config, &name, store.as_ref())
        .await
        .map_err(&unavailable)?;
    let prepared = prepare_channel(
        index,
        channel,
        store.as_ref(),
        aws,
        &SharedClients::default(),
    )
    .await?;
    let DestinationIo::Iceberg(io) = prepared.io.destination else {
        return Err(AppError::ChannelRefused {
            channel: name,
            message: "a raw S3 destination has no table to maintain".into(),
        });
    };
    // Renew the lease while the pass runs (a long compaction outlasts lease_duration).
    let renewing = {
        let store = store.clone();
        let mut held = lease.clone();
        let every = config.lease_store.renew_interval;
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                match store.renew_lease(&held).await {
                    Ok(l) => held = l,
                    Err(e) => {
                        tracing::warn!(channel = %held.channel, error = %e, "floe maintain lost the committer lease: its next commit is fenced");
                        return;
                    }
                }
            }
        })
    };
    let maintenance = crate::config::MaintenanceConfig {
        interval: Duration::ZERO,
        ..io.maintenance
    };
    let leases: Arc<dyn LeaseStore> = store.clone();
    let target = Arc::new(
        IcebergTarget::new(&name, io.ident.clone(), io.catalog.clone(), io.dlq.clone())
            .with_maintenance(maintenance)
            .with_rewrites(io.swap.clone(), io.writer.clone())
            .with_orphan_sweep_if(io.lister.clone())
            .with_upsert_if(io.upsert_key())
            .with_lease_fence(leases.clone()),
    );
    let batches: Arc<dyn BatchStore> = store.clone();
    let committer = Committer::new(
        name.clone(),
        target.clone(),
        leases,
        batches.clone(),
        lease.lease_counter,
    );
    let result = async {
        let round = committer
            .commit_round()
            .await
            .map_err(|e| unavailable(format!("commit round: {e}")))?;
        let mut tasks: Vec<&'static str> = Vec::new();
        let mut snapshots: Vec<String> = Vec::new();
        let mut failures: Vec<String> = Vec::new();
        for _ in 0..MAX_LOOKS {
            let report = target
                .maintain_once(lease.lease_counter)
                .await
                .map_err(|e| unavailable(format!("maintenance: {e}")))?;
            tasks.extend(report.tasks.iter().copied());
            snapshots.extend(report.snapshots.iter().map(|s| {
                format!(
                    "{} {} ({}: +{}/-{} records)",
                    s.operation, s.snapshot_id, s.tasks, s.added_records, s.deleted_records
                )
            }));
            if report.compaction_started {
                if let Some(e) = target.maintainer().wait_for_compaction().await {
                    failures.push(format!("compaction failed: {e}"));
                    break;
                }
                continue;
            }
            if report.snapshot_id.is_none() {
                break;
            }
        }
        let swept = target
            .sweep_now(lease.lease_counter, batches.as_ref())
            .await
            .map_err(|e| unavailable(format!("orphan sweep: {e}")))?;
        target.maintainer().wait_for_sweep().await;
        target.wait_for_cleanup().await;
        if !failures.is_empty() {
            // Not "nothing to do": the work is still there, and the operator must know.
            return Err(unavailable(format!(
                "committed {} pending batches; maintenance: {}",
                round.committed,
                failures.join("; ")
            )));
        }
        tasks.dedup();
        Ok::<_, AppError>(format!(
            "committed {} pending batches; maintenance: {}{}; orphan sweep: {}",
            round.committed,
            if tasks.is_empty() {
                "nothing to do".to_string()
            } else {
                tasks.join(", ")
            },
            if snapshots.is_empty() {
                String::new()
            } else {
                format!(" (snapshots: {})", snapshots.join(", "))
            },
            if swept { "done (see the log)" } else { "off" }
        ))
    }
    .await;
    renewing.abort();
    let _ = store.release_lease(&lease).await;
    Ok(MaintainReport {
        channel: name,
        summary: result?,
    })
}

/// Takes channel `channel`'s committer lease for `floe maintain`, waiting one lease duration
/// to tell a live holder (its heartbeat moves) from a dead one.
///
/// Errors: a live worker holds it, the channel never ran (no lease), or the store failed.
async fn take_committer_lease(
    config: &Config,
    channel: &str,
    store: &dyn Store,
) -> Result<crate::lease::Lease, String> {
    let committer = |leases: Vec<crate::lease::Lease>| {
        leases.into_iter().find(|l| l.key == LeaseKey::Committer)
    };
    let read = |e: crate::lease::LeaseError| format!("lease store: {e}");
    let Some(first) = committer(store.list_leases(channel).await.map_err(read)?) else {
        return Err("the channel has no committer lease yet: run its workers once first".into());
    };
    let lease = match &first.owner {
        None => first,
        Some(owner) => {
            let wait = config.lease_store.lease_duration + config.lease_store.renew_interval;
            tracing::info!(channel, owner = %owner, wait_s = wait.as_secs_f64(), "waiting to see whether the committer lease is renewed");
            tokio::time::sleep(wait).await;
            let now = committer(store.list_leases(channel).await.map_err(read)?)
                .ok_or("the committer lease vanished")?;
            if now.heartbeat != first.heartbeat || now.lease_counter != first.lease_counter {
                return Err(format!(
                    "worker {} holds the committer lease and renews it: that committer maintains the table (every interval); stop the channel's workers to run floe maintain",
                    now.owner.as_deref().unwrap_or("?")
                ));
            }
            now
        }
    };
    let me = format!("floe-maintain-{}", std::process::id());
    store
        .take_lease(&lease, &me)
        .await
        .map_err(|e| format!("could not take the committer lease: {e}"))
}
