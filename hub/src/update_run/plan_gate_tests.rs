//! Before-stage tasks and metric gates, on the fake timeline of `plan_tests`.

use super::*;
use fleethub_crds::update_run::{METRIC_CHECK_PASSED, MetricCheckResult, reason};

/// staging (no gate) → canary (before: Approval; after: MetricCheck on its clusters, 2 passes
/// 10 s apart, 30 s initial delay) → production.
fn gated() -> StagedUpdateStrategySpec {
    strategy(json!({"stages": [
        {"name": "staging", "labelSelector": {"matchLabels": {"env": "staging"}}},
        {"name": "canary", "labelSelector": {"matchLabels": {"env": "canary"}},
         "beforeStageTasks": [{"type": "Approval"}],
         "afterStageTasks": [{"type": "MetricCheck", "metricCheck": {
             "url": "http://prometheus:9090",
             "query": "sum(rate(errors{cluster=~\"$clusters\"}[5m])) < 0.01",
             "initialDelay": "30s", "interval": "10s", "successThreshold": 2}}]},
        {"name": "production", "labelSelector": {"matchLabels": {"env": "production"}},
         "maxConcurrency": "100%"}
    ]}))
}

const CANARY_QUERY: &str = "sum(rate(errors{cluster=~\"canary-a\"}[5m])) < 0.01";

/// Runs until nothing moves at `w.now`: every bound cluster reports ready.
pub(super) fn settle(w: &mut World) -> Plan {
    let mut last = w.step();
    for _ in 0..20 {
        let bound: Vec<String> = binds(&last).iter().map(|s| s.to_string()).collect();
        if bound.is_empty() {
            return last;
        }
        for c in bound {
            w.member_ready(&c);
        }
        last = w.step();
    }
    last
}

fn metric_task(w: &World) -> fleethub_crds::update_run::StageTaskStatus {
    w.status().stages_status[1].after_stage_task_status[0].clone()
}

#[test]
fn a_before_stage_approval_holds_the_stage_clusters_until_approved() {
    let mut w = World::new();
    w.strategy = gated();
    let p = settle(&mut w);
    // Staging done; canary's clusters wait for the before-stage approval.
    assert_eq!(w.status().current_stage.as_deref(), Some("canary"));
    assert!(binds(&p).is_empty());
    assert!(w.approvals.contains_key("rollout-before-canary"));
    let (status, why, message) = run_condition(&p, PROGRESSING);
    assert_eq!((status.as_str(), why.as_str()), ("False", reason::WAITING));
    assert!(
        message.contains("before its clusters start")
            && message.contains("ApprovalRequest rollout-before-canary"),
        "{message}"
    );
    assert!(w.status().stages_status[1].start_time.is_none());
    // Approved: canary's cluster starts.
    w.approve("rollout-before-canary");
    let p = w.step();
    assert_eq!(binds(&p), ["canary-a"]);
    assert!(p.actions.contains(&Action::AcceptApproval {
        name: "rollout-before-canary".into()
    }));
}

#[test]
fn a_metric_gate_passes_only_after_consecutive_passes_and_says_why_it_waits() {
    let mut w = World::new();
    w.strategy = gated();
    settle(&mut w);
    w.approve("rollout-before-canary");
    settle(&mut w);
    // Canary's clusters are done: the gate is reached, its query expanded to the stage's
    // clusters; no check before the initial delay.
    assert_eq!(metric_task(&w).metric_check.unwrap().query, CANARY_QUERY);
    assert!(w.asked.is_empty());
    w.now = t(29);
    assert!(w.step().requeue_after.is_some());
    assert!(w.asked.is_empty(), "no check before the initial delay");

    // Prometheus down: the check is made, fails, and the gate says which URL and why.
    w.now = t(30);
    let p = w.step();
    assert_eq!(w.asked.len(), 1);
    let task = metric_task(&w);
    let c = find(&task.conditions, METRIC_CHECK_PASSED).unwrap();
    assert_eq!(c.reason, reason::METRIC_CHECK_FAILING);
    assert!(
        c.message.contains("http://prometheus:9090") && c.message.contains("connection refused"),
        "{}",
        c.message
    );
    assert_eq!(
        task.metric_check.as_ref().unwrap().last_result,
        Some(MetricCheckResult::Error)
    );
    assert_eq!(p.requeue_after, Some(Duration::from_secs(10)));

    // The metric recovers: one pass is not enough, the second opens the gate.
    w.prometheus
        .insert(CANARY_QUERY.into(), QueryOutcome::Data("0.001".into()));
    w.now = t(40);
    w.step();
    assert_eq!(metric_task(&w).metric_check.unwrap().consecutive_passes, 1);
    assert!(binds(&w.step()).is_empty(), "production waits for the gate");
    // Asked again before the interval: no query, no early pass.
    w.now = t(45);
    w.step();
    assert_eq!(w.asked.len(), 2);
    // A failure in between starts the count again.
    w.prometheus
        .insert(CANARY_QUERY.into(), QueryOutcome::NoData);
    w.now = t(50);
    w.step();
    assert_eq!(metric_task(&w).metric_check.unwrap().consecutive_passes, 0);
    w.prometheus
        .insert(CANARY_QUERY.into(), QueryOutcome::Data("0".into()));
    w.now = t(60);
    w.step();
    w.now = t(70);
    let p = w.step();
    assert!(is_true(&metric_task(&w).conditions, METRIC_CHECK_PASSED));
    assert!(
        binds(&p).contains(&"prod-a"),
        "production starts once the gate passed: {:?}",
        p.actions
    );
    assert_eq!(w.asked.len(), 5);
}

