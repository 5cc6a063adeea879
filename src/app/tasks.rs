//! A started channel's tasks, wired for one channel (a configured one, or a member of a channel
//! with `table = "{topic}"` or `"{route}"`): its lease manager with the balancer's shard
//! discovery, its state watcher, its committer loop and its worker loop.
//!
//! ```text
//!   prepare (activation, table, source) + ensure leases   ── retried with backoff
//!     ├─ lease manager   (stops.leases)      publishes HeldLeases
//!     ├─ state watcher   (watch_channel)     `floe channel delete` stops this channel alone
//!     ├─ committer loop  (stops.committing)  while this worker holds the committer lease
//!     └─ worker loop     (stops.reading)     restarted with backoff; a fatal error stops the
//!                                            process (configured channel) or the member alone
//! ```

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::channel::ChannelStops;
use crate::commit::{CommitError, Committer};
use crate::config::{ChannelConfig, Config, LeaseStoreConfig, SourceConfig};
use crate::iceberg::target::IcebergTarget;
use crate::lease::manager::{
    HandOffReplies, HeldLeases, LeaseManager, LeaseManagerConfig, ShardDiscovery, SharedPresence,
};
use crate::lease::{BatchStore, ChannelStatus, LeaseKey, LeaseSpec, LeaseStore, Store};
use crate::raw::target::RawTarget;
use crate::retry::Backoff;
use crate::source::Source;
use crate::worker::{
    commit_spacing, idle_poll_after, ChannelIo, ChannelWorker, DestinationIo, WorkerError,
    WorkerSettings,
};

use super::{
    channel_err, channel_unavailable, prepare_channel, source_error, with_retry, AppError,
    FatalScope, Fleet, PreparedChannel,
};

/// A worker loop that ran at least this long before failing restarts after the first backoff
/// (0.5 s) again, not after the longest one reached by earlier failures.
const WORKER_BACKOFF_RESET: Duration = Duration::from_secs(60);

impl Fleet {
    /// Prepares channel `channel` (activation, table, source; retried with backoff while
    /// retryable), ensures its leases and starts its tasks: lease manager, state watcher,
    /// committer loop and worker loop. A member channel's lease manager lives by `shared`, this
    /// worker's presence in the members' channel. Returns the switches that stop it alone.
    ///
    /// Errors: [`AppError::ChannelRefused`] (not retryable) or the last retryable error.
    pub(super) async fn start_channel(
        &self,
        index: usize,
        channel: ChannelConfig,
        scope: FatalScope,
        shared: Option<Arc<SharedPresence>>,
    ) -> Result<ChannelStops, AppError> {
        let prepared = self.prepare_with_leases(index, &channel).await?;
        let name = channel.name.clone();
        let mut manager = self.lease_manager(&channel, &prepared);
        if let Some(shared) = shared {
            // A member: its leases live by this worker's one presence row in its channel.
            manager = manager.with_shared_presence(shared);
        }
        let held = manager.subscribe();
        // Balancing moves are graceful: the worker hands a moving shard's rows off and says when
        // they are committed (docs/design.md, "Graceful hand-off").
        let handoff_replies = manager.handoff_replies();
        self.register_drain_switch(&manager);
        // Per-channel stops: `floe channel delete` stops this channel alone (see `control`).
        let stops = ChannelStops {
            drain_switch: manager.drain_switch(),
            reading: self.stop_reading.child_token(),
            worker_done: CancellationToken::new(),
            committing: self.stop_committing.child_token(),
            leases: self.stop_leases.child_token(),
        };
        self.tracker.spawn(manager.run(stops.leases.clone()));
        self.tracker.spawn(crate::channel::watch_channel(
            self.store.clone(),
            name.clone(),
            stops.clone(),
            self.config.worker.shutdown_timeout + Duration::from_secs(2),
            self.stop_reading.clone(),
        ));
        register_readiness(&name, &prepared.io.destination, &held);

        // Committer loop, woken at once by this process's worker after each batch it hands off.
        let batch_signal = Arc::new(tokio::sync::Notify::new());
        self.tracker.spawn(committer_loop(
            name.clone(),
            prepared.io.destination.clone(),
            self.store.clone(),
            CommitterWakeups {
                held: held.clone(),
                batches: batch_signal.clone(),
            },
            stops.committing.clone(),
            prepared.config.destination.data_freshness(),
            self.stop_reading.child_token(),
        ));

        // Worker loop, restarted with backoff on failure.
        let worker = WorkerLoop {
            settings: worker_settings(&self.config, &channel, &prepared),
            io: prepared.io,
            store: self.store.clone(),
            held,
            handoff_replies,
            batch_signal,
            stops: stops.clone(),
            drain: self.config.worker.shutdown_timeout,
            scope,
            fatal: self.fatal.clone(),
            fatal_token: self.fatal_token.clone(),
        };
        self.workers.spawn(worker.run());
        Ok(stops)
    }

