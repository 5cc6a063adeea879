//! Table maintenance by the committer, beside the data commits (docs/operations.md, "Table
//! maintenance"): compaction of closed partitions, manifest rewrite and record expiration,
//! committed as `delete` and `replace` snapshots ([`super::rewrite`]) through the catalog's
//! [`TableSwap`]. Snapshot expiry itself rides in the data commits ([`super::target`]).
//!
//! Each snapshot's operation tells the truth about its rows, because incremental readers act
//! on it (Spark's and Flink's skip `replace` snapshots): record expiration removes rows, so it is
//! a `delete` of its own; compaction and manifest rewrite keep every row, so they are one
//! `replace` with equal added and deleted records. When both are due in one look, the `delete`
//! commits first and the `replace` is built on it; [`super::rewrite::check_operation`] refuses
//! any snapshot that breaks the rule before it reaches the catalog.
//!
//! The committer calls [`Maintainer::maintain`] after each round, on the table as it left it,
//! only while it holds the committer lease and only when the table carries its epoch; the
//! rewrite's `assert-ref-snapshot-id` makes the commit conditional on exactly that snapshot, so a
//! committer that lost its lease (a newer epoch committed since) can never land one, and every
//! file it deletes goes through its [`DeletionFence`]. The heavy part of compaction (reading and
//! writing data files) runs in a background task; the committer's loop only plans it and, once
//! the files are written, commits them:
//!
//! ```text
//!  look (every `interval`): manifests of the current snapshot, files by partition tuple
//!    record expiry:  periods ended more than record_retention ago -> remove all their files
//!    manifests > max_manifests                                    -> merge the small ones
//!    compaction:     closed partitions (+ compaction_delay) with >= 2 small files
//!                    -> background task: read them, write files of ~target_file_size
//!  commit: record expiry            -> delete snapshot  (deleted-records = rows expired)
//!          then, on the table it left:
//!          compaction inputs still live? + manifest merge
//!                                   -> replace snapshot (added-records = deleted-records)
//!          inputs gone (another rewrite won) -> outputs deleted (through the fence)
//! ```
//!
//! A kill at any step leaves at worst data files no snapshot references (compaction outputs
//! not yet committed): they carry floe's names and are the orphan sweep's. Files that a rewrite
//! removed stay on storage while retained snapshots reach them; snapshot expiry deletes them.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Instant;

use arrow_array::RecordBatch;
use futures::StreamExt;
use iceberg::scan::FileScanTask;
use iceberg::spec::{DataFile, DataFileFormat, ManifestEntryRef};
use iceberg::table::Table;
use iceberg::ErrorKind;
use tokio::task::JoinHandle;
use uuid::Uuid;

use super::deletes::read::read_deletes;
use super::fence::DeletionFence;
use super::rewrite::{
    commit_rewrite, delete_file_id, deletes_unchanged, CurrentFiles, DeleteFileId, Rewrite,
    Rewritten,
};
use super::writer::{rewrite_data_files, WriterSettings};
use crate::catalog::swap::TableSwap;
use crate::config::MaintenanceConfig;
use crate::telemetry;
use crate::time::now_ms;

const HOUR_MS: i64 = 3_600_000;

/// A data file is small, and worth compacting, below this share of the target size.
const SMALL_SHARE: (u64, u64) = (3, 4);

/// A data file is worth rewriting, whatever its size, once its delete files delete at least
/// this share of its rows (Iceberg Java's `delete-ratio-threshold` default, 0.3).
const DELETED_SHARE: (u64, u64) = (3, 10);

/// One compaction task reads at most this many target sizes of input (at least one hour).
const JOB_TARGETS: u64 = 4;

/// Attempts to commit one compaction's outputs before they are given up.
const MAX_COMMIT_ATTEMPTS: u32 = 3;

/// One partition of the table as maintenance plans it: the live files of one partition tuple
/// of one spec, and when the partition closes (docs/partitioning.md, "Maintenance"). Ordered
/// oldest first.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Group {
    /// When the partition closes, in ms since the epoch: the end of the period of its time
    /// value (`hour`, `day`, `month`, `year`), or, for a spec without a time transform, the
    /// commit time of its newest file (0 when that snapshot has expired).
    pub closes_ms: i64,
    /// Whether `closes_ms` ends a period of time values: its records may expire.
    pub period: bool,
    /// The partition spec of its files.
    pub spec_id: i32,
    /// The partition tuple, as text (one per tuple).
    pub tuple: String,
}

/// The end (exclusive, ms since the epoch) of the period whose `transform` value is `value`:
/// hour `h` ends at `(h + 1)` hours, day `d` at `(d + 1)` days, month `m` (months since
/// 1970-01) at the first day of the next month, year `y` (years since 1970) at the next
/// 1 January, all UTC. `None` for another transform.
pub fn period_end_ms(transform: iceberg::spec::Transform, value: i32) -> Option<i64> {
    use iceberg::spec::Transform::{Day, Hour, Month, Year};
    const DAY_MS: i64 = 24 * HOUR_MS;
    let next = i64::from(value) + 1;
    Some(match transform {
        Hour => next * HOUR_MS,
        Day => next * DAY_MS,
        Month => {
            let (y, m) = (1970 + next.div_euclid(12), next.rem_euclid(12) as u32 + 1);
            crate::time::days_from_civil(y, m, 1) * DAY_MS
        }
        Year => crate::time::days_from_civil(1970 + next, 1, 1) * DAY_MS,
        _ => return None,
    })
}

/// The live data files of `current` by partition ([`Group`]), oldest first. A file of a spec the
/// table does not know, or whose time value is not an `int`/`date`, is left out (never
/// compacted nor expired).
pub fn files_by_partition(current: &CurrentFiles) -> BTreeMap<Group, Vec<&ManifestEntryRef>> {
    use iceberg::spec::{Literal, PrimitiveLiteral};
    /// A tuple's period end (`None` without a time transform) and files.
    type Tuple<'a> = (Option<i64>, Vec<&'a ManifestEntryRef>);
    // (spec, tuple) -> its period end and files
    let mut tuples: BTreeMap<(i32, String), Tuple> = BTreeMap::new();
    for (spec_id, e) in current.live_with_spec() {
        let Some(time) = current.time_fields.get(&spec_id) else {
            continue;
        };
        let partition = e.data_file().partition();
        let end = match time {
            Some((i, transform)) => match partition.fields().get(*i) {
                Some(Some(Literal::Primitive(PrimitiveLiteral::Int(v)))) => {
                    period_end_ms(*transform, *v)
                }
                _ => continue,
            },
            None => None,
        };
        tuples
            .entry((spec_id, format!("{partition:?}")))
            .or_insert_with(|| (end, Vec::new()))
            .1
            .push(e);
    }
    tuples
        .into_iter()
        .map(|((spec_id, tuple), (end, files))| {
            let newest = || {
                files
                    .iter()
                    .map(|e| {
                        e.snapshot_id()
                            .and_then(|id| current.snapshot_ms.get(&id).copied())
                            .unwrap_or(0)
                    })
                    .max()
                    .unwrap_or(0)
            };
            let group = Group {
                closes_ms: end.unwrap_or_else(newest),
                period: end.is_some(),
                spec_id,
                tuple,
            };
            (group, files)
        })
        .collect()
}

