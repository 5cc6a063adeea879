//! Lease balancing with worker presence and one balancer (docs/design.md, "Lease store").
//!
//! Every worker renews **one presence row** per period instead of every lease it holds; the
//! holder of the committer lease is also the channel's **balancer**: it alone lists every lease
//! and every presence row, hands free and dead workers' shards to live workers, and asks busy
//! workers to hand shards to idle ones. A worker re-reads the leases only when the balancer
//! bumps the notice in its presence row. So the lease store's steady-state cost grows with
//! workers, not with shards × workers (docs/scaling.md has the figures).
//!
//! Invariants:
//! - The lease counter stays the fencing token: every change of owner (assignment, handoff,
//!   release) is a conditional write on the row as listed that bumps it.
//! - A worker publishes a shard only while its presence was renewed within `lease_duration`
//!   (counted from when the renewal was *sent*), and drops it at that instant even between
//!   periods; the balancer hands a worker's shards to others only after that worker's
//!   presence heartbeat stood still for `lease_duration` on the balancer's own clock, which
//!   starts later. No synchronised clocks, as before.
//! - A handoff is cooperative: the owner stops publishing the shard, then writes the new owner
//!   itself, so a shard is never published by two workers.
//! - A handoff is graceful when a worker answers ([`LeaseManager::handoff_replies`]): the owner
//!   first publishes the shard as `handing_off`, its worker stops reading it and hands its
//!   buffered rows off, and the owner writes the new owner once the worker says every batch of
//!   the shard is committed — or once [`LeaseManager::with_handoff_wait`] ran out (then the
//!   worker drops what it had, as for any lost lease). The new owner starts after the table's
//!   checkpoint, which covers the handed-off rows: nothing is read twice.
//! - After a gap in its presence (or at start), a worker releases the rows it finds in its name
//!   instead of holding them: the balancer may be taking them at that moment.
//!
//! ```text
//!  every worker, each period (renew_interval ≤ lease_duration / 3):
//!    renew presence (1 write) ──> notice changed? ──> list leases: hold rows owned by me,
//!                                                     hand over those the notice asks for
//!                                                     (graceful: once the worker is ready)
//!    committer lease: renew when held (1 write), else read it (1 read) and take it when
//!                     unowned or expired — its holder commits and balances
//!
//!  the balancer, each period:
//!    list presence + list leases ──> live = presence heartbeats that moved within lease_duration
//!    free or dead-owned active shards ──> assign to the least loaded live worker
//!      (members of a routed channel: to the worker the channel's placement names, and
//!       a shard held elsewhere is handed to it; balance::placement)
//!    max − min > 1 ──> ask the most loaded to hand one to the least loaded (≤ max_leases_to_steal
//!                      per receiver per period)
//!    a worker whose leases or handoffs changed ──> notify (bump its notice)
//! ```
//!
//! Kinesis resharding (docs/design.md step 8): a shard whose checkpoint hint is `SHARD_END` is
//! finished and never assigned; a child shard is assigned only once every parent it names is
//! finished (or has no lease row). The hint trails the table, never leads it: the reader still
//! starts from the table's checkpoint.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::watch;
use tokio::time::{Instant, MissedTickBehavior};
use tokio_util::sync::CancellationToken;

use super::{Lease, LeaseError, LeaseKey, LeaseSpec, LeaseStore, Presence};
use crate::model::ShardId;

mod balance;
pub mod group;
use balance::is_finished;
pub use balance::{
    active_shards, balance, placement, Assignment, BalanceParams, Observations,
    PresenceObservations, StandingStill,
};
pub use group::{PresenceValidity, SharedPresence, Standing, COMMITTER_MOVES_PER_PERIOD};

/// Where the balancer finds the source's shards (Kafka partitions, Kinesis shards with their
/// parents), so new ones get lease rows.
#[async_trait]
pub trait ShardDiscovery: Send + Sync {
    /// Every shard of the source now, as lease specs.
    ///
    /// Errors: a description of the source's failure (logged; retried at the next period).
    async fn shards(&self) -> Result<Vec<LeaseSpec>, String>;

    /// Whether a shard the source stops listing is gone for good, finished or not (a deleted
    /// topic of a Kafka channel reading several topics): its lease row is then deleted, which
    /// releases it. `false` (the default): only finished shards' rows are deleted.
    fn unlisted_shards_are_gone(&self) -> bool {
        false
    }
}

/// Settings of a [`LeaseManager`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseManagerConfig {
    /// Channel whose leases are balanced.
    pub channel: String,
    /// This worker's id (the lease owner it writes).
    pub worker_id: String,
    /// How long a presence (and the committer lease) must stand still before others act.
    pub lease_duration: Duration,
    /// Period of renew + balance; used as at most `lease_duration / 3`.
    pub renew_interval: Duration,
    /// At most this many handoffs towards one worker per period.
    pub max_leases_to_steal: usize,
    /// The routed channel (`table = "{route}"`) whose member `channel` is: its shards are
    /// placed by a [`placement`] seeded with this name, the same for every member
    /// ([`BalanceParams::placement_seed`]), so that a worker holds a partition for every routed
    /// table or for none and reads it once. `None`: least loaded (a single channel, a member of
    /// a table per topic).
    pub co_locate: Option<String>,
}

impl LeaseManagerConfig {
    /// Settings with `renew_interval = lease_duration / 3` and one handoff per period.
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
            co_locate: None,
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
    /// When held, the instant the committer lease stops being valid, as of the manager's last
    /// period: its committer starts no round from then on ([`HeldLeases::committer_at`]), even
    /// while the manager, stuck on a slow store call, has not dropped the lease yet. It moves
    /// at every renewal without waking the receivers.
    pub committer_valid_until: Option<Instant>,
    /// A member's (shared presence): its leases are valid while this presence is, read live by
    /// [`HeldLeases::committer_at`] instead of `committer_valid_until` (a member's period can
    /// come late under a slow lease store while the presence is renewed on time).
    pub presence_validity: Option<PresenceValidity>,
    /// Held shards the balancer asked this worker to hand over (graceful hand-off): the worker
    /// stops reading them, hands their buffered rows off and answers through
    /// [`HandOffReplies`] once every batch of them is committed.
    pub handing_off: BTreeSet<ShardId>,
    /// This worker balances and waits for graceful hand-offs it asked for: its committer
    /// commits without the spacing meanwhile, so that the hand-offs complete quickly.
    pub moves_pending: bool,
}

impl HeldLeases {
    /// The committer lease when held and still valid at `now`: a lease whose validity ended is
    /// not held, whatever the manager published last (a period stuck on the store runs no
    /// expiry).
    pub fn committer_at(&self, now: Instant) -> Option<&Lease> {
        let until = match &self.presence_validity {
            Some(presence) => presence.valid_until(),
            None => self.committer_valid_until,
        };
        self.committer
            .as_ref()
            .filter(|_| until.is_some_and(|until| now < until))
    }

