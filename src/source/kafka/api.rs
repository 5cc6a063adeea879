//! Raw rdkafka calls used by [`super::KafkaSource`]: client construction, one function per remote
//! call, and the one place librdkafka errors become [`SourceError`]s.
//!
//! Every function here **blocks** (librdkafka's API is synchronous): call them from
//! `tokio::task::spawn_blocking`, never from an async task.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use rdkafka::client::ClientContext;
use rdkafka::config::{ClientConfig, RDKafkaLogLevel};
use rdkafka::consumer::base_consumer::PartitionQueue;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::error::KafkaError;
use rdkafka::message::Message;
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{Offset, TopicPartitionList};
use serde::Deserialize;

use super::KafkaSourceConfig;
use crate::model::ShardId;
use crate::source::SourceError;

/// The `group.id` librdkafka requires for `assign()`. floe never subscribes, joins, or commits
/// offsets to this group: progress lives in the Iceberg table.
pub(super) const UNJOINED_GROUP_ID: &str = "floe-assign-only-never-joined";

/// Default prefetch bound per leased partition (librdkafka `queued.max.messages.kbytes`: it
/// applies per partition queue when partition queues are split, as floe's are), so a worker's
/// memory stays bounded by the partitions it leases; overridable by the user.
const DEFAULT_QUEUED_MAX_KBYTES: &str = "4096";
/// Default prefetch target per leased partition in messages (librdkafka `queued.min.messages`).
const DEFAULT_QUEUED_MIN_MESSAGES: &str = "10000";

/// How often one kind of librdkafka log line or client error is logged (docs/operations.md):
/// the first at once, then at most one per period, with the number left out since.
pub(super) const REPEATED_LOG_PERIOD: Duration = Duration::from_secs(10);

/// The rate limit of librdkafka's log lines and client errors, by kind (facility, or error
/// code), shared by every client of one source: an unreachable broker makes librdkafka report
/// the same error in bursts (about 30 within a millisecond, for each client), which would
/// flood the log with lines that say nothing new.
#[derive(Debug, Default)]
pub(super) struct LogThrottle {
    /// Per kind: when a line was last logged, and how many were left out since.
    by_kind: Mutex<HashMap<String, (Instant, u64)>>,
}

impl LogThrottle {
    /// Whether a line of `kind` arriving at `now` is logged: `Some(left_out)` with the number
    /// of lines of its kind left out since the last one logged, or `None` to leave it out (one
    /// was logged less than [`REPEATED_LOG_PERIOD`] ago).
    pub(super) fn admit(&self, kind: &str, now: Instant) -> Option<u64> {
        let mut by_kind = self.by_kind.lock().unwrap_or_else(|e| e.into_inner());
        match by_kind.get_mut(kind) {
            Some((last, left_out))
                if now.saturating_duration_since(*last) < REPEATED_LOG_PERIOD =>
            {
                *left_out += 1;
                None
            }
            Some((last, left_out)) => {
                *last = now;
                Some(std::mem::take(left_out))
            }
            None => {
                by_kind.insert(kind.to_string(), (now, 0));
                Some(0)
            }
        }
    }
}

/// The rdkafka client context of floe's consumers: routes librdkafka logs and errors to
/// `tracing` (at most one per kind every [`REPEATED_LOG_PERIOD`], naming the channel and the
/// brokers), and keeps what librdkafka's statistics last reported for every partition the
/// consumer has assigned, of every topic (lag without a network call).
pub(super) struct FloeContext {
    /// The topic, or the topics (a channel's selection), the client reads: for logs.
    topic: String,
    channel: String,
    bootstrap_servers: String,
    throttle: std::sync::Arc<LogThrottle>,
    /// Last statistics by topic and partition (absent until the first report naming the
    /// partition).
    partitions: Mutex<HashMap<(String, i32), PartitionStats>>,
}

