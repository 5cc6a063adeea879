//! `floe-mock-kafka`: a standalone Kafka-protocol broker (librdkafka's mock cluster) for
//! multi-process tests, where workers are killed and restarted while the broker lives on.
//!
//! Prints `bootstrap=HOST:PORT[,HOST:PORT…]` as the first line of stdout, creates the topics named
//! by `--topic NAME --partitions N` (pairs in order; one `--partitions` applies to every topic;
//! default 4), then holds until SIGTERM or SIGINT — or until stdin closes, with
//! `--exit-on-stdin-eof` (so a test harness that dies takes the broker with it).
//!
//! Retention: librdkafka's mock cluster keeps at most 5 MiB or 100,000 messages per partition
//! (`rdkafka_mock.c`, `mpart->max_size`/`max_cnt`) and deletes the oldest beyond that, raising
//! the partition's low watermark — as a real broker's retention would. Preloading more than that
//! per partition loses records before anyone reads them: use more partitions (loadtest/bench.sh
//! sizes them from the dataset).

use std::io::Write;

use anyhow::{bail, Context};
use clap::Parser;
use floe::source::kafka::embedded::EmbeddedKafka;
use std::io::Read;

/// Standalone in-process Kafka-protocol broker (librdkafka mock cluster) on loopback ports.
#[derive(Parser, Debug)]
#[command(name = "floe-mock-kafka", version)]
struct Args {
    /// Topic to create (repeatable).
    #[arg(long = "topic")]
    topics: Vec<String>,
    /// Partitions of the topic at the same position (repeatable; one value applies to all).
    /// Each keeps at most 5 MiB / 100,000 messages (the mock cluster's retention).
    #[arg(long = "partitions")]
    partitions: Vec<i32>,
    /// Number of brokers in the mock cluster.
    #[arg(long, default_value_t = 3)]
    brokers: i32,
    /// Exit when stdin reaches end of file (in addition to SIGTERM/SIGINT).
    #[arg(long)]
    exit_on_stdin_eof: bool,
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    if args.partitions.len() > 1 && args.partitions.len() != args.topics.len() {
        bail!(
            "give one --partitions for all topics or one per --topic ({} topics, {} partition counts)",
            args.topics.len(),
            args.partitions.len()
        );
    }
    let kafka = EmbeddedKafka::start(args.brokers).context("starting the mock cluster")?;
    for (i, topic) in args.topics.iter().enumerate() {
        let partitions = match args.partitions.len() {
            0 => 4,
            1 => args.partitions[0],
            _ => args.partitions[i],
        };
        kafka
            .create_topic(topic, partitions)
            .with_context(|| format!("creating topic {topic}"))?;
    }
    {
        let mut out = std::io::stdout().lock();
        writeln!(out, "bootstrap={}", kafka.bootstrap_servers())?;
        out.flush()?;
    }

    let mut sigterm = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let (eof_tx, eof_rx) = tokio::sync::oneshot::channel::<()>();
    // Without --exit-on-stdin-eof the sender is held (never sent) so `stdin_eof` never resolves.
    let _hold_sender = if args.exit_on_stdin_eof {
        // A plain thread: tokio's async stdin is not enabled in this crate.
        std::thread::spawn(move || {
            let mut stdin = std::io::stdin().lock();
            let mut buf = [0u8; 256];
            while let Ok(n) = stdin.read(&mut buf) {
                if n == 0 {
                    break;
                }
            }
            let _ = eof_tx.send(());
        });
        None
    } else {
        Some(eof_tx)
    };
    let stdin_eof = async {
        let _ = eof_rx.await;
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = sigterm.recv() => {}
        _ = stdin_eof => {}
    }
    drop(kafka);
    Ok(())
}
