//! The AWS catalogs: Amazon S3 Tables (`kind = "s3tables"`, through `iceberg-catalog-s3tables`)
//! and the AWS Glue Data Catalog (`kind = "glue"`, [`crate::catalog::glue`]), opened with the
//! `[aws]` region, endpoints and credential chain.
//!
//! Both keep the committer's compare-and-swap (docs/design.md protocol step 4): floe's
//! [`crate::iceberg::fence::FencedCatalog`] refuses a commit whose table moved past the validated
//! snapshot, and the catalog itself swaps the metadata location only if nobody else did since it
//! loaded the table:
//!
//! ```text
//!  Transaction::commit -> FencedCatalog.load_table (current == validated ? go : Conflict)
//!    -> update_table: GetTable (metadata location + version token / VersionId)
//!         -> requirements (main == validated snapshot) checked on that metadata
//!         -> write new metadata file
//!         -> S3 Tables UpdateTableMetadataLocation(versionToken)  | Glue UpdateTable(VersionId)
//!            409 ConflictException                                 | ConcurrentModificationException
//!            -> ErrorKind::CatalogCommitConflicts (a clean conflict: back to validation)
//! ```
//!
//! S3 Tables tables are created by floe (not by the crate's `create_table`) so that the
//! channel's KMS key becomes the table's SSE-KMS encryption configuration (`CreateTable`
//! `encryptionConfiguration`): S3 Tables then encrypts every object of the table under it.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use aws_sdk_s3tables::types::{EncryptionConfiguration, OpenTableFormat, SseAlgorithm};
use iceberg::io::{FileIO, FileIOBuilder};
use iceberg::spec::TableMetadataBuilder;
use iceberg::table::Table;
use iceberg::{
    Catalog, CatalogBuilder, Error, ErrorKind, MetadataLocation, Namespace, NamespaceIdent,
    TableCommit, TableCreation, TableIdent,
};
use iceberg_catalog_s3tables::{S3TablesCatalogBuilder, S3TABLES_CATALOG_PROP_TABLE_BUCKET_ARN};
use iceberg_storage_opendal::OpenDalStorageFactory;

use crate::aws::AwsClients;
use crate::catalog::CatalogError;
use crate::config::{AwsConfig, AwsService};
use crate::config::{GlueCatalogConfig, S3TablesCatalogConfig};

/// The iceberg-rust FileIO properties for S3 through `aws`: `region`, the S3 endpoint with
/// path-style addressing when it is overridden (emulators), and SSE-KMS under `kms_key_arn`
/// on every file written. Credentials come from the environment chain OpenDAL reads
/// (`AWS_ACCESS_KEY_ID`/`AWS_SECRET_ACCESS_KEY`, `AWS_PROFILE` files, web identity, instance
/// metadata).
pub fn s3_file_io_props(
    aws: &AwsConfig,
    region: Option<&str>,
    kms_key_arn: Option<&str>,
) -> HashMap<String, String> {
    let mut props = HashMap::new();
    if let Some(region) = region {
        props.insert(iceberg::io::S3_REGION.to_string(), region.to_string());
    }
    if let Some(key) = kms_key_arn {
        props.insert(iceberg::io::S3_SSE_TYPE.to_string(), "kms".to_string());
        props.insert(iceberg::io::S3_SSE_KEY.to_string(), key.to_string());
    }
    if let Some(endpoint) = aws.endpoint(AwsService::S3) {
        props.insert(iceberg::io::S3_ENDPOINT.to_string(), endpoint.to_string());
        props.insert(
            iceberg::io::S3_PATH_STYLE_ACCESS.to_string(),
            "true".to_string(),
        );
    }
    props
}