/// Whether partition `g` closed at least `after_ms` before `now_ms`.
fn ended(g: &Group, after_ms: i64, now_ms: i64) -> bool {
    g.closes_ms.saturating_add(after_ms) <= now_ms
}

/// The partitions whose records expire at `now_ms` under `retention_ms`: those of a time
/// period that ended more than the retention ago (so never the open one; never a partition of
/// a spec without a time transform).
pub fn expired_partitions(
    groups: &BTreeMap<Group, Vec<&ManifestEntryRef>>,
    retention_ms: i64,
    now_ms: i64,
) -> Vec<Group> {
    groups
        .keys()
        .filter(|g| g.period && ended(g, retention_ms.max(0), now_ms))
        .cloned()
        .collect()
}

/// The write a data file came from: its file name without the `-<n>.parquet` counter, so the
/// files one flush or one compaction rolled into share it (`<channel>-<UUIDv7>`); a file of
/// another naming is a write of its own.
fn write_of(path: &str) -> &str {
    let name = path.rsplit('/').next().unwrap_or(path);
    name.strip_suffix(".parquet")
        .and_then(|stem| stem.rsplit_once('-'))
        .filter(|(_, n)| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
        .map_or(name, |(write, _)| write)
}

/// The files one compaction task rewrites at `now_ms`, oldest partitions first, up to
/// `JOB_TARGETS` × `target` bytes (at least one partition); partitions in `skip` are left alone.
/// `deleted` holds, per data file with delete files, the rows they delete. Per partition, see
/// [`partition_inputs`].
pub fn plan_compaction<'a>(
    groups: &BTreeMap<Group, Vec<&'a ManifestEntryRef>>,
    target: u64,
    delay_ms: i64,
    now_ms: i64,
    skip: &HashSet<Group>,
    deleted: &HashMap<&str, u64>,
) -> Vec<&'a ManifestEntryRef> {
    let budget = target.saturating_mul(JOB_TARGETS);
    let mut picked: Vec<&ManifestEntryRef> = Vec::new();
    let mut bytes = 0u64;
    for (group, files) in groups {
        if skip.contains(group) {
            continue;
        }
        let inputs = partition_inputs(group, files, target, delay_ms, now_ms, deleted);
        if inputs.is_empty() {
            continue;
        }
        let size: u64 = inputs.iter().map(|e| e.file_size_in_bytes()).sum();
        if !picked.is_empty() && bytes + size > budget {
            break;
        }
        bytes += size;
        picked.extend(inputs);
    }
    picked
}

/// The files of partition `group` (`files`) a compaction rewrites at `now_ms` (none: the
/// partition is left as it is):
/// - its small files (under 3/4 of `target` bytes) when there are two or more from at least two
///   writes, once the partition closed at least `delay_ms` ago ([`Group::closes_ms`]), or at
///   once when the partition has delete files (an upsert table's partition may never close:
///   its files are compacted while it is written);
/// - whatever its size, every file whose delete files delete at least 30% of its rows
///   (`deleted`: rows deleted per data file path), with the partition's small files that have
///   delete files, which are read with their deletes applied and whose delete files leave the
///   table with them.
///
/// Files of a single write are never compacted again for being small: the writer rolls on its
/// estimate of the encoded size, so a compaction's outputs can all be well under the target,
/// and rewriting them would only write them again (found by a fresh-user test: an hour
/// recompacted every interval, forever). Late data (another write), or deletes, make the
/// partition eligible again.
pub fn partition_inputs<'a>(
    group: &Group,
    files: &[&'a ManifestEntryRef],
    target: u64,
    delay_ms: i64,
    now_ms: i64,
    deleted: &HashMap<&str, u64>,
) -> Vec<&'a ManifestEntryRef> {
    let small_below = target / SMALL_SHARE.1 * SMALL_SHARE.0;
    let deleted_of = |e: &ManifestEntryRef| deleted.get(e.file_path()).copied().unwrap_or(0);
    let has_deletes = files.iter().any(|e| deleted_of(e) > 0);
    let small: Vec<&ManifestEntryRef> = files
        .iter()
        .copied()
        .filter(|e| e.file_size_in_bytes() < small_below)
        .collect();
    let writes: HashSet<&str> = small.iter().map(|e| write_of(e.file_path())).collect();
    let mut picked: Vec<&ManifestEntryRef> = Vec::new();
    if (has_deletes || ended(group, delay_ms, now_ms)) && small.len() >= 2 && writes.len() >= 2 {
        picked = small.clone();
    }
    let mostly_deleted = |e: &&ManifestEntryRef| {
        deleted_of(e) * DELETED_SHARE.1 >= e.record_count() * DELETED_SHARE.0 && deleted_of(e) > 0
    };
    if picked.is_empty() && !files.iter().any(mostly_deleted) {
        return picked;
    }
    let picked_paths: HashSet<&str> = picked.iter().map(|e| e.file_path()).collect();
    let more: Vec<&ManifestEntryRef> = files
        .iter()
        .copied()
        .filter(|e| !picked_paths.contains(e.file_path()))
        .filter(|e| {
            mostly_deleted(e) || (deleted_of(e) > 0 && e.file_size_in_bytes() < small_below)
        })
        .collect();
    picked.extend(more);
    picked
}

/// The shape of a table, as `floe channel describe` shows it: what maintenance keeps small.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct TableHealth {
    /// Retained snapshots.
    pub snapshots: usize,
    /// Manifests in the current snapshot.
    pub manifests: usize,
    /// Live data files in the current snapshot.
    pub data_files: usize,
    /// Their bytes.
    pub data_bytes: u64,
    /// Partitions compaction would rewrite files of ([`partition_inputs`]): closed ones (ended
    /// at least `compaction_delay` ago, or quiet that long for a spec without a time transform)
    /// with small files of two writes or more, and those with files mostly deleted or small
    /// files with delete files.
    pub partitions_to_compact: usize,
    /// Metadata files in the metadata log.
    pub metadata_log: usize,
    /// When floe's last maintenance snapshot was committed (RFC 3339) and its tasks.
    pub last_maintenance: Option<String>,
}

