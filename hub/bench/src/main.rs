//! `fleethub-bench`: the fleethub benchmark. Runs against the local fleet (`deploy/local/fleet`),
//! registers many simulated member clusters on its hub (see `sim.rs`), drives staged updates
//! across them and prints what it measured: how fast the hub notices a finished member and an
//! approval, its overhead per cluster step, full run times for fleets of 10, 100 and 1,000
//! members, many concurrent runs, a hub restart in the middle of a run, and the hub's CPU time
//! and memory throughout. It cleans up everything it created, and exits non-zero when a run does
//! not complete; it never judges speed. See BENCHMARKS.md.
#![forbid(unsafe_code)]

mod dashboard;
mod fleet_objects;
mod process;
mod sim;
mod stats;
mod timeline;

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use clap::Parser;
use fleethub_crds::{ApprovalRequest, Binding, MemberCluster, ResourceSnapshot, names};
use fleethub_testkit::Fleet;
use futures::StreamExt;
use kube::api::Api;
use kube::{Client, ResourceExt};
use serde::Serialize;

use fleet_objects as objects;
use process::{Sampler, Usage};
use sim::{Simulation, WatchMode};
use stats::{Summary, summarize};
use timeline::{RunFigures, Timeline};

/// Drives the hub of the running local fleet with simulated members and prints latencies,
/// run times and the hub's CPU time and memory.
#[derive(Parser, Debug, Clone)]
#[command(version, about)]
struct Args {
    /// Fleet sizes to run one staged update across, ascending (members are added as needed).
    #[arg(long, value_delimiter = ',', default_value = "10,100,1000")]
    members: Vec<usize>,
    /// Concurrent UpdateRuns to start at once (0: skip), each over its own slice of members.
    #[arg(long, default_value_t = 100)]
    runs: usize,
    /// Members per concurrent run (runs × this many members are registered).
    #[arg(long, default_value_t = 10)]
    clusters_per_run: usize,
    /// Approval samples to take (two per gated run).
    #[arg(long, default_value_t = 20)]
    approvals: usize,
    /// Members of the run during which the hub is killed and restarted (0: skip).
    #[arg(long, default_value_t = 100)]
    restart_members: usize,
    /// maxConcurrency of every stage.
    #[arg(long, default_value = "50%")]
    concurrency: String,
    /// How simulated members watch their Works.
    #[arg(long, value_enum, default_value_t = WatchMode::PerMember)]
    watch: WatchMode,
    /// Heartbeat period of simulated members, in seconds.
    #[arg(long, default_value_t = 15)]
    heartbeat_seconds: u64,
    /// The reduced profile CI runs: `--members 10,100 --runs 10 --approvals 6 --restart-members 30`.
    #[arg(long)]
    quick: bool,
    /// How long one scenario (provisioning, a run, the concurrent runs) may take.
    #[arg(long, default_value_t = 900)]
    timeout_seconds: u64,
    /// How long clean-up may take.
    #[arg(long, default_value_t = 900)]
    cleanup_timeout_seconds: u64,
    /// Also write the figures as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
}

impl Args {
    fn with_profile(mut self) -> Self {
        if self.quick {
            self.members = vec![10, 100];
            self.runs = 10;
            self.approvals = 6;
            self.restart_members = 30;
        }
        self.members.sort_unstable();
        self.members.dedup();
        self.members.retain(|&m| m > 0);
        self
    }
}

/// What one scenario measured.
#[derive(Debug, Clone, Default, Serialize)]
struct Scenario {
    name: String,
    /// Bench members registered on the hub during the scenario.
    members: usize,
    /// Cluster updates the scenario performed.
    clusters: usize,
    /// Wall time of the scenario's runs (first run created → last run succeeded), seconds.
    seconds: f64,
    /// Member reported Available → the run's status marks the cluster succeeded.
    available_to_done: Summary,
    /// Member reported → the hub delivered the run's next Work (the hub's per-step overhead).
    step: Summary,
    /// Work delivered → simulated member reported (the simulation's own share).
    agent: Summary,
    /// Scenario-specific latency (approval → next Work; member created → provisioned).
    special: Option<(String, Summary)>,
    /// Other facts, in words.
    notes: Vec<String>,
    hub: Usage,
    apiserver: Usage,
    etcd: Usage,
}

struct Samplers {
    hub: Sampler,
    apiserver: Sampler,
    etcd: Sampler,
}

