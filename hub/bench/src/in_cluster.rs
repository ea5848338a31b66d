//! Scenarios on the fleet's in-cluster fleet (`FLEET_REAL_MEMBERS` > 0): fleethub installed from
//! `deploy/` as pods on `real-hub`, agents as pods on `real-1` … `real-N`, the demo app's real
//! pods on real nodes.
//!
//! - **Image pushed → pods Ready.** An AutoUpdatePolicy (checks every second) over a placement
//!   of the demo app on every real member, one stage per member and no gates. Each sample pushes
//!   a new version tag to the fleet's registry (skopeo, as a release pipeline does) and times
//!   from the push's end to both of the Deployment's replicas on a member running it Ready.
//! - **Leader pod deleted → progressing.** The pod holding the hub's Lease is deleted and an
//!   UpdateRun is created at once: the times to another pod holding the Lease and to the run's
//!   first status (the new leader started it).

use std::time::{Duration, Instant};

use anyhow::Context as _;
use fleethub_crds::auto_update::AutoUpdatePolicy;
use fleethub_crds::{Placement, StagedUpdateStrategy, UpdateRun};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{Api, DeleteParams, ListParams};
use kube::{Client, ResourceExt};
use serde_json::json;

use crate::Bench;
use crate::objects::{self, apply, meta};
use crate::report::Scenario;
use crate::stats::summarize;
use fleethub_testkit::demo_deployment;

/// The placement, its namespace, strategy and policy on real-hub.
const NAME: &str = "bench-in-cluster";
/// The hub's leader-election Lease (`deploy/hub`).
const LEASE: (&str, &str) = ("fleethub-system", "fleethub-hub");
/// How often the scenario looks at the pods and the Lease.
const POLL: Duration = Duration::from_millis(20);

impl Bench {
    /// `pushes` image pushes, then `kills` leader pod deletions, on the in-cluster fleet.
    pub(crate) async fn in_cluster(&mut self, pushes: usize, kills: usize) -> anyhow::Result<()> {
        let members = self.fleet.real_member_count();
        anyhow::ensure!(
            members > 0,
            "this fleet has no in-cluster fleet (start it with FLEET_REAL_MEMBERS > 0)"
        );
        let hub = self.fleet.real_hub().await?;
        let registry = self.fleet.registry()?;
        let repo = format!("{registry}/{NAME}-{}", std::process::id());
        let result = async {
            self.in_cluster_setup(&hub, &repo, members).await?;
            if pushes > 0 {
                self.image_pushes(&repo, members, pushes).await?;
            }
            // The policy would start runs of its own; the kills use runs of their own.
            delete(&Api::<AutoUpdatePolicy>::all(hub.clone()), NAME).await?;
            if kills > 0 {
                self.leader_kills(&hub, kills).await?;
            }
            anyhow::Ok(())
        }
        .await;
        let cleaned = self.in_cluster_clean_up(&hub, &repo).await;
        result.and(cleaned)
    }

    async fn in_cluster_setup(
        &self,
        hub: &Client,
        repo: &str,
        members: usize,
    ) -> anyhow::Result<()> {
        copy_image(&self.fleet.demo_image("1.0.0")?, &format!("{repo}:1.0.0"))?;
        let namespace = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": meta(NAME)});
        apply(&Api::<Namespace>::all(hub.clone()), NAME, &namespace).await?;
        let deployment = demo_deployment(&format!("{repo}:1.0.0"));
        apply(
            &Api::<Deployment>::namespaced(hub.clone(), NAME),
            "demo",
            &deployment,
        )
        .await?;
        let stages: Vec<_> = (1..=members)
            .map(|i| json!({"name": format!("real-{i}"), "labelSelector": {"matchLabels": {"order": i.to_string()}}}))
            .collect();
        let strategy = json!({"apiVersion": "fleethub.dev/v1alpha1", "kind": "StagedUpdateStrategy",
            "metadata": meta(NAME), "spec": {"stages": stages}});
        apply(
            &Api::<StagedUpdateStrategy>::all(hub.clone()),
            NAME,
            &strategy,
        )
        .await?;
        let clusters: Vec<String> = (1..=members).map(|i| format!("real-{i}")).collect();
        objects::create_placement(hub, NAME, NAME, &clusters).await?;
        // The hub runs in a pod: it lists the tags where pods reach the registry.
        let repository = format!(
            "{}/{}",
            self.fleet.registry_for_pods()?,
            repo.rsplit('/').next().unwrap_or(repo)
        );
        let policy = json!({"apiVersion": "fleethub.dev/v1alpha1", "kind": "AutoUpdatePolicy", "metadata": meta(NAME),
            "spec": {"placementName": NAME, "repository": repository,
                     "target": {"kind": "Deployment", "namespace": NAME, "name": "demo", "container": "demo"},
                     "schedule": "* * * * * *", "versionConstraint": ">=1.0.0, <2",
                     "stagedRolloutStrategyName": NAME, "healthTimeout": "120s"}});
        apply(&Api::<AutoUpdatePolicy>::all(hub.clone()), NAME, &policy).await?;
        Ok(())
    }

