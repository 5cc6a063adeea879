//! Enhanced fan-out: the stream consumer a channel registers, and the shard reader that reads
//! with SubscribeToShard instead of GetRecords (docs/kinesis.md, "Read modes").
//!
//! ```text
//!   register_consumer: DescribeStreamConsumer ──missing──► RegisterStreamConsumer ──► wait ACTIVE
//!
//!   EfoShardReader ── task: SubscribeToShard(consumer, shard, cursor) ──► events ──► accept() ──┐
//!        ▲               ▲  the service ends it after ~5 min; re-subscribe from the cursor    │
//!        │               └──────────────────────────────────────────────────────────────────┤
//!        └── next_batch ◄── bounded channel (BUFFERED_EVENTS) ◄── records, lag, end ◄─────────┘
//! ```
//!
//! Positions are those of the polling reader: the task keeps the same [`Cursor`] (the last
//! position it handed to the channel, or the event's `ContinuationSequenceNumber` when that is
//! later) and every subscription starts from it, `AFTER_SEQUENCE_NUMBER` (or
//! `AT_SEQUENCE_NUMBER` with the sub-sequence numbers already delivered dropped), so a
//! re-subscription neither skips nor repeats a record.
//!
//! Back-pressure and memory: the channel holds at most [`BUFFERED_EVENTS`] events. When the
//! worker stops pulling (its buffer is full), the task stops reading the event stream, the HTTP/2
//! stream window fills and the service stops sending. What one shard's reader holds is therefore
//! bounded by `BUFFERED_EVENTS + 2` events (the buffered ones, the one the task is handing over,
//! the one the worker took) plus the HTTP/2 stream window of the client (hyper's default, 2 MiB).
//! An event carries at most what the service reads in one go for a shard (2 MB/s per shard).
//!
//! Errors:
//! - `ResourceInUseException` (another subscription of the same consumer took the shard over: a
//!   worker that lost its lease and does not know it yet, or the new owner while this one is the
//!   stale one) and `LimitExceededException` (more than one SubscribeToShard per second per
//!   shard and consumer) are retried with backoff (1 s doubling to 10 s; 5 s after a takeover).
//! - A stream without any event for [`IDLE_TIMEOUT`] (the service sends one at least every few
//!   seconds) is abandoned and re-subscribed.
//! - Retryable errors are also returned once from [`ShardReader::next_batch`], so the worker
//!   counts and logs them as for polling; the task goes on by itself.
//! - `ResourceNotFoundException` (a shard gone past retention, the consumer deregistered, the
//!   stream deleted) and refused positions fail [`super::KinesisSource::open`], which subscribes
//!   once itself, as polling does. Later, a `ResourceNotFoundException` is retried like the
//!   errors above (reported as [`SourceError::Unavailable`]): one shard must not stop the
//!   worker; other failures end the reader with their error.

use std::collections::VecDeque;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use aws_sdk_kinesis::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_kinesis::types::ConsumerStatus;
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::api::{KinesisApi, StreamRef};
use super::{accept, Cursor, FIRST_BACKOFF, MAX_BACKOFF};
use crate::model::{SequenceNumber, ShardId};
use crate::source::{Lag, ShardReader, SourceError, SourceRecord};

/// Events a shard reader buffers between the event stream and the worker.
pub const BUFFERED_EVENTS: usize = 2;
/// A subscription that sends no event for this long is abandoned and re-subscribed.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(60);
/// Backoff after another subscription took the shard over: the stale side usually learns from
/// its lease manager within this time that the shard moved.
const TAKEOVER_BACKOFF: Duration = Duration::from_secs(5);
/// How long [`register_consumer`] waits for a consumer to become ACTIVE.
pub const CONSUMER_ACTIVE_TIMEOUT: Duration = Duration::from_secs(120);
/// The stream and consumer name of a channel that reads Kinesis with enhanced fan-out; `None`
/// for any other channel. The one place app (registration), `floe channel delete`
/// (deregistration) and `floe channel describe` take them from.
pub fn channel_consumer(
    channel: &crate::config::ChannelConfig,
) -> Option<(&crate::config::KinesisSourceConfig, StreamRef, String)> {
    let crate::config::SourceConfig::Kinesis(kinesis) = &channel.source else {
        return None;
    };
    let name = kinesis.read_mode.consumer_name(&channel.name)?;
    Some((kinesis, StreamRef::from(&kinesis.stream), name))
}

