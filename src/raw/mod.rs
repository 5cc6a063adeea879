//! Raw delivery to a general-purpose S3 bucket (`destination.kind = "s3"`): records exactly as
//! read from the stream (no decoding, no validation: a record that is not JSON is delivered like
//! any other), batched per shard into objects, compressed, under keys rendered from a template,
//! exactly once (docs/exactly-once.md, "Raw S3 delivery").
//!
//! ```text
//!  worker:    buffer per shard ──flush──> per shard, objects of <= target_object_size record
//!             bytes (a record is never split) ──compress──> PUT (multipart above 16 MiB)
//!             s3://<bucket>/_floe_staging/<channel>/<batch id>/<n>
//!             pending batch {per shard (after, last], staged objects and their final keys}
//!  committer: plan (as for Iceberg) ──> compare-and-swap of the checkpoints in the lease store
//!             ──> publish: COPY staged -> <rendered key>, DELETE staged; rejected: DELETE staged
//! ```
//!
//! A final key is a function of (channel, stream, shard, first position, last position, arrival
//! time of the first record) — all fixed by the records themselves — and the object's content
//! is a function of the same records, so publishing a batch again (a committer that crashed
//! after its checkpoint write) writes the same object under the same key.

pub mod sink;
pub mod target;

use std::collections::BTreeMap;

use uuid::Uuid;

use crate::aws::s3::S3Bucket;
pub use crate::config::raw::STAGING_PREFIX;
use crate::config::raw::{KeyInputs, RawDestinationConfig, MAX_KEY_BYTES};
use crate::config::S3Location;
use crate::model::{Position, RawObject, ShardId};

/// Objects larger than this (compressed) are uploaded with a multipart upload.
pub const MULTIPART_THRESHOLD: usize = 16 << 20;

/// Part size of multipart uploads (S3's minimum is 5 MiB, except the last part).
pub const MULTIPART_PART_SIZE: usize = 8 << 20;

/// A raw S3 destination as a channel's worker and committer use it.
#[derive(Clone)]
pub struct RawIo {
    /// Staging and publishing of objects.
    pub store: RawStore,
    /// The validated destination settings.
    pub config: std::sync::Arc<RawDestinationConfig>,
}

/// A record kept in a raw buffer.
#[derive(Debug, Clone)]
struct RawRecord {
    position: Position,
    arrival_ms: i64,
    payload: Vec<u8>,
}

/// Records buffered for raw delivery, per shard in read order.
#[derive(Debug, Default)]
pub struct RawBuffer {
    shards: BTreeMap<ShardId, Vec<RawRecord>>,
    bytes: usize,
}

/// One object, encoded and ready to stage.
#[derive(Debug, Clone)]
pub struct EncodedObject {
    /// The key it is published under.
    pub key: String,
    /// Shard of its records.
    pub shard: ShardId,
    /// Records in it.
    pub records: u64,
    /// The compressed body.
    pub body: Vec<u8>,
}

impl RawBuffer {
    /// Buffers one record, payload exactly as read.
    pub fn push(&mut self, shard: &ShardId, position: Position, arrival_ms: i64, payload: Vec<u8>) {
        self.bytes += payload.len() + 64;
        self.shards
            .entry(shard.clone())
            .or_default()
            .push(RawRecord {
                position,
                arrival_ms,
                payload,
            });
    }

    /// Approximate memory held, bytes (payloads plus a fixed overhead per record).
    pub fn buffered_bytes(&self) -> usize {
        self.bytes
    }

    /// Records buffered.
    pub fn len(&self) -> usize {
        self.shards.values().map(Vec::len).sum()
    }

    /// Whether nothing is buffered.
    pub fn is_empty(&self) -> bool {
        self.shards.values().all(Vec::is_empty)
    }

    /// Drops everything.
    pub fn clear(&mut self) {
        self.shards.clear();
        self.bytes = 0;
    }

    /// Takes the buffer out, leaving it empty.
    pub fn take(&mut self) -> RawBuffer {
        std::mem::take(self)
    }

