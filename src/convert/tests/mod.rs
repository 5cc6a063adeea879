//! Unit tests of the converter: one group per value rule of docs/design.md, rollback, Arrow shape, and
//! property tests (random bytes never panic; generated records round-trip).

use std::sync::Arc;

use arrow_array::{Array, RecordBatch};
use proptest::prelude::*;
use serde_json::{json, Map, Value};

use super::render::row_to_json;
use super::*;
use crate::schema::MappedSchema;

fn with_props(props: Value) -> Value {
    let mut p = props.as_object().cloned().unwrap_or_default();
    p.insert(
        "event_time".into(),
        json!({"type": "string", "format": "date-time"}),
    );
    json!({"type": "object", "properties": p, "required": ["event_time"]})
}

fn conv(schema: &Value) -> Converter {
    let m = Arc::new(MappedSchema::from_json_schema(schema, "event_time").unwrap());
    let arrow = m.arrow_schema();
    Converter::try_new(m, arrow).unwrap()
}

const ET: &str = r#""event_time":"2024-06-01T10:00:00Z""#;

/// Pushes `fields` (JSON members, without braces) plus a valid event_time; returns the row.
fn row(c: &mut Converter, fields: &str) -> Result<Map<String, Value>, DlqReason> {
    let rec = if fields.is_empty() {
        format!("{{{ET}}}")
    } else {
        format!("{{{ET},{fields}}}")
    };
    raw_row(c, rec.as_bytes())
}

fn raw_row(c: &mut Converter, rec: &[u8]) -> Result<Map<String, Value>, DlqReason> {
    c.push(rec)?;
    let b = c.finish();
    assert_eq!(b.num_rows(), 1);
    Ok(row_to_json(&b, 0))
}

fn val(c: &mut Converter, fields: &str, name: &str) -> Value {
    match row(c, fields) {
        Ok(r) => r[name].clone(),
        Err(e) => panic!("{fields}: {e}"),
    }
}

fn code(c: &mut Converter, fields: &str) -> DlqCode {
    match row(c, fields) {
        Ok(r) => panic!("{fields}: expected a DLQ, got {r:?}"),
        Err(e) => e.code,
    }
}

fn raw_code(c: &mut Converter, rec: &[u8]) -> DlqCode {
    match c.push(rec) {
        Ok(_) => panic!("{}: expected a DLQ", String::from_utf8_lossy(rec)),
        Err(e) => e.code,
    }
}

use DlqCode::*;

#[test]
fn dlq_codes_are_spelled_as_in_the_design() {
    let s: Vec<_> = DlqCode::ALL.iter().map(DlqCode::as_str).collect();
    assert_eq!(
        s,
        [
            "DESERIALIZATION_ERROR",
            "INVALID_SCHEMA",
            "SCHEMA_MISMATCH",
            "MISSING_REQUIRED_FIELD",
            "MISSING_PARTITION_VALUE",
            "TYPE_MISMATCH",
            "VALUE_OUT_OF_RANGE",
            "RECORD_TOO_LARGE",
            "UNROUTABLE",
            "INVALID_ENVELOPE"
        ]
    );
}

