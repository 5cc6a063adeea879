//! The reference pages are generated from the code, so that each fact is written once.
//!
//! - `docs/configuration.md`, between `<!-- generated:config -->` and `<!-- /generated:config -->`,
//!   is rendered from `src/config/file.rs`: every table reachable from `ConfigFile` (plain
//!   structs, and the `tagged_section!` enums with one subsection per `kind`), every key with its
//!   serde rename, its type, its default (the doc comment's `Default: …` sentence, or `required`)
//!   and its doc comment.
//! - `docs/observability.md`, between `<!-- generated:metrics -->` and
//!   `<!-- /generated:metrics -->`, is the metrics table rendered from `src/telemetry.rs`: every
//!   `pub const X: &str = "floe_…"`, its kind, unit and HELP text from its `describe_*!` call, and
//!   the labels of the `counter!`/`gauge!`/`histogram!` calls that emit it.
//!
//! `cargo test --features testsuite --test it -- docs::` fails when a committed page differs
//! from what the code renders, and prints how to fix it; `UPDATE_DOCS=1` rewrites the pages. The
//! sources are read as text (rendering needs no build of the library). Further checks: every
//! `floe_…` name written anywhere in the docs is a metric, every relative link in README.md and
//! docs/ names a file that exists, and nothing links or refers to a path outside the repository.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

/// Every `.rs` file under `src/`.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut entries: Vec<PathBuf> = entries.filter_map(|e| Some(e.ok()?.path())).collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The source file at `expected` (relative to the repository), or, if it moved, the one file
/// under `src/` that contains `marker`. Returns the path (for messages) and the text.
fn source(expected: &str, marker: &str) -> (String, String) {
    let path = root().join(expected);
    if let Ok(text) = std::fs::read_to_string(&path) {
        if text.contains(marker) {
            return (expected.to_owned(), text);
        }
    }
    let mut files = Vec::new();
    rust_files(&root().join("src"), &mut files);
    let found: Vec<PathBuf> = files
        .into_iter()
        .filter(|f| read(f).contains(marker))
        .collect();
    match found.as_slice() {
        [one] => {
            let shown = one
                .strip_prefix(root())
                .unwrap_or(one)
                .display()
                .to_string();
            (shown, read(one))
        }
        _ => panic!(
            "tests/it/docs.rs renders the docs from the file holding `{marker}` ({expected}); \
             found {found:?}: point the generator at the right file"
        ),
    }
}

fn config_source() -> (String, String) {
    source("src/config/file.rs", "pub struct ConfigFile")
}

fn telemetry_source() -> (String, String) {
    source("src/telemetry.rs", "describe_counter!(")
}

// ---------------------------------------------------------------------------------------------
// Doc comments

/// Markdown of a doc comment as it reads on a page: rustdoc intra-doc links become plain code.
fn doc_text(lines: &[String]) -> String {
    let joined = lines
        .iter()
        .map(|l| l.trim())
        .collect::<Vec<_>>()
        .join("\n");
    // Paragraphs joined by spaces, blank lines kept as paragraph breaks.
    let paragraphs: Vec<String> = joined
        .split("\n\n")
        .map(|p| p.split('\n').collect::<Vec<_>>().join(" "))
        .collect();
    let text = paragraphs.join("\n\n");
    strip_intra_doc_links(&text)
}

/// `` [`X`](path) `` and `` [`X`] `` (rustdoc links) become `` `X` ``.
fn strip_intra_doc_links(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(at) = rest.find("[`") {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        let Some(close) = after.find("`]") else {
            out.push_str(&rest[at..]);
            return out;
        };
        let code = &after[..close + 1];
        out.push_str(code);
        let mut tail = &after[close + 2..];
        if tail.starts_with('(') {
            if let Some(end) = tail.find(')') {
                tail = &tail[end + 1..];
            }
        }
        rest = tail;
    }
    out.push_str(rest);
    out
}

/// Splits the `Default: …` (or `Default …`) sentence out of a doc comment: (default, the rest).
/// The sentence ends at the first `.` or `;` outside backticks that is followed by a space or
/// ends the text.
fn split_default(doc: &str) -> (Option<String>, String) {
    let Some(start) = find_outside_code(doc, "Default") else {
        return (None, doc.to_owned());
    };
    let body_start = start + "Default".len();
    let body = &doc[body_start..];
    let body = body.strip_prefix(':').unwrap_or(body);
    let skip = doc.len() - body.len();
    let mut in_code = false;
    let mut end = doc.len();
    let bytes = doc.as_bytes();
    for i in skip..doc.len() {
        match bytes[i] {
            b'`' => in_code = !in_code,
            b'.' | b';' if !in_code && (i + 1 == doc.len() || bytes[i + 1] == b' ') => {
                end = i;
                break;
            }
            _ => {}
        }
    }
    let value = doc[skip..end].trim().to_owned();
    let removed_end = (end + 1).min(doc.len());
    let rest = format!(
        "{}{}",
        &doc[..start],
        capitalized(doc[removed_end..].trim_start())
    );
    let rest = rest.split_whitespace().collect::<Vec<_>>().join(" ");
    (Some(value), rest)
}

/// Byte offset of `needle` at a word start outside backticks.
fn find_outside_code(text: &str, needle: &str) -> Option<usize> {
    let mut in_code = false;
    for (i, c) in text.char_indices() {
        if c == '`' {
            in_code = !in_code;
        } else if !in_code && text[i..].starts_with(needle) && (i == 0 || text[..i].ends_with(' '))
        {
            return Some(i);
        }
    }
    None
}

/// Whether the doc comment says the key is required (a sentence `Required.`).
fn says_required(doc: &str) -> bool {
    doc.contains("Required.") || doc.ends_with("Required")
}

