//! `floe channel describe`: a channel's state, leases, checkpoints, commits, lag and schema
//! history.

use std::collections::BTreeMap;
use std::time::Duration;

use iceberg::table::Table;
use iceberg::TableIdent;
use serde::Serialize;

use super::{
    destination_name, effective_freshness, find_channel, open_catalog, status_name, table_ident,
    ControlError, Members,
};
use crate::config::{ChannelConfig, Config};
use crate::iceberg::table_state::SUMMARY_RANGES;
use crate::lease::{ChannelOverrides, ChannelState, DeliveryLog, LeaseKey, Store};

/// One shard of `floe channel describe`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ShardDescription {
    /// Shard id (Kafka partition).
    pub shard: String,
    /// Worker holding its lease, if any.
    pub owner: Option<String>,
    /// Its lease counter (fencing token).
    pub lease_counter: u64,
    /// The committed checkpoint from the table's `floe.checkpoints` (authoritative).
    pub checkpoint: Option<String>,
    /// Records behind the newest one (Kafka high watermark − 1 − checkpoint; 0 when only
    /// transaction markers follow the checkpoint), when the broker answered quickly.
    pub lag_records: Option<u64>,
    /// Kafka: why the broker no longer holds the records after the checkpoint (retention
    /// deleted them, or the topic was recreated): a worker taking the shard stops with exit 78
    /// (docs/kafka.md).
    pub position_lost: Option<String>,
    /// When a snapshot last added records of this shard (RFC 3339).
    pub last_commit_at: Option<String>,
}

/// `floe channel describe`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ChannelDescription {
    /// Channel name.
    pub channel: String,
    /// `ACTIVE`, …, or `NOT_CREATED` when the lease store has no state for it.
    pub state: String,
    /// Why it is FAILED, SUSPENDED or DELETING.
    pub status_reason: Option<String>,
    /// When it was activated (RFC 3339).
    pub activated_at: Option<String>,
    /// When its state was last written (RFC 3339).
    pub updated_at: Option<String>,
    /// `namespace.table`.
    pub table: String,
    /// The catalog the table was read from, as its identity (`sql:<name>:<database path or URL
    /// without password>`, `rest:<uri>:<warehouse>`, `s3tables:<table bucket ARN>`,
    /// `glue:<catalog id>`); absent for a raw S3 destination.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub catalog: Option<String>,
    /// `"no topic matches channel[i].source.topic_pattern = …"` when the channel's `topics` or
    /// `topic_pattern` selects no topic of the cluster now (a channel with `table = "{topic}"`
    /// then has no member: `floe channel describe` prints the same line under its name).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub no_topic_matches: Option<String>,
    /// The table's UUID recorded at creation.
    pub table_uuid: Option<String>,
    /// The channel's Glue schema version id (Glue schemas only): the table's current version
    /// when it evolved (`floe.schema-version-id`), otherwise the one recorded at activation.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub schema_version_id: Option<String>,
    /// The configured Glue schema ARN (Glue schemas only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub glue_schema_arn: Option<String>,
    /// The Confluent subject (`registry_url` schemas only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub subject: Option<String>,
    /// The channel's Confluent schema id, as `schema_version_id` (the table's current one when it
    /// evolved, otherwise the one recorded at activation), with its message indexes for
    /// Protobuf: `"42"`, `"42 message [1, 0]"`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub schema_id: Option<String>,
    /// The data freshness in force, seconds (override or configuration).
    pub data_freshness_seconds: f64,
    /// The configuration's data freshness, seconds.
    pub configured_data_freshness_seconds: f64,
    /// `batches` or `failures`.
    pub delivery_log: DeliveryLog,
    /// Worker holding the committer lease.
    pub committer: Option<String>,
    /// Pending batches waiting for the committer.
    pub pending_batches: usize,
    /// When the table's last data commit landed (RFC 3339): the last snapshot that delivered
    /// records. Maintenance snapshots and a new committer's commit of its epoch alone (`floe
    /// maintain`, a takeover) are not counted; the last maintenance is in `table_health`.
    pub last_commit_at: Option<String>,
    /// The snapshot of that commit.
    pub snapshot_id: Option<i64>,
    /// Per shard.
    pub shards: Vec<ShardDescription>,
    /// Why the table could not be read, if it could not.
    pub catalog_error: Option<String>,
    /// The table's shape (Iceberg destinations whose table could be read).
    pub table_health: Option<crate::iceberg::maintenance::TableHealth>,
    /// The table's schema history (`floe.schema-history`, oldest first): the versions applied
    /// by `evolution = "compatible"`; empty when the table never evolved.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub schema_history: Vec<SchemaHistoryEntry>,
    /// The Kinesis stream consumer of a channel with `read_mode = "enhanced_fan_out"`; absent
    /// for other channels.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stream_consumer: Option<StreamConsumerDescription>,
}

