//! AWS SigV4 signing of REST catalog requests (`[channel.destination.catalog]` `kind = "rest"`,
//! `sigv4 = true`): the S3 Tables Iceberg REST endpoint
//! (`https://s3tables.REGION.amazonaws.com/iceberg`, signing name `s3tables`), the Glue one
//! (`https://glue.REGION.amazonaws.com/iceberg`, `glue`), and REST catalogs behind API Gateway IAM
//! authorization (`execute-api`).
//!
//! iceberg-catalog-rest 0.10.1 authenticates with bearer tokens only and has no per-request hook,
//! so floe puts an in-process signing relay between the catalog client and the server:
//!
//! ```text
//!  iceberg-catalog-rest ──http──► relay on 127.0.0.1:<random port> ──https + SigV4──► uri
//!    Authorization: Bearer <secret>   checks the secret, drops it,        (the configured one)
//!                                     signs method, path, query,
//!                                     headers and body SHA-256
//! ```
//!
//! The relay listens on the loopback interface only and serves only requests that carry a
//! per-catalog random secret (244 bits) as their bearer token, so no other local process can make
//! it sign for it. Requests are signed with AWS Signature Version 4 (AWS Identity and Access
//! Management User Guide, "AWS Signature Version 4 for API requests") by `aws-sigv4`, with the
//! `[aws]` credential chain (environment, profile, SSO, web identity, ECS, EC2 instance
//! metadata); credentials are cached until 5 minutes before they expire (unexpiring ones are
//! fetched again every 5 minutes). A `/v1/config` answer whose `overrides.uri` moves the catalog
//! elsewhere moves the relay's upstream there, so every request stays signed.
//!
//! Errors reach the catalog client as HTTP answers in the REST specification's error model
//! (`{"error": {"message", "type", "code"}}`): 502 when no credentials can be had or the server
//! cannot be reached, 504 when it does not answer within
//! [`crate::catalog::REST_REQUEST_TIMEOUT`]; the server's own answers (403 for a refused
//! signature or missing permission) pass through unchanged.

use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant, SystemTime};

use aws_credential_types::provider::{ProvideCredentials, SharedCredentialsProvider};
use aws_credential_types::Credentials;
use aws_sigv4::http_request::{
    sign, PayloadChecksumKind, SignableBody, SignableRequest, SigningSettings,
};
use aws_sigv4::sign::v4;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::{Bytes, Incoming};
use hyper::header::{self, HeaderMap, HeaderName, HeaderValue};
use hyper::{Request, Response, StatusCode};
use tokio::net::TcpListener;

use crate::catalog::{REST_CONNECT_TIMEOUT, REST_REQUEST_TIMEOUT};
use crate::health::serve_http1;

/// Largest request body the relay signs (bytes); catalog requests are JSON of a few KiB to MiB.
pub const MAX_SIGNED_BODY: usize = 64 * 1024 * 1024;

/// Credentials are fetched again this long before they expire.
const REFRESH_BEFORE_EXPIRY: Duration = Duration::from_secs(300);

/// Credentials without an expiry time are fetched again after this long.
const UNEXPIRING_REFRESH: Duration = Duration::from_secs(300);

/// Bound on one call of the credential provider (IMDS, STS, SSO, a credential process).
pub const CREDENTIALS_TIMEOUT: Duration = Duration::from_secs(30);

/// Cached credentials still this far from expiring are used when renewing them fails.
const STILL_VALID: Duration = Duration::from_secs(30);

/// How long `credentials` may be used before asking the provider again: until
/// [`REFRESH_BEFORE_EXPIRY`] before they expire, [`UNEXPIRING_REFRESH`] without an expiry, and
/// for credentials handed out closer to their expiry, half their remaining time (at most a
/// minute), so that a provider is not asked on every request.
fn refresh_in(credentials: &Credentials) -> Duration {
    let Some(expiry) = credentials.expiry() else {
        return UNEXPIRING_REFRESH;
    };
    let left = expiry.duration_since(SystemTime::now()).unwrap_or_default();
    left.checked_sub(REFRESH_BEFORE_EXPIRY)
        .filter(|d| !d.is_zero())
        .unwrap_or_else(|| (left / 2).min(Duration::from_secs(60)))
}

