//! The orphan sweep: deletes the files floe wrote under a table's location that nothing
//! reaches any more — data files of a worker that crashed before handing its batch off,
//! compaction outputs of a committer killed before its commit, manifests of a refused rewrite,
//! files whose deletion after expiry was cut short (docs/operations.md, "Table maintenance").
//!
//! A file is deleted only if all of these hold:
//! - floe named it: a data file `<channel>-<UUIDv7>-<n>.parquet`, a deleted-keys file
//!   `<channel>-<batch UUIDv7>.keys` (an upsert batch's, `data/floe-keys/`), a delete file of a
//!   row-delta commit `floe-<commit UUIDv7>-deletes-<n>.parquet` / `floe-<commit UUIDv7>-dv.puffin`,
//!   a manifest `<UUIDv7>-m<n>.avro` / `<UUIDv7>-r<n>.avro` / `<UUIDv7>-rd<n>.avro`, a manifest
//!   list `snap-<id>-<n>-<UUIDv7>.avro` (files of other writers, and metadata files, are never
//!   touched);
//! - its UUIDv7 is older than the safety age (`orphan_age`, default 24 h, at least 1 h);
//! - no retained snapshot reaches it (manifest lists, manifests, live data and delete files of
//!   every snapshot), the metadata does not name it, and no pending batch names it.
//!
//! Why a late hand-off cannot lose data: a worker names its files with its batch's UUIDv7 before
//! it puts the pending batch. A worker stalled between the two for longer than the safety age
//! could find its files swept; so the committer treats a pending batch older than half the
//! safety age as dead ([`crate::commit::plan_round`]: its files are deleted, its records read
//! again). A sweep (which takes minutes, far less than half the safety age) can therefore only
//! delete files no batch will ever be accepted with.

use std::collections::HashSet;

use iceberg::table::Table;
use uuid::Uuid;

use super::fence::DeletionFence;

/// Minimum safety age of the sweep (`orphan_age`): 1 h.
pub const MIN_ORPHAN_AGE_MS: i64 = 3_600_000;

/// Where the sweep lists a table's files: the local file system, or S3 through the SDK (the
/// `[aws]` credentials).
#[derive(Clone, Debug)]
pub enum FileLister {
    /// `file://` locations and plain absolute paths.
    Local,
    /// `s3://` locations (a local location is listed locally all the same).
    S3(aws_sdk_s3::Client),
}

impl FileLister {
    /// Every file under `location`, in the form the table's metadata writes paths
    /// (`/abs/path`, `file:///abs/path` or `s3://bucket/key`).
    ///
    /// Errors: the listing fails; an `s3://` location with [`FileLister::Local`] is
    /// `Unsupported`.
    pub async fn list(&self, location: &str) -> std::io::Result<Vec<String>> {
        if let Some(rest) = location.strip_prefix("s3://") {
            let FileLister::S3(client) = self else {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::Unsupported,
                    format!("{location}: no S3 client to list it"),
                ));
            };
            let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
            let bucket_files = crate::aws::s3::S3Bucket::new(
                client.clone(),
                crate::config::S3Location {
                    bucket: bucket.to_string(),
                    prefix: String::new(),
                    expected_bucket_owner: None,
                    kms_key_arn: None,
                },
            );
            let keys = bucket_files
                .list(&format!("{}/", prefix.trim_end_matches('/')))
                .await?;
            return Ok(keys
                .into_iter()
                .map(|k| format!("s3://{bucket}/{k}"))
                .collect());
        }
        let (scheme, path) = match location.strip_prefix("file://") {
            Some(path) => ("file://", path),
            None => ("", location),
        };
        let root = std::path::PathBuf::from(path);
        tokio::task::spawn_blocking(move || {
            let mut out = Vec::new();
            let mut dirs = vec![root];
            while let Some(dir) = dirs.pop() {
                let entries = match std::fs::read_dir(&dir) {
                    Ok(e) => e,
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                    Err(e) => return Err(e),
                };
                for entry in entries {
                    let entry = entry?;
                    let p = entry.path();
                    if entry.file_type()?.is_dir() {
                        dirs.push(p);
                    } else {
                        out.push(format!("{scheme}{}", p.display()));
                    }
                }
            }
            Ok(out)
        })
        .await
        .map_err(std::io::Error::other)?
    }
}

