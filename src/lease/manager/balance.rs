//! The balancer's pure half (docs/design.md, "Lease store"): since when a lease or a presence
//! heartbeat stood still on this worker's clock ([`StandingStill`]), and one period's decisions
//! from a listing ([`balance`]). No I/O and no clock of its own: the lease manager feeds both.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::hash::{DefaultHasher, Hash, Hasher};
use std::time::Duration;

use tokio::time::Instant;

use crate::lease::{Lease, LeaseKey, Presence};
use crate::model::{Position, ShardId};

/// Per key, the value last seen and since when it has stood still on *this* worker's
/// monotonic clock: the basis of expiry without synchronised clocks. Used for a lease's
/// `(owner, lease_counter, heartbeat)` ([`Observations`]) and a worker's presence heartbeat
/// ([`PresenceObservations`]).
#[derive(Debug, Clone)]
pub struct StandingStill<K, V> {
    /// Per key: the value, since when it stood still, and whether it is known to be alive:
    /// its value changed under this observer, or the key appeared after this observer's first
    /// listing (it was written since). A key already there at the first listing may belong to
    /// a worker that died long ago.
    by_key: HashMap<K, (V, Instant, bool)>,
    /// Whether a listing was observed before.
    listed_before: bool,
}

impl<K, V> Default for StandingStill<K, V> {
    fn default() -> Self {
        StandingStill {
            by_key: HashMap::new(),
            listed_before: false,
        }
    }
}

impl<K: Eq + Hash + Clone, V: Eq> StandingStill<K, V> {
    /// Records a complete listing taken at `now`: a key whose value differs from the last one
    /// seen (or that is new) stands still from `now`; keys not listed are forgotten.
    pub fn observe(&mut self, listing: impl IntoIterator<Item = (K, V)>, now: Instant) {
        let mut seen = HashMap::with_capacity(self.by_key.len());
        for (key, value) in listing {
            let entry = match self.by_key.remove(&key) {
                Some((old, since, moved)) if old == value => (value, since, moved),
                Some(_) => (value, now, true),
                None => (value, now, self.listed_before),
            };
            seen.insert(key, entry);
        }
        self.by_key = seen;
        self.listed_before = true;
    }

    /// How long `key` has shown `value` on this clock; `None` when it was not seen with it.
    pub fn still_for(&self, key: &K, value: &V, now: Instant) -> Option<Duration> {
        self.by_key
            .get(key)
            .filter(|(seen, _, _)| seen == value)
            .map(|(_, since, _)| now.saturating_duration_since(*since))
    }

    /// Whether `key` is known to be written by a live writer: its value was seen to change, or
    /// it first appeared in a listing after this observer's first one.
    pub fn has_moved(&self, key: &K) -> bool {
        self.by_key.get(key).is_some_and(|(_, _, moved)| *moved)
    }
}

/// What a lease's expiry watches: `(owner, lease_counter, heartbeat)`.
type LeaseStamp = (Option<String>, u64, u64);

fn stamp(lease: &Lease) -> LeaseStamp {
    (lease.owner.clone(), lease.lease_counter, lease.heartbeat)
}

/// Per lease key, since when its `(owner, lease_counter, heartbeat)` stood still.
pub type Observations = StandingStill<LeaseKey, LeaseStamp>;

impl Observations {
    /// Records a complete listing of lease rows taken at `now`.
    pub fn observe_leases(&mut self, leases: &[Lease], now: Instant) {
        self.observe(leases.iter().map(|l| (l.key.clone(), stamp(l))), now);
    }

    /// How long `lease`, exactly as listed, has stood still; `None` when never seen so.
    pub fn lease_still_for(&self, lease: &Lease, now: Instant) -> Option<Duration> {
        self.still_for(&lease.key, &stamp(lease), now)
    }

    /// Whether `lease` is owned and has stood still, exactly as listed, for at least
    /// `lease_duration` of this worker's clock. A lease never observed is not expired.
    pub fn is_expired(&self, lease: &Lease, now: Instant, lease_duration: Duration) -> bool {
        lease.owner.is_some()
            && self
                .lease_still_for(lease, now)
                .is_some_and(|d| d >= lease_duration)
    }
}

