//! Unit tests of the Avro decoder: bytes written by apache-avro's own writer for every type, both
//! null-union orders, nested lists/maps/records, negative block counts, every kind of bad bytes
//! with its DLQ code, schema resolution (defaults, promotions, skipped fields), and a property
//! test that random records round-trip.

use std::sync::Arc;

use apache_avro::types::Value as AV;
use apache_avro::Schema;
use arrow_array::cast::AsArray;
use arrow_array::types::Float32Type;
use arrow_array::{Array, RecordBatch};
use proptest::prelude::*;
use serde_json::{json, Map, Value};

use crate::convert::render::value_to_json;
use crate::convert::{Converter, DlqCode, DlqReason};
use crate::schema::MappedSchema;

const TS: i64 = 1_717_236_000_000_000; // 2024-06-01T10:00:00Z in µs

/// A record schema with `ts` (timestamp-micros, the partition field) first and `fields` after.
fn schema_text(fields: Value) -> String {
    let mut all =
        vec![json!({"name": "ts", "type": {"type": "long", "logicalType": "timestamp-micros"}})];
    all.extend(fields.as_array().unwrap().iter().cloned());
    json!({"type": "record", "name": "Event", "namespace": "t", "fields": all}).to_string()
}

fn conv(text: &str) -> Converter {
    let m = Arc::new(MappedSchema::from_avro(text, &[], "ts").unwrap());
    let arrow = m.arrow_schema();
    Converter::try_new(m, arrow).unwrap()
}

/// apache-avro's encoding of the record `ts` + `fields` under `text`.
fn encode(text: &str, fields: Vec<(&str, AV)>) -> Vec<u8> {
    let schema = Schema::parse_str(text).unwrap();
    let mut all = vec![("ts".to_string(), AV::TimestampMicros(TS))];
    all.extend(fields.into_iter().map(|(k, v)| (k.to_string(), v)));
    apache_avro::to_avro_datum(&schema, AV::Record(all)).unwrap()
}

fn render(b: &RecordBatch, row: usize) -> Map<String, Value> {
    let mut m = Map::new();
    for (f, col) in b.schema().fields().iter().zip(b.columns()) {
        let v = match col.data_type() {
            arrow_schema::DataType::Float32 if !col.is_null(row) => {
                json!(col.as_primitive::<Float32Type>().value(row))
            }
            arrow_schema::DataType::FixedSizeBinary(n) if *n != 16 && !col.is_null(row) => {
                json!(col.as_fixed_size_binary().value(row))
            }
            _ => value_to_json(col.as_ref(), row),
        };
        m.insert(f.name().clone(), v);
    }
    m
}

fn push_row(c: &mut Converter, bytes: &[u8]) -> Result<Map<String, Value>, DlqReason> {
    c.push(bytes)?;
    let b = c.finish();
    assert_eq!(b.num_rows(), 1);
    Ok(render(&b, 0))
}

/// Decodes one record of `fields` (schema `types`) and returns its row.
fn one(types: Value, fields: Vec<(&str, AV)>) -> Map<String, Value> {
    let text = schema_text(types);
    let bytes = encode(&text, fields);
    push_row(&mut conv(&text), &bytes).unwrap_or_else(|e| panic!("{e}"))
}

fn refused(text: &str, bytes: &[u8]) -> DlqReason {
    let mut c = conv(text);
    let e = c.push(bytes).expect_err("expected a DLQ reason");
    assert_eq!(c.num_rows(), 0, "a refused record leaves no row");
    e
}

