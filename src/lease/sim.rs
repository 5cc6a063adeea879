//! The fleet simulation behind `floe-fleet-sim` and the fleet tests: many [`LeaseManager`]s —
//! the code `floe run` runs — on one lease store, in one process, under paused tokio time, with
//! the store instrumented to count every write, every item read and every conditional write
//! that failed (docs/scaling.md shows the figures).
//!
//! A scenario starts a fleet, lets it converge, then applies one event (a restart, a crash, a
//! join, a resharding, a partition) and samples every worker's published leases every
//! [`SAMPLE`] of simulated time. Its [`Report`] gives convergence, safety (a shard published by
//! two workers at one instant, a child shard published before its parents finished) and the
//! steady-state cost per shard per second.
//!
//! Run on a real store (SQLite), each store call runs on the blocking pool: tokio does not
//! advance paused time while a blocking task runs, so a slow SQL statement does not make leases
//! expire.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use serde::Serialize;
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::manager::{HeldLeases, LeaseManager, LeaseManagerConfig, ShardDiscovery};
use super::{
    BatchStore, ChannelState, Delivered, Lease, LeaseError, LeaseKey, LeaseSpec, LeaseStore,
    Presence,
};
use crate::model::{PendingBatch, Position, ShardId};

/// The data freshness the catalog-load figure assumes (the default `data_freshness`).
pub const DATA_FRESHNESS: Duration = Duration::from_secs(10);

/// How often every worker's published leases are sampled, in simulated time.
pub const SAMPLE: Duration = Duration::from_millis(250);

/// The channel the simulation uses.
const CHANNEL: &str = "sim";

/// The scenarios, by the names `floe-fleet-sim --scenario` takes.
pub const SCENARIOS: &[&str] = &[
    "cold_start",
    "rolling_restart",
    "crash_20pct",
    "join_50pct",
    "reshard_100",
    "partition",
];

/// Size and timing of a simulated fleet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FleetSize {
    /// Shards of the source at the start.
    pub shards: usize,
    /// Workers at the start.
    pub workers: usize,
    /// `lease_store.lease_duration`.
    pub lease_duration: Duration,
}

impl FleetSize {
    fn period(&self) -> Duration {
        self.lease_duration / 3
    }
}

/// What one scenario measured: one JSON line of `floe-fleet-sim`.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Report {
    /// Scenario name.
    pub scenario: String,
    /// Store the fleet ran on (`memory` or `sqlite`).
    pub store: String,
    /// Shards of the source at the start.
    pub shards: usize,
    /// Workers at the start.
    pub workers: usize,
    /// `lease_duration`, seconds.
    pub lease_duration_s: f64,
    /// Lease periods (`lease_duration / 3`) from the scenario's event until every active shard
    /// was published by a live worker with max − min ≤ 1 shards per worker; `None` if never.
    pub periods_to_converge: Option<f64>,
    /// Seconds from the event until every active shard was published again (crash, partition:
    /// the takeover time); `None` if never.
    pub all_held_after_s: Option<f64>,
    /// The most shards one worker published at any sampled instant of the scenario.
    pub max_held: usize,
    /// Shard-instants (samples) at which two workers published the same shard (must be 0).
    pub double_held: u64,
    /// Shard-instants at which a child shard was published before all its parents finished.
    pub child_before_parent: u64,
    /// Owner changes in the store during the steady-state window after convergence (flapping,
    /// must be 0).
    pub moves_after_converge: u64,
    /// In the steady-state window: lease-store writes per second per shard, fleet-wide.
    pub writes_per_shard_s: f64,
    /// In the steady-state window: lease-store items read per second per shard, fleet-wide.
    pub reads_per_shard_s: f64,
    /// In the steady-state window: conditional writes that failed, per second, fleet-wide.
    pub conflicts_per_s: f64,
    /// In the steady-state window: catalog table loads per second, fleet-wide, at
    /// [`DATA_FRESHNESS`]. The simulation runs no readers or committer, so this applies the
    /// daemon's load rules (tests/it/worker_leases.rs, tests/it/ops_endpoints.rs pin them) to the
    /// simulated fleet: every worker holding shards hands off one batch per freshness and loads
    /// the table once when it leaves the pending set; the committer commits every half
    /// freshness, with one load to plan and one in the commit. (Before this rule a worker loaded
    /// every second while a batch was in flight, and the committer every second.)
    pub catalog_loads_per_s: Option<f64>,
    /// Rows of finished shards (`SHARD_END`) left in the lease table at the end. In
    /// `reshard_100` the parents leave the source's listing after convergence (past retention),
    /// so their rows must be gone.
    pub finished_rows: usize,
    /// Writes, items read and failed conditional writes during the whole scenario.
    pub total_writes: u64,
    /// Items read during the whole scenario.
    pub total_reads: u64,
    /// Failed conditional writes during the whole scenario.
    pub total_conflicts: u64,
}