/// The text with its first letter in upper case.
fn capitalized(text: &str) -> String {
    let mut chars = text.chars();
    match chars.next() {
        Some(c) => c.to_uppercase().chain(chars).collect(),
        None => String::new(),
    }
}

/// A struct's or enum's doc without its leading `` `[table]`: `` (the heading says it).
fn without_heading(doc: &str, heading: &str) -> String {
    let d = doc
        .strip_prefix(&format!("`{heading}`"))
        .map(|r| r.trim_start_matches([':', '.']).trim())
        .unwrap_or(doc);
    capitalized(d)
}

fn table_cell(text: &str) -> String {
    text.replace('|', "\\|").replace('\n', " ")
}

// ---------------------------------------------------------------------------------------------
// src/config/file.rs, read as text

#[derive(Debug, Clone)]
struct Field {
    key: String,
    ty: String,
    doc: Vec<String>,
    serde_default: bool,
}

#[derive(Debug, Clone)]
struct Struct {
    doc: Vec<String>,
    fields: Vec<Field>,
}

#[derive(Debug, Clone)]
struct Variant {
    name: String,
    doc: Vec<String>,
}

#[derive(Debug, Clone)]
struct Enum {
    doc: Vec<String>,
    variants: Vec<Variant>,
}

#[derive(Debug, Default)]
struct ConfigSource {
    /// `#[derive(.. Deserialize ..)]` structs with named fields.
    structs: BTreeMap<String, Struct>,
    /// Enums without `Deserialize` (candidates for tagged sections), with their variants.
    enums: BTreeMap<String, Enum>,
    /// `tagged_section!(Enum { "kind" => Variant(struct|table), .. })`: enum → (kind, variant,
    /// supported) in order.
    tagged: BTreeMap<String, Vec<(String, String, bool)>>,
}

/// `name = "value"` inside an attribute line.
fn attribute_value(line: &str, name: &str) -> Option<String> {
    let pattern = format!("{name} = \"");
    let mut search = 0;
    while let Some(found) = line[search..].find(&pattern) {
        let at = search + found;
        // `rename = ` but not `rename_all = ` (the pattern includes ` = "`).
        let before = line[..at].chars().last();
        if before.is_none_or(|c| !(c.is_alphanumeric() || c == '_')) {
            let start = at + pattern.len();
            let end = line[start..].find('"')? + start;
            return Some(line[start..end].to_owned());
        }
        search = at + pattern.len();
    }
    None
}

/// Parses the structs, enums and tagged sections of the configuration file format.
fn parse_config_source(source: &str) -> ConfigSource {
    let mut out = ConfigSource::default();
    let mut doc: Vec<String> = Vec::new();
    let mut derives_deserialize = false;
    let mut attrs: Vec<String> = Vec::new();
    enum Open {
        None,
        Struct(String, Struct),
        Enum(String, Enum),
    }
    let mut open = Open::None;
    let mut field_doc: Vec<String> = Vec::new();
    let mut field_attrs: Vec<String> = Vec::new();
    for raw in source.lines() {
        let line = raw.trim();
        match &mut open {
            Open::Struct(name, st) => {
                if line == "}" {
                    out.structs.insert(name.clone(), st.clone());
                    open = Open::None;
                } else if let Some(d) = line.strip_prefix("///") {
                    field_doc.push(d.strip_prefix(' ').unwrap_or(d).to_owned());
                } else if line.starts_with("#[") {
                    field_attrs.push(line.to_owned());
                } else if let Some(rest) = line.strip_prefix("pub ") {
                    if let Some((field, ty)) = rest.split_once(':') {
                        let field = field.trim();
                        if !field.is_empty()
                            && field.chars().all(|c| c.is_alphanumeric() || c == '_')
                        {
                            let serde: Vec<&String> = field_attrs
                                .iter()
                                .filter(|a| a.starts_with("#[serde("))
                                .collect();
                            let key = serde
                                .iter()
                                .find_map(|a| attribute_value(a, "rename"))
                                .unwrap_or_else(|| field.to_owned());
                            let serde_default = serde
                                .iter()
                                .any(|a| a.contains("(default") || a.contains(" default,"));
                            st.fields.push(Field {
                                key,
                                ty: ty.trim().trim_end_matches(',').trim().to_owned(),
                                doc: std::mem::take(&mut field_doc),
                                serde_default,
                            });
                        }
                    }
                    field_doc.clear();
                    field_attrs.clear();
                }
                continue;
            }
            Open::Enum(name, en) => {
                if line == "}" {
                    out.enums.insert(name.clone(), en.clone());
                    open = Open::None;
                } else if let Some(d) = line.strip_prefix("///") {
                    field_doc.push(d.strip_prefix(' ').unwrap_or(d).to_owned());
                } else if line.starts_with("#[") {
                } else if !line.is_empty() {
                    let variant: String = line
                        .chars()
                        .take_while(|c| c.is_alphanumeric() || *c == '_')
                        .collect();
                    if !variant.is_empty() {
                        en.variants.push(Variant {
                            name: variant,
                            doc: std::mem::take(&mut field_doc),
                        });
                    }
                    field_doc.clear();
                }
                continue;
            }
            Open::None => {}
        }
        if let Some(d) = line.strip_prefix("///") {
            doc.push(d.strip_prefix(' ').unwrap_or(d).to_owned());
        } else if line.starts_with("#[") {
            if line.starts_with("#[derive(") {
                derives_deserialize = line.contains("Deserialize");
            }
            attrs.push(line.to_owned());
        } else if let Some(rest) = line.strip_prefix("pub struct ") {
            let name: String = rest
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            if derives_deserialize && line.ends_with('{') {
                open = Open::Struct(
                    name,
                    Struct {
                        doc: std::mem::take(&mut doc),
                        fields: Vec::new(),
                    },
                );
                field_doc.clear();
                field_attrs.clear();
            }
            doc.clear();
            attrs.clear();
            derives_deserialize = false;
        } else if let Some(rest) = line.strip_prefix("pub enum ") {
            let name: String = rest
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            if !derives_deserialize && line.ends_with('{') {
                open = Open::Enum(
                    name,
                    Enum {
                        doc: std::mem::take(&mut doc),
                        variants: Vec::new(),
                    },
                );
                field_doc.clear();
            }
            doc.clear();
            attrs.clear();
            derives_deserialize = false;
        } else {
            doc.clear();
            attrs.clear();
            derives_deserialize = false;
        }
    }
    out.tagged = tagged_kinds(source);
    out
}

