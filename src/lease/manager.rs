//! Lease balancing: which leases this worker renews, takes and steals each period, as a pure
//! function ([`plan`]), and the task that applies it to a [`LeaseStore`] ([`LeaseManager`]).
//!
//! Invariants: a worker reads a shard only while it holds the shard's lease under the counter it
//! publishes (a lost lease leaves the published set at once); a lease is taken from another
//! worker only when its `(owner, lease_counter, heartbeat)` stood still for `lease_duration` on
//! *this* worker's monotonic clock (expired), or as a bounded steal for balance; the fleet
//! converges to `max − min ≤ 1` shards per worker without flapping.
//!
//! ```text
//!  each period (renew_interval ≤ lease_duration / 3):
//!
//!   list leases ──> observe: (owner, counter, heartbeat) changed? ──> changed_at = now
//!        │
//!        v                      mine ─────────────────────────────> renew   (Lost -> drop now)
//!      plan ──> committer:      unowned, or expired ──────────────> take
//!               shards:         unowned, then expired, up to target> take
//!                               still below target and the most
//!                               loaded worker has > target or
//!                               > mine + 1 ───────────────────────> steal   (≤ max_leases_to_steal)
//!
//!   target = ceil(active shards / workers),  workers = live owners ∪ {me}
//!   a held lease not renewed for lease_duration is dropped locally (others may take it)
//! ```
//!
//! Kinesis resharding (docs/design.md step 8): a shard whose checkpoint hint is `SHARD_END` is
//! finished and never taken; a child shard is taken only once every parent it names is finished
//! (or has no lease row). The hint trails the table, never leads it: the reader still starts
//! from the table's checkpoint.

use std::collections::{BTreeMap, HashMap};
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::{Instant, MissedTickBehavior};
use tokio_util::sync::CancellationToken;

use super::{Lease, LeaseError, LeaseKey, LeaseSpec, LeaseStore};
use crate::model::{Position, ShardId};

/// What this worker last saw of one lease, on its own monotonic clock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Observation {
    /// Owner seen.
    pub owner: Option<String>,
    /// Lease counter seen.
    pub lease_counter: u64,
    /// Heartbeat seen.
    pub heartbeat: u64,
    /// When `(owner, lease_counter, heartbeat)` was first seen with these values.
    pub changed_at: Instant,
}

/// Per lease key, the last observation: the basis of expiry without synchronised clocks.
#[derive(Debug, Clone, Default)]
pub struct Observations {
    by_key: HashMap<LeaseKey, Observation>,
}

impl Observations {
    /// Records a listing taken at `now`: a lease whose `(owner, lease_counter, heartbeat)`
    /// differs from the last observation (or that is seen for the first time) gets
    /// `changed_at = now`; keys no longer listed are forgotten.
    pub fn observe(&mut self, leases: &[Lease], now: Instant) {
        self.by_key
            .retain(|key, _| leases.iter().any(|l| &l.key == key));
        for lease in leases {
            let same = self.by_key.get(&lease.key).is_some_and(|o| {
                o.owner == lease.owner
                    && o.lease_counter == lease.lease_counter
                    && o.heartbeat == lease.heartbeat
            });
            if !same {
                self.by_key.insert(
                    lease.key.clone(),
                    Observation {
                        owner: lease.owner.clone(),
                        lease_counter: lease.lease_counter,
                        heartbeat: lease.heartbeat,
                        changed_at: now,
                    },
                );
            }
        }
    }

    /// The last observation of `key`.
    pub fn get(&self, key: &LeaseKey) -> Option<&Observation> {
        self.by_key.get(key)
    }

    /// Whether `lease` is owned and has stood still, exactly as listed, for at least
    /// `lease_duration` of this worker's clock. A lease never observed is not expired.
    pub fn is_expired(&self, lease: &Lease, now: Instant, lease_duration: Duration) -> bool {
        lease.owner.is_some()
            && self.by_key.get(&lease.key).is_some_and(|o| {
                o.owner == lease.owner
                    && o.lease_counter == lease.lease_counter
                    && o.heartbeat == lease.heartbeat
                    && now.saturating_duration_since(o.changed_at) >= lease_duration
            })
    }
}

/// Balancing parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BalanceParams {
    /// How long a lease must stand still before it counts as expired.
    pub lease_duration: Duration,
    /// At most this many steals per period (at least one is needed to ever rebalance).
    pub max_leases_to_steal: usize,
}

/// One step of a [`plan`]: every action is a conditional write based on the listed row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeaseAction {
    /// Renew a lease this worker owns.
    Renew(Lease),
    /// Take an unowned or expired lease.
    Take(Lease),
    /// Take a live lease from a more loaded worker, for balance.
    Steal(Lease),
}

impl LeaseAction {
    /// The lease the action is about (as listed).
    pub fn lease(&self) -> &Lease {
        match self {
            LeaseAction::Renew(l) | LeaseAction::Take(l) | LeaseAction::Steal(l) => l,
        }
    }
}

fn is_finished(lease: &Lease) -> bool {
    lease.checkpoint_hint == Some(Position::ShardEnd)
}

/// A pseudo-random but deterministic order per worker, so workers racing for free leases tend
/// to pick different ones.
fn spread_order(me: &str, key: &LeaseKey) -> u64 {
    let mut h = DefaultHasher::new();
    me.hash(&mut h);
    key.hash(&mut h);
    h.finish()
}

/// The number of shards each worker should hold: `ceil(num_shards / num_workers)`.
pub fn target_per_worker(num_shards: usize, num_workers: usize) -> usize {
    num_shards.div_ceil(num_workers.max(1))
}