/// Fleet-wide counters of lease-store traffic.
#[derive(Debug, Default)]
pub struct Counters {
    writes: AtomicU64,
    reads: AtomicU64,
    conflicts: AtomicU64,
    owner_changes: AtomicU64,
    pending_listings: AtomicU64,
}

impl Counters {
    fn snapshot(&self) -> (u64, u64, u64, u64) {
        (
            self.writes.load(Ordering::SeqCst),
            self.reads.load(Ordering::SeqCst),
            self.conflicts.load(Ordering::SeqCst),
            self.owner_changes.load(Ordering::SeqCst),
        )
    }
}

/// One worker's view of the shared store: counts its calls into the fleet's [`Counters`], and
/// fails its writes while the worker is partitioned.
pub struct CountingStore<S: ?Sized> {
    inner: Arc<S>,
    counters: Arc<Counters>,
    partitioned: Arc<AtomicBool>,
    blocking: bool,
}

impl Counters {
    /// Writes counted so far.
    pub fn writes(&self) -> u64 {
        self.writes.load(Ordering::SeqCst)
    }

    /// Items read so far (a listing counts its rows, a get one).
    pub fn reads(&self) -> u64 {
        self.reads.load(Ordering::SeqCst)
    }

    /// Listings of pending batches so far ([`BatchStore::list_pending`] calls).
    pub fn pending_listings(&self) -> u64 {
        self.pending_listings.load(Ordering::SeqCst)
    }
}

impl<S: ?Sized> CountingStore<S> {
    /// A view of `inner` that counts every call into the returned counters (never
    /// partitioned, calls made inline).
    pub fn counting(inner: Arc<S>) -> (Self, Arc<Counters>) {
        let counters = Arc::new(Counters::default());
        let view = CountingStore {
            inner,
            counters: counters.clone(),
            partitioned: Arc::new(AtomicBool::new(false)),
            blocking: false,
        };
        (view, counters)
    }
}

impl<S: LeaseStore + ?Sized + 'static> CountingStore<S> {
    async fn call<T: Send + 'static, F>(&self, f: F) -> Result<T, LeaseError>
    where
        F: FnOnce(Arc<S>) -> futures::future::BoxFuture<'static, Result<T, LeaseError>>
            + Send
            + 'static,
    {
        let inner = self.inner.clone();
        if self.blocking {
            let handle = tokio::runtime::Handle::current();
            tokio::task::spawn_blocking(move || handle.block_on(f(inner)))
                .await
                .expect("store call panicked")
        } else {
            f(inner).await
        }
    }

    fn write(&self) -> Result<(), LeaseError> {
        if self.partitioned.load(Ordering::SeqCst) {
            return Err(LeaseError::Unavailable {
                message: "simulated network partition".into(),
            });
        }
        self.counters.writes.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }

    fn read(&self, items: usize) {
        self.counters
            .reads
            .fetch_add(items as u64, Ordering::SeqCst);
    }

    fn outcome<T>(&self, result: Result<T, LeaseError>) -> Result<T, LeaseError> {
        if matches!(
            result,
            Err(LeaseError::Conflict { .. } | LeaseError::Lost { .. })
        ) {
            self.counters.conflicts.fetch_add(1, Ordering::SeqCst);
        }
        result
    }
}

