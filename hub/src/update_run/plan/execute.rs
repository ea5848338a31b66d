//! Execution: stages in order, clusters started up to the stage's concurrency, each judged by
//! its Work.

use std::time::Duration;

use fleethub_crds::binding::BindingState;
use fleethub_crds::concurrency::MaxConcurrency;
use fleethub_crds::conditions::{self, FALSE, NewCondition, TRUE, find, is_true, set_condition};
use fleethub_crds::duration;
use fleethub_crds::strategy::{OnFailure, StagedUpdateStrategySpec};
use fleethub_crds::update_run::{
    CLUSTER_SKIPPED, CLUSTER_STARTED, ClusterUpdatingStatus, PROGRESSING, SUCCEEDED,
    StageUpdatingStatus, UpdateRunState, reason,
};
use fleethub_crds::work;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::gates::Gate;
use super::{Action, BindingView, ConditionView, Planner, Side, WorkView, listed, skipped_as};

/// Where a started cluster is, judged from its Work.
enum ClusterProgress {
    Done,
    Failed {
        reason: &'static str,
        message: String,
    },
    Pending(String),
}

/// Not started and not passed over: waits for its turn.
fn pending(c: &ClusterUpdatingStatus) -> bool {
    find(&c.conditions, CLUSTER_STARTED).is_none() && !skipped(c)
}

/// Started, not judged yet (neither succeeded nor failed) and not passed over.
fn updating(c: &ClusterUpdatingStatus) -> bool {
    find(&c.conditions, CLUSTER_STARTED).is_some()
        && find(&c.conditions, SUCCEEDED).is_none()
        && !skipped(c)
}

/// Passed over by the run.
pub(super) fn skipped(c: &ClusterUpdatingStatus) -> bool {
    is_true(&c.conditions, CLUSTER_SKIPPED)
}

/// What counts against a stage's maxFailedClusters: failed clusters (also those that stayed
/// regressed past the health timeout) and clusters passed over because their member, or their
/// workload, was not healthy at their turn.
pub(super) fn spent(stage: &StageUpdatingStatus) -> usize {
    stage
        .clusters
        .iter()
        .filter(|c| {
            (conditions::is_false(&c.conditions, SUCCEEDED) && !skipped(c))
                || skipped_as(c, reason::MEMBER_UNHEALTHY)
                || skipped_as(c, reason::UNHEALTHY_BEFORE_UPDATE)
        })
        .count()
}

