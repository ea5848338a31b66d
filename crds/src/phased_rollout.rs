//! `PhasedRollout`: rolls one StatefulSet on a member one pod at a time, each step only after the
//! last rolled pod runs the new revision, every pod is available, and a Prometheus check passed
//! `successThreshold` times in a row. The member agent holds the StatefulSet's
//! `updateStrategy.rollingUpdate.partition` and lowers it step by step. Installed on the hub (so
//! it can be placed with the StatefulSet like any object) and on members (where it acts).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
#[allow(unused_imports)]
use kube::core::{ListMerge, Rule};
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::metric_check::MetricCheckStatus;
use crate::strategy::MetricCheck;

/// Condition type: the StatefulSet runs its update revision on every pod (True), or why not.
pub const ROLLED_OUT: &str = "RolledOut";

/// Reasons of a PhasedRollout's conditions.
pub mod reason {
    /// RolledOut=True: every pod runs the update revision; the partition holds the next one.
    pub const COMPLETE: &str = "RolloutComplete";
    /// RolledOut=False: rolling, a pod at a time.
    pub const ROLLING: &str = "Rolling";
    /// RolledOut=False: waiting for the rolled pod to run the new revision and every pod to be
    /// available.
    pub const WAITING_FOR_PODS: &str = "WaitingForPods";
    /// RolledOut=False: waiting for the check to pass before the next pod.
    pub const WAITING_FOR_CHECK: &str = "WaitingForCheck";
    /// RolledOut=False: the StatefulSet does not exist.
    pub const TARGET_NOT_FOUND: &str = "TargetNotFound";
    /// RolledOut=False: the StatefulSet's update strategy is OnDelete; nothing is done.
    pub const ON_DELETE: &str = "OnDeleteNotSupported";
    /// RolledOut=Unknown: `standardRollingUpdate` handed the partition back to the StatefulSet
    /// controller.
    pub const HANDED_BACK: &str = "StandardRollingUpdate";
    /// RolledOut=False: the check cannot be used (the message names the field).
    pub const INVALID_CHECK: &str = "InvalidCheck";
}

/// Rolls a StatefulSet one pod at a time, gated by a Prometheus check between pods.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "fleethub.dev",
    version = "v1alpha1",
    kind = "PhasedRollout",
    plural = "phasedrollouts",
    shortname = "phased",
    category = "fleethub",
    namespaced,
    status = "PhasedRolloutStatus",
    derive = "Default",
    derive = "PartialEq",
    doc = "Rolls a StatefulSet one pod at a time on a member, each step gated by a Prometheus check.",
    printcolumn(name = "Target", type_ = "string", json_path = ".spec.targetRef"),
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase"),
    printcolumn(
        name = "Rolled",
        type_ = "integer",
        json_path = ".status.rolledReplicas"
    ),
    printcolumn(name = "Replicas", type_ = "integer", json_path = ".status.replicas"),
    printcolumn(
        name = "Partition",
        type_ = "integer",
        json_path = ".status.partition",
        priority = 1
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct PhasedRolloutSpec {
    /// The StatefulSet (in the same namespace) to roll. Its update strategy must be
    /// RollingUpdate; the member agent owns its `rollingUpdate.partition`.
    #[schemars(length(min = 1, max = 253))]
    pub target_ref: String,
    /// The Prometheus check between pods: after `initialDelay` from when the last rolled pod is
    /// available, every `interval`, `successThreshold` consecutive checks must return data.
    /// `$statefulset` and `$namespace` in the query are expanded. An unreachable Prometheus or
    /// an empty result holds the rollout. `timeout` is not used (a held rollout waits). Its
    /// `secretRef` names a Secret in the rollout's own namespace on the member.
    pub check: MetricCheck,
    /// Hands the StatefulSet back to its own rolling update: the agent gives up the partition
    /// (it is removed, so every pod rolls at once as usual).
    #[serde(default)]
    pub standard_rolling_update: bool,
}

/// Where a phased rollout is.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum PhasedRolloutPhase {
    /// Every pod runs the update revision; the partition is held at `replicas`.
    #[default]
    Idle,
    /// A new revision is rolling a pod at a time.
    Rolling,
    /// The StatefulSet cannot be rolled this way (OnDelete, missing, an invalid check).
    Refused,
    /// `standardRollingUpdate` is set; the StatefulSet rolls itself.
    HandedBack,
}

/// Observed state of a phased rollout. The check's count lives here, so a restarted agent
/// continues it instead of passing early.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PhasedRolloutStatus {
    /// `RolledOut`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[x_kube(merge_strategy = ListMerge::Map(vec!["type".into()]))]
    pub conditions: Vec<Condition>,
    /// The generation of the spec last acted on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `Idle`, `Rolling`, `Refused`, `HandedBack`.
    #[serde(default)]
    pub phase: PhasedRolloutPhase,
    /// The StatefulSet's update revision being rolled (or rolled).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub update_revision: Option<String>,
    /// The StatefulSet's replicas.
    #[serde(default)]
    pub replicas: i32,
    /// Pods running the update revision.
    #[serde(default)]
    pub rolled_replicas: i32,
    /// The partition the agent set: pods with an ordinal at or above it run the update
    /// revision.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partition: Option<i32>,
    /// The check before the next pod (reset after each step).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub check: Option<MetricCheckStatus>,
}
