//! The raw Kinesis Data Streams calls of the Kinesis source, one function per remote call, each
//! mapping the SDK's errors to [`SourceError`] once, here at the edge. The reader logic in the
//! parent module sees only [`KinesisApi`], so it is tested without the network (a scripted fake in
//! its tests).

use async_trait::async_trait;
use aws_sdk_kinesis::config::http::HttpResponse;
use aws_sdk_kinesis::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_kinesis::primitives::DateTime;
use aws_sdk_kinesis::types::ShardIteratorType;

use crate::model::ShardId;
use crate::source::{ShardInfo, SourceError};

/// The stream a source reads: by name or by ARN (the ARN also names the account, for a stream of
/// another account).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StreamRef {
    /// The stream's name, in the client's account and region.
    Name(String),
    /// The stream's ARN.
    Arn(String),
}

impl From<&crate::config::KinesisStream> for StreamRef {
    fn from(stream: &crate::config::KinesisStream) -> Self {
        match stream {
            crate::config::KinesisStream::Name(name) => StreamRef::Name(name.clone()),
            crate::config::KinesisStream::Arn(arn) => StreamRef::Arn(arn.clone()),
        }
    }
}

impl std::fmt::Display for StreamRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StreamRef::Name(s) | StreamRef::Arn(s) => f.write_str(s),
        }
    }
}

/// Where a shard iterator starts (GetShardIterator's `ShardIteratorType` and its argument).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IteratorStart {
    /// `TRIM_HORIZON`: the oldest record retained.
    TrimHorizon,
    /// `LATEST`: after the newest record.
    Latest,
    /// `AT_TIMESTAMP`: the first record that arrived at or after this instant (ms since the epoch).
    AtTimestamp(i64),
    /// `AT_SEQUENCE_NUMBER`: the record with this sequence number (decimal digits, no sub-sequence).
    AtSequence(String),
    /// `AFTER_SEQUENCE_NUMBER`: the record after this sequence number.
    AfterSequence(String),
}

/// One page of ListShards.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ShardPage {
    /// The shards of this page, with their parents.
    pub shards: Vec<ShardInfo>,
    /// The token of the next page, `None` on the last one.
    pub next_token: Option<String>,
}

/// One Kinesis record as GetRecords returns it (before KPL de-aggregation).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawRecord {
    /// Sequence number, decimal digits.
    pub sequence_number: String,
    /// Partition key.
    pub partition_key: String,
    /// The record's bytes.
    pub data: Vec<u8>,
    /// ApproximateArrivalTimestamp in ms since the epoch, if the service gave one.
    pub arrival_ms: Option<i64>,
}

/// One GetRecords response.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecordsPage {
    /// Records, in sequence-number order.
    pub records: Vec<RawRecord>,
    /// The iterator to continue with; `None` when the shard is closed and every record was
    /// returned (the response then lists the child shards).
    pub next_iterator: Option<String>,
    /// MillisBehindLatest.
    pub millis_behind_latest: Option<i64>,
    /// Child shards, listed when `next_iterator` is `None`.
    pub child_shards: Vec<ShardId>,
}

/// One `SubscribeToShardEvent` of an enhanced fan-out subscription (before KPL de-aggregation).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ShardEvent {
    /// Records, in sequence-number order; often empty (the service sends events while idle).
    pub records: Vec<RawRecord>,
    /// `ContinuationSequenceNumber`: `AFTER_SEQUENCE_NUMBER` of it resumes exactly after this
    /// event. `None` (absent or empty in the event) when the shard is closed and every record
    /// was sent: the event then lists the child shards.
    pub continuation: Option<String>,
    /// `MillisBehindLatest`.
    pub millis_behind_latest: i64,
    /// Child shards, listed in the last event of a closed shard.
    pub child_shards: Vec<ShardId>,
}

/// An open SubscribeToShard event stream (one HTTP/2 response; the service ends it after about
/// 5 minutes).
#[async_trait]
pub trait Subscription: Send {
    /// The next event; `Ok(None)` once the service ended the stream cleanly (re-subscribe from
    /// the last continuation). Errors: `ResourceInUseException` (another subscription of the
    /// same consumer took the shard over) and transport failures are retryable
    /// ([`SourceError::Unavailable`]); `ResourceNotFoundException` (consumer deregistered, stream
    /// deleted) is [`SourceError::NotFound`].
    async fn next_event(&mut self) -> Result<Option<ShardEvent>, SourceError>;
}

