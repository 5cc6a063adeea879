use super::*;
use iceberg::spec::{
    DataContentType, DataFileBuilder, Literal, ManifestEntry, ManifestStatus, Struct,
};

fn file(hour: i32, name: &str, bytes: u64) -> ManifestEntryRef {
    let data_file = DataFileBuilder::default()
        .content(DataContentType::Data)
        .file_path(format!("/wh/t/data/event_time_hour={hour}/{name}"))
        .file_format(DataFileFormat::Parquet)
        .partition(Struct::from_iter([Some(Literal::int(hour))]))
        .record_count(10)
        .file_size_in_bytes(bytes)
        .partition_spec_id(0)
        .build()
        .unwrap();
    Arc::new(
        ManifestEntry::builder()
            .status(ManifestStatus::Added)
            .snapshot_id(1)
            .sequence_number(1)
            .file_sequence_number(1)
            .data_file(data_file)
            .build(),
    )
}

/// The partition of an `hour` spec's hour `h`.
fn hour_group(h: i32) -> Group {
    Group {
        closes_ms: (i64::from(h) + 1) * HOUR_MS,
        period: true,
        spec_id: 0,
        tuple: h.to_string(),
    }
}

fn hours(entries: &[ManifestEntryRef]) -> BTreeMap<Group, Vec<&ManifestEntryRef>> {
    let mut out: BTreeMap<Group, Vec<&ManifestEntryRef>> = BTreeMap::new();
    for e in entries {
        let Some(Some(Literal::Primitive(iceberg::spec::PrimitiveLiteral::Int(h)))) =
            e.data_file().partition().fields().first()
        else {
            panic!("an hour partition")
        };
        out.entry(hour_group(*h)).or_default().push(e);
    }
    out
}

/// The period of each time transform's value ends where the next one starts, in UTC,
/// across month and year ends and before 1970.
#[test]
fn a_periods_end_is_the_start_of_the_next_value() {
    use iceberg::spec::Transform::{Bucket, Day, Hour, Identity, Month, Year};
    let ms = |y, m, d| crate::time::days_from_civil(y, m, d) * 24 * HOUR_MS;
    assert_eq!(period_end_ms(Hour, 0), Some(HOUR_MS));
    assert_eq!(period_end_ms(Hour, -1), Some(0));
    assert_eq!(period_end_ms(Day, 0), Some(ms(1970, 1, 2)));
    assert_eq!(period_end_ms(Day, 20_000), Some(ms(2024, 10, 5)));
    assert_eq!(period_end_ms(Month, 0), Some(ms(1970, 2, 1)));
    // 2024-12 is month 659: it ends on 2025-01-01.
    assert_eq!(period_end_ms(Month, 659), Some(ms(2025, 1, 1)));
    assert_eq!(period_end_ms(Month, 11), Some(ms(1971, 1, 1)));
    assert_eq!(period_end_ms(Month, -1), Some(ms(1970, 1, 1)));
    // Month -13 is 1968-12.
    assert_eq!(period_end_ms(Month, -13), Some(ms(1969, 1, 1)));
    assert_eq!(period_end_ms(Year, 54), Some(ms(2025, 1, 1)));
    assert_eq!(period_end_ms(Year, -1), Some(ms(1970, 1, 1)));
    assert_eq!(period_end_ms(Identity, 3), None);
    assert_eq!(period_end_ms(Bucket(4), 3), None);
}

