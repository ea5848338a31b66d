//! The auto-update scenario: one AutoUpdatePolicy over `size` simulated members, its workload's
//! images in the fleet's real registry. It measures a version from its push to the registry to
//! done everywhere (checks every second, the bench's three stages without gates), and a broken
//! version (its Works reported not available) from its push to rolled back everywhere, with
//! the hub's CPU time and memory.

use std::time::{Duration, Instant};

use anyhow::Context as _;
use fleethub_crds::auto_update::{AutoUpdatePolicy, AutoUpdatePolicyStatus, VersionOutcome};
use fleethub_crds::{StagedUpdateStrategy, UpdateRun};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use serde_json::json;

use crate::report::Scenario;
use crate::sim::BENCH_LABEL;
use crate::{Bench, STRATEGY, objects};

/// The policy, its placement and the workload's namespace.
const NAME: &str = "bench-auto";
/// How long a simulated member may take to report a version available. A broken version fails
/// this long after its first cluster started; a good one must not miss it on a loaded machine
/// (at 10 s, a loaded run rolled the good version back).
const HEALTH_TIMEOUT: &str = "30s";

impl Bench {
    /// One policy over members 1..=`size`: a good version, then a broken one.
    pub(crate) async fn auto_update(&mut self, size: usize) -> anyhow::Result<()> {
        self.ensure_members(size).await?;
        let registry = self.fleet.registry()?;
        let repo = format!("{NAME}-{}", std::process::id());
        let image = |tag: &str| format!("{registry}/{repo}:{tag}");
        self.fleet.push_tags(&repo, &["1.0.0"])?;
        let result = self.auto_update_runs(size, &image).await;
        let cleaned = self.auto_update_clean_up(&repo).await;
        result.and(cleaned)
    }

