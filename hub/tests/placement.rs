//! Placements on the real hub: a snapshot is cut when the selected objects' content changes and
//! not when only their status does; RollingUpdate binds every selected cluster to the latest
//! snapshot and its Work carries the cleaned objects; history is bounded; an unselected cluster
//! loses its Work.

mod common;

use common::{Scenario, TIMEOUT};
use fleethub_crds::binding::BindingState;
use fleethub_crds::conditions::find;
use fleethub_crds::{Binding, Placement, ResourceSnapshot, Work, names};
use fleethub_testkit::{Fleet, wait_deleted, wait_for};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{ListParams, Patch, PatchParams};
use kube::{Api, ResourceExt};

use serde_json::json;

async fn indices(s: &Scenario) -> Vec<i64> {
    let snapshots: Api<ResourceSnapshot> = Api::all(s.hub.clone());
    let mut idx: Vec<i64> = snapshots
        .list(&ListParams::default().labels(&format!("{}={}", names::PLACEMENT_LABEL, s.placement)))
        .await
        .unwrap()
        .items
        .iter()
        .map(|s| s.spec.resource_index)
        .collect();
    idx.sort();
    idx
}

async fn work_at(s: &Scenario, cluster: &str, index: i64) -> Work {
    let works: Api<Work> = Api::namespaced(s.hub.clone(), &names::member_namespace(cluster));
    wait_for(
        &works,
        &names::work_name(&s.placement),
        "the cluster's Work at the snapshot",
        TIMEOUT,
        move |w: Option<&Work>| w.is_some_and(|w| w.spec.resource_snapshot_index == index),
    )
    .await
    .unwrap()
}

