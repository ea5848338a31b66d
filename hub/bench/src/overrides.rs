//! What per-cluster overrides cost the hub's work generation (issue #20's figure: 1,000
//! clusters with 10 overrides of 5 rules each, compared with none).
//!
//! Two measurements:
//! - [`application_cost`] (`--override-cost N`, no fleet): the work generator's per-cluster
//!   step of choosing the override snapshots and applying them to the manifests
//!   (`fleethub_crds::override_apply`, the code the hub runs), timed in-process for N clusters,
//!   with and without overrides, plus this process's peak RSS.
//! - [`Bench::override_runs`] (`--override-members N`, on the fleet): one placement over N
//!   simulated members; a staged run of a new snapshot without overrides, then a run of the
//!   next snapshot with 10 overrides limited to the placement (every Work written with them):
//!   run time, the hub's CPU time and peak RSS for each.

use std::time::{Duration, Instant};

use fleethub_crds::binding::{BindingSpec, BindingState, NamespacedName};
use fleethub_crds::override_apply::{self, ClusterInfo};
use fleethub_crds::overrides::{
    ResourceOverride, ResourceOverrideSnapshot, ResourceOverrideSnapshotSpec, ResourceOverrideSpec,
};
use fleethub_crds::{Work, names};
use kube::Api;
use kube::api::{DeleteParams, ListParams};
use serde_json::{Value, json};

use crate::fleet_objects::{
    self as objects, APP_NAMESPACE, ORDER_LABEL, OVERRIDE_NAMESPACE, STAGE_LABEL, STAGES,
};
use crate::report::{Scenario, fill};
use crate::sim::BENCH_LABEL;
use crate::{Bench, STRATEGY};

/// Overrides in the figure.
pub const OVERRIDES: usize = 10;
/// Rules per override.
pub const RULES: usize = 5;

/// The rules of override `o`: one per stage, one for every bench member, one for every
/// cluster; each adds a key naming the cluster to the ConfigMap. A member of any stage gets
/// three of the five (the worst realistic case: most rules match, every value substituted).
fn rules(o: usize) -> Value {
    let mut rules: Vec<Value> = STAGES
        .iter()
        .map(|s| json!({"clusterSelector": {"clusterSelectorTerms": [{"labelSelector": {"matchLabels": {STAGE_LABEL: s}}}]}}))
        .collect();
    rules.push(json!({"clusterSelector": {"clusterSelectorTerms": [{"labelSelector": {"matchExpressions": [{"key": BENCH_LABEL, "operator": "Exists"}]}}]}}));
    rules.push(json!({}));
    for (r, rule) in rules.iter_mut().enumerate().take(RULES) {
        rule["jsonPatchOverrides"] = json!([{"op": "add", "path": format!("/data/o{o}-r{r}"),
            "value": "${MEMBER-CLUSTER-NAME} in ${MEMBER-CLUSTER-LABEL-KEY-bench.fleethub.dev/stage}"}]);
    }
    Value::Array(rules)
}

/// The spec of override `o` for the bench's ConfigMap `web`, limited to `placement`.
fn override_spec(o: usize, placement: &str) -> Value {
    json!({"placement": {"name": placement},
           "resourceSelectors": [{"group": "", "version": "v1", "kind": "ConfigMap", "name": "web"}],
           "policy": {"overrideRules": rules(o)}})
}

fn override_name(o: usize) -> String {
    format!("bench-override-{o:02}")
}

/// Peak resident memory of this process, MiB.
fn peak_rss_mib() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| crate::process::status_kib(&s, "VmHWM"))
        .map_or(0.0, |kib| kib as f64 / 1024.0)
}

