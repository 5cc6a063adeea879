//! The worker's side of the Iceberg destination: records are unframed by the channel's
//! [`RecordDecoder`] (plain JSON, the GSR header, the Confluent wire format), routed when the
//! channel fans out by a field, and converted (JSON Schema, Avro or Protobuf) into the columns of
//! the table's current schema; a batch is written as Parquet data files under the table location
//! plus one staged DLQ object (docs/design.md, protocol step 2). Nothing is referenced by the
//! table until the committer commits the batch.
//!
//! ```text
//!  records ─> [route] ─> RecordDecoder ─> payload ─> Converter (of the record's version) ─> rows
//!                            │ schema key (evolution)      ▲
//!                            └─> registry::versions ─> Candidate ─> applied (evolve) ─┘
//! ```
//!
//! With `evolution = "compatible"` the sink keeps one converter per schema version it has met,
//! all writing the columns of the table's current schema; a version met for the first time is
//! looked up and mapped by the registry room ([`crate::registry::versions`]) and, when not yet in
//! the table's schema history, applied first ([`super::evolve`]). When the table's schema changes (this
//! worker's change or another's, seen on a reload), the rows converted so far are sealed with
//! the table they were converted for and written as data files of that schema: a batch may then
//! hold files of two schemas, which the table reads alike by field id.
//!
//! Every run of buffered rows is tagged with its shard ([`super::slots`]): one shard's rows can
//! be dropped ([`BatchSink::drop_shard`]) or written in a batch of their own while the others
//! stay buffered.
//!
//! A channel with an envelope or in upsert mode reads change events ([`super::changes`]): rows
//! and deleted keys, each numbered in read order; an upsert batch keeps each key's last event
//! and names its deleted keys in a key file beside the data files.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Instant;

use arrow_array::RecordBatch;
use async_trait::async_trait;
use iceberg::table::Table;
use uuid::Uuid;

use super::changes::{key_file_path, last_event_per_key, Changes, KeyedRows};
use super::evolve::{apply_version, is_applied, EvolveError, VersionRef};
use super::route_fields::RouteFields;
use super::slots::{split, split_values, Runs, Slot, Slots};
use super::table::check_same_table;
use super::table_state::table_checkpoints;
use super::writer::{data_file_paths, write_data_files, WrittenFiles};
use super::{EvolutionSettings, IcebergIo};
use crate::config::{Envelope, GlueSchemaVersion};
use crate::convert::envelope::{debezium, upsert_key, Change};
use crate::convert::route::RouteDecision;
use crate::convert::Converter;
use crate::destination::{BatchSink, Pushed, SinkError, Written};
use crate::dlq::DlqEntry;
use crate::model::{BatchFiles, Checkpoints, DlqCode, DlqReason, ShardId};
use crate::registry::channel_schema::ChannelRegistry;
use crate::registry::decoder::{PayloadError, RecordDecoder};
use crate::registry::versions::{candidate, glue_candidate, Candidate};
use crate::schema::{Decoding, MappedSchema};
use crate::source::SourceRecord;
use crate::telemetry;

/// Buffers one channel's records as Arrow columns and writes them as Parquet data files.
pub struct IcebergSink {
    channel: String,
    io: IcebergIo,
    /// The table as last loaded: its uuid is the one every later load must still have.
    table: Box<Table>,
    /// The converter of the channel's version (with evolution on a `json` channel: the latest
    /// version applied).
    converter: Box<Tagged>,
    max_record_size: usize,
    /// Rows converted for an earlier schema of the table (or kept back by a write of other
    /// shards), with that table.
    sealed: Vec<Held>,
    evolving: Option<Box<Evolving>>,
    /// The shard of every buffered row.
    slots: Slots,
    /// The slot of the records [`BatchSink::push`] is converting.
    pushing: Slot,
    /// Change events (an envelope or upsert mode; `None`: every record is a row to append).
    changes: Option<Box<Changes>>,
    /// A routed `avro` or `protobuf` member: the route field's reader of each writer schema
    /// (`None`: a JSON format reads the route field from the document).
    route_fields: Option<Box<RouteFields>>,
}

/// Buffered rows kept aside: the table they were converted for, the rows, their shard runs and
/// (upsert mode) each row's event seq.
type Held = (Table, RecordBatch, Runs, Vec<u64>);

/// A converter, with the shard slot of every run of its rows and (upsert mode) each row's event
/// seq.
struct Tagged {
    conv: Converter,
    runs: Runs,
    seqs: Vec<u64>,
}

