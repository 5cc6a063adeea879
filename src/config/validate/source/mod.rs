//! Validation of `[channel.source]`: a Kinesis stream (polling or enhanced fan-out) or Kafka
//! topics, with the Kafka client properties floe owns refused.

use std::collections::BTreeMap;
use std::ops::RangeInclusive;
use std::time::Duration;

use super::{quote_key, Checker};
use crate::config::file::{KafkaSourceSection, KinesisSourceSection, Section, SourceSection};
use crate::config::{
    KafkaSourceConfig, KinesisReadMode, KinesisSourceConfig, KinesisStream, SourceConfig,
    TopicSelection, DEFAULT_KINESIS_MAX_RECORDS_PER_CALL, DEFAULT_KINESIS_POLL_INTERVAL,
};

const MAX_TOPICS_LISTED: usize = 1000;

const TOPIC_REFRESH_RANGE: RangeInclusive<Duration> =
    Duration::from_secs(5)..=Duration::from_secs(600);

/// Kafka client properties floe sets itself, with the reason given to the user. The one list:
/// config validation refuses them at their key path and [`crate::source::kafka::KafkaSource`]
/// refuses them too (see [`owned_kafka_property`]).
const OWNED_KAFKA_PROPERTIES: [(&str, &str); 11] = [
    ("bootstrap.servers", "set `bootstrap_servers` instead"),
    ("metadata.broker.list", "set `bootstrap_servers` instead"),
    (
        "group.id",
        "floe assigns partitions itself and uses no consumer group",
    ),
    (
        "enable.auto.commit",
        "floe never commits offsets to Kafka: checkpoints live in the table",
    ),
    (
        "auto.commit.enable",
        "floe never commits offsets to Kafka: checkpoints live in the table",
    ),
    (
        "enable.auto.offset.store",
        "floe never stores offsets in Kafka: checkpoints live in the table",
    ),
    (
        "auto.offset.reset",
        "set `initial_position` instead; floe resumes from the table's checkpoints",
    ),
    ("enable.partition.eof", "floe sets it itself"),
    ("group.instance.id", "floe never joins a consumer group"),
    (
        "isolation.level",
        "floe always reads committed records only (read_committed): aborted transactional records never reach the table",
    ),
    (
        "statistics.interval.ms",
        "floe uses librdkafka statistics for lag reporting",
    ),
];

/// Why floe refuses the Kafka client property `key` from the user, if it is one floe sets itself.
pub(crate) fn owned_kafka_property(key: &str) -> Option<&'static str> {
    OWNED_KAFKA_PROPERTIES
        .iter()
        .find(|(owned, _)| *owned == key)
        .map(|(_, why)| *why)
}

