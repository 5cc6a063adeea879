//! Kafka implementation of the [`Source`] seam (rdkafka / librdkafka).
//!
//! Partitions are read with **manual `assign()` at explicit offsets**: floe never subscribes to a
//! topic, never joins a consumer group, never commits offsets to Kafka (`enable.auto.commit` and
//! `enable.auto.offset.store` are always off). The lease store decides which worker reads which
//! partition; the Iceberg table holds the checkpoints (DESIGN.md, protocol step 1).
//!
//! ```text
//!   KafkaSource ── metadata client (no group) ── list_shards: Metadata
//!        │                                      start_position: ListOffsets (watermarks, by timestamp)
//!        └── open(partition, start) ──► KafkaShardReader ── its own consumer, assign(topic, p, offset)
//!                                             next_batch: poll on a blocking thread
//! ```
//!
//! Choices:
//! - **One librdkafka consumer per leased partition.** Readers are independent (one slow or
//!   failing partition never stalls another, dropping a lease drops its consumer and its prefetch
//!   buffer at once). Cost: a few librdkafka threads and one connection per broker per leased
//!   partition, fine for tens of partitions per worker. Prefetch is bounded per consumer
//!   (`queued.max.messages.kbytes` = 4096 by default, overridable) so memory follows the number of
//!   leased partitions.
//! - **librdkafka calls run on `spawn_blocking`**: `next_batch` polls on a blocking thread for at
//!   most its `wait`; metadata calls are bounded by the request timeout.
//! - A checkpoint is the offset of the last delivered record; a reader resumes at
//!   `checkpoint + 1` ([`StartAt::After`]). A start offset the broker no longer holds (retention)
//!   fails with [`SourceError::PositionLost`] (`auto.offset.reset = error`): never a silent skip.
//! - `start_position(AtTimestamp(t))` resolves to the first offset whose record timestamp is ≥ t
//!   (ListOffsets by timestamp). When the broker has none, the high watermark read *before* the
//!   lookup is used, so every worker resolving later finds the same offset (records appended
//!   after it carry newer timestamps). librdkafka's mock cluster answers no timestamp lookup at
//!   all; floe detects it (the last record is newer than t) and finds the offset by a binary
//!   search over record timestamps instead.
//! - Lag is the high watermark reported by librdkafka statistics (every second, no extra request)
//!   minus the next offset to return.
//! - Transactional records are read `read_committed`; aborted records and control records are
//!   never returned, so offsets may have gaps — ranges are `(after, last]` by position, not counts.

mod api;
pub mod embedded;

use std::collections::BTreeMap;
use std::fmt;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use rdkafka::consumer::Consumer;
use rdkafka::Offset;

use self::api::FloeConsumer;
use super::{
    now_ms, InitialPosition, Lag, ShardInfo, ShardReader, Source, SourceError, SourceRecord,
    StartAt,
};
use crate::model::{Position, ShardId};

/// Attempts of a metadata call (list shards, watermarks, offsets for times) before a retryable
/// error is returned to the caller.
const METADATA_ATTEMPTS: u32 = 3;
/// First backoff between metadata attempts; multiplied by 4 after each attempt.
const METADATA_FIRST_BACKOFF: Duration = Duration::from_millis(100);

/// Connection settings of a Kafka source: one topic of one cluster.
#[derive(Clone)]
pub struct KafkaSourceConfig {
    /// Comma-separated `host:port` list (librdkafka `bootstrap.servers`).
    pub bootstrap_servers: String,
    /// The topic to read.
    pub topic: String,
    /// librdkafka client properties passed through (TLS, SASL, fetch tuning, …). Properties
    /// that would change floe's correctness settings (`enable.auto.commit`, `group.id`,
    /// `auto.offset.reset`, `isolation.level`, …) are refused by [`KafkaSource::try_new`].
    pub client_properties: BTreeMap<String, String>,
    /// Timeout of one metadata request (metadata, watermarks, offsets for times). Default 10 s.
    pub request_timeout: Duration,
}

impl fmt::Debug for KafkaSourceConfig {
    /// Prints property names only: values may be secrets (`sasl.password`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KafkaSourceConfig")
            .field("bootstrap_servers", &self.bootstrap_servers)
            .field("topic", &self.topic)
            .field(
                "client_properties",
                &self.client_properties.keys().collect::<Vec<_>>(),
            )
            .field("request_timeout", &self.request_timeout)
            .finish()
    }
}