#[test]
fn date_time_is_strict_rfc3339_normalized_to_utc_and_gives_the_hour() {
    let mut c = conv(&with_props(json!({})));
    let h = c
        .push(br#"{"event_time":"2024-06-01T10:00:00.123456+05:30"}"#)
        .unwrap();
    assert_eq!(h, 477_004);
    let r = row_to_json(&c.finish(), 0);
    assert_eq!(r["event_time"], "2024-06-01T04:30:00.123456+00:00");
    assert_eq!(
        c.push(br#"{"event_time":"1969-12-31T23:59:59.999999999Z"}"#),
        Ok(-1)
    );
    let e = c
        .push(br#"{"event_time":"2024-06-01 10:00:00Z"}"#)
        .unwrap_err();
    assert_eq!((e.code, e.field.as_str()), (TypeMismatch, "/event_time"));
    let e = c
        .push(br#"{"event_time":"0000-01-01T00:30:00+01:00"}"#)
        .unwrap_err();
    assert_eq!(e.code, ValueOutOfRange);
    // Escaped characters inside a date-time string are the same string.
    assert_eq!(
        c.push(br#"{"event_time":"2024-06-01\u005410:00:00Z"}"#),
        Ok(477_010)
    );
}

#[test]
fn missing_or_null_partition_value() {
    let mut c = conv(&with_props(json!({"a": {"type": "string"}})));
    let e = c.push(br#"{"a":"x"}"#).unwrap_err();
    assert_eq!(
        (e.code, e.field.as_str()),
        (MissingPartitionValue, "/event_time")
    );
    assert_eq!(
        raw_code(&mut c, br#"{"event_time":null}"#),
        MissingPartitionValue
    );
    assert_eq!(raw_code(&mut c, br#"{"event_time":5}"#), TypeMismatch);
    assert_eq!(c.num_rows(), 0);
}

/// Without a partition field (a spec without a time transform, docs/partitioning.md) a record
/// needs no time value: an optional date-time may be absent, and is still checked.
#[test]
fn without_a_partition_field_no_record_needs_a_time_value() {
    let schema = json!({"type": "object", "properties": {
        "a": {"type": "string"},
        "event_time": {"type": "string", "format": "date-time"},
    }});
    let m = Arc::new(MappedSchema::from_json_schema(&schema, "").unwrap());
    let arrow = m.arrow_schema();
    let mut c = Converter::try_new(m, arrow).unwrap();
    assert!(c.push(br#"{"a":"x"}"#).is_ok());
    assert!(c.push(br#"{"event_time":"2024-06-01T10:00:00Z"}"#).is_ok());
    assert_eq!(raw_code(&mut c, br#"{"event_time":5}"#), TypeMismatch);
    assert_eq!(c.num_rows(), 2);
}

#[test]
fn date_and_time_columns() {
    let mut c = conv(&with_props(json!({
        "d": {"type": "string", "format": "date"},
        "t": {"type": "string", "format": "time"},
    })));
    assert_eq!(val(&mut c, r#""d":"2024-02-29""#, "d"), "2024-02-29");
    assert_eq!(code(&mut c, r#""d":"2023-02-29""#), TypeMismatch);
    assert_eq!(
        val(&mut c, r#""t":"10:15:30.123456789+05:30""#, "t"),
        "04:45:30.123456"
    );
    assert_eq!(val(&mut c, r#""t":"23:59:60Z""#, "t"), "23:59:59.999999");
    assert_eq!(code(&mut c, r#""t":"10:15:30""#), TypeMismatch);
}

#[test]
fn integers_draft07_accept_zero_fractions_draft04_only_literals() {
    let s = with_props(
        json!({"q": {"type": "integer"}, "i": {"type": "integer", "minimum": 0, "maximum": 10}}),
    );
    let mut c = conv(&s);
    assert_eq!(val(&mut c, r#""q":1.0"#, "q"), 1);
    assert_eq!(val(&mut c, r#""q":1e2"#, "q"), 100);
    assert_eq!(val(&mut c, r#""q":-0.0"#, "q"), 0);
    assert_eq!(val(&mut c, r#""q":12.50e1"#, "q"), 125);
    assert_eq!(code(&mut c, r#""q":1.5"#), TypeMismatch);
    assert_eq!(code(&mut c, r#""q":1e-1"#), TypeMismatch);
    let mut s4 = s.clone();
    s4["$schema"] = json!("http://json-schema.org/draft-04/schema#");
    let mut c4 = conv(&s4);
    assert_eq!(val(&mut c4, r#""q":100"#, "q"), 100);
    assert_eq!(code(&mut c4, r#""q":1.0"#), TypeMismatch);
    assert_eq!(code(&mut c4, r#""q":1e2"#), TypeMismatch);
}

#[test]
fn integers_beyond_the_column_are_out_of_range_never_through_f64() {
    let mut c = conv(&with_props(json!({
        "n": {"type": "integer"},
        "i": {"type": "integer", "minimum": -5, "maximum": 2147483647},
    })));
    assert_eq!(
        val(&mut c, r#""n":9223372036854775807"#, "n"),
        json!(9223372036854775807i64)
    );
    assert_eq!(
        val(&mut c, r#""n":-9223372036854775808"#, "n"),
        json!(i64::MIN)
    );
    assert_eq!(
        val(&mut c, r#""n":9007199254740993"#, "n"),
        json!(9007199254740993i64)
    );
    for bad in [
        "9223372036854775808",
        "-9223372036854775809",
        "18446744073709551616",
        "1.0e19",
        "1e400",
        "123456789012345678901234567890123456789012",
    ] {
        assert_eq!(
            code(&mut c, &format!(r#""n":{bad}"#)),
            ValueOutOfRange,
            "{bad}"
        );
    }
    assert_eq!(val(&mut c, r#""i":2147483647"#, "i"), 2147483647);
    assert_eq!(code(&mut c, r#""i":2147483648"#), ValueOutOfRange);
    assert_eq!(code(&mut c, r#""i":-6"#), ValueOutOfRange);
    assert_eq!(val(&mut c, r#""i":-5"#, "i"), -5);
}

#[test]
fn integer_multiple_of_is_exact() {
    let mut c = conv(&with_props(
        json!({"n": {"type": "integer", "multipleOf": 3}, "h": {"type": "integer", "multipleOf": 0.5}}),
    ));
    assert_eq!(val(&mut c, r#""n":-9"#, "n"), -9);
    assert_eq!(code(&mut c, r#""n":10"#), ValueOutOfRange);
    assert_eq!(val(&mut c, r#""h":7"#, "h"), 7);
}

#[test]
fn no_coercion_between_json_types() {
    let mut c = conv(&with_props(json!({
        "q": {"type": "integer"}, "p": {"type": "number", "multipleOf": 0.01},
        "f": {"type": "boolean"}, "s": {"type": "string"}, "d": {"type": "number"},
        "o": {"type": "object", "properties": {"x": {"type": "string"}}},
        "l": {"type": "array", "items": {"type": "string"}},
    })));
    for bad in [
        r#""q":"1234""#,
        r#""p":"12.50""#,
        r#""f":"true""#,
        r#""f":1"#,
        r#""s":123"#,
        r#""s":true"#,
        r#""d":"1.5""#,
        r#""o":"x""#,
        r#""o":[]"#,
        r#""l":{}"#,
        r#""l":"a""#,
    ] {
        let e = row(&mut c, bad).unwrap_err();
        assert_eq!(e.code, TypeMismatch, "{bad}");
        let name = &bad[1..2];
        assert_eq!(e.field, format!("/{name}"), "{bad}");
    }
}

#[test]
fn decimals_are_exact_from_the_number_text() {
    let text = r#"{"type":"object","required":["event_time"],"properties":{
        "event_time":{"type":"string","format":"date-time"},
        "x":{"type":"number","multipleOf":1e-10},"y":{"type":"number","multipleOf":0.01},
        "w":{"type":"number","multipleOf":1},"v":{"type":"number","multipleOf":0.5},
        "m":{"type":"number","multipleOf":0.01,"minimum":0,"exclusiveMaximum":100}}}"#;
    let mut c = conv(&serde_json::from_str(text).unwrap());
    assert_eq!(val(&mut c, r#""x":1e-10"#, "x"), "0.0000000001");
    assert_eq!(val(&mut c, r#""x":123.4567890123"#, "x"), "123.4567890123");
    assert_eq!(
        code(&mut c, r#""x":12345678901234567890123456789.0000000001"#),
        ValueOutOfRange
    );
    assert_eq!(
        val(
            &mut c,
            r#""x":1234567890123456789012345678.0000000001"#,
            "x"
        ),
        "1234567890123456789012345678.0000000001"
    );
    assert_eq!(val(&mut c, r#""w":1.0"#, "w"), "1");
    assert_eq!(val(&mut c, r#""w":1E+2"#, "w"), "100");
    assert_eq!(val(&mut c, r#""v":2.5"#, "v"), "2.5");
    assert_eq!(code(&mut c, r#""v":2.25"#), ValueOutOfRange);
    assert_eq!(code(&mut c, r#""v":2.3"#), ValueOutOfRange);
    assert_eq!(val(&mut c, r#""y":4.02"#, "y"), "4.02");
    assert_eq!(val(&mut c, r#""y":-0.5"#, "y"), "-0.50");
    assert_eq!(val(&mut c, r#""y":1.990000"#, "y"), "1.99");
    assert_eq!(code(&mut c, r#""y":1.999"#), ValueOutOfRange);
    assert_eq!(val(&mut c, r#""m":99.99"#, "m"), "99.99");
    assert_eq!(code(&mut c, r#""m":100"#), ValueOutOfRange);
    assert_eq!(code(&mut c, r#""m":-0.01"#), ValueOutOfRange);
    assert_eq!(val(&mut c, r#""m":0"#, "m"), "0.00");
}

#[test]
fn decimal_fast_path_keeps_precision_limits() {
    let text = r#"{"type":"object","required":["event_time"],"properties":{
        "event_time":{"type":"string","format":"date-time"},
        "s":{"type":"number","multipleOf":1e-30},"t":{"type":"number","multipleOf":0.25}}}"#;
    let mut c = conv(&serde_json::from_str(text).unwrap());
    assert_eq!(
        val(&mut c, r#""s":12345678.1"#, "s"),
        "12345678.100000000000000000000000000000"
    );
    assert_eq!(code(&mut c, r#""s":123456789.1"#), ValueOutOfRange);
    assert_eq!(
        code(&mut c, r#""s":-123456789012345678901234567890.5"#),
        ValueOutOfRange
    );
    assert_eq!(val(&mut c, r#""t":-1.75"#, "t"), "-1.75");
    assert_eq!(code(&mut c, r#""t":1.3"#), ValueOutOfRange);
    assert_eq!(val(&mut c, r#""t":0.50"#, "t"), "0.50");
}

#[test]
fn doubles_reject_nan_infinity_and_overflow() {
    let mut c = conv(&with_props(
        json!({"d": {"type": "number"}, "b": {"type": "number", "maximum": 0.3}}),
    ));
    assert_eq!(val(&mut c, r#""d":42"#, "d"), json!(42.0));
    assert_eq!(
        val(&mut c, r#""d":-0.0"#, "d").as_f64().unwrap().to_bits(),
        (-0.0f64).to_bits()
    );
    assert_eq!(val(&mut c, r#""d":1e-400"#, "d"), json!(0.0));
    assert_eq!(code(&mut c, r#""d":1e400"#), ValueOutOfRange);
    assert_eq!(code(&mut c, r#""d":-1e400"#), ValueOutOfRange);
    for bad in [
        "NaN",
        "Infinity",
        "-Infinity",
        "+1",
        ".5",
        "01",
        "1.",
        "0x10",
    ] {
        assert_eq!(
            code(&mut c, &format!(r#""d":{bad}"#)),
            DeserializationError,
            "{bad}"
        );
    }
    // Bounds compare the exact text, not the nearest double.
    assert_eq!(val(&mut c, r#""b":0.3"#, "b"), json!(0.3));
    assert_eq!(code(&mut c, r#""b":0.30000000000000001"#), ValueOutOfRange);
}

#[test]
fn strings_reject_invalid_utf8_lone_surrogates_and_control_characters() {
    let mut c = conv(&with_props(json!({"s": {"type": "string"}})));
    assert_eq!(val(&mut c, r#""s":"\ud83d\ude00 \u00e9\"""#, "s"), "😀 é\"");
    assert_eq!(code(&mut c, r#""s":"\ud83d""#), DeserializationError);
    assert_eq!(code(&mut c, r#""s":"\ude00x""#), DeserializationError);
    // Also in a field that would be dropped.
    assert_eq!(code(&mut c, r#""zz":"\udc00""#), DeserializationError);
    assert_eq!(code(&mut c, "\"s\":\"a\tb\""), DeserializationError);
    let mut rec = format!("{{{ET},\"s\":\"").into_bytes();
    rec.extend_from_slice(&[0xff, 0xfe]);
    rec.extend_from_slice(b"\"}");
    assert_eq!(raw_code(&mut c, &rec), DeserializationError);
    let mut rec = format!("{{{ET},\"dropped\":\"").into_bytes();
    rec.extend_from_slice(&[0xc3]);
    rec.extend_from_slice(b"\"}");
    assert_eq!(raw_code(&mut c, &rec), DeserializationError);
}

#[test]
fn duplicate_keys_are_refused_in_every_object() {
    let mut c = conv(&with_props(json!({
        "s": {"type": "string"},
        "o": {"type": "object", "properties": {"x": {"type": "string"}}},
        "m": {"type": "object", "additionalProperties": {"type": "string"}},
    })));
    for bad in [
        r#""s":"a","s":"b""#,
        r#""s":"a","\u0073":"b""#,
        r#""z":1,"z":2"#,
        r#""z":{"a":1,"a":1}"#,
        r#""z":[{"q":1},{"k":{"a":[],"a":[]}}]"#,
        r#""o":{"x":"1","x":"2"}"#,
        r#""o":{"y":1,"y":2}"#,
        r#""m":{"k":"1","k":"2"}"#,
        r#""m":{"a":"1","b":"1","c":"1","d":"1","e":"1","f":"1","g":"1","h":"1","i":"1","a":"9"}"#,
    ] {
        assert_eq!(code(&mut c, bad), DeserializationError, "{bad}");
    }
    assert_eq!(
        raw_code(&mut c, format!("{{{ET},{ET}}}").as_bytes()),
        DeserializationError
    );
    // Keys that differ only after unescaping are distinct when they differ.
    assert!(row(&mut c, r#""z":{"a":1,"\u0062":2}"#).is_ok());
}

#[test]
fn nesting_beyond_128_is_refused_even_in_dropped_fields() {
    let mut c = conv(&with_props(json!({})));
    let nest = |n: usize| format!("\"x\":{}{}", "[".repeat(n), "]".repeat(n));
    // The record object is level 1.
    assert!(row(&mut c, &nest(127)).is_ok());
    assert_eq!(code(&mut c, &nest(128)), DeserializationError);
    assert_eq!(code(&mut c, &nest(100_000)), DeserializationError);
    let objs = |n: usize| format!("\"x\":{}1{}", "{\"a\":".repeat(n), "}".repeat(n));
    assert!(row(&mut c, &objs(127)).is_ok());
    assert_eq!(code(&mut c, &objs(128)), DeserializationError);
}

#[test]
fn base64_is_rfc4648_standard_padded_without_whitespace() {
    let mut c = conv(&with_props(
        json!({"b": {"type": "string", "contentEncoding": "base64"}}),
    ));
    assert_eq!(val(&mut c, r#""b":"aGk=""#, "b"), "6869");
    assert_eq!(val(&mut c, r#""b":"""#, "b"), "");
    assert_eq!(val(&mut c, r#""b":"+/8=""#, "b"), "fbff");
    assert_eq!(val(&mut c, r#""b":"\/w==""#, "b"), "ff");
    for bad in [
        r#""aGk""#,
        r#""aG k=""#,
        r#""-_8=""#,
        r#""aGk=\n""#,
        r#""aGl=""#,
        r#""a===""#,
    ] {
        assert_eq!(
            code(&mut c, &format!(r#""b":{bad}"#)),
            TypeMismatch,
            "{bad}"
        );
    }
}

#[test]
fn uuid_is_hyphenated_either_case() {
    let mut c = conv(&with_props(
        json!({"u": {"type": "string", "format": "uuid"}}),
    ));
    assert_eq!(
        val(&mut c, r#""u":"3F36E6D8-d20e-43b7-90ea-3ad724880d60""#, "u"),
        "3f36e6d8-d20e-43b7-90ea-3ad724880d60"
    );
    for bad in [
        "3f36e6d8d20e43b790ea3ad724880d60",
        "{3f36e6d8-d20e-43b7-90ea-3ad724880d60}",
        "urn:uuid:3f36e6d8-d20e-43b7-90ea-3ad724880d60",
        "3f36e6d8-d20e-43b7-90ea-3ad724880d6g",
        "3f36e6d8-d20e-43b7-90ea3-ad724880d60",
    ] {
        assert_eq!(
            code(&mut c, &format!(r#""u":"{bad}""#)),
            TypeMismatch,
            "{bad}"
        );
    }
}

#[test]
fn enum_members_are_stored_as_strings_and_null_stays_null() {
    let mut c = conv(&with_props(
        json!({"e": {"enum": ["a", 1.0, 2.5, true, null, {"k": [1], "b": 1e21}]}}),
    ));
    assert_eq!(val(&mut c, r#""e":"a""#, "e"), "a");
    assert_eq!(val(&mut c, r#""e":1.0"#, "e"), "1");
    assert_eq!(val(&mut c, r#""e":25e-1"#, "e"), "2.5");
    assert_eq!(val(&mut c, r#""e":true"#, "e"), "true");
    assert_eq!(val(&mut c, r#""e":null"#, "e"), Value::Null);
    assert_eq!(
        val(&mut c, r#""e":{"b":1E21,"k":[1.0]}"#, "e"),
        r#"{"b":1e+21,"k":[1]}"#
    );
    assert_eq!(code(&mut c, r#""e":"b""#), ValueOutOfRange);
    assert_eq!(code(&mut c, r#""e":false"#), ValueOutOfRange);
    assert_eq!(code(&mut c, r#""e":{"k":[2]}"#), ValueOutOfRange);
}

#[test]
fn string_keywords_count_code_points() {
    let mut c = conv(&with_props(json!({
        "s": {"type": "string", "minLength": 2, "maxLength": 3, "pattern": "^[a-zé]+$"},
        "d": {"type": "string", "pattern": "^\\d+$"},
        "ip": {"type": "string", "format": "ipv4"},
    })));
    assert_eq!(val(&mut c, r#""s":"éé""#, "s"), "éé");
    assert_eq!(code(&mut c, r#""s":"é""#), ValueOutOfRange);
    assert_eq!(code(&mut c, r#""s":"abcd""#), ValueOutOfRange);
    assert_eq!(code(&mut c, r#""s":"AB""#), ValueOutOfRange);
    assert_eq!(code(&mut c, "\"d\":\"1\u{09EA}\""), ValueOutOfRange);
    assert_eq!(val(&mut c, r#""ip":"10.0.0.1""#, "ip"), "10.0.0.1");
    assert_eq!(code(&mut c, r#""ip":"10.0.0""#), ValueOutOfRange);
}

#[test]
fn required_fields_missing_or_null() {
    let mut c = conv(&json!({
        "type": "object",
        "properties": {
            "event_time": {"type": "string", "format": "date-time"},
            "r": {"type": "string"},
            "rn": {"type": ["string", "null"]},
            "o": {"type": "string"},
            "nested": {"type": "object", "properties": {"k": {"type": "integer"}}, "required": ["k"]},
        },
        "required": ["event_time", "r", "rn"],
    }));
    let e = row(&mut c, r#""rn":null"#).unwrap_err();
    assert_eq!((e.code, e.field.as_str()), (MissingRequiredField, "/r"));
    assert_eq!(code(&mut c, r#""r":null,"rn":null"#), MissingRequiredField);
    assert_eq!(
        code(&mut c, r#""r":"x""#),
        MissingRequiredField,
        "rn must be present"
    );
    let r = row(&mut c, r#""r":"x","rn":null"#).unwrap();
    assert_eq!(
        (r["rn"].clone(), r["o"].clone(), r["nested"].clone()),
        (Value::Null, Value::Null, Value::Null)
    );
    assert_eq!(code(&mut c, r#""r":"x","rn":null,"o":null"#), TypeMismatch);
    let e = row(&mut c, r#""r":"x","rn":"y","nested":{}"#).unwrap_err();
    assert_eq!(
        (e.code, e.field.as_str()),
        (MissingRequiredField, "/nested/k")
    );
    assert_eq!(
        val(&mut c, r#""r":"x","rn":"y","nested":{"k":5}"#, "nested"),
        json!({"k": 5})
    );
}

#[test]
fn maps_and_lists_with_their_keywords() {
    let mut c = conv(&with_props(json!({
        "m": {"type": "object", "additionalProperties": {"type": ["string", "null"]}, "maxProperties": 2},
        "l": {"type": "array", "items": {"type": "integer"}, "minItems": 1, "maxItems": 3},
    })));
    assert_eq!(
        val(&mut c, r#""m":{"k":null,"":"e"}"#, "m"),
        json!({"k": null, "": "e"})
    );
    assert_eq!(val(&mut c, r#""m":{}"#, "m"), json!({}));
    assert_eq!(
        code(&mut c, r#""m":{"a":"1","b":"2","c":"3"}"#),
        ValueOutOfRange
    );
    assert_eq!(val(&mut c, r#""l":[1,2,3]"#, "l"), json!([1, 2, 3]));
    assert_eq!(code(&mut c, r#""l":[]"#), ValueOutOfRange);
    assert_eq!(code(&mut c, r#""l":[1,2,3,4]"#), ValueOutOfRange);
    let e = row(&mut c, r#""l":[1,null]"#).unwrap_err();
    assert_eq!((e.code, e.field.as_str()), (TypeMismatch, "/l/1"));
    let e = row(&mut c, r#""m":{"a/b":5}"#).unwrap_err();
    assert_eq!((e.code, e.field.as_str()), (TypeMismatch, "/m/a~1b"));
}

#[test]
fn dlq_field_is_the_json_pointer_of_the_first_bad_value() {
    let mut c = conv(&with_props(json!({
        "l": {"type": "array", "items": {"type": "object", "properties": {
            "a": {"type": "integer"},
            "m": {"type": "object", "additionalProperties": {"type": "array", "items": {"type": "boolean"}}},
        }, "required": ["a"]}},
        "z~/": {"type": "string"},
    })));
    for (rec, ptr) in [
        (r#""l":[{"a":1},{"a":"x"}]"#, "/l/1/a"),
        (
            r#""l":[{"a":1,"m":{"k":[true]}},{"a":2,"m":{"k":[true],"q/r":[false,1]}}]"#,
            "/l/1/m/q~1r/1",
        ),
        (r#""l":[{"a":1},{}]"#, "/l/1/a"),
        (r#""l":[{"a":1},{"a":2}],"z~/":5"#, "/z~0~1"),
        (r#""l":[{"a":"first"}],"z~/":5"#, "/l/0/a"),
        (r#""l":{}"#, "/l"),
        (r#""l":[7]"#, "/l/0"),
    ] {
        let e = row(&mut c, rec).unwrap_err();
        assert_eq!(e.field, ptr, "{rec}");
    }
    assert_eq!(raw_row(&mut c, b"[]").unwrap_err().field, "");
}

#[test]
fn additional_properties_false_forbids_unknown_keys() {
    let mut s = with_props(json!({"a": {"type": "string"}}));
    s["additionalProperties"] = json!(false);
    let mut c = conv(&s);
    assert!(row(&mut c, r#""a":"x""#).is_ok());
    let e = row(&mut c, r#""b":1"#).unwrap_err();
    assert_eq!((e.code, e.field.as_str()), (ValueOutOfRange, "/b"));
}

#[test]
fn keys_in_any_order_and_changing_orders_map_to_their_fields() {
    let mut c = conv(&with_props(json!({
        "a": {"type": "integer"}, "b": {"type": "string"}, "c": {"type": "boolean"},
    })));
    let orders = [
        r#"{"a":1,"b":"x","c":true,"event_time":"2024-06-01T10:00:00Z"}"#,
        r#"{"c":false,"event_time":"2024-06-01T10:00:00Z","b":"y","a":2}"#,
        r#"{"event_time":"2024-06-01T10:00:00Z","b":"z","a":3}"#,
        r#"{"a":4,"ab":0,"b":"w","c":true,"event_time":"2024-06-01T10:00:00Z"}"#,
        r#"{"a":5,"b":"v","event_time":"2024-06-01T10:00:00Z"}"#,
    ];
    for r in orders {
        c.push(r.as_bytes()).unwrap();
    }
    let b = c.finish();
    let rows: Vec<_> = (0..5).map(|i| row_to_json(&b, i)).collect();
    assert_eq!(rows[0]["a"], 1);
    assert_eq!(
        (
            rows[1]["a"].clone(),
            rows[1]["b"].clone(),
            rows[1]["c"].clone()
        ),
        (json!(2), json!("y"), json!(false))
    );
    assert_eq!(
        (rows[2]["b"].clone(), rows[2]["c"].clone()),
        (json!("z"), Value::Null)
    );
    assert_eq!(
        (rows[3]["a"].clone(), rows[3]["b"].clone()),
        (json!(4), json!("w"))
    );
    assert_eq!(
        (rows[4]["a"].clone(), rows[4]["b"].clone()),
        (json!(5), json!("v"))
    );
}

#[test]
fn key_patterns_match_exactly_at_any_length_and_position() {
    use super::column::KeyPattern;
    for len in 0..20 {
        let name: Vec<u8> = (0..len).map(|i| b'a' + (i % 26) as u8).collect();
        let pat = KeyPattern::new(&name);
        assert_eq!(pat.name_len(), len);
        let mut buf = name.clone();
        buf.push(b'"');
        assert!(pat.matches(&buf, 0), "exact end of buffer, len {len}");
        buf.extend_from_slice(b":1,\"zzzzzzzzzzzzzzzz");
        assert!(pat.matches(&buf, 0));
        let mut other = buf.clone();
        if len > 0 {
            other[len - 1] = b'Z';
            assert!(!pat.matches(&other, 0));
        }
        let mut longer = name.clone();
        longer.extend_from_slice(b"x\"");
        assert!(!pat.matches(&longer, 0));
        assert!(!pat.matches(&buf[..len], 0), "truncated");
    }
}

#[test]
fn record_level_errors() {
    let mut c = conv(&with_props(json!({})));
    assert_eq!(raw_code(&mut c, b""), DeserializationError);
    assert_eq!(raw_code(&mut c, b"  \n"), DeserializationError);
    assert_eq!(
        raw_code(&mut c, format!("{{{ET}}} x").as_bytes()),
        DeserializationError
    );
    assert_eq!(
        raw_code(&mut c, format!("{{{ET}}}{{}}").as_bytes()),
        DeserializationError
    );
    assert_eq!(raw_code(&mut c, b"[1,2]"), TypeMismatch);
    assert_eq!(raw_code(&mut c, b"\"x\""), TypeMismatch);
    assert_eq!(raw_code(&mut c, b"[1,2"), DeserializationError);
    // A type error before a syntax error is still a syntax error: the record is not JSON.
    assert_eq!(
        raw_code(&mut c, br#"{"event_time":5,"x":}"#),
        DeserializationError
    );
    // GSR bytes on a json channel are named as such.
    let mut gsr = vec![3u8, 0];
    gsr.extend_from_slice(&[0x3f; 16]);
    gsr.extend_from_slice(b"{}");
    let e = c.push(&gsr).unwrap_err();
    assert_eq!(e.code, DeserializationError);
    assert!(e.message.contains("gsr_json"), "{}", e.message);
    assert!(raw_row(&mut c, format!(" \t{{ {ET} }}\r\n").as_bytes()).is_ok());
}

#[test]
fn records_over_max_record_size_are_too_large() {
    let mut c = conv(&with_props(json!({"blob": {"type": "string"}}))).with_max_record_size(100);
    let small = format!("{{{ET},\"blob\":\"{}\"}}", "a".repeat(10));
    assert!(c.push(small.as_bytes()).is_ok());
    let big = format!("{{{ET},\"blob\":\"{}\"}}", "a".repeat(100));
    assert_eq!(c.push(big.as_bytes()).unwrap_err().code, RecordTooLarge);
    assert_eq!(c.max_record_size(), 100);
    assert_eq!(
        conv(&with_props(json!({}))).max_record_size(),
        DEFAULT_MAX_RECORD_SIZE
    );
}

fn nested_schema() -> Value {
    with_props(json!({
        "id": {"type": "integer"},
        "s": {"type": "object", "properties": {
            "name": {"type": "string"},
            "tags": {"type": "array", "items": {"type": "string"}},
            "m": {"type": "object", "additionalProperties": {"type": "array", "items": {"type": "integer", "maximum": 9}}},
        }, "required": ["name"]},
        "b": {"type": "string", "contentEncoding": "base64"},
        "u": {"type": "string", "format": "uuid"},
        "f": {"type": "boolean"},
    }))
}

#[test]
fn a_failed_record_rolls_every_column_back() {
    let mut c = conv(&nested_schema());
    let good = r#""id":1,"s":{"name":"a","tags":["x","y"],"m":{"k":[1,2]}},"b":"aGk=","u":"3f36e6d8-d20e-43b7-90ea-3ad724880d60","f":true"#;
    c.push(format!("{{{ET},{good}}}").as_bytes()).unwrap();
    let before = c.buffered_bytes();
    // Fails deep inside, after many values were appended.
    let bad = r#""id":2,"b":"aGk=","u":"3f36e6d8-d20e-43b7-90ea-3ad724880d60","f":false,"s":{"name":"b","tags":["p","q","r"],"m":{"k":[1,2],"j":[3,10]}}"#;
    let e = c.push(format!("{{{ET},{bad}}}").as_bytes()).unwrap_err();
    assert_eq!((e.code, e.field.as_str()), (ValueOutOfRange, "/s/m/j/1"));
    assert_eq!(c.buffered_bytes(), before);
    let bad_syntax = r#""id":3,"s":{"name":"c","tags":["p"],"m":{"k":[1]}},"b":"aGk=","f":tru"#;
    assert_eq!(
        raw_code(&mut c, format!("{{{ET},{bad_syntax}}}").as_bytes()),
        DeserializationError
    );
    c.push(format!("{{{ET},\"id\":4,\"s\":{{\"name\":\"d\",\"tags\":[],\"m\":{{}}}}}}").as_bytes())
        .unwrap();
    assert_eq!(c.num_rows(), 2);
    let b = c.finish();
    b.column(0).to_data().validate_full().unwrap();
    for col in b.columns() {
        col.to_data().validate_full().unwrap();
    }
    let r0 = row_to_json(&b, 0);
    let r1 = row_to_json(&b, 1);
    assert_eq!(
        r0["s"],
        json!({"name": "a", "tags": ["x", "y"], "m": {"k": [1, 2]}})
    );
    assert_eq!(r1["id"], 4);
    assert_eq!(r1["s"], json!({"name": "d", "tags": [], "m": {}}));
    assert_eq!(r1["b"], Value::Null);
    assert_eq!(c.num_rows(), 0);
    assert_eq!(c.buffered_bytes(), 0);
}

#[test]
fn batches_match_the_table_schema_even_with_other_field_ids() {
    // The table was created from our schema, then its ids were reassigned: build the Arrow schema
    // from a schema with different ids and the same names and structure.
    let m = Arc::new(MappedSchema::from_json_schema(&nested_schema(), "event_time").unwrap());
    let ours = m.iceberg_schema().clone();
    let shifted = {
        let fields: Vec<_> = ours.as_struct().fields().to_vec();
        let json = serde_json::to_value(iceberg::spec::StructType::new(fields)).unwrap();
        let text = json.to_string();
        // Add 100 to every "id" (field ids, element ids, key/value ids).
        let re = regex::Regex::new(r#""(id|element-id|key-id|value-id)":(\d+)"#).unwrap();
        let text = re.replace_all(&text, |c: &regex::Captures| {
            format!("\"{}\":{}", &c[1], c[2].parse::<i32>().unwrap() + 100)
        });
        let st: iceberg::spec::StructType = serde_json::from_str(&text).unwrap();
        iceberg::spec::Schema::builder()
            .with_fields(st.fields().to_vec())
            .build()
            .unwrap()
    };
    assert_ne!(ours, shifted);
    let arrow = Arc::new(iceberg::arrow::schema_to_arrow_schema(&shifted).unwrap());
    let mut c = Converter::try_new(m.clone(), arrow.clone()).unwrap();
    c.push(
        format!("{{{ET},\"id\":1,\"s\":{{\"name\":\"a\",\"tags\":[\"x\"],\"m\":{{\"k\":[1]}}}}}}")
            .as_bytes(),
    )
    .unwrap();
    let b = c.finish();
    assert_eq!(b.schema(), arrow);
    let rebuilt = RecordBatch::try_new(arrow.clone(), b.columns().to_vec()).unwrap();
    assert_eq!(rebuilt.num_rows(), 1);
    // A table with another structure is refused.
    let other =
        MappedSchema::from_json_schema(&with_props(json!({"x": {"type": "string"}})), "event_time")
            .unwrap();
    assert!(matches!(
        Converter::try_new(m.clone(), other.arrow_schema()),
        Err(crate::schema::SchemaError::TableMismatch { .. })
    ));
    // A column added to the table under the channel: the message names it (break test: it
    // said "at : the table has 9 fields, the schema 8").
    let mut fields: Vec<arrow_schema::FieldRef> = arrow.fields().iter().cloned().collect();
    fields.push(Arc::new(arrow_schema::Field::new(
        "added",
        arrow_schema::DataType::Utf8,
        true,
    )));
    let widened = Arc::new(arrow_schema::Schema::new(fields));
    let err = Converter::try_new(m, widened).err().unwrap().to_string();
    assert!(
        err.contains("at the top level") && err.contains(r#"only in the table: ["added"]"#),
        "{err}"
    );
}

#[test]
fn parquet_round_trip_keeps_values() {
    use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
    use parquet::arrow::ArrowWriter;
    let mut c = conv(&nested_schema());
    for i in 0..50 {
        let rec = format!(
            "{{{ET},\"id\":{i},\"s\":{{\"name\":\"n{i}\",\"tags\":[\"a\"],\"m\":{{\"k\":[{}]}}}},\"f\":{}}}",
            i % 9,
            i % 2 == 0
        );
        c.push(rec.as_bytes()).unwrap();
    }
    let b = c.finish();
    let file = tempfile::tempfile().unwrap();
    let mut w = ArrowWriter::try_new(file.try_clone().unwrap(), b.schema(), None).unwrap();
    w.write(&b).unwrap();
    w.close().unwrap();
    let r = ParquetRecordBatchReaderBuilder::try_new(file)
        .unwrap()
        .build()
        .unwrap();
    let back: Vec<RecordBatch> = r.map(|x| x.unwrap()).collect();
    assert_eq!(back.len(), 1);
    for i in 0..50 {
        assert_eq!(row_to_json(&back[0], i), row_to_json(&b, i));
    }
}

#[test]
fn buffered_bytes_grow_and_finish_resets() {
    let mut c = conv(&nested_schema());
    assert_eq!(c.buffered_bytes(), 0);
    for _ in 0..100 {
        c.push(format!("{{{ET},\"s\":{{\"name\":\"abcdefgh\"}}}}").as_bytes())
            .unwrap();
    }
    assert!(c.buffered_bytes() > 100 * 8);
    let b = c.finish();
    assert_eq!(b.num_rows(), 100);
    assert_eq!(c.buffered_bytes(), 0);
    assert_eq!(c.finish().num_rows(), 0);
}

proptest! {
    #[test]
    fn doubles_parse_exactly_like_std(
        int in 0u64..10_000_000_000_000_000, frac in proptest::option::of("[0-9]{1,20}"),
        exp in proptest::option::of(-330i32..330), neg in any::<bool>()
    ) {
        let mut t = format!("{}{}", if neg { "-" } else { "" }, int);
        if let Some(f) = frac { t.push('.'); t.push_str(&f); }
        if let Some(e) = exp { t.push_str(&format!("e{e}")); }
        let mut c = conv(&with_props(json!({"d": {"type": "number"}})));
        let want: f64 = t.parse().unwrap();
        match row(&mut c, &format!(r#""d":{t}"#)) {
            Ok(r) => prop_assert_eq!(r["d"].as_f64().unwrap().to_bits(), want.to_bits(), "{}", t),
            Err(e) => {
                prop_assert!(!want.is_finite(), "{}: {}", t, e);
                prop_assert_eq!(e.code, DlqCode::ValueOutOfRange);
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn random_bytes_never_panic_and_keep_buffers_consistent(
        recs in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..200), 1..20)
    ) {
        let mut c = conv(&nested_schema());
        let mut ok = 0;
        for r in &recs {
            if c.push(r).is_ok() { ok += 1; }
        }
        prop_assert_eq!(c.num_rows(), ok);
        let b = c.finish();
        for col in b.columns() { prop_assert!(col.to_data().validate_full().is_ok()); }
    }

    #[test]
    fn mutated_valid_records_never_panic(
        pos in 0usize..400, byte in any::<u8>(), cut in 0usize..400
    ) {
        let mut c = conv(&nested_schema());
        let good = format!(r#"{{{ET},"id":1,"s":{{"name":"a\u00e9","tags":["x","y"],"m":{{"k":[1,2]}}}},"b":"aGk=","u":"3f36e6d8-d20e-43b7-90ea-3ad724880d60","f":true}}"#);
        let mut r = good.into_bytes();
        let n = r.len();
        r[pos % n] = byte;
        r.truncate(cut.max(1) % (n + 1));
        let res = c.push(&r);
        prop_assert_eq!(c.num_rows(), usize::from(res.is_ok()));
        let b = c.finish();
        for col in b.columns() { prop_assert!(col.to_data().validate_full().is_ok()); }
    }
}

/// A generated `Event` record and the values it must convert to.
fn event_strategy() -> impl Strategy<Value = (String, Value)> {
    (
        any::<i64>(),
        0i64..253_402_300_799,
        0u32..1_000_000,
        proptest::option::of("[a-zA-Z0-9 é\"\\\\/\u{1F600}]{0,12}"),
        any::<f64>().prop_filter("finite", |x| x.is_finite()),
        proptest::option::of(-99_999_999_999i64..99_999_999_999),
        proptest::option::of(("[A-Z]{2}", proptest::option::of(0i32..=10))),
        proptest::option::of(proptest::collection::vec("[a-z]{0,4}", 0..4)),
        proptest::option::of(proptest::collection::btree_map(
            "[a-z]{1,3}",
            "[a-z]{0,3}",
            0..4,
        )),
    )
        .prop_map(
            |(id, secs, micros, source, value, amount, user, tags, attrs)| {
                let us = secs * 1_000_000 + i64::from(micros);
                let ts = format_timestamptz(us);
                let ts_in = ts.replace("+00:00", "Z");
                let mut rec = Map::new();
                let mut exp = Map::new();
                rec.insert("id".into(), json!(id));
                exp.insert("id".into(), json!(id));
                rec.insert("event_time".into(), json!(ts_in));
                exp.insert("event_time".into(), json!(ts));
                rec.insert("value".into(), json!(value));
                exp.insert("value".into(), json!(value));
                let put = |rec: &mut Map<String, Value>,
                           exp: &mut Map<String, Value>,
                           k: &str,
                           v: Option<Value>,
                           e: Value| {
                    if let Some(v) = v {
                        rec.insert(k.into(), v);
                    }
                    exp.insert(k.into(), e);
                };
                put(
                    &mut rec,
                    &mut exp,
                    "source",
                    source.clone().map(Value::from),
                    source.map(Value::from).unwrap_or(Value::Null),
                );
                let amt = amount.map(|a| super::render::format_decimal(i128::from(a), 2));
                // The record carries the decimal as a JSON number with its exact text.
                put(
                    &mut rec,
                    &mut exp,
                    "amount",
                    amt.clone()
                        .map(|t| Value::Number(serde_json::from_str(&t).unwrap())),
                    amt.map(Value::from).unwrap_or(Value::Null),
                );
                let u = user.map(|(country, tier)| {
                    let mut r = json!({"country": country});
                    if let Some(t) = tier {
                        r["tier"] = json!(t);
                    }
                    (r, json!({"country": country, "tier": tier}))
                });
                put(
                    &mut rec,
                    &mut exp,
                    "user",
                    u.as_ref().map(|x| x.0.clone()),
                    u.map(|x| x.1).unwrap_or(Value::Null),
                );
                put(
                    &mut rec,
                    &mut exp,
                    "tags",
                    tags.clone().map(|t| json!(t)),
                    tags.map(|t| json!(t)).unwrap_or(Value::Null),
                );
                put(
                    &mut rec,
                    &mut exp,
                    "attrs",
                    attrs.clone().map(|a| json!(a)),
                    attrs.map(|a| json!(a)).unwrap_or(Value::Null),
                );
                (Value::Object(rec).to_string(), Value::Object(exp))
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn generated_event_records_round_trip(batch in proptest::collection::vec(event_strategy(), 1..8)) {
        let schema: Value = serde_json::from_str(include_str!("../../../tests/data/event.schema.json")).unwrap();
        let mut c = conv(&schema);
        let mut hours = Vec::new();
        for (rec, _) in &batch {
            hours.push(c.push(rec.as_bytes()).map_err(|e| TestCaseError::fail(format!("{rec}: {e}")))?);
        }
        let b = c.finish();
        prop_assert_eq!(b.num_rows(), batch.len());
        for (i, (rec, exp)) in batch.iter().enumerate() {
            let got = Value::Object(row_to_json(&b, i));
            prop_assert_eq!(&got, exp, "record {}", rec);
            let ts = b.column_by_name("event_time").unwrap();
            let us = ts.as_any().downcast_ref::<arrow_array::TimestampMicrosecondArray>().unwrap().value(i);
            prop_assert_eq!(hours[i], us.div_euclid(3_600_000_000));
        }
        prop_assert!(b.column(0).null_count() <= b.num_rows());
    }
}

#[test]
fn a_large_buffer_keeps_every_row_and_counts_its_bytes() {
    let schema: Value = serde_json::from_str(crate::tools::quickstart::EVENT_SCHEMA).unwrap();
    let mut c = conv(&schema);
    let n = 150_000u64;
    let mut input = 0usize;
    for id in 0..n {
        let rec = crate::tools::sample_events::event_json(id, 42, 1_783_627_200_000, 3);
        input += rec.len();
        c.push(rec.as_bytes()).unwrap();
    }
    eprintln!("input {input} buffered {}", c.buffered_bytes());
    assert!(
        c.buffered_bytes() >= input / 4,
        "buffered {} of input {input}",
        c.buffered_bytes()
    );
    let b = c.finish();
    assert_eq!(b.num_rows() as u64, n);
    let ids = b
        .column_by_name("id")
        .unwrap()
        .as_any()
        .downcast_ref::<arrow_array::Int64Array>()
        .unwrap();
    assert_eq!(ids.value(0), 0);
    assert_eq!(ids.value(n as usize - 1), n as i64 - 1);
}

/// A converter for records of version `v` into a table evolved from it to `table` (docs
/// schema-mapping.md "Schema evolution").
fn evolved_conv(v: &Value, table: &Value) -> Converter {
    let vm = MappedSchema::from_json_schema(v, "event_time").unwrap();
    let tm = MappedSchema::from_json_schema(table, "event_time").unwrap();
    let e = crate::schema::evolution::evolve(
        vm.iceberg_schema(),
        vm.iceberg_schema().highest_field_id(),
        tm.iceberg_schema(),
        "event_time",
        &tm.defaulted_fields(),
    )
    .unwrap();
    let arrow = Arc::new(iceberg::arrow::schema_to_arrow_schema(&e.schema).unwrap());
    Converter::for_evolved_table(Arc::new(vm), arrow).unwrap()
}

#[test]
fn an_old_version_converts_into_an_evolved_table_with_nulls_and_wider_columns() {
    let v1 = with_props(json!({
        "n": {"type": "integer", "minimum": 0, "maximum": 10},
        "s": {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]}
    }));
    let v2 = with_props(json!({
        "n": {"type": "integer"},
        "s": {"type": "object", "properties": {
            "a": {"type": "string"},
            "b": {"type": "object", "properties": {"x": {"type": "boolean"}}}
        }},
        "extra": {"type": "array", "items": {"type": "string"}}
    }));
    let mut c = evolved_conv(&v1, &v2);
    let r = row(&mut c, r#""n":7,"s":{"a":"x"}"#).unwrap();
    assert_eq!(r["n"], json!(7), "the int goes into the long column");
    assert_eq!(r["s"], json!({"a": "x", "b": null}));
    assert_eq!(r["extra"], Value::Null);
    // Validated by version 1's rules: its bound, its required key.
    assert_eq!(code(&mut c, r#""n":11"#), ValueOutOfRange);
    assert_eq!(code(&mut c, r#""s":{}"#), MissingRequiredField);
    // A key of a column version 1 does not have is an unknown key of version 1: dropped.
    let r = row(&mut c, r#""extra":["a"],"s":{"a":"y","b":{"x":true}}"#).unwrap();
    assert_eq!(r["extra"], Value::Null);
    assert_eq!(r["s"]["b"], Value::Null);
    // The batch has the table's Arrow schema.
    c.push(format!("{{{ET}}}").as_bytes()).unwrap();
    let b = c.finish();
    assert_eq!(b.schema().fields().len(), 4);
}

#[test]
fn an_unknown_key_that_is_an_evolved_column_is_refused_under_additional_properties_false() {
    let mut v1 = with_props(json!({"n": {"type": "integer"}}));
    v1["additionalProperties"] = json!(false);
    let v2 = with_props(json!({"n": {"type": "integer"}, "m": {"type": "string"}}));
    let mut c = evolved_conv(&v1, &v2);
    assert_eq!(code(&mut c, r#""m":"x""#), ValueOutOfRange);
    assert_eq!(val(&mut c, r#""n":1"#, "m"), Value::Null);
}

#[test]
fn the_exact_converter_still_refuses_an_evolved_table() {
    let v1 = with_props(json!({"n": {"type": "integer", "minimum": 0, "maximum": 10}}));
    let v2 = with_props(json!({"n": {"type": "integer"}, "m": {"type": "string"}}));
    let vm = Arc::new(MappedSchema::from_json_schema(&v1, "event_time").unwrap());
    let tm = MappedSchema::from_json_schema(&v2, "event_time").unwrap();
    assert!(Converter::try_new(vm.clone(), tm.arrow_schema()).is_err());
    // A version with a field the table lacks is not convertible even when evolved.
    let e = Converter::for_evolved_table(
        Arc::new(tm),
        MappedSchema::from_json_schema(&with_props(json!({})), "event_time")
            .unwrap()
            .arrow_schema(),
    );
    assert!(e.is_err());
}

mod value_rules;
