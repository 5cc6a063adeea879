//! Validation of the parsed file into typed [`Config`]: defaults, ranges, names and cross-field
//! rules. Pure: no I/O (the environment comes in as [`ConfigEnv`]). Every problem is collected.
//!
//! One `Checker` walks the file; its methods are split by the configuration's own sections, one
//! file each, with the tests of each section beside it: `worker`, `aws`, `lease_store`, and per
//! `[[channel]]` (`channel`, which also holds the rules across a channel's sections and across
//! channels) its `source`, `record`, `schema`, `destination` (with its `route`s, its
//! `maintenance` and its `catalog`, its change data capture keys: `cdc`) and `dlq`. This file holds the entry point and the checks
//! every section uses (durations, sizes, numbers, paths, names, values from the environment).
//! Errors come out in the order the file is walked: `[worker]`, `[aws]`, `[lease_store]`, then
//! each channel's sections in the order above, then the rules across channels.

use std::ops::RangeInclusive;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::file::{ConfigFile, DurationText, FromSection, Section, SizeText, WholeNumber};
use super::units::{format_duration, format_size, parse_duration, parse_size};
use super::*;

mod aws;
mod catalog;
mod cdc;
mod channel;
mod destination;
mod dlq;
mod lease_store;
mod maintenance;
mod record;
mod route;
mod schema;
mod source;
mod worker;

pub(crate) use destination::DATA_FRESHNESS_RANGE;
pub(crate) use source::owned_kafka_property;

pub(super) fn validate(
    file: ConfigFile,
    base_dir: &Path,
    env: &ConfigEnv,
) -> Result<Config, ConfigErrors> {
    let mut cx = Checker {
        errors: Vec::new(),
        base_dir,
        env,
    };
    let worker = cx.worker(file.worker);
    let aws = cx.aws(file.aws);
    let lease_store = cx.lease_store(file.lease_store);
    if file.channels.is_empty() {
        cx.error("channel", "at least one [[channel]] is required");
    }
    let channels: Vec<Option<ChannelConfig>> = file
        .channels
        .into_iter()
        .enumerate()
        .map(|(i, section)| cx.channel(i, section))
        .collect();
    cx.across_channels(&channels);
    match (worker, aws, lease_store, cx.errors.is_empty()) {
        (Some(worker), Some(aws), Some(lease_store), true) => Ok(Config {
            worker,
            aws,
            lease_store,
            channels: channels.into_iter().flatten().collect(),
        }),
        _ => Err(ConfigErrors(cx.errors)),
    }
}

struct Checker<'a> {
    errors: Vec<ConfigError>,
    base_dir: &'a Path,
    env: &'a ConfigEnv,
}

