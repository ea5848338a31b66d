//! Set-up shared by the hub's integration tests: a placement with its own member clusters,
//! snapshot, bindings and strategy on the real hub, and a stand-in for the member agents.

#![allow(dead_code)] // each test binary uses a different part

use std::sync::{Arc, Mutex};
use std::time::Duration;

use fleethub_crds::conditions::find;
use fleethub_crds::{ApprovalRequest, Binding, ResourceSnapshot, UpdateRun, Work, names};
use fleethub_testkit::{Cleanup, Fleet, unique_name, wait_for};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret};
use kube::api::{DynamicObject, Patch, PatchParams, PostParams};
use kube::core::ApiResource;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use serde_json::{Value, json};

pub mod auto_update;
pub mod real;
pub mod regressions;

pub const TIMEOUT: Duration = Duration::from_secs(120);
/// The hub's own namespace on the local fleet (its Lease, metric checks' Secrets).
pub const HUB_NAMESPACE: &str = "fleethub-system";

/// One test's objects, all named after a unique id; dropping it deletes every object it created.
pub struct Scenario {
    pub hub: Client,
    /// Everything this scenario created on the hub, deleted when the scenario is dropped.
    pub cleanup: Cleanup,
    pub id: String,
    pub placement: String,
    pub run: String,
    pub strategy: String,
}

impl Scenario {
    pub async fn new(fleet: &Fleet, prefix: &str) -> Self {
        let id = unique_name(prefix);
        Self {
            hub: fleet.hub().await.unwrap(),
            cleanup: Cleanup::new(fleet),
            placement: format!("web-{id}"),
            run: format!("run-{id}"),
            strategy: format!("strategy-{id}"),
            id,
        }
    }

    /// The name of this scenario's cluster `role`.
    pub fn cluster(&self, role: &str) -> String {
        format!("{role}-{}", self.id)
    }

    /// A label value unique to this scenario (stage selectors match on it).
    pub fn env(&self, env: &str) -> String {
        format!("{env}-{}", self.id)
    }

    pub async fn create(&self, obj: Value) {
        let obj: DynamicObject = serde_json::from_value(obj).unwrap();
        let types = obj.types.clone().unwrap();
        let (group, version) = types
            .api_version
            .split_once('/')
            .unwrap_or(("", &types.api_version));
        let gvk = kube::core::GroupVersionKind::gvk(group, version, &types.kind);
        let plural = match types.kind.as_str() {
            "StagedUpdateStrategy" => "stagedupdatestrategies".to_string(),
            k => format!("{}s", k.to_lowercase()),
        };
        let ar = ApiResource::from_gvk_with_plural(&gvk, &plural);
        self.cleanup.track_dynamic(
            "hub",
            &ar,
            obj.metadata.namespace.as_deref(),
            &obj.name_any(),
        );
        let api: Api<DynamicObject> = Api::all_with(self.hub.clone(), &ar);
        api.create(&PostParams::default(), &obj)
            .await
            .unwrap_or_else(|e| panic!("creating {obj:?}: {e}"));
    }

    /// A MemberCluster with `labels`, joined (as its agent would mark it); waits until the hub
    /// provisioned its namespace.
    pub async fn member(&self, role: &str, labels: Value) -> String {
        let name = self.cluster(role);
        // The hub provisions the namespace; it goes with the MemberCluster, waited for too.
        self.cleanup
            .track::<Namespace>("hub", None, &names::member_namespace(&name));
        self.create(
            json!({"apiVersion": "fleethub.dev/v1alpha1", "kind": "MemberCluster",
            "metadata": {"name": name, "labels": labels}, "spec": {}}),
        )
        .await;
        let joined = json!({"status": {"conditions": [{"type": "Joined", "status": "True", "reason": "Simulated",
            "message": "joined by the test's stand-in agent", "lastTransitionTime": jiff::Timestamp::now().to_string()}]}});
        Api::<fleethub_crds::MemberCluster>::all(self.hub.clone())
            .patch_status(&name, &PatchParams::default(), &Patch::Merge(&joined))
            .await
            .unwrap();
        let namespaces: Api<Namespace> = Api::all(self.hub.clone());
        wait_for(
            &namespaces,
            &names::member_namespace(&name),
            "the member's namespace",
            TIMEOUT,
            |n: Option<&Namespace>| n.is_some(),
        )
        .await
        .unwrap();
        name
    }

    /// The hub namespace whose content the placement rolls out.
    pub fn app_namespace(&self) -> String {
        format!("app-{}", self.id)
    }

