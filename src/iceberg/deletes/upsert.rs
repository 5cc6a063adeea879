//! The committer's state of an upsert table across commits: the row-delta base and the key
//! index of the snapshot the committer last saw, and the preparation of one commit's
//! [`RowDelta`] from the accepted batches (docs/design.md, "The key index").
//!
//! ```text
//!  prepare(table, batches)
//!    base  = catch up (table's snapshot; reads only new manifests)
//!    index = kept if bound to the table's snapshot and the same key field ids, else built
//!    for each batch, in order:
//!      each data file: key hashes read back, staged (the previous row of each key -> delete)
//!      its deleted-keys file: staged (each key's row -> delete, the key leaves)
//!    delta = the batches' data files + the staged deletes
//!  commit (caller adds properties, summary, expiry) -> committed(snapshot): index applied
//!  anything else: dropped, the index untouched (still bound to its snapshot)
//! ```

use std::time::Instant;

use iceberg::spec::DataFile;
use iceberg::table::Table;
use iceberg::{Error, ErrorKind};
use tokio::sync::{Mutex, MutexGuard};

use super::index::{KeyIndex, Staged};
use super::keys::read_key_file;
use super::read::read_key_hashes;
use super::{RowDelta, RowDeltaBase};
use crate::telemetry;

/// One accepted batch of an upsert table, as the commit applies it.
#[derive(Debug, Clone)]
pub struct UpsertBatch {
    /// Its data files (each key at most once per batch, by the worker's contract; a key twice
    /// is resolved all the same: the later row wins).
    pub data_files: Vec<DataFile>,
    /// Its deleted-keys file (`keys::write_key_file`), if it deletes any key.
    pub deleted_keys: Option<String>,
}

/// Why a commit could not be prepared.
#[derive(Debug, thiserror::Error)]
pub enum PrepareError {
    /// The table does not fit the upsert (a key column it lacks, a key file or data file that
    /// cannot be read as one, deletes the index cannot resolve): not retryable.
    #[error("{0}")]
    Incompatible(String),
    /// Reading manifests, data files or key files failed: retry.
    #[error("{what}: {source}")]
    Unavailable {
        /// What was being read.
        what: &'static str,
        /// The storage's error.
        #[source]
        source: Box<iceberg::Error>,
    },
}

impl PrepareError {
    fn of(what: &'static str, e: iceberg::Error) -> Self {
        match e.kind() {
            ErrorKind::DataInvalid | ErrorKind::FeatureUnsupported => {
                PrepareError::Incompatible(format!("{what}: {e}"))
            }
            _ => PrepareError::Unavailable {
                what,
                source: Box::new(e),
            },
        }
    }
}

#[derive(Debug, Default)]
struct State {
    base: Option<RowDeltaBase>,
    index: Option<KeyIndex>,
    field_ids: Vec<i32>,
}

/// An upsert table's committer state (see the module docs). One per target; commits are
/// prepared one at a time.
#[derive(Debug)]
pub struct Upsert {
    channel: String,
    key: Vec<String>,
    state: Mutex<State>,
}

impl Upsert {
    /// The state of channel `channel`'s table with key columns `key` (names of top-level
    /// columns), empty: the first commit builds the index.
    pub fn new(channel: &str, key: Vec<String>) -> Self {
        Upsert {
            channel: channel.to_string(),
            key,
            state: Mutex::new(State::default()),
        }
    }

    /// The key column names.
    pub fn key(&self) -> &[String] {
        &self.key
    }

    /// The field ids of the key columns in `table`'s current schema.
    ///
    /// Errors: [`PrepareError::Incompatible`] naming a key column that is not a top-level
    /// column of the table.
    pub fn field_ids(&self, table: &Table) -> Result<Vec<i32>, PrepareError> {
        let schema = table.metadata().current_schema();
        self.key
            .iter()
            .map(|name| {
                schema
                    .as_struct()
                    .fields()
                    .iter()
                    .find(|f| &f.name == name)
                    .map(|f| f.id)
                    .ok_or_else(|| {
                        PrepareError::Incompatible(format!(
                            "key column {name} is not a top-level column of the table"
                        ))
                    })
            })
            .collect()
    }

