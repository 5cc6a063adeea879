//! Deterministic `Event` records (the schema of `config/event.schema.json`) for the
//! quickstart, the load generator, the benchmarks and tests.
//!
//! The same `(id, seed, base_time_ms, spread_hours)` always gives the same bytes (a SplitMix64
//! stream seeded from `seed` and `id`; no `rand` dependency), so every run measures and verifies
//! the same data. Every record carries its unique `id` — in the JSON where the record is JSON, and
//! always as the Kafka message key in decimal text ([`event_key`]) — so a verifier can reconcile
//! the table and the DLQ with what was produced, by id.
//!
//! The same events in Avro (`config/event.avsc`, [`event_avro`]) and Protobuf
//! (`config/event.proto`, [`event_protobuf`]) come from the typed [`EventValues`] that
//! [`event_json`] renders, framed for a Confluent registry by [`confluent_frame`]; their bad
//! records are [`FramedBadKind`]s. (apache-avro writes a map in its `HashMap`'s order, so the
//! Avro bytes of an event with two `attrs` may differ between processes; the values never do.)
//!
//! ```text
//!   {"id":17,"event_time":"2026-07-09T20:00:00.123456Z","source":"checkout","value":1.5,
//!    "amount":12.30,"user":{"country":"DE","tier":2},"tags":["a","b"],"attrs":{"k":"v"}}
//! ```

/// One step of SplitMix64: advances `state` and returns the next 64 random bits.
fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A random stream for record `id` under `seed`.
fn stream(id: u64, seed: u64) -> u64 {
    let mut s = seed ^ id.wrapping_mul(0xD1B5_4A32_D192_ED03);
    splitmix64(&mut s)
}

const SOURCES: &[&str] = &["checkout", "search", "cart", "login", "payment", "browse"];
const COUNTRIES: &[&str] = &["DE", "US", "FR", "JP", "BR", "IN", "GB", "NL"];
const TAGS: &[&str] = &["a", "b", "new", "vip", "mobile", "promo"];

/// The Kafka message key of record `id`: the id in decimal text.
pub fn event_key(id: u64) -> String {
    id.to_string()
}

/// Formats microseconds since the Unix epoch as RFC 3339 UTC with 6 fractional digits
/// (`2026-07-09T20:00:00.123456Z`).
pub fn format_timestamp_micros(micros: i64) -> String {
    let secs = micros.div_euclid(1_000_000);
    let frac = micros.rem_euclid(1_000_000);
    let days = secs.div_euclid(86_400);
    let sod = secs.rem_euclid(86_400);
    let (y, m, d) = crate::time::civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{frac:06}Z",
        sod / 3600,
        (sod % 3600) / 60,
        sod % 60
    )
}

/// The values of one valid event, typed: what [`event_json`] renders as JSON and
/// [`event_avro`] / [`event_protobuf`] encode, so every format carries the same event for an id.
#[derive(Debug, Clone, PartialEq)]
pub struct EventValues {
    /// The record's unique id.
    pub id: u64,
    /// `event_time`, microseconds since the Unix epoch.
    pub event_time_micros: i64,
    /// `source`.
    pub source: &'static str,
    /// `value`.
    pub value: f64,
    /// `amount` in cents (the decimal with scale 2 whose unscaled value this is).
    pub amount_cents: u64,
    /// `user.country`.
    pub country: &'static str,
    /// `user.tier`, in `0..=10`.
    pub tier: u8,
    /// `tags`.
    pub tags: Vec<&'static str>,
    /// `attrs`, in key order (`k0`, `k1`).
    pub attrs: Vec<(String, String)>,
}

impl EventValues {
    /// The event of record `id` (see [`event_json`] for the arguments).
    pub fn generate(id: u64, seed: u64, base_time_ms: i64, spread_hours: u32) -> Self {
        let mut s = stream(id, seed);
        let mut next = || splitmix64(&mut s);
        let spread_us: u64 = if spread_hours == 0 {
            1_000_000
        } else {
            u64::from(spread_hours) * 3_600_000_000
        };
        let event_time_micros = base_time_ms * 1000 + (next() % spread_us) as i64;
        let value = (next() % 1_000_000) as f64 / 100.0;
        let amount_cents = next() % 100_000;
        let num_tags = (next() % 3) as usize;
        let tags = (0..num_tags)
            .map(|_| TAGS[(next() % TAGS.len() as u64) as usize])
            .collect();
        let num_attrs = 1 + (next() % 2);
        let attrs = (0..num_attrs)
            .map(|i| (format!("k{i}"), format!("v{}", next() % 1000)))
            .collect();
        let source = SOURCES[(next() % SOURCES.len() as u64) as usize];
        let country = COUNTRIES[(next() % COUNTRIES.len() as u64) as usize];
        let tier = (next() % 11) as u8;
        EventValues {
            id,
            event_time_micros,
            source,
            value,
            amount_cents,
            country,
            tier,
            tags,
            attrs,
        }
    }
}

