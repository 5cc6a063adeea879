//! The lease store: who reads which shard, who commits for a channel, the pending batches handed
//! from workers to the committer, and the channel's control-plane state (docs/design.md, "Lease store").
//!
//! Invariant upheld here: the **lease counter** of a lease is a fencing token. It grows by one at
//! every change of owner (take, steal, release) and never otherwise, so a batch read under an
//! older counter can be recognised as stale by the committer (protocol step 3). Every write that
//! depends on what a worker last saw is conditional on it, exactly like a DynamoDB conditional
//! write: the store compares, then swaps, atomically.
//!
//! Expiry needs no synchronised clocks: a holder bumps the lease's **heartbeat** at every renewal;
//! another worker deems the lease expired when `(owner, lease_counter, heartbeat)` has not changed
//! for `lease_duration` on *its own* monotonic clock (as the Kinesis Client Library does). The
//! balancing that decides what to take, renew and steal is in [`manager`].
//!
//! ```text
//!                    take (cond. owner, counter, heartbeat unchanged)
//!   +---------+  counter+1  +-----------------+  renew (cond. owner, counter)
//!   | unowned | ----------> | owned by W      | ----+  heartbeat+1
//!   +---------+             | (counter = c)   | <---+
//!        ^                  +-----------------+
//!        |  release             |          | take by V after expiry or steal for balance
//!        |  (cond. owner,       |          | (cond. owner, counter, heartbeat unchanged)
//!        |   counter) c+1       |          v counter+1
//!        +----------------------+   +-----------------+
//!                                   | owned by V      |   W's renew/release -> Lost
//!                                   | (counter = c+1) |
//!                                   +-----------------+
//! ```
//!
//! Implementations: [`sql::SqlLeaseStore`] (SQLite, embedded: one file, several processes on one
//! machine; PostgreSQL: a fleet of hosts without AWS), the in-memory [`memory::MemoryLeaseStore`] (tests and the fleet simulation), the
//! conformance suite `conformance` (with `cfg(test)` or the `testsuite` feature), and
//! [`dynamodb::DynamoDbLeaseStore`] (a fleet on AWS), which passes the same suite against the
//! local emulator (`tests/it/lease_conformance.rs`).

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::model::{Checkpoints, Lineage, PendingBatch, Position, ShardId};

#[cfg(any(test, feature = "testsuite"))]
pub mod conformance;
pub mod dynamodb;
pub mod manager;
pub mod memory;
pub mod sim;
pub mod sql;

pub use dynamodb::DynamoDbLeaseStore;
pub use manager::{HeldLeases, LeaseManager, LeaseManagerConfig};
pub use sql::{PostgresOptions, SqlLeaseStore, SslMode};

/// How often a running channel re-reads its state in the lease store (deletion, updated
/// settings): workers and the committer pick up `floe channel update`/`delete` within it.
pub const STATE_POLL_INTERVAL: std::time::Duration = std::time::Duration::from_secs(5);

/// What a lease grants: reading one shard, or committing for the channel.
///
/// Stored as text: `"shard/<shard id>"` or `"committer"`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum LeaseKey {
    /// The right to read one shard of the channel's source.
    Shard(ShardId),
    /// The right to act as the channel's committer (one per channel).
    Committer,
}

impl LeaseKey {
    /// The lease key of shard `shard`.
    pub fn shard(shard: impl Into<String>) -> Self {
        LeaseKey::Shard(ShardId(shard.into()))
    }

    /// The shard this lease is for, `None` for the committer lease.
    pub fn shard_id(&self) -> Option<&ShardId> {
        match self {
            LeaseKey::Shard(s) => Some(s),
            LeaseKey::Committer => None,
        }
    }
}

impl fmt::Display for LeaseKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LeaseKey::Shard(s) => write!(f, "shard/{s}"),
            LeaseKey::Committer => f.write_str("committer"),
        }
    }
}

impl FromStr for LeaseKey {
    type Err = LeaseError;

    /// Parses the text form: `"shard/<shard id>"` (non-empty id) or `"committer"`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.strip_prefix("shard/") {
            Some(id) if !id.is_empty() => Ok(LeaseKey::shard(id)),
            _ if s == "committer" => Ok(LeaseKey::Committer),
            _ => Err(LeaseError::Fatal {
                message: format!("bad lease key {s:?}"),
            }),
        }
    }
}

