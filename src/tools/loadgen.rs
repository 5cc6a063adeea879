//! Load generator (`floe-loadgen`): produces deterministic records ([`crate::tools::sample_events`]) to Kafka,
//! Kinesis or an NDJSON file, at a target rate or as fast as possible, and writes a manifest that
//! `loadtest/verify.py` reconciles the table and the DLQ against.
//!
//! ```text
//!   GenSpec (shape, seed, ids start..start+records, event-time base and spread, bad shares)
//!     └─ record(id) ─► payload + key (the id in decimal text) + expected DLQ code if bad
//!          ├─ Kafka:   rdkafka idempotent producer (no duplicates from producer retries)
//!          ├─ Kinesis: PutRecords, ≤ 500 entries a call, failed entries retried with backoff
//!          └─ file:    NDJSON (the benchmark's input)
//!   Manifest (JSON lines): header; one line per DLQ code with its ids; done line with counts
//! ```
//!
//! Every record's key (Kafka message key, Kinesis partition key) is its id, so a DLQ entry of a
//! record that is not even JSON still names its id (`DlqEntry::key`).
//!
//! Change mode ([`changes`], `--changes`): Debezium-shaped change events of one table instead of
//! `Event` records, to Kafka ([`KafkaTarget::produce_changes`]) or a file
//! ([`write_changes_file`]), and a manifest of the table's expected final state
//! ([`changes::write_manifest`]) that `loadtest/verify_cdc.py` checks an upsert table against.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::json;

pub mod changes;

use crate::tools::sample_events::{
    event_key, pick_bad_kind_by_share, shaped_bad, shaped_json, BadKind, Shape,
};

/// What to generate: the same spec always gives the same records.
#[derive(Debug, Clone)]
pub struct GenSpec {
    /// Record shape.
    pub shape: Shape,
    /// Random stream selector.
    pub seed: u64,
    /// First id.
    pub start_id: u64,
    /// Number of records (ids `start_id..start_id + records`).
    pub records: u64,
    /// Earliest event time, milliseconds since the epoch.
    pub base_time_ms: i64,
    /// Event times spread uniformly over this many hours (0: one second).
    pub spread_hours: u32,
    /// Share of bad records per kind, in parts per million (sum ≤ 1,000,000).
    pub bad_shares_ppm: Vec<(BadKind, u32)>,
}

impl GenSpec {
    /// Record `id`: payload and, for a bad record, its kind.
    pub fn record(&self, id: u64) -> (Vec<u8>, Option<BadKind>) {
        match pick_bad_kind_by_share(id, self.seed, &self.bad_shares_ppm) {
            Some(kind) => (shaped_bad(self.shape, id, kind).0, Some(kind)),
            None => (
                shaped_json(
                    self.shape,
                    id,
                    self.seed,
                    self.base_time_ms,
                    self.spread_hours,
                )
                .into_bytes(),
                None,
            ),
        }
    }

    /// The ids of this spec.
    pub fn ids(&self) -> std::ops::Range<u64> {
        self.start_id..self.start_id + self.records
    }
}

/// Shares `total_ppm` evenly over every [`BadKind`] (kinds in turn get the remainder).
pub fn even_shares(total_ppm: u32) -> Vec<(BadKind, u32)> {
    let n = BadKind::ALL.len() as u32;
    BadKind::ALL
        .iter()
        .enumerate()
        .map(|(i, &k)| (k, total_ppm / n + u32::from((i as u32) < total_ppm % n)))
        .filter(|(_, ppm)| *ppm > 0)
        .collect()
}

/// What was produced, for the manifest.
#[derive(Debug, Default)]
pub struct Produced {
    /// Records acknowledged by the sink.
    pub acknowledged: u64,
    /// Ids whose delivery failed for good (the run then fails).
    pub failed_ids: Vec<u64>,
    /// Bad ids by expected DLQ code.
    pub bad_by_code: BTreeMap<&'static str, Vec<u64>>,
    /// Bad ids by kind name (counts).
    pub bad_by_kind: BTreeMap<&'static str, u64>,
    /// Records acknowledged per shard (Kinesis) or partition (Kafka).
    pub per_shard: BTreeMap<String, u64>,
    /// Payload bytes produced.
    pub bytes: u64,
    /// Retried entries (Kinesis) or send retries on a full queue (Kafka).
    pub retries: u64,
    /// Wall time.
    pub elapsed: Duration,
}

