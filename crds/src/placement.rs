//! `Placement`: what goes where, and how new versions roll out.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector};
#[allow(unused_imports)]
use kube::core::{ListMerge, Rule};
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub use crate::work::{APPLIED, AVAILABLE};

/// Condition type (placement and per cluster): the clusters are selected.
pub const SCHEDULED: &str = "Scheduled";
/// Condition type: the latest snapshot holds the selected objects as they are now.
pub const RESOURCES_SNAPSHOTTED: &str = "ResourcesSnapshotted";
/// Condition type (per cluster): the cluster's Binding is Bound to a snapshot.
pub const ROLLOUT_STARTED: &str = "RolloutStarted";

/// Snapshots kept when `spec.revisionHistoryLimit` is not set.
pub const DEFAULT_REVISION_HISTORY_LIMIT: usize = 10;

/// Reasons the placement controller writes on a Placement's conditions.
pub mod reason {
    pub use crate::binding::reason::MEMBER_REPORTED;

    /// `Scheduled=False`: a resource selector names something the hub cannot snapshot.
    pub const INVALID_RESOURCE_SELECTOR: &str = "InvalidResourceSelector";
    /// `Scheduled=False`: the cluster policy cannot be evaluated.
    pub const INVALID_POLICY: &str = "InvalidPolicy";
    /// `Scheduled=True`: every cluster the policy asks for is selected.
    pub const SCHEDULING_POLICY_FULFILLED: &str = "SchedulingPolicyFulfilled";
    /// `Scheduled=False`: clusters the policy names have not joined or do not exist.
    pub const CLUSTERS_UNAVAILABLE: &str = "ClustersUnavailable";
    /// `ResourcesSnapshotted=True`.
    pub const SNAPSHOTTED: &str = "Snapshotted";
    /// `ResourcesSnapshotted=False`: a selected object does not fit in a snapshot part.
    pub const OBJECT_TOO_LARGE: &str = "ObjectTooLarge";
    /// A cluster's `Scheduled=True`.
    pub const CLUSTER_SCHEDULED: &str = "Scheduled";
    /// A cluster's `RolloutStarted=True`.
    pub const ROLLOUT_STARTED: &str = "RolloutStarted";
    /// A cluster's `RolloutStarted=False`.
    pub const ROLLOUT_NOT_STARTED: &str = "RolloutNotStarted";
    /// A cluster's `Applied`/`Available=False`: no (good) report yet.
    pub const NOT_YET: &str = "NotYet";
    /// `Applied=True`: every selected cluster applied its Work.
    pub const ALL_APPLIED: &str = "AllApplied";
    /// `Applied=False`.
    pub const NOT_ALL_APPLIED: &str = "NotAllApplied";
    /// `Available=True`: every selected cluster runs the latest snapshot and is available.
    pub const ALL_AVAILABLE: &str = "AllAvailable";
    /// `Available=False`.
    pub const NOT_ALL_AVAILABLE: &str = "NotAllAvailable";
}

/// Selects hub objects to place on member clusters: `PickAll` selected clusters receive every
/// object these selectors match (a Namespace brings everything in it along).
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "fleethub.dev",
    version = "v1alpha1",
    kind = "Placement",
    plural = "placements",
    shortname = "pl",
    category = "fleethub",
    status = "PlacementStatus",
    derive = "Default",
    derive = "PartialEq",
    doc = "What goes where: hub objects selected by resourceSelectors are placed on the member clusters the policy selects, rolled out by strategy.",
    validation = Rule::new("self.metadata.name.size() <= 63 && self.metadata.name.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$')").message("metadata.name must be a DNS label of at most 63 characters (it is used as a label value)"),
    printcolumn(name = "Strategy", type_ = "string", json_path = ".spec.strategy.type"),
    printcolumn(name = "Clusters", type_ = "integer", json_path = ".status.selectedClusterCount"),
    printcolumn(name = "Latest-Index", type_ = "integer", json_path = ".status.latestResourceSnapshotIndex"),
    printcolumn(name = "Available", type_ = "string", json_path = ".status.conditions[?(@.type==\"Available\")].status"),
    printcolumn(name = "Drifted", type_ = "integer", json_path = ".status.driftedClusterCount"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("!(has(oldSelf.strategy) && has(oldSelf.strategy.type) && oldSelf.strategy.type == 'External') || (has(self.strategy) && has(self.strategy.type) && self.strategy.type == 'External')").message("spec.strategy.type cannot change from External: UpdateRuns roll this placement out, and switching would let the hub move every cluster at once, past their gates; delete and re-create the Placement to roll it out another way"))]
pub struct PlacementSpec {
    /// The hub objects to place. A Namespace selector brings the namespace and everything in it.
    #[schemars(length(min = 1, max = 100))]
    pub resource_selectors: Vec<ResourceSelector>,
    /// Which member clusters receive the objects (default: every joined cluster).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<PlacementPolicy>,
    /// How a new version of the objects reaches the selected clusters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strategy: Option<RolloutStrategy>,
    /// How many ResourceSnapshots to keep (default 10). A snapshot an active UpdateRun points at
    /// is never deleted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 1000))]
    pub revision_history_limit: Option<i32>,
}

