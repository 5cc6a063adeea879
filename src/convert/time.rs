//! RFC 3339 dates and times (RFC 3339 §5.6, as JSON Schema draft-07 `format` uses them), parsed
//! strictly into Iceberg's representations: `timestamptz` as µs since 1970-01-01T00:00Z, `date` as days
//! since 1970-01-01, `time` as µs since midnight UTC.
//!
//! Decided rules (docs/schema-mapping.md "Value rules"):
//! - `date-time` = `full-date ("T" / "t") full-time`; the offset is mandatory (`Z`, `z` or `±HH:MM`,
//!   hours 00–23, minutes 00–59); the year is four ASCII digits; the day must exist in the calendar.
//! - More than 6 fractional digits are floored toward −∞ (they only ever add a positive fraction, so
//!   they are cut, also before 1970).
//! - A leap second (`:60`) is accepted where RFC 3339 allows one — at 23:59 UTC, after applying the
//!   offset (the JSON-Schema-Test-Suite reading) — and clamped to `:59.999999` of the same minute, so
//!   it never changes the hour partition. `:60` at any other UTC minute is not a date-time.
//! - After normalization to UTC the instant must lie in years 0000–9999, else it is out of range.
//! - `time` = `full-time`: offset mandatory; normalized to UTC modulo 24 h.

use crate::time::{civil_from_days, days_from_civil};
/// Why a string is not a valid date/time value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TimeError {
    /// Not in the format (TYPE_MISMATCH).
    Format,
    /// In the format, but outside what the column holds (VALUE_OUT_OF_RANGE).
    Range,
}

const MICROS_PER_SECOND: i64 = 1_000_000;
const MICROS_PER_DAY: i64 = 86_400 * MICROS_PER_SECOND;
/// µs of 0000-01-01T00:00:00Z.
const MIN_MICROS: i64 = -719_528 * MICROS_PER_DAY;
/// µs of 10000-01-01T00:00:00Z (exclusive).
const MAX_MICROS_EXCL: i64 = 2_932_897 * MICROS_PER_DAY;

#[inline]
fn digit(b: &[u8], i: usize) -> Result<u32, TimeError> {
    match b.get(i) {
        Some(c @ b'0'..=b'9') => Ok(u32::from(c - b'0')),
        _ => Err(TimeError::Format),
    }
}

#[inline]
fn two(b: &[u8], i: usize) -> Result<u32, TimeError> {
    Ok(digit(b, i)? * 10 + digit(b, i + 1)?)
}

#[inline]
fn lit(b: &[u8], i: usize, c: u8) -> Result<(), TimeError> {
    if b.get(i) == Some(&c) {
        Ok(())
    } else {
        Err(TimeError::Format)
    }
}

fn is_leap(y: i64) -> bool {
    (y % 4 == 0 && y % 100 != 0) || y % 400 == 0
}

fn days_in_month(y: i64, m: u32) -> u32 {
    match m {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if is_leap(y) => 29,
        2 => 28,
        _ => 0,
    }
}

/// `full-date` at `b[0..10]` → days since epoch.
fn full_date(b: &[u8]) -> Result<i64, TimeError> {
    let y = i64::from(two(b, 0)? * 100 + two(b, 2)?);
    lit(b, 4, b'-')?;
    let m = two(b, 5)?;
    lit(b, 7, b'-')?;
    let d = two(b, 8)?;
    if !(1..=12).contains(&m) || d < 1 || d > days_in_month(y, m) {
        return Err(TimeError::Format);
    }
    Ok(days_from_civil(y, m, d))
}

/// `full-time` at `b[..]` (to the end): returns (µs since local midnight with a leap second kept as
/// second 60, offset in minutes east of UTC, whether the second was 60).
fn full_time(b: &[u8]) -> Result<(i64, i64, bool), TimeError> {
    let h = two(b, 0)?;
    lit(b, 2, b':')?;
    let mi = two(b, 3)?;
    lit(b, 5, b':')?;
    let s = two(b, 6)?;
    if h > 23 || mi > 59 || s > 60 {
        return Err(TimeError::Format);
    }
    let mut i = 8;
    let mut frac: i64 = 0;
    if b.get(i) == Some(&b'.') {
        i += 1;
        let start = i;
        while let Some(c @ b'0'..=b'9') = b.get(i) {
            if i - start < 6 {
                frac = frac * 10 + i64::from(c - b'0');
            }
            i += 1;
        }
        let n = i - start;
        if n == 0 {
            return Err(TimeError::Format);
        }
        for _ in n..6 {
            frac *= 10;
        }
    }
    let offset_min: i64 = match b.get(i) {
        Some(b'Z' | b'z') => {
            i += 1;
            0
        }
        Some(sign @ (b'+' | b'-')) => {
            let oh = two(b, i + 1)?;
            lit(b, i + 3, b':')?;
            let om = two(b, i + 4)?;
            if oh > 23 || om > 59 {
                return Err(TimeError::Format);
            }
            let v = i64::from(oh * 60 + om);
            i += 6;
            if *sign == b'-' {
                -v
            } else {
                v
            }
        }
        _ => return Err(TimeError::Format),
    };
    if i != b.len() {
        return Err(TimeError::Format);
    }
    let local =
        (i64::from(h) * 3600 + i64::from(mi) * 60 + i64::from(s)) * MICROS_PER_SECOND + frac;
    Ok((local, offset_min, s == 60))
}