/// Paces sends to `rate` records per second (`None`: as fast as possible).
#[derive(Debug)]
pub struct Pacer {
    rate: Option<f64>,
    start: Instant,
}

impl Pacer {
    /// A pacer starting now.
    pub fn new(rate: Option<f64>) -> Self {
        Pacer {
            rate: rate.filter(|r| *r > 0.0),
            start: Instant::now(),
        }
    }

    /// How long to wait before sending record number `sent` (0-based) of this run.
    pub fn delay(&self, sent: u64) -> Duration {
        match self.rate {
            Some(rate) => {
                Duration::from_secs_f64(sent as f64 / rate).saturating_sub(self.start.elapsed())
            }
            None => Duration::ZERO,
        }
    }
}

/// Writes the manifest: a header line, one line per DLQ code with its ids, a done line.
///
/// Errors: I/O.
pub fn write_manifest(
    path: &Path,
    spec: &GenSpec,
    sink: serde_json::Value,
    produced: &Produced,
) -> std::io::Result<()> {
    let mut out = std::io::BufWriter::new(std::fs::File::create(path)?);
    let shape = match spec.shape {
        Shape::Event => "event",
        Shape::Wide => "wide",
    };
    let header = json!({
        "kind": "header",
        "shape": shape,
        "seed": spec.seed,
        "start_id": spec.start_id,
        "records": spec.records,
        "base_time_ms": spec.base_time_ms,
        "spread_hours": spec.spread_hours,
        "bad_shares_ppm": spec.bad_shares_ppm.iter().map(|(k, p)| (k.name(), *p)).collect::<BTreeMap<_, _>>(),
        "key": "id",
        "sink": sink,
    });
    writeln!(out, "{header}")?;
    for (code, ids) in &produced.bad_by_code {
        writeln!(out, "{}", json!({"kind": "bad", "code": code, "ids": ids}))?;
    }
    let secs = produced.elapsed.as_secs_f64();
    let done = json!({
        "kind": "done",
        "produced": spec.records,
        "acknowledged": produced.acknowledged,
        "failed_ids": produced.failed_ids,
        "bad": produced.bad_by_code.values().map(Vec::len).sum::<usize>(),
        "bad_by_kind": produced.bad_by_kind,
        "per_shard": produced.per_shard,
        "bytes": produced.bytes,
        "retries": produced.retries,
        "elapsed_s": secs,
        "records_per_s": if secs > 0.0 { spec.records as f64 / secs } else { 0.0 },
    });
    writeln!(out, "{done}")?;
    out.flush()
}

fn note(produced: &mut Produced, id: u64, bad: Option<BadKind>, len: usize) {
    produced.bytes += len as u64;
    if let Some(kind) = bad {
        produced
            .bad_by_code
            .entry(kind.expected_code())
            .or_default()
            .push(id);
        *produced.bad_by_kind.entry(kind.name()).or_default() += 1;
    }
}

/// Progress printer: one line to stderr every `every`.
struct Progress {
    every: Duration,
    last: Instant,
    start: Instant,
}

impl Progress {
    fn new(every: Duration) -> Self {
        Progress {
            every,
            last: Instant::now(),
            start: Instant::now(),
        }
    }

    fn tick(&mut self, sent: u64, total: u64) {
        if !self.every.is_zero() && self.last.elapsed() >= self.every {
            self.last = Instant::now();
            let s = self.start.elapsed().as_secs_f64();
            eprintln!(
                "floe-loadgen: sent {sent}/{total} ({:.0} records/s)",
                sent as f64 / s
            );
        }
    }
}

/// Writes the spec's records to `path` as NDJSON (the benchmark input; keys are not written).
///
/// Errors: I/O.
pub fn write_file(spec: &GenSpec, path: &Path) -> std::io::Result<Produced> {
    let start = Instant::now();
    let mut out = std::io::BufWriter::with_capacity(1 << 20, std::fs::File::create(path)?);
    let mut produced = Produced::default();
    for id in spec.ids() {
        let (payload, bad) = spec.record(id);
        out.write_all(&payload)?;
        out.write_all(b"\n")?;
        note(&mut produced, id, bad, payload.len());
    }
    out.flush()?;
    produced.acknowledged = spec.records;
    produced.elapsed = start.elapsed();
    Ok(produced)
}

