//! When auto-update checks the registry: a cron expression (`croner`), read in an optional IANA
//! time zone (UTC without one).
//!
//! An expression has 5 fields (minute hour day-of-month month day-of-week) or 6 with seconds
//! first (`*/10 * * * * *`: every ten seconds). croner's syntax: ranges, steps, lists, names
//! (`MON`, `JAN`), `L`, `#`, `W`, and the nicknames `@hourly`, `@daily`, `@weekly`, `@monthly`,
//! `@yearly`. When both day-of-month and day-of-week are restricted, a day matching either
//! matches (as in Vixie cron). In a zone with daylight saving time, a time that a shift skips
//! runs at the shift and a time it repeats runs once.

use croner::Cron;
use croner::parser::{CronParser, Seconds, Year};
use jiff::Timestamp;
use jiff::tz::TimeZone;

/// A parsed schedule.
#[derive(Debug, Clone)]
pub struct Schedule {
    cron: Cron,
    time_zone: TimeZone,
}

fn parser() -> CronParser {
    CronParser::builder()
        .seconds(Seconds::Optional)
        .year(Year::Disallowed)
        .build()
}

impl Schedule {
    /// Parses `expr` (the policy's `schedule`) in `time_zone` (its `timeZone`, an IANA name such
    /// as `Europe/Berlin`; `None` for UTC). An error's message names the field and what is
    /// wrong, e.g. `schedule "0 25 * * *": the hour field "25" is invalid: …`.
    pub fn parse(expr: &str, time_zone: Option<&str>) -> Result<Schedule, String> {
        let time_zone = match time_zone {
            None => TimeZone::UTC,
            Some(name) => TimeZone::get(name).map_err(|e| {
                format!("timeZone {name:?} is not a known IANA time zone (e.g. Europe/Berlin): {e}")
            })?,
        };
        let cron = parser()
            .parse(expr)
            .map_err(|e| format!("schedule {expr:?}: {}{e}", bad_field(expr)))?;
        Ok(Schedule { cron, time_zone })
    }

    /// The first time the schedule fires strictly after `t`; `None` if it never does again
    /// (an expression such as `0 0 30 2 *`, February 30th).
    pub fn next_after(&self, t: Timestamp) -> Option<Timestamp> {
        let zoned = t.to_zoned(self.time_zone.clone());
        self.cron
            .find_next_occurrence(&zoned, false)
            .ok()
            .map(|z| z.timestamp())
    }
}

