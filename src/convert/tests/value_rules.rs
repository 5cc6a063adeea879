//! The value-rule class of docs/schema-mapping.md "DLQ error codes", keyword by keyword: a value
//! whose JSON type the `type` keyword allows but that a later keyword refuses (`enum`, `const`,
//! bounds, `multipleOf`, `pattern`, lengths, a `format` that keeps the string type, item and
//! property counts, `additionalProperties: false`) is `VALUE_OUT_OF_RANGE` — `null` included,
//! where `type` admits it — and a value of a JSON type that `type` refuses is `TYPE_MISMATCH`
//! (or `MISSING_REQUIRED_FIELD`, for a `null` in a required field whose type does not admit null).
//! Sibling keywords of `enum`/`const` apply to the members as JSON Schema says (no failing open).

use serde_json::{json, Value};

use super::super::render::row_to_json;
use super::super::*;
use crate::schema::MappedSchema;
use DlqCode::*;

/// What a record with the field's value comes out as.
#[derive(Debug)]
enum Want {
    /// A row whose field holds this (Iceberg single-value JSON, as `records check` prints).
    Row(Value),
    /// A DLQ entry with this code and field pointer.
    Dlq(DlqCode, &'static str),
}
use Want::*;

/// One case: the field `f`'s schema, whether `f` is required, the draft, `f`'s value (JSON text)
/// and the outcome.
struct Case {
    schema: Value,
    required: bool,
    draft04: bool,
    value: &'static str,
    want: Want,
}

fn case(schema: Value, value: &'static str, want: Want) -> Case {
    Case {
        schema,
        required: false,
        draft04: false,
        value,
        want,
    }
}

fn required(mut c: Case) -> Case {
    c.required = true;
    c
}

fn draft04(mut c: Case) -> Case {
    c.draft04 = true;
    c
}

// A table of data: one row per value rule of docs/schema-mapping.md, with its expected outcome.
fn cases() -> Vec<Case> {
    let ab = json!({"type": "string", "enum": ["a", "b"]});
    let a_or_null = json!({"type": ["string", "null"], "enum": ["a"]});
    vec![
        // enum and const: the type allows the value, the members do not.
        case(ab.clone(), r#""c""#, Dlq(ValueOutOfRange, "/f")),
        case(ab.clone(), r#""a""#, Row(json!("a"))),
        case(a_or_null.clone(), r#""a""#, Row(json!("a"))),
        case(a_or_null.clone(), "null", Dlq(ValueOutOfRange, "/f")),
        required(case(a_or_null.clone(), "null", Dlq(ValueOutOfRange, "/f"))),
        case(
            json!({"enum": ["a", 1]}),
            "null",
            Dlq(ValueOutOfRange, "/f"),
        ),
        case(
            json!({"enum": ["a", 1]}),
            "true",
            Dlq(ValueOutOfRange, "/f"),
        ),
        case(
            json!({"type": ["integer", "null"], "const": 3}),
            "4",
            Dlq(ValueOutOfRange, "/f"),
        ),
        case(
            json!({"type": ["integer", "null"], "const": 3}),
            "null",
            Dlq(ValueOutOfRange, "/f"),
        ),
        case(json!({"const": "x"}), r#""y""#, Dlq(ValueOutOfRange, "/f")),
        case(
            json!({"type": "array", "items": {"type": ["string", "null"], "enum": ["a"]}}),
            r#"["a",null]"#,
            Dlq(ValueOutOfRange, "/f/1"),
        ),
        case(
            json!({"type": "object", "additionalProperties": {"enum": ["a"]}}),
            r#"{"k":null}"#,
            Dlq(ValueOutOfRange, "/f/k"),
        ),
        // ... and null where a union's null branch allows it.
        case(
            json!({"oneOf": [{"type": "string", "enum": ["a"]}, {"type": "null"}]}),
            "null",
            Row(Value::Null),
        ),
        case(
            json!({"type": ["string", "null"], "enum": ["a", null]}),
            "null",
            Row(Value::Null),
        ),
        // enum/const with a value of a type that `type` refuses.
        case(ab.clone(), "1", Dlq(TypeMismatch, "/f")),
        case(ab.clone(), "null", Dlq(TypeMismatch, "/f")),
        required(case(ab.clone(), "null", Dlq(MissingRequiredField, "/f"))),
        case(
            json!({"type": "boolean", "const": true}),
            r#""true""#,
            Dlq(TypeMismatch, "/f"),
        ),
        case(
            json!({"type": "integer", "enum": [1, 2]}),
            "1.5",
            Dlq(TypeMismatch, "/f"),
        ),
        case(
            json!({"type": "integer", "enum": [1, 2]}),
            "1.0",
            Row(json!("1")),
        ),
        draft04(case(
            json!({"type": "integer", "enum": [1, 2]}),
            "1.0",
            Dlq(TypeMismatch, "/f"),
        )),
        // Sibling keywords of enum/const apply to the members.
        case(
            json!({"type": "integer", "enum": [1, 5], "maximum": 3}),
            "5",
            Dlq(ValueOutOfRange, "/f"),
        ),
        case(
            json!({"type": "integer", "enum": [1, 5], "maximum": 3}),
            "1",
            Row(json!("1")),
        ),
        case(
            json!({"enum": [1, 1.5], "multipleOf": 1}),
            "1.5",
            Dlq(ValueOutOfRange, "/f"),
        ),
        case(
            json!({"enum": ["a", "bb"], "minLength": 2}),
            r#""a""#,
            Dlq(ValueOutOfRange, "/f"),
        ),
        case(
            json!({"enum": ["a", "bb"], "minLength": 2}),
            r#""bb""#,
            Row(json!("bb")),
        ),
        case(
            json!({"type": "string", "enum": ["10.0.0.1", "x"], "format": "ipv4"}),
            r#""x""#,
            Dlq(ValueOutOfRange, "/f"),
        ),
        case(
            json!({"type": "string", "enum": ["2024-01-01T00:00:00Z", "soon"], "format": "date-time"}),
            r#""soon""#,
            Dlq(ValueOutOfRange, "/f"),
        ),
        case(
            json!({"type": "string", "enum": ["2024-01-01T00:00:00Z", "soon"], "format": "date-time"}),
            r#""2024-01-01T00:00:00Z""#,
            Row(json!("2024-01-01T00:00:00Z")),
        ),
        case(
            json!({"enum": [{}, {"a": 1}], "minProperties": 1}),
            "{}",
            Dlq(ValueOutOfRange, "/f"),
        ),
        case(
            json!({"enum": [{"b": 1}, {"a": 1}], "required": ["a"]}),
            r#"{"b":1}"#,
            Dlq(ValueOutOfRange, "/f"),
        ),
        case(
            json!({"enum": [[1], [1, 2]], "maxItems": 1}),
            "[1,2]",
            Dlq(ValueOutOfRange, "/f"),
        ),
        case(
            json!({"enum": [[1], [1, 2]], "maxItems": 1}),
            "[1]",
            Row(json!("[1]")),
        ),
        // Numeric keywords.
        case(
            json!({"type": "integer", "minimum": 3}),
            "2",
            Dlq(ValueOutOfRange, "/f"),
        ),
        case(
            json!({"type": "integer", "exclusiveMaximum": 10}),
            "10",
            Dlq(ValueOutOfRange, "/f"),
        ),
        case(
            json!({"type": "integer", "multipleOf": 3}),
            "4",
            Dlq(ValueOutOfRange, "/f"),
        ),
        case(
            json!({"type": "number", "exclusiveMinimum": 0}),
            "0",
            Dlq(ValueOutOfRange, "/f"),
        ),
        case(
            json!({"type": "number", "maximum": 1.5}),
            "1.6",
            Dlq(ValueOutOfRange, "/f"),
        ),
        case(
            json!({"type": "number", "multipleOf": 0.01}),
            "1.234",
            Dlq(ValueOutOfRange, "/f"),
        ),
        case(
            json!({"type": "number", "multipleOf": 0.5}),
            "2.25",
            Dlq(ValueOutOfRange, "/f"),
        ),
        draft04(case(
            json!({"type": "number", "minimum": 0, "exclusiveMinimum": true}),
            "0",
            Dlq(ValueOutOfRange, "/f"),
        )),
        case(
            json!({"type": ["integer", "null"], "minimum": 3}),
            "null",
            Row(Value::Null),
        ),
        // Beyond the column: int (bounds within 32 bits), long, decimal(38), double.
        case(
            json!({"type": "integer", "minimum": 0, "maximum": 100}),
            "3000000000",
            Dlq(ValueOutOfRange, "/f"),
        ),
        case(
            json!({"type": "integer"}),
            "9223372036854775808",
            Dlq(ValueOutOfRange, "/f"),
        ),
        case(
            json!({"type": "integer"}),
            "1e19",
            Dlq(ValueOutOfRange, "/f"),
        ),
        case(
            json!({"type": "integer"}),
            "-9223372036854775808",
            Row(json!(i64::MIN)),
        ),
        case(
            json!({"type": "number", "multipleOf": 0.01}),
            "1e37",
            Dlq(ValueOutOfRange, "/f"),
        ),
        case(
            json!({"type": "number"}),
            "1e400",
            Dlq(ValueOutOfRange, "/f"),
        ),
        // Integer-ness is the type's (per draft): TYPE_MISMATCH.
        case(json!({"type": "integer"}), "1.5", Dlq(TypeMismatch, "/f")),
        case(json!({"type": "integer"}), "1e2", Row(json!(100))),
        draft04(case(
            json!({"type": "integer"}),
            "1e2",
            Dlq(TypeMismatch, "/f"),
        )),
        // String keywords.
        case(
            json!({"type": "string", "pattern": "^a"}),
            r#""b""#,
            Dlq(ValueOutOfRange, "/f"),
        ),
        case(
            json!({"type": "string", "minLength": 2}),
            r#""a""#,
            Dlq(ValueOutOfRange, "/f"),
        ),
        case(
            json!({"type": "string", "maxLength": 1}),
            r#""ab""#,
            Dlq(ValueOutOfRange, "/f"),
        ),
        case(
            json!({"type": "string", "format": "ipv4"}),
            r#""10.0.0""#,
            Dlq(ValueOutOfRange, "/f"),
        ),
        case(
            json!({"type": "string", "format": "ipv6"}),
            r#""::g""#,
            Dlq(ValueOutOfRange, "/f"),
        ),
        case(
            json!({"type": ["string", "null"], "minLength": 2}),
            "null",
            Row(Value::Null),
        ),
        case(
            json!({"type": "string", "format": "uuid", "maxLength": 36}),
            r#""x""#,
            Dlq(TypeMismatch, "/f"),
        ),
        case(
            json!({"type": "string", "format": "date"}),
            r#""2023-02-29""#,
            Dlq(TypeMismatch, "/f"),
        ),
        case(json!({"type": "string"}), "null", Dlq(TypeMismatch, "/f")),
        required(case(
            json!({"type": "string"}),
            "null",
            Dlq(MissingRequiredField, "/f"),
        )),
        // Counts and unknown keys.
        case(
            json!({"type": "array", "items": {"type": "string"}, "minItems": 1}),
            "[]",
            Dlq(ValueOutOfRange, "/f"),
        ),
        case(
            json!({"type": "array", "items": {"type": "string"}, "maxItems": 1}),
            r#"["a","b"]"#,
            Dlq(ValueOutOfRange, "/f"),
        ),
        case(
            json!({"type": "object", "additionalProperties": {"type": "string"}, "maxProperties": 1}),
            r#"{"a":"x","b":"y"}"#,
            Dlq(ValueOutOfRange, "/f"),
        ),
        case(
            json!({"type": "object", "properties": {"a": {"type": "string"}}, "minProperties": 2}),
            r#"{"a":"x"}"#,
            Dlq(ValueOutOfRange, "/f"),
        ),
        case(
            json!({"type": "object", "properties": {"a": {"type": "string"}}, "additionalProperties": false}),
            r#"{"b":1}"#,
            Dlq(ValueOutOfRange, "/f/b"),
        ),
    ]
}

fn run(c: &Case) -> Result<Value, DlqReason> {
    let mut required = vec!["event_time"];
    if c.required {
        required.push("f");
    }
    let mut doc = json!({
        "type": "object",
        "properties": {
            "event_time": {"type": "string", "format": "date-time"},
            "f": c.schema,
        },
        "required": required,
    });
    if c.draft04 {
        doc["$schema"] = json!("http://json-schema.org/draft-04/schema#");
    }
    let m = Arc::new(
        MappedSchema::from_json_schema(&doc, "event_time")
            .unwrap_or_else(|e| panic!("{}: {e}", c.schema)),
    );
    let mut conv = Converter::try_new(m.clone(), m.arrow_schema()).unwrap();
    let rec = format!(r#"{{"event_time":"2024-06-01T10:00:00Z","f":{}}}"#, c.value);
    conv.push(rec.as_bytes())?;
    Ok(row_to_json(&conv.finish(), 0)["f"].clone())
}

#[test]
fn a_value_the_type_allows_but_a_later_keyword_refuses_is_out_of_range() {
    let mut wrong = Vec::new();
    for c in cases() {
        let got = run(&c);
        let ok = match (&c.want, &got) {
            (Row(v), Ok(g)) => v == g,
            (Dlq(code, field), Err(e)) => e.code == *code && e.field == *field,
            _ => false,
        };
        if !ok {
            let got = match got {
                Ok(v) => format!("row {v}"),
                Err(e) => format!("{} at {:?} ({})", e.code.as_str(), e.field, e.message),
            };
            wrong.push(format!(
                "{}{}{} with {}: want {:?}, got {got}",
                c.schema,
                if c.required { " (required)" } else { "" },
                if c.draft04 { " (draft-04)" } else { "" },
                c.value,
                c.want
            ));
        }
    }
    assert!(
        wrong.is_empty(),
        "{} cases wrong:\n{}",
        wrong.len(),
        wrong.join("\n")
    );
}

#[test]
fn enum_keywords_floe_would_not_check_on_the_members_are_refused() {
    let map = |f: Value| {
        let doc = json!({
            "type": "object",
            "properties": {"event_time": {"type": "string", "format": "date-time"}, "f": f},
        });
        MappedSchema::from_json_schema(&doc, "event_time").map(|_| ())
    };
    for f in [
        json!({"enum": [{"a": 1}], "properties": {"a": {"type": "string"}}}),
        json!({"enum": [{"a": 1}], "additionalProperties": false}),
        json!({"enum": [[1, 1]], "uniqueItems": true}),
        json!({"enum": [[1]], "items": {"type": "string"}}),
        // Every member ruled out by a sibling keyword: no value is allowed.
        json!({"type": "integer", "enum": [5, 6], "maximum": 3}),
        json!({"enum": [{}], "required": ["a"]}),
    ] {
        assert!(map(f.clone()).is_err(), "{f} must be refused");
    }
    // The same keywords next to members of other types do not apply.
    for f in [
        json!({"type": "string", "enum": ["a"], "properties": {"a": {"type": "string"}}}),
        json!({"enum": ["a", 1], "items": {"type": "string"}, "maximum": 3}),
    ] {
        assert!(map(f.clone()).is_ok(), "{f} must be accepted");
    }
}
