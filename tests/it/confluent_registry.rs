//! The Confluent schema registry client (issue 31) against the local registry of deploy/local
//! (`deploy/local/schema-registry.sh start`, `FLOE_TEST_SCHEMA_REGISTRY_URL`): lookups by id and
//! by subject version, references resolved recursively, an unknown id, fail-over across URLs,
//! basic and bearer auth (a registry of the test's own), and an outage answered as unavailable in
//! bounded time.

use crate::common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use floe::registry::confluent::api::{Auth, HttpRegistry};
use floe::registry::confluent::{ConfluentClient, RegistryError, SchemaType};
use serde_json::json;

/// The shared registry's URL; panics with instructions when it is not running.
fn registry_url() -> String {
    std::env::var("FLOE_TEST_SCHEMA_REGISTRY_URL").expect(
        "the schema registry is needed: deploy/local/schema-registry.sh start, then eval \"$(deploy/local/schema-registry.sh env)\" (scripts/test.sh does both)",
    )
}

/// Registers `schema` under `subject` at `url`; returns its id.
async fn register(url: &str, subject: &str, schema: serde_json::Value) -> u32 {
    // reqwest's rustls needs the process-wide crypto provider floe installs.
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let r = reqwest::Client::new()
        .post(format!("{url}/subjects/{subject}/versions"))
        .json(&schema)
        .send()
        .await
        .unwrap();
    let status = r.status();
    let body: serde_json::Value = r.json().await.unwrap();
    assert!(status.is_success(), "register {subject}: {body}");
    body["id"].as_u64().unwrap() as u32
}

fn client(urls: &[String], auth: Auth, subject: &str) -> ConfluentClient {
    ConfluentClient::new(HttpRegistry::new(urls, auth, None).unwrap(), subject)
        .with_backoff(Duration::from_millis(20), Duration::from_secs(60))
}

fn json_schema(extra: &str) -> serde_json::Value {
    let mut props = json!({
        "id": {"type": "integer"},
        "event_time": {"type": "string", "format": "date-time"},
    });
    if !extra.is_empty() {
        props[extra] = json!({"type": "string"});
    }
    json!({"schemaType": "JSON", "schema": json!({
        "type": "object", "properties": props, "required": ["id", "event_time"],
    }).to_string()})
}

#[tokio::test]
async fn ids_and_subject_versions_resolve_with_their_subjects() {
    let url = registry_url();
    let subject = common::unique_name("floe-client-value");
    let v1 = register(&url, &subject, json_schema("")).await;
    let v2 = register(&url, &subject, json_schema("note")).await;
    assert_ne!(v1, v2);
    let c = client(std::slice::from_ref(&url), Auth::None, &subject);
    let latest = c.latest().await.unwrap();
    assert_eq!(latest.id, v2);
    assert_eq!(latest.schema_type, SchemaType::Json);
    assert!(latest.schema.contains("note"));
    let first = c.by_id(v1).await.unwrap();
    assert_eq!(first.version_in(&subject), Some(1));
    assert_eq!(latest.version_in(&subject), Some(2));
    // Cached for the process: no request for an id met before.
    let before = c.lookups();
    c.by_id(v1).await.unwrap();
    c.by_id(v2).await.unwrap();
    assert_eq!(c.lookups(), before);
    // An id of another subject names that subject only.
    let other = common::unique_name("floe-other-value");
    let o = register(&url, &other, json_schema("other")).await;
    let found = c.by_id(o).await.unwrap();
    assert_eq!(found.version_in(&subject), None);
    assert_eq!(found.version_in(&other), Some(1));
}