#[test]
fn a_metric_gate_past_its_timeout_fails_the_run() {
    let mut w = World::new();
    w.strategy = gated();
    let canary = &mut w.strategy.stages[1];
    canary.before_stage_tasks.clear();
    let check = canary.after_stage_tasks[0].metric_check.as_mut().unwrap();
    check.timeout = Some("2m".into());
    check.initial_delay = None;
    settle(&mut w);
    w.prometheus
        .insert(CANARY_QUERY.into(), QueryOutcome::NoData);
    for secs in (0..=110).step_by(10) {
        w.now = t(secs);
        let p = w.step();
        assert!(find(&p.status.conditions, SUCCEEDED).is_none());
    }
    w.now = t(120);
    let p = w.step();
    let (status, why, message) = run_condition(&p, SUCCEEDED);
    assert_eq!(
        (status.as_str(), why.as_str()),
        ("False", reason::METRIC_CHECK_TIMED_OUT)
    );
    assert!(message.contains("did not pass within 2m"), "{message}");
    assert!(p.events.iter().any(|e| e.warning));
    assert!(
        binds(&w.step()).is_empty(),
        "nothing starts after a failed run"
    );
}

#[test]
fn a_metric_check_that_cannot_be_read_fails_the_run_with_its_own_reason() {
    let mut w = World::new();
    w.strategy = gated();
    w.strategy.stages[1].before_stage_tasks.clear();
    settle(&mut w);
    // Valid at initialization; the frozen snapshot is edited afterwards (by hand, say).
    let mut status = w.run.status.clone().unwrap();
    status
        .staged_update_strategy_snapshot
        .as_mut()
        .unwrap()
        .stages[1]
        .after_stage_tasks[0]
        .metric_check
        .as_mut()
        .unwrap()
        .interval = Some("soon".into());
    w.run.status = Some(status);
    w.now = t(60);
    let p = settle(&mut w);
    let (status, why, message) = run_condition(&p, SUCCEEDED);
    assert_eq!(
        (status.as_str(), why.as_str()),
        ("False", reason::METRIC_CHECK_INVALID)
    );
    assert!(message.contains("metricCheck.interval"), "{message}");
    let task = metric_task(&w);
    let c = find(&task.conditions, METRIC_CHECK_PASSED).unwrap();
    assert_eq!(c.reason, reason::METRIC_CHECK_INVALID);
    assert!(
        p.events
            .iter()
            .any(|e| e.warning && e.reason == reason::METRIC_CHECK_INVALID)
    );
}

#[test]
fn promql_that_does_not_parse_is_refused_at_initialization_naming_stage_and_task() {
    let mut w = World::new();
    w.strategy = gated();
    w.strategy.stages[1].after_stage_tasks[0]
        .metric_check
        .as_mut()
        .unwrap()
        .query = "sum(rate(errors[5m]) <".into();
    let p = w.step();
    let (status, why, message) = run_condition(&p, INITIALIZED);
    assert_eq!(
        (status.as_str(), why.as_str()),
        ("False", reason::INVALID_METRIC_QUERY)
    );
    assert!(
        message.contains("stage canary afterStageTasks MetricCheck")
            && message.contains("does not parse"),
        "{message}"
    );
    assert!(find(&p.status.conditions, SUCCEEDED).is_some(), "final");
}

#[test]
fn a_stage_outside_its_window_waits_for_the_opening_and_one_already_started_finishes() {
    // Canary may start only in the minute-long window opening on each hour.
    let mut w = World::new();
    w.strategy = strategy(json!({"stages": [
        {"name": "staging", "labelSelector": {"matchLabels": {"env": "staging"}}},
        {"name": "canary", "labelSelector": {"matchLabels": {"env": "canary"}},
         "allowedWindows": [{"schedule": "0 * * * *", "duration": "1m"}]},
        {"name": "production", "labelSelector": {"matchLabels": {"env": "production"}},
         "maxConcurrency": "100%"}
    ]}));
    // t(0) is on the hour: the run starts ten minutes later, and staging's clusters finish
    // before the next hour.
    w.now = t(600);
    let opening = t(3600);
    let p = settle(&mut w);
    assert!(binds(&p).is_empty());
    assert!(w.status().stages_status[1].start_time.is_none());
    let (status, why, message) = run_condition(&p, PROGRESSING);
    assert_eq!(
        (status.as_str(), why.as_str()),
        ("False", reason::OUTSIDE_WINDOW)
    );
    assert!(
        message.contains("stage canary waits: outside its allowed windows stages[1].allowedWindows[0] (0 * * * * for 1m)")
            && message.contains(&format!("it may start at {opening}")),
        "{message}"
    );
    let wait = opening.as_second() - w.now.as_second();
    assert_eq!(
        p.requeue_after,
        Some(Duration::from_secs(wait.max(1) as u64))
    );
    // At the opening, canary starts; once started it finishes after its window closed.
    w.now = opening;
    let p = w.step();
    assert_eq!(binds(&p), ["canary-a"]);
    w.member_ready("canary-a");
    w.now = opening + jiff::SignedDuration::from_mins(2);
    settle(&mut w);
    let stages = &w.status().stages_status;
    assert!(is_true(&stages[1].conditions, SUCCEEDED), "{:?}", stages[1]);
    assert!(stages[2].start_time.is_some(), "production started");
}