    /// Pushes `{repo}:1.0.<k>` and times each member's pods Ready with it; the first push (the
    /// pods' creation, not an update) is not counted.
    async fn image_pushes(
        &mut self,
        repo: &str,
        members: usize,
        pushes: usize,
    ) -> anyhow::Result<()> {
        let mut clients = Vec::new();
        for i in 1..=members {
            clients.push(self.fleet.real_member(i).await?);
        }
        let mut first = Vec::new();
        let mut last = Vec::new();
        let mut pushing = Vec::new();
        let started = Instant::now();
        for k in 0..=pushes {
            // Alternate the two good releases' content, so each version is a new digest for
            // the running pods (their layers are on the node after the first pull).
            let content = if k % 2 == 0 { "1.1.0" } else { "1.0.0" };
            let image = format!("{repo}:1.0.{}", k + 1);
            let push_started = Instant::now();
            copy_image(&self.fleet.demo_image(content)?, &image)?;
            let pushed = Instant::now();
            let mut ready = Vec::new();
            for member in &clients {
                ready.push(self.wait_pods_ready(member, &image).await?);
            }
            eprintln!(
                "[bench] pushed {image} in {:.0} ms; pods Ready on real-1..{members} after {:?} ms",
                pushed.duration_since(push_started).as_secs_f64() * 1000.0,
                ready
                    .iter()
                    .map(|r| r.duration_since(pushed).as_millis())
                    .collect::<Vec<_>>()
            );
            if k == 0 {
                continue;
            }
            pushing.push(pushed.duration_since(push_started));
            first.push(ready[0].duration_since(pushed));
            last.push(ready[members - 1].duration_since(pushed));
        }
        let mut s = Scenario {
            name: format!("in-cluster: image pushed → pods Ready, {members} real members"),
            clusters: pushes * members,
            seconds: started.elapsed().as_secs_f64(),
            special: Some((
                format!("pushed → both pods Ready on the last member (real-{members})"),
                summarize(&last),
            )),
            ..Default::default()
        };
        let p = summarize(&first);
        let push = summarize(&pushing);
        s.notes.push(format!(
            "pushed → both pods Ready on real-1 (stage 1) p50 {:.0} ms, p99 {:.0} ms; the push itself (skopeo copy) p50 {:.0} ms; the policy checks every second, one stage per member, no gates, readiness probe every second",
            p.p50_ms, p.p99_ms, push.p50_ms
        ));
        self.report(s);
        Ok(())
    }

    /// Waits until both of the demo Deployment's pods on `member` run `image` and are Ready.
    async fn wait_pods_ready(&self, member: &Client, image: &str) -> anyhow::Result<Instant> {
        let pods: Api<Pod> = Api::namespaced(member.clone(), NAME);
        let deadline = Instant::now() + self.timeout;
        loop {
            let list = pods.list(&ListParams::default().labels("app=demo")).await?;
            let ready = list
                .items
                .iter()
                .filter(|p| {
                    p.spec.as_ref().is_some_and(|s| {
                        s.containers
                            .iter()
                            .any(|c| c.image.as_deref() == Some(image))
                    })
                })
                .filter(|p| live_and_ready(p))
                .count();
            if ready >= 2 {
                return Ok(Instant::now());
            }
            anyhow::ensure!(
                Instant::now() < deadline,
                "waited {:?} for two Ready pods of {image} on a real member",
                self.timeout
            );
            tokio::time::sleep(POLL).await;
        }
    }

