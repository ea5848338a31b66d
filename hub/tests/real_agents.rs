//! The staged update with real member agents: the fleet's member-1..3 (each a real API server,
//! controller manager, scheduler and kwok nodes, with a real `fleethub-member-agent`) receive a
//! Deployment and a ConfigMap from the hub stage by stage; a new image rolls out the same way;
//! a run pointing at the previous snapshot rolls it back.

mod common;

use std::time::Duration;

use common::{TIMEOUT, kubectl};
use fleethub_crds::conditions::{find, is_true};
use fleethub_crds::{ApprovalRequest, MemberCluster, UpdateRun, names};
use fleethub_testkit::{Fleet, unique_name, wait_deleted, wait_for};
use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use serde_json::json;

const ROLES: [(&str, &str); 3] = [
    ("member-1", "staging"),
    ("member-2", "canary"),
    ("member-3", "production"),
];

fn image_of(d: &Deployment) -> Option<String> {
    d.spec
        .as_ref()?
        .template
        .spec
        .as_ref()?
        .containers
        .first()?
        .image
        .clone()
}

/// Waits until member `i` runs Deployment `ns/web` with `image`, all replicas available.
async fn wait_running(fleet: &Fleet, i: usize, ns: &str, image: &str) -> Deployment {
    let member = fleet.member(i).await.unwrap();
    let deployments: Api<Deployment> = Api::namespaced(member, ns);
    let image = image.to_string();
    wait_for(
        &deployments,
        "web",
        "the member to run the image",
        TIMEOUT,
        move |d: Option<&Deployment>| {
            d.is_some_and(|d| {
                let s = d.status.clone().unwrap_or_default();
                image_of(d).as_deref() == Some(image.as_str())
                    && s.available_replicas == Some(2)
                    && s.updated_replicas == Some(2)
            })
        },
    )
    .await
    .unwrap()
}

async fn set_image(hub: &Client, ns: &str, image: &str) {
    let deployments: Api<Deployment> = Api::namespaced(hub.clone(), ns);
    let d = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}},
                              "spec": {"containers": [{"name": "web", "image": image}]}}}});
    deployments
        .patch(
            "web",
            &PatchParams::apply("journey").force(),
            &Patch::Apply(&d),
        )
        .await
        .unwrap();
}

/// Approves every ApprovalRequest of `run` as it appears.
fn auto_approve(hub: Client, run: String) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let api: Api<ApprovalRequest> = Api::all(hub);
        let cfg = watcher::Config::default().labels(&format!("{}={run}", names::UPDATE_RUN_LABEL));
        let mut stream = watcher(api.clone(), cfg)
            .default_backoff()
            .applied_objects()
            .boxed();
        while let Some(Ok(a)) = stream.next().await {
            let _ = common::approve(&api, &a.name_any()).await;
        }
    })
}

async fn run_to_success(
    hub: &Client,
    name: &str,
    placement: &str,
    index: i64,
    strategy: &str,
) -> UpdateRun {
    let runs: Api<UpdateRun> = Api::all(hub.clone());
    let run: UpdateRun = serde_json::from_value(json!({"apiVersion": "fleethub.dev/v1alpha1", "kind": "UpdateRun",
        "metadata": {"name": name},
        "spec": {"placementName": placement, "resourceSnapshotIndex": index.to_string(), "stagedRolloutStrategyName": strategy}}))
    .unwrap();
    runs.create(&PostParams::default(), &run).await.unwrap();
    wait_for(
        &runs,
        name,
        "the run to succeed",
        TIMEOUT,
        common::succeeded,
    )
    .await
    .unwrap()
}

