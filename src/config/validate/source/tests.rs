//! Tests of the validation of `[channel.source]`, each rule pinned with the key path it reports.

use std::time::Duration;

use crate::config::tests::{aws_config, kafka, parse, props, refused, replaced};
use crate::config::*;

#[test]
fn kinesis_read_mode_defaults_to_polling_and_enhanced_fan_out_names_its_consumer() {
    let base = aws_config();
    let source = |text: &str| match parse(text).unwrap().channels[0].source.clone() {
        SourceConfig::Kinesis(k) => k,
        _ => panic!("kinesis source expected"),
    };
    assert_eq!(source(&base).read_mode, KinesisReadMode::Polling);
    let efo = base.replacen(
        "poll_interval = \"500ms\"",
        "read_mode = \"enhanced_fan_out\"",
        1,
    );
    let mode = source(&efo).read_mode;
    assert_eq!(
        mode,
        KinesisReadMode::EnhancedFanOut {
            consumer_name: None
        }
    );
    assert_eq!(mode.consumer_name("orders").as_deref(), Some("floe-orders"));
    let named = efo.replacen(
        "read_mode = \"enhanced_fan_out\"",
        "read_mode = \"enhanced_fan_out\"\nconsumer_name = \"analytics.floe-1\"",
        1,
    );
    assert_eq!(
        source(&named).read_mode.consumer_name("orders").as_deref(),
        Some("analytics.floe-1")
    );
    assert_eq!(KinesisReadMode::Polling.consumer_name("orders"), None);
}

#[test]
fn kinesis_read_mode_settings_are_refused_naming_the_key() {
    let base = aws_config();
    let efo = base.replacen(
        "poll_interval = \"500ms\"",
        "read_mode = \"enhanced_fan_out\"",
        1,
    );
    refused(
        &base.replacen("poll_interval = \"500ms\"", "read_mode = \"fan_out\"", 1),
        "channel[0].source.read_mode",
        "\"polling\" or \"enhanced_fan_out\"",
    );
    refused(
        &base.replacen("poll_interval = \"500ms\"", "consumer_name = \"c\"", 1),
        "channel[0].source.consumer_name",
        "enhanced_fan_out",
    );
    refused(
        &efo.replacen("read_mode", "consumer_name = \"bad name\"\nread_mode", 1),
        "channel[0].source.consumer_name",
        "not a Kinesis consumer name",
    );
    refused(
        &efo.replacen("read_mode", "poll_interval = \"1s\"\nread_mode", 1),
        "channel[0].source.poll_interval",
        "polling",
    );
    refused(
        &efo.replacen("read_mode", "max_records_per_call = 100\nread_mode", 1),
        "channel[0].source.max_records_per_call",
        "polling",
    );
}

#[test]
fn kafka_properties_floe_owns_are_refused() {
    for key in [
        "enable.auto.commit",
        "enable.auto.offset.store",
        "group.id",
        "bootstrap.servers",
        "auto.offset.reset",
        "enable.partition.eof",
        "metadata.broker.list",
        // Refused by the Kafka source when `floe run` starts: refused by validation too.
        "isolation.level",
        "group.instance.id",
        "statistics.interval.ms",
    ] {
        let text = props(&format!("\"{key}\" = \"x\""));
        refused(
            &text,
            &format!("channel[0].source.properties.\"{key}\""),
            "floe sets this property itself",
        );
    }
}

#[test]
fn kafka_properties_librdkafka_refuses_are_refused_with_their_key_path() {
    // `floe run` would stop creating the client (exit 78): `floe validate` says it first.
    refused(
        &props("\"fetch.wait.max.msec\" = \"50\""),
        "channel[0].source.properties.\"fetch.wait.max.msec\"",
        "librdkafka refuses it: No such configuration property",
    );
    refused(
        &props("\"fetch.wait.max.ms\" = \"soon\""),
        "channel[0].source.properties.\"fetch.wait.max.ms\"",
        "librdkafka refuses it",
    );
    let config = parse(&props("\"fetch.wait.max.ms\" = \"50\"")).unwrap();
    assert_eq!(kafka(&config).properties["fetch.wait.max.ms"].value(), "50");
}

#[test]
fn kafka_secrets_come_from_the_environment() {
    let text =
        props("\"security.protocol\" = \"SASL_SSL\"\n\"sasl.password\" = \"env:KAFKA_PASSWORD\"");
    let config = parse(&text).unwrap();
    let properties = &kafka(&config).properties;
    assert_eq!(
        properties["security.protocol"],
        PropertyValue::Literal("SASL_SSL".to_owned())
    );
    assert_eq!(properties["sasl.password"].value(), "hunter2");
    assert!(
        !format!("{config:?}").contains("hunter2"),
        "Debug must not show secrets"
    );

    refused(
        &props("\"sasl.password\" = \"env:MISSING_VAR\""),
        "channel[0].source.properties.\"sasl.password\"",
        "environment variable MISSING_VAR is not set",
    );
    refused(
        &props("\"sasl.password\" = \"hunter2\""),
        "channel[0].source.properties.\"sasl.password\"",
        "secrets must not be written in the file",
    );
    refused(
        &props("\"ssl.key.password\" = \"env:1BAD\""),
        "channel[0].source.properties.\"ssl.key.password\"",
        "not a valid environment variable name",
    );
}

