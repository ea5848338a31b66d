//! A hub killed (SIGKILL) while a run is held by a regressed cluster: the restarted hub keeps
//! it held (the next stage not bound, the soak not elapsed although its time passed while the
//! hub was down) and, once the cluster recovers, finishes it, each cluster updated once. A hub
//! killed mid-rollback: the rollback run reverts every cluster once, newest first.
//!
//! A test binary of its own: it kills the fleet's hub, which other tests running beside it in
//! one binary would feel.

mod common;

use std::time::Duration;

use common::TIMEOUT;
use common::regressions::{HeldRun, progressing, report, reported_work};
use fleethub_crds::conditions::find;
use fleethub_crds::update_run::reason;
use fleethub_crds::{Binding, UpdateRun, names};
use fleethub_testkit::{Fleet, wait_for};
use kube::Api;

#[tokio::test]
async fn a_hub_killed_while_a_run_is_held_keeps_it_held_and_skips_no_gate() {
    let fleet = Fleet::get().unwrap();
    let h = HeldRun::new(fleet, "rk", "3s").await;
    let (hub, run, placement, prod) = (
        h.s.hub.clone(),
        h.s.run.clone(),
        h.s.placement.clone(),
        h.prod.clone(),
    );
    let runs: Api<UpdateRun> = Api::all(hub.clone());

    // SIGKILL the hub; the soak's 3 s pass while it is down; it comes back.
    fleet.kill("hub").unwrap();
    let bindings: Api<Binding> = Api::all(hub.clone());
    let prod_binding = names::binding_name(&placement, &prod);
    let bound = |b: Option<&Binding>| {
        b.is_some_and(|b| b.spec.update_run_name.as_deref() == Some(run.as_str()))
    };
    let early = wait_for(
        &bindings,
        &prod_binding,
        "production bound",
        Duration::from_secs(5),
        bound,
    )
    .await;
    assert!(
        early.is_err(),
        "production was bound while the hub was down"
    );
    common::start_hub(fleet).await;
    // The restarted hub keeps the run held: production is not bound, the soak not elapsed.
    let early = wait_for(
        &bindings,
        &prod_binding,
        "production bound",
        Duration::from_secs(8),
        bound,
    )
    .await;
    assert!(
        early.is_err(),
        "the restarted hub bound production while staging was regressed"
    );
    let still = runs.get(&run).await.unwrap();
    assert_eq!(
        progressing(Some(&still)).map(|(why, _)| why).as_deref(),
        Some(reason::CLUSTER_REGRESSED)
    );
    let soak = &still.status.as_ref().unwrap().stages_status[0].after_stage_task_status[0];
    assert_eq!(
        find(&soak.conditions, "WaitTimeElapsed").map(|c| c.reason.as_str()),
        Some(reason::SOAK_PAUSED)
    );

    // Recovered: the run finishes; production was updated once.
    report(&hub, &h.work, true, "available again").await;
    wait_for(
        &runs,
        &run,
        "the run to succeed",
        TIMEOUT,
        common::succeeded,
    )
    .await
    .unwrap();
    let prod_work = reported_work(&hub, &placement, &prod, 0).await;
    assert_eq!(
        prod_work.metadata.generation,
        Some(1),
        "production's Work written once"
    );
    h.members.abort();
}

