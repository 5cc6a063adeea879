//! floe's integration tests, in one test binary: one module per area (each was its own test
//! binary once; every binary linked the whole crate with the AWS SDKs, which took a large share
//! of CI's test build on 2 cores). `common` and `rest_fixture` are the helpers they share.
//!
//! Run them all (scripts/test.sh starts the services first), or one module by its path:
//!
//! ```text
//! cargo test --features testsuite --test it
//! cargo test --features testsuite --test it -- kafka_source::
//! cargo test --features testsuite --test it -- layout:: --nocapture
//! ```
//!
//! `lease_conformance` and `worker_leases` use the in-memory fakes of the `testsuite` feature
//! and are compiled only with it. The tests that spawn floe's binaries find them through
//! `CARGO_BIN_EXE_*`, which cargo builds for this test target.
//!
//! What each module needs running besides cargo (scripts/test.sh starts all of it; without it
//! those tests fail with instructions, they never pass silently):
//! - nothing: activation (but AWS credentials in the environment, any: one configuration has
//!   an `[aws]` section), cases, cdc_sink, channel_cli, config_files, deploy (checks more with `promtool`
//!   and `systemd-analyze` installed), docs, fleet_sim, kafka_positions, kafka_source, layout,
//!   operator_errors, tombstones, worker_leases, worker_shard_end;
//! - the Python virtualenv (`FLOE_PYTHON`: PyIceberg, DuckDB, the Confluent serializers):
//!   confluent_formats, kafka_topics, maintenance, partition_specs, pipeline, quickstart,
//!   route_field, routing, row_delta;
//! - the AWS emulators (`deploy/local/aws-emulators.sh`), most with the Python virtualenv too:
//!   aws_catalogs, aws_fleet, aws_kafka, crash, glue_schema_registry, kinesis_source (also
//!   kinesalite and the enhanced fan-out emulator), loadtest, ops_endpoints, raw_s3,
//!   rest_catalog, schema_evolution;
//! - PostgreSQL (`deploy/local/postgres.sh`): commit_race, lease_conformance (and the AWS
//!   emulators), postgres_fleet (and the AWS emulators, the Python virtualenv);
//! - the local schema registry (`deploy/local/schema-registry.sh`): confluent_registry.

mod common;
mod rest_fixture;

mod activation;
mod aws_catalogs;
mod aws_fleet;
mod aws_kafka;
mod cases;
mod cdc_sink;
mod channel_cli;
mod commit_race;
mod config_files;
mod confluent_formats;
mod confluent_registry;
mod crash;
mod deploy;
mod docs;
mod fleet_sim;
mod glue_schema_registry;
mod kafka_fan_out;
mod kafka_positions;
mod kafka_shared_clients;
mod kafka_source;
mod kafka_topics;
mod kinesis_source;
mod layout;
#[cfg(feature = "testsuite")]
mod lease_conformance;
mod loadtest;
mod maintenance;
mod operator_errors;
mod ops_endpoints;
mod partition_specs;
mod pipeline;
mod postgres_fleet;
mod quickstart;
mod raw_s3;
mod rest_catalog;
mod route_field;
mod route_formats;
mod routing;
mod row_delta;
mod schema_evolution;
mod tombstones;
mod upsert_commit;
mod upsert_maintenance;
#[cfg(feature = "testsuite")]
mod worker_leases;
mod worker_shard_end;