impl Checker<'_> {
    pub(super) fn source(
        &mut self,
        p: &str,
        section: Section<SourceSection>,
    ) -> Option<SourceConfig> {
        match self.section(section, p)? {
            SourceSection::Kafka(kafka) => self.kafka(p, kafka).map(SourceConfig::Kafka),
            SourceSection::Kinesis(kinesis) => self.kinesis(p, kinesis).map(SourceConfig::Kinesis),
        }
    }

    pub(super) fn kinesis(
        &mut self,
        p: &str,
        s: KinesisSourceSection,
    ) -> Option<KinesisSourceConfig> {
        let stream = match (s.stream_name, s.stream_arn) {
            (Some(name), None) => {
                let valid = (1..=128).contains(&name.len())
                    && name
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'));
                if valid {
                    Some(KinesisStream::Name(name))
                } else {
                    self.error(
                        format!("{p}.stream_name"),
                        format!("\"{name}\" is not a Kinesis stream name: 1 to 128 characters from A-Z a-z 0-9 _ . -"),
                    );
                    None
                }
            }
            (None, Some(arn)) => {
                let parts: Vec<&str> = arn.splitn(6, ':').collect();
                let valid = matches!(parts.as_slice(), ["arn", _, "kinesis", region, account, resource]
                    if !region.is_empty() && account.len() == 12
                        && resource.strip_prefix("stream/").is_some_and(|n| !n.is_empty()));
                if valid {
                    Some(KinesisStream::Arn(arn))
                } else {
                    self.error(
                        format!("{p}.stream_arn"),
                        format!("\"{arn}\" is not a Kinesis stream ARN such as \"arn:aws:kinesis:us-east-1:123456789012:stream/NAME\""),
                    );
                    None
                }
            }
            (Some(_), Some(_)) => {
                self.error(p, "give one of `stream_name` and `stream_arn`, not both");
                None
            }
            (None, None) => {
                self.error(p, "missing field `stream_name` (or `stream_arn`)");
                None
            }
        };
        let polling_keys_set = [
            ("max_records_per_call", s.max_records_per_call.is_some()),
            ("poll_interval", s.poll_interval.is_some()),
        ];
        let max_records_per_call = self.number(
            &format!("{p}.max_records_per_call"),
            s.max_records_per_call,
            DEFAULT_KINESIS_MAX_RECORDS_PER_CALL,
            1..=10_000,
        );
        let poll_interval = self.duration(
            &format!("{p}.poll_interval"),
            s.poll_interval,
            DEFAULT_KINESIS_POLL_INTERVAL,
            Duration::from_millis(200)..=Duration::from_secs(60),
        );
        let read_mode = match s.read_mode.as_deref() {
            None | Some("polling") => {
                if s.consumer_name.is_some() {
                    self.error(
                        format!("{p}.consumer_name"),
                        "applies to read_mode = \"enhanced_fan_out\" only (the channel reads with polling)",
                    );
                }
                Some(KinesisReadMode::Polling)
            }
            Some("enhanced_fan_out") => {
                for (key, set) in polling_keys_set {
                    if set {
                        self.error(
                            format!("{p}.{key}"),
                            "applies to read_mode = \"polling\" only: enhanced fan-out is pushed by the service",
                        );
                    }
                }
                match s.consumer_name {
                    Some(name)
                        if name.is_empty()
                            || name.len() > 128
                            || !name.chars().all(|c| {
                                c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-')
                            }) =>
                    {
                        self.error(
                            format!("{p}.consumer_name"),
                            format!("\"{name}\" is not a Kinesis consumer name: 1 to 128 characters from A-Z a-z 0-9 _ . -"),
                        );
                        None
                    }
                    consumer_name => Some(KinesisReadMode::EnhancedFanOut { consumer_name }),
                }
            }
            Some(other) => {
                self.error(
                    format!("{p}.read_mode"),
                    format!("\"{other}\" is not a read mode: \"polling\" or \"enhanced_fan_out\""),
                );
                None
            }
        };
        Some(KinesisSourceConfig {
            stream: stream?,
            initial_position: s.initial_position,
            max_records_per_call: max_records_per_call?,
            poll_interval: poll_interval?,
            read_mode: read_mode?,
        })
    }

    /// `topic`, `topics` or `topic_pattern`: exactly one, with valid names (no duplicates) or
    /// a pattern that compiles.
    pub(super) fn topics(
        &mut self,
        p: &str,
        topic: Option<String>,
        topics: Option<Vec<String>>,
        pattern: Option<String>,
    ) -> Option<TopicSelection> {
        let given = [topic.is_some(), topics.is_some(), pattern.is_some()];
        match given.iter().filter(|g| **g).count() {
            1 => {}
            0 => {
                self.error(
                    format!("{p}.topic"),
                    "missing: give `topic`, `topics` or `topic_pattern`",
                );
                return None;
            }
            _ => {
                self.error(
                    format!("{p}.topic"),
                    "`topic`, `topics` and `topic_pattern` exclude each other: give one",
                );
                return None;
            }
        }
        let valid = |t: &str| {
            !t.is_empty()
                && t.len() <= 249
                && t != "."
                && t != ".."
                && t.chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
        };
        const NAME_RULE: &str = "1 to 249 characters from A-Z a-z 0-9 . _ -";
        if let Some(t) = topic {
            if !valid(&t) {
                self.error(
                    format!("{p}.topic"),
                    format!("\"{t}\" is not a valid Kafka topic name: {NAME_RULE}"),
                );
                return None;
            }
            return Some(TopicSelection::One(t));
        }
        if let Some(list) = topics {
            let mut ok = true;
            if list.is_empty() || list.len() > MAX_TOPICS_LISTED {
                self.error(
                    format!("{p}.topics"),
                    format!(
                        "must list 1 to {MAX_TOPICS_LISTED} topics (use topic_pattern for more)"
                    ),
                );
                ok = false;
            }
            let mut seen = std::collections::BTreeSet::new();
            for (i, t) in list.iter().enumerate() {
                if !valid(t) {
                    self.error(
                        format!("{p}.topics[{i}]"),
                        format!("\"{t}\" is not a valid Kafka topic name: {NAME_RULE}"),
                    );
                    ok = false;
                } else if !seen.insert(t.as_str()) {
                    self.error(
                        format!("{p}.topics[{i}]"),
                        format!("\"{t}\" is listed twice"),
                    );
                    ok = false;
                }
            }
            return ok.then_some(TopicSelection::List(list));
        }
        let text = pattern.unwrap_or_default();
        if text.is_empty() {
            self.error(format!("{p}.topic_pattern"), "must not be empty");
            return None;
        }
        match crate::config::TopicPattern::new(&text) {
            Ok(pattern) => Some(TopicSelection::Pattern(pattern)),
            Err(e) => {
                self.error(
                    format!("{p}.topic_pattern"),
                    format!("not a regular expression: {e}"),
                );
                None
            }
        }
    }

    pub(super) fn kafka(&mut self, p: &str, s: KafkaSourceSection) -> Option<KafkaSourceConfig> {
        let mut ok = true;
        let servers: Vec<&str> = s.bootstrap_servers.split(',').map(str::trim).collect();
        let bad_server = servers.iter().find(|server| {
            server
                .rsplit_once(':')
                .is_none_or(|(host, port)| host.is_empty() || port.parse::<u16>().is_err())
        });
        if let Some(bad) = bad_server {
            ok = false;
            self.error(
                format!("{p}.bootstrap_servers"),
                format!("\"{bad}\" is not host:port (write e.g. \"broker1:9092,broker2:9092\")"),
            );
        }
        let topics = self.topics(p, s.topic, s.topics, s.topic_pattern);
        let topic_refresh_interval = self.duration(
            &format!("{p}.topic_refresh_interval"),
            s.topic_refresh_interval,
            crate::config::DEFAULT_TOPIC_REFRESH_INTERVAL,
            TOPIC_REFRESH_RANGE,
        );
        let mut properties = BTreeMap::new();
        for (key, value) in s.properties {
            let path = format!("{p}.properties.{}", quote_key(&key));
            if let Some(why) = owned_kafka_property(&key) {
                ok = false;
                self.error(path, format!("floe sets this property itself: {why}"));
                continue;
            }
            let toml::Value::String(value) = value else {
                ok = false;
                self.error(
                    path,
                    format!(
                        "invalid type: {}, expected a string (client properties are strings: write \"{value}\")",
                        value.type_str()
                    ),
                );
                continue;
            };
            let Some(value) = self.property_value(&path, value, is_secret_property(&key)) else {
                ok = false;
                continue;
            };
            // The check librdkafka makes when `floe run` creates the client (no connection).
            if let Err(why) = check_kafka_client_property(&key, value.value()) {
                ok = false;
                let secret = value.value();
                let why = if is_secret_property(&key) && !secret.is_empty() {
                    why.replace(secret, "(secret)")
                } else {
                    why
                };
                self.error(path, why);
                continue;
            }
            properties.insert(key, value);
        }
        ok.then_some(KafkaSourceConfig {
            bootstrap_servers: s.bootstrap_servers,
            topics: topics?,
            topic_refresh_interval: topic_refresh_interval?,
            initial_position: s.initial_position,
            on_position_lost: s.on_position_lost,
            properties,
        })
    }
}

/// Whether a client property holds a secret that must come from the environment.
fn is_secret_property(key: &str) -> bool {
    key.contains("password")
        || key.contains("secret")
        || key == "sasl.oauthbearer.config"
        || key == "ssl.key.pem"
}

/// Checks that librdkafka accepts `key` = `value` as a client property (a known property, a
/// valid value, supported by this build), as it checks them when a client is created. Creates no
/// client and connects to nothing: config validation calls it, so `floe validate` refuses what
/// would stop `floe run`.
///
/// Errors: librdkafka's reason.
fn check_kafka_client_property(key: &str, value: &str) -> Result<(), String> {
    rdkafka::ClientConfig::new()
        .set(key, value)
        .create_native_config()
        .map(drop)
        .map_err(|e| match e {
            rdkafka::error::KafkaError::ClientConfig(_, description, _, _) => {
                format!("librdkafka refuses it: {description}")
            }
            e => format!("librdkafka refuses it: {e}"),
        })
}

#[cfg(test)]
mod tests;
