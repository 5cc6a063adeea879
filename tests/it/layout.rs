//! The layout of the code is the architecture (docs/design.md, "Layout"), and this module holds
//! it to its rules:
//! - **Layers.** Every top-level module (a file or a folder under `src/`, a "room") sits on one
//!   layer, and imports point only down: this reads the code's own `crate::…` paths (comments and
//!   `#[cfg(test)]` modules left out), refuses any import cycle between top-level modules and any
//!   import from a lower layer up into a higher one, and prints the module graph.
//! - **No circle inside a room.** Inside one top-level module, the files' own imports
//!   (`use super::…`, `use self::…`, `crate::<module>::<file>…`, a parent's paths through its
//!   child modules; re-exports followed to the file that defines the item) form no cycle between
//!   files of which neither contains the other. A parent and its children (a `mod.rs` and the
//!   files it declares) are one unit, as `mod` makes them: the parent may use its children and
//!   they may use what the parent defines.
//! - **Limits.** No file in `src/`, `bin/` or `tests/` over [`MAX_FILE_LINES`] lines; no function
//!   over [`MAX_FN_LINES`] lines, counted from its `fn` line to its closing brace (test functions
//!   and inline test modules included), except at most [`MAX_TABLES_OF_DATA`] that are tables of
//!   data, each with a comment line containing `table of data` directly above it (above its
//!   attributes and doc comment).
//!
//! Each failure prints what to fix (the cycle with the imports that make it, the files and
//! functions with their lengths). To see the module graph:
//!
//! ```text
//! cargo test --features testsuite --test it -- layout:: --nocapture
//! ```
//!
//! A module added under `src/` must be given a layer here; that is the point: where it sits is a
//! decision, written down once.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Layers, lowest first. A module may import modules of lower layers only.
const LAYERS: &[(&str, &[&str])] = &[
    ("crash-test failpoints", &["failpoint"]),
    ("pure data and rules", &["model", "time", "retry", "schema"]),
    ("configuration", &["config"]),
    (
        "schema registries: framing, decoder, version resolution, clients",
        &["registry"],
    ),
    ("record conversion", &["convert"]),
    ("metrics, AWS clients", &["telemetry", "aws"]),
    ("sources, lease store, DLQ", &["source", "lease", "dlq"]),
    (
        "health endpoints, destination seam",
        &["health", "destination"],
    ),
    ("catalogs", &["catalog"]),
    ("destinations", &["iceberg", "raw"]),
    ("pipeline stages", &["worker", "commit"]),
    ("control plane", &["channel"]),
    ("floe run", &["app"]),
    (
        "tools: quickstart, load generator, sample events",
        &["tools"],
    ),
    ("command line (its subcommands run the tools too)", &["cli"]),
];

/// Upward imports that are allowed, each with its reason: (from, to, why). Empty today.
const ALLOWED_UPWARD: &[(&str, &str, &str)] = &[];

fn layer_of(module: &str) -> Option<usize> {
    LAYERS.iter().position(|(_, ms)| ms.contains(&module))
}

