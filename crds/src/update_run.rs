//! `UpdateRun`: one execution of a strategy, rolling one placement to one snapshot index.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
#[allow(unused_imports)]
use kube::core::{ListMerge, Rule};
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub use crate::metric_check::{MetricCheckResult, MetricCheckStatus};
use crate::stored_stage::{StoredStage, UnreadClusters};
use crate::strategy::{OnFailure, StageTaskType, StagedUpdateStrategySpec};

/// Condition type: the run froze its strategy and cluster plan into status.
pub const INITIALIZED: &str = "Initialized";
/// Condition type (run and stage): moving (False while it waits on a gate or is stopped).
pub const PROGRESSING: &str = "Progressing";
/// Condition type (run, stage and cluster): finished (True) or failed (False).
pub const SUCCEEDED: &str = "Succeeded";
/// Cluster condition type: the run pointed the cluster's Binding at the snapshot.
pub const CLUSTER_STARTED: &str = "Started";
/// After-stage task condition type: a TimedWait's time has passed.
pub const WAIT_TIME_ELAPSED: &str = "WaitTimeElapsed";
/// After-stage task condition type: the ApprovalRequest exists.
pub const APPROVAL_REQUEST_CREATED: &str = "ApprovalRequestCreated";
/// After-stage task condition type: a person approved and the run took it into account.
pub const APPROVAL_REQUEST_APPROVED: &str = "ApprovalRequestApproved";
/// MetricCheck task condition type: the query passed successThreshold consecutive checks.
pub const METRIC_CHECK_PASSED: &str = "MetricCheckPassed";
/// Cluster condition type: a cluster the run had updated lost its health afterwards (its Work
/// turned not Available or not Applied): True while it is so, False once it recovered. While a
/// cluster of the run is regressed the run holds: no cluster starts and no gate passes.
pub const REGRESSED: &str = "Regressed";
/// Cluster condition type: the run passed the cluster over (it left the placement, or its member
/// was not healthy at its turn and the stage's failure budget allowed going on without it).
pub const CLUSTER_SKIPPED: &str = "Skipped";

/// The most names `status.clustersNotInRun.names` lists (the count goes on).
pub const MAX_CLUSTERS_NOT_IN_RUN_NAMES: usize = 20;

/// Name of the final stage (`status.deletionStageStatus`) that removes the workload from
/// clusters the placement no longer selects.
pub const DELETION_STAGE: &str = "fleethub.dev/delete";
/// The most bytes the names of a run's clusters may take. A run keeps its plan (every cluster's
/// name, in order) in its status for stages of at most 100 clusters, and in its UpdateRunPlan
/// for larger ones (see [`stored_stage`](crate::stored_stage)); etcd stores at most 1.5 MiB per
/// object. This admits about 15,000 clusters of 63-character names and 75,000 of 11-character
/// ones; a larger placement is refused at initialization.
pub const MAX_RUN_NAME_BYTES: usize = 1024 * 1024;

/// The bytes `names` take in a run's status (each quoted, comma-separated).
pub fn run_name_bytes<'a>(names: impl IntoIterator<Item = &'a str>) -> usize {
    names.into_iter().map(|n| n.len() + 3).sum()
}