#[tokio::test]
async fn references_resolve_recursively_dependencies_first() {
    let url = registry_url();
    let run = common::unique_name("r");
    let leaf = format!("{run}-leaf");
    let mid = format!("{run}-mid");
    let top = format!("{run}-value");
    let ns = format!("floe.t{}", run.replace('-', "_"));
    register(
        &url,
        &leaf,
        json!({"schema": json!({"type": "record", "name": "Leaf", "namespace": ns,
            "fields": [{"name": "x", "type": "long"}]}).to_string()}),
    )
    .await;
    register(
        &url,
        &mid,
        json!({"schema": json!({"type": "record", "name": "Mid", "namespace": ns,
            "fields": [{"name": "leaf", "type": format!("{ns}.Leaf")}]}).to_string(),
            "references": [{"name": format!("{ns}.Leaf"), "subject": leaf, "version": 1}]}),
    )
    .await;
    let id = register(
        &url,
        &top,
        json!({"schema": json!({"type": "record", "name": "Top", "namespace": ns,
            "fields": [{"name": "mid", "type": format!("{ns}.Mid")},
                       {"name": "leaf", "type": format!("{ns}.Leaf")}]}).to_string(),
            "references": [{"name": format!("{ns}.Mid"), "subject": mid, "version": 1},
                           {"name": format!("{ns}.Leaf"), "subject": leaf, "version": 1}]}),
    )
    .await;
    let c = client(&[url], Auth::None, &top);
    let r = c.by_id(id).await.unwrap();
    assert_eq!(r.schema_type, SchemaType::Avro);
    let order: Vec<&str> = r.references.iter().map(|d| d.subject.as_str()).collect();
    assert_eq!(
        order,
        [leaf.as_str(), mid.as_str()],
        "each once, dependencies first"
    );
    assert!(r.references[0].schema.contains("Leaf"));
}

#[tokio::test]
async fn an_unknown_id_is_not_found_and_remembered() {
    let c = client(&[registry_url()], Auth::None, "nothing-value");
    let e = c.by_id(2_000_000_000).await.unwrap_err();
    assert!(matches!(e, RegistryError::NotFound(_)), "{e}");
    let before = c.lookups();
    assert!(matches!(
        c.by_id(2_000_000_000).await,
        Err(RegistryError::NotFound(_))
    ));
    assert_eq!(c.lookups(), before, "the negative cache answers");
}

/// What a test server answers a request path with: status line, content type, body.
type Answer = (&'static str, &'static str, String);

/// A local HTTP server answering each request (one per connection) by `answer(path)`, the
/// path without its query; returns its base URL.
async fn http_server(answer: impl Fn(&str) -> Answer + Send + Sync + 'static) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let answer = std::sync::Arc::new(answer);
    tokio::spawn(async move {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        loop {
            let Ok((mut conn, _)) = listener.accept().await else {
                return;
            };
            let answer = answer.clone();
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                let n = conn.read(&mut buf).await.unwrap_or(0);
                let request = String::from_utf8_lossy(&buf[..n]);
                let path = request.split(' ').nth(1).unwrap_or("");
                let (status, content_type, body) = answer(path.split('?').next().unwrap_or(""));
                let reply = format!(
                    "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = conn.write_all(reply.as_bytes()).await;
            });
        }
    });
    format!("http://{addr}")
}

/// A server that answers every request with a bare 404 page (an ingress's default backend).
async fn default_backend_404() -> String {
    http_server(|_| {
        let body = "<html>default backend - 404</html>".to_string();
        ("404 Not Found", "text/html", body)
    })
    .await
}

#[tokio::test]
async fn a_404_without_the_registrys_error_body_is_an_outage_not_an_unknown_id() {
    // Before: any 404 was "not found", so records of a valid id went to the DLQ as
    // INVALID_SCHEMA (and stayed so for the negative cache's 5 minutes).
    let url = registry_url();
    let subject = common::unique_name("floe-bare404-value");
    let id = register(&url, &subject, json_schema("")).await;
    let proxy = default_backend_404().await;
    let e = client(std::slice::from_ref(&proxy), Auth::None, &subject)
        .by_id(id)
        .await
        .unwrap_err();
    assert!(matches!(e, RegistryError::Unavailable(_)), "{e}");
    // With a second URL, the client fails over to it and finds the id.
    let c = client(&[proxy, url], Auth::None, &subject);
    assert_eq!(c.by_id(id).await.unwrap().id, id);
}

#[tokio::test]
async fn a_soft_deleted_version_still_names_its_subject() {
    // Records produced before an operator soft-deleted their version still belong to the
    // channel's subject (before: SCHEMA_MISMATCH, "its subjects: []").
    let url = registry_url();
    let subject = common::unique_name("floe-softdel-value");
    let v1 = register(&url, &subject, json_schema("")).await;
    let v2 = register(&url, &subject, json_schema("note")).await;
    assert_ne!(v1, v2);
    let r = reqwest::Client::new()
        .delete(format!("{url}/subjects/{subject}/versions/1"))
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success(), "{}", r.text().await.unwrap());
    let c = client(&[url], Auth::None, &subject);
    let resolved = c.by_id(v1).await.unwrap();
    assert_eq!(resolved.version_in(&subject), Some(1));
}