/// Registered consumers AWS allows per stream.
pub const MAX_CONSUMERS_PER_STREAM: usize = 20;

/// A registered stream consumer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Consumer {
    /// `ConsumerName`.
    pub name: String,
    /// `ConsumerARN` (`<stream ARN>/consumer/<name>:<creation epoch seconds>`).
    pub arn: String,
    /// The stream's ARN.
    pub stream_arn: String,
}

/// Why a consumer could not be registered or deregistered.
#[derive(Debug, thiserror::Error)]
pub enum ConsumerError {
    /// Retrying does not help: the stream is missing, has its 20 consumers, the consumer is
    /// being deleted, or access is denied. The message says what to change.
    #[error("{0}")]
    Refused(String),
    /// The service failed or throttled; retry later.
    #[error("{0}")]
    Unavailable(String),
    /// The stream does not exist (a wrong name, or deleted).
    #[error("{0}")]
    MissingStream(String),
}

/// The service's error code (empty when the call did not reach the service) and the message.
fn sdk_error<E: ProvideErrorMetadata + fmt::Debug, R: fmt::Debug>(
    what: &str,
    e: &SdkError<E, R>,
) -> (String, String) {
    let code = match e {
        SdkError::ServiceError(s) => s.err().code().unwrap_or(""),
        _ => "",
    };
    (
        code.to_string(),
        format!("{what}: {}", super::api::error_detail(e)),
    )
}

/// A failed call whose code says nothing specific: refused for authorization and validation
/// errors, unavailable for the rest.
fn other_error(code: &str, message: String) -> ConsumerError {
    match code {
        "AccessDeniedException" | "ValidationException" | "InvalidArgumentException" => {
            ConsumerError::Refused(message)
        }
        _ => ConsumerError::Unavailable(message),
    }
}

/// The ARN of `stream`: as configured, or from DescribeStreamSummary.
///
/// Errors: [`ConsumerError::MissingStream`]; [`ConsumerError::Refused`] for access denied;
/// [`ConsumerError::Unavailable`].
pub async fn stream_arn(
    client: &aws_sdk_kinesis::Client,
    stream: &StreamRef,
) -> Result<String, ConsumerError> {
    let name = match stream {
        StreamRef::Arn(arn) => return Ok(arn.clone()),
        StreamRef::Name(name) => name,
    };
    let out = client
        .describe_stream_summary()
        .stream_name(name)
        .send()
        .await
        .map_err(|e| {
            let (code, message) = sdk_error(&format!("describe stream {name}"), &e);
            match code.as_str() {
                "ResourceNotFoundException" => ConsumerError::MissingStream(message),
                _ => other_error(&code, message),
            }
        })?;
    out.stream_description_summary()
        .map(|d| d.stream_arn().to_string())
        .ok_or_else(|| {
            ConsumerError::Unavailable(format!("describe stream {name}: no stream ARN returned"))
        })
}

/// DescribeStreamConsumer: `None` when the stream has no consumer of that name.
async fn describe(
    client: &aws_sdk_kinesis::Client,
    stream_arn: &str,
    name: &str,
) -> Result<Option<(String, ConsumerStatus)>, ConsumerError> {
    match client
        .describe_stream_consumer()
        .stream_arn(stream_arn)
        .consumer_name(name)
        .send()
        .await
    {
        Ok(out) => Ok(out
            .consumer_description()
            .map(|d| (d.consumer_arn().to_string(), d.consumer_status().clone()))),
        Err(e) => {
            let (code, message) = sdk_error(&format!("describe consumer {name}"), &e);
            match code.as_str() {
                "ResourceNotFoundException" => Ok(None),
                _ => Err(other_error(&code, message)),
            }
        }
    }
}

/// The ARN and status (`ACTIVE`, `CREATING`, `DELETING`) of the stream consumer `name` of
/// `stream` (`floe channel describe`); `None` when it is not registered or the stream is missing.
///
/// Errors: [`ConsumerError`] when Kinesis fails or refuses.
pub async fn describe_consumer(
    client: &aws_sdk_kinesis::Client,
    stream: &StreamRef,
    name: &str,
) -> Result<Option<(String, String)>, ConsumerError> {
    let stream_arn = match stream_arn(client, stream).await {
        Ok(arn) => arn,
        Err(ConsumerError::MissingStream(_)) => return Ok(None),
        Err(e) => return Err(e),
    };
    Ok(describe(client, &stream_arn, name)
        .await?
        .map(|(arn, status)| (arn, status.as_str().to_string())))
}

