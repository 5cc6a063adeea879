//! Pure data types of the delivery protocol: shards, positions, checkpoint ranges and the
//! checkpoint algebra the committer applies (docs/design.md, "The exactly-once protocol", step 3).
//!
//! No I/O here. The invariant this module upholds: a batch is accepted only when it continues
//! exactly where the committed checkpoint of every shard it covers stops, so checkpoints never move
//! backwards and no position is delivered twice.
//!
//! ```text
//!   checkpoint(S) = 41          batch A: (41, 57]  -> accepted, checkpoint(S) = 57
//!                               batch B: (41, 50]  -> rejected (duplicate: starts before 57)
//!                               batch C: (60, 70]  -> rejected (gap: starts after 57)
//! ```

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Identifier of a shard: a Kafka partition number (`"0"`, `"1"`, …) or a Kinesis shard id
/// (`"shardId-000000000000"`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ShardId(pub String);

impl ShardId {
    /// The shard id of Kafka partition `partition`.
    pub fn kafka_partition(partition: i32) -> Self {
        ShardId(partition.to_string())
    }

    /// The Kafka partition number this shard id names.
    ///
    /// Errors: `None` when the id is not a non-negative decimal `i32`.
    pub fn as_kafka_partition(&self) -> Option<i32> {
        self.0.parse::<i32>().ok().filter(|p| *p >= 0)
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for ShardId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A Kinesis sequence number: a decimal string of up to 128 digits (56 in practice), compared as
/// a big integer — by digit count, then by digits — never as text and never squeezed into `u128`
/// (Kinesis API reference, `SequenceNumber`: pattern `0|([1-9]\d{0,128})`). A KPL aggregated
/// record's sub-sequence number extends it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SequenceNumber {
    digits: String,
    sub_sequence: Option<u64>,
}

impl SequenceNumber {
    /// Parses a sequence number, optionally followed by `.` and a KPL sub-sequence number.
    ///
    /// Errors: [`PositionError`] when the text is empty, not ASCII digits, longer than 128
    /// digits, or has leading zeros.
    pub fn try_new(text: &str) -> Result<Self, PositionError> {
        let (digits, sub) = match text.split_once('.') {
            Some((d, s)) => {
                let sub = s
                    .parse::<u64>()
                    .map_err(|_| PositionError(format!("bad sub-sequence number in {text:?}")))?;
                (d, Some(sub))
            }
            None => (text, None),
        };
        let valid = !digits.is_empty()
            && digits.len() <= 129
            && digits.bytes().all(|b| b.is_ascii_digit())
            && (digits == "0" || !digits.starts_with('0'));
        if !valid {
            return Err(PositionError(format!("not a sequence number: {text:?}")));
        }
        Ok(SequenceNumber {
            digits: digits.to_string(),
            sub_sequence: sub,
        })
    }

    /// The same record's position with a KPL sub-sequence number.
    pub fn with_sub_sequence(mut self, sub_sequence: u64) -> Self {
        self.sub_sequence = Some(sub_sequence);
        self
    }

    /// The decimal digits of the sequence number (no sub-sequence).
    pub fn digits(&self) -> &str {
        &self.digits
    }

    /// The KPL sub-sequence number, if the record was de-aggregated.
    pub fn sub_sequence(&self) -> Option<u64> {
        self.sub_sequence
    }
}

impl Ord for SequenceNumber {
    fn cmp(&self, other: &Self) -> Ordering {
        self.digits
            .len()
            .cmp(&other.digits.len())
            .then_with(|| self.digits.cmp(&other.digits))
            // A record without sub-sequence number orders before its sub-records.
            .then_with(|| self.sub_sequence.cmp(&other.sub_sequence))
    }
}

impl PartialOrd for SequenceNumber {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl fmt::Display for SequenceNumber {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.sub_sequence {
            Some(sub) => write!(f, "{}.{}", self.digits, sub),
            None => f.write_str(&self.digits),
        }
    }
}

/// Error parsing a [`Position`] or [`SequenceNumber`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct PositionError(String);

/// The position of a record in its shard: a Kafka offset or a Kinesis sequence number, or the
/// end of a closed Kinesis shard.
///
/// Serialized in `floe.checkpoints` as a JSON integer (offset), a JSON string of digits with an
/// optional `.sub` suffix (sequence number), or the string `"SHARD_END"`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Position {
    /// A Kafka offset (`i64`, ≥ 0).
    Offset(i64),
    /// A Kinesis sequence number.
    Sequence(SequenceNumber),
    /// A closed Kinesis shard whose every record is delivered.
    ShardEnd,
}

impl Position {
    /// The Kafka offset to read next after this position (`offset + 1`).
    ///
    /// Errors: `None` for a Kinesis position.
    pub fn next_kafka_offset(&self) -> Option<i64> {
        match self {
            Position::Offset(o) => Some(o + 1),
            _ => None,
        }
    }
}

impl Ord for Position {
    fn cmp(&self, other: &Self) -> Ordering {
        use Position::*;
        match (self, other) {
            (Offset(a), Offset(b)) => a.cmp(b),
            (Sequence(a), Sequence(b)) => a.cmp(b),
            (ShardEnd, ShardEnd) => Ordering::Equal,
            (ShardEnd, _) => Ordering::Greater,
            (_, ShardEnd) => Ordering::Less,
            // Offsets and sequence numbers never share a shard; order them by kind so that
            // `Ord` stays total.
            (Offset(_), Sequence(_)) => Ordering::Less,
            (Sequence(_), Offset(_)) => Ordering::Greater,
        }
    }
}