/// One lease row as stored, keyed by `(channel, key)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    /// Channel name.
    pub channel: String,
    /// What the lease grants.
    pub key: LeaseKey,
    /// Worker id of the holder, `None` when unowned.
    pub owner: Option<String>,
    /// Fencing token: incremented at every change of owner (take, steal, release).
    pub lease_counter: u64,
    /// Incremented at every renewal; others detect expiry by watching it stand still.
    pub heartbeat: u64,
    /// The last committed position of the shard as the committer reported it. A hint only: the
    /// table's `floe.checkpoints` is authoritative. `None` for the committer lease.
    pub checkpoint_hint: Option<Position>,
    /// Parent shards (Kinesis resharding), empty when the shard has none.
    pub parents: Vec<ShardId>,
}

/// The parents and children of a channel's shards as their lease rows name them, and the
/// shards whose lease has an owner: what [`Checkpoints::prune_ended`] and
/// [`Checkpoints::with_pruned_ended`] need beyond the checkpoints.
pub fn lineage(leases: &[Lease]) -> Lineage {
    let shards = || {
        leases
            .iter()
            .filter_map(|l| l.key.shard_id().map(|s| (s, l)))
    };
    Lineage::from_parents(shards().map(|(s, l)| (s, l.parents.as_slice()))).with_held(
        shards()
            .filter(|(_, l)| l.owner.is_some())
            .map(|(s, _)| s.clone()),
    )
}

impl Lease {
    /// Whether `worker` holds this lease according to this row.
    pub fn is_owned_by(&self, worker: &str) -> bool {
        self.owner.as_deref() == Some(worker)
    }
}

/// One worker's presence row in a channel (docs/design.md, "Lease store"): what a worker renews
/// each period instead of every lease it holds. A worker's shard leases are live while its
/// presence is; the lease counter stays the fencing token that whoever moves a lease must bump.
///
/// Written by two parties on separate fields: the worker bumps `heartbeat`
/// ([`LeaseStore::renew_presence`]); the balancing worker (the holder of the committer lease)
/// bumps `notice` and replaces `handoffs` ([`LeaseStore::notify_worker`]) when the worker's
/// leases changed or some should be handed to another worker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Presence {
    /// Channel name.
    pub channel: String,
    /// Worker id.
    pub worker: String,
    /// Incremented at every renewal; others detect a dead worker by watching it stand still.
    pub heartbeat: u64,
    /// Incremented by the balancer when the worker should re-read its leases.
    pub notice: u64,
    /// Shards the balancer asks this worker to hand over, with the worker to hand each to.
    pub handoffs: BTreeMap<ShardId, String>,
}

/// A lease row to create if missing, by [`LeaseStore::ensure_leases`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseSpec {
    /// What the lease grants.
    pub key: LeaseKey,
    /// Parent shards (Kinesis resharding), empty when none.
    pub parents: Vec<ShardId>,
}

impl LeaseSpec {
    /// A lease without parents.
    pub fn new(key: LeaseKey) -> Self {
        LeaseSpec {
            key,
            parents: Vec::new(),
        }
    }

    /// The same spec with parent shards.
    pub fn with_parents(mut self, parents: Vec<ShardId>) -> Self {
        self.parents = parents;
        self
    }
}

/// Life-cycle state of a channel (docs/design.md, "Control plane").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum ChannelStatus {
    /// Being set up; not delivering yet.
    Creating,
    /// Delivering.
    Active,
    /// Failed for good (see the reason); not recoverable.
    Failed,
    /// Paused because the destination was deleted or became incompatible.
    Suspended,
    /// Being deleted; delivered data is kept.
    Deleting,
}

/// A channel's control-plane record, written with optimistic concurrency on `version`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChannelState {
    /// Channel name.
    pub channel: String,
    /// Life-cycle state.
    pub state: ChannelStatus,
    /// Why the channel is `Failed` or `Suspended`.
    pub status_reason: Option<String>,
    /// When the channel became active, milliseconds since the Unix epoch (its start position).
    pub activated_at_ms: Option<i64>,
    /// UUID of the Iceberg table recorded at activation.
    pub table_uuid: Option<String>,
    /// Glue Schema Registry version id of the channel's schema, recorded at activation: the
    /// channel keeps it even when a later version becomes the latest. Absent for file schemas and
    /// in rows written before it existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schema_version_id: Option<String>,
    /// Version of the record: 1 when created, +1 at every update. Set by the store.
    pub version: u64,
    /// When the record was last written, milliseconds since the Unix epoch (informational).
    pub updated_at_ms: i64,
    /// Settings changed with `floe channel update`, which win over the configuration file.
    /// Absent in rows written before it existed (decoded as no override).
    #[serde(default)]
    pub overrides: ChannelOverrides,
    /// A member channel of a `table = "{topic}"` channel whose topic appeared after the
    /// channel's activation: its shards without a checkpoint start at their first record, not
    /// at `activated_at_ms` (a mirrored or replayed topic keeps older record timestamps, which
    /// the activation-time lookup would skip). Absent (false) in every other state.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub from_first_record: bool,
}

