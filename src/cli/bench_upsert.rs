//! `floe bench upsert`: the key index of an upsert table (docs/design.md, "The key index") —
//! its memory per key and build time, and the committer's upsert commit time as the table
//! grows.
//!
//! ```text
//! floe bench upsert --dir DIR [--keys 10000000] [--key long|string] [--files 20]
//!                   [--commits 50] [--rows 10000]
//! ```
//!
//! Writes `--keys` rows (key `id`: a long, or a 36-character string) in `--files` data files of
//! a format-v2 table in an SQLite catalog under `DIR` (appended, not timed), then builds the key
//! index as a committer does after a change of committer (timed: manifests, key columns read
//! back and hashed, index filled), and reports its size (estimated from the hash table's
//! capacity, and the process's resident memory before and after). Then runs `--commits` upsert
//! commits through `IcebergTarget::with_upsert`, each of `--rows` rows (70% updates of existing
//! keys, 20% new keys) and deletes of 10% as many keys, and reports commit time by window.
//!
//! Prints JSON lines: `{"index": {"keys", "build_s", "bytes_estimated", "bytes_per_key_estimated",
//! "rss_delta_bytes", "rss_bytes_per_key"}}`, then one per window of 10 commits
//! `{"commits": "1-10", "p50_ms", "max_ms"}`.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use arrow_array::{ArrayRef, Int64Array, RecordBatch, StringArray};
use iceberg::spec::{NestedField, PrimitiveType, Schema, Type};
use iceberg::table::Table;
use iceberg::{Catalog, NamespaceIdent, TableCreation, TableIdent};
use uuid::Uuid;

use crate::destination::CommitTarget;
use crate::dlq::LocalDlq;
use crate::iceberg::deletes::index::KeyIndex;
use crate::iceberg::deletes::keys::{key_hashes, write_key_file, KeyHash};
use crate::iceberg::deletes::RowDeltaBase;
use crate::iceberg::target::IcebergTarget;
use crate::iceberg::writer::{write_data_files, ParquetCompression, WriterSettings};
use crate::model::{BatchFiles, CheckpointRange, Checkpoints, PendingBatch, Position, ShardId};
use crate::tools::stdout;

/// The key column's type.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum KeyType {
    /// A long (int64).
    Long,
    /// A 36-character string (a UUID's text).
    String,
}

/// `floe bench upsert` arguments.
#[derive(clap::Args, Debug, Clone)]
pub struct BenchUpsertArgs {
    /// Directory for the catalog and the warehouse (created; must be empty).
    #[arg(long)]
    pub dir: PathBuf,
    /// Live keys in the table before the index is built.
    #[arg(long, default_value_t = 10_000_000)]
    pub keys: u64,
    /// Key column type.
    #[arg(long, value_enum, default_value = "long")]
    pub key: KeyType,
    /// Data files the keys are written in.
    #[arg(long, default_value_t = 20)]
    pub files: u64,
    /// Upsert commits timed after the build.
    #[arg(long, default_value_t = 50)]
    pub commits: u64,
    /// Rows written by each commit.
    #[arg(long, default_value_t = 10_000)]
    pub rows: u64,
}

/// Why the bench stopped.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct BenchUpsertError(String);

fn err(what: &str) -> impl Fn(String) -> BenchUpsertError + '_ {
    move |e| BenchUpsertError(format!("{what}: {e}"))
}

struct Bench {
    args: BenchUpsertArgs,
    catalog: Arc<dyn Catalog>,
    swap: Arc<crate::catalog::swap::SqlSwap>,
    ident: TableIdent,
    settings: WriterSettings,
    offset: i64,
}