/// Reasons of a run's, a stage's, a cluster's and a task's conditions (and of the run's
/// events).
pub mod reason {
    /// Initialized=True.
    pub const INITIALIZED: &str = "UpdateRunInitializedSuccessfully";
    /// Progressing=False after a final initialization failure.
    pub const INITIALIZATION_FAILED: &str = "UpdateRunInitializationFailed";
    /// Progressing=True: clusters are updating.
    pub const STARTED: &str = "UpdateRunStarted";
    /// Progressing=False: an after-stage task waits.
    pub const WAITING: &str = "UpdateRunWaiting";
    /// Progressing=False: the next stage may not start yet (outside its allowed windows, or
    /// inside a blocked one); the message names the window and the next opening.
    pub const OUTSIDE_WINDOW: &str = "OutsideWindow";
    /// Progressing=False: a Freeze holds the run's placement; nothing new starts until it
    /// lifts (the message names it, who made it and why).
    pub const FROZEN: &str = "Frozen";
    /// Progressing=False: `spec.state` is Stop.
    pub const STOPPED: &str = "UpdateRunStopped";
    /// Progressing=True: `spec.state` is Stop; clusters already updating finish first.
    pub const STOPPING: &str = "UpdateRunStopping";
    /// Progressing=False: `spec.state` is Initialize; the plan is in status, nothing starts
    /// until `spec.state` is Run.
    pub const NOT_STARTED: &str = "UpdateRunNotStarted";
    /// Progressing=False: the next cluster's member is not healthy; the run waits for it (the
    /// stage's maxFailedClusters budget is spent or zero).
    pub const WAITING_FOR_MEMBER: &str = "WaitingForHealthyMember";
    /// Progressing=False and Succeeded=False: the run's UpdateRunPlan, the order of its
    /// clusters, was deleted.
    pub const PLAN_LOST: &str = "UpdateRunPlanLost";
    /// Succeeded=False (run and stage): the stage's background analysis had failureLimit
    /// consecutive checks without data.
    pub const ANALYSIS_FAILED: &str = "AnalysisFailed";
    /// Succeeded=False: the Placement was deleted while the run rolled it out.
    pub const PLACEMENT_DELETED: &str = "PlacementDeleted";
    /// Cluster Skipped=True: the cluster left the placement (no longer selected, or its
    /// MemberCluster left) before or while the run updated it.
    pub const CLUSTER_UNSELECTED: &str = "ClusterUnselected";
    /// Deletion-stage cluster Skipped=True: the placement selects the cluster again, so its
    /// workload is not removed.
    pub const CLUSTER_SELECTED_AGAIN: &str = "ClusterSelectedAgain";
    /// Cluster Skipped=True: its member was not healthy at its turn; the stage's
    /// maxFailedClusters budget let the run go on without it.
    pub const MEMBER_UNHEALTHY: &str = "MemberClusterUnhealthy";
    /// Progressing=False: a cluster failed; nothing new starts.
    pub const CLUSTER_FAILED: &str = "ClusterUpdateFailed";
    /// Succeeded=True.
    pub const SUCCEEDED: &str = "UpdateRunSucceeded";
    /// Succeeded=False after a final initialization failure.
    pub const FAILED: &str = "UpdateRunFailed";
    /// Succeeded=False: a newer run of the same placement took over.
    pub const SUPERSEDED: &str = "UpdateRunSuperseded";
    /// Initialized=False (not final): an earlier run of the placement has not stopped yet.
    pub const WAITING_FOR_PREVIOUS_RUN: &str = "WaitingForPreviousRun";
    /// Initialized=False (not final): the placement has not scheduled its current spec yet, or
    /// the hub's Bindings do not show all the clusters it selected yet.
    pub const WAITING_FOR_SCHEDULING: &str = "WaitingForScheduling";
    /// Stage Progressing=True.
    pub const STAGE_STARTED: &str = "StageUpdatingStarted";
    /// Stage Progressing=False: its clusters are done, its after-stage tasks wait.
    pub const STAGE_WAITING: &str = "StageUpdatingWaiting";
    /// Stage Progressing=False: a cluster of the stage failed.
    pub const STAGE_FAILED: &str = "StageUpdatingFailed";
    /// Stage Succeeded=True.
    pub const STAGE_SUCCEEDED: &str = "StageUpdatingSucceeded";
    /// Cluster Started=True.
    pub const CLUSTER_STARTED: &str = "ClusterUpdatingStarted";
    /// Cluster Regressed=True, cluster Succeeded=False (regressed for longer than the run's
    /// healthTimeout), and run Progressing=False (the run holds while a cluster is regressed).
    pub const CLUSTER_REGRESSED: &str = "ClusterRegressed";
    /// Cluster Regressed=False: the cluster is healthy again.
    pub const CLUSTER_RECOVERED: &str = "ClusterRecovered";
    /// Progressing=True: every stage is done; the run watches its clusters for its bake.
    pub const BAKING: &str = "UpdateRunBaking";
    /// Event: a failed run with `onFailure: Rollback` created its rollback run.
    pub const RUN_ROLLED_BACK: &str = "RunRolledBack";
    /// TimedWait WaitTimeElapsed=False: the soak is paused while a cluster of the run is
    /// regressed (paused time does not count towards waitTime).
    pub const SOAK_PAUSED: &str = "SoakPaused";
    /// Cluster Skipped=True, and run Progressing=False past the stage's budget: at its turn,
    /// the cluster's workload was already unhealthy on the snapshot the run's clusters ran
    /// before it (its Work not Applied or not Available); the run does not update it blindly.
    pub const UNHEALTHY_BEFORE_UPDATE: &str = "UnhealthyBeforeUpdate";
    /// Cluster Succeeded=True.
    pub const CLUSTER_SUCCEEDED: &str = "ClusterUpdatingSucceeded";
    /// Cluster Succeeded=False: the member could not apply the Work.
    pub const CLUSTER_UPDATE_FAILED: &str = "ClusterUpdatingFailed";
    /// Cluster Succeeded=False: not available within the health timeout.
    pub const CLUSTER_HEALTH_TIMEOUT: &str = "ClusterHealthTimeout";
    /// TimedWait WaitTimeElapsed=False.
    pub const WAIT_PENDING: &str = "AfterStageTaskWaiting";
    /// TimedWait WaitTimeElapsed=True.
    pub const WAIT_ELAPSED: &str = "AfterStageTaskWaitTimeElapsed";
    /// Approval ApprovalRequestCreated=True.
    pub const APPROVAL_CREATED: &str = "AfterStageTaskApprovalRequestCreated";
    /// Approval ApprovalRequestApproved=True.
    pub const APPROVAL_APPROVED: &str = "AfterStageTaskApprovalRequestApproved";
    /// MetricCheckPassed=False: not checked yet, or fewer passes than successThreshold.
    pub const METRIC_CHECK_WAITING: &str = "MetricCheckWaiting";
    /// MetricCheckPassed=False: the last check failed (no data, or an error).
    pub const METRIC_CHECK_FAILING: &str = "MetricCheckFailing";
    /// MetricCheckPassed=True.
    pub const METRIC_CHECK_SUCCEEDED: &str = "MetricCheckSucceeded";
    /// MetricCheckPassed=False, and the run's Succeeded=False: not passed within its timeout.
    pub const METRIC_CHECK_TIMED_OUT: &str = "MetricCheckTimedOut";
    /// MetricCheckPassed=False, and the run's Succeeded=False: the task's metricCheck in the
    /// run's strategy snapshot cannot be read (its message names the field).
    pub const METRIC_CHECK_INVALID: &str = "MetricCheckInvalid";
    /// Initialized=False: a MetricCheck's query does not parse as PromQL.
    pub const INVALID_METRIC_QUERY: &str = "InvalidMetricQuery";

