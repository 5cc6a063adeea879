//! Dead-letter queue: one JSON Lines object per batch with the records that could not be
//! delivered, staged by the worker and published by the committer only once the batch is
//! committed (docs/design.md, protocol step 6), so a rejected batch leaves no DLQ entry behind.
//!
//! ```text
//!  local  worker:    <dir>/_staging/<channel>/<batch id>.jsonl       (write, fsync)
//!         committer: rename -> <dir>/<channel>/<batch id>.jsonl       (atomic, idempotent)
//!  S3     worker:    PUT s3://<bucket>/<prefix>_staging/<channel>/<batch id>.jsonl
//!         committer: COPY -> s3://<bucket>/<prefix><channel>/<batch id>.jsonl, DELETE staged
//! ```
//!
//! On S3 every request carries `x-amz-expected-bucket-owner` when configured, and every object
//! written is encrypted with SSE-KMS under the configured customer-managed key.
//!
//! An entry names the channel, topic or stream, shard, position, arrival time, schema version,
//! error code, field (JSON pointer) and message; the payload only with `include_payload`.

use std::io::Write;
use std::path::{Path, PathBuf};

use crate::aws::s3::S3Bucket;
use crate::config::S3Location;

use base64::Engine;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::model::{Position, ShardId};

/// One DLQ entry (a line of a DLQ object).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DlqEntry {
    /// Channel name.
    pub channel: String,
    /// Kafka topic or Kinesis stream ARN.
    pub source: String,
    /// Shard (Kafka partition or Kinesis shard id).
    pub shard: ShardId,
    /// Offset or sequence number of the record.
    pub position: Position,
    /// Arrival time at the broker, RFC 3339 UTC with milliseconds.
    pub arrival_time: String,
    /// Kafka message key as text (lossy UTF-8), if any: lets users reconcile by key.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub key: Option<String>,
    /// Schema version the record was checked against: the version id in a GSR record's header,
    /// `schema id N` for a Confluent-framed record ([`crate::registry::schema_label`]), otherwise
    /// the channel's schema (file path or GSR version id at the worker's start).
    pub schema_version: String,
    /// Error code (docs/schema-mapping.md "DLQ error codes").
    pub error_code: String,
    /// JSON pointer of the offending field, `""` for the whole record.
    pub field: String,
    /// Human-readable reason.
    pub message: String,
    /// Base64 of the record bytes, only when the channel sets `include_payload = true`.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub payload_base64: Option<String>,
}

impl DlqEntry {
    /// Attaches the payload (standard base64, RFC 4648 §4).
    pub fn with_payload(mut self, payload: &[u8]) -> Self {
        self.payload_base64 = Some(base64::engine::general_purpose::STANDARD.encode(payload));
        self
    }

    /// Approximate bytes this entry holds in memory (its strings plus a fixed overhead), counted
    /// against the worker's `buffer_size` so that a stream of bad records is back-pressured
    /// like good ones.
    pub fn approx_bytes(&self) -> usize {
        const OVERHEAD: usize = 160;
        OVERHEAD
            + self.channel.len()
            + self.source.len()
            + self.shard.0.len()
            + self.arrival_time.len()
            + self.key.as_ref().map_or(0, String::len)
            + self.schema_version.len()
            + self.error_code.len()
            + self.field.len()
            + self.message.len()
            + self.payload_base64.as_ref().map_or(0, String::len)
    }
}

/// A channel's DLQ, local or on S3. Errors are `std::io::Error` (S3 failures as
/// [`std::io::ErrorKind::Other`], `AccessDenied` as [`std::io::ErrorKind::PermissionDenied`], a
/// missing object as [`std::io::ErrorKind::NotFound`]).
#[derive(Debug, Clone)]
pub enum Dlq {
    /// A local directory.
    Local(LocalDlq),
    /// An S3 bucket and prefix.
    S3(S3Dlq),
}

impl Dlq {
    /// Stages the entries of a batch durably; returns the staged location (a path or an
    /// `s3://` URI), `None` when there are no entries.
    ///
    /// Errors: any write error (the worker retries the flush).
    pub async fn stage(
        &self,
        batch_id: Uuid,
        entries: &[DlqEntry],
    ) -> std::io::Result<Option<String>> {
        match self {
            Dlq::Local(local) => local.stage(batch_id, entries),
            Dlq::S3(s3) => s3.stage(batch_id, entries).await,
        }
    }

    /// Publishes a committed batch's staged entries. Idempotent.
    ///
    /// Errors: [`std::io::ErrorKind::NotFound`] when the staged object is gone and was never
    /// published; others when the store fails (retry).
    pub async fn publish(&self, batch_id: Uuid, staged: &str) -> std::io::Result<()> {
        match self {
            Dlq::Local(local) => local.publish(batch_id, staged),
            Dlq::S3(s3) => s3.publish(batch_id, staged).await,
        }
    }

