//! The validated `[channel.destination]` of `kind = "s3"` (the raw S3 destination, [`crate::raw`]):
//! the key template, object compression and record delimiter.

use serde::Deserialize;
use std::fmt;
use std::io::Write;

use crate::config::S3Location;
use crate::model::{Position, ShardId};

/// Key prefix (in the destination bucket) under which workers stage objects before the
/// committer publishes them: `_floe_staging/<channel>/<batch id>/<n>`.
pub const STAGING_PREFIX: &str = "_floe_staging/";

/// Default of `channel.destination.key_template` for `kind = "s3"`.
pub const DEFAULT_KEY_TEMPLATE: &str = "{channel}/{yyyy}/{MM}/{dd}/{HH}/";

/// Longest S3 object key, bytes.
pub const MAX_KEY_BYTES: usize = 1024;

/// Compression of raw objects (`channel.destination.compression`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RawCompression {
    /// `"none"`: records as read.
    #[default]
    None,
    /// `"gzip"` (RFC 1952), key extension `.gz`.
    Gzip,
    /// `"zstd"` (RFC 8878, level 3), key extension `.zst`.
    Zstd,
    /// `"snappy"`, the Snappy framing format (as `snzip`/Firehose write it), key extension
    /// `.snappy`.
    Snappy,
}

impl RawCompression {
    /// The extension appended to every object key: `""`, `.gz`, `.zst`, `.snappy`.
    pub fn extension(self) -> &'static str {
        match self {
            RawCompression::None => "",
            RawCompression::Gzip => ".gz",
            RawCompression::Zstd => ".zst",
            RawCompression::Snappy => ".snappy",
        }
    }

    /// The `Content-Encoding`-free content type of an object (`application/octet-stream`) is
    /// used for every codec; this names the codec for logs and `describe`.
    pub fn name(self) -> &'static str {
        match self {
            RawCompression::None => "none",
            RawCompression::Gzip => "gzip",
            RawCompression::Zstd => "zstd",
            RawCompression::Snappy => "snappy",
        }
    }

    /// Compresses `data` as one complete stream of this codec.
    ///
    /// Errors: an I/O error of the encoder (none expected writing to memory).
    pub fn compress(self, data: &[u8]) -> std::io::Result<Vec<u8>> {
        match self {
            RawCompression::None => Ok(data.to_vec()),
            RawCompression::Gzip => {
                let mut e = flate2::write::GzEncoder::new(
                    Vec::with_capacity(data.len() / 3),
                    flate2::Compression::default(),
                );
                e.write_all(data)?;
                e.finish()
            }
            RawCompression::Zstd => zstd::stream::encode_all(data, 3),
            RawCompression::Snappy => {
                let mut e = snap::write::FrameEncoder::new(Vec::with_capacity(data.len() / 2));
                e.write_all(data)?;
                e.into_inner().map_err(|e| e.into_error())
            }
        }
    }

    /// Decompresses one complete stream of this codec (tests, `floe` tooling).
    ///
    /// Errors: the data is not a valid stream of this codec.
    pub fn decompress(self, data: &[u8]) -> std::io::Result<Vec<u8>> {
        let mut out = Vec::new();
        match self {
            RawCompression::None => out.extend_from_slice(data),
            RawCompression::Gzip => {
                std::io::Read::read_to_end(&mut flate2::read::MultiGzDecoder::new(data), &mut out)?;
            }
            RawCompression::Zstd => out = zstd::stream::decode_all(data)?,
            RawCompression::Snappy => {
                std::io::Read::read_to_end(&mut snap::read::FrameDecoder::new(data), &mut out)?;
            }
        }
        Ok(out)
    }
}

/// What follows every record in an object (`channel.destination.record_delimiter`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RecordDelimiter {
    /// `"newline"`: a `\n` after every record (JSON Lines for JSON records).
    #[default]
    Newline,
    /// `"none"`: records back to back (for self-delimiting formats).
    None,
}

impl RecordDelimiter {
    /// The bytes written after each record.
    pub fn bytes(self) -> &'static [u8] {
        match self {
            RecordDelimiter::Newline => b"\n",
            RecordDelimiter::None => b"",
        }
    }
}

/// A placeholder of a key template.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Placeholder {
    Channel,
    Stream,
    Shard,
    First,
    Last,
    Year,
    Month,
    Day,
    Hour,
    Minute,
}

