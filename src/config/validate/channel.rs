//! Validation of one `[[channel]]` from its sections, the rules across its sections (a raw
//! destination takes no schema, the buffer holds the largest record, …), and the rules across
//! channels (unique names, one channel per table).

use std::collections::HashMap;

use super::schema::default_subject;
use super::Checker;
use crate::config::file::{ChannelSection, SchemaSection, Section};
use crate::config::units::format_size;
use crate::config::{
    CatalogConfig, ChannelConfig, DestinationConfig, KinesisReadMode, RecordConfig, RecordFormat,
    SchemaConfig, SchemaEvolution, SourceConfig, WriteMode, ENV_REGISTRY_BASIC_AUTH,
    ENV_REGISTRY_BEARER_TOKEN, TABLE_PER_TOPIC,
};

impl Checker<'_> {
    /// One `[[channel]]` at `channel[i]`: its sections in the order of the file, then the rules
    /// across them ([`Self::channel_rules`]).
    pub(super) fn channel(
        &mut self,
        i: usize,
        section: Section<ChannelSection>,
    ) -> Option<ChannelConfig> {
        let p = format!("channel[{i}]");
        let c = self.section(section, &p)?;
        let name = self.name(&format!("{p}.name"), c.name, 64, "a-z 0-9 _ -", |c| {
            c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '_' | '-')
        });
        let source = self.source(&format!("{p}.source"), c.source);
        let record_present = c.record.is_present();
        let record = self.record(&format!("{p}.record"), c.record);
        let format = record.as_ref().map(|r| r.format);
        let raw = c.destination.is_present() && self.is_raw(&c.destination);
        let destination = self.destination(&format!("{p}.destination"), c.destination);
        let (schema, dlq) = if raw {
            self.refuse_sections_of_raw(
                &p,
                [record_present, c.schema.is_present(), c.dlq.is_present()],
            );
            (Some(None), Some(None))
        } else {
            let per_topic = matches!(&destination, Some(DestinationConfig::Iceberg(d)) if d.table == TABLE_PER_TOPIC);
            let subject = default_subject(&source, per_topic);
            let schema = self.channel_schema(&p, c.schema, format, subject);
            let dlq = if c.dlq.is_present() {
                self.dlq(&format!("{p}.dlq"), c.dlq).map(Some)
            } else {
                self.missing_section(&p, "dlq");
                None
            };
            (schema, dlq)
        };
        let parts = ChannelParts {
            name: name.as_deref(),
            source: source.as_ref(),
            record: record.as_ref(),
            schema: schema.as_ref().and_then(Option::as_ref),
            destination: destination.as_ref(),
        };
        if !self.channel_rules(&p, parts) {
            return None;
        }
        Some(ChannelConfig {
            name: name?,
            source: source?,
            record: record?,
            schema: schema?,
            destination: destination?,
            dlq: dlq?,
        })
    }

    /// A raw destination delivers every record unvalidated: no schema, nothing to reject.
    /// Refuses `[channel.record]`, `[channel.schema]` and `[channel.dlq]` where `present`.
    fn refuse_sections_of_raw(&mut self, p: &str, present: [bool; 3]) {
        let sections = [
            ("record", "records are delivered as read, whatever their framing or size"),
            ("schema", "records are delivered as read, not validated"),
            ("dlq", "every record is delivered (raw means raw); a failed delivery is retried, never dropped"),
        ];
        for (present, (key, why)) in present.into_iter().zip(sections) {
            if present {
                self.error(
                    format!("{p}.{key}"),
                    format!(
                        "not allowed with destination.kind = \"s3\": {why}; remove [channel.{key}]"
                    ),
                );
            }
        }
    }

    /// A section an Iceberg destination needs that the channel lacks.
    fn missing_section(&mut self, p: &str, key: &str) {
        self.error(
            format!("{p}.{key}"),
            format!("missing [channel.{key}]: required for an Iceberg destination"),
        );
    }

    /// `[channel.schema]` of a channel with an Iceberg destination (required), registry
    /// credentials refused by name first.
    fn channel_schema(
        &mut self,
        p: &str,
        mut section: Section<SchemaSection>,
        format: Option<RecordFormat>,
        default_subject: Option<String>,
    ) -> Option<Option<SchemaConfig>> {
        if !section.is_present() {
            self.missing_section(p, "schema");
            return None;
        }
        // Credentials never come from the file: named, with the variable to use.
        for key in section.take_keys(&["basic_auth", "username", "password", "bearer_token"]) {
            let var = if key == "bearer_token" {
                ENV_REGISTRY_BEARER_TOKEN
            } else {
                ENV_REGISTRY_BASIC_AUTH
            };
            self.error(
                format!("{p}.schema.{key}"),
                format!(
                    "credentials are never read from the file: set the environment variable {var}"
                ),
            );
        }
        self.section(section, &format!("{p}.schema"))
            .and_then(|s| self.schema(&format!("{p}.schema"), s, format, default_subject))
            .map(Some)
    }

    /// The rules across one channel's sections, each refusing the channel with the key path
    /// to fix (the first broken one only). Returns whether they all hold.
    fn channel_rules(&mut self, p: &str, c: ChannelParts<'_>) -> bool {
        if let (Some(record), Some(DestinationConfig::Iceberg(d))) = (c.record, c.destination) {
            if d.buffer_size < record.max_record_size {
                self.error(
                    format!("{p}.destination.buffer_size"),
                    format!(
                        "{} is smaller than record.max_record_size ({}): the largest record must fit in the buffer",
                        format_size(d.buffer_size),
                        format_size(record.max_record_size)
                    ),
                );
                return false;
            }
        }
        if let (Some(schema), Some(DestinationConfig::Iceberg(d))) = (c.schema, c.destination) {
            if schema.evolution() == SchemaEvolution::Compatible
                && matches!(d.catalog, CatalogConfig::S3Tables(_))
            {
                self.error(
                    format!("{p}.schema.evolution"),
                    "\"compatible\" needs a catalog floe commits schema changes to (sql, rest or glue); S3 Tables has no compare-and-swap floe can use",
                );
                return false;
            }
        }
        if let Some(DestinationConfig::Iceberg(d)) = c.destination {
            if d.mode == WriteMode::Upsert && matches!(d.catalog, CatalogConfig::S3Tables(_)) {
                self.error(
                    format!("{p}.destination.mode"),
                    "\"upsert\" needs a catalog floe commits row deltas to (sql, rest or glue); S3 Tables has no compare-and-swap floe can use",
                );
                return false;
            }
        }
        // A raw object's key names its stream (`{topic}`): one topic per raw channel.
        if let (Some(DestinationConfig::S3(_)), Some(SourceConfig::Kafka(k))) =
            (c.destination, c.source)
        {
            if k.topics.single().is_none() {
                self.error(
                    format!("{p}.source.topic"),
                    "a raw S3 destination reads one topic (its object keys name it): use `topic`, and a channel per topic",
                );
                return false;
            }
        }
        if let Some(DestinationConfig::Iceberg(d)) = c.destination {
            if d.table == TABLE_PER_TOPIC && matches!(c.source, Some(SourceConfig::Kinesis(_))) {
                self.error(
                    format!("{p}.destination.table"),
                    "\"{topic}\" (a table per topic) needs a Kafka source",
                );
                return false;
            }
        }
        if let Some(record) = c.record {
            let routed =
                matches!(c.destination, Some(DestinationConfig::Iceberg(d)) if d.route.is_some());
            if !self.envelope_rules(p, record, c.source, c.schema, routed) {
                return false;
            }
        }
        self.routed_channel_rules(p, c)
    }

    /// The rules of a channel with `table = "{route}"` across its sections: a format whose
    /// route value floe reads (the JSON formats from the document, `avro` and `protobuf` by the
    /// writer schema of each record's schema id; docs/routing.md) and, with enhanced fan-out,
    /// a consumer per member (`floe-<channel>.<table>`, at most 128 characters).
    fn routed_channel_rules(&mut self, p: &str, c: ChannelParts<'_>) -> bool {
        let (Some(DestinationConfig::Iceberg(d)), Some(record)) = (c.destination, c.record) else {
            return true;
        };
        let readable = matches!(
            record.format,
            RecordFormat::Json
                | RecordFormat::GsrJson
                | RecordFormat::JsonSr
                | RecordFormat::Avro
                | RecordFormat::Protobuf
        );
        // Enhanced fan-out: each member registers its own consumer, `floe-<member>`.
        if let (Some(route), Some(SourceConfig::Kinesis(k))) = (&d.route, c.source) {
            if let KinesisReadMode::EnhancedFanOut { consumer_name } = &k.read_mode {
                if consumer_name.is_some() {
                    self.error(
                        format!("{p}.source.consumer_name"),
                        "not with table = \"{route}\": each table's member channel registers its own consumer, floe-<channel>.<table>",
                    );
                    return false;
                }
                let longest = route.tables().into_iter().map(str::len).max().unwrap_or(0);
                let consumer_len = "floe-".len() + c.name.map_or(0, str::len) + 1 + longest;
                if consumer_len > 128 {
                    self.error(
                        format!("{p}.destination.routes"),
                        format!("with read_mode = \"enhanced_fan_out\" each table's consumer is floe-<channel>.<table>, at most 128 characters: this channel's longest is {consumer_len}"),
                    );
                    return false;
                }
            }
        }
        if d.route.is_some() && !readable {
            self.error(
                format!("{p}.record.format"),
                format!(
                    "\"{}\" cannot be routed by a field yet: table = \"{{route}}\" needs \"json\", \"gsr_json\", \"json_sr\", \"avro\" or \"protobuf\"",
                    record.format.as_str()
                ),
            );
            return false;
        }
        true
    }

    /// Rules across channels: unique names; no two channels writing the same table.
    pub(super) fn across_channels(&mut self, channels: &[Option<ChannelConfig>]) {
        let mut names: HashMap<&str, usize> = HashMap::new();
        let mut tables: HashMap<(String, &str, &str), usize> = HashMap::new();
        let mut raw_buckets: HashMap<&str, (usize, bool)> = HashMap::new();
        for (i, channel) in channels.iter().enumerate() {
            let Some(channel) = channel else { continue };
            if let Some(first) = names.insert(&channel.name, i) {
                names.insert(&channel.name, first);
                self.error(
                    format!("channel[{i}].name"),
                    format!(
                        "duplicate channel name \"{}\" (also channel[{first}])",
                        channel.name
                    ),
                );
            }
            let d = match &channel.destination {
                DestinationConfig::Iceberg(d) => d,
                DestinationConfig::S3(raw) => {
                    // Channels sharing a bucket must name themselves in their keys.
                    if let Some((first, other)) = raw_buckets.get(raw.location.bucket.as_str()) {
                        if !raw.key_template.has_channel() || !*other {
                            self.error(
                                format!("channel[{i}].destination.key_template"),
                                format!(
                                    "bucket {} is also written by channel[{first}]: every key template of a shared bucket must contain {{channel}}",
                                    raw.location.bucket
                                ),
                            );
                        }
                    } else {
                        raw_buckets.insert(
                            raw.location.bucket.as_str(),
                            (i, raw.key_template.has_channel()),
                        );
                    }
                    continue;
                }
            };
            // A routed channel writes each of its routes' tables (and its default table).
            let (written, key_path): (Vec<&str>, &str) = match &d.route {
                Some(route) => (route.tables().into_iter().collect(), "routes"),
                None => (vec![d.table.as_str()], "table"),
            };
            for table in written {
                let key = (d.catalog.identity(), d.namespace.as_str(), table);
                if let Some(first) = tables.get(&key) {
                    self.error(
                        format!("channel[{i}].destination.{key_path}"),
                        format!(
                            "table {}.{table} is already written by channel[{first}] \"{}\": each table has one channel",
                            d.namespace,
                            channels[*first].as_ref().map_or("", |c| c.name.as_str())
                        ),
                    );
                } else {
                    tables.insert(key, i);
                }
            }
        }
    }
}

