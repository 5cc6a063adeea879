//! Unknown keys, explained: serde's `unknown field` error becomes one line per key with its
//! line in the file and, when a known key is close, `did you mean`.
//!
//! The parse path ([`file`](super::file)) reports every unknown key of a table (serde stops at
//! the first; each is taken out in turn), with the table's key path. This module finds the key's
//! line in the text (the TOML values the sections are parsed from carry no positions, so the text
//! is parsed once more, keeping spans) and rewrites the message:
//!
//! ```text
//! channel[0].destination: unknown field `compresion` at line 14: did you mean `compression`?
//! channel[0].destination: unknown field `colour` at line 15, expected one of `namespace`, …
//! ```

use toml_edit::{ImDocument, Item, Key, Value};

use super::ConfigError;

/// The key of serde's `unknown field `k`, expected …` message.
pub(crate) fn unknown_key_of(message: &str) -> Option<&str> {
    let rest = message.strip_prefix("unknown field `")?;
    rest.get(..rest.find('`')?)
}

/// The keys serde lists after `expected one of` / `expected` in an unknown-field message.
fn expected_keys(message: &str) -> Vec<&str> {
    let Some(at) = message.find(", expected ") else {
        return Vec::new();
    };
    let list = &message[at + ", expected ".len()..];
    let list = list.strip_prefix("one of ").unwrap_or(list);
    list.split(", ")
        .filter_map(|k| k.strip_prefix('`')?.strip_suffix('`'))
        .collect()
}

/// The number of single-character insertions, deletions and substitutions from `a` to `b`.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let substitute = diagonal + usize::from(ca != *cb);
            diagonal = row[j + 1];
            row[j + 1] = substitute.min(row[j] + 1).min(diagonal + 1);
        }
    }
    row[b.len()]
}

/// The known key closest to `key`, if it is close: at most 2 edits, or a third of its length.
fn suggestion<'a>(key: &str, known: &[&'a str]) -> Option<&'a str> {
    known
        .iter()
        .map(|k| (edit_distance(key, k), *k))
        .filter(|(d, _)| *d <= 2 || *d * 3 <= key.chars().count())
        .min()
        .map(|(_, k)| k)
}

/// serde's unknown-field `message` as floe says it: the line (when known), then `did you mean`
/// when a known key is close, else serde's list of the known keys. Other messages are returned
/// unchanged.
pub(crate) fn explained(message: &str, line: Option<usize>) -> String {
    let Some(key) = unknown_key_of(message) else {
        return message.to_owned();
    };
    let known = expected_keys(message);
    let mut out = format!("unknown field `{key}`");
    if let Some(line) = line {
        out.push_str(&format!(" at line {line}"));
    }
    match suggestion(key, &known) {
        Some(close) => out.push_str(&format!(": did you mean `{close}`?")),
        None => {
            let tail = &message["unknown field `".len() + key.len() + 1..];
            out.push_str(tail);
        }
    }
    out
}

/// Line and column (1-based) of the byte `offset` of `text`.
pub(crate) fn line_and_column(text: &str, offset: usize) -> (usize, usize) {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let column = before.len() - before.rfind('\n').map_or(0, |i| i + 1) + 1;
    (line, column)
}

/// The key `key` of the table at the key path `table_path` (`channel[0].destination`, empty for
/// the top level) of the parsed document.
fn find_key<'d>(document: &'d ImDocument<&str>, table_path: &str, key: &str) -> Option<&'d Key> {
    let mut item: &Item = document.as_item();
    for segment in table_path.split('.').filter(|s| !s.is_empty()) {
        let (name, index) = match segment.split_once('[') {
            Some((name, index)) => (name, Some(index.strip_suffix(']')?.parse::<usize>().ok()?)),
            None => (segment, None),
        };
        item = item.get(name)?;
        if let Some(index) = index {
            item = item.get(index)?;
        }
    }
    match item {
        Item::Table(table) => table.key(key),
        Item::Value(Value::InlineTable(table)) => table.key(key),
        _ => None,
    }
}