/// The kinds of every `tagged_section!(Enum { "kind" => Variant(struct|table), .. })`, in order:
/// (kind, variant, whether this build supports it (`struct`) or only parses it (`table`)).
fn tagged_kinds(source: &str) -> BTreeMap<String, Vec<(String, String, bool)>> {
    let mut out = BTreeMap::new();
    let mut rest = source;
    while let Some(at) = rest.find("\ntagged_section!(") {
        let body_start = at + "\ntagged_section!(".len();
        let body_end = body_start + rest[body_start..].find(");").expect("tagged_section! ends");
        let body = &rest[body_start..body_end];
        let (name, arms) = body.split_once('{').expect("tagged_section! body");
        let mut kinds = Vec::new();
        for arm in arms.trim_end().trim_end_matches('}').split(',') {
            let Some((kind, variant)) = arm.split_once("=>") else {
                continue;
            };
            let kind = kind.trim().trim_matches('"').to_owned();
            let supported = variant.contains("(struct)");
            assert!(
                supported || variant.contains("(table)"),
                "unexpected tagged_section! arm {arm:?}"
            );
            let variant_name: String = variant
                .trim()
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            kinds.push((kind, variant_name, supported));
        }
        out.insert(name.trim().to_owned(), kinds);
        rest = &rest[body_end..];
    }
    out
}

/// The last path segment of a type (`crate::raw::RawCompression` → `RawCompression`).
fn last_segment(ty: &str) -> &str {
    ty.rsplit("::").next().unwrap_or(ty).trim()
}

/// `Wrapper<inner>` → `inner`.
fn strip_wrapper<'a>(ty: &'a str, wrapper: &str) -> Option<&'a str> {
    let ty = ty.trim();
    let rest = ty.strip_prefix(wrapper)?.strip_prefix('<')?;
    rest.strip_suffix('>')
}

/// The type of a key as a user writes it, or an error naming the Rust type.
fn user_type(ty: &str) -> Result<String, String> {
    let ty = strip_wrapper(ty, "Option").unwrap_or(ty).trim();
    if strip_wrapper(ty, "Section").is_some() {
        return Ok("table".to_owned());
    }
    if let Some(inner) = strip_wrapper(ty, "Vec") {
        if strip_wrapper(inner, "Section").is_some() {
            return Ok("array of tables".to_owned());
        }
        if last_segment(inner) == "String" {
            return Ok("array of strings".to_owned());
        }
    }
    if strip_wrapper(ty, "BTreeMap").is_some() || strip_wrapper(ty, "HashMap").is_some() {
        return Ok("table of strings".to_owned());
    }
    Ok(match last_segment(ty) {
        "String" => "string",
        "bool" => "boolean",
        "u8" | "u16" | "u32" | "u64" | "usize" | "i32" | "i64" | "WholeNumber" => "integer",
        "DurationText" => "duration",
        "SizeText" => "size",
        "SchemaVersionText" => "integer or string",
        "RegistryUrlText" => "string or array of strings",
        "InitialPosition" | "OnPositionLost" | "RecordFormat" | "CompressionCodec"
        | "RawCompression" | "RecordDelimiter" | "Envelope" | "WriteMode" => "string",
        other => {
            return Err(format!(
                "type `{other}`: add how a user writes it to `user_type` in tests/it/docs.rs"
            ))
        }
    }
    .to_owned())
}

/// The struct or tagged enum a `Section<X>` / `Vec<Section<X>>` field opens.
fn section_target(ty: &str) -> Option<String> {
    let ty = strip_wrapper(ty, "Option").unwrap_or(ty);
    let ty = strip_wrapper(ty, "Vec").unwrap_or(ty);
    strip_wrapper(ty, "Section").map(|t| last_segment(t).to_owned())
}

/// Renders the configuration reference; problems (unknown types, unreachable structs) are
/// returned beside it.
fn render_config(source: &str) -> (String, Vec<String>) {
    let parsed = parse_config_source(source);
    let mut out = String::new();
    let mut problems = Vec::new();
    let mut reached: BTreeSet<String> = BTreeSet::new();
    let Some(top) = parsed.structs.get("ConfigFile") else {
        return (
            String::new(),
            vec!["no `pub struct ConfigFile` with Deserialize".to_owned()],
        );
    };
    reached.insert("ConfigFile".to_owned());
    for field in &top.fields {
        let path = if strip_wrapper(&field.ty, "Vec").is_some() {
            format!("[[{}]]", field.key)
        } else {
            format!("[{}]", field.key)
        };
        render_section(
            &parsed,
            &field.key,
            &path,
            field,
            &mut out,
            &mut problems,
            &mut reached,
        );
    }
    for name in parsed.structs.keys() {
        if !reached.contains(name) {
            problems.push(format!(
                "Deserialize struct {name} is not reachable from ConfigFile through Section<..> fields \
                 or tagged_section!: its keys would be undocumented"
            ));
        }
    }
    for name in parsed.tagged.keys() {
        if !reached.contains(name) {
            problems.push(format!(
                "tagged_section!({name} ..) is not reachable from ConfigFile"
            ));
        }
    }
    (out, problems)
}

