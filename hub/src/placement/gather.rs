//! Gathering what a placement selects: the hub objects its resource selectors match (a
//! Namespace with everything in it), cleaned and sorted as a snapshot holds them.

use std::sync::Arc;
use std::time::{Duration, Instant};

use fleethub_crds::overrides::{ResourceOverride, ResourceOverrideSnapshot};
use fleethub_crds::{GROUP, Placement, Work};
use k8s_openapi::Resource as _;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{DynamicObject, ListParams};
use kube::discovery::{Discovery, Scope, verbs};
use kube::{Api, Client, Resource, ResourceExt};
use serde_json::{Value, json};
use tokio::sync::Mutex;

use super::content;
use crate::Error;

/// The hub's API discovery, refreshed at most every minute.
#[derive(Default)]
pub struct DiscoveryCache {
    last: Mutex<Option<(Instant, Arc<Discovery>)>>,
}

impl DiscoveryCache {
    /// The hub's API discovery, at most a minute old.
    /// The lock is never held across the discovery requests: a reconcile stuck in them must
    /// not hold up every other placement's reconcile.
    pub async fn get(&self, client: &Client) -> Result<Arc<Discovery>, Error> {
        if let Some((at, d)) = self.last.lock().await.as_ref()
            && at.elapsed() < Duration::from_secs(60)
        {
            return Ok(d.clone());
        }
        let d = Arc::new(Discovery::new(client.clone()).run().await?);
        *self.last.lock().await = Some((Instant::now(), d.clone()));
        Ok(d)
    }
}

/// Namespaced kinds never copied out of a selected namespace: made by controllers, or fleethub's
/// own instructions to the hub (Works, and the ResourceOverrides and their snapshots that say
/// how the namespace's objects change per cluster: members have no use for them, nor their CRDs).
fn skipped(group: &str, kind: &str) -> bool {
    const SKIPPED: &[(&str, &str)] = &[
        ("", "Pod"),
        ("", "Event"),
        ("", "Endpoints"),
        ("", "ReplicationController"),
        ("apps", "ReplicaSet"),
        ("apps", "ControllerRevision"),
        ("events.k8s.io", "Event"),
        ("discovery.k8s.io", "EndpointSlice"),
        ("coordination.k8s.io", "Lease"),
        ("authorization.k8s.io", "LocalSubjectAccessReview"),
    ];
    SKIPPED.contains(&(group, kind))
        || (group == GROUP
            && [
                Work::kind(&()),
                ResourceOverride::kind(&()),
                ResourceOverrideSnapshot::kind(&()),
            ]
            .contains(&kind.into()))
}

/// The selected objects, cleaned and sorted; or why the selectors are unusable.
pub async fn gather(
    client: &Client,
    discovery: &Discovery,
    placement: &Placement,
) -> Result<Result<Vec<Value>, String>, Error> {
    let mut objects = Vec::new();
    for (i, sel) in placement.spec.resource_selectors.iter().enumerate() {
        let gvk = kube::core::GroupVersionKind::gvk(&sel.group, &sel.version, &sel.kind);
        let Some((ar, caps)) = discovery.resolve_gvk(&gvk) else {
            return Ok(Err(format!(
                "spec.resourceSelectors[{i}]: the hub serves no {}/{} {}",
                sel.group, sel.version, sel.kind
            )));
        };
        if caps.scope == Scope::Namespaced {
            return Ok(Err(format!(
                "spec.resourceSelectors[{i}]: {} is namespaced; select its Namespace, which brings everything in it",
                sel.kind
            )));
        }
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
        let selected: Vec<DynamicObject> = match (&sel.name, &sel.label_selector) {
            (Some(name), _) => api.get_opt(name).await?.into_iter().collect(),
            (None, selector) => {
                let mut lp = ListParams::default();
                if let Some(s) = selector {
                    let s = kube::core::Selector::try_from(s.clone()).map_err(|e| {
                        Error::Invalid(format!("spec.resourceSelectors[{i}].labelSelector: {e}"))
                    })?;
                    lp = lp.labels_from(&s);
                }
                api.list(&lp).await?.items
            }
        };
        for obj in selected {
            let name = obj.name_any();
            objects.push(with_type(obj, &ar)?);
            if sel.kind == Namespace::KIND && sel.group.is_empty() {
                objects.extend(namespace_content(client, discovery, &name).await?);
            }
        }
    }
    let mut objects: Vec<Value> = objects
        .into_iter()
        .filter(|o| !content::is_generated(o))
        .map(content::clean)
        .collect();
    content::sort(&mut objects);
    objects.dedup();
    Ok(Ok(objects))
}

fn with_type(obj: DynamicObject, ar: &kube::core::ApiResource) -> Result<Value, Error> {
    let mut v = serde_json::to_value(obj).map_err(|e| Error::Invalid(e.to_string()))?;
    v["apiVersion"] = json!(ar.api_version);
    v["kind"] = json!(ar.kind);
    Ok(v)
}

async fn namespace_content(
    client: &Client,
    discovery: &Discovery,
    namespace: &str,
) -> Result<Vec<Value>, Error> {
    let mut out = Vec::new();
    for group in discovery.groups() {
        for (ar, caps) in group.recommended_resources() {
            if caps.scope != Scope::Namespaced
                || !caps.supports_operation(verbs::LIST)
                || skipped(&ar.group, &ar.kind)
            {
                continue;
            }
            let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, &ar);
            match api.list(&ListParams::default()).await {
                Ok(list) => {
                    for obj in list.items {
                        out.push(with_type(obj, &ar)?);
                    }
                }
                // A kind the hub cannot list (e.g. an aggregated API that is down): skip it.
                Err(kube::Error::Api(e)) if e.code == 404 || e.code == 405 || e.code == 503 => {}
                Err(e) => return Err(e.into()),
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hubs_own_instructions_stay_on_the_hub() {
        for kind in ["Work", "ResourceOverride", "ResourceOverrideSnapshot"] {
            assert!(skipped(GROUP, kind), "{kind}");
        }
        // A PhasedRollout is placed with its StatefulSet; ConfigMaps and ReplicaSets as usual.
        assert!(!skipped(GROUP, "PhasedRollout"));
        assert!(!skipped("", "ConfigMap"));
        assert!(skipped("apps", "ReplicaSet"));
    }
}
