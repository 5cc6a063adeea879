//! Schema evolution of a channel's table (`[channel.schema] evolution = "compatible"`, issue 19;
//! docs/schema-mapping.md "Schema evolution", docs/design.md "Schema evolution").
//!
//! ```text
//!  worker meets version V (not in floe.schema-history)
//!    └─ reload the table ── V applied meanwhile (another worker)? ──> use it
//!       └─ evolve(table schema, V mapped)    (pure: crate::schema::evolution)
//!            incompatible ──> V's records go to the DLQ (SCHEMA_MISMATCH, the difference named)
//!            compatible ──> ONE swap of the table metadata:
//!                             requirements: table uuid, current schema id, last column id
//!                             updates: add-schema + set-current-schema (when the schema changes),
//!                                      floe.schema-version-id = V, floe.schema-history += V
//!                           lost swap / failed requirement ──> reload and decide again
//! ```
//!
//! The schema change is its own commit, made by the worker that first meets the version, not
//! part of a data commit: the worker must convert V's records into columns that carry the
//! table's field ids for V's new fields, and only the table assigns those ids. So the change is
//! committed before any row of V is converted, and a data file with V's columns can only exist
//! once the table has them: a batch converted under the new schema is never committed into a
//! table still at the old one (schemas only move forward). A batch converted before the change
//! still commits after it (its files lack the new columns: readers see nulls, by field id).
//!
//! Concurrency: the requirements make the swap a compare-and-swap on the schema, so two workers
//! meeting V at once make one change; the loser finds V in the history on its reload. The
//! committer's data commits are fenced to a snapshot, not to a schema: a data commit that loses
//! the catalog swap to a schema change re-plans on the next round (docs/design.md step 4).
//! Killing a worker at any step is safe: before the swap nothing changed; after it, the table
//! has V and the next worker to meet V's records uses it.

use std::time::Duration;

use iceberg::table::Table;
use iceberg::{Catalog, ErrorKind, TableIdent, TableRequirement, TableUpdate};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::catalog::swap::TableSwap;
use crate::retry::Backoff;
use crate::schema::evolution::{evolve, Change, Incompatible};
use crate::schema::MappedSchema;
use crate::telemetry;
use crate::time::now_ms;

/// Table property: the schema version id whose records the table was last evolved for (the
/// channel's current version): a Glue `SchemaVersionId`, or a Confluent schema id and message
/// indexes packed into a UUID ([`crate::registry::framing::confluent::SchemaKey::to_uuid`]).
pub const PROP_SCHEMA_VERSION_ID: &str = "floe.schema-version-id";
/// Table property: the schema history, a JSON array of [`AppliedVersion`], oldest first.
pub const PROP_SCHEMA_HISTORY: &str = "floe.schema-history";

/// Attempts of one schema change while swaps are lost to other commits.
const ATTEMPTS: u32 = 8;

/// One schema version applied to the table, as `floe.schema-history` records it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct AppliedVersion {
    /// Glue `SchemaVersionId`, or a Confluent schema key packed into a UUID.
    pub version_id: Uuid,
    /// Glue `VersionNumber`, or the version of the Confluent subject.
    pub version_number: i64,
    /// The table's schema id from then on.
    pub schema_id: i32,
    /// When it was applied, ms since the Unix epoch.
    pub applied_at_ms: i64,
    /// What changed, as [`Change`]'s text (empty: the version fit the table as it was, or it is
    /// the version the channel was created with).
    #[serde(default)]
    pub changes: Vec<String>,
}

/// The table's schema history (`floe.schema-history`); empty when the table never evolved.
///
/// Errors: the property is not the JSON floe writes (edited by hand): named with the property.
pub fn schema_history(table: &Table) -> Result<Vec<AppliedVersion>, String> {
    match table.metadata().properties().get(PROP_SCHEMA_HISTORY) {
        None => Ok(Vec::new()),
        Some(text) => serde_json::from_str(text)
            .map_err(|e| format!("table property {PROP_SCHEMA_HISTORY} is unreadable: {e}")),
    }
}

