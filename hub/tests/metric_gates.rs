//! Metric gates and before-stage approvals on the real hub with the local fleet's real
//! Prometheus: a stage's after-stage MetricCheck holds the next stage until the query returns
//! data `successThreshold` checks in a row, a before-stage Approval holds the stage's clusters,
//! and an unreachable Prometheus holds the gate with a message naming it. A stage's background
//! analysis that stops returning data fails the stage mid-way, before its last cluster starts.
//!
//! The metric is a gauge of the fleet's test exporter that the test sets; the members' reports
//! come from the stand-in of `common`.

mod common;

use common::{Scenario, TIMEOUT, approve, simulate_members, succeeded};
use fleethub_crds::conditions::{find, is_true};
use fleethub_crds::update_run::{METRIC_CHECK_PASSED, MetricCheckResult, UpdateRunStatus, reason};
use fleethub_crds::{ApprovalRequest, Binding, UpdateRun};
use fleethub_testkit::{Fleet, TestGauge, wait_for};
use kube::Api;
use serde_json::json;

/// The staging stage's after-stage task status, once the run has one.
fn staging_gate(status: &UpdateRunStatus) -> Option<&fleethub_crds::update_run::StageTaskStatus> {
    status
        .stages_status
        .first()?
        .after_stage_task_status
        .first()
}

#[tokio::test]
async fn a_metric_gate_holds_the_next_stage_until_the_metric_passes_enough_checks() {
    let fleet = Fleet::get().unwrap();
    let s = Scenario::new(fleet, "mg").await;
    let hub = s.hub.clone();
    let stg = s.member("stg", json!({"env": s.env("staging")})).await;
    let can = s.member("can", json!({"env": s.env("canary")})).await;
    s.placement(&[&stg, &can], false).await;
    // Failing to start with: the gate passes while errors < 0.5.
    let errors = TestGauge::new(
        fleet,
        "fleethub_test_errors",
        &[("run", &s.run), ("cluster", &stg)],
        1.0,
    )
    .await
    .unwrap();
    let query = r#"fleethub_test_errors{run="$run",cluster=~"$clusters"} < 0.5"#;
    s.strategy(json!([
        {"name": "staging", "labelSelector": {"matchLabels": {"env": s.env("staging")}},
         "afterStageTasks": [{"type": "MetricCheck", "metricCheck": {
             "url": fleet.prometheus_url().unwrap(), "query": query,
             "interval": "1s", "successThreshold": 3}}]},
        {"name": "canary", "labelSelector": {"matchLabels": {"env": s.env("canary")}},
         "beforeStageTasks": [{"type": "Approval"}]}]))
        .await;
    let (_updates, members) = simulate_members(hub.clone(), s.placement.clone(), 0);
    s.wait_snapshot(0).await;
    s.start_run(0).await;
    let runs: Api<UpdateRun> = Api::all(hub.clone());

    // Staging is done; the gate checks and fails (no data), naming what it waits for.
    let run = wait_for(
        &runs,
        &s.run,
        "the metric gate to fail a check",
        TIMEOUT,
        |r: Option<&UpdateRun>| {
            r.and_then(|r| r.status.as_ref())
                .and_then(staging_gate)
                .and_then(|t| t.metric_check.as_ref())
                .is_some_and(|m| m.last_result == Some(MetricCheckResult::NoData))
        },
    )
    .await
    .unwrap();
    let status = run.status.unwrap();
    let gate = staging_gate(&status).unwrap();
    assert_eq!(
        gate.metric_check.as_ref().unwrap().query,
        format!(
            r#"fleethub_test_errors{{run="{}",cluster=~"{stg}"}} < 0.5"#,
            s.run
        )
    );
    let c = find(&gate.conditions, METRIC_CHECK_PASSED).unwrap();
    assert_eq!(
        (c.status.as_str(), c.reason.as_str()),
        ("False", reason::METRIC_CHECK_FAILING)
    );
    let progressing = find(&status.conditions, "Progressing").unwrap();
    assert_eq!(progressing.reason, reason::WAITING, "{progressing:?}");
    let bindings: Api<Binding> = Api::all(hub.clone());
    let canary_binding = format!("{}-{can}", s.placement);
    assert!(
        bindings
            .get(&canary_binding)
            .await
            .unwrap()
            .spec
            .resource_snapshot_index
            .is_none(),
        "canary must not start while the gate fails"
    );

    // The metric recovers: the gate opens only after three consecutive passing checks.
    errors.set(0.1).await.unwrap();
    let run = wait_for(
        &runs,
        &s.run,
        "the metric gate to pass",
        TIMEOUT,
        |r: Option<&UpdateRun>| {
            r.and_then(|r| r.status.as_ref())
                .and_then(staging_gate)
                .is_some_and(|t| is_true(&t.conditions, METRIC_CHECK_PASSED))
        },
    )
    .await
    .unwrap();
    let status = run.status.unwrap();
    let checks = staging_gate(&status).unwrap().metric_check.clone().unwrap();
    assert_eq!(checks.consecutive_passes, 3);
    assert_eq!(checks.last_result, Some(MetricCheckResult::Pass));
    assert_eq!(checks.last_value.as_deref(), Some("0.1"));

    // Canary's before-stage approval holds its cluster.
    let approvals: Api<ApprovalRequest> = Api::all(hub.clone());
    let before = format!("{}-before-canary", s.run);
    wait_for(
        &approvals,
        &before,
        "the before-stage ApprovalRequest",
        TIMEOUT,
        |a: Option<&ApprovalRequest>| a.is_some(),
    )
    .await
    .unwrap();
    assert!(
        bindings
            .get(&canary_binding)
            .await
            .unwrap()
            .spec
            .resource_snapshot_index
            .is_none(),
        "canary must not start before its approval"
    );
    approve(&approvals, &before).await.unwrap();
    wait_for(&runs, &s.run, "the run to succeed", TIMEOUT, succeeded)
        .await
        .unwrap();
    members.abort();
}

