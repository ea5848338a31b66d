//! Set-up of the regression tests: a stand-in for the member agents that reports every Work
//! generation available, whatever its index, and the report an agent writes when its workload
//! stops (or starts again) being available.

use fleethub_crds::conditions::find;
use fleethub_crds::{UpdateRun, Work, names};
use fleethub_testkit::poll_until;
use kube::api::{Patch, PatchParams};
use kube::{Api, Client, ResourceExt};
use serde_json::json;

use fleethub_crds::update_run::reason;
use fleethub_testkit::{Fleet, wait_for};

use super::{Scenario, TIMEOUT};

/// What a member says of a workload that lost its replicas.
pub const LOST: &str = "deployment app/web: 0/2 replicas available";

/// Stands in for the member agents of `placement`: reports every new Work generation applied
/// and available, at whatever index it carries (a rollback's too).
pub fn report_every_generation(client: Client, placement: String) -> tokio::task::JoinHandle<()> {
    super::simulate_members_at(client, placement, None).1
}

/// Writes the Work's status as its member's agent would: applied, and available or not.
pub async fn report(client: &Client, work: &Work, available: bool, message: &str) {
    write_report(client, work, available, message)
        .await
        .unwrap();
}

/// [`report`], the API server's answer returned.
pub async fn write_report(
    client: &Client,
    work: &Work,
    available: bool,
    message: &str,
) -> Result<(), kube::Error> {
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
    .map(|_| ())
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

/// A run of a scenario's own placement over two clusters, `stg` (stage staging, then a TimedWait
/// of `soak`) and `prod` (stage production), held because `stg` regressed during its soak.
pub struct HeldRun {
    /// The scenario: its objects are deleted with it.
    pub s: Scenario,
    /// The staging cluster, regressed.
    pub stg: String,
    /// The production cluster, not updated.
    pub prod: String,
    /// `stg`'s Work, as reported when it regressed.
    pub work: Work,
    /// The stand-in members.
    pub members: tokio::task::JoinHandle<()>,
    /// The held run, as seen holding.
    pub held: UpdateRun,
}

impl HeldRun {
    /// Sets it up, waiting until the run holds.
    pub async fn new(fleet: &Fleet, prefix: &str, soak: &str) -> Self {
        let s = Scenario::new(fleet, prefix).await;
        let hub = s.hub.clone();
        let stg = s.member("stg", json!({"env": s.env("staging")})).await;
        let prod = s.member("prod", json!({"env": s.env("production")})).await;
        s.placement(&[&stg, &prod], false).await;
        s.strategy(json!([
            {"name": "staging", "labelSelector": {"matchLabels": {"env": s.env("staging")}},
             "afterStageTasks": [{"type": "TimedWait", "waitTime": soak}]},
            {"name": "production", "labelSelector": {"matchLabels": {"env": s.env("production")}}}]))
        .await;
        let members = report_every_generation(hub.clone(), s.placement.clone());
        s.start_run(0).await;
        let runs: Api<UpdateRun> = Api::all(hub.clone());
        let work = reported_work(&hub, &s.placement, &stg, 0).await;
        wait_for(
            &runs,
            &s.run,
            "the staging soak",
            TIMEOUT,
            |r: Option<&UpdateRun>| {
                progressing(r).is_some_and(|(why, _)| why == "UpdateRunWaiting")
            },
        )
        .await
        .unwrap();
        report(&hub, &work, false, LOST).await;
        let held = wait_for(
            &runs,
            &s.run,
            "the run to hold",
            TIMEOUT,
            |r: Option<&UpdateRun>| {
                progressing(r).is_some_and(|(why, _)| why == reason::CLUSTER_REGRESSED)
            },
        )
        .await
        .unwrap();
        HeldRun {
            s,
            stg,
            prod,
            work,
            members,
            held,
        }
    }
}
