//! Member names and member configurations: `<channel>.<topic>` / `<channel>.<table>`, the
//! table of a topic, and the [`ChannelConfig`] a member channel runs with, derived from its
//! channel's (pure: no I/O).

use crate::config::{
    ChannelConfig, DestinationConfig, RouteConfig, SchemaConfig, SourceConfig, TopicSelection,
    TABLE_PER_TOPIC, TABLE_ROUTED,
};

/// The name of the member channel of `topic` in channel `channel` (`table = "{topic}"`):
/// `<channel>.<topic>`, the topic as Kafka names it. A name no configured channel can have (`.`
/// and capitals are outside channel names), and one per topic even when two topics map to one
/// table name (`a.b`, `a_b`): the two members are then two channels, and the table's ownership
/// (`floe.channel`) lets only the first write it, whichever worker saw which topic first.
/// A routed table's member (`table = "{route}"`) is named `<channel>.<table>` the same way.
pub fn member_name(channel: &str, topic: &str) -> String {
    format!("{channel}.{topic}")
}

/// The longest member channel name (`<channel>.<topic>`): it names the member's data files
/// (`<member>-<uuid>-<n>.parquet`, within a file system's 255-byte names) and its local DLQ
/// directory.
pub const MAX_MEMBER_NAME: usize = 200;

/// The Iceberg table name of topic `topic` in a channel with `table = "{topic}"`: lowercased,
/// every character outside `a-z 0-9 _` replaced by `_` (Kafka topic names are `A-Z a-z 0-9 . _
/// -`, Iceberg names here `a-z 0-9 _`), so `Orders.EU-1` is `orders_eu_1`. Two topics may map
/// to one name (`a.b`, `a_b`): the runtime refuses the second (docs/routing.md).
pub fn table_of_topic(topic: &str) -> String {
    topic
        .chars()
        .map(|c| match c {
            'a'..='z' | '0'..='9' | '_' => c,
            'A'..='Z' => c.to_ascii_lowercase(),
            _ => '_',
        })
        .collect()
}

impl ChannelConfig {
    /// Whether the channel runs as member channels, one per table: `table = "{topic}"` or
    /// `table = "{route}"` (docs/routing.md).
    pub fn has_members(&self) -> bool {
        self.is_table_per_topic() || self.is_routed()
    }

    /// The member channel of `topic` in a channel with `table = "{topic}"`: named
    /// `<channel>.<topic>` ([`member_name`]), reading `topic` alone, into table
    /// [`table_of_topic`]`(topic)` of the channel's namespace, with `{topic}` of a registry
    /// `subject` replaced by the topic. Each member is a channel of its own in the lease store:
    /// its leases, committer lease and epoch, state and checkpoints (in its table). A channel
    /// that is not per topic is returned unchanged.
    pub fn member(&self, topic: &str) -> ChannelConfig {
        if !self.is_table_per_topic() {
            return self.clone();
        }
        let table = table_of_topic(topic);
        let mut member = self.clone();
        member.name = member_name(&self.name, topic);
        if let SourceConfig::Kafka(k) = &mut member.source {
            k.topics = TopicSelection::One(topic.to_string());
        }
        if let DestinationConfig::Iceberg(d) = &mut member.destination {
            d.table = table;
        }
        if let Some(SchemaConfig::Confluent(c)) = &mut member.schema {
            c.subject = c.subject.replace(TABLE_PER_TOPIC, topic);
        }
        member
    }

    /// The member channel of `table` in a channel with `table = "{route}"`: named
    /// `<channel>.<table>` ([`member_name`]), reading the channel's whole source into `table`
    /// of its namespace and keeping the route (the member keeps only its table's records). A
    /// channel of its own in the lease store: its leases, committer lease and epoch, state
    /// and checkpoints (in its table). A channel that is not routed is returned unchanged.
    pub fn route_member(&self, table: &str) -> ChannelConfig {
        if !self.is_routed() {
            return self.clone();
        }
        let mut member = self.clone();
        member.name = member_name(&self.name, table);
        if let DestinationConfig::Iceberg(d) = &mut member.destination {
            d.table = table.to_string();
        }
        member
    }

    /// The route of a member channel of a channel with `table = "{route}"`, with the member's
    /// own table: `None` for any other channel (and for the routed channel itself, whose table
    /// is `{route}`).
    pub fn member_route(&self) -> Option<(&RouteConfig, &str)> {
        match &self.destination {
            DestinationConfig::Iceberg(d) if d.table != TABLE_ROUTED => {
                d.route.as_ref().map(|r| (r, d.table.as_str()))
            }
            _ => None,
        }
    }

    /// The name of the routed channel (`table = "{route}"`) whose member this channel is, the
    /// inverse of [`ChannelConfig::route_member`]: `None` for any other channel.
    pub fn route_parent(&self) -> Option<&str> {
        let (_, table) = self.member_route()?;
        self.name.strip_suffix(table)?.strip_suffix('.')
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topic_names_map_to_iceberg_table_names() {
        assert_eq!(table_of_topic("orders"), "orders");
        assert_eq!(table_of_topic("Orders.EU-1"), "orders_eu_1");
        assert_eq!(table_of_topic("a.b"), table_of_topic("a_b"));
        assert_eq!(table_of_topic("__x-Y"), "__x_y");
    }
}
