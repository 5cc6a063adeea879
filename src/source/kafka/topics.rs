//! Several Kafka topics as one [`Source`]: a channel with `topics = [...]` or
//! `topic_pattern = "..."` delivering into one table (docs/kafka.md, "Several topics").
//!
//! ```text
//!   KafkaTopicsSource ── KafkaClients (one per channel per worker: metadata client, consumer,
//!        │                 probes)
//!        │                 list_shards / topics: one Metadata request for every topic of the
//!        │                 cluster, kept when TopicSelection::selects(topic)
//!        └── per topic, created on first use: KafkaSource (the single-topic source, reading
//!              through the channel's clients)
//!   shard "orders:3" ── split at the last ':' ──► KafkaSource("orders"), shard "3"
//! ```
//!
//! - **Shards are `<topic>:<partition>`** ([`shard_of`], [`topic_partition_of`]): topic names
//!   cannot hold `:`, so the split is unambiguous; a channel with `topic = "..."` keeps the bare
//!   partition numbers (`"0"`, `"1"`, …) of [`KafkaSource`].
//! - **Each topic is read by the single-topic [`KafkaSource`]**, so offsets, checkpoint checks,
//!   lag and lost positions behave exactly as for one topic. Every topic reads through the
//!   channel's [`KafkaClients`] (one consumer assigned the union of the held partitions of
//!   every topic, one metadata client, at most two probe clients): the clients of a worker do
//!   not grow with its topics; per partition it holds, a queue of its own.
//! - **A deleted topic** leaves the listing. Shard discovery then deletes its partitions'
//!   lease rows ([`Source::unlisted_shards_are_gone`]), which releases them: their holders drop
//!   the readers as for a lease lost, nothing new is assigned, the table and its checkpoints
//!   stay. Until then, a reader of a partition absent from the cluster (opened after the
//!   deletion, or whose reads failed with an unknown topic that a listing confirmed) reads
//!   nothing and fails nothing, so the worker goes on with the channel's other shards; it never
//!   answers `NotFound`, which a worker takes for a shard that ended (`SHARD_END`). Every 10 s
//!   it looks for the partition again: once it is back (the topic recreated under the same
//!   name), a reader holding a position of the old log refuses it with
//!   [`SourceError::PositionLost`] (the recreated-topic refusal of a single topic), and one
//!   without a checkpoint reads it from the channel's initial position. A recreated topic that
//!   gets lease rows again resumes from the table's checkpoints through the usual checks
//!   ([`Source::check_checkpoint`], the offsets at open), as one topic does.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;

use super::api;
use super::{lock, with_retry, KafkaClients, KafkaSource, KafkaSourceConfig, RECREATED_REMEDY};
use crate::config::TopicSelection;
use crate::model::{Position, ShardId};
use crate::source::{
    InitialPosition, Lag, ShardInfo, ShardReader, Source, SourceError, SourceRecord, StartAt,
};

/// How long a listing of the cluster's topics answers "does this topic exist" (open, checkpoint
/// checks); an absent answer is always confirmed by a fresh listing.
const LISTING_REUSE: Duration = Duration::from_secs(10);

/// How often the reader of a partition of an absent topic looks for the topic again.
const ABSENT_TOPIC_CHECK: Duration = Duration::from_secs(10);

/// The shard id of `partition` of `topic` in a channel reading several topics:
/// `<topic>:<partition>`.
pub fn shard_of(topic: &str, partition: i32) -> ShardId {
    ShardId(format!("{topic}:{partition}"))
}

/// The topic and partition a `<topic>:<partition>` shard id names (split at the last `:`).
///
/// Errors: `None` when the id has no `:`, an empty topic, or a partition that is not a
/// non-negative decimal `i32`.
pub fn topic_partition_of(shard: &ShardId) -> Option<(&str, i32)> {
    let (topic, partition) = shard.as_str().rsplit_once(':')?;
    let partition = ShardId(partition.to_string()).as_kafka_partition()?;
    (!topic.is_empty()).then_some((topic, partition))
}

/// The partition ids of each selected topic, by topic name.
type Listing = BTreeMap<String, Vec<i32>>;

/// The channels of this process whose `topics`/`topic_pattern` matched no topic at their last
/// listing, with what to say ([`no_topic_matches`]); process-wide like the metrics recorder, so
/// that `/readyz` reports them whatever the channel's table kind.
static UNMATCHED: Mutex<BTreeMap<String, String>> = Mutex::new(BTreeMap::new());