/// What librdkafka's statistics last reported for one partition (see librdkafka's
/// STATISTICS.md, `partitions` object). Offsets are `-1` while unknown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct PartitionStats {
    /// `lo_offset`: the oldest offset the broker holds.
    pub(super) low: i64,
    /// `hi_offset`: the high watermark, the offset the next appended record will get.
    pub(super) high: i64,
    /// `ls_offset`: the last stable offset — under `read_committed` (floe's setting) nothing at or
    /// past it can be read yet (an open transaction); equals `high` without open transactions.
    pub(super) stable: i64,
    /// `app_offset`: one past the last record or control record (transaction marker) the
    /// application polled off the partition's queue. librdkafka steps it past commit and abort
    /// markers, which are never returned as messages.
    pub(super) app: i64,
    /// How many reports have named the partition (to tell a report made after an assignment
    /// from an older one).
    pub(super) reports: u64,
}

impl FloeContext {
    fn new(config: &KafkaSourceConfig) -> Self {
        FloeContext {
            topic: config.topic.clone(),
            channel: config.channel.clone(),
            bootstrap_servers: config.bootstrap_servers.clone(),
            throttle: config.log_throttle.clone(),
            partitions: Mutex::new(HashMap::new()),
        }
    }

    /// The last statistics reported for `partition` of `topic`; `None` before any report on it.
    pub(super) fn partition_stats(&self, topic: &str, partition: i32) -> Option<PartitionStats> {
        self.partitions
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&(topic.to_string(), partition))
            .copied()
    }
}

#[derive(Deserialize)]
struct StatsJson {
    #[serde(default)]
    topics: HashMap<String, TopicStatsJson>,
}

#[derive(Deserialize)]
struct TopicStatsJson {
    #[serde(default)]
    partitions: HashMap<String, PartitionStatsJson>,
}

#[derive(Deserialize)]
struct PartitionStatsJson {
    #[serde(default = "minus_one")]
    hi_offset: i64,
    #[serde(default = "minus_one")]
    lo_offset: i64,
    #[serde(default = "minus_one")]
    ls_offset: i64,
    #[serde(default = "minus_one")]
    app_offset: i64,
}

fn minus_one() -> i64 {
    -1
}

impl ClientContext for FloeContext {
    fn log(&self, level: RDKafkaLogLevel, fac: &str, log_message: &str) {
        if matches!(level, RDKafkaLogLevel::Debug) {
            tracing::debug!(topic = %self.topic, facility = fac, "librdkafka: {log_message}");
            return;
        }
        let Some(left_out) = self
            .throttle
            .admit(&format!("log {level:?} {fac}"), Instant::now())
        else {
            return;
        };
        let left_out = (left_out > 0).then_some(left_out);
        let (channel, topic, brokers) = (&self.channel, &self.topic, &self.bootstrap_servers);
        // One event, at the level librdkafka gave (tracing's levels are constants).
        macro_rules! client_log {
            ($level:expr) => {
                tracing::event!(
                    $level,
                    channel,
                    topic,
                    bootstrap_servers = brokers,
                    facility = fac,
                    left_out,
                    "librdkafka: {log_message}"
                )
            };
        }
        match level {
            RDKafkaLogLevel::Emerg
            | RDKafkaLogLevel::Alert
            | RDKafkaLogLevel::Critical
            | RDKafkaLogLevel::Error => client_log!(tracing::Level::ERROR),
            RDKafkaLogLevel::Warning => client_log!(tracing::Level::WARN),
            RDKafkaLogLevel::Notice | RDKafkaLogLevel::Info | RDKafkaLogLevel::Debug => {
                client_log!(tracing::Level::INFO)
            }
        }
    }

