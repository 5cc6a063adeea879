//! The compatibility rules of [`super::evolve`], one case per rule and direction.

use serde_json::{json, Value};

use super::*;
use crate::schema::MappedSchema;

fn schema(props: Value, required: &[&str]) -> Schema {
    let mut p = props.as_object().cloned().unwrap_or_default();
    p.insert(
        "ts".into(),
        json!({"type": "string", "format": "date-time"}),
    );
    let mut req: Vec<&str> = vec!["ts"];
    req.extend_from_slice(required);
    let doc = json!({"type": "object", "properties": p, "required": req});
    MappedSchema::from_json_schema(&doc, "ts")
        .unwrap()
        .iceberg_schema()
        .clone()
}

fn run(table: &Schema, new: &Schema) -> Result<Evolution, Incompatible> {
    evolve(table, table.highest_field_id(), new, "ts", &BTreeSet::new())
}

fn changes(table: &Schema, new: &Schema) -> Vec<String> {
    run(table, new)
        .unwrap_or_else(|e| panic!("expected compatible, got {e}"))
        .changes
        .iter()
        .map(|c| c.to_string())
        .collect()
}

fn refusal(table: &Schema, new: &Schema) -> String {
    match run(table, new) {
        Ok(e) => panic!("expected incompatible, got {:?}", e.changes),
        Err(e) => e.to_string(),
    }
}

fn int() -> Value {
    json!({"type": "integer", "minimum": 0, "maximum": 1000})
}
fn long() -> Value {
    json!({"type": "integer"})
}

#[test]
fn the_same_schema_changes_nothing() {
    let t = schema(json!({"a": long(), "b": {"type": "string"}}), &["a"]);
    let e = run(&t, &t).unwrap();
    assert!(e.changes.is_empty());
    assert_eq!(e.schema, t);
    assert_eq!(e.last_column_id, t.highest_field_id());
}

#[test]
fn a_new_optional_top_level_field_gets_the_next_id() {
    let t = schema(json!({"a": long()}), &[]);
    let n = schema(json!({"a": long(), "b": {"type": "string"}}), &[]);
    let e = run(&t, &n).unwrap();
    let last = t.highest_field_id();
    assert_eq!(
        e.changes,
        vec![Change::Added {
            path: "b".into(),
            ty: "string".into(),
            id: last + 1
        }]
    );
    let b = e.schema.field_by_name("b").unwrap();
    assert_eq!(b.id, last + 1);
    assert!(!b.required);
    // The table's ids never change.
    for f in t.as_struct().fields() {
        assert_eq!(e.schema.field_by_name(&f.name).unwrap().id, f.id);
    }
    assert_eq!(e.last_column_id, last + 1);
    // The other direction: the field is gone from the version, kept in the table.
    let back = run(&e.schema, &t).unwrap();
    assert!(back.changes.is_empty(), "{:?}", back.changes);
}

#[test]
fn fresh_ids_start_after_the_last_column_id_not_the_highest_id() {
    // A table whose last column id is above its highest field id (a column was dropped once):
    // ids are never reused.
    let t = schema(json!({"a": long()}), &[]);
    let n = schema(json!({"a": long(), "b": long()}), &[]);
    let e = evolve(&t, t.highest_field_id() + 5, &n, "ts", &BTreeSet::new()).unwrap();
    assert_eq!(
        e.schema.field_by_name("b").unwrap().id,
        t.highest_field_id() + 6
    );
}