    /// Whether `other` grants the same leases (and asks the same hand-offs): the validity
    /// instants are not compared, so a renewal alone changes the published value without
    /// waking the receivers.
    fn same_grants(&self, other: &HeldLeases) -> bool {
        let grants = |h: &HeldLeases| {
            h.shards
                .iter()
                .map(|(s, l)| (Some(s.clone()), l.lease_counter))
                .chain(h.committer.iter().map(|l| (None, l.lease_counter)))
                .collect::<Vec<_>>()
        };
        grants(self) == grants(other)
            && self.handing_off == other.handing_off
            && self.moves_pending == other.moves_pending
    }
}

/// A worker's answers to graceful hand-offs ([`HeldLeases::handing_off`]): the shards whose
/// every record read is committed and that it no longer reads. The lease manager writes the new
/// owner of each as soon as it is listed here.
#[derive(Debug, Clone)]
pub struct HandOffReplies(Arc<watch::Sender<BTreeSet<ShardId>>>);

impl Default for HandOffReplies {
    fn default() -> Self {
        HandOffReplies(Arc::new(watch::Sender::new(BTreeSet::new())))
    }
}

impl HandOffReplies {
    /// Says which shards asked to be handed over are ready to move now.
    pub fn set_ready(&self, ready: BTreeSet<ShardId>) {
        self.0.send_if_modified(|current| {
            let changed = *current != ready;
            *current = ready;
            changed
        });
    }

    /// The shards ready to move.
    pub fn ready(&self) -> BTreeSet<ShardId> {
        self.0.borrow().clone()
    }
}

/// A graceful hand-off under way: the shard is still held and published as handing off.
#[derive(Debug, Clone)]
struct Handing {
    to: String,
    since: Instant,
}

/// A handoff the balancer asked for and has not seen done yet.
#[derive(Debug, Clone)]
struct Moving {
    from: String,
    to: String,
    lease_counter: u64,
    since: Instant,
}

/// What a worker was last told: the leases it owned (shard, counter) and the handoffs asked of it.
type Notified = (BTreeSet<(ShardId, u64)>, BTreeMap<ShardId, String>);

/// What the balancer keeps between periods while this worker holds the committer lease.
#[derive(Debug, Default)]
struct Balancer {
    /// Periods run as balancer (free shards are assigned from the second on).
    periods: u64,
    presence: PresenceObservations,
    leases: Observations,
    moving: BTreeMap<ShardId, Moving>,
    /// Per worker, the leases and handoffs it was last notified of (or that remained since).
    notified: HashMap<String, Notified>,
    last_discovery: Option<Instant>,
}

/// Workers whose presence stood still this long are removed from the presence list.
fn presence_gc_after(lease_duration: Duration) -> Duration {
    (lease_duration * 10).max(Duration::from_secs(300))
}

/// The lease-manager task of one channel on one worker: each period it renews its presence,
/// keeps the committer lease, re-reads its shard leases when notified, balances when it holds
/// the committer lease, and publishes the leases held through a [`watch`] channel.
///
/// Time is `tokio::time`, so tests and the fleet simulation run it with paused time.
pub struct LeaseManager<S: ?Sized> {
    store: Arc<S>,
    config: LeaseManagerConfig,
    /// Observations of the committer lease (every worker watches it).
    committer_seen: Observations,
    /// Shard leases held, with the instant they stop being valid.
    shards: BTreeMap<ShardId, (Lease, Instant)>,
    committer: Option<(Lease, Instant)>,
    committer_row_ensured: bool,
    /// The notice last acted on; `None` before the first listing.
    notice: Option<u64>,
    /// Set at start and after a presence gap: rows in this worker's name are released at the
    /// next listing instead of held.
    release_owned: bool,
    /// Set when a handoff or release write failed: the leases are read again next period, so
    /// the write is retried (a shard left in this worker's name unread would otherwise wait
    /// for the next notice).
    relist: bool,
    balancer: Option<Balancer>,
    /// Presence observations made while the committer lease stood still longer than a period:
    /// a successor balancer starts from them instead of from nothing, so the shards of workers
    /// that died with the balancer move about one `lease_duration` sooner.
    standby: Option<PresenceObservations>,
    discovery: Option<(Arc<dyn ShardDiscovery>, Duration)>,
    published: watch::Sender<HeldLeases>,
    draining: Arc<AtomicBool>,
    /// Set once a worker answers hand-offs: they are graceful from then on.
    replies: Option<HandOffReplies>,
    /// Graceful hand-offs under way.
    handing: BTreeMap<ShardId, Handing>,
    /// How long a graceful hand-off waits for the worker before the shard moves anyway.
    handoff_wait: Duration,
    /// The presence this member's leases live by, shared with the other members of its
    /// channel on this worker ([`LeaseManager::with_shared_presence`]); `None`: its own.
    shared: Option<Arc<SharedPresence>>,
    /// With a shared presence: this member's presence row as last read, the shared row's
    /// notice seen just before that read, the committer lease row as last read, and the
    /// periods run (a read is skipped while nothing says it changed, but made at least every
    /// [`SAFETY_READ_PERIODS`]).
    member_row: Option<Presence>,
    synced_group_notice: Option<u64>,
    committer_row: Option<Lease>,
    periods_run: u64,
    /// With a shared presence: when this member took the committer lease it holds, and since
    /// when it found the committer lease takeable but left it to the preferred worker.
    committer_taken_at: Option<Instant>,
    takeable_since: Option<Instant>,
    /// Where this manager renews its own presence row, when not `store`
    /// ([`LeaseManager::with_presence_lane`]).
    presence_lane: Option<Arc<dyn LeaseStore>>,
}

/// With a shared presence, a member reads its presence row and its committer lease row at
/// least this often (in periods) even when nothing says they changed.
const SAFETY_READ_PERIODS: u64 = 20;

impl<S: ?Sized> Drop for LeaseManager<S> {
    fn drop(&mut self) {
        if let Some(shared) = self.shared.take() {
            shared.detach();
        }
    }
}

impl<S: LeaseStore + ?Sized> LeaseManager<S> {
    /// A manager holding nothing yet.
    pub fn new(store: Arc<S>, config: LeaseManagerConfig) -> Self {
        LeaseManager {
            store,
            committer_seen: Observations::default(),
            shards: BTreeMap::new(),
            committer: None,
            committer_row_ensured: false,
            notice: None,
            release_owned: true,
            relist: false,
            balancer: None,
            standby: None,
            discovery: None,
            published: watch::Sender::new(HeldLeases::default()),
            draining: Arc::default(),
            replies: None,
            handing: BTreeMap::new(),
            handoff_wait: config.lease_duration,
            shared: None,
            member_row: None,
            synced_group_notice: None,
            committer_row: None,
            periods_run: 0,
            committer_taken_at: None,
            takeable_since: None,
            presence_lane: None,
            config,
        }
    }