#[tokio::test]
async fn an_unreachable_prometheus_holds_the_gate_and_says_why() {
    let fleet = Fleet::get().unwrap();
    let s = Scenario::new(fleet, "mgdown").await;
    let hub = s.hub.clone();
    let stg = s.member("stg", json!({"env": s.env("staging")})).await;
    s.placement(&[&stg], false).await;
    // A port nothing listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("http://127.0.0.1:{port}");
    s.strategy(json!([
        {"name": "staging", "labelSelector": {"matchLabels": {"env": s.env("staging")}},
         "afterStageTasks": [{"type": "MetricCheck", "metricCheck": {
             "url": url, "query": "vector(1)", "interval": "1s"}}]}]))
        .await;
    let (_updates, members) = simulate_members(hub.clone(), s.placement.clone(), 0);
    s.wait_snapshot(0).await;
    s.start_run(0).await;
    let runs: Api<UpdateRun> = Api::all(hub.clone());
    let run = wait_for(
        &runs,
        &s.run,
        "the gate to report the unreachable Prometheus",
        TIMEOUT,
        |r: Option<&UpdateRun>| {
            r.and_then(|r| r.status.as_ref())
                .and_then(staging_gate)
                .and_then(|t| find(&t.conditions, METRIC_CHECK_PASSED))
                .is_some_and(|c| c.reason == reason::METRIC_CHECK_FAILING)
        },
    )
    .await
    .unwrap();
    let status = run.status.unwrap();
    let c = find(
        &staging_gate(&status).unwrap().conditions,
        METRIC_CHECK_PASSED,
    )
    .unwrap();
    assert!(c.message.contains(&url), "{}", c.message);
    assert!(
        find(&status.conditions, "Succeeded").is_none(),
        "an error never passes"
    );
    members.abort();
}

#[tokio::test]
async fn background_analysis_failing_mid_stage_fails_it_before_its_remaining_clusters() {
    let fleet = Fleet::get().unwrap();
    let s = Scenario::new(fleet, "ba").await;
    let hub = s.hub.clone();
    let env = json!({"env": s.env("production")});
    let a = s.member("a", env.clone()).await;
    let b = s.member("b", env.clone()).await;
    let c = s.member("c", env).await;
    s.placement(&[&a, &b, &c], false).await;
    // Passing to start with: the analysis passes while errors < 0.5.
    let errors = TestGauge::new(fleet, "fleethub_test_errors", &[("run", &s.run)], 0.1)
        .await
        .unwrap();
    // Prometheus sees the new series at its next scrape: the run starts once it does, or its
    // first two checks (1 s apart) would find no data and fail the stage at once.
    fleet
        .wait_prometheus_data(
            &format!("fleethub_test_errors{{run=\"{}\"}} < 0.5", s.run),
            TIMEOUT,
        )
        .await
        .unwrap();
    s.strategy(json!([
        {"name": "production", "labelSelector": {"matchLabels": {"env": s.env("production")}},
         "analysis": {"failureLimit": 2, "metricCheck": {
             "url": fleet.prometheus_url().unwrap(),
             "query": r#"fleethub_test_errors{run="$run"} < 0.5"#, "interval": "1s"}}}]))
        .await;
    s.start_run(0).await;
    let runs: Api<UpdateRun> = Api::all(hub.clone());

    // The first cluster is updated and reported; the second is updating (never reported).
    let works: Api<fleethub_crds::Work> =
        Api::namespaced(hub.clone(), &fleethub_crds::names::member_namespace(&a));
    let work = fleethub_testkit::poll_until("a's Work", TIMEOUT, || async {
        works
            .list(&Default::default())
            .await
            .ok()?
            .items
            .into_iter()
            .find(|w| w.spec.placement_name == s.placement)
    })
    .await
    .unwrap();
    common::regressions::report(&hub, &work, true, "reported by the test").await;
    let bindings: Api<Binding> = Api::all(hub.clone());
    let bound = |x: Option<&Binding>| {
        x.is_some_and(|x| x.spec.update_run_name.as_deref() == Some(s.run.as_str()))
    };
    wait_for(
        &bindings,
        &format!("{}-{b}", s.placement),
        "b updating",
        TIMEOUT,
        bound,
    )
    .await
    .unwrap();
    let passing = runs.get(&s.run).await.unwrap();
    assert!(find(&passing.status.unwrap().conditions, "Succeeded").is_none());

    // The errors rise: two checks without data fail the stage and the run at once.
    errors.set(1.0).await.unwrap();
    let failed = wait_for(
        &runs,
        &s.run,
        "the analysis to fail the run",
        TIMEOUT,
        common::ended,
    )
    .await
    .unwrap();
    let status = failed.status.unwrap();
    let why = find(&status.conditions, "Succeeded").unwrap();
    assert_eq!(
        (why.status.as_str(), why.reason.as_str()),
        ("False", reason::ANALYSIS_FAILED)
    );
    assert!(
        why.message
            .contains("consecutive checks returned no data (failureLimit 2)"),
        "{}",
        why.message
    );
    let analysis = status.stages_status[0].analysis.clone().unwrap();
    assert!(analysis.consecutive_failures >= 2, "{analysis:?}");
    let never = bindings.get(&format!("{}-{c}", s.placement)).await.unwrap();
    assert_ne!(
        never.spec.update_run_name.as_deref(),
        Some(s.run.as_str()),
        "the stage's last cluster was never started"
    );
}