/// The fields of one event as JSON text fragments; `None` leaves the field out.
struct EventFields {
    id: u64,
    event_time: Option<String>,
    source: String,
    value: Option<String>,
    amount: String,
    country: String,
    tier: String,
    tags: String,
    attrs: String,
    /// Further `,"key":value` members appended before the closing brace (the wide shape).
    extra: String,
}

impl EventFields {
    fn generate(id: u64, seed: u64, base_time_ms: i64, spread_hours: u32) -> Self {
        let e = EventValues::generate(id, seed, base_time_ms, spread_hours);
        let tags: Vec<String> = e.tags.iter().map(|t| format!("\"{t}\"")).collect();
        let attrs: Vec<String> = e
            .attrs
            .iter()
            .map(|(k, v)| format!("\"{k}\":\"{v}\""))
            .collect();
        EventFields {
            id,
            event_time: Some(format!(
                "\"{}\"",
                format_timestamp_micros(e.event_time_micros)
            )),
            source: format!("\"{}\"", e.source),
            value: Some(format!("{:?}", e.value)),
            amount: format!("{}.{:02}", e.amount_cents / 100, e.amount_cents % 100),
            country: format!("\"{}\"", e.country),
            tier: e.tier.to_string(),
            tags: format!("[{}]", tags.join(",")),
            attrs: format!("{{{}}}", attrs.join(",")),
            extra: String::new(),
        }
    }

    fn render(&self) -> String {
        let mut out = format!("{{\"id\":{}", self.id);
        if let Some(t) = &self.event_time {
            out.push_str(&format!(",\"event_time\":{t}"));
        }
        out.push_str(&format!(",\"source\":{}", self.source));
        if let Some(v) = &self.value {
            out.push_str(&format!(",\"value\":{v}"));
        }
        out.push_str(&format!(
            ",\"amount\":{},\"user\":{{\"country\":{},\"tier\":{}}},\"tags\":{},\"attrs\":{}{}}}",
            self.amount, self.country, self.tier, self.tags, self.attrs, self.extra
        ));
        out
    }
}

/// A valid `Event` record as JSON text (about 150–200 bytes), deterministic in its arguments.
///
/// - `id`: the record's unique id (also its Kafka key, [`event_key`]).
/// - `seed`: selects the random stream; same seed, same records.
/// - `base_time_ms`: earliest `event_time`, in milliseconds since the Unix epoch.
/// - `spread_hours`: `event_time` is uniform in `[base, base + spread_hours h)`, or in
///   `[base, base + 1 s)` when 0 — a spread of `n` hours touches up to `n + 1` hour partitions.
///
/// Valid per `event.schema.json`: `amount` has exactly 2 decimals, `user.tier` is in `0..=10`,
/// `event_time` is RFC 3339 UTC with microseconds.
pub fn event_json(id: u64, seed: u64, base_time_ms: i64, spread_hours: u32) -> String {
    EventFields::generate(id, seed, base_time_ms, spread_hours).render()
}

/// The Avro datum (no framing) of `e` under `config/event.avsc`, parsed as `schema`, written
/// by apache-avro (`attrs` in the order of its map, which may differ between processes).
///
/// Errors: apache-avro's, when `schema` is not that Event schema.
pub fn event_avro(
    schema: &apache_avro::Schema,
    e: &EventValues,
) -> Result<Vec<u8>, apache_avro::Error> {
    use apache_avro::types::Value as V;
    let some = |v: V| V::Union(1, Box::new(v));
    let cents = e.amount_cents as i64;
    // The decimal's unscaled value as big-endian two's complement, minimal (Avro spec).
    let be = cents.to_be_bytes();
    let skip = be
        .windows(2)
        .take_while(|w| w[0] == 0 && w[1] & 0x80 == 0)
        .count();
    let record = V::Record(vec![
        ("id".into(), V::Long(e.id as i64)),
        ("event_time".into(), V::TimestampMicros(e.event_time_micros)),
        ("source".into(), some(V::String(e.source.into()))),
        ("value".into(), V::Double(e.value)),
        (
            "amount".into(),
            some(V::Decimal(apache_avro::Decimal::from(be[skip..].to_vec()))),
        ),
        (
            "user".into(),
            some(V::Record(vec![
                ("country".into(), V::String(e.country.into())),
                ("tier".into(), some(V::Int(i32::from(e.tier)))),
            ])),
        ),
        (
            "tags".into(),
            some(V::Array(
                e.tags.iter().map(|t| V::String((*t).into())).collect(),
            )),
        ),
        (
            "attrs".into(),
            some(V::Map(
                e.attrs
                    .iter()
                    .map(|(k, v)| (k.clone(), V::String(v.clone())))
                    .collect(),
            )),
        ),
    ]);
    apache_avro::to_avro_datum(schema, record)
}