/// One table (a struct, or a tagged enum with one subsection per kind), then its sub-tables.
fn render_section(
    parsed: &ConfigSource,
    dotted: &str,
    heading: &str,
    field: &Field,
    out: &mut String,
    problems: &mut Vec<String>,
    reached: &mut BTreeSet<String>,
) {
    let Some(target) = section_target(&field.ty) else {
        return;
    };
    reached.insert(target.clone());
    if let Some(kinds) = parsed.tagged.get(&target) {
        let en = parsed.enums.get(&target);
        out.push_str(&format!("### `{heading}`\n\n"));
        if let Some(en) = en {
            out.push_str(&without_heading(&doc_text(&en.doc), heading));
            out.push_str("\n\n");
        }
        out.push_str("| `kind` | what |\n|---|---|\n");
        for (kind, variant, supported) in kinds {
            let vdoc = en
                .and_then(|e| e.variants.iter().find(|v| &v.name == variant))
                .map(|v| doc_text(&v.doc))
                .unwrap_or_default();
            let vdoc = capitalized(
                vdoc.strip_prefix(&format!("`kind = \"{kind}\"`: "))
                    .unwrap_or(&vdoc),
            );
            let support = if *supported {
                String::new()
            } else {
                format!(
                    " Parsed, then refused: kind \"{kind}\" is not supported yet in this build."
                )
            };
            out.push_str(&format!(
                "| `\"{kind}\"` | {}{} |\n",
                table_cell(&vdoc),
                support
            ));
        }
        out.push('\n');
        let mut subs: Vec<(String, &Field)> = Vec::new();
        for (kind, variant, supported) in kinds {
            if !*supported {
                continue;
            }
            // The struct of this variant: the enum's `Variant(StructName)` is not parsed, so
            // take the struct whose doc names this kind, or `<Variant><Enum-without-Section>`.
            let suffix = target.trim_end_matches("Section");
            let guess = format!("{variant}{suffix}Section");
            let Some(st) = parsed.structs.get(&guess).or_else(|| {
                parsed.structs.iter().find_map(|(_, s)| {
                    let d = doc_text(&s.doc);
                    (d.starts_with(&format!("`{heading}` with `kind = \"{kind}\"`"))).then_some(s)
                })
            }) else {
                problems.push(format!(
                    "`{heading}` kind \"{kind}\": no struct {guess} (or one documented \
                     as `{heading}` with `kind = \"{kind}\"`)"
                ));
                continue;
            };
            let name = parsed
                .structs
                .iter()
                .find(|(_, s)| std::ptr::eq(*s, st))
                .map(|(n, _)| n.clone())
                .unwrap_or_default();
            reached.insert(name);
            out.push_str(&format!("#### `{heading}` with `kind = \"{kind}\"`\n\n"));
            let d = doc_text(&st.doc);
            let prefix = format!("`{heading}` with `kind = \"{kind}\"`");
            let d = d
                .strip_prefix(&prefix)
                .map(|r| capitalized(r.trim_start_matches([':', '.']).trim()))
                .unwrap_or(d.clone());
            if !d.is_empty() {
                let d = d.as_str();
                out.push_str(d);
                out.push_str("\n\n");
            }
            render_keys(st, out, problems, &format!("{heading} kind {kind}"));
            for f in &st.fields {
                if section_target(&f.ty).is_some() {
                    subs.push((f.key.clone(), f));
                }
            }
        }
        for (key, f) in subs {
            let d = format!("{dotted}.{key}");
            render_section(parsed, &d, &format!("[{d}]"), f, out, problems, reached);
        }
        return;
    }
    let Some(st) = parsed.structs.get(&target) else {
        problems.push(format!(
            "`{heading}` opens {target}, which is neither a Deserialize struct nor a tagged_section!"
        ));
        return;
    };
    out.push_str(&format!("### `{heading}`\n\n"));
    let d = without_heading(&doc_text(&st.doc), heading);
    // The struct's own doc, then the field's (which says whether the table is optional).
    let fd = without_heading(&doc_text(&field.doc), heading);
    if !d.is_empty() {
        out.push_str(&d);
        out.push_str("\n\n");
    }
    if !fd.is_empty() && fd != d {
        out.push_str(&format!("In the file: {fd}\n\n"));
    }
    render_keys(st, out, problems, heading);
    for f in &st.fields {
        if section_target(&f.ty).is_some() {
            let d = format!("{dotted}.{}", f.key);
            render_section(parsed, &d, &format!("[{d}]"), f, out, problems, reached);
        }
    }
}

fn render_keys(st: &Struct, out: &mut String, problems: &mut Vec<String>, context: &str) {
    out.push_str("| key | type | default | meaning |\n|---|---|---|---|\n");
    for f in &st.fields {
        let ty = match user_type(&f.ty) {
            Ok(t) => t,
            Err(e) => {
                problems.push(format!("{context}: key `{}`: {e}", f.key));
                "?".to_owned()
            }
        };
        let doc = doc_text(&f.doc);
        if doc.is_empty() {
            problems.push(format!(
                "{context}: key `{}` has no doc comment: write one (it is the reference)",
                f.key
            ));
        }
        let (default, meaning) = split_default(&doc);
        let default = match default {
            Some(d) => d,
            None if says_required(&meaning) => "required".to_owned(),
            None if f.serde_default => "empty".to_owned(),
            None => "—".to_owned(),
        };
        let meaning = meaning
            .replace(" Required.", "")
            .replace("Required. ", "")
            .trim()
            .to_owned();
        let meaning = meaning
            .strip_suffix(" Required")
            .unwrap_or(&meaning)
            .to_owned();
        out.push_str(&format!(
            "| `{}` | {} | {} | {} |\n",
            f.key,
            ty,
            table_cell(&default),
            table_cell(&meaning)
        ));
    }
    out.push('\n');
}

