//! README.md documents every configuration key and every metric, and nothing that does not exist.
//!
//! The configuration keys are listed explicitly below ([`CONFIG_TABLES`]) and checked both ways:
//! against the structs of `src/config/file.rs` (read as text: the `pub <field>:` lines of every
//! `#[derive(.. Deserialize ..)]` struct, with serde renames applied; the kinds of the
//! `tagged_section!` tables) and against the tables of README's "Configuration reference". Adding
//! a key to the file format without documenting it (and adding it here) fails a test, and so does
//! documenting a key that no longer exists. Metrics: every `pub const …: &str = "floe_…"` of
//! `src/telemetry.rs` is a row of README's "Metrics" table, and every row is such a constant.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// One TOML table of the file format: its README heading, the struct of `src/config/file.rs`
/// that parses it, the tagged-section enum whose `kind` it is (if tagged), and its keys.
struct ConfigTable {
    heading: &'static str,
    file_struct: &'static str,
    kind_enum: Option<&'static str>,
    keys: &'static [&'static str],
}

/// The configuration file format, table by table. Update it together with `src/config/file.rs`
/// and README.md's "Configuration reference".
const CONFIG_TABLES: &[ConfigTable] = &[
    ConfigTable {
        heading: "`[worker]`",
        file_struct: "WorkerSection",
        kind_enum: None,
        keys: &["id", "metrics_address", "shutdown_timeout"],
    },
    ConfigTable {
        heading: "`[aws]`",
        file_struct: "AwsSection",
        kind_enum: None,
        keys: &["region", "profile", "endpoint_url", "endpoints"],
    },
    ConfigTable {
        heading: "`[lease_store]` with `kind = \"dynamodb\"`",
        file_struct: "DynamodbLeaseStoreSection",
        kind_enum: None,
        keys: &[
            "table",
            "create_lease_table",
            "lease_duration",
            "renew_interval",
            "max_leases_to_steal",
        ],
    },
    ConfigTable {
        heading: "`[channel.source]` with `kind = \"kinesis\"`",
        file_struct: "KinesisSourceSection",
        kind_enum: None,
        keys: &[
            "stream_name",
            "stream_arn",
            "initial_position",
            "max_records_per_call",
            "poll_interval",
        ],
    },
    ConfigTable {
        heading: "`[channel.dlq]` with `kind = \"s3\"`",
        file_struct: "S3DlqSection",
        kind_enum: None,
        keys: &[
            "bucket",
            "prefix",
            "expected_bucket_owner",
            "kms_key_arn",
            "include_payload",
        ],
    },
    ConfigTable {
        heading: "`[lease_store]`",
        file_struct: "SqliteLeaseStoreSection",
        kind_enum: Some("LeaseStoreSection"),
        keys: &[
            "kind",
            "path",
            "lease_duration",
            "renew_interval",
            "max_leases_to_steal",
        ],
    },
    ConfigTable {
        heading: "`[[channel]]`",
        file_struct: "ChannelSection",
        kind_enum: None,
        keys: &["name", "source", "record", "schema", "destination", "dlq"],
    },
    ConfigTable {
        heading: "`[channel.source]`",
        file_struct: "KafkaSourceSection",
        kind_enum: Some("SourceSection"),
        keys: &[
            "kind",
            "bootstrap_servers",
            "topic",
            "initial_position",
            "properties",
        ],
    },
    ConfigTable {
        heading: "`[channel.record]`",
        file_struct: "RecordSection",
        kind_enum: None,
        keys: &["format", "max_record_size"],
    },
    ConfigTable {
        heading: "`[channel.schema]`",
        file_struct: "SchemaSection",
        kind_enum: None,
        keys: &["file", "glue_schema_arn", "version", "versions"],
    },
    ConfigTable {
        heading: "`[channel.destination]`",
        file_struct: "IcebergDestinationSection",
        kind_enum: Some("DestinationSection"),
        keys: &[
            "kind",
            "catalog",
            "namespace",
            "table",
            "partition_field",
            "compression",
            "compression_level",
            "data_freshness",
            "target_file_size",
            "buffer_size",
            "max_open_partitions",
        ],
    },
    ConfigTable {
        heading: "`[channel.destination]` with `kind = \"s3\"`",
        file_struct: "S3DestinationSection",
        kind_enum: None,
        keys: &[
            "bucket",
            "expected_bucket_owner",
            "kms_key_arn",
            "key_template",
            "compression",
            "record_delimiter",
            "data_freshness",
            "target_object_size",
            "buffer_size",
        ],
    },
    ConfigTable {
        heading: "`[channel.destination.catalog]`",
        file_struct: "SqlCatalogSection",
        kind_enum: Some("CatalogSection"),
        keys: &[
            "kind",
            "name",
            "uri",
            "warehouse",
            "kms_key_arn",
            "expected_bucket_owner",
        ],
    },
    ConfigTable {
        heading: "`[channel.destination.catalog]` with `kind = \"rest\"`",
        file_struct: "RestCatalogSection",
        kind_enum: None,
        keys: &[
            "uri",
            "warehouse",
            "token",
            "credential",
            "client_id",
            "client_secret",
            "oauth2_server_uri",
            "scope",
            "vended_credentials",
            "sigv4",
            "signing_name",
            "signing_region",
            "kms_key_arn",
        ],
    },
    ConfigTable {
        heading: "`[channel.destination.catalog]` with `kind = \"s3tables\"`",
        file_struct: "S3TablesCatalogSection",
        kind_enum: None,
        keys: &["table_bucket_arn", "kms_key_arn"],
    },
    ConfigTable {
        heading: "`[channel.destination.catalog]` with `kind = \"glue\"`",
        file_struct: "GlueCatalogSection",
        kind_enum: None,
        keys: &[
            "warehouse",
            "catalog_id",
            "kms_key_arn",
            "expected_bucket_owner",
        ],
    },
    ConfigTable {
        heading: "`[channel.dlq]`",
        file_struct: "LocalDlqSection",
        kind_enum: Some("DlqSection"),
        keys: &["kind", "path", "include_payload"],
    },
];

