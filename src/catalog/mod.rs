//! Opening the configured Iceberg catalog: SQL (SQLite, embedded default), REST (with SigV4
//! signing through [`sigv4`]), Glue ([`glue`]) and S3 Tables ([`aws`]). Everything a channel
//! does with its table once the catalog is open (creating it, checking ownership, the commit
//! fence) is the Iceberg destination's, in [`crate::iceberg`].

pub mod aws;
pub mod glue;
pub mod rest;
pub mod sigv4;
pub mod swap;

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use iceberg::io::LocalFsStorageFactory;
use iceberg::{Catalog, CatalogBuilder, Error, ErrorKind};
use iceberg_catalog_sql::{SqlCatalogBuilder, SQL_CATALOG_PROP_URI, SQL_CATALOG_PROP_WAREHOUSE};

/// Connect timeout of a REST catalog request (the catalog client's and the SigV4 relay's).
pub const REST_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Bound on one REST catalog request (a commit writes a metadata file on the server); the SigV4
/// relay answers 504 a little before it.
pub const REST_REQUEST_TIMEOUT: Duration = Duration::from_secs(60);

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
        /// The `[channel.destination]` key the difference is about: `"table"` (another
        /// owner, the schema), `"partition"` (the partition spec), `"sort"` (the sort order),
        /// `"key"` (an upsert table's identifier fields), `"mode"` (an upsert table taken by an
        /// append channel) or `"format_version"`.
        key: &'static str,
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
    open_sql_catalog_local(
        &crate::config::CatalogDatabase::Sqlite(sqlite_path.to_path_buf()),
        warehouse,
        name,
    )
    .await
}

/// Opens an SQL catalog in `database` (an SQLite file, created when missing, or a PostgreSQL
/// database) with a local warehouse directory (created when missing).
///
/// Errors: [`CatalogError::Unavailable`] when the database cannot be opened.
pub async fn open_sql_catalog_local(
    database: &crate::config::CatalogDatabase,
    warehouse: &Path,
    name: &str,
) -> Result<Arc<dyn Catalog>, CatalogError> {
    std::fs::create_dir_all(warehouse).map_err(io_error)?;
    let warehouse = std::fs::canonicalize(warehouse).map_err(io_error)?;
    let props = HashMap::from([(
        SQL_CATALOG_PROP_WAREHOUSE.to_string(),
        warehouse.display().to_string(),
    )]);
    open_sql(database, name, props, Arc::new(LocalFsStorageFactory)).await
}

/// Opens an SQL catalog in `database` (an SQLite file, created if missing, or a PostgreSQL
/// database) whose warehouse is the S3 location `warehouse` (`s3://bucket/prefix`), written
/// through iceberg-rust's OpenDAL S3 file IO. Region and endpoint come from `aws` (path-style
/// addressing when the endpoint is overridden, as emulators and S3-compatible stores need);
/// credentials from the environment chain OpenDAL reads (`AWS_ACCESS_KEY_ID`/
/// `AWS_SECRET_ACCESS_KEY`, `AWS_PROFILE` files, web identity, instance metadata).
///
/// With `kms_key_arn`, every file is written with SSE-KMS under that key.
///
/// Errors: [`CatalogError::Unavailable`] when the database cannot be opened.
pub async fn open_sql_catalog_s3(
    database: &crate::config::CatalogDatabase,
    warehouse: &str,
    name: &str,
    aws: &crate::config::aws::AwsConfig,
    region: Option<&str>,
    kms_key_arn: Option<&str>,
) -> Result<Arc<dyn Catalog>, CatalogError> {
    let mut props = HashMap::from([(
        SQL_CATALOG_PROP_WAREHOUSE.to_string(),
        warehouse.to_string(),
    )]);
    props.extend(crate::catalog::aws::s3_file_io_props(
        aws,
        region,
        kms_key_arn,
    ));
    open_sql(
        database,
        name,
        props,
        Arc::new(iceberg_storage_opendal::OpenDalStorageFactory::S3 {
            customized_credential_load: None,
        }),
    )
    .await
}

