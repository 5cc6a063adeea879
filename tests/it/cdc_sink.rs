//! The worker's side of change data capture (issue 42, docs/cdc.md): Debezium-shaped JSON and an
//! upsert envelope's tombstones pushed through the real Iceberg sink of an upsert table; the
//! data files it writes are read back from Parquet and the batch's key file is decoded, so that
//! each key ends either as exactly one row (its last) or as one deleted key, never both.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Instant;

use arrow_array::cast::AsArray;
use arrow_array::types::Int64Type;
use arrow_array::{ArrayRef, Int64Array, RecordBatch};
use floe::config::{Envelope, WriteMode};
use floe::destination::{BatchSink, Pushed};
use floe::dlq::LocalDlq;
use floe::iceberg::changes::ChangeSettings;
use floe::iceberg::deletes::keys::{key_hashes, read_key_file, KeyHash};
use floe::iceberg::sink::IcebergSink;
use floe::model::{BatchFiles, Position, ShardId};
use floe::source::SourceRecord;
use iceberg::{NamespaceIdent, TableIdent};

const SCHEMA: &str = r#"{
  "type": "object",
  "properties": {
    "id": {"type": "integer"},
    "name": {"type": ["string", "null"]},
    "qty": {"type": "integer"}
  },
  "required": ["id"]
}"#;

struct Rig {
    _dir: tempfile::TempDir,
    sink: IcebergSink,
    table: iceberg::table::Table,
}

/// An upsert table keyed by `id` (unpartitioned), and a sink for it with `envelope`.
async fn rig(envelope: Envelope) -> Rig {
    let dir = tempfile::tempdir().unwrap();
    let catalog = floe::catalog::open_sql_catalog(
        &dir.path().join("c.sqlite"),
        &dir.path().join("wh"),
        "floe",
    )
    .await
    .unwrap();
    let schema = Arc::new(
        floe::schema::MappedSchema::from_json_schema(&serde_json::from_str(SCHEMA).unwrap(), "")
            .unwrap(),
    );
    let ident = TableIdent::new(NamespaceIdent::new("cdc".into()), "orders".into());
    let spec = floe::iceberg::table::TableSpec {
        ident: ident.clone(),
        channel: "orders".into(),
        compression_codec: "zstd".into(),
        target_file_size_bytes: 128 << 20,
        partition: Vec::new(),
        sort: Vec::new(),
        key: vec!["id".into()],
        format_version: iceberg::spec::FormatVersion::V2,
    };
    let table = floe::iceberg::table::ensure_table(catalog.as_ref(), &spec, &schema)
        .await
        .unwrap();
    let io = floe::iceberg::IcebergIo {
        catalog,
        ident,
        schema,
        dlq: LocalDlq::new(dir.path().join("dlq"), "orders").into(),
        writer: floe::iceberg::writer::WriterSettings {
            channel: "orders".into(),
            compression: floe::iceberg::writer::ParquetCompression::Zstd(1),
            target_file_size: 128 << 20,
            max_open_partitions: 8,
        },
        record_decoder: Default::default(),
        maintenance: Default::default(),
        swap: None,
        lister: None,
        evolution: None,
        route: None,
        changes: Some(ChangeSettings {
            envelope,
            mode: WriteMode::Upsert,
            key: vec!["id".into()],
        }),
    };
    let sink = IcebergSink::open("orders", io, 1 << 20).await.unwrap();
    Rig {
        _dir: dir,
        sink,
        table,
    }
}

fn record(shard: &ShardId, offset: i64, key: Option<&str>, value: Option<&str>) -> SourceRecord {
    SourceRecord {
        shard: shard.clone(),
        position: Position::Offset(offset),
        key: key.map(|k| k.as_bytes().to_vec()),
        payload: value.unwrap_or_default().as_bytes().to_vec(),
        tombstone: value.is_none(),
        arrival_ms: 0,
        read_at: Instant::now(),
    }
}

