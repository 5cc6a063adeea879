//! Strict parsers for the durations and sizes written in the configuration file.
//!
//! Sizes accept only binary units (`B`, `KiB`, `MiB`, `GiB`, `TiB`, exact case), so `"128MiB"` is
//! always 128 × 2^20 bytes. Decimal or ambiguous units (`MB`, `M`, `mb`) are refused with a hint
//! instead of being guessed. Durations are humantime's (`"300s"`, `"10m"`, `"1h 30m"`, `"500ms"`).

use std::time::Duration;

const BINARY_UNITS: [(&str, u64); 5] = [
    ("B", 1),
    ("KiB", 1 << 10),
    ("MiB", 1 << 20),
    ("GiB", 1 << 30),
    ("TiB", 1 << 40),
];

/// Parses a size such as `"128MiB"` into bytes.
///
/// Errors: a message (without the key path) saying what is wrong with `text`.
pub(crate) fn parse_size(text: &str) -> Result<u64, String> {
    let trimmed = text.trim();
    let digits_end = trimmed
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(trimmed.len());
    let (number, unit) = trimmed.split_at(digits_end);
    let unit = unit.trim_start();
    if number.is_empty() {
        return Err(format!(
            "invalid size \"{text}\": expected a whole number followed by a unit, such as \"128MiB\""
        ));
    }
    if unit.is_empty() {
        return Err(format!(
            "invalid size \"{text}\": a unit is required (B, KiB, MiB, GiB or TiB), such as \"{number}MiB\""
        ));
    }
    let Some(&(_, multiplier)) = BINARY_UNITS.iter().find(|(name, _)| *name == unit) else {
        let hint = match unit.to_ascii_lowercase().as_str() {
            "k" | "kb" | "ki" | "kib" => " (write KiB for 2^10 bytes)",
            "m" | "mb" | "mi" | "mib" => " (write MiB for 2^20 bytes)",
            "g" | "gb" | "gi" | "gib" => " (write GiB for 2^30 bytes)",
            "t" | "tb" | "ti" | "tib" => " (write TiB for 2^40 bytes)",
            _ => "",
        };
        return Err(format!(
            "invalid size \"{text}\": unknown unit \"{unit}\"{hint}; units are B, KiB, MiB, GiB, TiB"
        ));
    };
    number
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(multiplier))
        .ok_or_else(|| format!("invalid size \"{text}\": too large"))
}

/// Formats `bytes` with the largest binary unit that divides it exactly (`134217728` → `"128MiB"`).
pub(crate) fn format_size(bytes: u64) -> String {
    BINARY_UNITS
        .iter()
        .rev()
        .find(|(_, m)| bytes != 0 && bytes.is_multiple_of(*m))
        .map(|(name, m)| format!("{}{name}", bytes / m))
        .unwrap_or_else(|| format!("{bytes}B"))
}

/// Parses a duration such as `"300s"` or `"10m"`.
///
/// Errors: a message (without the key path) saying what is wrong with `text`.
pub(crate) fn parse_duration(text: &str) -> Result<Duration, String> {
    humantime::parse_duration(text.trim())
        .map_err(|e| format!("invalid duration \"{text}\": {e} (write e.g. \"300s\" or \"10m\")"))
}

/// Formats a duration the way the file writes it (`"5m"`, `"1s 500ms"`).
pub(crate) fn format_duration(d: Duration) -> String {
    humantime::format_duration(d).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn binary_units_are_powers_of_two() {
        assert_eq!(parse_size("128MiB"), Ok(128 << 20));
        assert_eq!(parse_size("10 MiB"), Ok(10 << 20));
        assert_eq!(parse_size("1KiB"), Ok(1024));
        assert_eq!(parse_size("2GiB"), Ok(2 << 30));
        assert_eq!(parse_size("1TiB"), Ok(1 << 40));
        assert_eq!(parse_size("512B"), Ok(512));
    }

    #[test]
    fn decimal_ambiguous_fractional_and_unitless_sizes_are_refused() {
        for text in [
            "128MB",
            "128M",
            "128mib",
            "1.5MiB",
            "128",
            "MiB",
            "-1MiB",
            "",
            "99999999999TiB",
        ] {
            assert!(parse_size(text).is_err(), "{text} should be refused");
        }
        assert!(parse_size("128MB").unwrap_err().contains("write MiB"));
    }

    #[test]
    fn sizes_format_with_the_largest_exact_unit() {
        assert_eq!(format_size(128 << 20), "128MiB");
        assert_eq!(format_size(1536), "1536B");
        assert_eq!(format_size(3 << 10), "3KiB");
        assert_eq!(format_size(0), "0B");
        assert_eq!(format_size(1 << 20), "1MiB");
    }

    #[test]
    fn durations_parse_with_units() {
        assert_eq!(parse_duration("300s"), Ok(Duration::from_secs(300)));
        assert_eq!(parse_duration("10m"), Ok(Duration::from_secs(600)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert!(parse_duration("300").is_err());
        assert!(parse_duration("5 parsecs").is_err());
        assert_eq!(format_duration(Duration::from_secs(10)), "10s");
    }
}