    /// Initialized=False: the Placement does not exist.
    pub const PLACEMENT_NOT_FOUND: &str = "PlacementNotFound";
    /// Initialized=False: the Placement's strategy type is not External.
    pub const PLACEMENT_NOT_EXTERNAL: &str = "PlacementNotExternal";
    /// Initialized=False: the StagedUpdateStrategy does not exist.
    pub const STRATEGY_NOT_FOUND: &str = "StrategyNotFound";
    /// Initialized=False: no ResourceSnapshot at the run's index.
    pub const SNAPSHOT_NOT_FOUND: &str = "ResourceSnapshotNotFound";
    /// Initialized=False: the strategy has a value the controller cannot use.
    pub const INVALID_STRATEGY: &str = "InvalidStrategy";
    /// Initialized=False: `spec.healthTimeout` cannot be read.
    pub const INVALID_HEALTH_TIMEOUT: &str = "InvalidHealthTimeout";
    /// Initialized=False: `spec.resourceSnapshotIndex` cannot be read.
    pub const INVALID_SNAPSHOT_INDEX: &str = "InvalidResourceSnapshotIndex";
    /// Initialized=False: the clusters' names take more than
    /// [`MAX_RUN_NAME_BYTES`](super::MAX_RUN_NAME_BYTES).
    pub const TOO_MANY_CLUSTERS: &str = "TooManyClusters";
    /// Initialized=False: a selected cluster has no MemberCluster.
    pub const MEMBER_CLUSTER_NOT_FOUND: &str = "MemberClusterNotFound";
    /// Initialized=False: a selected cluster matches no stage.
    pub const CLUSTER_MATCHES_NO_STAGE: &str = "ClusterMatchesNoStage";
    /// Initialized=False: a selected cluster matches several stages.
    pub const CLUSTER_MATCHES_SEVERAL_STAGES: &str = "ClusterMatchesSeveralStages";
    /// Initialized=False: a sorting label's value is not an integer.
    pub const INVALID_SORTING_LABEL: &str = "InvalidSortingLabel";
}

