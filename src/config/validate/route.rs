//! Validation of the routing keys of `[channel.destination]` (`table = "{route}"`:
//! `route_field`, `routes`, `unroutable`; docs/routing.md).

use std::collections::BTreeMap;

use super::{quote_key, Checker};

impl Checker<'_> {
    /// `route_field`, `routes` and `unroutable`: required with `table = "{route}"` (1 to
    /// `max_tables` routes to valid table names), refused without it.
    pub(super) fn route(
        &mut self,
        p: &str,
        table: Option<&str>,
        (field, routes, unroutable): (
            Option<String>,
            Option<BTreeMap<String, String>>,
            Option<String>,
        ),
        max_tables: Option<u32>,
        s3tables: bool,
    ) -> Option<Option<crate::config::RouteConfig>> {
        if table != Some(crate::config::TABLE_ROUTED) {
            let mut ok = true;
            for (given, key) in [
                (field.is_some(), "route_field"),
                (routes.is_some(), "routes"),
                (unroutable.is_some(), "unroutable"),
            ] {
                if given {
                    self.error(
                        format!("{p}.{key}"),
                        format!("applies only to {p}.table = \"{{route}}\" (a table per value of route_field)"),
                    );
                    ok = false;
                }
            }
            return ok.then_some(None);
        }
        let lower = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_';
        let table_name = |v: &mut Self, path: String, t: String| {
            let t = v.name(&path, t, 255, "a-z 0-9 _", lower)?;
            if s3tables {
                v.s3tables_name(&path, t)
            } else {
                Some(t)
            }
        };
        let field = match field {
            Some(f) if !f.trim().is_empty() => Some(f),
            Some(_) => {
                self.error(format!("{p}.route_field"), "must not be empty");
                None
            }
            None => {
                self.error(
                    format!("{p}.route_field"),
                    format!("required with {p}.table = \"{{route}}\": the top-level field whose value picks each record's table"),
                );
                None
            }
        };
        let mut checked = Some(BTreeMap::new());
        match routes {
            None => {
                self.error(
                    format!("{p}.routes"),
                    format!("required with {p}.table = \"{{route}}\": route value -> table, e.g. {{ eu = \"events_eu\" }}"),
                );
                checked = None;
            }
            Some(routes) => {
                if routes.is_empty() {
                    self.error(
                        format!("{p}.routes"),
                        "must map at least one value to a table",
                    );
                    checked = None;
                }
                for (value, t) in routes {
                    let path = format!("{p}.routes.{}", quote_key(&value));
                    match table_name(self, path, t) {
                        Some(t) => {
                            if let Some(c) = checked.as_mut() {
                                c.insert(value, t);
                            }
                        }
                        None => checked = None,
                    }
                }
            }
        }
        let unroutable = match unroutable.as_deref() {
            None | Some("dlq") => Some(crate::config::Unroutable::Dlq),
            Some(_) => table_name(
                self,
                format!("{p}.unroutable"),
                unroutable.unwrap_or_default(),
            )
            .map(crate::config::Unroutable::Table),
        };
        let route = crate::config::RouteConfig {
            field: field?,
            routes: checked?,
            unroutable: unroutable?,
        };
        let num_tables = route.tables().len();
        if let Some(max) = max_tables {
            if num_tables > max as usize {
                self.error(
                    format!("{p}.routes"),
                    format!("routes to {num_tables} tables (with the unroutable table), more than {p}.max_tables = {max}"),
                );
                return None;
            }
        }
        Some(Some(route))
    }
}

#[cfg(test)]
mod tests {
    use crate::config::tests::{
        aws_config, errors, parse, refused, replaced, routed, with, MINIMAL, ROUTES, V1,
    };
    use crate::config::*;

    #[test]
    fn route_keys_are_refused_naming_the_key() {
        let paths =
            |text: &str| -> Vec<String> { errors(text).into_iter().map(|e| e.path).collect() };
        assert_eq!(
            paths(&routed("")),
            [
                "channel[0].destination.route_field",
                "channel[0].destination.routes"
            ]
        );
        refused(
            &routed("route_field = \"region\"\nroutes = {}"),
            "channel[0].destination.routes",
            "at least one",
        );
        refused(
            &routed("route_field = \" \"\nroutes = { eu = \"events_eu\" }"),
            "channel[0].destination.route_field",
            "must not be empty",
        );
        refused(
            &routed(
                "route_field = \"region\"\nroutes = { eu = \"events_eu\", \"e u\" = \"Events-EU\" }",
            ),
            "channel[0].destination.routes.\"e u\"",
            "not a valid name",
        );
        refused(
            &routed(&format!("{ROUTES}\nunroutable = \"Other\"")),
            "channel[0].destination.unroutable",
            "not a valid name",
        );
        refused(
            &routed(&format!("{ROUTES}\nmax_tables = 2")),
            "channel[0].destination.routes",
            "routes to 3 tables (with the unroutable table), more than channel[0].destination.max_tables = 2",
        );
        // Without table = "{route}" (a plain table, or a table per topic), each key is refused.
        for (line, key) in [
            ("route_field = \"region\"", "route_field"),
            ("routes = { eu = \"events_eu\" }", "routes"),
            ("unroutable = \"dlq\"", "unroutable"),
        ] {
            refused(
                &with("[channel.destination]", line),
                &format!("channel[0].destination.{key}"),
                "applies only to channel[0].destination.table = \"{route}\"",
            );
            refused(
                &replaced(
                    "table = \"events\"",
                    &format!("table = \"{{topic}}\"\n{line}"),
                ),
                &format!("channel[0].destination.{key}"),
                "applies only to",
            );
        }
        // The route value is read from JSON documents (json, gsr_json, json_sr) and, by the
        // writer schema of each record, from Avro records and Protobuf messages; not yet from
        // GSR Avro records.
        let framed = |format: &str| {
            routed(ROUTES)
                .replacen(
                    "file = \"event.schema.json\"",
                    "registry_url = \"http://r\"",
                    1,
                )
                .replacen(
                    "[channel.schema]",
                    &format!("[channel.record]\nformat = \"{format}\"\n[channel.schema]"),
                    1,
                )
        };
        for format in ["json_sr", "avro", "protobuf"] {
            assert!(
                parse(&framed(format)).unwrap().channels[0].is_routed(),
                "{format}"
            );
        }
        let gsr = routed(ROUTES)
            .replacen(
                "file = \"event.schema.json\"",
                &format!("file = \"v1.json\"\nversions = {{ \"{V1}\" = \"v1.json\" }}"),
                1,
            )
            .replacen(
                "[channel.schema]",
                "[channel.record]\nformat = \"gsr_json\"\n[channel.schema]",
                1,
            );
        assert!(parse(&gsr).unwrap().channels[0].is_routed());
        let gsr_avro = errors(&gsr.replacen("format = \"gsr_json\"", "format = \"gsr_avro\"", 1));
        assert!(
            gsr_avro.iter().any(|e| e.path == "channel[0].record.format"
                && e.message
                    .contains("\"gsr_avro\" cannot be routed by a field yet")),
            "{gsr_avro:#?}"
        );
    }