#[test]
fn a_new_optional_nested_field_inside_a_struct_a_list_and_a_map() {
    let t = schema(
        json!({
            "s": {"type": "object", "properties": {"x": long()}},
            "l": {"type": "array", "items": {"type": "object", "properties": {"x": long()}}},
            "m": {"type": "object", "additionalProperties": {"type": "object", "properties": {"x": long()}}}
        }),
        &[],
    );
    let n = schema(
        json!({
            "s": {"type": "object", "properties": {"x": long(), "y": {"type": "object", "properties": {"z": {"type": "boolean"}}}}},
            "l": {"type": "array", "items": {"type": "object", "properties": {"x": long(), "y": {"type": "string"}}}},
            "m": {"type": "object", "additionalProperties": {"type": "object", "properties": {"x": long(), "y": {"type": "string"}}}}
        }),
        &[],
    );
    let e = run(&t, &n).unwrap();
    let paths: Vec<String> = e
        .changes
        .iter()
        .map(|c| match c {
            Change::Added { path, .. } => path.clone(),
            other => panic!("unexpected {other}"),
        })
        .collect();
    assert_eq!(paths, vec!["l.element.y", "m.value.y", "s.y"]);
    // Every id in the evolved schema is unique, the new ones above the old last id, and the
    // nested struct's own member got an id too.
    let mut ids = Vec::new();
    collect_ids(&Type::Struct(e.schema.as_struct().clone()), &mut ids);
    let mut sorted = ids.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(sorted.len(), ids.len(), "duplicate ids {ids:?}");
    let last = t.highest_field_id();
    assert_eq!(
        e.last_column_id,
        last + 4,
        "s.y, s.y.z, l.element.y, m.value.y"
    );
    assert_eq!(*sorted.last().unwrap(), last + 4);
}

fn collect_ids(ty: &Type, out: &mut Vec<i32>) {
    match ty {
        Type::Primitive(_) => {}
        Type::Struct(s) => {
            for f in s.fields() {
                out.push(f.id);
                collect_ids(&f.field_type, out);
            }
        }
        Type::List(l) => {
            out.push(l.element_field.id);
            collect_ids(&l.element_field.field_type, out);
        }
        Type::Map(m) => {
            out.push(m.key_field.id);
            out.push(m.value_field.id);
            collect_ids(&m.value_field.field_type, out);
        }
    }
}

#[test]
fn int_widens_to_long_and_not_back() {
    let t = schema(json!({"n": int()}), &[]);
    let n = schema(json!({"n": long()}), &[]);
    assert_eq!(changes(&t, &n), vec!["widened n from int to long"]);
    assert_eq!(
        refusal(&n, &t),
        "n: the type changes from long to int",
        "narrowing is a type change"
    );
}

#[test]
fn float_widens_to_double_and_decimal_precision_grows_at_the_same_scale() {
    // The JSON Schema mapping never makes float or decimal(P<38): Iceberg schemas directly.
    let t = prim_schema(PrimitiveType::Float);
    let n = prim_schema(PrimitiveType::Double);
    assert_eq!(changes(&t, &n), vec!["widened v from float to double"]);
    assert!(refusal(&n, &t).contains("from double to float"));
    let d = |p, s| {
        prim_schema(PrimitiveType::Decimal {
            precision: p,
            scale: s,
        })
    };
    assert_eq!(
        changes(&d(10, 2), &d(38, 2)),
        vec!["widened v from decimal(10, 2) to decimal(38, 2)"]
    );
    assert!(refusal(&d(38, 2), &d(10, 2)).contains("decimal(38, 2) to decimal(10, 2)"));
    assert!(refusal(&d(10, 2), &d(38, 3)).contains("type changes"));
}

fn prim_schema(p: PrimitiveType) -> Schema {
    Schema::builder()
        .with_fields(vec![
            Arc::new(NestedField::required(
                1,
                "ts",
                Type::Primitive(PrimitiveType::Timestamptz),
            )),
            Arc::new(NestedField::optional(2, "v", Type::Primitive(p))),
        ])
        .build()
        .unwrap()
}

