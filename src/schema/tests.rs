//! Unit tests of the schema mapping (docs/schema-mapping.md "JSON Schema → Iceberg").

use std::sync::Arc;

use iceberg::spec::{ListType, MapType, NestedField, PrimitiveType, Schema, StructType, Type};
use serde_json::{json, Value};

use super::*;

fn with_props(props: Value) -> Value {
    let mut p = props.as_object().cloned().unwrap_or_default();
    p.insert(
        "event_time".into(),
        json!({"type": "string", "format": "date-time"}),
    );
    json!({"type": "object", "properties": p, "required": ["event_time"]})
}

fn map(schema: &Value) -> Result<MappedSchema, SchemaError> {
    MappedSchema::from_json_schema(schema, "event_time")
}

fn field_type(schema: &Value, name: &str) -> Type {
    let m = map(schema).unwrap();
    let f = m.iceberg_schema().field_by_name(name).unwrap();
    (*f.field_type).clone()
}

fn refusal(schema: &Value) -> String {
    map(schema).unwrap_err().to_string()
}

fn prim(p: PrimitiveType) -> Type {
    Type::Primitive(p)
}

fn event_schema() -> Value {
    serde_json::from_str(include_str!("../../tests/data/event.schema.json")).unwrap()
}

#[test]
fn event_schema_maps_to_the_expected_iceberg_schema_field_by_field() {
    let m = map(&event_schema()).unwrap();
    // Properties in byte order of their names, ids depth-first (pre-order) from 1.
    let expected = Schema::builder()
        .with_schema_id(0)
        .with_fields(vec![
            Arc::new(NestedField::optional(
                1,
                "amount",
                prim(PrimitiveType::Decimal {
                    precision: 38,
                    scale: 2,
                }),
            )),
            Arc::new(NestedField::optional(
                2,
                "attrs",
                Type::Map(MapType::new(
                    Arc::new(NestedField::map_key_element(3, prim(PrimitiveType::String))),
                    Arc::new(NestedField::map_value_element(
                        4,
                        prim(PrimitiveType::String),
                        true,
                    )),
                )),
            )),
            Arc::new(NestedField::required(
                5,
                "event_time",
                prim(PrimitiveType::Timestamptz),
            )),
            Arc::new(NestedField::required(6, "id", prim(PrimitiveType::Long))),
            Arc::new(NestedField::optional(
                7,
                "source",
                prim(PrimitiveType::String),
            )),
            Arc::new(NestedField::optional(
                8,
                "tags",
                Type::List(ListType::new(Arc::new(NestedField::list_element(
                    9,
                    prim(PrimitiveType::String),
                    true,
                )))),
            )),
            Arc::new(NestedField::optional(
                10,
                "user",
                Type::Struct(StructType::new(vec![
                    Arc::new(NestedField::required(
                        11,
                        "country",
                        prim(PrimitiveType::String),
                    )),
                    Arc::new(NestedField::optional(12, "tier", prim(PrimitiveType::Int))),
                ])),
            )),
            Arc::new(NestedField::required(
                13,
                "value",
                prim(PrimitiveType::Double),
            )),
        ])
        .build()
        .unwrap();
    let got = m.iceberg_schema();
    for f in expected.as_struct().fields() {
        let g = got
            .field_by_id(f.id)
            .unwrap_or_else(|| panic!("no field id {}", f.id));
        assert_eq!(g, f, "field {}", f.name);
    }
    assert_eq!(got, &expected);
    assert_eq!(m.partition_field(), "event_time");
    let arrow = iceberg::arrow::schema_to_arrow_schema(&expected).unwrap();
    assert_eq!(*m.arrow_schema(), arrow);
}