/// The health of `table` at `now_ms`, small files judged against `target` bytes and closed partitions
/// by `delay_ms` (reads the current snapshot's manifests).
///
/// Errors: a manifest list or manifest cannot be read.
pub async fn table_health(
    table: &Table,
    target: u64,
    delay_ms: i64,
    now_ms: i64,
) -> iceberg::Result<TableHealth> {
    let current = CurrentFiles::load(table).await?;
    // plan_compaction stops at one task's budget; count every partition it would take.
    let deleted = current.deleted_rows();
    let partitions_to_compact = files_by_partition(&current)
        .iter()
        .filter(|(g, files)| {
            !partition_inputs(g, files, target, delay_ms, now_ms, &deleted).is_empty()
        })
        .count();
    let md = table.metadata();
    let last_maintenance = md
        .snapshots()
        .filter_map(|s| {
            let tasks = s
                .summary()
                .additional_properties
                .get(super::rewrite::SUMMARY_MAINTENANCE)?;
            Some((s.timestamp_ms(), tasks.clone()))
        })
        .max_by_key(|(t, _)| *t)
        .map(|(t, tasks)| format!("{} ({tasks})", crate::time::rfc3339_ms(t)));
    Ok(TableHealth {
        snapshots: md.snapshots().count(),
        manifests: current.manifests.len(),
        data_files: current.live().count(),
        data_bytes: current.live().map(|e| e.file_size_in_bytes()).sum(),
        partitions_to_compact,
        metadata_log: md.metadata_log().len(),
        last_maintenance,
    })
}

/// The snapshots of `table` that expiry under `m` would remove at `now_ms` (wall clock: snapshot
/// timestamps are): older than `snapshot_retention`, never the current one, never one of the
/// `min_snapshots` newest. Empty when expiry is off.
pub fn expirable(table: &Table, m: &MaintenanceConfig, now_ms: i64) -> Vec<i64> {
    if !m.enabled || !m.snapshot_expiry {
        return Vec::new();
    }
    let metadata = table.metadata();
    let current = metadata.current_snapshot_id();
    let mut snapshots: Vec<_> = metadata.snapshots().collect();
    // Newest first; snapshots() comes in no particular order.
    snapshots.sort_by_key(|s| std::cmp::Reverse((s.timestamp_ms(), s.sequence_number())));
    let cutoff = now_ms.saturating_sub(m.snapshot_retention.as_millis() as i64);
    snapshots
        .iter()
        .skip(m.min_snapshots as usize)
        .filter(|s| s.timestamp_ms() < cutoff && Some(s.snapshot_id()) != current)
        .map(|s| s.snapshot_id())
        .collect()
}

/// A data file to compact and its delete files, whose deletes the compaction applies.
#[derive(Debug, Clone)]
pub struct CompactionInput {
    /// The data file's entry.
    pub file: ManifestEntryRef,
    /// Its live delete files (naming it in `referenced_data_file`; at most one from floe).
    pub deletes: Vec<ManifestEntryRef>,
}

impl CompactionInput {
    /// The live data file `file` of `current` with its delete files.
    pub fn of(current: &CurrentFiles, file: &ManifestEntryRef) -> Self {
        CompactionInput {
            file: file.clone(),
            deletes: current
                .deletes_of(file.file_path())
                .into_iter()
                .cloned()
                .collect(),
        }
    }
}

/// A finished compaction task: data files written, not yet committed.
#[derive(Debug)]
pub struct Compacted {
    /// Paths of the input files (live when planned).
    pub inputs: HashSet<String>,
    /// The delete files applied to each input (empty: none), what the commit checks are still
    /// the inputs' ([`Rewrite::deletes_applied`]).
    pub deletes_applied: HashMap<String, Vec<DeleteFileId>>,
    /// Live rows of the inputs (their records less the rows their delete files delete): the
    /// rows written.
    pub rows: u64,
    /// The data files written.
    pub outputs: Vec<DataFile>,
    /// The UUIDv7 in the outputs' names (`<channel>-<file id>-<n>.parquet`).
    pub file_id: Uuid,
    /// Commit attempts so far.
    attempts: u32,
    /// Planned inputs left out: written with an earlier schema of the table (see [`compact`]).
    pub older_schema: Vec<String>,
}

/// Whether the data file `entry` of `table` was written with the columns of `current` (names,
/// types, nullability, nesting), read from its Parquet footer.
///
/// Compaction only merges such files: iceberg-rust 0.10.1's reader projects a file of an
/// earlier schema onto the current one only for top-level changes, and fails on a struct that
/// gained a field (`Incorrect number of arrays for StructArray fields`, found by
/// tests/it/schema_evolution.rs). Files written before a schema change
/// (`evolution = "compatible"`) are left as they are, readable by every engine.
///
/// Errors: the file cannot be read.
async fn written_with(
    table: &Table,
    entry: &ManifestEntryRef,
    current: &arrow_schema::Schema,
) -> iceberg::Result<bool> {
    let file = entry.data_file();
    let input = table.file_io().new_input(file.file_path())?;
    let reader = iceberg::arrow::ArrowFileReader::new(
        iceberg::io::FileMetadata {
            size: file.file_size_in_bytes(),
        },
        Box::new(input.reader().await?),
    );
    let builder = parquet::arrow::ParquetRecordBatchStreamBuilder::new(reader)
        .await
        .map_err(|e| {
            iceberg::Error::new(ErrorKind::DataInvalid, "parquet footer").with_source(e)
        })?;
    Ok(same_shape(builder.schema().fields(), current.fields()))
}

/// The same names, types, nullability and nesting (field metadata not compared).
fn same_shape(a: &arrow_schema::Fields, b: &arrow_schema::Fields) -> bool {
    use arrow_schema::DataType;
    fn ty(a: &DataType, b: &DataType) -> bool {
        match (a, b) {
            (DataType::Struct(x), DataType::Struct(y)) => same_shape(x, y),
            (DataType::List(x), DataType::List(y))
            | (DataType::LargeList(x), DataType::LargeList(y))
            | (DataType::Map(x, _), DataType::Map(y, _)) => {
                x.is_nullable() == y.is_nullable() && ty(x.data_type(), y.data_type())
            }
            (x, y) => x == y,
        }
    }
    a.len() == b.len()
        && a.iter().zip(b.iter()).all(|(x, y)| {
            x.name() == y.name()
                && x.is_nullable() == y.is_nullable()
                && ty(x.data_type(), y.data_type())
        })
}

