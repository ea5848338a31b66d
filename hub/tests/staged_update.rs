//! The staged-update engine on the real hub: the three-stage rollout of the reference design,
//! with one gate approved through real `kubectl patch --subresource=status` and one through the
//! API, clusters updated in the strategy's order, and the deletion stage.
//!
//! The hub under test is the fleet's running `fleethub-hub` (`deploy/local/fleet up` restarts it
//! from the current build). The members' reports are written by this test, acting as the member
//! agents, on MemberClusters of its own: it checks the hub's side of the contract.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use fleethub_crds::conditions::{find, is_true};
use fleethub_crds::{ApprovalRequest, Binding, UpdateRun, Work};
use fleethub_testkit::{Fleet, unique_name, wait_deleted, wait_for};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::core::ApiResource;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use serde_json::{Value, json};

const TIMEOUT: Duration = Duration::from_secs(120);

async fn create(client: &Client, ar: &ApiResource, obj: Value) {
    let obj: DynamicObject = serde_json::from_value(obj).unwrap();
    let api: Api<DynamicObject> = match &obj.metadata.namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, ar),
        None => Api::all_with(client.clone(), ar),
    };
    api.create(&PostParams::default(), &obj).await.unwrap_or_else(|e| panic!("creating {obj:?}: {e}"));
}

fn ar<K: kube::Resource<DynamicType = ()>>() -> ApiResource {
    ApiResource::erase::<K>(&())
}

/// Acts as the member agents of `placement`'s clusters: reports every new Work generation
/// applied and available, and records the order in which clusters first got the snapshot.
fn simulate_members(client: Client, placement: String, index: i64) -> (Arc<Mutex<Vec<String>>>, tokio::task::JoinHandle<()>) {
    let order = Arc::new(Mutex::new(Vec::new()));
    let seen = order.clone();
    let task = tokio::spawn(async move {
        let works: Api<Work> = Api::all(client.clone());
        let cfg = watcher::Config::default().labels(&format!("fleethub.dev/placement={placement}"));
        let mut stream = watcher(works, cfg).default_backoff().applied_objects().boxed();
        while let Some(Ok(work)) = stream.next().await {
            let generation = work.metadata.generation;
            let reported = work
                .status
                .as_ref()
                .and_then(|s| find(&s.conditions, "Available"))
                .and_then(|c| c.observed_generation);
            if reported == generation || work.spec.resource_snapshot_index != index {
                continue;
            }
            let cluster = work.namespace().unwrap().trim_start_matches("fleet-member-").to_string();
            {
                let mut order = seen.lock().unwrap();
                if !order.contains(&cluster) {
                    order.push(cluster);
                }
            }
            let now = jiff::Timestamp::now().to_string();
            let cond = |t: &str| json!({"type": t, "status": "True", "reason": "Simulated", "message": "reported by the test",
                                        "observedGeneration": generation, "lastTransitionTime": now});
            let status = json!({"status": {"conditions": [cond("Applied"), cond("Available")],
                                           "appliedResourceSnapshotIndex": index}});
            let api: Api<Work> = Api::namespaced(client.clone(), &work.namespace().unwrap());
            api.patch_status(&work.name_any(), &PatchParams::default(), &Patch::Merge(&status)).await.unwrap();
        }
    });
    (order, task)
}

