//! `ApprovalRequest`: a stage gate waiting for a person.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
#[allow(unused_imports)]
use kube::core::{ListMerge, Rule};
use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

/// Condition type set by a person (kubectl or the dashboard) to approve.
pub const APPROVED: &str = "Approved";
/// Condition type set by the hub once the run has taken the approval into account.
pub const APPROVAL_ACCEPTED: &str = "ApprovalAccepted";
/// Reason of the hub's `ApprovalAccepted=True` condition.
pub const ACCEPTED_REASON: &str = "ApprovalAccepted";

/// Created by an UpdateRun when a stage's Approval task is reached, named `<run>-<stage>`. A
/// person approves by setting condition `Approved` with status `True` on its status
/// subresource, e.g. `kubectl patch approvalrequest <name> --subresource=status --type=merge -p …`.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "fleethub.dev",
    version = "v1alpha1",
    kind = "ApprovalRequest",
    plural = "approvalrequests",
    shortname = "approval",
    shortname = "areq",
    category = "fleethub",
    status = "ApprovalRequestStatus",
    derive = "Default",
    derive = "PartialEq",
    doc = "A stage gate of an UpdateRun waiting for a person: approve it by setting condition Approved=True on its status subresource.",
    selectable = ".spec.parentStageRollout",
    printcolumn(name = "Run", type_ = "string", json_path = ".spec.parentStageRollout"),
    printcolumn(name = "Stage", type_ = "string", json_path = ".spec.targetStage"),
    printcolumn(
        name = "Approved",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Approved\")].status"
    ),
    printcolumn(
        name = "Accepted",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"ApprovalAccepted\")].status"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("self == oldSelf").message("spec is immutable: an ApprovalRequest always gates the same run and stage"))]
pub struct ApprovalRequestSpec {
    /// The UpdateRun this request gates.
    #[schemars(length(min = 1, max = 63))]
    pub parent_stage_rollout: String,
    /// The stage whose after-stage Approval task this is.
    #[schemars(length(min = 1, max = 63))]
    pub target_stage: String,
}

/// The approval itself.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ApprovalRequestStatus {
    /// `Approved` (set by a person) and `ApprovalAccepted` (set by the hub).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[x_kube(merge_strategy = ListMerge::Map(vec!["type".into()]))]
    pub conditions: Vec<Condition>,
}

/// The status patch that approves a request: a JSON merge patch for the status subresource
/// setting `Approved=True`, exactly what `kubectl patch approvalrequest <name>
/// --subresource=status --type=merge -p …` sends. Every client (dashboard, `kubectl fleet
/// approve`, tests) approves through this one shape, so an approval means the same wherever it
/// was made. `approver` is who approved (shown in the message), `now` the transition time.
pub fn approve_patch(approver: &str, message: &str, now: jiff::Timestamp) -> serde_json::Value {
    let message = if message.is_empty() {
        format!("approved by {approver}")
    } else {
        format!("approved by {approver}: {message}")
    };
    serde_json::json!({"status": {"conditions": [{
        "type": APPROVED,
        "status": "True",
        "reason": "Approved",
        "message": message,
        // Truncated, never rounded up: a time in the future would make the run's own times,
        // which the API server keeps to the second, seem to come before the approval.
        "lastTransitionTime": now
            .round(
                jiff::TimestampRound::new()
                    .smallest(jiff::Unit::Second)
                    .mode(jiff::RoundMode::Trunc),
            )
            .unwrap_or(now)
            .to_string(),
    }]}})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn approve_patch_sets_approved_true_with_who_and_why() {
        let now: jiff::Timestamp = "2026-11-22T08:00:00.4Z".parse().unwrap();
        let patch = approve_patch("alice", "canary looks good", now);
        let c = &patch["status"]["conditions"][0];
        assert_eq!(c["type"], "Approved");
        assert_eq!(c["status"], "True");
        assert_eq!(c["message"], "approved by alice: canary looks good");
        assert_eq!(c["lastTransitionTime"], "2026-11-22T08:00:00Z");
        // Truncated, never in the future.
        let late: jiff::Timestamp = "2026-11-22T08:00:00.9Z".parse().unwrap();
        assert_eq!(
            approve_patch("alice", "", late)["status"]["conditions"][0]["lastTransitionTime"],
            "2026-11-22T08:00:00Z"
        );
        let bare = approve_patch("bob", "", now);
        assert_eq!(
            bare["status"]["conditions"][0]["message"],
            "approved by bob"
        );
    }
}
