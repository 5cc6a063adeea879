//! `floe records check`: shows what floe will do with sample records before a channel is deployed —
//! the same schema mapping ([`crate::schema`]) and conversion ([`crate::convert`]) as the daemon, one
//! JSON line per input record.
//!
//! ```text
//! floe records check --schema FILE [--partition-field NAME | --partition TERM ... | --config FILE [--channel NAME]]
//!                    [--format json|gsr_json|json_sr|avro|protobuf] [--message NAME]
//!                    [--schema-version UUID=FILE ...] [--encoding lines|hex] [INPUT|-]
//!                    [--schema-id ID] [--registry-url URL] [--subject SUBJECT]
//! ```
//!
//! Input: one record per line (`\n`-separated; a blank line is a zero-byte record; a final newline
//! ends the last record), as text (`lines`) or as hex (`hex`, for binary GSR framing). Output, one
//! line per record, in input order:
//! `{"index": n, "row": {...}, "partition": {"<field>_hour": 495452}, "hour": "2026-07-09-20"}`
//! (the partition value as hours since the epoch, and the hour in the Iceberg spec's
//! human-readable form, as floe prints hours elsewhere) or
//! `{"index": n, "dlq": {"code": "...", "field": "/json/pointer", "message": "..."}}`, row values in
//! the Iceberg JSON single-value serialization ([`crate::convert::render`]).
//!
//! For `gsr_json`, `--schema-version UUID=FILE` lists the registry's versions; the channel's version is
//! the one whose schema document equals `--schema`; any other listed version is `SCHEMA_MISMATCH`, an
//! unlisted one `INVALID_SCHEMA`. With `--evolution compatible`, a listed version is checked as the
//! daemon would under `evolution = "compatible"`, against a table that starts at `--schema` and
//! evolves as the input meets versions: the first record of a version that evolves the table
//! carries `"evolution": {"schema_version": "…", "changes": ["added …", "widened …"]}` beside its
//! row; a version that is not a compatible evolution is `SCHEMA_MISMATCH` naming the first
//! difference.
//!
//! For `json_sr` (the Confluent wire format), a record whose schema id is `--schema-id` (any id,
//! offline, without `--schema-id`) is converted with `--schema`; with `--registry-url` any other
//! id is looked up and converted with its own schema (`SCHEMA_MISMATCH` when it is not a version
//! of `--subject`, `INVALID_SCHEMA` when the registry does not have it). Bad framing is
//! `DESERIALIZATION_ERROR`.
//!
//! `avro` and `protobuf` are checked the same way, `--schema` being an Avro schema (`.avsc`, JSON)
//! or a `.proto` file (imports: the well-known types only; schemas with references are checked
//! through the registry). For `protobuf`, `--message` (a full name, `package.Message`; default the
//! file's first message) is the channel's message: a record of `--schema-id` whose message indexes
//! name another message is `SCHEMA_MISMATCH`. The default partition field is the only top-level
//! `timestamp-millis`/`timestamp-micros` field (Avro) or singular `google.protobuf.Timestamp`
//! (Protobuf).
//!
//! The partition spec is `hour(--partition-field)` by default (the schema's only time field). A
//! channel with another spec is checked with it: `--partition TERM` (repeatable, the terms of
//! `[channel.destination] partition`, `--partition none` for an unpartitioned table) or
//! `--config FILE [--channel NAME]` (that channel's spec, as `floe run` reads it). The spec is
//! checked against the schema as the table's would be, and each row's `"partition"` holds one
//! value per term, named as the table names its partition fields (`event_time_day`,
//! `id_bucket`), computed by iceberg-rust's transforms; `"hour"` is printed when the spec has a
//! time field.
//!
//! Exit status (for a CI gate): 0 when every record would be a row, 1 when at least one would go
//! to the DLQ (each line says why), 2 when the check could not run (setup refused: schema or
//! spec refused, unreadable file, bad flag value; or the input unreadable; the reason on stderr).

use std::io::{BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use serde_json::{json, Value};
use uuid::Uuid;

use arrow_array::RecordBatch;

use crate::convert::render::row_to_json;
use crate::convert::{Converter, DlqCode, DlqReason};
use crate::registry::channel_schema::split_versions;
use crate::registry::framing::gsr::GsrDecoder;
use crate::schema::partition::{time_field, unbound_spec, PartitionTerm};
use crate::schema::{date_time_fields, MappedSchema};

/// How records are framed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum RecordFormat {
    /// Plain JSON.
    #[value(name = "json")]
    Json,
    /// The Glue Schema Registry wire format (18-byte header, then JSON, optionally zlib).
    #[value(name = "gsr_json")]
    GsrJson,
    /// The Confluent wire format with a JSON document (magic byte, schema id, JSON).
    #[value(name = "json_sr")]
    JsonSr,
    /// The Confluent wire format with Avro binary.
    #[value(name = "avro")]
    Avro,
    /// The Confluent wire format with Protobuf (message indexes after the id).
    #[value(name = "protobuf")]
    Protobuf,
}

/// `--evolution`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Evolution {
    /// Records of another version are `SCHEMA_MISMATCH`.
    #[value(name = "none")]
    None,
    /// Compatible versions evolve the table.
    #[value(name = "compatible")]
    Compatible,
}

/// How the input file holds the records.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum InputEncoding {
    /// One record per line, as is.
    Lines,
    /// One record per line, as hexadecimal (for binary framing).
    Hex,
}

