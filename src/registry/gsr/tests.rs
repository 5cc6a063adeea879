use std::path::PathBuf;

use super::*;
use crate::config::aws::check_schema_arn;
use crate::config::{ChannelConfig, Config, RecordFormat};
use crate::model::DlqCode;
use crate::registry::channel_schema::{load_channel_schema, ChannelRegistry, SchemaLoadError};
use crate::registry::decoder::{PayloadError, RecordDecoder};
use crate::registry::framing::gsr::GsrDecoder;

const ARN: &str = "arn:aws:glue:us-east-1:123456789012:schema/reg/events";
const SCHEMA: &str = r#"{"type":"object","properties":{"event_time":{"type":"string","format":"date-time"},"id":{"type":"integer"}},"required":["event_time"]}"#;

fn version(n: i64, format: &str) -> SchemaVersionInfo {
    SchemaVersionInfo {
        version_id: Uuid::from_u128(n as u128),
        schema_arn: ARN.into(),
        version_number: n,
        data_format: format.into(),
        definition: SCHEMA.into(),
    }
}

fn registry(versions: &[SchemaVersionInfo]) -> (Arc<MemoryRegistry>, RegistryClient) {
    let fake = Arc::new(MemoryRegistry::default());
    for v in versions {
        fake.add(v.clone());
    }
    let client =
        RegistryClient::new(fake.clone()).with_backoff(Duration::from_millis(1), Duration::ZERO);
    (fake, client)
}

/// [`registry`] as a channel's registry.
fn glue_registry(versions: &[SchemaVersionInfo]) -> (Arc<MemoryRegistry>, ChannelRegistry) {
    let (fake, client) = registry(versions);
    (fake, ChannelRegistry::Glue(Arc::new(client)))
}

fn glue_channel(version: &str) -> ChannelConfig {
    let text = include_str!("../../../config/quickstart.toml").replace(
        "file = \"event.schema.json\"",
        &format!("glue_schema_arn = \"{ARN}\"\n{version}"),
    );
    assert!(text.contains(ARN), "quickstart names its schema file");
    Config::from_toml_str(&text, &PathBuf::from("/tmp"))
        .unwrap()
        .channels
        .remove(0)
}

async fn number(client: &RegistryClient, id: u128) -> i64 {
    client
        .by_id(Uuid::from_u128(id))
        .await
        .unwrap()
        .version_number
}

