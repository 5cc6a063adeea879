//! The raw REST calls floe makes to a Confluent-compatible schema registry (Confluent Schema
//! Registry API reference: `GET /schemas/ids/{id}`, `GET /schemas/ids/{id}/versions`,
//! `GET /subjects/{subject}/versions/{version}`), over the registry's URLs in order, with the
//! answers mapped once to [`RegistryError`].

use std::sync::atomic::{AtomicUsize, Ordering};

use reqwest::header::{HeaderValue, ACCEPT, AUTHORIZATION};
use serde::Deserialize;

use super::{RegistryError, ATTEMPT_TIMEOUT, CONNECT_TIMEOUT};

/// Where a registry is and how floe authenticates to it.
#[derive(Clone)]
pub struct HttpRegistry {
    client: reqwest::Client,
    urls: Vec<reqwest::Url>,
    auth: Option<HeaderValue>,
    /// The URL that answered last: tried first.
    preferred: std::sync::Arc<AtomicUsize>,
}

impl std::fmt::Debug for HttpRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpRegistry")
            .field(
                "urls",
                &self.urls.iter().map(|u| u.as_str()).collect::<Vec<_>>(),
            )
            .field("auth", &self.auth.as_ref().map(|_| "(redacted)"))
            .finish()
    }
}

/// How floe authenticates to the registry (from the environment, never from the file).
#[derive(Clone, PartialEq, Eq)]
pub enum Auth {
    /// No `Authorization` header.
    None,
    /// HTTP basic auth, `user:password`.
    Basic(String),
    /// A bearer token.
    Bearer(String),
}

impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Auth::None => "None",
            Auth::Basic(_) => "Basic(redacted)",
            Auth::Bearer(_) => "Bearer(redacted)",
        })
    }
}

/// A schema reference as the registry lists it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct RawReference {
    /// The import name (Protobuf), the full name (Avro), the URL (JSON Schema).
    pub name: String,
    /// The subject of the referenced schema.
    pub subject: String,
    /// Its version.
    pub version: i64,
}

/// `GET /schemas/ids/{id}` and `GET /subjects/{subject}/versions/{version}`, the fields floe reads.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RawSchema {
    /// The schema text.
    pub schema: String,
    /// `AVRO` (absent), `PROTOBUF` or `JSON`.
    pub schema_type: Option<String>,
    /// The references, when any.
    #[serde(default)]
    pub references: Vec<RawReference>,
    /// The id (subject/version answers only).
    pub id: Option<u32>,
    /// The subject (subject/version answers only).
    pub subject: Option<String>,
    /// The version (subject/version answers only).
    pub version: Option<i64>,
}

/// One element of `GET /schemas/ids/{id}/versions`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct RawSubjectVersion {
    /// The subject.
    pub subject: String,
    /// The version of the subject.
    pub version: i64,
}

#[derive(Deserialize)]
struct RawError {
    error_code: Option<i64>,
    message: Option<String>,
}

