//! Validation of `[channel.destination.catalog]`: an SQL catalog (SQLite file or PostgreSQL),
//! S3 Tables, Glue, or an Iceberg REST catalog ([`rest`]).

mod rest;

use super::Checker;
use crate::config::file::{CatalogSection, GlueCatalogSection, S3TablesCatalogSection, Section};
use crate::config::{
    CatalogConfig, CatalogDatabase, GlueCatalogConfig, S3TablesCatalogConfig, SqlCatalogConfig,
    Warehouse, DEFAULT_CATALOG_NAME,
};

impl Checker<'_> {
    pub(super) fn catalog(
        &mut self,
        p: &str,
        section: Section<CatalogSection>,
    ) -> Option<CatalogConfig> {
        let sql = match self.section(section, p)? {
            CatalogSection::Sql(sql) => sql,
            CatalogSection::Rest(rest) => {
                return self.rest_catalog(p, rest).map(CatalogConfig::Rest);
            }
            CatalogSection::Glue(glue) => return self.glue_catalog(p, glue),
            CatalogSection::S3Tables(s3t) => return self.s3tables_catalog(p, s3t),
        };
        let name = self.name(
            &format!("{p}.name"),
            sql.name.unwrap_or_else(|| DEFAULT_CATALOG_NAME.to_owned()),
            255,
            "A-Z a-z 0-9 _ -",
            |c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-'),
        );
        let uri_path = format!("{p}.uri");
        let database = match sql
            .uri
            .strip_prefix("sqlite://")
            .or_else(|| sql.uri.strip_prefix("sqlite:"))
        {
            Some(":memory:") | Some("") => {
                self.error(
                    &uri_path,
                    "an in-memory catalog cannot be shared by workers: give a database file path",
                );
                None
            }
            Some(rest) if rest.contains(['?', '#']) => {
                self.error(
                    &uri_path,
                    "query parameters are not supported: give only the database file path",
                );
                None
            }
            Some(rest) => self
                .local_path(&uri_path, rest)
                .map(CatalogDatabase::Sqlite),
            None if sql.uri.starts_with("env:")
                || sql.uri.starts_with("postgres://")
                || sql.uri.starts_with("postgresql://") =>
            {
                self.postgres_url(&uri_path, &sql.uri)
                    .map(CatalogDatabase::Postgres)
            }
            None if sql.uri.contains("://") => {
                self.error(
                    &uri_path,
                    format!("\"{}\": an SQL catalog is an SQLite file (\"sqlite:PATH\" or a plain path) or a PostgreSQL database (\"postgresql://USER@HOST:PORT/DATABASE\" or \"env:VARNAME\")", sql.uri),
                );
                None
            }
            None => self
                .local_path(&uri_path, &sql.uri)
                .map(CatalogDatabase::Sqlite),
        };
        let warehouse = match sql.warehouse.starts_with("s3://") {
            true => self
                .s3_warehouse(&format!("{p}.warehouse"), &sql.warehouse)
                .map(Warehouse::S3),
            false => self
                .local_path(&format!("{p}.warehouse"), &sql.warehouse)
                .map(Warehouse::Local),
        };
        let mut kms_ok = true;
        if let Some(arn) = &sql.kms_key_arn {
            if !self.kms_key(&format!("{p}.kms_key_arn"), arn) {
                kms_ok = false;
            } else if matches!(warehouse, Some(Warehouse::Local(_))) {
                kms_ok = false;
                self.error(
                    format!("{p}.kms_key_arn"),
                    "applies only to an s3:// warehouse; a local warehouse is not encrypted by floe",
                );
            }
        }
        if let Some(owner) = &sql.expected_bucket_owner {
            if !self.account_id(&format!("{p}.expected_bucket_owner"), owner) {
                kms_ok = false;
            } else if matches!(warehouse, Some(Warehouse::Local(_))) {
                kms_ok = false;
                self.error(
                    format!("{p}.expected_bucket_owner"),
                    "applies only to an s3:// warehouse",
                );
            }
        }
        Some(CatalogConfig::Sql(SqlCatalogConfig {
            name: name?,
            database: database?,
            warehouse: warehouse?,
            kms_key_arn: sql.kms_key_arn,
            expected_bucket_owner: sql.expected_bucket_owner,
        }))
        .filter(|_| kms_ok)
    }

    /// `kind = "s3tables"`: a table bucket ARN and an optional KMS key.
    pub(super) fn s3tables_catalog(
        &mut self,
        p: &str,
        s: S3TablesCatalogSection,
    ) -> Option<CatalogConfig> {
        let mut ok = true;
        if let Err(why) = check_table_bucket_arn(&s.table_bucket_arn) {
            ok = false;
            self.error(format!("{p}.table_bucket_arn"), why);
        }
        if let Some(arn) = &s.kms_key_arn {
            ok &= self.kms_key(&format!("{p}.kms_key_arn"), arn);
        }
        ok.then_some(CatalogConfig::S3Tables(S3TablesCatalogConfig {
            table_bucket_arn: s.table_bucket_arn,
            kms_key_arn: s.kms_key_arn,
        }))
    }

    /// `kind = "glue"`: an `s3://` warehouse, optional catalog id, KMS key and bucket owner.
    pub(super) fn glue_catalog(&mut self, p: &str, s: GlueCatalogSection) -> Option<CatalogConfig> {
        let warehouse = self.s3_warehouse(&format!("{p}.warehouse"), &s.warehouse);
        let mut ok = true;
        if let Some(id) = &s.catalog_id {
            ok &= self.account_id(&format!("{p}.catalog_id"), id);
        }
        if let Some(arn) = &s.kms_key_arn {
            ok &= self.kms_key(&format!("{p}.kms_key_arn"), arn);
        }
        if let Some(owner) = &s.expected_bucket_owner {
            ok &= self.account_id(&format!("{p}.expected_bucket_owner"), owner);
        }
        let warehouse = warehouse?;
        ok.then_some(CatalogConfig::Glue(GlueCatalogConfig {
            warehouse,
            catalog_id: s.catalog_id,
            kms_key_arn: s.kms_key_arn,
            expected_bucket_owner: s.expected_bucket_owner,
        }))
    }

    /// An `s3://bucket[/prefix]` location (trailing slashes removed); `None` after an error.
    pub(super) fn s3_warehouse(&mut self, path: &str, text: &str) -> Option<String> {
        let rest = text.strip_prefix("s3://").map(|r| r.trim_end_matches('/'));
        let bucket = rest.and_then(|r| r.split('/').next()).unwrap_or_default();
        let bucket_ok = (3..=63).contains(&bucket.len())
            && bucket
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '.' | '-'));
        match rest {
            Some(rest) if bucket_ok => Some(format!("s3://{rest}")),
            _ => {
                self.error(
                    path,
                    format!("\"{text}\" is not an S3 location such as \"s3://bucket/prefix\""),
                );
                None
            }
        }
    }

    /// S3 Tables names (namespaces and tables) also begin and end with a letter or digit
    /// (S3 Tables user guide, "Naming rules"); floe's own rule already limits them to
    /// `[a-z0-9_]{1,255}`.
    pub(super) fn s3tables_name(&mut self, path: &str, name: String) -> Option<String> {
        if name.starts_with('_') || name.ends_with('_') {
            self.error(
                path,
                format!("\"{name}\": S3 Tables names begin and end with a letter or digit"),
            );
            return None;
        }
        Some(name)
    }
}

