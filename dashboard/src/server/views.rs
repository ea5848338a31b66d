//! Hub objects → what the pages show. Pure functions, no API server: unit-tested here (and
//! in the pages' own modules).

mod auto_updates;
pub use auto_updates::auto_updates;

use std::collections::BTreeMap;

use fleethub_crds::binding::OVERRIDDEN;
use fleethub_crds::conditions::{FALSE, TRUE, find};
use fleethub_crds::drift::{self, DRIFTED};
use fleethub_crds::override_apply::Overridden;
use fleethub_crds::run_progress::{
    ClusterPhase, ClusterProgress, RunPhase, RunProgress, StagePhase, StageProgress, TaskProgress,
};
use fleethub_crds::update_run::{DELETION_STAGE, MetricCheckResult};
use fleethub_crds::work::{APPLIED, AVAILABLE};
use fleethub_crds::{
    ApprovalRequest, Binding, MemberCluster, Placement, ResourceSnapshot, UpdateRun, member_cluster,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::ResourceExt;

use crate::model::*;

fn opt_unix(t: Option<&Time>) -> Option<i64> {
    t.map(|t| t.0.as_second())
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

/// How a cluster's objects compare with the hub's, from its Binding's `Drifted` condition.
fn drift_state(conditions: &[Condition]) -> State {
    match find(conditions, DRIFTED) {
        Some(c) if c.status == TRUE => {
            let label = match c.reason.as_str() {
                "TakeoverRefused" => "Takeover refused",
                "Diffed" => "Differs",
                _ => "Drifted",
            };
            State::new(label, Tone::Wait, c.message.clone())
        }
        Some(c) if c.reason == drift::reason::IN_SYNC => {
            State::new("In sync", Tone::Good, c.message.clone())
        }
        Some(c) => State::new("Unknown", Tone::Idle, c.message.clone()),
        None => State::new("Unknown", Tone::Idle, "not reported yet (Drifted)"),
    }
}

/// The address of the page showing what `cluster` gets from `placement`.
pub fn render_path(placement: &str, cluster: &str) -> String {
    format!("/placements/{placement}/clusters/{cluster}/render")
}

/// Which overrides change what `cluster` gets from `placement`, from its Binding's
/// `Overridden` condition (`None` when it has no Binding).
fn overrides_view(placement: &str, cluster: &str, binding: Option<&Binding>) -> OverridesView {
    let conditions = binding
        .and_then(|b| b.status.as_ref())
        .map(|s| s.conditions.as_slice())
        .unwrap_or_default();
    let message = find(conditions, OVERRIDDEN)
        .map(|c| c.message.clone())
        .unwrap_or_else(|| "not reported yet (Overridden)".to_string());
    let (state, snapshots) = match Overridden::of(conditions) {
        Overridden::Unknown => (State::new("Unknown", Tone::Idle, message), vec![]),
        Overridden::None => (no_override(message), vec![]),
        Overridden::Applied(snapshots) => {
            (State::new("Overridden", Tone::Good, message), snapshots)
        }
        Overridden::Failed(m) => (State::new("Override failed", Tone::Bad, m), vec![]),
    };
    OverridesView {
        state,
        snapshots,
        render: render_path(placement, cluster),
    }
}

/// A cluster no override changes.
fn no_override(message: String) -> State {
    State::new("None", Tone::Idle, message)
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
                        drift: drift_state(&bs.conditions),
                        overrides: overrides_view(&name, &b.spec.target_cluster, Some(b)),
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
                        drift: State::new("Unknown", Tone::Idle, "no binding yet"),
                        overrides: overrides_view(&name, &c.cluster_name, None),
                    });
            }
            let indices: Vec<i64> = snaps.iter().map(|s| s.index).collect();
            let rollback = fleethub_crds::rollback::rollback(
                &name,
                status.latest_resource_snapshot_index,
                runs,
                &indices,
            );
            let newest = fleethub_crds::rollback::runs_of(&name, runs)
                .last()
                .copied();
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
                rollback_index: rollback.map(|r| r.to),
            }
        })
        .collect();
    PlacementsView {
        placements: rows,
        strategies,
    }
}

