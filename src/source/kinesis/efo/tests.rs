//! The enhanced fan-out reader against scripted subscriptions (no network; paused time): where
//! each re-subscription starts, shard end, retryable failures and back-pressure.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use super::super::api::{
    ApiError, IteratorStart, RawRecord, RecordsPage, ShardEvent, ShardPage, Subscription,
};
use super::super::kpl;
use super::*;
use crate::model::Position;
use crate::source::StartAt;

fn seq_text(n: u64) -> String {
    format!("4959{n:052}")
}

fn raw(n: u64, data: &[u8]) -> RawRecord {
    RawRecord {
        sequence_number: seq_text(n),
        partition_key: format!("k{n}"),
        data: data.to_vec(),
        arrival_ms: Some(1_700_000_000_000),
    }
}

/// One step of a scripted subscription.
enum Step {
    Event(ShardEvent),
    Fail(SourceError),
}

fn event(records: Vec<RawRecord>, continuation: Option<u64>) -> Step {
    Step::Event(ShardEvent {
        records,
        continuation: continuation.map(seq_text),
        millis_behind_latest: 0,
        child_shards: Vec::new(),
    })
}

/// A subscription playing its steps, then ending cleanly (or, with `endless`, sending empty
/// events forever); `pulled` counts the events taken from it.
struct Scripted {
    steps: VecDeque<Step>,
    endless: bool,
    pulled: Arc<AtomicUsize>,
}

#[async_trait]
impl Subscription for Scripted {
    async fn next_event(&mut self) -> Result<Option<ShardEvent>, SourceError> {
        self.pulled.fetch_add(1, Ordering::SeqCst);
        match self.steps.pop_front() {
            Some(Step::Event(e)) => Ok(Some(e)),
            Some(Step::Fail(e)) => Err(e),
            None if self.endless => Ok(Some(ShardEvent {
                records: vec![raw(999, b"{}")],
                continuation: Some(seq_text(999)),
                ..ShardEvent::default()
            })),
            None => Ok(None),
        }
    }
}

/// Scripted subscriptions, each a list of steps or a refusal of SubscribeToShard.
type Script = Arc<Mutex<VecDeque<Result<Vec<Step>, SourceError>>>>;

/// Answers each SubscribeToShard with the next scripted subscription (or a refusal), and
/// records where each one started.
#[derive(Clone, Default)]
struct FakeFanOut {
    subscriptions: Script,
    starts: Arc<Mutex<Vec<IteratorStart>>>,
    pulled: Arc<AtomicUsize>,
    endless: bool,
}

impl FakeFanOut {
    fn script(self, subscription: Vec<Step>) -> Self {
        self.subscriptions
            .lock()
            .unwrap()
            .push_back(Ok(subscription));
        self
    }

    fn refuse(self, e: SourceError) -> Self {
        self.subscriptions.lock().unwrap().push_back(Err(e));
        self
    }

    fn starts(&self) -> Vec<IteratorStart> {
        self.starts.lock().unwrap().clone()
    }

    fn reader(&self, start: StartAt) -> EfoShardReader {
        let shard = ShardId("shardId-000000000000".into());
        let cursor = Cursor::from_start(&shard, &start).unwrap();
        EfoShardReader::start(
            Arc::new(self.clone()),
            "arn:consumer".into(),
            shard,
            cursor,
            "it".into(),
            None,
        )
    }
}

#[async_trait]
impl KinesisApi for FakeFanOut {
    async fn list_shards(&self, _: Option<&str>) -> Result<ShardPage, ApiError> {
        unreachable!("not used by the reader")
    }
    async fn get_shard_iterator(
        &self,
        _: &ShardId,
        _: &IteratorStart,
    ) -> Result<String, SourceError> {
        unreachable!("not used by the fan-out reader")
    }
    async fn get_records(&self, _: &str, _: i32) -> Result<RecordsPage, ApiError> {
        unreachable!("not used by the fan-out reader")
    }
    async fn subscribe_to_shard(
        &self,
        consumer_arn: &str,
        _: &ShardId,
        start: &IteratorStart,
    ) -> Result<Box<dyn Subscription>, SourceError> {
        assert_eq!(consumer_arn, "arn:consumer");
        self.starts.lock().unwrap().push(start.clone());
        let next = self.subscriptions.lock().unwrap().pop_front();
        match next {
            Some(Ok(steps)) => Ok(Box::new(Scripted {
                steps: steps.into(),
                endless: self.endless,
                pulled: self.pulled.clone(),
            })),
            Some(Err(e)) => Err(e),
            // Nothing more scripted: a subscription that never sends (the test is done).
            None => std::future::pending().await,
        }
    }
}

