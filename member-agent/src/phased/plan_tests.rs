//! Partition stepping as a pure plan, with a fake clock.

use fleethub_crds::metric_check::QueryOutcome;
use fleethub_crds::phased_rollout::{
    PhasedRolloutPhase, PhasedRolloutSpec, PhasedRolloutStatus, ROLLED_OUT, reason,
};
use jiff::{SignedDuration, Timestamp};

use super::plan::*;

fn spec() -> PhasedRolloutSpec {
    serde_json::from_value(serde_json::json!({
        "targetRef": "web",
        "check": {"url": "http://127.0.0.1:9090", "query": "up{statefulset=\"$statefulset\"}",
                  "initialDelay": "5s", "interval": "2s", "successThreshold": 2},
    }))
    .unwrap()
}

fn t0() -> Timestamp {
    "2026-11-23T10:00:00Z".parse().unwrap()
}

fn sts(
    partition: Option<i32>,
    current: &str,
    update: &str,
    updated: i32,
    available: i32,
) -> StatefulSetView {
    StatefulSetView {
        generation: 2,
        observed_generation: 2,
        replicas: 5,
        on_delete: false,
        partition,
        current_revision: Some(current.into()),
        update_revision: Some(update.into()),
        updated_replicas: updated,
        available_replicas: available,
    }
}

struct World {
    spec: PhasedRolloutSpec,
    status: PhasedRolloutStatus,
    now: Timestamp,
}

impl World {
    fn new() -> Self {
        Self {
            spec: spec(),
            status: PhasedRolloutStatus::default(),
            now: t0(),
        }
    }

    /// One reconcile: answers a due query with `answer`; keeps the status.
    fn step(
        &mut self,
        sts: Option<&StatefulSetView>,
        answer: &QueryOutcome,
    ) -> (PartitionAction, bool) {
        let o = Observed {
            namespace: "app",
            generation: Some(1),
            spec: &self.spec,
            status: &self.status,
            statefulset: sts,
            now: self.now,
            outcome: None,
        };
        let mut queried = false;
        let mut decided = plan(&o);
        if let Plan::Query(q) = &decided {
            assert_eq!(q.query, "up{statefulset=\"web\"}");
            queried = true;
            decided = plan(&Observed {
                outcome: Some(answer),
                ..o
            });
        }
        let Plan::Step {
            status, partition, ..
        } = decided
        else {
            panic!("asked twice")
        };
        self.status = *status;
        (partition, queried)
    }

    fn later(&mut self, secs: i64) {
        self.now += SignedDuration::from_secs(secs);
    }

    fn reason(&self) -> String {
        fleethub_crds::conditions::find(&self.status.conditions, ROLLED_OUT)
            .map(|c| c.reason.clone())
            .unwrap_or_default()
    }
}

fn pass() -> QueryOutcome {
    QueryOutcome::Data("1".into())
}

#[test]
fn idle_holds_the_partition_at_replicas() {
    let mut w = World::new();
    let (p, q) = w.step(Some(&sts(None, "r1", "r1", 5, 5)), &pass());
    assert_eq!((p, q), (PartitionAction::Set(5), false));
    assert_eq!(w.status.phase, PhasedRolloutPhase::Idle);
    assert_eq!(w.reason(), reason::COMPLETE);
    let (p, _) = w.step(Some(&sts(Some(5), "r1", "r1", 5, 5)), &pass());
    assert_eq!(p, PartitionAction::Keep);
}

#[test]
fn a_new_revision_rolls_one_pod_per_passed_check_series() {
    let mut w = World::new();
    // A new revision, nothing rolled (partition 5): checks first, after the initial delay.
    let s = sts(Some(5), "r1", "r2", 0, 5);
    let (p, q) = w.step(Some(&s), &pass());
    assert_eq!((p, q), (PartitionAction::Keep, false), "initial delay");
    assert_eq!(w.status.phase, PhasedRolloutPhase::Rolling);
    assert_eq!(w.reason(), reason::WAITING_FOR_CHECK);
    w.later(5);
    assert_eq!(w.step(Some(&s), &pass()), (PartitionAction::Keep, true));
    assert_eq!(w.status.check.as_ref().unwrap().consecutive_passes, 1);
    w.later(1);
    assert_eq!(
        w.step(Some(&s), &pass()),
        (PartitionAction::Keep, false),
        "interval"
    );
    w.later(1);
    // The second pass in a row: the partition goes down by one.
    assert_eq!(w.step(Some(&s), &pass()), (PartitionAction::Set(4), true));
    assert!(w.status.check.is_none());

    // Pod 4 has not rolled yet: no check, no step.
    let s = sts(Some(4), "r1", "r2", 0, 5);
    assert_eq!(w.step(Some(&s), &pass()), (PartitionAction::Keep, false));
    assert_eq!(w.reason(), reason::WAITING_FOR_PODS);
    // Rolled but not available yet: still waiting.
    let s = sts(Some(4), "r1", "r2", 1, 4);
    assert_eq!(w.step(Some(&s), &pass()), (PartitionAction::Keep, false));
    // Rolled and every pod available: a fresh series of checks, after the initial delay.
    let s = sts(Some(4), "r1", "r2", 1, 5);
    assert_eq!(w.step(Some(&s), &pass()), (PartitionAction::Keep, false));
    w.later(5);
    assert_eq!(w.step(Some(&s), &pass()), (PartitionAction::Keep, true));
    // A failing check starts the count again.
    w.later(2);
    assert_eq!(
        w.step(Some(&s), &QueryOutcome::NoData),
        (PartitionAction::Keep, true)
    );
    assert_eq!(w.status.check.as_ref().unwrap().consecutive_passes, 0);
    w.later(2);
    assert_eq!(w.step(Some(&s), &pass()), (PartitionAction::Keep, true));
    w.later(2);
    assert_eq!(w.step(Some(&s), &pass()), (PartitionAction::Set(3), true));

    // The last pod let go (partition 0): the StatefulSet finishes; then idle holds again.
    let s = sts(Some(0), "r1", "r2", 4, 5);
    assert_eq!(w.step(Some(&s), &pass()), (PartitionAction::Keep, false));
    let s = sts(Some(0), "r2", "r2", 5, 5);
    assert_eq!(w.step(Some(&s), &pass()), (PartitionAction::Set(5), false));
    assert_eq!(w.reason(), reason::COMPLETE);
}