/// The top-level tables of the file (fields of `ConfigFile`), each with its README heading.
const TOP_LEVEL: &[(&str, &str)] = &[
    ("worker", "`[worker]`"),
    ("aws", "`[aws]`"),
    ("lease_store", "`[lease_store]`"),
    ("channel", "`[[channel]]`"),
];

fn read(relative: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(relative);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

// ---------------------------------------------------------------------------------------------
// src/config/file.rs, read as text

/// Fields of every `#[derive(.. Deserialize ..)]` struct with named fields, by struct name, as
/// TOML keys (a `#[serde(rename = "x")]` on a field gives key `x`).
fn deserialize_struct_fields(source: &str) -> BTreeMap<String, BTreeSet<String>> {
    let mut structs = BTreeMap::new();
    let mut derives_deserialize = false;
    let mut current: Option<(String, BTreeSet<String>)> = None;
    let mut rename: Option<String> = None;
    for line in source.lines() {
        let line = line.trim();
        if let Some((name, fields)) = current.as_mut() {
            if line == "}" {
                structs.insert(name.clone(), std::mem::take(fields));
                current = None;
            } else if line.starts_with("#[serde(") {
                rename = attribute_value(line, "rename").or(rename.take());
            } else if let Some(rest) = line.strip_prefix("pub ") {
                if let Some((field, _)) = rest.split_once(':') {
                    let field = field.trim();
                    if !field.is_empty() && field.chars().all(|c| c.is_alphanumeric() || c == '_') {
                        fields.insert(rename.take().unwrap_or_else(|| field.to_owned()));
                    }
                }
            }
            continue;
        }
        if line.starts_with("#[derive(") {
            derives_deserialize = line.contains("Deserialize");
        } else if let Some(rest) = line.strip_prefix("pub struct ") {
            if derives_deserialize && line.ends_with('{') {
                let name: String = rest
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                current = Some((name, BTreeSet::new()));
                rename = None;
            }
            derives_deserialize = false;
        } else if !line.starts_with("#[") && !line.starts_with("///") && !line.is_empty() {
            derives_deserialize = false;
        }
    }
    structs
}

/// `name = "value"` inside an attribute line.
fn attribute_value(line: &str, name: &str) -> Option<String> {
    let start = line.find(&format!("{name} = \""))? + name.len() + 4;
    let end = line[start..].find('"')? + start;
    Some(line[start..end].to_owned())
}

/// The kinds of every `tagged_section!(Enum { "kind" => Variant(struct|table), .. })`: enum
/// name → kind → whether this build supports it (`struct`) or only parses it (`table`).
fn tagged_kinds(source: &str) -> BTreeMap<String, BTreeMap<String, bool>> {
    let mut out = BTreeMap::new();
    let mut rest = source;
    while let Some(at) = rest.find("\ntagged_section!(") {
        let body_start = at + "\ntagged_section!(".len();
        let body_end = body_start + rest[body_start..].find(");").expect("tagged_section! ends");
        let body = &rest[body_start..body_end];
        let (name, arms) = body.split_once('{').expect("tagged_section! body");
        let mut kinds = BTreeMap::new();
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
            kinds.insert(kind, supported);
        }
        out.insert(name.trim().to_owned(), kinds);
        rest = &rest[body_end..];
    }
    out
}

