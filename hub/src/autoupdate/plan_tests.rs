//! The auto-update plan, step by step: checks on schedule, an update's phases, success,
//! rollback, the circuit breaker, a person's reset and a person's own version.

use fleethub_crds::auto_update::{
    APPLYING_DEADLINE_SECONDS, AutoUpdatePolicySpec, AutoUpdatePolicyStatus, CIRCUIT_OPEN,
    InFlightPhase, READY, UPDATING, VersionOutcome, reason,
};
use fleethub_crds::conditions::find;
use jiff::{SignedDuration, Timestamp};

use super::plan::*;

const IMAGE: &str = "127.0.0.1:17300/web:1.0.0";

fn spec() -> AutoUpdatePolicySpec {
    serde_json::from_value(serde_json::json!({
        "placementName": "web",
        "target": {"kind": "Deployment", "namespace": "web", "name": "web", "container": "web"},
        "schedule": "*/10 * * * * *",
        "versionConstraint": ">=1.0.0, <2",
        "stagedRolloutStrategyName": "three-stage",
        "maxRollbacks": 2,
    }))
    .unwrap()
}

fn t0() -> Timestamp {
    "2026-11-23T10:00:00Z".parse().unwrap()
}

fn quiet() -> PlacementView {
    PlacementView {
        latest_index: Some(4),
        settled: true,
        available: true,
        unsettled_because: String::new(),
        frozen: None,
    }
}

fn target(image: &str) -> TargetView {
    let tag = image.rsplit(':').next().map(str::to_string);
    TargetView {
        image: image.into(),
        tag,
        digest_pinned: image.contains("@sha256:"),
    }
}

/// A world the tests change a field at a time.
struct World {
    spec: AutoUpdatePolicySpec,
    status: AutoUpdatePolicyStatus,
    now: Timestamp,
    target: TargetView,
    placement: PlacementView,
    snapshot_with_image: Option<i64>,
    update_run: RunOutcome,
    update_run_rollback: Option<String>,
    rollback_run: RunOutcome,
    registry: Result<Option<String>, String>,
    check_request: Option<String>,
    reset_request: Option<String>,
    retry_request: Option<String>,
}

impl World {
    fn new() -> Self {
        Self {
            spec: spec(),
            status: AutoUpdatePolicyStatus::default(),
            now: t0(),
            target: target(IMAGE),
            placement: quiet(),
            snapshot_with_image: None,
            update_run: RunOutcome::Missing,
            update_run_rollback: Some("web-1-2-0-rollback".into()),
            rollback_run: RunOutcome::Missing,
            registry: Ok(None),
            check_request: None,
            reset_request: None,
            retry_request: None,
        }
    }

    fn observed(&self, registry: Option<Result<Option<String>, String>>) -> Observed<'_> {
        Observed {
            name: "web",
            generation: Some(1),
            spec: &self.spec,
            status: &self.status,
            check_request: self.check_request.as_deref(),
            reset_request: self.reset_request.as_deref(),
            retry_request: self.retry_request.as_deref(),
            now: self.now,
            next_tick: Ok(Some(self.now + SignedDuration::from_secs(10))),
            constraint: Ok(()),
            target: Ok(self.target.clone()),
            placement: Ok(self.placement.clone()),
            snapshot_with_image: self.snapshot_with_image,
            update_run: self.update_run.clone(),
            update_run_rollback: self.update_run_rollback.clone(),
            rollback_run: self.rollback_run.clone(),
            registry,
        }
    }

    /// One reconcile: plans (checking the registry when asked), keeps the status, returns the
    /// actions and the events' reasons.
    fn step(&mut self) -> (Vec<Action>, Vec<&'static str>, bool) {
        let mut checked = false;
        let mut plan = plan(&self.observed(None));
        if plan == Plan::CheckRegistry {
            checked = true;
            plan = super::plan::plan(&self.observed(Some(self.registry.clone())));
        }
        let Plan::Step(step) = plan else {
            panic!("asked to check twice");
        };
        let Step {
            status,
            actions,
            notes,
            ..
        } = *step;
        self.status = status;
        (actions, notes.iter().map(|n| n.reason).collect(), checked)
    }

    fn reason(&self, type_: &str) -> String {
        find(&self.status.conditions, type_)
            .map(|c| c.reason.clone())
            .unwrap_or_default()
    }

    fn later(&mut self, secs: i64) {
        self.now += SignedDuration::from_secs(secs);
    }
}