/// Per worker, since when its presence heartbeat stood still (the observer's clock).
pub type PresenceObservations = StandingStill<String, u64>;

impl PresenceObservations {
    /// Records a complete listing of presence rows taken at `now`.
    pub fn observe_presence(&mut self, rows: &[Presence], now: Instant) {
        self.observe(rows.iter().map(|p| (p.worker.clone(), p.heartbeat)), now);
    }
}

/// Balancing parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BalanceParams {
    /// How long a presence heartbeat (or an ownerless-presence lease) must stand still before
    /// its shards count as free.
    pub lease_duration: Duration,
    /// At most this many handoffs towards one worker per period (at least one is needed to
    /// ever rebalance).
    pub max_leases_to_steal: usize,
    /// Orders the workers for ties ([`tie_rank`]): when a channel's shards do not divide evenly,
    /// the workers first in this order hold one more. The lease manager seeds it with the
    /// channel's name, so that over the many member channels of a table per topic the extra
    /// shards go to every worker alike, not always to the first worker id (three workers held
    /// 1,878 / 994 / 838 of 1,000 tables × 4 partitions so; fresh review of issue 43).
    pub tie_seed: u64,
    /// Whether each live worker is balanced to its exact share: `active / live` shards, one more
    /// for the first `active % live` workers in the tie order. Member channels (a table per
    /// topic) balance so, so that over many tables the extra shards stay spread over the fleet
    /// (a rejoining worker got only the floor share of every table: 1,000 of 4,000 shards,
    /// against about 1,500 on each of the others). Off: the balancer stops once every worker is
    /// within one shard of the others (fewer moves; a single channel).
    pub exact_shares: bool,
    /// `Some(seed)`: shards go where [`placement`] under `seed` puts them instead of to the
    /// least loaded worker. The lease manager sets it for the members of a routed channel
    /// (`table = "{route}"`, docs/routing.md), seeded with the channel's name: every member
    /// reads the same source partitions, and each member's balancer, computing the same
    /// placement, puts partition S on the same worker, so that a worker reads S once for every
    /// routed table (or not at all) instead of once per table on several workers. `None`:
    /// least loaded ([`balance`]).
    pub placement_seed: Option<u64>,
}

/// A hash of `parts` that every worker computes alike, whatever its build: FNV-1a over each
/// part's length and bytes, then SplitMix64's finalizer (FNV alone spreads names that differ in
/// their last bytes poorly). Tie orders and placements are compared across workers, and a
/// rolling upgrade runs two builds side by side: std's `DefaultHasher` promises no stable
/// output across Rust releases.
fn stable_hash(parts: &[&[u8]]) -> u64 {
    const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;
    let mut h = FNV_OFFSET;
    for part in parts {
        for b in (part.len() as u64).to_le_bytes().iter().chain(part.iter()) {
            h ^= u64::from(*b);
            h = h.wrapping_mul(FNV_PRIME);
        }
    }
    h ^= h >> 30;
    h = h.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h ^= h >> 27;
    h = h.wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^ (h >> 31)
}

/// A seed for [`BalanceParams::tie_seed`] from a channel's name.
pub fn tie_seed_of(channel: &str) -> u64 {
    stable_hash(&[channel.as_bytes()])
}

/// Where `worker` comes among equally loaded workers under `seed`: lower first (a hash of
/// both, then the id, so that the order is total).
pub(super) fn tie_rank(seed: u64, worker: &str) -> (u64, &str) {
    (
        stable_hash(&[&seed.to_le_bytes(), worker.as_bytes()]),
        worker,
    )
}

/// Where `shard` comes in `worker`'s preference under `seed` (rendezvous hashing): higher first.
fn rendezvous(seed: u64, shard: &ShardId, worker: &str) -> u64 {
    stable_hash(&[&seed.to_le_bytes(), shard.0.as_bytes(), worker.as_bytes()])
}

