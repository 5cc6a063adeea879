//! Member channels, in one place for `floe run` and the control plane: a channel with
//! `table = "{topic}"` runs as one member channel per topic of its source, one with
//! `table = "{route}"` as one member channel per routed table (docs/routing.md).
//!
//! ```text
//!   channel `c` (table = "{topic}" | "{route}") ── activation time recorded once, for `c`
//!       ├─ member `c.<topic>` / `c.<table>` ── a channel of its own, activated at `c`'s time
//!       └─ …                                    and stopped when `c` is no longer ACTIVE
//!
//!   naming.rs      `<channel>.<member>`, a topic's table, the member's ChannelConfig (pure)
//!   this file      admission (which topics get a member: every worker and the control plane
//!                  choose alike) and [`Members`], the members the control plane resolved
//!   activation.rs  the parent's activation (`floe channel create`), a member's at its parent's
//!                  time, the watch that stops a member with its parent
//!
//!   floe run        app/topics.rs (lists the topics, starts and stops members), app/routes.rs
//!   control plane   resolve_members -> Members, passed beside the Config to create, describe,
//!                   update, delete, list (and floe maintain)
//! ```
//!
//! Invariant: each member is a channel of its own in the lease store (its leases, committer
//! lease and epoch, state, checkpoints in its table), so exactly-once per table is the
//! single-table protocol of docs/design.md, unchanged. The configuration holds no members:
//! `floe run` starts them as it finds them; the control plane resolves them per command.

mod activation;
mod naming;

pub use activation::{activate_member, activate_parent, topic_appeared_later, watch_parent};
pub use naming::{member_name, table_of_topic, MAX_MEMBER_NAME};

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use super::ControlError;
use crate::config::{ChannelConfig, Config, SourceConfig};
use crate::lease::Store;

/// Why a topic of a `table = "{topic}"` channel gets no member channel ([`admit_topics`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TopicRefusal {
    /// The channel has `max_tables` tables already.
    MaxTables,
    /// Its table name is the table of `other`, admitted before it.
    NameClash {
        /// The topic whose table it is.
        other: String,
    },
    /// `<channel>.<topic>` is longer than [`MAX_MEMBER_NAME`].
    NameTooLong,
}

impl TopicRefusal {
    /// The `reason` label of `floe_topics_refused_total`.
    pub fn reason(&self) -> &'static str {
        match self {
            TopicRefusal::MaxTables => "max_tables",
            TopicRefusal::NameClash { .. } => "name_clash",
            TopicRefusal::NameTooLong => "name_too_long",
        }
    }
}

/// Which of `topics` (the selected topics the cluster has, any order) channel `channel` with
/// `table = "{topic}"` delivers, the same answer for every worker and the control plane given
/// the same listing (docs/routing.md, "Limits"): first every topic in `known` (its member
/// channel has a state in the lease store: it was admitted once, and stays, whatever the limit),
/// then the others in name order while fewer than `max_tables` are admitted and their table
/// name is not an admitted topic's. A member name longer than [`MAX_MEMBER_NAME`] is never
/// admitted. Returns the admitted topics, and the others with why.
pub fn admit_topics(
    channel: &str,
    topics: &[String],
    known: &BTreeSet<String>,
    max_tables: usize,
) -> (Vec<String>, Vec<(String, TopicRefusal)>) {
    let mut sorted: Vec<&String> = topics.iter().collect();
    sorted.sort_by_key(|t| (!known.contains(*t), t.as_str()));
    let (mut admitted, mut refused) = (Vec::new(), Vec::new());
    let mut tables: BTreeMap<String, String> = BTreeMap::new();
    for topic in sorted {
        if member_name(channel, topic).len() > MAX_MEMBER_NAME {
            refused.push((topic.clone(), TopicRefusal::NameTooLong));
            continue;
        }
        let table = table_of_topic(topic);
        if known.contains(topic) {
            tables.entry(table).or_insert_with(|| topic.clone());
            admitted.push(topic.clone());
            continue;
        }
        if let Some(other) = tables.get(&table) {
            refused.push((
                topic.clone(),
                TopicRefusal::NameClash {
                    other: other.clone(),
                },
            ));
            continue;
        }
        if admitted.len() >= max_tables {
            refused.push((topic.clone(), TopicRefusal::MaxTables));
            continue;
        }
        tables.insert(table, topic.clone());
        admitted.push(topic.clone());
    }
    (admitted, refused)
}

