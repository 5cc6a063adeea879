//! The channel's table: created at activation with floe's properties and partition spec,
//! refused when another channel (or another writer) owns it or its schema differs, and never
//! written after it was replaced under its name (docs/design.md, protocol steps 9–10).

use std::collections::HashMap;

use iceberg::spec::{FormatVersion, UnboundPartitionSpec};
use iceberg::table::Table;
use iceberg::{Catalog, Error, ErrorKind, TableCreation, TableIdent};

use super::table_state::{PROP_CHANNEL, PROP_CHECKPOINTS};
use crate::catalog::CatalogError;
use crate::schema::partition::PartitionTerm;
use crate::schema::MappedSchema;

/// What the channel's table must look like.
#[derive(Debug, Clone)]
pub struct TableSpec {
    /// Namespace and table name.
    pub ident: TableIdent,
    /// Channel name (stored in [`PROP_CHANNEL`]).
    pub channel: String,
    /// `write.parquet.compression-codec` value: `zstd`, `snappy` or `uncompressed`.
    pub compression_codec: String,
    /// `write.target-file-size-bytes`.
    pub target_file_size_bytes: u64,
    /// The partition spec's terms (`[hour(<partition field>)]` for `partition_field`).
    pub partition: Vec<PartitionTerm>,
    /// The sort order's terms (empty: unsorted).
    pub sort: Vec<crate::schema::sort::SortTerm>,
    /// An upsert table's key columns (`destination.key`), its identifier fields; empty for an
    /// append table (which then may have any).
    pub key: Vec<String>,
    /// The table's format version (`destination.format_version`): created with it, and an
    /// existing table must have it.
    pub format_version: FormatVersion,
}

/// Loads the channel's table, creating the namespace and the table when missing (at activation)
/// (format `spec.format_version`, the partition spec of `spec.partition`, `spec.key` as the
/// identifier fields, floe's properties).
///
/// Errors: [`CatalogError::Incompatible`] when a table exists under that name that this
/// channel did not create, or whose partition spec is not `spec.partition`, whose identifier
/// fields are not `spec.key` (an upsert table) or whose format version is not
/// `spec.format_version`; `DataInvalid` when a term does not apply to the schema (a missing
/// field, a type its transform does not take) or a key column cannot be an identifier field.
pub async fn ensure_table(
    catalog: &dyn Catalog,
    spec: &TableSpec,
    schema: &MappedSchema,
) -> Result<Table, CatalogError> {
    let ns = spec.ident.namespace();
    if !catalog.namespace_exists(ns).await? {
        match catalog.create_namespace(ns, HashMap::new()).await {
            Ok(_) => {}
            // Another worker created it first.
            Err(_) if catalog.namespace_exists(ns).await? => {}
            Err(e) => return Err(e.into()),
        }
    }
    if !catalog.table_exists(&spec.ident).await? {
        let partition_spec = partition_spec(&spec.partition, schema.iceberg_schema())?;
        let sort_order = crate::schema::sort::sort_order(&spec.sort, schema.iceberg_schema())
            .map_err(|(i, reason)| {
                Error::new(ErrorKind::DataInvalid, format!("sort term {i}: {reason}"))
            })?;
        let properties = [
            (PROP_CHANNEL.to_string(), spec.channel.clone()),
            (
                "write.parquet.compression-codec".to_string(),
                spec.compression_codec.clone(),
            ),
            (
                "write.target-file-size-bytes".to_string(),
                spec.target_file_size_bytes.to_string(),
            ),
            // The committer fences its commits itself; a blind retry would rebase a commit
            // onto a snapshot it never validated (docs/design.md step 4).
            ("commit.retry.num-retries".to_string(), "0".to_string()),
            // Table metadata files are JSON that grows with every snapshot: gzip them
            // (`*.gz.metadata.json`, Iceberg spec "Table Metadata"; every reader supports it).
            (
                "write.metadata.compression-codec".to_string(),
                "gzip".to_string(),
            ),
            (PROP_CHECKPOINTS.to_string(), "{}".to_string()),
        ];
        let creation = TableCreation::builder()
            .name(spec.ident.name().to_string())
            .schema(with_identifier_fields(schema.iceberg_schema(), &spec.key)?)
            .partition_spec(partition_spec)
            .sort_order(sort_order)
            .properties(properties)
            // iceberg-rust's REST catalog does not send it (its request has no format version;
            // the `format-version` property is reserved): such a table is then refused below.
            .format_version(spec.format_version)
            .build();
        match catalog.create_table(ns, creation).await {
            Ok(_) => {}
            // Lost a creation race: fall through and check ownership of the winner's table.
            Err(_) if catalog.table_exists(&spec.ident).await? => {}
            Err(e) => return Err(e.into()),
        }
    }
    let table = catalog.load_table(&spec.ident).await?;
    check_owned(&table, spec, schema)?;
    Ok(table)
}

