//! What an operator watches, checked during a real pipeline run: `floe channel create`, then a
//! `floe run` process against a Kafka-protocol broker; `/metrics` is scraped and its values are
//! compared with what the table and the DLQ hold; `/healthz` and `/readyz` answer; one JSON log
//! line per committed batch; `floe channel describe` shows owners, checkpoints and lag; and
//! `floe channel delete` stops the running channel and releases its leases.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::*;

fn floe(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_floe"))
        .args(args)
        .output()
        .expect("run floe")
}

struct Run(Child);

impl Drop for Run {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

async fn wait_for(what: &str, timeout: Duration, mut ok: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !ok() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

fn log(dir: &Path) -> String {
    std::fs::read_to_string(dir.join("w1.log")).unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_health_and_delivery_logs_match_what_was_delivered() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start();
    let (run, addr, config) = start_ready_worker(dir.path(), &broker).await;
    let config_arg = config.to_str().unwrap();

    let total = 2_000u64;
    produce(&broker.bootstrap, 0, total);
    let (rows, dlq) = wait_delivered(dir.path(), total, Duration::from_secs(120)).await;
    assert_eq!(rows + dlq, total, "{}", log(dir.path()));
    let expected_bad = (0..total).filter(|id| bad_kind(*id).is_some()).count() as u64;
    assert_eq!(dlq, expected_bad);

    let scrape = scrape_once_counted(&addr, rows, dlq).await;
    let s = samples(&scrape);
    assert_counters_match_delivery(&scrape, total, rows, dlq);
    assert_histograms(&scrape);
    let batches = committed_batch_log_lines(dir.path(), rows, dlq);
    assert_catalog_loads_grow_with_commits_not_time(&addr, &s, batches).await;
    assert_describe_shows_owner_checkpoints_and_no_lag(config_arg);
    assert_delete_drains_and_keeps_the_data(dir.path(), &addr, config_arg, (rows, dlq)).await;
    assert_sigterm_exits_cleanly(run, dir.path()).await;
}

/// Writes the config (metrics on a free port), creates channel `it` and starts `floe run`;
/// returns once `/healthz` and `/readyz` answer: (the process, the metrics address, the config).
async fn start_ready_worker(dir: &Path, broker: &Broker) -> (Run, String, PathBuf) {
    let addr = format!("127.0.0.1:{}", free_port());
    let config = dir.join("floe.toml");
    std::fs::write(
        &config,
        config_toml(dir, &broker.bootstrap, "w1", 6).replace(
            "metrics_address = \"off\"",
            &format!("metrics_address = \"{addr}\""),
        ),
    )
    .unwrap();
    let config_arg = config.to_str().unwrap();
    let created = floe(&["channel", "create", "--config", config_arg, "it"]);
    assert!(created.status.success(), "{created:?}");

    let run = Run(Command::new(env!("CARGO_BIN_EXE_floe"))
        .args(["--log-format", "json", "run", "--config", config_arg])
        .env("RUST_LOG", "info")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("w1.log")).unwrap())
        .spawn()
        .unwrap());
    wait_for("/healthz", Duration::from_secs(60), || {
        get(&addr, "/healthz") == Some((200, "ok\n".into()))
    })
    .await;
    assert_eq!(get(&addr, "/nope").map(|r| r.0), Some(404));
    // Ready once the worker holds leases and the catalog answers.
    wait_for("/readyz", Duration::from_secs(60), || {
        get(&addr, "/readyz").is_some_and(|r| r.0 == 200)
    })
    .await;
    let (_, ready) = get(&addr, "/readyz").unwrap();
    let ready: serde_json::Value = serde_json::from_str(&ready).unwrap();
    assert_eq!(ready["ready"], true);
    assert_eq!(ready["channels"][0]["channel"], "it");
    (run, addr, config)
}

/// The first `/metrics` scrape that counts `rows` delivered and `dlq` dead-lettered.
async fn scrape_once_counted(addr: &str, rows: u64, dlq: u64) -> String {
    // The committer counts after the commit round returns: wait for the scrape to catch up.
    let mut scrape = String::new();
    wait_for("rows in /metrics", Duration::from_secs(20), || {
        scrape = get(addr, "/metrics").map(|r| r.1).unwrap_or_default();
        let s = samples(&scrape);
        sum(&s, "floe_rows_delivered_total", &[]) == rows as f64
            && sum(&s, "floe_rows_dead_lettered_total", &[]) == dlq as f64
    })
    .await;
    scrape
}