/// The code of a Rust file without comments and without its `#[cfg(test)] mod tests` (an inline
/// module is cut with everything after it; a `mod tests;` declaration only drops that line).
fn code_of(text: &str) -> String {
    let text = match text.find("#[cfg(test)]\nmod tests {") {
        Some(i) => &text[..i],
        None => text,
    };
    text.lines()
        .map(|l| {
            if l.trim_start().starts_with("//") || l.trim() == "mod tests;" {
                ""
            } else {
                l.split(" // ").next().unwrap_or("")
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Every `crate::<name>` in `code`, as names.
fn crate_paths(code: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut rest = code;
    while let Some(i) = rest.find("crate::") {
        let after = &rest[i + "crate::".len()..];
        if after.starts_with('{') {
            // `use crate::{a::x, b}`: each first segment of the group.
            let group = &after[1..after.find('}').unwrap_or(after.len())];
            for item in group.split(',') {
                let name: String = item
                    .trim()
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                if !name.is_empty() {
                    out.insert(name);
                }
            }
        } else {
            let name: String = after
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if !name.is_empty() {
                out.insert(name);
            }
        }
        rest = after;
    }
    out
}

fn walk(dir: &Path, files: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            walk(&path, files);
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
}

/// module → (imported module → files importing it).
fn module_graph() -> BTreeMap<String, BTreeMap<String, BTreeSet<String>>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    walk(&src, &mut files);
    let mut graph: BTreeMap<String, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
    for file in files {
        let rel = file.strip_prefix(&src).unwrap();
        let first = rel
            .components()
            .next()
            .unwrap()
            .as_os_str()
            .to_string_lossy();
        let module = first.trim_end_matches(".rs").to_string();
        if module == "lib" {
            continue;
        }
        let name = file.file_name().unwrap().to_string_lossy();
        let entry = graph.entry(module.clone()).or_default();
        // Unit-test files (`tests.rs`, or the files of a module's `tests/` folder) and the
        // conformance suite are test code.
        let in_tests_folder = rel.components().any(|c| c.as_os_str() == "tests");
        if name == "tests.rs" || name == "conformance.rs" || in_tests_folder {
            continue;
        }
        let code = code_of(&std::fs::read_to_string(&file).unwrap());
        for target in crate_paths(&code) {
            if target != module {
                entry
                    .entry(target)
                    .or_default()
                    .insert(rel.display().to_string());
            }
        }
    }
    graph
}

/// One cycle of `graph` if there is any (depth-first search).
fn find_cycle(graph: &BTreeMap<String, BTreeMap<String, BTreeSet<String>>>) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        graph: &BTreeMap<String, BTreeMap<String, BTreeSet<String>>>,
        state: &mut BTreeMap<String, u8>,
        stack: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        state.insert(node.to_string(), 1);
        stack.push(node.to_string());
        for next in graph.get(node).into_iter().flat_map(|e| e.keys()) {
            if !graph.contains_key(next) {
                continue;
            }
            match state.get(next.as_str()) {
                Some(1) => {
                    let at = stack.iter().position(|n| n == next).unwrap();
                    let mut cycle = stack[at..].to_vec();
                    cycle.push(next.clone());
                    return Some(cycle);
                }
                Some(_) => {}
                None => {
                    if let Some(c) = visit(next, graph, state, stack) {
                        return Some(c);
                    }
                }
            }
        }
        stack.pop();
        state.insert(node.to_string(), 2);
        None
    }
    let mut state = BTreeMap::new();
    for node in graph.keys() {
        if !state.contains_key(node) {
            if let Some(c) = visit(node, graph, &mut state, &mut Vec::new()) {
                return Some(c);
            }
        }
    }
    None
}

#[test]
fn top_level_modules_form_layers_without_cycles_or_upward_imports() {
    let graph = module_graph();
    for (i, (role, modules)) in LAYERS.iter().enumerate().rev() {
        for m in *modules {
            let deps: Vec<&String> = graph
                .get(*m)
                .map(|e| e.keys().filter(|d| graph.contains_key(*d)).collect())
                .unwrap_or_default();
            println!("layer {i:>2} {role:<32} {m:<10} -> {deps:?}");
        }
    }
    let unplaced: Vec<&String> = graph.keys().filter(|m| layer_of(m).is_none()).collect();
    assert!(
        unplaced.is_empty(),
        "modules without a layer in tests/it/layout.rs LAYERS: {unplaced:?}"
    );
    if let Some(cycle) = find_cycle(&graph) {
        panic!(
            "import cycle between top-level modules: {}",
            cycle.join(" -> ")
        );
    }
    let mut upward = Vec::new();
    for (from, deps) in &graph {
        for (to, files) in deps {
            let (Some(lf), Some(lt)) = (layer_of(from), layer_of(to)) else {
                continue;
            };
            let allowed = ALLOWED_UPWARD.iter().any(|(f, t, _)| f == from && t == to);
            if lt >= lf && !allowed {
                upward.push(format!(
                    "{from} (layer {lf}) -> {to} (layer {lt}) in {files:?}"
                ));
            }
        }
    }
    assert!(
        upward.is_empty(),
        "imports that do not point down a layer:\n{}",
        upward.join("\n")
    );
}

#[test]
fn the_path_reader_sees_grouped_and_plain_imports() {
    let code = code_of(
        "use crate::model::Position;\nuse crate::{config::Config, time};\n// crate::app in a comment\nfn f() { crate::lease::x(); }\n#[cfg(test)]\nmod tests { use crate::cli; }\n",
    );
    let found: Vec<String> = crate_paths(&code).into_iter().collect();
    assert_eq!(found, ["config", "lease", "model", "time"]);
}

/// No file in `src/`, `bin/` or `tests/` is longer than this many lines.
const MAX_FILE_LINES: usize = 1_500;

/// No function is longer than this many lines (from its `fn` line to its closing brace)...
const MAX_FN_LINES: usize = 150;

/// ...except at most this many tables of data, each marked by a comment containing
/// [`TABLE_OF_DATA`] directly above it.
const MAX_TABLES_OF_DATA: usize = 3;

/// The words of the comment that marks a long function as a table of data.
const TABLE_OF_DATA: &str = "table of data";

/// The folders whose Rust files the limits apply to.
const LIMITED_DIRS: &[&str] = &["src", "bin", "tests"];

/// Every `.rs` file under `dirs` of the repository: (path relative to the repository, text),
/// sorted by path.
fn rust_files(dirs: &[&str]) -> Vec<(String, String)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    for dir in dirs {
        walk(&root.join(dir), &mut files);
    }
    let mut out: Vec<(String, String)> = files
        .into_iter()
        .map(|path| {
            let rel = path.strip_prefix(root).unwrap().display().to_string();
            (rel, std::fs::read_to_string(&path).unwrap())
        })
        .collect();
    out.sort();
    out
}

