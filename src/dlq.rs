//! Dead-letter queue: one JSON Lines object per batch with the records that could not be
//! delivered, staged by the worker and published by the committer only once the batch is
//! committed (DESIGN.md, protocol step 6), so a rejected batch leaves no DLQ entry behind.
//!
//! ```text
//!  worker:    <dir>/_staging/<channel>/<batch id>.jsonl      (write, fsync)
//!  committer: rename -> <dir>/<channel>/<batch id>.jsonl      (atomic, idempotent)
//! ```
//!
//! An entry names the channel, topic or stream, shard, position, arrival time, schema version,
//! error code, field (JSON pointer) and message; the payload only with `include_payload`.

use std::io::Write;
use std::path::{Path, PathBuf};

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
    /// Schema version the record was checked against (file path or GSR version id).
    pub schema_version: String,
    /// Error code (DESIGN.md, "DLQ error codes").
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
        let mut buf = Vec::with_capacity(entries.len() * 256);
        for e in entries {
            serde_json::to_writer(&mut buf, e).map_err(std::io::Error::other)?;
            buf.push(b'\n');
        }
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
