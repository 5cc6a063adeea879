//! The librdkafka clients of a Kafka channel on one worker ([`KafkaClients`]), shared by the
//! sources of every topic the channel reads: one metadata client, one consumer reading every
//! partition the worker holds of every topic, and a small pool of probe clients.
//!
//! ```text
//!   KafkaClients (one per channel per worker; the topics of `table = "{topic}"` share it)
//!     ├── metadata client   Metadata, watermarks, offsets for times of every topic
//!     ├── shared consumer   assignment = union of the held partitions of every topic
//!     │     ├── main queue ◄── "floe-kafka-main" thread: statistics (lag), errors, logs
//!     │     ├── partition queue (orders, 0) ◄── reader of orders:0 (nonempty callback wakes it)
//!     │     └── partition queue (refunds, 3) ◄── reader of refunds:3
//!     └── probe clients     at most PROBE_CLIENTS, created on first use; the checkpoint
//!                           checks asked while one assignment runs go into the next, together
//! ```
//!
//! A partition's queue is the reader's alone: a reader that does not poll (its table's buffer
//! is full, its catalog slow) lets its queue fill to `queued.max.messages.kbytes`, and
//! librdkafka then stops fetching that partition only — the consumer's other partitions, of its
//! own table or of another, go on. A reader with nothing to read waits on a `Notify` that the
//! queue's nonempty callback (`rd_kafka_queue_cb_event_enable`) wakes: no thread blocks per
//! reader, so a worker's threads do not grow with its partitions.

pub(super) mod fan_out;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rdkafka::consumer::base_consumer::PartitionQueue;
use rdkafka::error::KafkaError;
use rdkafka::Offset;
use tokio::sync::{oneshot, Notify, OnceCell};

use self::fan_out::FanOuts;
use super::api::{self, FirstRecords, FloeConsumer, FloeContext, MainEvent};
use super::{blocking, lock, KafkaSourceConfig, MAIN_QUEUE_POLL};
use crate::model::ShardId;
use crate::source::SourceError;

/// How many probe clients (single-record reads: checkpoint checks, activation-time answers) a
/// channel's clients open at most: checks of partitions taken together run this many at a time.
pub(super) const PROBE_CLIENTS: usize = 2;

/// The librdkafka clients of one channel on one worker, shared by the [`super::KafkaSource`] of
/// each topic it reads (see the module docs). Dropping the last source of the clients and its
/// last reader closes them.
pub struct KafkaClients {
    /// The connection settings the clients were made with (`topic` names the selection).
    pub(super) settings: Arc<KafkaSourceConfig>,
    pub(super) metadata: Arc<FloeConsumer>,
    /// The consumer every reader polls through, created on the first `open`.
    pub(super) shared: OnceCell<Arc<Shared>>,
    pub(super) probes: Arc<ProbePool>,
    /// Whether readers of one partition share its reads ([`fan_out`]): the member
    /// channels of `table = "{route}"`, each reading the same partitions from its own table's
    /// checkpoints. Otherwise a new reader of a partition takes it over from the last one.
    pub(super) fan_out: bool,
}

impl std::fmt::Debug for KafkaClients {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KafkaClients")
            .field("settings", &self.settings)
            .finish()
    }
}

impl Drop for KafkaClients {
    /// Lets the main-queue thread stop once the last reader is gone too.
    fn drop(&mut self) {
        if let Some(shared) = self.shared.get() {
            shared.source_dropped.store(true, Ordering::Relaxed);
        }
    }
}

impl KafkaClients {
    /// The clients of `settings`' cluster: the metadata client now (no network call), the
    /// consumer and the probes on first use.
    ///
    /// Errors: [`SourceError::Config`] when a client property is refused or invalid.
    pub fn try_new(settings: &KafkaSourceConfig) -> Result<Arc<Self>, SourceError> {
        Self::make(settings, false)
    }

    /// Clients whose readers of one partition share its reads ([`KafkaClients::fan_out`]): each
    /// partition is fetched once for every reader holding it (the member channels of a
    /// `table = "{route}"` channel on one worker).
    ///
    /// Errors: as [`KafkaClients::try_new`].
    pub fn try_new_fanning_out(settings: &KafkaSourceConfig) -> Result<Arc<Self>, SourceError> {
        Self::make(settings, true)
    }

