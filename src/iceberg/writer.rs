//! Data files: one flush of a worker's buffered rows becomes partitioned Parquet data files in
//! the table location, through iceberg-rust's writer stack
//! (`ParquetWriter` → `RollingFileWriter` → `DataFileWriter` → `FanoutWriter`, rows split by
//! `RecordBatchPartitionSplitter` with the transforms of the table's partition spec, one file
//! or more per partition tuple; `UnpartitionedWriter` for a spec without fields).
//!
//! Invariant: file names can never collide. Each is `<channel>-<batch id>-<n>.parquet` under
//! the partition's directory, the batch id a UUIDv7, so a retried or concurrent flush never
//! overwrites a data file another commit references (iceberg-rust's default name generator
//! would, docs/operations.md "What was measured"). Encoding and compression run on a blocking thread, off the async workers.

use arrow_array::RecordBatch;
use iceberg::arrow::RecordBatchPartitionSplitter;
use iceberg::spec::{serialize_data_file_to_json, DataFile, DataFileFormat, FormatVersion};
use iceberg::table::Table;
use iceberg::writer::base_writer::data_file_writer::DataFileWriterBuilder;
use iceberg::writer::file_writer::location_generator::{
    DefaultFileNameGenerator, DefaultLocationGenerator,
};
use iceberg::writer::file_writer::rolling_writer::RollingFileWriterBuilder;
use iceberg::writer::file_writer::ParquetWriterBuilder;
use iceberg::writer::partitioning::fanout_writer::FanoutWriter;
use iceberg::writer::partitioning::unpartitioned_writer::UnpartitionedWriter;
use iceberg::writer::partitioning::PartitioningWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::WriterProperties;
use uuid::Uuid;

/// Parquet compression of data files.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParquetCompression {
    /// ZSTD at a level 1..=22.
    Zstd(i32),
    /// Snappy.
    Snappy,
    /// No compression.
    None,
}

impl From<&crate::config::Compression> for ParquetCompression {
    /// The writer's codec for the configured `channel.destination.compression`.
    fn from(codec: &crate::config::Compression) -> Self {
        match codec {
            crate::config::Compression::Zstd { level } => ParquetCompression::Zstd(*level),
            crate::config::Compression::Snappy => ParquetCompression::Snappy,
            crate::config::Compression::Uncompressed => ParquetCompression::None,
        }
    }
}

impl ParquetCompression {
    /// The `write.parquet.compression-codec` table property value.
    pub fn codec_name(&self) -> &'static str {
        match self {
            ParquetCompression::Zstd(_) => "zstd",
            ParquetCompression::Snappy => "snappy",
            ParquetCompression::None => "uncompressed",
        }
    }

    fn parquet(&self) -> Compression {
        match self {
            ParquetCompression::Zstd(level) => {
                Compression::ZSTD(ZstdLevel::try_new(*level).unwrap_or_default())
            }
            ParquetCompression::Snappy => Compression::SNAPPY,
            ParquetCompression::None => Compression::UNCOMPRESSED,
        }
    }
}

/// The Parquet writer properties of every data file floe writes (and of `floe bench convert`):
/// - `compression` (ZSTD level 3 by default);
/// - column-chunk statistics only (`EnabledStatistics::Chunk`): Iceberg's manifest metrics come from
///   the column-chunk min/max; a page index is not needed (pyarrow does not write one by default
///   either);
/// - `DELTA_BINARY_PACKED` instead of dictionary encoding for every INT64 leaf (`long`,
///   `timestamptz`, `time`): event ids and times are near-monotonic, so deltas are tiny — smaller
///   files (−18 % on the Event data set) and less for ZSTD to do. Other columns keep parquet's
///   defaults (dictionary, then PLAIN).
///
/// Errors: the Arrow schema has no Parquet equivalent.
pub fn writer_properties(
    arrow: &arrow_schema::Schema,
    compression: Compression,
) -> Result<WriterProperties, parquet::errors::ParquetError> {
    use parquet::basic::{Encoding, Type as PhysicalType};
    use parquet::file::properties::EnabledStatistics;
    let descr = parquet::arrow::ArrowSchemaConverter::new().convert(arrow)?;
    let mut b = WriterProperties::builder()
        .set_compression(compression)
        .set_statistics_enabled(EnabledStatistics::Chunk);
    for col in descr.columns() {
        if col.physical_type() == PhysicalType::INT64 {
            b = b
                .set_column_dictionary_enabled(col.path().clone(), false)
                .set_column_encoding(col.path().clone(), Encoding::DELTA_BINARY_PACKED);
        }
    }
    Ok(b.build())
}