#[async_trait]
impl<S: LeaseStore + ?Sized + 'static> LeaseStore for CountingStore<S> {
    async fn ensure_leases(&self, channel: &str, specs: &[LeaseSpec]) -> Result<(), LeaseError> {
        self.write()?;
        self.counters
            .writes
            .fetch_add(specs.len().saturating_sub(1) as u64, Ordering::SeqCst);
        let (c, s) = (channel.to_string(), specs.to_vec());
        self.call(move |st| Box::pin(async move { st.ensure_leases(&c, &s).await }))
            .await
    }

    async fn list_leases(&self, channel: &str) -> Result<Vec<Lease>, LeaseError> {
        let c = channel.to_string();
        let rows = self
            .call(move |st| Box::pin(async move { st.list_leases(&c).await }))
            .await?;
        self.read(rows.len());
        Ok(rows)
    }

    async fn take_lease(&self, lease: &Lease, worker: &str) -> Result<Lease, LeaseError> {
        self.write()?;
        let (l, w) = (lease.clone(), worker.to_string());
        let result = self
            .call(move |st| Box::pin(async move { st.take_lease(&l, &w).await }))
            .await;
        if result.is_ok() {
            self.counters.owner_changes.fetch_add(1, Ordering::SeqCst);
        }
        self.outcome(result)
    }

    async fn renew_lease(&self, lease: &Lease) -> Result<Lease, LeaseError> {
        self.write()?;
        let l = lease.clone();
        let result = self
            .call(move |st| Box::pin(async move { st.renew_lease(&l).await }))
            .await;
        self.outcome(result)
    }

    async fn delete_lease(&self, lease: &Lease) -> Result<(), LeaseError> {
        self.write()?;
        let l = lease.clone();
        let result = self
            .call(move |st| Box::pin(async move { st.delete_lease(&l).await }))
            .await;
        self.outcome(result)
    }

    async fn release_lease(&self, lease: &Lease) -> Result<(), LeaseError> {
        self.write()?;
        let l = lease.clone();
        let result = self
            .call(move |st| Box::pin(async move { st.release_lease(&l).await }))
            .await;
        if result.is_ok() {
            self.counters.owner_changes.fetch_add(1, Ordering::SeqCst);
        }
        self.outcome(result)
    }

    async fn get_lease(&self, channel: &str, key: &LeaseKey) -> Result<Option<Lease>, LeaseError> {
        let (c, k) = (channel.to_string(), key.clone());
        let row = self
            .call(move |st| Box::pin(async move { st.get_lease(&c, &k).await }))
            .await?;
        self.read(1);
        Ok(row)
    }

    async fn renew_presence(&self, channel: &str, worker: &str) -> Result<Presence, LeaseError> {
        self.write()?;
        let (c, w) = (channel.to_string(), worker.to_string());
        self.call(move |st| Box::pin(async move { st.renew_presence(&c, &w).await }))
            .await
    }

    async fn list_presence(&self, channel: &str) -> Result<Vec<Presence>, LeaseError> {
        let c = channel.to_string();
        let rows = self
            .call(move |st| Box::pin(async move { st.list_presence(&c).await }))
            .await?;
        self.read(rows.len());
        Ok(rows)
    }

    async fn notify_worker(
        &self,
        channel: &str,
        worker: &str,
        handoffs: &BTreeMap<ShardId, String>,
    ) -> Result<(), LeaseError> {
        self.write()?;
        let (c, w, h) = (channel.to_string(), worker.to_string(), handoffs.clone());
        let result = self
            .call(move |st| Box::pin(async move { st.notify_worker(&c, &w, &h).await }))
            .await;
        self.outcome(result)
    }

    async fn remove_presence(&self, channel: &str, worker: &str) -> Result<(), LeaseError> {
        self.write()?;
        let (c, w) = (channel.to_string(), worker.to_string());
        self.call(move |st| Box::pin(async move { st.remove_presence(&c, &w).await }))
            .await
    }

    async fn set_checkpoint_hint(
        &self,
        channel: &str,
        key: &LeaseKey,
        position: &Position,
    ) -> Result<(), LeaseError> {
        self.write()?;
        let (c, k, p) = (channel.to_string(), key.clone(), position.clone());
        self.call(move |st| Box::pin(async move { st.set_checkpoint_hint(&c, &k, &p).await }))
            .await
    }
}

