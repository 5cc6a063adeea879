//! A small AWS Glue Data Catalog implementation of [`iceberg::Catalog`] on `aws-sdk-glue`,
//! covering the calls floe makes (namespace and table existence, creation, load, commit).
//!
//! Why not `iceberg-catalog-glue` 0.10.1: it resolves and builds with floe's iceberg and AWS SDK
//! versions, but its Glue schema conversion refuses `timestamptz` ("Conversion from Timestamptz
//! is not supported") in both `create_table` and `update_table`, and every floe table is
//! partitioned on a `timestamptz` column: it can neither create nor commit to one.
//!
//! The table layout follows Apache Iceberg's own Glue catalog (`iceberg-aws` `GlueTableOperations`),
//! so Athena, Spark, PyIceberg and the crate read it: a Glue database per namespace, a Glue
//! table of type `EXTERNAL_TABLE` with parameters `table_type = ICEBERG`, `metadata_location`
//! and `previous_metadata_location`, and the schema's top-level columns in the storage
//! descriptor (`timestamptz` shown as Hive `timestamp`). A commit is a compare-and-swap on the
//! Glue table version:
//!
//! ```text
//!  GetTable -> (metadata_location, VersionId) -> check requirements on that metadata
//!    -> write <location>/metadata/<n>-<uuid>.metadata.json
//!    -> UpdateTable(VersionId, SkipArchive) -- ConcurrentModificationException -> Conflict
//! ```

use std::collections::HashMap;
use std::fmt;

use async_trait::async_trait;
use aws_sdk_glue::types::{Column, DatabaseInput, StorageDescriptor, TableInput};
use iceberg::io::FileIO;
use iceberg::spec::{PrimitiveType, TableMetadata, TableMetadataBuilder, Type};
use iceberg::table::Table;
use iceberg::{
    Catalog, Error, ErrorKind, MetadataLocation, Namespace, NamespaceIdent, Result, Runtime,
    TableCommit, TableCreation, TableIdent, TableRequirement, TableUpdate,
};

use super::swap::{stage, write_staged, TableSwap};

/// Glue table parameter holding the current metadata file.
pub const PARAM_METADATA_LOCATION: &str = "metadata_location";
/// Glue table parameter holding the previous metadata file.
pub const PARAM_PREVIOUS_METADATA_LOCATION: &str = "previous_metadata_location";

/// The Glue Data Catalog as an Iceberg catalog (see the module docs).
pub struct GlueCatalog {
    client: aws_sdk_glue::Client,
    catalog_id: Option<String>,
    warehouse: String,
    file_io: FileIO,
    runtime: Runtime,
}

impl fmt::Debug for GlueCatalog {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GlueCatalog")
            .field("catalog_id", &self.catalog_id)
            .field("warehouse", &self.warehouse)
            .finish_non_exhaustive()
    }
}

impl GlueCatalog {
    /// A catalog in the Glue Data Catalog of account `catalog_id` (`None`: the caller's), new
    /// tables under `warehouse` (`s3://bucket/prefix`), table files read and written through
    /// `file_io`.
    ///
    /// Errors: `ErrorKind::Unexpected` outside a Tokio runtime.
    pub fn try_new(
        client: aws_sdk_glue::Client,
        catalog_id: Option<String>,
        warehouse: String,
        file_io: FileIO,
    ) -> Result<Self> {
        Ok(GlueCatalog {
            client,
            catalog_id,
            warehouse,
            file_io,
            runtime: Runtime::try_current()?,
        })
    }

    /// The Glue database of `namespace` (one level only).
    fn database(namespace: &NamespaceIdent) -> Result<&str> {
        match namespace.as_ref().as_slice() {
            [name] if !name.is_empty() => Ok(name),
            _ => Err(Error::new(
                ErrorKind::DataInvalid,
                format!("Glue namespaces have one level, not {namespace:?}"),
            )),
        }
    }

    /// The table's metadata location and Glue version id, `None` when there is no such table.
    async fn glue_table(&self, ident: &TableIdent) -> Result<Option<(String, Option<String>)>> {
        let out = self
            .client
            .get_table()
            .set_catalog_id(self.catalog_id.clone())
            .database_name(Self::database(ident.namespace())?)
            .name(ident.name())
            .send()
            .await;
        let table = match out {
            Ok(out) => out.table,
            Err(e)
                if e.as_service_error()
                    .is_some_and(|e| e.is_entity_not_found_exception()) =>
            {
                return Ok(None)
            }
            Err(e) => return Err(glue_error("GetTable", e)),
        };
        let Some(table) = table else { return Ok(None) };
        let location = table
            .parameters()
            .and_then(|p| p.get(PARAM_METADATA_LOCATION))
            .ok_or_else(|| {
                Error::new(
                    ErrorKind::DataInvalid,
                    format!("Glue table {ident} is not an Iceberg table (no {PARAM_METADATA_LOCATION} parameter)"),
                )
            })?;
        Ok(Some((location.clone(), table.version_id)))
    }

