//! `metricCheck.secretRef` on the real hub against a real Prometheus that wants basic auth
//! (`--web.config.file`), started by the test: a Secret that does not exist holds the gate with
//! a message naming it, wrong credentials are refused by Prometheus (so the gate still waits),
//! and once the Secret holds the right ones the gate passes: the hub sends them.

mod common;

use common::{HUB_NAMESPACE, Scenario, TIMEOUT, simulate_members, succeeded};
use fleethub_crds::UpdateRun;
use fleethub_crds::conditions::find;
use fleethub_crds::update_run::{METRIC_CHECK_PASSED, reason};
use fleethub_testkit::{GuardedPrometheus, wait_for};
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde_json::json;

const USER: &str = GuardedPrometheus::USER;
const PASSWORD: &str = GuardedPrometheus::PASSWORD;

/// The gate's MetricCheckPassed condition: (reason, message).
fn gate(run: Option<&UpdateRun>) -> Option<(String, String)> {
    let task = run?
        .status
        .as_ref()?
        .stages_status
        .first()?
        .after_stage_task_status
        .first()?;
    let c = find(&task.conditions, METRIC_CHECK_PASSED)?;
    Some((c.reason.clone(), c.message.clone()))
}

#[tokio::test]
async fn a_metric_check_sends_the_credentials_of_its_secret() {
    let fleet = fleethub_testkit::Fleet::get().unwrap();
    let prometheus = GuardedPrometheus::start(TIMEOUT).await.unwrap();
    let s = Scenario::new(fleet, "mgauth").await;
    let hub = s.hub.clone();
    let stg = s.member("stg", json!({"env": s.env("staging")})).await;
    s.placement(&[&stg], false).await;
    let secret = format!("prometheus-{}", s.id);
    s.strategy(json!([
        {"name": "staging", "labelSelector": {"matchLabels": {"env": s.env("staging")}},
         "afterStageTasks": [{"type": "MetricCheck", "metricCheck": {
             "url": prometheus.url(), "query": "vector(1)", "interval": "1s",
             "secretRef": {"name": secret}}}]}]))
        .await;
    let (_updates, members) = simulate_members(hub.clone(), s.placement.clone(), 0);
    s.wait_snapshot(0).await;
    s.start_run(0).await;
    let runs: Api<UpdateRun> = Api::all(hub.clone());

    // No Secret yet: the gate waits, naming it.
    let named = format!("Secret {HUB_NAMESPACE}/{secret}");
    let run = wait_for(
        &runs,
        &s.run,
        "the gate to report the missing Secret",
        TIMEOUT,
        |r: Option<&UpdateRun>| gate(r).is_some_and(|(_, m)| m.contains("not found")),
    )
    .await
    .unwrap();
    let (why, message) = gate(Some(&run)).unwrap();
    assert_eq!(why, reason::METRIC_CHECK_FAILING, "{message}");
    assert!(message.contains(&named), "{message}");

    // Wrong password: Prometheus refuses it, the gate still waits.
    s.hub_secret(&secret, &[("username", USER), ("password", "wrong")])
        .await;
    wait_for(
        &runs,
        &s.run,
        "the gate to report Prometheus' refusal",
        TIMEOUT,
        |r: Option<&UpdateRun>| gate(r).is_some_and(|(_, m)| m.contains("HTTP 401")),
    )
    .await
    .unwrap_or_else(|e| panic!("{e}; Prometheus log:\n{}", prometheus.log()));
    assert!(!succeeded(runs.get_opt(&s.run).await.unwrap().as_ref()));

    // The right password, from the next check on (the hub reads the Secret at every check).
    let secrets: Api<Secret> = Api::namespaced(hub.clone(), HUB_NAMESPACE);
    secrets
        .patch(
            &secret,
            &PatchParams::default(),
            &Patch::Merge(json!({"stringData": {"password": PASSWORD}})),
        )
        .await
        .unwrap();
    wait_for(&runs, &s.run, "the run to succeed", TIMEOUT, succeeded)
        .await
        .unwrap_or_else(|e| panic!("{e}; Prometheus log:\n{}", prometheus.log()));
    let (why, message) = gate(runs.get_opt(&s.run).await.unwrap().as_ref()).unwrap();
    assert_eq!(why, reason::METRIC_CHECK_SUCCEEDED, "{message}");
    members.abort();
}
