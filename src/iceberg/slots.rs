//! Which shard each buffered row belongs to, so that the worker can drop one shard's rows (its
//! lease was lost, its reader rewinds) or write them in a batch of their own (a graceful hand-off)
//! while the other shards' rows stay buffered (docs/design.md, "One shard at a time").
//!
//! ```text
//!   push(S, records)   ─> rows appended to a converter; the run of rows is tagged with S's slot
//!   drop_shard(S)      ─> S's slot is dead; S's next rows get a new slot (no rows are moved)
//!   write(shards)      ─> per converter: rows of `shards` are written, rows of other live slots
//!                         stay buffered, rows of dead slots are dropped (arrow's filter kernel,
//!                         only when some row is not written)
//! ```
//!
//! The tags are runs over each converter's rows — one entry per run of one shard's rows, an
//! amortised push per record at most — never a per-record allocation.

use std::collections::{BTreeSet, HashMap};

use arrow_array::{BooleanArray, RecordBatch};

use crate::model::ShardId;

/// A slot: one shard during one stretch of buffering (a dropped shard's next rows get a new one).
pub(crate) type Slot = u32;

/// Runs of rows of one converter: `(slot, end)`, each run ending (exclusive) at `end`, the next
/// starting there.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Runs(Vec<(Slot, usize)>);

impl Runs {
    /// The converter holds `rows` rows now, the ones since the last mark being `slot`'s.
    pub fn mark(&mut self, slot: Slot, rows: usize) {
        match self.0.last_mut() {
            Some((_, end)) if *end >= rows => {}
            Some((s, end)) if *s == slot => *end = rows,
            _ => self.0.push((slot, rows)),
        }
    }

    /// Rows covered by the runs.
    fn len(&self) -> usize {
        self.0.last().map_or(0, |(_, end)| *end)
    }
}

/// What a write does with the rows of one slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fate {
    /// Written in this batch.
    Write,
    /// Stays buffered (another shard's, not in this batch).
    Keep,
    /// Dropped (the shard's rows were dropped since).
    Drop,
}

/// The slots of one buffer.
#[derive(Debug, Default)]
pub(crate) struct Slots {
    /// Per slot, its shard; `None` once its rows were dropped.
    shards: Vec<Option<ShardId>>,
    /// The slot each shard's next rows go to.
    current: HashMap<ShardId, Slot>,
}

impl Slots {
    /// The slot of `shard`'s next rows.
    pub fn slot(&mut self, shard: &ShardId) -> Slot {
        if let Some(slot) = self.current.get(shard) {
            return *slot;
        }
        let slot = self.shards.len() as Slot;
        self.shards.push(Some(shard.clone()));
        self.current.insert(shard.clone(), slot);
        slot
    }

    /// Drops the rows of `shard` buffered so far (they are filtered out at the next write).
    pub fn drop_shard(&mut self, shard: &ShardId) {
        if let Some(slot) = self.current.remove(shard) {
            self.shards[slot as usize] = None;
        }
    }

    /// Forgets every slot (the buffer is empty).
    pub fn clear(&mut self) {
        self.shards.clear();
        self.current.clear();
    }

    /// What a write of `batch` (the rows of `shards`) does with a slot's rows.
    pub fn fate(&self, slot: Slot, batch: &BTreeSet<ShardId>) -> Fate {
        match self.shards.get(slot as usize) {
            Some(Some(shard)) if batch.contains(shard) => Fate::Write,
            Some(Some(_)) => Fate::Keep,
            // A slot this buffer never gave out cannot be tagged on a row; write it rather
            // than lose it.
            None => Fate::Write,
            Some(None) => Fate::Drop,
        }
    }
}

/// Splits `rows` (tagged by `runs`) by each slot's fate: the rows to write, and the rows to keep
/// with their runs. Rows the runs do not cover are written (every row is tagged; this only
/// keeps an untagged row from being lost). Filters only when some row is not written.
///
/// Errors: arrow's filter kernel.
pub(crate) fn split(
    rows: RecordBatch,
    runs: &Runs,
    fate: impl Fn(Slot) -> Fate,
) -> Result<(RecordBatch, Option<(RecordBatch, Runs)>), arrow_schema::ArrowError> {
    let fates: Vec<(Fate, Slot, usize)> =
        runs.0.iter().map(|(s, end)| (fate(*s), *s, *end)).collect();
    if fates.iter().all(|(f, _, _)| *f == Fate::Write) {
        return Ok((rows, None));
    }
    debug_assert_eq!(runs.len(), rows.num_rows(), "every buffered row is tagged");
    let n = rows.num_rows();
    let mut write = Vec::with_capacity(n);
    let mut keep = Vec::with_capacity(n);
    let mut kept_runs = Runs::default();
    let mut start = 0;
    for (f, slot, end) in fates.iter().copied() {
        let end = end.min(n);
        let len = end.saturating_sub(start);
        write.extend(std::iter::repeat_n(f == Fate::Write, len));
        keep.extend(std::iter::repeat_n(f == Fate::Keep, len));
        if f == Fate::Keep && len > 0 {
            let kept_before = kept_runs.len();
            kept_runs.mark(slot, kept_before + len);
        }
        start = end;
    }
    // Untagged rows (none, by construction) are written.
    write.extend(std::iter::repeat_n(true, n.saturating_sub(start)));
    keep.extend(std::iter::repeat_n(false, n.saturating_sub(start)));
    let written = arrow_select::filter::filter_record_batch(&rows, &BooleanArray::from(write))?;
    let kept = if kept_runs.len() > 0 {
        Some((
            arrow_select::filter::filter_record_batch(&rows, &BooleanArray::from(keep))?,
            kept_runs,
        ))
    } else {
        None
    };
    Ok((written, kept))
}

