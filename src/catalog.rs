//! Iceberg catalogs: opening the configured catalog, creating the channel's table, and the
//! compare-and-swap commit fence the committer relies on (DESIGN.md, protocol step 4).
//!
//! iceberg-rust's `Transaction::commit` reloads the table at every attempt and re-applies its
//! actions: a commit built from a stale view would be silently rebased onto a newer snapshot.
//! [`FencedCatalog`] wraps a catalog so that `load_table` of the fenced table fails unless the
//! table is still at the snapshot the committer validated; fast append's own
//! `AssertRefSnapshotId(main)` requirement, checked by the catalog against its current metadata,
//! then makes the swap atomic:
//!
//! ```text
//!  committer: load T@s1 -> validate batches against T@s1.floe.checkpoints -> fence(s1)
//!  Transaction::commit --load_table--> FencedCatalog: current == s1 ? ok : Conflict
//!                      --update_table(requires main == s1)--> catalog CAS on metadata location
//! ```

use std::collections::HashMap;
use std::fmt;
use std::path::Path;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use iceberg::io::LocalFsStorageFactory;
use iceberg::spec::{Transform, UnboundPartitionSpec};
use iceberg::table::Table;
use iceberg::{
    Catalog, CatalogBuilder, Error, ErrorKind, Namespace, NamespaceIdent, TableCommit,
    TableCreation, TableIdent,
};
use iceberg_catalog_sql::{SqlCatalogBuilder, SQL_CATALOG_PROP_URI, SQL_CATALOG_PROP_WAREHOUSE};

use crate::schema::MappedSchema;

/// Table property naming the channel that created (and owns) the table.
pub const PROP_CHANNEL: &str = "floe.channel";
/// Table property holding the committed checkpoints (JSON object shard → position).
pub const PROP_CHECKPOINTS: &str = "floe.checkpoints";
/// Table property holding the id of the last floe commit (reconciles unknown outcomes).
pub const PROP_LAST_COMMIT_ID: &str = "floe.last-commit-id";
/// Table property holding the committer lease counter of the last committer that wrote the
/// table; a committer whose lease counter is lower is stale and stops.
pub const PROP_COMMITTER_EPOCH: &str = "floe.committer-epoch";
/// Snapshot summary property: the commit id.
pub const SUMMARY_COMMIT_ID: &str = "floe.commit-id";
/// Snapshot summary property: comma-separated ids of the batches the snapshot added.
pub const SUMMARY_BATCH_IDS: &str = "floe.batch-ids";
/// Snapshot summary property: the shard ranges the snapshot added (JSON, for audit).
pub const SUMMARY_RANGES: &str = "floe.ranges";