impl Planner<'_, '_> {
    /// Walks the stages in order: the first unfinished one starts or tracks its clusters, or
    /// runs its gates; after the last, the deletion stage.
    pub(super) fn execute(&mut self) {
        self.status.start_time.get_or_insert(Time(self.o.now));
        let stopped = self.o.run.spec.state == Some(UpdateRunState::Stop);
        let health_timeout = self
            .o
            .run
            .spec
            .health_timeout
            .as_deref()
            .and_then(|t| duration::parse(t).ok())
            .unwrap_or(work::DEFAULT_HEALTH_TIMEOUT);
        let strategy = self
            .status
            .staged_update_strategy_snapshot
            .clone()
            .unwrap_or_default();
        self.skip_unselected();
        self.held = self
            .watch_updated(health_timeout)
            .map(|h| format!("held while a cluster it updated is regressed: {h}"));
        if let Some((i, what)) = self.regressions_over_budget() {
            return self.stage_over_budget(i, what);
        }

        for i in 0..self.status.stages_status.len() {
            if is_true(&self.status.stages_status[i].conditions, SUCCEEDED) {
                continue;
            }
            let Some(cfg) = strategy.stages.get(i) else {
                break;
            };
            let stage_name = cfg.name.clone();
            self.status.current_stage = Some(stage_name.clone());
            if self.status.stages_status[i].start_time.is_none() {
                // Not started: its before-stage tasks hold its clusters.
                match self.run_gates(i, Side::Before) {
                    Gate::Passed => {}
                    Gate::Waiting(message) => {
                        if stopped {
                            self.stopped(Some(message));
                        }
                        return;
                    }
                    Gate::Failed(why, message) => return self.gate_failed(why, message),
                }
                if self.frozen(&stage_name, 0) {
                    return;
                }
                if let Some(message) = self.window_closed(i, &strategy) {
                    if stopped {
                        self.stopped(Some(message));
                    } else {
                        self.set_run(PROGRESSING, FALSE, reason::OUTSIDE_WINDOW, message);
                    }
                    return;
                }
            }
            let budget = cfg.max_failed_clusters.unwrap_or(0).max(0) as usize;
            if !self.track_clusters(i, health_timeout, budget) {
                return; // more clusters failed than the stage allows
            }
            if let Some(message) = self.analyze(i) {
                // Final, whatever else the stage does: nothing more of it starts.
                return self.gate_failed(reason::ANALYSIS_FAILED, message);
            }
            let stage = &self.status.stages_status[i];
            let waiting_to_start = stage.clusters.iter().any(pending);
            let in_progress = stage.clusters.iter().filter(|c| updating(c)).count();
            if waiting_to_start || in_progress > 0 {
                if stopped {
                    return self.stop_in_stage(i);
                }
                if let Some(held) = self.held.clone() {
                    // Clusters in flight go on; nothing new starts.
                    let message = match in_progress {
                        0 => held,
                        n => format!("{held}; {n} clusters already updating finish"),
                    };
                    self.set_run(PROGRESSING, FALSE, reason::CLUSTER_REGRESSED, message);
                    return;
                }
                if self.frozen(&stage_name, in_progress) {
                    return;
                }
                let limit = MaxConcurrency::parse(cfg.max_concurrency.as_ref())
                    .unwrap_or_default()
                    .resolve(self.status.stages_status[i].clusters.len());
                let held = self.start_clusters(i, limit.saturating_sub(in_progress), budget);
                let updating: Vec<String> = self.status.stages_status[i]
                    .clusters
                    .iter()
                    .filter(|c| updating(c))
                    .map(|c| c.cluster_name.clone())
                    .collect();
                if !updating.is_empty() {
                    let mut message =
                        format!("stage {stage_name}: updating {}", listed(&updating, ", "));
                    if let Some(held) = held {
                        message.push_str(&format!("; then {held}"));
                    }
                    self.set_run(PROGRESSING, TRUE, reason::STARTED, message);
                    return;
                }
                if let Some(held) = held {
                    let message = format!("stage {stage_name}: {held}");
                    let c = self.cond(
                        PROGRESSING,
                        FALSE,
                        reason::WAITING_FOR_MEMBER,
                        message.clone(),
                    );
                    set_condition(&mut self.status.stages_status[i].conditions, c, self.o.now);
                    self.set_run(PROGRESSING, FALSE, reason::WAITING_FOR_MEMBER, message);
                    return;
                }
                // Every cluster left to start was passed over just now: the stage's clusters
                // are done.
            }
            match self.run_gates(i, Side::After) {
                Gate::Passed => self.stage_succeeded(i),
                Gate::Waiting(message) => {
                    if stopped {
                        // A person who stopped the run sees it stopped, with what the gate
                        // waits for; an approval given meanwhile counts, but starts nothing
                        // until Run.
                        self.stopped(Some(message));
                    }
                    return;
                }
                Gate::Failed(why, message) => return self.gate_failed(why, message),
            }
        }
        if let Some(held) = self.held.clone() {
            self.pause_bake();
            return self.set_run(PROGRESSING, FALSE, reason::CLUSTER_REGRESSED, held);
        }
        self.deletion_stage(stopped);
    }

    /// `spec.state: Stop` in the middle of stage `i`: Stopping while clusters already updating
    /// finish, then Stopped.
    fn stop_in_stage(&mut self, i: usize) {
        let finishing: Vec<String> = self.status.stages_status[i]
            .clusters
            .iter()
            .filter(|c| updating(c))
            .map(|c| c.cluster_name.clone())
            .collect();
        if finishing.is_empty() {
            return self.stopped(None);
        }
        let message = format!(
            "stopping (spec.state=Stop): no new cluster starts; waiting for {} already updating to finish ({})",
            finishing.len(),
            listed(&finishing, ", ")
        );
        self.set_run(PROGRESSING, TRUE, reason::STOPPING, message);
    }