#[test]
fn arrow_types_are_those_iceberg_rust_expects() {
    use arrow_schema::{DataType, TimeUnit};
    let m = map(&with_props(json!({
        "u": {"type": "string", "format": "uuid"},
        "b": {"type": "string", "contentEncoding": "base64"},
        "d": {"type": "string", "format": "date"},
        "t": {"type": "string", "format": "time"},
        "x": {"type": "number", "multipleOf": 0.001},
    })))
    .unwrap();
    let a = m.arrow_schema();
    let ty = |n: &str| a.field_with_name(n).unwrap().data_type().clone();
    assert_eq!(ty("u"), DataType::FixedSizeBinary(16));
    assert_eq!(ty("b"), DataType::LargeBinary);
    assert_eq!(ty("d"), DataType::Date32);
    assert_eq!(ty("t"), DataType::Time64(TimeUnit::Microsecond));
    assert_eq!(ty("x"), DataType::Decimal128(38, 3));
    assert_eq!(
        ty("event_time"),
        DataType::Timestamp(TimeUnit::Microsecond, Some("+00:00".into()))
    );
    let md = a.field_with_name("u").unwrap().metadata();
    assert!(md.contains_key("PARQUET:field_id"));
}

#[test]
fn integer_is_int_only_when_every_allowed_value_fits_32_bits() {
    let s = with_props(json!({
        "a": {"type": "integer", "minimum": 0, "maximum": 2147483648u64},
        "b": {"type": "integer", "maximum": 100},
        "d": {"type": "integer", "minimum": -2147483648i64, "exclusiveMaximum": 2147483648u64},
        "e": {"type": "integer", "minimum": -2147483649i64, "maximum": 0},
        "f": {"type": "integer", "exclusiveMinimum": -2147483649i64, "maximum": 5},
        "g": {"type": "integer", "minimum": -0.5, "maximum": 2147483647.9},
    }));
    assert_eq!(field_type(&s, "a"), prim(PrimitiveType::Long));
    assert_eq!(field_type(&s, "b"), prim(PrimitiveType::Long));
    assert_eq!(field_type(&s, "d"), prim(PrimitiveType::Int));
    assert_eq!(field_type(&s, "e"), prim(PrimitiveType::Long));
    assert_eq!(field_type(&s, "f"), prim(PrimitiveType::Int));
    assert_eq!(field_type(&s, "g"), prim(PrimitiveType::Int));
}

#[test]
fn draft04_exclusive_maximum_is_a_boolean_modifier() {
    let mut s = with_props(json!({
        "n": {"type": "integer", "minimum": 0, "maximum": 2147483648u64, "exclusiveMaximum": true},
    }));
    s["$schema"] = json!("http://json-schema.org/draft-04/schema#");
    assert_eq!(field_type(&s, "n"), prim(PrimitiveType::Int));
    assert_eq!(map(&s).unwrap().draft(), Draft::Draft04);
    // A draft-07 boolean exclusiveMaximum is malformed.
    s["$schema"] = json!("http://json-schema.org/draft-07/schema#");
    assert!(refusal(&s).contains("exclusiveMaximum"));
}

#[test]
fn decimal_scale_is_the_fractional_digits_of_multiple_of() {
    // Parsed from text, as a schema file would be (1e-10, 1E-2, 0.010, 1, 0.5, 2.5E1).
    let text = r#"{"type":"object","required":["event_time"],"properties":{
        "event_time":{"type":"string","format":"date-time"},
        "x":{"type":"number","multipleOf":1e-10},"y":{"type":"number","multipleOf":1E-2},
        "z":{"type":"number","multipleOf":0.010},"w":{"type":"number","multipleOf":1},
        "v":{"type":"number","multipleOf":0.5},"u":{"type":"number","multipleOf":2.5E1},
        "q":{"type":"number","multipleOf":0.25},"r":{"type":"number","multipleOf":1e-30},
        "t":{"type":"number","multipleOf":1.7e-22}}}"#;
    let s: Value = serde_json::from_str(text).unwrap();
    let dec = |scale| {
        prim(PrimitiveType::Decimal {
            precision: 38,
            scale,
        })
    };
    for (n, scale) in [
        ("x", 10),
        ("y", 2),
        ("z", 2),
        ("w", 0),
        ("v", 1),
        ("u", 0),
        ("q", 2),
    ] {
        assert_eq!(field_type(&s, n), dec(scale), "{n}");
    }
    assert_eq!(
        field_type(&with_props(json!({"p": {"type": "number"}})), "p"),
        prim(PrimitiveType::Double)
    );
    let too_fine: Value = serde_json::from_str(
        r#"{"type":"object","required":["event_time"],"properties":{
        "event_time":{"type":"string","format":"date-time"},"x":{"type":"number","multipleOf":1e-40}}}"#,
    )
    .unwrap();
    assert!(refusal(&too_fine).contains("scale 40"));
    assert!(refusal(&with_props(
        json!({"x": {"type": "number", "multipleOf": 0}})
    ))
    .contains("multipleOf"));
}