/// Settings of the data-file writer.
#[derive(Debug, Clone)]
pub struct WriterSettings {
    /// Channel name (the prefix of every data file name).
    pub channel: String,
    /// Compression codec and level.
    pub compression: ParquetCompression,
    /// Target size of one data file in bytes; a partition with more data rolls to a new file.
    pub target_file_size: u64,
    /// Data files a write holds open at once (one per partition tuple): past it, every open
    /// file is closed before the next tuple's opens (`max_open_partitions`,
    /// docs/partitioning.md "Open partitions per flush").
    pub max_open_partitions: usize,
}

/// Data files written by one flush.
#[derive(Debug, Clone, Default)]
pub struct WrittenFiles {
    /// The data files, as Iceberg's JSON serialization (what a pending batch carries).
    pub data_files_json: Vec<String>,
    /// Their paths.
    pub paths: Vec<String>,
    /// Their sizes in bytes, in the order of `paths`.
    pub sizes: Vec<u64>,
    /// Rows written.
    pub num_rows: u64,
    /// Bytes written.
    pub num_bytes: u64,
}

/// Writes `batch` (rows of the table's current schema, any partitions) as data files of `table`,
/// one or more files per partition tuple, named after `batch_id`.
///
/// Runs the encoding on a blocking thread. Errors: any iceberg-rust writer or storage error
/// (the caller retries the flush with a new batch id; files already written are orphans that
/// no commit references).
pub async fn write_data_files(
    table: &Table,
    settings: &WriterSettings,
    batch_id: Uuid,
    batch: RecordBatch,
) -> iceberg::Result<WrittenFiles> {
    if batch.num_rows() == 0 {
        return Ok(WrittenFiles::default());
    }
    let table = table.clone();
    let settings = settings.clone();
    let handle = tokio::runtime::Handle::current();
    tokio::task::spawn_blocking(move || {
        handle.block_on(write_blocking(&table, &settings, batch_id, batch))
    })
    .await
    .map_err(|e| iceberg::Error::new(iceberg::ErrorKind::Unexpected, e.to_string()))?
}

async fn write_blocking(
    table: &Table,
    settings: &WriterSettings,
    batch_id: Uuid,
    batch: RecordBatch,
) -> iceberg::Result<WrittenFiles> {
    let files = write_batches(
        table,
        settings,
        batch_id,
        futures::stream::iter([Ok(batch)]),
    )
    .await?;
    let md = table.metadata();
    let partition_type = md
        .default_partition_spec()
        .partition_type(md.current_schema())?;
    let mut out = WrittenFiles::default();
    for f in files {
        out.num_rows += f.record_count();
        out.num_bytes += f.file_size_in_bytes();
        out.paths.push(f.file_path().to_string());
        out.sizes.push(f.file_size_in_bytes());
        out.data_files_json.push(serialize_data_file_to_json(
            f,
            &partition_type,
            FormatVersion::V2,
        )?);
    }
    Ok(out)
}