#[tokio::test]
async fn a_dead_url_fails_over_to_the_next() {
    let url = registry_url();
    let subject = common::unique_name("floe-failover-value");
    let id = register(&url, &subject, json_schema("")).await;
    let dead = format!("http://127.0.0.1:{}", common::free_port());
    let c = client(&[dead, url], Auth::None, &subject);
    assert_eq!(c.latest().await.unwrap().id, id);
    assert_eq!(c.lookups(), 1, "one attempt: the second URL answered");
}

#[tokio::test]
async fn an_outage_is_unavailable_within_the_budget_then_fails_fast() {
    let dead = format!("http://127.0.0.1:{}", common::free_port());
    let c = client(&[dead], Auth::None, "x-value");
    let t = Instant::now();
    let e = c.by_id(1).await.unwrap_err();
    assert!(matches!(e, RegistryError::Unavailable(_)), "{e}");
    assert!(e.is_retryable());
    assert_eq!(
        c.lookups(),
        u64::from(floe::registry::confluent::LOOKUP_ATTEMPTS)
    );
    assert!(t.elapsed() < floe::registry::confluent::LOOKUP_BUDGET);
    // The cooldown: no request until it passes.
    assert!(matches!(
        c.by_id(1).await,
        Err(RegistryError::Unavailable(_))
    ));
    assert_eq!(
        c.lookups(),
        u64::from(floe::registry::confluent::LOOKUP_ATTEMPTS)
    );
}

#[tokio::test]
async fn basic_and_bearer_credentials_are_sent_and_a_refusal_is_not_retried() {
    for (var, good, bad) in [
        (
            "FLOE_SCHEMA_REGISTRY_BASIC_AUTH",
            Auth::Basic("floe:s3cret".into()),
            Auth::Basic("floe:wrong".into()),
        ),
        (
            "FLOE_SCHEMA_REGISTRY_BEARER_TOKEN",
            Auth::Bearer("tok-123".into()),
            Auth::None,
        ),
    ] {
        let secret = match &good {
            Auth::Basic(s) | Auth::Bearer(s) => s.clone(),
            Auth::None => unreachable!(),
        };
        let own = common::OwnRegistry::start(&["--port", "0"], &[(var, secret.as_str())]);
        let r = reqwest::Client::new()
            .post(format!("{}/subjects/s-value/versions", own.url))
            .header(
                "Authorization",
                match &good {
                    Auth::Basic(s) => format!(
                        "Basic {}",
                        base64::Engine::encode(&base64::engine::general_purpose::STANDARD, s)
                    ),
                    Auth::Bearer(t) => format!("Bearer {t}"),
                    Auth::None => unreachable!(),
                },
            )
            .json(&json_schema(""))
            .send()
            .await
            .unwrap();
        assert!(r.status().is_success(), "{var}: {}", r.status());
        let ok = client(std::slice::from_ref(&own.url), good, "s-value");
        assert_eq!(ok.latest().await.unwrap().version_in("s-value"), Some(1));
        let refused = client(std::slice::from_ref(&own.url), bad, "s-value");
        let e = refused.latest().await.unwrap_err();
        assert!(matches!(e, RegistryError::Refused(_)), "{var}: {e}");
        assert!(e.to_string().contains("401"), "{e}");
        assert_eq!(refused.lookups(), 1, "a refusal is not retried");
    }
}