impl Tagged {
    fn new(conv: Converter) -> Self {
        Tagged {
            conv,
            runs: Runs::default(),
            seqs: Vec::new(),
        }
    }

    /// Converts one record of `slot`'s shard, the event numbered `seq` (upsert mode).
    fn push(&mut self, slot: Slot, record: &[u8], seq: Option<u64>) -> Result<i64, DlqReason> {
        let pushed = self.conv.push(record);
        self.runs.mark(slot, self.conv.num_rows());
        if let (Ok(_), Some(seq)) = (&pushed, seq) {
            self.seqs.push(seq);
        }
        pushed
    }

    /// The rows converted, with their runs and seqs; empty afterwards.
    fn finish(&mut self) -> (RecordBatch, Runs, Vec<u64>) {
        (
            self.conv.finish(),
            std::mem::take(&mut self.runs),
            std::mem::take(&mut self.seqs),
        )
    }
}

/// One record's payload (after its framing) into the buffer: a row, or with an envelope the
/// change it carries (a row, a deleted key, a truncate counted and skipped).
///
/// Errors: why the record goes to the DLQ.
fn push_payload(
    conv: &mut Tagged,
    changes: Option<&mut Changes>,
    slot: Slot,
    payload: &[u8],
) -> Result<(), DlqReason> {
    let Some(changes) = changes else {
        return conv.push(slot, payload, None).map(|_| ());
    };
    let change = match changes.envelope() {
        Envelope::Debezium => debezium(payload)?,
        Envelope::None | Envelope::Upsert => Change::Row(payload),
    };
    match change {
        Change::Row(row) => {
            let seq = changes.next_seq();
            conv.push(slot, row, seq)?;
            changes.count(change.op());
            Ok(())
        }
        Change::Delete(key) => changes.delete(slot, &key),
        Change::Truncate => {
            changes.count(change.op());
            Ok(())
        }
    }
}

/// A batch after each key's last event: rows per schema, and the deleted keys.
type LastEvents = (
    Vec<(Table, RecordBatch)>,
    Vec<super::deletes::keys::KeyHash>,
);

/// What a write takes out of the buffer: rows per schema with their seqs, and the deleted keys
/// (key columns and seqs).
struct Taken {
    groups: Vec<(Table, RecordBatch, Vec<u64>)>,
    deleted_key: Vec<arrow_array::ArrayRef>,
    deleted_seqs: Vec<u64>,
}

/// The sink's state under `evolution = "compatible"`.
struct Evolving {
    settings: EvolutionSettings,
    /// The version [`IcebergSink::converter`] validates: the channel's base at activation, then
    /// the newest version of the channel's schema (subject) applied to the table.
    base: Option<VersionRef>,
    /// The other versions met, each with its converter for the table's current schema.
    others: HashMap<Uuid, Tagged>,
    /// Versions whose records go to the DLQ, with the reason (cleared when the schema changes).
    refused: HashMap<Uuid, DlqReason>,
    /// When a `json` channel next asks for the latest version.
    next_poll: Option<Instant>,
}

impl Evolving {
    /// The id of [`Evolving::base`].
    fn base_id(&self) -> Option<Uuid> {
        self.base.map(|b| b.id)
    }
}

fn arrow_of(table: &Table) -> Result<arrow_schema::SchemaRef, SinkError> {
    Ok(Arc::new(
        iceberg::arrow::schema_to_arrow_schema(table.metadata().current_schema())
            .map_err(|e| SinkError::Incompatible(e.to_string()))?,
    ))
}

fn mismatch(message: String) -> DlqReason {
    DlqReason::record(DlqCode::SchemaMismatch, message)
}

/// The version `candidate` is, as the evolution records it.
fn version_of(candidate: &Candidate) -> VersionRef {
    VersionRef {
        id: candidate.id,
        number: candidate.number,
    }
}

