//! A table per topic end to end (docs/routing.md): one channel with `topic_pattern` and
//! `table = "{topic}"` delivers 20 topics into 20 tables with two `floe run` processes, two
//! topics created mid-run, one worker SIGKILLed mid-run; every table is read back with
//! PyIceberg: exactly its topic's records, once; the DLQ exactly the bad ones, once; a topic the
//! pattern does not match is never read.

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::{Duration, Instant};

use common::{bad_kind, log_of, Broker, Worker, BASE_MS, SEED};
use floe::dlq::LocalDlq;
use floe::lease::{LeaseKey, LeaseStore as _};
use floe::tools::sample_events::{bad_event, event_json};
use iceberg::{NamespaceIdent, TableIdent};

/// Topics that exist when the workers start; two more are created mid-run.
const AT_START: u64 = 18;
const MID_RUN: u64 = 2;
/// Records per topic produced in each of the two phases.
const PER_PHASE: u64 = 40;

fn topic(i: u64) -> String {
    format!("ev.t{i:02}")
}

fn table(i: u64) -> String {
    format!("ev_t{i:02}")
}

/// The id of the `n`-th record of topic `i`: ids are unique across topics.
fn id_of(i: u64, n: u64) -> u64 {
    i * 10_000 + n
}

fn produce(bootstrap: &str, i: u64, ns: std::ops::Range<u64>) {
    common::produce_payloads_to(
        bootstrap,
        &topic(i),
        id_of(i, ns.start)..id_of(i, ns.end),
        |id| match bad_kind(id) {
            Some(kind) => bad_event(id, kind).0,
            None => event_json(id, SEED, BASE_MS, 3).into_bytes(),
        },
    );
}

fn config(dir: &Path, bootstrap: &str, id: &str, metrics: &str) -> String {
    let d = dir.display();
    format!(
        r#"[worker]
id = "{id}"
shutdown_timeout = "20s"
metrics_address = "{metrics}"

[lease_store]
kind = "sqlite"
path = "{d}/leases.sqlite"
lease_duration = "4s"
renew_interval = "1s"

[[channel]]
name = "r"
  [channel.source]
  kind = "kafka"
  bootstrap_servers = "{bootstrap}"
  topic_pattern = "ev\\..*"
  topic_refresh_interval = "5s"
  initial_position = "earliest"
  [channel.record]
  format = "json"
  [channel.schema]
  file = "{manifest}/config/event.schema.json"
  [channel.destination]
  kind = "iceberg"
  namespace = "routed"
  table = "{{topic}}"
  partition_field = "event_time"
  data_freshness = "10s"
    [channel.destination.catalog]
    kind = "sql"
    name = "floe"
    uri = "{d}/catalog.sqlite"
    warehouse = "{d}/warehouse"
  [channel.dlq]
  kind = "local"
  path = "{d}/dlq"
"#,
        manifest = env!("CARGO_MANIFEST_DIR")
    )
}

/// The DLQ of topic `i`'s table: its member channel's (`r.<table>`).
fn dlq_of(dir: &Path, i: u64) -> LocalDlq {
    LocalDlq::new(
        dir.join("dlq"),
        floe::channel::members::member_name("r", &topic(i)),
    )
}

/// Rows and published DLQ entries of topic `i`'s table, (0, 0) before it exists.
async fn counts(dir: &Path, i: u64) -> (u64, u64) {
    common::delivered_to(
        dir,
        "routed",
        &table(i),
        &floe::channel::members::member_name("r", &topic(i)),
    )
    .await
}

