//! Partition specs beyond the hour (docs/partitioning.md): a channel whose table has several
//! partition fields, or none, delivers every record once, and every data file's partition tuple
//! is what PyIceberg's own transforms give for its rows.

use crate::common;

use std::time::Duration;

use floe::source::kafka::embedded::EmbeddedKafka;
use floe::tools::sample_events::event_json;
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

use common::*;

const TOTAL: u64 = 2_000;

/// Delivers `TOTAL` events spanning 72 hours (several days) through one worker into a table
/// partitioned by `partition` (a TOML array); returns what tests/py/read_partitions.py reads.
async fn deliver_with_spec(partition: &str) -> Value {
    deliver_with(&format!("partition = {partition}")).await
}

/// [`deliver_with_spec`] with `destination` (TOML lines) in place of `partition_field`.
async fn deliver_with(destination: &str) -> Value {
    let dir = tempfile::tempdir().unwrap();
    let kafka = EmbeddedKafka::start(3).unwrap();
    kafka.create_topic("events", 4).unwrap();
    let bootstrap = kafka.bootstrap_servers().to_string();
    produce_payloads(&bootstrap, 0..TOTAL, |id| {
        event_json(id, SEED, BASE_MS, 72).into_bytes()
    });
    let text = config_toml(dir.path(), &bootstrap, "w1", 6)
        .replace("partition_field = \"event_time\"", destination);
    let config = floe::config::Config::from_toml_str(&text, dir.path()).unwrap();
    let shutdown = CancellationToken::new();
    let token = shutdown.clone();
    let worker = tokio::spawn(async move { floe::app::run(config, token).await });
    let (rows, dlq) = wait_delivered(dir.path(), TOTAL, Duration::from_secs(120)).await;
    shutdown.cancel();
    worker.await.unwrap().unwrap();
    assert_eq!((rows, dlq), (TOTAL, 0));
    let t = read_with_pyiceberg(dir.path(), &[]);
    assert_eq!(t["distinct_ids"], TOTAL, "every record once");
    // The second reader: DuckDB's iceberg_scan, with a predicate on the partition sources that
    // lets it prune files by their partition values and statistics.
    let metadata = t["metadata_location"].as_str().unwrap();
    let metadata = metadata.strip_prefix("file://").unwrap_or(metadata);
    let d = run_py_reader(
        "read_duckdb.py",
        &[
            metadata.as_ref(),
            "--where".as_ref(),
            "event_time >= TIMESTAMPTZ '2026-07-11 00:00:00+00' AND source >= 'c' AND id % 7 = 3"
                .as_ref(),
        ],
    );
    assert_eq!(
        (d["rows"].as_u64(), d["distinct_ids"].as_u64()),
        (Some(TOTAL), Some(TOTAL)),
        "{d}"
    );
    assert!(d["matching_unpruned"].as_u64().unwrap() > 0, "{d}");
    assert_eq!(
        d["matching"], d["matching_unpruned"],
        "pruning lost no row: {d}"
    );

    let (catalog, warehouse) = (
        dir.path().join("catalog.sqlite"),
        dir.path().join("warehouse"),
    );
    let p = run_py_reader(
        "read_partitions.py",
        &[
            catalog.as_os_str(),
            warehouse.as_os_str(),
            "it.events".as_ref(),
        ],
    );
    assert_eq!(p["rows"], TOTAL);
    assert_eq!(p["mismatches"], json!([]), "{p}");
    assert_eq!(p["mixed_files"], 0, "every file holds one tuple: {p}");
    p
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_day_identity_bucket_spec_writes_the_values_pyiceberg_computes() {
    let p = deliver_with_spec(r#"["day(event_time)", "identity(source)", "bucket(4, id)"]"#).await;
    assert_eq!(
        p["spec"],
        json!([
            {"source": "event_time", "transform": "day", "name": "event_time_day"},
            {"source": "source", "transform": "identity", "name": "source"},
            {"source": "id", "transform": "bucket[4]", "name": "id_bucket"},
        ])
    );
    // 3+ days × sources × 4 buckets: many tuples, each in its own files.
    assert!(p["tuples"].as_u64().unwrap() >= 12, "{p}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn year_month_truncate_and_void_write_the_values_pyiceberg_computes() {
    let p = deliver_with_spec(
        r#"["month(event_time)", "truncate(3, source)", "truncate(500, id)", "void(value)"]"#,
    )
    .await;
    assert_eq!(
        p["spec"],
        json!([
            {"source": "event_time", "transform": "month", "name": "event_time_month"},
            {"source": "source", "transform": "truncate[3]", "name": "source_trunc"},
            {"source": "id", "transform": "truncate[500]", "name": "id_trunc"},
            {"source": "value", "transform": "void", "name": "value_null"},
        ])
    );
    // ids 0..2000 by 500: 4 values; the sources' first three letters.
    assert!(p["tuples"].as_u64().unwrap() >= 4, "{p}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unpartitioned_table_takes_every_record() {
    let p = deliver_with_spec("[]").await;
    assert_eq!(p["spec"], json!([]));
    assert_eq!(p["tuples"], 1, "{p}");
}

/// `sort`: the table's sort order is the configured one, and every data file's rows are in it
/// (as pyarrow sorts the same rows).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sorted_table_writes_every_file_in_its_sort_order() {
    let p =
        deliver_with("partition = [\"day(event_time)\"]\nsort = [\"source\", \"id desc\"]").await;
    assert_eq!(
        p["sort_order"],
        json!([
            {"source": "source", "direction": "ASC", "null_order": "NULLS FIRST"},
            {"source": "id", "direction": "DESC", "null_order": "NULLS LAST"},
        ])
    );
    assert_eq!(p["unsorted_files"], 0, "{p}");
    // Every data file records the sort order its rows are in (order id 1).
    assert_eq!(p["file_sort_order_ids"], json!([1]), "{p}");
    assert_eq!(p["files_without_sort_order_id"], 0, "{p}");
}

/// A sorted table whose partition fields are not in alphabetical order (`source` before
/// `event_time_day`) commits, with the right partition values in every data file: recording
/// the sort order id once went through the data file's JSON form, which put the partition
/// values in alphabetical order, and every commit failed ("type mismatch").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sorted_table_with_partition_fields_out_of_alphabetical_order_commits() {
    let p =
        deliver_with("partition = [\"identity(source)\", \"day(event_time)\"]\nsort = [\"id\"]")
            .await;
    assert_eq!(
        p["spec"],
        json!([
            {"source": "source", "transform": "identity", "name": "source"},
            {"source": "event_time", "transform": "day", "name": "event_time_day"},
        ])
    );
    assert_eq!(p["unsorted_files"], 0, "{p}");
    assert_eq!(p["file_sort_order_ids"], json!([1]), "{p}");
}

/// The two time transforms the other tests leave out, each beside another term: `year` with
/// `identity`, `hour` with `bucket` of a string.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn year_and_hour_beside_other_terms_write_the_values_pyiceberg_computes() {
    let p = deliver_with_spec(r#"["year(event_time)", "identity(source)"]"#).await;
    assert_eq!(
        p["spec"],
        json!([
            {"source": "event_time", "transform": "year", "name": "event_time_year"},
            {"source": "source", "transform": "identity", "name": "source"},
        ])
    );
    let p = deliver_with_spec(r#"["hour(event_time)", "bucket(3, source)"]"#).await;
    assert_eq!(
        p["spec"],
        json!([
            {"source": "event_time", "transform": "hour", "name": "event_time_hour"},
            {"source": "source", "transform": "bucket[3]", "name": "source_bucket"},
        ])
    );
    // 72 hours × up to 3 buckets.
    assert!(p["tuples"].as_u64().unwrap() > 72, "{p}");
}
