//! Fan-out by a field (`table = "{route}"`, docs/routing.md): which member channel keeps a
//! record, decided from its top-level route field before conversion: the key of a JSON
//! document, or the field of an Avro record or a Protobuf message read by its writer schema
//! ([`FieldReader`]).
//!
//! ```text
//!   record ──► route value (top-level field only) ──► its table ──► this member's? ── yes ─► convert
//!                 │                                    │                └─ no ──► skip (checkpointed past)
//!                 │ not a JSON object, not a value     │ none (unroutable = "dlq")
//!                 │ of its writer schema, too large    ▼
//!                 ▼                             the DLQ member: UNROUTABLE; the others skip
//!        the unroutable owner converts it
//!        (its real DLQ code)
//! ```
//!
//! Every member decides from the record's bytes alone (and, for Avro and Protobuf, the writer
//! schema its schema id names in the registry, which never changes), with the same rules, so
//! each record is kept (as a row or a DLQ entry) by exactly one member and skipped by the
//! others: the exactly-once invariant of each table (one row or one DLQ reason per record it
//! keeps) is unchanged.

use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, Visitor};

use std::sync::Arc;

use crate::config::{RouteConfig, Unroutable};
use crate::model::{DlqCode, DlqReason};
use crate::schema::avro::AvroWriter;
use crate::schema::protobuf::ProtoMessage;
use crate::schema::{Decoding, MappedSchema};

/// What a member does with one record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RouteDecision {
    /// Routed to this member's table (or this member owns what cannot be routed): converted.
    Keep,
    /// Another member's record: no row, no DLQ entry; its position is checkpointed past.
    Skip,
    /// Unroutable, and this member writes the DLQ entry.
    DeadLetter(DlqReason),
}

/// The route value of a record, as [`route_value`] (JSON) or a [`FieldReader`] reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RouteValue {
    /// A string (or an enum's symbol) as is; an integer (64 bits; a Protobuf `uint64`) or a
    /// boolean as its JSON text.
    Value(String),
    /// The field is missing, `null`, a float, an array or an object.
    Unusable,
    /// Not one JSON object, or bytes that are not a value of the record's writer schema: the
    /// converter refuses the record with its own code.
    Unreadable,
}

/// The member side of a routed channel: its table and the channel's route.
#[derive(Debug, Clone)]
pub struct Router {
    route: RouteConfig,
    table: String,
    /// The table whose member converts what cannot be routed (unreadable, too large): the
    /// default table, or the DLQ table.
    owner: Option<String>,
    max_record_size: usize,
}

impl Router {
    /// The router of the member writing `table`; records over `max_record_size` bytes are not
    /// read (the unroutable owner refuses them as `RECORD_TOO_LARGE`).
    pub fn new(route: &RouteConfig, table: &str, max_record_size: usize) -> Router {
        let owner = match &route.unroutable {
            Unroutable::Table(t) => Some(t.clone()),
            Unroutable::Dlq => route.dlq_table().map(str::to_string),
        };
        Router {
            route: route.clone(),
            table: table.to_string(),
            owner,
            max_record_size,
        }
    }

    /// The route field (`channel.destination.route_field`).
    pub fn field(&self) -> &str {
        &self.route.field
    }

    /// What this member does with the record whose JSON document is `document` (after the
    /// record's framing, `record.format`).
    pub fn decide(&self, document: &[u8]) -> RouteDecision {
        self.decide_by(document, None, |d| route_value(d, &self.route.field))
    }

    /// What this member does with the Avro record or Protobuf message `payload` (after the
    /// record's framing), whose route field `field` reads by the record's writer schema.
    pub fn decide_read(&self, field: &FieldReader, payload: &[u8]) -> RouteDecision {
        let why = match field {
            FieldReader::Unusable(why) => Some(why.as_str()),
            _ => None,
        };
        self.decide_by(payload, why, |p| field.route_value(p))
    }

    /// Decides by the route value `read` gives for `payload` (`why`: why the record's schema
    /// gives it none); a payload over the size limit is not read.
    fn decide_by(
        &self,
        payload: &[u8],
        why: Option<&str>,
        read: impl FnOnce(&[u8]) -> RouteValue,
    ) -> RouteDecision {
        let value = if payload.len() > self.max_record_size {
            RouteValue::Unreadable
        } else {
            read(payload)
        };
        let value = match value {
            RouteValue::Unreadable => return self.decide_unreadable(),
            RouteValue::Value(v) => Some(v),
            RouteValue::Unusable => None,
        };
        let owns_unroutable = self.owns_unroutable();
        match self.route.table_of(value.as_deref()) {
            Some(t) if t == self.table => RouteDecision::Keep,
            Some(_) => RouteDecision::Skip,
            None if owns_unroutable => RouteDecision::DeadLetter(DlqReason {
                code: DlqCode::Unroutable,
                field: format!(
                    "/{}",
                    crate::schema::escape_pointer_token(&self.route.field)
                ),
                message: match (value, why) {
                    (Some(v), _) => format!(
                        "route field value {} matches no route",
                        serde_json::Value::String(v)
                    ),
                    (None, Some(why)) => format!("the record's writer schema cannot route: {why}"),
                    (None, None) => {
                        "route field missing, null, or not a string, integer or boolean".to_string()
                    }
                },
            }),
            None => RouteDecision::Skip,
        }
    }
}

