//! Change data capture in the worker's sink (docs/cdc.md): each record of a channel with an
//! envelope is an event — a row to write, or a key to delete — and in `mode = "upsert"` a batch
//! keeps only the **last** event of each key, in read order, so that a key ends either as exactly
//! one row of the batch's data files or as one entry of its deleted-keys file, never both.
//!
//! ```text
//!  push:  record ─> envelope ─> Row(after)      ─> row converter   (seq n, shard slot)
//!                            └> Delete(before) ─> key converter   (seq n, shard slot)
//!  write: rows and keys of the batch's shards ─> key_hashes ─> last seq per key
//!           ─> rows whose seq is their key's last (arrow filter) ─> data files
//!           ─> deletes whose seq is their key's last ─> <table>/data/floe-keys/<channel>-<batch>.keys
//! ```
//!
//! Every event gets a sequence number (`seq`, the sink's read order) and, like rows, the shard
//! slot of its record ([`super::slots`]): a dropped shard's deletes go with its rows. Deleted
//! keys are converted by a converter of the key's columns only (the schema's
//! [`MappedSchema::key_projection`], the same value rules as the rows'), and both are hashed by
//! the same [`key_hashes`], so a row and the delete of its key hash alike. `mode = "append"`
//! with an envelope writes the rows and counts the deletes.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use arrow_array::{ArrayRef, BooleanArray, RecordBatch};

use super::deletes::keys::{key_hashes, KeyHash};
use super::slots::{split, split_values, Runs, Slot, Slots};
use crate::config::{Envelope, WriteMode};
use crate::convert::Converter;
use crate::model::{DlqReason, ShardId};
use crate::schema::{MappedSchema, SchemaError};

/// How a channel's records carry changes and how its table takes them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChangeSettings {
    /// `record.envelope`.
    pub envelope: Envelope,
    /// `destination.mode`.
    pub mode: WriteMode,
    /// `destination.key` (empty in append mode).
    pub key: Vec<String>,
}

/// The events of the sink's buffer that are not rows: deleted keys, with their order and
/// shard slots; and the sequence counter every event takes a number from.
pub(crate) struct Changes {
    settings: ChangeSettings,
    /// Upsert mode: converts deleted keys (objects holding at least the key's columns).
    keys: Option<Converter>,
    runs: Runs,
    seqs: Vec<u64>,
    /// Deleted keys kept back by a write of other shards: (keys, runs, seqs).
    kept: Vec<(RecordBatch, Runs, Vec<u64>)>,
    next_seq: u64,
    /// Events pushed since the last [`Changes::take_counts`], by op label.
    counts: HashMap<&'static str, u64>,
}

impl Changes {
    /// The change state of a channel whose rows are of `schema`.
    ///
    /// Errors: the key is not made of top-level fields of `schema` (checked at start already).
    pub fn try_new(
        settings: ChangeSettings,
        schema: &MappedSchema,
        max_record_size: usize,
    ) -> Result<Self, SchemaError> {
        let keys = if settings.mode == WriteMode::Upsert {
            let projected = Arc::new(schema.key_projection(&settings.key)?);
            let arrow = projected.arrow_schema();
            Some(Converter::try_new(projected, arrow)?.with_max_record_size(max_record_size))
        } else {
            None
        };
        Ok(Changes {
            settings,
            keys,
            runs: Runs::default(),
            seqs: Vec::new(),
            kept: Vec::new(),
            next_seq: 0,
            counts: HashMap::new(),
        })
    }

    /// The channel's envelope.
    pub fn envelope(&self) -> Envelope {
        self.settings.envelope
    }

    /// Whether the table is upserted (a batch keeps each key's last event).
    pub fn upsert(&self) -> bool {
        self.settings.mode == WriteMode::Upsert
    }

    /// The key's one column, when it has one (a bare message key names it).
    pub fn single_key_column(&self) -> Option<&str> {
        match self.settings.key.as_slice() {
            [one] => Some(one),
            _ => None,
        }
    }