impl Samplers {
    fn start(fleet: &Fleet) -> Self {
        Samplers {
            hub: Sampler::start(fleet.dir(), "hub"),
            apiserver: Sampler::start(fleet.dir(), "hub-apiserver"),
            etcd: Sampler::start(fleet.dir(), "hub-etcd"),
        }
    }
    fn reset(&self) {
        self.hub.reset();
        self.apiserver.reset();
        self.etcd.reset();
    }
    fn record(&self, s: &mut Scenario) {
        s.hub = self.hub.usage();
        s.apiserver = self.apiserver.usage();
        s.etcd = self.etcd.usage();
    }
}

struct Bench {
    args: Args,
    fleet: &'static Fleet,
    client: Client,
    timeline: Arc<Timeline>,
    sim: Simulation,
    samplers: Samplers,
    timeout: Duration,
    results: Vec<Scenario>,
    /// The fleet's dashboard, signed in as its admin (when it runs one).
    dashboard: Option<dashboard::Dashboard>,
}

const STRATEGY: &str = "bench-3stages";
/// Run-page loads per fleet size.
const PAGE_LOADS: usize = 20;
const GATED_STRATEGY: &str = "bench-gated";

impl Bench {
    /// Registers members up to `target` (1-based numbers), starts their simulated agents and
    /// waits until the hub provisioned each and each has joined.
    async fn ensure_members(&mut self, target: usize) -> anyhow::Result<()> {
        let have = self.sim.members();
        if target <= have {
            return Ok(());
        }
        self.samplers.reset();
        let start = Instant::now();
        let created = objects::create_members(
            &self.client,
            have + 1,
            target,
            Duration::from_secs(self.args.heartbeat_seconds),
        )
        .await?;
        let names: Vec<String> = created.iter().map(|(n, _)| n.clone()).collect();
        self.sim.add(&names);
        let all_provisioned = self
            .timeline
            .wait(self.timeout, |t| {
                names.iter().all(|n| t.provisioned_at(n).is_some())
            })
            .await;
        anyhow::ensure!(
            all_provisioned,
            "the hub did not provision all of members {}..{} within {:?}",
            have + 1,
            target,
            self.timeout
        );
        objects::wait_until(
            Api::<MemberCluster>::all(self.client.clone()),
            &format!("{}=true", sim::BENCH_LABEL),
            &format!("{target} bench members to join"),
            self.timeout,
            |ms| {
                ms.iter()
                    .filter(|m| {
                        m.status.as_ref().is_some_and(|s| {
                            fleethub_crds::conditions::is_true(&s.conditions, "Joined")
                        })
                    })
                    .count()
                    >= target
            },
        )
        .await?;
        let provisioning: Vec<Duration> = created
            .iter()
            .filter_map(|(n, sent)| {
                Some(
                    self.timeline
                        .provisioned_at(n)?
                        .saturating_duration_since(*sent),
                )
            })
            .collect();
        let mut s = Scenario {
            name: format!("register {} members", target - have),
            members: target,
            seconds: start.elapsed().as_secs_f64(),
            special: Some((
                "member created → namespace, SA, RBAC provisioned".into(),
                summarize(&provisioning),
            )),
            ..Default::default()
        };
        self.samplers.record(&mut s);
        self.report(s);
        Ok(())
    }

    fn report(&mut self, s: Scenario) {
        eprintln!("[bench] {}", one_line(&s));
        self.results.push(s);
    }

    /// Waits for the outcome of `run`: when it succeeded, or an error saying why not.
    async fn outcome(&self, run: &str) -> anyhow::Result<Instant> {
        self.timeline
            .wait(self.timeout, |t| t.run_outcome(run).is_some())
            .await;
        match self.timeline.run_outcome(run) {
            Some(Ok(at)) => Ok(at),
            Some(Err(why)) => anyhow::bail!("UpdateRun {run} failed: {why}"),
            None => anyhow::bail!(
                "UpdateRun {run} did not complete within {:?} ({} clusters done)",
                self.timeout,
                self.timeline.done_count(run)
            ),
        }
    }

