//! Crash tests with real processes: `floe run` workers are SIGKILLed and SIGSTOPped (past their
//! lease expiry) while batches are pending; a standalone Kafka-protocol broker outlives them;
//! PyIceberg then checks by id that the table holds exactly the input.

use crate::common;

use std::path::Path;
use std::time::Duration;

use common::*;

fn assert_exactly_once(dir: &Path, total: u64) {
    let expected_bad = (0..total).filter(|id| bad_kind(*id).is_some()).count() as u64;
    let t = read_with_pyiceberg(dir, &[]);
    let keys = dlq_keys(dir);
    let mut dlq_ids: Vec<u64> = keys.iter().flatten().map(|k| k.parse().unwrap()).collect();
    dlq_ids.sort();
    let n = dlq_ids.len();
    dlq_ids.dedup();
    assert_eq!(n, dlq_ids.len(), "no DLQ entry twice");
    assert_eq!(n as u64, expected_bad, "every bad record in the DLQ");
    assert_eq!(
        t["rows"],
        total - expected_bad,
        "count(*) == produced - DLQ"
    );
    assert_eq!(
        t["distinct_ids"],
        total - expected_bad,
        "count(distinct id) == count(*)"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkilled_worker_loses_and_doubles_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start();
    let total = 6_000u64;
    produce(&broker.bootstrap, 0, total / 2);
    let w1 = Worker::start(dir.path(), &broker.bootstrap, "w1");
    let w2 = Worker::start(dir.path(), &broker.bootstrap, "w2");
    // Let both read and hand off batches, then kill one while batches are pending.
    tokio::time::sleep(Duration::from_secs(12)).await;
    produce(&broker.bootstrap, total / 2, total);
    w1.signal("KILL");
    drop(w1);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let w1 = Worker::start(dir.path(), &broker.bootstrap, "w1");
    let (rows, dlq) = wait_delivered(dir.path(), total, Duration::from_secs(150)).await;
    assert!(
        w1.terminate().success(),
        "w1 exits 0 on SIGTERM:\n{}",
        log_of(dir.path(), "w1")
    );
    assert!(
        w2.terminate().success(),
        "w2 exits 0 on SIGTERM:\n{}",
        log_of(dir.path(), "w2")
    );
    assert_eq!(
        rows + dlq,
        total,
        "all delivered; logs:\n{}",
        log_of(dir.path(), "w2")
    );
    assert_exactly_once(dir.path(), total);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn committer_paused_past_lease_expiry_cannot_double_commit() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start();
    let total = 6_000u64;
    produce(&broker.bootstrap, 0, total / 2);
    // w1 starts alone: it takes every lease, the committer lease included.
    let w1 = Worker::start(dir.path(), &broker.bootstrap, "w1");
    tokio::time::sleep(Duration::from_secs(3)).await;
    let w2 = Worker::start(dir.path(), &broker.bootstrap, "w2");
    // Wait for w1 to hand off its first batches, then freeze it past its lease (4 s).
    tokio::time::sleep(Duration::from_secs(10)).await;
    w1.signal("STOP");
    produce(&broker.bootstrap, total / 2, total);
    tokio::time::sleep(Duration::from_secs(14)).await;
    w1.signal("CONT");
    let (rows, dlq) = wait_delivered(dir.path(), total, Duration::from_secs(150)).await;
    assert!(
        w1.terminate().success(),
        "w1 exits 0:\n{}",
        log_of(dir.path(), "w1")
    );
    assert!(
        w2.terminate().success(),
        "w2 exits 0:\n{}",
        log_of(dir.path(), "w2")
    );
    assert_eq!(rows + dlq, total);
    assert_exactly_once(dir.path(), total);
    let t = read_with_pyiceberg(dir.path(), &[]);
    let mut batch_ids: Vec<String> = t["snapshots"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|s| s["floe.batch-ids"].as_str())
        .flat_map(|s| {
            s.split(',')
                .filter(|x| !x.is_empty())
                .map(str::to_string)
                .collect::<Vec<_>>()
        })
        .collect();
    let n = batch_ids.len();
    batch_ids.sort();
    batch_ids.dedup();
    assert_eq!(batch_ids.len(), n, "no batch committed twice");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn table_dropped_while_running_suspends_the_channel_and_exits_78() {
    table_gone_while_running(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn table_dropped_and_recreated_while_running_suspends_the_channel_and_exits_78() {
    // Found by a break test: a table dropped and created again under the same name (same
    // schema and properties, no checkpoints) stalled the channel silently.
    table_gone_while_running(true).await;
}

/// The channel's table is dropped under a running worker (and created again with `replace`,
/// as the channel would create it): the channel is suspended, the worker exits 78, and a
/// restart stays suspended.
async fn table_gone_while_running(replace: bool) {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start();
    produce(&broker.bootstrap, 0, 500);
    let mut w1 = Worker::start(dir.path(), &broker.bootstrap, "w1");
    let (rows, dlq) = wait_delivered(dir.path(), 500, Duration::from_secs(90)).await;
    assert_eq!(
        rows + dlq,
        500,
        "first records delivered:\n{}",
        log_of(dir.path(), "w1")
    );
    let catalog = floe::catalog::open_sql_catalog(
        &dir.path().join("catalog.sqlite"),
        &dir.path().join("warehouse"),
        "floe",
    )
    .await
    .unwrap();
    let ident =
        iceberg::TableIdent::new(iceberg::NamespaceIdent::new("it".into()), "events".into());
    catalog.drop_table(&ident).await.unwrap();
    if replace {
        common::event_table_in(catalog.as_ref(), "it", "it").await;
    }
    produce(&broker.bootstrap, 500, 600);
    let mut status = None;
    for _ in 0..900 {
        if let Some(s) = w1.child.try_wait().unwrap() {
            status = Some(s);
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let status = status.unwrap_or_else(|| {
        panic!(
            "worker still running 90 s after the table was dropped:\n{}",
            log_of(dir.path(), "w1")
        )
    });
    assert_eq!(status.code(), Some(78), "{}", log_of(dir.path(), "w1"));
    assert!(log_of(dir.path(), "w1").contains("channel suspended"));
    if replace {
        assert!(
            log_of(dir.path(), "w1").contains("was dropped and replaced"),
            "{}",
            log_of(dir.path(), "w1")
        );
    }
    // A restart does not recreate the table and deliver everything again: still suspended.
    let mut again = Worker::start(dir.path(), &broker.bootstrap, "w1");
    let mut status = None;
    for _ in 0..600 {
        if let Some(s) = again.child.try_wait().unwrap() {
            status = Some(s);
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        status.and_then(|s| s.code()),
        Some(78),
        "{}",
        log_of(dir.path(), "w1")
    );
    assert!(
        log_of(dir.path(), "w1").contains("not restarted automatically"),
        "{}",
        log_of(dir.path(), "w1")
    );
    assert_eq!(catalog.table_exists(&ident).await.unwrap(), replace);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_with_an_edited_schema_or_another_catalog_stops_alone_and_does_not_suspend_the_channel(
) {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start();
    produce(&broker.bootstrap, 0, 300);
    let w1 = Worker::start(dir.path(), &broker.bootstrap, "w1");
    let (rows, dlq) = wait_delivered(dir.path(), 300, Duration::from_secs(90)).await;
    assert_eq!(rows + dlq, 300);
    // w2's schema gained a field: it does not fit the table, so w2 stops with 78...
    let mut schema: serde_json::Value =
        serde_json::from_str(floe::tools::quickstart::EVENT_SCHEMA).unwrap();
    schema["properties"]["extra"] = serde_json::json!({"type": "string"});
    let edited = dir.path().join("edited.schema.json");
    std::fs::write(&edited, schema.to_string()).unwrap();
    let config = config_toml(dir.path(), &broker.bootstrap, "w2", 4).replace(
        &format!("{}/config/event.schema.json", env!("CARGO_MANIFEST_DIR")),
        edited.to_str().unwrap(),
    );
    let run_to_exit = |id: &str, config: String| {
        let toml = dir.path().join(format!("{id}.toml"));
        std::fs::write(&toml, config).unwrap();
        let status = std::process::Command::new(env!("CARGO_BIN_EXE_floe"))
            .args(["run", "--config"])
            .arg(&toml)
            .stderr(std::fs::File::create(dir.path().join(format!("{id}.log"))).unwrap())
            .status()
            .unwrap();
        (status, log_of(dir.path(), id))
    };
    let (status, log) = tokio::task::block_in_place(|| run_to_exit("w2", config));
    assert_eq!(status.code(), Some(78), "{log}");
    // w3 points at another catalog (a typo in `uri`, another host's file): the table recorded at
    // activation is not there. It stops alone too; the channel is not suspended (review finding).
    let d = dir.path().display();
    let other_catalog = config_toml(dir.path(), &broker.bootstrap, "w3", 4).replace(
        &format!("uri = \"{d}/catalog.sqlite\""),
        &format!("uri = \"{d}/other-catalog.sqlite\""),
    );
    assert!(other_catalog.contains("other-catalog.sqlite"));
    let (status, log) = tokio::task::block_in_place(|| run_to_exit("w3", other_catalog));
    assert_eq!(status.code(), Some(78), "{log}");
    assert!(log.contains("is not in this worker's catalog"), "{log}");
    // ...while the channel stays active: w1 keeps delivering, and restarts fine.
    produce(&broker.bootstrap, 300, 400);
    let (rows, dlq) = wait_delivered(dir.path(), 400, Duration::from_secs(90)).await;
    assert_eq!(rows + dlq, 400, "{}", log_of(dir.path(), "w1"));
    assert!(w1.terminate().success());
    let w1 = Worker::start(dir.path(), &broker.bootstrap, "w1");
    produce(&broker.bootstrap, 400, 500);
    let (rows, dlq) = wait_delivered(dir.path(), 500, Duration::from_secs(90)).await;
    assert_eq!(
        rows + dlq,
        500,
        "restarted worker delivers: {}",
        log_of(dir.path(), "w1")
    );
    assert!(w1.terminate().success());
    assert_exactly_once(dir.path(), 500);
}

/// Found by the fresh review of issue 43: a worker of 1,000 tables took minutes to exit after
/// SIGTERM — its drain was done, but dropping the runtime waited for every blocking call still
/// queued (checkpoint probes). A Kafka call that hangs for 120 s must not hold the exit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_exits_at_once_though_a_kafka_call_hangs() {
    let broker = Broker::start();
    let dir = tempfile::tempdir().unwrap();
    let toml = config_toml(dir.path(), &broker.bootstrap, "w1", 4);
    let mut w1 = Worker::start_with_env(
        dir.path(),
        "w1",
        &toml,
        &[("FLOE_BLOCK_AT", "kafka-metadata")],
    );
    let mut blocked = false;
    for _ in 0..300 {
        if log_of(dir.path(), "w1").contains("FLOE_BLOCK_AT=kafka-metadata") {
            blocked = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        blocked,
        "the metadata call never ran:\n{}",
        log_of(dir.path(), "w1")
    );
    w1.signal("TERM");
    let status = w1.wait_exit(Duration::from_secs(30)).await;
    assert!(
        status.is_some(),
        "no exit within 30 s of SIGTERM while a Kafka call hangs:\n{}",
        log_of(dir.path(), "w1")
    );
}

// ---- table maintenance under faults ----

/// [`config_toml`] with a 64 KB buffer (many small files per hour) and maintenance that looks
/// every second and compacts closed hours at once.
fn maintaining_toml(dir: &Path, bootstrap: &str, id: &str) -> String {
    let toml = config_toml(dir, bootstrap, id, 4)
        .replace(
            "  data_freshness = \"10s\"\n",
            "  data_freshness = \"10s\"\n  buffer_size = \"64KiB\"\n",
        )
        .replace(
            "  format = \"json\"\n",
            "  format = \"json\"\n  max_record_size = \"16KiB\"\n",
        );
    format!(
        "{toml}  [channel.destination.maintenance]\n  compaction_delay = \"0s\"\n  interval = \"1s\"\n"
    )
}

/// Every retained snapshot of `it.events`, read by PyIceberg (tests/py/table_snapshots.py).
fn snapshots_py(dir: &Path) -> serde_json::Value {
    let (catalog, warehouse) = (dir.join("catalog.sqlite"), dir.join("warehouse"));
    run_py_reader(
        "table_snapshots.py",
        &[
            catalog.as_os_str(),
            warehouse.as_os_str(),
            "it.events".as_ref(),
        ],
    )
}

/// Whether the table has a snapshot whose summary names maintenance task `task`.
async fn has_maintenance_snapshot(dir: &Path, task: &str) -> bool {
    let catalog = floe::catalog::open_sql_catalog(
        &dir.join("catalog.sqlite"),
        &dir.join("warehouse"),
        "floe",
    )
    .await
    .unwrap();
    let ident = iceberg::TableIdent::from_strs(["it", "events"]).unwrap();
    let Ok(table) = catalog.load_table(&ident).await else {
        return false;
    };
    let found = table.metadata().snapshots().any(|s| {
        s.summary()
            .additional_properties
            .get(floe::iceberg::rewrite::SUMMARY_MAINTENANCE)
            .is_some_and(|t| t.contains(task))
    });
    found
}

/// Every retained snapshot reads (time travel through PyIceberg), the current one has `rows`
/// rows, and one of them is a compaction `replace`.
fn assert_every_snapshot_reads(dir: &Path, rows: u64) {
    let py = snapshots_py(dir);
    let snapshots = py["snapshots"].as_array().unwrap();
    assert!(
        snapshots.iter().any(|s| s["operation"] == "replace"),
        "a compaction committed: {py}"
    );
    // Reading every snapshot succeeded (the reader fails on a missing file); rows only grow
    // along the history (compaction and expiry keep them).
    let rows_along: Vec<u64> = snapshots
        .iter()
        .map(|s| s["rows"].as_u64().unwrap())
        .collect();
    assert!(
        rows_along.windows(2).all(|w| w[0] <= w[1]),
        "rows along the history: {rows_along:?}"
    );
    let current = snapshots.iter().find(|s| s["id"] == py["current"]).unwrap();
    assert_eq!(current["rows"], rows);
}

/// The committer is killed (abort, no cleanup: as SIGKILL) at each step of a compaction — its
/// outputs written, the replace's manifests written, the replace swapped — and restarted: every
/// record is in the table once (count == distinct ids == produced − DLQ), every retained
/// snapshot still reads, and compaction completes after the restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_committer_killed_at_each_compaction_step_loses_and_doubles_nothing() {
    let broker = Broker::start();
    let total = 3_000u64;
    produce(&broker.bootstrap, 0, total);
    let expected_bad = (0..total).filter(|id| bad_kind(*id).is_some()).count() as u64;
    for step in ["compaction-written", "rewrite-written", "rewrite-committed"] {
        let dir = tempfile::tempdir().unwrap();
        let toml = maintaining_toml(dir.path(), &broker.bootstrap, "w1");
        let mut w1 = Worker::start_with_env(dir.path(), "w1", &toml, &[("FLOE_CRASH_AT", step)]);
        let status = w1.wait_exit(Duration::from_secs(120)).await;
        let log = log_of(dir.path(), "w1");
        assert!(
            status.is_some_and(|s| !s.success()) && log.contains(&format!("FLOE_CRASH_AT={step}")),
            "w1 should abort at {step}:\n{log}"
        );
        drop(w1);
        std::fs::rename(dir.path().join("w1.log"), dir.path().join("w1-crashed.log")).unwrap();
        let w1 = Worker::start_with(dir.path(), "w1", &toml);
        let (rows, dlq) = wait_delivered(dir.path(), total, Duration::from_secs(150)).await;
        // Found by the first full run: at `rewrite-committed` everything may be delivered and
        // compacted before the abort, so wait for the restarted committer itself (a SIGTERM
        // before its signal handler is installed kills it outright).
        for _ in 0..60 {
            if has_maintenance_snapshot(dir.path(), "compaction").await
                && log_of(dir.path(), "w1").contains("committer lease taken")
            {
                break;
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        assert!(
            w1.terminate().success(),
            "w1 exits 0 on SIGTERM:\n{}",
            log_of(dir.path(), "w1")
        );
        assert_eq!(rows + dlq, total, "{step}: all delivered");
        assert_exactly_once(dir.path(), total);
        assert_every_snapshot_reads(dir.path(), total - expected_bad);
    }
}

/// A committer frozen in the middle of a compaction (SIGSTOP while its outputs are written and
/// not yet committed) past its lease: the other worker takes the committer lease and commits;
/// resumed (SIGCONT), the stale committer is fenced and none of its compaction outputs is ever
/// referenced by any snapshot; the table holds every record once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_committer_frozen_mid_compaction_is_fenced_and_its_outputs_never_referenced() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start();
    let total = 4_000u64;
    produce(&broker.bootstrap, 0, total / 2);
    let w1_toml = maintaining_toml(dir.path(), &broker.bootstrap, "w1");
    let w1 = Worker::start_with_env(
        dir.path(),
        "w1",
        &w1_toml,
        &[("FLOE_PAUSE_AT", "compaction-written")],
    );
    // w1 alone first: it holds the committer lease.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let w2 = Worker::start_with(
        dir.path(),
        "w2",
        &maintaining_toml(dir.path(), &broker.bootstrap, "w2"),
    );
    let mut paused = false;
    for _ in 0..900 {
        let log = log_of(dir.path(), "w1");
        if log.contains("FLOE_PAUSE_AT=compaction-written") {
            paused = true;
            break;
        }
        if log.contains("invalid config") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(paused, "w1 compacts:\n{}", log_of(dir.path(), "w1"));
    w1.signal("STOP");
    produce(&broker.bootstrap, total / 2, total);
    tokio::time::sleep(Duration::from_secs(15)).await;
    w1.signal("CONT");
    let (rows, dlq) = wait_delivered(dir.path(), total, Duration::from_secs(150)).await;
    tokio::time::sleep(Duration::from_secs(8)).await;
    let w1_log = log_of(dir.path(), "w1");
    assert!(w1.terminate().success(), "w1 exits 0:\n{w1_log}");
    assert!(
        w2.terminate().success(),
        "w2 exits 0:\n{}",
        log_of(dir.path(), "w2")
    );
    assert_eq!(rows + dlq, total);
    assert_exactly_once(dir.path(), total);
    // The file id of w1's paused compaction, from its "compaction written" line.
    let line = w1_log
        .lines()
        .take_while(|l| !l.contains("FLOE_PAUSE_AT"))
        .filter(|l| l.contains("compaction written"))
        .last()
        .unwrap_or_else(|| panic!("w1 logged its compaction:\n{w1_log}"))
        .to_string();
    let file_id = line
        .split("file_id=")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .unwrap_or_else(|| panic!("no file_id in {line}"))
        .to_string();
    let catalog = floe::catalog::open_sql_catalog(
        &dir.path().join("catalog.sqlite"),
        &dir.path().join("warehouse"),
        "floe",
    )
    .await
    .unwrap();
    let ident = iceberg::TableIdent::from_strs(["it", "events"]).unwrap();
    let table = catalog.load_table(&ident).await.unwrap();
    for snapshot in table.metadata().snapshots() {
        let tasks: Vec<_> = futures::TryStreamExt::try_collect(
            table
                .scan()
                .snapshot_id(snapshot.snapshot_id())
                .build()
                .unwrap()
                .plan_files()
                .await
                .unwrap(),
        )
        .await
        .unwrap();
        for t in tasks {
            assert!(
                !t.data_file_path().contains(&file_id),
                "snapshot {} references the stale committer's output {}",
                snapshot.snapshot_id(),
                t.data_file_path()
            );
        }
    }
}

/// `floe maintain` catches up a table whose workers ran with maintenance off: with the workers
/// stopped it takes the committer lease, compacts every closed hour to one file, sweeps, and
/// exits 0, the rows unchanged; while a worker holds and renews the lease it refuses (75).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn floe_maintain_compacts_a_stopped_channel_and_refuses_beside_a_live_committer() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start();
    let total = 3_000u64;
    produce(&broker.bootstrap, 0, total);
    let expected_bad = (0..total).filter(|id| bad_kind(*id).is_some()).count() as u64;
    let on = maintaining_toml(dir.path(), &broker.bootstrap, "w1");
    let off = on.replace(
        "  [channel.destination.maintenance]\n",
        "  [channel.destination.maintenance]\n  enabled = false\n",
    );
    let w1 = Worker::start_with(dir.path(), "w1", &off);
    let (rows, dlq) = wait_delivered(dir.path(), total, Duration::from_secs(150)).await;
    assert_eq!(rows + dlq, total);
    let config = dir.path().join("maintain.toml");
    std::fs::write(&config, &on).unwrap();
    let maintain = || {
        std::process::Command::new(env!("CARGO_BIN_EXE_floe"))
            .args(["maintain", "--config"])
            .arg(&config)
            .output()
            .unwrap()
    };
    // Beside the live committer: refused.
    let refused = maintain();
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(75), "{stderr}");
    assert!(stderr.contains("holds the committer lease"), "{stderr}");
    assert!(w1.terminate().success());
    let before = snapshots_py(dir.path());
    let files_before: u64 = before["snapshots"].as_array().unwrap().last().unwrap()
        ["files_by_partition"]
        .as_object()
        .unwrap()
        .values()
        .map(|v| v.as_u64().unwrap())
        .sum();
    let describe = || {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_floe"))
            .args(["channel", "describe", "--config"])
            .arg(&config)
            .args(["it", "--json"])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let d: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert!(
            d[0]["table_health"].is_object(),
            "describe shows the table's health: {d}"
        );
        d[0].clone()
    };
    let health = describe()["table_health"].clone();
    assert!(
        health["partitions_to_compact"].as_u64().unwrap() > 0,
        "{health}"
    );
    assert!(health["last_maintenance"].is_null(), "{health}");
    // A compaction that fails (its input files gone) is reported and exits non-zero, never
    // "nothing to do": the data files are moved away for one run, then back.
    let moved = dir.path().join("moved-away");
    let data_files = parquet_files(&dir.path().join("warehouse"));
    assert!(!data_files.is_empty());
    std::fs::create_dir_all(&moved).unwrap();
    for (i, f) in data_files.iter().enumerate() {
        std::fs::rename(f, moved.join(i.to_string())).unwrap();
    }
    let failed = maintain();
    let stderr = String::from_utf8_lossy(&failed.stderr);
    assert_eq!(failed.status.code(), Some(75), "{stderr}");
    assert!(stderr.contains("compaction failed"), "{stderr}");
    for (i, f) in data_files.iter().enumerate() {
        std::fs::rename(moved.join(i.to_string()), f).unwrap();
    }
    // Workers stopped: one pass.
    let done = maintain();
    let stdout = String::from_utf8_lossy(&done.stdout);
    assert!(
        done.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&done.stderr)
    );
    assert!(stdout.contains("compaction"), "{stdout}");
    assert_exactly_once(dir.path(), total);
    assert_every_snapshot_reads(dir.path(), total - expected_bad);
    let after = snapshots_py(dir.path());
    let current = after["snapshots"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["id"] == after["current"])
        .unwrap()
        .clone();
    let described = describe();
    let health = described["table_health"].clone();
    // last_commit is the last data commit, never the maintenance snapshot on top of it, nor
    // the commit of floe maintain's own epoch before it (issue 35): it is the newest of the
    // shards' last commits.
    assert_eq!(current["operation"], "replace", "{current}");
    assert_ne!(described["snapshot_id"], after["current"], "{described}");
    let newest_shard_commit = described["shards"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|s| s["last_commit_at"].as_str())
        .max()
        .unwrap_or_else(|| panic!("every shard committed: {described}"))
        .to_string();
    assert_eq!(
        described["last_commit_at"].as_str(),
        Some(newest_shard_commit.as_str()),
        "{described}"
    );
    assert_eq!(health["partitions_to_compact"], 0, "{health}");
    assert!(
        health["last_maintenance"]
            .as_str()
            .unwrap()
            .contains("compaction"),
        "{health}"
    );
    let per_hour = current["files_by_partition"].as_object().unwrap();
    assert!(
        per_hour.values().all(|v| v == 1),
        "one file per closed hour after the pass (from {files_before} files): {per_hour:?}"
    );
}

/// Three workers share a channel at data_freshness 10 s while records keep arriving: each hands
/// off every 5 s, and the committer gathers their batches, committing at most once per 5 s — so
/// snapshots per hour do not grow with the number of workers (without the spacing, each worker's
/// batch got its own commit, about a second apart).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commits_gather_every_workers_batches_at_most_once_per_half_the_freshness() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start();
    let workers: Vec<Worker> = ["w1", "w2", "w3"]
        .iter()
        .map(|id| Worker::start(dir.path(), &broker.bootstrap, id))
        .collect();
    let bootstrap = broker.bootstrap.clone();
    let total = 7_500u64;
    let producer = std::thread::spawn(move || {
        // 50 s of steady arrivals: at least 5 spaced commits after the first 10 s and before
        // the last 3 (40 s left one short once the first commit came late).
        for step in 0..100u64 {
            produce(&bootstrap, step * 75, step * 75 + 75);
            // A thread of its own, not an async worker thread.
            #[allow(clippy::disallowed_methods)]
            std::thread::sleep(Duration::from_millis(500));
        }
    });
    tokio::task::spawn_blocking(move || producer.join().unwrap())
        .await
        .unwrap();
    let (rows, dlq) = wait_delivered(dir.path(), total, Duration::from_secs(120)).await;
    for w in workers {
        assert!(w.terminate().success());
    }
    assert_eq!(rows + dlq, total);
    assert_exactly_once(dir.path(), total);
    let catalog = floe::catalog::open_sql_catalog(
        &dir.path().join("catalog.sqlite"),
        &dir.path().join("warehouse"),
        "floe",
    )
    .await
    .unwrap();
    let table = catalog
        .load_table(&iceberg::TableIdent::from_strs(["it", "events"]).unwrap())
        .await
        .unwrap();
    let mut times: Vec<i64> = table
        .metadata()
        .snapshots()
        .filter(|s| {
            s.summary()
                .additional_properties
                .get("added-records")
                .is_some_and(|n| n != "0")
        })
        .map(|s| s.timestamp_ms())
        .collect();
    times.sort();
    // The commits while all three workers were reading: not the drain at shutdown (not
    // spaced), and not the first 10 s, while the workers joining are balanced (a graceful
    // hand-off has the committer commit every second until the moving shard's batches are in,
    // docs/design.md "One shard at a time").
    let settled = times.first().copied().unwrap_or(0) + 10_000;
    let steady: Vec<i64> = times[..times.len().saturating_sub(3)]
        .iter()
        .copied()
        .filter(|t| *t >= settled)
        .collect();
    let gaps: Vec<i64> = steady.windows(2).map(|w| w[1] - w[0]).collect();
    assert!(gaps.len() >= 4, "commits: {times:?}");
    assert!(
        gaps.iter().all(|g| *g >= 4_500),
        "commits at least ~5 s apart while three workers hand off: gaps {gaps:?}"
    );
}

/// Every `.parquet` file under `dir`, recursively.
fn parquet_files(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "parquet") {
                out.push(path);
            }
        }
    }
    out
}
