//! Validation of `[channel.schema]`: a JSON Schema file (with the registry's versions for
//! `gsr_json`), a Glue Schema Registry ARN, or a Confluent-compatible registry URL.

use std::collections::BTreeMap;
use std::time::Duration;

use super::{quote_key, Checker};
use crate::config::file::{RegistryUrlText, SchemaSection, SchemaVersionText};
use crate::config::{
    ConfluentSchemaConfig, GlueSchemaVersion, RecordFormat, SchemaConfig, SchemaEvolution,
    SourceConfig, DEFAULT_SCHEMA_POLL_INTERVAL, ENV_REGISTRY_BASIC_AUTH, ENV_REGISTRY_BEARER_TOKEN,
    TABLE_PER_TOPIC,
};

impl Checker<'_> {
    /// Refuses the keys of a Confluent registry (`subject`, `ca_bundle`, `message`) with `why`.
    /// Returns whether none was present.
    pub(super) fn refuse_registry_keys(&mut self, p: &str, s: &SchemaSection, why: &str) -> bool {
        let mut ok = true;
        for (present, key) in [
            (s.subject.is_some(), "subject"),
            (s.ca_bundle.is_some(), "ca_bundle"),
            (s.message.is_some(), "message"),
        ] {
            if present {
                self.error(format!("{p}.{key}"), why.to_string());
                ok = false;
            }
        }
        ok
    }

    /// `[channel.schema]` with `registry_url`: the URLs (http or https, at least one), the
    /// subject (default `default_subject`, the topic-name strategy), `evolution`, `ca_bundle`,
    /// `message` (protobuf only); the format must be a Confluent one.
    pub(super) fn confluent_schema(
        &mut self,
        p: &str,
        url: RegistryUrlText,
        s: SchemaSection,
        format: Option<RecordFormat>,
        default_subject: Option<String>,
    ) -> Option<SchemaConfig> {
        let mut ok = true;
        if let Some(f) = format.filter(|f| !f.is_confluent()) {
            self.error(
                format!("{p}.registry_url"),
                format!(
                    "a Confluent schema registry applies to record.format \"avro\", \"protobuf\" or \"json_sr\", not \"{}\"",
                    f.as_str()
                ),
            );
            ok = false;
        }
        for (present, key) in [
            (s.file.is_some(), "file"),
            (s.glue_schema_arn.is_some(), "glue_schema_arn"),
        ] {
            if present {
                self.error(
                    format!("{p}.{key}"),
                    "give one of `file`, `glue_schema_arn` and `registry_url`",
                );
                ok = false;
            }
        }
        for (present, key, why) in [
            (s.version.is_some(), "version", "the table is created from the subject's latest version; each record names its schema id"),
            (!s.versions.is_empty(), "versions", "the registry is asked for each schema id"),
            (s.poll_interval.is_some(), "poll_interval", "each record names its schema id: nothing to poll"),
        ] {
            if present {
                self.error(format!("{p}.{key}"), format!("not with `registry_url`: {why}"));
                ok = false;
            }
        }
        if s.message.is_some() && format.is_some_and(|f| f != RecordFormat::Protobuf) {
            self.error(
                format!("{p}.message"),
                "`message` applies to record.format = \"protobuf\" only",
            );
            ok = false;
        }
        let key = format!("{p}.registry_url");
        let urls = match url {
            RegistryUrlText::One(u) => vec![u],
            RegistryUrlText::Many(us) => us,
            RegistryUrlText::Other(v) => {
                self.error(
                    &key,
                    format!("{v} is not a URL: a string or a list of strings"),
                );
                Vec::new()
            }
        };
        if urls.is_empty() {
            self.error(&key, "needs at least one URL");
            ok = false;
        }
        let mut clean = Vec::new();
        for u in urls {
            match check_registry_url(&u) {
                Ok(u) => clean.push(u),
                Err(why) => {
                    self.error(&key, format!("\"{u}\": {why}"));
                    ok = false;
                }
            }
        }
        let subject = match s.subject.or(default_subject) {
            Some(subject) if !subject.trim().is_empty() => Some(subject),
            Some(_) => {
                self.error(format!("{p}.subject"), "must not be empty");
                None
            }
            None => {
                self.error(
                    format!("{p}.subject"),
                    "missing: a channel reading several topics into one table names the subject its table is made from (the topic-name strategy gives one subject per topic)",
                );
                None
            }
        };
        let evolution = self.evolution(p, s.evolution.as_deref());
        let ca_bundle = match &s.ca_bundle {
            Some(path) => {
                let resolved = self.ca_bundle(&format!("{p}.ca_bundle"), path);
                ok &= resolved.is_some();
                resolved
            }
            None => None,
        };
        ok.then_some(SchemaConfig::Confluent(ConfluentSchemaConfig {
            urls: clean,
            subject: subject?,
            evolution: evolution?,
            ca_bundle,
            message: s.message,
        }))
    }

    /// `channel.schema.evolution`: `"none"` (default) or `"compatible"`.
    pub(super) fn evolution(&mut self, p: &str, text: Option<&str>) -> Option<SchemaEvolution> {
        match text {
            None | Some("none") => Some(SchemaEvolution::None),
            Some("compatible") => Some(SchemaEvolution::Compatible),
            Some(other) => {
                self.error(
                    format!("{p}.evolution"),
                    format!("\"{other}\" is not a schema evolution: \"none\" or \"compatible\""),
                );
                None
            }
        }
    }

    /// `[channel.schema]`: exactly one of `file` and `glue_schema_arn`; `version` only with the
    /// ARN; `versions` only with `file` on a `gsr_json` channel, which needs it (`format` is `None`
    /// when `[channel.record]` itself is invalid).
    pub(super) fn schema(
        &mut self,
        p: &str,
        s: SchemaSection,
        format: Option<RecordFormat>,
        default_subject: Option<String>,
    ) -> Option<SchemaConfig> {
        let mut s = s;
        if let Some(url) = s.registry_url.take() {
            return self.confluent_schema(p, url, s, format, default_subject);
        }
        if format.is_some_and(|f| f.is_confluent()) {
            self.error(
                format!("{p}.registry_url"),
                "record.format \"avro\", \"protobuf\" and \"json_sr\" read the Confluent wire format: set `registry_url` (the schema registry)",
            );
            return None;
        }
        if !self.refuse_registry_keys(p, &s, "apply to `registry_url` only") {
            return None;
        }
        if format == Some(RecordFormat::GsrAvro) && s.glue_schema_arn.is_none() {
            self.error(
                format!("{p}.glue_schema_arn"),
                "record.format = \"gsr_avro\" needs `glue_schema_arn` (an AVRO schema of the Glue Schema Registry)",
            );
            return None;
        }
        match (s.file.take(), s.glue_schema_arn.take()) {
            (Some(_), Some(_)) => {
                self.error(
                    format!("{p}.glue_schema_arn"),
                    "give either `file` or `glue_schema_arn`, not both",
                );
                None
            }
            (None, None) => {
                self.error(
                    p,
                    "missing the schema: set `file` (a JSON Schema file), `glue_schema_arn` (a schema of the Glue Schema Registry) or `registry_url` (a Confluent-compatible schema registry)",
                );
                None
            }
            (Some(file), None) => self.schema_file(p, file, s, format),
            (None, Some(arn)) => self.glue_schema(p, arn, s, format),
        }
    }

    /// `[channel.schema]` with `file`: a JSON Schema file, with `versions` (the registry's version
    /// id -> file) on a `gsr_json` channel, which needs them.
    fn schema_file(
        &mut self,
        p: &str,
        file: String,
        s: SchemaSection,
        format: Option<RecordFormat>,
    ) -> Option<SchemaConfig> {
        let mut ok = true;
        for (present, key) in [
            (
                s.evolution.as_deref().is_some_and(|e| e != "none"),
                "evolution",
            ),
            (s.poll_interval.is_some(), "poll_interval"),
        ] {
            if present {
                self.error(
                    format!("{p}.{key}"),
                    "schema evolution follows the Glue Schema Registry: it applies to `glue_schema_arn` only",
                );
                ok = false;
            }
        }
        if s.version.is_some() {
            self.error(
                format!("{p}.version"),
                "`version` applies to `glue_schema_arn` only",
            );
            ok = false;
        }
        let file = self.local_path(&format!("{p}.file"), &file);
        let gsr = format == Some(RecordFormat::GsrJson);
        if s.versions.is_empty() {
            if gsr {
                self.error(
                    format!("{p}.versions"),
                    "record.format = \"gsr_json\" with a schema file needs the registry's versions: `[channel.schema.versions]` \"VERSION-UUID\" = \"FILE\" (or use `glue_schema_arn`)",
                );
                return None;
            }
            return file.filter(|_| ok).map(SchemaConfig::File);
        }
        if format == Some(RecordFormat::Json) {
            self.error(
                format!("{p}.versions"),
                "schema versions apply to record.format = \"gsr_json\" only",
            );
            return None;
        }
        let mut versions = BTreeMap::new();
        for (id, path) in s.versions {
            let key = format!("{p}.versions.{}", quote_key(&id));
            let id = match uuid::Uuid::parse_str(&id) {
                Ok(id) => Some(id),
                Err(_) => {
                    self.error(&key, format!("\"{id}\" is not a schema version id (a UUID such as \"3f36e6d8-d20e-43b7-90ea-3ad724880d60\")"));
                    None
                }
            };
            match (id, self.local_path(&key, &path)) {
                (Some(id), Some(path)) => {
                    versions.insert(id, path);
                }
                _ => ok = false,
            }
        }
        ok.then_some(SchemaConfig::FileVersions {
            file: file?,
            versions,
        })
    }

    /// `[channel.schema]` with `glue_schema_arn`: the schema's version (a number or `"latest"`),
    /// `evolution`, and `poll_interval` where the table follows the latest version.
    fn glue_schema(
        &mut self,
        p: &str,
        arn: String,
        s: SchemaSection,
        format: Option<RecordFormat>,
    ) -> Option<SchemaConfig> {
        let mut ok = true;
        if let Err(why) = crate::config::aws::check_schema_arn(&arn) {
            self.error(format!("{p}.glue_schema_arn"), why);
            ok = false;
        }
        if !s.versions.is_empty() {
            self.error(
                format!("{p}.versions"),
                "`versions` applies to a schema `file`; with `glue_schema_arn` the registry is asked",
            );
            ok = false;
        }
        let version = match s.version {
            None => Some(GlueSchemaVersion::Latest),
            Some(SchemaVersionText::Text(t)) if t == "latest" => Some(GlueSchemaVersion::Latest),
            Some(SchemaVersionText::Number(n)) if n >= 1 => Some(GlueSchemaVersion::Number(n)),
            Some(other) => {
                let shown = match other {
                    SchemaVersionText::Number(n) => n.to_string(),
                    SchemaVersionText::Text(t) => format!("\"{t}\""),
                    SchemaVersionText::Other(v) => v.to_string(),
                };
                self.error(
                    format!("{p}.version"),
                    format!("{shown} is not a schema version: a number from 1, or \"latest\""),
                );
                None
            }
        };
        let evolution = self.evolution(p, s.evolution.as_deref());
        let polls =
            evolution == Some(SchemaEvolution::Compatible) && format == Some(RecordFormat::Json);
        if polls && matches!(version, Some(GlueSchemaVersion::Number(_))) {
            self.error(
                format!("{p}.version"),
                "with record.format = \"json\" and evolution = \"compatible\" the table follows the latest version: set version = \"latest\" (or record.format = \"gsr_json\", where each record names its version)",
            );
            ok = false;
        }
        if s.poll_interval.is_some() && !polls {
            self.error(
                format!("{p}.poll_interval"),
                "applies only with evolution = \"compatible\" on a record.format = \"json\" channel (a gsr_json record names its version)",
            );
            ok = false;
        }
        let poll_interval = self.duration(
            &format!("{p}.poll_interval"),
            s.poll_interval,
            DEFAULT_SCHEMA_POLL_INTERVAL,
            Duration::from_secs(1)..=Duration::from_secs(3600),
        );
        ok.then_some(SchemaConfig::Glue {
            schema_arn: arn,
            version: version?,
            evolution: evolution?,
            poll_interval: poll_interval?,
        })
    }
}