#[test]
fn nullability_follows_required_and_null_types() {
    let s = json!({
        "type": "object",
        "properties": {
            "event_time": {"type": ["string", "null"], "format": "date-time"},
            "a": {"type": ["string", "null"]},
            "b": {"type": "string"},
            "c": {"type": "string"},
        },
        "required": ["a", "b"],
    });
    let m = map(&s).unwrap();
    let f = |n: &str| m.iceberg_schema().field_by_name(n).unwrap().required;
    assert!(f("event_time"), "the partition field is always required");
    assert!(!f("a"), "required but admits null: nullable column");
    assert!(f("b"), "required without null: non-nullable");
    assert!(!f("c"), "optional: nullable");
    let p = m
        .root()
        .fields
        .iter()
        .find(|f| f.name == "event_time")
        .unwrap();
    assert!(p.is_partition && !p.admits_null);
}

#[test]
fn t_or_null_unions_in_all_three_spellings_are_optional_columns() {
    let s = with_props(json!({
        "a": {"type": ["string", "null"]},
        "b": {"oneOf": [{"type": "string"}, {"type": "null"}]},
        "c": {"anyOf": [{"type": "null"}, {"type": "string", "format": "date-time"}]},
        "r": {"oneOf": [{"$ref": "#/definitions/n"}, {"type": "integer"}]},
    }));
    let mut s2 = s.clone();
    s2["properties"].as_object_mut().unwrap().remove("r");
    let m = map(&s2).unwrap();
    let root = m.root();
    let get = |n: &str| root.fields.iter().find(|f| f.name == n).unwrap();
    assert!(get("a").admits_null && matches!(get("a").ty, FieldType::String(_)));
    assert!(get("b").admits_null && matches!(get("b").ty, FieldType::String(_)));
    assert!(get("c").admits_null && matches!(get("c").ty, FieldType::Timestamptz(_)));
    // A $ref to {"type": "null"} counts as the null branch.
    let mut s3 = s.clone();
    s3["definitions"] = json!({"n": {"type": "null"}});
    let m = map(&s3).unwrap();
    let r = m.root().fields.iter().find(|f| f.name == "r").unwrap();
    assert!(r.admits_null && matches!(r.ty, FieldType::Long(_)));
}

#[test]
fn other_unions_are_refused_naming_the_field() {
    for (name, schema) in [
        ("str_or_int", json!({"type": ["string", "integer"]})),
        (
            "two_branches",
            json!({"oneOf": [{"type": "string"}, {"type": "string", "maxLength": 3}]}),
        ),
        ("only_null", json!({"anyOf": [{"type": "null"}]})),
        ("null_type", json!({"type": "null"})),
    ] {
        let msg = refusal(&with_props(json!({ name: schema })));
        assert!(msg.contains(&format!("/properties/{name}")), "{msg}");
    }
    // number|integer is the number type, not a union.
    assert_eq!(
        field_type(
            &with_props(json!({"n": {"type": ["integer", "number"]}})),
            "n"
        ),
        prim(PrimitiveType::Double)
    );
}

#[test]
fn refs_resolve_locally_and_their_siblings_are_ignored() {
    let s = json!({
        "type": "object",
        "definitions": {"addr": {"type": "object", "properties": {"city": {"type": "string"}}}},
        "$defs": {"id": {"type": "integer", "maximum": 10, "minimum": 0}},
        "properties": {
            "event_time": {"$ref": "#/$defs/ts"},
            "home": {"$ref": "#/definitions/addr"},
            "work": {"$ref": "#/definitions/addr", "type": "string"},
            "n": {"$ref": "#/$defs/id"},
        },
        "required": ["event_time"],
    });
    let mut s = s;
    s["$defs"]["ts"] = json!({"type": "string", "format": "date-time"});
    let m = map(&s).unwrap();
    let st = |n: &str| {
        m.iceberg_schema()
            .field_by_name(n)
            .unwrap()
            .field_type
            .clone()
    };
    assert!(matches!(*st("home"), Type::Struct(_)));
    assert!(matches!(*st("work"), Type::Struct(_)));
    assert_eq!(*st("n"), prim(PrimitiveType::Int));
}

