//! `floe bench convert`: the conversion path of a worker, on one thread, on a file — read NDJSON,
//! decode and validate every record ([`crate::convert::Converter`]), split rows by hour partition, and
//! write one Parquet file per hour (ZSTD by default) — so users can size a fleet.
//!
//! ```text
//! floe bench convert --schema FILE [--partition-field NAME] --input NDJSON --output DIR
//!                    [--compression zstd|snappy|none] [--level 3] [--parquet-defaults]
//! ```
//!
//! Prints one JSON line: `{"work_s": S, "records": N, "in_bytes": B, "out_bytes": O,
//! "records_per_s": R, "dlq": D}` — `work_s` is wall time in seconds from reading the input to the
//! last file closed; `records` counts input records (rows and DLQ'd ones); bytes are input and
//! Parquet output sizes. Files are `DIR/<field>_hour=<YYYY-MM-DD-HH>/00000.parquet`, written with
//! [`crate::iceberg::writer::writer_properties`].

use std::collections::BTreeMap;
use std::fs::File;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use arrow_array::{RecordBatch, UInt32Array};
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::WriterProperties;

use crate::convert::{format_timestamptz, Converter};
use crate::schema::{date_time_fields, MappedSchema};
use crate::tools::stdout;

/// Parquet compression codec.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum BenchCompression {
    /// ZSTD at `--level`.
    Zstd,
    /// Snappy.
    Snappy,
    /// Uncompressed.
    None,
}

/// Arguments of `floe bench convert`.
#[derive(Clone, Debug, clap::Args)]
pub struct BenchConvertArgs {
    /// JSON Schema file.
    #[arg(long, value_name = "FILE")]
    pub schema: PathBuf,
    /// The partition field (default: the only top-level date-time field).
    #[arg(long, value_name = "NAME")]
    pub partition_field: Option<String>,
    /// NDJSON input, one record per line.
    #[arg(long, value_name = "NDJSON")]
    pub input: PathBuf,
    /// Output directory (created).
    #[arg(long, value_name = "DIR")]
    pub output: PathBuf,
    /// Parquet compression.
    #[arg(long, value_enum, default_value = "zstd")]
    pub compression: BenchCompression,
    /// ZSTD level (1–22).
    #[arg(long, default_value_t = 3)]
    pub level: i32,
    /// Write with parquet's default writer properties (page statistics, dictionary for every
    /// column) instead of floe's recommended ones, for comparison.
    #[arg(long)]
    pub parquet_defaults: bool,
}

