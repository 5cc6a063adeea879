//! floe's own commit path for the table updates iceberg-rust 0.10.1 cannot commit: a `replace`
//! snapshot (compaction, manifest rewrite) or a `delete` snapshot (record expiration).
//!
//! Why our own path: `Catalog::update_table` takes a `TableCommit`, which only iceberg-rust's
//! own transaction actions can build (its builder is `pub(crate)`), and none of those actions
//! writes a replace or delete snapshot. The alternative, a patched copy of the crate, would
//! mean vendoring 4 MB of source for a one-line visibility change and carrying it through every
//! upgrade. A [`TableSwap`] instead takes the same `TableRequirement`s and `TableUpdate`s a
//! `TableCommit` holds (both are public, spec-shaped types) and swaps the metadata with the
//! catalog's own compare-and-swap, exactly as the catalog's `update_table` does:
//!
//! ```text
//!  load current metadata M (location L) -> check requirements on M -> apply updates -> M'
//!    -> write M' at L's next version -> swap L -> L' if the catalog still holds L
//!       (SQL: UPDATE ... WHERE metadata_location = L; Glue: UpdateTable(VersionId))
//!       lost the swap -> ErrorKind::CatalogCommitConflicts
//! ```
//!
//! The REST catalog's swap is [`crate::catalog::rest::RestSwap`] (its server applies the updates
//! and checks the requirements itself). S3 Tables, which maintains its own tables, has none: its
//! tables get snapshot expiry only.

use std::str::FromStr;
use std::sync::Arc;

use async_trait::async_trait;
use iceberg::table::Table;
use iceberg::{
    Catalog, Error, ErrorKind, MetadataLocation, TableIdent, TableRequirement, TableUpdate,
};

/// A compare-and-swap commit of table updates (see the module docs).
#[async_trait]
pub trait TableSwap: Send + Sync {
    /// Checks `requirements` against the table `ident` as the catalog holds it now, applies
    /// `updates`, writes the new metadata file and swaps the catalog's pointer to it if nobody
    /// swapped it since. Returns the table as committed.
    ///
    /// Errors: a failed requirement (`ErrorKind::DataInvalid`, iceberg-rust's
    /// `TableRequirement::check`) or a lost swap (`ErrorKind::CatalogCommitConflicts`) mean
    /// nothing was committed; any other error leaves the outcome unknown (reload the table).
    async fn swap(
        &self,
        ident: &TableIdent,
        requirements: Vec<TableRequirement>,
        updates: Vec<TableUpdate>,
    ) -> iceberg::Result<Table>;

    /// Whether floe's client writes the table's metadata files (SQL, Glue), so it may delete the
    /// ones the metadata log dropped; `false` where the catalog server writes them (REST).
    fn client_writes_metadata(&self) -> bool {
        true
    }
}

/// `current` with `requirements` checked and `updates` applied, at its next metadata location
/// (`<n+1>-<uuid>.metadata.json`, the same rule as iceberg-rust's `TableCommit::apply`), not yet
/// written.
///
/// Errors: a requirement fails (`ErrorKind::DataInvalid`); an update does not apply.
pub fn stage(
    current: Table,
    requirements: &[TableRequirement],
    updates: Vec<TableUpdate>,
) -> iceberg::Result<Table> {
    for requirement in requirements {
        requirement.check(Some(current.metadata()))?;
    }
    let location = current.metadata_location_result()?.to_string();
    let mut builder = current
        .metadata()
        .clone()
        .into_builder(Some(location.clone()));
    for update in updates {
        builder = update.apply(builder)?;
    }
    let metadata = builder.build()?.metadata;
    let next = MetadataLocation::from_str(&location)?
        .with_next_version()
        .with_new_metadata(&metadata)
        .to_string();
    Table::builder()
        .identifier(current.identifier().clone())
        .metadata(metadata)
        .metadata_location(next)
        .file_io(current.file_io().clone())
        .runtime(iceberg::Runtime::try_current()?)
        .build()
}

/// Writes the metadata file of a table [`stage`] returned.
///
/// Errors: the storage write fails (nothing references the file yet).
pub async fn write_staged(staged: &Table) -> iceberg::Result<()> {
    let location = MetadataLocation::from_str(staged.metadata_location_result()?)?;
    staged
        .metadata()
        .write_to(staged.file_io(), &location)
        .await
}

/// The swap of an SQL catalog (`iceberg-catalog-sql`'s `iceberg_tables` table): one
/// conditional `UPDATE` on the row's `metadata_location`, the statement the crate's own
/// `update_table` runs. The catalog database is SQLite or PostgreSQL (the
/// `[channel.destination.catalog] uri`), through sqlx's `Any` driver as the crate itself uses it.
pub struct SqlSwap {
    catalog: Arc<dyn Catalog>,
    name: String,
    pool: sqlx::AnyPool,
}

impl SqlSwap {
    /// The swap of the SQL catalog `catalog` named `name` (the `catalog_name` of its rows) in
    /// `database`.
    ///
    /// Errors: the database cannot be opened.
    pub async fn open(
        catalog: Arc<dyn Catalog>,
        database: &crate::config::CatalogDatabase,
        name: &str,
    ) -> iceberg::Result<Self> {
        sqlx::any::install_default_drivers();
        let pool = sqlx::any::AnyPoolOptions::new()
            .max_connections(1)
            .after_connect(|conn, _| {
                Box::pin(async move {
                    if conn.backend_name() == "SQLite" {
                        sqlx::Executor::execute(&mut *conn, "PRAGMA busy_timeout = 10000").await?;
                    }
                    Ok(())
                })
            })
            .connect(&database.url())
            .await
            .map_err(|e| {
                Error::new(
                    ErrorKind::Unexpected,
                    format!("sql catalog {database}: {e}"),
                )
            })?;
        Ok(SqlSwap {
            catalog,
            name: name.to_string(),
            pool,
        })
    }
}

#[async_trait]
impl TableSwap for SqlSwap {
    async fn swap(
        &self,
        ident: &TableIdent,
        requirements: Vec<TableRequirement>,
        updates: Vec<TableUpdate>,
    ) -> iceberg::Result<Table> {
        let current = self.catalog.load_table(ident).await?;
        let previous = current.metadata_location_result()?.to_string();
        let staged = stage(current, &requirements, updates)?;
        write_staged(&staged).await?;
        let next = staged.metadata_location_result()?.to_string();
        let done = sqlx::query(
            "UPDATE iceberg_tables SET metadata_location = $1, previous_metadata_location = $2 \
             WHERE catalog_name = $3 AND table_namespace = $4 AND table_name = $5 \
             AND (iceberg_type = 'TABLE' OR iceberg_type IS NULL) AND metadata_location = $6",
        )
        .bind(&next)
        .bind(&previous)
        .bind(&self.name)
        .bind(ident.namespace().join("."))
        .bind(ident.name())
        .bind(&previous)
        .execute(&self.pool)
        .await
        .map_err(|e| Error::new(ErrorKind::Unexpected, format!("sql catalog swap: {e}")))?;
        if done.rows_affected() == 0 {
            return Err(Error::new(
                ErrorKind::CatalogCommitConflicts,
                format!("table {ident} changed in the sql catalog since it was loaded"),
            ));
        }
        Ok(staged)
    }
}