    /// Prepares channel `channel` (activation, table, source), lists its shards and ensures
    /// their leases and the committer's, retried with backoff while retryable.
    ///
    /// Errors: [`AppError::ChannelRefused`] (not retryable) or the last retryable error.
    async fn prepare_with_leases(
        &self,
        index: usize,
        channel: &ChannelConfig,
    ) -> Result<PreparedChannel, AppError> {
        let (store, aws, clients) = (&self.store, &self.aws, &self.clients);
        let name = channel.name.as_str();
        with_retry("starting the channel", &self.shutdown, || async {
            let prepared = prepare_channel(index, channel, store.as_ref(), aws, clients).await?;
            let shards = prepared.io.source.list_shards().await.map_err(|e| {
                let message = source_error(index, channel, &e);
                if e.is_retryable() {
                    channel_unavailable(name, message)
                } else {
                    channel_err(name, message)
                }
            })?;
            let mut specs: Vec<LeaseSpec> = shards
                .iter()
                .map(|s| {
                    LeaseSpec::new(LeaseKey::Shard(s.id.clone())).with_parents(s.parents.clone())
                })
                .collect();
            specs.push(LeaseSpec::new(LeaseKey::Committer));
            store
                .ensure_leases(name, &specs)
                .await
                .map_err(|e| channel_unavailable(name, e))?;
            Ok(prepared)
        })
        .await
    }

    /// The channel's lease manager, with the balancer's shard discovery over its source.
    fn lease_manager(
        &self,
        channel: &ChannelConfig,
        prepared: &PreparedChannel,
    ) -> LeaseManager<dyn Store> {
        let LeaseStoreConfig {
            lease_duration,
            renew_interval,
            max_leases_to_steal,
            ..
        } = self.config.lease_store.clone();
        LeaseManager::new(
            self.store.clone(),
            LeaseManagerConfig {
                channel: channel.name.clone(),
                worker_id: self.config.worker.id.clone(),
                lease_duration,
                renew_interval,
                max_leases_to_steal: max_leases_to_steal as usize,
                // Routed members hold each partition on one worker, so it is read once there.
                co_locate: channel.route_parent().map(str::to_string),
            },
        )
        .with_discovery(
            Arc::new(SourceShards(prepared.io.source.clone())),
            discovery_period(channel),
        )
        .with_presence_lane(self.presence_store.clone())
    }

    /// Registers `manager`'s drain switch, set at shutdown; a member started while the process
    /// shuts down takes no lease.
    fn register_drain_switch(&self, manager: &LeaseManager<dyn Store>) {
        let mut switches = self.drain_switches.lock().expect("drain switches");
        switches.push(manager.drain_switch());
        if self.stop_reading.is_cancelled() {
            manager
                .drain_switch()
                .store(true, std::sync::atomic::Ordering::SeqCst);
        }
    }
}

/// How often the balancer lists the channel's shards: new Kafka partitions and Kinesis child
/// shards get leases. A child's keys wait for it after their parent ends, so Kinesis is listed
/// more often.
fn discovery_period(channel: &ChannelConfig) -> Duration {
    match channel.source {
        // Topics of a list or pattern come and go: within topic_refresh_interval.
        SourceConfig::Kafka(ref k) if k.topics.single().is_none() => {
            Duration::from_secs(30).min(k.topic_refresh_interval)
        }
        SourceConfig::Kafka(_) => Duration::from_secs(30),
        SourceConfig::Kinesis(_) => Duration::from_secs(10),
    }
}

/// Registers the channel for the readiness endpoint: its held leases, and for an Iceberg
/// destination its table.
fn register_readiness(name: &str, destination: &DestinationIo, held: &watch::Receiver<HeldLeases>) {
    match destination {
        DestinationIo::Iceberg(io) => crate::health::Readiness::global().register(
            name,
            held.clone(),
            io.catalog.clone(),
            io.ident.clone(),
        ),
        DestinationIo::Raw(_) => {
            crate::health::Readiness::global().register_raw(name, held.clone())
        }
    }
}

