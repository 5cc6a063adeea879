//! floe: deliver Kafka (and, next, Kinesis) records into hour-partitioned Apache Iceberg tables,
//! exactly once.
//!
//! ```text
//!            lease store (SQLite embedded; DynamoDB next)
//!             ^ shard leases, committer lease, pending batches, channel state
//!             |
//!  source --> worker: read -> convert (schema) -> buffer -> Parquet data files (writer)
//!  (Kafka)                                                     | pending batch: (after, last] per shard
//!                                                              v
//!                 committer (one per channel, by lease) --> one fenced Iceberg commit:
//!                   fast append + floe.checkpoints + floe.last-commit-id + floe.committer-epoch
//! ```
//!
//! The schema comes from a file or from the AWS Glue Schema Registry ([`schema::registry`]: the
//! version recorded at activation); `gsr_json` records are unframed ([`convert::gsr`]) before they
//! are converted.
//!
//! Invariants (tests in `commit`, `model`, `tests/commit_race.rs`, `tests/crash.rs`):
//! - the table is the source of truth: checkpoints live in its metadata, written in the same
//!   commit as the data files, and never move backwards;
//! - a batch is committed only if every shard range continues exactly at the checkpoint and was
//!   read under the shard's current lease counter, in a commit fenced to the snapshot it was
//!   validated against — so every record after activation is in the table or the DLQ exactly
//!   once, whatever crashes, pauses or lease takeovers happen;
//! - a rejected batch leaves no data file referenced and no DLQ entry published.
#![warn(missing_docs)]

pub mod app;
pub mod aws;
pub mod catalog;
pub mod catalog_aws;
pub mod catalog_glue;
pub mod catalog_rest;
pub mod catalog_sigv4;
pub mod cli;
pub mod commit;
pub mod config;
pub mod control;
pub mod convert;
pub mod dlq;
pub mod events;
pub mod health;
pub mod lease;
pub mod loadgen;
pub mod model;
pub mod quickstart;
pub mod raw;
pub mod s3;
pub mod schema;
pub mod source;
pub mod telemetry;
pub mod worker;
pub mod writer;