/// The channels of this process whose topic selection matched no topic at their last listing:
/// channel name → "no topic matches …".
pub fn unmatched_channels() -> BTreeMap<String, String> {
    lock(&UNMATCHED).clone()
}

/// How many topic names [`no_topic_matches`] shows.
const TOPICS_SHOWN: usize = 5;

/// What floe says when the selection `key` (`channel[0].source.topic_pattern = "orders\\..*"`)
/// matches none of `listed` (the cluster's topics; Kafka's internal `__` topics left out): the
/// key, how many topics it was matched against and the first few of them.
pub fn no_topic_matches<'a>(key: &str, listed: impl IntoIterator<Item = &'a str>) -> String {
    let listed: Vec<&str> = listed
        .into_iter()
        .filter(|t| !t.starts_with("__"))
        .collect();
    let mut shown = listed
        .iter()
        .take(TOPICS_SHOWN)
        .copied()
        .collect::<Vec<_>>()
        .join(", ");
    if listed.len() > TOPICS_SHOWN {
        shown.push_str(", …");
    }
    match listed.len() {
        0 => format!("no topic matches {key}: the cluster has no topic"),
        n => format!("no topic matches {key} (matched against the cluster's {n} topics: {shown})"),
    }
}

/// The key of `selection` with its value as written, for messages:
/// `channel[0].source.topic_pattern = "orders\\..*"` (`channel.source` without an index).
fn selection_key(index: Option<usize>, selection: &TopicSelection) -> String {
    let at = index.map_or("channel".to_string(), |i| format!("channel[{i}]"));
    match selection {
        TopicSelection::One(topic) => format!("{at}.source.topic = {topic:?}"),
        TopicSelection::List(topics) => format!("{at}.source.topics = {topics:?}"),
        TopicSelection::Pattern(p) => format!("{at}.source.topic_pattern = {:?}", p.as_str()),
    }
}

/// The topics of a `topics`/`topic_pattern` channel as one [`Source`]; shards are
/// `<topic>:<partition>` (see the module docs).
#[derive(Clone)]
pub struct KafkaTopicsSource {
    inner: Arc<Inner>,
}

struct Inner {
    selection: TopicSelection,
    /// The settings every per-topic source copies (its `topic` set); `topic` here is the
    /// selection as written, for logs.
    config: KafkaSourceConfig,
    /// The clients every topic is read through.
    clients: Arc<KafkaClients>,
    /// The source of each topic read or checked so far.
    sources: Mutex<HashMap<String, Arc<KafkaSource>>>,
    /// The last listing of the selected topics, and when it was made.
    listing: Mutex<Option<(Instant, Arc<Listing>)>>,
    /// How often a reader of an absent topic looks for it ([`ABSENT_TOPIC_CHECK`]).
    absent_check: Duration,
    /// The selection's key as written, for the warning when no topic matches
    /// ([`KafkaTopicsSource::at_index`] gives it its channel's index).
    config_key: String,
}

impl std::fmt::Debug for KafkaTopicsSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KafkaTopicsSource")
            .field("config", &self.inner.config)
            .finish()
    }
}

impl KafkaTopicsSource {
    /// The source of channel `channel`'s `[channel.source]` (any [`TopicSelection`]; a single
    /// `topic` is read through [`KafkaSource`] by [`super::open_channel_source`]). No network
    /// call.
    ///
    /// Errors: [`SourceError::Config`] when a client property is refused or invalid.
    pub fn try_new(
        channel: &str,
        source: &crate::config::KafkaSourceConfig,
    ) -> Result<Self, SourceError> {
        let config = KafkaSourceConfig::from_channel(channel, source, &source.topics.describe());
        Self::with_settings(config, source.topics.clone())
    }

    /// The source of the topics `selection` picks, with `config`'s connection settings (its
    /// `topic` only names the selection in logs). No network call.
    ///
    /// Errors: [`SourceError::Config`] when a client property is refused or invalid.
    pub fn with_settings(
        config: KafkaSourceConfig,
        selection: TopicSelection,
    ) -> Result<Self, SourceError> {
        let clients = KafkaClients::try_new(&config)?;
        Ok(Self::with_clients(config, selection, clients))
    }

