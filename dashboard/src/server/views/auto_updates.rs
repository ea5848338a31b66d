//! AutoUpdatePolicies → the Auto-updates page. Pure, unit-tested below.

use fleethub_crds::auto_update::{
    AutoUpdatePolicy, CHECK_REQUESTED_ANNOTATION, CIRCUIT_OPEN, DEFAULT_MAX_ROLLBACKS,
    InFlightPhase, InFlightUpdate, READY, RESET_REQUESTED_ANNOTATION, UPDATING, VersionHistory,
    VersionOutcome, reason,
};
use fleethub_crds::conditions::{FALSE, TRUE, find};
use kube::ResourceExt;

use super::opt_unix;
use crate::model::*;

/// The Auto-updates page, policies by name.
pub fn auto_updates(mut policies: Vec<AutoUpdatePolicy>) -> AutoUpdatesView {
    policies.sort_by_key(|p| p.name_any());
    AutoUpdatesView {
        policies: policies.iter().map(policy_row).collect(),
    }
}

/// One policy, as the page shows it.
pub fn policy_row(p: &AutoUpdatePolicy) -> PolicyRow {
    let spec = &p.spec;
    let status = p.status.clone().unwrap_or_default();
    let t = &spec.target;
    // An annotation value the hub has not acted on yet: the request is still pending.
    let pending = |annotation: &str, observed: &Option<String>| {
        p.annotations()
            .get(annotation)
            .is_some_and(|asked| observed.as_deref() != Some(asked.as_str()))
    };
    PolicyRow {
        name: p.name_any(),
        target: format!(
            "{} {}/{}, container {}",
            t.kind.as_str(),
            t.namespace,
            t.name,
            t.container
        ),
        placement: spec.placement_name.clone(),
        strategy: spec.staged_rollout_strategy_name.clone(),
        repository: spec.repository.clone(),
        constraint: spec.version_constraint.clone(),
        schedule: match &spec.time_zone {
            Some(zone) => format!("{} ({zone})", spec.schedule),
            None => spec.schedule.clone(),
        },
        ready: ready_state(&status.conditions, spec.suspend),
        updating: updating_state(&status.conditions, status.in_flight.as_ref()),
        current_version: status.current_version.clone(),
        available_version: status.available_version.clone(),
        last_check: opt_unix(status.last_check_time.as_ref()),
        next_check: opt_unix(status.next_check_time.as_ref()),
        in_flight: status.in_flight.as_ref().map(in_flight_view),
        circuit: circuit_state(&status.conditions, status.circuit_open),
        circuit_open: status.circuit_open,
        rollback_count: status.rollback_count,
        max_rollbacks: spec.max_rollbacks.unwrap_or(DEFAULT_MAX_ROLLBACKS),
        failed_versions: status.failed_versions.clone(),
        check_requested: pending(CHECK_REQUESTED_ANNOTATION, &status.observed_check_request),
        reset_requested: pending(RESET_REQUESTED_ANNOTATION, &status.observed_reset_request),
        history: status.history.iter().rev().map(history_row).collect(),
    }
}

type Conditions = [k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition];

fn ready_state(conditions: &Conditions, suspend: bool) -> State {
    match find(conditions, READY) {
        Some(c) if c.status == TRUE && (suspend || c.reason == reason::SUSPENDED) => {
            State::new("Suspended", Tone::Wait, c.message.clone())
        }
        Some(c) if c.status == TRUE => State::new("Ready", Tone::Good, c.message.clone()),
        Some(c) if c.status == FALSE => State::new(
            "Not ready",
            Tone::Bad,
            format!("{}: {}", c.reason, c.message),
        ),
        Some(c) => State::new("Unknown", Tone::Idle, c.message.clone()),
        None => State::new(
            "Pending",
            Tone::Idle,
            "the hub has not picked this policy up yet",
        ),
    }
}

fn phase_state(phase: InFlightPhase, version: &str) -> State {
    match phase {
        InFlightPhase::Applying => State::new(
            "Applying",
            Tone::Busy,
            format!("putting {version} on the target; its snapshot and run follow"),
        ),
        InFlightPhase::RollingOut => State::new(
            "Rolling out",
            Tone::Busy,
            format!("{version} is rolling out through the strategy"),
        ),
        InFlightPhase::RollingBack => State::new(
            "Rolling back",
            Tone::Bad,
            format!("{version} failed; the previous version is rolling back"),
        ),
    }
}

fn updating_state(conditions: &Conditions, in_flight: Option<&InFlightUpdate>) -> State {
    if let Some(f) = in_flight {
        return phase_state(f.phase, &f.version);
    }
    match find(conditions, UPDATING) {
        Some(c) if c.reason == reason::WAITING_FOR_PLACEMENT => {
            State::new("Waiting", Tone::Wait, c.message.clone())
        }
        Some(c) => State::new("Idle", Tone::Idle, c.message.clone()),
        None => State::new("Idle", Tone::Idle, "no update in flight"),
    }
}

