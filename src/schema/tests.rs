//! Unit tests of the schema mapping.
