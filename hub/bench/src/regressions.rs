//! The regression scenarios (`--regressions N`), on 100 simulated members:
//!
//! - *regression → hold*: a run of two stages (`canary`: members 1–5, then a 1 h soak; `rest`:
//!   the other 95) waits in its soak. One canary's Work is then reported `Available=False` for
//!   its current generation, as its agent would, and the bench times that write's answer → the
//!   run showing `Progressing=False` with reason `ClusterRegressed` (a watch of the run); then
//!   the Work is reported available again, timed to the run no longer showing it. N times on
//!   the same run, the canaries in turn. A watch of the placement's Bindings checks that none of
//!   stage `rest` is pointed at the run meanwhile.
//! - *rollback of 100 clusters*: every member is rolled to snapshot 0 by a plain run; then a
//!   run of snapshot 1 with `onFailure: Rollback` (one stage of all 100 at once, then a 1 h
//!   soak). Its `healthTimeout` is 1m while it updates and 2s once it soaks (see
//!   [`UPDATE_HEALTH_TIMEOUT`]). In its soak one member's Work is reported `Available=False` and
//!   stays so: the cluster fails 2 s later, the run fails, and the hub's rollback run
//!   (`<run>-rollback`, with the 2 s healthTimeout) takes the clusters back to snapshot 0.
//!   Timed from the failed run's `Succeeded=False` to the rollback run's `Succeeded=True`, by
//!   the conditions' lastTransitionTime (the hub's clock, whole seconds) and by this process's
//!   watches.
//!
//! The simulated members report every new Work generation available (`sim.rs`), the rollback's
//! too; only the bench's own writes here report a Work not available.

use std::collections::{BTreeSet, HashSet};
use std::time::Instant;

use anyhow::Context as _;
use fleethub_crds::conditions::find;
use fleethub_crds::field_manager::MEMBER_AGENT;
use fleethub_crds::strategy::StageTaskType;
use fleethub_crds::update_run::{PROGRESSING, REGRESSED, SUCCEEDED, WAIT_TIME_ELAPSED, reason};
use fleethub_crds::update_run_plan::{self, UpdateRunPlan};
use fleethub_crds::work::{self, APPLIED, AVAILABLE};
use fleethub_crds::{Binding, Placement, StagedUpdateStrategy, UpdateRun, Work, names};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams};
use kube::{Api, Client};
use serde_json::{Value, json};

use crate::fleet_objects::{ORDER_LABEL, REGRESSION_NAMESPACE, ROLLBACK_NAMESPACE};
use crate::report::Scenario;
use crate::sim::BENCH_LABEL;
use crate::stats::{Summary, summarize};
use crate::{Bench, STRATEGY, objects};

mod watches;
use watches::{BindingWatch, RunWatch};

/// Members of both scenarios.
const MEMBERS: usize = 100;
/// Members of the hold scenario's first stage (the rest are its second).
const CANARIES: usize = 5;
/// The soak after the first stage: longer than the scenario, so the run sits in it.
const SOAK: &str = "1h";

const HOLD_PLACEMENT: &str = "bench-regress";
const HOLD_STRATEGY: &str = "bench-regress-2stages";
const HOLD_RUN: &str = "bench-regress-run";
/// The hold run's healthTimeout: a regression never lasts long enough to fail its cluster.
const HOLD_HEALTH_TIMEOUT: &str = "1h";

const ROLLBACK_PLACEMENT: &str = "bench-rollback";
const ROLLBACK_STRATEGY: &str = "bench-rollback-1stage";
/// The plain run that brings every member to snapshot 0.
const FIRST_RUN: &str = "bench-rollback-0";
/// The run of snapshot 1 that fails and rolls back.
const FAILING_RUN: &str = "bench-rollback-1";
/// The failing run's healthTimeout once it soaks: how long its cluster stays regressed before
/// it fails (the rollback run inherits it).
const ROLLBACK_HEALTH_TIMEOUT: &str = "2s";
/// The failing run's healthTimeout while it updates its 100 clusters at once: with 2 s, the
/// debug hub did not write and judge 100 Works in time (each cluster's start is recorded in
/// whole seconds, so 2 s leaves it 1–2 s), and the run failed before its soak. The hub reads
/// `spec.healthTimeout` on every reconcile, so it is lowered once the run soaks.
const UPDATE_HEALTH_TIMEOUT: &str = "1m";

