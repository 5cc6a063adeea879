//! The configuration files shipped in `config/` parse, validate and pass `floe validate`'s checks.

use std::path::{Path, PathBuf};
use std::time::Duration;

use floe::cli::validate;
use floe::config::{
    CatalogConfig, Compression, Config, ConfigEnv, DestinationConfig, InitialPosition,
    LeaseStoreBackend, PropertyValue, SourceConfig,
};

fn config_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("config")
}

fn env_with(vars: &[(&str, &str)]) -> ConfigEnv {
    ConfigEnv {
        hostname: "test-host".to_owned(),
        pid: 7,
        vars: vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    }
}

fn load_with(name: &str, env: &ConfigEnv) -> Result<Config, floe::config::ConfigErrors> {
    let text = std::fs::read_to_string(config_dir().join(name)).unwrap();
    Config::from_toml_str_with_env(&text, &config_dir(), env)
}

#[test]
fn quickstart_config_validates_with_the_quickstart_settings() {
    let config = load_with("quickstart.toml", &env_with(&[])).unwrap();
    assert_eq!(config.worker.id, "test-host-7");
    let LeaseStoreBackend::Sqlite { path } = &config.lease_store.backend else {
        panic!("sqlite lease store expected")
    };
    assert_eq!(*path, config_dir().join("floe-quickstart/leases.sqlite"));
    let channel = &config.channels[0];
    let SourceConfig::Kafka(kafka) = &channel.source else {
        panic!("kafka source expected")
    };
    assert_eq!(kafka.bootstrap_servers, "localhost:9092");
    assert_eq!(kafka.topics.single(), Some("events"));
    assert_eq!(kafka.initial_position, InitialPosition::Earliest);
    let DestinationConfig::Iceberg(d) = &channel.destination else {
        panic!("iceberg destination expected")
    };
    assert_eq!(
        (d.namespace.as_str(), d.table.as_str()),
        ("quickstart", "events")
    );
    assert_eq!(d.data_freshness, Duration::from_secs(10));
    assert_eq!(d.compression, Compression::Zstd { level: 3 });
    let CatalogConfig::Sql(catalog) = &d.catalog else {
        panic!("an sql catalog")
    };
    assert_eq!(catalog.name, "floe");
    assert_eq!(
        catalog.database,
        floe::config::CatalogDatabase::Sqlite(config_dir().join("floe-quickstart/catalog.sqlite"))
    );
}

#[test]
fn quickstart_config_passes_floe_validate() {
    let config = validate::check(&config_dir().join("quickstart.toml")).unwrap();
    assert_eq!(config.channels.len(), 1);
}

#[test]
fn kafka_sql_config_validates_with_sasl_credentials_from_the_environment() {
    let env = env_with(&[
        ("KAFKA_SASL_USERNAME", "floe"),
        ("KAFKA_SASL_PASSWORD", "s3cret"),
    ]);
    let config = load_with("kafka-sql.toml", &env).unwrap();
    let SourceConfig::Kafka(kafka) = &config.channels[0].source else {
        panic!("kafka source expected")
    };
    assert_eq!(kafka.properties["sasl.password"].value(), "s3cret");
    assert!(matches!(
        kafka.properties["sasl.password"],
        PropertyValue::FromEnv { .. }
    ));
    let DestinationConfig::Iceberg(d) = &config.channels[0].destination else {
        panic!("iceberg destination expected")
    };
    assert_eq!(d.data_freshness, Duration::from_secs(300));
}

#[test]
fn kafka_sql_config_without_credentials_names_the_missing_variables() {
    let errors = load_with("kafka-sql.toml", &env_with(&[])).unwrap_err().0;
    let lines: Vec<String> = errors.iter().map(ToString::to_string).collect();
    assert_eq!(
        lines,
        [
            "channel[0].source.properties.\"sasl.password\": environment variable KAFKA_SASL_PASSWORD is not set",
            "channel[0].source.properties.\"sasl.username\": environment variable KAFKA_SASL_USERNAME is not set",
        ]
    );
}