/// Writes every batch of `batches` (rows of the table's current schema, any partitions) as data
/// files of `table` named after `file_id`, rolling at `settings.target_file_size`: the data
/// files of a compaction (docs/operations.md, "Table maintenance"). Runs on a blocking thread.
///
/// Errors: a batch of the stream is an error, or any writer or storage error (files already
/// written are orphans that no commit references).
pub async fn rewrite_data_files(
    table: &Table,
    settings: &WriterSettings,
    file_id: Uuid,
    batches: futures::stream::BoxStream<'static, iceberg::Result<RecordBatch>>,
) -> iceberg::Result<Vec<DataFile>> {
    let table = table.clone();
    let settings = settings.clone();
    let handle = tokio::runtime::Handle::current();
    tokio::task::spawn_blocking(move || {
        handle.block_on(write_batches(&table, &settings, file_id, batches))
    })
    .await
    .map_err(|e| iceberg::Error::new(iceberg::ErrorKind::Unexpected, e.to_string()))?
}

async fn write_batches(
    table: &Table,
    settings: &WriterSettings,
    file_id: Uuid,
    batches: impl futures::Stream<Item = iceberg::Result<RecordBatch>>,
) -> iceberg::Result<Vec<DataFile>> {
    let md = table.metadata();
    let schema = md.current_schema().clone();
    let spec = md.default_partition_spec().clone();
    let arrow = iceberg::arrow::schema_to_arrow_schema(&schema)?;
    let props = writer_properties(&arrow, settings.compression.parquet()).map_err(|e| {
        iceberg::Error::new(iceberg::ErrorKind::DataInvalid, "parquet writer properties")
            .with_source(e)
    })?;
    let parquet = ParquetWriterBuilder::new(props, schema.clone());
    let rolling = RollingFileWriterBuilder::new(
        parquet,
        settings.target_file_size as usize,
        table.file_io().clone(),
        DefaultLocationGenerator::new(md)?,
        DefaultFileNameGenerator::new(
            format!("{}-{}", settings.channel, file_id),
            None,
            DataFileFormat::Parquet,
        ),
    );
    let mut batches = std::pin::pin!(batches);
    let order = md.default_sort_order();
    // A sorted table's rows are written in sorted chunks of up to `target_file_size` bytes of
    // Arrow data, every file closed after its chunk: each file holds one sorted run, also when a
    // compaction reads its inputs in many batches. Unsorted, each batch is written as it comes.
    let chunk_bytes = if order.is_unsorted() {
        0
    } else {
        settings.target_file_size as usize
    };
    if spec.is_unpartitioned() {
        // `partition = []`: iceberg-rust's splitter refuses a spec without fields.
        let new_writer = || UnpartitionedWriter::new(DataFileWriterBuilder::new(rolling.clone()));
        let (mut writer, mut files) = (new_writer(), Vec::new());
        while let Some(chunk) = next_chunk(&mut batches, chunk_bytes).await? {
            writer.write(sorted(chunk, order)?).await?;
            if chunk_bytes > 0 {
                files.extend(std::mem::replace(&mut writer, new_writer()).close().await?);
            }
        }
        files.extend(writer.close().await?);
        return with_sort_order_id(files, table);
    }
    // The name generator's counter is shared by the builder's clones: a pass never reuses a
    // file name of an earlier one.
    let new_fanout = || FanoutWriter::new(DataFileWriterBuilder::new(rolling.clone()));
    let mut fanout = new_fanout();
    let max_open = settings.max_open_partitions.max(1);
    let mut open = std::collections::HashSet::new();
    let (mut files, mut passes) = (Vec::new(), 1u32);
    let splitter =
        RecordBatchPartitionSplitter::try_new_with_computed_values(schema, spec.clone())?;
    while let Some(chunk) = next_chunk(&mut batches, chunk_bytes).await? {
        for (key, part) in splitter.split(&sorted(chunk, order)?)? {
            if open.len() >= max_open && !open.contains(key.data()) {
                // Spill: close every open file before the next tuple's opens.
                files.extend(std::mem::replace(&mut fanout, new_fanout()).close().await?);
                open.clear();
                passes += 1;
            }
            open.insert(key.data().clone());
            fanout.write(key, part).await?;
        }
        if chunk_bytes > 0 {
            files.extend(std::mem::replace(&mut fanout, new_fanout()).close().await?);
            open.clear();
        }
    }
    files.extend(fanout.close().await?);
    if passes > 1 {
        tracing::info!(channel = %settings.channel, %file_id, passes, files = files.len(), max_open_partitions = max_open, "write spilled: more partitions than max_open_partitions, open files closed between passes");
    }
    with_sort_order_id(files, table)
}