/// What the bench's simulated member says of a workload that lost its replicas.
const UNAVAILABLE: &str = "deployment app/web: 0/2 replicas available";

impl Bench {
    /// The regression → hold scenario, `samples` regressions and recoveries on one run.
    pub(crate) async fn regression_hold(&mut self, samples: usize) -> anyhow::Result<()> {
        self.ensure_members(MEMBERS).await?;
        let clusters: Vec<String> = (1..=MEMBERS).map(objects::member_name).collect();
        objects::set_content(&self.client, REGRESSION_NAMESPACE, "0").await?;
        create_hold_strategy(&self.client, &self.args.concurrency).await?;
        objects::create_placement(
            &self.client,
            HOLD_PLACEMENT,
            REGRESSION_NAMESPACE,
            &clusters,
        )
        .await?;
        let outcome = async {
            objects::wait_placed(&self.client, HOLD_PLACEMENT, 0, MEMBERS, self.timeout).await?;
            let (canaries, rest) = clusters.split_at(CANARIES);
            self.hold_samples(samples, canaries, rest).await
        }
        .await;
        let cleaned = delete(&self.client, &[HOLD_RUN], HOLD_PLACEMENT).await;
        outcome.and(cleaned)
    }

    async fn hold_samples(
        &mut self,
        samples: usize,
        canaries: &[String],
        rest: &[String],
    ) -> anyhow::Result<()> {
        let bindings =
            BindingWatch::start(&self.client, HOLD_PLACEMENT, HOLD_RUN, rest, self.timeout).await?;
        let run = RunWatch::start(&self.client, HOLD_RUN);
        let created = Instant::now();
        create_run(
            &self.client,
            HOLD_RUN,
            HOLD_PLACEMENT,
            0,
            HOLD_STRATEGY,
            json!({"healthTimeout": HOLD_HEALTH_TIMEOUT}),
        )
        .await?;
        let (soaking, waiting) = run
            .first(created, self.timeout, "its soak after stage canary", |r| {
                in_soak(r, "canary")
            })
            .await?;
        waiting.map_err(|why| anyhow::anyhow!("UpdateRun {HOLD_RUN} failed: {why}"))?;
        eprintln!(
            "[bench] {HOLD_RUN} soaks after stage canary {:.1}s after it was created",
            soaking.saturating_duration_since(created).as_secs_f64()
        );

        self.samplers.reset().await;
        let start = Instant::now();
        let (mut holds, mut recoveries) = (Vec::new(), Vec::new());
        let (mut paused, mut flagged) = (0, 0);
        for k in 0..samples {
            let member = &canaries[k % canaries.len()];
            let (sent, answered) =
                report_health(&self.client, member, HOLD_PLACEMENT, false).await?;
            let (at, shown) = run
                .first(
                    sent,
                    self.timeout,
                    "Progressing reason ClusterRegressed",
                    |r| held(r, member),
                )
                .await?;
            let shown = shown.map_err(|why| {
                anyhow::anyhow!("UpdateRun {HOLD_RUN} failed after {member} regressed: {why}")
            })?;
            holds.push(at.saturating_duration_since(answered));
            paused += usize::from(shown.soak_paused);
            flagged += usize::from(shown.cluster_regressed);

            let (sent, answered) =
                report_health(&self.client, member, HOLD_PLACEMENT, true).await?;
            let (at, released) = run
                .first(sent, self.timeout, "the hold to end", released)
                .await?;
            released.map_err(|why| {
                anyhow::anyhow!("UpdateRun {HOLD_RUN} failed after {member} recovered: {why}")
            })?;
            recoveries.push(at.saturating_duration_since(answered));
        }
        let seconds = start.elapsed().as_secs_f64();

        // The watch saw every change of the placement's Bindings; a list at the end checks it.
        let listed = Api::<Binding>::all(self.client.clone())
            .list(
                &ListParams::default()
                    .labels(&format!("{}={HOLD_PLACEMENT}", names::PLACEMENT_LABEL)),
            )
            .await?;
        let rest_set: HashSet<&str> = rest.iter().map(String::as_str).collect();
        let mut pointed = bindings.pointed();
        pointed.extend(
            listed
                .items
                .iter()
                .filter(|b| {
                    rest_set.contains(b.spec.target_cluster.as_str())
                        && b.spec.update_run_name.as_deref() == Some(HOLD_RUN)
                })
                .map(|b| b.spec.target_cluster.clone()),
        );
        let events = bindings.events();
        drop(bindings);
        anyhow::ensure!(
            pointed.is_empty(),
            "Bindings of stage rest were pointed at {HOLD_RUN} while it was held or soaking: {}",
            pointed.into_iter().collect::<Vec<_>>().join(", ")
        );

        let hold = summarize(&holds);
        let recovery = summarize(&recoveries);
        let mut s = Scenario {
            name: format!("regression → hold, {MEMBERS} members"),
            members: self.sim.members(),
            seconds,
            special: Some((
                "Work Available=False written → run Progressing=False, reason ClusterRegressed"
                    .into(),
                hold,
            )),
            more: vec![(
                "Work Available=True written → run no longer ClusterRegressed".into(),
                recovery,
            )],
            notes: vec![
                format!("regression → hold ms p50 / p90 / p99 / max: {}", ms4(&hold)),
                format!("recovery ms p50 / p90 / p99 / max: {}", ms4(&recovery)),
                format!(
                    "{samples} regressions of the canaries in turn ({CANARIES} members, stage canary, in its {SOAK} soak); the status that showed the hold also showed the soak paused in {paused} and the cluster Regressed=True in {flagged}"
                ),
                format!(
                    "Bindings of stage rest ({} clusters) pointed at the run: 0 (a watch of the placement's Bindings from before the run was created saw {events} changes; a list at the end agrees)",
                    rest.len()
                ),
            ],
            ..Default::default()
        };
        self.samplers.record(&mut s).await;
        // The scenario is writes and watches, not cluster updates: its request counts per
        // member would read as per update.
        s.requests.clear();
        self.report(s);
        Ok(())
    }