    /// The next event's sequence number (upsert mode; `None` otherwise: rows need none).
    pub fn next_seq(&mut self) -> Option<u64> {
        if !self.upsert() {
            return None;
        }
        let seq = self.next_seq;
        self.next_seq += 1;
        Some(seq)
    }

    /// Counts one event of `op` (`upsert`, `delete`, `truncate`).
    pub fn count(&mut self, op: &'static str) {
        *self.counts.entry(op).or_default() += 1;
    }

    /// The events counted since the last call, by op.
    pub fn take_counts(&mut self) -> HashMap<&'static str, u64> {
        std::mem::take(&mut self.counts)
    }

    /// Buffers the delete of the key `key` holds (a JSON object), read from `slot`'s shard. In
    /// append mode nothing is buffered.
    ///
    /// Errors: the key's columns break the schema's rules (missing, null, wrong type): the
    /// record goes to the DLQ.
    /// Counted once buffered (a key sent to the DLQ is not: as a row that breaks the schema is
    /// not counted as an upsert).
    pub fn delete(&mut self, slot: Slot, key: &[u8]) -> Result<(), DlqReason> {
        let Some(seq) = self.next_seq() else {
            self.count("delete");
            return Ok(());
        };
        let keys = self.keys.as_mut().expect("upsert mode has a key converter");
        keys.push(key)?;
        self.runs.mark(slot, keys.num_rows());
        self.seqs.push(seq);
        self.count("delete");
        Ok(())
    }

    /// Bytes held by the buffered keys.
    pub fn buffered_bytes(&self) -> usize {
        let kept: usize = self
            .kept
            .iter()
            .map(|(b, _, _)| b.get_array_memory_size())
            .sum();
        self.keys.as_ref().map_or(0, Converter::buffered_bytes) + kept
    }

    /// Whether deleted keys of other shards stay buffered (their slots must stay known).
    pub fn keeps_any(&self) -> bool {
        !self.kept.is_empty() || self.keys.as_ref().is_some_and(|k| k.num_rows() > 0)
    }

    /// Forgets every buffered key.
    pub fn clear(&mut self) {
        if let Some(keys) = self.keys.as_mut() {
            keys.finish();
        }
        self.runs = Runs::default();
        self.seqs.clear();
        self.kept.clear();
    }

    /// Takes the deleted keys of `shards` (their key columns, in the key's order, and their
    /// seqs); other live shards' keys stay, dropped shards' keys go.
    ///
    /// Errors: arrow's filter kernel.
    pub fn take_shards(
        &mut self,
        slots: &Slots,
        shards: &BTreeSet<ShardId>,
    ) -> Result<(Vec<ArrayRef>, Vec<u64>), arrow_schema::ArrowError> {
        let Some(keys) = self.keys.as_mut() else {
            return Ok((Vec::new(), Vec::new()));
        };
        let mut pieces = std::mem::take(&mut self.kept);
        if keys.num_rows() > 0 {
            pieces.push((
                keys.finish(),
                std::mem::take(&mut self.runs),
                std::mem::take(&mut self.seqs),
            ));
        }
        let fate = |slot| slots.fate(slot, shards);
        let mut batches = Vec::new();
        let mut seqs = Vec::new();
        for (batch, runs, piece_seqs) in pieces {
            let (written_seqs, kept_seqs) = split_values(&piece_seqs, &runs, fate);
            let (written, kept) = split(batch, &runs, fate)?;
            if let Some((kept, kept_runs)) = kept {
                self.kept.push((kept, kept_runs, kept_seqs));
            }
            if written.num_rows() > 0 {
                batches.push(written);
                seqs.extend(written_seqs);
            }
        }
        let Some(first) = batches.first() else {
            return Ok((Vec::new(), Vec::new()));
        };
        let all = arrow_select::concat::concat_batches(&first.schema(), &batches)?;
        Ok((key_columns(&all, &self.settings.key)?, seqs))
    }

    /// The key's columns of `rows`, in the key's order.
    pub fn key_columns_of(
        &self,
        rows: &RecordBatch,
    ) -> Result<Vec<ArrayRef>, arrow_schema::ArrowError> {
        key_columns(rows, &self.settings.key)
    }
}

