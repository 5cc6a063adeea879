//! Validation of change data capture: `mode`, `key` and `format_version` of
//! `[channel.destination]`, and the envelope's rules across a channel's sections (a JSON
//! format, a source with message keys, the row's schema, no routing by a field). The key's
//! columns are checked against the schema where the schema is read ([`crate::config::cdc::check_key`]).

use super::Checker;
use crate::config::file::WholeNumber;
use crate::config::{
    Envelope, RecordConfig, RecordFormat, SchemaConfig, SourceConfig, TableFormatVersion,
    WriteMode, TABLE_ROUTED,
};

/// `mode`, `key` and `format_version` of one Iceberg destination, validated.
pub(super) struct TableMode {
    pub mode: WriteMode,
    pub key: Vec<String>,
    pub format_version: TableFormatVersion,
}

impl Checker<'_> {
    /// `mode` (default append), `key` (required with upsert, refused with append) and
    /// `format_version` (2 or 3) of the destination at `p` writing `table`.
    pub(super) fn table_mode(
        &mut self,
        p: &str,
        table: &str,
        mode: Option<WriteMode>,
        key: Option<Vec<String>>,
        format_version: Option<WholeNumber>,
    ) -> Option<TableMode> {
        let format_version =
            match self.number(&format!("{p}.format_version"), format_version, 2u8, 2..=3) {
                Some(2) => Some(TableFormatVersion::V2),
                Some(_) => Some(TableFormatVersion::V3),
                None => None,
            };
        let mode = mode.unwrap_or_default();
        let key = match (mode, key) {
            (WriteMode::Append, None) => Some(Vec::new()),
            (WriteMode::Append, Some(_)) => {
                self.error(
                    format!("{p}.key"),
                    format!("applies only with {p}.mode = \"upsert\" (an append table has no key)"),
                );
                None
            }
            (WriteMode::Upsert, None) => {
                self.error(
                    format!("{p}.key"),
                    "required with mode = \"upsert\": the key columns, e.g. key = [\"id\"]",
                );
                None
            }
            (WriteMode::Upsert, Some(key)) => self.key_columns(p, key),
        };
        if mode == WriteMode::Upsert && table == TABLE_ROUTED {
            self.error(
                format!("{p}.mode"),
                "\"upsert\" is not built for table = \"{route}\" yet: give each table its own channel",
            );
            return None;
        }
        Some(TableMode {
            mode,
            key: key?,
            format_version: format_version?,
        })
    }

    /// The key's column names: at least one, none empty, none twice.
    fn key_columns(&mut self, p: &str, key: Vec<String>) -> Option<Vec<String>> {
        if key.is_empty() {
            self.error(
                format!("{p}.key"),
                "must name at least one column, e.g. key = [\"id\"]",
            );
            return None;
        }
        for (i, name) in key.iter().enumerate() {
            if name.trim().is_empty() {
                self.error(format!("{p}.key"), format!("column {i} is empty"));
                return None;
            }
            if key[..i].contains(name) {
                self.error(format!("{p}.key"), format!("\"{name}\" is listed twice"));
                return None;
            }
        }
        Some(key)
    }

    /// The envelope's rules across a channel's sections: a JSON format, a Kafka source for
    /// `"upsert"` (its deletes are tombstones of a message key), the row's schema as a file for
    /// `"debezium"`, and no routing by a field. Returns whether they hold.
    pub(super) fn envelope_rules(
        &mut self,
        p: &str,
        record: &RecordConfig,
        source: Option<&SourceConfig>,
        schema: Option<&SchemaConfig>,
        routed: bool,
    ) -> bool {
        let envelope = record.envelope;
        if envelope == Envelope::None {
            return true;
        }
        let key = format!("{p}.record.envelope");
        let json = matches!(
            record.format,
            RecordFormat::Json | RecordFormat::JsonSr | RecordFormat::GsrJson
        );
        if !json {
            self.error(
                key,
                format!(
                    "\"{}\" cannot be decoded from record.format = \"{}\" yet: envelopes are read from the JSON formats (\"json\", \"json_sr\", \"gsr_json\")",
                    envelope.as_str(),
                    record.format.as_str()
                ),
            );
            return false;
        }
        if envelope == Envelope::Upsert && matches!(source, Some(SourceConfig::Kinesis(_))) {
            self.error(
                key,
                "\"upsert\" needs a Kafka source: its deletes are tombstones (a message key without a value), which Kinesis has not",
            );
            return false;
        }
        if envelope == Envelope::Debezium && record.format == RecordFormat::JsonSr {
            self.error(
                key,
                "\"debezium\" cannot be decoded from record.format = \"json_sr\" yet: Debezium's JSON Schema converter registers the envelope's schema, and floe does not take the row's schema from it; use Kafka Connect's JSON converter (format = \"json\") with the row's schema as [channel.schema] file",
            );
            return false;
        }
        let file = matches!(
            schema,
            None | Some(SchemaConfig::File(_) | SchemaConfig::FileVersions { .. })
        );
        if envelope == Envelope::Debezium && !file {
            self.error(
                key,
                "\"debezium\" needs the row's schema as [channel.schema] file for now: a registry subject of Debezium's converter holds the envelope's schema, not the row's",
            );
            return false;
        }
        if routed {
            self.error(
                key,
                "not with table = \"{route}\" yet: the route field is read from the record, not from the change event's row",
            );
            return false;
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use crate::config::tests::{iceberg, parse, refused, replaced};
    use crate::config::{Envelope, TableFormatVersion, WriteMode};

    fn upsert(key: &str) -> String {
        replaced(
            "partition_field = \"event_time\"",
            &format!("partition_field = \"event_time\"\nmode = \"upsert\"\n{key}"),
        )
    }

    #[test]
    fn defaults_are_append_version_2_and_no_envelope() {
        let config = parse(&replaced("", "")).unwrap();
        let d = iceberg(&config);
        assert_eq!(d.mode, WriteMode::Append);
        assert!(d.key.is_empty());
        assert_eq!(d.format_version, TableFormatVersion::V2);
        assert_eq!(config.channels[0].record.envelope, Envelope::None);
    }

    #[test]
    fn an_upsert_table_takes_its_key_and_version() {
        let config = parse(&upsert("key = [\"id\", \"region\"]\nformat_version = 3")).unwrap();
        let d = iceberg(&config);
        assert_eq!(d.mode, WriteMode::Upsert);
        assert_eq!(d.key, ["id", "region"]);
        assert_eq!(d.format_version, TableFormatVersion::V3);
    }

    #[test]
    fn upsert_needs_a_key_and_append_takes_none() {
        refused(
            &upsert(""),
            "channel[0].destination.key",
            "required with mode = \"upsert\"",
        );
        refused(
            &upsert("key = []"),
            "channel[0].destination.key",
            "at least one column",
        );
        refused(
            &upsert("key = [\"id\", \"id\"]"),
            "channel[0].destination.key",
            "listed twice",
        );
        refused(
            &replaced(
                "partition_field = \"event_time\"",
                "partition_field = \"event_time\"\nkey = [\"id\"]",
            ),
            "channel[0].destination.key",
            "applies only with channel[0].destination.mode = \"upsert\"",
        );
    }

    #[test]
    fn unknown_values_are_refused_naming_the_key() {
        refused(
            &replaced(
                "partition_field = \"event_time\"",
                "partition_field = \"event_time\"\nmode = \"merge\"",
            ),
            "channel[0].destination.mode",
            "merge",
        );
        refused(
            &upsert("key = [\"id\"]\nformat_version = 1"),
            "channel[0].destination.format_version",
            "below the minimum 2",
        );
        refused(
            &replaced(
                "[channel.schema]",
                "[channel.record]\nenvelope = \"maxwell\"\n[channel.schema]",
            ),
            "channel[0].record.envelope",
            "maxwell",
        );
    }

    fn envelope(envelope: &str, format: &str) -> String {
        replaced(
            "[channel.schema]",
            &format!("[channel.record]\nenvelope = \"{envelope}\"\nformat = \"{format}\"\n[channel.schema]"),
        )
    }

    #[test]
    fn an_envelope_needs_a_json_format_and_the_rows_schema() {
        parse(&envelope("debezium", "json")).unwrap();
        parse(&envelope("upsert", "json")).unwrap();
        refused(
            &envelope("debezium", "avro").replace(
                "file = \"event.schema.json\"",
                "registry_url = \"http://localhost:8081\"",
            ),
            "channel[0].record.envelope",
            "cannot be decoded from record.format = \"avro\" yet",
        );
        refused(
            &envelope("debezium", "json_sr").replace(
                "file = \"event.schema.json\"",
                "registry_url = \"http://localhost:8081\"",
            ),
            "channel[0].record.envelope",
            "cannot be decoded from record.format = \"json_sr\" yet",
        );
        refused(
            &envelope("debezium", "gsr_json").replace(
                "file = \"event.schema.json\"",
                "glue_schema_arn = \"arn:aws:glue:eu-west-1:123456789012:schema/r/s\"",
            ),
            "channel[0].record.envelope",
            "needs the row's schema as [channel.schema] file",
        );
        // An upsert envelope's value is the row: its registry subject is the row's.
        parse(&envelope("upsert", "json_sr").replace(
            "file = \"event.schema.json\"",
            "registry_url = \"http://localhost:8081\"",
        ))
        .unwrap();
    }

    #[test]
    fn upsert_envelope_needs_kafka_and_routing_takes_no_cdc() {
        let kinesis = envelope("upsert", "json").replace(
            "kind = \"kafka\"\nbootstrap_servers = \"localhost:9092\"\ntopic = \"events\"",
            "kind = \"kinesis\"\nstream_name = \"events\"",
        );
        refused(
            &kinesis,
            "channel[0].record.envelope",
            "needs a Kafka source",
        );
        let routed =
            "table = \"{route}\"\nroute_field = \"region\"\nroutes = { eu = \"events_eu\" }";
        refused(
            &upsert("key = [\"id\"]").replace("table = \"events\"", routed),
            "channel[0].destination.mode",
            "not built for table = \"{route}\"",
        );
        refused(
            &envelope("debezium", "json").replace("table = \"events\"", routed),
            "channel[0].record.envelope",
            "not with table = \"{route}\"",
        );
    }

    #[test]
    fn a_raw_destination_takes_no_envelope() {
        let raw = crate::config::tests::raw("") + "[channel.record]\nenvelope = \"debezium\"\n";
        refused(
            &raw,
            "channel[0].record",
            "not allowed with destination.kind = \"s3\"",
        );
    }
}