    fn stats_raw(&self, statistics: &[u8]) {
        let Ok(stats) = serde_json::from_slice::<StatsJson>(statistics) else {
            return;
        };
        let mut known = self.partitions.lock().unwrap_or_else(|e| e.into_inner());
        for (name, topic) in stats.topics {
            for (partition, p) in topic.partitions {
                // librdkafka reports the unassigned partition "-1" too.
                let Ok(partition) = partition.parse::<i32>() else {
                    continue;
                };
                if partition < 0 || (p.hi_offset < 0 && p.lo_offset < 0) {
                    continue;
                }
                let entry = known
                    .entry((name.clone(), partition))
                    .or_insert(PartitionStats {
                        low: -1,
                        high: -1,
                        stable: -1,
                        app: -1,
                        reports: 0,
                    });
                // A value not known in this report keeps the last known one.
                for (field, value) in [
                    (&mut entry.low, p.lo_offset),
                    (&mut entry.high, p.hi_offset),
                    (&mut entry.stable, p.ls_offset),
                ] {
                    if value >= 0 {
                        *field = value;
                    }
                }
                entry.app = p.app_offset;
                entry.reports += 1;
            }
        }
    }

    fn error(&self, error: KafkaError, reason: &str) {
        let kind = match error.rdkafka_error_code() {
            Some(code) => format!("error {code:?}"),
            None => "error".to_string(),
        };
        let Some(left_out) = self.throttle.admit(&kind, Instant::now()) else {
            return;
        };
        let left_out = (left_out > 0).then_some(left_out);
        tracing::warn!(channel = %self.channel, topic = %self.topic, bootstrap_servers = %self.bootstrap_servers, error = %error, left_out, "kafka client error: {reason}");
    }
}

impl ConsumerContext for FloeContext {}

/// A consumer of floe: the user's passthrough properties, then floe's correctness settings.
pub(super) type FloeConsumer = BaseConsumer<FloeContext>;

/// Refuses passthrough properties that would override a correctness setting (the list config
/// validation refuses too: [`crate::config::validate::owned_kafka_property`]).
///
/// Errors: [`SourceError::Config`] naming the property and why.
pub(super) fn check_client_properties(config: &KafkaSourceConfig) -> Result<(), SourceError> {
    for key in config.client_properties.keys() {
        if let Some(why) = crate::config::validate::owned_kafka_property(key) {
            return Err(SourceError::Config {
                message: format!("client property `{key}` cannot be set: {why}"),
            });
        }
    }
    Ok(())
}

fn client_config(config: &KafkaSourceConfig, reader: bool) -> ClientConfig {
    client_config_with(config, reader, &[])
}

fn client_config_with(
    config: &KafkaSourceConfig,
    reader: bool,
    overrides: &[(&str, &str)],
) -> ClientConfig {
    let mut c = ClientConfig::new();
    c.set("client.id", "floe");
    c.set("queued.max.messages.kbytes", DEFAULT_QUEUED_MAX_KBYTES);
    c.set("queued.min.messages", DEFAULT_QUEUED_MIN_MESSAGES);
    for (k, v) in &config.client_properties {
        c.set(k, v);
    }
    c.set("bootstrap.servers", &config.bootstrap_servers)
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set("auto.offset.reset", "error")
        .set("enable.partition.eof", "false")
        .set("isolation.level", "read_committed")
        .set("allow.auto.create.topics", "false");
    if reader {
        c.set("group.id", UNJOINED_GROUP_ID)
            .set("statistics.interval.ms", "1000");
    }
    for (k, v) in overrides {
        c.set(*k, *v);
    }
    c
}

/// Creates the client used for metadata, watermark and offsets-for-times requests (no group,
/// never assigned).
pub(super) fn metadata_client(config: &KafkaSourceConfig) -> Result<FloeConsumer, SourceError> {
    create(config, client_config(config, false))
}

/// Creates a client of `config`'s topic from `client`.
///
/// Errors: [`SourceError::Config`] when librdkafka refuses the settings.
fn create(config: &KafkaSourceConfig, client: ClientConfig) -> Result<FloeConsumer, SourceError> {
    client
        .create_with_context(FloeContext::new(config))
        .map_err(|e| SourceError::Config {
            message: format!("cannot create kafka client: {e}"),
        })
}

