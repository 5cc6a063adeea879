//! De-aggregation of records written by the Kinesis Producer Library (KPL), as the Kinesis Client
//! Library does it: one Kinesis record may carry many user records.
//!
//! ```text
//!   data = F3 89 9A C2 | protobuf AggregatedRecord | MD5(protobuf) (16 bytes)
//!          magic          partition_key_table, explicit_hash_key_table,
//!                         records[i] = {partition_key_index, data, ...}
//!
//!   Kinesis record (sequence number N) ──► user record i at position N.i (i = 0, 1, …)
//! ```
//!
//! A record without the magic, too short, with a wrong MD5 or that does not parse is a plain
//! record (the KCL does the same): it keeps its sequence number without a sub-sequence number.
//! [`encode`] builds aggregated records, for tests and tools.

use md5::{Digest, Md5};
use prost::Message;

/// The first four bytes of a KPL aggregated record.
pub const MAGIC: [u8; 4] = [0xF3, 0x89, 0x9A, 0xC2];
const DIGEST_LEN: usize = 16;

/// The KPL's `AggregatedRecord` protobuf message (proto2).
#[derive(Clone, PartialEq, prost::Message)]
pub struct AggregatedRecord {
    /// Partition keys, referenced by index from the records.
    #[prost(string, repeated, tag = "1")]
    pub partition_key_table: Vec<String>,
    /// Explicit hash keys, referenced by index from the records.
    #[prost(string, repeated, tag = "2")]
    pub explicit_hash_key_table: Vec<String>,
    /// The user records.
    #[prost(message, repeated, tag = "3")]
    pub records: Vec<AggregatedUserRecord>,
}

/// One user record inside an [`AggregatedRecord`].
#[derive(Clone, PartialEq, prost::Message)]
pub struct AggregatedUserRecord {
    /// Index into `partition_key_table`.
    #[prost(uint64, required, tag = "1")]
    pub partition_key_index: u64,
    /// Index into `explicit_hash_key_table`, if the record has one.
    #[prost(uint64, optional, tag = "2")]
    pub explicit_hash_key_index: Option<u64>,
    /// The user record's bytes.
    #[prost(bytes = "vec", required, tag = "3")]
    pub data: Vec<u8>,
    /// KPL tags (unused by floe).
    #[prost(message, repeated, tag = "4")]
    pub tags: Vec<Tag>,
}

/// A KPL tag.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Tag {
    /// Tag key.
    #[prost(string, required, tag = "1")]
    pub key: String,
    /// Tag value.
    #[prost(string, optional, tag = "2")]
    pub value: Option<String>,
}

/// One user record taken out of an aggregated Kinesis record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserRecord {
    /// Its partition key.
    pub partition_key: String,
    /// Its bytes.
    pub data: Vec<u8>,
}

/// The user records of a Kinesis record's `data`, in order, or `None` when the record is not a
/// valid KPL aggregate (a plain record). An aggregate may hold zero user records.
pub fn deaggregate(data: &[u8]) -> Option<Vec<UserRecord>> {
    if data.len() < MAGIC.len() + DIGEST_LEN || data[..MAGIC.len()] != MAGIC {
        return None;
    }
    let (message, digest) = data[MAGIC.len()..].split_at(data.len() - MAGIC.len() - DIGEST_LEN);
    if Md5::digest(message).as_slice() != digest {
        return None;
    }
    let aggregated = AggregatedRecord::decode(message).ok()?;
    let keys = &aggregated.partition_key_table;
    aggregated
        .records
        .into_iter()
        .map(|r| {
            let key = usize::try_from(r.partition_key_index)
                .ok()
                .and_then(|i| keys.get(i))?;
            Some(UserRecord {
                partition_key: key.clone(),
                data: r.data,
            })
        })
        .collect()
}

/// Encodes user records `(partition key, data)` as one KPL aggregated record (magic, protobuf,
/// MD5), each distinct partition key stored once.
pub fn encode<'a>(records: impl IntoIterator<Item = (&'a str, &'a [u8])>) -> Vec<u8> {
    let mut aggregated = AggregatedRecord::default();
    for (key, data) in records {
        let index = match aggregated.partition_key_table.iter().position(|k| k == key) {
            Some(i) => i,
            None => {
                aggregated.partition_key_table.push(key.to_string());
                aggregated.partition_key_table.len() - 1
            }
        };
        aggregated.records.push(AggregatedUserRecord {
            partition_key_index: index as u64,
            explicit_hash_key_index: None,
            data: data.to_vec(),
            tags: Vec::new(),
        });
    }
    let message = aggregated.encode_to_vec();
    let mut out = Vec::with_capacity(MAGIC.len() + message.len() + DIGEST_LEN);
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&message);
    out.extend_from_slice(&Md5::digest(&message));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_user_records_with_their_partition_keys() {
        let data = encode([("a", &b"one"[..]), ("b", b"two"), ("a", b"three")]);
        assert_eq!(data[..4], MAGIC);
        let users = deaggregate(&data).expect("aggregated");
        let got: Vec<(&str, &[u8])> = users
            .iter()
            .map(|u| (u.partition_key.as_str(), u.data.as_slice()))
            .collect();
        assert_eq!(
            got,
            vec![("a", &b"one"[..]), ("b", b"two"), ("a", b"three")]
        );
    }

    #[test]
    fn decodes_a_record_built_field_by_field_like_the_kpl() {
        // AggregatedRecord{partition_key_table: ["pk"], records: [{0, "x"}]} encoded by hand.
        let message: Vec<u8> = vec![
            0x0A, 0x02, b'p', b'k', // 1: "pk"
            0x1A, 0x05, // 3: Record, 5 bytes
            0x08, 0x00, // 1: partition_key_index 0
            0x1A, 0x01, b'x', // 3: data "x"
        ];
        let mut data = MAGIC.to_vec();
        data.extend_from_slice(&message);
        data.extend_from_slice(&Md5::digest(&message));
        assert_eq!(
            deaggregate(&data),
            Some(vec![UserRecord {
                partition_key: "pk".into(),
                data: b"x".to_vec()
            }])
        );
    }

    #[test]
    fn bad_digest_short_data_or_bad_protobuf_is_a_plain_record() {
        let mut data = encode([("a", &b"one"[..])]);
        let last = data.len() - 1;
        data[last] ^= 1;
        assert_eq!(deaggregate(&data), None, "wrong MD5");
        assert_eq!(deaggregate(&MAGIC), None, "too short");
        assert_eq!(deaggregate(br#"{"id":1}"#), None, "no magic");
        let garbage = [0xFFu8, 0xFF, 0xFF];
        let mut data = MAGIC.to_vec();
        data.extend_from_slice(&garbage);
        data.extend_from_slice(&Md5::digest(garbage));
        assert_eq!(deaggregate(&data), None, "not protobuf");
    }

    #[test]
    fn a_partition_key_index_out_of_range_makes_it_a_plain_record() {
        let message = AggregatedRecord {
            partition_key_table: vec!["a".into()],
            explicit_hash_key_table: vec![],
            records: vec![AggregatedUserRecord {
                partition_key_index: 3,
                explicit_hash_key_index: None,
                data: b"x".to_vec(),
                tags: vec![],
            }],
        }
        .encode_to_vec();
        let mut data = MAGIC.to_vec();
        data.extend_from_slice(&message);
        data.extend_from_slice(&Md5::digest(&message));
        assert_eq!(deaggregate(&data), None);
    }

    #[test]
    fn an_aggregate_without_records_holds_no_user_record() {
        assert_eq!(deaggregate(&encode([])), Some(vec![]));
    }
}