/// Reads the rows of `inputs` (data files of `table`'s current schema) with their deletes
/// applied (a row whose position a delete file names is not read) and writes the live rows
/// again as files of about `settings.target_file_size`, one partition at a time. Inputs are read
/// oldest data first (by data sequence number), so a key that two inputs hold (an append table
/// made an upsert one) keeps its newer row last. An input whose rows are all deleted is not
/// read: it leaves the table with its delete files, nothing replaces it.
///
/// Errors: any read or write error, or a row count that differs (outputs deleted then).
pub async fn compact(
    table: Table,
    settings: WriterSettings,
    inputs: Vec<CompactionInput>,
) -> iceberg::Result<Compacted> {
    let md = table.metadata();
    let schema = md.current_schema().clone();
    let file_id = Uuid::now_v7();
    let current_arrow = iceberg::arrow::schema_to_arrow_schema(&schema)?;
    let mut older_schema = Vec::new();
    let mut kept = Vec::with_capacity(inputs.len());
    for input in inputs {
        if written_with(&table, &input.file, &current_arrow).await? {
            kept.push(input);
        } else {
            older_schema.push(input.file.file_path().to_string());
        }
    }
    let mut inputs = kept;
    inputs.sort_by_key(|i| i.file.sequence_number());
    if inputs.len() < 2 && inputs.iter().all(|i| i.deletes.is_empty()) {
        tracing::info!(table = %table.identifier(), older_schema_files = older_schema.len(), "compaction skipped: the planned files were written with an earlier schema of the table (they stay as they are)");
        return Ok(Compacted {
            inputs: HashSet::new(),
            deletes_applied: HashMap::new(),
            rows: 0,
            outputs: Vec::new(),
            file_id,
            attempts: 0,
            older_schema,
        });
    }
    let mut streams = Vec::with_capacity(inputs.len());
    let mut rows = 0u64;
    let mut deletes_applied = HashMap::new();
    for input in &inputs {
        let f = input.file.data_file();
        let mut deleted = roaring::RoaringTreemap::new();
        for d in &input.deletes {
            deleted |= read_deletes(table.file_io(), d.data_file(), f.file_path()).await?;
        }
        deleted.remove_range(f.record_count()..);
        rows += f.record_count() - deleted.len();
        deletes_applied.insert(
            f.file_path().to_string(),
            input.deletes.iter().map(delete_file_id).collect(),
        );
        if deleted.len() < f.record_count() {
            streams.push(live_rows(&table, &schema, f, deleted)?);
        }
    }
    let stream = futures::stream::iter(streams).flatten().boxed();
    let outputs = rewrite_data_files(&table, &settings, file_id, stream).await?;
    let written: u64 = outputs.iter().map(|f| f.record_count()).sum();
    if written != rows {
        for f in &outputs {
            let _ = table.file_io().delete(f.file_path()).await;
        }
        return Err(iceberg::Error::new(
            ErrorKind::DataInvalid,
            format!("compaction read {rows} live rows but wrote {written}: nothing committed"),
        ));
    }
    tracing::info!(table = %table.identifier(), %file_id, inputs = inputs.len(), outputs = outputs.len(), rows, "compaction written");
    crate::failpoint::step_point("compaction-written").await;
    Ok(Compacted {
        inputs: inputs
            .iter()
            .map(|i| i.file.file_path().to_string())
            .collect(),
        deletes_applied,
        rows,
        outputs,
        file_id,
        attempts: 0,
        older_schema,
    })
}

/// The rows of data file `f` (of `table`, read as `schema`) but those at the positions of
/// `deleted`, in order.
///
/// Errors: the reader's (building the scan).
fn live_rows(
    table: &Table,
    schema: &iceberg::spec::SchemaRef,
    f: &DataFile,
    deleted: roaring::RoaringTreemap,
) -> iceberg::Result<futures::stream::BoxStream<'static, iceberg::Result<RecordBatch>>> {
    let field_ids: Vec<i32> = schema.as_struct().fields().iter().map(|f| f.id).collect();
    let task = FileScanTask::builder()
        .with_file_size_in_bytes(f.file_size_in_bytes())
        .with_start(0)
        .with_length(f.file_size_in_bytes())
        .with_record_count(Some(f.record_count()))
        .with_data_file_path(f.file_path().to_string())
        .with_data_file_format(DataFileFormat::Parquet)
        .with_schema(schema.clone())
        .with_project_field_ids(field_ids)
        // No partition or spec: given them, iceberg-rust 0.10's reader replaces
        // identity-partitioned columns by run-end-encoded constants, which its partition
        // splitter refuses (every compaction of an `identity` spec failed). floe's data
        // files hold every column, identity sources included.
        .with_case_sensitive(true)
        .build();
    let reader = iceberg::arrow::ArrowReaderBuilder::new(
        table.file_io().clone(),
        iceberg::Runtime::try_current()?,
    )
    .with_data_file_concurrency_limit(1)
    .build();
    let batches = reader
        .read(futures::stream::iter([Ok(task)]).boxed())?
        .stream();
    if deleted.is_empty() {
        return Ok(batches.boxed());
    }
    // Positions run on across the file's batches, which come in file order.
    let mut at = 0u64;
    Ok(batches
        .map(move |batch| {
            let batch = batch?;
            let start = at;
            at += batch.num_rows() as u64;
            let keep: arrow_array::BooleanArray =
                (start..at).map(|p| Some(!deleted.contains(p))).collect();
            arrow_select::filter::filter_record_batch(&batch, &keep).map_err(|e| {
                iceberg::Error::new(ErrorKind::Unexpected, "drop deleted rows").with_source(e)
            })
        })
        .boxed())
}

#[derive(Default)]
struct State {
    /// When the next look is due (`None`: at the next call).
    next_look: Option<Instant>,
    /// When the last look that was due began (an idle table's next look is
    /// [`IDLE_LOOK_INTERVAL`] after it, until [`Maintainer::note_commit`]).
    last_look: Option<Instant>,
    /// The running compaction task.
    job: Option<JoinHandle<iceberg::Result<Compacted>>>,
    /// A finished compaction waiting for its commit.
    ready: Option<Compacted>,
    /// The running orphan sweep.
    sweep: Option<JoinHandle<()>>,
    /// When the next orphan sweep is due (`None`: not planned yet).
    next_sweep: Option<Instant>,
    /// Data files compaction leaves alone: written with an earlier schema ([`compact`]).
    older_schema: HashSet<String>,
}

/// How long an idle table's maintenance waits between looks (or `interval`, when longer): a
/// look that found nothing to do, with no commit since, is repeated only this often (each look
/// loads the table and its manifests: at the default 1-minute `interval`, two catalog loads per
/// table per minute, 10 a second for a worker of 300 idle tables). What becomes due by time
/// alone on a table that gets no commits (record expiration, compaction of an hour that closed
/// with no commit after it, compaction by age) waits up to this long.
pub const IDLE_LOOK_INTERVAL: std::time::Duration = std::time::Duration::from_secs(3600);