#[test]
fn the_first_reconcile_adopts_the_running_version_and_checks() {
    let mut w = World::new();
    let (actions, _, checked) = w.step();
    assert!(checked);
    assert!(actions.is_empty());
    assert_eq!(w.status.current_version.as_deref(), Some("1.0.0"));
    assert_eq!(w.reason(READY), reason::READY);
    assert_eq!(w.reason(UPDATING), reason::IDLE);
    assert_eq!(w.status.last_check_time.as_ref().map(|t| t.0), Some(t0()));
    // Not due again before the next tick, unless a person asks.
    w.later(5);
    assert!(!w.step().2);
    w.check_request = Some("now".into());
    assert!(w.step().2);
    assert!(!w.step().2, "a request is acted on once");
    // The asked check moved the next tick to 10 s after it.
    w.later(9);
    assert!(!w.step().2);
    w.later(1);
    assert!(w.step().2, "due at the next tick");
}

#[test]
fn a_version_goes_through_applying_and_rolling_out_to_healthy() {
    let mut w = World::new();
    w.step();
    w.registry = Ok(Some("1.2.0".into()));
    w.check_request = Some("1".into());
    let (actions, notes, _) = w.step();
    let flight = w.status.in_flight.clone().expect("an update starts");
    assert_eq!(flight.phase, InFlightPhase::Applying);
    assert_eq!(flight.image, "127.0.0.1:17300/web:1.2.0");
    assert_eq!(flight.previous_image, IMAGE);
    assert_eq!(flight.previous_snapshot_index, 4);
    assert_eq!(actions, vec![Action::SetImage(flight.image.clone())]);
    assert_eq!(notes, vec![reason::UPDATE_STARTED]);

    // No snapshot with the image yet: the image is set again (idempotent), nothing else.
    let (actions, _, _) = w.step();
    assert_eq!(actions, vec![Action::SetImage(flight.image.clone())]);
    // A snapshot at or below the previous index is not ours.
    w.snapshot_with_image = Some(4);
    assert_eq!(w.step().0.len(), 1);

    w.snapshot_with_image = Some(5);
    let (actions, _, _) = w.step();
    assert_eq!(
        actions.last(),
        Some(&Action::EnsureRun {
            name: "web-1-2-0".into(),
            snapshot_index: 5,
            strategy: "three-stage".into(),
        })
    );
    assert_eq!(
        w.status.in_flight.as_ref().unwrap().phase,
        InFlightPhase::RollingOut
    );
    assert_eq!(w.reason(UPDATING), reason::ROLLING_OUT);

    // A restart that lost the run's creation creates it again.
    w.update_run = RunOutcome::Missing;
    assert!(matches!(w.step().0.as_slice(), [Action::EnsureRun { .. }]));
    w.update_run = RunOutcome::Running;
    assert!(w.step().0.is_empty());

    w.update_run = RunOutcome::Succeeded;
    let (_, notes, _) = w.step();
    assert_eq!(notes, vec![reason::UPDATE_SUCCEEDED]);
    assert!(w.status.in_flight.is_none());
    assert_eq!(w.status.current_version.as_deref(), Some("1.2.0"));
    let last = w.status.history.last().unwrap();
    assert_eq!(
        (last.version.as_str(), last.outcome),
        ("1.2.0", VersionOutcome::Healthy)
    );
    // The same version is not started again.
    w.target = target("127.0.0.1:17300/web:1.2.0");
    w.check_request = Some("2".into());
    w.step();
    assert!(w.status.in_flight.is_none());
}

fn rolling_out(w: &mut World, version: &str) {
    w.registry = Ok(Some(version.into()));
    w.check_request = Some(format!("check {version}"));
    w.step();
    w.snapshot_with_image = Some(5);
    w.step();
    w.update_run = RunOutcome::Running;
    w.step();
    assert_eq!(
        w.status.in_flight.as_ref().map(|f| f.phase),
        Some(InFlightPhase::RollingOut)
    );
}

