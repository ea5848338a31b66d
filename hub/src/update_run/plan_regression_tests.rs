//! A cluster is never judged once: regressions hold the run, pause its soak, count against the
//! budget past the health timeout, and a failed run with `onFailure: Rollback` rolls back. On
//! the fake timeline of `plan_tests`.

use super::gates::settle;
use super::*;
use fleethub_crds::strategy::OnFailure;
use fleethub_crds::update_run::{REGRESSED, RollbackSpec, WAIT_TIME_ELAPSED, reason};

impl World {
    /// The member of `cluster` reports its workload unavailable again (same Work generation).
    fn member_regressed(&mut self, cluster: &str, message: &str) {
        let w = self.works.get_mut(cluster).unwrap();
        w.available = Some(ConditionView {
            status: "False".into(),
            reason: "WorkloadsNotReady".into(),
            message: message.into(),
            observed_generation: w.generation,
        });
    }

    fn cluster_status(
        &self,
        stage: usize,
        name: &str,
    ) -> fleethub_crds::update_run::ClusterUpdatingStatus {
        self.status().stages_status[stage]
            .clusters
            .iter()
            .find(|c| c.cluster_name == name)
            .unwrap()
            .clone()
    }
}

const LOST: &str = "deployment app/web: 0/2 replicas available";

fn soak(w: &World) -> fleethub_crds::update_run::StageTaskStatus {
    w.status().stages_status[0].after_stage_task_status[0].clone()
}

#[test]
fn a_regression_during_the_soak_holds_the_run_and_the_soak_counts_only_healthy_time() {
    let mut w = World::new();
    settle(&mut w);
    // Staging is done at t(0): its 1m soak runs until t(60).
    assert_eq!(soak(&w).conditions[0].reason, reason::WAIT_PENDING);
    w.now = t(20);
    w.member_regressed("stage-a", LOST);
    let p = w.step();
    let c = w.cluster_status(0, "stage-a");
    let regressed = find(&c.conditions, REGRESSED).unwrap();
    assert_eq!(
        (regressed.status.as_str(), regressed.reason.as_str()),
        ("True", reason::CLUSTER_REGRESSED)
    );
    assert!(regressed.message.contains(LOST), "{}", regressed.message);
    assert_eq!(regressed.last_transition_time.0, t(20));
    assert!(is_true(&c.conditions, SUCCEEDED), "held, not failed yet");
    let (status, why, message) = run_condition(&p, PROGRESSING);
    assert_eq!(
        (status.as_str(), why.as_str()),
        ("False", "ClusterRegressed")
    );
    assert!(
        message.contains("stage-a regressed 0s ago: deployment app/web: 0/2 replicas available"),
        "{message}"
    );
    assert!(
        p.events
            .iter()
            .any(|e| e.warning && e.reason == reason::CLUSTER_REGRESSED)
    );
    let task = soak(&w);
    let paused = find(&task.conditions, WAIT_TIME_ELAPSED).unwrap();
    assert_eq!(paused.reason, reason::SOAK_PAUSED);
    assert!(
        paused.message.contains("soak paused at 20s of 1m"),
        "{}",
        paused.message
    );

    // Long past the soak's end by the clock: still held, nothing bound, the soak not elapsed.
    w.now = t(200);
    let p = w.step();
    assert!(binds(&p).is_empty());
    assert_eq!(run_condition(&p, PROGRESSING).1, "ClusterRegressed");
    assert!(!is_true(&soak(&w).conditions, WAIT_TIME_ELAPSED));
    let (_, _, message) = run_condition(&p, PROGRESSING);
    assert!(message.contains("stage-a regressed 3m ago"), "{message}");

    // It recovers at t(200): 20 s of the soak counted, 40 s to go (until t(240)).
    w.member_ready("stage-a");
    let p = w.step();
    let c = w.cluster_status(0, "stage-a");
    let recovered = find(&c.conditions, REGRESSED).unwrap();
    assert_eq!(
        (recovered.status.as_str(), recovered.reason.as_str()),
        ("False", reason::CLUSTER_RECOVERED)
    );
    assert!(
        p.events
            .iter()
            .any(|e| e.reason == reason::CLUSTER_RECOVERED)
    );
    assert!(binds(&p).is_empty(), "the soak is not over");
    assert_eq!(soak(&w).paused_seconds, Some(180));
    assert_eq!(p.requeue_after, Some(Duration::from_secs(40)));
    w.now = t(239);
    assert!(binds(&w.step()).is_empty());
    w.now = t(240);
    let p = w.step();
    assert_eq!(
        binds(&p),
        ["canary-a"],
        "the soak passed: the next stage starts"
    );
}