/// Errors of a sink.
#[derive(Debug, thiserror::Error)]
pub enum LoadgenError {
    /// The Kafka client could not be created or flushed.
    #[error("kafka: {0}")]
    Kafka(#[from] rdkafka::error::KafkaError),
    /// A Kinesis call failed for good.
    #[error("kinesis: {0}")]
    Kinesis(String),
}

mod kafka {
    use super::*;
    use rdkafka::message::Message;
    use rdkafka::producer::{BaseProducer, BaseRecord, DeliveryResult, ProducerContext};
    use rdkafka::{ClientConfig, ClientContext};

    /// Counts delivery reports; the opaque is the record's id.
    #[derive(Default)]
    pub(super) struct Reports {
        pub delivered: AtomicU64,
        pub failed: Mutex<Vec<u64>>,
        pub per_partition: Mutex<BTreeMap<i32, u64>>,
    }

    pub(super) struct Ctx(pub Arc<Reports>);

    impl ClientContext for Ctx {}

    impl ProducerContext for Ctx {
        type DeliveryOpaque = Box<u64>;

        fn delivery(&self, result: &DeliveryResult<'_>, id: Box<u64>) {
            match result {
                Ok(m) => {
                    self.0.delivered.fetch_add(1, Ordering::Relaxed);
                    *self
                        .0
                        .per_partition
                        .lock()
                        .unwrap()
                        .entry(m.partition())
                        .or_default() += 1;
                }
                Err(_) => self.0.failed.lock().unwrap().push(*id),
            }
        }
    }

    pub(super) fn producer(
        bootstrap: &str,
        properties: &[(String, String)],
        reports: Arc<Reports>,
    ) -> Result<BaseProducer<Ctx>, LoadgenError> {
        let mut config = ClientConfig::new();
        config
            .set("bootstrap.servers", bootstrap)
            .set("enable.idempotence", "true")
            .set("linger.ms", "5")
            .set("batch.num.messages", "10000")
            .set("queue.buffering.max.messages", "500000")
            .set("queue.buffering.max.kbytes", "262144")
            .set("message.timeout.ms", "120000");
        for (k, v) in properties {
            config.set(k, v);
        }
        Ok(config.create_with_context(Ctx(reports))?)
    }

    /// One message to send: the delivery opaque (record id or stream position), key, value
    /// (`None`: a tombstone).
    pub(super) type Outgoing = (u64, Vec<u8>, Option<Vec<u8>>);

    /// Sends `messages` (`total` of them, for progress lines) paced to `rate`; counts retries
    /// on a full queue in `produced`.
    pub(super) fn send_all(
        messages: impl Iterator<Item = Outgoing>,
        total: u64,
        producer: &BaseProducer<Ctx>,
        topic: &str,
        rate: Option<f64>,
        progress_every: Duration,
        produced: &mut Produced,
    ) {
        let pacer = Pacer::new(rate);
        let mut progress = Progress::new(progress_every);
        for (n, (opaque, key, payload)) in messages.enumerate() {
            let wait = pacer.delay(n as u64);
            if !wait.is_zero() {
                producer.poll(wait);
                let rest = pacer.delay(n as u64);
                if !rest.is_zero() {
                    // The producer loop runs on a plain thread, not a tokio worker.
                    #[allow(clippy::disallowed_methods)]
                    std::thread::sleep(rest);
                }
            }
            let mut opaque = Box::new(opaque);
            loop {
                let mut record = BaseRecord::with_opaque_to(topic, opaque).key(&key);
                if let Some(payload) = &payload {
                    record = record.payload(payload);
                }
                match producer.send(record) {
                    Ok(()) => break,
                    Err((_, record)) => {
                        // Queue full: serve delivery reports, then try again.
                        produced.retries += 1;
                        opaque = record.delivery_opaque;
                        producer.poll(Duration::from_millis(5));
                    }
                }
            }
            producer.poll(Duration::ZERO);
            progress.tick(n as u64 + 1, total);
        }
    }
}

/// Produces the spec's records to Kafka `topic` (idempotent producer; key = id) and waits for
/// every delivery report.
///
/// Errors: the client cannot be created, or the final flush times out.
pub fn produce_kafka(
    spec: &GenSpec,
    bootstrap: &str,
    topic: &str,
    properties: &[(String, String)],
    rate: Option<f64>,
    progress_every: Duration,
) -> Result<Produced, LoadgenError> {
    let mut bad = Produced::default();
    let messages = spec.ids().map(|id| {
        let (payload, kind) = spec.record(id);
        note(&mut bad, id, kind, payload.len());
        (id, event_key(id).into_bytes(), Some(payload))
    });
    let target = KafkaTarget {
        bootstrap,
        topic,
        properties,
        rate,
        progress_every,
    };
    let mut produced = target.produce(messages, spec.records)?;
    produced.bad_by_code = bad.bad_by_code;
    produced.bad_by_kind = bad.bad_by_kind;
    produced.bytes = bad.bytes;
    Ok(produced)
}

/// Where and how fast [`KafkaTarget::produce`] sends.
#[derive(Debug, Clone, Copy)]
pub struct KafkaTarget<'a> {
    /// Bootstrap servers.
    pub bootstrap: &'a str,
    /// Topic.
    pub topic: &'a str,
    /// librdkafka properties, applied after floe-loadgen's own.
    pub properties: &'a [(String, String)],
    /// Messages per second; `None`: as fast as possible.
    pub rate: Option<f64>,
    /// Progress line period (zero: none).
    pub progress_every: Duration,
}