/// Arguments of `floe records check`.
#[derive(Clone, Debug, clap::Args)]
pub struct RecordsCheckArgs {
    /// The channel's schema: a JSON Schema file (draft-04 or draft-07; no `$schema` means
    /// draft-07) for `json`, `gsr_json` and `json_sr`; an Avro schema (`.avsc`) for `avro`; a
    /// `.proto` file for `protobuf`.
    #[arg(long, value_name = "FILE")]
    pub schema: PathBuf,
    /// The partition field (a top-level `timestamptz`: a string with format date-time, an Avro
    /// `timestamp-millis`/`timestamp-micros`, a `google.protobuf.Timestamp`). Default: the
    /// schema's only such field.
    #[arg(long, value_name = "NAME", conflicts_with_all = ["partition", "config"])]
    pub partition_field: Option<String>,
    /// The channel's partition spec, one term per flag as `[channel.destination] partition`
    /// writes them (`--partition 'day(event_time)' --partition 'bucket(16, id)'`), or
    /// `--partition none` for an unpartitioned table. Default: `hour(--partition-field)`.
    #[arg(long = "partition", value_name = "TERM", conflicts_with = "config")]
    pub partition: Vec<String>,
    /// A configuration file: the partition spec is the channel's (`--channel`), as `floe run`
    /// reads it.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// The channel of `--config` whose partition spec applies. Default: the file's only channel.
    #[arg(long, value_name = "NAME", requires = "config")]
    pub channel: Option<String>,
    /// Record framing.
    #[arg(long, value_enum, default_value = "json")]
    pub format: RecordFormat,
    /// The message of the `.proto` file the channel's records hold (`--format protobuf`), by full
    /// name (`package.Message`). Default: the file's first message.
    #[arg(long, value_name = "NAME")]
    pub message: Option<String>,
    /// A schema version of the registry, for `gsr_json` (repeatable): `UUID=FILE`.
    #[arg(long = "schema-version", value_name = "UUID=FILE")]
    pub schema_versions: Vec<String>,
    /// Schema evolution, as `[channel.schema] evolution` (`gsr_json` only): `none` or
    /// `compatible`.
    #[arg(long, value_enum, default_value = "none")]
    pub evolution: Evolution,
    /// The Confluent wire format (`json_sr`, `avro`, `protobuf`): where schema ids are resolved.
    #[command(flatten)]
    pub confluent: ConfluentArgs,
    /// Input encoding.
    #[arg(long, value_enum, default_value = "lines")]
    pub encoding: InputEncoding,
    /// Input file, or `-` for standard input.
    #[arg(value_name = "INPUT", default_value = "-")]
    pub input: String,
}

/// `--schema-id`, `--registry-url`, `--subject`: how a Confluent-framed record's schema id is
/// resolved. A record whose id is `--schema-id` is converted with `--schema`; another id is looked
/// up in the registry (when `--registry-url` is given) and converted with its own schema, or is
/// `SCHEMA_MISMATCH` when it is not a version of `--subject`; without a registry it is
/// `INVALID_SCHEMA` (unknown offline).
#[derive(Clone, Debug, Default, clap::Args)]
pub struct ConfluentArgs {
    /// The registry's id of `--schema` (default: any id is taken as `--schema`'s when there is no
    /// `--registry-url`).
    #[arg(long, value_name = "ID")]
    pub schema_id: Option<u32>,
    /// A Confluent-compatible schema registry to look ids up in (credentials from
    /// FLOE_SCHEMA_REGISTRY_BASIC_AUTH or FLOE_SCHEMA_REGISTRY_BEARER_TOKEN).
    #[arg(long, value_name = "URL")]
    pub registry_url: Option<String>,
    /// The channel's subject: ids of other subjects are `SCHEMA_MISMATCH`.
    #[arg(long, value_name = "SUBJECT")]
    pub subject: Option<String>,
}

/// The state of a check of Confluent-framed records.
pub struct ConfluentCheck {
    protobuf: bool,
    schema_id: Option<u32>,
    /// For `protobuf`: the message indexes of `--message` (`[0]`, the first message, by default)
    /// and its name.
    own_message: Option<(Vec<i32>, String)>,
    registry: Option<(
        tokio::runtime::Runtime,
        crate::registry::confluent::ConfluentClient,
    )>,
    subject: Option<String>,
    partition: String,
    /// A converter per schema id met (other than `--schema-id`), or why its records are refused.
    converters: std::collections::HashMap<
        crate::registry::framing::confluent::SchemaKey,
        Result<Converter, DlqReason>,
    >,
}

impl ConfluentCheck {
    fn new(args: &ConfluentArgs, protobuf: bool, partition: &str) -> Result<Self, Refusal> {
        let registry = match &args.registry_url {
            None => None,
            Some(url) => {
                let auth = crate::registry::confluent::auth_from_env(|k| std::env::var(k).ok())
                    .map_err(|e| Refusal(e.to_string()))?;
                let http = crate::registry::confluent::api::HttpRegistry::new(
                    &[url.trim_end_matches('/').to_string()],
                    auth,
                    None,
                )
                .map_err(|e| Refusal(e.to_string()))?;
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .map_err(|e| Refusal(format!("async runtime: {e}")))?;
                let subject = args.subject.clone().unwrap_or_default();
                Some((
                    runtime,
                    crate::registry::confluent::ConfluentClient::new(http, &subject),
                ))
            }
        };
        Ok(ConfluentCheck {
            protobuf,
            schema_id: args.schema_id,
            own_message: None,
            registry,
            subject: args.subject.clone(),
            partition: partition.to_string(),
            converters: Default::default(),
        })
    }

    /// The converter of a record of `key` that is not `--schema-id`'s.
    fn converter(
        &mut self,
        key: crate::registry::framing::confluent::SchemaKey,
    ) -> &mut Result<Converter, DlqReason> {
        use crate::registry::confluent::{map_schema, RegistryError, SchemaType};
        use crate::schema::protobuf::MessageSelector;
        let Some((runtime, client)) = &self.registry else {
            return self.converters.entry(key.clone()).or_insert_with(|| {
                Err(DlqReason::record(
                    DlqCode::InvalidSchema,
                    format!("{key} is not --schema-id (give --registry-url to look it up)"),
                ))
            });
        };
        if !self.converters.contains_key(&key) {
            let found = runtime.block_on(client.by_id(key.id));
            let conv = match found {
                Err(RegistryError::NotFound(_)) => Err(crate::registry::confluent::unknown_id(&key)),
                Err(e) => Err(DlqReason::record(
                    DlqCode::InvalidSchema,
                    format!("{key} could not be looked up (the daemon would wait for the registry): {e}"),
                )),
                Ok(r) => match &self.subject {
                    Some(s) if r.version_in(s).is_none() => {
                        Err(crate::registry::confluent::not_the_channels(&r, &key, s))
                    }
                    _ => {
                        let choice = (r.schema_type == SchemaType::Protobuf)
                            .then(|| MessageSelector::Indexes(key.indexes.clone()));
                        map_schema(&r, &self.partition, choice.as_ref())
                            .and_then(|m| {
                                let m = Arc::new(m);
                                Converter::try_new(m.clone(), m.arrow_schema())
                                    .map_err(|e| e.to_string())
                            })
                            .map_err(|e| DlqReason::record(DlqCode::SchemaMismatch, e))
                    }
                },
            };
            self.converters.insert(key.clone(), conv);
        }
        self.converters.get_mut(&key).expect("inserted")
    }
}

