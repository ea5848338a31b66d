//! A metric gate (a Prometheus query that must pass several checks in a row) as a pure state
//! machine, shared by the hub's UpdateRun MetricCheck tasks and the member agent's checks: after
//! `initialDelay`, a check every `interval`; a check that returns data passes, an empty result
//! or an error fails and starts the count again; `successThreshold` consecutive passes open the
//! gate; past `timeout` it fails. All its state is in [`MetricCheckStatus`], which the owner
//! keeps in its object's status, so a restarted controller continues the count.
//!
//! The query itself is made by `fleethub_runtime::prometheus`; this module does no I/O.

use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::KubeSchema;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::duration;
use crate::strategy::MetricCheck;

/// The checks of a metric gate so far: everything the gate decides on after a restart.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct MetricCheckStatus {
    /// The query as sent, its placeholders expanded (in an UpdateRun: `$clusters`, `$stage` and
    /// `$run`).
    pub query: String,
    /// When the gate was reached; initialDelay and timeout count from here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<Time>,
    /// Consecutive passing checks, up to successThreshold.
    #[serde(default)]
    pub consecutive_passes: i32,
    /// For a stage's background analysis: consecutive checks without data, up to failureLimit.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub consecutive_failures: i32,
    /// `Pass` (data), `NoData` or `Error` (Prometheus unreachable or the query refused).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_result: Option<MetricCheckResult>,
    /// The first sample's value of the last passing check, or what went wrong.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_value: Option<String>,
    /// When the last check was made.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_check_time: Option<Time>,
    /// When the next check is due.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_check_time: Option<Time>,
}

/// The outcome of one metric check.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
pub enum MetricCheckResult {
    /// The query returned data.
    Pass,
    /// The query returned no data.
    NoData,
    /// Prometheus could not be reached or refused the query.
    Error,
}

/// Checks every 30 s unless the task says otherwise.
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(30);

/// What one query returned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum QueryOutcome {
    /// Data: the first sample's value.
    Data(String),
    /// An empty result.
    NoData,
    /// Prometheus could not be reached or refused the query (the message says which).
    Error(String),
}

/// A MetricCheck's settings, read (validated at initialization).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Settings {
    /// Before the first check.
    pub initial_delay: Duration,
    /// Between checks.
    pub interval: Duration,
    /// Consecutive passes that open the gate.
    pub success_threshold: i32,
    /// The most the gate may wait.
    pub timeout: Option<Duration>,
}

impl Settings {
    /// Reads a task's settings; the error names the field.
    pub fn of(spec: &MetricCheck) -> Result<Self, String> {
        let read = |field: &str, v: &Option<String>| {
            v.as_deref()
                .map(duration::parse)
                .transpose()
                .map_err(|e| format!("metricCheck.{field}: {e}"))
        };
        Ok(Self {
            initial_delay: read("initialDelay", &spec.initial_delay)?.unwrap_or_default(),
            interval: read("interval", &spec.interval)?.unwrap_or(DEFAULT_INTERVAL),
            success_threshold: spec.success_threshold.unwrap_or(1).max(1),
            timeout: read("timeout", &spec.timeout)?,
        })
    }
}

/// Where the gate is after a step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// successThreshold consecutive checks passed.
    Passed,
    /// A check is due: query Prometheus and step again with the outcome.
    Query,
    /// Nothing to do until `until`; `failing` when the last check did not pass.
    Wait {
        /// When to look again.
        until: Timestamp,
        /// The last check failed.
        failing: bool,
    },
    /// Not passed within the timeout.
    TimedOut,
}

/// Advances the gate at `now`, with the outcome of a query made now if one was asked for.
/// `status.start_time` must be set (when the gate was reached).
pub fn step(
    settings: &Settings,
    status: &mut MetricCheckStatus,
    now: Timestamp,
    outcome: Option<&QueryOutcome>,
) -> Step {
    if status.consecutive_passes >= settings.success_threshold {
        return Step::Passed;
    }
    let start = status.start_time.as_ref().map_or(now, |t| t.0);
    let deadline = settings.timeout.map(|t| add(start, t));
    if deadline.is_some_and(|d| now >= d) {
        return Step::TimedOut;
    }
    let due = status
        .next_check_time
        .as_ref()
        .map_or(add(start, settings.initial_delay), |t| t.0);
    let failing = matches!(
        status.last_result,
        Some(MetricCheckResult::NoData | MetricCheckResult::Error)
    );
    if now < due {
        let until = deadline.map_or(due, |d| d.min(due));
        return Step::Wait { until, failing };
    }
    let Some(outcome) = outcome else {
        return Step::Query;
    };
    let (result, value) = match outcome {
        QueryOutcome::Data(v) => (MetricCheckResult::Pass, v.clone()),
        QueryOutcome::NoData => (MetricCheckResult::NoData, "no data".to_string()),
        QueryOutcome::Error(e) => (MetricCheckResult::Error, e.clone()),
    };
    status.consecutive_passes = match result {
        MetricCheckResult::Pass => status.consecutive_passes + 1,
        MetricCheckResult::NoData | MetricCheckResult::Error => 0,
    };
    status.last_result = Some(result);
    status.last_value = Some(value);
    status.last_check_time = Some(Time(now));
    let next = add(now, settings.interval);
    status.next_check_time = Some(Time(next));
    if status.consecutive_passes >= settings.success_threshold {
        return Step::Passed;
    }
    Step::Wait {
        until: deadline.map_or(next, |d| d.min(next)),
        failing: result != MetricCheckResult::Pass,
    }
}

