//! Validation of `[aws]` (region, endpoints, CA bundle) and of the AWS names other sections
//! share: S3 locations, account ids and KMS keys.

use super::Checker;
use crate::config::file::{AwsSection, Section};
use crate::config::S3Location;

impl Checker<'_> {
    pub(super) fn aws(
        &mut self,
        section: Section<AwsSection>,
    ) -> Option<crate::config::aws::AwsConfig> {
        let s = self.section(section, "aws")?;
        let mut ok = true;
        if let Some(region) = &s.region {
            let valid = !region.is_empty()
                && region
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
            if !valid {
                ok = false;
                self.error(
                    "aws.region",
                    format!("\"{region}\" is not an AWS region name such as \"us-east-1\""),
                );
            }
        }
        let mut endpoint_ok = |path: String, url: &str| {
            let valid = url
                .strip_prefix("http://")
                .or_else(|| url.strip_prefix("https://"))
                .is_some_and(|rest| !rest.is_empty() && !rest.contains(char::is_whitespace));
            if !valid {
                self.error(
                    path,
                    format!("\"{url}\" is not an endpoint URL such as \"http://127.0.0.1:5056\""),
                );
            }
            valid
        };
        if let Some(url) = &s.endpoint_url {
            ok &= endpoint_ok("aws.endpoint_url".to_owned(), url);
        }
        for (service, url) in &s.endpoints {
            ok &= endpoint_ok(format!("aws.endpoints.{service}"), url);
        }
        let ca_bundle = match &s.ca_bundle {
            None => None,
            Some(text) => {
                let path = self.ca_bundle("aws.ca_bundle", text);
                ok &= path.is_some();
                path
            }
        };
        ok.then_some(crate::config::aws::AwsConfig {
            region: s.region,
            profile: s.profile,
            endpoint_url: s.endpoint_url,
            endpoints: s.endpoints,
            ca_bundle,
        })
    }

    pub(super) fn s3_location(
        &mut self,
        p: &str,
        bucket: String,
        prefix: String,
        expected_bucket_owner: Option<String>,
        kms_key_arn: Option<String>,
    ) -> Option<S3Location> {
        let mut ok = true;
        let bucket_ok = (3..=63).contains(&bucket.len())
            && bucket
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '.' | '-'))
            && !bucket.starts_with(['.', '-'])
            && !bucket.ends_with(['.', '-']);
        if !bucket_ok {
            ok = false;
            self.error(
                format!("{p}.bucket"),
                format!("\"{bucket}\" is not an S3 bucket name: 3 to 63 characters from a-z 0-9 . -, starting and ending with a letter or digit"),
            );
        }
        if prefix.starts_with('/') {
            ok = false;
            self.error(
                format!("{p}.prefix"),
                format!("\"{prefix}\" starts with '/': S3 keys are relative to the bucket"),
            );
        }
        if let Some(owner) = &expected_bucket_owner {
            ok &= self.account_id(&format!("{p}.expected_bucket_owner"), owner);
        }
        if let Some(arn) = &kms_key_arn {
            ok &= self.kms_key(&format!("{p}.kms_key_arn"), arn);
        }
        ok.then_some(S3Location {
            bucket,
            prefix,
            expected_bucket_owner,
            kms_key_arn,
        })
    }

    /// Whether `id` is a 12-digit AWS account id (error at `path` when not).
    pub(super) fn account_id(&mut self, path: &str, id: &str) -> bool {
        let ok = id.len() == 12 && id.bytes().all(|b| b.is_ascii_digit());
        if !ok {
            self.error(path, format!("\"{id}\" is not a 12-digit AWS account id"));
        }
        ok
    }

    /// Whether `arn` is a customer-managed KMS key ARN ([`crate::config::aws::check_kms_key_arn`]).
    pub(super) fn kms_key(&mut self, path: &str, arn: &str) -> bool {
        match crate::config::aws::check_kms_key_arn(arn) {
            Ok(()) => true,
            Err(why) => {
                self.error(path, why);
                false
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use crate::config::tests::{aws_config, iceberg, parse, refused, TEST_CA_PEM};
    use crate::config::*;

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
}
