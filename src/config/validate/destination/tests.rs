//! Tests of the validation of `[channel.destination]`, each rule pinned with the key path it
//! reports.

use std::time::Duration;

use crate::config::tests::{iceberg, parse, raw, refused, replaced, with};
use crate::config::*;

#[test]
fn data_freshness_is_bounded() {
    refused(
        &with("[channel.destination]", "data_freshness = \"5s\""),
        "channel[0].destination.data_freshness",
        "5s is below the minimum 10s",
    );
    refused(
        &with("[channel.destination]", "data_freshness = \"901s\""),
        "channel[0].destination.data_freshness",
        "901s is above the maximum 15m",
    );
    let config = parse(&with("[channel.destination]", "data_freshness = \"15m\"")).unwrap();
    assert_eq!(iceberg(&config).data_freshness, Duration::from_secs(900));
}

#[test]
fn sizes_are_bounded() {
    refused(
        &with("[channel.destination]", "target_file_size = \"512KiB\""),
        "channel[0].destination.target_file_size",
        "512KiB is below the minimum 1MiB",
    );
    let record = |size: &str| {
        replaced(
            "[channel.schema]",
            &format!("[channel.record]\nmax_record_size = \"{size}\"\n[channel.schema]"),
        )
    };
    refused(
        &record("65MiB"),
        "channel[0].record.max_record_size",
        "65MiB is above the maximum 64MiB",
    );
    let config = parse(&record("64MiB").replace(
        "partition_field",
        "buffer_size = \"64MiB\"\npartition_field",
    ))
    .unwrap();
    assert_eq!(config.channels[0].record.max_record_size, 64 << 20);
}

#[test]
fn compression_level_applies_to_zstd_only_and_is_bounded() {
    refused(
        &with("[channel.destination]", "compression_level = 23"),
        "channel[0].destination.compression_level",
        "23 is above the maximum 22",
    );
    refused(
        &with("[channel.destination]", "compression_level = 0"),
        "channel[0].destination.compression_level",
        "0 is below the minimum 1",
    );
    refused(
        &with(
            "[channel.destination]",
            "compression = \"snappy\"\ncompression_level = 3",
        ),
        "channel[0].destination.compression_level",
        "applies only to compression = \"zstd\"",
    );
    let config = parse(&with("[channel.destination]", "compression = \"none\"")).unwrap();
    assert_eq!(iceberg(&config).compression, Compression::Uncompressed);
    assert_eq!(
        iceberg(&config).compression.iceberg_codec_name(),
        "uncompressed"
    );
    refused(
        &with("[channel.destination]", "compression = \"gzip\""),
        "channel[0].destination.compression",
        "unknown variant `gzip`",
    );
}

#[test]
fn max_open_partitions_is_bounded() {
    refused(
        &with("[channel.destination]", "max_open_partitions = 0"),
        "channel[0].destination.max_open_partitions",
        "below the minimum 1",
    );
}

#[test]
fn namespace_and_table_must_be_lowercase() {
    refused(
        &replaced("namespace = \"quickstart\"", "namespace = \"QuickStart\""),
        "channel[0].destination.namespace",
        "a-z 0-9 _",
    );
    refused(
        &replaced("table = \"events\"", "table = \"my-events\""),
        "channel[0].destination.table",
        "a-z 0-9 _",
    );
    refused(
        &replaced("table = \"events\"", "table = \"\""),
        "channel[0].destination.table",
        "not a valid name",
    );
}

fn raw_destination(config: &Config) -> &crate::config::raw::RawDestinationConfig {
    let DestinationConfig::S3(d) = &config.channels[0].destination else {
        panic!("a raw destination")
    };
    d
}

#[test]
fn raw_destination_takes_its_defaults() {
    let config = parse(&raw("")).unwrap();
    let d = raw_destination(&config);
    assert_eq!(d.location.bucket, "raw-bucket");
    assert_eq!(d.key_template.as_str(), "{channel}/{yyyy}/{MM}/{dd}/{HH}/");
    assert_eq!(d.compression, crate::config::raw::RawCompression::None);
    assert_eq!(
        d.record_delimiter,
        crate::config::raw::RecordDelimiter::Newline
    );
    assert_eq!(d.data_freshness, Duration::from_secs(300));
    assert_eq!(d.target_object_size, 128 << 20);
    assert_eq!(d.buffer_size, 256 << 20);
    assert_eq!(config.channels[0].schema, None);
    assert_eq!(config.channels[0].dlq, None);
    assert!(config.uses_aws());
}

