//! Fan-out by a field (`table = "{route}"`, docs/routing.md): one Kafka topic delivered to
//! three tables by each record's `region`, by two `floe run` workers, one SIGKILLed mid-run
//! and restarted; PyIceberg then checks by id that every table holds exactly its records once,
//! and the DLQs hold exactly the unroutable and the bad records once.

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::Duration;

use common::*;
use floe::dlq::LocalDlq;

/// The routed tables, in name order (the first writes the unroutable records' DLQ entries).
pub(crate) const TABLES: [&str; 3] = ["events_ap", "events_eu", "events_us"];

/// What record `id` is, and where it must end up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fate {
    /// A row of this table.
    Row(&'static str),
    /// A DLQ entry of this table's member, with this code.
    Dead(&'static str, &'static str),
}

/// How records are framed (`record.format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Format {
    /// `json`.
    Json,
    /// `gsr_json`, payloads zlib-compressed or not (the route field is read after inflating).
    GsrJson,
}

/// The one GSR schema version of the `gsr_json` run.
const VERSION: &str = "3f36e6d8-d20e-43b7-90ea-3ad724880d60";

/// Record `id` as produced in `format`, and its fate.
fn framed(format: Format, id: u64) -> (Vec<u8>, Fate) {
    let (json, fate) = record(id);
    match format {
        Format::Json => (json, fate),
        // Not framed at all: refused by the first table's member, as the unroutable ones.
        Format::GsrJson if id % 97 == 60 => (json, Fate::Dead("events_ap", "INVALID_SCHEMA")),
        Format::GsrJson => {
            let version = uuid::Uuid::parse_str(VERSION).unwrap();
            (gsr_frame(version, id.is_multiple_of(2), &json), fate)
        }
    }
}