    /// The source of the topics `selection` picks, reading through `clients` (made with
    /// `config`'s cluster and client properties). No network call.
    pub fn with_clients(
        config: KafkaSourceConfig,
        selection: TopicSelection,
        clients: Arc<KafkaClients>,
    ) -> Self {
        KafkaTopicsSource {
            inner: Arc::new(Inner {
                config_key: selection_key(None, &selection),
                selection,
                config,
                clients,
                sources: Mutex::new(HashMap::new()),
                listing: Mutex::new(None),
                absent_check: ABSENT_TOPIC_CHECK,
            }),
        }
    }

    /// The clients every topic of this source is read through.
    pub fn clients(&self) -> &Arc<KafkaClients> {
        &self.inner.clients
    }

    /// The source of the channel at `index` of the configuration: the warning of a selection
    /// that matches no topic names `channel[index].source.…`. Call it on a new source.
    pub fn at_index(mut self, index: usize) -> Self {
        if let Some(inner) = Arc::get_mut(&mut self.inner) {
            inner.config_key = selection_key(Some(index), &inner.selection);
        }
        self
    }

    /// The selected topics the cluster has now, by name (one Metadata request for every topic
    /// of the cluster, retried like the other metadata calls), for callers that follow the
    /// selection themselves, such as the per-topic supervision of `table = "{topic}"` (every
    /// `topic_refresh_interval`). Build the source once with [`KafkaTopicsSource::try_new`] and
    /// call this on it: each source keeps one metadata client.
    ///
    /// Errors: retryable errors of the request after its retries; other client errors.
    pub async fn topics(&self) -> Result<Vec<String>, SourceError> {
        Ok(self.inner.list().await?.keys().cloned().collect())
    }

    /// Records left to read on a shard after its `checkpoint` ([`KafkaSource::lag_after`] of
    /// the shard's topic).
    ///
    /// Errors: as [`KafkaSource::lag_after`]; [`SourceError::InvalidPosition`] for a shard id
    /// that is not `<topic>:<partition>`.
    pub async fn lag_after(&self, shard: &ShardId, checkpoint: i64) -> Result<u64, SourceError> {
        let (source, partition) = self.inner.split(shard)?;
        source
            .lag_after(&partition, checkpoint)
            .await
            .map_err(|e| renamed(e, shard))
    }
}

impl Inner {
    /// Lists the selected topics now and keeps the listing.
    async fn list(&self) -> Result<Arc<Listing>, SourceError> {
        let all = with_retry(
            &self.clients.metadata,
            self.config.request_timeout,
            &self.config.topic,
            "fetch metadata",
            api::topics,
        )
        .await?;
        let listed: Vec<String> = all.keys().cloned().collect();
        let selected: Listing = all
            .into_iter()
            .filter(|(topic, _)| self.selection.selects(topic))
            .collect();
        self.say_matches(&selected, &listed);
        let selected = Arc::new(selected);
        *lock(&self.listing) = Some((Instant::now(), selected.clone()));
        // Sources of topics gone from the cluster are dropped (their readers keep what they use).
        lock(&self.sources).retain(|topic, _| selected.contains_key(topic));
        Ok(selected)
    }

    /// After each listing: the number of selected topics as a metric, and when none matches, a
    /// warning naming the key and the topics it was matched against (at every listing until a
    /// topic matches) and the channel in [`unmatched_channels`].
    fn say_matches(&self, selected: &Listing, listed: &[String]) {
        let channel = &self.config.channel;
        crate::telemetry::set_channel_topics(channel, selected.len());
        if !selected.is_empty() {
            if lock(&UNMATCHED).remove(channel).is_some() {
                tracing::info!(channel = %channel, topics = selected.len(), "topics match {} now", self.config_key);
            }
            return;
        }
        let note = no_topic_matches(&self.config_key, listed.iter().map(String::as_str));
        tracing::warn!(channel = %channel, "{note}; nothing is read until a topic matches (listed again every topic_refresh_interval)");
        lock(&UNMATCHED).insert(channel.clone(), note);
    }

    /// Whether the partition `shard` names is in the cluster: from a listing younger than
    /// [`LISTING_REUSE`] when it names the partition, else from a fresh listing.
    async fn present(&self, shard: &ShardId) -> Result<bool, SourceError> {
        let Some((topic, partition)) = topic_partition_of(shard) else {
            return Ok(false);
        };
        let holds = |listed: &Listing| listed.get(topic).is_some_and(|ps| ps.contains(&partition));
        let recent = lock(&self.listing)
            .as_ref()
            .filter(|(at, _)| at.elapsed() < LISTING_REUSE)
            .is_some_and(|(_, listed)| holds(listed));
        if recent {
            return Ok(true);
        }
        let listed = self.list().await?;
        Ok(holds(&listed))
    }

