//! The embedded lease store: one SQLite file shared by several `floe` processes on one machine.
//!
//! Every conditional write is **one** SQL statement whose `WHERE` clause is the condition
//! (`UPDATE … WHERE owner IS ? AND lease_counter = ? AND heartbeat = ? RETURNING …`), so it is
//! atomic without an explicit transaction, the same shape as a DynamoDB conditional write. The
//! file is in WAL mode (readers never block the writer) with a busy timeout; a write that still
//! finds the database locked fails with [`LeaseError::Unavailable`] (retryable).
//!
//! ```text
//!   process A --\                       floe_leases           (channel, lease_key) -> owner, counter, heartbeat, hint, parents
//!   process B ----> leases.sqlite (WAL) floe_workers          (channel, worker)    -> heartbeat, notice, handoffs
//!                                       floe_pending_batches  (channel, batch_id)  -> batch JSON
//!   process C --/                       floe_channel_state    channel              -> state JSON, version
//!                                       floe_delivered        channel              -> checkpoints JSON, version, epoch (raw S3)
//! ```

use std::collections::BTreeMap;
use std::path::Path;
use std::str::FromStr;
use std::time::Duration;

use async_trait::async_trait;
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteRow,
    SqliteSynchronous,
};
use sqlx::Row;
use uuid::Uuid;

use super::{
    BatchStore, ChannelState, Delivered, Lease, LeaseError, LeaseKey, LeaseSpec, LeaseStore,
    Presence,
};
use crate::model::{PendingBatch, Position, ShardId};

/// How long a statement waits for another process's write lock before failing with
/// [`LeaseError::Unavailable`], in seconds.
pub const BUSY_TIMEOUT_SECONDS: u64 = 5;

const SCHEMA: &[&str] = &[
    "CREATE TABLE IF NOT EXISTS floe_leases (
        channel         TEXT    NOT NULL,
        lease_key       TEXT    NOT NULL,
        owner           TEXT,
        lease_counter   INTEGER NOT NULL,
        heartbeat       INTEGER NOT NULL,
        checkpoint_hint TEXT,
        parents         TEXT    NOT NULL,
        PRIMARY KEY (channel, lease_key)
    )",
    "CREATE TABLE IF NOT EXISTS floe_workers (
        channel   TEXT    NOT NULL,
        worker    TEXT    NOT NULL,
        heartbeat INTEGER NOT NULL,
        notice    INTEGER NOT NULL,
        handoffs  TEXT    NOT NULL,
        PRIMARY KEY (channel, worker)
    )",
    "CREATE TABLE IF NOT EXISTS floe_pending_batches (
        channel  TEXT NOT NULL,
        batch_id TEXT NOT NULL,
        body     TEXT NOT NULL,
        PRIMARY KEY (channel, batch_id)
    )",
    "CREATE TABLE IF NOT EXISTS floe_channel_state (
        channel TEXT    NOT NULL PRIMARY KEY,
        version INTEGER NOT NULL,
        body    TEXT    NOT NULL
    )",
    "CREATE TABLE IF NOT EXISTS floe_delivered (
        channel TEXT    NOT NULL PRIMARY KEY,
        version INTEGER NOT NULL,
        epoch   INTEGER NOT NULL,
        body    TEXT    NOT NULL
    )",
];

const LEASE_COLUMNS: &str =
    "channel, lease_key, owner, lease_counter, heartbeat, checkpoint_hint, parents";

const PRESENCE_COLUMNS: &str = "channel, worker, heartbeat, notice, handoffs";

/// A [`LeaseStore`] and [`BatchStore`] in one SQLite file, safe for several processes.
#[derive(Debug, Clone)]
pub struct SqliteLeaseStore {
    pool: SqlitePool,
}

