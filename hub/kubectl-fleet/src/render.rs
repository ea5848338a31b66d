//! Turning UpdateRuns and ApprovalRequests into text for a terminal. Pure: objects and the time
//! in, text out, so every view is unit-tested without an API server. What a run's status means
//! is read once, by the shared model (`fleethub_crds::run_progress`); this only words it.

use std::fmt::Write as _;
use std::time::Duration;

use fleethub_crds::run_progress::{
    Approval, ClusterPhase, ClusterProgress, MetricCheckProgress, RunPhase, RunProgress,
    StagePhase, StageProgress, TaskProgress,
};
use fleethub_crds::stored_stage::ClusterCounts;
use fleethub_crds::update_run::{DELETION_STAGE, MetricCheckResult};
use fleethub_crds::{ApprovalRequest, UpdateRun, duration};
use jiff::Timestamp;
use kube::ResourceExt;

/// Where a run is: the shared model's phase.
pub type RunState = RunPhase;

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

fn run_colour(phase: RunPhase) -> &'static str {
    match phase {
        RunPhase::Succeeded => GREEN,
        RunPhase::Failed | RunPhase::Blocked | RunPhase::Held => RED,
        RunPhase::Waiting
        | RunPhase::Stopped
        | RunPhase::Stopping
        | RunPhase::Queued
        | RunPhase::Planned => YELLOW,
        RunPhase::Pending | RunPhase::Initializing | RunPhase::Progressing | RunPhase::Baking => {
            CYAN
        }
    }
}

/// The state of `run`, from its conditions and `spec.state`.
pub fn run_state(run: &UpdateRun) -> RunState {
    RunPhase::of(run)
}