/// The stream consumer of an enhanced fan-out channel, as `floe channel describe` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StreamConsumerDescription {
    /// `ConsumerName` (`channel.source.consumer_name`, default `floe-<channel>`).
    pub name: String,
    /// `ACTIVE`, `CREATING`, `DELETING`, `NOT_REGISTERED` (workers register it at start), or
    /// `UNKNOWN` when Kinesis could not be asked (see `error`).
    pub status: String,
    /// `ConsumerARN`, when registered.
    pub arn: Option<String>,
    /// Why the status is `UNKNOWN`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// One schema version of the table's history, as `floe channel describe` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SchemaHistoryEntry {
    /// Glue `SchemaVersionId` (for a Confluent schema: its id packed, see `schema_id`).
    pub version_id: String,
    /// The Confluent schema id (and message indexes) the entry records; absent for Glue.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub schema_id_applied: Option<String>,
    /// Glue `VersionNumber`.
    pub version_number: i64,
    /// The table's schema id from then on.
    pub schema_id: i32,
    /// When it was applied (RFC 3339).
    pub applied_at: String,
    /// What changed (empty: the channel's first version, or one that fit the table as it was).
    pub changes: Vec<String>,
}

/// A Confluent schema key packed in a UUID, as text (`"42"`, `"42 message [1, 0]"`); `None` for
/// a Glue version id.
fn confluent_id_text(id: uuid::Uuid) -> Option<String> {
    let key = crate::registry::framing::confluent::SchemaKey::from_uuid(id)?;
    Some(match key.indexes.as_slice() {
        [] => key.id.to_string(),
        i => format!("{} message {i:?}", key.id),
    })
}

/// `floe channel describe`: state, leases, checkpoints and commits of one channel. A catalog
/// that cannot be read is reported in `catalog_error` (the rest is still described). `name` is
/// a channel of `config` or one of its `members`.
///
/// Errors: [`ControlError::Unavailable`] when the lease store fails.
pub async fn describe(
    config: &Config,
    members: &Members,
    name: &str,
    store: &dyn Store,
) -> Result<ChannelDescription, ControlError> {
    let aws = crate::aws::AwsClients::for_config(config).await;
    let (index, channel) = find_channel(config, members, name)?;
    let channel = &channel;
    let state = store.get_channel_state(name).await?;
    let leases = store.list_leases(name).await?;
    let pending = store.list_pending(name).await?.len();
    let overrides = state
        .as_ref()
        .map(|s| s.overrides.clone())
        .unwrap_or_default();
    let (table, delivered) = match table_ident(channel) {
        Some(ident) => (
            load_described_table(index, channel, &aws, &ident).await,
            None,
        ),
        None => (Ok(None), store.get_delivered(name).await?),
    };
    let (table, catalog_error) = match table {
        Ok(t) => (t, None),
        Err(e) => (None, Some(e)),
    };
    let checkpoints = match &delivered {
        Some(d) => d.checkpoints.clone(),
        None => table
            .as_ref()
            .and_then(|t| crate::iceberg::table_state::table_checkpoints(t).ok())
            .unwrap_or_default(),
    };
    // A shard whose SHARD_END was pruned (docs/design.md step 8) still shows as ended.
    let checkpoints = checkpoints.with_pruned_ended(&crate::lease::lineage(&leases));
    // A raw channel's last commit: the time in its commit id (a UUIDv7).
    let raw_commit_ms = delivered
        .as_ref()
        .and_then(|d| d.last_commit_id)
        .and_then(|id| crate::time::uuid_v7_ms(&id));
    let mut description = describe_with(
        name,
        channel,
        state,
        &leases,
        pending,
        overrides,
        table,
        checkpoints,
        raw_commit_ms,
        catalog_error,
    )
    .await?;
    description.stream_consumer = describe_stream_consumer(channel, &aws).await;
    description.no_topic_matches = topic_match_note(index, channel).await;
    Ok(description)
}

