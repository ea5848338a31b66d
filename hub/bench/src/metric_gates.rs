//! The metric-gate scenario: many concurrent runs, each of one cluster followed by a
//! MetricCheck on the fleet's real Prometheus, after the same runs without the gate (the
//! baseline: the difference is what the gates cost). It measures the queries the hub sends per
//! second, its CPU time and memory, and how long after its cluster was done each run's gate
//! passed (the first check is made when the cluster is done, so the least possible is
//! (threshold − 1) × interval).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use fleethub_crds::conditions::is_true;
use fleethub_crds::update_run::METRIC_CHECK_PASSED;
use fleethub_crds::{StagedUpdateStrategy, UpdateRun};
use futures::StreamExt;
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::WatchStreamExt;
use serde_json::json;

use crate::report::{Scenario, fill};
use crate::sim::BENCH_LABEL;
use crate::stats::summarize;
use crate::{Bench, objects};

/// The strategy of the metric-gate runs, and of the baseline runs.
const STRATEGY: &str = "bench-metric-gate";
const BASELINE_STRATEGY: &str = "bench-metric-baseline";
/// Checks 5 s apart, 3 in a row: a gate passes 10 s after its first check at the earliest.
const INTERVAL_SECONDS: u64 = 5;
const THRESHOLD: u32 = 3;
/// A real query whose text differs per run (as `$clusters`/`$run` make real ones), which
/// Prometheus evaluates against the series it scrapes.
const QUERY: &str = r#"count(up{job!="$run"}) > 0"#;

impl Bench {
    /// `runs` UpdateRuns started at once, each over its own member: first without a gate
    /// (the baseline), then each gated after its cluster by a MetricCheck on the fleet's
    /// Prometheus.
    pub(crate) async fn metric_gates(&mut self, runs: usize) -> anyhow::Result<()> {
        self.ensure_members(runs).await?;
        let prometheus = self.fleet.prometheus_url()?;
        create_strategy(&self.client, BASELINE_STRATEGY, None).await?;
        create_strategy(&self.client, STRATEGY, Some(&prometheus)).await?;
        self.gate_runs(runs, false).await?;
        self.gate_runs(runs, true).await
    }

    async fn gate_runs(&mut self, runs: usize, gated: bool) -> anyhow::Result<()> {
        let (prefix, strategy) = match gated {
            true => ("bench-m", STRATEGY),
            false => ("bench-b", BASELINE_STRATEGY),
        };
        let slices: Vec<(String, String, String)> = (0..runs)
            .map(|k| {
                (
                    format!("{prefix}{k:03}"),
                    format!("{prefix}{k:03}-run"),
                    objects::member_name(k + 1),
                )
            })
            .collect();
        for (placement, _, member) in &slices {
            objects::create_placement(
                &self.client,
                placement,
                objects::APP_NAMESPACE,
                std::slice::from_ref(member),
            )
            .await?;
        }
        for (placement, _, _) in &slices {
            objects::wait_placed(&self.client, placement, 0, 1, self.timeout).await?;
        }
        let passed = watch_gates(self.client.clone());
        let checks_before = hub_metric_checks(self.fleet).await?;
        self.samplers.reset().await;
        let start = Instant::now();
        for (placement, run, _) in &slices {
            objects::create_run(&self.client, run, placement, 0, strategy).await?;
        }
        let mut dones = Vec::new();
        for (_, run, _) in &slices {
            dones.push(self.outcome(run).await?);
        }
        let all_passed = passed.1.lock().unwrap().clone();
        passed.0.abort();
        let last = dones.iter().max().copied().unwrap_or(start);
        let checks_after = hub_metric_checks(self.fleet).await?;
        let seconds = last.saturating_duration_since(start).as_secs_f64();
        let sent: f64 = checks_after.values().sum::<f64>() - checks_before.values().sum::<f64>();
        let mut figures = crate::timeline::RunFigures::default();
        let mut created_to_done = Vec::new();
        for (placement, run, member) in &slices {
            let done = self
                .timeline
                .cluster_done_at(run, member)
                .with_context(|| format!("the cluster of {run} was never seen done"))?;
            created_to_done.push(done.saturating_duration_since(start));
            figures.extend(self.timeline.run_figures(
                run,
                placement,
                0,
                std::slice::from_ref(member),
            ));
        }
        let reached = summarize(&created_to_done);
        let mut s = Scenario {
            name: format!("{runs} runs, no gate (baseline)"),
            members: self.sim.members(),
            clusters: runs,
            seconds,
            special: Some(("runs created → cluster done".into(), reached)),
            ..Default::default()
        };
        if gated {
            // Gate reached (the run's cluster done) → gate passed, per run.
            let mut waits = Vec::new();
            for (_, run, member) in &slices {
                let gate = all_passed
                    .get(run)
                    .with_context(|| format!("the gate of {run} was never seen passed"))?;
                let done = self.timeline.cluster_done_at(run, member).unwrap_or(start);
                waits.push(gate.saturating_duration_since(done));
            }
            let by_result: Vec<String> = checks_after
                .iter()
                .map(|(result, n)| {
                    format!(
                        "{result} {:.0}",
                        n - checks_before.get(result).copied().unwrap_or(0.0)
                    )
                })
                .collect();
            s.name = format!("{runs} runs with a metric gate");
            s.special = Some((
                format!(
                    "cluster done → metric gate passed ({THRESHOLD} checks {INTERVAL_SECONDS}s apart, the first at once: ≈ {} s at best)",
                    (THRESHOLD as u64 - 1) * INTERVAL_SECONDS
                ),
                summarize(&waits),
            ));
            s.notes = vec![
                format!(
                    "{sent:.0} queries sent to Prometheus in {seconds:.1}s: {:.1}/s ({:.1} per run; by result: {})",
                    sent / seconds.max(f64::EPSILON),
                    sent / runs.max(1) as f64,
                    by_result.join(", ")
                ),
                format!(
                    "runs created → cluster done: p50 {:.0} ms, max {:.0} ms; all {runs} gates passed {seconds:.1}s after the runs were created",
                    reached.p50_ms, reached.max_ms
                ),
            ];
        }
        fill(&mut s, figures);
        self.samplers.record(&mut s).await;
        self.report(s);
        Ok(())
    }
}

