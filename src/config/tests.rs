//! The configuration's own tests (parsing, defaults, member channels) and the test kit that the
//! tests of each validated section share: each section of [`super::validate`] has its tests
//! beside it, each rule pinned with the key path it reports.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::*;

pub(super) const MINIMAL: &str = r#"
[lease_store]
kind = "sqlite"
path = "state/leases.sqlite"

[[channel]]
name = "events"
[channel.source]
kind = "kafka"
bootstrap_servers = "localhost:9092"
topic = "events"
[channel.schema]
file = "event.schema.json"
[channel.destination]
kind = "iceberg"
namespace = "quickstart"
table = "events"
partition_field = "event_time"
[channel.destination.catalog]
kind = "sql"
uri = "sqlite:catalog.sqlite"
warehouse = "warehouse"
[channel.dlq]
kind = "local"
path = "dlq"
"#;

pub(super) fn env() -> ConfigEnv {
    ConfigEnv {
        hostname: "host1".to_owned(),
        pid: 42,
        vars: [("KAFKA_PASSWORD".to_owned(), "hunter2".to_owned())].into(),
    }
}

pub(super) fn parse(text: &str) -> Result<Config, ConfigErrors> {
    Config::from_toml_str_with_env(text, Path::new("/etc/floe"), &env())
}

/// `MINIMAL` with `line` inserted right after the `[header]` line (the first one if repeated).
pub(super) fn with(header: &str, line: &str) -> String {
    let header_line = format!("{header}\n");
    let at = MINIMAL.find(&header_line).expect("header in MINIMAL") + header_line.len();
    format!("{}{line}\n{}", &MINIMAL[..at], &MINIMAL[at..])
}

/// `MINIMAL` with `from` replaced by `to`.
pub(super) fn replaced(from: &str, to: &str) -> String {
    assert!(MINIMAL.contains(from), "{from}");
    MINIMAL.replacen(from, to, 1)
}

/// `MINIMAL` with `[channel.source.properties]` holding `lines`.
pub(super) fn props(lines: &str) -> String {
    replaced(
        "[channel.schema]",
        &format!("[channel.source.properties]\n{lines}\n[channel.schema]"),
    )
}

pub(super) fn errors(text: &str) -> Vec<ConfigError> {
    parse(text).expect_err("config should be refused").0
}

/// Asserts exactly one problem, at `path`, whose message contains `needle`.
#[track_caller]
pub(super) fn refused(text: &str, path: &str, needle: &str) {
    let errors = errors(text);
    assert_eq!(errors.len(), 1, "{errors:#?}");
    assert_eq!(errors[0].path, path, "{errors:#?}");
    assert!(errors[0].message.contains(needle), "{errors:#?}");
}

pub(super) fn iceberg(config: &Config) -> &IcebergDestinationConfig {
    let DestinationConfig::Iceberg(d) = &config.channels[0].destination else {
        panic!("an Iceberg destination")
    };
    d
}

pub(super) fn kafka(config: &Config) -> &KafkaSourceConfig {
    let SourceConfig::Kafka(k) = &config.channels[0].source else {
        panic!("kafka source expected")
    };
    k
}

