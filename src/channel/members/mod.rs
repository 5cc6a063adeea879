//! The member channels of a channel with `table = "{topic}"` or `table = "{route}"` as the
//! control plane sees them: resolved from the cluster's topics (or the routes), named
//! `<channel>.<member>`, and the parent channel's own activation.

use super::{create_decision, put, state_path, ControlError, CreateDecision};
use crate::config::Config;
use crate::lease::{ChannelState, ChannelStatus, Store};
use crate::time::now_ms;

/// Resolves the member channels of every channel of `config` with `table = "{topic}"` (one per
/// topic the cluster has now, [`ChannelConfig::member`]) or `table = "{route}"` (one per table,
/// [`ChannelConfig::route_member`]) into `config.members`, so that the control plane can
/// create, list, describe, update and delete them by name. Topics past
/// `max_tables`, or whose table name another topic has, are left out as `floe run` leaves them
/// out.
///
/// Errors: [`ControlError::Unavailable`] when a Kafka cluster does not answer the topic listing;
/// [`ControlError::Refused`] when librdkafka refuses the client properties.
pub async fn resolve_members(
    config: &mut Config,
    store: &dyn Store,
) -> Result<Vec<(String, String, crate::config::TopicRefusal)>, ControlError> {
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
        let (crate::config::SourceConfig::Kafka(kafka), Some(dest)) =
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
        // The choice `floe run` makes (crate::config::admit_topics): members with a state
        // first, whatever the limit, so the control plane reaches every table delivered.
        let mut known = std::collections::BTreeSet::new();
        for topic in &topics {
            let member = crate::config::member_name(&channel.name, topic);
            if store.get_channel_state(&member).await?.is_some() {
                known.insert(topic.clone());
            }
        }
        let (admitted, refused) =
            crate::config::admit_topics(&channel.name, &topics, &known, dest.max_tables as usize);
        members.extend(admitted.iter().map(|t| (index, channel.member(t))));
        left_out.extend(
            refused
                .into_iter()
                .map(|(topic, why)| (channel.name.clone(), topic, why)),
        );
    }
    members.sort_by(|a, b| (a.0, &a.1.name).cmp(&(b.0, &b.1.name)));
    config.members = members;
    Ok(left_out)
}

/// The member channels of channel `name`: `<channel>.<table>` of each table of a channel with
/// `table = "{route}"`, in table order; `<channel>.<topic>` of each topic of a channel with
/// `table = "{topic}"` resolved by [`resolve_members`], in topic order; none for any other
/// channel.
pub fn member_names(config: &Config, name: &str) -> Vec<String> {
    let Some(index) = config.channels.iter().position(|c| c.name == name) else {
        return Vec::new();
    };
    let channel = &config.channels[index];
    if let Some(route) = channel.destination.iceberg().and_then(|d| d.route.as_ref()) {
        return route
            .tables()
            .into_iter()
            .map(|t| crate::config::member_name(name, t))
            .collect();
    }
    config
        .members
        .iter()
        .filter(|(i, _)| *i == index)
        .map(|(_, c)| c.name.clone())
        .collect()
}

/// `floe channel create` of a channel with `table = "{topic}"` or `table = "{route}"` itself
/// (its members are created as channels of their own): records it ACTIVE with its activation
/// time, every member's. A DELETING channel is activated anew.
///
/// Errors: [`ControlError::Refused`] for a FAILED or SUSPENDED state; [`ControlError::Unavailable`]
/// when the lease store fails.
pub async fn activate_parent(name: &str, store: &dyn Store) -> Result<ChannelState, ControlError> {
    let current = store.get_channel_state(name).await?;
    match create_decision(current.as_ref()) {
        CreateDecision::AlreadyActive => Ok(current.expect("active state")),
        CreateDecision::Refuse(message) => Err(ControlError::refused(state_path(name), message)),
        CreateDecision::Start | CreateDecision::Resume => {
            let expected = current.as_ref().map(|s| s.version);
            let now = now_ms();
            let active = ChannelState {
                channel: name.to_string(),
                state: ChannelStatus::Active,
                status_reason: None,
                activated_at_ms: Some(now),
                table_uuid: None,
                schema_version_id: None,
                version: 0,
                updated_at_ms: 0,
                overrides: current.map(|s| s.overrides).unwrap_or_default(),
                from_first_record: false,
            };
            let active = put(store, active, expected).await?;
            tracing::info!(
                channel = name,
                activated_at_ms = now,
                "channel (a table per topic or route) activated"
            );
            Ok(active)
        }
    }
}