/// Where the key `key` of the table at `table_path` is written in `text`: (line, column).
pub(crate) fn key_position(text: &str, table_path: &str, key: &str) -> Option<(usize, usize)> {
    let document = ImDocument::parse(text).ok()?;
    let span = find_key(&document, table_path, key)?.span()?;
    Some(line_and_column(text, span.start))
}

/// Every error of `errors` that is an unknown key of a section, explained: its line in `text`
/// and `did you mean` (see [`explained`]). The path (the key path of the table) is unchanged.
pub(crate) fn explain_all(errors: Vec<ConfigError>, text: &str) -> Vec<ConfigError> {
    errors
        .into_iter()
        .map(|e| match unknown_key_of(&e.message) {
            Some(key) => {
                let line = key_position(text, &e.path, key).map(|(line, _)| line);
                ConfigError {
                    message: explained(&e.message, line),
                    path: e.path,
                }
            }
            None => e,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::config::{Config, ConfigEnv};

    const FILE: &str = r#"[lease_store]
kind = "sqlite"
path = "leases.sqlite"

[[channel]]
name = "c"
  [channel.source]
  kind = "kafka"
  bootstrap_servers = "b:9092"
  topic = "t"
  [channel.schema]
  file = "s.json"
  [channel.destination]
  kind = "iceberg"
  namespace = "n"
  table = "t"
  data_fresness = "60s"
  compresion = "zstd"
  colour = "blue"
  catalog = { kind = "sql", name = "floe", uri = "c.sqlite", warehouse = "w", tokn = "x" }
  partition_field = "ts"
  [channel.dlq]
  kind = "local"
  path = "dlq"
"#;

    fn errors(text: &str) -> Vec<ConfigError> {
        let env = ConfigEnv {
            hostname: "h".to_owned(),
            pid: 1,
            vars: Default::default(),
        };
        Config::from_toml_str_with_env(text, Path::new("/etc/floe"), &env)
            .expect_err("refused")
            .0
    }

    #[test]
    fn every_unknown_key_of_a_section_is_reported_with_its_line_and_a_suggestion() {
        let lines: Vec<String> = errors(FILE).iter().map(ToString::to_string).collect();
        // No close key: serde's list of the known ones.
        assert!(
            lines[0].starts_with(
                "channel[0].destination: unknown field `colour` at line 19, expected one of `catalog`, `namespace`"
            ),
            "{lines:#?}"
        );
        assert_eq!(
            lines[1..3],
            [
                "channel[0].destination: unknown field `compresion` at line 18: did you mean `compression`?",
                "channel[0].destination: unknown field `data_fresness` at line 17: did you mean `data_freshness`?",
            ],
            "{lines:#?}"
        );
        // The destination is still checked without them: its inline catalog table's own
        // unknown key is found inside it.
        assert!(
            lines[3].starts_with(
                "channel[0].destination.catalog: unknown field `tokn` at line 20, expected one of"
            ),
            "{lines:#?}"
        );
        assert_eq!(lines.len(), 4, "{lines:#?}");
    }

    #[test]
    fn every_unknown_top_level_key_is_reported_with_the_sections_own() {
        let text = format!("metrix = 1\nwroker = {{ id = \"w\" }}\n{FILE}");
        let lines: Vec<String> = errors(&text).iter().map(ToString::to_string).collect();
        assert_eq!(
            lines[..2],
            [
                "line 1, column 1: unknown field `metrix`, expected one of `worker`, `aws`, `lease_store`, `channel`",
                "line 2, column 1: unknown field `wroker`: did you mean `worker`?",
            ],
            "{lines:#?}"
        );
        assert_eq!(lines.len(), 6, "the sections' unknown keys too: {lines:#?}");
    }

    #[test]
    fn suggestions_are_close_keys_only() {
        let known = ["data_freshness", "compression", "table"];
        assert_eq!(suggestion("compresion", &known), Some("compression"));
        assert_eq!(suggestion("tabel", &known), Some("table"));
        assert_eq!(suggestion("colour", &known), None);
        assert_eq!(edit_distance("", "abc"), 3);
        assert_eq!(edit_distance("kitten", "sitting"), 3);
    }
}