#[tokio::test]
async fn lookups_by_id_are_cached() {
    let (fake, client) = registry(&[version(1, "JSON")]);
    for _ in 0..3 {
        assert_eq!(number(&client, 1).await, 1);
    }
    assert_eq!(fake.calls.load(Ordering::SeqCst), 1);
    // A version found by ARN is cached under its id.
    let (fake, client) = registry(&[version(1, "JSON"), version(2, "JSON")]);
    let latest = client.by_arn(ARN, GlueSchemaVersion::Latest).await.unwrap();
    assert_eq!(latest.version_number, 2);
    client.by_id(latest.version_id).await.unwrap();
    assert_eq!(fake.calls.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn unknown_ids_are_negative_cached_with_bounded_lookups() {
    let (fake, client) = registry(&[version(1, "JSON")]);
    let unknown = Uuid::from_u128(99);
    for _ in 0..10 {
        assert!(matches!(
            client.by_id(unknown).await,
            Err(RegistryError::NotFound(_))
        ));
    }
    assert_eq!(fake.calls.load(Ordering::SeqCst), 1, "one lookup per TTL");
    // After the TTL the id is asked again (it may have been registered since).
    let client = RegistryClient::new(fake.clone()).with_bounds(8, 8, Duration::ZERO);
    client.by_id(unknown).await.unwrap_err();
    client.by_id(unknown).await.unwrap_err();
    assert_eq!(fake.calls.load(Ordering::SeqCst), 3);
}

#[tokio::test]
async fn caches_are_bounded() {
    let versions: Vec<_> = (1..=10).map(|n| version(n, "JSON")).collect();
    let (fake, _) = registry(&versions);
    let client = RegistryClient::new(fake).with_bounds(4, 3, NEGATIVE_TTL);
    for n in 1..=10 {
        client.by_id(Uuid::from_u128(n)).await.unwrap();
        client.by_id(Uuid::from_u128(1000 + n)).await.unwrap_err();
    }
    assert_eq!(client.cached(), (4, 3));
}

#[tokio::test]
async fn an_unavailable_registry_is_retried_with_backoff_then_reported() {
    let (fake, client) = registry(&[version(1, "JSON")]);
    fake.unavailable.store(2, Ordering::SeqCst);
    assert_eq!(number(&client, 1).await, 1);
    assert_eq!(fake.calls.load(Ordering::SeqCst), 3);
    let (fake, client) = registry(&[version(1, "JSON")]);
    fake.unavailable.store(100, Ordering::SeqCst);
    let e = client.by_id(Uuid::from_u128(1)).await.unwrap_err();
    assert!(e.is_retryable());
    assert_eq!(fake.calls.load(Ordering::SeqCst), LOOKUP_ATTEMPTS as u64);
    assert_eq!(client.cached(), (0, 0), "an outage is not negative-cached");
    // With a cooldown, the next lookups fail at once; after it, the registry is asked again.
    let client = RegistryClient::new(fake.clone())
        .with_backoff(Duration::from_millis(1), Duration::from_millis(300));
    for _ in 0..5 {
        assert!(client
            .by_id(Uuid::from_u128(1))
            .await
            .unwrap_err()
            .is_retryable());
    }
    assert_eq!(
        fake.calls.load(Ordering::SeqCst),
        2 * LOOKUP_ATTEMPTS as u64,
        "one retry sequence per cooldown"
    );
    fake.unavailable.store(0, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(350)).await;
    assert_eq!(number(&client, 1).await, 1);
}

#[tokio::test]
async fn channel_schema_comes_from_the_configured_or_recorded_version() {
    let (_, client) = glue_registry(&[version(1, "JSON"), version(2, "JSON")]);
    let latest = load_channel_schema(&glue_channel(""), None, Some(&client))
        .await
        .unwrap();
    assert_eq!(latest.version_id, Some(Uuid::from_u128(2)));
    let pinned = load_channel_schema(&glue_channel("version = 1"), None, Some(&client))
        .await
        .unwrap();
    assert_eq!(pinned.version_id, Some(Uuid::from_u128(1)));
    // Recorded at activation: kept, whatever is the latest now.
    let recorded = load_channel_schema(&glue_channel(""), Some(Uuid::from_u128(1)), Some(&client))
        .await
        .unwrap();
    assert_eq!(recorded.version_id, Some(Uuid::from_u128(1)));
}

#[tokio::test]
async fn missing_or_non_json_schemas_are_refused_for_iceberg() {
    let (_, client) = glue_registry(&[version(1, "AVRO")]);
    let e = load_channel_schema(&glue_channel(""), None, Some(&client))
        .await
        .unwrap_err();
    assert!(
        matches!(&e, SchemaLoadError::Refused(m) if m.contains("data format AVRO") && m.contains("JSON Schema only")),
        "{e}"
    );
    let e = load_channel_schema(&glue_channel("version = 7"), None, Some(&client))
        .await
        .unwrap_err();
    assert!(
        matches!(&e, SchemaLoadError::Refused(m) if m.contains("not found")),
        "{e}"
    );
    let (fake, client) = glue_registry(&[]);
    fake.unavailable.store(100, Ordering::SeqCst);
    let e = load_channel_schema(&glue_channel(""), None, Some(&client))
        .await
        .unwrap_err();
    assert!(matches!(e, SchemaLoadError::Unavailable(_)), "{e}");
}

#[tokio::test]
async fn gsr_records_are_resolved_through_the_registry() {
    let mut other = version(2, "JSON");
    other.schema_arn = "arn:aws:glue:us-east-1:123456789012:schema/reg/other".into();
    let (fake, client) = registry(&[version(1, "JSON"), other]);
    let mut decoder = RecordDecoder::Gsr {
        decoder: GsrDecoder::new(Some(Uuid::from_u128(1)), [], 1 << 20),
        registry: Some(Arc::new(client)),
    };
    let frame = |id: u128| {
        let mut r = vec![3u8, 0];
        r.extend_from_slice(Uuid::from_u128(id).as_bytes());
        r.extend_from_slice(br#"{"event_time":"2026-07-09T20:00:00Z"}"#);
        r
    };
    assert!(decoder.payload(&frame(1)).await.is_ok());
    for _ in 0..3 {
        let code = |r: Result<&[u8], PayloadError>| match r.unwrap_err() {
            PayloadError::Record(reason) => reason.code,
            e => panic!("{e}"),
        };
        assert_eq!(
            code(decoder.payload(&frame(2)).await),
            DlqCode::SchemaMismatch
        );
        assert_eq!(
            code(decoder.payload(&frame(77)).await),
            DlqCode::InvalidSchema
        );
        assert_eq!(
            code(
                decoder
                    .payload(br#"{"event_time":"2026-07-09T20:00:00Z"}"#)
                    .await
            ),
            DlqCode::InvalidSchema
        );
    }
    // One lookup for the foreign version, one for the unknown one: both remembered.
    assert_eq!(fake.calls.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn an_unavailable_registry_is_an_error_not_a_dlq_entry() {
    let (fake, client) = registry(&[version(1, "JSON"), version(2, "JSON")]);
    let client = client.with_backoff(Duration::from_millis(1), Duration::ZERO);
    fake.unavailable.store(100, Ordering::SeqCst);
    let mut decoder = RecordDecoder::Gsr {
        decoder: GsrDecoder::new(Some(Uuid::from_u128(1)), [], 1 << 20),
        registry: Some(Arc::new(client)),
    };
    let mut record = vec![3u8, 0];
    record.extend_from_slice(Uuid::from_u128(2).as_bytes());
    record.extend_from_slice(br#"{"event_time":"2026-07-09T20:00:00Z"}"#);
    let e = decoder.payload(&record).await.unwrap_err();
    assert!(
        matches!(&e, PayloadError::Registry { error, .. } if error.is_retryable()),
        "{e:?}"
    );
    // The registry is back: the known version of the schema is SCHEMA_MISMATCH.
    fake.unavailable.store(0, Ordering::SeqCst);
    match decoder.payload(&record).await.unwrap_err() {
        PayloadError::Record(reason) => assert_eq!(reason.code, DlqCode::SchemaMismatch),
        e => panic!("{e:?}"),
    }
}

#[test]
fn schema_arns_are_checked() {
    assert!(check_schema_arn(ARN).is_ok());
    for bad in [
        "arn:aws:glue:us-east-1:123456789012:registry/reg",
        "arn:aws:glue:us-east-1:123456789012:schema/events",
        "arn:aws:glue:us-east-1:1234:schema/reg/events",
        "arn:aws:kinesis:us-east-1:123456789012:schema/reg/events",
        "reg/events",
    ] {
        assert!(check_schema_arn(bad).is_err(), "{bad}");
    }
    let _ = RecordFormat::GsrJson;
}

#[tokio::test]
async fn offline_versions_name_the_channels_version_by_its_document() {
    let dir = tempfile::tempdir().unwrap();
    let (v1, v2) = (
        "3f36e6d8-d20e-43b7-90ea-3ad724880d60",
        "1b4e28ba-2fa1-11d2-883f-0016d3cca427",
    );
    std::fs::write(dir.path().join("v1.json"), SCHEMA).unwrap();
    std::fs::write(dir.path().join("v2.json"), r#"{"type":"object"}"#).unwrap();
    let text = |file: &str| {
        include_str!("../../../config/quickstart.toml")
            .replace("format = \"json\"", "format = \"gsr_json\"")
            .replace(
                "file = \"event.schema.json\"",
                &format!("file = \"{file}\"\n[channel.schema.versions]\n\"{v1}\" = \"v1.json\"\n\"{v2}\" = \"v2.json\""),
            )
    };
    let channel = |file: &str| {
        Config::from_toml_str(&text(file), dir.path())
            .unwrap()
            .channels
            .remove(0)
    };
    let s = load_channel_schema(&channel("v1.json"), None, None)
        .await
        .unwrap();
    assert_eq!(s.version_id, Some(Uuid::parse_str(v1).unwrap()));
    assert_eq!(s.other_versions, vec![Uuid::parse_str(v2).unwrap()]);
    std::fs::write(
        dir.path().join("v3.json"),
        r#"{"type":"object","properties":{"event_time":{"type":"string","format":"date-time"}}}"#,
    )
    .unwrap();
    let e = load_channel_schema(&channel("v3.json"), None, None)
        .await
        .unwrap_err();
    assert!(
        matches!(&e, SchemaLoadError::Refused(m) if m.contains("none of channel.schema.versions")),
        "{e}"
    );
}