/// The settings `floe channel update` may change on a live channel; `None` keeps the
/// configuration file's value. Workers pick a change up within a few seconds.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChannelOverrides {
    /// `data_freshness` in milliseconds (10 s to 900 s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_freshness_ms: Option<u64>,
    /// Which delivery log lines the committer writes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delivery_log: Option<DeliveryLog>,
}

/// Which structured delivery log lines a channel writes (failures are always logged).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeliveryLog {
    /// One line per committed batch, and one per failure (the default).
    #[default]
    Batches,
    /// Failures only.
    Failures,
}

/// The committed checkpoints of a channel whose destination cannot hold them itself (raw S3
/// objects): the lease store's item `checkpoints` of the channel, the counterpart of an Iceberg
/// table's `floe.checkpoints` + `floe.committer-epoch` + `floe.last-commit-id`. Authoritative
/// for such a channel, and written only by [`BatchStore::put_delivered`], a compare-and-swap on
/// `version` that also refuses a lower committer epoch (docs/exactly-once.md, "Raw S3").
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Delivered {
    /// Channel name.
    pub channel: String,
    /// Per shard, the last position whose record is in a committed batch.
    pub checkpoints: Checkpoints,
    /// Lease counter of the committer that wrote this version (its epoch).
    pub committer_epoch: u64,
    /// Id of the commit that wrote this version (a UUIDv7), `None` before the first commit.
    pub last_commit_id: Option<Uuid>,
    /// Batches committed (by this or an earlier version) whose objects may not be published yet:
    /// every committed batch stays listed until a commit round no longer finds it pending.
    pub committed_batch_ids: Vec<Uuid>,
    /// Version of the item: 1 when created, +1 at every write. Set by the store.
    pub version: u64,
}

/// The version a conditional write of a versioned item stores (`expected + 1`, 1 when created)
/// and the item's JSON body with that version set in it.
pub(crate) fn next_version<T: Serialize + Clone>(
    value: &T,
    expected: Option<u64>,
    set_version: impl FnOnce(&mut T, u64),
) -> (u64, String) {
    let version = expected.map_or(1, |v| v + 1);
    let mut stored = value.clone();
    set_version(&mut stored, version);
    (
        version,
        serde_json::to_string(&stored).expect("a lease store item serializes"),
    )
}

/// An error of a lease-store call, named for what the caller does next.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LeaseError {
    /// The caller no longer holds the lease (another worker took it, or it was released):
    /// stop handing off batches for it at once; do not retry.
    #[error("lease lost (channel {channel}, lease {key})")]
    Lost {
        /// Channel name.
        channel: String,
        /// The lease.
        key: LeaseKey,
    },
    /// A conditional write found the item changed (or missing): re-read and decide again.
    #[error("conditional write conflict (channel {channel}, item {item})")]
    Conflict {
        /// Channel name.
        channel: String,
        /// The item: a lease key, `batch/<id>` or `channel-state`.
        item: String,
    },
    /// The store is throttling requests: back off, then retry.
    #[error("lease store throttled: {message}")]
    Throttled {
        /// What the store said.
        message: String,
    },
    /// The store did not answer in time or is busy (network error, timeout, SQLite busy):
    /// retry. The outcome of the write is unknown; re-read before relying on it.
    #[error("lease store unavailable: {message}")]
    Unavailable {
        /// What failed.
        message: String,
    },
    /// A failure no retry fixes (an undecodable row, a missing table, no permission): report
    /// it and stop.
    #[error("lease store failed: {message}")]
    Fatal {
        /// What failed.
        message: String,
    },
}

impl LeaseError {
    /// Whether retrying the same call later may succeed (`Throttled`, `Unavailable`).
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            LeaseError::Throttled { .. } | LeaseError::Unavailable { .. }
        )
    }

    fn lost(lease: &Lease) -> Self {
        LeaseError::Lost {
            channel: lease.channel.clone(),
            key: lease.key.clone(),
        }
    }

    fn conflict(channel: &str, item: impl fmt::Display) -> Self {
        LeaseError::Conflict {
            channel: channel.to_string(),
            item: item.to_string(),
        }
    }
}