impl IcebergSink {
    /// Loads the channel's table and builds a converter for its current schema; records larger
    /// than `max_record_size` bytes are rejected as `RECORD_TOO_LARGE`.
    ///
    /// Errors: `TableGone`, `Incompatible` (the table's columns differ from the schema's),
    /// `Unavailable`.
    pub async fn open(
        channel: &str,
        io: IcebergIo,
        max_record_size: usize,
    ) -> Result<Self, SinkError> {
        telemetry::record_catalog_table_load(channel, "worker");
        let table = io
            .catalog
            .load_table(&io.ident)
            .await
            .map_err(|e| SinkError::from_iceberg("load table", e))?;
        let arrow = arrow_of(&table)?;
        // A table that evolved once keeps its evolved schema when evolution is switched off.
        let evolved = table
            .metadata()
            .properties()
            .contains_key(super::evolve::PROP_SCHEMA_HISTORY);
        let converter = if io.evolution.is_some() || evolved {
            Converter::for_evolved_table(io.schema.clone(), arrow)
        } else {
            Converter::try_new(io.schema.clone(), arrow)
        }
        .map_err(|e| SinkError::Incompatible(e.to_string()))?
        .with_max_record_size(max_record_size);
        let changes = match &io.changes {
            Some(settings) => Some(Box::new(
                Changes::try_new(settings.clone(), &io.schema, max_record_size)
                    .map_err(|e| SinkError::Incompatible(e.to_string()))?,
            )),
            None => None,
        };
        let evolving = io.evolution.clone().map(|settings| {
            Box::new(Evolving {
                base: settings.base,
                next_poll: settings.poll_latest.map(|every| Instant::now() + every),
                settings,
                others: HashMap::new(),
                refused: HashMap::new(),
            })
        });
        let route_fields = match (&io.route, &io.record_decoder, io.schema.decoding()) {
            (
                Some(_),
                RecordDecoder::Confluent {
                    protobuf, client, ..
                },
                Decoding::Avro(_) | Decoding::Protobuf(_),
            ) => Some(Box::new(RouteFields::new(client.clone(), *protobuf))),
            _ => None,
        };
        Ok(IcebergSink {
            channel: channel.to_string(),
            io,
            table: Box::new(table),
            converter: Box::new(Tagged::new(converter)),
            max_record_size,
            sealed: Vec::new(),
            evolving,
            slots: Slots::default(),
            pushing: 0,
            changes,
            route_fields,
        })
    }

    fn evolved_converter(&self, schema: Arc<MappedSchema>) -> Result<Converter, SinkError> {
        Ok(Converter::for_evolved_table(schema, arrow_of(&self.table)?)
            .map_err(|e| SinkError::Incompatible(e.to_string()))?
            .with_max_record_size(self.max_record_size))
    }

    /// Takes `fresh` (a reload of the same table) as the sink's table. When its schema differs
    /// from the one the converters write, the rows converted so far are sealed with the old
    /// table and every converter is rebuilt for the new schema (evolution only: without it the
    /// schema never changes under floe).
    fn switch_table(&mut self, fresh: Table) -> Result<(), SinkError> {
        let same =
            fresh.metadata().current_schema_id() == self.table.metadata().current_schema_id();
        if same || self.evolving.is_none() {
            *self.table = fresh;
            return Ok(());
        }
        let old = std::mem::replace(&mut *self.table, fresh);
        let arrow = arrow_of(&self.table)?;
        let mut sealed = Vec::new();
        let rebuild = |c: &mut Tagged,
                       sealed: &mut Vec<(RecordBatch, Runs, Vec<u64>)>|
         -> Result<(), SinkError> {
            if c.conv.num_rows() > 0 {
                sealed.push(c.finish());
            }
            c.conv = Converter::for_evolved_table(c.conv.schema().clone(), arrow.clone())
                .map_err(|e| SinkError::Incompatible(e.to_string()))?
                .with_max_record_size(c.conv.max_record_size());
            Ok(())
        };
        rebuild(&mut self.converter, &mut sealed)?;
        let evo = self.evolving.as_mut().expect("evolving");
        for c in evo.others.values_mut() {
            rebuild(c, &mut sealed)?;
        }
        evo.refused.clear();
        for (batch, runs, seqs) in sealed {
            self.sealed.push((old.clone(), batch, runs, seqs));
        }
        tracing::info!(
            channel = %self.channel,
            schema_id = self.table.metadata().current_schema_id(),
            "the table's schema changed: converting for the new schema"
        );
        Ok(())
    }

    /// Loads the table again, checking it is still the one the sink opened.
    ///
    /// Errors: `TableGone` for a replaced or dropped table; `Unavailable`.
    async fn load_fresh(&self) -> Result<Table, SinkError> {
        telemetry::record_catalog_table_load(&self.channel, "worker");
        let fresh = self
            .io
            .catalog
            .load_table(&self.io.ident)
            .await
            .map_err(|e| SinkError::from_iceberg("load table", e))?;
        check_same_table(&self.io.ident, &self.table.metadata().uuid(), &fresh)
            .map_err(|e| SinkError::TableGone(e.to_string()))?;
        Ok(fresh)
    }

