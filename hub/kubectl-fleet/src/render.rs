//! Turning UpdateRuns and ApprovalRequests into text for a terminal. Pure: objects and the time
//! in, text out, so every view is unit-tested without an API server.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use fleethub_crds::approval::APPROVED;
use fleethub_crds::conditions::{find, is_true};
use fleethub_crds::strategy::AfterStageTaskType;
use fleethub_crds::update_run::{
    AfterStageTaskStatus, ClusterUpdatingStatus, INITIALIZED, PROGRESSING, SUCCEEDED,
    StageUpdatingStatus, UpdateRunState,
};
use fleethub_crds::{ApprovalRequest, UpdateRun, duration};
use fleethub_hub::update_run::plan::{
    APPROVAL_REQUEST_APPROVED, APPROVAL_REQUEST_CREATED, CLUSTER_STARTED, DELETION_STAGE,
    WAIT_TIME_ELAPSED, reason,
};
use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;

/// Where a run is, in one word a person reads at a glance.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunState {
    /// Not initialized yet.
    Initializing,
    /// Updating clusters.
    Progressing,
    /// `spec.state: Stop` was set; clusters already updating finish.
    Stopping,
    /// Stopped by `spec.state: Stop`.
    Stopped,
    /// Waiting on an after-stage task (a soak or an approval).
    Waiting,
    /// A cluster failed; nothing new starts until it recovers.
    Blocked,
    /// Every cluster runs the snapshot.
    Succeeded,
    /// The run failed for good (e.g. it could not initialize).
    Failed,
}

impl RunState {
    /// The word shown in tables.
    pub fn label(self) -> &'static str {
        match self {
            RunState::Initializing => "Initializing",
            RunState::Progressing => "Progressing",
            RunState::Stopping => "Stopping",
            RunState::Stopped => "Stopped",
            RunState::Waiting => "Waiting",
            RunState::Blocked => "Blocked",
            RunState::Succeeded => "Succeeded",
            RunState::Failed => "Failed",
        }
    }

    /// Whether the run is over (it will not change by itself any more).
    pub fn finished(self) -> bool {
        matches!(self, RunState::Succeeded | RunState::Failed)
    }

    fn colour(self) -> &'static str {
        match self {
            RunState::Succeeded => GREEN,
            RunState::Failed | RunState::Blocked => RED,
            RunState::Waiting | RunState::Stopped | RunState::Stopping => YELLOW,
            RunState::Initializing | RunState::Progressing => CYAN,
        }
    }
}

const GREEN: &str = "\x1b[32m";
const RED: &str = "\x1b[31m";
const YELLOW: &str = "\x1b[33m";
const CYAN: &str = "\x1b[36m";
const BOLD: &str = "\x1b[1m";
const RESET: &str = "\x1b[0m";

/// Text decoration: colours only for a terminal.
#[derive(Debug, Clone, Copy)]
pub struct Style {
    /// Whether to emit ANSI colour codes.
    pub color: bool,
}

impl Style {
    fn paint(self, colour: &str, text: &str) -> String {
        if self.color {
            format!("{colour}{text}{RESET}")
        } else {
            text.to_string()
        }
    }
}

/// The state of `run`, from its conditions and `spec.state`.
pub fn run_state(run: &UpdateRun) -> RunState {
    let Some(status) = run.status.as_ref() else {
        return RunState::Initializing;
    };
    if let Some(c) = find(&status.conditions, SUCCEEDED) {
        return if c.status == "True" {
            RunState::Succeeded
        } else {
            RunState::Failed
        };
    }
    if find(&status.conditions, INITIALIZED).is_none() {
        return RunState::Initializing;
    }
    let stop = run.spec.state == Some(UpdateRunState::Stop);
    match find(&status.conditions, PROGRESSING) {
        Some(c) if c.reason == reason::STOPPED => RunState::Stopped,
        Some(c) if c.reason == reason::CLUSTER_FAILED => RunState::Blocked,
        Some(c) if c.reason == reason::WAITING => RunState::Waiting,
        _ if stop => RunState::Stopping,
        _ => RunState::Progressing,
    }
}

/// The run's overall message (its `Progressing` or final condition), if any.
pub fn run_message(run: &UpdateRun) -> Option<&str> {
    let status = run.status.as_ref()?;
    find(&status.conditions, SUCCEEDED)
        .or_else(|| find(&status.conditions, PROGRESSING))
        .or_else(|| find(&status.conditions, INITIALIZED))
        .map(|c| c.message.as_str())
}