/// Whether version `id` is in the table's schema history.
pub fn is_applied(table: &Table, id: Uuid) -> bool {
    schema_history(table).is_ok_and(|h| h.iter().any(|v| v.version_id == id))
}

/// The version the table was last evolved for (`floe.schema-version-id`).
pub fn current_version(table: &Table) -> Option<Uuid> {
    table
        .metadata()
        .properties()
        .get(PROP_SCHEMA_VERSION_ID)
        .and_then(|t| Uuid::parse_str(t).ok())
}

/// A schema version, as the evolution needs it: a Glue version, or a Confluent schema id of the
/// channel's subject.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VersionRef {
    /// `SchemaVersionId`, or the Confluent [`crate::registry::framing::confluent::SchemaKey`] packed into a UUID.
    pub id: Uuid,
    /// `VersionNumber`, or the version of the subject.
    pub number: i64,
}

/// What [`apply_version`] did.
#[derive(Debug)]
pub enum Applied {
    /// This call committed the version: the table's schema changed (`changes` not empty) or the
    /// version was only recorded (it fit the table as it was).
    Committed {
        /// The table as committed.
        table: Table,
        /// What changed.
        changes: Vec<Change>,
    },
    /// The version was in the history already (another worker applied it).
    AlreadyApplied {
        /// The table as loaded.
        table: Table,
    },
}

impl Applied {
    /// The table after the call.
    pub fn table(self) -> Table {
        match self {
            Applied::Committed { table, .. } | Applied::AlreadyApplied { table } => table,
        }
    }
}

/// Why a version was not applied.
#[derive(Debug, Clone, thiserror::Error)]
pub enum EvolveError {
    /// The version is not a compatible evolution of the table: its records go to the DLQ.
    #[error("not a compatible evolution of the table: {0}")]
    Incompatible(Incompatible),
    /// The catalog failed or every attempt lost its swap: the worker retries from the table's
    /// checkpoints (nothing goes to the DLQ).
    #[error("schema change of table {table}: {message}")]
    Unavailable {
        /// The table.
        table: String,
        /// What failed.
        message: String,
    },
}