// ---------------------------------------------------------------------------------------------
// src/telemetry.rs, read as text

#[derive(Debug, Clone, PartialEq)]
struct Metric {
    constant: String,
    name: String,
    kind: Option<String>,
    unit: Option<String>,
    help: Option<String>,
    labels: Vec<String>,
}

/// The text of the string literal starting at `text` (after optional whitespace), unescaped.
fn string_literal(text: &str) -> Option<(String, &str)> {
    let text = text.trim_start();
    let body = text.strip_prefix('"')?;
    let mut out = String::new();
    let mut chars = body.char_indices();
    while let Some((i, c)) = chars.next() {
        match c {
            '"' => return Some((out, &body[i + 1..])),
            '\\' => match chars.next()?.1 {
                'n' => out.push('\n'),
                '\n' => {
                    // A line continuation: skip the next line's leading whitespace.
                    let rest = &body[i + 2..];
                    let skip = rest.len() - rest.trim_start().len();
                    for _ in 0..rest[..skip].chars().count() {
                        chars.next();
                    }
                }
                other => out.push(other),
            },
            c => out.push(c),
        }
    }
    None
}

fn ident(text: &str) -> (&str, &str) {
    let text = text.trim_start();
    let end = text
        .find(|c: char| !(c.is_alphanumeric() || c == '_'))
        .unwrap_or(text.len());
    (&text[..end], &text[end..])
}

/// The metrics of `src/telemetry.rs`, in the order of their constants.
fn parse_metrics(source: &str) -> Vec<Metric> {
    let mut metrics: Vec<Metric> = source
        .lines()
        .filter_map(|l| l.trim().strip_prefix("pub const "))
        .filter_map(|l| l.split_once(": &str = \""))
        .filter_map(|(k, v)| Some((k.trim(), v.strip_suffix("\";")?)))
        .filter(|(_, v)| v.starts_with("floe_"))
        .map(|(k, v)| Metric {
            constant: k.to_owned(),
            name: v.to_owned(),
            kind: None,
            unit: None,
            help: None,
            labels: Vec::new(),
        })
        .collect();
    for kind in ["counter", "gauge", "histogram"] {
        // describe_kind!(CONST, Unit::X, "help")
        let call = format!("describe_{kind}!(");
        let mut rest = source;
        while let Some(at) = rest.find(&call) {
            rest = &rest[at + call.len()..];
            let (constant, after) = ident(rest);
            let after = after.trim_start().strip_prefix(',').unwrap_or(after);
            let (unit, help) = match after.trim_start().strip_prefix("Unit::") {
                Some(u) => {
                    let (unit, tail) = ident(u);
                    let tail = tail.trim_start().strip_prefix(',').unwrap_or(tail);
                    (Some(unit.to_owned()), string_literal(tail).map(|(s, _)| s))
                }
                None => (None, string_literal(after).map(|(s, _)| s)),
            };
            if let Some(m) = metrics.iter_mut().find(|m| m.constant == constant) {
                m.kind = Some(kind.to_owned());
                m.unit = unit.map(|u| unit_name(&u));
                m.help = help;
            }
        }
        // kind!(CONST, "label" => value, ...) — not preceded by `describe_`.
        let call = format!("{kind}!(");
        let mut offset = 0;
        while let Some(found) = source[offset..].find(&call) {
            let at = offset + found;
            offset = at + call.len();
            if source[..at].ends_with('_') {
                continue;
            }
            let args = &source[offset..];
            let (constant, mut tail) = ident(args);
            tail = &tail[..closing_paren(tail)];
            let mut labels = Vec::new();
            let mut t = tail;
            while let Some(q) = t.find('"') {
                let Some((label, after)) = string_literal(&t[q..]) else {
                    break;
                };
                if after.trim_start().starts_with("=>") {
                    labels.push(label);
                }
                t = after;
            }
            if let Some(m) = metrics.iter_mut().find(|m| m.constant == constant) {
                for l in labels {
                    if !m.labels.contains(&l) {
                        m.labels.push(l);
                    }
                }
            }
        }
    }
    metrics
}