impl SqliteLeaseStore {
    /// Opens (creating if missing) the database file at `path`, switches it to WAL mode and
    /// creates the lease tables if they do not exist.
    ///
    /// Errors: [`LeaseError::Unavailable`] when the file is locked for longer than
    /// [`BUSY_TIMEOUT_SECONDS`]; [`LeaseError::Fatal`] when it cannot be opened or created.
    pub async fn open(path: impl AsRef<Path>) -> Result<Self, LeaseError> {
        let options = SqliteConnectOptions::new()
            .filename(path)
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Normal)
            .busy_timeout(Duration::from_secs(BUSY_TIMEOUT_SECONDS));
        let pool = SqlitePoolOptions::new()
            .max_connections(4)
            .acquire_timeout(Duration::from_secs(BUSY_TIMEOUT_SECONDS * 2))
            .connect_with(options)
            .await
            .map_err(map_err)?;
        for statement in SCHEMA {
            sqlx::query(statement)
                .execute(&pool)
                .await
                .map_err(map_err)?;
        }
        Ok(SqliteLeaseStore { pool })
    }

    /// Reads a versioned JSON row (`SELECT version, body … WHERE channel = ?`); `set_version` puts
    /// the stored version into the decoded value.
    async fn get_versioned<T: serde::de::DeserializeOwned>(
        &self,
        select: &'static str,
        channel: &str,
        what: &str,
        set_version: impl FnOnce(&mut T, u64),
    ) -> Result<Option<T>, LeaseError> {
        let row: Option<(i64, String)> = sqlx::query_as(select)
            .bind(channel)
            .fetch_optional(&self.pool)
            .await
            .map_err(map_err)?;
        row.map(|(version, body)| {
            let mut value: T = serde_json::from_str(&body).map_err(|e| corrupt(what, e))?;
            set_version(
                &mut value,
                u64::try_from(version).map_err(|e| corrupt("version", e))?,
            );
            Ok(value)
        })
        .transpose()
    }

    /// Runs a conditional write of a versioned row (an `INSERT … DO NOTHING` or an
    /// `UPDATE … WHERE version = ?`): one row changed, or [`LeaseError::Conflict`] on `item`.
    async fn put_versioned<'q>(
        &self,
        query: sqlx::query::Query<'q, sqlx::Sqlite, sqlx::sqlite::SqliteArguments<'q>>,
        channel: &str,
        item: &str,
        version: u64,
    ) -> Result<u64, LeaseError> {
        let done = query.execute(&self.pool).await.map_err(map_err)?;
        if done.rows_affected() == 1 {
            Ok(version)
        } else {
            Err(LeaseError::conflict(channel, item))
        }
    }

    /// Closes the connections (waits for statements in flight).
    pub async fn close(&self) {
        self.pool.close().await;
    }
}

/// Maps a sqlx error once, at the edge: busy or locked database, I/O and pool timeouts are
/// retryable; anything else is fatal.
fn map_err(err: sqlx::Error) -> LeaseError {
    match &err {
        sqlx::Error::Database(db) => {
            let primary = db
                .code()
                .and_then(|c| c.parse::<i32>().ok())
                .map(|c| c & 0xff);
            // SQLITE_BUSY = 5, SQLITE_LOCKED = 6 (and their extended codes).
            if matches!(primary, Some(5) | Some(6)) {
                LeaseError::Unavailable {
                    message: err.to_string(),
                }
            } else {
                LeaseError::Fatal {
                    message: err.to_string(),
                }
            }
        }
        sqlx::Error::Io(_) | sqlx::Error::PoolTimedOut | sqlx::Error::WorkerCrashed => {
            LeaseError::Unavailable {
                message: err.to_string(),
            }
        }
        _ => LeaseError::Fatal {
            message: err.to_string(),
        },
    }
}

fn corrupt(what: &str, err: impl std::fmt::Display) -> LeaseError {
    LeaseError::Fatal {
        message: format!("undecodable {what}: {err}"),
    }
}

fn to_i64(n: u64) -> Result<i64, LeaseError> {
    i64::try_from(n).map_err(|_| LeaseError::Fatal {
        message: format!("counter {n} out of range"),
    })
}