/// The SQL catalog (iceberg-catalog-sql over sqlx's `Any` driver) in `database` with `props`
/// (warehouse and file IO) and `storage`. An SQLite file's directory is created when missing.
async fn open_sql(
    database: &crate::config::CatalogDatabase,
    name: &str,
    mut props: HashMap<String, String>,
    storage: Arc<dyn iceberg::io::StorageFactory>,
) -> Result<Arc<dyn Catalog>, CatalogError> {
    if let crate::config::CatalogDatabase::Sqlite(path) = database {
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(io_error)?;
        }
    }
    if let crate::config::CatalogDatabase::Postgres(url) = database {
        check_postgres_login(url, database).await?;
    }
    props.insert(SQL_CATALOG_PROP_URI.to_string(), database.url());
    let catalog = SqlCatalogBuilder::default()
        .with_storage_factory(storage)
        .load(name, props)
        .await
        .map_err(|e| {
            CatalogError::Unavailable(Error::new(e.kind(), format!("sql catalog {database}: {e}")))
        })?;
    Ok(Arc::new(catalog))
}

/// Opens a channel's configured catalog: SQL with a local warehouse, or an `s3://` warehouse
/// through `aws`'s region and endpoint (SSE-KMS with the configured key); REST
/// ([`crate::catalog::rest`]); S3 Tables; Glue.
///
/// Errors: those of [`open_sql_catalog`], [`open_sql_catalog_s3`],
/// [`crate::catalog::rest::open_rest_catalog`], [`crate::catalog::aws::open_s3tables_catalog`]
/// and [`crate::catalog::aws::open_glue_catalog`].
pub async fn open_channel_catalog(
    catalog: &crate::config::CatalogConfig,
    aws: &crate::aws::AwsClients,
) -> Result<Arc<dyn Catalog>, CatalogError> {
    Ok(open_channel_catalog_and_swap(catalog, aws).await?.0)
}

/// [`open_channel_catalog`] and the catalog's [`swap::TableSwap`], for the maintenance commits
/// iceberg-rust cannot make (replace and delete snapshots): SQL, REST and Glue have one; S3
/// Tables (`None`), which maintains its own tables, does not.
///
/// Errors: as [`open_channel_catalog`]; the SQL database cannot be opened a second time.
pub async fn open_channel_catalog_and_swap(
    catalog: &crate::config::CatalogConfig,
    aws: &crate::aws::AwsClients,
) -> Result<(Arc<dyn Catalog>, Option<Arc<dyn swap::TableSwap>>), CatalogError> {
    let sql = match catalog {
        crate::config::CatalogConfig::Sql(sql) => sql,
        crate::config::CatalogConfig::Rest(rest) => {
            let (catalog, swap) = crate::catalog::rest::open_rest_catalog_with(
                rest,
                aws,
                aws.sdk_config().credentials_provider(),
            )
            .await?;
            return Ok((catalog, Some(swap)));
        }
        crate::config::CatalogConfig::S3Tables(s3t) => {
            return Ok((
                crate::catalog::aws::open_s3tables_catalog(s3t, aws).await?,
                None,
            ))
        }
        crate::config::CatalogConfig::Glue(glue) => {
            let catalog = crate::catalog::aws::open_glue_catalog(glue, aws).await?;
            let swap: Arc<dyn swap::TableSwap> = Arc::new(aws::glue_catalog(glue, aws)?);
            return Ok((catalog, Some(swap)));
        }
    };
    let opened = match &sql.warehouse {
        crate::config::Warehouse::Local(dir) => {
            open_sql_catalog_local(&sql.database, dir, &sql.name).await
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
    }?;
    let swap = swap::SqlSwap::open(opened.clone(), &sql.database, &sql.name).await?;
    Ok((opened, Some(Arc::new(swap))))
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

/// Connects once to the catalog's PostgreSQL database before iceberg-catalog-sql does (which
/// hands sqlx's error over as text only): an error no retry fixes (a refused login, a missing
/// database, a TLS mode the server refuses; the lease store's rules,
/// [`crate::lease::sql::is_retryable`]) is [`CatalogError::Refused`] naming `uri`; an unreachable
/// server is [`CatalogError::Unavailable`] (retried).
async fn check_postgres_login(
    url: &str,
    database: &crate::config::CatalogDatabase,
) -> Result<(), CatalogError> {
    use sqlx::Connection;
    sqlx::any::install_default_drivers();
    match sqlx::AnyConnection::connect(url).await {
        Ok(connection) => {
            let _ = connection.close().await;
            Ok(())
        }
        Err(e) if crate::lease::sql::is_retryable(&e) => {
            Err(CatalogError::Unavailable(Error::new(
                ErrorKind::Unexpected,
                format!("sql catalog {database}: {e}"),
            )))
        }
        Err(e) => Err(CatalogError::Refused {
            key: "uri",
            message: format!("sql catalog {database}: {e}"),
        }),
    }
}

fn io_error(e: std::io::Error) -> CatalogError {
    CatalogError::Unavailable(Error::new(ErrorKind::Unexpected, e.to_string()))
}