#[test]
fn required_becomes_optional_but_not_back() {
    let t = schema(json!({"a": long()}), &["a"]);
    let n = schema(json!({"a": long()}), &[]);
    let e = run(&t, &n).unwrap();
    assert_eq!(
        e.changes,
        vec![Change::MadeOptional {
            path: "a".into(),
            gone: false
        }]
    );
    assert!(!e.schema.field_by_name("a").unwrap().required);
    assert_eq!(
        refusal(&n, &t),
        "a: an optional field becomes required (rows already in the table may be null)"
    );
}

#[test]
fn a_required_field_no_longer_in_the_schema_is_kept_and_made_optional() {
    let t = schema(json!({"a": long(), "b": long()}), &["a"]);
    let n = schema(json!({"b": long()}), &[]);
    let e = run(&t, &n).unwrap();
    assert_eq!(
        changes(&t, &n),
        vec!["made a optional (no longer in the schema)"]
    );
    let a = e.schema.field_by_name("a").unwrap();
    assert_eq!(a.id, t.field_by_name("a").unwrap().id);
    assert!(!a.required);
    // An optional one is simply kept.
    let t2 = schema(json!({"a": long(), "b": long()}), &[]);
    assert!(run(&t2, &n).unwrap().changes.is_empty());
}

#[test]
fn an_enum_gaining_members_changes_nothing() {
    let t = schema(json!({"e": {"enum": ["a", "b"]}}), &[]);
    let n = schema(json!({"e": {"enum": ["a", "b", "c"]}}), &[]);
    assert!(changes(&t, &n).is_empty());
    assert!(changes(&n, &t).is_empty());
}

#[test]
fn a_new_required_field_is_incompatible() {
    let t = schema(json!({"a": long()}), &[]);
    let n = schema(json!({"a": long(), "b": long()}), &["b"]);
    assert!(refusal(&t, &n).starts_with("b: a new required field"));
    // Nested too.
    let t = schema(
        json!({"s": {"type": "object", "properties": {"x": long()}}}),
        &[],
    );
    let n = schema(
        json!({"s": {"type": "object", "properties": {"x": long(), "y": long()}, "required": ["y"]}}),
        &[],
    );
    assert!(refusal(&t, &n).starts_with("s.y: a new required field"));
}

#[test]
fn other_type_changes_are_incompatible_in_both_directions() {
    let cases = [
        (json!({"type": "string"}), long(), "string", "long"),
        (
            json!({"type": "boolean"}),
            json!({"type": "string"}),
            "boolean",
            "string",
        ),
        (json!({"type": "number"}), long(), "double", "long"),
        (
            json!({"type": "string", "format": "date"}),
            json!({"type": "string", "format": "date-time"}),
            "date",
            "timestamptz",
        ),
    ];
    for (a, b, ta, tb) in cases {
        let t = schema(json!({ "v": a }), &[]);
        let n = schema(json!({ "v": b }), &[]);
        assert_eq!(
            refusal(&t, &n),
            format!("v: the type changes from {ta} to {tb}")
        );
        assert_eq!(
            refusal(&n, &t),
            format!("v: the type changes from {tb} to {ta}")
        );
    }
    // A struct becoming a list, and a list element changing type.
    let t = schema(
        json!({"v": {"type": "object", "properties": {"x": long()}}}),
        &[],
    );
    let n = schema(json!({"v": {"type": "array", "items": long()}}), &[]);
    assert!(refusal(&t, &n).starts_with("v: the type changes from struct"));
    let t = schema(json!({"v": {"type": "array", "items": long()}}), &[]);
    let n = schema(
        json!({"v": {"type": "array", "items": {"type": "string"}}}),
        &[],
    );
    assert_eq!(
        refusal(&t, &n),
        "v.element: the type changes from long to string"
    );
    // A list element widens like a field.
    let t = schema(json!({"v": {"type": "array", "items": int()}}), &[]);
    let n = schema(json!({"v": {"type": "array", "items": long()}}), &[]);
    assert_eq!(changes(&t, &n), vec!["widened v.element from int to long"]);
}

