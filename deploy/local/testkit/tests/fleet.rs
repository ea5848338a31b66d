//! The local fleet is made of real Kubernetes: members schedule and run workloads on kwok nodes
//! (and kwok can keep chosen pods unready), and the hub's controller manager deletes namespaces
//! and collects garbage. And the [`Cleanup`] guard really removes what a test made, also when
//! the test panics.

use std::process::Command;
use std::time::Duration;

use fleethub_testkit::{Cleanup, Fleet, poll_until, unique_name, wait_deleted, wait_for};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Node, Pod};
use kube::api::{ListParams, PostParams};
use kube::{Api, Client};
use serde_json::json;

const TIMEOUT: Duration = Duration::from_secs(90);

/// A new namespace on `cluster` (`client` is its admin), deleted by `cleanup`.
async fn namespace(client: &Client, cleanup: &Cleanup, cluster: &str) -> String {
    let name = unique_name("t");
    cleanup.track::<Namespace>(cluster, None, &name);
    let api: Api<Namespace> = Api::all(client.clone());
    api.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": name}})).unwrap(),
    )
    .await
    .unwrap();
    name
}

fn deployment(name: &str, replicas: i32, pod_labels: serde_json::Value) -> Deployment {
    let mut labels = json!({"app": name});
    labels
        .as_object_mut()
        .unwrap()
        .extend(pod_labels.as_object().unwrap().clone());
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "progressDeadlineSeconds": 15,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [{"name": "app", "image": "registry.invalid/web:1.0"}]}
            }
        }
    }))
    .unwrap()
}

fn condition(d: &Deployment, type_: &str) -> Option<(String, String)> {
    d.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| (c.status.clone(), c.reason.clone().unwrap_or_default()))
}

/// Creates Deployment `name` with `replicas` pods through `api` and waits until it is Available
/// with every replica.
async fn deployment_becomes_available(
    api: &Api<Deployment>,
    name: &str,
    replicas: i32,
) -> Deployment {
    api.create(
        &PostParams::default(),
        &deployment(name, replicas, json!({})),
    )
    .await
    .unwrap();
    wait_for(
        api,
        name,
        &format!("deployment {name} to be Available"),
        TIMEOUT,
        |d: Option<&Deployment>| {
            d.is_some_and(|d| {
                condition(d, "Available").is_some_and(|(s, _)| s == "True")
                    && d.status.as_ref().and_then(|s| s.available_replicas) == Some(replicas)
            })
        },
    )
    .await
    .unwrap()
}

/// The pid of the kwok that serves member `i`: the child of the supervisor the fleet started
/// (`run/member-<i>-kwok.pid`).
fn kwok_pid(fleet: &Fleet, i: usize) -> Option<String> {
    let supervisor =
        std::fs::read_to_string(fleet.dir().join(format!("run/member-{i}-kwok.pid"))).ok()?;
    let out = Command::new("pgrep")
        .args(["-P", supervisor.trim()])
        .output()
        .ok()?;
    let children = String::from_utf8(out.stdout).ok()?;
    children.split_whitespace().next().map(str::to_string)
}

#[tokio::test]
async fn every_member_has_ready_kwok_nodes() {
    let fleet = Fleet::get().unwrap();
    assert!(fleet.member_count() >= 1);
    for i in 1..=fleet.member_count() {
        let nodes: Api<Node> = Api::all(fleet.member(i).await.unwrap());
        let list = nodes.list(&ListParams::default()).await.unwrap();
        assert!(!list.items.is_empty(), "member-{i} has no nodes");
        for node in list.items {
            let ready = node
                .status
                .and_then(|s| s.conditions)
                .unwrap_or_default()
                .into_iter()
                .any(|c| c.type_ == "Ready" && c.status == "True");
            assert!(
                ready,
                "member-{i} node {:?} is not Ready",
                node.metadata.name
            );
        }
    }
}

