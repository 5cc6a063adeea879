//! Deletes by position and the row-delta snapshot that commits them: the foundation of change
//! data capture (issue 42), where the committer turns every replaced or deleted key into
//! (data file, row position) and commits the new rows, those deletes and its checkpoints in one
//! snapshot. Never equality deletes: PyIceberg and Snowflake cannot read them.
//!
//! - format v2: a position-delete Parquet file per data file ([`position`], Iceberg spec
//!   "Position Delete Files");
//! - format v3: a deletion vector per data file, the Puffin blob `deletion-vector-v1` ([`dv`],
//!   Iceberg spec "Deletion Vectors", puffin-spec); v3 forbids new position-delete files.
//!
//! Either way a data file has at most one delete file: a new delete of a data file reads its
//! previous one, ORs the new positions in, and removes it in the same snapshot (the v3 spec
//! requires it for DVs; for v2 it keeps reads at one delete file per data file).
//! iceberg-rust 0.10.1 has no row-delta action and no position-delete or DV writer, so the
//! snapshot is built here as `crate::iceberg::rewrite` builds floe's `replace` snapshots:
//! manifests, manifest list and snapshot written by floe, swapped in through a
//! [`crate::catalog::swap::TableSwap`] on condition that the base snapshot is still current.
//!
//! ```text
//!  base snapshot S (seq s): manifest list [D1 D2 | X1 X2]     D data manifests, X delete manifests
//!    RowDelta { add data A1 A2, delete (A1, 4) (F7, 9) (F8, 0), set properties P }
//!      F7 has a previous delete file x7 (in X2): read x7, x7 | {9} -> x7'
//!    write  v2: one position-delete file per target     v3: one Puffin, one DV blob per target
//!           a1' (A1: {4})  x7' (F7)  f8' (F8: {0})
//!    new snapshot S' (seq s+1, parent S, overwrite), manifest list:
//!      D1 D2                     carried as they are
//!      D3  ADDED A1 A2           new data manifest   (v3: first_row_id = next-row-id)
//!      X1                        carried
//!      X2' DELETED x7, EXISTING  re-written: the merged predecessor leaves
//!      X3  ADDED a1' x7' f8'     new delete manifest, entries inherit seq s+1
//!    swap(assert-ref-snapshot-id main == S, assert-table-uuid,
//!         add-snapshot S', set-snapshot-ref main -> S', set-properties P)
//!      lost (the base moved) -> RowDeltaError::Conflict, this commit's files deleted
//! ```
//!
//! A delete applies to data files whose data sequence number is at most its own (Iceberg spec,
//! "Scan Planning"), so rows of A1, added by S' itself, are deleted by a1'.

mod base;
mod commit;
pub mod dv;
pub mod index;
pub mod keys;
pub mod position;
pub mod read;
pub mod upsert;

pub use base::{content_size, LiveDataFile, RowDeltaBase};
pub use commit::{commit_row_delta, RowDelta, RowDeltaCommitted};

/// Errors of a row-delta commit, by what the caller does next.
#[derive(Debug, thiserror::Error)]
pub enum RowDeltaError {
    /// The table moved past the base snapshot (another commit landed): nothing was committed.
    /// Reload the base and resolve the deletes again against it; retrying the same delta blindly
    /// could delete rows that a compaction has since moved.
    #[error("table moved past base snapshot {base:?}: {reason}")]
    Conflict {
        /// The base snapshot the delta was built on.
        base: Option<i64>,
        /// The catalog's refusal.
        reason: String,
    },
    /// The delta does not apply to its base (a delete of a data file that is neither live nor
    /// added, a position past the file's rows, a data file added twice): nothing was written; a
    /// bug in the caller, not retryable.
    #[error("row delta refused: {0}")]
    Invalid(String),
    /// Reading the previous deletes or writing files failed before the swap: nothing was
    /// committed; retry with backoff.
    #[error("{what}: {source}")]
    Unavailable {
        /// What was being done (`write delete files`, `write manifests`).
        what: &'static str,
        /// The storage's error.
        #[source]
        source: Box<iceberg::Error>,
    },
    /// The swap failed in a way that does not say whether it happened: reload the table and
    /// look for `snapshot_id` among its snapshots (`None`: a properties-only delta; compare the
    /// properties).
    #[error("row delta snapshot {snapshot_id:?}: outcome unknown: {source}")]
    OutcomeUnknown {
        /// The snapshot the commit would have added.
        snapshot_id: Option<i64>,
        /// The swap's error.
        #[source]
        source: Box<iceberg::Error>,
    },
}

impl RowDeltaError {
    fn unavailable(what: &'static str, source: iceberg::Error) -> Self {
        RowDeltaError::Unavailable {
            what,
            source: Box::new(source),
        }
    }

    /// Whether the caller may try again (after reloading the base, for a conflict): all but
    /// [`RowDeltaError::Invalid`].
    pub fn is_retryable(&self) -> bool {
        !matches!(self, RowDeltaError::Invalid(_))
    }

    /// Whether it is known that nothing was committed: all but
    /// [`RowDeltaError::OutcomeUnknown`].
    pub fn outcome_known(&self) -> bool {
        !matches!(self, RowDeltaError::OutcomeUnknown { .. })
    }
}
