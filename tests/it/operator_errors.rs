//! What a new operator trips on (issue 35), with the real binary: an unreachable broker logs
//! librdkafka's errors at the promised rate and the last line names the key; `floe setup`
//! without AWS credentials says so in one line; `floe run` refuses a missing schema file as
//! `floe validate` does, before it creates anything; and a closed stdout ends a command quietly.

use crate::common;

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::*;

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A host name that never resolves (`.invalid` is reserved, RFC 2606).
const NO_SUCH_BROKER: &str = "floe-no-such-broker.invalid:9092";

/// librdkafka reports an unresolvable broker in bursts (about 30 lines within a millisecond per
/// client); docs/operations.md promises one error every 10 s. Each kind of line is logged at
/// most once per 10 s, and the line saying the start failed (and will be retried) names the key
/// and the address. Issue 44: SIGTERM during those retries stops `floe run` within a few
/// seconds (it waited up to ~30 s for the metadata requests), says it was stopped, and exits 0.
#[tokio::test]
async fn an_unreachable_broker_logs_each_error_once_per_10_s_and_the_last_line_names_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let toml = config_toml(dir.path(), NO_SUCH_BROKER, "w1", 6);
    let worker = Worker::start_with(dir.path(), "w1", &toml);
    let started = Instant::now();
    // The first attempt gives up after its 3 metadata fetches of about 10 s.
    let failed = wait_for_log(
        dir.path(),
        "starting the channel failed",
        Duration::from_secs(60),
    )
    .await;
    let elapsed = started.elapsed();
    let (status, stopping) = terminate_timed(worker);
    let log = log_of(dir.path(), "w1");
    assert_stopped_quickly(status, stopping, &log);
    let client_lines: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("librdkafka:") || l.contains("kafka client error"))
        .collect();
    assert!(
        !client_lines.is_empty(),
        "librdkafka's errors are logged:\n{log}"
    );
    // Lines of one kind: the same message once the addresses and timings are left out.
    let mut by_kind: std::collections::BTreeMap<String, usize> = Default::default();
    for line in &client_lines {
        *by_kind.entry(kind_of(line)).or_default() += 1;
    }
    let allowed = (elapsed.as_secs() / 10 + 1) as usize;
    assert!(
        by_kind.values().all(|n| *n <= allowed),
        "at most {allowed} lines of each kind in {elapsed:?}: {by_kind:#?}\n{log}"
    );
    assert!(
        failed.contains(&format!(
            "channel[0].source.bootstrap_servers = \"{NO_SUCH_BROKER}\""
        )),
        "{failed}"
    );
}