async fn read(reader: &mut EfoShardReader, n: usize) -> Vec<SourceRecord> {
    let mut out = Vec::new();
    for _ in 0..100 {
        if out.len() >= n || reader.shard_ended() {
            break;
        }
        match reader.next_batch(100, Duration::from_secs(1)).await {
            Ok(batch) => out.extend(batch),
            Err(e) => assert!(e.is_retryable(), "{e}"),
        }
    }
    out
}

fn positions(records: &[SourceRecord]) -> Vec<String> {
    records.iter().map(|r| r.position.to_string()).collect()
}

#[tokio::test(start_paused = true)]
async fn resubscribes_after_the_last_continuation_without_gap_or_repeat() {
    let fake = FakeFanOut::default()
        // Ends after records 1, 2 and an empty event whose continuation is past a gap (5).
        .script(vec![
            event(vec![raw(1, b"a"), raw(2, b"b")], Some(2)),
            event(vec![], Some(5)),
        ])
        // The service ends it mid-stream: the next subscription starts after 6.
        .script(vec![event(vec![raw(6, b"c")], Some(6))])
        .script(vec![event(vec![raw(7, b"d")], Some(7))]);
    let mut reader = fake.reader(StartAt::Earliest);
    let got = read(&mut reader, 4).await;
    assert_eq!(
        positions(&got),
        [1, 2, 6, 7].map(seq_text).to_vec(),
        "every record once, in order"
    );
    assert_eq!(
        fake.starts(),
        vec![
            IteratorStart::TrimHorizon,
            IteratorStart::AfterSequence(seq_text(5)),
            IteratorStart::AfterSequence(seq_text(6)),
            // The last scripted one ended too: the reader is subscribed again after 7.
            IteratorStart::AfterSequence(seq_text(7)),
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn resumes_inside_an_aggregate_dropping_the_user_records_already_returned() {
    let aggregate = kpl::encode([("a", &b"u0"[..]), ("b", b"u1"), ("a", b"u2")]);
    let checkpoint = SequenceNumber::try_new(&seq_text(3))
        .unwrap()
        .with_sub_sequence(1);
    let fake =
        FakeFanOut::default().script(vec![event(vec![raw(3, &aggregate), raw(4, b"x")], Some(4))]);
    let mut reader = fake.reader(StartAt::After(Position::Sequence(checkpoint)));
    let got = read(&mut reader, 2).await;
    assert_eq!(
        positions(&got),
        vec![format!("{}.2", seq_text(3)), seq_text(4)]
    );
    assert_eq!(fake.starts()[0], IteratorStart::AtSequence(seq_text(3)));
}

#[tokio::test(start_paused = true)]
async fn a_closed_shard_ends_after_its_last_records_with_the_children() {
    let fake = FakeFanOut::default().script(vec![
        event(vec![raw(1, b"a")], Some(1)),
        Step::Event(ShardEvent {
            records: vec![raw(2, b"b")],
            continuation: None,
            millis_behind_latest: 0,
            child_shards: vec![
                ShardId("shardId-000000000001".into()),
                ShardId("shardId-000000000002".into()),
            ],
        }),
    ]);
    let mut reader = fake.reader(StartAt::Earliest);
    let first = reader.next_batch(1, Duration::from_secs(1)).await.unwrap();
    assert_eq!(positions(&first), vec![seq_text(1)]);
    assert!(!reader.shard_ended());
    let rest = read(&mut reader, 1).await;
    assert_eq!(positions(&rest), vec![seq_text(2)]);
    assert!(reader.shard_ended(), "ended once every record was returned");
    assert_eq!(reader.child_shards().len(), 2);
    assert!(reader
        .next_batch(10, Duration::from_secs(1))
        .await
        .unwrap()
        .is_empty());
    assert_eq!(fake.starts().len(), 1, "no subscription after the end");
}

#[tokio::test(start_paused = true)]
async fn a_takeover_and_a_refusal_are_reported_once_and_retried() {
    let fake = FakeFanOut::default()
        .script(vec![
            event(vec![raw(1, b"a")], Some(1)),
            Step::Fail(SourceError::Unavailable {
                message: "ResourceInUseException: taken over".into(),
            }),
        ])
        .refuse(SourceError::Throttled {
            message: "LimitExceededException".into(),
        })
        .script(vec![event(vec![raw(2, b"b")], Some(2))]);
    let mut reader = fake.reader(StartAt::Earliest);
    let mut got = Vec::new();
    let mut errors = 0;
    for _ in 0..50 {
        match reader.next_batch(10, Duration::from_secs(1)).await {
            Ok(batch) => got.extend(batch),
            Err(e) => {
                assert!(e.is_retryable(), "{e}");
                errors += 1;
            }
        }
        if got.len() == 2 {
            break;
        }
    }
    assert_eq!(positions(&got), vec![seq_text(1), seq_text(2)]);
    assert_eq!(errors, 2, "the takeover and the refusal, once each");
    assert_eq!(
        fake.starts(),
        vec![
            IteratorStart::TrimHorizon,
            IteratorStart::AfterSequence(seq_text(1)),
            IteratorStart::AfterSequence(seq_text(1)),
            IteratorStart::AfterSequence(seq_text(2)),
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn a_fatal_failure_ends_the_reader_with_the_error() {
    let fake = FakeFanOut::default().refuse(SourceError::Fatal {
        message: "AccessDeniedException".into(),
    });
    let mut reader = fake.reader(StartAt::Earliest);
    let e = reader
        .next_batch(10, Duration::from_secs(1))
        .await
        .unwrap_err();
    assert!(matches!(e, SourceError::Fatal { .. }), "{e}");
    let again = reader
        .next_batch(10, Duration::from_secs(1))
        .await
        .unwrap_err();
    assert!(!again.is_retryable(), "{again}");
}

#[tokio::test(start_paused = true)]
async fn a_reader_that_is_not_pulled_stops_taking_events() {
    let fake = FakeFanOut {
        endless: true,
        ..FakeFanOut::default()
    }
    .script(vec![]);
    let mut reader = fake.reader(StartAt::Earliest);
    tokio::time::sleep(Duration::from_secs(30)).await;
    let pulled = fake.pulled.load(Ordering::SeqCst);
    assert!(
        pulled <= BUFFERED_EVENTS + 1,
        "{pulled} events taken from the stream while the worker pulled nothing"
    );
    // Pulling frees room and events flow again.
    let _ = reader.next_batch(1, Duration::from_secs(1)).await.unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(fake.pulled.load(Ordering::SeqCst) > pulled);
}

fn fan_out_source(fake: &FakeFanOut) -> super::super::KinesisSource {
    super::super::KinesisSource::with_api(
        Arc::new(fake.clone()),
        "s",
        super::super::ReaderSettings {
            max_records_per_call: 10_000,
            poll_interval: Duration::from_secs(1),
        },
    )
    .with_fan_out("arn:consumer", "it")
}

#[tokio::test(start_paused = true)]
async fn open_fails_for_a_missing_shard_as_polling_does_and_retries_a_refused_subscription() {
    use crate::source::Source;
    let shard = ShardId("shardId-000000000000".into());
    // A shard gone from the stream: `open` fails, so the worker can tell it left the stream.
    let gone = FakeFanOut::default().refuse(SourceError::NotFound {
        what: "shard".into(),
    });
    let Err(e) = fan_out_source(&gone).open(&shard, StartAt::Earliest).await else {
        panic!("opened a missing shard");
    };
    assert!(matches!(e, SourceError::NotFound { .. }), "{e}");
    // A refused subscription (another one started less than 5 s ago): opened, retried.
    let busy = FakeFanOut::default()
        .refuse(SourceError::Unavailable {
            message: "ResourceInUseException".into(),
        })
        .script(vec![event(vec![raw(1, b"a")], Some(1))]);
    let mut reader = fan_out_source(&busy)
        .open(&shard, StartAt::Earliest)
        .await
        .unwrap();
    let mut got = Vec::new();
    for _ in 0..20 {
        if let Ok(batch) = reader.next_batch(10, Duration::from_secs(1)).await {
            got.extend(batch);
        }
        if !got.is_empty() {
            break;
        }
    }
    assert_eq!(positions(&got), vec![seq_text(1)]);
    assert_eq!(
        busy.starts(),
        vec![IteratorStart::TrimHorizon; 2]
            .into_iter()
            .chain([IteratorStart::AfterSequence(seq_text(1))])
            .collect::<Vec<_>>()
    );
}

#[tokio::test(start_paused = true)]
async fn a_not_found_after_subscribing_is_retried_not_fatal() {
    let not_found = || SourceError::NotFound {
        what: "ResourceNotFoundException".into(),
    };
    let fake = FakeFanOut::default()
        .script(vec![
            event(vec![raw(1, b"a")], Some(1)),
            Step::Fail(not_found()),
        ])
        .refuse(not_found())
        .script(vec![event(vec![raw(2, b"b")], Some(2))]);
    let mut reader = fake.reader(StartAt::Earliest);
    let mut got = Vec::new();
    for _ in 0..50 {
        match reader.next_batch(10, Duration::from_secs(1)).await {
            Ok(batch) => got.extend(batch),
            Err(e) => assert!(
                e.is_retryable(),
                "the worker must not stop the channel: {e}"
            ),
        }
        if got.len() == 2 {
            break;
        }
    }
    assert_eq!(positions(&got), vec![seq_text(1), seq_text(2)]);
}
