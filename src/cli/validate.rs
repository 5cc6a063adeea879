//! `floe validate --config FILE`: checks a configuration without reaching any service.
//!
//! It parses and validates the file ([`Config::load`]: every problem with its key path), then
//! reads each channel's schema file and checks it is a JSON object. It prints each problem as a
//! `path: message` line and exits 1, or prints `ok` and exits 0.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use crate::config::{ChannelConfig, Config, ConfigError, ConfigErrors, SchemaConfig};
use crate::schema::MappedSchema;

/// Arguments of `floe validate`.
#[derive(Debug, Clone, clap::Args)]
pub struct ValidateArgs {
    /// Path of the TOML configuration file.
    #[arg(long)]
    pub config: PathBuf,
}

/// Runs `floe validate`: prints every problem (`path: message`, exit 1) or `ok` (exit 0).
pub fn run(args: &ValidateArgs) -> ExitCode {
    match check(&args.config) {
        Ok(_) => {
            println!("ok");
            ExitCode::SUCCESS
        }
        Err(ConfigErrors(errors)) => {
            for error in errors {
                println!("{error}");
            }
            ExitCode::FAILURE
        }
    }
}

/// Loads and validates the configuration at `path`, then checks each channel's schema file.
///
/// Errors: every problem found, each with its key path.
pub fn check(path: &Path) -> Result<Config, ConfigErrors> {
    let config = Config::load(path)?;
    let mut errors = Vec::new();
    for (i, channel) in config.channels.iter().enumerate() {
        if let Err(e) = check_schema(i, channel) {
            errors.push(e);
        }
    }
    if errors.is_empty() {
        Ok(config)
    } else {
        Err(ConfigErrors(errors))
    }
}

/// Reads channel `index`'s schema file and maps it as `floe run` will (nesting, unions, the
/// partition field), so a schema refused here would stop the channel. With
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
        Some(SchemaConfig::Glue { .. }) | None => return Ok(None),
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
    if let Some(versions) = versions {
        let mut listed = Vec::new();
        for (id, path) in versions {
            let doc = read_schema(path).map_err(|m| error(&format!("versions.\"{id}\""), m))?;
            listed.push((*id, doc));
        }
        if crate::convert::gsr::split_versions(&schema, listed)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validate_refuses_a_schema_that_run_would_refuse_naming_the_key() {
        let dir = tempfile::tempdir().unwrap();
        let config = include_str!("../../config/quickstart.toml");
        std::fs::write(dir.path().join("floe.toml"), config).unwrap();
        // No date-time partition field: `floe run` refuses it, so must `floe validate`.
        std::fs::write(
            dir.path().join("event.schema.json"),
            r#"{"type":"object","properties":{"id":{"type":"integer"},"event_time":{"type":"string"}}}"#,
        )
        .unwrap();
        let errors = check(&dir.path().join("floe.toml")).unwrap_err();
        assert!(
            errors
                .0
                .iter()
                .any(|e| e.path == "channel[0].schema.file" && e.message.contains("event_time")),
            "{errors}"
        );
        // The shipped schema passes.
        std::fs::write(
            dir.path().join("event.schema.json"),
            include_str!("../../config/event.schema.json"),
        )
        .unwrap();
        assert!(check(&dir.path().join("floe.toml")).is_ok());
    }
}
