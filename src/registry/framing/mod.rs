//! The framing of every wire format floe reads: the bytes a registry's serializer puts around a
//! record's payload to name its schema. Pure functions over the record's bytes, no I/O; a record
//! whose framing is wrong gets its [`crate::model::DlqReason`] here.
//!
//! - [`gsr`]: the AWS Glue Schema Registry header (version byte, compression byte, schema
//!   version id), `record.format = "gsr_json"` and `"gsr_avro"`.
//! - [`confluent`]: the Confluent wire format (magic byte, schema id, Protobuf message indexes),
//!   `record.format = "avro"`, `"protobuf"` and `"json_sr"`.

pub mod confluent;
pub mod gsr;