/// The Protobuf encoding (no framing) of `e` as the message `Event` of `config/event.proto`
/// (proto3: implicit-presence fields at their default are left out; `amount` is the double
/// `cents / 100`).
pub fn event_protobuf(e: &EventValues) -> Vec<u8> {
    use prost::encoding::{bytes, double, int32, int64, string};
    let mut out = Vec::with_capacity(128);
    if e.id != 0 {
        int64::encode(1, &(e.id as i64), &mut out);
    }
    let mut ts = Vec::new();
    let seconds = e.event_time_micros.div_euclid(1_000_000);
    let nanos = (e.event_time_micros.rem_euclid(1_000_000) * 1000) as i32;
    if seconds != 0 {
        int64::encode(1, &seconds, &mut ts);
    }
    if nanos != 0 {
        int32::encode(2, &nanos, &mut ts);
    }
    bytes::encode(2, &ts, &mut out);
    string::encode(3, &e.source.to_string(), &mut out);
    if e.value != 0.0 {
        double::encode(4, &e.value, &mut out);
    }
    double::encode(5, &(e.amount_cents as f64 / 100.0), &mut out);
    let mut user = Vec::new();
    string::encode(1, &e.country.to_string(), &mut user);
    int32::encode(2, &i32::from(e.tier), &mut user);
    bytes::encode(6, &user, &mut out);
    for t in &e.tags {
        string::encode(7, &t.to_string(), &mut out);
    }
    for (k, v) in &e.attrs {
        let mut entry = Vec::new();
        string::encode(1, k, &mut entry);
        string::encode(2, v, &mut entry);
        bytes::encode(8, &entry, &mut out);
    }
    out
}

/// `payload` in the Confluent wire format: magic byte 0, `schema_id` (4 bytes, big-endian),
/// for Protobuf the message indexes of the schema's first message (the single byte 0), then
/// the payload.
pub fn confluent_frame(schema_id: u32, protobuf: bool, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(6 + payload.len());
    out.push(0);
    out.extend_from_slice(&schema_id.to_be_bytes());
    if protobuf {
        out.push(0);
    }
    out.extend_from_slice(payload);
    out
}

/// A kind of bad record in the Confluent wire format (Avro or Protobuf), each landing in the
/// DLQ with a known code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FramedBadKind {
    /// The event as plain JSON, without framing (magic byte `{`) → `DESERIALIZATION_ERROR`.
    PlainJson,
    /// A valid frame whose magic byte is 1 → `DESERIALIZATION_ERROR`.
    MagicByte,
    /// A valid frame without its last byte (inside the last map entry) →
    /// `DESERIALIZATION_ERROR`.
    Truncated,
    /// A valid payload framed with a schema id the registry does not have → `INVALID_SCHEMA`.
    UnknownSchemaId,
}

impl FramedBadKind {
    /// Every kind, in a fixed order.
    pub const ALL: [FramedBadKind; 4] = [
        FramedBadKind::PlainJson,
        FramedBadKind::MagicByte,
        FramedBadKind::Truncated,
        FramedBadKind::UnknownSchemaId,
    ];

    /// The schema id of [`FramedBadKind::UnknownSchemaId`] records (no registry reaches it:
    /// ids count from 1).
    pub const UNKNOWN_SCHEMA_ID: u32 = 2_000_000_000;

    /// The DLQ error code floe gives a record of this kind.
    pub fn expected_code(self) -> &'static str {
        match self {
            FramedBadKind::UnknownSchemaId => "INVALID_SCHEMA",
            _ => "DESERIALIZATION_ERROR",
        }
    }

    /// The bad record of this kind for record `id`, made from its good `frame` (framed with
    /// [`confluent_frame`]) and the `id`'s JSON event `json`.
    pub fn make(self, frame: &[u8], json: &str) -> Vec<u8> {
        match self {
            FramedBadKind::PlainJson => json.as_bytes().to_vec(),
            FramedBadKind::MagicByte => {
                let mut b = frame.to_vec();
                b[0] = 1;
                b
            }
            FramedBadKind::Truncated => frame[..frame.len() - 1].to_vec(),
            FramedBadKind::UnknownSchemaId => {
                let mut b = frame.to_vec();
                b[1..5].copy_from_slice(&Self::UNKNOWN_SCHEMA_ID.to_be_bytes());
                b
            }
        }
    }
}

