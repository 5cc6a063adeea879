//! The layout of `src/` is the architecture (docs/design.md, "Layout"): every top-level
//! module (a file or a folder under `src/`) sits on one layer, and imports point only down.
//! This test reads the code's own `crate::…` paths (comments and `#[cfg(test)]` modules left
//! out), refuses any import cycle between top-level modules and any import from a lower layer
//! up into a higher one, and prints the module graph:
//!
//! ```text
//! cargo test --test layout -- --nocapture
//! ```
//!
//! A module added under `src/` must be given a layer here; that is the point: where it sits is a
//! decision, written down once.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Layers, lowest first. A module may import modules of lower layers only.
const LAYERS: &[(&str, &[&str])] = &[
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

/// The code of a Rust file without comments and without its `#[cfg(test)] mod tests` tail.
fn code_of(text: &str) -> String {
    let text = match text.find("#[cfg(test)]\nmod tests") {
        Some(i) => &text[..i],
        None => text,
    };
    text.lines()
        .map(|l| {
            if l.trim_start().starts_with("//") {
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
        "modules without a layer in tests/layout.rs LAYERS: {unplaced:?}"
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
