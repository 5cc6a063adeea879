//! The row-delta snapshot: data files added, deletes by position added (merged with the data
//! file's previous deletes, which are removed), table properties set, in one snapshot swapped
//! in on condition that the base snapshot is still current.

use std::collections::{BTreeMap, HashMap, HashSet};

use iceberg::spec::{
    DataContentType, DataFile, DataFileBuilder, DataFileFormat, FormatVersion, ManifestEntryRef,
    ManifestFile, ManifestListWriter, ManifestWriter, ManifestWriterBuilder, Operation, Snapshot,
    SnapshotReference, SnapshotRetention, Summary, MAIN_BRANCH,
};
use iceberg::{ErrorKind, TableRequirement, TableUpdate};
use roaring::RoaringTreemap;
use uuid::Uuid;

use super::base::{content_size, RowDeltaBase};
use super::read::read_deletes;
use super::{dv, position, RowDeltaError};
use crate::catalog::swap::TableSwap;

/// What one row-delta snapshot changes.
#[derive(Debug, Clone, Default)]
pub struct RowDelta {
    /// Data files to add (content `data`, of the table's default partition spec, not yet in the
    /// table).
    pub data_files: Vec<DataFile>,
    /// Positions (0-based row numbers) to delete, by data file path. A path is a live data file
    /// of the base or one of `data_files` (rows written by this same commit may be deleted: a
    /// delete applies to data of its own sequence number, Iceberg spec "Scan Planning").
    pub deletes: BTreeMap<String, RoaringTreemap>,
    /// Table properties set in the same snapshot (floe's checkpoints, docs/exactly-once.md).
    pub properties: HashMap<String, String>,
    /// Extra snapshot summary properties (e.g. `floe.commit-id`); the computed Iceberg keys win.
    pub summary: HashMap<String, String>,
    /// Snapshots expired in the same swap (snapshot expiry riding along, as in floe's appends;
    /// the base snapshot is never removed). Only metadata: the files only they reached are the
    /// caller's to delete after the commit.
    pub expire_snapshot_ids: Vec<i64>,
}

impl RowDelta {
    /// Marks row `position` of the data file at `path` deleted.
    pub fn delete(&mut self, path: &str, position: u64) {
        self.deletes
            .entry(path.to_string())
            .or_default()
            .insert(position);
    }

    /// Whether it changes nothing (no data, no deletes, no properties).
    pub fn is_empty(&self) -> bool {
        self.data_files.is_empty()
            && self.deletes.values().all(RoaringTreemap::is_empty)
            && self.properties.is_empty()
    }
}

/// What [`commit_row_delta`] committed.
#[derive(Debug, Clone)]
pub struct RowDeltaCommitted {
    /// The table as committed.
    pub table: iceberg::table::Table,
    /// The new snapshot (`None`: the delta only set properties, which adds no snapshot).
    pub snapshot_id: Option<i64>,
    /// The delete files it added (one per data file with deletes).
    pub added_delete_files: Vec<DataFile>,
    /// Paths of the delete files it removed (the merged predecessors).
    pub removed_delete_files: Vec<String>,
}

/// A data file a delete targets: where its delete file goes and how many rows it has.
struct Target {
    path: String,
    spec_id: i32,
    partition: iceberg::spec::Struct,
    positions: RoaringTreemap,
    /// Delete entries of the base it replaces (merged into `positions`).
    replaces: Vec<ManifestEntryRef>,
}

