//! `floe channel …` as an operator runs it: the real binary against an SQLite lease store and
//! an SQL catalog in a temporary directory. Each lifecycle transition, each validation refusal
//! (exit 78, the message naming the key path), and exit 1 for an unavailable catalog.

use crate::common;

use std::path::Path;
use std::process::{Command, Output};

use common::*;

/// A broker nobody listens on: `channel` commands never need one (describe's lag is then
/// not shown).
const NO_BROKER: &str = "127.0.0.1:9";

fn floe(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_floe"))
        .args(args)
        .env("RUST_LOG", "warn")
        .output()
        .expect("run floe")
}

fn channel(dir: &Path, args: &[&str]) -> Output {
    let config = dir.join("floe.toml");
    let mut all = vec!["channel", args[0], "--config", config.to_str().unwrap()];
    all.extend_from_slice(&args[1..]);
    floe(&all)
}

fn write_config(dir: &Path, edit: impl Fn(String) -> String) {
    std::fs::write(
        dir.join("floe.toml"),
        edit(config_toml(dir, NO_BROKER, "w1", 6)),
    )
    .unwrap();
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn json(o: &Output) -> serde_json::Value {
    serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("{e}: stdout {} stderr {}", stdout(o), stderr(o)))
}

#[track_caller]
fn assert_exit(o: &Output, code: i32) {
    assert_eq!(
        o.status.code(),
        Some(code),
        "stdout:\n{}\nstderr:\n{}",
        stdout(o),
        stderr(o)
    );
}

fn state_of(dir: &Path) -> String {
    let o = channel(dir, &["list", "--json"]);
    assert_exit(&o, 0);
    json(&o)[0]["state"].as_str().unwrap().to_string()
}

#[test]
fn channel_lifecycle_create_update_delete_and_create_again() {
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), |c| c);
    assert_eq!(state_of(dir.path()), "NOT_CREATED");

    // create: CREATING -> ACTIVE, with the activation time and the table created.
    let o = channel(dir.path(), &["create", "it", "--json"]);
    assert_exit(&o, 0);
    let created = json(&o);
    assert_eq!(created[0]["state"], "ACTIVE");
    let activated = created[0]["activated_at_ms"].as_i64().unwrap();
    assert!(created[0]["table_uuid"].is_string());
    // Idempotent: creating an ACTIVE channel changes nothing.
    let o = channel(dir.path(), &["create", "it", "--json"]);
    assert_exit(&o, 0);
    assert_eq!(json(&o)[0]["activated_at_ms"].as_i64(), Some(activated));

    let o = channel(dir.path(), &["describe", "it", "--json"]);
    assert_exit(&o, 0);
    let d = &json(&o)[0];
    assert_eq!(d["state"], "ACTIVE");
    assert_eq!(d["table"], "it.events");
    // Issue 44: the catalog the table was read from, by its identity.
    let catalog = format!("sql:floe:{}", dir.path().join("catalog.sqlite").display());
    assert_eq!(d["catalog"], catalog.as_str());
    assert_eq!(d["data_freshness_seconds"], 10.0);
    assert_eq!(d["pending_batches"], 0);
    let text = stdout(&channel(dir.path(), &["describe", "it"]));
    assert!(
        text.contains("state            ACTIVE") && text.contains("LEASE_COUNTER"),
        "{text}"
    );
    assert!(
        text.contains(&format!("  catalog          {catalog}\n")),
        "{text}"
    );

    // update: data freshness and delivery logs only, validated.
    let o = channel(
        dir.path(),
        &[
            "update",
            "it",
            "--data-freshness",
            "60s",
            "--delivery-log",
            "failures",
        ],
    );
    assert_exit(&o, 0);
    let d = json(&channel(dir.path(), &["describe", "it", "--json"]));
    assert_eq!(d[0]["data_freshness_seconds"], 60.0);
    assert_eq!(d[0]["configured_data_freshness_seconds"], 10.0);
    assert_eq!(d[0]["delivery_log"], "failures");
    let o = channel(dir.path(), &["update", "it", "--data-freshness", "5s"]);
    assert_exit(&o, 78);
    assert!(stderr(&o).contains("data_freshness"), "{}", stderr(&o));
    let o = channel(dir.path(), &["update", "it"]);
    assert_exit(&o, 78);
    assert!(stderr(&o).contains("nothing to change"), "{}", stderr(&o));
    // Other settings cannot be updated at all.
    let o = channel(dir.path(), &["update", "it", "--table", "other"]);
    assert_exit(&o, 2);

    // delete: DELETING; run refuses it; update refuses it.
    let o = channel(dir.path(), &["delete", "it", "--wait", "5s"]);
    assert_exit(&o, 0);
    assert!(stdout(&o).contains("DELETING"), "{}", stdout(&o));
    assert_eq!(state_of(dir.path()), "DELETING");
    let o = channel(dir.path(), &["update", "it", "--data-freshness", "30s"]);
    assert_exit(&o, 78);
    assert!(stderr(&o).contains("DELETING"), "{}", stderr(&o));
    let config = dir.path().join("floe.toml");
    let o = floe(&["run", "--config", config.to_str().unwrap()]);
    assert_exit(&o, 78);
    assert!(stderr(&o).contains("DELETING"), "{}", stderr(&o));

    // create again: ACTIVE, a new activation; the settings changed by update are kept.
    let o = channel(dir.path(), &["create", "it", "--json"]);
    assert_exit(&o, 0);
    let again = json(&o);
    assert_eq!(again[0]["state"], "ACTIVE");
    assert!(again[0]["activated_at_ms"].as_i64().unwrap() >= activated);
    assert_eq!(again[0]["overrides"]["data_freshness_ms"], 60_000);
}