impl KafkaTarget<'_> {
    /// Sends `messages` (opaque, key, value or `None` for a tombstone; `total` of them) with
    /// the idempotent producer and waits for every delivery report: acknowledged count, failed
    /// opaques, per-partition counts, retries, elapsed time (bytes and bad records are the
    /// caller's).
    ///
    /// Errors: the client cannot be created, or the final flush times out.
    fn produce(
        &self,
        messages: impl Iterator<Item = kafka::Outgoing>,
        total: u64,
    ) -> Result<Produced, LoadgenError> {
        use rdkafka::producer::Producer;
        let start = Instant::now();
        let reports = Arc::new(kafka::Reports::default());
        let producer = kafka::producer(self.bootstrap, self.properties, reports.clone())?;
        let mut produced = Produced::default();
        kafka::send_all(
            messages,
            total,
            &producer,
            self.topic,
            self.rate,
            self.progress_every,
            &mut produced,
        );
        producer.flush(Duration::from_secs(180))?;
        produced.acknowledged = reports.delivered.load(Ordering::Relaxed);
        produced.failed_ids = std::mem::take(&mut *reports.failed.lock().unwrap());
        produced.failed_ids.sort_unstable();
        produced.per_shard = reports
            .per_partition
            .lock()
            .unwrap()
            .iter()
            .map(|(p, n)| (p.to_string(), *n))
            .collect();
        produced.elapsed = start.elapsed();
        Ok(produced)
    }

    /// Produces the change events of `spec` (key = the row's key as JSON, so a key stays on
    /// one partition; a delete's tombstone right after it): what was sent, the counts by op
    /// and the table's final state.
    ///
    /// Errors: as [`KafkaTarget::produce`].
    pub fn produce_changes(
        &self,
        spec: &changes::ChangeSpec,
    ) -> Result<(Produced, changes::ChangeCounts, changes::FinalState), LoadgenError> {
        let mut counts = changes::ChangeCounts::default();
        let mut bytes = 0u64;
        let mut stream = changes::ChangeStream::new(spec.clone());
        let messages = stream.by_ref().filter(|m| spec.sends(m)).map(|m| {
            counts.note(&m);
            bytes += (m.key.len() + m.value.as_ref().map_or(0, Vec::len)) as u64;
            (m.seq, m.key, m.value)
        });
        // Every delete adds a tombstone: the progress total counts events.
        let mut produced = self.produce(messages, spec.sent_events())?;
        produced.bytes = bytes;
        Ok((produced, counts, stream.state().clone()))
    }
}