    /// The same manager, renewing its presence row through `lane` instead of its store: the
    /// store's handle that serves presence renewals ahead of the other traffic
    /// ([`crate::lease::sql::SqlLeaseStore::presence_lane`]). A member with a shared presence
    /// renews none of its own.
    pub fn with_presence_lane(mut self, lane: Arc<dyn LeaseStore>) -> Self {
        self.presence_lane = Some(lane);
        self
    }

    /// The same manager for a member channel whose leases live by `shared`, the presence of
    /// this worker in the members' channel (module [`group`]): it renews no presence row and
    /// no committer lease of its own; its presence row in the member channel only carries the
    /// balancer's notices and hand-offs; its balancer judges workers by their heartbeat in
    /// `shared`.
    pub fn with_shared_presence(mut self, shared: Arc<SharedPresence>) -> Self {
        shared.attach();
        if let Some(old) = self.shared.replace(shared) {
            old.detach();
        }
        self
    }

    /// Makes hand-offs graceful: the returned handle is the worker's answer
    /// ([`HeldLeases::handing_off`]); the manager moves a shard once its worker lists it there,
    /// or after the hand-off wait ([`LeaseManager::with_handoff_wait`]).
    pub fn handoff_replies(&mut self) -> HandOffReplies {
        self.replies
            .get_or_insert_with(HandOffReplies::default)
            .clone()
    }

    /// The longest a graceful hand-off waits for the worker before the shard moves anyway (the
    /// worker then drops what it had and the new owner reads it again), `lease_duration` by
    /// default. A stalled or dead owner is not waited for: its presence stands still and the
    /// balancer takes its shards after `lease_duration`, as before.
    pub fn with_handoff_wait(mut self, wait: Duration) -> Self {
        self.handoff_wait = wait;
        self
    }

    /// The same manager, which as balancer also asks `discovery` for the source's shards every
    /// `period` and creates lease rows for new ones (only rows missing from its listing are
    /// written).
    pub fn with_discovery(mut self, discovery: Arc<dyn ShardDiscovery>, period: Duration) -> Self {
        self.discovery = Some((discovery, period));
        self
    }

    /// A switch that, once set, stops this manager from taking the committer lease and makes it
    /// release shards assigned to it, while it keeps the ones it holds (graceful shutdown: a
    /// draining worker must not pick up shards it will not read).
    pub fn drain_switch(&self) -> Arc<AtomicBool> {
        self.draining.clone()
    }

    /// A receiver of the held leases; it is notified when a lease is gained or lost (not at
    /// every renewal, though each renewal's validity is in the value it reads).
    pub fn subscribe(&self) -> watch::Receiver<HeldLeases> {
        self.published.subscribe()
    }

    /// The leases held now.
    pub fn held(&self) -> HeldLeases {
        self.published.borrow().clone()
    }

    /// The earliest instant at which a held lease stops being valid, if any.
    pub fn next_expiry(&self) -> Option<Instant> {
        if let Some(until) = self.shared.as_ref().and_then(|s| s.valid_until()) {
            let holds = !self.shards.is_empty() || self.committer.is_some();
            return holds.then_some(until);
        }
        self.shards
            .values()
            .map(|(_, until)| *until)
            .chain(self.committer.iter().map(|(_, until)| *until))
            .min()
    }

    /// With a shared presence: every held lease is valid until the shared presence's validity.
    fn follow_shared_validity(&mut self) {
        let Some(until) = self.shared.as_ref().and_then(|s| s.valid_until()) else {
            return;
        };
        for (_, valid) in self.shards.values_mut() {
            *valid = (*valid).max(until);
        }
        if let Some((_, valid)) = self.committer.as_mut() {
            *valid = (*valid).max(until);
        }
    }

    fn params(&self) -> BalanceParams {
        BalanceParams {
            lease_duration: self.config.lease_duration,
            max_leases_to_steal: self.config.max_leases_to_steal,
            tie_seed: balance::tie_seed_of(&self.config.channel),
            exact_shares: self.shared.is_some(),
            placement_seed: self.config.co_locate.as_deref().map(balance::tie_seed_of),
        }
    }

    fn draining(&self) -> bool {
        self.draining.load(Ordering::SeqCst)
    }

    fn publish(&self) {
        let next = HeldLeases {
            shards: self
                .shards
                .iter()
                .map(|(s, (l, _))| (s.clone(), l.clone()))
                .collect(),
            committer: self.committer.as_ref().map(|(l, _)| l.clone()),
            committer_valid_until: self.committer.as_ref().map(|(_, until)| *until),
            presence_validity: self.shared.clone().map(PresenceValidity),
            handing_off: self.handing.keys().cloned().collect(),
            moves_pending: self.replies.is_some()
                && self.balancer.as_ref().is_some_and(|b| !b.moving.is_empty()),
        };
        self.published.send_if_modified(|current| {
            let changed = !current.same_grants(&next);
            *current = next;
            changed
        });
    }

    fn lost(&self, key: &LeaseKey, lease_counter: u64, why: &str) {
        tracing::warn!(
            channel = %self.config.channel,
            lease = %key,
            lease_counter,
            reason = why,
            "lease lost"
        );
    }

    /// Drops every lease whose validity ended by `now` and publishes the result.
    ///
    /// A member's leases are valid while the shared presence is ([`SharedPresence::valid_until`]),
    /// read here, not as of this member's last period: under a slow lease store a member's
    /// period can come late, and its leases were dropped (and released, and taken again) while
    /// the worker's presence was renewed on time — 1,369 leases of one worker at once in a
    /// 3-worker × 1,000-table fleet (issue 43). Nobody else takes them while that row is
    /// renewed: the balancers assign only leases whose owner's row stood still.
    pub fn expire(&mut self, now: Instant) {
        self.follow_shared_validity();
        let timed_out: Vec<ShardId> = self
            .shards
            .iter()
            .filter(|(_, (_, until))| now >= *until)
            .map(|(s, _)| s.clone())
            .collect();
        if !timed_out.is_empty() {
            // The balancer may hand them away from now on: whatever is still in this worker's
            // name when it next lists is released, not held.
            self.release_owned = true;
        }
        for shard in timed_out {
            self.handing.remove(&shard);
            let (lease, _) = self.shards.remove(&shard).expect("listed");
            self.lost(
                &lease.key,
                lease.lease_counter,
                "presence not renewed within lease_duration",
            );
        }
        if self
            .committer
            .as_ref()
            .is_some_and(|(_, until)| now >= *until)
        {
            let (lease, _) = self.committer.take().expect("held");
            self.balancer = None;
            self.lost(
                &lease.key,
                lease.lease_counter,
                "not renewed within lease_duration",
            );
        }
        self.publish();
    }

    /// One period: drops leases no longer valid, renews the presence, keeps or takes the
    /// committer lease, re-reads the shard leases when notified, balances when holding the
    /// committer lease, and publishes the result. Individual write failures are logged, not
    /// returned.
    ///
    /// Errors: the presence renewal's error (held shards stay published until they time out
    /// locally).
    pub async fn tick(&mut self) -> Result<(), LeaseError> {
        let result = self.tick_inner().await;
        self.publish();
        result
    }

