//! `floe validate --config FILE`: checks a configuration without reaching any service.
//!
//! It parses and validates the file ([`Config::load`]: every problem with its key path), then
//! reads each channel's schema file and checks it is a JSON object. It prints each problem as a
//! `path: message` line and exits 1, or prints `ok` and exits 0.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use crate::config::{Config, ConfigErrors};
use crate::tools::stdout;

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
            stdout::println("ok");
            ExitCode::SUCCESS
        }
        Err(ConfigErrors(errors)) => {
            for error in errors {
                stdout::println(error.to_string());
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
        if let Err(e) = crate::channel::schema_file::check_schema(i, channel) {
            errors.push(e);
        }
    }
    if errors.is_empty() {
        Ok(config)
    } else {
        Err(ConfigErrors(errors))
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