#[test]
fn a_failed_run_is_rolled_back_once_and_the_version_never_again() {
    let mut w = World::new();
    w.step();
    rolling_out(&mut w, "1.2.0");
    w.update_run = RunOutcome::Failed("ClusterHealthTimeout: member-2 not available".into());
    let (actions, notes, _) = w.step();
    assert_eq!(notes, vec![reason::ROLLED_BACK]);
    assert_eq!(actions, vec![Action::SetImage(IMAGE.into())]);
    assert_eq!(w.status.failed_versions, vec!["1.2.0".to_string()]);
    assert_eq!(w.status.rollback_count, 1);
    assert_eq!(w.reason(UPDATING), reason::ROLLING_BACK);
    let circuit = find(&w.status.conditions, CIRCUIT_OPEN).unwrap();
    assert!(circuit.message.starts_with("1 consecutive"), "{circuit:?}");
    assert_eq!(
        w.status.history.last().unwrap().outcome,
        VersionOutcome::RolledBack
    );

    // The failed run rolls its own clusters back; the policy follows the rollback run it named.
    let flight = w.status.in_flight.clone().unwrap();
    assert_eq!(flight.rollback_run.as_deref(), Some("web-1-2-0-rollback"));
    let message = &find(&w.status.conditions, UPDATING).unwrap().message;
    assert!(
        message.contains("UpdateRun web-1-2-0-rollback rolls"),
        "{message}"
    );

    // Replayed (a restart): the image again, no second count, no run created.
    w.rollback_run = RunOutcome::Running;
    let (actions, notes, _) = w.step();
    assert_eq!(actions, vec![Action::SetImage(IMAGE.into())]);
    assert!(notes.is_empty());
    assert_eq!(w.status.rollback_count, 1);
    assert_eq!(w.status.history.len(), 1);

    w.rollback_run = RunOutcome::Succeeded;
    w.step();
    assert!(w.status.in_flight.is_none());
    assert_eq!(w.status.current_version.as_deref(), Some("1.0.0"));
    assert!(
        find(&w.status.conditions, UPDATING)
            .unwrap()
            .message
            .contains("rolled back to")
    );

    // The registry still offers 1.2.0: it is never started again.
    w.check_request = Some("again".into());
    w.step();
    assert!(w.status.in_flight.is_none());
}

#[test]
fn max_rollbacks_open_the_circuit_and_a_reset_closes_it() {
    let mut w = World::new();
    w.step();
    for version in ["1.1.0", "1.2.0"] {
        rolling_out(&mut w, version);
        w.update_run = RunOutcome::Failed("bad".into());
        w.rollback_run = RunOutcome::Running;
        w.step();
        w.rollback_run = RunOutcome::Succeeded;
        w.step();
        w.update_run = RunOutcome::Missing;
        w.rollback_run = RunOutcome::Missing;
    }
    assert!(w.status.circuit_open);
    assert_eq!(w.reason(CIRCUIT_OPEN), reason::TOO_MANY_ROLLBACKS);
    // A newer version is reported, not applied.
    w.registry = Ok(Some("1.3.0".into()));
    w.check_request = Some("c".into());
    let (actions, _, _) = w.step();
    assert!(actions.is_empty());
    assert!(w.status.in_flight.is_none());
    assert_eq!(w.status.available_version.as_deref(), Some("1.3.0"));
    let message = &find(&w.status.conditions, CIRCUIT_OPEN).unwrap().message;
    assert!(message.contains("1.3.0 available"), "{message}");

    // A person resets: applied at once, without waiting for the next tick.
    w.reset_request = Some("r1".into());
    let (actions, notes, _) = w.step();
    assert!(notes.contains(&reason::RESET));
    assert!(!w.status.circuit_open);
    assert_eq!(w.status.rollback_count, 0);
    assert_eq!(
        actions,
        vec![Action::SetImage("127.0.0.1:17300/web:1.3.0".into())]
    );
    assert_eq!(
        w.status.failed_versions,
        vec!["1.1.0".to_string(), "1.2.0".to_string()]
    );
}

#[test]
fn a_failed_rollback_opens_the_circuit() {
    let mut w = World::new();
    w.step();
    rolling_out(&mut w, "1.2.0");
    w.update_run = RunOutcome::Failed("bad".into());
    w.rollback_run = RunOutcome::Running;
    w.step();
    w.rollback_run = RunOutcome::Blocked("ClusterFailed: member-1 not available".into());
    let (_, notes, _) = w.step();
    assert!(notes.contains(&reason::ROLLBACK_FAILED));
    assert!(w.status.circuit_open);
    assert!(w.status.in_flight.is_none());
    assert_eq!(w.reason(CIRCUIT_OPEN), reason::ROLLBACK_FAILED);
    // The reason sticks on later steps.
    w.step();
    assert_eq!(w.reason(CIRCUIT_OPEN), reason::ROLLBACK_FAILED);
}