    async fn tick_inner(&mut self) -> Result<(), LeaseError> {
        self.periods_run += 1;
        let channel = self.config.channel.clone();
        self.expire(Instant::now());
        if let Some(shared) = &self.shared {
            if shared
                .valid_until()
                .is_none_or(|until| until <= Instant::now())
            {
                // The shared presence lapsed (it logs its failed renewals once per worker, not
                // once per member): nothing to keep or take until it is renewed again.
                self.balancer = None;
                return Ok(());
            }
        }

        let release_own_committer = self.release_owned;
        let presence = self.presence().await;
        let presence_error = match presence {
            Ok((presence, until)) => {
                for (_, valid) in self.shards.values_mut() {
                    *valid = until;
                }
                if self.notice != Some(presence.notice) || self.release_owned || self.relist {
                    if let Err(err) = self.sync_shards(&presence, until).await {
                        tracing::warn!(channel = %channel, error = %err, "reading the shard leases failed");
                    }
                } else if !self.handing.is_empty() {
                    // A hand-off no longer asked for is called off: the shard is read again.
                    self.handing
                        .retain(|shard, h| presence.handoffs.get(shard) == Some(&h.to));
                }
                self.complete_handoffs().await;
                None
            }
            Err(err) => Some(err),
        };

        if let Err(err) = self.keep_committer(release_own_committer).await {
            tracing::warn!(channel = %channel, error = %err, "committer lease period failed");
        }
        if self.committer.is_some() && presence_error.is_none() {
            if let Err(err) = self.balance_once().await {
                tracing::warn!(channel = %channel, error = %err, "balancing failed");
            }
        } else if self.committer.is_none() {
            self.balancer = None;
        }
        match presence_error {
            None => Ok(()),
            Some(err) => Err(err),
        }
    }

    /// Renews this worker's presence row and returns it with the instant the leases stop being
    /// valid (`lease_duration` after the renewal was sent). With a shared presence: reads the
    /// member's row (created once; it carries notices and hand-offs) and returns the shared
    /// presence's validity.
    ///
    /// Errors: the store's; [`LeaseError::Unavailable`] when the shared presence has not been
    /// renewed within `lease_duration`.
    async fn presence(&mut self) -> Result<(Presence, Instant), LeaseError> {
        let channel = &self.config.channel;
        let me = &self.config.worker_id;
        let Some(shared) = self.shared.clone() else {
            let sent_at = Instant::now();
            let presence = match &self.presence_lane {
                Some(lane) => lane.renew_presence(channel, me).await?,
                None => self.store.renew_presence(channel, me).await?,
            };
            return Ok((presence, sent_at + self.config.lease_duration));
        };
        let until = shared
            .valid_until()
            .filter(|until| *until > Instant::now())
            .ok_or_else(|| LeaseError::Unavailable {
                message: format!(
                    "this worker's presence in channel {} was not renewed within lease_duration",
                    shared.channel()
                ),
            })?;
        // Its row changes only when its balancer notifies it, which then bumps the shared
        // row's notice: read it only when that moved (or when this member must list anyway).
        let group_notice = shared.own_notice();
        let unchanged = group_notice.is_some()
            && group_notice == self.synced_group_notice
            && !self.release_owned
            && !self.relist
            && !self.safety_read_due();
        if let Some(row) = self.member_row.as_ref().filter(|_| unchanged) {
            return Ok((row.clone(), until));
        }
        let rows = self.store.list_presence(channel).await?;
        let presence = match rows.into_iter().find(|p| &p.worker == me) {
            Some(row) => row,
            // Created once (and again after a balancer removed it for a gap): its heartbeat is
            // not renewed, the shared presence's is.
            None => self.store.renew_presence(channel, me).await?,
        };
        self.synced_group_notice = group_notice;
        self.member_row = Some(presence.clone());
        Ok((presence, until))
    }

    /// Whether this period reads what a shared-presence member otherwise reads only on a sign
    /// of change ([`SAFETY_READ_PERIODS`]).
    fn safety_read_due(&self) -> bool {
        self.periods_run.is_multiple_of(SAFETY_READ_PERIODS)
    }

    /// Re-reads the shard leases after a notice: holds the rows in this worker's name (valid
    /// until `until`), drops held ones that changed hands, hands over the shards `presence`
    /// asks for, and releases rows it must not hold (after a gap, or while draining).
    async fn sync_shards(&mut self, presence: &Presence, until: Instant) -> Result<(), LeaseError> {
        let me = self.config.worker_id.clone();
        let channel = self.config.channel.clone();
        let leases = self.store.list_leases(&channel).await?;
        let mine: BTreeMap<ShardId, Lease> = leases
            .into_iter()
            .filter(|l| l.is_owned_by(&me))
            .filter_map(|l| l.key.shard_id().cloned().map(|s| (s, l)))
            .collect();
        let stale: Vec<ShardId> = self
            .shards
            .iter()
            .filter(|(s, (held, _))| {
                mine.get(*s).map(|l| l.lease_counter) != Some(held.lease_counter)
            })
            .map(|(s, _)| s.clone())
            .collect();
        for shard in stale {
            let (lease, _) = self.shards.remove(&shard).expect("held");
            self.lost(
                &lease.key,
                lease.lease_counter,
                "taken by another worker or released",
            );
        }
        let release_owned = std::mem::take(&mut self.release_owned);
        self.relist = false;
        let mut release_failed = false;
        self.handing
            .retain(|shard, h| presence.handoffs.get(shard) == Some(&h.to));
        for (shard, lease) in mine {
            if let Some(to) = presence.handoffs.get(&shard) {
                if self.replies.is_some() && self.shards.contains_key(&shard) {
                    // Graceful: held (and published as handing off) until the worker answers
                    // that every batch of it is committed, or the wait runs out.
                    self.handing.entry(shard.clone()).or_insert_with(|| {
                        tracing::info!(channel = %channel, lease = %lease.key, to = %to, "lease asked for: handing over once what was read of it is committed");
                        Handing {
                            to: to.clone(),
                            since: Instant::now(),
                        }
                    });
                    self.shards.insert(shard, (lease, until));
                    continue;
                }
                // Not read here (or nobody to wait for): stop publishing, then write the new
                // owner.
                self.hand_over(&shard, &lease, to).await;
                continue;
            }
            let held_now = self.shards.contains_key(&shard);
            if !held_now && (release_owned || self.draining()) {
                match self.store.release_lease(&lease).await {
                    Ok(()) => {
                        tracing::info!(channel = %channel, lease = %lease.key, "lease released: found in this worker's name after a gap or while draining")
                    }
                    Err(err) => {
                        tracing::warn!(channel = %channel, lease = %lease.key, error = %err, "lease release failed; retried next period");
                        if err.is_retryable() {
                            self.relist = true;
                            release_failed = true;
                        }
                    }
                }
                continue;
            }
            if !held_now {
                tracing::info!(channel = %channel, lease = %lease.key, lease_counter = lease.lease_counter, "lease taken");
            }
            self.shards.insert(shard, (lease, until));
        }
        if release_failed && release_owned {
            // Still not to be held: the balancer may be giving it away.
            self.release_owned = true;
        }
        self.notice = Some(presence.notice);
        Ok(())
    }