/// Rolls one Placement (whose strategy type is External) out to one resource snapshot index,
/// stage by stage, as a StagedUpdateStrategy says. All progress lives in status, so a restarted
/// hub resumes exactly where it was.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "fleethub.dev",
    version = "v1alpha1",
    kind = "UpdateRun",
    plural = "updateruns",
    shortname = "ur",
    shortname = "run",
    category = "fleethub",
    status = "UpdateRunStatus",
    derive = "Default",
    derive = "PartialEq",
    doc = "Rolls one Placement out to one resource snapshot index, stage by stage, following a StagedUpdateStrategy.",
    selectable = ".spec.placementName",
    validation = Rule::new("self.metadata.name.size() <= 63 && self.metadata.name.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$')").message("metadata.name must be a DNS label of at most 63 characters (ApprovalRequests are named <run>-<stage> and labelled with it)"),
    printcolumn(name = "Placement", type_ = "string", json_path = ".spec.placementName"),
    printcolumn(name = "Index", type_ = "string", json_path = ".status.resourceSnapshotIndexUsed"),
    printcolumn(name = "Strategy", type_ = "string", json_path = ".spec.stagedRolloutStrategyName", priority = 1),
    printcolumn(name = "Stage", type_ = "string", json_path = ".status.currentStage"),
    printcolumn(name = "Initialized", type_ = "string", json_path = ".status.conditions[?(@.type==\"Initialized\")].status", priority = 1),
    printcolumn(name = "Progressing", type_ = "string", json_path = ".status.conditions[?(@.type==\"Progressing\")].reason"),
    printcolumn(name = "Succeeded", type_ = "string", json_path = ".status.conditions[?(@.type==\"Succeeded\")].status"),
    printcolumn(name = "Rollback", type_ = "string", json_path = ".status.rollbackRun", priority = 1),
    printcolumn(name = "Not-In-Run", type_ = "integer", json_path = ".status.clustersNotInRun.count", priority = 1),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("has(self.resourceSnapshotIndex) == has(oldSelf.resourceSnapshotIndex)").message("resourceSnapshotIndex is immutable: create a new UpdateRun instead"))]