/// The shape of generated records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Shape {
    /// The 8-field `Event` of `config/event.schema.json` (about 150–200 bytes).
    Event,
    /// `Event` plus 32 more top-level fields — 40 columns, nested structs, lists of structs and
    /// maps, uuid, date, time, decimals — `config/wide.schema.json` (about 1.1–1.4 KB).
    Wide,
}

const CURRENCIES: &[&str] = &["EUR", "USD", "JPY", "GBP"];
const OSES: &[&str] = &["android", "ios", "linux", "windows", "macos"];
const CITIES: &[&str] = &["Berlin", "Paris", "Tokyo", "Lagos", "Lima", "Pune", "Oslo"];

/// The 32 fields the wide shape adds to an `Event`, as `,"key":value` members.
fn wide_extra(id: u64, seed: u64, micros: u64) -> String {
    let mut s = stream(id, seed ^ 0x0001_1DE0);
    let mut n = || splitmix64(&mut s);
    let uuid = {
        let (a, b) = (n(), n());
        format!(
            "{:08x}-{:04x}-4{:03x}-{:04x}-{:012x}",
            a >> 32,
            (a >> 16) & 0xffff,
            a & 0xfff,
            0x8000 | (b >> 48) & 0x3fff,
            b & 0xffff_ffff_ffff
        )
    };
    let days = (micros / 86_400_000_000) as i64;
    let (y, m, d) = crate::time::civil_from_days(days);
    let sod = (micros / 1_000_000) % 86_400;
    let num_items = 1 + n() % 3;
    let items: Vec<String> = (0..num_items)
        .map(|i| {
            let c = n() % 100_000;
            format!(
                "{{\"sku\":\"sku-{i}-{}\",\"qty\":{},\"price\":{}.{:02}}}",
                n() % 10_000,
                1 + n() % 9,
                c / 100,
                c % 100
            )
        })
        .collect();
    let referrer = if n() % 4 == 0 {
        "null".to_string()
    } else {
        format!("\"https://ref.example/{}\"", n() % 1000)
    };
    let campaign = if n() % 3 == 0 {
        "null".to_string()
    } else {
        format!("\"cmp-{}\"", n() % 50)
    };
    let p = n() % 100_000_000;
    format!(
        concat!(
            ",\"session_id\":\"{uuid}\",\"event_date\":\"{y:04}-{m:02}-{d:02}\",\"is_test\":{is_test}",
            ",\"count\":{count},\"duration_ms\":{duration},\"score\":{score:?},\"price\":{pi}.{pf:04}",
            ",\"currency\":\"{currency}\",\"url\":\"https://shop.example/p/{page}\",\"referrer\":{referrer}",
            ",\"ip\":\"10.{i1}.{i2}.{i3}\",\"user_agent\":\"Mozilla/5.0 (X11; Linux x86_64) floe-loadgen/{ua}\"",
            ",\"device\":{{\"type\":\"{dtype}\",\"os\":\"{os}\",\"version\":\"{v1}.{v2}\",\"screen\":{{\"w\":{w},\"h\":{h}}}}}",
            ",\"geo\":{{\"lat\":{lat:?},\"lon\":{lon:?},\"city\":\"{city}\",\"country\":\"{gc}\"}}",
            ",\"items\":[{items}],\"metrics\":{{\"m0\":{m0:?},\"m1\":{m1:?}}},\"flags\":[{f0},{f1}]",
            ",\"ratio\":{ratio:?},\"level\":{level},\"category\":\"cat-{cat}\",\"subcategory\":\"sub-{sub}\"",
            ",\"campaign\":{campaign},\"experiment\":{{\"name\":\"exp-{exp}\",\"variant\":\"{variant}\"}}",
            ",\"latency_us\":{latency},\"bytes_in\":{bin},\"bytes_out\":{bout},\"retries\":{retries}",
            ",\"status_code\":{status},\"local_time\":\"{hh:02}:{mm:02}:{ss:02}Z\"",
            ",\"payload_hash\":\"{hash:016x}\",\"notes\":\"note {notes}\",\"labels\":{{\"team\":\"t{team}\",\"env\":\"prod\"}}"
        ),
        uuid = uuid,
        y = y,
        m = m,
        d = d,
        is_test = n() % 10 == 0,
        count = n() % 1_000_000,
        duration = n() % 10_000_000_000,
        score = (n() % 1_000_000) as f64 / 1000.0,
        pi = p / 10_000,
        pf = p % 10_000,
        currency = CURRENCIES[(n() % CURRENCIES.len() as u64) as usize],
        page = n() % 100_000,
        referrer = referrer,
        i1 = n() % 256,
        i2 = n() % 256,
        i3 = n() % 256,
        ua = n() % 100,
        dtype = if n() % 2 == 0 { "mobile" } else { "desktop" },
        os = OSES[(n() % OSES.len() as u64) as usize],
        v1 = n() % 20,
        v2 = n() % 10,
        w = 320 + n() % 3000,
        h = 480 + n() % 2000,
        lat = (n() % 180_000) as f64 / 1000.0 - 90.0,
        lon = (n() % 360_000) as f64 / 1000.0 - 180.0,
        city = CITIES[(n() % CITIES.len() as u64) as usize],
        gc = COUNTRIES[(n() % COUNTRIES.len() as u64) as usize],
        items = items.join(","),
        m0 = (n() % 10_000) as f64 / 10.0,
        m1 = (n() % 10_000) as f64 / 100.0,
        f0 = n() % 2 == 0,
        f1 = n() % 2 == 0,
        ratio = (n() % 1000) as f64 / 1000.0,
        level = n() % 6,
        cat = n() % 20,
        sub = n() % 200,
        campaign = campaign,
        exp = n() % 5,
        variant = if n() % 2 == 0 { "a" } else { "b" },
        latency = n() % 5_000_000,
        bin = n() % 1_000_000_000,
        bout = n() % 1_000_000_000,
        retries = n() % 11,
        status = 100 + n() % 500,
        hh = sod / 3600,
        mm = (sod % 3600) / 60,
        ss = sod % 60,
        hash = n(),
        notes = n() % 1_000_000,
        team = n() % 30,
    )
}

