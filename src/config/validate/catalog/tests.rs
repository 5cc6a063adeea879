//! Tests of the validation of `[channel.destination.catalog]` (SQL, REST, S3 Tables, Glue), each
//! rule pinned with the key path it reports.

use std::path::Path;

use crate::config::tests::{
    env, env_with, iceberg, parse, refused, replaced, BUCKET_ARN, SQL_CATALOG,
};
use crate::config::*;

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

const KEY_ARN: &str = "arn:aws:kms:us-east-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab";

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
