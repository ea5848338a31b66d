//! Unit tests of the UpdateRun planner, on a fake timeline.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use fleethub_crds::binding::BindingState;
use fleethub_crds::conditions::{find, is_false, is_true};
use fleethub_crds::placement::{PlacementSpec, RolloutStrategy, RolloutStrategyType};
use fleethub_crds::strategy::StagedUpdateStrategySpec;
use fleethub_crds::update_run::{
    INITIALIZED, PROGRESSING, SUCCEEDED, UpdateRunSpec, UpdateRunState,
};
use fleethub_crds::{Placement, UpdateRun};
use jiff::Timestamp;
use serde_json::json;

use super::plan::*;

fn t(secs: i64) -> Timestamp {
    Timestamp::from_second(1_800_000_000 + secs).unwrap()
}

fn strategy(v: serde_json::Value) -> StagedUpdateStrategySpec {
    serde_json::from_value(v).unwrap()
}

/// staging (TimedWait 1m) → canary (Approval) → production (by `order`, 50%, Approval + 1m).
fn three_stages() -> StagedUpdateStrategySpec {
    strategy(json!({"stages": [
        {"name": "staging", "labelSelector": {"matchLabels": {"env": "staging"}},
         "afterStageTasks": [{"type": "TimedWait", "waitTime": "1m"}]},
        {"name": "canary", "labelSelector": {"matchLabels": {"env": "canary"}},
         "afterStageTasks": [{"type": "Approval"}]},
        {"name": "production", "labelSelector": {"matchLabels": {"env": "production"}},
         "sortingLabelKey": "order", "maxConcurrency": "50%",
         "afterStageTasks": [{"type": "Approval"}, {"type": "TimedWait", "waitTime": "1m"}]}
    ]}))
}

fn external_placement() -> Placement {
    Placement::new(
        "web",
        PlacementSpec {
            strategy: Some(RolloutStrategy {
                type_: RolloutStrategyType::External,
                apply_strategy: None,
            }),
            ..Default::default()
        },
    )
}

fn run(state: Option<UpdateRunState>) -> UpdateRun {
    let mut r = UpdateRun::new(
        "rollout",
        UpdateRunSpec {
            placement_name: "web".into(),
            resource_snapshot_index: Some("2".into()),
            staged_rollout_strategy_name: "three".into(),
            state,
            health_timeout: Some("5m".into()),
            ..Default::default()
        },
    );
    r.metadata.generation = Some(1);
    r.metadata.creation_timestamp =
        Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(t(0)));
    r
}

/// Validated, unfinished runs of the same placement: `earlier` created before the test's
/// runs, `later` after.
fn siblings(earlier: &[String], later: &[String]) -> Vec<SiblingRun> {
    let run = |name: &String, at: i64| SiblingRun {
        name: name.clone(),
        created: Some(t(at)),
        over: false,
        validated: true,
    };
    earlier
        .iter()
        .map(|n| run(n, -100))
        .chain(later.iter().map(|n| run(n, 100)))
        .collect()
}

/// A fake fleet: cluster labels, bindings, works; and the run as last written.
struct World {
    run: UpdateRun,
    strategy: StagedUpdateStrategySpec,
    placement: Option<Placement>,
    labels: BTreeMap<String, BTreeMap<String, String>>,
    bindings: Vec<BindingView>,
    works: BTreeMap<String, WorkView>,
    approvals: BTreeMap<String, ApprovalView>,
    earlier_runs: Vec<String>,
    later_runs: Vec<String>,
    unhealthy: BTreeMap<String, String>,
    placement_deleted: bool,
    /// The placement's status is left as the test sets it (see `observed`).
    unsettled_scheduling: bool,
    latest: Option<i64>,
    /// What the fake Prometheus answers, by query; any other query: connection refused.
    prometheus: BTreeMap<String, QueryOutcome>,
    /// Every query the plans asked for.
    asked: Vec<MetricQuery>,
    /// The rollback runs the plans created: name, index, what they revert.
    rollback_runs: Vec<(String, i64, fleethub_crds::update_run::RollbackSpec)>,
    /// A Freeze holding the placement: in words, and when it lifts.
    freeze: Option<(String, Option<Timestamp>)>,
    now: Timestamp,
}

impl World {
    fn new() -> Self {
        let mut w = World {
            run: run(None),
            strategy: three_stages(),
            placement: Some(external_placement()),
            labels: BTreeMap::new(),
            bindings: Vec::new(),
            works: BTreeMap::new(),
            approvals: BTreeMap::new(),
            earlier_runs: Vec::new(),
            later_runs: Vec::new(),
            unhealthy: BTreeMap::new(),
            placement_deleted: false,
            unsettled_scheduling: false,
            latest: Some(2),
            prometheus: BTreeMap::new(),
            asked: Vec::new(),
            rollback_runs: Vec::new(),
            freeze: None,
            now: t(0),
        };
        w.cluster("stage-a", &[("env", "staging")]);
        w.cluster("canary-a", &[("env", "canary")]);
        w.cluster("prod-c", &[("env", "production"), ("order", "1")]);
        w.cluster("prod-a", &[("env", "production"), ("order", "2")]);
        w.cluster("prod-b", &[("env", "production"), ("order", "2")]);
        w.cluster("prod-z", &[("env", "production")]);
        w
    }

