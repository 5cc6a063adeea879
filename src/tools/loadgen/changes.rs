//! Change events (`floe-loadgen --changes`): a deterministic stream of Debezium-shaped change
//! events of one database table, `customers` (the row of `loadtest/cdc_row.schema.json`), and
//! the table's final state, from which `loadtest/verify_cdc.py` checks an upsert table.
//!
//! ```text
//!   ChangeSpec (seed, snapshot keys K, change events M, update and delete shares, schemas)
//!     ├─ initial snapshot: op "r" for ids 0..K (Debezium's snapshot; source.snapshot "true")
//!     └─ M change events, each drawn from the seed:
//!          delete (share)  op "d" of a random live key, then a tombstone (null value, same key)
//!          update (share)  op "u" of a random live key: before = its row, after = the next version
//!          insert (rest)   op "c": a deleted key comes back (1 in 4, when one exists), else a new id
//!   message key: the key as Debezium's JSON converter writes it ({"id":17}, or with
//!   schemas.enable {"schema":…,"payload":{"id":17}}), so one key stays on one Kafka partition
//!   FinalState: per key its last version and whether it is live
//! ```
//!
//! A row is a pure function of `(id, version, seed)` ([`row_json`]): every write of a key makes
//! its next version (a re-insert too), so the expected final row of a live key is
//! `row_json(id, last version)` — the row its last event carried. An update or delete with no
//! live key becomes an insert; that keeps the stream valid and changes the mix only at the very
//! start of a run without a snapshot.

use std::io::Write;

use serde_json::json;

/// What to generate: the same spec always gives the same messages.
#[derive(Debug, Clone)]
pub struct ChangeSpec {
    /// Random stream selector.
    pub seed: u64,
    /// Keys of the initial snapshot (op `r`, ids `0..snapshot_keys`); 0: none.
    pub snapshot_keys: u64,
    /// Change events after the snapshot (tombstones not counted).
    pub changes: u64,
    /// Share of updates among the change events, parts per million.
    pub updates_ppm: u32,
    /// Share of deletes among the change events, parts per million (the rest are inserts).
    pub deletes_ppm: u32,
    /// Debezium's JSON converter with `schemas.enable=true`: key and value are
    /// `{"schema": …, "payload": …}`; false: the bare payload.
    pub schemas_enable: bool,
    /// Time of the first event (`ts_ms`), milliseconds since the epoch; each message is 1 ms later.
    pub base_time_ms: i64,
    /// The snapshot's events are drawn (the state needs them) but not sent: an earlier run with
    /// the same spec and `changes = 0` sent them.
    pub skip_snapshot: bool,
}

impl ChangeSpec {
    /// Events of this spec (snapshot and changes), tombstones not counted.
    pub fn events(&self) -> u64 {
        self.snapshot_keys + self.changes
    }

    /// Events this run sends (tombstones not counted).
    pub fn sent_events(&self) -> u64 {
        if self.skip_snapshot {
            self.changes
        } else {
            self.events()
        }
    }

    /// Whether this run sends `message`.
    pub fn sends(&self, message: &ChangeMessage) -> bool {
        !(self.skip_snapshot && message.op == Some(Op::Read))
    }
}

/// Debezium's `op`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Op {
    /// `r`: a row read by the initial snapshot.
    Read,
    /// `c`: an insert.
    Create,
    /// `u`: an update.
    Update,
    /// `d`: a delete (followed by a tombstone).
    Delete,
}

impl Op {
    /// The `op` field's value.
    pub fn code(self) -> &'static str {
        match self {
            Op::Read => "r",
            Op::Create => "c",
            Op::Update => "u",
            Op::Delete => "d",
        }
    }
}

/// One Kafka message of the stream.
#[derive(Debug, Clone)]
pub struct ChangeMessage {
    /// Position in the stream, from 0 (tombstones included).
    pub seq: u64,
    /// The row's primary key.
    pub id: u64,
    /// The event's op; `None` for a tombstone.
    pub op: Option<Op>,
    /// Message key (JSON).
    pub key: Vec<u8>,
    /// Message value (JSON); `None` for a tombstone.
    pub value: Option<Vec<u8>>,
}

