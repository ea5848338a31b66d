//! One manifest of a Work: what it names, and the object the agent applies for it.
//!
//! The agent applies a manifest as the hub wrote it, minus fields only an API server may set, plus
//! what lets the agent find the object again: the placement label (which the agent's watches
//! select on), an annotation naming the Work (which maps a watch event back to the Work), and,
//! only when the agent creates the object, an ownerReference to the Work's AppliedWork.

use fleethub_crds::applied_work::AppliedWork;
use fleethub_crds::applied_work::WORK_ANNOTATION;
use fleethub_crds::names::PLACEMENT_LABEL;
use fleethub_crds::work::ManifestIdentifier;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::Resource;
use kube::api::GroupVersionKind;
use serde_json::{Map, Value, json};

/// Metadata fields the API server owns; a manifest carrying them (e.g. copied from a live
/// object) is applied without them. `ownerReferences` of a hub object name hub uids, which mean
/// nothing on the member.
const SERVER_METADATA: [&str; 9] = [
    "resourceVersion",
    "uid",
    "creationTimestamp",
    "managedFields",
    "generation",
    "selfLink",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "ownerReferences",
];

/// A manifest with the fields that identify it.
#[derive(Debug, Clone, PartialEq)]
pub struct ParsedManifest {
    /// Position in `spec.workload.manifests`.
    pub ordinal: i32,
    /// API group ("" for core).
    pub group: String,
    /// API version.
    pub version: String,
    /// Kind.
    pub kind: String,
    /// `metadata.namespace` as written (the applied namespace may differ; see [`prepare`]).
    pub namespace: Option<String>,
    /// `metadata.name`.
    pub name: String,
    /// The manifest itself.
    pub object: Value,
}

/// A manifest the agent cannot apply, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidManifest {
    /// As much of its identity as could be read.
    pub identifier: ManifestIdentifier,
    /// Why it is refused.
    pub message: String,
}

/// Reads the identity of manifest number `ordinal`.
pub fn parse(ordinal: usize, manifest: &Value) -> Result<ParsedManifest, Box<InvalidManifest>> {
    let ordinal = i32::try_from(ordinal).unwrap_or(i32::MAX);
    let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
    let api_version = text(&manifest["apiVersion"]);
    let (group, version) = match api_version.split_once('/') {
        Some((g, v)) => (g.to_string(), v.to_string()),
        None => (String::new(), api_version.clone()),
    };
    let parsed = ParsedManifest {
        ordinal,
        group,
        version,
        kind: text(&manifest["kind"]),
        namespace: manifest["metadata"]["namespace"]
            .as_str()
            .filter(|ns| !ns.is_empty())
            .map(str::to_string),
        name: text(&manifest["metadata"]["name"]),
        object: manifest.clone(),
    };
    let missing: Vec<&str> = [
        ("apiVersion", parsed.version.is_empty()),
        ("kind", parsed.kind.is_empty()),
        ("metadata.name", parsed.name.is_empty()),
    ]
    .into_iter()
    .filter_map(|(field, empty)| empty.then_some(field))
    .collect();
    if missing.is_empty() {
        Ok(parsed)
    } else {
        Err(Box::new(InvalidManifest {
            identifier: parsed.identifier(),
            message: format!(
                "manifest {ordinal} cannot be applied: it has no {}",
                missing.join(", no ")
            ),
        }))
    }
}

impl ParsedManifest {
    /// Its identifier in the Work's status.
    pub fn identifier(&self) -> ManifestIdentifier {
        ManifestIdentifier {
            ordinal: self.ordinal,
            group: self.group.clone(),
            version: self.version.clone(),
            kind: self.kind.clone(),
            namespace: self.namespace.clone(),
            name: self.name.clone(),
        }
    }

    /// Its group, version and kind.
    pub fn gvk(&self) -> GroupVersionKind {
        GroupVersionKind::gvk(&self.group, &self.version, &self.kind)
    }
}

/// `Kind namespace/name` (or `Kind name`), for messages.
pub fn describe(kind: &str, namespace: Option<&str>, name: &str) -> String {
    match namespace {
        Some(ns) => format!("{kind} {ns}/{name}"),
        None => format!("{kind} {name}"),
    }
}

/// What the agent adds to the object it applies for a manifest.
#[derive(Debug, Clone)]
pub struct Decoration<'a> {
    /// The Work's placement: the value of the placement label.
    pub placement: &'a str,
    /// The Work, `namespace/name`: the value of [`WORK_ANNOTATION`].
    pub work: &'a str,
    /// The namespace to apply into (`None` for cluster-scoped objects).
    pub namespace: Option<&'a str>,
    /// The AppliedWork owner reference, when the agent creates (or already owns) the object.
    pub owner: Option<OwnerReference>,
}