fn lease_from_row(row: &SqliteRow) -> Result<Lease, LeaseError> {
    let key: String = row.try_get("lease_key").map_err(map_err)?;
    let counter: i64 = row.try_get("lease_counter").map_err(map_err)?;
    let heartbeat: i64 = row.try_get("heartbeat").map_err(map_err)?;
    let hint: Option<String> = row.try_get("checkpoint_hint").map_err(map_err)?;
    let parents: String = row.try_get("parents").map_err(map_err)?;
    Ok(Lease {
        channel: row.try_get("channel").map_err(map_err)?,
        key: LeaseKey::from_str(&key)?,
        owner: row.try_get("owner").map_err(map_err)?,
        lease_counter: u64::try_from(counter).map_err(|e| corrupt("lease_counter", e))?,
        heartbeat: u64::try_from(heartbeat).map_err(|e| corrupt("heartbeat", e))?,
        checkpoint_hint: hint
            .map(|h| serde_json::from_str::<Position>(&h))
            .transpose()
            .map_err(|e| corrupt("checkpoint_hint", e))?,
        parents: serde_json::from_str::<Vec<ShardId>>(&parents)
            .map_err(|e| corrupt("parents", e))?,
    })
}

fn presence_from_row(row: &SqliteRow) -> Result<Presence, LeaseError> {
    let heartbeat: i64 = row.try_get("heartbeat").map_err(map_err)?;
    let notice: i64 = row.try_get("notice").map_err(map_err)?;
    let handoffs: String = row.try_get("handoffs").map_err(map_err)?;
    Ok(Presence {
        channel: row.try_get("channel").map_err(map_err)?,
        worker: row.try_get("worker").map_err(map_err)?,
        heartbeat: u64::try_from(heartbeat).map_err(|e| corrupt("heartbeat", e))?,
        notice: u64::try_from(notice).map_err(|e| corrupt("notice", e))?,
        handoffs: serde_json::from_str(&handoffs).map_err(|e| corrupt("handoffs", e))?,
    })
}