    fn make(settings: &KafkaSourceConfig, fan_out: bool) -> Result<Arc<Self>, SourceError> {
        api::check_client_properties(settings)?;
        let metadata = api::metadata_client(settings)?;
        Ok(Arc::new(KafkaClients {
            settings: Arc::new(settings.clone()),
            metadata: Arc::new(metadata),
            shared: OnceCell::new(),
            probes: Arc::default(),
            fan_out,
        }))
    }

    /// How many librdkafka clients these are now: the metadata client, the shared consumer
    /// once a partition was opened, and the probe clients made so far (each client is a thread
    /// of its own plus one per broker).
    pub fn num_clients(&self) -> usize {
        1 + usize::from(self.shared.initialized()) + self.probes.created()
    }

    /// How many probe assignments (single-record reads at chosen offsets: checkpoint checks,
    /// activation-time answers) these clients made so far; checks asked meanwhile by the
    /// sources of many topics share one.
    pub fn probe_assignments(&self) -> u64 {
        self.probes.assignments()
    }

    /// Bytes of record keys and payloads the consumer fetched so far: each message once, however
    /// many readers it went to (0 before the first `open`).
    pub fn fetched_bytes(&self) -> u64 {
        self.shared
            .get()
            .map_or(0, |s| s.fetched_bytes.load(Ordering::Relaxed))
    }

    /// The shared consumer, created (and its main-queue thread started) on first use.
    pub(super) async fn consumer(&self) -> Result<Arc<Shared>, SourceError> {
        let settings = self.settings.clone();
        Ok(self
            .shared
            .get_or_try_init(|| blocking(move || Shared::start(&settings)))
            .await?
            .clone())
    }
}

/// A topic and partition: the key of a partition of the shared consumer.
pub(super) type TopicPartition = (String, i32);

/// The consumer of a channel's clients shared by its readers, and which reader owns each
/// partition of each topic.
pub(super) struct Shared {
    /// What the consumer reads, for logs (the channel's topic or selection).
    pub(super) name: String,
    pub(super) consumer: Arc<FloeConsumer>,
    /// Partition → its assignment state. Lock order: a partition's poll lock, then this.
    pub(super) partitions: Mutex<HashMap<TopicPartition, PartitionSlot>>,
    next_generation: AtomicU64,
    /// The partitions read once for several readers ([`fan_out`]), when the clients
    /// fan out.
    pub(super) fan_outs: FanOuts,
    /// Bytes of keys and payloads fetched through the consumer so far (each message once,
    /// however many readers it went to).
    fetched_bytes: AtomicU64,
    /// Set when the [`KafkaClients`] are dropped; the main-queue thread then exits once it
    /// holds the last reference.
    source_dropped: AtomicBool,
    /// The last client error served on the main queue (no partition: broker down, transport
    /// failure, fatal client error) and its sequence number; each reader reports each one once,
    /// on a poll that returned nothing.
    client_error: Mutex<(u64, Option<KafkaError>)>,
}

#[derive(Default)]
pub(super) struct PartitionSlot {
    /// Generation of the reader the partition is assigned for; `None` when unassigned.
    owner: Option<u64>,
    /// Held while a reader of the partition polls its queue or the assignment changes: a
    /// takeover waits for a poll in flight (even one of a cancelled `next_batch`).
    poll_lock: Arc<Mutex<()>>,
    /// A message of this partition showed up on the main queue: the owner re-positions (see the
    /// module docs of [`super`]) before its next poll.
    pub(super) reposition: bool,
}

/// A partition opened for a reader: its queue, the reader's generation and the `Notify` its
/// queue's nonempty callback wakes.
pub(super) struct OpenedPartition {
    pub(super) queue: PartitionQueue<FloeContext>,
    pub(super) generation: u64,
    pub(super) wake: Arc<Notify>,
}