/// A failure of the check itself (not of a record, not a setup refusal): exit status 1.
#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    /// Reading the input failed.
    #[error("cannot read input {path}: {source}")]
    Input {
        /// The input path (`-` for stdin).
        path: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// Writing the output failed.
    #[error("cannot write output: {0}")]
    Output(#[from] std::io::Error),
}

/// A setup refusal: printed on stderr, exit status 2.
#[derive(Debug)]
pub struct Refusal(pub String);

/// Loads and maps the schema and the schema versions, as the daemon would at channel creation.
pub struct CheckSetup {
    /// The mapped schema.
    pub schema: Arc<MappedSchema>,
    /// For `gsr_json`: the decoder (channel version and other known versions).
    pub gsr: Option<GsrDecoder>,
    /// With `--evolution compatible`: the simulated table and the listed versions.
    pub evolution: Option<CheckEvolution>,
    /// Per record index, the table evolution its version made (printed beside its row).
    pub notes: Vec<(usize, Value)>,
    /// For `json_sr`, `avro`, `protobuf`: how schema ids are resolved.
    pub confluent: Option<ConfluentCheck>,
    /// The partition spec given by `--partition` or `--config`; `None` for the default
    /// `hour(partition field)`, printed as before.
    pub spec: Option<Vec<PartitionTerm>>,
    /// Per record index, the partition values of its row under [`CheckSetup::spec`] (a JSON
    /// object: partition field name → value in the Iceberg JSON single-value serialization).
    pub partition_values: Vec<(usize, Value)>,
}

/// The table a check under `--evolution compatible` evolves, and the versions it may meet.
pub struct CheckEvolution {
    channel: Option<Uuid>,
    /// The listed versions, mapped (or why they cannot be).
    versions: std::collections::HashMap<Uuid, Result<Arc<MappedSchema>, String>>,
    table: iceberg::spec::Schema,
    last_column_id: i32,
    applied: std::collections::HashSet<Uuid>,
    /// A converter per version met, for the table as it is (dropped when it evolves).
    converters: std::collections::HashMap<Uuid, Converter>,
}

fn read_json(path: &Path) -> Result<Value, Refusal> {
    let text =
        std::fs::read(path).map_err(|e| Refusal(format!("cannot read {}: {e}", path.display())))?;
    serde_json::from_slice(&text)
        .map_err(|e| Refusal(format!("{} is not JSON: {e}", path.display())))
}

/// Builds the setup of a check; `Err` is a refusal with its reason.
pub fn setup(args: &RecordsCheckArgs) -> Result<CheckSetup, Refusal> {
    if args.message.is_some() && args.format != RecordFormat::Protobuf {
        return Err(Refusal(
            "--message applies to --format protobuf only".to_string(),
        ));
    }
    let spec = spec_of(args)?;
    if matches!(args.format, RecordFormat::Avro | RecordFormat::Protobuf) {
        return setup_avro_or_protobuf(args, spec);
    }
    let doc = read_json(&args.schema)?;
    let partition = match (&args.partition_field, &spec) {
        (_, Some(terms)) => time_field(terms).unwrap_or_default().to_string(),
        (Some(p), None) => p.clone(),
        (None, None) => {
            let fields = date_time_fields(&doc).map_err(|e| Refusal(e.to_string()))?;
            match fields.as_slice() {
                [one] => one.clone(),
                [] => {
                    return Err(Refusal(
                        "the schema has no top-level date-time field to partition by".to_string(),
                    ))
                }
                _ => {
                    return Err(Refusal(format!(
                        "several date-time fields ({}): choose one with --partition-field",
                        fields.join(", ")
                    )))
                }
            }
        }
    };
    let schema = MappedSchema::from_json_schema(&doc, &partition)
        .map_err(|e| Refusal(format!("schema refused: {e}")))?;
    check_spec(spec.as_deref(), &schema)?;
    let mut evolution = None;
    let confluent_args = args.confluent.registry_url.is_some()
        || args.confluent.schema_id.is_some()
        || args.confluent.subject.is_some();
    let confluent = match args.format {
        RecordFormat::JsonSr => {
            refuse_gsr_flags(args)?;
            Some(ConfluentCheck::new(&args.confluent, false, &partition)?)
        }
        _ if confluent_args => {
            return Err(Refusal(
                "--schema-id, --registry-url and --subject apply to --format json_sr, avro and protobuf".to_string(),
            ))
        }
        _ => None,
    };
    let gsr = match args.format {
        RecordFormat::JsonSr | RecordFormat::Avro | RecordFormat::Protobuf => None,
        RecordFormat::Json => {
            if args.evolution == Evolution::Compatible {
                return Err(Refusal(
                    "--evolution compatible applies to --format gsr_json (each record names its version)".to_string(),
                ));
            }
            if !args.schema_versions.is_empty() {
                return Err(Refusal(
                    "--schema-version applies to --format gsr_json only".to_string(),
                ));
            }
            None
        }
        RecordFormat::GsrJson => {
            let mut listed = Vec::new();
            for sv in &args.schema_versions {
                let Some((id, file)) = sv.split_once('=') else {
                    return Err(Refusal(format!("--schema-version {sv:?} is not UUID=FILE")));
                };
                let id = Uuid::parse_str(id)
                    .map_err(|e| Refusal(format!("--schema-version {sv:?}: bad uuid: {e}")))?;
                listed.push((id, read_json(Path::new(file))?));
            }
            let mapped: Vec<(Uuid, Result<Arc<MappedSchema>, String>)> = listed
                .iter()
                .map(|(id, doc)| {
                    (
                        *id,
                        MappedSchema::from_json_schema(doc, &partition)
                            .map(Arc::new)
                            .map_err(|e| e.to_string()),
                    )
                })
                .collect();
            let (channel, known) = split_versions(&doc, listed);
            if args.evolution == Evolution::Compatible {
                evolution = Some(CheckEvolution {
                    channel,
                    versions: mapped.into_iter().collect(),
                    table: schema.iceberg_schema().clone(),
                    last_column_id: schema.iceberg_schema().highest_field_id(),
                    applied: channel.into_iter().collect(),
                    converters: Default::default(),
                });
            }
            Some(GsrDecoder::new(
                channel,
                known,
                crate::convert::DEFAULT_MAX_RECORD_SIZE,
            ))
        }
    };
    Ok(CheckSetup {
        schema: Arc::new(schema),
        gsr,
        evolution,
        notes: Vec::new(),
        confluent,
        spec,
        partition_values: Vec::new(),
    })
}

/// The partition spec of `--partition` or `--config` (`None`: neither was given).
fn spec_of(args: &RecordsCheckArgs) -> Result<Option<Vec<PartitionTerm>>, Refusal> {
    if let Some(path) = &args.config {
        let config = crate::config::Config::load(path)
            .map_err(|errors| Refusal(format!("--config {} refused:\n{errors}", path.display())))?;
        let channel = match &args.channel {
            Some(name) => config.channels.iter().find(|c| &c.name == name),
            None if config.channels.len() == 1 => config.channels.first(),
            None => {
                return Err(Refusal(format!(
                    "--config {} has several channels: choose one with --channel",
                    path.display()
                )))
            }
        };
        let channel = channel.ok_or_else(|| {
            Refusal(format!(
                "--config {} has no channel {:?}",
                path.display(),
                args.channel.as_deref().unwrap_or_default()
            ))
        })?;
        let iceberg = channel.destination.iceberg().ok_or_else(|| {
            Refusal(format!(
                "channel {} delivers raw objects to S3: its records are not converted",
                channel.name
            ))
        })?;
        return Ok(Some(iceberg.partition.clone()));
    }
    match args.partition.as_slice() {
        [] => Ok(None),
        [none] if none == "none" => Ok(Some(Vec::new())),
        terms => terms
            .iter()
            .map(|t| PartitionTerm::parse(t).map_err(|e| Refusal(format!("--partition {e}"))))
            .collect::<Result<Vec<_>, _>>()
            .map(Some),
    }
}

/// Refuses a spec the table would refuse: its terms against each other and `schema`'s fields.
fn check_spec(spec: Option<&[PartitionTerm]>, schema: &MappedSchema) -> Result<(), Refusal> {
    let Some(terms) = spec else {
        return Ok(());
    };
    unbound_spec(terms, schema.iceberg_schema())
        .map(drop)
        .map_err(|(i, why)| Refusal(format!("partition term {i} refused: {why}")))
}

/// The partition values of the one-row `batch` under `terms`: partition field name → value,
/// computed by iceberg-rust's transform of each term's source column.
fn partition_values(terms: &[PartitionTerm], batch: &RecordBatch) -> Value {
    let mut values = serde_json::Map::new();
    for term in terms {
        let value = batch
            .column_by_name(&term.source)
            .ok_or_else(|| format!("no column {}", term.source))
            .and_then(|column| {
                let transform =
                    iceberg::transform::create_transform_function(&term.iceberg_transform())
                        .map_err(|e| e.to_string())?;
                let array = transform
                    .transform(column.clone())
                    .map_err(|e| e.to_string())?;
                let field =
                    arrow_schema::Field::new(term.field_name(), array.data_type().clone(), true);
                RecordBatch::try_new(
                    Arc::new(arrow_schema::Schema::new(vec![field])),
                    vec![array],
                )
                .map_err(|e| e.to_string())
            });
        match value {
            Ok(one) => values.extend(row_to_json(&one, 0)),
            Err(why) => {
                values.insert(term.field_name(), json!({ "error": why }));
            }
        }
    }
    Value::Object(values)
}

/// The refusal of `--evolution` and `--schema-version` with a Confluent format.
fn refuse_gsr_flags(args: &RecordsCheckArgs) -> Result<(), Refusal> {
    if args.evolution == Evolution::Compatible || !args.schema_versions.is_empty() {
        return Err(Refusal(
            "--evolution and --schema-version apply to --format gsr_json only".to_string(),
        ));
    }
    Ok(())
}

/// The setup of `--format avro` or `protobuf`: `--schema` is an Avro schema or a `.proto` file.
fn setup_avro_or_protobuf(
    args: &RecordsCheckArgs,
    spec: Option<Vec<PartitionTerm>>,
) -> Result<CheckSetup, Refusal> {
    use crate::registry::confluent::{ResolvedSchema, SchemaType};
    use crate::schema::protobuf::{timestamp_fields, MessageSelector, ProtoFile};
    refuse_gsr_flags(args)?;
    let path = args.schema.display();
    let text = std::fs::read_to_string(&args.schema)
        .map_err(|e| Refusal(format!("cannot read --schema {path}: {e}")))?;
    let protobuf = args.format == RecordFormat::Protobuf;
    let refused =
        |e: crate::schema::SchemaError| Refusal(format!("--schema {path}: schema refused: {e}"));
    let files = [ProtoFile {
        name: args
            .schema
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default(),
        text: text.clone(),
    }];
    let selector = match &args.message {
        Some(name) => MessageSelector::Name(name.clone()),
        None => MessageSelector::Indexes(vec![0]),
    };
    let partition = match (&args.partition_field, &spec) {
        (_, Some(terms)) => time_field(terms).unwrap_or_default().to_string(),
        (Some(p), None) => p.clone(),
        (None, None) => {
            let candidates = if protobuf {
                timestamp_fields(&files, &selector).map_err(refused)?
            } else {
                avro_timestamp_fields(&text)
                    .map_err(|e| Refusal(format!("--schema {path} is not an Avro schema: {e}")))?
            };
            match candidates.as_slice() {
                [one] => one.clone(),
                [] => {
                    return Err(Refusal(format!(
                        "--schema {path} has no top-level {} field to partition by: give --partition-field",
                        if protobuf { "google.protobuf.Timestamp" } else { "timestamp-millis or timestamp-micros" }
                    )))
                }
                _ => {
                    return Err(Refusal(format!(
                        "several timestamp fields ({}): choose one with --partition-field",
                        candidates.join(", ")
                    )))
                }
            }
        }
    };
    let schema = if protobuf {
        MappedSchema::from_protobuf(&files, &selector, &partition)
    } else {
        MappedSchema::from_avro(&text, &[], &partition)
    }
    .map_err(refused)?;
    check_spec(spec.as_deref(), &schema)?;
    let mut confluent = ConfluentCheck::new(&args.confluent, protobuf, &partition)?;
    if let crate::schema::Decoding::Protobuf(message) = schema.decoding() {
        let resolved = ResolvedSchema {
            id: args.confluent.schema_id.unwrap_or(0),
            schema_type: SchemaType::Protobuf,
            schema: text,
            references: Vec::new(),
            subjects: Vec::new(),
        };
        let indexes = crate::registry::confluent::message_indexes(&resolved, &message.name)
            .map_err(|e| Refusal(format!("--schema {path}: {e}")))?;
        confluent.own_message = Some((indexes, message.name.clone()));
    }
    Ok(CheckSetup {
        schema: Arc::new(schema),
        gsr: None,
        evolution: None,
        notes: Vec::new(),
        confluent: Some(confluent),
        spec,
        partition_values: Vec::new(),
    })
}

/// The top-level fields of Avro schema `text` whose type is a `long` with logical type
/// `timestamp-millis` or `timestamp-micros`: the candidates for the partition field.
fn avro_timestamp_fields(text: &str) -> Result<Vec<String>, String> {
    let doc: Value = serde_json::from_str(text).map_err(|e| e.to_string())?;
    let fields = doc["fields"]
        .as_array()
        .ok_or("the schema is not a record with fields")?;
    Ok(fields
        .iter()
        .filter(|f| {
            matches!(
                f["type"]["logicalType"].as_str(),
                Some("timestamp-millis" | "timestamp-micros")
            ) && f["type"]["type"] == "long"
        })
        .filter_map(|f| f["name"].as_str().map(str::to_string))
        .collect())
}

fn decode_hex(line: &[u8]) -> Option<Vec<u8>> {
    if !line.len().is_multiple_of(2) {
        return None;
    }
    let h = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    };
    line.chunks(2)
        .map(|p| Some(h(p[0])? << 4 | h(p[1])?))
        .collect()
}

