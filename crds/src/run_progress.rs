//! One reading of an UpdateRun: its stages, clusters and after-stage tasks, in order, with their
//! states and times, built once from the run's status (and its ApprovalRequests). The dashboard
//! and `kubectl fleet` both show this model; neither interprets the status itself.
//!
//! Every state is an enum matched exhaustively by its readers, so a new task type or state fails
//! to compile wherever it must be shown.

use std::collections::BTreeMap;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::ResourceExt;

pub use crate::cluster_phase::{ClusterPhase, phase};

use crate::cluster_phase::phase_and_condition;
use crate::conditions::{FALSE, TRUE, find, is_true};
use crate::strategy::{StageConfig, StageTask, StageTaskType};
use crate::update_run::{
    APPROVAL_REQUEST_APPROVED, APPROVAL_REQUEST_CREATED, ClusterList, ClusterUpdatingStatus,
    INITIALIZED, METRIC_CHECK_PASSED, MetricCheckResult, PROGRESSING, SUCCEEDED, StageTaskStatus,
    StageUpdatingStatus, UpdateRunState, UpdateRunStatus, WAIT_TIME_ELAPSED, reason,
};
use crate::{ApprovalRequest, UpdateRun, approval, duration};

/// Where a run is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RunPhase {
    /// The hub has not written any status yet.
    Pending,
    /// Validated; waits for an earlier run of the placement to stop (`WaitingForPreviousRun`).
    Queued,
    /// Not initialized yet.
    Initializing,
    /// `spec.state: Initialize`: the plan is in status; nothing starts until `Run`.
    Planned,
    /// Updating clusters.
    Progressing,
    /// `spec.state: Stop` was set; clusters already updating finish.
    Stopping,
    /// Stopped by `spec.state: Stop`.
    Stopped,
    /// An after-stage task (a soak or an approval) holds the run.
    Waiting,
    /// A cluster holds the run: it failed (past its stage's maxFailedClusters), or its member
    /// is not healthy at its turn; nothing new starts until it recovers.
    Blocked,
    /// A cluster the run updated regressed: nothing new starts and no gate passes until it
    /// recovers (past the run's healthTimeout it counts as failed).
    Held,
    /// Every stage is done; the run watches every cluster for its `bake` before it succeeds.
    Baking,
    /// Every cluster runs the snapshot.
    Succeeded,
    /// Over without succeeding: initialization failed, or a newer run superseded it.
    Failed,
}

impl RunPhase {
    /// The phase of `run`, from its conditions and `spec.state`.
    pub fn of(run: &UpdateRun) -> Self {
        let Some(status) = run.status.as_ref() else {
            return RunPhase::Pending;
        };
        let c = &status.conditions;
        if let Some(s) = find(c, SUCCEEDED) {
            return if s.status == TRUE {
                RunPhase::Succeeded
            } else {
                RunPhase::Failed
            };
        }
        match find(c, INITIALIZED) {
            Some(i) if i.reason == reason::WAITING_FOR_PREVIOUS_RUN => return RunPhase::Queued,
            Some(i) if i.status == TRUE => {}
            _ => return RunPhase::Initializing,
        }
        match find(c, PROGRESSING).map(|p| p.reason.as_str()) {
            Some(reason::STOPPED) => RunPhase::Stopped,
            Some(reason::STOPPING) => RunPhase::Stopping,
            Some(reason::CLUSTER_FAILED | reason::WAITING_FOR_MEMBER) => RunPhase::Blocked,
            Some(reason::CLUSTER_REGRESSED) => RunPhase::Held,
            Some(reason::BAKING) => RunPhase::Baking,
            Some(reason::WAITING | reason::OUTSIDE_WINDOW | reason::FROZEN) => RunPhase::Waiting,
            Some(reason::NOT_STARTED) => RunPhase::Planned,
            Some(reason::WAITING_FOR_PREVIOUS_RUN) => RunPhase::Queued,
            _ if run.spec.state == Some(UpdateRunState::Stop) => RunPhase::Stopping,
            _ => RunPhase::Progressing,
        }
    }

    /// One word for it.
    pub fn label(self) -> &'static str {
        match self {
            RunPhase::Pending => "Pending",
            RunPhase::Queued => "Queued",
            RunPhase::Initializing => "Initializing",
            RunPhase::Planned => "Planned",
            RunPhase::Progressing => "Progressing",
            RunPhase::Stopping => "Stopping",
            RunPhase::Stopped => "Stopped",
            RunPhase::Waiting => "Waiting",
            RunPhase::Blocked => "Blocked",
            RunPhase::Held => "Held",
            RunPhase::Baking => "Baking",
            RunPhase::Succeeded => "Succeeded",
            RunPhase::Failed => "Failed",
        }
    }

    /// Whether the run is over (it will not change by itself any more).
    pub fn finished(self) -> bool {
        matches!(self, RunPhase::Succeeded | RunPhase::Failed)
    }
}