    /// Stops publishing `shard`, then writes `to` as the owner of `lease` (as listed).
    async fn hand_over(&mut self, shard: &ShardId, lease: &Lease, to: &str) {
        let channel = self.config.channel.clone();
        self.handing.remove(shard);
        self.shards.remove(shard);
        self.publish();
        match self.store.take_lease(lease, to).await {
            Ok(moved) => {
                tracing::info!(channel = %channel, lease = %moved.key, lease_counter = moved.lease_counter, to = %to, "lease handed over")
            }
            Err(err) => {
                tracing::warn!(channel = %channel, lease = %lease.key, error = %err, "lease handoff failed; retried next period");
                // Not held again: the write's outcome is unknown. The next listing shows the
                // owner, and the handoff is retried while asked for.
                if err.is_retryable() {
                    self.relist = true;
                }
            }
        }
    }

    /// Hands over each shard of a graceful hand-off whose worker is ready, or whose wait ran
    /// out (the worker then drops what it had of it, like any lost lease).
    async fn complete_handoffs(&mut self) {
        if self.handing.is_empty() {
            return;
        }
        let ready = self.replies.as_ref().map(|r| r.ready()).unwrap_or_default();
        let due: Vec<(ShardId, String, bool)> = self
            .handing
            .iter()
            .filter_map(|(shard, h)| {
                let is_ready = ready.contains(shard);
                (is_ready || h.since.elapsed() >= self.handoff_wait)
                    .then(|| (shard.clone(), h.to.clone(), is_ready))
            })
            .collect();
        for (shard, to, is_ready) in due {
            let Some((lease, _)) = self.shards.get(&shard).cloned() else {
                self.handing.remove(&shard);
                continue;
            };
            if !is_ready {
                tracing::warn!(channel = %self.config.channel, lease = %lease.key, to = %to, wait_s = self.handoff_wait.as_secs_f64(), "the worker did not finish the hand-off in time; handing the lease over anyway (what it read of the shard and did not commit is read again)");
            }
            self.hand_over(&shard, &lease, &to).await;
        }
    }

    /// Renews the committer lease when held; otherwise reads it and takes it when unowned or
    /// expired on this worker's clock (not while draining).
    async fn keep_committer(&mut self, release_own: bool) -> Result<(), LeaseError> {
        let channel = self.config.channel.clone();
        let me = self.config.worker_id.clone();
        if !self.committer_row_ensured {
            self.store
                .ensure_leases(&channel, &[LeaseSpec::new(LeaseKey::Committer)])
                .await?;
            self.committer_row_ensured = true;
        }
        if let Some(shared) = self.shared.clone() {
            return self.keep_shared_committer(&shared, release_own).await;
        }
        let sent_at = Instant::now();
        if let Some((held, _)) = self.committer.clone() {
            match self.store.renew_lease(&held).await {
                Ok(renewed) => {
                    self.committer = Some((renewed, sent_at + self.config.lease_duration));
                }
                Err(LeaseError::Lost { .. }) => {
                    self.committer = None;
                    self.balancer = None;
                    self.lost(&held.key, held.lease_counter, "renewal lost");
                }
                Err(err) => return Err(err),
            }
            return Ok(());
        }
        let Some(row) = self.store.get_lease(&channel, &LeaseKey::Committer).await? else {
            self.committer_row_ensured = false;
            return Ok(());
        };
        let now = Instant::now();
        self.committer_seen
            .observe_leases(std::slice::from_ref(&row), now);
        let still = self.committer_seen.lease_still_for(&row, now);
        // Until its heartbeat is seen to move, the committer lease may be a dead worker's: this
        // worker watches the presence rows from its first period, so the dead worker's row has
        // stood still for lease_duration by the time the lease is takeable (issue 35: a lone
        // worker after a SIGKILLed balancer took its shards at 1.5 × lease_duration).
        let in_doubt = !self.committer_seen.has_moved(&LeaseKey::Committer);
        if row.owner.is_some()
            && !row.is_owned_by(&me)
            && (in_doubt
                || still.is_some_and(|d| d > self.config.effective_renew_interval() * 3 / 2))
        {
            // The balancer may be dead: watch the presence rows from now on (every worker lists
            // them each period, W items each, only while the committer lease stands still or
            // was never seen to move).
            let rows = self.store.list_presence(&channel).await?;
            self.standby
                .get_or_insert_with(PresenceObservations::default)
                .observe_presence(&rows, now);
        } else {
            self.standby = None;
        }
        let takeable = row.owner.is_none()
            || (!row.is_owned_by(&me)
                && self
                    .committer_seen
                    .is_expired(&row, now, self.config.lease_duration));
        if row.is_owned_by(&me) && release_own {
            // In this worker's name from before a restart or gap: hand it back rather than
            // trust it.
            let _ = self.store.release_lease(&row).await;
            return Ok(());
        }
        if !takeable || self.draining() {
            return Ok(());
        }
        let sent_at = Instant::now();
        if self
            .take_committer(&row, sent_at + self.config.lease_duration)
            .await?
            .is_some()
        {
            if let Some(presence) = self.standby.take() {
                // It watched the fleet already: it may assign at once.
                self.balancer = Some(Balancer {
                    presence,
                    periods: 1,
                    ..Balancer::default()
                });
            }
        }
        Ok(())
    }

    /// Takes the committer lease as listed in `row` (a conditional write), valid until `until`.
    /// Returns the lease taken; `None` when another worker won the race.
    ///
    /// Errors: the store's, other than the lost race.
    async fn take_committer(
        &mut self,
        row: &Lease,
        until: Instant,
    ) -> Result<Option<Lease>, LeaseError> {
        let (channel, me) = (&self.config.channel, &self.config.worker_id);
        match self.store.take_lease(row, me).await {
            Ok(taken) => {
                tracing::info!(channel = %channel, lease = %taken.key, lease_counter = taken.lease_counter, from = row.owner.as_deref().unwrap_or(""), "lease taken");
                if row.owner.as_deref().is_some_and(|w| w != me) {
                    crate::telemetry::record_lease_takeover(channel);
                }
                self.committer = Some((taken.clone(), until));
                Ok(Some(taken))
            }
            Err(LeaseError::Conflict { .. }) => {
                tracing::debug!(channel = %channel, "committer lease take lost a race");
                Ok(None)
            }
            Err(err) => Err(err),
        }
    }