    fn cluster(&mut self, name: &str, labels: &[(&str, &str)]) {
        self.labels.insert(
            name.into(),
            labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        );
        self.bindings.push(BindingView {
            cluster: name.into(),
            state: BindingState::Scheduled,
            ..Default::default()
        });
    }

    /// Unless `unsettled_scheduling`, sets the placement's status to say it scheduled its spec
    /// and selected the clusters of the scheduled and bound bindings, as the placement
    /// controller writes it once those bindings exist.
    fn settle(&mut self) {
        let selected = self
            .bindings
            .iter()
            .filter(|b| b.state != BindingState::Unscheduled)
            .count();
        if let (Some(placement), false) = (&mut self.placement, self.unsettled_scheduling) {
            placement.metadata.generation = Some(1);
            let status = placement.status.get_or_insert_with(Default::default);
            status.selected_cluster_count = Some(selected as i32);
            fleethub_crds::conditions::set_condition(
                &mut status.conditions,
                fleethub_crds::conditions::NewCondition::new(
                    fleethub_crds::placement::SCHEDULED,
                    fleethub_crds::conditions::TRUE,
                    fleethub_crds::placement::reason::SCHEDULING_POLICY_FULFILLED,
                    format!("{selected} clusters selected"),
                    Some(1),
                ),
                self.now,
            );
        }
    }

    fn observed(&self) -> Observed<'_> {
        Observed {
            run: &self.run,
            strategy: Some(&self.strategy),
            placement: self.placement.as_ref(),
            placement_deleted: self.placement_deleted,
            plan_lost: None,
            latest_snapshot_index: self.latest,
            snapshot_exists: true,
            cluster_labels: self.labels.clone(),
            unhealthy_members: self.unhealthy.clone(),
            down_members: self.unhealthy.keys().cloned().collect(),
            bindings: self.bindings.iter().cloned().map(Arc::new).collect(),
            works: self.works.clone(),
            approvals: self.approvals.clone(),
            siblings: siblings(&self.earlier_runs, &self.later_runs),
            metric_results: BTreeMap::new(),
            freeze: self.freeze.clone(),
            override_snapshots: Default::default(),
            now: self.now,
        }
    }

    /// Plans, records the status, and performs the actions on the fake world (bindings; the
    /// member reporting is separate).
    fn step(&mut self) -> Plan {
        self.settle();
        let mut o = self.observed();
        let mut p = plan(&o);
        if !p.queries.is_empty() {
            // As the controller does: make the queries, plan again with their outcomes.
            o.metric_results = p
                .queries
                .iter()
                .map(|q| {
                    let outcome = self.prometheus.get(&q.query).cloned().unwrap_or_else(|| {
                        QueryOutcome::Error(format!("{}: connection refused", q.url))
                    });
                    (q.key.clone(), outcome)
                })
                .collect();
            let asked = p.queries.clone();
            p = plan(&o);
            assert!(
                p.queries.is_empty(),
                "a plan with outcomes asks nothing more"
            );
            self.asked.extend(asked);
        }
        self.perform(&p.actions);
        self.run.status = Some(p.status.clone());
        p
    }

    fn perform(&mut self, actions: &[Action]) {
        for a in actions {
            match a {
                Action::Bind { cluster, index, .. } => {
                    if let Some(b) = self.bindings.iter_mut().find(|b| &b.cluster == cluster) {
                        b.state = BindingState::Bound;
                        b.resource_snapshot_index = Some(*index);
                        b.update_run_name = Some(self.run.metadata.name.clone().unwrap());
                        b.health_timeout = self.run.spec.health_timeout.clone();
                    }
                    // The work generator writes the Work at the index (a new generation when
                    // it changes).
                    let w = self.works.entry(cluster.clone()).or_default();
                    if w.index != *index || w.generation.is_none() {
                        *w = WorkView {
                            index: *index,
                            generation: Some(w.generation.unwrap_or(0) + 1),
                            ..Default::default()
                        };
                    }
                }
                Action::CreateApproval { name, .. } => {
                    self.approvals.entry(name.clone()).or_default();
                }
                Action::AcceptApproval { name } => {
                    self.approvals.get_mut(name).unwrap().accepted = true;
                }
                Action::Unbind { cluster } => {
                    self.bindings.retain(|b| &b.cluster != cluster);
                    self.works.remove(cluster);
                }
                Action::CreateRollbackRun {
                    name,
                    index,
                    rollback,
                } => {
                    if !self.rollback_runs.iter().any(|(n, ..)| n == name) {
                        self.rollback_runs
                            .push((name.clone(), *index, rollback.clone()));
                    }
                }
            }
        }
    }

    /// The member of `cluster` reports its Work applied and available.
    fn member_ready(&mut self, cluster: &str) {
        let w = self.works.get_mut(cluster).unwrap();
        let c = |status: &str| ConditionView {
            status: status.into(),
            reason: "Done".into(),
            message: "ok".into(),
            observed_generation: w.generation,
        };
        w.applied = Some(c("True"));
        w.available = Some(c("True"));
        w.applied_index = Some(w.index);
    }

    /// The member of `cluster` reports that it could not apply its Work.
    fn member_apply_failed(&mut self, cluster: &str, message: &str) {
        let w = self.works.get_mut(cluster).unwrap();
        w.applied = Some(ConditionView {
            status: "False".into(),
            reason: "ApplyFailed".into(),
            message: message.into(),
            observed_generation: w.generation,
        });
    }

    fn approve(&mut self, name: &str) {
        self.approvals.get_mut(name).unwrap().approved = true;
    }

    fn status(&self) -> fleethub_crds::update_run::UpdateRunStatus {
        self.run.status.clone().unwrap()
    }

    fn stage_clusters(&self, stage: usize) -> Vec<String> {
        self.status().stages_status[stage]
            .clusters
            .iter()
            .map(|c| c.cluster_name.clone())
            .collect()
    }
}