/// `files` of a sorted table with the table's default sort order id recorded in each (the data
/// file field `sort_order_id`, Iceberg spec "Manifests": the order the file's rows are in, so
/// engines may rely on it); unchanged for an unsorted table. iceberg-rust 0.10.1's writers
/// leave the field unset and `DataFile` has no setter, so each file is built again, field by
/// field, with the public `DataFileBuilder`. (Not through the data file's JSON form: read into a
/// `serde_json::Value`, its partition object has its keys in alphabetical order, and the reader
/// matches the partition values to the spec's fields by position: a spec whose fields are not
/// in alphabetical order got values of the wrong fields, and every commit failed.)
///
/// Errors: a file the builder refuses (cannot happen for a file iceberg-rust built).
fn with_sort_order_id(files: Vec<DataFile>, table: &Table) -> iceberg::Result<Vec<DataFile>> {
    let md = table.metadata();
    let order = md.default_sort_order();
    if order.is_unsorted() {
        return Ok(files);
    }
    // The writers wrote `files` for the default partition spec (DataFile has no getter of it).
    let spec_id = md.default_partition_spec().spec_id();
    let order_id = order.order_id as i32;
    files
        .into_iter()
        .map(|f| with_sort_order(&f, spec_id, order_id))
        .collect()
}

/// `file` (of partition spec `spec_id`) with `sort_order_id` set to `order_id`, every other
/// field as it was.
///
/// Errors: a file the builder refuses (a required field unset: not for a built file).
fn with_sort_order(file: &DataFile, spec_id: i32, order_id: i32) -> iceberg::Result<DataFile> {
    let mut builder = iceberg::spec::DataFileBuilder::default();
    builder
        .content(file.content_type())
        .file_path(file.file_path().to_string())
        .file_format(file.file_format())
        .partition(file.partition().clone())
        .partition_spec_id(spec_id)
        .record_count(file.record_count())
        .file_size_in_bytes(file.file_size_in_bytes())
        .column_sizes(file.column_sizes().clone())
        .value_counts(file.value_counts().clone())
        .null_value_counts(file.null_value_counts().clone())
        .nan_value_counts(file.nan_value_counts().clone())
        .lower_bounds(file.lower_bounds().clone())
        .upper_bounds(file.upper_bounds().clone())
        .key_metadata(file.key_metadata().map(<[u8]>::to_vec))
        .split_offsets(file.split_offsets().map(<[i64]>::to_vec))
        .equality_ids(file.equality_ids())
        .first_row_id(file.first_row_id())
        .referenced_data_file(file.referenced_data_file())
        .content_offset(file.content_offset())
        .content_size_in_bytes(file.content_size_in_bytes())
        .sort_order_id(order_id);
    builder.build().map_err(|e| {
        iceberg::Error::new(
            iceberg::ErrorKind::Unexpected,
            format!("data file with its sort order id: {e}"),
        )
    })
}

/// The next rows to write: the next batch of `batches` (`chunk_bytes` 0), or batches
/// concatenated until they hold `chunk_bytes` of Arrow memory or the stream ends; `None` at
/// the end.
///
/// Errors: a batch of the stream is an error, or the batches do not concatenate.
async fn next_chunk(
    batches: &mut (impl futures::Stream<Item = iceberg::Result<RecordBatch>> + Unpin),
    chunk_bytes: usize,
) -> iceberg::Result<Option<RecordBatch>> {
    use futures::StreamExt;
    let (mut pending, mut bytes) = (Vec::new(), 0usize);
    while let Some(batch) = batches.next().await {
        let batch = batch?;
        if chunk_bytes == 0 {
            return Ok(Some(batch));
        }
        bytes += batch.get_array_memory_size();
        pending.push(batch);
        if bytes >= chunk_bytes {
            break;
        }
    }
    match pending.len() {
        0 => Ok(None),
        1 => Ok(pending.pop()),
        _ => {
            let schema = pending[0].schema();
            arrow_select::concat::concat_batches(&schema, &pending)
                .map(Some)
                .map_err(|e| {
                    iceberg::Error::new(iceberg::ErrorKind::Unexpected, "concatenate batches")
                        .with_source(e)
                })
        }
    }
}

