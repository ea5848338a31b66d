//! `ResourceSnapshot`: an immutable, numbered copy of a placement's selected objects.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
#[allow(unused_imports)]
use kube::core::{ListMerge, Rule};
use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

use crate::schema::embedded_objects;

/// An immutable copy of the objects a Placement selected, numbered per placement from 0. "Roll
/// out version N" means "roll out resource index N". Content too large for one object is split
/// into parts (`<placement>-<index>-snapshot`, `…-snapshot-1`, …) that share the index.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "fleethub.dev",
    version = "v1alpha1",
    kind = "ResourceSnapshot",
    plural = "resourcesnapshots",
    shortname = "rsnap",
    category = "fleethub",
    status = "ResourceSnapshotStatus",
    derive = "Default",
    derive = "PartialEq",
    doc = "An immutable, numbered copy of the objects a Placement selected.",
    selectable = ".spec.placementName",
    printcolumn(
        name = "Placement",
        type_ = "string",
        json_path = ".spec.placementName"
    ),
    printcolumn(name = "Index", type_ = "integer", json_path = ".spec.resourceIndex"),
    printcolumn(
        name = "Part",
        type_ = "integer",
        json_path = ".spec.part",
        priority = 1
    ),
    printcolumn(name = "Objects", type_ = "integer", json_path = ".spec.objectCount"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("self == oldSelf").message("a ResourceSnapshot is immutable: cut a new one instead"))]
#[x_kube(validation = Rule::new("self.part < self.parts").message("part must be below parts"))]
pub struct ResourceSnapshotSpec {
    /// The Placement this is a snapshot of.
    #[schemars(length(min = 1, max = 63))]
    pub placement_name: String,
    /// The snapshot's number within its placement: 0, 1, 2, …
    #[schemars(range(min = 0))]
    pub resource_index: i64,
    /// Which part of the snapshot this object holds (0-based).
    #[serde(default)]
    #[schemars(range(min = 0, max = 999))]
    pub part: i32,
    /// How many parts the snapshot has in all (1 unless the content was split).
    #[schemars(range(min = 1, max = 1000))]
    pub parts: i32,
    /// Hash of the whole snapshot's content (all parts), to tell whether the selected objects
    /// changed.
    #[schemars(length(max = 128))]
    pub content_hash: String,
    /// Number of objects in the whole snapshot (all parts).
    #[schemars(range(min = 0))]
    pub object_count: i64,
    /// The objects in this part, as they will be applied (server-populated fields removed).
    #[serde(default)]
    #[schemars(schema_with = "embedded_objects")]
    pub resources: Vec<serde_json::Value>,
}

/// Observed state of a snapshot.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ResourceSnapshotStatus {
    /// Conditions about the snapshot.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[x_kube(merge_strategy = ListMerge::Map(vec!["type".into()]))]
    pub conditions: Vec<Condition>,
}