/// Splits values kept beside the rows (one per row, in row order: the events' sequence numbers)
/// as [`split`] splits the rows: the values to write, and the values to keep. Empty values
/// (none kept) give two empty halves.
pub(crate) fn split_values<T: Copy>(
    values: &[T],
    runs: &Runs,
    fate: impl Fn(Slot) -> Fate,
) -> (Vec<T>, Vec<T>) {
    let mut write = Vec::new();
    let mut keep = Vec::new();
    if values.is_empty() {
        return (write, keep);
    }
    let mut start = 0;
    for (slot, end) in runs.0.iter().copied() {
        let end = end.min(values.len());
        let run = &values[start.min(end)..end];
        match fate(slot) {
            Fate::Write => write.extend_from_slice(run),
            Fate::Keep => keep.extend_from_slice(run),
            Fate::Drop => {}
        }
        start = end;
    }
    // Untagged values (none, by construction) are written, as `split` writes their rows.
    write.extend_from_slice(&values[start.min(values.len())..]);
    (write, keep)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow_array::{Array, Int64Array};
    use arrow_schema::{DataType, Field, Schema};

    use super::*;

    fn batch(ids: &[i64]) -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![Field::new("id", DataType::Int64, false)]));
        RecordBatch::try_new(schema, vec![Arc::new(Int64Array::from(ids.to_vec()))]).unwrap()
    }

    fn ids(b: &RecordBatch) -> Vec<i64> {
        let col = b.column(0).as_any().downcast_ref::<Int64Array>().unwrap();
        (0..col.len()).map(|i| col.value(i)).collect()
    }

    fn s(n: i32) -> ShardId {
        ShardId::kafka_partition(n)
    }

    /// Rows of three shards interleaved by read batch; shard 1 dropped, shard 2 not in the
    /// batch: shard 0's rows are written, shard 2's kept with their runs, shard 1's gone.
    #[test]
    fn a_write_keeps_other_shards_rows_and_drops_dropped_ones() {
        let mut slots = Slots::default();
        let mut runs = Runs::default();
        let mut n = 0;
        for (shard, k) in [(0, 2), (1, 3), (2, 1), (0, 1), (1, 1), (2, 2)] {
            let slot = slots.slot(&s(shard));
            for _ in 0..k {
                n += 1;
                runs.mark(slot, n);
            }
        }
        // Row ids: 10s for shard 0, 20s for shard 1, 30s for shard 2, in read order.
        let rows = batch(&[10, 11, 20, 21, 22, 30, 12, 23, 31, 32]);
        slots.drop_shard(&s(1));
        let only0: BTreeSet<ShardId> = [s(0)].into();
        let values: Vec<i64> = ids(&rows);
        let (written_values, kept_values) =
            split_values(&values, &runs, |slot| slots.fate(slot, &only0));
        assert_eq!(written_values, [10, 11, 12]);
        assert_eq!(kept_values, [30, 31, 32]);
        let (written, kept) = split(rows, &runs, |slot| slots.fate(slot, &only0)).unwrap();
        assert_eq!(ids(&written), [10, 11, 12]);
        let (kept, kept_runs) = kept.unwrap();
        assert_eq!(ids(&kept), [30, 31, 32]);
        let only2: BTreeSet<ShardId> = [s(2)].into();
        let (written, kept) = split(kept, &kept_runs, |slot| slots.fate(slot, &only2)).unwrap();
        assert_eq!(ids(&written), [30, 31, 32]);
        assert!(kept.is_none());
        // The dropped shard's next rows get a slot of their own, written normally.
        let again = slots.slot(&s(1));
        assert_eq!(slots.fate(again, &[s(1)].into()), Fate::Write);
    }

    #[test]
    fn a_write_of_every_shard_filters_nothing() {
        let mut slots = Slots::default();
        let mut runs = Runs::default();
        runs.mark(slots.slot(&s(0)), 2);
        runs.mark(slots.slot(&s(1)), 2); // a rejected record: no row added
        runs.mark(slots.slot(&s(1)), 3);
        assert_eq!(runs.0, [(0, 2), (1, 3)]);
        let all: BTreeSet<ShardId> = [s(0), s(1)].into();
        let (written, kept) =
            split(batch(&[1, 2, 3]), &runs, |slot| slots.fate(slot, &all)).unwrap();
        assert_eq!(ids(&written), [1, 2, 3]);
        assert!(kept.is_none());
    }
}
