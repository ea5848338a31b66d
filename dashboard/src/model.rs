//! What the pages show: plain data, built from hub objects on the server and sent to the
//! browser for hydration. Nothing here depends on kube (the wasm client cannot).

use serde::{Deserialize, Serialize};

mod auto_updates;
pub use auto_updates::*;

/// Who is signed in, and what the hub's RBAC lets them do (from SelfSubjectAccessReviews made
/// with their own token).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
pub struct Me {
    /// The user name the hub's TokenReview returned.
    pub user: String,
    /// The session's CSRF token, to put into every form that changes something.
    pub csrf: String,
    /// May patch `approvalrequests/status`.
    pub can_approve: bool,
    /// May patch `updateruns` (stop / resume).
    pub can_update_runs: bool,
    /// May create `updateruns`.
    pub can_create_runs: bool,
    /// May patch `autoupdatepolicies` (ask for a check, reset a circuit).
    pub can_update_policies: bool,
}

/// A status shown as a coloured badge that always carries a text label.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tone {
    /// Done, healthy.
    Good,
    /// In progress.
    Busy,
    /// Waiting for time or a person.
    Wait,
    /// Failed, unhealthy.
    Bad,
    /// Not started, unknown.
    Idle,
}

impl Tone {
    /// The CSS class of a badge in this tone.
    pub fn class(self) -> &'static str {
        match self {
            Tone::Good => "badge good",
            Tone::Busy => "badge busy",
            Tone::Wait => "badge wait",
            Tone::Bad => "badge bad",
            Tone::Idle => "badge idle",
        }
    }
}

/// A labelled state, e.g. ("Healthy", Good) or ("Failed", Bad), with the hub's explanation.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct State {
    /// Short label shown in the badge.
    pub label: String,
    /// Colour.
    pub tone: Tone,
    /// The hub's message, a sentence (may be empty).
    pub message: String,
}

impl State {
    /// A state with a label, tone and message.
    pub fn new(label: impl Into<String>, tone: Tone, message: impl Into<String>) -> Self {
        Self {
            label: label.into(),
            tone,
            message: message.into(),
        }
    }
}

/// The Fleet page.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
pub struct FleetView {
    /// Every MemberCluster, by name.
    pub members: Vec<MemberRow>,
}

/// One member cluster.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct MemberRow {
    /// MemberCluster name.
    pub name: String,
    /// Its labels, `key=value`.
    pub labels: Vec<String>,
    /// `Joined` condition.
    pub joined: State,
    /// `Healthy` condition.
    pub healthy: State,
    /// Last heartbeat, unix seconds.
    pub last_heartbeat: Option<i64>,
    /// Kubernetes version the agent reported.
    pub kubernetes_version: String,
    /// Agent version.
    pub agent_version: String,
    /// Node count.
    pub node_count: Option<i32>,
}

/// The Placements page.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
pub struct PlacementsView {
    /// Every placement, by name.
    pub placements: Vec<PlacementRow>,
    /// Names of the StagedUpdateStrategies a run can use.
    pub strategies: Vec<String>,
}

/// One placement.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct PlacementRow {
    /// Placement name.
    pub name: String,
    /// `RollingUpdate` or `External`.
    pub strategy_type: String,
    /// Latest snapshot index.
    pub latest_index: Option<i64>,
    /// Snapshot history, newest first.
    pub snapshots: Vec<SnapshotRow>,
    /// One row per selected cluster.
    pub clusters: Vec<PlacementClusterRow>,
    /// The strategy the newest run of this placement used, the default for a new run.
    pub last_strategy: Option<String>,
    /// The index a rollback goes to: the newest snapshot older than the one the newest run
    /// rolled out (or than the latest).
    pub rollback_index: Option<i64>,
}

/// One snapshot of a placement.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct SnapshotRow {
    /// Index.
    pub index: i64,
    /// Creation time, unix seconds.
    pub created: Option<i64>,
    /// Number of objects in it.
    pub object_count: i64,
}

