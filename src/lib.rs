//! floe: deliver Kafka and Kinesis records into hour-partitioned Apache Iceberg tables, exactly once.
#![warn(missing_docs)]

pub mod cli;
pub mod convert;
pub mod lease;
pub mod model;
pub mod schema;
