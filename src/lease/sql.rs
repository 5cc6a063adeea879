//! The SQL lease stores, one implementation over sqlx's `Any` driver for two databases:
//! **SQLite** (embedded: one file shared by the `floe` processes of one machine) and
//! **PostgreSQL** (a fleet of hosts sharing one server, no AWS needed).
//!
//! Every conditional write is **one** SQL statement whose `WHERE` clause is the condition
//! (`UPDATE … WHERE owner IS NOT DISTINCT FROM $4 AND lease_counter = $5 AND heartbeat = $6
//! RETURNING …`), so it is atomic without an explicit transaction, the same shape as a DynamoDB
//! conditional write: SQLite serialises writers; PostgreSQL (read committed) re-checks the `WHERE`
//! clause on the newest row version after waiting for a concurrent writer's row lock, so of two
//! takers with the same expected counter exactly one changes the row. The lease counter stays the
//! fencing token on both. The statements are the same text on both databases (`$n` placeholders,
//! `IS NOT DISTINCT FROM`, `ON CONFLICT`, `RETURNING`: SQLite ≥ 3.39, PostgreSQL ≥ 9.5).
//!
//! SQLite: WAL mode (readers never block the writer) with a busy timeout; a write that still finds
//! the database locked fails with [`LeaseError::Unavailable`] (retryable). On both, the worker's
//! presence is renewed through a connection of its own ([`SqlLeaseStore::presence_lane`]). PostgreSQL: the tables
//! live in one schema (`lease_store.schema`, default `floe`, set as each connection's
//! `search_path`); lost connections, server restarts and failovers are
//! [`LeaseError::Unavailable`]; a refused login or a missing database is [`LeaseError::Fatal`].
//!
//! ```text
//!   worker A --\                         floe_leases           (channel, lease_key) -> owner, counter, heartbeat, hint, parents
//!   worker B ----> leases.sqlite (WAL)    floe_workers          (channel, worker)    -> heartbeat, notice, handoffs
//!                  or PostgreSQL schema   floe_pending_batches  (channel, batch_id)  -> batch JSON
//!   worker C --/   `floe`                 floe_channel_state    channel              -> state JSON, version
//!                                         floe_delivered        channel              -> checkpoints JSON, version, epoch (raw S3)
//!                                         floe_schema_version   1 row                -> version of these tables
//! ```

use std::collections::BTreeMap;
use std::path::Path;
use std::str::FromStr;
use std::time::Duration;

use async_trait::async_trait;
use sqlx::any::{AnyPoolOptions, AnyRow};
use sqlx::{AnyPool, Executor, Row};
use uuid::Uuid;

use super::{
    BatchStore, ChannelState, Delivered, Lease, LeaseError, LeaseKey, LeaseSpec, LeaseStore,
    Presence,
};
pub use crate::config::postgres::{redact_url, PostgresOptions, SslMode};
use crate::model::{PendingBatch, Position, ShardId};

/// How long an SQLite statement waits for another process's write lock before failing with
/// [`LeaseError::Unavailable`], in seconds; also how long a statement waits for a pooled
/// connection, twice over.
pub const BUSY_TIMEOUT_SECONDS: u64 = 5;

/// Version of the lease tables this floe writes (the row of `floe_schema_version`). A store
/// whose version is higher was written by a newer floe and is refused; a later floe migrates
/// from a lower one.
pub const SCHEMA_VERSION: i64 = 1;

/// The same DDL on both databases: `BIGINT` is a 64-bit integer on PostgreSQL and has integer
/// affinity on SQLite.
const SCHEMA: &[&str] = &[
    "CREATE TABLE IF NOT EXISTS floe_leases (
        channel         TEXT   NOT NULL,
        lease_key       TEXT   NOT NULL,
        owner           TEXT,
        lease_counter   BIGINT NOT NULL,
        heartbeat       BIGINT NOT NULL,
        checkpoint_hint TEXT,
        parents         TEXT   NOT NULL,
        PRIMARY KEY (channel, lease_key)
    )",
    "CREATE TABLE IF NOT EXISTS floe_workers (
        channel   TEXT   NOT NULL,
        worker    TEXT   NOT NULL,
        heartbeat BIGINT NOT NULL,
        notice    BIGINT NOT NULL,
        handoffs  TEXT   NOT NULL,
        PRIMARY KEY (channel, worker)
    )",
    "CREATE TABLE IF NOT EXISTS floe_pending_batches (
        channel  TEXT NOT NULL,
        batch_id TEXT NOT NULL,
        body     TEXT NOT NULL,
        PRIMARY KEY (channel, batch_id)
    )",
    "CREATE TABLE IF NOT EXISTS floe_channel_state (
        channel TEXT   NOT NULL PRIMARY KEY,
        version BIGINT NOT NULL,
        body    TEXT   NOT NULL
    )",
    "CREATE TABLE IF NOT EXISTS floe_delivered (
        channel TEXT   NOT NULL PRIMARY KEY,
        version BIGINT NOT NULL,
        epoch   BIGINT NOT NULL,
        body    TEXT   NOT NULL
    )",
    "CREATE TABLE IF NOT EXISTS floe_schema_version (
        id      BIGINT NOT NULL PRIMARY KEY,
        version BIGINT NOT NULL
    )",
];

