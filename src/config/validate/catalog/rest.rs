//! Validation of `[channel.destination.catalog]` with `kind = "rest"` (an Iceberg REST catalog).

use crate::config::file::RestCatalogSection;
use crate::config::validate::Checker;
use crate::config::{PropertyValue, RestAuth, RestCatalogConfig};

impl Checker<'_> {
    /// Validates a REST catalog section at key path `p`: an `http(s)://` URI, at most one way to
    /// authenticate (a token, OAuth2 credentials or SigV4), secrets from the environment.
    pub(super) fn rest_catalog(
        &mut self,
        p: &str,
        mut s: RestCatalogSection,
    ) -> Option<RestCatalogConfig> {
        let mut ok = true;
        let uri = self.http_uri(&format!("{p}.uri"), &s.uri);
        if let Some(endpoint) = &s.oauth2_server_uri {
            ok &= self
                .http_uri(&format!("{p}.oauth2_server_uri"), endpoint)
                .is_some();
        }
        if let Some(warehouse) = &s.warehouse {
            if warehouse.trim().is_empty() {
                ok = false;
                self.error(
                    format!("{p}.warehouse"),
                    "must not be empty (leave it out to use the server's default)",
                );
            }
        }
        if let Some(scope) = &s.scope {
            if scope.trim().is_empty() {
                ok = false;
                self.error(format!("{p}.scope"), "must not be empty");
            }
        }
        let auth = self.rest_auth(p, &mut s, uri.as_deref());
        if let Some(RestAuth::Token(PropertyValue::FromEnv { var, value })) = &auth {
            if value.trim().is_empty() || value.contains(['\r', '\n']) {
                ok = false;
                self.error(
                    format!("{p}.token"),
                    format!("environment variable {var} does not hold a bearer token (empty, or a line break)"),
                );
            }
        }
        if (s.oauth2_server_uri.is_some() || s.scope.is_some())
            && !matches!(auth, Some(RestAuth::OAuth2 { .. }))
            && auth.is_some()
        {
            ok = false;
            let key = if s.oauth2_server_uri.is_some() {
                "oauth2_server_uri"
            } else {
                "scope"
            };
            self.error(
                format!("{p}.{key}"),
                "applies only to OAuth2 client credentials (`credential`, or `client_id` + `client_secret`)",
            );
        }
        if s.sigv4 != Some(true) {
            for (key, set) in [
                ("signing_name", s.signing_name.is_some()),
                ("signing_region", s.signing_region.is_some()),
            ] {
                if set {
                    ok = false;
                    self.error(format!("{p}.{key}"), "applies only with sigv4 = true");
                }
            }
        }
        if let Some(arn) = &s.kms_key_arn {
            if let Err(why) = crate::config::aws::check_kms_key_arn(arn) {
                ok = false;
                self.error(format!("{p}.kms_key_arn"), why);
            }
        }
        let config = RestCatalogConfig {
            uri: uri?,
            warehouse: s.warehouse,
            auth: auth?,
            oauth2_server_uri: s.oauth2_server_uri,
            scope: s.scope,
            kms_key_arn: s.kms_key_arn,
            vended_credentials: s.vended_credentials.unwrap_or(false),
        };
        ok.then_some(config)
    }

    /// The one way a REST catalog at key path `p` authenticates (none, a bearer token, OAuth2
    /// client credentials or SigV4; secrets from the environment). Takes the credentials out of
    /// `s`; `uri` is the catalog's URI when valid (SigV4's defaults are read from it).
    fn rest_auth(
        &mut self,
        p: &str,
        s: &mut RestCatalogSection,
        uri: Option<&str>,
    ) -> Option<RestAuth> {
        let given: Vec<&str> = [
            ("token", s.token.is_some()),
            ("credential", s.credential.is_some()),
            (
                "client_id",
                s.client_id.is_some() || s.client_secret.is_some(),
            ),
            ("sigv4", s.sigv4 == Some(true)),
        ]
        .into_iter()
        .filter_map(|(key, set)| set.then_some(key))
        .collect();
        match (
            s.token.take(),
            s.credential.take(),
            s.client_id.take(),
            s.client_secret.take(),
        ) {
            _ if given.len() > 1 => {
                self.error(
                    p,
                    format!(
                        "give one way to authenticate: `token`, `credential`, `client_id` + `client_secret`, or `sigv4 = true`, not {}",
                        given.join(" and ")
                    ),
                );
                None
            }
            _ if s.sigv4 == Some(true) => {
                let uri = uri.unwrap_or_default();
                let name =
                    self.sigv4_part(&format!("{p}.signing_name"), s.signing_name.clone(), || {
                        default_signing_name(uri).to_owned()
                    });
                let region = self.sigv4_part(
                    &format!("{p}.signing_region"),
                    s.signing_region.clone().map(Some),
                    || aws_host_region(uri).map(str::to_owned),
                );
                Some(RestAuth::SigV4 {
                    signing_name: name?,
                    signing_region: region?,
                })
            }
            (None, None, None, None) => Some(RestAuth::None),
            (Some(token), ..) => self
                .property_value(&format!("{p}.token"), token, true)
                .map(RestAuth::Token),
            (_, Some(credential), ..) => self
                .property_value(&format!("{p}.credential"), credential, true)
                .map(|client_secret| RestAuth::OAuth2 {
                    client_id: None,
                    client_secret,
                }),
            (_, _, Some(id), Some(secret)) => {
                let id = if id.is_empty() || id.contains(':') {
                    self.error(
                        format!("{p}.client_id"),
                        format!("\"{id}\" is not a client id: non-empty, without `:`"),
                    );
                    None
                } else {
                    Some(id)
                };
                let secret = self.property_value(&format!("{p}.client_secret"), secret, true);
                Some(RestAuth::OAuth2 {
                    client_id: Some(id?),
                    client_secret: secret?,
                })
            }
            (_, _, Some(_), None) => {
                self.error(
                    format!("{p}.client_secret"),
                    "missing: `client_id` needs `client_secret`",
                );
                None
            }
            (_, _, None, Some(_)) => {
                self.error(
                    format!("{p}.client_id"),
                    "missing: `client_secret` needs `client_id`",
                );
                None
            }
        }
    }

    /// A SigV4 signing name or region at key path `path`: the configured one (letters, digits and
    /// `-`, as AWS service names and regions are), else `default()`.
    fn sigv4_part<T>(
        &mut self,
        path: &str,
        given: Option<T>,
        default: impl FnOnce() -> T,
    ) -> Option<T>
    where
        T: SigV4Part,
    {
        let Some(value) = given else {
            return Some(default());
        };
        let text = value.text().unwrap_or_default();
        if text.is_empty() || !text.chars().all(|c| c.is_ascii_alphanumeric() || c == '-') {
            self.error(
                path,
                format!("\"{text}\" is not an AWS service name or region (letters, digits, `-`), e.g. \"s3tables\", \"us-east-1\""),
            );
            return None;
        }
        Some(value)
    }

    /// An `http://` or `https://` URI with a host, no query, fragment or whitespace; returned
    /// without a trailing `/`.
    fn http_uri(&mut self, path: &str, text: &str) -> Option<String> {
        let rest = text
            .strip_prefix("http://")
            .or_else(|| text.strip_prefix("https://"));
        let host = rest.map(|r| r.split('/').next().unwrap_or_default());
        let valid = rest
            .is_some_and(|r| !r.contains(['?', '#']) && !r.contains(char::is_whitespace))
            && host.is_some_and(|h| !h.is_empty() && !h.contains('@'));
        if !valid {
            self.error(
                path,
                format!("\"{text}\" is not an http(s) URI such as \"https://catalog.example.com/api/catalog\" (no query, no user info)"),
            );
            return None;
        }
        Some(text.trim_end_matches('/').to_owned())
    }
}