/// The member channels of a configuration's channels with `table = "{topic}"` or
/// `table = "{route}"`, as [`resolve_members`] found them: what the control plane passes beside
/// the [`Config`] so that it can create, list, describe, update and delete members by name. The
/// default (nothing resolved) still knows the members of a routed channel, from the file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Members {
    /// Every member channel, with its channel's index in `config.channels`, in channel then
    /// name order.
    pub channels: Vec<(usize, ChannelConfig)>,
    /// The topics left without a member, as `floe run` leaves them out: (channel, topic, why).
    pub left_out: Vec<(String, String, TopicRefusal)>,
}

impl Members {
    /// The member channels of channel `name` of `config`: `<channel>.<table>` of each table of
    /// a channel with `table = "{route}"`, in table order; `<channel>.<topic>` of each topic of
    /// a channel with `table = "{topic}"` resolved by [`resolve_members`], in topic order; none
    /// for any other channel.
    pub fn names_of(&self, config: &Config, name: &str) -> Vec<String> {
        let Some(index) = config.channels.iter().position(|c| c.name == name) else {
            return Vec::new();
        };
        let channel = &config.channels[index];
        if let Some(route) = channel.destination.iceberg().and_then(|d| d.route.as_ref()) {
            return route
                .tables()
                .into_iter()
                .map(|t| member_name(name, t))
                .collect();
        }
        self.channels
            .iter()
            .filter(|(i, _)| *i == index)
            .map(|(_, c)| c.name.clone())
            .collect()
    }

    /// The member channel named `name`, with the index of its channel in `config.channels`: a
    /// member `<channel>.<table>` of a channel with `table = "{route}"`, or a member
    /// `<channel>.<topic>` of a channel with `table = "{topic}"` resolved by
    /// [`resolve_members`]. `None` for any other name.
    pub fn find(&self, config: &Config, name: &str) -> Option<(usize, ChannelConfig)> {
        config
            .channels
            .iter()
            .enumerate()
            .find_map(|(i, c)| {
                let route = c.destination.iceberg()?.route.as_ref()?;
                let table = route
                    .tables()
                    .into_iter()
                    .find(|t| member_name(&c.name, t) == name)?;
                Some((i, c.route_member(table)))
            })
            .or_else(|| {
                self.channels
                    .iter()
                    .find(|(_, c)| c.name == name)
                    .map(|(i, c)| (*i, c.clone()))
            })
    }

    /// The `topic_refresh_interval` of `name` when it is the member of a topic of a channel
    /// with `table = "{topic}"` resolved by [`resolve_members`] (see [`topic_appeared_later`]);
    /// `None` for any other channel.
    pub fn topic_refresh(&self, config: &Config, name: &str) -> Option<Duration> {
        self.channels
            .iter()
            .find(|(i, m)| m.name == name && config.channels[*i].is_table_per_topic())
            .and_then(|(_, m)| match &m.source {
                SourceConfig::Kafka(k) => Some(k.topic_refresh_interval),
                _ => None,
            })
    }
}