/// Leases of shards and of the committer role. Every write is a single conditional write (a
/// DynamoDB `UpdateItem`/`PutItem` with a `ConditionExpression`), atomic on one row.
#[async_trait]
pub trait LeaseStore: Send + Sync {
    /// Creates the rows of `specs` that do not exist yet in `channel`, unowned, with counter and
    /// heartbeat 0, no checkpoint hint. Existing rows are left untouched (parents included).
    async fn ensure_leases(&self, channel: &str, specs: &[LeaseSpec]) -> Result<(), LeaseError>;

    /// Every lease row of `channel`, ordered by key.
    async fn list_leases(&self, channel: &str) -> Result<Vec<Lease>, LeaseError>;

    /// Takes `lease` for `worker`, on condition that its `owner`, `lease_counter` and `heartbeat`
    /// are still the ones in `lease` (as listed): sets `owner = worker`, `lease_counter + 1`.
    /// Used for unowned, expired and stolen leases alike. Returns the new row.
    ///
    /// Errors: [`LeaseError::Conflict`] when the row changed or does not exist.
    async fn take_lease(&self, lease: &Lease, worker: &str) -> Result<Lease, LeaseError>;

    /// Renews `lease`, on condition that `owner` and `lease_counter` are still the ones in
    /// `lease`: `heartbeat + 1`. Returns the new row.
    ///
    /// Errors: [`LeaseError::Lost`] when the lease changed hands, was released, does not exist,
    /// or `lease.owner` is `None`.
    async fn renew_lease(&self, lease: &Lease) -> Result<Lease, LeaseError>;

    /// Hands `lease` back, on condition that `owner` and `lease_counter` are still the ones in
    /// `lease`: `owner = None`, `lease_counter + 1`.
    ///
    /// Errors: [`LeaseError::Lost`] as for [`LeaseStore::renew_lease`].
    async fn release_lease(&self, lease: &Lease) -> Result<(), LeaseError>;

    /// Deletes the row of `lease`, on condition that its `lease_counter` is still the one in
    /// `lease` (whoever owns it). The balancer deletes finished shards' rows this way.
    ///
    /// Errors: [`LeaseError::Conflict`] when the row changed or does not exist.
    async fn delete_lease(&self, lease: &Lease) -> Result<(), LeaseError>;

    /// The lease row `key` of `channel`, `None` when it does not exist (one item read).
    async fn get_lease(&self, channel: &str, key: &LeaseKey) -> Result<Option<Lease>, LeaseError>;

    /// Renews `worker`'s presence in `channel`: `heartbeat + 1`, creating the row (heartbeat 1,
    /// notice 0, no handoffs) when missing. Unconditional: only the worker writes its heartbeat.
    /// Returns the row after the write, so the worker sees its notice without another read.
    async fn renew_presence(&self, channel: &str, worker: &str) -> Result<Presence, LeaseError>;

    /// Every presence row of `channel`, ordered by worker id.
    async fn list_presence(&self, channel: &str) -> Result<Vec<Presence>, LeaseError>;

    /// Tells `worker` to re-read its leases: `notice + 1`, `handoffs` replaced by `handoffs`.
    /// Leaves the heartbeat alone.
    ///
    /// Errors: [`LeaseError::Conflict`] when the worker has no presence row.
    async fn notify_worker(
        &self,
        channel: &str,
        worker: &str,
        handoffs: &BTreeMap<ShardId, String>,
    ) -> Result<(), LeaseError>;

    /// Removes `worker`'s presence row (graceful shutdown, or a worker long dead). Idempotent.
    async fn remove_presence(&self, channel: &str, worker: &str) -> Result<(), LeaseError>;

    /// Records `position` as the checkpoint hint of lease `key` (unconditional on the owner;
    /// called by the committer after a commit). Does not change counter or heartbeat.
    ///
    /// Errors: [`LeaseError::Conflict`] when the row does not exist.
    async fn set_checkpoint_hint(
        &self,
        channel: &str,
        key: &LeaseKey,
        position: &Position,
    ) -> Result<(), LeaseError>;
}

/// Pending batches (worker → committer hand-off) and the channel's control-plane state.
#[async_trait]
pub trait BatchStore: Send + Sync {
    /// Stores `batch` as pending. Idempotent: putting the same batch again succeeds.
    ///
    /// Errors: [`LeaseError::Conflict`] when a *different* batch has the same `batch_id`.
    async fn put_batch(&self, batch: &PendingBatch) -> Result<(), LeaseError>;