/// An error of a Kinesis call: an expired token the caller renews, or a [`SourceError`].
#[derive(Debug)]
pub enum ApiError {
    /// ExpiredIteratorException (GetRecords) or ExpiredNextTokenException (ListShards): get a
    /// new iterator or restart the listing.
    Expired,
    /// Anything else, mapped for the caller's decision.
    Source(SourceError),
}

impl From<SourceError> for ApiError {
    fn from(e: SourceError) -> Self {
        ApiError::Source(e)
    }
}

/// The remote calls the Kinesis source makes. Implemented by [`SdkKinesis`]; a fake in tests.
#[async_trait]
pub trait KinesisApi: Send + Sync {
    /// ListShards: the first page (`next_token = None`), or the page `next_token` names.
    async fn list_shards(&self, next_token: Option<&str>) -> Result<ShardPage, ApiError>;

    /// GetShardIterator for `shard`.
    async fn get_shard_iterator(
        &self,
        shard: &ShardId,
        start: &IteratorStart,
    ) -> Result<String, SourceError>;

    /// GetRecords: at most `limit` records from `iterator`.
    async fn get_records(&self, iterator: &str, limit: i32) -> Result<RecordsPage, ApiError>;

    /// SubscribeToShard as the registered consumer `consumer_arn`, from `start` (the same
    /// starting positions as GetShardIterator). Returns once the service accepted the
    /// subscription (its `initial-response`). Errors as [`KinesisApi::get_shard_iterator`], and
    /// `ResourceInUseException` (a subscription of this consumer to the shard started less than
    /// 5 s ago) and `LimitExceededException` as retryable. The default refuses: a source without
    /// enhanced fan-out.
    async fn subscribe_to_shard(
        &self,
        consumer_arn: &str,
        shard: &ShardId,
        start: &IteratorStart,
    ) -> Result<Box<dyn Subscription>, SourceError> {
        let _ = (consumer_arn, start);
        Err(SourceError::Fatal {
            message: format!("shard {shard}: this Kinesis API has no enhanced fan-out"),
        })
    }
}

/// [`KinesisApi`] over the AWS SDK client, for one stream.
#[derive(Debug, Clone)]
pub struct SdkKinesis {
    client: aws_sdk_kinesis::Client,
    stream: StreamRef,
}

impl SdkKinesis {
    /// Calls on `stream` through `client`.
    pub fn new(client: aws_sdk_kinesis::Client, stream: StreamRef) -> Self {
        SdkKinesis { client, stream }
    }
}

/// Page size of ListShards (the service allows up to 10 000).
const LIST_SHARDS_PAGE: i32 = 1000;

#[async_trait]
impl KinesisApi for SdkKinesis {
    async fn list_shards(&self, next_token: Option<&str>) -> Result<ShardPage, ApiError> {
        let mut call = self.client.list_shards();
        call = match next_token {
            // A NextToken names the stream itself; the service refuses it with StreamName.
            Some(token) => call.next_token(token),
            None => match &self.stream {
                StreamRef::Name(name) => call.stream_name(name),
                StreamRef::Arn(arn) => call.stream_arn(arn),
            }
            .max_results(LIST_SHARDS_PAGE),
        };
        let out = call.send().await.map_err(|e| match classify(&e) {
            Class::Expired => ApiError::Expired,
            class => ApiError::Source(
                class.into_error(&e, || format!("list shards of stream {}", self.stream)),
            ),
        })?;
        let shards = out
            .shards()
            .iter()
            .map(|s| ShardInfo {
                id: ShardId(s.shard_id().to_string()),
                parents: [s.parent_shard_id(), s.adjacent_parent_shard_id()]
                    .into_iter()
                    .flatten()
                    .map(|p| ShardId(p.to_string()))
                    .collect(),
            })
            .collect();
        Ok(ShardPage {
            shards,
            next_token: out.next_token().map(str::to_string),
        })
    }