    /// One staged update over members 1..=`size`.
    async fn fleet_run(&mut self, size: usize) -> anyhow::Result<()> {
        self.ensure_members(size).await?;
        let placement = format!("bench-{size}");
        let run = format!("bench-run-{size}");
        let clusters: Vec<String> = (1..=size).map(objects::member_name).collect();
        objects::create_placement(&self.client, &placement, objects::APP_NAMESPACE, &clusters)
            .await?;
        objects::wait_placed(&self.client, &placement, 0, size, self.timeout).await?;
        self.samplers.reset();
        let start = Instant::now();
        objects::create_run(&self.client, &run, &placement, 0, STRATEGY).await?;
        let done = self.outcome(&run).await?;
        let mut s = Scenario {
            name: format!("1 run, {size} members"),
            members: self.sim.members(),
            clusters: size,
            seconds: done.saturating_duration_since(start).as_secs_f64(),
            ..Default::default()
        };
        fill(
            &mut s,
            self.timeline.run_figures(&run, &placement, 0, &clusters),
        );
        self.samplers.record(&mut s);
        if let Some(d) = &self.dashboard {
            let mut first_bytes = Vec::new();
            let mut completes = Vec::new();
            let mut bytes = 0;
            for _ in 0..PAGE_LOADS {
                let load = d.load(&format!("/runs/{run}")).await?;
                first_bytes.push(load.first_byte);
                completes.push(load.complete);
                bytes = load.bytes;
            }
            let whole = summarize(&completes);
            s.notes.push(format!(
                "dashboard run page complete in {:.0} ms p50 / {:.0} ms p99",
                whole.p50_ms, whole.p99_ms
            ));
            s.special = Some((
                format!(
                    "dashboard: run page with {size} clusters ({} KiB), signed in: time to first byte",
                    bytes / 1024
                ),
                summarize(&first_bytes),
            ));
        }
        self.report(s);
        Ok(())
    }

    /// `runs` UpdateRuns started at once, each over its own `per` members.
    async fn concurrent_runs(&mut self, runs: usize, per: usize) -> anyhow::Result<()> {
        self.ensure_members(runs * per).await?;
        let slices: Vec<(String, String, Vec<String>)> = (0..runs)
            .map(|k| {
                (
                    format!("bench-c{k:03}"),
                    format!("bench-c{k:03}-run"),
                    (k * per + 1..=(k + 1) * per)
                        .map(objects::member_name)
                        .collect(),
                )
            })
            .collect();
        let client = self.client.clone();
        let created: Vec<anyhow::Result<()>> =
            futures::stream::iter(slices.iter())
                .map(|(p, _, cs)| {
                    let client = client.clone();
                    async move {
                        objects::create_placement(&client, p, objects::APP_NAMESPACE, cs).await
                    }
                })
                .buffer_unordered(16)
                .collect()
                .await;
        created.into_iter().collect::<anyhow::Result<Vec<()>>>()?;
        let ours = |p: &str| p.starts_with("bench-c");
        objects::wait_until(
            Api::<ResourceSnapshot>::all(self.client.clone()),
            names::PLACEMENT_LABEL,
            &format!("the first snapshots of {runs} placements"),
            self.timeout,
            |s| s.iter().filter(|s| ours(&s.spec.placement_name)).count() >= runs,
        )
        .await?;
        objects::wait_until(
            Api::<Binding>::all(self.client.clone()),
            names::PLACEMENT_LABEL,
            &format!("{} bindings of {runs} placements", runs * per),
            self.timeout,
            |b| b.iter().filter(|b| ours(&b.spec.placement_name)).count() >= runs * per,
        )
        .await?;
        self.samplers.reset();
        let start = Instant::now();
        let started: Vec<anyhow::Result<()>> = futures::stream::iter(slices.iter())
            .map(|(p, r, _)| {
                let client = client.clone();
                async move { objects::create_run(&client, r, p, 0, STRATEGY).await }
            })
            .buffer_unordered(16)
            .collect()
            .await;
        started.into_iter().collect::<anyhow::Result<Vec<()>>>()?;
        let mut last = start;
        let mut figures = RunFigures::default();
        let mut per_run = Vec::new();
        for (p, r, cs) in &slices {
            let done = self.outcome(r).await?;
            last = last.max(done);
            per_run.push(done.saturating_duration_since(start));
            figures.extend(self.timeline.run_figures(r, p, 0, cs));
        }
        let mut s = Scenario {
            name: format!("{runs} concurrent runs × {per} members"),
            members: self.sim.members(),
            clusters: runs * per,
            seconds: last.saturating_duration_since(start).as_secs_f64(),
            special: Some(("run created → run succeeded".into(), summarize(&per_run))),
            ..Default::default()
        };
        fill(&mut s, figures);
        self.samplers.record(&mut s);
        self.report(s);
        Ok(())
    }

