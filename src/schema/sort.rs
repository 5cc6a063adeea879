//! Sort orders: the terms of `[channel.destination] sort` (`"user_id"`, `"event_time desc"`,
//! `"name asc nulls last"`) parsed, and the table's Iceberg sort order built from them against
//! its schema (docs/partitioning.md, "Sort order").
//!
//! Invariant: a term is refused, naming it, when its field is not a top-level primitive field of
//! the schema; the writer sorts every data file's rows by the table's sort order.

use std::fmt;

use iceberg::spec::{NullOrder, Schema, SortDirection, SortField, SortOrder, Transform};

/// A term of `sort`: a top-level field, its direction and where its nulls go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SortTerm {
    /// Name of the field (top-level, primitive).
    pub source: String,
    /// Descending (`desc`) instead of ascending.
    pub descending: bool,
    /// Nulls first. Default: first when ascending, last when descending (Iceberg's and Spark's
    /// defaults).
    pub nulls_first: bool,
}

impl SortTerm {
    /// Parses `field [asc|desc] [nulls first|nulls last]` (words separated by spaces).
    ///
    /// Errors: the reason, lowercase, for the caller to prefix with the key.
    pub fn parse(text: &str) -> Result<Self, String> {
        let words: Vec<&str> = text.split_whitespace().collect();
        let Some((field, rest)) = words.split_first() else {
            return Err(
                "a sort term names a field: \"field [asc|desc] [nulls first|nulls last]\"".into(),
            );
        };
        let (descending, rest) = match rest.first() {
            Some(&"asc") => (false, &rest[1..]),
            Some(&"desc") => (true, &rest[1..]),
            _ => (false, rest),
        };
        let nulls_first = match rest {
            [] => !descending,
            ["nulls", "first"] => true,
            ["nulls", "last"] => false,
            _ => {
                return Err(format!(
                    "{text:?} is not a sort term: expected \"field [asc|desc] [nulls first|nulls last]\""
                ))
            }
        };
        Ok(SortTerm {
            source: field.to_string(),
            descending,
            nulls_first,
        })
    }
}

impl fmt::Display for SortTerm {
    /// The term as written in the configuration, in full: `id desc nulls last`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let dir = if self.descending { "desc" } else { "asc" };
        let nulls = if self.nulls_first { "first" } else { "last" };
        write!(f, "{} {dir} nulls {nulls}", self.source)
    }
}

/// The table's sort order (order id 1; unsorted, id 0, without terms): each term's field of
/// `schema`, by identity.
///
/// Errors: `(index of the term, reason)`: the field is not a top-level primitive field of
/// `schema`, or is sorted twice.
pub fn sort_order(terms: &[SortTerm], schema: &Schema) -> Result<SortOrder, (usize, String)> {
    let mut b = SortOrder::builder();
    for (i, t) in terms.iter().enumerate() {
        if terms[..i].iter().any(|u| u.source == t.source) {
            return Err((i, format!("{:?} is sorted on twice", t.source)));
        }
        let Some(field) = schema.as_struct().field_by_name(&t.source) else {
            return Err((
                i,
                format!("{:?} is not a top-level field of the schema", t.source),
            ));
        };
        if !field.field_type.is_primitive() {
            return Err((
                i,
                format!(
                    "{:?} is a {}: only primitive fields sort",
                    t.source, field.field_type
                ),
            ));
        }
        b.with_sort_field(
            SortField::builder()
                .source_id(field.id)
                .transform(Transform::Identity)
                .direction(if t.descending {
                    SortDirection::Descending
                } else {
                    SortDirection::Ascending
                })
                .null_order(if t.nulls_first {
                    NullOrder::First
                } else {
                    NullOrder::Last
                })
                .build(),
        );
    }
    b.build(schema).map_err(|e| (0, e.message().to_string()))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use iceberg::spec::{NestedField, PrimitiveType, StructType, Type};

    use super::*;

    #[test]
    fn sort_terms_parse_with_iceberg_default_null_orders() {
        let t = |s: &str| SortTerm::parse(s).unwrap().to_string();
        assert_eq!(t("user_id"), "user_id asc nulls first");
        assert_eq!(t(" event_time  desc "), "event_time desc nulls last");
        assert_eq!(t("name asc nulls last"), "name asc nulls last");
        assert_eq!(t("name desc nulls first"), "name desc nulls first");
        for bad in [
            "",
            "a sideways",
            "a desc nulls",
            "a nulls middle",
            "a desc asc",
        ] {
            assert!(SortTerm::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_sort_order_takes_top_level_primitive_fields_once() {
        let schema = Schema::builder()
            .with_fields(vec![
                Arc::new(NestedField::required(
                    1,
                    "id",
                    Type::Primitive(PrimitiveType::Long),
                )),
                Arc::new(NestedField::optional(
                    2,
                    "user",
                    Type::Struct(StructType::new(vec![Arc::new(NestedField::optional(
                        3,
                        "country",
                        Type::Primitive(PrimitiveType::String),
                    ))])),
                )),
            ])
            .build()
            .unwrap();
        let terms = |ts: &[&str]| -> Vec<SortTerm> {
            ts.iter().map(|t| SortTerm::parse(t).unwrap()).collect()
        };
        let order = sort_order(&terms(&["id desc"]), &schema).unwrap();
        assert_eq!(order.order_id, 1);
        assert_eq!(order.fields[0].source_id, 1);
        assert_eq!(order.fields[0].direction, SortDirection::Descending);
        assert_eq!(order.fields[0].null_order, NullOrder::Last);
        assert!(sort_order(&[], &schema).unwrap().is_unsorted());
        for (ts, says) in [
            (&["user"][..], "only primitive fields sort"),
            (&["country"][..], "not a top-level field"),
            (&["id", "id desc"][..], "sorted on twice"),
        ] {
            let (_, e) = sort_order(&terms(ts), &schema).unwrap_err();
            assert!(e.contains(says), "{ts:?}: {e}");
        }
    }
}
