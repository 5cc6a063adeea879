//! Replace and delete snapshots, built by floe and committed through a
//! [`crate::catalog::swap::TableSwap`]: the commit of compaction (data files of a
//! closed hour replaced by fewer, larger ones) and manifest rewrite (many small manifests
//! bin-packed into few), together one `replace`, and record expiration (whole hour partitions
//! deleted), a `delete`. Every snapshot passes [`check_operation`] before the swap: a `replace`
//! that would change the rows (record expiration mixed into it) is refused.
//!
//! A rewrite never changes what a reader sees beyond what it says: every live data file of the
//! current snapshot that the rewrite does not remove is carried over with its data and file
//! sequence numbers and the snapshot that added it (status `EXISTING`), a removed file is
//! written as a `DELETED` entry of the new snapshot (Iceberg spec, "Manifests": the snapshot that
//! deleted a file says so, which is how expiry later finds the files it may delete), added files
//! are `ADDED`. The new snapshot is conditional on the current one (`assert-ref-snapshot-id
//! main`) and on the table uuid; `floe.*` table properties are not touched.
//!
//! Delete files: a table of floe's upserts has at most one delete file per data file (a
//! position-delete file or a deletion vector naming it in `referenced_data_file`,
//! [`super::deletes`]). Removing a data file removes its delete files in the same snapshot
//! (`DELETED` entries of the re-written delete manifests, the other entries `EXISTING`); a
//! compaction that read a data file with its deletes applied says which delete files it applied
//! ([`Rewrite::deletes_applied`]), and the commit is refused unless they are still the file's
//! current ones. Delete files that may reach several data files (equality deletes, position
//! deletes without `referenced_data_file`: another engine's) keep every data file as it is.
//! Format v3 (row lineage): manifests and manifest list are written as v3; a re-written data
//! manifest states each carried file's `first_row_id` (inherited before), added files inherit
//! theirs from the new manifest's (new row ids: compaction does not carry `_row_id`).
//!
//! ```text
//!  current snapshot S: manifest list [m1 m2 … m120]
//!    rewrite(remove R, add A, merge small manifests)
//!      m touched by R, or small when merging -> entries re-written: EXISTING / DELETED
//!      A                                      -> ADDED
//!      others                                 -> carried as they are
//!  new snapshot S' (replace | delete), parent S, manifest list [m1' m2' + untouched]
//! ```

use std::collections::{BTreeMap, HashMap, HashSet};

use iceberg::spec::{
    DataContentType, DataFile, DataFileBuilder, DataFileFormat, FormatVersion, ManifestContentType,
    ManifestEntryRef, ManifestFile, ManifestListWriter, ManifestWriterBuilder, Operation, Snapshot,
    SnapshotReference, SnapshotRetention, Summary, MAIN_BRANCH,
};
use iceberg::table::Table;
use iceberg::{Error, ErrorKind, TableRequirement, TableUpdate};
use uuid::Uuid;

use crate::catalog::swap::TableSwap;
use crate::time::now_ms;

/// A manifest at or above this size is never merged (Iceberg's
/// `commit.manifest.target-size-bytes` default, 8 MB).
pub const MANIFEST_TARGET_BYTES: i64 = 8 << 20;

/// Entries written into one manifest at most when rewriting.
const MAX_ENTRIES_PER_MANIFEST: usize = 20_000;

/// Summary key naming the maintenance tasks a floe replace or delete snapshot did
/// (`compaction`, `manifest-rewrite`, `record-expiry`, comma-separated).
pub const SUMMARY_MAINTENANCE: &str = "floe.maintenance";

/// One manifest of the current snapshot with its entries (sequence numbers inherited).
#[derive(Debug, Clone)]
pub struct LoadedManifest {
    /// The manifest as the manifest list names it.
    pub file: ManifestFile,
    /// Its entries.
    pub entries: Vec<ManifestEntryRef>,
}

/// The manifests of a table's current snapshot, loaded.
#[derive(Debug, Clone, Default)]
pub struct CurrentFiles {
    /// The current snapshot (`None`: the table has none, nothing to rewrite).
    pub snapshot_id: Option<i64>,
    /// Its data manifests.
    pub manifests: Vec<LoadedManifest>,
    /// Its delete manifests.
    pub delete_manifests: Vec<LoadedManifest>,
    /// Whether it has a live delete file that may reach several data files (an equality-delete
    /// file, or a position-delete file without `referenced_data_file`: another engine's): floe
    /// never rewrites data files then.
    pub unscoped_deletes: bool,
    /// Per data file path, its live delete files that name it in `referenced_data_file`
    /// (index in `delete_manifests`, index of the entry).
    scoped_deletes: HashMap<String, Vec<(usize, usize)>>,
    /// Per partition spec of the table, the position and transform of its time field (`year`,
    /// `month`, `day`, `hour`), `None` for a spec without one: how maintenance finds when a
    /// partition closes (docs/partitioning.md, "Maintenance").
    pub time_fields: HashMap<i32, Option<(usize, iceberg::spec::Transform)>>,
    /// Commit time (ms) of each retained snapshot, by snapshot id.
    pub snapshot_ms: HashMap<i64, i64>,
}