impl Placeholder {
    const ALL: [(&'static str, Placeholder); 11] = [
        ("channel", Placeholder::Channel),
        ("stream", Placeholder::Stream),
        ("topic", Placeholder::Stream),
        ("shard", Placeholder::Shard),
        ("first", Placeholder::First),
        ("last", Placeholder::Last),
        ("yyyy", Placeholder::Year),
        ("MM", Placeholder::Month),
        ("dd", Placeholder::Day),
        ("HH", Placeholder::Hour),
        ("mm", Placeholder::Minute),
    ];
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    Text(String),
    Var(Placeholder),
}

/// A validated output key template (`channel.destination.key_template`).
///
/// Placeholders: `{channel}`, `{stream}` (or `{topic}`: the Kafka topic or Kinesis stream name),
/// `{shard}`, `{first}` and `{last}` (positions of the object's first and last record), and the
/// arrival time of the object's first record in UTC: `{yyyy}`, `{MM}`, `{dd}`, `{HH}`, `{mm}`.
/// A template ending in `/` is a prefix: floe appends the object name
/// `{channel}-{shard}-{first}-{last}`. The compression's extension is appended to every key.
///
/// Collision rule: the object name (after the last `/`) must contain `{shard}` and `{first}`, so
/// two objects can only share a key if they start at the same record of the same shard — the
/// same records, since committed ranges never overlap.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyTemplate {
    text: String,
    parts: Vec<Part>,
}

/// What a key is rendered from.
#[derive(Debug, Clone, Copy)]
pub struct KeyInputs<'a> {
    /// Channel name.
    pub channel: &'a str,
    /// Kafka topic or Kinesis stream name.
    pub stream: &'a str,
    /// Shard id.
    pub shard: &'a ShardId,
    /// Position of the object's first record.
    pub first: &'a Position,
    /// Position of the object's last record.
    pub last: &'a Position,
    /// Arrival time of the first record, milliseconds since the Unix epoch.
    pub arrival_ms: i64,
}