// ---------------------------------------------------------------------------------------------
// README.md

/// The text of the `## title` section (up to the next `## ` heading).
fn section<'a>(readme: &'a str, title: &str) -> Option<&'a str> {
    let heading = format!("\n## {title}\n");
    let start = readme.find(&heading)? + heading.len();
    let end = readme[start..]
        .find("\n## ")
        .map_or(readme.len(), |i| start + i);
    Some(&readme[start..end])
}

/// The `### heading` subsections of a section, by heading.
fn subsections(section: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut current: Option<(String, String)> = None;
    for line in section.lines() {
        if let Some(heading) = line.strip_prefix("### ") {
            if let Some((h, body)) = current.take() {
                out.insert(h, body);
            }
            current = Some((heading.trim().to_owned(), String::new()));
        } else if let Some((_, body)) = current.as_mut() {
            body.push_str(line);
            body.push('\n');
        }
    }
    if let Some((h, body)) = current {
        out.insert(h, body);
    }
    out
}

/// The first cells of a Markdown table's rows that are written as code (`` `key` ``).
fn table_keys(text: &str) -> BTreeSet<String> {
    text.lines()
        .filter_map(|line| line.strip_prefix('|'))
        .filter_map(|row| row.split('|').next())
        .filter_map(|cell| {
            cell.trim()
                .strip_prefix('`')
                .and_then(|c| c.strip_suffix('`'))
        })
        .map(str::to_owned)
        .collect()
}

/// Every problem of README's configuration reference against the explicit list.
fn config_reference_problems(readme: &str) -> Vec<String> {
    let Some(reference) = section(readme, "Configuration reference") else {
        return vec!["README.md has no \"## Configuration reference\" section".to_owned()];
    };
    let subs = subsections(reference);
    let mut problems = Vec::new();
    for table in CONFIG_TABLES {
        let Some(body) = subs.get(table.heading) else {
            problems.push(format!("no \"### {}\" subsection", table.heading));
            continue;
        };
        let documented = table_keys(body);
        let expected: BTreeSet<String> = table.keys.iter().map(|k| k.to_string()).collect();
        for key in expected.difference(&documented) {
            problems.push(format!("{}: key `{key}` is not documented", table.heading));
        }
        for key in documented.difference(&expected) {
            problems.push(format!(
                "{}: key `{key}` is documented but is not a key of the file format",
                table.heading
            ));
        }
    }
    problems
}