/// Decides this period's actions for worker `me`, from a fresh listing of one channel's
/// `leases` and the `observations` already updated with it.
///
/// - Renew every lease `me` owns (shards and committer).
/// - Committer: take it when unowned or expired.
/// - Shards: only *active* shards count (not finished, every parent finished); take unowned
///   ones, then expired ones, until `me` holds `target` = ceil(active / workers), where workers
///   are the owners of live (unexpired) active leases plus `me`.
/// - Still below target with nothing free: steal from the most loaded worker while it holds
///   more than `target`, or more than `mine + 1` (so a steal never just swaps imbalance), at most
///   `max_leases_to_steal` per period.
pub fn plan(
    leases: &[Lease],
    observations: &Observations,
    me: &str,
    now: Instant,
    params: &BalanceParams,
) -> Vec<LeaseAction> {
    let expired = |l: &Lease| observations.is_expired(l, now, params.lease_duration);
    let mut actions: Vec<LeaseAction> = leases
        .iter()
        .filter(|l| l.is_owned_by(me))
        .cloned()
        .map(LeaseAction::Renew)
        .collect();

    for lease in leases.iter().filter(|l| l.key == LeaseKey::Committer) {
        if lease.owner.is_none() || (!lease.is_owned_by(me) && expired(lease)) {
            actions.push(LeaseAction::Take(lease.clone()));
        }
    }

    let shards: HashMap<&ShardId, &Lease> = leases
        .iter()
        .filter_map(|l| l.key.shard_id().map(|s| (s, l)))
        .collect();
    let is_active = |l: &Lease| {
        !is_finished(l)
            && l.parents
                .iter()
                .all(|p| shards.get(p).is_none_or(|parent| is_finished(parent)))
    };
    let active: Vec<&Lease> = shards.values().copied().filter(|l| is_active(l)).collect();

    let mut mine = 0usize;
    let mut load: BTreeMap<&str, Vec<&Lease>> = BTreeMap::new();
    let mut free: Vec<&Lease> = Vec::new();
    for lease in &active {
        match lease.owner.as_deref() {
            Some(owner) if owner == me => mine += 1,
            Some(owner) if !expired(lease) => load.entry(owner).or_default().push(lease),
            _ => free.push(lease),
        }
    }
    let num_workers = load.len() + 1;
    let target = target_per_worker(active.len(), num_workers);

    // Unowned first, then expired; within each, this worker's own spread order.
    free.sort_by_key(|l| (l.owner.is_some(), spread_order(me, &l.key)));
    for lease in free {
        if mine >= target {
            break;
        }
        actions.push(LeaseAction::Take(lease.clone()));
        mine += 1;
    }

    for victim_leases in load.values_mut() {
        victim_leases.sort_by_key(|l| spread_order(me, &l.key));
    }
    let mut steals = 0;
    while steals < params.max_leases_to_steal && mine < target {
        // Most loaded first; ties broken by worker id.
        let Some((_, victim_leases)) = load
            .iter_mut()
            .max_by(|(a_id, a), (b_id, b)| a.len().cmp(&b.len()).then(b_id.cmp(a_id)))
        else {
            break;
        };
        let victim_load = victim_leases.len();
        if !(victim_load > target || victim_load > mine + 1) {
            break;
        }
        let lease = victim_leases.pop().expect("victim has leases");
        actions.push(LeaseAction::Steal(lease.clone()));
        mine += 1;
        steals += 1;
    }
    actions
}

/// Settings of a [`LeaseManager`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseManagerConfig {
    /// Channel whose leases are balanced.
    pub channel: String,
    /// This worker's id (the lease owner it writes).
    pub worker_id: String,
    /// How long a lease must stand still before other workers take it.
    pub lease_duration: Duration,
    /// Period of list + renew + balance; used as at most `lease_duration / 3`.
    pub renew_interval: Duration,
    /// At most this many leases stolen per period.
    pub max_leases_to_steal: usize,
}

impl LeaseManagerConfig {
    /// Settings with `renew_interval = lease_duration / 3` and one steal per period.
    pub fn new(
        channel: impl Into<String>,
        worker_id: impl Into<String>,
        lease_duration: Duration,
    ) -> Self {
        LeaseManagerConfig {
            channel: channel.into(),
            worker_id: worker_id.into(),
            lease_duration,
            renew_interval: lease_duration / 3,
            max_leases_to_steal: 1,
        }
    }

    /// The period actually used: `min(renew_interval, lease_duration / 3)`, at least 1 ms.
    pub fn effective_renew_interval(&self) -> Duration {
        self.renew_interval
            .min(self.lease_duration / 3)
            .max(Duration::from_millis(1))
    }
}

/// The leases this worker holds in one channel, as published to readers and the committer.
///
/// A reader of shard S runs only while `shards` has S, and tags its batches with that lease's
/// `lease_counter` (the fencing token).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HeldLeases {
    /// Shard leases held, by shard.
    pub shards: BTreeMap<ShardId, Lease>,
    /// The committer lease, when held.
    pub committer: Option<Lease>,
}

impl HeldLeases {
    fn same_grants(&self, other: &HeldLeases) -> bool {
        let grants = |h: &HeldLeases| {
            h.shards
                .iter()
                .map(|(s, l)| (Some(s.clone()), l.lease_counter))
                .chain(h.committer.iter().map(|l| (None, l.lease_counter)))
                .collect::<Vec<_>>()
        };
        grants(self) == grants(other)
    }
}

#[derive(Debug, Clone)]
struct Held {
    lease: Lease,
    /// When the write that last confirmed the lease was sent + lease_duration: other workers
    /// cannot deem it expired before (their clocks start later).
    valid_until: Instant,
}