#[test]
fn a_regression_in_an_earlier_stage_holds_a_later_one_and_stops_no_cluster_in_flight() {
    let mut w = World::new();
    w.strategy.stages[0].after_stage_tasks.clear();
    w.strategy.stages[1].after_stage_tasks.clear();
    w.step(); // stage-a bound
    w.member_ready("stage-a");
    let p = w.step();
    assert_eq!(binds(&p), ["canary-a"]);
    w.member_regressed("stage-a", LOST);
    w.now = t(5);
    let p = w.step();
    assert_eq!(run_condition(&p, PROGRESSING).1, "ClusterRegressed");
    // canary-a, in flight, finishes; production does not start.
    w.member_ready("canary-a");
    let p = w.step();
    assert!(is_true(
        &w.cluster_status(1, "canary-a").conditions,
        SUCCEEDED
    ));
    assert!(binds(&p).is_empty());
    assert!(w.status().stages_status[2].start_time.is_none());
    // Recovered: production starts.
    w.member_ready("stage-a");
    let p = w.step();
    assert_eq!(binds(&p), ["prod-c", "prod-a"]);
}

#[test]
fn a_regression_past_the_health_timeout_fails_the_cluster_and_the_run_holds_until_it_recovers() {
    let mut w = World::new();
    settle(&mut w);
    w.now = t(10);
    w.member_regressed("stage-a", LOST);
    let p = w.step();
    assert_eq!(
        p.requeue_after,
        Some(Duration::from_secs(300)),
        "until the timeout"
    );
    w.now = t(310);
    let p = w.step();
    let c = w.cluster_status(0, "stage-a");
    let failed = find(&c.conditions, SUCCEEDED).unwrap();
    assert_eq!(
        (failed.status.as_str(), failed.reason.as_str()),
        ("False", reason::CLUSTER_REGRESSED)
    );
    assert!(
        failed
            .message
            .contains("did not recover within the run's healthTimeout 5m"),
        "{}",
        failed.message
    );
    let (_, why, message) = run_condition(&p, PROGRESSING);
    assert_eq!(why, "ClusterUpdateFailed");
    assert!(
        message.contains("stage staging stopped: stage staging: stage-a stayed regressed"),
        "{message}"
    );
    assert!(
        find(&p.status.conditions, SUCCEEDED).is_none(),
        "Hold: not final"
    );
    // Recovery: the cluster succeeds again, the run goes on.
    w.member_ready("stage-a");
    w.now = t(400);
    let p = w.step();
    assert!(is_true(
        &w.cluster_status(0, "stage-a").conditions,
        SUCCEEDED
    ));
    // The soak stood still from t(10) to t(400): 10 s counted, 50 s to go.
    assert!(binds(&p).is_empty());
    assert_eq!(p.requeue_after, Some(Duration::from_secs(50)));
    w.now = t(450);
    assert_eq!(binds(&w.step()), ["canary-a"]);
}

#[test]
fn a_regression_within_max_failed_clusters_is_recorded_and_the_run_goes_on() {
    let mut w = World::new();
    w.strategy.stages[0].max_failed_clusters = Some(1);
    settle(&mut w);
    w.now = t(10);
    w.member_regressed("stage-a", LOST);
    w.step();
    w.now = t(310);
    let p = w.step();
    assert!(is_false(
        &w.cluster_status(0, "stage-a").conditions,
        SUCCEEDED
    ));
    assert!(
        binds(&p).is_empty(),
        "the soak resumed: 10 s counted, 300 s paused"
    );
    w.now = t(360);
    let p = w.step();
    assert_eq!(binds(&p), ["canary-a"]);
    assert_eq!(
        p.status.stages_status[0].counts().failed,
        1,
        "recorded as failed within the budget"
    );
}

