//! The UpdateRun planner: a pure function from what the hub observes (the run, its strategy,
//! placement, bindings, the members' Works, approvals) and the time to the run's next status and
//! the writes that move it on. No API server, no clock: everything it decides on is an input, and
//! everything it must remember is in the status it returns — so a restarted hub plans the same.
//!
//! Every action is idempotent (pointing a Binding at an index it already has, creating an
//! ApprovalRequest that exists, …), so performing the actions of a plan twice, or of a plan made
//! from a slightly stale view, never updates a cluster twice or out of order.

use std::collections::BTreeMap;
use std::time::Duration;

use fleethub_crds::binding::BindingState;
use fleethub_crds::concurrency::MaxConcurrency;
use fleethub_crds::conditions::{self, FALSE, NewCondition, TRUE, find, is_true, set_condition};
use fleethub_crds::placement::RolloutStrategyType;
use fleethub_crds::strategy::{AfterStageTaskType, StagedUpdateStrategySpec};
use fleethub_crds::update_run::{
    AfterStageTaskStatus, ClusterUpdatingStatus, INITIALIZED, PROGRESSING, SUCCEEDED,
    StageUpdatingStatus, UpdateRunState, UpdateRunStatus,
};
use fleethub_crds::work::{APPLIED, AVAILABLE};
use fleethub_crds::{Placement, UpdateRun, duration, names};
use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::core::{Selector, SelectorExt};

/// Name of the final stage that removes the workload from clusters no longer selected.
pub const DELETION_STAGE: &str = "fleethub.dev/delete";
/// How long a cluster may take to become available when the run does not say.
pub const DEFAULT_HEALTH_TIMEOUT: Duration = Duration::from_secs(300);
/// The most clusters one run tracks. Each cluster's progress is kept in the run's status (about
/// 550 bytes with a 50-character name), and etcd stores at most 1.5 MiB per object: past this a
/// run could not record its progress at all, so it is refused at initialization instead.
pub const MAX_RUN_CLUSTERS: usize = 2_000;

/// Cluster condition: the run pointed the cluster at the snapshot.
pub const CLUSTER_STARTED: &str = "Started";
/// Task condition: a TimedWait's time has passed.
pub const WAIT_TIME_ELAPSED: &str = "WaitTimeElapsed";
/// Task condition: the ApprovalRequest exists.
pub const APPROVAL_REQUEST_CREATED: &str = "ApprovalRequestCreated";
/// Task condition: a person approved.
pub const APPROVAL_REQUEST_APPROVED: &str = "ApprovalRequestApproved";

/// Reasons the planner writes, for conditions and events.
pub mod reason {
    pub const INITIALIZED: &str = "UpdateRunInitializedSuccessfully";
    pub const INITIALIZATION_FAILED: &str = "UpdateRunInitializationFailed";
    pub const STARTED: &str = "UpdateRunStarted";
    pub const WAITING: &str = "UpdateRunWaiting";
    pub const STOPPED: &str = "UpdateRunStopped";
    pub const CLUSTER_FAILED: &str = "ClusterUpdateFailed";
    pub const SUCCEEDED: &str = "UpdateRunSucceeded";
    pub const FAILED: &str = "UpdateRunFailed";
    pub const SUPERSEDED: &str = "UpdateRunSuperseded";
    pub const WAITING_FOR_PREVIOUS_RUN: &str = "WaitingForPreviousRun";
    pub const STAGE_STARTED: &str = "StageUpdatingStarted";
    pub const STAGE_WAITING: &str = "StageUpdatingWaiting";
    pub const STAGE_FAILED: &str = "StageUpdatingFailed";
    pub const STAGE_SUCCEEDED: &str = "StageUpdatingSucceeded";
    pub const CLUSTER_STARTED: &str = "ClusterUpdatingStarted";
    pub const CLUSTER_SUCCEEDED: &str = "ClusterUpdatingSucceeded";
    pub const CLUSTER_UPDATE_FAILED: &str = "ClusterUpdatingFailed";
    pub const CLUSTER_HEALTH_TIMEOUT: &str = "ClusterHealthTimeout";
    pub const WAIT_PENDING: &str = "AfterStageTaskWaiting";
    pub const WAIT_ELAPSED: &str = "AfterStageTaskWaitTimeElapsed";
    pub const APPROVAL_CREATED: &str = "AfterStageTaskApprovalRequestCreated";
    pub const APPROVAL_APPROVED: &str = "AfterStageTaskApprovalRequestApproved";
}