#[test]
fn every_primitive_and_logical_type_lands_in_its_column() {
    let dec = json!({"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2});
    let dec_fixed = json!({"type": "fixed", "name": "D", "size": 8, "logicalType": "decimal", "precision": 18, "scale": 3});
    let row = one(
        json!([
            {"name": "b", "type": "boolean"},
            {"name": "i", "type": "int"},
            {"name": "l", "type": "long"},
            {"name": "f", "type": "float"},
            {"name": "d", "type": "double"},
            {"name": "s", "type": "string"},
            {"name": "by", "type": "bytes"},
            {"name": "fx", "type": {"type": "fixed", "name": "F3", "size": 3}},
            {"name": "e", "type": {"type": "enum", "name": "Color", "symbols": ["RED", "GREEN"]}},
            {"name": "dec", "type": dec},
            {"name": "decf", "type": dec_fixed},
            {"name": "u", "type": {"type": "string", "logicalType": "uuid"}},
            {"name": "date", "type": {"type": "int", "logicalType": "date"}},
            {"name": "tm", "type": {"type": "int", "logicalType": "time-millis"}},
            {"name": "tu", "type": {"type": "long", "logicalType": "time-micros"}},
            {"name": "tsm", "type": {"type": "long", "logicalType": "timestamp-millis"}},
            {"name": "lts", "type": {"type": "long", "logicalType": "local-timestamp-micros"}},
            {"name": "ltm", "type": {"type": "long", "logicalType": "local-timestamp-millis"}}
        ]),
        vec![
            ("b", AV::Boolean(true)),
            ("i", AV::Int(-7)),
            ("l", AV::Long(i64::MIN)),
            ("f", AV::Float(1.5)),
            ("d", AV::Double(-2.25)),
            ("s", AV::String("héllo".into())),
            ("by", AV::Bytes(vec![0, 255])),
            ("fx", AV::Fixed(3, vec![1, 2, 3])),
            ("e", AV::Enum(1, "GREEN".into())),
            (
                "dec",
                AV::Decimal(apache_avro::Decimal::from(vec![0xff, 0x85])),
            ), // -123
            (
                "decf",
                AV::Decimal(apache_avro::Decimal::from(vec![
                    0, 0, 0, 0, 0, 0, 0x30, 0x39,
                ])),
            ),
            (
                "u",
                AV::Uuid("67e55044-10b1-426f-9247-bb680e5fe0c8".parse().unwrap()),
            ),
            ("date", AV::Date(-1)),
            ("tm", AV::TimeMillis(3_600_000)),
            ("tu", AV::TimeMicros(1)),
            ("tsm", AV::TimestampMillis(-1)),
            ("lts", AV::LocalTimestampMicros(0)),
            ("ltm", AV::LocalTimestampMillis(1000)),
        ],
    );
    let expect = json!({
        "ts": "2024-06-01T10:00:00.000000+00:00", "b": true, "i": -7, "l": i64::MIN, "f": 1.5, "d": -2.25,
        "s": "héllo", "by": "00ff", "fx": [1, 2, 3], "e": "GREEN", "dec": "-1.23", "decf": "12.345",
        "u": "67e55044-10b1-426f-9247-bb680e5fe0c8", "date": "1969-12-31", "tm": "01:00:00.000000",
        "tu": "00:00:00.000001", "tsm": "1969-12-31T23:59:59.999000+00:00",
        "lts": "1970-01-01T00:00:00.000000", "ltm": "1970-01-01T00:00:01.000000"
    });
    assert_eq!(Value::Object(row), expect);
}

#[test]
fn null_unions_in_both_orders_are_optional_values() {
    let types = json!([
        {"name": "a", "type": ["null", "long"]},
        {"name": "b", "type": ["string", "null"]}
    ]);
    let row = one(
        types.clone(),
        vec![
            ("a", AV::Union(0, Box::new(AV::Null))),
            ("b", AV::Union(1, Box::new(AV::Null))),
        ],
    );
    assert_eq!((&row["a"], &row["b"]), (&Value::Null, &Value::Null));
    let row = one(
        types,
        vec![
            ("a", AV::Union(1, Box::new(AV::Long(5)))),
            ("b", AV::Union(0, Box::new(AV::String("x".into())))),
        ],
    );
    assert_eq!((&row["a"], &row["b"]), (&json!(5), &json!("x")));
}

#[test]
fn nested_lists_maps_and_records_decode() {
    let inner = json!({"type": "record", "name": "Inner", "fields": [
        {"name": "tags", "type": {"type": "array", "items": ["null", "string"]}},
        {"name": "n", "type": "int"}
    ]});
    let row = one(
        json!([
            {"name": "r", "type": inner},
            {"name": "m", "type": {"type": "map", "values": {"type": "array", "items": "long"}}},
            {"name": "again", "type": ["null", "Inner"]}
        ]),
        vec![
            (
                "r",
                AV::Record(vec![
                    (
                        "tags".into(),
                        AV::Array(vec![
                            AV::Union(1, Box::new(AV::String("a".into()))),
                            AV::Union(0, Box::new(AV::Null)),
                        ]),
                    ),
                    ("n".into(), AV::Int(3)),
                ]),
            ),
            (
                "m",
                AV::Map(
                    [("k".to_string(), AV::Array(vec![AV::Long(1), AV::Long(2)]))]
                        .into_iter()
                        .collect(),
                ),
            ),
            ("again", AV::Union(0, Box::new(AV::Null))),
        ],
    );
    assert_eq!(row["r"], json!({"tags": ["a", null], "n": 3}));
    assert_eq!(row["m"], json!({"k": [1, 2]}));
    assert_eq!(row["again"], Value::Null);
}

#[test]
fn blocks_with_negative_counts_and_byte_sizes_decode() {
    let text = schema_text(json!([
        {"name": "xs", "type": {"type": "array", "items": "int"}},
        {"name": "m", "type": {"type": "map", "values": "int"}}
    ]));
    let mut b = encode(
        &text,
        vec![
            ("xs", AV::Array(vec![])),
            ("m", AV::Map(Default::default())),
        ],
    );
    b.truncate(b.len() - 2);
    // xs: a block of -2 items (4 bytes), a block of 1 item, end.
    b.extend_from_slice(&[3, 4, 2, 4, 2, 6, 0]);
    // m: a block of -1 entry (3 bytes) {"k": 1}, end.
    b.extend_from_slice(&[1, 6, 2, b'k', 2, 0]);
    let row = push_row(&mut conv(&text), &b).unwrap();
    assert_eq!(row["xs"], json!([1, 2, 3]));
    assert_eq!(row["m"], json!({"k": 1}));
}

#[test]
fn bad_bytes_are_deserialization_errors_naming_the_field() {
    let text = schema_text(json!([
        {"name": "s", "type": "string"},
        {"name": "o", "type": ["null", "int"]},
        {"name": "e", "type": {"type": "enum", "name": "E", "symbols": ["A", "B"]}},
        {"name": "xs", "type": {"type": "array", "items": "int"}}
    ]));
    let good = encode(
        &text,
        vec![
            ("s", AV::String("ab".into())),
            ("o", AV::Union(1, Box::new(AV::Int(1)))),
            ("e", AV::Enum(0, "A".into())),
            ("xs", AV::Array(vec![])),
        ],
    );
    let p = good.len() - 7; // start of s: s 3 bytes, o 2, e 1, xs 1
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("truncated", good[..good.len() - 1].to_vec(), "/xs"),
        ("trailing bytes", [good.clone(), vec![0]].concat(), ""),
        (
            "bad utf-8",
            [&good[..p], &[4, 0xff, 0xfe], &good[p + 3..]].concat(),
            "/s",
        ),
        (
            "union index 2",
            [&good[..p + 3], &[4, 2], &good[p + 5..]].concat(),
            "/o",
        ),
        (
            "enum index 2",
            [&good[..p + 5], &[4], &good[p + 6..]].concat(),
            "/e",
        ),
        (
            "negative length",
            [&good[..p], &[3], &good[p + 3..]].concat(),
            "/s",
        ),
        (
            "overlong varint",
            [&good[..p], &[0x80; 11][..]].concat(),
            "/s",
        ),
        (
            "huge block count",
            [&good[..p + 6], &[0xfe, 0xff, 0xff, 0x0f]].concat(),
            "/xs",
        ),
    ];
    for (what, bytes, field) in cases {
        let e = refused(&text, &bytes);
        assert_eq!(e.code, DlqCode::DeserializationError, "{what}: {e}");
        assert_eq!(e.field, field, "{what}: {e}");
    }
    assert!(conv(&text).push(&good).is_ok());
}

#[test]
fn int_varint_beyond_32_bits_is_refused() {
    let text = schema_text(json!([{"name": "i", "type": "int"}]));
    let mut b = encode(&text, vec![("i", AV::Int(0))]);
    b.pop();
    b.extend_from_slice(&[0xff, 0xff, 0xff, 0xff, 0x1f]);
    assert_eq!(refused(&text, &b).code, DlqCode::DeserializationError);
}

#[test]
fn values_the_column_cannot_hold_are_out_of_range() {
    let dec = json!({"type": "bytes", "logicalType": "decimal", "precision": 3, "scale": 0});
    let text = schema_text(json!([
        {"name": "d", "type": dec},
        {"name": "t", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "u", "type": {"type": "string", "logicalType": "uuid"}},
        {"name": "tm", "type": {"type": "int", "logicalType": "time-millis"}}
    ]));
    let ok = |d: i64, t: i64| {
        vec![
            (
                "d",
                AV::Decimal(apache_avro::Decimal::from(d.to_be_bytes().to_vec())),
            ),
            ("t", AV::TimestampMillis(t)),
            ("u", AV::Uuid(uuid::Uuid::nil())),
            ("tm", AV::TimeMillis(0)),
        ]
    };
    assert!(conv(&text).push(&encode(&text, ok(999, 0))).is_ok());
    assert!(conv(&text)
        .push(&encode(&text, ok(-999, i64::MAX / 1000)))
        .is_ok());
    for (what, bytes) in [
        ("decimal of 4 digits", encode(&text, ok(1000, 0))),
        ("negative decimal of 4 digits", encode(&text, ok(-1000, 0))),
        (
            "timestamp-millis overflow",
            encode(&text, ok(0, i64::MAX / 1000 + 1)),
        ),
    ] {
        let e = refused(&text, &bytes);
        assert_eq!(e.code, DlqCode::ValueOutOfRange, "{what}: {e}");
    }
    // A uuid string that is not a uuid (written as plain string bytes), a time past midnight.
    let plain = schema_text(json!([
        {"name": "d", "type": "bytes"}, {"name": "t", "type": "long"},
        {"name": "u", "type": "string"}, {"name": "tm", "type": "int"}
    ]));
    let raw = |u: &str, tm: i32| {
        encode(
            &plain,
            vec![
                ("d", AV::Bytes(vec![1])),
                ("t", AV::Long(0)),
                ("u", AV::String(u.into())),
                ("tm", AV::Int(tm)),
            ],
        )
    };
    let e = refused(&text, &raw("not-a-uuid", 0));
    assert_eq!((e.code, e.field.as_str()), (DlqCode::ValueOutOfRange, "/u"));
    let e = refused(
        &text,
        &raw("67e55044-10b1-426f-9247-bb680e5fe0c8", 86_400_000),
    );
    assert_eq!(
        (e.code, e.field.as_str()),
        (DlqCode::ValueOutOfRange, "/tm")
    );
}

/// A record schema of one nullable `ts` (timestamp-millis), parsed, and a record whose `ts` is
/// null.
fn nullable_ts_record() -> (String, Schema, Vec<u8>) {
    let text = json!({"type": "record", "name": "E", "fields": [
        {"name": "ts", "type": ["null", {"type": "long", "logicalType": "timestamp-millis"}]}
    ]})
    .to_string();
    let schema = Schema::parse_str(&text).unwrap();
    let null = apache_avro::to_avro_datum(
        &schema,
        AV::Record(vec![("ts".into(), AV::Union(0, Box::new(AV::Null)))]),
    )
    .unwrap();
    (text, schema, null)
}

/// Without a partition field (a spec without a time transform, docs/partitioning.md) a null
/// timestamp is a value like any other: the row is taken.
#[test]
fn without_a_partition_field_a_null_timestamp_is_a_row() {
    let (text, _, null) = nullable_ts_record();
    let m = Arc::new(MappedSchema::from_avro(&text, &[], "").unwrap());
    let arrow = m.arrow_schema();
    let mut c = Converter::try_new(m, arrow).unwrap();
    assert!(c.push(&null).is_ok());
    assert_eq!(c.num_rows(), 1);
}

#[test]
fn null_partition_is_missing_partition_value() {
    let (text, schema, null) = nullable_ts_record();
    let e = refused(&text, &null);
    assert_eq!(
        (e.code, e.field.as_str()),
        (DlqCode::MissingPartitionValue, "/ts")
    );
    let set = apache_avro::to_avro_datum(
        &schema,
        AV::Record(vec![(
            "ts".into(),
            AV::Union(1, Box::new(AV::TimestampMillis(3_600_000))),
        )]),
    )
    .unwrap();
    assert_eq!(conv(&text).push(&set).unwrap(), 1, "hour 1 after the epoch");
}

#[test]
fn a_refused_record_leaves_earlier_rows_intact() {
    let text = schema_text(json!([{"name": "xs", "type": {"type": "array", "items": "string"}}]));
    let mut c = conv(&text);
    let good = encode(&text, vec![("xs", AV::Array(vec![AV::String("a".into())]))]);
    c.push(&good).unwrap();
    let mut bad = encode(
        &text,
        vec![(
            "xs",
            AV::Array(vec![AV::String("b".into()), AV::String("c".into())]),
        )],
    );
    bad.truncate(bad.len() - 2);
    c.push(&bad).unwrap_err();
    c.push(&good).unwrap();
    let b = c.finish();
    assert_eq!(b.num_rows(), 2);
    assert_eq!(render(&b, 1)["xs"], json!(["a"]));
}

/// Resolution: a v1 writer read into a table made from v2 (reader), by the registry's API.
#[test]
fn older_writer_records_get_reader_defaults_promotions_and_skips() {
    let v1 = schema_text(json!([
        {"name": "n", "type": "int"},
        {"name": "f", "type": "float"},
        {"name": "s", "type": "string"},
        {"name": "gone", "type": {"type": "array", "items": "string"}},
        {"name": "e", "type": {"type": "enum", "name": "E", "symbols": ["A", "OLD"]}}
    ]));
    let v2 = schema_text(json!([
        {"name": "n", "type": "long"},
        {"name": "f", "type": "double"},
        {"name": "s", "type": "bytes"},
        {"name": "e", "type": {"type": "enum", "name": "E", "symbols": ["A", "OTHER"], "default": "OTHER"}},
        {"name": "added", "type": "string", "default": "none"},
        {"name": "opt", "type": ["null", "int"], "default": null},
        {"name": "opt2", "type": ["int", "null"], "default": 7},
        {"name": "rec", "type": {"type": "record", "name": "R", "fields": [{"name": "x", "type": "int"}]}, "default": {"x": 4}}
    ]));
    let table = Arc::new(MappedSchema::from_avro(&v2, &[], "ts").unwrap());
    let m = Arc::new(MappedSchema::from_avro_resolved(&v1, &[], &v2, &[], "ts").unwrap());
    assert_eq!(
        m.iceberg_schema(),
        table.iceberg_schema(),
        "the reader's table schema"
    );
    let mut c = Converter::for_evolved_table(m, table.arrow_schema()).unwrap();
    let bytes = encode(
        &v1,
        vec![
            ("n", AV::Int(-3)),
            ("f", AV::Float(0.5)),
            ("s", AV::String("hi".into())),
            ("gone", AV::Array(vec![AV::String("x".into())])),
            ("e", AV::Enum(1, "OLD".into())),
        ],
    );
    let row = push_row(&mut c, &bytes).unwrap();
    assert_eq!(
        Value::Object(row),
        json!({"ts": "2024-06-01T10:00:00.000000+00:00", "n": -3, "f": 0.5, "s": "6869", "e": "OTHER",
               "added": "none", "opt": null, "opt2": 7, "rec": {"x": 4}})
    );
}

#[test]
fn an_older_writer_keeps_a_field_the_newer_reader_dropped() {
    // v1 has `src`; v2 dropped it (a compatible change) and added `region` with a default. The
    // table keeps `src` (columns are never dropped), so v1 records must keep their `src`: read as
    // v1 alone (`region` null), not resolved against v2 (which skips `src`: the values were lost).
    let v1 = schema_text(json!([
        {"name": "a", "type": "long"},
        {"name": "src", "type": ["null", "string"], "default": null}
    ]));
    let v2 = schema_text(json!([
        {"name": "a", "type": "long"},
        {"name": "region", "type": "string", "default": "eu"}
    ]));
    let table = schema_text(json!([
        {"name": "a", "type": "long"},
        {"name": "src", "type": ["null", "string"], "default": null},
        {"name": "region", "type": ["null", "string"], "default": null}
    ]));
    let table = MappedSchema::from_avro(&table, &[], "ts").unwrap();
    let m = Arc::new(MappedSchema::from_avro_older(&v1, &[], &v2, &[], "ts").unwrap());
    let mut c = Converter::for_evolved_table(m, table.arrow_schema()).unwrap();
    let bytes = encode(
        &v1,
        vec![
            ("a", AV::Long(1)),
            ("src", AV::Union(1, Box::new(AV::String("s1".into())))),
        ],
    );
    let row = push_row(&mut c, &bytes).unwrap();
    assert_eq!(
        (&row["a"], &row["src"], &row["region"]),
        (&json!(1), &json!("s1"), &Value::Null)
    );
    // Without a dropped field, the reader's defaults apply.
    let v1 = schema_text(json!([{"name": "a", "type": "long"}]));
    let m = Arc::new(MappedSchema::from_avro_older(&v1, &[], &v2, &[], "ts").unwrap());
    let mut c = Converter::for_evolved_table(m, table.arrow_schema()).unwrap();
    let row = push_row(&mut c, &encode(&v1, vec![("a", AV::Long(2))])).unwrap();
    assert_eq!((&row["src"], &row["region"]), (&Value::Null, &json!("eu")));
}

#[test]
fn bytes_and_fixed_defaults_are_code_points_not_utf8() {
    // Avro 1.11: a bytes or fixed default is a string whose code points 0-255 are the bytes
    // (before: "\u00ff" became the two UTF-8 bytes c3 bf, and a fixed default was refused).
    let v1 = schema_text(json!([]));
    let v2 = schema_text(json!([
        {"name": "b", "type": "bytes", "default": "\u{ff}\u{0}"},
        {"name": "f", "type": {"type": "fixed", "name": "F2", "size": 2}, "default": "\u{ff}\u{1}"},
        {"name": "bs", "type": {"type": "array", "items": "bytes"}, "default": ["\u{80}", "a"]},
        {"name": "ob", "type": ["bytes", "null"], "default": "\u{fe}"}
    ]));
    let table = MappedSchema::from_avro(&v2, &[], "ts").unwrap();
    let m = Arc::new(MappedSchema::from_avro_resolved(&v1, &[], &v2, &[], "ts").unwrap());
    let mut c = Converter::for_evolved_table(m, table.arrow_schema()).unwrap();
    let row = push_row(&mut c, &encode(&v1, vec![])).unwrap();
    assert_eq!(
        (&row["b"], &row["f"], &row["bs"], &row["ob"]),
        (
            &json!("ff00"),
            &json!([255, 1]),
            &json!(["80", "61"]),
            &json!("fe")
        )
    );
}

#[test]
fn older_writer_without_a_required_reader_field_or_default_is_refused() {
    let v1 = schema_text(json!([]));
    let v2 = schema_text(json!([{"name": "must", "type": "int"}]));
    let e = MappedSchema::from_avro_resolved(&v1, &[], &v2, &[], "ts").unwrap_err();
    assert!(e.to_string().contains("#/must"), "{e}");
    let v3 = schema_text(json!([{"name": "must", "type": "string"}]));
    let v4 = schema_text(json!([{"name": "must", "type": "int"}]));
    let e = MappedSchema::from_avro_resolved(&v3, &[], &v4, &[], "ts").unwrap_err();
    assert!(e.to_string().contains("#/must"), "{e}");
}

#[test]
fn absent_table_columns_are_null_for_avro_records() {
    let v1 = schema_text(json!([{"name": "a", "type": "int"}]));
    let v2 = schema_text(
        json!([{"name": "a", "type": "int"}, {"name": "b", "type": ["null", "string"]}]),
    );
    let table = MappedSchema::from_avro(&v2, &[], "ts").unwrap();
    let m = Arc::new(MappedSchema::from_avro(&v1, &[], "ts").unwrap());
    let mut c = Converter::for_evolved_table(m, table.arrow_schema()).unwrap();
    let row = push_row(&mut c, &encode(&v1, vec![("a", AV::Int(1))])).unwrap();
    assert_eq!((&row["a"], &row["b"]), (&json!(1), &Value::Null));
}

#[derive(Debug, Clone)]
struct Rec {
    i: i32,
    l: Option<i64>,
    f: f32,
    d: f64,
    s: String,
    b: Vec<u8>,
    xs: Vec<Option<String>>,
    m: Vec<(String, i32)>,
    inner: (bool, i64),
}

fn rec() -> impl Strategy<Value = Rec> {
    (
        any::<i32>(),
        any::<Option<i64>>(),
        any::<f32>().prop_filter("finite", |x| x.is_finite()),
        any::<f64>().prop_filter("finite", |x| x.is_finite()),
        ".{0,8}",
        proptest::collection::vec(any::<u8>(), 0..8),
        proptest::collection::vec(proptest::option::of(".{0,4}"), 0..5),
        proptest::collection::btree_map(".{0,4}", any::<i32>(), 0..4),
        (any::<bool>(), any::<i64>()),
    )
        .prop_map(|(i, l, f, d, s, b, xs, m, inner)| Rec {
            i,
            l,
            f,
            d,
            s,
            b,
            xs,
            m: m.into_iter().collect(),
            inner,
        })
}

proptest! {
    #[test]
    fn random_records_written_by_apache_avro_read_back_equal(recs in proptest::collection::vec(rec(), 1..8)) {
        let text = schema_text(json!([
            {"name": "i", "type": "int"},
            {"name": "l", "type": ["null", "long"]},
            {"name": "f", "type": "float"},
            {"name": "d", "type": "double"},
            {"name": "s", "type": "string"},
            {"name": "b", "type": "bytes"},
            {"name": "xs", "type": {"type": "array", "items": ["string", "null"]}},
            {"name": "m", "type": {"type": "map", "values": "int"}},
            {"name": "inner", "type": {"type": "record", "name": "In", "fields": [
                {"name": "ok", "type": "boolean"}, {"name": "n", "type": "long"}]}}
        ]));
        let mut c = conv(&text);
        for r in &recs {
            let bytes = encode(&text, vec![
                ("i", AV::Int(r.i)),
                ("l", match r.l { None => AV::Union(0, Box::new(AV::Null)), Some(v) => AV::Union(1, Box::new(AV::Long(v))) }),
                ("f", AV::Float(r.f)),
                ("d", AV::Double(r.d)),
                ("s", AV::String(r.s.clone())),
                ("b", AV::Bytes(r.b.clone())),
                ("xs", AV::Array(r.xs.iter().map(|x| match x {
                    Some(s) => AV::Union(0, Box::new(AV::String(s.clone()))),
                    None => AV::Union(1, Box::new(AV::Null)),
                }).collect())),
                ("m", AV::Map(r.m.iter().map(|(k, v)| (k.clone(), AV::Int(*v))).collect())),
                ("inner", AV::Record(vec![("ok".into(), AV::Boolean(r.inner.0)), ("n".into(), AV::Long(r.inner.1))])),
            ]);
            prop_assert!(c.push(&bytes).is_ok());
        }
        let b = c.finish();
        prop_assert_eq!(b.num_rows(), recs.len());
        for (k, r) in recs.iter().enumerate() {
            let row = render(&b, k);
            prop_assert_eq!(&row["i"], &json!(r.i));
            prop_assert_eq!(&row["l"], &json!(r.l));
            prop_assert_eq!(b.column(3).as_primitive::<Float32Type>().value(k).to_bits(), r.f.to_bits());
            prop_assert_eq!(&row["d"], &json!(r.d));
            prop_assert_eq!(&row["s"], &json!(r.s));
            prop_assert_eq!(b.column(6).as_binary::<i64>().value(k), &r.b[..]);
            prop_assert_eq!(&row["xs"], &json!(r.xs));
            let m: Map<String, Value> = r.m.iter().map(|(k, v)| (k.clone(), json!(v))).collect();
            prop_assert_eq!(&row["m"], &Value::Object(m));
            prop_assert_eq!(&row["inner"], &json!({"ok": r.inner.0, "n": r.inner.1}));
        }
    }

    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
        let text = schema_text(json!([
            {"name": "xs", "type": {"type": "array", "items": ["null", "string"]}},
            {"name": "m", "type": {"type": "map", "values": "double"}}
        ]));
        let mut c = conv(&text);
        let rows = c.num_rows();
        if c.push(&bytes).is_err() {
            prop_assert_eq!(c.num_rows(), rows);
        }
    }
}

