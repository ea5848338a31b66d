//! A cluster is never judged once, on the real hub: a cluster that loses its workload after its
//! update holds the run (its soak paused, the next stage not started) until it recovers; a run
//! with `onFailure: Rollback` whose cluster stays regressed past its health timeout fails and
//! rolls the clusters it updated back through the rollback run it creates.
//!
//! With real member agents on kwok nodes, a stage's cluster that loses its capacity during the
//! soak (nodes cordoned, pods deleted) holds the run until the capacity comes back.
//!
//! Elsewhere, the members' reports come from a stand-in for the member agents (every new Work generation
//! reported applied and available); a regression is the report an agent writes when its
//! workload stops being available: the Work's `Available` turning False for the same
//! generation.

mod common;

use common::real::Rollout;
use common::regressions::{
    HeldRun, LOST, cluster_condition, progressing, report, report_every_generation, reported_work,
};
use common::{Scenario, TIMEOUT};
use fleethub_crds::conditions::find;
use fleethub_crds::update_run::{REGRESSED, reason};
use fleethub_crds::{Binding, UpdateRun, names};
use fleethub_testkit::{Fleet, poll_until, wait_for};
use k8s_openapi::api::core::v1::Namespace;
use kube::{Api, ResourceExt};
use serde_json::json;
use std::time::Duration;

#[tokio::test]
async fn a_cluster_that_regresses_during_its_soak_holds_the_run_until_it_recovers() {
    let fleet = Fleet::get().unwrap();
    let h = HeldRun::new(fleet, "rg", "4s").await;
    let (hub, run, placement) = (h.s.hub.clone(), h.s.run.clone(), h.s.placement.clone());
    let runs: Api<UpdateRun> = Api::all(hub.clone());
    let (_, message) = progressing(Some(&h.held)).unwrap();
    assert!(
        message.contains(&format!("{} regressed", h.stg)) && message.contains(LOST),
        "{message}"
    );
    assert_eq!(
        cluster_condition(&h.held, &h.stg, REGRESSED),
        Some(("True".into(), reason::CLUSTER_REGRESSED.into()))
    );

    // Well past the soak's 4 s, production is still not updated.
    let bindings: Api<Binding> = Api::all(hub.clone());
    let prod_binding = names::binding_name(&placement, &h.prod);
    let early = wait_for(
        &bindings,
        &prod_binding,
        "production bound while staging is regressed",
        Duration::from_secs(10),
        |b: Option<&Binding>| b.is_some_and(|b| b.spec.update_run_name.as_deref() == Some(&run)),
    )
    .await;
    assert!(
        early.is_err(),
        "production was bound while staging was regressed"
    );
    let still = runs.get(&run).await.unwrap();
    let soak = &still.status.as_ref().unwrap().stages_status[0].after_stage_task_status[0];
    let paused = find(&soak.conditions, "WaitTimeElapsed").unwrap();
    assert_eq!(paused.reason, reason::SOAK_PAUSED, "{}", paused.message);

    // The workload comes back: the soak resumes and the run finishes.
    report(&hub, &h.work, true, "available again").await;
    let done = wait_for(
        &runs,
        &run,
        "the run to succeed",
        TIMEOUT,
        common::succeeded,
    )
    .await
    .unwrap();
    assert_eq!(
        cluster_condition(&done, &h.stg, REGRESSED),
        Some(("False".into(), reason::CLUSTER_RECOVERED.into()))
    );
    let soak = &done.status.as_ref().unwrap().stages_status[0].after_stage_task_status[0];
    assert!(
        soak.paused_seconds.unwrap_or(0) >= 10,
        "the paused time is recorded: {soak:?}"
    );
    h.members.abort();
}