    /// Gated runs over 6 members: Approval gates after stages s1 and s2; each approval is
    /// timed until the next stage's first cluster receives its Work.
    async fn approvals(&mut self, samples: usize) -> anyhow::Result<()> {
        const MEMBERS: usize = 6;
        self.ensure_members(MEMBERS).await?;
        let placement = "bench-gated";
        let clusters: Vec<String> = (1..=MEMBERS).map(objects::member_name).collect();
        objects::create_strategy(&self.client, GATED_STRATEGY, &self.args.concurrency, true)
            .await?;
        objects::set_content(&self.client, objects::GATED_NAMESPACE, "0").await?;
        objects::create_placement(&self.client, placement, objects::GATED_NAMESPACE, &clusters)
            .await?;
        self.samplers.reset();
        let start = Instant::now();
        let mut latencies = Vec::new();
        let mut figures = RunFigures::default();
        let runs = samples.div_ceil(2);
        for j in 0..runs {
            let index = j as i64;
            objects::set_content(&self.client, objects::GATED_NAMESPACE, &j.to_string()).await?;
            objects::wait_placed(&self.client, placement, j as u64, MEMBERS, self.timeout).await?;
            let run = format!("bench-gated-{j}");
            objects::create_run(&self.client, &run, placement, index, GATED_STRATEGY).await?;
            for (stage, next) in [("s1", "s2"), ("s2", "s3")] {
                let request = names::approval_request_name(&run, stage);
                objects::wait_until(
                    Api::<ApprovalRequest>::all(self.client.clone()),
                    &format!("{}={run}", names::UPDATE_RUN_LABEL),
                    &format!("ApprovalRequest {request}"),
                    self.timeout,
                    |a| a.iter().any(|a| a.name_any() == request),
                )
                .await?;
                let next_clusters: Vec<String> = (1..=MEMBERS)
                    .filter(|&i| objects::stage_of(i) == next)
                    .map(objects::member_name)
                    .collect();
                let approved = Instant::now();
                objects::approve(&self.client, &request).await?;
                let first_next = |t: &Timeline| {
                    t.works_of(placement, index)
                        .into_iter()
                        .filter(|(c, _)| next_clusters.contains(c))
                        .map(|(_, at)| at)
                        .min()
                };
                self.timeline
                    .wait(self.timeout, |t| first_next(t).is_some())
                    .await;
                let at = first_next(&self.timeline).with_context(|| {
                    format!("no cluster of stage {next} of {run} started after approving {request}")
                })?;
                latencies.push(at.saturating_duration_since(approved));
            }
            self.outcome(&run).await?;
            figures.extend(self.timeline.run_figures(&run, placement, index, &clusters));
        }
        let mut s = Scenario {
            name: format!("{runs} gated runs, {MEMBERS} members"),
            members: self.sim.members(),
            clusters: runs * MEMBERS,
            seconds: start.elapsed().as_secs_f64(),
            special: Some((
                "approval → next stage's first Work".into(),
                summarize(&latencies),
            )),
            ..Default::default()
        };
        fill(&mut s, figures);
        self.samplers.record(&mut s);
        self.report(s);
        Ok(())
    }

    /// A run over `size` members during which the hub is SIGKILLed (once a third of the
    /// clusters are done) and started again.
    async fn restart(&mut self, size: usize) -> anyhow::Result<()> {
        self.ensure_members(size).await?;
        let placement = "bench-restart";
        let run = "bench-restart-run";
        let clusters: Vec<String> = (1..=size).map(objects::member_name).collect();
        objects::create_placement(&self.client, placement, objects::APP_NAMESPACE, &clusters)
            .await?;
        objects::wait_placed(&self.client, placement, 0, size, self.timeout).await?;
        self.samplers.reset();
        let start = Instant::now();
        objects::create_run(&self.client, run, placement, 0, STRATEGY).await?;
        let third = size.div_ceil(3);
        self.timeline
            .wait(self.timeout, |t| {
                t.done_count(run) >= third || t.run_outcome(run).is_some()
            })
            .await;
        let done_before = self.timeline.done_count(run);
        let fleet = self.fleet;
        let killed = Instant::now();
        tokio::task::spawn_blocking(move || fleet.kill("hub")).await??;
        let restarting = Instant::now();
        tokio::task::spawn_blocking(move || fleet.start_fleethub()).await??;
        let ready = Instant::now();
        let done = self.outcome(run).await?;
        let resumed = self
            .timeline
            .first_progress_after(run, placement, 0, restarting)
            .context("the run made no progress after the hub restarted")?;
        let mut s = Scenario {
            name: format!("hub restart during a {size}-member run"),
            members: self.sim.members(),
            clusters: size,
            seconds: done.saturating_duration_since(start).as_secs_f64(),
            special: Some((
                "hub started → run progressing again".into(),
                summarize(&[resumed.saturating_duration_since(restarting)]),
            )),
            notes: vec![
                format!("killed after {done_before}/{size} clusters were done"),
                format!(
                    "kill took {:.1}s; start to /readyz {:.1}s; ready → progress {:.2}s",
                    restarting.saturating_duration_since(killed).as_secs_f64(),
                    ready.saturating_duration_since(restarting).as_secs_f64(),
                    resumed.saturating_duration_since(ready).as_secs_f64()
                ),
            ],
            ..Default::default()
        };
        fill(
            &mut s,
            self.timeline.run_figures(run, placement, 0, &clusters),
        );
        self.samplers.record(&mut s);
        self.report(s);
        Ok(())
    }