/// Clusters done and clusters planned, over all stages (the deletion stage included).
pub fn progress(run: &UpdateRun) -> (usize, usize) {
    let Some(status) = run.status.as_ref() else {
        return (0, 0);
    };
    let clusters = status
        .stages_status
        .iter()
        .chain(status.deletion_stage_status.iter())
        .flat_map(|s| s.clusters.iter());
    clusters.fold((0, 0), |(done, all), c| {
        (
            done + usize::from(is_true(&c.conditions, SUCCEEDED)),
            all + 1,
        )
    })
}

/// A short age like kubectl's: `45s`, `3m12s`, `17m`, `5h`, `3d`.
pub fn age(since: Timestamp, now: Timestamp) -> String {
    let s = now.as_second().saturating_sub(since.as_second()).max(0);
    match s {
        0..60 => format!("{s}s"),
        60..600 => format!("{}m{}s", s / 60, s % 60),
        600..7200 => format!("{}m", s / 60),
        7200..172800 => format!("{}h", s / 3600),
        _ => format!("{}d", s / 86400),
    }
}

fn created(obj: &impl kube::Resource) -> Option<Timestamp> {
    obj.meta().creation_timestamp.as_ref().map(|t| t.0)
}

/// A table of rows, columns padded to their widest cell.
fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let mut line = |cells: Vec<&str>| {
        let mut l = String::new();
        for (i, (cell, w)) in cells.iter().zip(&widths).enumerate() {
            if i + 1 == cells.len() {
                l.push_str(cell);
            } else {
                let _ = write!(l, "{cell:<w$}   ");
            }
        }
        out.push_str(l.trim_end());
        out.push('\n');
    };
    line(header.to_vec());
    for row in rows {
        line(row.iter().map(String::as_str).collect());
    }
    out
}

/// `kubectl fleet runs`: one line per run, newest first.
pub fn runs_table(runs: &[UpdateRun], now: Timestamp) -> String {
    if runs.is_empty() {
        return "No UpdateRuns found on the hub.\n".to_string();
    }
    let mut runs: Vec<&UpdateRun> = runs.iter().collect();
    runs.sort_by(|a, b| {
        created(*b)
            .cmp(&created(*a))
            .then(a.name_any().cmp(&b.name_any()))
    });
    let rows: Vec<Vec<String>> = runs
        .iter()
        .map(|r| {
            let (done, all) = progress(r);
            let stage = r
                .status
                .as_ref()
                .and_then(|s| s.current_stage.as_deref())
                .map(stage_label)
                .unwrap_or("-");
            vec![
                r.name_any(),
                r.spec.placement_name.clone(),
                r.spec.resource_snapshot_index.clone(),
                run_state(r).label().to_string(),
                stage.to_string(),
                if all == 0 {
                    "-".to_string()
                } else {
                    format!("{done}/{all} clusters")
                },
                created(*r).map_or("-".to_string(), |t| age(t, now)),
            ]
        })
        .collect();
    table(
        &[
            "NAME",
            "PLACEMENT",
            "SNAPSHOT",
            "STATE",
            "STAGE",
            "PROGRESS",
            "AGE",
        ],
        &rows,
    )
}

fn stage_label(name: &str) -> &str {
    if name == DELETION_STAGE {
        "(deletion)"
    } else {
        name
    }
}

/// Whether the request has been approved by a person.
pub fn is_approved(request: &ApprovalRequest) -> bool {
    request
        .status
        .as_ref()
        .is_some_and(|s| is_true(&s.conditions, APPROVED))
}

/// `kubectl fleet approvals`: the requests, pending ones first.
pub fn approvals_table(requests: &[ApprovalRequest], now: Timestamp) -> String {
    if requests.is_empty() {
        return "No ApprovalRequests waiting.\n".to_string();
    }
    let mut requests: Vec<&ApprovalRequest> = requests.iter().collect();
    requests.sort_by_key(|r| (is_approved(r), created(*r), r.name_any()));
    let rows: Vec<Vec<String>> = requests
        .iter()
        .map(|r| {
            let state = match r
                .status
                .as_ref()
                .and_then(|s| find(&s.conditions, APPROVED))
            {
                Some(c) if c.status == "True" => c.message.clone(),
                _ => format!("pending: kubectl fleet approve {}", r.name_any()),
            };
            vec![
                r.name_any(),
                r.spec.parent_stage_rollout.clone(),
                r.spec.target_stage.clone(),
                created(*r).map_or("-".to_string(), |t| age(t, now)),
                state,
            ]
        })
        .collect();
    table(&["NAME", "RUN", "STAGE", "AGE", "APPROVAL"], &rows)
}