    /// Drops the records of `shard`.
    pub fn drop_shard(&mut self, shard: &ShardId) {
        if let Some(records) = self.shards.remove(shard) {
            let bytes: usize = records.iter().map(|r| r.payload.len() + 64).sum();
            self.bytes -= bytes.min(self.bytes);
        }
    }

    /// Takes the records of `shards` out; the others stay.
    pub fn take_shards(&mut self, shards: &std::collections::BTreeSet<ShardId>) -> RawBuffer {
        let mut taken = RawBuffer::default();
        for shard in shards {
            if let Some(records) = self.shards.remove(shard) {
                let bytes: usize = records.iter().map(|r| r.payload.len() + 64).sum();
                self.bytes -= bytes.min(self.bytes);
                taken.bytes += bytes;
                taken.shards.insert(shard.clone(), records);
            }
        }
        taken
    }

    /// Cuts the buffered records into objects (per shard, in order; an object ends before the
    /// record that would take its record bytes past `target_object_size`; a record is never
    /// split), renders their keys and compresses them. CPU-bound: run it off the async threads.
    ///
    /// Errors: a compression error, or a rendered key longer than [`MAX_KEY_BYTES`].
    pub fn encode(
        self,
        config: &RawDestinationConfig,
        channel: &str,
        stream: &str,
    ) -> std::io::Result<Vec<EncodedObject>> {
        let delimiter = config.record_delimiter.bytes();
        let target = config.target_object_size as usize;
        let mut out = Vec::new();
        for (shard, records) in self.shards {
            let mut start = 0;
            while start < records.len() {
                let mut end = start;
                let mut size = 0usize;
                while end < records.len() {
                    let next = records[end].payload.len() + delimiter.len();
                    if end > start && size + next > target {
                        break;
                    }
                    size += next;
                    end += 1;
                }
                let chunk = &records[start..end];
                let mut body = Vec::with_capacity(size);
                for r in chunk {
                    body.extend_from_slice(&r.payload);
                    body.extend_from_slice(delimiter);
                }
                let key = config.key_template.render(
                    &KeyInputs {
                        channel,
                        stream,
                        shard: &shard,
                        first: &chunk[0].position,
                        last: &chunk[chunk.len() - 1].position,
                        arrival_ms: chunk[0].arrival_ms,
                    },
                    config.compression.extension(),
                );
                if key.len() > MAX_KEY_BYTES {
                    return Err(std::io::Error::other(format!(
                        "object key longer than {MAX_KEY_BYTES} bytes: {key}"
                    )));
                }
                out.push(EncodedObject {
                    key,
                    shard: shard.clone(),
                    records: chunk.len() as u64,
                    body: config.compression.compress(&body)?,
                });
                start = end;
            }
        }
        Ok(out)
    }
}

/// The raw destination's S3 side: stage, publish, discard, with the request options of every
/// call (`x-amz-expected-bucket-owner`, SSE-KMS under the configured key) of [`S3Bucket`], as
/// the S3 DLQ.
#[derive(Debug, Clone)]
pub struct RawStore {
    bucket: S3Bucket,
    channel: String,
    part_size: usize,
    multipart_threshold: usize,
}

const CONTENT_TYPE: &str = "application/octet-stream";

impl RawStore {
    /// The store of `channel` in `location.bucket`, called through `client`.
    pub fn new(
        client: aws_sdk_s3::Client,
        location: S3Location,
        channel: impl Into<String>,
    ) -> Self {
        RawStore {
            bucket: S3Bucket::new(client, location),
            channel: channel.into(),
            part_size: MULTIPART_PART_SIZE,
            multipart_threshold: MULTIPART_THRESHOLD,
        }
    }

    /// The same store with another multipart threshold and part size (tests; `part_size` at
    /// least 5 MiB for S3).
    pub fn with_multipart(mut self, threshold: usize, part_size: usize) -> Self {
        self.multipart_threshold = threshold;
        self.part_size = part_size;
        self
    }