impl Checker<'_> {
    fn error(&mut self, path: impl Into<String>, message: impl Into<String>) {
        self.errors.push(ConfigError {
            path: path.into(),
            message: message.into(),
        });
    }

    fn section<T: FromSection>(&mut self, section: Section<T>, path: &str) -> Option<T> {
        // Parsed without its unknown keys (each reported), the rest is still checked.
        let (value, errors) = section.parse();
        for e in errors {
            let path = if e.key.is_empty() {
                path.to_owned()
            } else {
                format!("{path}.{}", e.key)
            };
            self.error(path, e.message);
        }
        value
    }

    fn duration(
        &mut self,
        path: &str,
        text: Option<DurationText>,
        default: Duration,
        range: RangeInclusive<Duration>,
    ) -> Option<Duration> {
        let Some(DurationText(text)) = text else {
            return Some(default);
        };
        let value = parse_duration(&text)
            .map_err(|e| self.error(path, e))
            .ok()?;
        self.in_range(path, &text, value, &range, |d| format_duration(*d))
    }

    fn size(
        &mut self,
        path: &str,
        text: Option<SizeText>,
        default: u64,
        range: RangeInclusive<u64>,
    ) -> Option<u64> {
        let Some(SizeText(text)) = text else {
            return Some(default);
        };
        let value = parse_size(&text).map_err(|e| self.error(path, e)).ok()?;
        self.in_range(path, &text, value, &range, |s| format_size(*s))
    }

    fn number<T: Copy + Into<i64> + TryFrom<i64>>(
        &mut self,
        path: &str,
        value: Option<WholeNumber>,
        default: T,
        range: RangeInclusive<T>,
    ) -> Option<T> {
        let Some(WholeNumber(value)) = value else {
            return Some(default);
        };
        let range: RangeInclusive<i64> = (*range.start()).into()..=(*range.end()).into();
        let toml::Value::Integer(n) = value else {
            let written = match &value {
                toml::Value::String(s) => {
                    format!("the string \"{s}\" (write a number without quotes)")
                }
                other => format!("the {} {other}", other.type_str()),
            };
            self.error(
                path,
                format!(
                    "expected a whole number from {} to {}, not {written}",
                    range.start(),
                    range.end()
                ),
            );
            return None;
        };
        let n = self.in_range(path, &n.to_string(), n, &range, i64::to_string)?;
        T::try_from(n).ok()
    }

    fn in_range<T: PartialOrd>(
        &mut self,
        path: &str,
        text: &str,
        value: T,
        range: &RangeInclusive<T>,
        show: impl Fn(&T) -> String,
    ) -> Option<T> {
        if value < *range.start() {
            self.error(
                path,
                format!("{text} is below the minimum {}", show(range.start())),
            );
            None
        } else if value > *range.end() {
            self.error(
                path,
                format!("{text} is above the maximum {}", show(range.end())),
            );
            None
        } else {
            Some(value)
        }
    }

    /// A local path, relative paths resolved against the configuration file's directory.
    fn local_path(&mut self, path: &str, text: &str) -> Option<PathBuf> {
        if text.trim().is_empty() {
            self.error(path, "must not be empty");
            return None;
        }
        if text.contains("://") {
            let message = if text.starts_with("s3://") {
                format!("\"{text}\": s3:// locations are not supported yet in this build")
            } else {
                format!("\"{text}\" is not a local path")
            };
            self.error(path, message);
            return None;
        }
        Some(self.base_dir.join(text))
    }

    /// A string value written literally or as `"env:VARNAME"` (read from the environment);
    /// a `secret` must come from the environment.
    fn property_value(&mut self, path: &str, value: String, secret: bool) -> Option<PropertyValue> {
        match value.strip_prefix("env:") {
            Some(var) => {
                let valid_name = !var.is_empty()
                    && !var.starts_with(|c: char| c.is_ascii_digit())
                    && var.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
                if !valid_name {
                    self.error(
                        path,
                        format!("\"env:{var}\": not a valid environment variable name"),
                    );
                    return None;
                }
                match self.env.vars.get(var) {
                    Some(v) => Some(PropertyValue::FromEnv {
                        var: var.to_owned(),
                        value: v.clone(),
                    }),
                    None => {
                        self.error(path, format!("environment variable {var} is not set"));
                        None
                    }
                }
            }
            None if secret => {
                self.error(
                    path,
                    "secrets must not be written in the file: write \"env:VARNAME\" and set VARNAME in the worker's environment",
                );
                None
            }
            None => Some(PropertyValue::Literal(value)),
        }
    }

    fn name(
        &mut self,
        path: &str,
        value: String,
        max_len: usize,
        allowed: &str,
        ok: fn(char) -> bool,
    ) -> Option<String> {
        if value.is_empty() || value.len() > max_len || !value.chars().all(ok) {
            self.error(
                path,
                format!(
                    "\"{value}\" is not a valid name: use 1 to {max_len} characters from {allowed}"
                ),
            );
            return None;
        }
        Some(value)
    }

    /// A CA bundle file (`key`): resolved, readable, and every certificate in it usable.
    fn ca_bundle(&mut self, key: &str, text: &str) -> Option<PathBuf> {
        let path = self.local_path(key, text)?;
        match std::fs::read_to_string(&path) {
            Ok(pem) if pem.contains("-----BEGIN CERTIFICATE-----") => {
                match check_ca_bundle(pem.as_bytes()) {
                    Ok(()) => Some(path),
                    Err(why) => {
                        self.error(key, format!("{}: {why}", path.display()));
                        None
                    }
                }
            }
            Ok(_) => {
                self.error(
                    key,
                    format!(
                        "{} holds no PEM certificate (-----BEGIN CERTIFICATE-----)",
                        path.display()
                    ),
                );
                None
            }
            Err(e) => {
                self.error(key, format!("cannot read {}: {e}", path.display()));
                None
            }
        }
    }
}