impl CurrentFiles {
    /// Reads the manifest list and every data manifest of `table`'s current snapshot.
    ///
    /// Errors: any storage or decoding error.
    pub async fn load(table: &Table) -> iceberg::Result<Self> {
        let md = table.metadata();
        let Some(snapshot) = md.current_snapshot() else {
            return Ok(CurrentFiles::default());
        };
        let list = table.manifest_list_reader(snapshot).load().await?;
        let mut out = CurrentFiles {
            snapshot_id: Some(snapshot.snapshot_id()),
            time_fields: md
                .partition_specs_iter()
                .map(|s| {
                    use iceberg::spec::Transform::{Day, Hour, Month, Year};
                    let time = s
                        .fields()
                        .iter()
                        .position(|f| matches!(f.transform, Year | Month | Day | Hour))
                        .map(|i| (i, s.fields()[i].transform));
                    (s.spec_id(), time)
                })
                .collect(),
            snapshot_ms: md
                .snapshots()
                .map(|s| (s.snapshot_id(), s.timestamp_ms()))
                .collect(),
            ..CurrentFiles::default()
        };
        for file in list.entries() {
            let manifest = file.load_manifest(table.file_io()).await?;
            let loaded = LoadedManifest {
                file: file.clone(),
                entries: manifest.entries().to_vec(),
            };
            if file.content == ManifestContentType::Deletes {
                out.add_delete_manifest(loaded);
            } else {
                out.manifests.push(loaded);
            }
        }
        Ok(out)
    }

    fn add_delete_manifest(&mut self, m: LoadedManifest) {
        let at = self.delete_manifests.len();
        for (i, e) in m.entries.iter().enumerate().filter(|(_, e)| e.is_alive()) {
            match (e.content_type(), e.data_file().referenced_data_file()) {
                (DataContentType::PositionDeletes, Some(target)) => {
                    self.scoped_deletes.entry(target).or_default().push((at, i));
                }
                _ => self.unscoped_deletes = true,
            }
        }
        self.delete_manifests.push(m);
    }

    /// The live delete files that name the data file at `path` (at most one when floe wrote
    /// them).
    pub fn deletes_of(&self, path: &str) -> Vec<&ManifestEntryRef> {
        self.scoped_deletes
            .get(path)
            .into_iter()
            .flatten()
            .map(|&(m, e)| &self.delete_manifests[m].entries[e])
            .collect()
    }

    /// Rows deleted by position in each data file that has delete files (the sum of its delete
    /// files' `record_count`), by data file path.
    pub fn deleted_rows(&self) -> HashMap<&str, u64> {
        self.scoped_deletes
            .iter()
            .map(|(path, at)| {
                let n = at
                    .iter()
                    .map(|&(m, e)| self.delete_manifests[m].entries[e].record_count())
                    .sum();
                (path.as_str(), n)
            })
            .collect()
    }

    /// The live delete files (status `ADDED` or `EXISTING`).
    pub fn live_deletes(&self) -> impl Iterator<Item = &ManifestEntryRef> {
        self.delete_manifests
            .iter()
            .flat_map(|m| m.entries.iter())
            .filter(|e| e.is_alive())
    }

    /// The live data files (status `ADDED` or `EXISTING`).
    pub fn live(&self) -> impl Iterator<Item = &ManifestEntryRef> {
        self.manifests
            .iter()
            .flat_map(|m| m.entries.iter())
            .filter(|e| e.is_alive() && e.content_type() == DataContentType::Data)
    }

    /// The live data files with the id of their partition spec.
    pub fn live_with_spec(&self) -> impl Iterator<Item = (i32, &ManifestEntryRef)> {
        self.manifests.iter().flat_map(|m| {
            m.entries
                .iter()
                .filter(|e| e.is_alive() && e.content_type() == DataContentType::Data)
                .map(|e| (m.file.partition_spec_id, e))
        })
    }
}