/// Error from opening a catalog or preparing the table.
#[derive(Debug, thiserror::Error)]
pub enum CatalogError {
    /// The table exists but floe must not write to it.
    #[error("table {table} is not writable by channel {channel}: {reason}")]
    Incompatible {
        /// The table.
        table: String,
        /// The channel.
        channel: String,
        /// Why.
        reason: String,
    },
    /// The catalog must not or cannot be used as configured (the warehouse bucket is owned by
    /// another account, SigV4 without a region): fix the configuration; no retry helps.
    #[error("{message}")]
    Refused {
        /// The key of `[channel.destination.catalog]` to fix (`expected_bucket_owner`).
        key: &'static str,
        /// Why.
        message: String,
    },
    /// The catalog failed; retry with backoff.
    #[error("catalog error: {0}")]
    Unavailable(#[from] Error),
}

/// Opens an SQL catalog (SQLite) with a local warehouse directory.
///
/// `sqlite_path` is the catalog database file (created when missing); `warehouse` a directory
/// (created when missing); `name` the catalog name (rows are keyed by it: PyIceberg must use
/// the same name).
///
/// Errors: [`CatalogError::Unavailable`] when the database cannot be opened.
pub async fn open_sql_catalog(
    sqlite_path: &Path,
    warehouse: &Path,
    name: &str,
) -> Result<Arc<dyn Catalog>, CatalogError> {
    if let Some(parent) = sqlite_path.parent() {
        std::fs::create_dir_all(parent).map_err(io_error)?;
    }
    std::fs::create_dir_all(warehouse).map_err(io_error)?;
    let warehouse = std::fs::canonicalize(warehouse).map_err(io_error)?;
    let uri = format!("sqlite:{}?mode=rwc", sqlite_path.display());
    let props = HashMap::from([
        (SQL_CATALOG_PROP_URI.to_string(), uri),
        (
            SQL_CATALOG_PROP_WAREHOUSE.to_string(),
            warehouse.display().to_string(),
        ),
    ]);
    let catalog = SqlCatalogBuilder::default()
        .with_storage_factory(Arc::new(LocalFsStorageFactory))
        .load(name, props)
        .await?;
    Ok(Arc::new(catalog))
}

/// Opens an SQL catalog (SQLite file `sqlite_path`, created if missing) whose warehouse is the
/// S3 location `warehouse` (`s3://bucket/prefix`), written through iceberg-rust's OpenDAL S3
/// file IO. Region and endpoint come from `aws` (path-style addressing when the endpoint is
/// overridden, as emulators need); credentials from the environment chain OpenDAL reads
/// (`AWS_ACCESS_KEY_ID`/`AWS_SECRET_ACCESS_KEY`, `AWS_PROFILE` files, web identity, instance
/// metadata).
///
/// With `kms_key_arn`, every file is written with SSE-KMS under that key.
///
/// Errors: [`CatalogError::Unavailable`] when the database cannot be opened.
pub async fn open_sql_catalog_s3(
    sqlite_path: &Path,
    warehouse: &str,
    name: &str,
    aws: &crate::aws::AwsConfig,
    region: Option<&str>,
    kms_key_arn: Option<&str>,
) -> Result<Arc<dyn Catalog>, CatalogError> {
    if let Some(parent) = sqlite_path.parent() {
        std::fs::create_dir_all(parent).map_err(io_error)?;
    }
    let uri = format!("sqlite:{}?mode=rwc", sqlite_path.display());
    let mut props = HashMap::from([
        (SQL_CATALOG_PROP_URI.to_string(), uri),
        (
            SQL_CATALOG_PROP_WAREHOUSE.to_string(),
            warehouse.to_string(),
        ),
    ]);
    props.extend(crate::catalog_aws::s3_file_io_props(
        aws,
        region,
        kms_key_arn,
    ));
    let catalog = SqlCatalogBuilder::default()
        .with_storage_factory(Arc::new(
            iceberg_storage_opendal::OpenDalStorageFactory::S3 {
                customized_credential_load: None,
            },
        ))
        .load(name, props)
        .await?;
    Ok(Arc::new(catalog))
}

/// Opens a channel's configured catalog: SQL with a local warehouse, or an `s3://` warehouse
/// through `aws`'s region and endpoint (SSE-KMS with the configured key); REST
/// ([`crate::catalog_rest`]); S3 Tables; Glue.
///
/// Errors: those of [`open_sql_catalog`], [`open_sql_catalog_s3`],
/// [`crate::catalog_rest::open_rest_catalog`], [`crate::catalog_aws::open_s3tables_catalog`]
/// and [`crate::catalog_aws::open_glue_catalog`].
pub async fn open_channel_catalog(
    catalog: &crate::config::CatalogConfig,
    aws: &crate::aws::AwsClients,
) -> Result<Arc<dyn Catalog>, CatalogError> {
    let sql = match catalog {
        crate::config::CatalogConfig::Sql(sql) => sql,
        crate::config::CatalogConfig::Rest(rest) => {
            return crate::catalog_rest::open_rest_catalog(rest, aws).await
        }
        crate::config::CatalogConfig::S3Tables(s3t) => {
            return crate::catalog_aws::open_s3tables_catalog(s3t, aws).await
        }
        crate::config::CatalogConfig::Glue(glue) => {
            return crate::catalog_aws::open_glue_catalog(glue, aws).await
        }
    };
    match &sql.warehouse {
        crate::config::Warehouse::Local(dir) => {
            open_sql_catalog(&sql.database, dir, &sql.name).await
        }
        crate::config::Warehouse::S3(uri) => {
            if let Some(owner) = &sql.expected_bucket_owner {
                check_bucket_owner(aws, uri, owner).await?;
            }
            open_sql_catalog_s3(
                &sql.database,
                uri,
                &sql.name,
                aws.config(),
                aws.region(),
                sql.kms_key_arn.as_deref(),
            )
            .await
        }
    }
}

/// Checks with `GetBucketLocation` + `x-amz-expected-bucket-owner` that the bucket of `uri`
/// (`s3://bucket/…`) is owned by `owner` (IAM: `s3:GetBucketLocation` on the bucket; HeadBucket
/// would need an unconditioned `s3:ListBucket`)
/// (iceberg-rust's S3 file IO cannot send `x-amz-expected-bucket-owner` on each request, so the
/// ownership is checked whenever the catalog is opened).
///
/// Errors: [`CatalogError::Refused`] when the bucket is missing or owned by another account
/// (S3 answers 403/404); [`CatalogError::Unavailable`] when S3 cannot be reached.
pub(crate) async fn check_bucket_owner(
    aws: &crate::aws::AwsClients,
    uri: &str,
    owner: &str,
) -> Result<(), CatalogError> {
    let bucket = uri
        .strip_prefix("s3://")
        .and_then(|rest| rest.split('/').next())
        .unwrap_or_default();
    match aws
        .s3()
        .get_bucket_location()
        .bucket(bucket)
        .expected_bucket_owner(owner)
        .send()
        .await
    {
        Ok(_) => Ok(()),
        Err(aws_sdk_s3::error::SdkError::ServiceError(e)) => Err(CatalogError::Refused {
            key: "expected_bucket_owner",
            message: format!(
                "warehouse bucket {bucket:?} is missing or not owned by account {owner} (HTTP {})",
                e.raw().status().as_u16()
            ),
        }),
        Err(e) => Err(CatalogError::Unavailable(Error::new(
            ErrorKind::Unexpected,
            format!(
                "warehouse bucket {bucket:?}: {}",
                aws_sdk_s3::error::DisplayErrorContext(&e)
            ),
        ))),
    }
}

fn io_error(e: std::io::Error) -> CatalogError {
    CatalogError::Unavailable(Error::new(ErrorKind::Unexpected, e.to_string()))
}

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
}