    async fn load_with_version(&self, ident: &TableIdent) -> Result<(Table, Option<String>)> {
        let (location, version) = self.glue_table(ident).await?.ok_or_else(|| {
            Error::new(ErrorKind::TableNotFound, format!("table {ident} not found"))
        })?;
        let metadata = TableMetadata::read_from(&self.file_io, &location).await?;
        let table = Table::builder()
            .identifier(ident.clone())
            .metadata(metadata)
            .metadata_location(location)
            .file_io(self.file_io.clone())
            .runtime(self.runtime.clone())
            .build()?;
        Ok((table, version))
    }
}

/// The Glue `TableInput` of an Iceberg table at `metadata_location`.
fn table_input(
    name: &str,
    metadata: &TableMetadata,
    metadata_location: &str,
    previous: Option<&str>,
) -> Result<TableInput> {
    let columns = metadata
        .current_schema()
        .as_struct()
        .fields()
        .iter()
        .map(|f| {
            Column::builder()
                .name(&f.name)
                .r#type(hive_type(&f.field_type))
                .set_comment(f.doc.clone())
                .build()
                .map_err(build_error)
        })
        .collect::<Result<Vec<_>>>()?;
    let mut parameters = HashMap::from([
        ("table_type".to_string(), "ICEBERG".to_string()),
        (
            PARAM_METADATA_LOCATION.to_string(),
            metadata_location.to_string(),
        ),
    ]);
    if let Some(previous) = previous {
        parameters.insert(
            PARAM_PREVIOUS_METADATA_LOCATION.to_string(),
            previous.to_string(),
        );
    }
    TableInput::builder()
        .name(name)
        .table_type("EXTERNAL_TABLE")
        .set_parameters(Some(parameters))
        .storage_descriptor(
            StorageDescriptor::builder()
                .location(metadata.location())
                .set_columns(Some(columns))
                .build(),
        )
        .build()
        .map_err(build_error)
}

/// The Hive type Glue shows for an Iceberg type (as Apache Iceberg's `IcebergToGlueConverter`).
fn hive_type(t: &Type) -> String {
    match t {
        Type::Primitive(p) => match p {
            PrimitiveType::Boolean => "boolean".into(),
            PrimitiveType::Int => "int".into(),
            PrimitiveType::Long => "bigint".into(),
            PrimitiveType::Float => "float".into(),
            PrimitiveType::Double => "double".into(),
            PrimitiveType::Date => "date".into(),
            PrimitiveType::Timestamp
            | PrimitiveType::Timestamptz
            | PrimitiveType::TimestampNs
            | PrimitiveType::TimestamptzNs => "timestamp".into(),
            PrimitiveType::Time | PrimitiveType::String | PrimitiveType::Uuid => "string".into(),
            PrimitiveType::Binary | PrimitiveType::Fixed(_) => "binary".into(),
            PrimitiveType::Decimal { precision, scale } => format!("decimal({precision},{scale})"),
        },
        Type::Struct(s) => {
            let fields: Vec<String> = s
                .fields()
                .iter()
                .map(|f| format!("{}:{}", f.name, hive_type(&f.field_type)))
                .collect();
            format!("struct<{}>", fields.join(","))
        }
        Type::List(l) => format!("array<{}>", hive_type(&l.element_field.field_type)),
        Type::Map(m) => format!(
            "map<{},{}>",
            hive_type(&m.key_field.field_type),
            hive_type(&m.value_field.field_type)
        ),
    }
}

fn build_error(e: aws_sdk_glue::error::BuildError) -> Error {
    Error::new(ErrorKind::DataInvalid, format!("Glue request: {e}"))
}

fn glue_error<E>(op: &str, e: aws_sdk_glue::error::SdkError<E>) -> Error
where
    E: std::error::Error + Send + Sync + 'static,
{
    Error::new(
        ErrorKind::Unexpected,
        format!(
            "Glue {op}: {}",
            aws_sdk_glue::error::DisplayErrorContext(&e)
        ),
    )
}