/// `"no topic matches …"` when channel `index`'s `topics`/`topic_pattern` selects no topic of
/// the cluster now (one listing); `None` for a single topic, a Kinesis stream, when a topic
/// matches, or when the brokers cannot be listed (describe then shows what it can).
pub async fn topic_match_note(index: usize, channel: &ChannelConfig) -> Option<String> {
    use crate::source::kafka::topics::{unmatched_channels, KafkaTopicsSource};
    let crate::config::SourceConfig::Kafka(kafka) = &channel.source else {
        return None;
    };
    kafka.topics.single().is_none().then_some(())?;
    let lister = KafkaTopicsSource::try_new(&channel.name, kafka)
        .ok()?
        .at_index(index);
    let selected = lister.topics().await.ok()?;
    if !selected.is_empty() {
        return None;
    }
    unmatched_channels().get(&channel.name).cloned()
}

/// The stream consumer of an enhanced fan-out Kinesis channel, `None` for other channels.
async fn describe_stream_consumer(
    channel: &ChannelConfig,
    aws: &crate::aws::AwsClients,
) -> Option<StreamConsumerDescription> {
    let (_, stream, name) = crate::source::kinesis::efo::channel_consumer(channel)?;
    let (status, arn, error) = match crate::source::kinesis::efo::describe_consumer(
        &aws.kinesis(),
        &stream,
        &name,
    )
    .await
    {
        Ok(Some((arn, status))) => (status, Some(arn), None),
        Ok(None) => ("NOT_REGISTERED".to_string(), None, None),
        Err(e) => ("UNKNOWN".to_string(), None, Some(e.to_string())),
    };
    Some(StreamConsumerDescription {
        name,
        status,
        arn,
        error,
    })
}

async fn load_described_table(
    index: usize,
    channel: &ChannelConfig,
    aws: &crate::aws::AwsClients,
    ident: &TableIdent,
) -> Result<Option<Table>, String> {
    match open_catalog(index, channel, aws).await {
        Ok(catalog) => match catalog.table_exists(ident).await {
            Ok(true) => catalog
                .load_table(ident)
                .await
                .map(Some)
                .map_err(|e| e.to_string()),
            Ok(false) => Ok(None),
            Err(e) => Err(e.to_string()),
        },
        Err(e) => Err(e.to_string()),
    }
}