impl PartialOrd for Position {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl fmt::Display for Position {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Position::Offset(o) => write!(f, "{o}"),
            Position::Sequence(s) => write!(f, "{s}"),
            Position::ShardEnd => f.write_str("SHARD_END"),
        }
    }
}

impl FromStr for Position {
    type Err = PositionError;

    /// Parses the text form of `Display`: `SHARD_END`, or digits (a sequence number when longer
    /// than 19 digits or with a `.sub` suffix, else an offset).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s == "SHARD_END" {
            return Ok(Position::ShardEnd);
        }
        if !s.contains('.') && s.len() <= 18 {
            if let Ok(o) = s.parse::<i64>() {
                if o >= 0 {
                    return Ok(Position::Offset(o));
                }
            }
        }
        SequenceNumber::try_new(s).map(Position::Sequence)
    }
}

impl Serialize for Position {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Position::Offset(o) => serializer.serialize_i64(*o),
            other => serializer.serialize_str(&other.to_string()),
        }
    }
}

impl<'de> Deserialize<'de> for Position {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Int(i64),
            Text(String),
        }
        match Raw::deserialize(deserializer)? {
            Raw::Int(o) if o >= 0 => Ok(Position::Offset(o)),
            Raw::Int(o) => Err(serde::de::Error::custom(format!("negative offset {o}"))),
            Raw::Text(t) if t == "SHARD_END" => Ok(Position::ShardEnd),
            Raw::Text(t) => SequenceNumber::try_new(&t)
                .map(Position::Sequence)
                .map_err(serde::de::Error::custom),
        }
    }
}

/// The range of one shard covered by a batch: positions in `(after_exclusive, last_inclusive]`.
///
/// `after_exclusive = None` means "from the shard's start position": the channel's initial
/// position for a shard with no committed checkpoint yet.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckpointRange {
    /// The committed checkpoint this batch continues from (exclusive), `None` for a shard's
    /// first batch.
    pub after_exclusive: Option<Position>,
    /// The last position in the batch (inclusive); the shard's checkpoint once committed.
    pub last_inclusive: Position,
}

impl fmt::Display for CheckpointRange {
    /// `(after,last]`, with an empty `after` for a shard's first batch: `(41,57]`, `(,57]`,
    /// `(57,SHARD_END]` (the form of delivery logs and of the `floe.ranges` snapshot summary).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("(")?;
        if let Some(after) = &self.after_exclusive {
            write!(f, "{after}")?;
        }
        write!(f, ",{}]", self.last_inclusive)
    }
}

/// How a batch's range for one shard relates to the committed checkpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RangeVerdict {
    /// The range continues exactly at the checkpoint: accept.
    Contiguous,
    /// The range ends at or before the checkpoint: already delivered. Permanent, since
    /// checkpoints never move backwards.
    Duplicate,
    /// The range starts before the checkpoint and ends after it: part of it is already
    /// delivered. Permanent too: it can never become contiguous.
    Overlapping,
    /// The range starts after the checkpoint: a gap that another batch may still fill.
    Gap,
}

impl RangeVerdict {
    /// Whether the range can never be accepted, whatever is committed later.
    pub fn is_permanent_rejection(&self) -> bool {
        matches!(self, RangeVerdict::Duplicate | RangeVerdict::Overlapping)
    }
}

/// Committed checkpoints of a channel: shard → last delivered position.
///
/// Stored in the Iceberg table property `floe.checkpoints` as a JSON object (the authoritative
/// copy, written in the same commit as the data files).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Checkpoints(pub BTreeMap<ShardId, Position>);

impl Checkpoints {
    /// The committed checkpoint of `shard`, if any.
    pub fn get(&self, shard: &ShardId) -> Option<&Position> {
        self.0.get(shard)
    }

    /// Classifies `range` of `shard` against the committed checkpoint.
    pub fn verdict(&self, shard: &ShardId, range: &CheckpointRange) -> RangeVerdict {
        let committed = self.0.get(shard);
        if range.after_exclusive == Some(Position::ShardEnd) {
            // Nothing follows the end of a closed shard.
            return RangeVerdict::Duplicate;
        }
        if range.after_exclusive.as_ref() == committed {
            return RangeVerdict::Contiguous;
        }
        match (committed, &range.after_exclusive) {
            (Some(c), _) if range.last_inclusive <= *c => RangeVerdict::Duplicate,
            // A shard's first range (from its start position) when something is committed.
            (Some(_), None) => RangeVerdict::Overlapping,
            (Some(c), Some(after)) if after < c => RangeVerdict::Overlapping,
            _ => RangeVerdict::Gap,
        }
    }

    /// Advances `shard` to `range.last_inclusive`.
    ///
    /// Panics in debug builds if the range is not contiguous (callers check [`Self::verdict`]).
    pub fn advance(&mut self, shard: &ShardId, range: &CheckpointRange) {
        debug_assert_eq!(self.verdict(shard, range), RangeVerdict::Contiguous);
        self.0.insert(shard.clone(), range.last_inclusive.clone());
    }

