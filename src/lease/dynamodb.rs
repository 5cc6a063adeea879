//! The DynamoDB lease store: one table shared by a fleet of workers (and by several channels).
//!
//! Every write is a single conditional `PutItem`/`UpdateItem`/`DeleteItem`, so the store keeps the
//! invariants of [`super`] exactly like the SQLite store: the lease counter is the fencing token
//! and expiry is observed on each worker's own clock (the heartbeat standing still), never from
//! timestamps written by other machines.
//!
//! Table layout (on-demand billing, created by `floe setup` or at start when
//! `create_lease_table = true`):
//!
//! ```text
//!   partition key  channel (S)   sort key  item (S)
//!   ───────────────────────────  ───────────────────────────────────────────────────────────────
//!   <channel>                    lease#shard/<shard id> │ owner?, lease_counter N, heartbeat N,
//!                                lease#committer        │ checkpoint_hint? (JSON), parents (JSON)
//!                                worker#<worker id>     │ heartbeat N, notice N, handoffs S (JSON)
//!                                batch#<uuid v7>        │ chunks N, body B (zlib of the JSON batch, or
//!                                batch#<uuid v7>#<n>    │ its first part), body B (part n ≥ 1)
//!                                state                  │ version N, body S (JSON channel state)
//! ```
//!
//! **Pending batches beyond DynamoDB's 400 KB item limit** are split across items instead of
//! being spilled to S3: the JSON body is zlib-compressed (file lists compress well) and cut into
//! parts of [`PART_BYTES`]; parts `1..n` are written first (plain puts: the same batch always
//! yields the same parts), then the head item `batch#<uuid>` holding part 0 and the part count,
//! conditionally on it not existing. The head is the commit point: a batch is pending exactly
//! when its head exists, and readers ignore parts without a head. This keeps the store a single
//! dependency (no bucket, no extra IAM permission) and the put atomic; a part orphaned by a crash
//! between parts and head is swept by `list_pending` once it is an hour old.

use std::collections::{BTreeMap, HashMap};
use std::io::{Read, Write};
use std::time::Duration;

use async_trait::async_trait;
use aws_sdk_dynamodb::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_dynamodb::operation::update_item::UpdateItemOutput;
use aws_sdk_dynamodb::primitives::Blob;
use aws_sdk_dynamodb::types::{
    AttributeDefinition, AttributeValue, BillingMode, KeySchemaElement, KeyType, ReturnValue,
    ReturnValuesOnConditionCheckFailure, ScalarAttributeType, TableStatus,
};
use aws_sdk_dynamodb::Client;
use uuid::Uuid;

use super::{
    BatchStore, ChannelState, Delivered, Lease, LeaseError, LeaseKey, LeaseSpec, LeaseStore,
    Presence,
};
use crate::model::{PendingBatch, Position, ShardId};

/// Bytes of compressed batch body per item (DynamoDB items are at most 400 KB, names included).
pub const PART_BYTES: usize = 300 * 1024;
/// Age after which a batch part without its head item is swept (a crashed `put_batch`).
const ORPHAN_PART_AGE: Duration = Duration::from_secs(3600);
/// How long [`DynamoDbLeaseStore::open`] waits for a new table to become ACTIVE.
const CREATE_TABLE_TIMEOUT: Duration = Duration::from_secs(120);

const PK: &str = "channel";
const SK: &str = "item";
const LEASE_PREFIX: &str = "lease#";
const WORKER_PREFIX: &str = "worker#";
const BATCH_PREFIX: &str = "batch#";
const STATE_ITEM: &str = "state";
const DELIVERED_ITEM: &str = "checkpoints";

/// A [`LeaseStore`] and [`BatchStore`] on one DynamoDB table.
#[derive(Debug, Clone)]
pub struct DynamoDbLeaseStore {
    client: Client,
    table: String,
}

/// What [`DynamoDbLeaseStore::open`] does when the table does not exist.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MissingTable {
    /// Create it (on-demand billing) and wait until it is ACTIVE.
    Create,
    /// Refuse to start: [`LeaseError::Fatal`] naming the table and how to create it.
    Refuse,
}

impl DynamoDbLeaseStore {
    /// Opens the lease table `table`, creating it when missing and `missing` says so; checks
    /// that an existing table has floe's key schema (`channel` HASH, `item` RANGE, both strings).
    ///
    /// Errors: [`LeaseError::Fatal`] for a missing table with [`MissingTable::Refuse`], a table
    /// with another key schema, or no permission; [`LeaseError::Unavailable`] /
    /// [`LeaseError::Throttled`] when DynamoDB cannot be reached (retry).
    pub async fn open(
        client: Client,
        table: impl Into<String>,
        missing: MissingTable,
    ) -> Result<Self, LeaseError> {
        let store = DynamoDbLeaseStore {
            client,
            table: table.into(),
        };
        match store.describe().await? {
            Some(_) => {}
            None if missing == MissingTable::Create => store.create_table().await?,
            None => {
                return Err(LeaseError::Fatal {
                    message: format!(
                        "DynamoDB lease table {:?} does not exist; create it with `floe setup --config FILE` or set lease_store.create_lease_table = true",
                        store.table
                    ),
                })
            }
        }
        store.wait_active().await?;
        Ok(store)
    }

