//! The raw Glue call floe makes, `GetSchemaVersion`, with its errors mapped once to
//! [`RegistryError`].

use async_trait::async_trait;
use aws_config::timeout::TimeoutConfig;
use aws_sdk_glue::config::Region;
use aws_sdk_glue::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_glue::operation::get_schema_version::GetSchemaVersionError;
use aws_sdk_glue::types::{SchemaId, SchemaVersionNumber};
use uuid::Uuid;

use super::{
    RegistryError, SchemaRegistry, SchemaVersionInfo, VersionSelector, GLUE_ATTEMPT_TIMEOUT,
    GLUE_OPERATION_TIMEOUT,
};
use crate::config::GlueSchemaVersion;

/// The Glue Schema Registry through the AWS SDK.
#[derive(Debug, Clone)]
pub struct GlueRegistry {
    client: aws_sdk_glue::Client,
}

impl GlueRegistry {
    /// A registry calling Glue with `client`'s configuration (credentials, endpoint overrides),
    /// with the lookup timeouts [`GLUE_OPERATION_TIMEOUT`] and [`GLUE_ATTEMPT_TIMEOUT`], and in
    /// `region` when given (the region of the schema ARN: a schema is served by the Glue of its
    /// region only).
    pub fn new(client: aws_sdk_glue::Client, region: Option<&str>) -> Self {
        let config = client.config();
        let timeouts = TimeoutConfig::builder()
            .operation_timeout(GLUE_OPERATION_TIMEOUT)
            .operation_attempt_timeout(GLUE_ATTEMPT_TIMEOUT)
            .build();
        let timeouts = match config.timeout_config() {
            Some(base) => {
                let mut t = timeouts;
                t.take_defaults_from(base);
                t
            }
            None => timeouts,
        };
        let mut builder = config.to_builder().timeout_config(timeouts);
        if let Some(region) = region {
            if config.region().map(|r| r.as_ref()) != Some(region) {
                builder = builder.region(Region::new(region.to_string()));
            }
        }
        GlueRegistry {
            client: aws_sdk_glue::Client::from_conf(builder.build()),
        }
    }
}

/// An SDK error as one line for operators: the Glue error code and message for a service error,
/// the chain of causes (their `Display`, never the raw response or a `Debug` dump) otherwise.
fn describe<R>(e: &SdkError<GetSchemaVersionError, R>) -> String
where
    R: std::fmt::Debug,
{
    if let SdkError::ServiceError(s) = e {
        let err = s.err();
        if let Some(code) = err.code() {
            return match err.message() {
                Some(message) => format!("{code}: {message}"),
                None => code.to_string(),
            };
        }
    }
    let mut shown = e.to_string();
    let mut cause = std::error::Error::source(e);
    while let Some(c) = cause {
        let text = c.to_string();
        if !shown.contains(&text) {
            shown = format!("{shown}: {text}");
        }
        cause = c.source();
    }
    shown
}

fn map_error<R: std::fmt::Debug>(e: SdkError<GetSchemaVersionError, R>) -> RegistryError {
    let shown = describe(&e);
    match &e {
        SdkError::ServiceError(s) => match s.err() {
            GetSchemaVersionError::EntityNotFoundException(_) => RegistryError::NotFound(shown),
            GetSchemaVersionError::InvalidInputException(_)
            | GetSchemaVersionError::AccessDeniedException(_) => RegistryError::Refused(shown),
            other if other.code() == Some("ThrottlingException") => {
                RegistryError::Unavailable(shown)
            }
            _ => RegistryError::Unavailable(shown),
        },
        _ => RegistryError::Unavailable(shown),
    }
}

#[async_trait]
impl SchemaRegistry for GlueRegistry {
    async fn get_schema_version(
        &self,
        selector: &VersionSelector,
    ) -> Result<SchemaVersionInfo, RegistryError> {
        let request = self.client.get_schema_version();
        let request = match selector {
            VersionSelector::Id(id) => request.schema_version_id(id.to_string()),
            VersionSelector::Arn {
                schema_arn,
                version,
            } => {
                let number = match version {
                    GlueSchemaVersion::Latest => {
                        SchemaVersionNumber::builder().latest_version(true)
                    }
                    GlueSchemaVersion::Number(n) => {
                        SchemaVersionNumber::builder().version_number(*n)
                    }
                };
                request
                    .schema_id(SchemaId::builder().schema_arn(schema_arn).build())
                    .schema_version_number(number.build())
            }
        };
        let out = request.send().await.map_err(map_error)?;
        let incomplete = |what: &str| {
            RegistryError::Unavailable(format!("GetSchemaVersion answered without {what}"))
        };
        let version_id = out
            .schema_version_id()
            .ok_or_else(|| incomplete("SchemaVersionId"))?;
        let version_id = Uuid::parse_str(version_id).map_err(|e| {
            RegistryError::Refused(format!("SchemaVersionId {version_id:?} is not a UUID: {e}"))
        })?;
        Ok(SchemaVersionInfo {
            version_id,
            schema_arn: out
                .schema_arn()
                .ok_or_else(|| incomplete("SchemaArn"))?
                .to_string(),
            version_number: out.version_number().unwrap_or_default(),
            data_format: out
                .data_format()
                .map(|f| f.as_str().to_string())
                .ok_or_else(|| incomplete("DataFormat"))?,
            definition: out
                .schema_definition()
                .ok_or_else(|| incomplete("SchemaDefinition"))?
                .to_string(),
        })
    }
}