/// `topic`/`partition` at `offset`, as a one-entry partition list.
fn partition_at(
    topic: &str,
    partition: i32,
    offset: Offset,
) -> Result<TopicPartitionList, SourceError> {
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(topic, partition, offset)
        .map_err(|e| map_error(&e, "assign"))?;
    Ok(tpl)
}

/// Creates the one consumer of a source that reads every partition the worker leases: a dummy
/// `group.id` (never joined; librdkafka needs one for assignments), statistics every second for
/// lag, nothing assigned yet ([`incremental_assign`] adds partitions one by one).
pub(super) fn shared_consumer(config: &KafkaSourceConfig) -> Result<FloeConsumer, SourceError> {
    create(config, client_config(config, true))
}

/// Adds `topic`/`partition` at `offset` to the consumer's assignment, leaving the other
/// partitions as they are (never `assign()`: it would deactivate every split partition queue).
///
/// Errors: mapped client errors (a partition already assigned is `Fatal`: a bug).
pub(super) fn incremental_assign(
    consumer: &FloeConsumer,
    topic: &str,
    partition: i32,
    offset: Offset,
) -> Result<(), SourceError> {
    consumer
        .incremental_assign(&partition_at(topic, partition, offset)?)
        .map_err(|e| map_error(&e, "incremental assign"))
}

/// Removes `topic`/`partition` from the consumer's assignment. librdkafka stops its fetcher and
/// bumps the partition's version barrier before this returns: messages fetched for the old
/// assignment are never returned afterwards.
///
/// Errors: mapped client errors.
pub(super) fn incremental_unassign(
    consumer: &FloeConsumer,
    topic: &str,
    partition: i32,
) -> Result<(), SourceError> {
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition(topic, partition);
    consumer
        .incremental_unassign(&tpl)
        .map_err(|e| map_error(&e, "incremental unassign"))
}

/// Empties a partition queue without waiting: discards messages and errors left by a previous
/// assignment of the partition (an error is not versioned by librdkafka, so a stale "offset out
/// of range" would otherwise reach the next reader). Returns how many events were discarded.
pub(super) fn drain(queue: &PartitionQueue<FloeContext>) -> usize {
    let mut n = 0;
    // Bounded: a queue holds at most `queued.min.messages` + one fetch.
    while n < 1_000_000 {
        match queue.poll(Duration::ZERO) {
            Some(_) => n += 1,
            None => break,
        }
    }
    n
}

/// Creates a consumer for reading single records at chosen offsets
/// ([`first_record_at_or_after`]): short fetch waits, small fetches.
pub(super) fn probe_client(config: &KafkaSourceConfig) -> Result<FloeConsumer, SourceError> {
    let client = client_config_with(
        config,
        true,
        &[
            ("fetch.wait.max.ms", "10"),
            ("fetch.error.backoff.ms", "10"),
            ("queued.min.messages", "1"),
            ("statistics.interval.ms", "0"),
        ],
    );
    create(config, client)
}

/// Replaces the consumer's assignment with `topic`/`partition` at `offset`.
pub(super) fn assign(
    consumer: &FloeConsumer,
    topic: &str,
    partition: i32,
    offset: Offset,
) -> Result<(), SourceError> {
    consumer
        .assign(&partition_at(topic, partition, offset)?)
        .map_err(|e| map_error(&e, "assign"))
}

/// Serves queued client events (logs, errors) of a client that is never polled for messages.
pub(super) fn serve_events(consumer: &FloeConsumer) {
    for _ in 0..64 {
        if consumer.poll(Duration::ZERO).is_none() {
            break;
        }
    }
}