    /// Parses the `floe.checkpoints` table property.
    ///
    /// Errors: a [`serde_json::Error`] when the property is not a JSON object of positions.
    pub fn from_property(text: &str) -> Result<Self, serde_json::Error> {
        serde_json::from_str(text)
    }

    /// The `floe.checkpoints` table property value.
    pub fn to_property(&self) -> String {
        serde_json::to_string(self).expect("checkpoints serialize")
    }
}

/// Which shards a Kinesis split or merge made out of which: parent → children, from the parents
/// each child names (ListShards' `ParentShardId` and `AdjacentParentShardId`, as the shard lease
/// rows keep them), and which shards' leases a worker holds. Kafka partitions have no parents.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Lineage {
    children: BTreeMap<ShardId, BTreeSet<ShardId>>,
    held: BTreeSet<ShardId>,
}

impl Lineage {
    /// The lineage of `(child, parents)` pairs.
    pub fn from_parents<'a>(pairs: impl IntoIterator<Item = (&'a ShardId, &'a [ShardId])>) -> Self {
        let mut lineage = Lineage::default();
        for (child, parents) in pairs {
            for parent in parents {
                lineage
                    .children
                    .entry(parent.clone())
                    .or_default()
                    .insert(child.clone());
            }
        }
        lineage
    }

    /// The same lineage, with the shards whose lease a worker holds: their `SHARD_END` is never
    /// pruned, since the holder starts again from the table's checkpoint after a rewind (a
    /// rejected batch, a lost lease), and from no checkpoint it would read the shard again. A
    /// finished shard's lease is released when its holder stops and is never assigned again.
    pub fn with_held(mut self, held: impl IntoIterator<Item = ShardId>) -> Self {
        self.held.extend(held);
        self
    }

    /// The shards that name `shard` as a parent.
    pub fn children(&self, shard: &ShardId) -> impl Iterator<Item = &ShardId> {
        self.children.get(shard).into_iter().flatten()
    }
}

/// Pruning of ended shards (docs/design.md, protocol step 8): a long-lived, resharding stream
/// would otherwise keep a `SHARD_END` entry in `floe.checkpoints` for every shard it ever had.
///
/// ```text
///   before: {P: SHARD_END, C1: 4959…, C2: SHARD_END, G: 4961…}    P -> C1, C2;  C2 -> G
///   pruned: {C1: 4959…, G: 4961…}       every child of P and of C2 has a checkpoint
///   ended:  P (C1 has one), C2 (G has one): a shard without a checkpoint whose child has one
///           is ended, since a child is only ever read once all its parents ended
/// ```
impl Checkpoints {
    /// The shards without a checkpoint that have ended all the same: a child of theirs
    /// ([`Lineage`]) has a checkpoint or has ended in turn (their `SHARD_END` was pruned).
    pub fn pruned_ended(&self, lineage: &Lineage) -> BTreeSet<ShardId> {
        let mut ended = BTreeSet::new();
        // Up the lineage, one generation per pass: a fixpoint in at most as many passes as
        // there are generations.
        loop {
            let found: Vec<ShardId> = lineage
                .children
                .iter()
                .filter(|(parent, children)| {
                    !self.0.contains_key(*parent)
                        && !ended.contains(*parent)
                        && children
                            .iter()
                            .any(|c| self.0.contains_key(c) || ended.contains(c))
                })
                .map(|(parent, _)| parent.clone())
                .collect();
            if found.is_empty() {
                return ended;
            }
            ended.extend(found);
        }
    }

    /// These checkpoints with `SHARD_END` for every shard whose `SHARD_END` was pruned
    /// ([`Checkpoints::pruned_ended`]): the view to judge ranges against, so that a range of a
    /// pruned shard is a duplicate, never a shard's first range.
    pub fn with_pruned_ended(&self, lineage: &Lineage) -> Checkpoints {
        let mut full = self.clone();
        for shard in self.pruned_ended(lineage) {
            full.0.insert(shard, Position::ShardEnd);
        }
        full
    }

    /// Whether `shard` has ended: its checkpoint is `SHARD_END`, or it was pruned.
    pub fn is_ended(&self, shard: &ShardId, lineage: &Lineage) -> bool {
        match self.0.get(shard) {
            Some(p) => *p == Position::ShardEnd,
            None => self.pruned_ended(lineage).contains(shard),
        }
    }

    /// Drops every `SHARD_END` entry whose shard has children and each of them a checkpoint
    /// (a position, `SHARD_END`, or pruned in turn), unless a worker holds the shard's lease.
    /// What stays: every live shard's position, and the `SHARD_END` of a parent with a child
    /// not yet committed (or still leased). A dropped shard stays ended for
    /// [`Checkpoints::is_ended`] as long as the lineage names it.
    pub fn prune_ended(&mut self, lineage: &Lineage) {
        let full = self.with_pruned_ended(lineage);
        self.0.retain(|shard, position| {
            *position != Position::ShardEnd || lineage.held.contains(shard) || {
                let mut children = lineage.children(shard).peekable();
                children.peek().is_none() || !children.all(|c| full.0.contains_key(c))
            }
        });
    }
}

