//! Change events: what a record of a channel with `record.envelope` says happened to a row
//! (docs/cdc.md). The row and the deleted key stay slices of the record's JSON document, handed
//! to the converters as is: the event is parsed once, skipping what floe does not keep
//! (`source`, `ts_ms`, the JSON converter's `schema`), and the row is then converted as any row.
//!
//! ```text
//!  debezium:  {"op":"c"|"r"|"u", "after":{row}}            -> Row(row)
//!             {"op":"d", "before":{row or key columns}}     -> Delete(before)
//!             {"op":"t"}                                    -> Truncate (skipped, counted)
//!             {"schema":{…}, "payload":{…one of those…}}    -> the payload's
//!  upsert:    value                                          -> Row(value)
//!             tombstone, key {"id":1} or bare 1 (one column) -> Delete({"id":1})
//! ```
//!
//! Anything else is an `INVALID_ENVELOPE` DLQ entry; a record that is not JSON at all is a
//! `DESERIALIZATION_ERROR`, as on a channel without an envelope.

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::value::RawValue;

use crate::model::{DlqCode, DlqReason};

/// What one change event does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change<'a> {
    /// Writes this row (a JSON object): inserted, read by a snapshot, or updated.
    Row(&'a [u8]),
    /// Deletes the row whose key this JSON object holds (it may hold other fields too).
    Delete(Cow<'a, [u8]>),
    /// The source table was truncated: floe does not empty the table (skipped, counted).
    Truncate,
}

impl Change<'_> {
    /// The operation as a bounded metric label: `upsert`, `delete` or `truncate`.
    pub fn op(&self) -> &'static str {
        match self {
            Change::Row(_) => "upsert",
            Change::Delete(_) => "delete",
            Change::Truncate => "truncate",
        }
    }
}

/// The fields of a Debezium change event floe reads; the others are skipped unparsed.
#[derive(Deserialize)]
struct Event<'a> {
    #[serde(borrow, default)]
    op: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    before: Option<&'a RawValue>,
    #[serde(borrow, default)]
    after: Option<&'a RawValue>,
    /// The JSON converter with `schemas.enable`: the event is here.
    #[serde(borrow, default)]
    payload: Option<&'a RawValue>,
}

fn invalid(message: impl Into<String>) -> DlqReason {
    DlqReason::record(DlqCode::InvalidEnvelope, message)
}

/// A JSON object's bytes, or `None` for anything else (`null`, another type).
fn object(raw: Option<&RawValue>) -> Option<&[u8]> {
    raw.map(|r| r.get().as_bytes())
        .filter(|b| b.first() == Some(&b'{'))
}

/// The change a Debezium change event (JSON converter, with or without `schemas.enable`) makes.
///
/// Errors: `DESERIALIZATION_ERROR` for a record that is not JSON; `INVALID_ENVELOPE` for a
/// JSON document that is not a change event (not an object, no `op`, an unknown `op`, no `after`
/// object for `c`/`r`/`u`, no `before` object for `d`).
pub fn debezium(record: &[u8]) -> Result<Change<'_>, DlqReason> {
    let event = parse(record)?;
    let event = match (&event.op, object(event.payload)) {
        (None, Some(payload)) => parse(payload)?,
        _ => event,
    };
    let Some(op) = event.op.as_deref() else {
        return Err(invalid(
            "not a Debezium change event: no \"op\" (nor a \"payload\" holding one)",
        ));
    };
    match op {
        "c" | "r" | "u" => object(event.after).map(Change::Row).ok_or_else(|| {
            invalid(format!(
                "op \"{op}\" without an \"after\" object: no row to write"
            ))
        }),
        "d" => object(event.before)
            .map(|b| Change::Delete(Cow::Borrowed(b)))
            .ok_or_else(|| {
                invalid("op \"d\" without a \"before\" object: no key to delete (is the source table's replica identity set?)")
            }),
        "t" => Ok(Change::Truncate),
        other => Err(invalid(format!(
            "unknown op {other:?}: a Debezium change event's op is c, r, u, d or t"
        ))),
    }
}

fn parse(bytes: &[u8]) -> Result<Event<'_>, DlqReason> {
    serde_json::from_slice::<Event<'_>>(bytes).map_err(|e| {
        if e.is_data() {
            invalid(format!("not a Debezium change event: {e}"))
        } else {
            DlqReason::record(DlqCode::DeserializationError, format!("not JSON: {e}"))
        }
    })
}

