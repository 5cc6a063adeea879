//! Rules of the configuration, each pinned with the key path it reports.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::*;

const MINIMAL: &str = r#"
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

fn env() -> ConfigEnv {
    ConfigEnv {
        hostname: "host1".to_owned(),
        pid: 42,
        vars: [("KAFKA_PASSWORD".to_owned(), "hunter2".to_owned())].into(),
    }
}

fn parse(text: &str) -> Result<Config, ConfigErrors> {
    Config::from_toml_str_with_env(text, Path::new("/etc/floe"), &env())
}

/// `MINIMAL` with `line` inserted right after the `[header]` line (the first one if repeated).
fn with(header: &str, line: &str) -> String {
    let header_line = format!("{header}\n");
    let at = MINIMAL.find(&header_line).expect("header in MINIMAL") + header_line.len();
    format!("{}{line}\n{}", &MINIMAL[..at], &MINIMAL[at..])
}

/// `MINIMAL` with `from` replaced by `to`.
fn replaced(from: &str, to: &str) -> String {
    assert!(MINIMAL.contains(from), "{from}");
    MINIMAL.replacen(from, to, 1)
}

/// `MINIMAL` with `[channel.source.properties]` holding `lines`.
fn props(lines: &str) -> String {
    replaced(
        "[channel.schema]",
        &format!("[channel.source.properties]\n{lines}\n[channel.schema]"),
    )
}

fn errors(text: &str) -> Vec<ConfigError> {
    parse(text).expect_err("config should be refused").0
}

/// Asserts exactly one problem, at `path`, whose message contains `needle`.
#[track_caller]
fn refused(text: &str, path: &str, needle: &str) {
    let errors = errors(text);
    assert_eq!(errors.len(), 1, "{errors:#?}");
    assert_eq!(errors[0].path, path, "{errors:#?}");
    assert!(errors[0].message.contains(needle), "{errors:#?}");
}

fn iceberg(config: &Config) -> &IcebergDestinationConfig {
    let DestinationConfig::Iceberg(d) = &config.channels[0].destination else {
        panic!("an Iceberg destination")
    };
    d
}

