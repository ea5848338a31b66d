//! What a scenario measured, and the report: one line per scenario while running, Markdown
//! tables and JSON at the end.

use std::sync::{Mutex, PoisonError};

use fleethub_testkit::Fleet;
use kube::Client;
use serde::Serialize;

use crate::process::{self, Sampler, Usage};
use crate::requests;
use crate::sim::WatchMode;
use crate::stats::{Summary, summarize};
use crate::timeline::RunFigures;

/// What one scenario measured.
#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct Scenario {
    pub(crate) name: String,
    /// Bench members registered on the hub during the scenario.
    pub(crate) members: usize,
    /// Cluster updates the scenario performed.
    pub(crate) clusters: usize,
    /// Wall time of the scenario's runs (first run created → last run succeeded), seconds.
    pub(crate) seconds: f64,
    /// Member reported Available → the run's status marks the cluster succeeded.
    pub(crate) available_to_done: Summary,
    /// Member reported → the hub delivered the run's next Work (the hub's per-step overhead).
    pub(crate) step: Summary,
    /// Work delivered → simulated member reported (the simulation's own share).
    pub(crate) agent: Summary,
    /// The member's status write: sent → answered by the hub API server (the first part of
    /// available → done; the rest is the hub's).
    pub(crate) report_write: Summary,
    /// Scenario-specific latency (approval → next Work; member created → provisioned).
    pub(crate) special: Option<(String, Summary)>,
    /// More scenario-specific latencies, listed after `special`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) more: Vec<(String, Summary)>,
    /// Other facts, in words.
    pub(crate) notes: Vec<String>,
    pub(crate) hub: Usage,
    pub(crate) apiserver: Usage,
    pub(crate) etcd: Usage,
    /// The hub API server's requests during the scenario (`VERB resource code`, count), the
    /// most frequent first.
    pub(crate) requests: Vec<(String, u64)>,
}

pub(crate) struct Samplers {
    hub: Sampler,
    apiserver: Sampler,
    etcd: Sampler,
    client: Client,
    /// The hub API server's request counter when the scenario started.
    requests: Mutex<Option<requests::Counts>>,
}

impl Samplers {
    pub(crate) fn start(fleet: &Fleet, client: Client) -> Self {
        Samplers {
            hub: Sampler::start(fleet.dir(), "hub"),
            apiserver: Sampler::start(fleet.dir(), "hub-apiserver"),
            etcd: Sampler::start(fleet.dir(), "hub-etcd"),
            client,
            requests: Mutex::new(None),
        }
    }
    pub(crate) async fn reset(&self) {
        let counts = requests::read(&self.client).await;
        *self.requests.lock().unwrap_or_else(PoisonError::into_inner) = counts;
        self.hub.reset();
        self.apiserver.reset();
        self.etcd.reset();
    }
    pub(crate) async fn record(&self, s: &mut Scenario) {
        s.hub = self.hub.usage();
        s.apiserver = self.apiserver.usage();
        s.etcd = self.etcd.usage();
        let before = self
            .requests
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let (Some(before), Some(after)) = (before, requests::read(&self.client).await) {
            s.requests = requests::between(&before, &after);
        }
    }
}

pub(crate) fn fill(s: &mut Scenario, f: RunFigures) {
    s.available_to_done = summarize(&f.available_to_done);
    s.step = summarize(&f.step);
    s.agent = summarize(&f.agent);
    s.report_write = summarize(&f.report_write);
}

fn ms3(s: &Summary) -> String {
    if s.count == 0 {
        "–".into()
    } else {
        format!("{:.0} / {:.0} / {:.0}", s.p50_ms, s.p99_ms, s.max_ms)
    }
}

pub(crate) fn one_line(s: &Scenario) -> String {
    format!(
        "{}: {:.1}s, available→done {} ms, step {} ms, hub {:.1} CPU-s, peak {:.0} MiB",
        s.name,
        s.seconds,
        ms3(&s.available_to_done),
        ms3(&s.step),
        s.hub.cpu_seconds,
        s.hub.peak_rss_mib
    )
}

/// Request kinds listed per scenario.
const REQUEST_ROWS: usize = 12;

