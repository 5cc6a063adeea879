//! The worker's side of the raw S3 destination: records are buffered exactly as read (raw means
//! raw: no decoding, nothing is dead-lettered), and a batch is encoded per shard into objects,
//! compressed off the async threads and staged under `_floe_staging/` (docs/raw-s3.md).

use std::sync::Arc;

use async_trait::async_trait;
use uuid::Uuid;

use super::{RawBuffer, RawIo};
use crate::destination::{BatchSink, Pushed, SinkError, Written};
use crate::dlq::DlqEntry;
use crate::lease::BatchStore;
use crate::model::{BatchFiles, Checkpoints, ShardId};
use crate::source::SourceRecord;

/// Buffers one raw channel's records and stages them as objects.
pub struct RawSink {
    channel: String,
    /// Topic or stream name, rendered into object keys.
    stream: String,
    io: RawIo,
    /// Where the committed checkpoints live ([`crate::lease::Delivered`]).
    batches: Arc<dyn BatchStore>,
    buffer: RawBuffer,
    /// When the checkpoints last read were committed by (the last commit id's UUIDv7 time).
    committed_by_ms: Option<i64>,
}

impl RawSink {
    /// A sink for raw channel `channel` reading `stream`.
    pub fn new(channel: &str, stream: &str, io: RawIo, batches: Arc<dyn BatchStore>) -> Self {
        RawSink {
            channel: channel.to_string(),
            stream: stream.to_string(),
            io,
            batches,
            buffer: RawBuffer::default(),
            committed_by_ms: None,
        }
    }
}

#[async_trait]
impl BatchSink for RawSink {
    fn buffered_bytes(&self) -> usize {
        self.buffer.buffered_bytes()
    }

    async fn committed_checkpoints(&mut self) -> Result<Checkpoints, SinkError> {
        let delivered = self
            .batches
            .get_delivered(&self.channel)
            .await
            .map_err(|e| SinkError::unavailable("read the delivered checkpoints", e))?;
        // The last commit's id is a UUIDv7: its time bounds every checkpoint's commit.
        self.committed_by_ms = delivered
            .as_ref()
            .and_then(|d| d.last_commit_id)
            .and_then(|id| crate::time::uuid_v7_ms(&id));
        Ok(delivered.map(|d| d.checkpoints).unwrap_or_default())
    }

    fn checkpoints_committed_by_ms(&self) -> Option<i64> {
        self.committed_by_ms
    }

    async fn push(
        &mut self,
        shard: &ShardId,
        records: Vec<SourceRecord>,
    ) -> Result<Vec<Pushed>, SinkError> {
        // Raw means raw: every record is delivered as read, JSON or not.
        Ok(records
            .into_iter()
            .map(|r| {
                self.buffer
                    .push(shard, r.position.clone(), r.arrival_ms, r.payload);
                Pushed::Buffered(r.position)
            })
            .collect())
    }

    fn clear(&mut self) {
        self.buffer.clear();
    }

    fn drop_shard(&mut self, shard: &ShardId) {
        self.buffer.drop_shard(shard);
    }

    async fn write(
        &mut self,
        batch_id: Uuid,
        shards: &std::collections::BTreeSet<ShardId>,
        _dlq_entries: &[DlqEntry],
    ) -> Result<Written, SinkError> {
        let records = self.buffer.take_shards(shards);
        let num_rows = records.len() as u64;
        let config = self.io.config.clone();
        let (channel, stream) = (self.channel.clone(), self.stream.clone());
        // Compression is CPU-bound: off the async threads.
        let objects =
            tokio::task::spawn_blocking(move || records.encode(&config, &channel, &stream))
                .await
                .map_err(|e| SinkError::unavailable("encode raw objects", e))?
                .map_err(|e| SinkError::unavailable("encode raw objects", e))?;
        let staged = self
            .io
            .store
            .stage(batch_id, objects)
            .await
            .map_err(|e| SinkError::unavailable("stage raw objects", e))?;
        Ok(Written {
            sizes: staged.iter().map(|o| o.bytes).collect(),
            num_rows,
            num_bytes: staged.iter().map(|o| o.bytes).sum(),
            files: BatchFiles::Raw { objects: staged },
        })
    }

    async fn undo(&mut self, files: &BatchFiles) {
        if let BatchFiles::Raw { objects } = files {
            self.io.store.discard(objects).await;
        }
    }
}