/// Headers not forwarded to the server: hop-by-hop ones (RFC 9110 §7.6.1), the relay's own
/// bearer secret, and those the outgoing request sets itself.
const NOT_FORWARDED: [HeaderName; 9] = [
    header::AUTHORIZATION,
    header::HOST,
    header::CONTENT_LENGTH,
    header::CONNECTION,
    header::TRANSFER_ENCODING,
    header::TE,
    header::TRAILER,
    header::UPGRADE,
    header::PROXY_AUTHORIZATION,
];

/// What requests are signed for: the AWS service and region, and the credentials to sign with.
pub struct SigV4Signer {
    signing_name: String,
    signing_region: String,
    provider: SharedCredentialsProvider,
    /// The credentials last fetched, and when to fetch new ones.
    cached: tokio::sync::Mutex<Option<(Credentials, Instant)>>,
}

impl std::fmt::Debug for SigV4Signer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SigV4Signer")
            .field("signing_name", &self.signing_name)
            .field("signing_region", &self.signing_region)
            .finish_non_exhaustive()
    }
}

impl SigV4Signer {
    /// Signs for service `signing_name` (`s3tables`, `glue`, `execute-api`) in `signing_region`
    /// with credentials of `provider`.
    pub fn new(
        signing_name: impl Into<String>,
        signing_region: impl Into<String>,
        provider: SharedCredentialsProvider,
    ) -> Self {
        Self {
            signing_name: signing_name.into(),
            signing_region: signing_region.into(),
            provider,
            cached: tokio::sync::Mutex::new(None),
        }
    }

    /// The credentials to sign with: the cached ones until their refresh time ([`refresh_in`]);
    /// then new ones from the provider (bounded by [`CREDENTIALS_TIMEOUT`]). When the provider
    /// fails (an STS, SSO or instance-metadata hiccup), cached credentials that are still valid
    /// for 30 seconds are used, and the provider is asked again 30 seconds later.
    ///
    /// Errors: the provider's failure, readable (`no credentials in the chain: …`), when no
    /// cached credentials are still valid.
    async fn credentials(&self) -> Result<Credentials, String> {
        let mut cached = self.cached.lock().await;
        if let Some((credentials, refresh_at)) = cached.as_ref() {
            if Instant::now() < *refresh_at {
                return Ok(credentials.clone());
            }
        }
        let fetched =
            tokio::time::timeout(CREDENTIALS_TIMEOUT, self.provider.provide_credentials()).await;
        let why = match fetched {
            Ok(Ok(credentials)) => {
                *cached = Some((
                    credentials.clone(),
                    Instant::now() + refresh_in(&credentials),
                ));
                return Ok(credentials);
            }
            Ok(Err(e)) => aws_sdk_s3::error::DisplayErrorContext(e).to_string(),
            Err(_) => {
                format!("the credential provider did not answer within {CREDENTIALS_TIMEOUT:?}")
            }
        };
        match cached.as_mut() {
            Some((credentials, refresh_at))
                if credentials
                    .expiry()
                    .is_none_or(|e| e > SystemTime::now() + STILL_VALID) =>
            {
                tracing::warn!(error = %why, "sigv4: cannot renew AWS credentials, signing with the cached ones");
                *refresh_at = Instant::now() + STILL_VALID;
                Ok(credentials.clone())
            }
            _ => Err(why),
        }
    }

    /// Adds the SigV4 headers (`Authorization`, `X-Amz-Date`, `X-Amz-Content-SHA256`,
    /// `X-Amz-Security-Token` for temporary credentials) to `request`, signed at `time` over its method, URI, headers and
    /// the SHA-256 of its body.
    ///
    /// Errors: a header value that is not visible ASCII, or a URI that cannot be signed.
    pub fn sign_at(
        &self,
        request: &mut hyper::http::Request<Bytes>,
        credentials: &Credentials,
        time: SystemTime,
    ) -> Result<(), String> {
        self.sign_with(request, credentials, time, signing_settings())
    }