#[x_kube(validation = Rule::new("!has(self.state) || self.state != 'Initialize' || (has(oldSelf.state) && oldSelf.state == 'Initialize')").message("state cannot go back to Initialize once the run was set to Run or Stop"))]
pub struct UpdateRunSpec {
    /// The Placement to roll out. Immutable.
    #[schemars(length(min = 1, max = 63))]
    #[x_kube(validation = Rule::new("self == oldSelf").message("placementName is immutable: create a new UpdateRun instead"))]
    pub placement_name: String,
    /// The resource snapshot index to roll out, as a decimal string (e.g. "3"). Immutable. An
    /// older index is a rollback. Omitted: the placement's latest snapshot when the hub first
    /// sees the run, recorded in `status.resourceSnapshotIndexUsed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 18), regex(pattern = r"^[0-9]+$"))]
    #[x_kube(validation = Rule::new("self == oldSelf").message("resourceSnapshotIndex is immutable: create a new UpdateRun instead"))]
    pub resource_snapshot_index: Option<String>,
    /// The StagedUpdateStrategy to follow. Immutable; the run freezes a copy of it when it starts.
    #[schemars(length(min = 1, max = 253))]
    #[x_kube(validation = Rule::new("self == oldSelf").message("stagedRolloutStrategyName is immutable: create a new UpdateRun instead"))]
    pub staged_rollout_strategy_name: String,
    /// `Run` (default), `Stop` or `Initialize`. A stopped run starts no new cluster; clusters
    /// already updating finish (`Stopping`, then `Stopped`). Setting it back to `Run` resumes.
    /// `Initialize` computes the plan (stages, clusters in order) into status and starts
    /// nothing until set to `Run`; it cannot be set again afterwards.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<UpdateRunState>,
    /// How long a cluster may take to report its Work Available before the run stops and says
    /// which cluster and object failed (e.g. `5m`; default 5m).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(min = 2, max = 20),
        regex(pattern = crate::duration::DURATION_PATTERN)
    )]
    #[x_kube(validation = Rule::new("duration(self) > duration('0s')").message("healthTimeout must be longer than 0s"))]
    pub health_timeout: Option<String>,
    /// What the run does when it fails: `Hold` (stop and wait for a person) or `Rollback` (end
    /// failed and roll the clusters it updated back through a rollback run). Default: the
    /// strategy's `onFailure`, else `Hold`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_failure: Option<OnFailure>,
    /// How long the run keeps watching every cluster after its last stage before it succeeds
    /// (e.g. `10m`; default: the strategy's `bake`, else none). A regression meanwhile is
    /// handled as during the run (it holds, the bake stands still; past healthTimeout the run
    /// fails). At most a week.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(min = 2, max = 20),
        regex(pattern = crate::duration::DURATION_PATTERN)
    )]
    #[x_kube(validation = Rule::new("duration(self) > duration('0s') && duration(self) <= duration('168h')").message("bake must be longer than 0s and at most 168h (a week)"))]
    pub bake: Option<String>,
    /// Set on a rollback run, which a failed run with `onFailure: Rollback` creates: the run it
    /// reverts and the clusters to roll back to `resourceSnapshotIndex`, in order (newest
    /// first). Such a run updates only these clusters, in one stage without gates; read once,
    /// when the run initializes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self.of == oldSelf.of").message("rollback.of is immutable: create a new UpdateRun instead"))]
    pub rollback: Option<RollbackSpec>,
}

/// What a rollback run reverts.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct RollbackSpec {
    /// The failed UpdateRun this run rolls back.
    #[schemars(length(min = 1, max = 63))]
    pub of: String,
    /// The clusters to roll back, in the order to roll them back (the failed run's newest
    /// first). Empty: every cluster the placement selects, through the run's strategy (an
    /// AutoUpdatePolicy's rollback).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 20000))]
    pub clusters: Vec<String>,
}

impl UpdateRun {
    /// The resource snapshot index the run rolls out, as written: `spec.resourceSnapshotIndex`,
    /// else the latest index the hub recorded for it (`status.resourceSnapshotIndexUsed`). None
    /// until the hub has chosen one for a run that names none.
    pub fn index_text(&self) -> Option<&str> {
        self.index_text_with(self.status.as_ref())
    }

    /// [`UpdateRun::index_text`] with `status` as the run's status (taken out of it).
    pub fn index_text_with<'a>(&'a self, status: Option<&'a UpdateRunStatus>) -> Option<&'a str> {
        self.spec
            .resource_snapshot_index
            .as_deref()
            .or_else(|| status.and_then(|s| s.resource_snapshot_index_used.as_deref()))
    }