/// What one maintenance snapshot changes.
#[derive(Debug, Clone, Default)]
pub struct Rewrite {
    /// Paths of live data files to remove.
    pub remove: HashSet<String>,
    /// Data files to add (of the table's default partition spec).
    pub add: Vec<DataFile>,
    /// Merge every manifest smaller than [`MANIFEST_TARGET_BYTES`] into as few as possible.
    pub merge_manifests: bool,
    /// The tasks, for [`SUMMARY_MAINTENANCE`].
    pub tasks: Vec<&'static str>,
    /// Snapshots to expire in the same commit (never the current one).
    pub expire: Vec<i64>,
    /// For each removed data file that was read with its deletes applied (compaction), the
    /// delete files applied, as (path, `content_offset`): the commit is refused unless they are
    /// exactly the file's live delete files (a delete committed since would be lost).
    pub deletes_applied: HashMap<String, Vec<DeleteFileId>>,
}

/// A delete file entry: its path and, for a deletion vector, its blob's `content_offset` (one
/// Puffin file holds the vectors of many data files).
pub type DeleteFileId = (String, Option<i64>);

/// The identity of delete file entry `e`.
pub fn delete_file_id(e: &ManifestEntryRef) -> DeleteFileId {
    (e.file_path().to_string(), e.data_file().content_offset())
}

impl Rewrite {
    /// Whether it changes nothing.
    pub fn is_empty(&self) -> bool {
        self.remove.is_empty() && self.add.is_empty() && !self.merge_manifests
    }

    /// Whether it removes rows (record expiry: a `delete` snapshot) rather than moving them.
    fn removes_rows(&self) -> bool {
        self.tasks.contains(&"record-expiry")
    }
}

/// Whether the delete files applied to each data file (`applied`, see
/// [`Rewrite::deletes_applied`]) are still its live delete files in `current`.
pub fn deletes_unchanged(
    current: &CurrentFiles,
    applied: &HashMap<String, Vec<DeleteFileId>>,
) -> bool {
    applied.iter().all(|(path, applied)| {
        let mut now: Vec<DeleteFileId> = current
            .deletes_of(path)
            .into_iter()
            .map(delete_file_id)
            .collect();
        let mut applied = applied.clone();
        now.sort();
        applied.sort();
        now == applied
    })
}

/// What [`commit_rewrite`] committed.
#[derive(Debug, Clone)]
pub struct Rewritten {
    /// The table as committed.
    pub table: Table,
    /// The new snapshot.
    pub snapshot_id: i64,
    /// Manifests in the new snapshot.
    pub manifests: usize,
    /// Manifests of the parent no longer in the new snapshot.
    pub manifests_replaced: usize,
}