    /// The bucket.
    pub fn bucket(&self) -> &str {
        &self.bucket.location().bucket
    }

    /// The key object `n` of batch `batch_id` is staged under.
    pub fn staged_key(&self, batch_id: Uuid, n: usize) -> String {
        format!("{STAGING_PREFIX}{}/{batch_id}/{n}", self.channel)
    }

    /// Uploads `body` under `key` (one PUT, or a multipart upload above the threshold).
    ///
    /// Errors: the S3 failure.
    pub async fn put(&self, key: &str, body: Vec<u8>) -> std::io::Result<()> {
        if body.len() <= self.multipart_threshold {
            self.bucket.put(key, body, CONTENT_TYPE).await
        } else {
            self.bucket
                .put_multipart(key, &body, CONTENT_TYPE, self.part_size)
                .await
        }
    }

    /// Stages the objects of batch `batch_id`; returns them as handed off. On an error, the
    /// objects already staged are deleted (best effort).
    ///
    /// Errors: the S3 failure.
    pub async fn stage(
        &self,
        batch_id: Uuid,
        objects: Vec<EncodedObject>,
    ) -> std::io::Result<Vec<RawObject>> {
        let mut staged = Vec::with_capacity(objects.len());
        for (n, o) in objects.into_iter().enumerate() {
            let staged_key = self.staged_key(batch_id, n);
            let bytes = o.body.len() as u64;
            if let Err(e) = self.put(&staged_key, o.body).await {
                self.discard(&staged).await;
                return Err(e);
            }
            staged.push(RawObject {
                staged_key,
                key: o.key,
                shard: o.shard,
                records: o.records,
                bytes,
            });
        }
        Ok(staged)
    }