/// Clamps a leap second: `local` had second 60; valid only when the UTC minute is 23:59.
fn leap_clamp(local_us: i64, offset_min: i64) -> Result<i64, TimeError> {
    // The minute that holds the leap second, in local minutes since midnight.
    let local_minute = local_us.div_euclid(60 * MICROS_PER_SECOND) - 1; // second 60 rolled over
    let utc_minute = (local_minute - offset_min).rem_euclid(24 * 60);
    if utc_minute != 23 * 60 + 59 {
        return Err(TimeError::Format);
    }
    // :59.999999 of the same minute.
    Ok(local_minute * 60 * MICROS_PER_SECOND + 59 * MICROS_PER_SECOND + 999_999)
}

/// RFC 3339 `date-time` → µs since 1970-01-01T00:00Z (UTC), floored.
pub(crate) fn parse_date_time(b: &[u8]) -> Result<i64, TimeError> {
    if b.len() < 20 {
        return Err(TimeError::Format);
    }
    let days = full_date(b)?;
    if !matches!(b[10], b'T' | b't') {
        return Err(TimeError::Format);
    }
    let (mut local, offset_min, leap) = full_time(&b[11..])?;
    if leap {
        local = leap_clamp(local, offset_min)?;
    }
    let us = days * MICROS_PER_DAY + local - offset_min * 60 * MICROS_PER_SECOND;
    if !(MIN_MICROS..MAX_MICROS_EXCL).contains(&us) {
        return Err(TimeError::Range);
    }
    Ok(us)
}

/// RFC 3339 `full-date` → days since 1970-01-01.
pub(crate) fn parse_date(b: &[u8]) -> Result<i32, TimeError> {
    if b.len() != 10 {
        return Err(TimeError::Format);
    }
    i32::try_from(full_date(b)?).map_err(|_| TimeError::Range)
}

/// RFC 3339 `full-time` → µs since midnight UTC.
pub(crate) fn parse_time(b: &[u8]) -> Result<i64, TimeError> {
    let (mut local, offset_min, leap) = full_time(b)?;
    if leap {
        local = leap_clamp(local, offset_min)?;
    }
    Ok((local - offset_min * 60 * MICROS_PER_SECOND).rem_euclid(MICROS_PER_DAY))
}

/// Hour partition value (hours since 1970-01-01T00Z, floor division) of a timestamp in µs.
pub fn hour_of_micros(us: i64) -> i64 {
    us.div_euclid(3_600 * MICROS_PER_SECOND)
}

/// `YYYY-MM-DDTHH:MM:SS.ffffff+00:00` (Iceberg's JSON single-value form of `timestamptz`).
pub fn format_timestamptz(us: i64) -> String {
    format!("{}+00:00", format_timestamp(us))
}

/// `YYYY-MM-DDTHH:MM:SS.ffffff` (Iceberg's JSON single-value form of `timestamp`, without zone).
pub fn format_timestamp(us: i64) -> String {
    let days = us.div_euclid(MICROS_PER_DAY);
    let rem = us.rem_euclid(MICROS_PER_DAY);
    let (y, m, d) = civil_from_days(days);
    format!("{y:04}-{m:02}-{d:02}T{}", format_time(rem))
}

/// `YYYY-MM-DD`.
pub fn format_date(days: i32) -> String {
    let (y, m, d) = civil_from_days(i64::from(days));
    format!("{y:04}-{m:02}-{d:02}")
}

/// `HH:MM:SS.ffffff`.
pub fn format_time(us: i64) -> String {
    let s = us / MICROS_PER_SECOND;
    let f = us % MICROS_PER_SECOND;
    format!("{:02}:{:02}:{:02}.{f:06}", s / 3600, (s / 60) % 60, s % 60)
}

#[cfg(test)]
mod tests {
    use super::*;
    use TimeError::*;

    fn dt(s: &str) -> Result<i64, TimeError> {
        parse_date_time(s.as_bytes())
    }

    #[test]
    fn date_time_offsets_normalize_to_utc() {
        assert_eq!(
            dt("2026-03-31T03:17:37.260514+00:00"),
            Ok(1_774_927_057_260_514)
        );
        assert_eq!(
            dt("2024-06-01T10:00:00.123456+05:30"),
            Ok(1_717_216_200_123_456)
        );
        assert_eq!(dt("2024-03-10T23:30:00-05:00"), Ok(1_710_131_400_000_000));
        assert_eq!(dt("2024-06-01T10:00:00.5-00:00"), Ok(1_717_236_000_500_000));
        assert_eq!(dt("2019-02-28t10:08:30.000z"), Ok(1_551_348_510_000_000));
    }