impl Shared {
    /// Creates the consumer and starts the thread serving its main queue (blocking).
    fn start(config: &KafkaSourceConfig) -> Result<Arc<Shared>, SourceError> {
        let consumer = api::shared_consumer(config)?;
        let shared = Arc::new(Shared {
            name: config.topic.clone(),
            consumer: Arc::new(consumer),
            partitions: Mutex::new(HashMap::new()),
            next_generation: AtomicU64::new(1),
            fan_outs: FanOuts::default(),
            fetched_bytes: AtomicU64::new(0),
            source_dropped: AtomicBool::new(false),
            client_error: Mutex::new((0, None)),
        });
        let for_thread = shared.clone();
        std::thread::Builder::new()
            .name("floe-kafka-main".to_string())
            .spawn(move || for_thread.serve_main_queue())
            .map_err(|e| SourceError::Fatal {
                message: format!("cannot start the kafka main-queue thread: {e}"),
            })?;
        Ok(shared)
    }

    /// Body of the main-queue thread: serves statistics and errors, flags partitions whose
    /// messages show up here; returns (dropping the consumer) when nobody else holds it.
    fn serve_main_queue(self: Arc<Self>) {
        loop {
            if self.source_dropped.load(Ordering::Relaxed) && Arc::strong_count(&self) == 1 {
                return;
            }
            match api::serve_main_queue(&self.consumer, MAIN_QUEUE_POLL) {
                MainEvent::Idle => {}
                MainEvent::Message {
                    topic,
                    partition,
                    offset,
                } => {
                    tracing::warn!(topic = %topic, partition, offset, "kafka message on the main queue instead of its partition queue: the reader re-positions");
                    if let Some(slot) = lock(&self.partitions).get_mut(&(topic, partition)) {
                        slot.reposition = true;
                    }
                }
                MainEvent::Error(KafkaError::PartitionEOF(_)) => {}
                MainEvent::Error(e) => {
                    tracing::warn!(topic = %self.name, error = %e, "kafka consumer error");
                    let mut last = lock(&self.client_error);
                    *last = (last.0 + 1, Some(e));
                }
            }
        }
    }

    /// Counts `bytes` of keys and payloads fetched for channel `channel`
    /// ([`crate::telemetry::KAFKA_FETCHED_BYTES_TOTAL`]).
    pub(super) fn count_fetched(&self, channel: &str, bytes: usize) {
        if bytes > 0 {
            self.fetched_bytes
                .fetch_add(bytes as u64, Ordering::Relaxed);
            crate::telemetry::record_fetched(channel, bytes as u64);
        }
    }

    /// The sequence number of the last client error.
    pub(super) fn client_error_seq(&self) -> u64 {
        lock(&self.client_error).0
    }

    /// The last client error if it is newer than `seen`, and its sequence number.
    pub(super) fn client_error_after(&self, seen: u64) -> Option<(u64, KafkaError)> {
        let last = lock(&self.client_error);
        match &last.1 {
            Some(e) if last.0 > seen => Some((last.0, e.clone())),
            _ => None,
        }
    }

    /// The poll lock of `partition` of `topic` (created with its slot).
    pub(super) fn poll_lock(&self, topic: &str, partition: i32) -> Arc<Mutex<()>> {
        lock(&self.partitions)
            .entry((topic.to_string(), partition))
            .or_default()
            .poll_lock
            .clone()
    }

    /// Assigns `partition` of `topic` at `offset` for a new reader, taking it over from a
    /// reader that still has it (blocking).
    pub(super) fn open_partition(
        self: &Arc<Self>,
        topic: &str,
        partition: i32,
        offset: Offset,
    ) -> Result<OpenedPartition, SourceError> {
        let wake = Arc::new(Notify::new());
        let waker = wake.clone();
        let mut opened =
            self.open_partition_with(topic, partition, offset, move || waker.notify_one())?;
        opened.wake = wake;
        Ok(opened)
    }