    /// The pending batches of `channel`, ordered by `batch_id` (UUIDv7: the order they were
    /// written in).
    async fn list_pending(&self, channel: &str) -> Result<Vec<PendingBatch>, LeaseError>;

    /// Removes the batches the committer committed or rejected from the pending set. Ids that
    /// are not pending are ignored (idempotent).
    async fn finish_batches(
        &self,
        channel: &str,
        committed: &[Uuid],
        rejected: &[Uuid],
    ) -> Result<(), LeaseError>;

    /// The channel's state, `None` when the channel has none.
    async fn get_channel_state(&self, channel: &str) -> Result<Option<ChannelState>, LeaseError>;

    /// Writes `state`, on condition that the stored version is `expected_version` (`None`: no
    /// state stored yet). The stored version becomes `expected_version + 1` (1 when created),
    /// whatever `state.version` says; returns it.
    ///
    /// Errors: [`LeaseError::Conflict`] when the stored version differs.
    async fn put_channel_state(
        &self,
        state: &ChannelState,
        expected_version: Option<u64>,
    ) -> Result<u64, LeaseError>;

    /// The committed checkpoints of a raw channel, `None` before its first commit.
    async fn get_delivered(&self, channel: &str) -> Result<Option<Delivered>, LeaseError>;

    /// Writes `delivered` on condition that the stored version is `expected_version` (`None`: no
    /// item yet) **and** the stored `committer_epoch` is not higher than `delivered`'s, so a
    /// stale committer can never move the checkpoints. The stored version becomes
    /// `expected_version + 1` (1 when created), whatever `delivered.version` says; returns it.
    ///
    /// Errors: [`LeaseError::Conflict`] (item `checkpoints`) when either condition fails.
    async fn put_delivered(
        &self,
        delivered: &Delivered,
        expected_version: Option<u64>,
    ) -> Result<u64, LeaseError>;
}

/// A complete lease store: leases, pending batches and channel state, as `floe run` needs it.
/// Every [`LeaseStore`] that is also a [`BatchStore`] is one.
pub trait Store: LeaseStore + BatchStore {}

impl<T: LeaseStore + BatchStore + ?Sized> Store for T {}

#[cfg(test)]
mod tests {
    use super::*;

    async fn sqlite_store() -> (tempfile::TempDir, SqlLeaseStore) {
        let dir = tempfile::tempdir().unwrap();
        let store = SqlLeaseStore::open_sqlite(dir.path().join("leases.sqlite"))
            .await
            .unwrap();
        (dir, store)
    }

    crate::lease_store_conformance_tests!(memory_conformance, async {
        ((), crate::lease::memory::MemoryLeaseStore::new())
    });
    crate::lease_store_conformance_tests!(sqlite_conformance, sqlite_store());

    #[tokio::test]
    async fn run_all_passes_on_both_stores() {
        conformance::run_all(&memory::MemoryLeaseStore::new()).await;
        let (_dir, store) = sqlite_store().await;
        conformance::run_all(&store).await;
    }

    #[test]
    fn channel_state_written_before_overrides_existed_still_decodes() {
        let old = r#"{"channel":"c","state":"ACTIVE","status_reason":null,"activated_at_ms":1,"table_uuid":null,"version":3,"updated_at_ms":2}"#;
        let state: ChannelState = serde_json::from_str(old).unwrap();
        assert_eq!(state.overrides, ChannelOverrides::default());
        assert_eq!(state.state, ChannelStatus::Active);
    }

    #[test]
    fn lease_key_round_trips_through_text() {
        for key in [
            LeaseKey::shard("0"),
            LeaseKey::shard("shardId-000000000001"),
            LeaseKey::shard("a/b"),
            LeaseKey::Committer,
        ] {
            assert_eq!(key.to_string().parse::<LeaseKey>().unwrap(), key);
        }
        assert_eq!(LeaseKey::shard("7").to_string(), "shard/7");
        assert!("shard/".parse::<LeaseKey>().is_err());
        assert!("7".parse::<LeaseKey>().is_err());
    }

    #[test]
    fn only_throttled_and_unavailable_are_retryable() {
        let lost = LeaseError::Lost {
            channel: "c".into(),
            key: LeaseKey::Committer,
        };
        assert!(!lost.is_retryable());
        assert!(!LeaseError::conflict("c", "x").is_retryable());
        assert!(!LeaseError::Fatal {
            message: "x".into()
        }
        .is_retryable());
        assert!(LeaseError::Throttled {
            message: "x".into()
        }
        .is_retryable());
        assert!(LeaseError::Unavailable {
            message: "x".into()
        }
        .is_retryable());
    }
}
