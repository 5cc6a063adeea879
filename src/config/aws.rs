//! The validated `[aws]` table, and the AWS-specific value checks config validation makes
//! (KMS key ARNs). The clients built from it are in [`crate::aws`].

use std::collections::BTreeMap;
use std::fmt;

use serde::Deserialize;

/// An AWS service floe calls, as named in `[aws.endpoints]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AwsService {
    /// Amazon DynamoDB (lease store).
    Dynamodb,
    /// Amazon Kinesis Data Streams (source).
    Kinesis,
    /// Amazon S3 (DLQ, warehouse, raw delivery).
    S3,
    /// AWS Glue (schema registry, Glue catalog).
    Glue,
    /// Amazon S3 Tables (catalog).
    S3tables,
}

impl AwsService {
    /// Every service, in config-key order.
    pub const ALL: [AwsService; 5] = [
        AwsService::Dynamodb,
        AwsService::Kinesis,
        AwsService::S3,
        AwsService::Glue,
        AwsService::S3tables,
    ];

    /// The key of this service in `[aws.endpoints]`.
    pub fn key(self) -> &'static str {
        match self {
            AwsService::Dynamodb => "dynamodb",
            AwsService::Kinesis => "kinesis",
            AwsService::S3 => "s3",
            AwsService::Glue => "glue",
            AwsService::S3tables => "s3tables",
        }
    }
}

impl fmt::Display for AwsService {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.key())
    }
}

/// The validated `[aws]` table. Every field is optional: by default the SDK's provider chain
/// decides region and credentials, and every service uses its AWS endpoint.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AwsConfig {
    /// AWS region (`us-east-1`); `None`: from `AWS_REGION` or the profile.
    pub region: Option<String>,
    /// Named profile of the shared config files; `None`: `AWS_PROFILE` or `default`.
    pub profile: Option<String>,
    /// Endpoint URL for every service (an emulator such as moto on one port), `http(s)://host:port`.
    pub endpoint_url: Option<String>,
    /// Per-service endpoint URLs; win over `endpoint_url`.
    pub endpoints: BTreeMap<AwsService, String>,
    /// A PEM file of CA certificates trusted for HTTPS endpoints besides the system's roots
    /// (an endpoint behind a private CA); `None`: the system's roots only.
    pub ca_bundle: Option<std::path::PathBuf>,
}

impl AwsConfig {
    /// The endpoint URL `service` is called at, `None` for AWS's own.
    pub fn endpoint(&self, service: AwsService) -> Option<&str> {
        self.endpoints
            .get(&service)
            .or(self.endpoint_url.as_ref())
            .map(String::as_str)
    }
}

/// Whether `arn` is a customer-managed KMS key given by its full key ARN
/// (`arn:<partition>:kms:<region>:<account>:key/<key id>`). Aliases (`alias/…`, alias ARNs) and
/// bare key ids are refused: an alias can be repointed, and the AWS-managed key `aws/s3` cannot be
/// shared across accounts. Returns the reason when not.
pub fn check_kms_key_arn(arn: &str) -> Result<(), String> {
    let parts: Vec<&str> = arn.splitn(6, ':').collect();
    if arn.starts_with("alias/") || arn.contains(":alias/") {
        return Err(format!(
            "{arn:?} is a KMS alias; give the full key ARN (arn:aws:kms:REGION:ACCOUNT:key/KEY-ID) of a customer-managed key"
        ));
    }
    match parts.as_slice() {
        ["arn", partition, "kms", region, account, resource]
            if !partition.is_empty()
                && !region.is_empty()
                && !arn.contains(char::is_whitespace)
                && account.len() == 12
                && account.bytes().all(|b| b.is_ascii_digit())
                && resource
                    .strip_prefix("key/")
                    .is_some_and(|id| !id.is_empty()) =>
        {
            Ok(())
        }
        _ => Err(format!(
            "{arn:?} is not a KMS key ARN; expected arn:aws:kms:REGION:ACCOUNT:key/KEY-ID"
        )),
    }
}

/// Checks the form of a Glue schema ARN, `arn:PARTITION:glue:REGION:ACCOUNT:schema/REGISTRY/SCHEMA`;
/// returns the reason when it is not one.
pub fn check_schema_arn(arn: &str) -> Result<(), String> {
    let parts: Vec<&str> = arn.splitn(6, ':').collect();
    let ok = match parts.as_slice() {
        ["arn", partition, "glue", region, account, resource] => {
            let names: Vec<&str> = resource
                .strip_prefix("schema/")
                .map(|r| r.split('/').collect())
                .unwrap_or_default();
            !partition.is_empty()
                && !region.is_empty()
                && account.len() == 12
                && account.bytes().all(|b| b.is_ascii_digit())
                && names.len() == 2
                && names.iter().all(|n| {
                    (1..=255).contains(&n.len())
                        && n.chars().all(|c| {
                            c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '$' | '#' | '.')
                        })
                })
        }
        _ => false,
    };
    if ok {
        Ok(())
    } else {
        Err(format!(
            "\"{arn}\" is not a Glue schema ARN such as \"arn:aws:glue:us-east-1:123456789012:schema/REGISTRY/SCHEMA\""
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn per_service_endpoint_wins_over_the_shared_one() {
        let config = AwsConfig {
            endpoint_url: Some("http://127.0.0.1:5056".into()),
            endpoints: [(AwsService::Kinesis, "http://127.0.0.1:4567".to_owned())].into(),
            ..AwsConfig::default()
        };
        assert_eq!(
            config.endpoint(AwsService::Kinesis),
            Some("http://127.0.0.1:4567")
        );
        assert_eq!(
            config.endpoint(AwsService::S3),
            Some("http://127.0.0.1:5056")
        );
        assert_eq!(AwsConfig::default().endpoint(AwsService::S3), None);
    }

    #[test]
    fn kms_keys_must_be_full_key_arns() {
        assert!(check_kms_key_arn(
            "arn:aws:kms:us-east-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab"
        )
        .is_ok());
        for bad in [
            "alias/aws/s3",
            "alias/my-key",
            "arn:aws:kms:us-east-1:123456789012:alias/my-key",
            "arn:aws:kms:us-east-1:123456789012:alias/aws/s3",
            "1234abcd-12ab-34cd-56ef-1234567890ab",
            "arn:aws:kms:us-east-1:1234:key/abc",
            "arn:aws:s3:::bucket",
            "arn:aws:kms:us-east-1:123456789012:key/",
            // Found by a break test: a trailing space passed validation.
            "arn:aws:kms:us-east-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab ",
        ] {
            assert!(check_kms_key_arn(bad).is_err(), "{bad} accepted");
        }
    }
}
