//! `table = "{route}"`: one source fanned out to several tables by a top-level field of each
//! record (docs/routing.md, "Fan-out by a field").
//!
//! Such a channel runs as one **member channel** per routed table
//! ([`ChannelConfig::route_member`]), each a channel of its own in the lease store (its leases,
//! committer lease and epoch, checkpoints in its table), each reading the whole source and
//! keeping only the records routed to its table. Exactly-once per table is the single-table
//! protocol, unchanged: a member skips (checkpoints past) the records of the other tables.

use std::collections::{BTreeMap, BTreeSet};

use super::{ChannelConfig, DestinationConfig};

/// `table = "{route}"`: a table per value of `route_field` (docs/routing.md).
pub const TABLE_ROUTED: &str = "{route}";

/// Where a record whose route value matches no route goes (`channel.destination.unroutable`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unroutable {
    /// `"dlq"`: a DLQ entry with code `UNROUTABLE`, written by the member of
    /// [`RouteConfig::dlq_table`] alone.
    Dlq,
    /// A default table: its member keeps the record as a row.
    Table(String),
}

/// The validated `route_field`, `routes` and `unroutable` of a channel with
/// `table = "{route}"`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouteConfig {
    /// The top-level field whose value picks the table.
    pub field: String,
    /// Route value → table name.
    pub routes: BTreeMap<String, String>,
    /// Where unroutable records go.
    pub unroutable: Unroutable,
}

impl RouteConfig {
    /// Every table the channel writes, in name order: the routes' tables and the default
    /// table. One member channel each.
    pub fn tables(&self) -> BTreeSet<&str> {
        let mut tables: BTreeSet<&str> = self.routes.values().map(String::as_str).collect();
        if let Unroutable::Table(t) = &self.unroutable {
            tables.insert(t);
        }
        tables
    }

    /// The table of a record whose route value is `value` (`None`: no usable value): its
    /// route's table, else the default table; `None` when it goes to the DLQ.
    pub fn table_of(&self, value: Option<&str>) -> Option<&str> {
        match value.and_then(|v| self.routes.get(v)) {
            Some(table) => Some(table),
            None => match &self.unroutable {
                Unroutable::Table(t) => Some(t),
                Unroutable::Dlq => None,
            },
        }
    }

    /// With `unroutable = "dlq"`: the one table whose member writes the `UNROUTABLE` DLQ
    /// entries, the first in name order (the other members skip those records). `None` with a
    /// default table.
    pub fn dlq_table(&self) -> Option<&str> {
        match &self.unroutable {
            Unroutable::Dlq => self.tables().into_iter().next(),
            Unroutable::Table(_) => None,
        }
    }
}

impl ChannelConfig {
    /// Whether the channel fans records out by a field (`table = "{route}"`): it then runs as
    /// one member channel per routed table ([`ChannelConfig::route_member`]). A member itself
    /// is not.
    pub fn is_routed(&self) -> bool {
        matches!(&self.destination, DestinationConfig::Iceberg(d) if d.route.is_some() && d.table == TABLE_ROUTED)
    }
}

impl RouteConfig {
    /// Checks that the route field is a top-level field of the table schema `schema` whose
    /// values can be routed: a string, an int, a long or a boolean.
    ///
    /// Errors: what is wrong, for the key `channel[i].destination.route_field`.
    pub fn check_field(&self, schema: &iceberg::spec::Schema) -> Result<(), String> {
        use iceberg::spec::{PrimitiveType, Type};
        let Some(field) = schema.as_struct().field_by_name(&self.field) else {
            return Err(format!(
                "\"{}\" is not a top-level field of the schema",
                self.field
            ));
        };
        match field.field_type.as_ref() {
            Type::Primitive(
                PrimitiveType::String
                | PrimitiveType::Int
                | PrimitiveType::Long
                | PrimitiveType::Boolean,
            ) => Ok(()),
            other => Err(format!(
                "\"{}\" is a {other}: a route field is a string, an integer or a boolean",
                self.field
            )),
        }
    }

    /// Checks that every route value of `routes` can be the route value of a record, given the
    /// route field's type in `schema` (after [`RouteConfig::check_field`]): an integer field's
    /// records route by their value's decimal text (`"7"`, `"-12"`: no sign `+`, no leading
    /// zero, within 64 bits), a boolean's by `"true"` or `"false"` (docs/routing.md, "Route
    /// value"). A value no record can have (`"07"`, `"x"` for an integer, `"yes"` for a boolean)
    /// would leave its table empty and send the records meant for it to the DLQ or the default
    /// table.
    ///
    /// Errors: the first such value and why, for the key `channel[i].destination.routes`.
    pub fn check_routes(&self, schema: &iceberg::spec::Schema) -> Result<(), String> {
        use iceberg::spec::{PrimitiveType, Type};
        let Some(field) = schema.as_struct().field_by_name(&self.field) else {
            return Ok(());
        };
        let integer = |v: &str| {
            v.parse::<i128>().is_ok_and(|n| {
                n.to_string() == v && i128::from(i64::MIN) <= n && n <= i128::from(u64::MAX)
            })
        };
        let (ok, kind): (&dyn Fn(&str) -> bool, &str) = match field.field_type.as_ref() {
            Type::Primitive(PrimitiveType::Int | PrimitiveType::Long) => (
                &integer,
                "an integer's decimal text (no sign +, no leading zero)",
            ),
            Type::Primitive(PrimitiveType::Boolean) => (
                &|v: &str| v == "true" || v == "false",
                "\"true\" or \"false\"",
            ),
            _ => return Ok(()),
        };
        match self.routes.keys().find(|v| !ok(v)) {
            Some(v) => Err(format!(
                "route value \"{v}\" can never match: \"{}\" is a {}, whose records route by {kind}",
                self.field, field.field_type
            )),
            None => Ok(()),
        }
    }
}