/// Runs the bench (see the module docs).
///
/// Errors: the catalog, storage or a commit failed.
pub async fn run(args: &BenchUpsertArgs) -> Result<ExitCode, BenchUpsertError> {
    let mut bench = Bench::open(args).await?;
    let per_file = args.keys.div_ceil(args.files.max(1));
    let mut start = 0;
    let append = bench.target(false);
    while start < args.keys {
        let end = (start + per_file).min(args.keys);
        let batch = bench.batch(start..end, &[], "v0").await?;
        bench.commit(&append, &batch).await?;
        start = end;
    }
    let table = bench.table().await?;
    let rss_before = rss_bytes();
    let started = Instant::now();
    let base = RowDeltaBase::load(&table)
        .await
        .map_err(|e| err("read manifests")(e.to_string()))?;
    let index = KeyIndex::build(&base, &[1])
        .await
        .map_err(|e| err("build the index")(e.to_string()))?;
    let build_s = started.elapsed().as_secs_f64();
    let rss_delta = rss_bytes().saturating_sub(rss_before);
    let keys = index.len().max(1) as f64;
    stdout::println(serde_json::json!({"index": {
        "keys": index.len(), "key": format!("{:?}", args.key).to_lowercase(), "build_s": build_s,
        "bytes_estimated": index.estimated_bytes(),
        "bytes_per_key_estimated": index.estimated_bytes() as f64 / keys,
        "rss_delta_bytes": rss_delta, "rss_bytes_per_key": rss_delta as f64 / keys,
    }}).to_string());
    drop(index);
    drop(base);
    bench.timed_commits().await?;
    Ok(ExitCode::SUCCESS)
}

impl Bench {
    async fn open(args: &BenchUpsertArgs) -> Result<Self, BenchUpsertError> {
        let database = crate::config::CatalogDatabase::Sqlite(args.dir.join("catalog.sqlite"));
        let warehouse = args.dir.join("warehouse");
        let catalog = crate::catalog::open_sql_catalog_local(&database, &warehouse, "floe")
            .await
            .map_err(|e| err("open the catalog")(e.to_string()))?;
        let swap = crate::catalog::swap::SqlSwap::open(catalog.clone(), &database, "floe")
            .await
            .map_err(|e| err("open the swap")(e.to_string()))?;
        let ns = NamespaceIdent::new("bench".into());
        let fail = |e: iceberg::Error| err("create the table")(e.to_string());
        catalog
            .create_namespace(&ns, Default::default())
            .await
            .map_err(fail)?;
        let key_type = match args.key {
            KeyType::Long => PrimitiveType::Long,
            KeyType::String => PrimitiveType::String,
        };
        let schema = Schema::builder()
            .with_fields(vec![
                NestedField::required(1, "id", Type::Primitive(key_type)).into(),
                NestedField::optional(2, "v", Type::Primitive(PrimitiveType::String)).into(),
            ])
            .build()
            .map_err(fail)?;
        let creation = TableCreation::builder()
            .name("upsert".into())
            .schema(schema)
            .properties(std::collections::HashMap::from([(
                "commit.retry.num-retries".to_string(),
                "0".to_string(),
            )]))
            .build();
        catalog.create_table(&ns, creation).await.map_err(fail)?;
        Ok(Bench {
            args: args.clone(),
            catalog,
            swap: Arc::new(swap),
            ident: TableIdent::new(ns, "upsert".into()),
            settings: WriterSettings {
                channel: "bench".into(),
                compression: ParquetCompression::Zstd(3),
                target_file_size: 512 << 20,
                max_open_partitions: 1,
            },
            offset: -1,
        })
    }

    async fn table(&self) -> Result<Table, BenchUpsertError> {
        self.catalog
            .load_table(&self.ident)
            .await
            .map_err(|e| err("load the table")(e.to_string()))
    }

    fn target(&self, upsert: bool) -> IcebergTarget {
        let dlq = LocalDlq::new(self.args.dir.join("dlq"), "bench");
        let target = IcebergTarget::new("bench", self.ident.clone(), self.catalog.clone(), dlq)
            .with_rewrites(Some(self.swap.clone()), self.settings.clone());
        match upsert {
            true => target.with_upsert(vec!["id".into()]),
            false => target,
        }
    }

    fn key_column(&self, ids: impl Iterator<Item = u64>) -> ArrayRef {
        match self.args.key {
            KeyType::Long => Arc::new(Int64Array::from_iter_values(ids.map(|i| i as i64))),
            KeyType::String => {
                Arc::new(StringArray::from_iter_values(ids.map(|i| {
                    Uuid::from_u64_pair(0x0123_4567_89ab_cdef, i).to_string()
                })))
            }
        }
    }