#[test]
fn minimal_config_takes_every_default() {
    let config = parse(MINIMAL).unwrap();
    assert_eq!(config.worker.id, "host1-42");
    assert_eq!(
        config.worker.metrics_address,
        Some("127.0.0.1:9464".parse().unwrap())
    );
    assert_eq!(config.worker.shutdown_timeout, DEFAULT_SHUTDOWN_TIMEOUT);
    assert_eq!(
        config.lease_store,
        LeaseStoreConfig {
            backend: LeaseStoreBackend::Sqlite {
                path: PathBuf::from("/etc/floe/state/leases.sqlite")
            },
            lease_duration: Duration::from_secs(10),
            renew_interval: Duration::from_secs(10) / 3,
            max_leases_to_steal: 1,
        }
    );
    let channel = &config.channels[0];
    assert_eq!(channel.name, "events");
    assert_eq!(
        kafka(&config).initial_position,
        InitialPosition::ActivationTime
    );
    assert!(kafka(&config).properties.is_empty());
    assert_eq!(kafka(&config).on_position_lost, OnPositionLost::Fail);
    assert_eq!(
        channel.record,
        RecordConfig {
            format: RecordFormat::Json,
            max_record_size: 10 * 1024 * 1024,
            envelope: crate::config::Envelope::None,
        }
    );
    assert_eq!(
        channel.schema,
        Some(SchemaConfig::File("/etc/floe/event.schema.json".into()))
    );
    assert_eq!(
        *iceberg(&config),
        IcebergDestinationConfig {
            catalog: CatalogConfig::Sql(SqlCatalogConfig {
                name: "floe".to_owned(),
                database: CatalogDatabase::Sqlite("/etc/floe/catalog.sqlite".into()),
                warehouse: Warehouse::Local("/etc/floe/warehouse".into()),
                kms_key_arn: None,
                expected_bucket_owner: None,
            }),
            namespace: "quickstart".to_owned(),
            table: "events".to_owned(),
            max_tables: DEFAULT_MAX_TABLES,
            route: None,
            partition_field: "event_time".to_owned(),
            partition: vec![crate::schema::partition::PartitionTerm::hour("event_time")],
            sort: Vec::new(),
            compression: Compression::Zstd { level: 3 },
            data_freshness: Duration::from_secs(300),
            target_file_size: 128 * 1024 * 1024,
            buffer_size: 256 * 1024 * 1024,
            max_open_partitions: 48,
            maintenance: crate::config::MaintenanceConfig::default(),
            mode: crate::config::WriteMode::Append,
            key: Vec::new(),
            format_version: crate::config::TableFormatVersion::V2,
        }
    );
    assert_eq!(
        channel.dlq,
        Some(DlqConfig {
            location: DlqLocation::Local("/etc/floe/dlq".into()),
            include_payload: false
        })
    );
}

#[test]
fn absolute_paths_are_kept_and_plain_catalog_paths_accepted() {
    let text = replaced(
        "uri = \"sqlite:catalog.sqlite\"",
        "uri = \"/data/catalog.db\"",
    );
    let config = parse(&text).unwrap();
    let CatalogConfig::Sql(sql) = &iceberg(&config).catalog else {
        panic!("an sql catalog")
    };
    assert_eq!(
        sql.database,
        CatalogDatabase::Sqlite(PathBuf::from("/data/catalog.db"))
    );
    assert_eq!(sql.database.url(), "sqlite:/data/catalog.db?mode=rwc");
}

#[test]
fn toml_syntax_error_is_one_error_with_its_line() {
    let errors = errors("[worker\nid = 1");
    assert_eq!(errors.len(), 1);
    assert_eq!(errors[0].path, "line 1, column 8");
}

#[test]
fn toml_syntax_error_in_a_file_names_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("floe.toml");
    std::fs::write(&path, "[worker\nid = 1").unwrap();
    let errors = Config::load(&path).unwrap_err().0;
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert_eq!(
        errors[0].to_string(),
        format!(
            "{}, line 1, column 8: {}",
            path.display(),
            errors[0].message
        )
    );
    assert!(
        errors[0].message.contains("invalid table header"),
        "{errors:?}"
    );
}

#[test]
fn unknown_keys_are_refused_with_their_section_path() {
    refused(
        &with("[channel.destination]", "compresion = \"zstd\""),
        "channel[0].destination",
        "unknown field `compresion`",
    );
    refused(
        &with("[channel.source]", "group_id = \"x\""),
        "channel[0].source",
        "unknown field `group_id`",
    );
    refused(
        &with("[channel.destination.catalog]", "token = \"x\""),
        "channel[0].destination.catalog",
        "unknown field `token`",
    );
    refused(
        &format!("[metrics]\nport = 1\n{MINIMAL}"),
        "line 1, column 2",
        "unknown field `metrics`",
    );
}