/// `batch`'s rows in the table's sort `order` (identity terms on top-level fields; the batch
/// as is when unsorted). The partition split keeps the order, so each file of one batch is
/// sorted.
///
/// Errors: a sort field that is not a column of the batch, or arrow's sort kernels.
fn sorted(batch: RecordBatch, order: &iceberg::spec::SortOrder) -> iceberg::Result<RecordBatch> {
    if order.is_unsorted() || batch.num_rows() < 2 {
        return Ok(batch);
    }
    let arrow_error = |e: arrow_schema::ArrowError| {
        iceberg::Error::new(iceberg::ErrorKind::Unexpected, "sort rows").with_source(e)
    };
    let mut columns = Vec::with_capacity(order.fields.len());
    for f in &order.fields {
        let column = batch
            .schema()
            .fields()
            .iter()
            .position(|c| {
                c.metadata()
                    .get(parquet::arrow::PARQUET_FIELD_ID_META_KEY)
                    .is_some_and(|id| *id == f.source_id.to_string())
            })
            .ok_or_else(|| {
                iceberg::Error::new(
                    iceberg::ErrorKind::DataInvalid,
                    format!("sort field id {} is not a top-level column", f.source_id),
                )
            })?;
        columns.push(arrow_ord::sort::SortColumn {
            values: batch.column(column).clone(),
            options: Some(arrow_ord::sort::SortOptions {
                descending: f.direction == iceberg::spec::SortDirection::Descending,
                nulls_first: f.null_order == iceberg::spec::NullOrder::First,
            }),
        });
    }
    let indices = arrow_ord::sort::lexsort_to_indices(&columns, None).map_err(arrow_error)?;
    arrow_select::take::take_record_batch(&batch, &indices).map_err(arrow_error)
}

/// Parses the data files of a pending batch back for a commit against `table`.
///
/// Errors: the JSON does not describe a data file of the table's default partition spec.
pub fn parse_data_files(
    table: &Table,
    data_files_json: &[String],
) -> iceberg::Result<Vec<DataFile>> {
    let md = table.metadata();
    let spec = md.default_partition_spec();
    let partition_type = spec.partition_type(md.current_schema())?;
    data_files_json
        .iter()
        .map(|j| {
            iceberg::spec::deserialize_data_file_from_json(
                j,
                spec.spec_id(),
                &partition_type,
                md.current_schema(),
            )
        })
        .collect()
}