/// The simulated source: its shard list changes when the scenario reshards.
#[derive(Default)]
struct SimShards(Mutex<Vec<LeaseSpec>>);

#[async_trait]
impl ShardDiscovery for SimShards {
    async fn shards(&self) -> Result<Vec<LeaseSpec>, String> {
        Ok(self.0.lock().expect("shards").clone())
    }
}

struct Worker {
    id: String,
    rx: watch::Receiver<HeldLeases>,
    token: CancellationToken,
    task: tokio::task::JoinHandle<()>,
    partitioned: Arc<AtomicBool>,
}

/// A running fleet on one store.
struct Fleet<S: ?Sized> {
    store: Arc<S>,
    /// The store as the scenario itself uses it (uncounted; blocking like the workers' views).
    setup: Arc<CountingStore<S>>,
    counters: Arc<Counters>,
    shards: Arc<SimShards>,
    size: FleetSize,
    blocking: bool,
    workers: Vec<Worker>,
    next_id: usize,
    // Sampled measures.
    max_held: usize,
    double_held: u64,
    child_before_parent: u64,
}

impl<S: LeaseStore + ?Sized + 'static> Fleet<S> {
    fn start_worker(&mut self, id: String) {
        let partitioned = Arc::new(AtomicBool::new(false));
        let view = Arc::new(CountingStore {
            inner: self.store.clone(),
            counters: self.counters.clone(),
            partitioned: partitioned.clone(),
            blocking: self.blocking,
        });
        let config = LeaseManagerConfig::new(CHANNEL, id.clone(), self.size.lease_duration);
        let manager =
            LeaseManager::new(view, config).with_discovery(self.shards.clone(), self.size.period());
        let rx = manager.subscribe();
        let token = CancellationToken::new();
        let task = tokio::spawn(manager.run(token.clone()));
        self.workers.push(Worker {
            id,
            rx,
            token,
            task,
            partitioned,
        });
    }

    fn add_workers(&mut self, n: usize) {
        for _ in 0..n {
            let id = format!("w{:04}", self.next_id);
            self.next_id += 1;
            self.start_worker(id);
        }
    }

    /// The active shards per the store, and each shard's parents.
    async fn active(&self) -> (BTreeSet<ShardId>, BTreeMap<ShardId, (bool, Vec<ShardId>)>) {
        let rows = self.setup.list_leases(CHANNEL).await.expect("list");
        let info: BTreeMap<ShardId, (bool, Vec<ShardId>)> = rows
            .iter()
            .filter_map(|l| {
                l.key.shard_id().map(|s| {
                    (
                        s.clone(),
                        (
                            l.checkpoint_hint == Some(Position::ShardEnd),
                            l.parents.clone(),
                        ),
                    )
                })
            })
            .collect();
        let active = super::manager::active_shards(&rows)
            .into_iter()
            .filter_map(|l| l.key.shard_id().cloned())
            .collect();
        (active, info)
    }

    /// Samples the published leases once; returns whether the fleet is converged.
    async fn sample(&mut self) -> (bool, bool) {
        let (active, info) = self.active().await;
        let mut holders: BTreeMap<&ShardId, usize> = BTreeMap::new();
        let mut loads = Vec::new();
        let published: Vec<HeldLeases> =
            self.workers.iter().map(|w| w.rx.borrow().clone()).collect();
        for held in &published {
            // Finished shards (SHARD_END) stay published by their last owner but are not
            // balanced: the spread counts active shards only.
            loads.push(held.shards.keys().filter(|s| active.contains(*s)).count());
            for shard in held.shards.keys() {
                *holders.entry(shard).or_default() += 1;
                let parents_done = info.get(shard).is_none_or(|(_, parents)| {
                    parents
                        .iter()
                        .all(|p| info.get(p).is_none_or(|(finished, _)| *finished))
                });
                if !parents_done {
                    self.child_before_parent += 1;
                }
            }
        }
        self.double_held += holders.values().filter(|n| **n > 1).count() as u64;
        self.max_held = self.max_held.max(loads.iter().copied().max().unwrap_or(0));
        let all_held = active.iter().all(|s| holders.contains_key(s));
        let (max, min) = (
            loads.iter().copied().max().unwrap_or(0),
            loads.iter().copied().min().unwrap_or(0),
        );
        (all_held, all_held && max - min <= 1)
    }

    /// Samples until converged (or `limit`); returns (periods to converge, seconds until every
    /// shard was held).
    async fn until_converged(&mut self, limit: Duration) -> (Option<f64>, Option<f64>) {
        let start = Instant::now();
        let mut all_held_at = None;
        while Instant::now() - start < limit {
            tokio::time::sleep(SAMPLE).await;
            let (all_held, converged) = self.sample().await;
            let elapsed = Instant::now() - start;
            if all_held && all_held_at.is_none() {
                all_held_at = Some(elapsed.as_secs_f64());
            }
            if converged {
                return (
                    Some(elapsed.as_secs_f64() / self.size.period().as_secs_f64()),
                    all_held_at,
                );
            }
        }
        (None, all_held_at)
    }

    /// Samples for `window` of steady state; returns (writes, reads, conflicts, owner changes)
    /// during it.
    async fn steady(&mut self, window: Duration) -> (u64, u64, u64, u64) {
        let before = self.counters.snapshot();
        let start = Instant::now();
        while Instant::now() - start < window {
            tokio::time::sleep(SAMPLE).await;
            self.sample().await;
        }
        let after = self.counters.snapshot();
        (
            after.0 - before.0,
            after.1 - before.1,
            after.2 - before.2,
            after.3 - before.3,
        )
    }

    async fn stop_gracefully(&mut self, index: usize) -> String {
        let w = self.workers.remove(index);
        w.token.cancel();
        let _ = w.task.await;
        w.id
    }

    /// Stops the first `n` workers gracefully at once (as a deployment that restarts a batch
    /// does), and returns their ids.
    async fn stop_gracefully_at_once(&mut self, n: usize) -> Vec<String> {
        let stopping: Vec<Worker> = self.workers.drain(..n.min(self.workers.len())).collect();
        for w in &stopping {
            w.token.cancel();
        }
        let mut ids = Vec::with_capacity(stopping.len());
        for w in stopping {
            let _ = w.task.await;
            ids.push(w.id);
        }
        ids
    }

    fn crash(&mut self, index: usize) {
        let w = self.workers.remove(index);
        w.task.abort();
    }

    fn leader(&self) -> Option<usize> {
        self.workers
            .iter()
            .position(|w| w.rx.borrow().committer.is_some())
    }

    async fn shutdown(mut self) {
        while !self.workers.is_empty() {
            self.stop_gracefully(0).await;
        }
    }
}