/// A set of keys with O(1) insert, remove and uniform pick (swap-remove over a dense vector).
#[derive(Debug, Default)]
struct KeySet {
    keys: Vec<u64>,
    /// Index in `keys` per id, `u32::MAX` when absent.
    slot: Vec<u32>,
}

impl KeySet {
    fn insert(&mut self, id: u64) {
        let i = id as usize;
        if self.slot.len() <= i {
            self.slot.resize(i + 1, u32::MAX);
        }
        debug_assert_eq!(self.slot[i], u32::MAX);
        self.slot[i] = self.keys.len() as u32;
        self.keys.push(id);
    }

    fn remove(&mut self, id: u64) {
        let at = self.slot[id as usize] as usize;
        self.keys.swap_remove(at);
        if let Some(&moved) = self.keys.get(at) {
            self.slot[moved as usize] = at as u32;
        }
        self.slot[id as usize] = u32::MAX;
    }

    fn pick(&self, random: u64) -> Option<u64> {
        (!self.keys.is_empty()).then(|| self.keys[(random % self.keys.len() as u64) as usize])
    }
}

/// Each key's last version (0: never written) and whether it is live, after the stream.
#[derive(Debug, Default, Clone)]
pub struct FinalState {
    /// Last version per id (index = id).
    pub versions: Vec<u32>,
    /// Whether the id's last event wrote a row (index = id).
    pub live: Vec<bool>,
}

impl FinalState {
    /// Live ids in increasing order.
    pub fn live_ids(&self) -> impl Iterator<Item = u64> + '_ {
        self.live
            .iter()
            .enumerate()
            .filter(|(_, l)| **l)
            .map(|(i, _)| i as u64)
    }

    /// Ids written at least once and deleted by their last event, in increasing order.
    pub fn deleted_ids(&self) -> impl Iterator<Item = u64> + '_ {
        self.versions
            .iter()
            .zip(&self.live)
            .enumerate()
            .filter(|(_, (v, l))| **v > 0 && !**l)
            .map(|(i, _)| i as u64)
    }
}

/// The stream: an iterator of [`ChangeMessage`]s; [`ChangeStream::state`] is the table's state
/// after the messages drawn so far.
#[derive(Debug)]
pub struct ChangeStream {
    spec: ChangeSpec,
    /// Events drawn (tombstones not counted).
    events: u64,
    /// Messages drawn (tombstones counted).
    seq: u64,
    live: KeySet,
    deleted: KeySet,
    state: FinalState,
    next_fresh: u64,
    /// A delete's tombstone, due next.
    tombstone: Option<u64>,
}

impl ChangeStream {
    /// The stream of `spec`, from its first message.
    pub fn new(spec: ChangeSpec) -> Self {
        ChangeStream {
            next_fresh: spec.snapshot_keys,
            spec,
            events: 0,
            seq: 0,
            live: KeySet::default(),
            deleted: KeySet::default(),
            state: FinalState::default(),
            tombstone: None,
        }
    }

    /// The table's state after the messages drawn so far.
    pub fn state(&self) -> &FinalState {
        &self.state
    }

    fn write(&mut self, id: u64) -> u32 {
        let i = id as usize;
        if self.state.versions.len() <= i {
            self.state.versions.resize(i + 1, 0);
            self.state.live.resize(i + 1, false);
        }
        self.state.versions[i] += 1;
        self.state.versions[i]
    }

    /// The next event's op and key (the snapshot first, then the drawn mix).
    fn draw(&mut self) -> (Op, u64) {
        let n = self.events;
        if n < self.spec.snapshot_keys {
            return (Op::Read, n);
        }
        let mut s = self.spec.seed ^ n.wrapping_mul(0x9E6C_63D0_676A_9A99);
        let mut next = || splitmix64(&mut s);
        let share = (next() % 1_000_000) as u32;
        let (pick, reinsert) = (next(), next() % 4 == 0);
        let op = if share < self.spec.deletes_ppm {
            Op::Delete
        } else if share < self.spec.deletes_ppm + self.spec.updates_ppm {
            Op::Update
        } else {
            Op::Create
        };
        match (op, self.live.pick(pick)) {
            (Op::Delete | Op::Update, Some(id)) => (op, id),
            _ => match self.deleted.pick(pick).filter(|_| reinsert) {
                Some(id) => (Op::Create, id),
                None => {
                    self.next_fresh += 1;
                    (Op::Create, self.next_fresh - 1)
                }
            },
        }
    }

