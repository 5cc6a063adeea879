//! `floe bench commits`: the committer's path, many times, into one table — how commit time and
//! table shape grow with the table's age, with table maintenance on or off (loadtest/soak.sh runs
//! it both ways and adds PyIceberg's scan planning time).
//!
//! ```text
//! floe bench commits --dir DIR [--commits 2000] [--maintenance on|off] [--rows 20]
//!                    [--freshness 10s] [--look-every 6]
//!                    [--snapshot-retention 60s] [--min-snapshots 10]
//!                    [--shards 1] [--positions offset|sequence]
//! ```
//!
//! Each round writes one small batch of `Event` rows (the quickstart's schema) as data files of an
//! hour-partitioned table in an SQL (SQLite) catalog under `DIR`, puts it in an SQLite lease store
//! as a pending batch and runs one committer round — the same `Committer` and `IcebergTarget`
//! `floe run` uses, fence, expiry and the SQL catalog's swap included. The stream's time is
//! replayed: commit `n` carries records of `start + n × freshness` (hours that close as the soak
//! goes, in the past of the wall clock), and the maintenance planner runs on that clock, every
//! `--look-every` commits (6 × 10 s: the default 1 min interval), with the default compaction
//! delay, manifest limit and target file size. Snapshot timestamps are real, so
//! `--snapshot-retention` is wall time, scaled down to keep the number of snapshots a 1 h
//! retention keeps at 10 s.
//!
//! With `--shards N`, the first batch starts every shard's checkpoint, so `floe.checkpoints`
//! holds N entries from then on, and each later batch continues one shard (in turn), as at a
//! fleet of many shards where each worker's batch covers a few of them. `--positions sequence`
//! writes 56-digit Kinesis sequence numbers instead of Kafka offsets. The shape line then also
//! gives `checkpoints_bytes`, the size of the `floe.checkpoints` property.
//!
//! Prints one JSON line per window (`{"window": "commit 100", "p50_ms": …, "p99_ms": …}` over the
//! 100 commits up to it, for commit 100 when the run is longer, and the last; commit time only), one with the maintenance
//! looks' times (`{"maintenance_looks": N, "p50_ms", "p99_ms", "max_ms"}`), then one with the
//! table's shape: `{"snapshots": S, "manifests": M, "metadata_json_bytes": B, "data_files": D,
//! "data_files_per_hour_max": H, "closed_hour_files_max": C, "table": "<catalog uri>#<ident>"}`.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use iceberg::{Catalog, NamespaceIdent, TableIdent};

use crate::commit::Committer;
use crate::config::MaintenanceConfig;
use crate::convert::Converter;
use crate::dlq::LocalDlq;
use crate::iceberg::table::{ensure_table, referenced_data_files, TableSpec};
use crate::iceberg::target::IcebergTarget;
use crate::iceberg::writer::{write_data_files, ParquetCompression, WriterSettings, WrittenFiles};
use crate::lease::{BatchStore, LeaseStore, SqlLeaseStore};
use crate::model::{BatchFiles, CheckpointRange, PendingBatch, Position, ShardId, ShardRange};
use crate::schema::MappedSchema;
use crate::tools::sample_events::event_json;
use crate::tools::stdout;

/// Maintenance on or off.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum OnOff {
    /// Snapshot expiry, compaction, manifest rewrite (the defaults).
    On,
    /// No maintenance.
    Off,
}

/// The kind of positions the benchmark's checkpoints hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum PositionKind {
    /// Kafka offsets.
    Offset,
    /// Kinesis sequence numbers, 56 digits.
    Sequence,
}