/// A Binding as the planner needs it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BindingView {
    /// The bound MemberCluster.
    pub cluster: String,
    /// Its state.
    pub state: BindingState,
    /// The snapshot index it points at.
    pub resource_snapshot_index: Option<i64>,
    /// The UpdateRun that last pointed it.
    pub update_run_name: Option<String>,
    /// The health timeout it carries to the Work.
    pub health_timeout: Option<String>,
}

/// A condition as the planner needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConditionView {
    /// `True`/`False`/`Unknown`.
    pub status: String,
    /// CamelCase reason.
    pub reason: String,
    /// The member's message.
    pub message: String,
    /// The Work generation the condition describes.
    pub observed_generation: Option<i64>,
}

impl ConditionView {
    fn from(c: &Condition) -> Self {
        Self {
            status: c.status.clone(),
            reason: c.reason.clone(),
            message: c.message.clone(),
            observed_generation: c.observed_generation,
        }
    }
}

/// A member's Work for the run's placement, as the planner needs it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct WorkView {
    /// The snapshot index the Work carries.
    pub index: i64,
    /// The Work's generation.
    pub generation: Option<i64>,
    /// The member's `Applied` condition.
    pub applied: Option<ConditionView>,
    /// The member's `Available` condition.
    pub available: Option<ConditionView>,
    /// The index the member last applied.
    pub applied_index: Option<i64>,
}

impl WorkView {
    /// The planner's view of a Work object.
    pub fn from_work(work: &fleethub_crds::Work) -> Self {
        let status = work.status.clone().unwrap_or_default();
        Self {
            index: work.spec.resource_snapshot_index,
            generation: work.metadata.generation,
            applied: find(&status.conditions, APPLIED).map(ConditionView::from),
            available: find(&status.conditions, AVAILABLE).map(ConditionView::from),
            applied_index: status.applied_resource_snapshot_index,
        }
    }
}

/// An ApprovalRequest as the planner needs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ApprovalView {
    /// A person set `Approved=True`.
    pub approved: bool,
    /// The hub set `ApprovalAccepted=True`.
    pub accepted: bool,
}

/// Everything the planner looks at.
#[derive(Debug, Clone)]
pub struct Observed<'a> {
    /// The run.
    pub run: &'a UpdateRun,
    /// The strategy the run names, if it exists (only read at initialization).
    pub strategy: Option<&'a StagedUpdateStrategySpec>,
    /// The placement the run names, if it exists.
    pub placement: Option<&'a Placement>,
    /// Whether the placement has a ResourceSnapshot at the run's index.
    pub snapshot_exists: bool,
    /// Every MemberCluster's labels.
    pub cluster_labels: BTreeMap<String, BTreeMap<String, String>>,
    /// MemberClusters whose agent is not heartbeating (`Healthy=False`), with the condition's
    /// message: named when one of their updates times out.
    pub unhealthy_members: BTreeMap<String, String>,
    /// The placement's bindings.
    pub bindings: Vec<BindingView>,
    /// The placement's Works, by member cluster.
    pub works: BTreeMap<String, WorkView>,
    /// ApprovalRequests by name.
    pub approvals: BTreeMap<String, ApprovalView>,
    /// Runs of the same placement created before this one that have not finished: this run
    /// starts once they have (they yield to it).
    pub earlier_runs: Vec<String>,
    /// Runs of the same placement created after this one that have not finished and passed
    /// validation (initialized, or waiting for this run): this run yields to them.
    pub later_runs: Vec<String>,
    /// Now.
    pub now: Timestamp,
}

