//! The order in which a Work's manifests are applied: what others depend on comes first.
//! CustomResourceDefinitions (their custom resources need them), then Namespaces (namespaced
//! objects need them), then other cluster-scoped objects (e.g. ClusterRoles a RoleBinding names),
//! then namespaced objects. Within a tier, the Work's own order is kept. Deletion runs in reverse.

/// What the order of one manifest depends on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OrderKey<'a> {
    /// API group ("" for core).
    pub group: &'a str,
    /// Kind.
    pub kind: &'a str,
    /// Whether the object is namespaced (from discovery, or from the manifest when its kind is
    /// not served yet, e.g. defined by a CRD of the same Work).
    pub namespaced: bool,
}

/// The tier of a manifest: lower tiers are applied first.
pub fn tier(key: &OrderKey<'_>) -> u8 {
    match (key.group, key.kind, key.namespaced) {
        ("apiextensions.k8s.io", "CustomResourceDefinition", _) => 0,
        ("", "Namespace", _) => 1,
        (_, _, false) => 2,
        (_, _, true) => 3,
    }
}

/// Indices into `keys` in apply order (stable within a tier).
pub fn apply_order(keys: &[OrderKey<'_>]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..keys.len()).collect();
    order.sort_by_key(|&i| tier(&keys[i]));
    order
}

/// Indices into `keys` in deletion order: the reverse of [`apply_order`].
pub fn delete_order(keys: &[OrderKey<'_>]) -> Vec<usize> {
    let mut order = apply_order(keys);
    order.reverse();
    order
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(group: &'static str, kind: &'static str, namespaced: bool) -> OrderKey<'static> {
        OrderKey {
            group,
            kind,
            namespaced,
        }
    }

    #[test]
    fn dependencies_come_first_and_the_work_order_is_kept_within_a_tier() {
        let keys = [
            key("apps", "Deployment", true),                                // 0
            key("", "ConfigMap", true),                                     // 1
            key("example.com", "Widget", true),                             // 2
            key("rbac.authorization.k8s.io", "ClusterRole", false),         // 3
            key("", "Namespace", false),                                    // 4
            key("apiextensions.k8s.io", "CustomResourceDefinition", false), // 5
            key("", "Namespace", false),                                    // 6
            key("storage.k8s.io", "StorageClass", false),                   // 7
        ];
        assert_eq!(apply_order(&keys), [5, 4, 6, 3, 7, 0, 1, 2]);
        assert_eq!(delete_order(&keys), [2, 1, 0, 7, 3, 6, 4, 5]);
    }

    #[test]
    fn tiers() {
        let cases = [
            (
                key("apiextensions.k8s.io", "CustomResourceDefinition", false),
                0,
            ),
            (key("", "Namespace", false), 1),
            (
                key("rbac.authorization.k8s.io", "ClusterRoleBinding", false),
                2,
            ),
            (key("example.com", "Namespace", false), 2),
            (key("", "Secret", true), 3),
            (key("example.com", "CustomResourceDefinition", true), 3),
        ];
        for (k, want) in cases {
            assert_eq!(tier(&k), want, "{k:?}");
        }
    }

    #[test]
    fn empty_and_single() {
        assert!(apply_order(&[]).is_empty());
        assert_eq!(apply_order(&[key("", "Service", true)]), [0]);
    }
}
