//! What `join` and `unjoin` do through a cluster's API: apply an object, wait for a condition
//! on one or for it to go.

use std::time::Duration;

use kube::api::{ApiResource, DynamicObject, Patch, PatchParams};
use kube::core::GroupVersionKind;
use kube::discovery::Scope;
use kube::runtime::wait::{Condition, await_condition};
use kube::{Api, Client, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::error::{Error, Result};
use crate::runs::FIELD_MANAGER;

/// Server-side applies the typed object `obj` through `api` as `kubectl-fleet`.
pub(super) async fn apply_typed<K>(api: &Api<K>, obj: &K, cluster: &str) -> Result<()>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Serialize + std::fmt::Debug,
{
    let name = obj.name_any();
    api.patch(
        &name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(obj),
    )
    .await
    .map_err(Error::api(format!(
        "applying {} {name} in {cluster}",
        K::kind(&())
    )))?;
    Ok(())
}

/// Watches object `name` of `api` until `cond` holds, bounded by `timeout`.
pub(super) async fn wait<K>(
    api: &Api<K>,
    name: &str,
    what: &str,
    timeout: Duration,
    cond: impl Condition<K>,
) -> Result<K>
where
    K: Resource + Clone + std::fmt::Debug + DeserializeOwned + Send + 'static,
{
    match tokio::time::timeout(timeout, await_condition(api.clone(), name, cond)).await {
        Ok(Ok(Some(obj))) => Ok(obj),
        Ok(Ok(None)) => Err(Error::Refused(format!("{what}: {name} disappeared"))),
        Ok(Err(e)) => Err(Error::Refused(format!("watching for {what}: {e}"))),
        Err(_) => Err(Error::Timeout(format!(
            "timed out after {} waiting for {what}",
            fleethub_crds::duration::format(timeout)
        ))),
    }
}

/// Watches until object `name` of `api` does not exist, bounded by `timeout`.
pub(super) async fn wait_gone<K>(
    api: &Api<K>,
    name: &str,
    what: &str,
    timeout: Duration,
) -> Result<()>
where
    K: Resource + Clone + std::fmt::Debug + DeserializeOwned + Send + 'static,
{
    let gone = |o: Option<&K>| o.is_none();
    match tokio::time::timeout(timeout, await_condition(api.clone(), name, gone)).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) => Err(Error::Refused(format!("watching for {what}: {e}"))),
        Err(_) => Err(Error::Timeout(format!(
            "timed out after {} waiting for {what}",
            fleethub_crds::duration::format(timeout)
        ))),
    }
}

/// Server-side applies `obj` (any kind the cluster serves) as `kubectl-fleet`.
pub(super) async fn apply(client: &Client, obj: &Value, cluster: &str) -> Result<()> {
    let (ar, api) = dynamic_api(client, obj, cluster).await?;
    let name = obj["metadata"]["name"].as_str().unwrap_or_default();
    api.patch(
        name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(obj),
    )
    .await
    .map_err(Error::api(format!(
        "applying {} {name} in {cluster}",
        ar.kind
    )))?;
    Ok(())
}

/// The API of `obj`'s kind (discovered), in its namespace if the kind is namespaced.
pub(super) async fn dynamic_api(
    client: &Client,
    obj: &Value,
    cluster: &str,
) -> Result<(ApiResource, Api<DynamicObject>)> {
    let api_version = obj["apiVersion"].as_str().unwrap_or_default();
    let kind = obj["kind"].as_str().unwrap_or_default();
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    let gvk = GroupVersionKind::gvk(group, version, kind);
    let (ar, caps) = kube::discovery::pinned_kind(client, &gvk)
        .await
        .map_err(Error::api(format!(
            "discovering {api_version} {kind} in {cluster}"
        )))?;
    let api = match (caps.scope, obj["metadata"]["namespace"].as_str()) {
        (Scope::Namespaced, Some(ns)) => Api::namespaced_with(client.clone(), ns, &ar),
        _ => Api::all_with(client.clone(), &ar),
    };
    Ok((ar, api))
}
