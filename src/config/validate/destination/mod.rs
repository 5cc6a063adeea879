//! Validation of `[channel.destination]`: an Iceberg table (names, partition spec, sort order,
//! compression, delivery bounds, the upsert mode's key: `cdc`) or a raw S3 destination.

use std::ops::RangeInclusive;
use std::time::Duration;

use super::Checker;
use crate::config::file::{
    CompressionCodec, DestinationSection, DurationText, IcebergDestinationSection,
    S3DestinationSection, Section, SizeText, WholeNumber,
};
use crate::config::{
    CatalogConfig, Compression, DestinationConfig, IcebergDestinationConfig, DEFAULT_BUFFER_SIZE,
    DEFAULT_DATA_FRESHNESS, DEFAULT_MAX_OPEN_PARTITIONS, DEFAULT_TARGET_FILE_SIZE,
    DEFAULT_ZSTD_LEVEL,
};
use crate::schema::partition::PartitionTerm;

pub(crate) const DATA_FRESHNESS_RANGE: RangeInclusive<Duration> =
    Duration::from_secs(10)..=Duration::from_secs(900);

const TARGET_FILE_SIZE_RANGE: RangeInclusive<u64> = (1 << 20)..=(2 << 30);

const BUFFER_SIZE_RANGE: RangeInclusive<u64> = (1 << 10)..=(64 << 30);

const MAX_OPEN_PARTITIONS_RANGE: RangeInclusive<u32> = 1..=1000;

const MAX_TABLES_RANGE: RangeInclusive<u32> = 1..=1000;

const ZSTD_LEVEL_RANGE: RangeInclusive<i64> = 1..=22;