/// Writes the change events of `spec` to `path`, one Kafka value a line (the Debezium JSON;
/// a tombstone is the line `null`), for the peer benchmark: what was written, the counts by
/// op and the table's final state.
///
/// Errors: I/O.
pub fn write_changes_file(
    spec: &changes::ChangeSpec,
    path: &Path,
) -> std::io::Result<(Produced, changes::ChangeCounts, changes::FinalState)> {
    let start = Instant::now();
    let mut out = std::io::BufWriter::with_capacity(1 << 20, std::fs::File::create(path)?);
    let mut produced = Produced::default();
    let mut counts = changes::ChangeCounts::default();
    let mut stream = changes::ChangeStream::new(spec.clone());
    for m in stream.by_ref().filter(|m| spec.sends(m)) {
        counts.note(&m);
        let value = m.value.as_deref().unwrap_or(b"null");
        out.write_all(value)?;
        out.write_all(b"\n")?;
        produced.bytes += value.len() as u64;
        produced.acknowledged += 1;
    }
    out.flush()?;
    produced.elapsed = start.elapsed();
    Ok((produced, counts, stream.state().clone()))
}

/// Most entries in one PutRecords call.
pub const KINESIS_BATCH: usize = 500;
/// Most payload + key bytes in one PutRecords call (the limit is 5 MiB; keep a margin).
const KINESIS_BATCH_BYTES: usize = 4 << 20;
/// Attempts for one entry before the run fails.
const KINESIS_ATTEMPTS: u32 = 20;

/// What one PutRecords batch did: records accepted per shard id, retried entries, and the ids
/// of entries that failed for good.
type BatchOutcome = (BTreeMap<String, u64>, u64, Vec<u64>);

/// One PutRecords call's worth of records, retried until every entry is accepted.
async fn put_batch(
    client: &aws_sdk_kinesis::Client,
    stream: &str,
    mut entries: Vec<(u64, String, Vec<u8>)>,
) -> Result<BatchOutcome, LoadgenError> {
    use aws_sdk_kinesis::primitives::Blob;
    use aws_sdk_kinesis::types::PutRecordsRequestEntry;
    let mut per_shard: BTreeMap<String, u64> = BTreeMap::new();
    let mut retries = 0u64;
    let mut attempt = 0u32;
    while !entries.is_empty() {
        attempt += 1;
        if attempt > 1 {
            let backoff = Duration::from_millis((50u64 << (attempt - 2).min(6)).min(3000));
            tokio::time::sleep(backoff).await;
        }
        let request: Vec<PutRecordsRequestEntry> = entries
            .iter()
            .map(|(_, key, data)| {
                PutRecordsRequestEntry::builder()
                    .partition_key(key)
                    .data(Blob::new(data.clone()))
                    .build()
                    .expect("data and partition key are set")
            })
            .collect();
        let response = client
            .put_records()
            .stream_name(stream)
            .set_records(Some(request))
            .send()
            .await;
        match response {
            Ok(out) => {
                let mut failed = Vec::new();
                for (entry, result) in entries.drain(..).zip(out.records()) {
                    if result.error_code().is_some() {
                        failed.push(entry);
                    } else {
                        *per_shard
                            .entry(result.shard_id().unwrap_or("?").to_string())
                            .or_default() += 1;
                    }
                }
                retries += failed.len() as u64;
                entries = failed;
            }
            Err(e) => {
                // A whole-call failure: retried (an unknown outcome could duplicate; verify
                // would show it as a duplicate in the source, not a floe fault — see README).
                retries += entries.len() as u64;
                if attempt >= KINESIS_ATTEMPTS {
                    return Err(LoadgenError::Kinesis(format!(
                        "{}",
                        aws_sdk_kinesis::error::DisplayErrorContext(&e)
                    )));
                }
            }
        }
        if attempt >= KINESIS_ATTEMPTS && !entries.is_empty() {
            let ids = entries.iter().map(|(id, _, _)| *id).collect();
            return Ok((per_shard, retries, ids));
        }
    }
    Ok((per_shard, retries, Vec::new()))
}