    /// Discards a rejected batch's staged entries (best effort).
    pub async fn discard(&self, staged: &str) {
        match self {
            Dlq::Local(local) => local.discard(staged),
            Dlq::S3(s3) => s3.discard(staged).await,
        }
    }

    /// Every published entry of this channel.
    ///
    /// Errors: a read error or a line that is not a DLQ entry.
    pub async fn read_published(&self) -> std::io::Result<Vec<DlqEntry>> {
        match self {
            Dlq::Local(local) => local.read_published(),
            Dlq::S3(s3) => s3.read_published().await,
        }
    }

    /// Checks that the DLQ can be written (a local directory is created; an S3 bucket must
    /// exist, be owned by the expected account and accept a put).
    ///
    /// Errors: why not.
    pub async fn check_writable(&self) -> std::io::Result<()> {
        match self {
            Dlq::Local(local) => std::fs::create_dir_all(&local.dir),
            Dlq::S3(s3) => s3.check_writable().await,
        }
    }
}

impl From<LocalDlq> for Dlq {
    fn from(local: LocalDlq) -> Self {
        Dlq::Local(local)
    }
}

impl From<S3Dlq> for Dlq {
    fn from(s3: S3Dlq) -> Self {
        Dlq::S3(s3)
    }
}

/// A local-directory DLQ.
#[derive(Debug, Clone)]
pub struct LocalDlq {
    dir: PathBuf,
    channel: String,
}

impl LocalDlq {
    /// A DLQ under `dir` for `channel`.
    pub fn new(dir: impl Into<PathBuf>, channel: impl Into<String>) -> Self {
        LocalDlq {
            dir: dir.into(),
            channel: channel.into(),
        }
    }

    fn staged_path(&self, batch_id: Uuid) -> PathBuf {
        self.dir
            .join("_staging")
            .join(&self.channel)
            .join(format!("{batch_id}.jsonl"))
    }

    /// Where a committed batch's entries are published.
    pub fn published_path(&self, batch_id: Uuid) -> PathBuf {
        self.dir
            .join(&self.channel)
            .join(format!("{batch_id}.jsonl"))
    }

    /// The directory of published entries of this channel.
    pub fn published_dir(&self) -> PathBuf {
        self.dir.join(&self.channel)
    }

    /// Stages the entries of a batch (durably: written and fsynced). Returns the staged path,
    /// or `None` when there are no entries.
    ///
    /// Errors: any I/O error (the worker retries the flush).
    pub fn stage(&self, batch_id: Uuid, entries: &[DlqEntry]) -> std::io::Result<Option<String>> {
        if entries.is_empty() {
            return Ok(None);
        }
        let path = self.staged_path(batch_id);
        std::fs::create_dir_all(path.parent().expect("staged path has a parent"))?;
        let buf = json_lines(entries)?;
        let mut f = std::fs::File::create(&path)?;
        f.write_all(&buf)?;
        f.sync_all()?;
        Ok(Some(path.display().to_string()))
    }

    /// Publishes a committed batch's staged entries. Idempotent: publishing again after a
    /// crash is a no-op.
    ///
    /// Errors: the staged object is missing and was never published, or an I/O error.
    pub fn publish(&self, batch_id: Uuid, staged: &str) -> std::io::Result<()> {
        let target = self.published_path(batch_id);
        if target.exists() {
            return Ok(());
        }
        std::fs::create_dir_all(target.parent().expect("published path has a parent"))?;
        std::fs::rename(Path::new(staged), &target)
    }

    /// Discards a rejected batch's staged entries (its records will be read again).
    pub fn discard(&self, staged: &str) {
        let _ = std::fs::remove_file(staged);
    }

    /// Reads every published entry of this channel (for `describe`, tests and quickstart).
    ///
    /// Errors: an I/O error or a line that is not a DLQ entry.
    pub fn read_published(&self) -> std::io::Result<Vec<DlqEntry>> {
        let mut out = Vec::new();
        let dir = self.published_dir();
        if !dir.exists() {
            return Ok(out);
        }
        for file in std::fs::read_dir(dir)? {
            let text = std::fs::read_to_string(file?.path())?;
            for line in text.lines().filter(|l| !l.is_empty()) {
                out.push(serde_json::from_str(line).map_err(std::io::Error::other)?);
            }
        }
        Ok(out)
    }
}

/// A DLQ under an S3 prefix.
#[derive(Debug, Clone)]
pub struct S3Dlq {
    bucket: S3Bucket,
    channel: String,
}

const CONTENT_TYPE: &str = "application/x-ndjson";