#[test]
fn kafka_postgres_config_validates_with_its_urls_from_the_environment() {
    let url = "postgresql://ingest:Pg-s3cret-7@db.internal:5432/lake";
    let env = env_with(&[
        ("FLOE_POSTGRES_URL", url),
        ("KAFKA_SASL_USERNAME", "floe"),
        ("KAFKA_SASL_PASSWORD", "kafka-s3cret"),
    ]);
    let config = load_with("kafka-postgres.toml", &env).unwrap();
    assert_eq!(config.worker.id, "test-host-7");
    let LeaseStoreBackend::Postgres(options) = &config.lease_store.backend else {
        panic!("postgres lease store expected")
    };
    assert_eq!(options.url, url);
    assert_eq!(options.ssl_mode, floe::lease::SslMode::VerifyFull);
    assert_eq!(options.pool_size, 4);
    assert_eq!(options.schema, "floe");
    assert!(!options.create_tables);
    assert_eq!(config.lease_store.lease_duration, Duration::from_secs(10));
    assert_eq!(config.lease_store.renew_interval, Duration::from_secs(3));
    assert_eq!(config.aws.region.as_deref(), Some("us-east-1"));
    assert_eq!(
        config.aws.endpoint_url.as_deref(),
        Some("https://minio.internal:9000")
    );
    let SourceConfig::Kafka(kafka) = &config.channels[0].source else {
        panic!("kafka source expected")
    };
    assert_eq!(kafka.properties["sasl.password"].value(), "kafka-s3cret");
    let DestinationConfig::Iceberg(d) = &config.channels[0].destination else {
        panic!("iceberg destination expected")
    };
    let CatalogConfig::Sql(catalog) = &d.catalog else {
        panic!("an sql catalog")
    };
    assert_eq!(catalog.name, "floe");
    assert_eq!(
        catalog.database,
        floe::config::CatalogDatabase::Postgres(url.into())
    );
    assert_eq!(
        catalog.warehouse,
        floe::config::Warehouse::S3("s3://lake/warehouse".into())
    );
    assert!(matches!(
        config.channels[0].dlq.as_ref().unwrap().location,
        floe::config::DlqLocation::S3(_)
    ));
    let debug = format!("{config:?}");
    assert!(!debug.contains("Pg-s3cret-7"), "password in Debug: {debug}");
    assert!(!debug.contains("kafka-s3cret"), "secret in Debug");

    // Without the variable, both keys that read it are named.
    let env = env_with(&[
        ("KAFKA_SASL_USERNAME", "floe"),
        ("KAFKA_SASL_PASSWORD", "kafka-s3cret"),
    ]);
    let errors = load_with("kafka-postgres.toml", &env).unwrap_err().0;
    let mut lines: Vec<String> = errors.iter().map(ToString::to_string).collect();
    lines.sort();
    assert_eq!(
        lines,
        [
            "channel[0].destination.catalog.uri: environment variable FLOE_POSTGRES_URL is not set",
            "lease_store.url: environment variable FLOE_POSTGRES_URL is not set",
        ]
    );
}

#[test]
fn every_key_in_the_shipped_files_carries_a_comment() {
    for name in [
        "quickstart.toml",
        "kafka-sql.toml",
        "kafka-postgres.toml",
        "rest-catalog.toml",
        "raw-s3.toml",
    ] {
        let text = std::fs::read_to_string(config_dir().join(name)).unwrap();
        let mut previous = "";
        for line in text.lines().map(str::trim) {
            let is_key = !line.is_empty() && !line.starts_with('#') && !line.starts_with('[');
            let grouped = previous.contains(" = ") && !previous.starts_with('#');
            assert!(
                !is_key || previous.starts_with('#') || grouped,
                "{name}: `{line}` has no comment"
            );
            previous = line;
        }
    }
}

#[test]
fn validate_reports_a_missing_schema_file_with_its_key_path() {
    let dir = tempfile::tempdir().unwrap();
    let text = std::fs::read_to_string(config_dir().join("quickstart.toml"))
        .unwrap()
        .replace(
            "file = \"event.schema.json\"",
            "file = \"missing.schema.json\"",
        );
    let path = dir.path().join("floe.toml");
    std::fs::write(&path, text).unwrap();
    let errors = validate::check(&path).unwrap_err().0;
    assert_eq!(errors.len(), 1);
    assert_eq!(errors[0].path, "channel[0].schema.file");

    std::fs::write(dir.path().join("missing.schema.json"), "{not json").unwrap();
    let errors = validate::check(&path).unwrap_err().0;
    assert!(errors[0].message.contains("is not JSON"), "{errors:?}");
}