/// What the rules across one channel's sections read: each section as validated, `None` where
/// it was refused (a rule about it is then not checked).
#[derive(Clone, Copy)]
struct ChannelParts<'a> {
    name: Option<&'a str>,
    source: Option<&'a SourceConfig>,
    record: Option<&'a RecordConfig>,
    schema: Option<&'a SchemaConfig>,
    destination: Option<&'a DestinationConfig>,
}

#[cfg(test)]
mod tests {
    use crate::config::tests::{parse, raw, refused, replaced, MINIMAL};

    #[test]
    fn buffer_must_hold_the_largest_record() {
        let text = replaced(
            "[channel.schema]",
            "[channel.record]\nmax_record_size = \"10MiB\"\n[channel.schema]",
        )
        .replace("partition_field", "buffer_size = \"8MiB\"\npartition_field");
        refused(
            &text,
            "channel[0].destination.buffer_size",
            "8MiB is smaller than record.max_record_size (10MiB)",
        );
    }

    #[test]
    fn channel_names_are_checked_and_unique() {
        refused(
            &replaced("name = \"events\"", "name = \"Events\""),
            "channel[0].name",
            "a-z 0-9 _ -",
        );
        let channel = &MINIMAL[MINIMAL.find("[[channel]]").unwrap()..];
        let second = channel.replace("table = \"events\"", "table = \"events_copy\"");
        refused(
            &format!("{MINIMAL}{second}"),
            "channel[1].name",
            "duplicate channel name \"events\" (also channel[0])",
        );
    }