fn binds(p: &Plan) -> Vec<&str> {
    p.actions
        .iter()
        .filter_map(|a| match a {
            Action::Bind { cluster, .. } => Some(cluster.as_str()),
            _ => None,
        })
        .collect()
}

fn run_condition(p: &Plan, type_: &str) -> (String, String, String) {
    let c = find(&p.status.conditions, type_).unwrap_or_else(|| panic!("no {type_} condition"));
    (c.status.clone(), c.reason.clone(), c.message.clone())
}

#[test]
fn initialization_sorts_clusters_into_stages_and_orders_them() {
    let mut w = World::new();
    w.bindings.push(BindingView {
        cluster: "gone".into(),
        state: BindingState::Unscheduled,
        ..Default::default()
    });
    let p = w.step();
    assert!(is_true(&p.status.conditions, INITIALIZED));
    assert_eq!(w.stage_clusters(0), ["stage-a"]);
    assert_eq!(w.stage_clusters(1), ["canary-a"]);
    // By `order` (1, then 2 and 2 by name), the cluster without the label last.
    assert_eq!(
        w.stage_clusters(2),
        ["prod-c", "prod-a", "prod-b", "prod-z"]
    );
    let deletion = p.status.deletion_stage_status.as_ref().unwrap();
    assert_eq!(deletion.clusters[0].cluster_name, "gone");
    assert_eq!(p.status.policy_observed_cluster_count, Some(6));
    assert_eq!(
        p.status.staged_update_strategy_snapshot,
        Some(three_stages())
    );
    let canary_task = &p.status.stages_status[1].after_stage_task_status[0];
    assert_eq!(
        canary_task.approval_request_name.as_deref(),
        Some("rollout-canary")
    );
}

#[test]
fn later_strategy_and_label_edits_do_not_affect_an_initialized_run() {
    let mut w = World::new();
    w.step();
    let frozen = w.status().stages_status.clone();
    w.strategy = strategy(json!({"stages": [{"name": "everything"}]}));
    w.labels
        .get_mut("prod-z")
        .unwrap()
        .insert("order".into(), "0".into());
    w.step();
    let after: Vec<_> = w
        .status()
        .stages_status
        .iter()
        .map(|s| s.stage_name.clone())
        .collect();
    assert_eq!(after, ["staging", "canary", "production"]);
    assert_eq!(
        w.status().stages_status[2].clusters.len(),
        frozen[2].clusters.len()
    );
    assert_eq!(
        w.stage_clusters(2),
        ["prod-c", "prod-a", "prod-b", "prod-z"]
    );
}

#[test]
fn initialization_failures_name_the_object_and_are_final() {
    type Setup = fn(&mut World);
    let cases: Vec<(&str, Setup, &str, &str)> = vec![
        (
            "no placement",
            |w| w.placement = None,
            "PlacementNotFound",
            "Placement web does not exist",
        ),
        (
            "rolling placement",
            |w| w.placement.as_mut().unwrap().spec.strategy = None,
            "PlacementNotExternal",
            "Placement web rolls out with strategy RollingUpdate",
        ),
        (
            "cluster in no stage",
            |w| w.cluster("lost", &[("env", "qa")]),
            "ClusterMatchesNoStage",
            "cluster lost (labels env=qa) matches no stage of StagedUpdateStrategy three",
        ),
        (
            "cluster in two stages",
            |w| w.strategy.stages[0].label_selector = Some(Default::default()),
            "ClusterMatchesSeveralStages",
            "matches stages staging and canary",
        ),
        (
            "non-integer order",
            |w| w.cluster("prod-x", &[("env", "production"), ("order", "first")]),
            "InvalidSortingLabel",
            "cluster prod-x has label order=\"first\"",
        ),
        (
            "unknown member",
            |w| {
                w.bindings.push(BindingView {
                    cluster: "ghost".into(),
                    state: BindingState::Scheduled,
                    ..Default::default()
                })
            },
            "MemberClusterNotFound",
            "MemberCluster ghost does not exist",
        ),
        (
            "more clusters than a run can record",
            |w| {
                // 63-character names: 16,000 of them take more than a run may record.
                for i in 0..16_000 {
                    w.cluster(&format!("prod-{i:058}"), &[("env", "production")]);
                }
            },
            "TooManyClusters",
            "Placement web has 16006 clusters to update and 0 to remove; their names take 1031 KiB of the run's status, more than the 1024 KiB one UpdateRun may use",
        ),
    ];
    for (what, setup, reason, message) in cases {
        let mut w = World::new();
        setup(&mut w);
        let p = w.step();
        let (status, got_reason, got_message) = run_condition(&p, INITIALIZED);
        assert_eq!(
            (status.as_str(), got_reason.as_str()),
            ("False", reason),
            "{what}: {got_message}"
        );
        assert!(
            got_message.contains(message),
            "{what}: {got_message:?} lacks {message:?}"
        );
        assert!(is_false(&p.status.conditions, SUCCEEDED), "{what}");
        assert!(p.actions.is_empty(), "{what}");
        // Final: a later plan changes nothing, even once the cause is gone.
        let again = plan(
            &World {
                run: w.run.clone(),
                ..World::new()
            }
            .observed(),
        );
        assert_eq!(again.status, p.status, "{what}");
        assert!(again.actions.is_empty(), "{what}");
    }

    let missing_strategy = World::new();
    let o = Observed {
        strategy: None,
        ..missing_strategy.observed()
    };
    assert!(
        run_condition(&plan(&o), INITIALIZED)
            .2
            .contains("StagedUpdateStrategy three does not exist")
    );
    let o = Observed {
        snapshot_exists: false,
        ..missing_strategy.observed()
    };
    assert!(
        run_condition(&plan(&o), INITIALIZED)
            .2
            .contains("no ResourceSnapshot with index 2")
    );
    // A run that can never start fails even while another run rolls out (and so never makes
    // that run yield to it).
    let o = Observed {
        siblings: siblings(&["earlier".into()], &[]),
        ..o
    };
    assert_eq!(
        run_condition(&plan(&o), INITIALIZED).1,
        "ResourceSnapshotNotFound"
    );
}

