//! Validation of `[channel.destination.maintenance]`: which table maintenance runs, and its
//! bounds.

use std::ops::RangeInclusive;
use std::time::Duration;

use super::Checker;
use crate::config::file::Section;

/// Default of `channel.destination.maintenance.snapshot_retention`.
const DEFAULT_SNAPSHOT_RETENTION: Duration = Duration::from_secs(3600);

const SNAPSHOT_RETENTION_RANGE: RangeInclusive<Duration> =
    Duration::from_secs(60)..=Duration::from_secs(3650 * 86_400);

/// Default of `channel.destination.maintenance.min_snapshots`.
const DEFAULT_MIN_SNAPSHOTS: u32 = 10;

const MIN_SNAPSHOTS_RANGE: RangeInclusive<u32> = 1..=100_000;

const COMPACTION_DELAY_RANGE: RangeInclusive<Duration> =
    Duration::ZERO..=Duration::from_secs(7 * 86_400);

const MAX_MANIFESTS_RANGE: RangeInclusive<u32> = 2..=100_000;

const RECORD_RETENTION_RANGE: RangeInclusive<Duration> =
    Duration::from_secs(3600)..=Duration::from_secs(36_500 * 86_400);

const ORPHAN_AGE_RANGE: RangeInclusive<Duration> =
    Duration::from_secs(3600)..=Duration::from_secs(365 * 86_400);

const MAINTENANCE_INTERVAL_RANGE: RangeInclusive<Duration> =
    Duration::from_secs(1)..=Duration::from_secs(86_400);