/// A valid record of `shape` as JSON text, deterministic in its arguments (see [`event_json`]).
pub fn shaped_json(
    shape: Shape,
    id: u64,
    seed: u64,
    base_time_ms: i64,
    spread_hours: u32,
) -> String {
    let mut f = EventFields::generate(id, seed, base_time_ms, spread_hours);
    if shape == Shape::Wide {
        f.extra = wide_extra(id, seed, (base_time_ms.max(0) as u64) * 1000);
    }
    f.render()
}

/// A bad record of `kind` and `shape` for `id`, and the DLQ code floe must give it (see
/// [`bad_event`]; the wide shape breaks the same `Event` field and carries the wide fields).
pub fn shaped_bad(shape: Shape, id: u64, kind: BadKind) -> (Vec<u8>, &'static str) {
    if shape == Shape::Event || kind == BadKind::NotJson {
        return bad_event(id, kind);
    }
    let mut f = EventFields::generate(id, 0xBAD, BAD_BASE_TIME_MS, 1);
    f.extra = wide_extra(id, 0xBAD, (BAD_BASE_TIME_MS as u64) * 1000);
    mutate(&mut f, kind);
    (f.render().into_bytes(), kind.expected_code())
}

/// A kind of bad record, each landing in the DLQ with a known code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BadKind {
    /// Not JSON at all (the id only in the key and in the text) → `DESERIALIZATION_ERROR`.
    NotJson,
    /// The required `value` field is absent → `MISSING_REQUIRED_FIELD`.
    MissingValue,
    /// The partition field `event_time` is absent → `MISSING_PARTITION_VALUE`.
    MissingEventTime,
    /// `"value": "12"`, a string where a number is required → `TYPE_MISMATCH`.
    ValueAsString,
    /// `user.tier = 99`, above the schema's maximum 10 → `VALUE_OUT_OF_RANGE`.
    TierOutOfRange,
    /// `event_time` without a UTC offset → `TYPE_MISMATCH`.
    EventTimeWithoutOffset,
    /// `amount = 1.234`, not a multiple of 0.01 → `VALUE_OUT_OF_RANGE`.
    AmountTooPrecise,
}

impl BadKind {
    /// Every kind, in a fixed order.
    pub const ALL: [BadKind; 7] = [
        BadKind::NotJson,
        BadKind::MissingValue,
        BadKind::MissingEventTime,
        BadKind::ValueAsString,
        BadKind::TierOutOfRange,
        BadKind::EventTimeWithoutOffset,
        BadKind::AmountTooPrecise,
    ];

    /// The kind's name on the command line and in manifests (`not_json`, `missing_value`, ...).
    pub fn name(self) -> &'static str {
        match self {
            BadKind::NotJson => "not_json",
            BadKind::MissingValue => "missing_value",
            BadKind::MissingEventTime => "missing_event_time",
            BadKind::ValueAsString => "value_as_string",
            BadKind::TierOutOfRange => "tier_out_of_range",
            BadKind::EventTimeWithoutOffset => "event_time_without_offset",
            BadKind::AmountTooPrecise => "amount_too_precise",
        }
    }

    /// The kind named `name` ([`BadKind::name`]).
    pub fn from_name(name: &str) -> Option<BadKind> {
        BadKind::ALL.into_iter().find(|k| k.name() == name)
    }

    /// The DLQ error code floe must give a record of this kind (docs/schema-mapping.md "DLQ error codes").
    pub fn expected_code(self) -> &'static str {
        match self {
            BadKind::NotJson => "DESERIALIZATION_ERROR",
            BadKind::MissingValue => "MISSING_REQUIRED_FIELD",
            BadKind::MissingEventTime => "MISSING_PARTITION_VALUE",
            BadKind::ValueAsString | BadKind::EventTimeWithoutOffset => "TYPE_MISMATCH",
            BadKind::TierOutOfRange | BadKind::AmountTooPrecise => "VALUE_OUT_OF_RANGE",
        }
    }
}