#[test]
fn a_newer_run_waits_for_the_older_one_to_yield_and_then_takes_over() {
    // The older run is part-way through staging.
    let mut old = World::new();
    assert_eq!(binds(&old.step()), ["stage-a"]);
    assert!(binds(&old.step()).is_empty(), "its binding already says so");

    // The newer run validates, then waits: not initialized, not failed, no writes.
    let mut new = World::new();
    new.run.metadata.name = Some("rollback".into());
    new.earlier_runs = vec!["r1".into()];
    let p = new.step();
    let (status, reason, message) = run_condition(&p, INITIALIZED);
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("False", "WaitingForPreviousRun")
    );
    assert!(message.contains("waiting for UpdateRun r1"), "{message}");
    assert!(find(&p.status.conditions, SUCCEEDED).is_none());
    assert!(p.actions.is_empty());
    assert_eq!(p.events.len(), 1);
    // Planning again while still waiting neither repeats the event nor writes anything.
    let again = new.step();
    assert!(again.events.is_empty() && again.actions.is_empty());

    // The older run sees it and yields: it ends, superseded, without another write.
    old.later_runs = vec!["rollback".into()];
    old.member_ready("stage-a");
    let p = old.step();
    assert!(
        p.actions.is_empty(),
        "a superseded run writes nothing: {:?}",
        p.actions
    );
    let (status, reason, message) = run_condition(&p, SUCCEEDED);
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("False", "UpdateRunSuperseded")
    );
    assert!(
        message.contains("superseded by UpdateRun rollback"),
        "{message}"
    );
    assert!(p.status.end_time.is_some());
    assert!(
        old.step().actions.is_empty(),
        "a superseded run stays ended"
    );

    // Once the older run has ended, the newer one initializes and starts.
    new.earlier_runs.clear();
    let p = new.step();
    assert!(is_true(&p.status.conditions, INITIALIZED));
    assert_eq!(binds(&p), ["stage-a"]);
}