/// The lease-manager task of one channel on one worker: each period it lists the leases,
/// applies [`plan`], and publishes the leases held through a [`watch`] channel.
///
/// Time is `tokio::time`, so tests run it with paused time.
pub struct LeaseManager<S: ?Sized> {
    store: Arc<S>,
    config: LeaseManagerConfig,
    observations: Observations,
    held: BTreeMap<LeaseKey, Held>,
    committer_row_ensured: bool,
    published: watch::Sender<HeldLeases>,
    draining: Arc<std::sync::atomic::AtomicBool>,
}

impl<S: LeaseStore + ?Sized> LeaseManager<S> {
    /// A manager holding nothing yet.
    pub fn new(store: Arc<S>, config: LeaseManagerConfig) -> Self {
        LeaseManager {
            store,
            config,
            observations: Observations::default(),
            held: BTreeMap::new(),
            committer_row_ensured: false,
            published: watch::Sender::new(HeldLeases::default()),
            draining: Arc::default(),
        }
    }

    /// A switch that, once set, stops this manager from taking or stealing leases while it
    /// keeps renewing the ones it holds (graceful shutdown: a draining worker must not pick up
    /// shards it will not read).
    pub fn drain_switch(&self) -> Arc<std::sync::atomic::AtomicBool> {
        self.draining.clone()
    }

    /// A receiver of the held leases; it is notified when a lease is gained or lost (not at
    /// every renewal).
    pub fn subscribe(&self) -> watch::Receiver<HeldLeases> {
        self.published.subscribe()
    }

    /// The leases held now.
    pub fn held(&self) -> HeldLeases {
        self.published.borrow().clone()
    }

    fn params(&self) -> BalanceParams {
        BalanceParams {
            lease_duration: self.config.lease_duration,
            max_leases_to_steal: self.config.max_leases_to_steal,
        }
    }

    fn publish(&self) {
        let mut next = HeldLeases::default();
        for held in self.held.values() {
            match &held.lease.key {
                LeaseKey::Shard(s) => {
                    next.shards.insert(s.clone(), held.lease.clone());
                }
                LeaseKey::Committer => next.committer = Some(held.lease.clone()),
            }
        }
        self.published.send_if_modified(|current| {
            let changed = !current.same_grants(&next);
            *current = next;
            changed
        });
    }

    fn hold(&mut self, lease: Lease, sent_at: Instant) {
        let valid_until = sent_at + self.config.lease_duration;
        self.held
            .insert(lease.key.clone(), Held { lease, valid_until });
    }

    fn drop_lease(&mut self, key: &LeaseKey, why: &str) {
        if let Some(held) = self.held.remove(key) {
            tracing::warn!(
                channel = %self.config.channel,
                lease = %key,
                lease_counter = held.lease.lease_counter,
                reason = why,
                "lease lost"
            );
        }
    }

    /// One period: drops leases not renewed for `lease_duration`, lists the channel's leases,
    /// drops leases that changed hands, then renews, takes and steals per [`plan`] and
    /// publishes the result. Individual renew/take failures are logged, not returned.
    ///
    /// Errors: the listing's error (the period is skipped; held leases stay published until
    /// they time out locally).
    pub async fn tick(&mut self) -> Result<(), LeaseError> {
        let result = self.tick_inner().await;
        self.publish();
        result
    }

    async fn tick_inner(&mut self) -> Result<(), LeaseError> {
        let me = self.config.worker_id.clone();
        let channel = self.config.channel.clone();
        let now = Instant::now();
        let timed_out: Vec<LeaseKey> = self
            .held
            .iter()
            .filter(|(_, h)| now >= h.valid_until)
            .map(|(k, _)| k.clone())
            .collect();
        for key in timed_out {
            self.drop_lease(&key, "not renewed within lease_duration");
        }

        if !self.committer_row_ensured {
            self.store
                .ensure_leases(&channel, &[LeaseSpec::new(LeaseKey::Committer)])
                .await?;
            self.committer_row_ensured = true;
        }
        let leases = self.store.list_leases(&channel).await?;
        self.observations.observe(&leases, now);

        let changed_hands: Vec<LeaseKey> = self
            .held
            .iter()
            .filter(|(key, h)| {
                !leases.iter().any(|l| {
                    &l.key == *key && l.is_owned_by(&me) && l.lease_counter == h.lease.lease_counter
                })
            })
            .map(|(k, _)| k.clone())
            .collect();
        for key in changed_hands {
            self.drop_lease(&key, "taken by another worker or released");
        }

        let actions = plan(&leases, &self.observations, &me, now, &self.params());
        for action in actions {
            let sent_at = Instant::now();
            match action {
                LeaseAction::Renew(lease) => match self.store.renew_lease(&lease).await {
                    Ok(renewed) => self.hold(renewed, sent_at),
                    Err(LeaseError::Lost { .. }) => self.drop_lease(&lease.key, "renewal lost"),
                    Err(err) => tracing::warn!(
                        channel = %channel, lease = %lease.key, error = %err, "lease renewal failed"
                    ),
                },
                LeaseAction::Take(_) | LeaseAction::Steal(_)
                    if self.draining.load(std::sync::atomic::Ordering::SeqCst) => {}
                LeaseAction::Take(lease) | LeaseAction::Steal(lease) => {
                    let from = lease.owner.clone();
                    match self.store.take_lease(&lease, &me).await {
                        Ok(taken) => {
                            tracing::info!(
                                channel = %channel,
                                lease = %taken.key,
                                lease_counter = taken.lease_counter,
                                from = from.as_deref().unwrap_or(""),
                                "lease taken"
                            );
                            if from.as_deref().is_some_and(|w| w != me) {
                                crate::telemetry::record_lease_takeover(&channel);
                            }
                            self.hold(taken, sent_at);
                        }
                        Err(LeaseError::Conflict { .. }) => tracing::debug!(
                            channel = %channel, lease = %lease.key, "lease take lost a race"
                        ),
                        Err(err) => tracing::warn!(
                            channel = %channel, lease = %lease.key, error = %err, "lease take failed"
                        ),
                    }
                }
            }
        }
        Ok(())
    }

