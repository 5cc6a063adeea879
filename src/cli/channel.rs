//! `floe channel create|describe|list|update|delete --config FILE [NAME] [--json]`: the control
//! plane on the command line (the logic is in [`crate::channel`]).
//!
//! Exit codes: 0 done; 78 (`EX_CONFIG`) refused — an invalid configuration, an unknown channel,
//! a validation failure or a transition the channel's state does not allow, each printed with
//! its key path; 1 the lease store or the catalog is unavailable.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use serde::Serialize;

use crate::channel::members::{Members, TopicRefusal, MAX_MEMBER_NAME};
use crate::channel::{self as control, ChannelDescription, ControlError, Update};
use crate::config::Config;
use crate::lease::{ChannelState, DeliveryLog, Store};
use crate::tools::stdout;

/// Options every `floe channel` command takes.
#[derive(Debug, Clone, clap::Args)]
pub struct Common {
    /// Path of the TOML configuration file (the lease store and the channels).
    #[arg(long)]
    pub config: PathBuf,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

/// `floe channel …`.
#[derive(Debug, Clone, clap::Subcommand)]
pub enum ChannelCommand {
    /// Validate a channel (schema, partition field, DLQ), create its table and make it ACTIVE.
    /// Without NAME, every channel of the file. Creating an ACTIVE channel does nothing.
    Create {
        /// `--config`, `--json`.
        #[command(flatten)]
        common: Common,
        /// Channel name; default: every channel of the file.
        name: Option<String>,
    },
    /// Show a channel's state, leases, checkpoints, lag and commits.
    Describe {
        /// `--config`, `--json`.
        #[command(flatten)]
        common: Common,
        /// Channel name; default: every channel of the file.
        name: Option<String>,
    },
    /// List the file's channels with their state.
    List {
        /// `--config`, `--json`.
        #[command(flatten)]
        common: Common,
    },
    /// Change a live channel's data freshness or delivery logs (nothing else can change).
    Update {
        /// `--config`, `--json`.
        #[command(flatten)]
        common: Common,
        /// Channel name.
        name: String,
        /// New data freshness, 10s to 900s (e.g. "60s").
        #[arg(long)]
        data_freshness: Option<String>,
        /// Delivery log lines: one per committed batch ("batches") or failures only.
        #[arg(long, value_enum)]
        delivery_log: Option<DeliveryLogArg>,
    },
    /// Stop delivering a channel (DELETING); the table and the DLQ keep what was delivered. A
    /// Kinesis channel with enhanced fan-out also deregisters its stream consumer.
    Delete {
        /// `--config`, `--json`.
        #[command(flatten)]
        common: Common,
        /// Channel name.
        name: String,
        /// Wait up to this long (e.g. "60s") for the workers to release the channel's leases.
        #[arg(long)]
        wait: Option<String>,
    },
}

/// `--delivery-log` values.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum DeliveryLogArg {
    /// One line per committed batch, and failures.
    Batches,
    /// Failures only.
    Failures,
}

impl From<DeliveryLogArg> for DeliveryLog {
    fn from(a: DeliveryLogArg) -> Self {
        match a {
            DeliveryLogArg::Batches => DeliveryLog::Batches,
            DeliveryLogArg::Failures => DeliveryLog::Failures,
        }
    }
}

impl ChannelCommand {
    fn common(&self) -> &Common {
        match self {
            ChannelCommand::Create { common, .. }
            | ChannelCommand::Describe { common, .. }
            | ChannelCommand::List { common }
            | ChannelCommand::Update { common, .. }
            | ChannelCommand::Delete { common, .. } => common,
        }
    }
}

/// Runs a `floe channel` command; returns the exit code.
pub async fn run(command: &ChannelCommand) -> ExitCode {
    let common = command.common();
    let config = match Config::load(&common.config) {
        Ok(c) => c,
        Err(errors) => {
            eprintln!("{}: invalid config:\n{errors}", common.config.display());
            return ExitCode::from(78);
        }
    };
    let aws = crate::aws::AwsClients::for_config(&config).await;
    if let Err(e) = aws.check_credentials().await {
        tracing::debug!(chain = %e.chain, "the AWS SDK's credential chain");
        eprintln!("{e}");
        return ExitCode::from(78);
    }
    let store = match crate::app::open_lease_store(&config.lease_store, &aws).await {
        Ok(s) => s,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(if e.is_retryable() { 1 } else { 78 });
        }
    };
    match execute(command, &config, store.as_ref(), &aws).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            match &e {
                ControlError::Refused(problems) => {
                    for p in problems {
                        eprintln!("{p}");
                    }
                }
                ControlError::Unavailable(_) => eprintln!("{e}"),
            }
            ExitCode::from(e.exit_code())
        }
    }
}