/// A schema registry URL: `http://` or `https://` with a host, no user info (credentials come
/// from the environment only), no query or fragment; returned without a trailing `/`.
fn check_registry_url(url: &str) -> Result<String, String> {
    let rest = url
        .strip_prefix("https://")
        .or_else(|| url.strip_prefix("http://"))
        .ok_or("not an http or https URL such as \"https://registry:8081\"")?;
    if rest.is_empty() || rest.starts_with('/') || rest.contains(char::is_whitespace) {
        return Err("has no host".into());
    }
    if rest.contains(['?', '#']) {
        return Err("must not have a query or fragment".into());
    }
    if rest
        .split('/')
        .next()
        .is_some_and(|authority| authority.contains('@'))
    {
        return Err(format!(
            "must not carry credentials (user info before `@`): set {ENV_REGISTRY_BASIC_AUTH} (\"user:password\") or {ENV_REGISTRY_BEARER_TOKEN} in the environment instead"
        ));
    }
    Ok(url.trim_end_matches('/').to_string())
}

/// The subject of the topic-name strategy: `<topic>-value` (the stream name for Kinesis);
/// `{topic}-value` for a table per topic (each member's topic replaces `{topic}`); none for
/// several topics into one table.
pub(super) fn default_subject(source: &Option<SourceConfig>, per_topic: bool) -> Option<String> {
    match source.as_ref()? {
        SourceConfig::Kafka(_) if per_topic => Some(format!("{TABLE_PER_TOPIC}-value")),
        SourceConfig::Kafka(k) => Some(format!("{}-value", k.topics.single()?)),
        SourceConfig::Kinesis(k) => {
            let name = k.stream.as_str();
            Some(format!("{}-value", name.rsplit('/').next().unwrap_or(name)))
        }
    }
}

#[cfg(test)]
mod tests;