#[async_trait]
impl LeaseStore for SqliteLeaseStore {
    async fn ensure_leases(&self, channel: &str, specs: &[LeaseSpec]) -> Result<(), LeaseError> {
        // One transaction whose first statement writes: it takes the write lock at once, so the
        // busy timeout applies (no read-to-write upgrade deadlock).
        let mut tx = self.pool.begin().await.map_err(map_err)?;
        for spec in specs {
            let parents = serde_json::to_string(&spec.parents).expect("shard ids serialize");
            sqlx::query(
                "INSERT INTO floe_leases (channel, lease_key, owner, lease_counter, heartbeat,
                     checkpoint_hint, parents)
                 VALUES (?, ?, NULL, 0, 0, NULL, ?)
                 ON CONFLICT (channel, lease_key) DO NOTHING",
            )
            .bind(channel)
            .bind(spec.key.to_string())
            .bind(parents)
            .execute(&mut *tx)
            .await
            .map_err(map_err)?;
        }
        tx.commit().await.map_err(map_err)
    }

    async fn list_leases(&self, channel: &str) -> Result<Vec<Lease>, LeaseError> {
        let rows = sqlx::query(&format!(
            "SELECT {LEASE_COLUMNS} FROM floe_leases WHERE channel = ? ORDER BY lease_key"
        ))
        .bind(channel)
        .fetch_all(&self.pool)
        .await
        .map_err(map_err)?;
        let mut leases = rows
            .iter()
            .map(lease_from_row)
            .collect::<Result<Vec<_>, _>>()?;
        leases.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(leases)
    }

    async fn take_lease(&self, lease: &Lease, worker: &str) -> Result<Lease, LeaseError> {
        let row = sqlx::query(&format!(
            "UPDATE floe_leases SET owner = ?, lease_counter = lease_counter + 1
             WHERE channel = ? AND lease_key = ? AND owner IS ? AND lease_counter = ?
               AND heartbeat = ?
             RETURNING {LEASE_COLUMNS}"
        ))
        .bind(worker)
        .bind(&lease.channel)
        .bind(lease.key.to_string())
        .bind(lease.owner.as_deref())
        .bind(to_i64(lease.lease_counter)?)
        .bind(to_i64(lease.heartbeat)?)
        .fetch_optional(&self.pool)
        .await
        .map_err(map_err)?;
        match row {
            Some(row) => lease_from_row(&row),
            None => Err(LeaseError::conflict(&lease.channel, &lease.key)),
        }
    }

    async fn renew_lease(&self, lease: &Lease) -> Result<Lease, LeaseError> {
        let Some(owner) = lease.owner.as_deref() else {
            return Err(LeaseError::lost(lease));
        };
        let row = sqlx::query(&format!(
            "UPDATE floe_leases SET heartbeat = heartbeat + 1
             WHERE channel = ? AND lease_key = ? AND owner = ? AND lease_counter = ?
             RETURNING {LEASE_COLUMNS}"
        ))
        .bind(&lease.channel)
        .bind(lease.key.to_string())
        .bind(owner)
        .bind(to_i64(lease.lease_counter)?)
        .fetch_optional(&self.pool)
        .await
        .map_err(map_err)?;
        match row {
            Some(row) => lease_from_row(&row),
            None => Err(LeaseError::lost(lease)),
        }
    }

    async fn release_lease(&self, lease: &Lease) -> Result<(), LeaseError> {
        let Some(owner) = lease.owner.as_deref() else {
            return Err(LeaseError::lost(lease));
        };
        let done = sqlx::query(
            "UPDATE floe_leases SET owner = NULL, lease_counter = lease_counter + 1
             WHERE channel = ? AND lease_key = ? AND owner = ? AND lease_counter = ?",
        )
        .bind(&lease.channel)
        .bind(lease.key.to_string())
        .bind(owner)
        .bind(to_i64(lease.lease_counter)?)
        .execute(&self.pool)
        .await
        .map_err(map_err)?;
        if done.rows_affected() == 1 {
            Ok(())
        } else {
            Err(LeaseError::lost(lease))
        }
    }

    async fn delete_lease(&self, lease: &Lease) -> Result<(), LeaseError> {
        let done = sqlx::query(
            "DELETE FROM floe_leases WHERE channel = ? AND lease_key = ? AND lease_counter = ?",
        )
        .bind(&lease.channel)
        .bind(lease.key.to_string())
        .bind(to_i64(lease.lease_counter)?)
        .execute(&self.pool)
        .await
        .map_err(map_err)?;
        if done.rows_affected() == 1 {
            Ok(())
        } else {
            Err(LeaseError::conflict(&lease.channel, &lease.key))
        }
    }

    async fn get_lease(&self, channel: &str, key: &LeaseKey) -> Result<Option<Lease>, LeaseError> {
        let row = sqlx::query(&format!(
            "SELECT {LEASE_COLUMNS} FROM floe_leases WHERE channel = ? AND lease_key = ?"
        ))
        .bind(channel)
        .bind(key.to_string())
        .fetch_optional(&self.pool)
        .await
        .map_err(map_err)?;
        row.as_ref().map(lease_from_row).transpose()
    }

    async fn renew_presence(&self, channel: &str, worker: &str) -> Result<Presence, LeaseError> {
        let row = sqlx::query(&format!(
            "INSERT INTO floe_workers (channel, worker, heartbeat, notice, handoffs)
             VALUES (?, ?, 1, 0, '{{}}')
             ON CONFLICT (channel, worker) DO UPDATE SET heartbeat = heartbeat + 1
             RETURNING {PRESENCE_COLUMNS}"
        ))
        .bind(channel)
        .bind(worker)
        .fetch_one(&self.pool)
        .await
        .map_err(map_err)?;
        presence_from_row(&row)
    }

    async fn list_presence(&self, channel: &str) -> Result<Vec<Presence>, LeaseError> {
        let rows = sqlx::query(&format!(
            "SELECT {PRESENCE_COLUMNS} FROM floe_workers WHERE channel = ? ORDER BY worker"
        ))
        .bind(channel)
        .fetch_all(&self.pool)
        .await
        .map_err(map_err)?;
        rows.iter().map(presence_from_row).collect()
    }

    async fn notify_worker(
        &self,
        channel: &str,
        worker: &str,
        handoffs: &BTreeMap<ShardId, String>,
    ) -> Result<(), LeaseError> {
        let body = serde_json::to_string(handoffs).expect("handoffs serialize");
        let done = sqlx::query(
            "UPDATE floe_workers SET notice = notice + 1, handoffs = ?
             WHERE channel = ? AND worker = ?",
        )
        .bind(body)
        .bind(channel)
        .bind(worker)
        .execute(&self.pool)
        .await
        .map_err(map_err)?;
        if done.rows_affected() == 1 {
            Ok(())
        } else {
            Err(LeaseError::conflict(channel, format!("worker/{worker}")))
        }
    }

    async fn remove_presence(&self, channel: &str, worker: &str) -> Result<(), LeaseError> {
        sqlx::query("DELETE FROM floe_workers WHERE channel = ? AND worker = ?")
            .bind(channel)
            .bind(worker)
            .execute(&self.pool)
            .await
            .map_err(map_err)?;
        Ok(())
    }

    async fn set_checkpoint_hint(
        &self,
        channel: &str,
        key: &LeaseKey,
        position: &Position,
    ) -> Result<(), LeaseError> {
        let hint = serde_json::to_string(position).expect("positions serialize");
        let done = sqlx::query(
            "UPDATE floe_leases SET checkpoint_hint = ? WHERE channel = ? AND lease_key = ?",
        )
        .bind(hint)
        .bind(channel)
        .bind(key.to_string())
        .execute(&self.pool)
        .await
        .map_err(map_err)?;
        if done.rows_affected() == 1 {
            Ok(())
        } else {
            Err(LeaseError::conflict(channel, key))
        }
    }
}

