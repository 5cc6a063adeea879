//! `floe-fleet-sim`: runs the lease protocol of a whole fleet — the same lease manager and
//! balancer `floe run` uses — in one process under simulated time, and prints one JSON line per
//! scenario (docs/scaling.md explains the keys and shows the figures). Thin: parses the command
//! line, calls [`floe::lease::sim`].
//!
//! ```text
//! floe-fleet-sim --shards 1000 --workers 100 [--scenario NAME ...] [--store memory|sqlite]
//!                [--lease-duration 10s]
//! ```

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context};
use clap::{Parser, ValueEnum};
use floe::lease::sim::{self, FleetSize, SCENARIOS};
use floe::lease::{memory::MemoryLeaseStore, SqlLeaseStore};

#[derive(Parser)]
#[command(
    name = "floe-fleet-sim",
    version,
    about = "Simulate a fleet's lease protocol and print one JSON line per scenario"
)]
struct Cli {
    /// Shards of the source.
    #[arg(long, default_value_t = 1000)]
    shards: usize,
    /// Workers of the fleet.
    #[arg(long, default_value_t = 100)]
    workers: usize,
    /// Scenario to run (repeatable); default: all of cold_start, rolling_restart, crash_20pct,
    /// join_50pct, reshard_100, partition.
    #[arg(long)]
    scenario: Vec<String>,
    /// Lease store: the in-memory store, or a real SQLite file in a temporary directory.
    #[arg(long, value_enum, default_value_t = StoreKind::Memory)]
    store: StoreKind,
    /// `lease_store.lease_duration`, e.g. `10s`.
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    lease_duration: Duration,
}

#[derive(Clone, Copy, ValueEnum)]
enum StoreKind {
    Memory,
    Sqlite,
}

fn main() -> ExitCode {
    match run(Cli::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("floe-fleet-sim: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<()> {
    if cli.shards == 0 || cli.workers == 0 {
        bail!("--shards and --workers must be at least 1");
    }
    // The range `lease_store.lease_duration` accepts.
    if cli.lease_duration < Duration::from_secs(1) || cli.lease_duration > Duration::from_secs(600)
    {
        bail!("--lease-duration must be from 1s to 10m (as lease_store.lease_duration)");
    }
    let scenarios: Vec<String> = if cli.scenario.is_empty() {
        SCENARIOS.iter().map(|s| s.to_string()).collect()
    } else {
        cli.scenario.clone()
    };
    if let Some(unknown) = scenarios.iter().find(|s| !SCENARIOS.contains(&s.as_str())) {
        bail!(
            "unknown scenario {unknown:?}: expected one of {}",
            SCENARIOS.join(", ")
        );
    }
    let size = FleetSize {
        shards: cli.shards,
        workers: cli.workers,
        lease_duration: cli.lease_duration,
    };
    for name in scenarios {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .context("starting the runtime")?;
        let report = runtime.block_on(async {
            match cli.store {
                StoreKind::Memory => {
                    tokio::time::pause();
                    sim::run_scenario(
                        &name,
                        Arc::new(MemoryLeaseStore::new()),
                        "memory",
                        size,
                        false,
                    )
                    .await
                }
                StoreKind::Sqlite => {
                    let dir = std::env::temp_dir()
                        .join(format!("floe-fleet-sim-{}-{name}", std::process::id()));
                    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
                    let store = SqlLeaseStore::open_sqlite(dir.join("leases.sqlite"))
                        .await
                        .map_err(|e| e.to_string())?;
                    tokio::time::pause();
                    let report =
                        sim::run_scenario(&name, Arc::new(store), "sqlite", size, true).await;
                    let _ = std::fs::remove_dir_all(&dir);
                    report
                }
            }
        });
        let report = report.map_err(anyhow::Error::msg)?;
        println!("{}", serde_json::to_string(&report)?);
    }
    Ok(())
}