    /// Every scenario in turn. One that fails is reported and its runs are deleted, and the
    /// next one still runs (a 1,000-cluster run that misses its deadline says nothing about
    /// 100 small runs); the result is an error naming every scenario that failed.
    async fn scenarios(&mut self) -> anyhow::Result<()> {
        objects::set_content(&self.client, objects::APP_NAMESPACE, "1").await?;
        objects::create_strategy(&self.client, STRATEGY, &self.args.concurrency, false).await?;
        let mut failed = Vec::new();
        for size in self.args.members.clone() {
            let outcome = self.fleet_run(size).await;
            self.settle(&format!("1 run, {size} members"), outcome, &mut failed)
                .await?;
        }
        if self.args.approvals > 0 {
            let outcome = self.approvals(self.args.approvals).await;
            self.settle("gated runs", outcome, &mut failed).await?;
        }
        if self.args.restart_members > 0 {
            let outcome = self.restart(self.args.restart_members).await;
            self.settle("hub restart", outcome, &mut failed).await?;
        }
        if self.args.runs > 0 {
            let outcome = self
                .concurrent_runs(self.args.runs, self.args.clusters_per_run)
                .await;
            self.settle("concurrent runs", outcome, &mut failed).await?;
        }
        match failed.is_empty() {
            true => Ok(()),
            false => anyhow::bail!("{}", failed.join("; ")),
        }
    }

    /// Records a failed scenario and deletes its runs, so they do not load the next one.
    async fn settle(
        &mut self,
        scenario: &str,
        outcome: anyhow::Result<()>,
        failed: &mut Vec<String>,
    ) -> anyhow::Result<()> {
        if let Err(e) = outcome {
            eprintln!("[bench] scenario '{scenario}' FAILED: {e:#}");
            failed.push(format!("{scenario}: {e:#}"));
            objects::delete_runs(&self.client)
                .await
                .context("deleting the failed scenario's runs")?;
        }
        Ok(())
    }
}

fn fill(s: &mut Scenario, f: RunFigures) {
    s.available_to_done = summarize(&f.available_to_done);
    s.step = summarize(&f.step);
    s.agent = summarize(&f.agent);
}

fn ms3(s: &Summary) -> String {
    if s.count == 0 {
        "–".into()
    } else {
        format!("{:.0} / {:.0} / {:.0}", s.p50_ms, s.p99_ms, s.max_ms)
    }
}

fn one_line(s: &Scenario) -> String {
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

/// The figures as Markdown tables (they go into BENCHMARKS.md as printed).
fn table(results: &[Scenario]) -> String {
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
        if s.agent.count > 0 {
            rows.push(("Work delivered → simulated member reported".into(), s.agent));
        }
        for (what, sum) in rows {
            out.push_str(&format!(
                "| {} | {what} | {} | {:.0} | {:.0} | {:.0} |\n",
                s.name, sum.count, sum.p50_ms, sum.p99_ms, sum.max_ms
            ));
        }
    }
    for s in results.iter().filter(|s| !s.notes.is_empty()) {
        out.push_str(&format!("\n{}: {}\n", s.name, s.notes.join("; ")));
    }
    out
}