/// `text` with its comments and its string and character literals blanked out (every character
/// but a newline becomes a space), so that the braces left are the code's own and the lines stay
/// where they were.
fn masked(text: &str) -> String {
    let c: Vec<char> = text.chars().collect();
    let blank = |ch: char| if ch == '\n' { '\n' } else { ' ' };
    let is_ident = |ch: char| ch.is_alphanumeric() || ch == '_';
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < c.len() {
        let next = c.get(i + 1).copied();
        let start = i;
        if c[i] == '/' && next == Some('/') {
            while i < c.len() && c[i] != '\n' {
                i += 1;
            }
        } else if c[i] == '/' && next == Some('*') {
            let mut depth = 0;
            while i < c.len() {
                if c[i] == '/' && c.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if c[i] == '*' && c.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
        } else if let Some(end) = raw_string_end(&c, i).filter(|_| i == 0 || !is_ident(c[i - 1])) {
            i = end;
        } else if c[i] == '"' {
            i += 1;
            while i < c.len() && c[i] != '"' {
                i += if c[i] == '\\' { 2 } else { 1 };
            }
            i += 1;
        } else if c[i] == '\'' && next == Some('\\') {
            // An escaped character literal: '\n', '\'', '\u{1F600}'.
            i += 3;
            while i < c.len() && c[i] != '\'' {
                i += 1;
            }
            i += 1;
        } else if c[i] == '\'' && c.get(i + 2) == Some(&'\'') {
            i += 3;
        } else {
            // Code, a lifetime's quote included.
            out.push(c[i]);
            i += 1;
            continue;
        }
        let end = i.min(c.len());
        out.extend(c[start..end].iter().map(|&ch| blank(ch)));
        i = end;
    }
    out
}

/// Where the raw string literal (`r"…"`, `r#"…"#`, `br"…"`, `cr"…"`) starting at `i` ends.
fn raw_string_end(c: &[char], i: usize) -> Option<usize> {
    let mut j = match c[i] {
        'r' => i + 1,
        'b' | 'c' if c.get(i + 1) == Some(&'r') => i + 2,
        _ => return None,
    };
    let hashes = c[j..].iter().take_while(|&&ch| ch == '#').count();
    j += hashes;
    if c.get(j) != Some(&'"') {
        return None;
    }
    j += 1;
    while j < c.len() {
        if c[j] == '"' && (1..=hashes).all(|h| c.get(j + h) == Some(&'#')) {
            return Some(j + 1 + hashes);
        }
        j += 1;
    }
    Some(c.len())
}

/// One function of a file: where it starts (1-based line of its `fn`), its name and its length
/// in lines, from its `fn` line to its closing brace.
#[derive(Debug, PartialEq)]
struct FnLength {
    line: usize,
    name: String,
    lines: usize,
}

/// Every function with a body in `text` (free functions, methods, nested functions; declarations
/// without a body are not counted).
fn functions(text: &str) -> Vec<FnLength> {
    let code: Vec<char> = masked(text).chars().collect();
    let is_ident = |ch: char| ch.is_alphanumeric() || ch == '_';
    let mut line_of = Vec::with_capacity(code.len());
    let mut line = 1;
    for &ch in &code {
        line_of.push(line);
        line += usize::from(ch == '\n');
    }
    let mut out = Vec::new();
    for at in 0..code.len() {
        let keyword = code[at] == 'f'
            && code.get(at + 1) == Some(&'n')
            && code.get(at + 2).is_some_and(|ch| ch.is_whitespace())
            && (at == 0 || !is_ident(code[at - 1]));
        if !keyword {
            continue;
        }
        let mut i = at + 2;
        while i < code.len() && code[i].is_whitespace() {
            i += 1;
        }
        let name: String = code[i..].iter().take_while(|&&ch| is_ident(ch)).collect();
        if name.is_empty() || name.starts_with(|ch: char| ch.is_ascii_digit()) {
            continue;
        }
        // The body is the first `{` outside the parameters' parentheses; a `;` first means a
        // declaration without a body.
        let mut parens = 0i32;
        let mut body = None;
        while i < code.len() {
            match code[i] {
                '(' | '[' => parens += 1,
                ')' | ']' => parens -= 1,
                ';' if parens == 0 => break,
                '{' if parens == 0 => {
                    body = Some(i);
                    break;
                }
                _ => {}
            }
            i += 1;
        }
        let Some(open) = body else { continue };
        let mut depth = 0;
        let mut close = open;
        for (j, &ch) in code.iter().enumerate().skip(open) {
            match ch {
                '{' => depth += 1,
                '}' => depth -= 1,
                _ => {}
            }
            if depth == 0 {
                close = j;
                break;
            }
        }
        out.push(FnLength {
            line: line_of[at],
            name,
            lines: line_of[close] - line_of[at] + 1,
        });
    }
    out
}

/// Whether the function whose `fn` is on 1-based line `line` of `lines` is marked as a table of
/// data: a `//` comment line containing [`TABLE_OF_DATA`] directly above it, its attributes and
/// its doc comment.
fn is_table_of_data(lines: &[&str], line: usize) -> bool {
    let mut i = line - 1;
    while i > 0 {
        let above = lines[i - 1].trim();
        if above.starts_with("///") || above.starts_with("#[") {
            i -= 1;
        } else if above.ends_with(']') {
            // The last line of an attribute written over several lines.
            while i > 0 && !lines[i - 1].trim().starts_with("#[") {
                i -= 1;
            }
        } else if above.starts_with("//") {
            if above.contains(TABLE_OF_DATA) {
                return true;
            }
            i -= 1;
        } else {
            return false;
        }
    }
    false
}

#[test]
fn no_file_in_src_bin_or_tests_is_over_1500_lines() {
    let mut long: Vec<(usize, String)> = rust_files(LIMITED_DIRS)
        .into_iter()
        .map(|(path, text)| (text.lines().count(), path))
        .filter(|(n, _)| *n > MAX_FILE_LINES)
        .collect();
    long.sort_by(|a, b| b.cmp(a));
    let long: Vec<String> = long
        .iter()
        .map(|(n, path)| format!("{n:>6} {path}"))
        .collect();
    assert!(
        long.is_empty(),
        "files over {MAX_FILE_LINES} lines (split them by section):\n{}",
        long.join("\n")
    );
}

#[test]
fn no_function_is_over_150_lines_but_three_tables_of_data() {
    let mut long = Vec::new();
    let mut tables = Vec::new();
    for (path, text) in rust_files(LIMITED_DIRS) {
        let lines: Vec<&str> = text.lines().collect();
        for f in functions(&text)
            .into_iter()
            .filter(|f| f.lines > MAX_FN_LINES)
        {
            let entry = (f.lines, format!("{path}:{} {}", f.line, f.name));
            if is_table_of_data(&lines, f.line) {
                tables.push(entry);
            } else {
                long.push(entry);
            }
        }
    }
    long.sort_by(|a, b| b.cmp(a));
    let listed = |fns: &[(usize, String)]| {
        fns.iter()
            .map(|(n, at)| format!("{n:>6} {at}"))
            .collect::<Vec<_>>()
            .join("\n")
    };
    assert!(
        long.is_empty(),
        "functions over {MAX_FN_LINES} lines (lines, file:line, name; split them into steps):\n{}",
        listed(&long)
    );
    assert!(
        tables.len() <= MAX_TABLES_OF_DATA,
        "more than {MAX_TABLES_OF_DATA} functions over {MAX_FN_LINES} lines are marked \
         `{TABLE_OF_DATA}`:\n{}",
        listed(&tables)
    );
}

#[test]
fn the_function_counter_sees_bodies_not_braces_in_literals_and_the_table_of_data_mark() {
    let text = r##"
fn one_line() -> u8 { 1 }
trait T {
    fn declared(&self);
    fn defaulted(&self) -> String {
        format!("{{ {} }}", '{')
    }
}
/* fn not_code() { */
// table of data: the cases
/// Docs.
#[test]
#[cfg_attr(
    miri,
    ignore
)]
fn cases(Pair { a, b }: Pair) -> &'static str {
    let raw = r#"}}" fn f() {"#;
    let c = '}';
    if a { "}" } else { raw }
}
fn unmarked() {}
"##;
    let found: Vec<(String, usize, usize)> = functions(text)
        .into_iter()
        .map(|f| (f.name, f.line, f.lines))
        .collect();
    assert_eq!(
        found,
        [
            ("one_line".to_string(), 2, 1),
            ("defaulted".to_string(), 5, 3),
            ("cases".to_string(), 17, 5),
            ("unmarked".to_string(), 22, 1),
        ]
    );
    let lines: Vec<&str> = text.lines().collect();
    assert!(is_table_of_data(&lines, 17));
    assert!(!is_table_of_data(&lines, 22));
    assert!(!is_table_of_data(&lines, 5));
}