#[tokio::test]
async fn on_failure_rollback_reverts_the_clusters_the_run_updated() {
    let fleet = Fleet::get().unwrap();
    let s = Scenario::new(fleet, "rb").await;
    let hub = s.hub.clone();
    let placement = s.placement.clone();
    let first = s.member("first", json!({"env": s.env("first")})).await;
    let second = s.member("second", json!({"env": s.env("second")})).await;
    s.placement(&[&first, &second], false).await;
    // The set-up run puts both clusters on snapshot 0 through a strategy without gates; the run
    // under test soaks an hour after its first stage, so `second` is never reached.
    let stages = |soak: bool| {
        let tasks = if soak {
            json!([{"type": "TimedWait", "waitTime": "1h"}])
        } else {
            json!([])
        };
        json!([
            {"name": "first", "labelSelector": {"matchLabels": {"env": s.env("first")}},
             "afterStageTasks": tasks},
            {"name": "second", "labelSelector": {"matchLabels": {"env": s.env("second")}}}])
    };
    s.strategy(stages(true)).await;
    let plain = format!("{}-plain", s.strategy);
    s.create(
        json!({"apiVersion": "fleethub.dev/v1alpha1", "kind": "StagedUpdateStrategy",
        "metadata": {"name": plain}, "spec": {"stages": stages(false)}}),
    )
    .await;
    let members = report_every_generation(hub.clone(), placement.clone());
    let runs: Api<UpdateRun> = Api::all(hub.clone());
    s.create(
        json!({"apiVersion": "fleethub.dev/v1alpha1", "kind": "UpdateRun",
        "metadata": {"name": s.run},
        "spec": {"placementName": placement, "resourceSnapshotIndex": "0",
                 "stagedRolloutStrategyName": plain}}),
    )
    .await;
    wait_for(
        &runs,
        &s.run,
        "the set-up run to succeed",
        TIMEOUT,
        common::succeeded,
    )
    .await
    .unwrap();
    s.set_version("2").await;
    s.wait_snapshot(1).await;
    let bad = format!("{}-bad", s.run);
    let rollback = format!("{bad}-rollback");
    s.cleanup.track::<UpdateRun>("hub", None, &rollback);
    s.create(
        json!({"apiVersion": "fleethub.dev/v1alpha1", "kind": "UpdateRun",
        "metadata": {"name": bad},
        "spec": {"placementName": placement, "resourceSnapshotIndex": "1",
                 "stagedRolloutStrategyName": s.strategy, "healthTimeout": "3s",
                 "onFailure": "Rollback"}}),
    )
    .await;
    // `first` is updated to snapshot 1 and regresses there, for longer than the health timeout.
    let work = reported_work(&hub, &placement, &first, 1).await;
    wait_for(
        &runs,
        &bad,
        "the soak after the first stage",
        TIMEOUT,
        |r: Option<&UpdateRun>| progressing(r).is_some_and(|(why, _)| why == "UpdateRunWaiting"),
    )
    .await
    .unwrap();
    report(&hub, &work, false, LOST).await;
    let failed = wait_for(&runs, &bad, "the run to fail", TIMEOUT, common::ended)
        .await
        .unwrap();
    let status = failed.status.as_ref().unwrap();
    let succeeded = find(&status.conditions, "Succeeded").unwrap();
    assert_eq!(
        (succeeded.status.as_str(), succeeded.reason.as_str()),
        ("False", reason::CLUSTER_FAILED)
    );
    assert!(
        succeeded.message.contains("stayed regressed"),
        "{}",
        succeeded.message
    );
    assert_eq!(status.rollback_run.as_deref(), Some(rollback.as_str()));
    assert_eq!(
        status.previous_resource_snapshot_index.as_deref(),
        Some("0")
    );

    // The rollback run puts `first` back on snapshot 0; `second` never saw snapshot 1.
    let reverted = wait_for(
        &runs,
        &rollback,
        "the rollback run to succeed",
        TIMEOUT,
        common::succeeded,
    )
    .await
    .unwrap();
    let spec = reverted.spec.rollback.as_ref().unwrap();
    assert_eq!(
        (spec.of.as_str(), spec.clusters.as_slice()),
        (bad.as_str(), &[first.clone()][..])
    );
    assert_eq!(reverted.labels().get(names::ROLLBACK_OF_LABEL), Some(&bad));
    let bindings: Api<Binding> = Api::all(hub.clone());
    let index_of = |b: Binding| b.spec.resource_snapshot_index;
    let first_binding = bindings
        .get(&names::binding_name(&placement, &first))
        .await
        .unwrap();
    assert_eq!(index_of(first_binding), Some(0));
    let second_binding = bindings
        .get(&names::binding_name(&placement, &second))
        .await
        .unwrap();
    assert_ne!(index_of(second_binding), Some(1));
    members.abort();
}

