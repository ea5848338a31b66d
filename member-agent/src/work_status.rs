//! The status the agent reports on a Work, planned without any I/O from the previous status, what
//! happened to each manifest, and the clock.
//!
//! - `Applied`: `True` when every manifest was applied ("applied 3 manifests of resource
//!   snapshot 2"), else `False`/`ApplyFailed` naming the objects and the API server's errors.
//!   Its `lastTransitionTime` is when the Work's current generation was first applied: it moves
//!   when the status changes *and* when a new generation is applied, and is kept otherwise — so it
//!   is the start of the health timeout, and survives an agent restart.
//! - `Available`: see [`availability::verdict`]; `False`/`NotApplied` while `Applied` is not `True`.
//! - Every condition, the Work's and each manifest's, carries the Work's generation.

use std::time::Duration;

use fleethub_crds::apply_strategy::{DriftCorrection, DriftType, FieldDiff, ManifestDrift};
use fleethub_crds::conditions::{self, NewCondition, set_condition};
use fleethub_crds::work::reason::DIFF_REPORTED;
use fleethub_crds::work::reason::{
    APPLY_FAILED, MANIFEST_APPLIED, MANIFEST_AVAILABLE, MANIFEST_NOT_READY, MANIFESTS_APPLIED,
    NOT_APPLIED,
};
use fleethub_crds::work::{APPLIED, AVAILABLE, ManifestCondition, ManifestIdentifier, WorkStatus};
use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

use crate::availability::{self, Readiness};

/// How many failed manifests the Work's `Applied` message names before counting the rest.
const NAMED_IN_MESSAGE: usize = 3;

/// What happened to one manifest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ManifestReport {
    /// Which manifest.
    pub identifier: ManifestIdentifier,
    /// The applied object's readiness, or why it could not be applied (naming the object).
    pub outcome: Result<Readiness, String>,
    /// The reason when the apply strategy left it unapplied (`Drifted`, `TakeoverRefused`).
    pub refusal: Option<&'static str>,
    /// How the member's object differs from the hub's while it is left so.
    pub drift: Option<(DriftType, usize, Vec<FieldDiff>)>,
    /// The drift the agent just undid.
    pub correction: Option<Vec<FieldDiff>>,
    /// The hub object's hash when the member now has it.
    pub hash: Option<String>,
}

impl ManifestReport {
    /// A report of `outcome` with nothing about drift.
    pub fn new(identifier: ManifestIdentifier, outcome: Result<Readiness, String>) -> Self {
        ManifestReport {
            identifier,
            outcome,
            refusal: None,
            drift: None,
            correction: None,
            hash: None,
        }
    }
}

/// Everything the status depends on.
#[derive(Debug, Clone)]
pub struct StatusInput<'a> {
    /// The status the Work has now.
    pub previous: Option<&'a WorkStatus>,
    /// The Work's `metadata.generation`.
    pub generation: Option<i64>,
    /// The Work's `spec.resourceSnapshotIndex`.
    pub snapshot_index: i64,
    /// The Work's health timeout.
    pub health_timeout: Duration,
    /// One report per manifest, in the Work's order.
    pub reports: &'a [ManifestReport],
    /// The current time.
    pub now: Timestamp,
    /// `applyStrategy.type: ReportDiff`: nothing was applied, differences are reported.
    pub report_only: bool,
}

/// The planned status.
#[derive(Debug, Clone, PartialEq)]
pub struct StatusPlan {
    /// The status to write.
    pub status: WorkStatus,
    /// Whether every manifest was applied.
    pub applied: bool,
    /// When to look again even if nothing changes (the health deadline).
    pub recheck_after: Option<Duration>,
}

