//! `floe quickstart --format avro|protobuf` end to end, as a user runs it: the binary against a
//! Confluent-compatible registry of the test's own (deploy/local's `schema_registry.py`, from
//! `FLOE_TEST_SCHEMA_REGISTRY_SERVER`), for a few seconds. It must exit 0 with every record in
//! the table or the DLQ exactly once, the bad records under their codes, and the table created
//! from the registered schema with that format's mapping (PyIceberg reads it back). Without a
//! registry it refuses at setup, naming `deploy/local/schema-registry.sh start`.

use crate::common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Output};

use common::{free_port, run_py_reader, OwnRegistry};
use floe::dlq::LocalDlq;
use floe::tools::sample_events::{event_json, FramedBadKind};

/// Records the quickstart produces in these tests: `--rate` × `--seconds`.
const RATE: u64 = 200;
const SECONDS: u64 = 3;

fn quickstart(dir: &Path, format: &str, registry_url: &str) -> Output {
    Command::new(env!("CARGO_BIN_EXE_floe"))
        .args([
            "quickstart",
            "--format",
            format,
            "--registry-url",
            registry_url,
        ])
        .arg("--dir")
        .arg(dir)
        .args([
            "--seconds",
            &SECONDS.to_string(),
            "--rate",
            &RATE.to_string(),
        ])
        .output()
        .expect("run floe quickstart")
}

/// Runs the quickstart in `format` and checks the reconciliation, the DLQ by id and the rows;
/// returns the table as PyIceberg reads it.
fn runs_exactly_once(format: &str) -> serde_json::Value {
    let registry = OwnRegistry::start(&["--port", "0"], &[]);
    let dir = tempfile::tempdir().unwrap();
    let qs = dir.path().join("qs");
    let out = quickstart(&qs, format, &registry.url);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let total = RATE * SECONDS;
    let bad: BTreeMap<u64, &str> = (0..total)
        .filter(|id| id % 100 == 37)
        .map(|id| {
            let kind = FramedBadKind::ALL[(id / 100) as usize % FramedBadKind::ALL.len()];
            (id, kind.expected_code())
        })
        .collect();
    let good = total - bad.len() as u64;
    assert!(
        stdout.lines().any(|l| l
            == format!(
                "produced {total}, delivered {good}, dead-lettered {}, missing 0, duplicated 0",
                bad.len()
            )),
        "{stdout}"
    );
    assert!(stdout.contains("under subject events-value"), "{stdout}");
    let toml = std::fs::read_to_string(qs.join("floe.toml")).unwrap();
    assert!(toml.contains(&format!("format = \"{format}\"")), "{toml}");
    assert!(
        toml.contains(&format!("registry_url = \"{}\"", registry.url)),
        "{toml}"
    );
    let dlq: BTreeMap<u64, String> = LocalDlq::new(qs.join("dlq"), "quickstart")
        .read_published()
        .unwrap()
        .into_iter()
        .map(|e| (e.key.unwrap().parse().unwrap(), e.error_code))
        .collect();
    let want: BTreeMap<u64, String> = bad.iter().map(|(id, c)| (*id, c.to_string())).collect();
    assert_eq!(dlq, want, "each bad record once, under its code");
    let table = run_py_reader(
        "read_table.py",
        &[
            qs.join("catalog.sqlite").as_os_str(),
            qs.join("warehouse").as_os_str(),
            "quickstart.events".as_ref(),
            "--ids".as_ref(),
            "1,2,3".as_ref(),
        ],
    );
    assert_eq!(table["rows"], good, "{table}");
    assert_eq!(table["distinct_ids"], good, "{table}");
    assert_eq!(table["schema"]["event_time"], "timestamptz", "{table}");
    assert_eq!(table["partition_spec"][0]["source"], "event_time");
    for id in 1..=3u64 {
        let row = &table["sample"][id.to_string()];
        let json: serde_json::Value =
            serde_json::from_str(&event_json(id, 42, 1_783_627_200_000, 3)).unwrap();
        assert_eq!(row["value"], json["value"], "{id}: {row}");
        assert_eq!(row["tags"], json["tags"], "{id}: {row}");
        assert_eq!(row["attrs"], json["attrs"], "{id}: {row}");
        assert_eq!(row["user"]["tier"], json["user"]["tier"], "{id}: {row}");
    }
    table
}