/// The first orphan sweep runs this long after the committer starts.
const SWEEP_FIRST_DELAY: std::time::Duration = std::time::Duration::from_secs(3600);
/// How long after a look that could not load its table the next one comes, at most
/// ([`Maintainer::look_failed`]).
pub const LOOK_RETRY_AFTER_FAILURE: std::time::Duration = std::time::Duration::from_secs(60);
/// Then one every day.
const SWEEP_INTERVAL: std::time::Duration = std::time::Duration::from_secs(86_400);

/// What one [`Maintainer::maintain`] call did.
#[derive(Debug, Clone, Default)]
pub struct MaintenanceReport {
    /// The last replace or delete snapshot committed, if any.
    pub snapshot_id: Option<i64>,
    /// Every snapshot committed, in order (a `delete` of record expiry first, then a `replace`).
    pub snapshots: Vec<MaintenanceSnapshot>,
    /// The tasks it did (`compaction`, `manifest-rewrite`, `record-expiry`).
    pub tasks: Vec<&'static str>,
    /// Data files removed from the table (compacted or expired).
    pub files_removed: usize,
    /// Data files added (compaction outputs).
    pub files_added: usize,
    /// Whether a compaction task was started.
    pub compaction_started: bool,
    /// The table as the last snapshot committed it (what follow-up cleanup works from: never a
    /// reload, which may show a newer committer's table).
    pub table: Option<Table>,
}

/// One maintenance snapshot as committed: what its summary says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MaintenanceSnapshot {
    /// The snapshot id.
    pub snapshot_id: i64,
    /// Its operation (`delete`, `replace`).
    pub operation: String,
    /// Its `floe.maintenance` tasks.
    pub tasks: String,
    /// `added-records`.
    pub added_records: u64,
    /// `deleted-records`.
    pub deleted_records: u64,
    /// `total-records`.
    pub total_records: u64,
}

impl MaintenanceSnapshot {
    /// Snapshot `snapshot_id` of `table` as its summary describes it (zeros where a key is
    /// missing).
    pub fn of(table: &Table, snapshot_id: i64) -> Self {
        let snapshot = table.metadata().snapshot_by_id(snapshot_id);
        let summary = snapshot.map(|s| s.summary());
        let number = |key: &str| -> u64 {
            summary
                .and_then(|s| s.additional_properties.get(key))
                .and_then(|v| v.parse().ok())
                .unwrap_or_default()
        };
        MaintenanceSnapshot {
            snapshot_id,
            operation: summary.map_or(String::new(), |s| s.operation.as_str().to_string()),
            tasks: summary
                .and_then(|s| {
                    s.additional_properties
                        .get(super::rewrite::SUMMARY_MAINTENANCE)
                })
                .cloned()
                .unwrap_or_default(),
            added_records: number("added-records"),
            deleted_records: number("deleted-records"),
            total_records: number("total-records"),
        }
    }
}

/// The maintenance of one channel's table by its committer (see the module docs). Dropping it
/// aborts a running compaction task (its files are orphans for the sweep).
pub struct Maintainer {
    channel: String,
    config: MaintenanceConfig,
    swap: Option<Arc<dyn TableSwap>>,
    writer: Option<WriterSettings>,
    lister: Option<super::orphans::FileLister>,
    clock: Clock,
    state: tokio::sync::Mutex<State>,
}

/// The planner's clock: milliseconds since the Unix epoch.
pub type Clock = Arc<dyn Fn() -> i64 + Send + Sync>;

impl Drop for Maintainer {
    fn drop(&mut self) {
        let st = self.state.get_mut();
        if let Some(job) = st.job.take() {
            job.abort();
        }
        if let Some(sweep) = st.sweep.take() {
            sweep.abort();
        }
    }
}

fn task_label(task: &str) -> &'static str {
    match task {
        "compaction" => "compaction",
        "manifest-rewrite" => "manifest_rewrite",
        _ => "record_expiry",
    }
}

/// One look of [`Maintainer::maintain`] at a table, as its commits need it.
struct Look<'a> {
    /// The table as the look found it.
    table: &'a Table,
    /// Where the look's snapshots are committed.
    swap: &'a dyn TableSwap,
    /// Deletes the outputs of a compaction given up.
    fence: &'a DeletionFence,
    /// The partitions whose records the look expires.
    expired: &'a HashSet<Group>,
    /// Manifests of the table as the look found it.
    manifests_before: usize,
    /// When the look's first commit started.
    started: Instant,
}

impl Maintainer {
    /// The maintenance of `channel`'s table as `config` says, committing through `swap` (`None`:
    /// the catalog has none, only snapshot expiry runs) and writing compaction outputs with
    /// `writer` (`None`: no compaction).
    pub fn new(
        channel: &str,
        config: MaintenanceConfig,
        swap: Option<Arc<dyn TableSwap>>,
        writer: Option<WriterSettings>,
    ) -> Self {
        Maintainer {
            channel: channel.to_string(),
            config,
            swap,
            writer,
            lister: None,
            clock: Arc::new(now_ms),
            state: tokio::sync::Mutex::new(State::default()),
        }
    }

    /// The same maintainer sweeping orphans (`orphan_sweep`), listing the table location with
    /// `lister`.
    pub fn with_lister(mut self, lister: super::orphans::FileLister) -> Self {
        self.lister = Some(lister);
        self
    }

    /// The age beyond which a pending batch is never accepted: half the sweep's safety age when
    /// the sweep runs (see [`super::orphans`]).
    pub fn max_batch_age(&self) -> Option<std::time::Duration> {
        (self.config.enabled && self.config.orphan_sweep && self.lister.is_some())
            .then(|| self.config.orphan_age / 2)
    }

