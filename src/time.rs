//! Wall-clock time and the civil calendar: the one copy of `now_ms`, the proleptic Gregorian
//! day arithmetic (H. Hinnant's algorithms) and RFC 3339 formatting that floe's logs, DLQ
//! entries, raw object keys and CLI output use.
//!
//! Intervals (lease expiry, freshness deadlines) are measured on tokio's monotonic clock, never
//! with these: wall-clock milliseconds are for records, entries and humans.

/// The current wall-clock time in milliseconds since the Unix epoch (0 if the clock is before it).
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// The time in a UUIDv7 (RFC 9562 §5.7: the first 48 bits are Unix milliseconds), in
/// milliseconds since the Unix epoch; `None` for a UUID of another version. floe's batch ids,
/// commit ids and file names carry one.
pub fn uuid_v7_ms(id: &uuid::Uuid) -> Option<i64> {
    let (secs, nanos) = id.get_timestamp()?.to_unix();
    Some(secs as i64 * 1000 + i64::from(nanos / 1_000_000))
}

// Kept hand-rolled rather than `chrono` (in the lock file through iceberg): `days_from_civil`
// runs on the record path, once per `date` and `date-time` value of every record
// (`convert::time::full_date`, already validated there), where these few integer operations
// need no second validation and no `NaiveDate` round trip.
/// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's `days_from_civil`).
pub fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let m = i64::from(m);
    let mp = if m > 2 { m - 3 } else { m + 9 };
    let doy = (153 * mp + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// (year, month, day) of a day number (inverse of [`days_from_civil`]).
pub fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

/// Formats milliseconds since the epoch as RFC 3339 UTC with milliseconds
/// (`2026-07-09T20:00:00.123Z`; RFC 3339 §5.6, `time-secfrac` of three digits).
pub fn rfc3339_ms(ms: i64) -> String {
    let secs = ms.div_euclid(1000);
    let millis = ms.rem_euclid(1000);
    let days = secs.div_euclid(86_400);
    let sod = secs.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{millis:03}Z",
        sod / 3600,
        (sod / 60) % 60,
        sod % 60
    )
}

/// `495452` → `2026-07-09-20`: an hour partition value (hours since the epoch) in the Iceberg
/// spec's human-readable form, as floe prints it (`floe quickstart`, `floe records check`).
pub fn hour_text(hours: i64) -> String {
    let ts = rfc3339_ms(hours * 3_600_000);
    format!("{}-{}", &ts[..10], &ts[11..13])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn civil_days_round_trip_across_eras() {
        for days in [-719_468 - 1, -1, 0, 1, 10_957, 20_643, 2_932_896] {
            let (y, m, d) = civil_from_days(days);
            assert_eq!(days_from_civil(y, m, d), days, "{y}-{m}-{d}");
        }
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(-1), (1969, 12, 31));
    }

    #[test]
    fn arrival_time_is_rfc3339_utc_with_millis() {
        assert_eq!(rfc3339_ms(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339_ms(1_783_627_200_123), "2026-07-09T20:00:00.123Z");
        assert_eq!(rfc3339_ms(-1), "1969-12-31T23:59:59.999Z");
    }
}
