//! The Auto-updates page: every AutoUpdatePolicy with its versions, checks, what is in flight,
//! its circuit breaker and its history.

use serde::{Deserialize, Serialize};

use super::State;

/// The Auto-updates page.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
pub struct AutoUpdatesView {
    /// Every AutoUpdatePolicy, by name.
    pub policies: Vec<PolicyRow>,
}

/// One AutoUpdatePolicy.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct PolicyRow {
    /// Policy name.
    pub name: String,
    /// The hub object and container it updates, e.g. `Deployment web/web, container web`.
    pub target: String,
    /// The Placement that places the target.
    pub placement: String,
    /// The StagedUpdateStrategy new versions roll out with.
    pub strategy: String,
    /// The repository it watches; `None`: the target image's own.
    pub repository: Option<String>,
    /// The semver requirement versions must satisfy.
    pub constraint: String,
    /// The cron schedule, with its time zone when one is set.
    pub schedule: String,
    /// `Ready` (or `Suspended`), read from the Ready condition.
    pub ready: State,
    /// What the policy is doing: idle, applying, rolling out, rolling back, waiting.
    pub updating: State,
    /// The version running everywhere the placement reaches.
    pub current_version: Option<String>,
    /// The highest eligible version the last check found.
    pub available_version: Option<String>,
    /// When the registry was last checked, unix seconds.
    pub last_check: Option<i64>,
    /// When the next scheduled check is due, unix seconds.
    pub next_check: Option<i64>,
    /// The update or rollback in flight.
    pub in_flight: Option<InFlightView>,
    /// The circuit breaker: open (nothing is applied) or closed, with the hub's message.
    pub circuit: State,
    /// Whether the circuit is open.
    pub circuit_open: bool,
    /// Consecutive rollbacks so far.
    pub rollback_count: i32,
    /// Consecutive rollbacks that open the circuit.
    pub max_rollbacks: i32,
    /// Versions rolled back, never picked again.
    pub failed_versions: Vec<String>,
    /// A person asked for a check the hub has not acted on yet.
    pub check_requested: bool,
    /// A person asked for a reset the hub has not acted on yet.
    pub reset_requested: bool,
    /// The versions rolled out, newest first.
    pub history: Vec<HistoryRow>,
}

impl PolicyRow {
    /// Whether a reset would change anything: the circuit is open or rollbacks are counted.
    pub fn resettable(&self) -> bool {
        self.circuit_open || self.rollback_count > 0
    }
}

/// The update or rollback a policy has in flight.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct InFlightView {
    /// Its phase (applying, rolling out, rolling back).
    pub phase: State,
    /// The version being rolled out.
    pub version: String,
    /// The UpdateRun rolling it out, once created.
    pub run: Option<String>,
    /// The UpdateRun rolling it back, once created.
    pub rollback_run: Option<String>,
    /// When the update started, unix seconds.
    pub started: Option<i64>,
}

/// One version's rollout in a policy's history.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct HistoryRow {
    /// The version.
    pub version: String,
    /// How it ended: Healthy, Rolled back, Superseded.
    pub outcome: State,
    /// The UpdateRun that rolled it out (none for a version a person rolled out by hand).
    pub run: Option<String>,
    /// When its rollout started, unix seconds.
    pub started: Option<i64>,
    /// When it ended, unix seconds.
    pub ended: Option<i64>,
}