#[test]
fn the_three_stage_journey_respects_order_concurrency_and_gates() {
    let mut w = World::new();
    let mut first_binds: Vec<String> = Vec::new();
    let record = |p: &Plan, first: &mut Vec<String>| {
        for c in binds(p) {
            if !first.iter().any(|f| f == c) {
                first.push(c.to_string());
            }
        }
    };

    // staging: its one cluster starts; nothing else.
    let p = w.step();
    record(&p, &mut first_binds);
    assert_eq!(binds(&p), ["stage-a"]);
    assert_eq!(p.status.current_stage.as_deref(), Some("staging"));
    assert_eq!(run_condition(&p, PROGRESSING).1, "UpdateRunStarted");

    // The member has not reported yet: still pending; the binding already points at the
    // snapshot for this run, so it is not rewritten.
    let p = w.step();
    assert!(binds(&p).is_empty());
    // A binding that does not say so (lost to a crash, or pointed elsewhere by another run) is
    // pointed again.
    w.bindings[0].update_run_name = Some("another-run".into());
    let p = w.step();
    assert_eq!(binds(&p), ["stage-a"]);
    w.bindings[0].resource_snapshot_index = Some(0);
    let p = w.step();
    assert_eq!(binds(&p), ["stage-a"]);

    w.now = t(10);
    w.member_ready("stage-a");
    let p = w.step();
    record(&p, &mut first_binds);
    let (status, reason, message) = run_condition(&p, PROGRESSING);
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("False", "UpdateRunWaiting"),
        "{message}"
    );
    assert!(message.contains("waits until"), "{message}");
    assert_eq!(p.requeue_after, Some(Duration::from_secs(60)));
    assert!(binds(&p).is_empty());

    // Not a second early.
    w.now = t(69);
    let p = w.step();
    assert!(binds(&p).is_empty());
    assert_eq!(p.requeue_after, Some(Duration::from_secs(1)));

    // The wait is over: canary starts in the same plan.
    w.now = t(70);
    let p = w.step();
    record(&p, &mut first_binds);
    assert_eq!(binds(&p), ["canary-a"]);
    assert!(is_true(&p.status.stages_status[0].conditions, SUCCEEDED));

    // canary done → an ApprovalRequest, and the run waits for it.
    w.now = t(80);
    w.member_ready("canary-a");
    let p = w.step();
    assert!(p.actions.contains(&Action::CreateApproval {
        name: "rollout-canary".into(),
        stage: "canary".into(),
        policy: None,
        index: Some("2".into()),
    }));
    assert!(
        run_condition(&p, PROGRESSING)
            .2
            .contains("waits for approval of ApprovalRequest rollout-canary")
    );
    // Hours later, still waiting: no timer skips an approval.
    w.now = t(100_000);
    let p = w.step();
    assert!(binds(&p).is_empty());
    assert!(
        !p.actions
            .iter()
            .any(|a| matches!(a, Action::CreateApproval { .. })),
        "created once"
    );

    // Approved → accepted, and production starts two at a time (50% of 4), in order.
    w.approve("rollout-canary");
    let p = w.step();
    record(&p, &mut first_binds);
    assert!(p.actions.contains(&Action::AcceptApproval {
        name: "rollout-canary".into()
    }));
    assert_eq!(binds(&p), ["prod-c", "prod-a"]);

    // prod-a finishes first: one slot frees, prod-b starts; prod-c is still in flight (its
    // binding already points at the snapshot, so it is not rewritten).
    w.now = t(100_010);
    w.member_ready("prod-a");
    let p = w.step();
    record(&p, &mut first_binds);
    assert_eq!(binds(&p), ["prod-b"]);
    w.member_ready("prod-c");
    w.member_ready("prod-b");
    let p = w.step();
    record(&p, &mut first_binds);
    assert_eq!(binds(&p), ["prod-z"]);
    w.member_ready("prod-z");
    w.now = t(100_020);
    let p = w.step();
    // Approval and TimedWait both gate the end of production.
    assert!(p.actions.contains(&Action::CreateApproval {
        name: "rollout-production".into(),
        stage: "production".into(),
        policy: None,
        index: Some("2".into()),
    }));
    w.approve("rollout-production");
    w.now = t(100_050);
    let p = w.step();
    assert!(
        find(&p.status.conditions, SUCCEEDED).is_none(),
        "the 1m wait has not passed"
    );
    w.now = t(100_080);
    let p = w.step();
    assert_eq!(run_condition(&p, SUCCEEDED).0, "True");
    assert_eq!(p.status.current_stage, None);
    assert!(p.status.end_time.is_some());

    assert_eq!(
        first_binds,
        [
            "stage-a", "canary-a", "prod-c", "prod-a", "prod-b", "prod-z"
        ]
    );
    // Finished runs stay finished.
    let p = w.step();
    assert!(p.actions.is_empty());
}

/// A run of the snapshot every cluster already runs (another run put it there; this one may
/// change only their overrides): a cluster is not done on the earlier run's Work until its
/// Binding shows this run's bind. Seen in CI: the bind was not in the Bindings cache yet, and
/// canary passed on the Work of the run before, whose overrides were not the run's.
#[test]
fn a_cluster_already_at_the_index_waits_for_this_runs_bind() {
    let mut w = World::new();
    for b in &mut w.bindings {
        b.state = BindingState::Bound;
        b.resource_snapshot_index = Some(2);
        b.update_run_name = Some("earlier-run".into());
        b.health_timeout = w.run.spec.health_timeout.clone();
    }
    let clusters: Vec<String> = w.bindings.iter().map(|b| b.cluster.clone()).collect();
    for c in &clusters {
        w.works.insert(
            c.clone(),
            WorkView {
                index: 2,
                generation: Some(1),
                ..Default::default()
            },
        );
        w.member_ready(c);
    }
    // The run starts staging and binds stage-a; the bind is not seen yet.
    w.settle();
    let p = plan(&w.observed());
    assert_eq!(binds(&p), ["stage-a"]);
    w.run.status = Some(p.status.clone());
    let p = w.step();
    let stage_a = &p.status.stages_status[0].clusters[0];
    assert!(
        !is_true(&stage_a.conditions, SUCCEEDED),
        "stage-a passed on the earlier run's Work"
    );
    assert_eq!(
        stage_a.progress.as_deref(),
        Some("its Binding does not show this run's bind yet")
    );
    assert_eq!(binds(&p), ["stage-a"], "the bind is repeated");
    // Once the bind shows, the Work (already at the index) counts.
    let p = w.step();
    assert!(is_true(
        &p.status.stages_status[0].clusters[0].conditions,
        SUCCEEDED
    ));
}

