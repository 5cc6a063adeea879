//! floe: deliver Kafka and Kinesis records into hour-partitioned Apache Iceberg tables, exactly once.
#![warn(missing_docs)]

pub mod cli;
pub mod convert;
pub mod events;
pub mod model;
pub mod schema;
pub mod source;