/// `schema` with the top-level fields named by `key` as its identifier fields (an upsert
/// table's key; unchanged for an empty key).
///
/// Errors: `DataInvalid` for a key column that is not a top-level field or cannot be an
/// identifier field (optional, float, double, nested; Iceberg spec, "Identifier Field IDs").
pub fn with_identifier_fields(
    schema: &iceberg::spec::Schema,
    key: &[String],
) -> Result<iceberg::spec::Schema, Error> {
    if key.is_empty() {
        return Ok(schema.clone());
    }
    let ids = key
        .iter()
        .map(|name| {
            schema
                .as_struct()
                .field_by_name(name)
                .map(|f| f.id)
                .ok_or_else(|| {
                    Error::new(
                        ErrorKind::DataInvalid,
                        format!("key column \"{name}\" is not a top-level field of the schema"),
                    )
                })
        })
        .collect::<Result<Vec<i32>, Error>>()?;
    schema
        .clone()
        .into_builder()
        .with_identifier_field_ids(ids)
        .build()
}

/// The names of `schema`'s identifier fields, in id order.
fn identifier_names(schema: &iceberg::spec::Schema) -> Vec<String> {
    let mut ids: Vec<i32> = schema.identifier_field_ids().collect();
    ids.sort_unstable();
    ids.into_iter()
        .filter_map(|id| schema.name_by_field_id(id).map(str::to_string))
        .collect()
}

/// The partition spec of `terms` on `schema` (docs/partitioning.md).
///
/// Errors: `DataInvalid` naming the term and why it does not apply to the schema.
pub fn partition_spec(
    terms: &[PartitionTerm],
    schema: &iceberg::spec::Schema,
) -> Result<UnboundPartitionSpec, Error> {
    crate::schema::partition::unbound_spec(terms, schema).map_err(|(i, reason)| {
        Error::new(
            ErrorKind::DataInvalid,
            format!("partition term {i}: {reason}"),
        )
    })
}

/// Checks that `table` (just loaded as `ident`) is still the table whose uuid was `was`: a table
/// dropped and created again under the same name has lost its checkpoints, and is treated as
/// dropped (the channel is suspended, nothing is committed into it).
///
/// Errors: `TableNotFound`, naming both uuids.
pub fn check_same_table(ident: &TableIdent, was: &uuid::Uuid, table: &Table) -> Result<(), Error> {
    let now = table.metadata().uuid();
    if *was == now {
        return Ok(());
    }
    Err(Error::new(
        ErrorKind::TableNotFound,
        format!(
            "table {ident} (uuid {was}) was dropped and replaced while running (now uuid {now})"
        ),
    ))
}