fn shard_name(i: usize) -> ShardId {
    ShardId(format!("shardId-{i:012}"))
}

/// What a scenario's event measured: lease periods from the event until the fleet converged,
/// and seconds from the event until every active shard was held again (`None`: never).
type EventOutcome = (Option<f64>, Option<f64>);

/// Runs scenario `name` on `store` (a fresh, empty store; `store_name` is reported) and returns
/// its report. `blocking`: run every store call on the blocking pool (real I/O).
///
/// Must run on a current-thread runtime with paused time (for a real store, pause it after
/// opening the store: opening waits on real I/O).
///
/// Errors: an unknown scenario name.
pub async fn run_scenario<S: LeaseStore + ?Sized + 'static>(
    name: &str,
    store: Arc<S>,
    store_name: &str,
    size: FleetSize,
    blocking: bool,
) -> Result<Report, String> {
    if !SCENARIOS.contains(&name) {
        return Err(format!(
            "unknown scenario {name:?}: expected one of {}",
            SCENARIOS.join(", ")
        ));
    }
    let mut fleet = Fleet::start(store, size, blocking).await?;
    let limit = size.lease_duration * 30;
    let event = if name == "cold_start" {
        fleet.add_workers(size.workers);
        fleet.until_converged(limit).await
    } else {
        fleet.warm_up(name, limit).await?;
        fleet.apply_event(name, limit).await?
    };
    let report = fleet.report(name, store_name, event).await?;
    fleet.shutdown().await;
    Ok(report)
}

