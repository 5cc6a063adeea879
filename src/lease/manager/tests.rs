//! Tests of the balancer (pure, with proptests) and of the lease manager over the in-memory store.

use proptest::prelude::*;

use super::*;
use crate::lease::memory::MemoryLeaseStore;
use crate::model::Position;

const INTERVAL: Duration = Duration::from_secs(3);
const DURATION: Duration = Duration::from_secs(9);

fn params(max_leases_to_steal: usize) -> BalanceParams {
    BalanceParams {
        lease_duration: DURATION,
        max_leases_to_steal,
        tie_seed: 0,
        exact_shares: false,
        placement_seed: None,
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

fn live(ids: &[&str]) -> BTreeSet<String> {
    ids.iter().map(|s| s.to_string()).collect()
}

/// (shard, receiver) of every assignment and every handoff, separately.
type Split = (Vec<(String, String)>, Vec<(String, String, String)>);

fn split(plan: &[Assignment]) -> Split {
    let mut assigned = Vec::new();
    let mut handoffs = Vec::new();
    for step in plan {
        match step {
            Assignment::Assign { lease, to } => {
                assigned.push((lease.key.shard_id().unwrap().0.clone(), to.clone()))
            }
            Assignment::Handoff { lease, to } => handoffs.push((
                lease.key.shard_id().unwrap().0.clone(),
                lease.owner.clone().unwrap(),
                to.clone(),
            )),
        }
    }
    (assigned, handoffs)
}

#[test]
fn free_shards_go_to_the_least_loaded_live_worker() {
    let leases = world(&[Some("a"), None, None, None, None, Some("b"), Some("b")]);
    let plan = balance(
        &leases,
        &live(&["a", "b"]),
        &|_| false,
        &BTreeMap::new(),
        Some(0),
        &params(1),
    );
    let (assigned, handoffs) = split(&plan);
    // a 1, b 2: each free one goes to the least loaded, ties to the first in the seed's order.
    let (first, other) = match balance::tie_rank(0, "a") < balance::tie_rank(0, "b") {
        true => ("a", "b"),
        false => ("b", "a"),
    };
    assert_eq!(
        assigned,
        [("1", "a"), ("2", first), ("3", other), ("4", first)]
            .map(|(s, w)| (s.to_string(), w.to_string()))
    );
    assert!(handoffs.is_empty());
    // The committer lease is never balanced.
    assert!(plan.iter().all(|p| !matches!(p, Assignment::Assign { lease, .. } | Assignment::Handoff { lease, .. } if lease.key == LeaseKey::Committer)));
}

#[test]
fn nothing_is_assigned_before_the_balancer_saw_its_fleet_or_without_live_workers() {
    let leases = world(&[None, None]);
    assert!(balance(
        &leases,
        &live(&["a"]),
        &|_| true,
        &BTreeMap::new(),
        None,
        &params(1)
    )
    .is_empty());
    assert!(balance(
        &leases,
        &BTreeSet::new(),
        &|_| true,
        &BTreeMap::new(),
        Some(0),
        &params(1)
    )
    .is_empty());
}

#[test]
fn a_dead_owners_shards_are_free_only_once_gone() {
    let leases = world(&[Some("dead"), Some("dead"), Some("a")]);
    let not_yet = balance(
        &leases,
        &live(&["a", "b"]),
        &|_| false,
        &BTreeMap::new(),
        Some(0),
        &params(1),
    );
    // Neither live-owned nor gone: left alone; a 1 and b 0 are balanced.
    assert!(not_yet.is_empty(), "{not_yet:?}");
    let gone = balance(
        &leases,
        &live(&["a", "b"]),
        &|l| l.is_owned_by("dead"),
        &BTreeMap::new(),
        Some(0),
        &params(1),
    );
    let (assigned, _) = split(&gone);
    assert_eq!(assigned.len(), 2);
    assert!(
        assigned.iter().all(|(_, to)| to == "b")
            || assigned.iter().filter(|(_, to)| to == "b").count() == 1
    );
}

#[test]
fn handoffs_even_out_the_fleet_and_stop_at_max_minus_min_at_most_one() {
    let (a, b, c) = (Some("a"), Some("b"), Some("c"));
    let handoffs = |owners: &[Option<&str>], max: usize| {
        split(&balance(
            &world(owners),
            &live(&["a", "b", "c"]),
            &|_| false,
            &BTreeMap::new(),
            Some(0),
            &params(max),
        ))
        .1
    };
    // a 5, b 3, c 0: one towards c per period with max 1...
    let one = handoffs(&[a, a, a, a, a, b, b, b], 1);
    assert_eq!(one.len(), 1);
    assert_eq!((one[0].1.as_str(), one[0].2.as_str()), ("a", "c"));
    // ...and with max 3: a→c, then a/b→c until 3-3-2.
    let three = handoffs(&[a, a, a, a, a, b, b, b], 3);
    assert_eq!(three.len(), 2);
    assert!(three.iter().all(|(_, _, to)| to == "c"));
    // Balanced fleets do not move.
    assert!(handoffs(&[a, a, b, b, c], 3).is_empty());
    assert!(handoffs(&[a, a, a, b, b, c, c, c], 3).is_empty());
    assert!(handoffs(&[a, a, a, a], 0).is_empty());
}

#[test]
fn a_handoff_in_flight_counts_for_its_receiver_and_is_not_asked_twice() {
    let (a, b) = (Some("a"), Some("b"));
    let leases = world(&[a, a, a, a]);
    let moving = BTreeMap::from([(ShardId("3".into()), "b".to_string())]);
    let plan = balance(
        &leases,
        &live(&["a", "b"]),
        &|_| false,
        &moving,
        Some(0),
        &params(5),
    );
    let (_, handoffs) = split(&plan);
    // a 3 (one leaving), b 0 + 1 incoming: one more towards b, never shard 3 again.
    assert_eq!(handoffs.len(), 1);
    assert_ne!(handoffs[0].0, "3");
    let _ = b;
}

#[test]
fn child_shard_waits_for_every_parent_to_reach_shard_end() {
    let mut p1 = lease(LeaseKey::shard("p1"), None);
    let mut p2 = lease(LeaseKey::shard("p2"), None);
    let mut child = lease(LeaseKey::shard("child"), None);
    child.parents = vec![ShardId("p1".into()), ShardId("p2".into())];
    let mut orphan = lease(LeaseKey::shard("orphan"), None);
    orphan.parents = vec![ShardId("trimmed".into())];
    let run = |leases: &[Lease]| {
        let mut keys: Vec<String> = split(&balance(
            leases,
            &live(&["a"]),
            &|_| true,
            &BTreeMap::new(),
            Some(0),
            &params(1),
        ))
        .0
        .into_iter()
        .map(|(s, _)| s)
        .collect();
        keys.sort();
        keys
    };
    let all = |p1: &Lease, p2: &Lease| vec![p1.clone(), p2.clone(), child.clone(), orphan.clone()];
    assert_eq!(run(&all(&p1, &p2)), ["orphan", "p1", "p2"]);
    p1.checkpoint_hint = Some(Position::ShardEnd);
    assert_eq!(run(&all(&p1, &p2)), ["orphan", "p2"]);
    p2.checkpoint_hint = Some(Position::ShardEnd);
    assert_eq!(run(&all(&p1, &p2)), ["child", "orphan"]);
}

#[test]
fn a_heartbeat_or_counter_change_restarts_the_expiry_clock() {
    let mut leases = world(&[Some("b")]);
    let mut obs = Observations::default();
    let t0 = Instant::now();
    obs.observe_leases(&leases, t0);
    assert!(!obs.is_expired(&leases[0], t0, DURATION));
    leases[0].heartbeat += 1;
    obs.observe_leases(&leases, t0 + DURATION - Duration::from_secs(1));
    assert!(!obs.is_expired(&leases[0], t0 + DURATION, DURATION));
    assert!(obs.is_expired(
        &leases[0],
        t0 + DURATION * 2 - Duration::from_secs(1),
        DURATION
    ));
    leases[0].lease_counter += 1;
    obs.observe_leases(&leases, t0 + DURATION * 2);
    assert!(!obs.is_expired(&leases[0], t0 + DURATION * 2, DURATION));
    let mut other = leases[0].clone();
    other.heartbeat += 5;
    assert!(!obs.is_expired(&other, t0 + DURATION * 10, DURATION));
    assert!(!obs.is_expired(&lease(LeaseKey::shard("9"), None), t0, DURATION));
}

#[test]
fn presence_stands_still_from_the_first_sighting_of_its_heartbeat() {
    let row = |hb| Presence {
        channel: "c".into(),
        worker: "w".into(),
        heartbeat: hb,
        notice: 0,
        handoffs: BTreeMap::new(),
    };
    let mut obs = PresenceObservations::default();
    let t0 = Instant::now();
    let w = "w".to_string();
    obs.observe_presence(&[row(1)], t0);
    obs.observe_presence(&[row(1)], t0 + INTERVAL);
    assert_eq!(obs.still_for(&w, &1, t0 + INTERVAL), Some(INTERVAL));
    // Asked about another heartbeat than the one seen: not standing still.
    assert_eq!(obs.still_for(&w, &2, t0 + INTERVAL), None);
    obs.observe_presence(&[row(2)], t0 + INTERVAL * 2);
    assert_eq!(
        obs.still_for(&w, &2, t0 + INTERVAL * 2),
        Some(Duration::ZERO)
    );
    obs.observe_presence(&[], t0 + INTERVAL * 3);
    assert_eq!(obs.still_for(&w, &2, t0 + INTERVAL * 3), None);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    /// From any assignment (live, unowned, or held by a gone worker), any number of shards
    /// and workers, repeated balancing with every handoff carried out converges to
    /// max − min ≤ 1 with every shard held by a live worker, then plans nothing (no
    /// flapping).
    #[test]
    fn balancing_converges_to_an_even_spread_and_stays_there(
        num_workers in 1usize..=6,
        initial in proptest::collection::vec(0usize..8, 1..=24),
        max_steal in 1usize..=3,
    ) {
        let workers: Vec<String> = (0..num_workers).map(|i| format!("w{i}")).collect();
        let alive: BTreeSet<String> = workers.iter().cloned().collect();
        let owner_of = |i: usize| match i % (num_workers + 2) {
            i if i < num_workers => Some(workers[i].clone()),
            i if i == num_workers => None,
            _ => Some("dead".to_string()),
        };
        let mut table: Vec<Lease> = initial
            .iter()
            .enumerate()
            .map(|(i, o)| {
                let mut l = lease(LeaseKey::shard(format!("s{i:02}")), None);
                l.owner = owner_of(*o);
                l
            })
            .collect();
        let mut quiet_rounds = 0;
        for _ in 0..(4 + 2 * initial.len()) {
            let plan = balance(&table, &alive, &|l| l.is_owned_by("dead"), &BTreeMap::new(), Some(0), &params(max_steal));
            if plan.is_empty() {
                quiet_rounds += 1;
            }
            for step in plan {
                let (Assignment::Assign { lease, to } | Assignment::Handoff { lease, to }) = step;
                let row = table.iter_mut().find(|l| l.key == lease.key).unwrap();
                prop_assert_eq!(&*row, &lease, "planned on the row as listed");
                row.owner = Some(to);
                row.lease_counter += 1;
            }
        }
        let loads: Vec<usize> = workers.iter().map(|w| table.iter().filter(|l| l.is_owned_by(w)).count()).collect();
        let (max, min) = (*loads.iter().max().unwrap(), *loads.iter().min().unwrap());
        prop_assert!(max - min <= 1, "loads {:?}", loads);
        prop_assert_eq!(loads.iter().sum::<usize>(), initial.len());
        prop_assert!(quiet_rounds >= 1);
        let again = balance(&table, &alive, &|l| l.is_owned_by("dead"), &BTreeMap::new(), Some(0), &params(max_steal));
        prop_assert!(again.is_empty(), "still moving after convergence: {:?}", again);
    }
}

fn manager_on<S: LeaseStore>(store: &Arc<S>, worker: &str) -> LeaseManager<S> {
    let mut config = LeaseManagerConfig::new("c", worker, DURATION);
    config.renew_interval = INTERVAL;
    LeaseManager::new(store.clone(), config)
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

/// What the balancer does to ask `from` to hand `shard` to `to` (whose presence it creates).
async fn ask_handoff(store: &MemoryLeaseStore, from: &str, shard: &str, to: &str) {
    store.renew_presence("c", to).await.unwrap();
    let handoffs = BTreeMap::from([(ShardId(shard.into()), to.to_string())]);
    store.notify_worker("c", from, &handoffs).await.unwrap();
}

/// Ticks `m` `n` times, one period apart.
async fn periods(m: &mut LeaseManager<MemoryLeaseStore>, n: usize) {
    for _ in 0..n {
        m.tick().await.unwrap();
        tokio::time::advance(INTERVAL).await;
    }
}

/// Found by the fleet simulation (rolling_restart took 4.75 periods per batch): a worker
/// that joined or restarted while the balancer ran waited a period to be seen moving, as
/// if its row might be a dead one; a row that appears after the balancer's first listing
/// was written since, so it is live at once.
#[tokio::test(start_paused = true)]
async fn a_presence_row_that_appears_after_the_first_listing_is_live_at_once() {
    let mut seen = PresenceObservations::default();
    let t0 = Instant::now();
    seen.observe([("old".to_string(), 7u64)], t0);
    assert!(!seen.has_moved(&"old".to_string()));
    seen.observe([("old".to_string(), 7), ("new".to_string(), 1)], t0);
    assert!(seen.has_moved(&"new".to_string()), "appeared since: live");
    assert!(!seen.has_moved(&"old".to_string()), "still in doubt");
    seen.observe([("old".to_string(), 8), ("new".to_string(), 1)], t0);
    assert!(seen.has_moved(&"old".to_string()));
}

/// Found by the fleet break test: a newly elected balancer counted the presence row left
/// by a SIGKILLed worker as live (first sighting) and handed it shards.
#[tokio::test(start_paused = true)]
async fn a_balancer_gives_nothing_to_a_presence_row_it_never_saw_move() {
    let store = store_with_shards(4).await;
    // A worker killed long ago left its row behind.
    store.renew_presence("c", "dead").await.unwrap();
    let mut a = manager(&store, "a");
    periods(&mut a, 3).await;
    // It might be alive: a takes its share only (4 / 2), the rest waits; nothing goes to it.
    assert_eq!(a.held().shards.len(), 2);
    let rows = store.list_leases("c").await.unwrap();
    assert!(rows.iter().all(|l| !l.is_owned_by("dead")), "{rows:?}");
    // Once the row stood still for lease_duration it is gone: a takes the rest.
    periods(&mut a, 4).await;
    assert_eq!(a.held().shards.len(), 4);
    let rows = store.list_leases("c").await.unwrap();
    assert!(rows.iter().all(|l| !l.is_owned_by("dead")), "{rows:?}");
}

/// Issue 35: a worker started alone after its peer (the balancer, holding every shard) was
/// SIGKILLed held the shards only 1.5 × lease_duration after it started: it began watching
/// the presence rows once the committer lease had stood still for a period and a half, so
/// the dead row stood still for lease_duration only half a lease_duration after the
/// committer lease was taken. Watching from its first period, it holds every shard within
/// lease_duration + 2 periods of its start (docs/operations.md, "Running several workers").
#[tokio::test(start_paused = true)]
async fn a_lone_worker_after_a_sigkilled_balancer_holds_every_shard_within_lease_duration() {
    let store = store_with_shards(4).await;
    let mut dead = manager(&store, "dead");
    periods(&mut dead, 4).await;
    assert_eq!(dead.held().shards.len(), 4);
    assert!(dead.held().committer.is_some());
    // SIGKILL: it never ticks again, and its presence row and leases stay.
    drop(dead);
    tokio::time::advance(INTERVAL).await;
    let started = Instant::now();
    let mut lone = manager(&store, "lone");
    while lone.held().shards.len() < 4 {
        assert!(
            started.elapsed() <= DURATION + INTERVAL * 2,
            "holds {} shards {:?} after its start",
            lone.held().shards.len(),
            started.elapsed()
        );
        lone.tick().await.unwrap();
        tokio::time::advance(INTERVAL).await;
    }
    assert!(lone.held().committer.is_some());
    let rows = store.list_leases("c").await.unwrap();
    assert!(rows.iter().all(|l| !l.is_owned_by("dead")), "{rows:?}");
}

#[tokio::test(start_paused = true)]
async fn a_lone_worker_becomes_balancer_and_takes_every_shard_from_its_second_period() {
    let store = store_with_shards(3).await;
    let mut a = manager(&store, "a");
    a.tick().await.unwrap();
    assert!(a.held().committer.is_some());
    assert!(
        a.held().shards.is_empty(),
        "no shard before the balancer saw its fleet"
    );
    periods(&mut a, 3).await;
    assert_eq!(a.held().shards.len(), 3);
    // Steady state: no lease row is written any more, only the presence and the committer.
    let before = store.list_leases("c").await.unwrap();
    periods(&mut a, 5).await;
    let after = store.list_leases("c").await.unwrap();
    let shard_rows = |rows: &[Lease]| {
        rows.iter()
            .filter(|l| l.key != LeaseKey::Committer)
            .cloned()
            .collect::<Vec<_>>()
    };
    assert_eq!(shard_rows(&before), shard_rows(&after));
}

struct Listed(std::sync::Mutex<Vec<LeaseSpec>>);

#[async_trait::async_trait]
impl ShardDiscovery for Listed {
    async fn shards(&self) -> Result<Vec<LeaseSpec>, String> {
        Ok(self.0.lock().unwrap().clone())
    }
}

/// Issue 17: finished shards' rows were kept forever, so a long-lived stream's lease table
/// (and every listing) grew with every resharding.
#[tokio::test(start_paused = true)]
async fn a_finished_shards_row_is_deleted_once_the_source_no_longer_lists_it() {
    let store = Arc::new(MemoryLeaseStore::new());
    let (p, c) = (LeaseKey::shard("p"), LeaseKey::shard("c"));
    let specs = vec![
        LeaseSpec::new(p.clone()),
        LeaseSpec::new(c.clone()).with_parents(vec![ShardId("p".into())]),
    ];
    store.ensure_leases("c", &specs).await.unwrap();
    store
        .set_checkpoint_hint("c", &p, &Position::ShardEnd)
        .await
        .unwrap();
    let listed = Arc::new(Listed(std::sync::Mutex::new(specs.clone())));
    let mut a = manager(&store, "a").with_discovery(listed.clone(), INTERVAL);
    periods(&mut a, 4).await;
    // Still listed (within the stream's retention): kept, or discovery would recreate it.
    assert!(store.get_lease("c", &p).await.unwrap().is_some());
    assert!(a.held().shards.contains_key(&ShardId("c".into())));
    // Gone from the listing: deleted; the child stays active and held.
    listed.0.lock().unwrap().remove(0);
    periods(&mut a, 2).await;
    assert_eq!(store.get_lease("c", &p).await.unwrap(), None);
    assert!(a.held().shards.contains_key(&ShardId("c".into())));
    // A shard not finished is never deleted, listed or not.
    listed.0.lock().unwrap().clear();
    listed
        .0
        .lock()
        .unwrap()
        .push(LeaseSpec::new(LeaseKey::shard("other")));
    periods(&mut a, 2).await;
    assert!(store.get_lease("c", &c).await.unwrap().is_some());
}

/// A listing whose unlisted shards are gone for good (a Kafka channel reading several
/// topics).
struct TopicsListed(Arc<Listed>);

#[async_trait::async_trait]
impl ShardDiscovery for TopicsListed {
    async fn shards(&self) -> Result<Vec<LeaseSpec>, String> {
        self.0.shards().await
    }

    fn unlisted_shards_are_gone(&self) -> bool {
        true
    }
}

/// Issue 32: a topic deleted from a channel reading several topics leaves the listing; its
/// partitions' rows are deleted, held or not, and the holder drops them as lost (its reader
/// stops), while the other topics' shards stay held. A topic recreated under the same name
/// gets rows again (its checkpoints, in the table, decide where it resumes).
#[tokio::test(start_paused = true)]
async fn the_held_shards_of_a_deleted_topic_lose_their_rows_and_are_dropped() {
    let store = Arc::new(MemoryLeaseStore::new());
    let specs: Vec<LeaseSpec> = ["a:0", "a:1", "b:0"]
        .iter()
        .map(|s| LeaseSpec::new(LeaseKey::shard(*s)))
        .collect();
    store.ensure_leases("c", &specs).await.unwrap();
    let listed = Arc::new(Listed(std::sync::Mutex::new(specs.clone())));
    let discovery = Arc::new(TopicsListed(listed.clone()));
    let mut a = manager(&store, "a").with_discovery(discovery, INTERVAL);
    periods(&mut a, 4).await;
    let held = |m: &LeaseManager<MemoryLeaseStore>| -> Vec<String> {
        m.held().shards.keys().map(|s| s.0.clone()).collect()
    };
    assert_eq!(held(&a), ["a:0", "a:1", "b:0"]);
    // Topic a deleted.
    listed
        .0
        .lock()
        .unwrap()
        .retain(|s| s.key == LeaseKey::shard("b:0"));
    periods(&mut a, 3).await;
    assert_eq!(held(&a), ["b:0"]);
    for gone in ["a:0", "a:1"] {
        assert_eq!(
            store.get_lease("c", &LeaseKey::shard(gone)).await.unwrap(),
            None
        );
    }
    // Recreated.
    listed
        .0
        .lock()
        .unwrap()
        .push(LeaseSpec::new(LeaseKey::shard("a:0")));
    periods(&mut a, 4).await;
    assert_eq!(held(&a), ["a:0", "b:0"]);
}

/// Found by the multi-process test (tests/it/aws_kafka.rs): a balancer that assigned shards to
/// itself in its last period, before its worker side read them, stopped with those rows
/// still in its name; they waited a lease_duration for the next balancer.
#[tokio::test(start_paused = true)]
async fn release_all_frees_rows_assigned_to_the_worker_since_its_last_sync() {
    let store = store_with_shards(3).await;
    let mut a = manager(&store, "a");
    periods(&mut a, 2).await;
    // The balancer has assigned every shard to a; a reads them at its next period.
    assert!(a.held().shards.is_empty());
    let rows = store.list_leases("c").await.unwrap();
    assert_eq!(
        rows.iter().filter(|l| l.is_owned_by("a")).count(),
        4,
        "{rows:?}"
    );
    a.release_all().await;
    let rows = store.list_leases("c").await.unwrap();
    assert!(rows.iter().all(|l| l.owner.is_none()), "{rows:?}");
    assert!(store.list_presence("c").await.unwrap().is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_lease_taken_behind_a_workers_back_leaves_at_its_next_notice() {
    let store = store_with_shards(2).await;
    let mut a = manager(&store, "a");
    periods(&mut a, 3).await;
    assert_eq!(a.held().shards.len(), 2);
    let row = store
        .get_lease("c", &LeaseKey::shard("0"))
        .await
        .unwrap()
        .unwrap();
    store.take_lease(&row, "b").await.unwrap();
    store
        .notify_worker("c", "a", &BTreeMap::new())
        .await
        .unwrap();
    a.tick().await.unwrap();
    assert_eq!(
        a.held().shards.keys().cloned().collect::<Vec<_>>(),
        vec![ShardId("1".into())]
    );
}

#[tokio::test(start_paused = true)]
async fn a_handoff_stops_publishing_then_writes_the_new_owner() {
    let store = store_with_shards(2).await;
    let mut a = manager(&store, "a");
    periods(&mut a, 3).await;
    let rx = a.subscribe();
    ask_handoff(&store, "a", "1", "b").await;
    a.tick().await.unwrap();
    assert_eq!(
        rx.borrow().shards.keys().cloned().collect::<Vec<_>>(),
        vec![ShardId("0".into())]
    );
    let row = store
        .get_lease("c", &LeaseKey::shard("1"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!((row.owner.as_deref(), row.lease_counter), (Some("b"), 2));
}

/// Issue 33: a graceful hand-off keeps the shard (published as handing off) until the worker
/// says what it read of it is committed, then writes the new owner at once.
#[tokio::test(start_paused = true)]
async fn a_graceful_handoff_waits_for_the_worker_then_moves() {
    let store = store_with_shards(2).await;
    let mut a = manager(&store, "a").with_handoff_wait(DURATION);
    let replies = a.handoff_replies();
    periods(&mut a, 3).await;
    let rx = a.subscribe();
    ask_handoff(&store, "a", "1", "b").await;
    a.tick().await.unwrap();
    let one = ShardId("1".into());
    assert!(rx.borrow().shards.contains_key(&one), "still held");
    assert_eq!(rx.borrow().handing_off, BTreeSet::from([one.clone()]));
    let owner = |store: Arc<MemoryLeaseStore>| async move {
        let row = store.get_lease("c", &LeaseKey::shard("1")).await.unwrap();
        row.unwrap().owner
    };
    assert_eq!(owner(store.clone()).await.as_deref(), Some("a"));
    tokio::time::advance(INTERVAL).await;
    a.tick().await.unwrap();
    assert_eq!(owner(store.clone()).await.as_deref(), Some("a"), "waits");
    replies.set_ready(BTreeSet::from([one.clone()]));
    a.complete_handoffs().await;
    a.publish();
    assert_eq!(owner(store.clone()).await.as_deref(), Some("b"));
    assert!(!rx.borrow().shards.contains_key(&one));
    assert!(rx.borrow().handing_off.is_empty());
}

/// Issue 33: a worker that does not answer (stalled, or its batches not committed) holds a
/// move up for the hand-off wait at most; then the shard moves as before.
#[tokio::test(start_paused = true)]
async fn a_graceful_handoff_moves_anyway_once_its_wait_runs_out() {
    let store = store_with_shards(2).await;
    let wait = INTERVAL * 2;
    let mut a = manager(&store, "a").with_handoff_wait(wait);
    let _replies = a.handoff_replies();
    periods(&mut a, 3).await;
    ask_handoff(&store, "a", "1", "b").await;
    let asked = Instant::now();
    let mut moved_after = None;
    for _ in 0..5 {
        a.tick().await.unwrap();
        let row = store.get_lease("c", &LeaseKey::shard("1")).await.unwrap();
        if row.unwrap().owner.as_deref() == Some("b") {
            moved_after = Some(asked.elapsed());
            break;
        }
        tokio::time::advance(INTERVAL).await;
    }
    let moved_after = moved_after.expect("never moved");
    assert!(
        moved_after >= wait && moved_after <= wait + INTERVAL,
        "moved after {moved_after:?} (wait {wait:?})"
    );
    assert!(!a.held().shards.contains_key(&ShardId("1".into())));
}

#[tokio::test(start_paused = true)]
async fn shards_are_dropped_the_instant_the_presence_validity_ends() {
    let store = store_with_shards(2).await;
    // Periods of 2 s against a 9 s lease: the validity ends between two periods.
    let mut config = LeaseManagerConfig::new("c", "a", DURATION);
    config.renew_interval = Duration::from_secs(2);
    let a = LeaseManager::new(store.clone(), config);
    let rx = a.subscribe();
    let token = CancellationToken::new();
    let task = tokio::spawn(a.run(token.clone()));
    tokio::time::sleep(Duration::from_secs(6)).await;
    assert_eq!(rx.borrow().shards.len(), 2);
    // The last renewal was sent at 6 s; the outage starts just after it.
    let last_renewal = Instant::now();
    tokio::time::sleep(Duration::from_millis(200)).await;
    store.set_unavailable(true);
    let mut rx2 = rx.clone();
    rx2.borrow_and_update();
    rx2.changed().await.unwrap();
    assert!(rx.borrow().shards.is_empty());
    // Dropped at last renewal + lease_duration (15 s), not at the next period (16 s).
    assert_eq!(Instant::now() - last_renewal, DURATION);
    store.set_unavailable(false);
    token.cancel();
    task.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_restarted_worker_releases_what_it_finds_in_its_name_instead_of_holding_it() {
    let store = store_with_shards(2).await;
    let mut a = manager(&store, "a");
    periods(&mut a, 3).await;
    assert_eq!(a.held().shards.len(), 2);
    drop(a); // crash: nothing released
    let mut again = manager(&store, "a");
    again.tick().await.unwrap();
    assert!(again.held().shards.is_empty());
    let rows = store.list_leases("c").await.unwrap();
    assert!(rows.iter().all(|l| l.owner.is_none()), "{rows:?}");
    // Then the balancer (this worker again) hands them out afresh, under new counters.
    periods(&mut again, 4).await;
    assert_eq!(again.held().shards.len(), 2);
    assert!(again.held().shards.values().all(|l| l.lease_counter == 3));
}

#[tokio::test(start_paused = true)]
async fn a_draining_manager_takes_nothing_new() {
    let store = store_with_shards(4).await;
    let mut m = manager(&store, "w1");
    m.drain_switch().store(true, Ordering::SeqCst);
    periods(&mut m, 3).await;
    assert!(m.held().shards.is_empty() && m.held().committer.is_none());
    m.drain_switch().store(false, Ordering::SeqCst);
    periods(&mut m, 3).await;
    assert_eq!(m.held().shards.len(), 4);
}

#[tokio::test(start_paused = true)]
async fn shutdown_releases_every_lease_and_the_presence_at_once() {
    let store = store_with_shards(3).await;
    let a = manager(&store, "a");
    let rx = a.subscribe();
    let token = CancellationToken::new();
    let task = tokio::spawn(a.run(token.clone()));
    tokio::time::sleep(INTERVAL * 2 + INTERVAL / 2).await;
    assert_eq!(rx.borrow().shards.len(), 3);
    token.cancel();
    task.await.unwrap();
    assert_eq!(*rx.borrow(), HeldLeases::default());
    for l in store.list_leases("c").await.unwrap() {
        assert_eq!(l.owner, None, "{}", l.key);
    }
    assert!(store.list_presence("c").await.unwrap().is_empty());
}

/// A departing worker released its leases and only then removed its presence row: a
/// balancer period in between still saw it live and could assign a released shard straight
/// back to it, where it waited a lease_duration. It now removes its presence first.
#[tokio::test(start_paused = true)]
async fn a_departing_worker_is_given_nothing_back_by_a_balancer_acting_meanwhile() {
    let inner = store_with_shards(2).await;
    let a: SharedManager = Arc::new(tokio::sync::Mutex::new(manager(&inner, "a")));
    let store = Arc::new(FailTakes::new(&inner));
    let mut config = LeaseManagerConfig::new("c", "w", DURATION);
    config.renew_interval = INTERVAL;
    let mut w = LeaseManager::new(store.clone(), config);
    a.lock().await.tick().await.unwrap();
    for _ in 0..8 {
        w.tick().await.unwrap();
        a.lock().await.tick().await.unwrap();
        tokio::time::advance(INTERVAL).await;
    }
    assert_eq!(w.held().shards.len(), 1, "balanced: one shard each");
    // The balancer acts while w shuts down, on what it listed before w's rows changed.
    *store.tick_after_list.lock().unwrap() = Some(a.clone());
    w.release_all().await;
    for _ in 0..2 {
        tokio::time::advance(INTERVAL).await;
        a.lock().await.tick().await.unwrap();
    }
    let rows = inner.list_leases("c").await.unwrap();
    assert!(rows.iter().all(|l| !l.is_owned_by("w")), "{rows:?}");
    assert_eq!(a.lock().await.held().shards.len(), 2, "{rows:?}");
}

/// The memory store, whose next `fail_takes` lease takes fail as unavailable (the outcome of
/// a write the network lost).
struct FailTakes {
    inner: Arc<MemoryLeaseStore>,
    fail_takes: std::sync::atomic::AtomicUsize,
    /// When set, the next lease listing runs one period of this (other) manager after it
    /// read the rows and before it returns them: a balancer acting on a stale view.
    tick_after_list: std::sync::Mutex<Option<SharedManager>>,
    /// While set, presence and lease renewals never return (a call stuck in a starved pool).
    hang_renewals: AtomicBool,
}

impl FailTakes {
    fn new(inner: &Arc<MemoryLeaseStore>) -> Self {
        FailTakes {
            inner: inner.clone(),
            fail_takes: 0.into(),
            tick_after_list: Default::default(),
            hang_renewals: false.into(),
        }
    }

    async fn hang_if_asked(&self) {
        if self.hang_renewals.load(Ordering::SeqCst) {
            std::future::pending::<()>().await;
        }
    }
}

type SharedManager = Arc<tokio::sync::Mutex<LeaseManager<MemoryLeaseStore>>>;

#[async_trait]
impl LeaseStore for FailTakes {
    async fn ensure_leases(&self, c: &str, s: &[LeaseSpec]) -> Result<(), LeaseError> {
        self.inner.ensure_leases(c, s).await
    }
    async fn list_leases(&self, c: &str) -> Result<Vec<Lease>, LeaseError> {
        let rows = self.inner.list_leases(c).await;
        let other = self.tick_after_list.lock().unwrap().take();
        if let Some(other) = other {
            other.lock().await.tick().await?;
        }
        rows
    }
    async fn take_lease(&self, l: &Lease, w: &str) -> Result<Lease, LeaseError> {
        let left = self.fail_takes.load(Ordering::SeqCst);
        if left > 0 && l.key != LeaseKey::Committer {
            self.fail_takes.store(left - 1, Ordering::SeqCst);
            return Err(LeaseError::Unavailable {
                message: "simulated timeout".into(),
            });
        }
        self.inner.take_lease(l, w).await
    }
    async fn renew_lease(&self, l: &Lease) -> Result<Lease, LeaseError> {
        self.hang_if_asked().await;
        self.inner.renew_lease(l).await
    }
    async fn release_lease(&self, l: &Lease) -> Result<(), LeaseError> {
        self.inner.release_lease(l).await
    }
    async fn delete_lease(&self, l: &Lease) -> Result<(), LeaseError> {
        self.inner.delete_lease(l).await
    }
    async fn get_lease(&self, c: &str, k: &LeaseKey) -> Result<Option<Lease>, LeaseError> {
        self.inner.get_lease(c, k).await
    }
    async fn renew_presence(&self, c: &str, w: &str) -> Result<Presence, LeaseError> {
        self.hang_if_asked().await;
        self.inner.renew_presence(c, w).await
    }
    async fn list_presence(&self, c: &str) -> Result<Vec<Presence>, LeaseError> {
        self.inner.list_presence(c).await
    }
    async fn notify_worker(
        &self,
        c: &str,
        w: &str,
        h: &BTreeMap<ShardId, String>,
    ) -> Result<(), LeaseError> {
        self.inner.notify_worker(c, w, h).await
    }
    async fn remove_presence(&self, c: &str, w: &str) -> Result<(), LeaseError> {
        self.inner.remove_presence(c, w).await
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
async fn a_handoff_whose_write_failed_is_retried_next_period_without_a_new_notice() {
    let inner = store_with_shards(2).await;
    let store = Arc::new(FailTakes::new(&inner));
    // "boss" holds the committer lease (and would balance): the test plays it by hand.
    inner
        .ensure_leases("c", &[LeaseSpec::new(LeaseKey::Committer)])
        .await
        .unwrap();
    let committer = inner
        .get_lease("c", &LeaseKey::Committer)
        .await
        .unwrap()
        .unwrap();
    let mut boss = inner.take_lease(&committer, "boss").await.unwrap();
    let mut a = manager_on(&store, "a");
    a.tick().await.unwrap();
    for key in ["0", "1"] {
        let row = inner
            .get_lease("c", &LeaseKey::shard(key))
            .await
            .unwrap()
            .unwrap();
        inner.take_lease(&row, "a").await.unwrap();
    }
    inner
        .notify_worker("c", "a", &BTreeMap::new())
        .await
        .unwrap();
    boss = inner.renew_lease(&boss).await.unwrap();
    tokio::time::advance(INTERVAL).await;
    a.tick().await.unwrap();
    assert_eq!(a.held().shards.len(), 2);
    assert!(a.held().committer.is_none());

    ask_handoff(&inner, "a", "1", "b").await;
    store.fail_takes.store(1, Ordering::SeqCst);
    boss = inner.renew_lease(&boss).await.unwrap();
    tokio::time::advance(INTERVAL).await;
    a.tick().await.unwrap();
    let row = inner
        .get_lease("c", &LeaseKey::shard("1"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        row.owner.as_deref(),
        Some("a"),
        "the failed write changed nothing"
    );
    assert!(!a.held().shards.contains_key(&ShardId("1".into())));
    // No new notice: the worker reads its leases again because the write failed.
    inner.renew_lease(&boss).await.unwrap();
    tokio::time::advance(INTERVAL).await;
    a.tick().await.unwrap();
    let row = inner
        .get_lease("c", &LeaseKey::shard("1"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        row.owner.as_deref(),
        Some("b"),
        "the handoff was not retried"
    );
    assert_eq!(
        a.held().shards.keys().cloned().collect::<Vec<_>>(),
        vec![ShardId("0".into())]
    );
}

/// Found by the fresh review of issue 43: each member channel of a table per topic balances its
/// own 4 partitions over 3 workers (2 / 1 / 1), and every table gave its extra partition to the
/// first worker id (1,878 / 994 / 838 of 4,000). Seeded by the channel's name, the extras of
/// 300 tables spread over the workers: each holds its fair third within 10% of it, and every
/// table stays within one partition per worker.
#[test]
fn the_extra_shards_of_many_channels_spread_over_the_workers() {
    let workers = live(&["w1", "w2", "w3"]);
    let mut held: BTreeMap<String, usize> = BTreeMap::new();
    for table in 0..300 {
        let channel = format!("many.t{table:04}");
        let plan = balance(
            &world(&[None; 4]),
            &workers,
            &|_| false,
            &BTreeMap::new(),
            Some(0),
            &BalanceParams {
                tie_seed: balance::tie_seed_of(&channel),
                ..params(1)
            },
        );
        let (assigned, _) = split(&plan);
        assert_eq!(assigned.len(), 4, "{channel}: {assigned:?}");
        let mut per_worker: BTreeMap<String, usize> = BTreeMap::new();
        for (_, to) in assigned {
            *per_worker.entry(to.clone()).or_default() += 1;
            *held.entry(to).or_default() += 1;
        }
        assert!(
            per_worker.values().all(|&n| n == 1 || n == 2),
            "{channel}: {per_worker:?}"
        );
    }
    for (worker, n) in &held {
        assert!(
            (360..=440).contains(n),
            "{worker} holds {n} of 1,200: {held:?}"
        );
    }
}

/// Fresh review of issue 43, finding 1: while a period waits on the store (a starved pool) the
/// manager runs no expiry and keeps publishing the committer lease; past its validity the
/// published value says it is not held, so its committer starts no round.
#[tokio::test(start_paused = true)]
async fn a_stuck_manager_publishes_no_valid_committer_lease_past_its_validity() {
    let inner = store_with_shards(1).await;
    let store = Arc::new(FailTakes::new(&inner));
    let mut w = manager_on(&store, "w");
    w.tick().await.unwrap();
    let held = w.subscribe();
    let until = held
        .borrow()
        .committer_valid_until
        .expect("the committer lease is taken");
    // Every renewal from now on waits forever: the next period is stuck in its first call.
    store.hang_renewals.store(true, Ordering::SeqCst);
    let shutdown = CancellationToken::new();
    let run = tokio::spawn(w.run(shutdown.clone()));

    tokio::time::sleep_until(until - Duration::from_millis(1)).await;
    assert!(held.borrow().committer_at(Instant::now()).is_some());
    tokio::time::sleep_until(until).await;
    let published = held.borrow().clone();
    assert!(
        published.committer.is_some(),
        "the stuck manager did not drop it"
    );
    assert_eq!(published.committer_at(Instant::now()), None);
    tokio::time::sleep(DURATION).await;
    assert_eq!(held.borrow().committer_at(Instant::now()), None);
    run.abort();
}

#[tokio::test(start_paused = true)]
async fn a_renewal_moves_the_published_validity_without_waking_receivers() {
    let store = store_with_shards(1).await;
    let mut w = manager(&store, "w");
    w.tick().await.unwrap();
    let mut held = w.subscribe();
    let before = held.borrow_and_update().committer_valid_until.unwrap();
    tokio::time::advance(INTERVAL).await;
    w.tick().await.unwrap();
    assert!(!held.has_changed().unwrap(), "a renewal grants nothing new");
    assert_eq!(
        held.borrow().committer_valid_until,
        Some(before + INTERVAL),
        "the receiver reads the renewed validity"
    );
}

/// Found in the 3-worker × 1,000-table fleet run (issue 43): a worker restarted after the others
/// had split its shards got one shard of every table (within one of the others, so balanced
/// per table) and ended with 1,000 of 4,000 against about 1,500 each. With exact shares (member
/// channels), each table moves shards until every worker holds its seeded share, so the
/// rejoining worker gets its extras back: each of the three ends within 10% of a third.
#[test]
fn a_rejoining_worker_gets_its_seeded_share_of_many_channels() {
    let workers = live(&["w1", "w2", "w3"]);
    let mut held: BTreeMap<String, usize> = BTreeMap::new();
    for table in 0..300 {
        let channel = format!("many.t{table:04}");
        let params = BalanceParams {
            tie_seed: balance::tie_seed_of(&channel),
            exact_shares: true,
            ..params(1)
        };
        // w2 was away: w1 and w3 split its shards.
        let mut leases = world(&[Some("w1"), Some("w1"), Some("w3"), Some("w3")]);
        for _ in 0..10 {
            let plan = balance(
                &leases,
                &workers,
                &|_| false,
                &BTreeMap::new(),
                Some(0),
                &params,
            );
            if plan.is_empty() {
                break;
            }
            for step in plan {
                let (Assignment::Assign { lease, to } | Assignment::Handoff { lease, to }) = step;
                let row = leases.iter_mut().find(|l| l.key == lease.key).unwrap();
                row.owner = Some(to);
            }
        }
        let mut per_worker: BTreeMap<String, usize> = BTreeMap::new();
        for l in leases.iter().filter(|l| l.key.shard_id().is_some()) {
            *per_worker.entry(l.owner.clone().unwrap()).or_default() += 1;
        }
        assert!(
            per_worker.len() == 3 && per_worker.values().all(|&n| n == 1 || n == 2),
            "{channel}: {per_worker:?}"
        );
        for (w, n) in per_worker {
            *held.entry(w).or_default() += n;
        }
    }
    for (worker, n) in &held {
        assert!(
            (360..=440).contains(n),
            "{worker} holds {n} of 1,200: {held:?}"
        );
    }
}

// ---- placement: the members of a routed channel hold each shard on one worker ----

fn shard_ids(n: usize) -> Vec<ShardId> {
    (0..n).map(|i| ShardId(format!("events:{i}"))).collect()
}

/// The placement as owned (shard, worker) pairs.
fn placed(seed: u64, shards: &[ShardId], workers: &BTreeSet<String>) -> BTreeMap<ShardId, String> {
    let refs: Vec<&ShardId> = shards.iter().collect();
    placement(seed, &refs, workers)
        .into_iter()
        .map(|(s, w)| (s.clone(), w.to_string()))
        .collect()
}

#[test]
fn placement_places_every_shard_and_gives_every_worker_its_exact_share() {
    let all = ["w1", "w2", "w3", "w4", "w5"];
    for seed in 0..20 {
        for n in 0..=20 {
            for k in 1..=all.len() {
                let workers = live(&all[..k]);
                let map = placed(seed, &shard_ids(n), &workers);
                assert_eq!(map.len(), n, "seed {seed}, {n} shards, {k} workers");
                let mut order: Vec<&str> = all[..k].to_vec();
                order.sort_by_key(|w| balance::tie_rank(seed, w));
                for (i, w) in order.iter().enumerate() {
                    let held = map.values().filter(|o| o == w).count();
                    assert_eq!(held, n / k + usize::from(i < n % k), "{w}: {map:?}");
                }
            }
        }
    }
}

#[test]
fn placement_is_the_same_for_the_same_inputs_whatever_their_order() {
    let shards = shard_ids(12);
    let workers = live(&["w1", "w2", "w3"]);
    let seed = balance::tie_seed_of("events");
    let map = placed(seed, &shards, &workers);
    let reversed: Vec<ShardId> = shards.iter().rev().cloned().collect();
    assert_eq!(placed(seed, &reversed, &live(&["w3", "w2", "w1"])), map);
    assert_ne!(
        placed(balance::tie_seed_of("other"), &shards, &workers),
        map,
        "another channel places its shards otherwise"
    );
}

/// When a fourth worker joins three (or one of four leaves), 12 shards must move at least 3
/// (the newcomer's share, the leaver's shards); best pairs first, over 300 seeds they move at
/// most twice that each time and 27% more than the minimum in all (1,147 and 1,137 for 900).
#[test]
fn placement_moves_few_shards_when_a_worker_joins_or_leaves() {
    let shards = shard_ids(12);
    let three = live(&["w1", "w2", "w3"]);
    let four = live(&["w1", "w2", "w3", "w4"]);
    let moved = |a: &BTreeMap<ShardId, String>, b: &BTreeMap<ShardId, String>| {
        a.iter().filter(|(s, w)| b[*s] != **w).count()
    };
    let (mut joined, mut left) = (0, 0);
    for seed in 0..300u64 {
        let before = placed(seed, &shards, &three);
        let after = placed(seed, &shards, &four);
        let join = moved(&before, &after);
        assert!((3..=6).contains(&join), "seed {seed}: {join} moved");
        joined += join;
        // w2 leaves the four.
        let without = placed(seed, &shards, &live(&["w1", "w3", "w4"]));
        let leave = moved(&after, &without);
        assert!((3..=6).contains(&leave), "seed {seed}: {leave} moved");
        left += leave;
    }
    assert!(joined <= 300 * 3 * 13 / 10, "{joined} moved for 900 needed");
    assert!(left <= 300 * 3 * 13 / 10, "{left} moved for 900 needed");
}

fn placed_params(max_leases_to_steal: usize) -> BalanceParams {
    BalanceParams {
        placement_seed: Some(balance::tie_seed_of("events")),
        exact_shares: true,
        ..params(max_leases_to_steal)
    }
}

/// A world of 12 shards held as the placement over `workers` says.
fn placed_world(workers: &BTreeSet<String>) -> (Vec<Lease>, BTreeMap<ShardId, String>) {
    let seed = placed_params(1).placement_seed.unwrap();
    let map = placed(
        seed,
        &(0..12).map(|i| ShardId(i.to_string())).collect::<Vec<_>>(),
        workers,
    );
    let owners: Vec<Option<&str>> = (0..12)
        .map(|i| Some(map[&ShardId(i.to_string())].as_str()))
        .collect();
    (world(&owners), map)
}

#[test]
fn with_a_placement_free_shards_go_to_their_placed_worker() {
    let workers = live(&["a", "b", "c"]);
    let (_, map) = placed_world(&workers);
    let leases = world(&[None; 12]);
    let plan = balance(
        &leases,
        &workers,
        &|_| false,
        &BTreeMap::new(),
        Some(0),
        &placed_params(1),
    );
    let (assigned, handoffs) = split(&plan);
    assert!(handoffs.is_empty());
    assert_eq!(assigned.len(), 12);
    for (shard, to) in &assigned {
        assert_eq!(&map[&ShardId(shard.clone())], to, "{assigned:?}");
    }
    // A worker in doubt may be live: each live worker takes at most ceil(12 / 4) = 3 meanwhile.
    let plan = balance(
        &leases,
        &workers,
        &|_| false,
        &BTreeMap::new(),
        Some(1),
        &placed_params(1),
    );
    let (assigned, _) = split(&plan);
    assert_eq!(assigned.len(), 9, "{assigned:?}");
    assert!(assigned
        .iter()
        .all(|(s, to)| map[&ShardId(s.clone())] == *to));
}

#[test]
fn with_a_placement_a_misplaced_shard_is_handed_to_its_placed_worker() {
    let workers = live(&["a", "b", "c"]);
    let (mut leases, map) = placed_world(&workers);
    // Shard 0 sits elsewhere; shard 1's owner stopped renewing but is not gone yet.
    let placed_on = map[&ShardId("0".into())].clone();
    let elsewhere = ["a", "b", "c"]
        .into_iter()
        .find(|w| *w != placed_on)
        .unwrap();
    leases[0].owner = Some(elsewhere.to_string());
    leases[1].owner = Some("dead".into());
    let plan = balance(
        &leases,
        &workers,
        &|_| false,
        &BTreeMap::new(),
        Some(0),
        &placed_params(1),
    );
    assert_eq!(
        split(&plan),
        (
            vec![],
            vec![("0".to_string(), elsewhere.to_string(), placed_on.clone())]
        )
    );
    // Not asked twice while its handoff is under way.
    let moving = BTreeMap::from([(ShardId("0".into()), placed_on.clone())]);
    let plan = balance(
        &leases,
        &workers,
        &|_| false,
        &moving,
        Some(0),
        &placed_params(1),
    );
    assert!(plan.is_empty(), "{plan:?}");
    // Once its owner is gone, shard 1 goes to its placed worker.
    let plan = balance(
        &leases,
        &workers,
        &|l| l.owner.as_deref() == Some("dead"),
        &moving,
        Some(0),
        &placed_params(1),
    );
    assert_eq!(
        split(&plan).0,
        vec![("1".to_string(), map[&ShardId("1".into())].clone())]
    );
}

#[test]
fn with_a_placement_at_most_max_leases_to_steal_move_towards_one_worker_per_period() {
    let workers = live(&["a", "b", "c"]);
    let (_, map) = placed_world(&workers);
    let leases = world(&[Some("a"); 12]);
    for steal in [1, 2, 4] {
        let plan = balance(
            &leases,
            &workers,
            &|_| false,
            &BTreeMap::new(),
            Some(0),
            &placed_params(steal),
        );
        let (assigned, handoffs) = split(&plan);
        assert!(assigned.is_empty());
        for to in ["b", "c"] {
            let towards: Vec<_> = handoffs.iter().filter(|(_, _, t)| t == to).collect();
            assert_eq!(towards.len(), steal, "{to}: {handoffs:?}");
        }
        assert!(
            handoffs
                .iter()
                .all(|(s, from, to)| from == "a" && map[&ShardId(s.clone())] == *to),
            "{handoffs:?}"
        );
    }
}

/// Tie orders and placements are compared across workers, which may run different builds
/// during a rolling upgrade: their hash is floe's own, pinned here (std's `DefaultHasher`
/// promises no stable output across Rust releases).
#[test]
fn tie_seeds_are_the_same_in_every_build() {
    assert_eq!(balance::tie_seed_of("orders"), 9_629_371_246_949_690_906);
}