    /// [`SigV4Signer::sign_at`] with `settings`.
    fn sign_with(
        &self,
        request: &mut hyper::http::Request<Bytes>,
        credentials: &Credentials,
        time: SystemTime,
        settings: SigningSettings,
    ) -> Result<(), String> {
        let identity = credentials.clone().into();
        let params = v4::SigningParams::builder()
            .identity(&identity)
            .region(&self.signing_region)
            .name(&self.signing_name)
            .time(time)
            .settings(settings)
            .build()
            .map_err(|e| e.to_string())?
            .into();
        let mut headers = Vec::with_capacity(request.headers().len());
        for (name, value) in request.headers() {
            let value = value
                .to_str()
                .map_err(|_| format!("header {name} is not visible ASCII"))?;
            headers.push((name.as_str(), value));
        }
        let uri = request.uri().to_string();
        let signable = SignableRequest::new(
            request.method().as_str(),
            &uri,
            headers.into_iter(),
            SignableBody::Bytes(request.body()),
        )
        .map_err(|e| e.to_string())?;
        let (instructions, _signature) = sign(signable, &params)
            .map_err(|e| e.to_string())?
            .into_parts();
        instructions.apply_to_request_http1x(request);
        Ok(())
    }
}

/// SigV4 settings: the defaults, plus the `X-Amz-Content-SHA256` header (as Iceberg Java's
/// `RESTSigV4Signer` sends).
fn signing_settings() -> SigningSettings {
    let mut settings = SigningSettings::default();
    settings.payload_checksum_kind = PayloadChecksumKind::XAmzSha256;
    settings
}

/// A running signing relay; it stops when dropped. Its `Debug` output leaves the secret out.
pub struct SigningRelay {
    /// `http://127.0.0.1:<port>`: the `uri` the REST catalog client is given.
    pub base: String,
    /// The bearer token the relay accepts (the REST catalog client's `token`).
    pub secret: String,
    task: tokio::task::JoinHandle<()>,
}

impl std::fmt::Debug for SigningRelay {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SigningRelay")
            .field("base", &self.base)
            .finish_non_exhaustive()
    }
}

impl Drop for SigningRelay {
    fn drop(&mut self) {
        self.task.abort();
    }
}

struct Relay {
    /// Where requests go: the configured `uri` (or the server's `overrides.uri`), no trailing
    /// `/`.
    upstream: RwLock<String>,
    base: String,
    secret: String,
    signer: SigV4Signer,
    client: reqwest::Client,
}

/// Starts a relay on `127.0.0.1:<random port>` that signs requests with `signer` and sends them
/// to `upstream` (`https://s3tables.us-east-1.amazonaws.com/iceberg`; the path after the relay's
/// address is appended).
///
/// Errors: the loopback port cannot be bound, or the HTTP client cannot be built.
pub async fn start_signing_relay(
    upstream: &str,
    signer: SigV4Signer,
) -> std::io::Result<SigningRelay> {
    let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
    let base = format!("http://{}", listener.local_addr()?);
    let secret = format!(
        "{}{}",
        uuid::Uuid::new_v4().simple(),
        uuid::Uuid::new_v4().simple()
    );
    let client = reqwest::Client::builder()
        .connect_timeout(REST_CONNECT_TIMEOUT)
        // Shorter than the catalog client's bound, so that it sees the relay's 504.
        .timeout(REST_REQUEST_TIMEOUT - Duration::from_secs(5))
        // A redirect would carry the signed headers (the session token) elsewhere: pass it on.
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .map_err(std::io::Error::other)?;
    let relay = Arc::new(Relay {
        upstream: RwLock::new(upstream.trim_end_matches('/').to_owned()),
        base: base.clone(),
        secret: secret.clone(),
        signer,
        client,
    });
    let task = tokio::spawn(serve_http1(listener, "sigv4 relay", move |req| {
        let relay = relay.clone();
        async move { relay.answer(req).await }
    }));
    Ok(SigningRelay { base, secret, task })
}

