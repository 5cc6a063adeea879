//! floe's vocabulary in the table: the `floe.*` table properties and snapshot-summary keys,
//! and the one place they are encoded and decoded (docs/design.md, "The exactly-once protocol").

use std::collections::{BTreeMap, HashMap, HashSet};

use iceberg::table::Table;
use uuid::Uuid;

use crate::model::{Checkpoints, PendingBatch};

/// Table property naming the channel that created (and owns) the table.
pub const PROP_CHANNEL: &str = "floe.channel";
/// Table property holding the committed checkpoints (JSON object shard → position).
pub const PROP_CHECKPOINTS: &str = "floe.checkpoints";
/// Table property holding the id of the last floe commit (reconciles unknown outcomes).
pub const PROP_LAST_COMMIT_ID: &str = "floe.last-commit-id";
/// Table property holding the committer lease counter of the last committer that wrote the
/// table; a committer whose lease counter is lower is stale and stops.
pub const PROP_COMMITTER_EPOCH: &str = "floe.committer-epoch";
/// Table property: the ids of the batches the last floe commit committed (comma-separated), so
/// that a committer that finds one of them still pending (its predecessor crashed between the
/// commit and finishing the batch) recovers it instead of rejecting it, whatever snapshots
/// expiry or compaction (floe's, S3 Tables', Spark's) have removed since. Bounded by the batches
/// of one round.
pub const PROP_UNFINISHED_BATCH_IDS: &str = "floe.unfinished-batch-ids";
/// Snapshot summary property: the commit id.
pub const SUMMARY_COMMIT_ID: &str = "floe.commit-id";
/// Snapshot summary property: comma-separated ids of the batches the snapshot added.
pub const SUMMARY_BATCH_IDS: &str = "floe.batch-ids";
/// Snapshot summary property: the shard ranges the snapshot added (JSON, for audit).
pub const SUMMARY_RANGES: &str = "floe.ranges";

/// A `floe.*` value in the table that floe cannot read: the table was changed by hand or by
/// another program. Fatal for the channel (no retry reads a different value).
#[derive(Debug, thiserror::Error)]
#[error("bad {key} in the table: {message}")]
pub struct TableStateError {
    /// The property (`floe.checkpoints`).
    pub key: &'static str,
    /// What is wrong with its value.
    pub message: String,
}

/// Reads the committed checkpoints of a table ([`PROP_CHECKPOINTS`]; empty when unset).
///
/// Errors: [`TableStateError`] when the property is not valid JSON checkpoints.
pub fn table_checkpoints(table: &Table) -> Result<Checkpoints, TableStateError> {
    match table.metadata().properties().get(PROP_CHECKPOINTS) {
        None => Ok(Checkpoints::default()),
        Some(text) => Checkpoints::from_property(text).map_err(|e| TableStateError {
            key: PROP_CHECKPOINTS,
            message: e.to_string(),
        }),
    }
}

/// Ids of the batches the table shows committed: those of the last floe commit
/// ([`PROP_UNFINISHED_BATCH_IDS`], independent of snapshot history) and those some snapshot
/// still in the metadata added ([`SUMMARY_BATCH_IDS`]).
pub fn committed_batch_ids(table: &Table) -> HashSet<Uuid> {
    let metadata = table.metadata();
    metadata
        .snapshots()
        .filter_map(|s| s.summary().additional_properties.get(SUMMARY_BATCH_IDS))
        .chain(metadata.properties().get(PROP_UNFINISHED_BATCH_IDS))
        .flat_map(|ids| decode_batch_ids(ids))
        .collect()
}