/// The channels a command acts on: `name`, or every channel of the file; a channel with
/// `table = "{topic}"` or `table = "{route}"` stands for its member channels, which hold its
/// tables (docs/routing.md).
fn names(config: &Config, members: &Members, name: &Option<String>) -> Vec<String> {
    let named: Vec<String> = match name {
        Some(n) => vec![n.clone()],
        None => config.channels.iter().map(|c| c.name.clone()).collect(),
    };
    named
        .into_iter()
        .flat_map(|n| {
            if is_parent(config, &n) {
                members.names_of(config, &n)
            } else {
                vec![n]
            }
        })
        .collect()
}

/// Whether `name` is a channel of the file that runs as member channels (`table = "{topic}"`
/// or `table = "{route}"`).
fn is_parent(config: &Config, name: &str) -> bool {
    config
        .channels
        .iter()
        .any(|c| c.name == name && c.has_members())
}

/// The channels of the file with member channels that a command names (`name`, or all).
fn parents_named(config: &Config, name: &Option<String>) -> Vec<String> {
    config
        .channels
        .iter()
        .filter(|c| name.as_ref().is_none_or(|n| *n == c.name))
        .filter(|c| is_parent(config, &c.name))
        .map(|c| c.name.clone())
        .collect()
}

fn parse_duration(flag: &str, text: &str) -> Result<Duration, ControlError> {
    crate::config::units::parse_duration(text).map_err(|e| {
        ControlError::Refused(vec![crate::config::ConfigError {
            path: flag.to_string(),
            message: e,
        }])
    })
}

async fn execute(
    command: &ChannelCommand,
    config: &Config,
    store: &dyn Store,
    aws: &crate::aws::AwsClients,
) -> Result<(), ControlError> {
    let json = command.common().json;
    let members = &with_members(command, config, store).await?;
    match command {
        ChannelCommand::Create { name, .. } => {
            let mut states = Vec::new();
            // A channel with member channels is activated first: its activation time is
            // every member's (a topic created later is read from its first record).
            let mut activated_at = std::collections::BTreeMap::new();
            for parent in parents_named(config, name) {
                let state = control::members::activate_parent(&parent, store).await?;
                for member in members.names_of(config, &parent) {
                    activated_at.insert(member, state.activated_at_ms);
                }
                states.push(state);
            }
            for n in names(config, members, name) {
                let at = activated_at.get(&n).copied().flatten();
                states.push(control::create_at(config, members, &n, store, aws, at).await?);
            }
            print_states(&states, json);
        }
        ChannelCommand::Describe { name, .. } => {
            let mut out = Vec::new();
            for n in names(config, members, name) {
                out.push(control::describe(config, members, &n, store).await?);
            }
            // A channel with `table = "{topic}"` whose selection matches no topic has no member:
            // said under its own name, as for a named table.
            let unmatched = crate::source::kafka::topics::unmatched_channels();
            let memberless: Vec<(&String, &String)> = parents_named(config, name)
                .iter()
                .filter_map(|p| unmatched.get_key_value(p))
                .collect();
            if json {
                let mut all: Vec<serde_json::Value> = out
                    .iter()
                    .map(|d| serde_json::to_value(d).expect("serializes"))
                    .collect();
                all.extend(memberless.iter().map(|(channel, note)| {
                    serde_json::json!({ "channel": channel, "no_topic_matches": note })
                }));
                print_json(&all);
            } else {
                for d in &out {
                    stdout::print(describe_text(d));
                }
                for (channel, note) in &memberless {
                    stdout::print(format!("channel {channel}\n  no_topic_matches {note}\n"));
                }
            }
            if let Some(e) = out.iter().find_map(|d| d.catalog_error.as_ref()) {
                return Err(ControlError::Unavailable(format!("catalog: {e}")));
            }
        }
        ChannelCommand::List { .. } => {
            let list = control::list(config, members, store).await?;
            if json {
                print_json(&list);
            } else {
                stdout::println(format!(
                    "{:<24} {:<12} {:>6} {:>7}  {:<32} reason",
                    "CHANNEL", "STATE", "SHARDS", "WORKERS", "TABLE"
                ));
                for c in list {
                    stdout::println(format!(
                        "{:<24} {:<12} {:>6} {:>7}  {:<32} {}",
                        c.channel,
                        c.state,
                        c.shards,
                        c.workers,
                        c.table,
                        c.status_reason.unwrap_or_default()
                    ));
                }
            }
        }
        ChannelCommand::Update {
            name,
            data_freshness,
            delivery_log,
            ..
        } => {
            let change = Update {
                data_freshness: data_freshness
                    .as_deref()
                    .map(|t| parse_duration("--data-freshness", t))
                    .transpose()?,
                delivery_log: delivery_log.map(DeliveryLog::from),
            };
            let mut states = Vec::new();
            for n in names(config, members, &Some(name.clone())) {
                states.push(control::update(config, members, &n, store, &change).await?);
            }
            print_states(&states, json);
        }
        ChannelCommand::Delete { name, wait, .. } => {
            delete(config, members, name, wait.as_deref(), store, aws, json).await?;
        }
    }
    Ok(())
}