fn unsupported<T>(what: &str) -> Result<T> {
    Err(Error::new(
        ErrorKind::FeatureUnsupported,
        format!("{what} is not implemented by floe's Glue catalog (floe does not use it)"),
    ))
}

#[async_trait]
impl Catalog for GlueCatalog {
    async fn list_namespaces(&self, _: Option<&NamespaceIdent>) -> Result<Vec<NamespaceIdent>> {
        unsupported("list_namespaces")
    }

    async fn create_namespace(
        &self,
        namespace: &NamespaceIdent,
        properties: HashMap<String, String>,
    ) -> Result<Namespace> {
        let input = DatabaseInput::builder()
            .name(Self::database(namespace)?)
            .set_parameters(Some(properties.clone()))
            .build()
            .map_err(build_error)?;
        match self
            .client
            .create_database()
            .set_catalog_id(self.catalog_id.clone())
            .database_input(input)
            .send()
            .await
        {
            Ok(_) => Ok(Namespace::with_properties(namespace.clone(), properties)),
            Err(e)
                if e.as_service_error()
                    .is_some_and(|e| e.is_already_exists_exception()) =>
            {
                Err(Error::new(
                    ErrorKind::NamespaceAlreadyExists,
                    format!("namespace {namespace:?} exists"),
                ))
            }
            Err(e) => Err(glue_error("CreateDatabase", e)),
        }
    }

    async fn get_namespace(&self, namespace: &NamespaceIdent) -> Result<Namespace> {
        let out = self
            .client
            .get_database()
            .set_catalog_id(self.catalog_id.clone())
            .name(Self::database(namespace)?)
            .send()
            .await;
        match out {
            Ok(out) => Ok(Namespace::with_properties(
                namespace.clone(),
                out.database.and_then(|d| d.parameters).unwrap_or_default(),
            )),
            Err(e)
                if e.as_service_error()
                    .is_some_and(|e| e.is_entity_not_found_exception()) =>
            {
                Err(Error::new(
                    ErrorKind::NamespaceNotFound,
                    format!("namespace {namespace:?} not found"),
                ))
            }
            Err(e) => Err(glue_error("GetDatabase", e)),
        }
    }

    async fn namespace_exists(&self, namespace: &NamespaceIdent) -> Result<bool> {
        match self.get_namespace(namespace).await {
            Ok(_) => Ok(true),
            Err(e) if e.kind() == ErrorKind::NamespaceNotFound => Ok(false),
            Err(e) => Err(e),
        }
    }

    async fn update_namespace(&self, _: &NamespaceIdent, _: HashMap<String, String>) -> Result<()> {
        unsupported("update_namespace")
    }

    async fn drop_namespace(&self, _: &NamespaceIdent) -> Result<()> {
        unsupported("drop_namespace")
    }

    async fn list_tables(&self, _: &NamespaceIdent) -> Result<Vec<TableIdent>> {
        unsupported("list_tables")
    }

    /// Writes the first metadata file under `<warehouse>/<namespace>.db/<table>` (or the
    /// creation's location) and creates the Glue table pointing at it.
    async fn create_table(
        &self,
        namespace: &NamespaceIdent,
        mut creation: TableCreation,
    ) -> Result<Table> {
        let database = Self::database(namespace)?;
        let ident = TableIdent::new(namespace.clone(), creation.name.clone());
        let location = creation.location.clone().unwrap_or_else(|| {
            format!(
                "{}/{database}.db/{}",
                self.warehouse.trim_end_matches('/'),
                creation.name
            )
        });
        creation.location = Some(location.clone());
        let metadata = TableMetadataBuilder::from_table_creation(creation)?
            .build()?
            .metadata;
        let metadata_location = MetadataLocation::new_with_metadata(location, &metadata);
        metadata.write_to(&self.file_io, &metadata_location).await?;
        let input = table_input(
            ident.name(),
            &metadata,
            &metadata_location.to_string(),
            None,
        )?;
        match self
            .client
            .create_table()
            .set_catalog_id(self.catalog_id.clone())
            .database_name(database)
            .table_input(input)
            .send()
            .await
        {
            Ok(_) => Ok(self.load_with_version(&ident).await?.0),
            Err(e)
                if e.as_service_error()
                    .is_some_and(|e| e.is_already_exists_exception()) =>
            {
                Err(Error::new(
                    ErrorKind::TableAlreadyExists,
                    format!("table {ident} exists"),
                ))
            }
            Err(e) => Err(glue_error("CreateTable", e)),
        }
    }