/// Registers the stream consumer `name` of `stream` if it is not registered yet, and waits up
/// to `wait` for it to be ACTIVE (idempotent: every worker of a channel calls it at start, and
/// all of them end up with the same consumer). `key` is the configuration key that named the
/// consumer, for the errors (`channel[0].source.consumer_name`).
///
/// Errors: [`ConsumerError::Refused`] when the stream has its 20 consumers (AWS's limit) or the
/// consumer is DELETING (after `floe channel delete`, or by another tool), or for access denied;
/// [`ConsumerError::MissingStream`]; [`ConsumerError::Unavailable`] when the service fails or the consumer is not ACTIVE
/// within `wait`.
pub async fn register_consumer(
    client: &aws_sdk_kinesis::Client,
    stream: &StreamRef,
    name: &str,
    key: &str,
    wait: Duration,
) -> Result<Consumer, ConsumerError> {
    let stream_arn = stream_arn(client, stream).await?;
    let deadline = Instant::now() + wait;
    let mut registered = false;
    loop {
        match describe(client, &stream_arn, name).await? {
            Some((arn, ConsumerStatus::Active)) => {
                tracing::info!(stream = %stream, consumer = %name, consumer_arn = %arn, newly_registered = registered, "kinesis stream consumer ACTIVE");
                return Ok(Consumer {
                    name: name.to_string(),
                    arn,
                    stream_arn,
                });
            }
            Some((_, ConsumerStatus::Deleting)) => {
                return Err(ConsumerError::Refused(format!(
                    "{key}: the stream consumer \"{name}\" of {stream_arn} is being deleted (DELETING, e.g. after `floe channel delete`): start again once it is gone, or set {key} to another name"
                )));
            }
            Some(_) => {} // CREATING
            None if !registered => {
                match client
                    .register_stream_consumer()
                    .stream_arn(&stream_arn)
                    .consumer_name(name)
                    .send()
                    .await
                {
                    Ok(_) => {
                        registered = true;
                        tracing::info!(stream = %stream, consumer = %name, "kinesis stream consumer registered; waiting for it to be ACTIVE");
                    }
                    Err(e) => {
                        let (code, message) = sdk_error(&format!("register consumer {name}"), &e);
                        match code.as_str() {
                            // Another worker registered it between the describe and now.
                            "ResourceInUseException" => {}
                            "LimitExceededException" => {
                                let consumers = count_consumers(client, &stream_arn).await;
                                if consumers.is_some_and(|n| n >= MAX_CONSUMERS_PER_STREAM) {
                                    return Err(ConsumerError::Refused(format!(
                                        "{key}: the stream {stream_arn} already has {MAX_CONSUMERS_PER_STREAM} registered consumers, the most AWS allows: deregister one (aws kinesis deregister-stream-consumer) or read this channel with read_mode = \"polling\""
                                    )));
                                }
                                // Throttled (5 registrations per second per account).
                            }
                            "ResourceNotFoundException" => {
                                return Err(ConsumerError::MissingStream(message))
                            }
                            _ => return Err(other_error(&code, message)),
                        }
                    }
                }
            }
            None => {} // registered, not visible yet
        }
        if Instant::now() >= deadline {
            return Err(ConsumerError::Unavailable(format!(
                "{key}: the stream consumer \"{name}\" of {stream_arn} is not ACTIVE after {wait:?}"
            )));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// The number of consumers of the stream, `None` when the listing fails.
async fn count_consumers(client: &aws_sdk_kinesis::Client, stream_arn: &str) -> Option<usize> {
    let mut n = 0;
    let mut token: Option<String> = None;
    loop {
        let mut call = client.list_stream_consumers().stream_arn(stream_arn);
        if let Some(t) = &token {
            call = call.next_token(t);
        }
        let out = call.send().await.ok()?;
        n += out.consumers().len();
        match out.next_token() {
            Some(t) => token = Some(t.to_string()),
            None => return Some(n),
        }
    }
}

/// Deregisters the stream consumer `name` of `stream` (`floe channel delete`). Returns whether
/// there was one; a consumer already gone or DELETING is not an error.
///
/// Errors: [`ConsumerError::Refused`] for access denied; [`ConsumerError::Unavailable`] when
/// the service fails.
pub async fn deregister_consumer(
    client: &aws_sdk_kinesis::Client,
    stream: &StreamRef,
    name: &str,
) -> Result<bool, ConsumerError> {
    let stream_arn = match stream_arn(client, stream).await {
        Ok(arn) => arn,
        // No stream, no consumer.
        Err(ConsumerError::MissingStream(_)) => return Ok(false),
        Err(e) => return Err(e),
    };
    match client
        .deregister_stream_consumer()
        .stream_arn(&stream_arn)
        .consumer_name(name)
        .send()
        .await
    {
        Ok(_) => {
            tracing::info!(stream = %stream, consumer = %name, "kinesis stream consumer deregistered");
            Ok(true)
        }
        Err(e) => {
            let (code, message) = sdk_error(&format!("deregister consumer {name}"), &e);
            match code.as_str() {
                "ResourceNotFoundException" => Ok(false),
                // Already DELETING.
                "ResourceInUseException" => Ok(true),
                _ => Err(other_error(&code, message)),
            }
        }
    }
}

/// What the subscription task hands to the reader.
enum Delivery {
    /// Records of one event (possibly none) and its `MillisBehindLatest`; `end` holds the
    /// child shards when this was the last event of a closed shard.
    Records {
        records: Vec<SourceRecord>,
        millis_behind_latest: u64,
        end: Option<Vec<ShardId>>,
    },
    /// A failure: retryable ones are reported once and the task goes on; others end it.
    Failed(SourceError),
}

/// Reads one shard with SubscribeToShard (see the module docs). Dropping it ends the
/// subscription.
pub struct EfoShardReader {
    shard: ShardId,
    deliveries: mpsc::Receiver<Delivery>,
    task: tokio::task::JoinHandle<()>,
    pending: VecDeque<SourceRecord>,
    ended: bool,
    child_shards: Vec<ShardId>,
    lag_ms: Option<u64>,
    /// The error that ended the task, returned again on every later call.
    failed: Option<String>,
}

impl fmt::Debug for EfoShardReader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EfoShardReader")
            .field("shard", &self.shard)
            .field("pending", &self.pending.len())
            .field("ended", &self.ended)
            .finish()
    }
}

impl Drop for EfoShardReader {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl EfoShardReader {
    /// Starts the subscription task of `shard` for consumer `consumer_arn` from `cursor`, with
    /// `first`, the subscription already opened from `cursor` (see [`super::KinesisSource::open`]),
    /// or `None` to subscribe in the task. `channel` labels the metrics.
    pub(super) fn start(
        api: Arc<dyn KinesisApi>,
        consumer_arn: String,
        shard: ShardId,
        cursor: Cursor,
        channel: String,
        first: Option<Box<dyn super::api::Subscription>>,
    ) -> Self {
        let (tx, rx) = mpsc::channel(BUFFERED_EVENTS);
        let task = tokio::spawn(subscribe_loop(
            SubscriptionTask {
                api,
                consumer_arn,
                shard: shard.clone(),
                cursor,
                channel,
                tx,
            },
            first,
        ));
        EfoShardReader {
            shard,
            deliveries: rx,
            task,
            pending: VecDeque::new(),
            ended: false,
            child_shards: Vec::new(),
            lag_ms: None,
            failed: None,
        }
    }

    /// The child shards named when the shard ended (empty before).
    pub fn child_shards(&self) -> &[ShardId] {
        &self.child_shards
    }

    fn take(&mut self, max_records: usize) -> Vec<SourceRecord> {
        let n = max_records.max(1).min(self.pending.len());
        self.pending.drain(..n).collect()
    }

    /// Takes one delivery; returns an error to hand to the worker.
    fn receive(&mut self, delivery: Option<Delivery>) -> Result<(), SourceError> {
        match delivery {
            Some(Delivery::Records {
                records,
                millis_behind_latest,
                end,
            }) => {
                self.lag_ms = Some(millis_behind_latest);
                self.pending.extend(records);
                if let Some(children) = end {
                    self.ended = true;
                    self.child_shards = children;
                }
                Ok(())
            }
            Some(Delivery::Failed(e)) => {
                if !e.is_retryable() {
                    self.failed = Some(e.to_string());
                }
                Err(e)
            }
            None => {
                let message = format!("shard {}: the subscription task stopped", self.shard);
                self.failed = Some(message.clone());
                Err(SourceError::Fatal { message })
            }
        }
    }
}

#[async_trait]
impl ShardReader for EfoShardReader {
    async fn next_batch(
        &mut self,
        max_records: usize,
        wait: Duration,
    ) -> Result<Vec<SourceRecord>, SourceError> {
        if let Some(message) = &self.failed {
            return Err(SourceError::Fatal {
                message: message.clone(),
            });
        }
        let deadline = Instant::now() + wait;
        loop {
            // Take what is already there without waiting, up to `max_records`.
            while self.pending.len() < max_records && !self.ended {
                match self.deliveries.try_recv() {
                    Ok(d) => self.receive(Some(d))?,
                    Err(mpsc::error::TryRecvError::Empty) => break,
                    Err(mpsc::error::TryRecvError::Disconnected) => {
                        if self.pending.is_empty() {
                            self.receive(None)?;
                        }
                        break;
                    }
                }
            }
            if !self.pending.is_empty() {
                return Ok(self.take(max_records));
            }
            if self.ended {
                return Ok(Vec::new());
            }
            match tokio::time::timeout_at(deadline, self.deliveries.recv()).await {
                Err(_) => return Ok(Vec::new()),
                Ok(d) => self.receive(d)?,
            }
        }
    }

    fn lag(&self) -> Option<Lag> {
        self.lag_ms.map(Lag::Millis)
    }

    fn shard_ended(&self) -> bool {
        self.ended && self.pending.is_empty()
    }
}

struct SubscriptionTask {
    api: Arc<dyn KinesisApi>,
    consumer_arn: String,
    shard: ShardId,
    cursor: Cursor,
    channel: String,
    tx: mpsc::Sender<Delivery>,
}

/// How one subscription ended.
enum Ended {
    /// The reader was dropped: stop.
    Dropped,
    /// The shard ended, or a failure that ends the reader: stop.
    Done,
    /// Subscribe again after this pause.
    Again(Duration),
}

/// The subscription task: subscribes, forwards events, re-subscribes from the cursor.
async fn subscribe_loop(
    mut t: SubscriptionTask,
    mut first: Option<Box<dyn super::api::Subscription>>,
) {
    let mut backoff = FIRST_BACKOFF;
    loop {
        let start = t.cursor.iterator_start();
        let subscribed = match first.take() {
            Some(subscription) => Ok(subscription),
            None => {
                t.api
                    .subscribe_to_shard(&t.consumer_arn, &t.shard, &start)
                    .await
            }
        };
        let pause = match subscribed.map_err(retried_in_the_task) {
            Ok(subscription) => {
                crate::telemetry::record_kinesis_subscription(&t.channel, "started");
                tracing::debug!(shard = %t.shard, start = ?start, "kinesis subscription started");
                match forward(&mut t, subscription, &mut backoff).await {
                    Ended::Again(pause) => pause,
                    Ended::Dropped | Ended::Done => return,
                }
            }
            Err(e) if e.is_retryable() => {
                crate::telemetry::record_kinesis_subscription(&t.channel, "refused");
                // A subscription of this consumer to the shard started less than 5 s ago (this
                // worker's previous one, dropped when the worker reopened its readers): accepted
                // again after those 5 s, at AWS's rate of one call per second.
                let recent = e.to_string().contains("ResourceInUseException");
                let pause = if recent { FIRST_BACKOFF } else { backoff };
                if recent {
                    tracing::debug!(shard = %t.shard, error = %e, retry_in = ?pause, "kinesis SubscribeToShard refused: a subscription started less than 5 s ago; retrying");
                } else {
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                    tracing::warn!(shard = %t.shard, error = %e, retry_in = ?pause, "kinesis SubscribeToShard refused; retrying");
                }
                if t.tx.send(Delivery::Failed(e)).await.is_err() {
                    return;
                }
                pause
            }
            Err(e) => {
                crate::telemetry::record_kinesis_subscription(&t.channel, "failed");
                tracing::error!(shard = %t.shard, error = %e, "kinesis SubscribeToShard failed; the reader stops");
                let _ = t.tx.send(Delivery::Failed(e)).await;
                return;
            }
        };
        if !pause.is_zero() {
            tokio::time::sleep(pause).await;
        }
    }
}

/// What the task retries by itself: retryable errors, and a `ResourceNotFoundException` once the
/// reader has subscribed (the consumer deregistered by someone, a stream deleted: the worker
/// must not stop the channel for it; `open` already reported a shard gone from the stream).
/// The latter is reported to the worker as [`SourceError::Unavailable`].
fn retried_in_the_task(e: SourceError) -> SourceError {
    match e {
        SourceError::NotFound { what } => SourceError::Unavailable {
            message: format!("{what} (is the stream consumer deregistered or the stream deleted? retrying; a restarted worker registers the consumer again)"),
        },
        other => other,
    }
}

/// Forwards the events of one subscription until it ends.
async fn forward(
    t: &mut SubscriptionTask,
    mut subscription: Box<dyn super::api::Subscription>,
    backoff: &mut Duration,
) -> Ended {
    let opened = Instant::now();
    loop {
        let next = tokio::time::timeout(IDLE_TIMEOUT, subscription.next_event()).await;
        let event = match next.map(|r| r.map_err(retried_in_the_task)) {
            Err(_) => {
                crate::telemetry::record_kinesis_subscription(&t.channel, "idle");
                tracing::warn!(shard = %t.shard, idle = ?IDLE_TIMEOUT, "kinesis subscription sent no event; subscribing again");
                return Ended::Again(Duration::ZERO);
            }
            Ok(Ok(Some(event))) => event,
            Ok(Ok(None)) => {
                // The service ends every subscription after about 5 minutes.
                crate::telemetry::record_kinesis_subscription(&t.channel, "ended");
                tracing::debug!(shard = %t.shard, after = ?opened.elapsed(), cursor = ?t.cursor, "kinesis subscription ended; subscribing again from the cursor");
                return Ended::Again(Duration::ZERO);
            }
            Ok(Err(e)) if e.is_retryable() => {
                let taken_over = e.to_string().contains("ResourceInUseException");
                let outcome = if taken_over { "taken_over" } else { "failed" };
                crate::telemetry::record_kinesis_subscription(&t.channel, outcome);
                let pause = if taken_over {
                    TAKEOVER_BACKOFF
                } else {
                    *backoff
                };
                *backoff = (*backoff * 2).min(MAX_BACKOFF);
                if taken_over {
                    tracing::info!(shard = %t.shard, error = %e, retry_in = ?pause, "kinesis subscription taken over by another of the consumer's (this worker may have lost the shard's lease); subscribing again from the cursor");
                } else {
                    tracing::warn!(shard = %t.shard, error = %e, retry_in = ?pause, "kinesis subscription broke; subscribing again from the cursor");
                }
                if t.tx.send(Delivery::Failed(e)).await.is_err() {
                    return Ended::Dropped;
                }
                return Ended::Again(pause);
            }
            Ok(Err(e)) => {
                crate::telemetry::record_kinesis_subscription(&t.channel, "failed");
                tracing::error!(shard = %t.shard, error = %e, "kinesis subscription failed; the reader stops");
                let _ = t.tx.send(Delivery::Failed(e)).await;
                return Ended::Done;
            }
        };
        *backoff = FIRST_BACKOFF;
        let mut records = Vec::new();
        for raw in event.records {
            if let Err(e) = accept(&t.shard, &mut t.cursor, raw, &mut records) {
                let _ = t.tx.send(Delivery::Failed(e)).await;
                return Ended::Done;
            }
        }
        let millis_behind_latest = event.millis_behind_latest.max(0) as u64;
        let end = match event.continuation {
            // Resume exactly after this event, even when it had no record (LATEST, AT_TIMESTAMP,
            // a gap in sequence numbers).
            Some(c) => {
                if let Ok(c) = SequenceNumber::try_new(&c) {
                    let later = match &t.cursor {
                        Cursor::At(s) | Cursor::After(s) => c > *s,
                        Cursor::TrimHorizon | Cursor::Latest | Cursor::AtTimestamp(_) => true,
                    };
                    if later {
                        t.cursor = Cursor::After(c);
                    }
                }
                None
            }
            None => Some(event.child_shards),
        };
        if let Some(children) = &end {
            crate::telemetry::record_kinesis_subscription(&t.channel, "shard_end");
            tracing::info!(shard = %t.shard, children = ?children, "kinesis shard closed: every record received");
        }
        let done = end.is_some();
        if t.tx
            .send(Delivery::Records {
                records,
                millis_behind_latest,
                end,
            })
            .await
            .is_err()
        {
            return Ended::Dropped;
        }
        if done {
            return Ended::Done;
        }
    }
}

#[cfg(test)]
mod tests;