/// A run's overall state, as the pages word it.
fn run_phase_state(phase: RunPhase, message: &str) -> State {
    let (label, tone) = match phase {
        RunPhase::Pending => ("Pending", Tone::Idle),
        RunPhase::Queued => ("Queued", Tone::Wait),
        RunPhase::Initializing => ("Initializing", Tone::Busy),
        RunPhase::Planned => ("Planned", Tone::Wait),
        RunPhase::Progressing => ("Running", Tone::Busy),
        RunPhase::Stopping => ("Stopping", Tone::Wait),
        RunPhase::Stopped => ("Stopped", Tone::Wait),
        RunPhase::Waiting => ("Waiting", Tone::Wait),
        RunPhase::Blocked => ("Blocked", Tone::Bad),
        RunPhase::Held => ("Held", Tone::Bad),
        RunPhase::Baking => ("Baking", Tone::Busy),
        RunPhase::Succeeded => ("Succeeded", Tone::Good),
        RunPhase::Failed => ("Failed", Tone::Bad),
    };
    let message = if phase == RunPhase::Pending {
        "the hub has not picked this run up yet"
    } else {
        message
    };
    State::new(label, tone, message)
}

fn stage_state(stage: &StageProgress) -> State {
    let (label, tone) = match stage.phase {
        StagePhase::NotStarted => ("Not started", Tone::Idle),
        StagePhase::Updating => ("Updating", Tone::Busy),
        StagePhase::Waiting => ("Waiting", Tone::Wait),
        StagePhase::Succeeded => ("Succeeded", Tone::Good),
        StagePhase::Failed => ("Failed", Tone::Bad),
    };
    State::new(label, tone, stage.message.clone())
}

fn cluster_state(cluster: &ClusterProgress) -> State {
    let (label, tone) = match cluster.phase {
        ClusterPhase::Pending => ("Pending", Tone::Idle),
        ClusterPhase::Updating => ("Updating", Tone::Busy),
        ClusterPhase::Succeeded => ("Succeeded", Tone::Good),
        ClusterPhase::Skipped => ("Skipped", Tone::Wait),
        ClusterPhase::Failed => ("Failed", Tone::Bad),
        ClusterPhase::Regressed => ("Regressed", Tone::Bad),
    };
    let message = cluster
        .progress
        .clone()
        .unwrap_or_else(|| cluster.message.clone());
    State::new(label, tone, message)
}

fn task_view(task: &TaskProgress) -> TaskView {
    match task {
        TaskProgress::TimedWait {
            wait_time,
            until,
            elapsed_at,
            paused,
            ..
        } => TaskView::TimedWait {
            wait: wait_time.clone(),
            until: until.map(|t| t.as_second()),
            elapsed: elapsed_at.is_some(),
            paused: paused.clone(),
        },
        TaskProgress::Approval {
            request,
            approval,
            recorded,
            ..
        } => TaskView::Approval {
            request: request.clone(),
            approved: approval.is_some(),
            approved_by: approval.as_ref().and_then(|a| a.by.clone()),
            note: approval.as_ref().and_then(|a| a.note.clone()),
            approved_at: approval.as_ref().map(|a| a.at.as_second()),
            accepted: *recorded,
            pending: task.waiting(),
        },
        TaskProgress::MetricCheck(m) => TaskView::MetricCheck(MetricCheckView {
            url: m.url.clone(),
            query: m.query.clone(),
            passes: m.passes,
            threshold: m.threshold,
            last: m
                .last
                .as_ref()
                .map(|(result, value)| (value.clone(), *result == MetricCheckResult::Pass)),
            next_check: m.next_check.map(|t| t.as_second()),
            reached: m.reached.is_some(),
            passed: m.passed_at.is_some(),
            message: m.message.clone(),
        }),
    }
}

