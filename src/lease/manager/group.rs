//! One presence row per worker for a channel that runs as member channels (a table per topic,
//! `table = "{topic}"`, or per route, `table = "{route}"`; docs/routing.md): the members' lease
//! managers on a worker share it instead of each renewing a row of its own, so the lease-store
//! writes of a worker per `renew_interval` do not grow with its tables (issue 43).
//!
//! ```text
//!  SharedPresence of channel C on worker W, each period (one task per worker per channel):
//!    renew presence (C, W)         1 write      ──> valid_until = sent + lease_duration
//!      (through the store's presence lane, not queued behind the members' calls; `floe run`
//!       passes SqlLeaseStore::presence_lane to SharedPresence::run)
//!    list presence rows of C       W items read ──> since when each heartbeat stood still
//!
//!  member M's lease manager (LeaseManager::with_shared_presence), each period:
//!    its shard and committer leases are valid until valid_until (no write of its own);
//!    its own presence row (M, W) carries only the balancer's notices and hand-offs
//!      (created once at start, written by M's balancer when it has news, which then bumps
//!      the notice of (C, W) too): M reads it only when the notice of (C, W) moved;
//!    its committer lease row is read only when its owner as last read is not live in C
//!      (or held, or every SAFETY_READ_PERIODS periods);
//!    M's balancer: live workers = rows of M whose worker's heartbeat in C moved within
//!      lease_duration; the committer lease is taken from a worker whose heartbeat in C
//!      stood still that long (it is never renewed)
//! ```
//!
//! Invariants, as for a member's own presence (the module above): a member publishes its leases
//! only while the shared presence was renewed within `lease_duration` counted from when the
//! renewal was *sent*; others act on it only after its heartbeat stood still for
//! `lease_duration` on their own clock, which starts later.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::{Instant, MissedTickBehavior};
use tokio_util::sync::CancellationToken;

use super::{presence_gc_after, PresenceObservations};
use crate::lease::{LeaseStore, Presence};

/// What the shared presence knows, read by the members under a lock held for no await.
#[derive(Debug, Default)]
struct View {
    /// When the last successful renewal was sent.
    renewed_at: Option<Instant>,
    /// The channel's presence rows as last listed (worker → heartbeat).
    heartbeats: std::collections::HashMap<String, u64>,
    /// Since when each worker's heartbeat stood still on this worker's clock.
    observations: PresenceObservations,
    /// Whether a listing succeeded yet.
    listed: bool,
    /// This worker's own row's notice in the last listing: members' balancers bump it after
    /// writing a member's notice, so a member reads its own row only when it moved.
    own_notice: Option<u64>,
}

/// How a worker stands in the shared presence, as this worker last saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Standing {
    /// Its heartbeat moved within `lease_duration`.
    Live,
    /// Its heartbeat stood still for `lease_duration` or longer: its leases may be given away.
    Gone,
    /// Its row was there at this worker's first listing and has not moved since, for less than
    /// `lease_duration`: it may be alive.
    InDoubt,
    /// It has no row in the last listing (or nothing was listed yet).
    Absent,
}

/// A member's handle on its shared presence's validity, published in
/// [`super::HeldLeases::presence_validity`]; equal when it is the same presence.
#[derive(Clone)]
pub struct PresenceValidity(pub Arc<SharedPresence>);

impl PresenceValidity {
    /// As [`SharedPresence::valid_until`].
    pub fn valid_until(&self) -> Option<Instant> {
        self.0.valid_until()
    }
}

impl PartialEq for PresenceValidity {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for PresenceValidity {}

impl std::fmt::Debug for PresenceValidity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("PresenceValidity")
            .field(&self.0.channel())
            .finish()
    }
}

/// The presence of one worker in one channel that runs as member channels, shared by the
/// lease managers of its members on this worker ([`super::LeaseManager::with_shared_presence`]).
/// Run it with [`SharedPresence::run`].
#[derive(Debug)]
pub struct SharedPresence {
    channel: String,
    worker_id: String,
    lease_duration: Duration,
    renew_interval: Duration,
    view: Mutex<View>,
    /// Members whose lease manager has not released its leases yet: the row is removed at
    /// shutdown only after they did (or after a bound).
    attached: AtomicUsize,
    /// Committer leases the members released this period to move them to their preferred
    /// worker ([`SharedPresence::allow_committer_move`]).
    committer_moves: AtomicUsize,
    /// Shard hand-offs this worker's members asked for this period
    /// ([`SharedPresence::allow_shard_handoff`]).
    shard_handoffs: AtomicUsize,
}