    /// Passes over the clusters that left the placement (their Binding is gone or Unscheduled)
    /// and have not succeeded: they are never bound again by this run.
    fn skip_unselected(&mut self) {
        let now = self.o.now;
        for i in 0..self.status.stages_status.len() {
            if is_true(&self.status.stages_status[i].conditions, SUCCEEDED) {
                continue;
            }
            let stage_name = self.status.stages_status[i].stage_name.clone();
            for j in 0..self.status.stages_status[i].clusters.len() {
                let cluster = &self.status.stages_status[i].clusters[j];
                if is_true(&cluster.conditions, SUCCEEDED) || skipped(cluster) {
                    continue;
                }
                let name = cluster.cluster_name.clone();
                let selected = self
                    .binding(&name)
                    .is_some_and(|b| b.state != BindingState::Unscheduled);
                if selected {
                    continue;
                }
                let message = if pending(cluster) {
                    format!(
                        "cluster {name} left Placement {} before its turn; this run skips it (a new run includes it if it comes back)",
                        self.o.run.spec.placement_name
                    )
                } else {
                    format!(
                        "cluster {name} left Placement {} while this run updated it; the run does not start it again",
                        self.o.run.spec.placement_name
                    )
                };
                let c = NewCondition::new(
                    CLUSTER_SKIPPED,
                    TRUE,
                    reason::CLUSTER_UNSELECTED,
                    message.clone(),
                    self.generation,
                );
                let cluster = &mut self.status.stages_status[i].clusters[j];
                set_condition(&mut cluster.conditions, c, now);
                cluster.progress = None;
                cluster.end_time.get_or_insert(Time(now));
                self.event(
                    true,
                    reason::CLUSTER_UNSELECTED,
                    format!("stage {stage_name}: {message}"),
                );
            }
        }
    }

    /// A change freeze holds the run: nothing new starts (`in_progress` clusters in flight
    /// finish); planned again when it lifts.
    fn frozen(&mut self, stage: &str, in_progress: usize) -> bool {
        let Some((frozen, until)) = self.o.freeze.clone() else {
            return false;
        };
        if let Some(until) = until {
            self.requeue_at(until);
        }
        let message = match in_progress {
            0 => format!("stage {stage} waits: {frozen}"),
            n => format!("stage {stage} waits: {frozen}; {n} clusters already updating finish"),
        };
        self.set_run(PROGRESSING, FALSE, reason::FROZEN, message);
        true
    }

    /// Why stage `i` may not start now (its strategy's or its own windows), asking to be
    /// planned again at the next opening; None when it may.
    fn window_closed(&mut self, i: usize, strategy: &StagedUpdateStrategySpec) -> Option<String> {
        let (allowed, blocked) = super::windows::of_stage(strategy, i).ok()?;
        let stage = &strategy.stages.get(i)?.name;
        let (why, next) = super::windows::closed(strategy, i, &allowed, &blocked, self.o.now)?;
        Some(match next {
            Some(next) => {
                self.requeue_at(next);
                format!("stage {stage} waits: {why}; it may start at {next}")
            }
            None => format!("stage {stage} waits: {why}, which never open again"),
        })
    }

    /// A gate can never pass (e.g. a metric check past its timeout): the run fails, for good,
    /// with the failing task's own reason (and rolls back if it says so).
    fn gate_failed(&mut self, why: &'static str, message: String) {
        self.set_run(PROGRESSING, FALSE, why, message.clone());
        self.set_run(SUCCEEDED, FALSE, why, message.clone());
        self.status.end_time = Some(Time(self.o.now));
        self.event(true, why, message);
        if self.on_failure() == OnFailure::Rollback {
            self.roll_back(why);
        }
    }

    /// More of stage `i`'s clusters failed than its maxFailedClusters allows (`what` names
    /// them). `onFailure: Hold`: the run stops there and resumes by itself if they recover;
    /// `Rollback`: the run fails and rolls back.
    fn stage_over_budget(&mut self, i: usize, what: String) {
        let now = self.o.now;
        let stage_name = self.status.stages_status[i].stage_name.clone();
        let rollback = self.on_failure() == OnFailure::Rollback;
        let message = if rollback {
            format!(
                "failed: {what}; onFailure is Rollback: the clusters this run updated go back to the snapshot they ran before"
            )
        } else {
            format!(
                "stopped: {what}; nothing further starts until the cluster recovers (the run resumes by itself) or a new UpdateRun rolls back"
            )
        };
        let mut types = vec![PROGRESSING];
        if rollback {
            types.push(SUCCEEDED);
            self.status.stages_status[i].end_time = Some(Time(now));
        }
        for type_ in types {
            let c = self.cond(type_, FALSE, reason::STAGE_FAILED, message.clone());
            set_condition(&mut self.status.stages_status[i].conditions, c, now);
        }
        let message = format!("stage {stage_name} {message}");
        self.set_run(PROGRESSING, FALSE, reason::CLUSTER_FAILED, message.clone());
        if rollback {
            self.set_run(SUCCEEDED, FALSE, reason::CLUSTER_FAILED, message.clone());
            self.status.end_time = Some(Time(now));
            self.event(true, reason::CLUSTER_FAILED, message);
            self.roll_back(reason::CLUSTER_FAILED);
        }
    }

