//! The fleet's versions as metrics: which resource snapshot each selected cluster of each
//! placement runs (`fleethub_hub_cluster_snapshot`), which image of an AutoUpdatePolicy's target
//! that snapshot holds (`fleethub_hub_cluster_version_info`), each placement's newest snapshot
//! (`fleethub_hub_placement_latest_snapshot`), and how clusters moved from one snapshot to another
//! (`fleethub_hub_cluster_transitions_total`).
//!
//! The placement controller feeds [`FleetVersions`] on each reconcile from the placement's
//! Bindings: every selected cluster, not the at most 100 its `status.placementStatuses` lists on
//! a large fleet. The pure [`State`] says which series change, and only those are written: a
//! reconcile of a 10,000-cluster placement in which no cluster moved costs one hash lookup per
//! cluster and writes nothing.
//!
//! Only the leader exports these; they go with the other fleet gauges when it stops leading. The
//! transitions are counted from what this process saw: a new leader counts a move its member has
//! not applied yet when it ends, not one already applied and waiting to become available.
//!
//! Cardinality: `cluster_snapshot` has one series per selected cluster and placement (10,000
//! clusters in 3 placements: 30,000), `cluster_version_info` one more per such cluster and
//! AutoUpdatePolicy of its placement, `placement_latest_snapshot` one per placement. The
//! transitions' `from` and `to` are snapshot indexes, whose values grow with every snapshot cut,
//! so each placement keeps at most [`MAX_TRANSITION_SERIES`] of them. Series of placements,
//! clusters and policies that go away are removed.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use jiff::Timestamp;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

mod state;

pub use state::State;

/// Transition series kept per placement: the least recently counted one is dropped beyond this.
/// A placement moves through a few snapshots a day; 64 (from, to, outcome) series hold weeks of
/// a hub process's moves while bounding what a placement rolled back and forth for long costs.
pub const MAX_TRANSITION_SERIES: usize = 64;

/// The `from` label of a cluster's first snapshot (it ran none of the placement's before).
pub const FROM_NONE: &str = "none";

/// How much earlier than this process saw it a Binding may have been pointed at a snapshot: a
/// run counts a cluster's health timeout from its start as stored (whole seconds), before it
/// writes the Binding, and rolls the cluster back a moment after it failed it. A move not
/// available this long before its health timeout is over, as this process times it, failed.
pub const SEEN_LATE_BY: Duration = Duration::from_secs(5);

/// Labels of one cluster of one placement.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ClusterLabels {
    /// The Placement.
    pub placement: String,
    /// The MemberCluster.
    pub cluster: String,
}

/// Labels of what one cluster runs of one AutoUpdatePolicy's target.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct VersionInfoLabels {
    /// The Placement.
    pub placement: String,
    /// The MemberCluster.
    pub cluster: String,
    /// The AutoUpdatePolicy whose target this is.
    pub policy: String,
    /// The resource snapshot index the cluster runs.
    pub snapshot: String,
    /// The target container's image in that snapshot; empty when the snapshot no longer exists
    /// (pruned from the history) or does not hold the target.
    pub image: String,
}

/// Labels naming a placement.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PlacementLabels {
    /// The Placement.
    pub placement: String,
}

/// Labels of a cluster's move from one snapshot to another.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TransitionLabels {
    /// The Placement.
    pub placement: String,
    /// The snapshot index the cluster ran when its Binding was pointed elsewhere ([`FROM_NONE`]
    /// for its first).
    pub from: String,
    /// The snapshot index its Binding was pointed at.
    pub to: String,
    /// How the move ended ([`Outcome::as_str`]).
    pub outcome: &'static str,
}

/// How a cluster's move to a snapshot ended.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum Outcome {
    /// Its member applied the snapshot and reported it available.
    Available,
    /// As an UpdateRun judges a failed cluster: its member could not apply the snapshot (or its
    /// overrides could not be applied), or it was not available within its health timeout
    /// (counted from when this process saw the Binding pointed there, less [`SEEN_LATE_BY`]).
    Failed,
    /// Its Binding was pointed at another snapshot before either (a newer run took over, a
    /// rollback run returned it, a person changed it).
    Superseded,
}

impl Outcome {
    /// The `outcome` label.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Available => "available",
            Outcome::Failed => "failed",
            Outcome::Superseded => "superseded",
        }
    }
}

/// One selected cluster of a placement, as its Binding shows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClusterReading<'a> {
    /// The MemberCluster.
    pub cluster: &'a str,
    /// The snapshot index its member last applied (the Binding's
    /// `status.appliedResourceSnapshotIndex`): what it runs.
    pub running: Option<i64>,
    /// The snapshot index the Binding points it at (None while it is only Scheduled).
    pub bound: Option<i64>,
    /// The overrides cannot be applied for the snapshot it is bound to (`Overridden=False`).
    pub overrides_failed: bool,
    /// How long the member may take to make the snapshot available (the Binding's
    /// `spec.healthTimeout`, a run's; unset: the agent's default).
    pub health_timeout: Option<&'a str>,
}