#[async_trait]
impl BatchStore for SqliteLeaseStore {
    async fn put_batch(&self, batch: &PendingBatch) -> Result<(), LeaseError> {
        let body = serde_json::to_string(batch).expect("batches serialize");
        // Hyphenated lowercase UUID text sorts like the UUID's bytes: ORDER BY batch_id is
        // UUIDv7 time order.
        let id = batch.batch_id.hyphenated().to_string();
        let done = sqlx::query(
            "INSERT INTO floe_pending_batches (channel, batch_id, body) VALUES (?, ?, ?)
             ON CONFLICT (channel, batch_id) DO NOTHING",
        )
        .bind(&batch.channel)
        .bind(&id)
        .bind(&body)
        .execute(&self.pool)
        .await
        .map_err(map_err)?;
        if done.rows_affected() == 1 {
            return Ok(());
        }
        let existing: Option<String> = sqlx::query_scalar(
            "SELECT body FROM floe_pending_batches WHERE channel = ? AND batch_id = ?",
        )
        .bind(&batch.channel)
        .bind(&id)
        .fetch_optional(&self.pool)
        .await
        .map_err(map_err)?;
        let same = existing
            .map(|text| serde_json::from_str::<PendingBatch>(&text))
            .transpose()
            .map_err(|e| corrupt("pending batch", e))?
            .is_some_and(|b| &b == batch);
        if same {
            Ok(())
        } else {
            // A different batch under the same id, or one finished in between: the caller
            // re-reads.
            Err(LeaseError::conflict(
                &batch.channel,
                format!("batch/{}", batch.batch_id),
            ))
        }
    }