/// The run's overall message (its final, `Progressing` or `Initialized` condition's), if any.
pub fn run_message(run: &UpdateRun) -> Option<String> {
    Some(RunProgress::new(run, &[]).message).filter(|m| !m.is_empty())
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
pub(crate) fn table(header: &[&str], rows: &[Vec<String>]) -> String {
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
            let progress = RunProgress::new(r, &[]);
            let (done, all) = progress.counts();
            let stage = progress.current_stage.as_deref().map_or("-", stage_label);
            vec![
                progress.name.clone(),
                progress.placement.clone(),
                progress.index.clone(),
                progress.phase.label().to_string(),
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
    request.is_approved()
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
            let state = match (Approval::of(r), &r.spec.policy) {
                (Some(a), None) => a.message,
                (_, Some(policy)) => {
                    let who = r.approvers();
                    let mut state = format!("{} of {} approvals", who.len(), policy.needed());
                    if !who.is_empty() {
                        state.push_str(&format!(" ({})", who.join(", ")));
                    }
                    if !r.is_approved() {
                        state.push_str(&format!("; kubectl fleet approve {}", r.name_any()));
                    }
                    state
                }
                (None, None) => format!("pending: kubectl fleet approve {}", r.name_any()),
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

fn clock(t: Timestamp) -> String {
    t.strftime("%H:%M:%SZ").to_string()
}

fn span(from: Option<Timestamp>, to: Option<Timestamp>) -> String {
    match (from, to) {
        (Some(a), Some(b)) => format!(
            "{} → {} ({})",
            clock(a),
            clock(b),
            duration::format(Duration::from_secs(
                b.as_second().saturating_sub(a.as_second()).max(0) as u64
            ))
        ),
        (Some(a), None) => format!("since {}", clock(a)),
        _ => String::new(),
    }
}

fn stage_state(stage: &StageProgress) -> (&'static str, &'static str) {
    match stage.phase {
        StagePhase::Succeeded => ("Succeeded", GREEN),
        StagePhase::Failed => ("Failed", RED),
        StagePhase::Waiting => ("Waiting", YELLOW),
        StagePhase::Updating => ("Updating", CYAN),
        StagePhase::NotStarted => ("Pending", ""),
    }
}

fn cluster_line(c: &ClusterProgress, deletion: bool, style: Style) -> String {
    let (state, colour, detail) = match c.phase {
        ClusterPhase::Succeeded => (if deletion { "Removed" } else { "Succeeded" }, GREEN, None),
        ClusterPhase::Failed => ("Failed", RED, Some(format!("{} ({})", c.message, c.reason))),
        ClusterPhase::Regressed => (
            "Regressed",
            RED,
            Some(format!("{} ({})", c.message, c.reason)),
        ),
        ClusterPhase::Updating => (
            if deletion { "Removing" } else { "Updating" },
            CYAN,
            c.progress.clone(),
        ),
        ClusterPhase::Pending => ("Pending", "", None),
        ClusterPhase::Skipped => ("Skipped", YELLOW, Some(c.message.clone())),
    };
    let mut line = format!(
        "    {:<24} {}",
        c.name,
        style.paint(colour, &format!("{state:<10}"))
    );
    let times = span(c.started, c.ended);
    if !times.is_empty() {
        let _ = write!(line, " {times}");
    }
    let mut line = line.trim_end().to_string();
    match (c.phase, detail) {
        (ClusterPhase::Updating, Some(d)) => {
            let _ = write!(line, "\n      now: {d}");
        }
        (_, Some(d)) => {
            let _ = write!(line, "\n      why: {d}");
        }
        (_, None) => {}
    }
    line
}

fn task_line(task: &TaskProgress, when: &str, now: Timestamp, style: Style) -> String {
    match task {
        TaskProgress::TimedWait {
            wait,
            until,
            elapsed_at,
            paused,
            ..
        } => {
            let what = format!(
                "TimedWait {}",
                wait.map_or("?".to_string(), duration::format)
            );
            if let Some(at) = elapsed_at {
                return format!(
                    "    {when}: {what}: {} at {}",
                    style.paint(GREEN, "elapsed"),
                    clock(*at)
                );
            }
            if let Some(why) = paused {
                return format!("    {when}: {what}: {} {why}", style.paint(RED, "paused,"));
            }
            match until {
                Some(until) => {
                    let left = until.as_second().saturating_sub(now.as_second()).max(0) as u64;
                    format!(
                        "    {when}: {what}: {} {} left (until {})",
                        style.paint(YELLOW, "soaking,"),
                        duration::format(Duration::from_secs(left)),
                        clock(*until)
                    )
                }
                None => format!("    {when}: {what}: not reached yet"),
            }
        }
        TaskProgress::Approval {
            request,
            requested_at,
            approval,
            recorded,
            ..
        } => {
            let name = request.clone().unwrap_or_default();
            if let Some(a) = approval {
                let accepted = if *recorded {
                    ""
                } else {
                    " (the run has not taken it into account yet)"
                };
                return format!(
                    "    {when}: Approval {name}: {} at {}{accepted}",
                    style.paint(GREEN, &a.message),
                    clock(a.at)
                );
            }
            if *recorded {
                return format!(
                    "    {when}: Approval {name}: {}",
                    style.paint(GREEN, "approved")
                );
            }
            match requested_at {
                Some(at) => format!(
                    "    {when}: Approval {name}: {} since {} ({})\n      approve with: kubectl fleet approve {name}",
                    style.paint(YELLOW, "waiting for approval"),
                    clock(*at),
                    age(*at, now)
                ),
                None => format!("    {when}: Approval {name}: not reached yet"),
            }
        }
        TaskProgress::MetricCheck(m) => {
            let MetricCheckProgress {
                url,
                query,
                passes,
                threshold,
                last,
                next_check,
                reached,
                passed_at,
                ..
            } = m;
            let head = format!("    {when}: MetricCheck {query}\n      at {url}:");
            if let Some(at) = passed_at {
                return format!(
                    "{head} {} at {} ({passes}/{threshold} passes)",
                    style.paint(GREEN, "passed"),
                    clock(*at)
                );
            }
            if reached.is_none() {
                return format!("{head} not reached yet");
            }
            let last = match last {
                Some((MetricCheckResult::Pass, v)) => format!("last returned {v}"),
                Some((MetricCheckResult::NoData, _)) => style.paint(RED, "last returned no data"),
                Some((MetricCheckResult::Error, e)) => {
                    style.paint(RED, &format!("last failed: {e}"))
                }
                None => "not checked yet".to_string(),
            };
            let next =
                next_check.map_or(String::new(), |n| format!("; next check at {}", clock(n)));
            format!(
                "{head} {} {passes}/{threshold} passes; {last}{next}",
                style.paint(YELLOW, "checking,")
            )
        }
    }
}

/// `kubectl fleet run <name>`: the run's stages in order, each stage's clusters in order with
/// their state and times, the after-stage tasks, and why anything failed. `approvals` are the
/// run's ApprovalRequests.
pub fn run_detail(
    run: &UpdateRun,
    approvals: &[ApprovalRequest],
    now: Timestamp,
    style: Style,
) -> String {
    run_detail_listing(run, approvals, now, style, false)
}

/// A stage of more clusters than this lists only its clusters updating, failed or passed over
/// (at most this many), unless every cluster is asked for.
pub const LISTED_CLUSTERS: usize = 50;

/// [`run_detail`]; with `all`, every cluster of a large stage too.
pub fn run_detail_listing(
    run: &UpdateRun,
    approvals: &[ApprovalRequest],
    now: Timestamp,
    style: Style,
    all_clusters: bool,
) -> String {
    let mut out = String::new();
    let p = RunProgress::new(run, approvals);
    let _ = writeln!(
        out,
        "{} {}   {}",
        style.paint(BOLD, "UpdateRun"),
        style.paint(BOLD, &p.name),
        style.paint(run_colour(p.phase), p.phase.label())
    );
    let _ = writeln!(
        out,
        "  placement {}, resource snapshot {}, strategy {}",
        p.placement, p.index, p.strategy
    );
    if p.stop_requested && !p.phase.finished() {
        let _ = writeln!(
            out,
            "  spec.state is Stop: resume with: kubectl fleet resume {}",
            p.name
        );
    }
    if p.phase == RunPhase::Planned {
        let _ = writeln!(
            out,
            "  spec.state is Initialize (the plan below starts nothing): start it with: kubectl fleet resume {}",
            p.name
        );
    }
    if let Some(notice) = p.not_in_run_notice() {
        let _ = writeln!(out, "  {}", style.paint(YELLOW, &notice));
    }
    match (p.started, p.ended) {
        (Some(s), Some(e)) => {
            let _ = writeln!(out, "  ran {}", span(Some(s), Some(e)));
        }
        (Some(s), None) => {
            let _ = writeln!(out, "  started {s} ({} ago)", age(s, now));
        }
        _ => {}
    }
    if !p.message.is_empty() {
        let _ = writeln!(out, "  {}", p.message);
    }
    let (done, all) = p.counts();
    if all > 0 {
        let _ = writeln!(out, "  {done}/{all} clusters done");
    }
    let count = p.stages.len();
    for (i, stage) in p.stages.iter().enumerate() {
        let (word, colour) = stage_state(stage);
        let times = span(stage.started, stage.ended);
        let current = p.current_stage.as_deref() == Some(stage.name.as_str());
        let _ = writeln!(
            out,
            "\n{}",
            format!(
                "{}stage {}/{count} {}   {}  {}",
                if current { "▶ " } else { "  " },
                i + 1,
                style.paint(BOLD, &stage.name),
                style.paint(colour, word),
                times
            )
            .trim_end()
        );
        for task in &stage.before_tasks {
            let _ = writeln!(out, "{}", task_line(task, "before", now, style));
        }
        if stage.clusters.is_empty() {
            let _ = writeln!(out, "    (no clusters)");
        }
        list_clusters(&mut out, &p.name, &stage.clusters, all_clusters, style);
        for task in &stage.tasks {
            let _ = writeln!(out, "{}", task_line(task, "after", now, style));
        }
    }
    if let Some(del) = p.deletion.as_ref() {
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

/// Every cluster of a stage of at most [`LISTED_CLUSTERS`] (or with `all`); of a larger one,
/// its counts and the clusters that are neither pending nor succeeded.
fn list_clusters(
    out: &mut String,
    run: &str,
    clusters: &[ClusterProgress],
    all: bool,
    style: Style,
) {
    if all || clusters.len() <= LISTED_CLUSTERS {
        for c in clusters {
            let _ = writeln!(out, "{}", cluster_line(c, false, style));
        }
        return;
    }
    let counts = ClusterCounts::of_phases(clusters.iter().map(|c| c.phase));
    let _ = writeln!(
        out,
        "    {} clusters: {} succeeded, {} updating, {} failed, {} skipped, {} pending",
        counts.total,
        counts.succeeded,
        counts.updating,
        counts.failed,
        counts.skipped,
        counts.pending,
    );
    let notable: Vec<&ClusterProgress> = clusters
        .iter()
        .filter(|c| !matches!(c.phase, ClusterPhase::Pending | ClusterPhase::Succeeded))
        .collect();
    for c in notable.iter().take(LISTED_CLUSTERS) {
        let _ = writeln!(out, "{}", cluster_line(c, false, style));
    }
    let unlisted = clusters.len() - notable.len().min(LISTED_CLUSTERS);
    let _ = writeln!(
        out,
        "    ({unlisted} more not listed: kubectl fleet run {run} --all-clusters lists every one)"
    );
}

#[cfg(test)]
#[path = "render_tests.rs"]
mod tests;