#[test]
fn a_healthy_cluster_whose_work_is_not_in_view_is_left_as_it_is() {
    // The controller shows only the Works of clusters in flight or regressed, and unhealthy
    // ones: a done cluster without its Work in view stays done.
    let mut w = World::new();
    settle(&mut w);
    w.works.remove("stage-a");
    w.now = t(60);
    let p = w.step();
    assert_eq!(binds(&p), ["canary-a"]);
    assert!(find(&w.cluster_status(0, "stage-a").conditions, REGRESSED).is_none());
}

/// The run's clusters ran snapshot 1 before it; the run rolls out 2.
fn on_snapshot_1(w: &mut World) {
    for b in &mut w.bindings {
        b.state = BindingState::Bound;
        b.resource_snapshot_index = Some(1);
        b.update_run_name = Some("earlier".into());
    }
}

#[test]
fn on_failure_rollback_ends_the_run_and_reverts_what_it_updated_newest_first() {
    let mut w = World::new();
    on_snapshot_1(&mut w);
    w.run.spec.on_failure = Some(OnFailure::Rollback);
    settle(&mut w);
    assert_eq!(
        w.status().previous_resource_snapshot_index.as_deref(),
        Some("1")
    );
    w.now = t(60);
    settle(&mut w); // canary-a updated; its approval waits
    w.approve("rollout-canary");
    let p = w.step();
    assert_eq!(binds(&p), ["prod-c", "prod-a"]);
    w.member_ready("prod-c");
    w.member_apply_failed("prod-a", "deployment app/web: quota exceeded");
    let p = w.step();
    let (status, why, message) = run_condition(&p, SUCCEEDED);
    assert_eq!(
        (status.as_str(), why.as_str()),
        ("False", "ClusterUpdateFailed")
    );
    assert!(message.contains("quota exceeded"), "{message}");
    assert!(message.contains("onFailure is Rollback"), "{message}");
    assert_eq!(p.status.rollback_run.as_deref(), Some("rollout-rollback"));
    assert!(
        p.events
            .iter()
            .any(|e| e.reason == reason::RUN_ROLLED_BACK && e.cause == Some("ClusterUpdateFailed"))
    );
    assert_eq!(w.rollback_runs.len(), 1);
    let (name, index, rollback) = &w.rollback_runs[0];
    assert_eq!((name.as_str(), *index), ("rollout-rollback", 1));
    assert_eq!(
        rollback,
        &RollbackSpec {
            of: "rollout".into(),
            clusters: vec![
                "prod-a".into(),
                "prod-c".into(),
                "canary-a".into(),
                "stage-a".into()
            ],
        }
    );
    // Over: later plans change nothing and create nothing more.
    w.now = t(1000);
    let p = w.step();
    assert!(p.actions.is_empty());
    assert_eq!(w.rollback_runs.len(), 1);
}

#[test]
fn on_failure_rollback_from_the_strategy_and_a_regression_past_the_budget() {
    let mut w = World::new();
    on_snapshot_1(&mut w);
    w.strategy.on_failure = Some(OnFailure::Rollback);
    settle(&mut w);
    w.now = t(10);
    w.member_regressed("stage-a", LOST);
    w.step();
    w.now = t(310);
    let p = w.step();
    assert_eq!(run_condition(&p, SUCCEEDED).0, "False");
    assert_eq!(w.rollback_runs[0].2.clusters, ["stage-a"]);
}

#[test]
fn on_failure_hold_is_the_default_and_a_run_with_nothing_before_it_has_nothing_to_roll_back() {
    let mut w = World::new();
    w.run.spec.on_failure = Some(OnFailure::Rollback);
    w.step();
    w.member_apply_failed("stage-a", "denied");
    let p = w.step();
    assert_eq!(run_condition(&p, SUCCEEDED).0, "False");
    assert!(w.rollback_runs.is_empty());
    assert!(
        p.events
            .iter()
            .any(|e| e.reason == reason::RUN_ROLLED_BACK
                && e.message.contains("nothing to roll back"))
    );

    let mut w = World::new();
    on_snapshot_1(&mut w);
    w.step();
    w.member_apply_failed("stage-a", "denied");
    let p = w.step();
    assert!(
        find(&p.status.conditions, SUCCEEDED).is_none(),
        "Hold waits"
    );
    assert!(w.rollback_runs.is_empty());
}