    async fn get_shard_iterator(
        &self,
        shard: &ShardId,
        start: &IteratorStart,
    ) -> Result<String, SourceError> {
        let mut call = self.client.get_shard_iterator().shard_id(shard.as_str());
        call = match &self.stream {
            StreamRef::Name(name) => call.stream_name(name),
            StreamRef::Arn(arn) => call.stream_arn(arn),
        };
        call = match start {
            IteratorStart::TrimHorizon => call.shard_iterator_type(ShardIteratorType::TrimHorizon),
            IteratorStart::Latest => call.shard_iterator_type(ShardIteratorType::Latest),
            IteratorStart::AtTimestamp(ms) => call
                .shard_iterator_type(ShardIteratorType::AtTimestamp)
                .timestamp(DateTime::from_millis(*ms)),
            IteratorStart::AtSequence(seq) => call
                .shard_iterator_type(ShardIteratorType::AtSequenceNumber)
                .starting_sequence_number(seq),
            IteratorStart::AfterSequence(seq) => call
                .shard_iterator_type(ShardIteratorType::AfterSequenceNumber)
                .starting_sequence_number(seq),
        };
        let out = call.send().await.map_err(|e| {
            start_error(&e, shard, start, || {
                format!(
                    "get shard iterator for shard {shard} of stream {}",
                    self.stream
                )
            })
        })?;
        out.shard_iterator()
            .map(str::to_string)
            .ok_or_else(|| SourceError::Unavailable {
                message: format!(
                    "get shard iterator for shard {shard}: no iterator in the response"
                ),
            })
    }

    async fn get_records(&self, iterator: &str, limit: i32) -> Result<RecordsPage, ApiError> {
        let mut call = self
            .client
            .get_records()
            .shard_iterator(iterator)
            .limit(limit);
        if let StreamRef::Arn(arn) = &self.stream {
            call = call.stream_arn(arn);
        }
        let out = call.send().await.map_err(|e| match classify(&e) {
            Class::Expired => ApiError::Expired,
            class => ApiError::Source(
                class.into_error(&e, || format!("get records from stream {}", self.stream)),
            ),
        })?;
        let records = out.records().iter().map(raw_record).collect();
        Ok(RecordsPage {
            records,
            next_iterator: out.next_shard_iterator().map(str::to_string),
            millis_behind_latest: out.millis_behind_latest(),
            child_shards: out
                .child_shards()
                .iter()
                .map(|c| ShardId(c.shard_id().to_string()))
                .collect(),
        })
    }

    async fn subscribe_to_shard(
        &self,
        consumer_arn: &str,
        shard: &ShardId,
        start: &IteratorStart,
    ) -> Result<Box<dyn Subscription>, SourceError> {
        let out = self
            .client
            .subscribe_to_shard()
            .consumer_arn(consumer_arn)
            .shard_id(shard.as_str())
            .starting_position(starting_position(start))
            .customize()
            // The SDK's stalled-stream protection would also count the time the reader holds
            // the stream on purpose (back-pressure); the reader bounds idle streams itself.
            .config_override(
                aws_sdk_kinesis::config::Config::builder().stalled_stream_protection(
                    aws_sdk_kinesis::config::StalledStreamProtectionConfig::disabled(),
                ),
            )
            .send()
            .await
            .map_err(|e| {
                start_error(&e, shard, start, || {
                    format!(
                        "subscribe to shard {shard} of stream {} as {consumer_arn}",
                        self.stream
                    )
                })
            })?;
        Ok(Box::new(SdkSubscription {
            shard: shard.clone(),
            events: out.event_stream,
        }))
    }
}

/// The error of a call that starts reading `shard` at `start` (GetShardIterator,
/// SubscribeToShard).
fn start_error<E: ProvideErrorMetadata + std::fmt::Debug>(
    e: &SdkError<E, HttpResponse>,
    shard: &ShardId,
    start: &IteratorStart,
    what: impl FnOnce() -> String,
) -> SourceError {
    match classify(e) {
        // A sequence number the shard refuses (not from this shard, malformed): a bad
        // checkpoint, not something a retry fixes.
        Class::InvalidArgument
            if matches!(
                start,
                IteratorStart::AtSequence(_) | IteratorStart::AfterSequence(_)
            ) =>
        {
            SourceError::InvalidPosition {
                shard: shard.clone(),
                message: format!(
                    "{}: start {start:?}: {}",
                    what(),
                    e.message().unwrap_or("invalid argument")
                ),
            }
        }
        class => class.into_error(e, what),
    }
}

