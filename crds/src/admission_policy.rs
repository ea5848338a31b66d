//! The API server's own checks of who does what, as ValidatingAdmissionPolicies (CEL over
//! `request.userInfo`; no webhook server): an approval names the person who gives it and obeys
//! its gate's policy, and the `fleethub.dev/started-by` of a run or a freeze names the person
//! who created it.
//! `crdgen` writes them beside the CRDs (`crds/generated/admission-policies.yaml`).

use serde_json::{Value, json};

use crate::names::STARTED_BY_ANNOTATION;

/// Name of the policy (and its binding) over ApprovalRequests.
pub const APPROVALS_POLICY: &str = "fleethub-approvals";
/// Name of the policy (and its binding) over UpdateRuns and Freezes.
pub const RUN_STARTER_POLICY: &str = "fleethub-run-starter";

/// Every policy with its binding, in the order they are applied.
pub fn policies() -> Vec<Value> {
    vec![
        approvals(),
        binding(APPROVALS_POLICY),
        run_starter(),
        binding(RUN_STARTER_POLICY),
    ]
}

/// Creates and updates of `resources`, with the API server's defaults written out: the struct is
/// atomic, so a server-side apply that left them out would conflict with an earlier one.
fn match_constraints(resources: &[&str]) -> Value {
    json!({
        "matchPolicy": "Equivalent",
        "namespaceSelector": {},
        "objectSelector": {},
        "resourceRules": [{
            "apiGroups": ["fleethub.dev"],
            "apiVersions": ["*"],
            "operations": ["CREATE", "UPDATE"],
            "resources": resources,
            "scope": "*",
        }],
    })
}

fn binding(policy: &str) -> Value {
    json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": policy, "labels": {"app.kubernetes.io/part-of": "fleethub"}},
        "spec": {"policyName": policy, "validationActions": ["Deny"]},
    })
}

fn approvals() -> Value {
    let user = "request.userInfo.username";
    json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": APPROVALS_POLICY, "labels": {"app.kubernetes.io/part-of": "fleethub"}},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": match_constraints(&["approvalrequests", "approvalrequests/status"]),
            "variables": [
                {"name": "old", "expression": "request.operation == 'UPDATE' && has(oldObject.status) && has(oldObject.status.approvals) ? oldObject.status.approvals : []"},
                {"name": "new", "expression": "has(object.status) && has(object.status.approvals) ? object.status.approvals : []"},
                {"name": "added", "expression": "variables.new.filter(a, !variables.old.exists(o, o == a))"},
                {"name": "policy", "expression": "has(object.spec.policy)"},
                {"name": "selfAllowed", "expression": "variables.policy && has(object.spec.policy.allowSelfApproval) && object.spec.policy.allowSelfApproval"},
                {"name": "approvedBefore", "expression": "request.operation == 'UPDATE' && has(oldObject.status) && has(oldObject.status.conditions) && oldObject.status.conditions.exists(c, c.type == 'Approved' && c.status == 'True')"},
                {"name": "approvedNow", "expression": "has(object.status) && has(object.status.conditions) && object.status.conditions.exists(c, c.type == 'Approved' && c.status == 'True')"},
            ],
            "validations": [
                {
                    "expression": "variables.old.all(o, variables.new.exists(a, a == o))",
                    "message": "status.approvals: an approval once given is never changed or removed",
                    "reason": "Forbidden",
                },
                {
                    "expression": format!("variables.added.all(a, a.user == {user})"),
                    "messageExpression": format!("'status.approvals: ' + {user} + ' may add only their own approval (user: ' + {user} + ')'"),
                    "reason": "Forbidden",
                },
                {
                    "expression": "variables.added.size() == 0 || !variables.policy || variables.selfAllowed || !has(object.spec.startedBy) || object.spec.startedBy != request.userInfo.username",
                    "messageExpression": format!("'status.approvals: ' + {user} + ' started UpdateRun ' + object.spec.parentStageRollout + ', and the approval policy of this gate needs someone else (approvalPolicy.allowSelfApproval is false)'"),
                    "reason": "Forbidden",
                },
                {
                    "expression": "variables.added.size() == 0 || !variables.policy || !has(object.spec.policy.approvers) || object.spec.policy.approvers.users.exists(u, u == request.userInfo.username) || object.spec.policy.approvers.groups.exists(g, request.userInfo.groups.exists(h, h == g))",
                    "messageExpression": format!("'status.approvals: ' + {user} + ' is not among the approvers of this gate (approvalPolicy.approvers: users ' + object.spec.policy.approvers.users.join(', ') + '; groups ' + object.spec.policy.approvers.groups.join(', ') + ')'"),
                    "reason": "Forbidden",
                },
                {
                    "expression": "variables.added.all(a, !has(a.resourceSnapshotIndex) || !has(object.spec.resourceSnapshotIndex) || a.resourceSnapshotIndex == object.spec.resourceSnapshotIndex)",
                    "messageExpression": "'status.approvals: the approval was given for resource snapshot ' + variables.added.filter(a, has(a.resourceSnapshotIndex) && a.resourceSnapshotIndex != object.spec.resourceSnapshotIndex)[0].resourceSnapshotIndex + ', but UpdateRun ' + object.spec.parentStageRollout + ' rolls out ' + object.spec.resourceSnapshotIndex + ': look at what it rolls out now and approve again'",
                    "reason": "Invalid",
                },
                {
                    "expression": "!variables.policy || variables.approvedBefore || !variables.approvedNow || variables.new.exists(a, a.user == request.userInfo.username)",
                    "messageExpression": format!("'status.conditions: this gate has an approval policy, so an approval is an entry of status.approvals naming its author (' + {user} + '); kubectl fleet approve and the dashboard add it'"),
                    "reason": "Forbidden",
                },
            ],
        },
    })
}

fn run_starter() -> Value {
    let a = STARTED_BY_ANNOTATION;
    let has_new =
        format!("has(object.metadata.annotations) && '{a}' in object.metadata.annotations");
    let has_old =
        format!("has(oldObject.metadata.annotations) && '{a}' in oldObject.metadata.annotations");
    json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": RUN_STARTER_POLICY, "labels": {"app.kubernetes.io/part-of": "fleethub"}},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": match_constraints(&["updateruns", "freezes"]),
            "validations": [
                {
                    "expression": format!("request.operation != 'CREATE' || !({has_new}) || object.metadata.annotations['{a}'] == request.userInfo.username"),
                    "messageExpression": format!("'metadata.annotations[{a}]: must name the user creating the ' + request.kind.kind + ' (' + request.userInfo.username + ')'"),
                    "reason": "Forbidden",
                },
                {
                    "expression": format!("request.operation != 'UPDATE' || ({has_new}) == ({has_old}) && (!({has_new}) || object.metadata.annotations['{a}'] == oldObject.metadata.annotations['{a}'])"),
                    "message": format!("metadata.annotations[{a}]: who started a run, or made a freeze, never changes"),
                    "reason": "Forbidden",
                },
            ],
        },
    })
}