#[tokio::test]
async fn a_deployment_on_a_member_becomes_available() {
    let fleet = Fleet::get().unwrap();
    let member = fleet.member(fleet.member_count()).await.unwrap();
    let cleanup = Cleanup::new(fleet);
    let ns = namespace(
        &member,
        &cleanup,
        &format!("member-{}", fleet.member_count()),
    )
    .await;
    let api: Api<Deployment> = Api::namespaced(member.clone(), &ns);
    let available = deployment_becomes_available(&api, "web", 3).await;
    assert_eq!(available.status.unwrap().ready_replicas, Some(3));

    // The pods were really scheduled onto the kwok nodes and marked running by kwok.
    let pods: Api<Pod> = Api::namespaced(member.clone(), &ns);
    let pods = pods
        .list(&ListParams::default().labels("app=web"))
        .await
        .unwrap()
        .items;
    assert_eq!(pods.len(), 3);
    for pod in pods {
        assert!(pod.spec.unwrap().node_name.unwrap().contains("-node-"));
        assert_eq!(pod.status.unwrap().phase.as_deref(), Some("Running"));
    }
    Api::<Namespace>::all(member)
        .delete(&ns, &Default::default())
        .await
        .unwrap();
}

#[tokio::test]
async fn pods_kwok_keeps_unready_keep_a_deployment_unavailable() {
    let fleet = Fleet::get().unwrap();
    let member = fleet.member(1).await.unwrap();
    let cleanup = Cleanup::new(fleet);
    let ns = namespace(&member, &cleanup, "member-1").await;
    let api: Api<Deployment> = Api::namespaced(member.clone(), &ns);
    api.create(
        &PostParams::default(),
        &deployment("bad", 2, json!({"fleethub.dev/simulate": "unready"})),
    )
    .await
    .unwrap();

    // The progress deadline passing is the signal that the pods stayed unready all along.
    let stuck = wait_for(
        &api,
        "bad",
        "deployment bad to exceed its progress deadline",
        TIMEOUT,
        |d: Option<&Deployment>| {
            d.is_some_and(|d| {
                condition(d, "Progressing")
                    .is_some_and(|(s, r)| s == "False" && r == "ProgressDeadlineExceeded")
            })
        },
    )
    .await
    .unwrap();
    let status = stuck.status.clone().unwrap();
    assert_eq!(
        condition(&stuck, "Available").map(|(s, _)| s),
        Some("False".to_string())
    );
    assert_eq!(status.replicas, Some(2));
    assert_eq!(status.ready_replicas.unwrap_or(0), 0);
    assert_eq!(status.available_replicas.unwrap_or(0), 0);

    // The pods exist and run, they are just never ready.
    let pods: Api<Pod> = Api::namespaced(member.clone(), &ns);
    for pod in pods
        .list(&ListParams::default().labels("app=bad"))
        .await
        .unwrap()
        .items
    {
        let st = pod.status.unwrap();
        assert_eq!(st.phase.as_deref(), Some("Running"));
        let ready = st
            .conditions
            .unwrap()
            .into_iter()
            .find(|c| c.type_ == "Ready")
            .unwrap();
        assert_eq!(ready.status, "False");
    }
    Api::<Namespace>::all(member)
        .delete(&ns, &Default::default())
        .await
        .unwrap();
}

/// kwok can die as it starts (see `start_kwok` in deploy/local/fleet); the fleet starts it again,
/// as a service manager restarts a kubelet, so one crash does not leave a member's pods unready
/// for the rest of a test run.
#[tokio::test]
async fn a_member_kwok_that_dies_is_started_again_and_runs_pods() {
    let fleet = Fleet::get().unwrap();
    let i = fleet.member_count();
    let killed = kwok_pid(fleet, i).expect("the member's kwok runs under its supervisor");
    let status = Command::new("kill")
        .args(["-KILL", &killed])
        .status()
        .unwrap();
    assert!(status.success(), "kill -KILL {killed}: {status}");
    let started = poll_until("the member's kwok to be started again", TIMEOUT, || async {
        kwok_pid(fleet, i).filter(|pid| *pid != killed)
    })
    .await
    .unwrap();
    assert_ne!(started, killed);

    // The new kwok does kwok's work: new pods run and become ready.
    let member = fleet.member(i).await.unwrap();
    let cleanup = Cleanup::new(fleet);
    let ns = namespace(&member, &cleanup, &format!("member-{i}")).await;
    let api: Api<Deployment> = Api::namespaced(member.clone(), &ns);
    deployment_becomes_available(&api, "after-restart", 2).await;
    Api::<Namespace>::all(member)
        .delete(&ns, &Default::default())
        .await
        .unwrap();
}