/// At most this many committer leases a worker's members release per period to move them to
/// their preferred worker ([`SharedPresence::preferred`]): a worker joining a fleet of 1,000
/// tables takes its share of committers over a couple of minutes, not in one period.
pub const COMMITTER_MOVES_PER_PERIOD: usize = 16;

/// At most this many balancing hand-offs of shards a worker's members ask for per period (the
/// members whose committer lease it holds balance their tables' shards): a worker joining or
/// rejoining a fleet of 1,000 tables receives its share over a few periods, instead of every
/// giver flushing and committing a batch of each moved shard at once (fresh review of issue
/// 43: ~1,300 shards asked to move in one period, 1,170 hand-offs timed out on SQLite and fell
/// back to takeovers). Shards of a gone worker are taken at once, not handed off: no budget.
pub const SHARD_HANDOFFS_PER_PERIOD: usize = 64;

impl SharedPresence {
    /// The presence of `worker_id` in channel `channel` (the parent of the members), renewed
    /// every `min(renew_interval, lease_duration / 3)`.
    pub fn new(
        channel: impl Into<String>,
        worker_id: impl Into<String>,
        lease_duration: Duration,
        renew_interval: Duration,
    ) -> Arc<Self> {
        Arc::new(SharedPresence {
            channel: channel.into(),
            worker_id: worker_id.into(),
            lease_duration,
            renew_interval: renew_interval
                .min(lease_duration / 3)
                .max(Duration::from_millis(1)),
            view: Mutex::default(),
            attached: AtomicUsize::new(0),
            committer_moves: AtomicUsize::new(0),
            shard_handoffs: AtomicUsize::new(0),
        })
    }

    /// The channel whose presence rows these are.
    pub fn channel(&self) -> &str {
        &self.channel
    }

    /// The instant the leases of this worker's members stop being valid: the last successful
    /// renewal's send instant + `lease_duration`; `None` before the first one.
    pub fn valid_until(&self) -> Option<Instant> {
        self.view().renewed_at.map(|t| t + self.lease_duration)
    }

    /// How `worker` stands at `now` (see [`Standing`]).
    pub fn standing(&self, worker: &str, now: Instant) -> Standing {
        self.standing_in(&self.view(), worker, now)
    }

    fn standing_in(&self, view: &View, worker: &str, now: Instant) -> Standing {
        let Some(heartbeat) = view.heartbeats.get(worker) else {
            return Standing::Absent;
        };
        let key = worker.to_string();
        let still = view
            .observations
            .still_for(&key, heartbeat, now)
            .unwrap_or_default();
        if still >= self.lease_duration {
            Standing::Gone
        } else if view.observations.has_moved(&key) {
            Standing::Live
        } else {
            Standing::InDoubt
        }
    }

    /// The worker that should hold the committer lease of a member whose balancer ties are
    /// seeded with `seed` ([`super::BalanceParams::tie_seed`]): the first, in that seed's
    /// order, of the workers live at `now` (rendezvous hashing: a worker joining or leaving
    /// moves only the committers it comes first for, and the committers of many tables spread
    /// over the workers). `None` while no worker is seen live.
    pub fn preferred(&self, seed: u64, now: Instant) -> Option<String> {
        let view = self.view();
        view.heartbeats
            .keys()
            .filter(|w| self.standing_in(&view, w, now) == Standing::Live)
            .min_by_key(|w| super::balance::tie_rank(seed, w))
            .cloned()
    }

