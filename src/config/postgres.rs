//! Settings of a PostgreSQL connection (`[lease_store] kind = "postgres"`, an SQL catalog's
//! `postgresql://` URI): plain data, used by the lease store ([`crate::lease::sql`]) and the
//! catalog. Passwords never reach a `Debug` or a message: see [`redact_url`].

use std::str::FromStr;

/// The `sslmode` of a PostgreSQL connection, named as libpq names it (PostgreSQL documentation,
/// "SSL Support", table "SSL Mode Descriptions").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SslMode {
    /// No TLS.
    Disable,
    /// TLS when the server offers it, else plain (libpq's default).
    Prefer,
    /// TLS, without checking the server's certificate.
    Require,
    /// TLS, with the certificate checked against the roots (`sslrootcert` in the URL, else the
    /// Mozilla roots) and the host name.
    VerifyFull,
}

impl SslMode {
    /// libpq's name of the mode (`disable`, `prefer`, `require`, `verify-full`).
    pub fn as_str(self) -> &'static str {
        match self {
            SslMode::Disable => "disable",
            SslMode::Prefer => "prefer",
            SslMode::Require => "require",
            SslMode::VerifyFull => "verify-full",
        }
    }
}

impl FromStr for SslMode {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "disable" => Ok(SslMode::Disable),
            "prefer" => Ok(SslMode::Prefer),
            "require" => Ok(SslMode::Require),
            "verify-full" => Ok(SslMode::VerifyFull),
            other => Err(format!(
                "\"{other}\" is not an sslmode: disable, prefer, require or verify-full"
            )),
        }
    }
}

/// How to reach a PostgreSQL lease store (`[lease_store] kind = "postgres"`).
#[derive(Clone, PartialEq, Eq)]
pub struct PostgresOptions {
    /// `postgresql://[user[:password]@]host[:port]/database[?param=value…]`; what it leaves out
    /// comes from the standard `PGHOST`, `PGPORT`, `PGUSER`, `PGPASSWORD`, `PGDATABASE` variables
    /// and `~/.pgpass`, as with libpq. Holds a password: never logged (see the `Debug` impl).
    pub url: String,
    /// TLS mode; wins over an `sslmode` in the URL.
    pub ssl_mode: SslMode,
    /// Most connections the process keeps open (at least 1), besides the presence lane's one
    /// ([`crate::lease::sql::SqlLeaseStore::presence_lane`]).
    pub pool_size: u32,
    /// The schema holding floe's tables (an SQL identifier: `[a-z_][a-z0-9_]*`, at most 63).
    pub schema: String,
    /// Create the schema and tables when missing (`floe setup` always does).
    pub create_tables: bool,
}

impl std::fmt::Debug for PostgresOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresOptions")
            .field("url", &redact_url(&self.url))
            .field("ssl_mode", &self.ssl_mode)
            .field("pool_size", &self.pool_size)
            .field("schema", &self.schema)
            .field("create_tables", &self.create_tables)
            .finish()
    }
}

/// `url` with its password replaced by `***`, for messages and logs.
pub fn redact_url(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(mut parsed) if parsed.password().is_some() => {
            let _ = parsed.set_password(Some("***"));
            parsed.to_string()
        }
        Ok(parsed) => parsed.to_string(),
        Err(_) => "(unparsable URL)".to_string(),
    }
}
