//! Change data capture settings: how a record carries its change (`channel.record.envelope`)
//! and how the table takes it (`channel.destination.mode`, `key`, `format_version`); docs/cdc.md.
//!
//! The key is checked against the table's schema wherever the schema is known (the schema file
//! at `floe validate` and at start, the registry's schema at activation) by [`check_key`].

use serde::Deserialize;

/// How each record carries its change (`channel.record.envelope`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Envelope {
    /// `"none"`: the record is the row.
    #[default]
    None,
    /// `"debezium"`: a Debezium change event (`before`, `after`, `op`), with or without the JSON
    /// converter's `schemas.enable` wrapper (`{"schema": …, "payload": …}`).
    Debezium,
    /// `"upsert"`: the record is the row; a Kafka tombstone (no value) deletes the row of the
    /// message key.
    Upsert,
}

impl Envelope {
    /// The envelope as written in the configuration.
    pub fn as_str(&self) -> &'static str {
        match self {
            Envelope::None => "none",
            Envelope::Debezium => "debezium",
            Envelope::Upsert => "upsert",
        }
    }
}

/// How a table takes the channel's rows (`channel.destination.mode`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WriteMode {
    /// `"append"`: every row is appended (with an envelope, a changelog of the `after` rows).
    #[default]
    Append,
    /// `"upsert"`: the table holds one row per key, its last change; deletes remove it.
    Upsert,
}

/// The Iceberg format version of the tables a channel creates (`channel.destination.format_version`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum TableFormatVersion {
    /// 2: deletes are position-delete files.
    #[default]
    V2,
    /// 3: deletes are deletion vectors.
    V3,
}

impl TableFormatVersion {
    /// The version as a number (2 or 3).
    pub fn number(&self) -> u8 {
        match self {
            TableFormatVersion::V2 => 2,
            TableFormatVersion::V3 => 3,
        }
    }

    /// Iceberg's format version.
    pub fn iceberg(&self) -> iceberg::spec::FormatVersion {
        match self {
            TableFormatVersion::V2 => iceberg::spec::FormatVersion::V2,
            TableFormatVersion::V3 => iceberg::spec::FormatVersion::V3,
        }
    }
}

/// Checks that every column of `key` is a top-level, required field of `schema` of a type that
/// can be a key (not float, double, nor a struct, list or map; Iceberg spec, "Identifier Field
/// IDs").
///
/// Errors: what is wrong, for the key `channel[i].destination.key`.
pub fn check_key(key: &[String], schema: &iceberg::spec::Schema) -> Result<(), String> {
    use iceberg::spec::{PrimitiveType, Type};
    for name in key {
        let Some(field) = schema.as_struct().field_by_name(name) else {
            let nested = schema.field_by_name(name).is_some();
            return Err(if nested {
                format!("\"{name}\" is not a top-level field: a key column is a top-level field")
            } else {
                format!("\"{name}\" is not a top-level field of the schema")
            });
        };
        if !field.required {
            return Err(format!(
                "\"{name}\" is optional: a key column is required (listed in the schema's `required`, never null)"
            ));
        }
        match field.field_type.as_ref() {
            Type::Primitive(PrimitiveType::Float | PrimitiveType::Double) => {
                return Err(format!(
                    "\"{name}\" is a {}: a float or double cannot be a key (equal values need not compare equal)",
                    field.field_type
                ))
            }
            Type::Primitive(_) => {}
            other => {
                return Err(format!(
                    "\"{name}\" is a {other}: a key column is a primitive (not a struct, list or map)"
                ))
            }
        }
    }
    Ok(())
}

