//! Activation (docs/design.md, protocol steps 9–10) is one code path,
//! `floe::channel::activate`, reached from two entry points: `floe channel create` and the first
//! `floe run` of a channel. Every case here runs through both, with the real binary against an
//! SQLite lease store and an SQL catalog, and must end the same way: the same exit code, the
//! same channel state, the same reason.

use crate::common;

use std::path::Path;
use std::process::{Command, Output};

use common::*;
use floe::lease::sql::SqlLeaseStore;
use floe::lease::{BatchStore, ChannelState, ChannelStatus};

/// A broker nobody listens on: activation never needs one.
const NO_BROKER: &str = "127.0.0.1:9";

#[derive(Debug, Clone, Copy)]
enum Entry {
    /// `floe channel create it`.
    Create,
    /// `floe run` (activates the channel at start).
    Run,
}

const ENTRIES: [Entry; 2] = [Entry::Create, Entry::Run];

fn run(dir: &Path, entry: Entry) -> Output {
    let config = dir.join("floe.toml");
    let config = config.to_str().unwrap();
    let args: Vec<&str> = match entry {
        Entry::Create => vec!["channel", "create", "it", "--config", config],
        Entry::Run => vec!["run", "--config", config],
    };
    Command::new(env!("CARGO_BIN_EXE_floe"))
        .args(&args)
        .env("RUST_LOG", "warn")
        .output()
        .expect("run floe")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

async fn state_of(dir: &Path) -> Option<ChannelState> {
    let store = SqlLeaseStore::open_sqlite(dir.join("leases.sqlite"))
        .await
        .unwrap();
    store.get_channel_state("it").await.unwrap()
}

#[tokio::test]
async fn a_table_floe_did_not_create_fails_the_channel_through_either_entry() {
    for entry in ENTRIES {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("floe.toml"),
            config_toml(dir.path(), NO_BROKER, "w1", 6),
        )
        .unwrap();
        foreign_table(dir.path()).await;
        let o = run(dir.path(), entry);
        assert_eq!(o.status.code(), Some(78), "{entry:?}: {}", stderr(&o));
        assert!(
            stderr(&o).contains("floe did not create it"),
            "{entry:?}: {}",
            stderr(&o)
        );
        let state = state_of(dir.path()).await.expect("state recorded");
        assert_eq!(state.state, ChannelStatus::Failed, "{entry:?}");
        assert!(
            state
                .status_reason
                .as_deref()
                .is_some_and(|r| r.contains("floe did not create it")),
            "{entry:?}: {state:?}"
        );
        assert_eq!(state.table_uuid, None, "{entry:?}");
    }
}

/// Before activation was one path, `floe channel create` dropped an unreadable recorded schema
/// version id silently (and would have recorded another version over it) while `floe run`
/// refused it.
#[tokio::test]
async fn an_unreadable_recorded_schema_version_is_refused_through_either_entry() {
    for (entry, status) in [
        (Entry::Create, ChannelStatus::Creating),
        (Entry::Create, ChannelStatus::Active),
        (Entry::Run, ChannelStatus::Active),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let config = config_toml(dir.path(), NO_BROKER, "w1", 6)
            .replace(
                &format!("file = \"{}/config/event.schema.json\"", env!("CARGO_MANIFEST_DIR")),
                "glue_schema_arn = \"arn:aws:glue:us-east-1:123456789012:schema/reg/events\"",
            )
            .replace(
                "[lease_store]",
                "[aws]\nregion = \"us-east-1\"\nendpoint_url = \"http://127.0.0.1:9\"\n\n[lease_store]",
            );
        std::fs::write(dir.path().join("floe.toml"), config).unwrap();
        let store = SqlLeaseStore::open_sqlite(dir.path().join("leases.sqlite"))
            .await
            .unwrap();
        let seeded = ChannelState {
            channel: "it".into(),
            state: status,
            status_reason: None,
            activated_at_ms: Some(1),
            table_uuid: None,
            schema_version_id: Some("not-a-uuid".into()),
            version: 0,
            updated_at_ms: 1,
            overrides: Default::default(),
            from_first_record: false,
        };
        store.put_channel_state(&seeded, None).await.unwrap();
        drop(store);
        let o = run(dir.path(), entry);
        assert_eq!(
            o.status.code(),
            Some(78),
            "{entry:?} on {status:?}: {}",
            stderr(&o)
        );
        assert!(
            stderr(&o).contains("not-a-uuid") && stderr(&o).contains("is not a UUID"),
            "{entry:?} on {status:?}: {}",
            stderr(&o)
        );
        let state = state_of(dir.path()).await.unwrap();
        assert_eq!(
            state.schema_version_id.as_deref(),
            Some("not-a-uuid"),
            "{entry:?} on {status:?}: the recorded id must not be replaced"
        );
        assert_eq!(state.state, status, "{entry:?}: state unchanged");
    }
}