    /// Reloads the table (same uuid) and switches to it.
    async fn reload(&mut self) -> Result<(), SinkError> {
        let fresh = self.load_fresh().await?;
        self.switch_table(fresh)
    }

    /// Makes version `id` usable: its converter exists when this returns `Ok(Ok(()))`, after
    /// applying it to the table when it is not in the schema history yet. `Ok(Err(reason))`:
    /// its records go to the DLQ with `reason`.
    ///
    /// Errors: `Unavailable` (registry or catalog), `TableGone`, `Incompatible`.
    async fn prepare_version(&mut self, id: Uuid) -> Result<Result<(), DlqReason>, SinkError> {
        let evo = self.evolving.as_ref().expect("evolving");
        if evo.base_id() == Some(id) || evo.others.contains_key(&id) {
            return Ok(Ok(()));
        }
        if let Some(reason) = evo.refused.get(&id) {
            return Ok(Err(reason.clone()));
        }
        let looked_up = candidate(
            &evo.settings.registry,
            id,
            evo.base_id(),
            &evo.settings.schema_arn,
            &self.io.schema,
        )
        .await;
        let candidate = match looked_up {
            Ok(Ok(candidate)) => candidate,
            Ok(Err(reason)) => return Ok(Err(reason)),
            Err(e) => {
                telemetry::record_schema_lookup_error(&self.channel);
                return Err(SinkError::unavailable("schema registry", e));
            }
        };
        let version = version_of(&candidate);
        match self.apply(candidate).await? {
            Ok(mapped) => {
                let conv = self.evolved_converter(mapped)?;
                let evo = self.evolving.as_mut().expect("evolving");
                if evo
                    .base
                    .is_some_and(|b| b.number > 0 && version.number > b.number)
                {
                    // A newer version of the channel's schema becomes the base: the Avro reader
                    // schema of older versions from now on, so that an older record reads the
                    // same values (its missing fields' defaults) whether the table was created
                    // from this version or evolved to it.
                    self.promote_base(version, conv);
                } else {
                    evo.others.insert(id, Tagged::new(conv));
                }
                Ok(Ok(()))
            }
            Err(reason) => {
                let evo = self.evolving.as_mut().expect("evolving");
                evo.refused.insert(id, reason.clone());
                Ok(Err(reason))
            }
        }
    }

    /// Applies `candidate` to the table unless it is there already; returns its mapped schema,
    /// or why its records go to the DLQ.
    /// A refused version is logged here, once per version and worker (the caller remembers it).
    async fn apply(
        &mut self,
        candidate: Candidate,
    ) -> Result<Result<Arc<MappedSchema>, DlqReason>, SinkError> {
        let version = version_of(&candidate);
        let decided = self.decide(candidate).await?;
        if let Err(reason) = &decided {
            let polls = self
                .evolving
                .as_ref()
                .is_some_and(|e| e.settings.poll_latest.is_some());
            let outcome = if polls {
                "records are still validated by the version applied before it"
            } else {
                "its records go to the DLQ as SCHEMA_MISMATCH"
            };
            tracing::warn!(
                channel = %self.channel,
                schema_version_id = %version.id,
                version_number = version.number,
                reason = %reason.message,
                "schema version refused; {outcome}"
            );
        }
        Ok(decided)
    }

    async fn decide(
        &mut self,
        candidate: Candidate,
    ) -> Result<Result<Arc<MappedSchema>, DlqReason>, SinkError> {
        let evo = self.evolving.as_ref().expect("evolving");
        let base = evo.settings.base;
        let version = version_of(&candidate);
        let Candidate { label, mapped, .. } = candidate;
        let mapped = match mapped {
            Ok(m) => m,
            Err(reason) => return Ok(Err(reason)),
        };
        // Another worker may have applied it since this table was loaded.
        if !is_applied(&self.table, version.id) {
            self.reload().await?;
        }
        if !is_applied(&self.table, version.id) {
            let Some(swap) = self.io.swap.clone() else {
                return Err(SinkError::Incompatible(
                    "schema evolution needs a catalog floe can commit schema changes to".into(),
                ));
            };
            let applied = apply_version(
                &self.channel,
                self.io.catalog.as_ref(),
                swap.as_ref(),
                &self.io.ident,
                self.table.metadata().uuid(),
                base,
                version,
                &mapped,
            )
            .await;
            match applied {
                Ok(applied) => self.switch_table(applied.table())?,
                Err(EvolveError::Incompatible(why)) => {
                    telemetry::record_schema_change(&self.channel, "incompatible");
                    return Ok(Err(mismatch(format!(
                        "{label} is not a compatible evolution of the table: {why}"
                    ))));
                }
                Err(e @ EvolveError::Unavailable { .. }) => {
                    return Err(SinkError::unavailable("schema change", e))
                }
            }
        }
        Ok(Ok(mapped))
    }

