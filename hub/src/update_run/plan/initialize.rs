//! Initialization: the run is validated, then its strategy and cluster plan are frozen into its
//! status. Every failure but waiting for an earlier run is final.

use std::collections::BTreeMap;

use fleethub_crds::binding::BindingState;
use fleethub_crds::concurrency::MaxConcurrency;
use fleethub_crds::conditions::{TRUE, find};
use fleethub_crds::metric_check::Settings;
use fleethub_crds::placement::{RolloutStrategyType, SCHEDULED, reason as placement_reason};
use fleethub_crds::stored_stage::DETAILED_STAGE_CLUSTERS;
use fleethub_crds::strategy::{
    MetricCheck, StageConfig, StageTask, StageTaskType, StagedUpdateStrategySpec,
};
use fleethub_crds::update_run::{
    ClusterList, ClusterUpdatingStatus, DELETION_STAGE, INITIALIZED, MAX_RUN_NAME_BYTES,
    MetricCheckStatus, StageTaskStatus, StageUpdatingStatus, reason, run_name_bytes,
};
use fleethub_crds::{duration, names};
use kube::core::{Selector, SelectorExt};

use super::{Observed, Planner, Side, metric};

/// Why a run cannot initialize (now, or ever): a reason and a sentence naming the object.
pub(super) type Refusal = (&'static str, String);

/// The clusters the run updates and those it removes the workload from, by name.
struct Selected<'a> {
    scheduled: Vec<&'a str>,
    removed: Vec<&'a str>,
}

impl<'a, 'o> Planner<'a, 'o> {
    /// Validates the run, then freezes its plan into status. A run that is only to be planned
    /// (`spec.state: Initialize`) is planned even while an earlier run of the placement goes on:
    /// it does not supersede that run until it is set to Run.
    pub(super) fn initialize(&mut self, plan_only: bool) -> Result<(), Refusal> {
        // A rollback that names no clusters (an AutoUpdatePolicy's) updates the placement's
        // clusters through its strategy, as any run.
        if let Some(rollback) = self
            .o
            .run
            .spec
            .rollback
            .as_ref()
            .filter(|r| !r.clusters.is_empty())
        {
            return self.initialize_rollback(rollback, plan_only);
        }
        let strategy = self.validate()?;
        // Checked after validation, so a run that could never start does not stop an earlier
        // one. The earlier run yields to this one (it sees this run waiting) and ends.
        self.earlier_run_done(plan_only)?;
        self.scheduling_settled()?;
        let selected = self.selected()?;
        let per_stage = self.sort_into_stages(strategy, &selected.scheduled)?;
        self.freeze(strategy, per_stage, selected);
        Ok(())
    }

    /// A rollback run (`spec.rollback`): the placement and snapshot are checked as for any
    /// run; its one stage holds the clusters it names, in their order.
    fn initialize_rollback(
        &mut self,
        rollback: &fleethub_crds::update_run::RollbackSpec,
        plan_only: bool,
    ) -> Result<(), Refusal> {
        self.validate_target()?;
        self.earlier_run_done(plan_only)?;
        let (strategy, per_stage) = self.rollback_plan(rollback)?;
        let scheduled: Vec<&str> = per_stage[0].iter().map(String::as_str).collect();
        let selected = Selected {
            scheduled,
            removed: Vec::new(),
        };
        let per_stage = per_stage.clone();
        self.freeze(&strategy, per_stage, selected);
        Ok(())
    }

    /// An earlier run of the placement still goes (this run waits for it to yield), unless
    /// this run is only planned.
    fn earlier_run_done(&self, plan_only: bool) -> Result<(), Refusal> {
        match (&self.earlier, plan_only) {
            (Some(earlier), false) => Err((
                reason::WAITING_FOR_PREVIOUS_RUN,
                format!(
                    "waiting for UpdateRun {earlier}, which this newer run supersedes, to stop rolling out Placement {}",
                    self.o.run.spec.placement_name
                ),
            )),
            _ => Ok(()),
        }
    }

