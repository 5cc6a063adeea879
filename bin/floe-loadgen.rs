//! `floe-loadgen`: produces deterministic `Event` (or wide) records to Kafka, Kinesis or an
//! NDJSON file, at a target rate or as fast as possible, and writes the manifest that
//! `loadtest/verify.py` reconciles against. Thin: parses the command line, calls
//! [`floe::tools::loadgen`].
//!
//! ```text
//! floe-loadgen kafka   --bootstrap HOST:PORT --topic events   [common options]
//! floe-loadgen kinesis --stream NAME [--endpoint-url URL]     [common options]
//! floe-loadgen file    --output events.ndjson                 [common options]
//!   common: --records N --start-id 0 --rate R (0: as fast as possible) --seed 42
//!           --shape event|wide --spread-hours 3 --base-time 2026-07-09T20:00:00Z
//!           --bad-share 0.01 | --bad KIND=SHARE ... --manifest FILE
//!   change events (kafka and file): --changes --keys K --records M --updates 0.7 --deletes 0.1
//!           [--schemas-enable] [--skip-snapshot] --seed S --manifest FILE
//! ```

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{bail, Context};
use clap::{Parser, Subcommand};
use floe::tools::loadgen::changes::{self, ChangeCounts, ChangeSpec, FinalState};
use floe::tools::loadgen::{self, GenSpec, KafkaTarget, Produced};
use floe::tools::sample_events::{BadKind, Shape};
use serde_json::json;

#[derive(Parser)]
#[command(
    name = "floe-loadgen",
    version,
    about = "Produce deterministic test records to Kafka, Kinesis or a file, with a manifest"
)]
struct Cli {
    #[command(subcommand)]
    sink: Sink,
}

#[derive(Subcommand)]
enum Sink {
    /// Produce to a Kafka topic (idempotent producer, key = id).
    Kafka {
        /// Bootstrap servers, `host:port[,host:port]`.
        #[arg(long)]
        bootstrap: String,
        /// Topic.
        #[arg(long, default_value = "events")]
        topic: String,
        /// librdkafka property `KEY=VALUE` (repeatable).
        #[arg(long = "property", value_name = "KEY=VALUE")]
        properties: Vec<String>,
        #[command(flatten)]
        common: Common,
    },
    /// Produce to a Kinesis data stream (PutRecords, ≤ 500 a call, partition key = id).
    Kinesis {
        /// Stream name.
        #[arg(long)]
        stream: String,
        /// Endpoint URL (an emulator); default: AWS's.
        #[arg(long, env = "FLOE_KINESIS_ENDPOINT")]
        endpoint_url: Option<String>,
        /// Region; default: the SDK's chain (AWS_REGION).
        #[arg(long)]
        region: Option<String>,
        /// PutRecords calls in flight.
        #[arg(long, default_value_t = 4)]
        concurrency: usize,
        #[command(flatten)]
        common: Common,
    },
    /// Write NDJSON to a file (the benchmark's input).
    File {
        /// Output file.
        #[arg(long)]
        output: PathBuf,
        #[command(flatten)]
        common: Common,
    },
}

