//! `floe bench convert`: the conversion path of a worker, on one thread, on a file — read records
//! (NDJSON, or varint-delimited Avro datums or Protobuf messages), decode and validate every
//! record ([`crate::convert::Converter`]), split rows by hour partition, and write one Parquet file
//! per hour (ZSTD by default) — so users can size a fleet.
//!
//! ```text
//! floe bench convert [--format json|avro|protobuf] --schema FILE [--message NAME]
//!                    [--partition-field NAME] --input FILE --output DIR
//!                    [--compression zstd|snappy|none] [--level 3] [--parquet-defaults]
//! ```
//!
//! Prints one JSON line: `{"work_s": S, "records": N, "in_bytes": B, "out_bytes": O,
//! "records_per_s": R, "dlq": D, "decode_s": DS, "decode_records_per_s": DR, "encode_s": ES,
//! "encode_records_per_s": ER, "read_s": RS}` — `work_s` is wall time in seconds from reading the
//! input to the last file closed; `records` counts input records (rows and DLQ'd ones); bytes are
//! input and Parquet output sizes. Where the time goes: `decode_s` decoding and validating
//! records into Arrow columns (`Converter::push`/`finish`, with splitting the input into
//! records), `encode_s` the Parquet writers (hour split, encoding, compression, writes; its rate
//! counts rows), `read_s` reading the input file; they add up to `work_s`. Files are
//! `DIR/<field>_hour=<YYYY-MM-DD-HH>/00000.parquet`, written with
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
use crate::schema::protobuf::{MessageSelector, ProtoFile};
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

/// The record format of the input file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum BenchFormat {
    /// NDJSON: one JSON record per line; `--schema` is a JSON Schema.
    Json,
    /// Avro binary datums (the payload of a Confluent-framed record, without the framing), each
    /// preceded by its length as a varint; `--schema` is the writer schema (`.avsc`).
    Avro,
    /// Protobuf messages, each preceded by its length as a varint (`writeDelimitedTo`);
    /// `--schema` is the `.proto` file and `--message` the message's full name.
    Protobuf,
}

/// Arguments of `floe bench convert`.
#[derive(Clone, Debug, clap::Args)]
pub struct BenchConvertArgs {
    /// Record format of `--input`.
    #[arg(long, value_enum, default_value = "json")]
    pub format: BenchFormat,
    /// Schema file: JSON Schema (json), Avro schema `.avsc` (avro), `.proto` (protobuf).
    #[arg(long, value_name = "FILE")]
    pub schema: PathBuf,
    /// Protobuf: the message's full name (`package.Message`).
    #[arg(long, value_name = "NAME")]
    pub message: Option<String>,
    /// The partition field (default for JSON: the only top-level date-time field; required for
    /// Avro and Protobuf).
    #[arg(long, value_name = "NAME")]
    pub partition_field: Option<String>,
    /// Input: NDJSON (json), or varint-delimited records (avro, protobuf).
    #[arg(long, value_name = "FILE")]
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

/// How the input file holds its records.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Framing {
    /// One record per `\n`-terminated line (the last one may lack the newline).
    Lines,
    /// Each record preceded by its length as a base-128 varint (the Protocol Buffers
    /// "length-delimited" stream of `writeDelimitedTo` / `parseDelimitedFrom`).
    Varint,
}

impl Framing {
    /// The next record of `buf[pos..]` and where the one after it starts; `None` when more input
    /// is needed (or, at `eof`, when there is none left).
    ///
    /// Errors: a varint-delimited file that ends inside a record or a length (`InvalidData`).
    fn next_record(
        self,
        buf: &[u8],
        pos: usize,
        eof: bool,
    ) -> Result<Option<(std::ops::Range<usize>, usize)>, BenchError> {
        match self {
            Framing::Lines => Ok(match find_newline(buf, pos) {
                Some(end) => Some((pos..end, end + 1)),
                None if eof && pos < buf.len() => Some((pos..buf.len(), buf.len())),
                None => None,
            }),
            Framing::Varint => {
                if pos >= buf.len() {
                    return Ok(None);
                }
                let mut rest = &buf[pos..];
                let len = match prost::encoding::decode_varint(&mut rest) {
                    Ok(len) => len,
                    // Fewer than 10 bytes, each continuing the length: the rest is still to come.
                    Err(_) if buf.len() - pos < 10 && buf[pos..].iter().all(|b| b & 0x80 != 0) => {
                        return truncated(eof, pos);
                    }
                    Err(_) => {
                        return Err(invalid(
                            pos,
                            "a record length that is not a varint of at most 64 bits",
                        ));
                    }
                };
                let i = buf.len() - rest.len();
                let Some(end) = usize::try_from(len).ok().and_then(|l| i.checked_add(l)) else {
                    return Err(invalid(pos, "a record length beyond memory"));
                };
                if end > buf.len() {
                    return truncated(eof, pos);
                }
                Ok(Some((i..end, end)))
            }
        }
    }
}