/// Metadata request: the partition ids of `topic`, ascending.
///
/// Errors: [`SourceError::NotFound`] when the topic does not exist; mapped client errors.
pub(super) fn partitions(
    consumer: &FloeConsumer,
    topic: &str,
    timeout: Duration,
) -> Result<Vec<i32>, SourceError> {
    let metadata = consumer
        .fetch_metadata(Some(topic), timeout)
        .map_err(|e| map_error(&e, "fetch metadata"));
    serve_events(consumer);
    let metadata = metadata?;
    let t = metadata
        .topics()
        .iter()
        .find(|t| t.name() == topic)
        .ok_or_else(|| SourceError::NotFound {
            what: format!("topic {topic}"),
        })?;
    if let Some(err) = t.error() {
        let code = RDKafkaErrorCode::from(err);
        return Err(map_code(code, &format!("metadata of topic {topic}")));
    }
    let mut ids: Vec<i32> = t.partitions().iter().map(|p| p.id()).collect();
    ids.sort_unstable();
    Ok(ids)
}

/// Metadata request for every topic of the cluster: each topic's partition ids, ascending, by
/// topic name. Topics the broker reports as unknown (deleted while the request ran) are left
/// out; a topic with another error (a leader election) is listed with the partitions the broker
/// named, so a transient error never looks like a deleted topic.
///
/// Errors: mapped client errors.
pub(super) fn topics(
    consumer: &FloeConsumer,
    timeout: Duration,
) -> Result<BTreeMap<String, Vec<i32>>, SourceError> {
    let metadata = consumer
        .fetch_metadata(None, timeout)
        .map_err(|e| map_error(&e, "fetch metadata of every topic"));
    serve_events(consumer);
    let metadata = metadata?;
    let mut out = BTreeMap::new();
    for t in metadata.topics() {
        let unknown = t.error().is_some_and(|err| {
            matches!(
                RDKafkaErrorCode::from(err),
                RDKafkaErrorCode::UnknownTopicOrPartition | RDKafkaErrorCode::UnknownTopic
            )
        });
        if unknown {
            continue;
        }
        let mut ids: Vec<i32> = t.partitions().iter().map(|p| p.id()).collect();
        ids.sort_unstable();
        out.insert(t.name().to_string(), ids);
    }
    Ok(out)
}

/// ListOffsets request: `(low, high)` watermarks of a partition — the oldest offset the broker
/// holds and the offset the next appended record will get.
pub(super) fn watermarks(
    consumer: &FloeConsumer,
    topic: &str,
    partition: i32,
    timeout: Duration,
) -> Result<(i64, i64), SourceError> {
    let r = consumer
        .fetch_watermarks(topic, partition, timeout)
        .map_err(|e| map_error(&e, "fetch watermarks"));
    serve_events(consumer);
    r
}

/// ListOffsets-by-timestamp request: the first offset whose record timestamp is at or after
/// `timestamp_ms`, or `None` when the broker reports none (every record is older, or the broker
/// does not implement timestamp lookups — librdkafka's mock cluster answers `None` always).
pub(super) fn offset_for_time(
    consumer: &FloeConsumer,
    topic: &str,
    partition: i32,
    timestamp_ms: i64,
    timeout: Duration,
) -> Result<Option<i64>, SourceError> {
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(topic, partition, Offset::Offset(timestamp_ms))
        .map_err(|e| map_error(&e, "offsets for times"))?;
    let result = consumer
        .offsets_for_times(tpl, timeout)
        .map_err(|e| map_error(&e, "offsets for times"));
    serve_events(consumer);
    let result = result?;
    let elem = result
        .find_partition(topic, partition)
        .ok_or_else(|| SourceError::NotFound {
            what: format!("partition {partition} of topic {topic}"),
        })?;
    elem.error()
        .map_err(|e| map_error(&e, "offsets for times"))?;
    Ok(match elem.offset() {
        Offset::Offset(o) if o >= 0 => Some(o),
        _ => None,
    })
}