const LEASE_COLUMNS: &str =
    "channel, lease_key, owner, lease_counter, heartbeat, checkpoint_hint, parents";

const PRESENCE_COLUMNS: &str = "channel, worker, heartbeat, notice, handoffs";

/// A [`LeaseStore`] and [`BatchStore`] in SQL: an SQLite file safe for several processes of one
/// machine, or a PostgreSQL schema safe for a fleet of hosts.
#[derive(Debug, Clone)]
pub struct SqlLeaseStore {
    /// Every call's connections (the presence lane's, on a [`SqlLeaseStore::presence_lane`]
    /// handle).
    pool: AnyPool,
    /// The presence lane: one connection of its own, kept open, used only through
    /// [`SqlLeaseStore::presence_lane`].
    presence: AnyPool,
}

impl SqlLeaseStore {
    /// Opens (creating if missing) the SQLite database file at `path`, switches it to WAL mode
    /// and creates the lease tables if they do not exist.
    ///
    /// Errors: [`LeaseError::Unavailable`] when the file is locked for longer than
    /// [`BUSY_TIMEOUT_SECONDS`]; [`LeaseError::Fatal`] when it cannot be opened or created, or
    /// holds tables of a newer floe.
    pub async fn open_sqlite(path: impl AsRef<Path>) -> Result<Self, LeaseError> {
        sqlx::any::install_default_drivers();
        let url = format!("sqlite:{}?mode=rwc", percent_encode_path(path.as_ref()));
        let options = |connections: u32| {
            pool_options(connections).after_connect(|conn, _| {
                Box::pin(async move {
                    conn.execute(
                        format!(
                            "PRAGMA busy_timeout = {}; PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL;",
                            BUSY_TIMEOUT_SECONDS * 1000
                        )
                        .as_str(),
                    )
                    .await?;
                    Ok(())
                })
            })
        };
        let pool = options(4).connect(&url).await.map_err(map_err)?;
        let presence = options(1).connect(&url).await.map_err(map_err)?;
        let store = SqlLeaseStore { pool, presence };
        store.create_schema(None).await?;
        Ok(store)
    }

    /// Connects to the PostgreSQL lease store of `options`, creating its schema and tables when
    /// missing and `options.create_tables` says so, and checks the tables' version.
    ///
    /// Errors: [`LeaseError::Fatal`] naming `lease_store.url` when the server refuses the login or
    /// the database does not exist, naming `floe setup` when the tables are missing and may not be
    /// created, or when they belong to a newer floe; [`LeaseError::Unavailable`] when the server
    /// cannot be reached (retry).
    pub async fn open_postgres(options: &PostgresOptions) -> Result<Self, LeaseError> {
        sqlx::any::install_default_drivers();
        let url = postgres_url(&options.url, options.ssl_mode)?;
        let search_path = format!("SET search_path TO \"{}\"", options.schema);
        let connect = |connections: u32| {
            let search_path = search_path.clone();
            pool_options(connections)
                // A broken connection fails its statement (retried by the caller) and is
                // dropped; no extra round trip before every statement.
                .test_before_acquire(false)
                .after_connect(move |conn, _| {
                    let search_path = search_path.clone();
                    Box::pin(async move {
                        conn.execute(search_path.as_str()).await?;
                        Ok(())
                    })
                })
                .connect(&url)
        };
        let pool = connect(options.pool_size.max(1))
            .await
            .map_err(|e| at_url(map_err(e), &options.url))?;
        let presence = connect(1)
            .await
            .map_err(|e| at_url(map_err(e), &options.url))?;
        let store = SqlLeaseStore { pool, presence };
        if options.create_tables {
            store.create_schema(Some(&options.schema)).await?;
        }
        match store.schema_version().await {
            Ok(_) => Ok(store),
            Err(LeaseError::Fatal { message }) if message.contains("floe_schema_version") => {
                Err(LeaseError::Fatal {
                    message: format!(
                        "PostgreSQL schema {:?} holds no floe lease tables; create them with `floe setup --config FILE` or set lease_store.create_tables = true ({message})",
                        options.schema
                    ),
                })
            }
            Err(e) => Err(e),
        }
    }

