//! TEST FIXTURE: checks AWS Signature Version 4 on requests to the REST catalog fixture, as the
//! AWS Iceberg REST endpoints (S3 Tables, Glue) do. Written from the specification (AWS IAM User
//! Guide, "Create a signed AWS API request": canonical request, string to sign, signing key) with
//! HMAC-SHA256 of its own, not with the `aws-sigv4` crate floe signs with, so the two check each
//! other; PyIceberg's signer (botocore's `SigV4Auth`) is checked by the same code.

use std::time::{Duration, SystemTime};

use hmac::{Hmac, KeyInit, Mac};
use hyper::body::Bytes;
use hyper::Request;
use percent_encoding::{percent_decode_str, utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};
use sha2::{Digest, Sha256};

/// Credentials and scope the fixture accepts signatures for.
#[derive(Debug, Clone)]
pub struct FixtureSigV4 {
    /// Access key id of the only accepted credentials.
    pub access_key_id: String,
    /// Its secret access key.
    pub secret_access_key: String,
    /// Region in the credential scope (`us-east-1`).
    pub region: String,
    /// Service (signing name) in the credential scope (`s3tables`).
    pub service: String,
    /// Session token of temporary credentials: `X-Amz-Security-Token` must carry it, signed.
    pub session_token: Option<String>,
}

/// Characters left as they are by SigV4's URI encoding: `A-Z a-z 0-9 - _ . ~`.
const UNRESERVED: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');

/// Largest clock difference accepted between `X-Amz-Date` and now (AWS: 15 minutes).
const MAX_SKEW: Duration = Duration::from_secs(15 * 60);

fn hmac(key: &[u8], data: &str) -> Vec<u8> {
    let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("any key length");
    mac.update(data.as_bytes());
    mac.finalize().into_bytes().to_vec()
}

fn sha256_hex(data: &[u8]) -> String {
    hex::encode(Sha256::digest(data))
}

/// Checks `req`'s `Authorization: AWS4-HMAC-SHA256 …` header against `expected`; `Err` is the
/// reason a server would give (the canonical request included when the signature differs).
pub fn verify(expected: &FixtureSigV4, req: &Request<Bytes>) -> Result<(), String> {
    let header = |name: &str| -> Vec<String> {
        req.headers()
            .get_all(name)
            .iter()
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
            .collect()
    };
    let authorization = header("authorization")
        .pop()
        .ok_or("missing Authorization")?;
    let fields = authorization
        .strip_prefix("AWS4-HMAC-SHA256 ")
        .ok_or("Authorization is not AWS4-HMAC-SHA256")?;
    let mut credential = None;
    let mut signed_headers = None;
    let mut signature = None;
    for field in fields.split(',').map(str::trim) {
        match field.split_once('=') {
            Some(("Credential", v)) => credential = Some(v),
            Some(("SignedHeaders", v)) => signed_headers = Some(v),
            Some(("Signature", v)) => signature = Some(v),
            _ => return Err(format!("unexpected Authorization field {field:?}")),
        }
    }
    let (credential, signed_headers, signature) = match (credential, signed_headers, signature) {
        (Some(c), Some(h), Some(s)) => (c, h, s),
        _ => return Err("Authorization lacks Credential, SignedHeaders or Signature".into()),
    };
    let scope: Vec<&str> = credential.split('/').collect();
    let [key_id, date, region, service, "aws4_request"] = scope.as_slice() else {
        return Err(format!("malformed credential scope {credential}"));
    };
    if *key_id != expected.access_key_id {
        return Err(format!("InvalidClientTokenId: unknown access key {key_id}"));
    }
    if (*region, *service) != (expected.region.as_str(), expected.service.as_str()) {
        return Err(format!(
            "credential scope {region}/{service}, expected {}/{}",
            expected.region, expected.service
        ));
    }
    if let Some(token) = &expected.session_token {
        if header("x-amz-security-token").pop().as_ref() != Some(token) {
            return Err("InvalidClientTokenId: missing or wrong X-Amz-Security-Token".into());
        }
        if !signed_headers
            .split(';')
            .any(|h| h == "x-amz-security-token")
        {
            return Err("X-Amz-Security-Token is not signed".into());
        }
    }
    let amz_date = header("x-amz-date").pop().ok_or("missing X-Amz-Date")?;
    check_time(&amz_date, date)?;
    let names: Vec<&str> = signed_headers.split(';').collect();
    if !names.contains(&"host") || !names.contains(&"x-amz-date") {
        return Err("SignedHeaders must include host and x-amz-date".into());
    }
    let mut sorted = names.clone();
    sorted.sort_unstable();
    if sorted != names
        || names
            .iter()
            .any(|n| n.chars().any(|c| c.is_ascii_uppercase()))
    {
        return Err(format!(
            "SignedHeaders {signed_headers} are not lowercase and sorted"
        ));
    }
    let mut canonical_headers = String::new();
    for name in &names {
        let values = header(name);
        if values.is_empty() {
            return Err(format!("signed header {name} is missing"));
        }
        let values: Vec<String> = values
            .iter()
            .map(|v| v.split_whitespace().collect::<Vec<_>>().join(" "))
            .collect();
        canonical_headers.push_str(&format!("{name}:{}\n", values.join(",")));
    }
    let canonical_request = format!(
        "{}\n{}\n{}\n{canonical_headers}\n{signed_headers}\n{}",
        req.method(),
        canonical_uri(req.uri().path()),
        canonical_query(req.uri().query().unwrap_or("")),
        sha256_hex(req.body()),
    );
    let string_to_sign = format!(
        "AWS4-HMAC-SHA256\n{amz_date}\n{date}/{region}/{service}/aws4_request\n{}",
        sha256_hex(canonical_request.as_bytes())
    );
    let mut key = hmac(
        format!("AWS4{}", expected.secret_access_key).as_bytes(),
        date,
    );
    for part in [*region, *service, "aws4_request"] {
        key = hmac(&key, part);
    }
    let computed = hex::encode(hmac(&key, &string_to_sign));
    if computed != signature {
        return Err(format!(
            "SignatureDoesNotMatch: the request signature does not match; canonical request:\n{canonical_request}"
        ));
    }
    Ok(())
}