/// Splits input into records: `\n`-separated, a final newline ends the last record.
pub fn split_records(input: &[u8]) -> Vec<&[u8]> {
    if input.is_empty() {
        return Vec::new();
    }
    let body = input.strip_suffix(b"\n").unwrap_or(input);
    body.split(|&b| b == b'\n').collect()
}

/// The outcome of one record as the JSON line printed by `records check`.
pub fn outcome_json(
    index: usize,
    outcome: &Result<(Value, i64), DlqReason>,
    partition_field: &str,
) -> Value {
    match outcome {
        Ok((row, hour)) => json!({
            "index": index,
            "row": row,
            // The Iceberg partition value (hours since 1970, the hour transform's result) for
            // tools, and the hour as floe prints it everywhere else for people.
            "partition": { format!("{partition_field}_hour"): hour },
            "hour": crate::time::hour_text(*hour),
        }),
        Err(r) => json!({
            "index": index,
            "dlq": { "code": r.code.as_str(), "field": r.field, "message": r.message },
        }),
    }
}

/// Checks every record of `input` (raw file bytes) against the setup; one outcome per record.
pub fn check_records(
    setup: &mut CheckSetup,
    input: &[u8],
    encoding: InputEncoding,
) -> Vec<Result<(Value, i64), DlqReason>> {
    // The converter's Arrow schema is the mapped schema's own (the table would be created from it).
    let mut conv = match Converter::try_new(setup.schema.clone(), setup.schema.arrow_schema()) {
        Ok(c) => c,
        Err(e) => {
            return split_records(input)
                .iter()
                .map(|_| Err(DlqReason::record(DlqCode::InvalidSchema, e.to_string())))
                .collect()
        }
    };
    let mut out = Vec::new();
    for line in split_records(input) {
        let bytes: Vec<u8>;
        let record: &[u8] = match encoding {
            InputEncoding::Lines => line,
            InputEncoding::Hex => {
                let l = line.strip_suffix(b"\r").unwrap_or(line);
                match decode_hex(l) {
                    Some(b) => {
                        bytes = b;
                        &bytes
                    }
                    None => {
                        out.push(Err(DlqReason::record(
                            DlqCode::DeserializationError,
                            "input line is not hexadecimal",
                        )));
                        continue;
                    }
                }
            }
        };
        let index = out.len();
        let converted = if let (Some(evo), Some(g)) = (&mut setup.evolution, &mut setup.gsr) {
            check_evolving(evo, g, record, &mut setup.notes, index)
        } else if let Some(c) = &mut setup.confluent {
            check_confluent(c, &mut conv, record)
        } else {
            let pushed = match &mut setup.gsr {
                Some(g) => match g.decode(record) {
                    Ok(payload) => conv.push(payload),
                    Err(r) => Err(r),
                },
                None => conv.push(record),
            };
            pushed.map(|hour| (conv.finish(), hour))
        };
        out.push(converted.map(|(batch, hour)| {
            if let Some(terms) = &setup.spec {
                let values = partition_values(terms, &batch);
                setup.partition_values.push((index, values));
            }
            (Value::Object(row_to_json(&batch, 0)), hour)
        }));
    }
    out
}