#[test]
fn problems_in_separate_sections_are_all_reported() {
    let text = with("[channel.destination]", "compresion = \"zstd\"")
        .replace(
            "path = \"state/leases.sqlite\"",
            "path = \"state/leases.sqlite\"\nlease_duration = \"0s\"",
        )
        .replace("kind = \"local\"", "kind = \"local\"\nextra = 1");
    let paths: Vec<String> = errors(&text).into_iter().map(|e| e.path).collect();
    assert_eq!(
        paths,
        [
            "lease_store.lease_duration",
            "channel[0].destination",
            "channel[0].dlq"
        ]
    );
}

#[test]
fn wrong_value_types_name_the_key() {
    refused(
        &with("[channel.destination]", "data_freshness = 300"),
        "channel[0].destination.data_freshness",
        "a duration string",
    );
    refused(
        &with("[channel.destination]", "max_open_partitions = -1"),
        "channel[0].destination.max_open_partitions",
        "-1 is below the minimum 1",
    );
    refused(
        &props("\"fetch.max.bytes\" = 5"),
        "channel[0].source.properties.\"fetch.max.bytes\"",
        "expected a string (client properties are strings: write \"5\")",
    );
}

#[test]
fn missing_required_keys_are_refused() {
    refused(
        &replaced("topic = \"events\"\n", ""),
        "channel[0].source.topic",
        "missing: give `topic`, `topics` or `topic_pattern`",
    );
    refused(
        &replaced("kind = \"kafka\"\n", ""),
        "channel[0].source",
        "missing field `kind`",
    );
    refused(
        &replaced("[channel.schema]\nfile = \"event.schema.json\"\n", ""),
        "channel[0].schema",
        "missing [channel.schema]",
    );
    refused(
        &MINIMAL[..MINIMAL.find("[[channel]]").unwrap()],
        "channel",
        "at least one",
    );
}

#[test]
fn unknown_kinds_are_refused_naming_the_choices() {
    refused(
        &replaced("kind = \"kafka\"", "kind = \"pulsar\""),
        "channel[0].source.kind",
        "expected `kafka` or `kinesis`",
    );
}

/// `MINIMAL` on AWS: DynamoDB lease store, Kinesis source, S3 DLQ and warehouse, emulator endpoints.
pub(super) fn aws_config() -> String {
    let text = replaced(
        "kind = \"sqlite\"\npath = \"state/leases.sqlite\"",
        "kind = \"dynamodb\"\ntable = \"floe-leases\"\ncreate_lease_table = false\nlease_duration = \"20s\"",
    );
    let text = text.replacen(
        "kind = \"kafka\"\nbootstrap_servers = \"localhost:9092\"\ntopic = \"events\"",
        "kind = \"kinesis\"\nstream_name = \"events\"\ninitial_position = \"trim_horizon\"\npoll_interval = \"500ms\"",
        1,
    );
    let text = text.replacen(
        "warehouse = \"warehouse\"",
        "warehouse = \"s3://warehouse-bucket/floe/\"",
        1,
    );
    let text = text.replacen(
        "kind = \"local\"\npath = \"dlq\"",
        "kind = \"s3\"\nbucket = \"dlq-bucket\"\nprefix = \"dlq/\"\nexpected_bucket_owner = \"123456789012\"\nkms_key_arn = \"arn:aws:kms:us-east-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab\"",
        1,
    );
    format!("[aws]\nregion = \"us-east-1\"\nendpoint_url = \"http://127.0.0.1:5056\"\n[aws.endpoints]\nkinesis = \"http://127.0.0.1:4567\"\n{text}")
}