/// Whether every certificate of a PEM bundle is one a TLS client can trust: the same check
/// the AWS SDK's HTTPS client makes when it builds its trust store (where a bad one panics).
fn check_ca_bundle(pem: &[u8]) -> Result<(), String> {
    use rustls::pki_types::{pem::PemObject, CertificateDer};
    let mut store = rustls::RootCertStore::empty();
    for (i, cert) in CertificateDer::pem_slice_iter(pem).enumerate() {
        let cert = cert.map_err(|e| format!("certificate {} is not valid PEM: {e:?}", i + 1))?;
        store.add(cert).map_err(|e| {
            format!(
                "certificate {} is not a usable X.509 certificate: {e}",
                i + 1
            )
        })?;
    }
    Ok(())
}

/// A key as TOML writes it in a path: bare when it can be, quoted otherwise.
fn quote_key(key: &str) -> String {
    if !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-'))
    {
        key.to_owned()
    } else {
        format!("\"{key}\"")
    }
}

#[cfg(test)]
mod tests {
    use crate::config::tests::{errors, refused, with, MINIMAL};

    #[test]
    fn unparsable_durations_and_sizes_name_the_key() {
        refused(
            &with("[channel.destination]", "data_freshness = \"300\""),
            "channel[0].destination.data_freshness",
            "invalid duration \"300\"",
        );
        refused(
            &with("[channel.destination]", "target_file_size = \"128MB\""),
            "channel[0].destination.target_file_size",
            "write MiB",
        );
        refused(
            &format!("[worker]\nshutdown_timeout = \"soon\"\n{MINIMAL}"),
            "worker.shutdown_timeout",
            "invalid duration \"soon\"",
        );
    }

    #[test]
    fn whole_number_keys_given_a_wrong_value_say_what_is_expected() {
        for (header, line, path, needle) in [
            (
                "[channel.destination]",
                "max_open_partitions = \"48\"",
                "channel[0].destination.max_open_partitions",
                "expected a whole number from 1 to 1000, not the string \"48\" (write a number without quotes)",
            ),
            (
                "[channel.destination]",
                "max_open_partitions = 4.5",
                "channel[0].destination.max_open_partitions",
                "expected a whole number from 1 to 1000, not the float 4.5",
            ),
            (
                "[channel.destination]",
                "compression_level = \"3\"",
                "channel[0].destination.compression_level",
                "expected a whole number from 1 to 22",
            ),
            (
                "[lease_store]",
                "max_leases_to_steal = -1",
                "lease_store.max_leases_to_steal",
                "-1 is below the minimum 1",
            ),
            (
                "[lease_store]",
                "max_leases_to_steal = 5000000000",
                "lease_store.max_leases_to_steal",
                "5000000000 is above the maximum 4294967295",
            ),
            (
                "[lease_store]",
                "max_leases_to_steal = true",
                "lease_store.max_leases_to_steal",
                "expected a whole number from 1 to 4294967295, not the boolean true",
            ),
        ] {
            let errors = errors(&with(header, line));
            assert_eq!(errors.len(), 1, "{line}: {errors:#?}");
            assert_eq!(errors[0].path, path, "{line}: {errors:#?}");
            assert!(errors[0].message.contains(needle), "{line}: {errors:#?}");
            assert!(!errors[0].message.contains("u32"), "{line}: {errors:#?}");
        }
    }
}
