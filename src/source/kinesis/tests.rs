//! Reader logic against a scripted fake of the Kinesis API (no network; paused time).

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};

use super::api::{ApiError, IteratorStart, KinesisApi, RawRecord, RecordsPage, ShardPage};
use super::*;

/// A 56-digit sequence number, as Kinesis gives them.
fn seq_text(n: u64) -> String {
    format!("4959{n:052}")
}

fn seq(n: u64) -> SequenceNumber {
    SequenceNumber::try_new(&seq_text(n)).unwrap()
}

#[derive(Default)]
struct FakeShard {
    parents: Vec<ShardId>,
    records: Vec<RawRecord>,
    closed: bool,
    children: Vec<ShardId>,
}

/// What the next GetRecords call answers instead of records.
#[derive(Debug, Clone, Copy)]
enum Injected {
    Expired,
    Throttled,
    Unavailable,
}

#[derive(Default)]
struct FakeState {
    shards: BTreeMap<ShardId, FakeShard>,
    page_size: usize,
    inject_get_records: VecDeque<Injected>,
    throttle_iterators: usize,
    iterator_starts: Vec<IteratorStart>,
    get_records_at: Vec<Instant>,
}

#[derive(Clone, Default)]
struct FakeKinesis(Arc<Mutex<FakeState>>);

impl FakeKinesis {
    fn state(&self) -> std::sync::MutexGuard<'_, FakeState> {
        self.0.lock().unwrap()
    }

    fn add_shard(&self, id: &str, parents: &[&str]) {
        self.state().shards.insert(
            ShardId(id.into()),
            FakeShard {
                parents: parents.iter().map(|p| ShardId(p.to_string())).collect(),
                ..FakeShard::default()
            },
        );
    }

    fn put(&self, shard: &str, seq: &str, key: &str, data: &[u8], arrival_ms: i64) {
        self.state()
            .shards
            .get_mut(&ShardId(shard.into()))
            .unwrap()
            .records
            .push(RawRecord {
                sequence_number: seq.to_string(),
                partition_key: key.to_string(),
                data: data.to_vec(),
                arrival_ms: Some(arrival_ms),
            });
    }

    fn close(&self, shard: &str, children: &[&str]) {
        let mut state = self.state();
        let s = state.shards.get_mut(&ShardId(shard.into())).unwrap();
        s.closed = true;
        s.children = children.iter().map(|c| ShardId(c.to_string())).collect();
    }

    fn inject(&self, what: Injected) {
        self.state().inject_get_records.push_back(what);
    }

    fn source(&self, max_records_per_call: i32) -> KinesisSource {
        KinesisSource::with_api(
            Arc::new(self.clone()),
            "s",
            ReaderSettings {
                max_records_per_call,
                poll_interval: Duration::from_secs(1),
            },
        )
    }
}

fn sn(text: &str) -> SequenceNumber {
    SequenceNumber::try_new(text).unwrap()
}

#[async_trait]
impl KinesisApi for FakeKinesis {
    async fn list_shards(&self, next_token: Option<&str>) -> Result<ShardPage, ApiError> {
        let state = self.state();
        let from: usize = next_token.map(|t| t.parse().unwrap()).unwrap_or(0);
        let size = state.page_size.max(1);
        let all: Vec<ShardInfo> = state
            .shards
            .iter()
            .map(|(id, s)| ShardInfo {
                id: id.clone(),
                parents: s.parents.clone(),
            })
            .collect();
        let end = (from + size).min(all.len());
        Ok(ShardPage {
            shards: all[from..end].to_vec(),
            next_token: (end < all.len()).then(|| end.to_string()),
        })
    }

