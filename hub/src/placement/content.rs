//! What a placement's snapshot holds: the selected hub objects, cleaned of what the hub's API
//! server filled in, in a stable order, hashed, and split into parts that fit in an object.

use serde_json::Value;
use sha2::{Digest, Sha256};

/// A snapshot part holds at most this many bytes of objects (etcd's limit is 1.5 MiB per
/// object; leave room for the rest of the ResourceSnapshot).
pub const MAX_PART_BYTES: usize = 800 * 1024;

/// Namespaced objects every namespace has, created by Kubernetes itself: never placed.
pub fn is_generated(obj: &Value) -> bool {
    let kind = obj["kind"].as_str().unwrap_or_default();
    let name = obj["metadata"]["name"].as_str().unwrap_or_default();
    match kind {
        "ConfigMap" => name == "kube-root-ca.crt",
        "ServiceAccount" => name == "default",
        "Secret" => obj["type"].as_str() == Some("kubernetes.io/service-account-token"),
        _ => false,
    }
}

/// Annotations a snapshot does not hold: written on the hub by kubectl and by the hub's own
/// controllers (a Deployment's revision moves with each rollout there), not part of the content.
pub const DROPPED_ANNOTATIONS: [&str; 2] = [
    "kubectl.kubernetes.io/last-applied-configuration",
    "deployment.kubernetes.io/revision",
];

/// `obj` as it should be applied on a member: server-populated metadata, status and
/// cluster-specific fields removed.
pub fn clean(mut obj: Value) -> Value {
    if let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        for field in [
            "uid",
            "resourceVersion",
            "generation",
            "creationTimestamp",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "managedFields",
            "ownerReferences",
            "selfLink",
            "finalizers",
            "generateName",
        ] {
            meta.remove(field);
        }
        if let Some(annotations) = meta.get_mut("annotations").and_then(Value::as_object_mut) {
            for dropped in DROPPED_ANNOTATIONS {
                annotations.remove(dropped);
            }
            if annotations.is_empty() {
                meta.remove("annotations");
            }
        }
    }
    if let Some(o) = obj.as_object_mut() {
        o.remove("status");
    }
    let kind = obj["kind"].as_str().unwrap_or_default().to_string();
    if let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) {
        match kind.as_str() {
            // Allocated by each cluster.
            "Service" => {
                for f in ["clusterIP", "clusterIPs"] {
                    spec.remove(f);
                }
            }
            // Kubernetes-managed finalizers of namespaces.
            "Namespace" => {
                spec.remove("finalizers");
            }
            _ => {}
        }
        if spec.is_empty() && kind == "Namespace" {
            obj.as_object_mut().map(|o| o.remove("spec"));
        }
    }
    obj
}

/// Apply order rank of a kind: definitions and namespaces first.
fn rank(kind: &str) -> u8 {
    match kind {
        "CustomResourceDefinition" => 0,
        "Namespace" => 1,
        "ClusterRole" | "ClusterRoleBinding" | "StorageClass" | "PriorityClass" => 2,
        "ServiceAccount" | "Role" | "RoleBinding" | "ConfigMap" | "Secret" => 3,
        _ => 4,
    }
}