/// A channel's worker loop: reads its leased shards, restarted with backoff on failure.
struct WorkerLoop {
    settings: WorkerSettings,
    io: ChannelIo,
    store: Arc<dyn Store>,
    held: watch::Receiver<HeldLeases>,
    handoff_replies: HandOffReplies,
    /// Signalled after each batch handed off (wakes the committer loop).
    batch_signal: Arc<tokio::sync::Notify>,
    /// The channel's own switches: `reading` stops the loop, `worker_done` is cancelled when it
    /// has returned.
    stops: ChannelStops,
    /// The drain deadline (`worker.shutdown_timeout`).
    drain: Duration,
    /// What a fatal error stops.
    scope: FatalScope,
    fatal: Arc<std::sync::Mutex<Option<AppError>>>,
    fatal_token: CancellationToken,
}

impl WorkerLoop {
    /// Runs the worker until it stops, restarting it with backoff after a retryable error; the
    /// freshness and the re-read count carry over from a failed run to the next.
    async fn run(self) {
        let _done = self.stops.worker_done.clone().drop_guard();
        let stop = self.stops.reading.clone();
        let mut backoff = Backoff::new(Duration::from_millis(500), Duration::from_secs(30));
        // What a failed loop read: the freshness and the re-read count carry over.
        let mut history = crate::worker::ReadHistory::default();
        loop {
            let mut worker = ChannelWorker::new(
                self.settings.clone(),
                self.io.clone(),
                self.store.clone(),
                self.held.clone(),
            )
            .with_history(history)
            .with_handoff_replies(self.handoff_replies.clone())
            .with_batch_signal(self.batch_signal.clone());
            let started = std::time::Instant::now();
            let result = worker.run(stop.clone(), self.drain).await;
            history = worker.take_history();
            match result {
                Ok(()) => return,
                Err(e) if !e.is_retryable() => {
                    self.stop_delivery(e).await;
                    return;
                }
                Err(e) => {
                    // A loop that ran a while failed afresh: back off from the start.
                    if started.elapsed() >= WORKER_BACKOFF_RESET {
                        backoff.reset();
                    }
                    tracing::error!(channel = %self.settings.channel, error = %e, "worker loop failed; restarting from the table's checkpoints");
                    tokio::select! {
                        _ = stop.cancelled() => return,
                        _ = tokio::time::sleep(backoff.next_delay()) => {}
                    }
                }
            }
        }
    }

    /// After error `e`, which retrying cannot fix: stops delivering (nothing is checkpointed
    /// past the last commit) and lets an operator decide. A dropped table suspends the channel
    /// for the whole fleet; a table that does not fit this worker's configuration (say, a schema
    /// edited on one machine) stops only this worker. A configured channel stops the process, a
    /// member its own channel alone.
    async fn stop_delivery(&self, e: WorkerError) {
        let channel = &self.settings.channel;
        let what = if e.is_table_gone() {
            tracing::error!(channel = %channel, error = %e, "channel suspended: the table is gone; stopping delivery");
            suspend(self.store.as_ref(), channel, &e.to_string()).await;
            "suspended"
        } else if matches!(e, WorkerError::Incompatible(_)) {
            tracing::error!(channel = %channel, error = %e, "stopping: the table does not fit this worker's configuration");
            "stopped (the table does not fit this worker's configuration)"
        } else {
            tracing::error!(channel = %channel, error = %e, "stopping: an error retrying cannot fix");
            "stopped"
        };
        match self.scope {
            FatalScope::Process => {
                *self.fatal.lock().expect("fatal lock") =
                    Some(channel_err(channel, format!("{what}: {e}")));
                self.fatal_token.cancel();
            }
            FatalScope::Member => {
                // This table alone stops; its leases are released once this loop has returned.
                tracing::error!(channel = %channel, "this table's member channel stopped; the channel's other tables go on");
                crate::health::Readiness::global().deregister(channel);
                let (member_stops, drain) = (self.stops.clone(), self.drain);
                tokio::spawn(async move { member_stops.stop(drain).await });
            }
        }
    }
}