    /// `json` channels with `version = "latest"`: when the poll is due, asks the registry for
    /// the latest version and, when it is new, applies it and validates the records from then
    /// on by it. A failed poll is logged and retried at the next one.
    async fn poll_latest(&mut self) -> Result<(), SinkError> {
        let Some(evo) = self.evolving.as_mut() else {
            return Ok(());
        };
        let (Some(at), Some(every)) = (evo.next_poll, evo.settings.poll_latest) else {
            return Ok(());
        };
        if Instant::now() < at {
            return Ok(());
        }
        evo.next_poll = Some(Instant::now() + every);
        let ChannelRegistry::Glue(registry) = evo.settings.registry.clone() else {
            return Ok(());
        };
        let arn = evo.settings.schema_arn.clone();
        let latest = match registry.by_arn(&arn, GlueSchemaVersion::Latest).await {
            Ok(v) => v,
            Err(e) => {
                telemetry::record_schema_lookup_error(&self.channel);
                tracing::warn!(channel = %self.channel, error = %e, "could not ask the registry for the latest schema version; asking again at the next poll");
                return Ok(());
            }
        };
        let evo = self.evolving.as_ref().expect("evolving");
        if evo.base_id() == Some(latest.version_id) || evo.refused.contains_key(&latest.version_id)
        {
            return Ok(());
        }
        let candidate = glue_candidate(&latest, None, &arn, &self.io.schema);
        let version = version_of(&candidate);
        match self.apply(candidate).await? {
            Ok(mapped) => {
                let conv = self.evolved_converter(mapped)?;
                self.promote_base(version, conv);
            }
            Err(reason) => {
                let evo = self.evolving.as_mut().expect("evolving");
                evo.refused.insert(version.id, reason);
            }
        }
        Ok(())
    }

    /// Makes `version` (applied to the table, converted by `conv`) the channel's base: the rows of
    /// the old base's converter are sealed, and a record of the old base's version is prepared
    /// again when next met (read through the new base where its format resolves schemas).
    fn promote_base(&mut self, version: VersionRef, conv: Converter) {
        let mut old = std::mem::replace(&mut *self.converter, Tagged::new(conv));
        if old.conv.num_rows() > 0 {
            let (rows, runs, seqs) = old.finish();
            self.sealed.push(((*self.table).clone(), rows, runs, seqs));
        }
        let evo = self.evolving.as_mut().expect("evolving");
        evo.others.remove(&version.id);
        evo.base = Some(version);
        tracing::info!(channel = %self.channel, schema_version_id = %version.id, version_number = version.number, "records are validated by the new latest schema version");
    }

    /// One record of a `gsr_json` or Confluent channel under evolution: its schema version (id)
    /// decides the converter.
    async fn push_versioned(&mut self, record: &[u8]) -> Result<Result<(), DlqReason>, SinkError> {
        let id = match self.io.record_decoder.schema_key(record) {
            Ok(id) => id,
            Err(reason) => return Ok(Err(reason)),
        };
        if let Err(reason) = self.prepare_version(id).await? {
            return Ok(Err(reason));
        }
        let payload = match self.io.record_decoder.payload_of(record) {
            Ok(p) => p,
            Err(reason) => return Ok(Err(reason)),
        };
        let slot = self.pushing;
        let evo = self.evolving.as_mut().expect("evolving");
        let conv = if evo.base_id() == Some(id) {
            &mut *self.converter
        } else {
            evo.others.get_mut(&id).expect("prepared")
        };
        Ok(push_payload(
            conv,
            self.changes.as_deref_mut(),
            slot,
            payload,
        ))
    }