    /// Whether a member may release its committer lease this period to move it to its
    /// preferred worker: at most [`COMMITTER_MOVES_PER_PERIOD`] a period on this worker.
    pub fn allow_committer_move(&self) -> bool {
        self.committer_moves
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                (n < COMMITTER_MOVES_PER_PERIOD).then_some(n + 1)
            })
            .is_ok()
    }

    /// Whether a member may ask for one more balancing hand-off of a shard this period: at most
    /// [`SHARD_HANDOFFS_PER_PERIOD`] a period on this worker.
    pub fn allow_shard_handoff(&self) -> bool {
        self.shard_handoffs
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                (n < SHARD_HANDOFFS_PER_PERIOD).then_some(n + 1)
            })
            .is_ok()
    }

    /// How long `worker`'s heartbeat has stood still at `now`; `None` when it has no row in
    /// the last listing.
    pub fn still_for(&self, worker: &str, now: Instant) -> Option<Duration> {
        let view = self.view();
        let heartbeat = view.heartbeats.get(worker)?;
        view.observations
            .still_for(&worker.to_string(), heartbeat, now)
    }

    /// Returns once a renewal has succeeded (at once when one has).
    pub async fn renewed(&self) {
        while self.valid_until().is_none() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The notice of this worker's own row in the last listing (`None` before one showed
    /// it): it moves when some member's balancer told one of this worker's members to re-read
    /// its leases.
    pub fn own_notice(&self) -> Option<u64> {
        self.view().own_notice
    }

    /// Whether a listing of the presence rows succeeded yet.
    pub fn has_listed(&self) -> bool {
        self.view().listed
    }

    /// A member's lease manager starts using this presence.
    pub(super) fn attach(&self) {
        self.attached.fetch_add(1, Ordering::SeqCst);
    }

    /// A member's lease manager released its leases (or was dropped without running).
    pub(super) fn detach(&self) {
        let _ = self
            .attached
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1));
    }

    fn view(&self) -> std::sync::MutexGuard<'_, View> {
        self.view.lock().expect("shared presence lock")
    }

    /// One period: renews this worker's row, lists the channel's rows and removes those of
    /// workers gone for long ([`presence_gc_after`]). Failures are logged; the members' leases
    /// stop being valid `lease_duration` after the last renewal that succeeded.
    pub async fn period<S: LeaseStore + ?Sized>(&self, store: &S) {
        self.committer_moves.store(0, Ordering::SeqCst);
        self.shard_handoffs.store(0, Ordering::SeqCst);
        let sent = Instant::now();
        match store.renew_presence(&self.channel, &self.worker_id).await {
            Ok(_) => self.view().renewed_at = Some(sent),
            Err(err) => {
                tracing::warn!(channel = %self.channel, error = %err, "renewing the worker's presence failed; its tables' leases lapse lease_duration after the last renewal")
            }
        }
        let rows: Vec<Presence> = match store.list_presence(&self.channel).await {
            Ok(rows) => rows,
            Err(err) => {
                tracing::warn!(channel = %self.channel, error = %err, "listing the workers' presence failed");
                return;
            }
        };
        let now = Instant::now();
        let stale: Vec<String> = {
            let mut view = self.view();
            view.observations.observe_presence(&rows, now);
            view.heartbeats = rows
                .iter()
                .map(|p| (p.worker.clone(), p.heartbeat))
                .collect();
            view.listed = true;
            view.own_notice = rows
                .iter()
                .find(|p| p.worker == self.worker_id)
                .map(|p| p.notice);
            let gc_after = presence_gc_after(self.lease_duration);
            rows.iter()
                .filter(|p| {
                    view.observations
                        .still_for(&p.worker, &p.heartbeat, now)
                        .is_some_and(|d| d >= gc_after)
                })
                .map(|p| p.worker.clone())
                .collect()
        };
        for worker in stale {
            tracing::info!(channel = %self.channel, worker = %worker, "removing the presence of a worker gone for long");
            if let Err(err) = store.remove_presence(&self.channel, &worker).await {
                tracing::warn!(channel = %self.channel, worker = %worker, error = %err, "removing a gone worker's presence failed; tried again next period");
            }
        }
    }

    /// Runs a period every renew interval until `shutdown`, then waits (at most
    /// `lease_duration`) until every attached member released its leases and removes this
    /// worker's row. Run it in its own task, one per worker per channel, on a store handle
    /// whose calls do not queue behind the members' ([`crate::lease::sql::SqlLeaseStore::presence_lane`]).
    pub async fn run<S: LeaseStore + ?Sized>(
        self: Arc<Self>,
        store: Arc<S>,
        shutdown: CancellationToken,
    ) {
        let mut interval = tokio::time::interval(self.renew_interval);
        interval.set_missed_tick_behavior(MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => break,
                _ = interval.tick() => self.period(store.as_ref()).await,
            }
        }
        // The members release their leases now; until they did, the row keeps them live for
        // the other workers' balancers (renewed meanwhile).
        let deadline = Instant::now() + self.lease_duration;
        while self.attached.load(Ordering::SeqCst) > 0 && Instant::now() < deadline {
            tokio::select! {
                _ = interval.tick() => self.period(store.as_ref()).await,
                _ = tokio::time::sleep(Duration::from_millis(50)) => {}
            }
        }
        if let Err(err) = store.remove_presence(&self.channel, &self.worker_id).await {
            tracing::warn!(channel = %self.channel, error = %err, "removing the worker's presence failed");
        }
    }
}

#[cfg(test)]
#[path = "group_tests.rs"]
mod tests;