/// Arguments of `floe bench commits`.
#[derive(Clone, Debug, clap::Args)]
pub struct BenchCommitsArgs {
    /// Directory for the catalog, warehouse and lease store (created; must not hold a table).
    #[arg(long, value_name = "DIR")]
    pub dir: PathBuf,
    /// Commits to make.
    #[arg(long, default_value_t = 2000)]
    pub commits: u64,
    /// Table maintenance.
    #[arg(long, value_enum, default_value = "on")]
    pub maintenance: OnOff,
    /// Rows per batch (at least 1).
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u64).range(1..))]
    pub rows: u64,
    /// Snapshots older than this are expired (with `--maintenance on`).
    #[arg(long, default_value = "60s", value_parser = humantime::parse_duration)]
    pub snapshot_retention: Duration,
    /// Snapshots always kept.
    #[arg(long, default_value_t = 10)]
    pub min_snapshots: u32,
    /// Stream time between two commits (the channel's data freshness).
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    pub freshness: Duration,
    /// Commits between two maintenance looks (6 at 10 s: the default 1 min interval).
    #[arg(long, default_value_t = 6)]
    pub look_every: u64,
    /// Shards in the table's checkpoints (each later batch continues one of them, in turn).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub shards: u32,
    /// What the checkpoints hold: Kafka offsets or 56-digit Kinesis sequence numbers.
    #[arg(long, value_enum, default_value = "offset")]
    pub positions: PositionKind,
    /// Put the SQL catalog and the lease store on this PostgreSQL database
    /// (`postgresql://USER:PASSWORD@HOST:PORT/DB`) instead of SQLite files in `--dir`: a fresh
    /// catalog name and lease schema per run; the warehouse stays in `--dir`.
    #[arg(long, value_name = "URL", env = "FLOE_BENCH_POSTGRES_URL")]
    pub postgres_url: Option<String>,
}

/// The position of record `n` of a shard: a 10-digit offset, or a 56-digit sequence number
/// growing with `n` (Kinesis sequence numbers are 56 digits on current streams).
fn position(kind: PositionKind, n: u64) -> Position {
    match kind {
        // Ten digits, as on a topic that has taken a billion records.
        PositionKind::Offset => Position::Offset(1_000_000_000 + n as i64),
        PositionKind::Sequence => Position::Sequence(
            crate::model::SequenceNumber::try_new(&format!("4959{n:052}"))
                .expect("56 ASCII digits without a leading zero"),
        ),
    }
}

/// Shard `i` of the benchmark's stream.
fn shard(kind: PositionKind, i: u32) -> ShardId {
    match kind {
        PositionKind::Offset => ShardId::kafka_partition(i as i32),
        PositionKind::Sequence => ShardId(format!("shardId-{i:012}")),
    }
}

/// Errors of the benchmark.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct BenchCommitsError(String);

fn err(e: impl std::fmt::Display) -> BenchCommitsError {
    BenchCommitsError(e.to_string())
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i]
}

fn window(label: &str, durations: &[Duration]) -> String {
    let mut ms: Vec<f64> = durations.iter().map(|d| d.as_secs_f64() * 1000.0).collect();
    ms.sort_by(|a, b| a.partial_cmp(b).expect("no NaN"));
    serde_json::json!({
        "window": label,
        "commits": ms.len(),
        "p50_ms": (percentile(&ms, 0.5) * 10.0).round() / 10.0,
        "p99_ms": (percentile(&ms, 0.99) * 10.0).round() / 10.0,
    })
    .to_string()
}