/// `event_time` base of bad records: 2026-07-09T20:00:00Z in milliseconds.
const BAD_BASE_TIME_MS: i64 = 1_783_627_200_000;

/// A bad record of `kind` for `id`, and the DLQ code floe must give it. Records that are JSON
/// carry `"id": id`; a [`BadKind::NotJson`] record names the id in its text (and, like every
/// record, in its key).
pub fn bad_event(id: u64, kind: BadKind) -> (Vec<u8>, &'static str) {
    let text = match kind {
        BadKind::NotJson => format!("not json: id={id} {{\"id\":{id},"),
        _ => {
            let mut f = EventFields::generate(id, 0xBAD, BAD_BASE_TIME_MS, 1);
            mutate(&mut f, kind);
            f.render()
        }
    };
    (text.into_bytes(), kind.expected_code())
}

/// Breaks the one rule of `kind` in `f` ([`BadKind::NotJson`] is not a mutation: no change).
fn mutate(f: &mut EventFields, kind: BadKind) {
    match kind {
        BadKind::NotJson => {}
        BadKind::MissingValue => f.value = None,
        BadKind::MissingEventTime => f.event_time = None,
        BadKind::ValueAsString => f.value = Some("\"12\"".to_string()),
        BadKind::TierOutOfRange => f.tier = "99".to_string(),
        BadKind::EventTimeWithoutOffset => {
            f.event_time = Some("\"2026-07-09T20:00:00.123456\"".to_string())
        }
        BadKind::AmountTooPrecise => f.amount = "1.234".to_string(),
    }
}

/// Whether record `id` of a generated stream is bad, and of which kind: about
/// `bad_per_million / 1_000_000` of the ids, kinds in turn, deterministic in `(id, seed)`.
pub fn pick_bad_kind(id: u64, seed: u64, bad_per_million: u32) -> Option<BadKind> {
    let r = stream(id, seed ^ 0x5EED_BAD0);
    if r % 1_000_000 < u64::from(bad_per_million) {
        Some(BadKind::ALL[((r >> 32) % BadKind::ALL.len() as u64) as usize])
    } else {
        None
    }
}

/// Whether record `id` is bad under per-kind shares (`(kind, parts per million)`, summing to at
/// most 1,000,000), and of which kind; deterministic in `(id, seed)`.
pub fn pick_bad_kind_by_share(
    id: u64,
    seed: u64,
    shares_ppm: &[(BadKind, u32)],
) -> Option<BadKind> {
    let r = stream(id, seed ^ 0x5EED_BAD0) % 1_000_000;
    let mut upto = 0u64;
    for &(kind, ppm) in shares_ppm {
        upto += u64::from(ppm);
        if r < upto {
            return Some(kind);
        }
    }
    None
}