    /// [`Shared::open_partition`], with `on_nonempty` called by librdkafka whenever the
    /// partition's queue turns nonempty (it must not block); the returned `wake` is then unused.
    pub(super) fn open_partition_with(
        self: &Arc<Self>,
        topic: &str,
        partition: i32,
        offset: Offset,
        on_nonempty: impl Fn() + Send + Sync + 'static,
    ) -> Result<OpenedPartition, SourceError> {
        let poll_lock = self.poll_lock(topic, partition);
        let _polling = lock(&poll_lock);
        let mut partitions = lock(&self.partitions);
        let slot = partitions
            .entry((topic.to_string(), partition))
            .or_default();
        let mut queue = self
            .consumer
            .split_partition_queue(topic, partition)
            .ok_or_else(|| SourceError::NotFound {
                what: format!("partition {partition} of topic {topic}"),
            })?;
        // Called by librdkafka when the queue turns nonempty; it must not block.
        queue.set_nonempty_callback(on_nonempty);
        self.reassign(slot, &queue, topic, partition, offset)?;
        let generation = self.next_generation.fetch_add(1, Ordering::Relaxed);
        slot.owner = Some(generation);
        Ok(OpenedPartition {
            queue,
            generation,
            wake: Arc::new(Notify::new()),
        })
    }

    /// Unassigns `partition` if assigned, drains its queue, and assigns it at `offset`.
    /// Callers hold the partition's poll lock and the partitions lock.
    fn reassign(
        &self,
        slot: &mut PartitionSlot,
        queue: &PartitionQueue<FloeContext>,
        topic: &str,
        partition: i32,
        offset: Offset,
    ) -> Result<(), SourceError> {
        if slot.owner.take().is_some() {
            api::incremental_unassign(&self.consumer, topic, partition)?;
        }
        slot.reposition = false;
        let stale = api::drain(queue);
        if stale > 0 {
            tracing::debug!(
                topic,
                partition,
                stale,
                "discarded events of a previous assignment"
            );
        }
        api::incremental_assign(&self.consumer, topic, partition, offset)
    }
}

/// A reader's hold on its partition of the shared consumer: what a poll and a release need.
#[derive(Clone)]
pub(super) struct PartitionHandle {
    pub(super) shared: Arc<Shared>,
    pub(super) queue: Arc<PartitionQueue<FloeContext>>,
    pub(super) poll_lock: Arc<Mutex<()>>,
    pub(super) topic: String,
    pub(super) partition: i32,
    /// The reader's generation: it owns the partition while the slot's owner is this.
    pub(super) generation: u64,
}

impl PartitionHandle {
    /// The partition's key in [`Shared::partitions`].
    fn key(&self) -> TopicPartition {
        (self.topic.clone(), self.partition)
    }

    /// Has the partition assigned again before its next poll ([`PollJob::run`], at the poll's
    /// `resume_at`).
    pub(super) fn flag_reposition(&self) {
        if let Some(slot) = lock(&self.shared.partitions).get_mut(&self.key()) {
            slot.reposition = true;
        }
    }
}

/// What a reader's poll needs.
pub(super) struct PollJob {
    pub(super) handle: PartitionHandle,
    /// Where to re-position if the partition is flagged.
    pub(super) resume_at: Offset,
}

/// What one poll of a partition queue returned: the messages and the error that stopped it.
pub(super) type Polled = (Vec<api::RawMessage>, Option<KafkaError>);

impl PollJob {
    /// Polls without waiting, on the calling thread, when nothing can block it (the partition's
    /// poll lock free, no re-positioning due); `None` otherwise (then [`PollJob::run`] on a
    /// blocking thread).
    pub(super) fn try_now(
        &self,
        shard: &ShardId,
        max_records: usize,
    ) -> Option<Result<Polled, SourceError>> {
        let h = &self.handle;
        let _polling = h.poll_lock.try_lock().ok()?;
        {
            let partitions = lock(&h.shared.partitions);
            let slot = partitions.get(&h.key())?;
            if slot.owner != Some(h.generation) {
                return Some(Err(replaced(shard)));
            }
            if slot.reposition {
                return None;
            }
        }
        Some(Ok(api::poll_batch(&h.queue, max_records, Duration::ZERO)))
    }

