//! The placement controller: cuts a new ResourceSnapshot whenever the selected hub objects'
//! content changes, keeps a bounded history, keeps one Binding per selected cluster (binding
//! them itself under RollingUpdate), and rolls the bindings up into the placement's status.
//! Each reconcile observes, asks the pure [`plan`](super::plan) what to write, writes it, and
//! reports the status.

use std::sync::Arc;
use std::time::{Duration, Instant};

use fleethub_crds::field_manager::PLACEMENT as FIELD_MANAGER;
use fleethub_crds::{
    AutoUpdatePolicy, Binding, MemberCluster, Placement, ResourceSnapshot, UpdateRun, Work, names,
};
use futures::{StreamExt, stream};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::Action as Requeue;
use kube::runtime::controller::Error as ControllerError;
use kube::runtime::reflector;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Api, Client, ResourceExt};
use tokio_util::sync::CancellationToken;

use super::clusters::{BindingChange, Member};
use super::content_marks::ContentMarks;
use super::gather::{self, DiscoveryCache};
use super::plan::{self, NewSnapshot, Observed, Plan};
use super::snapshot_cache::{self, OwnSnapshotWrites};
use super::status_pace::StatusPace;
use super::triggers;
use super::version_metrics;
use crate::Error;
use crate::clock::Clock;
use crate::error::{EXISTS, GONE, ok_if};
use crate::metrics::Metrics;
use fleethub_runtime::CACHE_WAIT;
use fleethub_runtime::last_written::LastWritten;
use fleethub_runtime::shared::Subscription;

struct Context {
    client: Client,
    clock: Arc<dyn Clock>,
    discovery: DiscoveryCache,
    bindings: Store<Binding>,
    members: Store<MemberCluster>,
    /// The snapshots without their manifests, and this controller's writes of them until that
    /// cache shows them.
    snapshots: Store<ResourceSnapshot>,
    own_snapshot_writes: OwnSnapshotWrites,
    content: Arc<ContentMarks>,
    /// The placements' cache.
    placements: Store<Placement>,
    /// What this controller's status writes returned, until the cache has them: a reconcile
    /// that follows its own write closely (a Binding changed meanwhile) plans from it, not from
    /// the copy before it, and does not write the same status twice.
    written: LastWritten<Placement>,
    /// When each status was last written: a change of detail alone waits for the interval.
    pace: StatusPace,
    metrics: Metrics,
    /// The Works (shared with the work generator): how a cluster's move to a snapshot ended,
    /// for the version metrics.
    works: Store<Work>,
    /// The AutoUpdatePolicies: whose target images the version metrics label clusters with.
    policies: Store<AutoUpdatePolicy>,
}

impl Context {
    /// The placement to plan on: the newest of the cached one and this controller's own last
    /// status write of it; read again when neither can be trusted.
    async fn freshest(&self, cached: Arc<Placement>) -> Result<Option<Arc<Placement>>, Error> {
        let name = cached.name_any();
        let placements: Api<Placement> = Api::all(self.client.clone());
        // Writes of placements deleted since are dropped (the cache forgets them first).
        if !self.written.is_empty() {
            self.written
                .retain(|name, _| self.placements.get(&ObjectRef::new(name)).is_some());
        }
        self.own_snapshot_writes
            .retain(|name| self.placements.get(&ObjectRef::new(name)).is_some());
        self.written
            .newest_or_read(&name, Some(cached), || placements.get_opt(&name))
            .await
            .map_err(Error::from)
    }
}

/// Binding writes of one reconcile made at once.
const BINDING_WRITES: usize = 16;