/// Each of `shards` placed on one of the `live` workers, the same on every worker given the
/// same inputs (so members of one routed channel place a shard alike): every worker gets its
/// exact share, `shards / live`, one more for the first `shards % live` workers in
/// `tie_rank` order under `seed`; the (shard, worker) pairs are taken by descending
/// rendezvous hash of (`seed`, shard, worker), and a pair places its shard when the shard is
/// not placed yet and the worker has room. Taken so, best pairs first whatever the shards' key
/// order, most shards keep their worker when one joins or leaves: 12 shards from 3 workers to
/// 4 move 3.8 shards on average where 3 must, at most 6 (300 seeds; the `placement_*` tests;
/// shards taken in key order did no better). Empty when `live` is.
pub fn placement<'a, 'b>(
    seed: u64,
    shards: &[&'a ShardId],
    live: &'b BTreeSet<String>,
) -> BTreeMap<&'a ShardId, &'b str> {
    let mut placed = BTreeMap::new();
    if live.is_empty() {
        return placed;
    }
    let mut order: Vec<&str> = live.iter().map(String::as_str).collect();
    order.sort_by_key(|w| tie_rank(seed, w));
    let (base, extra) = (shards.len() / order.len(), shards.len() % order.len());
    let mut room: BTreeMap<&str, usize> = order
        .into_iter()
        .enumerate()
        .map(|(i, w)| (w, base + usize::from(i < extra)))
        .collect();
    let mut pairs: Vec<(u64, &ShardId, &str)> = shards
        .iter()
        .flat_map(|s| {
            live.iter()
                .map(move |w| (rendezvous(seed, s, w), *s, w.as_str()))
        })
        .collect();
    // Descending hash; ties (practically none) by shard, then worker, so the order is total.
    pairs.sort_by(|x, y| y.0.cmp(&x.0).then(x.1.cmp(y.1)).then(x.2.cmp(y.2)));
    for (_, shard, worker) in pairs {
        if placed.len() == shards.len() {
            break;
        }
        let left = room.get_mut(worker).expect("live");
        if *left == 0 || placed.contains_key(shard) {
            continue;
        }
        *left -= 1;
        placed.insert(shard, worker);
    }
    placed
}

/// One step of the balancer's [`balance`]: both are conditional on the row as listed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Assignment {
    /// Give a free lease (unowned, or its owner is gone) to `to`: a take in `to`'s name.
    Assign {
        /// The lease as listed.
        lease: Lease,
        /// The live worker that gets it.
        to: String,
    },
    /// Ask the lease's live owner to hand it to `to`, for balance.
    Handoff {
        /// The lease as listed.
        lease: Lease,
        /// The live worker that gets it.
        to: String,
    },
}

/// Whether `lease` is a finished shard's (its checkpoint hint is `SHARD_END`).
pub(super) fn is_finished(lease: &Lease) -> bool {
    lease.checkpoint_hint == Some(Position::ShardEnd)
}

/// The shard leases that count: not finished, and every parent finished or without a row.
pub fn active_shards(leases: &[Lease]) -> Vec<&Lease> {
    let shards: HashMap<&ShardId, &Lease> = leases
        .iter()
        .filter_map(|l| l.key.shard_id().map(|s| (s, l)))
        .collect();
    leases
        .iter()
        .filter(|l| l.key.shard_id().is_some())
        .filter(|l| {
            !is_finished(l)
                && l.parents
                    .iter()
                    .all(|p| shards.get(p).is_none_or(|parent| is_finished(parent)))
        })
        .collect()
}

/// A pseudo-random but deterministic order per worker, so the shards handed to one worker are
/// spread over the key space.
fn spread_order(me: &str, key: &LeaseKey) -> u64 {
    let mut h = DefaultHasher::new();
    me.hash(&mut h);
    key.hash(&mut h);
    h.finish()
}