/// The object to server-side apply for `manifest`.
pub fn prepare(manifest: &Value, decoration: &Decoration<'_>) -> Value {
    let mut object = manifest.clone();
    sanitize(&mut object);
    leave_default_partition(&mut object);
    let Some(root) = object.as_object_mut() else {
        return object;
    };
    let mut meta = take_object(root, "metadata");
    match decoration.namespace {
        Some(ns) => {
            meta.insert("namespace".into(), json!(ns));
        }
        None => {
            meta.remove("namespace");
        }
    }
    let mut labels = take_object(&mut meta, "labels");
    labels.insert(PLACEMENT_LABEL.into(), json!(decoration.placement));
    meta.insert("labels".into(), Value::Object(labels));
    let mut annotations = take_object(&mut meta, "annotations");
    annotations.insert(WORK_ANNOTATION.into(), json!(decoration.work));
    meta.insert("annotations".into(), Value::Object(annotations));
    if let Some(owner) = &decoration.owner {
        meta.insert("ownerReferences".into(), json!([owner]));
    }
    root.insert("metadata".into(), Value::Object(meta));
    object
}

/// Drops a StatefulSet's `spec.updateStrategy.rollingUpdate.partition` when it is 0, the
/// default the hub's API server fills in. Applying it would make the agent an owner of the
/// partition and force it back to 0 on every apply, fighting the member's PhasedRollout (which
/// alone holds and lowers it); left out, the member defaults it to 0 all the same.
fn leave_default_partition(object: &mut Value) {
    let is_statefulset = object["kind"] == "StatefulSet"
        && object["apiVersion"]
            .as_str()
            .is_some_and(|v| v.starts_with("apps/"));
    if !is_statefulset {
        return;
    }
    let Some(rolling) = object
        .pointer_mut("/spec/updateStrategy/rollingUpdate")
        .and_then(Value::as_object_mut)
    else {
        return;
    };
    if rolling.get("partition").and_then(Value::as_i64) == Some(0) {
        rolling.remove("partition");
    }
}

/// Removes `map[key]` and returns it if it is an object, else an empty object.
fn take_object(map: &mut Map<String, Value>, key: &str) -> Map<String, Value> {
    match map.remove(key) {
        Some(Value::Object(m)) => m,
        _ => Map::new(),
    }
}

/// Removes `status` and the server-owned metadata fields.
pub fn sanitize(object: &mut Value) {
    if let Some(root) = object.as_object_mut() {
        root.remove("status");
        if let Some(meta) = root.get_mut("metadata").and_then(Value::as_object_mut) {
            for field in SERVER_METADATA {
                meta.remove(field);
            }
        }
    }
}

/// The owner reference every object the agent creates for a Work carries. `None` until the
/// AppliedWork has a uid (it always has once the API server returned it).
pub fn owner_reference(applied_work: &AppliedWork) -> Option<OwnerReference> {
    Some(OwnerReference {
        api_version: AppliedWork::api_version(&()).into_owned(),
        kind: AppliedWork::kind(&()).into_owned(),
        name: applied_work.metadata.name.clone()?,
        uid: applied_work.metadata.uid.clone()?,
        // Foreground deletion of the AppliedWork waits for the object to be gone.
        block_owner_deletion: Some(true),
        controller: None,
    })
}