#[test]
fn validate_run_exits_zero_on_the_quickstart_and_one_on_problems() {
    let ok = validate::ValidateArgs {
        config: config_dir().join("quickstart.toml"),
    };
    assert_eq!(validate::run(&ok), std::process::ExitCode::SUCCESS);

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.toml");
    let text = std::fs::read_to_string(config_dir().join("quickstart.toml"))
        .unwrap()
        .replace("data_freshness = \"10s\"", "data_freshness = \"5s\"")
        .replace("kind = \"sql\"", "kind = \"rest\"")
        .replace("renew_interval = \"3s\"", "renew_interval = \"4s\"")
        .replace("namespace = \"quickstart\"", "namespace = \"Quick-Start\"");
    std::fs::write(&path, text).unwrap();
    let bad = validate::ValidateArgs { config: path };
    assert_eq!(validate::run(&bad), std::process::ExitCode::FAILURE);
}

#[test]
fn kinesis_dynamodb_config_validates_and_passes_floe_validate() {
    let config = load_with("kinesis-dynamodb.toml", &env_with(&[])).unwrap();
    assert_eq!(
        config.lease_store.backend,
        LeaseStoreBackend::Dynamodb {
            table: "floe-leases".into(),
            create_lease_table: false
        }
    );
    assert_eq!(config.aws.region.as_deref(), Some("us-east-1"));
    let SourceConfig::Kinesis(kinesis) = &config.channels[0].source else {
        panic!("kinesis source expected")
    };
    assert_eq!(kinesis.stream.as_str(), "clickstream");
    assert_eq!(kinesis.initial_position, InitialPosition::ActivationTime);
    let DestinationConfig::Iceberg(d) = &config.channels[0].destination else {
        panic!("iceberg destination expected")
    };
    let CatalogConfig::Sql(catalog) = &d.catalog else {
        panic!("an sql catalog")
    };
    assert_eq!(
        catalog.warehouse,
        floe::config::Warehouse::S3("s3://example-analytics-lake/warehouse".into())
    );
    assert!(matches!(
        config.channels[0].dlq.as_ref().unwrap().location,
        floe::config::DlqLocation::S3(_)
    ));
    let checked = validate::check(&config_dir().join("kinesis-dynamodb.toml")).unwrap();
    assert_eq!(checked.channels.len(), 1);
}

#[test]
fn rest_catalog_config_validates_with_the_credential_from_the_environment() {
    let env = env_with(&[("POLARIS_CREDENTIAL", "floe:s3cret")]);
    let config = load_with("rest-catalog.toml", &env).unwrap();
    let DestinationConfig::Iceberg(d) = &config.channels[0].destination else {
        panic!("iceberg destination expected")
    };
    let CatalogConfig::Rest(rest) = &d.catalog else {
        panic!("a rest catalog expected")
    };
    assert_eq!(rest.uri, "https://polaris.example.com/api/catalog");
    assert_eq!(rest.warehouse.as_deref(), Some("analytics"));
    assert!(rest.vended_credentials);
    assert!(matches!(
        &rest.auth,
        floe::config::RestAuth::OAuth2 { client_id: None, client_secret }
            if client_secret.value() == "floe:s3cret"
    ));
    assert!(!format!("{config:?}").contains("s3cret"), "secret in Debug");
    let errors = load_with("rest-catalog.toml", &env_with(&[]))
        .unwrap_err()
        .0;
    let lines: Vec<String> = errors.iter().map(ToString::to_string).collect();
    assert_eq!(
        lines,
        ["channel[0].destination.catalog.credential: environment variable POLARIS_CREDENTIAL is not set"]
    );
}

#[test]
fn kinesis_s3tables_config_validates_and_passes_floe_validate() {
    let config = load_with("kinesis-s3tables.toml", &env_with(&[])).unwrap();
    let DestinationConfig::Iceberg(d) = &config.channels[0].destination else {
        panic!("iceberg destination expected")
    };
    assert_eq!(
        d.catalog,
        CatalogConfig::S3Tables(floe::config::S3TablesCatalogConfig {
            table_bucket_arn: "arn:aws:s3tables:us-east-1:123456789012:bucket/example-analytics"
                .into(),
            kms_key_arn: Some(
                "arn:aws:kms:us-east-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab"
                    .into()
            ),
        })
    );
    assert!(config.uses_aws());
    // The commented Glue alternative validates too.
    let text = std::fs::read_to_string(config_dir().join("kinesis-s3tables.toml")).unwrap();
    let start = text.find("    kind = \"s3tables\"").unwrap();
    let end = text
        .find("    # The AWS Glue Data Catalog instead:\n")
        .unwrap();
    let glue_lines: String = text[end..]
        .lines()
        .skip(1)
        .take_while(|l| l.starts_with("    #   "))
        .map(|l| format!("    {}\n", &l["    #   ".len()..]))
        .collect();
    let glue = format!("{}{glue_lines}{}", &text[..start], &text[end..]);
    let config = Config::from_toml_str_with_env(&glue, &config_dir(), &env_with(&[])).unwrap();
    let DestinationConfig::Iceberg(d) = &config.channels[0].destination else {
        panic!("iceberg destination expected")
    };
    assert!(
        matches!(d.catalog, CatalogConfig::Glue(_)),
        "{:?}",
        d.catalog
    );
    let checked = validate::check(&config_dir().join("kinesis-s3tables.toml")).unwrap();
    assert_eq!(checked.channels.len(), 1);
}