/// Runs the controller until `shutdown`.
pub async fn run(
    client: Client,
    clock: Arc<dyn Clock>,
    metrics: Metrics,
    members: Subscription<MemberCluster>,
    bindings: Subscription<Binding>,
    works: Store<Work>,
    shutdown: CancellationToken,
) {
    let (snapshots, snapshots_writer) = reflector::store::<ResourceSnapshot>();
    let (policies, policies_writer) = reflector::store::<AutoUpdatePolicy>();
    let policy_stream = fleethub_runtime::reflected_stream(
        Api::<AutoUpdatePolicy>::all(client.clone()),
        policies_writer,
    );
    let (bindings, binding_stream) = (bindings.store.clone(), bindings.touched());
    let member_stream = triggers::member_stream(members.events, triggers::selection_inputs);
    let members = members.store;

    let controller = fleethub_runtime::controller_for(Api::<Placement>::all(client.clone()));
    let placements = controller.store();
    let content = Arc::new(ContentMarks::default());
    let content_changes = triggers::content_changes(&client, &placements, &content);
    let ctx = Arc::new(Context {
        client: client.clone(),
        clock,
        discovery: DiscoveryCache::default(),
        bindings,
        members,
        snapshots,
        own_snapshot_writes: OwnSnapshotWrites::default(),
        content,
        placements: placements.clone(),
        written: LastWritten::slimmed_by(fleethub_runtime::strip_managed_fields),
        pace: StatusPace::default(),
        metrics: metrics.clone(),
        works,
        policies,
    });
    controller
        .owns_stream(fleethub_runtime::slim_reflected_stream(
            Api::<ResourceSnapshot>::all(client.clone()),
            snapshots_writer,
            snapshot_cache::slim,
        ))
        .watches_stream(binding_stream, |b: Binding| {
            Some(ObjectRef::<Placement>::new(&b.spec.placement_name))
        })
        .watches_stream(member_stream, move |_m: MemberCluster| {
            placements
                .state()
                .iter()
                .map(|p| ObjectRef::from_obj(p.as_ref()))
                .collect::<Vec<_>>()
        })
        // A policy made, changed or deleted changes its placement's version metrics.
        .watches_stream(policy_stream, |p: AutoUpdatePolicy| {
            Some(ObjectRef::<Placement>::new(&p.spec.placement_name))
        })
        .reconcile_on(content_changes)
        .graceful_shutdown_on(async move { shutdown.cancelled().await })
        .run(
            |o, c| crate::error::bounded(reconcile(o, c)),
            error_policy,
            ctx,
        )
        .for_each(move |res| {
            // A placement deleted at once (no finalizer) is not reconciled again: the triggers
            // its Bindings' and snapshots' deletion send find it gone.
            if let Err(ControllerError::ObjectNotFound(gone)) = &res {
                metrics.fleet_versions.forget_placement(&gone.name);
            }
            metrics.observe("placement", &res);
            if let Err(e) = res {
                tracing::debug!(error = %e, "placement reconcile error");
            }
            std::future::ready(())
        })
        .await;
}

fn error_policy(placement: Arc<Placement>, error: &Error, _ctx: Arc<Context>) -> Requeue {
    tracing::warn!(placement = %placement.name_any(), error = %error, "reconciling Placement failed; retrying");
    Requeue::requeue(Duration::from_secs(5))
}

#[tracing::instrument(skip_all, fields(placement = %placement.name_any()))]
async fn reconcile(placement: Arc<Placement>, ctx: Arc<Context>) -> Result<Requeue, Error> {
    let (name, versions) = (placement.name_any(), &ctx.metrics.fleet_versions);
    if placement.metadata.deletion_timestamp.is_some() {
        ctx.written.forget(&name);
        versions.forget_placement(&name);
        return Ok(Requeue::await_change()); // owner references remove snapshots and bindings
    }
    // Should a deleted placement's triggers be missed (a watch re-listed meanwhile), its series
    // go with the next reconcile of another.
    versions.retain_placements(|p| ctx.placements.get(&ObjectRef::new(p)).is_some());
    let Some(placement) = ctx.freshest(placement).await? else {
        versions.forget_placement(&name);
        return Ok(Requeue::await_change());
    };
    if !caches_ready(&ctx).await {
        tracing::info!("caches still listing after {CACHE_WAIT:?}; retrying");
        return Ok(Requeue::requeue(CACHE_WAIT));
    }
    let (observed, gathering) = observe(&ctx, &placement).await?;
    let now = ctx.clock.now();
    version_metrics::observe_clusters(versions, &name, &observed.bindings, &ctx.works, now);
    let plan = plan::plan(&placement, observed, now);
    act(&ctx, &placement, &plan, gathering).await?;
    let latest = plan.status.latest_resource_snapshot_index;
    version_metrics::record_images(&ctx.client, versions, &name, latest, &ctx.policies).await;
    Ok(match report(&ctx, &placement, plan.status).await? {
        // Sooner than any timer of the plan's (those are seconds to minutes away), and the
        // reconcile then plans again.
        Some(deferred) => Requeue::requeue(deferred),
        None => plan.next,
    })
}

