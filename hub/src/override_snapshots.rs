//! The override snapshotter: every ClusterResourceOverride and ResourceOverride is captured in
//! immutable, numbered snapshots (`<override>-<index>`, owned by the override), as a placement's
//! objects are. A new snapshot is taken when the override's spec differs from its newest
//! snapshot's; the work generator applies snapshots, never the overrides themselves.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::sync::Arc;
use std::time::Duration;

use fleethub_crds::field_manager;
use fleethub_crds::overrides::{
    ClusterResourceOverride, ClusterResourceOverrideSnapshot, ClusterResourceOverrideSnapshotSpec,
    OVERRIDE_INDEX_LABEL, OVERRIDE_LABEL, ResourceOverride, ResourceOverrideSnapshot,
    ResourceOverrideSnapshotSpec, snapshot_name,
};
use futures::StreamExt;
use kube::api::{ListParams, PostParams};
use kube::runtime::controller::Action as Requeue;
use kube::{Api, Client, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio_util::sync::CancellationToken;

use crate::Error;
use crate::error::{EXISTS, ok_if};
use crate::metrics::Metrics;

/// Runs both snapshotters until `shutdown`.
pub async fn run(client: Client, metrics: Metrics, shutdown: CancellationToken) {
    let cluster = Context::<ClusterResourceOverride, ClusterResourceOverrideSnapshot> {
        client: client.clone(),
        new: |o, index| {
            ClusterResourceOverrideSnapshot::new(
                &snapshot_name(&o.name_any(), index),
                ClusterResourceOverrideSnapshotSpec {
                    override_name: o.name_any(),
                    index,
                    override_spec: o.spec.clone(),
                },
            )
        },
        same: |o, s| s.spec.override_spec == o.spec,
        index: |s| s.spec.index,
        api: |client, _| Api::all(client),
    };
    let namespaced = Context::<ResourceOverride, ResourceOverrideSnapshot> {
        client,
        new: |o, index| {
            let mut s = ResourceOverrideSnapshot::new(
                &snapshot_name(&o.name_any(), index),
                ResourceOverrideSnapshotSpec {
                    override_name: o.name_any(),
                    index,
                    override_spec: o.spec.clone(),
                },
            );
            s.metadata.namespace = o.namespace();
            s
        },
        same: |o, s| s.spec.override_spec == o.spec,
        index: |s| s.spec.index,
        api: |client, namespace| Api::namespaced(client, namespace.unwrap_or_default()),
    };
    futures::join!(
        snapshotter(
            cluster,
            metrics.clone(),
            shutdown.clone(),
            "cluster-resource-override-snapshots"
        ),
        snapshotter(namespaced, metrics, shutdown, "resource-override-snapshots"),
    );
}

/// A controller of overrides `O` that keeps their snapshots `S` current.
async fn snapshotter<O, S>(
    ctx: Context<O, S>,
    metrics: Metrics,
    shutdown: CancellationToken,
    name: &'static str,
) where
    O: Resource<DynamicType = ()> + Clone + Debug + DeserializeOwned + Send + Sync + 'static,
    S: Resource<DynamicType = ()>
        + Clone
        + Debug
        + Serialize
        + DeserializeOwned
        + Send
        + Sync
        + 'static,
    O: fleethub_runtime::Watched,
{
    let client = ctx.client.clone();
    fleethub_runtime::controller_for(Api::<O>::all(client))
        .graceful_shutdown_on(async move { shutdown.cancelled().await })
        .run(reconcile, error_policy, Arc::new(ctx))
        .for_each(move |res| {
            metrics.observe(name, &res);
            std::future::ready(())
        })
        .await;
}

/// How one kind of override is snapshotted.
struct Context<O, S> {
    client: Client,
    /// Snapshot `index` of an override.
    new: fn(&O, i64) -> S,
    /// Whether a snapshot holds the override's spec as it is.
    same: fn(&O, &S) -> bool,
    /// A snapshot's index.
    index: fn(&S) -> i64,
    /// The API of an override's snapshots, given its namespace (cluster-wide or namespaced).
    api: fn(Client, Option<&str>) -> Api<S>,
}

fn error_policy<O: Resource, S>(o: Arc<O>, error: &Error, _: Arc<Context<O, S>>) -> Requeue {
    tracing::warn!(r#override = %o.name_any(), error = %error, "snapshotting the override failed; retrying");
    Requeue::requeue(Duration::from_secs(5))
}

#[tracing::instrument(skip_all, fields(r#override = %o.name_any()))]
async fn reconcile<O, S>(o: Arc<O>, ctx: Arc<Context<O, S>>) -> Result<Requeue, Error>
where
    O: Resource<DynamicType = ()> + Clone + Debug,
    S: Resource<DynamicType = ()> + Clone + Debug + Serialize + DeserializeOwned,
{
    if o.meta().deletion_timestamp.is_some() {
        return Ok(Requeue::await_change()); // its snapshots go with it (owner references)
    }
    let api: Api<S> = (ctx.api)(ctx.client.clone(), o.meta().namespace.as_deref());
    let listed = api
        .list(&ListParams::default().labels(&format!("{OVERRIDE_LABEL}={}", o.name_any())))
        .await?;
    let newest = listed.items.iter().max_by_key(|s| (ctx.index)(s));
    if newest.is_some_and(|s| (ctx.same)(&o, s)) {
        return Ok(Requeue::await_change());
    }
    let index = newest.map_or(0, |s| (ctx.index)(s) + 1);
    let mut snapshot = (ctx.new)(&o, index);
    let meta = snapshot.meta_mut();
    meta.labels = Some(BTreeMap::from([
        (OVERRIDE_LABEL.to_string(), o.name_any()),
        (OVERRIDE_INDEX_LABEL.to_string(), index.to_string()),
    ]));
    meta.owner_references = o.controller_owner_ref(&()).map(|r| vec![r]);
    let params = PostParams {
        field_manager: Some(field_manager::PLACEMENT.to_string()),
        ..Default::default()
    };
    ok_if(api.create(&params, &snapshot).await, EXISTS)?;
    tracing::info!(index, snapshot = %snapshot.name_any(), "took a new override snapshot");
    Ok(Requeue::await_change())
}