/// The deleted key of an `"upsert"` envelope's tombstone: the message key, a JSON object
/// holding the key's columns (the JSON converter's `schemas.enable` wrapper is unwrapped), or a
/// bare JSON scalar for a key of one column (`column`), which is wrapped into an object.
///
/// Errors: `INVALID_ENVELOPE` for a missing key, a key that is not JSON, or a scalar when the
/// key has several columns (`column` is `None`).
pub fn upsert_key<'a>(
    key: Option<&'a [u8]>,
    column: Option<&str>,
) -> Result<Cow<'a, [u8]>, DlqReason> {
    let Some(key) = key else {
        return Err(invalid(
            "a tombstone without a message key: no key to delete",
        ));
    };
    let mut raw: &RawValue = serde_json::from_slice(key)
        .map_err(|e| invalid(format!("the message key is not JSON: {e}")))?;
    if raw.get().starts_with('{') {
        #[derive(Deserialize)]
        struct Wrapped<'a> {
            #[serde(borrow)]
            schema: Option<&'a RawValue>,
            #[serde(borrow)]
            payload: Option<&'a RawValue>,
        }
        // `{"schema": …, "payload": …}`: the JSON converter with schemas.enable; its payload
        // is the key's object, or its scalar for a key of one primitive column.
        match serde_json::from_slice::<Wrapped<'_>>(raw.get().as_bytes()) {
            Ok(Wrapped {
                schema: Some(_),
                payload: Some(payload),
            }) if payload.get() != "null" => raw = payload,
            _ => {}
        }
        if raw.get().starts_with('{') {
            return Ok(Cow::Borrowed(raw.get().as_bytes()));
        }
    }
    match column {
        Some(column) => {
            let name = serde_json::to_string(column).expect("a string serializes");
            Ok(Cow::Owned(format!("{{{name}:{}}}", raw.get()).into_bytes()))
        }
        None => Err(invalid(
            "the message key is a bare value but the table's key has several columns: it must be a JSON object of them",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(change: Result<Change<'_>, DlqReason>) -> String {
        match change {
            Ok(Change::Row(r)) => String::from_utf8(r.to_vec()).unwrap(),
            other => panic!("expected a row, got {other:?}"),
        }
    }

    fn deleted(change: Result<Change<'_>, DlqReason>) -> String {
        match change {
            Ok(Change::Delete(k)) => String::from_utf8(k.to_vec()).unwrap(),
            other => panic!("expected a delete, got {other:?}"),
        }
    }

    fn code(change: Result<Change<'_>, DlqReason>) -> DlqCode {
        change.expect_err("refused").code
    }

    #[test]
    fn each_op_of_a_bare_payload() {
        let after = r#"{"id":1,"name":"a"}"#;
        for op in ["c", "r", "u"] {
            let event = format!(
                r#"{{"before":null,"after":{after},"source":{{"db":"x"}},"op":"{op}","ts_ms":1}}"#
            );
            assert_eq!(row(debezium(event.as_bytes())), after);
        }
        // Postgres' default replica identity: `before` holds the key (other columns null).
        let d = br#"{"before":{"id":1,"name":null},"after":null,"op":"d"}"#;
        assert_eq!(deleted(debezium(d)), r#"{"id":1,"name":null}"#);
        assert_eq!(debezium(br#"{"op":"t","source":{}}"#), Ok(Change::Truncate));
    }

    #[test]
    fn each_op_with_schemas_enable() {
        let wrap = |payload: &str| {
            format!(
                r#"{{"schema":{{"type":"struct","fields":[{{"field":"op"}}],"name":"x.Envelope"}},"payload":{payload}}}"#
            )
        };
        let u = wrap(r#"{"before":{"id":1},"after":{"id":1,"v":2},"op":"u"}"#);
        assert_eq!(row(debezium(u.as_bytes())), r#"{"id":1,"v":2}"#);
        let d = wrap(r#"{"before":{"id":7},"after":null,"op":"d"}"#);
        assert_eq!(deleted(debezium(d.as_bytes())), r#"{"id":7}"#);
        let t = wrap(r#"{"op":"t"}"#);
        assert_eq!(debezium(t.as_bytes()), Ok(Change::Truncate));
    }

    #[test]
    fn malformed_events_are_invalid_envelopes() {
        let cases: [&[u8]; 9] = [
            br#"{"after":{"id":1}}"#,                         // no op
            br#"{"op":"x","after":{"id":1}}"#,                // unknown op
            br#"{"op":"c","after":null}"#,                    // no row
            br#"{"op":"u"}"#,                                 // no row
            br#"{"op":"c","after":[1]}"#,                     // not an object
            br#"{"op":"d","before":null}"#,                   // no key
            br#"{"op":3}"#,                                   // op not a string
            br#"[1,2]"#,                                      // not an object
            br#"{"schema":{},"payload":{"after":{"id":1}}}"#, // payload without op
        ];
        for case in cases {
            assert_eq!(
                code(debezium(case)),
                DlqCode::InvalidEnvelope,
                "{}",
                String::from_utf8_lossy(case)
            );
        }
        assert_eq!(code(debezium(b"{\"op\":")), DlqCode::DeserializationError);
        assert_eq!(code(debezium(b"not json")), DlqCode::DeserializationError);
    }

    #[test]
    fn an_escaped_op_is_read() {
        assert_eq!(
            row(debezium(br#"{"op":"\u0063","after":{"id":1}}"#)),
            r#"{"id":1}"#
        );
    }

    #[test]
    fn upsert_keys_are_objects_or_one_columns_scalar() {
        let key = |k: &[u8], c: Option<&str>| {
            upsert_key(Some(k), c).map(|k| String::from_utf8(k.to_vec()).unwrap())
        };
        assert_eq!(key(br#"{"id":5}"#, Some("id")).unwrap(), r#"{"id":5}"#);
        assert_eq!(key(b"5", Some("id")).unwrap(), r#"{"id":5}"#);
        assert_eq!(
            key(br#" "a\"b" "#, Some("k\"")).unwrap(),
            r#"{"k\"":"a\"b"}"#
        );
        assert_eq!(
            key(br#"{"schema":{"type":"struct"},"payload":{"id":5}}"#, None).unwrap(),
            r#"{"id":5}"#
        );
        // A primitive key under the JSON converter with schemas.enable.
        assert_eq!(
            key(br#"{"schema":{"type":"int64"},"payload":4}"#, Some("id")).unwrap(),
            r#"{"id":4}"#
        );
        let refused = |k: Option<&[u8]>, c: Option<&str>| upsert_key(k, c).unwrap_err().code;
        assert_eq!(refused(None, Some("id")), DlqCode::InvalidEnvelope);
        assert_eq!(refused(Some(b"5"), None), DlqCode::InvalidEnvelope);
        assert_eq!(refused(Some(b"abc"), Some("id")), DlqCode::InvalidEnvelope);
    }
}
