//! The route value of a Protobuf message (docs/routing.md "Fan-out by a field"): the message's
//! top-level fields are scanned with the decoder's own [`field_at`] (nested messages are not
//! entered) and the route field's last occurrence is read, as a Protobuf parser would.
//!
//! An absent field with explicit presence (proto3 `optional`, a oneof member, proto2) and an
//! absent wrapper have no route value; an absent proto3 plain (implicit-presence) scalar reads
//! as its default (`""`, `0`, `false`, the enum's value numbered 0), the value a Protobuf reader
//! sees and the row's column holds.

use super::{at, bad, expected_wire, field_at, int_value, read_varint, wrong_wire, DlqReason};
use crate::schema::protobuf::{FieldPlan, ProtoMessage, Scalar, Shape, ValuePlan};

/// The position of `field` among the top-level fields of `message`'s plan.
///
/// Errors: why `field` cannot route records of `message` (no such field, repeated, or not a
/// string, an integer, a bool, an enum or a wrapper of one of them).
pub(crate) fn field_index(message: &ProtoMessage, field: &str) -> Result<usize, String> {
    let Some(i) = message.root.fields.iter().position(|f| &*f.name == field) else {
        return Err(format!(
            "\"{field}\" is not a top-level field of message {}",
            message.name
        ));
    };
    let fp = &message.root.fields[i];
    let routable = |s: &Scalar| !matches!(s, Scalar::Float | Scalar::Double | Scalar::Bytes);
    let kind = match (&fp.shape, &fp.value) {
        (Shape::Single, ValuePlan::Scalar(s) | ValuePlan::Wrapper(s)) if routable(s) => {
            return Ok(i)
        }
        (Shape::Single, ValuePlan::Enum(_)) => return Ok(i),
        (Shape::List, _) => "repeated field".to_string(),
        (Shape::Map(_), _) => "map".to_string(),
        (_, ValuePlan::Scalar(s) | ValuePlan::Wrapper(s)) => format!("{s:?}").to_lowercase(),
        (_, ValuePlan::Message(_)) => "message".to_string(),
        (_, ValuePlan::Timestamp) => "google.protobuf.Timestamp".to_string(),
        (_, ValuePlan::Duration) => "google.protobuf.Duration".to_string(),
        (_, ValuePlan::Json(j)) => format!("google.protobuf.{j:?}"),
    };
    Err(format!(
        "\"{field}\" is a Protobuf {kind}: a route field is a string, an integer, a bool or an enum (or a wrapper of one of them)"
    ))
}

/// The route value of the message `payload` (its bytes after the wire framing), whose route
/// field is the plan's top-level field `index` ([`field_index`]): a string as is, an integer
/// as decimal text, a bool as `true`/`false`, an enum value as its name (a number the enum does
/// not declare as its decimal text); `None` when absent with explicit presence.
///
/// Errors: the bytes do not scan as a message, or the route field has another wire type.
pub(crate) fn route_value(
    message: &ProtoMessage,
    index: usize,
    buf: &[u8],
) -> Result<Option<String>, DlqReason> {
    let plan = &message.root;
    let fp = &plan.fields[index];
    let oneof = fp.oneof.map(|o| &plan.oneofs[o as usize]);
    let want = expected_wire(&fp.value);
    // The span of the field's last occurrence (the varint, the fixed bytes, a LEN payload); for
    // a wrapper, whether one occurred and its field 1's last.
    let (mut last, mut wrapped): (Option<(usize, usize)>, bool) = (None, false);
    let mut p = 0;
    while p < buf.len() {
        let (number, wire, s, e) = field_at(buf, &mut p, buf.len())?;
        if number != fp.number {
            // Another member of the route field's oneof clears it.
            let idx = plan.field_of(number);
            if idx.is_some_and(|i| oneof.is_some_and(|o| o.contains(&i))) {
                (last, wrapped) = (None, false);
            }
            continue;
        }
        if wire != want {
            return Err(wrong_wire(wire, want, &fp.name));
        }
        match &fp.value {
            ValuePlan::Wrapper(scalar) => {
                // Occurrences of an embedded message merge: field 1's last occurrence wins.
                wrapped = true;
                let mut q = s;
                while q < e {
                    let (n, w, vs, ve) = field_at(buf, &mut q, e)?;
                    if n == 1 {
                        if w != scalar.wire_type() {
                            return Err(wrong_wire(w, scalar.wire_type(), &fp.name));
                        }
                        last = Some((vs, ve));
                    }
                }
            }
            _ => last = Some((s, e)),
        }
    }
    let present = match &fp.value {
        ValuePlan::Wrapper(_) => wrapped,
        _ => last.is_some(),
    };
    if !present && (fp.presence || fp.required) {
        return Ok(None);
    }
    text(fp, last.map(|(s, e)| &buf[s..e])).map(Some)
}