    /// Everything the run names exists and every value it will use can be read.
    fn validate(&self) -> Result<&'o StagedUpdateStrategySpec, Refusal> {
        self.validate_target()?;
        let o: &'a Observed<'o> = self.o;
        let spec = &o.run.spec;
        let strategy = o.strategy.ok_or_else(|| {
            (
                reason::STRATEGY_NOT_FOUND,
                format!(
                    "StagedUpdateStrategy {} does not exist",
                    spec.staged_rollout_strategy_name
                ),
            )
        })?;
        for (i, stage) in strategy.stages.iter().enumerate() {
            MaxConcurrency::parse(stage.max_concurrency.as_ref()).map_err(|e| {
                (
                    reason::INVALID_STRATEGY,
                    format!("stage {} (spec.stages[{i}]): {e}", stage.name),
                )
            })?;
            for (side, task) in stage_tasks(stage) {
                validate_task(stage, side, task)?;
            }
            if let Some(analysis) = &stage.analysis {
                validate_metric_check(stage, "analysis", &analysis.metric_check)?;
            }
            super::windows::of_stage(strategy, i).map_err(|e| {
                (
                    reason::INVALID_STRATEGY,
                    format!(
                        "StagedUpdateStrategy {}: spec.{e}",
                        spec.staged_rollout_strategy_name
                    ),
                )
            })?;
        }
        Ok(strategy)
    }

    /// The placement exists and is External, the snapshot index reads and exists, the health
    /// timeout reads.
    fn validate_target(&self) -> Result<(), Refusal> {
        let o: &'a Observed<'o> = self.o;
        let spec = &o.run.spec;
        let placement = o.placement.ok_or_else(|| {
            (
                reason::PLACEMENT_NOT_FOUND,
                format!("Placement {} does not exist", spec.placement_name),
            )
        })?;
        let strategy_type = placement
            .spec
            .strategy
            .as_ref()
            .map(|s| s.type_)
            .unwrap_or_default();
        if strategy_type != RolloutStrategyType::External {
            return Err((
                reason::PLACEMENT_NOT_EXTERNAL,
                format!(
                    "Placement {} rolls out with strategy {strategy_type:?}; UpdateRuns only drive placements whose spec.strategy.type is External",
                    spec.placement_name
                ),
            ));
        }
        let Some(index) = self.index else {
            return Err(match &spec.resource_snapshot_index {
                Some(text) => (
                    reason::INVALID_SNAPSHOT_INDEX,
                    format!("spec.resourceSnapshotIndex {text:?} is not a number"),
                ),
                None => (
                    reason::SNAPSHOT_NOT_FOUND,
                    format!(
                        "spec.resourceSnapshotIndex is omitted and Placement {} has no ResourceSnapshot yet to roll out",
                        spec.placement_name
                    ),
                ),
            });
        };
        if !o.snapshot_exists {
            return Err((
                reason::SNAPSHOT_NOT_FOUND,
                format!(
                    "Placement {} has no ResourceSnapshot with index {index} (see kubectl get resourcesnapshots --field-selector spec.placementName={})",
                    spec.placement_name, spec.placement_name
                ),
            ));
        }
        if let Some(t) = &spec.health_timeout {
            duration::parse(t).map_err(|e| {
                (
                    reason::INVALID_HEALTH_TIMEOUT,
                    format!("spec.healthTimeout: {e}"),
                )
            })?;
        }
        Ok(())
    }

    /// The placement has scheduled its current spec, and the bindings seen hold every cluster
    /// it selected. A run planned earlier would freeze a partial cluster list: right after the
    /// placement is created, its first snapshot exists before its Bindings do.
    fn scheduling_settled(&self) -> Result<(), Refusal> {
        let name = &self.o.run.spec.placement_name;
        let Some(placement) = self.o.placement else {
            return Ok(()); // validated: not reached
        };
        let generation = placement.metadata.generation;
        let status = placement.status.as_ref();
        let scheduled = status.and_then(|s| find(&s.conditions, SCHEDULED));
        let Some(scheduled) = scheduled.filter(|c| c.observed_generation == generation) else {
            let described = scheduled
                .and_then(|c| c.observed_generation)
                .map_or("none yet".to_string(), |g| format!("generation {g}"));
            return Err((
                reason::WAITING_FOR_SCHEDULING,
                format!(
                    "waiting for Placement {name} to schedule its generation {} (its Scheduled condition describes {described}; its other conditions say what holds it)",
                    generation.unwrap_or_default()
                ),
            ));
        };
        // An invalid policy or selector selects nothing new: the run goes with the bindings
        // there are (its clusters keep what they run).
        let selection_made = [
            placement_reason::SCHEDULING_POLICY_FULFILLED,
            placement_reason::CLUSTERS_UNAVAILABLE,
        ]
        .contains(&scheduled.reason.as_str());
        let Some(selected) = status.and_then(|s| s.selected_cluster_count) else {
            return Ok(());
        };
        let seen = self
            .o
            .bindings
            .iter()
            .filter(|b| b.state != BindingState::Unscheduled)
            .count();
        if selection_made && seen != selected.max(0) as usize {
            return Err((
                reason::WAITING_FOR_SCHEDULING,
                format!(
                    "Placement {name} selects {selected} clusters; the hub's Bindings show {seen} so far"
                ),
            ));
        }
        Ok(())
    }

    /// The placement's clusters: bound or scheduled ones to update, unscheduled ones to clean.
    fn selected(&self) -> Result<Selected<'a>, Refusal> {
        let mut selected = Selected {
            scheduled: Vec::new(),
            removed: Vec::new(),
        };
        let o: &'a Observed<'o> = self.o;
        for b in &o.bindings {
            match b.state {
                BindingState::Unscheduled => selected.removed.push(&b.cluster),
                BindingState::Scheduled | BindingState::Bound => {
                    selected.scheduled.push(&b.cluster)
                }
            }
        }
        selected.scheduled.sort_unstable();
        selected.removed.sort_unstable();
        let (update, remove) = (selected.scheduled.len(), selected.removed.len());
        let bytes = run_name_bytes(selected.scheduled.iter().chain(&selected.removed).copied());
        if bytes > MAX_RUN_NAME_BYTES {
            return Err((
                reason::TOO_MANY_CLUSTERS,
                format!(
                    "Placement {} has {update} clusters to update and {remove} to remove; their names take {} KiB of the run's status, more than the {} KiB one UpdateRun may use (etcd stores at most 1.5 MiB per object): split the placement into several, each with its own runs",
                    self.o.run.spec.placement_name,
                    bytes / 1024,
                    MAX_RUN_NAME_BYTES / 1024,
                ),
            ));
        }
        Ok(selected)
    }

    /// Each scheduled cluster in the one stage whose selector it matches, in update order: by
    /// the sorting label's value, clusters without the label last, ties by name.
    fn sort_into_stages(
        &self,
        strategy: &StagedUpdateStrategySpec,
        scheduled: &[&str],
    ) -> Result<Vec<Vec<String>>, Refusal> {
        let spec = &self.o.run.spec;
        let selectors: Vec<Option<Selector>> = strategy
            .stages
            .iter()
            .map(|s| {
                s.label_selector
                    .clone()
                    .map(Selector::try_from)
                    .transpose()
                    .map_err(|e| {
                        (
                            reason::INVALID_STRATEGY,
                            format!("stage {}: label selector: {e}", s.name),
                        )
                    })
            })
            .collect::<Result<_, _>>()?;
        let mut per_stage: Vec<Vec<(Option<i64>, String)>> =
            vec![Vec::new(); strategy.stages.len()];
        for cluster in scheduled {
            let labels = self.o.cluster_labels.get(*cluster).ok_or_else(|| {
                (
                    reason::MEMBER_CLUSTER_NOT_FOUND,
                    format!(
                        "Placement {} selects cluster {cluster}, but MemberCluster {cluster} does not exist",
                        spec.placement_name
                    ),
                )
            })?;
            let matching: Vec<usize> = selectors
                .iter()
                .enumerate()
                // A stage without a labelSelector selects no cluster (a stage of gates only).
                .filter(|(_, s)| s.as_ref().is_some_and(|s| s.matches(labels)))
                .map(|(i, _)| i)
                .collect();
            let stage = match matching.as_slice() {
                [one] => *one,
                [] => {
                    return Err((
                        reason::CLUSTER_MATCHES_NO_STAGE,
                        format!(
                            "cluster {cluster} (labels {}) matches no stage of StagedUpdateStrategy {}; every selected cluster must match exactly one stage",
                            format_labels(labels),
                            spec.staged_rollout_strategy_name
                        ),
                    ));
                }
                several => {
                    let names: Vec<&str> = several
                        .iter()
                        .map(|i| strategy.stages[*i].name.as_str())
                        .collect();
                    return Err((
                        reason::CLUSTER_MATCHES_SEVERAL_STAGES,
                        format!(
                            "cluster {cluster} matches stages {} of StagedUpdateStrategy {}; every selected cluster must match exactly one stage",
                            names.join(" and "),
                            spec.staged_rollout_strategy_name
                        ),
                    ));
                }
            };
            let order = sorting_value(&strategy.stages[stage], cluster, labels)?;
            per_stage[stage].push((order, cluster.to_string()));
        }
        Ok(per_stage
            .into_iter()
            .map(|mut clusters| {
                clusters
                    .sort_by(|(a, an), (b, bn)| (a.is_none(), a, an).cmp(&(b.is_none(), b, bn)));
                clusters.into_iter().map(|(_, name)| name).collect()
            })
            .collect())
    }

    /// Writes the frozen strategy, the stages with their clusters and tasks, and the deletion
    /// stage into status.
    fn freeze(
        &mut self,
        strategy: &StagedUpdateStrategySpec,
        per_stage: Vec<Vec<String>>,
        selected: Selected<'_>,
    ) {
        let run = self.run_name().to_string();
        let stages: Vec<StageUpdatingStatus> = strategy
            .stages
            .iter()
            .zip(per_stage)
            .map(|(cfg, clusters)| StageUpdatingStatus {
                stage_name: cfg.name.clone(),
                before_stage_task_status: cfg
                    .before_stage_tasks
                    .iter()
                    .map(|t| task_status(&run, cfg, Side::Before, t, &clusters))
                    .collect(),
                after_stage_task_status: cfg
                    .after_stage_tasks
                    .iter()
                    .map(|t| task_status(&run, cfg, Side::After, t, &clusters))
                    .collect(),
                analysis: cfg.analysis.as_ref().map(|a| MetricCheckStatus {
                    query: metric::expand_for_run(
                        &a.metric_check.query,
                        &clusters,
                        &cfg.name,
                        &run,
                    ),
                    ..Default::default()
                }),
                cluster_list: list_for(clusters.len()),
                clusters: clusters.into_iter().map(cluster_status).collect(),
                ..Default::default()
            })
            .collect();
        self.status.staged_update_strategy_snapshot = Some(strategy.clone());
        self.status.applied_override_snapshots = Some(self.o.override_snapshots.clone());
        self.status.policy_observed_cluster_count = Some(selected.scheduled.len() as i32);
        // What the run's clusters run now: where onFailure: Rollback returns them.
        let index = self.index();
        self.status.previous_resource_snapshot_index = super::rollback::most_common_other(
            selected
                .scheduled
                .iter()
                .filter_map(|c| self.binding(c)?.resource_snapshot_index),
            index,
        )
        .map(|i| i.to_string());
        self.status.stages_status = stages;
        self.status.deletion_stage_status = Some(StageUpdatingStatus {
            stage_name: DELETION_STAGE.to_string(),
            cluster_list: list_for(selected.removed.len()),
            clusters: selected
                .removed
                .iter()
                .map(|c| cluster_status(c.to_string()))
                .collect(),
            ..Default::default()
        });
        let message = super::plan_summary(&self.status);
        self.set_run(
            INITIALIZED,
            TRUE,
            reason::INITIALIZED,
            format!("UpdateRun initialized: {message}"),
        );
        self.event(
            false,
            reason::INITIALIZED,
            format!("initialized: {message}"),
        );
    }
}