/// The balancer's decisions for one period, from a fresh listing of one channel's `leases`.
///
/// - `live`: the live workers (presence moved within `lease_duration`); empty → no decision.
/// - `gone(lease)`: whether an owned lease whose owner is not live may be given away (its
///   owner's presence stood still for `lease_duration`, or the owner has no presence row and
///   the lease row itself stood still that long). Owned leases that are neither live-owned nor
///   gone are left alone this period.
/// - `moving`: handoffs already asked for (shard → receiver); they count for the receiver.
/// - `assign_free`: `None` when free leases may not be assigned yet (the balancer waits one
///   period after it starts, so that workers starting with it are seen first); otherwise the
///   number of workers whose presence was seen but not yet seen to move (they may be alive:
///   each live worker then takes at most `ceil(active / (live + those))`, and the rest waits a
///   period).
///
/// Free active shards go, in key order, to the least loaded live worker (ties: [`tie_rank`]
/// under `params.tie_seed`).
/// Then, while the most loaded worker holds more than one more than the least loaded (with
/// [`BalanceParams::exact_shares`]: while a worker holds more than its share and another less),
/// the most loaded is asked to hand one shard to the least loaded, at most
/// `max_leases_to_steal` towards one worker per period. The committer lease is not balanced.
///
/// With [`BalanceParams::placement_seed`], by the [`placement`] of the active shards over
/// `live` instead (`balance_by_placement`).
pub fn balance(
    leases: &[Lease],
    live: &BTreeSet<String>,
    gone: &dyn Fn(&Lease) -> bool,
    moving: &BTreeMap<ShardId, String>,
    assign_free: Option<usize>,
    params: &BalanceParams,
) -> Vec<Assignment> {
    if live.is_empty() {
        return Vec::new();
    }
    if let Some(seed) = params.placement_seed {
        return balance_by_placement(seed, leases, live, gone, moving, assign_free, params);
    }
    let mut load: BTreeMap<&str, Vec<&Lease>> =
        live.iter().map(|w| (w.as_str(), Vec::new())).collect();
    let mut incoming: BTreeMap<&str, usize> = BTreeMap::new();
    let mut free: Vec<&Lease> = Vec::new();
    let active = active_shards(leases);
    let active_count = active.len();
    for lease in active {
        let shard = lease.key.shard_id().expect("active leases are shards");
        match lease.owner.as_deref() {
            Some(owner) if live.contains(owner) => match moving.get(shard) {
                Some(to) if live.contains(to) && to != owner => {
                    *incoming.entry(to.as_str()).or_default() += 1;
                }
                _ => load.get_mut(owner).expect("live").push(lease),
            },
            Some(_) if !gone(lease) => {}
            _ => free.push(lease),
        }
    }
    let mut actions = Vec::new();
    let count = |load: &BTreeMap<&str, Vec<&Lease>>, incoming: &BTreeMap<&str, usize>, w: &str| {
        load[w].len() + incoming.get(w).copied().unwrap_or(0)
    };
    let seed = params.tie_seed;
    // Exact shares: each worker's target; the balancer's measure is the count above it.
    let targets: BTreeMap<&str, i64> = if params.exact_shares {
        let mut order: Vec<&str> = live.iter().map(String::as_str).collect();
        order.sort_by_key(|w| tie_rank(seed, w));
        let (base, extra) = (active_count / order.len(), active_count % order.len());
        order
            .into_iter()
            .enumerate()
            .map(|(i, w)| (w, (base + usize::from(i < extra)) as i64))
            .collect()
    } else {
        BTreeMap::new()
    };
    let level = |load: &BTreeMap<&str, Vec<&Lease>>, incoming: &BTreeMap<&str, usize>, w: &str| {
        count(load, incoming, w) as i64 - targets.get(w).copied().unwrap_or(0)
    };
    if let Some(unknown) = assign_free {
        let cap = active_count.div_ceil(live.len() + unknown);
        for lease in free {
            let to = *load
                .keys()
                .min_by_key(|w| (level(&load, &incoming, w), tie_rank(seed, w)))
                .expect("live is not empty");
            if count(&load, &incoming, to) >= cap {
                break;
            }
            actions.push(Assignment::Assign {
                lease: lease.clone(),
                to: to.to_string(),
            });
            *incoming.entry(to).or_default() += 1;
        }
    }
    for leases in load.values_mut() {
        leases.sort_by_key(|l| std::cmp::Reverse(l.key.clone()));
    }
    let mut received: BTreeMap<&str, usize> = BTreeMap::new();
    loop {
        let workers: Vec<&str> = load.keys().copied().collect();
        let Some(most) = workers
            .iter()
            .copied()
            .max_by_key(|w| (level(&load, &incoming, w), tie_rank(seed, w)))
        else {
            break;
        };
        let Some(least) = workers
            .iter()
            .copied()
            .filter(|w| received.get(w).copied().unwrap_or(0) < params.max_leases_to_steal)
            .min_by_key(|w| (level(&load, &incoming, w), tie_rank(seed, w)))
        else {
            break;
        };
        let balanced = match params.exact_shares {
            true => level(&load, &incoming, most) <= 0 || level(&load, &incoming, least) >= 0,
            false => count(&load, &incoming, most) <= count(&load, &incoming, least) + 1,
        };
        if balanced {
            break;
        }
        let from = load.get_mut(most).expect("live");
        // The one of `most`'s shards that comes first in the receiver's spread order.
        let Some(pick) = from
            .iter()
            .enumerate()
            .min_by_key(|(_, l)| spread_order(least, &l.key))
            .map(|(i, _)| i)
        else {
            break;
        };
        let lease = from.remove(pick);
        actions.push(Assignment::Handoff {
            lease: lease.clone(),
            to: least.to_string(),
        });
        *incoming.entry(least).or_default() += 1;
        *received.entry(least).or_default() += 1;
    }
    actions
}