    /// The rollback scenario: 100 clusters rolled to snapshot 0, a run of snapshot 1 that fails
    /// in its soak, and its rollback run.
    pub(crate) async fn rollback_of_all(&mut self) -> anyhow::Result<()> {
        self.ensure_members(MEMBERS).await?;
        let clusters: Vec<String> = (1..=MEMBERS).map(objects::member_name).collect();
        objects::set_content(&self.client, ROLLBACK_NAMESPACE, "0").await?;
        create_rollback_strategy(&self.client).await?;
        objects::create_placement(
            &self.client,
            ROLLBACK_PLACEMENT,
            ROLLBACK_NAMESPACE,
            &clusters,
        )
        .await?;
        let rollback_run = format!("{FAILING_RUN}-rollback");
        let outcome = self.rollback_runs(&clusters, &rollback_run).await;
        let cleaned = delete(
            &self.client,
            &[FIRST_RUN, FAILING_RUN, &rollback_run],
            ROLLBACK_PLACEMENT,
        )
        .await;
        outcome.and(cleaned)
    }

    async fn rollback_runs(
        &mut self,
        clusters: &[String],
        rollback_run: &str,
    ) -> anyhow::Result<()> {
        objects::wait_placed(&self.client, ROLLBACK_PLACEMENT, 0, MEMBERS, self.timeout).await?;
        let first = Instant::now();
        objects::create_run(&self.client, FIRST_RUN, ROLLBACK_PLACEMENT, 0, STRATEGY).await?;
        self.outcome(FIRST_RUN).await?;
        eprintln!(
            "[bench] {FIRST_RUN}: {MEMBERS} members at snapshot 0 in {:.1}s",
            first.elapsed().as_secs_f64()
        );
        objects::set_content(&self.client, ROLLBACK_NAMESPACE, "1").await?;
        objects::wait_placed(&self.client, ROLLBACK_PLACEMENT, 1, MEMBERS, self.timeout).await?;

        let failing = RunWatch::start(&self.client, FAILING_RUN);
        let rollback = RunWatch::start(&self.client, rollback_run);
        let created = Instant::now();
        create_run(
            &self.client,
            FAILING_RUN,
            ROLLBACK_PLACEMENT,
            1,
            ROLLBACK_STRATEGY,
            json!({"healthTimeout": UPDATE_HEALTH_TIMEOUT, "onFailure": "Rollback"}),
        )
        .await?;
        let (soaking, waiting) = failing
            .first(created, self.timeout, "its soak after stage all", |r| {
                in_soak(r, "all")
            })
            .await?;
        waiting.map_err(|why| {
            anyhow::anyhow!("UpdateRun {FAILING_RUN} failed before its soak: {why}")
        })?;
        eprintln!(
            "[bench] {FAILING_RUN}: {MEMBERS} members at snapshot 1, soaking, {:.1}s after it was created",
            soaking.saturating_duration_since(created).as_secs_f64()
        );

        create_run(
            &self.client,
            FAILING_RUN,
            ROLLBACK_PLACEMENT,
            1,
            ROLLBACK_STRATEGY,
            json!({"healthTimeout": ROLLBACK_HEALTH_TIMEOUT, "onFailure": "Rollback"}),
        )
        .await?;

        let member = &clusters[MEMBERS / 2 - 1];
        self.samplers.reset().await;
        let (sent, answered) =
            report_health(&self.client, member, ROLLBACK_PLACEMENT, false).await?;
        let (failed_seen, failure) = failing
            .first(sent, self.timeout, "Succeeded=False", |r| {
                let status = r.status.as_ref()?;
                let c = find(&status.conditions, SUCCEEDED).filter(|c| c.status == "False")?;
                Some(Failure {
                    at: c.last_transition_time.0,
                    message: format!("{}: {}", c.reason, c.message),
                    rollback_run: status.rollback_run.clone(),
                    previous: status.previous_resource_snapshot_index.clone(),
                })
            })
            .await?;
        anyhow::ensure!(
            failure.rollback_run.as_deref() == Some(rollback_run),
            "UpdateRun {FAILING_RUN} failed ({}) naming rollback run {:?}, not {rollback_run}",
            failure.message,
            failure.rollback_run
        );
        anyhow::ensure!(
            failure.previous.as_deref() == Some("0"),
            "UpdateRun {FAILING_RUN}'s previousResourceSnapshotIndex is {:?}, not 0",
            failure.previous
        );
        let (done_seen, done) = rollback
            .first(created, self.timeout, "Succeeded=True", |r| {
                let c = find(&r.status.as_ref()?.conditions, SUCCEEDED)?;
                Some(match c.status.as_str() {
                    "True" => Ok((c.last_transition_time.0, r.clone())),
                    _ => Err(format!("{}: {}", c.reason, c.message)),
                })
            })
            .await?;
        let (done_at, mut done) =
            done.map_err(|why| anyhow::anyhow!("the rollback run {rollback_run} failed: {why}"))?;
        let seconds = done_seen.saturating_duration_since(failed_seen);
        let hub_seconds = done_at.as_second() - failure.at.as_second();

        // What the rollback run did: the clusters it lists, those it marked done, and where
        // their Bindings point now.
        if let Some(plan) = update_run_plan::plan_to_read(&done, None) {
            let plan = Api::<UpdateRunPlan>::all(self.client.clone())
                .get(plan)
                .await?;
            update_run_plan::read_into(&mut done, Some(&plan))
                .map_err(|e| anyhow::anyhow!("reading {rollback_run}'s plan: {e}"))?;
        }
        let listed = done
            .spec
            .rollback
            .as_ref()
            .map(|r| r.clusters.clone())
            .unwrap_or_default();
        let reverted: Vec<String> = done
            .status
            .iter()
            .flat_map(|s| &s.stages_status)
            .flat_map(|s| &s.clusters)
            .filter(|c| fleethub_crds::conditions::is_true(&c.conditions, SUCCEEDED))
            .map(|c| c.cluster_name.clone())
            .collect();
        let bindings = Api::<Binding>::all(self.client.clone())
            .list(
                &ListParams::default()
                    .labels(&format!("{}={ROLLBACK_PLACEMENT}", names::PLACEMENT_LABEL)),
            )
            .await?;
        let back: BTreeSet<&str> = bindings
            .items
            .iter()
            .filter(|b| b.spec.resource_snapshot_index == Some(0))
            .map(|b| b.spec.target_cluster.as_str())
            .collect();
        let not_back: Vec<&str> = reverted
            .iter()
            .map(String::as_str)
            .filter(|c| !back.contains(c))
            .collect();
        let wanted: BTreeSet<&str> = clusters.iter().map(String::as_str).collect();
        let got: BTreeSet<&str> = reverted.iter().map(String::as_str).collect();
        anyhow::ensure!(
            got == wanted && listed.len() == clusters.len(),
            "{rollback_run} lists {} clusters and reverted {} of the {} {FAILING_RUN} updated",
            listed.len(),
            reverted.len(),
            clusters.len()
        );
        anyhow::ensure!(
            not_back.is_empty(),
            "the Bindings of {} reverted clusters are not at snapshot 0: {}",
            not_back.len(),
            not_back.join(", ")
        );

        let mut s = Scenario {
            name: format!("rollback of {} clusters", reverted.len()),
            members: self.sim.members(),
            clusters: reverted.len(),
            seconds: seconds.as_secs_f64(),
            special: Some((
                "failed run Succeeded=False seen → its rollback run Succeeded=True seen".into(),
                summarize(&[seconds]),
            )),
            notes: vec![
                format!(
                    "by the conditions' lastTransitionTime (the hub's clock, whole seconds): failed run Succeeded=False → rollback run Succeeded=True {hub_seconds} s"
                ),
                format!(
                    "{member}'s Work reported Available=False (written, answered) → {FAILING_RUN} seen Succeeded=False {:.2} s (healthTimeout {ROLLBACK_HEALTH_TIMEOUT}); the run said \"{}\"",
                    failed_seen
                        .saturating_duration_since(answered)
                        .as_secs_f64(),
                    failure.message
                ),
                format!(
                    "{rollback_run}: {} clusters listed, newest first; {} reverted (Succeeded=True), 25% at a time; each one's Binding back at snapshot 0: {}/{}",
                    listed.len(),
                    reverted.len(),
                    reverted.len() - not_back.len(),
                    reverted.len()
                ),
            ],
            ..Default::default()
        };
        self.samplers.record(&mut s).await;
        self.report(s);
        Ok(())
    }
}