/// `floe records check --format json_sr --encoding hex` with `args`, on `frames`; one JSON
/// outcome per frame.
fn records_check(
    schema: &std::path::Path,
    args: &[&str],
    frames: &[Vec<u8>],
) -> Vec<serde_json::Value> {
    use std::io::Write;
    let mut child = Command::new(env!("CARGO_BIN_EXE_floe"))
        .args([
            "records",
            "check",
            "--format",
            "json_sr",
            "--encoding",
            "hex",
        ])
        .arg("--schema")
        .arg(schema)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    {
        let mut stdin = child.stdin.take().unwrap();
        for f in frames {
            let hex: String = f.iter().map(|b| format!("{b:02x}")).collect();
            writeln!(stdin, "{hex}").unwrap();
        }
    }
    let out = child.wait_with_output().unwrap();
    let outcomes: Vec<serde_json::Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    // Exit 0 when every record is a row, 1 when one goes to the DLQ (issue 44).
    let dead_lettered = outcomes.iter().any(|o| o.get("dlq").is_some());
    assert_eq!(
        out.status.code(),
        Some(i32::from(dead_lettered)),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    outcomes
}

fn frame(id: u32, json: &str) -> Vec<u8> {
    let mut f = vec![0u8];
    f.extend_from_slice(&id.to_be_bytes());
    f.extend_from_slice(json.as_bytes());
    f
}

#[tokio::test]
async fn records_check_resolves_json_sr_ids_offline_and_through_the_registry() {
    let url = registry_url();
    let subject = common::unique_name("floe-check-value");
    let v1 = register(&url, &subject, json_schema("")).await;
    let v2 = register(&url, &subject, json_schema("note")).await;
    let other = register(
        &url,
        &common::unique_name("floe-x-value"),
        json_schema("other"),
    )
    .await;
    let row = r#"{"id": 1, "event_time": "2026-07-09T20:00:00Z", "note": "n"}"#;
    let frames = [
        frame(v1, r#"{"id": 1, "event_time": "2026-07-09T20:00:00Z"}"#),
        frame(v2, row),
        frame(other, row),
        frame(2_000_000_000, row),
        b"\x01\x00\x00\x00\x01{}".to_vec(),
    ];
    let dir = tempfile::tempdir().unwrap();
    let schema = dir.path().join("v1.json");
    std::fs::write(&schema, json_schema("")["schema"].as_str().unwrap()).unwrap();
    // Offline: only --schema-id's records are known.
    let offline = records_check(&schema, &["--schema-id", &v1.to_string()], &frames);
    let codes: Vec<&str> = offline
        .iter()
        .map(|o| o["dlq"]["code"].as_str().unwrap_or("row"))
        .collect();
    assert_eq!(
        codes,
        [
            "row",
            "INVALID_SCHEMA",
            "INVALID_SCHEMA",
            "INVALID_SCHEMA",
            "DESERIALIZATION_ERROR"
        ],
        "{offline:?}"
    );
    let online = records_check(
        &schema,
        &[
            "--schema-id",
            &v1.to_string(),
            "--registry-url",
            &url,
            "--subject",
            &subject,
        ],
        &frames,
    );
    let codes: Vec<&str> = online
        .iter()
        .map(|o| o["dlq"]["code"].as_str().unwrap_or("row"))
        .collect();
    assert_eq!(
        codes,
        [
            "row",
            "row",
            "SCHEMA_MISMATCH",
            "INVALID_SCHEMA",
            "DESERIALIZATION_ERROR"
        ],
        "{online:?}"
    );
    assert_eq!(online[1]["row"]["note"], "n", "{online:?}");
}

#[tokio::test]
async fn without_evolution_only_the_channels_id_is_delivered() {
    use floe::model::DlqCode;
    use floe::registry::decoder::{PayloadError, RecordDecoder};
    let url = registry_url();
    let subject = common::unique_name("floe-none-value");
    let v1 = register(&url, &subject, json_schema("")).await;
    let v2 = register(&url, &subject, json_schema("note")).await;
    let other = register(&url, &common::unique_name("floe-y-value"), json_schema("y")).await;
    let key = |id| {
        floe::registry::framing::confluent::SchemaKey {
            id,
            indexes: vec![],
        }
        .to_uuid()
        .unwrap()
    };
    let mut decoder = RecordDecoder::Confluent {
        protobuf: false,
        channel_key: key(v1),
        client: std::sync::Arc::new(client(&[url], Auth::None, &subject)),
    };
    let doc = r#"{"id": 1, "event_time": "2026-07-09T20:00:00Z"}"#;
    assert_eq!(
        decoder.payload(&frame(v1, doc)).await.unwrap(),
        doc.as_bytes()
    );
    for (id, code, why) in [
        (v2, DlqCode::SchemaMismatch, "evolution is \"none\""),
        (
            other,
            DlqCode::SchemaMismatch,
            "not a version of the channel's subject",
        ),
        (2_000_000_000, DlqCode::InvalidSchema, "does not have it"),
    ] {
        match decoder.payload(&frame(id, doc)).await {
            Err(PayloadError::Record(r)) => {
                assert_eq!(r.code, code, "{id}: {}", r.message);
                assert!(r.message.contains(why), "{id}: {}", r.message);
            }
            other => panic!("{id}: {other:?}"),
        }
    }
    // A registry that cannot be reached is not the record's fault: no DLQ reason.
    let dead = format!("http://127.0.0.1:{}", common::free_port());
    let mut down = RecordDecoder::Confluent {
        protobuf: false,
        channel_key: key(v1),
        client: std::sync::Arc::new(client(&[dead], Auth::None, &subject)),
    };
    assert!(
        down.payload(&frame(v1, doc)).await.is_ok(),
        "the channel's id needs no lookup"
    );
    assert!(matches!(
        down.payload(&frame(v2, doc)).await,
        Err(PayloadError::ConfluentRegistry { id, .. }) if id == v2
    ));
}

/// A CA and a certificate it signs for 127.0.0.1, made with `openssl` in `dir`: (ca.pem,
/// cert.pem, key.pem).
fn tls_files(
    dir: &std::path::Path,
) -> (std::path::PathBuf, std::path::PathBuf, std::path::PathBuf) {
    let run = |args: &[&str]| {
        let out = Command::new("openssl")
            .args(args)
            .current_dir(dir)
            .output()
            .expect("openssl");
        assert!(
            out.status.success(),
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    run(&[
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-days",
        "2",
        "-subj",
        "/CN=floe test CA",
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
    ]);
    run(&[
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-subj",
        "/CN=127.0.0.1",
        "-keyout",
        "key.pem",
        "-out",
        "req.csr",
    ]);
    std::fs::write(
        dir.join("ext.cnf"),
        "subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\n",
    )
    .unwrap();
    run(&[
        "x509",
        "-req",
        "-in",
        "req.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-days",
        "2",
        "-extfile",
        "ext.cnf",
        "-out",
        "cert.pem",
    ]);
    (
        dir.join("ca.pem"),
        dir.join("cert.pem"),
        dir.join("key.pem"),
    )
}

#[tokio::test]
async fn an_https_registry_is_trusted_through_the_ca_bundle_only() {
    let dir = tempfile::tempdir().unwrap();
    let (ca, cert, key) = tls_files(dir.path());
    let own = common::OwnRegistry::start(
        &[
            "--port",
            "0",
            "--tls-cert",
            cert.to_str().unwrap(),
            "--tls-key",
            key.to_str().unwrap(),
        ],
        &[],
    );
    assert!(own.url.starts_with("https://"), "{}", own.url);
    let config = |ca_bundle: Option<std::path::PathBuf>| floe::config::ConfluentSchemaConfig {
        urls: vec![own.url.clone()],
        subject: "s-value".into(),
        evolution: floe::config::SchemaEvolution::None,
        ca_bundle,
        message: None,
    };
    let trusted = ConfluentClient::from_config(&config(Some(ca)))
        .unwrap()
        .with_backoff(Duration::from_millis(20), Duration::ZERO);
    // The registry answers (an unknown subject is a 404, not a TLS failure).
    let e = trusted.latest().await.unwrap_err();
    assert!(matches!(e, RegistryError::NotFound(_)), "{e}");
    let untrusted = ConfluentClient::from_config(&config(None))
        .unwrap()
        .with_backoff(Duration::from_millis(20), Duration::ZERO);
    let e = untrusted.latest().await.unwrap_err();
    assert!(matches!(e, RegistryError::Unavailable(_)), "{e}");
    assert!(e.to_string().to_lowercase().contains("certificate"), "{e}");
}

/// `floe ARGS`: exit code, stdout, stderr.
fn floe_cli(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_floe"))
        .args(args)
        .output()
        .expect("run floe");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The test config with a `format` channel of `subject` at `url`, written to `dir/floe.toml`:
/// its text and path.
fn channel_config(
    dir: &std::path::Path,
    url: &str,
    subject: &str,
    format: &str,
) -> (String, std::path::PathBuf) {
    let file = format!(
        "file = \"{}/config/event.schema.json\"",
        env!("CARGO_MANIFEST_DIR")
    );
    let config = common::config_toml(dir, "127.0.0.1:9", "w1", 4)
        .replacen(
            &file,
            &format!("registry_url = \"{url}\"\n  subject = \"{subject}\""),
            1,
        )
        .replacen("format = \"json\"", &format!("format = \"{format}\""), 1);
    let path = dir.join("floe.toml");
    std::fs::write(&path, &config).unwrap();
    (config, path)
}

#[tokio::test]
async fn channel_create_takes_the_subjects_latest_version_or_fails_naming_the_key() {
    let url = registry_url();
    let subject = common::unique_name("floe-create-value");
    let dir = tempfile::tempdir().unwrap();
    let (config, path) = channel_config(dir.path(), &url, &subject, "json_sr");
    let path = path.to_str().unwrap();
    // No version yet: the channel is FAILED, naming the key and the subject.
    let (code, _, err) = floe_cli(&["channel", "create", "it", "--config", path]);
    assert_ne!(code, 0, "{err}");
    assert!(err.contains("channel[0].schema.registry_url"), "{err}");
    assert!(err.contains(&subject), "{err}");
    // A fresh channel (another name) once the subject has a version: ACTIVE, its id recorded.
    let schema =
        serde_json::json!({"schemaType": "JSON", "schema": floe::tools::quickstart::EVENT_SCHEMA});
    let id = register(&url, &subject, schema).await;
    let config = config.replace("name = \"it\"", "name = \"it2\"");
    std::fs::write(dir.path().join("floe.toml"), &config).unwrap();
    let (code, _, err) = floe_cli(&["channel", "create", "it2", "--config", path]);
    assert_eq!(code, 0, "{err}");
    let (code, out, err) = floe_cli(&["channel", "describe", "it2", "--json", "--config", path]);
    assert_eq!(code, 0, "{err}");
    let d: serde_json::Value = serde_json::from_str(&out).unwrap();
    let d = if d.is_array() { &d[0] } else { &d };
    assert_eq!(d["state"], "ACTIVE", "{d}");
    assert_eq!(d["subject"], subject.as_str(), "{d}");
    assert_eq!(d["schema_id"], id.to_string(), "{d}");
}

#[tokio::test]
async fn a_subject_of_another_schema_type_than_the_format_is_refused_naming_the_format() {
    // An `avro` channel whose subject's latest version is JSON Schema: before, the table was
    // made from it and every Avro record went to the DLQ with a misleading code.
    let url = registry_url();
    let subject = common::unique_name("floe-type-value");
    let schema =
        serde_json::json!({"schemaType": "JSON", "schema": floe::tools::quickstart::EVENT_SCHEMA});
    register(&url, &subject, schema).await;
    let dir = tempfile::tempdir().unwrap();
    let (_, path) = channel_config(dir.path(), &url, &subject, "avro");
    let (code, _, err) = floe_cli(&[
        "channel",
        "create",
        "it",
        "--config",
        path.to_str().unwrap(),
    ]);
    assert_ne!(code, 0, "{err}");
    assert!(err.contains("is a JSON schema"), "{err}");
    assert!(err.contains("channel.record.format = \"avro\""), "{err}");
}

/// A minimal registry (only what the serializers call, plus the subject endpoints): schema 7
/// is version 2 of `s` (version 1 is schema 5); `GET /schemas/ids/{id}/versions` answers the
/// registry's own 404.
async fn registry_without_id_versions(schema: String) -> String {
    http_server(move |path| {
        let version = |id: u32, v: i64| {
            json!({"subject": "s", "version": v, "id": id, "schemaType": "JSON", "schema": schema})
        };
        let (status, body) = match path {
            "/schemas/ids/7" => ("200 OK", json!({"schemaType": "JSON", "schema": schema})),
            "/subjects/s/versions" => ("200 OK", json!([1, 2])),
            "/subjects/s/versions/1" => ("200 OK", version(5, 1)),
            "/subjects/s/versions/2" => ("200 OK", version(7, 2)),
            _ => (
                "404 Not Found",
                json!({"error_code": 404, "message": "HTTP 404 Not Found"}),
            ),
        };
        (status, "application/json", body.to_string())
    })
    .await
}

/// Issue 44: a registry without `GET /schemas/ids/{id}/versions` made floe decide a new id
/// belonged to no subject (every record of a new version to the DLQ as SCHEMA_MISMATCH). The
/// client falls back to the channel subject's versions.
#[tokio::test]
async fn a_registry_without_the_id_versions_endpoint_resolves_the_subject_from_its_versions() {
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let schema = json_schema("")["schema"].as_str().unwrap().to_string();
    let url = registry_without_id_versions(schema).await;
    let c = client(&[url], Auth::None, "s");
    let resolved = c.by_id(7).await.unwrap();
    assert_eq!(resolved.version_in("s"), Some(2), "{:?}", resolved.subjects);
}