/// The per-cluster cost of the work generator's override step, without a fleet: `clusters`
/// clusters (stage labels dealt round-robin, as the bench's members), the bench's content (a
/// Namespace and ConfigMap `web`), 10 overrides of 5 rules; each cluster's binding bound by a
/// run to the 10 snapshots. Prints a Markdown table.
///
/// Not included: reading the snapshot from the API server and writing the Work, which the
/// work generator does with or without overrides.
pub fn application_cost(clusters: usize, passes: usize) -> anyhow::Result<()> {
    let placement = "bench-ov";
    let manifests = vec![
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": APP_NAMESPACE}}),
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "web", "namespace": APP_NAMESPACE},
               "data": {"version": "1", "settings.json": "{\"replicas\": 3, \"feature\": true}"}}),
    ];
    let snapshots: Vec<ResourceOverrideSnapshot> = (0..OVERRIDES)
        .map(|o| {
            let spec: ResourceOverrideSpec = serde_json::from_value(override_spec(o, placement))?;
            let mut s = ResourceOverrideSnapshot::new(
                &fleethub_crds::overrides::snapshot_name(&override_name(o), 0),
                ResourceOverrideSnapshotSpec {
                    override_name: override_name(o),
                    index: 0,
                    override_spec: spec,
                },
            );
            s.metadata.namespace = Some(APP_NAMESPACE.into());
            Ok(s)
        })
        .collect::<anyhow::Result<_>>()?;
    let infos: Vec<ClusterInfo> = (1..=clusters)
        .map(|i| ClusterInfo {
            name: objects::member_name(i),
            labels: [
                (BENCH_LABEL.to_string(), "true".to_string()),
                (STAGE_LABEL.to_string(), objects::stage_of(i).to_string()),
                (ORDER_LABEL.to_string(), i.to_string()),
            ]
            .into(),
        })
        .collect();
    let binding = |with: bool| BindingSpec {
        placement_name: placement.into(),
        target_cluster: String::new(),
        state: BindingState::Bound,
        resource_snapshot_index: Some(0),
        update_run_name: Some("bench-run".into()),
        resource_override_snapshots: if with {
            snapshots
                .iter()
                .map(|s| NamespacedName {
                    name: kube::ResourceExt::name_any(s),
                    namespace: APP_NAMESPACE.into(),
                })
                .collect()
        } else {
            vec![]
        },
        ..Default::default()
    };
    let rss_before = peak_rss_mib();
    // One pass: every cluster's choice and application, as the work generator makes them
    // (the snapshots come from a cache holding all of them, which `choose` filters).
    let pass = |with: bool| -> anyhow::Result<(Duration, usize)> {
        let b = binding(with);
        let all: Vec<&ResourceOverrideSnapshot> = snapshots.iter().collect();
        let start = Instant::now();
        let mut used = 0;
        for info in &infos {
            let chosen = override_apply::choose(
                Some(&b),
                std::iter::empty::<&fleethub_crds::overrides::ClusterResourceOverrideSnapshot>(),
                all.iter().copied(),
            );
            let applied = chosen
                .apply(&manifests, placement, info)
                .map_err(|e| anyhow::anyhow!("{e}"))?;
            used += applied.used.len();
            std::hint::black_box(&applied);
        }
        Ok((start.elapsed(), used))
    };
    let (mut none, mut with) = (Vec::new(), Vec::new());
    let mut used = 0;
    for _ in 0..passes.max(1) {
        none.push(pass(false)?.0);
        let (d, u) = pass(true)?;
        with.push(d);
        used = u;
    }
    none.sort();
    with.sort();
    let per = |d: Duration| d.as_secs_f64() * 1e6 / clusters as f64;
    let (n50, w50) = (none[none.len() / 2], with[with.len() / 2]);
    let (nmax, wmax) = (none[none.len() - 1], with[with.len() - 1]);
    println!("\n## override application cost (in-process, no fleet)\n");
    println!(
        "command: `{}`",
        std::env::args().collect::<Vec<_>>().join(" ")
    );
    println!(
        "{clusters} clusters × {} passes; content: Namespace + ConfigMap; {OVERRIDES} ResourceOverride snapshots × {RULES} rules (3 of 5 match each cluster, 1 add with 2 variables each): {} overrides changed a cluster per pass\n",
        passes.max(1),
        used
    );
    println!("| | pass p50 ms | pass max ms | per cluster p50 µs |");
    println!("|---|---:|---:|---:|");
    println!(
        "| no overrides | {:.2} | {:.2} | {:.1} |",
        n50.as_secs_f64() * 1e3,
        nmax.as_secs_f64() * 1e3,
        per(n50)
    );
    println!(
        "| 10 overrides × 5 rules | {:.2} | {:.2} | {:.1} |",
        w50.as_secs_f64() * 1e3,
        wmax.as_secs_f64() * 1e3,
        per(w50)
    );
    println!(
        "\nadded per cluster (p50): {:.1} µs; this process's peak RSS {:.1} MiB (before the passes {:.1} MiB)",
        per(w50) - per(n50),
        peak_rss_mib(),
        rss_before
    );
    Ok(())
}