/// Plans the Work's status.
pub fn plan(input: &StatusInput<'_>) -> StatusPlan {
    let previous = input.previous.cloned().unwrap_or_default();
    let generation = input.generation;
    let now = input.now;
    let total = input.reports.len();
    let index = input.snapshot_index;

    let manifest_conditions = input
        .reports
        .iter()
        .map(|r| manifest_condition(&previous, r, generation, now, input.report_only))
        .collect();

    let failures: Vec<&str> = input
        .reports
        .iter()
        .filter_map(|r| r.outcome.as_ref().err().map(String::as_str))
        .collect();
    let mut conds = previous.conditions.clone();
    let mut set = |type_, status, reason, message| {
        set_condition(
            &mut conds,
            NewCondition::new(type_, status, reason, message, generation),
            now,
        );
    };

    if failures.is_empty() && input.report_only {
        let differ = input.reports.iter().filter(|r| r.drift.is_some()).count();
        let message = format!(
            "applied nothing (applyStrategy type ReportDiff): {differ} of {total} objects of resource snapshot {index} differ from the hub's"
        );
        set(APPLIED, conditions::TRUE, DIFF_REPORTED, message.clone());
        set(AVAILABLE, conditions::TRUE, DIFF_REPORTED, message);
        return StatusPlan {
            status: WorkStatus {
                conditions: conds,
                applied_resource_snapshot_index: previous.applied_resource_snapshot_index,
                manifest_conditions,
            },
            applied: true,
            recheck_after: None,
        };
    }
    if failures.is_empty() {
        let applied_at = applied_at(&previous.conditions, generation, now);
        set(
            APPLIED,
            conditions::TRUE,
            MANIFESTS_APPLIED,
            format!("applied {total} manifests of resource snapshot {index}"),
        );
        let not_ready: Vec<String> = input
            .reports
            .iter()
            .filter_map(|r| match &r.outcome {
                Ok(Readiness::NotReady(why)) => Some(why.clone()),
                _ => None,
            })
            .collect();
        let verdict = availability::verdict(
            &not_ready,
            total,
            index,
            applied_at,
            input.health_timeout,
            now,
        );
        set(AVAILABLE, verdict.status, verdict.reason, verdict.message);
        if let Some(applied) = conds.iter_mut().find(|c| c.type_ == APPLIED) {
            applied.last_transition_time = Time(applied_at);
        }
        StatusPlan {
            status: WorkStatus {
                conditions: conds,
                applied_resource_snapshot_index: Some(index),
                manifest_conditions,
            },
            applied: true,
            recheck_after: verdict.recheck_after,
        }
    } else {
        let mut named = failures
            .iter()
            .take(NAMED_IN_MESSAGE)
            .copied()
            .collect::<Vec<_>>()
            .join("; ");
        if failures.len() > NAMED_IN_MESSAGE {
            named.push_str(&format!("; and {} more", failures.len() - NAMED_IN_MESSAGE));
        }
        let refusals: Vec<Option<&'static str>> = input
            .reports
            .iter()
            .filter(|r| r.outcome.is_err())
            .map(|r| r.refusal)
            .collect();
        let (reason, message) = match refusals.first() {
            Some(Some(r)) if refusals.iter().all(|x| x == &Some(*r)) => (
                *r,
                format!(
                    "{} of {total} manifests of resource snapshot {index} are not applied: {named}",
                    failures.len()
                ),
            ),
            _ => (
                APPLY_FAILED,
                format!(
                    "failed to apply {} of {total} manifests of resource snapshot {index}: {named}",
                    failures.len()
                ),
            ),
        };
        set(APPLIED, conditions::FALSE, reason, message);
        set(
            AVAILABLE,
            conditions::FALSE,
            NOT_APPLIED,
            format!("resource snapshot {index} is not fully applied yet"),
        );
        StatusPlan {
            status: WorkStatus {
                conditions: conds,
                // Still the last snapshot that was applied in full.
                applied_resource_snapshot_index: previous.applied_resource_snapshot_index,
                manifest_conditions,
            },
            applied: false,
            recheck_after: None,
        }
    }
}

/// When the Work's current generation was first applied: the previous `Applied=True`'s
/// transition time if it is about this generation, else now.
pub fn applied_at(previous: &[Condition], generation: Option<i64>, now: Timestamp) -> Timestamp {
    match conditions::find(previous, APPLIED) {
        Some(c) if c.status == conditions::TRUE && c.observed_generation == generation => {
            c.last_transition_time.0
        }
        _ => now,
    }
}