/// A write that moves the run on. All are idempotent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Point the cluster's Binding at the run's snapshot index (state Bound).
    Bind {
        /// The MemberCluster.
        cluster: String,
        /// The resource snapshot index.
        index: i64,
    },
    /// Create the ApprovalRequest `name` for `stage` unless it exists.
    CreateApproval {
        /// `<run>-<stage>`.
        name: String,
        /// The stage it gates.
        stage: String,
    },
    /// Set `ApprovalAccepted=True` on an approved request.
    AcceptApproval {
        /// The request.
        name: String,
    },
    /// Remove the placement's workload from a cluster it no longer selects (delete its Binding).
    Unbind {
        /// The MemberCluster.
        cluster: String,
    },
}

/// Something worth a Kubernetes Event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlanEvent {
    /// A Warning rather than Normal event.
    pub warning: bool,
    /// CamelCase reason.
    pub reason: &'static str,
    /// A sentence.
    pub message: String,
    /// How long what just finished took (a cluster update, a stage, an approval wait).
    pub seconds: Option<i64>,
}

/// What to do next.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// The run's new status.
    pub status: UpdateRunStatus,
    /// Writes to perform before the status is written.
    pub actions: Vec<Action>,
    /// Reconcile again after this long at the latest (a timer is pending).
    pub requeue_after: Option<Duration>,
    /// Transitions to record as events.
    pub events: Vec<PlanEvent>,
}

/// Plans the run's next step.
pub fn plan(o: &Observed<'_>) -> Plan {
    let mut p = Planner {
        o,
        generation: o.run.metadata.generation,
        status: o.run.status.clone().unwrap_or_default(),
        actions: Vec::new(),
        requeue: None,
        events: Vec::new(),
    };
    p.run();
    Plan {
        status: p.status,
        actions: p.actions,
        requeue_after: p.requeue,
        events: p.events,
    }
}

