//! The worker's side of the Iceberg destination: records are decoded (plain JSON or the GSR wire
//! format) and converted into the columns of the table's current schema; a batch is written as
//! Parquet data files under the table location plus one staged DLQ object (docs/design.md,
//! protocol step 2). Nothing is referenced by the table until the committer commits the batch.

use std::sync::Arc;

use async_trait::async_trait;
use iceberg::table::Table;
use uuid::Uuid;

use super::table::check_same_table;
use super::table_state::table_checkpoints;
use super::writer::{data_file_paths, write_data_files};
use super::IcebergIo;
use crate::convert::Converter;
use crate::destination::{BatchSink, Pushed, SinkError, Written};
use crate::dlq::DlqEntry;
use crate::gsr::wire::PayloadError;
use crate::model::{BatchFiles, Checkpoints, ShardId};
use crate::source::SourceRecord;
use crate::telemetry;

/// Buffers one channel's records as Arrow columns and writes them as Parquet data files.
pub struct IcebergSink {
    channel: String,
    io: IcebergIo,
    /// The table as last loaded: its uuid is the one every later load must still have.
    table: Box<Table>,
    converter: Box<Converter>,
}

impl IcebergSink {
    /// Loads the channel's table and builds a converter for its current schema; records larger
    /// than `max_record_size` bytes are rejected as `RECORD_TOO_LARGE`.
    ///
    /// Errors: `TableGone`, `Incompatible` (the table's columns differ from the schema's),
    /// `Unavailable`.
    pub async fn open(
        channel: &str,
        io: IcebergIo,
        max_record_size: usize,
    ) -> Result<Self, SinkError> {
        telemetry::record_catalog_table_load(channel, "worker");
        let table = io
            .catalog
            .load_table(&io.ident)
            .await
            .map_err(|e| SinkError::from_iceberg("load table", e))?;
        let arrow = Arc::new(
            iceberg::arrow::schema_to_arrow_schema(table.metadata().current_schema())
                .map_err(|e| SinkError::Incompatible(e.to_string()))?,
        );
        let converter = Converter::try_new(io.schema.clone(), arrow)
            .map_err(|e| SinkError::Incompatible(e.to_string()))?
            .with_max_record_size(max_record_size);
        Ok(IcebergSink {
            channel: channel.to_string(),
            io,
            table: Box::new(table),
            converter: Box::new(converter),
        })
    }
}

#[async_trait]
impl BatchSink for IcebergSink {
    fn buffered_bytes(&self) -> usize {
        self.converter.buffered_bytes()
    }

    async fn committed_checkpoints(&mut self) -> Result<Checkpoints, SinkError> {
        telemetry::record_catalog_table_load(&self.channel, "worker");
        let fresh = self
            .io
            .catalog
            .load_table(&self.io.ident)
            .await
            .map_err(|e| SinkError::from_iceberg("load table", e))?;
        check_same_table(&self.io.ident, &self.table.metadata().uuid(), &fresh)
            .map_err(|e| SinkError::TableGone(e.to_string()))?;
        let cp = table_checkpoints(&fresh).map_err(|e| SinkError::Incompatible(e.to_string()))?;
        *self.table = fresh;
        Ok(cp)
    }

    /// The last data commit's time: maintenance snapshots (compaction, expiry) keep the
    /// checkpoints as they were and come later, so they would only loosen the bound.
    fn checkpoints_committed_by_ms(&self) -> Option<i64> {
        self.table
            .metadata()
            .snapshots()
            .filter(|s| {
                !s.summary()
                    .additional_properties
                    .contains_key(crate::iceberg::rewrite::SUMMARY_MAINTENANCE)
            })
            .map(|s| s.timestamp_ms())
            .max()
            .or_else(|| {
                // Only maintenance snapshots retained: the current one still bounds it.
                self.table
                    .metadata()
                    .current_snapshot()
                    .map(|s| s.timestamp_ms())
            })
    }

    async fn push(
        &mut self,
        _shard: &ShardId,
        records: Vec<SourceRecord>,
    ) -> Result<Vec<Pushed>, SinkError> {
        let mut out = Vec::with_capacity(records.len());
        for record in records {
            let pushed = match self.io.record_decoder.payload(&record.payload).await {
                Ok(payload) => self.converter.push(payload),
                Err(PayloadError::Record(reason)) => Err(reason),
                Err(e) => {
                    telemetry::record_schema_lookup_error(&self.channel);
                    return Err(SinkError::unavailable("schema registry", e));
                }
            };
            out.push(match pushed {
                Ok(_hour) => Pushed::Buffered(record.position),
                Err(reason) => Pushed::Rejected { reason, record },
            });
        }
        Ok(out)
    }

    fn clear(&mut self) {
        let _ = self.converter.finish();
    }

    async fn write(
        &mut self,
        batch_id: Uuid,
        dlq_entries: &[DlqEntry],
    ) -> Result<Written, SinkError> {
        let rows = self.converter.finish();
        let files = write_data_files(&self.table, &self.io.writer, batch_id, rows)
            .await
            .map_err(|e| SinkError::from_iceberg("write data files", e))?;
        let dlq_staged = self.io.dlq.stage(batch_id, dlq_entries).await;
        if !dlq_entries.is_empty() {
            telemetry::record_dlq_write(&self.channel, "stage", dlq_staged.is_ok());
        }
        let dlq_staged = match dlq_staged {
            Ok(s) => s,
            Err(e) => {
                for p in &files.paths {
                    let _ = self.table.file_io().delete(p).await;
                }
                return Err(SinkError::unavailable("stage dlq entries", e));
            }
        };
        Ok(Written {
            files: BatchFiles::Iceberg {
                data_files: files.data_files_json,
                dlq_staged,
            },
            sizes: files.sizes,
            num_rows: files.num_rows,
            num_bytes: files.num_bytes,
        })
    }

    async fn undo(&mut self, files: &BatchFiles) {
        let BatchFiles::Iceberg {
            data_files,
            dlq_staged,
        } = files
        else {
            return;
        };
        for p in data_file_paths(data_files) {
            let _ = self.table.file_io().delete(&p).await;
        }
        if let Some(s) = dlq_staged {
            self.io.dlq.discard(s).await;
        }
    }
}
