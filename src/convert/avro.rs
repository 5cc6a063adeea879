//! The Avro decoder: one record's Avro binary encoding (Avro specification 1.11, "Binary
//! Encoding"), read in one pass straight into the table's column buffers.
//!
//! Not written yet: every record is refused.

use super::column::StructCol;
use crate::model::{DlqCode, DlqReason};
use crate::schema::avro::AvroWriter;

/// Decodes one record of writer schema `writer` from `payload` (the bytes after the wire
/// framing) into one row of `root`; returns the partition field's value in µs since
/// 1970-01-01T00:00Z. On error the caller truncates every column back.
pub(crate) fn decode_record(
    writer: &AvroWriter,
    payload: &[u8],
    root: &mut StructCol,
    names: &[Box<str>],
) -> Result<i64, DlqReason> {
    let _ = (writer, payload, root, names);
    Err(DlqReason::record(
        DlqCode::DeserializationError,
        "Avro records are not decoded yet",
    ))
}
