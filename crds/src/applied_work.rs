//! `AppliedWork`: lives on a MEMBER cluster, one per Work its agent applies. Every object the
//! agent creates for that Work carries an ownerReference to it, so deleting the AppliedWork lets
//! the member's own garbage collector remove exactly what the agent created, and nothing that
//! existed before. Its status lists what was applied, so the agent can delete the objects of
//! manifests that have left the Work.
//!
//! Installed on members (see [`crate::member_crds`]), never on the hub.

#[allow(unused_imports)]
use kube::core::{ListMerge, Rule};
use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

/// Label on an AppliedWork: the hub namespace of its Work, so that an agent watches only the
/// AppliedWorks of its own member name when several agents share one member cluster.
pub const WORK_NAMESPACE_LABEL: &str = "fleethub.dev/work-namespace";

/// Annotation the member agent puts on every object it applies: the hub Work
/// (`<namespace>/<name>`) the object came from.
pub const WORK_ANNOTATION: &str = "fleethub.dev/work";

/// The longest object name the API server accepts (a DNS subdomain).
const MAX_NAME: usize = 253;

/// Which hub Work this records. The AppliedWork is cluster-scoped and named
/// `<workNamespace>.<workName>` (shortened, with a hash, when that is too long for a name).
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "fleethub.dev",
    version = "v1alpha1",
    kind = "AppliedWork",
    plural = "appliedworks",
    shortname = "awork",
    category = "fleethub",
    status = "AppliedWorkStatus",
    derive = "Default",
    derive = "PartialEq",
    doc = "The member-side record of one hub Work: owner of every object the member agent created for it; deleting it removes them.",
    printcolumn(
        name = "Work-Namespace",
        type_ = "string",
        json_path = ".spec.workNamespace"
    ),
    printcolumn(name = "Work", type_ = "string", json_path = ".spec.workName"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("self == oldSelf").message("spec is immutable: an AppliedWork always records the same Work"))]
pub struct AppliedWorkSpec {
    /// The hub namespace of the Work (`fleet-member-<cluster>`).
    #[schemars(length(min = 1, max = 63))]
    pub work_namespace: String,
    /// The name of the Work.
    #[schemars(length(min = 1, max = 253))]
    pub work_name: String,
}

/// What the agent applied for the Work.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct AppliedWorkStatus {
    /// Every object applied for the Work's manifests (whether the agent created it or it
    /// existed before), plus objects of removed manifests whose deletion has not succeeded yet.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub applied_resources: Vec<AppliedResource>,
}

/// One object applied on the member.
#[derive(
    KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord,
)]
#[serde(rename_all = "camelCase")]
pub struct AppliedResource {
    /// API group ("" for core).
    #[serde(default)]
    pub group: String,
    /// API version it was applied with.
    pub version: String,
    /// Kind.
    pub kind: String,
    /// The resource (plural) it is served as, so it can be deleted without discovery.
    pub resource: String,
    /// Namespace, for namespaced objects.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Name.
    pub name: String,
}

impl AppliedResource {
    /// What identifies the object regardless of the API version it is applied with.
    pub fn key(&self) -> (&str, &str, Option<&str>, &str) {
        (
            &self.group,
            &self.kind,
            self.namespace.as_deref(),
            &self.name,
        )
    }
}

/// The AppliedWork recording hub Work `work_namespace/work_name`: `<namespace>.<name>`, or, when
/// that is longer than an object name may be, a shortened form ending in a hash of both.
pub fn applied_work_name(work_namespace: &str, work_name: &str) -> String {
    let full = format!("{work_namespace}.{work_name}");
    if full.len() <= MAX_NAME {
        return full;
    }
    let suffix = format!("-{:08x}", fnv1a(full.as_bytes()));
    // `full` is ASCII (both parts are DNS names), so any byte index is a char boundary.
    let head = full[..MAX_NAME - suffix.len()].trim_end_matches(['-', '.']);
    format!("{head}{suffix}")
}

/// 32-bit FNV-1a: a stable hash (the standard library's is randomly seeded).
fn fnv1a(bytes: &[u8]) -> u32 {
    bytes.iter().fold(0x811c_9dc5, |h, b| {
        (h ^ u32::from(*b)).wrapping_mul(0x0100_0193)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn name_joins_namespace_and_name() {
        assert_eq!(
            applied_work_name("fleet-member-member-1", "web"),
            "fleet-member-member-1.web"
        );
    }

    #[test]
    fn long_names_are_shortened_stably_and_stay_distinct() {
        let ns = format!("fleet-member-{}", "a".repeat(50));
        let long_a = format!("{}-a", "x".repeat(240));
        let long_b = format!("{}-b", "x".repeat(240));
        let a = applied_work_name(&ns, &long_a);
        let b = applied_work_name(&ns, &long_b);
        assert!(a.len() <= MAX_NAME, "{}", a.len());
        assert_ne!(a, b);
        assert_eq!(a, applied_work_name(&ns, &long_a));
        assert!(a.starts_with(&ns));
        assert!(a.chars().last().is_some_and(|c| c.is_ascii_alphanumeric()));
    }

    #[test]
    fn key_ignores_the_api_version() {
        let v1 = AppliedResource {
            group: "apps".into(),
            version: "v1".into(),
            kind: "Deployment".into(),
            resource: "deployments".into(),
            namespace: Some("app".into()),
            name: "web".into(),
        };
        let v2 = AppliedResource {
            version: "v2".into(),
            ..v1.clone()
        };
        assert_eq!(v1.key(), v2.key());
    }
}