#[allow(clippy::too_many_arguments)]
async fn describe_with(
    name: &str,
    channel: &ChannelConfig,
    state: Option<ChannelState>,
    leases: &[crate::lease::Lease],
    pending: usize,
    overrides: ChannelOverrides,
    table: Option<Table>,
    checkpoints: crate::model::Checkpoints,
    raw_commit_ms: Option<i64>,
    catalog_error: Option<String>,
) -> Result<ChannelDescription, ControlError> {
    let last_commits = table
        .as_ref()
        .map(last_commit_per_shard)
        .unwrap_or_default();
    let lags = kafka_lags(channel, &checkpoints).await;
    let shards = leases
        .iter()
        .filter_map(|l| {
            let shard = l.key.shard_id()?;
            let checkpoint = checkpoints.get(shard);
            let (lag_records, position_lost) = match lags.get(&shard.to_string()) {
                Some(Ok(lag)) => (Some(*lag), None),
                Some(Err(why)) => (None, Some(why.clone())),
                None => (None, None),
            };
            Some(ShardDescription {
                shard: shard.to_string(),
                owner: l.owner.clone(),
                lease_counter: l.lease_counter,
                checkpoint: checkpoint.map(|p| p.to_string()),
                lag_records: if checkpoint.is_some() {
                    lag_records
                } else {
                    None
                },
                position_lost: if checkpoint.is_some() {
                    position_lost
                } else {
                    None
                },
                last_commit_at: last_commits
                    .get(&shard.to_string())
                    .map(|ms| crate::time::rfc3339_ms(*ms)),
            })
        })
        .collect();
    // The last data commit: maintenance snapshots (compaction, expiry) and a new committer's
    // commit of its epoch alone (`floe maintain`'s first commit, a takeover) would hide a
    // stalled pipeline (found by fresh-user reviews).
    let snapshot = table.as_ref().and_then(|t| {
        t.metadata()
            .snapshots()
            .filter(|s| is_data_commit(s))
            .max_by_key(|s| (s.sequence_number(), s.timestamp_ms()))
            .cloned()
    });
    let (table_health, catalog_error) = match (&table, channel.destination.iceberg()) {
        (Some(t), Some(dest)) => match crate::iceberg::maintenance::table_health(
            t,
            dest.target_file_size,
            dest.maintenance.compaction_delay.as_millis() as i64,
            crate::time::now_ms(),
        )
        .await
        {
            Ok(h) => (Some(h), catalog_error),
            Err(e) => (
                None,
                catalog_error.or(Some(format!("table manifests: {e}"))),
            ),
        },
        _ => (None, catalog_error),
    };
    let schema_history = table
        .as_ref()
        .and_then(|t| crate::iceberg::evolve::schema_history(t).ok())
        .unwrap_or_default()
        .into_iter()
        .map(|v| SchemaHistoryEntry {
            schema_id_applied: confluent_id_text(v.version_id),
            version_id: v.version_id.to_string(),
            version_number: v.version_number,
            schema_id: v.schema_id,
            applied_at: crate::time::rfc3339_ms(v.applied_at_ms),
            changes: v.changes,
        })
        .collect();
    let schema_version_id = table
        .as_ref()
        .and_then(crate::iceberg::evolve::current_version)
        .map(|id| id.to_string())
        .or_else(|| state.as_ref().and_then(|s| s.schema_version_id.clone()));
    let confluent = match &channel.schema {
        Some(crate::config::SchemaConfig::Confluent(c)) => Some(c),
        _ => None,
    };
    Ok(ChannelDescription {
        subject: confluent.map(|c| c.subject.clone()),
        schema_id: confluent
            .and(schema_version_id.as_deref())
            .and_then(|id| uuid::Uuid::parse_str(id).ok())
            .and_then(confluent_id_text),
        schema_history,
        stream_consumer: None,
        channel: name.to_string(),
        state: state
            .as_ref()
            .map_or("NOT_CREATED", |s| status_name(s.state))
            .to_string(),
        status_reason: state.as_ref().and_then(|s| s.status_reason.clone()),
        activated_at: state
            .as_ref()
            .and_then(|s| s.activated_at_ms)
            .map(crate::time::rfc3339_ms),
        updated_at: state
            .as_ref()
            .map(|s| crate::time::rfc3339_ms(s.updated_at_ms)),
        table: destination_name(channel),
        catalog: channel.destination.iceberg().map(|d| d.catalog.identity()),
        no_topic_matches: None,
        table_uuid: state.as_ref().and_then(|s| s.table_uuid.clone()),
        // An evolved table's current version is the channel's (workers record it in the
        // channel state at their next start).
        schema_version_id: schema_version_id.filter(|_| confluent.is_none()),
        glue_schema_arn: match &channel.schema {
            Some(crate::config::SchemaConfig::Glue { schema_arn, .. }) => Some(schema_arn.clone()),
            _ => None,
        },
        data_freshness_seconds: effective_freshness(channel, &overrides).as_secs_f64(),
        configured_data_freshness_seconds: channel.destination.data_freshness().as_secs_f64(),
        delivery_log: overrides.delivery_log.unwrap_or_default(),
        committer: leases
            .iter()
            .find(|l| l.key == LeaseKey::Committer)
            .and_then(|l| l.owner.clone()),
        pending_batches: pending,
        last_commit_at: snapshot
            .as_ref()
            .map(|s| s.timestamp_ms())
            .or(raw_commit_ms)
            .map(crate::time::rfc3339_ms),
        snapshot_id: snapshot.map(|s| s.snapshot_id()),
        shards,
        catalog_error,
        table_health,
    })
}