/// Resolves the member channels of every channel of `config` with `table = "{topic}"` (one per
/// topic the cluster has now, [`ChannelConfig::member`]) or `table = "{route}"` (one per table,
/// [`ChannelConfig::route_member`]), so that the control plane can create, list, describe,
/// update and delete them by name. Topics past `max_tables`, or whose table name another topic
/// has, are left out as `floe run` leaves them out ([`Members::left_out`]).
///
/// Errors: [`ControlError::Unavailable`] when a Kafka cluster does not answer the topic listing;
/// [`ControlError::Refused`] when librdkafka refuses the client properties.
pub async fn resolve_members(config: &Config, store: &dyn Store) -> Result<Members, ControlError> {
    let mut members = Vec::new();
    let mut left_out = Vec::new();
    for (index, channel) in config.channels.iter().enumerate() {
        // A routed channel's members are its tables, known from the file.
        if let Some(route) = channel.destination.iceberg().and_then(|d| d.route.as_ref()) {
            for table in route.tables() {
                members.push((index, channel.route_member(table)));
            }
            continue;
        }
        let (SourceConfig::Kafka(kafka), Some(dest)) =
            (&channel.source, channel.destination.iceberg())
        else {
            continue;
        };
        if !channel.is_table_per_topic() {
            continue;
        }
        let lister = crate::source::kafka::topics::KafkaTopicsSource::try_new(&channel.name, kafka)
            .map_err(|e| ControlError::refused(format!("channel[{index}].source"), e.to_string()))?
            .at_index(index);
        let topics = lister.topics().await.map_err(|e| {
            ControlError::Unavailable(format!(
                "listing the topics of channel {}: {e}",
                channel.name
            ))
        })?;
        // The choice `floe run` makes (admit_topics): members with a state first, whatever the
        // limit, so the control plane reaches every table delivered.
        let mut known = BTreeSet::new();
        for topic in &topics {
            let member = member_name(&channel.name, topic);
            if store.get_channel_state(&member).await?.is_some() {
                known.insert(topic.clone());
            }
        }
        let (admitted, refused) =
            admit_topics(&channel.name, &topics, &known, dest.max_tables as usize);
        members.extend(admitted.iter().map(|t| (index, channel.member(t))));
        left_out.extend(
            refused
                .into_iter()
                .map(|(topic, why)| (channel.name.clone(), topic, why)),
        );
    }
    members.sort_by(|a, b| (a.0, &a.1.name).cmp(&(b.0, &b.1.name)));
    Ok(Members {
        channels: members,
        left_out,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_worker_admits_the_same_topics_of_a_table_per_topic_channel() {
        let t = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let none = BTreeSet::new();
        // New topics in name order, within max_tables; a clashing table name after its owner.
        let (admitted, refused) = admit_topics("c", &t(&["b", "a_x", "a.x", "c"]), &none, 2);
        assert_eq!(admitted, t(&["a.x", "b"]));
        assert_eq!(
            refused,
            vec![
                (
                    "a_x".to_string(),
                    TopicRefusal::NameClash {
                        other: "a.x".into()
                    }
                ),
                ("c".to_string(), TopicRefusal::MaxTables),
            ]
        );
        // A topic whose member has a state (admitted before, by any worker) comes first, even
        // past the limit, and owns its table name.
        let known: BTreeSet<String> = ["c".to_string(), "a_x".to_string()].into();
        let (admitted, refused) = admit_topics("c", &t(&["b", "a_x", "a.x", "c"]), &known, 2);
        assert_eq!(admitted, t(&["a_x", "c"]));
        assert_eq!(
            refused,
            vec![
                (
                    "a.x".to_string(),
                    TopicRefusal::NameClash {
                        other: "a_x".into()
                    }
                ),
                ("b".to_string(), TopicRefusal::MaxTables),
            ]
        );
        // Listing order does not matter.
        let (again, _) = admit_topics("c", &t(&["c", "a.x", "b", "a_x"]), &known, 2);
        assert_eq!(again, admitted);
        // A member name too long to name files is never admitted.
        let long = format!("t{}", "l".repeat(MAX_MEMBER_NAME));
        let (admitted, refused) = admit_topics("c", std::slice::from_ref(&long), &none, 5);
        assert!(admitted.is_empty());
        assert_eq!(refused, vec![(long, TopicRefusal::NameTooLong)]);
    }
}
