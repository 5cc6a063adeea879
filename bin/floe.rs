//! `floe` (convert worktree stand-in): `records check` and `bench convert` only; the integrator's main
//! replaces this file.
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use floe::cli::bench::BenchConvertArgs;
use floe::cli::records::RecordsCheckArgs;

#[derive(Parser)]
#[command(
    name = "floe",
    about = "Deliver Kafka and Kinesis records into Iceberg tables"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Inspect records against a schema.
    Records {
        #[command(subcommand)]
        cmd: RecordsCmd,
    },
    /// Benchmarks.
    Bench {
        #[command(subcommand)]
        cmd: BenchCmd,
    },
}

#[derive(Subcommand)]
enum RecordsCmd {
    /// Show what floe does with sample records (one JSON line per record).
    Check(RecordsCheckArgs),
}

#[derive(Subcommand)]
enum BenchCmd {
    /// Convert an NDJSON file into hour-partitioned Parquet on one thread.
    Convert(BenchConvertArgs),
}

fn main() -> anyhow::Result<ExitCode> {
    let cli = Cli::parse();
    Ok(match cli.cmd {
        Cmd::Records {
            cmd: RecordsCmd::Check(a),
        } => floe::cli::records::run(&a)?,
        Cmd::Bench {
            cmd: BenchCmd::Convert(a),
        } => floe::cli::bench::run(&a)?,
    })
}