/// Why the benchmark could not run.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// The schema is refused or unreadable (exit 2).
    #[error("setup refused: {0}")]
    Setup(String),
    /// Reading input or writing files failed.
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
    /// Parquet encoding failed.
    #[error("parquet: {0}")]
    Parquet(#[from] parquet::errors::ParquetError),
    /// Splitting a batch by hour failed.
    #[error("arrow: {0}")]
    Arrow(#[from] arrow_schema::ArrowError),
}

/// Buffered bytes before a flush to the Parquet writers (bounded memory, like the daemon's buffer).
const FLUSH_BYTES: usize = 64 * 1024 * 1024;
/// Rows buffered before a flush (keeps the column buffers small and reused by the allocator).
const FLUSH_ROWS: usize = 64 * 1024;
/// Input read size.
const READ_CHUNK: usize = 4 * 1024 * 1024;

/// Appends up to [`READ_CHUNK`] bytes of `f` to `buf` (fewer only at the end of the file).
fn read_chunk(f: &mut File, buf: &mut Vec<u8>) -> std::io::Result<usize> {
    use std::io::Read;
    f.take(READ_CHUNK as u64).read_to_end(buf)
}

/// Index of the first `\n` in `buf[from..]`, 8 bytes at a time.
fn find_newline(buf: &[u8], from: usize) -> Option<usize> {
    const LO: u64 = 0x0101_0101_0101_0101;
    const HI: u64 = 0x8080_8080_8080_8080;
    let mut i = from;
    while let Some(chunk) = buf.get(i..i + 8) {
        let Ok(a) = <[u8; 8]>::try_from(chunk) else {
            break;
        };
        let x = u64::from_le_bytes(a) ^ (LO * u64::from(b'\n'));
        let z = x.wrapping_sub(LO) & !x & HI;
        if z != 0 {
            return Some(i + (z.trailing_zeros() / 8) as usize);
        }
        i += 8;
    }
    buf.get(i..)?
        .iter()
        .position(|&b| b == b'\n')
        .map(|p| p + i)
}

/// Measured outcome of a run.
#[derive(Clone, Copy, Debug)]
pub struct BenchReport {
    /// Wall time in seconds.
    pub work_s: f64,
    /// Input records.
    pub records: u64,
    /// Records sent to the DLQ.
    pub dlq: u64,
    /// Input bytes.
    pub in_bytes: u64,
    /// Parquet bytes written.
    pub out_bytes: u64,
}

struct HourWriters {
    dir: PathBuf,
    field: String,
    props: WriterProperties,
    schema: arrow_schema::SchemaRef,
    open: BTreeMap<i64, (PathBuf, ArrowWriter<File>)>,
}

impl HourWriters {
    fn write(&mut self, batch: &RecordBatch, hours: &[i64]) -> Result<(), BenchError> {
        if batch.num_rows() == 0 {
            return Ok(());
        }
        let first = hours[0];
        if hours.iter().all(|&h| h == first) {
            return self.writer(first)?.write(batch).map_err(Into::into);
        }
        let mut by_hour: BTreeMap<i64, Vec<u32>> = BTreeMap::new();
        for (i, &h) in hours.iter().enumerate() {
            by_hour.entry(h).or_default().push(i as u32);
        }
        for (h, idx) in by_hour {
            let part = arrow_select::take::take_record_batch(batch, &UInt32Array::from(idx))?;
            self.writer(h)?.write(&part)?;
        }
        Ok(())
    }

    fn writer(&mut self, hour: i64) -> Result<&mut ArrowWriter<File>, BenchError> {
        use std::collections::btree_map::Entry;
        match self.open.entry(hour) {
            Entry::Occupied(e) => Ok(&mut e.into_mut().1),
            Entry::Vacant(v) => {
                let label = format_timestamptz(hour.saturating_mul(3_600_000_000));
                let label = label.get(..13).unwrap_or("").replace('T', "-");
                let dir = self.dir.join(format!("{}_hour={label}", self.field));
                std::fs::create_dir_all(&dir)?;
                let path = dir.join("00000.parquet");
                let w = ArrowWriter::try_new(
                    File::create(&path)?,
                    self.schema.clone(),
                    Some(self.props.clone()),
                )?;
                Ok(&mut v.insert((path, w)).1)
            }
        }
    }

    fn close(self) -> Result<u64, BenchError> {
        let mut total = 0;
        for (_, (path, w)) in self.open {
            w.close()?;
            total += std::fs::metadata(&path)?.len();
        }
        Ok(total)
    }
}

/// Converts `args.input` into hour-partitioned Parquet files under `args.output` on this thread.
///
/// Errors: [`BenchError`] on a refused schema, I/O or Parquet failure.
pub fn convert(args: &BenchConvertArgs) -> Result<BenchReport, BenchError> {
    let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(&args.schema)?)
        .map_err(|e| BenchError::Setup(format!("schema is not JSON: {e}")))?;
    let partition = match &args.partition_field {
        Some(p) => p.clone(),
        None => {
            let f = date_time_fields(&doc).map_err(|e| BenchError::Setup(e.to_string()))?;
            match f.as_slice() {
                [one] => one.clone(),
                _ => return Err(BenchError::Setup("choose --partition-field".to_string())),
            }
        }
    };
    let schema = Arc::new(
        MappedSchema::from_json_schema(&doc, &partition)
            .map_err(|e| BenchError::Setup(e.to_string()))?,
    );
    let compression = match args.compression {
        BenchCompression::Zstd => Compression::ZSTD(ZstdLevel::try_new(args.level)?),
        BenchCompression::Snappy => Compression::SNAPPY,
        BenchCompression::None => Compression::UNCOMPRESSED,
    };
    let props = if args.parquet_defaults {
        WriterProperties::builder()
            .set_compression(compression)
            .build()
    } else {
        crate::iceberg::writer::writer_properties(&schema.arrow_schema(), compression)?
    };
    let arrow = schema.arrow_schema();
    let mut conv = Converter::try_new(schema.clone(), arrow.clone())
        .map_err(|e| BenchError::Setup(e.to_string()))?;
    std::fs::create_dir_all(&args.output)?;
    let mut writers = HourWriters {
        dir: args.output.clone(),
        field: partition.clone(),
        props,
        schema: arrow,
        open: BTreeMap::new(),
    };

    let start = Instant::now();
    let mut file = File::open(&args.input)?;
    let mut records = 0u64;
    let mut dlq = 0u64;
    let mut in_bytes = 0u64;
    let mut hours: Vec<i64> = Vec::with_capacity(1 << 16);
    // Read in chunks; a record is a `\n`-terminated line (the last one may lack the newline).
    let mut buf: Vec<u8> = Vec::with_capacity(READ_CHUNK * 2);
    let mut eof = false;
    while !eof {
        let n = read_chunk(&mut file, &mut buf)?;
        in_bytes += n as u64;
        eof = n == 0;
        let mut pos = 0;
        loop {
            let end = match find_newline(&buf, pos) {
                Some(e) => e,
                None if eof && pos < buf.len() => buf.len(),
                None => break,
            };
            records += 1;
            match conv.push(&buf[pos..end]) {
                Ok(h) => hours.push(h),
                Err(_) => dlq += 1,
            }
            pos = end + 1;
            let rows = conv.num_rows();
            if rows >= FLUSH_ROWS || (rows % 1024 == 1023 && conv.buffered_bytes() >= FLUSH_BYTES) {
                let batch = conv.finish();
                writers.write(&batch, &hours)?;
                hours.clear();
            }
        }
        buf.drain(..pos.min(buf.len()));
    }
    let batch = conv.finish();
    writers.write(&batch, &hours)?;
    let out_bytes = writers.close()?;
    let work_s = start.elapsed().as_secs_f64();
    Ok(BenchReport {
        work_s,
        records,
        dlq,
        in_bytes,
        out_bytes,
    })
}