/// Whether the member, binding and snapshot caches hold everything. Planning on a cache still being
/// filled (right after a (re)start or a change of leader) would see a member or binding missing
/// as unselected.
async fn caches_ready(ctx: &Context) -> bool {
    let caches = || async {
        tokio::try_join!(
            ctx.members.wait_until_ready(),
            ctx.bindings.wait_until_ready(),
            ctx.snapshots.wait_until_ready()
        )
    };
    fleethub_runtime::ready_within(CACHE_WAIT, caches).await
}

/// When a gather started: the content change count then, and the time.
type Gathering = (u64, Instant);

/// What the plan needs: the placement's snapshots, the selected content unless it is known
/// unchanged (then `Gathering` says when gathering started), the members and the bindings.
async fn observe(
    ctx: &Context,
    placement: &Placement,
) -> Result<(Observed, Option<Gathering>), Error> {
    let name = placement.name_any();
    let snapshots = snapshots_of(ctx, &name).await?;
    let latest_hash = plan::latest_snapshot(&snapshots).map(|s| s.spec.content_hash.as_str());
    let gathering = (!ctx.content.unchanged(placement, latest_hash))
        .then(|| (ctx.content.changes(&name), Instant::now()));
    let content = match gathering {
        Some(_) => {
            let discovery = ctx.discovery.get(&ctx.client).await?;
            Some(gather::gather(&ctx.client, &discovery, placement).await?)
        }
        None => None,
    };
    let members = ctx.members.state();
    let bindings = ctx.bindings.state().into_iter();
    let observed = Observed {
        snapshots,
        content,
        members: members.iter().map(|m| Member::from(m.as_ref())).collect(),
        bindings: bindings
            .filter(|b| b.spec.placement_name == name && b.metadata.deletion_timestamp.is_none())
            .collect(),
    };
    Ok((observed, gathering))
}

/// `placement`'s snapshots (without their manifests) from the cache, or from the API server
/// while the cache does not show this controller's last writes of them.
async fn snapshots_of(ctx: &Context, placement: &str) -> Result<Vec<ResourceSnapshot>, Error> {
    let cached = ctx
        .snapshots
        .state()
        .iter()
        .filter(|s| s.spec.placement_name == placement)
        .map(|s| s.as_ref().clone())
        .collect();
    if let Some(snapshots) = ctx.own_snapshot_writes.view(placement, cached) {
        return Ok(snapshots);
    }
    let selector = format!("{}={placement}", names::PLACEMENT_LABEL);
    let mut listed = Api::<ResourceSnapshot>::all(ctx.client.clone())
        .list(&ListParams::default().labels(&selector))
        .await?
        .items;
    listed.iter_mut().for_each(snapshot_cache::slim);
    Ok(listed)
}

/// Performs the plan's writes but the status, in order: the new snapshot, the pruned history,
/// the bindings (which may point at the new snapshot).
async fn act(
    ctx: &Context,
    placement: &Placement,
    plan: &Plan,
    gathering: Option<Gathering>,
) -> Result<(), Error> {
    if let Some(snapshot) = &plan.snapshot {
        cut_snapshot(ctx, &placement.name_any(), snapshot).await?;
        tracing::info!(index = snapshot.index, "cut a new resource snapshot");
    }
    if let (Some(hash), Some((changes, at))) = (&plan.content_hash, gathering) {
        ctx.content.gathered(placement, changes, at, hash.clone());
    }
    prune_history(ctx, placement, &plan.prune).await?;
    // Each change concerns one cluster's Binding: independent, so written a few at a time
    // (a 1,000-cluster placement written one by one took minutes).
    let mut writes = stream::iter(plan.bindings.iter().cloned())
        .map(|change| write_binding(ctx, placement, change))
        .buffer_unordered(BINDING_WRITES);
    while let Some(written) = writes.next().await {
        written?;
    }
    Ok(())
}