/// Sorts objects into a stable order (kind rank, kind, namespace, name).
pub fn sort(objects: &mut [Value]) {
    let key = |o: &Value| {
        let kind = o["kind"].as_str().unwrap_or_default().to_string();
        (
            rank(&kind),
            kind,
            o["metadata"]["namespace"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
            o["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
        )
    };
    objects.sort_by_key(key);
}

/// A stable hash of sorted, cleaned objects (JSON object keys are ordered by serde_json).
pub fn content_hash(objects: &[Value]) -> String {
    let mut h = Sha256::new();
    for o in objects {
        h.update(o.to_string().as_bytes());
        h.update(b"\n");
    }
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

/// The first object too large for a snapshot part, as a sentence a person can act on.
pub fn oversized(objects: &[Value], max_bytes: usize) -> Option<String> {
    objects.iter().find_map(|o| {
        let len = o.to_string().len();
        (len > max_bytes).then(|| {
            let name = match o["metadata"]["namespace"].as_str() {
                Some(ns) => format!("{ns}/{}", o["metadata"]["name"].as_str().unwrap_or_default()),
                None => o["metadata"]["name"].as_str().unwrap_or_default().to_string(),
            };
            format!(
                "{} {name} is {} KiB, more than a resource snapshot part holds ({} KiB); no new snapshot is cut until it is smaller or no longer selected",
                o["kind"].as_str().unwrap_or("object"),
                len / 1024,
                max_bytes / 1024
            )
        })
    })
}

/// Splits objects into parts of at most [`MAX_PART_BYTES`] each (one object larger than that
/// gets a part of its own; the caller refuses objects that cannot fit at all).
pub fn split(objects: Vec<Value>, max_bytes: usize) -> Vec<Vec<Value>> {
    let mut parts: Vec<Vec<Value>> = vec![Vec::new()];
    let mut size = 0;
    for o in objects {
        let len = o.to_string().len();
        if size + len > max_bytes && !parts.last().is_some_and(Vec::is_empty) {
            parts.push(Vec::new());
            size = 0;
        }
        size += len;
        if let Some(p) = parts.last_mut() {
            p.push(o);
        }
    }
    parts
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn cleaning_removes_what_the_hub_filled_in() {
        let deployed = json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "web", "namespace": "app", "uid": "u", "resourceVersion": "7", "generation": 2,
                         "creationTimestamp": "2026-01-01T00:00:00Z", "managedFields": [{}],
                         "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{}", "team": "a"}},
            "spec": {"clusterIP": "10.96.0.7", "clusterIPs": ["10.96.0.7"], "ports": [{"port": 80}]},
            "status": {"loadBalancer": {}}
        });
        assert_eq!(
            clean(deployed),
            json!({"apiVersion": "v1", "kind": "Service",
                   "metadata": {"name": "web", "namespace": "app", "annotations": {"team": "a"}},
                   "spec": {"ports": [{"port": 80}]}})
        );
        let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "app"},
                        "spec": {"finalizers": ["kubernetes"]}, "status": {"phase": "Active"}});
        assert_eq!(
            clean(ns),
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "app"}})
        );
    }

    #[test]
    fn generated_objects_are_not_placed() {
        assert!(is_generated(
            &json!({"kind": "ConfigMap", "metadata": {"name": "kube-root-ca.crt"}})
        ));
        assert!(is_generated(
            &json!({"kind": "ServiceAccount", "metadata": {"name": "default"}})
        ));
        assert!(is_generated(
            &json!({"kind": "Secret", "type": "kubernetes.io/service-account-token", "metadata": {"name": "t"}})
        ));
        assert!(!is_generated(
            &json!({"kind": "ConfigMap", "metadata": {"name": "web"}})
        ));
    }

    #[test]
    fn order_and_hash_are_stable() {
        let a = json!({"kind": "Deployment", "metadata": {"name": "web", "namespace": "app"}});
        let b = json!({"kind": "Namespace", "metadata": {"name": "app"}});
        let c = json!({"kind": "ConfigMap", "metadata": {"name": "cfg", "namespace": "app"}});
        let mut one = vec![a.clone(), b.clone(), c.clone()];
        let mut two = vec![c, a, b];
        sort(&mut one);
        sort(&mut two);
        assert_eq!(one, two);
        assert_eq!(one[0]["kind"], "Namespace");
        assert_eq!(one[1]["kind"], "ConfigMap");
        assert_eq!(content_hash(&one), content_hash(&two));
        let mut changed = one.clone();
        changed[2]["spec"] = json!({"replicas": 2});
        assert_ne!(content_hash(&one), content_hash(&changed));
        assert_eq!(content_hash(&one).len(), 64);
    }

    #[test]
    fn an_object_too_large_for_a_part_is_named() {
        let big = json!({"kind": "ConfigMap", "metadata": {"name": "huge", "namespace": "app"}, "data": {"x": "y".repeat(3000)}});
        let small = json!({"kind": "ConfigMap", "metadata": {"name": "small", "namespace": "app"}});
        assert_eq!(oversized(std::slice::from_ref(&small), 2048), None);
        let why = oversized(&[small, big], 2048).unwrap();
        assert!(
            why.starts_with(
                "ConfigMap app/huge is 3 KiB, more than a resource snapshot part holds (2 KiB)"
            ),
            "{why}"
        );
    }

    #[test]
    fn content_splits_into_parts_that_fit() {
        let obj = |i: usize| json!({"kind": "ConfigMap", "metadata": {"name": format!("c{i}")}, "data": {"x": "y".repeat(100)}});
        let len = obj(0).to_string().len();
        let parts = split((0..10).map(obj).collect(), len * 3);
        assert_eq!(parts.iter().map(Vec::len).collect::<Vec<_>>(), [3, 3, 3, 1]);
        assert_eq!(split(vec![], 100), vec![Vec::<Value>::new()]);
        // An object bigger than a part gets a part of its own.
        let parts = split(vec![obj(1), obj(2)], 10);
        assert_eq!(parts.len(), 2);
    }
}
