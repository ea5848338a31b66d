//! Execution: stages in order, clusters started up to the stage's concurrency, each judged by
//! its Work.

use std::time::Duration;

use fleethub_crds::concurrency::MaxConcurrency;
use fleethub_crds::conditions::{self, FALSE, NewCondition, TRUE, find, is_true, set_condition};
use fleethub_crds::duration;
use fleethub_crds::update_run::{CLUSTER_STARTED, PROGRESSING, SUCCEEDED, UpdateRunState, reason};
use fleethub_crds::work;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::gates::Gate;
use super::{Action, ConditionView, Planner, Side, WorkView};

/// Where a started cluster is, judged from its Work.
enum ClusterProgress {
    Done,
    Failed {
        reason: &'static str,
        message: String,
    },
    Pending(String),
}

impl Planner<'_, '_> {
    /// Walks the stages in order: the first unfinished one starts or tracks its clusters, or
    /// runs its gates; after the last, the deletion stage.
    pub(super) fn execute(&mut self) {
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
            }
            if !self.track_clusters(i, health_timeout) {
                return; // a cluster failed
            }
            let stage = &self.status.stages_status[i];
            let waiting_to_start = stage
                .clusters
                .iter()
                .any(|c| find(&c.conditions, CLUSTER_STARTED).is_none());
            let in_progress = stage
                .clusters
                .iter()
                .filter(|c| {
                    find(&c.conditions, CLUSTER_STARTED).is_some()
                        && !is_true(&c.conditions, SUCCEEDED)
                })
                .count();
            if waiting_to_start || in_progress > 0 {
                if waiting_to_start && stopped {
                    self.stopped(None);
                    return;
                }
                let limit = MaxConcurrency::parse(cfg.max_concurrency.as_ref())
                    .unwrap_or_default()
                    .resolve(stage.clusters.len());
                self.start_clusters(i, limit.saturating_sub(in_progress));
                let updating: Vec<String> = self.status.stages_status[i]
                    .clusters
                    .iter()
                    .filter(|c| {
                        find(&c.conditions, CLUSTER_STARTED).is_some()
                            && !is_true(&c.conditions, SUCCEEDED)
                    })
                    .map(|c| c.cluster_name.clone())
                    .collect();
                let message = format!("stage {stage_name}: updating {}", updating.join(", "));
                self.set_run(PROGRESSING, TRUE, reason::STARTED, message);
                return;
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
        self.deletion_stage(stopped);
    }

    /// A gate can never pass (e.g. a metric check past its timeout): the run fails, for good,
    /// with the failing task's own reason.
    fn gate_failed(&mut self, why: &'static str, message: String) {
        self.set_run(PROGRESSING, FALSE, why, message.clone());
        self.set_run(SUCCEEDED, FALSE, why, message.clone());
        self.status.end_time = Some(Time(self.o.now));
        self.event(true, why, message);
    }

    /// Marks the stage started, judges its started clusters; false when one has failed.
    pub(super) fn track_clusters(&mut self, i: usize, health_timeout: Duration) -> bool {
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
            {
                continue;
            }
            let name = cluster.cluster_name.clone();
            let started = cluster.start_time.as_ref().map_or(now, |t| t.0);
            let binding = self.o.bindings.iter().find(|b| b.cluster == name);
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
                    (Some(b), Some(w))
                        if self.bound_by_this_run(&name, index)
                            && w.overrides.as_deref().is_some_and(|o| o != b.overrides) =>
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
                self.actions.push(Action::Bind {
                    cluster: name.clone(),
                    index,
                    overrides: self
                        .status
                        .applied_override_snapshots
                        .clone()
                        .unwrap_or_default(),
                });
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
        if failures.is_empty() {
            return true;
        }
        let stage_name = self.status.stages_status[i].stage_name.clone();
        let message = format!(
            "stopped: {}; nothing further starts until the cluster recovers (the run resumes by itself) or a new UpdateRun rolls back",
            failures.join("; ")
        );
        let c = self.cond(PROGRESSING, FALSE, reason::STAGE_FAILED, message.clone());
        set_condition(&mut self.status.stages_status[i].conditions, c, now);
        self.set_run(
            PROGRESSING,
            FALSE,
            reason::CLUSTER_FAILED,
            format!("stage {stage_name} {message}"),
        );
        false
    }

    fn start_clusters(&mut self, i: usize, mut room: usize) {
        let index = self.index();
        let now = self.o.now;
        let stage_name = self.status.stages_status[i].stage_name.clone();
        for j in 0..self.status.stages_status[i].clusters.len() {
            if room == 0 {
                break;
            }
            let cluster = &mut self.status.stages_status[i].clusters[j];
            if find(&cluster.conditions, CLUSTER_STARTED).is_some() {
                continue;
            }
            let name = cluster.cluster_name.clone();
            let c = NewCondition::new(
                CLUSTER_STARTED,
                TRUE,
                reason::CLUSTER_STARTED,
                format!("cluster {name} is being updated to resource snapshot {index}"),
                self.generation,
            );
            set_condition(&mut cluster.conditions, c, now);
            cluster.start_time = Some(Time(now));
            self.actions.push(Action::Bind {
                cluster: name.clone(),
                index,
                overrides: self
                    .status
                    .applied_override_snapshots
                    .clone()
                    .unwrap_or_default(),
            });
            self.event(
                false,
                reason::CLUSTER_STARTED,
                format!("stage {stage_name}: updating cluster {name} to resource snapshot {index}"),
            );
            room -= 1;
        }
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