#[test]
fn create_refuses_an_invalid_channel_naming_the_field_and_records_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let schema = dir.path().join("s.json");
    write_config(dir.path(), |c| {
        c.replace(
            &format!("{}/config/event.schema.json", env!("CARGO_MANIFEST_DIR")),
            schema.to_str().unwrap(),
        )
    });
    let refused = |schema_text: &str, needle: &str| {
        std::fs::write(&schema, schema_text).unwrap();
        let o = channel(dir.path(), &["create", "it"]);
        assert_exit(&o, 78);
        let err = stderr(&o);
        assert!(
            err.contains("channel[0].schema.file") && err.contains(needle),
            "{needle}: {err}"
        );
        assert_eq!(state_of(dir.path()), "NOT_CREATED");
    };
    // Nesting 17 (16 is the limit).
    let mut deep = r#"{"type":"string"}"#.to_string();
    for _ in 0..17 {
        deep = format!(r#"{{"type":"object","properties":{{"x":{deep}}}}}"#);
    }
    refused(
        &format!(
            r#"{{"type":"object","properties":{{"event_time":{{"type":"string","format":"date-time"}},"deep":{deep}}}}}"#
        ),
        "16",
    );
    // The partition field is not a date-time.
    refused(
        r#"{"type":"object","properties":{"event_time":{"type":"string"}}}"#,
        "event_time",
    );
    // No such field.
    refused(
        r#"{"type":"object","properties":{"id":{"type":"integer"}}}"#,
        "event_time",
    );
    // Not resolvable: a remote $ref.
    refused(
        r#"{"type":"object","properties":{"event_time":{"type":"string","format":"date-time"},"u":{"$ref":"https://example.com/u.json"}}}"#,
        "$ref",
    );
    std::fs::remove_file(&schema).unwrap();
    let o = channel(dir.path(), &["create", "it"]);
    assert_exit(&o, 78);
    assert!(
        stderr(&o).contains("channel[0].schema.file: cannot read"),
        "{}",
        stderr(&o)
    );

    // The DLQ is not writable: its path is a file.
    std::fs::copy(
        format!("{}/config/event.schema.json", env!("CARGO_MANIFEST_DIR")),
        &schema,
    )
    .unwrap();
    // (The refused creates above made the DLQ directory: a probe needs no schema.)
    let _ = std::fs::remove_dir_all(dir.path().join("dlq"));
    std::fs::write(dir.path().join("dlq"), "not a directory").unwrap();
    let o = channel(dir.path(), &["create", "it"]);
    assert_exit(&o, 78);
    assert!(stderr(&o).contains("channel[0].dlq.path"), "{}", stderr(&o));
    assert_eq!(state_of(dir.path()), "NOT_CREATED");

    // Names are lowercase (configuration validation), and the channel must be in the file.
    write_config(dir.path(), |c| c.replace("name = \"it\"", "name = \"It\""));
    let o = channel(dir.path(), &["create"]);
    assert_exit(&o, 78);
    assert!(stderr(&o).contains("channel[0].name"), "{}", stderr(&o));
    write_config(dir.path(), |c| c);
    let o = channel(dir.path(), &["create", "nope"]);
    assert_exit(&o, 78);
    assert!(stderr(&o).contains("no channel \"nope\""), "{}", stderr(&o));
    let o = channel(dir.path(), &["delete", "it"]);
    assert_exit(&o, 78);
    assert!(stderr(&o).contains("does not exist"), "{}", stderr(&o));

    // A KMS key given as an alias instead of a key ARN.
    write_config(dir.path(), |c| {
        let dlq = c.find("  [channel.dlq]").unwrap();
        format!(
            "{}  [channel.dlq]\n  kind = \"s3\"\n  bucket = \"dlq-bucket\"\n  kms_key_arn = \"alias/floe\"\n",
            &c[..dlq]
        )
    });
    let o = channel(dir.path(), &["create", "it"]);
    assert_exit(&o, 78);
    assert!(
        stderr(&o).contains("channel[0].dlq.kms_key_arn") && stderr(&o).contains("alias"),
        "{}",
        stderr(&o)
    );
}