#[tokio::test]
async fn a_hub_killed_mid_rollback_reverts_every_cluster_once_newest_first() {
    let fleet = Fleet::get().unwrap();
    let s = common::Scenario::new(fleet, "rr").await;
    let hub = s.hub.clone();
    let placement = s.placement.clone();
    let a = s
        .member("a", serde_json::json!({"env": s.env("all")}))
        .await;
    let b = s
        .member("b", serde_json::json!({"env": s.env("all")}))
        .await;
    s.placement(&[&a, &b], false).await;
    let stage = |tasks: serde_json::Value| {
        serde_json::json!([{"name": "all", "labelSelector": {"matchLabels": {"env": s.env("all")}},
                            "afterStageTasks": tasks}])
    };
    s.strategy(stage(
        serde_json::json!([{"type": "TimedWait", "waitTime": "1h"}]),
    ))
    .await;
    let plain = format!("{}-plain", s.strategy);
    s.create(
        serde_json::json!({"apiVersion": "fleethub.dev/v1alpha1", "kind": "StagedUpdateStrategy",
        "metadata": {"name": plain}, "spec": {"stages": stage(serde_json::json!([]))}}),
    )
    .await;
    let runs: Api<UpdateRun> = Api::all(hub.clone());
    // Both clusters on snapshot 0.
    let (_, setup) = common::simulate_members_at(hub.clone(), placement.clone(), Some(0));
    s.create(
        serde_json::json!({"apiVersion": "fleethub.dev/v1alpha1", "kind": "UpdateRun",
        "metadata": {"name": s.run},
        "spec": {"placementName": placement, "resourceSnapshotIndex": "0",
                 "stagedRolloutStrategyName": plain}}),
    )
    .await;
    wait_for(&runs, &s.run, "the set-up run", TIMEOUT, common::succeeded)
        .await
        .unwrap();
    setup.abort();

    // Snapshot 1 on both (a, then b), then b regresses past the 3 s health timeout: the run
    // fails and creates its rollback, whose first revert (b) is never reported yet.
    s.set_version("2").await;
    s.wait_snapshot(1).await;
    let (_, forward) = common::simulate_members_at(hub.clone(), placement.clone(), Some(1));
    let bad = format!("{}-bad", s.run);
    let rollback = format!("{bad}-rollback");
    s.cleanup.track::<UpdateRun>("hub", None, &rollback);
    s.create(
        serde_json::json!({"apiVersion": "fleethub.dev/v1alpha1", "kind": "UpdateRun",
        "metadata": {"name": bad},
        "spec": {"placementName": placement, "resourceSnapshotIndex": "1",
                 "stagedRolloutStrategyName": s.strategy, "healthTimeout": "3s",
                 "onFailure": "Rollback"}}),
    )
    .await;
    wait_for(&runs, &bad, "the soak", TIMEOUT, |r: Option<&UpdateRun>| {
        progressing(r).is_some_and(|(why, _)| why == "UpdateRunWaiting")
    })
    .await
    .unwrap();
    let work = reported_work(&hub, &placement, &b, 1).await;
    report(&hub, &work, false, common::regressions::LOST).await;
    let bindings: Api<Binding> = Api::all(hub.clone());
    wait_for(
        &bindings,
        &names::binding_name(&placement, &b),
        "the rollback to revert b first",
        TIMEOUT,
        |x: Option<&Binding>| {
            x.is_some_and(|x| {
                x.spec.resource_snapshot_index == Some(0)
                    && x.spec.update_run_name.as_deref() == Some(rollback.as_str())
            })
        },
    )
    .await
    .unwrap();
    forward.abort();

    // SIGKILL mid-rollback; the hub comes back; the members report the reverts.
    fleet.kill("hub").unwrap();
    common::start_hub(fleet).await;
    let (reverted, members) = common::simulate_members_at(hub.clone(), placement.clone(), Some(0));
    wait_for(
        &runs,
        &rollback,
        "the rollback to finish",
        TIMEOUT,
        common::succeeded,
    )
    .await
    .unwrap();
    assert_eq!(
        common::clusters_in_order(&reverted),
        [b.clone(), a.clone()],
        "newest first"
    );
    // Each cluster's Work: snapshot 0, 1, then 0 once more — no revert written twice.
    for c in [&a, &b] {
        let w = reported_work(&hub, &placement, c, 0).await;
        assert_eq!(
            w.metadata.generation,
            Some(3),
            "{c}'s Work written once per change"
        );
    }
    let failed = runs.get(&bad).await.unwrap();
    assert_eq!(
        failed.status.as_ref().unwrap().rollback_run.as_deref(),
        Some(rollback.as_str())
    );
    let ours = runs
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|r| r.spec.placement_name == placement)
        .count();
    assert_eq!(ours, 3, "one rollback run");
    members.abort();
}