fn invalid(pos: usize, what: &str) -> BenchError {
    BenchError::Io(std::io::Error::new(
        std::io::ErrorKind::InvalidData,
        format!("varint-delimited input: {what} (input chunk offset {pos})"),
    ))
}

/// More input is needed, unless the file ended: then the last record is cut short.
fn truncated<T>(eof: bool, pos: usize) -> Result<Option<T>, BenchError> {
    if eof {
        Err(invalid(pos, "the file ends inside a record"))
    } else {
        Ok(None)
    }
}

/// Measured outcome of a run.
#[derive(Clone, Copy, Debug)]
pub struct BenchReport {
    /// Wall time in seconds.
    pub work_s: f64,
    /// Seconds decoding and validating records into Arrow columns ([`Converter::push`] and
    /// [`Converter::finish`], with splitting the input into records).
    pub decode_s: f64,
    /// Seconds in the Parquet writers: splitting batches by hour, encoding, compression, writes.
    pub encode_s: f64,
    /// Seconds reading the input file.
    pub read_s: f64,
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

/// The mapped schema of `args.schema` in `args.format`'s schema language, and the partition field.
fn mapped_schema(args: &BenchConvertArgs) -> Result<(MappedSchema, String), BenchError> {
    let setup = |e: crate::schema::SchemaError| BenchError::Setup(e.to_string());
    let text = std::fs::read(&args.schema)?;
    let partition = args.partition_field.clone();
    let required = || {
        partition
            .clone()
            .ok_or_else(|| BenchError::Setup("choose --partition-field".to_string()))
    };
    match args.format {
        BenchFormat::Json => {
            let doc: serde_json::Value = serde_json::from_slice(&text)
                .map_err(|e| BenchError::Setup(format!("schema is not JSON: {e}")))?;
            let partition = match partition {
                Some(p) => p,
                None => match date_time_fields(&doc).map_err(setup)?.as_slice() {
                    [one] => one.clone(),
                    _ => required()?,
                },
            };
            let schema = MappedSchema::from_json_schema(&doc, &partition).map_err(setup)?;
            Ok((schema, partition))
        }
        BenchFormat::Avro => {
            let partition = required()?;
            let text = String::from_utf8(text)
                .map_err(|_| BenchError::Setup("the Avro schema is not UTF-8".to_string()))?;
            let schema = MappedSchema::from_avro(&text, &[], &partition).map_err(setup)?;
            Ok((schema, partition))
        }
        BenchFormat::Protobuf => {
            let partition = required()?;
            let Some(message) = &args.message else {
                return Err(BenchError::Setup(
                    "choose --message (the message's full name, package.Message)".to_string(),
                ));
            };
            let file = ProtoFile {
                name: args
                    .schema
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default(),
                text: String::from_utf8(text)
                    .map_err(|_| BenchError::Setup("the .proto file is not UTF-8".to_string()))?,
            };
            let selector = MessageSelector::Name(message.clone());
            let schema =
                MappedSchema::from_protobuf(&[file], &selector, &partition).map_err(setup)?;
            Ok((schema, partition))
        }
    }
}

/// Converts `args.input` into hour-partitioned Parquet files under `args.output` on this thread.
///
/// Errors: [`BenchError`] on a refused schema, I/O or Parquet failure.
pub fn convert(args: &BenchConvertArgs) -> Result<BenchReport, BenchError> {
    let (schema, partition) = mapped_schema(args)?;
    let schema = Arc::new(schema);
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

    let framing = match args.format {
        BenchFormat::Json => Framing::Lines,
        BenchFormat::Avro | BenchFormat::Protobuf => Framing::Varint,
    };
    let start = Instant::now();
    let mut file = File::open(&args.input)?;
    let mut records = 0u64;
    let mut dlq = 0u64;
    let mut in_bytes = 0u64;
    // Time in the Parquet writers (hour split, encoding, compression, file writes) and in reading
    // the input file; the rest of the wall time is decoding and validation.
    let mut encode_s = 0.0f64;
    let mut read_s = 0.0f64;
    let mut hours: Vec<i64> = Vec::with_capacity(1 << 16);
    let mut buf: Vec<u8> = Vec::with_capacity(READ_CHUNK * 2);
    let mut eof = false;
    while !eof {
        let t = Instant::now();
        let n = read_chunk(&mut file, &mut buf)?;
        read_s += t.elapsed().as_secs_f64();
        in_bytes += n as u64;
        eof = n == 0;
        let mut pos = 0;
        while let Some((range, next)) = framing.next_record(&buf, pos, eof)? {
            records += 1;
            match conv.push(&buf[range]) {
                Ok(h) => hours.push(h),
                Err(_) => dlq += 1,
            }
            pos = next;
            let rows = conv.num_rows();
            if rows >= FLUSH_ROWS || (rows % 1024 == 1023 && conv.buffered_bytes() >= FLUSH_BYTES) {
                let batch = conv.finish();
                let t = Instant::now();
                writers.write(&batch, &hours)?;
                encode_s += t.elapsed().as_secs_f64();
                hours.clear();
            }
        }
        buf.drain(..pos.min(buf.len()));
    }
    let batch = conv.finish();
    let t = Instant::now();
    writers.write(&batch, &hours)?;
    let out_bytes = writers.close()?;
    encode_s += t.elapsed().as_secs_f64();
    let work_s = start.elapsed().as_secs_f64();
    Ok(BenchReport {
        work_s,
        decode_s: (work_s - encode_s - read_s).max(0.0),
        encode_s,
        read_s,
        records,
        dlq,
        in_bytes,
        out_bytes,
    })
}

/// `n / seconds`, 0 when no time was measured.
fn per_s(n: u64, seconds: f64) -> f64 {
    if seconds > 0.0 {
        n as f64 / seconds
    } else {
        0.0
    }
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
                "records_per_s": per_s(r.records, r.work_s),
                "dlq": r.dlq,
                "decode_s": r.decode_s,
                "decode_records_per_s": per_s(r.records, r.decode_s),
                "encode_s": r.encode_s,
                "encode_records_per_s": per_s(r.records - r.dlq, r.encode_s),
                "read_s": r.read_s,
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
            format: BenchFormat::Json,
            schema,
            message: None,
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
        assert!(r.decode_s > 0.0 && r.encode_s > 0.0, "{r:?}");
        assert!(
            (r.decode_s + r.encode_s + r.read_s - r.work_s).abs() < 1e-6,
            "the parts add up to the wall time: {r:?}"
        );
    }