/// The data file paths named in serialized data files (for deleting a rejected batch's files).
pub fn data_file_paths(data_files_json: &[String]) -> Vec<String> {
    data_files_json
        .iter()
        .filter_map(|j| {
            serde_json::from_str::<serde_json::Value>(j)
                .ok()?
                .get("file_path")?
                .as_str()
                .map(str::to_string)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::partition::PartitionTerm;
    use iceberg::{Catalog, NamespaceIdent, TableIdent};

    /// An `Event` table (config/event.schema.json) partitioned by `terms`, created as activation
    /// creates it, with a converter for its rows.
    async fn event_table(
        dir: &std::path::Path,
        terms: &[&str],
    ) -> (
        std::sync::Arc<dyn Catalog>,
        Table,
        crate::convert::Converter,
    ) {
        sorted_event_table(dir, terms, &[]).await
    }

    /// [`event_table`] with the sort order `sort` (`sort` terms).
    async fn sorted_event_table(
        dir: &std::path::Path,
        terms: &[&str],
        sort: &[&str],
    ) -> (
        std::sync::Arc<dyn Catalog>,
        Table,
        crate::convert::Converter,
    ) {
        let catalog =
            crate::catalog::open_sql_catalog(&dir.join("c.sqlite"), &dir.join("wh"), "floe")
                .await
                .unwrap();
        let schema_json: serde_json::Value =
            serde_json::from_str(crate::tools::quickstart::EVENT_SCHEMA).unwrap();
        let mapped = std::sync::Arc::new(
            crate::schema::MappedSchema::from_json_schema(&schema_json, "event_time").unwrap(),
        );
        let spec = crate::iceberg::table::TableSpec {
            ident: TableIdent::new(NamespaceIdent::new("w".into()), "events".into()),
            channel: "w".into(),
            compression_codec: "zstd".into(),
            target_file_size_bytes: 128 << 20,
            partition: terms
                .iter()
                .map(|t| PartitionTerm::parse(t).unwrap())
                .collect(),
            sort: sort
                .iter()
                .map(|t| crate::schema::sort::SortTerm::parse(t).unwrap())
                .collect(),
            key: Vec::new(),
            format_version: iceberg::spec::FormatVersion::V2,
        };
        let table = crate::iceberg::table::ensure_table(catalog.as_ref(), &spec, &mapped)
            .await
            .unwrap();
        let arrow = std::sync::Arc::new(
            iceberg::arrow::schema_to_arrow_schema(table.metadata().current_schema()).unwrap(),
        );
        let conv = crate::convert::Converter::try_new(mapped, arrow).unwrap();
        (catalog, table, conv)
    }

    /// The rows of data file `path` of `table`.
    async fn read_back(table: &Table, path: &str) -> Vec<RecordBatch> {
        let bytes = table
            .file_io()
            .new_input(path)
            .unwrap()
            .read()
            .await
            .unwrap();
        parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(bytes)
            .unwrap()
            .build()
            .unwrap()
            .map(|b| b.unwrap())
            .collect()
    }

    /// Writes `n` sample events (ids from 0, spread over `spread_hours`) as one flush.
    async fn write_events(
        table: &Table,
        conv: &mut crate::convert::Converter,
        n: u64,
        seed: u64,
        spread_hours: u32,
    ) -> WrittenFiles {
        for id in 0..n {
            let event =
                crate::tools::sample_events::event_json(id, seed, 1_783_627_200_000, spread_hours);
            conv.push(event.as_bytes()).unwrap();
        }
        let settings = WriterSettings {
            channel: "w".into(),
            compression: ParquetCompression::Zstd(1),
            target_file_size: 128 << 20,
            max_open_partitions: 1000,
        };
        write_data_files(table, &settings, Uuid::now_v7(), conv.finish())
            .await
            .unwrap()
    }

    /// Rewrites (as a compaction does) one batch of sample events per range of ids, with at
    /// most `max_open` files open.
    async fn rewrite_batches(
        table: &Table,
        conv: &mut crate::convert::Converter,
        ranges: &[std::ops::Range<u64>],
        max_open: usize,
    ) -> Vec<DataFile> {
        let mut batches = Vec::new();
        for ids in ranges.iter().cloned() {
            for id in ids {
                let event = crate::tools::sample_events::event_json(id, 7, 1_783_627_200_000, 3);
                conv.push(event.as_bytes()).unwrap();
            }
            batches.push(Ok(conv.finish()));
        }
        let settings = WriterSettings {
            channel: "w".into(),
            compression: ParquetCompression::Zstd(1),
            target_file_size: 128 << 20,
            max_open_partitions: max_open,
        };
        let stream = Box::pin(futures::stream::iter(batches));
        rewrite_data_files(table, &settings, Uuid::now_v7(), stream)
            .await
            .unwrap()
    }

    /// Past `max_open_partitions`, a write closes its open files before opening the next
    /// tuple's: two batches over 4 buckets, at most 2 open, give at least 6 files (each batch's
    /// 4 tuples in 2 passes, at most 2 files left open across the batches) where an unbounded
    /// write gives 4; every row is written, every file holds one tuple.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_write_over_max_open_partitions_closes_files_between_passes() {
        for (max_open, files_at_least, files_at_most) in [(2, 6, 8), (1000, 4, 4)] {
            let dir = tempfile::tempdir().unwrap();
            let (_catalog, table, mut conv) = event_table(dir.path(), &["bucket(4, id)"]).await;
            let files = rewrite_batches(&table, &mut conv, &[0..200, 200..400], max_open).await;
            let rows: u64 = files.iter().map(|f| f.record_count()).sum();
            assert_eq!(rows, 400);
            let n = files.len();
            assert!(
                (files_at_least..=files_at_most).contains(&n),
                "max_open_partitions {max_open}: {n} files"
            );
            let paths: std::collections::HashSet<&str> =
                files.iter().map(|f| f.file_path()).collect();
            assert_eq!(paths.len(), n, "no file name reused across passes");
        }
    }

    /// A sorted table's compaction (its inputs read in several batches) writes every file as
    /// one sorted run, partitioned or not: the batches are concatenated up to the target size
    /// and sorted together, not one by one.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_sorted_tables_rewrite_writes_each_file_as_one_sorted_run() {
        use arrow_array::{Array, Int64Array, StringArray};
        for spec in [&["hour(event_time)"][..], &[]] {
            let dir = tempfile::tempdir().unwrap();
            let (_catalog, table, mut conv) =
                sorted_event_table(dir.path(), spec, &["source", "id desc"]).await;
            let ranges = [0..300, 300..600, 600..900];
            let files = rewrite_batches(&table, &mut conv, &ranges, 48).await;
            let mut rows = 0;
            for f in &files {
                let mut keys: Vec<(Option<String>, i64)> = Vec::new();
                for batch in read_back(&table, f.file_path()).await {
                    let src = batch.column_by_name("source").unwrap();
                    let src = src.as_any().downcast_ref::<StringArray>().unwrap();
                    let ids = batch.column_by_name("id").unwrap();
                    let ids = ids.as_any().downcast_ref::<Int64Array>().unwrap();
                    for i in 0..batch.num_rows() {
                        keys.push((src.is_valid(i).then(|| src.value(i).into()), ids.value(i)));
                    }
                }
                rows += keys.len();
                assert_eq!(
                    f.sort_order_id(),
                    Some(table.metadata().default_sort_order().order_id as i32),
                    "the file records the order its rows are in"
                );
                // source ascending, nulls first (None < Some); id descending.
                let in_order = keys
                    .windows(2)
                    .all(|w| w[0].0 < w[1].0 || (w[0].0 == w[1].0 && w[0].1 >= w[1].1));
                assert!(in_order, "spec {spec:?}: {} not sorted", f.file_path());
            }
            assert_eq!(rows, 900, "spec {spec:?}");
        }
    }

    /// A batch spanning several hours and larger than a Parquet row group keeps every row
    /// (the worker hands off up to `buffer_size` of rows in one batch).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_large_multi_hour_batch_writes_every_row() {
        let dir = tempfile::tempdir().unwrap();
        let (_catalog, table, mut conv) = event_table(dir.path(), &["hour(event_time)"]).await;
        let n = 300_000u64;
        let written = write_events(&table, &mut conv, n, 42, 3).await;
        assert_eq!(written.num_rows, n, "files {:?}", written.paths);
    }

    /// With a multi-field spec, each data file holds the rows of one partition tuple, and its
    /// tuple is what the spec's transforms give for its rows: the day (days since the epoch, by
    /// floor division), the source as is, the bucket of the id (iceberg-rust's, checked against
    /// the spec's values in `schema::partition`). Maintenance groups the files by tuple, each
    /// closing when its day ends.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_multi_field_spec_writes_one_tuple_per_file() {
        use arrow_array::{Array, Int64Array, StringArray, TimestampMicrosecondArray};
        use iceberg::spec::{Literal, PrimitiveLiteral};
        use iceberg::transaction::{ApplyTransactionAction, Transaction};
        let dir = tempfile::tempdir().unwrap();
        let (catalog, table, mut conv) = event_table(
            dir.path(),
            &["day(event_time)", "identity(source)", "bucket(4, id)"],
        )
        .await;
        let n = 2_000u64;
        let written = write_events(&table, &mut conv, n, 7, 72).await;
        assert_eq!(written.num_rows, n);
        let files = parse_data_files(&table, &written.data_files_json).unwrap();
        let bucket4 =
            iceberg::transform::create_transform_function(&iceberg::spec::Transform::Bucket(4))
                .unwrap();
        let mut tuples = std::collections::BTreeSet::new();
        let mut rows = 0;
        for f in &files {
            let p: Vec<_> = f.partition().fields().to_vec();
            assert_eq!(p.len(), 3, "{p:?}");
            let Some(Literal::Primitive(PrimitiveLiteral::Int(day))) = p[0] else {
                panic!("day {p:?}")
            };
            let source = match &p[1] {
                Some(Literal::Primitive(PrimitiveLiteral::String(s))) => Some(s.clone()),
                None => None,
                other => panic!("source {other:?}"),
            };
            let Some(Literal::Primitive(PrimitiveLiteral::Int(bucket))) = p[2] else {
                panic!("bucket {p:?}")
            };
            assert!(
                tuples.insert((day, source.clone(), bucket)),
                "one file per tuple"
            );
            for batch in read_back(&table, f.file_path()).await {
                rows += batch.num_rows();
                let col = |name: &str| batch.column_by_name(name).unwrap().clone();
                let ts = col("event_time");
                let ts = ts
                    .as_any()
                    .downcast_ref::<TimestampMicrosecondArray>()
                    .unwrap();
                let src = col("source");
                let src = src.as_any().downcast_ref::<StringArray>().unwrap();
                let ids = col("id");
                let buckets = bucket4.transform(ids.clone()).unwrap();
                let buckets = buckets
                    .as_any()
                    .downcast_ref::<arrow_array::Int32Array>()
                    .unwrap();
                assert!(ids.as_any().downcast_ref::<Int64Array>().is_some());
                for i in 0..batch.num_rows() {
                    assert_eq!(ts.value(i).div_euclid(86_400_000_000), i64::from(day));
                    assert_eq!(src.is_valid(i).then(|| src.value(i).to_string()), source);
                    assert_eq!(buckets.value(i), bucket);
                }
            }
        }
        assert_eq!(rows as u64, n);
        let days: std::collections::BTreeSet<i32> = tuples.iter().map(|t| t.0).collect();
        let buckets: std::collections::BTreeSet<i32> = tuples.iter().map(|t| t.2).collect();
        assert!(days.len() >= 3, "72 hours span 3 days or more: {days:?}");
        assert_eq!(buckets.len(), 4, "{buckets:?}");

        let tx = Transaction::new(&table);
        let tx = tx.fast_append().add_data_files(files).apply(tx).unwrap();
        let table = tx.commit(catalog.as_ref()).await.unwrap();
        let current = super::super::rewrite::CurrentFiles::load(&table)
            .await
            .unwrap();
        assert_eq!(current.live().count(), tuples.len());
        // Maintenance sees one partition per tuple, closing at the end of its day.
        let groups = super::super::maintenance::files_by_partition(&current);
        assert_eq!(groups.len(), tuples.len());
        let day_ends: std::collections::BTreeSet<i64> = days
            .iter()
            .map(|d| (i64::from(*d) + 1) * 86_400_000)
            .collect();
        for g in groups.keys() {
            assert!(g.period && day_ends.contains(&g.closes_ms), "{g:?}");
        }
    }
}