/// Produces the spec's records to Kinesis `stream` (partition key = id) in PutRecords calls of
/// at most [`KINESIS_BATCH`] entries, `concurrency` calls in flight, retrying failed entries.
///
/// Errors: a call that keeps failing.
pub async fn produce_kinesis(
    spec: &GenSpec,
    client: &aws_sdk_kinesis::Client,
    stream: &str,
    rate: Option<f64>,
    concurrency: usize,
    progress_every: Duration,
) -> Result<Produced, LoadgenError> {
    use futures::StreamExt;
    let start = Instant::now();
    let mut produced = Produced::default();
    let pacer = Pacer::new(rate);
    let mut progress = Progress::new(progress_every);
    let mut in_flight = futures::stream::FuturesUnordered::new();
    let mut batch: Vec<(u64, String, Vec<u8>)> = Vec::with_capacity(KINESIS_BATCH);
    let mut batch_bytes = 0usize;
    let mut queued = 0u64;
    let absorb = |produced: &mut Produced,
                  r: Result<BatchOutcome, LoadgenError>|
     -> Result<(), LoadgenError> {
        let (per_shard, retries, failed) = r?;
        for (shard, n) in per_shard {
            produced.acknowledged += n;
            *produced.per_shard.entry(shard).or_default() += n;
        }
        produced.retries += retries;
        produced.failed_ids.extend(failed);
        Ok(())
    };
    let ids = spec.ids();
    let last = ids.end;
    for id in ids {
        let (payload, bad) = spec.record(id);
        note(&mut produced, id, bad, payload.len());
        let key = event_key(id);
        batch_bytes += payload.len() + key.len();
        batch.push((id, key, payload));
        queued += 1;
        // A batch goes when full, or (paced) when a tenth of a second's records are waiting.
        let pace_batch = rate.map_or(KINESIS_BATCH, |r| {
            ((r / 10.0) as usize).clamp(1, KINESIS_BATCH)
        });
        if batch.len() >= pace_batch || batch_bytes >= KINESIS_BATCH_BYTES || id + 1 == last {
            let wait = pacer.delay(queued - batch.len() as u64);
            if !wait.is_zero() {
                tokio::time::sleep(wait).await;
            }
            while in_flight.len() >= concurrency.max(1) {
                if let Some(r) = in_flight.next().await {
                    absorb(&mut produced, r)?;
                }
            }
            let entries = std::mem::take(&mut batch);
            batch_bytes = 0;
            in_flight.push(put_batch(client, stream, entries));
            progress.tick(queued, spec.records);
        }
    }
    while let Some(r) = in_flight.next().await {
        absorb(&mut produced, r)?;
    }
    produced.failed_ids.sort_unstable();
    produced.elapsed = start.elapsed();
    Ok(produced)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(shape: Shape) -> GenSpec {
        GenSpec {
            shape,
            seed: 3,
            start_id: 100,
            records: 2000,
            base_time_ms: 1_783_627_200_000,
            spread_hours: 5,
            bad_shares_ppm: even_shares(20_000),
        }
    }

    #[test]
    fn even_shares_split_the_total_over_every_kind() {
        let s = even_shares(10);
        assert_eq!(s.iter().map(|(_, p)| p).sum::<u32>(), 10);
        assert_eq!(s.len(), 7);
        assert!(even_shares(0).is_empty());
    }

    #[test]
    fn file_sink_is_deterministic_and_records_the_bad_ids() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a"), dir.path().join("b"));
        let pa = write_file(&spec(Shape::Event), &a).unwrap();
        let _ = write_file(&spec(Shape::Event), &b).unwrap();
        assert_eq!(std::fs::read(&a).unwrap(), std::fs::read(&b).unwrap());
        let bad: usize = pa.bad_by_code.values().map(Vec::len).sum();
        assert!((15..=70).contains(&bad), "{bad}");
        let m = dir.path().join("m.jsonl");
        write_manifest(&m, &spec(Shape::Event), json!({"kind": "file"}), &pa).unwrap();
        let lines: Vec<serde_json::Value> = std::fs::read_to_string(&m)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines[0]["kind"], "header");
        assert_eq!(lines.last().unwrap()["produced"], 2000);
    }

    #[test]
    fn wide_records_have_forty_fields_and_pass_the_wide_schema() {
        let doc: serde_json::Value =
            serde_json::from_str(include_str!("../../config/wide.schema.json")).unwrap();
        let schema =
            Arc::new(crate::schema::MappedSchema::from_json_schema(&doc, "event_time").unwrap());
        let mut conv =
            crate::convert::Converter::try_new(schema.clone(), schema.arrow_schema()).unwrap();
        let s = spec(Shape::Wide);
        for id in s.ids() {
            let (payload, bad) = s.record(id);
            let r = conv.push(&payload);
            assert_eq!(
                r.is_err(),
                bad.is_some(),
                "{id}: {}",
                String::from_utf8_lossy(&payload)
            );
            if bad.is_none() {
                let v: serde_json::Value = serde_json::from_slice(&payload).unwrap();
                assert_eq!(v.as_object().unwrap().len(), 40);
            }
        }
    }
}
