//! Metrics and logs: every Prometheus metric floe exports is named and described here, once
//! (names `floe_<name>_<unit>`, base units, counters end in `_total`; labels bounded:
//! `channel`, `code`, `outcome`, `reason`, `kind`, `cause`). Emitted once per batch or round, never
//! per record.

#![allow(clippy::disallowed_macros)] // the one module that may emit metrics (clippy.toml)

use std::time::Duration;

use metrics::{
    counter, describe_counter, describe_gauge, describe_histogram, gauge, histogram, Unit,
};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

/// Age of the oldest record of a held shard not yet committed, counted from its timestamp in
/// the stream, or from when this process first read it if that is earlier (a record read again
/// after a rewind keeps what its first read gave), seconds; 0 when idle.
pub const DATA_FRESHNESS_SECONDS: &str = "floe_data_freshness_seconds";
/// The channel's data freshness bound in force (configured or updated), seconds.
pub const DATA_FRESHNESS_TARGET_SECONDS: &str = "floe_data_freshness_target_seconds";
/// 1 for each channel this process serves, labelled with its record format (`json`, `gsr_json`,
/// `json_sr`, `avro`, `gsr_avro`, `protobuf`) and its table (`namespace.table`): join on `channel`
/// to break any channel metric down by format or table — each table of a `table = "{topic}"`
/// channel is a member channel of its own (the Prometheus "info metric" pattern; one series per
/// channel, so at most `max_tables` per per-topic channel).
pub const CHANNEL_INFO: &str = "floe_channel_info";
/// Records read from the source.
pub const RECORDS_READ_TOTAL: &str = "floe_records_read_total";
/// Records read again by this process (at or before the highest position it read of the shard),
/// by cause of the rewind: `lease_lost`, `moved` (a graceful hand-off that fell back to a
/// takeover), `rejected` (a batch the committer rejected), `restart` (the worker loop restarted).
pub const RECORDS_REREAD_TOTAL: &str = "floe_records_reread_total";
/// Bytes of record payloads read from the source.
pub const BYTES_READ_TOTAL: &str = "floe_bytes_read_total";
/// Bytes of record keys and payloads a worker's Kafka consumer fetched, by the channel whose
/// consumer it is: a `table = "{route}"` channel's members on one worker read each partition
/// through one consumer, counted once under the channel's name (docs/routing.md), beside each
/// member's own [`BYTES_READ_TOTAL`].
pub const KAFKA_FETCHED_BYTES_TOTAL: &str = "floe_kafka_fetched_bytes_total";
/// Records a member channel of `table = "{route}"` read and skipped: routed to another of the
/// channel's tables (docs/routing.md).
pub const RECORDS_SKIPPED_TOTAL: &str = "floe_records_skipped_total";
/// Kafka tombstones (records with a null value) read and skipped: no row, no DLQ entry; the
/// checkpoint passes them (docs/kafka.md, "Tombstones").
pub const TOMBSTONES_TOTAL: &str = "floe_tombstones_total";
/// Change events read by a channel with an envelope or in upsert mode, by `op`: `upsert` (a row
/// written), `delete` (a key deleted; appends nothing in append mode), `truncate` (skipped). An
/// event sent to the DLQ is not counted.
pub const CDC_EVENTS_TOTAL: &str = "floe_cdc_events_total";
/// Rows committed to the table.
pub const ROWS_DELIVERED_TOTAL: &str = "floe_rows_delivered_total";
/// Records committed to the DLQ, by error code.
pub const ROWS_DEAD_LETTERED_TOTAL: &str = "floe_rows_dead_lettered_total";
/// Records of another schema version than the channel's (`SCHEMA_MISMATCH`) committed to the DLQ.
pub const SCHEMA_MISMATCH_TOTAL: &str = "floe_schema_mismatch_total";
/// Schema registry lookups (Glue or Confluent) of a record's schema version id that failed after
/// their bounded retries (unavailable or refused): each restarts the worker loop from the table's
/// checkpoints.
pub const SCHEMA_LOOKUP_ERRORS_TOTAL: &str = "floe_schema_lookup_errors_total";
/// Commit attempts, by outcome (`committed`, `conflict`, `fenced`, `unknown`, `rejected`).
pub const COMMITS_TOTAL: &str = "floe_commits_total";
/// Shards found gone from the stream (a closed Kinesis shard past retention) while their
/// checkpoint was not `SHARD_END`: their unread records expired, and the shard was ended so that
/// its children are read.
pub const SHARDS_EXPIRED_TOTAL: &str = "floe_shards_expired_total";
/// Tables a channel with `table = "{topic}"` delivers to in this worker (member channels
/// started, one per topic).
pub const CHANNEL_TABLES: &str = "floe_channel_tables";
/// Topics a channel's `topics` or `topic_pattern` selects at its last listing (0: no topic
/// matches: a warning names the key, `/readyz` and `floe channel describe` say so).
pub const CHANNEL_TOPICS: &str = "floe_channel_topics";
/// Topics a channel with `table = "{topic}"` selects but does not read, by reason
/// (`max_tables`, `name_clash`, `refused`).
pub const TOPICS_REFUSED_TOTAL: &str = "floe_topics_refused_total";
/// Pending batches rejected by the committer.
pub const BATCHES_REJECTED_TOTAL: &str = "floe_batches_rejected_total";
/// Duration of one Iceberg commit, seconds.
pub const COMMIT_DURATION_SECONDS: &str = "floe_commit_duration_seconds";
/// Data files written by workers.
pub const DATA_FILES_WRITTEN_TOTAL: &str = "floe_data_files_written_total";
/// Size of written data files, bytes.
pub const DATA_FILE_SIZE_BYTES: &str = "floe_data_file_size_bytes";
/// Leases held by this worker, by kind (`shard`, `committer`).
pub const LEASES_HELD: &str = "floe_leases_held";
/// Bytes of rows buffered by this worker.
pub const BUFFER_BYTES: &str = "floe_buffer_bytes";
/// Kafka: the readable end (last stable offset) minus the next offset to read, stepped past
/// transaction markers, summed over held partitions.
pub const SOURCE_LAG_RECORDS: &str = "floe_source_lag_records";
/// Kinesis: the largest `MillisBehindLatest` over held shards, seconds.
pub const SOURCE_LAG_SECONDS: &str = "floe_source_lag_seconds";
/// DLQ object writes (staged by a worker, published by the committer), by stage and outcome.
pub const DLQ_WRITES_TOTAL: &str = "floe_dlq_writes_total";
/// Pending batches waiting for the committer (set by the committer).
pub const PENDING_BATCHES: &str = "floe_pending_batches";
/// Snapshots in the channel's table after the committer's last commit.
pub const TABLE_SNAPSHOTS: &str = "floe_table_snapshots";
/// Iceberg table loads from the catalog (each reads the table's whole metadata.json), by who
/// loaded (`worker`: opening a sink, reading checkpoints; `committer`: planning, committing,
/// maintenance).
pub const CATALOG_TABLE_LOADS_TOTAL: &str = "floe_catalog_table_loads_total";
/// Snapshots expired by the committer's maintenance.
pub const SNAPSHOTS_EXPIRED_TOTAL: &str = "floe_snapshots_expired_total";
/// Files deleted by the committer's maintenance, by kind (`manifest_list`, `manifest`,
/// `data_file`, `metadata`, `orphan`).
pub const MAINTENANCE_FILES_DELETED_TOTAL: &str = "floe_maintenance_files_deleted_total";
/// Bytes of data files deleted by the committer's maintenance.
pub const MAINTENANCE_BYTES_DELETED_TOTAL: &str = "floe_maintenance_bytes_deleted_total";
/// Maintenance task runs, by task (`compaction`, `manifest_rewrite`, `record_expiry`) and
/// outcome (`committed`, `conflict`, `failed`, `abandoned`).
pub const MAINTENANCE_RUNS_TOTAL: &str = "floe_maintenance_runs_total";
/// Data files rewritten by compaction, by side (`input`, `output`).
pub const COMPACTION_FILES_TOTAL: &str = "floe_compaction_files_total";
/// Live keys in the key index of an upsert table (after the committer's last commit).
pub const KEY_INDEX_KEYS: &str = "floe_key_index_keys";
/// Key index builds (after a committer change or a commit another writer or maintenance made).
pub const KEY_INDEX_BUILDS_TOTAL: &str = "floe_key_index_builds_total";
/// Seconds the last key index build took (reading every live data file's key columns).
pub const KEY_INDEX_BUILD_SECONDS: &str = "floe_key_index_build_seconds";
/// Rows an upsert table's commits deleted by position (replaced or deleted keys); per commit:
/// its rate over `floe_commits_total{outcome="committed"}`'s.
pub const UPSERT_ROWS_DELETED_TOTAL: &str = "floe_upsert_rows_deleted_total";
/// Manifests in the current snapshot of the channel's table (after the last maintenance look).
pub const TABLE_MANIFESTS: &str = "floe_table_manifests";
/// Live data files in the current snapshot of the channel's table (after the last maintenance
/// look).
pub const TABLE_DATA_FILES: &str = "floe_table_data_files";
/// Leases taken over from a worker that stopped renewing: counted by the balancer for the shard
/// leases it reassigns, by the taker for the committer lease. Handoffs for balance are not
/// counted.
pub const LEASE_TAKEOVERS_TOTAL: &str = "floe_lease_takeovers_total";
/// Counter `floe_lease_store_errors_total{kind}`: lease-store calls that failed in the store
/// itself (`kind` = `unavailable`: unreachable, restarting, locked, retried with backoff;
/// `throttled`; `fatal`), not lost races (conditional-write conflicts are the protocol working).
pub const LEASE_STORE_ERRORS_TOTAL: &str = "floe_lease_store_errors_total";
/// Counter `floe_schema_changes_total{channel,outcome}`: schema versions applied to the table
/// by `evolution = "compatible"` (`outcome` = `evolved`: the table's schema changed; `recorded`:
/// the version fit the table as it was and was only recorded; `incompatible`: refused, its
/// records go to the DLQ as `SCHEMA_MISMATCH`). Counted by the worker that made the commit, or
/// that refused the version.
pub const SCHEMA_CHANGES_TOTAL: &str = "floe_schema_changes_total";
/// Time reading was paused because the buffer was full, seconds.
pub const BACKPRESSURE_SECONDS_TOTAL: &str = "floe_backpressure_seconds_total";
/// Kafka offsets skipped because retention deleted them before floe read them
/// (`on_position_lost = "skip"`), by shard.
pub const SOURCE_OFFSETS_SKIPPED_TOTAL: &str = "floe_source_offsets_skipped_total";
/// Start offsets a Kafka broker answered for the activation time that contradicted the records'
/// own timestamps and were corrected.
pub const SOURCE_START_CORRECTIONS_TOTAL: &str = "floe_source_start_corrections_total";
/// Kinesis enhanced fan-out subscriptions, by outcome: `started`, `ended` (ended cleanly by the
/// service, after ~5 minutes or earlier), `shard_end`, `taken_over` (another subscription of the consumer
/// took the shard), `refused` (SubscribeToShard refused, retried), `idle` (no event within the
/// idle bound), `failed`.
pub const KINESIS_SUBSCRIPTIONS_TOTAL: &str = "floe_kinesis_subscriptions_total";