impl HttpRegistry {
    /// A client for `urls` (tried in order) with `auth`, trusting the PEM certificates of
    /// `ca_bundle` beside the system roots.
    ///
    /// Errors: [`RegistryError::Refused`] for a URL that does not parse, an unreadable bundle or
    /// a credential that is not a header value.
    pub fn new(
        urls: &[String],
        auth: Auth,
        ca_bundle: Option<&[u8]>,
    ) -> Result<Self, RegistryError> {
        // reqwest's rustls needs a process-wide crypto provider: the aws-lc-rs one the AWS SDK
        // uses. Installing fails harmlessly when one is installed already.
        let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
        let mut builder = reqwest::Client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .timeout(ATTEMPT_TIMEOUT);
        if let Some(pem) = ca_bundle {
            let certs = reqwest::Certificate::from_pem_bundle(pem)
                .map_err(|e| RegistryError::Refused(format!("schema registry ca_bundle: {e}")))?;
            for c in certs {
                builder = builder.add_root_certificate(c);
            }
        }
        let client = builder
            .build()
            .map_err(|e| RegistryError::Refused(format!("schema registry http client: {e}")))?;
        let urls = urls
            .iter()
            .map(|u| {
                reqwest::Url::parse(u).map_err(|e| {
                    RegistryError::Refused(format!("schema registry URL \"{u}\": {e}"))
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let auth = match auth {
            Auth::None => None,
            Auth::Basic(user_pass) => Some(format!(
                "Basic {}",
                base64::Engine::encode(&base64::engine::general_purpose::STANDARD, user_pass)
            )),
            Auth::Bearer(token) => Some(format!("Bearer {token}")),
        }
        .map(|v| {
            let mut v = HeaderValue::from_str(&v).map_err(|_| {
                RegistryError::Refused(
                    "the schema registry credentials are not a valid HTTP header value".into(),
                )
            })?;
            v.set_sensitive(true);
            Ok::<_, RegistryError>(v)
        })
        .transpose()?;
        Ok(HttpRegistry {
            client,
            urls,
            auth,
            preferred: Default::default(),
        })
    }

    /// `GET` of `segments` below the registry's base URL (each segment percent-encoded), on each
    /// URL in turn from the one that answered last, until one answers other than unavailable.
    ///
    /// Errors: [`RegistryError::NotFound`] (404 with the registry's error body: 40401 subject,
    /// 40402 version, 40403 schema), [`RegistryError::Refused`] (401, 403, other 4xx),
    /// [`RegistryError::Unavailable`] (every URL failed to connect, timed out, or answered 5xx,
    /// 429, or a 404 without the registry's error body).
    pub async fn get<T: serde::de::DeserializeOwned>(
        &self,
        segments: &[&str],
    ) -> Result<T, RegistryError> {
        self.get_with_query(segments, &[]).await
    }

    /// [`Self::get`] with the query parameters `query` (`[("deleted", "true")]`).
    pub async fn get_with_query<T: serde::de::DeserializeOwned>(
        &self,
        segments: &[&str],
        query: &[(&str, &str)],
    ) -> Result<T, RegistryError> {
        let first = self.preferred.load(Ordering::Relaxed) % self.urls.len().max(1);
        let mut failures = Vec::new();
        for k in 0..self.urls.len() {
            let i = (first + k) % self.urls.len();
            let mut url = self.urls[i].clone();
            if let Ok(mut path) = url.path_segments_mut() {
                path.pop_if_empty().extend(segments);
            }
            if !query.is_empty() {
                url.query_pairs_mut().extend_pairs(query);
            }
            match self.get_one(&url).await {
                Err(RegistryError::Unavailable(why)) => failures.push(why),
                answered => {
                    self.preferred.store(i, Ordering::Relaxed);
                    return answered.and_then(|body| {
                        serde_json::from_slice(&body).map_err(|e| {
                            RegistryError::Unavailable(format!("GET {url}: unexpected answer: {e}"))
                        })
                    });
                }
            }
        }
        Err(RegistryError::Unavailable(failures.join("; ")))
    }

    async fn get_one(&self, url: &reqwest::Url) -> Result<Vec<u8>, RegistryError> {
        let mut request = self.client.get(url.clone()).header(
            ACCEPT,
            "application/vnd.schemaregistry.v1+json, application/json",
        );
        if let Some(auth) = &self.auth {
            request = request.header(AUTHORIZATION, auth.clone());
        }
        let shown = redact(url);
        let response = request
            .send()
            .await
            .map_err(|e| RegistryError::Unavailable(format!("GET {shown}: {}", describe(&e))))?;
        let status = response.status();
        let body = response
            .bytes()
            .await
            .map_err(|e| RegistryError::Unavailable(format!("GET {shown}: {}", describe(&e))))?;
        if status.is_success() {
            return Ok(body.to_vec());
        }
        let err: Option<RawError> = serde_json::from_slice(&body).ok();
        let detail = match &err {
            Some(RawError {
                error_code: Some(code),
                message: Some(m),
            }) => format!("{code} {m}"),
            _ => String::from_utf8_lossy(&body[..body.len().min(200)]).into_owned(),
        };
        let why = format!("GET {shown}: HTTP {}: {detail}", status.as_u16());
        // Only the registry's own "not found" (a JSON body with `error_code` 40401 subject, 40402
        // version, 40403 schema, or 404 for an unknown path) says the thing does not exist; a
        // bare 404 (an ingress's default backend, a proxy in front of a restarting registry) is
        // an outage, retried, never a reason to dead-letter records.
        let registry_not_found = matches!(
            err.as_ref().and_then(|e| e.error_code),
            Some(404 | 40400..=40499)
        );
        Err(match status.as_u16() {
            404 if registry_not_found => RegistryError::NotFound(why),
            404 => RegistryError::Unavailable(why),
            408 | 429 => RegistryError::Unavailable(why),
            s if s >= 500 => RegistryError::Unavailable(why),
            _ => RegistryError::Refused(why),
        })
    }
}

/// The URL without user info (never logged).
fn redact(url: &reqwest::Url) -> String {
    let mut u = url.clone();
    let _ = u.set_username("");
    let _ = u.set_password(None);
    u.to_string()
}

/// A reqwest error with its causes, one line.
fn describe(e: &reqwest::Error) -> String {
    let mut shown = if e.is_timeout() {
        "timed out".to_string()
    } else {
        e.to_string()
    };
    let mut cause = std::error::Error::source(e);
    while let Some(c) = cause {
        let text = c.to_string();
        if !shown.contains(&text) {
            shown = format!("{shown}: {text}");
        }
        cause = c.source();
    }
    shown
}