    /// Starts an orphan sweep of `table` in the background when one is due (or `now`), unless
    /// one is running: pending batches' files (`batches`) are spared, and it deletes through
    /// `fence`. Logs one line when it ends; counted in `floe_maintenance_files_deleted_total{kind="orphan"}`.
    pub async fn sweep_if_due(
        &self,
        table: &Table,
        batches: &dyn crate::lease::BatchStore,
        now: bool,
        fence: &DeletionFence,
    ) -> iceberg::Result<bool> {
        let Some(lister) = self
            .lister
            .clone()
            .filter(|_| self.max_batch_age().is_some())
        else {
            return Ok(false);
        };
        let mut st = self.state.lock().await;
        if st.sweep.as_ref().is_some_and(|s| !s.is_finished()) {
            return Ok(false);
        }
        let due_at = *st
            .next_sweep
            .get_or_insert_with(|| Instant::now() + SWEEP_FIRST_DELAY);
        if !now && Instant::now() < due_at {
            return Ok(false);
        }
        st.next_sweep = Some(Instant::now() + SWEEP_INTERVAL);
        let pending: std::collections::HashSet<String> = batches
            .list_pending(&self.channel)
            .await
            .map_err(|e| iceberg::Error::new(ErrorKind::Unexpected, e.to_string()))?
            .iter()
            .flat_map(|b| match &b.files {
                crate::model::BatchFiles::Iceberg {
                    data_files,
                    deleted_keys,
                    ..
                } => {
                    let mut paths = super::writer::data_file_paths(data_files);
                    paths.extend(deleted_keys.iter().cloned());
                    paths
                }
                crate::model::BatchFiles::Raw { .. } => Vec::new(),
            })
            .collect();
        let (table, channel, age) = (
            table.clone(),
            self.channel.clone(),
            self.config.orphan_age.as_millis() as i64,
        );
        let now_ms = (self.clock)();
        let fence = fence.clone();
        st.sweep = Some(tokio::spawn(async move {
            let started = Instant::now();
            match super::orphans::sweep(&table, &channel, &lister, &pending, age, now_ms, &fence)
                .await
            {
                Ok(r) => {
                    telemetry::record_maintenance_files_deleted(
                        &channel,
                        "orphan",
                        r.deleted as u64,
                    );
                    tracing::info!(channel = %channel, table = %table.identifier(), listed = r.listed, deleted = r.deleted, young = r.young, took_ms = started.elapsed().as_millis() as u64, "orphans swept");
                }
                Err(e) => {
                    tracing::warn!(channel = %channel, table = %table.identifier(), error = %e, "orphan sweep failed; tried again tomorrow");
                }
            }
        }));
        Ok(true)
    }

    /// Waits for a running orphan sweep to end.
    pub async fn wait_for_sweep(&self) {
        let sweep = self.state.lock().await.sweep.take();
        if let Some(sweep) = sweep {
            let _ = sweep.await;
        }
    }

    /// The same maintainer deciding which hours are closed or expired by `clock` instead of the
    /// wall clock (`floe bench commits` replays a stream's time faster than it passes).
    pub fn with_clock(mut self, clock: Clock) -> Self {
        self.clock = clock;
        self
    }

    /// Whether any task besides snapshot expiry can run.
    pub fn active(&self) -> bool {
        self.config.enabled
            && self.swap.is_some()
            && (self.config.compaction
                || self.config.manifest_rewrite
                || self.config.record_retention.is_some())
    }

    /// Whether a look or a sweep is due now: the interval passed, a compaction task finished
    /// or waits for its commit, or the daily sweep is due. Cheap (no I/O).
    pub async fn due(&self) -> bool {
        let st = self.state.lock().await;
        let look = self.active()
            && (st.next_look.is_none_or(|t| Instant::now() >= t)
                || st.ready.is_some()
                || st.job.as_ref().is_some_and(|j| j.is_finished()));
        let sweep = self.max_batch_age().is_some()
            && st.sweep.as_ref().is_none_or(|s| s.is_finished())
            && st.next_sweep.is_none_or(|t| Instant::now() >= t);
        look || sweep
    }

    /// Whether a compaction task is running or waiting for its commit.
    pub async fn busy(&self) -> bool {
        let st = self.state.lock().await;
        st.job.is_some() || st.ready.is_some()
    }

    /// One look at `table` (as the committer's last round left it, carrying its epoch): commits
    /// record expiration as a `delete` snapshot, then a finished compaction and manifest rewrite
    /// as one `replace` snapshot (never one snapshot for both: a `replace` must not change the
    /// rows, see [`super::rewrite::check_operation`]), and starts a compaction task for closed
    /// hours with small files. Cheap when nothing is due (no I/O before `interval` passed or a
    /// task finished). Compaction outputs given up are deleted through `fence`.
    ///
    /// Errors: reading the manifests, writing the new ones, or the swap of the first snapshot
    /// of the look; a lost swap (`CatalogCommitConflicts` or a failed requirement) is retried
    /// at the next call. When the `delete` committed and the `replace` failed, the report says
    /// what committed and the failure is logged.
    pub async fn maintain(
        &self,
        table: &Table,
        fence: &DeletionFence,
    ) -> iceberg::Result<MaintenanceReport> {
        let mut report = MaintenanceReport::default();
        let Some(swap) = self.swap.as_deref().filter(|_| self.active()) else {
            return Ok(report);
        };
        let mut st = self.state.lock().await;
        if st.job.as_ref().is_some_and(|j| j.is_finished()) {
            let job = st.job.take().expect("checked");
            st.ready = self.finished(&mut st, job.await);
        }
        let due = st.next_look.is_none_or(|t| Instant::now() >= t);
        if st.ready.is_none() && !due {
            return Ok(report);
        }
        if due {
            st.next_look = Some(Instant::now() + self.config.interval);
            st.last_look = Some(Instant::now());
        }
        let current = CurrentFiles::load(table).await?;
        let groups = files_by_partition(&current);
        telemetry::set_table_shape(
            &self.channel,
            current.manifests.len(),
            current.live().count(),
        );
        let now = (self.clock)();

        // Record expiration: whole files removed, a `delete` snapshot of its own.
        let (expiry, expired) = self.plan_record_expiry(due, &current, &groups, now);
        // Compaction and manifest rewrite: the same rows in other files, a `replace`.
        let mut compacted = st.ready.take();
        let rewrite = self.plan_replace(due, table, &current, &expiry, &mut compacted, fence);

        let steps: Vec<Rewrite> = [expiry, rewrite]
            .into_iter()
            .filter(|r| !r.is_empty())
            .collect();
        if steps.is_empty() {
            if self.may_start_compaction(due, &st, current.unscoped_deletes) {
                report.compaction_started =
                    self.start_compaction(&mut st, table, &current, &groups, now, &expired);
            }
            if due && st.job.is_none() && st.ready.is_none() {
                // Nothing to do: look again after a commit, or once an idle interval passed.
                st.next_look = Some(Instant::now() + self.config.interval.max(IDLE_LOOK_INTERVAL));
            }
            return Ok(report);
        }
        let look = Look {
            table,
            swap,
            fence,
            expired: &expired,
            manifests_before: current.manifests.len(),
            started: Instant::now(),
        };
        let base = self
            .commit_steps(&look, &mut st, steps, current, compacted, &mut report)
            .await?;
        let after = CurrentFiles::load(&base).await?;
        telemetry::set_table_shape(&self.channel, after.manifests.len(), after.live().count());
        // Plan the next compaction on the table as committed, in this same look: a look that
        // always commits something (record expiry of late records) must not keep compaction
        // from ever starting (found by a fresh-user test).
        if self.may_start_compaction(due, &st, after.unscoped_deletes) {
            let groups = files_by_partition(&after);
            report.compaction_started =
                self.start_compaction(&mut st, &base, &after, &groups, now, &expired);
        }
        report.table = Some(base);
        Ok(report)
    }