/// Stage `stage` of a run's page: its counts, and the page of its clusters `query` asks for.
fn stage_view(stage: &StageProgress, query: &RunQuery, current: bool) -> StageView {
    let c = stage.counts();
    let n = |v: i32| v.max(0) as usize;
    let counts = StageCounts {
        total: n(c.total),
        pending: n(c.pending),
        updating: n(c.updating),
        succeeded: n(c.succeeded),
        failed: n(c.failed),
        skipped: n(c.skipped),
    };
    let matching: Vec<(usize, &ClusterProgress)> = stage
        .clusters
        .iter()
        .enumerate()
        .filter(|(_, c)| c.name.contains(&query.search))
        .collect();
    let paged = query.stage == stage.name;
    let last_page = matching.len().saturating_sub(1) / RUN_PAGE_ROWS;
    let page = if paged { query.page.min(last_page) } else { 0 };
    StageView {
        name: if stage.name == DELETION_STAGE {
            "clean-up (clusters no longer selected)".into()
        } else {
            stage.name.clone()
        },
        state: stage_state(stage),
        started: stage.started.map(|t| t.as_second()),
        clusters_completed: stage.clusters_completed.map(|t| t.as_second()),
        ended: stage.ended.map(|t| t.as_second()),
        open: counts.total <= RUN_PAGE_ROWS || current || paged || !query.search.is_empty(),
        counts,
        matching: matching.len(),
        page,
        clusters: matching
            .iter()
            .skip(page * RUN_PAGE_ROWS)
            .take(RUN_PAGE_ROWS)
            .map(|(i, c)| ClusterView {
                order: i + 1,
                name: c.name.clone(),
                state: cluster_state(c),
                started: c.started.map(|t| t.as_second()),
                ended: c.ended.map(|t| t.as_second()),
                drift: None,
                overrides: None,
            })
            .collect(),
        before_tasks: stage.before_tasks.iter().map(task_view).collect(),
        tasks: stage.tasks.iter().map(task_view).collect(),
    }
}

fn row(progress: &RunProgress) -> RunRow {
    let (done, total) = progress.counts();
    RunRow {
        name: progress.name.clone(),
        placement: progress.placement.clone(),
        index: progress.index.clone(),
        strategy: progress.strategy.clone(),
        state: run_phase_state(progress.phase, &progress.message),
        current_stage: progress.current_stage.clone().unwrap_or_default(),
        done,
        total,
        created: progress.created.map(|t| t.as_second()),
    }
}