/// [`SUMMARY_BATCH_IDS`]: the batch ids, comma-separated, in order.
pub fn encode_batch_ids(ids: &[Uuid]) -> String {
    ids.iter()
        .map(Uuid::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

/// The batch ids of a [`SUMMARY_BATCH_IDS`] value; text that is not a UUID is skipped (a value
/// written by another program names no floe batch).
pub fn decode_batch_ids(text: &str) -> Vec<Uuid> {
    text.split(',')
        .filter_map(|id| Uuid::parse_str(id).ok())
        .collect()
}

/// [`SUMMARY_RANGES`]: per shard, the `(after,last]` ranges the snapshot added, as a JSON
/// object shard → list of range texts (for audit and `floe channel describe`).
pub fn encode_ranges(batches: &[&PendingBatch]) -> String {
    let ranges: BTreeMap<String, Vec<String>> =
        batches
            .iter()
            .flat_map(|b| b.shards.iter())
            .fold(BTreeMap::new(), |mut m, s| {
                m.entry(s.shard.to_string())
                    .or_default()
                    .push(s.range.to_string());
                m
            });
    serde_json::to_string(&ranges).expect("ranges serialize")
}

/// The shards of a [`SUMMARY_RANGES`] value, with their range texts; `None` when it is not
/// floe's JSON.
pub fn decode_ranges(text: &str) -> Option<BTreeMap<String, Vec<String>>> {
    serde_json::from_str(text).ok()
}

/// The snapshot summary of a floe commit `commit_id` adding `batches`.
pub fn commit_summary(commit_id: Uuid, batches: &[&PendingBatch]) -> HashMap<String, String> {
    let ids: Vec<Uuid> = batches.iter().map(|b| b.batch_id).collect();
    HashMap::from([
        (SUMMARY_COMMIT_ID.to_string(), commit_id.to_string()),
        (SUMMARY_BATCH_IDS.to_string(), encode_batch_ids(&ids)),
        (SUMMARY_RANGES.to_string(), encode_ranges(batches)),
    ])
}

/// The table properties a floe commit sets, in the same transaction as its data files
/// (docs/design.md, protocol step 4): [`PROP_CHECKPOINTS`], [`PROP_LAST_COMMIT_ID`],
/// [`PROP_COMMITTER_EPOCH`] and [`PROP_UNFINISHED_BATCH_IDS`] (`unfinished`: the batches this
/// commit commits and those it recovered, none of them finished yet).
pub fn commit_properties(
    checkpoints: &Checkpoints,
    commit_id: Uuid,
    epoch: u64,
    unfinished: &[Uuid],
) -> [(String, String); 4] {
    [
        (PROP_CHECKPOINTS.to_string(), checkpoints.to_property()),
        (PROP_LAST_COMMIT_ID.to_string(), commit_id.to_string()),
        (PROP_COMMITTER_EPOCH.to_string(), epoch.to_string()),
        (
            PROP_UNFINISHED_BATCH_IDS.to_string(),
            encode_batch_ids(unfinished),
        ),
    ]
}

/// The last floe commit id of a table ([`PROP_LAST_COMMIT_ID`]), `None` when unset or not a UUID.
pub fn last_commit_id(properties: &HashMap<String, String>) -> Option<Uuid> {
    properties
        .get(PROP_LAST_COMMIT_ID)
        .and_then(|v| Uuid::parse_str(v).ok())
}

/// The committer epoch of the last floe commit ([`PROP_COMMITTER_EPOCH`]; 0 when unset or
/// unreadable, so that any committer may write a table floe has not committed to).
pub fn table_epoch(table: &Table) -> u64 {
    table
        .metadata()
        .properties()
        .get(PROP_COMMITTER_EPOCH)
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{
        BatchFiles, CheckpointRange, Position, SequenceNumber, ShardId, ShardRange,
    };
    use proptest::prelude::*;

    fn position() -> impl Strategy<Value = Position> {
        prop_oneof![
            (0i64..i64::MAX).prop_map(Position::Offset),
            "[1-9][0-9]{0,60}"
                .prop_map(|s| Position::Sequence(SequenceNumber::try_new(&s).unwrap())),
            Just(Position::ShardEnd),
        ]
    }

    fn batch(id: Uuid, ranges: Vec<(String, Option<Position>, Position)>) -> PendingBatch {
        PendingBatch {
            channel: "c".into(),
            batch_id: id,
            worker_id: "w".into(),
            shards: ranges
                .into_iter()
                .map(|(shard, after, last)| ShardRange {
                    shard: ShardId(shard),
                    range: CheckpointRange {
                        after_exclusive: after,
                        last_inclusive: last,
                    },
                    lease_counter: 1,
                })
                .collect(),
            files: BatchFiles::Iceberg {
                data_files: vec![],
                dlq_staged: None,
                deleted_keys: None,
            },
            num_rows: 0,
            num_dead_lettered: 0,
            dead_lettered_by_code: Default::default(),
            data_bytes: 0,
            oldest_read_at_ms: 0,
        }
    }

    proptest! {
        #[test]
        fn batch_ids_round_trip(ids in proptest::collection::vec(any::<u128>(), 0..20)) {
            let ids: Vec<Uuid> = ids.into_iter().map(Uuid::from_u128).collect();
            prop_assert_eq!(decode_batch_ids(&encode_batch_ids(&ids)), ids);
        }

        #[test]
        fn commit_properties_round_trip(
            shards in proptest::collection::btree_map("[a-z0-9-]{1,20}", position(), 0..8),
            commit in any::<u128>(),
            epoch in any::<u64>(),
        ) {
            let checkpoints = Checkpoints(shards.into_iter().map(|(s, p)| (ShardId(s), p)).collect());
            let commit_id = Uuid::from_u128(commit);
            let unfinished = vec![Uuid::from_u128(commit ^ 1)];
            let props: HashMap<String, String> =
                commit_properties(&checkpoints, commit_id, epoch, &unfinished).into_iter().collect();
            prop_assert_eq!(decode_batch_ids(&props[PROP_UNFINISHED_BATCH_IDS]), unfinished);
            prop_assert_eq!(Checkpoints::from_property(&props[PROP_CHECKPOINTS]).unwrap(), checkpoints);
            prop_assert_eq!(last_commit_id(&props), Some(commit_id));
            prop_assert_eq!(props[PROP_COMMITTER_EPOCH].parse::<u64>().unwrap(), epoch);
        }

        #[test]
        fn summary_ranges_round_trip(
            ranges in proptest::collection::vec(
                ("[a-z0-9-]{1,12}", proptest::option::of(position()), position()), 1..6),
        ) {
            let b = batch(Uuid::from_u128(7), ranges.clone());
            let summary = commit_summary(Uuid::from_u128(9), &[&b]);
            let decoded = decode_ranges(&summary[SUMMARY_RANGES]).unwrap();
            for (shard, after, last) in &ranges {
                let text = CheckpointRange { after_exclusive: after.clone(), last_inclusive: last.clone() }.to_string();
                prop_assert!(decoded[shard].contains(&text));
            }
            prop_assert_eq!(decode_batch_ids(&summary[SUMMARY_BATCH_IDS]), vec![b.batch_id]);
        }
    }

    #[test]
    fn foreign_batch_ids_and_ranges_are_skipped_not_errors() {
        assert_eq!(decode_batch_ids("not-a-uuid,,x"), Vec::<Uuid>::new());
        assert_eq!(decode_ranges("{not json"), None);
        assert_eq!(
            last_commit_id(&HashMap::from([(PROP_LAST_COMMIT_ID.into(), "x".into())])),
            None
        );
    }
}
