//! Set-up for tests with the fleet's real member agents: member-1..3 (each a real API server
//! with kwok nodes and a real `fleethub-member-agent`) labelled staging / canary / production,
//! a namespace with a Deployment and a ConfigMap on the hub, and runs that roll it out.

use fleethub_crds::conditions::is_true;
use fleethub_crds::{
    ApprovalRequest, MemberCluster, Placement, StagedUpdateStrategy, UpdateRun, names,
};
use fleethub_testkit::{Cleanup, Fleet, unique_name, wait_for};
use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use serde_json::json;

use super::{TIMEOUT, kubectl};

/// The fleet's members and their environments.
pub const ROLES: [(&str, &str); 3] = [
    ("member-1", "staging"),
    ("member-2", "canary"),
    ("member-3", "production"),
];

/// The field manager of the members' labels the tests set.
pub const LABEL_MANAGER: &str = "journey-test";

/// Labels the fleet's members with their environment and `order`, and waits until each is
/// joined and healthy.
pub async fn label_members(hub: &Client) {
    let members: Api<MemberCluster> = Api::all(hub.clone());
    for (i, (name, env)) in ROLES.iter().enumerate() {
        let labels = json!({"apiVersion": "fleethub.dev/v1alpha1", "kind": "MemberCluster",
            "metadata": {"name": name, "labels": {"environment": env, "order": (i + 1).to_string()}}});
        members
            .patch(
                name,
                &PatchParams::apply(LABEL_MANAGER).force(),
                &Patch::Apply(&labels),
            )
            .await
            .unwrap();
        wait_healthy(hub, name).await;
    }
}

/// Waits until MemberCluster `name` is joined and healthy.
pub async fn wait_healthy(hub: &Client, name: &str) -> MemberCluster {
    let members: Api<MemberCluster> = Api::all(hub.clone());
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
    .unwrap()
}

/// One test's workload and rollout objects on the hub, named after a unique id; dropping it
/// deletes them (the placement first, so the member agents remove the workload from the
/// members).
pub struct Rollout {
    pub hub: Client,
    /// Everything this rollout created on the hub, deleted when it is dropped.
    pub cleanup: Cleanup,
    pub id: String,
    /// The workload's namespace (on the hub and, once placed, on the members).
    pub ns: String,
    pub placement: String,
    pub strategy: String,
}