/// The canonical URI of a non-S3 service: every path segment URI-encoded again (the path as sent
/// is encoded once already), `/` for an empty path.
fn canonical_uri(path: &str) -> String {
    if path.is_empty() {
        return "/".into();
    }
    path.split('/')
        .map(|segment| utf8_percent_encode(segment, UNRESERVED).to_string())
        .collect::<Vec<_>>()
        .join("/")
}

/// The canonical query string: parameters decoded, URI-encoded again, sorted by name then value.
fn canonical_query(query: &str) -> String {
    let encode = |s: &str| {
        let decoded = percent_decode_str(s).decode_utf8_lossy().into_owned();
        utf8_percent_encode(&decoded, UNRESERVED).to_string()
    };
    let mut pairs: Vec<(String, String)> = query
        .split('&')
        .filter(|kv| !kv.is_empty())
        .map(|kv| {
            let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
            (encode(k), encode(v))
        })
        .collect();
    pairs.sort();
    pairs
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join("&")
}

/// `X-Amz-Date` (`20261129T163000Z`) must be on the scope's `date` and within [`MAX_SKEW`] of now.
fn check_time(amz_date: &str, date: &str) -> Result<(), String> {
    if amz_date.len() != 16 || !amz_date.starts_with(date) {
        return Err(format!(
            "X-Amz-Date {amz_date} does not match the scope date {date}"
        ));
    }
    let rfc3339 = format!(
        "{}-{}-{}T{}:{}:{}Z",
        &amz_date[0..4],
        &amz_date[4..6],
        &amz_date[6..8],
        &amz_date[9..11],
        &amz_date[11..13],
        &amz_date[13..15]
    );
    let at = humantime::parse_rfc3339(&rfc3339).map_err(|e| format!("X-Amz-Date: {e}"))?;
    let now = SystemTime::now();
    let skew = now
        .duration_since(at)
        .or_else(|_| at.duration_since(now))
        .unwrap_or_default();
    if skew > MAX_SKEW {
        return Err(format!(
            "RequestExpired: X-Amz-Date {amz_date} is {skew:?} off"
        ));
    }
    Ok(())
}