    async fn get_shard_iterator(
        &self,
        shard: &ShardId,
        start: &IteratorStart,
    ) -> Result<String, SourceError> {
        let mut state = self.state();
        if state.throttle_iterators > 0 {
            state.throttle_iterators -= 1;
            return Err(SourceError::Throttled {
                message: "rate exceeded".into(),
            });
        }
        state.iterator_starts.push(start.clone());
        let s = state
            .shards
            .get(shard)
            .ok_or_else(|| SourceError::NotFound {
                what: format!("shard {shard}"),
            })?;
        let index = match start {
            IteratorStart::TrimHorizon => 0,
            IteratorStart::Latest => s.records.len(),
            IteratorStart::AtTimestamp(ms) => s
                .records
                .iter()
                .position(|r| r.arrival_ms.unwrap() >= *ms)
                .unwrap_or(s.records.len()),
            IteratorStart::AtSequence(t) => s
                .records
                .iter()
                .position(|r| sn(&r.sequence_number) >= sn(t))
                .unwrap_or(s.records.len()),
            IteratorStart::AfterSequence(t) => s
                .records
                .iter()
                .position(|r| sn(&r.sequence_number) > sn(t))
                .unwrap_or(s.records.len()),
        };
        Ok(format!("{shard}|{index}"))
    }

    async fn get_records(&self, iterator: &str, limit: i32) -> Result<RecordsPage, ApiError> {
        let mut state = self.state();
        state.get_records_at.push(Instant::now());
        match state.inject_get_records.pop_front() {
            Some(Injected::Expired) => return Err(ApiError::Expired),
            Some(Injected::Throttled) => {
                return Err(ApiError::Source(SourceError::Throttled {
                    message: "ProvisionedThroughputExceededException".into(),
                }))
            }
            Some(Injected::Unavailable) => {
                return Err(ApiError::Source(SourceError::Unavailable {
                    message: "500".into(),
                }))
            }
            None => {}
        }
        let (shard, index) = iterator.split_once('|').unwrap();
        let index: usize = index.parse().unwrap();
        let s = &state.shards[&ShardId(shard.into())];
        let end = (index + limit as usize).min(s.records.len());
        let records = s.records[index..end].to_vec();
        let done = s.closed && end == s.records.len();
        Ok(RecordsPage {
            records,
            next_iterator: (!done).then(|| format!("{shard}|{end}")),
            millis_behind_latest: Some(((s.records.len() - end) * 1000) as i64),
            child_shards: if done { s.children.clone() } else { Vec::new() },
        })
    }
}

fn positions(records: &[SourceRecord]) -> Vec<String> {
    records.iter().map(|r| r.position.to_string()).collect()
}

const WAIT: Duration = Duration::from_secs(5);

/// A fake stream with one open shard "s" holding records `1..=n`, arrived at `1000 * i` ms.
fn shard_with(n: u64) -> FakeKinesis {
    let fake = FakeKinesis::default();
    fake.add_shard("s", &[]);
    for i in 1..=n {
        fake.put("s", &seq_text(i), "k", b"{}", 1000 * i as i64);
    }
    fake
}

async fn open(source: &KinesisSource, shard: &str, start: StartAt) -> Box<dyn ShardReader> {
    match source.open(&ShardId(shard.into()), start).await {
        Ok(reader) => reader,
        Err(e) => panic!("open {shard}: {e}"),
    }
}

#[tokio::test(start_paused = true)]
async fn a_closed_shard_ends_only_after_its_last_record_is_returned() {
    let fake = FakeKinesis::default();
    fake.add_shard("shardId-0", &[]);
    for n in 1..=3 {
        fake.put("shardId-0", &seq_text(n), "k", b"{}", 1000);
    }
    fake.close("shardId-0", &["shardId-1", "shardId-2"]);
    let source = fake.source(10);
    let mut reader = open(&source, "shardId-0", StartAt::Earliest).await;
    let first = reader.next_batch(2, WAIT).await.unwrap();
    assert_eq!(positions(&first), vec![seq_text(1), seq_text(2)]);
    assert!(!reader.shard_ended(), "one record is still to be returned");
    let second = reader.next_batch(2, WAIT).await.unwrap();
    assert_eq!(positions(&second), vec![seq_text(3)]);
    assert!(reader.shard_ended());
    assert!(reader.next_batch(2, WAIT).await.unwrap().is_empty());
    assert_eq!(reader.lag(), Some(Lag::Millis(0)));
}

