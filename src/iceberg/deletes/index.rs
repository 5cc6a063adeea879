//! The key index of an upsert table: for each live key, the row that holds it (data file,
//! position), so that the committer turns a replaced or deleted key into a delete by position
//! (docs/design.md, "The key index").
//!
//! ```text
//!  KeyIndex (bound to snapshot S)
//!    files:  [0] data/a.parquet  [1] data/b.parquet  ...      file id -> path
//!    keys:   KeyHash -> (file id u32, position u32)            24 bytes a slot
//!  stage():  Staging (reads the index, writes nothing in it)
//!    add_file(c.parquet, hashes)  key k at row i: its old row (index or staged) -> delete,
//!                                 k -> (c, i)
//!    delete_keys(keys)            its row -> delete, k leaves
//!    finish() -> Staged { deletes by data file path, the changes }
//!  commit the row delta (deletes) -> snapshot S'   apply(staged, S')  (only after success)
//! ```
//!
//! The index describes exactly one snapshot; a table whose current snapshot is another (a
//! commit of another committer, a maintenance commit) gets a fresh index
//! ([`KeyIndex::build`]). Staged changes are applied only after the commit that carries them
//! succeeded: a conflict or a refused commit leaves the index as it was.
//!
//! Two live rows with one key (a table appended to before it became an upsert table): the
//! newest row wins — the higher data sequence number, then the later file path, then the later
//! position — and the older rows are kept in [`KeyIndex::duplicates`], deleted by the next
//! commit, so the table converges to one row per key.

use std::collections::{BTreeMap, HashMap};
use std::hash::{BuildHasherDefault, Hash, Hasher};

use futures::{StreamExt, TryStreamExt};
use iceberg::io::FileIO;
use iceberg::spec::DataFile;
use iceberg::{Error, ErrorKind};
use roaring::RoaringTreemap;

use super::base::RowDeltaBase;
use super::keys::KeyHash;
use super::read::{read_deletes, read_key_hashes};

/// Data files read at once while building an index.
const BUILD_CONCURRENCY: usize = 8;

/// A row of a data file the index knows: its file id and position.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Location {
    /// Index into the index's file table.
    pub file: u32,
    /// The row's position in the file (0-based).
    pub position: u32,
}

/// A key hash as two words: 8-byte aligned (a `u128` would make each slot 32 bytes, not 24).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Key {
    lo: u64,
    hi: u64,
}

impl From<KeyHash> for Key {
    fn from(k: KeyHash) -> Self {
        Key {
            lo: k as u64,
            hi: (k >> 64) as u64,
        }
    }
}

impl Hash for Key {
    fn hash<H: Hasher>(&self, state: &mut H) {
        // Already a uniform hash (XXH3-128): its low word is the table's hash.
        state.write_u64(self.lo);
    }
}

/// The hasher of [`Key`]: passes its low word through.
#[derive(Debug, Default, Clone, Copy)]
struct PassThrough(u64);

impl Hasher for PassThrough {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(*b);
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = v;
    }
}

type KeyMap<V> = HashMap<Key, V, BuildHasherDefault<PassThrough>>;

/// The key index of one snapshot of an upsert table (see the module docs).
#[derive(Debug, Clone, Default)]
pub struct KeyIndex {
    snapshot_id: Option<i64>,
    files: Vec<String>,
    keys: KeyMap<Location>,
    duplicates: Vec<Location>,
}

impl KeyIndex {
    /// An empty index of snapshot `snapshot_id`, with room for `capacity` keys.
    pub fn with_capacity(snapshot_id: Option<i64>, capacity: usize) -> Self {
        KeyIndex {
            snapshot_id,
            files: Vec::new(),
            keys: KeyMap::with_capacity_and_hasher(capacity, Default::default()),
            duplicates: Vec::new(),
        }
    }