    /// [`Self::keep_committer`] with a shared presence: the committer lease is never renewed;
    /// it is valid while the shared presence is. Held: its row is read to see that it is still
    /// this worker's. Not held: it is taken when unowned, when its owner's heartbeat in the
    /// shared presence stood still for `lease_duration`, or when its owner has no presence row
    /// there and the lease row stood still that long; a row in this worker's name that it does
    /// not hold (its presence lapsed, or a restart) is released, since nobody else would take
    /// it while this worker's heartbeat moves.
    async fn keep_shared_committer(
        &mut self,
        shared: &SharedPresence,
        release_own: bool,
    ) -> Result<(), LeaseError> {
        let channel = self.config.channel.clone();
        let me = self.config.worker_id.clone();
        let now = Instant::now();
        let preferred = shared.preferred(self.params().tie_seed, now);
        if self.committer.is_some() && self.move_committer(shared, preferred.as_deref(), now).await
        {
            return Ok(());
        }
        // Nothing this member would do needs the row while it holds the lease (only a lapse of
        // the shared presence ends it) or while the owner it last read is alive — unless this
        // worker is the one the lease should move to.
        let skip = !self.safety_read_due()
            && match (&self.committer, &self.committer_row) {
                (Some(_), _) => true,
                (None, Some(row)) => row.owner.as_deref().is_some_and(|owner| {
                    owner != me
                        && preferred.as_deref() != Some(me.as_str())
                        && matches!(
                            shared.standing(owner, now),
                            Standing::Live | Standing::InDoubt
                        )
                }),
                (None, None) => false,
            };
        if skip {
            if let (Some((_, valid)), Some(until)) = (self.committer.as_mut(), shared.valid_until())
            {
                *valid = until;
            }
            return Ok(());
        }
        self.committer_row = None;
        let Some(row) = self.store.get_lease(&channel, &LeaseKey::Committer).await? else {
            self.committer_row_ensured = false;
            return Ok(());
        };
        self.committer_seen
            .observe_leases(std::slice::from_ref(&row), now);
        if !row.is_owned_by(&me) {
            self.committer_row = Some(row.clone());
        }
        if let Some((held, _)) = self.committer.clone() {
            if row.is_owned_by(&me) && row.lease_counter == held.lease_counter {
                if let Some(until) = shared.valid_until() {
                    self.committer = Some((row, until));
                }
            } else {
                self.committer = None;
                self.balancer = None;
                self.lost(
                    &held.key,
                    held.lease_counter,
                    "taken by another worker or released",
                );
            }
            return Ok(());
        }
        if row.is_owned_by(&me) {
            match self.store.release_lease(&row).await {
                Ok(()) => {
                    tracing::info!(channel = %channel, lease = %row.key, release_own, "lease released: found in this worker's name, not held")
                }
                Err(err) => {
                    tracing::warn!(channel = %channel, lease = %row.key, error = %err, "lease release failed; retried next period")
                }
            }
            return Ok(());
        }
        let takeable = match row.owner.as_deref() {
            None => true,
            Some(owner) => match shared.standing(owner, now) {
                Standing::Gone => true,
                Standing::Absent => {
                    shared.has_listed()
                        && self
                            .committer_seen
                            .is_expired(&row, now, self.config.lease_duration)
                }
                Standing::Live | Standing::InDoubt => false,
            },
        };
        if !takeable || self.draining() {
            self.takeable_since = None;
            return Ok(());
        }
        // The preferred worker takes it; the others after two periods (it may not run this
        // table, or be draining).
        let since = *self.takeable_since.get_or_insert(now);
        let left_to_preferred = preferred.as_deref().is_some_and(|p| p != me)
            && now.saturating_duration_since(since) < 2 * self.config.effective_renew_interval();
        if left_to_preferred {
            return Ok(());
        }
        let Some(until) = shared.valid_until().filter(|until| *until > now) else {
            return Ok(());
        };
        if let Some(taken) = self.take_committer(&row, until).await? {
            self.takeable_since = None;
            self.committer_taken_at = Some(now);
            self.committer_row = Some(taken);
            // The shared presence watched the fleet already: it may assign at once.
            self.balancer = Some(Balancer {
                periods: 1,
                ..Balancer::default()
            });
        }
        Ok(())
    }

    /// With a shared presence: releases the committer lease this member holds when another
    /// live worker is `preferred` for it ([`SharedPresence::preferred`]), so that the committers
    /// of many tables spread over the fleet (three workers held 890 / 84 / 26 of 1,000 tables'
    /// committer leases: whoever started first took them; fresh review of issue 43). Only after
    /// holding it for `2 × lease_duration`, with no shard hand-off under way, not while
    /// draining, and within the worker's [`COMMITTER_MOVES_PER_PERIOD`]. The preferred worker
    /// reads the row every period and takes it; a commit round still running here is fenced by
    /// the table's epoch like any lost lease. Returns whether the lease was released.
    async fn move_committer(
        &mut self,
        shared: &SharedPresence,
        preferred: Option<&str>,
        now: Instant,
    ) -> bool {
        let me = self.config.worker_id.as_str();
        let settled = self
            .committer_taken_at
            .is_none_or(|at| now.saturating_duration_since(at) >= 2 * self.config.lease_duration);
        let quiet =
            self.balancer.as_ref().is_none_or(|b| b.moving.is_empty()) && self.handing.is_empty();
        let elsewhere = preferred.is_some_and(|p| p != me);
        if !(elsewhere && settled && quiet && !self.draining() && shared.allow_committer_move()) {
            return false;
        }
        let Some((held, _)) = self.committer.clone() else {
            return false;
        };
        let channel = &self.config.channel;
        match self.store.release_lease(&held).await {
            Ok(()) => {
                tracing::info!(channel = %channel, lease_counter = held.lease_counter, to = preferred.unwrap_or(""), "committer lease released to move it to its preferred worker");
                self.committer = None;
                self.committer_taken_at = None;
                self.committer_row = None;
                self.balancer = None;
                true
            }
            Err(err) => {
                tracing::warn!(channel = %channel, error = %err, "releasing the committer lease to its preferred worker failed; kept");
                false
            }
        }
    }