#[test]
fn avro_quickstart_delivers_exactly_once_into_avros_mapping() {
    let table = runs_exactly_once("avro");
    assert_eq!(table["schema"]["amount"], "decimal(38, 2)", "{table}");
    assert_eq!(table["schema"]["user.tier"], "int", "{table}");
    for id in 1..=3u64 {
        // The decimal exactly, as the JSON text has it (two digits after the point).
        let json = event_json(id, 42, 1_783_627_200_000, 3);
        let text = json.split("\"amount\":").nth(1).unwrap().split(',').next();
        assert_eq!(
            table["sample"][id.to_string()]["amount"].as_str(),
            text,
            "{id}"
        );
    }
}

#[test]
fn protobuf_quickstart_delivers_exactly_once_into_protobufs_mapping() {
    let table = runs_exactly_once("protobuf");
    assert_eq!(table["schema"]["amount"], "double", "{table}");
    assert_eq!(table["schema"]["user.tier"], "int", "{table}");
}

#[test]
fn binary_formats_refuse_to_start_without_a_registry() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("http://127.0.0.1:{}", free_port());
    let out = quickstart(&dir.path().join("qs"), "protobuf", &url);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains(&url), "{stderr}");
    assert!(
        stderr.contains("deploy/local/schema-registry.sh start"),
        "{stderr}"
    );
    assert!(!dir.path().join("qs/catalog.sqlite").exists());
}

/// The ```python blocks of the "Reading the tables" section of docs/operations.md.
fn reading_snippets() -> Vec<String> {
    let page = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/operations.md"))
        .unwrap();
    let start = page.find("\n## Reading the tables\n").expect("the section");
    let section = &page[start + 1..];
    let section = &section[..section.find("\n## ").unwrap_or(section.len())];
    section
        .split("```python\n")
        .skip(1)
        .map(|b| b[..b.find("```").unwrap()].to_string())
        .collect()
}

/// Issue 44: the PyIceberg and DuckDB snippets of docs/operations.md run as written against a
/// table floe wrote (`floe quickstart`, JSON), with only the catalog path, warehouse and table
/// name they say to replace; each reads every delivered row.
#[test]
fn the_table_reading_snippets_of_the_docs_run_as_written() {
    let dir = tempfile::tempdir().unwrap();
    let qs = dir.path().join("qs");
    let out = Command::new(env!("CARGO_BIN_EXE_floe"))
        .args(["quickstart", "--seconds", "2", "--rate", "100", "--dir"])
        .arg(&qs)
        .output()
        .expect("run floe quickstart");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The reconciliation line: `produced P, delivered D, dead-lettered Q, …`.
    let delivered: u64 = stdout
        .lines()
        .find(|l| l.starts_with("produced ") && l.contains(", delivered "))
        .and_then(|l| l.split(", delivered ").nth(1))
        .and_then(|rest| rest.split(',').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{stdout}"));
    let snippets = reading_snippets();
    assert_eq!(snippets.len(), 2, "PyIceberg and DuckDB: {snippets:#?}");
    let mut outputs = Vec::new();
    for (i, snippet) in snippets.iter().enumerate() {
        assert!(
            snippet.contains("/var/lib/floe/catalog.sqlite"),
            "{snippet}"
        );
        let script = snippet
            .replace("/var/lib/floe", &qs.display().to_string())
            .replace("sales.orders", "quickstart.events");
        let path = dir.path().join(format!("snippet{i}.py"));
        std::fs::write(&path, script).unwrap();
        let out = Command::new(common::python()).arg(&path).output().unwrap();
        assert!(
            out.status.success(),
            "snippet {i} failed:\n{snippet}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        outputs.push(String::from_utf8_lossy(&out.stdout).into_owned());
    }
    let pyiceberg: Vec<&str> = outputs[0].lines().collect();
    let checkpoints: serde_json::Value = serde_json::from_str(pyiceberg[0]).unwrap();
    assert!(
        checkpoints.as_object().is_some_and(|c| !c.is_empty()),
        "{}",
        outputs[0]
    );
    assert_eq!(pyiceberg[1], delivered.to_string(), "{}", outputs[0]);
    assert_eq!(
        outputs[1].trim(),
        format!("({delivered}, {delivered})"),
        "DuckDB reads every row once"
    );
}
