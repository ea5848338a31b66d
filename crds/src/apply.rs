//! Typed bodies for server-side apply of a status subresource: apiVersion, kind, the name (and
//! optionally a resourceVersion precondition) and the status, nothing else, so a controller
//! owns only the status fields it sets. Built from the Rust types, never from `json!`.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;
use serde::Serialize;

/// The body of a status apply for an object of kind `K`.
#[derive(Serialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct StatusApply<'a, S: Serialize> {
    api_version: String,
    kind: String,
    metadata: ObjectMeta,
    status: &'a S,
}

impl<'a, S: Serialize> StatusApply<'a, S> {
    /// Sets `status` on the object `name` of kind `K` (with `namespace` for a namespaced kind).
    pub fn new<K: Resource<DynamicType = ()>>(
        name: &str,
        namespace: Option<&str>,
        status: &'a S,
    ) -> Self {
        Self {
            api_version: K::api_version(&()).into_owned(),
            kind: K::kind(&()).into_owned(),
            metadata: ObjectMeta {
                name: Some(name.to_string()),
                namespace: namespace.map(str::to_string),
                ..Default::default()
            },
            status,
        }
    }

    /// Applies only if the object is still at `resource_version` (optimistic concurrency: a
    /// write planned on a stale view fails with a conflict).
    pub fn at_version(mut self, resource_version: Option<String>) -> Self {
        self.metadata.resource_version = resource_version;
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::UpdateRun;
    use crate::update_run::UpdateRunStatus;

    #[test]
    fn carries_only_type_name_version_and_status() {
        let status = UpdateRunStatus {
            current_stage: Some("canary".into()),
            ..Default::default()
        };
        let body = StatusApply::new::<UpdateRun>("r1", None, &status).at_version(Some("7".into()));
        assert_eq!(
            serde_json::to_value(&body).unwrap(),
            serde_json::json!({
                "apiVersion": "fleethub.dev/v1alpha1",
                "kind": "UpdateRun",
                "metadata": {"name": "r1", "resourceVersion": "7"},
                "status": {"currentStage": "canary"},
            })
        );
    }
}