#[test]
fn uuid_on_fixed_16_reads_the_raw_bytes() {
    let text = schema_text(json!([
        {"name": "u", "type": {"type": "fixed", "name": "U", "size": 16, "logicalType": "uuid"}}
    ]));
    // apache-avro 0.21 writes this logical type as a string: write the plain fixed instead.
    let plain =
        schema_text(json!([{"name": "u", "type": {"type": "fixed", "name": "U", "size": 16}}]));
    let id = uuid::Uuid::parse_str("67e55044-10b1-426f-9247-bb680e5fe0c8").unwrap();
    let bytes = encode(&plain, vec![("u", AV::Fixed(16, id.as_bytes().to_vec()))]);
    let row = push_row(&mut conv(&text), &bytes).unwrap();
    assert_eq!(row["u"], json!(id.to_string()));
}

/// Bytes from the real Confluent `AvroSerializer` (tests/py/avro_serializer_fixture.py), after
/// the 5-byte Confluent framing the registry layer strips.
#[test]
fn records_from_the_confluent_avro_serializer_decode() {
    let fixture: Value = serde_json::from_str(include_str!(
        "../../../tests/data/avro_confluent_serializer.json"
    ))
    .unwrap();
    let text = fixture["schema"].as_str().unwrap();
    let m = Arc::new(MappedSchema::from_avro(text, &[], "event_time").unwrap());
    let mut c = Converter::try_new(m.clone(), m.arrow_schema()).unwrap();
    for hex in fixture["records"].as_array().unwrap() {
        let hex = hex.as_str().unwrap();
        let bytes: Vec<u8> = (0..hex.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
            .collect();
        assert_eq!(&bytes[..5], &[0, 0, 0, 0, 1], "magic byte and schema id 1");
        c.push(&bytes[5..]).unwrap_or_else(|e| panic!("{e}"));
    }
    let b = c.finish();
    assert_eq!(
        Value::Object(render(&b, 0)),
        json!({"event_time": "2024-06-01T10:00:00.000000+00:00",
               "id": "67e55044-10b1-426f-9247-bb680e5fe0c8", "n": -5, "amount": "-12.34",
               "note": null, "tags": ["x", "y"], "attrs": {"k": 1_099_511_627_776i64},
               "day": "1969-12-31", "kind": "B"})
    );
    assert_eq!(
        Value::Object(render(&b, 1)),
        json!({"event_time": "1969-12-31T23:59:59.999999+00:00",
               "id": "00000000-0000-0000-0000-000000000000", "n": i32::MAX,
               "amount": "99999999.99", "note": "héllo", "tags": [], "attrs": {},
               "day": "2024-02-29", "kind": "A"})
    );
}

#[test]
fn writer_fields_the_reader_lacks_are_skipped_whatever_their_type() {
    let v1 = schema_text(json!([
        {"name": "u", "type": ["int", "string", {"type": "array", "items": "null"}]},
        {"name": "r", "type": {"type": "record", "name": "Old", "fields": [
            {"name": "d", "type": {"type": "fixed", "name": "Dur", "size": 12, "logicalType": "duration"}}
        ]}},
        {"name": "keep", "type": "int"}
    ]));
    let v2 = schema_text(json!([{"name": "keep", "type": "long"}]));
    let table = MappedSchema::from_avro(&v2, &[], "ts").unwrap();
    let m = Arc::new(MappedSchema::from_avro_resolved(&v1, &[], &v2, &[], "ts").unwrap());
    let mut c = Converter::for_evolved_table(m, table.arrow_schema()).unwrap();
    let bytes = encode(
        &v1,
        vec![
            ("u", AV::Union(1, Box::new(AV::String("skip me".into())))),
            (
                "r",
                AV::Record(vec![(
                    "d".into(),
                    AV::Duration(apache_avro::Duration::new(
                        apache_avro::Months::new(1),
                        apache_avro::Days::new(2),
                        apache_avro::Millis::new(3),
                    )),
                )]),
            ),
            ("keep", AV::Int(9)),
        ],
    );
    let row = push_row(&mut c, &bytes).unwrap();
    assert_eq!(row["keep"], json!(9));
    let mut bad = bytes.clone();
    let at = bad.len() - 12 - 1 - 8 - 1; // the union branch of "u"
    bad[at] = 6; // branch 3 of 3
    assert_eq!(c.push(&bad).unwrap_err().field, "/u");
}

#[test]
fn reader_aliases_rename_and_unknown_enum_symbols_without_default_are_out_of_range() {
    let v1 = schema_text(json!([
        {"name": "old_name", "type": "string"},
        {"name": "e", "type": {"type": "enum", "name": "E", "symbols": ["A", "GONE"]}}
    ]));
    let v2 = schema_text(json!([
        {"name": "new_name", "aliases": ["old_name"], "type": "string"},
        {"name": "e", "type": {"type": "enum", "name": "E", "symbols": ["A"]}}
    ]));
    let table = MappedSchema::from_avro(&v2, &[], "ts").unwrap();
    let m = Arc::new(MappedSchema::from_avro_resolved(&v1, &[], &v2, &[], "ts").unwrap());
    let mut c = Converter::for_evolved_table(m, table.arrow_schema()).unwrap();
    let rec = |e: i32, sym: &str| {
        encode(
            &v1,
            vec![
                ("old_name", AV::String("v".into())),
                ("e", AV::Enum(e as u32, sym.into())),
            ],
        )
    };
    let row = push_row(&mut c, &rec(0, "A")).unwrap();
    assert_eq!((&row["new_name"], &row["e"]), (&json!("v"), &json!("A")));
    let e = c.push(&rec(1, "GONE")).unwrap_err();
    assert_eq!((e.code, e.field.as_str()), (DlqCode::ValueOutOfRange, "/e"));
}