/// The shards a reshard of `parents` parents adds after the first `shards`: half the parents
/// split in two, the other half merge in pairs.
fn reshard_children(shards: usize, parents: usize) -> Vec<LeaseSpec> {
    let mut next = shards;
    let mut new_specs = Vec::new();
    let (splits, merges) = (parents / 2, parents - parents / 2);
    for i in 0..splits {
        for _ in 0..2 {
            new_specs.push(
                LeaseSpec::new(LeaseKey::Shard(shard_name(next))).with_parents(vec![shard_name(i)]),
            );
            next += 1;
        }
    }
    for pair in (splits..splits + merges).collect::<Vec<_>>().chunks(2) {
        new_specs.push(
            LeaseSpec::new(LeaseKey::Shard(shard_name(next)))
                .with_parents(pair.iter().map(|i| shard_name(*i)).collect()),
        );
        next += 1;
    }
    new_specs
}

impl<S: LeaseStore + ?Sized + 'static> Fleet<S> {
    /// A fleet of no workers on `store`, whose lease table holds the `size.shards` shards.
    async fn start(store: Arc<S>, size: FleetSize, blocking: bool) -> Result<Self, String> {
        let specs: Vec<LeaseSpec> = (0..size.shards)
            .map(|i| LeaseSpec::new(LeaseKey::Shard(shard_name(i))))
            .collect();
        let setup = Arc::new(CountingStore {
            inner: store.clone(),
            counters: Arc::default(),
            partitioned: Arc::default(),
            blocking,
        });
        setup
            .ensure_leases(CHANNEL, &specs)
            .await
            .map_err(|e| e.to_string())?;
        Ok(Fleet {
            store,
            setup,
            counters: Arc::default(),
            shards: Arc::new(SimShards(Mutex::new(specs))),
            size,
            blocking,
            workers: Vec::new(),
            next_id: 0,
            max_held: 0,
            double_held: 0,
            child_before_parent: 0,
        })
    }

    /// Starts the fleet's workers and lets them converge and settle before scenario `name`'s
    /// event; the event's `max_held` counts from here.
    async fn warm_up(&mut self, name: &str, limit: Duration) -> Result<(), String> {
        self.add_workers(self.size.workers);
        let (warm, _) = self.until_converged(limit).await;
        if warm.is_none() {
            return Err(format!(
                "{name}: the fleet did not converge before the event"
            ));
        }
        // Let the warm-up's notices settle before the event.
        self.steady(self.size.lease_duration).await;
        self.max_held = 0;
        Ok(())
    }

    /// Applies the event of scenario `name` (not `cold_start`) to a warm fleet and measures
    /// until the fleet converged again.
    async fn apply_event(&mut self, name: &str, limit: Duration) -> Result<EventOutcome, String> {
        match name {
            "rolling_restart" => self.rolling_restart(limit).await,
            "crash_20pct" => self.crash_20pct(limit).await,
            "join_50pct" => {
                self.add_workers((self.size.workers / 2).max(1));
                Ok(self.until_converged(limit).await)
            }
            "reshard_100" => self.reshard_100(limit).await,
            "partition" => self.partition(limit).await,
            _ => unreachable!("checked above"),
        }
    }

    /// Restarts every worker gracefully, a tenth at a time, each batch after the fleet
    /// converged from the last.
    async fn rolling_restart(&mut self, limit: Duration) -> Result<EventOutcome, String> {
        let size = self.size;
        let batch = (size.workers / 10).max(1);
        let start = Instant::now();
        let mut restarted = 0;
        while restarted < size.workers {
            let ids = self
                .stop_gracefully_at_once(batch.min(size.workers - restarted))
                .await;
            restarted += ids.len();
            for id in ids {
                self.start_worker(id);
            }
            if self.until_converged(limit).await.0.is_none() {
                return Err(format!(
                    "rolling_restart: no convergence after restarting {restarted} workers"
                ));
            }
        }
        let took = Instant::now() - start;
        Ok((Some(took.as_secs_f64() / size.period().as_secs_f64()), None))
    }

    /// Crashes a fifth of the workers, the balancer (committer holder) among them: the worst
    /// case.
    async fn crash_20pct(&mut self, limit: Duration) -> Result<EventOutcome, String> {
        let workers = self.size.workers;
        let n = (workers / 5).max(1).min(workers - 1);
        if n == 0 {
            return Err("crash_20pct needs at least 2 workers".into());
        }
        if let Some(leader) = self.leader() {
            self.crash(leader);
        }
        while self.workers.len() > workers - n {
            self.crash(0);
        }
        Ok(self.until_converged(limit).await)
    }

    /// Reshards 100 parents (or all shards, if fewer), lets their readers reach `SHARD_END`,
    /// then drops the parents from the source's listing (past retention).
    async fn reshard_100(&mut self, limit: Duration) -> Result<EventOutcome, String> {
        let size = self.size;
        let parents = 100.min(size.shards / 2 * 2);
        if parents < 2 {
            return Err("reshard_100 needs at least 2 shards".into());
        }
        let new_specs = reshard_children(size.shards, parents);
        let children: BTreeSet<LeaseKey> = new_specs.iter().map(|s| s.key.clone()).collect();
        self.shards.0.lock().expect("shards").extend(new_specs);
        self.await_rows(&children).await?;
        // The parents' readers reach SHARD_END a few periods later, one after the
        // other, and the committer records it.
        let start = Instant::now();
        for i in 0..parents {
            if i % 10 == 0 {
                self.steady(size.period()).await;
            }
            self.setup
                .set_checkpoint_hint(
                    CHANNEL,
                    &LeaseKey::Shard(shard_name(i)),
                    &Position::ShardEnd,
                )
                .await
                .map_err(|e| e.to_string())?;
        }
        let offset = (Instant::now() - start).as_secs_f64();
        let (p, held) = self.until_converged(limit).await;
        // Later the parents pass the stream's retention and leave the listing: the
        // balancer deletes their rows during the steady window.
        let parents: BTreeSet<LeaseKey> = (0..parents)
            .map(|i| LeaseKey::Shard(shard_name(i)))
            .collect();
        self.shards
            .0
            .lock()
            .expect("shards")
            .retain(|s| !parents.contains(&s.key));
        let period = size.period().as_secs_f64();
        Ok((p.map(|p| p + offset / period), held.map(|h| h + offset)))
    }

    /// Waits (up to 30 periods) until the balancer's discovery has created the rows of
    /// `children`.
    async fn await_rows(&mut self, children: &BTreeSet<LeaseKey>) -> Result<(), String> {
        // Until then the fleet would count as converged on the parents alone (found by a break
        // test: at 5 shards, convergence was sometimes measured before discovery, and the
        // children's assignment then counted as moves after convergence).
        for _ in 0..30 {
            let rows = self
                .setup
                .list_leases(CHANNEL)
                .await
                .map_err(|e| e.to_string())?;
            if children.iter().all(|k| rows.iter().any(|l| &l.key == k)) {
                break;
            }
            self.steady(self.size.period()).await;
        }
        Ok(())
    }

    /// Cuts a worker holding shards, not the balancer, off the store for three lease durations,
    /// then heals the partition.
    async fn partition(&mut self, limit: Duration) -> Result<EventOutcome, String> {
        let d = self.size.lease_duration;
        let leader = self.leader();
        let Some(index) = (0..self.workers.len())
            .find(|i| Some(*i) != leader && !self.workers[*i].rx.borrow().shards.is_empty())
        else {
            return Err(
                "partition needs a worker other than the balancer that holds shards".into(),
            );
        };
        self.workers[index]
            .partitioned
            .store(true, Ordering::SeqCst);
        let start = Instant::now();
        let mut all_held = None;
        while Instant::now() - start < d * 3 {
            tokio::time::sleep(SAMPLE).await;
            let (held, _) = self.sample().await;
            // Its shards are dropped after lease_duration, then taken over.
            if held && all_held.is_none() && Instant::now() - start > d {
                all_held = Some((Instant::now() - start).as_secs_f64());
            }
        }
        self.workers[index]
            .partitioned
            .store(false, Ordering::SeqCst);
        let offset = (Instant::now() - start).as_secs_f64();
        let (p, _) = self.until_converged(limit).await;
        Ok((
            p.map(|p| p + offset / self.size.period().as_secs_f64()),
            all_held,
        ))
    }

    /// Measures 20 periods of steady state after the event and reports scenario `name`.
    async fn report(
        &mut self,
        name: &str,
        store_name: &str,
        event: EventOutcome,
    ) -> Result<Report, String> {
        let size = self.size;
        let (periods_to_converge, all_held_after_s) = event;
        // Steady state: 20 periods after convergence.
        let window = size.period() * 20;
        let (writes, reads, conflicts, moves) = self.steady(window).await;
        let totals = self.counters.snapshot();
        let per = |n: u64| n as f64 / window.as_secs_f64() / size.shards as f64;
        let holders = self
            .workers
            .iter()
            .filter(|w| !w.rx.borrow().shards.is_empty())
            .count();
        let freshness = DATA_FRESHNESS.as_secs_f64();
        let catalog_loads_per_s = holders as f64 / freshness + 2.0 / (freshness / 2.0);
        let finished_rows = self
            .setup
            .list_leases(CHANNEL)
            .await
            .map_err(|e| e.to_string())?
            .iter()
            .filter(|l| l.checkpoint_hint == Some(Position::ShardEnd))
            .count();
        Ok(Report {
            scenario: name.to_string(),
            store: store_name.to_string(),
            shards: size.shards,
            workers: size.workers,
            lease_duration_s: size.lease_duration.as_secs_f64(),
            periods_to_converge,
            all_held_after_s,
            max_held: self.max_held,
            double_held: self.double_held,
            child_before_parent: self.child_before_parent,
            moves_after_converge: moves,
            writes_per_shard_s: per(writes),
            reads_per_shard_s: per(reads),
            conflicts_per_s: conflicts as f64 / window.as_secs_f64(),
            catalog_loads_per_s: Some(catalog_loads_per_s),
            finished_rows,
            total_writes: totals.0,
            total_reads: totals.1,
            total_conflicts: totals.2,
        })
    }
}