/// Whether `owners` include the AppliedWork named `applied_work` (of any uid: an AppliedWork
/// deleted and re-created keeps the objects it had created).
pub fn owned_by(owners: &[OwnerReference], applied_work: &str) -> bool {
    owners.iter().any(|o| {
        o.kind == AppliedWork::kind(&())
            && o.api_version == AppliedWork::api_version(&())
            && o.name == applied_work
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn deployment() -> Value {
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "app", "labels": {"app": "web"},
                         "resourceVersion": "12", "uid": "hub-uid", "creationTimestamp": "2025-01-01T00:00:00Z",
                         "managedFields": [{}], "generation": 3,
                         "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "x", "uid": "hub"}]},
            "spec": {"replicas": 2},
            "status": {"replicas": 2}
        })
    }

    #[test]
    fn parses_identity() {
        let m = parse(2, &deployment()).unwrap();
        assert_eq!(
            m.identifier(),
            ManifestIdentifier {
                ordinal: 2,
                group: "apps".into(),
                version: "v1".into(),
                kind: "Deployment".into(),
                namespace: Some("app".into()),
                name: "web".into(),
            }
        );
        let core = parse(
            0,
            &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "app"}}),
        )
        .unwrap();
        assert_eq!(
            (
                core.group.as_str(),
                core.version.as_str(),
                core.namespace.as_deref()
            ),
            ("", "v1", None)
        );
        assert_eq!(core.gvk(), GroupVersionKind::gvk("", "v1", "Namespace"));
    }

    #[test]
    fn refuses_manifests_without_identity() {
        let err = parse(
            4,
            &json!({"kind": "ConfigMap", "metadata": {"generateName": "x-"}}),
        )
        .unwrap_err();
        assert_eq!(
            err.message,
            "manifest 4 cannot be applied: it has no apiVersion, no metadata.name"
        );
        assert_eq!(err.identifier.kind, "ConfigMap");
        assert_eq!(err.identifier.ordinal, 4);
        assert!(parse(0, &json!("not an object")).is_err());
    }

    #[test]
    fn prepare_strips_server_fields_and_marks_the_object() {
        let owner = OwnerReference {
            api_version: "fleethub.dev/v1alpha1".into(),
            kind: "AppliedWork".into(),
            name: "fleet-member-m.web".into(),
            uid: "aw-uid".into(),
            block_owner_deletion: Some(true),
            controller: None,
        };
        let got = prepare(
            &deployment(),
            &Decoration {
                placement: "web",
                work: "fleet-member-m/web",
                namespace: Some("app"),
                owner: Some(owner),
            },
        );
        assert_eq!(
            got,
            json!({
                "apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {
                    "name": "web", "namespace": "app",
                    "labels": {"app": "web", "fleethub.dev/placement": "web"},
                    "annotations": {"fleethub.dev/work": "fleet-member-m/web"},
                    "ownerReferences": [{"apiVersion": "fleethub.dev/v1alpha1", "kind": "AppliedWork",
                                         "name": "fleet-member-m.web", "uid": "aw-uid", "blockOwnerDeletion": true}]
                },
                "spec": {"replicas": 2}
            })
        );
    }

    #[test]
    fn prepare_without_owner_sets_the_namespace_it_is_told() {
        let got = prepare(
            &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "labels": null}}),
            &Decoration {
                placement: "p",
                work: "ns/w",
                namespace: Some("default"),
                owner: None,
            },
        );
        assert_eq!(got["metadata"]["namespace"], "default");
        assert_eq!(
            got["metadata"]["labels"],
            json!({"fleethub.dev/placement": "p"})
        );
        assert!(got["metadata"].get("ownerReferences").is_none());

        let cluster_scoped = prepare(
            &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "a", "namespace": "x"}}),
            &Decoration {
                placement: "p",
                work: "ns/w",
                namespace: None,
                owner: None,
            },
        );
        assert!(cluster_scoped["metadata"].get("namespace").is_none());
    }

    #[test]
    fn ownership_is_by_applied_work_name() {
        let mut aw = AppliedWork::new(
            "fleet-member-m.web",
            fleethub_crds::applied_work::AppliedWorkSpec {
                work_namespace: "fleet-member-m".into(),
                work_name: "web".into(),
            },
        );
        assert!(owner_reference(&aw).is_none(), "no uid yet");
        aw.metadata.uid = Some("u1".into());
        let owner = owner_reference(&aw).unwrap();
        assert!(owned_by(std::slice::from_ref(&owner), "fleet-member-m.web"));
        assert!(owned_by(
            &[OwnerReference {
                uid: "u0".into(),
                ..owner.clone()
            }],
            "fleet-member-m.web"
        ));
        assert!(!owned_by(
            std::slice::from_ref(&owner),
            "fleet-member-m.other"
        ));
        assert!(!owned_by(
            &[OwnerReference {
                kind: "ConfigMap".into(),
                ..owner
            }],
            "fleet-member-m.web"
        ));
        assert!(!owned_by(&[], "fleet-member-m.web"));
    }

    #[test]
    fn prepare_leaves_a_statefulsets_default_partition_to_the_member() {
        let decoration = Decoration {
            placement: "p",
            work: "ns/w",
            namespace: Some("app"),
            owner: None,
        };
        let set = |partition: i64| {
            json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "db"},
                   "spec": {"updateStrategy": {"type": "RollingUpdate",
                                               "rollingUpdate": {"partition": partition, "maxUnavailable": 1}}}})
        };
        let prepared = prepare(&set(0), &decoration);
        assert_eq!(
            prepared["spec"]["updateStrategy"],
            json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1}})
        );
        let prepared = prepare(&set(2), &decoration);
        assert_eq!(
            prepared["spec"]["updateStrategy"]["rollingUpdate"]["partition"], 2,
            "a partition the hub sets is the hub's"
        );
        let mut other = set(0);
        other["kind"] = json!("Rollout");
        other["apiVersion"] = json!("example.dev/v1");
        let prepared = prepare(&other, &decoration);
        assert_eq!(
            prepared["spec"]["updateStrategy"]["rollingUpdate"]["partition"],
            0
        );
    }

    #[test]
    fn describes_objects() {
        assert_eq!(
            describe("Deployment", Some("app"), "web"),
            "Deployment app/web"
        );
        assert_eq!(describe("Namespace", None, "app"), "Namespace app");
    }
}