#[test]
fn a_change_of_the_partition_field_is_incompatible() {
    let t = schema(json!({}), &[]);
    // Optional in the version (the mapping always makes it required, so build it by hand).
    let n = Schema::builder()
        .with_fields(vec![Arc::new(NestedField::optional(
            1,
            "ts",
            Type::Primitive(PrimitiveType::Timestamptz),
        ))])
        .build()
        .unwrap();
    assert!(refusal(&t, &n).starts_with("ts: a change of the partition field"));
    let gone = Schema::builder()
        .with_fields(vec![Arc::new(NestedField::optional(
            1,
            "other",
            Type::Primitive(PrimitiveType::Long),
        ))])
        .build()
        .unwrap();
    assert_eq!(
        refusal(&t, &gone),
        "ts: the partition field is no longer in the schema"
    );
}

#[test]
fn nesting_beyond_sixteen_is_incompatible() {
    // A new field whose value is 16 structs deep fits at the top level; one level down it
    // would be 17.
    fn nested(levels: usize) -> Value {
        let mut v = long();
        for _ in 0..levels {
            v = json!({"type": "object", "properties": {"x": v}});
        }
        v
    }
    let t = schema(json!({"s": nested(1)}), &[]);
    let ok = schema(json!({"s": nested(1), "deep": nested(16)}), &[]);
    assert!(run(&t, &ok).is_ok());
    let n = Schema::builder()
        .with_fields(vec![
            Arc::new(NestedField::required(
                1,
                "ts",
                Type::Primitive(PrimitiveType::Timestamptz),
            )),
            Arc::new(NestedField::optional(
                2,
                "s",
                Type::Struct(StructType::new(vec![
                    Arc::new(NestedField::optional(
                        3,
                        "x",
                        Type::Primitive(PrimitiveType::Long),
                    )),
                    Arc::new(NestedField::optional(4, "deep", struct_chain(16))),
                ])),
            )),
        ])
        .build()
        .unwrap();
    assert_eq!(refusal(&t, &n), "s.deep: nesting beyond 16");
}

fn struct_chain(levels: usize) -> Type {
    let mut ty = Type::Primitive(PrimitiveType::Long);
    for i in 0..levels {
        ty = Type::Struct(StructType::new(vec![Arc::new(NestedField::optional(
            100 + i as i32,
            "x",
            ty,
        ))]));
    }
    ty
}

/// Maps `v1` and `v2` with `map` and evolves a table of `v1` by `v2` with `v2`'s defaults.
fn evolve_versions(
    map: impl Fn(&str) -> MappedSchema,
    v1: &str,
    v2: &str,
) -> Result<Evolution, Incompatible> {
    let (t, n) = (map(v1), map(v2));
    let t = t.iceberg_schema();
    evolve(
        t,
        t.highest_field_id(),
        n.iceberg_schema(),
        "ts",
        &n.defaulted_fields(),
    )
}

fn avro(fields: &str) -> String {
    format!(
        r#"{{"type": "record", "name": "E", "fields": [
            {{"name": "ts", "type": {{"type": "long", "logicalType": "timestamp-micros"}}}}{fields}]}}"#
    )
}