/// One Confluent-framed record: `--schema-id`'s records (any id without a registry) by `conv`,
/// the others by their own schema from the registry.
fn check_confluent(
    c: &mut ConfluentCheck,
    conv: &mut Converter,
    record: &[u8],
) -> Result<(RecordBatch, i64), DlqReason> {
    let framed = crate::registry::framing::confluent::parse(record, c.protobuf)?;
    let own_id = match c.schema_id {
        Some(id) => id == framed.id,
        None => c.registry.is_none(),
    };
    let own = match &c.own_message {
        Some((indexes, name)) if own_id && *indexes != framed.indexes => {
            return Err(DlqReason::record(
                DlqCode::SchemaMismatch,
                format!(
                    "schema id {} message {:?} is not the channel's message {name} ({indexes:?})",
                    framed.id, framed.indexes
                ),
            ))
        }
        _ => own_id,
    };
    let conv = if own {
        conv
    } else {
        let key = crate::registry::framing::confluent::SchemaKey {
            id: framed.id,
            indexes: framed.indexes,
        };
        match c.converter(key) {
            Ok(conv) => conv,
            Err(reason) => return Err(reason.clone()),
        }
    };
    let hour = conv.push(framed.payload)?;
    Ok((conv.finish(), hour))
}

/// One `gsr_json` record under `--evolution compatible`: its version is applied to the simulated
/// table when it is new and compatible (the change noted under the record's index), then the
/// record is converted into the table's columns by its version's rules.
fn check_evolving(
    evo: &mut CheckEvolution,
    gsr: &mut GsrDecoder,
    record: &[u8],
    notes: &mut Vec<(usize, Value)>,
    index: usize,
) -> Result<(RecordBatch, i64), DlqReason> {
    let (header, _) = crate::registry::framing::gsr::parse_header(record)?;
    let id = header.schema_version;
    let mapped = match evo.versions.get(&id) {
        None if Some(id) == evo.channel => {
            return Err(DlqReason::record(
                DlqCode::InvalidSchema,
                "the channel's version is not among --schema-version",
            ))
        }
        None => {
            return Err(DlqReason::record(
                DlqCode::InvalidSchema,
                format!("unknown schema version {id}"),
            ))
        }
        Some(Err(e)) => {
            return Err(DlqReason::record(
                DlqCode::SchemaMismatch,
                format!("schema version {id} cannot be mapped to an Iceberg schema: {e}"),
            ))
        }
        Some(Ok(m)) => m.clone(),
    };
    if !evo.applied.contains(&id) {
        let e = crate::schema::evolution::evolve(
            &evo.table,
            evo.last_column_id,
            mapped.iceberg_schema(),
            mapped.partition_field(),
            &mapped.defaulted_fields(),
        )
        .map_err(|why| {
            DlqReason::record(
                DlqCode::SchemaMismatch,
                format!("schema version {id} is not a compatible evolution of the table: {why}"),
            )
        })?;
        evo.applied.insert(id);
        notes.push((
            index,
            json!({
                "schema_version": id.to_string(),
                "changes": e.changes.iter().map(|c| c.to_string()).collect::<Vec<_>>(),
            }),
        ));
        if !e.changes.is_empty() {
            evo.converters.clear();
        }
        evo.table = e.schema;
        evo.last_column_id = e.last_column_id;
    }
    let conv = match evo.converters.entry(id) {
        std::collections::hash_map::Entry::Occupied(c) => c.into_mut(),
        std::collections::hash_map::Entry::Vacant(slot) => {
            let arrow = iceberg::arrow::schema_to_arrow_schema(&evo.table)
                .map_err(|e| DlqReason::record(DlqCode::InvalidSchema, e.to_string()))?;
            slot.insert(
                Converter::for_evolved_table(mapped, Arc::new(arrow))
                    .map_err(|e| DlqReason::record(DlqCode::SchemaMismatch, e.to_string()))?,
            )
        }
    };
    let payload = gsr.payload_of(record)?;
    let hour = conv.push(payload)?;
    Ok((conv.finish(), hour))
}