/// Waits until tables `0..tables` hold `per_topic` records each (rows + DLQ), or `timeout`.
async fn wait_all(dir: &Path, tables: u64, per_topic: u64, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        let mut done = true;
        for i in 0..tables {
            let (rows, dlq) = counts(dir, i).await;
            if rows + dlq < per_topic {
                done = false;
                break;
            }
        }
        if done {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Sum of a metric's samples in a Prometheus scrape of `addr`.
fn scrape_sum(addr: &str, name: &str) -> f64 {
    let Some((200, text)) = common::get(addr, "/metrics") else {
        return 0.0;
    };
    common::sum(&common::samples(&text), name, &[])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_topics_by_pattern_land_in_twenty_tables_exactly_once_across_a_sigkill() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let broker = broker_with_the_first_phase();
    let bs = broker.bootstrap.clone();

    let metrics: Vec<String> = (0..3)
        .map(|_| format!("127.0.0.1:{}", common::free_port()))
        .collect();
    let started = Instant::now();
    let w1 = Worker::start_with(dir, "w1", &config(dir, &bs, "w1", &metrics[0]));
    let w2 = Worker::start_with(dir, "w2", &config(dir, &bs, "w2", &metrics[1]));
    assert!(
        wait_all(dir, AT_START, PER_PHASE, Duration::from_secs(120)).await,
        "the first {AT_START} tables were not delivered within 120 s; w1 log:\n{}",
        log_of(dir, "w1")
    );

    // Mid-run: two new matching topics (created by producing to them: the mock broker creates
    // a topic a producer asks for), a second phase for the others, and w1 killed while the
    // second phase is in flight.
    for i in 0..AT_START + MID_RUN {
        let ns = if i < AT_START {
            PER_PHASE..2 * PER_PHASE
        } else {
            0..2 * PER_PHASE
        };
        produce(&bs, i, ns);
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    // The victim is a committer of some tables: those committers die with it, mid-run. Which
    // worker took the committer leases is the lease protocol's choice (usually w1, started
    // first; w2 when w1's presence lapsed once on a loaded machine).
    let w1_commits = tables_committed_by(dir, "w1").await;
    let (victim, survivor, survivor_metrics, victim_commits) = if w1_commits.is_empty() {
        let w2_commits = tables_committed_by(dir, "w2").await;
        (w2, w1, &metrics[0], w2_commits)
    } else {
        (w1, w2, &metrics[1], w1_commits)
    };
    assert!(
        !victim_commits.is_empty(),
        "neither w1 nor w2 commits a table mid-run"
    );
    victim.signal("KILL");
    drop(victim);
    let w3 = Worker::start_with(dir, "w3", &config(dir, &bs, "w3", &metrics[2]));
    let all = AT_START + MID_RUN;
    assert!(
        wait_all(dir, all, 2 * PER_PHASE, Duration::from_secs(150)).await,
        "not every table was delivered within 150 s; w3 log:\n{}",
        log_of(dir, "w3")
    );
    let elapsed = started.elapsed().as_secs_f64();
    let calls: f64 = [survivor_metrics, &metrics[2]]
        .iter()
        .map(|m| {
            scrape_sum(m, "floe_catalog_table_loads_total") + scrape_sum(m, "floe_commits_total")
        })
        .sum();
    report_resources(&survivor, all);
    assert_eq!(survivor.terminate().code(), Some(0));
    assert_eq!(w3.terminate().code(), Some(0));

    let report = assert_every_table_holds_exactly_its_topics_records(dir, all);
    let commits: u64 = report.values().map(|(_, c)| c).sum();
    eprintln!("routing: the victim was the committer of {victim_commits:?} when SIGKILLed");
    eprintln!(
        "routing: {all} tables in {elapsed:.0} s; rows and commits per table: {report:?}; {commits} commits in all; catalog calls (table loads + commits) of the two surviving workers: {calls} ({:.2}/s)",
        calls / elapsed
    );
}

/// The broker with topics `ev.t00`…`ev.t17` (2 partitions each) holding the first phase's
/// records, and `other` (which the pattern does not match) holding 50 records.
fn broker_with_the_first_phase() -> Broker {
    let mut names: Vec<String> = (0..AT_START).map(topic).collect();
    names.push("other".to_string());
    let name_refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let broker = Broker::start_topics(&name_refs, 2);
    let bs = &broker.bootstrap;
    for i in 0..AT_START {
        produce(bs, i, 0..PER_PHASE);
    }
    common::produce_payloads_to(bs, "other", 900_000..900_050, |id| {
        event_json(id, SEED, BASE_MS, 3).into_bytes()
    });
    broker
}

/// The tables (of the topics present at the start) whose committer lease `worker` holds: each
/// table's committer lease is its own.
async fn tables_committed_by(dir: &Path, worker: &str) -> Vec<String> {
    let store = floe::lease::sql::SqlLeaseStore::open_sqlite(dir.join("leases.sqlite"))
        .await
        .unwrap();
    let mut commits = Vec::new();
    for i in 0..AT_START {
        let member = floe::channel::members::member_name("r", &topic(i));
        let leases = store.list_leases(&member).await.unwrap();
        if leases
            .iter()
            .any(|l| l.key == LeaseKey::Committer && l.owner.as_deref() == Some(worker))
        {
            commits.push(table(i));
        }
    }
    commits
}

/// Prints the resident memory and thread count of worker `w` serving `all` tables.
fn report_resources(w: &Worker, all: u64) {
    let rss_kib = |w: &Worker| {
        std::fs::read_to_string(format!("/proc/{}/status", w.child.id()))
            .ok()
            .and_then(|s| {
                s.lines()
                    .find_map(|l| l.strip_prefix("VmRSS:"))
                    .and_then(|v| v.trim().trim_end_matches(" kB").trim().parse::<u64>().ok())
            })
            .unwrap_or(0)
    };
    let threads = |w: &Worker| {
        std::fs::read_dir(format!("/proc/{}/task", w.child.id()))
            .map(|d| d.count())
            .unwrap_or(0)
    };
    eprintln!(
        "routing: worker w2 with {all} tables: RSS {} MiB, {} threads",
        rss_kib(w) / 1024,
        threads(w)
    );
}

/// Every table, read by PyIceberg: exactly its topic's good records, once, and its DLQ exactly
/// the bad ones, once. Returns each table's (rows, commits).
fn assert_every_table_holds_exactly_its_topics_records(
    dir: &Path,
    all: u64,
) -> BTreeMap<String, (usize, u64)> {
    let catalog = dir.join("catalog.sqlite");
    let warehouse = dir.join("warehouse");
    let read = common::run_py_reader(
        "read_namespace.py",
        &[
            catalog.as_os_str(),
            warehouse.as_os_str(),
            "routed".as_ref(),
        ],
    );
    let tables: BTreeSet<String> = read.as_object().unwrap().keys().cloned().collect();
    let expected_tables: BTreeSet<String> = (0..all).map(table).collect();
    assert_eq!(
        tables, expected_tables,
        "one table per matching topic, none for `other`"
    );
    let mut report = BTreeMap::new();
    for i in 0..all {
        let t = &read[table(i).as_str()];
        let ids: Vec<u64> = t["ids"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap())
            .collect();
        let good: Vec<u64> = (0..2 * PER_PHASE)
            .map(|n| id_of(i, n))
            .filter(|id| bad_kind(*id).is_none())
            .collect();
        assert_eq!(
            ids,
            good,
            "table {} holds exactly its topic's records once",
            table(i)
        );
        assert_eq!(
            t["owner"].as_str(),
            Some(floe::channel::members::member_name("r", &topic(i)).as_str())
        );
        let mut dead: Vec<u64> = dlq_of(dir, i)
            .read_published()
            .unwrap()
            .into_iter()
            .map(|e| e.key.unwrap().parse().unwrap())
            .collect();
        dead.sort_unstable();
        let bad: Vec<u64> = (0..2 * PER_PHASE)
            .map(|n| id_of(i, n))
            .filter(|id| bad_kind(*id).is_some())
            .collect();
        assert_eq!(
            dead,
            bad,
            "DLQ of {}: exactly the bad records, once",
            table(i)
        );
        report.insert(table(i), (ids.len(), t["commits"].as_u64().unwrap()));
    }
    report
}

fn channel_cli(dir: &Path, args: &[&str]) -> (bool, String) {
    let config = dir.join("floe.toml");
    let mut all = vec!["channel", args[0], "--config", config.to_str().unwrap()];
    all.extend_from_slice(&args[1..]);
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_floe"))
        .args(&all)
        .env("RUST_LOG", "warn")
        .output()
        .expect("run floe");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_control_plane_acts_on_every_table_of_a_table_per_topic_channel() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let broker = Broker::start_topics(&["ev.a", "ev.b", "other"], 1);
    std::fs::write(
        dir.join("floe.toml"),
        config(dir, &broker.bootstrap, "cli", "off"),
    )
    .unwrap();

    let (ok, out) = channel_cli(dir, &["create"]);
    assert!(ok, "{out}");
    for line in [
        "channel r: ACTIVE",
        "channel r.ev.a: ACTIVE",
        "channel r.ev.b: ACTIVE",
    ] {
        assert!(out.contains(line), "create prints {line:?}: {out}");
    }
    assert!(!out.contains("r.other"), "{out}");
    // Every member takes the channel's activation time (a topic created later is read from its
    // first record).
    let (ok, out) = channel_cli(dir, &["create", "--json"]);
    assert!(ok, "{out}");
    let states: serde_json::Value = serde_json::from_str(&out).unwrap();
    let times: BTreeSet<i64> = states
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["activated_at_ms"].as_i64().unwrap())
        .collect();
    assert_eq!(times.len(), 1, "one activation time: {states}");

    let (ok, out) = channel_cli(dir, &["list"]);
    assert!(ok, "{out}");
    for table in ["routed.ev_a", "routed.ev_b"] {
        assert!(out.contains(table), "list shows {table}: {out}");
    }
    let (ok, out) = channel_cli(dir, &["describe", "r"]);
    assert!(ok, "{out}");
    assert!(
        out.contains("channel r.ev.a") && out.contains("channel r.ev.b"),
        "{out}"
    );
    let (ok, out) = channel_cli(dir, &["describe", "r.ev.b"]);
    assert!(
        ok && out.contains("routed.ev_b") && !out.contains("r.ev.a"),
        "{out}"
    );

    let (ok, out) = channel_cli(dir, &["delete", "r"]);
    assert!(ok, "{out}");
    for line in [
        "channel r: DELETING",
        "channel r.ev.a: DELETING",
        "channel r.ev.b: DELETING",
    ] {
        assert!(out.contains(line), "delete prints {line:?}: {out}");
    }
    // A deleted channel is not run.
    let mut worker = Worker::start_with(dir, "w", &config(dir, &broker.bootstrap, "w", "off"));
    let status = worker.wait_exit(Duration::from_secs(60)).await;
    assert_eq!(
        status.and_then(|s| s.code()),
        Some(78),
        "{}",
        log_of(dir, "w")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_table_suspends_its_topic_alone() {
    use floe::lease::BatchStore as _;
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let broker = Broker::start_topics(&["ev.t00", "ev.t01", "ev.t02"], 1);
    let bs = broker.bootstrap.clone();
    for i in 0..3 {
        produce(&bs, i, 0..20);
    }
    let mut w = Worker::start_with(dir, "w", &config(dir, &bs, "w", "off"));
    assert!(
        wait_all(dir, 3, 20, Duration::from_secs(90)).await,
        "{}",
        log_of(dir, "w")
    );
    let catalog = floe::catalog::open_sql_catalog(
        &dir.join("catalog.sqlite"),
        &dir.join("warehouse"),
        "floe",
    )
    .await
    .unwrap();
    let dropped = TableIdent::new(NamespaceIdent::new("routed".into()), table(1));
    catalog.drop_table(&dropped).await.unwrap();
    for i in 0..3 {
        produce(&bs, i, 20..40);
    }
    // The other tables go on; the dropped one's member is SUSPENDED; the process keeps running.
    let store = floe::lease::sql::SqlLeaseStore::open_sqlite(dir.join("leases.sqlite"))
        .await
        .unwrap();
    let member = floe::channel::members::member_name("r", &topic(1));
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let others = counts(dir, 0).await.0 + counts(dir, 0).await.1 >= 40
            && counts(dir, 2).await.0 + counts(dir, 2).await.1 >= 40;
        let state = store.get_channel_state(&member).await.unwrap();
        let suspended = state.is_some_and(|s| s.state == floe::lease::ChannelStatus::Suspended);
        if others && suspended {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "others delivered: {others}, {member} suspended: {suspended}\n{}",
            log_of(dir, "w")
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert!(w.child.try_wait().unwrap().is_none(), "the process goes on");
    for i in [0, 2] {
        let (rows, dlq) = counts(dir, i).await;
        assert_eq!(
            (rows, dlq),
            (39, 1),
            "table {} holds every record once",
            table(i)
        );
    }
    // `floe channel delete` and `create` of the member start it over in the running worker:
    // a new table, read from the channel's initial position (here "earliest": every record of
    // the topic again; the old DLQ entry stays beside the new one).
    std::fs::write(dir.join("floe.toml"), config(dir, &bs, "cli", "off")).unwrap();
    for command in ["delete", "create"] {
        let (ok, out) = channel_cli(dir, &[command, &member]);
        assert!(ok, "{command}: {out}");
    }
    produce(&bs, 1, 40..60);
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (rows, dlq) = counts(dir, 1).await;
        if rows >= 59 {
            assert_eq!((rows, dlq), (59, 2), "{}", log_of(dir, "w"));
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{rows} of 59 rows delivered after the member was created again:\n{}",
            log_of(dir, "w")
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert_eq!(w.terminate().code(), Some(0), "{}", log_of(dir, "w"));
}

/// Two topics whose names map to one table (`ev.x`, `ev_x`): whichever order the workers saw
/// them in, the table holds the records of the topic that created it, exactly once, and the
/// other topic is not read — refused by name by a worker that lists both, and by the table's
/// ownership for a worker that met the other topic first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_topics_with_one_table_name_never_share_the_table() {
    use floe::lease::BatchStore as _;
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let broker = Broker::start_topics(&["ev_x"], 1);
    let bs = broker.bootstrap.clone();
    let toml = |id: &str| config(dir, &bs, id, "off").replace(r#""ev\\..*""#, r#""ev[._]x""#);
    let owner_ids = |n: std::ops::Range<u64>| n.map(|n| 500_000 + n);
    let other_ids = |n: std::ops::Range<u64>| n.map(|n| 600_000 + n);
    let produce_to = |topic: &str, ids: Vec<u64>| {
        let (from, to) = (ids[0], ids[ids.len() - 1] + 1);
        common::produce_payloads_to(&bs, topic, from..to, |id| {
            event_json(id, SEED, BASE_MS, 3).into_bytes()
        });
    };
    produce_to("ev_x", owner_ids(0..30).collect());
    // Worker a meets ev_x alone: its member creates table ev_x.
    let a = Worker::start_with(dir, "a", &toml("a"));
    let rows = |dir: &Path| {
        let dir = dir.to_path_buf();
        async move {
            common::delivered_to(&dir, "routed", "ev_x", "r.ev_x")
                .await
                .0
        }
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    while rows(dir).await < 30 {
        assert!(Instant::now() < deadline, "{}", log_of(dir, "a"));
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    // Then ev.x appears, and worker b starts, listing both (ev.x sorts first).
    produce_to("ev.x", other_ids(0..30).collect());
    produce_to("ev_x", owner_ids(30..60).collect());
    let b = Worker::start_with(dir, "b", &toml("b"));
    let deadline = Instant::now() + Duration::from_secs(60);
    while rows(dir).await < 60 {
        assert!(Instant::now() < deadline, "{}", log_of(dir, "a"));
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    // Both workers listed both topics since (refresh 5 s).
    tokio::time::sleep(Duration::from_secs(12)).await;
    assert_eq!(b.terminate().code(), Some(0), "{}", log_of(dir, "b"));
    assert_eq!(a.terminate().code(), Some(0), "{}", log_of(dir, "a"));
    let catalog = dir.join("catalog.sqlite");
    let warehouse = dir.join("warehouse");
    let read = common::run_py_reader(
        "read_namespace.py",
        &[
            catalog.as_os_str(),
            warehouse.as_os_str(),
            "routed".as_ref(),
        ],
    );
    let ids: Vec<u64> = read["ev_x"]["ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap())
        .collect();
    assert_eq!(
        ids,
        owner_ids(0..60).collect::<Vec<_>>(),
        "only ev_x's records, once"
    );
    assert_eq!(read["ev_x"]["owner"].as_str(), Some("r.ev_x"));
    assert!(
        log_of(dir, "a").contains("topic not read: its table name is the table of another topic"),
        "{}",
        log_of(dir, "a")
    );
    let store = floe::lease::sql::SqlLeaseStore::open_sqlite(dir.join("leases.sqlite"))
        .await
        .unwrap();
    let other = store.get_channel_state("r.ev.x").await.unwrap();
    assert!(
        other.is_none()
            || other
                .as_ref()
                .is_some_and(|s| s.state == floe::lease::ChannelStatus::Failed),
        "ev.x's member never became the table's writer: {other:?}"
    );
}

/// A topic that appears after the channel's activation is read from its first record, also
/// when its records carry older timestamps (MirrorMaker 2, a replay with preserved CreateTime):
/// the activation-time lookup would skip them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_topic_that_appears_later_is_read_from_its_first_record_whatever_its_timestamps() {
    use floe::lease::BatchStore as _;
    use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let broker = Broker::start_topics(&["other"], 1);
    let bs = broker.bootstrap.clone();
    // The channel was activated ten minutes ago.
    let store = floe::lease::sql::SqlLeaseStore::open_sqlite(dir.join("leases.sqlite"))
        .await
        .unwrap();
    let activated = floe::time::now_ms() - 600_000;
    store
        .put_channel_state(
            &floe::lease::ChannelState {
                channel: "r".into(),
                state: floe::lease::ChannelStatus::Active,
                status_reason: None,
                activated_at_ms: Some(activated),
                table_uuid: None,
                schema_version_id: None,
                version: 0,
                updated_at_ms: activated,
                overrides: Default::default(),
                from_first_record: false,
            },
            None,
        )
        .await
        .unwrap();
    let toml = config(dir, &bs, "w", "off").replace("initial_position = \"earliest\"\n", "");
    assert!(!toml.contains("earliest"));
    let w = Worker::start_with(dir, "w", &toml);
    // A mirrored topic: 20 records stamped three hours ago, then 20 stamped now.
    let producer: BaseProducer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", &bs)
        .create()
        .unwrap();
    let hours_ago = floe::time::now_ms() - 3 * 3_600_000;
    for n in 0..40u64 {
        let id = id_of(7, n);
        let payload = event_json(id, SEED, BASE_MS, 3);
        let key = id.to_string();
        let mut record = BaseRecord::to("ev.t07").key(&key).payload(&payload);
        if n < 20 {
            record = record.timestamp(hours_ago);
        }
        producer.send(record).map_err(|(e, _)| e).unwrap();
        producer.poll(Duration::ZERO);
    }
    producer.flush(Duration::from_secs(30)).unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (rows, dlq) = counts(dir, 7).await;
        if rows + dlq >= 40 {
            assert_eq!((rows, dlq), (40, 0), "{}", log_of(dir, "w"));
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{rows} of 40 delivered:\n{}",
            log_of(dir, "w")
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let member = store
        .get_channel_state(&floe::channel::members::member_name("r", "ev.t07"))
        .await
        .unwrap()
        .unwrap();
    assert!(member.from_first_record, "{member:?}");
    assert_eq!(member.activated_at_ms, Some(activated));
    assert_eq!(w.terminate().code(), Some(0));
}
