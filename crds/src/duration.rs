//! Durations as users write them in fleethub specs: `30s`, `5m`, `1h30m`, `2h0m15s`.
//!
//! The CRD schemas accept exactly the strings [`DURATION_PATTERN`] matches (hours, minutes and
//! seconds, each optional but in that order, at least one present), and CEL checks they are
//! positive. The controllers parse them with [`parse`], which accepts the same language.

use std::time::Duration;

/// The RE2 pattern the CRD schemas use for duration fields.
pub const DURATION_PATTERN: &str = "^([0-9]+h)?([0-9]+m)?([0-9]+s)?$";

/// Why a duration string was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    /// Nothing to parse.
    #[error("duration is empty; write it like 30s, 5m or 1h30m")]
    Empty,
    /// Not of the form `<n>h<n>m<n>s`.
    #[error(
        "duration {0:?} is not of the form 30s, 5m or 1h30m (hours, minutes, seconds, in that order)"
    )]
    Malformed(String),
    /// Too large to represent.
    #[error("duration {0:?} is too large")]
    Overflow(String),
}

/// Parses a duration of the form `1h30m15s` (each unit optional, in that order).
pub fn parse(input: &str) -> Result<Duration, DurationError> {
    if input.is_empty() {
        return Err(DurationError::Empty);
    }
    let malformed = || DurationError::Malformed(input.to_string());
    let mut seconds: u64 = 0;
    let mut digits = String::new();
    // Units must appear in this order, each at most once.
    let mut allowed: &[(char, u64)] = &[('h', 3600), ('m', 60), ('s', 1)];
    for c in input.chars() {
        if c.is_ascii_digit() {
            digits.push(c);
            continue;
        }
        let pos = allowed
            .iter()
            .position(|(u, _)| *u == c)
            .ok_or_else(malformed)?;
        if digits.is_empty() {
            return Err(malformed());
        }
        let value: u64 = digits
            .parse()
            .map_err(|_| DurationError::Overflow(input.to_string()))?;
        let unit = allowed[pos].1;
        seconds = value
            .checked_mul(unit)
            .and_then(|v| seconds.checked_add(v))
            .ok_or_else(|| DurationError::Overflow(input.to_string()))?;
        digits.clear();
        allowed = &allowed[pos + 1..];
    }
    if !digits.is_empty() {
        return Err(malformed());
    }
    Ok(Duration::from_secs(seconds))
}

/// Formats a duration the way [`parse`] reads it, e.g. `1h30m` or `45s`.
pub fn format(d: Duration) -> String {
    let total = d.as_secs();
    let (h, m, s) = (total / 3600, (total % 3600) / 60, total % 60);
    let mut out = String::new();
    if h > 0 {
        out.push_str(&format!("{h}h"));
    }
    if m > 0 {
        out.push_str(&format!("{m}m"));
    }
    if s > 0 || out.is_empty() {
        out.push_str(&format!("{s}s"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_each_unit_and_combinations() {
        let cases = [
            ("30s", 30),
            ("5m", 300),
            ("1h", 3600),
            ("1h30m", 5400),
            ("2h0m15s", 7215),
            ("90s", 90),
            ("0s", 0),
        ];
        for (input, secs) in cases {
            assert_eq!(parse(input), Ok(Duration::from_secs(secs)), "{input}");
        }
    }

    #[test]
    fn refuses_what_the_schema_refuses() {
        assert_eq!(parse(""), Err(DurationError::Empty));
        for bad in [
            "5", "m", "1m1h", "1h1h", "1.5h", "1d", "-1s", "1 m", "h1", "1s1",
        ] {
            assert!(
                matches!(parse(bad), Err(DurationError::Malformed(_))),
                "{bad} should be refused"
            );
        }
        assert!(matches!(
            parse("99999999999999999999h"),
            Err(DurationError::Overflow(_))
        ));
        assert!(matches!(
            parse("9999999999999999h"),
            Err(DurationError::Overflow(_))
        ));
    }

    #[test]
    fn formats_round_trip() {
        for secs in [0, 1, 59, 60, 61, 3600, 3661, 5400, 86400] {
            let d = Duration::from_secs(secs);
            assert_eq!(parse(&format(d)), Ok(d), "{secs}s");
        }
        assert_eq!(format(Duration::from_secs(5400)), "1h30m");
    }
}