fn manifest_condition(
    previous: &WorkStatus,
    report: &ManifestReport,
    generation: Option<i64>,
    now: Timestamp,
    report_only: bool,
) -> ManifestCondition {
    let before = previous
        .manifest_conditions
        .iter()
        .find(|m| m.identifier == report.identifier);
    let mut conds = before.map(|m| m.conditions.clone()).unwrap_or_default();
    let mut set = |type_, status, reason, message: &str| {
        set_condition(
            &mut conds,
            NewCondition::new(type_, status, reason, message.to_string(), generation),
            now,
        );
    };
    match &report.outcome {
        Ok(_) if report_only => {
            let message =
                "nothing applied (applyStrategy type ReportDiff); compared with the hub's";
            set(APPLIED, conditions::TRUE, DIFF_REPORTED, message);
            set(AVAILABLE, conditions::TRUE, DIFF_REPORTED, message);
        }
        Ok(readiness) => {
            set(
                APPLIED,
                conditions::TRUE,
                MANIFEST_APPLIED,
                "applied to the member cluster",
            );
            match readiness {
                Readiness::Ready => {
                    set(AVAILABLE, conditions::TRUE, MANIFEST_AVAILABLE, "available")
                }
                Readiness::NotReady(why) => {
                    set(AVAILABLE, conditions::FALSE, MANIFEST_NOT_READY, why)
                }
            }
        }
        Err(why) => {
            set(
                APPLIED,
                conditions::FALSE,
                report.refusal.unwrap_or(APPLY_FAILED),
                why,
            );
            set(
                AVAILABLE,
                conditions::UNKNOWN,
                NOT_APPLIED,
                "not applied, so its availability is unknown",
            );
        }
    }
    let drift = report.drift.as_ref().map(|(why, count, fields)| {
        // First seen: kept while the object keeps differing the same way.
        let first_seen = before
            .and_then(|m| m.drift.as_ref())
            .filter(|d| d.type_ == *why)
            .map_or(Time(now), |d| d.first_seen_time.clone());
        ManifestDrift {
            type_: *why,
            first_seen_time: first_seen,
            field_count: i32::try_from(*count).unwrap_or(i32::MAX),
            fields: fields.clone(),
        }
    });
    let last_correction = match &report.correction {
        Some(fields) => Some(DriftCorrection {
            time: Time(now),
            fields: fields.clone(),
        }),
        None => before.and_then(|m| m.last_correction.clone()),
    };
    ManifestCondition {
        identifier: report.identifier.clone(),
        conditions: conds,
        drift,
        last_correction,
        applied_hash: report
            .hash
            .clone()
            .or_else(|| before.and_then(|m| m.applied_hash.clone())),
    }
}

/// Whether `next` differs from `previous` only in condition messages (a workload's progress, which
/// [`crate::status_writes`] writes at most once a second): every condition of the Work
/// and of each manifest keeps its status, reason, generation and transition time, and nothing
/// else (drift, corrections, hashes, the snapshot index) changes.
pub fn only_messages_differ(previous: &WorkStatus, next: &WorkStatus) -> bool {
    let without_messages = |s: &WorkStatus| with_each_condition(s, |c| c.message.clear());
    previous != next && without_messages(previous) == without_messages(next)
}

/// A copy of `status` with `change` made to each condition, of the Work and of every manifest.
pub fn with_each_condition(
    status: &WorkStatus,
    mut change: impl FnMut(&mut fleethub_crds::conditions::Condition),
) -> WorkStatus {
    let mut status = status.clone();
    let manifest_conditions = status
        .manifest_conditions
        .iter_mut()
        .flat_map(|m| m.conditions.iter_mut());
    for c in status.conditions.iter_mut().chain(manifest_conditions) {
        change(c);
    }
    status
}

#[cfg(test)]
mod tests {
    use super::*;
    use fleethub_crds::work::reason::{HEALTH_TIMEOUT, WORKLOADS_AVAILABLE, WORKLOADS_NOT_READY};