/// A stage's tasks, before-stage ones first.
fn stage_tasks(stage: &StageConfig) -> impl Iterator<Item = (Side, &StageTask)> {
    let before = stage.before_stage_tasks.iter().map(|t| (Side::Before, t));
    before.chain(stage.after_stage_tasks.iter().map(|t| (Side::After, t)))
}

/// A task's values can be used: its durations read, its PromQL parses.
fn validate_task(stage: &StageConfig, side: Side, task: &StageTask) -> Result<(), Refusal> {
    let list = match side {
        Side::Before => "beforeStageTasks",
        Side::After => "afterStageTasks",
    };
    let refuse = |why: &'static str, e: String| {
        (
            why,
            format!("stage {} {list} {:?}: {e}", stage.name, task.type_),
        )
    };
    match task.type_ {
        StageTaskType::TimedWait => {
            if let Some(w) = &task.wait_time {
                duration::parse(w).map_err(|e| refuse(reason::INVALID_STRATEGY, e.to_string()))?;
            }
        }
        StageTaskType::Approval => {}
        StageTaskType::MetricCheck => {
            let Some(check) = &task.metric_check else {
                return Err(refuse(
                    reason::INVALID_STRATEGY,
                    "metricCheck is missing".into(),
                ));
            };
            validate_metric_check(stage, &format!("{list} {:?}", task.type_), check)?;
        }
    }
    Ok(())
}