/// The route text of the value `bytes` (`None`: the type's default).
fn text(fp: &FieldPlan, bytes: Option<&[u8]>) -> Result<String, DlqReason> {
    let scalar = match &fp.value {
        ValuePlan::Scalar(s) | ValuePlan::Wrapper(s) => *s,
        ValuePlan::Enum(names) => {
            let number = bytes.map_or(0, |b| read_varint(b) as i32);
            return Ok(match names.binary_search_by_key(&number, |(n, _)| *n) {
                Ok(i) => names[i].1.to_string(),
                Err(_) => number.to_string(),
            });
        }
        _ => unreachable!("field_index admits scalars, wrappers and enums"),
    };
    let bytes = bytes.unwrap_or_default();
    Ok(match scalar {
        Scalar::String => std::str::from_utf8(bytes)
            .map_err(|_| at(bad("invalid UTF-8 in a string"), &fp.name))?
            .to_string(),
        Scalar::Bool => (read_varint(bytes) != 0).to_string(),
        // An absent integer's empty bytes read as 0.
        s => int_value(s, bytes).to_string(),
    })
}

#[cfg(test)]
mod tests {
    use prost_reflect::{DescriptorPool, DynamicMessage, Value as PValue};

    use super::*;
    use crate::schema::protobuf::{MessageSelector, ProtoFile};
    use crate::schema::{Decoding, MappedSchema};

    const PROTO: &str = r#"
syntax = "proto3";
package t;
import "google/protobuf/wrappers.proto";
enum Region { UNKNOWN = 0; EU = 1; US = 2; }
message Inner { string region = 1; }
message Event {
  string first = 1; int64 id = 2; Inner inner = 3; repeated string tags = 4; string last = 15;
  int32 i32 = 5; uint64 u64 = 6; sint32 s32 = 7; sfixed64 sf64 = 8; bool flag = 9;
  Region region = 10; optional string maybe = 11; google.protobuf.StringValue wrapped = 12;
  oneof choice { string picked = 13; int32 other = 14; }
  double score = 16;
}
"#;

    fn files() -> Vec<ProtoFile> {
        vec![ProtoFile {
            name: "event.proto".into(),
            text: PROTO.into(),
        }]
    }

    fn plan() -> std::sync::Arc<ProtoMessage> {
        let mapped =
            MappedSchema::from_protobuf(&files(), &MessageSelector::Name("t.Event".into()), "")
                .unwrap();
        let Decoding::Protobuf(m) = mapped.decoding() else {
            panic!("a Protobuf plan")
        };
        m.clone()
    }

    /// The bytes prost-reflect's encoder writes for a `t.Event` with `fields` set.
    fn encode(fields: &[(&str, PValue)]) -> Vec<u8> {
        let mut compiler = protox::Compiler::with_file_resolver(Resolver);
        compiler.open_file("event.proto").unwrap();
        let pool: DescriptorPool = compiler.descriptor_pool();
        let desc = pool.get_message_by_name("t.Event").unwrap();
        let mut m = DynamicMessage::new(desc.clone());
        for (name, v) in fields {
            if *name == "inner" || *name == "wrapped" {
                let field = desc.get_field_by_name(name).unwrap();
                let prost_reflect::Kind::Message(inner) = field.kind() else {
                    panic!()
                };
                let key = if *name == "inner" { "region" } else { "value" };
                let mut sub = DynamicMessage::new(inner);
                sub.set_field_by_name(key, v.clone());
                m.set_field_by_name(name, PValue::Message(sub));
            } else {
                m.set_field_by_name(name, v.clone());
            }
        }
        prost::Message::encode_to_vec(&m)
    }

    struct Resolver;

    impl protox::file::FileResolver for Resolver {
        fn open_file(&self, name: &str) -> Result<protox::file::File, protox::Error> {
            if name == "event.proto" {
                protox::file::File::from_source(name, PROTO)
            } else {
                protox::file::GoogleFileResolver::new().open_file(name)
            }
        }
    }