/// Buckets of [`COMMIT_DURATION_SECONDS`], seconds.
pub const COMMIT_DURATION_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];
/// Buckets of [`DATA_FILE_SIZE_BYTES`], bytes (64 KiB to 2 GiB).
pub const DATA_FILE_SIZE_BUCKETS: &[f64] = &[
    65_536.0,
    262_144.0,
    1_048_576.0,
    4_194_304.0,
    16_777_216.0,
    67_108_864.0,
    134_217_728.0,
    268_435_456.0,
    536_870_912.0,
    1_073_741_824.0,
    2_147_483_648.0,
];

// A table of data: one `describe_*!` entry (name, unit, HELP text) per metric, kept whole.
/// Registers HELP text and units for every metric.
pub fn describe() {
    describe_gauge!(
        DATA_FRESHNESS_SECONDS,
        Unit::Seconds,
        "age of the oldest record of a held shard not yet committed, from its source timestamp (its first read by this process if earlier); 0 when idle"
    );
    describe_gauge!(
        DATA_FRESHNESS_TARGET_SECONDS,
        Unit::Seconds,
        "the channel's data_freshness in force (configuration or floe channel update)"
    );
    describe_gauge!(
        CHANNEL_INFO,
        Unit::Count,
        "1 per channel served, labelled with its record format and table (join on channel)"
    );
    describe_counter!(
        RECORDS_READ_TOTAL,
        Unit::Count,
        "records read from the source"
    );
    describe_counter!(
        RECORDS_REREAD_TOTAL,
        Unit::Count,
        "records read again after a rewind, by cause (lease_lost, moved, rejected, restart)"
    );
    describe_counter!(
        BYTES_READ_TOTAL,
        Unit::Bytes,
        "bytes of record payloads read from the source"
    );
    describe_counter!(
        KAFKA_FETCHED_BYTES_TOTAL,
        Unit::Bytes,
        "bytes of record keys and payloads the Kafka consumer fetched (a routed channel's tables share one fetch)"
    );
    describe_counter!(
        RECORDS_SKIPPED_TOTAL,
        Unit::Count,
        "records a member of a channel with table = \"{route}\" read and skipped: routed to another of its tables"
    );
    describe_counter!(
        TOMBSTONES_TOTAL,
        Unit::Count,
        "Kafka tombstones (null values) read and skipped: no row and no DLQ entry (with envelope = \"upsert\" each is a delete instead, in floe_cdc_events_total)"
    );
    describe_counter!(
        CDC_EVENTS_TOTAL,
        Unit::Count,
        "change events read by a channel with an envelope or in upsert mode, by op: upsert, delete, truncate (skipped); events sent to the DLQ are not counted"
    );
    describe_counter!(
        ROWS_DELIVERED_TOTAL,
        Unit::Count,
        "rows committed to the Iceberg table"
    );
    describe_counter!(
        ROWS_DEAD_LETTERED_TOTAL,
        Unit::Count,
        "records committed to the DLQ, by error code"
    );
    describe_counter!(
        SCHEMA_LOOKUP_ERRORS_TOTAL,
        Unit::Count,
        "Schema registry lookups (Glue or Confluent) of a record's schema version or id that failed after their retries (unavailable or refused); the worker restarts from the table's checkpoints"
    );
    describe_counter!(
        SCHEMA_MISMATCH_TOTAL,
        Unit::Count,
        "records of a schema version the channel's table cannot take committed to the DLQ (SCHEMA_MISMATCH: evolution = none, another schema, or an incompatible version)"
    );
    describe_counter!(
        SCHEMA_CHANGES_TOTAL,
        Unit::Count,
        "schema versions applied to the table by evolution = compatible (outcome: evolved, recorded) or refused (incompatible)"
    );
    describe_counter!(
        COMMITS_TOTAL,
        Unit::Count,
        "Iceberg commit attempts by outcome (committed, conflict, unknown, rejected)"
    );
    describe_counter!(
        SHARDS_EXPIRED_TOTAL,
        Unit::Count,
        "shards gone from the stream (past retention) before their checkpoint reached SHARD_END: their unread records expired; ended so their children are read"
    );
    describe_gauge!(
        CHANNEL_TABLES,
        Unit::Count,
        "tables (topics) a channel with table = \"{topic}\" delivers to from this worker: its member channels started"
    );
    describe_gauge!(
        CHANNEL_TOPICS,
        Unit::Count,
        "topics a channel's topics or topic_pattern selects at its last listing (0: no topic matches)"
    );
    describe_counter!(
        TOPICS_REFUSED_TOTAL,
        Unit::Count,
        "topics a channel with table = \"{topic}\" selects but does not read, by reason (max_tables, name_clash, refused)"
    );
    describe_counter!(
        BATCHES_REJECTED_TOTAL,
        Unit::Count,
        "pending batches rejected by the committer (duplicate or stale lease)"
    );
    describe_histogram!(
        COMMIT_DURATION_SECONDS,
        Unit::Seconds,
        "duration of one Iceberg commit"
    );
    describe_counter!(
        DATA_FILES_WRITTEN_TOTAL,
        Unit::Count,
        "Parquet data files written"
    );
    describe_histogram!(
        DATA_FILE_SIZE_BYTES,
        Unit::Bytes,
        "size of written Parquet data files"
    );
    describe_gauge!(
        LEASES_HELD,
        Unit::Count,
        "leases held by this worker, by kind (shard, committer)"
    );
    describe_gauge!(
        BUFFER_BYTES,
        Unit::Bytes,
        "bytes of rows buffered by this worker"
    );
    describe_gauge!(
        SOURCE_LAG_RECORDS,
        Unit::Count,
        "Kafka: last stable offset minus the next offset to read (stepped past transaction markers), summed over held partitions"
    );
    describe_gauge!(
        SOURCE_LAG_SECONDS,
        Unit::Seconds,
        "Kinesis MillisBehindLatest in seconds, the largest over held shards"
    );
    describe_counter!(
        DLQ_WRITES_TOTAL,
        Unit::Count,
        "DLQ object writes by stage (stage, publish) and outcome (ok, failed)"
    );
    describe_gauge!(
        PENDING_BATCHES,
        Unit::Count,
        "pending batches waiting for the committer, on the worker holding the committer lease"
    );
    describe_gauge!(
        TABLE_SNAPSHOTS,
        Unit::Count,
        "snapshots in the channel's table after the committer's last commit"
    );
    describe_counter!(
        CATALOG_TABLE_LOADS_TOTAL,
        Unit::Count,
        "Iceberg table loads from the catalog (each reads metadata.json), by who loaded (worker, committer)"
    );
    describe_gauge!(
        KEY_INDEX_KEYS,
        Unit::Count,
        "live keys in the key index of an upsert table after the committer's last commit"
    );
    describe_counter!(
        KEY_INDEX_BUILDS_TOTAL,
        Unit::Count,
        "key index builds (committer change, or a commit of another writer or of maintenance)"
    );
    describe_gauge!(
        KEY_INDEX_BUILD_SECONDS,
        Unit::Seconds,
        "duration of the last key index build"
    );
    describe_counter!(
        UPSERT_ROWS_DELETED_TOTAL,
        Unit::Count,
        "rows an upsert table's commits deleted by position (replaced or deleted keys)"
    );
    describe_counter!(
        SNAPSHOTS_EXPIRED_TOTAL,
        Unit::Count,
        "snapshots expired by the committer (older than snapshot_retention, beyond min_snapshots)"
    );
    describe_counter!(
        MAINTENANCE_FILES_DELETED_TOTAL,
        Unit::Count,
        "files deleted by the committer's maintenance, by kind (manifest_list, manifest, data_file, metadata, orphan)"
    );
    describe_counter!(
        MAINTENANCE_BYTES_DELETED_TOTAL,
        Unit::Bytes,
        "bytes of data files deleted by the committer's maintenance (compacted or expired files no retained snapshot reaches)"
    );
    describe_counter!(
        MAINTENANCE_RUNS_TOTAL,
        Unit::Count,
        "maintenance task runs, by task (compaction, manifest_rewrite, record_expiry) and outcome (committed, conflict, failed, abandoned)"
    );
    describe_counter!(
        COMPACTION_FILES_TOTAL,
        Unit::Count,
        "data files rewritten by compaction, by side (input, output)"
    );
    describe_gauge!(
        TABLE_MANIFESTS,
        Unit::Count,
        "manifests in the current snapshot of the channel's table"
    );
    describe_gauge!(
        TABLE_DATA_FILES,
        Unit::Count,
        "live data files in the current snapshot of the channel's table"
    );
    describe_counter!(
        LEASE_TAKEOVERS_TOTAL,
        Unit::Count,
        "leases taken over from a worker that stopped renewing (shard leases counted by the balancer)"
    );
    describe_counter!(
        LEASE_STORE_ERRORS_TOTAL,
        Unit::Count,
        "lease-store calls that failed in the store itself, by kind (unavailable and throttled are retried with backoff; fatal stops the caller); lost conditional writes are not counted"
    );
    describe_counter!(
        BACKPRESSURE_SECONDS_TOTAL,
        Unit::Seconds,
        "time reading was paused because the buffer was full"
    );
    describe_counter!(
        SOURCE_OFFSETS_SKIPPED_TOTAL,
        Unit::Count,
        "Kafka offsets skipped because retention deleted them before floe read them (on_position_lost = \"skip\"), by shard"
    );
    describe_counter!(
        KINESIS_SUBSCRIPTIONS_TOTAL,
        Unit::Count,
        "Kinesis enhanced fan-out subscriptions by outcome (started, ended, shard_end, taken_over, refused, idle, failed)"
    );
    describe_counter!(
        SOURCE_START_CORRECTIONS_TOTAL,
        Unit::Count,
        "Kafka start offsets for the activation time that contradicted the records' timestamps and were corrected"
    );
}