/// Checks that a Debezium channel's schema describes the row (the `after` object), not the
/// change event: a schema whose top-level fields are the event's (`after` with `before` or
/// `op`, or the JSON converter's `schema` and `payload`) would turn every event into a row of
/// nulls, its fields being extra to the schema. Debezium's event: `before`, `after`, `op`,
/// `source`, `ts_ms` (Debezium's documentation, "Change event values").
///
/// Errors: what is wrong, for the key `channel[i].schema.file`.
pub fn check_row_schema(envelope: Envelope, schema: &iceberg::spec::Schema) -> Result<(), String> {
    if envelope != Envelope::Debezium {
        return Ok(());
    }
    let has = |name: &str| schema.as_struct().field_by_name(name).is_some();
    let event = has("after") && (has("before") || has("op"));
    let wrapped = has("schema") && has("payload");
    if event || wrapped {
        return Err(format!(
            "the schema describes Debezium's change event ({}), not the row: with envelope = \"debezium\" give the schema of the `after` object (the table's columns)",
            if event { "`before`, `after`, `op`" } else { "`schema`, `payload`" }
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use iceberg::spec::{NestedField, PrimitiveType, Schema, StructType, Type};

    use super::*;

    fn schema() -> Schema {
        Schema::builder()
            .with_fields(vec![
                Arc::new(NestedField::required(
                    1,
                    "id",
                    Type::Primitive(PrimitiveType::Long),
                )),
                Arc::new(NestedField::optional(
                    2,
                    "name",
                    Type::Primitive(PrimitiveType::String),
                )),
                Arc::new(NestedField::required(
                    3,
                    "score",
                    Type::Primitive(PrimitiveType::Double),
                )),
                Arc::new(NestedField::required(
                    4,
                    "address",
                    Type::Struct(StructType::new(vec![Arc::new(NestedField::required(
                        5,
                        "city",
                        Type::Primitive(PrimitiveType::String),
                    ))])),
                )),
                Arc::new(NestedField::required(
                    6,
                    "region",
                    Type::Primitive(PrimitiveType::String),
                )),
            ])
            .build()
            .unwrap()
    }

    #[test]
    fn a_key_is_top_level_required_and_not_floating() {
        let s = schema();
        let key = |names: &[&str]| {
            check_key(&names.iter().map(|n| n.to_string()).collect::<Vec<_>>(), &s)
        };
        key(&["id"]).unwrap();
        key(&["region", "id"]).unwrap();
        let why = |names: &[&str]| key(names).unwrap_err();
        assert!(why(&["missing"]).contains("not a top-level field of the schema"));
        assert!(why(&["address.city"]).contains("is not a top-level field: a key column"));
        assert!(why(&["name"]).contains("optional"));
        assert!(why(&["score"]).contains("float or double"));
        assert!(why(&["address"]).contains("primitive"));
        assert!(why(&["id", "score"]).contains("\"score\""));
    }

    #[test]
    fn a_debezium_channels_schema_is_the_rows_not_the_events() {
        let of = |names: &[&str]| {
            let fields = names
                .iter()
                .enumerate()
                .map(|(i, n)| {
                    Arc::new(NestedField::optional(
                        i as i32 + 1,
                        *n,
                        Type::Primitive(PrimitiveType::String),
                    ))
                })
                .collect::<Vec<_>>();
            Schema::builder().with_fields(fields).build().unwrap()
        };
        let event = of(&["before", "after", "op", "ts_ms"]);
        let message = check_row_schema(Envelope::Debezium, &event).unwrap_err();
        assert!(message.contains("`before`, `after`, `op`"), "{message}");
        let wrapped = check_row_schema(Envelope::Debezium, &of(&["schema", "payload"]));
        assert!(wrapped.unwrap_err().contains("`schema`, `payload`"));
        // A row may have a column named `after` or `op` alone; other envelopes take any row.
        check_row_schema(Envelope::Debezium, &of(&["id", "op"])).unwrap();
        check_row_schema(Envelope::Debezium, &of(&["id", "after"])).unwrap();
        check_row_schema(Envelope::Upsert, &event).unwrap();
        check_row_schema(Envelope::None, &event).unwrap();
    }
}