/// A metric check's durations read and its query parses as PromQL; `what` names where it is
/// (`afterStageTasks MetricCheck`, `analysis`).
fn validate_metric_check(
    stage: &StageConfig,
    what: &str,
    check: &MetricCheck,
) -> Result<(), Refusal> {
    let refuse = |why: &'static str, e: String| (why, format!("stage {} {what}: {e}", stage.name));
    Settings::of(check).map_err(|e| refuse(reason::INVALID_STRATEGY, e))?;
    // Cluster names are DNS labels: any stands for them when checking the syntax.
    let query = metric::expand_for_run(&check.query, &["cluster".into()], &stage.name, "run");
    promql_parser::parser::parse(&query).map_err(|e| {
        refuse(
            reason::INVALID_METRIC_QUERY,
            format!("metricCheck.query does not parse as PromQL: {e}"),
        )
    })?;
    Ok(())
}

/// The status entry a stage's task starts with.
fn task_status(
    run: &str,
    stage: &StageConfig,
    side: Side,
    task: &StageTask,
    clusters: &[String],
) -> StageTaskStatus {
    let approval_request_name = match (task.type_, side) {
        (StageTaskType::Approval, Side::Before) => {
            Some(names::before_stage_approval_request_name(run, &stage.name))
        }
        (StageTaskType::Approval, Side::After) => {
            Some(names::approval_request_name(run, &stage.name))
        }
        (StageTaskType::TimedWait | StageTaskType::MetricCheck, _) => None,
    };
    let metric_check = task.metric_check.as_ref().map(|m| MetricCheckStatus {
        query: metric::expand_for_run(&m.query, clusters, &stage.name, run),
        ..Default::default()
    });
    StageTaskStatus {
        type_: task.type_,
        approval_request_name,
        metric_check,
        paused_seconds: None,
        paused_since: None,
        conditions: Vec::new(),
    }
}