/// The offset of the `)` closing a macro call whose arguments start `text` (one `(` open).
fn closing_paren(text: &str) -> usize {
    let mut depth = 1;
    let mut in_string = false;
    let mut escaped = false;
    for (i, c) in text.char_indices() {
        if in_string {
            match c {
                _ if escaped => escaped = false,
                '\\' => escaped = true,
                '"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match c {
            '"' => in_string = true,
            '(' => depth += 1,
            ')' => {
                depth -= 1;
                if depth == 0 {
                    return i;
                }
            }
            _ => {}
        }
    }
    text.len()
}

fn unit_name(unit: &str) -> String {
    match unit {
        "Count" => "count".to_owned(),
        "Seconds" => "seconds".to_owned(),
        "Bytes" => "bytes".to_owned(),
        "Milliseconds" => "milliseconds".to_owned(),
        other => other.to_lowercase(),
    }
}

fn render_metrics(source: &str) -> (String, Vec<String>) {
    let metrics = parse_metrics(source);
    let mut problems = Vec::new();
    if metrics.len() < 10 {
        problems.push(format!(
            "expected floe's metric names (`pub const X: &str = \"floe_…\"`), found {}",
            metrics.len()
        ));
    }
    let mut out = String::from("| metric | type | unit | labels | HELP |\n|---|---|---|---|---|\n");
    for m in &metrics {
        let Some(kind) = &m.kind else {
            problems.push(format!(
                "metric `{}` ({}) has no describe_counter!/describe_gauge!/describe_histogram! (HELP text)",
                m.name, m.constant
            ));
            continue;
        };
        if m.labels.is_empty() {
            problems.push(format!(
                "metric `{}` is never emitted with labels in this file (counter!/gauge!/histogram!)",
                m.name
            ));
        }
        let labels = m
            .labels
            .iter()
            .map(|l| format!("`{l}`"))
            .collect::<Vec<_>>()
            .join(", ");
        out.push_str(&format!(
            "| `{}` | {} | {} | {} | {} |\n",
            m.name,
            kind,
            m.unit.as_deref().unwrap_or("—"),
            labels,
            table_cell(m.help.as_deref().unwrap_or(""))
        ));
    }
    (out, problems)
}

// ---------------------------------------------------------------------------------------------
// Golden pages

/// Replaces the text between `<!-- generated:NAME -->` and `<!-- /generated:NAME -->`.
fn splice(page: &str, name: &str, content: &str) -> Result<String, String> {
    let open = format!("<!-- generated:{name} -->");
    let close = format!("<!-- /generated:{name} -->");
    let start = page
        .find(&open)
        .ok_or_else(|| format!("no {open} marker"))?
        + open.len();
    let end = page[start..]
        .find(&close)
        .ok_or_else(|| format!("no {close} marker after {open}"))?
        + start;
    Ok(format!(
        "{}\n{}{}",
        &page[..start],
        content.trim_end_matches('\n').to_owned() + "\n",
        &page[end..]
    ))
}

/// Compares a page with its rendering; rewrites it with `UPDATE_DOCS=1`.
fn check_page(page: &str, name: &str, content: &str, from: &str) {
    let path = root().join(page);
    let current = read(&path);
    let expected = splice(&current, name, content).unwrap_or_else(|e| panic!("{page}: {e}"));
    if current == expected {
        return;
    }
    if std::env::var_os("UPDATE_DOCS").is_some_and(|v| v == "1") {
        std::fs::write(&path, &expected).unwrap_or_else(|e| panic!("write {page}: {e}"));
        eprintln!("rewrote {page} from {from}");
        return;
    }
    let first_difference = current
        .lines()
        .zip(expected.lines())
        .enumerate()
        .find(|(_, (a, b))| a != b)
        .map(|(i, (a, b))| format!("line {}:\n  committed: {a}\n  rendered:  {b}", i + 1))
        .unwrap_or_else(|| "the pages differ in length".to_owned());
    panic!(
        "{page} is out of date with {from} (the generated part between <!-- generated:{name} --> \
         markers).\n{first_difference}\nTo fix: edit the doc comments in {from} (never the \
         generated part), then run\n  UPDATE_DOCS=1 cargo test --features testsuite --test it -- docs::\n\
         and commit {page}."
    );
}

fn assert_no_problems(what: &str, problems: Vec<String>) {
    assert!(problems.is_empty(), "{what}:\n  {}", problems.join("\n  "));
}

// ---------------------------------------------------------------------------------------------
// The tests

#[test]
fn configuration_reference_is_generated_from_config_file_rs() {
    let (from, source) = config_source();
    let (rendered, problems) = render_config(&source);
    assert_no_problems(&from, problems);
    check_page("docs/configuration.md", "config", &rendered, &from);
}

#[test]
fn metrics_table_is_generated_from_telemetry_rs() {
    let (from, source) = telemetry_source();
    let (rendered, problems) = render_metrics(&source);
    assert_no_problems(&from, problems);
    check_page("docs/observability.md", "metrics", &rendered, &from);
}

/// Markdown pages of the repository that users read.
fn doc_pages() -> Vec<PathBuf> {
    let mut pages = vec![root().join("README.md")];
    for dir in ["docs", "deploy", "loadtest", "deploy/local"] {
        if let Ok(entries) = std::fs::read_dir(root().join(dir)) {
            let mut found: Vec<PathBuf> = entries
                .filter_map(|e| Some(e.ok()?.path()))
                .filter(|p| p.extension().is_some_and(|e| e == "md"))
                .collect();
            found.sort();
            pages.extend(found);
        }
    }
    pages
}

#[test]
fn every_metric_named_in_the_docs_exists() {
    let (from, source) = telemetry_source();
    let names: BTreeSet<String> = parse_metrics(&source).into_iter().map(|m| m.name).collect();
    let mut problems = Vec::new();
    for page in doc_pages() {
        let text = read(&page);
        for (i, _) in text.match_indices("floe_") {
            if i > 0 && text[..i].ends_with(|c: char| c.is_alphanumeric() || c == '_' || c == '-') {
                continue;
            }
            let word: String = text[i..]
                .chars()
                .take_while(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '_')
                .collect();
            // Prometheus adds these to histogram series.
            let base = ["_bucket", "_sum", "_count"]
                .iter()
                .find_map(|s| word.strip_suffix(s))
                .unwrap_or(&word);
            if !names.contains(&word) && !names.contains(base) && !word.ends_with('_') {
                problems.push(format!(
                    "{}: `{word}` is not a metric of {from}",
                    page.strip_prefix(root()).unwrap_or(&page).display()
                ));
            }
        }
    }
    assert_no_problems("metric names in the docs", problems);
}

/// The anchors GitHub gives the headings of a Markdown page: lower case, punctuation other than
/// `-` and `_` removed, spaces as `-`; a repeated heading gets `-1`, `-2`, ….
fn anchors(page: &str) -> BTreeSet<String> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut out = BTreeSet::new();
    let mut in_code = false;
    for line in page.lines() {
        if line.starts_with("```") {
            in_code = !in_code;
            continue;
        }
        if in_code || !line.starts_with('#') {
            continue;
        }
        let text = line.trim_start_matches('#').trim();
        let slug: String = text
            .to_lowercase()
            .chars()
            .filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '-' || *c == '_')
            .map(|c| if c == ' ' { '-' } else { c })
            .collect();
        let n = seen.entry(slug.clone()).or_insert(0);
        out.insert(if *n == 0 {
            slug.clone()
        } else {
            format!("{slug}-{n}")
        });
        *n += 1;
    }
    out
}