impl KafkaSourceConfig {
    /// Settings for `topic` on the cluster at `bootstrap_servers`, no extra client properties.
    pub fn new(bootstrap_servers: impl Into<String>, topic: impl Into<String>) -> Self {
        KafkaSourceConfig {
            bootstrap_servers: bootstrap_servers.into(),
            topic: topic.into(),
            client_properties: BTreeMap::new(),
            request_timeout: Duration::from_secs(10),
        }
    }

    /// Adds a librdkafka client property.
    pub fn with_client_property(
        mut self,
        key: impl Into<String>,
        value: impl Into<String>,
    ) -> Self {
        self.client_properties.insert(key.into(), value.into());
        self
    }

    /// Sets the timeout of one metadata request.
    pub fn with_request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = timeout;
        self
    }
}

/// A Kafka topic as a [`Source`]: shards are its partitions (`ShardId("0")`, `ShardId("1")`, …),
/// positions are offsets ([`Position::Offset`]).
pub struct KafkaSource {
    config: Arc<KafkaSourceConfig>,
    metadata: Arc<FloeConsumer>,
}

impl fmt::Debug for KafkaSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KafkaSource")
            .field("config", &self.config)
            .finish()
    }
}

impl KafkaSource {
    /// Creates the source. No network call: a broker that is down surfaces on first use.
    ///
    /// Errors: [`SourceError::Config`] when a client property is refused or invalid.
    pub fn try_new(config: KafkaSourceConfig) -> Result<Self, SourceError> {
        api::check_client_properties(&config)?;
        if config.topic.is_empty() {
            return Err(SourceError::Config {
                message: "topic is empty".to_string(),
            });
        }
        let metadata = api::metadata_client(&config)?;
        Ok(KafkaSource {
            config: Arc::new(config),
            metadata: Arc::new(metadata),
        })
    }

    /// The topic this source reads.
    pub fn topic(&self) -> &str {
        &self.config.topic
    }

    /// The `(low, high)` watermarks of a partition: the oldest offset the broker holds and the
    /// offset the next appended record will get.
    ///
    /// Errors: as [`Source::list_shards`]; [`SourceError::InvalidPosition`] for a shard id that is
    /// not a partition number.
    pub async fn watermarks(&self, shard: &ShardId) -> Result<(i64, i64), SourceError> {
        let partition = partition_of(shard)?;
        let topic = self.config.topic.clone();
        self.with_retry("fetch watermarks", move |client, timeout| {
            api::watermarks(client, &topic, partition, timeout)
        })
        .await
    }

    /// Runs a metadata call on a blocking thread, retrying retryable errors with backoff.
    async fn with_retry<T, F>(&self, what: &'static str, op: F) -> Result<T, SourceError>
    where
        T: Send + 'static,
        F: Fn(&FloeConsumer, Duration) -> Result<T, SourceError> + Clone + Send + 'static,
    {
        let mut backoff = METADATA_FIRST_BACKOFF;
        let mut attempt = 1;
        loop {
            let client = self.metadata.clone();
            let timeout = self.config.request_timeout;
            let op2 = op.clone();
            match blocking(move || op2(&client, timeout)).await {
                Err(e) if e.is_retryable() && attempt < METADATA_ATTEMPTS => {
                    tracing::warn!(topic = %self.config.topic, attempt, error = %e, "kafka {what} failed, retrying");
                    tokio::time::sleep(backoff).await;
                    backoff *= 4;
                    attempt += 1;
                }
                r => return r,
            }
        }
    }

    async fn resolve_timestamp(
        &self,
        partition: i32,
        timestamp_ms: i64,
    ) -> Result<i64, SourceError> {
        let config = self.config.clone();
        self.with_retry("offsets for times", move |client, _timeout| {
            resolve_timestamp_blocking(&config, client, partition, timestamp_ms)
        })
        .await
    }
}

#[async_trait]
impl Source for KafkaSource {
    async fn list_shards(&self) -> Result<Vec<ShardInfo>, SourceError> {
        let topic = self.config.topic.clone();
        let ids = self
            .with_retry("fetch metadata", move |client, timeout| {
                api::partitions(client, &topic, timeout)
            })
            .await?;
        Ok(ids
            .into_iter()
            .map(|p| ShardInfo {
                id: ShardId::kafka_partition(p),
                parents: Vec::new(),
            })
            .collect())
    }