    /// A pending batch writing keys `ids` (one data file) and deleting `deleted`.
    async fn batch(
        &mut self,
        ids: std::ops::Range<u64>,
        deleted: &[u64],
        value: &str,
    ) -> Result<PendingBatch, BenchUpsertError> {
        let table = self.table().await?;
        let arrow = Arc::new(
            iceberg::arrow::schema_to_arrow_schema(table.metadata().current_schema())
                .map_err(|e| err("arrow schema")(e.to_string()))?,
        );
        let n = (ids.end - ids.start) as usize;
        let columns = vec![
            self.key_column(ids),
            Arc::new(StringArray::from_iter_values(std::iter::repeat_n(value, n))) as ArrayRef,
        ];
        let batch =
            RecordBatch::try_new(arrow, columns).map_err(|e| err("batch")(e.to_string()))?;
        let batch_id = Uuid::now_v7();
        let written = write_data_files(&table, &self.settings, batch_id, batch)
            .await
            .map_err(|e| err("write data files")(e.to_string()))?;
        let deleted_keys = match deleted.is_empty() {
            true => None,
            false => {
                let keys: Vec<KeyHash> = key_hashes(&[self.key_column(deleted.iter().copied())])
                    .map_err(|e| err("hash keys")(e.to_string()))?;
                let path = format!(
                    "{}/data/floe-keys/bench-{batch_id}.keys",
                    table.metadata().location()
                );
                write_key_file(table.file_io(), &path, &keys)
                    .await
                    .map_err(|e| err("write a key file")(e.to_string()))?;
                Some(path)
            }
        };
        self.offset += 1;
        Ok(PendingBatch {
            channel: "bench".into(),
            batch_id,
            worker_id: "bench".into(),
            shards: vec![crate::model::ShardRange {
                shard: ShardId::kafka_partition(0),
                range: CheckpointRange {
                    after_exclusive: (self.offset > 0).then_some(Position::Offset(self.offset - 1)),
                    last_inclusive: Position::Offset(self.offset),
                },
                lease_counter: 1,
            }],
            files: BatchFiles::Iceberg {
                data_files: written.data_files_json,
                dlq_staged: None,
                deleted_keys,
            },
            num_rows: written.num_rows,
            num_dead_lettered: 0,
            dead_lettered_by_code: Default::default(),
            data_bytes: written.num_bytes,
            oldest_read_at_ms: 0,
        })
    }

    async fn commit(
        &self,
        target: &IcebergTarget,
        batch: &PendingBatch,
    ) -> Result<(), BenchUpsertError> {
        let loaded = target
            .load()
            .await
            .map_err(|e| err("load")(e.to_string()))?;
        let checkpoints = Checkpoints(BTreeMap::from([(
            ShardId::kafka_partition(0),
            Position::Offset(self.offset),
        )]));
        loaded
            .commit(&[batch], &[], &checkpoints, 1, Uuid::now_v7())
            .await
            .map_err(|e| err("commit")(e.to_string()))?;
        Ok(())
    }

    /// `--commits` upsert commits (the first builds the index, untimed), timed by window of 10.
    async fn timed_commits(&mut self) -> Result<(), BenchUpsertError> {
        let target = self.target(true);
        let (rows, keys) = (self.args.rows, self.args.keys);
        let mut next_new = keys;
        let mut times = Vec::new();
        for n in 0..=self.args.commits {
            // 70% of the rows update existing keys (a window sliding through them), 30% are new.
            let updates = rows * 7 / 10;
            let from = (n * updates) % keys.max(1);
            let deleted: Vec<u64> = (0..rows / 10).map(|i| next_new - 1 - i).collect();
            let mut batch = self.batch(from..from + updates, &deleted, "u").await?;
            let fresh = self
                .batch(next_new..next_new + rows - updates, &[], "n")
                .await?;
            next_new += rows - updates;
            if let (
                BatchFiles::Iceberg { data_files, .. },
                BatchFiles::Iceberg {
                    data_files: more, ..
                },
            ) = (&mut batch.files, fresh.files)
            {
                data_files.extend(more);
            }
            let started = Instant::now();
            self.commit(&target, &batch).await?;
            if n > 0 {
                times.push(started.elapsed().as_secs_f64() * 1000.0);
            }
            if n > 0 && (n % 10 == 0 || n == self.args.commits) {
                let mut window: Vec<f64> = std::mem::take(&mut times);
                window.sort_by(f64::total_cmp);
                stdout::println(
                    serde_json::json!({
                        "commits": format!("{}-{n}", n + 1 - window.len() as u64),
                        "p50_ms": window[window.len() / 2],
                        "max_ms": window[window.len() - 1],
                    })
                    .to_string(),
                );
            }
        }
        Ok(())
    }
}

/// The process's resident memory in bytes (`/proc/self/statm`; 0 where there is none).
fn rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
        .map_or(0, |pages| pages * 4096)
}