/// Every problem of README's documentation of the tagged kinds: each kind is named in its
/// table's subsection, and a kind this build only parses is said to be "not supported yet".
fn kind_problems(readme: &str, kinds: &BTreeMap<String, BTreeMap<String, bool>>) -> Vec<String> {
    let Some(reference) = section(readme, "Configuration reference") else {
        return vec!["README.md has no \"## Configuration reference\" section".to_owned()];
    };
    let subs = subsections(reference);
    let mut problems = Vec::new();
    for table in CONFIG_TABLES {
        let Some(kind_enum) = table.kind_enum else {
            continue;
        };
        let Some(body) = subs.get(table.heading) else {
            problems.push(format!("no \"### {}\" subsection", table.heading));
            continue;
        };
        let Some(table_kinds) = kinds.get(kind_enum) else {
            problems.push(format!("no tagged_section!({kind_enum} ..) in file.rs"));
            continue;
        };
        for (kind, supported) in table_kinds {
            let quoted = format!("`\"{kind}\"`");
            let lines: Vec<&str> = body.lines().filter(|l| l.contains(&quoted)).collect();
            if lines.is_empty() {
                problems.push(format!("{}: kind {quoted} is not named", table.heading));
            } else if !supported
                && !lines
                    .iter()
                    .any(|l| l.contains("not supported yet in this build"))
            {
                problems.push(format!(
                    "{}: kind {quoted} is parsed but not supported: say \"not supported yet in this build\"",
                    table.heading
                ));
            }
        }
    }
    problems
}

/// `pub const NAME: &str = "floe_…";` values of a source file.
fn metric_names(source: &str) -> BTreeSet<String> {
    source
        .lines()
        .filter_map(|l| l.trim().strip_prefix("pub const "))
        .filter_map(|l| l.split_once(": &str = \""))
        .filter_map(|(_, v)| v.strip_suffix("\";"))
        .filter(|v| v.starts_with("floe_"))
        .map(str::to_owned)
        .collect()
}

/// Every problem of README's "Metrics" table against the metric names.
fn metrics_problems(readme: &str, metrics: &BTreeSet<String>) -> Vec<String> {
    let Some(text) = section(readme, "Metrics") else {
        return vec!["README.md has no \"## Metrics\" section".to_owned()];
    };
    let documented: BTreeSet<String> = table_keys(text)
        .into_iter()
        .filter(|k| k.starts_with("floe_"))
        .collect();
    let mut problems = Vec::new();
    for m in metrics.difference(&documented) {
        problems.push(format!("metric `{m}` is not in README's Metrics table"));
    }
    for m in documented.difference(metrics) {
        problems.push(format!(
            "README documents metric `{m}`, which src/telemetry.rs does not define"
        ));
    }
    problems
}

/// Each metric's kind from the `describe_counter!/describe_gauge!/describe_histogram!(CONST,`
/// calls of `src/telemetry.rs`, by metric name (constants resolved).
fn metric_kinds(source: &str) -> BTreeMap<String, String> {
    let consts: BTreeMap<&str, &str> = source
        .lines()
        .filter_map(|l| l.trim().strip_prefix("pub const "))
        .filter_map(|l| l.split_once(": &str = \""))
        .filter_map(|(k, v)| Some((k, v.strip_suffix("\";")?)))
        .collect();
    let mut kinds = BTreeMap::new();
    for kind in ["counter", "gauge", "histogram"] {
        let call = format!("describe_{kind}!(");
        let mut rest = source;
        while let Some(at) = rest.find(&call) {
            rest = &rest[at + call.len()..];
            let ident = rest
                .trim_start()
                .split(|c: char| !(c.is_alphanumeric() || c == '_'))
                .next()
                .unwrap_or_default();
            if let Some(name) = consts.get(ident) {
                kinds.insert(name.to_string(), kind.to_string());
            }
        }
    }
    kinds
}

/// Every problem of README's "Metrics" rows against the described kinds: the type column
/// is the kind, the unit and meaning columns are filled in, and every metric has HELP text.
fn metric_row_problems(readme: &str, kinds: &BTreeMap<String, String>) -> Vec<String> {
    let Some(text) = section(readme, "Metrics") else {
        return vec!["README.md has no \"## Metrics\" section".to_owned()];
    };
    let mut problems = Vec::new();
    let mut rows = BTreeSet::new();
    for line in text.lines().filter(|l| l.starts_with("| `floe_")) {
        let cells: Vec<&str> = line.trim_matches('|').split('|').map(str::trim).collect();
        let name = cells[0].trim_matches('`');
        rows.insert(name.to_string());
        if cells.len() != 5 {
            problems.push(format!(
                "row `{name}`: expected | metric | type | unit | labels | meaning |"
            ));
            continue;
        }
        match kinds.get(name) {
            Some(kind) if kind == cells[1] => {}
            Some(kind) => problems.push(format!(
                "row `{name}`: type {:?}, but src/telemetry.rs describes a {kind}",
                cells[1]
            )),
            None => problems.push(format!("metric `{name}` has no describe_*! (HELP text)")),
        }
        if cells[2].is_empty() || cells[4].len() < 10 {
            problems.push(format!("row `{name}`: give its unit and meaning"));
        }
    }
    for name in kinds.keys().filter(|k| !rows.contains(*k)) {
        problems.push(format!(
            "metric `{name}` has no row in README's Metrics table"
        ));
    }
    problems
}