/// Where a batch's deleted keys are written: `<table location>/data/floe-keys/<channel>-<batch
/// id>.keys` (named in `BatchFiles::Iceberg::deleted_keys`, read by the committer).
pub fn key_file_path(table_location: &str, channel: &str, batch_id: uuid::Uuid) -> String {
    format!(
        "{}/data/floe-keys/{channel}-{batch_id}.keys",
        table_location.trim_end_matches('/')
    )
}

/// The columns named by `key` (top-level), in the key's order.
///
/// Errors: a column missing from `batch` (a bug: the key was checked against the schema).
fn key_columns(
    batch: &RecordBatch,
    key: &[String],
) -> Result<Vec<ArrayRef>, arrow_schema::ArrowError> {
    key.iter()
        .map(|name| {
            batch.column_by_name(name).cloned().ok_or_else(|| {
                arrow_schema::ArrowError::SchemaError(format!("no key column \"{name}\""))
            })
        })
        .collect()
}

/// Rows of one schema, their key columns and each row's event seq.
pub(crate) struct KeyedRows<'a> {
    /// The key columns of the rows (in the key's order).
    pub key: &'a [ArrayRef],
    /// Each row's seq.
    pub seqs: &'a [u64],
}

/// The last event per key of a batch: for each group of rows, which rows to write (`None`: all
/// of them), and the keys deleted by their last event (each once, in no order).
///
/// Errors: the key columns cannot be hashed (a type refused at start) or do not match the seqs.
pub(crate) fn last_event_per_key(
    rows: &[KeyedRows<'_>],
    deleted_key: &[ArrayRef],
    deleted_seqs: &[u64],
) -> Result<(Vec<Option<BooleanArray>>, Vec<KeyHash>), String> {
    let hash = |key: &[ArrayRef], seqs: &[u64]| -> Result<Vec<KeyHash>, String> {
        if key.is_empty() && seqs.is_empty() {
            return Ok(Vec::new());
        }
        let hashes = key_hashes(key).map_err(|e| e.to_string())?;
        if hashes.len() != seqs.len() {
            return Err(format!(
                "{} keys and {} event numbers",
                hashes.len(),
                seqs.len()
            ));
        }
        Ok(hashes)
    };
    let row_hashes = rows
        .iter()
        .map(|r| hash(r.key, r.seqs))
        .collect::<Result<Vec<_>, _>>()?;
    let delete_hashes = hash(deleted_key, deleted_seqs)?;
    let mut last: HashMap<KeyHash, u64> = HashMap::new();
    let events = row_hashes
        .iter()
        .zip(rows)
        .flat_map(|(h, r)| h.iter().zip(r.seqs))
        .chain(delete_hashes.iter().zip(deleted_seqs));
    for (h, seq) in events {
        let e = last.entry(*h).or_insert(*seq);
        *e = (*e).max(*seq);
    }
    let keep = row_hashes
        .iter()
        .zip(rows)
        .map(|(h, r)| {
            let mask: Vec<bool> = h.iter().zip(r.seqs).map(|(h, s)| last[h] == *s).collect();
            (!mask.iter().all(|k| *k)).then(|| BooleanArray::from(mask))
        })
        .collect();
    let deleted = delete_hashes
        .iter()
        .zip(deleted_seqs)
        .filter(|(h, s)| last[*h] == **s)
        .map(|(h, _)| *h)
        .collect();
    Ok((keep, deleted))
}

#[cfg(test)]
mod tests;