#[test]
fn an_avro_field_added_with_a_default_is_added_as_optional_and_without_one_is_refused() {
    let map = |s: &str| MappedSchema::from_avro(s, &[], "ts").unwrap();
    let v1 = avro(r#", {"name": "a", "type": "long"}"#);
    // The usual compatible Avro change: a required field with a default, also nested in a new
    // record, and in a record inside an array.
    let v2 = avro(
        r#", {"name": "a", "type": "long"}, {"name": "region", "type": "string", "default": "eu"},
           {"name": "items", "type": {"type": "array", "items": {"type": "record", "name": "I",
             "fields": [{"name": "n", "type": "int", "default": 0}]}}, "default": []}"#,
    );
    let e = evolve_versions(map, &v1, &v2).unwrap();
    let region = e.schema.field_by_name("region").unwrap();
    assert!(!region.required, "rows already in the table read null");
    assert!(!e.schema.field_by_name("items").unwrap().required);
    assert_eq!(e.changes.len(), 2, "{:?}", e.changes);

    // Without a default, records of version 1 have no value for it (Avro resolution fails too).
    let v2 = avro(r#", {"name": "a", "type": "long"}, {"name": "region", "type": "string"}"#);
    let err = evolve_versions(map, &v1, &v2).unwrap_err();
    assert_eq!(err.path, "region");
    assert!(err.reason.contains("new required field"), "{err}");
}

#[test]
fn a_protobuf_field_added_to_a_message_is_added_as_optional_but_proto2_required_is_refused() {
    use crate::schema::protobuf::{MessageSelector, ProtoFile};
    let map = |text: &str| {
        let files = [ProtoFile {
            name: "e.proto".into(),
            text: text.into(),
        }];
        MappedSchema::from_protobuf(&files, &MessageSelector::Name("E".into()), "ts").unwrap()
    };
    let proto3 = |fields: &str| {
        format!(
            "syntax = \"proto3\"; import \"google/protobuf/timestamp.proto\";
             message E {{ google.protobuf.Timestamp ts = 1; int64 a = 2; {fields} }}"
        )
    };
    // Implicit presence (required with the type's default), repeated and map fields.
    let e = evolve_versions(
        map,
        &proto3(""),
        &proto3("string region = 3; repeated int32 n = 4; map<string, int32> m = 5;"),
    )
    .unwrap();
    for name in ["region", "n", "m"] {
        assert!(!e.schema.field_by_name(name).unwrap().required, "{name}");
    }
    assert_eq!(e.changes.len(), 3, "{:?}", e.changes);

    let proto2 = |fields: &str| {
        format!(
            "syntax = \"proto2\"; import \"google/protobuf/timestamp.proto\";
             message E {{ required google.protobuf.Timestamp ts = 1; {fields} }}"
        )
    };
    let err = evolve_versions(
        map,
        &proto2("optional int64 a = 2;"),
        &proto2("optional int64 a = 2; required int64 b = 3;"),
    )
    .unwrap_err();
    assert_eq!(err.path, "b");
}

#[test]
fn a_json_schema_required_property_added_stays_incompatible() {
    // JSON Schema's `default` is an annotation floe never applies.
    let t = schema(json!({"a": long()}), &[]);
    let doc = json!({"type": "object", "properties": {
        "ts": {"type": "string", "format": "date-time"},
        "a": long(), "b": {"type": "integer", "default": 0}}, "required": ["ts", "b"]});
    let n = MappedSchema::from_json_schema(&doc, "ts").unwrap();
    assert!(n.defaulted_fields().is_empty());
    let err = evolve(
        &t,
        t.highest_field_id(),
        n.iceberg_schema(),
        "ts",
        &n.defaulted_fields(),
    )
    .unwrap_err();
    assert_eq!(err.path, "b");
}

/// An upsert table's key (its identifier fields) survives an evolution; a version making a key
/// column optional is refused (a key is never null).
#[test]
fn identifier_fields_are_kept_and_a_key_column_stays_required() {
    let keyed = |s: Schema| {
        let id = s.field_by_name("a").unwrap().id;
        s.into_builder()
            .with_identifier_field_ids([id])
            .build()
            .unwrap()
    };
    let t = keyed(schema(json!({"a": long()}), &["a"]));
    let n = schema(json!({"a": long(), "b": {"type": "string"}}), &["a"]);
    let e = run(&t, &n).unwrap();
    assert_eq!(
        e.schema.identifier_field_ids().collect::<Vec<_>>(),
        t.identifier_field_ids().collect::<Vec<_>>()
    );
    let optional = schema(json!({"a": long()}), &[]);
    assert!(refusal(&t, &optional).contains("optional field"));
}
