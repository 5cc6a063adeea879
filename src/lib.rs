//! floe: deliver Kinesis and Kafka records into hour-partitioned Apache Iceberg tables (or raw
//! objects in S3), exactly once. The design, with the numbered protocol steps that comments
//! throughout the code cite, is docs/design.md.
//!
//! ```text
//!            lease store (SQLite embedded, DynamoDB)                       lease/
//!             ^ shard leases, committer lease, pending batches, channel state
//!             |
//!  source --> worker: read -> unframe (json | GSR | Confluent) -> convert (schema) -> buffer  source/ worker/
//!  (Kinesis,          -> Parquet data files + staged DLQ entries (iceberg/)       registry/ convert/
//!   Kafka)            |  or staged raw objects (raw/)
//!                     v  pending batch: (after, last] per shard
//!            committer (one per channel, by lease) --> one fenced commit:         commit/
//!              fast append + floe.checkpoints + floe.last-commit-id + floe.committer-epoch
//!              (or, raw: publish objects + compare-and-swap of the delivered checkpoints)
//! ```
//!
//! Module map, by layer from the bottom (imports only point down; `tests/it/layout.rs` checks it):
//! - `failpoint` the crash tests' named steps in the commit protocols (test builds only).
//! - [`model`] pure protocol data: positions, shard ranges, checkpoints, pending batches;
//!   [`time`] wall clock, civil calendar, RFC 3339; [`retry`] the one backoff;
//!   [`schema`] JSON Schema, Avro and Protobuf schemas → Iceberg mapping and decoding plans.
//! - [`config`] the TOML file format, validation with key paths, the typed configuration.
//! - [`registry`] the schema registries: the framing of every wire format (Glue's header,
//!   Confluent's), the registry-neutral record decoder, schema-version resolution under
//!   evolution, a channel's schema at activation, the DLQ's schema label; the Glue and Confluent
//!   clients beneath it.
//! - [`convert`] record payloads (JSON, JSON Schema-validated JSON, Avro, Protobuf) → Arrow
//!   columns, per-record DLQ reasons.
//! - [`telemetry`] every metric, named once; [`aws`] AWS clients and the S3 helper.
//! - [`source`] Kinesis, Kafka and in-memory sources; [`lease`] the lease store, lease manager
//!   and balancing; [`dlq`] the dead-letter queue (stage, publish, discard).
//! - [`health`] `/metrics`, `/healthz`, `/readyz`; [`destination`] the seam between the
//!   protocol and a destination (worker side, committer side, their errors).
//! - [`catalog`] opening Iceberg catalogs.
//! - [`iceberg`] the Iceberg destination (sink, target, table, fence, `floe.*` table state,
//!   writer, schema evolution); [`raw`] the raw S3 destination (sink, target, buffer, store).
//! - [`worker`] reads leased shards and hands off pending batches; [`commit`] the committer.
//! - [`channel`] the control plane (create, describe, update, delete, activation) and the member
//!   channels of a table per topic or per route, shared with `floe run`.
//! - [`app`] `floe run`: wiring, supervision, three-phase shutdown.
//! - [`cli`] the `floe` subcommands; [`tools`] quickstart, load generator, sample events.
//!
//! Invariants (docs/design.md "Invariants"; pinned by `commit`, `model`, `tests/it/commit_race.rs`,
//! `tests/it/crash.rs`):
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
pub mod channel;
pub mod cli;
pub mod commit;
pub mod config;
pub mod convert;
pub mod destination;
pub mod dlq;
#[cfg(feature = "testsuite")]
pub mod failpoint;
#[cfg(not(feature = "testsuite"))]
mod failpoint;
pub mod health;
pub mod iceberg;
pub mod lease;
pub mod model;
pub mod raw;
pub mod registry;
pub mod retry;
pub mod schema;
pub mod source;
pub mod telemetry;
pub mod time;
pub mod tools;
pub mod worker;