impl Rollout {
    /// Creates namespace `<id>` with ConfigMap `web` and Deployment `web` (2 replicas, `image`)
    /// on the hub, a PickFixed External placement of it on member-1..3, and a three-stage
    /// strategy (staging, canary, production by `order`) with `stages`' after-stage tasks.
    pub async fn new(
        fleet: &Fleet,
        prefix: &str,
        image: &str,
        tasks: [serde_json::Value; 3],
    ) -> Self {
        let hub = fleet.hub().await.unwrap();
        label_members(&hub).await;
        let id = unique_name(prefix);
        let r = Rollout {
            hub: hub.clone(),
            cleanup: Cleanup::new(fleet),
            ns: id.clone(),
            placement: format!("web-{id}"),
            strategy: format!("stages-{id}"),
            id,
        };
        // The members' labels go back to what they were: the ones only this test set are
        // dropped (the sample rollout sets the same ones, which then stay).
        for (name, _) in ROLES {
            r.cleanup
                .release_fields::<MemberCluster>("hub", None, name, LABEL_MANAGER);
        }
        // Deleted newest first: the runs, the placement (its bindings and Works with it, so the
        // agents clean the members up), the strategy, the workload's namespace.
        r.cleanup.track::<Namespace>("hub", None, &r.ns);
        r.cleanup
            .track::<StagedUpdateStrategy>("hub", None, &r.strategy);
        r.cleanup.track::<Placement>("hub", None, &r.placement);
        let namespaces: Api<Namespace> = Api::all(hub.clone());
        namespaces
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({"metadata": {"name": r.ns}})).unwrap(),
            )
            .await
            .unwrap();
        let cms: Api<ConfigMap> = Api::namespaced(hub.clone(), &r.ns);
        cms.create(
            &PostParams::default(),
            &serde_json::from_value(
                json!({"metadata": {"name": "web"}, "data": {"greeting": "hello"}}),
            )
            .unwrap(),
        )
        .await
        .unwrap();
        r.set_image(image, false).await;
        let [staging, canary, production] = tasks;
        let strategy = json!({"apiVersion": "fleethub.dev/v1alpha1", "kind": "StagedUpdateStrategy", "metadata": {"name": r.strategy},
            "spec": {"stages": [
                {"name": "staging", "labelSelector": {"matchLabels": {"environment": "staging"}},
                 "afterStageTasks": staging},
                {"name": "canary", "labelSelector": {"matchLabels": {"environment": "canary"}},
                 "afterStageTasks": canary},
                {"name": "production", "labelSelector": {"matchLabels": {"environment": "production"}}, "sortingLabelKey": "order",
                 "afterStageTasks": production}]}});
        kubectl_apply(fleet, &strategy);
        let placement = json!({"apiVersion": "fleethub.dev/v1alpha1", "kind": "Placement", "metadata": {"name": r.placement},
            "spec": {"resourceSelectors": [{"group": "", "version": "v1", "kind": "Namespace", "name": r.ns}],
                     "policy": {"placementType": "PickFixed", "clusterNames": ["member-1", "member-2", "member-3"]},
                     "strategy": {"type": "External"}}});
        kubectl_apply(fleet, &placement);
        r.wait_snapshot(0).await;
        r
    }

    /// Sets the hub Deployment's image; `unready` labels its pods so kwok never makes them
    /// ready (a bad rollout).
    pub async fn set_image(&self, image: &str, unready: bool) {
        let deployments: Api<Deployment> = Api::namespaced(self.hub.clone(), &self.ns);
        let mut labels = json!({"app": "web"});
        if unready {
            labels["fleethub.dev/simulate"] = json!("unready");
        }
        let d = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
            "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}},
                     "template": {"metadata": {"labels": labels},
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

    /// Waits for the placement's snapshot `index`.
    pub async fn wait_snapshot(&self, index: u64) {
        let snapshots: Api<fleethub_crds::ResourceSnapshot> = Api::all(self.hub.clone());
        let name = names::resource_snapshot_name(&self.placement, index);
        wait_for(
            &snapshots,
            &name,
            "the snapshot",
            TIMEOUT,
            |s: Option<&fleethub_crds::ResourceSnapshot>| s.is_some(),
        )
        .await
        .unwrap();
    }

    /// Creates run `<id>-<suffix>` for snapshot `index` (with `healthTimeout` if given).
    pub async fn start_run(
        &self,
        suffix: &str,
        index: i64,
        health_timeout: Option<&str>,
    ) -> String {
        let name = format!("{}-{suffix}", self.id);
        let runs: Api<UpdateRun> = Api::all(self.hub.clone());
        let mut spec = json!({"placementName": self.placement, "resourceSnapshotIndex": index.to_string(),
            "stagedRolloutStrategyName": self.strategy});
        if let Some(t) = health_timeout {
            spec["healthTimeout"] = json!(t);
        }
        let run: UpdateRun = serde_json::from_value(
            json!({"apiVersion": "fleethub.dev/v1alpha1", "kind": "UpdateRun",
            "metadata": {"name": name}, "spec": spec}),
        )
        .unwrap();
        self.cleanup.track::<UpdateRun>("hub", None, &name);
        runs.create(&PostParams::default(), &run).await.unwrap();
        name
    }

    /// Creates a run for snapshot `index`, approves its gates as they come, and waits for it
    /// to succeed.
    pub async fn run_to_success(&self, suffix: &str, index: i64) -> UpdateRun {
        let name = self.start_run(suffix, index, None).await;
        let approver = auto_approve(self.hub.clone(), name.clone());
        let runs: Api<UpdateRun> = Api::all(self.hub.clone());
        let done = wait_for(
            &runs,
            &name,
            "the run to succeed",
            TIMEOUT,
            super::succeeded,
        )
        .await
        .unwrap();
        approver.abort();
        assert_stage_order(&done);
        done
    }

    /// Waits until member `i` runs this rollout's Deployment with `image`, all replicas
    /// available.
    pub async fn wait_running(&self, fleet: &Fleet, i: usize, image: &str) -> Deployment {
        wait_running(fleet, i, &self.ns, image).await
    }
}

pub fn image_of(d: &Deployment) -> Option<String> {
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
pub async fn wait_running(fleet: &Fleet, i: usize, ns: &str, image: &str) -> Deployment {
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

/// Approves every ApprovalRequest of `run` as it appears.
pub fn auto_approve(hub: Client, run: String) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let api: Api<ApprovalRequest> = Api::all(hub);
        let cfg = watcher::Config::default().labels(&format!("{}={run}", names::UPDATE_RUN_LABEL));
        let mut stream = watcher(api.clone(), cfg)
            .default_backoff()
            .applied_objects()
            .boxed();
        while let Some(Ok(a)) = stream.next().await {
            let _ = super::approve(&api, &a.name_any()).await;
        }
    })
}

/// Each stage's clusters started only after the previous stage ended.
pub fn assert_stage_order(run: &UpdateRun) {
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

/// `kubectl apply --server-side` of one object on the hub.
pub fn kubectl_apply(fleet: &Fleet, obj: &serde_json::Value) {
    let file = std::env::temp_dir().join(unique_name("obj"));
    std::fs::write(&file, obj.to_string()).unwrap();
    kubectl(
        fleet,
        &["apply", "--server-side", "-f", file.to_str().unwrap()],
    );
    let _ = std::fs::remove_file(file);
}
