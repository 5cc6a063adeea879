//! Tests of the validation of `[channel.schema]`, each rule pinned with the key path it reports.

use crate::config::tests::{
    confluent, confluent_of, errors, parse, refused, replaced, schema, BUCKET_ARN, SQL_CATALOG,
    TEST_CA_PEM, V1,
};
use crate::config::*;
use std::path::PathBuf;

const SCHEMA_ARN: &str = "arn:aws:glue:us-east-1:123456789012:schema/reg/events";

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