    /// The table name.
    pub fn table(&self) -> &str {
        &self.table
    }

    /// The table's status, `None` when it does not exist; checks the key schema.
    async fn describe(&self) -> Result<Option<TableStatus>, LeaseError> {
        match self
            .client
            .describe_table()
            .table_name(&self.table)
            .send()
            .await
        {
            Ok(out) => {
                let Some(table) = out.table else {
                    return Ok(None);
                };
                let keys: Vec<(String, KeyType)> = table
                    .key_schema()
                    .iter()
                    .map(|k| (k.attribute_name().to_owned(), k.key_type().clone()))
                    .collect();
                let expected = vec![
                    (PK.to_owned(), KeyType::Hash),
                    (SK.to_owned(), KeyType::Range),
                ];
                if keys != expected {
                    return Err(LeaseError::Fatal {
                        message: format!(
                            "DynamoDB table {:?} is not a floe lease table: its key schema is {keys:?}, expected {PK} (HASH) and {SK} (RANGE)",
                            self.table
                        ),
                    });
                }
                Ok(table.table_status)
            }
            Err(e) if code(&e) == Some("ResourceNotFoundException") => Ok(None),
            Err(e) => Err(map_err(e, &self.table)),
        }
    }

    async fn create_table(&self) -> Result<(), LeaseError> {
        tracing::info!(table = %self.table, "creating the DynamoDB lease table");
        let attr = |name: &str| {
            AttributeDefinition::builder()
                .attribute_name(name)
                .attribute_type(ScalarAttributeType::S)
                .build()
                .expect("attribute definition is complete")
        };
        let key = |name: &str, kind: KeyType| {
            KeySchemaElement::builder()
                .attribute_name(name)
                .key_type(kind)
                .build()
                .expect("key schema element is complete")
        };
        let result = self
            .client
            .create_table()
            .table_name(&self.table)
            .attribute_definitions(attr(PK))
            .attribute_definitions(attr(SK))
            .key_schema(key(PK, KeyType::Hash))
            .key_schema(key(SK, KeyType::Range))
            .billing_mode(BillingMode::PayPerRequest)
            .send()
            .await;
        match result {
            Ok(_) => Ok(()),
            // Another worker created it first.
            Err(e) if code(&e) == Some("ResourceInUseException") => Ok(()),
            Err(e) => Err(map_err(e, &self.table)),
        }
    }

    async fn wait_active(&self) -> Result<(), LeaseError> {
        let deadline = tokio::time::Instant::now() + CREATE_TABLE_TIMEOUT;
        loop {
            match self.describe().await? {
                Some(TableStatus::Active) | Some(TableStatus::Updating) => return Ok(()),
                status if tokio::time::Instant::now() >= deadline => {
                    return Err(LeaseError::Unavailable {
                        message: format!(
                            "DynamoDB table {:?} not ACTIVE after {CREATE_TABLE_TIMEOUT:?} (status {status:?})",
                            self.table
                        ),
                    })
                }
                _ => tokio::time::sleep(Duration::from_millis(500)).await,
            }
        }
    }

    fn key(&self, channel: &str, item: String) -> HashMap<String, AttributeValue> {
        HashMap::from([
            (PK.to_owned(), AttributeValue::S(channel.to_owned())),
            (SK.to_owned(), AttributeValue::S(item)),
        ])
    }

    /// Every item of `channel` whose sort key starts with `prefix`, in sort-key order
    /// (strongly consistent reads, all pages).
    async fn query_prefix(
        &self,
        channel: &str,
        prefix: &str,
    ) -> Result<Vec<HashMap<String, AttributeValue>>, LeaseError> {
        let mut items = Vec::new();
        let mut start: Option<HashMap<String, AttributeValue>> = None;
        loop {
            let out = self
                .client
                .query()
                .table_name(&self.table)
                .consistent_read(true)
                .key_condition_expression("#pk = :pk AND begins_with(#sk, :prefix)")
                .expression_attribute_names("#pk", PK)
                .expression_attribute_names("#sk", SK)
                .expression_attribute_values(":pk", AttributeValue::S(channel.to_owned()))
                .expression_attribute_values(":prefix", AttributeValue::S(prefix.to_owned()))
                .set_exclusive_start_key(start.take())
                .send()
                .await
                .map_err(|e| map_err(e, &self.table))?;
            items.extend(out.items.unwrap_or_default());
            match out.last_evaluated_key {
                Some(key) if !key.is_empty() => start = Some(key),
                _ => return Ok(items),
            }
        }
    }