    fn event(&mut self) -> ChangeMessage {
        let (op, id) = self.draw();
        self.events += 1;
        let ts_ms = self.spec.base_time_ms + self.seq as i64;
        let (seed, base) = (self.spec.seed, self.spec.base_time_ms);
        let current = self.state.versions.get(id as usize).copied().unwrap_or(0);
        let before =
            matches!(op, Op::Update | Op::Delete).then(|| row_json(id, current, seed, base));
        let after = match op {
            Op::Delete => {
                self.live.remove(id);
                self.deleted.insert(id);
                self.state.live[id as usize] = false;
                self.tombstone = Some(id);
                None
            }
            _ => {
                let version = self.write(id);
                match op {
                    Op::Update => {}
                    Op::Create if current > 0 => {
                        self.deleted.remove(id);
                        self.live.insert(id);
                    }
                    _ => self.live.insert(id),
                }
                self.state.live[id as usize] = true;
                Some(row_json(id, version, seed, base))
            }
        };
        let snapshot = match op {
            Op::Read if self.events == self.spec.snapshot_keys => "last",
            Op::Read => "true",
            _ => "false",
        };
        let payload = envelope(
            before.as_deref(),
            after.as_deref(),
            op,
            &source(self.seq, ts_ms, snapshot),
            ts_ms,
        );
        let value = if self.spec.schemas_enable {
            format!("{{\"schema\":{VALUE_SCHEMA},\"payload\":{payload}}}")
        } else {
            payload
        };
        ChangeMessage {
            seq: self.seq,
            id,
            op: Some(op),
            key: key_json(id, self.spec.schemas_enable).into_bytes(),
            value: Some(value.into_bytes()),
        }
    }
}

impl Iterator for ChangeStream {
    type Item = ChangeMessage;

    fn next(&mut self) -> Option<ChangeMessage> {
        let message = if let Some(id) = self.tombstone.take() {
            ChangeMessage {
                seq: self.seq,
                id,
                op: None,
                key: key_json(id, self.spec.schemas_enable).into_bytes(),
                value: None,
            }
        } else if self.events < self.spec.events() {
            self.event()
        } else {
            return None;
        };
        self.seq += 1;
        Some(message)
    }
}

/// One step of SplitMix64 (as in [`crate::tools::sample_events`]).
fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

const TIERS: &[&str] = &["free", "basic", "pro", "team", "enterprise"];

/// Row `version` of key `id`: `{"id","name","email","tier","balance","version","updated_at"}`
/// (the columns of `loadtest/cdc_row.schema.json`; `email` is null in about 1 version in 8),
/// a pure function of its arguments. `updated_at` is `version` seconds after `base_time_ms`
/// plus up to a second, RFC 3339 UTC with microseconds (Debezium's `ZonedTimestamp`).
pub fn row_json(id: u64, version: u32, seed: u64, base_time_ms: i64) -> String {
    let mut s = seed ^ id.wrapping_mul(0xD1B5_4A32_D192_ED03) ^ (u64::from(version) << 40);
    let mut next = || splitmix64(&mut s);
    let email = if next() % 8 == 0 {
        "null".to_string()
    } else {
        format!("\"c{id}.v{version}@example.com\"")
    };
    let tier = TIERS[(next() % TIERS.len() as u64) as usize];
    let balance = (next() % 10_000_000) as f64 / 100.0;
    let micros = base_time_ms * 1000 + i64::from(version) * 1_000_000 + (next() % 1_000_000) as i64;
    format!(
        "{{\"id\":{id},\"name\":\"customer {id}\",\"email\":{email},\"tier\":\"{tier}\",\"balance\":{balance:?},\"version\":{version},\"updated_at\":\"{}\"}}",
        crate::tools::sample_events::format_timestamp_micros(micros)
    )
}

