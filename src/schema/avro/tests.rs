//! Mapping table tests: every rule of the module doc, accepted and refused, with paths.

use iceberg::spec::{PrimitiveType, Type};
use serde_json::{json, Value};

use super::*;

fn record(fields: Value) -> String {
    let mut all =
        vec![json!({"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}})];
    all.extend(fields.as_array().unwrap().iter().cloned());
    json!({"type": "record", "name": "Event", "fields": all}).to_string()
}

fn map(fields: Value) -> Result<MappedSchema, SchemaError> {
    MappedSchema::from_avro(&record(fields), &[], "ts")
}

/// The Iceberg type and requiredness of the single field `x` of type `t`.
fn one(t: Value) -> (Type, bool) {
    let m = map(json!([{"name": "x", "type": t}])).unwrap_or_else(|e| panic!("{t}: {e}"));
    let f = m.iceberg_schema().field_by_name("x").unwrap().clone();
    (*f.field_type.clone(), f.required)
}

fn refusal(t: Value) -> String {
    match map(json!([{"name": "x", "type": t}])) {
        Ok(_) => panic!("{t}: expected a refusal"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn primitives_and_logical_types_map_by_the_iceberg_avro_appendix() {
    use PrimitiveType as P;
    let cases = [
        (json!("boolean"), P::Boolean),
        (json!("int"), P::Int),
        (json!("long"), P::Long),
        (json!("float"), P::Float),
        (json!("double"), P::Double),
        (json!("string"), P::String),
        (json!("bytes"), P::Binary),
        (
            json!({"type": "fixed", "name": "F", "size": 7}),
            P::Fixed(7),
        ),
        (
            json!({"type": "enum", "name": "E", "symbols": ["A"]}),
            P::String,
        ),
        (
            json!({"type": "bytes", "logicalType": "decimal", "precision": 38, "scale": 9}),
            P::Decimal {
                precision: 38,
                scale: 9,
            },
        ),
        (
            json!({"type": "fixed", "name": "D", "size": 5, "logicalType": "decimal", "precision": 11, "scale": 2}),
            P::Decimal {
                precision: 11,
                scale: 2,
            },
        ),
        (json!({"type": "string", "logicalType": "uuid"}), P::Uuid),
        (
            json!({"type": "fixed", "name": "U", "size": 16, "logicalType": "uuid"}),
            P::Uuid,
        ),
        (json!({"type": "int", "logicalType": "date"}), P::Date),
        (
            json!({"type": "int", "logicalType": "time-millis"}),
            P::Time,
        ),
        (
            json!({"type": "long", "logicalType": "time-micros"}),
            P::Time,
        ),
        (
            json!({"type": "long", "logicalType": "timestamp-millis"}),
            P::Timestamptz,
        ),
        (
            json!({"type": "long", "logicalType": "timestamp-micros"}),
            P::Timestamptz,
        ),
        (
            json!({"type": "long", "logicalType": "local-timestamp-millis"}),
            P::Timestamp,
        ),
        (
            json!({"type": "long", "logicalType": "local-timestamp-micros"}),
            P::Timestamp,
        ),
    ];
    for (t, want) in cases {
        assert_eq!(one(t.clone()), (Type::Primitive(want), true), "{t}");
    }
}

#[test]
fn null_unions_in_either_order_are_optional_never_a_struct() {
    for t in [json!(["null", "long"]), json!(["long", "null"])] {
        assert_eq!(one(t), (Type::Primitive(PrimitiveType::Long), false));
    }
    assert_eq!(
        one(json!(["int"])),
        (Type::Primitive(PrimitiveType::Int), true)
    );
}

#[test]
fn other_unions_and_unmapped_types_are_refused_with_the_path() {
    let cases = [
        (json!(["int", "string"]), "union of 2 types"),
        (json!(["null", "int", "string"]), "union of 3 types"),
        (json!("null"), "null type"),
        (
            json!({"type": "record", "name": "Empty", "fields": []}),
            "no fields",
        ),
        (
            json!({"type": "bytes", "logicalType": "decimal", "precision": 39, "scale": 0}),
            "decimal(39",
        ),
        (
            json!({"type": "long", "logicalType": "timestamp-nanos"}),
            "nanosecond",
        ),
        (
            json!({"type": "fixed", "name": "Dur", "size": 12, "logicalType": "duration"}),
            "Duration",
        ),
    ];
    for (t, want) in cases {
        let e = refusal(t.clone());
        assert!(e.contains("#/x") && e.contains(want), "{t}: {e}");
    }
    let nested = json!({"type": "array", "items": {"type": "map", "values": ["int", "string"]}});
    let e = refusal(nested);
    assert!(e.contains("#/x/element/value"), "{e}");
}

#[test]
fn recursive_records_are_refused() {
    let e = refusal(json!({"type": "record", "name": "Node", "fields": [
        {"name": "next", "type": ["null", "Node"]}
    ]}));
    assert!(e.contains("recursive") && e.contains("#/x/next"), "{e}");
}

#[test]
fn a_named_type_used_twice_maps_twice_with_its_own_ids() {
    let m = map(json!([
        {"name": "a", "type": {"type": "record", "name": "P", "fields": [{"name": "v", "type": "int"}]}},
        {"name": "b", "type": "P"}
    ]))
    .unwrap();
    let s = m.iceberg_schema();
    assert_eq!(s.field_by_name("b.v").unwrap().id, 5);
}

#[test]
fn field_ids_are_depth_first_pre_order_and_docs_are_kept() {
    let m = map(json!([
        {"name": "r", "doc": "a record", "type": {"type": "record", "name": "R", "fields": [
            {"name": "xs", "type": {"type": "array", "items": "int"}},
            {"name": "m", "type": {"type": "map", "values": "string"}}
        ]}},
        {"name": "z", "type": "int"}
    ]))
    .unwrap();
    let s = m.iceberg_schema();
    let id = |n: &str| s.field_by_name(n).unwrap().id;
    assert_eq!(
        [
            id("ts"),
            id("r"),
            id("r.xs"),
            id("r.xs.element"),
            id("r.m"),
            id("r.m.key"),
            id("r.m.value"),
            id("z")
        ],
        [1, 2, 3, 4, 5, 6, 7, 8]
    );
    assert_eq!(
        s.field_by_name("r").unwrap().doc.as_deref(),
        Some("a record")
    );
}

fn nested_records(depth: usize) -> Value {
    let mut t = json!("int");
    for i in 0..depth {
        t = json!({"type": "record", "name": format!("N{i}"), "fields": [{"name": "v", "type": t}]});
    }
    t
}

#[test]
fn nesting_16_is_accepted_17_refused() {
    map(json!([{"name": "x", "type": nested_records(16)}])).unwrap();
    let e = refusal(nested_records(17));
    assert!(e.contains("nesting depth 17"), "{e}");
}

#[test]
fn partition_field_must_be_a_top_level_timestamp() {
    let m = MappedSchema::from_avro(
        &json!({"type": "record", "name": "E", "fields": [
            {"name": "ts", "type": ["null", {"type": "long", "logicalType": "timestamp-micros"}]}
        ]})
        .to_string(),
        &[],
        "ts",
    )
    .unwrap();
    assert!(
        m.iceberg_schema().field_by_name("ts").unwrap().required,
        "always required"
    );
    for (fields, partition) in [
        (json!([{"name": "t", "type": "long"}]), "t"),
        (
            json!([{"name": "t", "type": {"type": "long", "logicalType": "local-timestamp-micros"}}]),
            "t",
        ),
        (json!([]), "missing"),
    ] {
        let e = MappedSchema::from_avro(&record(fields), &[], partition).unwrap_err();
        assert!(matches!(e, SchemaError::Partition { .. }), "{e}");
    }
}

#[test]
fn references_resolve_named_types_from_other_schemas() {
    let addr = json!({"type": "record", "name": "Address", "namespace": "com.x", "fields": [
        {"name": "city", "type": "string"}
    ]})
    .to_string();
    let text = record(json!([{"name": "home", "type": "com.x.Address"}]));
    let m = MappedSchema::from_avro(&text, &[addr], "ts").unwrap();
    assert!(m.iceberg_schema().field_by_name("home.city").is_some());
}

#[test]
fn resolution_refuses_types_the_spec_does_not_promote() {
    for (w, r) in [
        ("long", "int"),
        ("double", "float"),
        ("string", "int"),
        ("float", "long"),
    ] {
        let e = MappedSchema::from_avro_resolved(
            &record(json!([{"name": "x", "type": w}])),
            &[],
            &record(json!([{"name": "x", "type": r}])),
            &[],
            "ts",
        )
        .unwrap_err();
        assert!(e.to_string().contains("#/x"), "{w} → {r}: {e}");
    }
    for (w, r) in [("int", "double"), ("long", "float"), ("bytes", "string")] {
        MappedSchema::from_avro_resolved(
            &record(json!([{"name": "x", "type": w}])),
            &[],
            &record(json!([{"name": "x", "type": r}])),
            &[],
            "ts",
        )
        .unwrap_or_else(|e| panic!("{w} → {r}: {e}"));
    }
}