/// Installs the Prometheus recorder (histograms as real Prometheus histograms with the buckets
/// above) and returns the handle that renders the scrape text; [`crate::health`] serves it.
///
/// Errors: a recorder is already installed in this process.
pub fn install_prometheus() -> Result<PrometheusHandle, String> {
    let handle = PrometheusBuilder::new()
        .set_buckets_for_metric(
            Matcher::Full(COMMIT_DURATION_SECONDS.to_string()),
            COMMIT_DURATION_BUCKETS,
        )
        .and_then(|b| {
            b.set_buckets_for_metric(
                Matcher::Full(DATA_FILE_SIZE_BYTES.to_string()),
                DATA_FILE_SIZE_BUCKETS,
            )
        })
        .map_err(|e| e.to_string())?
        .install_recorder()
        .map_err(|e| e.to_string())?;
    describe();
    Ok(handle)
}

/// Records one commit attempt; `outcome` is the `outcome` label of [`COMMITS_TOTAL`]
/// (`committed`, `conflict`, `fenced`, `unknown`, `rejected`; [`crate::commit::CommitError::outcome`]).
pub fn record_commit(channel: &str, outcome: &'static str, took: Duration) {
    counter!(COMMITS_TOTAL, "channel" => channel.to_string(), "outcome" => outcome).increment(1);
    histogram!(COMMIT_DURATION_SECONDS, "channel" => channel.to_string())
        .record(took.as_secs_f64());
}