#[test]
fn recursive_dangling_and_remote_refs_are_refused() {
    let base = |prop: Value| {
        let mut s = with_props(json!({ "f": prop }));
        s["definitions"] = json!({
            "node": {"type": "object", "properties": {"children": {"type": "array", "items": {"$ref": "#/definitions/node"}}}},
            "loop": {"$ref": "#/definitions/loop"},
        });
        s
    };
    assert!(refusal(&base(json!({"$ref": "#/definitions/node"}))).contains("recursive"));
    assert!(refusal(&base(json!({"$ref": "#/definitions/loop"}))).contains("recursive"));
    assert!(refusal(&base(json!({"$ref": "#/definitions/missing"}))).contains("unresolvable"));
    assert!(refusal(&base(json!({"$ref": "http://example.com/a.json"}))).contains("remote"));
    assert!(refusal(&base(json!({"$ref": "#/definitions/node"}))).contains("/properties/f"));
}

fn nested_objects(levels: usize) -> Value {
    let mut v = json!({"type": "string"});
    for _ in 0..levels {
        v = json!({"type": "object", "properties": {"c": v}});
    }
    v
}

#[test]
fn nesting_depth_16_is_accepted_and_17_refused() {
    assert!(map(&with_props(json!({ "n": nested_objects(16) }))).is_ok());
    let msg = refusal(&with_props(json!({ "n": nested_objects(17) })));
    assert!(msg.contains("depth 17 > 16"), "{msg}");
    // Lists and maps count one level each.
    let mut v = nested_objects(14);
    v = json!({"type": "array", "items": v});
    v = json!({"type": "object", "additionalProperties": v});
    assert!(map(&with_props(json!({ "n": v.clone() }))).is_ok());
    let v = json!({"type": "array", "items": v});
    assert!(map(&with_props(json!({ "n": v }))).is_err());
}

#[test]
fn the_partition_field_must_be_a_top_level_date_time() {
    let s = with_props(json!({"d": {"type": "string", "format": "date"}}));
    assert!(matches!(
        MappedSchema::from_json_schema(&s, "missing"),
        Err(SchemaError::Partition { .. })
    ));
    let e = MappedSchema::from_json_schema(&s, "d").unwrap_err();
    assert!(e.to_string().contains("date-time"), "{e}");
    assert!(matches!(e, SchemaError::Partition { .. }));
}

#[test]
fn drafts_other_than_04_and_07_are_refused_and_none_means_07() {
    let mut s = with_props(json!({}));
    assert_eq!(map(&s).unwrap().draft(), Draft::Draft07);
    for d in [
        "https://json-schema.org/draft/2020-12/schema",
        "https://json-schema.org/draft/2019-09/schema",
        "http://json-schema.org/draft-06/schema#",
    ] {
        s["$schema"] = json!(d);
        assert!(
            matches!(map(&s), Err(SchemaError::Unsupported { .. })),
            "{d}"
        );
    }
    s["$schema"] = json!("http://json-schema.org/draft-07/schema");
    assert!(map(&s).is_ok());
}

#[test]
fn all_of_objects_are_merged_and_conflicts_refused() {
    let s = json!({
        "allOf": [
            {"type": "object", "properties": {"event_time": {"type": "string", "format": "date-time"}}, "required": ["event_time"]},
            {"properties": {"a": {"type": "integer"}}, "required": ["a"]},
        ]
    });
    let m = map(&s).unwrap();
    assert!(m.iceberg_schema().field_by_name("a").unwrap().required);
    let bad = json!({
        "type": "object",
        "properties": {"event_time": {"type": "string", "format": "date-time"}},
        "allOf": [{"properties": {"event_time": {"type": "string"}}}],
    });
    assert!(refusal(&bad).contains("differently"));
}