    #[test]
    fn progress_alone_is_told_apart_from_a_change_of_state() {
        let progress = |ready: &str| {
            reports(Ok(Readiness::NotReady(format!(
                "deployment app/web: {ready}/2 replicas ready"
            ))))
        };
        let first = plan(&input(None, 1, &progress("0"), 100)).status;
        let r = progress("1");
        let second = plan(&input(Some(&first), 1, &r, 101)).status;
        assert!(only_messages_differ(&first, &second));
        // Nothing changed: not a write at all.
        assert!(!only_messages_differ(&first, &first));
        // Available: a change of state, written at once.
        let r = reports(Ok(Readiness::Ready));
        let available = plan(&input(Some(&second), 1, &r, 102)).status;
        assert!(!only_messages_differ(&second, &available));
        // A new generation applied: a change of state.
        let r = progress("0");
        let next_generation = plan(&input(Some(&second), 2, &r, 103)).status;
        assert!(!only_messages_differ(&second, &next_generation));
    }

    fn ts(secs: i64) -> Timestamp {
        Timestamp::from_second(secs).unwrap()
    }

    fn id(ordinal: i32, kind: &str, name: &str) -> ManifestIdentifier {
        ManifestIdentifier {
            ordinal,
            group: if kind == "Deployment" { "apps" } else { "" }.into(),
            version: "v1".into(),
            kind: kind.into(),
            namespace: (kind != "Namespace").then(|| "app".to_string()),
            name: name.into(),
        }
    }

    fn reports(web: Result<Readiness, String>) -> Vec<ManifestReport> {
        vec![
            ManifestReport::new(id(0, "Namespace", "app"), Ok(Readiness::Ready)),
            ManifestReport::new(id(1, "ConfigMap", "config"), Ok(Readiness::Ready)),
            ManifestReport::new(id(2, "Deployment", "web"), web),
        ]
    }