#[test]
fn a_failed_cluster_stops_the_run_until_it_recovers() {
    let mut w = World::new();
    w.step();
    w.member_apply_failed(
        "stage-a",
        "deployment app/web: admission webhook denied the request",
    );
    let p = w.step();
    let (status, reason, message) = run_condition(&p, PROGRESSING);
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("False", "ClusterUpdateFailed")
    );
    assert!(
        message.contains("cluster stage-a: apply failed (ApplyFailed): deployment app/web"),
        "{message}"
    );
    assert!(
        p.events
            .iter()
            .any(|e| e.warning && e.reason == "ClusterUpdateFailed")
    );
    // Time passes: nothing new starts, the failure is not repeated as an event.
    w.now = t(1000);
    let p = w.step();
    assert!(binds(&p).is_empty());
    assert!(!p.events.iter().any(|e| e.reason == "ClusterUpdateFailed"));
    // The member recovers: the run resumes by itself.
    w.member_ready("stage-a");
    let p = w.step();
    assert!(is_true(
        &p.status.stages_status[0].clusters[0].conditions,
        SUCCEEDED
    ));
    assert_eq!(run_condition(&p, PROGRESSING).1, "UpdateRunWaiting");
}

#[test]
fn a_timeout_on_a_member_whose_agent_is_silent_says_so() {
    let mut w = World::new();
    w.step();
    w.unhealthy.insert(
        "stage-a".into(),
        "no heartbeat for 47s (expected every 5s)".into(),
    );
    w.now = t(300);
    let (_, reason, message) = run_condition(&w.step(), PROGRESSING);
    assert_eq!(reason, "ClusterUpdateFailed");
    assert!(
        message.contains("cluster stage-a did not become available within 5m: waiting for the member agent to apply the Work (MemberCluster stage-a is not healthy: no heartbeat for 47s"),
        "{message}"
    );
}

#[test]
fn a_cluster_not_available_within_the_health_timeout_fails_with_the_members_reason() {
    let mut w = World::new();
    w.step();
    let work = w.works.get_mut("stage-a").unwrap();
    let cond = |status: &str, message: &str| ConditionView {
        status: status.into(),
        reason: "WorkloadsNotReady".into(),
        message: message.into(),
        observed_generation: work.generation,
    };
    work.applied = Some(cond("True", "applied"));
    work.available = Some(cond("False", "deployment app/web: 1/3 replicas ready"));
    work.applied_index = Some(2);
    w.now = t(299);
    let p = w.step();
    assert_eq!(run_condition(&p, PROGRESSING).0, "True");
    assert_eq!(p.requeue_after, Some(Duration::from_secs(1)));
    assert_eq!(
        p.status.stages_status[0].clusters[0].progress.as_deref(),
        Some("not available yet: deployment app/web: 1/3 replicas ready"),
        "the member's words reach the run's cluster row"
    );
    w.now = t(300);
    let p = w.step();
    let (_, reason, message) = run_condition(&p, PROGRESSING);
    assert_eq!(reason, "ClusterUpdateFailed");
    assert!(
        message.contains("cluster stage-a did not become available within 5m: not available yet: deployment app/web: 1/3 replicas ready"),
        "{message}"
    );
    let cluster = &p.status.stages_status[0].clusters[0];
    assert_eq!(
        find(&cluster.conditions, SUCCEEDED).unwrap().reason,
        "ClusterHealthTimeout"
    );
    assert_eq!(
        cluster.progress, None,
        "a failed cluster's row says why instead"
    );
}

#[test]
fn an_updating_clusters_progress_follows_its_work_and_is_cleared_when_done() {
    let mut w = World::new();
    w.step();
    let p = w.step();
    assert_eq!(
        p.status.stages_status[0].clusters[0].progress.as_deref(),
        Some("waiting for the member agent to apply the Work")
    );
    let work = w.works.get_mut("stage-a").unwrap();
    let cond = |status: &str, message: &str| ConditionView {
        status: status.into(),
        reason: "WorkloadsNotReady".into(),
        message: message.into(),
        observed_generation: work.generation,
    };
    let rolled = format!(
        "phasedrollout app/db: 2/5 pods rolled: before pod 2: check 1/3{}",
        " (and much more)".repeat(20)
    );
    work.applied = Some(cond("True", "applied"));
    work.available = Some(cond("False", &rolled));
    work.applied_index = Some(2);
    let p = w.step();
    let progress = p.status.stages_status[0].clusters[0]
        .progress
        .clone()
        .unwrap();
    assert!(
        progress.starts_with("not available yet: phasedrollout app/db: 2/5 pods rolled"),
        "{progress}"
    );
    assert_eq!(progress.chars().count(), 121, "kept short: {progress}");
    assert!(progress.ends_with('…'));
    let work = w.works.get_mut("stage-a").unwrap();
    work.available = Some(ConditionView {
        status: "True".into(),
        reason: "Available".into(),
        message: "all available".into(),
        observed_generation: work.generation,
    });
    let p = w.step();
    let cluster = &p.status.stages_status[0].clusters[0];
    assert!(is_true(&cluster.conditions, SUCCEEDED));
    assert_eq!(cluster.progress, None);
}