/// Where a background analysis is after a step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AnalysisStep {
    /// A check is due: query Prometheus and step again with the outcome.
    Query,
    /// Nothing to do until `until`.
    Wait {
        /// When the next check is due.
        until: Timestamp,
    },
    /// `failureLimit` consecutive checks returned no data.
    Failed,
}

/// Advances a stage's background analysis at `now`, with the outcome of a query made now if
/// one was asked for: after `initialDelay`, a check every `interval`; data resets the failure
/// count, no data adds one, an error (Prometheus unreachable, the query refused) is recorded
/// and counts neither way; `failure_limit` consecutive failures fail it.
/// `status.start_time` must be set (when the stage started).
pub fn analysis_step(
    settings: &Settings,
    failure_limit: i32,
    status: &mut MetricCheckStatus,
    now: Timestamp,
    outcome: Option<&QueryOutcome>,
) -> AnalysisStep {
    let limit = failure_limit.max(1);
    if status.consecutive_failures >= limit {
        return AnalysisStep::Failed;
    }
    let start = status.start_time.as_ref().map_or(now, |t| t.0);
    let due = status
        .next_check_time
        .as_ref()
        .map_or(add(start, settings.initial_delay), |t| t.0);
    if now < due {
        return AnalysisStep::Wait { until: due };
    }
    let Some(outcome) = outcome else {
        return AnalysisStep::Query;
    };
    let (result, value) = match outcome {
        QueryOutcome::Data(v) => (MetricCheckResult::Pass, v.clone()),
        QueryOutcome::NoData => (MetricCheckResult::NoData, "no data".to_string()),
        QueryOutcome::Error(e) => (MetricCheckResult::Error, e.clone()),
    };
    match result {
        MetricCheckResult::Pass => status.consecutive_failures = 0,
        MetricCheckResult::NoData => status.consecutive_failures += 1,
        MetricCheckResult::Error => {}
    }
    status.last_result = Some(result);
    status.last_value = Some(value);
    status.last_check_time = Some(Time(now));
    let next = add(now, settings.interval);
    status.next_check_time = Some(Time(next));
    if status.consecutive_failures >= limit {
        return AnalysisStep::Failed;
    }
    AnalysisStep::Wait { until: next }
}

fn is_zero(n: &i32) -> bool {
    *n == 0
}

/// `query` with each `$name` of `placeholders` replaced by its value, in the order given (put a
/// name before any other name it is a prefix of).
pub fn expand(query: &str, placeholders: &[(&str, &str)]) -> String {
    placeholders
        .iter()
        .fold(query.to_string(), |q, (name, value)| {
            q.replace(&format!("${name}"), value)
        })
}

/// A PromQL regex matching exactly `names` (`a|b|c`), for a placeholder like `$clusters`. The
/// names must be DNS labels or subdomains (cluster, pod and object names are), whose only
/// regex metacharacter, `.`, still matches itself.
pub fn any_of(names: &[String]) -> String {
    names.join("|")
}