/// Records a shard found gone from the stream before its checkpoint reached `SHARD_END`.
pub fn record_shard_expired(channel: &str) {
    counter!(SHARDS_EXPIRED_TOTAL, "channel" => channel.to_string()).increment(1);
}

/// Sets how many tables (member channels) channel `channel` (`table = "{topic}"`) delivers to
/// from this worker.
pub fn set_channel_tables(channel: &str, tables: usize) {
    gauge!(CHANNEL_TABLES, "channel" => channel.to_string()).set(tables as f64);
}

/// Sets how many topics channel `channel`'s `topics`/`topic_pattern` selected at its last
/// listing.
pub fn set_channel_topics(channel: &str, topics: usize) {
    gauge!(CHANNEL_TOPICS, "channel" => channel.to_string()).set(topics as f64);
}

/// Records a topic a channel with `table = "{topic}"` does not read, by reason (`max_tables`,
/// `name_clash`, `refused`).
pub fn record_topic_refused(channel: &str, reason: &'static str) {
    counter!(TOPICS_REFUSED_TOTAL, "channel" => channel.to_string(), "reason" => reason)
        .increment(1);
}

/// Records a rejected batch, by reason (`duplicate` or `stale_lease`).
pub fn record_batch_rejected(channel: &str, reason: &'static str) {
    counter!(BATCHES_REJECTED_TOTAL, "channel" => channel.to_string(), "reason" => reason)
        .increment(1);
}