/// Commits `delta` on `base` as one snapshot through `swap`, conditional on the base snapshot
/// still being the table's current one (`assert-ref-snapshot-id main`) and on the table uuid.
///
/// The snapshot adds `delta.data_files` (one data manifest) and, per data file with deletes,
/// one delete file (format v2: a position-delete Parquet file; v3: a deletion vector, all of the
/// commit's vectors in one Puffin file) holding the new positions OR-ed with the file's previous
/// file-scoped deletes, whose entries it marks `DELETED`: at most one delete file per data file
/// (Iceberg spec, "Deletion Vectors": writers must merge). Its operation is `overwrite` when it
/// adds data and deletes, `delete` for deletes only, `append` for data only (Iceberg Java's
/// `RowDelta`). Files are named after `commit_id`.
///
/// Errors: [`RowDeltaError::Invalid`] (nothing written: a delete of a data file that is not live
/// in the base nor added, a position past the file's rows, an added file that is not new data,
/// a format v1 table, a delta that changes nothing);
/// [`RowDeltaError::Conflict`] (the base moved: nothing committed, this call's files deleted);
/// [`RowDeltaError::Unavailable`] (writing or reading files failed before the swap: nothing
/// committed); [`RowDeltaError::OutcomeUnknown`] (the swap failed otherwise: reload the table
/// and look for the snapshot id).
pub async fn commit_row_delta(
    base: &RowDeltaBase,
    delta: &RowDelta,
    swap: &dyn TableSwap,
    commit_id: Uuid,
) -> Result<RowDeltaCommitted, RowDeltaError> {
    let mut targets = plan(base, delta)?;
    if targets.is_empty() && delta.data_files.is_empty() {
        return commit_properties(base, delta, swap).await;
    }
    merge_previous(base, &mut targets).await?;
    let snapshot_id = unique_snapshot_id(&base.table);
    let mut written: Vec<String> = Vec::new();
    let result: Result<RowDeltaCommitted, RowDeltaError> = async {
        let added = write_delete_files(base, &targets, commit_id, &mut written).await?;
        let manifests = write_manifests(
            base,
            delta,
            &targets,
            &added,
            snapshot_id,
            commit_id,
            &mut written,
        )
        .await?;
        let snapshot = write_snapshot(
            base,
            manifests,
            snapshot_id,
            commit_id,
            summary(base, delta, &targets, &added),
            &mut written,
        )
        .await?;
        let mut updates: Vec<TableUpdate> = expiry(base, delta).into_iter().collect();
        updates.extend([
            TableUpdate::AddSnapshot { snapshot },
            TableUpdate::SetSnapshotRef {
                ref_name: MAIN_BRANCH.to_string(),
                reference: SnapshotReference::new(
                    snapshot_id,
                    SnapshotRetention::branch(None, None, None),
                ),
            },
        ]);
        if !delta.properties.is_empty() {
            updates.push(TableUpdate::SetProperties {
                updates: delta.properties.clone(),
            });
        }
        let table = swap
            .swap(base.table.identifier(), requirements(base), updates)
            .await
            .map_err(|e| swap_error(e, base.snapshot_id, Some(snapshot_id)))?;
        Ok(RowDeltaCommitted {
            table,
            snapshot_id: Some(snapshot_id),
            removed_delete_files: targets
                .iter()
                .flat_map(|t| t.replaces.iter().map(|e| e.file_path().to_string()))
                .collect(),
            added_delete_files: added,
        })
    }
    .await;
    if let Err(e) = &result {
        if e.outcome_known() {
            for path in &written {
                let _ = base.table.file_io().delete(path).await;
            }
        }
    }
    result
}

/// The conditions of every row-delta swap: the same table, its `main` still at the base.
fn requirements(base: &RowDeltaBase) -> Vec<TableRequirement> {
    vec![
        TableRequirement::UuidMatch {
            uuid: base.table.metadata().uuid(),
        },
        TableRequirement::RefSnapshotIdMatch {
            r#ref: MAIN_BRANCH.to_string(),
            snapshot_id: base.snapshot_id,
        },
    ]
}

/// The removal of `delta`'s expired snapshots (never the base), if any.
fn expiry(base: &RowDeltaBase, delta: &RowDelta) -> Option<TableUpdate> {
    let expire: Vec<i64> = delta
        .expire_snapshot_ids
        .iter()
        .copied()
        .filter(|id| Some(*id) != base.snapshot_id)
        .collect();
    (!expire.is_empty()).then_some(TableUpdate::RemoveSnapshots {
        snapshot_ids: expire,
    })
}