impl Checker<'_> {
    /// `[channel.destination.maintenance]`; off by default on S3 Tables, which maintains its
    /// tables itself.
    pub(super) fn maintenance(
        &mut self,
        p: &str,
        section: Section<crate::config::file::MaintenanceSection>,
        s3tables: bool,
    ) -> Option<crate::config::MaintenanceConfig> {
        let m = self.section(section, p)?;
        let snapshot_retention = self.duration(
            &format!("{p}.snapshot_retention"),
            m.snapshot_retention,
            DEFAULT_SNAPSHOT_RETENTION,
            SNAPSHOT_RETENTION_RANGE,
        );
        let min_snapshots = self.number(
            &format!("{p}.min_snapshots"),
            m.min_snapshots,
            DEFAULT_MIN_SNAPSHOTS,
            MIN_SNAPSHOTS_RANGE,
        );
        let d = crate::config::MaintenanceConfig::default();
        let compaction_delay = self.duration(
            &format!("{p}.compaction_delay"),
            m.compaction_delay,
            d.compaction_delay,
            COMPACTION_DELAY_RANGE,
        );
        let max_manifests = self.number(
            &format!("{p}.max_manifests"),
            m.max_manifests,
            d.max_manifests,
            MAX_MANIFESTS_RANGE,
        );
        let record_retention = match m.record_retention {
            None => Some(None),
            // floe cannot commit the delete snapshot there: refused rather than silently ignored.
            Some(_) if s3tables => {
                self.error(
                    format!("{p}.record_retention"),
                    "S3 Tables maintains its own tables and floe cannot commit a delete snapshot there: use S3 Tables' own record expiration, or another catalog".to_string(),
                );
                None
            }
            text => self
                .duration(
                    &format!("{p}.record_retention"),
                    text,
                    Duration::ZERO,
                    RECORD_RETENTION_RANGE,
                )
                .map(Some),
        };
        let interval = self.duration(
            &format!("{p}.interval"),
            m.interval,
            d.interval,
            MAINTENANCE_INTERVAL_RANGE,
        );
        let orphan_age = self.duration(
            &format!("{p}.orphan_age"),
            m.orphan_age,
            d.orphan_age,
            ORPHAN_AGE_RANGE,
        );
        Some(crate::config::MaintenanceConfig {
            enabled: m.enabled.unwrap_or(!s3tables),
            orphan_sweep: m.orphan_sweep.unwrap_or(true),
            orphan_age: orphan_age?,
            snapshot_expiry: m.snapshot_expiry.unwrap_or(true),
            snapshot_retention: snapshot_retention?,
            min_snapshots: min_snapshots?,
            compaction: m.compaction.unwrap_or(true),
            compaction_delay: compaction_delay?,
            manifest_rewrite: m.manifest_rewrite.unwrap_or(true),
            max_manifests: max_manifests?,
            record_retention: record_retention?,
            interval: interval?,
        })
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use crate::config::tests::{
        iceberg, parse, refused, replaced, BUCKET_ARN, MINIMAL, SQL_CATALOG,
    };

    #[test]
    fn maintenance_is_on_by_default_and_its_settings_are_bounded_with_their_key() {
        let sql = parse(MINIMAL).unwrap();
        assert!(iceberg(&sql).maintenance.enabled);
        let maintenance = |lines: &str| {
            MINIMAL.replace(
                "[channel.destination.catalog]",
                &format!(
                    "[channel.destination.maintenance]\n{lines}\n[channel.destination.catalog]"
                ),
            )
        };
        let tuned = maintenance(
            "snapshot_retention = \"30m\"\nmin_snapshots = 3\ncompaction = false\n\
         compaction_delay = \"0s\"\nmax_manifests = 20\nrecord_retention = \"7d\"\n\
         interval = \"30s\"\nsnapshot_expiry = false\norphan_sweep = false\norphan_age = \"2h\"",
        );
        let c = parse(&tuned).unwrap();
        assert_eq!(
            iceberg(&c).maintenance,
            crate::config::MaintenanceConfig {
                enabled: true,
                snapshot_expiry: false,
                snapshot_retention: Duration::from_secs(1800),
                min_snapshots: 3,
                compaction: false,
                compaction_delay: Duration::ZERO,
                manifest_rewrite: true,
                max_manifests: 20,
                record_retention: Some(Duration::from_secs(7 * 86_400)),
                interval: Duration::from_secs(30),
                orphan_sweep: false,
                orphan_age: Duration::from_secs(2 * 3600),
            }
        );
        let bad = maintenance(
            "snapshot_retention = \"1s\"\nmin_snapshots = 0\nrecord_retention = \"10m\"\nmax_manifests = 1\n\
             orphan_age = \"59m\"",
        );
        let e = parse(&bad).unwrap_err().to_string();
        assert!(
            e.contains("channel[0].destination.maintenance.snapshot_retention"),
            "{e}"
        );
        assert!(
            e.contains("channel[0].destination.maintenance.min_snapshots"),
            "{e}"
        );
        for key in ["record_retention", "max_manifests", "orphan_age"] {
            assert!(
                e.contains(&format!("channel[0].destination.maintenance.{key}")),
                "{e}"
            );
        }
        let unknown = maintenance("vacuum = true");
        let e = parse(&unknown).unwrap_err().to_string();
        assert!(e.contains("vacuum"), "{e}");
    }

    /// On S3 Tables floe cannot commit the delete snapshot of record expiration: `record_retention`
    /// is refused with its key instead of being silently ignored (found by a fresh-user review).
    #[test]
    fn record_retention_on_s3tables_is_refused_with_its_key() {
        let s3t = replaced(
            SQL_CATALOG,
            &format!("kind = \"s3tables\"\ntable_bucket_arn = \"{BUCKET_ARN}\""),
        );
        let text = s3t.replace(
            "[channel.destination.catalog]",
            "[channel.destination.maintenance]\nenabled = true\nrecord_retention = \"7d\"\n[channel.destination.catalog]",
        );
        assert_ne!(text, s3t, "the maintenance section went in");
        let e = parse(&text).unwrap_err().to_string();
        assert!(
            e.contains("channel[0].destination.maintenance.record_retention")
                && e.contains("S3 Tables"),
            "{e}"
        );
    }

    #[test]
    fn record_expiration_needs_a_time_transform() {
        let retention = |partition: &str| {
            replaced("partition_field = \"event_time\"", partition).replace(
                "[channel.dlq]",
                "[channel.destination.maintenance]\nrecord_retention = \"30d\"\n[channel.dlq]",
            )
        };
        let config = parse(&retention("partition = [\"hour(event_time)\"]")).unwrap();
        assert!(iceberg(&config).maintenance.record_retention.is_some());
        parse(&retention("partition_field = \"event_time\"")).unwrap();
        parse(&retention(
            "partition = [\"identity(source)\", \"month(event_time)\"]",
        ))
        .unwrap();
        refused(
            &retention("partition = [\"identity(source)\"]"),
            "channel[0].destination.maintenance.record_retention",
            "record expiration needs a time transform",
        );
    }
}
