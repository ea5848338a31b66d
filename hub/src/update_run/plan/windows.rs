//! When a stage may start: the windows of its strategy and its own (`allowedWindows`,
//! `blockedWindows`: a cron `schedule` that opens each window, a `duration`, a `timeZone`).
//! A stage reached outside them waits, after its before-stage tasks and before its first
//! cluster, and the run says until when; a stage already started finishes.

use fleethub_crds::duration;
use fleethub_crds::strategy::{StageConfig, StagedUpdateStrategySpec, TimeWindow};
use jiff::{SignedDuration, Timestamp};

use crate::autoupdate::schedule::Schedule;

/// Firings looked at to find when a window in progress ends (a window of a week opened every
/// minute has 10,080).
const MAX_FIRINGS: usize = 20_000;

/// A window, parsed.
#[derive(Debug, Clone)]
pub struct Window {
    schedule: Schedule,
    length: SignedDuration,
    /// The field and its value, for messages: `stages[2].allowedWindows[0] (0 9 * * 1-5 for 8h)`.
    label: String,
}

impl Window {
    /// Parses `w`, found at `field` of the strategy; an error names the field.
    pub fn parse(field: &str, w: &TimeWindow) -> Result<Window, String> {
        let schedule = Schedule::parse(&w.schedule, w.time_zone.as_deref())
            .map_err(|e| format!("{field}: {e}"))?;
        let length = duration::parse(&w.duration)
            .map_err(|e| format!("{field}.duration: {e}"))
            .and_then(|d| {
                SignedDuration::try_from(d).map_err(|e| format!("{field}.duration: {e}"))
            })?;
        let zone = w
            .time_zone
            .as_deref()
            .map_or(String::new(), |z| format!(" {z}"));
        Ok(Window {
            schedule,
            length,
            label: format!("{field} ({} for {}{zone})", w.schedule, w.duration),
        })
    }

    /// Whether it is open at `t`: it opened within the `duration` before.
    fn open_at(&self, t: Timestamp) -> bool {
        self.schedule
            .next_after(t - self.length)
            .is_some_and(|f| f <= t)
    }

    /// When the opening in progress at `t` ends.
    fn ends_after(&self, t: Timestamp) -> Option<Timestamp> {
        let mut last = None;
        let mut at = t - self.length;
        for _ in 0..MAX_FIRINGS {
            match self.schedule.next_after(at) {
                Some(f) if f <= t => {
                    last = Some(f);
                    at = f;
                }
                _ => break,
            }
        }
        last.map(|f| f + self.length)
    }
}

/// Every window of stage `i` (the strategy's, then the stage's own), parsed: (allowed,
/// blocked), or the first that does not parse.
pub fn of_stage(
    strategy: &StagedUpdateStrategySpec,
    i: usize,
) -> Result<(Vec<Window>, Vec<Window>), String> {
    let stage: Option<&StageConfig> = strategy.stages.get(i);
    let parse = |prefix: String, list: &[TimeWindow]| -> Result<Vec<Window>, String> {
        list.iter()
            .enumerate()
            .map(|(j, w)| Window::parse(&format!("{prefix}[{j}]"), w))
            .collect()
    };
    let mut allowed = parse("allowedWindows".into(), &strategy.windows.allowed_windows)?;
    let mut blocked = parse("blockedWindows".into(), &strategy.windows.blocked_windows)?;
    if let Some(stage) = stage {
        allowed.extend(parse(
            format!("stages[{i}].allowedWindows"),
            &stage.windows.allowed_windows,
        )?);
        blocked.extend(parse(
            format!("stages[{i}].blockedWindows"),
            &stage.windows.blocked_windows,
        )?);
    }
    Ok((allowed, blocked))
}