/// The worker loop's settings for `channel`, prepared as `p`.
fn worker_settings(
    config: &Config,
    channel: &ChannelConfig,
    p: &PreparedChannel,
) -> WorkerSettings {
    let source_name = match &channel.source {
        SourceConfig::Kafka(kafka) => kafka.topics.describe(),
        SourceConfig::Kinesis(kinesis) => kinesis.stream.as_str().to_owned(),
    };
    let include_payload = channel.dlq.as_ref().is_some_and(|d| d.include_payload);
    WorkerSettings {
        channel: channel.name.clone(),
        worker_id: config.worker.id.clone(),
        source_name,
        schema_version: p.schema_label.clone(),
        data_freshness: channel.destination.data_freshness(),
        buffer_size: channel.destination.buffer_size(),
        max_record_size: channel.record.max_record_size,
        include_payload,
        initial_position: p.initial_position.clone(),
    }
}

/// The source's shards as lease specs, for the balancer's shard discovery.
struct SourceShards(Arc<dyn Source>);

#[async_trait::async_trait]
impl ShardDiscovery for SourceShards {
    async fn shards(&self) -> Result<Vec<LeaseSpec>, String> {
        let shards = self.0.list_shards().await.map_err(|e| e.to_string())?;
        Ok(shards
            .iter()
            .map(|s| LeaseSpec::new(LeaseKey::Shard(s.id.clone())).with_parents(s.parents.clone()))
            .collect())
    }

    fn unlisted_shards_are_gone(&self) -> bool {
        self.0.unlisted_shards_are_gone()
    }
}