/// Waits up to `timeout` for a line of worker w1's log containing `needle`; returns it.
async fn wait_for_log(dir: &Path, needle: &str, timeout: Duration) -> String {
    let deadline = Instant::now() + timeout;
    loop {
        let log = log_of(dir, "w1");
        if let Some(line) = log.lines().find(|l| l.contains(needle)) {
            return line.to_string();
        }
        assert!(Instant::now() < deadline, "no line with {needle:?}:\n{log}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// SIGTERM, then the exit status and how long the worker took to exit.
fn terminate_timed(worker: Worker) -> (std::process::ExitStatus, Duration) {
    let at = Instant::now();
    let status = worker.terminate();
    (status, at.elapsed())
}

/// A worker stopped while it waited for a dependency exits 0 within a few seconds and says
/// it was stopped, not that it failed.
#[track_caller]
fn assert_stopped_quickly(status: std::process::ExitStatus, stopping: Duration, log: &str) {
    assert_eq!(status.code(), Some(0), "{log}");
    assert!(
        stopping < Duration::from_secs(5),
        "stopped in {stopping:?}:\n{log}"
    );
    assert!(
        log.contains("stopped by a signal while starting the channel"),
        "{log}"
    );
    assert!(!log.contains("floe run failed"), "{log}");
}

/// Issue 44: an unreachable schema registry is named by its key, as a broker is
/// (`channel[0].schema.registry_url = "…"`), and SIGTERM during the retries stops at once.
#[tokio::test]
async fn an_unreachable_registry_is_named_by_its_key_and_a_signal_stops_the_retries() {
    let dir = tempfile::tempdir().unwrap();
    let registry = format!("http://127.0.0.1:{}", free_port());
    let toml = config_toml(dir.path(), NO_SUCH_BROKER, "w1", 6)
        .replace("format = \"json\"", "format = \"json_sr\"")
        .replace(
            &format!(
                "file = \"{}/config/event.schema.json\"",
                env!("CARGO_MANIFEST_DIR")
            ),
            &format!("registry_url = \"{registry}\"\n  subject = \"events-value\""),
        );
    assert!(toml.contains("registry_url"), "{toml}");
    let worker = Worker::start_with(dir.path(), "w1", &toml);
    let failed = wait_for_log(
        dir.path(),
        "starting the channel failed",
        Duration::from_secs(60),
    )
    .await;
    let (status, stopping) = terminate_timed(worker);
    let log = log_of(dir.path(), "w1");
    assert!(
        failed.contains(&format!("channel[0].schema.registry_url = \"{registry}\"")),
        "{failed}"
    );
    assert_stopped_quickly(status, stopping, &log);
}

/// A log line without its timestamp, numbers and the `left_out` count: the lines librdkafka
/// repeats are then equal.
fn kind_of(line: &str) -> String {
    let text = line.split_once(' ').map_or(line, |(_, rest)| rest);
    text.split_whitespace()
        .filter(|w| !w.starts_with("left_out="))
        .map(|w| w.replace(|c: char| c.is_ascii_digit(), "#"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// `floe setup` (here for a DynamoDB lease store) with no AWS credentials anywhere: one line
/// saying so, where floe looked and what to set; the SDK's chain only with `--log-format json`.
#[test]
fn setup_without_aws_credentials_says_so_in_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let shipped = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/config/kinesis-dynamodb.toml"
    ))
    .unwrap();
    // Never AWS itself, should credentials turn up after all.
    let toml = shipped.replacen(
        "region = \"us-east-1\"",
        "region = \"us-east-1\"\nendpoint_url = \"http://127.0.0.1:9\"",
        1,
    );
    assert_ne!(toml, shipped);
    let config = dir.path().join("floe.toml");
    std::fs::write(&config, toml).unwrap();
    // An instance metadata service that refuses every request (403), as on a host where IMDS
    // is turned off for the instance or behind a proxy: the SDK reports a provider error, not
    // "not loaded" (found by a fresh-user run on such a host).
    let imds = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let imds_url = format!("http://{}", imds.local_addr().unwrap());
    std::thread::spawn(move || {
        use std::io::{Read, Write};
        for stream in imds.incoming() {
            let Ok(mut stream) = stream else { return };
            let mut buf = [0u8; 4096];
            let _ = stream.read(&mut buf);
            let _ = stream.write_all(
                b"HTTP/1.1 403 Forbidden\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
            );
        }
    });
    let setup_with = |format: &str, imds: Option<&str>| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_floe"));
        cmd.args(["--log-format", format, "setup", "--config"])
            .arg(&config)
            // An empty credential environment: no variables, no ~/.aws, no instance metadata.
            .env_clear()
            .env("HOME", dir.path());
        match imds {
            Some(url) => cmd.env("AWS_EC2_METADATA_SERVICE_ENDPOINT", url),
            None => cmd.env("AWS_EC2_METADATA_DISABLED", "true"),
        };
        cmd.output().unwrap()
    };
    let setup = |format: &str| setup_with(format, None);
    for imds in [None, Some(imds_url.as_str())] {
        let o = setup_with("text", imds);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(78), "{imds:?}: {err}");
        let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
        assert_eq!(lines.len(), 1, "{imds:?}: one line:\n{err}");
        let line = lines[0];
        for needle in [
            "no AWS credentials were found",
            "AWS_ACCESS_KEY_ID",
            "profile \"default\"",
            "instance metadata",
            "[aws] profile",
        ] {
            assert!(line.contains(needle), "{needle}: {line}");
        }
        assert!(line.len() < 600, "{} characters: {line}", line.len());
    }
    // The SDK's chain is kept for JSON logs.
    let o = setup("json");
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(78), "{err}");
    let failed = err
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|v| v["fields"]["message"] == "floe setup failed")
        .unwrap_or_else(|| panic!("a JSON error line:\n{err}"));
    assert!(
        failed["fields"]["error"]
            .as_str()
            .unwrap()
            .starts_with("no AWS credentials were found"),
        "{failed}"
    );
    assert!(
        failed["fields"]["detail"]
            .as_str()
            .is_some_and(|d| d.len() > 20),
        "{failed}"
    );
}