    /// Hands every held lease back at once (graceful shutdown): first publishes an empty set,
    /// then releases each lease (conditional; a lease already lost is skipped).
    pub async fn release_all(&mut self) {
        let held = std::mem::take(&mut self.held);
        self.publish();
        for (key, h) in held {
            match self.store.release_lease(&h.lease).await {
                Ok(()) => tracing::info!(
                    channel = %self.config.channel, lease = %key, "lease released"
                ),
                Err(err) => tracing::warn!(
                    channel = %self.config.channel, lease = %key, error = %err,
                    "lease release failed"
                ),
            }
        }
    }

    /// Runs a period every [`LeaseManagerConfig::effective_renew_interval`] until `shutdown` is
    /// cancelled, then [`release_all`](Self::release_all). Cancel it only after the readers
    /// and the committer have drained.
    pub async fn run(mut self, shutdown: CancellationToken) {
        let mut interval = tokio::time::interval(self.config.effective_renew_interval());
        interval.set_missed_tick_behavior(MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => break,
                _ = interval.tick() => {
                    if let Err(err) = self.tick().await {
                        tracing::warn!(
                            channel = %self.config.channel, error = %err, "lease period failed"
                        );
                    }
                }
            }
        }
        self.release_all().await;
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use proptest::prelude::*;

    use super::*;
    use crate::lease::memory::MemoryLeaseStore;

    const INTERVAL: Duration = Duration::from_secs(3);
    const DURATION: Duration = Duration::from_secs(9);

    fn params(max_leases_to_steal: usize) -> BalanceParams {
        BalanceParams {
            lease_duration: DURATION,
            max_leases_to_steal,
        }
    }

    fn lease(key: LeaseKey, owner: Option<&str>) -> Lease {
        Lease {
            channel: "c".into(),
            key,
            owner: owner.map(str::to_string),
            lease_counter: u64::from(owner.is_some()),
            heartbeat: 0,
            checkpoint_hint: None,
            parents: Vec::new(),
        }
    }

    /// Shard leases "0".."n" with the given owners, plus an unowned committer lease.
    fn world(owners: &[Option<&str>]) -> Vec<Lease> {
        let mut leases: Vec<Lease> = owners
            .iter()
            .enumerate()
            .map(|(i, o)| lease(LeaseKey::shard(i.to_string()), *o))
            .collect();
        leases.push(lease(LeaseKey::Committer, None));
        leases
    }

    fn count(actions: &[LeaseAction], pred: fn(&LeaseAction) -> bool) -> usize {
        actions.iter().filter(|a| pred(a)).count()
    }

    fn takes(actions: &[LeaseAction]) -> Vec<LeaseKey> {
        actions
            .iter()
            .filter(|a| matches!(a, LeaseAction::Take(_) | LeaseAction::Steal(_)))
            .map(|a| a.lease().key.clone())
            .collect()
    }

    #[test]
    fn renews_own_leases_and_takes_unowned_ones_up_to_target() {
        let leases = world(&[Some("a"), None, None, None, None, Some("b")]);
        let mut obs = Observations::default();
        let now = Instant::now();
        obs.observe(&leases, now);
        let actions = plan(&leases, &obs, "a", now, &params(1));
        // 6 shards, workers {a, b}: target 3; a holds 1, takes 2 free, plus the committer.
        assert_eq!(count(&actions, |a| matches!(a, LeaseAction::Renew(_))), 1);
        let taken = takes(&actions);
        assert_eq!(taken.len(), 3);
        assert!(taken.contains(&LeaseKey::Committer));
        assert_eq!(count(&actions, |a| matches!(a, LeaseAction::Steal(_))), 0);
    }

    #[test]
    fn a_live_lease_is_taken_only_after_standing_still_for_lease_duration() {
        let leases = world(&[Some("dead"), Some("dead")]);
        let mut obs = Observations::default();
        let t0 = Instant::now();
        obs.observe(&leases, t0);
        // First sighting: never expired, whatever the lease's age elsewhere.
        assert!(!obs.is_expired(&leases[0], t0, DURATION));
        // "me" alone below target and "dead" holds 2 > target 1: a steal, not a take.
        let early = plan(
            &leases,
            &obs,
            "me",
            t0 + DURATION - Duration::from_millis(1),
            &params(1),
        );
        assert_eq!(count(&early, |a| matches!(a, LeaseAction::Take(_))), 1); // committer only
        assert_eq!(count(&early, |a| matches!(a, LeaseAction::Steal(_))), 1);
        obs.observe(&leases, t0 + DURATION);
        let late = plan(&leases, &obs, "me", t0 + DURATION, &params(1));
        // Expired: "dead" is no longer a worker, target = 2, both taken (no steal needed).
        assert_eq!(takes(&late).len(), 3);
        assert_eq!(count(&late, |a| matches!(a, LeaseAction::Steal(_))), 0);
    }

    #[test]
    fn a_heartbeat_or_counter_change_restarts_the_expiry_clock() {
        let mut leases = world(&[Some("b")]);
        let mut obs = Observations::default();
        let t0 = Instant::now();
        obs.observe(&leases, t0);
        leases[0].heartbeat += 1;
        obs.observe(&leases, t0 + DURATION - Duration::from_secs(1));
        assert!(!obs.is_expired(&leases[0], t0 + DURATION, DURATION));
        assert!(obs.is_expired(
            &leases[0],
            t0 + DURATION * 2 - Duration::from_secs(1),
            DURATION
        ));
        leases[0].lease_counter += 1;
        obs.observe(&leases, t0 + DURATION * 2);
        assert!(!obs.is_expired(&leases[0], t0 + DURATION * 2, DURATION));
        // A listing that differs from the observation is never expired.
        let mut other = leases[0].clone();
        other.heartbeat += 5;
        assert!(!obs.is_expired(&other, t0 + DURATION * 10, DURATION));
        // An unowned lease is free, not expired.
        assert!(!obs.is_expired(&lease(LeaseKey::shard("9"), None), t0, DURATION));
    }