/// Selects hub objects of one kind, by name or by labels (or all of that kind when neither is
/// given).
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("!(has(self.name) && has(self.labelSelector))").message("name and labelSelector are mutually exclusive: select by one or the other"))]
pub struct ResourceSelector {
    /// API group of the objects ("" for the core group).
    #[serde(default)]
    #[schemars(length(max = 253))]
    pub group: String,
    /// API version of the objects, e.g. `v1`.
    #[schemars(length(min = 1, max = 63))]
    pub version: String,
    /// Kind of the objects, e.g. `Namespace` or `ClusterRole`.
    #[schemars(length(min = 1, max = 63))]
    pub kind: String,
    /// Name of the one object to select.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub name: Option<String>,
    /// Labels the selected objects carry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label_selector: Option<LabelSelector>,
}

/// How member clusters are picked.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum PlacementType {
    /// Every joined member cluster (optionally only those matching clusterSelector).
    #[default]
    PickAll,
    /// Exactly the clusters named in clusterNames.
    PickFixed,
}

/// Which member clusters receive a placement's objects.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("self.placementType == 'PickFixed' ? (has(self.clusterNames) && size(self.clusterNames) > 0) : !has(self.clusterNames)").message("clusterNames is required (non-empty) when placementType is PickFixed, and forbidden otherwise"))]
#[x_kube(validation = Rule::new("!(self.placementType == 'PickFixed' && has(self.clusterSelector))").message("clusterSelector cannot be combined with placementType PickFixed"))]
pub struct PlacementPolicy {
    /// `PickAll` (default) or `PickFixed`.
    #[serde(default)]
    pub placement_type: PlacementType,
    /// With PickAll: only clusters whose labels match.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_selector: Option<LabelSelector>,
    /// With PickFixed: the MemberCluster names.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 1000), inner(length(min = 1, max = 50)))]
    pub cluster_names: Option<Vec<String>>,
}

/// How a placement's new versions reach its clusters.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum RolloutStrategyType {
    /// The hub moves every selected cluster to the latest snapshot itself.
    #[default]
    RollingUpdate,
    /// Only UpdateRuns move clusters to a new snapshot.
    External,
}

/// The rollout strategy of a placement.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RolloutStrategy {
    /// `RollingUpdate` (default) or `External` (use UpdateRuns).
    #[serde(default, rename = "type")]
    pub type_: RolloutStrategyType,
    /// How the member agents apply the objects, and what they do and report when a member's
    /// object differs from the hub's (drift, takeover, report-only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub apply_strategy: Option<crate::apply_strategy::ApplyStrategy>,
}

/// Observed state of a placement.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PlacementStatus {
    /// `Scheduled`, `RolloutStarted`, `Applied`, `Available`, `Drifted`, rolled up over the
    /// clusters.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[x_kube(merge_strategy = ListMerge::Map(vec!["type".into()]))]
    pub conditions: Vec<Condition>,
    /// The generation of the spec this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// The index of the newest ResourceSnapshot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latest_resource_snapshot_index: Option<i64>,
    /// How many clusters the policy selects.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selected_cluster_count: Option<i32>,
    /// How many selected clusters have objects that differ from the hub's and are left so.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drifted_cluster_count: Option<i32>,
    /// Per selected cluster: which snapshot it runs and how that is going. Every cluster while
    /// the placement selects at most 100; beyond that only the clusters that need attention (not
    /// at the latest snapshot, not applied or available, or drifted), at most 100, so the
    /// status stays far below etcd's object size limit at any fleet size. Each cluster's
    /// Binding has its full detail.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[x_kube(merge_strategy = ListMerge::Map(vec!["clusterName".into()]))]
    pub placement_statuses: Vec<ClusterPlacementStatus>,
    /// How many selected clusters `placementStatuses` leaves out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub omitted_placement_status_count: Option<i32>,
}

/// The most clusters a Placement's `status.placementStatuses` lists.
pub const MAX_PLACEMENT_STATUSES: usize = 100;

/// One cluster's view of a placement.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ClusterPlacementStatus {
    /// The MemberCluster.
    pub cluster_name: String,
    /// The snapshot index the cluster is bound to, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_snapshot_index: Option<i64>,
    /// `Scheduled`, `RolloutStarted`, `Applied`, `Available`, `Drifted` for this cluster.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[x_kube(merge_strategy = ListMerge::Map(vec!["type".into()]))]
    pub conditions: Vec<Condition>,
    /// The first objects on this cluster that differ from the hub's (at most 5; the Binding
    /// lists more, `kubectl fleet drift` all).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub drifted_objects: Vec<crate::drift::DriftedObject>,
    /// How many objects on this cluster differ in all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drifted_object_count: Option<i32>,
}