    /// The index of `base`'s snapshot: the key columns (field ids `field_ids`) of every live
    /// data file, read back and hashed, less the rows its delete file deletes. Files are taken
    /// oldest first (data sequence number, then path), so a key's newest row wins.
    ///
    /// Errors: the storage's; `DataInvalid` when a data file lacks a key column, has more than
    /// 2³² rows, or the table has delete files the index cannot resolve (equality deletes, or
    /// position deletes not scoped to one data file: another engine wrote them).
    pub async fn build(base: &RowDeltaBase, field_ids: &[i32]) -> iceberg::Result<Self> {
        if base.has_equality_deletes() || base.has_unscoped_deletes() {
            return Err(Error::new(
                ErrorKind::DataInvalid,
                "the table has equality deletes or position deletes of several data files \
                 (another engine wrote them): floe cannot index its keys",
            ));
        }
        let mut files: Vec<(&String, i64, u64)> = base
            .data_files()
            .iter()
            .map(|(path, f)| (path, f.sequence_number, f.record_count))
            .collect();
        files.sort_by(|a, b| (a.1, a.0).cmp(&(b.1, b.0)));
        let rows: u64 = files.iter().map(|f| f.2).sum();
        let mut index = KeyIndex::with_capacity(base.snapshot_id(), rows as usize);
        // Owned inputs: the reads are 'static futures (a stream of futures borrowing the base
        // is not `Send` for every lifetime the committer's future needs).
        let reads: Vec<_> = files
            .iter()
            .map(|(path, _, _)| {
                let deletes: Vec<DataFile> = base
                    .deletes_of(path)
                    .into_iter()
                    .map(|e| e.data_file().clone())
                    .collect();
                read_file(
                    (*path).clone(),
                    deletes,
                    base.table().file_io().clone(),
                    field_ids.to_vec(),
                )
            })
            .collect();
        let mut read = futures::stream::iter(reads).buffered(BUILD_CONCURRENCY);
        while let Some((path, hashes, deleted)) = read.try_next().await? {
            index.insert_file(&path, &hashes, &deleted)?;
        }
        Ok(index)
    }

    /// Adds the data file at `path` whose rows have keys `hashes` (position = index), but for
    /// the `deleted` positions; a key already indexed moves to its row here and its older row
    /// becomes a duplicate (see the module docs).
    ///
    /// Errors: `DataInvalid` for a file of more than 2³² rows or a 2³²nd file.
    pub fn insert_file(
        &mut self,
        path: &str,
        hashes: &[KeyHash],
        deleted: &RoaringTreemap,
    ) -> iceberg::Result<()> {
        let file = new_file_id(self.files.len(), path, hashes.len())?;
        self.files.push(path.to_string());
        for (position, hash) in hashes.iter().enumerate() {
            if deleted.contains(position as u64) {
                continue;
            }
            let at = Location {
                file,
                position: position as u32,
            };
            if let Some(older) = self.keys.insert(Key::from(*hash), at) {
                self.duplicates.push(older);
            }
        }
        Ok(())
    }

    /// The snapshot the index describes (`None`: the table had none).
    pub fn snapshot_id(&self) -> Option<i64> {
        self.snapshot_id
    }

    /// Live keys.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// Whether no key is live.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// Data files in the file table (every file indexed since the last build).
    pub fn num_files(&self) -> usize {
        self.files.len()
    }

    /// Older rows of keys that have a newer live row (see the module docs): the next commit
    /// deletes them.
    pub fn duplicates(&self) -> usize {
        self.duplicates.len()
    }

    /// The row holding `key`: (data file path, position).
    pub fn get(&self, key: KeyHash) -> Option<(&str, u32)> {
        self.keys
            .get(&Key::from(key))
            .map(|l| (self.files[l.file as usize].as_str(), l.position))
    }

    /// Bytes the index holds, estimated: the hash table's slots (24 bytes and a control byte
    /// each, at hashbrown's capacity) and the file table.
    pub fn estimated_bytes(&self) -> usize {
        // hashbrown holds capacity × 8/7 buckets, a power of two.
        let slots = (self.keys.capacity() * 8 / 7).max(1).next_power_of_two();
        slots * (std::mem::size_of::<(Key, Location)>() + 1)
            + self.files.iter().map(|p| p.capacity() + 24).sum::<usize>()
    }