/// Runs `floe records check`: prints one JSON line per record on stdout. Returns exit status 0
/// when every record is a row, 1 when one or more go to the DLQ, or 2 after printing a setup
/// refusal on stderr.
///
/// Errors: [`CheckError`] when the input cannot be read. A closed or unwritable stdout ends the
/// process ([`crate::tools::stdout::exit_on_write_error`]).
pub fn run(args: &RecordsCheckArgs) -> Result<ExitCode, CheckError> {
    let mut setup = match setup(args) {
        Ok(s) => s,
        Err(Refusal(reason)) => {
            eprintln!("floe records check: {reason}");
            return Ok(ExitCode::from(2));
        }
    };
    let mut input = Vec::new();
    let read = if args.input == "-" {
        std::io::stdin().read_to_end(&mut input)
    } else {
        std::fs::File::open(&args.input).and_then(|mut f| f.read_to_end(&mut input))
    };
    read.map_err(|source| CheckError::Input {
        path: args.input.clone(),
        source,
    })?;
    let outcomes = check_records(&mut setup, &input, args.encoding);
    let stdout = std::io::stdout();
    let mut w = BufWriter::new(stdout.lock());
    let pf = setup.schema.partition_field().to_string();
    let notes: std::collections::HashMap<usize, Value> = setup.notes.iter().cloned().collect();
    let partitions: std::collections::HashMap<usize, Value> =
        setup.partition_values.iter().cloned().collect();
    let mut write = || -> std::io::Result<()> {
        for (i, o) in outcomes.iter().enumerate() {
            let mut line = outcome_json(i, o, &pf);
            if let Some(obj) = line.as_object_mut() {
                if let Some(note) = notes.get(&i) {
                    obj.insert("evolution".into(), note.clone());
                }
                if let Some(values) = partitions.get(&i) {
                    obj.insert("partition".into(), values.clone());
                    if pf.is_empty() {
                        obj.remove("hour");
                    }
                }
            }
            serde_json::to_writer(&mut w, &line).map_err(std::io::Error::from)?;
            w.write_all(b"\n")?;
        }
        w.flush()
    };
    // A closed stdout (`| head`) ends the command quietly.
    if let Err(e) = write() {
        crate::tools::stdout::exit_on_write_error(&e);
    }
    Ok(if outcomes.iter().all(Result::is_ok) {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_partition_value_comes_with_the_hour_as_floe_prints_it() {
        let line = outcome_json(3, &Ok((json!({"id": 1}), 495_452)), "event_time");
        assert_eq!(
            line,
            json!({"index": 3, "row": {"id": 1}, "partition": {"event_time_hour": 495_452}, "hour": "2026-07-09-20"})
        );
        let before_1970 = outcome_json(0, &Ok((json!({}), -1)), "t");
        assert_eq!(before_1970["hour"], "1969-12-31-23");
    }

    /// 2026-07-09T20:00:00Z in seconds since 1970 (hour 495452).
    const SECONDS: i64 = 1_783_627_200;

    fn args(format: RecordFormat, schema: &Path) -> RecordsCheckArgs {
        RecordsCheckArgs {
            schema: schema.to_path_buf(),
            partition_field: None,
            partition: Vec::new(),
            config: None,
            channel: None,
            format,
            message: None,
            schema_versions: Vec::new(),
            evolution: Evolution::None,
            confluent: ConfluentArgs::default(),
            encoding: InputEncoding::Hex,
            input: "-".to_string(),
        }
    }

    fn refusal(args: &RecordsCheckArgs) -> String {
        match setup(args) {
            Err(Refusal(reason)) => reason,
            Ok(_) => panic!("expected a refusal"),
        }
    }

    /// Checks `frames` (hex lines, as `--encoding hex` reads them); one JSON outcome per frame.
    fn check(args: &RecordsCheckArgs, frames: &[Vec<u8>]) -> Vec<Value> {
        let mut s = setup(args).unwrap_or_else(|Refusal(r)| panic!("{r}"));
        let mut input = String::new();
        for f in frames {
            for b in f {
                input.push_str(&format!("{b:02x}"));
            }
            input.push('\n');
        }
        let pf = s.schema.partition_field().to_string();
        check_records(&mut s, input.as_bytes(), InputEncoding::Hex)
            .iter()
            .enumerate()
            .map(|(i, o)| outcome_json(i, o, &pf))
            .collect()
    }

    fn code(outcome: &Value) -> &str {
        outcome["dlq"]["code"].as_str().unwrap_or("row")
    }

    fn confluent_frame(id: u32, indexes: &[u8], payload: &[u8]) -> Vec<u8> {
        let mut f = vec![0u8];
        f.extend_from_slice(&id.to_be_bytes());
        f.extend_from_slice(indexes);
        f.extend_from_slice(payload);
        f
    }

    const AVRO_EVENT: &str = r#"{"type": "record", "name": "Event", "fields": [
        {"name": "id", "type": "long"},
        {"name": "event_time", "type": {"type": "long", "logicalType": "timestamp-micros"}},
        {"name": "score", "type": "float"},
        {"name": "digest", "type": {"type": "fixed", "name": "D3", "size": 3}},
        {"name": "local", "type": {"type": "long", "logicalType": "local-timestamp-micros"}}
    ]}"#;

    fn avro_event(id: i64) -> Vec<u8> {
        use apache_avro::types::Value as AV;
        let schema = apache_avro::Schema::parse_str(AVRO_EVENT).unwrap();
        apache_avro::to_avro_datum(
            &schema,
            AV::Record(vec![
                ("id".into(), AV::Long(id)),
                (
                    "event_time".into(),
                    AV::TimestampMicros(SECONDS * 1_000_000),
                ),
                ("score".into(), AV::Float(1.1)),
                ("digest".into(), AV::Fixed(3, vec![1, 0xab, 0xff])),
                ("local".into(), AV::LocalTimestampMicros(1)),
            ]),
        )
        .unwrap()
    }

    #[test]
    fn avro_records_are_checked_against_an_avsc_file() {
        let dir = tempfile::tempdir().unwrap();
        let avsc = dir.path().join("event.avsc");
        std::fs::write(&avsc, AVRO_EVENT).unwrap();
        let mut a = args(RecordFormat::Avro, &avsc);
        a.confluent.schema_id = Some(7);
        let good = avro_event(42);
        let out = check(
            &a,
            &[
                confluent_frame(7, &[], &good),
                confluent_frame(8, &[], &good),
                confluent_frame(7, &[], &good[..good.len() - 1]),
                b"\x01\x00\x00\x00\x07".to_vec(),
            ],
        );
        assert_eq!(
            out[0],
            json!({
                "index": 0,
                "row": {
                    "id": 42, "event_time": "2026-07-09T20:00:00.000000+00:00", "score": 1.1,
                    "digest": "01abff", "local": "1970-01-01T00:00:00.000001"
                },
                "partition": {"event_time_hour": 495_452},
                "hour": "2026-07-09-20",
            })
        );
        let codes: Vec<&str> = out.iter().map(code).collect();
        assert_eq!(
            codes,
            [
                "row",
                "INVALID_SCHEMA",
                "DESERIALIZATION_ERROR",
                "DESERIALIZATION_ERROR"
            ],
            "{out:?}"
        );
        // Without --schema-id nor a registry, any id is the file's.
        a.confluent.schema_id = None;
        let out = check(&a, &[confluent_frame(8, &[], &good)]);
        assert_eq!(out[0]["row"]["id"], 42, "{out:?}");
    }

    use prost::encoding::encode_varint as varint;

    const PROTO: &str = r#"syntax = "proto3";
package shop;
import "google/protobuf/timestamp.proto";
message Other { string x = 1; }
message Event {
  int64 id = 1;
  google.protobuf.Timestamp event_time = 2;
  float score = 3;
}
"#;

    /// `shop.Event{id, event_time: SECONDS, score: 0.25}` in the Protobuf binary encoding.
    fn proto_event(id: u64) -> Vec<u8> {
        let mut ts = vec![0x08];
        varint(SECONDS as u64, &mut ts);
        let mut m = vec![0x08];
        varint(id, &mut m);
        m.push(0x12);
        varint(ts.len() as u64, &mut m);
        m.extend_from_slice(&ts);
        m.push(0x1d);
        m.extend_from_slice(&0.25f32.to_le_bytes());
        m
    }

    #[test]
    fn protobuf_records_are_checked_against_the_message_of_a_proto_file() {
        let dir = tempfile::tempdir().unwrap();
        let proto = dir.path().join("shop.proto");
        std::fs::write(&proto, PROTO).unwrap();
        let mut a = args(RecordFormat::Protobuf, &proto);
        a.message = Some("shop.Event".to_string());
        a.confluent.schema_id = Some(3);
        let payload = proto_event(42);
        // Message indexes: [1] (count 1, index 1, zigzag varints) is shop.Event; none is [0].
        let out = check(
            &a,
            &[
                confluent_frame(3, &[2, 2], &payload),
                confluent_frame(3, &[0], &payload),
                confluent_frame(4, &[2, 2], &payload),
            ],
        );
        assert_eq!(
            out[0]["row"],
            json!({"id": 42, "event_time": "2026-07-09T20:00:00.000000+00:00", "score": 0.25}),
            "{out:?}"
        );
        assert_eq!(out[0]["partition"]["event_time_hour"], 495_452);
        let codes: Vec<&str> = out.iter().map(code).collect();
        assert_eq!(
            codes,
            ["row", "SCHEMA_MISMATCH", "INVALID_SCHEMA"],
            "{out:?}"
        );
        assert!(
            out[1]["dlq"]["message"]
                .as_str()
                .unwrap()
                .contains("shop.Event"),
            "{out:?}"
        );
        // The default message is the file's first: shop.Other has no timestamp to partition by.
        a.message = None;
        let why = refusal(&a);
        assert!(why.contains("--partition-field"), "{why}");
        a.message = Some("shop.Missing".to_string());
        let why = refusal(&a);
        assert!(
            why.contains("shop.Missing") && why.contains("--schema"),
            "{why}"
        );
    }

    /// A schema without a date-time field, checked under the specs of channels that have no
    /// `hour` partition: refused by default (no time field), accepted with `--partition`, each
    /// row carrying its partition values as the table would compute them.
    #[test]
    fn a_partition_spec_other_than_hour_is_checked_and_computed() {
        let dir = tempfile::tempdir().unwrap();
        let schema = dir.path().join("s.json");
        std::fs::write(
            &schema,
            r#"{"type": "object", "properties": {"id": {"type": "integer"}, "day": {"type": "string", "format": "date"}, "region": {"type": "string"}}, "required": ["id"]}"#,
        )
        .unwrap();
        let mut a = args(RecordFormat::Json, &schema);
        a.encoding = InputEncoding::Lines;
        assert!(refusal(&a).contains("date-time"), "{}", refusal(&a));

        let run = |a: &RecordsCheckArgs, input: &str| {
            let mut s = setup(a).unwrap_or_else(|Refusal(r)| panic!("{r}"));
            let outcomes = check_records(&mut s, input.as_bytes(), InputEncoding::Lines);
            (outcomes, s.partition_values)
        };
        a.partition = vec!["none".to_string()];
        let (outcomes, values) = run(&a, "{\"id\": 1}\n{\"id\": \"x\"}\n");
        assert!(outcomes[0].is_ok() && outcomes[1].is_err(), "{outcomes:?}");
        assert_eq!(values, [(0, json!({}))]);

        a.partition = vec![
            "identity(region)".to_string(),
            "bucket(4, id)".to_string(),
            "truncate(2, region)".to_string(),
        ];
        let (_, values) = run(&a, "{\"id\": 34, \"region\": \"eu-west\"}\n");
        // bucket(4, 34): murmur3 of 34 as a long is 2017239379 (Iceberg spec, Appendix B).
        assert_eq!(
            values,
            [(
                0,
                json!({"region": "eu-west", "id_bucket": 2017239379 % 4, "region_trunc": "eu"})
            )]
        );

        // A time transform on the date-time partition field of the default schema.
        std::fs::write(
            &schema,
            r#"{"type": "object", "properties": {"id": {"type": "integer"}, "event_time": {"type": "string", "format": "date-time"}}, "required": ["id", "event_time"]}"#,
        )
        .unwrap();
        a.partition = vec!["day(event_time)".to_string()];
        let (outcomes, values) = run(
            &a,
            "{\"id\": 1, \"event_time\": \"2026-07-09T20:00:00Z\"}\n",
        );
        assert!(outcomes[0].is_ok(), "{outcomes:?}");
        assert_eq!(values, [(0, json!({"event_time_day": "2026-07-09"}))]);

        // A term the table would refuse is refused naming its field.
        a.partition = vec!["day(id)".to_string()];
        let why = refusal(&a);
        assert!(why.contains("\"id\"") && why.contains("date-time"), "{why}");
        a.partition = vec!["bucket(0, id)".to_string()];
        assert!(refusal(&a).contains("bucket"));
        a.partition = vec!["hour(nope)".to_string()];
        assert!(refusal(&a).contains("nope"));
    }

    #[test]
    fn the_spec_can_come_from_the_channel_of_a_configuration_file() {
        let dir = tempfile::tempdir().unwrap();
        let config = include_str!("../../config/quickstart.toml");
        let schema = dir.path().join("event.schema.json");
        std::fs::write(&schema, include_str!("../../config/event.schema.json")).unwrap();
        let config = config.replace(
            "partition_field = \"event_time\"",
            "partition = [\"day(event_time)\", \"identity(source)\"]",
        );
        assert!(
            config.contains("identity(source)"),
            "quickstart.toml changed"
        );
        std::fs::write(dir.path().join("floe.toml"), &config).unwrap();
        let mut a = args(RecordFormat::Json, &schema);
        a.config = Some(dir.path().join("floe.toml"));
        let s = setup(&a).unwrap_or_else(|Refusal(r)| panic!("{r}"));
        let terms: Vec<String> = s.spec.unwrap().iter().map(ToString::to_string).collect();
        assert_eq!(terms, ["day(event_time)", "identity(source)"]);
        a.channel = Some("nope".to_string());
        assert!(refusal(&a).contains("no channel \"nope\""));
    }

    #[test]
    fn flags_of_another_format_are_refused_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let avsc = dir.path().join("event.avsc");
        std::fs::write(&avsc, AVRO_EVENT).unwrap();
        let mut a = args(RecordFormat::Avro, &avsc);
        a.message = Some("Event".to_string());
        assert!(refusal(&a).contains("--message"));
        a.message = None;
        a.evolution = Evolution::Compatible;
        assert!(refusal(&a).contains("--evolution"));
        // A JSON Schema given to --format avro is named as not an Avro schema.
        let json = dir.path().join("event.json");
        std::fs::write(&json, r#"{"type": "object", "properties": {}}"#).unwrap();
        let why = refusal(&args(RecordFormat::Avro, &json));
        assert!(
            why.contains("--schema") && why.contains("event.json"),
            "{why}"
        );
    }
}
