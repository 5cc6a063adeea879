//! The route field of a routed `avro` or `protobuf` channel's records (docs/routing.md,
//! "Fan-out by a field"): read by the record's writer schema, the one its Confluent schema id
//! (and message indexes) names in the registry, whichever version the member's own table was
//! made from. Ids are immutable, so every member of the channel reads the same route value
//! from the same record: each record is kept by exactly one member.
//!
//! ```text
//!  record ─> framing ─bad─> unreadable: the unroutable owner converts it (its real code)
//!              └ schema key ─> reader cache ─hit─> FieldReader ─> route value ─> Router
//!                  └ miss ─> registry by id (cached for the process)
//!                       ├ not found, another schema type, no mapping ─> unreadable
//!                       ├ no such top-level field, or not a routable type ─> no route value
//!                       │   (unroutable: the DLQ's UNROUTABLE or the default table)
//!                       └ unavailable ─> the worker restarts from the table's checkpoints
//! ```

use std::collections::HashMap;
use std::sync::Arc;

use crate::convert::route::{FieldReader, RouteDecision, Router};
use crate::registry::confluent::{self, ConfluentClient, RegistryError, SchemaType};
use crate::registry::framing::confluent::{self as confluent_framing, SchemaKey};
use crate::schema::protobuf::MessageSelector;

/// The route field readers of one member's records, by writer schema.
pub struct RouteFields {
    client: Arc<ConfluentClient>,
    /// Whether the records are Protobuf messages (message indexes follow the schema id).
    protobuf: bool,
    /// The reader of each schema key met; `None`: its records cannot be read.
    readers: HashMap<SchemaKey, Option<FieldReader>>,
}

impl RouteFields {
    /// The readers of a `protobuf` (or else `avro`) channel's records, whose writer schemas
    /// `client` looks up.
    pub fn new(client: Arc<ConfluentClient>, protobuf: bool) -> RouteFields {
        RouteFields {
            client,
            protobuf,
            readers: HashMap::new(),
        }
    }

    /// What `router`'s member does with the Confluent-framed `record`.
    ///
    /// Errors: the registry could not be asked for the record's schema id (not a property of
    /// the record: nothing is decided).
    pub async fn decide(
        &mut self,
        router: &Router,
        record: &[u8],
    ) -> Result<RouteDecision, RegistryError> {
        let Ok(framed) = confluent_framing::parse(record, self.protobuf) else {
            return Ok(router.decide_unreadable());
        };
        let key = SchemaKey {
            id: framed.id,
            indexes: framed.indexes,
        };
        let reader = match self.readers.get(&key) {
            Some(reader) => reader,
            None => {
                let reader = match self.client.by_id(key.id).await {
                    Ok(resolved) => self.reader_of(&resolved, &key, router.field()),
                    // Not cached: the client answers again from its negative cache.
                    Err(RegistryError::NotFound(_)) => return Ok(router.decide_unreadable()),
                    Err(e) => return Err(e),
                };
                self.readers.entry(key).or_insert(reader)
            }
        };
        Ok(match reader {
            Some(reader) => router.decide_read(reader, framed.payload),
            None => router.decide_unreadable(),
        })
    }

    /// The reader of `field` in the records of schema `resolved` (key `key`); `None` when
    /// they cannot be read (another schema type than the channel's format, or a schema with
    /// no mapping, whose records the converter refuses anyway).
    fn reader_of(
        &self,
        resolved: &confluent::ResolvedSchema,
        key: &SchemaKey,
        field: &str,
    ) -> Option<FieldReader> {
        let expected = if self.protobuf {
            SchemaType::Protobuf
        } else {
            SchemaType::Avro
        };
        if resolved.schema_type != expected {
            return None;
        }
        let message = MessageSelector::Indexes(key.indexes.clone());
        let mapped = confluent::map_schema(resolved, "", Some(&message)).ok()?;
        match FieldReader::of(&mapped, field)? {
            FieldReader::Unusable(why) => {
                tracing::warn!(
                    subject = %self.client.subject(),
                    schema_id = key.id,
                    reason = %why,
                    "the schema's records have no route value: they are unroutable"
                );
                Some(FieldReader::Unusable(format!("{key}: {why}")))
            }
            reader => Some(reader),
        }
    }
}
