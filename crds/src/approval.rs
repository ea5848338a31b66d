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
    /// The gate's approval policy, as the run's strategy gave it when the gate opened. Unset:
    /// one approval by anyone allowed to update the request's status.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<ApprovalPolicy>,
    /// Who started the run (its `fleethub.dev/started-by` annotation, checked by the API server
    /// against the creating user), when known: under a policy they cannot approve its gates
    /// unless `allowSelfApproval`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253))]
    pub started_by: Option<String>,
    /// The resource snapshot index the run rolls out: an approval names the index it was given
    /// and one naming another is refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 20))]
    pub resource_snapshot_index: Option<String>,
}

/// Who may open an Approval gate, and how many of them it takes. The API server enforces it
/// (ValidatingAdmissionPolicy `fleethub-approvals`, with the requesting user's own identity):
/// each approval is an entry of `status.approvals` naming its author.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ApprovalPolicy {
    /// How many distinct people must approve (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 10))]
    pub min_approvals: Option<i32>,
    /// Who may approve: Kubernetes user names and groups. Unset: anyone the hub's RBAC lets
    /// update the request's status.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approvers: Option<Approvers>,
    /// Whether the person who started the run may approve its gates (default false).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allow_self_approval: Option<bool>,
}

impl ApprovalPolicy {
    /// How many distinct approvals open the gate.
    pub fn needed(&self) -> usize {
        self.min_approvals.unwrap_or(1).max(1) as usize
    }
}

/// People and groups, as the hub API server authenticates them.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("size(self.users) + size(self.groups) > 0").message("approvers must name at least one user or group"))]
pub struct Approvers {
    /// User names, e.g. `alice@example.com` or `system:serviceaccount:ops:release-bot`.
    #[serde(default)]
    #[schemars(length(max = 50))]
    pub users: Vec<String>,
    /// Group names, e.g. `fleethub-approvers`.
    #[serde(default)]
    #[schemars(length(max = 50))]
    pub groups: Vec<String>,
}

/// One person's approval.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ApprovalRecord {
    /// Who approved: the requesting user's name (the API server refuses any other).
    #[schemars(length(min = 1, max = 253))]
    pub user: String,
    /// When, as the approver's client saw it.
    pub time: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time,
    /// Why, in their words.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 1024))]
    pub comment: Option<String>,
    /// The resource snapshot index the approver was shown (must be the request's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 20))]
    pub resource_snapshot_index: Option<String>,
}

/// The approval itself.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ApprovalRequestStatus {
    /// `Approved` (set by a person) and `ApprovalAccepted` (set by the hub).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[x_kube(merge_strategy = ListMerge::Map(vec!["type".into()]))]
    pub conditions: Vec<Condition>,
    /// The approvals given, one per person; once given an approval is never changed or
    /// removed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[x_kube(merge_strategy = ListMerge::Map(vec!["user".into()]))]
    #[schemars(length(max = 50))]
    pub approvals: Vec<ApprovalRecord>,
}

impl ApprovalRequest {
    /// The distinct people whose approvals count: every entry naming the request's snapshot
    /// index (or none).
    pub fn approvers(&self) -> Vec<&str> {
        let index = self.spec.resource_snapshot_index.as_deref();
        let mut users: Vec<&str> = self
            .status
            .iter()
            .flat_map(|s| &s.approvals)
            .filter(|a| {
                index.is_none()
                    || a.resource_snapshot_index
                        .as_deref()
                        .is_none_or(|i| Some(i) == index)
            })
            .map(|a| a.user.as_str())
            .collect();
        users.sort_unstable();
        users.dedup();
        users
    }

