use super::*;
use iceberg::spec::{NestedFieldRef, PrimitiveType, Type};

const WKT_IMPORTS: &str = r#"
import "google/protobuf/timestamp.proto";
import "google/protobuf/duration.proto";
import "google/protobuf/wrappers.proto";
import "google/protobuf/struct.proto";
import "google/protobuf/any.proto";
"#;

fn proto3(body: &str) -> Vec<ProtoFile> {
    vec![ProtoFile {
        name: "event.proto".to_string(),
        text: format!("syntax = \"proto3\";\npackage t;\n{WKT_IMPORTS}\n{body}"),
    }]
}

fn map_first(body: &str) -> Result<MappedSchema, SchemaError> {
    MappedSchema::from_protobuf(&proto3(body), &MessageSelector::Name("t.E".into()), "ts")
}

fn field(s: &MappedSchema, name: &str) -> NestedFieldRef {
    s.iceberg_schema()
        .as_struct()
        .field_by_name(name)
        .unwrap_or_else(|| panic!("no field {name}"))
        .clone()
}

fn prim(s: &MappedSchema, name: &str) -> (PrimitiveType, bool) {
    let f = field(s, name);
    match &*f.field_type {
        Type::Primitive(p) => (p.clone(), f.required),
        other => panic!("{name} is {other:?}"),
    }
}