    /// Marks the stage started, judges its started clusters; false when more of them failed
    /// (or were passed over as unhealthy) than the stage's `budget` allows.
    pub(super) fn track_clusters(
        &mut self,
        i: usize,
        health_timeout: Duration,
        budget: usize,
    ) -> bool {
        let now = self.o.now;
        let index = self.index();
        if self.status.stages_status[i].start_time.is_none() {
            self.status.stages_status[i].start_time = Some(Time(now));
            let stage_name = self.status.stages_status[i].stage_name.clone();
            let c = self.cond(
                PROGRESSING,
                TRUE,
                reason::STAGE_STARTED,
                format!("stage {stage_name} started"),
            );
            set_condition(&mut self.status.stages_status[i].conditions, c, now);
            self.event(
                false,
                reason::STAGE_STARTED,
                format!("stage {stage_name} started"),
            );
        }
        let mut failures = Vec::new();
        for j in 0..self.status.stages_status[i].clusters.len() {
            let cluster = &self.status.stages_status[i].clusters[j];
            if find(&cluster.conditions, CLUSTER_STARTED).is_none()
                || is_true(&cluster.conditions, SUCCEEDED)
                || skipped(cluster)
                || super::regression::regressed(cluster)
            {
                continue;
            }
            let name = cluster.cluster_name.clone();
            let started = cluster.start_time.as_ref().map_or(now, |t| t.0);
            let binding = self.binding(&name);
            let progress = match binding.and_then(|b| {
                (b.resource_snapshot_index == Some(index)).then_some(b.override_failure.as_ref())?
            }) {
                Some(why) => ClusterProgress::Failed {
                    reason: reason::CLUSTER_UPDATE_FAILED,
                    message: format!("overrides cannot be applied: {why}"),
                },
                // The Work must carry the overrides the run fixed (a run of the index a cluster
                // already runs changes only its overrides).
                None => match (binding, self.o.works.get(&name)) {
                    // Not bound by this run, as far as the Bindings show (its bind is not in the
                    // cache yet, or was lost): its Work may be another run's of the same index,
                    // with other overrides, and this run cannot tell (seen in CI: a run whose
                    // only change was a broken override passed its cluster on the previous
                    // run's Work). It waits for its bind, which is repeated below.
                    (Some(_), _) if !self.bound_by_this_run(&name, index) => {
                        ClusterProgress::Pending(
                            "its Binding does not show this run's bind yet".to_string(),
                        )
                    }
                    (Some(b), Some(w))
                        if w.overrides.as_deref().is_some_and(|o| o != b.overrides) =>
                    {
                        ClusterProgress::Pending(
                            "its Work does not carry the run's overrides yet".to_string(),
                        )
                    }
                    (_, work) => judge_work(work, index),
                },
            };
            if !matches!(progress, ClusterProgress::Done) && !self.bound_by_this_run(&name, index) {
                // Point the binding at the snapshot again when it does not say so: this repairs
                // a crash between recording the start and writing the binding. A binding that
                // already says so is not rewritten: a large stage has many clusters in flight
                // and every reconcile would re-send all of them before recording anything.
                if let Some(b) = binding {
                    let bind = self.bind(b, index);
                    self.actions.push(bind);
                }
            }
            let deadline = started.checked_add(health_timeout).unwrap_or(started);
            let outcome = match progress {
                ClusterProgress::Pending(why) if now < deadline => {
                    // Shown on the run's cluster row (dashboard, `kubectl fleet run`): a phased
                    // rollout's pods rolled, a Deployment's replicas, or what has not happened.
                    self.status.stages_status[i].clusters[j].progress = Some(shorten(why));
                    self.requeue_at(deadline);
                    continue;
                }
                ClusterProgress::Pending(why) => Err((
                    reason::CLUSTER_HEALTH_TIMEOUT,
                    format!(
                        "cluster {name} did not become available within {}: {why}{}",
                        duration::format(health_timeout),
                        self.o
                            .unhealthy_members
                            .get(&name)
                            .map_or(String::new(), |m| {
                                format!(" (MemberCluster {name} is not healthy: {m})")
                            })
                    ),
                )),
                ClusterProgress::Failed { reason, message } => {
                    Err((reason, format!("cluster {name}: {message}")))
                }
                ClusterProgress::Done => Ok(()),
            };
            let cluster = &mut self.status.stages_status[i].clusters[j];
            cluster.progress = None;
            match outcome {
                Ok(()) => {
                    let c = NewCondition::new(
                        SUCCEEDED,
                        TRUE,
                        reason::CLUSTER_SUCCEEDED,
                        format!("cluster {name} runs resource snapshot {index} and is available"),
                        self.generation,
                    );
                    set_condition(&mut cluster.conditions, c, now);
                    cluster.end_time = Some(Time(now));
                    let message = format!("cluster {name} updated to resource snapshot {index}");
                    self.timed_event(reason::CLUSTER_SUCCEEDED, message, Some(started));
                }
                Err((why, message)) => {
                    let first = !conditions::is_false(&cluster.conditions, SUCCEEDED);
                    let c =
                        NewCondition::new(SUCCEEDED, FALSE, why, message.clone(), self.generation);
                    set_condition(&mut cluster.conditions, c, now);
                    if first {
                        self.event(true, reason::CLUSTER_FAILED, message.clone());
                    }
                    failures.push(message);
                }
            }
        }
        let spent = spent(&self.status.stages_status[i]);
        if failures.is_empty() || spent <= budget {
            return true;
        }
        let over = if budget > 0 {
            format!(
                " ({spent} clusters failed or were passed over, more than the stage's maxFailedClusters {budget})"
            )
        } else {
            String::new()
        };
        self.stage_over_budget(i, format!("{}{over}", listed(&failures, "; ")));
        false
    }