impl Router {
    /// What this member does with a record whose route field cannot be read (its framing is
    /// refused: a bad GSR or Confluent header, a payload that does not inflate; a schema id
    /// the registry does not have or whose schema has no mapping): the
    /// unroutable owner keeps it (its decoder refuses it with its own code), the others skip.
    pub fn decide_unreadable(&self) -> RouteDecision {
        if self.owns_unroutable() {
            RouteDecision::Keep
        } else {
            RouteDecision::Skip
        }
    }

    fn owns_unroutable(&self) -> bool {
        self.owner.as_deref() == Some(self.table.as_str())
    }
}

/// How the route field of one writer schema's records is read (`avro` and `protobuf`
/// channels; a JSON document is read by its keys, [`route_value`]).
#[derive(Debug, Clone)]
pub enum FieldReader {
    /// The writer schema's top-level field `index`, read by [`crate::convert`]'s Avro decoder.
    Avro {
        /// The writer schema's decode plan.
        writer: Arc<AvroWriter>,
        /// The route field's position among its top-level fields.
        index: usize,
    },
    /// The message's top-level field `index`, scanned by the Protobuf decoder.
    Protobuf {
        /// The message's decode plan.
        message: Arc<ProtoMessage>,
        /// The route field's position among its fields.
        index: usize,
    },
    /// The writer schema has no such top-level field, or not of a type that routes (a later
    /// version dropped or retyped it): its records have no route value, and this says why.
    Unusable(String),
}

impl FieldReader {
    /// The reader of top-level field `field` in the records of `schema` (mapped from the
    /// record's writer schema); `None` for a JSON Schema, whose records are read by their keys.
    pub fn of(schema: &MappedSchema, field: &str) -> Option<FieldReader> {
        let read =
            match schema.decoding() {
                Decoding::JsonSchema(_) => return None,
                Decoding::Avro(writer) => {
                    super::avro::route::field_index(writer, field).map(|index| FieldReader::Avro {
                        writer: writer.clone(),
                        index,
                    })
                }
                Decoding::Protobuf(message) => super::protobuf::route::field_index(message, field)
                    .map(|index| FieldReader::Protobuf {
                        message: message.clone(),
                        index,
                    }),
            };
        Some(read.unwrap_or_else(FieldReader::Unusable))
    }

    /// The route value of the record `payload` (after its framing).
    pub fn route_value(&self, payload: &[u8]) -> RouteValue {
        let read = match self {
            FieldReader::Avro { writer, index } => {
                super::avro::route::route_value(writer, *index, payload)
            }
            FieldReader::Protobuf { message, index } => {
                super::protobuf::route::route_value(message, *index, payload)
            }
            FieldReader::Unusable(_) => Ok(None),
        };
        match read {
            Ok(Some(v)) => RouteValue::Value(v),
            Ok(None) => RouteValue::Unusable,
            Err(_) => RouteValue::Unreadable,
        }
    }
}

/// Checks that `route`'s field can route the records of the channel's schema `schema`: a
/// top-level field whose column is a string, an int, a long or a boolean
/// ([`RouteConfig::check_field`]) and, for Avro and Protobuf, one the [`FieldReader`] reads
/// (not a Protobuf `Duration` or JSON-valued well-known type, whose columns are also longs or
/// strings).
///
/// Errors: what is wrong, for the key `channel[i].destination.route_field`.
pub fn check_route_field(route: &RouteConfig, schema: &MappedSchema) -> Result<(), String> {
    route.check_field(schema.iceberg_schema())?;
    match FieldReader::of(schema, &route.field) {
        Some(FieldReader::Unusable(why)) => Err(why),
        _ => Ok(()),
    }
}

/// The value of top-level key `field` of JSON document `record`, reading nothing else into
/// memory (the other values are skipped). The first occurrence of a repeated key counts (the
/// converter refuses such a record anyway).
pub fn route_value(record: &[u8], field: &str) -> RouteValue {
    let mut de = serde_json::Deserializer::from_slice(record);
    let value = match de.deserialize_map(Pick(field)) {
        Ok(v) => v,
        Err(_) => return RouteValue::Unreadable,
    };
    if de.end().is_err() {
        return RouteValue::Unreadable;
    }
    match value {
        Some(serde_json::Value::String(s)) => RouteValue::Value(s),
        Some(serde_json::Value::Bool(b)) => RouteValue::Value(b.to_string()),
        Some(serde_json::Value::Number(n)) if n.is_i64() || n.is_u64() => {
            RouteValue::Value(n.to_string())
        }
        _ => RouteValue::Unusable,
    }
}