    /// The record expiration of a look (`due`): every file of the partitions whose period ended
    /// more than `record_retention` before `now`, and those partitions (their files' delete
    /// files leave with them, [`super::rewrite`]). Nothing on a table with delete files that may
    /// reach several data files.
    fn plan_record_expiry(
        &self,
        due: bool,
        current: &CurrentFiles,
        groups: &BTreeMap<Group, Vec<&ManifestEntryRef>>,
        now: i64,
    ) -> (Rewrite, HashSet<Group>) {
        let mut expiry = Rewrite::default();
        let mut expired: HashSet<Group> = HashSet::new();
        if let (true, Some(retention)) = (due, self.config.record_retention) {
            if !current.unscoped_deletes {
                for g in expired_partitions(groups, retention.as_millis() as i64, now) {
                    expiry
                        .remove
                        .extend(groups[&g].iter().map(|e| e.file_path().to_string()));
                    expired.insert(g);
                }
                if !expired.is_empty() {
                    expiry.tasks.push("record-expiry");
                }
            }
        }
        (expiry, expired)
    }

    /// The `replace` of a look: the finished compaction (`compacted`) while its inputs are still
    /// live and not expired, and a manifest merge when due and there are too many manifests. A
    /// compaction already committed (an earlier outcome was unknown) or overtaken is taken out
    /// of `compacted`; an overtaken one's outputs are deleted through `fence`.
    fn plan_replace(
        &self,
        due: bool,
        table: &Table,
        current: &CurrentFiles,
        expiry: &Rewrite,
        compacted: &mut Option<Compacted>,
        fence: &DeletionFence,
    ) -> Rewrite {
        let live: HashSet<&str> = current.live().map(|e| e.file_path()).collect();
        let mut rewrite = Rewrite::default();
        if let Some(c) = compacted.as_ref() {
            let committed = c.outputs.iter().any(|f| live.contains(f.file_path()));
            // An input that gained deletes since it was read (an upsert commit between the
            // read and now) would get its deleted rows back: the compaction is overtaken.
            let usable = c.inputs.iter().all(|p| live.contains(p.as_str()))
                && !c.inputs.iter().any(|p| expiry.remove.contains(p))
                && !current.unscoped_deletes
                && deletes_unchanged(current, &c.deletes_applied);
            if committed || !usable {
                // Committed by an earlier call whose outcome was unknown, or overtaken (record
                // expiry, another engine's rewrite): never delete a file the table references.
                let c = compacted.take().expect("checked");
                if !committed {
                    self.abandon(table, c, "its inputs changed", fence);
                }
            } else {
                rewrite.remove.extend(c.inputs.iter().cloned());
                rewrite.add.extend(c.outputs.iter().cloned());
                rewrite.deletes_applied = c.deletes_applied.clone();
                rewrite.tasks.push("compaction");
            }
        }
        if due
            && self.config.manifest_rewrite
            && current.manifests.len() > self.config.max_manifests as usize
        {
            rewrite.merge_manifests = true;
            rewrite.tasks.push("manifest-rewrite");
        }
        rewrite
    }

    /// Whether a look (`due`) starts a compaction task: compaction is on, no task runs or waits
    /// for its commit, and the table has no delete files that may reach several data files.
    fn may_start_compaction(&self, due: bool, st: &State, unscoped_deletes: bool) -> bool {
        due && self.config.compaction && st.job.is_none() && st.ready.is_none() && !unscoped_deletes
    }

    /// Commits the look's `steps` in order, each on the table the one before left (`current`:
    /// the files of the first); snapshot expiry rides in the last. Returns the table as the last
    /// committed snapshot left it. A step that fails ends the look: its compaction is kept for
    /// the next look (or given up after [`MAX_COMMIT_ATTEMPTS`] conflicts).
    ///
    /// Errors: the failure of the first step (a later one's is logged: the report says what
    /// committed).
    async fn commit_steps(
        &self,
        look: &Look<'_>,
        st: &mut State,
        steps: Vec<Rewrite>,
        current: CurrentFiles,
        mut compacted: Option<Compacted>,
        report: &mut MaintenanceReport,
    ) -> iceberg::Result<Table> {
        let last = steps.len() - 1;
        let (mut base, mut base_files) = (look.table.clone(), current);
        for (i, mut step) in steps.into_iter().enumerate() {
            if i > 0 {
                base_files = CurrentFiles::load(&base).await?;
            }
            // Snapshot expiry rides in the look's last snapshot.
            if i == last {
                step.expire = expirable(&base, &self.config, now_ms());
            }
            let with_compaction = step.tasks.contains(&"compaction");
            match commit_rewrite(&base, &base_files, &step, look.swap, Uuid::now_v7()).await {
                Ok(done) => {
                    let c = compacted.as_ref().filter(|_| with_compaction);
                    self.committed(look, &step, &done, c, report);
                    if with_compaction {
                        compacted = None;
                    }
                    base = done.table;
                }
                Err(e) => {
                    let c = compacted.take().map(|mut c| {
                        c.attempts += u32::from(with_compaction);
                        c
                    });
                    self.not_committed(look, st, &step, &base, c, &e);
                    if report.snapshots.is_empty() {
                        return Err(e);
                    }
                    tracing::warn!(channel = %self.channel, table = %look.table.identifier(), tasks = %step.tasks.join(","), error = %e, "maintenance snapshot not committed after the record expiry before it; tried again at the next look");
                    break;
                }
            }
        }
        Ok(base)
    }

    /// Counts, logs and reports committed step `step` (`compacted`: the compaction it
    /// committed, if any).
    fn committed(
        &self,
        look: &Look<'_>,
        step: &Rewrite,
        done: &Rewritten,
        compacted: Option<&Compacted>,
        report: &mut MaintenanceReport,
    ) {
        for t in &step.tasks {
            telemetry::record_maintenance_run(&self.channel, task_label(t), "committed");
        }
        if let Some(c) = compacted {
            telemetry::record_compaction_files(
                &self.channel,
                c.inputs.len() as u64,
                c.outputs.len() as u64,
            );
        }
        let snapshot = MaintenanceSnapshot::of(&done.table, done.snapshot_id);
        tracing::info!(
            channel = %self.channel,
            table = %look.table.identifier(),
            tasks = %step.tasks.join(","),
            snapshot_id = done.snapshot_id,
            operation = %snapshot.operation,
            added_records = snapshot.added_records,
            deleted_records = snapshot.deleted_records,
            files_removed = step.remove.len(),
            files_added = step.add.len(),
            rows_compacted = compacted.map_or(0, |c| c.rows),
            partitions_expired = if step.tasks.contains(&"record-expiry") { look.expired.len() } else { 0 },
            manifests_before = look.manifests_before,
            manifests_after = done.manifests,
            took_ms = look.started.elapsed().as_millis() as u64,
            "table maintained"
        );
        report.snapshot_id = Some(done.snapshot_id);
        report.snapshots.push(snapshot);
        report.tasks.extend(step.tasks.iter().copied());
        report.files_removed += step.remove.len();
        report.files_added += step.add.len();
    }