/// The integer value of the stage's sorting label on `cluster`, if the stage has one and the
/// cluster carries it.
fn sorting_value(
    stage: &StageConfig,
    cluster: &str,
    labels: &BTreeMap<String, String>,
) -> Result<Option<i64>, Refusal> {
    let Some(key) = &stage.sorting_label_key else {
        return Ok(None);
    };
    let Some(v) = labels.get(key) else {
        return Ok(None);
    };
    v.parse::<i64>().map(Some).map_err(|_| {
        (
            reason::INVALID_SORTING_LABEL,
            format!(
                "cluster {cluster} has label {key}={v:?}, but stage {} orders its clusters by the integer value of {key}",
                stage.name
            ),
        )
    })
}

fn cluster_status(name: String) -> ClusterUpdatingStatus {
    ClusterUpdatingStatus {
        cluster_name: name,
        ..Default::default()
    }
}

fn format_labels(labels: &BTreeMap<String, String>) -> String {
    if labels.is_empty() {
        return "none".to_string();
    }
    labels
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// Where a stage of `clusters` clusters keeps them: stages of over
/// [`DETAILED_STAGE_CLUSTERS`] in the run's UpdateRunPlan, written once (the controller writes
/// it before the status that refers to it), instead of in every status write.
fn list_for(clusters: usize) -> ClusterList {
    if clusters > DETAILED_STAGE_CLUSTERS {
        ClusterList::InPlan
    } else {
        ClusterList::InStatus
    }
}