    fn input<'a>(
        previous: Option<&'a WorkStatus>,
        generation: i64,
        reports: &'a [ManifestReport],
        now: i64,
    ) -> StatusInput<'a> {
        StatusInput {
            previous,
            generation: Some(generation),
            snapshot_index: 2,
            health_timeout: Duration::from_secs(10),
            reports,
            now: ts(now),
            report_only: false,
        }
    }

    fn cond<'a>(status: &'a WorkStatus, type_: &str) -> &'a Condition {
        conditions::find(&status.conditions, type_).unwrap()
    }

    fn not_ready() -> Result<Readiness, String> {
        Ok(Readiness::NotReady(
            "deployment app/web: 0/2 replicas ready".into(),
        ))
    }

    #[test]
    fn applied_and_available() {
        let r = reports(Ok(Readiness::Ready));
        let p = plan(&input(None, 1, &r, 100));
        assert!(p.applied);
        assert_eq!(p.recheck_after, None);
        assert_eq!(p.status.applied_resource_snapshot_index, Some(2));
        let applied = cond(&p.status, APPLIED);
        assert_eq!(
            (
                applied.status.as_str(),
                applied.reason.as_str(),
                applied.message.as_str()
            ),
            (
                "True",
                MANIFESTS_APPLIED,
                "applied 3 manifests of resource snapshot 2"
            )
        );
        assert_eq!(applied.observed_generation, Some(1));
        let available = cond(&p.status, AVAILABLE);
        assert_eq!(
            (available.status.as_str(), available.reason.as_str()),
            ("True", WORKLOADS_AVAILABLE)
        );
        assert_eq!(p.status.manifest_conditions.len(), 3);
        for m in &p.status.manifest_conditions {
            assert!(conditions::is_true(&m.conditions, APPLIED), "{m:?}");
            assert!(conditions::is_true(&m.conditions, AVAILABLE), "{m:?}");
            assert!(
                m.conditions
                    .iter()
                    .all(|c| c.observed_generation == Some(1))
            );
        }
    }

    #[test]
    fn health_timeout_runs_from_when_the_generation_was_applied() {
        let r = reports(not_ready());
        // Applied at 100: not ready, look again at the deadline.
        let first = plan(&input(None, 1, &r, 100));
        let available = cond(&first.status, AVAILABLE);
        assert_eq!(
            (
                available.status.as_str(),
                available.reason.as_str(),
                available.message.as_str()
            ),
            (
                "False",
                WORKLOADS_NOT_READY,
                "deployment app/web: 0/2 replicas ready"
            )
        );
        assert_eq!(first.recheck_after, Some(Duration::from_secs(10)));
        let web = &first.status.manifest_conditions[2];
        let web_available = conditions::find(&web.conditions, AVAILABLE).unwrap();
        assert_eq!(
            (web_available.status.as_str(), web_available.reason.as_str()),
            ("False", MANIFEST_NOT_READY)
        );

        // Re-applied at 105 (e.g. by a restarted agent): the deadline does not move.
        let again = plan(&input(Some(&first.status), 1, &r, 105));
        assert_eq!(
            cond(&again.status, APPLIED).last_transition_time,
            Time(ts(100))
        );
        assert_eq!(again.recheck_after, Some(Duration::from_secs(5)));
        assert_eq!(again.status, first.status, "nothing to write");

        // At the deadline: HealthTimeout.
        let late = plan(&input(Some(&again.status), 1, &r, 110));
        let available = cond(&late.status, AVAILABLE);
        assert_eq!(available.reason, HEALTH_TIMEOUT);
        assert!(
            available
                .message
                .contains("deployment app/web: 0/2 replicas ready"),
            "{}",
            available.message
        );
        assert_eq!(late.recheck_after, None);

        // A new generation restarts the clock, though Applied stays True.
        let next = plan(&input(Some(&late.status), 2, &r, 200));
        let applied = cond(&next.status, APPLIED);
        assert_eq!(applied.last_transition_time, Time(ts(200)));
        assert_eq!(applied.observed_generation, Some(2));
        assert_eq!(cond(&next.status, AVAILABLE).reason, WORKLOADS_NOT_READY);
        assert_eq!(next.recheck_after, Some(Duration::from_secs(10)));
    }

    #[test]
    fn apply_failure_names_the_object_and_keeps_the_last_applied_index() {
        let good = plan(&input(None, 1, &reports(Ok(Readiness::Ready)), 100));
        let r = reports(Err(
            "Deployment app/web: Deployment.apps \"web\" is invalid: spec.replicas: Invalid value: -1".into(),
        ));
        let mut i = input(Some(&good.status), 2, &r, 150);
        i.snapshot_index = 3;
        let p = plan(&i);
        assert!(!p.applied);
        let applied = cond(&p.status, APPLIED);
        assert_eq!(
            (
                applied.status.as_str(),
                applied.reason.as_str(),
                applied.message.as_str()
            ),
            (
                "False",
                APPLY_FAILED,
                "failed to apply 1 of 3 manifests of resource snapshot 3: Deployment app/web: Deployment.apps \"web\" is invalid: spec.replicas: Invalid value: -1"
            )
        );
        assert_eq!(applied.last_transition_time, Time(ts(150)));
        assert_eq!(applied.observed_generation, Some(2));
        assert_eq!(cond(&p.status, AVAILABLE).reason, NOT_APPLIED);
        assert_eq!(p.status.applied_resource_snapshot_index, Some(2));
        let web = &p.status.manifest_conditions[2];
        assert!(conditions::is_false(&web.conditions, APPLIED));
        assert_eq!(
            conditions::find(&web.conditions, AVAILABLE).unwrap().status,
            conditions::UNKNOWN
        );
        // The other manifests keep their transition times.
        let ns = &p.status.manifest_conditions[0];
        assert_eq!(
            conditions::find(&ns.conditions, APPLIED)
                .unwrap()
                .last_transition_time,
            Time(ts(100))
        );

        // Fixed: applied again, and the health clock starts now.
        let fixed = plan(&input(Some(&p.status), 3, &reports(not_ready()), 160));
        assert_eq!(
            cond(&fixed.status, APPLIED).last_transition_time,
            Time(ts(160))
        );
    }

    #[test]
    fn drift_left_and_corrections_are_recorded_with_when_first_seen() {
        let field = |path: &str| FieldDiff {
            path: path.into(),
            member_value: Some("\"hi\"".into()),
            hub_value: Some("\"hello\"".into()),
        };
        let mut r = reports(Ok(Readiness::Ready));
        r[1] = ManifestReport {
            refusal: Some(fleethub_crds::work::reason::DRIFTED),
            drift: Some((DriftType::Drifted, 1, vec![field("data.greeting")])),
            ..ManifestReport::new(
                id(1, "ConfigMap", "config"),
                Err("ConfigMap app/config was changed on the member".into()),
            )
        };
        r[2].hash = Some("abc".into());
        let first = plan(&input(None, 1, &r, 100));
        let applied = cond(&first.status, APPLIED);
        assert_eq!(
            (applied.status.as_str(), applied.reason.as_str()),
            ("False", "Drifted")
        );
        assert_eq!(
            applied.message,
            "1 of 3 manifests of resource snapshot 2 are not applied: ConfigMap app/config was changed on the member"
        );
        let drift = first.status.manifest_conditions[1].drift.clone().unwrap();
        assert_eq!(drift.first_seen_time, Time(ts(100)));
        assert_eq!(drift.fields, vec![field("data.greeting")]);
        assert_eq!(
            first.status.manifest_conditions[2].applied_hash.as_deref(),
            Some("abc")
        );
        // Still drifted later: first seen stays; the hash of the last apply is kept.
        r[2].hash = None;
        let later = plan(&input(Some(&first.status), 1, &r, 160));
        let drift = later.status.manifest_conditions[1].drift.clone().unwrap();
        assert_eq!(drift.first_seen_time, Time(ts(100)));
        assert_eq!(
            later.status.manifest_conditions[2].applied_hash.as_deref(),
            Some("abc")
        );
        // Corrected (whenToApply Always): the drift is gone and the correction recorded.
        let mut r = reports(Ok(Readiness::Ready));
        r[1].correction = Some(vec![field("data.greeting")]);
        let corrected = plan(&input(Some(&later.status), 1, &r, 200));
        let m = &corrected.status.manifest_conditions[1];
        assert_eq!(m.drift, None);
        assert_eq!(m.last_correction.as_ref().unwrap().time, Time(ts(200)));
        assert_eq!(cond(&corrected.status, APPLIED).status, "True");
        // And kept afterwards.
        let after = plan(&input(
            Some(&corrected.status),
            1,
            &reports(Ok(Readiness::Ready)),
            300,
        ));
        assert_eq!(
            after.status.manifest_conditions[1].last_correction,
            m.last_correction
        );
    }

    #[test]
    fn report_diff_applies_nothing_and_says_how_many_differ() {
        let mut r = reports(Ok(Readiness::Ready));
        r[2].drift = Some((DriftType::Diffed, 2, vec![]));
        let mut i = input(None, 1, &r, 100);
        i.report_only = true;
        let p = plan(&i);
        let applied = cond(&p.status, APPLIED);
        assert_eq!(applied.reason, "DiffReported");
        assert_eq!(
            applied.message,
            "applied nothing (applyStrategy type ReportDiff): 1 of 3 objects of resource snapshot 2 differ from the hub's"
        );
        assert_eq!(cond(&p.status, AVAILABLE).status, "True");
        assert_eq!(
            p.status.manifest_conditions[2]
                .drift
                .as_ref()
                .unwrap()
                .type_,
            DriftType::Diffed
        );
    }

    #[test]
    fn many_failures_are_summarized() {
        let r: Vec<ManifestReport> = (0..5)
            .map(|i| {
                ManifestReport::new(
                    id(i, "ConfigMap", &format!("c{i}")),
                    Err(format!("ConfigMap app/c{i}: forbidden")),
                )
            })
            .collect();
        let p = plan(&input(None, 1, &r, 100));
        assert_eq!(
            cond(&p.status, APPLIED).message,
            "failed to apply 5 of 5 manifests of resource snapshot 2: ConfigMap app/c0: forbidden; ConfigMap app/c1: forbidden; ConfigMap app/c2: forbidden; and 2 more"
        );
        assert_eq!(p.status.applied_resource_snapshot_index, None);
    }

    #[test]
    fn an_empty_work_is_applied_and_available() {
        let p = plan(&input(None, 1, &[], 100));
        assert_eq!(
            cond(&p.status, APPLIED).message,
            "applied 0 manifests of resource snapshot 2"
        );
        assert!(conditions::is_true(&p.status.conditions, AVAILABLE));
    }
}