/// Each stage's clusters started only after the previous stage ended.
fn assert_stage_order(run: &UpdateRun) {
    let stages = &run.status.as_ref().unwrap().stages_status;
    let names: Vec<_> = stages.iter().map(|s| s.stage_name.as_str()).collect();
    assert_eq!(names, ["staging", "canary", "production"]);
    for pair in stages.windows(2) {
        let ended = pair[0].end_time.as_ref().unwrap().0;
        for c in &pair[1].clusters {
            assert!(
                c.start_time.as_ref().unwrap().0 >= ended,
                "{} started before stage {} ended",
                c.cluster_name,
                pair[0].stage_name
            );
        }
    }
}

#[tokio::test]
async fn real_members_roll_out_stage_by_stage_and_roll_back() {
    let fleet = Fleet::get().unwrap();
    assert!(
        fleet.member_count() >= 3,
        "this test needs the fleet's three members"
    );
    let hub = fleet.hub().await.unwrap();
    let id = unique_name("journey");
    let (ns, placement, strategy) = (id.clone(), format!("web-{id}"), format!("stages-{id}"));

    // The members' roles, as labels on their MemberClusters.
    let members: Api<MemberCluster> = Api::all(hub.clone());
    for (i, (name, env)) in ROLES.iter().enumerate() {
        let labels = json!({"apiVersion": "fleethub.dev/v1alpha1", "kind": "MemberCluster",
            "metadata": {"name": name, "labels": {"environment": env, "order": (i + 1).to_string()}}});
        members
            .patch(
                name,
                &PatchParams::apply("journey-test").force(),
                &Patch::Apply(&labels),
            )
            .await
            .unwrap();
        wait_for(
            &members,
            name,
            "the member to be joined and healthy",
            TIMEOUT,
            |m: Option<&MemberCluster>| {
                m.and_then(|m| m.status.as_ref()).is_some_and(|s| {
                    is_true(&s.conditions, "Joined") && is_true(&s.conditions, "Healthy")
                })
            },
        )
        .await
        .unwrap();
    }

    // The workload on the hub: a namespace with a Deployment and a ConfigMap.
    let namespaces: Api<Namespace> = Api::all(hub.clone());
    namespaces
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": ns}})).unwrap(),
        )
        .await
        .unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(hub.clone(), &ns);
    cms.create(
        &PostParams::default(),
        &serde_json::from_value(
            json!({"metadata": {"name": "web"}, "data": {"greeting": "hello"}}),
        )
        .unwrap(),
    )
    .await
    .unwrap();
    set_image(&hub, &ns, "registry.invalid/web:1").await;

    let strategy_obj = json!({"apiVersion": "fleethub.dev/v1alpha1", "kind": "StagedUpdateStrategy", "metadata": {"name": strategy},
        "spec": {"stages": [
            {"name": "staging", "labelSelector": {"matchLabels": {"environment": "staging"}},
             "afterStageTasks": [{"type": "TimedWait", "waitTime": "2s"}]},
            {"name": "canary", "labelSelector": {"matchLabels": {"environment": "canary"}},
             "afterStageTasks": [{"type": "Approval"}]},
            {"name": "production", "labelSelector": {"matchLabels": {"environment": "production"}}, "sortingLabelKey": "order",
             "afterStageTasks": [{"type": "Approval"}, {"type": "TimedWait", "waitTime": "1s"}]}]}});
    kubectl_apply(fleet, &strategy_obj);
    let placement_obj = json!({"apiVersion": "fleethub.dev/v1alpha1", "kind": "Placement", "metadata": {"name": placement},
        "spec": {"resourceSelectors": [{"group": "", "version": "v1", "kind": "Namespace", "name": ns}],
                 "policy": {"placementType": "PickFixed", "clusterNames": ["member-1", "member-2", "member-3"]},
                 "strategy": {"type": "External"}}});
    kubectl_apply(fleet, &placement_obj);
    let snapshots: Api<fleethub_crds::ResourceSnapshot> = Api::all(hub.clone());
    let snapshot = |i: u64| names::resource_snapshot_name(&placement, i);
    let exists = |s: Option<&fleethub_crds::ResourceSnapshot>| s.is_some();
    wait_for(&snapshots, &snapshot(0), "snapshot 0", TIMEOUT, exists)
        .await
        .unwrap();

    // Version 1, first run: the canary gate is approved with kubectl, the rest automatically.
    let runs: Api<UpdateRun> = Api::all(hub.clone());
    let run1 = format!("{id}-v1");
    let approvals: Api<ApprovalRequest> = Api::all(hub.clone());
    let creating = {
        let (hub, run1, placement, strategy) = (
            hub.clone(),
            run1.clone(),
            placement.clone(),
            strategy.clone(),
        );
        tokio::spawn(async move { run_to_success(&hub, &run1, &placement, 0, &strategy).await })
    };
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
        prod.get_opt(&ns).await.unwrap().is_none(),
        "production got the workload before the canary gate"
    );
    wait_running(fleet, 1, &ns, "registry.invalid/web:1").await;
    wait_running(fleet, 2, &ns, "registry.invalid/web:1").await;
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
    let done = creating.await.unwrap();
    approver.abort();
    assert_stage_order(&done);
    for i in 1..=3 {
        wait_running(fleet, i, &ns, "registry.invalid/web:1").await;
    }
    let member_cm: Api<ConfigMap> = Api::namespaced(fleet.member(3).await.unwrap(), &ns);
    assert_eq!(
        member_cm.get("web").await.unwrap().data.unwrap()["greeting"],
        "hello"
    );

    // Version 2: a new image on the hub is a new snapshot, rolled out by a second run.
    set_image(&hub, &ns, "registry.invalid/web:2").await;
    wait_for(&snapshots, &snapshot(1), "snapshot 1", TIMEOUT, exists)
        .await
        .unwrap();
    // An External placement does not move clusters by itself.
    let d: Api<Deployment> = Api::namespaced(fleet.member(1).await.unwrap(), &ns);
    assert_eq!(
        image_of(&d.get("web").await.unwrap()).as_deref(),
        Some("registry.invalid/web:1")
    );
    let run2 = format!("{id}-v2");
    let approver = auto_approve(hub.clone(), run2.clone());
    let done = run_to_success(&hub, &run2, &placement, 1, &strategy).await;
    approver.abort();
    assert_stage_order(&done);
    for i in 1..=3 {
        wait_running(fleet, i, &ns, "registry.invalid/web:2").await;
    }

    // Rollback: a run pointing at snapshot 0 brings version 1 back everywhere.
    let run3 = format!("{id}-rollback");
    let approver = auto_approve(hub.clone(), run3.clone());
    let done = run_to_success(&hub, &run3, &placement, 0, &strategy).await;
    approver.abort();
    assert_stage_order(&done);
    for i in 1..=3 {
        wait_running(fleet, i, &ns, "registry.invalid/web:1").await;
    }
    let first = runs.get(&run1).await.unwrap();
    assert!(find(&first.status.unwrap().conditions, "Succeeded").is_some());

    // Deleting the placement removes the workload from the members.
    let placements: Api<fleethub_crds::Placement> = Api::all(hub.clone());
    placements
        .delete(&placement, &Default::default())
        .await
        .unwrap();
    for i in 1..=3 {
        let namespaces: Api<Namespace> = Api::all(fleet.member(i).await.unwrap());
        wait_deleted(&namespaces, &ns, Duration::from_secs(180))
            .await
            .unwrap();
    }
    for r in [&run1, &run2, &run3] {
        runs.delete(r, &Default::default()).await.unwrap();
    }
}

fn kubectl_apply(fleet: &Fleet, obj: &serde_json::Value) {
    let dir = std::env::temp_dir().join(unique_name("obj"));
    std::fs::write(&dir, obj.to_string()).unwrap();
    kubectl(
        fleet,
        &["apply", "--server-side", "-f", dir.to_str().unwrap()],
    );
    let _ = std::fs::remove_file(dir);
}