#[derive(clap::Args)]
struct Common {
    /// Number of records.
    #[arg(long, default_value_t = 100_000)]
    records: u64,
    /// First id (ids are `start_id..start_id + records`).
    #[arg(long, default_value_t = 0)]
    start_id: u64,
    /// Records per second; 0 = as fast as possible.
    #[arg(long, default_value_t = 0.0)]
    rate: f64,
    /// Random seed: the same seed and options give the same bytes.
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Record shape: `event` (8 fields, config/event.schema.json) or `wide` (40 columns,
    /// config/wide.schema.json).
    #[arg(long, default_value = "event", value_parser = ["event", "wide"])]
    shape: String,
    /// Event times are spread uniformly over this many hours (touching up to N+1 hour
    /// partitions); 0 = one second.
    #[arg(long, default_value_t = 3)]
    spread_hours: u32,
    /// Earliest event time (RFC 3339 UTC, whole seconds).
    #[arg(long, default_value = "2026-07-09T20:00:00Z")]
    base_time: String,
    /// Share of bad records (0..1), spread evenly over every kind. Default: 0.01 (none with
    /// --changes).
    #[arg(long)]
    bad_share: Option<f64>,
    /// Share of one kind of bad record, `KIND=SHARE` (repeatable; replaces --bad-share). Kinds:
    /// not_json, missing_value, missing_event_time, value_as_string, tier_out_of_range,
    /// event_time_without_offset, amount_too_precise.
    #[arg(long = "bad", value_name = "KIND=SHARE")]
    bad: Vec<String>,
    /// Manifest file (JSON lines); default: none.
    #[arg(long)]
    manifest: Option<PathBuf>,
    /// Progress line to stderr every N seconds (0: none).
    #[arg(long, default_value_t = 5)]
    progress_s: u64,
    #[command(flatten)]
    changes: ChangeArgs,
}

/// Change-event mode: Debezium-shaped change events of a `customers` table
/// (loadtest/cdc_row.schema.json) keyed by `id`; `--records` counts the change events after the
/// snapshot, `--base-time` is the first event's `ts_ms`.
#[derive(clap::Args)]
struct ChangeArgs {
    /// Produce change events instead of Event records (kafka and file sinks).
    #[arg(long)]
    changes: bool,
    /// Keys of the initial snapshot (op "r", ids 0..K) before the change events.
    #[arg(long, default_value_t = 0, requires = "changes")]
    keys: u64,
    /// Share of updates among the change events (op "u" of a live key).
    #[arg(long, default_value_t = 0.7, requires = "changes")]
    updates: f64,
    /// Share of deletes among the change events (op "d" of a live key, then a tombstone); the
    /// rest are inserts (op "c": a new id, or a deleted one coming back).
    #[arg(long, default_value_t = 0.1, requires = "changes")]
    deletes: f64,
    /// Debezium's JSON converter with schemas.enable=true: key and value as
    /// {"schema":…,"payload":…}; default: the bare payload.
    #[arg(long, requires = "changes")]
    schemas_enable: bool,
    /// Send only the change events: an earlier run with the same options and --records 0 sent
    /// the snapshot (the manifest still describes the whole final state).
    #[arg(long, requires = "changes")]
    skip_snapshot: bool,
}

fn parse_base_time(text: &str) -> anyhow::Result<i64> {
    // YYYY-MM-DDTHH:MM:SSZ only: a fixed, documented form.
    let b = text.as_bytes();
    if b.len() != 20 || b[4] != b'-' || b[10] != b'T' || b[19] != b'Z' {
        bail!("--base-time must look like 2026-07-09T20:00:00Z, got {text:?}");
    }
    let num = |r: std::ops::Range<usize>| -> anyhow::Result<i64> {
        text[r].parse::<i64>().context("--base-time")
    };
    let (y, m, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (hh, mm, ss) = (num(11..13)?, num(14..16)?, num(17..19)?);
    // Days from civil (Howard Hinnant).
    let y2 = if m <= 2 { y - 1 } else { y };
    let era = y2.div_euclid(400);
    let yoe = y2 - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Ok(((days * 86_400) + hh * 3600 + mm * 60 + ss) * 1000)
}

fn share_ppm(text: &str, what: &str) -> anyhow::Result<u32> {
    let share: f64 = text.parse().with_context(|| format!("{what}: {text:?}"))?;
    if !(0.0..=1.0).contains(&share) {
        bail!("{what} must be in 0..1, got {share}");
    }
    Ok((share * 1_000_000.0).round() as u32)
}

fn spec(c: &Common) -> anyhow::Result<GenSpec> {
    let bad_shares_ppm = if c.bad.is_empty() {
        let share = c.bad_share.unwrap_or(0.01);
        loadgen::even_shares(share_ppm(&share.to_string(), "--bad-share")?)
    } else {
        let mut out = Vec::new();
        for item in &c.bad {
            let (kind, share) = item
                .split_once('=')
                .with_context(|| format!("--bad {item:?}: expected KIND=SHARE"))?;
            let kind = BadKind::from_name(kind)
                .with_context(|| format!("--bad {item:?}: unknown kind {kind:?}"))?;
            out.push((kind, share_ppm(share, "--bad")?));
        }
        out
    };
    if bad_shares_ppm
        .iter()
        .map(|(_, p)| u64::from(*p))
        .sum::<u64>()
        > 1_000_000
    {
        bail!("bad shares add up to more than 1");
    }
    Ok(GenSpec {
        shape: if c.shape == "wide" {
            Shape::Wide
        } else {
            Shape::Event
        },
        seed: c.seed,
        start_id: c.start_id,
        records: c.records,
        base_time_ms: parse_base_time(&c.base_time)?,
        spread_hours: c.spread_hours,
        bad_shares_ppm,
    })
}

fn change_spec(c: &Common) -> anyhow::Result<ChangeSpec> {
    if c.bad_share.is_some() || !c.bad.is_empty() {
        bail!("--changes makes no bad records: leave out --bad-share and --bad");
    }
    let updates_ppm = share_ppm(&c.changes.updates.to_string(), "--updates")?;
    let deletes_ppm = share_ppm(&c.changes.deletes.to_string(), "--deletes")?;
    if updates_ppm + deletes_ppm > 1_000_000 {
        bail!("--updates and --deletes add up to more than 1");
    }
    Ok(ChangeSpec {
        seed: c.seed,
        snapshot_keys: c.changes.keys,
        changes: c.records,
        updates_ppm,
        deletes_ppm,
        schemas_enable: c.changes.schemas_enable,
        base_time_ms: parse_base_time(&c.base_time)?,
        skip_snapshot: c.changes.skip_snapshot,
    })
}

/// Prints the summary line of a change run, writes its manifest; fails when a message was not
/// acknowledged.
fn finish_changes(
    c: &Common,
    spec: &ChangeSpec,
    sink: serde_json::Value,
    (produced, counts, state): (Produced, ChangeCounts, FinalState),
) -> anyhow::Result<ExitCode> {
    if let Some(path) = &c.manifest {
        changes::write_manifest(path, spec, sink, &produced, &counts, &state)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    let secs = produced.elapsed.as_secs_f64();
    let messages = spec.sent_events() + counts.tombstones;
    println!(
        "{}",
        json!({
            "events": spec.sent_events(),
            "messages": messages,
            "acknowledged": produced.acknowledged,
            "failed": produced.failed_ids.len(),
            "by_op": counts.by_op,
            "tombstones": counts.tombstones,
            "live_keys": state.live_ids().count(),
            "bytes": produced.bytes,
            "retries": produced.retries,
            "elapsed_s": secs,
            "events_per_s": if secs > 0.0 { spec.sent_events() as f64 / secs } else { 0.0 },
        })
    );
    if !produced.failed_ids.is_empty() || produced.acknowledged != messages {
        eprintln!(
            "floe-loadgen: {} of {messages} messages not acknowledged",
            messages - produced.acknowledged.min(messages)
        );
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}

fn rate(c: &Common) -> Option<f64> {
    (c.rate > 0.0).then_some(c.rate)
}

fn finish(
    c: &Common,
    spec: &GenSpec,
    sink: serde_json::Value,
    produced: Produced,
) -> anyhow::Result<ExitCode> {
    if let Some(path) = &c.manifest {
        loadgen::write_manifest(path, spec, sink, &produced)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    let secs = produced.elapsed.as_secs_f64();
    let bad: usize = produced.bad_by_code.values().map(Vec::len).sum();
    println!(
        "{}",
        json!({
            "records": spec.records,
            "acknowledged": produced.acknowledged,
            "failed": produced.failed_ids.len(),
            "bad": bad,
            "bytes": produced.bytes,
            "retries": produced.retries,
            "elapsed_s": secs,
            "records_per_s": if secs > 0.0 { spec.records as f64 / secs } else { 0.0 },
            "mb_per_s": if secs > 0.0 { produced.bytes as f64 / secs / 1e6 } else { 0.0 },
        })
    );
    if !produced.failed_ids.is_empty() || produced.acknowledged != spec.records {
        eprintln!(
            "floe-loadgen: {} of {} records not acknowledged",
            spec.records - produced.acknowledged.min(spec.records),
            spec.records
        );
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}

#[tokio::main]
async fn main() -> anyhow::Result<ExitCode> {
    let cli = Cli::parse();
    match cli.sink {
        Sink::Kafka {
            bootstrap,
            topic,
            properties,
            common,
        } => {
            let properties = properties
                .iter()
                .map(|p| {
                    p.split_once('=')
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                        .with_context(|| format!("--property {p:?}: expected KEY=VALUE"))
                })
                .collect::<anyhow::Result<Vec<_>>>()?;
            let progress = Duration::from_secs(common.progress_s);
            let sink = json!({"kind": "kafka", "bootstrap": bootstrap, "topic": topic});
            if common.changes.changes {
                let spec = change_spec(&common)?;
                let s = spec.clone();
                let r = rate(&common);
                let out = tokio::task::spawn_blocking(move || {
                    KafkaTarget {
                        bootstrap: &bootstrap,
                        topic: &topic,
                        properties: &properties,
                        rate: r,
                        progress_every: progress,
                    }
                    .produce_changes(&s)
                })
                .await??;
                return finish_changes(&common, &spec, sink, out);
            }
            let spec = spec(&common)?;
            let (s, b, t) = (spec.clone(), bootstrap.clone(), topic.clone());
            let r = rate(&common);
            let produced = tokio::task::spawn_blocking(move || {
                loadgen::produce_kafka(&s, &b, &t, &properties, r, progress)
            })
            .await??;
            finish(&common, &spec, sink, produced)
        }
        Sink::Kinesis {
            stream,
            endpoint_url,
            region,
            concurrency,
            common,
        } => {
            if common.changes.changes {
                bail!("--changes: the kafka and file sinks only");
            }
            let spec = spec(&common)?;
            let clients = floe::aws::AwsClients::load(&floe::config::aws::AwsConfig {
                region,
                endpoint_url,
                ..Default::default()
            })
            .await;
            let produced = loadgen::produce_kinesis(
                &spec,
                &clients.kinesis(),
                &stream,
                rate(&common),
                concurrency,
                Duration::from_secs(common.progress_s),
            )
            .await?;
            finish(
                &common,
                &spec,
                json!({"kind": "kinesis", "stream": stream}),
                produced,
            )
        }
        Sink::File { output, common } => {
            if common.changes.changes {
                let spec = change_spec(&common)?;
                let out = loadgen::write_changes_file(&spec, &output)
                    .with_context(|| format!("writing {}", output.display()))?;
                let sink = json!({"kind": "file", "path": output});
                return finish_changes(&common, &spec, sink, out);
            }
            let spec = spec(&common)?;
            let produced = loadgen::write_file(&spec, &output)
                .with_context(|| format!("writing {}", output.display()))?;
            finish(
                &common,
                &spec,
                json!({"kind": "file", "path": output}),
                produced,
            )
        }
    }
}