/// `floe run` on a configuration whose schema file is missing refuses exactly as `floe
/// validate` does, naming `channel[0].schema.file`, before it touches the lease store or the
/// catalog.
#[test]
fn run_refuses_a_missing_schema_file_by_its_key_before_creating_any_store() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.schema.json");
    let toml = config_toml(dir.path(), NO_SUCH_BROKER, "w1", 6).replace(
        &format!("{}/config/event.schema.json", env!("CARGO_MANIFEST_DIR")),
        missing.to_str().unwrap(),
    );
    let config = dir.path().join("floe.toml");
    std::fs::write(&config, toml).unwrap();
    let floe = |command: &str| {
        Command::new(env!("CARGO_BIN_EXE_floe"))
            .args([command, "--config"])
            .arg(&config)
            .output()
            .unwrap()
    };
    let validated = floe("validate");
    let problem = String::from_utf8_lossy(&validated.stdout).into_owned();
    assert_eq!(validated.status.code(), Some(1), "{problem}");
    assert!(problem.starts_with("channel[0].schema.file: "), "{problem}");
    let run = floe("run");
    let err = stderr(&run);
    assert_eq!(run.status.code(), Some(78), "{err}");
    assert!(err.contains(problem.trim()), "{err}");
    for store in ["leases.sqlite", "catalog.sqlite", "dlq", "warehouse"] {
        assert!(
            !dir.path().join(store).exists(),
            "{store} was created:\n{err}"
        );
    }
}

/// `floe channel describe --json | head` and `floe validate | head`: stdout's reader is gone;
/// the command ends quietly (exit 141, as after SIGPIPE), no panic, no backtrace.
#[test]
fn a_closed_stdout_ends_a_command_quietly() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("floe.toml");
    std::fs::write(&config, config_toml(dir.path(), NO_SUCH_BROKER, "w1", 6)).unwrap();
    let config = config.to_str().unwrap();
    for args in [
        vec!["channel", "describe", "--config", config, "it", "--json"],
        vec!["channel", "list", "--config", config],
        vec!["validate", "--config", config],
    ] {
        let o = with_closed_stdout(dir.path(), &args);
        let err = stderr(&o);
        assert!(
            matches!(o.status.code(), Some(0) | Some(141)),
            "{args:?}: {:?}\n{err}",
            o.status
        );
        assert!(
            !err.contains("panicked") && !err.contains("Broken pipe"),
            "{args:?}:\n{err}"
        );
    }
}

/// Runs floe with a stdout pipe whose reader was closed before it started.
fn with_closed_stdout(dir: &Path, args: &[&str]) -> Output {
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    Command::new(env!("CARGO_BIN_EXE_floe"))
        .args(args)
        .current_dir(dir)
        .env("RUST_BACKTRACE", "1")
        .stdout(Stdio::from(writer))
        .stderr(Stdio::piped())
        .output()
        .unwrap()
}

/// Issue 44: `floe records check` exits with a code a CI gate can use: 0 when every record would
/// be a row, 1 when one would go to the DLQ, 2 when the check cannot run; and it checks a
/// channel whose spec has no hour (`--partition none`).
#[test]
fn records_check_exit_code_says_whether_a_record_goes_to_the_dlq() {
    let dir = tempfile::tempdir().unwrap();
    let schema = dir.path().join("s.json");
    std::fs::write(
        &schema,
        r#"{"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"]}"#,
    )
    .unwrap();
    let check = |input: &str, extra: &[&str]| {
        let path = dir.path().join("in.jsonl");
        std::fs::write(&path, input).unwrap();
        Command::new(env!("CARGO_BIN_EXE_floe"))
            .args(["records", "check", "--schema"])
            .arg(&schema)
            .args(extra)
            .arg(&path)
            .output()
            .unwrap()
    };
    let good = check("{\"id\": 1}\n{\"id\": 2}\n", &["--partition", "none"]);
    assert_eq!(good.status.code(), Some(0), "{}", stderr(&good));
    let line: serde_json::Value =
        serde_json::from_slice(good.stdout.split(|b| *b == b'\n').next().unwrap()).unwrap();
    assert_eq!(line["partition"], serde_json::json!({}), "{line}");
    assert!(line.get("hour").is_none(), "no time field, no hour: {line}");
    let bad = check("{\"id\": 1}\n{\"id\": \"x\"}\n", &["--partition", "none"]);
    assert_eq!(bad.status.code(), Some(1), "{}", stderr(&bad));
    assert_eq!(String::from_utf8_lossy(&bad.stdout).lines().count(), 2);
    // No date-time field and no spec: the setup is refused.
    let refused = check("{\"id\": 1}\n", &[]);
    assert_eq!(refused.status.code(), Some(2), "{}", stderr(&refused));
    assert!(
        stderr(&refused).contains("date-time"),
        "{}",
        stderr(&refused)
    );
}