/// Where one selected cluster stands for a placement.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct PlacementClusterRow {
    /// MemberCluster name.
    pub cluster: String,
    /// The snapshot index the cluster should run (its Binding).
    pub target_index: Option<i64>,
    /// The index the member last applied.
    pub applied_index: Option<i64>,
    /// `Applied` as the member reported it.
    pub applied: State,
    /// `Available` as the member reported it.
    pub available: State,
    /// Whether the member's objects match the hub's (`Drifted`, `Differs`, `Takeover refused`,
    /// `In sync`), with the objects and fields in the message.
    pub drift: State,
    /// Which overrides change what this cluster gets, and where to see it.
    pub overrides: OverridesView,
}

/// Which overrides change what one cluster gets from a placement (its Binding's `Overridden`
/// condition), with a link to the page showing exactly what it gets.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct OverridesView {
    /// `None`, `Overridden`, `Override failed` or `Unknown`, with the hub's sentence.
    pub state: State,
    /// The override snapshots that changed it, in the order they applied.
    pub snapshots: Vec<String>,
    /// The page rendering what the cluster gets, with a diff against the hub's template.
    pub render: String,
}

/// The Runs page.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
pub struct RunsView {
    /// Every run, newest first.
    pub runs: Vec<RunRow>,
}

/// One run in the list.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct RunRow {
    /// UpdateRun name.
    pub name: String,
    /// Placement.
    pub placement: String,
    /// Snapshot index it rolls out.
    pub index: String,
    /// Strategy name.
    pub strategy: String,
    /// Overall state.
    pub state: State,
    /// Current stage.
    pub current_stage: String,
    /// Clusters done / total.
    pub done: usize,
    /// Clusters in the plan.
    pub total: usize,
    /// Creation time, unix seconds.
    pub created: Option<i64>,
}

/// The page of one run.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct RunView {
    /// The run's summary.
    pub row: RunRow,
    /// Whether the run is stopped by a person (`spec.state: Stop`).
    pub stopped: bool,
    /// Whether the run is only planned (`spec.state: Initialize`): starting it sets Run.
    pub planned: bool,
    /// Clusters the placement selects that the run does not include, in a sentence.
    pub notice: Option<String>,
    /// Whether the run is over (succeeded or failed).
    pub finished: bool,
    /// Start time, unix seconds.
    pub started: Option<i64>,
    /// End time, unix seconds.
    pub ended: Option<i64>,
    /// Why the run is not moving, in plain words (failures, stops), if it is not.
    pub problems: Vec<String>,
    /// Which clusters the page shows.
    pub query: RunQuery,
    /// Stages in order, then the deletion stage if any.
    pub stages: Vec<StageView>,
}

/// One stage of a run.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct StageView {
    /// Stage name.
    pub name: String,
    /// Its state.
    pub state: State,
    /// Start, clusters-completed and end times, unix seconds.
    pub started: Option<i64>,
    /// When its clusters were all done.
    pub clusters_completed: Option<i64>,
    /// End time.
    pub ended: Option<i64>,
    /// Its clusters counted by state.
    pub counts: StageCounts,
    /// How many of its clusters match the page's search (all of them without one).
    pub matching: usize,
    /// Which page of the matching clusters is shown (0-based; [`RUN_PAGE_ROWS`] a page).
    pub page: usize,
    /// Whether its clusters are shown expanded: a small stage, the stage in progress, the stage
    /// being paged, or any stage during a search.
    pub open: bool,
    /// The shown page of its clusters (those matching the search), in update order.
    pub clusters: Vec<ClusterView>,
    /// Before-stage tasks: the clusters start once they passed.
    pub before_tasks: Vec<TaskView>,
    /// After-stage tasks.
    pub tasks: Vec<TaskView>,
}

/// How many clusters of a run page's stage are shown at once.
pub const RUN_PAGE_ROWS: usize = 50;

/// Which clusters a run's page shows: those whose name contains `search`, and of stage
/// `stage` the page `page` (the other stages show their first page). From the page's query
/// (`?q=edge-12&stage=production&page=3`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct RunQuery {
    /// Part of a cluster's name; empty: every cluster.
    pub search: String,
    /// The stage being paged.
    pub stage: String,
    /// Its page, 0-based.
    pub page: usize,
}

