//! The decoder against prost-reflect's: bytes built by its encoder (and by hand, for what an
//! encoder never writes: shuffled, repeated, mixed packed fields, bad bytes) must give the row
//! prost-reflect's own parse of the same bytes gives.

use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::Float32Type;
use arrow_array::{Array, RecordBatch};
use arrow_schema::DataType;
use proptest::prelude::*;
use prost::Message as _;
use prost_reflect::{
    DynamicMessage, Kind, MapKey as PMapKey, MessageDescriptor, ReflectMessage as _,
    Value as PValue,
};
use serde_json::{Map, Value};

use crate::convert::render::value_to_json;
use crate::convert::{format_timestamptz, Converter};
use crate::model::DlqCode;
use crate::schema::protobuf::{MessageSelector, ProtoFile};
use crate::schema::{canonical_json, MappedSchema};

const EVENT: &str = r#"
syntax = "proto3";
package t;
import "google/protobuf/timestamp.proto";
import "google/protobuf/duration.proto";
import "google/protobuf/wrappers.proto";
import "google/protobuf/struct.proto";
import "google/protobuf/any.proto";
enum Color { RED = 0; GREEN = 1; BLUE = 2; }
message Inner { int32 a = 1; string b = 2; repeated int32 c = 3; Leaf leaf = 4; }
message Leaf { sint64 z = 1; bool y = 2; }
message Event {
  google.protobuf.Timestamp ts = 1;
  int32 i32 = 2; int64 i64 = 3; uint32 u32 = 4; uint64 u64 = 5; sint32 s32 = 6; sint64 s64 = 7;
  fixed32 f32 = 8; fixed64 f64 = 9; sfixed32 sf32 = 10; sfixed64 sf64 = 11;
  float fl = 12; double db = 13; bool bo = 14; string st = 15; bytes by = 16;
  Color color = 17; Inner inner = 18; repeated int64 nums = 19; repeated Inner inners = 20;
  map<string, int32> counts = 21; map<int64, Inner> by_id = 22;
  oneof choice { string name = 23; Inner detail = 24; }
  optional int32 maybe = 25;
  google.protobuf.Duration dur = 26; google.protobuf.Int64Value w64 = 27;
  google.protobuf.StringValue wstr = 28; google.protobuf.Struct meta = 29;
  google.protobuf.Value val = 30; google.protobuf.Any any = 31; repeated string tags = 32;
  repeated Color colors = 33; google.protobuf.UInt32Value wu32 = 34;
  repeated sfixed32 fixeds = 35; repeated uint32 unpacked = 36 [packed = false];
  map<bool, google.protobuf.Timestamp> flags = 37;
}
"#;

struct Fixture {
    desc: MessageDescriptor,
    conv: Converter,
}

fn fixture() -> Fixture {
    let files = vec![ProtoFile {
        name: "event.proto".into(),
        text: EVENT.into(),
    }];
    let schema =
        MappedSchema::from_protobuf(&files, &MessageSelector::Name("t.Event".into()), "ts")
            .unwrap();
    let pool = protox::Compiler::with_file_resolver(MemFile)
        .open_file("event.proto")
        .unwrap()
        .descriptor_pool();
    let desc = pool.get_message_by_name("t.Event").unwrap();
    let arrow = schema.arrow_schema();
    let conv = Converter::try_new(Arc::new(schema), arrow).unwrap();
    Fixture { desc, conv }
}

struct MemFile;

