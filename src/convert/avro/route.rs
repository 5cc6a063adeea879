//! The route value of an Avro record (docs/routing.md "Fan-out by a field"): the writer
//! schema's top-level fields before the route field are skipped with the decoder's own
//! [`skip`], the route field's value is read, and nothing after it.

use super::{skip, Fail, Reader, Res};
use crate::model::DlqReason;
use crate::schema::avro::{AvroWriter, Node};

/// The position of `field` among the top-level fields of `writer`.
///
/// Errors: why `field` cannot route records of `writer` (no such field, or not a string, an
/// int, a long, a boolean or an enum, optionally in a union with null).
pub(crate) fn field_index(writer: &AvroWriter, field: &str) -> Result<usize, String> {
    let Some(i) = writer.root.fields.iter().position(|f| &*f.name == field) else {
        return Err(format!(
            "\"{field}\" is not a top-level field of the Avro schema"
        ));
    };
    let node = match &writer.root.fields[i].node {
        Node::Optional { value, .. } => value,
        node => node,
    };
    match node {
        Node::Str | Node::Int | Node::Long | Node::Bool | Node::Enum(_) => Ok(i),
        other => Err(format!(
            "\"{field}\" is an Avro {}: a route field is a string, an int, a long, a boolean or an enum (or a union of null and one of them)",
            kind(other)
        )),
    }
}

/// The Avro type (or logical type) a node reads, for messages.
fn kind(n: &Node) -> &'static str {
    match n {
        Node::Bool => "boolean",
        Node::Int => "int",
        Node::Long => "long",
        Node::Float => "float",
        Node::Double => "double",
        Node::Str => "string",
        Node::Bytes => "bytes",
        Node::Fixed(_) => "fixed",
        Node::Enum(_) => "enum",
        Node::Decimal(_) => "decimal",
        Node::UuidStr | Node::UuidFixed => "uuid",
        Node::Date => "date",
        Node::TimeMillis | Node::TimeMicros => "time",
        Node::TimestampMillis | Node::TimestampMicros => "timestamp",
        Node::Record(_) => "record",
        Node::Array(_) => "array",
        Node::Map(_) => "map",
        Node::Null => "null",
        Node::Union(_) | Node::Optional { .. } => "union",
    }
}

/// The route value of the record `payload` (its bytes after the wire framing), whose route
/// field is the writer's top-level field `index` ([`field_index`]): a string as is, an int or a
/// long as decimal text, a boolean as `true`/`false`, an enum as its symbol; `None` for null.
///
/// Errors: the bytes are not a value of the writer schema up to the route field.
pub(crate) fn route_value(
    writer: &AvroWriter,
    index: usize,
    payload: &[u8],
) -> Result<Option<String>, DlqReason> {
    let mut r = Reader {
        buf: payload,
        pos: 0,
    };
    let read = |r: &mut Reader<'_>| -> Res<Option<String>> {
        for f in &writer.root.fields[..index] {
            skip(&f.node, r)?;
        }
        value(&writer.root.fields[index].node, r)
    };
    read(&mut r).map_err(Fail::into_reason)
}