impl RunQuery {
    /// The page's link for `page` of `stage`, keeping the search.
    pub fn link(&self, run: &str, stage: &str, page: usize) -> String {
        let mut link = format!("/runs/{run}?stage={}&page={page}", url_encode(stage));
        if !self.search.is_empty() {
            link.push_str(&format!("&q={}", url_encode(&self.search)));
        }
        link
    }
}

/// What a query parameter value keeps unencoded: RFC 3986's unreserved characters and `/`, so
/// a path stays readable (`/login?next=/runs/r1`).
const QUERY_VALUE: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~')
    .remove(b'/');

/// Percent-encodes a query parameter value.
pub fn url_encode(s: &str) -> String {
    percent_encoding::utf8_percent_encode(s, QUERY_VALUE).to_string()
}

/// A stage's clusters counted by state.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct StageCounts {
    /// All of them.
    pub total: usize,
    /// Not started.
    pub pending: usize,
    /// Updating.
    pub updating: usize,
    /// Done.
    pub succeeded: usize,
    /// Failed.
    pub failed: usize,
    /// Passed over.
    pub skipped: usize,
}

impl StageCounts {
    /// "3333 clusters: 800 succeeded · 833 updating · 1700 pending" (states with none left out).
    pub fn sentence(&self) -> String {
        let parts: Vec<String> = [
            (self.succeeded, "succeeded"),
            (self.updating, "updating"),
            (self.failed, "failed"),
            (self.skipped, "skipped"),
            (self.pending, "pending"),
        ]
        .into_iter()
        .filter(|(n, _)| *n > 0)
        .map(|(n, what)| format!("{n} {what}"))
        .collect();
        let clusters = if self.total == 1 {
            "cluster"
        } else {
            "clusters"
        };
        if parts.is_empty() {
            format!("{} {clusters}", self.total)
        } else {
            format!("{} {clusters}: {}", self.total, parts.join(" · "))
        }
    }
}

/// One cluster of a stage.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct ClusterView {
    /// Its place in the stage's update order, 1-based.
    pub order: usize,
    /// MemberCluster name.
    pub name: String,
    /// Its state in this run.
    pub state: State,
    /// Start time, unix seconds.
    pub started: Option<i64>,
    /// End time, unix seconds.
    pub ended: Option<i64>,
    /// Set when objects on this cluster differ from the hub's and are left so.
    #[serde(default)]
    pub drift: Option<State>,
    /// Which overrides change what the cluster gets (none for the clean-up stage's clusters).
    #[serde(default)]
    pub overrides: Option<OverridesView>,
}

/// An after-stage task.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub enum TaskView {
    /// A soak timer.
    TimedWait {
        /// The configured wait, e.g. `15s`.
        wait: String,
        /// When it ends, unix seconds (known once the stage's clusters are done).
        until: Option<i64>,
        /// Whether the time has elapsed.
        elapsed: bool,
        /// While the soak is paused because a cluster of the run regressed: why.
        #[serde(default)]
        paused: Option<String>,
    },
    /// A human approval.
    Approval {
        /// The ApprovalRequest's name, once created.
        request: Option<String>,
        /// Whether a person approved it (`Approved=True` on the ApprovalRequest).
        approved: bool,
        /// Who approved, when the condition's message says so ("approved by alice: …", as
        /// the dashboard and `kubectl fleet approve` write it; a hand-written kubectl patch
        /// may not).
        approved_by: Option<String>,
        /// The approver's note: the rest of the message, or all of it when it names no one.
        note: Option<String>,
        /// When it was approved, unix seconds.
        approved_at: Option<i64>,
        /// Whether the run has seen the approval.
        accepted: bool,
        /// Whether the request exists and waits for a person.
        pending: bool,
    },
    /// A Prometheus query that must pass several checks in a row.
    MetricCheck(MetricCheckView),
}