#[test]
fn a_run_stopped_at_a_failed_cluster_is_asked_to_roll_back_and_one_that_updated_nothing_needs_none()
{
    let mut w = World::new();
    w.step();
    rolling_out(&mut w, "1.2.0");
    w.update_run = RunOutcome::Blocked("ClusterFailed: member-2 not available".into());
    let (actions, notes, _) = w.step();
    assert_eq!(actions, vec![Action::RollBackRun("web-1-2-0".into())]);
    assert!(notes.is_empty());
    assert_eq!(w.status.rollback_count, 0);
    assert_eq!(w.reason(UPDATING), reason::ROLLING_OUT);

    // It failed before updating any cluster: it names no rollback run, and none is needed.
    w.update_run = RunOutcome::Failed("MetricCheckFailed: errors above 1".into());
    w.update_run_rollback = None;
    let (actions, notes, _) = w.step();
    assert_eq!(actions, vec![Action::SetImage(IMAGE.into())]);
    assert_eq!(notes, vec![reason::ROLLED_BACK]);
    w.step();
    assert!(w.status.in_flight.is_none());
    assert_eq!(w.status.failed_versions, vec!["1.2.0".to_string()]);
    let message = &find(&w.status.conditions, UPDATING).unwrap().message;
    assert!(message.contains("nothing to roll back"), "{message}");
}

#[test]
fn a_superseded_run_ends_the_update_without_a_rollback() {
    let mut w = World::new();
    w.step();
    rolling_out(&mut w, "1.2.0");
    w.update_run = RunOutcome::Superseded;
    let (actions, _, _) = w.step();
    assert!(actions.is_empty());
    assert!(w.status.in_flight.is_none());
    assert_eq!(w.status.rollback_count, 0);
    assert_eq!(
        w.status.history.last().unwrap().outcome,
        VersionOutcome::Superseded
    );
}

#[test]
fn a_busy_placement_or_a_pinned_image_starts_nothing() {
    let mut w = World::new();
    w.step();
    w.registry = Ok(Some("1.2.0".into()));
    w.placement.settled = false;
    w.placement.unsettled_because = "UpdateRun manual is in progress".into();
    w.check_request = Some("1".into());
    w.step();
    assert!(w.status.in_flight.is_none());
    assert_eq!(w.reason(UPDATING), reason::WAITING_FOR_PLACEMENT);
    // Once quiet, the version found earlier starts without another check.
    w.placement.settled = true;
    let (actions, _, checked) = w.step();
    assert!(!checked);
    assert_eq!(actions.len(), 1);

    let mut w = World::new();
    w.target = target("127.0.0.1:17300/web@sha256:0123");
    let (_, _, checked) = w.step();
    assert!(!checked);
    assert_eq!(w.reason(READY), reason::DIGEST_PINNED);
}

#[test]
fn a_frozen_placement_gets_no_new_version_until_the_freeze_lifts() {
    let mut w = World::new();
    w.step();
    w.registry = Ok(Some("1.2.0".into()));
    w.placement.frozen = Some("frozen by alice until unfrozen (freeze fleet): close".into());
    w.check_request = Some("1".into());
    let (actions, _, _) = w.step();
    assert!(actions.is_empty());
    assert!(w.status.in_flight.is_none());
    assert_eq!(w.reason(UPDATING), reason::FROZEN);
    let message = &find(&w.status.conditions, UPDATING).unwrap().message;
    assert!(
        message.contains("1.2.0 is available; waiting: frozen by alice"),
        "{message}"
    );
    // Lifted: the version found meanwhile starts without another check.
    w.placement.frozen = None;
    let (actions, _, checked) = w.step();
    assert!(!checked);
    assert_eq!(
        actions,
        vec![Action::SetImage("127.0.0.1:17300/web:1.2.0".into())]
    );
}

#[test]
fn a_version_set_by_hand_is_adopted_when_it_rolled_out_and_closes_the_circuit() {
    let mut w = World::new();
    w.step();
    w.status.circuit_open = true;
    w.status.rollback_count = 2;
    w.target = target("127.0.0.1:17300/web:1.1.5");
    w.placement.available = false;
    w.step();
    assert_eq!(w.status.current_version.as_deref(), Some("1.0.0"));
    w.placement.available = true;
    w.step();
    assert_eq!(w.status.current_version.as_deref(), Some("1.1.5"));
    assert!(!w.status.circuit_open);
    assert_eq!(w.reason(CIRCUIT_OPEN), reason::MANUAL_VERSION_SUCCEEDED);
}

#[test]
fn registry_errors_change_nothing_but_the_condition() {
    let mut w = World::new();
    w.registry = Err("127.0.0.1:17300/web: connection refused".into());
    let (actions, _, checked) = w.step();
    assert!(checked && actions.is_empty());
    assert_eq!(w.reason(READY), reason::REGISTRY_ERROR);
    assert!(w.status.next_check_time.is_some());
}