/// Runs the benchmark and prints its figures.
///
/// Errors: the catalog, storage or lease store failed, or a commit round failed.
pub async fn run(args: &BenchCommitsArgs) -> Result<ExitCode, BenchCommitsError> {
    let bench = open_table(args).await?;
    let (catalog, ident) = (&bench.catalog, &bench.ident);
    let store = open_lease_store(args, &bench.run_id).await?;
    let maintenance = MaintenanceConfig {
        enabled: args.maintenance == OnOff::On,
        snapshot_retention: args.snapshot_retention,
        min_snapshots: args.min_snapshots,
        // The bench decides when to look (every `look_every` commits).
        interval: Duration::ZERO,
        ..MaintenanceConfig::default()
    };
    let writer = WriterSettings {
        channel: "bench".into(),
        compression: ParquetCompression::Zstd(3),
        target_file_size: 128 << 20,
        max_open_partitions: 48,
    };
    let swap =
        crate::catalog::swap::SqlSwap::open(catalog.clone(), &bench.database, &bench.catalog_name)
            .await
            .map_err(err)?;
    // The replayed stream's clock: hour-aligned, ending an hour before the wall clock.
    let step_ms = args.freshness.as_millis() as i64;
    let span_ms = step_ms * args.commits as i64;
    let start_ms = (crate::time::now_ms() - span_ms - 2 * 3_600_000) / 3_600_000 * 3_600_000;
    let stream_now = Arc::new(std::sync::atomic::AtomicI64::new(start_ms));
    let clock = {
        let stream_now = stream_now.clone();
        Arc::new(move || stream_now.load(std::sync::atomic::Ordering::Relaxed))
    };
    let leases: Arc<dyn LeaseStore> = store.clone();
    let batches: Arc<dyn BatchStore> = store.clone();
    let committer = Committer::new(
        "bench",
        IcebergTarget::new(
            "bench",
            ident.clone(),
            catalog.clone(),
            LocalDlq::new(args.dir.join("dlq"), "bench"),
        )
        .with_maintenance(maintenance)
        .with_rewrites(Some(Arc::new(swap)), writer.clone())
        .with_clock(clock),
        leases,
        batches.clone(),
        1,
    );
    let mut durations = Vec::with_capacity(args.commits as usize);
    // Per shard: the last position committed, and the next record number.
    let mut after: Vec<(Option<Position>, u64)> = vec![(None, 0); args.shards as usize];
    let mut looks = Vec::new();
    for n in 0..args.commits {
        let now = start_ms + (n as i64 + 1) * step_ms;
        stream_now.store(now, std::sync::atomic::Ordering::Relaxed);
        let table = catalog.load_table(ident).await.map_err(err)?;
        let arrow = Arc::new(
            iceberg::arrow::schema_to_arrow_schema(table.metadata().current_schema())
                .map_err(err)?,
        );
        let mut conv = Converter::try_new(bench.schema.clone(), arrow).map_err(err)?;
        let first = n * args.rows;
        for id in first..first + args.rows {
            conv.push(event_json(id, 7, now - step_ms, 0).as_bytes())
                .map_err(|e| err(e.message))?;
        }
        let batch_id = uuid::Uuid::now_v7();
        let written = write_data_files(&table, &writer, batch_id, conv.finish())
            .await
            .map_err(err)?;
        let batch = pending_batch(args, n, &mut after, batch_id, written);
        batches.put_batch(&batch).await.map_err(err)?;
        let started = Instant::now();
        let report = committer.commit_round().await.map_err(err)?;
        durations.push(started.elapsed());
        if args.maintenance == OnOff::On && args.look_every > 0 && (n + 1) % args.look_every == 0 {
            let started = Instant::now();
            committer.maintain().await;
            looks.push(started.elapsed());
        }
        if report.committed != 1 {
            return Err(err(format!("round {n} committed {report:?}")));
        }
        // The early window, when the run is longer (otherwise the last window is the same).
        if n + 1 == 100 && args.commits > 100 {
            stdout::println(window(
                "commit 100",
                &durations[durations.len().saturating_sub(100)..],
            ));
        }
    }
    let label = format!("commit {}", args.commits);
    stdout::println(window(
        &label,
        &durations[durations.len().saturating_sub(100)..],
    ));
    print_looks(&mut looks);
    print_table_shape(args, &bench, start_ms + span_ms).await?;
    Ok(ExitCode::SUCCESS)
}

/// The benchmark's table and where it lives.
struct BenchTable {
    /// Tells one run's rows apart on PostgreSQL (catalog name and lease schema).
    run_id: String,
    database: crate::config::CatalogDatabase,
    catalog_name: String,
    catalog: Arc<dyn Catalog>,
    /// The quickstart's `Event` schema, hour-partitioned by `event_time`.
    schema: Arc<MappedSchema>,
    ident: TableIdent,
}

