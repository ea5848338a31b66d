//! Durations as users write them in fleethub specs: Go's duration language, as KubeFleet and
//! every Kubernetes `metav1.Duration` field read them: `30s`, `5m`, `1h30m`, `1.5h`, `90m`,
//! `300s`, `500ms`.
//!
//! The CRD schemas accept exactly the strings [`DURATION_PATTERN`] matches (one or more decimal
//! numbers, each with a unit: `h`, `m`, `s`, `ms`, `us`, `µs`, `ns`), and CEL (whose `duration()`
//! is Go's `time.ParseDuration`) checks they are positive. The controllers parse them with
//! [`parse`], which accepts the same language.

use std::time::Duration;

/// The RE2 pattern the CRD schemas use for duration fields.
pub const DURATION_PATTERN: &str = r"^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$";

/// Why a duration string was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    /// Nothing to parse.
    #[error("duration is empty; write it like 30s, 5m, 1h30m or 1.5h")]
    Empty,
    /// Not a sequence of numbers with units.
    #[error(
        "duration {0:?} is not of the form 30s, 5m, 1h30m or 1.5h (numbers, each followed by a unit: h, m, s, ms, us, ns)"
    )]
    Malformed(String),
    /// Too large to represent.
    #[error("duration {0:?} is too large")]
    Overflow(String),
}

/// The units, longest name first so that `ms` is not read as `m` followed by `s`.
const UNITS: [(&str, u128); 7] = [
    ("ns", 1),
    ("us", 1_000),
    ("µs", 1_000),
    ("ms", 1_000_000),
    ("h", 3_600_000_000_000),
    ("m", 60_000_000_000),
    ("s", 1_000_000_000),
];

/// Parses a duration as Go's `time.ParseDuration` does (without a sign: fleethub durations are
/// never negative): `1h30m`, `1.5h`, `90m`, `300s`, `250ms`.
pub fn parse(input: &str) -> Result<Duration, DurationError> {
    if input.is_empty() {
        return Err(DurationError::Empty);
    }
    let malformed = || DurationError::Malformed(input.to_string());
    let overflow = || DurationError::Overflow(input.to_string());
    let mut nanos: u128 = 0;
    let mut rest = input;
    while !rest.is_empty() {
        let whole_len = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        let (whole, after) = rest.split_at(whole_len);
        if whole.is_empty() {
            return Err(malformed());
        }
        let (fraction, after) = match after.strip_prefix('.') {
            Some(f) => {
                let len = f.find(|c: char| !c.is_ascii_digit()).unwrap_or(f.len());
                if len == 0 {
                    return Err(malformed());
                }
                f.split_at(len)
            }
            None => ("", after),
        };
        let (unit, scale) = UNITS
            .iter()
            .find(|(u, _)| after.starts_with(u))
            .ok_or_else(malformed)?;
        let whole: u128 = whole.parse().map_err(|_| overflow())?;
        let mut value = whole.checked_mul(*scale).ok_or_else(overflow)?;
        // The fraction, to the nanosecond (Go truncates the same way).
        let mut place = *scale;
        for d in fraction.chars() {
            place /= 10;
            if place == 0 {
                break;
            }
            value += u128::from(d.to_digit(10).unwrap_or(0)) * place;
        }
        nanos = nanos.checked_add(value).ok_or_else(overflow)?;
        rest = &after[unit.len()..];
    }
    let secs = u64::try_from(nanos / 1_000_000_000).map_err(|_| overflow())?;
    Ok(Duration::new(secs, (nanos % 1_000_000_000) as u32))
}

/// Formats a duration the way [`parse`] reads it, e.g. `1h30m`, `45s` or `1.5s`.
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
    let millis = d.subsec_millis();
    if millis > 0 {
        let fraction = format!("{millis:03}");
        out.push_str(&format!("{s}.{}s", fraction.trim_end_matches('0')));
    } else if s > 0 || out.is_empty() {
        out.push_str(&format!("{s}s"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_go_durations_as_kubefleet_writes_them() {
        let cases = [
            ("30s", 30_000),
            ("5m", 300_000),
            ("1h", 3_600_000),
            ("1h30m", 5_400_000),
            ("2h0m15s", 7_215_000),
            ("90s", 90_000),
            ("0s", 0),
            ("1.5h", 5_400_000),
            ("90m", 5_400_000),
            ("300s", 300_000),
            ("1m1h", 3_660_000),
            ("250ms", 250),
            ("1.25s", 1_250),
            ("1500us", 1),
            ("2µs", 0),
        ];
        for (input, millis) in cases {
            assert_eq!(parse(input).map(|d| d.as_millis()), Ok(millis), "{input}");
        }
        assert_eq!(parse("3ns"), Ok(Duration::from_nanos(3)));
    }

    #[test]
    fn refuses_what_the_schema_refuses() {
        let pattern = regex_lite_match;
        assert_eq!(parse(""), Err(DurationError::Empty));
        for bad in [
            "5", "m", "1d", "-1s", "1 m", "h1", "1s1", ".5h", "1.h", "1.5", "1x",
        ] {
            assert!(
                matches!(parse(bad), Err(DurationError::Malformed(_))),
                "{bad} should be refused"
            );
            assert!(!pattern(bad), "{bad} should not match the schema's pattern");
        }
        for good in ["1.5h", "90m", "1h30m", "300s", "250ms", "2µs"] {
            assert!(pattern(good), "{good} should match the schema's pattern");
        }
        assert!(matches!(
            parse("99999999999999999999999999999999999999999h"),
            Err(DurationError::Overflow(_))
        ));
        assert!(matches!(
            parse("9999999999999999999999h"),
            Err(DurationError::Overflow(_))
        ));
    }

    /// [`DURATION_PATTERN`] by hand (no regex crate in `crds`): one or more number-unit pairs.
    fn regex_lite_match(s: &str) -> bool {
        let mut rest = s;
        if rest.is_empty() {
            return false;
        }
        while !rest.is_empty() {
            let n = rest
                .find(|c: char| !c.is_ascii_digit())
                .unwrap_or(rest.len());
            if n == 0 {
                return false;
            }
            rest = &rest[n..];
            if let Some(f) = rest.strip_prefix('.') {
                let n = f.find(|c: char| !c.is_ascii_digit()).unwrap_or(f.len());
                if n == 0 {
                    return false;
                }
                rest = &f[n..];
            }
            match UNITS.iter().find(|(u, _)| rest.starts_with(u)) {
                Some((u, _)) => rest = &rest[u.len()..],
                None => return false,
            }
        }
        true
    }

    #[test]
    fn formats_round_trip() {
        for millis in [
            0, 1_000, 59_000, 60_000, 61_000, 3_600_000, 3_661_000, 5_400_000, 86_400_000, 1_500,
            250,
        ] {
            let d = Duration::from_millis(millis);
            assert_eq!(parse(&format(d)), Ok(d), "{millis}ms");
        }
        assert_eq!(format(Duration::from_secs(5400)), "1h30m");
        assert_eq!(format(Duration::from_millis(1500)), "1.5s");
    }
}