/// One shard's part of a pending batch, with the fencing token it was read under.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardRange {
    /// The shard.
    pub shard: ShardId,
    /// The positions `(after_exclusive, last_inclusive]` the batch covers.
    pub range: CheckpointRange,
    /// The shard lease's counter (fencing token) when the worker read the range.
    pub lease_counter: u64,
}

/// A batch handed from a worker to the committer through the lease store: what it wrote (data
/// files and staged DLQ entries, or staged raw objects) and the ranges they cover
/// (docs/design.md, protocol step 2).
///
/// Stored as JSON by every lease store. Batches written before [`BatchFiles`] existed (floe
/// 0.1.0, with `data_files`/`dlq_staged` at the top level) are still read: see
/// [`BatchFiles::from_legacy`]. floe 0.1.0 cannot read today's form (docs/operations.md,
/// "Upgrading").
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "PendingBatchWire")]
pub struct PendingBatch {
    /// Channel name.
    pub channel: String,
    /// Batch id, a UUIDv7 (time-ordered); part of every file name the batch wrote.
    pub batch_id: uuid::Uuid,
    /// Worker that wrote the batch.
    pub worker_id: String,
    /// Covered range per shard.
    pub shards: Vec<ShardRange>,
    /// What the batch wrote, by destination kind.
    pub files: BatchFiles,
    /// Rows in the data files (or records in the raw objects).
    pub num_rows: u64,
    /// Records sent to the DLQ.
    pub num_dead_lettered: u64,
    /// Records sent to the DLQ, by error code (`DESERIALIZATION_ERROR`, …).
    #[serde(default)]
    pub dead_lettered_by_code: BTreeMap<String, u64>,
    /// Bytes of the data files (or of the raw objects as stored).
    pub data_bytes: u64,
    /// When the worker read the batch's oldest record, milliseconds since the Unix epoch
    /// (freshness is measured from it).
    pub oldest_read_at_ms: i64,
}

/// What a pending batch wrote, tagged by destination kind (`"kind": "iceberg" | "raw"`), so a
/// raw batch can never be read as an Iceberg one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum BatchFiles {
    /// An Iceberg channel's batch.
    Iceberg {
        /// Data files already under the table location, as Iceberg's JSON serialization
        /// (`iceberg::spec::serialize_data_file_to_json`), opaque to the lease store.
        data_files: Vec<String>,
        /// Path of the staged DLQ object (JSON Lines), published only when the batch is
        /// committed.
        dlq_staged: Option<String>,
        /// An upsert table's batch: path of the staged key file
        /// ([`crate::iceberg::deletes::keys`]) of the keys the batch deletes (Debezium `d`
        /// events, upsert tombstones), under the table location and never referenced by the
        /// table; `None` when it deletes none, and always for an append table.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        deleted_keys: Option<String>,
    },
    /// A raw S3 channel's batch.
    Raw {
        /// The staged objects, published under their keys once the batch is committed.
        objects: Vec<RawObject>,
    },
}

impl BatchFiles {
    /// Files (data files or objects) the batch wrote.
    pub fn len(&self) -> usize {
        match self {
            BatchFiles::Iceberg { data_files, .. } => data_files.len(),
            BatchFiles::Raw { objects } => objects.len(),
        }
    }

    /// Whether the batch wrote no file (a batch of DLQ entries only, or of `SHARD_END` only).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The data files of an Iceberg batch; `None` for a raw batch.
    pub fn iceberg_data_files(&self) -> Option<&[String]> {
        match self {
            BatchFiles::Iceberg { data_files, .. } => Some(data_files),
            BatchFiles::Raw { .. } => None,
        }
    }

    /// The destination kind, as the tag names it: `iceberg` or `raw`.
    pub fn kind(&self) -> &'static str {
        match self {
            BatchFiles::Iceberg { .. } => "iceberg",
            BatchFiles::Raw { .. } => "raw",
        }
    }

    /// The payload of a batch written before the tag existed: `data_files` held Iceberg data
    /// files for an Iceberg channel and [`RawObject`] JSON for a raw one (and `dlq_staged` was
    /// always `None` there). A raw batch holds at least one object (a raw channel has no DLQ, so
    /// every batch with records has an object), and every entry of it parses as a [`RawObject`];
    /// an Iceberg data file never does (it has no `staged_key`).
    pub fn from_legacy(data_files: Vec<String>, dlq_staged: Option<String>) -> Self {
        if dlq_staged.is_none() && !data_files.is_empty() {
            let objects: Result<Vec<RawObject>, _> =
                data_files.iter().map(|s| serde_json::from_str(s)).collect();
            if let Ok(objects) = objects {
                return BatchFiles::Raw { objects };
            }
        }
        BatchFiles::Iceberg {
            data_files,
            dlq_staged,
            deleted_keys: None,
        }
    }
}

/// One object of a raw batch as handed off: where it is staged and the key it is published
/// under.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RawObject {
    /// Key of the staged object (`_floe_staging/<channel>/<batch id>/<n>`).
    pub staged_key: String,
    /// Key the object is published under (rendered from the key template).
    pub key: String,
    /// Shard of its records.
    pub shard: ShardId,
    /// Records in the object.
    pub records: u64,
    /// Size of the object as stored (compressed), bytes.
    pub bytes: u64,
}