    /// Starts staging one commit's changes (the duplicates' deletes already in).
    pub fn stage(&self) -> Staging<'_> {
        let mut staging = Staging {
            index: self,
            new_files: Vec::new(),
            changes: KeyMap::default(),
            deletes: BTreeMap::new(),
        };
        for d in self.duplicates.clone() {
            staging.delete_at(Some(d));
        }
        staging
    }

    /// Applies the changes of a commit that succeeded and produced snapshot `snapshot_id` (its
    /// data files join the file table, its keys move or leave; the duplicates it deleted are
    /// gone).
    ///
    /// Errors: `DataInvalid` when the index changed since `staged` was staged (nothing applied;
    /// drop the index and build it again).
    pub fn apply(&mut self, staged: Staged, snapshot_id: Option<i64>) -> iceberg::Result<()> {
        if staged.first_file != self.files.len() || staged.base != self.snapshot_id {
            return Err(Error::new(
                ErrorKind::DataInvalid,
                "the key index changed since these changes were staged",
            ));
        }
        self.files.extend(staged.new_files);
        for (key, at) in staged.changes {
            match at {
                Some(at) => self.keys.insert(key, at),
                None => self.keys.remove(&key),
            };
        }
        self.duplicates.clear();
        self.snapshot_id = snapshot_id;
        Ok(())
    }
}

/// The key hashes of the data file at `path` and the positions its delete files delete.
async fn read_file(
    path: String,
    deletes: Vec<DataFile>,
    io: FileIO,
    field_ids: Vec<i32>,
) -> iceberg::Result<(String, Vec<KeyHash>, RoaringTreemap)> {
    let hashes = read_key_hashes(&io, &path, &field_ids).await?;
    let mut deleted = RoaringTreemap::new();
    for f in &deletes {
        deleted |= read_deletes(&io, f, &path).await?;
    }
    Ok((path, hashes, deleted))
}

/// A file id for the `n`th file of `rows` rows.
fn new_file_id(n: usize, path: &str, rows: usize) -> iceberg::Result<u32> {
    if rows > u32::MAX as usize || n >= u32::MAX as usize {
        return Err(Error::new(
            ErrorKind::DataInvalid,
            format!("data file {path} ({rows} rows, file {n}): past the key index's 2^32 limit"),
        ));
    }
    Ok(n as u32)
}

/// One commit's changes to a [`KeyIndex`], staged against it (see the module docs).
#[derive(Debug)]
pub struct Staging<'a> {
    index: &'a KeyIndex,
    new_files: Vec<String>,
    changes: KeyMap<Option<Location>>,
    deletes: BTreeMap<String, RoaringTreemap>,
}

impl Staging<'_> {
    /// The data file at `path`, added by this commit, whose rows have keys `hashes` (position =
    /// index): each key's previous row (in the index, or staged by this commit) is deleted and
    /// the key moves to its row here (a key twice in the file: the later row wins).
    ///
    /// Errors: `DataInvalid` as [`KeyIndex::insert_file`].
    pub fn add_file(&mut self, path: &str, hashes: &[KeyHash]) -> iceberg::Result<()> {
        let n = self.index.files.len() + self.new_files.len();
        let file = new_file_id(n, path, hashes.len())?;
        self.new_files.push(path.to_string());
        for (position, hash) in hashes.iter().enumerate() {
            let at = Location {
                file,
                position: position as u32,
            };
            let previous = self.changes.insert(Key::from(*hash), Some(at));
            let previous = match previous {
                Some(staged) => staged,
                None => self.index.keys.get(&Key::from(*hash)).copied(),
            };
            self.delete_at(previous);
        }
        Ok(())
    }

    /// Deletes the rows of `keys` (a key without a live row: nothing) and takes them out.
    pub fn delete_keys(&mut self, keys: &[KeyHash]) {
        for hash in keys {
            let key = Key::from(*hash);
            let previous = match self.changes.insert(key, None) {
                Some(staged) => staged,
                None => self.index.keys.get(&key).copied(),
            };
            self.delete_at(previous);
        }
    }

    fn delete_at(&mut self, at: Option<Location>) {
        let Some(at) = at else { return };
        let first_new = self.index.files.len();
        let path = match (at.file as usize).checked_sub(first_new) {
            Some(i) => &self.new_files[i],
            None => &self.index.files[at.file as usize],
        };
        self.deletes
            .entry(path.clone())
            .or_default()
            .insert(at.position.into());
    }

    /// The staged changes.
    pub fn finish(self) -> Staged {
        Staged {
            base: self.index.snapshot_id,
            first_file: self.index.files.len(),
            new_files: self.new_files,
            changes: self.changes,
            deletes: self.deletes,
        }
    }
}