/// [`balance`] by the [`placement`] under `seed`: a free active shard (unowned, or its owner
/// gone) is assigned to its placed worker, within the same cap as [`balance`] while workers are
/// in doubt (it may be placed on a worker in doubt once that one is seen live); a shard held by
/// a live worker other than its placed one is handed to it, unless a handoff of it is already
/// under way, at most `max_leases_to_steal` towards one worker per period. A shard owned by a
/// worker neither live nor gone is left alone, as in [`balance`]. Shards are taken in key
/// order.
fn balance_by_placement(
    seed: u64,
    leases: &[Lease],
    live: &BTreeSet<String>,
    gone: &dyn Fn(&Lease) -> bool,
    moving: &BTreeMap<ShardId, String>,
    assign_free: Option<usize>,
    params: &BalanceParams,
) -> Vec<Assignment> {
    let mut active = active_shards(leases);
    active.sort_by(|x, y| x.key.cmp(&y.key));
    let shards: Vec<&ShardId> = active
        .iter()
        .map(|l| l.key.shard_id().expect("active leases are shards"))
        .collect();
    let target = placement(seed, &shards, live);
    // What each live worker holds or receives, for the cap on free shards.
    let mut held: BTreeMap<&str, usize> = BTreeMap::new();
    for (lease, shard) in active.iter().zip(&shards) {
        let Some(owner) = lease.owner.as_deref().filter(|o| live.contains(*o)) else {
            continue;
        };
        let holder = match moving.get(*shard) {
            Some(to) if live.contains(to) => to.as_str(),
            _ => owner,
        };
        *held.entry(holder).or_default() += 1;
    }
    let cap = assign_free.map(|unknown| active.len().div_ceil(live.len() + unknown));
    let mut received: BTreeMap<&str, usize> = BTreeMap::new();
    let mut actions = Vec::new();
    for (lease, shard) in active.into_iter().zip(shards) {
        let to = target[shard];
        match lease.owner.as_deref() {
            Some(owner) if live.contains(owner) => {
                let received = received.entry(to).or_default();
                if owner == to
                    || moving.contains_key(shard)
                    || *received >= params.max_leases_to_steal
                {
                    continue;
                }
                *received += 1;
                actions.push(Assignment::Handoff {
                    lease: lease.clone(),
                    to: to.to_string(),
                });
            }
            Some(_) if !gone(lease) => {}
            _ => {
                let Some(cap) = cap else { continue };
                let held = held.entry(to).or_default();
                if *held >= cap {
                    continue;
                }
                *held += 1;
                actions.push(Assignment::Assign {
                    lease: lease.clone(),
                    to: to.to_string(),
                });
            }
        }
    }
    actions
}