/// A pending batch as stored: today's form (`files`) or the form before it (`data_files`,
/// `dlq_staged`).
#[derive(Deserialize)]
struct PendingBatchWire {
    channel: String,
    batch_id: uuid::Uuid,
    worker_id: String,
    shards: Vec<ShardRange>,
    #[serde(default)]
    files: Option<BatchFiles>,
    #[serde(default)]
    data_files: Vec<String>,
    #[serde(default)]
    dlq_staged: Option<String>,
    num_rows: u64,
    num_dead_lettered: u64,
    #[serde(default)]
    dead_lettered_by_code: BTreeMap<String, u64>,
    data_bytes: u64,
    oldest_read_at_ms: i64,
}

impl From<PendingBatchWire> for PendingBatch {
    fn from(w: PendingBatchWire) -> Self {
        PendingBatch {
            channel: w.channel,
            batch_id: w.batch_id,
            worker_id: w.worker_id,
            shards: w.shards,
            files: w
                .files
                .unwrap_or_else(|| BatchFiles::from_legacy(w.data_files, w.dlq_staged)),
            num_rows: w.num_rows,
            num_dead_lettered: w.num_dead_lettered,
            dead_lettered_by_code: w.dead_lettered_by_code,
            data_bytes: w.data_bytes,
            oldest_read_at_ms: w.oldest_read_at_ms,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Dead-letter reasons

/// Why a record goes to the dead-letter queue (docs/schema-mapping.md "DLQ error codes"). Closed and bounded: used
/// both in the DLQ entry and as the `code` metric label.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DlqCode {
    /// Not JSON: syntax, NaN/Infinity, invalid UTF-8, lone surrogates, duplicate keys, nesting beyond
    /// 128 levels; GSR bytes on a `json` channel; a GSR payload that does not inflate.
    DeserializationError,
    /// Plain JSON on a `gsr_json` channel, a bad GSR header, an unknown schema version.
    InvalidSchema,
    /// A known GSR schema version that is not the channel's (no schema evolution).
    SchemaMismatch,
    /// A required key is absent, or `null` where the type does not admit null.
    MissingRequiredField,
    /// The partition field is absent or null.
    MissingPartitionValue,
    /// Wrong JSON type (no coercion), or a string not in its declared format.
    TypeMismatch,
    /// Right type, but not allowed by the schema or not representable in the column.
    ValueOutOfRange,
    /// Larger than the maximum record size (after GSR decompression).
    RecordTooLarge,
    /// `table = "{route}"` with `unroutable = "dlq"`: the route field is missing, `null`, of
    /// another type than string, integer or boolean, or its value matches no route.
    Unroutable,
    /// `record.envelope` is not `"none"` and the record is not a change event of it: no `op`,
    /// an unknown `op`, no `after` row for `c`/`r`/`u`, no `before` key for `d`; an `"upsert"`
    /// tombstone without a usable message key.
    InvalidEnvelope,
}

impl DlqCode {
    /// Every code, in table order.
    pub const ALL: [DlqCode; 10] = [
        DlqCode::DeserializationError,
        DlqCode::InvalidSchema,
        DlqCode::SchemaMismatch,
        DlqCode::MissingRequiredField,
        DlqCode::MissingPartitionValue,
        DlqCode::TypeMismatch,
        DlqCode::ValueOutOfRange,
        DlqCode::RecordTooLarge,
        DlqCode::Unroutable,
        DlqCode::InvalidEnvelope,
    ];

    /// The code as written in DLQ entries and metric labels, e.g. `"DESERIALIZATION_ERROR"`.
    pub fn as_str(&self) -> &'static str {
        match self {
            DlqCode::DeserializationError => "DESERIALIZATION_ERROR",
            DlqCode::InvalidSchema => "INVALID_SCHEMA",
            DlqCode::SchemaMismatch => "SCHEMA_MISMATCH",
            DlqCode::MissingRequiredField => "MISSING_REQUIRED_FIELD",
            DlqCode::MissingPartitionValue => "MISSING_PARTITION_VALUE",
            DlqCode::TypeMismatch => "TYPE_MISMATCH",
            DlqCode::ValueOutOfRange => "VALUE_OUT_OF_RANGE",
            DlqCode::RecordTooLarge => "RECORD_TOO_LARGE",
            DlqCode::Unroutable => "UNROUTABLE",
            DlqCode::InvalidEnvelope => "INVALID_ENVELOPE",
        }
    }
}

impl std::fmt::Display for DlqCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why one record was not converted. Never holds payload bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DlqReason {
    /// The code.
    pub code: DlqCode,
    /// JSON pointer (RFC 6901) of the offending value in the record, `""` for the record itself.
    pub field: String,
    /// Human-readable, lowercase explanation.
    pub message: String,
}

impl DlqReason {
    /// A reason about the whole record.
    pub fn record(code: DlqCode, message: impl Into<String>) -> Self {
        DlqReason {
            code,
            field: String::new(),
            message: message.into(),
        }
    }
}

impl std::fmt::Display for DlqReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} at {:?}: {}", self.code, self.field, self.message)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn seq(s: &str) -> Position {
        Position::Sequence(SequenceNumber::try_new(s).unwrap())
    }

    #[test]
    fn sequence_numbers_compare_as_big_integers_not_text() {
        assert!(seq("9") < seq("10"));
        let a = "49590338271490256608559692538361571095921575989136588898";
        let b = "49590338271490256608559692540925702759324208523137515618";
        assert!(seq(a) < seq(b));
        // 129 digits is beyond u128 and still ordered.
        let big = format!("1{}", "0".repeat(128));
        let bigger = format!("2{}", "0".repeat(128));
        assert!(seq(&big) < seq(&bigger));
        assert!(seq(b) < seq(&big));
    }

    #[test]
    fn sub_sequence_orders_after_its_parent_record() {
        assert!(seq("100") < seq("100.0"));
        assert!(seq("100.0") < seq("100.1"));
        assert!(seq("100.9") < seq("101"));
    }

    #[test]
    fn sequence_number_refuses_leading_zeros_and_non_digits() {
        assert!(SequenceNumber::try_new("007").is_err());
        assert!(SequenceNumber::try_new("").is_err());
        assert!(SequenceNumber::try_new("12a").is_err());
        assert!(SequenceNumber::try_new(&"1".repeat(130)).is_err());
        assert!(SequenceNumber::try_new("0").is_ok());
    }

    #[test]
    fn shard_end_orders_after_every_position() {
        assert!(seq("999999999999") < Position::ShardEnd);
        assert!(Position::Offset(i64::MAX) < Position::ShardEnd);
    }

    #[test]
    fn checkpoints_round_trip_through_the_table_property() {
        let mut cp = Checkpoints::default();
        cp.0.insert(ShardId::kafka_partition(0), Position::Offset(41));
        cp.0.insert(ShardId("shardId-000000000001".into()), seq("4959.3"));
        cp.0.insert(ShardId("shardId-000000000002".into()), Position::ShardEnd);
        let text = cp.to_property();
        assert_eq!(
            text,
            r#"{"0":41,"shardId-000000000001":"4959.3","shardId-000000000002":"SHARD_END"}"#
        );
        assert_eq!(Checkpoints::from_property(&text).unwrap(), cp);
    }

    #[test]
    fn verdict_accepts_only_contiguous_ranges() {
        let s = ShardId::kafka_partition(3);
        let mut cp = Checkpoints::default();
        let first = CheckpointRange {
            after_exclusive: None,
            last_inclusive: Position::Offset(9),
        };
        assert_eq!(cp.verdict(&s, &first), RangeVerdict::Contiguous);
        cp.advance(&s, &first);
        assert_eq!(cp.verdict(&s, &first), RangeVerdict::Duplicate);
        let next = CheckpointRange {
            after_exclusive: Some(Position::Offset(9)),
            last_inclusive: Position::Offset(20),
        };
        let dup = CheckpointRange {
            after_exclusive: Some(Position::Offset(3)),
            last_inclusive: Position::Offset(9),
        };
        let overlap = CheckpointRange {
            after_exclusive: Some(Position::Offset(5)),
            last_inclusive: Position::Offset(12),
        };
        let gap = CheckpointRange {
            after_exclusive: Some(Position::Offset(10)),
            last_inclusive: Position::Offset(12),
        };
        assert_eq!(cp.verdict(&s, &dup), RangeVerdict::Duplicate);
        assert_eq!(cp.verdict(&s, &overlap), RangeVerdict::Overlapping);
        assert_eq!(cp.verdict(&s, &gap), RangeVerdict::Gap);
        let restart_from_scratch = CheckpointRange {
            after_exclusive: None,
            last_inclusive: Position::Offset(15),
        };
        assert_eq!(
            cp.verdict(&s, &restart_from_scratch),
            RangeVerdict::Overlapping
        );
        assert!(RangeVerdict::Overlapping.is_permanent_rejection());
        assert!(!RangeVerdict::Gap.is_permanent_rejection());
        assert_eq!(cp.verdict(&s, &next), RangeVerdict::Contiguous);
    }

    #[test]
    fn shard_end_closes_a_shard_for_good() {
        let s = ShardId("shardId-000000000000".into());
        let mut cp = Checkpoints::default();
        cp.0.insert(s.clone(), seq("4959"));
        let end = CheckpointRange {
            after_exclusive: Some(seq("4959")),
            last_inclusive: Position::ShardEnd,
        };
        assert_eq!(cp.verdict(&s, &end), RangeVerdict::Contiguous);
        cp.advance(&s, &end);
        assert_eq!(cp.verdict(&s, &end), RangeVerdict::Duplicate);
        let after_end = CheckpointRange {
            after_exclusive: Some(Position::ShardEnd),
            last_inclusive: Position::ShardEnd,
        };
        assert_eq!(cp.verdict(&s, &after_end), RangeVerdict::Duplicate);
        let empty_shard = CheckpointRange {
            after_exclusive: None,
            last_inclusive: Position::ShardEnd,
        };
        assert_eq!(
            Checkpoints::default().verdict(&s, &empty_shard),
            RangeVerdict::Contiguous,
            "a shard never checkpointed may end with no record"
        );
    }

    /// One random resharding history, replayed step by step (see the proptest below): the
    /// unpruned checkpoints (`truth`), the table's (pruned at every commit), the lineage and
    /// the held leases (now, and at the last commit: a release prunes nothing by itself).
    struct History {
        parents: Vec<Vec<usize>>,
        open: Vec<usize>,
        held: BTreeSet<usize>,
        held_at_commit: BTreeSet<usize>,
        truth: Checkpoints,
        table: Checkpoints,
        next_sequence: u64,
    }

    fn sid(i: usize) -> ShardId {
        ShardId(format!("shardId-{i:012}"))
    }

    impl History {
        fn lineage(&self) -> Lineage {
            let ids: Vec<(ShardId, Vec<ShardId>)> = self
                .parents
                .iter()
                .enumerate()
                .map(|(c, ps)| (sid(c), ps.iter().map(|p| sid(*p)).collect()))
                .collect();
            Lineage::from_parents(ids.iter().map(|(c, ps)| (c, ps.as_slice())))
                .with_held(self.held.iter().map(|i| sid(*i)))
        }

        fn startable(&self, i: usize) -> bool {
            self.parents[i]
                .iter()
                .all(|p| self.truth.get(&sid(*p)) == Some(&Position::ShardEnd))
        }

        /// One commit of `shard` to `position`, as the committer applies it: judged against
        /// the table's view with pruned shards restored, then pruned.
        fn commit(&mut self, i: usize, position: Position) {
            let lineage = self.lineage();
            let range = CheckpointRange {
                after_exclusive: self.truth.get(&sid(i)).cloned(),
                last_inclusive: position,
            };
            let mut view = self.table.with_pruned_ended(&lineage);
            assert_eq!(view.verdict(&sid(i), &range), RangeVerdict::Contiguous);
            // A first range of an ended shard (read again from its start) is a duplicate.
            for ended in self
                .truth
                .0
                .iter()
                .filter(|(_, p)| **p == Position::ShardEnd)
            {
                let again = CheckpointRange {
                    after_exclusive: None,
                    last_inclusive: Position::ShardEnd,
                };
                assert_eq!(view.verdict(ended.0, &again), RangeVerdict::Duplicate);
            }
            view.advance(&sid(i), &range);
            self.truth.advance(&sid(i), &range);
            let pruned_before = self.table.pruned_ended(&lineage);
            view.prune_ended(&lineage);
            view.0.retain(|s, _| !pruned_before.contains(s));
            self.table = view;
            self.held_at_commit = self.held.clone();
        }

        fn step(&mut self, op: u8, a: usize, b: usize) {
            match op % 6 {
                0 if !self.open.is_empty() => {
                    let p = self.open.remove(a % self.open.len());
                    for _ in 0..2 {
                        self.parents.push(vec![p]);
                        self.open.push(self.parents.len() - 1);
                    }
                }
                1 if self.open.len() >= 2 => {
                    let p = self.open.remove(a % self.open.len());
                    let q = self.open.remove(b % self.open.len());
                    self.parents.push(vec![p, q]);
                    self.open.push(self.parents.len() - 1);
                }
                2..=4 => {
                    let i = a % self.parents.len();
                    if !self.startable(i) || self.truth.get(&sid(i)) == Some(&Position::ShardEnd) {
                        return;
                    }
                    self.held.insert(i);
                    let closed = !self.open.contains(&i);
                    let position = if closed && b.is_multiple_of(2) {
                        Position::ShardEnd
                    } else {
                        self.next_sequence += 1;
                        seq(&format!("{}", 49_000_000 + self.next_sequence))
                    };
                    self.commit(i, position);
                }
                5 => {
                    // The holder of a finished shard stops: its lease is released for good.
                    let finished: Vec<usize> = self
                        .held
                        .iter()
                        .copied()
                        .filter(|i| self.truth.get(&sid(*i)) == Some(&Position::ShardEnd))
                        .collect();
                    if !finished.is_empty() {
                        self.held.remove(&finished[a % finished.len()]);
                    }
                }
                _ => {}
            }
        }
    }

    proptest! {
        /// SHARD_END pruning keeps only live shards and their unfinished parents (issue 33): at
        /// every commit of a random history of splits, merges, reads and released leases, the
        /// table holds exactly every position, every `SHARD_END` of a shard still leased or
        /// with a child not yet started, and nothing else; pruned shards still read as ended
        /// (their first range again is a duplicate), and no shard never read does.
        #[test]
        fn shard_end_pruning_keeps_only_live_shards_and_their_unfinished_parents(
            steps in proptest::collection::vec((0u8..6, 0usize..64, 0usize..64), 0..80)
        ) {
            let mut h = History {
                parents: vec![vec![], vec![]],
                open: vec![0, 1],
                held: BTreeSet::new(),
                held_at_commit: BTreeSet::new(),
                truth: Checkpoints::default(),
                table: Checkpoints::default(),
                next_sequence: 0,
            };
            for (op, a, b) in steps {
                h.step(op, a, b);
                let lineage = h.lineage();
                let expected: BTreeMap<ShardId, Position> = h
                    .truth
                    .0
                    .iter()
                    .filter(|(s, p)| {
                        let mut children = lineage.children(s).peekable();
                        **p != Position::ShardEnd
                            || h.held_at_commit.contains(&s.0[8..].parse::<usize>().unwrap())
                            || children.peek().is_none()
                            || !children.all(|c| h.truth.get(c).is_some())
                    })
                    .map(|(s, p)| (s.clone(), p.clone()))
                    .collect();
                prop_assert_eq!(&h.table.0, &expected);
                for i in 0..h.parents.len() {
                    prop_assert_eq!(
                        h.table.is_ended(&sid(i), &lineage),
                        h.truth.get(&sid(i)) == Some(&Position::ShardEnd),
                        "shard {} in {:?}", i, h.table
                    );
                }
                prop_assert_eq!(h.table.with_pruned_ended(&lineage), h.truth.clone());
            }
        }
    }

    proptest! {
        /// Applying any sequence of candidate batches, accepting only contiguous ones, delivers
        /// every offset at most once and never moves the checkpoint backwards.
        #[test]
        fn accepted_ranges_never_overlap_and_checkpoints_only_advance(
            cuts in proptest::collection::vec((0i64..50, 1i64..10), 1..60)
        ) {
            let s = ShardId::kafka_partition(0);
            let mut cp = Checkpoints::default();
            let mut delivered = vec![0u32; 64];
            let mut last: Option<i64> = None;
            for (start, len) in cuts {
                let after = if start == 0 { None } else { Some(Position::Offset(start - 1)) };
                let range = CheckpointRange { after_exclusive: after, last_inclusive: Position::Offset(start + len - 1) };
                if cp.verdict(&s, &range) == RangeVerdict::Contiguous {
                    cp.advance(&s, &range);
                    for o in start..start + len { delivered[o as usize] += 1; }
                    let now = start + len - 1;
                    prop_assert!(last.is_none_or(|l| now > l));
                    last = Some(now);
                }
            }
            prop_assert!(delivered.iter().all(|n| *n <= 1));
            // Delivered offsets form a prefix 0..=last.
            if let Some(l) = last {
                prop_assert!(delivered[..=(l as usize)].iter().all(|n| *n == 1));
            }
        }

        #[test]
        fn sequence_order_matches_big_integer_order(a in 0u64..u64::MAX, b in 0u64..u64::MAX) {
            prop_assert_eq!(seq(&a.to_string()).cmp(&seq(&b.to_string())), a.cmp(&b));
        }
    }

    #[test]
    fn a_range_displays_as_a_half_open_interval() {
        let r = CheckpointRange {
            after_exclusive: Some(Position::Offset(41)),
            last_inclusive: Position::Offset(57),
        };
        assert_eq!(r.to_string(), "(41,57]");
        let first = CheckpointRange {
            after_exclusive: None,
            last_inclusive: Position::ShardEnd,
        };
        assert_eq!(first.to_string(), "(,SHARD_END]");
    }

    fn legacy_batch(data_files: &str, dlq_staged: &str) -> String {
        format!(
            r#"{{"channel":"c","batch_id":"0190a5c8-0000-7000-8000-000000000001","worker_id":"w",
            "shards":[{{"shard":"0","range":{{"after_exclusive":null,"last_inclusive":5}},"lease_counter":1}}],
            "data_files":{data_files},"dlq_staged":{dlq_staged},"num_rows":6,"num_dead_lettered":0,
            "data_bytes":10,"oldest_read_at_ms":0}}"#
        )
    }

    #[test]
    fn pending_batches_of_the_previous_version_are_read_by_their_kind() {
        // Stored by floe before the payload was tagged: Iceberg data files and a staged DLQ object.
        let iceberg = legacy_batch(
            r#"["{\"content\":0,\"file_path\":\"s3://b/t/data/x.parquet\"}"]"#,
            r#""dlq/staged/x.jsonl""#,
        );
        let b: PendingBatch = serde_json::from_str(&iceberg).unwrap();
        assert_eq!(
            b.files,
            BatchFiles::Iceberg {
                data_files: vec![r#"{"content":0,"file_path":"s3://b/t/data/x.parquet"}"#.into()],
                dlq_staged: Some("dlq/staged/x.jsonl".into()),
                deleted_keys: None,
            }
        );
        // An Iceberg batch of DLQ entries only, and one of SHARD_END only.
        let b: PendingBatch = serde_json::from_str(&legacy_batch("[]", "null")).unwrap();
        assert_eq!(b.files.kind(), "iceberg");
        assert!(b.files.is_empty());
        // A raw batch: RawObject JSON in data_files.
        let raw = legacy_batch(
            r#"["{\"staged_key\":\"_floe_staging/c/x/0\",\"key\":\"c/2026/x\",\"shard\":\"0\",\"records\":6,\"bytes\":10}"]"#,
            "null",
        );
        let b: PendingBatch = serde_json::from_str(&raw).unwrap();
        assert_eq!(
            b.files,
            BatchFiles::Raw {
                objects: vec![RawObject {
                    staged_key: "_floe_staging/c/x/0".into(),
                    key: "c/2026/x".into(),
                    shard: ShardId("0".into()),
                    records: 6,
                    bytes: 10,
                }]
            }
        );
        // Written back, it takes today's tagged form and reads the same.
        let text = serde_json::to_string(&b).unwrap();
        assert!(text.contains(r#""files":{"kind":"raw""#), "{text}");
        assert!(!text.contains("data_files"), "{text}");
        assert_eq!(serde_json::from_str::<PendingBatch>(&text).unwrap(), b);
    }
}