    async fn load_table(&self, table: &TableIdent) -> Result<Table> {
        Ok(self.load_with_version(table).await?.0)
    }

    async fn drop_table(&self, _: &TableIdent) -> Result<()> {
        unsupported("drop_table")
    }

    async fn purge_table(&self, _: &TableIdent) -> Result<()> {
        unsupported("purge_table")
    }

    async fn table_exists(&self, table: &TableIdent) -> Result<bool> {
        Ok(self.glue_table(table).await?.is_some())
    }

    async fn rename_table(&self, _: &TableIdent, _: &TableIdent) -> Result<()> {
        unsupported("rename_table")
    }

    async fn register_table(&self, _: &TableIdent, _: String) -> Result<Table> {
        unsupported("register_table")
    }

    /// Applies `commit` to the table as Glue holds it now, writes the new metadata file and
    /// swaps the Glue table to it if its version is still the one read (`VersionId`); a
    /// concurrent swap is `ErrorKind::CatalogCommitConflicts` (the same path as
    /// [`TableSwap::swap`]).
    async fn update_table(&self, mut commit: TableCommit) -> Result<Table> {
        let ident = commit.identifier().clone();
        let requirements = commit.take_requirements();
        let updates = commit.take_updates();
        self.swap(&ident, requirements, updates).await
    }
}

#[async_trait]
impl TableSwap for GlueCatalog {
    async fn swap(
        &self,
        ident: &TableIdent,
        requirements: Vec<TableRequirement>,
        updates: Vec<TableUpdate>,
    ) -> Result<Table> {
        let (current, version) = self.load_with_version(ident).await?;
        let previous = current.metadata_location_result()?.to_string();
        let staged = stage(current, &requirements, updates)?;
        write_staged(&staged).await?;
        let staged_location = staged.metadata_location_result()?.to_string();
        let input = table_input(
            ident.name(),
            staged.metadata(),
            &staged_location,
            Some(&previous),
        )?;
        let out = self
            .client
            .update_table()
            .set_catalog_id(self.catalog_id.clone())
            .database_name(Self::database(ident.namespace())?)
            .table_input(input)
            .set_version_id(version)
            .skip_archive(true)
            .send()
            .await;
        match out {
            Ok(_) => Ok(staged),
            Err(e)
                if e.as_service_error()
                    .is_some_and(|e| e.is_concurrent_modification_exception()) =>
            {
                Err(Error::new(
                    ErrorKind::CatalogCommitConflicts,
                    format!("table {ident} changed in Glue since it was loaded (VersionId)"),
                ))
            }
            Err(e)
                if e.as_service_error()
                    .is_some_and(|e| e.is_entity_not_found_exception()) =>
            {
                Err(Error::new(
                    ErrorKind::TableNotFound,
                    format!("table {ident} not found"),
                ))
            }
            Err(e) => Err(glue_error("UpdateTable", e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use iceberg::spec::{ListType, MapType, NestedField, StructType};
    use std::sync::Arc;

    #[test]
    fn glue_columns_show_timestamptz_as_timestamp_and_nest() {
        let p = |t| Type::Primitive(t);
        assert_eq!(hive_type(&p(PrimitiveType::Timestamptz)), "timestamp");
        assert_eq!(hive_type(&p(PrimitiveType::Long)), "bigint");
        assert_eq!(hive_type(&p(PrimitiveType::Uuid)), "string");
        assert_eq!(
            hive_type(&p(PrimitiveType::Decimal {
                precision: 38,
                scale: 2
            })),
            "decimal(38,2)"
        );
        let nested = Type::Struct(StructType::new(vec![
            Arc::new(NestedField::required(
                1,
                "tags",
                Type::List(ListType::new(Arc::new(NestedField::list_element(
                    2,
                    p(PrimitiveType::String),
                    true,
                )))),
            )),
            Arc::new(NestedField::optional(
                3,
                "attrs",
                Type::Map(MapType::new(
                    Arc::new(NestedField::map_key_element(4, p(PrimitiveType::String))),
                    Arc::new(NestedField::map_value_element(
                        5,
                        p(PrimitiveType::Int),
                        false,
                    )),
                )),
            )),
        ]));
        assert_eq!(
            hive_type(&nested),
            "struct<tags:array<string>,attrs:map<string,int>>"
        );
    }
}
