//! AWS clients, built once per process from the `[aws]` table (DESIGN.md, "Components").
//!
//! Credentials and region come from the AWS SDK's default provider chain (environment, shared
//! config and credentials files with `profile`, SSO, web identity, ECS task role, EC2 instance
//! metadata), exactly as the AWS CLI resolves them; the `[aws]` table may name the region and the
//! profile, and point any service at another endpoint (an emulator, a VPC endpoint).
//!
//! ```text
//!   [aws] region, profile, endpoint_url, endpoints.<service>
//!      └─ AwsClients::load ─► SdkConfig (provider chain, timeouts, standard retries)
//!            ├─ dynamodb()  lease store
//!            ├─ kinesis()   source
//!            ├─ glue()      schema registry, Glue catalog
//!            ├─ s3tables()  S3 Tables catalog
//!            └─ s3()        DLQ, warehouse (path-style addressing when the endpoint is overridden)
//! ```
//!
//! Retries: the SDK's standard retry mode (3 attempts, exponential backoff with jitter) covers one
//! call; floe's own loops ([`crate::app`]) retry whole operations on top and report them.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use aws_config::retry::RetryConfig;
use aws_config::timeout::TimeoutConfig;
use aws_config::{BehaviorVersion, Region, SdkConfig};
use serde::Deserialize;

/// Connect timeout of every AWS call.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Bound on one attempt of an AWS call (a Kinesis GetRecords returns at most 10 MiB).
pub const OPERATION_ATTEMPT_TIMEOUT: Duration = Duration::from_secs(30);

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

/// The SDK configuration resolved once for the process, and a constructor per client.
#[derive(Debug, Clone)]
pub struct AwsClients {
    sdk: SdkConfig,
    config: AwsConfig,
}

impl AwsClients {
    /// Resolves region and credentials through the SDK's default chain (no network call is made
    /// here: credentials are fetched lazily at the first request).
    pub async fn load(config: &AwsConfig) -> Self {
        let mut loader = aws_config::defaults(BehaviorVersion::latest())
            .retry_config(RetryConfig::standard())
            .timeout_config(
                TimeoutConfig::builder()
                    .connect_timeout(CONNECT_TIMEOUT)
                    .operation_attempt_timeout(OPERATION_ATTEMPT_TIMEOUT)
                    .build(),
            );
        if let Some(region) = &config.region {
            loader = loader.region(Region::new(region.clone()));
        }
        if let Some(profile) = &config.profile {
            loader = loader.profile_name(profile);
        }
        AwsClients {
            sdk: loader.load().await,
            config: config.clone(),
        }
    }

    /// The clients for `config`: [`AwsClients::load`] when the configuration names an AWS
    /// component (DynamoDB lease store, Kinesis source, S3 DLQ or warehouse, Glue schema, or an
    /// `[aws]` table), otherwise an inert configuration that never looks for credentials or a
    /// region (no instance-metadata probes, no warnings, for Kafka + SQLite setups).
    pub async fn for_config(config: &crate::config::Config) -> Self {
        if config.uses_aws() {
            AwsClients::load(&config.aws).await
        } else {
            AwsClients {
                sdk: SdkConfig::builder()
                    .behavior_version(BehaviorVersion::latest())
                    .build(),
                config: config.aws.clone(),
            }
        }
    }

    /// The validated `[aws]` table these clients were built from.
    pub fn config(&self) -> &AwsConfig {
        &self.config
    }

    /// The region the SDK resolved, if any.
    pub fn region(&self) -> Option<&str> {
        self.sdk.region().map(Region::as_ref)
    }

    /// The shared SDK configuration (for clients of services not listed here).
    pub fn sdk_config(&self) -> &SdkConfig {
        &self.sdk
    }

    /// A DynamoDB client.
    pub fn dynamodb(&self) -> aws_sdk_dynamodb::Client {
        let mut builder = aws_sdk_dynamodb::config::Builder::from(&self.sdk);
        if let Some(url) = self.config.endpoint(AwsService::Dynamodb) {
            builder = builder.endpoint_url(url);
        }
        aws_sdk_dynamodb::Client::from_conf(builder.build())
    }

    /// A Kinesis Data Streams client.
    pub fn kinesis(&self) -> aws_sdk_kinesis::Client {
        let mut builder = aws_sdk_kinesis::config::Builder::from(&self.sdk);
        if let Some(url) = self.config.endpoint(AwsService::Kinesis) {
            builder = builder.endpoint_url(url);
        }
        aws_sdk_kinesis::Client::from_conf(builder.build())
    }

    /// A Glue client (the schema registry).
    pub fn glue(&self) -> aws_sdk_glue::Client {
        let mut builder = aws_sdk_glue::config::Builder::from(&self.sdk);
        if let Some(url) = self.config.endpoint(AwsService::Glue) {
            builder = builder.endpoint_url(url);
        }
        aws_sdk_glue::Client::from_conf(builder.build())
    }

    /// An S3 Tables client (the `s3tables` catalog).
    pub fn s3tables(&self) -> aws_sdk_s3tables::Client {
        self.s3tables_in(None)
    }

    /// An S3 Tables client for `region` (a table bucket ARN's region; `None`: the `[aws]` one).
    pub fn s3tables_in(&self, region: Option<&str>) -> aws_sdk_s3tables::Client {
        let mut builder = aws_sdk_s3tables::config::Builder::from(&self.sdk);
        if let Some(region) = region {
            builder = builder.region(Region::new(region.to_owned()));
        }
        if let Some(url) = self.config.endpoint(AwsService::S3tables) {
            builder = builder.endpoint_url(url);
        }
        aws_sdk_s3tables::Client::from_conf(builder.build())
    }

    /// An S3 client; path-style addressing when the endpoint is overridden (emulators do not
    /// serve virtual-hosted buckets).
    pub fn s3(&self) -> aws_sdk_s3::Client {
        let mut builder = aws_sdk_s3::config::Builder::from(&self.sdk);
        if let Some(url) = self.config.endpoint(AwsService::S3) {
            builder = builder.endpoint_url(url).force_path_style(true);
        }
        aws_sdk_s3::Client::from_conf(builder.build())
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