fn assert_no_problems(problems: Vec<String>) {
    assert!(
        problems.is_empty(),
        "README.md:\n  {}",
        problems.join("\n  ")
    );
}

// ---------------------------------------------------------------------------------------------
// The tests

#[test]
fn explicit_key_list_matches_the_config_file_structs() {
    let source = read("src/config/file.rs");
    let structs = deserialize_struct_fields(&source);
    let mut problems = Vec::new();

    let top: BTreeSet<String> = TOP_LEVEL.iter().map(|(k, _)| k.to_string()).collect();
    match structs.get("ConfigFile") {
        Some(fields) if *fields == top => {}
        other => problems.push(format!(
            "ConfigFile fields {other:?} differ from the top-level tables {top:?}"
        )),
    }
    for table in CONFIG_TABLES {
        let Some(fields) = structs.get(table.file_struct) else {
            problems.push(format!(
                "no Deserialize struct {} in file.rs",
                table.file_struct
            ));
            continue;
        };
        // `kind` is the tag of a tagged table, taken out before the struct is parsed.
        let listed: BTreeSet<String> = table
            .keys
            .iter()
            .filter(|k| table.kind_enum.is_none() || **k != "kind")
            .map(|k| k.to_string())
            .collect();
        if *fields != listed {
            problems.push(format!(
                "{} (README {}): file.rs has {:?}, the list here has {:?}",
                table.file_struct, table.heading, fields, listed
            ));
        }
        if table.kind_enum.is_some() && !table.keys.contains(&"kind") {
            problems.push(format!("{}: a tagged table lists `kind`", table.heading));
        }
    }
    // Every Deserialize struct with fields is a table of the file format.
    let covered: BTreeSet<&str> = CONFIG_TABLES
        .iter()
        .map(|t| t.file_struct)
        .chain(["ConfigFile"])
        .collect();
    for name in structs.keys() {
        if !covered.contains(name.as_str()) {
            problems.push(format!(
                "file.rs struct {name} is not in CONFIG_TABLES: document its keys"
            ));
        }
    }
    // Every tagged table is in the list.
    for kind_enum in tagged_kinds(&source).keys() {
        if !CONFIG_TABLES
            .iter()
            .any(|t| t.kind_enum == Some(kind_enum.as_str()))
        {
            problems.push(format!(
                "tagged_section!({kind_enum} ..) is not in CONFIG_TABLES"
            ));
        }
    }
    assert!(
        problems.is_empty(),
        "tests/readme.rs CONFIG_TABLES vs src/config/file.rs:\n  {}",
        problems.join("\n  ")
    );
}

#[test]
fn readme_documents_every_config_key() {
    assert_no_problems(config_reference_problems(&read("README.md")));
}

#[test]
fn readme_names_every_kind_and_says_which_are_not_supported_yet() {
    let kinds = tagged_kinds(&read("src/config/file.rs"));
    assert!(
        kinds.len() >= 5,
        "expected the tagged tables of file.rs, found {kinds:?}"
    );
    assert_no_problems(kind_problems(&read("README.md"), &kinds));
}

#[test]
fn readme_documents_every_metric() {
    let metrics = metric_names(&read("src/telemetry.rs"));
    assert!(
        metrics.len() >= 10,
        "expected floe's metric names in src/telemetry.rs, found {metrics:?}"
    );
    assert_no_problems(metrics_problems(&read("README.md"), &metrics));
}