    /// After a per-topic source answered `NotFound` (`what`) for `shard`: `Ok` when a fresh
    /// listing confirms the partition is gone, else [`SourceError::Unavailable`] (a transient
    /// answer, retried). A several-topic source never answers `NotFound`, which a worker takes
    /// for a shard that ended (`SHARD_END`, never read again).
    async fn confirm_gone(&self, shard: &ShardId, what: String) -> Result<(), SourceError> {
        let Some((topic, partition)) = topic_partition_of(shard) else {
            return Ok(());
        };
        let listed = self.list().await?;
        if listed.get(topic).is_some_and(|ps| ps.contains(&partition)) {
            return Err(SourceError::Unavailable {
                message: format!("{what} (the cluster lists partition {shard}: retried)"),
            });
        }
        Ok(())
    }

    /// The source of `shard`'s topic (created on first use) and the partition's shard id in it.
    fn split(&self, shard: &ShardId) -> Result<(Arc<KafkaSource>, ShardId), SourceError> {
        let (topic, partition) =
            topic_partition_of(shard).ok_or_else(|| SourceError::InvalidPosition {
                shard: shard.clone(),
                message: "shard id is not <topic>:<partition>".to_string(),
            })?;
        let source = lock(&self.sources)
            .entry(topic.to_string())
            .or_insert_with(|| {
                let mut config = self.config.clone();
                config.topic = topic.to_string();
                config.shard_ids_name_topic = true;
                Arc::new(KafkaSource::with_clients(config, self.clients.clone()))
            })
            .clone();
        Ok((source, ShardId::kafka_partition(partition)))
    }
}

/// `e` of a per-topic source, naming the channel's shard id (`<topic>:<partition>`) instead of
/// the bare partition number.
fn renamed(e: SourceError, shard: &ShardId) -> SourceError {
    match e {
        SourceError::PositionLost { message, .. } => SourceError::PositionLost {
            shard: shard.clone(),
            message,
        },
        SourceError::InvalidPosition { message, .. } => SourceError::InvalidPosition {
            shard: shard.clone(),
            message,
        },
        e => e,
    }
}

#[async_trait]
impl Source for KafkaTopicsSource {
    /// A deleted topic's partitions leave the listing: their lease rows go (module docs).
    fn unlisted_shards_are_gone(&self) -> bool {
        true
    }

    async fn list_shards(&self) -> Result<Vec<ShardInfo>, SourceError> {
        let listed = self.inner.list().await?;
        Ok(listed
            .iter()
            .flat_map(|(topic, partitions)| {
                partitions.iter().map(|p| ShardInfo {
                    id: shard_of(topic, *p),
                    parents: Vec::new(),
                })
            })
            .collect())
    }

    /// As [`KafkaSource`]'s; for a partition absent from the cluster (its topic deleted), the
    /// start unresolved (resolved by the reader if the partition appears).
    async fn start_position(
        &self,
        shard: &ShardId,
        initial: &InitialPosition,
    ) -> Result<StartAt, SourceError> {
        let unresolved = || match initial {
            InitialPosition::Earliest => StartAt::Earliest,
            InitialPosition::Latest => StartAt::Latest,
            InitialPosition::AtTimestamp(t) => StartAt::AtTimestamp(*t),
        };
        let (source, partition) = self.inner.split(shard)?;
        if !self.inner.present(shard).await? {
            return Ok(unresolved());
        }
        match source.start_position(&partition, initial).await {
            // Deleted since the listing: never a NotFound, which a worker takes for a shard
            // that ended.
            Err(SourceError::NotFound { what }) => {
                self.inner.confirm_gone(shard, what).await?;
                Ok(unresolved())
            }
            r => r.map_err(|e| renamed(e, shard)),
        }
    }

    /// As [`KafkaSource`]'s; a checkpoint of a partition absent from the cluster passes here and
    /// is refused by the reader should the partition appear again (module docs).
    async fn check_checkpoint(
        &self,
        shard: &ShardId,
        checkpoint: &Position,
        committed_by_ms: i64,
    ) -> Result<(), SourceError> {
        let (source, partition) = self.inner.split(shard)?;
        if !self.inner.present(shard).await? {
            return Ok(());
        }
        match source
            .check_checkpoint(&partition, checkpoint, committed_by_ms)
            .await
        {
            Err(SourceError::NotFound { what }) => self.inner.confirm_gone(shard, what).await,
            r => r.map_err(|e| renamed(e, shard)),
        }
    }