/// One value of `n` as route text; `None` for null.
fn value(n: &Node, r: &mut Reader<'_>) -> Res<Option<String>> {
    Ok(Some(match n {
        Node::Optional {
            null_index,
            value: v,
        } => {
            let b = r.long()?;
            return if b == i64::from(*null_index) {
                Ok(None)
            } else if b == i64::from(1 - *null_index) {
                value(v, r)
            } else {
                Err(Fail::bad(format!("union branch {b} of a 2-branch union")))
            };
        }
        Node::Str => r.str()?.to_string(),
        Node::Int => r.int()?.to_string(),
        Node::Long => r.long()?.to_string(),
        Node::Bool => match r.take(1)?[0] {
            0 => "false".to_string(),
            1 => "true".to_string(),
            x => return Err(Fail::bad(format!("boolean byte {x}"))),
        },
        Node::Enum(symbols) => {
            let i = r.int()?;
            match usize::try_from(i).ok().and_then(|i| symbols.get(i)) {
                Some(Some(symbol)) => symbol.to_string(),
                Some(None) => return Ok(None),
                None => {
                    return Err(Fail::bad(format!(
                        "enum index {i} of {} symbols",
                        symbols.len()
                    )))
                }
            }
        }
        _ => return Ok(None),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::{Decoding, MappedSchema};

    /// The decode plan of the record schema with `fields`.
    fn writer(fields: &str) -> std::sync::Arc<AvroWriter> {
        let text = format!(r#"{{"type":"record","name":"E","fields":[{fields}]}}"#);
        let mapped = MappedSchema::from_avro(&text, &[], "").unwrap();
        let Decoding::Avro(w) = mapped.decoding() else {
            panic!("an Avro plan")
        };
        w.clone()
    }

    /// The Avro encoding of a `long`/`int` (zigzag varint).
    fn zigzag(v: i64) -> Vec<u8> {
        let mut n = ((v << 1) ^ (v >> 63)) as u64;
        let mut out = Vec::new();
        loop {
            let b = (n & 0x7f) as u8;
            n >>= 7;
            if n == 0 {
                out.push(b);
                return out;
            }
            out.push(b | 0x80);
        }
    }

    fn string(s: &str) -> Vec<u8> {
        let mut out = zigzag(s.len() as i64);
        out.extend_from_slice(s.as_bytes());
        out
    }

    /// What the router sees: `Some(Some(value))`, `Some(None)` (no route value) or `None`
    /// (unreadable).
    type Read = Option<Option<String>>;
    const NO_VALUE: Read = Some(None);
    const UNREADABLE: Read = None;

    fn v(s: &str) -> Read {
        Some(Some(s.into()))
    }

    fn read(fields: &str, field: &str, payload: &[u8]) -> Read {
        let w = writer(fields);
        let i = field_index(&w, field).unwrap();
        route_value(&w, i, payload).ok()
    }

    const SKIPPED: &str = r#"{"name":"id","type":"long"},{"name":"tags","type":{"type":"array","items":"string"}},{"name":"user","type":{"type":"record","name":"U","fields":[{"name":"region","type":"string"}]}},{"name":"score","type":["null","double"]}"#;

    /// `SKIPPED`'s values: id 5, tags ["a", "b"], user.region "us", score 1.5.
    fn skipped_values() -> Vec<u8> {
        let mut out = zigzag(5);
        out.extend(zigzag(2));
        out.extend(string("a"));
        out.extend(string("b"));
        out.push(0);
        out.extend(string("us"));
        out.extend(zigzag(1));
        out.extend(1.5f64.to_le_bytes());
        out
    }

    #[test]
    fn reads_the_route_field_first_middle_or_last_skipping_the_others() {
        let region = r#"{"name":"region","type":"string"}"#;
        let eu = string("eu");
        let first = [eu.clone(), skipped_values()].concat();
        assert_eq!(
            read(&format!("{region},{SKIPPED}"), "region", &first),
            v("eu")
        );
        let middle = [zigzag(5), eu.clone(), skipped_values()[1..].to_vec()].concat();
        let (id, rest) = SKIPPED.split_once("},").unwrap();
        assert_eq!(
            read(&format!("{id}}},{region},{rest}"), "region", &middle),
            v("eu")
        );
        let last = [skipped_values(), eu].concat();
        assert_eq!(
            read(&format!("{SKIPPED},{region}"), "region", &last),
            v("eu")
        );
        // Only what precedes the route field is read: bytes after it are the converter's.
        let trailing = [string("eu"), vec![0xff]].concat();
        assert_eq!(read(region, "region", &trailing), v("eu"));
    }

    #[test]
    fn integers_booleans_enums_and_null_unions_read_as_json_does() {
        let one = |ty: &str, payload: &[u8]| {
            read(&format!(r#"{{"name":"r","type":{ty}}}"#), "r", payload)
        };
        assert_eq!(one(r#""int""#, &zigzag(7)), v("7"));
        assert_eq!(one(r#""int""#, &zigzag(-7)), v("-7"));
        assert_eq!(
            one(r#""long""#, &zigzag(i64::MIN)),
            v("-9223372036854775808")
        );
        assert_eq!(one(r#""boolean""#, &[1]), v("true"));
        assert_eq!(one(r#""boolean""#, &[0]), v("false"));
        let e = r#"{"type":"enum","name":"R","symbols":["eu","us"]}"#;
        assert_eq!(one(e, &zigzag(1)), v("us"));
        assert_eq!(one(r#"["null","string"]"#, &[0]), NO_VALUE);
        assert_eq!(
            one(
                r#"["null","string"]"#,
                &[[2].as_slice(), &string("eu")].concat()
            ),
            v("eu")
        );
        assert_eq!(one(r#"["long","null"]"#, &[2]), NO_VALUE);
        assert_eq!(one(r#"["long","null"]"#, &[0, 14]), v("7"));
    }

    #[test]
    fn bytes_that_are_not_the_writer_schema_are_unreadable() {
        let one = |ty: &str, payload: &[u8]| {
            read(&format!(r#"{{"name":"r","type":{ty}}}"#), "r", payload)
        };
        let e = r#"{"type":"enum","name":"R","symbols":["eu","us"]}"#;
        for (ty, payload) in [
            (r#""string""#, vec![]),
            (r#""string""#, string("eu")[..2].to_vec()),
            (r#""string""#, [zigzag(2), vec![0xff, 0xfe]].concat()),
            (r#""long""#, vec![0x80]),
            (r#""boolean""#, vec![2]),
            (e, zigzag(2)),
            (r#"["null","string"]"#, vec![4]),
        ] {
            assert_eq!(one(ty, &payload), UNREADABLE, "{ty} {payload:?}");
        }
        // Truncated before the route field: the skipped fields are read, not trusted.
        let fields = format!(r#"{SKIPPED},{{"name":"r","type":"string"}}"#);
        let all = [skipped_values(), string("eu")].concat();
        assert_eq!(read(&fields, "r", &all), v("eu"));
        for cut in [1, 4, 10, all.len() - 3] {
            assert_eq!(read(&fields, "r", &all[..cut]), UNREADABLE, "{cut}");
        }
    }

    #[test]
    fn a_field_that_cannot_route_is_refused_naming_it() {
        let w = writer(
            r#"{"name":"d","type":"double"},{"name":"a","type":{"type":"array","items":"string"}},{"name":"u","type":{"type":"string","logicalType":"uuid"}}"#,
        );
        assert_eq!(
            field_index(&w, "region").unwrap_err(),
            "\"region\" is not a top-level field of the Avro schema"
        );
        for (field, kind) in [("d", "double"), ("a", "array"), ("u", "uuid")] {
            let e = field_index(&w, field).unwrap_err();
            assert!(
                e.starts_with(&format!("\"{field}\" is an Avro {kind}:")),
                "{e}"
            );
        }
    }
}