    /// The resource snapshot index to roll out read as a number, the one place it is parsed:
    /// None until known, an error for a value admission would have refused (only decimal
    /// digits, at most 18 of them).
    pub fn snapshot_index(&self) -> Option<Result<i64, std::num::ParseIntError>> {
        self.snapshot_index_with(self.status.as_ref())
    }

    /// [`UpdateRun::snapshot_index`] with `status` as the run's status (taken out of it).
    pub fn snapshot_index_with(
        &self,
        status: Option<&UpdateRunStatus>,
    ) -> Option<Result<i64, std::num::ParseIntError>> {
        self.index_text_with(status).map(str::parse)
    }
}

/// Whether a run may start new clusters.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum UpdateRunState {
    /// Proceed.
    #[default]
    Run,
    /// Start nothing new; let clusters already updating finish.
    Stop,
    /// Compute and show the plan; start nothing until set to `Run`.
    Initialize,
}

/// The progress of a run. Everything the run decides on is here, so a restarted hub resumes it.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct UpdateRunStatus {
    /// `Initialized`, `Progressing`, `Succeeded`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[x_kube(merge_strategy = ListMerge::Map(vec!["type".into()]))]
    pub conditions: Vec<Condition>,
    /// The generation of the spec last acted on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// The name of the stage in progress (or waiting on its after-stage tasks).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_stage: Option<String>,
    /// The resource snapshot index the run rolls out: `spec.resourceSnapshotIndex`, or the
    /// placement's latest when the hub first saw a run that names none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_snapshot_index_used: Option<String>,
    /// Clusters the placement selects now that are not part of this run (they joined it after
    /// the run froze its plan): start a new run to include them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clusters_not_in_run: Option<ClustersNotInRun>,
    /// How many clusters the placement selected when the run initialized.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy_observed_cluster_count: Option<i32>,
    /// The copy of the strategy frozen at initialization; later edits to the strategy do not
    /// affect this run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub staged_update_strategy_snapshot: Option<StagedUpdateStrategySpec>,
    /// The plan and progress of every stage, in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stages_status: Vec<StageUpdatingStatus>,
    /// The UpdateRunPlan holding, in update order, the clusters of this run's stages of over
    /// 100 clusters (those with `clustersInPlan`). Written once, when the run initializes; the
    /// run owns it. Runs without a stage that large have none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan_ref: Option<PlanRef>,
    /// The newest snapshot of every override that may apply to the placement, fixed at
    /// initialization: every cluster the run binds gets these (each cluster only the rules that
    /// select it; its Binding's `Overridden` condition says which changed it). Later edits of an
    /// override do not affect this run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub applied_override_snapshots: Option<crate::binding::OverrideSnapshots>,
    /// The final stage that removes the workload from clusters the placement no longer selects.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deletion_stage_status: Option<StageUpdatingStatus>,
    /// The snapshot index most of the run's clusters ran when it initialized: what
    /// `onFailure: Rollback` returns the clusters it updated to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous_resource_snapshot_index: Option<String>,
    /// The bake after the last stage (`bake`), once it started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bake: Option<BakeStatus>,
    /// The rollback UpdateRun this run created when it failed (`onFailure: Rollback`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollback_run: Option<String>,
    /// When the run started executing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<Time>,
    /// When the run finished (succeeded or failed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_time: Option<Time>,
}

/// A wait that stands still while its run is held (a soak, a bake) resumes at `now`: the time
/// it stood still is added to `paused_seconds`, `paused_since` is cleared. Returns every second
/// it stood still.
pub fn resume_wait(
    paused_seconds: &mut Option<i64>,
    paused_since: &mut Option<Time>,
    now: jiff::Timestamp,
) -> i64 {
    let mut paused = paused_seconds.unwrap_or(0);
    if let Some(since) = paused_since.take() {
        paused += (now.as_second() - since.0.as_second()).max(0);
        *paused_seconds = Some(paused);
    }
    paused
}