/// SubscribeToShard's `StartingPosition` for `start`.
fn starting_position(start: &IteratorStart) -> aws_sdk_kinesis::types::StartingPosition {
    let builder = aws_sdk_kinesis::types::StartingPosition::builder();
    let builder = match start {
        IteratorStart::TrimHorizon => builder.r#type(ShardIteratorType::TrimHorizon),
        IteratorStart::Latest => builder.r#type(ShardIteratorType::Latest),
        IteratorStart::AtTimestamp(ms) => builder
            .r#type(ShardIteratorType::AtTimestamp)
            .timestamp(DateTime::from_millis(*ms)),
        IteratorStart::AtSequence(seq) => builder
            .r#type(ShardIteratorType::AtSequenceNumber)
            .sequence_number(seq),
        IteratorStart::AfterSequence(seq) => builder
            .r#type(ShardIteratorType::AfterSequenceNumber)
            .sequence_number(seq),
    };
    builder.build().expect("the type is always set")
}

/// A SubscribeToShard event stream of the SDK.
struct SdkSubscription {
    shard: ShardId,
    events: aws_sdk_kinesis::primitives::event_stream::EventReceiver<
        aws_sdk_kinesis::types::SubscribeToShardEventStream,
        aws_sdk_kinesis::types::error::SubscribeToShardEventStreamError,
    >,
}

#[async_trait]
impl Subscription for SdkSubscription {
    async fn next_event(&mut self) -> Result<Option<ShardEvent>, SourceError> {
        use aws_sdk_kinesis::types::SubscribeToShardEventStream as Stream;
        loop {
            let event = match self.events.recv().await {
                Ok(Some(Stream::SubscribeToShardEvent(event))) => event,
                // A newer kind of event this SDK does not know: nothing to deliver.
                Ok(Some(_)) => continue,
                Ok(None) => return Ok(None),
                Err(e) => {
                    let what = format!("subscription to shard {}", self.shard);
                    return Err(match &e {
                        SdkError::ServiceError(s) => {
                            use aws_sdk_kinesis::types::error::SubscribeToShardEventStreamError as E;
                            // Exceptions of an event stream carry their type in the variant; the
                            // error metadata's code is not set for them.
                            let (code, class) = match s.err() {
                                E::ResourceNotFoundException(_) => {
                                    ("ResourceNotFoundException", Class::NotFound)
                                }
                                E::ResourceInUseException(_) => {
                                    ("ResourceInUseException", Class::Unavailable)
                                }
                                E::InternalFailureException(_) => {
                                    ("InternalFailureException", Class::Unavailable)
                                }
                                E::KmsThrottlingException(_) => {
                                    ("KMSThrottlingException", Class::Throttled)
                                }
                                E::KmsDisabledException(_) => {
                                    ("KMSDisabledException", Class::Fatal)
                                }
                                E::KmsInvalidStateException(_) => {
                                    ("KMSInvalidStateException", Class::Fatal)
                                }
                                E::KmsAccessDeniedException(_) => {
                                    ("KMSAccessDeniedException", Class::Fatal)
                                }
                                E::KmsNotFoundException(_) => {
                                    ("KMSNotFoundException", Class::Fatal)
                                }
                                E::KmsOptInRequired(_) => ("KMSOptInRequired", Class::Fatal),
                                // An exception this SDK does not model: the stream is over; a
                                // new subscription may work.
                                other => (
                                    other.code().unwrap_or("unknown exception"),
                                    Class::Unavailable,
                                ),
                            };
                            class.source_error(format!(
                                "{what}: {code}: {}",
                                s.err().message().unwrap_or("")
                            ))
                        }
                        // The connection broke or the stream was reset: subscribe again.
                        other => SourceError::Unavailable {
                            message: format!("{what}: {other:?}"),
                        },
                    });
                }
            };
            let continuation = match event.continuation_sequence_number() {
                "" => None,
                c => Some(c.to_string()),
            };
            return Ok(Some(ShardEvent {
                records: event.records().iter().map(raw_record).collect(),
                continuation,
                millis_behind_latest: event.millis_behind_latest(),
                child_shards: event
                    .child_shards()
                    .iter()
                    .map(|c| ShardId(c.shard_id().to_string()))
                    .collect(),
            }));
        }
    }
}

fn raw_record(r: &aws_sdk_kinesis::types::Record) -> RawRecord {
    RawRecord {
        sequence_number: r.sequence_number().to_string(),
        partition_key: r.partition_key().unwrap_or_default().to_string(),
        data: r.data().as_ref().to_vec(),
        arrival_ms: r
            .approximate_arrival_timestamp()
            .and_then(|t| t.to_millis().ok()),
    }
}