    /// As [`KafkaSource`]'s, one probe assignment per topic.
    async fn check_checkpoints(
        &self,
        checks: &[(ShardId, Position)],
        committed_by_ms: i64,
    ) -> Result<(), SourceError> {
        let mut by_topic: BTreeMap<
            String,
            (Arc<KafkaSource>, Vec<(ShardId, Position)>, Vec<ShardId>),
        > = BTreeMap::new();
        for (shard, checkpoint) in checks {
            if !self.inner.present(shard).await? {
                continue;
            }
            let (source, partition) = self.inner.split(shard)?;
            let topic = topic_partition_of(shard)
                .map(|(t, _)| t.to_string())
                .unwrap_or_default();
            let entry = by_topic
                .entry(topic)
                .or_insert_with(|| (source, Vec::new(), Vec::new()));
            entry.1.push((partition, checkpoint.clone()));
            entry.2.push(shard.clone());
        }
        for (source, partitions, shards) in by_topic.into_values() {
            match source.check_checkpoints(&partitions, committed_by_ms).await {
                Err(SourceError::NotFound { what }) => {
                    for shard in &shards {
                        self.inner.confirm_gone(shard, what.clone()).await?;
                    }
                }
                Err(SourceError::PositionLost { shard, message }) => {
                    let named = partitions
                        .iter()
                        .zip(&shards)
                        .find(|((p, _), _)| *p == shard)
                        .map_or(shard, |(_, s)| s.clone());
                    return Err(SourceError::PositionLost {
                        shard: named,
                        message,
                    });
                }
                r => r?,
            }
        }
        Ok(())
    }

    async fn open(
        &self,
        shard: &ShardId,
        start: StartAt,
    ) -> Result<Box<dyn ShardReader>, SourceError> {
        let (source, partition) = self.inner.split(shard)?;
        let mut reader = TopicShardReader {
            inner: self.inner.clone(),
            shard: shard.clone(),
            source,
            partition,
            resume: start,
            state: ReaderState::Absent {
                checked_at: Instant::now(),
            },
        };
        if self.inner.present(shard).await? {
            reader.open_inner().await?;
        } else {
            reader.absent("not in the cluster when the reader opened");
        }
        Ok(Box::new(reader))
    }
}

/// Reads one partition of one topic through the topic's [`KafkaSource`], naming records and
/// errors with the channel's shard id; idle while the topic is absent (module docs).
struct TopicShardReader {
    inner: Arc<Inner>,
    shard: ShardId,
    source: Arc<KafkaSource>,
    /// The partition's shard id in the topic's source.
    partition: ShardId,
    /// Where reading starts again: the start until a record is returned, then after the last
    /// record returned.
    resume: StartAt,
    state: ReaderState,
}

enum ReaderState {
    Reading(Box<dyn ShardReader>),
    /// The topic is absent from the cluster; last looked for at `checked_at`.
    Absent {
        checked_at: Instant,
    },
}

impl TopicShardReader {
    /// Opens the topic's reader at `resume`; a topic deleted meanwhile leaves the reader absent.
    async fn open_inner(&mut self) -> Result<(), SourceError> {
        match self.source.open(&self.partition, self.resume.clone()).await {
            Ok(reader) => {
                self.state = ReaderState::Reading(reader);
                Ok(())
            }
            Err(SourceError::NotFound { what }) => {
                self.inner.confirm_gone(&self.shard, what.clone()).await?;
                self.absent(&what);
                Ok(())
            }
            Err(e) => Err(renamed(e, &self.shard)),
        }
    }

    fn topic(&self) -> &str {
        self.source.topic()
    }

    fn absent(&mut self, why: &str) {
        tracing::warn!(channel = %self.inner.config.channel, shard = %self.shard, topic = %self.topic(), reason = %why, "topic deleted: its shard is not read (its table and checkpoints are kept); looking for the topic every {:?}", self.inner.absent_check);
        self.state = ReaderState::Absent {
            checked_at: Instant::now(),
        };
    }