/// An AutoUpdatePolicy of a placement.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PolicyTarget {
    /// The policy's name.
    pub policy: String,
    /// What it updates (kind, namespace, name, container), so that images are looked up again
    /// when that changes.
    pub target: String,
}

/// Series to write, in order: what one change of [`State`] means for the families.
#[derive(Debug, Default, PartialEq)]
pub struct Changes {
    /// `cluster_snapshot` series to set (Some) or remove (None).
    pub snapshots: Vec<(ClusterLabels, Option<i64>)>,
    /// `cluster_version_info` series to add (true) or remove (false).
    pub info: Vec<(VersionInfoLabels, bool)>,
    /// `placement_latest_snapshot` series to set (Some) or remove (None).
    pub latest: Vec<(PlacementLabels, Option<i64>)>,
    /// `cluster_transitions` series to increment (true) or remove (false).
    pub transitions: Vec<(TransitionLabels, bool)>,
}

/// The fleet-version metrics and what they know (see the module's documentation).
#[derive(Clone, Debug, Default)]
pub struct FleetVersions {
    cluster_snapshot: Family<ClusterLabels, Gauge>,
    version_info: Family<VersionInfoLabels, Gauge>,
    latest_snapshot: Family<PlacementLabels, Gauge>,
    transitions: Family<TransitionLabels, Counter>,
    state: Arc<Mutex<State>>,
}

impl FleetVersions {
    pub(super) fn register(&self, registry: &mut Registry) {
        registry.register(
            "cluster_snapshot",
            "The resource snapshot index each selected cluster of each placement runs (its member last applied), from the placement's Bindings (leader only)",
            self.cluster_snapshot.clone(),
        );
        registry.register(
            "cluster_version_info",
            "1 per selected cluster of a placement with an AutoUpdatePolicy, labelled with the snapshot it runs and the policy target's image in it (leader only)",
            self.version_info.clone(),
        );
        registry.register(
            "placement_latest_snapshot",
            "Each placement's newest resource snapshot index (leader only)",
            self.latest_snapshot.clone(),
        );
        registry.register(
            "cluster_transitions",
            "Clusters that moved from one resource snapshot to another, by how the move ended (available, failed, superseded)",
            self.transitions.clone(),
        );
    }

    /// Drops every series (this process stopped leading).
    pub(super) fn forget(&self) {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        *state = State::default();
        self.cluster_snapshot.clear();
        self.version_info.clear();
        self.latest_snapshot.clear();
        self.transitions.clear();
    }

    /// Changes the state with `change` and writes the series that changed. The series are written
    /// under the state's lock, so that they always describe the state.
    fn update(&self, change: impl FnOnce(&mut State) -> Changes) {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let changes = change(&mut state);
        for (labels, value) in changes.snapshots {
            match value {
                Some(v) => {
                    self.cluster_snapshot.get_or_create(&labels).set(v);
                }
                None => {
                    self.cluster_snapshot.remove(&labels);
                }
            }
        }
        for (labels, add) in changes.info {
            if add {
                self.version_info.get_or_create(&labels).set(1);
            } else {
                self.version_info.remove(&labels);
            }
        }
        for (labels, value) in changes.latest {
            match value {
                Some(v) => {
                    self.latest_snapshot.get_or_create(&labels).set(v);
                }
                None => {
                    self.latest_snapshot.remove(&labels);
                }
            }
        }
        for (labels, count) in changes.transitions {
            if count {
                self.transitions.get_or_create(&labels).inc();
            } else {
                self.transitions.remove(&labels);
            }
        }
    }

    /// See [`State::observe`].
    pub fn observe<'a>(
        &self,
        placement: &str,
        readings: impl IntoIterator<Item = ClusterReading<'a>>,
        now: Timestamp,
        verdict: impl Fn(&ClusterReading<'a>, i64) -> Option<Outcome>,
    ) {
        self.update(|s| s.observe(placement, readings, now, verdict));
    }

    /// See [`State::set_latest`].
    pub fn set_latest(&self, placement: &str, latest: Option<i64>) {
        self.update(|s| s.set_latest(placement, latest));
    }

    /// See [`State::set_policies`].
    pub fn set_policies(&self, placement: &str, policies: &[PolicyTarget]) {
        self.update(|s| s.set_policies(placement, policies));
    }

    /// See [`State::images_wanted`].
    pub fn images_wanted(&self, placement: &str) -> Vec<(String, i64)> {
        self.state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .images_wanted(placement)
    }

    /// See [`State::set_image`].
    pub fn set_image(&self, placement: &str, policy: &str, index: i64, image: Option<String>) {
        self.update(|s| s.set_image(placement, policy, index, image));
    }

    /// See [`State::forget_placement`].
    pub fn forget_placement(&self, placement: &str) {
        self.update(|s| s.forget_placement(placement));
    }

    /// See [`State::retain_placements`].
    pub fn retain_placements(&self, keep: impl Fn(&str) -> bool) {
        self.update(|s| s.retain_placements(keep));
    }
}