    /// A Kafka tombstone of an `"upsert"` envelope: the delete of its message key.
    fn push_tombstone(&mut self, record: &SourceRecord) -> Result<(), DlqReason> {
        let changes = self
            .changes
            .as_mut()
            .expect("only an upsert envelope takes tombstones");
        let key = upsert_key(record.key.as_deref(), changes.single_key_column())?;
        changes.delete(self.pushing, &key)
    }

    /// Counts the change events pushed (`floe_cdc_events_total`), warning of truncates.
    fn record_changes(&mut self) {
        let Some(changes) = self.changes.as_mut() else {
            return;
        };
        for (op, n) in changes.take_counts() {
            if op == "truncate" {
                tracing::warn!(channel = %self.channel, events = n, "truncate events skipped: floe does not empty the table (docs/cdc.md)");
            }
            telemetry::record_cdc_events(&self.channel, op, n);
        }
    }

    /// Every converter's rows with their runs, sealed ones first, each with the table it was
    /// converted for.
    fn take_rows(&mut self) -> Vec<Held> {
        let mut groups = std::mem::take(&mut self.sealed);
        let mut current = vec![self.converter.finish()];
        if let Some(evo) = self.evolving.as_mut() {
            current.extend(evo.others.values_mut().map(|c| c.finish()));
        }
        for (batch, runs, seqs) in current {
            if batch.num_rows() > 0 {
                groups.push(((*self.table).clone(), batch, runs, seqs));
            }
        }
        groups
    }

    /// Takes the rows of `shards` out of the buffer, one batch per schema (consecutive groups
    /// of one schema are concatenated, so a write after a partial one makes no extra files);
    /// the other shards' rows stay buffered, the dropped ones go.
    ///
    /// Errors: arrow's filter or concat kernels (a bug: the rows are then lost to this loop,
    /// which restarts from the checkpoints).
    fn take_shards(
        &mut self,
        shards: &BTreeSet<ShardId>,
    ) -> Result<Taken, arrow_schema::ArrowError> {
        let mut out: Vec<(Table, RecordBatch, Vec<u64>)> = Vec::new();
        let mut kept = Vec::new();
        for (table, rows, runs, seqs) in self.take_rows() {
            let fate = |slot| self.slots.fate(slot, shards);
            let (written_seqs, kept_seqs) = split_values(&seqs, &runs, fate);
            let (written, keep) = split(rows, &runs, fate)?;
            if let Some((rows, runs)) = keep {
                kept.push((table.clone(), rows, runs, kept_seqs));
            }
            if written.num_rows() == 0 {
                continue;
            }
            match out.last_mut() {
                Some((t, b, s))
                    if t.metadata().current_schema_id() == table.metadata().current_schema_id()
                        && b.schema() == written.schema() =>
                {
                    *b = arrow_select::concat::concat_batches(&b.schema(), [&*b, &written])?;
                    s.extend(written_seqs);
                }
                _ => out.push((table, written, written_seqs)),
            }
        }
        let (deleted_key, deleted_seqs) = match self.changes.as_mut() {
            Some(changes) => changes.take_shards(&self.slots, shards)?,
            None => (Vec::new(), Vec::new()),
        };
        // Slots are forgotten only when nothing of any shard stays buffered.
        if kept.is_empty() && !self.changes.as_ref().is_some_and(|c| c.keeps_any()) {
            self.slots.clear();
        }
        self.sealed = kept;
        Ok(Taken {
            groups: out,
            deleted_key,
            deleted_seqs,
        })
    }

    /// Writes the batch's deleted keys as its key file ([`key_file_path`]); `None` when it
    /// deletes no key.
    ///
    /// Errors: the storage's.
    async fn write_deleted_keys(
        &self,
        batch_id: Uuid,
        keys: &[super::deletes::keys::KeyHash],
    ) -> iceberg::Result<Option<String>> {
        if keys.is_empty() {
            return Ok(None);
        }
        let path = key_file_path(self.table.metadata().location(), &self.channel, batch_id);
        super::deletes::keys::write_key_file(self.table.file_io(), &path, keys).await?;
        Ok(Some(path))
    }