    /// What the router sees: `Some(Some(value))`, `Some(None)` (no route value) or `None`
    /// (unreadable).
    type Read = Option<Option<String>>;
    const NO_VALUE: Read = Some(None);
    const UNREADABLE: Read = None;

    fn read(field: &str, payload: &[u8]) -> Read {
        let m = plan();
        let i = field_index(&m, field).unwrap();
        route_value(&m, i, payload).ok()
    }

    fn v(s: &str) -> Read {
        Some(Some(s.into()))
    }

    fn s(x: &str) -> PValue {
        PValue::String(x.into())
    }

    #[test]
    fn reads_the_route_field_first_middle_or_last_and_not_a_nested_one() {
        let all = encode(&[
            ("first", s("eu")),
            ("id", PValue::I64(5)),
            ("inner", s("ap")),
            ("tags", PValue::List(vec![s("a"), s("b")])),
            ("last", s("us")),
        ]);
        assert_eq!(read("first", &all), v("eu"));
        assert_eq!(read("id", &all), v("5"));
        assert_eq!(read("last", &all), v("us"));
        // The last occurrence wins, wherever it is (fields may come in any order).
        let twice = [
            encode(&[("last", s("us"))]),
            all.clone(),
            encode(&[("last", s("eu"))]),
        ]
        .concat();
        assert_eq!(read("last", &twice), v("eu"));
    }

    #[test]
    fn integers_bools_enums_wrappers_and_absent_fields_read_as_json_does() {
        let one = |field: &str, value: PValue| read(field, &encode(&[(field, value)]));
        assert_eq!(one("i32", PValue::I32(-7)), v("-7"));
        assert_eq!(one("u64", PValue::U64(u64::MAX)), v("18446744073709551615"));
        assert_eq!(one("s32", PValue::I32(-7)), v("-7"));
        assert_eq!(one("sf64", PValue::I64(7)), v("7"));
        assert_eq!(one("flag", PValue::Bool(true)), v("true"));
        assert_eq!(one("region", PValue::EnumNumber(2)), v("US"));
        assert_eq!(one("region", PValue::EnumNumber(9)), v("9"));
        assert_eq!(one("maybe", s("eu")), v("eu"));
        assert_eq!(one("wrapped", s("eu")), v("eu"));
        assert_eq!(one("wrapped", s("")), v(""));
        // Absent: implicit presence reads the default, explicit presence has no value.
        let empty = encode(&[("id", PValue::I64(5))]);
        assert_eq!(read("first", &empty), v(""));
        assert_eq!(read("i32", &empty), v("0"));
        assert_eq!(read("flag", &empty), v("false"));
        assert_eq!(read("region", &empty), v("UNKNOWN"));
        for explicit in ["maybe", "wrapped", "picked"] {
            assert_eq!(read(explicit, &empty), NO_VALUE, "{explicit}");
        }
        // A oneof's last member wins: another member after the route field clears it.
        let picked = encode(&[("picked", s("eu"))]);
        let other = encode(&[("other", PValue::I32(1))]);
        assert_eq!(
            read("picked", &[other.clone(), picked.clone()].concat()),
            v("eu")
        );
        assert_eq!(read("picked", &[picked, other].concat()), NO_VALUE);
    }

    #[test]
    fn bytes_that_do_not_scan_are_unreadable() {
        let all = encode(&[
            ("first", s("eu")),
            ("id", PValue::I64(5)),
            ("last", s("us")),
        ]);
        for cut in [1, 3, all.len() - 1] {
            assert_eq!(read("last", &all[..cut]), UNREADABLE, "{cut}");
        }
        // `first` (field 1) as a varint; invalid UTF-8; a group; field number 0.
        for bad in [
            vec![0x08, 0x01],
            vec![0x0a, 0x02, 0xff, 0xfe],
            vec![0x0b],
            vec![0x02, 0x00],
        ] {
            assert_eq!(read("first", &bad), UNREADABLE, "{bad:?}");
        }
    }

    #[test]
    fn a_field_that_cannot_route_is_refused_naming_it() {
        let m = plan();
        assert_eq!(
            field_index(&m, "zone").unwrap_err(),
            "\"zone\" is not a top-level field of message t.Event"
        );
        for (field, kind) in [
            ("tags", "repeated field"),
            ("inner", "message"),
            ("score", "double"),
        ] {
            let e = field_index(&m, field).unwrap_err();
            assert!(
                e.starts_with(&format!("\"{field}\" is a Protobuf {kind}:")),
                "{e}"
            );
        }
    }
}