/// The message key of `id`, as Debezium's JSON converter writes it.
pub fn key_json(id: u64, schemas_enable: bool) -> String {
    if schemas_enable {
        format!("{{\"schema\":{KEY_SCHEMA},\"payload\":{{\"id\":{id}}}}}")
    } else {
        format!("{{\"id\":{id}}}")
    }
}

/// Debezium's `source` block (PostgreSQL connector) of message `seq`.
fn source(seq: u64, ts_ms: i64, snapshot: &str) -> String {
    format!(
        "{{\"version\":\"2.7.3.Final\",\"connector\":\"postgresql\",\"name\":\"dbserver1\",\"ts_ms\":{ts_ms},\"snapshot\":\"{snapshot}\",\"db\":\"inventory\",\"sequence\":null,\"schema\":\"public\",\"table\":\"customers\",\"txId\":{},\"lsn\":{},\"xmin\":null}}",
        1000 + seq / 4,
        33_554_432 + seq * 64
    )
}

fn envelope(before: Option<&str>, after: Option<&str>, op: Op, source: &str, ts_ms: i64) -> String {
    format!(
        "{{\"before\":{},\"after\":{},\"source\":{source},\"op\":\"{}\",\"ts_ms\":{},\"transaction\":null}}",
        before.unwrap_or("null"),
        after.unwrap_or("null"),
        op.code(),
        ts_ms + 3
    )
}

/// The row's fields in Kafka Connect's schema language (a macro: `concat!` takes literals only).
macro_rules! row_fields {
    () => {
        r#"[{"type":"int64","optional":false,"field":"id"},{"type":"string","optional":false,"field":"name"},{"type":"string","optional":true,"field":"email"},{"type":"string","optional":false,"field":"tier"},{"type":"double","optional":false,"field":"balance"},{"type":"int32","optional":false,"field":"version"},{"type":"string","optional":false,"name":"io.debezium.time.ZonedTimestamp","version":1,"field":"updated_at"}]"#
    };
}

/// Kafka Connect schema of the key (`schemas.enable=true`).
const KEY_SCHEMA: &str = r#"{"type":"struct","fields":[{"type":"int64","optional":false,"field":"id"}],"optional":false,"name":"dbserver1.public.customers.Key"}"#;

/// Kafka Connect schema of the value (`schemas.enable=true`): Debezium's envelope of the row.
const VALUE_SCHEMA: &str = concat!(
    r#"{"type":"struct","fields":["#,
    r#"{"type":"struct","fields":"#,
    row_fields!(),
    r#","optional":true,"name":"dbserver1.public.customers.Value","field":"before"},"#,
    r#"{"type":"struct","fields":"#,
    row_fields!(),
    r#","optional":true,"name":"dbserver1.public.customers.Value","field":"after"},"#,
    r#"{"type":"struct","fields":[{"type":"string","optional":false,"field":"version"},{"type":"string","optional":false,"field":"connector"},{"type":"string","optional":false,"field":"name"},{"type":"int64","optional":false,"field":"ts_ms"},{"type":"string","optional":true,"name":"io.debezium.data.Enum","version":1,"parameters":{"allowed":"true,last,false,incremental"},"default":"false","field":"snapshot"},{"type":"string","optional":false,"field":"db"},{"type":"string","optional":true,"field":"sequence"},{"type":"string","optional":false,"field":"schema"},{"type":"string","optional":false,"field":"table"},{"type":"int64","optional":true,"field":"txId"},{"type":"int64","optional":true,"field":"lsn"},{"type":"int64","optional":true,"field":"xmin"}],"optional":false,"name":"io.debezium.connector.postgresql.Source","field":"source"},"#,
    r#"{"type":"string","optional":false,"field":"op"},"#,
    r#"{"type":"int64","optional":true,"field":"ts_ms"},"#,
    r#"{"type":"struct","fields":[{"type":"string","optional":false,"field":"id"},{"type":"int64","optional":false,"field":"total_order"},{"type":"int64","optional":false,"field":"data_collection_order"}],"optional":true,"name":"event.block","version":1,"field":"transaction"}"#,
    r#"],"optional":false,"name":"dbserver1.public.customers.Envelope","version":1}"#
);