/// Creates the benchmark's catalog and table under `--dir` (or on `--postgres-url`).
///
/// Errors: `--dir` holds an earlier run's table; the catalog or storage failed.
async fn open_table(args: &BenchCommitsArgs) -> Result<BenchTable, BenchCommitsError> {
    let catalog_path = args.dir.join("catalog.sqlite");
    let warehouse = args.dir.join("warehouse");
    if catalog_path.exists() || warehouse.exists() {
        // Appending to an earlier run's table would mix its figures into this one's.
        return Err(err(format!(
            "--dir {} already holds a benchmark table ({}): give an empty or new directory",
            args.dir.display(),
            warehouse.display()
        )));
    }
    std::fs::create_dir_all(&args.dir).map_err(err)?;
    // On PostgreSQL, one run's rows are told apart by the catalog name and the lease schema.
    let run_id = uuid::Uuid::new_v4().simple().to_string()[..12].to_string();
    let (database, catalog_name) = match &args.postgres_url {
        Some(url) => (
            crate::config::CatalogDatabase::Postgres(url.clone()),
            format!("bench_{run_id}"),
        ),
        None => (
            crate::config::CatalogDatabase::Sqlite(catalog_path.clone()),
            "floe".to_string(),
        ),
    };
    let catalog = crate::catalog::open_sql_catalog_local(&database, &warehouse, &catalog_name)
        .await
        .map_err(err)?;
    let schema_json: serde_json::Value =
        serde_json::from_str(crate::tools::quickstart::EVENT_SCHEMA).map_err(err)?;
    let schema = Arc::new(MappedSchema::from_json_schema(&schema_json, "event_time").map_err(err)?);
    let ident = TableIdent::new(NamespaceIdent::new("bench".into()), "events".into());
    let spec = TableSpec {
        ident: ident.clone(),
        channel: "bench".into(),
        compression_codec: "zstd".into(),
        target_file_size_bytes: 128 << 20,
        partition: vec![crate::schema::partition::PartitionTerm::hour("event_time")],
        sort: Vec::new(),
        key: Vec::new(),
        format_version: iceberg::spec::FormatVersion::V2,
    };
    ensure_table(catalog.as_ref(), &spec, &schema)
        .await
        .map_err(err)?;
    Ok(BenchTable {
        run_id,
        database,
        catalog_name,
        catalog,
        schema,
        ident,
    })
}

/// The run's lease store: SQLite under `--dir`, or a schema of its own on `--postgres-url`.
///
/// Errors: the lease store cannot be opened.
async fn open_lease_store(
    args: &BenchCommitsArgs,
    run_id: &str,
) -> Result<Arc<SqlLeaseStore>, BenchCommitsError> {
    Ok(Arc::new(match &args.postgres_url {
        Some(url) => SqlLeaseStore::open_postgres(&crate::lease::PostgresOptions {
            url: url.clone(),
            ssl_mode: crate::lease::SslMode::Prefer,
            pool_size: 4,
            schema: format!("bench_{run_id}"),
            create_tables: true,
        })
        .await
        .map_err(err)?,
        None => SqlLeaseStore::open_sqlite(args.dir.join("leases.sqlite"))
            .await
            .map_err(err)?,
    }))
}

/// Round `n`'s pending batch of the `written` files: the first batch starts every shard, later
/// ones continue one shard each, in turn (`after` holds each shard's last position committed
/// and its next record number).
fn pending_batch(
    args: &BenchCommitsArgs,
    n: u64,
    after: &mut [(Option<Position>, u64)],
    batch_id: uuid::Uuid,
    written: WrittenFiles,
) -> PendingBatch {
    // The first batch starts every shard; later ones continue one shard each, in turn.
    let covered: Vec<u32> = if n == 0 {
        (0..args.shards).collect()
    } else {
        vec![(n % args.shards as u64) as u32]
    };
    let mut ranges = Vec::with_capacity(covered.len());
    for &i in &covered {
        let (prev, next) = &mut after[i as usize];
        *next += args.rows;
        let last = position(args.positions, *next - 1);
        ranges.push(ShardRange {
            shard: shard(args.positions, i),
            range: CheckpointRange {
                after_exclusive: prev.replace(last.clone()),
                last_inclusive: last,
            },
            lease_counter: 0,
        });
    }
    PendingBatch {
        channel: "bench".into(),
        batch_id,
        worker_id: "bench".into(),
        shards: ranges,
        files: BatchFiles::Iceberg {
            data_files: written.data_files_json,
            dlq_staged: None,
            deleted_keys: None,
        },
        num_rows: written.num_rows,
        num_dead_lettered: 0,
        dead_lettered_by_code: Default::default(),
        data_bytes: written.num_bytes,
        oldest_read_at_ms: 0,
    }
}