/// A delta without data or deletes: its properties alone, set on the same conditions, no
/// snapshot.
async fn commit_properties(
    base: &RowDeltaBase,
    delta: &RowDelta,
    swap: &dyn TableSwap,
) -> Result<RowDeltaCommitted, RowDeltaError> {
    if delta.properties.is_empty() {
        return Err(RowDeltaError::Invalid(
            "the row delta changes nothing".into(),
        ));
    }
    let mut updates = vec![TableUpdate::SetProperties {
        updates: delta.properties.clone(),
    }];
    updates.extend(expiry(base, delta));
    let table = swap
        .swap(base.table.identifier(), requirements(base), updates)
        .await
        .map_err(|e| swap_error(e, base.snapshot_id, None))?;
    Ok(RowDeltaCommitted {
        table,
        snapshot_id: None,
        added_delete_files: Vec::new(),
        removed_delete_files: Vec::new(),
    })
}

/// The swap's error as the caller's decision: a failed requirement (`DataInvalid`, from
/// `TableRequirement::check`) or a lost swap is a conflict; anything else an unknown outcome.
fn swap_error(e: iceberg::Error, base: Option<i64>, snapshot_id: Option<i64>) -> RowDeltaError {
    match e.kind() {
        ErrorKind::CatalogCommitConflicts | ErrorKind::DataInvalid => RowDeltaError::Conflict {
            base,
            reason: e.to_string(),
        },
        _ => RowDeltaError::OutcomeUnknown {
            snapshot_id,
            source: Box::new(e),
        },
    }
}

/// The data files the deletes of `delta` target, checked against `base` and `delta.data_files`.
fn plan(base: &RowDeltaBase, delta: &RowDelta) -> Result<Vec<Target>, RowDeltaError> {
    let md = base.table.metadata();
    if md.format_version() == FormatVersion::V1 {
        return Err(RowDeltaError::Invalid(
            "format version 1 tables have no delete files: upgrade the table to 2 or 3".into(),
        ));
    }
    let default_spec = md.default_partition_spec_id();
    let mut added: HashMap<&str, &DataFile> = HashMap::new();
    for f in &delta.data_files {
        if f.content_type() != DataContentType::Data {
            return Err(RowDeltaError::Invalid(format!(
                "{} is a delete file, not data",
                f.file_path()
            )));
        }
        if base.live_data.contains_key(f.file_path()) || added.insert(f.file_path(), f).is_some() {
            return Err(RowDeltaError::Invalid(format!(
                "data file {} is added twice",
                f.file_path()
            )));
        }
    }
    let mut targets = Vec::new();
    for (path, positions) in delta.deletes.iter().filter(|(_, p)| !p.is_empty()) {
        let (spec_id, partition, rows) = match (base.live_data.get(path), added.get(path.as_str()))
        {
            (Some(live), _) => (live.spec_id, live.partition.clone(), live.record_count),
            (None, Some(f)) => (default_spec, f.partition().clone(), f.record_count()),
            (None, None) => {
                return Err(RowDeltaError::Invalid(format!(
                    "data file {path} is not live in snapshot {:?} nor added by this commit",
                    base.snapshot_id
                )))
            }
        };
        let last = positions.max().unwrap_or_default();
        if last >= rows {
            return Err(RowDeltaError::Invalid(format!(
                "position {last} of data file {path} is past its {rows} rows"
            )));
        }
        targets.push(Target {
            path: path.clone(),
            spec_id,
            partition,
            positions: positions.clone(),
            replaces: base.deletes_of(path).into_iter().cloned().collect(),
        });
    }
    Ok(targets)
}

/// ORs each target's previous deletes (its deletion vector, or its position-delete files) into
/// its positions.
async fn merge_previous(base: &RowDeltaBase, targets: &mut [Target]) -> Result<(), RowDeltaError> {
    let io = base.table.file_io();
    for t in targets.iter_mut() {
        for e in &t.replaces {
            let previous = read_deletes(io, e.data_file(), &t.path)
                .await
                .map_err(|e| match e.kind() {
                    ErrorKind::DataInvalid => RowDeltaError::Invalid(e.to_string()),
                    _ => RowDeltaError::unavailable("read previous deletes", e),
                })?;
            t.positions |= previous;
        }
    }
    Ok(())
}