/// A request the relay does not send on, as the REST error model's status, type and message.
struct Refusal(StatusCode, &'static str, String);

impl Relay {
    async fn answer(&self, req: Request<Incoming>) -> Response<Full<Bytes>> {
        match self.forward(req).await {
            Ok(response) => response,
            Err(Refusal(status, kind, message)) => {
                if status != StatusCode::FORBIDDEN {
                    tracing::warn!(%status, "sigv4 relay: {message}");
                }
                let body = serde_json::json!({
                    "error": {"message": message, "type": kind, "code": status.as_u16()}
                });
                let mut response = Response::new(Full::new(Bytes::from(body.to_string())));
                *response.status_mut() = status;
                response.headers_mut().insert(
                    header::CONTENT_TYPE,
                    HeaderValue::from_static("application/json"),
                );
                response
            }
        }
    }

    /// Checks the secret, signs `req` and sends it to the upstream server; returns its answer.
    async fn forward(&self, req: Request<Incoming>) -> Result<Response<Full<Bytes>>, Refusal> {
        let expected = format!("Bearer {}", self.secret);
        let given = req.headers().get(header::AUTHORIZATION);
        if !given.is_some_and(|v| constant_time_eq(v.as_bytes(), expected.as_bytes())) {
            return Err(Refusal(
                StatusCode::FORBIDDEN,
                "NotAuthorizedException",
                "floe's sigv4 relay serves only floe's REST catalog client".into(),
            ));
        }
        let (parts, body) = req.into_parts();
        let body = Limited::new(body, MAX_SIGNED_BODY)
            .collect()
            .await
            .map_err(|e| {
                Refusal(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    "BadRequestException",
                    format!("request body not relayed: {e}"),
                )
            })?
            .to_bytes();
        // `+` in a query is a space to aws-sigv4 (signed `%20`) but a plus to AWS: send `%20`.
        let path = match parts.uri.query() {
            Some(query) => format!("{}?{}", parts.uri.path(), query.replace('+', "%20")),
            None => parts.uri.path().to_owned(),
        };
        let url = format!(
            "{}{path}",
            self.upstream.read().expect("upstream lock").as_str()
        );
        let mut request = hyper::http::Request::new(body);
        *request.method_mut() = parts.method.clone();
        *request.uri_mut() = url.parse().map_err(|e| {
            Refusal(
                StatusCode::BAD_GATEWAY,
                "ServiceUnavailableException",
                format!("{url}: not a URI: {e}"),
            )
        })?;
        let mut headers = HeaderMap::with_capacity(parts.headers.len());
        for (name, value) in &parts.headers {
            if !NOT_FORWARDED.contains(name) {
                headers.append(name.clone(), value.clone());
            }
        }
        *request.headers_mut() = headers;
        let credentials = self.signer.credentials().await.map_err(|e| {
            Refusal(
                StatusCode::BAD_GATEWAY,
                "ServiceUnavailableException",
                format!("no AWS credentials to sign REST catalog requests with: {e}"),
            )
        })?;
        self.signer
            .sign_at(&mut request, &credentials, SystemTime::now())
            .map_err(|e| {
                Refusal(
                    StatusCode::BAD_GATEWAY,
                    "ServiceUnavailableException",
                    format!("{url}: cannot sign: {e}"),
                )
            })?;
        let request = reqwest::Request::try_from(request).map_err(|e| {
            Refusal(
                StatusCode::BAD_GATEWAY,
                "ServiceUnavailableException",
                format!("{url}: {e}"),
            )
        })?;
        let unreachable = |e: reqwest::Error| {
            let status = if e.is_timeout() {
                StatusCode::GATEWAY_TIMEOUT
            } else {
                StatusCode::BAD_GATEWAY
            };
            Refusal(
                status,
                "ServiceUnavailableException",
                format!("{url}: {}", error_chain(&e)),
            )
        };
        let answer = self.client.execute(request).await.map_err(unreachable)?;
        let status = answer.status();
        let mut headers = answer.headers().clone();
        let mut body = answer.bytes().await.map_err(unreachable)?;
        if status.is_success() && parts.uri.path().ends_with("/v1/config") {
            body = self.follow_uri_override(body);
        }
        for name in NOT_FORWARDED {
            headers.remove(name);
        }
        let mut response = Response::new(Full::new(body));
        *response.status_mut() = status;
        *response.headers_mut() = headers;
        Ok(response)
    }

    /// A `/v1/config` answer whose `overrides.uri` names another base URI on the same scheme and
    /// host: later requests go there; another scheme or host is ignored (signed requests carry
    /// the session token). Either way the client is told to keep using the relay.
    fn follow_uri_override(&self, body: Bytes) -> Bytes {
        let Ok(mut config) = serde_json::from_slice::<serde_json::Value>(&body) else {
            return body;
        };
        let Some(uri) = config
            .pointer_mut("/overrides/uri")
            .and_then(|u| u.as_str().map(str::to_owned))
        else {
            return body;
        };
        let uri = uri.trim_end_matches('/').to_owned();
        let origin = |u: &str| -> String {
            let (scheme, rest) = u.split_once("://").unwrap_or(("", u));
            format!("{scheme}://{}", rest.split('/').next().unwrap_or_default())
        };
        let mut upstream = self.upstream.write().expect("upstream lock");
        if origin(&uri) == origin(&upstream) {
            tracing::info!(uri, "rest catalog server moved the catalog (overrides.uri)");
            *upstream = uri;
        } else {
            tracing::warn!(uri, upstream = %*upstream, "rest catalog server's overrides.uri is on another scheme or host: ignored, requests stay signed for the configured uri");
        }
        drop(upstream);
        config["overrides"]["uri"] = serde_json::Value::String(self.base.clone());
        Bytes::from(config.to_string())
    }
}

/// Compares two byte strings in time independent of where they differ.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// `e` and its sources, `outer: inner: …` (reqwest's own message omits the cause).
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The example of the AWS SigV4 documentation ("Create a signed AWS API request", the
    /// IAM `ListUsers` GET request of the AWS General Reference's signature test suite).
    #[test]
    fn signs_the_aws_documentation_example_to_its_published_signature() {
        let credentials = Credentials::new(
            "AKIDEXAMPLE",
            "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
            None,
            None,
            "test",
        );
        let signer = SigV4Signer::new(
            "iam",
            "us-east-1",
            SharedCredentialsProvider::new(credentials.clone()),
        );
        let mut request = hyper::http::Request::new(Bytes::new());
        *request.uri_mut() = "https://iam.amazonaws.com/?Action=ListUsers&Version=2010-05-08"
            .parse()
            .unwrap();
        request.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/x-www-form-urlencoded; charset=utf-8"),
        );
        let time = SystemTime::UNIX_EPOCH + Duration::from_secs(1_440_938_160); // 20150830T123600Z
                                                                                // The published example signs no X-Amz-Content-SHA256 header (aws-sigv4's default).
        signer
            .sign_with(&mut request, &credentials, time, SigningSettings::default())
            .unwrap();
        let authorization = request.headers()[header::AUTHORIZATION].to_str().unwrap();
        assert_eq!(
            authorization,
            "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/iam/aws4_request, \
             SignedHeaders=content-type;host;x-amz-date, \
             Signature=5d672d79c15b13162d9279b0855cfba6789a8edb4c82c400e06b5924a6f2b5d7"
        );
    }

    #[test]
    fn secrets_compare_by_content_and_length() {
        assert!(constant_time_eq(b"Bearer abc", b"Bearer abc"));
        assert!(!constant_time_eq(b"Bearer abc", b"Bearer abd"));
        assert!(!constant_time_eq(b"Bearer ab", b"Bearer abc"));
    }
}
