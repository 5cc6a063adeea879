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
    DataContentType, DataFile, ManifestContentType, ManifestEntryRef, ManifestFile,
    ManifestListWriter, ManifestWriterBuilder, Operation, Snapshot, SnapshotReference,
    SnapshotRetention, Summary, MAIN_BRANCH,
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

/// The data manifests of a table's current snapshot, loaded.
#[derive(Debug, Clone, Default)]
pub struct CurrentFiles {
    /// The current snapshot (`None`: the table has none, nothing to rewrite).
    pub snapshot_id: Option<i64>,
    /// Its data manifests.
    pub manifests: Vec<LoadedManifest>,
    /// Whether it has delete manifests (position or equality deletes another engine wrote):
    /// floe never rewrites data files then.
    pub has_deletes: bool,
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
            if file.content == ManifestContentType::Deletes {
                out.has_deletes = true;
                continue;
            }
            let manifest = file.load_manifest(table.file_io()).await?;
            out.manifests.push(LoadedManifest {
                file: file.clone(),
                entries: manifest.entries().to_vec(),
            });
        }
        Ok(out)
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
}

impl Rewrite {
    /// Whether it changes nothing.
    pub fn is_empty(&self) -> bool {
        self.remove.is_empty() && self.add.is_empty() && !self.merge_manifests
    }
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

enum Item<'a> {
    Existing(&'a ManifestEntryRef),
    Deleted(&'a ManifestEntryRef),
    Added(&'a DataFile),
}

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
    let summary = summary(current, rewrite, commit_id);
    check_operation(&summary, current.live().map(|e| e.record_count()).sum())?;
    let md = table.metadata();
    let new = NewSnapshot {
        snapshot_id: unique_snapshot_id(table),
        sequence_number: md.next_sequence_number(),
        parent,
        commit_id,
    };
    let plan = ManifestPlan::of(current, rewrite, md.default_partition_spec_id());
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
    if current.has_deletes && !(rewrite.remove.is_empty() && rewrite.add.is_empty()) {
        return Err(Error::new(
            ErrorKind::DataInvalid,
            "the current snapshot has delete files: its data files are not rewritten",
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
/// the manifests it writes, by partition spec id.
struct ManifestPlan<'a> {
    carried: Vec<ManifestFile>,
    items: BTreeMap<i32, Vec<Item<'a>>>,
    /// Manifests of the parent not carried.
    replaced: usize,
}

impl<'a> ManifestPlan<'a> {
    /// A manifest touched by a removal, or small when merging, is re-written (its live entries
    /// `EXISTING` or `DELETED`); added files go in new manifests of `default_spec`.
    fn of(current: &'a CurrentFiles, rewrite: &'a Rewrite, default_spec: i32) -> Self {
        let mut carried: Vec<ManifestFile> = Vec::new();
        let mut items: BTreeMap<i32, Vec<Item>> = BTreeMap::new();
        let mut replaced = 0usize;
        for m in &current.manifests {
            let touched = m
                .entries
                .iter()
                .any(|e| e.is_alive() && rewrite.remove.contains(e.file_path()));
            let small = rewrite.merge_manifests && m.file.manifest_length < MANIFEST_TARGET_BYTES;
            if !touched && !small {
                carried.push(m.file.clone());
                continue;
            }
            replaced += 1;
            let group = items.entry(m.file.partition_spec_id).or_default();
            for e in m.entries.iter().filter(|e| e.is_alive()) {
                if rewrite.remove.contains(e.file_path()) {
                    group.push(Item::Deleted(e));
                } else {
                    group.push(Item::Existing(e));
                }
            }
        }
        for f in &rewrite.add {
            items.entry(default_spec).or_default().push(Item::Added(f));
        }
        ManifestPlan {
            carried,
            items,
            replaced,
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
    let (list_path, count) = write_manifests(table, new, plan, written).await?;
    let snapshot = Snapshot::builder()
        .with_snapshot_id(new.snapshot_id)
        .with_parent_snapshot_id(Some(new.parent))
        .with_sequence_number(new.sequence_number)
        .with_timestamp_ms(now_ms().max(md.last_updated_ms()))
        .with_manifest_list(list_path)
        .with_schema_id(md.current_schema_id())
        .with_summary(summary)
        .build();
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
/// to `written` before it is written. Returns the list's path and its number of manifests.
///
/// Errors: writing a file.
async fn write_manifests(
    table: &Table,
    new: &NewSnapshot,
    plan: ManifestPlan<'_>,
    written: &mut Vec<String>,
) -> iceberg::Result<(String, usize)> {
    let md = table.metadata();
    let (snapshot_id, commit_id) = (new.snapshot_id, new.commit_id);
    let mut manifests = plan.carried;
    let mut n = 0usize;
    for (spec_id, group) in &plan.items {
        for chunk in group.chunks(MAX_ENTRIES_PER_MANIFEST) {
            let path = format!("{}/metadata/{commit_id}-r{n}.avro", md.location());
            n += 1;
            written.push(path.clone());
            manifests.push(
                write_manifest(
                    table,
                    snapshot_id,
                    new.sequence_number,
                    *spec_id,
                    &path,
                    chunk,
                )
                .await?,
            );
        }
    }
    let list_path = format!(
        "{}/metadata/snap-{snapshot_id}-0-{commit_id}.avro",
        md.location()
    );
    written.push(list_path.clone());
    let mut list = ManifestListWriter::v2(
        table.file_io().new_output(&list_path)?.writer().await?,
        snapshot_id,
        Some(new.parent),
        new.sequence_number,
    );
    let count = manifests.len();
    list.add_manifests(manifests.into_iter())?;
    list.close().await?;
    Ok((list_path, count))
}

/// The guard every maintenance snapshot passes before it reaches the catalog: its operation
/// must tell the truth about its rows (Iceberg spec, "Snapshots": a `replace` changes files
/// "without changing table data"; incremental readers of Spark and Flink skip it). A `replace`
/// adds exactly the records it deletes and keeps `total-records` at `parent_total_records`; a
/// `delete` adds nothing; `total-records` is always the parent's plus added minus deleted.
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
        Operation::Replace if added != deleted => refuse(format!(
            "a replace must not change the table's rows, this one {} {} records",
            if added > deleted { "adds" } else { "removes" },
            added.abs_diff(deleted)
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

async fn write_manifest(
    table: &Table,
    snapshot_id: i64,
    sequence_number: i64,
    spec_id: i32,
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
    let mut writer = ManifestWriterBuilder::new(
        table.file_io().new_output(path)?,
        Some(snapshot_id),
        md.current_schema().clone(),
        spec.as_ref().clone(),
    )
    .build_v2_data();
    let numbers = |e: &ManifestEntryRef| -> iceberg::Result<(i64, Option<i64>)> {
        let seq = e.sequence_number().ok_or_else(|| {
            Error::new(
                ErrorKind::DataInvalid,
                format!("manifest entry {} has no sequence number", e.file_path()),
            )
        })?;
        Ok((seq, e.file_sequence_number.or(Some(seq))))
    };
    for item in items {
        match item {
            Item::Existing(e) => {
                let (seq, file_seq) = numbers(e)?;
                writer.add_existing_file(
                    e.data_file().clone(),
                    e.snapshot_id().unwrap_or(snapshot_id),
                    seq,
                    file_seq,
                )?;
            }
            Item::Deleted(e) => {
                let (seq, file_seq) = numbers(e)?;
                writer.add_delete_file(e.data_file().clone(), seq, file_seq)?;
            }
            Item::Added(f) => writer.add_file((*f).clone(), sequence_number)?,
        }
    }
    writer.write_manifest_file().await
}

/// The snapshot summary (Iceberg spec "Snapshot summary" keys) of `rewrite` on `current`.
fn summary(current: &CurrentFiles, rewrite: &Rewrite, commit_id: Uuid) -> Summary {
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
    let deleted_records: u64 = removed.iter().map(|e| e.record_count()).sum();
    let removed_size: u64 = removed.iter().map(|e| e.file_size_in_bytes()).sum();
    let added_records: u64 = rewrite.add.iter().map(|f| f.record_count()).sum();
    let added_size: u64 = rewrite.add.iter().map(|f| f.file_size_in_bytes()).sum();
    let partitions: HashSet<String> = removed
        .iter()
        .map(|e| format!("{:?}", e.data_file().partition()))
        .chain(rewrite.add.iter().map(|f| format!("{:?}", f.partition())))
        .collect();
    let operation = if rewrite.add.is_empty() && !rewrite.remove.is_empty() {
        Operation::Delete
    } else {
        Operation::Replace
    };
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
        ("total-delete-files", 0),
        ("total-position-deletes", 0),
        ("total-equality-deletes", 0),
    ]
    .into_iter()
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