#[test]
fn readme_gives_every_metric_its_type_unit_and_meaning_and_each_has_help_text() {
    let source = read("src/telemetry.rs");
    let kinds = metric_kinds(&source);
    let names = metric_names(&source);
    let undescribed: Vec<&String> = names.iter().filter(|n| !kinds.contains_key(*n)).collect();
    assert!(
        undescribed.is_empty(),
        "no HELP text (describe_*!) for {undescribed:?}"
    );
    assert_no_problems(metric_row_problems(&read("README.md"), &kinds));
}

// The checks themselves can fail: each is run on a README with one thing wrong.

#[test]
fn checks_fail_on_a_wrong_metric_type() {
    let readme = read("README.md");
    let kinds = metric_kinds(&read("src/telemetry.rs"));
    assert_eq!(
        kinds
            .get("floe_commit_duration_seconds")
            .map(String::as_str),
        Some("histogram")
    );
    let wrong = readme.replacen(
        "| `floe_commit_duration_seconds` | histogram |",
        "| `floe_commit_duration_seconds` | summary |",
        1,
    );
    assert_ne!(wrong, readme);
    assert!(metric_row_problems(&wrong, &kinds)
        .iter()
        .any(|p| p.contains("floe_commit_duration_seconds")));
}

#[test]
fn checks_fail_on_a_missing_or_stale_key() {
    let readme = read("README.md");
    let missing = readme.replacen("| `data_freshness` |", "| data_freshness |", 1);
    let problems = config_reference_problems(&missing);
    assert!(
        problems.iter().any(|p| p.contains("`data_freshness`")),
        "{problems:?}"
    );
    let stale = readme.replacen("| `topic` |", "| `topic` |\n| `group_id` |", 1);
    let problems = config_reference_problems(&stale);
    assert!(
        problems.iter().any(|p| p.contains("`group_id`")),
        "{problems:?}"
    );
}

#[test]
fn checks_fail_on_an_unsupported_kind_not_said_so() {
    // Every kind is supported in this build: pretend `"s3tables"` were not (parsed into a
    // `toml::Table` and refused), and the README, which documents it as supported, must fail.
    let source = read("src/config/file.rs");
    let pretend = source.replacen(
        "\"s3tables\" => S3Tables(struct)",
        "\"s3tables\" => S3Tables(table)",
        1,
    );
    assert_ne!(pretend, source);
    let problems = kind_problems(&read("README.md"), &tagged_kinds(&pretend));
    assert!(
        problems.iter().any(|p| p.contains("\"s3tables\"")),
        "{problems:?}"
    );
}

#[test]
fn checks_fail_on_a_missing_or_unknown_metric() {
    let readme = read("README.md");
    let metrics = metric_names(&read("src/telemetry.rs"));
    let missing = readme.replacen("| `floe_buffer_bytes` |", "| buffer |", 1);
    assert!(metrics_problems(&missing, &metrics)
        .iter()
        .any(|p| p.contains("floe_buffer_bytes")));
    let mut more = metrics.clone();
    more.insert("floe_new_thing_total".to_owned());
    assert!(metrics_problems(&readme, &more)
        .iter()
        .any(|p| p.contains("floe_new_thing_total")));
}

#[test]
fn the_file_rs_scan_sees_new_fields_and_renames() {
    let source = r#"
/// doc
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct A {
    /// doc
    pub one: Option<String>,
    #[serde(default, rename = "channel")]
    pub channels: Vec<Section<B>>,
}

#[derive(Debug)]
pub struct NotParsed {
    pub x: u32,
}

tagged_section!(E { "a" => A(struct), "b" => B(table) });
"#;
    let structs = deserialize_struct_fields(source);
    assert_eq!(
        structs.get("A").unwrap(),
        &BTreeSet::from(["one".to_owned(), "channel".to_owned()])
    );
    assert!(!structs.contains_key("NotParsed"));
    let kinds = tagged_kinds(source);
    assert_eq!(
        kinds.get("E").unwrap(),
        &BTreeMap::from([("a".to_owned(), true), ("b".to_owned(), false)])
    );
}
