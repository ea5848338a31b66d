//! The scenarios: one staged update per fleet size, many concurrent runs, gated runs timing
//! approvals, and a hub restart in the middle of a run. Each records one [`Scenario`].

use std::time::Instant;

use anyhow::Context as _;
use fleethub_crds::{ApprovalRequest, Binding, ResourceSnapshot, names};
use futures::StreamExt;
use kube::ResourceExt;
use kube::api::Api;

use crate::report::{Scenario, fill};
use crate::stats::summarize;
use crate::timeline::{RunFigures, Timeline};
use crate::{Bench, GATED_STRATEGY, PAGE_LOADS, STRATEGY, objects};

impl Bench {
    /// One staged update over members 1..=`size`.
    pub(crate) async fn fleet_run(&mut self, size: usize) -> anyhow::Result<()> {
        self.ensure_members(size).await?;
        let placement = format!("bench-{size}");
        let run = format!("bench-run-{size}");
        let clusters: Vec<String> = (1..=size).map(objects::member_name).collect();
        objects::create_placement(&self.client, &placement, objects::APP_NAMESPACE, &clusters)
            .await?;
        objects::wait_placed(&self.client, &placement, 0, size, self.timeout).await?;
        self.samplers.reset().await;
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
        self.samplers.record(&mut s).await;
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
    pub(crate) async fn concurrent_runs(&mut self, runs: usize, per: usize) -> anyhow::Result<()> {
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
        self.samplers.reset().await;
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
        self.samplers.record(&mut s).await;
        self.report(s);
        Ok(())
    }

    /// Gated runs over 6 members: Approval gates after stages s1 and s2; each approval is
    /// timed until the next stage's first cluster receives its Work.
    pub(crate) async fn approvals(&mut self, samples: usize) -> anyhow::Result<()> {
        const MEMBERS: usize = 6;
        self.ensure_members(MEMBERS).await?;
        let placement = "bench-gated";
        let clusters: Vec<String> = (1..=MEMBERS).map(objects::member_name).collect();
        objects::create_strategy(&self.client, GATED_STRATEGY, &self.args.concurrency, true)
            .await?;
        objects::set_content(&self.client, objects::GATED_NAMESPACE, "0").await?;
        objects::create_placement(&self.client, placement, objects::GATED_NAMESPACE, &clusters)
            .await?;
        self.samplers.reset().await;
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
        self.samplers.record(&mut s).await;
        self.report(s);
        Ok(())
    }

    /// A run over `size` members during which the hub is SIGKILLed (once a third of the
    /// clusters are done) and started again.
    pub(crate) async fn restart(&mut self, size: usize, restarts: usize) -> anyhow::Result<()> {
        self.ensure_members(size).await?;
        let placement = "bench-restart";
        let run = "bench-restart-run";
        let clusters: Vec<String> = (1..=size).map(objects::member_name).collect();
        objects::create_placement(&self.client, placement, objects::APP_NAMESPACE, &clusters)
            .await?;
        objects::wait_placed(&self.client, placement, 0, size, self.timeout).await?;
        self.samplers.reset().await;
        let start = Instant::now();
        objects::create_run(&self.client, run, placement, 0, STRATEGY).await?;
        let mut resumed = Vec::new();
        let mut notes = Vec::new();
        for k in 1..=restarts {
            // Restart k happens once k/(restarts+1) of the clusters are done.
            let target = (size * k).div_ceil(restarts + 1);
            self.timeline
                .wait(self.timeout, |t| {
                    t.done_count(run) >= target || t.run_outcome(run).is_some()
                })
                .await;
            if self.timeline.run_outcome(run).is_some() {
                notes.push(format!("the run ended before restart {k}"));
                break;
            }
            let done_before = self.timeline.done_count(run);
            let fleet = self.fleet;
            // The same build again (a release hub, say, rather than the script's debug default).
            let bins = crate::process::fleet_bins(fleet.dir(), "hub");
            let killed = Instant::now();
            tokio::task::spawn_blocking(move || fleet.kill("hub")).await??;
            let restarting = Instant::now();
            // What the API server holds once the old hub is dead: progress is what is written
            // after it.
            let written_before = objects::current_revision(&self.client).await?;
            tokio::task::spawn_blocking(move || match bins {
                Some(bins) => fleet.start_fleethub_from(&bins),
                None => fleet.start_fleethub(),
            })
            .await??;
            let ready = Instant::now();
            // The new hub process's start: the script's own steps before it (a kubectl call)
            // are not the hub's.
            let started = crate::process::fleet_pid(fleet.dir(), "hub")
                .and_then(crate::process::started_at)
                .unwrap_or(restarting)
                .max(restarting);
            let progress = self
                .timeline
                .wait(self.timeout, |t| {
                    t.first_progress_after(run, placement, 0, started, written_before)
                        .is_some()
                        || t.run_outcome(run).is_some()
                })
                .await;
            let first = self
                .timeline
                .first_progress_after(run, placement, 0, started, written_before)
                .filter(|_| progress)
                .context("the run made no progress after the hub restarted")?;
            resumed.push(first.saturating_duration_since(started));
            notes.push(format!(
                "restart {k}: killed after {done_before}/{size} clusters were done; kill took {:.1}s; script start → hub process {:.2}s; process → progress {:.2}s; script start → its end (/readyz and agents checked) {:.1}s",
                restarting.saturating_duration_since(killed).as_secs_f64(),
                started.saturating_duration_since(restarting).as_secs_f64(),
                first.saturating_duration_since(started).as_secs_f64(),
                ready.saturating_duration_since(restarting).as_secs_f64(),
            ));
        }
        let done = self.outcome(run).await?;
        let mut s = Scenario {
            name: format!("{restarts} hub restart(s) during a {size}-member run"),
            members: self.sim.members(),
            clusters: size,
            seconds: done.saturating_duration_since(start).as_secs_f64(),
            special: Some((
                "hub process started → run progressing again".into(),
                summarize(&resumed),
            )),
            notes,
            ..Default::default()
        };
        fill(
            &mut s,
            self.timeline.run_figures(run, placement, 0, &clusters),
        );
        self.samplers.record(&mut s).await;
        self.report(s);
        Ok(())
    }
}
