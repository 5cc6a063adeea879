//! The committer's side of the raw S3 destination: the committed checkpoints live in the lease
//! store's delivered item ([`Delivered`]), written with one compare-and-swap on the version read
//! (and, in the store, on no newer committer epoch); committed batches' staged objects are then
//! published under their keys (copy, then delete the staged object), rejected ones deleted.

use std::collections::HashSet;
use std::sync::Arc;

use async_trait::async_trait;
use uuid::Uuid;

use super::RawStore;
use crate::destination::{CommitError, CommitTarget, LoadedTarget};
use crate::lease::{BatchStore, Delivered, LeaseError};
use crate::model::{BatchFiles, Checkpoints, PendingBatch, RawObject};

/// A raw channel's objects and delivered checkpoints, as the committer writes them.
pub struct RawTarget {
    channel: String,
    store: RawStore,
    batches: Arc<dyn BatchStore>,
}

impl RawTarget {
    /// The committer's side of raw channel `channel`, publishing through `store`, its
    /// checkpoints in `batches` ([`BatchStore::get_delivered`]).
    pub fn new(channel: &str, store: RawStore, batches: Arc<dyn BatchStore>) -> Self {
        RawTarget {
            channel: channel.to_string(),
            store,
            batches,
        }
    }
}

#[async_trait]
impl CommitTarget for RawTarget {
    fn name(&self) -> String {
        format!("s3://{}", self.store.bucket())
    }

    async fn load(&self) -> Result<Box<dyn LoadedTarget + '_>, CommitError> {
        let delivered = self.batches.get_delivered(&self.channel).await?;
        Ok(Box::new(LoadedDelivered {
            target: self,
            delivered,
        }))
    }
}

/// The delivered item as one round read it (`None` before the first commit).
struct LoadedDelivered<'a> {
    target: &'a RawTarget,
    delivered: Option<Delivered>,
}

/// The objects of a raw batch (none for a batch of another kind).
fn raw_objects(b: &PendingBatch) -> &[RawObject] {
    match &b.files {
        BatchFiles::Raw { objects } => objects,
        BatchFiles::Iceberg { .. } => &[],
    }
}

#[async_trait]
impl LoadedTarget for LoadedDelivered<'_> {
    fn epoch(&self) -> u64 {
        self.delivered.as_ref().map_or(0, |d| d.committer_epoch)
    }

    fn checkpoints(&self) -> Result<Checkpoints, CommitError> {
        Ok(self
            .delivered
            .as_ref()
            .map(|d| d.checkpoints.clone())
            .unwrap_or_default())
    }

    fn committed_batch_ids(&self) -> HashSet<Uuid> {
        self.delivered
            .iter()
            .flat_map(|d| d.committed_batch_ids.iter().copied())
            .collect()
    }

    /// One compare-and-swap of the delivered checkpoints. Returns `None` (no snapshot).
    async fn commit(
        &self,
        accepted: &[&PendingBatch],
        recovered: &[&PendingBatch],
        checkpoints: &Checkpoints,
        epoch: u64,
        commit_id: Uuid,
    ) -> Result<Option<i64>, CommitError> {
        let channel = &self.target.channel;
        if let Some(b) = accepted
            .iter()
            .find(|b| !matches!(b.files, BatchFiles::Raw { .. }))
        {
            return Err(CommitError::Incompatible(format!(
                "batch {} is a {} batch, not a raw one",
                b.batch_id,
                b.files.kind()
            )));
        }
        // Every committed batch not yet finished stays listed, so a committer that crashes before
        // publishing leaves the next one able to tell it from a duplicate.
        let delivered = Delivered {
            channel: channel.clone(),
            checkpoints: checkpoints.clone(),
            committer_epoch: epoch,
            last_commit_id: Some(commit_id),
            committed_batch_ids: accepted
                .iter()
                .chain(recovered)
                .map(|b| b.batch_id)
                .collect(),
            version: 0,
        };
        let batches = &self.target.batches;
        match batches
            .put_delivered(&delivered, self.delivered.as_ref().map(|d| d.version))
            .await
        {
            Ok(_) => Ok(None),
            Err(LeaseError::Conflict { .. }) => Err(CommitError::Conflict(format!(
                "the delivered checkpoints of {channel} changed since they were read"
            ))),
            Err(e) if e.is_retryable() => {
                // Unknown outcome: the stored item decides.
                tracing::warn!(channel = %channel, error = %e, %commit_id, "checkpoint write outcome unknown, reconciling");
                let fresh = batches.get_delivered(channel).await.map_err(|e2| {
                    CommitError::OutcomeUnknown(format!("{e}; reload failed: {e2}"))
                })?;
                if fresh.and_then(|d| d.last_commit_id) == Some(commit_id) {
                    Ok(None)
                } else {
                    Err(CommitError::OutcomeUnknown(e.to_string()))
                }
            }
            Err(e) => Err(e.into()),
        }
    }

    async fn committed_anyway(
        &self,
        _dead: &[&PendingBatch],
    ) -> Result<HashSet<Uuid>, CommitError> {
        // The delivered item lists every committed batch until it is finished: nothing else to ask.
        Ok(HashSet::new())
    }

    async fn publish(&self, b: &PendingBatch) -> Result<(), CommitError> {
        match self.target.store.publish(raw_objects(b)).await {
            Ok(()) => Ok(()),
            // Neither staged nor published: lost; say so loudly, go on.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                tracing::error!(channel = %self.target.channel, batch_id = %b.batch_id, error = %e, "staged object is missing: a committed batch cannot be published");
                Ok(())
            }
            Err(e) => Err(CommitError::unavailable("publish staged objects", e)),
        }
    }

    async fn discard(&self, b: &PendingBatch) {
        self.target.store.discard(raw_objects(b)).await;
    }
}