/// Loads the channel's table, creating the namespace and the table on first delivery
/// (format v2, partition spec `hour(<partition field>)`, floe's properties).
///
/// Errors: [`CatalogError::Incompatible`] when a table exists under that name that this
/// channel did not create, or whose partition spec is not `hour(<partition field>)`.
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
        let source_id = schema
            .iceberg_schema()
            .field_by_name(schema.partition_field())
            .map(|f| f.id)
            .ok_or_else(|| {
                Error::new(
                    ErrorKind::DataInvalid,
                    format!("partition field {} not in schema", schema.partition_field()),
                )
            })?;
        let partition_spec = UnboundPartitionSpec::builder()
            .add_partition_field(
                source_id,
                format!("{}_hour", schema.partition_field()),
                Transform::Hour,
            )?
            .build();
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
            // onto a snapshot it never validated (DESIGN.md step 4).
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
            .schema(schema.iceberg_schema().clone())
            .partition_spec(partition_spec)
            .properties(properties)
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
/// differs from the channel's (DESIGN.md "Iceberg table"; schema evolution is not supported).
fn check_owned(table: &Table, spec: &TableSpec, schema: &MappedSchema) -> Result<(), CatalogError> {
    let incompatible = |reason: String| CatalogError::Incompatible {
        table: spec.ident.to_string(),
        channel: spec.channel.clone(),
        reason,
    };
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
    let part_spec = md.default_partition_spec();
    let fields = part_spec.fields();
    let current = md.current_schema();
    let ok = fields.len() == 1
        && fields[0].transform == Transform::Hour
        && current
            .field_by_id(fields[0].source_id)
            .is_some_and(|f| f.name == schema.partition_field());
    if !ok {
        return Err(incompatible(format!(
            "its partition spec is not hour({})",
            schema.partition_field()
        )));
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

/// A catalog wrapper that fences commits to one validated snapshot (see the module docs).
///
/// While a fence is set for a table, `load_table` of that table fails with
/// `ErrorKind::CatalogCommitConflicts` (not retryable) unless the table's current snapshot id
/// is the fenced one. Every other call is delegated unchanged.
pub struct FencedCatalog {
    inner: Arc<dyn Catalog>,
    fence: Mutex<Option<(TableIdent, Option<i64>)>>,
}

impl fmt::Debug for FencedCatalog {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FencedCatalog").finish_non_exhaustive()
    }
}

impl FencedCatalog {
    /// Wraps `inner` with no fence set.
    pub fn new(inner: Arc<dyn Catalog>) -> Self {
        FencedCatalog {
            inner,
            fence: Mutex::new(None),
        }
    }

    /// Fences `table` to `snapshot_id` (`None`: the table has no snapshot yet).
    pub fn set_fence(&self, table: TableIdent, snapshot_id: Option<i64>) {
        *self.fence.lock().expect("fence lock") = Some((table, snapshot_id));
    }

    /// Removes the fence.
    pub fn clear_fence(&self) {
        *self.fence.lock().expect("fence lock") = None;
    }

    /// The wrapped catalog.
    pub fn inner(&self) -> &Arc<dyn Catalog> {
        &self.inner
    }
}

#[async_trait]
impl Catalog for FencedCatalog {
    async fn list_namespaces(
        &self,
        parent: Option<&NamespaceIdent>,
    ) -> iceberg::Result<Vec<NamespaceIdent>> {
        self.inner.list_namespaces(parent).await
    }
    async fn create_namespace(
        &self,
        namespace: &NamespaceIdent,
        properties: HashMap<String, String>,
    ) -> iceberg::Result<Namespace> {
        self.inner.create_namespace(namespace, properties).await
    }
    async fn get_namespace(&self, namespace: &NamespaceIdent) -> iceberg::Result<Namespace> {
        self.inner.get_namespace(namespace).await
    }
    async fn namespace_exists(&self, namespace: &NamespaceIdent) -> iceberg::Result<bool> {
        self.inner.namespace_exists(namespace).await
    }
    async fn update_namespace(
        &self,
        namespace: &NamespaceIdent,
        properties: HashMap<String, String>,
    ) -> iceberg::Result<()> {
        self.inner.update_namespace(namespace, properties).await
    }
    async fn drop_namespace(&self, namespace: &NamespaceIdent) -> iceberg::Result<()> {
        self.inner.drop_namespace(namespace).await
    }
    async fn list_tables(&self, namespace: &NamespaceIdent) -> iceberg::Result<Vec<TableIdent>> {
        self.inner.list_tables(namespace).await
    }
    async fn create_table(
        &self,
        namespace: &NamespaceIdent,
        creation: TableCreation,
    ) -> iceberg::Result<Table> {
        self.inner.create_table(namespace, creation).await
    }
    async fn load_table(&self, table: &TableIdent) -> iceberg::Result<Table> {
        let loaded = self.inner.load_table(table).await?;
        let fence = self.fence.lock().expect("fence lock").clone();
        if let Some((ident, snapshot_id)) = fence {
            if ident == *table && loaded.metadata().current_snapshot_id() != snapshot_id {
                return Err(Error::new(
                    ErrorKind::CatalogCommitConflicts,
                    format!(
                        "table {table} moved from the validated snapshot {snapshot_id:?} to {:?}",
                        loaded.metadata().current_snapshot_id()
                    ),
                )
                .with_retryable(false));
            }
        }
        Ok(loaded)
    }
    async fn drop_table(&self, table: &TableIdent) -> iceberg::Result<()> {
        self.inner.drop_table(table).await
    }
    async fn purge_table(&self, table: &TableIdent) -> iceberg::Result<()> {
        self.inner.purge_table(table).await
    }
    async fn table_exists(&self, table: &TableIdent) -> iceberg::Result<bool> {
        self.inner.table_exists(table).await
    }
    async fn rename_table(&self, src: &TableIdent, dest: &TableIdent) -> iceberg::Result<()> {
        self.inner.rename_table(src, dest).await
    }
    async fn register_table(
        &self,
        table: &TableIdent,
        metadata_location: String,
    ) -> iceberg::Result<Table> {
        self.inner.register_table(table, metadata_location).await
    }
    async fn update_table(&self, commit: TableCommit) -> iceberg::Result<Table> {
        self.inner.update_table(commit).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        }
    }

    async fn catalog(dir: &Path) -> Arc<dyn Catalog> {
        open_sql_catalog(&dir.join("c.sqlite"), &dir.join("wh"), "floe")
            .await
            .unwrap()
    }

    fn refusal(result: Result<Table, CatalogError>) -> String {
        match result {
            Err(e @ CatalogError::Incompatible { .. }) => e.to_string(),
            Err(e) => panic!("expected a refusal, got {e}"),
            Ok(_) => panic!("expected a refusal, the table was accepted"),
        }
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