/// A self-signed CA certificate (`openssl req -x509 -newkey ec`, P-256, CA:TRUE).
pub(super) const TEST_CA_PEM: &str = "-----BEGIN CERTIFICATE-----
MIIBkjCCATigAwIBAgIUFxjgiP3VNdAR17kqGLFFoTUi3J4wCgYIKoZIzj0EAwIw
FzEVMBMGA1UEAwwMZmxvZSB0ZXN0IENBMCAXDTI2MTIwMzExNTAxNFoYDzIxMjYx
MTA5MTE1MDE0WjAXMRUwEwYDVQQDDAxmbG9lIHRlc3QgQ0EwWTATBgcqhkjOPQIB
BggqhkjOPQMBBwNCAARBYggQV6xhHMv+Mz8l2QOHlEiUUo5o9Tr3i5E0+3/5fHVZ
pKS+k4wicCM3Yp2QCK01zCNLA8BK0maW+DBL/4XAo2AwXjAdBgNVHQ4EFgQULwSZ
BowkS7CNh1w/Knj8V2wYtBMwHwYDVR0jBBgwFoAULwSZBowkS7CNh1w/Knj8V2wY
tBMwDwYDVR0TAQH/BAUwAwEB/zALBgNVHQ8EBAMCAgQwCgYIKoZIzj0EAwIDSAAw
RQIhALmDImAPsz1IYuzoOMixJbtj++CruAfFzpZVhw7RxO92AiA53R8WSSJhWxuo
AOaeCTmIcKHfzuhtVpB94m6P9Y4Oiw==
-----END CERTIFICATE-----
";

pub(super) const V1: &str = "3f36e6d8-d20e-43b7-90ea-3ad724880d60";

pub(super) fn schema(lines: &str) -> String {
    replaced("file = \"event.schema.json\"", lines)
}

pub(super) const SQL_CATALOG: &str =
    "kind = \"sql\"\nuri = \"sqlite:catalog.sqlite\"\nwarehouse = \"warehouse\"";

pub(super) const BUCKET_ARN: &str = "arn:aws:s3tables:us-east-1:123456789012:bucket/floe-tables";

/// `MINIMAL`'s channel with a raw S3 destination (no schema, no DLQ) and `extra` destination keys.
pub(super) fn raw(extra: &str) -> String {
    let head = &MINIMAL[..MINIMAL.find("[channel.schema]").unwrap()];
    format!("{head}[channel.destination]\nkind = \"s3\"\nbucket = \"raw-bucket\"\n{extra}\n")
}

pub(super) fn env_with(var: &str, value: &str) -> ConfigEnv {
    let mut env = env();
    env.vars.insert(var.to_owned(), value.to_owned());
    env
}

/// `MINIMAL` with `record.format = format` and `[channel.schema]` holding `lines`.
pub(super) fn confluent(format: &str, lines: &str) -> String {
    schema(lines).replacen(
        "[channel.schema]",
        &format!("[channel.record]\nformat = \"{format}\"\n[channel.schema]"),
        1,
    )
}

pub(super) fn confluent_of(config: &Config) -> &ConfluentSchemaConfig {
    let Some(SchemaConfig::Confluent(c)) = &config.channels[0].schema else {
        panic!("a Confluent schema: {:?}", config.channels[0].schema)
    };
    c
}

#[test]
fn a_table_per_topic_runs_a_member_channel_per_topic() {
    let c = parse(&replaced(
        "table = \"events\"",
        "table = \"{topic}\"\nmax_tables = 20",
    ))
    .unwrap();
    let channel = &c.channels[0];
    assert!(channel.is_table_per_topic());
    assert_eq!(iceberg(&c).max_tables, 20);
    let m = channel.member("Orders.EU-1");
    assert_eq!(m.name, "events.Orders.EU-1");
    assert_eq!(m.destination.iceberg().unwrap().table, "orders_eu_1");
    let SourceConfig::Kafka(k) = &m.source else {
        panic!("kafka")
    };
    assert_eq!(k.topics, TopicSelection::One("Orders.EU-1".into()));
    assert!(!m.is_table_per_topic());
    assert_eq!(
        m.route_parent(),
        None,
        "a member per topic is not co-located"
    );
    // A channel with one named table has no members: it is its own.
    let plain = parse(MINIMAL).unwrap();
    assert_eq!(plain.channels[0].member("x"), plain.channels[0]);
    assert_eq!(iceberg(&plain).max_tables, DEFAULT_MAX_TABLES);
}