/// `floe run` activating a channel (no state yet) that finds a table floe must not write records
/// the channel FAILED for every worker, like `floe channel create`.
#[tokio::test]
async fn run_activating_a_channel_onto_a_foreign_table_fails_the_channel() {
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), |c| c);
    foreign_table(dir.path()).await;
    let config = dir.path().join("floe.toml");
    let o = floe(&["run", "--config", config.to_str().unwrap()]);
    assert_exit(&o, 78);
    assert!(
        stderr(&o).contains("floe did not create it"),
        "{}",
        stderr(&o)
    );
    assert_eq!(state_of(dir.path()), "FAILED");
}

#[tokio::test]
async fn a_table_floe_did_not_create_fails_the_channel_until_it_is_deleted() {
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), |c| c);
    foreign_table(dir.path()).await;
    let o = channel(dir.path(), &["create", "it"]);
    assert_exit(&o, 78);
    assert!(
        stderr(&o).contains("channel[0].destination.table")
            && stderr(&o).contains("floe did not create it"),
        "{}",
        stderr(&o)
    );
    assert_eq!(state_of(dir.path()), "FAILED");
    // FAILED is not recoverable: create and run refuse it; delete, then create, works.
    let o = channel(dir.path(), &["create", "it"]);
    assert_exit(&o, 78);
    assert!(stderr(&o).contains("delete"), "{}", stderr(&o));
    let config = dir.path().join("floe.toml");
    let o = floe(&["run", "--config", config.to_str().unwrap()]);
    assert_exit(&o, 78);
    assert!(stderr(&o).contains("FAILED"), "{}", stderr(&o));
    let d = json(&channel(dir.path(), &["describe", "it", "--json"]));
    assert!(
        d[0]["status_reason"]
            .as_str()
            .unwrap()
            .contains("floe did not create it"),
        "{d}"
    );
    assert_exit(&channel(dir.path(), &["delete", "it"]), 0);
    write_config(dir.path(), |c| {
        c.replace("table = \"events\"", "table = \"events2\"")
    });
    let o = channel(dir.path(), &["create", "it"]);
    assert_exit(&o, 0);
    assert_eq!(state_of(dir.path()), "ACTIVE");
}

#[test]
fn an_unavailable_catalog_exits_1_and_create_resumes_from_creating() {
    let dir = tempfile::tempdir().unwrap();
    // The catalog's directory cannot be created (its parent is a file).
    std::fs::write(dir.path().join("blocked"), "").unwrap();
    write_config(dir.path(), |c| {
        c.replace(
            &format!("uri = \"{}/catalog.sqlite\"", dir.path().display()),
            &format!("uri = \"{}/blocked/catalog.sqlite\"", dir.path().display()),
        )
    });
    let o = channel(dir.path(), &["create", "it"]);
    assert_exit(&o, 1);
    assert!(stderr(&o).contains("stays CREATING"), "{}", stderr(&o));
    assert_eq!(state_of(dir.path()), "CREATING");
    write_config(dir.path(), |c| c);
    // An unfinished create is not delivered by `floe run`.
    let config = dir.path().join("floe.toml");
    let o = floe(&["run", "--config", config.to_str().unwrap()]);
    assert_exit(&o, 78);
    assert!(stderr(&o).contains("CREATING"), "{}", stderr(&o));
    assert_exit(&channel(dir.path(), &["create", "it"]), 0);
    assert_eq!(state_of(dir.path()), "ACTIVE");
}
