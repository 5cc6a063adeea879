use std::collections::HashSet;

use arrow_array::{Array, Int64Array};

use super::*;
use crate::model::DlqCode;

/// Rows `{id, name, score}` keyed by `id` (a `long`), and a string key `region` for the
/// two-column cases.
fn schema() -> Arc<MappedSchema> {
    let doc = serde_json::json!({
        "type": "object",
        "properties": {
            "id": {"type": "integer"},
            "region": {"type": "string"},
            "name": {"type": ["string", "null"]},
            "score": {"type": "number"}
        },
        "required": ["id", "region"],
        "additionalProperties": false
    });
    Arc::new(MappedSchema::from_json_schema(&doc, "").unwrap())
}

fn settings(key: &[&str]) -> ChangeSettings {
    ChangeSettings {
        envelope: Envelope::Debezium,
        mode: WriteMode::Upsert,
        key: key.iter().map(|k| k.to_string()).collect(),
    }
}

fn rows(records: &[&str]) -> RecordBatch {
    let s = schema();
    let mut c = Converter::try_new(s.clone(), s.arrow_schema()).unwrap();
    for r in records {
        c.push(r.as_bytes()).unwrap();
    }
    c.finish()
}

fn ids(columns: &[ArrayRef]) -> Vec<i64> {
    let col = columns[0].as_any().downcast_ref::<Int64Array>().unwrap();
    (0..col.len()).map(|i| col.value(i)).collect()
}

fn s(n: i32) -> ShardId {
    ShardId::kafka_partition(n)
}