struct Planner<'a, 'o> {
    o: &'a Observed<'o>,
    generation: Option<i64>,
    status: UpdateRunStatus,
    actions: Vec<Action>,
    requeue: Option<Duration>,
    events: Vec<PlanEvent>,
}

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
    fn run_name(&self) -> &str {
        self.o.run.metadata.name.as_deref().unwrap_or_default()
    }

    /// Whether `cluster`'s binding already points at `index` for this run (with its health
    /// timeout).
    fn bound_by_this_run(&self, cluster: &str, index: i64) -> bool {
        self.o.bindings.iter().any(|b| {
            b.cluster == cluster
                && b.state == BindingState::Bound
                && b.resource_snapshot_index == Some(index)
                && b.update_run_name.as_deref() == Some(self.run_name())
                && b.health_timeout == self.o.run.spec.health_timeout
        })
    }

    fn index(&self) -> i64 {
        self.o
            .run
            .spec
            .resource_snapshot_index
            .parse()
            .unwrap_or(-1)
    }

    fn cond(
        &self,
        type_: &'static str,
        status: &'static str,
        reason: &'static str,
        message: String,
    ) -> NewCondition<'static> {
        NewCondition::new(type_, status, reason, message, self.generation)
    }

    fn set_run(
        &mut self,
        type_: &'static str,
        status: &'static str,
        reason: &'static str,
        message: String,
    ) {
        let c = self.cond(type_, status, reason, message);
        set_condition(&mut self.status.conditions, c, self.o.now);
    }

    fn event(&mut self, warning: bool, reason: &'static str, message: String) {
        self.events.push(PlanEvent {
            warning,
            reason,
            message,
            seconds: None,
        });
    }

    /// An event about something that finished, having started at `since`.
    fn timed_event(&mut self, reason: &'static str, message: String, since: Option<Timestamp>) {
        let seconds = since.map(|t| self.o.now.as_second() - t.as_second());
        self.events.push(PlanEvent {
            warning: false,
            reason,
            message,
            seconds,
        });
    }

    fn requeue_at(&mut self, at: Timestamp) {
        let secs = at.as_second().saturating_sub(self.o.now.as_second()).max(1) as u64;
        let d = Duration::from_secs(secs);
        self.requeue = Some(self.requeue.map_or(d, |r| r.min(d)));
    }

    fn run(&mut self) {
        if find(&self.status.conditions, SUCCEEDED).is_some() {
            return; // finished, one way or the other
        }
        if let Some(later) = self.o.later_runs.first() {
            // A newer run of the same placement supersedes this one: stop where we are, write
            // nothing more, and end, so the newer run starts from what the clusters run now.
            let message = format!(
                "superseded by UpdateRun {later}, created later for Placement {}; clusters keep what they run, and {later} continues from there",
                self.o.run.spec.placement_name
            );
            self.set_run(PROGRESSING, FALSE, reason::SUPERSEDED, message.clone());
            self.set_run(SUCCEEDED, FALSE, reason::SUPERSEDED, message.clone());
            self.status.end_time = Some(Time(self.o.now));
            self.event(false, reason::SUPERSEDED, message);
            return;
        }
        if !is_true(&self.status.conditions, INITIALIZED) {
            match self.initialize() {
                Ok(()) => {}
                Err((reason::WAITING_FOR_PREVIOUS_RUN, message)) => {
                    // Not final: initialization is tried again once the earlier run has ended.
                    let first = find(&self.status.conditions, INITIALIZED)
                        .is_none_or(|c| c.reason != reason::WAITING_FOR_PREVIOUS_RUN);
                    self.set_run(
                        INITIALIZED,
                        FALSE,
                        reason::WAITING_FOR_PREVIOUS_RUN,
                        message.clone(),
                    );
                    self.set_run(
                        PROGRESSING,
                        FALSE,
                        reason::WAITING_FOR_PREVIOUS_RUN,
                        message.clone(),
                    );
                    if first {
                        self.event(false, reason::WAITING_FOR_PREVIOUS_RUN, message);
                    }
                    return;
                }
                Err((why, message)) => {
                    self.set_run(INITIALIZED, FALSE, why, message.clone());
                    self.set_run(
                        PROGRESSING,
                        FALSE,
                        reason::INITIALIZATION_FAILED,
                        message.clone(),
                    );
                    self.set_run(SUCCEEDED, FALSE, reason::FAILED, message.clone());
                    self.status.end_time = Some(Time(self.o.now));
                    self.event(true, why, message);
                    return;
                }
            }
        }
        self.status.observed_generation = self.generation;
        self.execute();
    }

    // ---------------------------------------------------------------------------------------
    // initialization

    fn initialize(&mut self) -> Result<(), (&'static str, String)> {
        let o = self.o;
        let spec = &o.run.spec;
        let placement = o.placement.ok_or_else(|| {
            (
                "PlacementNotFound",
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
                "PlacementNotExternal",
                format!(
                    "Placement {} rolls out with strategy {strategy_type:?}; UpdateRuns only drive placements whose spec.strategy.type is External",
                    spec.placement_name
                ),
            ));
        }
        let strategy = o.strategy.ok_or_else(|| {
            (
                "StrategyNotFound",
                format!(
                    "StagedUpdateStrategy {} does not exist",
                    spec.staged_rollout_strategy_name
                ),
            )
        })?;
        if !o.snapshot_exists {
            return Err((
                "ResourceSnapshotNotFound",
                format!(
                    "Placement {} has no ResourceSnapshot with index {} (see kubectl get resourcesnapshots --field-selector spec.placementName={})",
                    spec.placement_name, spec.resource_snapshot_index, spec.placement_name
                ),
            ));
        }
        for (i, stage) in strategy.stages.iter().enumerate() {
            MaxConcurrency::parse(stage.max_concurrency.as_ref()).map_err(|e| {
                (
                    "InvalidStrategy",
                    format!("stage {} (spec.stages[{i}]): {e}", stage.name),
                )
            })?;
            for task in &stage.after_stage_tasks {
                if let Some(w) = &task.wait_time {
                    duration::parse(w)
                        .map_err(|e| ("InvalidStrategy", format!("stage {}: {e}", stage.name)))?;
                }
            }
        }
        if let Some(t) = &spec.health_timeout {
            duration::parse(t)
                .map_err(|e| ("InvalidHealthTimeout", format!("spec.healthTimeout: {e}")))?;
        }
        // Checked after validation, so a run that could never start does not stop an earlier
        // one. The earlier run yields to this one (it sees this run waiting) and ends.
        if let Some(earlier) = o.earlier_runs.first() {
            return Err((
                reason::WAITING_FOR_PREVIOUS_RUN,
                format!(
                    "waiting for UpdateRun {earlier}, which this newer run supersedes, to stop rolling out Placement {}",
                    spec.placement_name
                ),
            ));
        }

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
                            "InvalidStrategy",
                            format!("stage {}: label selector: {e}", s.name),
                        )
                    })
            })
            .collect::<Result<_, _>>()?;

        let mut scheduled: Vec<&str> = Vec::new();
        let mut removed: Vec<&str> = Vec::new();
        for b in &o.bindings {
            match b.state {
                BindingState::Unscheduled => removed.push(&b.cluster),
                BindingState::Scheduled | BindingState::Bound => scheduled.push(&b.cluster),
            }
        }
        scheduled.sort_unstable();
        removed.sort_unstable();
        if scheduled.len() + removed.len() > MAX_RUN_CLUSTERS {
            return Err((
                "TooManyClusters",
                format!(
                    "Placement {} has {} clusters to update and {} to remove, but one UpdateRun tracks at most {MAX_RUN_CLUSTERS} (each cluster's progress is kept in the run's status, which etcd limits to 1.5 MiB): split the placement into several, each with its own runs",
                    spec.placement_name,
                    scheduled.len(),
                    removed.len()
                ),
            ));
        }

        let mut per_stage: Vec<Vec<(Option<i64>, String)>> =
            vec![Vec::new(); strategy.stages.len()];
        for cluster in &scheduled {
            let labels = o.cluster_labels.get(*cluster).ok_or_else(|| {
                (
                    "MemberClusterNotFound",
                    format!("Placement {} selects cluster {cluster}, but MemberCluster {cluster} does not exist", spec.placement_name),
                )
            })?;
            let matching: Vec<usize> = selectors
                .iter()
                .enumerate()
                .filter(|(_, s)| s.as_ref().is_none_or(|s| s.matches(labels)))
                .map(|(i, _)| i)
                .collect();
            let stage = match matching.as_slice() {
                [one] => *one,
                [] => {
                    return Err((
                        "ClusterMatchesNoStage",
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
                        "ClusterMatchesSeveralStages",
                        format!(
                            "cluster {cluster} matches stages {} of StagedUpdateStrategy {}; every selected cluster must match exactly one stage",
                            names.join(" and "),
                            spec.staged_rollout_strategy_name
                        ),
                    ));
                }
            };
            let cfg = &strategy.stages[stage];
            let order = match &cfg.sorting_label_key {
                Some(key) => match labels.get(key) {
                    Some(v) => Some(v.parse::<i64>().map_err(|_| {
                        (
                            "InvalidSortingLabel",
                            format!(
                                "cluster {cluster} has label {key}={v:?}, but stage {} orders its clusters by the integer value of {key}",
                                cfg.name
                            ),
                        )
                    })?),
                    None => None,
                },
                None => None,
            };
            per_stage[stage].push((order, cluster.to_string()));
        }

        let run = self.run_name().to_string();
        let mut stages = Vec::new();
        for (cfg, mut clusters) in strategy.stages.iter().zip(per_stage) {
            // By the sorting label's value, clusters without the label last, ties by name.
            clusters.sort_by(|(a, an), (b, bn)| (a.is_none(), a, an).cmp(&(b.is_none(), b, bn)));
            let mut tasks: Vec<AfterStageTaskStatus> = cfg
                .after_stage_tasks
                .iter()
                .map(|t| AfterStageTaskStatus {
                    type_: t.type_,
                    approval_request_name: (t.type_ == AfterStageTaskType::Approval)
                        .then(|| names::approval_request_name(&run, &cfg.name)),
                    conditions: Vec::new(),
                })
                .collect();
            tasks.sort_by_key(|t| t.type_);
            stages.push(StageUpdatingStatus {
                stage_name: cfg.name.clone(),
                clusters: clusters
                    .into_iter()
                    .map(|(_, name)| cluster_status(name))
                    .collect(),
                after_stage_task_status: tasks,
                ..Default::default()
            });
        }
        let message = format!(
            "{} clusters in {} stages, {} to remove afterwards",
            scheduled.len(),
            stages.len(),
            removed.len()
        );
        self.status.staged_update_strategy_snapshot = Some(strategy.clone());
        self.status.policy_observed_cluster_count = Some(scheduled.len() as i32);
        self.status.stages_status = stages;
        self.status.deletion_stage_status = Some(StageUpdatingStatus {
            stage_name: DELETION_STAGE.to_string(),
            clusters: removed
                .into_iter()
                .map(|c| cluster_status(c.to_string()))
                .collect(),
            ..Default::default()
        });
        self.status.start_time = Some(Time(self.o.now));
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
        Ok(())
    }

    // ---------------------------------------------------------------------------------------
    // execution

    fn execute(&mut self) {
        let stopped = self.o.run.spec.state == Some(UpdateRunState::Stop);
        let health_timeout = self
            .o
            .run
            .spec
            .health_timeout
            .as_deref()
            .and_then(|t| duration::parse(t).ok())
            .unwrap_or(DEFAULT_HEALTH_TIMEOUT);
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
            if !self.gate_stage(i) {
                if stopped {
                    // A person who stopped the run sees it stopped, with what the gate waits
                    // for; an approval given meanwhile counts, but starts nothing until Run.
                    let waiting =
                        find(&self.status.conditions, PROGRESSING).map(|c| c.message.clone());
                    self.stopped(waiting);
                }
                return;
            }
        }
        self.deletion_stage(stopped);
    }

    /// Marks the stage started, judges its started clusters; false when one has failed.
    fn track_clusters(&mut self, i: usize, health_timeout: Duration) -> bool {
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
            let progress = judge_work(self.o.works.get(&name), index);
            if !matches!(progress, ClusterProgress::Done) && !self.bound_by_this_run(&name, index) {
                // Point the binding at the snapshot again when it does not say so: this repairs
                // a crash between recording the start and writing the binding. A binding that
                // already says so is not rewritten: a large stage has many clusters in flight
                // and every reconcile would re-send all of them before recording anything.
                self.actions.push(Action::Bind {
                    cluster: name.clone(),
                    index,
                });
            }
            let deadline = started.checked_add(health_timeout).unwrap_or(started);
            let outcome = match progress {
                ClusterProgress::Pending(_) if now < deadline => {
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
            });
            self.event(
                false,
                reason::CLUSTER_STARTED,
                format!("stage {stage_name}: updating cluster {name} to resource snapshot {index}"),
            );
            room -= 1;
        }
    }

    /// Runs the after-stage tasks of a stage whose clusters are all done; true once they passed.
    fn gate_stage(&mut self, i: usize) -> bool {
        let now = self.o.now;
        let stage_name = self.status.stages_status[i].stage_name.clone();
        let completed = self.status.stages_status[i]
            .clusters_completed_time
            .get_or_insert(Time(now))
            .clone();
        let wait_times: BTreeMap<AfterStageTaskType, Duration> = self
            .status
            .staged_update_strategy_snapshot
            .as_ref()
            .and_then(|s| s.stages.get(i))
            .map(|cfg| {
                cfg.after_stage_tasks
                    .iter()
                    .filter_map(|t| Some((t.type_, duration::parse(t.wait_time.as_deref()?).ok()?)))
                    .collect()
            })
            .unwrap_or_default();

        let mut pending = Vec::new();
        for t in 0..self.status.stages_status[i].after_stage_task_status.len() {
            let task = self.status.stages_status[i].after_stage_task_status[t].clone();
            let mut conds = task.conditions.clone();
            match task.type_ {
                AfterStageTaskType::TimedWait => {
                    let wait = wait_times
                        .get(&AfterStageTaskType::TimedWait)
                        .copied()
                        .unwrap_or_default();
                    let until = completed.0.checked_add(wait).unwrap_or(completed.0);
                    if is_true(&conds, WAIT_TIME_ELAPSED) {
                    } else if now >= until {
                        let c = self.cond(
                            WAIT_TIME_ELAPSED,
                            TRUE,
                            reason::WAIT_ELAPSED,
                            format!("waited {}", duration::format(wait)),
                        );
                        set_condition(&mut conds, c, now);
                        self.event(
                            false,
                            reason::WAIT_ELAPSED,
                            format!("stage {stage_name}: waited {}", duration::format(wait)),
                        );
                    } else {
                        let c = self.cond(
                            WAIT_TIME_ELAPSED,
                            FALSE,
                            reason::WAIT_PENDING,
                            format!(
                                "waiting {} after the stage's clusters finished, until {until}",
                                duration::format(wait)
                            ),
                        );
                        set_condition(&mut conds, c, now);
                        self.requeue_at(until);
                        pending.push(format!("waits until {until}"));
                    }
                }
                AfterStageTaskType::Approval => {
                    let name = task.approval_request_name.clone().unwrap_or_else(|| {
                        names::approval_request_name(self.run_name(), &stage_name)
                    });
                    let approval = self.o.approvals.get(&name).copied();
                    if approval.is_none() {
                        self.actions.push(Action::CreateApproval {
                            name: name.clone(),
                            stage: stage_name.clone(),
                        });
                    }
                    if !is_true(&conds, APPROVAL_REQUEST_CREATED) {
                        let c = self.cond(
                            APPROVAL_REQUEST_CREATED,
                            TRUE,
                            reason::APPROVAL_CREATED,
                            format!("ApprovalRequest {name} created"),
                        );
                        set_condition(&mut conds, c, now);
                        self.event(
                            false,
                            reason::APPROVAL_CREATED,
                            format!(
                                "stage {stage_name} waits for approval: ApprovalRequest {name}"
                            ),
                        );
                    }
                    match approval {
                        Some(a) if a.approved || is_true(&conds, APPROVAL_REQUEST_APPROVED) => {
                            if !a.accepted {
                                self.actions
                                    .push(Action::AcceptApproval { name: name.clone() });
                            }
                            if !is_true(&conds, APPROVAL_REQUEST_APPROVED) {
                                let c = self.cond(
                                    APPROVAL_REQUEST_APPROVED,
                                    TRUE,
                                    reason::APPROVAL_APPROVED,
                                    format!("ApprovalRequest {name} approved"),
                                );
                                let requested = find(&conds, APPROVAL_REQUEST_CREATED)
                                    .map(|c| c.last_transition_time.0);
                                set_condition(&mut conds, c, now);
                                let message =
                                    format!("stage {stage_name} approved (ApprovalRequest {name})");
                                self.timed_event(reason::APPROVAL_APPROVED, message, requested);
                            }
                        }
                        _ => pending.push(format!("waits for approval of ApprovalRequest {name}")),
                    }
                }
            }
            self.status.stages_status[i].after_stage_task_status[t].conditions = conds;
        }

        let stage = &mut self.status.stages_status[i];
        if !pending.is_empty() {
            let message = format!(
                "stage {stage_name}: all clusters updated; {}",
                pending.join(" and ")
            );
            let c = NewCondition::new(
                PROGRESSING,
                FALSE,
                reason::STAGE_WAITING,
                message.clone(),
                self.generation,
            );
            set_condition(&mut stage.conditions, c, now);
            self.set_run(PROGRESSING, FALSE, reason::WAITING, message);
            return false;
        }
        for (type_, status, why) in [
            (PROGRESSING, FALSE, reason::STAGE_SUCCEEDED),
            (SUCCEEDED, TRUE, reason::STAGE_SUCCEEDED),
        ] {
            let c = NewCondition::new(
                type_,
                status,
                why,
                format!("stage {stage_name} succeeded"),
                self.generation,
            );
            set_condition(&mut stage.conditions, c, now);
        }
        stage.end_time = Some(Time(now));
        let started = stage.start_time.as_ref().map(|t| t.0);
        self.timed_event(
            reason::STAGE_SUCCEEDED,
            format!("stage {stage_name} succeeded"),
            started,
        );
        true
    }

    /// The run is stopped; `meanwhile`: what its current stage still waits for.
    fn stopped(&mut self, meanwhile: Option<String>) {
        let mut message =
            "stopped by spec.state=Stop: no new cluster starts; set spec.state to Run to resume"
                .to_string();
        if let Some(m) = meanwhile {
            message = format!("{message} (meanwhile {m})");
        }
        self.set_run(PROGRESSING, FALSE, reason::STOPPED, message);
    }

    fn deletion_stage(&mut self, stopped: bool) {
        let now = self.o.now;
        let mut del =
            self.status
                .deletion_stage_status
                .take()
                .unwrap_or_else(|| StageUpdatingStatus {
                    stage_name: DELETION_STAGE.to_string(),
                    ..Default::default()
                });
        self.status.current_stage = Some(DELETION_STAGE.to_string());
        let mut remaining = Vec::new();
        if !del.clusters.is_empty() && stopped && del.start_time.is_none() {
            self.status.deletion_stage_status = Some(del);
            self.stopped(None);
            return;
        }
        del.start_time.get_or_insert(Time(now));
        for cluster in &mut del.clusters {
            if is_true(&cluster.conditions, SUCCEEDED) {
                continue;
            }
            let name = cluster.cluster_name.clone();
            if find(&cluster.conditions, CLUSTER_STARTED).is_none() {
                let c = NewCondition::new(
                    CLUSTER_STARTED,
                    TRUE,
                    reason::CLUSTER_STARTED,
                    format!("removing the workload from cluster {name}"),
                    self.generation,
                );
                set_condition(&mut cluster.conditions, c, now);
                cluster.start_time = Some(Time(now));
            }
            let still_bound = self.o.bindings.iter().any(|b| b.cluster == name);
            if still_bound || self.o.works.contains_key(&name) {
                self.actions.push(Action::Unbind {
                    cluster: name.clone(),
                });
                remaining.push(name);
            } else {
                let c = NewCondition::new(
                    SUCCEEDED,
                    TRUE,
                    reason::CLUSTER_SUCCEEDED,
                    format!("the workload was removed from cluster {name}"),
                    self.generation,
                );
                set_condition(&mut cluster.conditions, c, now);
                cluster.end_time = Some(Time(now));
            }
        }
        if !remaining.is_empty() {
            let message = format!("removing the workload from {}", remaining.join(", "));
            self.status.deletion_stage_status = Some(del);
            self.set_run(PROGRESSING, TRUE, reason::STARTED, message);
            return;
        }
        for (type_, status) in [(PROGRESSING, FALSE), (SUCCEEDED, TRUE)] {
            let c = NewCondition::new(
                type_,
                status,
                reason::STAGE_SUCCEEDED,
                "deletion stage succeeded".to_string(),
                self.generation,
            );
            set_condition(&mut del.conditions, c, now);
        }
        del.end_time.get_or_insert(Time(now));
        self.status.deletion_stage_status = Some(del);
        self.status.current_stage = None;
        self.status.end_time = Some(Time(now));
        let message = format!(
            "every cluster runs resource snapshot {} of Placement {}",
            self.o.run.spec.resource_snapshot_index, self.o.run.spec.placement_name
        );
        self.set_run(PROGRESSING, FALSE, reason::SUCCEEDED, message.clone());
        self.set_run(SUCCEEDED, TRUE, reason::SUCCEEDED, message.clone());
        self.event(false, reason::SUCCEEDED, message);
    }
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
    if available.status == FALSE && available.reason == "HealthTimeout" {
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