/// What the failed run's status said when it was first seen failed.
struct Failure {
    at: jiff::Timestamp,
    message: String,
    rollback_run: Option<String>,
    previous: Option<String>,
}

/// What the run's status showed when it was first seen held.
struct Held {
    soak_paused: bool,
    cluster_regressed: bool,
}

/// `p50 / p90 / p99 / max` in ms.
fn ms4(s: &Summary) -> String {
    format!(
        "{:.0} / {:.0} / {:.0} / {:.0}",
        s.p50_ms, s.p90_ms, s.p99_ms, s.max_ms
    )
}

/// The run's `Succeeded=False`, in words.
fn failed(run: &UpdateRun) -> Option<String> {
    let c = find(&run.status.as_ref()?.conditions, SUCCEEDED).filter(|c| c.status == "False")?;
    Some(format!("{}: {}", c.reason, c.message))
}

/// The run's `Progressing` condition: (status, reason).
fn progressing(run: &UpdateRun) -> Option<(&str, &str)> {
    let c = find(&run.status.as_ref()?.conditions, PROGRESSING)?;
    Some((c.status.as_str(), c.reason.as_str()))
}

/// Whether the run waits in the TimedWait after `stage` (or why it failed).
fn in_soak(run: &UpdateRun, stage: &str) -> Option<Result<(), String>> {
    if let Some(why) = failed(run) {
        return Some(Err(why));
    }
    let status = run.status.as_ref()?;
    let soaking = status
        .stages_status
        .iter()
        .find(|s| s.stage_name == stage)?
        .after_stage_task_status
        .iter()
        .any(|t| {
            t.type_ == StageTaskType::TimedWait
                && find(&t.conditions, WAIT_TIME_ELAPSED)
                    .is_some_and(|c| c.status == "False" && c.reason == reason::WAIT_PENDING)
        });
    (soaking && progressing(run) == Some(("False", reason::WAITING))).then_some(Ok(()))
}