fn conditions(fleet: &Fleet) -> Vec<String> {
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
struct Report<'a> {
    command: String,
    conditions_before: Vec<String>,
    conditions_after: Vec<String>,
    watch: WatchMode,
    heartbeat_seconds: u64,
    concurrency: &'a str,
    scenarios: &'a [Scenario],
    status_write_errors: u64,
    cleanup_seconds: Option<f64>,
    error: Option<String>,
}

async fn bench(args: Args) -> anyhow::Result<bool> {
    let fleet = Fleet::get().context("finding the local fleet")?;
    let client = fleet.hub().await?;
    let before = conditions(fleet);
    for c in &before {
        eprintln!("[bench] {c}");
    }
    let cleanup_timeout = Duration::from_secs(args.cleanup_timeout_seconds);
    // Leftovers of an interrupted earlier run would skew the figures.
    let left = objects::clean_up(&client, cleanup_timeout)
        .await
        .context("removing leftovers of an earlier bench")?;
    eprintln!("[bench] fleet clean ({:.1}s)", left.as_secs_f64());

    let timeline = Arc::new(Timeline::default());
    let watches = [
        sim::watch_runs(client.clone(), timeline.clone()),
        sim::watch_provisioning(client.clone(), timeline.clone()),
    ];
    let sim = Simulation::new(
        client.clone(),
        timeline.clone(),
        args.watch,
        Duration::from_secs(args.heartbeat_seconds),
    );
    let dashboard = match dashboard::Dashboard::sign_in(fleet.dir()).await {
        Ok(Some(d)) => Some(d),
        Ok(None) => {
            eprintln!("[bench] no dashboard runs in this fleet: its page loads are not measured");
            None
        }
        Err(e) => {
            eprintln!(
                "[bench] cannot sign in to the dashboard ({e:#}): its page loads are not measured"
            );
            None
        }
    };
    let mut bench = Bench {
        dashboard,
        timeout: Duration::from_secs(args.timeout_seconds),
        samplers: Samplers::start(fleet),
        args: args.clone(),
        fleet,
        client: client.clone(),
        timeline: timeline.clone(),
        sim,
        results: Vec::new(),
    };
    let outcome = bench.scenarios().await;
    bench.sim.stop();
    for w in &watches {
        w.abort();
    }
    if let Err(e) = &outcome {
        eprintln!("[bench] FAILED: {e:#}");
    }
    eprintln!("[bench] cleaning up");
    let cleanup = objects::clean_up(&client, cleanup_timeout).await;
    match &cleanup {
        Ok(d) => eprintln!("[bench] cleaned up in {:.1}s", d.as_secs_f64()),
        Err(e) => eprintln!("[bench] clean-up FAILED: {e:#}"),
    }
    let after = conditions(fleet);
    let errors = timeline.status_write_errors();

    println!("\n## fleethub-bench results\n");
    println!(
        "command: `{}`",
        std::env::args().collect::<Vec<_>>().join(" ")
    );
    println!(
        "simulated members: watch {:?}, heartbeat every {}s; stage maxConcurrency {}; 3 stages, no gates (except the gated runs)",
        args.watch, args.heartbeat_seconds, args.concurrency
    );
    for c in &before {
        println!("before: {c}");
    }
    for c in &after {
        println!("after: {c}");
    }
    println!();
    print!("{}", table(&bench.results));
    if errors > 0 {
        println!("\nsimulated status writes that failed after retries: {errors}");
    }
    if let Ok(d) = &cleanup {
        println!("\nclean-up: {:.1}s", d.as_secs_f64());
    }
    if let Some(path) = &args.json {
        let report = Report {
            command: std::env::args().collect::<Vec<_>>().join(" "),
            conditions_before: before,
            conditions_after: after,
            watch: args.watch,
            heartbeat_seconds: args.heartbeat_seconds,
            concurrency: &args.concurrency,
            scenarios: &bench.results,
            status_write_errors: errors,
            cleanup_seconds: cleanup.as_ref().ok().map(|d| d.as_secs_f64()),
            error: outcome.as_ref().err().map(|e| format!("{e:#}")),
        };
        std::fs::write(path, serde_json::to_string_pretty(&report)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    outcome?;
    cleanup?;
    Ok(errors == 0)
}

#[tokio::main]
async fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let args = Args::parse().with_profile();
    match bench(args).await {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => {
            eprintln!("fleethub-bench: some simulated status writes failed");
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("fleethub-bench: {e:#}");
            ExitCode::FAILURE
        }
    }
}