    /// Upsert mode: each key's last event of the batch — rows filtered to the last of their key
    /// (when no later delete of it), and the keys whose last event is a delete. Otherwise the
    /// rows as taken, and no deleted keys.
    ///
    /// Errors: `Incompatible` when the key columns cannot be hashed (refused at start already);
    /// `Unavailable` for arrow's filter kernel.
    fn last_events(&self, taken: Taken) -> Result<LastEvents, SinkError> {
        let Some(changes) = self.changes.as_ref().filter(|c| c.upsert()) else {
            let groups = taken.groups.into_iter().map(|(t, b, _)| (t, b)).collect();
            return Ok((groups, Vec::new()));
        };
        let keys = taken
            .groups
            .iter()
            .map(|(_, b, _)| changes.key_columns_of(b))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| SinkError::Incompatible(e.to_string()))?;
        let keyed: Vec<KeyedRows<'_>> = keys
            .iter()
            .zip(&taken.groups)
            .map(|(key, (_, _, seqs))| KeyedRows { key, seqs })
            .collect();
        let (masks, deleted) = last_event_per_key(&keyed, &taken.deleted_key, &taken.deleted_seqs)
            .map_err(SinkError::Incompatible)?;
        let mut groups = Vec::with_capacity(taken.groups.len());
        for ((table, rows, _), mask) in taken.groups.into_iter().zip(masks) {
            let rows = match mask {
                Some(mask) => arrow_select::filter::filter_record_batch(&rows, &mask)
                    .map_err(|e| SinkError::unavailable("keep the last event per key", e))?,
                None => rows,
            };
            if rows.num_rows() > 0 {
                groups.push((table, rows));
            }
        }
        Ok((groups, deleted))
    }
}

#[async_trait]
impl BatchSink for IcebergSink {
    fn buffered_bytes(&self) -> usize {
        let others: usize = self
            .evolving
            .as_ref()
            .map(|e| e.others.values().map(|c| c.conv.buffered_bytes()).sum())
            .unwrap_or(0);
        let sealed: usize = self
            .sealed
            .iter()
            .map(|(_, b, _, _)| b.get_array_memory_size())
            .sum();
        let changes = self.changes.as_ref().map_or(0, |c| c.buffered_bytes());
        self.converter.conv.buffered_bytes() + others + sealed + changes
    }

    async fn committed_checkpoints(&mut self) -> Result<Checkpoints, SinkError> {
        let fresh = self.load_fresh().await?;
        let cp = table_checkpoints(&fresh).map_err(|e| SinkError::Incompatible(e.to_string()))?;
        self.switch_table(fresh)?;
        Ok(cp)
    }

    /// The last data commit's time: maintenance snapshots (compaction, expiry) keep the
    /// checkpoints as they were and come later, so they would only loosen the bound.
    fn checkpoints_committed_by_ms(&self) -> Option<i64> {
        self.table
            .metadata()
            .snapshots()
            .filter(|s| {
                !s.summary()
                    .additional_properties
                    .contains_key(crate::iceberg::rewrite::SUMMARY_MAINTENANCE)
            })
            .map(|s| s.timestamp_ms())
            .max()
            .or_else(|| {
                // Only maintenance snapshots retained: the current one still bounds it.
                self.table
                    .metadata()
                    .current_snapshot()
                    .map(|s| s.timestamp_ms())
            })
    }

    async fn push(
        &mut self,
        shard: &ShardId,
        records: Vec<SourceRecord>,
    ) -> Result<Vec<Pushed>, SinkError> {
        let mut out = Vec::with_capacity(records.len());
        self.poll_latest().await?;
        self.pushing = self.slots.slot(shard);
        let versioned = self.evolving.is_some()
            && matches!(
                self.io.record_decoder,
                RecordDecoder::Gsr { .. } | RecordDecoder::Confluent { .. }
            );
        for record in records {
            if let Some(router) = &self.io.route {
                let decision = match self.route_fields.as_mut() {
                    Some(fields) => match fields.decide(router, &record.payload).await {
                        Ok(decision) => decision,
                        Err(e) => {
                            telemetry::record_schema_lookup_error(&self.channel);
                            return Err(SinkError::unavailable("schema registry", e));
                        }
                    },
                    // The JSON document after the record's framing (a GSR payload is inflated
                    // here and again when converted: routed GSR channels pay it twice).
                    None => match self.io.record_decoder.payload_of(&record.payload) {
                        Ok(document) => router.decide(document),
                        Err(_) => router.decide_unreadable(),
                    },
                };
                match decision {
                    RouteDecision::Keep => {}
                    RouteDecision::Skip => {
                        out.push(Pushed::Skipped(record.position));
                        continue;
                    }
                    RouteDecision::DeadLetter(reason) => {
                        out.push(Pushed::Rejected { reason, record });
                        continue;
                    }
                }
            }
            if record.tombstone {
                // Only an upsert envelope's sink takes tombstones: the delete of the key.
                out.push(match self.push_tombstone(&record) {
                    Ok(()) => Pushed::Buffered(record.position),
                    Err(reason) => Pushed::Rejected { reason, record },
                });
                continue;
            }
            if versioned {
                let pushed = self.push_versioned(&record.payload).await?;
                out.push(match pushed {
                    Ok(()) => Pushed::Buffered(record.position),
                    Err(reason) => Pushed::Rejected { reason, record },
                });
                continue;
            }
            let pushed = match self.io.record_decoder.payload(&record.payload).await {
                Ok(payload) => push_payload(
                    &mut self.converter,
                    self.changes.as_deref_mut(),
                    self.pushing,
                    payload,
                ),
                Err(PayloadError::Record(reason)) => Err(reason),
                Err(e) => {
                    telemetry::record_schema_lookup_error(&self.channel);
                    return Err(SinkError::unavailable("schema registry", e));
                }
            };
            out.push(match pushed {
                Ok(()) => Pushed::Buffered(record.position),
                Err(reason) => Pushed::Rejected { reason, record },
            });
        }
        self.record_changes();
        Ok(out)
    }