/// The committer of one channel while this worker holds its lease: after a commit a wait of
/// [`commit_spacing`] of the freshness in force (`data_freshness`, or its `floe channel update`
/// override, as read after the last commit), so batches handed off meanwhile by every worker go
/// in one commit; once idle (no round had work for that freshness) a wait from 1 s doubling up
/// to a quarter of it ([`idle_poll_after`]), cut short by a batch this process's worker hands off
/// (`wakeups.batches`); once `draining` (shutdown), or while graceful hand-offs this worker
/// balances wait for their commit ([`HeldLeases::moves_pending`]), every second. No round starts once
/// the lease's validity ended ([`HeldLeases::committer_at`]), even while the lease manager still
/// publishes it.
pub async fn committer_loop(
    channel: String,
    destination: DestinationIo,
    store: Arc<dyn Store>,
    wakeups: CommitterWakeups,
    stop: CancellationToken,
    data_freshness: Duration,
    draining: CancellationToken,
) {
    let CommitterWakeups {
        mut held,
        batches: batch_signal,
    } = wakeups;
    // The freshness in force as last read (after each commit), and the wait after the last
    // idle round (`None`: the last round was not idle).
    let mut freshness = data_freshness;
    let mut idle_wait: Option<Duration> = None;
    // When a round last had work: a table that committed within `data_freshness` is not idle
    // (between its workers' batches its rounds find nothing for a moment), its rounds come
    // every second.
    let mut worked_at: Option<tokio::time::Instant> = None;
    let mut committer: Option<Committer> = None;
    let mut fenced_at: Option<u64> = None;
    // The lease counter whose lapse was logged (see below).
    let mut lapsed_logged: Option<u64> = None;
    let mut backoff = Backoff::new(Duration::from_millis(200), Duration::from_secs(30));
    loop {
        let lease = {
            let published = held.borrow_and_update();
            let valid = published.committer_at(tokio::time::Instant::now()).cloned();
            // Still published past its validity: the lease manager is stuck on the store and
            // has not dropped it yet. Another worker may take it from now on: no round starts
            // (fresh review of issue 43: two committers overlapped for tens of seconds).
            match (&published.committer, &valid) {
                (Some(lapsed), None) if lapsed_logged != Some(lapsed.lease_counter) => {
                    tracing::warn!(channel = %channel, lease_counter = lapsed.lease_counter, "committer lease not renewed within lease_duration (the lease manager waits on the lease store): no commit round until it is");
                    lapsed_logged = Some(lapsed.lease_counter);
                }
                (_, Some(_)) => lapsed_logged = None,
                _ => {}
            }
            valid
        };
        match lease {
            None => committer = None,
            Some(l)
                if committer.as_ref().map(|c| c.epoch()) != Some(l.lease_counter)
                    && fenced_at != Some(l.lease_counter) =>
            {
                tracing::info!(channel = %channel, lease_counter = l.lease_counter, "committer lease taken");
                let leases: Arc<dyn LeaseStore> = store.clone();
                let batches: Arc<dyn BatchStore> = store.clone();
                committer = Some(match &destination {
                    DestinationIo::Iceberg(io) => Committer::new(
                        channel.clone(),
                        IcebergTarget::new(
                            &channel,
                            io.ident.clone(),
                            io.catalog.clone(),
                            io.dlq.clone(),
                        )
                        .with_maintenance(io.maintenance)
                        .with_rewrites(io.swap.clone(), io.writer.clone())
                        .with_orphan_sweep_if(io.lister.clone())
                        .with_upsert_if(io.upsert_key())
                        .with_lease_fence(leases.clone()),
                        leases,
                        batches,
                        l.lease_counter,
                    ),
                    DestinationIo::Raw(io) => Committer::new(
                        channel.clone(),
                        RawTarget::new(&channel, io.store.clone(), batches.clone()),
                        leases,
                        batches,
                        l.lease_counter,
                    ),
                });
            }
            Some(_) => {}
        }
        let mut wait = Duration::from_millis(1000);
        if let Some(c) = &committer {
            match c.run_round().await {
                Ok(report) => {
                    crate::telemetry::record_delivered(&channel, report.rows);
                    backoff.reset();
                    // Graceful hand-offs wait for their batches' commit: no spacing meanwhile.
                    let moves_pending = held.borrow().moves_pending;
                    let hurried = draining.is_cancelled() || moves_pending;
                    if report.committed > 0 && !hurried {
                        freshness = match store.get_channel_state(&channel).await {
                            Ok(Some(state)) => state
                                .overrides
                                .data_freshness_ms
                                .map(Duration::from_millis)
                                .unwrap_or(data_freshness),
                            _ => data_freshness,
                        };
                        wait = commit_spacing(freshness).max(wait);
                    }
                    let now = tokio::time::Instant::now();
                    let batches =
                        report.committed + report.recovered + report.rejected + report.kept;
                    if batches > 0 {
                        worked_at = Some(now);
                    }
                    let idle = worked_at.is_none_or(|at| now.duration_since(at) >= freshness);
                    idle_wait = (idle && !hurried).then(|| idle_poll_after(idle_wait, freshness));
                    wait = idle_wait.unwrap_or(wait);
                }
                Err(CommitError::Fenced { table_epoch, own }) => {
                    tracing::warn!(channel = %channel, table_epoch, own, "committer is stale: stepping down");
                    fenced_at = Some(own);
                    committer = None;
                }
                Err(CommitError::Conflict(e)) => {
                    tracing::info!(channel = %channel, error = %e, "commit conflict: re-planning");
                    wait = Duration::from_millis(50);
                }
                Err(e) => {
                    tracing::warn!(channel = %channel, error = %e, "commit round failed; retrying with backoff");
                    wait = backoff.next_delay();
                }
            }
        }
        if committer.is_none() {
            idle_wait = None;
        }
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = held.changed() => {},
            _ = draining.cancelled(), if !draining.is_cancelled() => {},
            // Idle: a batch this process's worker hands off is committed at once.
            _ = batch_signal.notified(), if idle_wait.is_some() => {},
            _ = tokio::time::sleep(wait) => {},
        }
    }
}

/// What wakes a committer loop besides its timer: a change of the leases held, and a batch
/// handed off by the channel's worker on this process.
pub struct CommitterWakeups {
    /// The leases this worker holds in the channel (its lease manager's).
    pub held: watch::Receiver<HeldLeases>,
    /// Signalled by the channel's worker after each batch it hands off
    /// ([`ChannelWorker::with_batch_signal`]).
    pub batches: Arc<tokio::sync::Notify>,
}

/// Records a channel as SUSPENDED with its reason (best effort: the log has it too).
async fn suspend(store: &dyn Store, channel: &str, reason: &str) {
    set_status(store, channel, ChannelStatus::Suspended, reason).await
}

/// Records a channel's status with its reason (best effort: the log has it too).
async fn set_status(store: &dyn Store, channel: &str, status: ChannelStatus, reason: &str) {
    let Ok(Some(mut state)) = store.get_channel_state(channel).await else {
        return;
    };
    let expected = state.version;
    state.state = status;
    state.status_reason = Some(reason.to_string());
    state.updated_at_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0);
    if let Err(e) = store.put_channel_state(&state, Some(expected)).await {
        tracing::warn!(channel, error = %e, "could not record the channel as suspended");
    }
}
