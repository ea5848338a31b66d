//! The in-cluster fleet, from a test's side: `real-hub` (fleethub installed from `deploy/` as
//! pods on a real node) and its members `real-1` … `real-N` (a real node each, the agent a pod
//! installed by `kubectl fleet join`). See deploy/local/README.md ("The in-cluster fleet").
//!
//! Pods and ClusterIPs of the real clusters are routed from the host, so a test reaches them
//! with plain HTTP ([`crate::http_get`]).

use kube::Client;

use crate::{Error, Fleet, client};

impl Fleet {
    /// How many members the in-cluster fleet has (0: the fleet runs without real nodes).
    pub fn real_member_count(&self) -> usize {
        self.env_setting("FLEET_REAL_MEMBERS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    }

    /// An admin client for `real-hub`, the hub cluster whose fleethub runs as pods.
    pub async fn real_hub(&self) -> Result<Client, Error> {
        client(&self.kubeconfig("real-hub")).await
    }

    /// An admin client for real member `i` (1-based), `real-<i>`.
    pub async fn real_member(&self, i: usize) -> Result<Client, Error> {
        client(&self.kubeconfig(&format!("real-{i}"))).await
    }

    /// The fleet's registry as pods of the in-cluster fleet reach it: `<the host on the nodes'
    /// bridge>:PORT`. Images keep naming [`Fleet::registry`] (`127.0.0.1:PORT`), which the
    /// nodes' containerd mirrors to this address; an AutoUpdatePolicy run by the in-cluster hub
    /// lists tags here (`spec.repository`).
    pub fn registry_for_pods(&self) -> Result<String, Error> {
        let registry = self.registry()?;
        let port = registry.rsplit(':').next().unwrap_or_default();
        Ok(format!("{}:{port}", self.env_setting("FLEET_REAL_HUB_IP")?))
    }

    /// The demo app's image at `version` in the fleet's registry (`1.0.0`, `1.1.0`, the broken
    /// `1.2.0`, and `1.3.0`, which exits about 20 s after it turned ready;
    /// deploy/local/build-images).
    pub fn demo_image(&self, version: &str) -> Result<String, Error> {
        Ok(format!("{}/demo:{version}", self.registry()?))
    }
}

/// The demo app's Deployment `demo` running `image`: 2 replicas labelled `app=demo`, the
/// PodSecurity `restricted` security context, a readiness probe every second (`/readyz`), and the
/// pod's name in `POD_NAME` (the app answers with its version and pod).
pub fn demo_deployment(image: &str) -> serde_json::Value {
    serde_json::json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "demo"},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "demo"}},
            "template": {"metadata": {"labels": {"app": "demo"}}, "spec": {
                "securityContext": {"runAsNonRoot": true, "runAsUser": 65532, "seccompProfile": {"type": "RuntimeDefault"}},
                "terminationGracePeriodSeconds": 2,
                "containers": [{"name": "demo", "image": image,
                    "env": [{"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
                    "ports": [{"containerPort": 8080}],
                    "readinessProbe": {"httpGet": {"path": "/readyz", "port": 8080}, "periodSeconds": 1},
                    "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}, "limits": {"memory": "64Mi"}},
                    "securityContext": {"allowPrivilegeEscalation": false, "readOnlyRootFilesystem": true,
                                        "capabilities": {"drop": ["ALL"]}}}]}}}})
}