impl Bench {
    /// Two staged runs over members 1..=`size` of one placement, each of a new snapshot: the
    /// first without overrides, the second with 10 overrides of 5 rules limited to it.
    pub(crate) async fn override_runs(&mut self, size: usize) -> anyhow::Result<()> {
        self.ensure_members(size).await?;
        let placement = format!("bench-ov-{size}");
        let clusters: Vec<String> = (1..=size).map(objects::member_name).collect();
        objects::set_content(&self.client, OVERRIDE_NAMESPACE, "0").await?;
        objects::create_placement(&self.client, &placement, OVERRIDE_NAMESPACE, &clusters).await?;
        objects::wait_placed(&self.client, &placement, 0, size, self.timeout).await?;
        let outcome = async {
            objects::set_content(&self.client, OVERRIDE_NAMESPACE, "1").await?;
            objects::wait_placed(&self.client, &placement, 1, size, self.timeout).await?;
            self.override_run(&placement, &clusters, 1, "no overrides")
                .await?;
            self.create_overrides(&placement).await?;
            objects::set_content(&self.client, OVERRIDE_NAMESPACE, "2").await?;
            objects::wait_placed(&self.client, &placement, 2, size, self.timeout).await?;
            self.override_run(
                &placement,
                &clusters,
                2,
                &format!("{OVERRIDES} overrides × {RULES} rules"),
            )
            .await
        }
        .await;
        // The overrides go, also when a run failed (their namespace goes at clean-up anyway).
        let api: Api<ResourceOverride> = Api::namespaced(self.client.clone(), OVERRIDE_NAMESPACE);
        let _ = api
            .delete_collection(
                &DeleteParams::background(),
                &ListParams::default().labels(&format!("{BENCH_LABEL}=true")),
            )
            .await;
        outcome
    }

    async fn create_overrides(&self, placement: &str) -> anyhow::Result<()> {
        let api: Api<ResourceOverride> = Api::namespaced(self.client.clone(), OVERRIDE_NAMESPACE);
        for o in 0..OVERRIDES {
            let name = override_name(o);
            let obj = json!({"apiVersion": "fleethub.dev/v1alpha1", "kind": "ResourceOverride",
                "metadata": {"name": name, "labels": {BENCH_LABEL: "true"}},
                "spec": override_spec(o, placement)});
            crate::fleet_objects::apply(&api, &name, &obj).await?;
        }
        let snapshots: Api<ResourceOverrideSnapshot> =
            Api::namespaced(self.client.clone(), OVERRIDE_NAMESPACE);
        objects::wait_until(
            snapshots,
            "",
            &format!("the {OVERRIDES} override snapshots"),
            self.timeout,
            |s| {
                s.iter()
                    .filter(|s| s.spec.override_name.starts_with("bench-override-"))
                    .count()
                    >= OVERRIDES
            },
        )
        .await
    }

    async fn override_run(
        &mut self,
        placement: &str,
        clusters: &[String],
        index: i64,
        what: &str,
    ) -> anyhow::Result<()> {
        let run = format!("{placement}-run-{index}");
        self.samplers.reset().await;
        let start = Instant::now();
        objects::create_run(&self.client, &run, placement, index, STRATEGY).await?;
        let done = self.outcome(&run).await?;
        let mut s = Scenario {
            name: format!("1 run, {} members, {what}", clusters.len()),
            members: self.sim.members(),
            clusters: clusters.len(),
            seconds: done.saturating_duration_since(start).as_secs_f64(),
            ..Default::default()
        };
        fill(
            &mut s,
            self.timeline.run_figures(&run, placement, index, clusters),
        );
        self.samplers.record(&mut s).await;
        s.notes.push(format!(
            "hub CPU per cluster {:.2} ms",
            s.hub.cpu_seconds * 1e3 / clusters.len() as f64
        ));
        // What each member's Work weighs: the hub's memory, and the API server's work, grow
        // with it (the ResourceOverrides once went into every Work with their namespace).
        if let Some(cluster) = clusters.first() {
            let works: Api<Work> =
                Api::namespaced(self.client.clone(), &names::member_namespace(cluster));
            if let Ok(work) = works.get(&names::work_name(placement)).await {
                s.notes.push(format!(
                    "{cluster}'s Work: {} manifests ({}), {:.1} KB as JSON",
                    work.spec.workload.manifests.len(),
                    kinds(&work.spec.workload.manifests),
                    serde_json::to_vec(&work).map_or(0, |v| v.len()) as f64 / 1e3,
                ));
            }
        }
        self.report(s);
        Ok(())
    }
}

/// `Kind ×N` for each kind among `manifests`, in the order they first appear.
fn kinds(manifests: &[Value]) -> String {
    let mut counts: Vec<(&str, usize)> = Vec::new();
    for kind in manifests.iter().map(|m| m["kind"].as_str().unwrap_or("?")) {
        match counts.iter_mut().find(|(k, _)| *k == kind) {
            Some((_, n)) => *n += 1,
            None => counts.push((kind, 1)),
        }
    }
    counts
        .iter()
        .map(|(k, n)| format!("{k} ×{n}"))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    #[test]
    fn kinds_are_counted_in_order_of_appearance() {
        let m = |kind: &str| json!({"kind": kind});
        assert_eq!(
            super::kinds(&[
                m("Namespace"),
                m("ConfigMap"),
                m("ResourceOverride"),
                m("ConfigMap")
            ]),
            "Namespace ×1, ConfigMap ×2, ResourceOverride ×1"
        );
        assert_eq!(super::kinds(&[]), "");
    }
}
