//! The base of a row delta: the table's current snapshot with its live data files and the
//! delete files that reference one data file each (the ones a new delete of that data file
//! merges and replaces).
//!
//! Manifests never change once written, so a base is caught up from the previous one
//! ([`RowDeltaBase::catch_up`]) by reading the new manifest list and only the manifests the
//! previous base did not hold: a committer that commits every few seconds reads one or two small
//! manifests per commit, not every manifest of the table.

use std::collections::HashMap;
use std::sync::Arc;

use iceberg::spec::{
    DataContentType, DataFileFormat, ManifestContentType, ManifestEntryRef, ManifestFile, Struct,
};
use iceberg::table::Table;

/// A live data file of the base snapshot: what a delete file for it copies.
#[derive(Debug, Clone)]
pub struct LiveDataFile {
    /// Its partition spec.
    pub spec_id: i32,
    /// Its partition tuple.
    pub partition: Struct,
    /// Rows in the file (positions run from 0 to `record_count - 1`).
    pub record_count: u64,
    /// Its data sequence number (which commit's rows it holds: a newer row of a key wins).
    pub sequence_number: i64,
}

/// A delete manifest of the base snapshot with its entries.
#[derive(Debug, Clone)]
pub(super) struct DeleteManifest {
    pub(super) file: ManifestFile,
    pub(super) entries: Vec<ManifestEntryRef>,
}

/// Totals over the live files of the base snapshot (snapshot summary `total-*` fields).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct Totals {
    pub(super) data_files: u64,
    pub(super) records: u64,
    pub(super) files_size: u64,
    pub(super) delete_files: u64,
    pub(super) position_deletes: u64,
    pub(super) equality_deletes: u64,
}

/// The snapshot a row delta is built on: a table as loaded, its current snapshot's manifests,
/// its live data files by path, and per data file path the live delete files that reference
/// only it (`referenced_data_file`: floe's position-delete files and deletion vectors).
#[derive(Debug, Clone)]
pub struct RowDeltaBase {
    pub(super) table: Table,
    pub(super) snapshot_id: Option<i64>,
    pub(super) data_manifests: Vec<ManifestFile>,
    pub(super) delete_manifests: Vec<DeleteManifest>,
    pub(super) live_data: HashMap<String, LiveDataFile>,
    /// Data file path -> (index in `delete_manifests`, index of the entry).
    pub(super) file_deletes: HashMap<String, Vec<(usize, usize)>>,
    pub(super) totals: Totals,
    pub(super) has_equality_deletes: bool,
    has_unscoped_deletes: bool,
    /// The live entries of every manifest of the snapshot, by manifest path (what
    /// [`RowDeltaBase::catch_up`] reuses).
    manifests: HashMap<String, Arc<Vec<ManifestEntryRef>>>,
}

impl RowDeltaBase {
    /// Reads the manifest list and every manifest of `table`'s current snapshot (none for a
    /// table without snapshots).
    ///
    /// Errors: any storage or decoding error.
    pub async fn load(table: &Table) -> iceberg::Result<Self> {
        Self::catch_up(table, None).await
    }

    /// The base of `table`'s current snapshot, reading only what `previous` (a base of an
    /// earlier snapshot of the same table) does not hold: the manifest list, and the manifests
    /// it did not list. When `table` is still at `previous`'s snapshot, nothing is read.
    ///
    /// Errors: any storage or decoding error.
    pub async fn catch_up(table: &Table, previous: Option<&RowDeltaBase>) -> iceberg::Result<Self> {
        let snapshot_id = table.metadata().current_snapshot_id();
        let previous = previous.filter(|p| p.table.metadata().uuid() == table.metadata().uuid());
        if let Some(p) = previous.filter(|p| p.snapshot_id == snapshot_id) {
            return Ok(RowDeltaBase {
                table: table.clone(),
                ..p.clone()
            });
        }
        let mut base = RowDeltaBase {
            table: table.clone(),
            snapshot_id,
            data_manifests: Vec::new(),
            delete_manifests: Vec::new(),
            live_data: HashMap::new(),
            file_deletes: HashMap::new(),
            totals: Totals::default(),
            has_equality_deletes: false,
            has_unscoped_deletes: false,
            manifests: HashMap::new(),
        };
        let Some(snapshot) = table.metadata().current_snapshot() else {
            return Ok(base);
        };
        let list = table.manifest_list_reader(snapshot).load().await?;
        for file in list.entries() {
            let known = previous.and_then(|p| p.manifests.get(&file.manifest_path));
            let entries = match known {
                Some(entries) => entries.clone(),
                None => {
                    let manifest = file.load_manifest(table.file_io()).await?;
                    Arc::new(
                        manifest
                            .entries()
                            .iter()
                            .filter(|e| e.is_alive())
                            .cloned()
                            .collect(),
                    )
                }
            };
            base.add_manifest(file, &entries);
            base.manifests.insert(file.manifest_path.clone(), entries);
        }
        Ok(base)
    }