    /// Prepares the commit of `batches` (in commit order) on `table` as loaded by this round.
    ///
    /// Errors: see [`PrepareError`].
    pub async fn prepare(
        &self,
        table: &Table,
        batches: &[UpsertBatch],
    ) -> Result<Prepared<'_>, PrepareError> {
        let field_ids = self.field_ids(table)?;
        let mut state = self.state.lock().await;
        let base = RowDeltaBase::catch_up(table, state.base.as_ref())
            .await
            .map_err(|e| PrepareError::of("read the table's manifests", e))?;
        state.base = Some(base.clone());
        let current = table.metadata().current_snapshot_id();
        let stale = match &state.index {
            Some(index) => index.snapshot_id() != current || state.field_ids != field_ids,
            None => true,
        };
        if stale {
            state.index = None;
            let started = Instant::now();
            let index = KeyIndex::build(&base, &field_ids)
                .await
                .map_err(|e| PrepareError::of("build the key index", e))?;
            let took = started.elapsed();
            telemetry::record_key_index_build(&self.channel, index.len(), took);
            tracing::info!(channel = %self.channel, snapshot_id = ?current, keys = index.len(), data_files = index.num_files(), duplicates = index.duplicates(), seconds = took.as_secs_f64(), "key index built");
            state.index = Some(index);
            state.field_ids = field_ids.clone();
        }
        let index = state.index.as_ref().expect("index just checked");
        let mut staging = index.stage();
        let mut delta = RowDelta::default();
        let io = table.file_io();
        for b in batches {
            for f in &b.data_files {
                let hashes = read_key_hashes(io, f.file_path(), &field_ids)
                    .await
                    .map_err(|e| PrepareError::of("read the key columns of a data file", e))?;
                if hashes.len() as u64 != f.record_count() {
                    return Err(PrepareError::Incompatible(format!(
                        "data file {} holds {} rows, its entry says {}",
                        f.file_path(),
                        hashes.len(),
                        f.record_count()
                    )));
                }
                staging
                    .add_file(f.file_path(), &hashes)
                    .map_err(|e| PrepareError::of("index a data file", e))?;
                delta.data_files.push(f.clone());
            }
            if let Some(path) = &b.deleted_keys {
                let keys = read_key_file(io, path)
                    .await
                    .map_err(|e| PrepareError::of("read a deleted-keys file", e))?;
                staging.delete_keys(&keys);
            }
        }
        let staged = staging.finish();
        delta.deletes = staged.deletes.clone();
        Ok(Prepared {
            channel: &self.channel,
            state,
            base,
            staged,
            delta,
        })
    }
}

/// One prepared upsert commit: the row delta to commit on `base`, holding the state until the
/// commit's outcome is known.
#[derive(Debug)]
pub struct Prepared<'a> {
    channel: &'a str,
    state: MutexGuard<'a, State>,
    /// The snapshot the delta is built on (the round's table).
    pub base: RowDeltaBase,
    staged: Staged,
    /// The data files and deletes; the caller adds the properties, the summary and the
    /// snapshots to expire.
    pub delta: RowDelta,
}

impl Prepared<'_> {
    /// Rows the delta deletes.
    pub fn num_deletes(&self) -> u64 {
        self.staged.num_deletes()
    }

    /// The delta was committed as snapshot `snapshot_id` (`None`: it only set properties, the
    /// snapshot did not change): the staged changes go into the index, now bound to it.
    pub fn committed(mut self, snapshot_id: Option<i64>) {
        let deletes = self.staged.num_deletes();
        let snapshot = snapshot_id.or(self.base.snapshot_id());
        let applied = match self.state.index.as_mut() {
            Some(index) => index.apply(self.staged, snapshot),
            None => Err(Error::new(ErrorKind::Unexpected, "no index")),
        };
        match applied {
            Ok(()) => {
                let keys = self.state.index.as_ref().map_or(0, KeyIndex::len);
                telemetry::set_key_index_keys(self.channel, keys);
            }
            Err(e) => {
                // Cannot happen while the guard is held; a fresh build is always correct.
                tracing::warn!(channel = %self.channel, error = %e, "key index dropped: it is built again at the next commit");
                self.state.index = None;
            }
        }
        telemetry::record_upsert_rows_deleted(self.channel, deletes);
    }
}
