//! The raw Glue call floe makes, `GetSchemaVersion`, with its errors mapped once to
//! [`RegistryError`].

use async_trait::async_trait;
use aws_sdk_glue::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_glue::operation::get_schema_version::GetSchemaVersionError;
use aws_sdk_glue::types::{SchemaId, SchemaVersionNumber};
use uuid::Uuid;

use super::{RegistryError, SchemaRegistry, SchemaVersionInfo, VersionSelector};
use crate::config::GlueSchemaVersion;

/// The Glue Schema Registry through the AWS SDK.
#[derive(Debug, Clone)]
pub struct GlueRegistry {
    client: aws_sdk_glue::Client,
}

impl GlueRegistry {
    /// A registry calling Glue with `client`.
    pub fn new(client: aws_sdk_glue::Client) -> Self {
        GlueRegistry { client }
    }
}

fn map_error<R: std::fmt::Debug>(e: SdkError<GetSchemaVersionError, R>) -> RegistryError {
    let shown = aws_sdk_glue::error::DisplayErrorContext(&e).to_string();
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
