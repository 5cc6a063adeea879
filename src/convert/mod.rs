//! Record conversion, the pipeline's hot path: a record's payload → Arrow columns of the table
//! schema, validated while it is decoded (docs/schema-mapping.md "Value rules" and "DLQ error
//! codes"). The payload is what the registry room's decoder ([`crate::registry::decoder`]) left
//! after the record's framing; its format is the mapped schema's [`Decoding`]:
//!
//! ```text
//!   payload ──► size check ──► JSON Schema: one-pass pull parse (json.rs: syntax, UTF-8, escapes,
//!   (after      (RECORD_         depth, duplicate keys) driven by the mapped schema, validating
//!    framing)    TOO_LARGE)      each value (json_schema.rs)
//!                            ──► Avro: the writer schema's datum, resolved (avro/)
//!                            ──► Protobuf: the message's fields, scanned then read (protobuf/)
//!                                  │ each value appended to its column (column.rs)
//!                                  ▼ ok                          │ error
//!                           row appended,              every column truncated back:
//!                           hour partition             DlqReason {code, field, message}
//! ```
//!
//! Every record is decoded exactly once, with no tree allocated per record: JSON numbers are read
//! from their exact text (decimals and integers never through `f64`), strings are unescaped straight
//! into the column buffers. One bad record never fails a batch: it is reported as a [`DlqReason`]
//! and leaves the buffers as they were, so rows stay in input order. Specs followed: JSON (RFC 8259)
//! with the I-JSON restrictions (RFC 7493: no duplicate keys, no lone surrogates, valid UTF-8), RFC
//! 3339 dates and times, base64 per RFC 4648 §4, JSON Schema draft-04/-07 validation keywords, Avro
//! 1.11 binary encoding, the Protocol Buffers binary encoding, and the Iceberg spec's types
//! with iceberg-rust's Arrow mapping.
//!
//! The invariant it upholds for exactly-once delivery: every record it is given ends up either as
//! exactly one row or as exactly one DLQ reason.

mod avro;
mod column;
pub mod envelope;
mod json;
mod json_schema;
mod protobuf;
pub mod render;
pub mod route;
pub(crate) mod time;

pub use json::MAX_DEPTH;
pub use time::{format_date, format_time, format_timestamptz, hour_of_micros};

use std::sync::Arc;

use arrow_array::{RecordBatch, RecordBatchOptions};
use arrow_schema::SchemaRef;

use crate::schema::{Decoding, MappedSchema, SchemaError};
use column::{BuildMode, StructCol};
use json_schema::{Ctx, Scratch};

/// Default largest record accepted, in bytes (10 MiB, the Kinesis record limit).
pub const DEFAULT_MAX_RECORD_SIZE: usize = 10 * 1024 * 1024;

/// Bytes of input a converter buffers before it asks for [`Converter::finish`]: keeps every Arrow
/// 32-bit offset (strings, lists, maps) in range, since no record's output exceeds its input.
const MAX_BUFFERED_INPUT: usize = (i32::MAX as usize) / 2;

pub use crate::model::{DlqCode, DlqReason};

/// Converts records (JSON, Avro or Protobuf payloads) into rows of one table, buffering them as Arrow columns until
/// [`Converter::finish`]. Push-based and single-threaded; reuse one per channel and worker.
pub struct Converter {
    schema: Arc<MappedSchema>,
    arrow: SchemaRef,
    root: StructCol,
    names: Vec<Box<str>>,
    scratch: Scratch,
    input_bytes: usize,
    max_record_size: usize,
}

impl std::fmt::Debug for Converter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Converter")
            .field("num_rows", &self.num_rows())
            .field("max_record_size", &self.max_record_size)
            .finish()
    }
}

impl Converter {
    /// A converter for records of `schema` into batches of the table's Arrow schema `arrow`
    /// (`iceberg::arrow::schema_to_arrow_schema` of the loaded table schema: field ids may differ from
    /// `schema`'s, names, types, nullability and structure must be the same).
    ///
    /// Errors: [`SchemaError::TableMismatch`] when `arrow` does not have that structure.
    pub fn try_new(schema: Arc<MappedSchema>, arrow: SchemaRef) -> Result<Self, SchemaError> {
        Self::build(schema, arrow, BuildMode::Exact)
    }

    /// A converter for records of `schema` (one schema version) into batches of a table whose
    /// schema is an evolution of it (docs/schema-mapping.md "Schema evolution"): the table may
    /// have fields the version lacks (null in its rows; a key of that name is an unknown key of
    /// the version), `long` where the version has `int`, and optional fields where the version's
    /// are required. Records are validated by the version's rules alone.
    ///
    /// Errors: [`SchemaError::TableMismatch`] when the table is not such an evolution (a field of
    /// the version missing from the table, another type, a required column the version lacks).
    pub fn for_evolved_table(
        schema: Arc<MappedSchema>,
        arrow: SchemaRef,
    ) -> Result<Self, SchemaError> {
        Self::build(schema, arrow, BuildMode::Evolved)
    }

    fn build(
        schema: Arc<MappedSchema>,
        arrow: SchemaRef,
        mode: BuildMode,
    ) -> Result<Self, SchemaError> {
        let mut names = Vec::new();
        let root = StructCol::build(schema.root(), arrow.fields(), "", &mut names, mode)?;
        Ok(Converter {
            schema,
            arrow,
            root,
            names,
            scratch: Scratch::default(),
            input_bytes: 0,
            max_record_size: DEFAULT_MAX_RECORD_SIZE,
        })
    }

