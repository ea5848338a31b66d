//! The member agent's objects in a member cluster: the kustomize base `deploy/member-agent/`,
//! embedded here so `join` and `kubectl apply -k` install the same thing, plus the Secret with
//! the member's hub credential.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::{Value, json};

use crate::error::{Error, Result};

/// The member namespace the agent runs in.
pub const NAMESPACE: &str = "fleethub-system";
/// The agent's Deployment.
pub const DEPLOYMENT: &str = "fleethub-member-agent";
/// The Secret the Deployment reads its hub kubeconfig and member name from.
pub const HUB_SECRET: &str = "fleethub-member-agent-hub";

/// The base's resources, in its kustomization's order.
const BASE: [(&str, &str); 4] = [
    (
        "namespace.yaml",
        include_str!("../../../deploy/member-agent/namespace.yaml"),
    ),
    (
        "serviceaccount.yaml",
        include_str!("../../../deploy/member-agent/serviceaccount.yaml"),
    ),
    (
        "rbac.yaml",
        include_str!("../../../deploy/member-agent/rbac.yaml"),
    ),
    (
        "deployment.yaml",
        include_str!("../../../deploy/member-agent/deployment.yaml"),
    ),
];
const KUSTOMIZATION: &str = include_str!("../../../deploy/member-agent/kustomization.yaml");

/// The image the base deploys (its `images:` entry: name and tag).
pub fn default_image() -> Result<String> {
    let k: Value = serde_norway::from_str(KUSTOMIZATION)
        .map_err(|e| Error::Invalid(format!("deploy/member-agent/kustomization.yaml: {e}")))?;
    let image = &k["images"][0];
    match (image["name"].as_str(), image["newTag"].as_str()) {
        (Some(n), Some(t)) => Ok(format!("{n}:{t}")),
        (Some(n), None) => Ok(n.to_string()),
        _ => Err(Error::Invalid(
            "deploy/member-agent/kustomization.yaml names no image".into(),
        )),
    }
}

/// The Secret the agent's Deployment reads: `hub_kubeconfig` and the member's name.
fn hub_secret(member: &str, hub_kubeconfig: &str) -> Secret {
    let labels = [
        ("app.kubernetes.io/name", DEPLOYMENT),
        ("app.kubernetes.io/part-of", "fleethub"),
    ];
    Secret {
        metadata: ObjectMeta {
            name: Some(HUB_SECRET.to_string()),
            namespace: Some(NAMESPACE.to_string()),
            labels: Some(
                labels
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            ),
            ..Default::default()
        },
        type_: Some("Opaque".to_string()),
        string_data: Some(BTreeMap::from([
            ("kubeconfig".to_string(), hub_kubeconfig.to_string()),
            ("member-name".to_string(), member.to_string()),
        ])),
        ..Default::default()
    }
}

/// Every object to apply in the member, in order: the base (with `image` or the base's own) and
/// then the Secret holding `hub_kubeconfig` for member `member`.
pub fn objects(member: &str, hub_kubeconfig: &str, image: Option<&str>) -> Result<Vec<Value>> {
    let image = match image {
        Some(i) => i.to_string(),
        None => default_image()?,
    };
    let secret = serde_json::to_value(hub_secret(member, hub_kubeconfig))
        .map_err(|e| Error::Invalid(format!("the agent's hub Secret: {e}")))?;
    let mut out = Vec::new();
    for (file, text) in BASE {
        // The base's objects are of several kinds and only ever passed on: untyped.
        for doc in serde_norway::Deserializer::from_str(text) {
            let mut v = <Value as serde::Deserialize>::deserialize(doc)
                .map_err(|e| Error::Invalid(format!("deploy/member-agent/{file}: {e}")))?;
            if v.is_null() {
                continue;
            }
            if v["kind"] == "Deployment" {
                for c in v["spec"]["template"]["spec"]["containers"]
                    .as_array_mut()
                    .into_iter()
                    .flatten()
                {
                    c["image"] = json!(image);
                }
            }
            out.push(v);
        }
    }
    // The namespace first, the Secret before the Deployment that mounts it.
    let at = out
        .iter()
        .position(|o| o["kind"] == "Deployment")
        .unwrap_or(out.len());
    out.insert(at, secret);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_base_parses_and_the_image_and_secret_are_set() {
        let objs = objects(
            "member-7",
            "apiVersion: v1\nkind: Config\n",
            Some("reg/agent:1"),
        )
        .unwrap();
        let kinds: Vec<&str> = objs.iter().map(|o| o["kind"].as_str().unwrap()).collect();
        assert_eq!(
            kinds,
            [
                "Namespace",
                "ServiceAccount",
                "ClusterRole",
                "ClusterRoleBinding",
                "Secret",
                "Deployment"
            ]
        );
        let deploy = objs.iter().find(|o| o["kind"] == "Deployment").unwrap();
        assert_eq!(deploy["metadata"]["name"], DEPLOYMENT);
        assert_eq!(deploy["metadata"]["namespace"], NAMESPACE);
        assert_eq!(
            deploy["spec"]["template"]["spec"]["containers"][0]["image"],
            "reg/agent:1"
        );
        let secret = objs.iter().find(|o| o["kind"] == "Secret").unwrap();
        assert_eq!(secret["stringData"]["member-name"], "member-7");
        assert_eq!(secret["metadata"]["name"], HUB_SECRET);
        // The Deployment reads the Secret the plugin writes.
        let env = deploy["spec"]["template"]["spec"]["containers"][0]["env"]
            .as_array()
            .unwrap();
        assert!(
            env.iter()
                .any(|e| e["valueFrom"]["secretKeyRef"]["name"] == HUB_SECRET)
        );
    }

    #[test]
    fn default_image_comes_from_the_kustomization() {
        let image = default_image().unwrap();
        assert!(image.starts_with("fleethub-member-agent:"), "{image}");
        let objs = objects("m", "", None).unwrap();
        let deploy = objs.iter().find(|o| o["kind"] == "Deployment").unwrap();
        assert_eq!(
            deploy["spec"]["template"]["spec"]["containers"][0]["image"],
            image.as_str()
        );
    }
}