/// A Debezium event, wrapped as the JSON converter with `schemas.enable` writes it when
/// `wrapped`.
fn event(op: &str, before: Option<i64>, after: Option<(i64, &str, i64)>, wrapped: bool) -> String {
    let before = before.map_or("null".into(), |id| {
        format!(r#"{{"id":{id},"name":null,"qty":null}}"#)
    });
    let after = after.map_or("null".into(), |(id, name, qty)| {
        format!(r#"{{"id":{id},"name":"{name}","qty":{qty}}}"#)
    });
    let payload = format!(
        r#"{{"before":{before},"after":{after},"source":{{"connector":"postgresql","db":"shop","table":"orders"}},"op":"{op}","ts_ms":1700000000000}}"#
    );
    if wrapped {
        format!(
            r#"{{"schema":{{"type":"struct","optional":false,"name":"shop.public.orders.Envelope"}},"payload":{payload}}}"#
        )
    } else {
        payload
    }
}

/// Every row of the batch's data files (read back from Parquet), by id: (name, qty).
async fn rows_of(
    table: &iceberg::table::Table,
    files: &BatchFiles,
) -> BTreeMap<i64, (String, i64)> {
    let BatchFiles::Iceberg { data_files, .. } = files else {
        panic!("an Iceberg batch")
    };
    let mut out = BTreeMap::new();
    for path in floe::iceberg::writer::data_file_paths(data_files) {
        let bytes = table
            .file_io()
            .new_input(&path)
            .unwrap()
            .read()
            .await
            .unwrap();
        let reader =
            parquet::arrow::arrow_reader::ParquetRecordBatchReader::try_new(bytes, 1024).unwrap();
        for batch in reader {
            let batch: RecordBatch = batch.unwrap();
            let ids = batch
                .column_by_name("id")
                .unwrap()
                .as_primitive::<Int64Type>();
            let names = batch.column_by_name("name").unwrap().as_string::<i32>();
            let qty = batch
                .column_by_name("qty")
                .unwrap()
                .as_primitive::<Int64Type>();
            for i in 0..batch.num_rows() {
                let previous = out.insert(ids.value(i), (names.value(i).to_string(), qty.value(i)));
                assert!(previous.is_none(), "key {} written twice", ids.value(i));
            }
        }
    }
    out
}

/// The DLQ codes of the records a push rejected, in order.
fn rejected_codes(pushed: &[Pushed]) -> Vec<&'static str> {
    pushed
        .iter()
        .filter_map(|p| match p {
            Pushed::Rejected { reason, .. } => Some(reason.code.as_str()),
            _ => None,
        })
        .collect()
}

fn hash_of(ids: &[i64]) -> BTreeSet<KeyHash> {
    let col: ArrayRef = Arc::new(Int64Array::from(ids.to_vec()));
    key_hashes(&[col]).unwrap().into_iter().collect()
}

async fn deleted_of(table: &iceberg::table::Table, files: &BatchFiles) -> BTreeSet<KeyHash> {
    let BatchFiles::Iceberg { deleted_keys, .. } = files else {
        panic!("an Iceberg batch")
    };
    let Some(path) = deleted_keys else {
        return BTreeSet::new();
    };
    assert!(
        path.contains("/data/floe-keys/orders-") && path.ends_with(".keys"),
        "{path}"
    );
    let keys = read_key_file(table.file_io(), path).await.unwrap();
    let set: BTreeSet<KeyHash> = keys.iter().copied().collect();
    assert_eq!(set.len(), keys.len(), "each key once");
    set
}

#[tokio::test]
async fn debezium_events_of_two_shards_keep_each_keys_last_event() {
    let mut rig = rig(Envelope::Debezium).await;
    let (s0, s1) = (ShardId::kafka_partition(0), ShardId::kafka_partition(1));
    // Shard 0 holds keys 1..=4, shard 1 keys 10..=12 (one key, one shard), both converter
    // framings mixed.
    let shard0 = [
        event("r", None, Some((1, "a", 1)), false),
        event("c", None, Some((2, "b", 1)), true),
        event("u", Some(1), Some((1, "a2", 2)), false),
        event("d", Some(2), None, true),
        event("c", None, Some((3, "c", 1)), false),
        event("d", Some(3), None, false),
        event("c", None, Some((3, "c2", 5)), true), // re-inserted after its delete
        event("d", Some(4), None, false),           // a key never written in this batch
        event("t", None, None, false),              // skipped
    ];
    let shard1 = [
        event("c", None, Some((10, "x", 1)), false),
        event("c", None, Some((11, "y", 1)), false),
        event("u", Some(10), Some((10, "x2", 7)), true),
        event("d", Some(11), None, false),
        r#"{"op":"u","after":null}"#.to_string(), // malformed: to the DLQ
        event("c", None, Some((12, "z", 1)), false),
    ];
    let push = |shard: &ShardId, events: &[String]| {
        events
            .iter()
            .enumerate()
            .map(|(i, e)| record(shard, i as i64, None, Some(e)))
            .collect::<Vec<_>>()
    };
    // Interleaved read batches of the two shards.
    let mut pushed = Vec::new();
    pushed.extend(rig.sink.push(&s0, push(&s0, &shard0[..4])).await.unwrap());
    pushed.extend(rig.sink.push(&s1, push(&s1, &shard1[..3])).await.unwrap());
    pushed.extend(rig.sink.push(&s0, push(&s0, &shard0[4..])).await.unwrap());
    pushed.extend(rig.sink.push(&s1, push(&s1, &shard1[3..])).await.unwrap());
    assert_eq!(rejected_codes(&pushed), ["INVALID_ENVELOPE"]);

    let written = rig
        .sink
        .write(uuid::Uuid::now_v7(), &[s0.clone(), s1.clone()].into(), &[])
        .await
        .unwrap();
    let rows = rows_of(&rig.table, &written.files).await;
    let expected: BTreeMap<i64, (String, i64)> = [
        (1, ("a2".to_string(), 2)),
        (3, ("c2".to_string(), 5)),
        (10, ("x2".to_string(), 7)),
        (12, ("z".to_string(), 1)),
    ]
    .into();
    assert_eq!(rows, expected);
    assert_eq!(written.num_rows, 4);
    let deleted = deleted_of(&rig.table, &written.files).await;
    assert_eq!(deleted, hash_of(&[2, 4, 11]));
    // Never both a row and a delete of one key.
    let row_keys: Vec<i64> = rows.keys().copied().collect();
    assert!(hash_of(&row_keys).is_disjoint(&deleted));

    // Undo removes the key file with the data files.
    let BatchFiles::Iceberg { deleted_keys, .. } = &written.files else {
        unreachable!()
    };
    let path = deleted_keys.clone().unwrap();
    rig.sink.undo(&written.files).await;
    assert!(!rig.table.file_io().exists(&path).await.unwrap());
}

#[tokio::test]
async fn a_dropped_shards_deletes_are_not_written_and_the_others_stay_buffered() {
    let mut rig = rig(Envelope::Debezium).await;
    let (s0, s1, s2) = (
        ShardId::kafka_partition(0),
        ShardId::kafka_partition(1),
        ShardId::kafka_partition(2),
    );
    let one = |shard: &ShardId, offset: i64, e: String| vec![record(shard, offset, None, Some(&e))];
    rig.sink
        .push(&s0, one(&s0, 0, event("d", Some(1), None, false)))
        .await
        .unwrap();
    rig.sink
        .push(&s1, one(&s1, 0, event("d", Some(2), None, false)))
        .await
        .unwrap();
    rig.sink
        .push(&s2, one(&s2, 0, event("d", Some(3), None, false)))
        .await
        .unwrap();
    rig.sink
        .push(&s2, one(&s2, 1, event("c", None, Some((4, "n", 1)), false)))
        .await
        .unwrap();
    rig.sink.drop_shard(&s1);
    let first = rig
        .sink
        .write(uuid::Uuid::now_v7(), &[s0.clone(), s1.clone()].into(), &[])
        .await
        .unwrap();
    assert!(rows_of(&rig.table, &first.files).await.is_empty());
    assert_eq!(deleted_of(&rig.table, &first.files).await, hash_of(&[1]));
    // Shard 2's delete and row stayed buffered: its own batch has them.
    let second = rig
        .sink
        .write(uuid::Uuid::now_v7(), &[s2.clone()].into(), &[])
        .await
        .unwrap();
    assert_eq!(
        rows_of(&rig.table, &second.files)
            .await
            .keys()
            .copied()
            .collect::<Vec<_>>(),
        [4]
    );
    assert_eq!(deleted_of(&rig.table, &second.files).await, hash_of(&[3]));
}

#[tokio::test]
async fn upsert_envelope_tombstones_delete_their_message_key() {
    let mut rig = rig(Envelope::Upsert).await;
    assert!(rig.sink.takes_tombstones());
    let s0 = ShardId::kafka_partition(0);
    let records = vec![
        record(&s0, 0, Some("1"), Some(r#"{"id":1,"name":"a","qty":1}"#)),
        record(&s0, 1, Some("2"), Some(r#"{"id":2,"name":"b","qty":1}"#)),
        record(&s0, 2, Some("1"), None),           // bare scalar key
        record(&s0, 3, Some(r#"{"id":3}"#), None), // object key
        record(
            &s0,
            4,
            Some(r#"{"id":2}"#),
            Some(r#"{"id":2,"name":"b2","qty":2}"#),
        ),
        record(&s0, 5, None, None), // no key: DLQ
    ];
    let pushed = rig.sink.push(&s0, records).await.unwrap();
    assert_eq!(rejected_codes(&pushed), ["INVALID_ENVELOPE"]);
    let written = rig
        .sink
        .write(uuid::Uuid::now_v7(), &[s0].into(), &[])
        .await
        .unwrap();
    let rows = rows_of(&rig.table, &written.files).await;
    assert_eq!(rows.keys().copied().collect::<Vec<_>>(), [2]);
    assert_eq!(rows[&2], ("b2".to_string(), 2));
    assert_eq!(
        deleted_of(&rig.table, &written.files).await,
        hash_of(&[1, 3])
    );
}