/// Why a stage may not start at `t`, and when it may next (None: never, as far as its
/// schedules say), or None when it may. The strategy's allowed windows and the stage's are
/// both required where given; any blocked window holds it.
pub fn closed(
    strategy: &StagedUpdateStrategySpec,
    i: usize,
    allowed: &[Window],
    blocked: &[Window],
    t: Timestamp,
) -> Option<(String, Option<Timestamp>)> {
    if let Some(b) = blocked.iter().find(|b| b.open_at(t)) {
        return Some((
            format!("inside blocked window {}", b.label),
            b.ends_after(t),
        ));
    }
    let own = strategy
        .stages
        .get(i)
        .map_or(0, |s| s.windows.allowed_windows.len());
    let (shared, stage) = allowed.split_at(allowed.len() - own);
    for set in [shared, stage] {
        if !set.is_empty() && !set.iter().any(|w| w.open_at(t)) {
            let next = set.iter().filter_map(|w| w.schedule.next_after(t)).min();
            let names: Vec<&str> = set.iter().map(|w| w.label.as_str()).collect();
            return Some((
                format!("outside its allowed windows {}", names.join(", ")),
                next,
            ));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use fleethub_crds::strategy::Windows;

    fn window(schedule: &str, length: &str, zone: Option<&str>) -> TimeWindow {
        TimeWindow {
            schedule: schedule.into(),
            duration: length.into(),
            time_zone: zone.map(str::to_string),
        }
    }

    fn at(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn strategy(stage: StageConfig, shared_allowed: Vec<TimeWindow>) -> StagedUpdateStrategySpec {
        StagedUpdateStrategySpec {
            stages: vec![stage],
            windows: Windows {
                allowed_windows: shared_allowed,
                ..Default::default()
            },
            ..Default::default()
        }
    }

    fn allowed(list: Vec<TimeWindow>) -> Windows {
        Windows {
            allowed_windows: list,
            ..Default::default()
        }
    }

    fn blocked(list: Vec<TimeWindow>) -> Windows {
        Windows {
            blocked_windows: list,
            ..Default::default()
        }
    }

    fn verdict(s: &StagedUpdateStrategySpec, t: &str) -> Option<(String, Option<Timestamp>)> {
        let (allowed, blocked) = of_stage(s, 0).unwrap();
        closed(s, 0, &allowed, &blocked, at(t))
    }

    #[test]
    fn a_weekday_window_opens_at_nine_for_eight_hours_and_names_the_next_opening() {
        let s = strategy(
            StageConfig {
                name: "production".into(),
                windows: allowed(vec![window("0 9 * * 1-5", "8h", None)]),
                ..Default::default()
            },
            Vec::new(),
        );
        // Monday 2026-11-30 10:00 UTC: open.
        assert_eq!(verdict(&s, "2026-11-30T10:00:00Z"), None);
        // Its last second, and its end.
        assert_eq!(verdict(&s, "2026-11-30T16:59:59Z"), None);
        let (why, next) = verdict(&s, "2026-11-30T17:00:00Z").unwrap();
        assert!(
            why.contains("stages[0].allowedWindows[0] (0 9 * * 1-5 for 8h)"),
            "{why}"
        );
        assert_eq!(next, Some(at("2026-12-01T09:00:00Z")));
        // Friday evening: Monday morning next.
        let (_, next) = verdict(&s, "2026-12-04T20:00:00Z").unwrap();
        assert_eq!(next, Some(at("2026-12-07T09:00:00Z")));
    }

    #[test]
    fn a_blocked_window_holds_until_its_end_in_its_time_zone() {
        // Fridays from 15:00 in Berlin (UTC+1 in December) for 3 days.
        let s = strategy(
            StageConfig {
                name: "production".into(),
                windows: blocked(vec![window("0 15 * * 5", "72h", Some("Europe/Berlin"))]),
                ..Default::default()
            },
            Vec::new(),
        );
        assert_eq!(verdict(&s, "2026-12-04T13:59:59Z"), None);
        let (why, until) = verdict(&s, "2026-12-04T14:00:00Z").unwrap();
        assert!(
            why.starts_with("inside blocked window stages[0].blockedWindows[0]"),
            "{why}"
        );
        assert_eq!(until, Some(at("2026-12-07T14:00:00Z")));
        assert_eq!(verdict(&s, "2026-12-07T14:00:00Z"), None);
    }

    #[test]
    fn the_strategys_windows_and_the_stages_must_both_be_open() {
        let s = strategy(
            StageConfig {
                name: "production".into(),
                windows: allowed(vec![window("0 12 * * *", "1h", None)]),
                ..Default::default()
            },
            vec![window("0 9 * * 1-5", "8h", None)],
        );
        assert_eq!(verdict(&s, "2026-11-30T12:30:00Z"), None);
        // The strategy's is open, the stage's not.
        let (why, next) = verdict(&s, "2026-11-30T10:00:00Z").unwrap();
        assert!(why.contains("stages[0].allowedWindows[0]"), "{why}");
        assert_eq!(next, Some(at("2026-11-30T12:00:00Z")));
        // Saturday noon: the stage's is open, the strategy's not.
        let (why, _) = verdict(&s, "2026-12-05T12:30:00Z").unwrap();
        assert!(
            why.contains("outside its allowed windows allowedWindows[0]"),
            "{why}"
        );
    }

    #[test]
    fn a_schedule_that_does_not_parse_is_named() {
        let s = strategy(
            StageConfig {
                name: "production".into(),
                windows: blocked(vec![window("0 25 * * *", "1h", None)]),
                ..Default::default()
            },
            Vec::new(),
        );
        let e = of_stage(&s, 0).unwrap_err();
        assert!(
            e.starts_with("stages[0].blockedWindows[0]: schedule \"0 25 * * *\""),
            "{e}"
        );
    }
}