    async fn auto_update_runs(
        &mut self,
        size: usize,
        image: &dyn Fn(&str) -> String,
    ) -> anyhow::Result<()> {
        let client = self.client.clone();
        let apply = PatchParams::apply(fleethub_crds::field_manager::BENCH).force();
        let meta = |name: &str| json!({"name": name, "labels": {BENCH_LABEL: "true"}});
        Api::<Namespace>::all(client.clone())
            .patch(
                NAME,
                &apply,
                &Patch::Apply(
                    json!({"apiVersion": "v1", "kind": "Namespace", "metadata": meta(NAME)}),
                ),
            )
            .await?;
        let deployment = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta("web"),
            "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}},
                     "template": {"metadata": {"labels": {"app": "web"}},
                                  "spec": {"containers": [{"name": "web", "image": image("1.0.0")}]}}}});
        Api::<Deployment>::namespaced(client.clone(), NAME)
            .patch("web", &apply, &Patch::Apply(&deployment))
            .await?;
        let clusters: Vec<String> = (1..=size).map(objects::member_name).collect();
        objects::create_placement(&client, NAME, NAME, &clusters).await?;
        objects::wait_placed(&client, NAME, 0, size, self.timeout).await?;
        let policy = json!({"apiVersion": "fleethub.dev/v1alpha1", "kind": "AutoUpdatePolicy", "metadata": meta(NAME),
            "spec": {"placementName": NAME,
                     "target": {"kind": "Deployment", "namespace": NAME, "name": "web", "container": "web"},
                     "schedule": "* * * * * *", "versionConstraint": ">=1.0.0, <2",
                     "stagedRolloutStrategyName": STRATEGY, "healthTimeout": HEALTH_TIMEOUT, "maxRollbacks": 3}});
        let policies: Api<AutoUpdatePolicy> = Api::all(client.clone());
        policies.patch(NAME, &apply, &Patch::Apply(&policy)).await?;
        self.wait_policy("the policy to adopt 1.0.0", |s| {
            s.current_version.as_deref() == Some("1.0.0")
        })
        .await?;

        self.samplers.reset().await;
        let pushed = Instant::now();
        self.fleet
            .push_tags(&repo_of(&image("1.1.0")), &["1.1.0"])?;
        let started = self
            .wait_policy("1.1.0 to start", |s| {
                s.in_flight.is_some() || s.current_version.as_deref() == Some("1.1.0")
            })
            .await?;
        let done = self
            .wait_policy("1.1.0 to roll out everywhere", |s| {
                s.current_version.as_deref() == Some("1.1.0") && s.in_flight.is_none()
            })
            .await?;
        // (wait_policy fails at once should 1.1.0 be rolled back instead.)
        let mut s = Scenario {
            name: format!("auto-update: a version, {size} members"),
            members: self.sim.members(),
            clusters: size,
            seconds: done.saturating_duration_since(pushed).as_secs_f64(),
            ..Default::default()
        };
        s.notes.push(format!(
            "pushed → run started {:.1} s; pushed → every cluster runs it {:.1} s (checks every second, 3 stages without gates)",
            started.saturating_duration_since(pushed).as_secs_f64(),
            done.saturating_duration_since(pushed).as_secs_f64()
        ));
        self.samplers.record(&mut s).await;
        self.report(s);

        self.samplers.reset().await;
        self.sim
            .unready()
            .lock()
            .map_err(|_| anyhow::anyhow!("the simulation's lock is poisoned"))?
            .insert(image("1.2.0"));
        let pushed = Instant::now();
        self.fleet
            .push_tags(&repo_of(&image("1.2.0")), &["1.2.0"])?;
        let failed = self
            .wait_policy("1.2.0 to fail", |s| {
                s.failed_versions.iter().any(|v| v == "1.2.0")
            })
            .await?;
        let back = self
            .wait_policy("1.2.0 to be rolled back everywhere", |s| {
                s.failed_versions.iter().any(|v| v == "1.2.0") && s.in_flight.is_none()
            })
            .await?;
        let status = policies.get(NAME).await?.status.unwrap_or_default();
        let rolled_back = status
            .history
            .iter()
            .any(|h| h.version == "1.2.0" && h.outcome == VersionOutcome::RolledBack);
        anyhow::ensure!(
            rolled_back,
            "1.2.0 is not recorded as rolled back: {:?}",
            status.history
        );
        let mut s = Scenario {
            name: format!("auto-update: a broken version rolled back, {size} members"),
            members: self.sim.members(),
            clusters: size,
            seconds: back.saturating_duration_since(pushed).as_secs_f64(),
            ..Default::default()
        };
        s.notes.push(format!(
            "pushed → run failed (health timeout {HEALTH_TIMEOUT} in stage 1) {:.1} s; failed → rolled back everywhere {:.1} s",
            failed.saturating_duration_since(pushed).as_secs_f64(),
            back.saturating_duration_since(failed).as_secs_f64()
        ));
        self.samplers.record(&mut s).await;
        self.report(s);
        Ok(())
    }

    /// Polls the policy's status (every 50 ms, within the scenario timeout) until `done`;
    /// returns when it first held.
    async fn wait_policy(
        &self,
        what: &str,
        done: impl Fn(&AutoUpdatePolicyStatus) -> bool,
    ) -> anyhow::Result<Instant> {
        let policies: Api<AutoUpdatePolicy> = Api::all(self.client.clone());
        let deadline = Instant::now() + self.timeout;
        loop {
            let status = policies
                .get_opt(NAME)
                .await?
                .and_then(|p| p.status)
                .unwrap_or_default();
            if done(&status) {
                return Ok(Instant::now());
            }
            anyhow::ensure!(
                !status.failed_versions.iter().any(|v| v == "1.1.0"),
                "the good version 1.1.0 was rolled back while waiting for {what}: {:?}",
                status.history.last()
            );
            anyhow::ensure!(
                Instant::now() < deadline,
                "waited {:?} for {what}; the policy's status: {status:?}",
                self.timeout
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    async fn auto_update_clean_up(&mut self, repo: &str) -> anyhow::Result<()> {
        if let Ok(mut u) = self.sim.unready().lock() {
            u.clear();
        }
        let client = self.client.clone();
        let gone = |r: Result<_, kube::Error>| match r {
            Ok(_) | Err(kube::Error::Api(_)) => Ok(()),
            Err(e) => Err(e),
        };
        gone(
            Api::<AutoUpdatePolicy>::all(client.clone())
                .delete(NAME, &DeleteParams::default())
                .await
                .map(|_| ()),
        )?;
        let runs: Api<UpdateRun> = Api::all(client.clone());
        let ours = ListParams::default().labels(&format!(
            "{}={NAME}",
            fleethub_crds::auto_update::POLICY_LABEL
        ));
        gone(
            runs.delete_collection(&DeleteParams::default(), &ours)
                .await
                .map(|_| ()),
        )?;
        gone(
            Api::<StagedUpdateStrategy>::all(client.clone())
                .delete(&format!("{NAME}-rollback"), &DeleteParams::default())
                .await
                .map(|_| ()),
        )?;
        gone(
            Api::<fleethub_crds::Placement>::all(client.clone())
                .delete(NAME, &DeleteParams::default())
                .await
                .map(|_| ()),
        )?;
        gone(
            Api::<Namespace>::all(client)
                .delete(NAME, &DeleteParams::background())
                .await
                .map(|_| ()),
        )?;
        self.fleet
            .delete_repository(repo)
            .context("deleting the bench's registry repository")?;
        Ok(())
    }
}

/// `registry/repo` of `registry/repo:tag`, without the registry: what `push-tag` takes.
fn repo_of(image: &str) -> String {
    let without_tag = image.rsplit_once(':').map_or(image, |(r, _)| r);
    without_tag
        .split_once('/')
        .map_or(without_tag, |(_, r)| r)
        .to_string()
}
