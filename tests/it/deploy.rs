//! The files of `deploy/` are checked with the tools that read them, when installed: the alert
//! rules with `promtool check rules` and their unit tests with `promtool test rules`, every
//! Grafana query parsed by promtool, the systemd unit with `systemd-analyze verify`. Without
//! the tool a test says so and checks what it can without it (JSON parses, metric names exist).

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::Command;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(relative: &str) -> String {
    std::fs::read_to_string(root().join(relative)).unwrap_or_else(|e| panic!("{relative}: {e}"))
}

fn has(tool: &str) -> bool {
    Command::new(tool)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

fn run_ok(cmd: &mut Command) {
    let out = cmd.output().expect("run tool");
    assert!(
        out.status.success(),
        "{cmd:?}:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// floe's metric names, from `src/telemetry.rs`.
fn metrics() -> BTreeSet<String> {
    read("src/telemetry.rs")
        .lines()
        .filter_map(|l| l.trim().strip_prefix("pub const "))
        .filter_map(|l| l.split_once(": &str = \""))
        .filter_map(|(_, v)| v.strip_suffix("\";"))
        .map(str::to_owned)
        .collect()
}

/// Every `floe_…` name in `text` is a metric floe exports (histogram series suffixes allowed).
fn assert_known_metrics(what: &str, text: &str) {
    let known = metrics();
    let mut rest = text;
    while let Some(at) = rest.find("floe_") {
        let name: String = rest[at..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        let base = ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|s| name.strip_suffix(s))
            .unwrap_or(&name);
        assert!(
            known.contains(&name) || known.contains(base),
            "{what} uses {name}, which src/telemetry.rs does not define"
        );
        rest = &rest[at + name.len()..];
    }
}

#[test]
fn alert_rules_pass_promtool_and_their_unit_tests() {
    let rules = read("deploy/prometheus/floe-alerts.yml");
    assert_known_metrics("floe-alerts.yml", &rules);
    if !has("promtool") {
        eprintln!("promtool not installed (Debian: apt-get install prometheus): rules not parsed");
        return;
    }
    let dir = root().join("deploy/prometheus");
    run_ok(
        Command::new("promtool")
            .args(["check", "rules", "floe-alerts.yml"])
            .current_dir(&dir),
    );
    run_ok(
        Command::new("promtool")
            .args(["test", "rules", "floe-alerts.test.yml"])
            .current_dir(&dir),
    );
}

#[test]
fn grafana_queries_parse_and_use_floe_metrics() {
    let dashboard: serde_json::Value =
        serde_json::from_str(&read("deploy/grafana/floe-dashboard.json")).unwrap();
    let exprs: Vec<String> = dashboard["panels"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|p| p["targets"].as_array().unwrap().iter())
        .map(|t| t["expr"].as_str().unwrap().to_string())
        .collect();
    assert!(exprs.len() >= 12);
    for e in &exprs {
        assert_known_metrics("floe-dashboard.json", e);
    }
    if !has("promtool") {
        eprintln!("promtool not installed: dashboard queries not parsed");
        return;
    }
    // promtool parses PromQL in recording rules: one rule per query, Grafana's variables
    // replaced by values.
    let dir = tempfile::tempdir().unwrap();
    let mut rules = String::from("groups:\n  - name: dashboard\n    rules:\n");
    for (i, e) in exprs.iter().enumerate() {
        let e = e
            .replace("$__rate_interval", "1m")
            .replace("$channel", ".*");
        rules.push_str(&format!(
            "      - record: dashboard_query_{i}\n        expr: {}\n",
            serde_json::to_string(&e).unwrap()
        ));
    }
    let file = dir.path().join("dashboard-rules.yml");
    std::fs::write(&file, rules).unwrap();
    run_ok(Command::new("promtool").args(["check", "rules"]).arg(&file));
}

#[test]
fn systemd_unit_passes_systemd_analyze_verify() {
    let unit = read("deploy/floe.service");
    for line in [
        "ProtectSystem=strict",
        "RestartPreventExitStatus=78",
        "EnvironmentFile=-/etc/floe/floe.env",
        "User=floe",
    ] {
        assert!(unit.contains(line), "floe.service lacks {line}");
    }
    if !has("systemd-analyze") {
        eprintln!("systemd-analyze not installed: unit not verified");
        return;
    }
    // The unit names /usr/local/bin/floe; verify it against the binary just built.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("floe.service");
    std::fs::write(
        &path,
        unit.replace("/usr/local/bin/floe", env!("CARGO_BIN_EXE_floe")),
    )
    .unwrap();
    run_ok(Command::new("systemd-analyze").arg("verify").arg(&path));
}

#[test]
fn ecs_and_iam_files_are_json_and_the_health_check_asks_floe() {
    for f in [
        "deploy/ecs/task-definition.json",
        "deploy/ecs/service.json",
        "deploy/iam/floe-worker-policy.json",
        "deploy/iam/ecs-task-execution-policy.json",
        "deploy/iam/trust-policy-ecs-tasks.json",
    ] {
        serde_json::from_str::<serde_json::Value>(&read(f)).unwrap_or_else(|e| panic!("{f}: {e}"));
    }
    let task: serde_json::Value =
        serde_json::from_str(&read("deploy/ecs/task-definition.json")).unwrap();
    let container = &task["containerDefinitions"][0];
    assert_eq!(
        container["healthCheck"]["command"],
        serde_json::json!([
            "CMD",
            "/usr/local/bin/floe",
            "healthcheck",
            "--address",
            "127.0.0.1:9464"
        ])
    );
    // The ECS stop timeout leaves room for the graceful drain (shutdown_timeout + ~12 s).
    assert!(container["stopTimeout"].as_u64().unwrap() >= 60);
    // The image's health check is the same command.
    assert!(read("deploy/Dockerfile")
        .contains(r#"CMD ["/usr/local/bin/floe", "healthcheck", "--address", "127.0.0.1:9464"]"#));
    // No IAM statement allows every action of a service.
    let policy: serde_json::Value =
        serde_json::from_str(&read("deploy/iam/floe-worker-policy.json")).unwrap();
    let actions: Vec<&str> = policy["Statement"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|s| match &s["Action"] {
            serde_json::Value::Array(a) => a.iter().map(|a| a.as_str().unwrap()).collect(),
            a => vec![a.as_str().unwrap()],
        })
        .collect();
    assert!(actions.len() > 10, "{actions:?}");
    assert!(
        actions.iter().all(|a| !a.contains('*')),
        "wildcard action in the worker policy: {actions:?}"
    );
    // Enhanced fan-out: every Kinesis action floe calls (src/source/kinesis/) is allowed.
    for action in [
        "kinesis:ListShards",
        "kinesis:GetShardIterator",
        "kinesis:GetRecords",
        "kinesis:DescribeStreamSummary",
        "kinesis:RegisterStreamConsumer",
        "kinesis:ListStreamConsumers",
        "kinesis:DescribeStreamConsumer",
        "kinesis:SubscribeToShard",
        "kinesis:DeregisterStreamConsumer",
    ] {
        assert!(
            actions.contains(&action),
            "{action} missing from the worker policy"
        );
    }
}

/// Issue 44: the local schema registry script installs into the virtualenv `FLOE_VENV` names
/// (default: `.venv` in the checkout) and says which, so a user knows where it writes.
#[test]
fn the_schema_registry_script_installs_into_the_virtualenv_it_names() {
    use std::os::unix::fs::PermissionsExt;
    let venv = tempfile::tempdir().unwrap();
    // A virtualenv whose python answers "every pinned package is installed".
    let bin = venv.path().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::fs::write(bin.join("python"), "#!/bin/sh\ncat >/dev/null\nexit 0\n").unwrap();
    std::fs::set_permissions(bin.join("python"), std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = Command::new(root().join("deploy/local/schema-registry.sh"))
        .arg("install")
        .env("FLOE_VENV", venv.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains(&format!("installed in {}", venv.path().display())),
        "{stdout}"
    );
    let readme = read("deploy/local/README.md");
    assert!(
        readme.contains("FLOE_VENV"),
        "deploy/local/README.md names FLOE_VENV"
    );
}