#[test]
fn a_stopped_run_starts_nothing_new_and_resumes() {
    let mut w = World::new();
    w.run = run(Some(UpdateRunState::Stop));
    let p = w.step();
    assert!(binds(&p).is_empty());
    assert_eq!(run_condition(&p, PROGRESSING).1, "UpdateRunStopped");
    w.run.spec.state = Some(UpdateRunState::Run);
    w.run.metadata.generation = Some(2);
    let p = w.step();
    assert_eq!(binds(&p), ["stage-a"]);
    assert_eq!(p.status.observed_generation, Some(2));
    // Stopping mid-stage lets the started cluster finish but starts no other.
    w.run.spec.state = Some(UpdateRunState::Stop);
    w.member_ready("stage-a");
    w.now = t(500);
    let p = w.step();
    assert!(is_true(
        &p.status.stages_status[0].clusters[0].conditions,
        SUCCEEDED
    ));
    let p2 = {
        w.now = t(1000);
        w.step()
    };
    assert!(is_true(&p2.status.stages_status[0].conditions, SUCCEEDED));
    assert!(binds(&p2).is_empty());
    assert_eq!(run_condition(&p2, PROGRESSING).1, "UpdateRunStopped");
}

#[test]
fn a_run_stopped_at_a_gate_says_so_and_an_approval_meanwhile_starts_nothing_until_resumed() {
    let mut w = World::new();
    // staging, its soak, canary: the run waits for the canary approval.
    w.step();
    w.member_ready("stage-a");
    w.step();
    w.now = t(60);
    assert_eq!(binds(&w.step()), ["canary-a"]);
    w.member_ready("canary-a");
    let p = w.step();
    assert_eq!(run_condition(&p, PROGRESSING).1, "UpdateRunWaiting");

    w.run.spec.state = Some(UpdateRunState::Stop);
    w.run.metadata.generation = Some(2);
    let p = w.step();
    let (status, reason, message) = run_condition(&p, PROGRESSING);
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("False", "UpdateRunStopped")
    );
    assert!(
        message.contains("waits for approval of ApprovalRequest rollout-canary"),
        "{message}"
    );

    // Approved while stopped: the approval is taken, the canary stage ends, production waits.
    w.approve("rollout-canary");
    let p = w.step();
    assert!(p.actions.contains(&Action::AcceptApproval {
        name: "rollout-canary".into()
    }));
    assert!(binds(&p).is_empty());
    assert_eq!(run_condition(&p, PROGRESSING).1, "UpdateRunStopped");
    assert!(is_true(&p.status.stages_status[1].conditions, SUCCEEDED));

    w.run.spec.state = Some(UpdateRunState::Run);
    w.run.metadata.generation = Some(3);
    let p = w.step();
    assert_eq!(binds(&p), ["prod-c", "prod-a"]);
}

#[test]
fn empty_stages_still_honour_their_gates_and_the_deletion_stage_removes_unselected_clusters() {
    let mut w = World::new();
    w.strategy = strategy(json!({"stages": [
        {"name": "all", "afterStageTasks": [{"type": "Approval"}]}
    ]}));
    w.labels.clear();
    w.bindings = vec![BindingView {
        cluster: "old".into(),
        state: BindingState::Unscheduled,
        ..Default::default()
    }];
    w.works.insert(
        "old".into(),
        WorkView {
            index: 1,
            generation: Some(1),
            ..Default::default()
        },
    );
    let p = w.step();
    assert!(p.actions.contains(&Action::CreateApproval {
        name: "rollout-all".into(),
        stage: "all".into(),
        policy: None,
        index: Some("2".into()),
    }));
    assert!(
        !p.actions.iter().any(|a| matches!(a, Action::Unbind { .. })),
        "the gate comes first"
    );
    w.approve("rollout-all");
    let p = w.step();
    assert!(p.actions.contains(&Action::Unbind {
        cluster: "old".into()
    }));
    assert!(
        find(&p.status.conditions, SUCCEEDED).is_none(),
        "not until the binding is gone"
    );
    let p = w.step();
    assert_eq!(run_condition(&p, SUCCEEDED).0, "True");
    let deletion = p.status.deletion_stage_status.unwrap();
    assert!(is_true(&deletion.clusters[0].conditions, SUCCEEDED));
}

/// How a crash (or a failed write) between a plan's status and its actions loses writes.
#[derive(Clone, Copy)]
enum Loss {
    /// Actions first, then the status (the order the controller once used): the status is lost.
    StatusAfterActions,
    /// The status first, then the actions (the controller's order): the status write is lost
    /// (and nothing is done), or any of the actions after it are.
    ActionsAfterStatus,
}

/// Restart safety: the hub may die after performing a plan's actions but before writing its
/// status, any number of times. The run must still update every cluster once, in order, and
/// never pass a gate early.
#[test]
fn lost_status_writes_never_reorder_clusters_or_skip_gates() {
    survives(Loss::StatusAfterActions);
}

/// Restart safety in the controller's order: the hub may die after writing a plan's status and
/// before performing some or all of its actions (or a Binding write may fail), any number of
/// times; the next plan repairs what is missing. Same guarantees.
#[test]
fn lost_actions_after_a_recorded_status_never_reorder_clusters_or_skip_gates() {
    survives(Loss::ActionsAfterStatus);
}

