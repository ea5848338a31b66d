//! Per-cluster overrides: `ClusterResourceOverride` and `ResourceOverride` change what a placement
//! sends to the clusters their rules select (a JSON patch, or not placing the object at all),
//! with KubeFleet's field names. Each is captured in immutable numbered snapshots
//! (`ClusterResourceOverrideSnapshot`, `ResourceOverrideSnapshot`), as a placement's objects are.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
#[allow(unused_imports)]
use kube::core::Rule;
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Label on an override snapshot: the override it is a snapshot of.
pub const OVERRIDE_LABEL: &str = "fleethub.dev/override";
/// Label on an override snapshot: its index.
pub const OVERRIDE_INDEX_LABEL: &str = "fleethub.dev/override-index";

/// Annotation on a Work: the override snapshots considered when it was written
/// ([`crate::binding::OverrideSnapshots::key`]), so that other snapshots rewrite it and a run can
/// tell its overrides reached the Work.
pub const WORK_OVERRIDES_ANNOTATION: &str = "fleethub.dev/override-snapshots";

/// Annotation on a Work: the override snapshots that changed it (comma separated; empty when
/// none did), from which the binding's `Overridden` condition is restated without applying the
/// overrides again.
pub const WORK_OVERRIDES_APPLIED_ANNOTATION: &str = "fleethub.dev/overrides-applied";

/// The name of snapshot `index` of override `name`.
pub fn snapshot_name(name: &str, index: i64) -> String {
    format!("{name}-{index}")
}

/// Changes, per cluster, cluster-scoped hub objects (or Namespaces) that placements send to
/// member clusters.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "fleethub.dev",
    version = "v1alpha1",
    kind = "ClusterResourceOverride",
    plural = "clusterresourceoverrides",
    shortname = "cro",
    category = "fleethub",
    derive = "Default",
    derive = "PartialEq",
    doc = "Changes, per cluster, cluster-scoped hub objects (or Namespaces) that placements send to member clusters: each rule patches them, or keeps them off, on the clusters it selects.",
    printcolumn(
        name = "Placement",
        type_ = "string",
        json_path = ".spec.placement.name"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct ClusterResourceOverrideSpec {
    /// Only clusters of this Placement get the override (default: every placement that sends
    /// the selected objects).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placement: Option<PlacementRef>,
    /// The cluster-scoped hub objects to change, by name. Selecting a Namespace changes the
    /// Namespace object itself (a ResourceOverride changes what is in it).
    #[schemars(length(min = 1, max = 100))]
    pub cluster_resource_selectors: Vec<OverrideSelector>,
    /// The rules.
    pub policy: OverridePolicy,
}

/// Changes, per cluster, objects in its own namespace that placements send to member clusters.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "fleethub.dev",
    version = "v1alpha1",
    kind = "ResourceOverride",
    plural = "resourceoverrides",
    shortname = "ro",
    category = "fleethub",
    namespaced,
    derive = "Default",
    derive = "PartialEq",
    doc = "Changes, per cluster, objects in its namespace that placements send to member clusters: each rule patches them, or keeps them off, on the clusters it selects.",
    printcolumn(
        name = "Placement",
        type_ = "string",
        json_path = ".spec.placement.name"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct ResourceOverrideSpec {
    /// Only clusters of this Placement get the override (default: every placement that sends
    /// the selected objects).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placement: Option<PlacementRef>,
    /// The objects in this namespace to change, by name.
    #[schemars(length(min = 1, max = 100))]
    pub resource_selectors: Vec<OverrideSelector>,
    /// The rules.
    pub policy: OverridePolicy,
}

/// A Placement, by name.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct PlacementRef {
    /// The Placement's name.
    #[schemars(length(min = 1, max = 63))]
    pub name: String,
}

/// One hub object, by group, version, kind and name.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct OverrideSelector {
    /// API group ("" for the core group).
    #[serde(default)]
    #[schemars(length(max = 253))]
    pub group: String,
    /// API version, e.g. `v1`.
    #[schemars(length(min = 1, max = 63))]
    pub version: String,
    /// Kind, e.g. `Deployment`.
    #[schemars(length(min = 1, max = 63))]
    pub kind: String,
    /// Name.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
}

/// The rules of an override, applied in order.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct OverridePolicy {
    /// The rules, applied in order; each to the clusters it selects.
    #[schemars(length(min = 1, max = 100))]
    pub override_rules: Vec<OverrideRule>,
}

/// What an override does to the clusters it selects.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum OverrideType {
    /// Patch the object (`jsonPatchOverrides`).
    #[default]
    JSONPatch,
    /// Do not place the object on these clusters.
    Delete,
}