async fn cut_snapshot(ctx: &Context, placement: &str, snapshot: &NewSnapshot) -> Result<(), Error> {
    let api: Api<ResourceSnapshot> = Api::all(ctx.client.clone());
    for name in &snapshot.leftovers {
        delete_snapshot(ctx, &api, placement, name).await?;
    }
    let params = PostParams {
        field_manager: Some(FIELD_MANAGER.to_string()),
        ..Default::default()
    };
    for part in &snapshot.parts {
        let created = api.create(&params, part).await?;
        ctx.own_snapshot_writes.created(placement, &created);
    }
    Ok(())
}

/// Deletes snapshot `name` of `placement`, and records the delete until the cache shows it.
async fn delete_snapshot(
    ctx: &Context,
    api: &Api<ResourceSnapshot>,
    placement: &str,
    name: &str,
) -> Result<(), Error> {
    let deleted = api.delete(name, &Default::default()).await?;
    let uid = deleted.either(
        |s| s.uid(),
        |status| status.details.map(|d| d.uid).filter(|u| !u.is_empty()),
    );
    ctx.own_snapshot_writes.deleted(placement, name, uid);
    Ok(())
}

/// Deletes the snapshots `excess` names (index, name), never one an unfinished run uses.
async fn prune_history(
    ctx: &Context,
    placement: &Placement,
    excess: &[(i64, String)],
) -> Result<(), Error> {
    if excess.is_empty() {
        return Ok(());
    }
    let runs = Api::<UpdateRun>::all(ctx.client.clone())
        .list(&ListParams::default())
        .await?
        .items;
    let in_use = plan::indices_in_use(&runs, &placement.name_any());
    let api: Api<ResourceSnapshot> = Api::all(ctx.client.clone());
    for (_, name) in excess.iter().filter(|(i, _)| !in_use.contains(i)) {
        delete_snapshot(ctx, &api, &placement.name_any(), name).await?;
    }
    Ok(())
}

async fn write_binding(
    ctx: &Context,
    placement: &Placement,
    change: BindingChange,
) -> Result<(), Error> {
    let api: Api<Binding> = Api::all(ctx.client.clone());
    match change {
        BindingChange::Create {
            cluster,
            state,
            index,
        } => {
            let binding = plan::new_binding(placement, &cluster, state, index);
            let params = PostParams {
                field_manager: Some(FIELD_MANAGER.to_string()),
                ..Default::default()
            };
            ok_if(api.create(&params, &binding).await, EXISTS)
        }
        BindingChange::Set {
            cluster,
            state,
            index,
        } => {
            // A merge patch of the spec alone, so the fields stay owned by whoever sets them
            // next (an UpdateRun).
            let binding = plan::new_binding(placement, &cluster, state, index);
            let patch = Binding {
                metadata: ObjectMeta::default(),
                ..binding
            };
            let params = PatchParams {
                field_manager: Some(FIELD_MANAGER.to_string()),
                ..Default::default()
            };
            let name = names::binding_name(&placement.name_any(), &cluster);
            api.patch(&name, &params, &Patch::Merge(&patch)).await?;
            Ok(())
        }
        BindingChange::Delete { cluster } => {
            let name = names::binding_name(&placement.name_any(), &cluster);
            ok_if(api.delete(&name, &Default::default()).await, GONE)
        }
    }
}

/// Writes the placement's status when the plan changed it; or, when the change is of detail
/// alone and the last write was less than a second ago, says how long to wait before it is.
async fn report(
    ctx: &Context,
    placement: &Placement,
    status: fleethub_crds::placement::PlacementStatus,
) -> Result<Option<Duration>, Error> {
    // Compared as JSON, as the API server stores it (times in whole seconds).
    let stored = |s: &fleethub_crds::placement::PlacementStatus| serde_json::to_value(s).ok();
    if placement
        .status
        .as_ref()
        .is_some_and(|p| stored(p) == stored(&status))
    {
        return Ok(None);
    }
    let name = placement.name_any();
    let now = Instant::now();
    if let Some(wait) = ctx
        .pace
        .wait(&name, placement.status.as_ref(), &status, now)
    {
        return Ok(Some(wait));
    }
    // The status subresource ignores the spec; it is sent only because the type carries one.
    let patch = Placement {
        status: Some(status),
        ..Placement::new(&name, placement.spec.clone())
    };
    let written = Api::<Placement>::all(ctx.client.clone())
        .patch_status(
            &name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&patch),
        )
        .await?;
    ctx.written.record(&name, written);
    ctx.pace.wrote(&name, now);
    Ok(None)
}