fn kubectl(fleet: &Fleet, args: &[&str]) -> String {
    let out = std::process::Command::new(std::env::var("KUBECTL").unwrap_or_else(|_| "kubectl".into()))
        .arg("--kubeconfig")
        .arg(fleet.kubeconfig("hub"))
        .args(args)
        .output()
        .unwrap();
    assert!(out.status.success(), "kubectl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

#[tokio::test]
async fn three_stage_rollout_with_gates_in_order() {
    let fleet = Fleet::get().unwrap();
    let hub = fleet.hub().await.unwrap();
    let id = unique_name("su");
    let placement = format!("web-{id}");
    let run = format!("run-{id}");
    let strategy = format!("three-{id}");
    let cluster = |role: &str| format!("{role}-{id}");
    let members = [
        (cluster("stg"), json!({"env": format!("staging-{id}")})),
        (cluster("can"), json!({"env": format!("canary-{id}")})),
        (cluster("prod1"), json!({"env": format!("production-{id}"), "order": "2"})),
        (cluster("prod2"), json!({"env": format!("production-{id}"), "order": "1"})),
    ];
    let old = cluster("old");

    for (name, labels) in &members {
        create(&hub, &ar::<fleethub_crds::MemberCluster>(), json!({"apiVersion": "fleethub.dev/v1alpha1", "kind": "MemberCluster",
            "metadata": {"name": name, "labels": labels}, "spec": {}})).await;
    }
    let namespaces: Api<Namespace> = Api::all(hub.clone());
    for name in members.iter().map(|(n, _)| n).chain([&old]) {
        namespaces
            .create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": format!("fleet-member-{name}")}})).unwrap())
            .await
            .unwrap();
    }
    create(&hub, &ar::<fleethub_crds::Placement>(), json!({"apiVersion": "fleethub.dev/v1alpha1", "kind": "Placement",
        "metadata": {"name": placement},
        "spec": {"resourceSelectors": [{"group": "", "version": "v1", "kind": "Namespace", "name": "app"}],
                 "strategy": {"type": "External"}}})).await;
    create(&hub, &ar::<fleethub_crds::ResourceSnapshot>(), json!({"apiVersion": "fleethub.dev/v1alpha1", "kind": "ResourceSnapshot",
        "metadata": {"name": format!("{placement}-1-snapshot")},
        "spec": {"placementName": placement, "resourceIndex": 1, "parts": 1, "contentHash": "h1", "objectCount": 1,
                 "resources": [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "web", "namespace": "app"},
                                "data": {"version": "1"}}]}})).await;
    for (name, _) in &members {
        create(&hub, &ar::<Binding>(), json!({"apiVersion": "fleethub.dev/v1alpha1", "kind": "Binding",
            "metadata": {"name": format!("{placement}-{name}")},
            "spec": {"placementName": placement, "targetCluster": name, "state": "Scheduled"}})).await;
    }
    // A cluster the placement no longer selects: the deletion stage removes its Work.
    create(&hub, &ar::<fleethub_crds::MemberCluster>(), json!({"apiVersion": "fleethub.dev/v1alpha1", "kind": "MemberCluster",
        "metadata": {"name": old}, "spec": {}})).await;
    create(&hub, &ar::<Binding>(), json!({"apiVersion": "fleethub.dev/v1alpha1", "kind": "Binding",
        "metadata": {"name": format!("{placement}-{old}")},
        "spec": {"placementName": placement, "targetCluster": old, "state": "Unscheduled"}})).await;
    create(&hub, &ar::<fleethub_crds::StagedUpdateStrategy>(), json!({"apiVersion": "fleethub.dev/v1alpha1", "kind": "StagedUpdateStrategy",
        "metadata": {"name": strategy},
        "spec": {"stages": [
            {"name": "staging", "labelSelector": {"matchLabels": {"env": format!("staging-{id}")}},
             "afterStageTasks": [{"type": "TimedWait", "waitTime": "2s"}]},
            {"name": "canary", "labelSelector": {"matchLabels": {"env": format!("canary-{id}")}},
             "afterStageTasks": [{"type": "Approval"}]},
            {"name": "production", "labelSelector": {"matchLabels": {"env": format!("production-{id}")}},
             "sortingLabelKey": "order",
             "afterStageTasks": [{"type": "Approval"}, {"type": "TimedWait", "waitTime": "1s"}]}]}})).await;

    let (order, members_task) = simulate_members(hub.clone(), placement.clone(), 1);
    create(&hub, &ar::<UpdateRun>(), json!({"apiVersion": "fleethub.dev/v1alpha1", "kind": "UpdateRun",
        "metadata": {"name": run},
        "spec": {"placementName": placement, "resourceSnapshotIndex": "1", "stagedRolloutStrategyName": strategy}})).await;

    let runs: Api<UpdateRun> = Api::all(hub.clone());
    let approvals: Api<ApprovalRequest> = Api::all(hub.clone());
    let exists = |o: Option<&ApprovalRequest>| o.is_some();

    // staging runs, waits 2s, then canary runs and waits for approval.
    wait_for(&approvals, &format!("{run}-canary"), "the canary ApprovalRequest", TIMEOUT, exists).await.unwrap();
    assert_eq!(*order.lock().unwrap(), [cluster("stg"), cluster("can")], "only staging and canary before the canary gate");
    // The request is created just before the run records that it waits for it.
    let waiting = wait_for(&runs, &run, "the run to wait for the canary approval", TIMEOUT, |r: Option<&UpdateRun>| {
        r.and_then(|r| r.status.as_ref())
            .and_then(|s| find(&s.conditions, "Progressing"))
            .is_some_and(|c| c.reason == "UpdateRunWaiting")
    })
    .await
    .unwrap();
    let progressing = find(&waiting.status.as_ref().unwrap().conditions, "Progressing").unwrap();
    assert_eq!(progressing.status, "False");
    assert!(progressing.message.contains(&format!("waits for approval of ApprovalRequest {run}-canary")), "{}", progressing.message);
    let request = approvals.get(&format!("{run}-canary")).await.unwrap();
    assert_eq!(request.labels().get("fleethub.dev/update-run"), Some(&run));
    assert_eq!(request.spec.target_stage, "canary");

    // Approve the canary gate the way the reference design documents, with kubectl.
    let patch = format!(
        r#"{{"status":{{"conditions":[{{"type":"Approved","status":"True","reason":"lgtm","message":"lgtm","lastTransitionTime":"{}","observedGeneration":1}}]}}}}"#,
        jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ")
    );
    kubectl(fleet, &["patch", "approvalrequests", &format!("{run}-canary"), "--type=merge", "-p", &patch, "--subresource=status"]);

    // production runs in `order` (prod2 has order 1), then waits for its own approval.
    wait_for(&approvals, &format!("{run}-production"), "the production ApprovalRequest", TIMEOUT, exists).await.unwrap();
    let accepted = approvals.get(&format!("{run}-canary")).await.unwrap();
    let conds = accepted.status.unwrap().conditions;
    assert!(is_true(&conds, "Approved") && is_true(&conds, "ApprovalAccepted"), "{conds:?}");
    assert_eq!(*order.lock().unwrap(), [cluster("stg"), cluster("can"), cluster("prod2"), cluster("prod1")]);

    // Approve production through the API (the dashboard's path).
    let approve = json!({"status": {"conditions": [{"type": "Approved", "status": "True", "reason": "Approved",
        "message": "approved by the test", "lastTransitionTime": jiff::Timestamp::now().to_string()}]}});
    approvals.patch_status(&format!("{run}-production"), &PatchParams::default(), &Patch::Merge(&approve)).await.unwrap();

    let done = wait_for(&runs, &run, "the run to succeed", TIMEOUT, |r: Option<&UpdateRun>| {
        r.and_then(|r| r.status.as_ref()).is_some_and(|s| is_true(&s.conditions, "Succeeded"))
    })
    .await
    .unwrap();
    members_task.abort();

    let status = done.status.unwrap();
    assert_eq!(status.current_stage, None);
    assert!(status.end_time.is_some());
    let stages: Vec<_> = status.stages_status.iter().map(|s| s.stage_name.as_str()).collect();
    assert_eq!(stages, ["staging", "canary", "production"]);
    for stage in &status.stages_status {
        assert!(is_true(&stage.conditions, "Succeeded"), "{stage:?}");
        for c in &stage.clusters {
            assert!(is_true(&c.conditions, "Succeeded") && c.start_time.is_some() && c.end_time.is_some(), "{c:?}");
        }
    }
    // Stage order in time: each stage started after the previous one ended, and staging's
    // TimedWait lasted at least its 2s from the stage's completion.
    for pair in status.stages_status.windows(2) {
        assert!(pair[1].start_time.as_ref().unwrap().0 >= pair[0].end_time.as_ref().unwrap().0);
    }
    let staging = &status.stages_status[0];
    let waited = staging.end_time.as_ref().unwrap().0.as_second() - staging.clusters_completed_time.as_ref().unwrap().0.as_second();
    assert!(waited >= 2, "staging waited {waited}s");
    let prod: Vec<_> = status.stages_status[2].clusters.iter().map(|c| c.cluster_name.clone()).collect();
    assert_eq!(prod, [cluster("prod2"), cluster("prod1")]);

    // Every cluster's Binding points at index 1 via this run; the removed cluster's is gone.
    let bindings: Api<Binding> = Api::all(hub.clone());
    for (name, _) in &members {
        let b = bindings.get(&format!("{placement}-{name}")).await.unwrap();
        assert_eq!((b.spec.resource_snapshot_index, b.spec.update_run_name.as_deref()), (Some(1), Some(run.as_str())));
        let available = find(&b.status.as_ref().unwrap().conditions, "Available").map(|c| c.status.clone());
        assert_eq!(available.as_deref(), Some("True"), "binding of {name} rolls up the member's report");
    }
    wait_deleted(&bindings, &format!("{placement}-{old}"), TIMEOUT).await.unwrap();
    assert!(is_true(&status.deletion_stage_status.unwrap().conditions, "Succeeded"));

    // The run's story is told in events.
    let events = kubectl(fleet, &["get", "events", "-n", "default", "--field-selector", &format!("involvedObject.name={run}"), "-o", "jsonpath={.items[*].reason}"]);
    for reason in ["UpdateRunInitializedSuccessfully", "ClusterUpdatingStarted", "AfterStageTaskApprovalRequestCreated", "UpdateRunSucceeded"] {
        assert!(events.contains(reason), "no {reason} event in {events}");
    }

    // Deleting the run deletes its approval requests (owner references, real garbage collector).
    runs.delete(&run, &Default::default()).await.unwrap();
    wait_deleted(&approvals, &format!("{run}-canary"), TIMEOUT).await.unwrap();
    let works: Api<Work> = Api::all(hub.clone());
    let left = works.list(&ListParams::default().labels(&format!("fleethub.dev/placement={placement}"))).await.unwrap();
    assert_eq!(left.items.len(), members.len(), "one Work per selected cluster stays: {:?}", left.items.iter().map(|w| w.namespace()).collect::<Vec<_>>());
}