    /// One balancer period (this worker holds the committer lease).
    async fn balance_once(&mut self) -> Result<(), LeaseError> {
        let channel = self.config.channel.clone();
        let duration = self.config.lease_duration;
        let handoff_wait = self.handoff_wait;
        let params = self.params();
        let mut b = self.balancer.take().unwrap_or_default();
        let result = async {
            let now = Instant::now();
            let presence = self.store.list_presence(&channel).await?;
            b.presence.observe_presence(&presence, now);
            let shared = self.shared.clone();
            // How a worker stands: by its heartbeat in the shared presence, or by its row here.
            let standing = |b: &Balancer, worker: &str| -> Standing {
                if let Some(shared) = &shared {
                    return shared.standing(worker, now);
                }
                let Some(row) = presence.iter().find(|p| p.worker == worker) else {
                    return Standing::Absent;
                };
                match b.presence.still_for(&row.worker, &row.heartbeat, now) {
                    Some(d) if d >= duration => Standing::Gone,
                    _ if b.presence.has_moved(&row.worker) => Standing::Live,
                    _ => Standing::InDoubt,
                }
            };
            let gc_after = presence_gc_after(duration);
            for row in &presence {
                let own_row_still = b.presence.still_for(&row.worker, &row.heartbeat, now);
                let gone_for_long = match &shared {
                    None => own_row_still.is_some_and(|d| d >= gc_after),
                    Some(shared) => match shared.still_for(&row.worker, now) {
                        Some(d) => d >= gc_after,
                        // No row in the shared presence (removed for a long gap): this row is
                        // only notices, never renewed; collected once it stood that long too.
                        None => shared.has_listed() && own_row_still.is_some_and(|d| d >= gc_after),
                    },
                };
                if gone_for_long {
                    tracing::info!(channel = %channel, worker = %row.worker, "removing the presence of a worker gone for long");
                    self.store.remove_presence(&channel, &row.worker).await?;
                }
            }
            // Live: a heartbeat this balancer saw move within lease_duration. A row seen but not
            // yet seen to move may be a worker killed long ago (its row stays until collected):
            // neither live nor gone until a period shows which. A draining balancer gives
            // nothing to itself.
            let draining = self.draining();
            let me = self.config.worker_id.clone();
            let live: BTreeSet<String> = presence
                .iter()
                .filter(|p| !(draining && p.worker == me))
                .filter(|p| standing(&b, &p.worker) == Standing::Live)
                .map(|p| p.worker.clone())
                .collect();
            let mut leases = self.store.list_leases(&channel).await?;
            b.leases.observe_leases(&leases, now);
            self.discover_shards(&mut b, &mut leases, now).await?;
            // Handoffs asked for and not done within lease_duration are asked again later.
            b.moving.retain(|shard, m| {
                leases.iter().any(|l| {
                    l.key.shard_id() == Some(shard)
                        && l.is_owned_by(&m.from)
                        && l.lease_counter == m.lease_counter
                }) && now.saturating_duration_since(m.since) < duration + handoff_wait
                    && live.contains(&m.to)
            });
            let gone = |l: &Lease| match l.owner.as_deref() {
                Some(owner) => match standing(&b, owner) {
                    Standing::Gone => true,
                    Standing::Absent => b.leases.is_expired(l, now, duration),
                    Standing::Live | Standing::InDoubt => false,
                },
                None => true,
            };
            let moving: BTreeMap<ShardId, String> =
                b.moving.iter().map(|(s, m)| (s.clone(), m.to.clone())).collect();
            let unknown = presence
                .iter()
                .filter(|p| standing(&b, &p.worker) == Standing::InDoubt)
                .count();
            let assign_free = (b.periods >= 1).then_some(unknown);
            let plan = balance(&leases, &live, &gone, &moving, assign_free, &params);
            let mut assigned = 0usize;
            for step in plan {
                match step {
                    Assignment::Assign { lease, to } => match self.store.take_lease(&lease, &to).await {
                        Ok(taken) => {
                            if lease.owner.as_deref().is_some_and(|w| w != to) {
                                crate::telemetry::record_lease_takeover(&channel);
                            }
                            tracing::debug!(channel = %channel, lease = %taken.key, lease_counter = taken.lease_counter, to = %to, from = lease.owner.as_deref().unwrap_or(""), "lease assigned");
                            if let Some(row) = leases.iter_mut().find(|l| l.key == taken.key) {
                                *row = taken;
                            }
                            assigned += 1;
                        }
                        Err(LeaseError::Conflict { .. }) => {}
                        Err(err) => return Err(err),
                    },
                    Assignment::Handoff { lease, to } => {
                        if shared.as_ref().is_some_and(|s| !s.allow_shard_handoff()) {
                            // This worker's members asked for enough moves this period.
                            continue;
                        }
                        let shard = lease.key.shard_id().expect("shard").clone();
                        b.moving.insert(
                            shard,
                            Moving {
                                from: lease.owner.clone().expect("owned"),
                                to,
                                lease_counter: lease.lease_counter,
                                since: now,
                            },
                        );
                    }
                }
            }
            if assigned > 0 {
                tracing::info!(channel = %channel, assigned, live_workers = live.len(), "shard leases assigned");
            }
            self.notify_news(&mut b, &leases, &live).await?;
            Ok(())
        }
        .await;
        b.periods += 1;
        self.balancer = Some(b);
        result
    }

    /// Asks the source for its shards every discovery period and creates lease rows for those
    /// missing from `leases` (then lists again).
    async fn discover_shards(
        &self,
        b: &mut Balancer,
        leases: &mut Vec<Lease>,
        now: Instant,
    ) -> Result<(), LeaseError> {
        let channel = &self.config.channel;
        let Some((discovery, period)) = self.discovery.clone() else {
            return Ok(());
        };
        if b.last_discovery
            .is_some_and(|t| now.saturating_duration_since(t) < period)
        {
            return Ok(());
        }
        b.last_discovery = Some(now);
        let specs = match discovery.shards().await {
            Ok(specs) => specs,
            Err(err) => {
                tracing::warn!(channel = %channel, error = %err, "shard discovery failed");
                return Ok(());
            }
        };
        let removed = self
            .remove_unlisted(leases, &specs, discovery.unlisted_shards_are_gone())
            .await;
        for owner in removed.iter().filter_map(|l| l.owner.as_deref()) {
            // Its owner is told at once (notify_news sends to a worker not notified yet), and
            // drops the shard as a lease lost.
            b.notified.remove(owner);
        }
        let removed = removed.len();
        let known: BTreeSet<&LeaseKey> = leases.iter().map(|l| &l.key).collect();
        let missing: Vec<LeaseSpec> = specs
            .into_iter()
            .filter(|s| !known.contains(&s.key))
            .collect();
        if missing.is_empty() && removed == 0 {
            return Ok(());
        }
        if !missing.is_empty() {
            tracing::info!(channel = %channel, new_shards = missing.len(), "new shards discovered");
            self.store.ensure_leases(channel, &missing).await?;
        }
        *leases = self.store.list_leases(channel).await?;
        b.leases.observe_leases(leases, now);
        Ok(())
    }

    /// Deletes the rows of finished shards (checkpoint hint `SHARD_END`) that the source no
    /// longer lists (a closed Kinesis shard past retention), so a long-lived stream's lease table
    /// does not grow with every resharding; with `unlisted_gone`
    /// ([`ShardDiscovery::unlisted_shards_are_gone`]) the rows of every shard no longer listed,
    /// held or not (a deleted topic: its leases are released; the table keeps its checkpoints).
    /// A finished shard still listed keeps its row: deleted, discovery would create it again as
    /// a new shard. A child whose parent row is gone counts that parent as finished
    /// ([`active_shards`]). Returns the rows deleted; a failed delete (the row changed) is
    /// tried again at the next discovery.
    async fn remove_unlisted(
        &self,
        leases: &[Lease],
        listed: &[LeaseSpec],
        unlisted_gone: bool,
    ) -> Vec<Lease> {
        let mut removed = Vec::new();
        if listed.is_empty() {
            // An empty listing is more likely a fault than a stream without shards.
            return removed;
        }
        let channel = &self.config.channel;
        let listed: BTreeSet<&LeaseKey> = listed.iter().map(|s| &s.key).collect();
        for lease in leases {
            if lease.key.shard_id().is_none()
                || !(unlisted_gone || is_finished(lease))
                || listed.contains(&lease.key)
            {
                continue;
            }
            match self.store.delete_lease(lease).await {
                Ok(()) => {
                    removed.push(lease.clone());
                    if is_finished(lease) {
                        tracing::info!(channel = %channel, lease = %lease.key, "finished shard left the stream: its lease row is deleted");
                    } else {
                        tracing::warn!(channel = %channel, lease = %lease.key, owner = ?lease.owner, "shard left the source (its topic was deleted): its lease row is deleted, which releases it; the table keeps its checkpoint");
                    }
                }
                Err(err) => {
                    tracing::warn!(channel = %channel, lease = %lease.key, error = %err, "deleting the lease row of a shard no longer listed failed; tried again at the next discovery");
                }
            }
        }
        removed
    }