    /// Creates the tables (and, on PostgreSQL, `schema`) when missing and records
    /// [`SCHEMA_VERSION`]; refuses tables of a newer floe. On PostgreSQL the DDL runs in one
    /// transaction under an advisory lock, so processes starting at once do not race on
    /// `CREATE TABLE IF NOT EXISTS` (which is not atomic there).
    async fn create_schema(&self, schema: Option<&str>) -> Result<(), LeaseError> {
        let version_row = "INSERT INTO floe_schema_version (id, version) VALUES (1, $1)
             ON CONFLICT (id) DO NOTHING";
        match schema {
            Some(schema) => {
                let mut tx = self.pool.begin().await.map_err(map_err)?;
                // The key is arbitrary but fixed: "floe" in ASCII.
                sqlx::query("SELECT pg_advisory_xact_lock(1718382437)")
                    .execute(&mut *tx)
                    .await
                    .map_err(map_err)?;
                sqlx::query(&format!("CREATE SCHEMA IF NOT EXISTS \"{schema}\""))
                    .execute(&mut *tx)
                    .await
                    .map_err(map_err)?;
                for statement in SCHEMA {
                    sqlx::query(statement)
                        .execute(&mut *tx)
                        .await
                        .map_err(map_err)?;
                }
                sqlx::query(version_row)
                    .bind(SCHEMA_VERSION)
                    .execute(&mut *tx)
                    .await
                    .map_err(map_err)?;
                tx.commit().await.map_err(map_err)?;
            }
            // SQLite: one statement at a time, each waiting out the busy timeout. In one
            // deferred transaction the first write after a read would fail at once with
            // SQLITE_BUSY_SNAPSHOT when another process wrote in between.
            None => {
                for statement in SCHEMA {
                    sqlx::query(statement)
                        .execute(&self.pool)
                        .await
                        .map_err(map_err)?;
                }
                sqlx::query(version_row)
                    .bind(SCHEMA_VERSION)
                    .execute(&self.pool)
                    .await
                    .map_err(map_err)?;
            }
        }
        self.schema_version().await.map(|_| ())
    }

    /// The version of the lease tables, refusing one newer than [`SCHEMA_VERSION`].
    async fn schema_version(&self) -> Result<i64, LeaseError> {
        let version: Option<i64> =
            sqlx::query_scalar("SELECT version FROM floe_schema_version WHERE id = 1")
                .fetch_optional(&self.pool)
                .await
                .map_err(map_err)?;
        match version {
            Some(v) if v > SCHEMA_VERSION => Err(LeaseError::Fatal {
                message: format!(
                    "the lease tables are at version {v}, written by a newer floe; this floe knows version {SCHEMA_VERSION}: upgrade it"
                ),
            }),
            Some(v) => Ok(v),
            None => Err(LeaseError::Fatal {
                message: "floe_schema_version has no row: not a floe lease store".to_string(),
            }),
        }
    }

    /// Reads a versioned JSON row (`SELECT version, body … WHERE channel = $1`); `set_version`
    /// puts the stored version into the decoded value.
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
    /// `UPDATE … WHERE version = $n`): one row changed, or [`LeaseError::Conflict`] on `item`.
    async fn put_versioned<'q>(
        &self,
        query: sqlx::query::Query<'q, sqlx::Any, sqlx::any::AnyArguments<'q>>,
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