    #[test]
    fn steals_from_the_most_loaded_worker_only_when_it_helps() {
        let now = Instant::now();
        let check = |owners: &[Option<&str>], me: &str, max: usize| {
            let leases = world(owners);
            let mut obs = Observations::default();
            obs.observe(&leases, now);
            let actions = plan(&leases, &obs, me, now, &params(max));
            actions
                .iter()
                .filter_map(|a| match a {
                    LeaseAction::Steal(l) => l.owner.clone(),
                    _ => None,
                })
                .collect::<Vec<_>>()
        };
        let (a, b, c) = (Some("a"), Some("b"), Some("c"));
        // 8 shards: a 5, b 3, c (me) 0: target 3, steal from a only.
        assert_eq!(check(&[a, a, a, a, a, b, b, b], "c", 1), vec!["a"]);
        // Up to max per period, re-evaluating the most loaded each time, and stopping when
        // no worker holds more than target or more than mine + 1 (3-3-2 is balanced).
        assert_eq!(check(&[a, a, a, a, a, b, b, b], "c", 3), vec!["a", "a"]);
        assert_eq!(check(&[a, a, a, a, b, b, b, b], "c", 3), vec!["a", "b"]);
        // 5 shards: a 2, b 2, c 1: target 2, a is not above target nor above 1 + 1: stable.
        assert!(check(&[a, a, b, b, c], "c", 3).is_empty());
        // 4 shards, 3 workers: a 2, b 2, c 0: target 2, 2 > 0 + 1: one steal, then 2 > 1 + 1
        // no longer holds.
        assert_eq!(check(&[a, a, b, b], "c", 5).len(), 1);
        // Workers at or above target never steal.
        assert!(check(&[a, a, a, b, b, c, c, c], "c", 3).is_empty());
        assert!(check(&[a, a, a, a, b, c, c, c], "b", 3) == vec!["a"]);
        // Zero steals allowed: none.
        assert!(check(&[a, a, a, a], "c", 0).is_empty());
    }

    #[test]
    fn committer_is_taken_when_unowned_or_expired_and_left_alone_when_live() {
        let t0 = Instant::now();
        let mut committer = lease(LeaseKey::Committer, Some("b"));
        let leases = vec![committer.clone()];
        let mut obs = Observations::default();
        obs.observe(&leases, t0);
        assert!(takes(&plan(&leases, &obs, "a", t0, &params(1))).is_empty());
        assert_eq!(
            takes(&plan(&leases, &obs, "a", t0 + DURATION, &params(1))),
            vec![LeaseKey::Committer]
        );
        assert_eq!(
            plan(&leases, &obs, "b", t0, &params(1)),
            vec![LeaseAction::Renew(committer.clone())]
        );
        committer.owner = None;
        assert_eq!(
            takes(&plan(&[committer], &obs, "a", t0, &params(1))),
            vec![LeaseKey::Committer]
        );
    }

    #[test]
    fn child_shard_waits_for_every_parent_to_reach_shard_end() {
        let t0 = Instant::now();
        let mut p1 = lease(LeaseKey::shard("p1"), None);
        let mut p2 = lease(LeaseKey::shard("p2"), None);
        let mut child = lease(LeaseKey::shard("child"), None);
        child.parents = vec![ShardId("p1".into()), ShardId("p2".into())];
        let orphan = {
            let mut l = lease(LeaseKey::shard("orphan"), None);
            l.parents = vec![ShardId("trimmed".into())];
            l
        };
        let obs = Observations::default();
        let run = |leases: &[Lease]| {
            let mut keys = takes(&plan(leases, &obs, "a", t0, &params(1)));
            keys.sort();
            keys
        };
        let all =
            |p1: &Lease, p2: &Lease| vec![p1.clone(), p2.clone(), child.clone(), orphan.clone()];
        assert_eq!(
            run(&all(&p1, &p2)),
            vec![
                LeaseKey::shard("orphan"),
                LeaseKey::shard("p1"),
                LeaseKey::shard("p2")
            ]
        );
        p1.checkpoint_hint = Some(Position::ShardEnd);
        assert_eq!(
            run(&all(&p1, &p2)),
            vec![LeaseKey::shard("orphan"), LeaseKey::shard("p2")]
        );
        p2.checkpoint_hint = Some(Position::ShardEnd);
        assert_eq!(
            run(&all(&p1, &p2)),
            vec![LeaseKey::shard("child"), LeaseKey::shard("orphan")]
        );
    }

    #[test]
    fn target_is_the_ceiling_of_shards_per_worker() {
        assert_eq!(target_per_worker(8, 3), 3);
        assert_eq!(target_per_worker(8, 4), 2);
        assert_eq!(target_per_worker(0, 4), 0);
        assert_eq!(target_per_worker(3, 5), 1);
        assert_eq!(target_per_worker(3, 0), 3);
    }

    /// Applies an action to an in-memory table with the store's conditional rules.
    fn apply(table: &mut BTreeMap<LeaseKey, Lease>, action: &LeaseAction, me: &str) {
        let listed = action.lease();
        let row = table.get_mut(&listed.key).unwrap();
        match action {
            LeaseAction::Renew(_) => {
                if row.owner == listed.owner && row.lease_counter == listed.lease_counter {
                    row.heartbeat += 1;
                }
            }
            LeaseAction::Take(_) | LeaseAction::Steal(_) => {
                if row.owner == listed.owner
                    && row.lease_counter == listed.lease_counter
                    && row.heartbeat == listed.heartbeat
                {
                    row.owner = Some(me.to_string());
                    row.lease_counter += 1;
                }
            }
        }
    }

