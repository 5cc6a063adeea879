//! A channel's schema given as a file (`[channel.schema] file`, optionally with `versions`):
//! read and mapped exactly as activation maps it, so `floe validate` and `floe run` refuse the
//! same schemas.

use std::path::Path;

use crate::config::{ChannelConfig, ConfigError, SchemaConfig};
use crate::schema::MappedSchema;

/// Reads channel `index`'s schema file and maps it as `floe run` will (nesting, unions, the
/// partition field, the partition spec's terms, the upsert key), so a schema refused here would stop the channel. With
/// `[channel.schema.versions]`, one of the listed versions must be that file. A Glue schema is
/// not checked here (`None`): it is resolved when the channel is created or activated.
///
/// Errors: the problem, at key path `channel[index].schema.file` (or `.versions`).
pub fn check_schema(
    index: usize,
    channel: &ChannelConfig,
) -> Result<Option<MappedSchema>, ConfigError> {
    let (file, versions) = match &channel.schema {
        Some(SchemaConfig::File(file)) => (file, None),
        Some(SchemaConfig::FileVersions { file, versions }) => (file, Some(versions)),
        Some(SchemaConfig::Glue { .. } | SchemaConfig::Confluent(_)) | None => return Ok(None),
    };
    let error = |key: &str, message: String| ConfigError {
        path: format!("channel[{index}].schema.{key}"),
        message,
    };
    let schema = read_schema(file).map_err(|m| error("file", m))?;
    let Some(dest) = channel.destination.iceberg() else {
        return Ok(None);
    };
    let mapped = MappedSchema::from_json_schema(&schema, &dest.partition_field)
        .map_err(|e| error("file", format!("{}: {e}", file.display())))?;
    crate::config::cdc::check_row_schema(channel.record.envelope, mapped.iceberg_schema())
        .map_err(|m| error("file", format!("{}: {m}", file.display())))?;
    crate::schema::partition::unbound_spec(&dest.partition, mapped.iceberg_schema()).map_err(
        |(i, message)| ConfigError {
            path: format!("channel[{index}].destination.partition[{i}]"),
            message: format!("{message} (schema file {})", file.display()),
        },
    )?;
    crate::schema::sort::sort_order(&dest.sort, mapped.iceberg_schema()).map_err(
        |(i, message)| ConfigError {
            path: format!("channel[{index}].destination.sort[{i}]"),
            message: format!("{message} (schema file {})", file.display()),
        },
    )?;
    if let Some(route) = &dest.route {
        route
            .check_field(mapped.iceberg_schema())
            .map_err(|message| ConfigError {
                path: format!("channel[{index}].destination.route_field"),
                message: format!("{message} (schema file {})", file.display()),
            })?;
        route
            .check_routes(mapped.iceberg_schema())
            .map_err(|message| ConfigError {
                path: format!("channel[{index}].destination.routes"),
                message: format!("{message} (schema file {})", file.display()),
            })?;
    }
    crate::config::cdc::check_key(&dest.key, mapped.iceberg_schema()).map_err(|message| {
        ConfigError {
            path: format!("channel[{index}].destination.key"),
            message: format!("{message} (schema file {})", file.display()),
        }
    })?;
    if let Some(versions) = versions {
        let mut listed = Vec::new();
        for (id, path) in versions {
            let doc = read_schema(path).map_err(|m| error(&format!("versions.\"{id}\""), m))?;
            listed.push((*id, doc));
        }
        if crate::registry::channel_schema::split_versions(&schema, listed)
            .0
            .is_none()
        {
            return Err(error(
                "versions",
                format!(
                    "none of the listed versions is the schema file {} (the channel's version is the one whose document equals it)",
                    file.display()
                ),
            ));
        }
    }
    Ok(Some(mapped))
}

fn read_schema(file: &Path) -> Result<serde_json::Value, String> {
    let text = std::fs::read(file).map_err(|e| format!("cannot read {}: {e}", file.display()))?;
    match serde_json::from_slice::<serde_json::Value>(&text) {
        Ok(schema @ serde_json::Value::Object(_)) => Ok(schema),
        Ok(_) => Err(format!(
            "{} is not a JSON Schema: expected a JSON object",
            file.display()
        )),
        Err(e) => Err(format!("{} is not JSON: {e}", file.display())),
    }
}