    async fn update_lease(
        &self,
        lease: &Lease,
        update: &str,
        condition: &str,
        values: Vec<(&str, AttributeValue)>,
    ) -> Result<Option<Lease>, LeaseError> {
        let mut request = self
            .client
            .update_item()
            .table_name(&self.table)
            .set_key(Some(
                self.key(&lease.channel, format!("{LEASE_PREFIX}{}", lease.key)),
            ))
            .update_expression(update)
            .condition_expression(condition)
            // `owner` is a DynamoDB reserved word; every lease update names it.
            .expression_attribute_names("#owner", "owner")
            .return_values(ReturnValue::AllNew)
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::None);
        for (name, value) in values {
            request = request.expression_attribute_values(name, value);
        }
        match request.send().await {
            Ok(UpdateItemOutput {
                attributes: Some(item),
                ..
            }) => lease_from_item(&lease.channel, &item).map(Some),
            Ok(_) => Err(LeaseError::Fatal {
                message: "UpdateItem returned no attributes".into(),
            }),
            Err(e) if code(&e) == Some("ConditionalCheckFailedException") => Ok(None),
            Err(e) => Err(map_err(e, &self.table)),
        }
    }

    /// Applies `update` to a lease its holder still holds (conditional on `owner` and
    /// `lease_counter` as listed): renew and release. `:one` is bound to 1.
    ///
    /// Errors: [`LeaseError::Lost`] when the lease changed hands, was released, or has no owner.
    async fn update_held(&self, lease: &Lease, update: &str) -> Result<Lease, LeaseError> {
        let Some(owner) = &lease.owner else {
            return Err(LeaseError::lost(lease));
        };
        self.update_lease(
            lease,
            update,
            "#owner = :owner AND lease_counter = :counter",
            vec![
                (":one", n(1)),
                (":owner", AttributeValue::S(owner.clone())),
                (":counter", n(lease.lease_counter)),
            ],
        )
        .await?
        .ok_or_else(|| LeaseError::lost(lease))
    }

    /// Reads a versioned JSON item (`state`, `checkpoints`) of `channel`; `set_version` puts the
    /// stored version into the decoded value.
    async fn get_versioned<T: serde::de::DeserializeOwned>(
        &self,
        channel: &str,
        item_name: &str,
        what: &str,
        set_version: impl FnOnce(&mut T, u64),
    ) -> Result<Option<T>, LeaseError> {
        let out = self
            .client
            .get_item()
            .table_name(&self.table)
            .consistent_read(true)
            .set_key(Some(self.key(channel, item_name.to_owned())))
            .send()
            .await
            .map_err(|e| map_err(e, &self.table))?;
        let Some(item) = out.item else {
            return Ok(None);
        };
        let body = get_s(&item, "body").ok_or_else(|| corrupt(what, "no body"))?;
        let mut value: T = serde_json::from_str(body).map_err(|e| corrupt(what, e))?;
        set_version(&mut value, get_n(&item, "version")?);
        Ok(Some(value))
    }

    /// Puts a versioned JSON item of `channel` on condition that its stored `version` is
    /// `expected` (absent when `None`) and, with `epoch`, that its stored `epoch` is not higher.
    /// Returns the new version.
    ///
    /// Errors: [`LeaseError::Conflict`] (item `conflict_item`) when a condition fails.
    async fn put_versioned(
        &self,
        channel: &str,
        item_name: &str,
        conflict_item: &str,
        body: String,
        expected: Option<u64>,
        epoch: Option<u64>,
    ) -> Result<u64, LeaseError> {
        let version = expected.map_or(1, |v| v + 1);
        let mut item = self.key(channel, item_name.to_owned());
        item.insert("version".into(), n(version));
        if let Some(epoch) = epoch {
            item.insert("epoch".into(), n(epoch));
        }
        item.insert("body".into(), AttributeValue::S(body));
        let request = self
            .client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(item));
        let request = match (expected, epoch) {
            (None, _) => request
                .condition_expression("attribute_not_exists(#sk)")
                .expression_attribute_names("#sk", SK),
            (Some(expected), None) => request
                .condition_expression("#version = :expected")
                .expression_attribute_names("#version", "version")
                .expression_attribute_values(":expected", n(expected)),
            (Some(expected), Some(epoch)) => request
                .condition_expression("#version = :expected AND #epoch <= :epoch")
                .expression_attribute_names("#version", "version")
                .expression_attribute_names("#epoch", "epoch")
                .expression_attribute_values(":expected", n(expected))
                .expression_attribute_values(":epoch", n(epoch)),
        };
        match request.send().await {
            Ok(_) => Ok(version),
            Err(e) if code(&e) == Some("ConditionalCheckFailedException") => {
                Err(LeaseError::conflict(channel, conflict_item))
            }
            Err(e) => Err(map_err(e, &self.table)),
        }
    }

    async fn read_batch_parts(
        &self,
        channel: &str,
        id: &Uuid,
    ) -> Result<Option<PendingBatch>, LeaseError> {
        let items = self
            .query_prefix(channel, &format!("{BATCH_PREFIX}{}", id.hyphenated()))
            .await?;
        let mut batches = assemble_batches(&items)?;
        Ok(batches.pop().map(|(_, b)| b))
    }
}

