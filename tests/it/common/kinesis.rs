//! Kinesis streams on the emulators for tests: create, put, split, merge, list, delete.

use std::time::{Duration, Instant};

use aws_sdk_kinesis::primitives::Blob;
use aws_sdk_kinesis::types::{Shard, StreamStatus};
use aws_sdk_kinesis::Client;
use floe::config::{InitialPosition, KinesisSourceConfig, KinesisStream};
use floe::model::ShardId;
use floe::source::kinesis::KinesisSource;

use super::{aws_clients, unique_name};

/// A Kinesis stream of an emulator, created for one test.
pub struct TestStream {
    /// The Kinesis client it was created with.
    pub client: Client,
    /// Stream name (unique per test).
    pub name: String,
}

impl TestStream {
    pub async fn create(endpoint: &str, shards: i32) -> TestStream {
        let client = aws_clients(endpoint).await.kinesis();
        let name = unique_name("floe-kin");
        client
            .create_stream()
            .stream_name(&name)
            .shard_count(shards)
            .send()
            .await
            .unwrap();
        let stream = TestStream { client, name };
        stream.wait_active().await;
        stream
    }

    /// kinesalite is CREATING/UPDATING for a moment after create, split and merge, as AWS is.
    pub async fn wait_active(&self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let out = self
                .client
                .describe_stream_summary()
                .stream_name(&self.name)
                .send()
                .await
                .unwrap();
            let status = out.stream_description_summary().map(|d| d.stream_status());
            if status == Some(&StreamStatus::Active) {
                return;
            }
            assert!(Instant::now() < deadline, "stream {} not ACTIVE", self.name);
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Puts one record; returns its shard and sequence number.
    pub async fn put(&self, key: &str, data: &[u8]) -> (ShardId, String) {
        let out = self
            .client
            .put_record()
            .stream_name(&self.name)
            .partition_key(key)
            .data(Blob::new(data))
            .send()
            .await
            .unwrap();
        (
            ShardId(out.shard_id().to_string()),
            out.sequence_number().to_string(),
        )
    }

    /// Puts `records` (partition key, data) with PutRecords, 500 per call, retrying the entries
    /// a call failed until every record is in.
    pub async fn put_all(&self, records: &[(String, Vec<u8>)]) {
        use aws_sdk_kinesis::types::PutRecordsRequestEntry;
        for chunk in records.chunks(500) {
            let mut pending: Vec<PutRecordsRequestEntry> = chunk
                .iter()
                .map(|(key, data)| {
                    PutRecordsRequestEntry::builder()
                        .partition_key(key)
                        .data(Blob::new(data.clone()))
                        .build()
                        .unwrap()
                })
                .collect();
            while !pending.is_empty() {
                let out = self
                    .client
                    .put_records()
                    .stream_name(&self.name)
                    .set_records(Some(pending.clone()))
                    .send()
                    .await
                    .unwrap();
                pending = pending
                    .into_iter()
                    .zip(out.records())
                    .filter(|(_, result)| result.error_code().is_some())
                    .map(|(entry, _)| entry)
                    .collect();
            }
        }
    }

    pub async fn shards(&self) -> Vec<Shard> {
        self.client
            .list_shards()
            .stream_name(&self.name)
            .send()
            .await
            .unwrap()
            .shards()
            .to_vec()
    }

    pub async fn open_shards(&self) -> Vec<Shard> {
        let mut open: Vec<Shard> = self
            .shards()
            .await
            .into_iter()
            .filter(|s| {
                s.sequence_number_range()
                    .is_some_and(|r| r.ending_sequence_number().is_none())
            })
            .collect();
        open.sort_by_key(|s| hash_range(s).0);
        open
    }

    /// Splits `shard` at the middle of its hash key range.
    pub async fn split_in_half(&self, shard: &str) {
        let s = self
            .shards()
            .await
            .into_iter()
            .find(|s| s.shard_id() == shard)
            .unwrap();
        let (start, end) = hash_range(&s);
        self.client
            .split_shard()
            .stream_name(&self.name)
            .shard_to_split(shard)
            .new_starting_hash_key((start + (end - start) / 2 + 1).to_string())
            .send()
            .await
            .unwrap();
        self.wait_active().await;
    }

    pub async fn merge(&self, shard: &str, adjacent: &str) {
        self.client
            .merge_shards()
            .stream_name(&self.name)
            .shard_to_merge(shard)
            .adjacent_shard_to_merge(adjacent)
            .send()
            .await
            .unwrap();
        self.wait_active().await;
    }

    pub fn source(&self, max_records_per_call: u32) -> KinesisSource {
        KinesisSource::new(
            self.client.clone(),
            &KinesisSourceConfig {
                stream: KinesisStream::Name(self.name.clone()),
                initial_position: InitialPosition::Earliest,
                max_records_per_call,
                poll_interval: Duration::from_millis(200),
                read_mode: floe::config::KinesisReadMode::Polling,
            },
        )
    }

    /// A source reading this stream with enhanced fan-out through the EFO emulator
    /// ([`super::kinesis_efo_endpoint`], the same kinesalite streams), as a stream consumer
    /// registered for the caller (a unique name).
    pub async fn fan_out_source(&self) -> KinesisSource {
        use floe::source::kinesis::{api::StreamRef, efo};
        let client = super::kinesis_efo_clients().await.kinesis();
        let consumer = efo::register_consumer(
            &client,
            &StreamRef::Name(self.name.clone()),
            &unique_name("floe-test"),
            "test consumer",
            Duration::from_secs(60),
        )
        .await
        .unwrap_or_else(|e| panic!("register a consumer of {}: {e}", self.name));
        KinesisSource::new(
            client,
            &KinesisSourceConfig {
                stream: KinesisStream::Name(self.name.clone()),
                initial_position: InitialPosition::Earliest,
                max_records_per_call: 10_000,
                poll_interval: Duration::from_secs(1),
                read_mode: floe::config::KinesisReadMode::EnhancedFanOut {
                    consumer_name: Some(consumer.name.clone()),
                },
            },
        )
        .with_fan_out(consumer.arn, "test")
    }

    pub async fn delete(self) {
        let _ = self
            .client
            .delete_stream()
            .stream_name(&self.name)
            .enforce_consumer_deletion(true)
            .send()
            .await;
    }
}

/// The hash key range of a shard, inclusive.
pub fn hash_range(s: &Shard) -> (u128, u128) {
    let r = s.hash_key_range().unwrap();
    (
        r.starting_hash_key().parse().unwrap(),
        r.ending_hash_key().parse().unwrap(),
    )
}