    /// Polls, re-positioning first if the partition is flagged (blocking).
    pub(super) fn run(self, shard: &ShardId, max_records: usize) -> Result<Polled, SourceError> {
        let h = &self.handle;
        let _polling = lock(&h.poll_lock);
        {
            let mut partitions = lock(&h.shared.partitions);
            let slot = partitions.entry(h.key()).or_default();
            if slot.owner != Some(h.generation) {
                return Err(replaced(shard));
            }
            if slot.reposition {
                tracing::warn!(topic = %h.topic, shard = %shard, at = ?self.resume_at, "re-positioning kafka reader");
                let r = h
                    .shared
                    .reassign(slot, &h.queue, &h.topic, h.partition, self.resume_at);
                // Assigned again (or not at all on failure) for this same reader.
                if r.is_ok() {
                    slot.owner = Some(h.generation);
                }
                r?;
            }
        }
        Ok(api::poll_batch(&h.queue, max_records, Duration::ZERO))
    }
}

/// The error of a reader whose partition a newer reader took over.
fn replaced(shard: &ShardId) -> SourceError {
    SourceError::Fatal {
        message: format!(
            "the reader of shard {shard} was replaced by a newer reader of the same partition"
        ),
    }
}

/// Gives a dropped reader's partition back.
pub(super) struct Release(pub(super) PartitionHandle);

impl Release {
    /// Unassigns the partition unless a newer reader took it over, and drains its queue
    /// (blocking).
    pub(super) fn run(self) {
        let h = &self.0;
        let _polling = lock(&h.poll_lock);
        let mut partitions = lock(&h.shared.partitions);
        let Some(slot) = partitions.get_mut(&h.key()) else {
            return;
        };
        if slot.owner != Some(h.generation) {
            return; // taken over by a newer reader: nothing of ours is assigned
        }
        slot.owner = None;
        slot.reposition = false;
        if let Err(e) = api::incremental_unassign(&h.shared.consumer, &h.topic, h.partition) {
            tracing::warn!(topic = %h.topic, partition = h.partition, error = %e, "kafka unassign failed");
        }
        // Frees what was prefetched for the partition now, not when it is assigned again.
        api::drain(&h.queue);
    }
}

/// The probe clients of a channel's clients: the consumers that read single records at chosen
/// offsets (activation-time checks, checkpoint checks, describe's marker check), created on
/// first use and kept, at most [`PROBE_CLIENTS`].
pub(super) struct ProbePool {
    slots: [Mutex<Option<FloeConsumer>>; PROBE_CLIENTS],
    /// Where the next caller that finds every probe busy waits.
    next: AtomicUsize,
    /// One permit per probe client, taken before a blocking thread is: callers wait for a probe
    /// here, holding no thread (a 1,000-table worker's restart queued its checkpoint probes on
    /// the probes' locks in blocking threads, filled tokio's blocking pool and starved every
    /// other blocking call).
    permits: Arc<tokio::sync::Semaphore>,
    /// First-record asks waiting for the next probe assignment ([`ProbePool::first_records`]).
    gathered: Mutex<Gathered>,
    /// How many probe assignments were made (each call of [`ProbePool::with_probe`]).
    assignments: AtomicU64,
}

impl Default for ProbePool {
    fn default() -> Self {
        ProbePool {
            slots: Default::default(),
            next: AtomicUsize::new(0),
            permits: Arc::new(tokio::sync::Semaphore::new(PROBE_CLIENTS)),
            gathered: Mutex::default(),
            assignments: AtomicU64::new(0),
        }
    }
}

/// One caller's ask of [`ProbePool::first_records`].
struct Ask {
    wanted: HashMap<TopicPartition, i64>,
    reply: oneshot::Sender<Result<FirstRecords, SourceError>>,
}

/// The asks waiting for a probe assignment, and whether a task is serving them.
#[derive(Default)]
struct Gathered {
    asks: Vec<Ask>,
    serving: bool,
}

/// At most this many partitions go into one probe assignment of gathered asks (one ask larger
/// than that goes alone).
const MAX_GATHERED_PARTITIONS: usize = 2_000;

