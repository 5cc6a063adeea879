//! A table per topic: the supervisor of a channel with `table = "{topic}"` (docs/routing.md).
//!
//! Such a channel runs as one **member channel** per topic ([`ChannelConfig::member`]): a
//! channel of its own in the lease store, reading its one topic into its one table, with its
//! shard leases, its committer lease and epoch, its checkpoints (in its table), its state and
//! its maintenance. Exactly-once per table is therefore the single-table protocol of
//! docs/design.md, unchanged; a table's trouble (dropped, refused, its catalog failing) stops or
//! stalls its member alone.
//!
//! ```text
//!   supervisor ── every topic_refresh_interval: list the topics the channel selects
//!       │  new topic   -> member `<channel>.<topic>`: activation at the channel's time, table, tasks
//!       │  topic gone  -> stop its member (drain, release leases); table and checkpoints kept
//!       │  past max_tables, or a table name another topic has -> not read (logged, counted)
//!       └─ the channel no longer ACTIVE (floe channel delete) -> stop starting members
//! ```
//!
//! This is the run-time side; naming, admission ([`admit_topics`]), member activation and the
//! parent watch are [`crate::channel::members`]'s, shared with the control plane.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::channel::members::{
    activate_member, admit_topics, member_name, table_of_topic, TopicRefusal, MAX_MEMBER_NAME,
};
use crate::channel::ChannelStops;
use crate::config::{ChannelConfig, DestinationConfig, SourceConfig};
use crate::lease::ChannelStatus;
use crate::retry::Backoff;
use crate::source::kafka::topics::KafkaTopicsSource;

use super::{activate_err, channel_err, AppError, FatalScope, Fleet};

/// A topic's member channel, as the supervisor knows it.
enum Member {
    /// Being prepared (activation, table, first shard listing).
    Starting,
    /// Delivering; `stops` stop it alone.
    Running {
        /// Its table's name.
        table: String,
        /// Its switches.
        stops: ChannelStops,
    },
    /// Refused at start (a foreign table, a schema the table refuses): retried once its state
    /// is ACTIVE again (`floe channel delete` and `create` of the member).
    Refused,
}

/// The supervisor of one channel with `table = "{topic}"`.
pub(super) struct TopicSupervisor {
    fleet: Arc<Fleet>,
    index: usize,
    channel: ChannelConfig,
    /// Lists the topics the channel selects (its metadata client only: no topic is read
    /// through it).
    lister: KafkaTopicsSource,
    /// The channel's activation time (epoch ms): every member's.
    activated_at_ms: i64,
    refresh: Duration,
    max_tables: usize,
    members: Arc<Mutex<BTreeMap<String, Member>>>,
    /// Topics already reported as not read, with the reason (one log line and one count each).
    reported: BTreeSet<(String, &'static str)>,
    /// Topics whose member channel has a state in the lease store (admitted before).
    known: BTreeSet<String>,
}

/// How many members deliver: started and not stopped (a suspended or deleted member's worker
/// loop has returned).
fn running(members: &BTreeMap<String, Member>) -> usize {
    members
        .values()
        .filter(|m| matches!(m, Member::Running { stops, .. } if !stops.worker_done.is_cancelled()))
        .count()
}

impl TopicSupervisor {
    /// Activates the channel itself (its activation time is every member's) and opens its
    /// topic lister.
    ///
    /// Errors: [`AppError::ChannelRefused`] for a channel that is not ACTIVE (being deleted) or a
    /// client librdkafka refuses; [`AppError::ChannelUnavailable`] when the lease store fails.
    pub(super) async fn start(
        fleet: Arc<Fleet>,
        index: usize,
        channel: &ChannelConfig,
    ) -> Result<Self, AppError> {
        let name = channel.name.as_str();
        let (SourceConfig::Kafka(kafka), DestinationConfig::Iceberg(dest)) =
            (&channel.source, &channel.destination)
        else {
            return Err(channel_err(
                name,
                "table = \"{topic}\" needs a Kafka source and an Iceberg destination",
            ));
        };
        let state = fleet.activate_parent(name).await?;
        // Its metadata client is the one every member's source reads through.
        let lister = fleet
            .clients
            .topic_lister(index, channel)
            .map_err(|e| channel_err(name, e))?;
        Ok(TopicSupervisor {
            index,
            channel: channel.clone(),
            lister,
            activated_at_ms: state.activated_at_ms.unwrap_or(0),
            refresh: kafka.topic_refresh_interval,
            max_tables: dest.max_tables as usize,
            members: Arc::default(),
            reported: BTreeSet::new(),
            known: BTreeSet::new(),
            fleet,
        })
    }