/// A schema file that maps: `channel create` records the channel ACTIVE with its table's uuid;
/// the table it created is the one `floe run` then checks (no second table, same uuid).
#[tokio::test]
async fn create_records_the_table_that_run_then_accepts() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("floe.toml"),
        config_toml(dir.path(), NO_BROKER, "w1", 6),
    )
    .unwrap();
    let o = run(dir.path(), Entry::Create);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let created = state_of(dir.path()).await.unwrap();
    assert_eq!(created.state, ChannelStatus::Active);
    let uuid = created.table_uuid.clone().expect("table uuid recorded");
    let catalog = floe::catalog::open_sql_catalog(
        &dir.path().join("catalog.sqlite"),
        &dir.path().join("warehouse"),
        "floe",
    )
    .await
    .unwrap();
    let ident =
        iceberg::TableIdent::new(iceberg::NamespaceIdent::new("it".into()), "events".into());
    let table = catalog.load_table(&ident).await.unwrap();
    assert_eq!(table.metadata().uuid().to_string(), uuid);
    // Creating again is idempotent: same state, same table.
    let o = run(dir.path(), Entry::Create);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let again = state_of(dir.path()).await.unwrap();
    assert_eq!(again.table_uuid.as_deref(), Some(uuid.as_str()));
    assert_eq!(again.activated_at_ms, created.activated_at_ms);
}

/// A client configuration librdkafka refuses only when the client is created (each property is
/// valid alone, so config validation accepts them): `floe run` and `floe channel create` refuse
/// it (exit 78, naming the property) before they record the channel as activated — both used to
/// record the activation first, so a fixed worker skipped everything produced in between.
#[tokio::test]
async fn a_source_the_worker_refuses_is_refused_before_the_channel_is_activated() {
    let dir = tempfile::tempdir().unwrap();
    let config = config_toml(dir.path(), NO_BROKER, "w1", 6).replace(
        "  initial_position = \"earliest\"\n",
        "  initial_position = \"activation_time\"\n    [channel.source.properties]\n    \"reconnect.backoff.ms\" = \"5000\"\n    \"reconnect.backoff.max.ms\" = \"1000\"\n",
    );
    assert!(config.contains("reconnect.backoff.max.ms"));
    std::fs::write(dir.path().join("floe.toml"), config).unwrap();
    for entry in ENTRIES {
        let o = run(dir.path(), entry);
        assert_eq!(o.status.code(), Some(78), "{entry:?}: {}", stderr(&o));
        assert!(
            stderr(&o).contains("reconnect.backoff.max.ms"),
            "{entry:?}: {}",
            stderr(&o)
        );
        let store = SqlLeaseStore::open_sqlite(dir.path().join("leases.sqlite"))
            .await
            .unwrap();
        assert_eq!(
            store.get_channel_state("it").await.unwrap(),
            None,
            "{entry:?}: the channel was recorded before its source was refused"
        );
    }
}

/// A table whose partition spec or sort order is not the channel's (the configuration changed
/// after the table was made) is refused naming the key that differs, not `destination.table`.
#[tokio::test]
async fn a_table_with_another_partition_spec_or_sort_order_is_refused_naming_that_key() {
    for (changed, key, reason) in [
        (
            "partition = [\"day(event_time)\"]",
            "channel[0].destination.partition",
            "its partition spec is not [day(event_time)]",
        ),
        (
            "partition_field = \"event_time\"\nsort = [\"id\"]",
            "channel[0].destination.sort",
            "its sort order is not [id",
        ),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let config = config_toml(dir.path(), NO_BROKER, "w1", 6);
        std::fs::write(dir.path().join("floe.toml"), &config).unwrap();
        let o = run(dir.path(), Entry::Create);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        std::fs::write(
            dir.path().join("floe.toml"),
            config.replace("partition_field = \"event_time\"", changed),
        )
        .unwrap();
        let o = run(dir.path(), Entry::Run);
        assert_eq!(o.status.code(), Some(78), "{key}: {}", stderr(&o));
        assert!(stderr(&o).contains(key), "{key}: {}", stderr(&o));
        assert!(stderr(&o).contains(reason), "{key}: {}", stderr(&o));
    }
}