/// Opens the S3 Tables table bucket `config.table_bucket_arn` as an Iceberg catalog (S3 Tables
/// API through `aws`'s `s3tables` endpoint; table files through its `s3` endpoint). No call is
/// made here.
///
/// IAM: `s3tables:GetNamespace`, `CreateNamespace`, `GetTable`, `CreateTable`,
/// `GetTableMetadataLocation`, `UpdateTableMetadataLocation`, `PutTableData`, `GetTableData`
/// on the bucket and its tables, and `PutTableEncryption`, `GetTableEncryption` with a KMS key
/// (README, "Catalogs").
///
/// Errors: [`CatalogError::Unavailable`] when the catalog cannot be built.
pub async fn open_s3tables_catalog(
    config: &S3TablesCatalogConfig,
    aws: &AwsClients,
) -> Result<Arc<dyn Catalog>, CatalogError> {
    // The bucket's own region, whatever the [aws] region says (break test: a bucket of another
    // region was retried as "unavailable" forever).
    let region = arn_region(&config.table_bucket_arn).or(aws.region());
    let client = aws.s3tables_in(region);
    check_table_bucket(&client, &config.table_bucket_arn).await?;
    // Data files are encrypted by the table's configuration (set at creation), not per request.
    let props = s3_file_io_props(aws.config(), region, None);
    let file_io = FileIOBuilder::new(Arc::new(OpenDalStorageFactory::S3 {
        customized_credential_load: None,
    }))
    .with_props(props.clone())
    .build();
    let mut load_props = props;
    load_props.insert(
        S3TABLES_CATALOG_PROP_TABLE_BUCKET_ARN.to_string(),
        config.table_bucket_arn.clone(),
    );
    let inner = S3TablesCatalogBuilder::default()
        .with_client(client.clone())
        .load("s3tables", load_props)
        .await?;
    Ok(Arc::new(S3TablesCatalog {
        inner,
        client,
        table_bucket_arn: config.table_bucket_arn.clone(),
        kms_key_arn: config.kms_key_arn.clone(),
        file_io,
    }))
}

/// Opens the AWS Glue Data Catalog (account `config.catalog_id`, or the caller's) with new
/// tables under `config.warehouse`, through `aws`'s `glue` and `s3` endpoints; table files are
/// written with SSE-KMS under `config.kms_key_arn`. With `config.expected_bucket_owner`, the
/// warehouse bucket's owner is checked first.
///
/// IAM: `glue:GetDatabase`, `glue:CreateDatabase`, `glue:GetTable`, `glue:CreateTable`,
/// `glue:UpdateTable`; `s3:GetObject`, `s3:PutObject`, `s3:DeleteObject` under the warehouse;
/// `kms:GenerateDataKey`, `kms:Decrypt` on the key (README, "Catalogs").
///
/// Errors: [`CatalogError::Refused`] when the bucket belongs to another account;
/// [`CatalogError::Unavailable`] when S3 cannot be reached for that check.
pub async fn open_glue_catalog(
    config: &GlueCatalogConfig,
    aws: &AwsClients,
) -> Result<Arc<dyn Catalog>, CatalogError> {
    if let Some(owner) = &config.expected_bucket_owner {
        crate::catalog::check_bucket_owner(aws, &config.warehouse, owner).await?;
    }
    Ok(Arc::new(glue_catalog(config, aws)?))
}

/// The Glue catalog of `config` (no ownership check: [`open_glue_catalog`] makes it).
///
/// Errors: [`CatalogError::Unavailable`] outside a Tokio runtime.
pub fn glue_catalog(
    config: &GlueCatalogConfig,
    aws: &AwsClients,
) -> Result<crate::catalog::glue::GlueCatalog, CatalogError> {
    let props = s3_file_io_props(aws.config(), aws.region(), config.kms_key_arn.as_deref());
    let file_io = FileIOBuilder::new(Arc::new(OpenDalStorageFactory::S3 {
        customized_credential_load: None,
    }))
    .with_props(props)
    .build();
    Ok(crate::catalog::glue::GlueCatalog::try_new(
        aws.glue(),
        config.catalog_id.clone(),
        config.warehouse.clone(),
        file_io,
    )?)
}

/// The region of an ARN (`arn:PARTITION:SERVICE:REGION:ACCOUNT:RESOURCE`), if it names one.
pub fn arn_region(arn: &str) -> Option<&str> {
    arn.split(':').nth(3).filter(|r| !r.is_empty())
}

