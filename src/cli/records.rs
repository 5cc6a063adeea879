//! `floe records check`: shows what floe will do with sample records before a channel is deployed —
//! the same schema mapping ([`crate::schema`]) and conversion ([`crate::convert`]) as the daemon, one
//! JSON line per input record.
//!
//! ```text
//! floe records check --schema FILE [--partition-field NAME] [--format json|gsr_json|json_sr]
//!                    [--schema-version UUID=FILE ...] [--encoding lines|hex] [INPUT|-]
//!                    [--schema-id ID] [--registry-url URL] [--subject SUBJECT]
//! ```
//!
//! Input: one record per line (`\n`-separated; a blank line is a zero-byte record; a final newline
//! ends the last record), as text (`lines`) or as hex (`hex`, for binary GSR framing). Output, one
//! line per record, in input order:
//! `{"index": n, "row": {...}, "partition": {"<field>_hour": "2026-07-09-20"}}` (the hour in the
//! Iceberg spec's human-readable form, as floe prints hours elsewhere) or
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
//! Exit status: 0 when every record was examined (whatever the outcome), 2 when the setup is refused
//! (schema refused, unreadable file, bad flag value; the reason on stderr).

use std::io::{BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use serde_json::{json, Value};
use uuid::Uuid;

use crate::convert::render::row_to_json;
use crate::convert::{Converter, DlqCode, DlqReason};
use crate::gsr::wire::{split_versions, GsrDecoder};
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
    /// JSON Schema file (draft-04 or draft-07; no `$schema` means draft-07).
    #[arg(long, value_name = "FILE")]
    pub schema: PathBuf,
    /// The partition field (a top-level string with format date-time). Default: the schema's only
    /// top-level date-time field.
    #[arg(long, value_name = "NAME")]
    pub partition_field: Option<String>,
    /// Record framing.
    #[arg(long, value_enum, default_value = "json")]
    pub format: RecordFormat,
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
    registry: Option<(tokio::runtime::Runtime, crate::confluent::ConfluentClient)>,
    subject: Option<String>,
    partition: String,
    /// A converter per schema id met (other than `--schema-id`), or why its records are refused.
    converters:
        std::collections::HashMap<crate::confluent::SchemaKey, Result<Converter, DlqReason>>,
}

impl ConfluentCheck {
    fn new(args: &ConfluentArgs, protobuf: bool, partition: &str) -> Result<Self, Refusal> {
        let registry = match &args.registry_url {
            None => None,
            Some(url) => {
                let auth = crate::confluent::auth_from_env(|k| std::env::var(k).ok())
                    .map_err(|e| Refusal(e.to_string()))?;
                let http = crate::confluent::api::HttpRegistry::new(
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
                    crate::confluent::ConfluentClient::new(http, &subject),
                ))
            }
        };
        Ok(ConfluentCheck {
            protobuf,
            schema_id: args.schema_id,
            registry,
            subject: args.subject.clone(),
            partition: partition.to_string(),
            converters: Default::default(),
        })
    }

    /// The converter of a record of `key` that is not `--schema-id`'s.
    fn converter(&mut self, key: crate::confluent::SchemaKey) -> &mut Result<Converter, DlqReason> {
        use crate::confluent::{map_schema, RegistryError, SchemaType};
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
                Err(RegistryError::NotFound(_)) => Err(crate::confluent::unknown_id(&key)),
                Err(e) => Err(DlqReason::record(
                    DlqCode::InvalidSchema,
                    format!("{key} could not be looked up (the daemon would wait for the registry): {e}"),
                )),
                Ok(r) => match &self.subject {
                    Some(s) if r.version_in(s).is_none() => {
                        Err(crate::confluent::not_the_channels(&r, &key, s))
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
    let doc = read_json(&args.schema)?;
    let partition = match &args.partition_field {
        Some(p) => p.clone(),
        None => {
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
    let mut evolution = None;
    let confluent_args = args.confluent.registry_url.is_some()
        || args.confluent.schema_id.is_some()
        || args.confluent.subject.is_some();
    let confluent = match args.format {
        RecordFormat::JsonSr | RecordFormat::Avro | RecordFormat::Protobuf => {
            if args.evolution == Evolution::Compatible || !args.schema_versions.is_empty() {
                return Err(Refusal(
                    "--evolution and --schema-version apply to --format gsr_json only".to_string(),
                ));
            }
            if args.format != RecordFormat::JsonSr {
                return Err(Refusal(format!(
                    "--format {:?}: --schema is a JSON Schema; Avro and Protobuf schema files need their mappers (not in this build)",
                    args.format
                )));
            }
            Some(ConfluentCheck::new(
                &args.confluent,
                args.format == RecordFormat::Protobuf,
                &partition,
            )?)
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
    })
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
        if let (Some(evo), Some(g)) = (&mut setup.evolution, &mut setup.gsr) {
            let index = out.len();
            let outcome = check_evolving(evo, g, record, &mut setup.notes, index);
            out.push(outcome);
            continue;
        }
        if let Some(c) = &mut setup.confluent {
            out.push(check_confluent(c, &mut conv, record));
            continue;
        }
        let pushed = match &mut setup.gsr {
            Some(g) => match g.decode(record) {
                Ok(payload) => conv.push(payload),
                Err(r) => Err(r),
            },
            None => conv.push(record),
        };
        out.push(pushed.map(|hour| {
            let batch = conv.finish();
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
) -> Result<(Value, i64), DlqReason> {
    let framed = crate::confluent::wire::parse(record, c.protobuf)?;
    let own = match c.schema_id {
        Some(id) => id == framed.id,
        None => c.registry.is_none(),
    };
    let conv = if own {
        conv
    } else {
        let key = crate::confluent::SchemaKey {
            id: framed.id,
            indexes: framed.indexes,
        };
        match c.converter(key) {
            Ok(conv) => conv,
            Err(reason) => return Err(reason.clone()),
        }
    };
    let hour = conv.push(framed.payload)?;
    let batch = conv.finish();
    Ok((Value::Object(row_to_json(&batch, 0)), hour))
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
) -> Result<(Value, i64), DlqReason> {
    let (header, _) = crate::gsr::wire::parse_header(record)?;
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
    let batch = conv.finish();
    Ok((Value::Object(row_to_json(&batch, 0)), hour))
}

/// Runs `floe records check`: prints one JSON line per record on stdout. Returns exit status 0, or 2
/// after printing a setup refusal on stderr.
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
    let mut write = || -> std::io::Result<()> {
        for (i, o) in outcomes.iter().enumerate() {
            let mut line = outcome_json(i, o, &pf);
            if let (Some(note), Some(obj)) = (notes.get(&i), line.as_object_mut()) {
                obj.insert("evolution".into(), note.clone());
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
    Ok(ExitCode::SUCCESS)
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
}