    fn loads(table: &BTreeMap<LeaseKey, Lease>, workers: &[String]) -> Vec<usize> {
        workers
            .iter()
            .map(|w| {
                table
                    .values()
                    .filter(|l| l.key != LeaseKey::Committer && l.is_owned_by(w))
                    .count()
            })
            .collect()
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(400))]

        /// From any assignment (live, unowned, or held by a dead worker), any number of shards
        /// and workers and any turn order, the fleet converges to max − min ≤ 1 with every shard
        /// and the committer held by live workers, then stays put (no flapping).
        #[test]
        fn balancing_converges_to_an_even_spread_and_stays_there(
            num_workers in 1usize..=6,
            initial in proptest::collection::vec(0usize..8, 1..=16),
            committer_initial in 0usize..8,
            max_steal in 1usize..=3,
            seed in any::<u64>(),
        ) {
            let workers: Vec<String> = (0..num_workers).map(|i| format!("w{i}")).collect();
            // Initial owner index: a live worker, unowned, or a dead worker.
            let owner_of = |i: usize| match i % (num_workers + 2) {
                i if i < num_workers => Some(workers[i].clone()),
                i if i == num_workers => None,
                _ => Some("dead".to_string()),
            };
            let mut table: BTreeMap<LeaseKey, Lease> = BTreeMap::new();
            for (i, o) in initial.iter().enumerate() {
                let mut l = lease(LeaseKey::shard(format!("s{i:02}")), None);
                l.owner = owner_of(*o);
                table.insert(l.key.clone(), l);
            }
            let mut c = lease(LeaseKey::Committer, None);
            c.owner = owner_of(committer_initial);
            table.insert(c.key.clone(), c);

            let mut observations = vec![Observations::default(); num_workers];
            let t0 = Instant::now();
            let mut rng = seed;
            let mut order: Vec<usize> = (0..num_workers).collect();
            let rounds = 4 + 2 * initial.len() + 4;
            let mut last_moves = 0;
            for round in 0..rounds + 6 {
                let now = t0 + INTERVAL * round as u32;
                // Fisher-Yates with a xorshift generator: a random turn order per round.
                for i in (1..order.len()).rev() {
                    rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
                    order.swap(i, (rng % (i as u64 + 1)) as usize);
                }
                let mut moves = 0;
                for &w in &order {
                    let listed: Vec<Lease> = table.values().cloned().collect();
                    observations[w].observe(&listed, now);
                    let actions = plan(&listed, &observations[w], &workers[w], now, &params(max_steal));
                    prop_assert!(
                        actions.iter().filter(|a| matches!(a, LeaseAction::Steal(_))).count() <= max_steal
                    );
                    moves += actions.iter().filter(|a| !matches!(a, LeaseAction::Renew(_))).count();
                    for a in &actions {
                        apply(&mut table, a, &workers[w]);
                    }
                }
                if round >= rounds {
                    last_moves += moves;
                }
            }
            let l = loads(&table, &workers);
            let (max, min) = (*l.iter().max().unwrap(), *l.iter().min().unwrap());
            prop_assert!(max - min <= 1, "loads {:?}", l);
            prop_assert_eq!(l.iter().sum::<usize>(), initial.len());
            let committer = table[&LeaseKey::Committer].owner.clone().unwrap();
            prop_assert!(workers.contains(&committer));
            prop_assert_eq!(last_moves, 0, "still moving after convergence: loads {:?}", l);
        }
    }

    fn manager(store: &Arc<MemoryLeaseStore>, worker: &str) -> LeaseManager<MemoryLeaseStore> {
        let mut config = LeaseManagerConfig::new("c", worker, DURATION);
        config.renew_interval = INTERVAL;
        LeaseManager::new(store.clone(), config)
    }

    async fn store_with_shards(n: usize) -> Arc<MemoryLeaseStore> {
        let store = Arc::new(MemoryLeaseStore::new());
        let specs: Vec<_> = (0..n)
            .map(|i| LeaseSpec::new(LeaseKey::shard(i.to_string())))
            .collect();
        store.ensure_leases("c", &specs).await.unwrap();
        store
    }

    #[tokio::test(start_paused = true)]
    async fn a_stolen_lease_leaves_the_published_set_at_the_next_period() {
        let store = store_with_shards(2).await;
        let mut a = manager(&store, "a");
        let rx = a.subscribe();
        a.tick().await.unwrap();
        assert_eq!(rx.borrow().shards.len(), 2);
        assert!(rx.borrow().committer.is_some());
        // Another worker steals shard 0 behind a's back.
        let row = store.list_leases("c").await.unwrap()[0].clone();
        store.take_lease(&row, "b").await.unwrap();
        tokio::time::advance(INTERVAL).await;
        a.tick().await.unwrap();
        let held = rx.borrow().clone();
        assert_eq!(
            held.shards.keys().cloned().collect::<Vec<_>>(),
            vec![ShardId("1".into())]
        );
    }

    /// A store whose listing is followed, once armed, by a steal of every lease by "thief":
    /// the race between a worker's listing and its renewal.
    struct StealAfterList {
        inner: Arc<MemoryLeaseStore>,
        armed: std::sync::atomic::AtomicBool,
    }

    #[async_trait::async_trait]
    impl LeaseStore for StealAfterList {
        async fn ensure_leases(&self, c: &str, s: &[LeaseSpec]) -> Result<(), LeaseError> {
            self.inner.ensure_leases(c, s).await
        }
        async fn list_leases(&self, c: &str) -> Result<Vec<Lease>, LeaseError> {
            let rows = self.inner.list_leases(c).await?;
            if self.armed.swap(false, std::sync::atomic::Ordering::SeqCst) {
                for row in &rows {
                    self.inner.take_lease(row, "thief").await?;
                }
            }
            Ok(rows)
        }
        async fn take_lease(&self, l: &Lease, w: &str) -> Result<Lease, LeaseError> {
            self.inner.take_lease(l, w).await
        }
        async fn renew_lease(&self, l: &Lease) -> Result<Lease, LeaseError> {
            self.inner.renew_lease(l).await
        }
        async fn release_lease(&self, l: &Lease) -> Result<(), LeaseError> {
            self.inner.release_lease(l).await
        }
        async fn set_checkpoint_hint(
            &self,
            c: &str,
            k: &LeaseKey,
            p: &Position,
        ) -> Result<(), LeaseError> {
            self.inner.set_checkpoint_hint(c, k, p).await
        }
    }

    #[tokio::test(start_paused = true)]
    async fn renewal_answered_lost_drops_the_lease_immediately() {
        let store = Arc::new(StealAfterList {
            inner: store_with_shards(2).await,
            armed: false.into(),
        });
        let mut a = LeaseManager::new(store.clone(), LeaseManagerConfig::new("c", "a", DURATION));
        let mut rx = a.subscribe();
        a.tick().await.unwrap();
        assert_eq!(rx.borrow_and_update().shards.len(), 2);
        assert!(rx.borrow().committer.is_some());
        store.armed.store(true, std::sync::atomic::Ordering::SeqCst);
        tokio::time::advance(INTERVAL).await;
        a.tick().await.unwrap();
        // Every renewal was answered Lost in this very period.
        assert!(rx.has_changed().unwrap());
        assert_eq!(*rx.borrow(), HeldLeases::default());
        let rows = store.inner.list_leases("c").await.unwrap();
        assert!(rows.iter().all(|l| l.is_owned_by("thief")));
    }

    #[tokio::test(start_paused = true)]
    async fn leases_not_renewed_within_lease_duration_are_dropped_locally() {
        let store = store_with_shards(2).await;
        let mut a = manager(&store, "a");
        a.tick().await.unwrap();
        assert_eq!(a.held().shards.len(), 2);
        store.set_unavailable(true);
        for _ in 0..2 {
            tokio::time::advance(INTERVAL).await;
            assert!(a.tick().await.is_err());
            assert_eq!(a.held().shards.len(), 2, "still within lease_duration");
        }
        tokio::time::advance(INTERVAL).await;
        assert!(a.tick().await.is_err());
        assert_eq!(a.held(), HeldLeases::default());
        // Back online, nobody took them: the same counters are renewed and published again.
        store.set_unavailable(false);
        tokio::time::advance(INTERVAL).await;
        a.tick().await.unwrap();
        assert_eq!(a.held().shards.len(), 2);
        assert!(a.held().shards.values().all(|l| l.lease_counter == 1));
    }

    #[tokio::test(start_paused = true)]
    async fn a_draining_manager_renews_but_takes_nothing_new() {
        let store = store_with_shards(4).await;
        let mut m = LeaseManager::new(
            store.clone(),
            LeaseManagerConfig::new("c", "w1", Duration::from_secs(9)),
        );
        m.drain_switch()
            .store(true, std::sync::atomic::Ordering::SeqCst);
        m.tick().await.unwrap();
        assert!(m.held().shards.is_empty() && m.held().committer.is_none());
        m.drain_switch()
            .store(false, std::sync::atomic::Ordering::SeqCst);
        m.tick().await.unwrap();
        assert_eq!(m.held().shards.len(), 4);
    }

    #[tokio::test(start_paused = true)]
    async fn shutdown_releases_every_lease_at_once() {
        let store = store_with_shards(3).await;
        let a = manager(&store, "a");
        let rx = a.subscribe();
        let token = CancellationToken::new();
        let task = tokio::spawn(a.run(token.clone()));
        tokio::time::sleep(INTERVAL / 2).await;
        assert_eq!(rx.borrow().shards.len(), 3);
        token.cancel();
        task.await.unwrap();
        assert_eq!(*rx.borrow(), HeldLeases::default());
        for l in store.list_leases("c").await.unwrap() {
            assert_eq!((l.owner, l.lease_counter), (None, 2), "{}", l.key);
        }
    }

    struct SimWorker {
        id: String,
        rx: watch::Receiver<HeldLeases>,
        token: CancellationToken,
        task: tokio::task::JoinHandle<()>,
    }

    fn start(store: &Arc<MemoryLeaseStore>, id: &str) -> SimWorker {
        let m = manager(store, id);
        let rx = m.subscribe();
        let token = CancellationToken::new();
        let task = tokio::spawn(m.run(token.clone()));
        SimWorker {
            id: id.to_string(),
            rx,
            token,
            task,
        }
    }

    /// Safety at one instant: for every shard, at most one live worker publishes it under the
    /// store's current counter, and it is the store's owner; a worker publishing an older
    /// counter is one whose lease was taken less than one period ago.
    async fn check_safety(
        store: &MemoryLeaseStore,
        live: &[SimWorker],
        stale_since: &mut HashMap<(String, ShardId), Instant>,
    ) {
        let now = Instant::now();
        for row in store.list_leases("c").await.unwrap() {
            let Some(shard) = row.key.shard_id() else {
                continue;
            };
            let current: Vec<&str> = live
                .iter()
                .filter(|w| {
                    w.rx.borrow()
                        .shards
                        .get(shard)
                        .is_some_and(|l| l.lease_counter == row.lease_counter)
                })
                .map(|w| w.id.as_str())
                .collect();
            assert!(current.len() <= 1, "{shard} held by {current:?}");
            if let Some(holder) = current.first() {
                assert_eq!(row.owner.as_deref(), Some(*holder));
            }
            for w in live {
                let stale =
                    w.rx.borrow()
                        .shards
                        .get(shard)
                        .is_some_and(|l| l.lease_counter < row.lease_counter);
                let key = (w.id.clone(), shard.clone());
                if stale {
                    let since = *stale_since.entry(key).or_insert(now);
                    assert!(
                        now - since <= INTERVAL,
                        "{} kept stale {shard} for {:?}",
                        w.id,
                        now - since
                    );
                } else {
                    stale_since.remove(&key);
                }
            }
        }
    }

    fn spread(store_rows: &[Lease], live: &[SimWorker]) -> (usize, usize, usize) {
        let counts: Vec<usize> = live
            .iter()
            .map(|w| {
                store_rows
                    .iter()
                    .filter(|l| l.key != LeaseKey::Committer && l.is_owned_by(&w.id))
                    .count()
            })
            .collect();
        let owned = counts.iter().sum();
        (
            *counts.iter().max().unwrap(),
            *counts.iter().min().unwrap(),
            owned,
        )
    }

    /// Runs the fleet for `periods`, checking safety every quarter period; returns how many
    /// periods it took until the store showed all 8 shards held by live workers with
    /// max − min ≤ 1 and one live committer.
    async fn run_until_balanced(
        store: &MemoryLeaseStore,
        live: &[SimWorker],
        stale_since: &mut HashMap<(String, ShardId), Instant>,
        periods: u32,
    ) -> Option<f64> {
        let start = Instant::now();
        for _ in 0..periods * 4 {
            tokio::time::sleep(INTERVAL / 4).await;
            check_safety(store, live, stale_since).await;
            let rows = store.list_leases("c").await.unwrap();
            let (max, min, owned) = spread(&rows, live);
            let live_ids: BTreeSet<&str> = live.iter().map(|w| w.id.as_str()).collect();
            let committer_live = rows.iter().any(|l| {
                l.key == LeaseKey::Committer
                    && l.owner.as_deref().is_some_and(|o| live_ids.contains(o))
            });
            if owned == 8 && max - min <= 1 && committer_live {
                return Some((Instant::now() - start).as_secs_f64() / INTERVAL.as_secs_f64());
            }
        }
        None
    }

    #[tokio::test(start_paused = true)]
    async fn fleet_simulation_converges_takes_over_and_never_double_holds() {
        let store = store_with_shards(8).await;
        let mut stale = HashMap::new();
        let mut live: Vec<SimWorker> = ["w0", "w1", "w2"]
            .iter()
            .map(|id| start(&store, id))
            .collect();

        // The first worker to list sees no other owner and takes everything; the others steal
        // one lease per period each.
        let p = run_until_balanced(&store, &live, &mut stale, 8).await;
        println!("3 workers from scratch balanced after {p:?} periods");
        assert!(
            p.is_some_and(|p| p <= 4.0),
            "3 workers from scratch: {p:?} periods"
        );

        // A fourth worker joins: 2-2-2-2 by stealing, one steal per worker per period.
        live.push(start(&store, "w3"));
        let p = run_until_balanced(&store, &live, &mut stale, 8).await;
        println!("join balanced after {p:?} periods");
        assert!(p.is_some_and(|p| p <= 4.0), "join: {p:?} periods");
        tokio::time::sleep(INTERVAL * 3).await;
        let rows = store.list_leases("c").await.unwrap();
        assert_eq!(spread(&rows, &live), (2, 2, 8));

        // w1 crashes (no release): its shards are taken after lease_duration.
        let dead = live.remove(1);
        dead.task.abort();
        let crashed_at = Instant::now();
        let p = run_until_balanced(&store, &live, &mut stale, 10).await;
        let took = Instant::now() - crashed_at;
        println!(
            "crash: shards taken over and balanced after {took:?} (lease_duration {DURATION:?})"
        );
        assert!(p.is_some(), "crash: not balanced");
        // Expiry counts from the last renewal others saw, up to one period before the crash.
        assert!(took >= DURATION - INTERVAL, "taken before expiry: {took:?}");
        assert!(took <= DURATION + INTERVAL * 3, "takeover took {took:?}");

        // w2 leaves gracefully: its leases are released at once and taken within two periods.
        let leaving = live.remove(1);
        leaving.token.cancel();
        leaving.task.await.unwrap();
        let rows = store.list_leases("c").await.unwrap();
        assert!(rows.iter().all(|l| l.owner.as_deref() != Some("w2")));
        let p = run_until_balanced(&store, &live, &mut stale, 4).await;
        println!("graceful leave balanced after {p:?} periods");
        assert!(p.is_some_and(|p| p <= 2.0), "graceful leave: {p:?} periods");

        // Then it stays put: no lease changes hands for many periods.
        let before: Vec<_> = store
            .list_leases("c")
            .await
            .unwrap()
            .into_iter()
            .map(|l| (l.key, l.owner, l.lease_counter))
            .collect();
        for _ in 0..20 {
            tokio::time::sleep(INTERVAL).await;
            check_safety(&store, &live, &mut stale).await;
        }
        let after: Vec<_> = store
            .list_leases("c")
            .await
            .unwrap()
            .into_iter()
            .map(|l| (l.key, l.owner, l.lease_counter))
            .collect();
        assert_eq!(before, after);
        for w in live {
            w.token.cancel();
            w.task.await.unwrap();
        }
        assert!(store
            .list_leases("c")
            .await
            .unwrap()
            .iter()
            .all(|l| l.owner.is_none()));
    }
}