/// file → (file it imports → the paths that import it), files named by their path under `src/`.
type FileGraph = BTreeMap<String, BTreeMap<String, BTreeSet<String>>>;

/// One file of `src/` as the circle check reads it.
struct RoomFile {
    /// Its path under `src/` (`catalog/rest.rs`).
    path: String,
    /// Its code: comments and unit tests left out.
    code: String,
    /// The child modules it declares (`mod x;`).
    children: BTreeSet<String>,
    /// The items its `use` declarations bring in: name → the item's path from the crate root.
    uses: BTreeMap<String, Vec<String>>,
}

fn is_ident_char(ch: char) -> bool {
    ch.is_alphanumeric() || ch == '_'
}

/// The module path of the file at `path` under `src/` (`["catalog", "rest"]` for
/// `catalog/rest.rs` and for `catalog/rest/mod.rs`); `None` for the crate root.
fn module_of(path: &str) -> Option<Vec<String>> {
    let mut segments: Vec<String> = path
        .trim_end_matches(".rs")
        .split('/')
        .map(String::from)
        .collect();
    if segments.last().is_some_and(|s| s == "mod") {
        segments.pop();
    }
    (segments != ["lib"]).then_some(segments)
}

/// The paths of the use tree or path expression that starts `text` (`a::b`, `a::{b, c::d}`),
/// each appended to `prefix`. A trailing `self` names the module itself.
fn tree_paths(text: &str, prefix: &[String], out: &mut Vec<Vec<String>>) {
    let mut segments = prefix.to_vec();
    let mut rest = text.trim_start();
    loop {
        if let Some(group) = rest.strip_prefix('{') {
            let mut depth = 0;
            let mut start = 0;
            for (i, ch) in group.char_indices() {
                match ch {
                    '{' => depth += 1,
                    '}' if depth == 0 => {
                        tree_paths(&group[start..i], &segments, out);
                        return;
                    }
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        tree_paths(&group[start..i], &segments, out);
                        start = i + 1;
                    }
                    _ => {}
                }
            }
            return;
        }
        let ident: String = rest.chars().take_while(|&ch| is_ident_char(ch)).collect();
        if ident.is_empty() {
            break;
        }
        rest = &rest[ident.len()..];
        if ident != "self" {
            segments.push(ident);
        }
        match rest.strip_prefix("::") {
            Some(after) => rest = after,
            None => break,
        }
    }
    if segments.len() > prefix.len() || !prefix.is_empty() {
        out.push(segments);
    }
}