/// Writes one delete file per target: v2 a Parquet position-delete file each, v3 one Puffin
/// file holding every target's deletion vector.
async fn write_delete_files(
    base: &RowDeltaBase,
    targets: &[Target],
    commit_id: Uuid,
    written: &mut Vec<String>,
) -> Result<Vec<DataFile>, RowDeltaError> {
    let md = base.table.metadata();
    let io = base.table.file_io();
    let dir = format!("{}/data", md.location());
    let unavailable = |e| RowDeltaError::unavailable("write delete files", e);
    if targets.is_empty() {
        return Ok(Vec::new());
    }
    if md.format_version() < FormatVersion::V3 {
        let mut out = Vec::with_capacity(targets.len());
        for (n, t) in targets.iter().enumerate() {
            let path = format!("{dir}/floe-{commit_id}-deletes-{n:05}.parquet");
            written.push(path.clone());
            let f = position::write_position_deletes(
                io,
                &path,
                &t.path,
                t.partition.clone(),
                t.spec_id,
                &t.positions,
            )
            .await
            .map_err(unavailable)?;
            out.push(f);
        }
        return Ok(out);
    }
    let path = format!("{dir}/floe-{commit_id}-dv.puffin");
    written.push(path.clone());
    let vectors: Vec<(String, RoaringTreemap)> = targets
        .iter()
        .map(|t| (t.path.clone(), t.positions.clone()))
        .collect();
    let (blobs, size) = dv::write_puffin(io, &path, &vectors)
        .await
        .map_err(unavailable)?;
    targets
        .iter()
        .zip(blobs)
        .map(|(t, blob)| {
            DataFileBuilder::default()
                .content(DataContentType::PositionDeletes)
                .file_path(path.clone())
                .file_format(DataFileFormat::Puffin)
                .partition(t.partition.clone())
                .partition_spec_id(t.spec_id)
                .record_count(blob.cardinality)
                .file_size_in_bytes(size)
                .referenced_data_file(Some(blob.referenced_data_file))
                .content_offset(Some(blob.offset as i64))
                .content_size_in_bytes(Some(blob.length as i64))
                .build()
                .map_err(|e| RowDeltaError::Invalid(format!("deletion vector entry: {e}")))
        })
        .collect()
}