/// Records one DLQ object write: `stage` is `"stage"` (worker) or `"publish"` (committer).
pub fn record_dlq_write(channel: &str, stage: &'static str, ok: bool) {
    let outcome = if ok { "ok" } else { "failed" };
    counter!(DLQ_WRITES_TOTAL, "channel" => channel.to_string(), "stage" => stage, "outcome" => outcome)
        .increment(1);
}

/// Sets the number of pending batches (the committer, after a round).
pub fn set_pending_batches(channel: &str, n: usize) {
    gauge!(PENDING_BATCHES, "channel" => channel.to_string()).set(n as f64);
}

/// Sets the number of snapshots in the channel's table.
pub fn set_table_snapshots(channel: &str, n: usize) {
    gauge!(TABLE_SNAPSHOTS, "channel" => channel.to_string()).set(n as f64);
}

/// Records one Iceberg table load from the catalog; `by` is `worker` or `committer`.
pub fn record_catalog_table_load(channel: &str, by: &'static str) {
    counter!(CATALOG_TABLE_LOADS_TOTAL, "channel" => channel.to_string(), "by" => by).increment(1);
}

/// Records a key index build of `keys` keys that took `took`.
pub fn record_key_index_build(channel: &str, keys: usize, took: Duration) {
    counter!(KEY_INDEX_BUILDS_TOTAL, "channel" => channel.to_string()).increment(1);
    gauge!(KEY_INDEX_BUILD_SECONDS, "channel" => channel.to_string()).set(took.as_secs_f64());
    set_key_index_keys(channel, keys);
}

