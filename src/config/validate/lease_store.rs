//! Validation of `[lease_store]`: SQLite, DynamoDB or PostgreSQL, and the lease timing rules
//! (renew interval at most a third of the lease duration).

use std::ops::RangeInclusive;
use std::time::Duration;

use super::Checker;
use crate::config::file::{DurationText, LeaseStoreSection, Section};
use crate::config::units::format_duration;
use crate::config::{
    LeaseStoreBackend, LeaseStoreConfig, DEFAULT_LEASE_DURATION, DEFAULT_MAX_LEASES_TO_STEAL,
};

const LEASE_DURATION_RANGE: RangeInclusive<Duration> =
    Duration::from_secs(1)..=Duration::from_secs(600);

const MIN_RENEW_INTERVAL: Duration = Duration::from_millis(100);

impl Checker<'_> {
    pub(super) fn lease_store(
        &mut self,
        section: Section<LeaseStoreSection>,
    ) -> Option<LeaseStoreConfig> {
        let (backend, lease_duration, renew_interval, max_leases_to_steal) = match self
            .section(section, "lease_store")?
        {
            LeaseStoreSection::Sqlite(s) => (
                self.local_path("lease_store.path", &s.path)
                    .map(|path| LeaseStoreBackend::Sqlite { path }),
                s.lease_duration,
                s.renew_interval,
                s.max_leases_to_steal,
            ),
            LeaseStoreSection::Dynamodb(s) => {
                let valid = (3..=255).contains(&s.table.len())
                    && s.table
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
                if !valid {
                    self.error(
                            "lease_store.table",
                            format!("\"{}\" is not a DynamoDB table name: 3 to 255 characters from A-Z a-z 0-9 _ - .", s.table),
                        );
                }
                (
                    valid.then(|| LeaseStoreBackend::Dynamodb {
                        table: s.table,
                        create_lease_table: s.create_lease_table.unwrap_or(true),
                    }),
                    s.lease_duration,
                    s.renew_interval,
                    s.max_leases_to_steal,
                )
            }
            LeaseStoreSection::Postgres(s) => (
                self.postgres_lease_store(&s),
                s.lease_duration,
                s.renew_interval,
                s.max_leases_to_steal,
            ),
        };
        let lease_duration = self.duration(
            "lease_store.lease_duration",
            lease_duration,
            DEFAULT_LEASE_DURATION,
            LEASE_DURATION_RANGE,
        );
        let renew_default = lease_duration.unwrap_or(DEFAULT_LEASE_DURATION) / 3;
        let renew_text = renew_interval;
        let renew_interval = self.duration(
            "lease_store.renew_interval",
            renew_text.clone(),
            renew_default,
            MIN_RENEW_INTERVAL..=Duration::MAX,
        );
        let mut renew_ok = true;
        if let (Some(lease), Some(renew), Some(DurationText(text))) =
            (lease_duration, renew_interval, &renew_text)
        {
            if renew.saturating_mul(3) > lease {
                renew_ok = false;
                self.error(
                    "lease_store.renew_interval",
                    format!(
                        "{text} is more than a third of lease_duration ({}): a worker must be able to miss two renewals before its leases expire",
                        format_duration(lease)
                    ),
                );
            }
        }
        let max_leases_to_steal = self.number(
            "lease_store.max_leases_to_steal",
            max_leases_to_steal,
            DEFAULT_MAX_LEASES_TO_STEAL,
            1..=u32::MAX,
        );
        Some(LeaseStoreConfig {
            backend: backend?,
            lease_duration: lease_duration?,
            renew_interval: renew_interval.filter(|_| renew_ok)?,
            max_leases_to_steal: max_leases_to_steal?,
        })
    }

    /// `[lease_store] kind = "postgres"`: the URL (literal without a password, or from the
    /// environment), TLS mode, pool size and schema.
    pub(super) fn postgres_lease_store(
        &mut self,
        s: &crate::config::file::PostgresLeaseStoreSection,
    ) -> Option<LeaseStoreBackend> {
        let url = self.postgres_url("lease_store.url", &s.url);
        let ssl_mode = match s.ssl_mode.as_deref().unwrap_or("prefer").parse() {
            Ok(mode) => Some(mode),
            Err(message) => {
                self.error("lease_store.ssl_mode", message);
                None
            }
        };
        let pool_size = self.number("lease_store.pool_size", s.pool_size.clone(), 4, 1..=100);
        let schema = s.schema.clone().unwrap_or_else(|| "floe".to_string());
        let schema_ok = !schema.is_empty()
            && schema.len() <= 63
            && !schema.starts_with(|c: char| c.is_ascii_digit())
            && schema
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
        if !schema_ok {
            self.error(
                "lease_store.schema",
                format!("\"{schema}\" is not a schema name: 1 to 63 characters from a-z 0-9 _, not starting with a digit"),
            );
        }
        Some(LeaseStoreBackend::Postgres(
            crate::config::postgres::PostgresOptions {
                url: url?,
                ssl_mode: ssl_mode?,
                pool_size: pool_size?,
                schema: schema_ok.then_some(schema)?,
                create_tables: s.create_tables.unwrap_or(true),
            },
        ))
    }

    /// A PostgreSQL connection URL at `path`: `"env:VARNAME"` (read from the environment, may
    /// hold a password) or a literal `postgres://`/`postgresql://` URL without a password.
    pub(super) fn postgres_url(&mut self, path: &str, text: &str) -> Option<String> {
        let from_env = text.starts_with("env:");
        let value = self.property_value(path, text.to_string(), false)?;
        let url = value.value().to_string();
        match url::Url::parse(&url) {
            Ok(parsed) if matches!(parsed.scheme(), "postgres" | "postgresql") => {
                if parsed.password().is_some() && !from_env {
                    self.error(
                        path,
                        "the URL holds a password: secrets must not be written in the file; give it in PGPASSWORD or ~/.pgpass, or write \"env:VARNAME\" with the whole URL in VARNAME",
                    );
                    return None;
                }
                Some(url)
            }
            Ok(parsed) => {
                self.error(
                    path,
                    format!(
                        "scheme \"{}\" is not postgresql:// (e.g. \"postgresql://floe@db.internal:5432/floe\")",
                        parsed.scheme()
                    ),
                );
                None
            }
            Err(e) => {
                self.error(
                    path,
                    format!(
                        "not a URL ({e}); write \"postgresql://USER@HOST:PORT/DATABASE\"{}",
                        if from_env { " in the variable" } else { "" }
                    ),
                );
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::time::Duration;

    use crate::config::tests::{env_with, errors, parse, refused, replaced, with};
    use crate::config::*;

    #[test]
    fn renew_interval_defaults_to_a_third_of_the_lease_duration() {
        let config = parse(&with("[lease_store]", "lease_duration = \"30s\"")).unwrap();
        assert_eq!(config.lease_store.renew_interval, Duration::from_secs(10));
    }

    #[test]
    fn renew_interval_must_be_at_most_a_third_of_the_lease() {
        refused(
            &with(
                "[lease_store]",
                "lease_duration = \"10s\"\nrenew_interval = \"4s\"",
            ),
            "lease_store.renew_interval",
            "more than a third of lease_duration (10s)",
        );
        refused(
            &with("[lease_store]", "renew_interval = \"50ms\""),
            "lease_store.renew_interval",
            "below the minimum 100ms",
        );
        assert!(parse(&with(
            "[lease_store]",
            "lease_duration = \"9s\"\nrenew_interval = \"3s\""
        ))
        .is_ok());
    }

    #[test]
    fn lease_duration_and_stealing_are_bounded() {
        refused(
            &with("[lease_store]", "lease_duration = \"500ms\""),
            "lease_store.lease_duration",
            "below the minimum 1s",
        );
        refused(
            &with("[lease_store]", "lease_duration = \"11m\""),
            "lease_store.lease_duration",
            "above the maximum 10m",
        );
        refused(
            &with("[lease_store]", "max_leases_to_steal = 0"),
            "lease_store.max_leases_to_steal",
            "below the minimum 1",
        );
    }

    /// `MINIMAL` with `[lease_store] kind = "postgres"` and `lines`.
    fn postgres_lease_store(lines: &str) -> String {
        replaced(
            "kind = \"sqlite\"\npath = \"state/leases.sqlite\"",
            &format!("kind = \"postgres\"\n{lines}"),
        )
    }

    #[test]
    fn postgres_lease_store_reads_its_url_from_the_environment_with_defaults() {
        let text = postgres_lease_store("url = \"env:FLOE_PG\"");
        let config = Config::from_toml_str_with_env(
            &text,
            Path::new("/etc/floe"),
            &env_with("FLOE_PG", "postgresql://floe:secret@db:5432/floe"),
        )
        .unwrap();
        assert_eq!(
            config.lease_store.backend,
            LeaseStoreBackend::Postgres(crate::config::postgres::PostgresOptions {
                url: "postgresql://floe:secret@db:5432/floe".into(),
                ssl_mode: crate::config::postgres::SslMode::Prefer,
                pool_size: 4,
                schema: "floe".into(),
                create_tables: true,
            })
        );
        assert!(!format!("{:?}", config.lease_store).contains("secret"));
    }

    #[test]
    fn postgres_lease_store_keys_are_validated_by_name() {
        let text = postgres_lease_store(
            "url = \"postgresql://floe@db/floe\"\nssl_mode = \"verify-ca\"\npool_size = 0\nschema = \"Floe-1\"\ncreate_tables = false",
        );
        let paths: Vec<String> = errors(&text).into_iter().map(|e| e.path).collect();
        assert_eq!(
            paths,
            [
                "lease_store.ssl_mode",
                "lease_store.pool_size",
                "lease_store.schema"
            ]
        );
        let config = parse(&postgres_lease_store(
            "url = \"postgresql://floe@db/floe\"\nssl_mode = \"verify-full\"\npool_size = 8\nschema = \"floe_prod\"\ncreate_tables = false",
        ))
        .unwrap();
        let LeaseStoreBackend::Postgres(options) = &config.lease_store.backend else {
            panic!("postgres")
        };
        assert_eq!(
            options.ssl_mode,
            crate::config::postgres::SslMode::VerifyFull
        );
        assert_eq!(
            (options.pool_size, options.schema.as_str()),
            (8, "floe_prod")
        );
        assert!(!options.create_tables);
    }

    #[test]
    fn postgres_url_with_a_password_in_the_file_or_another_scheme_is_refused() {
        refused(
            &postgres_lease_store("url = \"postgresql://floe:hunter2@db/floe\""),
            "lease_store.url",
            "PGPASSWORD",
        );
        refused(
            &postgres_lease_store("url = \"mysql://floe@db/floe\""),
            "lease_store.url",
            "is not postgresql://",
        );
        refused(
            &postgres_lease_store("url = \"env:UNSET_PG\""),
            "lease_store.url",
            "UNSET_PG is not set",
        );
    }
}