/// The millisecond timestamp of the UUIDv7 in the file name of `path`, if floe named the file
/// (see the module docs); `channel` is the data and key files' prefix.
pub fn floe_file_time_ms(path: &str, channel: &str) -> Option<i64> {
    let name = path.rsplit('/').next()?;
    let uuid_at = |s: &str| -> Option<Uuid> {
        let u = Uuid::parse_str(s.get(..36)?).ok()?;
        (u.get_version_num() == 7).then_some(u)
    };
    let counter = |n: &str| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit());
    // A row-delta commit's delete files come first: a channel may be called `floe`.
    let delete_file = name.strip_prefix("floe-").and_then(|rest| {
        let u = uuid_at(rest)?;
        let tail = &rest[36..];
        let n = tail
            .strip_prefix("-deletes-")
            .and_then(|t| t.strip_suffix(".parquet"));
        (n.is_some_and(counter) || tail == "-dv.puffin").then_some(u)
    });
    let uuid = if let Some(u) = delete_file {
        u
    } else if let Some(rest) = name.strip_prefix(&format!("{channel}-")) {
        // <channel>-<uuid>-<n>.parquet | <channel>-<batch uuid>.keys
        let u = uuid_at(rest)?;
        let tail = &rest[36..];
        let n = tail
            .strip_prefix('-')
            .and_then(|t| t.strip_suffix(".parquet"));
        (n.is_some_and(counter) || tail == ".keys").then_some(u)?
    } else if let Some(rest) = name.strip_prefix("snap-") {
        // snap-<snapshot id>-<attempt>-<uuid>.avro
        let stem = rest.strip_suffix(".avro")?;
        let u = uuid_at(stem.get(stem.len().checked_sub(36)?..)?)?;
        u
    } else {
        // <uuid>-m<n>.avro | <uuid>-r<n>.avro | <uuid>-rd<n>.avro
        let u = uuid_at(name)?;
        let tail = name[36..].strip_suffix(".avro")?;
        let n = ["-m", "-rd", "-r"]
            .iter()
            .find_map(|p| tail.strip_prefix(p))?;
        counter(n).then_some(u)?
    };
    crate::time::uuid_v7_ms(&uuid)
}

/// Every file the table's metadata reaches: the current metadata file and its log, every
/// retained snapshot's manifest list, the manifests it lists and their live data and delete
/// files.
///
/// Errors: a manifest list or manifest cannot be read (then nothing may be swept).
pub async fn reachable_files(table: &Table) -> iceberg::Result<HashSet<String>> {
    let md = table.metadata();
    let mut out: HashSet<String> = md
        .metadata_log()
        .iter()
        .map(|m| m.metadata_file.clone())
        .chain(table.metadata_location().map(str::to_string))
        .collect();
    let mut manifests_seen = HashSet::new();
    for snapshot in md.snapshots() {
        out.insert(snapshot.manifest_list().to_string());
        let list = table.manifest_list_reader(snapshot).load().await?;
        for m in list.entries() {
            out.insert(m.manifest_path.clone());
            if !manifests_seen.insert(m.manifest_path.clone()) {
                continue;
            }
            let manifest = m.load_manifest(table.file_io()).await?;
            for e in manifest.entries().iter().filter(|e| e.is_alive()) {
                out.insert(e.file_path().to_string());
            }
        }
    }
    Ok(out)
}

/// What one sweep did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SweepReport {
    /// Files listed under the table location.
    pub listed: usize,
    /// Files deleted.
    pub deleted: usize,
    /// Unreferenced floe files left because they are younger than the safety age.
    pub young: usize,
}