    #[test]
    fn date_time_rejects_non_rfc3339() {
        for s in [
            "1990-12-31T15:59:59-24:00",
            "2025-06-05T07:55:46",
            "2024-10-04T10:22:45+0200",
            "2016-10-18T11:11:11.616+05",
            "2022-09-11 10:31:25Z",
            "2022-09-11_10:31:25Z",
            "2019-02-31T09:22:46.000Z",
            "2021-02-29T00:00:00Z",
            "2024-0?-15T10:00:00Z",
            "1985-04-12T23:20Z",
            "2024-06-01T12:34:56ZAS",
            "2024-06-01T24:00:00Z",
            "2024-06-01T12:34:56.Z",
            "1998-12-31T23:58:60Z",
            "1998-12-31T22:59:60Z",
            "1998-12-31T23:59:61Z",
            "+2024-06-01T10:00:00Z",
            "",
        ] {
            assert_eq!(dt(s), Err(Format), "{s}");
        }
    }

    #[test]
    fn date_time_floors_beyond_microseconds_also_before_1970() {
        assert_eq!(
            dt("2015-01-02T00:00:00.999999999Z"),
            Ok(1_420_156_800_999_999)
        );
        assert_eq!(dt("1969-12-31T23:59:59.999999999Z"), Ok(-1));
        assert_eq!(dt("1969-12-31T23:59:59.500000Z"), Ok(-500_000));
        assert_eq!(hour_of_micros(-1), -1);
        assert_eq!(hour_of_micros(-3_600_000_000), -1);
        assert_eq!(dt("1600-01-01T00:00:00Z"), Ok(-11_676_096_000_000_000));
        assert_eq!(hour_of_micros(-11_676_096_000_000_000), -3_243_360);
    }

    #[test]
    fn leap_second_is_clamped_within_its_minute() {
        assert_eq!(
            dt("1998-12-31T23:59:60Z"),
            dt("1998-12-31T23:59:59.999999Z")
        );
        assert_eq!(
            dt("1998-12-31T15:59:60.123-08:00"),
            dt("1998-12-31T23:59:59.999999Z")
        );
        assert_eq!(parse_time(b"23:59:60Z"), Ok(86_399_999_999));
        assert_eq!(parse_time(b"15:59:60-08:00"), Ok(86_399_999_999));
        assert_eq!(parse_time(b"10:15:60Z"), Err(Format));
    }

    #[test]
    fn years_outside_0000_9999_after_normalization_are_out_of_range() {
        assert_eq!(dt("0000-01-01T00:30:00+01:00"), Err(Range));
        assert_eq!(dt("9999-12-31T23:30:00-01:00"), Err(Range));
        assert!(dt("0000-01-01T00:00:00Z").is_ok());
        assert!(dt("9999-12-31T23:59:59.999999Z").is_ok());
    }

    #[test]
    fn time_normalizes_to_utc() {
        assert_eq!(parse_time(b"10:15:30Z"), Ok(36_930_000_000));
        assert_eq!(parse_time(b"10:15:30.123456789+05:30"), Ok(17_130_123_456));
        assert_eq!(parse_time(b"00:30:00+01:00"), Ok(84_600_000_000));
        assert_eq!(parse_time(b"10:15:30"), Err(Format));
        assert_eq!(parse_time(b"10:15"), Err(Format));
    }

    #[test]
    fn dates() {
        assert_eq!(parse_date(b"2024-02-29"), Ok(19_782));
        assert_eq!(parse_date(b"1969-12-31"), Ok(-1));
        assert_eq!(parse_date(b"2024-2-29"), Err(Format));
        assert_eq!(parse_date("2024-06-1৪".as_bytes()), Err(Format));
        assert_eq!(parse_date(b"2024-06-01T00:00:00Z"), Err(Format));
        assert_eq!(format_date(19_782), "2024-02-29");
        assert_eq!(format_date(-1), "1969-12-31");
    }

    #[test]
    fn formats_round_trip() {
        assert_eq!(format_timestamptz(-1), "1969-12-31T23:59:59.999999+00:00");
        assert_eq!(
            format_timestamptz(1_774_927_057_260_514),
            "2026-03-31T03:17:37.260514+00:00"
        );
        assert_eq!(format_time(17_130_123_456), "04:45:30.123456");
        for d in [-800_000i64, -1, 0, 1, 19_782, 2_932_000] {
            let (y, m, dd) = civil_from_days(d);
            assert_eq!(days_from_civil(y, m, dd), d);
        }
    }
}