#[test]
fn history_and_failed_versions_are_capped() {
    let mut w = World::new();
    w.step();
    w.spec.max_rollbacks = Some(100);
    for minor in 1..=60 {
        rolling_out(&mut w, &format!("1.{minor}.0"));
        w.update_run = RunOutcome::Failed("bad".into());
        w.rollback_run = RunOutcome::Running;
        w.step();
        w.rollback_run = RunOutcome::Succeeded;
        w.step();
        w.update_run = RunOutcome::Missing;
        w.rollback_run = RunOutcome::Missing;
    }
    assert_eq!(w.status.history.len(), 50);
    assert_eq!(w.status.failed_versions.len(), 50);
    assert_eq!(w.status.failed_versions.first().unwrap(), "1.11.0");
}

#[test]
fn run_names_are_dns_labels() {
    assert_eq!(run_name("web", "1.2.0"), "web-1-2-0");
    assert_eq!(
        run_name("web", "1.2.0-RC.1+build.5"),
        "web-1-2-0-rc-1-build-5"
    );
    let long = run_name(&"p".repeat(40), "123456789.123456789.123456789");
    assert!(long.len() <= 63 && !long.ends_with('-'), "{long}");
}

#[test]
fn a_retried_version_is_picked_again_and_the_history_says_who_allowed_it() {
    let mut w = World::new();
    w.step();
    rolling_out(&mut w, "1.2.0");
    w.update_run = RunOutcome::Failed("bad".into());
    w.rollback_run = RunOutcome::Running;
    w.step();
    w.rollback_run = RunOutcome::Succeeded;
    w.step();
    assert_eq!(w.status.failed_versions, vec!["1.2.0".to_string()]);
    // A retry of a version that never failed changes nothing but says so.
    w.retry_request = Some("9.9.9@1".into());
    let (_, notes, _) = w.step();
    assert_eq!(notes, vec![reason::RETRY_ALLOWED]);
    assert_eq!(w.status.failed_versions, vec!["1.2.0".to_string()]);
    // The real one: forgotten, recorded once, and picked at the next check.
    w.retry_request = Some("1.2.0@2".into());
    w.update_run = RunOutcome::Missing;
    w.rollback_run = RunOutcome::Missing;
    w.registry = Ok(Some("1.2.0".into()));
    w.check_request = Some("after retry".into());
    let (actions, notes, _) = w.step();
    assert!(notes.contains(&reason::RETRY_ALLOWED));
    assert!(w.status.failed_versions.is_empty());
    assert!(
        w.status
            .history
            .iter()
            .any(|h| h.version == "1.2.0" && h.outcome == VersionOutcome::RetryAllowed)
    );
    assert_eq!(
        actions,
        vec![Action::SetImage("127.0.0.1:17300/web:1.2.0".into())]
    );
    // The same request again is not a second retry.
    let history = w.status.history.len();
    w.step();
    assert_eq!(w.status.history.len(), history);
}

#[test]
fn an_image_the_placement_never_snapshots_fails_the_step_after_the_deadline() {
    let mut w = World::new();
    w.step();
    w.registry = Ok(Some("1.2.0".into()));
    w.check_request = Some("1".into());
    w.step();
    assert_eq!(
        w.status.in_flight.as_ref().map(|f| f.phase),
        Some(InFlightPhase::Applying)
    );
    // Just before the deadline: still applying.
    w.now += SignedDuration::from_secs(APPLYING_DEADLINE_SECONDS - 1);
    w.step();
    assert!(w.status.in_flight.is_some());
    // At it: the previous image back, the version failed with the reason, nothing in flight.
    w.now += SignedDuration::from_secs(1);
    let (actions, notes, _) = w.step();
    assert_eq!(actions, vec![Action::SetImage(IMAGE.into())]);
    assert_eq!(notes, vec![reason::NOT_SNAPSHOTTED]);
    assert!(w.status.in_flight.is_none());
    assert_eq!(w.status.failed_versions, vec!["1.2.0".to_string()]);
    assert_eq!(w.reason(UPDATING), reason::NOT_SNAPSHOTTED);
    let last = w.status.history.last().unwrap();
    assert_eq!(last.outcome, VersionOutcome::NotSnapshotted);
    let message = last.message.as_deref().unwrap();
    assert!(
        message.contains("cut no snapshot holding 127.0.0.1:17300/web:1.2.0 within 600s"),
        "{message}"
    );
}