    /// Passes cluster `j` of stage `i` over at its turn (`Skipped=True` for `why`), counted
    /// against the stage's maxFailedClusters.
    fn pass_over(&mut self, i: usize, j: usize, why: &'static str, message: String) {
        let now = self.o.now;
        let stage_name = self.status.stages_status[i].stage_name.clone();
        let c = NewCondition::new(CLUSTER_SKIPPED, TRUE, why, message.clone(), self.generation);
        let cluster = &mut self.status.stages_status[i].clusters[j];
        set_condition(&mut cluster.conditions, c, now);
        cluster.end_time = Some(Time(now));
        self.event(true, why, format!("stage {stage_name}: {message}"));
    }

    /// Why `cluster` must not be updated blindly, if so: a forward run (not a rollback) reaches
    /// it while its workload is unhealthy on the snapshot the run's clusters ran before (the
    /// fleet's known version): applied, and not available. A cluster broken on another snapshot
    /// (a failed earlier rollout) is updated: the run may be its fix; so is one whose objects
    /// are not applied (drifted under `IfNotDrifted`): its update fails naming the field.
    fn unhealthy_before_update(&self, cluster: &str) -> Option<String> {
        let previous = self
            .status
            .previous_resource_snapshot_index
            .as_deref()?
            .parse::<i64>()
            .ok()?;
        if self.o.run.spec.rollback.is_some() || self.index() <= previous {
            return None;
        }
        super::regression::workload_unhealthy(self.o.works.get(cluster), previous)
    }

    /// The Bind of `binding` to `index` with the overrides the run fixed.
    fn bind(&self, binding: &BindingView, index: i64) -> Action {
        Action::Bind {
            cluster: binding.cluster.clone(),
            resource_version: binding.resource_version.clone(),
            index,
            overrides: self
                .status
                .applied_override_snapshots
                .clone()
                .unwrap_or_default(),
        }
    }