    /// Notifies every live worker that gained a lease or is asked for a new handoff since its
    /// last notice. Losing a lease needs no notice: the balancer only takes leases of gone
    /// workers, and a worker hands over its own.
    async fn notify_news(
        &self,
        b: &mut Balancer,
        leases: &[Lease],
        live: &BTreeSet<String>,
    ) -> Result<(), LeaseError> {
        let channel = &self.config.channel;
        let mut owned: BTreeMap<&str, BTreeSet<(ShardId, u64)>> = BTreeMap::new();
        for l in leases {
            if let (Some(owner), Some(shard)) = (l.owner.as_deref(), l.key.shard_id()) {
                owned
                    .entry(owner)
                    .or_default()
                    .insert((shard.clone(), l.lease_counter));
            }
        }
        let mut handoffs: BTreeMap<&str, BTreeMap<ShardId, String>> = BTreeMap::new();
        for (shard, m) in &b.moving {
            handoffs
                .entry(m.from.as_str())
                .or_default()
                .insert(shard.clone(), m.to.clone());
        }
        for worker in live {
            let state = (
                owned.get(worker.as_str()).cloned().unwrap_or_default(),
                handoffs.get(worker.as_str()).cloned().unwrap_or_default(),
            );
            let news = match b.notified.get(worker) {
                None => true,
                Some((was_owned, was_asked)) => {
                    !state.0.is_subset(was_owned)
                        || state.1.iter().any(|(s, to)| was_asked.get(s) != Some(to))
                }
            };
            if !news {
                b.notified.insert(worker.clone(), state);
                continue;
            }
            match self.store.notify_worker(channel, worker, &state.1).await {
                Ok(()) => {}
                Err(LeaseError::Conflict { .. }) => continue,
                Err(err) => return Err(err),
            }
            if let Some(shared) = &self.shared {
                // The member reads its row only once the worker's shared row's notice moved.
                match self
                    .store
                    .notify_worker(shared.channel(), worker, &BTreeMap::new())
                    .await
                {
                    Ok(()) => {}
                    // Gone from the shared presence: it is not live for long.
                    Err(LeaseError::Conflict { .. }) => continue,
                    Err(err) => return Err(err),
                }
            }
            b.notified.insert(worker.clone(), state);
        }
        b.notified.retain(|w, _| live.contains(w));
        Ok(())
    }

    /// Hands every held lease back (graceful shutdown): publishes an empty set, removes this
    /// worker's presence row, then releases each lease (conditional; a lease already lost is
    /// skipped) and every other row still in its name. In the other order a balancer could
    /// assign a released lease straight back to this departing worker, which still looked live.
    /// A balancer period that listed the presence row before its removal and writes after the
    /// last listing here can still do so; that shard then waits `lease_duration`. (Waiting a
    /// period before releasing closes that too, but made the simulation's rolling restart four
    /// times slower: 44.6 periods instead of 11.5.)
    pub async fn release_all(&mut self) {
        self.handing.clear();
        let shards = std::mem::take(&mut self.shards);
        let committer = self.committer.take();
        self.balancer = None;
        self.publish();
        let channel = self.config.channel.clone();
        if let Err(err) = self
            .store
            .remove_presence(&channel, &self.config.worker_id)
            .await
        {
            tracing::warn!(channel = %channel, error = %err, "removing the worker's presence failed");
        }
        let mut released: HashSet<LeaseKey> = HashSet::new();
        for (lease, _) in shards.into_values().chain(committer) {
            released.insert(lease.key.clone());
            self.release_logged(&lease).await;
        }
        // Rows in this worker's name that it never took up: a balancer (this worker, in its
        // last period, or another) may have assigned them since the last sync. Left alone they
        // would wait for the presence row to stand still for lease_duration.
        match self.store.list_leases(&channel).await {
            Ok(rows) => {
                for row in rows {
                    if row.is_owned_by(&self.config.worker_id) && !released.contains(&row.key) {
                        self.release_logged(&row).await;
                    }
                }
            }
            Err(err) => tracing::warn!(
                channel = %channel, error = %err,
                "listing leases at shutdown failed; rows assigned since the last sync wait for lease_duration"
            ),
        }
        if let Some(shared) = self.shared.take() {
            shared.detach();
        }
    }

    async fn release_logged(&self, lease: &Lease) {
        let channel = &self.config.channel;
        match self.store.release_lease(lease).await {
            Ok(()) => tracing::info!(channel = %channel, lease = %lease.key, "lease released"),
            Err(err) => tracing::warn!(
                channel = %channel, lease = %lease.key, error = %err,
                "lease release failed"
            ),
        }
    }

    /// Runs a period every [`LeaseManagerConfig::effective_renew_interval`] (and drops a lease
    /// the instant its validity ends) until `shutdown` is cancelled, then
    /// [`release_all`](Self::release_all). Cancel it only after the readers and the committer
    /// have drained. A lease is not dropped while a period waits on the store (a pool starved
    /// for seconds): the committer then goes by [`HeldLeases::committer_valid_until`].
    pub async fn run(mut self, shutdown: CancellationToken) {
        let mut interval = tokio::time::interval(self.config.effective_renew_interval());
        interval.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let mut replies = self.replies.as_ref().map(|r| r.0.subscribe());
        if let Some(shared) = self.shared.clone() {
            // Its first period waits for the shared presence's first renewal (started with it).
            tokio::select! {
                _ = shutdown.cancelled() => {}
                _ = shared.renewed() => {}
            }
        }
        loop {
            let expiry = self.next_expiry();
            tokio::select! {
                _ = shutdown.cancelled() => break,
                // A worker ready to hand a shard over: move it now, not at the next period.
                Ok(()) = async {
                    match replies.as_mut() {
                        Some(rx) => rx.changed().await,
                        None => std::future::pending().await,
                    }
                } => {
                    self.complete_handoffs().await;
                    self.publish();
                }
                _ = async {
                    match expiry {
                        Some(at) => tokio::time::sleep_until(at).await,
                        None => std::future::pending().await,
                    }
                } => self.expire(Instant::now()),
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
mod tests;
