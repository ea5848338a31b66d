//! How a member agent applies a Work's objects, and what it reports when a member's object
//! differs from the hub's: `spec.strategy.applyStrategy` on a Placement (copied into each of its
//! Works), with KubeFleet's field names and values so its manifests carry over.
//!
//! Field ownership decides what drift is. A field of the hub's manifest whose member value was
//! last set by a person (`kubectl` edit, patch, scale, apply: the field managers `kubectl` and
//! `kubectl-*`) or by the member's fleethub agent is the hub's: a different member value is
//! drift. A field another controller or applier owns on the member (an autoscaler's
//! `replicas`, a webhook's defaults, a second server-side applier) is theirs: it is never
//! reported and never forced back.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Most field differences recorded per object (the count says how many there were).
pub const MAX_FIELDS: usize = 20;
/// Longest member or hub value recorded (longer ones end in `…`).
pub const MAX_VALUE_CHARS: usize = 200;

/// How the member agent applies a placement's objects and treats objects that differ on the
/// member.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ApplyStrategy {
    /// `ServerSideApply` (default) applies the objects; `ClientSideApply` (KubeFleet's) is
    /// accepted and also applied server-side; `ReportDiff` applies nothing and reports how each
    /// member's objects differ from the hub's.
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub type_: Option<ApplyStrategyType>,
    /// `PartialComparison` (default) compares only the fields the hub's object sets;
    /// `FullComparison` also reports fields the member's object has and the hub's does not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub comparison_option: Option<ComparisonOption>,
    /// `Always` (default) restores the hub's values when a member's object drifted;
    /// `IfNotDrifted` leaves the member's values, reports them, and applies nothing more to that
    /// object until the drift is gone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub when_to_apply: Option<WhenToApply>,
    /// What to do with an object that already exists on a member and was not created by the
    /// fleet: `Always` (default) takes it over; `IfNoDiff` takes it only when it already matches
    /// the hub's; `Never` leaves it and reports it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub when_to_take_over: Option<WhenToTakeOver>,
}

impl ApplyStrategy {
    /// Whether the agent applies nothing (`type: ReportDiff`).
    pub fn report_only(&self) -> bool {
        self.type_ == Some(ApplyStrategyType::ReportDiff)
    }
    /// `whenToApply`, defaulted.
    pub fn when_to_apply(&self) -> WhenToApply {
        self.when_to_apply.unwrap_or_default()
    }
    /// `whenToTakeOver`, defaulted.
    pub fn when_to_take_over(&self) -> WhenToTakeOver {
        self.when_to_take_over.unwrap_or_default()
    }
    /// Whether fields only the member's object has are differences too.
    pub fn full_comparison(&self) -> bool {
        self.comparison_option == Some(ComparisonOption::FullComparison)
    }
}

/// `applyStrategy.type`.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ApplyStrategyType {
    /// Server-side apply (the default).
    #[default]
    ServerSideApply,
    /// KubeFleet's client-side apply: accepted, applied server-side.
    ClientSideApply,
    /// Apply nothing; report differences.
    ReportDiff,
}

/// `applyStrategy.comparisonOption`.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ComparisonOption {
    /// Only the fields the hub's object sets (the default).
    #[default]
    PartialComparison,
    /// Also fields only the member's object has.
    FullComparison,
}

/// `applyStrategy.whenToApply`.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum WhenToApply {
    /// Restore the hub's values (the default).
    #[default]
    Always,
    /// Leave a drifted object as the member has it, and report it.
    IfNotDrifted,
}

/// `applyStrategy.whenToTakeOver`.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum WhenToTakeOver {
    /// Take over a pre-existing object (the default, as KubeFleet).
    #[default]
    Always,
    /// Take it over only when it matches the hub's object.
    IfNoDiff,
    /// Never take over a pre-existing object.
    Never,
}

/// One field whose member value differs from the hub's.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct FieldDiff {
    /// The field, as a JSON path (`spec.replicas`, `data.greeting`,
    /// `spec.template.spec.containers[0].image`); `.` for the whole object.
    pub path: String,
    /// The member's value as JSON (absent: the member does not have the field).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub member_value: Option<String>,
    /// The hub's value as JSON (absent: the hub's object does not set the field).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hub_value: Option<String>,
}

/// Why a member's object differs from the hub's and was left so.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
pub enum DriftType {
    /// Changed on the member after the fleet applied it; left as is (`whenToApply:
    /// IfNotDrifted`).
    Drifted,
    /// Differs from the hub's (`type: ReportDiff`: nothing is applied).
    Diffed,
    /// Existed on the member before the fleet and was not taken over (`whenToTakeOver`).
    TakeoverRefused,
}

impl DriftType {
    /// The name used in conditions and listings.
    pub fn as_str(self) -> &'static str {
        match self {
            DriftType::Drifted => "Drifted",
            DriftType::Diffed => "Diffed",
            DriftType::TakeoverRefused => "TakeoverRefused",
        }
    }
}

/// How a member's object differs from the hub's, while it does.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ManifestDrift {
    /// `Drifted`, `Diffed` or `TakeoverRefused`.
    #[serde(rename = "type")]
    pub type_: DriftType,
    /// When the agent first saw this object differ (kept while it keeps differing).
    pub first_seen_time: Time,
    /// How many fields differ.
    pub field_count: i32,
    /// The differing fields (at most 20).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fields: Vec<FieldDiff>,
}

/// The agent's last restoration of the hub's values on a drifted object (`whenToApply:
/// Always`).
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct DriftCorrection {
    /// When the hub's values were restored.
    pub time: Time,
    /// What the member had instead (at most 20 fields; `.` when the object had been deleted).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fields: Vec<FieldDiff>,
}