    /// A handle on the same database whose every call goes through the **presence lane**, a
    /// connection of its own that no other call of this process uses: the renewals and
    /// listings that keep this worker's presence alive (a channel's shared presence, a lease
    /// manager's own renewal) never wait for a pooled connection behind the rest of the
    /// traffic. Without it, a worker running a thousand member channels queued its one presence
    /// renewal behind the members' listings, takes and pending batches for up to ~9 s; the
    /// renewal came too late, and every table's leases lapsed at once (fresh review of issue
    /// 43, finding 3).
    ///
    /// What it does not solve: SQLite has **one write lock** for the database file, shared by
    /// every connection of every process. A renewal on the lane still waits for the write in
    /// progress and, with the busy timeout, fails as [`LeaseError::Unavailable`] after
    /// [`BUSY_TIMEOUT_SECONDS`]; SQLite's busy handler sleeps and retries rather than queueing,
    /// so under a steady stream of writes from several processes a waiting renewal can lose
    /// several times in a row. Each write holds the lock for one short statement or
    /// transaction, so that wait is far shorter than the pool's was, but it grows with the
    /// fleet's write rate. On PostgreSQL there is no database-wide lock: a renewal waits only
    /// for a row lock on its own row (a balancer bumping its notice); the lane costs one more
    /// server connection per process.
    pub fn presence_lane(&self) -> SqlLeaseStore {
        SqlLeaseStore {
            pool: self.presence.clone(),
            presence: self.presence.clone(),
        }
    }

    /// Closes the connections (waits for statements in flight).
    pub async fn close(&self) {
        self.pool.close().await;
        self.presence.close().await;
    }
}

/// The options both databases' pools share: `connections` at most; a statement waits for a
/// connection twice the busy timeout.
fn pool_options(connections: u32) -> AnyPoolOptions {
    AnyPoolOptions::new()
        .max_connections(connections)
        .acquire_timeout(Duration::from_secs(BUSY_TIMEOUT_SECONDS * 2))
}

/// Maps a sqlx error once, at the edge, by what the caller can do next.
///
/// Retryable ([`LeaseError::Unavailable`]): I/O errors, pool timeouts; SQLite busy or locked
/// (`SQLITE_BUSY` = 5, `SQLITE_LOCKED` = 6 and their extended codes); PostgreSQL SQLSTATE
/// classes 08 (connection exception), 53 (insufficient resources: too many connections), 57
/// (operator intervention: a server shutting down or restarting), 40001/40P01 (serialization
/// failure, deadlock), 55P03 (lock not available) and 25006 (read-only transaction: a standby
/// after a failover). Anything else (refused login, missing database or table, undecodable
/// value) is [`LeaseError::Fatal`].
fn map_err(err: sqlx::Error) -> LeaseError {
    let retryable = is_retryable(&err);
    crate::telemetry::record_lease_store_error(if retryable { "unavailable" } else { "fatal" });
    if retryable {
        LeaseError::Unavailable {
            message: err.to_string(),
        }
    } else {
        LeaseError::Fatal {
            message: err.to_string(),
        }
    }
}