/// One message copied out of librdkafka.
#[derive(Clone)]
pub(super) struct RawMessage {
    pub(super) partition: i32,
    pub(super) offset: i64,
    pub(super) key: Option<Vec<u8>>,
    pub(super) payload: Vec<u8>,
    /// The value is null (a tombstone), not merely empty.
    pub(super) tombstone: bool,
    pub(super) timestamp_ms: Option<i64>,
}

/// Fetch: polls up to `max_records` messages from one partition's queue, waiting up to `wait`
/// for the first one and not at all after it. Returns the messages polled and the error that
/// stopped the poll, if any.
pub(super) fn poll_batch(
    queue: &PartitionQueue<FloeContext>,
    max_records: usize,
    wait: Duration,
) -> (Vec<RawMessage>, Option<KafkaError>) {
    let deadline = Instant::now() + wait;
    let mut out = Vec::with_capacity(max_records.min(1024));
    while out.len() < max_records {
        let timeout = if out.is_empty() {
            deadline.saturating_duration_since(Instant::now())
        } else {
            Duration::ZERO
        };
        match queue.poll(timeout) {
            Some(Ok(m)) => out.push(RawMessage {
                partition: m.partition(),
                offset: m.offset(),
                key: m.key().map(<[u8]>::to_vec),
                payload: m.payload().map(<[u8]>::to_vec).unwrap_or_default(),
                tombstone: m.payload().is_none(),
                timestamp_ms: m.timestamp().to_millis(),
            }),
            Some(Err(e)) => return (out, Some(e)),
            None => {
                if !out.is_empty() || Instant::now() >= deadline {
                    break;
                }
            }
        }
    }
    (out, None)
}

/// What one poll of a consumer's main queue served.
pub(super) enum MainEvent {
    /// Nothing within the timeout, or only events served by callbacks (statistics, logs).
    Idle,
    /// A message of `partition` of `topic` at `offset`: every partition floe reads has its own
    /// queue, so this is never expected.
    Message {
        /// The message's topic.
        topic: String,
        /// The message's partition.
        partition: i32,
        /// Its offset.
        offset: i64,
    },
    /// An error event (librdkafka gives no partition for it, except partition EOF).
    Error(KafkaError),
}

/// Serves the main queue of a consumer once, waiting up to `timeout`: statistics and error
/// callbacks run here (librdkafka needs this queue polled even when no message is expected).
pub(super) fn serve_main_queue(consumer: &FloeConsumer, timeout: Duration) -> MainEvent {
    match consumer.poll(timeout) {
        None => MainEvent::Idle,
        Some(Ok(m)) => MainEvent::Message {
            topic: m.topic().to_string(),
            partition: m.partition(),
            offset: m.offset(),
        },
        Some(Err(e)) => MainEvent::Error(e),
    }
}

/// Fetch: the offset and timestamp (ms) of the first record at or after `offset`, or `None` when
/// no record arrives within `timeout`. Re-assigns `consumer`.
pub(super) fn first_record_at_or_after(
    consumer: &FloeConsumer,
    topic: &str,
    partition: i32,
    offset: i64,
    timeout: Duration,
) -> Result<Option<(i64, Option<i64>)>, SourceError> {
    assign(consumer, topic, partition, Offset::Offset(offset))?;
    let deadline = Instant::now() + timeout;
    loop {
        let remaining = deadline.saturating_duration_since(Instant::now());
        if remaining.is_zero() {
            return Ok(None);
        }
        match consumer.poll(remaining) {
            Some(Ok(m)) if m.partition() == partition && m.offset() >= offset => {
                return Ok(Some((m.offset(), m.timestamp().to_millis())));
            }
            Some(Ok(_)) => {}
            Some(Err(e)) => {
                let e = map_error(&e, "fetch");
                if !e.is_retryable() {
                    return Err(e);
                }
            }
            None => {}
        }
    }
}

/// The first record at or after an offset of each asked (topic, partition):
/// `(offset, timestamp ms)`.
pub(super) type FirstRecords = HashMap<(String, i32), (i64, Option<i64>)>;

