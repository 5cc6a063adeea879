//! `floe validate --config FILE`: checks a configuration without reaching any service.
//!
//! It parses and validates the file ([`Config::load`]: every problem with its key path), then
//! reads each channel's schema file and checks it is a JSON object. It prints each problem as a
//! `path: message` line and exits 1, or prints `ok` and exits 0.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use crate::config::{Config, ConfigError, ConfigErrors, SchemaConfig};

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
        let SchemaConfig::File(file) = &channel.schema;
        let key = format!("channel[{i}].schema.file");
        let text = match std::fs::read(file) {
            Ok(text) => text,
            Err(e) => {
                errors.push(ConfigError {
                    path: key,
                    message: format!("cannot read {}: {e}", file.display()),
                });
                continue;
            }
        };
        match serde_json::from_slice::<serde_json::Value>(&text) {
            Ok(serde_json::Value::Object(_schema)) => {
                // integrator: map schema here — map `_schema` to the Iceberg schema with the
                // schema module and check `destination.partition_field` is a required top-level
                // `date-time` string; push a ConfigError at `channel[i].schema.file` (or
                // `channel[i].destination.partition_field`) for each problem.
            }
            Ok(_) => errors.push(ConfigError {
                path: key,
                message: format!(
                    "{} is not a JSON Schema: expected a JSON object",
                    file.display()
                ),
            }),
            Err(e) => errors.push(ConfigError {
                path: key,
                message: format!("{} is not JSON: {e}", file.display()),
            }),
        }
    }
    if errors.is_empty() {
        Ok(config)
    } else {
        Err(ConfigErrors(errors))
    }
}