/// Which field makes `expr` invalid, as `the hour field "25" is invalid: `: the field that,
/// replaced by `*`, makes the expression parse. Empty when no single field is to blame (a wrong
/// number of fields, or several bad ones).
fn bad_field(expr: &str) -> String {
    let fields: Vec<&str> = expr.split_whitespace().collect();
    let names: &[&str] = match fields.len() {
        5 => &["minute", "hour", "day-of-month", "month", "day-of-week"],
        6 => &[
            "second",
            "minute",
            "hour",
            "day-of-month",
            "month",
            "day-of-week",
        ],
        n => return format!("it has {n} fields, not 5 (or 6 with seconds first): "),
    };
    let blamed: Vec<usize> = (0..fields.len())
        .filter(|&i| {
            let mut fixed = fields.clone();
            fixed[i] = "*";
            parser().parse(&fixed.join(" ")).is_ok()
        })
        .collect();
    match blamed.as_slice() {
        [i] => format!("the {} field {:?} is invalid: ", names[*i], fields[*i]),
        _ => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    #[test]
    fn next_after_is_the_first_firing_strictly_after_the_given_time() {
        // expression, time zone, now, next
        let cases: &[(&str, Option<&str>, &str, &str)] = &[
            // 6 fields: seconds first.
            (
                "*/10 * * * * *",
                None,
                "2026-03-01T10:00:00Z",
                "2026-03-01T10:00:10Z",
            ),
            (
                "*/10 * * * * *",
                None,
                "2026-03-01T10:00:05.5Z",
                "2026-03-01T10:00:10Z",
            ),
            (
                "*/10 * * * * *",
                None,
                "2026-03-01T10:00:59Z",
                "2026-03-01T10:01:00Z",
            ),
            // 5 fields: minutes, at second 0.
            (
                "*/15 * * * *",
                None,
                "2026-03-01T10:07:00Z",
                "2026-03-01T10:15:00Z",
            ),
            (
                "*/15 * * * *",
                None,
                "2026-03-01T10:15:00Z",
                "2026-03-01T10:30:00Z",
            ),
            (
                "0 3 * * *",
                None,
                "2026-03-01T03:00:00Z",
                "2026-03-02T03:00:00Z",
            ),
            (
                "0 3 * * MON",
                None,
                "2026-03-01T00:00:00Z",
                "2026-03-02T03:00:00Z",
            ),
            (
                "@daily",
                None,
                "2026-12-31T23:59:59Z",
                "2027-01-01T00:00:00Z",
            ),
            (
                "0 0 29 2 *",
                None,
                "2026-03-01T00:00:00Z",
                "2028-02-29T00:00:00Z",
            ),
            // A time zone: 03:00 in Berlin is 02:00 UTC in winter, 01:00 UTC in summer.
            (
                "0 3 * * *",
                Some("Europe/Berlin"),
                "2026-01-10T12:00:00Z",
                "2026-01-11T02:00:00Z",
            ),
            (
                "0 3 * * *",
                Some("Europe/Berlin"),
                "2026-07-10T12:00:00Z",
                "2026-07-11T01:00:00Z",
            ),
            (
                "30 9 * * *",
                Some("America/New_York"),
                "2026-01-10T15:00:00Z",
                "2026-01-11T14:30:00Z",
            ),
            // 02:30 does not exist in Berlin on 2026-03-29 (clocks go from 02:00 to 03:00).
            (
                "30 2 * * *",
                Some("Europe/Berlin"),
                "2026-03-28T12:00:00Z",
                "2026-03-29T01:00:00Z",
            ),
        ];
        for &(expr, tz, now, want) in cases {
            let schedule = Schedule::parse(expr, tz).unwrap_or_else(|e| panic!("{expr}: {e}"));
            assert_eq!(
                schedule.next_after(ts(now)),
                Some(ts(want)),
                "{expr} in {tz:?} after {now}"
            );
        }
    }

    #[test]
    fn a_schedule_that_never_fires_has_no_next_time() {
        let schedule = Schedule::parse("0 0 30 2 *", None).unwrap();
        assert_eq!(schedule.next_after(ts("2026-01-01T00:00:00Z")), None);
    }

    #[test]
    fn bad_input_is_an_error_naming_the_field() {
        // expression, time zone, what the message says
        let cases: &[(&str, Option<&str>, &str)] = &[
            ("0 25 * * *", None, r#"the hour field "25" is invalid"#),
            ("61 * * * *", None, r#"the minute field "61" is invalid"#),
            (
                "*/10 * * * * MOO",
                None,
                r#"the day-of-week field "MOO" is invalid"#,
            ),
            (
                "0 0 0 * *",
                None,
                r#"the day-of-month field "0" is invalid"#,
            ),
            ("70 * * * * *", None, r#"the second field "70" is invalid"#),
            ("* * * *", None, "it has 4 fields, not 5"),
            ("0 0 * * * * 2026", None, "it has 7 fields, not 5"),
            ("", None, "it has 0 fields"),
            ("often", None, "it has 1 fields"),
            (
                "* * * * *",
                Some("Mars/Olympus"),
                r#"timeZone "Mars/Olympus" is not a known IANA time zone"#,
            ),
        ];
        for &(expr, tz, want) in cases {
            let err = Schedule::parse(expr, tz).expect_err(expr);
            assert!(err.contains(want), "{expr:?}: {err}");
            if tz.is_none() {
                assert!(err.starts_with(&format!("schedule {expr:?}: ")), "{err}");
            }
        }
    }
}
