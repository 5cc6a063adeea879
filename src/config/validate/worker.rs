//! Validation of `[worker]`: the worker id, the metrics endpoint and the shutdown deadline.

use std::net::SocketAddr;
use std::ops::RangeInclusive;
use std::time::Duration;

use super::Checker;
use crate::config::file::{Section, WorkerSection};
use crate::config::{WorkerConfig, DEFAULT_METRICS_ADDRESS, DEFAULT_SHUTDOWN_TIMEOUT};

const SHUTDOWN_TIMEOUT_RANGE: RangeInclusive<Duration> =
    Duration::from_secs(1)..=Duration::from_secs(3600);

impl Checker<'_> {
    pub(super) fn worker(&mut self, section: Section<WorkerSection>) -> Option<WorkerConfig> {
        let w = self.section(section, "worker")?;
        let id = match w.id {
            Some(id) => self.name("worker.id", id, 128, "A-Z a-z 0-9 . _ : -", |c| {
                c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | ':' | '-')
            }),
            None => Some(format!("{}-{}", self.env.hostname, self.env.pid)),
        };
        let metrics_address = match w.metrics_address.as_deref() {
            None => Some(Some(
                DEFAULT_METRICS_ADDRESS.parse().expect("valid default"),
            )),
            Some("off") => Some(None),
            Some(text) => match text.parse::<SocketAddr>() {
                Ok(address) => Some(Some(address)),
                Err(_) => {
                    self.error(
                        "worker.metrics_address",
                        format!("\"{text}\" is not an IP socket address such as \"127.0.0.1:9464\" (host names are not resolved); \"off\" disables the endpoint"),
                    );
                    None
                }
            },
        };
        let shutdown_timeout = self.duration(
            "worker.shutdown_timeout",
            w.shutdown_timeout,
            DEFAULT_SHUTDOWN_TIMEOUT,
            SHUTDOWN_TIMEOUT_RANGE,
        );
        Some(WorkerConfig {
            id: id?,
            metrics_address: metrics_address?,
            shutdown_timeout: shutdown_timeout?,
        })
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use crate::config::tests::{parse, refused, MINIMAL};

    #[test]
    fn explicit_worker_settings_are_used() {
        let text = format!(
            "[worker]\nid = \"w-1\"\nmetrics_address = \"off\"\nshutdown_timeout = \"2m\"\n{MINIMAL}"
        );
        let config = parse(&text).unwrap();
        assert_eq!(config.worker.id, "w-1");
        assert_eq!(config.worker.metrics_address, None);
        assert_eq!(config.worker.shutdown_timeout, Duration::from_secs(120));
    }

    #[test]
    fn worker_settings_are_checked() {
        refused(
            &format!("[worker]\nid = \"has space\"\n{MINIMAL}"),
            "worker.id",
            "not a valid name",
        );
        refused(
            &format!("[worker]\nmetrics_address = \"localhost:9464\"\n{MINIMAL}"),
            "worker.metrics_address",
            "host names are not resolved",
        );
        refused(
            &format!("[worker]\nshutdown_timeout = \"0s\"\n{MINIMAL}"),
            "worker.shutdown_timeout",
            "below the minimum 1s",
        );
    }
}