    /// Whether the gate is open: under a policy, `minApprovals` distinct approvals; without
    /// one, `Approved=True` or any approval.
    pub fn is_approved(&self) -> bool {
        let approvers = self.approvers().len();
        match &self.spec.policy {
            Some(p) => approvers >= p.needed(),
            None => {
                approvers > 0
                    || self
                        .status
                        .as_ref()
                        .is_some_and(|s| crate::conditions::is_true(&s.conditions, APPROVED))
            }
        }
    }
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

/// One person's approval of `request`, as a server-side apply of the status subresource under
/// a field manager of that person's own (returned first), so approvals by different people
/// never remove each other's. It adds their entry to `status.approvals` (naming the snapshot
/// index the request gates) and, when it opens the gate, sets `Approved=True` too, as
/// `kubectl patch … --subresource=status` would. Every client (dashboard, `kubectl fleet
/// approve`) approves through this one shape; the API server checks `user` is the requester.
pub fn approval_apply(
    request: &ApprovalRequest,
    user: &str,
    comment: &str,
    now: jiff::Timestamp,
) -> (String, serde_json::Value) {
    let mut approvers = request.approvers();
    approvers.push(user);
    approvers.sort_unstable();
    approvers.dedup();
    let opens = approvers.len()
        >= request
            .spec
            .policy
            .as_ref()
            .map_or(1, ApprovalPolicy::needed);
    let patch = approve_patch(user, comment, now);
    let time = patch["status"]["conditions"][0]["lastTransitionTime"].clone();
    let mut entry = serde_json::json!({"user": user, "time": time});
    if !comment.is_empty() {
        entry["comment"] = comment.into();
    }
    if let Some(index) = &request.spec.resource_snapshot_index {
        entry["resourceSnapshotIndex"] = index.as_str().into();
    }
    let mut status = serde_json::json!({"approvals": [entry]});
    if opens {
        status["conditions"] = patch["status"]["conditions"].clone();
    }
    let name = kube::ResourceExt::name_any(request);
    let body = serde_json::json!({
        "apiVersion": "fleethub.dev/v1alpha1",
        "kind": "ApprovalRequest",
        "metadata": {"name": name},
        "status": status,
    });
    // Field manager names are at most 128 bytes.
    let mut manager = format!("fleethub-approval:{user}");
    while manager.len() > 128 {
        manager.pop();
    }
    (manager, body)
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

    fn request(policy: Option<ApprovalPolicy>, approved_by: &[&str]) -> ApprovalRequest {
        let mut r = ApprovalRequest::new(
            "web-canary",
            ApprovalRequestSpec {
                parent_stage_rollout: "web".into(),
                target_stage: "canary".into(),
                policy,
                started_by: Some("carol".into()),
                resource_snapshot_index: Some("3".into()),
            },
        );
        let at = k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(jiff::Timestamp::UNIX_EPOCH);
        r.status = Some(ApprovalRequestStatus {
            conditions: Vec::new(),
            approvals: approved_by
                .iter()
                .map(|u| ApprovalRecord {
                    user: u.to_string(),
                    time: at.clone(),
                    comment: None,
                    resource_snapshot_index: Some("3".into()),
                })
                .collect(),
        });
        r
    }

    #[test]
    fn an_approval_is_its_authors_entry_and_sets_approved_only_when_it_opens_the_gate() {
        let now: jiff::Timestamp = "2026-11-22T08:00:00Z".parse().unwrap();
        let two = Some(ApprovalPolicy {
            min_approvals: Some(2),
            ..Default::default()
        });
        let (manager, body) = approval_apply(&request(two.clone(), &[]), "alice", "lgtm", now);
        assert_eq!(manager, "fleethub-approval:alice");
        let entry = &body["status"]["approvals"][0];
        assert_eq!(entry["user"], "alice");
        assert_eq!(entry["comment"], "lgtm");
        assert_eq!(entry["resourceSnapshotIndex"], "3");
        assert!(body["status"].get("conditions").is_none(), "{body}");

        // The second person opens it.
        let (_, body) = approval_apply(&request(two.clone(), &["alice"]), "bob", "", now);
        assert_eq!(body["status"]["approvals"].as_array().unwrap().len(), 1);
        assert_eq!(body["status"]["conditions"][0]["type"], APPROVED);
        // The same person twice counts once.
        let (_, body) = approval_apply(&request(two.clone(), &["alice"]), "alice", "", now);
        assert!(body["status"].get("conditions").is_none(), "{body}");
        assert!(!request(two.clone(), &["alice"]).is_approved());
        assert!(request(two, &["alice", "bob"]).is_approved());

        // No policy: one approval opens it, as the Approved condition alone does.
        let (_, body) = approval_apply(&request(None, &[]), "alice", "", now);
        assert_eq!(body["status"]["conditions"][0]["status"], "True");
        let mut patched = request(None, &[]);
        assert!(!patched.is_approved());
        patched.status.as_mut().unwrap().conditions =
            serde_json::from_value(approve_patch("dave", "", now)["status"]["conditions"].clone())
                .unwrap();
        assert!(patched.is_approved());
    }
}