impl protox::file::FileResolver for MemFile {
    fn open_file(&self, name: &str) -> Result<protox::file::File, protox::Error> {
        if name == "event.proto" {
            protox::file::File::from_source(name, EVENT)
        } else {
            protox::file::GoogleFileResolver::new().open_file(name)
        }
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn render(batch: &RecordBatch) -> Map<String, Value> {
    let mut m = Map::new();
    for (f, col) in batch.schema().fields().iter().zip(batch.columns()) {
        let v = if *f.data_type() == DataType::Float32 {
            let a = col.as_primitive::<Float32Type>();
            if a.is_null(0) {
                Value::Null
            } else {
                num(f64::from(a.value(0)))
            }
        } else {
            value_to_json(col.as_ref(), 0)
        };
        m.insert(f.name().clone(), v);
    }
    m
}

fn num(x: f64) -> Value {
    serde_json::Number::from_f64(x).map_or(Value::Null, Value::Number)
}

/// The row floe must produce for `m`, per docs/schema-mapping.md "Protobuf → Iceberg".
fn expect_msg(m: &DynamicMessage) -> Map<String, Value> {
    let mut out = Map::new();
    for fd in m.descriptor().fields() {
        let v = m.get_field(&fd);
        let j = if fd.is_list() {
            let PValue::List(items) = &*v else { panic!() };
            Value::Array(items.iter().map(|x| expect_single(&fd.kind(), x)).collect())
        } else if fd.is_map() {
            let PValue::Map(entries) = &*v else { panic!() };
            let Kind::Message(entry) = fd.kind() else {
                panic!()
            };
            let vk = entry.map_entry_value_field().kind();
            let mut o = Map::new();
            for (k, x) in entries {
                let key = match k {
                    PMapKey::Bool(b) => b.to_string(),
                    PMapKey::I32(i) => i.to_string(),
                    PMapKey::I64(i) => i.to_string(),
                    PMapKey::U32(i) => i.to_string(),
                    PMapKey::U64(i) => i.to_string(),
                    PMapKey::String(s) => s.clone(),
                };
                o.insert(key, expect_single(&vk, x));
            }
            Value::Object(o)
        } else if fd.supports_presence() && !m.has_field(&fd) {
            Value::Null
        } else {
            expect_single(&fd.kind(), &v)
        };
        out.insert(fd.name().to_string(), j);
    }
    out
}

fn seconds_nanos_us(m: &DynamicMessage) -> i64 {
    let s = m.get_field_by_name("seconds").unwrap().as_i64().unwrap();
    let n = m.get_field_by_name("nanos").unwrap().as_i32().unwrap();
    s * 1_000_000 + i64::from(n / 1000)
}

fn json_of_value(m: &DynamicMessage) -> Value {
    let Some(o) = m.descriptor().oneofs().next() else {
        panic!()
    };
    let Some(fd) = o.fields().find(|f| m.has_field(f)) else {
        return Value::Null;
    };
    match &*m.get_field(&fd) {
        PValue::EnumNumber(_) => Value::Null,
        PValue::F64(x) => num(*x),
        PValue::String(s) => Value::String(s.clone()),
        PValue::Bool(b) => Value::Bool(*b),
        PValue::Message(s) if fd.name() == "struct_value" => json_of_struct(s),
        PValue::Message(l) => json_of_list(l),
        other => panic!("{other:?}"),
    }
}

fn json_of_struct(m: &DynamicMessage) -> Value {
    let PValue::Map(fields) = &*m.get_field_by_name("fields").unwrap() else {
        panic!()
    };
    let mut o = Map::new();
    for (k, v) in fields {
        let (PMapKey::String(k), PValue::Message(v)) = (k, v) else {
            panic!()
        };
        o.insert(k.clone(), json_of_value(v));
    }
    Value::Object(o)
}

fn json_of_list(m: &DynamicMessage) -> Value {
    let PValue::List(items) = &*m.get_field_by_name("values").unwrap() else {
        panic!()
    };
    Value::Array(
        items
            .iter()
            .map(|v| match v {
                PValue::Message(v) => json_of_value(v),
                _ => panic!(),
            })
            .collect(),
    )
}

fn expect_single(kind: &Kind, v: &PValue) -> Value {
    match (kind, v) {
        (Kind::Message(md), PValue::Message(m)) => match md.full_name() {
            "google.protobuf.Timestamp" => Value::String(format_timestamptz(seconds_nanos_us(m))),
            "google.protobuf.Duration" => Value::from(seconds_nanos_us(m)),
            "google.protobuf.Struct" => Value::String(canonical_json(&json_of_struct(m))),
            "google.protobuf.Value" => Value::String(canonical_json(&json_of_value(m))),
            "google.protobuf.ListValue" => Value::String(canonical_json(&json_of_list(m))),
            "google.protobuf.Any" => {
                use base64::Engine as _;
                let url = m.get_field_by_name("type_url").unwrap();
                let val = m.get_field_by_name("value").unwrap();
                let j = serde_json::json!({
                    "@type": url.as_str().unwrap(),
                    "value": base64::engine::general_purpose::STANDARD.encode(val.as_bytes().unwrap()),
                });
                Value::String(canonical_json(&j))
            }
            n if n.starts_with("google.protobuf.") && n.ends_with("Value") => {
                let fd = md.get_field_by_name("value").unwrap();
                expect_single(&fd.kind(), &m.get_field(&fd))
            }
            _ => Value::Object(expect_msg(m)),
        },
        (Kind::Enum(ed), PValue::EnumNumber(n)) => Value::String(
            ed.get_value(*n)
                .map_or(n.to_string(), |v| v.name().to_string()),
        ),
        (_, PValue::I32(x)) => Value::from(*x),
        (_, PValue::I64(x)) => Value::from(*x),
        (_, PValue::U32(x)) => Value::from(*x),
        (_, PValue::U64(x)) => Value::from(*x),
        (_, PValue::F32(x)) => num(f64::from(*x)),
        (_, PValue::F64(x)) => num(*x),
        (_, PValue::Bool(x)) => Value::Bool(*x),
        (_, PValue::String(x)) => Value::String(x.clone()),
        (_, PValue::Bytes(x)) => Value::String(hex(x)),
        other => panic!("unexpected {other:?}"),
    }
}

impl Fixture {
    /// Converts `bytes` and checks the row against prost-reflect's parse of the same bytes.
    fn check(&mut self, bytes: &[u8]) -> Map<String, Value> {
        let parsed =
            DynamicMessage::decode(self.desc.clone(), bytes).expect("prost-reflect parses");
        self.conv.push(bytes).unwrap_or_else(|e| panic!("{e}"));
        let got = render(&self.conv.finish());
        assert_eq!(
            Value::Object(got.clone()),
            Value::Object(expect_msg(&parsed))
        );
        got
    }

    fn refuse(&mut self, bytes: &[u8]) -> (DlqCode, String) {
        let r = self.conv.push(bytes).expect_err("record refused");
        assert_eq!(self.conv.num_rows(), 0);
        (r.code, r.field)
    }

    fn msg(&self, name: &str) -> DynamicMessage {
        let md = self.desc.parent_pool().get_message_by_name(name).unwrap();
        DynamicMessage::new(md)
    }

    fn ts(&self, seconds: i64, nanos: i32) -> PValue {
        let mut t = self.msg("google.protobuf.Timestamp");
        t.set_field_by_name("seconds", PValue::I64(seconds));
        t.set_field_by_name("nanos", PValue::I32(nanos));
        PValue::Message(t)
    }
}

fn tag(number: u32, wire: u8) -> Vec<u8> {
    vint(u64::from(number) << 3 | u64::from(wire))
}

fn vint(mut v: u64) -> Vec<u8> {
    let mut out = Vec::new();
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
    out
}

fn len_field(number: u32, payload: &[u8]) -> Vec<u8> {
    let mut out = tag(number, 2);
    out.extend(vint(payload.len() as u64));
    out.extend_from_slice(payload);
    out
}

/// `ts` = 2026-01-02T03:04:05.000006Z as field 1.
fn ts_field() -> Vec<u8> {
    let mut t = tag(1, 0);
    t.extend(vint(1_767_323_045));
    t.extend(tag(2, 0));
    t.extend(vint(6_000));
    len_field(1, &t)
}

fn full_event(f: &Fixture) -> DynamicMessage {
    let mut m = f.msg("t.Event");
    let mut leaf = f.msg("t.Leaf");
    leaf.set_field_by_name("z", PValue::I64(-5));
    leaf.set_field_by_name("y", PValue::Bool(true));
    let mut inner = f.msg("t.Inner");
    inner.set_field_by_name("a", PValue::I32(-7));
    inner.set_field_by_name("b", PValue::String("ü".into()));
    inner.set_field_by_name("c", PValue::List(vec![PValue::I32(1), PValue::I32(-2)]));
    inner.set_field_by_name("leaf", PValue::Message(leaf));
    m.set_field_by_name("ts", f.ts(-1, 500_000_000));
    for (name, v) in [
        ("i32", PValue::I32(i32::MIN)),
        ("i64", PValue::I64(i64::MIN)),
        ("u32", PValue::U32(u32::MAX)),
        ("u64", PValue::U64(i64::MAX as u64)),
        ("s32", PValue::I32(-3)),
        ("s64", PValue::I64(-4_000_000_000)),
        ("f32", PValue::U32(7)),
        ("f64", PValue::U64(8)),
        ("sf32", PValue::I32(-9)),
        ("sf64", PValue::I64(-10)),
        ("fl", PValue::F32(1.5)),
        ("db", PValue::F64(-2.25e300)),
        ("bo", PValue::Bool(true)),
        ("st", PValue::String("héllo".into())),
        ("by", PValue::Bytes(vec![0, 255, 7].into())),
        ("color", PValue::EnumNumber(2)),
        ("inner", PValue::Message(inner.clone())),
        (
            "nums",
            PValue::List(vec![PValue::I64(1), PValue::I64(-1), PValue::I64(1 << 40)]),
        ),
        (
            "inners",
            PValue::List(vec![
                PValue::Message(inner.clone()),
                PValue::Message(f.msg("t.Inner")),
            ]),
        ),
        ("detail", PValue::Message(inner.clone())),
        ("maybe", PValue::I32(0)),
        (
            "tags",
            PValue::List(vec![PValue::String("a".into()), PValue::String("".into())]),
        ),
        (
            "colors",
            PValue::List(vec![PValue::EnumNumber(1), PValue::EnumNumber(9)]),
        ),
        (
            "fixeds",
            PValue::List(vec![PValue::I32(-1), PValue::I32(2)]),
        ),
        (
            "unpacked",
            PValue::List(vec![PValue::U32(3), PValue::U32(4)]),
        ),
    ] {
        m.set_field_by_name(name, v);
    }
    let mut counts = std::collections::HashMap::new();
    counts.insert(PMapKey::String("x".into()), PValue::I32(1));
    counts.insert(PMapKey::String("y/~".into()), PValue::I32(-1));
    m.set_field_by_name("counts", PValue::Map(counts));
    let mut by_id = std::collections::HashMap::new();
    by_id.insert(PMapKey::I64(-3), PValue::Message(inner));
    m.set_field_by_name("by_id", PValue::Map(by_id));
    let mut flags = std::collections::HashMap::new();
    flags.insert(PMapKey::Bool(true), f.ts(0, 1000));
    m.set_field_by_name("flags", PValue::Map(flags));
    let mut dur = f.msg("google.protobuf.Duration");
    dur.set_field_by_name("seconds", PValue::I64(-3));
    dur.set_field_by_name("nanos", PValue::I32(-500_000_000));
    m.set_field_by_name("dur", PValue::Message(dur));
    let mut w = f.msg("google.protobuf.Int64Value");
    w.set_field_by_name("value", PValue::I64(42));
    m.set_field_by_name("w64", PValue::Message(w));
    // A present wrapper holding the default: 0, not null.
    m.set_field_by_name(
        "wu32",
        PValue::Message(f.msg("google.protobuf.UInt32Value")),
    );
    let mut inner_val = f.msg("google.protobuf.Value");
    inner_val.set_field_by_name("number_value", PValue::F64(1.0));
    let mut list = f.msg("google.protobuf.ListValue");
    list.set_field_by_name(
        "values",
        PValue::List(vec![PValue::Message(inner_val.clone())]),
    );
    let mut lv = f.msg("google.protobuf.Value");
    lv.set_field_by_name("list_value", PValue::Message(list));
    let mut st = f.msg("google.protobuf.Struct");
    let mut fields = std::collections::HashMap::new();
    fields.insert(PMapKey::String("b".into()), PValue::Message(lv));
    fields.insert(
        PMapKey::String("a".into()),
        PValue::Message(inner_val.clone()),
    );
    st.set_field_by_name("fields", PValue::Map(fields));
    m.set_field_by_name("meta", PValue::Message(st));
    let mut sv = f.msg("google.protobuf.Value");
    sv.set_field_by_name("string_value", PValue::String("s".into()));
    m.set_field_by_name("val", PValue::Message(sv));
    let mut any = f.msg("google.protobuf.Any");
    any.set_field_by_name(
        "type_url",
        PValue::String("type.googleapis.com/t.Leaf".into()),
    );
    any.set_field_by_name("value", PValue::Bytes(vec![8, 1].into()));
    m.set_field_by_name("any", PValue::Message(any));
    m
}

#[test]
fn every_type_decodes_as_prost_reflect_reads_it() {
    let mut f = fixture();
    let m = full_event(&f);
    let row = f.check(&m.encode_to_vec());
    assert_eq!(row["ts"], "1969-12-31T23:59:59.500000+00:00");
    assert_eq!(row["color"], "BLUE");
    assert_eq!(row["colors"], serde_json::json!(["GREEN", "9"]));
    assert_eq!(row["dur"], -3_500_000);
    assert_eq!(row["wu32"], 0);
    assert_eq!(row["wstr"], Value::Null);
    assert_eq!(row["name"], Value::Null);
    assert_eq!(row["maybe"], 0);
    assert_eq!(row["meta"], r#"{"a":1,"b":[1]}"#);
    assert_eq!(
        row["any"],
        r#"{"@type":"type.googleapis.com/t.Leaf","value":"CAE="}"#
    );
    assert_eq!(row["by_id"]["-3"]["leaf"]["z"], -5);
    assert_eq!(row["flags"]["true"], "1970-01-01T00:00:00.000001+00:00");
}

#[test]
fn absent_implicit_scalars_take_defaults_and_absent_messages_are_null() {
    let mut f = fixture();
    let mut m = f.msg("t.Event");
    m.set_field_by_name("ts", f.ts(0, 0));
    let row = f.check(&m.encode_to_vec());
    assert_eq!(row["i32"], 0);
    assert_eq!(row["st"], "");
    assert_eq!(row["color"], "RED");
    assert_eq!(row["inner"], Value::Null);
    assert_eq!(row["nums"], serde_json::json!([]));
    assert_eq!(row["maybe"], Value::Null);
}

#[test]
fn fields_in_any_order_repeated_merged_and_unknown_decode_as_protobuf_parses_them() {
    let mut f = fixture();
    let m = full_event(&f);
    // Each field encoded on its own, concatenated in reverse: a valid encoding of the same message.
    let mut pieces = Vec::new();
    for fd in m.descriptor().fields() {
        if m.has_field(&fd) {
            let mut one = f.msg("t.Event");
            one.set_field(&fd, m.get_field(&fd).into_owned());
            pieces.push(one.encode_to_vec());
        }
    }
    pieces.reverse();
    let reversed = pieces.concat();
    let row = f.check(&reversed);
    assert_eq!(row["color"], "BLUE");
    // Scalars repeated: the last wins; embedded messages merge; a unknown field is skipped.
    let mut bytes = ts_field();
    bytes.extend(tag(2, 0));
    bytes.extend(vint(1));
    bytes.extend(len_field(99, b"unknown"));
    bytes.extend(tag(2, 0));
    bytes.extend(vint(2));
    let mut a = tag(1, 0);
    a.extend(vint(5));
    bytes.extend(len_field(18, &a));
    bytes.extend(tag(7777, 5));
    bytes.extend([1, 2, 3, 4]);
    bytes.extend(len_field(18, &len_field(2, b"merged")));
    let row = f.check(&bytes);
    assert_eq!(row["i32"], 2);
    assert_eq!(row["inner"]["a"], 5);
    assert_eq!(row["inner"]["b"], "merged");
    // Packed and unpacked occurrences of one repeated field, mixed.
    let mut bytes = ts_field();
    bytes.extend(tag(19, 0));
    bytes.extend(vint(3));
    bytes.extend(len_field(19, &[vint(4), vint(5)].concat()));
    bytes.extend(tag(36, 0));
    bytes.extend(vint(6));
    bytes.extend(len_field(36, &[vint(7), vint(8)].concat()));
    bytes.extend(tag(19, 0));
    bytes.extend(vint(6));
    let row = f.check(&bytes);
    assert_eq!(row["nums"], serde_json::json!([3, 4, 5, 6]));
    assert_eq!(row["unpacked"], serde_json::json!([6, 7, 8]));
}

#[test]
fn a_oneof_keeps_its_last_member_and_a_map_its_last_entry_per_key() {
    let mut f = fixture();
    let mut bytes = ts_field();
    let mut a = tag(1, 0);
    a.extend(vint(5));
    bytes.extend(len_field(24, &a));
    bytes.extend(len_field(23, b"n"));
    let row = f.check(&bytes);
    assert_eq!(
        (row["name"].clone(), row["detail"].clone()),
        ("n".into(), Value::Null)
    );
    // detail, name, detail again: only the last detail (not merged with the first).
    bytes.extend(len_field(24, &len_field(2, b"b")));
    let row = f.check(&bytes);
    assert_eq!(row["name"], Value::Null);
    assert_eq!(row["detail"]["a"], 0);
    assert_eq!(row["detail"]["b"], "b");
    let entry = |k: &[u8], v: u64| {
        let mut e = len_field(1, k);
        e.extend(tag(2, 0));
        e.extend(vint(v));
        len_field(21, &e)
    };
    let mut bytes = ts_field();
    bytes.extend(entry(b"k", 1));
    bytes.extend(entry(b"j", 2));
    bytes.extend(entry(b"k", 3));
    bytes.extend(len_field(21, &[])); // key "" value 0
    let row = f.check(&bytes);
    assert_eq!(row["counts"], serde_json::json!({"k": 3, "j": 2, "": 0}));
}

#[test]
fn bad_bytes_go_to_the_dlq_with_the_field_path() {
    let mut f = fixture();
    let deser = DlqCode::DeserializationError;
    let with = |extra: Vec<u8>| [ts_field(), extra].concat();
    // Truncated string.
    let mut b = tag(15, 2);
    b.extend([10, b'a']);
    assert_eq!(f.refuse(&with(b)).0, deser);
    // A varint of 11 bytes.
    let mut b = tag(2, 0);
    b.extend([0xff; 10]);
    b.push(1);
    assert_eq!(f.refuse(&with(b)).0, deser);
    // Wrong wire type for an int32.
    assert_eq!(
        f.refuse(&with(len_field(2, &[]))),
        (deser, "/i32".to_string())
    );
    // A group, even of an unknown field.
    assert_eq!(f.refuse(&with(tag(40, 3))).0, deser);
    // Bad UTF-8, at top level and nested.
    assert_eq!(
        f.refuse(&with(len_field(15, &[0xff]))),
        (deser, "/st".to_string())
    );
    let nested = len_field(20, &len_field(2, &[0xc3]));
    assert_eq!(f.refuse(&with(nested)), (deser, "/inners/0/b".to_string()));
    // Packed fixed values that do not fill the field.
    assert_eq!(f.refuse(&with(len_field(35, &[1, 2, 3]))).0, deser);
    // Field number 0.
    assert_eq!(f.refuse(&with(vec![0, 0])).0, deser);
    // Nothing was appended by any of them; a good record still converts.
    f.check(&ts_field());
}

#[test]
fn values_outside_their_rules_are_value_out_of_range() {
    let mut f = fixture();
    let out = DlqCode::ValueOutOfRange;
    let ts = |s: i64, n: i64| {
        let mut t = tag(1, 0);
        t.extend(vint(s as u64));
        t.extend(tag(2, 0));
        t.extend(vint(n as u64));
        t
    };
    for (s, n) in [
        (253_402_300_800, 0),
        (-62_135_596_801, 0),
        (0, 1_000_000_000),
        (0, -1),
    ] {
        assert_eq!(
            f.refuse(&len_field(1, &ts(s, n))),
            (out, "/ts".to_string()),
            "{s} {n}"
        );
    }
    // The edges themselves are accepted.
    f.check(&len_field(1, &ts(253_402_300_799, 999_999_999)));
    f.check(&len_field(1, &ts(-62_135_596_800, 0)));
    let with = |extra: Vec<u8>| [ts_field(), extra].concat();
    assert_eq!(
        f.refuse(&with(len_field(26, &ts(1, -1)))),
        (out, "/dur".to_string())
    );
    let mut b = tag(5, 0);
    b.extend(vint(1 << 63));
    assert_eq!(f.refuse(&with(b)), (out, "/u64".to_string()));
    let nan = [tag(2, 1), f64::NAN.to_le_bytes().to_vec()].concat();
    assert_eq!(f.refuse(&with(len_field(30, &nan))).0, out);
    // No Timestamp: no partition.
    assert_eq!(f.refuse(&[]).0, DlqCode::MissingPartitionValue);
}

/// Without a partition field (a spec without a time transform, docs/partitioning.md) a message
/// without its Timestamp is a row like any other.
#[test]
fn without_a_partition_field_a_message_needs_no_timestamp() {
    let files = vec![ProtoFile {
        name: "event.proto".into(),
        text: EVENT.into(),
    }];
    let schema =
        MappedSchema::from_protobuf(&files, &MessageSelector::Name("t.Event".into()), "").unwrap();
    assert_eq!(schema.partition_field(), "");
    let arrow = schema.arrow_schema();
    let mut conv = Converter::try_new(Arc::new(schema), arrow).unwrap();
    assert!(conv.push(&[]).is_ok());
    assert_eq!(conv.num_rows(), 1);
}

#[test]
fn proto2_required_fields_must_be_present() {
    let files = vec![ProtoFile {
        name: "p2.proto".into(),
        text: "syntax = \"proto2\"; import \"google/protobuf/timestamp.proto\";
               message E { required google.protobuf.Timestamp ts = 1; required int32 a = 2;
               optional int32 b = 3; }"
            .into(),
    }];
    let s = MappedSchema::from_protobuf(&files, &MessageSelector::Indexes(vec![0]), "ts").unwrap();
    let arrow = s.arrow_schema();
    let mut conv = Converter::try_new(Arc::new(s), arrow).unwrap();
    let r = conv.push(&ts_field()).unwrap_err();
    assert_eq!(
        (r.code, r.field.as_str()),
        (DlqCode::MissingRequiredField, "/a")
    );
    let mut ok = ts_field();
    ok.extend(tag(2, 0));
    ok.extend(vint(4));
    conv.push(&ok).unwrap();
    let row = render(&conv.finish());
    assert_eq!(
        (row["a"].clone(), row["b"].clone()),
        (Value::from(4), Value::Null)
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    #[test]
    fn random_messages_decode_to_what_prost_reflect_reads(
        ints in (any::<i32>(), any::<i64>(), any::<u32>(), 0..=i64::MAX as u64, any::<i32>(), any::<i64>()),
        fixeds in (any::<u32>(), 0..=i64::MAX as u64, any::<i32>(), any::<i64>(), any::<f32>(), any::<f64>()),
        text in (any::<bool>(), ".{0,8}", proptest::collection::vec(any::<u8>(), 0..8), 0..5i32),
        lists in (proptest::collection::vec(any::<i64>(), 0..5), proptest::collection::vec(".{0,3}", 0..4)),
        map in proptest::collection::hash_map(".{0,3}", any::<i32>(), 0..4),
        inner in proptest::option::of((any::<i32>(), ".{0,4}", proptest::collection::vec(any::<i32>(), 0..3))),
        secs in -62_135_596_800i64..=253_402_300_799,
        nanos in 0..=999_999_999i32,
        unset in proptest::collection::vec(any::<bool>(), 20),
        shuffle in any::<u64>(),
    ) {
        let mut f = fixture();
        let mut m = f.msg("t.Event");
        m.set_field_by_name("ts", f.ts(secs, nanos));
        let values = [
            ("i32", PValue::I32(ints.0)), ("i64", PValue::I64(ints.1)), ("u32", PValue::U32(ints.2)),
            ("u64", PValue::U64(ints.3)), ("s32", PValue::I32(ints.4)), ("s64", PValue::I64(ints.5)),
            ("f32", PValue::U32(fixeds.0)), ("f64", PValue::U64(fixeds.1)), ("sf32", PValue::I32(fixeds.2)),
            ("sf64", PValue::I64(fixeds.3)), ("fl", PValue::F32(fixeds.4)), ("db", PValue::F64(fixeds.5)),
            ("bo", PValue::Bool(text.0)), ("st", PValue::String(text.1.clone())),
            ("by", PValue::Bytes(text.2.clone().into())), ("color", PValue::EnumNumber(text.3)),
            ("nums", PValue::List(lists.0.iter().map(|&x| PValue::I64(x)).collect())),
            ("tags", PValue::List(lists.1.iter().map(|x| PValue::String(x.clone())).collect())),
            ("counts", PValue::Map(map.iter().map(|(k, v)| (PMapKey::String(k.clone()), PValue::I32(*v))).collect())),
            ("maybe", PValue::I32(ints.0)),
        ];
        for ((name, v), skip) in values.into_iter().zip(&unset) {
            if !skip {
                m.set_field_by_name(name, v);
            }
        }
        if let Some((a, b, c)) = inner {
            let mut i = f.msg("t.Inner");
            i.set_field_by_name("a", PValue::I32(a));
            i.set_field_by_name("b", PValue::String(b));
            i.set_field_by_name("c", PValue::List(c.into_iter().map(PValue::I32).collect()));
            m.set_field_by_name(if a % 2 == 0 { "inner" } else { "detail" }, PValue::Message(i));
        }
        let mut pieces: Vec<Vec<u8>> = m.descriptor().fields().filter(|fd| m.has_field(fd)).map(|fd| {
            let mut one = f.msg("t.Event");
            one.set_field(&fd, m.get_field(&fd).into_owned());
            one.encode_to_vec()
        }).collect();
        let n = pieces.len();
        for i in 0..n {
            pieces.swap(i, (shuffle.rotate_left(i as u32) as usize) % n);
        }
        f.check(&pieces.concat());
        f.check(&m.encode_to_vec());
    }
}

#[test]
fn an_older_message_version_fills_an_evolved_table_with_nulls_for_new_fields() {
    let v = |extra: &str| {
        let files = vec![ProtoFile {
            name: "e.proto".into(),
            text: format!(
                "syntax = \"proto3\"; import \"google/protobuf/timestamp.proto\";
                 message In {{ int32 x = 1; {extra} }}
                 message E {{ google.protobuf.Timestamp ts = 1; int32 n = 2; In in = 3; }}"
            ),
        }];
        MappedSchema::from_protobuf(&files, &MessageSelector::Name("E".into()), "ts").unwrap()
    };
    let (v1, v2) = (v(""), v("optional string added = 2;"));
    let mut conv = Converter::for_evolved_table(Arc::new(v1), v2.arrow_schema()).unwrap();
    let mut b = ts_field();
    b.extend(len_field(3, &[tag(1, 0), vint(9)].concat()));
    conv.push(&b).unwrap();
    let row = render(&conv.finish());
    assert_eq!(row["in"], serde_json::json!({"x": 9, "added": null}));
    assert_eq!(row["n"], 0);
}

/// The schema as the local registry prints the smoke test's `floe/event.proto` (fully qualified
/// type names with a leading dot), and the payload confluent-kafka's `ProtobufSerializer` sends
/// for its `Event` after the framing: `msg.SerializeToString()` of Python's upb runtime
/// (protobuf 7.36.2), which deploy/local/schema_registry_smoke.py checks equals that payload.
#[test]
fn bytes_of_pythons_upb_encoder_with_the_registrys_proto_text_decode() {
    let files = vec![
        ProtoFile {
            name: "floe/event.proto".into(),
            text: r#"syntax = "proto3";
package floe.test;

import "floe/common.proto";
import "google/protobuf/timestamp.proto";

option go_package = "example.com/floe/test";

message Envelope {
  string note = 1;
}

message Event {
  string id = 1;
  .google.protobuf.Timestamp ts = 2;
  map<string, int64> counts = 3;
  oneof payload {
    string text = 4;
    .floe.common.Address address = 5;
  }
  .floe.test.Event.Inner inner = 6;
  .floe.common.Level level = 7;
  optional string comment = 8;
  repeated double readings = 9;
  message Inner {
    int32 n = 1;
    repeated string tags = 2;
  }
}
"#
            .into(),
        },
        ProtoFile {
            name: "floe/common.proto".into(),
            text: "syntax = \"proto3\";\npackage floe.common;\n\
                   message Address {\n  string city = 1;\n  string zip = 2;\n}\n\
                   enum Level {\n  LEVEL_UNSPECIFIED = 0;\n  LEVEL_INFO = 1;\n  LEVEL_ERROR = 2;\n}\n"
                .into(),
        },
    ];
    // Message indexes [1]: Event, the file's second message.
    let s = MappedSchema::from_protobuf(&files, &MessageSelector::Indexes(vec![1]), "ts").unwrap();
    let arrow = s.arrow_schema();
    let mut conv = Converter::try_new(Arc::new(s), arrow).unwrap();
    let hex_payload = "0a027031121108feffffffffffffffff011080cab5ee011a0e0a016210feffffffffffffffff011a050a016110012a0c0a044f736c6f12043031353032050807120174380242004a10000000000000e03f000000000000f4bf";
    let payload: Vec<u8> = (0..hex_payload.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex_payload[i..i + 2], 16).unwrap())
        .collect();
    let hour = conv.push(&payload).unwrap();
    assert_eq!(hour, -1);
    let row = render(&conv.finish());
    assert_eq!(
        Value::Object(row),
        serde_json::json!({
            "id": "p1",
            "ts": "1969-12-31T23:59:58.500000+00:00",
            "counts": {"a": 1, "b": -2},
            "text": null,
            "address": {"city": "Oslo", "zip": "0150"},
            "inner": {"n": 7, "tags": ["t"]},
            "level": "LEVEL_ERROR",
            "comment": "",
            "readings": [0.5, -1.25],
        })
    );
}