    /// Sets the content: the app namespace holding ConfigMap `web` with `version`.
    pub async fn set_version(&self, version: &str) {
        let namespaces: Api<Namespace> = Api::all(self.hub.clone());
        self.cleanup
            .track::<Namespace>("hub", None, &self.app_namespace());
        let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": self.app_namespace()}});
        namespaces
            .patch(
                &self.app_namespace(),
                &PatchParams::apply("test").force(),
                &Patch::Apply(&ns),
            )
            .await
            .unwrap();
        let cms: Api<ConfigMap> = Api::namespaced(self.hub.clone(), &self.app_namespace());
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "web"}, "data": {"version": version}});
        cms.patch(
            "web",
            &PatchParams::apply("test").force(),
            &Patch::Apply(&cm),
        )
        .await
        .unwrap();
    }

    /// A placement of the app namespace on exactly `clusters`, rolled out by UpdateRuns (or by
    /// the hub itself when `rolling`); waits for its first snapshot and its bindings.
    pub async fn placement(&self, clusters: &[&String], rolling: bool) {
        self.set_version("1").await;
        self.create(json!({"apiVersion": "fleethub.dev/v1alpha1", "kind": "Placement",
            "metadata": {"name": self.placement},
            "spec": {"resourceSelectors": [{"group": "", "version": "v1", "kind": "Namespace", "name": self.app_namespace()}],
                     "policy": {"placementType": "PickFixed", "clusterNames": clusters},
                     "strategy": {"type": if rolling { "RollingUpdate" } else { "External" }}}}))
            .await;
        self.wait_snapshot(0).await;
        let bindings: Api<Binding> = Api::all(self.hub.clone());
        for c in clusters {
            wait_for(
                &bindings,
                &names::binding_name(&self.placement, c),
                "the cluster's Binding",
                TIMEOUT,
                |b: Option<&Binding>| b.is_some(),
            )
            .await
            .unwrap();
        }
    }

    /// Waits for the placement's snapshot `index`.
    pub async fn wait_snapshot(&self, index: u64) -> ResourceSnapshot {
        let snapshots: Api<ResourceSnapshot> = Api::all(self.hub.clone());
        wait_for(
            &snapshots,
            &names::resource_snapshot_name(&self.placement, index),
            "a resource snapshot",
            TIMEOUT,
            |s: Option<&ResourceSnapshot>| s.is_some(),
        )
        .await
        .unwrap()
    }

    /// Changes the placement's cluster list.
    pub async fn pick(&self, clusters: &[&String]) {
        let patch =
            json!({"spec": {"policy": {"placementType": "PickFixed", "clusterNames": clusters}}});
        Api::<fleethub_crds::Placement>::all(self.hub.clone())
            .patch(
                &self.placement,
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await
            .unwrap();
    }

    /// Creates Secret `name` in the hub's own namespace (where metric checks' credentials live)
    /// with `data`; deleted with the scenario.
    pub async fn hub_secret(&self, name: &str, data: &[(&str, &str)]) {
        let secrets: Api<Secret> = Api::namespaced(self.hub.clone(), HUB_NAMESPACE);
        self.cleanup
            .track::<Secret>("hub", Some(HUB_NAMESPACE), name);
        let secret = Secret {
            metadata: kube::api::ObjectMeta {
                name: Some(name.to_string()),
                ..Default::default()
            },
            string_data: Some(
                data.iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            ),
            ..Default::default()
        };
        secrets
            .create(&PostParams::default(), &secret)
            .await
            .unwrap_or_else(|e| panic!("writing Secret {name}: {e}"));
    }

    pub async fn strategy(&self, stages: Value) {
        self.create(
            json!({"apiVersion": "fleethub.dev/v1alpha1", "kind": "StagedUpdateStrategy",
            "metadata": {"name": self.strategy}, "spec": {"stages": stages}}),
        )
        .await;
    }

    pub async fn start_run(&self, index: i64) {
        self.create(
            json!({"apiVersion": "fleethub.dev/v1alpha1", "kind": "UpdateRun",
            "metadata": {"name": self.run},
            "spec": {"placementName": self.placement, "resourceSnapshotIndex": index.to_string(),
                     "stagedRolloutStrategyName": self.strategy}}),
        )
        .await;
    }
}

/// What the stand-in members saw: each cluster's first Work at the index, with when it came
/// and the Work generation.
pub type Updates = Arc<Mutex<Vec<(String, jiff::Timestamp, Option<i64>)>>>;