fn kafka(config: &Config) -> &KafkaSourceConfig {
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
            max_record_size: 10 * 1024 * 1024
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
fn renew_interval_defaults_to_a_third_of_the_lease_duration() {
    let config = parse(&with("[lease_store]", "lease_duration = \"30s\"")).unwrap();
    assert_eq!(config.lease_store.renew_interval, Duration::from_secs(10));
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
fn aws_config() -> String {
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

#[test]
fn aws_components_validate_into_typed_config() {
    let config = parse(&aws_config()).unwrap();
    assert_eq!(config.aws.region.as_deref(), Some("us-east-1"));
    assert_eq!(
        config.aws.endpoint(crate::config::aws::AwsService::Kinesis),
        Some("http://127.0.0.1:4567")
    );
    assert_eq!(
        config
            .aws
            .endpoint(crate::config::aws::AwsService::Dynamodb),
        Some("http://127.0.0.1:5056")
    );
    assert_eq!(
        config.lease_store.backend,
        LeaseStoreBackend::Dynamodb {
            table: "floe-leases".into(),
            create_lease_table: false
        }
    );
    assert_eq!(config.lease_store.lease_duration, Duration::from_secs(20));
    let SourceConfig::Kinesis(k) = &config.channels[0].source else {
        panic!("kinesis source expected")
    };
    assert_eq!(k.stream, KinesisStream::Name("events".into()));
    assert_eq!(k.initial_position, InitialPosition::Earliest);
    assert_eq!(k.poll_interval, Duration::from_millis(500));
    assert_eq!(k.max_records_per_call, 10_000);
    let CatalogConfig::Sql(sql) = &iceberg(&config).catalog else {
        panic!("an sql catalog")
    };
    assert_eq!(
        sql.warehouse,
        Warehouse::S3("s3://warehouse-bucket/floe".into())
    );
    let DlqLocation::S3(dlq) = &config.channels[0].dlq.as_ref().unwrap().location else {
        panic!("s3 dlq expected")
    };
    assert_eq!(
        (dlq.bucket.as_str(), dlq.prefix.as_str()),
        ("dlq-bucket", "dlq/")
    );
    assert_eq!(dlq.expected_bucket_owner.as_deref(), Some("123456789012"));
}

#[test]
fn aws_settings_are_refused_naming_the_field() {
    let base = aws_config();
    let cases = [
        ("region = \"us-east-1\"", "region = \"US East\"", "aws.region", "not an AWS region"),
        ("endpoint_url = \"http://127.0.0.1:5056\"", "endpoint_url = \"127.0.0.1:5056\"", "aws.endpoint_url", "not an endpoint URL"),
        ("kinesis = \"http://127.0.0.1:4567\"", "kinesis = \"ftp://x\"", "aws.endpoints.kinesis", "not an endpoint URL"),
        ("table = \"floe-leases\"", "table = \"f\"", "lease_store.table", "not a DynamoDB table name"),
        ("stream_name = \"events\"", "stream_name = \"ev ents\"", "channel[0].source.stream_name", "not a Kinesis stream name"),
        ("stream_name = \"events\"", "stream_arn = \"arn:aws:kinesis:us-east-1:1234:stream/x\"", "channel[0].source.stream_arn", "not a Kinesis stream ARN"),
        ("stream_name = \"events\"", "stream_name = \"a\"\nstream_arn = \"arn:aws:kinesis:us-east-1:123456789012:stream/a\"", "channel[0].source", "not both"),
        ("poll_interval = \"500ms\"", "poll_interval = \"100ms\"", "channel[0].source.poll_interval", ""),
        ("bucket = \"dlq-bucket\"", "bucket = \"DLQ_Bucket\"", "channel[0].dlq.bucket", "not an S3 bucket name"),
        ("expected_bucket_owner = \"123456789012\"", "expected_bucket_owner = \"me\"", "channel[0].dlq.expected_bucket_owner", "12-digit"),
        ("kms_key_arn = \"arn:aws:kms:us-east-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab\"", "kms_key_arn = \"alias/aws/s3\"", "channel[0].dlq.kms_key_arn", "alias"),
        ("warehouse = \"s3://warehouse-bucket/floe/\"", "warehouse = \"s3://\"", "channel[0].destination.catalog.warehouse", "not an S3 location"),
    ];
    for (from, to, path, needle) in cases {
        assert!(base.contains(from), "{from}");
        refused(&base.replacen(from, to, 1), path, needle);
    }
    refused(
        &base.replacen("kinesis = ", "sqs = ", 1),
        "aws.endpoints",
        "unknown variant",
    );
}

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
fn aws_ca_bundle_must_be_a_readable_pem_file() {
    let dir = tempfile::tempdir().unwrap();
    let pem = dir.path().join("ca.pem");
    std::fs::write(&pem, TEST_CA_PEM).unwrap();
    let with = |path: &str| {
        aws_config().replacen(
            "region = \"us-east-1\"",
            &format!("region = \"us-east-1\"\nca_bundle = \"{path}\""),
            1,
        )
    };
    let config = parse(&with(&pem.display().to_string())).unwrap();
    assert_eq!(config.aws.ca_bundle.as_deref(), Some(pem.as_path()));
    refused(&with("/nonexistent/ca.pem"), "aws.ca_bundle", "cannot read");
    let empty = dir.path().join("empty.pem");
    std::fs::write(&empty, "not a certificate").unwrap();
    refused(
        &with(&empty.display().to_string()),
        "aws.ca_bundle",
        "no PEM certificate",
    );
    // PEM armour around bytes that are not a certificate (the SDK's client would panic on it).
    let bad = dir.path().join("bad.pem");
    std::fs::write(
        &bad,
        "-----BEGIN CERTIFICATE-----\nZm9vYmFy\n-----END CERTIFICATE-----\n",
    )
    .unwrap();
    refused(
        &with(&bad.display().to_string()),
        "aws.ca_bundle",
        "certificate 1 is not",
    );
}

/// A self-signed CA certificate (`openssl req -x509 -newkey ec`, P-256, CA:TRUE).
const TEST_CA_PEM: &str = "-----BEGIN CERTIFICATE-----
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

#[test]
fn data_freshness_is_bounded() {
    refused(
        &with("[channel.destination]", "data_freshness = \"5s\""),
        "channel[0].destination.data_freshness",
        "5s is below the minimum 10s",
    );
    refused(
        &with("[channel.destination]", "data_freshness = \"901s\""),
        "channel[0].destination.data_freshness",
        "901s is above the maximum 15m",
    );
    let config = parse(&with("[channel.destination]", "data_freshness = \"15m\"")).unwrap();
    assert_eq!(iceberg(&config).data_freshness, Duration::from_secs(900));
}

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
fn sizes_are_bounded() {
    refused(
        &with("[channel.destination]", "target_file_size = \"512KiB\""),
        "channel[0].destination.target_file_size",
        "512KiB is below the minimum 1MiB",
    );
    let record = |size: &str| {
        replaced(
            "[channel.schema]",
            &format!("[channel.record]\nmax_record_size = \"{size}\"\n[channel.schema]"),
        )
    };
    refused(
        &record("65MiB"),
        "channel[0].record.max_record_size",
        "65MiB is above the maximum 64MiB",
    );
    let config = parse(&record("64MiB").replace(
        "partition_field",
        "buffer_size = \"64MiB\"\npartition_field",
    ))
    .unwrap();
    assert_eq!(config.channels[0].record.max_record_size, 64 << 20);
}

#[test]
fn buffer_must_hold_the_largest_record() {
    let text = replaced(
        "[channel.schema]",
        "[channel.record]\nmax_record_size = \"10MiB\"\n[channel.schema]",
    )
    .replace("partition_field", "buffer_size = \"8MiB\"\npartition_field");
    refused(
        &text,
        "channel[0].destination.buffer_size",
        "8MiB is smaller than record.max_record_size (10MiB)",
    );
}

#[test]
fn compression_level_applies_to_zstd_only_and_is_bounded() {
    refused(
        &with("[channel.destination]", "compression_level = 23"),
        "channel[0].destination.compression_level",
        "23 is above the maximum 22",
    );
    refused(
        &with("[channel.destination]", "compression_level = 0"),
        "channel[0].destination.compression_level",
        "0 is below the minimum 1",
    );
    refused(
        &with(
            "[channel.destination]",
            "compression = \"snappy\"\ncompression_level = 3",
        ),
        "channel[0].destination.compression_level",
        "applies only to compression = \"zstd\"",
    );
    let config = parse(&with("[channel.destination]", "compression = \"none\"")).unwrap();
    assert_eq!(iceberg(&config).compression, Compression::Uncompressed);
    assert_eq!(
        iceberg(&config).compression.iceberg_codec_name(),
        "uncompressed"
    );
    refused(
        &with("[channel.destination]", "compression = \"gzip\""),
        "channel[0].destination.compression",
        "unknown variant `gzip`",
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

#[test]
fn max_open_partitions_is_bounded() {
    refused(
        &with("[channel.destination]", "max_open_partitions = 0"),
        "channel[0].destination.max_open_partitions",
        "below the minimum 1",
    );
}

#[test]
fn namespace_and_table_must_be_lowercase() {
    refused(
        &replaced("namespace = \"quickstart\"", "namespace = \"QuickStart\""),
        "channel[0].destination.namespace",
        "a-z 0-9 _",
    );
    refused(
        &replaced("table = \"events\"", "table = \"my-events\""),
        "channel[0].destination.table",
        "a-z 0-9 _",
    );
    refused(
        &replaced("table = \"events\"", "table = \"\""),
        "channel[0].destination.table",
        "not a valid name",
    );
}

#[test]
fn channel_names_are_checked_and_unique() {
    refused(
        &replaced("name = \"events\"", "name = \"Events\""),
        "channel[0].name",
        "a-z 0-9 _ -",
    );
    let channel = &MINIMAL[MINIMAL.find("[[channel]]").unwrap()..];
    let second = channel.replace("table = \"events\"", "table = \"events_copy\"");
    refused(
        &format!("{MINIMAL}{second}"),
        "channel[1].name",
        "duplicate channel name \"events\" (also channel[0])",
    );
}

#[test]
fn two_channels_writing_one_table_are_refused() {
    let channel = &MINIMAL[MINIMAL.find("[[channel]]").unwrap()..];
    let second = channel.replace("name = \"events\"", "name = \"events_b\"");
    refused(
        &format!("{MINIMAL}{second}"),
        "channel[1].destination.table",
        "table quickstart.events is already written by channel[0] \"events\"",
    );
    // The same table name in another catalog database is another table.
    let other_catalog = second.replace("sqlite:catalog.sqlite", "sqlite:other.sqlite");
    assert!(parse(&format!("{MINIMAL}{other_catalog}")).is_ok());
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

#[test]
fn catalog_uri_must_be_a_sqlite_file_or_a_postgresql_database() {
    refused(
        &replaced("sqlite:catalog.sqlite", "mysql://db/floe"),
        "channel[0].destination.catalog.uri",
        "an SQL catalog is an SQLite file",
    );
    refused(
        &replaced("sqlite:catalog.sqlite", "sqlite::memory:"),
        "channel[0].destination.catalog.uri",
        "in-memory",
    );
    refused(
        &replaced("sqlite:catalog.sqlite", "sqlite:c.db?mode=ro"),
        "channel[0].destination.catalog.uri",
        "query parameters",
    );
    refused(
        &replaced("path = \"dlq\"", "path = \"\""),
        "channel[0].dlq.path",
        "must not be empty",
    );
}

const SCHEMA_ARN: &str = "arn:aws:glue:us-east-1:123456789012:schema/reg/events";
const V1: &str = "3f36e6d8-d20e-43b7-90ea-3ad724880d60";

fn schema(lines: &str) -> String {
    replaced("file = \"event.schema.json\"", lines)
}

fn gsr(lines: &str) -> String {
    schema(lines).replacen(
        "[channel.schema]",
        "[channel.record]\nformat = \"gsr_json\"\n[channel.schema]",
        1,
    )
}

#[test]
fn schema_from_glue_by_arn_and_version() {
    let latest = parse(&schema(&format!("glue_schema_arn = \"{SCHEMA_ARN}\""))).unwrap();
    assert_eq!(
        latest.channels[0].schema,
        Some(SchemaConfig::Glue {
            schema_arn: SCHEMA_ARN.into(),
            version: GlueSchemaVersion::Latest,
            evolution: crate::config::SchemaEvolution::None,
            poll_interval: crate::config::DEFAULT_SCHEMA_POLL_INTERVAL,
        })
    );
    for (v, want) in [
        ("3", GlueSchemaVersion::Number(3)),
        ("\"latest\"", GlueSchemaVersion::Latest),
    ] {
        let c = parse(&gsr(&format!(
            "glue_schema_arn = \"{SCHEMA_ARN}\"\nversion = {v}"
        )))
        .unwrap();
        assert_eq!(c.channels[0].record.format, RecordFormat::GsrJson);
        assert!(
            matches!(c.channels[0].schema, Some(SchemaConfig::Glue { version, .. }) if version == want)
        );
    }
}

#[test]
fn schema_sources_are_checked_naming_the_key() {
    let arn = format!("glue_schema_arn = \"{SCHEMA_ARN}\"");
    refused(&schema(""), "channel[0].schema", "`file`");
    refused(
        &schema(&format!("file = \"a.json\"\n{arn}")),
        "channel[0].schema.glue_schema_arn",
        "not both",
    );
    refused(
        &schema("glue_schema_arn = \"arn:aws:glue:us-east-1:123456789012:registry/reg\""),
        "channel[0].schema.glue_schema_arn",
        "not a Glue schema ARN",
    );
    for bad in ["0", "\"newest\"", "-2", "1.0", "true"] {
        refused(
            &schema(&format!("{arn}\nversion = {bad}")),
            "channel[0].schema.version",
            "not a schema version",
        );
    }
    refused(
        &schema("file = \"a.json\"\nversion = 2"),
        "channel[0].schema.version",
        "glue_schema_arn",
    );
    refused(
        &schema(&format!("{arn}\nversions = {{ \"{V1}\" = \"a.json\" }}")),
        "channel[0].schema.versions",
        "schema `file`",
    );
    refused(
        &schema(&format!(
            "file = \"a.json\"\nversions = {{ \"{V1}\" = \"a.json\" }}"
        )),
        "channel[0].schema.versions",
        "gsr_json",
    );
    refused(
        &gsr("file = \"a.json\""),
        "channel[0].schema.versions",
        "[channel.schema.versions]",
    );
    refused(
        &gsr("file = \"a.json\"\nversions = { \"not-a-uuid\" = \"a.json\" }"),
        "channel[0].schema.versions.not-a-uuid",
        "not a schema version id",
    );
}

#[test]
fn gsr_json_runs_offline_with_listed_versions() {
    let c = parse(&gsr(&format!(
        "file = \"v1.json\"\n[channel.schema.versions]\n\"{V1}\" = \"v1.json\"\n\"1b4e28ba-2fa1-11d2-883f-0016d3cca427\" = \"v2.json\""
    )))
    .unwrap();
    let Some(SchemaConfig::FileVersions { file, versions }) = &c.channels[0].schema else {
        panic!("{:?}", c.channels[0].schema)
    };
    assert_eq!(file, &PathBuf::from("/etc/floe/v1.json"));
    assert_eq!(versions.len(), 2);
    assert_eq!(
        versions[&uuid::Uuid::parse_str(V1).unwrap()],
        PathBuf::from("/etc/floe/v1.json")
    );
}

/// `MINIMAL` with a REST catalog holding `lines`.
fn rest(lines: &str) -> String {
    replaced(
        "kind = \"sql\"\nuri = \"sqlite:catalog.sqlite\"\nwarehouse = \"warehouse\"",
        &format!("kind = \"rest\"\n{lines}"),
    )
}

fn rest_env() -> ConfigEnv {
    let mut env = env();
    env.vars.insert("REST_TOKEN".into(), "t0ken".into());
    env.vars
        .insert("REST_CREDENTIAL".into(), "floe:s3cret".into());
    env.vars.insert("REST_SECRET".into(), "s3cret".into());
    env
}

fn rest_catalog(lines: &str) -> Result<RestCatalogConfig, ConfigErrors> {
    let config = Config::from_toml_str_with_env(&rest(lines), Path::new("/etc/floe"), &rest_env())?;
    match &iceberg(&config).catalog {
        CatalogConfig::Rest(rest) => Ok(rest.clone()),
        other => panic!("a rest catalog expected, got {other:?}"),
    }
}

#[track_caller]
fn rest_refused(lines: &str, key: &str, needle: &str) {
    let errors = rest_catalog(lines).expect_err("refused").0;
    assert_eq!(errors.len(), 1, "{errors:#?}");
    let path = if key.is_empty() {
        "channel[0].destination.catalog".to_owned()
    } else {
        format!("channel[0].destination.catalog.{key}")
    };
    assert_eq!(errors[0].path, path, "{errors:#?}");
    assert!(errors[0].message.contains(needle), "{errors:#?}");
}

#[test]
fn rest_catalog_validates_into_typed_config_with_secrets_from_the_environment() {
    let c = rest_catalog("uri = \"https://polaris.example.com/api/catalog/\"").unwrap();
    assert_eq!(c.uri, "https://polaris.example.com/api/catalog");
    assert_eq!(c.auth, RestAuth::None);
    assert_eq!(c.warehouse, None);

    let c = rest_catalog(
        "uri = \"http://localhost:8181\"\nwarehouse = \"lake\"\ntoken = \"env:REST_TOKEN\"",
    )
    .unwrap();
    assert_eq!(c.warehouse.as_deref(), Some("lake"));
    let RestAuth::Token(token) = &c.auth else {
        panic!("token auth expected: {:?}", c.auth)
    };
    assert_eq!(token.value(), "t0ken");
    let shown = format!("{c:?}");
    assert!(
        !shown.contains("t0ken") && shown.contains("REST_TOKEN"),
        "{shown}"
    );

    let c = rest_catalog(
        "uri = \"http://localhost:8181\"\ncredential = \"env:REST_CREDENTIAL\"\noauth2_server_uri = \"https://idp.example.com/oauth/token\"\nscope = \"PRINCIPAL_ROLE:ALL\"",
    )
    .unwrap();
    assert!(
        matches!(&c.auth, RestAuth::OAuth2 { client_id: None, client_secret } if client_secret.value() == "floe:s3cret")
    );
    assert_eq!(
        c.oauth2_server_uri.as_deref(),
        Some("https://idp.example.com/oauth/token")
    );
    assert_eq!(c.scope.as_deref(), Some("PRINCIPAL_ROLE:ALL"));
    assert!(!format!("{c:?}").contains("s3cret"));

    let c = rest_catalog(
        "uri = \"http://localhost:8181\"\nclient_id = \"floe\"\nclient_secret = \"env:REST_SECRET\"",
    )
    .unwrap();
    assert!(
        matches!(&c.auth, RestAuth::OAuth2 { client_id: Some(id), client_secret } if id == "floe" && client_secret.value() == "s3cret")
    );
}

#[test]
fn sigv4_signing_name_and_region_default_from_aws_endpoint_hosts() {
    let sigv4 = |lines: &str| {
        rest_catalog(&format!("{lines}\nsigv4 = true"))
            .unwrap()
            .auth
    };
    let signing = |name: &str, region: Option<&str>| RestAuth::SigV4 {
        signing_name: name.into(),
        signing_region: region.map(str::to_owned),
    };
    assert_eq!(
        sigv4("uri = \"https://s3tables.eu-west-1.amazonaws.com/iceberg\""),
        signing("s3tables", Some("eu-west-1"))
    );
    assert_eq!(
        sigv4("uri = \"https://glue.us-east-2.amazonaws.com/iceberg/\""),
        signing("glue", Some("us-east-2"))
    );
    // API Gateway: execute-api, the region from the host.
    assert_eq!(
        sigv4("uri = \"https://abc123.execute-api.ap-south-1.amazonaws.com/prod\""),
        signing("execute-api", Some("ap-south-1"))
    );
    assert_eq!(
        sigv4("uri = \"https://glue-fips.us-gov-west-1.amazonaws.com/iceberg\""),
        signing("glue", Some("us-gov-west-1"))
    );
    assert_eq!(
        sigv4("uri = \"https://s3tables.cn-north-1.amazonaws.com.cn/iceberg\""),
        signing("s3tables", Some("cn-north-1"))
    );
    // A VPC endpoint (PrivateLink) host.
    assert_eq!(
        sigv4("uri = \"https://vpce-0ab12-xyz.glue.us-east-1.vpce.amazonaws.com/iceberg\""),
        signing("glue", Some("us-east-1"))
    );
    // Another host: execute-api, the [aws] region when the catalog opens.
    assert_eq!(
        sigv4("uri = \"https://catalog.example.com:8443/iceberg\""),
        signing("execute-api", None)
    );
    // Given values win.
    assert_eq!(
        sigv4("uri = \"https://s3tables.eu-west-1.amazonaws.com/iceberg\"\nsigning_name = \"glue\"\nsigning_region = \"us-west-2\""),
        signing("glue", Some("us-west-2"))
    );
}

#[test]
fn rest_catalog_settings_are_refused_naming_the_key() {
    let uri = "uri = \"http://localhost:8181\"";
    rest_refused("uri = \"localhost:8181\"", "uri", "not an http(s) URI");
    rest_refused("uri = \"ftp://catalog\"", "uri", "not an http(s) URI");
    rest_refused("uri = \"http://\"", "uri", "not an http(s) URI");
    rest_refused("uri = \"http://h/api?x=1\"", "uri", "no query");
    rest_refused("uri = \"http://user:pw@h\"", "uri", "no user info");
    rest_refused("warehouse = \"w\"", "", "missing field `uri`");
    rest_refused(
        &format!("{uri}\nwarehouse = \" \""),
        "warehouse",
        "must not be empty",
    );
    rest_refused(
        &format!("{uri}\ntoken = \"t0ken\""),
        "token",
        "secrets must not be written in the file",
    );
    rest_refused(
        &format!("{uri}\ncredential = \"floe:s3cret\""),
        "credential",
        "secrets must not be written in the file",
    );
    rest_refused(
        &format!("{uri}\nclient_id = \"floe\"\nclient_secret = \"s3cret\""),
        "client_secret",
        "secrets must not be written in the file",
    );
    rest_refused(
        &format!("{uri}\ntoken = \"env:UNSET_VAR\""),
        "token",
        "environment variable UNSET_VAR is not set",
    );
    rest_refused(
        &format!("{uri}\ntoken = \"env:REST_TOKEN\"\ncredential = \"env:REST_CREDENTIAL\""),
        "",
        "not token and credential",
    );
    rest_refused(
        &format!("{uri}\ntoken = \"env:REST_TOKEN\"\nclient_id = \"floe\"\nclient_secret = \"env:REST_SECRET\""),
        "",
        "give one way to authenticate",
    );
    rest_refused(
        &format!("{uri}\nclient_id = \"floe\""),
        "client_secret",
        "`client_id` needs `client_secret`",
    );
    rest_refused(
        &format!("{uri}\nclient_secret = \"env:REST_SECRET\""),
        "client_id",
        "`client_secret` needs `client_id`",
    );
    rest_refused(
        &format!("{uri}\nclient_id = \"a:b\"\nclient_secret = \"env:REST_SECRET\""),
        "client_id",
        "without `:`",
    );
    rest_refused(
        &format!("{uri}\ntoken = \"env:REST_TOKEN\"\nscope = \"catalog\""),
        "scope",
        "applies only to OAuth2",
    );
    rest_refused(
        &format!("{uri}\ncredential = \"env:REST_CREDENTIAL\"\noauth2_server_uri = \"idp/token\""),
        "oauth2_server_uri",
        "not an http(s) URI",
    );
    rest_refused(
        &format!("{uri}\nsigv4 = true\ntoken = \"env:REST_TOKEN\""),
        "",
        "not token and sigv4",
    );
    rest_refused(
        &format!("{uri}\nsigv4 = true\nsigning_name = \"s3 tables\""),
        "signing_name",
        "not an AWS service name",
    );
    rest_refused(
        &format!("{uri}\nsigv4 = true\nsigning_region = \"\""),
        "signing_region",
        "not an AWS service name or region",
    );
    rest_refused(
        &format!("{uri}\nsigv4 = true\nscope = \"catalog\""),
        "scope",
        "applies only to OAuth2",
    );
    rest_refused(
        &format!("{uri}\nsigning_name = \"glue\""),
        "signing_name",
        "only with sigv4 = true",
    );
    rest_refused(
        &format!("{uri}\nsigv4 = false\nsigning_region = \"us-east-1\""),
        "signing_region",
        "only with sigv4 = true",
    );
    rest_refused(
        &format!("{uri}\nkms_key_arn = \"alias/mine\""),
        "kms_key_arn",
        "",
    );
    rest_refused(&format!("{uri}\nname = \"x\""), "", "unknown field `name`");
    assert!(rest_catalog(&format!("{uri}\nsigv4 = false")).is_ok());
}

#[test]
fn two_channels_writing_one_table_of_one_rest_catalog_are_refused() {
    let one = rest("uri = \"http://localhost:8181\"\nwarehouse = \"lake\"");
    let channel = &one[one.find("[[channel]]").unwrap()..];
    let two = format!(
        "{one}{}",
        channel.replacen("name = \"events\"", "name = \"events2\"", 1)
    );
    let errors = Config::from_toml_str_with_env(&two, Path::new("/etc/floe"), &rest_env())
        .expect_err("refused")
        .0;
    assert_eq!(errors.len(), 1, "{errors:#?}");
    assert_eq!(errors[0].path, "channel[1].destination.table");
    // Another warehouse of the same server is another catalog.
    let other = two
        .replacen("warehouse = \"lake\"", "warehouse = \"other\"", 2)
        .replacen("warehouse = \"other\"", "warehouse = \"lake\"", 1);
    assert!(Config::from_toml_str_with_env(&other, Path::new("/etc/floe"), &rest_env()).is_ok());
}

const SQL_CATALOG: &str =
    "kind = \"sql\"\nuri = \"sqlite:catalog.sqlite\"\nwarehouse = \"warehouse\"";
const KEY_ARN: &str = "arn:aws:kms:us-east-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab";
const BUCKET_ARN: &str = "arn:aws:s3tables:us-east-1:123456789012:bucket/floe-tables";

#[test]
fn s3tables_and_glue_catalogs_validate_into_typed_config() {
    let text = replaced(
        SQL_CATALOG,
        &format!(
            "kind = \"s3tables\"\ntable_bucket_arn = \"{BUCKET_ARN}\"\nkms_key_arn = \"{KEY_ARN}\""
        ),
    );
    let config = parse(&text).unwrap();
    assert_eq!(
        iceberg(&config).catalog,
        CatalogConfig::S3Tables(S3TablesCatalogConfig {
            table_bucket_arn: BUCKET_ARN.into(),
            kms_key_arn: Some(KEY_ARN.into()),
        })
    );
    assert!(
        config.uses_aws(),
        "an S3 Tables catalog needs the AWS clients"
    );
    let text = replaced(
        SQL_CATALOG,
        &format!("kind = \"glue\"\nwarehouse = \"s3://wh-bucket/floe/\"\ncatalog_id = \"123456789012\"\nkms_key_arn = \"{KEY_ARN}\"\nexpected_bucket_owner = \"123456789012\""),
    );
    let config = parse(&text).unwrap();
    assert_eq!(
        iceberg(&config).catalog,
        CatalogConfig::Glue(GlueCatalogConfig {
            warehouse: "s3://wh-bucket/floe".into(),
            catalog_id: Some("123456789012".into()),
            kms_key_arn: Some(KEY_ARN.into()),
            expected_bucket_owner: Some("123456789012".into()),
        })
    );
    assert!(config.uses_aws());
    let minimal_glue = replaced(
        SQL_CATALOG,
        "kind = \"glue\"\nwarehouse = \"s3://wh-bucket\"",
    );
    assert_eq!(
        iceberg(&parse(&minimal_glue).unwrap()).catalog,
        CatalogConfig::Glue(GlueCatalogConfig {
            warehouse: "s3://wh-bucket".into(),
            catalog_id: None,
            kms_key_arn: None,
            expected_bucket_owner: None,
        })
    );
}

#[test]
fn s3tables_and_glue_settings_are_refused_naming_the_field() {
    let p = "channel[0].destination.catalog";
    let s3t = |extra: &str| replaced(SQL_CATALOG, &format!("kind = \"s3tables\"\n{extra}"));
    for bad in [
        "arn:aws:s3:::floe-tables",
        "arn:aws:s3tables:us-east-1:1234:bucket/floe-tables",
        "arn:aws:s3tables:us-east-1:123456789012:bucket/Floe_Tables",
        "arn:aws:s3tables:us-east-1:123456789012:bucket/-floe",
        "arn:aws:s3tables:us-east-1:123456789012:bucket/ab",
        "arn:aws:s3tables::123456789012:bucket/floe-tables",
        "floe-tables",
    ] {
        refused(
            &s3t(&format!("table_bucket_arn = \"{bad}\"")),
            &format!("{p}.table_bucket_arn"),
            "not an S3 Tables table bucket ARN",
        );
    }
    for (key, needle) in [
        ("alias/aws/s3", "alias"),
        ("arn:aws:kms:us-east-1:123456789012:alias/floe", "alias"),
        ("1234abcd-12ab-34cd-56ef-1234567890ab", "not a KMS key ARN"),
    ] {
        refused(
            &s3t(&format!(
                "table_bucket_arn = \"{BUCKET_ARN}\"\nkms_key_arn = \"{key}\""
            )),
            &format!("{p}.kms_key_arn"),
            needle,
        );
    }
    refused(&s3t(""), p, "missing field `table_bucket_arn`");
    refused(
        &s3t(&format!(
            "table_bucket_arn = \"{BUCKET_ARN}\"\nwarehouse = \"s3://x\""
        )),
        p,
        "unknown field `warehouse`",
    );
    // S3 Tables names begin and end with a letter or digit.
    let text = s3t(&format!("table_bucket_arn = \"{BUCKET_ARN}\""));
    refused(
        &text.replacen("namespace = \"quickstart\"", "namespace = \"_staging\"", 1),
        "channel[0].destination.namespace",
        "begin and end with a letter or digit",
    );
    refused(
        &text.replacen("table = \"events\"", "table = \"events_\"", 1),
        "channel[0].destination.table",
        "begin and end with a letter or digit",
    );

    let glue = |extra: &str| replaced(SQL_CATALOG, &format!("kind = \"glue\"\n{extra}"));
    let cases = [
        (
            "warehouse = \"/var/lib/floe\"",
            "warehouse",
            "not an S3 location",
        ),
        ("warehouse = \"s3://B\"", "warehouse", "not an S3 location"),
        (
            "warehouse = \"s3://wh-bucket\"\ncatalog_id = \"glue\"",
            "catalog_id",
            "12-digit",
        ),
        (
            "warehouse = \"s3://wh-bucket\"\nexpected_bucket_owner = \"1\"",
            "expected_bucket_owner",
            "12-digit",
        ),
        (
            "warehouse = \"s3://wh-bucket\"\nkms_key_arn = \"alias/aws/s3\"",
            "kms_key_arn",
            "alias",
        ),
    ];
    for (extra, key, needle) in cases {
        refused(&glue(extra), &format!("{p}.{key}"), needle);
    }
    refused(&glue(""), p, "missing field `warehouse`");
}

#[test]
fn two_channels_writing_one_s3tables_table_are_refused() {
    let catalog = format!("kind = \"s3tables\"\ntable_bucket_arn = \"{BUCKET_ARN}\"");
    let first = replaced(SQL_CATALOG, &catalog);
    let channel = &first[first.find("[[channel]]").unwrap()..];
    let second = channel.replace("name = \"events\"", "name = \"events_b\"");
    refused(
        &format!("{first}{second}"),
        "channel[1].destination.table",
        "already written by channel[0]",
    );
    // Another table bucket holds another table.
    let other = second.replace("bucket/floe-tables", "bucket/other-tables");
    assert!(parse(&format!("{first}{other}")).is_ok());
}

/// `MINIMAL`'s channel with a raw S3 destination (no schema, no DLQ) and `extra` destination keys.
fn raw(extra: &str) -> String {
    let head = &MINIMAL[..MINIMAL.find("[channel.schema]").unwrap()];
    format!("{head}[channel.destination]\nkind = \"s3\"\nbucket = \"raw-bucket\"\n{extra}\n")
}

fn raw_destination(config: &Config) -> &crate::config::raw::RawDestinationConfig {
    let DestinationConfig::S3(d) = &config.channels[0].destination else {
        panic!("a raw destination")
    };
    d
}

#[test]
fn raw_destination_takes_its_defaults() {
    let config = parse(&raw("")).unwrap();
    let d = raw_destination(&config);
    assert_eq!(d.location.bucket, "raw-bucket");
    assert_eq!(d.key_template.as_str(), "{channel}/{yyyy}/{MM}/{dd}/{HH}/");
    assert_eq!(d.compression, crate::config::raw::RawCompression::None);
    assert_eq!(
        d.record_delimiter,
        crate::config::raw::RecordDelimiter::Newline
    );
    assert_eq!(d.data_freshness, Duration::from_secs(300));
    assert_eq!(d.target_object_size, 128 << 20);
    assert_eq!(d.buffer_size, 256 << 20);
    assert_eq!(config.channels[0].schema, None);
    assert_eq!(config.channels[0].dlq, None);
    assert!(config.uses_aws());
}

#[test]
fn raw_destination_reads_every_key() {
    let config = parse(&raw(r#"expected_bucket_owner = "123456789012"
kms_key_arn = "arn:aws:kms:us-east-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab"
key_template = "raw/{topic}/{yyyy}/{MM}/{dd}/{HH}/{mm}/{shard}-{first}-{last}"
compression = "zstd"
record_delimiter = "none"
data_freshness = "60s"
target_object_size = "64MiB"
buffer_size = "512MiB""#))
    .unwrap();
    let d = raw_destination(&config);
    assert_eq!(
        d.location.expected_bucket_owner.as_deref(),
        Some("123456789012")
    );
    assert!(d.location.kms_key_arn.is_some());
    assert_eq!(d.compression, crate::config::raw::RawCompression::Zstd);
    assert_eq!(
        d.record_delimiter,
        crate::config::raw::RecordDelimiter::None
    );
    assert_eq!(d.data_freshness, Duration::from_secs(60));
    assert_eq!(d.target_object_size, 64 << 20);
    assert_eq!(d.buffer_size, 512 << 20);
}

#[test]
fn raw_destination_refuses_bad_keys_naming_them() {
    for (extra, path, needle) in [
        (
            "key_template = \"raw/{channel}/{yyyy}/data\"",
            "key_template",
            "must contain {shard} and {first}",
        ),
        (
            "key_template = \"raw/{channel}/{hour}/\"",
            "key_template",
            "unknown placeholder {hour}",
        ),
        (
            "key_template = \"/raw/\"",
            "key_template",
            "starts with '/'",
        ),
        (
            "compression = \"lz4\"",
            "compression",
            "unknown variant `lz4`",
        ),
        (
            "record_delimiter = \"crlf\"",
            "record_delimiter",
            "unknown variant `crlf`",
        ),
        (
            "data_freshness = \"5s\"",
            "data_freshness",
            "below the minimum",
        ),
        (
            "data_freshness = \"901s\"",
            "data_freshness",
            "above the maximum",
        ),
        (
            "target_object_size = \"512KiB\"",
            "target_object_size",
            "below the minimum",
        ),
        (
            "target_object_size = \"3GiB\"",
            "target_object_size",
            "above the maximum",
        ),
        (
            "expected_bucket_owner = \"me\"",
            "expected_bucket_owner",
            "12-digit",
        ),
        ("kms_key_arn = \"alias/aws/s3\"", "kms_key_arn", "alias"),
    ] {
        refused(
            &raw(extra),
            &format!("channel[0].destination.{path}"),
            needle,
        );
    }
    refused(
        &raw("prefix = \"x/\""),
        "channel[0].destination",
        "unknown field `prefix`",
    );
    refused(
        &raw("").replace("raw-bucket", "Raw_Bucket"),
        "channel[0].destination.bucket",
        "not an S3 bucket name",
    );
}

#[test]
fn raw_destination_has_no_schema_and_no_dlq() {
    let schema = raw("") + "[channel.schema]\nfile = \"event.schema.json\"\n";
    refused(&schema, "channel[0].schema", "not validated");
    let dlq = raw("") + "[channel.dlq]\nkind = \"local\"\npath = \"dlq\"\n";
    refused(&dlq, "channel[0].dlq", "never dropped");
    let record = raw("") + "[channel.record]\nmax_record_size = \"1MiB\"\n";
    refused(
        &record,
        "channel[0].record",
        "whatever their framing or size",
    );
    // An Iceberg channel still needs both.
    refused(
        &replaced("[channel.schema]\nfile = \"event.schema.json\"\n", ""),
        "channel[0].schema",
        "required for an Iceberg destination",
    );
}

#[test]
fn raw_channels_sharing_a_bucket_must_name_themselves_in_their_keys() {
    let one = raw("key_template = \"x/{shard}-{first}\"");
    let second = |template: &str| {
        format!(
            "{one}\n[[channel]]\nname = \"other\"\n[channel.source]\nkind = \"kafka\"\nbootstrap_servers = \"localhost:9092\"\ntopic = \"events\"\n[channel.destination]\nkind = \"s3\"\nbucket = \"raw-bucket\"\nkey_template = \"{template}\"\n"
        )
    };
    refused(
        &second("{channel}/"),
        "channel[1].destination.key_template",
        "must contain {channel}",
    );
    refused(
        &second("y/{shard}-{first}"),
        "channel[1].destination.key_template",
        "must contain {channel}",
    );
    let both = raw("key_template = \"{channel}/\"");
    let ok = second("{channel}/").replace(&one, &both);
    parse(&ok).unwrap();
}

#[test]
fn maintenance_is_on_by_default_and_its_settings_are_bounded_with_their_key() {
    let sql = parse(MINIMAL).unwrap();
    assert!(iceberg(&sql).maintenance.enabled);
    let maintenance = |lines: &str| {
        MINIMAL.replace(
            "[channel.destination.catalog]",
            &format!("[channel.destination.maintenance]\n{lines}\n[channel.destination.catalog]"),
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

/// `MINIMAL` with `[lease_store] kind = "postgres"` and `lines`.
fn postgres_lease_store(lines: &str) -> String {
    replaced(
        "kind = \"sqlite\"\npath = \"state/leases.sqlite\"",
        &format!("kind = \"postgres\"\n{lines}"),
    )
}

fn env_with(var: &str, value: &str) -> ConfigEnv {
    let mut env = env();
    env.vars.insert(var.to_owned(), value.to_owned());
    env
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

#[test]
fn sql_catalog_on_postgres_is_accepted_by_url_or_environment() {
    let text = replaced(
        "uri = \"sqlite:catalog.sqlite\"",
        "uri = \"postgresql://floe@db:5432/catalog\"",
    );
    let config = parse(&text).unwrap();
    let CatalogConfig::Sql(sql) = &iceberg(&config).catalog else {
        panic!("an sql catalog")
    };
    assert_eq!(
        sql.database,
        CatalogDatabase::Postgres("postgresql://floe@db:5432/catalog".into())
    );
    assert_eq!(
        iceberg(&config).catalog.identity(),
        "sql:floe:postgresql://floe@db:5432/catalog"
    );
    refused(
        &replaced(
            "uri = \"sqlite:catalog.sqlite\"",
            "uri = \"postgresql://floe:pw@db/catalog\"",
        ),
        "channel[0].destination.catalog.uri",
        "secrets must not be written",
    );
    let text = replaced(
        "uri = \"sqlite:catalog.sqlite\"",
        "uri = \"env:FLOE_CATALOG\"",
    );
    let config = Config::from_toml_str_with_env(
        &text,
        Path::new("/etc/floe"),
        &env_with("FLOE_CATALOG", "postgresql://floe:pw@db/catalog"),
    )
    .unwrap();
    let CatalogConfig::Sql(sql) = &iceberg(&config).catalog else {
        panic!("an sql catalog")
    };
    assert_eq!(
        iceberg(&config).catalog.identity(),
        "sql:floe:postgresql://floe:***@db/catalog"
    );
    assert!(!format!("{sql:?}").contains("pw@"));
}

#[test]
fn schema_evolution_is_read_and_refused_where_it_cannot_apply() {
    use crate::config::SchemaEvolution;
    let arn = format!("glue_schema_arn = \"{SCHEMA_ARN}\"");
    let c = parse(&gsr(&format!(
        "{arn}\nversion = 1\nevolution = \"compatible\""
    )))
    .unwrap();
    assert_eq!(
        c.channels[0].schema.as_ref().unwrap().evolution(),
        SchemaEvolution::Compatible
    );
    let c = parse(&schema(&format!(
        "{arn}\nevolution = \"compatible\"\npoll_interval = \"5s\""
    )))
    .unwrap();
    assert!(matches!(
        c.channels[0].schema,
        Some(SchemaConfig::Glue { poll_interval, evolution: SchemaEvolution::Compatible, .. })
            if poll_interval == std::time::Duration::from_secs(5)
    ));
    let c = parse(&schema(&arn)).unwrap();
    assert_eq!(
        c.channels[0].schema.as_ref().unwrap().evolution(),
        SchemaEvolution::None
    );
    refused(
        &schema(&format!("{arn}\nevolution = \"backward\"")),
        "channel[0].schema.evolution",
        "\"none\" or \"compatible\"",
    );
    refused(
        &schema("file = \"event.schema.json\"\nevolution = \"compatible\""),
        "channel[0].schema.evolution",
        "glue_schema_arn",
    );
    refused(
        &schema(&format!("{arn}\nversion = 2\nevolution = \"compatible\"")),
        "channel[0].schema.version",
        "set version = \"latest\"",
    );
    refused(
        &gsr(&format!(
            "{arn}\nevolution = \"compatible\"\npoll_interval = \"5s\""
        )),
        "channel[0].schema.poll_interval",
        "applies only",
    );
    refused(
        &schema(&format!(
            "{arn}\nevolution = \"compatible\"\npoll_interval = \"0s\""
        )),
        "channel[0].schema.poll_interval",
        "",
    );
}

#[test]
fn schema_evolution_is_refused_on_s3_tables() {
    let text = replaced(
        SQL_CATALOG,
        &format!("kind = \"s3tables\"\ntable_bucket_arn = \"{BUCKET_ARN}\""),
    )
    .replacen(
        "file = \"event.schema.json\"",
        &format!("glue_schema_arn = \"{SCHEMA_ARN}\"\nevolution = \"compatible\""),
        1,
    );
    assert!(text.contains("evolution"));
    refused(&text, "channel[0].schema.evolution", "S3 Tables");
}

/// `MINIMAL` with `record.format = format` and `[channel.schema]` holding `lines`.
fn confluent(format: &str, lines: &str) -> String {
    schema(lines).replacen(
        "[channel.schema]",
        &format!("[channel.record]\nformat = \"{format}\"\n[channel.schema]"),
        1,
    )
}

fn confluent_of(config: &Config) -> &ConfluentSchemaConfig {
    let Some(SchemaConfig::Confluent(c)) = &config.channels[0].schema else {
        panic!("a Confluent schema: {:?}", config.channels[0].schema)
    };
    c
}

#[test]
fn confluent_formats_read_a_registry_with_the_topic_name_strategy() {
    for (format, want) in [
        ("avro", RecordFormat::Avro),
        ("protobuf", RecordFormat::Protobuf),
        ("json_sr", RecordFormat::JsonSr),
    ] {
        let c = parse(&confluent(
            format,
            "registry_url = \"https://registry.example:8081/\"",
        ))
        .unwrap();
        assert_eq!(c.channels[0].record.format, want);
        assert_eq!(
            confluent_of(&c),
            &ConfluentSchemaConfig {
                urls: vec!["https://registry.example:8081".into()],
                subject: "events-value".into(),
                evolution: SchemaEvolution::None,
                ca_bundle: None,
                message: None,
            }
        );
    }
    let c = parse(&confluent(
        "protobuf",
        "registry_url = [\"http://a:8081\", \"http://b:8081\"]\nsubject = \"orders\"\nevolution = \"compatible\"\nmessage = \"acme.Order\"",
    ))
    .unwrap();
    let s = confluent_of(&c);
    assert_eq!(s.urls, ["http://a:8081", "http://b:8081"]);
    assert_eq!(s.subject, "orders");
    assert_eq!(s.evolution, SchemaEvolution::Compatible);
    assert_eq!(s.message.as_deref(), Some("acme.Order"));
    assert_eq!(c.channels[0].schema.as_ref().unwrap().key(), "registry_url");
}

#[test]
fn confluent_ca_bundle_is_a_readable_pem_file() {
    let dir = tempfile::tempdir().unwrap();
    let pem = dir.path().join("ca.pem");
    std::fs::write(&pem, TEST_CA_PEM).unwrap();
    let c = parse(&confluent(
        "json_sr",
        &format!(
            "registry_url = \"https://r:8081\"\nca_bundle = \"{}\"",
            pem.display()
        ),
    ))
    .unwrap();
    assert_eq!(confluent_of(&c).ca_bundle.as_deref(), Some(pem.as_path()));
    refused(
        &confluent(
            "json_sr",
            "registry_url = \"https://r:8081\"\nca_bundle = \"/nonexistent/ca.pem\"",
        ),
        "channel[0].schema.ca_bundle",
        "cannot read",
    );
}

#[test]
fn confluent_registry_settings_are_refused_naming_the_key() {
    let url = "registry_url = \"http://r:8081\"";
    refused(
        &confluent("avro", "file = \"a.json\""),
        "channel[0].schema.registry_url",
        "set `registry_url`",
    );
    refused(
        &schema(url),
        "channel[0].schema.registry_url",
        "not \"json\"",
    );
    refused(
        &confluent("avro", &format!("{url}\nfile = \"a.json\"")),
        "channel[0].schema.file",
        "give one of",
    );
    refused(
        &confluent(
            "avro",
            &format!("{url}\nglue_schema_arn = \"{SCHEMA_ARN}\""),
        ),
        "channel[0].schema.glue_schema_arn",
        "give one of",
    );
    for (bad, why) in [
        ("\"ftp://r\"", "not an http or https URL"),
        ("\"http://\"", "has no host"),
        ("\"https://r:8081?x=1\"", "query"),
        (
            "\"http://u:sekret@r:8081\"",
            "FLOE_SCHEMA_REGISTRY_BASIC_AUTH",
        ),
        ("[]", "at least one URL"),
        ("3", "not a URL"),
    ] {
        let errors = errors(&confluent("avro", &format!("registry_url = {bad}")));
        assert!(
            errors
                .iter()
                .any(|e| e.path == "channel[0].schema.registry_url" && e.message.contains(why)),
            "{bad}: {errors:#?}"
        );
    }
    for (line, key, why) in [
        ("version = 2", "version", "latest version"),
        ("poll_interval = \"5s\"", "poll_interval", "nothing to poll"),
        (
            "evolution = \"always\"",
            "evolution",
            "not a schema evolution",
        ),
        ("subject = \" \"", "subject", "must not be empty"),
        ("message = \"a.B\"", "message", "protobuf"),
    ] {
        refused(
            &confluent("avro", &format!("{url}\n{line}")),
            &format!("channel[0].schema.{key}"),
            why,
        );
    }
    for line in [
        "subject = \"s\"",
        "ca_bundle = \"ca.pem\"",
        "message = \"a.B\"",
    ] {
        let key = line.split(' ').next().unwrap();
        refused(
            &schema(&format!("file = \"a.json\"\n{line}")),
            &format!("channel[0].schema.{key}"),
            "`registry_url` only",
        );
    }
    refused(
        &gsr(url).replace("gsr_json", "gsr_avro"),
        "channel[0].schema.registry_url",
        "not \"gsr_avro\"",
    );
    refused(
        &confluent("gsr_avro", "file = \"a.json\""),
        "channel[0].schema.glue_schema_arn",
        "gsr_avro",
    );
}

#[test]
fn registry_credentials_are_never_read_from_the_file() {
    for (line, key, var) in [
        (
            "basic_auth = \"u:p\"",
            "basic_auth",
            ENV_REGISTRY_BASIC_AUTH,
        ),
        ("username = \"u\"", "username", ENV_REGISTRY_BASIC_AUTH),
        ("password = \"p\"", "password", ENV_REGISTRY_BASIC_AUTH),
        (
            "bearer_token = \"t\"",
            "bearer_token",
            ENV_REGISTRY_BEARER_TOKEN,
        ),
    ] {
        refused(
            &confluent("avro", &format!("registry_url = \"http://r\"\n{line}")),
            &format!("channel[0].schema.{key}"),
            var,
        );
        refused(
            &schema(&format!("file = \"a.json\"\n{line}")),
            &format!("channel[0].schema.{key}"),
            var,
        );
    }
}

#[test]
fn partition_is_a_spec_of_transform_terms_with_one_time_transform() {
    let text = replaced(
        "partition_field = \"event_time\"",
        "partition = [\"day(event_time)\", \"identity(source)\", \"bucket(4, id)\"]",
    );
    let config = parse(&text).unwrap();
    let d = iceberg(&config);
    assert_eq!(d.partition_field, "event_time");
    let terms: Vec<String> = d.partition.iter().map(|t| t.to_string()).collect();
    assert_eq!(
        terms,
        ["day(event_time)", "identity(source)", "bucket(4, id)"]
    );
    let spec = |terms: &str| {
        replaced(
            "partition_field = \"event_time\"",
            &format!("partition = {terms}"),
        )
    };
    refused(
        &spec("[\"identity(source)\", \"bucket(0, id)\"]"),
        "channel[0].destination.partition[1]",
        "the width of bucket must be a whole number from 1 to 2147483647",
    );
    refused(
        &spec("[\"minute(event_time)\"]"),
        "channel[0].destination.partition[0]",
        "unknown transform \"minute\"",
    );
    refused(
        &spec("[\"hour(event_time)\", \"day(event_time)\"]"),
        "channel[0].destination.partition[1]",
        "second time transform",
    );
    // No time transform: no time field, records need none.
    for terms in ["[\"identity(source)\"]", "[]"] {
        let config = parse(&spec(terms)).unwrap();
        assert_eq!(iceberg(&config).partition_field, "", "{terms}");
    }
    refused(
        &with(
            "[channel.destination]",
            "partition = [\"hour(event_time)\"]",
        ),
        "channel[0].destination.partition",
        "not both",
    );
    refused(
        &replaced("partition_field = \"event_time\"\n", ""),
        "channel[0].destination.partition_field",
        "required (or channel[0].destination.partition)",
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

#[test]
fn sort_is_a_list_of_fields_with_directions() {
    let config = parse(&with(
        "[channel.destination]",
        "sort = [\"source\", \"event_time desc\"]",
    ))
    .unwrap();
    let terms: Vec<String> = iceberg(&config)
        .sort
        .iter()
        .map(|t| t.to_string())
        .collect();
    assert_eq!(
        terms,
        ["source asc nulls first", "event_time desc nulls last"]
    );
    refused(
        &with(
            "[channel.destination]",
            "sort = [\"id\", \"source sideways\"]",
        ),
        "channel[0].destination.sort[1]",
        "not a sort term",
    );
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
    // A channel with one named table has no members: it is its own.
    let plain = parse(MINIMAL).unwrap();
    assert_eq!(plain.channels[0].member("x"), plain.channels[0]);
    assert_eq!(iceberg(&plain).max_tables, DEFAULT_MAX_TABLES);
}

#[test]
fn topic_names_map_to_iceberg_table_names() {
    assert_eq!(table_of_topic("orders"), "orders");
    assert_eq!(table_of_topic("Orders.EU-1"), "orders_eu_1");
    assert_eq!(table_of_topic("a.b"), table_of_topic("a_b"));
    assert_eq!(table_of_topic("__x-Y"), "__x_y");
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

#[test]
fn a_table_per_topic_needs_a_kafka_source_and_a_bounded_table_count() {
    refused(
        &replaced("table = \"events\"", "table = \"{topic}\"\nmax_tables = 0"),
        "channel[0].destination.max_tables",
        "",
    );
    let kinesis = replaced(
        "kind = \"kafka\"\nbootstrap_servers = \"localhost:9092\"\ntopic = \"events\"",
        "kind = \"kinesis\"\nstream_name = \"events\"",
    )
    .replacen("table = \"events\"", "table = \"{topic}\"", 1);
    refused(
        &kinesis,
        "channel[0].destination.table",
        "needs a Kafka source",
    );
    refused(
        &replaced("table = \"events\"", "table = \"{stream}\""),
        "channel[0].destination.table",
        "",
    );
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

/// A Confluent format takes its subject from the topic (`<topic>-value`); several topics into
/// one table have no one topic, so the subject must be named.
#[test]
fn several_topics_into_one_table_name_their_registry_subject() {
    let several = |lines: &str| {
        confluent("avro", lines).replacen("topic = \"events\"", "topics = [\"a\", \"b\"]", 1)
    };
    refused(
        &several("registry_url = \"http://r:8081\""),
        "channel[0].schema.subject",
        "missing: a channel reading several topics into one table",
    );
    let c = parse(&several(
        "registry_url = \"http://r:8081\"\nsubject = \"orders-value\"",
    ))
    .unwrap();
    assert_eq!(confluent_of(&c).subject, "orders-value");
}

#[test]
fn a_raw_destination_reads_one_topic() {
    refused(
        &raw("").replacen("topic = \"events\"", "topics = [\"a\", \"b\"]", 1),
        "channel[0].source.topic",
        "a raw S3 destination reads one topic",
    );
}

// ---- table = "{route}": fan-out by a field (docs/routing.md, "Fan-out by a field") ----

/// `MINIMAL` with `table = "{route}"` and `lines` in `[channel.destination]`.
fn routed(lines: &str) -> String {
    replaced(
        "table = \"events\"",
        &format!("table = \"{{route}}\"\n{lines}"),
    )
}

const ROUTES: &str = "route_field = \"region\"\nroutes = { eu = \"events_eu\", us = \"events_us\", ap = \"events_ap\", \"7\" = \"events_us\" }";

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
    assert_eq!(
        channel.member_route(),
        None,
        "the routed channel itself is no member"
    );

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
}

#[test]
fn route_keys_are_refused_naming_the_key() {
    let paths = |text: &str| -> Vec<String> { errors(text).into_iter().map(|e| e.path).collect() };
    assert_eq!(
        paths(&routed("")),
        [
            "channel[0].destination.route_field",
            "channel[0].destination.routes"
        ]
    );
    refused(
        &routed("route_field = \"region\"\nroutes = {}"),
        "channel[0].destination.routes",
        "at least one",
    );
    refused(
        &routed("route_field = \" \"\nroutes = { eu = \"events_eu\" }"),
        "channel[0].destination.route_field",
        "must not be empty",
    );
    refused(
        &routed(
            "route_field = \"region\"\nroutes = { eu = \"events_eu\", \"e u\" = \"Events-EU\" }",
        ),
        "channel[0].destination.routes.\"e u\"",
        "not a valid name",
    );
    refused(
        &routed(&format!("{ROUTES}\nunroutable = \"Other\"")),
        "channel[0].destination.unroutable",
        "not a valid name",
    );
    refused(
        &routed(&format!("{ROUTES}\nmax_tables = 2")),
        "channel[0].destination.routes",
        "routes to 3 tables (with the unroutable table), more than channel[0].destination.max_tables = 2",
    );
    // Without table = "{route}" (a plain table, or a table per topic), each key is refused.
    for (line, key) in [
        ("route_field = \"region\"", "route_field"),
        ("routes = { eu = \"events_eu\" }", "routes"),
        ("unroutable = \"dlq\"", "unroutable"),
    ] {
        refused(
            &with("[channel.destination]", line),
            &format!("channel[0].destination.{key}"),
            "applies only to channel[0].destination.table = \"{route}\"",
        );
        refused(
            &replaced(
                "table = \"events\"",
                &format!("table = \"{{topic}}\"\n{line}"),
            ),
            &format!("channel[0].destination.{key}"),
            "applies only to",
        );
    }
    // The route value is read from JSON documents: json, gsr_json, json_sr.
    let framed = |format: &str| {
        routed(ROUTES)
            .replacen(
                "file = \"event.schema.json\"",
                "registry_url = \"http://r\"",
                1,
            )
            .replacen(
                "[channel.schema]",
                &format!("[channel.record]\nformat = \"{format}\"\n[channel.schema]"),
                1,
            )
    };
    for format in ["avro", "protobuf"] {
        refused(
            &framed(format),
            "channel[0].record.format",
            "needs a JSON format (\"json\", \"gsr_json\" or \"json_sr\")",
        );
    }
    assert!(parse(&framed("json_sr")).unwrap().channels[0].is_routed());
    let gsr = routed(ROUTES)
        .replacen(
            "file = \"event.schema.json\"",
            &format!("file = \"v1.json\"\nversions = {{ \"{V1}\" = \"v1.json\" }}"),
            1,
        )
        .replacen(
            "[channel.schema]",
            "[channel.record]\nformat = \"gsr_json\"\n[channel.schema]",
            1,
        );
    assert!(parse(&gsr).unwrap().channels[0].is_routed());
}

#[test]
fn a_route_field_the_schema_file_lacks_is_refused_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let schema = dir.path().join("s.json");
    std::fs::write(
        &schema,
        r#"{"type":"object","properties":{"event_time":{"type":"string","format":"date-time"},"region":{"type":"string"},"score":{"type":"number"},"user":{"type":"object","properties":{"zone":{"type":"string"}}}},"required":["event_time"]}"#,
    )
    .unwrap();
    let check = |field: &str| {
        let text = routed(&ROUTES.replace("\"region\"", &format!("\"{field}\"")))
            .replace("event.schema.json", &schema.display().to_string());
        let config = parse(&text).unwrap();
        crate::channel::schema_file::check_schema(0, &config.channels[0]).map(|_| ())
    };
    assert!(check("region").is_ok());
    for (field, needle) in [
        ("zone", "\"zone\" is not a top-level field of the schema"),
        (
            "score",
            "\"score\" is a double: a route field is a string, an integer or a boolean",
        ),
    ] {
        let e = check(field).unwrap_err();
        assert_eq!(e.path, "channel[0].destination.route_field", "{e:?}");
        assert!(e.message.contains(needle), "{e:?}");
    }
}

#[test]
fn a_routed_table_another_channel_writes_is_refused_and_two_routed_channels_may_share_a_namespace()
{
    let plain = &MINIMAL[MINIMAL.find("[[channel]]").unwrap()..];
    let plain = plain
        .replace("name = \"events\"", "name = \"plain\"")
        .replace("table = \"events\"", "table = \"events_us\"");
    refused(
        &format!("{}{plain}", routed(ROUTES)),
        "channel[1].destination.table",
        "table quickstart.events_us is already written by channel[0] \"events\"",
    );
    let routed_text = routed(ROUTES);
    let second = &routed_text[routed_text.find("[[channel]]").unwrap()..];
    let second = second.replace("name = \"events\"", "name = \"other\"");
    let clashes = errors(&format!("{routed_text}{second}"));
    assert_eq!(clashes.len(), 3, "one per table: {clashes:#?}");
    assert!(clashes
        .iter()
        .all(|e| e.path == "channel[1].destination.routes"));
    assert!(clashes[0]
        .message
        .contains("table quickstart.events_ap is already written by channel[0] \"events\""));
    let disjoint = second
        .replace("events_eu", "x_eu")
        .replace("events_us", "x_us")
        .replace("events_ap", "x_ap");
    assert!(parse(&format!("{routed_text}{disjoint}")).is_ok());
}

#[test]
fn a_routed_kinesis_channel_reads_with_a_consumer_per_member() {
    let efo = aws_config()
        .replacen(
            "poll_interval = \"500ms\"",
            "read_mode = \"enhanced_fan_out\"",
            1,
        )
        .replacen(
            "table = \"events\"",
            &format!("table = \"{{route}}\"\n{ROUTES}"),
            1,
        );
    let config = parse(&efo).unwrap();
    let member = config.channels[0].route_member("events_eu");
    let SourceConfig::Kinesis(k) = &member.source else {
        panic!()
    };
    assert_eq!(
        k.read_mode.consumer_name(&member.name).as_deref(),
        Some("floe-events.events_eu")
    );
    refused(
        &efo.replacen("read_mode", "consumer_name = \"c\"\nread_mode", 1),
        "channel[0].source.consumer_name",
        "each table's member channel registers its own consumer",
    );
    let long = "t".repeat(125);
    refused(
        &efo.replacen("eu = \"events_eu\"", &format!("eu = \"{long}\""), 1),
        "channel[0].destination.routes",
        "at most 128 characters: this channel's longest is 137",
    );
    // Polling: any table name.
    let polling = efo.replacen("read_mode = \"enhanced_fan_out\"", "", 1);
    assert!(parse(&polling.replacen("eu = \"events_eu\"", &format!("eu = \"{long}\""), 1)).is_ok());
}

#[test]
fn every_worker_admits_the_same_topics_of_a_table_per_topic_channel() {
    let t = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let none = std::collections::BTreeSet::new();
    // New topics in name order, within max_tables; a clashing table name after its owner.
    let (admitted, refused) = admit_topics("c", &t(&["b", "a_x", "a.x", "c"]), &none, 2);
    assert_eq!(admitted, t(&["a.x", "b"]));
    assert_eq!(
        refused,
        vec![
            (
                "a_x".to_string(),
                TopicRefusal::NameClash {
                    other: "a.x".into()
                }
            ),
            ("c".to_string(), TopicRefusal::MaxTables),
        ]
    );
    // A topic whose member has a state (admitted before, by any worker) comes first, even past
    // the limit, and owns its table name.
    let known: std::collections::BTreeSet<String> = ["c".to_string(), "a_x".to_string()].into();
    let (admitted, refused) = admit_topics("c", &t(&["b", "a_x", "a.x", "c"]), &known, 2);
    assert_eq!(admitted, t(&["a_x", "c"]));
    assert_eq!(
        refused,
        vec![
            (
                "a.x".to_string(),
                TopicRefusal::NameClash {
                    other: "a_x".into()
                }
            ),
            ("b".to_string(), TopicRefusal::MaxTables),
        ]
    );
    // Listing order does not matter.
    let (again, _) = admit_topics("c", &t(&["c", "a.x", "b", "a_x"]), &known, 2);
    assert_eq!(again, admitted);
    // A member name too long to name files is never admitted.
    let long = format!("t{}", "l".repeat(MAX_MEMBER_NAME));
    let (admitted, refused) = admit_topics("c", std::slice::from_ref(&long), &none, 5);
    assert!(admitted.is_empty());
    assert_eq!(refused, vec![(long, TopicRefusal::NameTooLong)]);
}

#[test]
fn max_tables_applies_only_to_several_tables() {
    refused(
        &replaced("table = \"events\"", "table = \"events\"\nmax_tables = 5"),
        "channel[0].destination.max_tables",
        "applies only with table = \"{topic}\" or \"{route}\"",
    );
}