/// The error code of a service error (`ConditionalCheckFailedException`, …).
fn code<E: ProvideErrorMetadata, R>(e: &SdkError<E, R>) -> Option<&str> {
    match e {
        SdkError::ServiceError(service) => service.err().code(),
        _ => None,
    }
}

/// Maps an SDK error to what the caller does next.
fn map_err<E: ProvideErrorMetadata + std::error::Error + 'static, R: std::fmt::Debug>(
    e: SdkError<E, R>,
    table: &str,
) -> LeaseError {
    let message = match &e {
        SdkError::ServiceError(service) => format!(
            "{}: {}",
            service.err().code().unwrap_or("unknown error"),
            service.err().message().unwrap_or_default()
        ),
        other => format!("{}", aws_sdk_dynamodb::error::DisplayErrorContext(other)),
    };
    let message = format!("DynamoDB table {table:?}: {message}");
    let mapped = match &e {
        SdkError::ServiceError(_) => match code(&e) {
            Some(
                "ProvisionedThroughputExceededException"
                | "ThrottlingException"
                | "RequestLimitExceeded",
            ) => LeaseError::Throttled { message },
            Some("InternalServerError" | "ServiceUnavailable" | "TransactionConflictException") => {
                LeaseError::Unavailable { message }
            }
            _ => LeaseError::Fatal { message },
        },
        // Timeouts, connection failures, unparseable responses: the outcome is unknown.
        _ => LeaseError::Unavailable { message },
    };
    crate::telemetry::record_lease_store_error(match mapped {
        LeaseError::Throttled { .. } => "throttled",
        LeaseError::Unavailable { .. } => "unavailable",
        _ => "fatal",
    });
    mapped
}

fn corrupt(what: &str, detail: impl std::fmt::Display) -> LeaseError {
    LeaseError::Fatal {
        message: format!("undecodable {what} in the lease table: {detail}"),
    }
}

fn n(value: u64) -> AttributeValue {
    AttributeValue::N(value.to_string())
}

fn get_s<'a>(item: &'a HashMap<String, AttributeValue>, name: &str) -> Option<&'a str> {
    item.get(name)
        .and_then(|v| v.as_s().ok())
        .map(String::as_str)
}

fn get_n(item: &HashMap<String, AttributeValue>, name: &str) -> Result<u64, LeaseError> {
    item.get(name)
        .and_then(|v| v.as_n().ok())
        .ok_or_else(|| corrupt(name, "missing"))?
        .parse()
        .map_err(|e| corrupt(name, e))
}

fn get_b<'a>(
    item: &'a HashMap<String, AttributeValue>,
    name: &str,
) -> Result<&'a [u8], LeaseError> {
    item.get(name)
        .and_then(|v| v.as_b().ok())
        .map(Blob::as_ref)
        .ok_or_else(|| corrupt(name, "missing"))
}

fn lease_from_item(
    channel: &str,
    item: &HashMap<String, AttributeValue>,
) -> Result<Lease, LeaseError> {
    let sort_key = get_s(item, SK).ok_or_else(|| corrupt("lease", "no sort key"))?;
    let key: LeaseKey = sort_key
        .strip_prefix(LEASE_PREFIX)
        .ok_or_else(|| corrupt("lease key", sort_key))?
        .parse()?;
    Ok(Lease {
        channel: channel.to_owned(),
        key,
        owner: get_s(item, "owner").map(str::to_owned),
        lease_counter: get_n(item, "lease_counter")?,
        heartbeat: get_n(item, "heartbeat")?,
        checkpoint_hint: get_s(item, "checkpoint_hint")
            .map(serde_json::from_str::<Position>)
            .transpose()
            .map_err(|e| corrupt("checkpoint hint", e))?,
        parents: get_s(item, "parents")
            .map(serde_json::from_str::<Vec<ShardId>>)
            .transpose()
            .map_err(|e| corrupt("parents", e))?
            .unwrap_or_default(),
    })
}

fn presence_from_item(
    channel: &str,
    item: &HashMap<String, AttributeValue>,
) -> Result<Presence, LeaseError> {
    let sort_key = get_s(item, SK).ok_or_else(|| corrupt("presence", "no sort key"))?;
    let worker = sort_key
        .strip_prefix(WORKER_PREFIX)
        .ok_or_else(|| corrupt("presence key", sort_key))?;
    Ok(Presence {
        channel: channel.to_owned(),
        worker: worker.to_owned(),
        heartbeat: get_n(item, "heartbeat")?,
        notice: get_n(item, "notice")?,
        handoffs: get_s(item, "handoffs")
            .map(serde_json::from_str::<BTreeMap<ShardId, String>>)
            .transpose()
            .map_err(|e| corrupt("handoffs", e))?
            .unwrap_or_default(),
    })
}