/// What a failed call means for the caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Class {
    Expired,
    NotFound,
    Throttled,
    Unavailable,
    InvalidArgument,
    Fatal,
}

impl Class {
    fn into_error<E: ProvideErrorMetadata + std::fmt::Debug>(
        self,
        e: &SdkError<E, HttpResponse>,
        what: impl FnOnce() -> String,
    ) -> SourceError {
        self.source_error(format!("{}: {}", what(), error_detail(e)))
    }

    /// The [`SourceError`] of this class with `message`.
    fn source_error(self, message: String) -> SourceError {
        match self {
            Class::NotFound => SourceError::NotFound { what: message },
            Class::Throttled => SourceError::Throttled { message },
            Class::Unavailable | Class::Expired => SourceError::Unavailable { message },
            Class::InvalidArgument | Class::Fatal => SourceError::Fatal { message },
        }
    }
}

/// An SDK error as `code: message` for a service error, its debug form otherwise (timeouts,
/// connection failures): the text every Kinesis error message of floe ends with.
pub(super) fn error_detail<E: ProvideErrorMetadata + std::fmt::Debug, R: std::fmt::Debug>(
    e: &SdkError<E, R>,
) -> String {
    match e {
        SdkError::ServiceError(s) => format!(
            "{}: {}",
            s.err().code().unwrap_or("unknown error"),
            s.err().message().unwrap_or("")
        ),
        other => format!("{other:?}"),
    }
}

/// Classifies an SDK error by the service's error code and HTTP status: every Kinesis operation
/// uses the same codes for the same conditions.
fn classify<E: ProvideErrorMetadata>(e: &SdkError<E, HttpResponse>) -> Class {
    match e {
        SdkError::ServiceError(s) => {
            let code = s.err().code().unwrap_or("");
            match code {
                "ExpiredIteratorException" | "ExpiredNextTokenException" => Class::Expired,
                "ResourceNotFoundException" => Class::NotFound,
                "ProvisionedThroughputExceededException"
                | "LimitExceededException"
                | "KMSThrottlingException"
                | "ThrottlingException" => Class::Throttled,
                // A stream being created or updated, a service-side failure.
                "ResourceInUseException" | "InternalFailureException" | "ServiceUnavailable" => {
                    Class::Unavailable
                }
                "InvalidArgumentException" | "ValidationException" => Class::InvalidArgument,
                _ if s.raw().status().as_u16() >= 500 || s.raw().status().as_u16() == 429 => {
                    Class::Unavailable
                }
                _ => Class::Fatal,
            }
        }
        // Timeouts, connection failures, unparsable responses: the call may work again.
        SdkError::TimeoutError(_) | SdkError::DispatchFailure(_) | SdkError::ResponseError(_) => {
            Class::Unavailable
        }
        // The request could not even be built: a bug or a bad argument.
        _ => Class::Fatal,
    }
}

#[cfg(test)]
mod tests {
    //! The error mapping at the edge, through the real SDK against a canned HTTP server.

    use std::time::Duration;

    use aws_sdk_kinesis::config::retry::RetryConfig;
    use aws_sdk_kinesis::config::{BehaviorVersion, Credentials, Region};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    use super::*;