    async fn start_position(
        &self,
        shard: &ShardId,
        initial: &InitialPosition,
    ) -> Result<StartAt, SourceError> {
        let partition = partition_of(shard)?;
        match initial {
            InitialPosition::Earliest => Ok(StartAt::Earliest),
            InitialPosition::Latest => Ok(StartAt::Latest),
            InitialPosition::AtTimestamp(ts) => {
                let offset = self.resolve_timestamp(partition, *ts).await?;
                Ok(StartAt::At(Position::Offset(offset)))
            }
        }
    }

    async fn open(
        &self,
        shard: &ShardId,
        start: StartAt,
    ) -> Result<Box<dyn ShardReader>, SourceError> {
        let partition = partition_of(shard)?;
        let shards = self.list_shards().await?;
        if !shards.iter().any(|s| &s.id == shard) {
            return Err(SourceError::NotFound {
                what: format!("partition {partition} of topic {}", self.config.topic),
            });
        }
        let (offset, next_offset) = match &start {
            StartAt::After(Position::Offset(o)) => (Offset::Offset(o + 1), Some(o + 1)),
            StartAt::At(Position::Offset(o)) => (Offset::Offset(*o), Some(*o)),
            StartAt::AtTimestamp(ts) => {
                let o = self.resolve_timestamp(partition, *ts).await?;
                (Offset::Offset(o), Some(o))
            }
            StartAt::Earliest => (Offset::Beginning, None),
            StartAt::Latest => (Offset::End, None),
            StartAt::After(p) | StartAt::At(p) => {
                return Err(SourceError::InvalidPosition {
                    shard: shard.clone(),
                    message: format!("{p} is not a kafka offset"),
                })
            }
        };
        if matches!(next_offset, Some(o) if o < 0) {
            return Err(SourceError::InvalidPosition {
                shard: shard.clone(),
                message: format!("negative offset in {start:?}"),
            });
        }
        let config = self.config.clone();
        let consumer = blocking(move || api::reader_client(&config, partition, offset)).await?;
        tracing::info!(topic = %self.config.topic, shard = %shard, start = ?start, "kafka reader assigned");
        Ok(Box::new(KafkaShardReader {
            shard: shard.clone(),
            partition,
            consumer: Some(Arc::new(consumer)),
            next_offset,
            from_earliest: matches!(start, StartAt::Earliest),
            deferred_error: None,
        }))
    }
}

/// Reads one partition through its own consumer, assigned at an explicit offset.
pub struct KafkaShardReader {
    shard: ShardId,
    partition: i32,
    /// Always `Some` until drop (taken there to close it on a blocking thread).
    consumer: Option<Arc<FloeConsumer>>,
    /// The offset the next returned record must have at least; `None` before the first record of
    /// an Earliest/Latest start.
    next_offset: Option<i64>,
    from_earliest: bool,
    /// A non-retryable error met after records were already polled, returned on the next call.
    deferred_error: Option<SourceError>,
}

impl fmt::Debug for KafkaShardReader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KafkaShardReader")
            .field("shard", &self.shard)
            .field("next_offset", &self.next_offset)
            .finish()
    }
}

#[async_trait]
impl ShardReader for KafkaShardReader {
    async fn next_batch(
        &mut self,
        max_records: usize,
        wait: Duration,
    ) -> Result<Vec<SourceRecord>, SourceError> {
        if let Some(e) = self.deferred_error.take() {
            return Err(e);
        }
        let consumer = self.consumer.clone().expect("consumer present until drop");
        let max_records = max_records.max(1);
        let (raw, error) =
            tokio::task::spawn_blocking(move || api::poll_batch(&consumer, max_records, wait))
                .await
                .map_err(|e| SourceError::Fatal {
                    message: format!("kafka poll task failed: {e}"),
                })?;
        let read_at = Instant::now();
        let fallback_ms = now_ms();
        let mut records = Vec::with_capacity(raw.len());
        for m in raw {
            if m.partition != self.partition {
                continue;
            }
            if matches!(self.next_offset, Some(next) if m.offset < next) {
                // Never return a position twice (a re-fetch after a broker error can repeat).
                tracing::debug!(shard = %self.shard, offset = m.offset, "skipping repeated kafka record");
                continue;
            }
            self.next_offset = Some(m.offset + 1);
            records.push(SourceRecord {
                shard: self.shard.clone(),
                position: Position::Offset(m.offset),
                key: m.key,
                payload: m.payload,
                arrival_ms: m.timestamp_ms.unwrap_or(fallback_ms),
                read_at,
            });
        }
        if let Some(e) = error {
            let e = api::map_consume_error(&e, &self.shard);
            if records.is_empty() {
                return Err(e);
            }
            if !e.is_retryable() {
                self.deferred_error = Some(e);
            }
        }
        Ok(records)
    }

