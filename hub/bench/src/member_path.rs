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

mod support;
use support::*;

/// Prefix of every namespace and placement of this scenario.
pub(crate) const PREFIX: &str = "bench-mp";
/// Objects in the large Work.
const LARGE: usize = 500;
/// Works changed at once on one member.
const BURST: usize = 200;

/// When each `(key, value)` was seen, in order (every watch event that showed it). Keeping every
/// sighting, not only the first, lets a wait that starts at an edit find the first sighting
/// after it even when the same value was seen before (the hub's value, restored after a drift).
pub(crate) type Seen = Arc<Mutex<BTreeMap<(String, String), Vec<Instant>>>>;

fn sighted(seen: &Seen, key: &str, value: &str) {
    if let Ok(mut s) = seen.lock() {
        s.entry((key.to_string(), value.to_string()))
            .or_default()
            .push(Instant::now());
    }
}

/// When `value` of `key` was first seen.
pub(crate) fn seen_at(seen: &Seen, key: &str, value: &str) -> Option<Instant> {
    seen_after(seen, key, value, None)
}

/// When `value` of `key` was first seen after `since` (at all, for `None`).
pub(crate) fn seen_after(
    seen: &Seen,
    key: &str,
    value: &str,
    since: Option<Instant>,
) -> Option<Instant> {
    seen.lock()
        .ok()?
        .get(&(key.to_string(), value.to_string()))?
        .iter()
        .copied()
        .find(|t| since.is_none_or(|since| *t > since))
}

/// Watches the objects of `api` (all namespaces of a client, or one) that match `labels` in the
/// background, recording for each object when `value` returned each value, keyed by
/// `namespace/name`. The bench's own objects carry [`BENCH_LABEL`]; the Works the hub writes for
/// them carry their placement's label instead.
pub(crate) fn record<K>(
    api: Api<K>,
    labels: String,
    seen: Seen,
    value: impl Fn(&K) -> Option<String> + Send + 'static,
) where
    K: fleethub_runtime::Watched,
{
    tokio::spawn(async move {
        let config = watcher::Config::default().labels(&labels);
        // Backed off after a failure: without, a watch refused by a member's API server is
        // asked again at once, in a loop.
        let mut events = fleethub_runtime::watch(api, config)
            .applied_objects()
            .boxed();
        while let Some(event) = events.next().await {
            if let Ok(o) = event
                && let Some(v) = value(&o)
            {
                let key = format!("{}/{}", o.namespace().unwrap_or_default(), o.name_any());
                sighted(&seen, &key, &v);
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
}