#[test]
fn every_relative_link_in_the_docs_names_a_file_and_heading_of_the_repository() {
    let mut problems = Vec::new();
    for page in doc_pages() {
        let text = read(&page);
        let dir = page.parent().unwrap();
        let mut rest = text.as_str();
        while let Some(at) = rest.find("](") {
            rest = &rest[at + 2..];
            let Some(end) = rest.find(')') else { break };
            let target = &rest[..end];
            rest = &rest[end..];
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            let (file, anchor) = target.split_once('#').unwrap_or((target, ""));
            let resolved = if file.is_empty() {
                page.clone()
            } else {
                dir.join(file)
            };
            let inside = resolved
                .canonicalize()
                .map(|p| p.starts_with(root().canonicalize().unwrap()))
                .unwrap_or(false);
            let shown = page
                .strip_prefix(root())
                .unwrap_or(&page)
                .display()
                .to_string();
            if !inside {
                problems.push(format!(
                    "{shown}: link ({target}) does not name a file of the repository"
                ));
            } else if !anchor.is_empty()
                && resolved.extension().is_some_and(|e| e == "md")
                && !anchors(&read(&resolved)).contains(anchor)
            {
                problems.push(format!(
                    "{shown}: link ({target}): no heading with that anchor in {file}"
                ));
            }
        }
    }
    assert_no_problems("links", problems);
}

#[test]
fn nothing_outside_src_refers_to_a_path_outside_the_repository() {
    // Only `.ci/run` may use a folder beside the clone, and only when it is present. The needles
    // are assembled so that this file does not contain them either.
    let needles = [
        concat!("..", "/", "shared"),
        concat!("/", "work", "/"),
        concat!("DESIGN", ".md"),
        concat!("NOTES", ".md"),
        concat!("CONVENTIONS", ".md"),
    ];
    let mut files = doc_pages();
    for dir in [
        "src", "tests", "config", "deploy", "loadtest", "scripts", "bin",
    ] {
        let mut stack = vec![root().join(dir)];
        while let Some(d) = stack.pop() {
            let Ok(entries) = std::fs::read_dir(&d) else {
                continue;
            };
            for e in entries.filter_map(|e| e.ok()) {
                let p = e.path();
                // Installed packages (deploy/local/kinesis-efo's npm install) are not ours.
                if p.is_dir()
                    && p.file_name()
                        .is_some_and(|n| n == "node_modules" || n == ".tls")
                {
                    continue;
                }
                if p.is_dir() {
                    stack.push(p);
                } else if !files.contains(&p) {
                    files.push(p);
                }
            }
        }
    }
    let mut problems = Vec::new();
    for file in files {
        let Ok(text) = std::fs::read_to_string(&file) else {
            continue;
        };
        for (n, line) in text.lines().enumerate() {
            for needle in needles {
                if line.contains(needle) {
                    problems.push(format!(
                        "{}:{}: refers to `{needle}`, outside the repository (the design is docs/design.md)",
                        file.strip_prefix(root()).unwrap_or(&file).display(),
                        n + 1
                    ));
                }
            }
        }
    }
    assert_no_problems("paths outside the repository", problems);
}

// The checks themselves can fail: each is run on a source with one thing changed.

#[test]
fn a_new_key_or_a_renamed_key_changes_the_rendered_reference() {
    let (_, source) = config_source();
    let (before, _) = render_config(&source);
    let added = source.replacen(
        "    pub bootstrap_servers: String,\n",
        "    pub bootstrap_servers: String,\n    /// The consumer group. Required.\n    pub group_id: String,\n",
        1,
    );
    assert_ne!(added, source, "the fixture edit must apply");
    let (after, problems) = render_config(&added);
    assert!(problems.is_empty(), "{problems:?}");
    assert!(after.contains("| `group_id` | string | required | The consumer group. |"));
    assert_ne!(before, after);
    let renamed = source.replacen(
        "    pub bootstrap_servers: String,\n",
        "    #[serde(rename = \"brokers\")]\n    pub bootstrap_servers: String,\n",
        1,
    );
    let (after, _) = render_config(&renamed);
    assert!(after.contains("| `brokers` |") && !after.contains("| `bootstrap_servers` |"));
}

#[test]
fn an_unsupported_kind_is_said_so() {
    let (_, source) = config_source();
    let pretend = source.replacen(
        "\"s3tables\" => S3Tables(struct)",
        "\"s3tables\" => S3Tables(table)",
        1,
    );
    assert_ne!(pretend, source, "the fixture edit must apply");
    let (rendered, _) = render_config(&pretend);
    assert!(
        rendered.contains("kind \"s3tables\" is not supported yet in this build"),
        "{rendered}"
    );
}

#[test]
fn an_undocumented_or_unreachable_struct_is_a_problem() {
    let (_, source) = config_source();
    let orphan = format!(
        "{source}\n/// Not used.\n#[derive(Debug, Deserialize)]\npub struct OrphanSection {{\n    /// A key.\n    pub x: u32,\n}}\n"
    );
    let (_, problems) = render_config(&orphan);
    assert!(
        problems.iter().any(|p| p.contains("OrphanSection")),
        "{problems:?}"
    );
    let undocumented = source.replacen(
        "    pub bootstrap_servers: String,\n",
        "    pub bootstrap_servers: String,\n    pub partitions: u32,\n",
        1,
    );
    let (_, problems) = render_config(&undocumented);
    assert!(
        problems
            .iter()
            .any(|p| p.contains("`partitions` has no doc comment")),
        "{problems:?}"
    );
}