/// Where a stage is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StagePhase {
    /// Not reached yet.
    NotStarted,
    /// Its clusters are updating.
    Updating,
    /// Its clusters are done; its after-stage tasks hold it.
    Waiting,
    /// Done, gates passed.
    Succeeded,
    /// A cluster of the stage failed.
    Failed,
}

impl StagePhase {
    fn of(stage: &StageUpdatingStatus) -> Self {
        let c = &stage.conditions;
        if let Some(s) = find(c, SUCCEEDED) {
            return if s.status == TRUE {
                StagePhase::Succeeded
            } else {
                StagePhase::Failed
            };
        }
        match find(c, PROGRESSING) {
            Some(p) if p.reason == reason::STAGE_FAILED => StagePhase::Failed,
            Some(p) if p.reason == reason::STAGE_WAITING => StagePhase::Waiting,
            Some(p) if p.status == TRUE => StagePhase::Updating,
            _ if stage.start_time.is_some() => StagePhase::Updating,
            _ => StagePhase::NotStarted,
        }
    }
}

/// A run, read for people.
#[derive(Debug, Clone, PartialEq)]
pub struct RunProgress {
    /// The UpdateRun.
    pub name: String,
    /// Its placement.
    pub placement: String,
    /// The snapshot index it rolls out.
    pub index: String,
    /// The strategy it follows.
    pub strategy: String,
    /// Where it is.
    pub phase: RunPhase,
    /// The sentence that says why (the final, `Progressing` or `Initialized` condition's).
    pub message: String,
    /// A person set `spec.state: Stop`.
    pub stop_requested: bool,
    /// The stage in progress, while the run is not over.
    pub current_stage: Option<String>,
    /// When it was created, started and ended.
    pub created: Option<Timestamp>,
    /// When it started executing.
    pub started: Option<Timestamp>,
    /// When it ended.
    pub ended: Option<Timestamp>,
    /// The stages, in the strategy's order.
    pub stages: Vec<StageProgress>,
    /// How many clusters the placement selects now that the run does not include (they joined
    /// after it was planned), and the first of their names.
    pub not_in_run: (usize, Vec<String>),
    /// The final stage that removes the workload from clusters no longer selected.
    pub deletion: Option<StageProgress>,
}

/// A stage of a run.
#[derive(Debug, Clone, PartialEq)]
pub struct StageProgress {
    /// Its name (the deletion stage's is `fleethub.dev/delete`).
    pub name: String,
    /// Where it is.
    pub phase: StagePhase,
    /// Its `Succeeded` or `Progressing` condition's message.
    pub message: String,
    /// When its first cluster started.
    pub started: Option<Timestamp>,
    /// When its clusters were all done (soaks count from here).
    pub clusters_completed: Option<Timestamp>,
    /// When it finished, gates included.
    pub ended: Option<Timestamp>,
    /// Its clusters, in update order.
    pub clusters: Vec<ClusterProgress>,
    /// Set when its clusters are in the run's UpdateRunPlan, which was not read: `clusters` is
    /// empty, and these are their counts.
    pub unread: Option<crate::stored_stage::ClusterCounts>,
    /// Its before-stage tasks (its clusters start once they passed), in the strategy's order.
    pub before_tasks: Vec<TaskProgress>,
    /// Its after-stage tasks, in the strategy's order.
    pub tasks: Vec<TaskProgress>,
}

/// A cluster of a stage.
#[derive(Debug, Clone, PartialEq)]
pub struct ClusterProgress {
    /// The MemberCluster.
    pub name: String,
    /// Where it is.
    pub phase: ClusterPhase,
    /// The reason of its latest condition (why it failed, when it did).
    pub reason: String,
    /// Its latest condition's message.
    pub message: String,
    /// While it updates: what the run waits for (`status...clusters[].progress`).
    pub progress: Option<String>,
    /// When the run started it.
    pub started: Option<Timestamp>,
    /// When it finished.
    pub ended: Option<Timestamp>,
}