    #[test]
    fn a_route_field_the_schema_file_lacks_is_refused_naming_the_key() {
        let dir = tempfile::tempdir().unwrap();
        let schema = dir.path().join("s.json");
        std::fs::write(
            &schema,
            r#"{"type":"object","properties":{"event_time":{"type":"string","format":"date-time"},"region":{"type":"string"},"score":{"type":"number"},"user":{"type":"object","properties":{"zone":{"type":"string"}}}},"required":["event_time"]}"#,
        )
        .unwrap();
        let check = |field: &str| {
            let text = routed(&ROUTES.replace("\"region\"", &format!("\"{field}\"")))
                .replace("event.schema.json", &schema.display().to_string());
            let config = parse(&text).unwrap();
            crate::channel::schema_file::check_schema(0, &config.channels[0]).map(|_| ())
        };
        assert!(check("region").is_ok());
        for (field, needle) in [
            ("zone", "\"zone\" is not a top-level field of the schema"),
            (
                "score",
                "\"score\" is a double: a route field is a string, an integer or a boolean",
            ),
        ] {
            let e = check(field).unwrap_err();
            assert_eq!(e.path, "channel[0].destination.route_field", "{e:?}");
            assert!(e.message.contains(needle), "{e:?}");
        }
    }

    #[test]
    fn a_routed_table_another_channel_writes_is_refused_and_two_routed_channels_may_share_a_namespace(
    ) {
        let plain = &MINIMAL[MINIMAL.find("[[channel]]").unwrap()..];
        let plain = plain
            .replace("name = \"events\"", "name = \"plain\"")
            .replace("table = \"events\"", "table = \"events_us\"");
        refused(
            &format!("{}{plain}", routed(ROUTES)),
            "channel[1].destination.table",
            "table quickstart.events_us is already written by channel[0] \"events\"",
        );
        let routed_text = routed(ROUTES);
        let second = &routed_text[routed_text.find("[[channel]]").unwrap()..];
        let second = second.replace("name = \"events\"", "name = \"other\"");
        let clashes = errors(&format!("{routed_text}{second}"));
        assert_eq!(clashes.len(), 3, "one per table: {clashes:#?}");
        assert!(clashes
            .iter()
            .all(|e| e.path == "channel[1].destination.routes"));
        assert!(clashes[0]
            .message
            .contains("table quickstart.events_ap is already written by channel[0] \"events\""));
        let disjoint = second
            .replace("events_eu", "x_eu")
            .replace("events_us", "x_us")
            .replace("events_ap", "x_ap");
        assert!(parse(&format!("{routed_text}{disjoint}")).is_ok());
    }

    #[test]
    fn a_routed_kinesis_channel_reads_with_a_consumer_per_member() {
        let efo = aws_config()
            .replacen(
                "poll_interval = \"500ms\"",
                "read_mode = \"enhanced_fan_out\"",
                1,
            )
            .replacen(
                "table = \"events\"",
                &format!("table = \"{{route}}\"\n{ROUTES}"),
                1,
            );
        let config = parse(&efo).unwrap();
        let member = config.channels[0].route_member("events_eu");
        let SourceConfig::Kinesis(k) = &member.source else {
            panic!()
        };
        assert_eq!(
            k.read_mode.consumer_name(&member.name).as_deref(),
            Some("floe-events.events_eu")
        );
        refused(
            &efo.replacen("read_mode", "consumer_name = \"c\"\nread_mode", 1),
            "channel[0].source.consumer_name",
            "each table's member channel registers its own consumer",
        );
        let long = "t".repeat(125);
        refused(
            &efo.replacen("eu = \"events_eu\"", &format!("eu = \"{long}\""), 1),
            "channel[0].destination.routes",
            "at most 128 characters: this channel's longest is 137",
        );
        // Polling: any table name.
        let polling = efo.replacen("read_mode = \"enhanced_fan_out\"", "", 1);
        assert!(
            parse(&polling.replacen("eu = \"events_eu\"", &format!("eu = \"{long}\""), 1)).is_ok()
        );
    }
}
