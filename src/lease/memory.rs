//! In-memory lease store, for tests and the fleet simulation (`floe-fleet-sim`): the same
//! conditional rules as the real stores (it passes the conformance suite), plus an outage
//! switch. Nothing survives the process.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use async_trait::async_trait;
use uuid::Uuid;

use super::{
    BatchStore, ChannelState, Delivered, Lease, LeaseError, LeaseKey, LeaseSpec, LeaseStore,
    Presence,
};
use crate::model::{PendingBatch, Position, ShardId};

#[derive(Default)]
struct State {
    leases: BTreeMap<(String, LeaseKey), Lease>,
    presence: BTreeMap<(String, String), Presence>,
    batches: BTreeMap<(String, Uuid), PendingBatch>,
    channels: BTreeMap<String, ChannelState>,
    delivered: BTreeMap<String, Delivered>,
}

/// An in-memory [`LeaseStore`] and [`BatchStore`]; clones of an `Arc` of it share one state.
#[derive(Default)]
pub struct MemoryLeaseStore {
    state: Mutex<State>,
    unavailable: AtomicBool,
}

impl MemoryLeaseStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// While `true`, every call fails with [`LeaseError::Unavailable`] (a simulated outage).
    pub fn set_unavailable(&self, unavailable: bool) {
        self.unavailable.store(unavailable, Ordering::SeqCst);
    }

    fn state(&self) -> Result<std::sync::MutexGuard<'_, State>, LeaseError> {
        if self.unavailable.load(Ordering::SeqCst) {
            return Err(LeaseError::Unavailable {
                message: "simulated outage".into(),
            });
        }
        Ok(self.state.lock().expect("memory lease store poisoned"))
    }
}

fn row_key(lease: &Lease) -> (String, LeaseKey) {
    (lease.channel.clone(), lease.key.clone())
}

#[async_trait]
impl LeaseStore for MemoryLeaseStore {
    async fn ensure_leases(&self, channel: &str, specs: &[LeaseSpec]) -> Result<(), LeaseError> {
        let mut state = self.state()?;
        for spec in specs {
            state
                .leases
                .entry((channel.to_string(), spec.key.clone()))
                .or_insert_with(|| Lease {
                    channel: channel.to_string(),
                    key: spec.key.clone(),
                    owner: None,
                    lease_counter: 0,
                    heartbeat: 0,
                    checkpoint_hint: None,
                    parents: spec.parents.clone(),
                });
        }
        Ok(())
    }

    async fn list_leases(&self, channel: &str) -> Result<Vec<Lease>, LeaseError> {
        let state = self.state()?;
        Ok(state
            .leases
            .values()
            .filter(|l| l.channel == channel)
            .cloned()
            .collect())
    }

    async fn take_lease(&self, lease: &Lease, worker: &str) -> Result<Lease, LeaseError> {
        let mut state = self.state()?;
        match state.leases.get_mut(&row_key(lease)) {
            Some(row)
                if row.owner == lease.owner
                    && row.lease_counter == lease.lease_counter
                    && row.heartbeat == lease.heartbeat =>
            {
                row.owner = Some(worker.to_string());
                row.lease_counter += 1;
                Ok(row.clone())
            }
            _ => Err(LeaseError::conflict(&lease.channel, &lease.key)),
        }
    }

    async fn renew_lease(&self, lease: &Lease) -> Result<Lease, LeaseError> {
        let mut state = self.state()?;
        match state.leases.get_mut(&row_key(lease)) {
            Some(row)
                if lease.owner.is_some()
                    && row.owner == lease.owner
                    && row.lease_counter == lease.lease_counter =>
            {
                row.heartbeat += 1;
                Ok(row.clone())
            }
            _ => Err(LeaseError::lost(lease)),
        }
    }

    async fn release_lease(&self, lease: &Lease) -> Result<(), LeaseError> {
        let mut state = self.state()?;
        match state.leases.get_mut(&row_key(lease)) {
            Some(row)
                if lease.owner.is_some()
                    && row.owner == lease.owner
                    && row.lease_counter == lease.lease_counter =>
            {
                row.owner = None;
                row.lease_counter += 1;
                Ok(())
            }
            _ => Err(LeaseError::lost(lease)),
        }
    }

    async fn delete_lease(&self, lease: &Lease) -> Result<(), LeaseError> {
        let mut state = self.state()?;
        match state.leases.get(&row_key(lease)) {
            Some(row) if row.lease_counter == lease.lease_counter => {
                state.leases.remove(&row_key(lease));
                Ok(())
            }
            _ => Err(LeaseError::conflict(&lease.channel, &lease.key)),
        }
    }

    async fn get_lease(&self, channel: &str, key: &LeaseKey) -> Result<Option<Lease>, LeaseError> {
        let state = self.state()?;
        Ok(state
            .leases
            .get(&(channel.to_string(), key.clone()))
            .cloned())
    }

