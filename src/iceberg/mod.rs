//! The Iceberg destination: the worker's side ([`sink`]: convert records into columns, write
//! Parquet data files, stage DLQ entries), the committer's side ([`target`]: one fenced fast
//! append carrying the checkpoints, unknown outcomes reconciled, DLQ objects published), the
//! channel's table ([`table`]: creation, ownership, schema check, same-table check), the commit
//! fence ([`fence`]), floe's `floe.*` table state ([`table_state`]) and the Parquet writer
//! ([`writer`]).

use std::sync::Arc;

use iceberg::{Catalog, TableIdent};

use crate::dlq::Dlq;
use crate::registry::decoder::RecordDecoder;
use crate::schema::MappedSchema;
use writer::WriterSettings;

pub mod changes;
pub mod deletes;
pub mod evolve;
pub mod fence;
pub mod maintenance;
pub mod orphans;
pub mod rewrite;
mod route_fields;
pub mod sink;
mod slots;
pub mod table;
pub mod table_state;
pub mod target;
pub mod writer;

/// An Iceberg destination as a channel's worker and committer use it: table, schema, DLQ.
#[derive(Clone)]
pub struct IcebergIo {
    /// The catalog holding the channel's table.
    pub catalog: Arc<dyn Catalog>,
    /// The channel's table.
    pub ident: TableIdent,
    /// The channel's mapped schema.
    pub schema: Arc<MappedSchema>,
    /// The channel's DLQ.
    pub dlq: Dlq,
    /// Data-file writer settings (compression, target file size).
    pub writer: WriterSettings,
    /// Record framing (`record.format`): the JSON payload of each record.
    pub record_decoder: RecordDecoder,
    /// Table maintenance by the committer (`[channel.destination.maintenance]`).
    pub maintenance: crate::config::MaintenanceConfig,
    /// The catalog's swap for maintenance snapshots (`None`: the catalog has none).
    pub swap: Option<Arc<dyn crate::catalog::swap::TableSwap>>,
    /// How the orphan sweep lists the table location (`None`: no sweep on this catalog).
    pub lister: Option<orphans::FileLister>,
    /// `evolution = "compatible"`: how the worker evolves the table (`None`: it never does).
    pub evolution: Option<EvolutionSettings>,
    /// A member of a channel with `table = "{route}"`: which records this table keeps
    /// (docs/routing.md); `None`: every record.
    pub route: Option<Arc<crate::convert::route::Router>>,
    /// Change data capture (`record.envelope`, `destination.mode = "upsert"`; docs/cdc.md):
    /// `None` when every record is a row to append.
    pub changes: Option<changes::ChangeSettings>,
}

impl IcebergIo {
    /// The key of an upsert table (`destination.mode = "upsert"`), `None` for an append table:
    /// what the committer's target is switched to upsert commits with.
    pub fn upsert_key(&self) -> Option<Vec<String>> {
        self.changes
            .as_ref()
            .filter(|c| c.mode == crate::config::WriteMode::Upsert)
            .map(|c| c.key.clone())
    }
}

/// What a worker needs to evolve its channel's table (`[channel.schema] evolution =
/// "compatible"`, [`evolve`]).
#[derive(Clone)]
pub struct EvolutionSettings {
    /// The channel's schema (`glue_schema_arn`, or the Confluent `subject`): versions of another
    /// schema are never applied.
    pub schema_arn: String,
    /// The registry versions are looked up in.
    pub registry: crate::registry::channel_schema::ChannelRegistry,
    /// The channel's version as activation resolved it (recorded first in the history).
    pub base: Option<evolve::VersionRef>,
    /// `record.format = "json"` with `version = "latest"`: how often to ask for a new latest
    /// version (`None` on `gsr_json`, where each record names its version).
    pub poll_latest: Option<std::time::Duration>,
}