/// Whether the run is held by a regressed cluster (and what else its status shows then), or
/// why it failed.
fn held(run: &UpdateRun, member: &str) -> Option<Result<Held, String>> {
    if let Some(why) = failed(run) {
        return Some(Err(why));
    }
    if progressing(run) != Some(("False", reason::CLUSTER_REGRESSED)) {
        return None;
    }
    let stages = &run.status.as_ref()?.stages_status;
    let soak_paused = stages
        .iter()
        .flat_map(|s| &s.after_stage_task_status)
        .filter_map(|t| find(&t.conditions, WAIT_TIME_ELAPSED))
        .any(|c| c.reason == reason::SOAK_PAUSED);
    let cluster_regressed = stages
        .iter()
        .flat_map(|s| &s.clusters)
        .filter(|c| c.cluster_name == member)
        .any(|c| fleethub_crds::conditions::is_true(&c.conditions, REGRESSED));
    Some(Ok(Held {
        soak_paused,
        cluster_regressed,
    }))
}

/// Whether the run is no longer held (or why it failed).
fn released(run: &UpdateRun) -> Option<Result<(), String>> {
    if let Some(why) = failed(run) {
        return Some(Err(why));
    }
    let (_, why) = progressing(run)?;
    (why != reason::CLUSTER_REGRESSED).then_some(Ok(()))
}