#[test]
fn on_delete_is_refused_and_standard_rolling_update_hands_back() {
    let mut w = World::new();
    let mut s = sts(None, "r1", "r2", 0, 5);
    s.on_delete = true;
    assert_eq!(w.step(Some(&s), &pass()), (PartitionAction::Keep, false));
    assert_eq!(w.status.phase, PhasedRolloutPhase::Refused);
    assert_eq!(w.reason(), reason::ON_DELETE);

    let mut w = World::new();
    w.spec.standard_rolling_update = true;
    let s = sts(Some(3), "r1", "r2", 2, 5);
    assert_eq!(w.step(Some(&s), &pass()), (PartitionAction::Release, false));
    assert_eq!(w.status.phase, PhasedRolloutPhase::HandedBack);

    let mut w = World::new();
    assert_eq!(w.step(None, &pass()), (PartitionAction::Keep, false));
    assert_eq!(w.reason(), reason::TARGET_NOT_FOUND);
}

#[test]
fn a_statefulset_change_not_yet_observed_is_not_taken_for_a_finished_one() {
    let mut w = World::new();
    let mut s = sts(Some(5), "r1", "r1", 5, 5);
    s.generation = 3;
    let (p, _) = w.step(Some(&s), &pass());
    assert_eq!(p, PartitionAction::Keep);
    assert_ne!(w.reason(), reason::COMPLETE);
    // Mid-rollout, the partition just lowered and not yet observed: it is kept, not reset.
    let mut s = sts(Some(3), "r1", "r2", 1, 5);
    s.generation = 3;
    assert_eq!(w.step(Some(&s), &pass()), (PartitionAction::Keep, false));
}

/// The reference design's names (`initialDelaySeconds`, `periodSeconds`, `query: {expr, url,
/// secretRef}` with the URL as `host:port/path`) step the same way, and the query asked for
/// carries the URL with `http://` and the Secret's name.
#[test]
fn a_check_in_the_reference_designs_names_plans_the_same_queries() {
    let mut w = World::new();
    w.spec = serde_json::from_value(serde_json::json!({
        "targetRef": "web",
        "check": {"initialDelaySeconds": 5, "periodSeconds": 2, "successThreshold": 2,
                  "query": {"expr": "up{statefulset=\"$statefulset\"}", "url": "prom:9000/xx",
                            "secretRef": "prom-secret"}},
    }))
    .unwrap();
    let s = sts(Some(5), "r1", "r2", 0, 5);
    assert_eq!(
        w.step(Some(&s), &pass()),
        (PartitionAction::Keep, false),
        "initial delay"
    );
    w.later(5);
    let o = Observed {
        namespace: "app",
        generation: Some(1),
        spec: &w.spec,
        status: &w.status,
        statefulset: Some(&s),
        now: w.now,
        outcome: None,
    };
    assert_eq!(
        plan(&o),
        Plan::Query(Query {
            url: "http://prom:9000/xx".into(),
            query: "up{statefulset=\"web\"}".into(),
            secret_name: Some("prom-secret".into()),
        })
    );
    assert_eq!(w.step(Some(&s), &pass()), (PartitionAction::Keep, true));
    w.later(1);
    assert_eq!(
        w.step(Some(&s), &pass()),
        (PartitionAction::Keep, false),
        "period"
    );
    w.later(1);
    assert_eq!(w.step(Some(&s), &pass()), (PartitionAction::Set(4), true));
}

/// Both names of one setting the API server could not see (`url` and `query.url`) hold the
/// rollout, the condition naming both.
#[test]
fn both_names_of_one_setting_hold_the_rollout_naming_them() {
    let mut w = World::new();
    w.spec = serde_json::from_value(serde_json::json!({
        "targetRef": "web",
        "check": {"url": "http://127.0.0.1:9090", "query": {"expr": "up", "url": "prom:9000"}},
    }))
    .unwrap();
    let s = sts(Some(5), "r1", "r2", 0, 5);
    assert_eq!(w.step(Some(&s), &pass()), (PartitionAction::Keep, false));
    assert_eq!(w.status.phase, PhasedRolloutPhase::Refused);
    assert_eq!(w.reason(), reason::INVALID_CHECK);
    let c = fleethub_crds::conditions::find(&w.status.conditions, ROLLED_OUT).unwrap();
    assert!(
        c.message.contains("spec.check.url") && c.message.contains("spec.check.query.url"),
        "{}",
        c.message
    );
}