    async fn renew_presence(&self, channel: &str, worker: &str) -> Result<Presence, LeaseError> {
        let mut state = self.state()?;
        let row = state
            .presence
            .entry((channel.to_string(), worker.to_string()))
            .or_insert_with(|| Presence {
                channel: channel.to_string(),
                worker: worker.to_string(),
                heartbeat: 0,
                notice: 0,
                handoffs: BTreeMap::new(),
            });
        row.heartbeat += 1;
        Ok(row.clone())
    }

    async fn list_presence(&self, channel: &str) -> Result<Vec<Presence>, LeaseError> {
        let state = self.state()?;
        Ok(state
            .presence
            .values()
            .filter(|p| p.channel == channel)
            .cloned()
            .collect())
    }

    async fn notify_worker(
        &self,
        channel: &str,
        worker: &str,
        handoffs: &BTreeMap<ShardId, String>,
    ) -> Result<(), LeaseError> {
        let mut state = self.state()?;
        match state
            .presence
            .get_mut(&(channel.to_string(), worker.to_string()))
        {
            Some(row) => {
                row.notice += 1;
                row.handoffs = handoffs.clone();
                Ok(())
            }
            None => Err(LeaseError::conflict(channel, format!("worker/{worker}"))),
        }
    }

    async fn remove_presence(&self, channel: &str, worker: &str) -> Result<(), LeaseError> {
        let mut state = self.state()?;
        state
            .presence
            .remove(&(channel.to_string(), worker.to_string()));
        Ok(())
    }

    async fn set_checkpoint_hint(
        &self,
        channel: &str,
        key: &LeaseKey,
        position: &Position,
    ) -> Result<(), LeaseError> {
        let mut state = self.state()?;
        match state.leases.get_mut(&(channel.to_string(), key.clone())) {
            Some(row) => {
                row.checkpoint_hint = Some(position.clone());
                Ok(())
            }
            None => Err(LeaseError::conflict(channel, key)),
        }
    }
}

#[async_trait]
impl BatchStore for MemoryLeaseStore {
    async fn put_batch(&self, batch: &PendingBatch) -> Result<(), LeaseError> {
        let mut state = self.state()?;
        let key = (batch.channel.clone(), batch.batch_id);
        match state.batches.get(&key) {
            Some(existing) if existing == batch => Ok(()),
            Some(_) => Err(LeaseError::conflict(
                &batch.channel,
                format!("batch/{}", batch.batch_id),
            )),
            None => {
                state.batches.insert(key, batch.clone());
                Ok(())
            }
        }
    }

    async fn list_pending(&self, channel: &str) -> Result<Vec<PendingBatch>, LeaseError> {
        let state = self.state()?;
        Ok(state
            .batches
            .range((channel.to_string(), Uuid::nil())..=(channel.to_string(), Uuid::max()))
            .map(|(_, b)| b.clone())
            .collect())
    }

    async fn finish_batches(
        &self,
        channel: &str,
        committed: &[Uuid],
        rejected: &[Uuid],
    ) -> Result<(), LeaseError> {
        let mut state = self.state()?;
        for id in committed.iter().chain(rejected) {
            state.batches.remove(&(channel.to_string(), *id));
        }
        Ok(())
    }

    async fn get_channel_state(&self, channel: &str) -> Result<Option<ChannelState>, LeaseError> {
        Ok(self.state()?.channels.get(channel).cloned())
    }

    async fn put_channel_state(
        &self,
        state: &ChannelState,
        expected_version: Option<u64>,
    ) -> Result<u64, LeaseError> {
        let mut guard = self.state()?;
        let stored = guard.channels.get(&state.channel).map(|s| s.version);
        if stored != expected_version {
            return Err(LeaseError::conflict(&state.channel, "channel-state"));
        }
        let version = expected_version.map_or(1, |v| v + 1);
        let mut new = state.clone();
        new.version = version;
        guard.channels.insert(state.channel.clone(), new);
        Ok(version)
    }

    async fn get_delivered(&self, channel: &str) -> Result<Option<Delivered>, LeaseError> {
        Ok(self.state()?.delivered.get(channel).cloned())
    }

    async fn put_delivered(
        &self,
        delivered: &Delivered,
        expected_version: Option<u64>,
    ) -> Result<u64, LeaseError> {
        let mut guard = self.state()?;
        let stored = guard.delivered.get(&delivered.channel);
        if stored.map(|d| d.version) != expected_version
            || stored.is_some_and(|d| d.committer_epoch > delivered.committer_epoch)
        {
            return Err(LeaseError::conflict(&delivered.channel, "checkpoints"));
        }
        let version = expected_version.map_or(1, |v| v + 1);
        let mut new = delivered.clone();
        new.version = version;
        guard.delivered.insert(delivered.channel.clone(), new);
        Ok(version)
    }
}