/// Refuses a table floe did not create for this channel, or whose schema or partition spec
/// differs from the channel's (docs/design.md "Iceberg table"; a table with a schema history
/// evolved under `evolution = "compatible"` only has to take the channel's version).
fn check_owned(table: &Table, spec: &TableSpec, schema: &MappedSchema) -> Result<(), CatalogError> {
    let incompatible_at = |key: &'static str, reason: String| CatalogError::Incompatible {
        table: spec.ident.to_string(),
        channel: spec.channel.clone(),
        reason,
        key,
    };
    let incompatible = |reason: String| incompatible_at("table", reason);
    let md = table.metadata();
    match md.properties().get(PROP_CHANNEL) {
        Some(owner) if *owner == spec.channel => {}
        Some(owner) => {
            return Err(incompatible(format!(
                "it belongs to channel {owner} (table property {PROP_CHANNEL})"
            )))
        }
        None => {
            return Err(incompatible(format!(
                "floe did not create it (no table property {PROP_CHANNEL})"
            )))
        }
    }
    let terms = &spec.partition;
    let part_spec = md.default_partition_spec();
    let fields = part_spec.fields();
    let current = md.current_schema();
    let ok = fields.len() == terms.len()
        && fields.iter().zip(terms).all(|(f, t)| {
            f.transform == t.iceberg_transform()
                && current
                    .field_by_id(f.source_id)
                    .is_some_and(|s| s.name == t.source)
        });
    if !ok {
        let want: Vec<String> = terms.iter().map(|t| t.to_string()).collect();
        return Err(incompatible_at(
            "partition",
            format!("its partition spec is not [{}]", want.join(", ")),
        ));
    }
    if md.format_version() != spec.format_version {
        return Err(incompatible_at(
            "format_version",
            format!(
                "its format version is {}, the channel's format_version is {}",
                md.format_version() as u8,
                spec.format_version as u8
            ),
        ));
    }
    // An upsert table's key is its identifier fields, exactly (in any order); an append
    // channel takes no table with identifier fields (an upsert table: appending to it would
    // leave keys twice and deleted rows alive, while readers trust the key as unique).
    let mut have = identifier_names(current);
    let mut want = spec.key.clone();
    have.sort();
    want.sort();
    if have != want && spec.key.is_empty() {
        return Err(incompatible_at(
            "mode",
            format!(
                "its identifier fields are {have:?} (an upsert table), the channel's mode is \"append\": set mode = \"upsert\" and key = {have:?}, or give the channel another table"
            ),
        ));
    }
    if have != want {
        return Err(incompatible_at(
            "key",
            format!(
                "its identifier fields are {have:?}, the channel's key is {:?}",
                spec.key
            ),
        ));
    }
    let order = md.default_sort_order();
    let sorted_as_configured = order.fields.len() == spec.sort.len()
        && order.fields.iter().zip(&spec.sort).all(|(f, t)| {
            f.transform == iceberg::spec::Transform::Identity
                && (f.direction == iceberg::spec::SortDirection::Descending) == t.descending
                && (f.null_order == iceberg::spec::NullOrder::First) == t.nulls_first
                && current
                    .field_by_id(f.source_id)
                    .is_some_and(|s| s.name == t.source)
        });
    if !sorted_as_configured {
        let want: Vec<String> = spec.sort.iter().map(|t| t.to_string()).collect();
        return Err(incompatible_at(
            "sort",
            format!("its sort order is not [{}]", want.join(", ")),
        ));
    }
    // A table evolved by `evolution = "compatible"` (it has a schema history) takes the
    // channel's version when its records convert into the table's schema: the table may have
    // more fields, wider types, optional fields where the version's are required.
    if md
        .properties()
        .contains_key(super::evolve::PROP_SCHEMA_HISTORY)
    {
        let arrow = iceberg::arrow::schema_to_arrow_schema(current)
            .map_err(|e| incompatible(format!("its schema has no Arrow form: {e}")))?;
        crate::convert::Converter::for_evolved_table(
            std::sync::Arc::new(schema.clone()),
            std::sync::Arc::new(arrow),
        )
        .map_err(|e| {
            incompatible(format!(
                "its schema is not an evolution of the channel's schema version: {e}"
            ))
        })?;
        return Ok(());
    }
    if let Some(difference) =
        struct_difference(schema.iceberg_schema().as_struct(), current.as_struct(), "")
    {
        return Err(incompatible(format!(
            "its schema differs from the channel's: {difference}"
        )));
    }
    Ok(())
}