    /// An HTTP server on loopback answering every request with `status` and the JSON error
    /// `{"__type": code, "message": "..."}`. Returns its endpoint URL.
    async fn canned(status: u16, code: &str) -> String {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let body = format!(r#"{{"__type":"{code}","message":"canned {code}"}}"#);
        tokio::spawn(async move {
            loop {
                let Ok((mut conn, _)) = listener.accept().await else {
                    return;
                };
                let body = body.clone();
                tokio::spawn(async move {
                    // Read the request head and its body (Content-Length), then answer.
                    let mut request = Vec::new();
                    let mut buf = [0u8; 4096];
                    loop {
                        let n = conn.read(&mut buf).await.unwrap_or(0);
                        if n == 0 {
                            return;
                        }
                        request.extend_from_slice(&buf[..n]);
                        let text = String::from_utf8_lossy(&request).to_string();
                        if let Some(head_end) = text.find("\r\n\r\n") {
                            let length = text[..head_end]
                                .lines()
                                .find_map(|l| {
                                    let (k, v) = l.split_once(':')?;
                                    k.eq_ignore_ascii_case("content-length")
                                        .then(|| v.trim().parse::<usize>().ok())?
                                })
                                .unwrap_or(0);
                            if request.len() >= head_end + 4 + length {
                                break;
                            }
                        }
                    }
                    let response = format!(
                        "HTTP/1.1 {status} X\r\ncontent-type: application/x-amz-json-1.1\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                        body.len()
                    );
                    let _ = conn.write_all(response.as_bytes()).await;
                });
            }
        });
        url
    }

    fn api(endpoint: &str) -> SdkKinesis {
        let config = aws_sdk_kinesis::Config::builder()
            .behavior_version(BehaviorVersion::latest())
            .region(Region::new("us-east-1"))
            .credentials_provider(Credentials::new("test", "test", None, None, "test"))
            .endpoint_url(endpoint)
            .retry_config(RetryConfig::disabled())
            .timeout_config(
                aws_sdk_kinesis::config::timeout::TimeoutConfig::builder()
                    .operation_attempt_timeout(Duration::from_secs(5))
                    .build(),
            )
            .build();
        SdkKinesis::new(
            aws_sdk_kinesis::Client::from_conf(config),
            StreamRef::Name("s".into()),
        )
    }

    fn shard() -> ShardId {
        ShardId("shardId-000000000000".into())
    }

    #[tokio::test]
    async fn get_records_errors_map_to_what_the_reader_does_next() {
        type Expect = fn(&ApiError) -> bool;
        let cases: [(u16, &str, Expect); 5] = [
            (400, "ExpiredIteratorException", |e| {
                matches!(e, ApiError::Expired)
            }),
            (400, "ProvisionedThroughputExceededException", |e| {
                matches!(e, ApiError::Source(SourceError::Throttled { .. }))
            }),
            (400, "KMSThrottlingException", |e| {
                matches!(e, ApiError::Source(SourceError::Throttled { .. }))
            }),
            (500, "InternalFailure", |e| {
                matches!(e, ApiError::Source(SourceError::Unavailable { .. }))
            }),
            (400, "AccessDeniedException", |e| {
                matches!(e, ApiError::Source(SourceError::Fatal { .. }))
            }),
        ];
        for (status, code, expected) in cases {
            let endpoint = canned(status, code).await;
            let err = api(&endpoint).get_records("it", 10).await.unwrap_err();
            assert!(expected(&err), "{status} {code}: {err:?}");
        }
    }

    #[tokio::test]
    async fn get_shard_iterator_errors_name_missing_shards_and_refused_checkpoints() {
        let endpoint = canned(400, "ResourceNotFoundException").await;
        let err = api(&endpoint)
            .get_shard_iterator(&shard(), &IteratorStart::TrimHorizon)
            .await
            .unwrap_err();
        assert!(matches!(err, SourceError::NotFound { .. }), "{err}");

        let endpoint = canned(400, "InvalidArgumentException").await;
        let after = IteratorStart::AfterSequence("4959".into());
        let err = api(&endpoint)
            .get_shard_iterator(&shard(), &after)
            .await
            .unwrap_err();
        assert!(matches!(err, SourceError::InvalidPosition { .. }), "{err}");
    }

    #[tokio::test]
    async fn list_shards_errors_and_an_unreachable_service() {
        let endpoint = canned(400, "LimitExceededException").await;
        let err = api(&endpoint).list_shards(None).await.unwrap_err();
        assert!(
            matches!(err, ApiError::Source(SourceError::Throttled { .. })),
            "{err:?}"
        );
        let endpoint = canned(400, "ExpiredNextTokenException").await;
        let err = api(&endpoint).list_shards(Some("t")).await.unwrap_err();
        assert!(matches!(err, ApiError::Expired), "{err:?}");
        let endpoint = canned(400, "ResourceInUseException").await;
        let err = api(&endpoint).list_shards(None).await.unwrap_err();
        assert!(
            matches!(err, ApiError::Source(SourceError::Unavailable { .. })),
            "{err:?}"
        );

        // Nothing listens on port 1: a dispatch failure, retryable.
        let err = api("http://127.0.0.1:1")
            .list_shards(None)
            .await
            .unwrap_err();
        assert!(
            matches!(err, ApiError::Source(SourceError::Unavailable { .. })),
            "{err:?}"
        );
    }
}