/// When a wait of `wait` that began at `start` ends, having stood still `paused` seconds.
pub fn wait_end(start: jiff::Timestamp, wait: std::time::Duration, paused: i64) -> jiff::Timestamp {
    start
        .checked_add(wait)
        .and_then(|t| t.checked_add(jiff::SignedDuration::from_secs(paused)))
        .unwrap_or(start)
}

/// The bake after a run's last stage.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct BakeStatus {
    /// When it started (every stage was done).
    pub start_time: Time,
    /// Seconds it stood still while a cluster of the run was regressed (not counted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paused_seconds: Option<i64>,
    /// Since when it stands still (a cluster of the run is regressed now).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paused_since: Option<Time>,
    /// When it ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_time: Option<Time>,
}

/// Which UpdateRunPlan holds a run's cluster order.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PlanRef {
    /// The UpdateRunPlan (the run's own name).
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    /// Its uid: a plan deleted and created again under the same name is not this run's.
    #[schemars(length(min = 1, max = 64))]
    pub uid: String,
}

impl UpdateRunStatus {
    /// Whether a stage's clusters are in the run's UpdateRunPlan and not read yet.
    pub fn plan_unread(&self) -> bool {
        self.stages()
            .any(|s| matches!(s.cluster_list, ClusterList::Unread(_)))
    }

    /// Whether a stage's clusters are (to be) kept in an UpdateRunPlan.
    pub fn uses_plan(&self) -> bool {
        self.stages()
            .any(|s| !matches!(s.cluster_list, ClusterList::InStatus))
    }

    /// Every stage, the deletion stage last.
    pub fn stages(&self) -> impl Iterator<Item = &StageUpdatingStatus> {
        self.stages_status
            .iter()
            .chain(self.deletion_stage_status.as_ref())
    }

    /// Reads the clusters of the stages kept in `plan` (the run's UpdateRunPlan, whose uid
    /// `status.planRef` names): afterwards every stage lists all its clusters. The error says
    /// which stage the plan lacks.
    pub fn read_plan(
        &mut self,
        plan: &crate::update_run_plan::UpdateRunPlanSpec,
    ) -> Result<(), String> {
        let stages = self
            .stages_status
            .iter_mut()
            .chain(self.deletion_stage_status.as_mut());
        for stage in stages {
            if !matches!(stage.cluster_list, ClusterList::Unread(_)) {
                continue;
            }
            let names = plan
                .stages
                .iter()
                .find(|p| p.stage_name == stage.stage_name)
                .ok_or_else(|| format!("it has no clusters for stage {}", stage.stage_name))?;
            stage.read_plan(&names.cluster_name_list);
        }
        Ok(())
    }
}

/// Clusters a run does not include although its placement selects them now.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ClustersNotInRun {
    /// How many.
    pub count: i32,
    /// The first of them by name (at most 20).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub names: Vec<String>,
}

/// One stage's plan and progress: every cluster of the stage, in update order. Stored as a
/// [`StoredStage`](crate::stored_stage::StoredStage), compact for large stages.
#[derive(Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(from = "StoredStage")]
pub struct StageUpdatingStatus {
    /// The stage.
    pub stage_name: String,
    /// The stage's clusters, in update order.
    pub clusters: Vec<ClusterUpdatingStatus>,
    /// The stage's before-stage tasks and their progress (the stage's clusters start once
    /// they all passed).
    pub before_stage_task_status: Vec<StageTaskStatus>,
    /// The stage's after-stage tasks and their progress.
    pub after_stage_task_status: Vec<StageTaskStatus>,
    /// `Progressing` (False with reason StageUpdatingWaiting while gates are pending) and
    /// `Succeeded`.
    pub conditions: Vec<Condition>,
    /// When the stage's first cluster started.
    pub start_time: Option<Time>,
    /// When the stage's clusters were all done; TimedWait is measured from here.
    pub clusters_completed_time: Option<Time>,
    /// When the stage (including its after-stage tasks) finished.
    pub end_time: Option<Time>,
    /// The stage's background analysis (`analysis`): its checks so far.
    pub analysis: Option<MetricCheckStatus>,
    /// Where the stage's clusters are kept.
    pub cluster_list: ClusterList,
}