    /// Deletes the leading hub pod `kills` times, each time creating an UpdateRun right after.
    async fn leader_kills(&mut self, hub: &Client, kills: usize) -> anyhow::Result<()> {
        let leases: Api<Lease> = Api::namespaced(hub.clone(), LEASE.0);
        let pods: Api<Pod> = Api::namespaced(hub.clone(), LEASE.0);
        let runs: Api<UpdateRun> = Api::all(hub.clone());
        let placements: Api<Placement> = Api::all(hub.clone());
        let mut handover = Vec::new();
        let mut progressing = Vec::new();
        let started = Instant::now();
        for k in 1..=kills {
            // Both replicas Ready again (the Deployment replaced the last deleted pod), and one
            // holds the Lease.
            let leader = self.wait_hub_ready(&leases, &pods).await?;
            let index = placements
                .get(NAME)
                .await?
                .status
                .and_then(|s| s.latest_resource_snapshot_index)
                .context("the placement has no snapshot")?;
            pods.delete(&leader, &DeleteParams::default()).await?;
            let deleted = Instant::now();
            let run = format!("{NAME}-kill-{k}");
            objects::create_run(hub, &run, NAME, index, NAME).await?;
            let mut took_over = None;
            let deadline = deleted + self.timeout;
            let started_run = loop {
                if took_over.is_none() {
                    let holder = leases
                        .get(LEASE.1)
                        .await?
                        .spec
                        .and_then(|s| s.holder_identity);
                    if holder
                        .as_deref()
                        .is_some_and(|h| !h.is_empty() && h != leader)
                    {
                        took_over = Some(Instant::now());
                    }
                }
                let status = runs.get(&run).await?.status;
                if status.is_some_and(|s| !s.conditions.is_empty()) {
                    break Instant::now();
                }
                anyhow::ensure!(
                    Instant::now() < deadline,
                    "run {run} did not start after leader {leader} was deleted"
                );
                tokio::time::sleep(POLL).await;
            };
            let took_over = took_over.unwrap_or(started_run);
            eprintln!(
                "[bench] leader {leader} deleted: another pod leads after {} ms, run {run} started after {} ms",
                took_over.duration_since(deleted).as_millis(),
                started_run.duration_since(deleted).as_millis()
            );
            handover.push(took_over.duration_since(deleted));
            progressing.push(started_run.duration_since(deleted));
            delete(&runs, &run).await?;
        }
        let mut s = Scenario {
            name: format!("in-cluster: hub leader pod deleted, {kills} times"),
            seconds: started.elapsed().as_secs_f64(),
            special: Some((
                "leader pod deleted → a run created then has its first status".into(),
                summarize(&progressing),
            )),
            ..Default::default()
        };
        let h = summarize(&handover);
        s.notes.push(format!(
            "leader pod deleted → another pod holds the Lease: p50 {:.0} ms, p99 {:.0} ms, max {:.0} ms",
            h.p50_ms, h.p99_ms, h.max_ms
        ));
        self.report(s);
        Ok(())
    }

    /// Waits until two hub pods are Ready and one of them holds the Lease; returns the holder.
    async fn wait_hub_ready(&self, leases: &Api<Lease>, pods: &Api<Pod>) -> anyhow::Result<String> {
        let deadline = Instant::now() + self.timeout;
        loop {
            let ready: Vec<String> = pods
                .list(&ListParams::default().labels("app.kubernetes.io/name=fleethub-hub"))
                .await?
                .items
                .into_iter()
                .filter(live_and_ready)
                .map(|p| p.name_any())
                .collect();
            let holder = leases
                .get(LEASE.1)
                .await?
                .spec
                .and_then(|s| s.holder_identity);
            if ready.len() >= 2 && holder.as_ref().is_some_and(|h| ready.contains(h)) {
                return Ok(holder.unwrap_or_default());
            }
            anyhow::ensure!(
                Instant::now() < deadline,
                "the in-cluster hub did not get two Ready pods and a leader"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    async fn in_cluster_clean_up(&self, hub: &Client, repo: &str) -> anyhow::Result<()> {
        delete(&Api::<AutoUpdatePolicy>::all(hub.clone()), NAME).await?;
        let cleaned =
            objects::clean_up(hub, Duration::from_secs(self.args.cleanup_timeout_seconds)).await;
        let repository = repo.rsplit('/').next().unwrap_or(repo);
        let deleted = self
            .fleet
            .delete_repository(repository)
            .map_err(anyhow::Error::from);
        cleaned.map(|_| ()).and(deleted)
    }
}

/// Whether pod `p` is not being deleted and is Ready.
fn live_and_ready(p: &Pod) -> bool {
    p.metadata.deletion_timestamp.is_none()
        && p.status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// Copies image `from` to `to` in the fleet's plain-HTTP registry with skopeo.
fn copy_image(from: &str, to: &str) -> anyhow::Result<()> {
    let from = from.split('@').next().unwrap_or(from);
    let out = std::process::Command::new("skopeo")
        .args([
            "copy",
            "--quiet",
            "--src-tls-verify=false",
            "--dest-tls-verify=false",
        ])
        .arg(format!("docker://{from}"))
        .arg(format!("docker://{to}"))
        .output()
        .context("running skopeo (deploy/local/fleet installs it)")?;
    anyhow::ensure!(
        out.status.success(),
        "skopeo copy {from} {to}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
}

/// Deletes `name`; gone already is fine.
async fn delete<K>(api: &Api<K>, name: &str) -> anyhow::Result<()>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    match api.delete(name, &DeleteParams::default()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(e) => Err(e.into()),
    }
}