    /// Lists the topics every `topic_refresh_interval` (sooner, with backoff, after a failed
    /// listing) and starts and stops members, until shutdown or until the channel is no
    /// longer ACTIVE.
    pub(super) async fn run(mut self) {
        let name = self.channel.name.clone();
        let stop = self.fleet.stop_reading.clone();
        let mut backoff = Backoff::new(Duration::from_secs(1), self.refresh);
        loop {
            if !self.channel_active().await {
                tracing::warn!(channel = %name, "channel is no longer ACTIVE: starting no more tables (its member channels stop on their own state)");
                return;
            }
            let wait = match self.lister.topics().await {
                Ok(topics) => {
                    backoff.reset();
                    self.reconcile(&topics).await;
                    self.refresh
                }
                Err(e) => {
                    let delay = backoff.next_delay();
                    tracing::warn!(channel = %name, error = %e, "listing the channel's topics failed; retrying in {delay:?} (running tables go on)");
                    delay
                }
            };
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(wait) => {}
            }
        }
    }

    /// Whether the channel's own state is ACTIVE (a lease store error counts as active: the
    /// members watch their own state).
    async fn channel_active(&self) -> bool {
        match self.fleet.store.get_channel_state(&self.channel.name).await {
            Ok(Some(state)) => state.state == ChannelStatus::Active,
            _ => true,
        }
    }

    /// Starts a member for each topic [`admit_topics`] admits (the topics whose member has a
    /// state in the lease store first, then new ones within `max_tables` whose table name is
    /// free: every worker makes the same choice), stops the members of topics no longer
    /// listed, and starts again a member that stopped (suspended, deleted) or was refused once
    /// its state is ACTIVE again (`floe channel delete` and `create` of the member).
    async fn reconcile(&mut self, topics: &[String]) {
        let name = self.channel.name.clone();
        let store = self.fleet.store.clone();
        // Members that stopped or were refused: retried when their state is ACTIVE again.
        let stalled: Vec<String> = {
            let members = self.members.lock().expect("members lock");
            members
                .iter()
                .filter(|(_, m)| match m {
                    Member::Running { stops, .. } => stops.worker_done.is_cancelled(),
                    Member::Refused => true,
                    Member::Starting => false,
                })
                .map(|(t, _)| t.clone())
                .collect()
        };
        let mut revived = Vec::new();
        for topic in stalled {
            let member = member_name(&name, &topic);
            if let Ok(Some(state)) = store.get_channel_state(&member).await {
                if state.state == ChannelStatus::Active {
                    revived.push(topic);
                }
            }
        }
        // Topics whose member has a state: admitted before, by this worker or another.
        let unknown: Vec<String> = {
            let members = self.members.lock().expect("members lock");
            topics
                .iter()
                .filter(|t| !members.contains_key(*t) && !self.known.contains(*t))
                .cloned()
                .collect()
        };
        for topic in unknown {
            if let Ok(Some(_)) = store.get_channel_state(&member_name(&name, &topic)).await {
                self.known.insert(topic);
            }
        }
        let listed: BTreeSet<&str> = topics.iter().map(String::as_str).collect();
        let drain = self.fleet.config.worker.shutdown_timeout;
        let mut members = self.members.lock().expect("members lock");
        for topic in revived {
            tracing::info!(channel = %name, topic = %topic, "the topic's member channel is ACTIVE again: starting it");
            members.remove(&topic);
        }
        // Topics gone: their members stop; their tables and checkpoints stay.
        let gone: Vec<String> = members
            .keys()
            .filter(|t| !listed.contains(t.as_str()))
            .cloned()
            .collect();
        for topic in gone {
            match members.get(&topic) {
                Some(Member::Starting) => continue, // stopped at the next listing
                Some(Member::Running { table, stops }) => {
                    tracing::warn!(channel = %name, topic = %topic, table = %table, "topic no longer exists: stopping its table's member channel (leases released; the table and its checkpoints are kept)");
                    let stops = stops.clone();
                    tokio::spawn(async move { stops.stop(drain).await });
                }
                _ => {}
            }
            members.remove(&topic);
            self.reported.retain(|(t, _)| t != &topic);
        }
        let mut known = self.known.clone();
        known.extend(members.keys().cloned());
        let (admitted, refused) = admit_topics(&name, topics, &known, self.max_tables);
        for (topic, why) in refused {
            if !self.reported.insert((topic.clone(), why.reason())) {
                continue;
            }
            let table = table_of_topic(&topic);
            match &why {
                TopicRefusal::NameClash { other } => {
                    tracing::error!(channel = %name, topic = %topic, table = %table, other_topic = %other, "topic not read: its table name is the table of another topic of the channel (names are lowercased, characters outside a-z 0-9 _ become _); rename one topic or give it a channel of its own")
                }
                TopicRefusal::MaxTables => {
                    tracing::error!(channel = %name, topic = %topic, max_tables = self.max_tables, "topic not read: the channel delivers to max_tables tables already (channel.destination.max_tables)")
                }
                TopicRefusal::NameTooLong => {
                    tracing::error!(channel = %name, topic = %topic, max = MAX_MEMBER_NAME, "topic not read: its member channel name <channel>.<topic> is too long (it names the table's data files)")
                }
            }
            crate::telemetry::record_topic_refused(&name, why.reason());
        }
        for topic in admitted {
            if members.contains_key(&topic) {
                continue;
            }
            members.insert(topic.clone(), Member::Starting);
            self.spawn_member(topic);
        }
        crate::telemetry::set_channel_tables(&name, running(&members));
    }