/// A metric gate, as the run page shows it.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct MetricCheckView {
    /// The Prometheus base URL.
    pub url: String,
    /// The query as sent.
    pub query: String,
    /// Consecutive passes so far.
    pub passes: i32,
    /// Consecutive passes needed.
    pub threshold: i32,
    /// The last check's value (or what went wrong), and whether it passed.
    pub last: Option<(String, bool)>,
    /// When the next check is due, unix seconds.
    pub next_check: Option<i64>,
    /// Whether the gate was reached.
    pub reached: bool,
    /// Whether it passed.
    pub passed: bool,
    /// What the run says about it.
    pub message: String,
}

/// The Approvals page: pending requests across all runs.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
pub struct ApprovalsView {
    /// Requests without `Approved=True`, oldest first.
    pub pending: Vec<ApprovalRow>,
}

/// One ApprovalRequest.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct ApprovalRow {
    /// ApprovalRequest name.
    pub name: String,
    /// The run it gates.
    pub run: String,
    /// The stage whose completion it gates.
    pub stage: String,
    /// Creation time, unix seconds.
    pub created: Option<i64>,
    /// Who approved, if someone did.
    pub approved_by: Option<String>,
    /// Under an approval policy: who approved so far, and how many it needs.
    #[serde(default)]
    pub approvals: Vec<String>,
    /// How many distinct approvals its policy needs (None: no policy).
    #[serde(default)]
    pub needed: Option<u32>,
}

impl ApprovalRow {
    /// "1 of 2 approvals: alice", under an approval policy.
    pub fn progress(&self) -> Option<String> {
        let needed = self.needed?;
        let mut s = format!("{} of {needed} approvals", self.approvals.len());
        if !self.approvals.is_empty() {
            s.push_str(&format!(": {}", self.approvals.join(", ")));
        }
        Some(s)
    }
}

/// "12s ago", "3m ago", "2h ago": the age of `then` at `now` (unix seconds).
pub fn age(then: Option<i64>, now: i64) -> String {
    match then {
        None => "never".into(),
        Some(t) => {
            let s = (now - t).max(0);
            if s < 60 {
                format!("{s}s ago")
            } else if s < 3600 {
                format!("{}m {}s ago", s / 60, s % 60)
            } else if s < 86400 {
                format!("{}h {}m ago", s / 3600, (s % 3600) / 60)
            } else {
                format!("{}d ago", s / 86400)
            }
        }
    }
}

/// A countdown: "1m 05s left", or "due" when it has passed.
pub fn countdown(until: i64, now: i64) -> String {
    let s = until - now;
    if s <= 0 {
        "due now".into()
    } else if s < 60 {
        format!("{s}s left")
    } else {
        format!("{}m {:02}s left", s / 60, s % 60)
    }
}

/// A UTC wall-clock time `HH:MM:SS` for unix seconds (dates are not needed during a rollout;
/// the full timestamp is in the element's title).
pub fn clock(t: Option<i64>) -> String {
    match t {
        None => "—".into(),
        Some(t) => {
            let d = t.rem_euclid(86400);
            format!("{:02}:{:02}:{:02}", d / 3600, (d % 3600) / 60, d % 60)
        }
    }
}

/// Now, unix seconds: the server's clock when rendering, the browser's when hydrated.
pub fn now_unix() -> i64 {
    #[cfg(feature = "hydrate")]
    {
        (js_sys::Date::now() / 1000.0) as i64
    }
    #[cfg(not(feature = "hydrate"))]
    {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs() as i64)
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_and_countdowns_read_naturally() {
        assert_eq!(age(None, 100), "never");
        assert_eq!(age(Some(95), 100), "5s ago");
        assert_eq!(age(Some(0), 125), "2m 5s ago");
        assert_eq!(age(Some(0), 7300), "2h 1m ago");
        assert_eq!(age(Some(200), 100), "0s ago");
        assert_eq!(countdown(100, 100), "due now");
        assert_eq!(countdown(130, 100), "30s left");
        assert_eq!(countdown(165, 100), "1m 05s left");
        assert_eq!(clock(Some(3600 + 61)), "01:01:01");
        assert_eq!(clock(None), "—");
    }
}
