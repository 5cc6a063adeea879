//! `floe`: the worker daemon and its command-line tools. Thin: parses the command line, sets up
//! logging and metrics, and calls into the library.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use tokio_util::sync::CancellationToken;

#[derive(Parser)]
#[command(
    name = "floe",
    version,
    about = "Deliver Kafka records into Iceberg tables, exactly once"
)]
struct Cli {
    /// Log format: text or json.
    #[arg(long, global = true, default_value = "text")]
    log_format: String,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run every channel of a config file until SIGINT/SIGTERM.
    Run {
        /// The TOML config file.
        #[arg(long)]
        config: PathBuf,
    },
    /// Create what the fleet shares before the first worker starts: the lease store (the DynamoDB
    /// lease table, or the SQLite file). Idempotent.
    Setup {
        /// The TOML config file.
        #[arg(long)]
        config: PathBuf,
    },
    /// Check a config file; print every problem with its key path, or "ok".
    Validate(floe::cli::validate::ValidateArgs),
    /// Run the whole pipeline on this machine with an embedded Kafka broker.
    Quickstart(floe::quickstart::QuickstartArgs),
    /// Work with sample records.
    Records {
        #[command(subcommand)]
        command: RecordsCommand,
    },
    /// Benchmarks users size their fleet with.
    Bench {
        #[command(subcommand)]
        command: BenchCommand,
    },
}

#[derive(Subcommand)]
enum RecordsCommand {
    /// Show what floe does with each record: the row and its hour partition, or the DLQ code.
    Check(floe::cli::records::RecordsCheckArgs),
}

#[derive(Subcommand)]
enum BenchCommand {
    /// Convert an NDJSON file to hour-partitioned Parquet on one thread and print figures.
    Convert(floe::cli::bench::BenchConvertArgs),
}

fn init_tracing(format: &str, default_level: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_level));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    if format == "json" {
        builder.json().init();
    } else {
        builder.init();
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Records {
            command: RecordsCommand::Check(args),
        } => match floe::cli::records::run(&args) {
            Ok(code) => code,
            Err(e) => {
                eprintln!("floe records check: {e}");
                ExitCode::from(2)
            }
        },
        Command::Bench {
            command: BenchCommand::Convert(args),
        } => match floe::cli::bench::run(&args) {
            Ok(code) => code,
            Err(e) => {
                eprintln!("floe bench convert: {e}");
                ExitCode::from(2)
            }
        },
        Command::Validate(args) => floe::cli::validate::run(&args),
        Command::Setup { config } => {
            init_tracing(&cli.log_format, "warn");
            ExitCode::from(runtime().block_on(setup(config)))
        }
        Command::Run { config } => {
            init_tracing(&cli.log_format, "info");
            let code = runtime().block_on(run(config));
            // Everything delivered is committed and every DLQ object fsynced by now: exit at
            // once instead of waiting for Kafka clients to tear down (seconds with a broker
            // down), so SIGTERM stays within shutdown_timeout.
            std::process::exit(code)
        }
        Command::Quickstart(args) => {
            init_tracing(&cli.log_format, "error");
            runtime().block_on(async move {
                match floe::quickstart::run(&args).await {
                    Ok(rec) if rec.exactly_once() => ExitCode::SUCCESS,
                    Ok(_) => ExitCode::FAILURE,
                    Err(e) => {
                        eprintln!("floe quickstart: {e}");
                        ExitCode::FAILURE
                    }
                }
            })
        }
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime")
}

async fn run(config_path: PathBuf) -> i32 {
    let config = match floe::config::Config::load(&config_path) {
        Ok(c) => c,
        Err(errors) => {
            eprintln!("{}: invalid config:\n{errors}", config_path.display());
            // 78 = EX_CONFIG (sysexits.h): systemd should not restart a bad config.
            return 78;
        }
    };
    if let Some(addr) = config.worker.metrics_address {
        if let Err(e) = floe::telemetry::install_prometheus(addr) {
            eprintln!("cannot serve metrics on {addr}: {e}");
            return 78;
        }
    }
    let shutdown = CancellationToken::new();
    {
        let shutdown = shutdown.clone();
        tokio::spawn(async move {
            wait_for_signal().await;
            tracing::info!("signal received: shutting down");
            shutdown.cancel();
        });
    }
    match floe::app::run(config, shutdown).await {
        Ok(()) => 0,
        Err(e) if e.is_retryable() => {
            tracing::error!(error = %e, "floe run failed: a dependency stayed unavailable");
            1
        }
        Err(e) => {
            // A problem an operator must fix (schema, table ownership, table dropped): 78 =
            // EX_CONFIG, so systemd's RestartPreventExitStatus=78 does not restart it in a loop.
            tracing::error!(error = %e, "floe run failed");
            78
        }
    }
}

async fn setup(config_path: PathBuf) -> u8 {
    let config = match floe::config::Config::load(&config_path) {
        Ok(c) => c,
        Err(errors) => {
            eprintln!("{}: invalid config:\n{errors}", config_path.display());
            return 78;
        }
    };
    match floe::app::setup(&config).await {
        Ok(done) => {
            println!("{done}");
            0
        }
        Err(e) => {
            eprintln!("floe setup: {e}");
            if e.is_retryable() {
                1
            } else {
                78
            }
        }
    }
}

async fn wait_for_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}