/// One commit's staged changes ([`Staging::finish`]): the deletes it commits, and what
/// [`KeyIndex::apply`] changes once it succeeded.
#[derive(Debug)]
pub struct Staged {
    base: Option<i64>,
    first_file: usize,
    new_files: Vec<String>,
    changes: KeyMap<Option<Location>>,
    /// Positions to delete, by data file path.
    pub deletes: BTreeMap<String, RoaringTreemap>,
}

impl Staged {
    /// Rows deleted.
    pub fn num_deletes(&self) -> u64 {
        self.deletes.values().map(RoaringTreemap::len).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn positions(staged: &Staged, path: &str) -> Vec<u64> {
        staged
            .deletes
            .get(path)
            .map(|p| p.iter().collect())
            .unwrap_or_default()
    }

    #[test]
    fn an_older_row_of_a_key_is_a_duplicate_and_deleted_by_the_next_commit() {
        let mut index = KeyIndex::with_capacity(Some(1), 4);
        index
            .insert_file("a", &[1, 2, 3], &RoaringTreemap::new())
            .unwrap();
        // b: key 2 again (newer), key 3 at a deleted position (not live), key 4 twice.
        let deleted: RoaringTreemap = [1u64].into_iter().collect();
        index.insert_file("b", &[2, 3, 4, 4], &deleted).unwrap();
        assert_eq!(index.len(), 4);
        assert_eq!(index.get(2), Some(("b", 0)));
        assert_eq!(index.get(3), Some(("a", 2)));
        assert_eq!(index.get(4), Some(("b", 3)));
        assert_eq!(index.duplicates(), 2);
        let staged = index.stage().finish();
        assert_eq!(positions(&staged, "a"), [1]);
        assert_eq!(positions(&staged, "b"), [2]);
        index.apply(staged, Some(2)).unwrap();
        assert_eq!(index.duplicates(), 0);
        assert_eq!(index.snapshot_id(), Some(2));
    }

    #[test]
    fn staged_upserts_and_deletes_resolve_against_the_index_and_each_other() {
        let mut index = KeyIndex::with_capacity(Some(1), 4);
        index
            .insert_file("a", &[1, 2, 3], &RoaringTreemap::new())
            .unwrap();
        let mut staging = index.stage();
        // Batch 1: key 1 updated twice across two files, key 9 new, key 2 deleted, key 7
        // (never written) deleted.
        staging.add_file("n1", &[1, 9]).unwrap();
        staging.add_file("n2", &[1]).unwrap();
        staging.delete_keys(&[2, 7]);
        // Batch 2: key 9 deleted again after its insert, key 2 re-inserted.
        staging.delete_keys(&[9]);
        staging.add_file("n3", &[2]).unwrap();
        let staged = staging.finish();
        assert_eq!(positions(&staged, "a"), [0, 1]);
        assert_eq!(positions(&staged, "n1"), [0, 1]);
        assert_eq!(positions(&staged, "n2"), Vec::<u64>::new());
        assert_eq!(staged.num_deletes(), 4);
        // Nothing changed before apply.
        assert_eq!(index.get(1), Some(("a", 0)));
        index.apply(staged, Some(2)).unwrap();
        assert_eq!(index.get(1), Some(("n2", 0)));
        assert_eq!(index.get(2), Some(("n3", 0)));
        assert_eq!(index.get(3), Some(("a", 2)));
        assert_eq!(index.get(9), None);
        assert_eq!(index.get(7), None);
        assert_eq!(index.len(), 3);
    }

    #[test]
    fn changes_staged_on_another_state_are_refused() {
        let mut index = KeyIndex::with_capacity(Some(1), 1);
        let mut staging = index.stage();
        staging.add_file("n1", &[1]).unwrap();
        let stale = staging.finish();
        let mut staging = index.stage();
        staging.add_file("n2", &[2]).unwrap();
        let first = staging.finish();
        index.apply(first, Some(2)).unwrap();
        assert!(index.apply(stale, Some(3)).is_err());
        assert_eq!(index.get(1), None);
        assert_eq!(index.snapshot_id(), Some(2));
    }
}