/// An after-stage task of a stage.
#[derive(Debug, Clone, PartialEq)]
pub enum TaskProgress {
    /// A soak timer.
    TimedWait {
        /// The configured wait as written (`15s`).
        wait_time: String,
        /// The configured wait, when it reads.
        wait: Option<Duration>,
        /// When it ends: known once the stage's clusters are done.
        until: Option<Timestamp>,
        /// When the run recorded it elapsed.
        elapsed_at: Option<Timestamp>,
        /// While the soak is paused (a cluster of the run is regressed): why, and how much of
        /// the wait counted so far. `until` is unknown meanwhile.
        paused: Option<String>,
    },
    /// A person's approval.
    Approval {
        /// The ApprovalRequest (`<run>-<stage>`).
        request: Option<String>,
        /// When the run created the request (the gate was reached).
        requested_at: Option<Timestamp>,
        /// The request object exists.
        request_exists: bool,
        /// A person approved it (`Approved=True` on the request).
        approval: Option<Approval>,
        /// The run took the approval into account (`ApprovalRequestApproved=True`).
        recorded: bool,
    },
    /// A Prometheus query that must return data several checks in a row.
    MetricCheck(MetricCheckProgress),
}

/// A metric gate, read.
#[derive(Debug, Clone, PartialEq)]
pub struct MetricCheckProgress {
    /// The Prometheus base URL.
    pub url: String,
    /// The query as sent (placeholders expanded).
    pub query: String,
    /// Consecutive passing checks so far.
    pub passes: i32,
    /// Consecutive passes needed.
    pub threshold: i32,
    /// The last check's outcome, and its value or error.
    pub last: Option<(MetricCheckResult, String)>,
    /// When the last check was made.
    pub last_check: Option<Timestamp>,
    /// When the next check is due.
    pub next_check: Option<Timestamp>,
    /// When the gate was reached.
    pub reached: Option<Timestamp>,
    /// When it passed.
    pub passed_at: Option<Timestamp>,
    /// What the run says about it (its `MetricCheckPassed` condition's message).
    pub message: String,
}

impl TaskProgress {
    /// Whether the task holds its stage now: reached and not passed.
    pub fn waiting(&self) -> bool {
        match self {
            TaskProgress::TimedWait {
                until, elapsed_at, ..
            } => until.is_some() && elapsed_at.is_none(),
            TaskProgress::Approval {
                requested_at,
                request_exists,
                approval,
                recorded,
                ..
            } => requested_at.is_some() && *request_exists && approval.is_none() && !recorded,
            TaskProgress::MetricCheck(m) => m.reached.is_some() && m.passed_at.is_none(),
        }
    }
}

/// An `Approved=True` condition, read.
#[derive(Debug, Clone, PartialEq)]
pub struct Approval {
    /// The condition's whole message.
    pub message: String,
    /// Who approved, when the message says so ("approved by alice: …", as the dashboard and
    /// `kubectl fleet approve` write it; a hand-written kubectl patch may not).
    pub by: Option<String>,
    /// The approver's note: the rest of the message, or all of it when it names no one.
    pub note: Option<String>,
    /// When.
    pub at: Timestamp,
}

impl Approval {
    /// The approval recorded on `request`, if a person approved it.
    pub fn of(request: &ApprovalRequest) -> Option<Self> {
        let c = request
            .status
            .as_ref()
            .and_then(|s| find(&s.conditions, approval::APPROVED))
            .filter(|c| c.status == TRUE)?;
        // User names contain colons but never ": ".
        let note = |s: &str| Some(s.trim().to_string()).filter(|s| !s.is_empty());
        let (by, text) = match c.message.strip_prefix("approved by ") {
            Some(rest) => match rest.split_once(": ") {
                Some((who, why)) => (note(who), note(why)),
                None => (note(rest), None),
            },
            None => (None, note(&c.message)),
        };
        Some(Self {
            message: c.message.clone(),
            by,
            note: text,
            at: c.last_transition_time.0,
        })
    }
}

impl StageProgress {
    /// Its clusters counted by phase.
    pub fn counts(&self) -> crate::stored_stage::ClusterCounts {
        match &self.unread {
            Some(counts) => counts.clone(),
            None => {
                crate::stored_stage::ClusterCounts::of_phases(self.clusters.iter().map(|c| c.phase))
            }
        }
    }
}