/// Checks that the table bucket exists and can be read (GetTableBucket).
///
/// Errors: [`CatalogError::Refused`] (key `table_bucket_arn`) when S3 Tables answers that it
/// does not exist or refuses access — no retry helps; [`CatalogError::Unavailable`] otherwise.
async fn check_table_bucket(
    client: &aws_sdk_s3tables::Client,
    arn: &str,
) -> Result<(), CatalogError> {
    match client.get_table_bucket().table_bucket_arn(arn).send().await {
        Ok(_) => Ok(()),
        Err(e)
            if e.as_service_error().is_some_and(|e| {
                e.is_not_found_exception()
                    || e.is_access_denied_exception()
                    || e.is_forbidden_exception()
            }) =>
        {
            Err(CatalogError::Refused {
                key: "table_bucket_arn",
                message: {
                    use aws_sdk_s3tables::error::ProvideErrorMetadata;
                    format!(
                        "table bucket {arn}: {}: {}",
                        e.code().unwrap_or("refused"),
                        e.message().unwrap_or_default()
                    )
                },
            })
        }
        Err(e) => Err(CatalogError::Unavailable(s3tables_error(
            "GetTableBucket",
            e,
        ))),
    }
}

/// Refuses an S3 Tables table whose encryption configuration is not SSE-KMS under `config`'s
/// `kms_key_arn` (a table floe created has it; one created otherwise, or before the key was
/// configured or changed, may use SSE-S3 or another key, and S3 Tables cannot re-encrypt a
/// table). Nothing is checked without `kms_key_arn`.
///
/// IAM: `s3tables:GetTableEncryption` on the table.
///
/// Errors: [`CatalogError::Incompatible`] naming the table's and the channel's encryption;
/// [`CatalogError::Unavailable`] when S3 Tables cannot answer.
pub async fn check_table_encryption(
    config: &S3TablesCatalogConfig,
    aws: &AwsClients,
    ident: &TableIdent,
    channel: &str,
) -> Result<(), CatalogError> {
    let Some(key) = &config.kms_key_arn else {
        return Ok(());
    };
    let answer = aws
        .s3tables_in(arn_region(&config.table_bucket_arn))
        .get_table_encryption()
        .table_bucket_arn(&config.table_bucket_arn)
        .namespace(ident.namespace().to_url_string())
        .name(ident.name())
        .send()
        .await
        .map_err(|e| CatalogError::Unavailable(s3tables_error("GetTableEncryption", e)))?;
    let (algorithm, table_key) = match &answer.encryption_configuration {
        Some(c) => (c.sse_algorithm().as_str().to_owned(), c.kms_key_arn()),
        None => ("none".to_owned(), None),
    };
    if algorithm == SseAlgorithm::AwsKms.as_str() && table_key == Some(key.as_str()) {
        return Ok(());
    }
    Err(CatalogError::Incompatible {
        table: ident.to_string(),
        channel: channel.to_string(),
        reason: format!(
            "it is encrypted with {algorithm}{}, not SSE-KMS under the channel's kms_key_arn {key} (S3 Tables cannot re-encrypt a table: use another table, or set kms_key_arn to the table's key)",
            table_key.map(|k| format!(" under {k}")).unwrap_or_default()
        ),
        key: "table",
    })
}

/// `iceberg-catalog-s3tables`' catalog with floe's table creation (SSE-KMS encryption
/// configuration); every other call is the crate's.
pub struct S3TablesCatalog {
    inner: iceberg_catalog_s3tables::S3TablesCatalog,
    client: aws_sdk_s3tables::Client,
    table_bucket_arn: String,
    kms_key_arn: Option<String>,
    file_io: FileIO,
}

impl fmt::Debug for S3TablesCatalog {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("S3TablesCatalog")
            .field("table_bucket_arn", &self.table_bucket_arn)
            .field("kms_key_arn", &self.kms_key_arn)
            .finish_non_exhaustive()
    }
}

impl S3TablesCatalog {
    /// S3 Tables' GetTable of `ident`.
    ///
    /// Errors: `TableNotFound` when the table or its namespace does not exist.
    async fn get_table(
        &self,
        ident: &TableIdent,
    ) -> iceberg::Result<aws_sdk_s3tables::operation::get_table::GetTableOutput> {
        self.client
            .get_table()
            .table_bucket_arn(&self.table_bucket_arn)
            .namespace(ident.namespace().to_url_string())
            .name(ident.name())
            .send()
            .await
            .map_err(|e| {
                if e.as_service_error()
                    .is_some_and(|e| e.is_not_found_exception())
                {
                    Error::new(ErrorKind::TableNotFound, format!("table {ident} not found"))
                } else {
                    s3tables_error("GetTable", e)
                }
            })
    }
}