/// The counters and gauges of `scrape` against what was delivered.
fn assert_counters_match_delivery(scrape: &str, total: u64, rows: u64, dlq: u64) {
    let s = samples(scrape);
    let ch = r#"channel="it""#;
    assert_eq!(sum(&s, "floe_rows_delivered_total", &[ch]), rows as f64);
    assert_eq!(sum(&s, "floe_rows_dead_lettered_total", &[ch]), dlq as f64);
    // One worker, no lease changes: every record read once.
    assert_eq!(sum(&s, "floe_records_read_total", &[ch]), total as f64);
    assert!(sum(&s, "floe_bytes_read_total", &[ch]) > total as f64 * 50.0);
    assert!(sum(&s, "floe_commits_total", &[ch, r#"outcome="committed""#]) >= 1.0);
    assert_eq!(
        sum(&s, "floe_commits_total", &[r#"outcome="rejected""#]),
        0.0
    );
    assert_eq!(
        sum(&s, "floe_leases_held", &[ch, r#"kind="shard""#]),
        4.0,
        "{scrape}"
    );
    assert_eq!(
        sum(&s, "floe_leases_held", &[ch, r#"kind="committer""#]),
        1.0
    );
    assert_eq!(sum(&s, "floe_data_freshness_target_seconds", &[ch]), 10.0);
    assert_eq!(
        sum(&s, "floe_channel_info", &[ch, r#"format="json""#]),
        1.0,
        "{scrape}"
    );
    assert_eq!(sum(&s, "floe_pending_batches", &[ch]), 0.0);
    assert!(
        sum(
            &s,
            "floe_dlq_writes_total",
            &[ch, r#"stage="stage""#, r#"outcome="ok""#]
        ) >= 1.0
    );
    assert!(
        sum(
            &s,
            "floe_dlq_writes_total",
            &[ch, r#"stage="publish""#, r#"outcome="ok""#]
        ) >= 1.0
    );
    assert_eq!(
        sum(&s, "floe_dlq_writes_total", &[r#"outcome="failed""#]),
        0.0
    );
}

/// Histograms are real Prometheus histograms, with HELP text.
fn assert_histograms(scrape: &str) {
    let s = samples(scrape);
    let ch = r#"channel="it""#;
    assert!(
        scrape.contains("# TYPE floe_commit_duration_seconds histogram"),
        "{scrape}"
    );
    assert!(scrape.contains("# TYPE floe_data_file_size_bytes histogram"));
    assert!(scrape.contains("# HELP floe_rows_delivered_total rows committed to the Iceberg table"));
    let commits = sum(&s, "floe_commit_duration_seconds_count", &[ch]);
    assert!(commits >= 1.0);
    assert_eq!(
        sum(
            &s,
            "floe_commit_duration_seconds_bucket",
            &[ch, r#"le="+Inf""#]
        ),
        commits
    );
    let files = sum(&s, "floe_data_files_written_total", &[ch]);
    assert!(files >= 1.0);
    assert_eq!(sum(&s, "floe_data_file_size_bytes_count", &[ch]), files);
}

/// One JSON log line per committed batch; their rows and DLQ rows add up. Returns the number of
/// batches.
fn committed_batch_log_lines(dir: &Path, rows: u64, dlq: u64) -> usize {
    let lines: Vec<serde_json::Value> = log(dir)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|l| l["fields"]["message"] == "batch committed")
        .collect();
    assert!(!lines.is_empty(), "{}", log(dir));
    let logged_rows: u64 = lines
        .iter()
        .map(|l| l["fields"]["rows"].as_u64().unwrap())
        .sum();
    let logged_dlq: u64 = lines
        .iter()
        .map(|l| l["fields"]["dlq_rows"].as_u64().unwrap())
        .sum();
    assert_eq!((logged_rows, logged_dlq), (rows, dlq));
    for field in [
        "shards",
        "files",
        "bytes",
        "commit_latency_ms",
        "snapshot_id",
        "batch_id",
    ] {
        assert!(
            !lines[0]["fields"][field].is_null(),
            "{field}: {}",
            lines[0]
        );
    }
    assert_eq!(lines[0]["fields"]["channel"], "it");

    lines.len()
}

/// Catalog loads grow with commits, not with time: the worker loads the table when it opens
/// its sink, when it gains shards and once per batch that left the pending set; an idle
/// committer loads nothing (but for the SHARD_END hint check at its first idle round, after a
/// failed hint write and every 30 minutes). `s` is the scrape
/// taken when the delivery was counted.
async fn assert_catalog_loads_grow_with_commits_not_time(
    addr: &str,
    s: &std::collections::BTreeMap<String, f64>,
    batches: usize,
) {
    let ch = r#"channel="it""#;
    let loads = |s: &std::collections::BTreeMap<String, f64>, by: &str| {
        sum(
            s,
            "floe_catalog_table_loads_total",
            &[ch, &format!("by=\"{by}\"")],
        )
    };
    // The worker loads the table once it sees its last batch leave the pending set, which may
    // come after the committer's counters: the baseline is taken once nothing read is
    // uncommitted on the worker (its freshness gauge back at 0), not before (a race that failed
    // this test on a loaded machine).
    let mut settled = String::new();
    wait_for("the worker settled", Duration::from_secs(30), || {
        settled = get(addr, "/metrics").map(|r| r.1).unwrap_or_default();
        sum(&samples(&settled), "floe_data_freshness_seconds", &[ch]) == 0.0
    })
    .await;
    let worker_loads = loads(&samples(&settled), "worker");
    assert!(worker_loads >= 1.0);
    assert!(
        worker_loads <= batches as f64 + 4.0,
        "{worker_loads} worker loads for {} batches",
        batches
    );
    tokio::time::sleep(Duration::from_secs(6)).await;
    let idle = samples(&get(addr, "/metrics").unwrap().1);
    assert_eq!(
        loads(&idle, "worker"),
        worker_loads,
        "an idle worker loads nothing"
    );
    assert!(
        loads(&idle, "committer") - loads(s, "committer") <= 1.0,
        "an idle committer loads at most once in 6 s: {} then {}",
        loads(s, "committer"),
        loads(&idle, "committer")
    );
}

/// `floe channel describe`: every shard owned by w1, with its checkpoint, no lag, a last commit.
fn assert_describe_shows_owner_checkpoints_and_no_lag(config_arg: &str) {
    let o = floe(&[
        "channel", "describe", "--config", config_arg, "it", "--json",
    ]);
    assert!(o.status.success(), "{o:?}");
    let d: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let shards = d[0]["shards"].as_array().unwrap();
    assert_eq!(shards.len(), 4);
    for shard in shards {
        assert_eq!(shard["owner"], "w1", "{d}");
        assert!(shard["checkpoint"].is_string(), "{d}");
        assert_eq!(shard["lag_records"], 0, "{d}");
        assert!(shard["last_commit_at"].is_string(), "{d}");
    }
    assert_eq!(d[0]["committer"], "w1");
}

/// `floe channel delete`: the running worker drains the channel and releases every lease; the
/// data stays.
async fn assert_delete_drains_and_keeps_the_data(
    dir: &Path,
    addr: &str,
    config_arg: &str,
    (rows, dlq): (u64, u64),
) {
    let ch = r#"channel="it""#;
    let o = floe(&[
        "channel", "delete", "--config", config_arg, "it", "--wait", "60s",
    ]);
    assert!(o.status.success(), "{o:?}\n{}", log(dir));
    wait_for("/readyz 503 after delete", Duration::from_secs(20), || {
        get(addr, "/readyz").is_some_and(|r| r.0 == 503)
    })
    .await;
    let s = samples(&get(addr, "/metrics").unwrap().1);
    assert_eq!(sum(&s, "floe_leases_held", &[ch]), 0.0);
    assert_eq!(delivered(dir).await, (rows, dlq), "delivered data is kept");
    assert_eq!(
        get(addr, "/healthz").map(|r| r.0),
        Some(200),
        "the process lives on"
    );
}

/// SIGTERM: the process drains and exits 0.
async fn assert_sigterm_exits_cleanly(mut run: Run, dir: &Path) {
    Command::new("kill")
        .args(["-TERM", &run.0.id().to_string()])
        .status()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(status) = run.0.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "no exit after SIGTERM");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(status.success(), "{}", log(dir));
}