#[tokio::test]
async fn snapshots_bindings_and_works_follow_the_hub_objects() {
    let fleet = Fleet::get().unwrap();
    let s = Scenario::new(fleet, "pl").await;
    let a = s.member("a", json!({})).await;
    let b = s.member("b", json!({})).await;
    s.placement(&[&a, &b], true).await;

    // Snapshot 0: the namespace and its ConfigMap, cleaned; both clusters bound to it.
    let first = s.wait_snapshot(0).await;
    let kinds: Vec<&str> = first
        .spec
        .resources
        .iter()
        .map(|r| r["kind"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        ["Namespace", "ConfigMap"],
        "{:?}",
        first.spec.resources
    );
    assert!(
        first
            .spec
            .resources
            .iter()
            .all(|r| r["metadata"].get("uid").is_none() && r.get("status").is_none())
    );
    assert_eq!(first.owner_references()[0].name, s.placement);
    let work = work_at(&s, &a, 0).await;
    assert_eq!(work.spec.workload.manifests, first.spec.resources);
    work_at(&s, &b, 0).await;

    // A Deployment whose status the hub's controller manager keeps updating: one new snapshot
    // for the Deployment itself, none for its status changes.
    let deployments: Api<Deployment> = Api::namespaced(s.hub.clone(), &s.app_namespace());
    let d = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "web", "image": "web:1"}]}}}});
    deployments
        .patch("web", &PatchParams::apply("test"), &Patch::Apply(&d))
        .await
        .unwrap();
    s.wait_snapshot(1).await;
    wait_for(
        &deployments,
        "web",
        "the Deployment's status to be written",
        TIMEOUT,
        |d: Option<&Deployment>| {
            d.and_then(|d| d.status.as_ref())
                .and_then(|s| s.observed_generation)
                == Some(1)
        },
    )
    .await
    .unwrap();
    // A real change after the status settled: it must become index 2, not 3.
    s.set_version("2").await;
    let third = s.wait_snapshot(2).await;
    assert_eq!(indices(&s).await, [0, 1, 2]);
    let deployment = third
        .spec
        .resources
        .iter()
        .find(|r| r["kind"] == "Deployment")
        .unwrap();
    assert!(deployment.get("status").is_none());
    assert_eq!(
        work_at(&s, &a, 2).await.spec.workload.manifests,
        third.spec.resources
    );

    // The placement reports both clusters bound to the latest snapshot.
    let placements: Api<Placement> = Api::all(s.hub.clone());
    let p = wait_for(
        &placements,
        &s.placement,
        "the placement's status",
        TIMEOUT,
        |p: Option<&Placement>| {
            p.and_then(|p| p.status.as_ref()).is_some_and(|st| {
                st.latest_resource_snapshot_index == Some(2)
                    && st.placement_statuses.len() == 2
                    && st
                        .placement_statuses
                        .iter()
                        .all(|c| c.resource_snapshot_index == Some(2))
            })
        },
    )
    .await
    .unwrap();
    assert_eq!(p.status.unwrap().selected_cluster_count, Some(2));

    // History is bounded.
    let limit = json!({"spec": {"revisionHistoryLimit": 2}});
    placements
        .patch(&s.placement, &PatchParams::default(), &Patch::Merge(&limit))
        .await
        .unwrap();
    let snapshots: Api<ResourceSnapshot> = Api::all(s.hub.clone());
    wait_deleted(
        &snapshots,
        &names::resource_snapshot_name(&s.placement, 0),
        TIMEOUT,
    )
    .await
    .unwrap();
    assert_eq!(indices(&s).await, [1, 2]);

    // An object too large for a snapshot is refused with a condition that names it, not cut.
    let cms: Api<ConfigMap> = Api::namespaced(s.hub.clone(), &s.app_namespace());
    let huge = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "huge"}, "data": {"blob": "x".repeat(900 * 1024)}});
    cms.patch("huge", &PatchParams::apply("test"), &Patch::Apply(&huge))
        .await
        .unwrap();
    let refused = |reason: &'static str| {
        move |p: Option<&Placement>| {
            p.and_then(|p| p.status.as_ref())
                .and_then(|st| find(&st.conditions, "ResourcesSnapshotted"))
                .is_some_and(|c| c.reason == reason)
        }
    };
    let p = wait_for(
        &placements,
        &s.placement,
        "the oversized object to be refused",
        TIMEOUT,
        refused("ObjectTooLarge"),
    )
    .await
    .unwrap();
    let message = find(&p.status.unwrap().conditions, "ResourcesSnapshotted")
        .unwrap()
        .message
        .clone();
    assert!(
        message.starts_with(&format!("ConfigMap {}/huge is 900 KiB", s.app_namespace())),
        "{message}"
    );
    cms.delete("huge", &Default::default()).await.unwrap();
    wait_for(
        &placements,
        &s.placement,
        "snapshots to resume",
        TIMEOUT,
        refused("Snapshotted"),
    )
    .await
    .unwrap();
    assert_eq!(
        indices(&s).await,
        [1, 2],
        "the refused content was never snapshotted"
    );

    // b is no longer picked: under RollingUpdate its binding and Work go at once.
    s.pick(&[&a]).await;
    let bindings: Api<Binding> = Api::all(s.hub.clone());
    wait_deleted(&bindings, &names::binding_name(&s.placement, &b), TIMEOUT)
        .await
        .unwrap();
    let works: Api<Work> = Api::namespaced(s.hub.clone(), &names::member_namespace(&b));
    wait_deleted(&works, &names::work_name(&s.placement), TIMEOUT)
        .await
        .unwrap();
    let kept = bindings
        .get(&names::binding_name(&s.placement, &a))
        .await
        .unwrap();
    assert_eq!(
        (kept.spec.state, kept.spec.resource_snapshot_index),
        (BindingState::Bound, Some(2))
    );

    // Deleting the placement removes its snapshots, bindings and Works.
    placements
        .delete(&s.placement, &Default::default())
        .await
        .unwrap();
    let works: Api<Work> = Api::namespaced(s.hub.clone(), &names::member_namespace(&a));
    wait_deleted(&works, &names::work_name(&s.placement), TIMEOUT)
        .await
        .unwrap();
    wait_deleted(
        &snapshots,
        &names::resource_snapshot_name(&s.placement, 2),
        TIMEOUT,
    )
    .await
    .unwrap();
    assert!(indices(&s).await.is_empty());
}