#[test]
fn a_rollback_run_reverts_only_its_clusters_in_order_without_gates() {
    let mut w = World::new();
    for b in &mut w.bindings {
        b.state = BindingState::Bound;
        b.resource_snapshot_index = Some(2);
    }
    w.run.spec.resource_snapshot_index = Some("1".into());
    w.run.spec.rollback = Some(RollbackSpec {
        of: "rollout-0".into(),
        clusters: vec!["prod-a".into(), "gone".into(), "stage-a".into()],
    });
    // The strategy it names no longer matters (nor exists).
    let p = w.step();
    assert!(is_true(&p.status.conditions, INITIALIZED));
    assert_eq!(p.status.stages_status.len(), 1);
    assert_eq!(w.stage_clusters(0), ["prod-a", "stage-a"]);
    assert!(p.status.clusters_not_in_run.is_none());
    assert_eq!(
        binds(&p),
        ["prod-a"],
        "25% of 2: one at a time, newest first"
    );
    w.member_ready("prod-a");
    let p = w.step();
    assert_eq!(binds(&p), ["stage-a"]);
    w.member_ready("stage-a");
    let p = w.step();
    assert_eq!(run_condition(&p, SUCCEEDED).0, "True");
    let untouched = w.bindings.iter().find(|b| b.cluster == "canary-a").unwrap();
    assert_eq!(untouched.resource_snapshot_index, Some(2));
}

/// staging → production, no gates, a 2m bake.
fn baked() -> StagedUpdateStrategySpec {
    strategy(json!({"bake": "2m", "stages": [
        {"name": "staging", "labelSelector": {"matchLabels": {"env": "staging"}}},
        {"name": "production", "labelSelector": {"matchLabels": {"env": "production"}},
         "maxConcurrency": "100%"}
    ]}))
}

fn without_canary(w: &mut World) {
    w.labels.remove("canary-a");
    w.bindings.retain(|b| b.cluster != "canary-a");
}

#[test]
fn a_bake_keeps_the_run_watching_after_its_last_stage_and_counts_only_healthy_time() {
    let mut w = World::new();
    without_canary(&mut w);
    w.strategy = baked();
    let p = settle(&mut w);
    let (status, why, message) = run_condition(&p, PROGRESSING);
    assert_eq!((status.as_str(), why.as_str()), ("True", reason::BAKING));
    assert!(message.contains("0s of 2m"), "{message}");
    assert!(find(&p.status.conditions, SUCCEEDED).is_none());
    assert_eq!(p.requeue_after, Some(Duration::from_secs(120)));
    // A regression 30 s in: held, the bake stands still for 60 s.
    w.now = t(30);
    w.member_regressed("prod-a", LOST);
    let p = w.step();
    assert_eq!(run_condition(&p, PROGRESSING).1, "ClusterRegressed");
    w.now = t(90);
    w.member_ready("prod-a");
    let p = w.step();
    assert_eq!(run_condition(&p, PROGRESSING).1, reason::BAKING);
    assert_eq!(p.status.bake.as_ref().unwrap().paused_seconds, Some(60));
    w.now = t(179);
    assert!(find(&w.step().status.conditions, SUCCEEDED).is_none());
    w.now = t(180);
    let p = w.step();
    assert_eq!(run_condition(&p, SUCCEEDED).0, "True");
    assert!(p.status.bake.as_ref().unwrap().end_time.is_some());
}

#[test]
fn a_regression_during_the_bake_past_the_health_timeout_rolls_the_run_back() {
    let mut w = World::new();
    without_canary(&mut w);
    on_snapshot_1(&mut w);
    w.strategy = baked();
    w.strategy.on_failure = Some(OnFailure::Rollback);
    settle(&mut w);
    w.now = t(10);
    w.member_regressed("stage-a", LOST);
    w.step();
    w.now = t(310);
    let p = w.step();
    assert_eq!(run_condition(&p, SUCCEEDED).0, "False");
    let (_, _, rollback) = &w.rollback_runs[0];
    assert_eq!(rollback.clusters.len(), 5, "{:?}", rollback.clusters);
    assert_eq!(
        rollback.clusters.last().map(String::as_str),
        Some("stage-a")
    );
}

/// `cluster` runs snapshot 1 (the fleet's known version) and its workload is unhealthy there.
fn broken_on_1(w: &mut World, cluster: &str) {
    w.works.insert(
        cluster.into(),
        WorkView {
            index: 1,
            generation: Some(1),
            ..Default::default()
        },
    );
    w.member_ready(cluster);
    w.member_regressed(cluster, LOST);
}