    #[test]
    fn binary_formats_need_a_partition_field_and_protobuf_a_message() {
        let dir = tempfile::tempdir().unwrap();
        let schema = dir.path().join("event.proto");
        std::fs::write(
            &schema,
            "syntax = \"proto3\";\nmessage Event { int64 id = 1; }\n",
        )
        .unwrap();
        let args = |format, partition_field: Option<&str>| BenchConvertArgs {
            format,
            schema: schema.clone(),
            message: None,
            partition_field: partition_field.map(str::to_string),
            input: dir.path().join("in.bin"),
            output: dir.path().join("out"),
            compression: BenchCompression::Zstd,
            level: 3,
            parquet_defaults: false,
        };
        let setup = |a: &BenchConvertArgs| match convert(a) {
            Err(BenchError::Setup(m)) => m,
            other => panic!("expected a refused setup, got {other:?}"),
        };
        assert!(setup(&args(BenchFormat::Avro, None)).contains("--partition-field"));
        assert!(setup(&args(BenchFormat::Protobuf, None)).contains("--partition-field"));
        assert!(setup(&args(BenchFormat::Protobuf, Some("event_time"))).contains("--message"));
    }

    /// Every record of a varint-delimited stream, read in the bench's way.
    fn varint_records(bytes: &[u8], eof: bool) -> Result<Vec<Vec<u8>>, BenchError> {
        let mut out = Vec::new();
        let mut pos = 0;
        while let Some((range, next)) = Framing::Varint.next_record(bytes, pos, eof)? {
            out.push(bytes[range].to_vec());
            pos = next;
        }
        Ok(out)
    }

    #[test]
    fn varint_framing_splits_length_delimited_records() {
        let records: Vec<Vec<u8>> =
            vec![vec![], vec![7; 1], vec![1; 127], vec![2; 128], vec![3; 300]];
        let mut stream = Vec::new();
        for r in &records {
            let mut n = r.len();
            loop {
                let b = (n & 0x7f) as u8;
                n >>= 7;
                stream.push(if n == 0 { b } else { b | 0x80 });
                if n == 0 {
                    break;
                }
            }
            stream.extend_from_slice(r);
        }
        assert_eq!(varint_records(&stream, true).unwrap(), records);
        // Cut anywhere: the complete records come out, the rest waits for more input, and at
        // the end of the file a cut record is an error.
        for cut in 0..stream.len() {
            let part = varint_records(&stream[..cut], false).unwrap();
            assert_eq!(part, records[..part.len()], "cut at {cut}");
            let whole_records = records.iter().scan(0, |end, r| {
                *end += r.len() + if r.len() < 128 { 1 } else { 2 };
                Some(*end)
            });
            if !whole_records.into_iter().any(|end| end == cut) && cut > 0 {
                assert!(
                    varint_records(&stream[..cut], true).is_err(),
                    "cut at {cut}"
                );
            }
        }
        assert!(varint_records(&[0xff; 11], true).is_err());
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