    /// Publishes a committed batch's objects: copies each staged object to its key, then
    /// deletes the staged ones. Idempotent: a staged object already gone whose key exists was
    /// published before.
    ///
    /// Errors: [`std::io::ErrorKind::NotFound`] when an object is neither staged nor published;
    /// others when S3 fails (retry).
    pub async fn publish(&self, objects: &[RawObject]) -> std::io::Result<()> {
        for o in objects {
            match self.bucket.copy(&o.staged_key, &o.key, CONTENT_TYPE).await {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    if !self.bucket.exists(&o.key).await? {
                        return Err(e);
                    }
                }
                Err(e) => return Err(e),
            }
        }
        self.discard(objects).await;
        Ok(())
    }

    /// Deletes the staged objects of a batch (rejected, or published). Best effort: a failure
    /// is logged and leaves an orphan under the staging prefix (never published).
    pub async fn discard(&self, objects: &[RawObject]) {
        for o in objects {
            if let Err(e) = self.bucket.delete(&o.staged_key).await {
                tracing::warn!(channel = %self.channel, staged = %o.staged_key, error = %e, "could not delete a staged object");
            }
        }
    }

    /// Checks that the bucket exists, is owned by the expected account and accepts a put (with
    /// the SSE-KMS key) under the staging prefix.
    ///
    /// Errors: why not.
    pub async fn check_writable(&self) -> std::io::Result<()> {
        let key = format!("{STAGING_PREFIX}{}/.floe-write-check", self.channel);
        self.bucket.put(&key, Vec::new(), CONTENT_TYPE).await?;
        if let Err(e) = self.bucket.delete(&key).await {
            tracing::warn!(channel = %self.channel, error = %e, "could not delete the write check object");
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::raw::{KeyTemplate, RawCompression, RecordDelimiter};

    fn inputs<'a>(shard: &'a ShardId, first: &'a Position, last: &'a Position) -> KeyInputs<'a> {
        KeyInputs {
            channel: "orders",
            stream: "orders-topic",
            shard,
            first,
            last,
            // 2026-07-09T20:05:00.123Z
            arrival_ms: 1_783_627_500_123,
        }
    }

    #[test]
    fn a_prefix_template_gets_the_default_object_name_and_the_extension() {
        let t = KeyTemplate::parse("raw/{channel}/{yyyy}/{MM}/{dd}/{HH}/").unwrap();
        let (s, f, l) = (
            ShardId::kafka_partition(3),
            Position::Offset(100),
            Position::Offset(199),
        );
        assert_eq!(
            t.render(&inputs(&s, &f, &l), ".gz"),
            "raw/orders/2026/07/09/20/orders-3-100-199.gz"
        );
        assert!(t.has_channel());
    }

    #[test]
    fn every_placeholder_renders() {
        let t = KeyTemplate::parse(
            "{stream}/{topic}/{yyyy}-{MM}-{dd}T{HH}:{mm}/{channel}_{shard}_{first}_{last}",
        )
        .unwrap();
        let s = ShardId("shardId-000000000001".into());
        let f: Position = "49590338271490256608559692538361571095921575989136588898"
            .parse()
            .unwrap();
        let l: Position = "49590338271490256608559692538361571095921575989136589000.3"
            .parse()
            .unwrap();
        assert_eq!(
            t.render(&inputs(&s, &f, &l), ""),
            "orders-topic/orders-topic/2026-07-09T20:05/orders_shardId-000000000001_49590338271490256608559692538361571095921575989136588898_49590338271490256608559692538361571095921575989136589000.3"
        );
    }

    #[test]
    fn arrival_times_before_1970_render_in_utc() {
        let t = KeyTemplate::parse("{yyyy}/{MM}/{dd}/{HH}/{mm}/").unwrap();
        let (s, p) = (ShardId::kafka_partition(0), Position::Offset(0));
        let mut k = inputs(&s, &p, &p);
        k.arrival_ms = -1;
        assert_eq!(t.render(&k, ""), "1969/12/31/23/59/orders-0-0-0");
    }

    #[test]
    fn templates_that_could_collide_or_do_not_parse_are_refused() {
        for (bad, why) in [
            ("", "empty"),
            ("/raw/{shard}-{first}", "starts with '/'"),
            ("raw//{shard}-{first}", "empty path segment"),
            (
                "raw/{channel}/{yyyy}/data",
                "must contain {shard} and {first}",
            ),
            ("raw/{shard}/{first}", "must contain {shard} and {first}"),
            (
                "raw/{first}/{shard}-part",
                "must contain {shard} and {first}",
            ),
            ("raw/{channel}-{first}", "must contain {shard} and {first}"),
            (
                "raw/{channel}-{shard}-{last}",
                "must contain {shard} and {first}",
            ),
            ("raw/{shard}-{first}-{hour}", "unknown placeholder {hour}"),
            ("raw/{shard}-{first", "unclosed"),
            ("raw/{shard}-first}", "without '{'"),
            ("_floe_staging/{shard}-{first}", "stages objects"),
            ("raw/{YYYY}/", "unknown placeholder {YYYY}"),
            // Found by a review: adjacent placeholders made keys of two shards equal.
            ("x/{shard}{first}", "must be separated"),
            ("x/{first}{shard}.{last}", "must be separated"),
            ("x/{shard}-{first}{last}", "must be separated"),
            ("x/{channel}{shard}-{first}", "must be separated"),
            ("x/{shard}0{first}", "must be separated"),
        ] {
            let err = KeyTemplate::parse(bad).expect_err(bad);
            assert!(err.contains(why), "{bad}: {err}");
        }
        for good in [
            "raw/",
            "{channel}/{yyyy}/{MM}/{dd}/{HH}/",
            "x/{shard}-{first}",
            "x/{first}.{shard}.json",
            "{channel}-{shard}-{first}-{last}",
        ] {
            KeyTemplate::parse(good).unwrap_or_else(|e| panic!("{good}: {e}"));
        }
        assert!(KeyTemplate::parse("raw/").unwrap().has_channel());
        assert!(!KeyTemplate::parse("x/{shard}-{first}")
            .unwrap()
            .has_channel());
    }

    #[test]
    fn every_codec_round_trips() {
        let data: Vec<u8> = (0..200_000u32)
            .flat_map(|i| format!("{{\"n\":{i}}}\nnot json {i}\n").into_bytes())
            .collect();
        for codec in [
            RawCompression::None,
            RawCompression::Gzip,
            RawCompression::Zstd,
            RawCompression::Snappy,
        ] {
            let packed = codec.compress(&data).unwrap();
            if codec != RawCompression::None {
                assert!(packed.len() < data.len() / 2, "{codec:?} compresses");
            }
            assert_eq!(codec.decompress(&packed).unwrap(), data, "{codec:?}");
        }
        // The streams are the standard formats: magic numbers of gzip, zstd and Snappy framing.
        assert_eq!(
            &RawCompression::Gzip.compress(b"x").unwrap()[..2],
            &[0x1f, 0x8b]
        );
        assert_eq!(
            &RawCompression::Zstd.compress(b"x").unwrap()[..4],
            &[0x28, 0xb5, 0x2f, 0xfd]
        );
        assert_eq!(
            &RawCompression::Snappy.compress(b"x").unwrap()[..10],
            b"\xff\x06\x00\x00sNaPpY"
        );
    }

    fn config(target: u64, delimiter: RecordDelimiter) -> RawDestinationConfig {
        RawDestinationConfig {
            location: S3Location {
                bucket: "b".into(),
                prefix: String::new(),
                expected_bucket_owner: None,
                kms_key_arn: None,
            },
            key_template: KeyTemplate::parse("raw/{HH}/").unwrap(),
            compression: RawCompression::None,
            record_delimiter: delimiter,
            data_freshness: std::time::Duration::from_secs(10),
            target_object_size: target,
            buffer_size: 1 << 20,
        }
    }

    #[test]
    fn objects_roll_at_the_target_size_without_splitting_a_record() {
        let mut buf = RawBuffer::default();
        let s0 = ShardId::kafka_partition(0);
        let s1 = ShardId::kafka_partition(1);
        for i in 0..10 {
            // 9 bytes + newline = 10 per record; record 5 is 29 + 1.
            let payload = if i == 5 {
                vec![b'x'; 29]
            } else {
                format!("record-{i:02}").into_bytes()[..9].to_vec()
            };
            buf.push(&s0, Position::Offset(i), 3_600_000 * i, payload);
        }
        buf.push(&s1, Position::Offset(7), 0, b"{not json".to_vec());
        let objects = buf
            .encode(&config(25, RecordDelimiter::Newline), "c", "t")
            .unwrap();
        let keys: Vec<(&str, u64)> = objects
            .iter()
            .map(|o| (o.key.as_str(), o.records))
            .collect();
        assert_eq!(
            keys,
            vec![
                ("raw/00/c-0-0-1", 2),
                ("raw/02/c-0-2-3", 2),
                // Record 5 would take it past the target.
                ("raw/04/c-0-4-4", 1),
                // Larger than the target alone: an object of its own.
                ("raw/05/c-0-5-5", 1),
                ("raw/06/c-0-6-7", 2),
                ("raw/08/c-0-8-9", 2),
                ("raw/00/c-1-7-7", 1),
            ]
        );
        let all: Vec<u8> = objects.iter().flat_map(|o| o.body.clone()).collect();
        assert_eq!(all.iter().filter(|b| **b == b'\n').count(), 11);
        assert!(objects[6].body == b"{not json\n");
    }

    #[test]
    fn without_a_delimiter_records_are_back_to_back() {
        let mut buf = RawBuffer::default();
        let s = ShardId::kafka_partition(0);
        buf.push(&s, Position::Offset(1), 0, b"ab".to_vec());
        buf.push(&s, Position::Offset(2), 0, b"cd".to_vec());
        let objects = buf
            .encode(&config(1 << 20, RecordDelimiter::None), "c", "t")
            .unwrap();
        assert_eq!(objects.len(), 1);
        assert_eq!(objects[0].body, b"abcd");
    }
}
