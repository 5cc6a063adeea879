//! Avro schema → Iceberg: the mapper of `avro` and `gsr_avro` channels (docs/schema-mapping.md
//! "Avro → Iceberg"), with the Iceberg spec's Avro appendix as the reference.
//!
//! Not mapped yet: every schema is refused (the decoder lands with the mapper).

use super::{MappedSchema, SchemaError};

/// What the Avro decoder needs of a record's writer schema beyond the mapped fields.
#[derive(Debug)]
pub struct AvroWriter {}

impl MappedSchema {
    /// Maps the Avro writer schema `schema` (its JSON text; `references` are the texts of the
    /// schemas it references, in dependency order) to an Iceberg schema, with `partition_field`
    /// (a top-level `timestamp-millis`/`timestamp-micros` field) as the `hour` partition source.
    ///
    /// Errors: [`SchemaError`] naming the field by path.
    pub fn from_avro(
        schema: &str,
        references: &[String],
        partition_field: &str,
    ) -> Result<MappedSchema, SchemaError> {
        let _ = (schema, references, partition_field);
        Err(SchemaError::unsupported(
            "",
            "Avro schemas are not mapped yet",
        ))
    }
}