    /// The absent topic is looked for again: back with a position of the old log is a
    /// recreated topic (refused), back without one is read from the start.
    async fn look_for_topic(&mut self) -> Result<(), SourceError> {
        if !self.inner.present(&self.shard).await? {
            return Ok(());
        }
        if let Some(position) = self.resume.after_exclusive() {
            return Err(SourceError::PositionLost {
                shard: self.shard.clone(),
                message: format!(
                    "topic {} was deleted and is back: floe holds position {position} of partition {} of the deleted topic's log and will not read the new log from it ({RECREATED_REMEDY})",
                    self.topic(),
                    self.partition,
                ),
            });
        }
        tracing::info!(channel = %self.inner.config.channel, shard = %self.shard, topic = %self.topic(), "topic is back: reading it from the channel's initial position");
        self.open_inner().await
    }
}

#[async_trait]
impl ShardReader for TopicShardReader {
    async fn next_batch(
        &mut self,
        max_records: usize,
        wait: Duration,
    ) -> Result<Vec<SourceRecord>, SourceError> {
        let reader = match &mut self.state {
            ReaderState::Reading(reader) => reader,
            ReaderState::Absent { checked_at } => {
                if checked_at.elapsed() < self.inner.absent_check {
                    tokio::time::sleep(wait).await;
                    return Ok(Vec::new());
                }
                *checked_at = Instant::now();
                self.look_for_topic().await?;
                return Ok(Vec::new());
            }
        };
        match reader.next_batch(max_records, wait).await {
            Ok(mut records) => {
                for r in &mut records {
                    r.shard = self.shard.clone();
                }
                if let Some(last) = records.last() {
                    self.resume = StartAt::After(last.position.clone());
                }
                Ok(records)
            }
            Err(SourceError::NotFound { what }) => {
                self.inner.confirm_gone(&self.shard, what.clone()).await?;
                self.absent(&what);
                Ok(Vec::new())
            }
            Err(e) => Err(renamed(e, &self.shard)),
        }
    }