/// The zlib-compressed JSON of `batch`, cut into parts of at most [`PART_BYTES`].
fn batch_parts(batch: &PendingBatch) -> Vec<Vec<u8>> {
    let json = serde_json::to_vec(batch).expect("batches serialize");
    let mut encoder = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
    encoder.write_all(&json).expect("writing to a Vec");
    let compressed = encoder.finish().expect("writing to a Vec");
    let mut parts: Vec<Vec<u8>> = compressed.chunks(PART_BYTES).map(<[u8]>::to_vec).collect();
    if parts.is_empty() {
        parts.push(Vec::new());
    }
    parts
}

/// Batches reassembled from `batch#…` items in sort-key order: `(id, batch)` for every head whose
/// parts are all present. Heads with missing parts are an error (parts are written first).
fn assemble_batches(
    items: &[HashMap<String, AttributeValue>],
) -> Result<Vec<(Uuid, PendingBatch)>, LeaseError> {
    let mut heads: BTreeMap<Uuid, (u64, Vec<u8>)> = BTreeMap::new();
    let mut parts: HashMap<(Uuid, u64), &[u8]> = HashMap::new();
    for item in items {
        let sort_key = get_s(item, SK).ok_or_else(|| corrupt("batch", "no sort key"))?;
        let rest = sort_key
            .strip_prefix(BATCH_PREFIX)
            .ok_or_else(|| corrupt("batch key", sort_key))?;
        match rest.split_once('#') {
            None => {
                let id = Uuid::parse_str(rest).map_err(|e| corrupt("batch id", e))?;
                heads.insert(id, (get_n(item, "chunks")?, get_b(item, "body")?.to_vec()));
            }
            Some((id, part)) => {
                let id = Uuid::parse_str(id).map_err(|e| corrupt("batch id", e))?;
                let part: u64 = part.parse().map_err(|e| corrupt("batch part", e))?;
                parts.insert((id, part), get_b(item, "body")?);
            }
        }
    }
    let mut batches = Vec::with_capacity(heads.len());
    for (id, (count, mut body)) in heads {
        for part in 1..count {
            let bytes = parts
                .get(&(id, part))
                .ok_or_else(|| corrupt("pending batch", format!("{id}: part {part} missing")))?;
            body.extend_from_slice(bytes);
        }
        let mut json = Vec::new();
        flate2::read::ZlibDecoder::new(body.as_slice())
            .read_to_end(&mut json)
            .map_err(|e| corrupt("pending batch", e))?;
        let batch = serde_json::from_slice(&json).map_err(|e| corrupt("pending batch", e))?;
        batches.push((id, batch));
    }
    Ok(batches)
}

/// The ids of parts in `items` without a head item, older than [`ORPHAN_PART_AGE`] by their
/// UUIDv7 timestamp, as sort keys.
fn orphan_parts(items: &[HashMap<String, AttributeValue>], now_ms: u64) -> Vec<String> {
    let heads: std::collections::HashSet<&str> = items
        .iter()
        .filter_map(|i| get_s(i, SK))
        .filter(|k| !k[BATCH_PREFIX.len()..].contains('#'))
        .map(|k| &k[BATCH_PREFIX.len()..])
        .collect();
    items
        .iter()
        .filter_map(|i| get_s(i, SK))
        .filter_map(|k| {
            let (id, _) = k[BATCH_PREFIX.len()..].split_once('#')?;
            let uuid = Uuid::parse_str(id).ok()?;
            let (secs, nanos) = uuid.get_timestamp()?.to_unix();
            let age_ms = now_ms.saturating_sub(secs * 1000 + u64::from(nanos) / 1_000_000);
            (!heads.contains(id) && age_ms > ORPHAN_PART_AGE.as_millis() as u64)
                .then(|| k.to_owned())
        })
        .collect()
}

#[async_trait]
impl LeaseStore for DynamoDbLeaseStore {
    async fn ensure_leases(&self, channel: &str, specs: &[LeaseSpec]) -> Result<(), LeaseError> {
        // A conditional put that fails still costs a write unit: list the rows first (one
        // query, read units are a fifth of the price) and put only the missing ones.
        let existing: std::collections::HashSet<LeaseKey> = if specs.len() > 1 {
            self.list_leases(channel)
                .await?
                .into_iter()
                .map(|l| l.key)
                .collect()
        } else {
            Default::default()
        };
        for spec in specs.iter().filter(|s| !existing.contains(&s.key)) {
            let mut item = self.key(channel, format!("{LEASE_PREFIX}{}", spec.key));
            item.insert("lease_counter".into(), n(0));
            item.insert("heartbeat".into(), n(0));
            item.insert(
                "parents".into(),
                AttributeValue::S(serde_json::to_string(&spec.parents).expect("ids serialize")),
            );
            let result = self
                .client
                .put_item()
                .table_name(&self.table)
                .set_item(Some(item))
                .condition_expression("attribute_not_exists(#sk)")
                .expression_attribute_names("#sk", SK)
                .send()
                .await;
            match result {
                Ok(_) => {}
                Err(e) if code(&e) == Some("ConditionalCheckFailedException") => {}
                Err(e) => return Err(map_err(e, &self.table)),
            }
        }
        Ok(())
    }