#[tokio::test(start_paused = true)]
async fn an_open_shard_never_ends_and_an_empty_closed_shard_ends_at_once() {
    let fake = FakeKinesis::default();
    fake.add_shard("open", &[]);
    fake.add_shard("closed", &[]);
    fake.close("closed", &[]);
    let source = fake.source(10);
    let mut open_shard = open(&source, "open", StartAt::Earliest).await;
    assert!(open_shard.next_batch(10, WAIT).await.unwrap().is_empty());
    assert!(!open_shard.shard_ended());
    let mut closed = open(&source, "closed", StartAt::AtTimestamp(0)).await;
    assert!(closed.next_batch(10, WAIT).await.unwrap().is_empty());
    assert!(closed.shard_ended());
}

#[tokio::test(start_paused = true)]
async fn resumes_after_a_checkpoint_with_after_sequence_number() {
    let fake = FakeKinesis::default();
    fake.add_shard("s", &[]);
    // Digit counts grow: text order would put "10…" before "9…".
    for text in ["9", "98", "99", "100", "1000"] {
        fake.put("s", text, "k", b"{}", 1000);
    }
    let source = fake.source(10);
    let start = StartAt::After(Position::Sequence(sn("99")));
    let mut reader = open(&source, "s", start).await;
    let got = reader.next_batch(10, WAIT).await.unwrap();
    assert_eq!(positions(&got), vec!["100", "1000"]);
    assert_eq!(
        fake.state().iterator_starts,
        vec![IteratorStart::AfterSequence("99".into())]
    );
}

#[tokio::test(start_paused = true)]
async fn at_timestamp_and_latest_take_the_matching_iterators() {
    let fake = shard_with(4);
    let source = fake.source(10);
    let mut reader = open(&source, "s", StartAt::AtTimestamp(2500)).await;
    let got = reader.next_batch(10, WAIT).await.unwrap();
    assert_eq!(positions(&got), vec![seq_text(3), seq_text(4)]);
    assert_eq!(got[0].arrival_ms, 3000);
    assert_eq!(got[0].key.as_deref(), Some(&b"k"[..]));
    let mut latest = open(&source, "s", StartAt::Latest).await;
    fake.put("s", &seq_text(5), "k", b"{}", 5000);
    let got = latest.next_batch(10, WAIT).await.unwrap();
    assert_eq!(positions(&got), vec![seq_text(5)]);
}

#[tokio::test(start_paused = true)]
async fn kpl_aggregates_become_sub_sequence_positions_and_resuming_inside_one_skips_what_was_delivered(
) {
    let fake = FakeKinesis::default();
    fake.add_shard("s", &[]);
    fake.put("s", &seq_text(1), "plain", b"p1", 1000);
    let aggregate = kpl::encode([("a", &b"u0"[..]), ("b", b"u1"), ("a", b"u2"), ("c", b"u3")]);
    fake.put("s", &seq_text(2), "outer", &aggregate, 1000);
    fake.put("s", &seq_text(3), "plain", b"p3", 1000);
    let source = fake.source(10);
    let mut reader = open(&source, "s", StartAt::Earliest).await;
    let got = reader.next_batch(100, WAIT).await.unwrap();
    let s2 = seq_text(2);
    assert_eq!(
        positions(&got),
        vec![
            seq_text(1),
            format!("{s2}.0"),
            format!("{s2}.1"),
            format!("{s2}.2"),
            format!("{s2}.3"),
            seq_text(3)
        ]
    );
    assert_eq!(
        got[2].key.as_deref(),
        Some(&b"b"[..]),
        "the user record's own key"
    );
    assert_eq!(got[2].payload, b"u1");
    assert!(got.windows(2).all(|w| w[0].position < w[1].position));

    // Resume after user record 1 of the aggregate: 2 and 3, then the next record, once each.
    let start = StartAt::After(Position::Sequence(seq(2).with_sub_sequence(1)));
    let mut resumed = open(&source, "s", start).await;
    let got = resumed.next_batch(100, WAIT).await.unwrap();
    assert_eq!(
        positions(&got),
        vec![format!("{s2}.2"), format!("{s2}.3"), seq_text(3)]
    );
    assert_eq!(
        fake.state().iterator_starts.last(),
        Some(&IteratorStart::AtSequence(s2.clone())),
        "re-read the aggregate"
    );
    // After its last user record: only what follows it.
    let start = StartAt::After(Position::Sequence(seq(2).with_sub_sequence(3)));
    let mut resumed = open(&source, "s", start).await;
    let got = resumed.next_batch(100, WAIT).await.unwrap();
    assert_eq!(positions(&got), vec![seq_text(3)]);
}