fn clock(t: &Time) -> String {
    t.0.strftime("%H:%M:%SZ").to_string()
}

fn span(from: Option<&Time>, to: Option<&Time>) -> String {
    match (from, to) {
        (Some(a), Some(b)) => format!(
            "{} → {} ({})",
            clock(a),
            clock(b),
            duration::format(Duration::from_secs(
                b.0.as_second().saturating_sub(a.0.as_second()).max(0) as u64
            ))
        ),
        (Some(a), None) => format!("since {}", clock(a)),
        _ => String::new(),
    }
}

/// A stage's state: Succeeded, Failed, Waiting, Updating or Pending.
fn stage_state(stage: &StageUpdatingStatus) -> (&'static str, &'static str) {
    if is_true(&stage.conditions, SUCCEEDED) {
        return ("Succeeded", GREEN);
    }
    match find(&stage.conditions, PROGRESSING) {
        Some(c) if c.reason == reason::STAGE_FAILED => ("Failed", RED),
        Some(c) if c.reason == reason::STAGE_WAITING => ("Waiting", YELLOW),
        _ if stage.start_time.is_some() => ("Updating", CYAN),
        _ => ("Pending", ""),
    }
}

fn cluster_line(c: &ClusterUpdatingStatus, deletion: bool, style: Style) -> String {
    let (state, colour, detail) = match find(&c.conditions, SUCCEEDED) {
        Some(s) if s.status == "True" => {
            (if deletion { "Removed" } else { "Succeeded" }, GREEN, None)
        }
        Some(s) => ("Failed", RED, Some(format!("{} ({})", s.message, s.reason))),
        None if find(&c.conditions, CLUSTER_STARTED).is_some() => {
            (if deletion { "Removing" } else { "Updating" }, CYAN, None)
        }
        None => ("Pending", "", None),
    };
    let mut line = format!(
        "    {:<24} {}",
        c.cluster_name,
        style.paint(colour, &format!("{state:<10}"))
    );
    let times = span(c.start_time.as_ref(), c.end_time.as_ref());
    if !times.is_empty() {
        let _ = write!(line, " {times}");
    }
    let mut line = line.trim_end().to_string();
    if let Some(d) = detail {
        let _ = write!(line, "\n      why: {d}");
    }
    line
}

fn task_line(
    task: &AfterStageTaskStatus,
    stage: &StageUpdatingStatus,
    wait: Option<Duration>,
    approvals: &BTreeMap<String, ApprovalRequest>,
    now: Timestamp,
    style: Style,
) -> String {
    match task.type_ {
        AfterStageTaskType::TimedWait => {
            let what = format!(
                "TimedWait {}",
                wait.map_or("?".to_string(), duration::format)
            );
            if let Some(c) =
                find(&task.conditions, WAIT_TIME_ELAPSED).filter(|c| c.status == "True")
            {
                return format!(
                    "    after: {what}: {} at {}",
                    style.paint(GREEN, "elapsed"),
                    clock(&c.last_transition_time)
                );
            }
            match (stage.clusters_completed_time.as_ref(), wait) {
                (Some(done), Some(wait)) => {
                    let until = done.0.checked_add(wait).unwrap_or(done.0);
                    let left = until.as_second().saturating_sub(now.as_second()).max(0) as u64;
                    format!(
                        "    after: {what}: {} {} left (until {})",
                        style.paint(YELLOW, "soaking,"),
                        duration::format(Duration::from_secs(left)),
                        clock(&Time(until))
                    )
                }
                _ => format!("    after: {what}: not reached yet"),
            }
        }
        AfterStageTaskType::Approval => {
            let name = task.approval_request_name.clone().unwrap_or_default();
            let request = approvals.get(&name);
            let approved = request
                .and_then(|r| r.status.as_ref())
                .and_then(|s| find(&s.conditions, APPROVED))
                .filter(|c| c.status == "True");
            if let Some(c) = approved {
                let accepted = if is_true(&task.conditions, APPROVAL_REQUEST_APPROVED) {
                    ""
                } else {
                    " (the run has not taken it into account yet)"
                };
                return format!(
                    "    after: Approval {name}: {} at {}{accepted}",
                    style.paint(GREEN, &c.message),
                    clock(&c.last_transition_time)
                );
            }
            if is_true(&task.conditions, APPROVAL_REQUEST_APPROVED) {
                return format!(
                    "    after: Approval {name}: {}",
                    style.paint(GREEN, "approved")
                );
            }
            match find(&task.conditions, APPROVAL_REQUEST_CREATED) {
                Some(c) if c.status == "True" => format!(
                    "    after: Approval {name}: {} since {} ({})\n      approve with: kubectl fleet approve {name}",
                    style.paint(YELLOW, "waiting for approval"),
                    clock(&c.last_transition_time),
                    age(c.last_transition_time.0, now)
                ),
                _ => format!("    after: Approval {name}: not reached yet"),
            }
        }
    }
}