/// Record `id`'s JSON document and fate: regions eu/us/ap (an unknown region and a missing
/// one among them), some records the schema refuses (in their region's table's DLQ), some
/// that are not JSON (in the first table's DLQ, as the unroutable ones).
fn record(id: u64) -> (Vec<u8>, Fate) {
    let time = "2026-07-09T20:15:00Z";
    if id % 97 == 50 {
        return (
            b"{not json".to_vec(),
            Fate::Dead("events_ap", "DESERIALIZATION_ERROR"),
        );
    }
    let (region, fate) = match id % 10 {
        0..=2 => ("\"eu\"", Fate::Row("events_eu")),
        3..=5 => ("\"us\"", Fate::Row("events_us")),
        6 | 7 => ("\"ap\"", Fate::Row("events_ap")),
        8 => ("\"mars\"", Fate::Dead("events_ap", "UNROUTABLE")),
        _ => ("", Fate::Dead("events_ap", "UNROUTABLE")),
    };
    if let (7, Fate::Row(table)) = (id % 31, fate) {
        // The value is not a number: refused by its region's table.
        let json = format!(r#"{{"id":{id},"event_time":"{time}","value":"x","region":{region}}}"#);
        return (json.into_bytes(), Fate::Dead(table, "TYPE_MISMATCH"));
    }
    let json = if region.is_empty() {
        format!(r#"{{"id":{id},"event_time":"{time}","value":1.5}}"#)
    } else {
        format!(r#"{{"id":{id},"event_time":"{time}","value":1.5,"region":{region}}}"#)
    };
    (json.into_bytes(), fate)
}

fn config(format: Format, dir: &Path, bootstrap: &str, id: &str) -> String {
    let schema = dir.join("region.schema.json");
    let text = config_toml(dir, bootstrap, id, 4)
        .replace(
            "  table = \"events\"\n",
            "  table = \"{route}\"\n  route_field = \"region\"\n  routes = { eu = \"events_eu\", us = \"events_us\", ap = \"events_ap\" }\n",
        )
        .replace(
            &format!("{}/config/event.schema.json", env!("CARGO_MANIFEST_DIR")),
            &schema.display().to_string(),
        );
    match format {
        Format::Json => text,
        Format::GsrJson => text
            .replace("format = \"json\"", "format = \"gsr_json\"")
            .replace(
                "  [channel.destination]\n",
                &format!(
                    "    [channel.schema.versions]\n    \"{VERSION}\" = \"{}\"\n  [channel.destination]\n",
                    schema.display()
                ),
            ),
    }
}

fn member_dlq(dir: &Path, table: &str) -> LocalDlq {
    LocalDlq::new(dir.join("dlq"), format!("it.{table}"))
}

/// Waits (at most 120 s) until the three tables and their members' DLQs hold `total` records;
/// returns how many they hold.
pub(crate) async fn wait_everywhere(dir: &Path, total: u64) -> u64 {
    let started = std::time::Instant::now();
    let mut seen = 0;
    while started.elapsed() < Duration::from_secs(120) {
        seen = delivered_everywhere(dir).await;
        if seen >= total {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    seen
}

/// Rows of the three tables plus published DLQ entries of their members.
async fn delivered_everywhere(dir: &Path) -> u64 {
    let mut total = 0;
    for table in TABLES {
        let (rows, dead) = common::delivered_to(dir, "it", table, &format!("it.{table}")).await;
        total += rows + dead;
    }
    total
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_topic_fanned_out_by_a_field_lands_once_per_table_through_a_sigkill() {
    fan_out(Format::Json, 4_000, true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gsr_json_records_are_routed_by_their_inflated_document() {
    fan_out(Format::GsrJson, 1_000, false).await;
}

/// Produces `total` records in `format` (half before the workers start, half after), runs two
/// workers (SIGKILLing and restarting one when `kill`) and checks every table and DLQ by id.
async fn fan_out(format: Format, total: u64, kill: bool) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("region.schema.json"),
        r#"{"type":"object","properties":{"id":{"type":"integer"},"event_time":{"type":"string","format":"date-time"},"value":{"type":"number"},"region":{"type":"string"}},"required":["id","event_time","value"]}"#,
    )
    .unwrap();
    let broker = Broker::start();
    let payload = |id: u64| framed(format, id).0;
    produce_payloads(&broker.bootstrap, 0..total / 2, payload);
    let (d, b) = (dir.path(), broker.bootstrap.as_str());
    let mut w1 = Worker::start_with(d, "w1", &config(format, d, b, "w1"));
    let w2 = Worker::start_with(d, "w2", &config(format, d, b, "w2"));
    if kill {
        // Both read and hand off batches; then one is killed while batches are pending.
        tokio::time::sleep(Duration::from_secs(10)).await;
    }
    produce_payloads(&broker.bootstrap, total / 2..total, payload);
    if kill {
        w1.signal("KILL");
        drop(w1);
        tokio::time::sleep(Duration::from_secs(2)).await;
        w1 = Worker::start_with(d, "w1", &config(format, d, b, "w1"));
    }
    let seen = wait_everywhere(d, total).await;
    assert!(w1.terminate().success(), "w1 exits 0:\n{}", log_of(d, "w1"));
    assert!(w2.terminate().success(), "w2 exits 0:\n{}", log_of(d, "w2"));
    assert_eq!(seen, total, "all delivered; w2's log:\n{}", log_of(d, "w2"));

    landed_once(d, total, |id| framed(format, id).1);
}

/// Checks with PyIceberg that each of [`TABLES`] holds exactly the rows of the records
/// `0..total` whose `fate` is a row of it, each once, and that its member's DLQ holds exactly
/// the records whose fate is a DLQ entry of it, each once with its code (an `UNROUTABLE` entry
/// names `/region`).
pub(crate) fn landed_once(d: &Path, total: u64, fate: impl Fn(u64) -> Fate) {
    let mut rows: BTreeMap<&str, BTreeSet<u64>> = BTreeMap::new();
    let mut dead: BTreeMap<(&str, &str), BTreeSet<u64>> = BTreeMap::new();
    for id in 0..total {
        match fate(id) {
            Fate::Row(t) => rows.entry(t).or_default().insert(id),
            Fate::Dead(t, code) => dead.entry((t, code)).or_default().insert(id),
        };
    }
    let all: Vec<u64> = (0..total).collect();
    for table in TABLES {
        let read = run_py_reader(
            "read_table.py",
            &[
                d.join("catalog.sqlite").as_os_str(),
                d.join("warehouse").as_os_str(),
                format!("it.{table}").as_ref(),
                "--ids".as_ref(),
                all.iter()
                    .map(u64::to_string)
                    .collect::<Vec<_>>()
                    .join(",")
                    .as_ref(),
            ],
        );
        let expected = &rows[table];
        assert_eq!(read["rows"], expected.len() as u64, "{table}: count(*)");
        assert_eq!(
            read["distinct_ids"],
            expected.len() as u64,
            "{table}: no id twice"
        );
        let ids: BTreeSet<u64> = read["sample"]
            .as_object()
            .unwrap()
            .keys()
            .map(|k| k.parse().unwrap())
            .collect();
        assert_eq!(&ids, expected, "{table}: exactly its records");

        let entries = member_dlq(d, table).read_published().unwrap();
        let mut by_code: BTreeMap<String, Vec<u64>> = BTreeMap::new();
        for e in &entries {
            by_code
                .entry(e.error_code.clone())
                .or_default()
                .push(e.key.as_deref().unwrap().parse().unwrap());
        }
        let expected: BTreeMap<String, Vec<u64>> = dead
            .iter()
            .filter(|((t, _), _)| *t == table)
            .map(|((_, code), ids)| (code.to_string(), ids.iter().copied().collect()))
            .collect();
        for ids in by_code.values_mut() {
            ids.sort();
        }
        assert_eq!(by_code, expected, "{table}: DLQ entries by code, each once");
        if table == "events_ap" {
            let unroutable = entries
                .iter()
                .find(|e| e.error_code == "UNROUTABLE")
                .unwrap();
            assert_eq!(unroutable.field, "/region");
        }
    }
}

/// `floe channel <args>` with the config `<dir>/floe.toml`.
fn channel_cli(dir: &Path, args: &[&str]) -> std::process::Output {
    let config = dir.join("floe.toml");
    let mut all = vec!["channel", args[0], "--config", config.to_str().unwrap()];
    all.extend_from_slice(&args[1..]);
    std::process::Command::new(env!("CARGO_BIN_EXE_floe"))
        .args(&all)
        .env("RUST_LOG", "warn")
        .output()
        .expect("run floe")
}

/// The routed channel has no table of its own: `floe channel create|describe` act on a member
/// by its name, on every member by the channel's; `floe channel delete <channel>` stops every
/// member of a running worker and waits for their leases.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn channel_commands_reach_the_members_and_delete_stops_them_all() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(
        d.join("region.schema.json"),
        r#"{"type":"object","properties":{"id":{"type":"integer"},"event_time":{"type":"string","format":"date-time"},"value":{"type":"number"},"region":{"type":"string"}},"required":["id","event_time","value"]}"#,
    )
    .unwrap();
    let broker = Broker::start();
    let toml = config(Format::Json, d, &broker.bootstrap, "w1");
    std::fs::write(d.join("floe.toml"), &toml).unwrap();
    let text = |o: &std::process::Output| {
        format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        )
    };

    // By name, a member; the channel's name stands for its members.
    let o = channel_cli(d, &["create", "it.events_eu"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let o = channel_cli(d, &["create", "it"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let o = channel_cli(d, &["describe", "it"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    for table in TABLES {
        assert!(
            text(&o).contains(&format!("channel it.{table}\n")),
            "{}",
            text(&o)
        );
        assert!(
            text(&o).contains(&format!("it.{table} (uuid ")),
            "{}",
            text(&o)
        );
    }

    let total = 300;
    produce_payloads(&broker.bootstrap, 0..total, |id| record(id).0);
    let metrics = format!("127.0.0.1:{}", free_port());
    let w1 = Worker::start_with(
        d,
        "w1",
        &toml.replace(
            "metrics_address = \"off\"",
            &format!("metrics_address = \"{metrics}\""),
        ),
    );
    let started = std::time::Instant::now();
    while delivered_everywhere(d).await < total && started.elapsed() < Duration::from_secs(60) {
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert_eq!(delivered_everywhere(d).await, total, "{}", log_of(d, "w1"));
    // Each member read every record and skipped the other tables' (read once each here: one
    // worker, no rewind).
    let scrape = samples(&get(&metrics, "/metrics").expect("metrics").1);
    for table in TABLES {
        let kept = (0..total)
            // UNROUTABLE and not-JSON records are the first table's.
            .filter(|id| matches!(record(*id).1, Fate::Row(t) | Fate::Dead(t, _) if t == table))
            .count() as f64;
        let channel = format!("channel=\"it.{table}\"");
        assert_eq!(
            sum(&scrape, "floe_records_read_total", &[&channel]),
            total as f64,
            "{table}"
        );
        assert_eq!(
            sum(&scrape, "floe_records_skipped_total", &[&channel]),
            total as f64 - kept,
            "{table}"
        );
    }
    each_new_record_is_fetched_once(d, &broker.bootstrap, &metrics, &scrape, total).await;
    let o = channel_cli(d, &["delete", "it", "--wait", "30s"]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}\n{}",
        text(&o),
        log_of(d, "w1")
    );
    let store = floe::lease::sql::SqlLeaseStore::open_sqlite(d.join("leases.sqlite"))
        .await
        .unwrap();
    for table in TABLES {
        let leases = floe::lease::LeaseStore::list_leases(&store, &format!("it.{table}"))
            .await
            .unwrap();
        assert!(!leases.is_empty(), "{table}");
        assert!(
            leases.iter().all(|l| l.owner.is_none()),
            "{table}: every lease released: {leases:?}"
        );
    }
    assert!(w1.terminate().success(), "{}", log_of(d, "w1"));
    // Deleted with its members; created again with them.
    let state = |name: String| {
        let store = &store;
        async move {
            floe::lease::BatchStore::get_channel_state(store, &name)
                .await
                .unwrap()
                .map(|s| s.state)
        }
    };
    let names = || std::iter::once("it".to_string()).chain(TABLES.map(|t| format!("it.{t}")));
    for name in names() {
        assert_eq!(
            state(name.clone()).await,
            Some(floe::lease::ChannelStatus::Deleting),
            "{name}"
        );
    }
    let o = channel_cli(d, &["create", "it"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    for name in names() {
        assert_eq!(
            state(name.clone()).await,
            Some(floe::lease::ChannelStatus::Active),
            "{name}"
        );
    }
}

/// Issue 43: the members of the routed channel `it` on worker `metrics` (its `/metrics`
/// address; `scrape` taken once the first `total` records were delivered) read the topic
/// through one consumer that fetches each record once for all three tables (records there
/// before the start may be fetched again for a member that started after another read past
/// them; once the members run, never): produces `total` more and checks the bytes fetched.
async fn each_new_record_is_fetched_once(
    d: &Path,
    bootstrap: &str,
    metrics: &str,
    scrape: &BTreeMap<String, f64>,
    total: u64,
) {
    let bytes = |ids: std::ops::Range<u64>| -> f64 {
        ids.map(|id| (record(id).0.len() + id.to_string().len()) as f64)
            .sum()
    };
    let fetched = |scrape: &BTreeMap<String, f64>| {
        sum(
            scrape,
            "floe_kafka_fetched_bytes_total",
            &["channel=\"it\""],
        )
    };
    let before = fetched(scrape);
    assert!(
        before >= bytes(0..total) && before <= 3.0 * bytes(0..total),
        "fetched {before} for {}",
        bytes(0..total)
    );
    produce_payloads(bootstrap, total..2 * total, |id| record(id).0);
    let started = std::time::Instant::now();
    while delivered_everywhere(d).await < 2 * total && started.elapsed() < Duration::from_secs(60) {
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert_eq!(
        delivered_everywhere(d).await,
        2 * total,
        "{}",
        log_of(d, "w1")
    );
    let scrape = samples(&get(metrics, "/metrics").expect("metrics").1);
    assert_eq!(
        fetched(&scrape) - before,
        bytes(total..2 * total),
        "each new record fetched once for the three tables"
    );
}

/// A route field the schema lacks stops `floe run` (exit 78) naming the key, before anything
/// is delivered.
#[test]
fn a_route_field_the_schema_lacks_is_refused_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(
        d.join("region.schema.json"),
        r#"{"type":"object","properties":{"id":{"type":"integer"},"event_time":{"type":"string","format":"date-time"},"value":{"type":"number"}},"required":["id","event_time","value"]}"#,
    )
    .unwrap();
    let toml = config(Format::Json, d, "127.0.0.1:9", "w1");
    let config = d.join("floe.toml");
    std::fs::write(&config, toml).unwrap();
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_floe"))
        .args(["run", "--config", config.to_str().unwrap()])
        .env("RUST_LOG", "warn")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(78), "{stderr}");
    assert!(
        stderr.contains("channel[0].destination.route_field")
            && stderr.contains("\"region\" is not a top-level field of the schema"),
        "{stderr}"
    );
}

/// A route value no record can have, given the route field's type, is refused naming
/// `routes`: an integer field routes by its decimal text (`"07"` and `"x"` never match), a
/// boolean by `true` or `false` (`"yes"` never matches); the records meant for such a table
/// would go to the DLQ or the default table instead (fresh review of issue 43).
#[test]
fn a_route_value_the_field_can_never_have_is_refused_naming_routes() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    for (kind, routes, bad) in [
        (
            "integer",
            r#"{ "7" = "events_eu", "07" = "events_us" }"#,
            "07",
        ),
        ("integer", r#"{ "-1" = "events_eu", x = "events_us" }"#, "x"),
        (
            "boolean",
            r#"{ "true" = "events_eu", yes = "events_us" }"#,
            "yes",
        ),
    ] {
        std::fs::write(
            d.join("region.schema.json"),
            format!(
                r#"{{"type":"object","properties":{{"id":{{"type":"integer"}},"event_time":{{"type":"string","format":"date-time"}},"value":{{"type":"number"}},"region":{{"type":"{kind}"}}}},"required":["id","event_time","value"]}}"#
            ),
        )
        .unwrap();
        let toml = config(Format::Json, d, "127.0.0.1:9", "w1").replace(
            r#"routes = { eu = "events_eu", us = "events_us", ap = "events_ap" }"#,
            &format!("routes = {routes}"),
        );
        let config = d.join("floe.toml");
        std::fs::write(&config, toml).unwrap();
        let o = std::process::Command::new(env!("CARGO_BIN_EXE_floe"))
            .args(["validate", "--config", config.to_str().unwrap()])
            .env("RUST_LOG", "warn")
            .output()
            .unwrap();
        let out = format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        assert_ne!(o.status.code(), Some(0), "{kind} {routes}: {out}");
        assert!(
            out.contains("channel[0].destination.routes")
                && out.contains(&format!("route value \"{bad}\" can never match")),
            "{kind} {routes}: {out}"
        );
    }
    // The values such fields do have pass.
    std::fs::write(
        d.join("region.schema.json"),
        r#"{"type":"object","properties":{"id":{"type":"integer"},"event_time":{"type":"string","format":"date-time"},"value":{"type":"number"},"region":{"type":"integer"}},"required":["id","event_time","value"]}"#,
    )
    .unwrap();
    let toml = config(Format::Json, d, "127.0.0.1:9", "w1").replace(
        r#"routes = { eu = "events_eu", us = "events_us", ap = "events_ap" }"#,
        r#"routes = { "7" = "events_eu", "-12" = "events_us", "0" = "events_ap" }"#,
    );
    std::fs::write(d.join("floe.toml"), toml).unwrap();
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_floe"))
        .args([
            "validate",
            "--config",
            d.join("floe.toml").to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
}