#[test]
fn raw_destination_reads_every_key() {
    let config = parse(&raw(r#"expected_bucket_owner = "123456789012"
kms_key_arn = "arn:aws:kms:us-east-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab"
key_template = "raw/{topic}/{yyyy}/{MM}/{dd}/{HH}/{mm}/{shard}-{first}-{last}"
compression = "zstd"
record_delimiter = "none"
data_freshness = "60s"
target_object_size = "64MiB"
buffer_size = "512MiB""#))
    .unwrap();
    let d = raw_destination(&config);
    assert_eq!(
        d.location.expected_bucket_owner.as_deref(),
        Some("123456789012")
    );
    assert!(d.location.kms_key_arn.is_some());
    assert_eq!(d.compression, crate::config::raw::RawCompression::Zstd);
    assert_eq!(
        d.record_delimiter,
        crate::config::raw::RecordDelimiter::None
    );
    assert_eq!(d.data_freshness, Duration::from_secs(60));
    assert_eq!(d.target_object_size, 64 << 20);
    assert_eq!(d.buffer_size, 512 << 20);
}

#[test]
fn raw_destination_refuses_bad_keys_naming_them() {
    for (extra, path, needle) in [
        (
            "key_template = \"raw/{channel}/{yyyy}/data\"",
            "key_template",
            "must contain {shard} and {first}",
        ),
        (
            "key_template = \"raw/{channel}/{hour}/\"",
            "key_template",
            "unknown placeholder {hour}",
        ),
        (
            "key_template = \"/raw/\"",
            "key_template",
            "starts with '/'",
        ),
        (
            "compression = \"lz4\"",
            "compression",
            "unknown variant `lz4`",
        ),
        (
            "record_delimiter = \"crlf\"",
            "record_delimiter",
            "unknown variant `crlf`",
        ),
        (
            "data_freshness = \"5s\"",
            "data_freshness",
            "below the minimum",
        ),
        (
            "data_freshness = \"901s\"",
            "data_freshness",
            "above the maximum",
        ),
        (
            "target_object_size = \"512KiB\"",
            "target_object_size",
            "below the minimum",
        ),
        (
            "target_object_size = \"3GiB\"",
            "target_object_size",
            "above the maximum",
        ),
        (
            "expected_bucket_owner = \"me\"",
            "expected_bucket_owner",
            "12-digit",
        ),
        ("kms_key_arn = \"alias/aws/s3\"", "kms_key_arn", "alias"),
    ] {
        refused(
            &raw(extra),
            &format!("channel[0].destination.{path}"),
            needle,
        );
    }
    refused(
        &raw("prefix = \"x/\""),
        "channel[0].destination",
        "unknown field `prefix`",
    );
    refused(
        &raw("").replace("raw-bucket", "Raw_Bucket"),
        "channel[0].destination.bucket",
        "not an S3 bucket name",
    );
}

#[test]
fn partition_is_a_spec_of_transform_terms_with_one_time_transform() {
    let text = replaced(
        "partition_field = \"event_time\"",
        "partition = [\"day(event_time)\", \"identity(source)\", \"bucket(4, id)\"]",
    );
    let config = parse(&text).unwrap();
    let d = iceberg(&config);
    assert_eq!(d.partition_field, "event_time");
    let terms: Vec<String> = d.partition.iter().map(|t| t.to_string()).collect();
    assert_eq!(
        terms,
        ["day(event_time)", "identity(source)", "bucket(4, id)"]
    );
    let spec = |terms: &str| {
        replaced(
            "partition_field = \"event_time\"",
            &format!("partition = {terms}"),
        )
    };
    refused(
        &spec("[\"identity(source)\", \"bucket(0, id)\"]"),
        "channel[0].destination.partition[1]",
        "the width of bucket must be a whole number from 1 to 2147483647",
    );
    refused(
        &spec("[\"minute(event_time)\"]"),
        "channel[0].destination.partition[0]",
        "unknown transform \"minute\"",
    );
    refused(
        &spec("[\"hour(event_time)\", \"day(event_time)\"]"),
        "channel[0].destination.partition[1]",
        "second time transform",
    );
    // No time transform: no time field, records need none.
    for terms in ["[\"identity(source)\"]", "[]"] {
        let config = parse(&spec(terms)).unwrap();
        assert_eq!(iceberg(&config).partition_field, "", "{terms}");
    }
    refused(
        &with(
            "[channel.destination]",
            "partition = [\"hour(event_time)\"]",
        ),
        "channel[0].destination.partition",
        "not both",
    );
    refused(
        &replaced("partition_field = \"event_time\"\n", ""),
        "channel[0].destination.partition_field",
        "required (or channel[0].destination.partition)",
    );
}

#[test]
fn sort_is_a_list_of_fields_with_directions() {
    let config = parse(&with(
        "[channel.destination]",
        "sort = [\"source\", \"event_time desc\"]",
    ))
    .unwrap();
    let terms: Vec<String> = iceberg(&config)
        .sort
        .iter()
        .map(|t| t.to_string())
        .collect();
    assert_eq!(
        terms,
        ["source asc nulls first", "event_time desc nulls last"]
    );
    refused(
        &with(
            "[channel.destination]",
            "sort = [\"id\", \"source sideways\"]",
        ),
        "channel[0].destination.sort[1]",
        "not a sort term",
    );
}

#[test]
fn max_tables_applies_only_to_several_tables() {
    refused(
        &replaced("table = \"events\"", "table = \"events\"\nmax_tables = 5"),
        "channel[0].destination.max_tables",
        "applies only with table = \"{topic}\" or \"{route}\"",
    );
}