/// Whether a retry of the failed sqlx call may succeed, by the rules of [`map_err`]; shared with
/// the SQL catalog's connection check ([`crate::catalog`]).
pub(crate) fn is_retryable(err: &sqlx::Error) -> bool {
    match err {
        sqlx::Error::Database(db) => {
            let code = db.code().unwrap_or_default().to_string();
            if db
                .try_downcast_ref::<sqlx::postgres::PgDatabaseError>()
                .is_some()
            {
                ["08", "53", "57"]
                    .iter()
                    .any(|class| code.starts_with(class))
                    || matches!(code.as_str(), "40001" | "40P01" | "55P03" | "25006")
            } else {
                let primary = code.parse::<i32>().ok().map(|c| c & 0xff);
                matches!(primary, Some(5) | Some(6))
            }
        }
        sqlx::Error::Io(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::WorkerCrashed => true,
        _ => false,
    }
}

/// `err` from connecting, with the key to fix named when no retry helps.
fn at_url(err: LeaseError, url: &str) -> LeaseError {
    match err {
        LeaseError::Fatal { message } => LeaseError::Fatal {
            message: format!("lease_store.url ({}): {message}", redact_url(url)),
        },
        other => other,
    }
}

/// The connection URL of `url` with `sslmode` set to `ssl_mode` (replacing one in the URL).
///
/// Errors: [`LeaseError::Fatal`] naming `lease_store.url` when it is not a `postgres://` or
/// `postgresql://` URL.
fn postgres_url(url: &str, ssl_mode: SslMode) -> Result<String, LeaseError> {
    let mut parsed = url::Url::parse(url).map_err(|e| LeaseError::Fatal {
        message: format!("lease_store.url: not a URL: {e}"),
    })?;
    if !matches!(parsed.scheme(), "postgres" | "postgresql") {
        return Err(LeaseError::Fatal {
            message: format!(
                "lease_store.url: scheme {:?} is not postgresql://",
                parsed.scheme()
            ),
        });
    }
    let kept: Vec<(String, String)> = parsed
        .query_pairs()
        .filter(|(k, _)| k != "sslmode")
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect();
    parsed
        .query_pairs_mut()
        .clear()
        .extend_pairs(kept)
        .append_pair("sslmode", ssl_mode.as_str());
    Ok(parsed.to_string())
}

/// `path` as the path part of an `sqlite:` URL: sqlx percent-decodes it, so `?`, `#`, `%` and
/// spaces in a file name survive.
fn percent_encode_path(path: &Path) -> String {
    const KEEP: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
        .remove(b'/')
        .remove(b'.')
        .remove(b'-')
        .remove(b'_');
    percent_encoding::utf8_percent_encode(&path.to_string_lossy(), KEEP).to_string()
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

fn lease_from_row(row: &AnyRow) -> Result<Lease, LeaseError> {
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

fn presence_from_row(row: &AnyRow) -> Result<Presence, LeaseError> {
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
impl LeaseStore for SqlLeaseStore {
    async fn ensure_leases(&self, channel: &str, specs: &[LeaseSpec]) -> Result<(), LeaseError> {
        // One transaction whose first statement writes: it takes the write lock at once, so the
        // busy timeout applies (no read-to-write upgrade deadlock).
        let mut tx = self.pool.begin().await.map_err(map_err)?;
        for spec in specs {
            let parents = serde_json::to_string(&spec.parents).expect("shard ids serialize");
            sqlx::query(
                "INSERT INTO floe_leases (channel, lease_key, owner, lease_counter, heartbeat,
                     checkpoint_hint, parents)
                 VALUES ($1, $2, NULL, 0, 0, NULL, $3)
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
            "SELECT {LEASE_COLUMNS} FROM floe_leases WHERE channel = $1 ORDER BY lease_key"
        ))
        .bind(channel)
        .fetch_all(&self.pool)
        .await
        .map_err(map_err)?;
        // Sorted here, not by the database's collation (PostgreSQL's locale order is not
        // byte order).
        let mut leases = rows
            .iter()
            .map(lease_from_row)
            .collect::<Result<Vec<_>, _>>()?;
        leases.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(leases)
    }

    async fn take_lease(&self, lease: &Lease, worker: &str) -> Result<Lease, LeaseError> {
        let row = sqlx::query(&format!(
            "UPDATE floe_leases SET owner = $1, lease_counter = lease_counter + 1
             WHERE channel = $2 AND lease_key = $3 AND owner IS NOT DISTINCT FROM $4 AND lease_counter = $5
               AND heartbeat = $6
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
             WHERE channel = $1 AND lease_key = $2 AND owner = $3 AND lease_counter = $4
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
             WHERE channel = $1 AND lease_key = $2 AND owner = $3 AND lease_counter = $4",
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
            "DELETE FROM floe_leases WHERE channel = $1 AND lease_key = $2 AND lease_counter = $3",
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
            "SELECT {LEASE_COLUMNS} FROM floe_leases WHERE channel = $1 AND lease_key = $2"
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
             VALUES ($1, $2, 1, 0, '{{}}')
             ON CONFLICT (channel, worker) DO UPDATE SET heartbeat = floe_workers.heartbeat + 1
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
            "SELECT {PRESENCE_COLUMNS} FROM floe_workers WHERE channel = $1 ORDER BY worker"
        ))
        .bind(channel)
        .fetch_all(&self.pool)
        .await
        .map_err(map_err)?;
        let mut presence = rows
            .iter()
            .map(presence_from_row)
            .collect::<Result<Vec<_>, _>>()?;
        presence.sort_by(|a, b| a.worker.cmp(&b.worker));
        Ok(presence)
    }

    async fn notify_worker(
        &self,
        channel: &str,
        worker: &str,
        handoffs: &BTreeMap<ShardId, String>,
    ) -> Result<(), LeaseError> {
        let body = serde_json::to_string(handoffs).expect("handoffs serialize");
        let done = sqlx::query(
            "UPDATE floe_workers SET notice = notice + 1, handoffs = $1
             WHERE channel = $2 AND worker = $3",
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
        sqlx::query("DELETE FROM floe_workers WHERE channel = $1 AND worker = $2")
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
            "UPDATE floe_leases SET checkpoint_hint = $1 WHERE channel = $2 AND lease_key = $3",
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
impl BatchStore for SqlLeaseStore {
    async fn put_batch(&self, batch: &PendingBatch) -> Result<(), LeaseError> {
        let body = serde_json::to_string(batch).expect("batches serialize");
        // Hyphenated lowercase UUID text sorts like the UUID's bytes: ORDER BY batch_id is
        // UUIDv7 time order.
        let id = batch.batch_id.hyphenated().to_string();
        let done = sqlx::query(
            "INSERT INTO floe_pending_batches (channel, batch_id, body) VALUES ($1, $2, $3)
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
            "SELECT body FROM floe_pending_batches WHERE channel = $1 AND batch_id = $2",
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
            "SELECT body FROM floe_pending_batches WHERE channel = $1 ORDER BY batch_id",
        )
        .bind(channel)
        .fetch_all(&self.pool)
        .await
        .map_err(map_err)?;
        let mut batches = bodies
            .iter()
            .map(|b| {
                serde_json::from_str::<PendingBatch>(b).map_err(|e| corrupt("pending batch", e))
            })
            .collect::<Result<Vec<_>, _>>()?;
        // UUIDv7 byte order is write order, whatever the database's collation.
        batches.sort_by_key(|b| b.batch_id);
        Ok(batches)
    }

    async fn finish_batches(
        &self,
        channel: &str,
        committed: &[Uuid],
        rejected: &[Uuid],
    ) -> Result<(), LeaseError> {
        let mut tx = self.pool.begin().await.map_err(map_err)?;
        for id in committed.iter().chain(rejected) {
            sqlx::query("DELETE FROM floe_pending_batches WHERE channel = $1 AND batch_id = $2")
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
            "SELECT version, body FROM floe_channel_state WHERE channel = $1",
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
                "INSERT INTO floe_channel_state (channel, version, body) VALUES ($1, $2, $3)
                 ON CONFLICT (channel) DO NOTHING",
            )
            .bind(&state.channel)
            .bind(to_i64(version)?)
            .bind(body),
            Some(expected) => sqlx::query(
                "UPDATE floe_channel_state SET version = $1, body = $2
                 WHERE channel = $3 AND version = $4",
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
            "SELECT version, body FROM floe_delivered WHERE channel = $1",
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
                "INSERT INTO floe_delivered (channel, version, epoch, body) VALUES ($1, $2, $3, $4)
                 ON CONFLICT (channel) DO NOTHING",
            )
            .bind(&delivered.channel)
            .bind(to_i64(version)?)
            .bind(epoch)
            .bind(body),
            // A stale committer (lower epoch) never moves the checkpoints.
            Some(expected) => sqlx::query(
                "UPDATE floe_delivered SET version = $1, epoch = $2, body = $3
                 WHERE channel = $4 AND version = $5 AND epoch <= $6",
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lease::manager::SharedPresence;

    /// Fresh review of issue 43, finding 3: a worker's presence renewal waited for a pooled
    /// connection behind its thousand member channels' traffic until the presence lapsed.
    #[tokio::test]
    async fn presence_lane_renews_while_every_pooled_connection_is_taken() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqlLeaseStore::open_sqlite(dir.path().join("leases.sqlite"))
            .await
            .unwrap();
        // Every connection of the pool taken, each in an open transaction that has read (as
        // members' statements waiting their turn).
        let mut taken = Vec::new();
        for _ in 0..store.pool.options().get_max_connections() {
            let mut tx = store.pool.begin().await.unwrap();
            sqlx::query("SELECT count(*) FROM floe_leases")
                .fetch_one(&mut *tx)
                .await
                .unwrap();
            taken.push(tx);
        }
        let wait = Duration::from_millis(200);
        assert!(
            tokio::time::timeout(wait, store.list_leases("c"))
                .await
                .is_err(),
            "the pool is exhausted"
        );

        let lane = store.presence_lane();
        let presence =
            SharedPresence::new("c", "w", Duration::from_secs(10), Duration::from_secs(3));
        // Well under the pool's acquire timeout (10 s), after which a renewal queued in the
        // pool would fail.
        let prompt = Duration::from_secs(BUSY_TIMEOUT_SECONDS);
        tokio::time::timeout(prompt, presence.period(&lane))
            .await
            .expect("the presence period finished while the pool was exhausted");
        assert!(presence.valid_until().is_some(), "the presence was renewed");
        assert!(presence.has_listed(), "the presence rows were listed");
        let rows = tokio::time::timeout(prompt, lane.list_presence("c"))
            .await
            .expect("listed while the pool was exhausted")
            .unwrap();
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0].heartbeat, 1);
        drop(taken);
        assert_eq!(store.list_presence("c").await.unwrap(), rows);
    }
}