    fn lag(&self) -> Option<Lag> {
        let ctx = self.consumer.as_ref()?.context();
        let high = ctx.high_watermark.load(Ordering::Relaxed);
        if high < 0 {
            return None;
        }
        let next = match self.next_offset {
            Some(n) => n,
            None if self.from_earliest => {
                let low = ctx.low_watermark.load(Ordering::Relaxed);
                if low < 0 {
                    return None;
                }
                low
            }
            None => high,
        };
        Some(Lag::Records(high.saturating_sub(next).max(0) as u64))
    }
}

impl Drop for KafkaShardReader {
    /// Closing a consumer blocks (up to ~100 ms polls); do it on a blocking thread when inside a
    /// Tokio runtime.
    fn drop(&mut self) {
        if let Some(consumer) = self.consumer.take() {
            if let Ok(handle) = tokio::runtime::Handle::try_current() {
                handle.spawn_blocking(move || drop(consumer));
            }
        }
    }
}

/// The partition number a shard id names.
fn partition_of(shard: &ShardId) -> Result<i32, SourceError> {
    shard
        .as_kafka_partition()
        .ok_or_else(|| SourceError::InvalidPosition {
            shard: shard.clone(),
            message: "shard id is not a kafka partition number".to_string(),
        })
}

async fn blocking<T, F>(f: F) -> Result<T, SourceError>
where
    T: Send + 'static,
    F: FnOnce() -> Result<T, SourceError> + Send + 'static,
{
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| SourceError::Fatal {
            message: format!("blocking kafka call failed: {e}"),
        })?
}

/// The first offset of `partition` whose record timestamp is ≥ `timestamp_ms` (see the module
/// docs for the rule when the broker has none).
fn resolve_timestamp_blocking(
    config: &KafkaSourceConfig,
    client: &FloeConsumer,
    partition: i32,
    timestamp_ms: i64,
) -> Result<i64, SourceError> {
    let topic = &config.topic;
    let timeout = config.request_timeout;
    // Watermarks first: if the lookup finds nothing, every record below `high` is older.
    let (low, high) = api::watermarks(client, topic, partition, timeout)?;
    if let Some(o) = api::offset_for_time(client, topic, partition, timestamp_ms, timeout)? {
        return Ok(o);
    }
    if high <= low {
        return Ok(high);
    }
    // The broker says every record is older. Check the newest one: brokers without timestamp
    // lookups (librdkafka's mock cluster) answer "none" always.
    let probe = api::probe_client(config, partition)?;
    let is_at_or_after = |offset: i64| -> Result<(bool, Option<i64>), SourceError> {
        match api::first_record_at_or_after(&probe, topic, partition, offset, timeout)? {
            None => Ok((true, None)),
            Some((_, None)) => Ok((true, None)),
            Some((r, Some(t))) => Ok((t >= timestamp_ms, Some(r))),
        }
    };
    match is_at_or_after(high - 1)? {
        (false, _) | (true, None) => return Ok(high),
        (true, Some(_)) => {}
    }
    tracing::warn!(
        topic = %topic,
        partition,
        timestamp_ms,
        "broker found no offset for the timestamp but holds newer records; searching record timestamps"
    );
    // Invariant: the first record at or after `hi` is at/after the timestamp; before `lo` none is.
    let (mut lo, mut hi) = (low, high - 1);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        match is_at_or_after(mid)? {
            (true, _) => hi = mid,
            (false, Some(r)) => lo = (r + 1).min(hi),
            (false, None) => hi = mid,
        }
    }
    Ok(lo)
}