/// Stands in for the member agents of `placement`'s clusters: reports every new Work
/// generation at snapshot `index` applied and available, recording each cluster's first update.
pub fn simulate_members(
    client: Client,
    placement: String,
    index: i64,
) -> (Updates, tokio::task::JoinHandle<()>) {
    simulate_members_at(client, placement, Some(index))
}

/// [`simulate_members`] at snapshot `only`, or at every index when None.
pub fn simulate_members_at(
    client: Client,
    placement: String,
    only: Option<i64>,
) -> (Updates, tokio::task::JoinHandle<()>) {
    let updates: Updates = Arc::new(Mutex::new(Vec::new()));
    let seen = updates.clone();
    let task = tokio::spawn(async move {
        let works: Api<Work> = Api::all(client.clone());
        let cfg =
            watcher::Config::default().labels(&format!("{}={placement}", names::PLACEMENT_LABEL));
        let mut stream = watcher(works, cfg)
            .default_backoff()
            .applied_objects()
            .boxed();
        while let Some(next) = stream.next().await {
            let Ok(work) = next else { continue };
            let generation = work.metadata.generation;
            let reported = work
                .status
                .as_ref()
                .and_then(|s| find(&s.conditions, "Available"))
                .and_then(|c| c.observed_generation);
            if reported == generation
                || only.is_some_and(|i| work.spec.resource_snapshot_index != i)
            {
                continue;
            }
            let ns = work.namespace().unwrap();
            let cluster = names::cluster_of_namespace(&ns).unwrap().to_string();
            {
                let mut seen = seen.lock().unwrap();
                if !seen.iter().any(|(c, _, _)| *c == cluster) {
                    seen.push((cluster, jiff::Timestamp::now(), generation));
                }
            }
            // A Work deleted meanwhile: nothing to report.
            let _ = regressions::write_report(&client, &work, true, "reported by the test").await;
        }
    });
    (updates, task)
}

/// Starts the fleet's hub (after a kill) and waits until it leads (it takes its own lease back
/// at once).
pub async fn start_hub(fleet: &Fleet) {
    fleet.start_fleethub().unwrap();
    fleethub_testkit::poll_until("the restarted hub to lead", TIMEOUT, || async {
        let (_, metrics) = fleethub_testkit::http_get(fleet.hub_health_addr(), "/metrics")
            .await
            .ok()?;
        metrics
            .lines()
            .any(|l| l == "fleethub_hub_leader 1")
            .then_some(())
    })
    .await
    .unwrap();
}

/// Approves ApprovalRequest `name` as the dashboard does: condition `Approved=True` on its status.
pub async fn approve(
    api: &Api<ApprovalRequest>,
    name: &str,
) -> Result<ApprovalRequest, kube::Error> {
    let approval = fleethub_crds::approval::approve_patch("the test", "", jiff::Timestamp::now());
    api.patch_status(name, &PatchParams::default(), &Patch::Merge(&approval))
        .await
}

/// Whether the run has succeeded (a `wait_for` condition).
pub fn succeeded(run: Option<&UpdateRun>) -> bool {
    run.and_then(|r| r.status.as_ref())
        .is_some_and(|s| fleethub_crds::conditions::is_true(&s.conditions, "Succeeded"))
}

/// Whether the run has ended, succeeded or not (a `wait_for` condition).
pub fn ended(run: Option<&UpdateRun>) -> bool {
    run.and_then(|r| r.status.as_ref())
        .is_some_and(|s| find(&s.conditions, "Succeeded").is_some())
}

pub fn clusters_in_order(updates: &Updates) -> Vec<String> {
    updates
        .lock()
        .unwrap()
        .iter()
        .map(|(c, _, _)| c.clone())
        .collect()
}

pub fn kubectl(fleet: &Fleet, args: &[&str]) -> String {
    kubectl_on(fleet, "hub", args)
}

/// Runs the real kubectl against the fleet's cluster `cluster` (`hub`, `member-1`, …); asserts
/// it succeeded and returns stdout.
pub fn kubectl_on(fleet: &Fleet, cluster: &str, args: &[&str]) -> String {
    let out =
        std::process::Command::new(std::env::var("KUBECTL").unwrap_or_else(|_| "kubectl".into()))
            .arg("--kubeconfig")
            .arg(fleet.kubeconfig(cluster))
            .args(args)
            .output()
            .unwrap();
    assert!(
        out.status.success(),
        "kubectl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}