/// One rule: which clusters, and what changes on them.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("self.overrideType != 'Delete' || !has(self.jsonPatchOverrides) || size(self.jsonPatchOverrides) == 0").message("jsonPatchOverrides must be empty when overrideType is Delete"))]
#[x_kube(validation = Rule::new("self.overrideType == 'Delete' || (has(self.jsonPatchOverrides) && size(self.jsonPatchOverrides) > 0)").message("jsonPatchOverrides is required when overrideType is JSONPatch"))]
pub struct OverrideRule {
    /// The clusters this rule applies to (absent or empty: every cluster).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_selector: Option<ClusterSelector>,
    /// `JSONPatch` (default) or `Delete`.
    #[serde(default)]
    pub override_type: OverrideType,
    /// The patches, applied in order (`JSONPatch` only). String values may use
    /// `${MEMBER-CLUSTER-NAME}` and `${MEMBER-CLUSTER-LABEL-KEY-<key>}`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 100))]
    pub json_patch_overrides: Vec<JsonPatchOverride>,
}

/// Clusters selected by any of the terms.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ClusterSelector {
    /// The terms, ORed (none: every cluster).
    #[serde(default)]
    #[schemars(length(max = 100))]
    pub cluster_selector_terms: Vec<ClusterSelectorTerm>,
}

/// Clusters whose labels match.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ClusterSelectorTerm {
    /// The MemberCluster labels to match (absent or empty: every cluster).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label_selector: Option<LabelSelector>,
}

/// A JSON patch operation.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum JsonPatchOp {
    /// Add a field or array element (`-` appends), or replace a field that exists.
    Add,
    /// Remove a field or element, which must exist.
    Remove,
    /// Replace a field or element, which must exist.
    Replace,
}

/// One JSON patch operation (RFC 6902). (`value` holds any JSON, which admission rules cannot
/// read: a `remove` with a value, or an `add`/`replace` without one, fails the cluster it is
/// applied to, naming the override, the rule and the path.)
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("!['/apiVersion', '/kind', '/metadata/name', '/metadata/namespace', '/status'].exists(p, self.path == p || self.path.startsWith(p + '/'))").message("path must not change /apiVersion, /kind, /metadata/name, /metadata/namespace or /status"))]
pub struct JsonPatchOverride {
    /// `add`, `remove` or `replace`.
    pub op: JsonPatchOp,
    /// A JSON pointer (RFC 6901), e.g. `/spec/template/spec/containers/0/image`.
    #[schemars(length(min = 2, max = 512), regex(pattern = r"^(/([^/~]|~[01])*)+$"))]
    pub path: String,
    /// The value (any JSON) for `add` and `replace`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "any_json")]
    pub value: Option<serde_json::Value>,
}

fn any_json(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({"x-kubernetes-preserve-unknown-fields": true})
}

/// An immutable copy of a ClusterResourceOverride's spec, numbered from 0.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "fleethub.dev",
    version = "v1alpha1",
    kind = "ClusterResourceOverrideSnapshot",
    plural = "clusterresourceoverridesnapshots",
    shortname = "crosnap",
    category = "fleethub",
    derive = "Default",
    derive = "PartialEq",
    doc = "An immutable, numbered copy of a ClusterResourceOverride's spec: runs use snapshots, so an edit mid-run changes nothing for the run.",
    printcolumn(name = "Override", type_ = "string", json_path = ".spec.overrideName"),
    printcolumn(name = "Index", type_ = "integer", json_path = ".spec.index"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("self == oldSelf").message("an override snapshot is immutable: edit the override instead"))]
pub struct ClusterResourceOverrideSnapshotSpec {
    /// The ClusterResourceOverride this is a snapshot of.
    #[schemars(length(min = 1, max = 253))]
    pub override_name: String,
    /// The snapshot's number: 0, 1, 2, …
    #[schemars(range(min = 0))]
    pub index: i64,
    /// The override's spec when the snapshot was taken.
    pub override_spec: ClusterResourceOverrideSpec,
}

/// An immutable copy of a ResourceOverride's spec, numbered from 0.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "fleethub.dev",
    version = "v1alpha1",
    kind = "ResourceOverrideSnapshot",
    plural = "resourceoverridesnapshots",
    shortname = "rosnap",
    category = "fleethub",
    namespaced,
    derive = "Default",
    derive = "PartialEq",
    doc = "An immutable, numbered copy of a ResourceOverride's spec: runs use snapshots, so an edit mid-run changes nothing for the run.",
    printcolumn(name = "Override", type_ = "string", json_path = ".spec.overrideName"),
    printcolumn(name = "Index", type_ = "integer", json_path = ".spec.index"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("self == oldSelf").message("an override snapshot is immutable: edit the override instead"))]
pub struct ResourceOverrideSnapshotSpec {
    /// The ResourceOverride (in the same namespace) this is a snapshot of.
    #[schemars(length(min = 1, max = 253))]
    pub override_name: String,
    /// The snapshot's number: 0, 1, 2, …
    #[schemars(range(min = 0))]
    pub index: i64,
    /// The override's spec when the snapshot was taken.
    pub override_spec: ResourceOverrideSpec,
}