fn survives(loss: Loss) {
    for seed in 0..200u64 {
        let mut rng = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let mut next = move || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        let mut w = World::new();
        let mut first_binds: Vec<String> = Vec::new();
        let mut approved_at: BTreeMap<String, Timestamp> = BTreeMap::new();
        let mut ever_bound = std::collections::BTreeSet::new();
        for step in 0..400 {
            w.settle();
            let p = plan(&w.observed());
            let crashed = next() % 3 == 0;
            let performed: Vec<Action> = match loss {
                Loss::StatusAfterActions => p.actions.clone(),
                Loss::ActionsAfterStatus if crashed => Vec::new(),
                Loss::ActionsAfterStatus => p
                    .actions
                    .iter()
                    .filter(|_| next() % 2 == 0)
                    .cloned()
                    .collect(),
            };
            w.perform(&performed);
            // The order clusters start in: as recorded with the status (clusters started
            // together are bound together, in any order), or as bound when that comes first.
            let lost_with_the_status = matches!(loss, Loss::ActionsAfterStatus) && crashed;
            let started = if lost_with_the_status {
                Vec::new()
            } else {
                binds(&p)
            };
            for c in started {
                if !first_binds.iter().any(|f| f == c) {
                    first_binds.push(c.to_string());
                }
            }
            for a in &performed {
                if let Action::Bind { cluster, .. } = a {
                    ever_bound.insert(cluster.clone());
                }
            }
            // No cluster of a later stage is bound before the earlier stage's gates passed.
            if ever_bound.contains("canary-a") {
                assert!(
                    w.now >= t(60),
                    "seed {seed}: canary started before staging's wait ended"
                );
            }
            if ever_bound.iter().any(|c| c.starts_with("prod")) {
                assert!(
                    approved_at.contains_key("rollout-canary"),
                    "seed {seed}: production before approval"
                );
            }
            if !crashed {
                w.run.status = Some(p.status.clone());
            }
            if find(
                &w.run.status.clone().unwrap_or_default().conditions,
                SUCCEEDED,
            )
            .is_some()
            {
                break;
            }
            // The world moves: members finish, people approve, time passes.
            let bound: Vec<String> = w.works.keys().cloned().collect();
            for c in bound {
                if next() % 2 == 0 {
                    w.member_ready(&c);
                }
            }
            let pending: Vec<String> = w
                .approvals
                .iter()
                .filter(|(_, a)| !a.approved)
                .map(|(n, _)| n.clone())
                .collect();
            for name in pending {
                if next() % 4 == 0 {
                    w.approve(&name);
                    approved_at.insert(name, w.now);
                }
            }
            w.now = w.now.checked_add(Duration::from_secs(next() % 30)).unwrap();
            assert!(step < 399, "seed {seed}: run did not finish");
        }
        assert_eq!(
            first_binds,
            [
                "stage-a", "canary-a", "prod-c", "prod-a", "prod-b", "prod-z"
            ],
            "seed {seed}"
        );
        let status = w.status();
        assert!(is_true(&status.conditions, SUCCEEDED), "seed {seed}");
        // Production's TimedWait counted from when its clusters finished.
        let prod = &status.stages_status[2];
        let done = prod.clusters_completed_time.as_ref().unwrap().0;
        assert!(
            prod.end_time.as_ref().unwrap().0 >= done.checked_add(Duration::from_secs(60)).unwrap(),
            "seed {seed}"
        );
    }
}

#[path = "plan_gate_tests.rs"]
mod gates;

#[path = "plan_fleet_change_tests.rs"]
mod fleet_changes;

#[test]
fn the_run_controllers_cache_of_works_keeps_what_the_planner_reads() {
    let condition = |type_: &str| {
        json!({"type": type_, "status": "True", "reason": "R", "message": type_,
               "observedGeneration": 4, "lastTransitionTime": "2027-01-15T08:00:00Z"})
    };
    let manifests: Vec<serde_json::Value> = (0..20)
        .map(|i| {
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                        "metadata": {"name": format!("c{i}"), "namespace": "app"},
                        "data": {"k": "v".repeat(1000)}})
        })
        .collect();
    let full: fleethub_crds::Work = serde_json::from_value(json!({
        "apiVersion": "fleethub.dev/v1alpha1", "kind": "Work",
        "metadata": {"name": "web", "namespace": "fleet-member-a", "generation": 4,
                     "annotations": {fleethub_crds::overrides::WORK_OVERRIDES_ANNOTATION: "app/o-0"},
                     "managedFields": [{"manager": "fleethub-work-generator", "operation": "Apply",
                                        "fieldsType": "FieldsV1",
                                        "fieldsV1": {"f:spec": {"f:workload": {}}}}]},
        "spec": {"placementName": "web", "resourceSnapshotIndex": 3,
                 "workload": {"manifests": manifests}},
        "status": {"conditions": [condition("Applied"), condition("Available")],
                   "appliedResourceSnapshotIndex": 3,
                   "manifestConditions": [{"identifier": {"ordinal": 0, "version": "v1",
                                                          "kind": "ConfigMap", "name": "c0"},
                                           "conditions": [condition("Applied")]}]},
    }))
    .unwrap();
    // The hub's one cache of Works (`caches::SharedCaches`) keeps them as the work generator
    // slims them.
    let mut cached = full.clone();
    crate::work_generator::slim_work(&mut cached);
    assert!(cached.spec.workload.manifests.is_empty());
    let view = WorkView::from_work(&cached);
    assert_eq!(view, WorkView::from_work(&full));
    assert_eq!(
        (view.index, view.applied_index, view.overrides.as_deref()),
        (3, Some(3), Some("app/o-0"))
    );
    assert!(view.applied.is_some() && view.available.is_some());
}

#[path = "plan_scale_tests.rs"]
mod scale;

#[path = "plan_regression_tests.rs"]
mod regressions;
