//! Fan-out by a field (`table = "{route}"`, docs/routing.md): which member channel keeps a
//! record, decided from its JSON document's top-level route field before conversion.
//!
//! ```text
//!   record ──► route value (top-level key only) ──► its table ──► this member's? ── yes ─► convert
//!                 │                                    │                └─ no ──► skip (checkpointed past)
//!                 │ not a JSON object, or too large    │ none (unroutable = "dlq")
//!                 ▼                                    ▼
//!        the unroutable owner converts it      the DLQ member: UNROUTABLE; the others skip
//!        (its real DLQ code)
//! ```
//!
//! Every member decides from the record's bytes alone, with the same rules, so each record is
//! kept (as a row or a DLQ entry) by exactly one member and skipped by the others: the
//! exactly-once invariant of each table (one row or one DLQ reason per record it keeps) is
//! unchanged.

use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, Visitor};

use crate::config::{RouteConfig, Unroutable};
use crate::model::{DlqCode, DlqReason};

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

/// The route value of a record, as [`route_value`] reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RouteValue {
    /// A string as is; an integer (64 bits) or a boolean as its JSON text.
    Value(String),
    /// The field is missing, `null`, a float, an array or an object.
    Unusable,
    /// Not one JSON object: the converter refuses the record with its own code.
    NotJson,
}

/// The member side of a routed channel: its table and the channel's route.
#[derive(Debug, Clone)]
pub struct Router {
    route: RouteConfig,
    table: String,
    /// The table whose member converts what cannot be routed (not JSON, too large): the
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

    /// What this member does with the record whose JSON document is `document` (after the
    /// record's framing, `record.format`).
    pub fn decide(&self, document: &[u8]) -> RouteDecision {
        let value = if document.len() > self.max_record_size {
            RouteValue::NotJson
        } else {
            route_value(document, &self.route.field)
        };
        let value = match value {
            RouteValue::NotJson => return self.decide_unreadable(),
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
                message: match value {
                    Some(v) => format!(
                        "route field value {} matches no route",
                        serde_json::Value::String(v)
                    ),
                    None => {
                        "route field missing, null, or not a string, integer or boolean".to_string()
                    }
                },
            }),
            None => RouteDecision::Skip,
        }
    }
}

impl Router {
    /// What this member does with a record whose JSON document cannot be read (its framing is
    /// refused: a bad GSR or Confluent header, a payload that does not inflate): the
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

/// The value of top-level key `field` of JSON document `record`, reading nothing else into
/// memory (the other values are skipped). The first occurrence of a repeated key counts (the
/// converter refuses such a record anyway).
pub fn route_value(record: &[u8], field: &str) -> RouteValue {
    let mut de = serde_json::Deserializer::from_slice(record);
    let value = match de.deserialize_map(Pick(field)) {
        Ok(v) => v,
        Err(_) => return RouteValue::NotJson,
    };
    if de.end().is_err() {
        return RouteValue::NotJson;
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
            assert_eq!(v(not_json), RouteValue::NotJson, "{not_json}");
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
}