    async fn list_leases(&self, channel: &str) -> Result<Vec<Lease>, LeaseError> {
        let items = self.query_prefix(channel, LEASE_PREFIX).await?;
        let mut leases = items
            .iter()
            .map(|item| lease_from_item(channel, item))
            .collect::<Result<Vec<_>, _>>()?;
        leases.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(leases)
    }

    async fn take_lease(&self, lease: &Lease, worker: &str) -> Result<Lease, LeaseError> {
        let mut values = vec![
            (":worker", AttributeValue::S(worker.to_owned())),
            (":one", n(1)),
            (":counter", n(lease.lease_counter)),
            (":heartbeat", n(lease.heartbeat)),
        ];
        let owner_condition = match &lease.owner {
            Some(owner) => {
                values.push((":owner", AttributeValue::S(owner.clone())));
                "#owner = :owner"
            }
            None => "attribute_not_exists(#owner)",
        };
        let condition = format!(
            "attribute_exists(lease_counter) AND lease_counter = :counter AND heartbeat = :heartbeat AND {owner_condition}"
        );
        self.update_lease(
            lease,
            "SET #owner = :worker, lease_counter = lease_counter + :one",
            &condition,
            values,
        )
        .await?
        .ok_or_else(|| LeaseError::conflict(&lease.channel, &lease.key))
    }

    async fn renew_lease(&self, lease: &Lease) -> Result<Lease, LeaseError> {
        self.update_held(lease, "SET heartbeat = heartbeat + :one")
            .await
    }

    async fn release_lease(&self, lease: &Lease) -> Result<(), LeaseError> {
        self.update_held(
            lease,
            "REMOVE #owner SET lease_counter = lease_counter + :one",
        )
        .await
        .map(|_| ())
    }

    async fn delete_lease(&self, lease: &Lease) -> Result<(), LeaseError> {
        let result = self
            .client
            .delete_item()
            .table_name(&self.table)
            .set_key(Some(
                self.key(&lease.channel, format!("{LEASE_PREFIX}{}", lease.key)),
            ))
            .condition_expression("lease_counter = :counter")
            .expression_attribute_values(":counter", n(lease.lease_counter))
            .send()
            .await;
        match result {
            Ok(_) => Ok(()),
            Err(e) if code(&e) == Some("ConditionalCheckFailedException") => {
                Err(LeaseError::conflict(&lease.channel, &lease.key))
            }
            Err(e) => Err(map_err(e, &self.table)),
        }
    }

    async fn get_lease(&self, channel: &str, key: &LeaseKey) -> Result<Option<Lease>, LeaseError> {
        let out = self
            .client
            .get_item()
            .table_name(&self.table)
            .consistent_read(true)
            .set_key(Some(self.key(channel, format!("{LEASE_PREFIX}{key}"))))
            .send()
            .await
            .map_err(|e| map_err(e, &self.table))?;
        out.item
            .map(|item| lease_from_item(channel, &item))
            .transpose()
    }

    async fn renew_presence(&self, channel: &str, worker: &str) -> Result<Presence, LeaseError> {
        let out = self
            .client
            .update_item()
            .table_name(&self.table)
            .set_key(Some(self.key(channel, format!("{WORKER_PREFIX}{worker}"))))
            .update_expression(
                "SET heartbeat = if_not_exists(heartbeat, :zero) + :one, \
                 notice = if_not_exists(notice, :zero), handoffs = if_not_exists(handoffs, :none)",
            )
            .expression_attribute_values(":zero", n(0))
            .expression_attribute_values(":one", n(1))
            .expression_attribute_values(":none", AttributeValue::S("{}".into()))
            .return_values(ReturnValue::AllNew)
            .send()
            .await
            .map_err(|e| map_err(e, &self.table))?;
        let item = out.attributes.ok_or_else(|| LeaseError::Fatal {
            message: "UpdateItem returned no attributes".into(),
        })?;
        presence_from_item(channel, &item)
    }

    async fn list_presence(&self, channel: &str) -> Result<Vec<Presence>, LeaseError> {
        let items = self.query_prefix(channel, WORKER_PREFIX).await?;
        let mut rows = items
            .iter()
            .map(|item| presence_from_item(channel, item))
            .collect::<Result<Vec<_>, _>>()?;
        rows.sort_by(|a, b| a.worker.cmp(&b.worker));
        Ok(rows)
    }

    async fn notify_worker(
        &self,
        channel: &str,
        worker: &str,
        handoffs: &BTreeMap<ShardId, String>,
    ) -> Result<(), LeaseError> {
        let body = serde_json::to_string(handoffs).expect("handoffs serialize");
        let result = self
            .client
            .update_item()
            .table_name(&self.table)
            .set_key(Some(self.key(channel, format!("{WORKER_PREFIX}{worker}"))))
            .update_expression("SET notice = notice + :one, handoffs = :handoffs")
            .condition_expression("attribute_exists(heartbeat)")
            .expression_attribute_values(":one", n(1))
            .expression_attribute_values(":handoffs", AttributeValue::S(body))
            .send()
            .await;
        match result {
            Ok(_) => Ok(()),
            Err(e) if code(&e) == Some("ConditionalCheckFailedException") => {
                Err(LeaseError::conflict(channel, format!("worker/{worker}")))
            }
            Err(e) => Err(map_err(e, &self.table)),
        }
    }

