//! Names and labels derived from fleethub objects, and the length limits that keep them valid.
//!
//! Child objects are named after their parents (`fleet-member-<cluster>`, `<run>-<stage>`, …) and
//! labelled with their parents' names, and a label value holds at most 63 characters. The CRDs
//! therefore bound the parents' names (see [`MAX_MEMBER_CLUSTER_NAME`] and friends); these
//! functions are the single place the derivations live.

/// Prefix of the hub namespace that holds one member's Works.
pub const MEMBER_NAMESPACE_PREFIX: &str = "fleet-member-";

/// A MemberCluster name must leave room for [`MEMBER_NAMESPACE_PREFIX`] in a 63-character
/// namespace name.
pub const MAX_MEMBER_CLUSTER_NAME: usize = 63 - MEMBER_NAMESPACE_PREFIX.len();

/// Placement, UpdateRun and stage names are used as label values, so they are DNS labels.
pub const MAX_LABEL_VALUE: usize = 63;

/// Label on every object fleethub derives from a Placement.
pub const PLACEMENT_LABEL: &str = "fleethub.dev/placement";
/// Label on a ResourceSnapshot: its resource index.
pub const SNAPSHOT_INDEX_LABEL: &str = "fleethub.dev/resource-index";
/// Label on a Binding or Work: the member cluster it is for.
pub const CLUSTER_LABEL: &str = "fleethub.dev/cluster";
/// Label on an ApprovalRequest: the UpdateRun that created it.
pub const UPDATE_RUN_LABEL: &str = "fleethub.dev/update-run";
/// Label on a rollback UpdateRun: the failed run it rolls back (`onFailure: Rollback`).
pub const ROLLBACK_OF_LABEL: &str = "fleethub.dev/rollback-of";
/// Annotation on an UpdateRun: the user who created it, as the API server authenticated them
/// (ValidatingAdmissionPolicy `fleethub-run-starter` refuses any other name, and any change).
pub const STARTED_BY_ANNOTATION: &str = "fleethub.dev/started-by";
/// Label on an ApprovalRequest: the stage it gates.
pub const STAGE_LABEL: &str = "fleethub.dev/stage";
/// Label (on a member cluster's pods) that the local fleet's kwok stages read: pods carrying
/// `fleethub.dev/simulate: unready` are kept running but never become ready.
pub const SIMULATE_LABEL: &str = "fleethub.dev/simulate";

/// The hub namespace holding the Works of member cluster `cluster`.
pub fn member_namespace(cluster: &str) -> String {
    format!("{MEMBER_NAMESPACE_PREFIX}{cluster}")
}

/// The member cluster whose Works namespace is `namespace`, if it is one.
pub fn cluster_of_namespace(namespace: &str) -> Option<&str> {
    namespace
        .strip_prefix(MEMBER_NAMESPACE_PREFIX)
        .filter(|c| !c.is_empty())
}

/// The ApprovalRequest an UpdateRun creates for the Approval task of `stage`.
pub fn approval_request_name(run: &str, stage: &str) -> String {
    format!("{run}-{stage}")
}

/// The ApprovalRequest an UpdateRun creates for the before-stage Approval task of `stage`.
pub fn before_stage_approval_request_name(run: &str, stage: &str) -> String {
    format!("{run}-before-{stage}")
}

/// The (first) ResourceSnapshot of `placement` at resource index `index`. When a snapshot's
/// content is split over several objects, part `n > 0` is [`resource_snapshot_part_name`].
pub fn resource_snapshot_name(placement: &str, index: u64) -> String {
    format!("{placement}-{index}-snapshot")
}

/// Part `part` of the ResourceSnapshot of `placement` at `index`; part 0 is the plain name.
pub fn resource_snapshot_part_name(placement: &str, index: u64, part: u32) -> String {
    if part == 0 {
        resource_snapshot_name(placement, index)
    } else {
        format!("{placement}-{index}-snapshot-{part}")
    }
}

/// The ClusterRole (and ClusterRoleBinding) on the hub that lets member `cluster`'s agent read
/// and report on its own MemberCluster.
pub fn agent_cluster_role_name(cluster: &str) -> String {
    format!("fleethub:member:{cluster}")
}

/// The Binding of `placement` to member `cluster`.
pub fn binding_name(placement: &str, cluster: &str) -> String {
    format!("{placement}-{cluster}")
}

/// The Work (in [`member_namespace`]) carrying `placement`'s manifests to its member.
pub fn work_name(placement: &str) -> String {
    placement.to_string()
}

/// Whether `s` is an RFC 1123 DNS label: lower-case alphanumerics and '-', starting and ending
/// with an alphanumeric, at most 63 characters.
pub fn is_dns_label(s: &str) -> bool {
    let bytes = s.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= MAX_LABEL_VALUE
        && bytes
            .iter()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
        && bytes[0] != b'-'
        && bytes[bytes.len() - 1] != b'-'
}

/// The RE2 pattern of a DNS label, as the CRD schemas use it.
pub const DNS_LABEL_PATTERN: &str = "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn derived_names() {
        assert_eq!(member_namespace("member-1"), "fleet-member-member-1");
        assert_eq!(
            cluster_of_namespace("fleet-member-member-1"),
            Some("member-1")
        );
        assert_eq!(cluster_of_namespace("fleet-member-"), None);
        assert_eq!(cluster_of_namespace("default"), None);
        assert_eq!(approval_request_name("run", "canary"), "run-canary");
        assert_eq!(
            before_stage_approval_request_name("run", "canary"),
            "run-before-canary"
        );
        assert_eq!(resource_snapshot_name("web", 3), "web-3-snapshot");
        assert_eq!(resource_snapshot_part_name("web", 3, 0), "web-3-snapshot");
        assert_eq!(resource_snapshot_part_name("web", 3, 2), "web-3-snapshot-2");
        assert_eq!(binding_name("web", "member-1"), "web-member-1");
        assert_eq!(work_name("web"), "web");
        assert_eq!(agent_cluster_role_name("m1"), "fleethub:member:m1");
    }

    #[test]
    fn longest_member_name_still_makes_a_valid_namespace() {
        let name = "a".repeat(MAX_MEMBER_CLUSTER_NAME);
        assert!(is_dns_label(&member_namespace(&name)));
        let too_long = "a".repeat(MAX_MEMBER_CLUSTER_NAME + 1);
        assert!(!is_dns_label(&member_namespace(&too_long)));
    }

    #[test]
    fn dns_labels() {
        for ok in ["a", "staging", "prod-1", "0abc", &"x".repeat(63)] {
            assert!(is_dns_label(ok), "{ok} should be a DNS label");
        }
        for bad in ["", "-a", "a-", "Staging", "a_b", "a.b", &"x".repeat(64)] {
            assert!(!is_dns_label(bad), "{bad} should not be a DNS label");
        }
    }
}