    /// Counts step `step`, which failed with `e` on `base`, and has the next call look again.
    /// The look's compaction (`compacted`) waits for the next look, or is given up (its outputs
    /// deleted through the fence) once its commit was refused [`MAX_COMMIT_ATTEMPTS`] times
    /// (its `attempts` count this one).
    fn not_committed(
        &self,
        look: &Look<'_>,
        st: &mut State,
        step: &Rewrite,
        base: &Table,
        compacted: Option<Compacted>,
        e: &iceberg::Error,
    ) {
        let outcome = match e.kind() {
            ErrorKind::CatalogCommitConflicts | ErrorKind::DataInvalid => "conflict",
            _ => "failed",
        };
        for t in &step.tasks {
            telemetry::record_maintenance_run(&self.channel, task_label(t), outcome);
        }
        if let Some(c) = compacted {
            if c.attempts >= MAX_COMMIT_ATTEMPTS && outcome == "conflict" {
                self.abandon(base, c, "its commit was refused too often", look.fence);
            } else {
                st.ready = Some(c);
            }
        }
        // Look again at the next call rather than after a whole interval.
        st.next_look = None;
    }

    /// Starts a compaction task for the files [`plan_compaction`] picks of `groups` (of
    /// `table`, whose files `current` holds), leaving the partitions in `skip` alone; whether
    /// one started.
    fn start_compaction(
        &self,
        st: &mut State,
        table: &Table,
        current: &CurrentFiles,
        groups: &BTreeMap<Group, Vec<&ManifestEntryRef>>,
        now: i64,
        skip: &HashSet<Group>,
    ) -> bool {
        let Some(writer) = &self.writer else {
            return false;
        };
        // Files of an earlier schema are not compaction inputs (see `compact`).
        let groups: BTreeMap<Group, Vec<&ManifestEntryRef>> = groups
            .iter()
            .map(|(g, files)| {
                let files = files
                    .iter()
                    .copied()
                    .filter(|e| !st.older_schema.contains(e.file_path()))
                    .collect();
                (g.clone(), files)
            })
            .collect();
        let inputs = plan_compaction(
            &groups,
            writer.target_file_size,
            self.config.compaction_delay.as_millis() as i64,
            now,
            skip,
            &current.deleted_rows(),
        );
        if inputs.is_empty() {
            return false;
        }
        let inputs: Vec<CompactionInput> = inputs
            .into_iter()
            .map(|e| CompactionInput::of(current, e))
            .collect();
        tracing::info!(channel = %self.channel, table = %table.identifier(), files = inputs.len(), with_deletes = inputs.iter().filter(|i| !i.deletes.is_empty()).count(), bytes = inputs.iter().map(|i| i.file.file_size_in_bytes()).sum::<u64>(), "compaction started");
        st.job = Some(tokio::spawn(compact(table.clone(), writer.clone(), inputs)));
        true
    }

    /// Gives up compaction `c`: its outputs are deleted through `fence` (no snapshot
    /// references them; a committer that lost the table deletes nothing).
    fn abandon(&self, table: &Table, c: Compacted, why: &str, fence: &DeletionFence) {
        telemetry::record_maintenance_run(&self.channel, "compaction", "abandoned");
        tracing::info!(channel = %self.channel, files = c.outputs.len(), why, "compaction abandoned, its files deleted");
        let (file_io, fence) = (table.file_io().clone(), fence.clone());
        let paths: Vec<String> = c
            .outputs
            .iter()
            .map(|f| f.file_path().to_string())
            .collect();
        tokio::spawn(async move {
            fence
                .delete(&file_io, "abandoned compaction outputs", &paths)
                .await;
        });
    }

    /// Waits for a running compaction task to finish (for tests and `floe maintain`); returns
    /// why it failed, if it did (its partitions are planned again at the next look).
    pub async fn wait_for_compaction(&self) -> Option<String> {
        let job = self.state.lock().await.job.take();
        let job = job?;
        let outcome = job.await;
        let failure = match &outcome {
            Ok(Ok(_)) => None,
            Ok(Err(e)) => Some(e.to_string()),
            Err(e) => Some(format!("the task ended abnormally: {e}")),
        };
        let mut st = self.state.lock().await;
        st.ready = self.finished(&mut st, outcome);
        failure
    }

    /// The outcome of a compaction task: its files, or `None` (counted and logged; its
    /// partitions are planned again at the next look).
    fn finished(
        &self,
        st: &mut State,
        outcome: Result<iceberg::Result<Compacted>, tokio::task::JoinError>,
    ) -> Option<Compacted> {
        let e = match outcome {
            Ok(Ok(mut c)) => {
                st.older_schema.extend(c.older_schema.drain(..));
                return (!c.inputs.is_empty()).then_some(c);
            }
            Ok(Err(e)) => e.to_string(),
            Err(e) => format!("the task ended abnormally: {e}"),
        };
        telemetry::record_maintenance_run(&self.channel, "compaction", "failed");
        tracing::warn!(channel = %self.channel, error = %e, "compaction failed; its partitions are planned again at the next look");
        None
    }

    /// Tells maintenance that the committer committed data: after a look that found nothing
    /// to do ([`IDLE_LOOK_INTERVAL`]), the next look is due again `interval` after that look.
    pub async fn note_commit(&self) {
        let mut st = self.state.lock().await;
        if let (Some(next), Some(last)) = (st.next_look, st.last_look) {
            st.next_look = Some(next.min(last + self.config.interval));
        }
    }

    /// Tells maintenance that a look could not load its table (the catalog down, the table
    /// dropped): the next look and orphan sweep wait [`LOOK_RETRY_AFTER_FAILURE`] (or the
    /// interval when shorter), not the next commit round — an idle table's rounds come every
    /// few seconds, and each would load the table and log the same failure again.
    pub async fn look_failed(&self) {
        let retry = Instant::now() + self.config.interval.min(LOOK_RETRY_AFTER_FAILURE);
        let mut st = self.state.lock().await;
        st.next_look = Some(st.next_look.map_or(retry, |t| t.max(retry)));
        if st.next_sweep.is_some_and(|t| t < retry) {
            st.next_sweep = Some(retry);
        }
    }

    /// Makes the next [`Maintainer::maintain`] look at once, whatever the interval.
    pub async fn look_now(&self) {
        self.state.lock().await.next_look = None;
    }
}

#[cfg(test)]
mod tests;