fn refusal(r: Result<MappedSchema, SchemaError>) -> String {
    match r {
        Ok(_) => panic!("mapped, expected a refusal"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn scalars_map_to_their_iceberg_types_and_implicit_presence_is_required() {
    let s = map_first(
        "message E { google.protobuf.Timestamp ts = 1; int32 a = 2; sint32 b = 3; sfixed32 c = 4;
         int64 d = 5; sint64 e = 6; sfixed64 f = 7; uint32 g = 8; fixed32 h = 9; uint64 i = 10;
         fixed64 j = 11; float k = 12; double l = 13; bool m = 14; string n = 15; bytes o = 16;
         enum Color { RED = 0; } Color p = 17; }",
    )
    .unwrap();
    use PrimitiveType as P;
    let want = [
        ("a", P::Int),
        ("b", P::Int),
        ("c", P::Int),
        ("d", P::Long),
        ("e", P::Long),
        ("f", P::Long),
        ("g", P::Long),
        ("h", P::Long),
        ("i", P::Long),
        ("j", P::Long),
        ("k", P::Float),
        ("l", P::Double),
        ("m", P::Boolean),
        ("n", P::String),
        ("o", P::Binary),
        ("p", P::String),
    ];
    for (name, ty) in want {
        assert_eq!(prim(&s, name), (ty, true), "{name}");
    }
    assert_eq!(prim(&s, "ts"), (P::Timestamptz, true));
    assert!(matches!(s.decoding(), Decoding::Protobuf(m) if m.name == "t.E"));
}

#[test]
fn explicit_presence_fields_are_optional() {
    let s = map_first(
        "message In { int32 x = 1; }
         message E { google.protobuf.Timestamp ts = 1; optional int32 a = 2; In b = 3;
         oneof choice { string c = 4; In d = 5; } google.protobuf.Timestamp e = 6; }",
    )
    .unwrap();
    for name in ["a", "b", "c", "d", "e"] {
        assert!(!field(&s, name).required, "{name} must be optional");
    }
    let p2 = vec![ProtoFile {
        name: "p2.proto".into(),
        text: "syntax = \"proto2\"; import \"google/protobuf/timestamp.proto\";
               message E { required google.protobuf.Timestamp ts = 1; required int32 a = 2;
               optional int32 b = 3; }"
            .into(),
    }];
    let s = MappedSchema::from_protobuf(&p2, &MessageSelector::Name("E".into()), "ts").unwrap();
    assert!(field(&s, "a").required);
    assert!(!field(&s, "b").required);
}

#[test]
fn well_known_types_map_to_scalars() {
    let s = map_first(
        "message E { google.protobuf.Timestamp ts = 1; google.protobuf.Duration d = 2;
         google.protobuf.Int64Value w1 = 3; google.protobuf.StringValue w2 = 4;
         google.protobuf.UInt32Value w3 = 5; google.protobuf.Int32Value w4 = 6;
         google.protobuf.BytesValue w5 = 7; google.protobuf.DoubleValue w6 = 8;
         google.protobuf.FloatValue w7 = 9; google.protobuf.BoolValue w8 = 10;
         google.protobuf.UInt64Value w9 = 11;
         google.protobuf.Struct j1 = 12; google.protobuf.Value j2 = 13;
         google.protobuf.ListValue j3 = 14; google.protobuf.Any j4 = 15; }",
    )
    .unwrap();
    use PrimitiveType as P;
    let want = [
        ("d", P::Long),
        ("w1", P::Long),
        ("w2", P::String),
        ("w3", P::Long),
        ("w4", P::Int),
        ("w5", P::Binary),
        ("w6", P::Double),
        ("w7", P::Float),
        ("w8", P::Boolean),
        ("w9", P::Long),
        ("j1", P::String),
        ("j2", P::String),
        ("j3", P::String),
        ("j4", P::String),
    ];
    for (name, ty) in want {
        assert_eq!(prim(&s, name), (ty, false), "{name}");
    }
}

#[test]
fn repeated_and_maps_become_lists_and_string_keyed_maps_with_preorder_ids() {
    let s = map_first(
        "message In { int32 x = 1; string y = 2; }
         message E { google.protobuf.Timestamp ts = 1; repeated In items = 2;
         map<int64, In> by_id = 3; repeated string tags = 4; }",
    )
    .unwrap();
    let items = field(&s, "items");
    assert!(items.required);
    let Type::List(l) = &*items.field_type else {
        panic!("items: {items:?}")
    };
    // ts 1, items 2, element 3, x 4, y 5, by_id 6, key 7, value 8, x 9, y 10, tags 11, element 12.
    assert_eq!((items.id, l.element_field.id), (2, 3));
    let by_id = field(&s, "by_id");
    let Type::Map(m) = &*by_id.field_type else {
        panic!("by_id: {by_id:?}")
    };
    assert_eq!((by_id.id, m.key_field.id, m.value_field.id), (6, 7, 8));
    assert_eq!(
        *m.key_field.field_type,
        Type::Primitive(PrimitiveType::String)
    );
    assert!(matches!(&*m.value_field.field_type, Type::Struct(_)));
    assert_eq!(field(&s, "tags").id, 11);
}

#[test]
fn messages_are_selected_by_confluent_indexes_counting_map_entries() {
    let files = proto3(
        "message A { google.protobuf.Timestamp ts = 1; }
         message B { map<string, int32> m = 1;
           message C { google.protobuf.Timestamp ts = 1; int32 c = 2; } }",
    );
    let name = |idx: Vec<i32>| {
        let s = MappedSchema::from_protobuf(&files, &MessageSelector::Indexes(idx), "ts")?;
        match s.decoding() {
            Decoding::Protobuf(m) => Ok(m.name.clone()),
            _ => unreachable!(),
        }
    };
    assert_eq!(name(vec![0]).unwrap(), "t.A");
    assert_eq!(name(vec![]).unwrap(), "t.A");
    // B's nested types: [0] MEntry (the map entry), [1] C.
    assert_eq!(name(vec![1, 1]).unwrap(), "t.B.C");
    let e: Result<String, SchemaError> = name(vec![2]);
    assert!(e.unwrap_err().to_string().contains("name no message"));
    let s =
        MappedSchema::from_protobuf(&files, &MessageSelector::Name("t.B.C".into()), "ts").unwrap();
    assert!(s.iceberg_schema().as_struct().field_by_name("c").is_some());
}

#[test]
fn recursion_groups_and_empty_messages_are_refused_naming_the_path() {
    let e = refusal(map_first(
        "message Node { Node next = 1; int32 v = 2; }
         message E { google.protobuf.Timestamp ts = 1; Node head = 2; }",
    ));
    assert!(e.contains("/head/next") && e.contains("recursive"), "{e}");
    let p2 = vec![ProtoFile {
        name: "g.proto".into(),
        text: "syntax = \"proto2\"; import \"google/protobuf/timestamp.proto\";
               message E { optional google.protobuf.Timestamp ts = 1;
               optional group G = 2 { optional int32 x = 3; } }"
            .into(),
    }];
    let e = refusal(MappedSchema::from_protobuf(
        &p2,
        &MessageSelector::Indexes(vec![0]),
        "ts",
    ));
    assert!(e.contains("group"), "{e}");
    let e = refusal(map_first(
        "message Nothing {} message E { google.protobuf.Timestamp ts = 1; Nothing n = 2; }",
    ));
    assert!(e.contains("/n") && e.contains("no fields"), "{e}");
}

fn nested(levels: usize) -> String {
    // M1 holds M2 … holds M{levels}, each a struct level; E.m is M1 (depth 1).
    let mut s = String::new();
    for i in 1..levels {
        s.push_str(&format!("message M{i} {{ M{} m = 1; }}\n", i + 1));
    }
    s.push_str(&format!("message M{levels} {{ int32 x = 1; }}\n"));
    s.push_str("message E { google.protobuf.Timestamp ts = 1; M1 m = 2; }");
    s
}

#[test]
fn nesting_of_16_is_accepted_and_17_refused() {
    let file = |n| proto3(&nested(n));
    let sel = MessageSelector::Name("t.E".into());
    MappedSchema::from_protobuf(&file(MAX_SCHEMA_DEPTH), &sel, "ts").unwrap();
    let e = refusal(MappedSchema::from_protobuf(
        &file(MAX_SCHEMA_DEPTH + 1),
        &sel,
        "ts",
    ));
    assert!(e.contains("nesting depth 17"), "{e}");
}

#[test]
fn partition_field_must_be_a_top_level_singular_timestamp() {
    let e = refusal(map_first("message E { int64 ts = 1; }"));
    assert!(e.contains("google.protobuf.Timestamp"), "{e}");
    let e = refusal(map_first(
        "message E { repeated google.protobuf.Timestamp ts = 1; }",
    ));
    assert!(e.contains("google.protobuf.Timestamp"), "{e}");
    let e = refusal(map_first("message E { google.protobuf.Timestamp at = 1; }"));
    assert!(e.contains("not a field"), "{e}");
    let s = map_first("message E { google.protobuf.Timestamp ts = 1; }").unwrap();
    assert!(field(&s, "ts").required);
}

#[test]
fn imports_resolve_from_the_given_references() {
    let files = vec![
        ProtoFile {
            name: "event.proto".into(),
            text: "syntax = \"proto3\"; import \"common/ids.proto\";
                   import \"google/protobuf/timestamp.proto\";
                   message E { google.protobuf.Timestamp ts = 1; common.Id id = 2; }"
                .into(),
        },
        ProtoFile {
            name: "common/ids.proto".into(),
            text: "syntax = \"proto3\"; package common; message Id { string v = 1; }".into(),
        },
    ];
    MappedSchema::from_protobuf(&files, &MessageSelector::Indexes(vec![0]), "ts").unwrap();
    let e = refusal(MappedSchema::from_protobuf(
        &files[..1],
        &MessageSelector::Indexes(vec![0]),
        "ts",
    ));
    assert!(e.contains("do not compile"), "{e}");
}