/// Sets the live keys of the channel's key index.
pub fn set_key_index_keys(channel: &str, keys: usize) {
    gauge!(KEY_INDEX_KEYS, "channel" => channel.to_string()).set(keys as f64);
}

/// Records the rows one upsert commit deleted by position.
pub fn record_upsert_rows_deleted(channel: &str, rows: u64) {
    counter!(UPSERT_ROWS_DELETED_TOTAL, "channel" => channel.to_string()).increment(rows);
}

/// Records snapshots expired by maintenance.
pub fn record_snapshots_expired(channel: &str, n: u64) {
    counter!(SNAPSHOTS_EXPIRED_TOTAL, "channel" => channel.to_string()).increment(n);
}

/// Records files deleted by maintenance; `kind` is `manifest_list`, `manifest`, `data_file`,
/// `metadata` or `orphan`.
pub fn record_maintenance_files_deleted(channel: &str, kind: &'static str, n: u64) {
    counter!(MAINTENANCE_FILES_DELETED_TOTAL, "channel" => channel.to_string(), "kind" => kind)
        .increment(n);
}

/// Records bytes of data files deleted by maintenance.
pub fn record_maintenance_bytes_deleted(channel: &str, bytes: u64) {
    counter!(MAINTENANCE_BYTES_DELETED_TOTAL, "channel" => channel.to_string()).increment(bytes);
}