/// The pending batches and channel state of the inner store, passed through: only
/// [`BatchStore::list_pending`] is counted ([`Counters::pending_listings`]); the partition
/// switch does not apply.
#[async_trait]
impl<S: BatchStore + ?Sized + 'static> BatchStore for CountingStore<S> {
    async fn put_batch(&self, batch: &PendingBatch) -> Result<(), LeaseError> {
        self.inner.put_batch(batch).await
    }

    async fn list_pending(&self, channel: &str) -> Result<Vec<PendingBatch>, LeaseError> {
        self.counters
            .pending_listings
            .fetch_add(1, Ordering::SeqCst);
        self.inner.list_pending(channel).await
    }

    async fn finish_batches(
        &self,
        channel: &str,
        committed: &[uuid::Uuid],
        rejected: &[uuid::Uuid],
    ) -> Result<(), LeaseError> {
        self.inner
            .finish_batches(channel, committed, rejected)
            .await
    }

    async fn get_channel_state(&self, channel: &str) -> Result<Option<ChannelState>, LeaseError> {
        self.inner.get_channel_state(channel).await
    }

    async fn put_channel_state(
        &self,
        state: &ChannelState,
        expected_version: Option<u64>,
    ) -> Result<u64, LeaseError> {
        self.inner.put_channel_state(state, expected_version).await
    }

    async fn get_delivered(&self, channel: &str) -> Result<Option<Delivered>, LeaseError> {
        self.inner.get_delivered(channel).await
    }

    async fn put_delivered(
        &self,
        delivered: &Delivered,
        expected_version: Option<u64>,
    ) -> Result<u64, LeaseError> {
        self.inner.put_delivered(delivered, expected_version).await
    }
}