/// What a change run sent, beyond [`super::Produced`]: events by op and tombstones.
#[derive(Debug, Default, Clone)]
pub struct ChangeCounts {
    /// Events per op code (`r`, `c`, `u`, `d`).
    pub by_op: std::collections::BTreeMap<&'static str, u64>,
    /// Tombstones (one per delete).
    pub tombstones: u64,
}

impl ChangeCounts {
    /// Counts `message`.
    pub fn note(&mut self, message: &ChangeMessage) {
        match message.op {
            Some(op) => *self.by_op.entry(op.code()).or_default() += 1,
            None => self.tombstones += 1,
        }
    }
}

/// Writes the manifest of a change run (JSON lines): a `header` (the spec, the key, the sink),
/// one `row` line per live key with its expected row (the row of its last event), `deleted`
/// lines (ids whose last event deleted them, 10,000 a line) and a `done` line (messages,
/// acknowledged, failed message positions, events by op, tombstones, per-partition counts,
/// bytes, elapsed seconds, events/s).
///
/// Errors: I/O.
pub fn write_manifest(
    path: &std::path::Path,
    spec: &ChangeSpec,
    sink: serde_json::Value,
    produced: &super::Produced,
    counts: &ChangeCounts,
    state: &FinalState,
) -> std::io::Result<()> {
    let mut out = std::io::BufWriter::with_capacity(1 << 20, std::fs::File::create(path)?);
    let header = json!({
        "kind": "header",
        "mode": "changes",
        "table": "customers",
        "key": ["id"],
        "seed": spec.seed,
        "snapshot_keys": spec.snapshot_keys,
        "changes": spec.changes,
        "updates_ppm": spec.updates_ppm,
        "deletes_ppm": spec.deletes_ppm,
        "schemas_enable": spec.schemas_enable,
        "base_time_ms": spec.base_time_ms,
        "skip_snapshot": spec.skip_snapshot,
        "sink": sink,
    });
    writeln!(out, "{header}")?;
    let mut live = 0u64;
    for id in state.live_ids() {
        let row = row_json(
            id,
            state.versions[id as usize],
            spec.seed,
            spec.base_time_ms,
        );
        writeln!(out, "{{\"kind\":\"row\",\"row\":{row}}}")?;
        live += 1;
    }
    let deleted: Vec<u64> = state.deleted_ids().collect();
    for ids in deleted.chunks(10_000) {
        writeln!(out, "{}", json!({"kind": "deleted", "ids": ids}))?;
    }
    let secs = produced.elapsed.as_secs_f64();
    let events = spec.sent_events();
    let done = json!({
        "kind": "done",
        "messages": events + counts.tombstones,
        "events": events,
        "acknowledged": produced.acknowledged,
        "failed_messages": produced.failed_ids,
        "by_op": counts.by_op,
        "tombstones": counts.tombstones,
        "live_keys": live,
        "deleted_keys": deleted.len(),
        "per_shard": produced.per_shard,
        "bytes": produced.bytes,
        "retries": produced.retries,
        "elapsed_s": secs,
        "events_per_s": if secs > 0.0 { events as f64 / secs } else { 0.0 },
    });
    writeln!(out, "{done}")?;
    out.flush()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn spec(schemas_enable: bool) -> ChangeSpec {
        ChangeSpec {
            seed: 7,
            snapshot_keys: 200,
            changes: 5000,
            updates_ppm: 700_000,
            deletes_ppm: 100_000,
            schemas_enable,
            base_time_ms: 1_783_627_200_000,
            skip_snapshot: false,
        }
    }

    /// Replays the messages as a consumer would (last event per key wins) and compares with the
    /// stream's final state and its rows.
    #[test]
    fn final_state_is_the_last_event_of_every_key() {
        let mut stream = ChangeStream::new(spec(false));
        let mut table: HashMap<u64, serde_json::Value> = HashMap::new();
        let mut counts = ChangeCounts::default();
        let mut last_was_delete = None;
        for m in stream.by_ref() {
            counts.note(&m);
            let key: serde_json::Value = serde_json::from_slice(&m.key).unwrap();
            assert_eq!(key, json!({"id": m.id}));
            let Some(value) = &m.value else {
                assert_eq!(
                    last_was_delete.take(),
                    Some(m.id),
                    "tombstone follows its delete"
                );
                continue;
            };
            assert_eq!(last_was_delete, None);
            let v: serde_json::Value = serde_json::from_slice(value).unwrap();
            match v["op"].as_str().unwrap() {
                "r" | "c" => {
                    assert!(v["before"].is_null());
                    assert!(
                        table.insert(m.id, v["after"].clone()).is_none(),
                        "c of a live key"
                    );
                }
                "u" => {
                    let old = table
                        .insert(m.id, v["after"].clone())
                        .expect("u of a live key");
                    assert_eq!(old, v["before"]);
                }
                "d" => {
                    assert!(v["after"].is_null());
                    assert_eq!(table.remove(&m.id).expect("d of a live key"), v["before"]);
                    last_was_delete = Some(m.id);
                }
                op => panic!("op {op}"),
            }
        }
        let state = stream.state();
        assert_eq!(state.live_ids().count(), table.len());
        for id in state.live_ids() {
            let row: serde_json::Value = serde_json::from_str(&row_json(
                id,
                state.versions[id as usize],
                7,
                1_783_627_200_000,
            ))
            .unwrap();
            assert_eq!(table[&id], row);
        }
        assert_eq!(counts.by_op["r"], 200);
        let changes = 5000.0;
        let share = |op: &str| counts.by_op.get(op).copied().unwrap_or(0) as f64 / changes;
        assert!((share("u") - 0.7).abs() < 0.03, "{counts:?}");
        assert!((share("d") - 0.1).abs() < 0.02, "{counts:?}");
        assert_eq!(counts.tombstones, counts.by_op["d"]);
        // Some deleted keys came back as inserts.
        let reinserted = state
            .versions
            .iter()
            .zip(&state.live)
            .filter(|(v, l)| **v > 1 && **l);
        assert!(reinserted.count() > 0);
    }

    #[test]
    fn schemas_enable_wraps_key_and_value_and_the_stream_is_deterministic() {
        let a: Vec<ChangeMessage> = ChangeStream::new(spec(true)).take(400).collect();
        let b: Vec<ChangeMessage> = ChangeStream::new(spec(true)).take(400).collect();
        for (x, y) in a.iter().zip(&b) {
            assert_eq!((&x.key, &x.value), (&y.key, &y.value));
        }
        let m = a.iter().find(|m| m.op == Some(Op::Update)).unwrap();
        let v: serde_json::Value = serde_json::from_slice(m.value.as_ref().unwrap()).unwrap();
        assert_eq!(v["schema"]["name"], "dbserver1.public.customers.Envelope");
        assert_eq!(v["payload"]["op"], "u");
        assert_eq!(v["payload"]["after"]["id"], m.id);
        let k: serde_json::Value = serde_json::from_slice(&m.key).unwrap();
        assert_eq!(k["payload"], json!({"id": m.id}));
        assert_eq!(a[199].op, Some(Op::Read));
        let last: serde_json::Value =
            serde_json::from_slice(a[199].value.as_ref().unwrap()).unwrap();
        assert_eq!(last["payload"]["source"]["snapshot"], "last");
    }

    #[test]
    fn rows_follow_the_row_schema() {
        let doc: serde_json::Value =
            serde_json::from_str(include_str!("../../../loadtest/cdc_row.schema.json")).unwrap();
        let schema =
            std::sync::Arc::new(crate::schema::MappedSchema::from_json_schema(&doc, "").unwrap());
        let mut conv =
            crate::convert::Converter::try_new(schema.clone(), schema.arrow_schema()).unwrap();
        for id in 0..50 {
            for version in 1..4 {
                let row = row_json(id, version, 3, 1_783_627_200_000);
                conv.push(row.as_bytes())
                    .unwrap_or_else(|e| panic!("{row}: {e:?}"));
            }
        }
    }
}