/// Prints the maintenance looks' times (`{"maintenance_looks": N, "p50_ms", "p99_ms", "max_ms"}`).
fn print_looks(looks: &mut [Duration]) {
    looks.sort();
    let ms = |d: Option<&Duration>| d.map_or(0.0, |d| (d.as_secs_f64() * 10_000.0).round() / 10.0);
    stdout::println(format!(
        "{}",
        serde_json::json!({
            "maintenance_looks": looks.len(),
            "p50_ms": ms(looks.get(looks.len() / 2)),
            "p99_ms": ms(looks.get((looks.len() as f64 * 0.99) as usize)),
            "max_ms": ms(looks.last()),
        })
    ));
}

/// Prints the table's shape after the run (snapshots, manifests, data files per hour, …);
/// `last_ms` is the replayed stream's last time.
///
/// Errors: the table or its manifests cannot be read.
async fn print_table_shape(
    args: &BenchCommitsArgs,
    bench: &BenchTable,
    last_ms: i64,
) -> Result<(), BenchCommitsError> {
    let BenchTable {
        database,
        catalog_name,
        catalog,
        ident,
        ..
    } = bench;
    let table = catalog.load_table(ident).await.map_err(err)?;
    let metadata_json_bytes = table
        .metadata_location()
        .map(|l| {
            std::fs::metadata(l.trim_start_matches("file://"))
                .map(|m| m.len())
                .unwrap_or(0)
        })
        .unwrap_or(0);
    let manifests = match table.metadata().current_snapshot() {
        Some(s) => table
            .manifest_list_reader(s)
            .load()
            .await
            .map_err(err)?
            .entries()
            .len(),
        None => 0,
    };
    let files = referenced_data_files(&table).await.map_err(err)?;
    let mut per_hour: BTreeMap<String, usize> = BTreeMap::new();
    for f in &files {
        let hour = f
            .split('/')
            .find(|p| p.starts_with("event_time_hour="))
            .unwrap_or("")
            .to_string();
        *per_hour.entry(hour).or_default() += 1;
    }
    // Closed hours: ended at least the compaction delay before the stream's last time.
    let closed_max = per_hour
        .iter()
        .filter(|(h, _)| {
            h.trim_start_matches("event_time_hour=")
                .parse::<i64>()
                .is_ok_and(|h| (h + 1) * 3_600_000 + 600_000 <= last_ms)
        })
        .map(|(_, n)| *n)
        .max()
        .unwrap_or(0);
    stdout::println(format!(
        "{}",
        serde_json::json!({
            "maintenance": format!("{:?}", args.maintenance).to_lowercase(),
            "snapshots": table.metadata().snapshots().count(),
            "manifests": manifests,
            "metadata_json_bytes": metadata_json_bytes,
            "data_files": files.len(),
            "data_files_per_hour_max": per_hour.values().max().copied().unwrap_or(0),
            "closed_hour_files_max": closed_max,
            "hours": per_hour.len(),
            "shards": args.shards,
            "checkpoints_bytes": table
                .metadata()
                .properties()
                .get(crate::iceberg::table_state::PROP_CHECKPOINTS)
                .map_or(0, |v| v.len()),
            "table": format!("{database}#{catalog_name}.{ident}"),
        })
    ));
    Ok(())
}