#[tokio::test(start_paused = true)]
async fn an_expired_iterator_is_replaced_after_the_last_fetched_record() {
    let fake = shard_with(6);
    let source = fake.source(2);
    let mut reader = open(&source, "s", StartAt::Earliest).await;
    let mut got = reader.next_batch(10, WAIT).await.unwrap();
    fake.inject(Injected::Expired);
    got.extend(reader.next_batch(10, WAIT).await.unwrap());
    got.extend(reader.next_batch(10, WAIT).await.unwrap());
    assert_eq!(
        positions(&got),
        (1..=6).map(seq_text).collect::<Vec<_>>(),
        "nothing skipped, nothing repeated"
    );
    assert_eq!(
        fake.state().iterator_starts,
        vec![
            IteratorStart::TrimHorizon,
            IteratorStart::AfterSequence(seq_text(2))
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn iterators_that_keep_expiring_make_the_shard_unavailable_not_stuck() {
    let fake = shard_with(1);
    for _ in 0..3 {
        fake.inject(Injected::Expired);
    }
    let source = fake.source(10);
    let mut reader = open(&source, "s", StartAt::Earliest).await;
    let err = reader.next_batch(10, WAIT).await.unwrap_err();
    assert!(matches!(err, SourceError::Unavailable { .. }), "{err}");
    let got = reader.next_batch(10, WAIT).await.unwrap();
    assert_eq!(positions(&got), vec![seq_text(1)]);
}

#[tokio::test(start_paused = true)]
async fn throttling_is_reported_backed_off_and_the_reader_goes_on() {
    let fake = shard_with(3);
    fake.inject(Injected::Throttled);
    fake.inject(Injected::Unavailable);
    let source = fake.source(10);
    let mut reader = open(&source, "s", StartAt::Earliest).await;
    let err = reader.next_batch(10, WAIT).await.unwrap_err();
    assert!(matches!(err, SourceError::Throttled { .. }) && err.is_retryable());
    // Within the backoff (1 s) a call returns nothing and makes no remote call.
    let calls = fake.state().get_records_at.len();
    assert!(reader
        .next_batch(10, Duration::from_millis(100))
        .await
        .unwrap()
        .is_empty());
    assert_eq!(fake.state().get_records_at.len(), calls);
    let err = reader.next_batch(10, WAIT).await.unwrap_err();
    assert!(matches!(err, SourceError::Unavailable { .. }));
    let t0 = Instant::now();
    let got = reader.next_batch(10, WAIT).await.unwrap();
    assert_eq!(positions(&got), (1..=3).map(seq_text).collect::<Vec<_>>());
    assert!(
        t0.elapsed() >= Duration::from_secs(2),
        "the backoff doubled"
    );
}

#[tokio::test(start_paused = true)]
async fn get_records_is_paced_under_five_calls_per_second_per_shard() {
    let fake = shard_with(100);
    let source = fake.source(1);
    let mut reader = open(&source, "s", StartAt::Earliest).await;
    let t0 = Instant::now();
    let mut n = 0;
    while t0.elapsed() < Duration::from_secs(3) {
        n += reader
            .next_batch(10, Duration::from_millis(50))
            .await
            .unwrap()
            .len();
    }
    let calls = fake.state().get_records_at.clone();
    assert_eq!(calls.len(), n);
    for w in calls.windows(2) {
        assert!(w[1] - w[0] >= MIN_CALL_INTERVAL);
    }
    assert!(n >= 10, "still reads at 4 calls/s: {n}");
}

#[tokio::test(start_paused = true)]
async fn an_empty_response_waits_the_poll_interval_when_caught_up() {
    let fake = shard_with(0);
    let source = fake.source(10);
    let mut reader = open(&source, "s", StartAt::Earliest).await;
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(5) {
        assert!(reader
            .next_batch(10, Duration::from_millis(100))
            .await
            .unwrap()
            .is_empty());
    }
    let calls = fake.state().get_records_at.len();
    assert!(
        (5..=6).contains(&calls),
        "one call per poll_interval: {calls}"
    );
    assert_eq!(reader.lag(), Some(Lag::Millis(0)));
}

#[tokio::test(start_paused = true)]
async fn list_shards_follows_next_token_and_names_both_parents() {
    let fake = FakeKinesis::default();
    fake.state().page_size = 2;
    fake.add_shard("shardId-000000000000", &[]);
    fake.add_shard("shardId-000000000001", &[]);
    fake.add_shard("shardId-000000000002", &["shardId-000000000000"]);
    fake.add_shard("shardId-000000000003", &["shardId-000000000000"]);
    fake.add_shard(
        "shardId-000000000004",
        &["shardId-000000000003", "shardId-000000000001"],
    );
    let shards = fake.source(10).list_shards().await.unwrap();
    assert_eq!(shards.len(), 5);
    assert_eq!(
        shards[4].parents,
        vec![
            ShardId("shardId-000000000003".into()),
            ShardId("shardId-000000000001".into())
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn open_refuses_positions_that_are_not_sequence_numbers_and_unknown_shards() {
    let fake = shard_with(0);
    let source = fake.source(10);
    for start in [
        StartAt::After(Position::ShardEnd),
        StartAt::After(Position::Offset(3)),
        StartAt::At(Position::Offset(3)),
    ] {
        let Err(err) = source.open(&ShardId("s".into()), start).await else {
            panic!("opened");
        };
        assert!(matches!(err, SourceError::InvalidPosition { .. }), "{err}");
    }
    let Err(err) = source
        .open(&ShardId("nope".into()), StartAt::Earliest)
        .await
    else {
        panic!("opened an unknown shard");
    };
    assert!(matches!(err, SourceError::NotFound { .. }), "{err}");
}

#[tokio::test(start_paused = true)]
async fn a_throttled_open_still_returns_a_reader_that_retries() {
    let fake = shard_with(1);
    fake.state().throttle_iterators = 1;
    let source = fake.source(10);
    let mut reader = open(&source, "s", StartAt::Earliest).await;
    let got = reader.next_batch(10, WAIT).await.unwrap();
    assert_eq!(positions(&got), vec![seq_text(1)]);
}

#[tokio::test]
async fn start_positions_need_no_remote_call() {
    let fake = FakeKinesis::default();
    let source = fake.source(10);
    let shard = ShardId("any".into());
    assert_eq!(
        source
            .start_position(&shard, &InitialPosition::AtTimestamp(42))
            .await
            .unwrap(),
        StartAt::AtTimestamp(42)
    );
    assert_eq!(
        source
            .start_position(&shard, &InitialPosition::Earliest)
            .await
            .unwrap(),
        StartAt::Earliest
    );
}