/// Records one maintenance task run: `task` is `compaction`, `manifest_rewrite` or
/// `record_expiry`; `outcome` is `committed`, `conflict`, `failed` or `abandoned`.
pub fn record_maintenance_run(channel: &str, task: &'static str, outcome: &'static str) {
    counter!(MAINTENANCE_RUNS_TOTAL, "channel" => channel.to_string(), "task" => task, "outcome" => outcome)
        .increment(1);
}

/// Records data files compacted: `inputs` replaced by `outputs`.
pub fn record_compaction_files(channel: &str, inputs: u64, outputs: u64) {
    counter!(COMPACTION_FILES_TOTAL, "channel" => channel.to_string(), "side" => "input")
        .increment(inputs);
    counter!(COMPACTION_FILES_TOTAL, "channel" => channel.to_string(), "side" => "output")
        .increment(outputs);
}

/// Sets the table-shape gauges: manifests and live data files in the current snapshot.
pub fn set_table_shape(channel: &str, manifests: usize, data_files: usize) {
    gauge!(TABLE_MANIFESTS, "channel" => channel.to_string()).set(manifests as f64);
    gauge!(TABLE_DATA_FILES, "channel" => channel.to_string()).set(data_files as f64);
}

/// Records a lease taken over from another worker.
pub fn record_lease_takeover(channel: &str) {
    counter!(LEASE_TAKEOVERS_TOTAL, "channel" => channel.to_string()).increment(1);
}

/// Records a schema version applied to (`evolved`, `recorded`) or refused by (`incompatible`)
/// the channel's table.
pub fn record_schema_change(channel: &str, outcome: &'static str) {
    counter!(SCHEMA_CHANGES_TOTAL, "channel" => channel.to_string(), "outcome" => outcome)
        .increment(1);
}

/// Records a lease-store call that failed in the store (`kind`: `unavailable`, `throttled`,
/// `fatal`).
pub fn record_lease_store_error(kind: &'static str) {
    counter!(LEASE_STORE_ERRORS_TOTAL, "kind" => kind).increment(1);
}

/// Records time spent with reading paused on a full buffer. Counters count whole units, so
/// the fraction of a second not yet counted is carried over in `carry`.
pub fn record_backpressure(channel: &str, carry: &mut Duration, paused: Duration) {
    *carry += paused;
    let whole = carry.as_secs();
    if whole > 0 {
        counter!(BACKPRESSURE_SECONDS_TOTAL, "channel" => channel.to_string()).increment(whole);
        *carry -= Duration::from_secs(whole);
    }
}

/// Sets the Kinesis lag gauge of a channel (largest over the shards this worker reads).
pub fn set_source_lag_seconds(channel: &str, seconds: f64) {
    gauge!(SOURCE_LAG_SECONDS, "channel" => channel.to_string()).set(seconds);
}

/// Records the rows committed by one round.
pub fn record_delivered(channel: &str, rows: u64) {
    counter!(ROWS_DELIVERED_TOTAL, "channel" => channel.to_string()).increment(rows);
}

/// Records committed DLQ entries by code (once per committed batch); `SCHEMA_MISMATCH` entries
/// also count in [`SCHEMA_MISMATCH_TOTAL`].
pub fn record_dead_lettered(channel: &str, code: &str, n: u64) {
    counter!(ROWS_DEAD_LETTERED_TOTAL, "channel" => channel.to_string(), "code" => code.to_string())
        .increment(n);
    if code == crate::convert::DlqCode::SchemaMismatch.as_str() {
        counter!(SCHEMA_MISMATCH_TOTAL, "channel" => channel.to_string()).increment(n);
    }
}

/// Counts a failed lookup of a record's schema version ([`SCHEMA_LOOKUP_ERRORS_TOTAL`]).
pub fn record_schema_lookup_error(channel: &str) {
    counter!(SCHEMA_LOOKUP_ERRORS_TOTAL, "channel" => channel.to_string()).increment(1);
}

/// Counts Kafka offsets skipped on `shard` ([`SOURCE_OFFSETS_SKIPPED_TOTAL`]).
pub fn record_offsets_skipped(channel: &str, shard: &str, n: u64) {
    counter!(SOURCE_OFFSETS_SKIPPED_TOTAL, "channel" => channel.to_string(), "shard" => shard.to_string())
        .increment(n);
}