/// Reports `cluster`'s Work of `placement` available or not for its current generation, as its
/// agent does: `Applied` as it is, `Available` True or False with the member's words, under the
/// agent's field manager. Returns when the write was sent and when it was answered.
async fn report_health(
    client: &Client,
    cluster: &str,
    placement: &str,
    available: bool,
) -> anyhow::Result<(Instant, Instant)> {
    let ns = names::member_namespace(cluster);
    let name = names::work_name(placement);
    let api: Api<Work> = Api::namespaced(client.clone(), &ns);
    let current = api.get(&name).await?;
    let generation = current.metadata.generation.unwrap_or_default();
    let index = current.spec.resource_snapshot_index;
    let status = current.status.unwrap_or_default();
    let applied = find(&status.conditions, APPLIED)
        .filter(|c| c.observed_generation == Some(generation) && c.status == "True")
        .with_context(|| {
            format!("{ns}/{name} is not reported applied for its generation {generation}")
        })?;
    let now = jiff::Timestamp::now()
        .round(jiff::Unit::Second)
        .unwrap_or_else(|_| jiff::Timestamp::now())
        .to_string();
    let n = current.spec.workload.manifests.len();
    let (state, why, message) = match available {
        true => (
            "True",
            work::reason::WORKLOADS_AVAILABLE,
            format!("{n} manifests available (simulated)"),
        ),
        false => (
            "False",
            work::reason::WORKLOADS_NOT_READY,
            UNAVAILABLE.to_string(),
        ),
    };
    let body = json!({
        "apiVersion": "fleethub.dev/v1alpha1",
        "kind": "Work",
        "metadata": {"name": name, "namespace": ns},
        "status": {
            "conditions": [
                applied,
                {"type": AVAILABLE, "status": state, "reason": why, "message": message,
                 "observedGeneration": generation, "lastTransitionTime": now},
            ],
            "appliedResourceSnapshotIndex": index,
        },
    });
    let sent = Instant::now();
    api.patch_status(
        &name,
        &PatchParams::apply(MEMBER_AGENT).force(),
        &Patch::Apply(&body),
    )
    .await
    .with_context(|| format!("reporting {ns}/{name} available={available}"))?;
    Ok((sent, Instant::now()))
}