/// Fetch: [`first_record_at_or_after`] of many partitions, of one topic or several, at once
/// through one assignment of them all at their offsets (`wanted`: (topic, partition) → offset):
/// a partition's entry is its first record at or after the offset, `(offset, timestamp ms)`; a
/// partition whose record did not come within `timeout` has none. Re-assigns `consumer`.
///
/// Errors: mapped client errors that are not retryable.
pub(super) fn first_records_at_or_after(
    consumer: &FloeConsumer,
    wanted: &HashMap<(String, i32), i64>,
    timeout: Duration,
) -> Result<FirstRecords, SourceError> {
    let mut tpl = TopicPartitionList::new();
    for ((topic, partition), &offset) in wanted {
        tpl.add_partition_offset(topic, *partition, Offset::Offset(offset))
            .map_err(|e| map_error(&e, "assign"))?;
    }
    consumer.assign(&tpl).map_err(|e| map_error(&e, "assign"))?;
    let mut found = HashMap::with_capacity(wanted.len());
    let deadline = Instant::now() + timeout;
    while found.len() < wanted.len() {
        let remaining = deadline.saturating_duration_since(Instant::now());
        if remaining.is_zero() {
            break;
        }
        match consumer.poll(remaining) {
            Some(Ok(m)) => {
                let key = (m.topic().to_string(), m.partition());
                let due = wanted.get(&key).is_some_and(|&o| m.offset() >= o);
                if due && !found.contains_key(&key) {
                    // Not paused once found: a probe client's pause outlives its assignment
                    // and would silence the partition at the next probe (queued.min.messages
                    // = 1 keeps what it prefetches small).
                    found.insert(key, (m.offset(), m.timestamp().to_millis()));
                }
            }
            None => {}
            Some(Err(e)) => {
                let e = map_error(&e, "fetch");
                if !e.is_retryable() {
                    return Err(e);
                }
            }
        }
    }
    Ok(found)
}

/// Fetch: whether every offset in `from..high` of `partition` is a transaction marker (or a
/// record of an aborted transaction, which `read_committed` never returns), so a reader that
/// delivered everything before `from` has nothing left to read. `Some(true)` once librdkafka's
/// position steps to `high` without returning a record, `Some(false)` when a record below `high`
/// arrives, `None` when neither happens within `timeout`. Re-assigns `consumer`.
pub(super) fn nothing_to_read_before(
    consumer: &FloeConsumer,
    topic: &str,
    partition: i32,
    from: i64,
    high: i64,
    timeout: Duration,
) -> Result<Option<bool>, SourceError> {
    assign(consumer, topic, partition, Offset::Offset(from))?;
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        match consumer.poll(Duration::from_millis(20)) {
            Some(Ok(m)) if m.partition() == partition && m.offset() >= from => {
                return Ok(Some(m.offset() >= high));
            }
            Some(Err(e)) => {
                let e = map_error(&e, "fetch");
                if !e.is_retryable() {
                    return Err(e);
                }
            }
            _ => {}
        }
        let position = consumer.position().map_err(|e| map_error(&e, "position"))?;
        if let Some(Offset::Offset(p)) = position
            .find_partition(topic, partition)
            .map(|e| e.offset())
        {
            if p >= high {
                return Ok(Some(true));
            }
        }
    }
    Ok(None)
}

/// Maps a consumption error of the reader of `shard` (adds [`SourceError::PositionLost`]).
pub(super) fn map_consume_error(e: &KafkaError, shard: &ShardId) -> SourceError {
    match e.rdkafka_error_code() {
        Some(RDKafkaErrorCode::AutoOffsetReset | RDKafkaErrorCode::OffsetOutOfRange) => {
            SourceError::PositionLost {
                shard: shard.clone(),
                message: format!("the start offset is no longer held by the broker: {e}"),
            }
        }
        _ => map_error(e, "fetch"),
    }
}