/// Visits the top-level object, keeping the value of one key.
struct Pick<'f>(&'f str);

impl<'de> Visitor<'de> for Pick<'_> {
    type Value = Option<serde_json::Value>;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut found = None;
        while let Some(is_field) = map.next_key_seed(IsKey(self.0))? {
            if is_field && found.is_none() {
                found = Some(map.next_value::<serde_json::Value>()?);
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(found)
    }
}

/// A key, compared with the route field without being copied.
struct IsKey<'f>(&'f str);

impl<'de> DeserializeSeed<'de> for IsKey<'_> {
    type Value = bool;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<bool, D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for IsKey<'_> {
    type Value = bool;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a key")
    }

    fn visit_str<E: serde::de::Error>(self, key: &str) -> Result<bool, E> {
        Ok(key == self.0)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn route(unroutable: Unroutable) -> RouteConfig {
        RouteConfig {
            field: "region".into(),
            routes: BTreeMap::from([
                ("eu".into(), "events_eu".into()),
                ("us".into(), "events_us".into()),
                ("7".into(), "events_us".into()),
                ("true".into(), "events_ap".into()),
            ]),
            unroutable,
        }
    }

    /// Which tables keep `record`, and which write it as a DLQ entry.
    fn keepers(route: &RouteConfig, record: &str) -> (Vec<String>, Vec<String>) {
        let mut tables: Vec<&str> = route.tables().into_iter().collect();
        tables.push("events_other");
        let (mut kept, mut dlq) = (Vec::new(), Vec::new());
        for t in tables {
            match Router::new(route, t, 1000).decide(record.as_bytes()) {
                RouteDecision::Keep => kept.push(t.to_string()),
                RouteDecision::DeadLetter(r) => {
                    assert_eq!(r.code, DlqCode::Unroutable);
                    assert_eq!(r.field, "/region");
                    dlq.push(t.to_string())
                }
                RouteDecision::Skip => {}
            }
        }
        (kept, dlq)
    }

    #[test]
    fn reads_only_the_top_level_field_strings_integers_and_booleans() {
        let v = |r: &str| route_value(r.as_bytes(), "region");
        assert_eq!(v(r#"{"region":"eu"}"#), RouteValue::Value("eu".into()));
        assert_eq!(
            v(r#"{"a":{"region":"us"},"b":[1,{"x":2}],"region":"e\u0075"}"#),
            RouteValue::Value("eu".into())
        );
        assert_eq!(v(r#"{"region":7}"#), RouteValue::Value("7".into()));
        assert_eq!(v(r#"{"region":-7}"#), RouteValue::Value("-7".into()));
        assert_eq!(v(r#"{"region":true}"#), RouteValue::Value("true".into()));
        for unusable in [
            r#"{"region":null}"#,
            r#"{"region":1.5}"#,
            r#"{"region":["eu"]}"#,
            r#"{"region":{"x":"eu"}}"#,
            r#"{"user":{"region":"eu"}}"#,
            r#"{}"#,
        ] {
            assert_eq!(v(unusable), RouteValue::Unusable, "{unusable}");
        }
        assert_eq!(
            v(r#"{"region":"eu","region":"us"}"#),
            RouteValue::Value("eu".into())
        );
        for not_json in [
            r#"["eu"]"#,
            r#"{"region":"eu""#,
            r#"{"region":"eu"} x"#,
            "",
            "eu",
        ] {
            assert_eq!(v(not_json), RouteValue::Unreadable, "{not_json}");
        }
    }

    #[test]
    fn every_record_is_kept_by_exactly_one_member() {
        let dlq = route(Unroutable::Dlq);
        let one = |t: &str| (vec![t.to_string()], vec![]);
        assert_eq!(keepers(&dlq, r#"{"region":"eu"}"#), one("events_eu"));
        assert_eq!(keepers(&dlq, r#"{"region":"us"}"#), one("events_us"));
        assert_eq!(keepers(&dlq, r#"{"region":7}"#), one("events_us"));
        assert_eq!(keepers(&dlq, r#"{"region":true}"#), one("events_ap"));
        // Unroutable: the DLQ entry by the first table in name order, nobody else.
        let dead = (vec![], vec!["events_ap".to_string()]);
        assert_eq!(keepers(&dlq, r#"{"region":"mars"}"#), dead);
        assert_eq!(keepers(&dlq, r#"{"id":1}"#), dead);
        assert_eq!(keepers(&dlq, r#"{"region":null}"#), dead);
        // Not JSON, or too large: converted (and refused) by that same member.
        assert_eq!(keepers(&dlq, r#"{"region":"eu""#), one("events_ap"));
        let big = format!(r#"{{"region":"eu","pad":"{}"}}"#, "x".repeat(1000));
        assert_eq!(keepers(&dlq, &big), one("events_ap"));
        for t in dlq.tables() {
            let unreadable = Router::new(&dlq, t, 1000).decide_unreadable();
            let expected = if t == "events_ap" {
                RouteDecision::Keep
            } else {
                RouteDecision::Skip
            };
            assert_eq!(unreadable, expected, "{t}");
        }

        let default = route(Unroutable::Table("events_zz".into()));
        assert_eq!(keepers(&default, r#"{"region":"mars"}"#), one("events_zz"));
        assert_eq!(keepers(&default, r#"{"region":"eu"}"#), one("events_eu"));
        assert_eq!(keepers(&default, "not json"), one("events_zz"));
        let into_a_route = route(Unroutable::Table("events_us".into()));
        assert_eq!(
            keepers(&into_a_route, r#"{"region":"mars"}"#),
            one("events_us")
        );
    }

    /// The decode plan of the Avro record schema with `fields`.
    fn avro(fields: &str) -> MappedSchema {
        let text = format!(r#"{{"type":"record","name":"E","fields":[{fields}]}}"#);
        MappedSchema::from_avro(&text, &[], "").unwrap()
    }

    #[test]
    fn a_binary_record_is_kept_by_exactly_one_member_by_its_writer_schemas_field() {
        let dlq = route(Unroutable::Dlq);
        let decide = |reader: &FieldReader, payload: &[u8]| -> Vec<(String, RouteDecision)> {
            dlq.tables()
                .into_iter()
                .map(|t| {
                    (
                        t.to_string(),
                        Router::new(&dlq, t, 10).decide_read(reader, payload),
                    )
                })
                .filter(|(_, d)| *d != RouteDecision::Skip)
                .collect()
        };
        let reader = FieldReader::of(
            &avro(r#"{"name":"id","type":"long"},{"name":"region","type":"int"}"#),
            "region",
        )
        .unwrap();
        // id 1, region 7 (zigzag varints): the "7" route of JSON's integer 7.
        assert_eq!(
            decide(&reader, &[0x02, 0x0e]),
            [("events_us".to_string(), RouteDecision::Keep)]
        );
        // Truncated, or over the size limit: the unroutable owner converts it.
        let owner = [("events_ap".to_string(), RouteDecision::Keep)];
        assert_eq!(decide(&reader, &[0x02]), owner);
        assert_eq!(decide(&reader, &[0x02; 11]), owner);
        // A writer schema without the field (or retyped): unroutable, saying why.
        let dropped = FieldReader::of(&avro(r#"{"name":"id","type":"long"}"#), "region").unwrap();
        let decided = decide(&dropped, &[0x02]);
        let [(table, RouteDecision::DeadLetter(reason))] = decided.as_slice() else {
            panic!("{decided:?}")
        };
        assert_eq!(table, "events_ap");
        assert_eq!(reason.code, DlqCode::Unroutable);
        assert_eq!(
            reason.message,
            "the record's writer schema cannot route: \"region\" is not a top-level field of the Avro schema"
        );
        // JSON Schema records are read by their keys.
        let json = MappedSchema::from_json_schema(
            &serde_json::json!({"type":"object","properties":{"region":{"type":"string"}}}),
            "",
        )
        .unwrap();
        assert!(FieldReader::of(&json, "region").is_none());
    }

    #[test]
    fn a_route_field_the_reader_cannot_read_is_refused_at_activation() {
        let dlq = route(Unroutable::Dlq);
        assert!(
            check_route_field(&dlq, &avro(r#"{"name":"region","type":["null","string"]}"#)).is_ok()
        );
        let e = check_route_field(&dlq, &avro(r#"{"name":"region","type":"double"}"#)).unwrap_err();
        assert!(e.contains("\"region\" is a double"), "{e}");
        // A Duration's column is a long, but it is no route value.
        let files = [crate::schema::protobuf::ProtoFile {
            name: "e.proto".into(),
            text: "syntax = \"proto3\"; import \"google/protobuf/duration.proto\"; message E { google.protobuf.Duration region = 1; }".into(),
        }];
        let selector = crate::schema::protobuf::MessageSelector::Indexes(vec![0]);
        let proto = MappedSchema::from_protobuf(&files, &selector, "").unwrap();
        assert_eq!(
            check_route_field(&dlq, &proto).unwrap_err(),
            "\"region\" is a Protobuf google.protobuf.Duration: a route field is a string, an integer, a bool or an enum (or a wrapper of one of them)"
        );
    }
}