    /// Sets the largest record accepted, in bytes (default [`DEFAULT_MAX_RECORD_SIZE`], 10 MiB);
    /// larger records get `RECORD_TOO_LARGE`.
    pub fn with_max_record_size(mut self, bytes: usize) -> Self {
        self.max_record_size = bytes;
        self
    }

    /// The largest record accepted, in bytes.
    pub fn max_record_size(&self) -> usize {
        self.max_record_size
    }

    /// The mapped schema records are validated against.
    pub fn schema(&self) -> &Arc<MappedSchema> {
        &self.schema
    }

    /// Decodes one record: a JSON object, or for Avro and Protobuf schemas
    /// ([`MappedSchema::decoding`]) the binary payload after the wire framing. On success appends one row and returns its hour
    /// partition value: hours since 1970-01-01T00:00Z of the partition field, floor division
    /// (negative before 1970), or `hour_of_micros(i64::MIN)` when the schema has no partition
    /// field (an empty [`MappedSchema::partition_field`]: a spec without a time transform). On
    /// failure appends nothing and returns the reason.
    ///
    /// A push is also refused (`RECORD_TOO_LARGE`, "buffer full") when more than ~1 GiB of input is
    /// buffered: call [`Converter::finish`] well before (the daemon flushes at its buffer size).
    pub fn push(&mut self, record: &[u8]) -> Result<i64, DlqReason> {
        if record.len() > self.max_record_size {
            return Err(DlqReason::record(
                DlqCode::RecordTooLarge,
                format!(
                    "record of {} bytes exceeds max_record_size {}",
                    record.len(),
                    self.max_record_size
                ),
            ));
        }
        if record.len() > json::MAX_READER_LEN {
            return Err(DlqReason::record(
                DlqCode::RecordTooLarge,
                format!("record of {} bytes exceeds 2 GiB", record.len()),
            ));
        }
        if self.input_bytes + record.len() > MAX_BUFFERED_INPUT {
            return Err(DlqReason::record(
                DlqCode::RecordTooLarge,
                "converter buffer full: finish() the batch before pushing more",
            ));
        }
        let rows = self.root.len;
        let res = match self.schema.decoding() {
            Decoding::JsonSchema(draft) => self.push_json(record, *draft),
            Decoding::Avro(writer) => {
                avro::decode_record(writer, record, &mut self.root, &self.names)
            }
            Decoding::Protobuf(message) => {
                protobuf::decode_record(message, record, &mut self.root, &self.names)
            }
        };
        match res {
            Ok(us) if self.root.len == rows + 1 => {
                self.input_bytes += record.len();
                Ok(hour_of_micros(us))
            }
            Ok(_) => {
                self.root.truncate(rows);
                Err(DlqReason {
                    code: DlqCode::MissingPartitionValue,
                    field: format!(
                        "/{}",
                        crate::schema::escape_pointer_token(self.schema.partition_field())
                    ),
                    message: "the partition field is missing".to_string(),
                })
            }
            Err(reason) => {
                self.root.truncate(rows);
                Err(reason)
            }
        }
    }

    /// One JSON document into one row; returns the partition field's µs (`i64::MIN` when the
    /// record has none: then no row was appended either).
    fn push_json(&mut self, record: &[u8], draft: crate::schema::Draft) -> Result<i64, DlqReason> {
        if crate::registry::looks_like_gsr(record) {
            return Err(DlqReason::record(
                DlqCode::DeserializationError,
                "record carries a GSR header; set record.format = gsr_json",
            ));
        }
        let rows = self.root.len;
        let mut ctx = Ctx::new(record, &self.names, &mut self.scratch, draft);
        let res = ctx.decode_record(&mut self.root);
        let err = match res {
            Err(e) => Some(DlqReason::record(
                DlqCode::DeserializationError,
                format!("not JSON: {} at byte {}", e.what(), e.offset()),
            )),
            Ok(()) => ctx.err.take(),
        };
        let partition = ctx.partition_us;
        if let Some(err) = err {
            return Err(err);
        }
        match partition {
            Some(us) if self.root.len == rows + 1 => Ok(us),
            // No time field (a partition spec without a time transform): every row is taken.
            None if self.root.len == rows + 1 && self.schema.partition_field().is_empty() => {
                Ok(i64::MIN)
            }
            // No partition value: the caller sees no new row and refuses the record.
            _ => {
                self.root.truncate(rows);
                Ok(i64::MIN)
            }
        }
    }

    /// Rows buffered since the last [`Converter::finish`].
    pub fn num_rows(&self) -> usize {
        self.root.len
    }

    /// Approximate bytes held by the column buffers (for back-pressure).
    pub fn buffered_bytes(&self) -> usize {
        self.root.children.iter().map(|c| c.buffered_bytes()).sum()
    }

    /// Takes the buffered rows as one `RecordBatch` whose schema is the table's Arrow schema, and
    /// resets the buffers for reuse (keeping their capacity).
    pub fn finish(&mut self) -> RecordBatch {
        let n = self.root.len;
        let columns = self.root.children.iter_mut().map(|c| c.finish()).collect();
        self.root.len = 0;
        self.input_bytes = 0;
        RecordBatch::try_new_with_options(
            self.arrow.clone(),
            columns,
            &RecordBatchOptions::new().with_row_count(Some(n)),
        )
        .unwrap_or_else(|e| panic!("converter columns match the table schema: {e}"))
    }
}

#[cfg(test)]
mod tests;
