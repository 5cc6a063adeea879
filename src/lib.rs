//! floe: deliver Kafka and Kinesis records into hour-partitioned Apache Iceberg tables, exactly once.
#![warn(missing_docs)]

pub mod app;
pub mod catalog;
pub mod cli;
pub mod commit;
pub mod config;
pub mod convert;
pub mod dlq;
pub mod events;
pub mod lease;
pub mod model;
pub mod quickstart;
pub mod schema;
pub mod source;
pub mod telemetry;
pub mod worker;
pub mod writer;
