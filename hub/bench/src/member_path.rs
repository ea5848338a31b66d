//! The member path, with the fleet's real members and their real agents (member-1..3: each its
//! own API server, controller manager and kwok nodes): how soon a change of a hub object reaches
//! the members, how soon a workload that turned available is reported (and the agents' own
//! requests per reconcile), how soon drift is restored, how soon it is reported under
//! `IfNotDrifted` and how soon an approval reaches the next stage's member
//! ([`member_path_strategies`](crate::member_path_strategies)), what a one-object change in a
//! 500-object Work costs the member's API server, and 200 Works changed at once on one member
//! (with the agent's CPU time and memory).
//!
//! Timestamps come from this process's watches of the hub's Works and of the members' objects,
//! so each figure includes one watch delivery at each end.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use fleethub_crds::{Placement, Work, names};
use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{DeleteParams, Patch, PatchParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use serde_json::{Value, json};

use crate::Bench;
use crate::process::Sampler;
use crate::report::Scenario;
use crate::sim::BENCH_LABEL;
use crate::stats::summarize;

/// Prefix of every namespace and placement of this scenario.
pub(crate) const PREFIX: &str = "bench-mp";
/// Objects in the large Work.
const LARGE: usize = 500;
/// Works changed at once on one member.
const BURST: usize = 200;

/// First-seen times of `(key, value)`.
pub(crate) type Seen = Arc<Mutex<BTreeMap<(String, String), Instant>>>;

fn first_seen(seen: &Seen, key: &str, value: &str) {
    if let Ok(mut s) = seen.lock() {
        s.entry((key.to_string(), value.to_string()))
            .or_insert_with(Instant::now);
    }
}

pub(crate) fn seen_at(seen: &Seen, key: &str, value: &str) -> Option<Instant> {
    seen.lock()
        .ok()?
        .get(&(key.to_string(), value.to_string()))
        .copied()
}

/// Watches the objects of `api` (all namespaces of a client, or one) that match `labels` in the
/// background, recording for each object the first time `value` returns each value, keyed by
/// `namespace/name`. The bench's own objects carry [`BENCH_LABEL`]; the Works the hub writes for
/// them carry their placement's label instead.
pub(crate) fn record<K>(
    api: Api<K>,
    labels: String,
    seen: Seen,
    value: impl Fn(&K) -> Option<String> + Send + 'static,
) where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone,
{
    tokio::spawn(async move {
        let config = watcher::Config::default().labels(&labels);
        let mut events = watcher(api, config).applied_objects().boxed();
        while let Some(event) = events.next().await {
            if let Ok(o) = event
                && let Some(v) = value(&o)
            {
                let key = format!("{}/{}", o.namespace().unwrap_or_default(), o.name_any());
                first_seen(&seen, &key, &v);
            }
        }
    });
}

/// The value of `data.v` of the ConfigMap manifest of a Work named `name` (all ConfigMaps of a
/// large Work are `c-N`; the one that changes is `c-0`).
fn work_value(w: &Work) -> Option<String> {
    let m = w
        .spec
        .workload
        .manifests
        .iter()
        .find(|m| m["kind"] == "ConfigMap" && m["metadata"]["name"] == "c-0")?;
    Some(m["data"]["v"].as_str()?.to_string())
}

/// The image of a Work's Deployment whose member reported it available (the Work's
/// `Available=True` for its current generation).
fn work_available_image(w: &Work) -> Option<String> {
    let status = w.status.as_ref()?;
    let available = fleethub_crds::conditions::find(&status.conditions, "Available")?;
    if available.status != "True" || available.observed_generation != w.metadata.generation {
        return None;
    }
    let d = w
        .spec
        .workload
        .manifests
        .iter()
        .find(|m| m["kind"] == "Deployment")?;
    Some(
        d["spec"]["template"]["spec"]["containers"][0]["image"]
            .as_str()?
            .to_string(),
    )
}

fn deployment_available_image(d: &Deployment) -> Option<String> {
    let spec = d.spec.as_ref()?;
    let status = d.status.as_ref()?;
    let want = spec.replicas.unwrap_or(1);
    let done = status.observed_generation == d.metadata.generation
        && status.updated_replicas == Some(want)
        && status.available_replicas == Some(want)
        && status.replicas == Some(want);
    done.then(|| {
        spec.template
            .spec
            .as_ref()?
            .containers
            .first()?
            .image
            .clone()
    })
    .flatten()
}

/// The selector of the Works the hub writes for placement `name`.
pub(crate) fn placement_label(name: &str) -> String {
    format!("{}={name}", names::PLACEMENT_LABEL)
}

pub(crate) fn meta(name: &str, namespace: Option<&str>) -> Value {
    let mut m = json!({"name": name, "labels": {BENCH_LABEL: "true"}});
    if let Some(ns) = namespace {
        m["namespace"] = json!(ns);
    }
    m
}

impl Bench {
    /// Every member-path figure over the fleet's real members, then clean-up.
    pub(crate) async fn member_path(&mut self, iterations: usize) -> anyhow::Result<()> {
        let result = self.member_path_runs(iterations).await;
        let strategies = self.member_path_strategies_clean_up().await;
        let cleaned = self.member_path_clean_up().await;
        result.and(strategies).and(cleaned)
    }

    async fn member_path_runs(&mut self, iterations: usize) -> anyhow::Result<()> {
        let members = self.fleet.member_count().min(3);
        anyhow::ensure!(
            members > 0,
            "the member path needs the fleet's real members"
        );
        let mut member_clients = Vec::new();
        for i in 1..=members {
            member_clients.push(self.fleet.member(i).await?);
        }
        let clusters: Vec<String> = (1..=members).map(|i| format!("member-{i}")).collect();
        let hub = self.client.clone();
        let apply = PatchParams::apply(fleethub_crds::field_manager::BENCH).force();
        let ns = PREFIX.to_string();

        // The content: a ConfigMap and a Deployment, placed on every real member at once.
        self.content(&ns, 1, "0", "registry.invalid/web:0").await?;
        rolling_placement(&hub, &ns, &clusters).await?;

        let written: Seen = Arc::default();
        let reported: Seen = Arc::default();
        for c in &clusters {
            let works: Api<Work> = Api::namespaced(hub.clone(), &names::member_namespace(c));
            let (w, r) = (written.clone(), reported.clone());
            record(
                works.clone(),
                placement_label(PREFIX),
                w,
                move |w: &Work| {
                    (w.name_any() == names::work_name(PREFIX))
                        .then(|| work_value(w))
                        .flatten()
                },
            );
            record(works, placement_label(PREFIX), r, move |w: &Work| {
                (w.name_any() == names::work_name(PREFIX))
                    .then(|| work_available_image(w))
                    .flatten()
            });
        }
        let arrived: Seen = Arc::default();
        let available: Seen = Arc::default();
        for (i, member) in member_clients.iter().enumerate() {
            let cluster = clusters[i].clone();
            let cms: Api<ConfigMap> = Api::namespaced(member.clone(), &ns);
            let c = cluster.clone();
            record(
                cms,
                BENCH_LABEL.into(),
                arrived.clone(),
                move |cm: &ConfigMap| {
                    let v = cm.data.as_ref()?.get("v")?.clone();
                    Some(format!("{c}={v}"))
                },
            );
            let deployments: Api<Deployment> = Api::namespaced(member.clone(), &ns);
            record(
                deployments,
                BENCH_LABEL.into(),
                available.clone(),
                move |d: &Deployment| Some(format!("{cluster}={}", deployment_available_image(d)?)),
            );
        }
        let key = |c: &str| {
            format!(
                "{}/{}",
                names::member_namespace(c),
                names::work_name(PREFIX)
            )
        };
        let member_key = format!("{ns}/c-0");
        let timeout = self.timeout;
        let wait = move |what: String, done: Box<dyn Fn() -> bool + Send>| async move {
            let deadline = Instant::now() + timeout;
            while !done() {
                anyhow::ensure!(Instant::now() < deadline, "{what}: not within {timeout:?}");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Ok::<(), anyhow::Error>(())
        };
        let all_arrived = |v: String| {
            let (arrived, clusters, member_key) =
                (arrived.clone(), clusters.clone(), member_key.clone());
            Box::new(move || {
                clusters
                    .iter()
                    .all(|c| seen_at(&arrived, &member_key, &format!("{c}={v}")).is_some())
            }) as Box<dyn Fn() -> bool + Send>
        };
        wait(
            "the content on every member".into(),
            all_arrived("0".into()),
        )
        .await?;

        // 1. Hub Work written → object on the member.
        let start = Instant::now();
        let mut delivery = Vec::new();
        for i in 1..=iterations {
            let v = i.to_string();
            set_value(&hub, &ns, "c-0", &v).await?;
            wait(format!("value {v} on every member"), all_arrived(v.clone())).await?;
            for c in &clusters {
                let (Some(w), Some(a)) = (
                    seen_at(&written, &key(c), &v),
                    seen_at(&arrived, &member_key, &format!("{c}={v}")),
                ) else {
                    continue;
                };
                delivery.push(a.saturating_duration_since(w));
            }
        }
        self.report(Scenario {
            name: format!("member path: {iterations} changes × {members} real members"),
            members,
            seconds: start.elapsed().as_secs_f64(),
            special: Some((
                "hub Work written → object on the member".into(),
                summarize(&delivery),
            )),
            ..Default::default()
        });

        // 2. Workload available on the member → the Work says so.
        let start = Instant::now();
        // Wall-clock times of the slowest samples, to find them in the agents' logs.
        let wall = |at: Instant| {
            jiff::Timestamp::now()
                - jiff::SignedDuration::try_from(Instant::now().saturating_duration_since(at))
                    .unwrap_or_default()
        };
        let mut noticed = Vec::new();
        let mut slowest: Vec<(Duration, String)> = Vec::new();
        let rounds = iterations.clamp(1, 20);
        let requests_before = self.agent_requests(members).await?;
        for i in 1..=rounds {
            let image = format!("registry.invalid/web:{i}");
            self.content(&ns, 1, &iterations.to_string(), &image)
                .await?;
            let reported_all = {
                let (reported, clusters, image) =
                    (reported.clone(), clusters.clone(), image.clone());
                Box::new(move || {
                    clusters
                        .iter()
                        .all(|c| seen_at(&reported, &key(c), &image).is_some())
                }) as Box<dyn Fn() -> bool + Send>
            };
            wait(format!("{image} reported available"), reported_all).await?;
            for c in &clusters {
                let member_deploy = format!("{ns}/web");
                let (Some(avail), Some(rep)) = (
                    seen_at(&available, &member_deploy, &format!("{c}={image}")),
                    seen_at(&reported, &key(c), &image),
                ) else {
                    continue;
                };
                let took = rep.saturating_duration_since(avail);
                noticed.push(took);
                slowest.push((
                    took,
                    format!("{c} rollout {i} (available at {})", wall(avail)),
                ));
            }
        }
        slowest.sort_by_key(|s| std::cmp::Reverse(s.0));
        let slowest: Vec<String> = slowest
            .iter()
            .take(3)
            .map(|(d, what)| format!("{} ms: {what}", d.as_millis()))
            .collect();
        let requests_after = self.agent_requests(members).await?;
        let delta = |k: &str| {
            requests_after.get(k).copied().unwrap_or(0.0)
                - requests_before.get(k).copied().unwrap_or(0.0)
        };
        let reconciles = delta("reconciles");
        let per = |k: &str| {
            format!(
                "{k} {:.0} ({:.2}/reconcile)",
                delta(k),
                delta(k) / reconciles.max(1.0)
            )
        };
        self.report(Scenario {
            name: format!("member path: {rounds} rollouts × {members} real members"),
            members,
            seconds: start.elapsed().as_secs_f64(),
            special: Some((
                "Deployment available on the member → Work Available=True".into(),
                summarize(&noticed),
            )),
            notes: vec![
                format!(
                    "the agents' own requests over {reconciles:.0} reconciles: {}, {}, {}, {} (refused: {})",
                    per("read-work"),
                    per("apply-applied-work"),
                    per("write-applied-work-status"),
                    per("write-work-status"),
                    per("work-status-refused"),
                ),
                format!("slowest: {}", slowest.join("; ")),
            ],
            ..Default::default()
        });

        // 3. Drift on member-1: a ConfigMap edited, a Deployment scaled, a ConfigMap deleted (by
        // "kubectl": the agent treats kubectl's field managers as a person's edit).
        let member = member_clients[0].clone();
        let cms: Api<ConfigMap> = Api::namespaced(member.clone(), &ns);
        let deployments: Api<Deployment> = Api::namespaced(member.clone(), &ns);
        let hub_value = iterations.to_string();
        let edit = PatchParams {
            field_manager: Some("kubectl-edit".into()),
            ..Default::default()
        };
        let (mut cm_restored, mut scaled_restored, mut deleted_restored) =
            (Vec::new(), Vec::new(), Vec::new());
        let start = Instant::now();
        for i in 1..=rounds {
            let drifted = format!("drift-{i}");
            let sent = Instant::now();
            cms.patch("c-0", &edit, &Patch::Merge(json!({"data": {"v": drifted}})))
                .await?;
            let restored = self
                .restored(
                    &arrived,
                    &member_key,
                    &format!("{}={hub_value}", clusters[0]),
                    sent,
                )
                .await?;
            cm_restored.push(restored);

            let sent = Instant::now();
            deployments
                .patch(
                    "web",
                    &edit,
                    &Patch::Merge(json!({"spec": {"replicas": 3}})),
                )
                .await?;
            scaled_restored.push(wait_replicas(&deployments, 1, sent, self.timeout).await?);

            let sent = Instant::now();
            cms.delete("c-0", &DeleteParams::default()).await?;
            let restored = self
                .restored(
                    &arrived,
                    &member_key,
                    &format!("{}={hub_value}", clusters[0]),
                    sent,
                )
                .await?;
            deleted_restored.push(restored);
        }
        for (what, samples) in [
            ("ConfigMap edited on the member → restored", cm_restored),
            (
                "Deployment scaled on the member → restored",
                scaled_restored,
            ),
            (
                "ConfigMap deleted on the member → recreated",
                deleted_restored,
            ),
        ] {
            self.report(Scenario {
                name: format!("member path: drift ×{rounds}"),
                members: 1,
                seconds: start.elapsed().as_secs_f64(),
                special: Some((what.into(), summarize(&samples))),
                ..Default::default()
            });
        }

        // 4. whenToApply: IfNotDrifted on member-1: an edit → reported in the Work's status.
        self.member_path_if_not_drifted(rounds, &member_clients[0])
            .await?;

        // 5. Approval → the object on the next stage's first member (member-1, then member-2).
        if members >= 2 {
            self.member_path_approvals(iterations, &member_clients[1])
                .await?;
        }

        // 6. One object changed in a 500-object Work: the member API calls it costs.
        let large = format!("{PREFIX}-large");
        let mut objects: Vec<Value> = (1..LARGE)
            .map(|i| {
                json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta(&format!("c-{i}"), Some(&large)),
                       "data": {"v": "0"}})
            })
            .collect();
        self.content(&large, 0, "0", "").await?;
        for o in objects.drain(..) {
            let name = o["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            Api::<ConfigMap>::namespaced(hub.clone(), &large)
                .patch(&name, &apply, &Patch::Apply(&o))
                .await?;
        }
        rolling_placement(&hub, &large, &clusters[..1]).await?;
        let member_large: Api<ConfigMap> = Api::namespaced(member.clone(), &large);
        wait_count(&member_large, LARGE, self.timeout).await?;
        let large_work = (
            names::member_namespace(&clusters[0]),
            names::work_name(&large),
        );
        // Settled: the Work reports its generation applied, and then the agent's counters
        // (manifest applies and reads, reconciles) rest over three readings 200 ms apart.
        self.wait_work_applied(&large_work.0, &large_work.1).await?;
        let before = self.agent_calls_settled(1).await?;
        let start = Instant::now();
        set_value(&hub, &large, "c-0", "1").await?;
        let changed = wait_value(&member_large, "c-0", "1", self.timeout).await?;
        self.wait_work_applied(&large_work.0, &large_work.1).await?;
        let after = self.agent_calls_settled(1).await?;
        self.report(Scenario {
            name: format!("member path: one object changed in a {LARGE}-object Work"),
            members: 1,
            seconds: changed.saturating_duration_since(start).as_secs_f64(),
            notes: vec![format!(
                "member API calls (applies + reads) for the change: {}",
                after - before
            )],
            ..Default::default()
        });

        // 7. 200 Works changed at once on member-1.
        let agent = Sampler::start(self.fleet.dir(), "member-1-agent");
        for b in 0..BURST {
            let ns = format!("{PREFIX}-b{b:03}");
            self.content(&ns, 0, "0", "").await?;
            rolling_placement(&hub, &ns, &clusters[..1]).await?;
        }
        let burst_written: Seen = Arc::default();
        let burst_arrived: Seen = Arc::default();
        record(
            Api::<Work>::namespaced(hub.clone(), &names::member_namespace(&clusters[0])),
            names::PLACEMENT_LABEL.to_string(),
            burst_written.clone(),
            work_value,
        );
        record(
            Api::<ConfigMap>::all(member.clone()),
            BENCH_LABEL.into(),
            burst_arrived.clone(),
            |cm: &ConfigMap| cm.data.as_ref()?.get("v").cloned(),
        );
        let burst_done = |v: &'static str| {
            let arrived = burst_arrived.clone();
            Box::new(move || {
                (0..BURST).all(|b| seen_at(&arrived, &format!("{PREFIX}-b{b:03}/c-0"), v).is_some())
            }) as Box<dyn Fn() -> bool + Send>
        };
        wait(format!("{BURST} Works on member-1"), burst_done("0")).await?;
        agent.reset();
        let start = Instant::now();
        let writes = (0..BURST).map(|b| {
            let hub = hub.clone();
            async move { set_value(&hub, &format!("{PREFIX}-b{b:03}"), "c-0", "1").await }
        });
        for r in futures::future::join_all(writes).await {
            r?;
        }
        wait(format!("{BURST} changes on member-1"), burst_done("1")).await?;
        let seconds = start.elapsed().as_secs_f64();
        let burst: Vec<Duration> = (0..BURST)
            .filter_map(|b| {
                let ns = format!("{PREFIX}-b{b:03}");
                let w = seen_at(
                    &burst_written,
                    &format!(
                        "{}/{}",
                        names::member_namespace(&clusters[0]),
                        names::work_name(&ns)
                    ),
                    "1",
                )?;
                let a = seen_at(&burst_arrived, &format!("{ns}/c-0"), "1")?;
                Some(a.saturating_duration_since(w))
            })
            .collect();
        let usage = agent.usage();
        self.report(Scenario {
            name: format!("member path: {BURST} Works changed at once on one member"),
            members: 1,
            clusters: BURST,
            seconds,
            special: Some((
                "hub Work written → object on the member".into(),
                summarize(&burst),
            )),
            notes: vec![format!(
                "member-1's agent: {:.2} CPU seconds, peak RSS {:.0} MiB",
                usage.cpu_seconds, usage.peak_rss_mib
            )],
            ..Default::default()
        });
        Ok(())
    }

    /// Namespace `ns` on the hub with ConfigMap `c-0` (`data.v: value`) and, unless `image` is
    /// empty, Deployment `web` (`replicas`, `image`).
    pub(crate) async fn content(
        &self,
        ns: &str,
        replicas: i32,
        value: &str,
        image: &str,
    ) -> anyhow::Result<()> {
        let hub = self.client.clone();
        let apply = PatchParams::apply(fleethub_crds::field_manager::BENCH).force();
        Api::<Namespace>::all(hub.clone())
            .patch(
                ns,
                &apply,
                &Patch::Apply(
                    json!({"apiVersion": "v1", "kind": "Namespace", "metadata": meta(ns, None)}),
                ),
            )
            .await?;
        Api::<ConfigMap>::namespaced(hub.clone(), ns)
            .patch(
                "c-0",
                &apply,
                &Patch::Apply(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta("c-0", Some(ns)),
                                     "data": {"v": value}})),
            )
            .await?;
        if !image.is_empty() {
            let d = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta("web", Some(ns)),
                "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "web"}},
                         "template": {"metadata": {"labels": {"app": "web"}},
                                      "spec": {"containers": [{"name": "web", "image": image}]}}}});
            Api::<Deployment>::namespaced(hub, ns)
                .patch("web", &apply, &Patch::Apply(&d))
                .await?;
        }
        Ok(())
    }

    /// Waits until `seen` has `value` for `key` after `since`; the time from `since`.
    async fn restored(
        &self,
        seen: &Seen,
        key: &str,
        value: &str,
        since: Instant,
    ) -> anyhow::Result<Duration> {
        let deadline = Instant::now() + self.timeout;
        loop {
            // A restored value is the hub's value seen again: look for a sighting after `since`
            // (the first-seen map keeps the first, so the entry is cleared before each edit).
            if let Some(at) = seen_at(seen, key, value).filter(|t| *t > since) {
                return Ok(at.saturating_duration_since(since));
            }
            if let Ok(mut s) = seen.lock() {
                s.retain(|(k, v), t| !(k == key && v == value && *t <= since));
            }
            anyhow::ensure!(Instant::now() < deadline, "{key} not restored to {value}");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// Waits until Work `namespace/name` reports `Applied=True` for its current generation.
    pub(crate) async fn wait_work_applied(
        &self,
        namespace: &str,
        name: &str,
    ) -> anyhow::Result<()> {
        let works: Api<Work> = Api::namespaced(self.client.clone(), namespace);
        let deadline = Instant::now() + self.timeout;
        loop {
            if let Some(w) = works.get_opt(name).await?
                && let Some(status) = &w.status
                && fleethub_crds::conditions::find(&status.conditions, "Applied").is_some_and(|c| {
                    c.status == "True" && c.observed_generation == w.metadata.generation
                })
            {
                return Ok(());
            }
            anyhow::ensure!(
                Instant::now() < deadline,
                "Work {namespace}/{name} not applied within {:?}",
                self.timeout
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Member agent `i`'s manifest applies and reads so far, once they rest: read every 200 ms
    /// until three readings in a row (and its reconcile count) are the same, within the
    /// bench's timeout.
    async fn agent_calls_settled(&self, i: usize) -> anyhow::Result<f64> {
        let read = || async {
            let m = self.agent_metrics(i).await?;
            let calls = metric(
                &m,
                "fleethub_member_agent_applies_total{result=\"success\"}",
            ) + metric(
                &m,
                "fleethub_member_agent_applies_total{result=\"failure\"}",
            ) + metric(&m, "fleethub_member_agent_object_reads_total");
            let reconciles = metric(
                &m,
                "fleethub_member_agent_reconciles_total{result=\"success\"}",
            ) + metric(
                &m,
                "fleethub_member_agent_reconciles_total{result=\"failure\"}",
            );
            Ok::<(f64, f64), anyhow::Error>((calls, reconciles))
        };
        let deadline = Instant::now() + self.timeout;
        let mut last = read().await?;
        let mut same = 0;
        while same < 3 {
            anyhow::ensure!(
                Instant::now() < deadline,
                "member-{i}'s agent kept applying for {:?}",
                self.timeout
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
            let now = read().await?;
            if now == last {
                same += 1;
            } else {
                (last, same) = (now, 0);
            }
        }
        Ok(last.0)
    }

    /// The member agents' `fleethub_member_agent_work_requests_total` by request, and their
    /// reconciles, summed over agents `1..=members`.
    pub(crate) async fn agent_requests(
        &self,
        members: usize,
    ) -> anyhow::Result<BTreeMap<String, f64>> {
        let mut sums = BTreeMap::new();
        for i in 1..=members {
            let m = self.agent_metrics(i).await?;
            for line in m.lines() {
                let Some((series, value)) = line.rsplit_once(' ') else {
                    continue;
                };
                let key = if let Some(rest) =
                    series.strip_prefix("fleethub_member_agent_work_requests_total{request=\"")
                {
                    rest.trim_end_matches("\"}").to_string()
                } else if series.starts_with("fleethub_member_agent_reconciles_total{") {
                    "reconciles".to_string()
                } else {
                    continue;
                };
                *sums.entry(key).or_insert(0.0) += value.parse::<f64>().unwrap_or(0.0);
            }
        }
        Ok(sums)
    }

    /// The member agent `i`'s metrics page.
    async fn agent_metrics(&self, i: usize) -> anyhow::Result<String> {
        let (code, body) = fleethub_testkit::http_get(self.fleet.agent_health_addr(i), "/metrics")
            .await
            .context("reading the agent's metrics")?;
        anyhow::ensure!(code == 200, "agent metrics: HTTP {code}");
        Ok(body)
    }

    async fn member_path_clean_up(&self) -> anyhow::Result<()> {
        let hub = self.client.clone();
        let placements: Api<Placement> = Api::all(hub.clone());
        let namespaces: Api<Namespace> = Api::all(hub.clone());
        let ours: Vec<String> = namespaces
            .list(&Default::default())
            .await?
            .items
            .iter()
            .map(ResourceExt::name_any)
            .filter(|n| n.starts_with(PREFIX))
            .collect();
        for n in &ours {
            match placements.delete(n, &DeleteParams::background()).await {
                Ok(_) | Err(kube::Error::Api(_)) => {}
                Err(e) => return Err(e.into()),
            }
        }
        // The agents remove the members' copies once the Works are gone.
        for i in 1..=self.fleet.member_count().min(3) {
            let member: Api<Namespace> = Api::all(self.fleet.member(i).await?);
            let left = || async {
                Ok::<usize, anyhow::Error>(
                    member
                        .list(&Default::default())
                        .await?
                        .items
                        .iter()
                        .filter(|n| n.name_any().starts_with(PREFIX))
                        .count(),
                )
            };
            let deadline = Instant::now() + self.timeout;
            while left().await? > 0 {
                anyhow::ensure!(
                    Instant::now() < deadline,
                    "member-{i} still has bench namespaces"
                );
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
        for n in &ours {
            match namespaces.delete(n, &DeleteParams::background()).await {
                Ok(_) | Err(kube::Error::Api(_)) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }
}

/// A RollingUpdate placement named after namespace `ns` of it on `clusters`.
async fn rolling_placement(hub: &Client, ns: &str, clusters: &[String]) -> anyhow::Result<()> {
    let obj = json!({"apiVersion": "fleethub.dev/v1alpha1", "kind": "Placement", "metadata": meta(ns, None),
        "spec": {"resourceSelectors": [{"group": "", "version": "v1", "kind": "Namespace", "name": ns}],
                 "policy": {"placementType": "PickFixed", "clusterNames": clusters},
                 "strategy": {"type": "RollingUpdate"}}});
    Api::<Placement>::all(hub.clone())
        .patch(
            ns,
            &PatchParams::apply(fleethub_crds::field_manager::BENCH).force(),
            &Patch::Apply(&obj),
        )
        .await?;
    Ok(())
}

async fn set_value(hub: &Client, ns: &str, name: &str, v: &str) -> anyhow::Result<()> {
    Api::<ConfigMap>::namespaced(hub.clone(), ns)
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"v": v}})),
        )
        .await?;
    Ok(())
}

async fn wait_value(
    api: &Api<ConfigMap>,
    name: &str,
    v: &str,
    timeout: Duration,
) -> anyhow::Result<Instant> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(cm) = api.get_opt(name).await?
            && cm
                .data
                .as_ref()
                .and_then(|d| d.get("v"))
                .map(String::as_str)
                == Some(v)
        {
            return Ok(Instant::now());
        }
        anyhow::ensure!(Instant::now() < deadline, "{name} did not become {v}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

async fn wait_count(api: &Api<ConfigMap>, n: usize, timeout: Duration) -> anyhow::Result<()> {
    let deadline = Instant::now() + timeout;
    let bench = kube::api::ListParams::default().labels(BENCH_LABEL);
    loop {
        let have = api.list(&bench).await?.items.len();
        if have >= n {
            return Ok(());
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "{have}/{n} ConfigMaps on the member"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

async fn wait_replicas(
    api: &Api<Deployment>,
    replicas: i32,
    since: Instant,
    timeout: Duration,
) -> anyhow::Result<Duration> {
    let deadline = since + timeout;
    loop {
        let d = api.get("web").await?;
        if d.spec.as_ref().and_then(|s| s.replicas) == Some(replicas) {
            return Ok(since.elapsed());
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "replicas not restored to {replicas}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// The value of sample `series` (its full text before the value) in a metrics page.
fn metric(page: &str, series: &str) -> f64 {
    page.lines()
        .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
        .unwrap_or(0.0)
}