    fn takes_tombstones(&self) -> bool {
        self.changes
            .as_ref()
            .is_some_and(|c| c.envelope() == Envelope::Upsert)
    }

    fn clear(&mut self) {
        let _ = self.take_rows();
        if let Some(changes) = self.changes.as_mut() {
            changes.clear();
        }
        self.slots.clear();
    }

    fn drop_shard(&mut self, shard: &ShardId) {
        self.slots.drop_shard(shard);
    }

    async fn write(
        &mut self,
        batch_id: Uuid,
        shards: &BTreeSet<ShardId>,
        dlq_entries: &[DlqEntry],
    ) -> Result<Written, SinkError> {
        // The rows of each schema are written as files of that schema. The first group is named
        // after the batch; the others after fresh UUIDv7s, never older than the batch id (the
        // orphan sweep's age rule holds for them too).
        let taken = self
            .take_shards(shards)
            .map_err(|e| SinkError::unavailable("split the buffer by shard", e))?;
        let (groups, deleted) = self.last_events(taken)?;
        let mut files = WrittenFiles::default();
        for (i, (table, rows)) in groups.into_iter().enumerate() {
            let file_id = if i == 0 { batch_id } else { Uuid::now_v7() };
            match write_data_files(&table, &self.io.writer, file_id, rows).await {
                Ok(w) => {
                    files.data_files_json.extend(w.data_files_json);
                    files.paths.extend(w.paths);
                    files.sizes.extend(w.sizes);
                    files.num_rows += w.num_rows;
                    files.num_bytes += w.num_bytes;
                }
                Err(e) => {
                    for p in &files.paths {
                        let _ = self.table.file_io().delete(p).await;
                    }
                    return Err(SinkError::from_iceberg("write data files", e));
                }
            }
        }
        let deleted_keys = match self.write_deleted_keys(batch_id, &deleted).await {
            Ok(path) => path,
            Err(e) => {
                for p in &files.paths {
                    let _ = self.table.file_io().delete(p).await;
                }
                return Err(SinkError::from_iceberg("write key file", e));
            }
        };
        let dlq_staged = self.io.dlq.stage(batch_id, dlq_entries).await;
        if !dlq_entries.is_empty() {
            telemetry::record_dlq_write(&self.channel, "stage", dlq_staged.is_ok());
        }
        let dlq_staged = match dlq_staged {
            Ok(s) => s,
            Err(e) => {
                for p in files.paths.iter().chain(&deleted_keys) {
                    let _ = self.table.file_io().delete(p).await;
                }
                return Err(SinkError::unavailable("stage dlq entries", e));
            }
        };
        Ok(Written {
            files: BatchFiles::Iceberg {
                data_files: files.data_files_json,
                dlq_staged,
                deleted_keys,
            },
            sizes: files.sizes,
            num_rows: files.num_rows,
            num_bytes: files.num_bytes,
        })
    }

    async fn undo(&mut self, files: &BatchFiles) {
        let BatchFiles::Iceberg {
            data_files,
            dlq_staged,
            deleted_keys,
        } = files
        else {
            return;
        };
        for p in data_file_paths(data_files).iter().chain(deleted_keys) {
            let _ = self.table.file_io().delete(p).await;
        }
        if let Some(s) = dlq_staged {
            self.io.dlq.discard(s).await;
        }
    }
}