/// Every path in `code` of the file of module `module` that starts at `crate::`, `super::`,
/// `self::` or at one of its `children`, from the crate root.
fn paths_in(code: &str, module: &[String], children: &BTreeSet<String>) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let starts = ["crate", "super", "self"]
        .into_iter()
        .chain(children.iter().map(String::as_str));
    for start in starts {
        let needle = format!("{start}::");
        for (at, _) in code.match_indices(&needle) {
            if code[..at]
                .chars()
                .next_back()
                .is_some_and(|ch| is_ident_char(ch) || ch == ':')
            {
                continue;
            }
            let mut base: Vec<String> = match start {
                "crate" => Vec::new(),
                "self" => module.to_vec(),
                "super" => module[..module.len().saturating_sub(1)].to_vec(),
                child => module.iter().cloned().chain([child.to_string()]).collect(),
            };
            let mut found = Vec::new();
            tree_paths(&code[at + needle.len()..], &[], &mut found);
            for mut path in found {
                while path.first().is_some_and(|s| s == "super") {
                    path.remove(0);
                    base.pop();
                }
                out.push(base.iter().cloned().chain(path).collect());
            }
        }
    }
    out
}

/// The file defining the item at `path` (from the crate root): the deepest module of the path
/// that is a file, or, when that file only imports the item (`use child::Item`, `pub use`), the
/// file it imports it from.
fn defining_file(
    path: &[String],
    files: &BTreeMap<Vec<String>, RoomFile>,
    hops: usize,
) -> Option<Vec<String>> {
    let k = (1..=path.len())
        .rev()
        .find(|&k| files.contains_key(&path[..k]))?;
    let file = &files[&path[..k]];
    if let Some(via) = path.get(k).and_then(|name| file.uses.get(name)) {
        if hops < 8 && via.first() == path.first() && via[..] != path[..=k] {
            let mut next = via.clone();
            next.extend_from_slice(&path[k + 1..]);
            if let Some(found) = defining_file(&next, files, hops + 1) {
                return Some(found);
            }
        }
    }
    Some(path[..k].to_vec())
}