    async fn remove_presence(&self, channel: &str, worker: &str) -> Result<(), LeaseError> {
        self.client
            .delete_item()
            .table_name(&self.table)
            .set_key(Some(self.key(channel, format!("{WORKER_PREFIX}{worker}"))))
            .send()
            .await
            .map_err(|e| map_err(e, &self.table))?;
        Ok(())
    }

    async fn set_checkpoint_hint(
        &self,
        channel: &str,
        key: &LeaseKey,
        position: &Position,
    ) -> Result<(), LeaseError> {
        let hint = serde_json::to_string(position).expect("positions serialize");
        let result = self
            .client
            .update_item()
            .table_name(&self.table)
            .set_key(Some(self.key(channel, format!("{LEASE_PREFIX}{key}"))))
            .update_expression("SET checkpoint_hint = :hint")
            .condition_expression("attribute_exists(lease_counter)")
            .expression_attribute_values(":hint", AttributeValue::S(hint))
            .send()
            .await;
        match result {
            Ok(_) => Ok(()),
            Err(e) if code(&e) == Some("ConditionalCheckFailedException") => {
                Err(LeaseError::conflict(channel, key))
            }
            Err(e) => Err(map_err(e, &self.table)),
        }
    }
}

#[async_trait]
impl BatchStore for DynamoDbLeaseStore {
    async fn put_batch(&self, batch: &PendingBatch) -> Result<(), LeaseError> {
        let id = batch.batch_id.hyphenated().to_string();
        let parts = batch_parts(batch);
        for (i, part) in parts.iter().enumerate().skip(1) {
            let mut item = self.key(&batch.channel, format!("{BATCH_PREFIX}{id}#{i}"));
            item.insert("body".into(), AttributeValue::B(Blob::new(part.clone())));
            self.client
                .put_item()
                .table_name(&self.table)
                .set_item(Some(item))
                .send()
                .await
                .map_err(|e| map_err(e, &self.table))?;
        }
        let mut head = self.key(&batch.channel, format!("{BATCH_PREFIX}{id}"));
        head.insert("chunks".into(), n(parts.len() as u64));
        head.insert(
            "body".into(),
            AttributeValue::B(Blob::new(parts[0].clone())),
        );
        let result = self
            .client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(head))
            .condition_expression("attribute_not_exists(#sk)")
            .expression_attribute_names("#sk", SK)
            .send()
            .await;
        match result {
            Ok(_) => Ok(()),
            Err(e) if code(&e) == Some("ConditionalCheckFailedException") => {
                // Idempotent: the same batch again is fine; a different one under the id is not.
                match self
                    .read_batch_parts(&batch.channel, &batch.batch_id)
                    .await?
                {
                    Some(existing) if &existing == batch => Ok(()),
                    _ => Err(LeaseError::conflict(
                        &batch.channel,
                        format!("batch/{}", batch.batch_id),
                    )),
                }
            }
            Err(e) => Err(map_err(e, &self.table)),
        }
    }

    async fn list_pending(&self, channel: &str) -> Result<Vec<PendingBatch>, LeaseError> {
        let items = self.query_prefix(channel, BATCH_PREFIX).await?;
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0);
        for orphan in orphan_parts(&items, now_ms) {
            tracing::info!(channel, item = %orphan, "sweeping an orphaned batch part");
            let _ = self
                .client
                .delete_item()
                .table_name(&self.table)
                .set_key(Some(self.key(channel, orphan)))
                .send()
                .await;
        }
        Ok(assemble_batches(&items)?
            .into_iter()
            .map(|(_, batch)| batch)
            .collect())
    }

    async fn finish_batches(
        &self,
        channel: &str,
        committed: &[Uuid],
        rejected: &[Uuid],
    ) -> Result<(), LeaseError> {
        for id in committed.iter().chain(rejected) {
            let id = id.hyphenated().to_string();
            // Parts of this batch (and the head), head first: once the head is gone the batch is
            // no longer pending, whatever happens to the parts.
            let items = self
                .query_prefix(channel, &format!("{BATCH_PREFIX}{id}"))
                .await?;
            let mut keys: Vec<String> = items
                .iter()
                .filter_map(|i| get_s(i, SK).map(str::to_owned))
                .collect();
            keys.sort_by_key(|k| k.len());
            for key in keys {
                self.client
                    .delete_item()
                    .table_name(&self.table)
                    .set_key(Some(self.key(channel, key)))
                    .send()
                    .await
                    .map_err(|e| map_err(e, &self.table))?;
            }
        }
        Ok(())
    }

    async fn get_channel_state(&self, channel: &str) -> Result<Option<ChannelState>, LeaseError> {
        self.get_versioned(
            channel,
            STATE_ITEM,
            "channel state",
            |s: &mut ChannelState, v| s.version = v,
        )
        .await
    }

    async fn put_channel_state(
        &self,
        state: &ChannelState,
        expected_version: Option<u64>,
    ) -> Result<u64, LeaseError> {
        let (_, body) = super::next_version(state, expected_version, |x: &mut ChannelState, v| {
            x.version = v
        });
        self.put_versioned(
            &state.channel,
            STATE_ITEM,
            "channel-state",
            body,
            expected_version,
            None,
        )
        .await
    }

    async fn get_delivered(&self, channel: &str) -> Result<Option<Delivered>, LeaseError> {
        self.get_versioned(
            channel,
            DELIVERED_ITEM,
            "checkpoints",
            |d: &mut Delivered, v| d.version = v,
        )
        .await
    }

    async fn put_delivered(
        &self,
        delivered: &Delivered,
        expected_version: Option<u64>,
    ) -> Result<u64, LeaseError> {
        let (_, body) = super::next_version(delivered, expected_version, |x: &mut Delivered, v| {
            x.version = v
        });
        self.put_versioned(
            &delivered.channel,
            DELIVERED_ITEM,
            "checkpoints",
            body,
            expected_version,
            Some(delivered.committer_epoch),
        )
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{CheckpointRange, SequenceNumber, ShardRange};

    fn big_batch(files: usize) -> PendingBatch {
        let position = Position::Sequence(
            SequenceNumber::try_new("49590338271490256608559692538361571095921575989136588898")
                .unwrap(),
        );
        PendingBatch {
            channel: "c".into(),
            batch_id: Uuid::now_v7(),
            worker_id: "w".into(),
            shards: vec![ShardRange {
                shard: ShardId("shardId-000000000000".into()),
                range: CheckpointRange {
                    after_exclusive: None,
                    last_inclusive: position,
                },
                lease_counter: 3,
            }],
            // Random-looking file entries do not compress away.
            files: crate::model::BatchFiles::Iceberg {
                data_files: (0..files)
                    .map(|i| {
                        format!(
                            "{{\"file_path\":\"s3://b/t/data/{}-{i}.parquet\"}}",
                            Uuid::new_v4()
                        )
                    })
                    .collect(),
                dlq_staged: None,
                deleted_keys: None,
            },
            num_rows: 1,
            num_dead_lettered: 0,
            dead_lettered_by_code: BTreeMap::new(),
            data_bytes: 1,
            oldest_read_at_ms: 0,
        }
    }

    fn items_of(batch: &PendingBatch) -> Vec<HashMap<String, AttributeValue>> {
        let id = batch.batch_id.hyphenated().to_string();
        let parts = batch_parts(batch);
        let count = parts.len() as u64;
        parts
            .into_iter()
            .enumerate()
            .map(|(i, body)| {
                let sk = if i == 0 {
                    format!("{BATCH_PREFIX}{id}")
                } else {
                    format!("{BATCH_PREFIX}{id}#{i}")
                };
                let mut item = HashMap::from([
                    (SK.to_owned(), AttributeValue::S(sk)),
                    ("body".to_owned(), AttributeValue::B(Blob::new(body))),
                ]);
                if i == 0 {
                    item.insert("chunks".into(), n(count));
                }
                item
            })
            .collect()
    }

    #[test]
    fn a_batch_beyond_the_item_limit_splits_into_parts_and_reassembles() {
        let batch = big_batch(20_000);
        let items = items_of(&batch);
        assert!(
            items.len() > 1,
            "expected several parts, got {}",
            items.len()
        );
        assert!(items
            .iter()
            .all(|i| get_b(i, "body").unwrap().len() <= PART_BYTES));
        let batches = assemble_batches(&items).unwrap();
        assert_eq!(batches, vec![(batch.batch_id, batch)]);
    }

    #[test]
    fn a_head_with_a_missing_part_is_an_error_and_parts_without_head_are_ignored() {
        let batch = big_batch(20_000);
        let items = items_of(&batch);
        let without_part: Vec<_> = items.iter().take(1).cloned().collect();
        assert!(assemble_batches(&without_part).is_err());
        let without_head: Vec<_> = items.iter().skip(1).cloned().collect();
        assert_eq!(assemble_batches(&without_head).unwrap(), vec![]);
    }

    #[test]
    fn only_old_parts_without_a_head_are_swept() {
        let batch = big_batch(20_000);
        let items = items_of(&batch);
        let (secs, _) = batch.batch_id.get_timestamp().unwrap().to_unix();
        let now = secs * 1000;
        let two_hours = now + 2 * 3600 * 1000;
        assert!(orphan_parts(&items, two_hours).is_empty(), "head present");
        let without_head: Vec<_> = items.iter().skip(1).cloned().collect();
        assert!(orphan_parts(&without_head, now).is_empty(), "too young");
        assert_eq!(
            orphan_parts(&without_head, two_hours).len(),
            without_head.len()
        );
    }
}