    #[test]
    fn two_channels_writing_one_table_are_refused() {
        let channel = &MINIMAL[MINIMAL.find("[[channel]]").unwrap()..];
        let second = channel.replace("name = \"events\"", "name = \"events_b\"");
        refused(
            &format!("{MINIMAL}{second}"),
            "channel[1].destination.table",
            "table quickstart.events is already written by channel[0] \"events\"",
        );
        // The same table name in another catalog database is another table.
        let other_catalog = second.replace("sqlite:catalog.sqlite", "sqlite:other.sqlite");
        assert!(parse(&format!("{MINIMAL}{other_catalog}")).is_ok());
    }

    #[test]
    fn raw_destination_has_no_schema_and_no_dlq() {
        let schema = raw("") + "[channel.schema]\nfile = \"event.schema.json\"\n";
        refused(&schema, "channel[0].schema", "not validated");
        let dlq = raw("") + "[channel.dlq]\nkind = \"local\"\npath = \"dlq\"\n";
        refused(&dlq, "channel[0].dlq", "never dropped");
        let record = raw("") + "[channel.record]\nmax_record_size = \"1MiB\"\n";
        refused(
            &record,
            "channel[0].record",
            "whatever their framing or size",
        );
        // An Iceberg channel still needs both.
        refused(
            &replaced("[channel.schema]\nfile = \"event.schema.json\"\n", ""),
            "channel[0].schema",
            "required for an Iceberg destination",
        );
    }