#[test]
fn unenforceable_keywords_are_refused_not_ignored() {
    for (kw, v) in [
        ("not", json!({"type": "string", "not": {"const": "x"}})),
        ("if", json!({"type": "string", "if": {"const": "x"}})),
        (
            "uniqueItems",
            json!({"type": "array", "items": {"type": "string"}, "uniqueItems": true}),
        ),
        (
            "items",
            json!({"type": "array", "items": [{"type": "string"}]}),
        ),
        (
            "patternProperties",
            json!({"type": "object", "properties": {"a": {"type": "string"}}, "patternProperties": {"x": {}}}),
        ),
    ] {
        let msg = refusal(&with_props(json!({ "f": v })));
        assert!(msg.contains("/properties/f"), "{kw}: {msg}");
    }
}

#[test]
fn objects_without_a_typed_shape_are_refused() {
    for v in [
        json!({"type": "object", "properties": {"x": {"type": "string"}}, "additionalProperties": {"type": "integer"}}),
        json!({"type": "object"}),
        json!({"type": "object", "additionalProperties": true}),
        json!({"type": "object", "additionalProperties": {}}),
        json!({"type": "array"}),
        json!({}),
        json!(true),
    ] {
        assert!(map(&with_props(json!({ "f": v.clone() }))).is_err(), "{v}");
    }
}

#[test]
fn enum_is_a_string_column_nullable_with_a_null_member() {
    let s = with_props(json!({
        "e": {"enum": ["a", 1, null]},
        "f": {"type": "string", "enum": ["a", 1]},
    }));
    assert_eq!(field_type(&s, "e"), prim(PrimitiveType::String));
    let m = map(&s).unwrap();
    let get = |n: &str| {
        m.root()
            .fields
            .iter()
            .find(|f| f.name == n)
            .unwrap()
            .clone()
    };
    assert!(get("e").admits_null);
    let FieldType::Enum(spec, _) = get("f").ty else {
        panic!("not an enum")
    };
    assert_eq!(
        spec.members.len(),
        1,
        "members ruled out by the type are dropped"
    );
}

#[test]
fn field_ids_are_depth_first_and_stable() {
    let s = event_schema();
    let a = map(&s).unwrap();
    let b = map(&s).unwrap();
    assert_eq!(a.iceberg_schema(), b.iceberg_schema());
    assert_eq!(a.iceberg_schema().highest_field_id(), 13);
}

#[test]
fn ecma_shorthands_are_ascii() {
    assert_eq!(ecma_to_rust_regex(r"^\d+$"), "^[0-9]+$");
    assert_eq!(ecma_to_rust_regex(r"[\d.]"), "[0-9.]");
    let re = regex::Regex::new(&ecma_to_rust_regex(r"^\d$")).unwrap();
    assert!(re.is_match("7"));
    assert!(!re.is_match("৪"));
    assert!(refusal(&with_props(
        json!({"p": {"type": "string", "pattern": "(?<=a)b"}})
    ))
    .contains("pattern"));
}

#[test]
fn long_ref_chains_are_refused_without_overflowing_the_stack() {
    let mut defs = serde_json::Map::new();
    for i in 0..5000 {
        defs.insert(
            format!("d{i}"),
            json!({"allOf": [{"$ref": format!("#/definitions/d{}", i + 1)}]}),
        );
    }
    defs.insert("d5000".into(), json!({"type": "string"}));
    let mut s = with_props(json!({"f": {"$ref": "#/definitions/d0"}}));
    s["definitions"] = Value::Object(defs);
    assert!(refusal(&s).contains("deeper than 64"));
    let mut defs = serde_json::Map::new();
    for i in 0..10 {
        defs.insert(
            format!("d{i}"),
            json!({"allOf": [{"$ref": format!("#/definitions/d{}", i + 1)}]}),
        );
    }
    defs.insert("d10".into(), json!({"type": "string"}));
    let mut s = with_props(json!({"f": {"$ref": "#/definitions/d0"}}));
    s["definitions"] = Value::Object(defs);
    assert_eq!(field_type(&s, "f"), prim(PrimitiveType::String));
}