#[test]
fn a_cluster_unhealthy_before_its_turn_is_not_updated_and_holds_the_stage_past_its_budget() {
    let mut w = World::new();
    on_snapshot_1(&mut w);
    broken_on_1(&mut w, "stage-a");
    let p = w.step();
    assert!(binds(&p).is_empty());
    let (status, why, message) = run_condition(&p, PROGRESSING);
    assert_eq!(
        (status.as_str(), why.as_str()),
        ("False", "WaitingForHealthyMember")
    );
    assert!(
        message.contains("cluster stage-a") && message.contains(LOST),
        "{message}"
    );
    assert_eq!(
        p.events
            .iter()
            .filter(|e| e.reason == reason::UNHEALTHY_BEFORE_UPDATE)
            .count(),
        1
    );
    w.now = t(5);
    let p = w.step();
    assert!(
        !p.events
            .iter()
            .any(|e| e.reason == reason::UNHEALTHY_BEFORE_UPDATE)
    );
    // Healthy again on its snapshot: its turn comes.
    w.member_ready("stage-a");
    assert_eq!(binds(&w.step()), ["stage-a"]);
}

#[test]
fn within_max_failed_clusters_a_cluster_unhealthy_before_its_turn_is_passed_over() {
    let mut w = World::new();
    on_snapshot_1(&mut w);
    w.strategy.stages[2].max_failed_clusters = Some(1);
    broken_on_1(&mut w, "prod-c");
    settle(&mut w);
    w.now = t(60);
    settle(&mut w);
    w.approve("rollout-canary");
    let p = w.step();
    assert_eq!(binds(&p), ["prod-a", "prod-b"], "prod-c passed over");
    let c = w.cluster_status(2, "prod-c");
    let skipped = find(&c.conditions, "Skipped").unwrap();
    assert_eq!(skipped.reason, reason::UNHEALTHY_BEFORE_UPDATE);
    assert!(skipped.message.contains(LOST), "{}", skipped.message);
}

#[test]
fn a_cluster_broken_on_another_snapshot_or_in_a_rollback_is_updated() {
    // Broken on snapshot 3 (a failed rollout), not on the fleet's snapshot 1: the run may fix it.
    let mut w = World::new();
    on_snapshot_1(&mut w);
    broken_on_1(&mut w, "stage-a");
    w.works.get_mut("stage-a").unwrap().index = 3;
    assert_eq!(binds(&w.step()), ["stage-a"]);
    // Objects not applied (drifted under IfNotDrifted) on snapshot 1: updated, and its apply
    // says why it fails.
    let mut w = World::new();
    on_snapshot_1(&mut w);
    broken_on_1(&mut w, "stage-a");
    w.member_apply_failed("stage-a", "deployment app/web: drifted: spec.replicas");
    assert_eq!(binds(&w.step()), ["stage-a"]);
    // A run back to an older snapshot is a rollback: it goes.
    let mut w = World::new();
    on_snapshot_1(&mut w);
    broken_on_1(&mut w, "stage-a");
    w.run.spec.resource_snapshot_index = Some("0".into());
    assert_eq!(binds(&w.step()), ["stage-a"]);
}

#[test]
fn on_failure_rollback_set_on_a_run_stopped_at_a_failed_cluster_rolls_it_back() {
    let mut w = World::new();
    on_snapshot_1(&mut w);
    w.step();
    w.member_apply_failed("stage-a", "denied");
    let p = w.step();
    assert!(find(&p.status.conditions, SUCCEEDED).is_none(), "held");
    w.run.spec.on_failure = Some(OnFailure::Rollback);
    w.now = t(30);
    let p = w.step();
    assert_eq!(run_condition(&p, SUCCEEDED).0, "False");
    assert_eq!(w.rollback_runs[0].2.clusters, ["stage-a"]);
}

/// staging (no gate) → production (4 clusters one at a time, analysed every 10 s, 2 failures in
/// a row fail it; a 1m soak after it).
fn analysed() -> StagedUpdateStrategySpec {
    strategy(json!({"stages": [
        {"name": "staging", "labelSelector": {"matchLabels": {"env": "staging"}}},
        {"name": "production", "labelSelector": {"matchLabels": {"env": "production"}},
         "sortingLabelKey": "order",
         "analysis": {"failureLimit": 2, "metricCheck": {
             "url": "http://prometheus:9090", "interval": "10s",
             "query": "sum(rate(errors{cluster=~\"$clusters\"}[1m])) < 1"}},
         "afterStageTasks": [{"type": "TimedWait", "waitTime": "1m"}]}
    ]}))
}