#[test]
fn raw_s3_config_validates_and_passes_floe_validate() {
    let config = load_with("raw-s3.toml", &env_with(&[])).unwrap();
    let channel = &config.channels[0];
    let DestinationConfig::S3(d) = &channel.destination else {
        panic!("raw s3 destination expected")
    };
    assert_eq!(d.location.bucket, "example-orders-archive");
    assert_eq!(
        d.key_template.as_str(),
        "raw/{channel}/{yyyy}/{MM}/{dd}/{HH}/"
    );
    assert_eq!(d.compression, floe::config::raw::RawCompression::Gzip);
    assert_eq!(d.data_freshness, Duration::from_secs(300));
    assert!(channel.schema.is_none() && channel.dlq.is_none());
    let checked = validate::check(&config_dir().join("raw-s3.toml")).unwrap();
    assert_eq!(checked.channels.len(), 1);
}

/// Every `config/*.toml` passes `floe validate` ([`validate::check`]) and the checks `floe run`
/// makes before it connects anywhere: [`Config::load`], then, for a Kafka channel, the source as
/// `floe run` creates it (`app::open_source`: [`KafkaSource::try_new`] refuses the properties
/// floe owns and creates the librdkafka client, which checks every property; no connection yet).
#[test]
fn every_shipped_config_passes_floe_validate_and_the_checks_floe_run_makes_first() {
    use floe::source::kafka::{KafkaSource, KafkaSourceConfig};
    // The variables the examples read ("env:VARNAME"); no other test module reads them (they share
    // this process: set once, never changed).
    for (name, value) in [
        ("KAFKA_SASL_USERNAME", "floe"),
        ("KAFKA_SASL_PASSWORD", "dummy"),
        ("POLARIS_CREDENTIAL", "floe:dummy"),
        (
            "FLOE_POSTGRES_URL",
            "postgresql://ingest:dummy@db.internal:5432/lake",
        ),
    ] {
        std::env::set_var(name, value);
    }
    let mut files: Vec<PathBuf> = std::fs::read_dir(config_dir())
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|e| e == "toml"))
        .collect();
    files.sort();
    assert!(files.len() >= 6, "{files:?}");
    let mut problems = Vec::new();
    for file in &files {
        let name = file.file_name().unwrap().to_string_lossy();
        if let Err(errors) = validate::check(file) {
            problems.push(format!("floe validate --config config/{name}:\n{errors}"));
        }
        let config = match Config::load(file) {
            Ok(config) => config,
            Err(errors) => {
                problems.push(format!("floe run --config config/{name}:\n{errors}"));
                continue;
            }
        };
        for channel in &config.channels {
            let SourceConfig::Kafka(kafka) = &channel.source else {
                continue;
            };
            let mut source = KafkaSourceConfig::new(
                &kafka.bootstrap_servers,
                kafka.topics.single().expect("one topic"),
            );
            for (k, v) in &kafka.properties {
                source = source.with_client_property(k, v.value());
            }
            if let Err(e) = KafkaSource::try_new(source) {
                problems.push(format!(
                    "floe run --config config/{name}: channel {}: {e}",
                    channel.name
                ));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// Issue 44: a topic that repeats the channel's name keeps it in its member channel's name
/// (`ev.ev.a`). Member names key the state, leases and DLQ of existing tables (and are recorded
/// in them), so the rule is documented rather than changed: docs/routing.md says so.
#[test]
fn a_member_name_keeps_a_topic_that_repeats_the_channel_name() {
    assert_eq!(floe::channel::members::member_name("ev", "ev.a"), "ev.ev.a");
    let page = std::fs::read_to_string(config_dir().join("../docs/routing.md")).unwrap();
    assert!(
        page.contains("channel `ev` on topic `ev.a` has the member `ev.ev.a`"),
        "docs/routing.md documents the repeated prefix"
    );
}