/// One stage over every bench member, then a MetricCheck on `prometheus` if given.
async fn create_strategy(
    client: &kube::Client,
    name: &str,
    prometheus: Option<&str>,
) -> anyhow::Result<()> {
    let tasks = match prometheus {
        Some(url) => json!([{"type": "MetricCheck", "metricCheck": {
            "url": url, "query": QUERY,
            "interval": format!("{INTERVAL_SECONDS}s"), "successThreshold": THRESHOLD}}]),
        None => json!([]),
    };
    let obj = json!({"apiVersion": "fleethub.dev/v1alpha1", "kind": "StagedUpdateStrategy",
        "metadata": {"name": name, "labels": {BENCH_LABEL: "true"}},
        "spec": {"stages": [{"name": "all",
            "labelSelector": {"matchLabels": {BENCH_LABEL: "true"}},
            "afterStageTasks": tasks}]}});
    crate::fleet_objects::apply(
        &Api::<StagedUpdateStrategy>::all(client.clone()),
        name,
        &obj,
    )
    .await
    .context("creating the metric-gate strategy")?;
    Ok(())
}

type Passed = Arc<Mutex<BTreeMap<String, Instant>>>;

/// Records when each bench run's first metric gate was first seen passed.
fn watch_gates(client: kube::Client) -> (tokio::task::JoinHandle<()>, Passed) {
    let passed: Passed = Arc::default();
    let seen = passed.clone();
    let task = tokio::spawn(async move {
        let cfg = fleethub_runtime::watcher_config().labels(&format!("{BENCH_LABEL}=true"));
        let mut runs = fleethub_runtime::watch(Api::<UpdateRun>::all(client), cfg)
            .applied_objects()
            .boxed();
        while let Some(next) = runs.next().await {
            let Ok(run) = next else { continue };
            let at = Instant::now();
            let open = run
                .status
                .as_ref()
                .and_then(|s| s.stages_status.first())
                .and_then(|s| s.after_stage_task_status.first())
                .is_some_and(|t| is_true(&t.conditions, METRIC_CHECK_PASSED));
            if open {
                seen.lock().unwrap().entry(run.name_any()).or_insert(at);
            }
        }
    });
    (task, passed)
}

/// The hub's `fleethub_hub_metric_checks_total` by result.
async fn hub_metric_checks(
    fleet: &fleethub_testkit::Fleet,
) -> anyhow::Result<BTreeMap<String, f64>> {
    let (code, text) = tokio::time::timeout(
        Duration::from_secs(10),
        fleethub_testkit::http_get(fleet.hub_health_addr(), "/metrics"),
    )
    .await
    .context("the hub's /metrics did not answer")??;
    anyhow::ensure!(code == 200, "the hub's /metrics answered HTTP {code}");
    Ok(text
        .lines()
        .filter_map(|l| {
            let rest = l.strip_prefix("fleethub_hub_metric_checks_total{result=\"")?;
            let (result, value) = rest.split_once("\"} ")?;
            Some((result.to_string(), value.trim().parse().ok()?))
        })
        .collect())
}
