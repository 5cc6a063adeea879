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
    about = "Deliver Kafka and Kinesis records into Iceberg tables, exactly once"
)]
struct Cli {
    /// Log format (stderr): human-readable text, or one JSON object per line.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

#[derive(Subcommand)]
enum Command {
    /// Run every channel of a config file until SIGINT/SIGTERM.
    Run {
        /// The TOML config file.
        #[arg(long)]
        config: PathBuf,
        /// Overrides `worker.metrics_address` (an IP socket address, or "off"): lets several
        /// workers on one host share a config file, each on its own port.
        #[arg(long, env = "FLOE_METRICS_ADDRESS")]
        metrics_address: Option<String>,
    },
    /// Manage channels in the lease store: create, describe, list, update, delete.
    Channel {
        #[command(subcommand)]
        command: floe::cli::channel::ChannelCommand,
    },
    /// Ask a running worker's /healthz (or /readyz): exit 0 on 200, 1 otherwise (container
    /// health checks).
    Healthcheck {
        /// The worker's metrics address.
        #[arg(long, default_value = "127.0.0.1:9464")]
        address: std::net::SocketAddr,
        /// Ask /readyz (leases held, catalog reachable) instead of /healthz.
        #[arg(long)]
        ready: bool,
    },
    /// Create what the fleet shares before the first worker starts: the lease store (the DynamoDB
    /// lease table, the PostgreSQL schema and tables, or the SQLite file). Idempotent.
    Setup {
        /// The TOML config file.
        #[arg(long)]
        config: PathBuf,
    },
    /// One table-maintenance pass now, for channels whose workers are stopped: pending batches
    /// committed, snapshot expiry, compaction (waited for), manifest rewrite, record expiration
    /// and the orphan sweep. Takes the channel's committer lease; refused (exit 75) while a
    /// worker holds and renews it (that committer maintains the table itself).
    Maintain {
        /// The TOML config file.
        #[arg(long)]
        config: PathBuf,
        /// Only this channel (default: every Iceberg channel).
        #[arg(long)]
        channel: Option<String>,
    },
    /// Check a config file; print every problem with its key path, or "ok".
    Validate(floe::cli::validate::ValidateArgs),
    /// Run the whole pipeline on this machine with an embedded Kafka broker.
    Quickstart(floe::tools::quickstart::QuickstartArgs),
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
    /// Convert a file of records (NDJSON, or varint-delimited Avro datums or Protobuf messages) to hour-partitioned Parquet on one thread and print figures.
    Convert(floe::cli::bench::BenchConvertArgs),
    /// Commit many small batches into one table and print commit latency and table size.
    Commits(floe::cli::bench_commits::BenchCommitsArgs),
    /// Build an upsert table's key index and time upsert commits: index memory per key, build time, commit latency.
    Upsert(floe::cli::bench_upsert::BenchUpsertArgs),
}

fn init_tracing(format: LogFormat, default_level: &str) {
    // The SDK's credential chain warns for every provider that fails (a whole response dump);
    // floe says in one line what was missing (aws::AwsClients::check_credentials), so those
    // warnings show only where RUST_LOG asks for them.
    let filter = tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| {
        tracing_subscriber::EnvFilter::new(format!(
            "{default_level},aws_config::meta::credentials::chain=error"
        ))
    });
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        // Colour only on a terminal: log files and journald get plain text.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()));
    if format == LogFormat::Json {
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
        Command::Bench {
            command: BenchCommand::Commits(args),
        } => {
            init_tracing(LogFormat::Text, "warn");
            let runtime = match tokio::runtime::Runtime::new() {
                Ok(r) => r,
                Err(e) => {
                    eprintln!("floe bench commits: {e}");
                    return ExitCode::from(1);
                }
            };
            match runtime.block_on(floe::cli::bench_commits::run(&args)) {
                Ok(code) => code,
                Err(e) => {
                    eprintln!("floe bench commits: {e}");
                    ExitCode::from(1)
                }
            }
        }
        Command::Bench {
            command: BenchCommand::Upsert(args),
        } => {
            init_tracing(LogFormat::Text, "warn");
            match tokio::runtime::Runtime::new()
                .map_err(|e| e.to_string())
                .and_then(|r| {
                    r.block_on(floe::cli::bench_upsert::run(&args))
                        .map_err(|e| e.to_string())
                }) {
                Ok(code) => code,
                Err(e) => {
                    eprintln!("floe bench upsert: {e}");
                    ExitCode::from(1)
                }
            }
        }
        Command::Validate(args) => floe::cli::validate::run(&args),
        Command::Healthcheck { address, ready } => {
            let path = if ready { "/readyz" } else { "/healthz" };
            match floe::health::probe(address, path, std::time::Duration::from_secs(4)) {
                Ok(200) => ExitCode::SUCCESS,
                Ok(status) => {
                    eprintln!("{path}: HTTP {status}");
                    ExitCode::FAILURE
                }
                Err(e) => {
                    eprintln!("{path}: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        Command::Channel { command } => {
            init_tracing(cli.log_format, "warn");
            runtime().block_on(floe::cli::channel::run(&command))
        }
        Command::Maintain { config, channel } => {
            init_tracing(cli.log_format, "info");
            ExitCode::from(runtime().block_on(maintain(config, channel, cli.log_format)))
        }
        Command::Setup { config } => {
            init_tracing(cli.log_format, "warn");
            ExitCode::from(runtime().block_on(setup(config, cli.log_format)))
        }
        Command::Run {
            config,
            metrics_address,
        } => {
            init_tracing(cli.log_format, "info");
            let runtime = runtime();
            let code = runtime.block_on(run(config, metrics_address, cli.log_format));
            // Everything delivered is committed and every DLQ object fsynced by now: exit at
            // once instead of waiting for Kafka clients to tear down (seconds with a broker
            // down), so SIGTERM stays within shutdown_timeout. Dropping the runtime would wait
            // for every blocking call still running (a 1,000-table worker's queued checkpoint
            // probes held its exit for minutes after SIGTERM): it is left behind instead.
            runtime.shutdown_background();
            std::process::exit(code)
        }
        Command::Quickstart(args) => {
            init_tracing(cli.log_format, "error");
            runtime().block_on(async move {
                match floe::tools::quickstart::run(&args).await {
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

/// Threads of the runtime's blocking pool at most (tokio's default: 512). Blocking work is
/// Parquet encoding and librdkafka calls bounded by their request timeout; no reader holds a
/// blocking thread while it waits for records. Bounded so that a worker's threads stay far
/// below a systemd unit's default `TasksMax` (4,915) and a container's `--pids-limit 1024`
/// whatever its number of tables (issue 43: a 1,000-table worker peaked at 494 threads while
/// its tables started on a loaded machine).
const MAX_BLOCKING_THREADS: usize = 64;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .max_blocking_threads(MAX_BLOCKING_THREADS)
        .enable_all()
        .build()
        .expect("tokio runtime")
}

async fn run(config_path: PathBuf, metrics_address: Option<String>, format: LogFormat) -> i32 {
    // Exactly `floe validate`'s checks (each schema file read and mapped too), before any store
    // or service is touched: a missing schema file is named by its key, and nothing is created.
    let mut config = match floe::cli::validate::check(&config_path) {
        Ok(c) => c,
        Err(errors) => {
            eprintln!("{}: invalid config:\n{errors}", config_path.display());
            // 78 = EX_CONFIG (sysexits.h): systemd should not restart a bad config.
            return 78;
        }
    };
    match metrics_address.as_deref() {
        None => {}
        Some("off") => config.worker.metrics_address = None,
        Some(text) => match text.parse() {
            Ok(address) => config.worker.metrics_address = Some(address),
            Err(_) => {
                eprintln!("--metrics-address / FLOE_METRICS_ADDRESS: \"{text}\" is not an IP socket address such as \"127.0.0.1:9465\", or \"off\"");
                return 78;
            }
        },
    }
    if let Some(addr) = config.worker.metrics_address {
        // /metrics, /healthz and /readyz (floe::health); a port that cannot be bound is an
        // operator's problem.
        let listener = match floe::health::bind(addr).await {
            Ok(l) => l,
            Err(e) => {
                eprintln!("cannot serve metrics on {addr}: {e}");
                return 78;
            }
        };
        let metrics = match floe::telemetry::install_prometheus() {
            Ok(h) => h,
            Err(e) => {
                eprintln!("cannot install the metrics recorder: {e}");
                return 78;
            }
        };
        tokio::spawn(floe::health::serve(
            listener,
            metrics,
            floe::health::Readiness::global(),
        ));
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
    // One rule for every dependency (docs/operations.md, exit codes): the last line names the
    // key to check (in the error) and the exit code.
    match floe::app::run(config, shutdown).await {
        Ok(()) | Err(floe::app::AppError::Stopped(_)) => 0,
        Err(e) if e.is_retryable() => {
            tracing::error!(
                error = %e,
                exit_code = 1,
                "floe run failed: a dependency stayed unavailable (exit 1: restart once it is reachable)"
            );
            1
        }
        Err(e) => {
            // A problem an operator must fix (schema, table ownership, table dropped, no AWS
            // credentials): 78 = EX_CONFIG, so systemd's RestartPreventExitStatus=78 does not
            // restart it in a loop.
            let failed = "floe run failed (exit 78: fix the configuration or the table first)";
            match e.detail() {
                Some(detail) if format == LogFormat::Json => {
                    tracing::error!(error = %e, exit_code = 78, detail, "{failed}")
                }
                detail => {
                    tracing::error!(error = %e, exit_code = 78, "{failed}");
                    if let Some(detail) = detail {
                        tracing::debug!(detail, "floe run failed: the cause in full");
                    }
                }
            }
            78
        }
    }
}

async fn setup(config_path: PathBuf, format: LogFormat) -> u8 {
    let config = match floe::config::Config::load(&config_path) {
        Ok(c) => c,
        Err(errors) => {
            eprintln!("{}: invalid config:\n{errors}", config_path.display());
            return 78;
        }
    };
    match floe::app::setup(&config).await {
        Ok(done) => {
            floe::tools::stdout::println(done);
            0
        }
        Err(e) => {
            report(format, "floe setup", &e);
            if e.is_retryable() {
                1
            } else {
                78
            }
        }
    }
}

async fn maintain(config_path: PathBuf, channel: Option<String>, format: LogFormat) -> u8 {
    let config = match floe::cli::validate::check(&config_path) {
        Ok(c) => c,
        Err(errors) => {
            eprintln!("{}: invalid config:\n{errors}", config_path.display());
            return 78;
        }
    };
    match floe::app::maintain::maintain(&config, channel.as_deref()).await {
        Ok(reports) => {
            for r in reports {
                floe::tools::stdout::println(format!("channel {}: {}", r.channel, r.summary));
            }
            0
        }
        Err(e) => {
            report(format, "floe maintain", &e);
            if e.is_retryable() {
                // EX_TEMPFAIL: a live committer, or a dependency; try again later.
                75
            } else {
                78
            }
        }
    }
}

/// Reports a command's error on stderr: one line (`--log-format text`; what it leaves out, such
/// as the AWS SDK's credential chain, is logged at debug level), or one JSON object with the
/// detail (`--log-format json`).
fn report(format: LogFormat, command: &str, e: &floe::app::AppError) {
    if format == LogFormat::Json {
        tracing::error!(error = %e, detail = e.detail(), "{command} failed");
        return;
    }
    eprintln!("{command}: {e}");
    if let Some(detail) = e.detail() {
        tracing::debug!(detail, "{command}: the cause in full");
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