fn s3tables_error<E>(op: &str, e: aws_sdk_s3tables::error::SdkError<E>) -> Error
where
    E: std::error::Error + Send + Sync + 'static,
{
    Error::new(
        ErrorKind::Unexpected,
        format!(
            "S3 Tables {op}: {}",
            aws_sdk_s3tables::error::DisplayErrorContext(&e)
        ),
    )
}

#[async_trait]
impl Catalog for S3TablesCatalog {
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

    /// As the crate's `create_table` (CreateTable, GetTable for the warehouse location S3
    /// Tables chose, write the first metadata file there, UpdateTableMetadataLocation with the
    /// version token CreateTable returned), plus the table's encryption configuration.
    async fn create_table(
        &self,
        namespace: &NamespaceIdent,
        mut creation: TableCreation,
    ) -> iceberg::Result<Table> {
        let ns = namespace.to_url_string();
        let ident = TableIdent::new(namespace.clone(), creation.name.clone());
        if creation.location.is_some() {
            return Err(Error::new(
                ErrorKind::DataInvalid,
                "S3 Tables chooses a table's location",
            ));
        }
        let mut request = self
            .client
            .create_table()
            .table_bucket_arn(&self.table_bucket_arn)
            .namespace(&ns)
            .name(ident.name())
            .format(OpenTableFormat::Iceberg);
        if let Some(key) = &self.kms_key_arn {
            request = request.encryption_configuration(
                EncryptionConfiguration::builder()
                    .sse_algorithm(SseAlgorithm::AwsKms)
                    .kms_key_arn(key)
                    .build()
                    .map_err(|e| Error::new(ErrorKind::DataInvalid, e.to_string()))?,
            );
        }
        let version_token = match request.send().await {
            Ok(created) => created.version_token,
            Err(e)
                if e.as_service_error()
                    .is_some_and(|e| e.is_conflict_exception()) =>
            {
                // A table without metadata is one whose creation was interrupted (a worker
                // killed between CreateTable and UpdateTableMetadataLocation): complete it.
                let got = self.get_table(&ident).await?;
                if got.metadata_location().is_some() {
                    return Err(Error::new(
                        ErrorKind::TableAlreadyExists,
                        format!("table {ident} exists"),
                    ));
                }
                tracing::warn!(table = %ident, "S3 Tables table exists without metadata (an interrupted creation): completing it");
                got.version_token
            }
            Err(e) => return Err(s3tables_error("CreateTable", e)),
        };
        let got = self.get_table(&ident).await?;
        let location = got.warehouse_location().to_string();
        creation.location = Some(location.clone());
        let metadata = TableMetadataBuilder::from_table_creation(creation)?
            .build()?
            .metadata;
        let metadata_location = MetadataLocation::new_with_metadata(location, &metadata);
        metadata.write_to(&self.file_io, &metadata_location).await?;
        self.client
            .update_table_metadata_location()
            .table_bucket_arn(&self.table_bucket_arn)
            .namespace(&ns)
            .name(ident.name())
            .metadata_location(metadata_location.to_string())
            .version_token(version_token)
            .send()
            .await
            .map_err(|e| s3tables_error("UpdateTableMetadataLocation", e))?;
        self.inner.load_table(&ident).await
    }

    async fn load_table(&self, table: &TableIdent) -> iceberg::Result<Table> {
        self.inner.load_table(table).await
    }
    async fn drop_table(&self, table: &TableIdent) -> iceberg::Result<()> {
        self.inner.drop_table(table).await
    }
    async fn purge_table(&self, table: &TableIdent) -> iceberg::Result<()> {
        self.inner.purge_table(table).await
    }
    /// A table without metadata (its creation was interrupted) does not exist yet: creating it
    /// completes it.
    async fn table_exists(&self, table: &TableIdent) -> iceberg::Result<bool> {
        match self.get_table(table).await {
            Ok(got) => Ok(got.metadata_location().is_some()),
            Err(e) if e.kind() == ErrorKind::TableNotFound => Ok(false),
            Err(e) => Err(e),
        }
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
