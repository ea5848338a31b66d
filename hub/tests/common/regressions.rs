//! Set-up of the regression tests: a stand-in for the member agents that reports every Work
//! generation available, and the report an agent writes when its workload stops (or starts
//! again) being available.

use fleethub_crds::conditions::find;
use fleethub_crds::{UpdateRun, Work, names};
use fleethub_testkit::poll_until;
use futures::StreamExt;
use kube::api::{Patch, PatchParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use serde_json::json;

use super::TIMEOUT;

/// What a member says of a workload that lost its replicas.
pub const LOST: &str = "deployment app/web: 0/2 replicas available";

/// Reports every new Work generation of `placement` applied and available, at whatever index it
/// carries (a rollback's too).
pub fn report_every_generation(client: Client, placement: String) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
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
            if reported == generation {
                continue;
            }
            report(&client, &work, true, "reported by the test").await;
        }
    })
}

/// Writes the Work's status as its member's agent would: applied, and available or not.
pub async fn report(client: &Client, work: &Work, available: bool, message: &str) {
    let generation = work.metadata.generation;
    let index = work.spec.resource_snapshot_index;
    let now = jiff::Timestamp::now().to_string();
    let cond = |t: &str, ok: bool| {
        json!({"type": t, "status": if ok { "True" } else { "False" },
               "reason": if ok { "Simulated" } else { "WorkloadsNotReady" }, "message": message,
               "observedGeneration": generation, "lastTransitionTime": now})
    };
    let status = json!({"status": {"conditions": [cond("Applied", true), cond("Available", available)],
                                   "appliedResourceSnapshotIndex": index}});
    let api: Api<Work> = Api::namespaced(client.clone(), &work.namespace().unwrap());
    api.patch_status(
        &work.name_any(),
        &PatchParams::default(),
        &Patch::Merge(&status),
    )
    .await
    .unwrap();
}

/// The Work of `placement` on `cluster`, once it carries `index` and was reported available.
pub async fn reported_work(hub: &Client, placement: &str, cluster: &str, index: i64) -> Work {
    let works: Api<Work> = Api::namespaced(hub.clone(), &names::member_namespace(cluster));
    poll_until("the cluster's Work reported", TIMEOUT, || async {
        let list = works.list(&Default::default()).await.ok()?;
        list.items.into_iter().find(|w| {
            w.spec.placement_name == placement
                && w.spec.resource_snapshot_index == index
                && w.status.as_ref().is_some_and(|s| {
                    find(&s.conditions, "Available").is_some_and(|c| {
                        c.status == "True" && c.observed_generation == w.metadata.generation
                    })
                })
        })
    })
    .await
    .unwrap()
}

pub fn progressing(run: Option<&UpdateRun>) -> Option<(String, String)> {
    let c = find(&run?.status.as_ref()?.conditions, "Progressing")?;
    Some((c.reason.clone(), c.message.clone()))
}

pub fn cluster_condition(run: &UpdateRun, cluster: &str, type_: &str) -> Option<(String, String)> {
    run.status
        .as_ref()?
        .stages_status
        .iter()
        .flat_map(|s| &s.clusters)
        .find(|c| c.cluster_name == cluster)
        .and_then(|c| find(&c.conditions, type_))
        .map(|c| (c.status.clone(), c.reason.clone()))
}