    /// Starts up to `room` of stage `i`'s clusters in order. A cluster whose member is not
    /// healthy at its turn is passed over while the stage's failure `budget` allows; otherwise
    /// the stage waits for it (strict order): what it waits for is returned.
    fn start_clusters(&mut self, i: usize, mut room: usize, budget: usize) -> Option<String> {
        let index = self.index();
        let now = self.o.now;
        let stage_name = self.status.stages_status[i].stage_name.clone();
        for j in 0..self.status.stages_status[i].clusters.len() {
            if room == 0 {
                break;
            }
            if !pending(&self.status.stages_status[i].clusters[j]) {
                continue;
            }
            let name = self.status.stages_status[i].clusters[j]
                .cluster_name
                .clone();
            if let Some(why) = self
                .o
                .unhealthy_members
                .get(&name)
                .filter(|_| self.o.down_members.contains(&name))
            {
                if spent(&self.status.stages_status[i]) >= budget {
                    return Some(format!(
                        "waiting for MemberCluster {name} to become healthy before updating it ({why})"
                    ));
                }
                let message = format!(
                    "MemberCluster {name} was not healthy at its turn ({why}); passed over within the stage's maxFailedClusters {budget}"
                );
                self.pass_over(i, j, reason::MEMBER_UNHEALTHY, message);
                continue;
            }
            if let Some(why) = self.unhealthy_before_update(&name) {
                if spent(&self.status.stages_status[i]) >= budget {
                    let message = format!(
                        "waiting for cluster {name} to become healthy before updating it: its workload is not healthy on the snapshot it runs ({why}); fix it, or allow for it in the stage's maxFailedClusters"
                    );
                    // The run's condition says "stage <name>: <message>" while it waits.
                    let first = find(&self.status.conditions, PROGRESSING)
                        .is_none_or(|c| !c.message.ends_with(&message));
                    if first {
                        self.event(true, reason::UNHEALTHY_BEFORE_UPDATE, message.clone());
                    }
                    return Some(message);
                }
                let message = format!(
                    "cluster {name}'s workload was not healthy at its turn ({why}); not updated, passed over within the stage's maxFailedClusters {budget}"
                );
                self.pass_over(i, j, reason::UNHEALTHY_BEFORE_UPDATE, message);
                continue;
            }
            let Some(binding) = self.binding(&name) else {
                continue; // left the placement: passed over by skip_unselected
            };
            let bind = self.bind(binding, index);
            let cluster = &mut self.status.stages_status[i].clusters[j];
            let c = NewCondition::new(
                CLUSTER_STARTED,
                TRUE,
                reason::CLUSTER_STARTED,
                fleethub_crds::stored_stage::started_message(&name),
                self.generation,
            );
            set_condition(&mut cluster.conditions, c, now);
            cluster.start_time = Some(Time(now));
            self.actions.push(bind);
            self.event(
                false,
                reason::CLUSTER_STARTED,
                format!("stage {stage_name}: updating cluster {name} to resource snapshot {index}"),
            );
            room -= 1;
        }
        None
    }
}

/// Judges a started cluster by its Work: done when the member applied the run's snapshot and
/// everything is available, failed when the member says so, pending otherwise.
fn judge_work(work: Option<&WorkView>, index: i64) -> ClusterProgress {
    let Some(w) = work else {
        return ClusterProgress::Pending("its Work has not been written yet".to_string());
    };
    if w.index != index {
        return ClusterProgress::Pending(format!(
            "its Work still carries resource snapshot {}",
            w.index
        ));
    }
    let current = |c: &Option<ConditionView>| {
        c.as_ref()
            .filter(|c| c.observed_generation == w.generation)
            .cloned()
    };
    let Some(applied) = current(&w.applied) else {
        return ClusterProgress::Pending(
            "waiting for the member agent to apply the Work".to_string(),
        );
    };
    if applied.status == FALSE {
        return ClusterProgress::Failed {
            reason: reason::CLUSTER_UPDATE_FAILED,
            message: format!("apply failed ({}): {}", applied.reason, applied.message),
        };
    }
    let Some(available) = current(&w.available) else {
        return ClusterProgress::Pending(
            "applied; waiting for the member agent to check availability".to_string(),
        );
    };
    if available.status == TRUE && applied.status == TRUE && w.applied_index == Some(index) {
        return ClusterProgress::Done;
    }
    if available.status == FALSE && available.reason == work::reason::HEALTH_TIMEOUT {
        return ClusterProgress::Failed {
            reason: reason::CLUSTER_HEALTH_TIMEOUT,
            message: format!(
                "not available ({}): {}",
                available.reason, available.message
            ),
        };
    }
    ClusterProgress::Pending(format!("not available yet: {}", available.message))
}

/// The longest progress kept per cluster: a run tracks up to 2,000 clusters in one status, which
/// etcd limits to 1.5 MiB.
const PROGRESS_CHARS: usize = 120;

fn shorten(why: String) -> String {
    match why.char_indices().nth(PROGRESS_CHARS) {
        Some((end, _)) => format!("{}…", &why[..end]),
        None => why,
    }
}