#[test]
fn a_table_per_topic_with_a_registry_takes_each_topics_subject() {
    let text = confluent("avro", "registry_url = \"http://r:8081\"")
        .replacen("table = \"events\"", "table = \"{topic}\"", 1)
        .replacen("topic = \"events\"", "topic_pattern = \"ev\\\\..*\"", 1);
    let c = parse(&text).unwrap();
    assert_eq!(confluent_of(&c).subject, "{topic}-value");
    let m = c.channels[0].member("ev.orders");
    let Some(SchemaConfig::Confluent(s)) = &m.schema else {
        panic!("confluent")
    };
    assert_eq!(s.subject, "ev.orders-value");
    // Several topics into one table: the subject must be named.
    let text = confluent("avro", "registry_url = \"http://r:8081\"").replacen(
        "topic = \"events\"",
        "topics = [\"a\", \"b\"]",
        1,
    );
    refused(
        &text,
        "channel[0].schema.subject",
        "several topics into one table",
    );
}

// ---- table = "{route}": fan-out by a field (docs/routing.md, "Fan-out by a field") ----

/// `MINIMAL` with `table = "{route}"` and `lines` in `[channel.destination]`.
pub(super) fn routed(lines: &str) -> String {
    replaced(
        "table = \"events\"",
        &format!("table = \"{{route}}\"\n{lines}"),
    )
}

pub(super) const ROUTES: &str = "route_field = \"region\"\nroutes = { eu = \"events_eu\", us = \"events_us\", ap = \"events_ap\", \"7\" = \"events_us\" }";

#[test]
fn a_routed_channel_has_a_member_per_table_and_the_first_table_writes_the_unroutable() {
    let config = parse(&routed(ROUTES)).unwrap();
    let channel = &config.channels[0];
    assert!(channel.is_routed());
    let route = iceberg(&config).route.clone().unwrap();
    assert_eq!(route.field, "region");
    assert_eq!(route.unroutable, Unroutable::Dlq);
    let tables: Vec<&str> = route.tables().into_iter().collect();
    assert_eq!(tables, ["events_ap", "events_eu", "events_us"]);
    assert_eq!(route.dlq_table(), Some("events_ap"));
    assert_eq!(route.table_of(Some("7")), Some("events_us"));
    assert_eq!(route.table_of(Some("mars")), None);
    let member = channel.route_member("events_eu");
    assert_eq!(member.name, "events.events_eu");
    assert_eq!(member.destination.iceberg().unwrap().table, "events_eu");
    assert_eq!(member.member_route().map(|(_, t)| t), Some("events_eu"));
    assert!(!member.is_routed(), "a member is not routed again");
    assert_eq!(member.route_parent(), Some("events"));
    assert_eq!(
        channel.member_route(),
        None,
        "the routed channel itself is no member"
    );
    assert_eq!(channel.route_parent(), None);

    // A default table: one of the routes' or another, a member too.
    let config = parse(&routed(&format!("{ROUTES}\nunroutable = \"events_other\""))).unwrap();
    let route = iceberg(&config).route.clone().unwrap();
    assert_eq!(route.tables().len(), 4);
    assert_eq!(route.table_of(Some("mars")), Some("events_other"));
    assert_eq!(route.table_of(None), Some("events_other"));
    assert_eq!(route.dlq_table(), None);
    let config = parse(&routed(&format!("{ROUTES}\nunroutable = \"events_eu\""))).unwrap();
    assert_eq!(iceberg(&config).route.as_ref().unwrap().tables().len(), 3);

    // Not routed: no route, members are the channel itself.
    let plain = parse(MINIMAL).unwrap();
    assert_eq!(iceberg(&plain).route, None);
    assert_eq!(plain.channels[0].route_member("x"), plain.channels[0]);
    assert_eq!(plain.channels[0].route_parent(), None);
}
