//! AWS clients, built once per process from the `[aws]` table (docs/design.md, "Components").
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

pub mod s3;

use std::time::Duration;

use crate::config::aws::{AwsConfig, AwsService};
use aws_config::retry::RetryConfig;
use aws_config::timeout::TimeoutConfig;
use aws_config::{BehaviorVersion, Region, SdkConfig};

/// Connect timeout of every AWS call.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Bound on one attempt of an AWS call (a Kinesis GetRecords returns at most 10 MiB).
pub const OPERATION_ATTEMPT_TIMEOUT: Duration = Duration::from_secs(30);

/// No AWS credentials anywhere the SDK's default chain looks (`CredentialsNotLoaded`): a
/// problem for the operator, said in one line — where floe looked and what to set — while the
/// SDK's own report (every provider of the chain, with its internal details) is kept in
/// `chain` for debug logs.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct CredentialsMissing {
    /// One line: where floe looked and which variable or key to set.
    pub message: String,
    /// The SDK's error with its whole chain of causes.
    pub chain: String,
}

/// The one-line message of [`CredentialsMissing`] for `profile` (`[aws] profile`, else
/// `AWS_PROFILE`, else `default`).
fn no_credentials_message(profile: &str) -> String {
    format!(
        "no AWS credentials were found: looked in the environment (AWS_ACCESS_KEY_ID and \
         AWS_SECRET_ACCESS_KEY, AWS_WEB_IDENTITY_TOKEN_FILE), profile \"{profile}\" of \
         ~/.aws/credentials and ~/.aws/config, the ECS container endpoint and EC2 instance \
         metadata; set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, name a profile that has \
         credentials with [aws] profile (or AWS_PROFILE), or run with an instance or task role"
    )
}

/// The SDK's default HTTPS client (rustls with aws-lc, HTTP/2 where the endpoint negotiates it)
/// trusting the PEM certificates of `ca_bundle` besides the system's roots. The file was
/// checked when the configuration was validated; one that became unreadable since is logged
/// and the system's roots are used alone.
fn https_client_trusting(ca_bundle: &std::path::Path) -> aws_sdk_kinesis::config::SharedHttpClient {
    use aws_smithy_http_client::tls::{self, rustls_provider::CryptoMode, TlsContext, TrustStore};
    let mut trust = TrustStore::default();
    match std::fs::read(ca_bundle) {
        Ok(pem) => {
            trust = trust.with_pem_certificate(pem);
        }
        Err(e) => {
            tracing::error!(ca_bundle = %ca_bundle.display(), error = %e, "aws.ca_bundle unreadable; trusting the system's roots only")
        }
    }
    aws_smithy_http_client::Builder::new()
        .tls_provider(tls::Provider::Rustls(CryptoMode::AwsLc))
        .tls_context(
            TlsContext::builder()
                .with_trust_store(trust)
                .build()
                .expect("a trust store of PEM certificates"),
        )
        .build_https()
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
        if let Some(path) = &config.ca_bundle {
            loader = loader.http_client(https_client_trusting(path));
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

    /// Asks the credential chain for credentials once, so that a process without any fails at
    /// start with one line naming what to set ([`CredentialsMissing`]) instead of at its first
    /// call with the SDK's whole chain. Clients built without AWS ([`AwsClients::for_config`]
    /// for a configuration that uses none) have no chain: `Ok`. A provider's error (say, instance
    /// metadata answering 403) counts as none found; another failure of the chain (a timeout,
    /// a malformed profile) is left to the first call, which retries and reports it.
    ///
    /// Errors: [`CredentialsMissing`] when no provider of the chain has credentials.
    pub async fn check_credentials(&self) -> Result<(), CredentialsMissing> {
        use aws_credential_types::provider::error::CredentialsError;
        use aws_credential_types::provider::ProvideCredentials;
        let Some(provider) = self.sdk.credentials_provider() else {
            return Ok(());
        };
        match provider.provide_credentials().await {
            Ok(_) => Ok(()),
            // No provider had credentials, or the last one asked (the instance metadata
            // service, after the environment, the profile and the container endpoint) answered
            // with an error such as a 403 where IMDS is turned off: either way none were found.
            Err(
                e
                @ (CredentialsError::CredentialsNotLoaded(_) | CredentialsError::ProviderError(_)),
            ) => {
                let profile = self
                    .config
                    .profile
                    .clone()
                    .or_else(|| std::env::var("AWS_PROFILE").ok())
                    .unwrap_or_else(|| "default".to_string());
                Err(CredentialsMissing {
                    message: no_credentials_message(&profile),
                    chain: aws_sdk_s3::error::DisplayErrorContext(&e).to_string(),
                })
            }
            Err(e) => {
                tracing::debug!(error = %aws_sdk_s3::error::DisplayErrorContext(&e), "AWS credentials not resolved at start; the first call tries again");
                Ok(())
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