/// Runs `floe bench convert` and prints its JSON line. Exit status 0, or 2 when the setup is refused.
///
/// Errors: [`BenchError`] on I/O or Parquet failures.
pub fn run(args: &BenchConvertArgs) -> Result<ExitCode, BenchError> {
    match convert(args) {
        Ok(r) => {
            let line = serde_json::json!({
                "work_s": r.work_s,
                "records": r.records,
                "in_bytes": r.in_bytes,
                "out_bytes": r.out_bytes,
                "records_per_s": if r.work_s > 0.0 { r.records as f64 / r.work_s } else { 0.0 },
                "dlq": r.dlq,
            });
            stdout::println(line.to_string());
            Ok(ExitCode::SUCCESS)
        }
        Err(BenchError::Setup(m)) => {
            eprintln!("floe bench convert: {m}");
            Ok(ExitCode::from(2))
        }
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn converts_into_one_parquet_file_per_hour_with_every_row() {
        let dir = tempfile::tempdir().unwrap();
        let schema = dir.path().join("event.schema.json");
        std::fs::write(&schema, include_str!("../../tests/data/event.schema.json")).unwrap();
        let input = dir.path().join("in.ndjson");
        let mut text = String::new();
        for i in 0..300 {
            let hour = 20 + i / 100; // 3 hours
            text.push_str(&format!(
                r#"{{"id":{i},"event_time":"2026-07-09T{hour}:00:00.5Z","value":1.5,"amount":12.30,"tags":["a"],"attrs":{{"k":"v"}},"user":{{"country":"DE","tier":2}}}}"#
            ));
            text.push('\n');
        }
        text.push_str("not json\n\n");
        text.push_str(r#"{"id":1,"event_time":"2026-07-09T23:00:00Z","value":2}"#); // no final newline
        std::fs::write(&input, &text).unwrap();
        let out = dir.path().join("out");
        let args = BenchConvertArgs {
            schema,
            partition_field: Some("event_time".into()),
            input,
            output: out.clone(),
            compression: BenchCompression::Zstd,
            level: 3,
            parquet_defaults: false,
        };
        let r = convert(&args).unwrap();
        assert_eq!((r.records, r.dlq, r.in_bytes), (303, 2, text.len() as u64));
        let mut total = 0;
        for h in ["20", "21", "22", "23"] {
            let f = out.join(format!("event_time_hour=2026-07-09-{h}/00000.parquet"));
            let reader = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(
                File::open(&f).unwrap(),
            )
            .unwrap()
            .build()
            .unwrap();
            let rows: usize = reader.map(|b| b.unwrap().num_rows()).sum();
            assert_eq!(rows, if h == "23" { 1 } else { 100 }, "{h}");
            total += rows;
        }
        assert_eq!(total, 301);
        assert!(r.out_bytes > 0);
    }

    #[test]
    fn find_newline_matches_a_byte_search() {
        let text = b"ab\ncdefghijklmnop\nq\n\nxyz0123456789abcdef\n\x80\n";
        for from in 0..text.len() {
            let want = text[from..]
                .iter()
                .position(|&b| b == b'\n')
                .map(|p| p + from);
            assert_eq!(find_newline(text, from), want, "from {from}");
        }
    }
}