#[test]
fn a_rows_key_hashes_as_the_delete_of_its_key() {
    let schema = schema();
    for key in [&["id"][..], &["region", "id"][..]] {
        let mut changes = Changes::try_new(settings(key), &schema, 1 << 20).unwrap();
        let row = rows(&[r#"{"id":5,"region":"eu","name":"a","score":1.5}"#]);
        // A whole `before` row, and only the key's columns (Postgres' default replica
        // identity gives the other columns as null; additionalProperties does not apply).
        changes
            .delete(0, br#"{"id":5,"region":"eu","name":null,"score":2.5}"#)
            .unwrap();
        changes.delete(0, br#"{"region":"eu","id":5}"#).unwrap();
        let slots = {
            let mut slots = Slots::default();
            slots.slot(&s(0));
            slots
        };
        let (deleted, seqs) = changes.take_shards(&slots, &[s(0)].into()).unwrap();
        assert_eq!(seqs, [0, 1]);
        let row_hash = key_hashes(&changes.key_columns_of(&row).unwrap()).unwrap();
        let delete_hashes = key_hashes(&deleted).unwrap();
        assert_eq!(delete_hashes, [row_hash[0], row_hash[0]], "key {key:?}");
    }
}

#[test]
fn a_deleted_key_breaking_the_key_rules_is_refused() {
    let mut changes = Changes::try_new(settings(&["id"]), &schema(), 1 << 20).unwrap();
    let missing = changes.delete(0, br#"{"name":"a"}"#).unwrap_err();
    assert_eq!(missing.code, DlqCode::MissingRequiredField);
    let wrong = changes.delete(0, br#"{"id":"5"}"#).unwrap_err();
    assert_eq!(wrong.code, DlqCode::TypeMismatch);
}

#[test]
fn the_last_event_of_each_key_wins_across_rows_and_deletes() {
    // Events in read order (seq): row 1, delete 1, row 2, delete 2, row 1, delete 4, row 3,
    // delete 3, row 5 (other group), row 5.
    let group_a = rows(&[
        r#"{"id":1,"region":"x"}"#, // seq 0
        r#"{"id":2,"region":"x"}"#, // seq 2
        r#"{"id":1,"region":"x"}"#, // seq 4
        r#"{"id":3,"region":"x"}"#, // seq 6
        r#"{"id":5,"region":"x"}"#, // seq 8
    ]);
    let group_b = rows(&[r#"{"id":5,"region":"x"}"#]); // seq 9
    let key = |b: &RecordBatch| vec![b.column_by_name("id").unwrap().clone()];
    let (key_a, key_b) = (key(&group_a), key(&group_b));
    let deleted: Vec<ArrayRef> = vec![Arc::new(Int64Array::from(vec![1, 2, 4, 3]))];
    let rows = [
        KeyedRows {
            key: &key_a,
            seqs: &[0, 2, 4, 6, 8],
        },
        KeyedRows {
            key: &key_b,
            seqs: &[9],
        },
    ];
    let (masks, deleted_keys) = last_event_per_key(&rows, &deleted, &[1, 3, 5, 7]).unwrap();
    let mask: Vec<bool> = masks[0]
        .as_ref()
        .unwrap()
        .iter()
        .map(Option::unwrap)
        .collect();
    // 1: its second row (after its delete); 2 and 3: deleted after their rows; 5: the later
    // group's row.
    assert_eq!(mask, [false, false, true, false, false]);
    assert!(
        masks[1].is_none(),
        "a group whose every row is last is not filtered"
    );
    let hash =
        |id: i64| key_hashes(&[Arc::new(Int64Array::from(vec![id])) as ArrayRef]).unwrap()[0];
    let got: HashSet<KeyHash> = deleted_keys.iter().copied().collect();
    assert_eq!(deleted_keys.len(), 3, "each key once");
    assert_eq!(got, [hash(2), hash(3), hash(4)].into());
    // Never both: no written row's key is deleted.
    assert!(!got.contains(&hash(1)) && !got.contains(&hash(5)));
}

#[test]
fn a_key_deleted_twice_is_listed_once() {
    let deleted: Vec<ArrayRef> = vec![Arc::new(Int64Array::from(vec![7, 7]))];
    let (masks, keys) = last_event_per_key(&[], &deleted, &[0, 1]).unwrap();
    assert!(masks.is_empty());
    assert_eq!(keys.len(), 1);
}

/// Deletes of three shards interleaved; shard 1 dropped, shard 2 not in the batch: shard 0's
/// keys are written, shard 2's kept for a later batch, shard 1's gone, each with its seqs.
#[test]
fn deleted_keys_follow_their_shard_through_drops_and_partial_writes() {
    let mut changes = Changes::try_new(settings(&["id"]), &schema(), 1 << 20).unwrap();
    let mut slots = Slots::default();
    for (shard, id) in [(0, 10), (1, 20), (2, 30), (0, 11), (1, 21), (2, 31)] {
        let slot = slots.slot(&s(shard));
        changes
            .delete(slot, format!(r#"{{"id":{id}}}"#).as_bytes())
            .unwrap();
    }
    slots.drop_shard(&s(1));
    let (written, seqs) = changes.take_shards(&slots, &[s(0)].into()).unwrap();
    assert_eq!(ids(&written), [10, 11]);
    assert_eq!(seqs, [0, 3]);
    assert!(changes.keeps_any(), "shard 2's keys stay buffered");
    // Shard 2 pushes again before its batch: its kept keys come first, in read order.
    let slot = slots.slot(&s(2));
    changes.delete(slot, br#"{"id":32}"#).unwrap();
    let (written, seqs) = changes.take_shards(&slots, &[s(2)].into()).unwrap();
    assert_eq!(ids(&written), [30, 31, 32]);
    assert_eq!(seqs, [2, 5, 6]);
    assert!(!changes.keeps_any());
    assert_eq!(changes.take_counts().get("delete"), Some(&7));
    // A key that breaks the schema goes to the DLQ and is not counted as a delete.
    let reason = changes.delete(slot, br#"{"id":"x"}"#).unwrap_err();
    assert_eq!(reason.code, DlqCode::TypeMismatch, "{reason:?}");
    assert_eq!(changes.take_counts().get("delete"), None);
}

#[test]
fn append_mode_counts_deletes_and_buffers_nothing() {
    let append = ChangeSettings {
        mode: WriteMode::Append,
        key: Vec::new(),
        ..settings(&[])
    };
    let mut changes = Changes::try_new(append, &schema(), 1 << 20).unwrap();
    assert_eq!(changes.next_seq(), None);
    changes.delete(0, b"{}").unwrap();
    assert!(!changes.keeps_any());
    let (keys, seqs) = changes
        .take_shards(&Slots::default(), &[s(0)].into())
        .unwrap();
    assert!(keys.is_empty() && seqs.is_empty());
    assert_eq!(changes.take_counts().get("delete"), Some(&1));
}

#[test]
fn key_files_live_under_the_tables_data_folder() {
    let id = uuid::Uuid::nil();
    assert_eq!(
        key_file_path("s3://b/wh/ns/t/", "orders", id),
        format!("s3://b/wh/ns/t/data/floe-keys/orders-{id}.keys")
    );
}
