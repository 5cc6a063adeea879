//! JSON Schema → Iceberg schema mapping.