/// Takes from `asks`, in order, those that fit one assignment: together at most
/// [`MAX_GATHERED_PARTITIONS`] partitions (the first ask always), and no partition asked at two
/// offsets (two routes' tables of one topic; the later ask waits for the next assignment).
fn take_batch(asks: &mut Vec<Ask>) -> Vec<Ask> {
    let mut union: HashMap<&TopicPartition, i64> = HashMap::new();
    let mut fits = Vec::with_capacity(asks.len());
    for ask in asks.iter() {
        let conflict = ask
            .wanted
            .iter()
            .any(|(tp, o)| union.get(tp).is_some_and(|u| u != o));
        let grown = union.len() + ask.wanted.len();
        let fit = fits.is_empty() || (!conflict && grown <= MAX_GATHERED_PARTITIONS);
        if fit {
            union.extend(ask.wanted.iter().map(|(tp, o)| (tp, *o)));
        }
        fits.push(fit);
    }
    let mut fits = fits.into_iter();
    let (taken, kept) = std::mem::take(asks)
        .into_iter()
        .partition(|_| fits.next().unwrap_or(false));
    *asks = kept;
    taken
}

impl ProbePool {
    /// How many probe clients were created.
    fn created(&self) -> usize {
        // A probe in use exists (or is being made).
        self.slots
            .iter()
            .filter(|s| s.try_lock().map_or(true, |p| p.is_some()))
            .count()
    }

    /// Runs `f` with a probe client, creating it first if needed (blocking; a free probe if
    /// there is one, else waits for one: each call re-assigns the client).
    pub(super) fn with_probe<T>(
        &self,
        config: &KafkaSourceConfig,
        f: impl FnOnce(&FloeConsumer) -> Result<T, SourceError>,
    ) -> Result<T, SourceError> {
        let mut probe = match self.slots.iter().find_map(|s| s.try_lock().ok()) {
            Some(free) => free,
            None => {
                let i = self.next.fetch_add(1, Ordering::Relaxed) % PROBE_CLIENTS;
                lock(&self.slots[i])
            }
        };
        if probe.is_none() {
            *probe = Some(api::probe_client(config)?);
        }
        self.assignments.fetch_add(1, Ordering::Relaxed);
        crate::failpoint::blocking_point("kafka-probe");
        f(probe.as_ref().expect("probe client created above"))
    }

    /// A permit to use a probe client: await it before taking a blocking thread for
    /// [`ProbePool::with_probe`], so that at most [`PROBE_CLIENTS`] blocking threads serve
    /// probes.
    pub(super) async fn permit(&self) -> tokio::sync::OwnedSemaphorePermit {
        self.permits
            .clone()
            .acquire_owned()
            .await
            .expect("the probe semaphore is never closed")
    }

    /// How many probe assignments were made so far.
    pub(super) fn assignments(&self) -> u64 {
        self.assignments.load(Ordering::Relaxed)
    }

    /// The first record at or after each wanted offset ((topic, partition) → offset), read
    /// through a probe client together with what other callers ask meanwhile: the asks made
    /// while a probe assignment runs go into the next one, one assignment for them all (a
    /// worker restarted over 1,000 tables checked each table's checkpoints through a probe
    /// assignment of its own, 2–3 a second; issue 43). A partition whose record did not come
    /// within `config.request_timeout` has no entry.
    ///
    /// Errors: the probe's ([`api::first_records_at_or_after`]); when an assignment of several
    /// asks fails, each ask is tried alone, so one ask's error (a deleted topic) is its own.
    pub(super) async fn first_records(
        self: &Arc<Self>,
        config: &Arc<KafkaSourceConfig>,
        wanted: HashMap<TopicPartition, i64>,
    ) -> Result<FirstRecords, SourceError> {
        let (reply, answer) = oneshot::channel();
        let serve = {
            let mut gathered = lock(&self.gathered);
            gathered.asks.push(Ask { wanted, reply });
            !std::mem::replace(&mut gathered.serving, true)
        };
        if serve {
            tokio::spawn(self.clone().serve_asks(config.clone()));
        }
        answer.await.map_err(|_| SourceError::Fatal {
            message: "the probe task ended without an answer".into(),
        })?
    }