/// Maps an rdkafka error of operation `what` to the caller's next step.
pub(super) fn map_error(e: &KafkaError, what: &str) -> SourceError {
    match e.rdkafka_error_code() {
        Some(code) => map_code(code, &format!("{what}: {e}")),
        None => SourceError::Fatal {
            message: format!("{what}: {e}"),
        },
    }
}

fn map_code(code: RDKafkaErrorCode, message: &str) -> SourceError {
    use RDKafkaErrorCode::*;
    let message = message.to_string();
    match code {
        OperationTimedOut
        | RequestTimedOut
        | BrokerTransportFailure
        | AllBrokersDown
        | Resolve
        | LeaderNotAvailable
        | NotLeaderForPartition
        | BrokerNotAvailable
        | ReplicaNotAvailable
        | NetworkException
        | CoordinatorLoadInProgress
        | CoordinatorNotAvailable
        | NotCoordinator
        | WaitingForCoordinator
        | KafkaStorageError
        | FencedLeaderEpoch
        | UnknownLeaderEpoch
        | PreferredLeaderNotAvailable
        | OffsetNotAvailable
        | TimedOutQueue
        | Retry
        | WaitCache
        | Interrupted
        | InProgress
        | NotEnoughReplicas
        | RebootstrapRequired
        | DestroyBroker => SourceError::Unavailable { message },
        ThrottlingQuotaExceeded => SourceError::Throttled { message },
        UnknownTopicOrPartition | UnknownTopic | UnknownPartition => {
            SourceError::NotFound { what: message }
        }
        _ => SourceError::Fatal { message },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 35: an unresolvable broker made librdkafka report the same error about 30 times
    /// within a millisecond; each kind is logged once per period, with the count left out.
    #[test]
    fn repeated_client_errors_are_logged_once_per_period_with_the_count_left_out() {
        let throttle = LogThrottle::default();
        let t0 = Instant::now();
        assert_eq!(throttle.admit("error AllBrokersDown", t0), Some(0));
        for i in 0..29 {
            let at = t0 + Duration::from_micros(30 * i);
            assert_eq!(throttle.admit("error AllBrokersDown", at), None);
        }
        // Another kind is logged on its own schedule.
        assert_eq!(throttle.admit("log Error FAIL", t0), Some(0));
        let just_before = t0 + REPEATED_LOG_PERIOD - Duration::from_millis(1);
        assert_eq!(throttle.admit("error AllBrokersDown", just_before), None);
        let period = t0 + REPEATED_LOG_PERIOD;
        assert_eq!(throttle.admit("error AllBrokersDown", period), Some(30));
        assert_eq!(throttle.admit("error AllBrokersDown", period), None);
        assert_eq!(
            throttle.admit("error AllBrokersDown", period + REPEATED_LOG_PERIOD),
            Some(1)
        );
    }

    /// Aborted transactional records never reach the table because every client floe creates
    /// reads `read_committed`, whatever the user passes through. (librdkafka's mock cluster
    /// writes transaction markers but does not filter aborted records, so this setting, not a
    /// broker, is what the tests can hold floe to.)
    #[test]
    fn every_client_reads_committed_records_only_and_never_commits_offsets() {
        let config = KafkaSourceConfig::new("127.0.0.1:9", "t")
            .with_client_property("fetch.wait.max.ms", "50");
        for reader in [false, true] {
            let c = client_config(&config, reader);
            assert_eq!(c.get("isolation.level"), Some("read_committed"));
            assert_eq!(c.get("enable.auto.commit"), Some("false"));
            assert_eq!(c.get("auto.offset.reset"), Some("error"));
            assert_eq!(c.get("fetch.wait.max.ms"), Some("50"));
        }
        let probe = client_config_with(&config, true, &[("queued.min.messages", "1")]);
        assert_eq!(probe.get("isolation.level"), Some("read_committed"));
    }
}