/// Starts UpdateRun `name` of `placement` at snapshot `index` with `strategy`, with the spec
/// fields of `more` (healthTimeout, onFailure).
async fn create_run(
    client: &Client,
    name: &str,
    placement: &str,
    index: i64,
    strategy: &str,
    more: Value,
) -> anyhow::Result<()> {
    let mut spec = json!({"placementName": placement, "resourceSnapshotIndex": index.to_string(),
        "stagedRolloutStrategyName": strategy});
    if let (Some(spec), Value::Object(more)) = (spec.as_object_mut(), more) {
        spec.extend(more);
    }
    let obj = json!({"apiVersion": "fleethub.dev/v1alpha1", "kind": "UpdateRun",
        "metadata": objects::meta(name), "spec": spec});
    objects::apply(&Api::<UpdateRun>::all(client.clone()), name, &obj).await?;
    Ok(())
}

/// Two stages: `canary` (members 1..=CANARIES, then the soak) and `rest` (every other member).
async fn create_hold_strategy(client: &Client, concurrency: &str) -> anyhow::Result<()> {
    let canaries: Vec<String> = (1..=CANARIES).map(|i| i.to_string()).collect();
    let stage = |name: &str, operator: &str, tasks: Value| {
        json!({"name": name,
               "labelSelector": {"matchExpressions": [{"key": ORDER_LABEL, "operator": operator, "values": canaries}]},
               "sortingLabelKey": ORDER_LABEL, "maxConcurrency": concurrency,
               "afterStageTasks": tasks})
    };
    let obj = json!({"apiVersion": "fleethub.dev/v1alpha1", "kind": "StagedUpdateStrategy",
    "metadata": objects::meta(HOLD_STRATEGY),
    "spec": {"stages": [
        stage("canary", "In", json!([{"type": "TimedWait", "waitTime": SOAK}])),
        stage("rest", "NotIn", json!([])),
    ]}});
    objects::apply(
        &Api::<StagedUpdateStrategy>::all(client.clone()),
        HOLD_STRATEGY,
        &obj,
    )
    .await?;
    Ok(())
}

/// One stage of every bench member, all at once, then the soak.
async fn create_rollback_strategy(client: &Client) -> anyhow::Result<()> {
    let obj = json!({"apiVersion": "fleethub.dev/v1alpha1", "kind": "StagedUpdateStrategy",
        "metadata": objects::meta(ROLLBACK_STRATEGY),
        "spec": {"stages": [{"name": "all",
            "labelSelector": {"matchLabels": {BENCH_LABEL: "true"}},
            "sortingLabelKey": ORDER_LABEL, "maxConcurrency": "100%",
            "afterStageTasks": [{"type": "TimedWait", "waitTime": SOAK}]}]}});
    objects::apply(
        &Api::<StagedUpdateStrategy>::all(client.clone()),
        ROLLBACK_STRATEGY,
        &obj,
    )
    .await?;
    Ok(())
}

/// Deletes the scenario's `runs` and `placement` (its snapshots, Bindings and Works go with
/// it), whatever happened; the strategies and members go at the bench's clean-up.
async fn delete(client: &Client, runs: &[&str], placement: &str) -> anyhow::Result<()> {
    let gone = |r: Result<(), kube::Error>, what: &str| match r {
        Ok(()) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(e) => Err(anyhow::anyhow!("deleting {what}: {e}")),
    };
    let api: Api<UpdateRun> = Api::all(client.clone());
    for run in runs {
        let deleted = api.delete(run, &DeleteParams::background()).await;
        gone(deleted.map(|_| ()), &format!("UpdateRun {run}"))?;
    }
    let deleted = Api::<Placement>::all(client.clone())
        .delete(placement, &DeleteParams::background())
        .await;
    gone(deleted.map(|_| ()), &format!("Placement {placement}"))
}