/// Checks the shape of an S3 Tables table bucket ARN,
/// `arn:<partition>:s3tables:<region>:<12-digit account>:bucket/<name>` with a bucket name of 3 to
/// 63 characters from `a-z 0-9 -`, beginning and ending with a letter or digit (the pattern of the
/// S3 Tables API's `tableBucketARN`). Returns the reason when it is not one.
pub(crate) fn check_table_bucket_arn(arn: &str) -> Result<(), String> {
    let parts: Vec<&str> = arn.splitn(6, ':').collect();
    let ok = match parts.as_slice() {
        ["arn", partition, "s3tables", region, account, resource] => {
            partition.starts_with("aws")
                && !region.is_empty()
                && account.len() == 12
                && account.bytes().all(|b| b.is_ascii_digit())
                && resource.strip_prefix("bucket/").is_some_and(|name| {
                    (3..=63).contains(&name.len())
                        && name
                            .bytes()
                            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                        && !name.starts_with('-')
                        && !name.ends_with('-')
                })
        }
        _ => false,
    };
    if ok {
        Ok(())
    } else {
        Err(format!(
            "\"{arn}\" is not an S3 Tables table bucket ARN; expected arn:aws:s3tables:REGION:ACCOUNT:bucket/NAME"
        ))
    }
}

#[cfg(test)]
mod tests;