    fn lag(&self) -> Option<Lag> {
        match &self.state {
            ReaderState::Reading(reader) => reader.lag(),
            ReaderState::Absent { .. } => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::embedded::EmbeddedKafka;
    use super::*;
    use crate::config::TopicPattern;

    /// Reads `reader` until it returned `n` records or failed (at most 15 s); the records'
    /// `(shard, offset)` and the error.
    async fn read(
        reader: &mut Box<dyn ShardReader>,
        n: usize,
    ) -> (Vec<(String, Position)>, Option<SourceError>) {
        let mut got = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(15);
        while got.len() < n && Instant::now() < deadline {
            match reader.next_batch(100, Duration::from_millis(200)).await {
                Ok(batch) => got.extend(batch.into_iter().map(|r| (r.shard.0, r.position))),
                Err(e) => return (got, Some(e)),
            }
        }
        (got, None)
    }

    /// A pattern source lists the matching topics' partitions as `<topic>:<partition>` and
    /// reads them; a partition of a topic absent from the cluster opens as an idle reader (no
    /// error: the worker's other shards go on) that, once the topic exists, reads it from the
    /// start when it held no checkpoint and refuses it as a recreated topic when it did.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn absent_topics_idle_then_are_read_or_refused_as_recreated_when_they_appear() {
        let kafka = EmbeddedKafka::start(1).unwrap();
        kafka.create_topic("t.a", 2).unwrap();
        kafka.create_topic("other", 1).unwrap();
        let producer = kafka.producer().unwrap();
        for i in 0..3 {
            producer.send("t.a", Some(1), b"k", b"v", None).unwrap();
            producer
                .send("other", Some(0), b"k", i.to_string().as_bytes(), None)
                .unwrap();
        }
        producer.flush(Duration::from_secs(10)).unwrap();
        let config = KafkaSourceConfig::new(kafka.bootstrap_servers(), "t")
            .with_request_timeout(Duration::from_secs(2));
        let selection = TopicSelection::Pattern(TopicPattern::new("t\\..*").unwrap());
        let mut source = KafkaTopicsSource::with_settings(config, selection).unwrap();
        Arc::get_mut(&mut source.inner).unwrap().absent_check = Duration::from_millis(300);

        let ids: Vec<String> = source
            .list_shards()
            .await
            .unwrap()
            .into_iter()
            .map(|s| s.id.0)
            .collect();
        assert_eq!(ids, ["t.a:0", "t.a:1"]);
        assert_eq!(source.topics().await.unwrap(), ["t.a"]);
        let mut a1 = source
            .open(&shard_of("t.a", 1), StartAt::Earliest)
            .await
            .unwrap();
        let (got, err) = read(&mut a1, 3).await;
        assert!(err.is_none(), "{err:?}");
        let want: Vec<(String, Position)> = (0..3)
            .map(|o| ("t.a:1".to_string(), Position::Offset(o)))
            .collect();
        assert_eq!(got, want);
        assert_eq!(source.lag_after(&shard_of("t.a", 1), 1).await.unwrap(), 1);

        // Topic t.b does not exist (deleted): checks pass, the start stays unresolved, readers
        // idle without failing.
        let b0 = shard_of("t.b", 0);
        source
            .check_checkpoint(&b0, &Position::Offset(5), crate::time::now_ms())
            .await
            .unwrap();
        assert_eq!(
            source
                .start_position(&b0, &InitialPosition::AtTimestamp(7))
                .await
                .unwrap(),
            StartAt::AtTimestamp(7)
        );
        let mut fresh = source.open(&b0, StartAt::Earliest).await.unwrap();
        let mut resumed = source
            .open(&b0, StartAt::After(Position::Offset(5)))
            .await
            .unwrap();
        for reader in [&mut fresh, &mut resumed] {
            for _ in 0..3 {
                let batch = reader.next_batch(10, Duration::from_millis(200)).await;
                assert!(batch.unwrap().is_empty());
            }
            assert_eq!(reader.lag(), None);
        }

        // The topic appears (recreated): read from the start, or refused after a checkpoint.
        kafka.create_topic("t.b", 1).unwrap();
        producer.send("t.b", Some(0), b"k", b"v", None).unwrap();
        producer.send("t.b", Some(0), b"k", b"v", None).unwrap();
        producer.flush(Duration::from_secs(10)).unwrap();
        let (got, err) = read(&mut fresh, 2).await;
        assert!(err.is_none(), "{err:?}");
        let want: Vec<(String, Position)> = (0..2)
            .map(|o| ("t.b:0".to_string(), Position::Offset(o)))
            .collect();
        assert_eq!(got, want);
        let (got, err) = read(&mut resumed, 1).await;
        assert!(got.is_empty());
        match err {
            Some(SourceError::PositionLost { shard, message }) => {
                assert_eq!(shard, b0);
                assert!(message.contains("deleted and is back"), "{message}");
            }
            other => panic!("expected PositionLost, got {other:?}"),
        }
        assert!(source
            .list_shards()
            .await
            .unwrap()
            .iter()
            .any(|s| s.id == b0));
    }

    /// A shard id of a several-topic channel names its topic and partition; the split is at the
    /// last `:` (topic names cannot hold one) and anything else is not such an id.
    #[test]
    fn shard_ids_name_topic_and_partition() {
        let id = shard_of("orders.eu-1", 7);
        assert_eq!(id.as_str(), "orders.eu-1:7");
        assert_eq!(topic_partition_of(&id), Some(("orders.eu-1", 7)));
        assert_eq!(topic_partition_of(&shard_of("a", 0)), Some(("a", 0)));
        for bad in ["7", ":7", "t:", "t:-1", "t:x", "t:7:", "t: 7"] {
            assert_eq!(topic_partition_of(&ShardId(bad.to_string())), None, "{bad}");
        }
        // Single-topic shard ids are bare partition numbers, not of this form.
        assert_eq!(topic_partition_of(&ShardId::kafka_partition(3)), None);
    }

    /// A topic's source names the channel's shard (the `shard` label of its metrics) as the
    /// channel does; a single-topic source keeps the bare partition number.
    #[test]
    fn a_topics_source_names_shards_as_the_channel_does() {
        let config = KafkaSourceConfig::new("127.0.0.1:9", "unused");
        let several = KafkaTopicsSource::with_settings(
            config.clone(),
            TopicSelection::List(vec!["orders".into()]),
        )
        .unwrap();
        let (source, partition) = several.inner.split(&shard_of("orders", 3)).unwrap();
        assert_eq!(source.topic(), "orders");
        assert_eq!(partition, ShardId::kafka_partition(3));
        assert_eq!(source.config.channel_shard(&partition), "orders:3");
        assert_eq!(config.channel_shard(&partition), "3");
        assert!(matches!(
            several.inner.split(&ShardId::kafka_partition(3)),
            Err(SourceError::InvalidPosition { .. })
        ));
    }
}