#[test]
fn a_metric_without_help_text_or_a_changed_kind_is_caught() {
    let (_, source) = telemetry_source();
    let (before, problems) = render_metrics(&source);
    assert!(problems.is_empty(), "{problems:?}");
    assert!(before.contains("| `floe_commit_duration_seconds` | histogram | seconds | `channel` |"));
    let new_metric = source.replacen(
        "pub const BUFFER_BYTES",
        "pub const NEW_THING_TOTAL: &str = \"floe_new_thing_total\";\npub const BUFFER_BYTES",
        1,
    );
    let (_, problems) = render_metrics(&new_metric);
    assert!(
        problems.iter().any(|p| p.contains("floe_new_thing_total")),
        "{problems:?}"
    );
    let as_gauge = source.replacen(
        "describe_histogram!(\n        COMMIT_DURATION_SECONDS",
        "describe_gauge!(\n        COMMIT_DURATION_SECONDS",
        1,
    );
    assert_ne!(as_gauge, source, "the fixture edit must apply");
    let (after, _) = render_metrics(&as_gauge);
    assert!(after.contains("| `floe_commit_duration_seconds` | gauge |"));
}

#[test]
fn the_parsers_see_fields_renames_defaults_and_kinds() {
    let source = r#"
/// The file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConfigFile {
    /// `[a]`: the a table.
    #[serde(default, rename = "a")]
    pub a_section: Section<A>,
    /// `[e]`: tagged.
    pub e: Section<E>,
}

/// `[a]`: things.
#[derive(Debug, Deserialize)]
pub struct A {
    /// One thing. Default: `"x. y"`; more text.
    pub one: Option<String>,
    /// Size of it. Required.
    pub size: SizeText,
}

/// `[e]`: tagged by `kind`.
#[derive(Debug)]
pub enum E {
    /// `kind = "p"`: a p.
    P(PeSection),
    /// `kind = "q"`: a q.
    Q(toml::Table),
}

/// `[e]` with `kind = "p"`.
#[derive(Debug, Deserialize)]
pub struct PeSection {
    /// Flag. Default `false`.
    pub flag: Option<bool>,
}

#[derive(Debug)]
pub struct NotParsed {
    pub x: u32,
}

tagged_section!(E { "p" => P(struct), "q" => Q(table) });
"#;
    let (rendered, problems) = render_config(source);
    assert!(problems.is_empty(), "{problems:?}");
    assert!(rendered.contains("### `[a]`\n\nThings."), "{rendered}");
    assert!(
        rendered.contains("| `one` | string | `\"x. y\"` | One thing. More text. |"),
        "{rendered}"
    );
    assert!(
        rendered.contains("| `size` | size | required | Size of it. |"),
        "{rendered}"
    );
    assert!(rendered.contains("| `\"q\"` | A q. Parsed, then refused: kind \"q\" is not supported yet in this build. |"), "{rendered}");
    assert!(
        rendered.contains("#### `[e]` with `kind = \"p\"`"),
        "{rendered}"
    );
    assert!(
        rendered.contains("| `flag` | boolean | `false` | Flag. |"),
        "{rendered}"
    );
    assert!(!rendered.contains("NotParsed"));
}

/// Issue 35: the lists the docs keep by hand name everything there is: every binary of
/// Cargo.toml in README's layout table and docs/design.md, every `config/*.toml` in
/// docs/configuration.md's table of examples.
#[test]
fn the_binaries_and_example_configs_are_all_listed() {
    let cargo: toml::Table = read(&root().join("Cargo.toml")).parse().unwrap();
    let bins: Vec<String> = cargo["bin"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["name"].as_str().unwrap().to_string())
        .collect();
    assert!(bins.len() >= 4, "{bins:?}");
    let readme = read(&root().join("README.md"));
    let bin_row = readme
        .lines()
        .find(|l| l.starts_with("| `bin/` |"))
        .expect("README's layout table has a bin/ row");
    let design = read(&root().join("docs/design.md")).replace('\n', " ");
    let layout = &design[design.find("`bin/` holds").expect("design.md's layout")..];
    let layout = &layout[..layout.find(';').unwrap_or(layout.len())];
    for bin in &bins {
        let name = format!("`{bin}`");
        assert!(bin_row.contains(&name), "README's bin/ row lacks {name}");
        assert!(layout.contains(&name), "design.md's layout lacks {name}");
    }
    let page = read(&root().join("docs/configuration.md"));
    let mut configs: Vec<String> = std::fs::read_dir(root().join("config"))
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.ends_with(".toml"))
        .collect();
    configs.sort();
    for name in configs {
        assert!(
            page.contains(&format!("| `config/{name}` |")),
            "docs/configuration.md's examples lack config/{name}"
        );
    }
}

/// Issue 44: the README's Avro/Protobuf walkthrough says how to switch formats on the subject
/// the quickstart registers (a registry keeps the first format's schema there).
#[test]
fn the_readme_says_how_to_switch_formats_on_one_subject() {
    let readme = read(&root().join("README.md"));
    let walkthrough = &readme[readme
        .find("The same with Avro or Protobuf records")
        .expect("the walkthrough")..];
    let walkthrough = &walkthrough[..walkthrough.find("\n## ").unwrap_or(walkthrough.len())];
    assert!(
        walkthrough.contains("restart the local registry")
            && walkthrough.contains("another subject"),
        "{walkthrough}"
    );
}