    async fn list_pending(&self, channel: &str) -> Result<Vec<PendingBatch>, LeaseError> {
        let bodies: Vec<String> = sqlx::query_scalar(
            "SELECT body FROM floe_pending_batches WHERE channel = ? ORDER BY batch_id",
        )
        .bind(channel)
        .fetch_all(&self.pool)
        .await
        .map_err(map_err)?;
        bodies
            .iter()
            .map(|b| serde_json::from_str(b).map_err(|e| corrupt("pending batch", e)))
            .collect()
    }

    async fn finish_batches(
        &self,
        channel: &str,
        committed: &[Uuid],
        rejected: &[Uuid],
    ) -> Result<(), LeaseError> {
        let mut tx = self.pool.begin().await.map_err(map_err)?;
        for id in committed.iter().chain(rejected) {
            sqlx::query("DELETE FROM floe_pending_batches WHERE channel = ? AND batch_id = ?")
                .bind(channel)
                .bind(id.hyphenated().to_string())
                .execute(&mut *tx)
                .await
                .map_err(map_err)?;
        }
        tx.commit().await.map_err(map_err)
    }

    async fn get_channel_state(&self, channel: &str) -> Result<Option<ChannelState>, LeaseError> {
        self.get_versioned(
            "SELECT version, body FROM floe_channel_state WHERE channel = ?",
            channel,
            "channel state",
            |s: &mut ChannelState, v| s.version = v,
        )
        .await
    }

    async fn put_channel_state(
        &self,
        state: &ChannelState,
        expected_version: Option<u64>,
    ) -> Result<u64, LeaseError> {
        let (version, body) =
            super::next_version(state, expected_version, |x: &mut ChannelState, v| {
                x.version = v
            });
        let query = match expected_version {
            None => sqlx::query(
                "INSERT INTO floe_channel_state (channel, version, body) VALUES (?, ?, ?)
                 ON CONFLICT (channel) DO NOTHING",
            )
            .bind(&state.channel)
            .bind(to_i64(version)?)
            .bind(body),
            Some(expected) => sqlx::query(
                "UPDATE floe_channel_state SET version = ?, body = ?
                 WHERE channel = ? AND version = ?",
            )
            .bind(to_i64(version)?)
            .bind(body)
            .bind(&state.channel)
            .bind(to_i64(expected)?),
        };
        self.put_versioned(query, &state.channel, "channel-state", version)
            .await
    }

    async fn get_delivered(&self, channel: &str) -> Result<Option<Delivered>, LeaseError> {
        self.get_versioned(
            "SELECT version, body FROM floe_delivered WHERE channel = ?",
            channel,
            "checkpoints",
            |d: &mut Delivered, v| d.version = v,
        )
        .await
    }

    async fn put_delivered(
        &self,
        delivered: &Delivered,
        expected_version: Option<u64>,
    ) -> Result<u64, LeaseError> {
        let (version, body) =
            super::next_version(delivered, expected_version, |x: &mut Delivered, v| {
                x.version = v
            });
        let epoch = to_i64(delivered.committer_epoch)?;
        let query = match expected_version {
            None => sqlx::query(
                "INSERT INTO floe_delivered (channel, version, epoch, body) VALUES (?, ?, ?, ?)
                 ON CONFLICT (channel) DO NOTHING",
            )
            .bind(&delivered.channel)
            .bind(to_i64(version)?)
            .bind(epoch)
            .bind(body),
            // A stale committer (lower epoch) never moves the checkpoints.
            Some(expected) => sqlx::query(
                "UPDATE floe_delivered SET version = ?, epoch = ?, body = ?
                 WHERE channel = ? AND version = ? AND epoch <= ?",
            )
            .bind(to_i64(version)?)
            .bind(epoch)
            .bind(body)
            .bind(&delivered.channel)
            .bind(to_i64(expected)?)
            .bind(epoch),
        };
        self.put_versioned(query, &delivered.channel, "checkpoints", version)
            .await
    }
}