/// One entry of a manifest a rewrite writes. `Existing` and `Deleted` carry the `first_row_id`
/// the entry inherited in its old manifest (format v3, a data file without one), which the new
/// manifest states.
enum Item<'a> {
    Existing(&'a ManifestEntryRef, Option<i64>),
    Deleted(&'a ManifestEntryRef, Option<i64>),
    Added(&'a DataFile),
}

/// A group of entries written into the same manifests: delete files or not, partition spec id.
type ManifestKind = (bool, i32);

/// Commits `rewrite` on `table`'s current snapshot (whose data manifests `current` holds) as
/// one `replace` snapshot (`delete` when it only removes files), through `swap`. The new
/// manifests and manifest list are named after `commit_id`; on a refusal they are deleted (this
/// call's own files, which no snapshot references: not a maintenance deletion, so not fenced).
///
/// Errors: `ErrorKind::DataInvalid` when a file to remove is not live in the current snapshot,
/// the snapshot has delete files, or [`check_operation`] refuses the snapshot (a `replace` that
/// adds and deletes different record counts: nothing is written); the swap's errors (`CatalogCommitConflicts` or a failed
/// requirement: the table moved, nothing was committed; anything else: outcome unknown, the
/// caller reloads the table and looks for the new snapshot id).
pub async fn commit_rewrite(
    table: &Table,
    current: &CurrentFiles,
    rewrite: &Rewrite,
    swap: &dyn TableSwap,
    commit_id: Uuid,
) -> iceberg::Result<Rewritten> {
    let parent = check_rewritable(table, current, rewrite)?;
    let md = table.metadata();
    let plan = ManifestPlan::of(current, rewrite, md.default_partition_spec_id());
    let summary = summary(current, rewrite, &plan.removed_deletes, commit_id);
    check_operation(&summary, current.live().map(|e| e.record_count()).sum())?;
    let new = NewSnapshot {
        snapshot_id: unique_snapshot_id(table),
        sequence_number: md.next_sequence_number(),
        parent,
        commit_id,
    };
    let mut written: Vec<String> = Vec::new();
    let result = write_and_swap(table, rewrite, swap, &new, plan, summary, &mut written).await;
    if let Err(e) = &result {
        let refused = matches!(
            e.kind(),
            ErrorKind::CatalogCommitConflicts | ErrorKind::DataInvalid
        );
        if refused {
            for path in &written {
                let _ = table.file_io().delete(path).await;
            }
        }
    }
    result
}

/// The parent of the snapshot `rewrite` makes: `table`'s current snapshot, which `current`
/// must be, and whose live files must hold every file `rewrite` removes.
///
/// Errors: `ErrorKind::DataInvalid` (see [`commit_rewrite`]).
fn check_rewritable(
    table: &Table,
    current: &CurrentFiles,
    rewrite: &Rewrite,
) -> iceberg::Result<i64> {
    let Some(parent) = current.snapshot_id else {
        return Err(Error::new(
            ErrorKind::DataInvalid,
            "a table without a snapshot has nothing to rewrite",
        ));
    };
    if table.metadata().current_snapshot_id() != Some(parent) {
        return Err(Error::new(
            ErrorKind::DataInvalid,
            "the loaded files are not the table's current snapshot",
        ));
    }
    if current.unscoped_deletes && !(rewrite.remove.is_empty() && rewrite.add.is_empty()) {
        return Err(Error::new(
            ErrorKind::DataInvalid,
            "the current snapshot has delete files that may reach several data files (equality deletes, or position deletes without a referenced data file): its data files are not rewritten",
        ));
    }
    if !deletes_unchanged(current, &rewrite.deletes_applied) {
        return Err(Error::new(
            ErrorKind::DataInvalid,
            "a data file to remove gained deletes after it was read: the rewrite would bring deleted rows back",
        ));
    }
    let live: HashSet<&str> = current.live().map(|e| e.file_path()).collect();
    if let Some(missing) = rewrite.remove.iter().find(|p| !live.contains(p.as_str())) {
        return Err(Error::new(
            ErrorKind::DataInvalid,
            format!("data file {missing} is not live in snapshot {parent}"),
        ));
    }
    Ok(parent)
}

/// The identity of the snapshot a rewrite makes.
struct NewSnapshot {
    snapshot_id: i64,
    sequence_number: i64,
    /// The current snapshot it is made on.
    parent: i64,
    /// Names its manifests and manifest list.
    commit_id: Uuid,
}

/// Which manifests of the current snapshot a rewrite carries as they are, and the entries of
/// the manifests it writes, by kind (delete files or not, partition spec id).
struct ManifestPlan<'a> {
    carried: Vec<ManifestFile>,
    items: BTreeMap<ManifestKind, Vec<Item<'a>>>,
    /// Manifests of the parent not carried.
    replaced: usize,
    /// The delete files the rewrite removes (those of its removed data files).
    removed_deletes: Vec<&'a ManifestEntryRef>,
}

impl<'a> ManifestPlan<'a> {
    /// A manifest touched by a removal (of a data file, or of a removed data file's delete
    /// file), or small when merging, is re-written (its live entries `EXISTING` or `DELETED`);
    /// one without live entries is dropped; added files go in new manifests of `default_spec`.
    fn of(current: &'a CurrentFiles, rewrite: &'a Rewrite, default_spec: i32) -> Self {
        let removed_deletes: Vec<&ManifestEntryRef> = rewrite
            .remove
            .iter()
            .flat_map(|p| current.deletes_of(p))
            .collect();
        let gone: HashSet<DeleteFileId> =
            removed_deletes.iter().map(|e| delete_file_id(e)).collect();
        let mut plan = ManifestPlan {
            carried: Vec::new(),
            items: BTreeMap::new(),
            replaced: 0,
            removed_deletes,
        };
        for m in &current.manifests {
            plan.add(m, rewrite, |e| rewrite.remove.contains(e.file_path()));
        }
        for m in &current.delete_manifests {
            plan.add(m, rewrite, |e| gone.contains(&delete_file_id(e)));
        }
        for f in &rewrite.add {
            plan.items
                .entry((false, default_spec))
                .or_default()
                .push(Item::Added(f));
        }
        plan
    }

    /// Carries manifest `m`, or plans its live entries (`removed` ones `DELETED`).
    fn add(
        &mut self,
        m: &'a LoadedManifest,
        rewrite: &Rewrite,
        removed: impl Fn(&ManifestEntryRef) -> bool,
    ) {
        if !m.entries.iter().any(|e| e.is_alive()) {
            // Only `DELETED` entries (a row delta re-writes a delete manifest whose delete files
            // it replaced, then carries it): nothing of the table, dropped (readers open every
            // manifest listed: 150 of them made a compacted table scan 4x slower in DuckDB).
            self.replaced += 1;
            return;
        }
        let touched = m.entries.iter().any(|e| e.is_alive() && removed(e));
        let small = rewrite.merge_manifests && m.file.manifest_length < MANIFEST_TARGET_BYTES;
        if !touched && !small {
            self.carried.push(m.file.clone());
            return;
        }
        self.replaced += 1;
        let deletes = m.file.content == ManifestContentType::Deletes;
        let group = self
            .items
            .entry((deletes, m.file.partition_spec_id))
            .or_default();
        // First row id inheritance (Iceberg spec, "Row Lineage"): a data file without one
        // takes the manifest's plus the rows of the files before it that had none.
        let mut next_row_id = m.file.first_row_id.filter(|_| !deletes).map(|f| f as i64);
        for e in m.entries.iter().filter(|e| e.is_alive()) {
            let inherited = match (e.data_file().first_row_id(), next_row_id) {
                (None, Some(n)) => {
                    next_row_id = Some(n + e.record_count() as i64);
                    Some(n)
                }
                _ => None,
            };
            group.push(if removed(e) {
                Item::Deleted(e, inherited)
            } else {
                Item::Existing(e, inherited)
            });
        }
    }
}

/// Writes the manifests and the manifest list of snapshot `new` (each path pushed to `written`
/// before it is written) and swaps it in with `summary`, expiring `rewrite.expire` in the same
/// update.
///
/// Errors: writing the files, and the swap's (see [`commit_rewrite`]).
async fn write_and_swap(
    table: &Table,
    rewrite: &Rewrite,
    swap: &dyn TableSwap,
    new: &NewSnapshot,
    plan: ManifestPlan<'_>,
    summary: Summary,
    written: &mut Vec<String>,
) -> iceberg::Result<Rewritten> {
    let md = table.metadata();
    let replaced = plan.replaced;
    let (list_path, count, row_range) = write_manifests(table, new, plan, written).await?;
    let snapshot = Snapshot::builder()
        .with_snapshot_id(new.snapshot_id)
        .with_parent_snapshot_id(Some(new.parent))
        .with_sequence_number(new.sequence_number)
        .with_timestamp_ms(now_ms().max(md.last_updated_ms()))
        .with_manifest_list(list_path)
        .with_schema_id(md.current_schema_id())
        .with_summary(summary);
    let snapshot = match row_range {
        Some((first, added)) => snapshot.with_row_range(first, added).build(),
        None => snapshot.build(),
    };
    let requirements = vec![
        TableRequirement::UuidMatch { uuid: md.uuid() },
        TableRequirement::RefSnapshotIdMatch {
            r#ref: MAIN_BRANCH.to_string(),
            snapshot_id: Some(new.parent),
        },
    ];
    let mut updates = Vec::new();
    let current_id = md.current_snapshot_id();
    let expire: Vec<i64> = rewrite
        .expire
        .iter()
        .copied()
        .filter(|id| Some(*id) != current_id)
        .collect();
    if !expire.is_empty() {
        updates.push(TableUpdate::RemoveSnapshots {
            snapshot_ids: expire,
        });
    }
    updates.extend([
        TableUpdate::AddSnapshot { snapshot },
        TableUpdate::SetSnapshotRef {
            ref_name: MAIN_BRANCH.to_string(),
            reference: SnapshotReference::new(
                new.snapshot_id,
                SnapshotRetention::branch(None, None, None),
            ),
        },
    ]);
    crate::failpoint::step_point("rewrite-written").await;
    let committed = swap.swap(table.identifier(), requirements, updates).await?;
    crate::failpoint::step_point("rewrite-committed").await;
    Ok(Rewritten {
        table: committed,
        snapshot_id: new.snapshot_id,
        manifests: count,
        manifests_replaced: replaced,
    })
}

/// Writes `plan`'s new manifests (at most [`MAX_ENTRIES_PER_MANIFEST`] entries each) and the
/// manifest list of snapshot `new` (the carried manifests and the new ones), each path pushed
/// to `written` before it is written. Returns the list's path, its number of manifests and,
/// format v3, the snapshot's row range (`first-row-id`, `added-rows`: the table's
/// `next-row-id`, and the row ids the list assigned to data manifests without a
/// `first_row_id`, as [`super::deletes`] commits do).
///
/// Errors: writing a file.
async fn write_manifests(
    table: &Table,
    new: &NewSnapshot,
    plan: ManifestPlan<'_>,
    written: &mut Vec<String>,
) -> iceberg::Result<(String, usize, Option<(u64, u64)>)> {
    let md = table.metadata();
    let (snapshot_id, commit_id) = (new.snapshot_id, new.commit_id);
    let mut manifests = plan.carried;
    let mut n = 0usize;
    for (kind, group) in &plan.items {
        for chunk in group.chunks(MAX_ENTRIES_PER_MANIFEST) {
            let path = format!("{}/metadata/{commit_id}-r{n}.avro", md.location());
            n += 1;
            written.push(path.clone());
            manifests.push(write_manifest(table, new, *kind, &path, chunk).await?);
        }
    }
    let list_path = format!(
        "{}/metadata/snap-{snapshot_id}-0-{commit_id}.avro",
        md.location()
    );
    written.push(list_path.clone());
    let out = table.file_io().new_output(&list_path)?.writer().await?;
    let first_row_id = md.next_row_id();
    let mut list = match md.format_version() {
        FormatVersion::V3 => ManifestListWriter::v3(
            out,
            snapshot_id,
            Some(new.parent),
            new.sequence_number,
            Some(first_row_id),
        ),
        _ => ManifestListWriter::v2(out, snapshot_id, Some(new.parent), new.sequence_number),
    };
    let count = manifests.len();
    list.add_manifests(manifests.into_iter())?;
    let next_row_id = list.next_row_id();
    list.close().await?;
    let row_range = next_row_id.map(|next| (first_row_id, next - first_row_id));
    Ok((list_path, count, row_range))
}

/// The guard every maintenance snapshot passes before it reaches the catalog: its operation
/// must tell the truth about its rows (Iceberg spec, "Snapshots": a `replace` changes files
/// "without changing table data"; incremental readers of Spark and Flink skip it). A `replace`
/// adds exactly the live records it deletes: the records of the data files it removes less the
/// positions their removed delete files deleted (`removed-position-deletes`: a compaction with
/// deletes applied writes the live rows only); a `delete` adds nothing; `total-records` is
/// always the parent's plus added minus deleted.
///
/// Errors: `ErrorKind::DataInvalid` naming the operation, the tasks and the counts (a bug in the
/// snapshot's planning: nothing is committed).
pub fn check_operation(summary: &Summary, parent_total_records: u64) -> iceberg::Result<()> {
    let props = &summary.additional_properties;
    let number = |key: &str| -> u64 {
        props
            .get(key)
            .and_then(|v| v.parse().ok())
            .unwrap_or_default()
    };
    let (added, deleted, total) = (
        number("added-records"),
        number("deleted-records"),
        number("total-records"),
    );
    // Rows of the removed data files that their removed delete files had deleted already: gone
    // from the table before this snapshot.
    let dead = number("removed-position-deletes");
    let tasks = props.get(SUMMARY_MAINTENANCE).map_or("", String::as_str);
    let refuse = |why: String| {
        Err(Error::new(
            ErrorKind::DataInvalid,
            format!(
                "maintenance snapshot ({tasks}) refused: {why} (added-records {added}, deleted-records {deleted}, total-records {parent_total_records} -> {total})"
            ),
        ))
    };
    if parent_total_records + added != total + deleted {
        return refuse("its total-records do not follow from its parent's".into());
    }
    match summary.operation {
        Operation::Replace if dead > deleted => {
            refuse("a replace must not remove more deleted rows than data rows".into())
        }
        Operation::Replace if added != deleted - dead => refuse(format!(
            "a replace must not change the table's rows, this one {} {} records",
            if added > deleted - dead {
                "adds"
            } else {
                "removes"
            },
            added.abs_diff(deleted - dead)
        )),
        Operation::Delete if added > 0 || number("added-data-files") > 0 => {
            refuse("a delete must not add data".into())
        }
        Operation::Append => refuse("floe's maintenance never appends".into()),
        _ => Ok(()),
    }
}

/// A random positive snapshot id no snapshot of `table` has (iceberg-rust's rule).
fn unique_snapshot_id(table: &Table) -> i64 {
    loop {
        let (a, b) = Uuid::new_v4().as_u64_pair();
        let id = ((a ^ b) as i64).wrapping_abs().max(1);
        if table.metadata().snapshot_by_id(id).is_none() {
            return id;
        }
    }
}

/// Writes one manifest of `kind` (delete files or not, partition spec id) of snapshot `new`
/// at `path`, holding `items`, in the table's format version.
async fn write_manifest(
    table: &Table,
    new: &NewSnapshot,
    (deletes, spec_id): ManifestKind,
    path: &str,
    items: &[Item<'_>],
) -> iceberg::Result<ManifestFile> {
    let md = table.metadata();
    let spec = md.partition_spec_by_id(spec_id).ok_or_else(|| {
        Error::new(
            ErrorKind::DataInvalid,
            format!("partition spec {spec_id} not in the table"),
        )
    })?;
    let builder = ManifestWriterBuilder::new(
        table.file_io().new_output(path)?,
        Some(new.snapshot_id),
        md.current_schema().clone(),
        spec.as_ref().clone(),
    );
    let mut writer = match (md.format_version(), deletes) {
        (FormatVersion::V3, false) => builder.build_v3_data(),
        (FormatVersion::V3, true) => builder.build_v3_deletes(),
        (_, false) => builder.build_v2_data(),
        (_, true) => builder.build_v2_deletes(),
    };
    let numbers = |e: &ManifestEntryRef| -> iceberg::Result<(i64, Option<i64>)> {
        let seq = e.sequence_number().ok_or_else(|| {
            Error::new(
                ErrorKind::DataInvalid,
                format!("manifest entry {} has no sequence number", e.file_path()),
            )
        })?;
        Ok((seq, e.file_sequence_number.or(Some(seq))))
    };
    let file = |e: &ManifestEntryRef, inherited: Option<i64>| match inherited {
        Some(id) => with_first_row_id(e.data_file(), spec_id, id),
        None => Ok(e.data_file().clone()),
    };
    for item in items {
        match item {
            Item::Existing(e, inherited) => {
                let (seq, file_seq) = numbers(e)?;
                writer.add_existing_file(
                    file(e, *inherited)?,
                    e.snapshot_id().unwrap_or(new.snapshot_id),
                    seq,
                    file_seq,
                )?;
            }
            Item::Deleted(e, inherited) => {
                let (seq, file_seq) = numbers(e)?;
                writer.add_delete_file(file(e, *inherited)?, seq, file_seq)?;
            }
            Item::Added(f) => writer.add_file((*f).clone(), new.sequence_number)?,
        }
    }
    writer.write_manifest_file().await
}

/// `f` (of partition spec `spec_id`) stating `first_row_id` (iceberg-rust 0.10.1 has no setter
/// and does not apply first row id inheritance when it reads a manifest).
fn with_first_row_id(f: &DataFile, spec_id: i32, first_row_id: i64) -> iceberg::Result<DataFile> {
    let mut b = DataFileBuilder::default();
    b.content(f.content_type())
        .file_path(f.file_path().to_string())
        .file_format(f.file_format())
        .partition(f.partition().clone())
        .record_count(f.record_count())
        .file_size_in_bytes(f.file_size_in_bytes())
        .column_sizes(f.column_sizes().clone())
        .value_counts(f.value_counts().clone())
        .null_value_counts(f.null_value_counts().clone())
        .nan_value_counts(f.nan_value_counts().clone())
        .lower_bounds(f.lower_bounds().clone())
        .upper_bounds(f.upper_bounds().clone())
        .key_metadata(f.key_metadata().map(<[u8]>::to_vec))
        .split_offsets(f.split_offsets().map(<[i64]>::to_vec))
        .equality_ids(f.equality_ids())
        .first_row_id(Some(first_row_id))
        .partition_spec_id(spec_id)
        .referenced_data_file(f.referenced_data_file())
        .content_offset(f.content_offset())
        .content_size_in_bytes(f.content_size_in_bytes());
    if let Some(order) = f.sort_order_id() {
        b.sort_order_id(order);
    }
    b.build().map_err(|e| {
        Error::new(
            ErrorKind::DataInvalid,
            format!("data file {} with a first row id: {e}", f.file_path()),
        )
    })
}

/// The snapshot summary (Iceberg spec "Snapshot summary" keys) of `rewrite` on `current`,
/// which removes the delete files `removed_deletes` with its data files: `added-*`, `deleted-*`
/// and `removed-*` counts (delete files counted as position-delete files and deletion vectors
/// apart, as Iceberg Java and [`super::deletes`] count them; only positive `removed-*` keys)
/// and `total-*` from the current snapshot's live files (a deletion vector's bytes are its
/// blob's). Operation `delete` for record expiry, `replace` otherwise.
fn summary(
    current: &CurrentFiles,
    rewrite: &Rewrite,
    removed_deletes: &[&ManifestEntryRef],
    commit_id: Uuid,
) -> Summary {
    use super::deletes::content_size;
    let removed: Vec<&ManifestEntryRef> = current
        .live()
        .filter(|e| rewrite.remove.contains(e.file_path()))
        .collect();
    let (mut total_files, mut total_records, mut total_size) = (0u64, 0u64, 0u64);
    for e in current.live() {
        total_files += 1;
        total_records += e.record_count();
        total_size += e.file_size_in_bytes();
    }
    let (mut total_deletes, mut total_positions, mut total_equality) = (0u64, 0u64, 0u64);
    for e in current.live_deletes() {
        total_deletes += 1;
        total_size += content_size(e.data_file());
        match e.content_type() {
            DataContentType::EqualityDeletes => total_equality += e.record_count(),
            _ => total_positions += e.record_count(),
        }
    }
    let deleted_records: u64 = removed.iter().map(|e| e.record_count()).sum();
    let is_dv = |e: &&&ManifestEntryRef| e.file_format() == DataFileFormat::Puffin;
    let removed_dvs = removed_deletes.iter().filter(is_dv).count() as u64;
    let removed_positions: u64 = removed_deletes.iter().map(|e| e.record_count()).sum();
    let removed_size: u64 = removed.iter().map(|e| e.file_size_in_bytes()).sum::<u64>()
        + removed_deletes
            .iter()
            .map(|e| content_size(e.data_file()))
            .sum::<u64>();
    let added_records: u64 = rewrite.add.iter().map(|f| f.record_count()).sum();
    let added_size: u64 = rewrite.add.iter().map(|f| f.file_size_in_bytes()).sum();
    let partitions: HashSet<String> = removed
        .iter()
        .map(|e| format!("{:?}", e.data_file().partition()))
        .chain(rewrite.add.iter().map(|f| format!("{:?}", f.partition())))
        .collect();
    let operation = if rewrite.removes_rows() {
        Operation::Delete
    } else {
        Operation::Replace
    };
    let num_removed_deletes = removed_deletes.len() as u64;
    let removed_counts = [
        ("removed-delete-files", num_removed_deletes),
        (
            "removed-position-delete-files",
            num_removed_deletes - removed_dvs,
        ),
        ("removed-dvs", removed_dvs),
        ("removed-position-deletes", removed_positions),
    ];
    let props: HashMap<String, String> = [
        ("added-data-files", rewrite.add.len() as u64),
        ("deleted-data-files", removed.len() as u64),
        ("added-records", added_records),
        ("deleted-records", deleted_records),
        ("added-files-size", added_size),
        ("removed-files-size", removed_size),
        ("changed-partition-count", partitions.len() as u64),
        (
            "total-data-files",
            total_files + rewrite.add.len() as u64 - removed.len() as u64,
        ),
        (
            "total-records",
            total_records + added_records - deleted_records,
        ),
        ("total-files-size", total_size + added_size - removed_size),
        ("total-delete-files", total_deletes - num_removed_deletes),
        (
            "total-position-deletes",
            total_positions - removed_positions,
        ),
        ("total-equality-deletes", total_equality),
    ]
    .into_iter()
    .chain(removed_counts.into_iter().filter(|(_, v)| *v > 0))
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .chain([
        (SUMMARY_MAINTENANCE.to_string(), rewrite.tasks.join(",")),
        (
            super::table_state::SUMMARY_COMMIT_ID.to_string(),
            commit_id.to_string(),
        ),
    ])
    .collect();
    Summary {
        operation,
        additional_properties: props,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn summary_of(operation: Operation, added: u64, deleted: u64, total: u64) -> Summary {
        Summary {
            operation,
            additional_properties: [
                ("added-records", added.to_string()),
                ("deleted-records", deleted.to_string()),
                ("total-records", total.to_string()),
                (SUMMARY_MAINTENANCE, "record-expiry,compaction".to_string()),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect(),
        }
    }

    /// The snapshot a chaos run committed (record expiry inside a compaction's `replace`:
    /// 10,706 rows down to 10,626) is refused before it reaches the catalog; the two truthful
    /// snapshots that replace it pass.
    #[test]
    fn a_replace_that_changes_the_row_count_is_refused() {
        let e = check_operation(
            &summary_of(Operation::Replace, 6_034, 6_114, 10_626),
            10_706,
        )
        .expect_err("a replace removing 80 rows");
        assert_eq!(e.kind(), ErrorKind::DataInvalid);
        let message = e.to_string();
        for part in [
            "replace",
            "removes 80 records",
            "record-expiry,compaction",
            "added-records 6034",
            "deleted-records 6114",
        ] {
            assert!(message.contains(part), "{part:?} in {message}");
        }
        // The same look as two snapshots: the delete of the expired hour, then the compaction.
        check_operation(&summary_of(Operation::Delete, 0, 80, 10_626), 10_706).unwrap();
        check_operation(
            &summary_of(Operation::Replace, 6_034, 6_034, 10_626),
            10_626,
        )
        .unwrap();
        // A replace that adds rows, a delete that adds, totals that do not add up, an append.
        check_operation(&summary_of(Operation::Replace, 11, 10, 101), 100).unwrap_err();
        check_operation(&summary_of(Operation::Delete, 5, 10, 95), 100).unwrap_err();
        check_operation(&summary_of(Operation::Replace, 10, 10, 90), 100).unwrap_err();
        check_operation(&summary_of(Operation::Delete, 0, 10, 100), 100).unwrap_err();
        check_operation(&summary_of(Operation::Append, 10, 0, 110), 100).unwrap_err();
    }
}