    #[test]
    fn raw_channels_sharing_a_bucket_must_name_themselves_in_their_keys() {
        let one = raw("key_template = \"x/{shard}-{first}\"");
        let second = |template: &str| {
            format!(
                "{one}\n[[channel]]\nname = \"other\"\n[channel.source]\nkind = \"kafka\"\nbootstrap_servers = \"localhost:9092\"\ntopic = \"events\"\n[channel.destination]\nkind = \"s3\"\nbucket = \"raw-bucket\"\nkey_template = \"{template}\"\n"
            )
        };
        refused(
            &second("{channel}/"),
            "channel[1].destination.key_template",
            "must contain {channel}",
        );
        refused(
            &second("y/{shard}-{first}"),
            "channel[1].destination.key_template",
            "must contain {channel}",
        );
        let both = raw("key_template = \"{channel}/\"");
        let ok = second("{channel}/").replace(&one, &both);
        parse(&ok).unwrap();
    }

    #[test]
    fn a_table_per_topic_needs_a_kafka_source_and_a_bounded_table_count() {
        refused(
            &replaced("table = \"events\"", "table = \"{topic}\"\nmax_tables = 0"),
            "channel[0].destination.max_tables",
            "",
        );
        let kinesis = replaced(
            "kind = \"kafka\"\nbootstrap_servers = \"localhost:9092\"\ntopic = \"events\"",
            "kind = \"kinesis\"\nstream_name = \"events\"",
        )
        .replacen("table = \"events\"", "table = \"{topic}\"", 1);
        refused(
            &kinesis,
            "channel[0].destination.table",
            "needs a Kafka source",
        );
        refused(
            &replaced("table = \"events\"", "table = \"{stream}\""),
            "channel[0].destination.table",
            "",
        );
    }

    #[test]
    fn a_raw_destination_reads_one_topic() {
        refused(
            &raw("").replacen("topic = \"events\"", "topics = [\"a\", \"b\"]", 1),
            "channel[0].source.topic",
            "a raw S3 destination reads one topic",
        );
    }
}