impl KeyTemplate {
    /// Parses and checks `text`.
    ///
    /// Errors: the reason, for the configuration error: empty, a leading `/`, `//`, an unknown
    /// or unclosed placeholder, or an object name without `{shard}` and `{first}`.
    pub fn parse(text: &str) -> Result<Self, String> {
        if text.is_empty() {
            return Err("must not be empty".into());
        }
        if text.starts_with('/') {
            return Err(format!(
                "\"{text}\" starts with '/': S3 keys are relative to the bucket"
            ));
        }
        if text.contains("//") {
            return Err(format!(
                "\"{text}\" contains an empty path segment (\"//\")"
            ));
        }
        if text.starts_with(STAGING_PREFIX) {
            return Err(format!(
                "\"{text}\" is under {STAGING_PREFIX}, where floe stages objects"
            ));
        }
        let full = if text.ends_with('/') {
            format!("{text}{{channel}}-{{shard}}-{{first}}-{{last}}")
        } else {
            text.to_owned()
        };
        let mut parts = Vec::new();
        let mut rest = full.as_str();
        while let Some(open) = rest.find(['{', '}']) {
            if rest.as_bytes()[open] == b'}' {
                return Err(format!("\"{text}\" has a '}}' without '{{'"));
            }
            if open > 0 {
                parts.push(Part::Text(rest[..open].to_owned()));
            }
            let after = &rest[open + 1..];
            let close = after
                .find('}')
                .ok_or_else(|| format!("\"{text}\" has an unclosed '{{'"))?;
            let name = &after[..close];
            let var = Placeholder::ALL
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, p)| *p)
                .ok_or_else(|| {
                    format!(
                        "unknown placeholder {{{name}}} in \"{text}\"; known: {}",
                        Placeholder::ALL
                            .iter()
                            .map(|(n, _)| format!("{{{n}}}"))
                            .collect::<Vec<_>>()
                            .join(" ")
                    )
                })?;
            parts.push(Part::Var(var));
            rest = &after[close + 1..];
        }
        if !rest.is_empty() {
            parts.push(Part::Text(rest.to_owned()));
        }
        // The object name: the parts after the last '/' in literal text.
        let mut name: Vec<&Part> = Vec::new();
        for part in parts.iter().rev() {
            match part {
                Part::Text(t) if t.contains('/') => break,
                p => name.push(p),
            }
        }
        let has = |p: Placeholder| name.iter().any(|x| **x == Part::Var(p));
        if !has(Placeholder::Shard) || !has(Placeholder::First) {
            return Err(format!(
                "the object name (after the last '/') of \"{text}\" must contain {{shard}} and {{first}}, or two batches could write the same key; end the template with '/' to get the name {{channel}}-{{shard}}-{{first}}-{{last}}"
            ));
        }
        // `{shard}{first}` renders shard 1 + first 10 and shard 11 + first 0 alike: in the
        // object name, {shard} and {first} need literal text with a non-digit beside any other
        // placeholder (positions are digits, Kafka partitions too).
        let separates = |p: Option<&&Part>| match p {
            None => true,
            Some(Part::Text(t)) => t.chars().any(|c| !c.is_ascii_digit()),
            Some(Part::Var(_)) => false,
        };
        for (i, part) in name.iter().enumerate() {
            if matches!(part, Part::Var(Placeholder::Shard | Placeholder::First))
                && !(separates(name.get(i + 1))
                    && separates(i.checked_sub(1).and_then(|j| name.get(j))))
            {
                return Err(format!(
                    "in the object name of \"{text}\", {{shard}} and {{first}} must be separated from other placeholders by text such as '-', or keys of different shards could be equal ({{shard}}{{first}}: shard 1 from 10 and shard 11 from 0 both give \"110\")"
                ));
            }
        }
        Ok(KeyTemplate {
            text: text.to_owned(),
            parts,
        })
    }

    /// The template as written.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// Whether the template names the channel (needed when channels share a bucket).
    pub fn has_channel(&self) -> bool {
        self.parts.contains(&Part::Var(Placeholder::Channel))
    }

    /// Renders the key of one object, with `extension` appended.
    pub fn render(&self, k: &KeyInputs<'_>, extension: &str) -> String {
        let secs = k.arrival_ms.div_euclid(1000);
        let days = secs.div_euclid(86_400);
        let sod = secs.rem_euclid(86_400);
        let (y, m, d) = crate::time::civil_from_days(days);
        let mut out = String::with_capacity(self.text.len() + 64);
        for part in &self.parts {
            match part {
                Part::Text(t) => out.push_str(t),
                Part::Var(p) => {
                    let _ = match p {
                        Placeholder::Channel => fmt::Write::write_str(&mut out, k.channel),
                        Placeholder::Stream => fmt::Write::write_str(&mut out, k.stream),
                        Placeholder::Shard => fmt::Write::write_str(&mut out, k.shard.as_str()),
                        Placeholder::First => {
                            fmt::Write::write_fmt(&mut out, format_args!("{}", k.first))
                        }
                        Placeholder::Last => {
                            fmt::Write::write_fmt(&mut out, format_args!("{}", k.last))
                        }
                        Placeholder::Year => {
                            fmt::Write::write_fmt(&mut out, format_args!("{y:04}"))
                        }
                        Placeholder::Month => {
                            fmt::Write::write_fmt(&mut out, format_args!("{m:02}"))
                        }
                        Placeholder::Day => fmt::Write::write_fmt(&mut out, format_args!("{d:02}")),
                        Placeholder::Hour => {
                            fmt::Write::write_fmt(&mut out, format_args!("{:02}", sod / 3600))
                        }
                        Placeholder::Minute => {
                            fmt::Write::write_fmt(&mut out, format_args!("{:02}", (sod / 60) % 60))
                        }
                    };
                }
            }
        }
        out.push_str(extension);
        out
    }
}

/// The validated `[channel.destination]` with `kind = "s3"`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawDestinationConfig {
    /// Bucket, expected owner and SSE-KMS key (`prefix` is empty: keys come from the template).
    pub location: S3Location,
    /// Output key template.
    pub key_template: KeyTemplate,
    /// Compression of objects.
    pub compression: RawCompression,
    /// What follows each record.
    pub record_delimiter: RecordDelimiter,
    /// Maximum age of a record before it is delivered, 10 s to 900 s.
    pub data_freshness: std::time::Duration,
    /// Target uncompressed size of an object, bytes: an object ends before the record that
    /// would take it past this size (a record larger than it is an object alone).
    pub target_object_size: u64,
    /// Memory bound of this channel's buffered records in this worker, bytes.
    pub buffer_size: u64,
}