fn add(t: Timestamp, d: Duration) -> Timestamp {
    t.checked_add(d).unwrap_or(t)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(secs: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + secs).unwrap()
    }

    fn settings(delay: u64, interval: u64, threshold: i32, timeout: Option<u64>) -> Settings {
        Settings {
            initial_delay: Duration::from_secs(delay),
            interval: Duration::from_secs(interval),
            success_threshold: threshold,
            timeout: timeout.map(Duration::from_secs),
        }
    }

    fn reached(at: i64) -> MetricCheckStatus {
        MetricCheckStatus {
            query: "up".into(),
            start_time: Some(Time(t(at))),
            ..Default::default()
        }
    }

    fn pass() -> QueryOutcome {
        QueryOutcome::Data("1".into())
    }

    #[test]
    fn waits_the_initial_delay_then_checks_every_interval_until_the_threshold() {
        let s = settings(30, 15, 3, None);
        let mut st = reached(0);
        assert_eq!(
            step(&s, &mut st, t(10), None),
            Step::Wait {
                until: t(30),
                failing: false
            }
        );
        assert_eq!(step(&s, &mut st, t(30), None), Step::Query);
        assert_eq!(
            step(&s, &mut st, t(30), Some(&pass())),
            Step::Wait {
                until: t(45),
                failing: false
            }
        );
        assert_eq!(st.consecutive_passes, 1);
        assert_eq!(st.last_value.as_deref(), Some("1"));
        // Asked again before the interval: nothing to do, the count is not advanced early.
        assert!(matches!(
            step(&s, &mut st, t(40), Some(&pass())),
            Step::Wait { .. }
        ));
        assert_eq!(st.consecutive_passes, 1);
        assert!(matches!(
            step(&s, &mut st, t(45), Some(&pass())),
            Step::Wait { .. }
        ));
        assert_eq!(step(&s, &mut st, t(60), Some(&pass())), Step::Passed);
        assert_eq!(st.consecutive_passes, 3);
        // Once passed, it stays passed.
        assert_eq!(step(&s, &mut st, t(1000), None), Step::Passed);
    }

    #[test]
    fn a_failing_check_resets_the_count_and_an_error_never_passes() {
        let s = settings(0, 10, 2, None);
        let mut st = reached(0);
        step(&s, &mut st, t(0), Some(&pass()));
        assert_eq!(st.consecutive_passes, 1);
        assert_eq!(
            step(&s, &mut st, t(10), Some(&QueryOutcome::NoData)),
            Step::Wait {
                until: t(20),
                failing: true
            }
        );
        assert_eq!(st.consecutive_passes, 0);
        assert_eq!(st.last_result, Some(MetricCheckResult::NoData));
        let refused = QueryOutcome::Error("connection refused".into());
        step(&s, &mut st, t(20), Some(&refused));
        assert_eq!(st.consecutive_passes, 0);
        assert_eq!(st.last_value.as_deref(), Some("connection refused"));
        step(&s, &mut st, t(30), Some(&pass()));
        assert_eq!(step(&s, &mut st, t(40), Some(&pass())), Step::Passed);
    }

    #[test]
    fn times_out_from_when_the_gate_was_reached() {
        let s = settings(0, 60, 1, Some(90));
        let mut st = reached(0);
        step(&s, &mut st, t(0), Some(&QueryOutcome::NoData));
        // The next check would be at 60; the timeout comes first for the one after.
        assert_eq!(
            step(&s, &mut st, t(60), Some(&QueryOutcome::NoData)),
            Step::Wait {
                until: t(90),
                failing: true
            }
        );
        assert_eq!(step(&s, &mut st, t(90), None), Step::TimedOut);
    }

    #[test]
    fn a_restart_continues_the_count_from_status() {
        let s = settings(0, 10, 3, None);
        let mut st = reached(0);
        step(&s, &mut st, t(0), Some(&pass()));
        step(&s, &mut st, t(10), Some(&pass()));
        // What a restarted hub reads back: the same status, serialized and parsed.
        let mut again: MetricCheckStatus =
            serde_json::from_value(serde_json::to_value(&st).unwrap()).unwrap();
        assert!(matches!(
            step(&s, &mut again, t(15), Some(&pass())),
            Step::Wait { .. }
        ));
        assert_eq!(step(&s, &mut again, t(20), Some(&pass())), Step::Passed);
    }

    #[test]
    fn placeholders_expand_in_order() {
        let q = r#"sum(rate(errors{cluster=~"$clusters",stage="$stage",run="$run"}[5m])) < 0.01"#;
        let clusters = any_of(&["a-1".into(), "b-2".into()]);
        assert_eq!(
            expand(
                q,
                &[("clusters", &clusters), ("stage", "canary"), ("run", "r1")]
            ),
            r#"sum(rate(errors{cluster=~"a-1|b-2",stage="canary",run="r1"}[5m])) < 0.01"#
        );
    }

    #[test]
    fn settings_default_and_name_a_bad_field() {
        let spec = MetricCheck {
            url: "http://p".into(),
            query: "up".into(),
            ..Default::default()
        };
        assert_eq!(Settings::of(&spec).unwrap(), settings(0, 30, 1, None));
        let bad = MetricCheck {
            interval: Some("soon".into()),
            ..spec
        };
        assert!(
            Settings::of(&bad)
                .unwrap_err()
                .contains("metricCheck.interval")
        );
    }
}