/// The member channels of every channel of `config` with `table = "{topic}"` or
/// `table = "{route}"` (one per topic the cluster has now), the topics left without a table
/// said on stderr. `list` goes on with the file's channels when the cluster cannot be asked.
///
/// Errors: [`control::resolve_members`]'s, except for `list`.
async fn with_members(
    command: &ChannelCommand,
    config: &Config,
    store: &dyn Store,
) -> Result<Members, ControlError> {
    // A table per topic: its member channels, one per topic the cluster has now.
    let mut members = Members::default();
    if config.channels.iter().any(|c| c.has_members()) {
        match control::resolve_members(config, store).await {
            Ok(resolved) => {
                members = resolved;
                for (channel, topic, why) in &members.left_out {
                    eprintln!(
                        "channel {channel}: topic {topic} has no table: {}",
                        match why {
                            TopicRefusal::MaxTables =>
                                "the channel has max_tables tables already (channel.destination.max_tables)".to_string(),
                            TopicRefusal::NameClash { other } =>
                                format!("its table name is topic {other}'s table"),
                            TopicRefusal::NameTooLong => format!(
                                "its member channel name is longer than {} characters",
                                MAX_MEMBER_NAME
                            ),
                        }
                    );
                }
            }
            // `list` still shows the file's channels.
            Err(e) if matches!(command, ChannelCommand::List { .. }) => {
                eprintln!("{e}; member channels (a table per topic) are not listed")
            }
            Err(e) => return Err(e),
        }
    }
    Ok(members)
}

/// `floe channel delete NAME [--wait D]`: the channel (and, for a channel with members, the
/// channel first, then each member), the wait for the leases, the stream consumers
/// deregistered.
///
/// Errors: the delete, the wait or the deregistration failed.
async fn delete(
    config: &Config,
    members: &Members,
    name: &str,
    wait: Option<&str>,
    store: &dyn Store,
    aws: &crate::aws::AwsClients,
    json: bool,
) -> Result<(), ControlError> {
    let wait = wait.map(|t| parse_duration("--wait", t)).transpose()?;
    // A channel with member channels: the channel first (no member starts any more),
    // then each member (one never created has nothing to delete).
    let mut targets = parents_named(config, &Some(name.to_string()));
    let parent = !targets.is_empty();
    targets.extend(names(config, members, &Some(name.to_string())));
    let mut states = Vec::new();
    for n in &targets {
        match control::delete(config, members, n, store).await {
            Ok(state) => states.push(state),
            Err(ControlError::Refused(_)) if parent && n != name => {}
            Err(e) => return Err(e),
        }
    }
    if let Some(wait) = wait {
        let deadline = std::time::Instant::now() + wait;
        let mut released = true;
        for n in &targets {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            released &= control::wait_released(store, n, left).await?;
        }
        if !released {
            return Err(ControlError::Unavailable(format!(
                "channel {name} is DELETING but workers still hold its leases after {wait:?} (a stopped worker's leases stay until it restarts or the channel is created again)"
            )));
        }
    }
    // Enhanced fan-out: a routed channel's consumers are its members'.
    let mut consumers = Vec::new();
    for n in &targets {
        consumers.extend(control::deregister_consumer(config, members, n, aws).await?);
    }
    print_states(&states, json);
    if !json {
        for consumer in consumers {
            stdout::println(format!("deregistered the stream consumer \"{consumer}\""));
        }
    }
    Ok(())
}

fn print_json<T: Serialize + ?Sized>(value: &T) {
    stdout::println(serde_json::to_string_pretty(value).expect("serializes"));
}

fn print_states(states: &[ChannelState], json: bool) {
    if json {
        print_json(states);
        return;
    }
    for s in states {
        let mut line = format!("channel {}: {}", s.channel, control::status_name(s.state));
        if let Some(ms) = s.activated_at_ms {
            line.push_str(&format!(", activated at {}", crate::time::rfc3339_ms(ms)));
        }
        if let Some(r) = &s.status_reason {
            line.push_str(&format!(" ({r})"));
        }
        if let Some(ms) = s.overrides.data_freshness_ms {
            line.push_str(&format!(", data_freshness {}s", ms as f64 / 1000.0));
        }
        if let Some(l) = s.overrides.delivery_log {
            line.push_str(&format!(", delivery_log {l:?}").to_lowercase());
        }
        stdout::println(line);
    }
}