    /// Prepares and starts the member of `topic` in a task of its own (a slow or failing table
    /// does not hold up the others).
    fn spawn_member(&self, topic: String) {
        let fleet = self.fleet.clone();
        let members = self.members.clone();
        let member = self.channel.member(&topic);
        let (index, activated_at, parent, refresh) = (
            self.index,
            self.activated_at_ms,
            self.channel.name.clone(),
            self.refresh,
        );
        self.fleet.tracker.spawn(async move {
            let started = async {
                activate_member(
                    fleet.store.as_ref(),
                    &member.name,
                    Some(activated_at),
                    Some(refresh),
                )
                .await
                .map_err(|e| activate_err(&member.name, e))?;
                fleet
                    .start_channel(
                        index,
                        member.clone(),
                        FatalScope::Member,
                        Some(fleet.shared_presence(&parent)),
                    )
                    .await
            };
            let result = started.await;
            let mut members = members.lock().expect("members lock");
            let table = member
                .destination
                .iceberg()
                .map(|d| d.table.clone())
                .unwrap_or_default();
            match result {
                Ok(stops) => {
                    fleet.watch_parent(&parent, stops.clone());
                    tracing::info!(channel = %parent, topic = %topic, member = %member.name, table = %table, "table started for topic");
                    members.insert(topic, Member::Running { table, stops });
                }
                // Shutting down: the topic is started again by the next run.
                Err(AppError::Stopped(_)) => {
                    members.remove(&topic);
                }
                Err(e) if e.is_retryable() => {
                    tracing::warn!(channel = %parent, topic = %topic, error = %e, "could not start the topic's table; retrying at the next topic listing");
                    members.remove(&topic);
                }
                Err(e) => {
                    tracing::error!(channel = %parent, topic = %topic, member = %member.name, error = %e, "topic not read: its table was refused (the channel's other tables go on)");
                    crate::telemetry::record_topic_refused(&parent, "refused");
                    members.insert(topic, Member::Refused);
                }
            }
            crate::telemetry::set_channel_tables(&parent, running(&members));
        });
    }
}