/// The manifests of the new snapshot: the base's data manifests as they are, one for the added
/// data files, the base's delete manifests (re-written with `DELETED` entries where a
/// predecessor is replaced), one per partition spec for the added delete files.
async fn write_manifests(
    base: &RowDeltaBase,
    delta: &RowDelta,
    targets: &[Target],
    added_deletes: &[DataFile],
    snapshot_id: i64,
    commit_id: Uuid,
    written: &mut Vec<String>,
) -> Result<Vec<ManifestFile>, RowDeltaError> {
    let md = base.table.metadata();
    let sequence_number = md.next_sequence_number();
    let unavailable = |e| RowDeltaError::unavailable("write manifests", e);
    let mut manifests = base.data_manifests.clone();
    let mut n = 0usize;
    let mut new_writer = |spec_id: i32, deletes: bool| -> Result<ManifestWriter, RowDeltaError> {
        let path = format!("{}/metadata/{commit_id}-rd{n}.avro", md.location());
        n += 1;
        written.push(path.clone());
        let spec = md.partition_spec_by_id(spec_id).ok_or_else(|| {
            RowDeltaError::Invalid(format!("partition spec {spec_id} not in the table"))
        })?;
        let builder = ManifestWriterBuilder::new(
            base.table
                .file_io()
                .new_output(&path)
                .map_err(unavailable)?,
            Some(snapshot_id),
            md.current_schema().clone(),
            spec.as_ref().clone(),
        );
        Ok(match (md.format_version(), deletes) {
            (FormatVersion::V3, false) => builder.build_v3_data(),
            (FormatVersion::V3, true) => builder.build_v3_deletes(),
            (_, false) => builder.build_v2_data(),
            (_, true) => builder.build_v2_deletes(),
        })
    };
    if !delta.data_files.is_empty() {
        let mut w = new_writer(md.default_partition_spec_id(), false)?;
        for f in &delta.data_files {
            w.add_file(f.clone(), sequence_number)
                .map_err(unavailable)?;
        }
        manifests.push(w.write_manifest_file().await.map_err(unavailable)?);
    }
    let replaced: HashSet<(&str, Option<i64>)> = targets
        .iter()
        .flat_map(|t| t.replaces.iter())
        .map(|e| (e.file_path(), e.data_file().content_offset()))
        .collect();
    for m in &base.delete_manifests {
        let is_replaced = |e: &ManifestEntryRef| {
            replaced.contains(&(e.file_path(), e.data_file().content_offset()))
        };
        if !m.entries.iter().any(is_replaced) {
            manifests.push(m.file.clone());
            continue;
        }
        let mut w = new_writer(m.file.partition_spec_id, true)?;
        for e in &m.entries {
            let seq = e.sequence_number().unwrap_or(m.file.sequence_number);
            let file_seq = e.file_sequence_number.or(Some(seq));
            if is_replaced(e) {
                w.add_delete_file(e.data_file().clone(), seq, file_seq)
            } else {
                let added_by = e.snapshot_id().unwrap_or(m.file.added_snapshot_id);
                w.add_existing_file(e.data_file().clone(), added_by, seq, file_seq)
            }
            .map_err(unavailable)?;
        }
        manifests.push(w.write_manifest_file().await.map_err(unavailable)?);
    }
    let mut by_spec: BTreeMap<i32, Vec<&DataFile>> = BTreeMap::new();
    for (t, f) in targets.iter().zip(added_deletes) {
        by_spec.entry(t.spec_id).or_default().push(f);
    }
    for (spec_id, files) in by_spec {
        let mut w = new_writer(spec_id, true)?;
        for f in files {
            w.add_file(f.clone(), sequence_number)
                .map_err(unavailable)?;
        }
        manifests.push(w.write_manifest_file().await.map_err(unavailable)?);
    }
    Ok(manifests)
}

/// Writes the manifest list and returns the snapshot. Format v3: the list assigns a
/// `first_row_id` to each data manifest without one (the new one) from the table's
/// `next-row-id`, and the snapshot records `first-row-id` and `added-rows` (Iceberg spec, "Row
/// Lineage"), as iceberg-rust's own snapshot producer does for appends.
async fn write_snapshot(
    base: &RowDeltaBase,
    manifests: Vec<ManifestFile>,
    snapshot_id: i64,
    commit_id: Uuid,
    summary: Summary,
    written: &mut Vec<String>,
) -> Result<Snapshot, RowDeltaError> {
    let md = base.table.metadata();
    let unavailable = |e| RowDeltaError::unavailable("write manifest list", e);
    let sequence_number = md.next_sequence_number();
    let list_path = format!(
        "{}/metadata/snap-{snapshot_id}-0-{commit_id}.avro",
        md.location()
    );
    written.push(list_path.clone());
    let out = base
        .table
        .file_io()
        .new_output(&list_path)
        .map_err(unavailable)?
        .writer()
        .await
        .map_err(unavailable)?;
    let first_row_id = md.next_row_id();
    let mut list = match md.format_version() {
        FormatVersion::V3 => ManifestListWriter::v3(
            out,
            snapshot_id,
            base.snapshot_id,
            sequence_number,
            Some(first_row_id),
        ),
        _ => ManifestListWriter::v2(out, snapshot_id, base.snapshot_id, sequence_number),
    };
    list.add_manifests(manifests.into_iter())
        .map_err(unavailable)?;
    let next_row_id = list.next_row_id();
    list.close().await.map_err(unavailable)?;
    let builder = Snapshot::builder()
        .with_snapshot_id(snapshot_id)
        .with_parent_snapshot_id(base.snapshot_id)
        .with_sequence_number(sequence_number)
        .with_timestamp_ms(crate::time::now_ms().max(md.last_updated_ms()))
        .with_manifest_list(list_path)
        .with_schema_id(md.current_schema_id())
        .with_summary(summary);
    Ok(match next_row_id {
        Some(next) => builder
            .with_row_range(first_row_id, next - first_row_id)
            .build(),
        None => builder.build(),
    })
}