/// Where a stage's clusters, in update order, are kept.
#[derive(Clone, Debug, Default, PartialEq)]
pub enum ClusterList {
    /// In the run's status: stages of at most 100 clusters, and large stages of runs
    /// initialized before UpdateRunPlans (`clusterNameList`).
    #[default]
    InStatus,
    /// In the run's UpdateRunPlan, and `clusters` lists them all (planned, or read with the
    /// plan). Written without their names.
    InPlan,
    /// In the run's UpdateRunPlan, not read yet: `clusters` is empty, and their progress waits
    /// for their names ([`UpdateRunStatus::read_plan`]).
    Unread(Box<UnreadClusters>),
}

impl StageUpdatingStatus {
    /// The stage's clusters counted by state, also before its plan was read.
    pub fn counts(&self) -> crate::stored_stage::ClusterCounts {
        match &self.cluster_list {
            ClusterList::Unread(unread) => unread.counts.clone(),
            _ => crate::stored_stage::ClusterCounts::of(&self.clusters),
        }
    }

    /// Reads the stage's clusters from `names` (its clusters in update order,
    /// comma-separated), if they were not read yet.
    pub fn read_plan(&mut self, names: &str) {
        if let ClusterList::Unread(unread) =
            std::mem::replace(&mut self.cluster_list, ClusterList::InPlan)
        {
            self.clusters = unread.expand(names, self.start_time.as_ref());
        }
    }
}

/// Written in the stored form ([`StoredStage::of`]), without copying the stage first.
impl Serialize for StageUpdatingStatus {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        StoredStage::of(self).serialize(serializer)
    }
}

/// The schema is the stored form's.
impl JsonSchema for StageUpdatingStatus {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        StoredStage::schema_name()
    }

    fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        StoredStage::json_schema(generator)
    }
}

/// One cluster's progress within a stage.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ClusterUpdatingStatus {
    /// The MemberCluster.
    pub cluster_name: String,
    /// `Started`, `Succeeded` (False with a reason naming the object when it failed),
    /// `Regressed` (True while a cluster the run updated is unhealthy again, in the member's
    /// words and since when; False once it recovered) and `Skipped` (the run passed the
    /// cluster over: `ClusterUnselected`, `MemberClusterUnhealthy`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[x_kube(merge_strategy = ListMerge::Map(vec!["type".into()]))]
    pub conditions: Vec<Condition>,
    /// When the run pointed the cluster's Binding at the snapshot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<Time>,
    /// When the member reported the Work applied and available.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_time: Option<Time>,
    /// While the cluster updates: what the run waits for, in the member's words when it has
    /// reported (a Deployment's replicas, a PhasedRollout's pods rolled and its check), at most
    /// 120 characters. Cleared once the cluster succeeded or failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress: Option<String>,
}

/// A stage task's progress.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct StageTaskStatus {
    /// `TimedWait`, `Approval` or `MetricCheck`.
    #[serde(rename = "type")]
    pub type_: StageTaskType,
    /// For Approval: the ApprovalRequest a person approves.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval_request_name: Option<String>,
    /// For MetricCheck: the checks so far (kept here so a restarted hub continues the count
    /// instead of passing early).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metric_check: Option<MetricCheckStatus>,
    /// For TimedWait: how many seconds the soak was paused because a cluster of the run was
    /// regressed (they do not count towards waitTime).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paused_seconds: Option<i64>,
    /// For TimedWait: since when the soak is paused (a cluster of the run is regressed now).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paused_since: Option<Time>,
    /// `WaitTimeElapsed`; `ApprovalRequestCreated` and `ApprovalRequestApproved`;
    /// `MetricCheckPassed`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[x_kube(merge_strategy = ListMerge::Map(vec!["type".into()]))]
    pub conditions: Vec<Condition>,
}