fn circuit_state(conditions: &Conditions, open: bool) -> State {
    // `status.circuitOpen` decides; the condition explains.
    let message = find(conditions, CIRCUIT_OPEN)
        .map(|c| c.message.clone())
        .unwrap_or_default();
    if open {
        State::new("Circuit open", Tone::Bad, message)
    } else {
        State::new("Circuit closed", Tone::Good, message)
    }
}

fn in_flight_view(f: &InFlightUpdate) -> InFlightView {
    InFlightView {
        phase: phase_state(f.phase, &f.version),
        version: f.version.clone(),
        run: f.update_run.clone(),
        rollback_run: f.rollback_run.clone(),
        started: Some(f.start_time.0.as_second()),
    }
}

fn history_row(h: &VersionHistory) -> HistoryRow {
    let (label, tone) = match h.outcome {
        VersionOutcome::Healthy => ("Healthy", Tone::Good),
        VersionOutcome::RolledBack => ("Rolled back", Tone::Bad),
        VersionOutcome::Superseded => ("Superseded", Tone::Idle),
        VersionOutcome::NotSnapshotted => ("Not snapshotted", Tone::Bad),
        VersionOutcome::RetryAllowed => ("Retry allowed", Tone::Idle),
    };
    HistoryRow {
        version: h.version.clone(),
        outcome: State::new(label, tone, h.message.clone().unwrap_or_default()),
        run: h.update_run.clone(),
        started: opt_unix(h.start_time.as_ref()),
        ended: opt_unix(h.end_time.as_ref()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(annotations: serde_json::Value, status: serde_json::Value) -> AutoUpdatePolicy {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "fleethub.dev/v1alpha1",
            "kind": "AutoUpdatePolicy",
            "metadata": {"name": "web", "annotations": annotations},
            "spec": {
                "placementName": "web",
                "target": {"kind": "StatefulSet", "namespace": "shop", "name": "db", "container": "main"},
                "schedule": "*/10 * * * * *",
                "timeZone": "Europe/Berlin",
                "versionConstraint": ">=1.0.0, <2",
                "stagedRolloutStrategyName": "three-stage",
            },
            "status": status,
        }))
        .unwrap()
    }

    fn cond(type_: &str, status: &str, reason: &str, message: &str) -> serde_json::Value {
        serde_json::json!({"type": type_, "status": status, "reason": reason,
            "message": message, "lastTransitionTime": "2026-11-23T09:00:00Z"})
    }

    #[test]
    fn an_open_circuit_shows_its_versions_count_failed_versions_and_history_newest_first() {
        let p = policy(
            serde_json::json!({}),
            serde_json::json!({
                "currentVersion": "1.1.0",
                "availableVersion": "1.5.0",
                "lastCheckTime": "2026-11-23T10:00:00Z",
                "nextCheckTime": "2026-11-23T10:00:10Z",
                "circuitOpen": true,
                "rollbackCount": 3,
                "failedVersions": ["1.2.0", "1.3.0", "1.4.0"],
                "conditions": [
                    cond(READY, TRUE, reason::READY, "1.5.0 available; circuit open"),
                    cond(CIRCUIT_OPEN, TRUE, reason::TOO_MANY_ROLLBACKS, "1.5.0 available; circuit open after 3 consecutive rollbacks"),
                ],
                "history": [
                    {"version": "1.1.0", "outcome": "Healthy", "updateRun": "web-1-1-0",
                     "startTime": "2026-11-23T08:00:00Z", "endTime": "2026-11-23T08:01:00Z"},
                    {"version": "1.4.0", "outcome": "RolledBack", "updateRun": "web-1-4-0",
                     "endTime": "2026-11-23T09:00:00Z", "message": "ClusterHealthTimeout: member-1"},
                ],
            }),
        );
        let row = policy_row(&p);
        assert_eq!(row.target, "StatefulSet shop/db, container main");
        assert_eq!(row.schedule, "*/10 * * * * * (Europe/Berlin)");
        assert_eq!(row.repository, None);
        assert_eq!(row.current_version.as_deref(), Some("1.1.0"));
        assert_eq!(row.available_version.as_deref(), Some("1.5.0"));
        assert_eq!(row.next_check, Some(row.last_check.unwrap() + 10));
        assert!(row.circuit_open);
        assert_eq!(row.circuit.label, "Circuit open");
        assert_eq!(row.circuit.tone, Tone::Bad);
        assert!(
            row.circuit
                .message
                .contains("after 3 consecutive rollbacks")
        );
        assert_eq!((row.rollback_count, row.max_rollbacks), (3, 3));
        assert!(row.resettable());
        assert_eq!(row.failed_versions, ["1.2.0", "1.3.0", "1.4.0"]);
        assert_eq!(row.ready.label, "Ready");
        assert_eq!(row.updating.label, "Idle");
        let versions: Vec<_> = row.history.iter().map(|h| h.version.as_str()).collect();
        assert_eq!(versions, ["1.4.0", "1.1.0"]);
        assert_eq!(row.history[0].outcome.label, "Rolled back");
        assert_eq!(
            row.history[0].outcome.message,
            "ClusterHealthTimeout: member-1"
        );
        assert_eq!(row.history[0].run.as_deref(), Some("web-1-4-0"));
        assert_eq!(row.history[0].started, None);
        assert_eq!(row.history[1].outcome.tone, Tone::Good);
        assert!(!row.check_requested && !row.reset_requested);
    }

    #[test]
    fn a_closed_circuit_with_nothing_counted_needs_no_reset() {
        let row = policy_row(&policy(
            serde_json::json!({}),
            serde_json::json!({"conditions": [cond(CIRCUIT_OPEN, FALSE, reason::RESET, "closed by a person's reset request")]}),
        ));
        assert_eq!(row.circuit.label, "Circuit closed");
        assert_eq!(row.circuit.tone, Tone::Good);
        assert!(!row.resettable());
        // Counted rollbacks with the circuit still closed can be forgotten.
        let row = policy_row(&policy(
            serde_json::json!({}),
            serde_json::json!({"rollbackCount": 1}),
        ));
        assert!(!row.circuit_open && row.resettable());
    }

    #[test]
    fn what_is_in_flight_names_its_phase_and_runs() {
        let flight = |phase: &str| {
            policy_row(&policy(
                serde_json::json!({}),
                serde_json::json!({"inFlight": {
                    "phase": phase, "version": "1.2.0", "image": "r/web:1.2.0",
                    "previousImage": "r/web:1.1.0", "previousSnapshotIndex": 4,
                    "updateRun": "web-1-2-0", "rollbackRun": "web-1-2-0-rollback",
                    "startTime": "2026-11-23T10:00:00Z"}}),
            ))
        };
        for (phase, label, tone) in [
            ("Applying", "Applying", Tone::Busy),
            ("RollingOut", "Rolling out", Tone::Busy),
            ("RollingBack", "Rolling back", Tone::Bad),
        ] {
            let row = flight(phase);
            let f = row.in_flight.as_ref().unwrap();
            assert_eq!((f.phase.label.as_str(), f.phase.tone), (label, tone));
            assert_eq!(row.updating, f.phase, "{phase}");
            assert_eq!(f.version, "1.2.0");
            assert_eq!(f.run.as_deref(), Some("web-1-2-0"));
            assert_eq!(f.rollback_run.as_deref(), Some("web-1-2-0-rollback"));
            assert!(f.started.is_some());
        }
    }

    #[test]
    fn readiness_and_waiting_are_worded() {
        let row = policy_row(&policy(serde_json::json!({}), serde_json::json!({})));
        assert_eq!(row.ready.label, "Pending");
        assert_eq!(row.updating.label, "Idle");
        assert_eq!(row.max_rollbacks, DEFAULT_MAX_ROLLBACKS);
        let row = policy_row(&policy(
            serde_json::json!({}),
            serde_json::json!({"conditions": [
                cond(READY, FALSE, reason::PLACEMENT_NOT_USABLE, "placement web does not exist"),
                cond(UPDATING, FALSE, reason::WAITING_FOR_PLACEMENT, "run other-run of placement web is rolling"),
            ]}),
        ));
        assert_eq!(row.ready.label, "Not ready");
        assert_eq!(row.ready.tone, Tone::Bad);
        assert_eq!(
            row.ready.message,
            "PlacementNotUsable: placement web does not exist"
        );
        assert_eq!(row.updating.label, "Waiting");
        let row = policy_row(&policy(
            serde_json::json!({}),
            serde_json::json!({"conditions": [cond(READY, TRUE, reason::SUSPENDED, "suspended")]}),
        ));
        assert_eq!(row.ready.label, "Suspended");
    }

    #[test]
    fn a_request_is_pending_until_the_hub_records_its_value() {
        let asked = serde_json::json!({
            CHECK_REQUESTED_ANNOTATION: "2026-11-23T10:00:00Z",
            RESET_REQUESTED_ANNOTATION: "2026-11-23T10:00:01Z",
        });
        let row = policy_row(&policy(asked.clone(), serde_json::json!({})));
        assert!(row.check_requested && row.reset_requested);
        let row = policy_row(&policy(
            asked.clone(),
            serde_json::json!({"observedCheckRequest": "2026-11-23T10:00:00Z",
                "observedResetRequest": "an older one"}),
        ));
        assert!(!row.check_requested && row.reset_requested);
        let row = policy_row(&policy(
            asked,
            serde_json::json!({"observedCheckRequest": "2026-11-23T10:00:00Z",
                "observedResetRequest": "2026-11-23T10:00:01Z"}),
        ));
        assert!(!row.check_requested && !row.reset_requested);
    }

    #[test]
    fn policies_are_listed_by_name() {
        let mut b = policy(serde_json::json!({}), serde_json::json!({}));
        b.metadata.name = Some("b".into());
        let mut a = b.clone();
        a.metadata.name = Some("a".into());
        let names: Vec<_> = auto_updates(vec![b, a])
            .policies
            .into_iter()
            .map(|p| p.name)
            .collect();
        assert_eq!(names, ["a", "b"]);
    }
}
