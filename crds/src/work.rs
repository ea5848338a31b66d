//! `Work`: the manifests one member must apply for one binding.

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
#[allow(unused_imports)]
use kube::core::{ListMerge, Rule};
use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

use crate::apply_strategy::{ApplyStrategy, DriftCorrection, ManifestDrift};
use crate::schema::embedded_objects;

/// Condition type: every manifest was applied to the member.
pub const APPLIED: &str = "Applied";
/// Condition type: every workload in the Work runs the new template and is ready.
pub const AVAILABLE: &str = "Available";

/// How long a member may take to make a Work's workloads available when the Work does not say
/// (`spec.healthTimeout`).
pub const DEFAULT_HEALTH_TIMEOUT: Duration = Duration::from_secs(5 * 60);

/// Finalizer the member agent puts on each Work it applies, so that deleting the Work waits
/// until the agent removed from its member what it created for it.
pub const CLEANUP_FINALIZER: &str = "fleethub.dev/member-agent-cleanup";

/// Reasons the member agent writes on a Work's conditions (the Work's and each manifest's).
/// The hub reads them too: an `Available=False` with [`reason::HEALTH_TIMEOUT`] fails a cluster.
pub mod reason {
    /// `Applied=True`: every manifest was applied.
    pub const MANIFESTS_APPLIED: &str = "ManifestsApplied";
    /// `Applied=False` (the Work's and a manifest's): a manifest could not be applied.
    pub const APPLY_FAILED: &str = "ApplyFailed";
    /// `Available` (False for the Work, Unknown for a manifest) while not applied: availability
    /// is not judged.
    pub const NOT_APPLIED: &str = "NotApplied";
    /// `Available=True`: every workload runs the new template and is ready.
    pub const WORKLOADS_AVAILABLE: &str = "WorkloadsAvailable";
    /// `Available=False`: a workload is not ready yet, within the health timeout.
    pub const WORKLOADS_NOT_READY: &str = "WorkloadsNotReady";
    /// `Available=False`: a workload did not become ready within the health timeout.
    pub const HEALTH_TIMEOUT: &str = "HealthTimeout";
    /// A manifest's `Applied=True`.
    pub const MANIFEST_APPLIED: &str = "Applied";
    /// A manifest's `Available=True`.
    pub const MANIFEST_AVAILABLE: &str = "Available";
    /// A manifest's `Available=False`: its workload is not ready.
    pub const MANIFEST_NOT_READY: &str = "WorkloadNotReady";
    /// `Applied=False` (the Work's and a manifest's): an object changed on the member is left as
    /// the member has it (`whenToApply: IfNotDrifted`).
    pub const DRIFTED: &str = "Drifted";
    /// `Applied=False` (the Work's and a manifest's): an object that existed on the member before
    /// the fleet was not taken over (`whenToTakeOver`).
    pub const TAKEOVER_REFUSED: &str = "TakeoverRefused";
    /// `Applied=True` and `Available=True` under `type: ReportDiff`: nothing is applied; the
    /// differences are reported per manifest.
    pub const DIFF_REPORTED: &str = "DiffReported";
}

/// The manifests one member cluster must apply for one Binding. Lives in the hub namespace
/// `fleet-member-<cluster>`; its status is written by that member's agent.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "fleethub.dev",
    version = "v1alpha1",
    kind = "Work",
    plural = "works",
    shortname = "fwork",
    category = "fleethub",
    namespaced,
    status = "WorkStatus",
    derive = "Default",
    derive = "PartialEq",
    doc = "The manifests one member cluster must apply for one Binding; its status is written by that member's agent.",
    printcolumn(
        name = "Placement",
        type_ = "string",
        json_path = ".spec.placementName"
    ),
    printcolumn(
        name = "Index",
        type_ = "integer",
        json_path = ".spec.resourceSnapshotIndex"
    ),
    printcolumn(
        name = "Applied",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Applied\")].status"
    ),
    printcolumn(
        name = "Available",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Available\")].status"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct WorkSpec {
    /// The Placement these manifests come from.
    #[schemars(length(min = 1, max = 63))]
    pub placement_name: String,
    /// The resource snapshot index these manifests are a copy of.
    #[schemars(range(min = 0))]
    pub resource_snapshot_index: i64,
    /// How long the member may take to make every workload available before it reports
    /// Available=False (e.g. `5m`; default 5m).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(min = 2, max = 20),
        regex(pattern = crate::duration::DURATION_PATTERN)
    )]
    #[x_kube(validation = Rule::new("duration(self) > duration('0s')").message("healthTimeout must be longer than 0s"))]
    pub health_timeout: Option<String>,
    /// How the agent applies the objects and treats objects that differ on the member (the
    /// placement's `spec.strategy.applyStrategy`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub apply_strategy: Option<ApplyStrategy>,
    /// The objects to apply.
    pub workload: WorkloadTemplate,
}

/// The objects of a Work.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct WorkloadTemplate {
    /// Complete Kubernetes objects (apiVersion, kind, metadata, …), applied with server-side
    /// apply in dependency order (CustomResourceDefinitions and Namespaces first).
    #[serde(default)]
    #[schemars(schema_with = "embedded_objects")]
    pub manifests: Vec<serde_json::Value>,
}

/// What the member's agent reported.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct WorkStatus {
    /// `Applied` and `Available`, each with the spec generation it describes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[x_kube(merge_strategy = ListMerge::Map(vec!["type".into()]))]
    pub conditions: Vec<Condition>,
    /// The resource snapshot index of the manifests last applied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub applied_resource_snapshot_index: Option<i64>,
    /// Per-manifest conditions.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub manifest_conditions: Vec<ManifestCondition>,
}

/// The state of one manifest of a Work on the member.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ManifestCondition {
    /// Which manifest.
    pub identifier: ManifestIdentifier,
    /// `Applied` and `Available` for this object.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[x_kube(merge_strategy = ListMerge::Map(vec!["type".into()]))]
    pub conditions: Vec<Condition>,
    /// How the member's object differs from the hub's while it is left so (drifted under
    /// `whenToApply: IfNotDrifted`, diffed under `type: ReportDiff`, or a pre-existing object
    /// not taken over).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drift: Option<ManifestDrift>,
    /// The last time the agent restored the hub's values on this object after it drifted on the
    /// member, and what the member had.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_correction: Option<DriftCorrection>,
    /// A hash of the object as last applied (the agent skips an unchanged object that did not
    /// drift).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub applied_hash: Option<String>,
}

/// Identifies one manifest of a Work.
#[derive(
    KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord,
)]
#[serde(rename_all = "camelCase")]
pub struct ManifestIdentifier {
    /// Position of the manifest in spec.workload.manifests.
    pub ordinal: i32,
    /// API group ("" for core).
    #[serde(default)]
    pub group: String,
    /// API version.
    pub version: String,
    /// Kind.
    pub kind: String,
    /// Namespace, for namespaced objects.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Name.
    pub name: String,
}