#[test]
fn kafka_endpoints_and_topic_are_checked() {
    refused(
        &replaced("localhost:9092", "localhost"),
        "channel[0].source.bootstrap_servers",
        "\"localhost\" is not host:port",
    );
    refused(
        &replaced("localhost:9092", "a:9092,,b:9092"),
        "channel[0].source.bootstrap_servers",
        "is not host:port",
    );
    refused(
        &replaced("topic = \"events\"", "topic = \"bad topic\""),
        "channel[0].source.topic",
        "not a valid Kafka topic name",
    );
    refused(
        &replaced(
            "kind = \"kafka\"",
            "kind = \"kafka\"\ninitial_position = \"latest\"",
        ),
        "channel[0].source.initial_position",
        "unknown variant `latest`",
    );
    refused(
        &replaced(
            "kind = \"kafka\"",
            "kind = \"kafka\"\non_position_lost = \"reset\"",
        ),
        "channel[0].source.on_position_lost",
        "unknown variant `reset`, expected `fail` or `skip`",
    );
    let skip = parse(&replaced(
        "kind = \"kafka\"",
        "kind = \"kafka\"\non_position_lost = \"skip\"",
    ))
    .unwrap();
    assert_eq!(kafka(&skip).on_position_lost, OnPositionLost::Skip);
}

/// `MINIMAL` reading `source_lines` (TOML of `[channel.source]`) instead of `topic = "events"`.
fn topics_source(source_lines: &str) -> String {
    replaced("topic = \"events\"", source_lines)
}

#[test]
fn kafka_topics_and_topic_pattern_select_several_topics() {
    let list = parse(&topics_source("topics = [\"orders\", \"refunds\"]")).unwrap();
    let k = kafka(&list);
    assert_eq!(
        k.topics,
        TopicSelection::List(vec!["orders".into(), "refunds".into()])
    );
    assert_eq!(k.topic_refresh_interval, DEFAULT_TOPIC_REFRESH_INTERVAL);
    assert!(k.topics.selects("refunds") && !k.topics.selects("order"));
    assert_eq!(k.topics.single(), None);

    let pattern = parse(&topics_source(
        "topic_pattern = \"events\\\\..*\"\ntopic_refresh_interval = \"5s\"",
    ))
    .unwrap();
    let k = kafka(&pattern);
    assert_eq!(k.topic_refresh_interval, Duration::from_secs(5));
    // Whole names only.
    assert!(
        k.topics.selects("events.eu")
            && !k.topics.selects("events")
            && !k.topics.selects("x.events.eu")
    );
    // Kafka's internal topics never match a pattern.
    let all = parse(&topics_source("topic_pattern = \".*\"")).unwrap();
    assert!(kafka(&all).topics.selects("orders"));
    assert!(!kafka(&all).topics.selects("__consumer_offsets"));
}

#[test]
fn kafka_topics_and_topic_pattern_are_checked() {
    refused(
        &topics_source("topic = \"events\"\ntopics = [\"a\"]"),
        "channel[0].source.topic",
        "exclude each other",
    );
    refused(
        &topics_source("topics = [\"a\"]\ntopic_pattern = \"a.*\""),
        "channel[0].source.topic",
        "exclude each other",
    );
    refused(
        &topics_source(""),
        "channel[0].source.topic",
        "missing: give `topic`, `topics` or `topic_pattern`",
    );
    refused(
        &topics_source("topic_pattern = \"events(\""),
        "channel[0].source.topic_pattern",
        "not a regular expression",
    );
    refused(
        &topics_source("topic_pattern = \"\""),
        "channel[0].source.topic_pattern",
        "must not be empty",
    );
    refused(
        &topics_source("topics = [\"a\", \"b\", \"a\"]"),
        "channel[0].source.topics[2]",
        "\"a\" is listed twice",
    );
    refused(
        &topics_source("topics = [\"a\", \"b:1\"]"),
        "channel[0].source.topics[1]",
        "not a valid Kafka topic name",
    );
    refused(
        &topics_source("topics = []"),
        "channel[0].source.topics",
        "must list 1 to 1000 topics",
    );
    refused(
        &topics_source("topics = [\"a\"]\ntopic_refresh_interval = \"1s\""),
        "channel[0].source.topic_refresh_interval",
        "is below the minimum 5s",
    );
}