/// The import graph between the files of each top-level module, from `files` (path under `src/`,
/// text). Unit-test files are left out; an import between a file and one of its ancestors (a
/// parent and its children are one unit) or into another top-level module is no edge.
fn file_graph(files: &[(String, String)]) -> FileGraph {
    let mut rooms: BTreeMap<Vec<String>, RoomFile> = BTreeMap::new();
    for (path, text) in files {
        let is_test = path.ends_with("/tests.rs")
            || path.ends_with("/conformance.rs")
            || path.contains("/tests/");
        let Some(module) = module_of(path).filter(|_| !is_test) else {
            continue;
        };
        let code = code_of(text);
        let children: BTreeSet<String> = code
            .lines()
            .filter_map(|l| {
                let l = l.trim();
                let l = l
                    .strip_prefix("pub ")
                    .or(l.strip_prefix("pub(crate) "))
                    .unwrap_or(l);
                l.strip_prefix("mod ")?.strip_suffix(';').map(String::from)
            })
            .collect();
        let mut uses = BTreeMap::new();
        for (at, _) in code.match_indices("use ") {
            if code[..at].chars().next_back().is_some_and(is_ident_char) {
                continue;
            }
            let statement = &code[at + 4..];
            let statement = &statement[..statement.find(';').unwrap_or(statement.len())];
            for path in paths_in(statement, &module, &children) {
                if let Some(name) = path.last() {
                    uses.insert(name.clone(), path);
                }
            }
        }
        let file = RoomFile {
            path: path.clone(),
            code,
            children,
            uses,
        };
        rooms.insert(module, file);
    }
    let mut graph = FileGraph::new();
    for (module, file) in &rooms {
        let edges = graph.entry(file.path.clone()).or_default();
        for path in paths_in(&file.code, module, &file.children) {
            if path.first() != module.first() {
                continue;
            }
            let Some(target) = defining_file(&path, &rooms, 0) else {
                continue;
            };
            if target.starts_with(module) || module.starts_with(&target) {
                continue;
            }
            edges
                .entry(rooms[&target].path.clone())
                .or_default()
                .insert(format!("crate::{}", path.join("::")));
        }
    }
    graph
}