/// Whether `snapshot` is a floe commit that delivered records: its `floe.ranges` names a shard.
/// Maintenance snapshots carry no ranges, and a committer's first commit with nothing pending
/// (it writes only its epoch, `floe.committer-epoch`) carries empty ones.
fn is_data_commit(snapshot: &iceberg::spec::Snapshot) -> bool {
    snapshot
        .summary()
        .additional_properties
        .get(SUMMARY_RANGES)
        .and_then(|r| crate::iceberg::table_state::decode_ranges(r))
        .is_some_and(|ranges| !ranges.is_empty())
}

/// When a snapshot last added records of each shard (from the snapshots' `floe.ranges`).
fn last_commit_per_shard(table: &Table) -> BTreeMap<String, i64> {
    let mut out = BTreeMap::new();
    for snapshot in table.metadata().snapshots() {
        let Some(ranges) = snapshot.summary().additional_properties.get(SUMMARY_RANGES) else {
            continue;
        };
        let Some(ranges) = crate::iceberg::table_state::decode_ranges(ranges) else {
            continue;
        };
        for shard in ranges.keys() {
            let at = out.entry(shard.clone()).or_insert(i64::MIN);
            *at = (*at).max(snapshot.timestamp_ms());
        }
    }
    out
}

/// Kafka lag of the channel's shards after their checkpoints ([`KafkaSource::lag_after`]: 0
/// once only transaction markers are left), or why the position is lost, for the shards the
/// broker answers for within 3 s in all; nothing is shown for the others. Shards of several
/// topics (`<topic>:<partition>`) are asked of their topic.
///
/// [`KafkaSource::lag_after`]: crate::source::kafka::KafkaSource::lag_after
async fn kafka_lags(
    channel: &ChannelConfig,
    checkpoints: &crate::model::Checkpoints,
) -> BTreeMap<String, Result<u64, String>> {
    let crate::config::SourceConfig::Kafka(kafka) = &channel.source else {
        // Kinesis lag (MillisBehindLatest) is only known to the readers: see the metrics.
        return BTreeMap::new();
    };
    use crate::source::kafka::{topics::KafkaTopicsSource, KafkaSource, KafkaSourceConfig};
    let source_config =
        KafkaSourceConfig::from_channel(&channel.name, kafka, &kafka.topics.describe())
            .with_request_timeout(Duration::from_secs(2));
    // One topic: shards "0", "1", …; several: "<topic>:<partition>".
    enum Topics {
        One(KafkaSource),
        Several(KafkaTopicsSource),
    }
    let source = match kafka.topics.single() {
        Some(_) => KafkaSource::try_new(source_config).map(Topics::One),
        None => KafkaTopicsSource::with_settings(source_config, kafka.topics.clone())
            .map(Topics::Several),
    };
    let Ok(source) = source else {
        return BTreeMap::new();
    };
    let mut out = BTreeMap::new();
    let fetch = async {
        for (shard, position) in &checkpoints.0 {
            let crate::model::Position::Offset(checkpoint) = position else {
                continue;
            };
            let lag = match &source {
                Topics::One(one) => one.lag_after(shard, *checkpoint).await,
                Topics::Several(several) => several.lag_after(shard, *checkpoint).await,
            };
            let lag = match lag {
                Ok(lag) => Ok(lag),
                Err(crate::source::SourceError::PositionLost { message, .. }) => Err(message),
                Err(_) => continue,
            };
            out.insert(shard.to_string(), lag);
        }
    };
    // The shards answered within the bound keep their entries.
    let _ = tokio::time::timeout(Duration::from_secs(3), fetch).await;
    out
}