    /// Adds the live `entries` of manifest `file` to the base.
    fn add_manifest(&mut self, file: &ManifestFile, entries: &[ManifestEntryRef]) {
        if file.content == ManifestContentType::Data {
            for e in entries {
                self.totals.data_files += 1;
                self.totals.records += e.record_count();
                self.totals.files_size += e.file_size_in_bytes();
                self.live_data.insert(
                    e.file_path().to_string(),
                    LiveDataFile {
                        spec_id: file.partition_spec_id,
                        partition: e.data_file().partition().clone(),
                        record_count: e.record_count(),
                        sequence_number: e.sequence_number().unwrap_or(file.sequence_number),
                    },
                );
            }
            self.data_manifests.push(file.clone());
            return;
        }
        let index = self.delete_manifests.len();
        for (i, e) in entries.iter().enumerate() {
            let f = e.data_file();
            self.totals.delete_files += 1;
            self.totals.files_size += content_size(f);
            match f.content_type() {
                DataContentType::EqualityDeletes => {
                    self.has_equality_deletes = true;
                    self.totals.equality_deletes += f.record_count();
                }
                _ => self.totals.position_deletes += f.record_count(),
            }
            match (f.content_type(), f.referenced_data_file()) {
                (DataContentType::PositionDeletes, Some(target)) => {
                    self.file_deletes
                        .entry(target)
                        .or_default()
                        .push((index, i));
                }
                (DataContentType::PositionDeletes, None) => self.has_unscoped_deletes = true,
                _ => {}
            }
        }
        self.delete_manifests.push(DeleteManifest {
            file: file.clone(),
            entries: entries.to_vec(),
        });
    }

    /// The table as loaded.
    pub fn table(&self) -> &Table {
        &self.table
    }

    /// The base snapshot (`None`: the table had none).
    pub fn snapshot_id(&self) -> Option<i64> {
        self.snapshot_id
    }

    /// The live data files, by path.
    pub fn data_files(&self) -> &HashMap<String, LiveDataFile> {
        &self.live_data
    }

    /// The live data file at `path`, if any.
    pub fn data_file(&self, path: &str) -> Option<&LiveDataFile> {
        self.live_data.get(path)
    }

    /// Whether any live delete file is an equality-delete file (floe never writes one; another
    /// engine may have).
    pub fn has_equality_deletes(&self) -> bool {
        self.has_equality_deletes
    }

    /// Whether any live position-delete file may reference several data files (no
    /// `referenced_data_file`: another engine wrote it; floe's reference one each).
    pub fn has_unscoped_deletes(&self) -> bool {
        self.has_unscoped_deletes
    }

    /// The live delete files of the base that reference only `data_file`: at most one when
    /// floe wrote them (what [`super::commit_row_delta`] merges and replaces).
    pub fn deletes_of(&self, data_file: &str) -> Vec<&ManifestEntryRef> {
        self.file_deletes
            .get(data_file)
            .into_iter()
            .flatten()
            .map(|&(m, e)| &self.delete_manifests[m].entries[e])
            .collect()
    }
}

/// The bytes a delete file contributes to `*-files-size`: a deletion vector counts its blob
/// (`content_size_in_bytes`, as Iceberg Java's summaries do), any other file its size.
pub fn content_size(f: &iceberg::spec::DataFile) -> u64 {
    match (f.file_format(), f.content_size_in_bytes()) {
        (DataFileFormat::Puffin, Some(n)) => n as u64,
        _ => f.file_size_in_bytes(),
    }
}