/// The circles of `graph`: its strongly connected components of more than one file (Tarjan).
fn circles(graph: &FileGraph) -> Vec<Vec<String>> {
    struct Search<'g> {
        graph: &'g FileGraph,
        index: BTreeMap<&'g str, usize>,
        low: BTreeMap<&'g str, usize>,
        stack: Vec<&'g str>,
        found: Vec<Vec<String>>,
    }
    impl<'g> Search<'g> {
        fn visit(&mut self, node: &'g str) {
            let n = self.index.len();
            self.index.insert(node, n);
            self.low.insert(node, n);
            self.stack.push(node);
            for next in self.graph.get(node).into_iter().flat_map(|e| e.keys()) {
                if !self.index.contains_key(next.as_str()) {
                    self.visit(next);
                    let low = self.low[node].min(self.low[next.as_str()]);
                    self.low.insert(node, low);
                } else if self.stack.contains(&next.as_str()) {
                    let low = self.low[node].min(self.index[next.as_str()]);
                    self.low.insert(node, low);
                }
            }
            if self.low[node] == self.index[node] {
                let at = self.stack.iter().position(|n| *n == node).unwrap();
                let mut component: Vec<String> = self.stack.drain(at..).map(String::from).collect();
                if component.len() > 1 {
                    component.sort();
                    self.found.push(component);
                }
            }
        }
    }
    let mut search = Search {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        found: Vec::new(),
    };
    for node in graph.keys() {
        if !search.index.contains_key(node.as_str()) {
            search.visit(node);
        }
    }
    search.found.sort();
    search.found
}

/// Each circle of `graph` with the imports that close it, one line per import.
fn describe_circles(graph: &FileGraph) -> Vec<String> {
    circles(graph)
        .iter()
        .map(|circle| {
            let mut text = format!("circle: {}", circle.join(" <-> "));
            for from in circle {
                for (to, paths) in &graph[from] {
                    if circle.contains(to) {
                        text += &format!("\n  {from} -> {to}: {paths:?}");
                    }
                }
            }
            text
        })
        .collect()
}

#[test]
fn no_circle_between_files_inside_a_room() {
    let files: Vec<(String, String)> = rust_files(&["src"])
        .into_iter()
        .map(|(path, text)| (path.trim_start_matches("src/").to_string(), text))
        .collect();
    let found = describe_circles(&file_graph(&files));
    assert!(
        found.is_empty(),
        "import cycles between files inside a top-level module (move what both need to one \
         of them, or down to a file both import):\n{}",
        found.join("\n")
    );
}

#[test]
fn the_file_graph_finds_circles_through_re_exports_but_not_between_parent_and_child() {
    let file = |path: &str, text: &str| (path.to_string(), text.to_string());
    let room = |b_uses: &str| {
        vec![
            file("room/mod.rs", "mod a;\npub mod b;\nmod c;\npub use a::Thing;\npub struct Shared;\nfn f() { b::helper(); }\n"),
            file("room/a.rs", "use super::Shared;\nuse crate::room::{b::helper, c};\npub struct Thing;\n"),
            file("room/b.rs", &format!("pub fn helper() {{ {b_uses}; }}\n")),
            file("room/c.rs", "use super::{self as parent, Shared};\n#[cfg(test)]\nmod tests {\n    use super::super::a::Thing;\n}\n"),
            file("other.rs", "use crate::room::a::Thing;\n"),
            file("room/tests.rs", "use super::a::Thing;\n"),
        ]
    };
    // b uses the parent's re-export of a's `Thing`: a -> b -> a.
    let graph = file_graph(&room("super::Thing::new()"));
    assert_eq!(circles(&graph), [["room/a.rs", "room/b.rs"]]);
    assert_eq!(
        describe_circles(&graph),
        ["circle: room/a.rs <-> room/b.rs\n  room/a.rs -> room/b.rs: {\"crate::room::b::helper\"}\n  room/b.rs -> room/a.rs: {\"crate::room::Thing::new\"}"]
    );
    // b uses what the parent defines itself: no circle (parent and children are one unit).
    let graph = file_graph(&room("let _ = super::Shared"));
    assert!(circles(&graph).is_empty(), "{graph:?}");
    assert_eq!(
        graph["room/a.rs"].keys().collect::<Vec<_>>(),
        ["room/b.rs", "room/c.rs"]
    );
    assert!(graph["room/c.rs"].is_empty(), "{graph:?}");
}