/// A closed hour's small files are compacted when they come from two writes or more; the
/// outputs of one compaction (one write, rolled into several files under the target) are not
/// compacted again until late data adds another write. Without the rule an hour whose
/// outputs came out under 3/4 of the target was rewritten at every look.
#[test]
fn small_files_of_one_write_are_not_compacted_again_until_late_data_arrives() {
    let (target, now) = (1 << 20, 10 * HOUR_MS);
    let outputs = [
        file(1, "c-01a2-00000.parquet", 500_000),
        file(1, "c-01a2-00001.parquet", 500_000),
        file(1, "c-01a2-00002.parquet", 400_000),
    ];
    let none = HashSet::new();
    let no_deletes = HashMap::new();
    assert!(plan_compaction(&hours(&outputs), target, 0, now, &none, &no_deletes).is_empty());
    let mut late = outputs.to_vec();
    late.push(file(1, "c-01a3-00000.parquet", 1_000));
    assert_eq!(
        plan_compaction(&hours(&late), target, 0, now, &none, &no_deletes).len(),
        4
    );
    // Two flushes of an open hour, or one within the delay, wait.
    let open = [
        file(10, "c-01a4-00000.parquet", 1_000),
        file(10, "c-01a5-00000.parquet", 1_000),
    ];
    assert!(plan_compaction(&hours(&open), target, 0, now, &none, &no_deletes).is_empty());
    let closed = [
        file(8, "c-01a4-00000.parquet", 1_000),
        file(8, "c-01a5-00000.parquet", 1_000),
    ];
    assert!(plan_compaction(
        &hours(&closed),
        target,
        2 * HOUR_MS,
        now,
        &none,
        &no_deletes
    )
    .is_empty());
    assert_eq!(
        plan_compaction(&hours(&closed), target, 0, now, &none, &no_deletes).len(),
        2
    );
    assert!(plan_compaction(
        &hours(&closed),
        target,
        0,
        now,
        &HashSet::from([hour_group(8)]),
        &no_deletes,
    )
    .is_empty());
    // Files of other writers' names count as writes of their own.
    assert_eq!(write_of("/a/00000-0-5f1e.parquet"), "00000-0-5f1e.parquet");
    assert_eq!(write_of("/a/part.parquet"), "part.parquet");
}

/// An upsert table's partition is compacted while open when it has delete files: its small
/// files of two writes, and whatever its size a file 30% deleted; a big file barely deleted
/// stays. Without delete files the open partition waits.
#[test]
fn files_with_deletes_are_compacted_in_open_partitions() {
    let (target, now) = (1 << 20, 10 * HOUR_MS);
    let none = HashSet::new();
    let big = 900_000;
    let open = [
        file(10, "c-01a4-00000.parquet", 1_000),
        file(10, "c-01a5-00000.parquet", 1_000),
        file(10, "c-01a6-00000.parquet", big),
        file(10, "c-01a7-00000.parquet", big),
    ];
    let path = |i: usize| open[i].file_path();
    let plan = |deleted: &HashMap<&str, u64>| -> Vec<String> {
        plan_compaction(&hours(&open), target, 0, now, &none, deleted)
            .iter()
            .map(|e| e.file_path().to_string())
            .collect()
    };
    assert!(plan(&HashMap::new()).is_empty());
    // Each file holds 10 rows: 1 deleted of a big file is 10%, 3 are 30%.
    let barely = HashMap::from([(path(2), 1)]);
    assert_eq!(plan(&barely), [path(0), path(1)]);
    let mostly = HashMap::from([(path(2), 3)]);
    assert_eq!(plan(&mostly), [path(0), path(1), path(2)]);
    // One small file alone: nothing to merge it with, unless it is mostly deleted.
    let alone = [file(10, "c-01a4-00000.parquet", 1_000)];
    let one = alone[0].file_path();
    let plan_alone = |n: u64| {
        plan_compaction(
            &hours(&alone),
            target,
            0,
            now,
            &none,
            &HashMap::from([(one, n)]),
        )
        .len()
    };
    assert_eq!(plan_alone(1), 0);
    assert_eq!(plan_alone(10), 1);
}

/// A look that could not load its table (a dropped idle table, the catalog down) is not tried
/// again at every commit round (an idle table's rounds come every few seconds, each logging the
/// same failure; fresh review of issue 43) but a minute later.
#[tokio::test]
async fn a_look_that_could_not_load_its_table_comes_again_a_minute_later() {
    let m = Maintainer::new("c", MaintenanceConfig::default(), None, None);
    m.state.lock().await.next_sweep = Some(Instant::now());
    m.look_failed().await;
    let st = m.state.lock().await;
    let in_a_minute = Instant::now() + LOOK_RETRY_AFTER_FAILURE - std::time::Duration::from_secs(1);
    assert!(st.next_look.is_some_and(|t| t >= in_a_minute), "look");
    assert!(st.next_sweep.is_some_and(|t| t >= in_a_minute), "sweep");
}