#[tokio::test]
async fn the_hub_deletes_namespaces_and_collects_garbage() {
    let fleet = Fleet::get().unwrap();
    let hub = fleet.hub().await.unwrap();
    let cleanup = Cleanup::new(fleet);
    let ns = namespace(&hub, &cleanup, "hub").await;
    let cms: Api<ConfigMap> = Api::namespaced(hub.clone(), &ns);
    let owner = cms
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "owner"}})).unwrap(),
        )
        .await
        .unwrap();
    let dependent = json!({"metadata": {"name": "dependent", "ownerReferences": [{
        "apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": owner.metadata.uid.unwrap()}]}});
    cms.create(
        &PostParams::default(),
        &serde_json::from_value(dependent).unwrap(),
    )
    .await
    .unwrap();

    // Garbage collection: deleting the owner removes the dependent.
    cms.delete("owner", &Default::default()).await.unwrap();
    wait_deleted(&cms, "dependent", TIMEOUT).await.unwrap();

    // Namespace deletion: the namespace controller empties and removes it.
    cms.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": "content"}})).unwrap(),
    )
    .await
    .unwrap();
    let namespaces: Api<Namespace> = Api::all(hub);
    namespaces.delete(&ns, &Default::default()).await.unwrap();
    wait_deleted(&namespaces, &ns, TIMEOUT).await.unwrap();
}

/// Whether namespace `name` exists on the hub (asked from a runtime of its own).
fn hub_has_namespace(fleet: &Fleet, name: &str) -> bool {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let namespaces: Api<Namespace> = Api::all(fleet.hub().await.unwrap());
        namespaces.get_opt(name).await.unwrap().is_some()
    })
}

#[test]
fn a_cleanup_guard_removes_what_a_panicking_test_made_inside_or_outside_a_runtime() {
    let fleet = Fleet::get().unwrap();

    // Dropped while a test in a runtime unwinds from a panic.
    let panicked = unique_name("cleanup-panic");
    let result = std::panic::catch_unwind(|| {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let hub = fleet.hub().await.unwrap();
            let cleanup = Cleanup::new(fleet);
            let made = namespace(&hub, &cleanup, "hub").await;
            cleanup.track::<Namespace>("hub", None, &panicked);
            Api::<Namespace>::all(hub)
                .create(
                    &PostParams::default(),
                    &serde_json::from_value(json!({"metadata": {"name": panicked}})).unwrap(),
                )
                .await
                .unwrap();
            assert!(!made.is_empty());
            panic!("the test fails half-way");
        })
    });
    assert!(result.is_err());
    assert!(
        !hub_has_namespace(fleet, &panicked),
        "the guard deleted the namespace and waited until it was gone"
    );

    // Dropped outside any runtime; and an object that was never created is no error.
    let outside = unique_name("cleanup-outside");
    let cleanup = Cleanup::new(fleet);
    cleanup.track::<Namespace>("hub", None, &unique_name("never-created"));
    {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let hub = fleet.hub().await.unwrap();
            cleanup.track::<Namespace>("hub", None, &outside);
            Api::<Namespace>::all(hub)
                .create(
                    &PostParams::default(),
                    &serde_json::from_value(json!({"metadata": {"name": outside}})).unwrap(),
                )
                .await
                .unwrap();
        });
    }
    assert!(hub_has_namespace(fleet, &outside));
    cleanup.clean().unwrap();
    assert!(!hub_has_namespace(fleet, &outside));
}