    /// Serves the gathered asks, an assignment at a time, until none is left.
    async fn serve_asks(self: Arc<Self>, config: Arc<KafkaSourceConfig>) {
        loop {
            let batch = {
                let mut gathered = lock(&self.gathered);
                let batch = take_batch(&mut gathered.asks);
                if batch.is_empty() {
                    gathered.serving = false;
                    return;
                }
                batch
            };
            if batch.len() > 1 {
                let union: HashMap<TopicPartition, i64> = batch
                    .iter()
                    .flat_map(|a| a.wanted.iter().map(|(tp, o)| (tp.clone(), *o)))
                    .collect();
                if let Ok(found) = self.probe(&config, union).await {
                    for ask in batch {
                        let mine = ask
                            .wanted
                            .keys()
                            .filter_map(|tp| found.get(tp).map(|r| (tp.clone(), *r)))
                            .collect();
                        let _ = ask.reply.send(Ok(mine));
                    }
                    continue;
                }
            }
            for ask in batch {
                let answer = self.probe(&config, ask.wanted).await;
                let _ = ask.reply.send(answer);
            }
        }
    }

    /// One probe assignment of `wanted` on a blocking thread (after a permit).
    async fn probe(
        self: &Arc<Self>,
        config: &Arc<KafkaSourceConfig>,
        wanted: HashMap<TopicPartition, i64>,
    ) -> Result<FirstRecords, SourceError> {
        let permit = self.permit().await;
        let (pool, config) = (self.clone(), config.clone());
        blocking(move || {
            let _permit = permit;
            pool.with_probe(&config, |probe| {
                api::first_records_at_or_after(probe, &wanted, config.request_timeout)
            })
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ask(partitions: &[(&str, i32, i64)]) -> Ask {
        Ask {
            wanted: partitions
                .iter()
                .map(|(t, p, o)| ((t.to_string(), *p), *o))
                .collect(),
            reply: oneshot::channel().0,
        }
    }

    fn topics(asks: &[Ask]) -> Vec<String> {
        asks.iter()
            .map(|a| a.wanted.keys().next().unwrap().0.clone())
            .collect()
    }

    /// Asks of other topics, and of one partition at the same offset, go together; a partition
    /// asked at another offset (two routes' tables of one topic) waits for the next assignment,
    /// in order.
    #[test]
    fn a_batch_takes_the_asks_that_agree_on_every_offset() {
        let mut asks = vec![
            ask(&[("a", 0, 5)]),
            ask(&[("b", 0, 7), ("b", 1, 7)]),
            ask(&[("a", 0, 9)]),
            ask(&[("a", 0, 5)]),
            ask(&[("c", 0, 1)]),
        ];
        let batch = take_batch(&mut asks);
        assert_eq!(topics(&batch), ["a", "b", "a", "c"]);
        assert_eq!(batch[2].wanted[&("a".to_string(), 0)], 5);
        assert_eq!(topics(&asks), ["a"]);
        assert_eq!(asks[0].wanted[&("a".to_string(), 0)], 9);
        assert_eq!(take_batch(&mut asks).len(), 1);
        assert!(take_batch(&mut asks).is_empty());
    }

    /// At most [`MAX_GATHERED_PARTITIONS`] partitions an assignment, except one ask larger than
    /// that, which goes alone.
    #[test]
    fn a_batch_is_bounded_but_a_large_ask_still_goes() {
        let big: Vec<(&str, i32, i64)> = (0..MAX_GATHERED_PARTITIONS as i32 + 10)
            .map(|p| ("big", p, 0))
            .collect();
        let mut asks = vec![ask(&big), ask(&[("small", 0, 0)])];
        assert_eq!(topics(&take_batch(&mut asks)), ["big"]);
        assert_eq!(topics(&take_batch(&mut asks)), ["small"]);
        let half = |t: &'static str| -> Vec<(&'static str, i32, i64)> {
            (0..MAX_GATHERED_PARTITIONS as i32 / 2 + 1)
                .map(|p| (t, p, 0))
                .collect()
        };
        let (x, y) = (half("x"), half("y"));
        let mut asks = vec![ask(&x), ask(&y)];
        assert_eq!(topics(&take_batch(&mut asks)), ["x"]);
        assert_eq!(topics(&take_batch(&mut asks)), ["y"]);
    }
}
