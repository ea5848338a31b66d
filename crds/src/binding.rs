//! `Binding`: which snapshot of a placement one member cluster should run.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
#[allow(unused_imports)]
use kube::core::{ListMerge, Rule};
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub use crate::work::{APPLIED, AVAILABLE};

/// Condition type: the Work carries the snapshot the binding points at.
pub const WORK_SYNCHRONIZED: &str = "WorkSynchronized";
/// Condition type: the overrides the binding names were applied to its Work.
pub const OVERRIDDEN: &str = "Overridden";

/// Reasons the work generator writes on a Binding's conditions.
pub mod reason {
    /// `WorkSynchronized=True`.
    pub const WORK_SYNCHRONIZED: &str = "WorkSynchronized";
    /// `WorkSynchronized=False`: the binding is Scheduled, no snapshot is bound yet.
    pub const SCHEDULED: &str = "Scheduled";
    /// `WorkSynchronized=False`: the snapshot the binding points at does not exist.
    pub const SNAPSHOT_NOT_FOUND: &str = "SnapshotNotFound";
    /// `WorkSynchronized=False`: the member's namespace on the hub does not exist (yet).
    pub const MEMBER_NAMESPACE_MISSING: &str = "MemberNamespaceMissing";
    /// `WorkSynchronized=False`: the cluster is no longer selected; its Work is removed.
    pub const UNSCHEDULED: &str = "Unscheduled";
    /// `Applied`/`Available=True` as the member reported it.
    pub const MEMBER_REPORTED: &str = "MemberReported";
    /// `Applied`/`Available=False` as the member reported it.
    pub const MEMBER_REPORTED_NOT_READY: &str = "MemberReportedNotReady";
    /// `Applied`/`Available=False`: the member has not reported on the current Work yet.
    pub const NOT_REPORTED: &str = "NotReported";
    /// `Overridden=True`: no override changes what this cluster gets.
    pub const NO_OVERRIDE_SPECIFIED: &str = "NoOverrideSpecified";
    /// `Overridden=True`: overrides changed what this cluster gets (the message names them).
    pub const OVERRIDDEN_SUCCEEDED: &str = "OverriddenSucceeded";
    /// `Overridden=False`: an override rule cannot be applied for this cluster (the message names
    /// the override, the rule and the path); nothing is written to the cluster's Work.
    pub const OVERRIDDEN_FAILED: &str = "OverriddenFailed";
}

/// Binds one Placement to one member cluster, named `<placement>-<cluster>`. Pointing it at a
/// resource snapshot index is how a cluster is moved to a version; its status rolls up what the
/// member reported.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "fleethub.dev",
    version = "v1alpha1",
    kind = "Binding",
    plural = "bindings",
    shortname = "fbinding",
    category = "fleethub",
    status = "BindingStatus",
    derive = "Default",
    derive = "PartialEq",
    doc = "Which snapshot of a Placement one member cluster should run.",
    selectable = ".spec.placementName",
    selectable = ".spec.targetCluster",
    printcolumn(
        name = "Placement",
        type_ = "string",
        json_path = ".spec.placementName"
    ),
    printcolumn(name = "Cluster", type_ = "string", json_path = ".spec.targetCluster"),
    printcolumn(name = "State", type_ = "string", json_path = ".spec.state"),
    printcolumn(
        name = "Index",
        type_ = "string",
        json_path = ".spec.resourceSnapshotIndex"
    ),
    printcolumn(
        name = "Available",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Available\")].status"
    ),
    printcolumn(
        name = "Drifted",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Drifted\")].status"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("self.state != 'Bound' || has(self.resourceSnapshotIndex)").message("resourceSnapshotIndex is required when state is Bound"))]
pub struct BindingSpec {
    /// The Placement being bound.
    #[x_kube(validation = Rule::new("self == oldSelf").message("placementName is immutable"))]
    #[schemars(length(min = 1, max = 63))]
    pub placement_name: String,
    /// The MemberCluster being bound to.
    #[x_kube(validation = Rule::new("self == oldSelf").message("targetCluster is immutable"))]
    #[schemars(length(min = 1, max = 50))]
    pub target_cluster: String,
    /// `Scheduled` (selected, not yet rolled out), `Bound` (should run resourceSnapshotIndex),
    /// `Unscheduled` (no longer selected; its objects are to be removed).
    pub state: BindingState,
    /// The resource snapshot index the cluster should run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub resource_snapshot_index: Option<i64>,
    /// The UpdateRun that last set resourceSnapshotIndex, if one did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 63))]
    pub update_run_name: Option<String>,
    /// How long the member may take to make the snapshot's workloads available (the run's
    /// `healthTimeout`, carried to the Work); unset means the agent's default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(min = 2, max = 20),
        regex(pattern = crate::duration::DURATION_PATTERN)
    )]
    #[x_kube(validation = Rule::new("duration(self) > duration('0s')").message("healthTimeout must be longer than 0s"))]
    pub health_timeout: Option<String>,
    /// The ClusterResourceOverrideSnapshots applied to the Work, by name (set with the
    /// snapshot index: a run's are fixed when it starts).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 100))]
    pub cluster_resource_override_snapshots: Vec<String>,
    /// The ResourceOverrideSnapshots applied to the Work.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 100))]
    pub resource_override_snapshots: Vec<NamespacedName>,
}

/// Override snapshots, by name: what a run fixes when it starts and binds its clusters to.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct OverrideSnapshots {
    /// ClusterResourceOverrideSnapshots.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cluster_resource_override_snapshots: Vec<String>,
    /// ResourceOverrideSnapshots.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resource_override_snapshots: Vec<NamespacedName>,
}

impl OverrideSnapshots {
    /// The snapshots' names, sorted and comma separated (`namespace/name` for ResourceOverride
    /// snapshots): what the work generator records on a Work in
    /// [`crate::overrides::WORK_OVERRIDES_ANNOTATION`].
    pub fn key(&self) -> String {
        let mut names: Vec<String> = self
            .cluster_resource_override_snapshots
            .iter()
            .cloned()
            .chain(
                self.resource_override_snapshots
                    .iter()
                    .map(|n| format!("{}/{}", n.namespace, n.name)),
            )
            .collect();
        names.sort();
        names.join(",")
    }
}

/// An object in a namespace, by name.
#[derive(
    JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord,
)]
pub struct NamespacedName {
    /// Its name.
    pub name: String,
    /// Its namespace.
    pub namespace: String,
}

/// The lifecycle of a binding.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum BindingState {
    /// Selected by the placement; no version rolled out to it yet.
    #[default]
    Scheduled,
    /// Should run the snapshot at resourceSnapshotIndex.
    Bound,
    /// No longer selected; the placement's objects are to be removed from the cluster.
    Unscheduled,
}

/// What the member reported for this binding.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct BindingStatus {
    /// `RolloutStarted`, `WorkSynchronized`, `Applied`, `Available`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[x_kube(merge_strategy = ListMerge::Map(vec!["type".into()]))]
    pub conditions: Vec<Condition>,
    /// The snapshot index the member last reported applied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub applied_resource_snapshot_index: Option<i64>,
    /// Objects on the member that differ from the hub's and are left so (drifted under
    /// `whenToApply: IfNotDrifted`, diffed under `type: ReportDiff`, not taken over); at most 20.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub drifted_objects: Vec<crate::drift::DriftedObject>,
    /// How many objects differ in all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drifted_object_count: Option<i32>,
    /// The member agent's newest restoration of the hub's values (`whenToApply: Always`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_drift_correction: Option<crate::drift::ObjectCorrection>,
}