/// Sweeps `table`'s location at `now_ms` (see the module docs): deletes, through `fence` (not
/// at all when this committer no longer owns the table), floe-named files of channel `channel`
/// older than `min_age_ms` that `table` does not reach and `pending` (paths named by pending
/// batches) does not name.
///
/// Errors: listing or reading the metadata failed (nothing deleted then); a failed delete is
/// counted as not deleted.
pub async fn sweep(
    table: &Table,
    channel: &str,
    lister: &FileLister,
    pending: &HashSet<String>,
    min_age_ms: i64,
    now_ms: i64,
    fence: &DeletionFence,
) -> iceberg::Result<SweepReport> {
    let min_age_ms = min_age_ms.max(MIN_ORPHAN_AGE_MS);
    let reachable = reachable_files(table).await?;
    let listed = lister
        .list(table.metadata().location())
        .await
        .map_err(|e| {
            iceberg::Error::new(
                iceberg::ErrorKind::Unexpected,
                format!("list {}: {e}", table.metadata().location()),
            )
        })?;
    let mut report = SweepReport {
        listed: listed.len(),
        ..SweepReport::default()
    };
    let mut orphans = Vec::new();
    for path in listed {
        if reachable.contains(&path) || pending.contains(&path) {
            continue;
        }
        let Some(t) = floe_file_time_ms(&path, channel) else {
            continue;
        };
        if now_ms - t < min_age_ms {
            report.young += 1;
            continue;
        }
        orphans.push(path);
    }
    report.deleted = fence
        .delete(table.file_io(), "orphan sweep", &orphans)
        .await
        .len();
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floe_names_carry_their_uuidv7_time_and_other_names_are_not_floes() {
        let id = Uuid::now_v7();
        let now = crate::time::now_ms();
        let near = |t: Option<i64>| t.is_some_and(|t| (t - now).abs() < 5_000);
        assert!(near(floe_file_time_ms(
            &format!("/wh/t/data/event_time_hour=1/chan-{id}-00003.parquet"),
            "chan"
        )));
        assert!(near(floe_file_time_ms(
            &format!("s3://b/t/metadata/{id}-m0.avro"),
            "chan"
        )));
        assert!(near(floe_file_time_ms(
            &format!("s3://b/t/metadata/{id}-r12.avro"),
            "chan"
        )));
        assert!(near(floe_file_time_ms(
            &format!("/wh/t/metadata/snap-123456789-0-{id}.avro"),
            "chan"
        )));
        // An upsert batch's deleted-keys file, a row-delta commit's delete files and manifests,
        // also when the channel is called `floe`.
        for channel in ["chan", "floe"] {
            for name in [
                format!("/wh/t/data/floe-keys/{channel}-{id}.keys"),
                format!("/wh/t/data/floe-{id}-deletes-00002.parquet"),
                format!("/wh/t/data/floe-{id}-dv.puffin"),
                format!("/wh/t/metadata/{id}-rd3.avro"),
            ] {
                assert!(
                    near(floe_file_time_ms(&name, channel)),
                    "{name} of {channel}"
                );
            }
        }
        let v4 = Uuid::new_v4();
        for other in [
            format!("/wh/t/data/chan-{v4}-00000.parquet"),
            format!("/wh/t/data/other-{id}-00000.parquet"),
            format!("/wh/t/data/00000-0-{v4}.parquet"),
            format!("/wh/t/metadata/00007-{id}.metadata.json"),
            format!("/wh/t/metadata/{id}-m0.avro.tmp"),
            format!("/wh/t/data/chan-{id}-00000.parquet.crc"),
            format!("/wh/t/data/floe-keys/chan-{v4}.keys"),
            format!("/wh/t/data/floe-keys/other-{id}.keys"),
            format!("/wh/t/data/floe-{v4}-dv.puffin"),
            format!("/wh/t/data/floe-{id}-deletes-.parquet"),
            format!("/wh/t/data/floe-{id}-dv.puffin.tmp"),
            format!("/wh/t/metadata/{id}-rdx.avro"),
        ] {
            assert_eq!(floe_file_time_ms(&other, "chan"), None, "{other}");
        }
    }
}
