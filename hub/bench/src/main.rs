//! `fleethub-bench`: the fleethub benchmark. Runs against the local fleet (`deploy/local/fleet`),
//! registers many simulated member clusters on its hub (see `sim.rs`), drives staged updates
//! across them and prints what it measured: how fast the hub notices a finished member and an
//! approval, its overhead per cluster step, full run times for fleets of 10, 100 and 1,000
//! members, many concurrent runs, a hub restart in the middle of a run, how soon a regressed
//! cluster holds a run and how long a rollback of 100 clusters takes, and the hub's CPU time
//! and memory throughout. It cleans up everything it created, and exits non-zero when a run does
//! not complete; it never judges speed. See BENCHMARKS.md.
#![forbid(unsafe_code)]

mod autoupdate;
mod dashboard;
mod fleet_objects;
mod in_cluster;
mod member_path;
mod member_path_strategies;
mod metric_gates;
mod overrides;
mod process;
mod regressions;
mod report;
mod requests;
mod scenarios;
mod sim;
mod stats;
mod timeline;

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use clap::Parser;
use fleethub_crds::MemberCluster;
use fleethub_testkit::Fleet;
use kube::Client;
use kube::api::Api;

use fleet_objects as objects;
use report::{Report, Samplers, Scenario, conditions, one_line, table};
use sim::{Simulation, WatchMode};
use stats::summarize;
use timeline::Timeline;

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
    /// Concurrent UpdateRuns, each of one member followed by a metric gate on the fleet's
    /// Prometheus (0: skip): the queries per second the hub sends, its CPU and memory, and how
    /// long after their cluster the gates pass.
    #[arg(long, default_value_t = 0)]
    metric_gate_runs: usize,
    /// Members of one AutoUpdatePolicy's placement (0: skip): a version from its push to the
    /// fleet's registry to done everywhere, and a broken one from its push to rolled back.
    #[arg(long, default_value_t = 0)]
    autoupdate_members: usize,
    /// Changes sent through the fleet's real members and agents (0: skip): hub Work written →
    /// object on the member, workload available → reported, drift restored, a one-object
    /// change in a 500-object Work, and 200 Works changed at once on one member.
    #[arg(long, default_value_t = 0)]
    member_path: usize,
    /// Image pushes on the in-cluster fleet (0: skip): each a new version tag pushed to the
    /// fleet's registry, timed to the demo app's pods Ready with it on each real member, through
    /// an AutoUpdatePolicy and a staged run without gates.
    #[arg(long, default_value_t = 0)]
    in_cluster_pushes: usize,
    /// Deletions of the in-cluster hub's leader pod (0: skip): timed to another pod holding the
    /// Lease and to a run created right after the deletion having its first status.
    #[arg(long, default_value_t = 0)]
    in_cluster_leader_kills: usize,
    /// Members of one placement rolled out twice (0: skip): a run without overrides, then a
    /// run with 10 ResourceOverrides of 5 rules each (time, hub CPU and peak RSS of each).
    #[arg(long, default_value_t = 0)]
    override_members: usize,
    /// Only measure, in this process and without a fleet, the work generator's override step
    /// for this many clusters (10 overrides × 5 rules, and none), then exit.
    #[arg(long, default_value_t = 0)]
    override_cost: usize,
    /// Passes of `--override-cost` (the median is reported).
    #[arg(long, default_value_t = 20)]
    override_cost_passes: usize,
    /// Regression samples (0: skip), on 100 members: a run waiting in its soak, one of its
    /// updated clusters reported not available then available again, N times: timed to the run
    /// held (Progressing reason ClusterRegressed) and released; then a run of all 100 with
    /// `onFailure: Rollback` whose cluster stays regressed past its 2 s healthTimeout: its
    /// failure timed to its rollback run's success.
    #[arg(long, default_value_t = 0)]
    regressions: usize,
    /// Members of the run during which the hub is killed and restarted (0: skip).
    #[arg(long, default_value_t = 100)]
    restart_members: usize,
    /// Hub restarts during that run, spread over its progress (each one a sample of "hub
    /// started → run progressing again").
    #[arg(long, default_value_t = 1)]
    restarts: usize,
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
        self.samplers.reset().await;
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
        let registered = start.elapsed();
        let namespaces = names
            .iter()
            .map(|n| fleethub_crds::names::member_namespace(n))
            .collect();
        objects::wait_namespaces_settled(&self.client, &namespaces, self.timeout).await?;
        let settled = start.elapsed() - registered;
        eprintln!(
            "[bench] the controller manager filled the new members' namespaces {:.1}s after they registered",
            settled.as_secs_f64()
        );
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
            seconds: registered.as_secs_f64(),
            notes: vec![format!(
                "the hub's controller manager filled the new members' namespaces (ServiceAccount `default`, ConfigMap `kube-root-ca.crt`) {:.1} s after they registered; the next scenario starts after that",
                settled.as_secs_f64()
            )],
            special: Some((
                "member created → namespace, SA, RBAC provisioned".into(),
                summarize(&provisioning),
            )),
            ..Default::default()
        };
        self.samplers.record(&mut s).await;
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

    /// Every scenario in turn. One that fails is reported and its runs are deleted, and the
    /// next one still runs (a 1,000-cluster run that misses its deadline says nothing about
    /// 100 small runs); the result is an error naming every scenario that failed.
    async fn scenarios(&mut self) -> anyhow::Result<()> {
        objects::set_content(&self.client, objects::APP_NAMESPACE, "1").await?;
        objects::create_strategy(&self.client, STRATEGY, &self.args.concurrency, false).await?;
        let mut failed = Vec::new();
        if self.args.member_path > 0 {
            let outcome = self.member_path(self.args.member_path).await;
            self.settle("member path", outcome, &mut failed).await?;
        }
        for size in self.args.members.clone() {
            let outcome = self.fleet_run(size).await;
            self.settle(&format!("1 run, {size} members"), outcome, &mut failed)
                .await?;
        }
        if self.args.approvals > 0 {
            let outcome = self.approvals(self.args.approvals).await;
            self.settle("gated runs", outcome, &mut failed).await?;
        }
        if self.args.override_members > 0 {
            let outcome = self.override_runs(self.args.override_members).await;
            self.settle("overrides", outcome, &mut failed).await?;
        }
        if self.args.restart_members > 0 {
            let outcome = self
                .restart(self.args.restart_members, self.args.restarts.max(1))
                .await;
            self.settle("hub restart", outcome, &mut failed).await?;
        }
        if self.args.runs > 0 {
            let outcome = self
                .concurrent_runs(self.args.runs, self.args.clusters_per_run)
                .await;
            self.settle("concurrent runs", outcome, &mut failed).await?;
        }
        if self.args.autoupdate_members > 0 {
            let outcome = self.auto_update(self.args.autoupdate_members).await;
            self.settle("auto-update", outcome, &mut failed).await?;
        }
        if self.args.in_cluster_pushes > 0 || self.args.in_cluster_leader_kills > 0 {
            let outcome = self
                .in_cluster(
                    self.args.in_cluster_pushes,
                    self.args.in_cluster_leader_kills,
                )
                .await;
            self.settle("in-cluster", outcome, &mut failed).await?;
        }
        if self.args.metric_gate_runs > 0 {
            let outcome = self.metric_gates(self.args.metric_gate_runs).await;
            self.settle("metric gates", outcome, &mut failed).await?;
        }
        if self.args.regressions > 0 {
            let outcome = self.regression_hold(self.args.regressions).await;
            self.settle("regression → hold", outcome, &mut failed)
                .await?;
            let outcome = self.rollback_of_all().await;
            self.settle("rollback", outcome, &mut failed).await?;
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
        samplers: Samplers::start(fleet, client.clone()),
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
    if args.override_cost > 0 {
        return match overrides::application_cost(args.override_cost, args.override_cost_passes) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("fleethub-bench: {e:#}");
                ExitCode::FAILURE
            }
        };
    }
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
