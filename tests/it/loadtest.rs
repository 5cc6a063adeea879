//! The load suite in CI (issue 8): `loadtest/chaos.sh --quick` on Kafka (floe-mock-kafka, SQLite
//! leases) and on Kinesis (the emulators' moto: Kinesis with a split and a merge, DynamoDB
//! leases, S3 warehouse and DLQ) — 3 workers killed, paused past lease expiry and restarted while
//! floe-loadgen produces, then loadtest/verify.py: zero missing, zero duplicated, DLQ codes as
//! produced — and `loadtest/bench.sh --quick` to prove the benchmark runs (its figures are not
//! checked: too noisy for CI). The three run one at a time (each is a fleet of processes).

use crate::common;

use std::path::Path;
use std::process::Command;
use std::sync::Mutex;

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn run_script(script: &str, args: &[&str]) -> String {
    let _guard = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = Command::new("bash")
        .arg(root.join(script))
        .args(args)
        .env("FLOE_BIN", env!("CARGO_BIN_EXE_floe"))
        .env("FLOE_LOADGEN_BIN", env!("CARGO_BIN_EXE_floe-loadgen"))
        .env("FLOE_MOCK_KAFKA_BIN", env!("CARGO_BIN_EXE_floe-mock-kafka"))
        .env("FLOE_PYTHON", common::python())
        .output()
        .expect("run bash");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{script} {args:?} failed ({}):\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

fn assert_chaos_passed(stdout: &str) {
    let summary = stdout
        .lines()
        .find(|l| l.starts_with("chaos: ") && l.contains(" faults "))
        .unwrap_or_else(|| panic!("no summary line:\n{stdout}"));
    assert!(
        summary.contains("missing 0, duplicated 0, wrong-partition 0"),
        "{summary}\n{stdout}"
    );
    assert!(stdout.contains(" passed, 0 failed"), "{stdout}");
    assert!(stdout.trim_end().ends_with("chaos: PASS"), "{stdout}");
}

#[test]
fn chaos_quick_on_kafka_delivers_every_record_exactly_once() {
    let stdout = run_script("loadtest/chaos.sh", &["--quick", "--source", "kafka"]);
    assert_chaos_passed(&stdout);
}

/// The change data capture scenario (issue 42): Debezium events with updates and deletes into
/// an upsert table, the committer killed and paused among the faults; loadtest/verify_cdc.py
/// then reads it with PyIceberg and DuckDB against the events' final state.
fn assert_cdc_chaos_passed(stdout: &str, deletes: &str) {
    let summary = stdout
        .lines()
        .find(|l| l.starts_with("chaos: kafka cdc upsert"))
        .unwrap_or_else(|| panic!("no summary line:\n{stdout}"));
    assert!(summary.contains("equality 0"), "{summary}");
    // Deletes were committed, by position (not every key of the run is live).
    assert!(!summary.contains(&format!("{deletes} 0,")), "{summary}");
    for reader in ["pyiceberg", "duckdb"] {
        for check in ["keys", "deleted", "missing", "values"] {
            assert!(
                stdout.contains(&format!("PASS {reader} {check}: ")),
                "{reader} {check}\n{stdout}"
            );
        }
    }
    assert!(stdout.contains(" passed, 0 failed"), "{stdout}");
    assert!(stdout.trim_end().ends_with("chaos: PASS"), "{stdout}");
}

#[test]
fn chaos_quick_cdc_keeps_the_table_equal_to_the_source_with_position_deletes() {
    let stdout = run_script(
        "loadtest/chaos.sh",
        &["--quick", "--cdc", "--format-version", "2"],
    );
    assert_cdc_chaos_passed(&stdout, "position");
}

#[test]
fn chaos_quick_cdc_keeps_the_table_equal_to_the_source_with_deletion_vectors() {
    let stdout = run_script(
        "loadtest/chaos.sh",
        &["--quick", "--cdc", "--format-version", "3", "--seed", "7"],
    );
    assert_cdc_chaos_passed(&stdout, "deletion vectors");
}

#[test]
fn chaos_quick_on_kinesis_with_s3_warehouse_delivers_every_record_exactly_once() {
    let _ = common::aws_endpoint(); // fails with instructions when the emulators are not set up
    let stdout = run_script(
        "loadtest/chaos.sh",
        &["--quick", "--source", "kinesis", "--warehouse", "s3"],
    );
    assert_chaos_passed(&stdout);
    assert!(stdout.contains("reshard split"), "{stdout}");
    assert!(stdout.contains("reshard merged"), "{stdout}");
}

#[test]
fn chaos_quick_on_kinesis_efo_delivers_every_record_exactly_once() {
    let _ = common::kinesis_efo_endpoint(); // fails with instructions without the EFO emulator
    let stdout = run_script(
        "loadtest/chaos.sh",
        &[
            "--quick",
            "--source",
            "kinesis",
            "--read-mode",
            "enhanced_fan_out",
        ],
    );
    assert_chaos_passed(&stdout);
    assert!(stdout.contains("read with enhanced_fan_out"), "{stdout}");
    assert!(stdout.contains("reshard split"), "{stdout}");
    assert!(stdout.contains("reshard merged"), "{stdout}");
}

#[test]
fn bench_quick_prints_every_figure_and_the_ratio_last() {
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path().to_str().unwrap();
    let stdout = run_script("loadtest/bench.sh", &["--quick", "--work", work]);
    for needle in [
        "floe bench convert (1 core):  records/s ",
        "pyarrow read_json+write_table (1 thread): records/s ",
        "e2e mock Kafka -> Iceberg, 1 worker, cpus 0, buffer_size 16MiB: 50000 records",
        "peak RSS",
    ] {
        assert!(stdout.contains(needle), "{needle:?} missing:\n{stdout}");
    }
    let last = stdout.trim_end().lines().last().unwrap();
    assert!(
        last.starts_with("ratio floe/pyarrow records_per_s = "),
        "{stdout}"
    );
}

/// `floe bench commits --shards N --positions sequence` (issue 17): the table's
/// `floe.checkpoints` holds one 56-digit sequence number per shard, and every commit lands.
#[test]
fn bench_commits_with_many_shards_keeps_a_checkpoint_per_shard() {
    let dir = tempfile::tempdir().unwrap();
    let shape = bench_commits_shape(
        &dir.path().join("b"),
        &[
            "--commits",
            "6",
            "--shards",
            "200",
            "--positions",
            "sequence",
            "--maintenance",
            "off",
        ],
    );
    assert_eq!(shape["shards"], 200, "{shape}");
    assert_eq!(shape["snapshots"], 6, "{shape}");
    // Per shard: `"shardId-…":"<56 digits>"` and a separator.
    let bytes = shape["checkpoints_bytes"].as_u64().unwrap();
    assert!((200 * 56..200 * 100).contains(&bytes), "{shape}");
    // A second run into the same directory is refused instead of appending to that table.
    let again = std::process::Command::new(env!("CARGO_BIN_EXE_floe"))
        .args(["bench", "commits", "--commits", "1", "--dir"])
        .arg(dir.path().join("b"))
        .output()
        .unwrap();
    assert!(!again.status.success());
    assert!(
        String::from_utf8_lossy(&again.stderr).contains("already holds a benchmark table"),
        "{}",
        String::from_utf8_lossy(&again.stderr)
    );
}

/// `floe bench commits --postgres-url` commits into a table whose SQL catalog and lease store
/// are on PostgreSQL (the test server), leaving no catalog file in `--dir`.
#[test]
fn bench_commits_on_postgres_commits_into_a_postgres_catalog() {
    let url = std::env::var("FLOE_TEST_POSTGRES_URL")
        .expect("FLOE_TEST_POSTGRES_URL (deploy/local/postgres.sh env)");
    let dir = tempfile::tempdir().unwrap();
    let shape = bench_commits_shape(
        &dir.path().join("b"),
        &[
            "--commits",
            "5",
            "--maintenance",
            "off",
            "--postgres-url",
            &url,
        ],
    );
    assert_eq!(shape["snapshots"], 5, "{shape}");
    let table = shape["table"].as_str().unwrap();
    assert!(
        table.starts_with("postgresql://") && !table.contains(":floe@"),
        "{table}"
    );
    assert!(!dir.path().join("b/catalog.sqlite").exists());
}

/// Runs `floe bench commits --dir DIR ARGS`; returns its shape line (the one with `snapshots`).
fn bench_commits_shape(dir: &std::path::Path, args: &[&str]) -> serde_json::Value {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_floe"))
        .args(["bench", "commits", "--dir"])
        .arg(dir)
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8(out.stdout).unwrap();
    stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|l| l.get("snapshots").is_some())
        .unwrap_or_else(|| panic!("no shape line in {stdout}"))
}