/// The figures as Markdown tables (they go into BENCHMARKS.md as printed).
pub(crate) fn table(results: &[Scenario]) -> String {
    let mut out = String::new();
    out.push_str("| scenario | members | cluster updates | time s | updates/s | available → done ms p50 / p99 / max | hub step ms p50 / p99 / max | hub CPU s | hub peak RSS MiB | hub API server CPU s | etcd CPU s |\n");
    out.push_str("|---|---:|---:|---:|---:|---|---|---:|---:|---:|---:|\n");
    for s in results {
        let rate = if s.seconds > 0.0 && s.clusters > 0 {
            format!("{:.1}", s.clusters as f64 / s.seconds)
        } else {
            "–".into()
        };
        out.push_str(&format!(
            "| {} | {} | {} | {:.1} | {} | {} | {} | {:.1} | {:.0} | {:.1} | {:.1} |\n",
            s.name,
            s.members,
            s.clusters,
            s.seconds,
            rate,
            ms3(&s.available_to_done),
            ms3(&s.step),
            s.hub.cpu_seconds,
            s.hub.peak_rss_mib,
            s.apiserver.cpu_seconds,
            s.etcd.cpu_seconds,
        ));
    }
    out.push_str(
        "\n| scenario | measured | n | p50 ms | p99 ms | max ms |\n|---|---|---:|---:|---:|---:|\n",
    );
    for s in results {
        let mut rows: Vec<(String, Summary)> = Vec::new();
        if let Some((what, sum)) = &s.special {
            rows.push((what.clone(), *sum));
        }
        rows.extend(s.more.iter().cloned());
        if s.agent.count > 0 {
            rows.push(("Work delivered → simulated member reported".into(), s.agent));
        }
        if s.report_write.count > 0 {
            rows.push((
                "member's report: status write sent → answered (part of available → done)".into(),
                s.report_write,
            ));
        }
        for (what, sum) in rows {
            out.push_str(&format!(
                "| {} | {what} | {} | {:.0} | {:.0} | {:.0} |\n",
                s.name, sum.count, sum.p50_ms, sum.p99_ms, sum.max_ms
            ));
        }
    }
    // The requests each cluster update cost (or, registering, each member), at least a tenth
    // of one per update.
    let mut requests = String::new();
    for s in results {
        let per = if s.clusters > 0 {
            s.clusters
        } else {
            s.members
        };
        for (what, n) in s.requests.iter().take(REQUEST_ROWS) {
            let each = *n as f64 / per.max(1) as f64;
            if each >= 0.1 {
                requests.push_str(&format!("| {} | {what} | {n} | {each:.2} |\n", s.name));
            }
        }
    }
    if !requests.is_empty() {
        out.push_str(
            "\n| scenario | hub API server request (verb, resource, code; no watches) | count | per cluster update (registering: per member) |\n|---|---|---:|---:|\n",
        );
        out.push_str(&requests);
    }
    for s in results.iter().filter(|s| !s.notes.is_empty()) {
        out.push_str(&format!("\n{}: {}\n", s.name, s.notes.join("; ")));
    }
    out
}

pub(crate) fn conditions(fleet: &Fleet) -> Vec<String> {
    let mut out = Vec::new();
    if let Ok(load) = std::fs::read_to_string("/proc/loadavg") {
        out.push(format!(
            "load average (1/5/15 min, runnable/total): {}",
            load.trim()
        ));
    }
    out.push(format!(
        "CPUs: {}",
        std::thread::available_parallelism().map_or(0, |n| n.get())
    ));
    if let Some(pid) = process::fleet_pid(fleet.dir(), "hub")
        && let Ok(exe) = std::fs::read_link(format!("/proc/{pid}/exe"))
    {
        out.push(format!("hub binary: {}", exe.display()));
    }
    out
}

#[derive(Serialize)]
pub(crate) struct Report<'a> {
    pub(crate) command: String,
    pub(crate) conditions_before: Vec<String>,
    pub(crate) conditions_after: Vec<String>,
    pub(crate) watch: WatchMode,
    pub(crate) heartbeat_seconds: u64,
    pub(crate) concurrency: &'a str,
    pub(crate) scenarios: &'a [Scenario],
    pub(crate) status_write_errors: u64,
    pub(crate) cleanup_seconds: Option<f64>,
    pub(crate) error: Option<String>,
}