impl RunProgress {
    /// Reads `run`; `approvals` are its ApprovalRequests (others are ignored).
    pub fn new(run: &UpdateRun, approvals: &[ApprovalRequest]) -> Self {
        let no_status = UpdateRunStatus::default();
        let status = run.status.as_ref().unwrap_or(&no_status);
        let phase = RunPhase::of(run);
        let by_name: BTreeMap<String, &ApprovalRequest> =
            approvals.iter().map(|a| (a.name_any(), a)).collect();
        let configs = status
            .staged_update_strategy_snapshot
            .as_ref()
            .map(|s| s.stages.as_slice())
            .unwrap_or_default();
        let stages = status
            .stages_status
            .iter()
            .map(|s| {
                let config = configs.iter().find(|c| c.name == s.stage_name);
                stage(s, config, &by_name)
            })
            .collect();
        let message = find(&status.conditions, SUCCEEDED)
            .or_else(|| find(&status.conditions, PROGRESSING))
            .or_else(|| find(&status.conditions, INITIALIZED))
            .map(|c| c.message.clone())
            .unwrap_or_default();
        RunProgress {
            name: run.name_any(),
            placement: run.spec.placement_name.clone(),
            index: run.index_text().unwrap_or_default().to_string(),
            strategy: run.spec.staged_rollout_strategy_name.clone(),
            phase,
            message,
            stop_requested: run.spec.state == Some(UpdateRunState::Stop),
            current_stage: status.current_stage.clone().filter(|_| !phase.finished()),
            created: time(run.metadata.creation_timestamp.as_ref()),
            started: time(status.start_time.as_ref()),
            ended: time(status.end_time.as_ref()),
            stages,
            not_in_run: status
                .clusters_not_in_run
                .as_ref()
                .map(|n| (n.count.max(0) as usize, n.names.clone()))
                .unwrap_or_default(),
            deletion: status
                .deletion_stage_status
                .as_ref()
                .map(|d| stage(d, None, &by_name)),
        }
    }

    /// Every cluster of the run, the deletion stage's included.
    pub fn clusters(&self) -> impl Iterator<Item = &ClusterProgress> {
        self.stages
            .iter()
            .chain(self.deletion.iter())
            .flat_map(|s| s.clusters.iter())
    }

    /// Clusters done and clusters planned, the deletion stage's included.
    pub fn counts(&self) -> (usize, usize) {
        self.stages
            .iter()
            .chain(self.deletion.iter())
            .map(StageProgress::counts)
            .fold((0, 0), |(done, all), c| {
                (
                    done + c.succeeded.max(0) as usize,
                    all + c.total.max(0) as usize,
                )
            })
    }

    /// "2 clusters joined Placement web after this run started (member-4, member-5): start a new
    /// run to include them", while the run is not over.
    pub fn not_in_run_notice(&self) -> Option<String> {
        let (count, names) = &self.not_in_run;
        if *count == 0 || self.phase.finished() {
            return None;
        }
        let more = count.saturating_sub(names.len());
        let listed = if more > 0 {
            format!("{} and {more} more", names.join(", "))
        } else {
            names.join(", ")
        };
        let clusters = if *count == 1 { "cluster" } else { "clusters" };
        Some(format!(
            "{count} {clusters} joined Placement {} after this run started ({listed}): start a new run to include them",
            self.placement
        ))
    }

    /// Sentences that say why the run does not move, if it does not: a failed run's or blocked
    /// run's message and every failed cluster's.
    pub fn problems(&self) -> Vec<String> {
        let mut problems = Vec::new();
        if matches!(
            self.phase,
            RunPhase::Failed | RunPhase::Blocked | RunPhase::Held
        ) && !self.message.is_empty()
        {
            problems.push(self.message.clone());
        }
        for c in self.clusters() {
            if matches!(c.phase, ClusterPhase::Failed | ClusterPhase::Regressed)
                && !problems.contains(&c.message)
            {
                problems.push(c.message.clone());
            }
        }
        problems
    }
}

fn time(t: Option<&Time>) -> Option<Timestamp> {
    t.map(|t| t.0)
}

fn true_since(conditions: &[Condition], type_: &str) -> Option<Timestamp> {
    find(conditions, type_)
        .filter(|c| c.status == TRUE)
        .map(|c| c.last_transition_time.0)
}

fn stage(
    s: &StageUpdatingStatus,
    config: Option<&StageConfig>,
    approvals: &BTreeMap<String, &ApprovalRequest>,
) -> StageProgress {
    let (before, after) = config
        .map(|c| {
            (
                c.before_stage_tasks.as_slice(),
                c.after_stage_tasks.as_slice(),
            )
        })
        .unwrap_or_default();
    let message = find(&s.conditions, SUCCEEDED)
        .or_else(|| find(&s.conditions, PROGRESSING))
        .map(|c| c.message.clone())
        .unwrap_or_default();
    StageProgress {
        name: s.stage_name.clone(),
        phase: StagePhase::of(s),
        message,
        started: time(s.start_time.as_ref()),
        clusters_completed: time(s.clusters_completed_time.as_ref()),
        ended: time(s.end_time.as_ref()),
        clusters: s.clusters.iter().map(cluster).collect(),
        unread: match &s.cluster_list {
            ClusterList::Unread(unread) => Some(unread.counts.clone()),
            _ => None,
        },
        before_tasks: tasks(&s.before_stage_task_status, before, None, approvals),
        tasks: tasks(
            &s.after_stage_task_status,
            after,
            s.clusters_completed_time.as_ref(),
            approvals,
        ),
    }
}