/// A SigV4 setting: a signing name (`String`) or an optional signing region.
trait SigV4Part {
    /// The configured text.
    fn text(&self) -> Option<&str>;
}

impl SigV4Part for String {
    fn text(&self) -> Option<&str> {
        Some(self)
    }
}

impl SigV4Part for Option<String> {
    fn text(&self) -> Option<&str> {
        self.as_deref()
    }
}

/// The host of an `http(s)://` URI, without port.
fn uri_host(uri: &str) -> &str {
    let rest = uri.split_once("://").map_or(uri, |(_, rest)| rest);
    let authority = rest.split('/').next().unwrap_or_default();
    authority.split(':').next().unwrap_or_default()
}

/// The service and region labels of an AWS endpoint host: the two labels before
/// `amazonaws.com` (`.amazonaws.com.cn`) or `api.aws`, skipping the `vpce` label of VPC endpoint
/// (PrivateLink) hosts; e.g. `("s3tables", "us-east-1")` for
/// `https://s3tables.us-east-1.amazonaws.com/iceberg`, `("execute-api", "ap-south-1")` for
/// `https://ID.execute-api.ap-south-1.amazonaws.com/prod`, `("glue", "us-east-1")` for
/// `https://vpce-ID.glue.us-east-1.vpce.amazonaws.com/iceberg`.
fn aws_host_labels(uri: &str) -> Option<(&str, &str)> {
    let labels: Vec<&str> = uri_host(uri).split('.').collect();
    let suffix = labels.iter().enumerate().position(|(i, label)| {
        *label == "amazonaws" || (*label == "api" && labels.get(i + 1) == Some(&"aws"))
    })?;
    let mut region = suffix.checked_sub(1)?;
    if labels[region] == "vpce" {
        region = region.checked_sub(1)?;
    }
    let service = region.checked_sub(1)?;
    Some((labels[service], labels[region]))
}

/// The region of an AWS endpoint host ([`aws_host_labels`]).
pub fn aws_host_region(uri: &str) -> Option<&str> {
    aws_host_labels(uri).map(|(_, region)| region)
}

/// The SigV4 signing name for `uri`: an AWS endpoint's service label (`s3tables`, `glue`,
/// `execute-api`; a `-fips` suffix dropped), as AWS names endpoints after their signing names;
/// for other hosts `execute-api` (API Gateway with IAM authorization behind a custom domain,
/// PyIceberg's and Iceberg Java's default).
pub fn default_signing_name(uri: &str) -> String {
    match aws_host_labels(uri) {
        Some((service, _)) => service.trim_end_matches("-fips").to_owned(),
        None => "execute-api".to_owned(),
    }
}
