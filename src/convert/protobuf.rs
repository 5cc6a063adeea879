//! The Protobuf decoder: one message's binary wire format (Protocol Buffers "Encoding"), read
//! in one pass straight into the table's column buffers.
//!
//! Not written yet: every record is refused.

use super::column::StructCol;
use crate::model::{DlqCode, DlqReason};
use crate::schema::protobuf::ProtoMessage;

/// Decodes one message of `message` from `payload` (the bytes after the wire framing) into one
/// row of `root`; returns the partition field's value in µs since 1970-01-01T00:00Z. On error
/// the caller truncates every column back.
pub(crate) fn decode_record(
    message: &ProtoMessage,
    payload: &[u8],
    root: &mut StructCol,
    names: &[Box<str>],
) -> Result<i64, DlqReason> {
    let _ = (message, payload, root, names);
    Err(DlqReason::record(
        DlqCode::DeserializationError,
        "Protobuf records are not decoded yet",
    ))
}