/// Applies `version` (mapped as `mapped`, partitioned on `partition_field`) to the table `ident`,
/// starting from `table` as last loaded; `base` is the channel's version at activation, recorded
/// first when the history is empty. Decides with [`evolve`] on a freshly loaded table, commits
/// through `swap` (see the module docs), and retries lost swaps with backoff.
///
/// Errors: [`EvolveError::Incompatible`] with the first difference; `Unavailable`.
#[allow(clippy::too_many_arguments)]
pub async fn apply_version(
    channel: &str,
    catalog: &dyn Catalog,
    swap: &dyn TableSwap,
    ident: &TableIdent,
    table_uuid: Uuid,
    base: Option<VersionRef>,
    version: VersionRef,
    mapped: &MappedSchema,
) -> Result<Applied, EvolveError> {
    let unavailable = |message: String| EvolveError::Unavailable {
        table: ident.to_string(),
        message,
    };
    let mut backoff = Backoff::new(Duration::from_millis(50), Duration::from_secs(2));
    let mut last_error = String::new();
    for attempt in 1..=ATTEMPTS {
        if attempt > 1 {
            tokio::time::sleep(backoff.next_delay()).await;
        }
        telemetry::record_catalog_table_load(channel, "worker");
        let table = catalog
            .load_table(ident)
            .await
            .map_err(|e| unavailable(format!("load table: {e}")))?;
        if table.metadata().uuid() != table_uuid {
            return Err(unavailable(format!(
                "the table was replaced (uuid {table_uuid}, now {})",
                table.metadata().uuid()
            )));
        }
        let mut history = schema_history(&table).map_err(unavailable)?;
        if history.iter().any(|v| v.version_id == version.id) {
            return Ok(Applied::AlreadyApplied { table });
        }
        let md = table.metadata();
        let current = md.current_schema();
        let evolution = evolve(
            current,
            md.last_column_id(),
            mapped.iceberg_schema(),
            mapped.partition_field(),
            &mapped.defaulted_fields(),
        )
        .map_err(EvolveError::Incompatible)?;
        let at = now_ms();
        if history.is_empty() {
            if let Some(base) = base.filter(|b| b.id != version.id) {
                history.push(AppliedVersion {
                    version_id: base.id,
                    version_number: base.number,
                    schema_id: md.current_schema_id(),
                    // When the table was created, as far as its metadata log reaches.
                    applied_at_ms: md
                        .metadata_log()
                        .iter()
                        .map(|l| l.timestamp_ms)
                        .chain([md.last_updated_ms(), at])
                        .min()
                        .unwrap_or(at),
                    changes: Vec::new(),
                });
            }
        }
        let changed = !evolution.changes.is_empty();
        let next_schema_id = if changed {
            md.schemas_iter().map(|s| s.schema_id()).max().unwrap_or(0) + 1
        } else {
            md.current_schema_id()
        };
        history.push(AppliedVersion {
            version_id: version.id,
            version_number: version.number,
            schema_id: next_schema_id,
            applied_at_ms: at,
            changes: evolution.changes.iter().map(|c| c.to_string()).collect(),
        });
        let requirements = vec![
            TableRequirement::UuidMatch { uuid: md.uuid() },
            TableRequirement::CurrentSchemaIdMatch {
                current_schema_id: md.current_schema_id(),
            },
            TableRequirement::LastAssignedFieldIdMatch {
                last_assigned_field_id: md.last_column_id(),
            },
        ];
        let mut updates = Vec::new();
        if changed {
            updates.push(TableUpdate::AddSchema {
                schema: evolution.schema.clone(),
            });
            updates.push(TableUpdate::SetCurrentSchema { schema_id: -1 });
        }
        updates.push(TableUpdate::SetProperties {
            updates: [
                (PROP_SCHEMA_VERSION_ID.to_string(), version.id.to_string()),
                (
                    PROP_SCHEMA_HISTORY.to_string(),
                    serde_json::to_string(&history).expect("history serializes"),
                ),
            ]
            .into_iter()
            .collect(),
        });
        crate::failpoint::step_point("evolution-decided").await;
        match swap.swap(ident, requirements, updates).await {
            Ok(committed) => {
                crate::failpoint::step_point("evolution-committed").await;
                let outcome = if changed { "evolved" } else { "recorded" };
                telemetry::record_schema_change(channel, outcome);
                let changes_text: Vec<String> =
                    evolution.changes.iter().map(|c| c.to_string()).collect();
                tracing::info!(
                    channel,
                    table = %ident,
                    schema_version_id = %version.id,
                    version_number = version.number,
                    schema_id = committed.metadata().current_schema_id(),
                    changes = ?changes_text,
                    "schema {outcome}: table now takes schema version {}",
                    version.number
                );
                return Ok(Applied::Committed {
                    table: committed,
                    changes: evolution.changes,
                });
            }
            // Nothing committed: another commit (a data commit, another worker's schema
            // change) came first. Decide again on the fresh table.
            Err(e)
                if matches!(
                    e.kind(),
                    ErrorKind::DataInvalid | ErrorKind::CatalogCommitConflicts
                ) =>
            {
                tracing::debug!(channel, table = %ident, attempt, error = %e, "schema change lost its swap; deciding again");
                last_error = e.to_string();
            }
            // Unknown outcome: the reload at the next attempt tells (the version is then in
            // the history, or not).
            Err(e) => {
                tracing::warn!(channel, table = %ident, attempt, error = %e, "schema change outcome unknown; reloading the table");
                last_error = e.to_string();
            }
        }
    }
    Err(unavailable(format!(
        "{ATTEMPTS} attempts did not commit (last: {last_error})"
    )))
}