/// Member `cluster`'s nodes cordoned for as long as it lives (uncordoned when dropped, also when
/// the test fails).
struct Cordoned<'a> {
    fleet: &'a Fleet,
    cluster: &'static str,
    nodes: Vec<String>,
}

impl<'a> Cordoned<'a> {
    fn new(fleet: &'a Fleet, cluster: &'static str) -> Self {
        let out = common::kubectl_on(fleet, cluster, &["get", "nodes", "-o", "name"]);
        let nodes: Vec<String> = out.lines().map(str::to_string).collect();
        let c = Cordoned {
            fleet,
            cluster,
            nodes,
        };
        let mut args = vec!["cordon"];
        args.extend(c.nodes.iter().map(String::as_str));
        common::kubectl_on(fleet, cluster, &args);
        c
    }
}

impl Drop for Cordoned<'_> {
    fn drop(&mut self) {
        let mut args = vec!["uncordon"];
        args.extend(self.nodes.iter().map(String::as_str));
        common::kubectl_on(self.fleet, self.cluster, &args);
    }
}

#[tokio::test]
async fn real_agents_capacity_lost_during_the_soak_holds_the_run_and_recovery_resumes_it() {
    let fleet = Fleet::get().unwrap();
    assert!(
        fleet.member_count() >= 3,
        "this test needs the fleet's three members"
    );
    let r = Rollout::new(
        fleet,
        "regress",
        "registry.invalid/web:1",
        [
            json!([{"type": "TimedWait", "waitTime": "8s"}]),
            json!([]),
            json!([]),
        ],
    )
    .await;
    let hub = r.hub.clone();
    let runs: Api<UpdateRun> = Api::all(hub.clone());
    let run = r.start_run("v1", 0, Some("10m")).await;
    r.wait_running(fleet, 1, "registry.invalid/web:1").await;
    wait_for(
        &runs,
        &run,
        "the staging soak",
        TIMEOUT,
        |r: Option<&UpdateRun>| progressing(r).is_some_and(|(why, _)| why == "UpdateRunWaiting"),
    )
    .await
    .unwrap();

    // member-1 loses its capacity: its nodes cordoned, its pods gone (their replacements
    // cannot be scheduled).
    let cordoned = Cordoned::new(fleet, "member-1");
    common::kubectl_on(
        fleet,
        "member-1",
        &["-n", &r.ns, "delete", "pods", "--all", "--wait=false"],
    );
    let held = wait_for(
        &runs,
        &run,
        "the run to hold",
        TIMEOUT,
        |r: Option<&UpdateRun>| {
            progressing(r).is_some_and(|(why, _)| why == reason::CLUSTER_REGRESSED)
        },
    )
    .await
    .unwrap();
    let (_, message) = progressing(Some(&held)).unwrap();
    assert!(
        message.contains("member-1 regressed") && message.contains("deployment"),
        "the member's words name the workload: {message}"
    );
    // Past the soak, canary (member-2) has not received the workload.
    let canary: Api<Namespace> = Api::all(fleet.member(2).await.unwrap());
    let early = poll_until(
        "the canary to receive the workload",
        Duration::from_secs(15),
        || async { canary.get_opt(&r.ns).await.ok().flatten() },
    )
    .await;
    assert!(
        early.is_err(),
        "the canary got the workload while staging was regressed"
    );

    // Capacity comes back: the pods run again, the run goes on to the end.
    drop(cordoned);
    let done = wait_for(
        &runs,
        &run,
        "the run to succeed",
        TIMEOUT,
        common::succeeded,
    )
    .await
    .unwrap();
    assert_eq!(
        cluster_condition(&done, "member-1", REGRESSED),
        Some(("False".into(), reason::CLUSTER_RECOVERED.into()))
    );
    r.wait_running(fleet, 3, "registry.invalid/web:1").await;
}