/// Record `id` of a generated stream with `bad_per_million` bad records: the payload and, for a
/// bad record, its expected DLQ code. Produce it with key [`event_key`]`(id)`.
pub fn generated_record(
    id: u64,
    seed: u64,
    base_time_ms: i64,
    spread_hours: u32,
    bad_per_million: u32,
) -> (Vec<u8>, Option<&'static str>) {
    match pick_bad_kind(id, seed, bad_per_million) {
        Some(kind) => {
            let (bytes, code) = bad_event(id, kind);
            (bytes, Some(code))
        }
        None => (
            event_json(id, seed, base_time_ms, spread_hours).into_bytes(),
            None,
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::convert::{Converter, DlqCode};
    use crate::schema::protobuf::{MessageSelector, ProtoFile};
    use crate::schema::MappedSchema;
    use serde_json::Value;

    const BASE: i64 = 1_783_627_200_000; // 2026-07-09T20:00:00Z

    fn decimals(text: &str) -> usize {
        text.split_once('.').map(|(_, f)| f.len()).unwrap_or(0)
    }

    #[test]
    fn formats_timestamps_rfc3339_utc() {
        assert_eq!(format_timestamp_micros(0), "1970-01-01T00:00:00.000000Z");
        assert_eq!(
            format_timestamp_micros(BASE * 1000 + 123_456),
            "2026-07-09T20:00:00.123456Z"
        );
        assert_eq!(format_timestamp_micros(-1), "1969-12-31T23:59:59.999999Z");
        assert_eq!(
            format_timestamp_micros(951_782_400_000_000),
            "2000-02-29T00:00:00.000000Z"
        );
    }

    #[test]
    fn event_json_is_deterministic_valid_and_event_sized() {
        let mut total = 0usize;
        for id in 0..2000u64 {
            let text = event_json(id, 42, BASE, 3);
            assert_eq!(text, event_json(id, 42, BASE, 3));
            total += text.len();
            assert!(
                (120..=230).contains(&text.len()),
                "{} bytes: {text}",
                text.len()
            );
            let v: Value = serde_json::from_str(&text).unwrap();
            assert_eq!(v["id"].as_u64(), Some(id));
            let t = v["event_time"].as_str().unwrap();
            assert!(
                t.len() == 27 && t.ends_with('Z') && t.as_bytes()[10] == b'T',
                "{t}"
            );
            assert!(
                ("2026-07-09T20:00:00".."2026-07-09T23:00:00").contains(&t),
                "{t}"
            );
            assert!(v["source"].is_string());
            assert!(v["value"].is_f64());
            let amount = text
                .split("\"amount\":")
                .nth(1)
                .unwrap()
                .split(',')
                .next()
                .unwrap();
            assert!(decimals(amount) <= 2, "{amount}");
            assert!(v["amount"].is_number());
            assert!(v["user"]["country"].is_string());
            let tier = v["user"]["tier"].as_i64().unwrap();
            assert!((0..=10).contains(&tier));
            assert!(v["tags"].as_array().unwrap().iter().all(Value::is_string));
            assert!(v["attrs"]
                .as_object()
                .unwrap()
                .values()
                .all(Value::is_string));
        }
        let mean = total / 2000;
        assert!((150..=200).contains(&mean), "mean size {mean}");
        assert_ne!(event_json(1, 42, BASE, 3), event_json(1, 43, BASE, 3));
    }

    #[test]
    fn bad_events_carry_their_id_and_break_one_rule() {
        for kind in BadKind::ALL {
            let (bytes, code) = bad_event(7, kind);
            assert_eq!(code, kind.expected_code());
            let text = String::from_utf8(bytes).unwrap();
            assert!(text.contains("7"), "{text}");
            let parsed = serde_json::from_str::<Value>(&text);
            match kind {
                BadKind::NotJson => assert!(parsed.is_err()),
                _ => {
                    let v = parsed.unwrap();
                    assert_eq!(v["id"].as_u64(), Some(7), "{kind:?}");
                    match kind {
                        BadKind::MissingValue => assert!(v.get("value").is_none()),
                        BadKind::MissingEventTime => assert!(v.get("event_time").is_none()),
                        BadKind::ValueAsString => assert_eq!(v["value"], "12"),
                        BadKind::TierOutOfRange => assert_eq!(v["user"]["tier"], 99),
                        BadKind::EventTimeWithoutOffset => {
                            assert!(!v["event_time"].as_str().unwrap().ends_with('Z'))
                        }
                        BadKind::AmountTooPrecise => assert!(text.contains("\"amount\":1.234")),
                        BadKind::NotJson => unreachable!(),
                    }
                }
            }
        }
    }

    /// Each row of `b` as a JSON object (column name → floe's rendering of the value).
    fn rows(b: &arrow_array::RecordBatch) -> Vec<serde_json::Map<String, Value>> {
        (0..b.num_rows())
            .map(|row| {
                b.schema()
                    .fields()
                    .iter()
                    .zip(b.columns())
                    .map(|(f, col)| {
                        (
                            f.name().clone(),
                            crate::convert::render::value_to_json(col.as_ref(), row),
                        )
                    })
                    .collect()
            })
            .collect()
    }

    /// Converts `records` with floe's converter for `schema`; every record must be accepted.
    fn convert(schema: MappedSchema, records: &[Vec<u8>]) -> Vec<serde_json::Map<String, Value>> {
        let schema = std::sync::Arc::new(schema);
        let arrow = schema.arrow_schema();
        let mut c = Converter::try_new(schema, arrow).unwrap();
        for (i, r) in records.iter().enumerate() {
            c.push(r).unwrap_or_else(|e| panic!("record {i}: {e}"));
        }
        rows(&c.finish())
    }

    /// The JSON path's rows of `ids` (config/event.schema.json).
    fn json_rows(ids: std::ops::Range<u64>) -> Vec<serde_json::Map<String, Value>> {
        let schema: Value = serde_json::from_str(crate::tools::quickstart::EVENT_SCHEMA).unwrap();
        let records: Vec<Vec<u8>> = ids
            .map(|id| event_json(id, 42, BASE, 3).into_bytes())
            .collect();
        convert(
            MappedSchema::from_json_schema(&schema, "event_time").unwrap(),
            &records,
        )
    }

    fn avro_schema() -> apache_avro::Schema {
        apache_avro::Schema::parse_str(crate::tools::quickstart::EVENT_AVRO_SCHEMA).unwrap()
    }

    fn protobuf_schema() -> MappedSchema {
        let files = [ProtoFile {
            name: "event.proto".into(),
            text: crate::tools::quickstart::EVENT_PROTOBUF_SCHEMA.into(),
        }];
        MappedSchema::from_protobuf(&files, &MessageSelector::Indexes(vec![0]), "event_time")
            .unwrap()
    }

    #[test]
    fn avro_events_decode_to_the_json_paths_rows() {
        let schema = avro_schema();
        let records: Vec<Vec<u8>> = (0..300)
            .map(|id| event_avro(&schema, &EventValues::generate(id, 42, BASE, 3)).unwrap())
            .collect();
        let mapped = MappedSchema::from_avro(
            crate::tools::quickstart::EVENT_AVRO_SCHEMA,
            &[],
            "event_time",
        )
        .unwrap();
        let got = convert(mapped, &records);
        let want = json_rows(0..300);
        assert_eq!(got.len(), 300);
        for (id, (g, w)) in got.iter().zip(&want).enumerate() {
            assert_eq!(g, w, "record {id}");
        }
    }

    #[test]
    fn protobuf_events_decode_to_the_json_paths_rows_with_amount_a_double() {
        let records: Vec<Vec<u8>> = (0..300)
            .map(|id| event_protobuf(&EventValues::generate(id, 42, BASE, 3)))
            .collect();
        let got = convert(protobuf_schema(), &records);
        let want = json_rows(0..300);
        assert_eq!(got.len(), 300);
        for (id, (g, w)) in got.iter().zip(&want).enumerate() {
            let mut g = g.clone();
            let mut w = w.clone();
            let amount = g.remove("amount").unwrap();
            let text = w.remove("amount").unwrap();
            let exact: f64 = match &text {
                Value::String(t) => t.parse().unwrap(),
                n => n.as_f64().unwrap(),
            };
            assert_eq!(amount.as_f64(), Some(exact), "record {id}: {text}");
            assert_eq!(g, w, "record {id}");
        }
    }

    #[test]
    fn framed_bad_records_break_the_framing_or_the_payload() {
        use crate::registry::framing::confluent as wire;
        let e = EventValues::generate(5, 42, BASE, 3);
        let json = event_json(5, 42, BASE, 3);
        let avro = confluent_frame(9, false, &event_avro(&avro_schema(), &e).unwrap());
        let proto = confluent_frame(9, true, &event_protobuf(&e));
        assert_eq!(&avro[..5], &[0, 0, 0, 0, 9]);
        assert_eq!(&proto[..6], &[0, 0, 0, 0, 9, 0]);
        let mapped_avro = MappedSchema::from_avro(
            crate::tools::quickstart::EVENT_AVRO_SCHEMA,
            &[],
            "event_time",
        )
        .unwrap();
        for (frame, protobuf, schema) in [
            (&avro, false, mapped_avro),
            (&proto, true, protobuf_schema()),
        ] {
            let schema = std::sync::Arc::new(schema);
            let mut c = Converter::try_new(schema.clone(), schema.arrow_schema()).unwrap();
            let good = wire::parse(frame, protobuf).unwrap();
            assert_eq!(good.id, 9);
            assert_eq!(good.indexes, if protobuf { vec![0] } else { vec![] });
            c.push(good.payload).unwrap();
            for kind in FramedBadKind::ALL {
                let bad = kind.make(frame, &json);
                let code = match wire::parse(&bad, protobuf) {
                    Err(reason) => reason.code,
                    Ok(f) if f.id == FramedBadKind::UNKNOWN_SCHEMA_ID => DlqCode::InvalidSchema,
                    Ok(f) => c.push(f.payload).expect_err("a refused payload").code,
                };
                assert_eq!(
                    code.as_str(),
                    kind.expected_code(),
                    "{kind:?} protobuf={protobuf}"
                );
            }
        }
    }

    #[test]
    fn picks_about_the_requested_share_of_bad_records_of_every_kind() {
        let bad: Vec<BadKind> = (0..100_000u64)
            .filter_map(|id| pick_bad_kind(id, 1, 10_000))
            .collect();
        assert!((800..=1200).contains(&bad.len()), "{}", bad.len());
        for kind in BadKind::ALL {
            assert!(bad.contains(&kind), "{kind:?}");
        }
        assert!((0..1000u64).all(|id| pick_bad_kind(id, 1, 0).is_none()));
        let (payload, code) = generated_record(5, 1, BASE, 1, 1_000_000);
        assert!(code.is_some() && !payload.is_empty());
    }
}