/// One side's tasks, in the strategy's order (runs initialized by older hubs list them by
/// type).
fn tasks(
    statuses: &[StageTaskStatus],
    configs: &[StageTask],
    reached: Option<&Time>,
    approvals: &BTreeMap<String, &ApprovalRequest>,
) -> Vec<TaskProgress> {
    let mut tasks: Vec<(usize, TaskProgress)> = statuses
        .iter()
        .map(|t| {
            let position = configs.iter().position(|c| c.type_ == t.type_);
            let config = position.map(|p| &configs[p]);
            (
                position.unwrap_or(usize::MAX),
                task(t, config, reached, approvals),
            )
        })
        .collect();
    tasks.sort_by_key(|(position, _)| *position);
    tasks.into_iter().map(|(_, t)| t).collect()
}

fn cluster(c: &ClusterUpdatingStatus) -> ClusterProgress {
    let (phase, latest) = phase_and_condition(c);
    ClusterProgress {
        name: c.cluster_name.clone(),
        phase,
        reason: latest.map(|c| c.reason.clone()).unwrap_or_default(),
        message: latest.map(|c| c.message.clone()).unwrap_or_default(),
        progress: (phase == ClusterPhase::Updating)
            .then(|| c.progress.clone())
            .flatten(),
        started: time(c.start_time.as_ref()),
        ended: time(c.end_time.as_ref()),
    }
}

fn task(
    t: &StageTaskStatus,
    config: Option<&StageTask>,
    clusters_completed: Option<&Time>,
    approvals: &BTreeMap<String, &ApprovalRequest>,
) -> TaskProgress {
    match t.type_ {
        StageTaskType::TimedWait => {
            let wait_time = config.and_then(|c| c.wait_time.clone()).unwrap_or_default();
            let wait = duration::parse(&wait_time).ok();
            // Time the soak was paused does not count: it ends that much later.
            let paused = t.paused_seconds.unwrap_or(0);
            TaskProgress::TimedWait {
                until: clusters_completed
                    .zip(wait)
                    .filter(|_| t.paused_since.is_none())
                    .map(|(done, wait)| crate::update_run::wait_end(done.0, wait, paused)),
                elapsed_at: true_since(&t.conditions, WAIT_TIME_ELAPSED),
                paused: find(&t.conditions, WAIT_TIME_ELAPSED)
                    .filter(|c| c.status == FALSE && c.reason == reason::SOAK_PAUSED)
                    .map(|c| c.message.clone()),
                wait_time,
                wait,
            }
        }
        StageTaskType::Approval => {
            let request = t.approval_request_name.clone();
            let object = request.as_ref().and_then(|n| approvals.get(n));
            TaskProgress::Approval {
                requested_at: true_since(&t.conditions, APPROVAL_REQUEST_CREATED),
                request_exists: object.is_some(),
                approval: object.and_then(|a| Approval::of(a)),
                recorded: is_true(&t.conditions, APPROVAL_REQUEST_APPROVED),
                request,
            }
        }
        StageTaskType::MetricCheck => {
            let spec = config.and_then(|c| c.metric_check.as_ref());
            let checks = t.metric_check.clone().unwrap_or_default();
            TaskProgress::MetricCheck(MetricCheckProgress {
                url: spec.map(|m| m.url.clone()).unwrap_or_default(),
                query: checks.query,
                passes: checks.consecutive_passes,
                threshold: spec.and_then(|m| m.success_threshold).unwrap_or(1),
                last: checks.last_result.zip(checks.last_value),
                last_check: time(checks.last_check_time.as_ref()),
                next_check: time(checks.next_check_time.as_ref()),
                reached: time(checks.start_time.as_ref()),
                passed_at: true_since(&t.conditions, METRIC_CHECK_PASSED),
                message: find(&t.conditions, METRIC_CHECK_PASSED)
                    .map(|c| c.message.clone())
                    .unwrap_or_default(),
            })
        }
    }
}

#[cfg(test)]
#[path = "run_progress_tests.rs"]
mod tests;