impl Checker<'_> {
    /// Whether a `[channel.destination]` section says `kind = "s3"` (checked before parsing it,
    /// which decides whether `[channel.schema]` and `[channel.dlq]` belong).
    pub(super) fn is_raw(&self, section: &Section<DestinationSection>) -> bool {
        section.kind() == Some("s3")
    }

    pub(super) fn destination(
        &mut self,
        p: &str,
        section: Section<DestinationSection>,
    ) -> Option<DestinationConfig> {
        match self.section(section, p)? {
            DestinationSection::Iceberg(d) => self.iceberg(p, d).map(DestinationConfig::Iceberg),
            DestinationSection::S3(d) => self.raw(p, d).map(DestinationConfig::S3),
        }
    }

    pub(super) fn raw(
        &mut self,
        p: &str,
        d: S3DestinationSection,
    ) -> Option<crate::config::raw::RawDestinationConfig> {
        let location = self.s3_location(
            p,
            d.bucket,
            String::new(),
            d.expected_bucket_owner,
            d.kms_key_arn,
        );
        let key_template = match crate::config::raw::KeyTemplate::parse(
            d.key_template
                .as_deref()
                .unwrap_or(crate::config::raw::DEFAULT_KEY_TEMPLATE),
        ) {
            Ok(t) => Some(t),
            Err(why) => {
                self.error(format!("{p}.key_template"), why);
                None
            }
        };
        let bounds = self.delivery_bounds(
            p,
            d.data_freshness,
            ("target_object_size", d.target_object_size),
            d.buffer_size,
        );
        let (data_freshness, target_object_size, buffer_size) = bounds?;
        Some(crate::config::raw::RawDestinationConfig {
            location: location?,
            key_template: key_template?,
            compression: d.compression.unwrap_or_default(),
            record_delimiter: d.record_delimiter.unwrap_or_default(),
            data_freshness,
            target_object_size,
            buffer_size,
        })
    }

    /// `data_freshness`, the target size of a file or object (`(key, value)`) and `buffer_size`
    /// of a destination, each with its default and range.
    pub(super) fn delivery_bounds(
        &mut self,
        p: &str,
        data_freshness: Option<DurationText>,
        (target_key, target): (&str, Option<SizeText>),
        buffer_size: Option<SizeText>,
    ) -> Option<(Duration, u64, u64)> {
        let data_freshness = self.duration(
            &format!("{p}.data_freshness"),
            data_freshness,
            DEFAULT_DATA_FRESHNESS,
            DATA_FRESHNESS_RANGE,
        );
        let target = self.size(
            &format!("{p}.{target_key}"),
            target,
            DEFAULT_TARGET_FILE_SIZE,
            TARGET_FILE_SIZE_RANGE,
        );
        let buffer_size = self.size(
            &format!("{p}.buffer_size"),
            buffer_size,
            DEFAULT_BUFFER_SIZE,
            BUFFER_SIZE_RANGE,
        );
        Some((data_freshness?, target?, buffer_size?))
    }

    pub(super) fn iceberg(
        &mut self,
        p: &str,
        d: IcebergDestinationSection,
    ) -> Option<IcebergDestinationConfig> {
        let catalog = self.catalog(&format!("{p}.catalog"), d.catalog);
        let lower = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_';
        let namespace = self.name(
            &format!("{p}.namespace"),
            d.namespace,
            255,
            "a-z 0-9 _",
            lower,
        );
        let several_tables =
            d.table == crate::config::TABLE_PER_TOPIC || d.table == crate::config::TABLE_ROUTED;
        let table = if several_tables {
            Some(d.table)
        } else {
            self.name(&format!("{p}.table"), d.table, 255, "a-z 0-9 _", lower)
        };
        let max_tables = if d.max_tables.is_some() && !several_tables {
            self.error(
                format!("{p}.max_tables"),
                "applies only with table = \"{topic}\" or \"{route}\" (this channel writes one table)",
            );
            None
        } else {
            self.number(
                &format!("{p}.max_tables"),
                d.max_tables,
                crate::config::DEFAULT_MAX_TABLES,
                MAX_TABLES_RANGE,
            )
        };
        let (namespace, table) = match &catalog {
            Some(CatalogConfig::S3Tables(_)) => (
                namespace.and_then(|n| self.s3tables_name(&format!("{p}.namespace"), n)),
                table.and_then(|t| {
                    if t == crate::config::TABLE_PER_TOPIC || t == crate::config::TABLE_ROUTED {
                        Some(t)
                    } else {
                        self.s3tables_name(&format!("{p}.table"), t)
                    }
                }),
            ),
            _ => (namespace, table),
        };
        let route = self.route(
            p,
            table.as_deref(),
            (d.route_field, d.routes, d.unroutable),
            max_tables,
            matches!(catalog, Some(CatalogConfig::S3Tables(_))),
        );
        let partition = self.partition(p, d.partition_field, d.partition);
        let sort = self.sort(p, d.sort.unwrap_or_default());
        let compression = self.compression(p, d.compression, d.compression_level);
        let bounds = self.delivery_bounds(
            p,
            d.data_freshness,
            ("target_file_size", d.target_file_size),
            d.buffer_size,
        );
        let max_open_partitions = self.number(
            &format!("{p}.max_open_partitions"),
            d.max_open_partitions,
            DEFAULT_MAX_OPEN_PARTITIONS,
            MAX_OPEN_PARTITIONS_RANGE,
        );
        let table_mode = table
            .as_deref()
            .and_then(|t| self.table_mode(p, t, d.mode, d.key, d.format_version));
        let maintenance = self.maintenance(
            &format!("{p}.maintenance"),
            d.maintenance,
            matches!(catalog, Some(CatalogConfig::S3Tables(_))),
        );
        // Record expiration drops partitions whose time period ended: it needs a time
        // transform (docs/partitioning.md, "Maintenance").
        if let (Some(m), Some((field, _))) = (&maintenance, &partition) {
            if m.record_retention.is_some() && field.is_empty() {
                self.error(
                    format!("{p}.maintenance.record_retention"),
                    format!(
                        "record expiration needs a time transform (year, month, day or hour) in \
                         {p}.partition: without one there is no period to expire by"
                    ),
                );
            }
        }
        Some(IcebergDestinationConfig {
            maintenance: maintenance?,
            catalog: catalog?,
            namespace: namespace?,
            table: table?,
            max_tables: max_tables?,
            route: route?,
            partition_field: partition.clone()?.0,
            partition: partition?.1,
            sort: sort?,
            compression: compression?,
            data_freshness: bounds?.0,
            target_file_size: bounds?.1,
            buffer_size: bounds?.2,
            max_open_partitions: max_open_partitions?,
            mode: table_mode.as_ref()?.mode,
            format_version: table_mode.as_ref()?.format_version,
            key: table_mode?.key,
        })
    }

    /// `sort`: the table's sort order, terms such as `"event_time desc"`.
    fn sort(&mut self, p: &str, texts: Vec<String>) -> Option<Vec<crate::schema::sort::SortTerm>> {
        let mut sort = Some(Vec::new());
        for (i, text) in texts.iter().enumerate() {
            match crate::schema::sort::SortTerm::parse(text) {
                Ok(t) => {
                    if let Some(terms) = sort.as_mut() {
                        terms.push(t)
                    }
                }
                Err(e) => {
                    self.error(format!("{p}.sort[{i}]"), e);
                    sort = None;
                }
            }
        }
        sort
    }

    /// `compression` (default zstd) and `compression_level` (zstd only).
    fn compression(
        &mut self,
        p: &str,
        codec: Option<CompressionCodec>,
        level: Option<WholeNumber>,
    ) -> Option<Compression> {
        match (codec.unwrap_or(CompressionCodec::Zstd), level) {
            (CompressionCodec::Zstd, level) => self
                .number(
                    &format!("{p}.compression_level"),
                    level,
                    i64::from(DEFAULT_ZSTD_LEVEL),
                    ZSTD_LEVEL_RANGE,
                )
                .map(|level| Compression::Zstd {
                    level: level as i32,
                }),
            (codec, Some(_)) => {
                let name = if codec == CompressionCodec::Snappy {
                    "snappy"
                } else {
                    "none"
                };
                self.error(
                    format!("{p}.compression_level"),
                    format!("applies only to compression = \"zstd\", not \"{name}\""),
                );
                None
            }
            (CompressionCodec::Snappy, None) => Some(Compression::Snappy),
            (CompressionCodec::None, None) => Some(Compression::Uncompressed),
        }
    }

    /// `partition_field` or `partition` (exactly one of them): the time field and the spec's
    /// terms (docs/partitioning.md). The types of the terms' fields are checked when the schema
    /// is mapped.
    pub(super) fn partition(
        &mut self,
        p: &str,
        partition_field: Option<String>,
        partition: Option<Vec<String>>,
    ) -> Option<(String, Vec<PartitionTerm>)> {
        let texts = match (partition_field, partition) {
            (Some(_), Some(_)) => {
                self.error(
                    format!("{p}.partition"),
                    format!(
                        "give {p}.partition or {p}.partition_field (its hour shorthand), not both"
                    ),
                );
                return None;
            }
            (None, None) => {
                self.error(
                    format!("{p}.partition_field"),
                    format!("required (or {p}.partition)"),
                );
                return None;
            }
            (Some(field), None) => {
                if field.trim().is_empty() {
                    self.error(format!("{p}.partition_field"), "must not be empty");
                    return None;
                }
                return Some((field.clone(), vec![PartitionTerm::hour(&field)]));
            }
            (None, Some(texts)) => texts,
        };
        let mut terms = Vec::with_capacity(texts.len());
        for (i, text) in texts.iter().enumerate() {
            match PartitionTerm::parse(text) {
                Ok(t) => terms.push(t),
                Err(e) => self.error(format!("{p}.partition[{i}]"), e),
            }
        }
        if terms.len() < texts.len() {
            return None;
        }
        if let Err((i, e)) = crate::schema::partition::check_terms(&terms) {
            self.error(format!("{p}.partition[{i}]"), e);
            return None;
        }
        // No time transform (`[]`, `["identity(region)"]`): no time field, "" (records need
        // none).
        let field = crate::schema::partition::time_field(&terms).unwrap_or_default();
        Some((field.to_string(), terms))
    }
}

#[cfg(test)]
mod tests;