/// The first difference between the channel's struct `expected` and the table's `actual`, by
/// field name, type and required-ness (field ids are not compared: catalogs reassign them at
/// creation), as `"<path>: <what>"`; `None` when they match.
fn struct_difference(
    expected: &iceberg::spec::StructType,
    actual: &iceberg::spec::StructType,
    path: &str,
) -> Option<String> {
    let names = |s: &iceberg::spec::StructType| -> Vec<String> {
        s.fields().iter().map(|f| f.name.clone()).collect()
    };
    if names(expected) != names(actual) {
        return Some(format!(
            "{}: fields {:?}, the table has {:?}",
            if path.is_empty() { "<root>" } else { path },
            names(expected),
            names(actual)
        ));
    }
    expected
        .fields()
        .iter()
        .zip(actual.fields())
        .find_map(|(e, a)| field_difference(e, a, &join_path(path, &e.name)))
}

fn field_difference(
    expected: &iceberg::spec::NestedField,
    actual: &iceberg::spec::NestedField,
    path: &str,
) -> Option<String> {
    use iceberg::spec::Type;
    if expected.required != actual.required {
        let word = |r: bool| if r { "required" } else { "optional" };
        return Some(format!(
            "{path}: {} in the channel, {} in the table",
            word(expected.required),
            word(actual.required)
        ));
    }
    match (expected.field_type.as_ref(), actual.field_type.as_ref()) {
        (Type::Struct(e), Type::Struct(a)) => struct_difference(e, a, path),
        (Type::List(e), Type::List(a)) => field_difference(
            &e.element_field,
            &a.element_field,
            &join_path(path, "element"),
        ),
        (Type::Map(e), Type::Map(a)) => {
            field_difference(&e.key_field, &a.key_field, &join_path(path, "key")).or_else(|| {
                field_difference(&e.value_field, &a.value_field, &join_path(path, "value"))
            })
        }
        (Type::Primitive(e), Type::Primitive(a)) if e == a => None,
        (e, a) => Some(format!("{path}: {e} in the channel, {a} in the table")),
    }
}

fn join_path(path: &str, name: &str) -> String {
    if path.is_empty() {
        name.to_string()
    } else {
        format!("{path}.{name}")
    }
}

