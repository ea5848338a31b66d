//! The staged update with real member agents: the fleet's member-1..3 (each a real API server,
//! controller manager, scheduler and kwok nodes, with a real `fleethub-member-agent`) receive a
//! Deployment and a ConfigMap from the hub stage by stage; a new image rolls out the same way;
//! a run pointing at the previous snapshot rolls it back.

mod common;

use std::time::Duration;

use common::real::{Rollout, assert_stage_order, auto_approve, image_of};
use common::{TIMEOUT, kubectl};
use fleethub_crds::conditions::find;
use fleethub_crds::{ApprovalRequest, UpdateRun};
use fleethub_testkit::{Fleet, wait_deleted, wait_for};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::Api;
use serde_json::json;

#[tokio::test]
async fn real_members_roll_out_stage_by_stage_and_roll_back() {
    let fleet = Fleet::get().unwrap();
    assert!(
        fleet.member_count() >= 3,
        "this test needs the fleet's three members"
    );
    let r = Rollout::new(
        fleet,
        "journey",
        "registry.invalid/web:1",
        [
            json!([{"type": "TimedWait", "waitTime": "2s"}]),
            json!([{"type": "Approval"}]),
            json!([{"type": "Approval"}, {"type": "TimedWait", "waitTime": "1s"}]),
        ],
    )
    .await;
    let hub = r.hub.clone();

    // Version 1, first run: the canary gate is approved with kubectl, the rest automatically.
    let runs: Api<UpdateRun> = Api::all(hub.clone());
    let run1 = r.start_run("v1", 0, None).await;
    let approvals: Api<ApprovalRequest> = Api::all(hub.clone());
    wait_for(
        &approvals,
        &format!("{run1}-canary"),
        "the canary gate",
        TIMEOUT,
        |a: Option<&ApprovalRequest>| a.is_some(),
    )
    .await
    .unwrap();
    // Nothing reached production before the gate.
    let prod: Api<Namespace> = Api::all(fleet.member(3).await.unwrap());
    assert!(
        prod.get_opt(&r.ns).await.unwrap().is_none(),
        "production got the workload before the canary gate"
    );
    r.wait_running(fleet, 1, "registry.invalid/web:1").await;
    r.wait_running(fleet, 2, "registry.invalid/web:1").await;
    let patch = r#"{"status":{"conditions":[{"type":"Approved","status":"True","reason":"lgtm","message":"lgtm","lastTransitionTime":"2026-01-01T00:00:00Z"}]}}"#;
    kubectl(
        fleet,
        &[
            "patch",
            "approvalrequest",
            &format!("{run1}-canary"),
            "--type=merge",
            "-p",
            patch,
            "--subresource=status",
        ],
    );
    let approver = auto_approve(hub.clone(), run1.clone());
    let done = wait_for(
        &runs,
        &run1,
        "the run to succeed",
        TIMEOUT,
        common::succeeded,
    )
    .await
    .unwrap();
    approver.abort();
    assert_stage_order(&done);
    for i in 1..=3 {
        r.wait_running(fleet, i, "registry.invalid/web:1").await;
    }
    let member_cm: Api<ConfigMap> = Api::namespaced(fleet.member(3).await.unwrap(), &r.ns);
    assert_eq!(
        member_cm.get("web").await.unwrap().data.unwrap()["greeting"],
        "hello"
    );

    // Version 2: a new image on the hub is a new snapshot, rolled out by a second run.
    r.set_image("registry.invalid/web:2", false).await;
    r.wait_snapshot(1).await;
    // An External placement does not move clusters by itself.
    let d: Api<Deployment> = Api::namespaced(fleet.member(1).await.unwrap(), &r.ns);
    assert_eq!(
        image_of(&d.get("web").await.unwrap()).as_deref(),
        Some("registry.invalid/web:1")
    );
    let run2 = r.run_to_success("v2", 1).await;
    for i in 1..=3 {
        r.wait_running(fleet, i, "registry.invalid/web:2").await;
    }

    // Rollback: a run pointing at snapshot 0 brings version 1 back everywhere.
    let run3 = r.run_to_success("rollback", 0).await;
    for i in 1..=3 {
        r.wait_running(fleet, i, "registry.invalid/web:1").await;
    }
    let first = runs.get(&run1).await.unwrap();
    assert!(find(&first.status.unwrap().conditions, "Succeeded").is_some());

    // Deleting the placement removes the workload from the members.
    let placements: Api<fleethub_crds::Placement> = Api::all(hub.clone());
    placements
        .delete(&r.placement, &Default::default())
        .await
        .unwrap();
    for i in 1..=3 {
        let namespaces: Api<Namespace> = Api::all(fleet.member(i).await.unwrap());
        wait_deleted(&namespaces, &r.ns, Duration::from_secs(180))
            .await
            .unwrap();
    }
    for run in [
        &run1,
        &run2.metadata.name.unwrap(),
        &run3.metadata.name.unwrap(),
    ] {
        runs.delete(run, &Default::default()).await.unwrap();
    }
}