/// The text form of `floe channel describe`.
pub fn describe_text(d: &ChannelDescription) -> String {
    let dash = || "-".to_string();
    let mut out = format!("channel {}\n", d.channel);
    let mut row = |k: &str, v: String| out.push_str(&format!("  {k:<16} {v}\n"));
    row("state", d.state.clone());
    row(
        "status_reason",
        d.status_reason.clone().unwrap_or_else(dash),
    );
    row("activated_at", d.activated_at.clone().unwrap_or_else(dash));
    row("updated_at", d.updated_at.clone().unwrap_or_else(dash));
    row(
        "table",
        format!(
            "{} (uuid {})",
            d.table,
            d.table_uuid.clone().unwrap_or_else(dash)
        ),
    );
    if let Some(catalog) = &d.catalog {
        row("catalog", catalog.clone());
    }
    if let Some(note) = &d.no_topic_matches {
        row("no_topic_matches", note.clone());
    }
    if let Some(subject) = &d.subject {
        row("subject", subject.clone());
        row("schema_id", d.schema_id.clone().unwrap_or_else(dash));
    }
    if let Some(arn) = &d.glue_schema_arn {
        row("glue_schema_arn", arn.clone());
        row(
            "schema_version_id",
            d.schema_version_id.clone().unwrap_or_else(dash),
        );
    }
    row(
        "data_freshness",
        format!(
            "{}s (configured {}s)",
            d.data_freshness_seconds, d.configured_data_freshness_seconds
        ),
    );
    row(
        "delivery_log",
        format!("{:?}", d.delivery_log).to_lowercase(),
    );
    if let Some(c) = &d.stream_consumer {
        let detail = match (&c.arn, &c.error) {
            (_, Some(e)) => format!(" ({e})"),
            (Some(arn), None) => format!(" ({arn})"),
            (None, None) => String::new(),
        };
        row(
            "stream_consumer",
            format!("{} {}{detail}", c.name, c.status),
        );
    }
    row("committer", d.committer.clone().unwrap_or_else(dash));
    row("pending_batches", d.pending_batches.to_string());
    row(
        "last_commit",
        match (&d.last_commit_at, d.snapshot_id) {
            (Some(at), Some(id)) => format!("{at} (snapshot {id})"),
            _ => dash(),
        },
    );
    if let Some(h) = &d.table_health {
        row(
            "table_health",
            format!(
                "{} snapshots, {} manifests, {} data files ({}), {} closed partitions to compact, {} metadata files logged",
                h.snapshots,
                h.manifests,
                h.data_files,
                bytesize::ByteSize::b(h.data_bytes),
                h.partitions_to_compact,
                h.metadata_log
            ),
        );
        row(
            "last_maintenance",
            h.last_maintenance.clone().unwrap_or_else(dash),
        );
    }
    if let Some(e) = &d.catalog_error {
        row("catalog_error", e.clone());
    }
    if !d.schema_history.is_empty() {
        out.push_str(
            "  schema history:
",
        );
        for v in &d.schema_history {
            out.push_str(&format!(
                "    version {:<4} {}  schema {:<3} applied {}  {}\n",
                v.version_number,
                v.schema_id_applied
                    .as_ref()
                    .map_or(v.version_id.clone(), |id| format!("schema id {id}")),
                v.schema_id,
                v.applied_at,
                if v.changes.is_empty() {
                    "(no change)".to_string()
                } else {
                    v.changes.join("; ")
                }
            ));
        }
    }
    out.push_str(&format!(
        "  {:<8} {:<24} {:>13} {:>12} {:>10}  {}\n",
        "SHARD", "OWNER", "LEASE_COUNTER", "CHECKPOINT", "LAG", "LAST_COMMIT"
    ));
    for s in &d.shards {
        out.push_str(&format!(
            "  {:<8} {:<24} {:>13} {:>12} {:>10}  {}\n",
            s.shard,
            s.owner.clone().unwrap_or_else(dash),
            s.lease_counter,
            s.checkpoint.clone().unwrap_or_else(dash),
            match (&s.position_lost, s.lag_records) {
                (Some(_), _) => "LOST".to_string(),
                (None, lag) => lag.map_or_else(dash, |l| l.to_string()),
            },
            s.last_commit_at.clone().unwrap_or_else(dash)
        ));
    }
    for s in &d.shards {
        if let Some(why) = &s.position_lost {
            out.push_str(&format!("  shard {}: position lost: {why}\n", s.shard));
        }
    }
    out
}