const PROD_QUERY: &str = "sum(rate(errors{cluster=~\"prod-c|prod-a|prod-b|prod-z\"}[1m])) < 1";

#[test]
fn background_analysis_failing_mid_stage_fails_it_before_its_remaining_clusters() {
    let mut w = World::new();
    without_canary(&mut w);
    w.strategy = analysed();
    w.prometheus
        .insert(PROD_QUERY.into(), QueryOutcome::Data("0.2".into()));
    w.step();
    w.member_ready("stage-a");
    let p = w.step(); // staging done: production's first cluster starts, the analysis with it
    assert_eq!(binds(&p), ["prod-c"]);
    assert_eq!(w.asked.last().map(|q| q.query.as_str()), Some(PROD_QUERY));
    assert_eq!(
        w.asked.last().map(|q| q.key.side),
        Some(None),
        "the analysis' own key"
    );
    // prod-c done; the errors rise: two checks without data, 10 s apart.
    w.member_ready("prod-c");
    w.prometheus.insert(PROD_QUERY.into(), QueryOutcome::NoData);
    w.now = t(10);
    let p = w.step();
    assert_eq!(
        binds(&p),
        ["prod-a"],
        "one failure of two: the stage goes on"
    );
    w.now = t(20);
    let p = w.step();
    let (status, why, message) = run_condition(&p, SUCCEEDED);
    assert_eq!(
        (status.as_str(), why.as_str()),
        ("False", reason::ANALYSIS_FAILED)
    );
    assert!(
        message.contains("2 consecutive checks returned no data (failureLimit 2)"),
        "{message}"
    );
    assert!(binds(&p).is_empty());
    let production = &p.status.stages_status[1];
    assert_eq!(
        find(&production.conditions, SUCCEEDED).map(|c| c.reason.as_str()),
        Some(reason::ANALYSIS_FAILED)
    );
    assert!(
        ["prod-b", "prod-z"]
            .iter()
            .all(|c| find(&w.cluster_status(1, c).conditions, "Started").is_none()),
        "the remaining clusters were never started"
    );
}

#[test]
fn background_analysis_runs_through_the_soak_and_errors_count_neither_way() {
    let mut w = World::new();
    without_canary(&mut w);
    w.strategy = analysed();
    w.prometheus
        .insert(PROD_QUERY.into(), QueryOutcome::Data("0".into()));
    settle(&mut w);
    // Every production cluster done: the 1m soak runs (until t(60)), the analysis with it.
    w.now = t(10);
    settle(&mut w);
    assert!(
        w.status().stages_status[1]
            .clusters_completed_time
            .is_some()
    );
    // Prometheus unreachable (an error): recorded, not a failure.
    w.prometheus.remove(PROD_QUERY);
    w.now = t(20);
    w.step();
    w.now = t(30);
    let p = w.step();
    let analysis = p.status.stages_status[1].analysis.clone().unwrap();
    assert_eq!(analysis.consecutive_failures, 0);
    assert_eq!(
        analysis.last_result,
        Some(fleethub_crds::update_run::MetricCheckResult::Error)
    );
    // No data during the soak: two in a row fail the stage.
    w.prometheus.insert(PROD_QUERY.into(), QueryOutcome::NoData);
    w.now = t(40);
    w.step();
    w.now = t(50);
    let p = w.step();
    assert_eq!(run_condition(&p, SUCCEEDED).1, reason::ANALYSIS_FAILED);
}

#[test]
fn a_stage_analysis_that_does_not_parse_fails_initialization() {
    let mut w = World::new();
    without_canary(&mut w);
    w.strategy = analysed();
    w.strategy.stages[1]
        .analysis
        .as_mut()
        .unwrap()
        .metric_check
        .query = "sum(".into();
    let p = w.step();
    let (_, why, message) = run_condition(&p, INITIALIZED);
    assert_eq!(why, reason::INVALID_METRIC_QUERY);
    assert!(message.contains("stage production analysis"), "{message}");
}