/// The snapshot summary (Iceberg spec, "Snapshot Summary"): `added-*` and `removed-*` counts of
/// data files, delete files (position-delete files and DVs apart, as Iceberg Java counts them),
/// records and positions; `total-*` from the base's live files.
fn summary(
    base: &RowDeltaBase,
    delta: &RowDelta,
    targets: &[Target],
    added_deletes: &[DataFile],
) -> Summary {
    let removed: Vec<&DataFile> = targets
        .iter()
        .flat_map(|t| t.replaces.iter().map(|e| e.data_file()))
        .collect();
    let is_dv = |f: &DataFile| f.file_format() == DataFileFormat::Puffin;
    let count = |files: &[&DataFile], dv: bool| files.iter().filter(|f| is_dv(f) == dv).count();
    let added_refs: Vec<&DataFile> = added_deletes.iter().collect();
    let added_records: u64 = delta.data_files.iter().map(|f| f.record_count()).sum();
    let added_data_size: u64 = delta
        .data_files
        .iter()
        .map(|f| f.file_size_in_bytes())
        .sum();
    let added_positions: u64 = added_deletes.iter().map(|f| f.record_count()).sum();
    let removed_positions: u64 = removed.iter().map(|f| f.record_count()).sum();
    let added_size = added_data_size + added_deletes.iter().map(content_size).sum::<u64>();
    let removed_size: u64 = removed.iter().map(|f| content_size(f)).sum();
    let partitions: HashSet<String> = delta
        .data_files
        .iter()
        .map(|f| format!("{:?}", f.partition()))
        .chain(targets.iter().map(|t| format!("{:?}", t.partition)))
        .collect();
    let t = &base.totals;
    let numbers = [
        ("added-data-files", delta.data_files.len() as u64),
        ("added-records", added_records),
        ("added-delete-files", added_deletes.len() as u64),
        (
            "added-position-delete-files",
            count(&added_refs, false) as u64,
        ),
        ("added-dvs", count(&added_refs, true) as u64),
        ("added-position-deletes", added_positions),
        ("removed-delete-files", removed.len() as u64),
        (
            "removed-position-delete-files",
            count(&removed, false) as u64,
        ),
        ("removed-dvs", count(&removed, true) as u64),
        ("removed-position-deletes", removed_positions),
        ("added-files-size", added_size),
        ("removed-files-size", removed_size),
        ("changed-partition-count", partitions.len() as u64),
    ];
    let totals = [
        (
            "total-data-files",
            t.data_files + delta.data_files.len() as u64,
        ),
        ("total-records", t.records + added_records),
        ("total-files-size", t.files_size + added_size - removed_size),
        (
            "total-delete-files",
            t.delete_files + added_deletes.len() as u64 - removed.len() as u64,
        ),
        (
            "total-position-deletes",
            t.position_deletes + added_positions - removed_positions,
        ),
        ("total-equality-deletes", t.equality_deletes),
    ];
    let mut props = delta.summary.clone();
    // Counts of nothing are left out (Iceberg Java sets only positive `added-*`/`removed-*`).
    props.extend(
        numbers
            .into_iter()
            .filter(|(_, v)| *v > 0)
            .chain(totals)
            .map(|(k, v)| (k.to_string(), v.to_string())),
    );
    let operation = match (delta.data_files.is_empty(), added_deletes.is_empty()) {
        (false, true) => Operation::Append,
        (true, false) => Operation::Delete,
        _ => Operation::Overwrite,
    };
    Summary {
        operation,
        additional_properties: props,
    }
}

/// A random positive snapshot id no snapshot of `table` has (iceberg-rust's rule; a copy of the
/// private helper of `crate::iceberg::rewrite`).
fn unique_snapshot_id(table: &iceberg::table::Table) -> i64 {
    loop {
        let (a, b) = Uuid::new_v4().as_u64_pair();
        let id = ((a ^ b) as i64).wrapping_abs().max(1);
        if table.metadata().snapshot_by_id(id).is_none() {
            return id;
        }
    }
}