/// A run's row in the list.
pub fn run_row(run: &UpdateRun) -> RunRow {
    row(&RunProgress::new(run, &[]))
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

/// The page of one run with its ApprovalRequests: every stage with its counts and the page of
/// its clusters `query` asks for. [`mark_bindings`] then marks the shown clusters.
pub fn run(run: &UpdateRun, approvals: &[ApprovalRequest], query: &RunQuery) -> RunView {
    let progress = RunProgress::new(run, approvals);
    let current = progress.current_stage.as_deref();
    let mut stages: Vec<StageView> = progress
        .stages
        .iter()
        .map(|s| stage_view(s, query, current == Some(s.name.as_str())))
        .collect();
    if let Some(d) = progress
        .deletion
        .as_ref()
        .filter(|d| !d.clusters.is_empty())
    {
        stages.push(stage_view(d, query, false));
    }
    RunView {
        row: row(&progress),
        stopped: progress.stop_requested,
        planned: progress.phase == RunPhase::Planned,
        notice: progress.not_in_run_notice(),
        finished: progress.phase.finished(),
        started: progress.started.map(|t| t.as_second()),
        ended: progress.ended.map(|t| t.as_second()),
        problems: progress.problems(),
        query: query.clone(),
        stages,
    }
}

/// The clusters a run's page shows, by name.
pub fn shown_clusters(view: &RunView) -> Vec<String> {
    view.stages
        .iter()
        .flat_map(|s| s.clusters.iter().map(|c| c.name.clone()))
        .collect()
}

/// Whether a run's rows need their Bindings read for their overrides: while the run applies
/// override snapshots, or has not fixed them yet. Otherwise (and when [`placement_may_drift`] says
/// no cluster drifted) [`mark_without_bindings`] says the same without listing Bindings, which at
/// 10,000 clusters costs the hub API server a scan of every Binding for each page view.
pub fn run_may_override(run: &UpdateRun) -> bool {
    run.status
        .as_ref()
        .and_then(|s| s.applied_override_snapshots.as_ref())
        .is_none_or(|o| {
            !o.cluster_resource_override_snapshots.is_empty()
                || !o.resource_override_snapshots.is_empty()
        })
}

/// Whether a run's rows need their Bindings read for a drift mark: while the placement reports
/// clusters whose objects differ from the hub's, or could not be read (`None`), or has not
/// counted them yet.
pub fn placement_may_drift(placement: Option<&Placement>) -> bool {
    placement
        .and_then(|p| p.status.as_ref())
        .and_then(|s| s.drifted_cluster_count)
        .is_none_or(|n| n > 0)
}

/// Marks the shown clusters of a run that applies no override, of a placement that reports no
/// drift: no drift mark, and no override.
pub fn mark_without_bindings(view: &mut RunView, placement: &str) {
    for c in view.stages.iter_mut().flat_map(|s| s.clusters.iter_mut()) {
        c.drift = None;
        c.overrides = Some(OverridesView {
            state: no_override("no override applies to this run".to_string()),
            snapshots: vec![],
            render: render_path(placement, &c.name),
        });
    }
}

/// Marks the shown clusters of a run's page from `placement`'s Bindings: a cluster whose
/// objects differ from the hub's, and the overrides each gets.
pub fn mark_bindings(view: &mut RunView, placement: &str, bindings: &[Binding]) {
    let by_cluster: std::collections::HashMap<&str, &Binding> = bindings
        .iter()
        .filter(|b| b.spec.placement_name == placement)
        .map(|b| (b.spec.target_cluster.as_str(), b))
        .collect();
    for c in view.stages.iter_mut().flat_map(|s| s.clusters.iter_mut()) {
        let binding = by_cluster.get(c.name.as_str()).copied();
        c.drift = binding
            .and_then(|b| b.status.as_ref())
            .filter(|s| find(&s.conditions, DRIFTED).is_some_and(|d| d.status == TRUE))
            .map(|s| drift_state(&s.conditions));
        c.overrides = Some(overrides_view(placement, &c.name, binding));
    }
}

/// The Approvals page: requests nobody approved yet whose run still waits (exists and has
/// not ended: a gate of a superseded, failed or deleted run opens nothing), oldest first.
pub fn approvals(mut all: Vec<ApprovalRequest>, runs: &[UpdateRun]) -> ApprovalsView {
    let open_runs: std::collections::BTreeSet<String> = runs
        .iter()
        .filter(|r| !RunPhase::of(r).finished())
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
        .filter(|a| !a.is_approved())
        .filter(|a| open_runs.contains(&a.spec.parent_stage_rollout))
        .map(|a| approval_row(a, None))
        .collect();
    ApprovalsView { pending }
}

/// One ApprovalRequest as the pages show it, `approved_by` as the caller read it.
pub fn approval_row(a: &ApprovalRequest, approved_by: Option<String>) -> ApprovalRow {
    ApprovalRow {
        name: a.name_any(),
        run: a.spec.parent_stage_rollout.clone(),
        stage: a.spec.target_stage.clone(),
        created: opt_unix(a.metadata.creation_timestamp.as_ref()),
        approved_by,
        approvals: a.approvers().into_iter().map(str::to_string).collect(),
        needed: a.spec.policy.as_ref().map(|p| p.needed() as u32),
    }
}

#[cfg(test)]
#[path = "views_tests.rs"]
mod tests;