impl S3Dlq {
    /// A DLQ at `location` for `channel`, called through `client`.
    pub fn new(
        client: aws_sdk_s3::Client,
        location: S3Location,
        channel: impl Into<String>,
    ) -> Self {
        S3Dlq {
            bucket: S3Bucket::new(client, location),
            channel: channel.into(),
        }
    }

    fn prefix(&self) -> &str {
        &self.bucket.location().prefix
    }

    fn staged_key(&self, batch_id: Uuid) -> String {
        format!(
            "{}_staging/{}/{batch_id}.jsonl",
            self.prefix(),
            self.channel
        )
    }

    /// The key a committed batch's entries are published under.
    pub fn published_key(&self, batch_id: Uuid) -> String {
        format!("{}{}/{batch_id}.jsonl", self.prefix(), self.channel)
    }

    fn key_of<'a>(&self, uri: &'a str) -> std::io::Result<&'a str> {
        let bucket = self.bucket.location().bucket.as_str();
        uri.strip_prefix("s3://")
            .and_then(|rest| rest.strip_prefix(bucket))
            .and_then(|rest| rest.strip_prefix('/'))
            .ok_or_else(|| {
                std::io::Error::other(format!(
                    "staged DLQ object {uri:?} is not in bucket {bucket}"
                ))
            })
    }

    async fn stage(&self, batch_id: Uuid, entries: &[DlqEntry]) -> std::io::Result<Option<String>> {
        if entries.is_empty() {
            return Ok(None);
        }
        let key = self.staged_key(batch_id);
        self.bucket
            .put(&key, json_lines(entries)?, CONTENT_TYPE)
            .await?;
        Ok(Some(self.bucket.uri(&key)))
    }

    async fn publish(&self, batch_id: Uuid, staged: &str) -> std::io::Result<()> {
        let staged_key = self.key_of(staged)?.to_owned();
        let target = self.published_key(batch_id);
        if !self.bucket.exists(&target).await? {
            self.bucket.copy(&staged_key, &target, CONTENT_TYPE).await?;
        }
        self.discard(staged).await;
        Ok(())
    }

    async fn discard(&self, staged: &str) {
        let Ok(key) = self.key_of(staged) else { return };
        if let Err(e) = self.bucket.delete(key).await {
            tracing::warn!(channel = %self.channel, staged, error = %e, "could not delete a staged DLQ object");
        }
    }

    async fn read_published(&self) -> std::io::Result<Vec<DlqEntry>> {
        let prefix = format!("{}{}/", self.prefix(), self.channel);
        let mut out = Vec::new();
        for key in self.bucket.list(&prefix).await? {
            let body = self.bucket.get(&key).await?;
            for line in body.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
                out.push(serde_json::from_slice(line).map_err(std::io::Error::other)?);
            }
        }
        Ok(out)
    }

    async fn check_writable(&self) -> std::io::Result<()> {
        let key = format!(
            "{}_staging/{}/.floe-write-check",
            self.prefix(),
            self.channel
        );
        self.bucket.put(&key, Vec::new(), CONTENT_TYPE).await?;
        self.discard(&self.bucket.uri(&key)).await;
        Ok(())
    }
}

fn json_lines(entries: &[DlqEntry]) -> std::io::Result<Vec<u8>> {
    let mut buf = Vec::with_capacity(entries.len() * 256);
    for e in entries {
        serde_json::to_writer(&mut buf, e).map_err(std::io::Error::other)?;
        buf.push(b'\n');
    }
    Ok(buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(n: i64) -> DlqEntry {
        DlqEntry {
            channel: "c".into(),
            source: "events".into(),
            shard: ShardId::kafka_partition(1),
            position: Position::Offset(n),
            arrival_time: "2026-07-09T20:00:00.000Z".into(),
            key: Some(n.to_string()),
            schema_version: "event.schema.json".into(),
            error_code: "TYPE_MISMATCH".into(),
            field: "/value".into(),
            message: "expected a number".into(),
            payload_base64: None,
        }
    }

    #[test]
    fn staged_entries_appear_only_after_publish_and_publish_is_idempotent() {
        let dir = tempfile::tempdir().unwrap();
        let dlq = LocalDlq::new(dir.path(), "c");
        let id = Uuid::now_v7();
        let staged = dlq.stage(id, &[entry(1), entry(2)]).unwrap().unwrap();
        assert!(dlq.read_published().unwrap().is_empty());
        dlq.publish(id, &staged).unwrap();
        dlq.publish(id, &staged).unwrap();
        assert_eq!(dlq.read_published().unwrap(), vec![entry(1), entry(2)]);
    }

    #[test]
    fn no_entries_stage_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let dlq = LocalDlq::new(dir.path(), "c");
        assert_eq!(dlq.stage(Uuid::now_v7(), &[]).unwrap(), None);
    }
}