/// `kubectl fleet run <name>`: the run's stages in order, each stage's clusters in order with
/// their state and times, the after-stage tasks, and why anything failed. `approvals` are the
/// run's ApprovalRequests by name.
pub fn run_detail(
    run: &UpdateRun,
    approvals: &BTreeMap<String, ApprovalRequest>,
    now: Timestamp,
    style: Style,
) -> String {
    let mut out = String::new();
    let state = run_state(run);
    let _ = writeln!(
        out,
        "{} {}   {}",
        style.paint(BOLD, "UpdateRun"),
        style.paint(BOLD, &run.name_any()),
        style.paint(state.colour(), state.label())
    );
    let _ = writeln!(
        out,
        "  placement {}, resource snapshot {}, strategy {}",
        run.spec.placement_name,
        run.spec.resource_snapshot_index,
        run.spec.staged_rollout_strategy_name
    );
    if run.spec.state == Some(UpdateRunState::Stop) && !state.finished() {
        let _ = writeln!(
            out,
            "  spec.state is Stop: resume with: kubectl fleet resume {}",
            run.name_any()
        );
    }
    let status = run.status.clone().unwrap_or_default();
    match (status.start_time.as_ref(), status.end_time.as_ref()) {
        (Some(s), Some(e)) => {
            let _ = writeln!(out, "  ran {}", span(Some(s), Some(e)));
        }
        (Some(s), None) => {
            let _ = writeln!(out, "  started {} ({} ago)", s.0, age(s.0, now));
        }
        _ => {}
    }
    if let Some(m) = run_message(run) {
        let _ = writeln!(out, "  {m}");
    }
    let (done, all) = progress(run);
    if all > 0 {
        let _ = writeln!(out, "  {done}/{all} clusters done");
    }
    let strategy = status
        .staged_update_strategy_snapshot
        .clone()
        .unwrap_or_default();
    let count = status.stages_status.len();
    for (i, stage) in status.stages_status.iter().enumerate() {
        let (word, colour) = stage_state(stage);
        let times = span(stage.start_time.as_ref(), stage.end_time.as_ref());
        let current =
            status.current_stage.as_deref() == Some(stage.stage_name.as_str()) && !state.finished();
        let _ = writeln!(
            out,
            "\n{}",
            format!(
                "{}stage {}/{count} {}   {}  {}",
                if current { "▶ " } else { "  " },
                i + 1,
                style.paint(BOLD, &stage.stage_name),
                style.paint(colour, word),
                times
            )
            .trim_end()
        );
        if stage.clusters.is_empty() {
            let _ = writeln!(out, "    (no clusters)");
        }
        for c in &stage.clusters {
            let _ = writeln!(out, "{}", cluster_line(c, false, style));
        }
        let waits = strategy.stages.get(i).map(|cfg| {
            cfg.after_stage_tasks
                .iter()
                .filter(|t| t.type_ == AfterStageTaskType::TimedWait)
                .find_map(|t| duration::parse(t.wait_time.as_deref()?).ok())
        });
        for task in &stage.after_stage_task_status {
            let _ = writeln!(
                out,
                "{}",
                task_line(task, stage, waits.flatten(), approvals, now, style)
            );
        }
    }
    if let Some(del) = status.deletion_stage_status.as_ref() {
        let (word, colour) = stage_state(del);
        if del.clusters.is_empty() {
            let _ = writeln!(
                out,
                "\n  deletion stage: no cluster to remove the workload from"
            );
        } else {
            let _ = writeln!(
                out,
                "\n  deletion stage (clusters the placement no longer selects)   {}",
                style.paint(colour, word)
            );
            for c in &del.clusters {
                let _ = writeln!(out, "{}", cluster_line(c, true, style));
            }
        }
    }
    out
}

#[cfg(test)]
#[path = "render_tests.rs"]
mod tests;