/// Counts a corrected start offset ([`SOURCE_START_CORRECTIONS_TOTAL`]).
pub fn record_start_position_corrected(channel: &str) {
    counter!(SOURCE_START_CORRECTIONS_TOTAL, "channel" => channel.to_string()).increment(1);
}

/// Counts a Kinesis subscription event ([`KINESIS_SUBSCRIPTIONS_TOTAL`]).
pub fn record_kinesis_subscription(channel: &str, outcome: &'static str) {
    counter!(KINESIS_SUBSCRIPTIONS_TOTAL, "channel" => channel.to_string(), "outcome" => outcome)
        .increment(1);
}

/// Sets the Kafka lag gauge of a channel (sum over the partitions this worker reads).
pub fn set_source_lag_records(channel: &str, records: u64) {
    gauge!(SOURCE_LAG_RECORDS, "channel" => channel.to_string()).set(records as f64);
}

/// Records records and bytes read (once per poll).
pub fn record_read(channel: &str, records: u64, bytes: u64) {
    counter!(RECORDS_READ_TOTAL, "channel" => channel.to_string()).increment(records);
    counter!(BYTES_READ_TOTAL, "channel" => channel.to_string()).increment(bytes);
}

/// Records `bytes` of keys and payloads fetched by channel `channel`'s Kafka consumer
/// ([`KAFKA_FETCHED_BYTES_TOTAL`]).
pub fn record_fetched(channel: &str, bytes: u64) {
    counter!(KAFKA_FETCHED_BYTES_TOTAL, "channel" => channel.to_string()).increment(bytes);
}

/// Records `records` skipped by a member of a routed channel (another table's).
pub fn record_skipped(channel: &str, records: u64) {
    counter!(RECORDS_SKIPPED_TOTAL, "channel" => channel.to_string()).increment(records);
}

/// Records `records` Kafka tombstones read and skipped ([`TOMBSTONES_TOTAL`]).
pub fn record_tombstones(channel: &str, records: u64) {
    counter!(TOMBSTONES_TOTAL, "channel" => channel.to_string()).increment(records);
}

/// Records `events` change events of `op` (`upsert`, `delete`, `truncate`) read
/// ([`CDC_EVENTS_TOTAL`]).
pub fn record_cdc_events(channel: &str, op: &'static str, events: u64) {
    counter!(CDC_EVENTS_TOTAL, "channel" => channel.to_string(), "op" => op).increment(events);
}

/// Records `records` read again after a rewind for `cause` (a bounded label).
pub fn record_reread(channel: &str, cause: &'static str, records: u64) {
    counter!(RECORDS_REREAD_TOTAL, "channel" => channel.to_string(), "cause" => cause)
        .increment(records);
}

/// Records data files written by one flush.
pub fn record_files(channel: &str, sizes: impl IntoIterator<Item = u64>) {
    for size in sizes {
        counter!(DATA_FILES_WRITTEN_TOTAL, "channel" => channel.to_string()).increment(1);
        histogram!(DATA_FILE_SIZE_BYTES, "channel" => channel.to_string()).record(size as f64);
    }
}

/// Publishes `channel`'s record format (`format`, as configured) and table (`namespace.table`)
/// as [`CHANNEL_INFO`].
pub fn set_channel_info(channel: &str, format: &'static str, table: &str) {
    gauge!(CHANNEL_INFO, "channel" => channel.to_string(), "format" => format, "table" => table.to_string()).set(1.0);
}

/// Sets the freshness bound of a channel.
pub fn set_freshness_target(channel: &str, target: Duration) {
    gauge!(DATA_FRESHNESS_TARGET_SECONDS, "channel" => channel.to_string())
        .set(target.as_secs_f64());
}

/// Sets the freshness, buffer and lease gauges of a channel (all 0 once it stopped).
pub fn set_worker_gauges(
    channel: &str,
    freshness_s: f64,
    buffer_bytes: usize,
    shards: usize,
    committer: bool,
) {
    gauge!(DATA_FRESHNESS_SECONDS, "channel" => channel.to_string()).set(freshness_s);
    gauge!(BUFFER_BYTES, "channel" => channel.to_string()).set(buffer_bytes as f64);
    gauge!(LEASES_HELD, "channel" => channel.to_string(), "kind" => "shard").set(shards as f64);
    gauge!(LEASES_HELD, "channel" => channel.to_string(), "kind" => "committer")
        .set(if committer { 1.0 } else { 0.0 });
}