/// Paths of every data file the table's current snapshot references (reads its manifests).
///
/// Errors: any catalog or storage error.
pub async fn referenced_data_files(table: &Table) -> iceberg::Result<Vec<String>> {
    use futures::TryStreamExt;
    if table.metadata().current_snapshot_id().is_none() {
        return Ok(Vec::new());
    }
    let tasks: Vec<_> = table
        .scan()
        .build()?
        .plan_files()
        .await?
        .try_collect()
        .await?;
    Ok(tasks
        .into_iter()
        .map(|t| t.data_file_path().to_string())
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::open_sql_catalog;
    use iceberg::NamespaceIdent;
    use std::path::Path;
    use std::sync::Arc;

    fn mapped(properties: serde_json::Value, required: &[&str]) -> MappedSchema {
        let schema = serde_json::json!({
            "type": "object",
            "properties": properties,
            "required": required,
        });
        MappedSchema::from_json_schema(&schema, "t").unwrap()
    }

    fn base_properties() -> serde_json::Value {
        serde_json::json!({
            "t": {"type": "string", "format": "date-time"},
            "id": {"type": "integer"},
            "tags": {"type": "array", "items": {"type": "string"}},
            "geo": {"type": "object", "properties": {"lat": {"type": "number"}}},
        })
    }

    fn spec(channel: &str) -> TableSpec {
        TableSpec {
            ident: TableIdent::new(NamespaceIdent::new("ns".into()), "events".into()),
            channel: channel.into(),
            compression_codec: "zstd".into(),
            target_file_size_bytes: 1 << 20,
            partition: vec![PartitionTerm::hour("t")],
            sort: Vec::new(),
            key: Vec::new(),
            format_version: FormatVersion::V2,
        }
    }

    async fn catalog(dir: &Path) -> Arc<dyn Catalog> {
        open_sql_catalog(&dir.join("c.sqlite"), &dir.join("wh"), "floe")
            .await
            .unwrap()
    }

    fn refusal(result: Result<Table, CatalogError>) -> String {
        key_of(result).1
    }

    #[tokio::test]
    async fn a_created_table_has_floes_properties_and_gzip_metadata() {
        let dir = tempfile::tempdir().unwrap();
        let catalog = catalog(dir.path()).await;
        let schema = mapped(base_properties(), &["t"]);
        let table = ensure_table(catalog.as_ref(), &spec("a"), &schema)
            .await
            .unwrap();
        let md = table.metadata();
        assert_eq!(md.format_version(), iceberg::spec::FormatVersion::V2);
        let props = md.properties();
        assert_eq!(props.get(PROP_CHANNEL).map(String::as_str), Some("a"));
        assert_eq!(
            props
                .get("write.parquet.compression-codec")
                .map(String::as_str),
            Some("zstd")
        );
        assert_eq!(
            props
                .get("write.target-file-size-bytes")
                .map(String::as_str),
            Some("1048576")
        );
        let location = table.metadata_location().unwrap();
        assert!(location.ends_with(".gz.metadata.json"), "{location}");
        // Loading it again (as every worker start does) accepts it.
        ensure_table(catalog.as_ref(), &spec("a"), &schema)
            .await
            .unwrap();
    }

    fn key_of(result: Result<Table, CatalogError>) -> (&'static str, String) {
        match result {
            Err(e @ CatalogError::Incompatible { key, .. }) => (key, e.to_string()),
            Err(e) => panic!("expected a refusal, got {e}"),
            Ok(_) => panic!("expected a refusal, the table was accepted"),
        }
    }

    #[tokio::test]
    async fn an_upsert_table_has_its_key_as_identifier_fields_and_its_format_version() {
        let dir = tempfile::tempdir().unwrap();
        let catalog = catalog(dir.path()).await;
        let schema = mapped(base_properties(), &["t", "id"]);
        let upsert = TableSpec {
            key: vec!["id".into()],
            format_version: FormatVersion::V3,
            ..spec("a")
        };
        let table = ensure_table(catalog.as_ref(), &upsert, &schema)
            .await
            .unwrap();
        let md = table.metadata();
        assert_eq!(md.format_version(), FormatVersion::V3);
        assert_eq!(identifier_names(md.current_schema()), ["id"]);
        // Loaded again by the same configuration: accepted.
        ensure_table(catalog.as_ref(), &upsert, &schema)
            .await
            .unwrap();
        // Another key, or another version, is refused naming the key to fix.
        let other_key = TableSpec {
            key: vec!["t".into()],
            ..upsert.clone()
        };
        let (key, message) = key_of(ensure_table(catalog.as_ref(), &other_key, &schema).await);
        assert_eq!(key, "key");
        assert!(
            message.contains("identifier fields are [\"id\"]"),
            "{message}"
        );
        let v2 = TableSpec {
            format_version: FormatVersion::V2,
            ..upsert.clone()
        };
        let (key, message) = key_of(ensure_table(catalog.as_ref(), &v2, &schema).await);
        assert_eq!(key, "format_version");
        assert!(message.contains("format version is 3"), "{message}");
        // The upsert table taken by an append channel (no key): refused naming the mode.
        let append = TableSpec {
            key: Vec::new(),
            ..upsert.clone()
        };
        let (key, message) = key_of(ensure_table(catalog.as_ref(), &append, &schema).await);
        assert_eq!(key, "mode");
        assert!(message.contains("an upsert table"), "{message}");
        // An append table used in upsert mode has no identifier fields: refused.
        ensure_table(catalog.as_ref(), &spec("b").renamed("b"), &schema)
            .await
            .unwrap();
        let upsert_b = TableSpec {
            key: vec!["id".into()],
            ..spec("b").renamed("b")
        };
        let (key, _) = key_of(ensure_table(catalog.as_ref(), &upsert_b, &schema).await);
        assert_eq!(key, "key");
        // An optional key column cannot be an identifier field.
        let optional = mapped(base_properties(), &["t"]);
        let c = TableSpec {
            key: vec!["id".into()],
            ..spec("c").renamed("c")
        };
        assert!(ensure_table(catalog.as_ref(), &c, &optional).await.is_err());
    }

    impl TableSpec {
        fn renamed(self, table: &str) -> TableSpec {
            TableSpec {
                ident: TableIdent::new(self.ident.namespace().clone(), table.into()),
                ..self
            }
        }
    }

    #[tokio::test]
    async fn a_table_of_another_channel_or_not_created_by_floe_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let catalog = catalog(dir.path()).await;
        let schema = mapped(base_properties(), &["t"]);
        ensure_table(catalog.as_ref(), &spec("a"), &schema)
            .await
            .unwrap();
        let message = refusal(ensure_table(catalog.as_ref(), &spec("b"), &schema).await);
        assert!(message.contains("belongs to channel a"), "{message}");

        let foreign = TableIdent::new(NamespaceIdent::new("ns".into()), "foreign".into());
        catalog
            .create_table(
                foreign.namespace(),
                TableCreation::builder()
                    .name("foreign".into())
                    .schema(schema.iceberg_schema().clone())
                    .build(),
            )
            .await
            .unwrap();
        let spec = TableSpec {
            ident: foreign,
            ..spec("a")
        };
        let message = refusal(ensure_table(catalog.as_ref(), &spec, &schema).await);
        assert!(message.contains("floe did not create it"), "{message}");
    }

    #[tokio::test]
    async fn a_table_whose_schema_differs_from_the_channels_is_refused_with_the_path() {
        let dir = tempfile::tempdir().unwrap();
        let catalog = catalog(dir.path()).await;
        ensure_table(
            catalog.as_ref(),
            &spec("a"),
            &mapped(base_properties(), &["t"]),
        )
        .await
        .unwrap();
        let cases = [
            // A nested type change.
            (
                serde_json::json!({
                    "t": {"type": "string", "format": "date-time"},
                    "id": {"type": "integer"},
                    "tags": {"type": "array", "items": {"type": "string"}},
                    "geo": {"type": "object", "properties": {"lat": {"type": "string"}}},
                }),
                vec!["t"],
                "geo.lat: string in the channel, double in the table",
            ),
            // A list element type change.
            (
                serde_json::json!({
                    "t": {"type": "string", "format": "date-time"},
                    "id": {"type": "integer"},
                    "tags": {"type": "array", "items": {"type": "integer"}},
                    "geo": {"type": "object", "properties": {"lat": {"type": "number"}}},
                }),
                vec!["t"],
                "tags.element: long in the channel, string in the table",
            ),
            // A field added.
            (
                {
                    let mut p = base_properties();
                    p["extra"] = serde_json::json!({"type": "boolean"});
                    p
                },
                vec!["t"],
                "<root>: fields",
            ),
            // Required-ness changed.
            (
                base_properties(),
                vec!["t", "id"],
                "id: required in the channel, optional in the table",
            ),
        ];
        for (properties, required, expected) in cases {
            let message = refusal(
                ensure_table(catalog.as_ref(), &spec("a"), &mapped(properties, &required)).await,
            );
            assert!(
                message.contains("schema differs") && message.contains(expected),
                "{message} should name {expected:?}"
            );
        }
    }
}
