//! Hub objects → what the pages show. Pure functions, no API server: unit-tested here.

use std::collections::BTreeMap;

use fleethub_crds::conditions::{FALSE, TRUE, find};
use fleethub_crds::strategy::AfterStageTaskType;
use fleethub_crds::update_run::{
    INITIALIZED, PROGRESSING, SUCCEEDED, StageUpdatingStatus, UpdateRunState,
};
use fleethub_crds::work::{APPLIED, AVAILABLE};
use fleethub_crds::{
    ApprovalRequest, Binding, MemberCluster, Placement, ResourceSnapshot, UpdateRun, approval,
    member_cluster,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::ResourceExt;

use crate::model::*;

/// The hub's name for the final stage that removes the workload from unselected clusters.
const DELETION_STAGE: &str = "fleethub.dev/delete";
const CLUSTER_STARTED: &str = "Started";
const WAIT_TIME_ELAPSED: &str = "WaitTimeElapsed";
const APPROVAL_REQUEST_CREATED: &str = "ApprovalRequestCreated";
const APPROVAL_REQUEST_APPROVED: &str = "ApprovalRequestApproved";
const REASON_STOPPED: &str = "UpdateRunStopped";
const REASON_WAITING: &str = "UpdateRunWaiting";
const REASON_STAGE_WAITING: &str = "StageUpdatingWaiting";

fn unix(t: &Time) -> i64 {
    t.0.as_second()
}

fn opt_unix(t: Option<&Time>) -> Option<i64> {
    t.map(unix)
}

/// A condition shown as a state: `True` → `yes` label, `False` → `no` label, else Unknown.
fn condition_state(
    conditions: &[Condition],
    type_: &str,
    yes: (&str, Tone),
    no: (&str, Tone),
) -> State {
    match find(conditions, type_) {
        Some(c) if c.status == TRUE => State::new(yes.0, yes.1, c.message.clone()),
        Some(c) if c.status == FALSE => State::new(no.0, no.1, c.message.clone()),
        Some(c) => State::new("Unknown", Tone::Idle, c.message.clone()),
        None => State::new("Unknown", Tone::Idle, format!("not reported yet ({type_})")),
    }
}

/// The Fleet page's rows, by name.
pub fn fleet(mut members: Vec<MemberCluster>) -> FleetView {
    members.sort_by_key(|m| m.name_any());
    let members = members
        .iter()
        .map(|m| {
            let status = m.status.clone().unwrap_or_default();
            MemberRow {
                name: m.name_any(),
                labels: m.labels().iter().map(|(k, v)| format!("{k}={v}")).collect(),
                joined: condition_state(
                    &status.conditions,
                    member_cluster::JOINED,
                    ("Joined", Tone::Good),
                    ("Not joined", Tone::Bad),
                ),
                healthy: condition_state(
                    &status.conditions,
                    member_cluster::HEALTHY,
                    ("Healthy", Tone::Good),
                    ("Unhealthy", Tone::Bad),
                ),
                last_heartbeat: opt_unix(status.last_heartbeat_time.as_ref()),
                kubernetes_version: status.kubernetes_version.unwrap_or_default(),
                agent_version: status.agent_version.unwrap_or_default(),
                node_count: status.node_count,
            }
        })
        .collect();
    FleetView { members }
}

/// The Placements page.
pub fn placements(
    mut placements: Vec<Placement>,
    snapshots: Vec<ResourceSnapshot>,
    bindings: Vec<Binding>,
    runs: &[UpdateRun],
    mut strategies: Vec<String>,
) -> PlacementsView {
    placements.sort_by_key(|p| p.name_any());
    strategies.sort();
    let rows = placements
        .iter()
        .map(|p| {
            let name = p.name_any();
            let status = p.status.clone().unwrap_or_default();
            let mut snaps: Vec<SnapshotRow> = snapshots
                .iter()
                .filter(|s| s.spec.placement_name == name && s.spec.part == 0)
                .map(|s| SnapshotRow {
                    index: s.spec.resource_index,
                    created: opt_unix(s.metadata.creation_timestamp.as_ref()),
                    object_count: s.spec.object_count,
                })
                .collect();
            snaps.sort_by_key(|s| std::cmp::Reverse(s.index));
            let mut by_cluster: BTreeMap<String, PlacementClusterRow> = BTreeMap::new();
            for b in bindings.iter().filter(|b| b.spec.placement_name == name) {
                let bs = b.status.clone().unwrap_or_default();
                // Selected but not rolled out yet (an External placement waits for a run):
                // nothing is wrong with it.
                let waiting = b.spec.state == fleethub_crds::binding::BindingState::Scheduled
                    && find(&bs.conditions, APPLIED).is_none_or(|c| c.status != TRUE);
                let judge = |type_: &str, yes: &str, no: &str| {
                    if waiting {
                        State::new(
                            "Not rolled out",
                            Tone::Idle,
                            "selected; an UpdateRun has not reached this cluster yet",
                        )
                    } else {
                        condition_state(&bs.conditions, type_, (yes, Tone::Good), (no, Tone::Bad))
                    }
                };
                by_cluster.insert(
                    b.spec.target_cluster.clone(),
                    PlacementClusterRow {
                        cluster: b.spec.target_cluster.clone(),
                        target_index: b.spec.resource_snapshot_index,
                        applied_index: bs.applied_resource_snapshot_index,
                        applied: judge(APPLIED, "Applied", "Not applied"),
                        available: judge(AVAILABLE, "Available", "Not available"),
                    },
                );
            }
            // Clusters the placement selected but with no binding yet still appear.
            for c in &status.placement_statuses {
                by_cluster
                    .entry(c.cluster_name.clone())
                    .or_insert_with(|| PlacementClusterRow {
                        cluster: c.cluster_name.clone(),
                        target_index: c.resource_snapshot_index,
                        applied_index: None,
                        applied: State::new("Unknown", Tone::Idle, "no binding yet"),
                        available: State::new("Unknown", Tone::Idle, "no binding yet"),
                    });
            }
            let mut own_runs: Vec<&UpdateRun> = runs
                .iter()
                .filter(|r| r.spec.placement_name == name)
                .collect();
            own_runs.sort_by_key(|r| r.metadata.creation_timestamp.clone().map(|t| t.0));
            let newest = own_runs.last();
            let current: Option<i64> = newest
                .and_then(|r| r.spec.resource_snapshot_index.parse().ok())
                .or(status.latest_resource_snapshot_index);
            let rollback_index =
                current.and_then(|cur| snaps.iter().map(|s| s.index).filter(|i| *i < cur).max());
            PlacementRow {
                name,
                strategy_type: p
                    .spec
                    .strategy
                    .as_ref()
                    .map(|s| format!("{:?}", s.type_))
                    .unwrap_or_else(|| "RollingUpdate".into()),
                latest_index: status.latest_resource_snapshot_index,
                snapshots: snaps,
                clusters: by_cluster.into_values().collect(),
                last_strategy: newest.map(|r| r.spec.staged_rollout_strategy_name.clone()),
                rollback_index,
            }
        })
        .collect();
    PlacementsView {
        placements: rows,
        strategies,
    }
}

/// A run's overall state.
pub fn run_state(run: &UpdateRun) -> State {
    let Some(status) = run.status.as_ref() else {
        return State::new(
            "Pending",
            Tone::Idle,
            "the hub has not picked this run up yet",
        );
    };
    let c = &status.conditions;
    if let Some(s) = find(c, SUCCEEDED) {
        return if s.status == TRUE {
            State::new("Succeeded", Tone::Good, s.message.clone())
        } else {
            State::new("Failed", Tone::Bad, s.message.clone())
        };
    }
    if let Some(i) = find(c, INITIALIZED)
        && i.status == FALSE
    {
        return State::new("Failed to start", Tone::Bad, i.message.clone());
    }
    match find(c, PROGRESSING) {
        Some(p) if p.reason == REASON_STOPPED => {
            State::new("Stopped", Tone::Wait, p.message.clone())
        }
        Some(p) if p.status == TRUE => State::new("Running", Tone::Busy, p.message.clone()),
        Some(p) if p.reason == REASON_WAITING => {
            State::new("Waiting", Tone::Wait, p.message.clone())
        }
        Some(p) if p.status == FALSE => State::new("Blocked", Tone::Bad, p.message.clone()),
        _ if run.spec.state == Some(UpdateRunState::Stop) => {
            State::new("Stopped", Tone::Wait, "stopped by a person")
        }
        _ => State::new("Initializing", Tone::Busy, ""),
    }
}

fn stage_state(stage: &StageUpdatingStatus) -> State {
    let c = &stage.conditions;
    if let Some(s) = find(c, SUCCEEDED) {
        return if s.status == TRUE {
            State::new("Succeeded", Tone::Good, s.message.clone())
        } else {
            State::new("Failed", Tone::Bad, s.message.clone())
        };
    }
    match find(c, PROGRESSING) {
        Some(p) if p.status == TRUE => State::new("Updating", Tone::Busy, p.message.clone()),
        Some(p) if p.reason == REASON_STAGE_WAITING => {
            State::new("Waiting", Tone::Wait, p.message.clone())
        }
        Some(p) if p.status == FALSE => State::new("Failed", Tone::Bad, p.message.clone()),
        _ => State::new("Not started", Tone::Idle, ""),
    }
}

fn cluster_state(conditions: &[Condition]) -> State {
    match find(conditions, SUCCEEDED) {
        Some(s) if s.status == TRUE => State::new("Succeeded", Tone::Good, s.message.clone()),
        Some(s) if s.status == FALSE => State::new("Failed", Tone::Bad, s.message.clone()),
        _ => match find(conditions, CLUSTER_STARTED) {
            Some(s) if s.status == TRUE => State::new("Updating", Tone::Busy, s.message.clone()),
            _ => State::new("Pending", Tone::Idle, ""),
        },
    }
}

/// Who approved and their note, from an `Approved` condition's message: "approved by alice:
/// lgtm" (as `approve_patch` writes it; user names contain colons but never ": ") gives alice
/// and lgtm; a message in another form (a hand-written kubectl patch) is all note.
fn approver(message: &str) -> (Option<String>, Option<String>) {
    let note = |s: &str| Some(s.trim().to_string()).filter(|s| !s.is_empty());
    match message.strip_prefix("approved by ") {
        Some(rest) => match rest.split_once(": ") {
            Some((who, why)) => (note(who), note(why)),
            None => (note(rest), None),
        },
        None => (None, note(message)),
    }
}

fn stage_view(
    stage: &StageUpdatingStatus,
    config: Option<&fleethub_crds::strategy::StageConfig>,
    approvals: &BTreeMap<String, &ApprovalRequest>,
) -> StageView {
    let clusters_completed = opt_unix(stage.clusters_completed_time.as_ref());
    let tasks = stage
        .after_stage_task_status
        .iter()
        .map(|t| match t.type_ {
            AfterStageTaskType::TimedWait => {
                let wait = config
                    .and_then(|c| {
                        c.after_stage_tasks
                            .iter()
                            .find(|a| a.type_ == AfterStageTaskType::TimedWait)
                    })
                    .and_then(|a| a.wait_time.clone())
                    .unwrap_or_default();
                let secs = fleethub_crds::duration::parse(&wait)
                    .map(|d| d.as_secs() as i64)
                    .ok();
                TaskView::TimedWait {
                    until: clusters_completed.zip(secs).map(|(c, s)| c + s),
                    elapsed: find(&t.conditions, WAIT_TIME_ELAPSED)
                        .is_some_and(|c| c.status == TRUE),
                    wait,
                }
            }
            AfterStageTaskType::Approval => {
                let request = t.approval_request_name.clone();
                let ar = request.as_ref().and_then(|n| approvals.get(n));
                let approved = ar
                    .and_then(|a| a.status.as_ref())
                    .and_then(|s| find(&s.conditions, approval::APPROVED))
                    .filter(|c| c.status == TRUE);
                let accepted = find(&t.conditions, APPROVAL_REQUEST_APPROVED)
                    .is_some_and(|c| c.status == TRUE);
                let created =
                    find(&t.conditions, APPROVAL_REQUEST_CREATED).is_some_and(|c| c.status == TRUE);
                let (approved_by, note) =
                    approved.map(|c| approver(&c.message)).unwrap_or_default();
                TaskView::Approval {
                    approved: approved.is_some(),
                    approved_by,
                    note,
                    approved_at: approved.map(|c| unix(&c.last_transition_time)),
                    accepted,
                    pending: created && approved.is_none() && !accepted && ar.is_some(),
                    request,
                }
            }
        })
        .collect::<Vec<_>>();
    // In the strategy's order (the status may list them otherwise).
    let order = |t: &TaskView| {
        let ty = match t {
            TaskView::TimedWait { .. } => AfterStageTaskType::TimedWait,
            TaskView::Approval { .. } => AfterStageTaskType::Approval,
        };
        config
            .and_then(|c| c.after_stage_tasks.iter().position(|a| a.type_ == ty))
            .unwrap_or(usize::MAX)
    };
    let mut tasks = tasks;
    tasks.sort_by_key(order);
    StageView {
        name: if stage.stage_name == DELETION_STAGE {
            "clean-up (clusters no longer selected)".into()
        } else {
            stage.stage_name.clone()
        },
        state: stage_state(stage),
        started: opt_unix(stage.start_time.as_ref()),
        clusters_completed,
        ended: opt_unix(stage.end_time.as_ref()),
        clusters: stage
            .clusters
            .iter()
            .map(|c| ClusterView {
                name: c.cluster_name.clone(),
                state: cluster_state(&c.conditions),
                started: opt_unix(c.start_time.as_ref()),
                ended: opt_unix(c.end_time.as_ref()),
            })
            .collect(),
        tasks,
    }
}

/// A run's row in the list.
pub fn run_row(run: &UpdateRun) -> RunRow {
    let status = run.status.clone().unwrap_or_default();
    let all: Vec<_> = status
        .stages_status
        .iter()
        .flat_map(|s| s.clusters.iter())
        .collect();
    RunRow {
        name: run.name_any(),
        placement: run.spec.placement_name.clone(),
        index: run.spec.resource_snapshot_index.clone(),
        strategy: run.spec.staged_rollout_strategy_name.clone(),
        state: run_state(run),
        current_stage: status.current_stage.clone().unwrap_or_default(),
        done: all
            .iter()
            .filter(|c| find(&c.conditions, SUCCEEDED).is_some_and(|s| s.status == TRUE))
            .count(),
        total: all.len(),
        created: opt_unix(run.metadata.creation_timestamp.as_ref()),
    }
}

/// The Runs page, newest first.
pub fn runs(mut runs: Vec<UpdateRun>) -> RunsView {
    runs.sort_by_key(|r| {
        std::cmp::Reverse((
            r.metadata.creation_timestamp.clone().map(|t| t.0),
            r.name_any(),
        ))
    });
    RunsView {
        runs: runs.iter().map(run_row).collect(),
    }
}

/// The page of one run, with its ApprovalRequests.
pub fn run(run: &UpdateRun, approvals: &[ApprovalRequest]) -> RunView {
    let status = run.status.clone().unwrap_or_default();
    let by_name: BTreeMap<String, &ApprovalRequest> =
        approvals.iter().map(|a| (a.name_any(), a)).collect();
    let configs = status
        .staged_update_strategy_snapshot
        .as_ref()
        .map(|s| s.stages.clone())
        .unwrap_or_default();
    let mut stages: Vec<StageView> = status
        .stages_status
        .iter()
        .map(|s| stage_view(s, configs.iter().find(|c| c.name == s.stage_name), &by_name))
        .collect();
    if let Some(d) = status.deletion_stage_status.as_ref()
        && !d.clusters.is_empty()
    {
        stages.push(stage_view(d, None, &by_name));
    }
    let row = run_row(run);
    let mut problems = Vec::new();
    if matches!(row.state.tone, Tone::Bad) && !row.state.message.is_empty() {
        problems.push(row.state.message.clone());
    }
    for s in &stages {
        for c in &s.clusters {
            if c.state.tone == Tone::Bad {
                problems.push(format!(
                    "Cluster {} in stage {} failed: {}",
                    c.name, s.name, c.state.message
                ));
            }
        }
    }
    problems.dedup();
    let finished = find(&status.conditions, SUCCEEDED).is_some();
    RunView {
        stopped: run.spec.state == Some(UpdateRunState::Stop),
        finished,
        started: opt_unix(status.start_time.as_ref()),
        ended: opt_unix(status.end_time.as_ref()),
        problems,
        stages,
        row,
    }
}

/// The Approvals page: requests nobody approved yet whose run still waits (exists and has
/// not ended: a gate of a superseded, failed or deleted run opens nothing), oldest first.
pub fn approvals(mut all: Vec<ApprovalRequest>, runs: &[UpdateRun]) -> ApprovalsView {
    let open_runs: std::collections::BTreeSet<String> = runs
        .iter()
        .filter(|r| {
            r.status
                .as_ref()
                .is_none_or(|s| find(&s.conditions, SUCCEEDED).is_none())
        })
        .map(|r| r.name_any())
        .collect();
    all.sort_by_key(|a| {
        (
            a.metadata.creation_timestamp.clone().map(|t| t.0),
            a.name_any(),
        )
    });
    let pending = all
        .iter()
        .filter(|a| {
            !a.status.as_ref().is_some_and(|s| {
                find(&s.conditions, approval::APPROVED).is_some_and(|c| c.status == TRUE)
            })
        })
        .filter(|a| open_runs.contains(&a.spec.parent_stage_rollout))
        .map(|a| ApprovalRow {
            name: a.name_any(),
            run: a.spec.parent_stage_rollout.clone(),
            stage: a.spec.target_stage.clone(),
            created: opt_unix(a.metadata.creation_timestamp.as_ref()),
            approved_by: None,
        })
        .collect();
    ApprovalsView { pending }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fleethub_crds::update_run::{
        AfterStageTaskStatus, ClusterUpdatingStatus, UpdateRunSpec, UpdateRunStatus,
    };

    fn cond(type_: &str, status: &str, reason: &str, message: &str) -> Condition {
        Condition {
            type_: type_.into(),
            status: status.into(),
            reason: reason.into(),
            message: message.into(),
            last_transition_time: Time("2026-11-22T08:00:00Z".parse().unwrap()),
            observed_generation: None,
        }
    }

    fn waiting_run() -> UpdateRun {
        let mut run = UpdateRun::new(
            "r1",
            UpdateRunSpec {
                placement_name: "web".into(),
                resource_snapshot_index: "1".into(),
                staged_rollout_strategy_name: "three".into(),
                ..Default::default()
            },
        );
        run.status = Some(UpdateRunStatus {
            conditions: vec![cond(
                PROGRESSING,
                FALSE,
                REASON_WAITING,
                "waiting for approval of stage canary",
            )],
            current_stage: Some("canary".into()),
            stages_status: vec![StageUpdatingStatus {
                stage_name: "canary".into(),
                clusters: vec![
                    ClusterUpdatingStatus {
                        cluster_name: "member-2".into(),
                        conditions: vec![cond(SUCCEEDED, TRUE, "ClusterUpdatingSucceeded", "ok")],
                        ..Default::default()
                    },
                    ClusterUpdatingStatus {
                        cluster_name: "member-3".into(),
                        conditions: vec![cond(
                            SUCCEEDED,
                            FALSE,
                            "ClusterHealthTimeout",
                            "not available within 5m",
                        )],
                        ..Default::default()
                    },
                ],
                after_stage_task_status: vec![AfterStageTaskStatus {
                    type_: AfterStageTaskType::Approval,
                    approval_request_name: Some("r1-canary".into()),
                    conditions: vec![cond(APPROVAL_REQUEST_CREATED, TRUE, "Created", "")],
                }],
                conditions: vec![cond(PROGRESSING, FALSE, REASON_STAGE_WAITING, "waiting")],
                ..Default::default()
            }],
            ..Default::default()
        });
        run
    }

    #[test]
    fn a_run_waiting_for_approval_shows_the_gate_as_pending_and_names_failures() {
        let run = waiting_run();
        let ar = ApprovalRequest::new(
            "r1-canary",
            fleethub_crds::approval::ApprovalRequestSpec {
                parent_stage_rollout: "r1".into(),
                target_stage: "canary".into(),
            },
        );
        let view = super::run(&run, std::slice::from_ref(&ar));
        assert_eq!(view.row.state.label, "Waiting");
        assert_eq!(view.row.done, 1);
        assert_eq!(view.row.total, 2);
        assert_eq!(view.stages[0].state.label, "Waiting");
        assert_eq!(view.stages[0].clusters[1].state.label, "Failed");
        assert_eq!(
            view.problems,
            vec!["Cluster member-3 in stage canary failed: not available within 5m"]
        );
        match &view.stages[0].tasks[0] {
            TaskView::Approval {
                pending, request, ..
            } => {
                assert!(*pending);
                assert_eq!(request.as_deref(), Some("r1-canary"));
            }
            other => panic!("expected an approval task, got {other:?}"),
        }

        // Approved (by kubectl or the dashboard: the same condition) → no longer pending,
        // and the approver is named.
        let mut approved = ar.clone();
        approved.status = Some(fleethub_crds::approval::ApprovalRequestStatus {
            conditions: vec![cond(
                approval::APPROVED,
                TRUE,
                "Approved",
                "approved by alice: lgtm",
            )],
        });
        let view = super::run(&run, &[approved.clone()]);
        match &view.stages[0].tasks[0] {
            TaskView::Approval {
                pending,
                approved,
                approved_by,
                note,
                ..
            } => {
                assert!(!*pending);
                assert!(*approved);
                assert_eq!(approved_by.as_deref(), Some("alice"));
                assert_eq!(note.as_deref(), Some("lgtm"));
            }
            other => panic!("expected an approval task, got {other:?}"),
        }
        let runs = std::slice::from_ref(&run);
        assert!(super::approvals(vec![approved], runs).pending.is_empty());
        assert_eq!(super::approvals(vec![ar.clone()], runs).pending.len(), 1);
        // The gate of a run that is gone or has ended waits for no one.
        assert!(super::approvals(vec![ar.clone()], &[]).pending.is_empty());
        let mut ended = run.clone();
        ended.status.as_mut().unwrap().conditions = vec![cond(
            SUCCEEDED,
            FALSE,
            "UpdateRunSuperseded",
            "superseded by r2",
        )];
        assert!(super::approvals(vec![ar], &[ended]).pending.is_empty());
    }

    #[test]
    fn run_states_follow_the_conditions() {
        let mut run = waiting_run();
        run.status.as_mut().unwrap().conditions = vec![cond(
            PROGRESSING,
            FALSE,
            REASON_STOPPED,
            "stopped by a person",
        )];
        assert_eq!(run_state(&run).label, "Stopped");
        run.status.as_mut().unwrap().conditions = vec![cond(
            SUCCEEDED,
            FALSE,
            "UpdateRunFailed",
            "cluster member-3 failed",
        )];
        assert_eq!(run_state(&run).label, "Failed");
        assert_eq!(run_state(&run).tone, Tone::Bad);
        run.status = None;
        assert_eq!(run_state(&run).label, "Pending");
    }

    #[test]
    fn approver_is_read_from_the_condition_message() {
        let some = |s: &str| Some(s.to_string());
        assert_eq!(
            approver("approved by alice: lgtm: ship it"),
            (some("alice"), some("lgtm: ship it"))
        );
        assert_eq!(
            approver("approved by system:serviceaccount:fleethub-system:admin"),
            (some("system:serviceaccount:fleethub-system:admin"), None)
        );
        assert_eq!(
            approver("canary looks good"),
            (None, some("canary looks good"))
        );
        assert_eq!(approver(""), (None, None));
    }
}
