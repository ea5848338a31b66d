//! The placement controller: cuts a new ResourceSnapshot whenever the selected hub objects'
//! content changes, keeps a bounded history, keeps one Binding per selected cluster (binding
//! them itself under RollingUpdate), and rolls the bindings up into the placement's status.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fleethub_crds::binding::BindingState;
use fleethub_crds::conditions::{FALSE, NewCondition, TRUE, find, is_true, set_condition};
use fleethub_crds::member_cluster::JOINED;
use fleethub_crds::placement::{ClusterPlacementStatus, PlacementStatus, RolloutStrategyType};
use fleethub_crds::update_run::SUCCEEDED;
use fleethub_crds::{Binding, MemberCluster, Placement, ResourceSnapshot, UpdateRun, names};
use futures::{StreamExt, stream};
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, StatefulSet};
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret, Service, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use kube::api::{DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::core::PartialObjectMeta;
use kube::discovery::{Discovery, Scope, verbs};
use kube::runtime::controller::Action as Requeue;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::{WatchStreamExt, reflector, watcher};
use kube::{Api, Client, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use tokio::sync::Mutex;
use tokio_util::sync::CancellationToken;

use super::clusters::{self, BindingChange, Member};
use super::content;
use crate::Error;
use crate::clock::Clock;
use crate::error::{EXISTS, GONE, ok_if};
use crate::metrics::Metrics;
use fleethub_runtime::CACHE_WAIT;

/// Field manager of every write this controller makes.
pub const FIELD_MANAGER: &str = "fleethub/placement";
/// Placement condition: the latest snapshot holds the selected objects as they are now.
pub const SNAPSHOTTED: &str = "ResourcesSnapshotted";
/// Snapshots kept when the placement does not say.
pub const DEFAULT_HISTORY: usize = 10;
/// Objects of kinds the hub does not watch are re-read this often.
pub const RESYNC: Duration = Duration::from_secs(300);

/// Namespaced kinds never copied out of a selected namespace: made by controllers, or fleethub's
/// own.
const SKIPPED_KINDS: &[(&str, &str)] = &[
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
    ("fleethub.dev", "Work"),
];

struct Context {
    client: Client,
    clock: Arc<dyn Clock>,
    discovery: Mutex<Option<(Instant, Arc<Discovery>)>>,
    bindings: Store<Binding>,
    members: Store<MemberCluster>,
    content: Arc<ContentMarks>,
}

/// Which placements' selected content is known to be unchanged since it was last gathered.
/// Gathering lists every namespaced kind in a selected namespace (about 40 requests), and a
/// placement reconciles on every change of its Bindings (a member's report changes one several
/// times): without this, a 1,000-cluster rollout re-read its namespace thousands of times. A
/// view, not a decision: after a restart everything is gathered once.
#[derive(Default)]
struct ContentMarks {
    inner: std::sync::Mutex<ContentMarksInner>,
}

#[derive(Default)]
struct ContentMarksInner {
    /// Content changes seen per placement (by the content watches).
    changes: BTreeMap<String, u64>,
    /// Per placement: its UID and generation, the change count and time of the last gather,
    /// and the content hash it found.
    gathered: BTreeMap<String, Gathered>,
}

#[derive(Clone, PartialEq)]
struct Gathered {
    uid: Option<String>,
    generation: Option<i64>,
    changes: u64,
    at: Instant,
    hash: String,
}

impl ContentMarks {
    fn lock(&self) -> std::sync::MutexGuard<'_, ContentMarksInner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A selected object of `placement` changed.
    fn changed(&self, placement: &str) {
        *self
            .lock()
            .changes
            .entry(placement.to_string())
            .or_default() += 1;
    }

    /// The change count to record with a gather that starts now.
    fn changes(&self, placement: &str) -> u64 {
        self.lock()
            .changes
            .get(placement)
            .copied()
            .unwrap_or_default()
    }

    /// Whether `placement`'s content is known to hash to `latest_hash` (its latest snapshot):
    /// gathered for this placement object and generation, with no content change since, less
    /// than [`RESYNC`] ago (kinds the hub does not watch are re-read that often).
    fn unchanged(&self, placement: &Placement, latest_hash: Option<&str>) -> bool {
        let inner = self.lock();
        let name = placement.name_any();
        let changes = inner.changes.get(&name).copied().unwrap_or_default();
        inner.gathered.get(&name).is_some_and(|g| {
            g.uid == placement.metadata.uid
                && g.generation == placement.metadata.generation
                && g.changes == changes
                && g.at.elapsed() < RESYNC
                && Some(g.hash.as_str()) == latest_hash
        })
    }

    fn gathered(&self, placement: &Placement, changes: u64, at: Instant, hash: String) {
        let g = Gathered {
            uid: placement.metadata.uid.clone(),
            generation: placement.metadata.generation,
            changes,
            at,
            hash,
        };
        self.lock().gathered.insert(placement.name_any(), g);
    }
}

impl Context {
    /// The hub's API discovery, refreshed at most every minute.
    /// The lock is never held across the discovery requests: a reconcile stuck in them must
    /// not hold up every other placement's reconcile.
    async fn discovery(&self) -> Result<Arc<Discovery>, Error> {
        if let Some((at, d)) = self.discovery.lock().await.as_ref()
            && at.elapsed() < Duration::from_secs(60)
        {
            return Ok(d.clone());
        }
        let d = Arc::new(Discovery::new(self.client.clone()).run().await?);
        *self.discovery.lock().await = Some((Instant::now(), d.clone()));
        Ok(d)
    }
}

/// The placements whose snapshot may contain an object of `kind` named `name` (in `namespace`).
fn affected(
    placements: &Store<Placement>,
    kind: &str,
    namespace: Option<&str>,
    name: &str,
) -> Vec<ObjectRef<Placement>> {
    placements
        .state()
        .iter()
        .filter(|p| {
            p.spec.resource_selectors.iter().any(|s| {
                if s.kind == "Namespace" && s.group.is_empty() {
                    let ns = if kind == "Namespace" {
                        Some(name)
                    } else {
                        namespace
                    };
                    s.label_selector.is_some() || s.name.is_none() || s.name.as_deref() == ns
                } else {
                    namespace.is_none()
                        && s.kind == kind
                        && s.name.as_deref().is_none_or(|n| n == name)
                }
            })
        })
        .map(|p| ObjectRef::from_obj(p.as_ref()))
        .collect()
}

/// Binding writes of one reconcile made at once.
const BINDING_WRITES: usize = 16;

/// Reconcile requests for placements when objects of kind `K` change (metadata only is watched).
fn watch_kind<K>(
    client: &Client,
    placements: Store<Placement>,
    marks: Arc<ContentMarks>,
) -> stream::BoxStream<'static, ObjectRef<Placement>>
where
    K: Resource<DynamicType = ()>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    let kind = K::kind(&()).to_string();
    // Metadata only: which object changed is all that matters here.
    watcher(
        Api::<PartialObjectMeta<K>>::all(client.clone()),
        fleethub_runtime::watcher_config(),
    )
    .backoff(fleethub_runtime::watch_backoff())
    .touched_objects()
    .filter_map(|r| async move { r.ok() })
    .flat_map(move |meta| {
        let refs = affected(
            &placements,
            &kind,
            meta.metadata.namespace.as_deref(),
            &meta.name_any(),
        );
        for r in &refs {
            marks.changed(&r.name);
        }
        stream::iter(refs)
    })
    .boxed()
}

/// Runs the controller until `shutdown`.
pub async fn run(
    client: Client,
    clock: Arc<dyn Clock>,
    metrics: Metrics,
    shutdown: CancellationToken,
) {
    let (bindings, bindings_writer) = reflector::store::<Binding>();
    let (members, members_writer) = reflector::store::<MemberCluster>();
    let binding_stream =
        fleethub_runtime::reflected_stream(Api::<Binding>::all(client.clone()), bindings_writer);
    let member_stream = fleethub_runtime::touched_after_sync(
        watcher(
            Api::<MemberCluster>::all(client.clone()),
            fleethub_runtime::watcher_config(),
        )
        .backoff(fleethub_runtime::watch_backoff())
        .reflect(members_writer)
        .filter_map(selection_changes()),
    );

    let controller = fleethub_runtime::controller_for(Api::<Placement>::all(client.clone()));
    let placements = controller.store();
    let p = || placements.clone();
    let content = Arc::new(ContentMarks::default());
    let content_changes = stream::select_all(vec![
        watch_kind::<Namespace>(&client, p(), content.clone()),
        watch_kind::<ConfigMap>(&client, p(), content.clone()),
        watch_kind::<Secret>(&client, p(), content.clone()),
        watch_kind::<Service>(&client, p(), content.clone()),
        watch_kind::<ServiceAccount>(&client, p(), content.clone()),
        watch_kind::<Deployment>(&client, p(), content.clone()),
        watch_kind::<StatefulSet>(&client, p(), content.clone()),
        watch_kind::<DaemonSet>(&client, p(), content.clone()),
        watch_kind::<Job>(&client, p(), content.clone()),
        watch_kind::<CronJob>(&client, p(), content.clone()),
        watch_kind::<Role>(&client, p(), content.clone()),
        watch_kind::<RoleBinding>(&client, p(), content.clone()),
        watch_kind::<ClusterRole>(&client, p(), content.clone()),
        watch_kind::<ClusterRoleBinding>(&client, p(), content.clone()),
    ]);
    let all_placements = placements.clone();
    let ctx = Arc::new(Context {
        client: client.clone(),
        clock,
        discovery: Mutex::new(None),
        bindings,
        members,
        content,
    });
    controller
        .owns_stream(fleethub_runtime::watch_stream(
            Api::<ResourceSnapshot>::all(client.clone()),
        ))
        .watches_stream(binding_stream, |b: Binding| {
            Some(ObjectRef::<Placement>::new(&b.spec.placement_name))
        })
        .watches_stream(member_stream, move |_m: MemberCluster| {
            all_placements
                .state()
                .iter()
                .map(|p| ObjectRef::from_obj(p.as_ref()))
                .collect::<Vec<_>>()
        })
        .reconcile_on(content_changes)
        .graceful_shutdown_on(async move { shutdown.cancelled().await })
        .run(
            |o, c| crate::error::bounded(reconcile(o, c)),
            error_policy,
            ctx,
        )
        .for_each(move |res| {
            metrics.observe("placement", &res);
            if let Err(e) = res {
                tracing::debug!(error = %e, "placement reconcile error");
            }
            std::future::ready(())
        })
        .await;
}

/// A filter of MemberCluster watch events that passes deletions and the changes of what
/// selection reads: every heartbeat changes a MemberCluster, and each one would otherwise
/// reconcile every placement. (The store is fed before the filter, so it sees every change.)
#[allow(clippy::type_complexity)]
fn selection_changes() -> impl FnMut(
    Result<watcher::Event<MemberCluster>, watcher::Error>,
) -> std::future::Ready<
    Option<Result<watcher::Event<MemberCluster>, watcher::Error>>,
> {
    let mut seen: std::collections::HashMap<String, u64> = Default::default();
    move |event| {
        let keep = match &event {
            Ok(watcher::Event::Delete(m)) => {
                seen.remove(&m.name_any());
                true
            }
            Ok(watcher::Event::Apply(m) | watcher::Event::InitApply(m)) => {
                let hash = selection_inputs(m).unwrap_or_default();
                seen.insert(m.name_any(), hash) != Some(hash)
            }
            Ok(watcher::Event::Init | watcher::Event::InitDone) | Err(_) => true,
        };
        std::future::ready(keep.then_some(event))
    }
}

/// What of a MemberCluster cluster selection depends on: its identity, labels, deletion and
/// `Joined`.
fn selection_inputs(member: &MemberCluster) -> Option<u64> {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    member.metadata.uid.hash(&mut h);
    member.labels().hash(&mut h);
    member.metadata.deletion_timestamp.is_some().hash(&mut h);
    member
        .status
        .as_ref()
        .is_some_and(|s| is_true(&s.conditions, JOINED))
        .hash(&mut h);
    Some(h.finish())
}

fn error_policy(placement: Arc<Placement>, error: &Error, _ctx: Arc<Context>) -> Requeue {
    tracing::warn!(placement = %placement.name_any(), error = %error, "reconciling Placement failed; retrying");
    Requeue::requeue(Duration::from_secs(5))
}

/// The selected objects, cleaned and sorted; or why the selectors are unusable.
async fn gather(ctx: &Context, placement: &Placement) -> Result<Result<Vec<Value>, String>, Error> {
    let discovery = ctx.discovery().await?;
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
        let api: Api<DynamicObject> = Api::all_with(ctx.client.clone(), &ar);
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
            if sel.kind == "Namespace" && sel.group.is_empty() {
                objects.extend(namespace_content(ctx, &discovery, &name).await?);
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
    ctx: &Context,
    discovery: &Discovery,
    namespace: &str,
) -> Result<Vec<Value>, Error> {
    let mut out = Vec::new();
    for group in discovery.groups() {
        for (ar, caps) in group.recommended_resources() {
            if caps.scope != Scope::Namespaced
                || !caps.supports_operation(verbs::LIST)
                || SKIPPED_KINDS.contains(&(ar.group.as_str(), ar.kind.as_str()))
            {
                continue;
            }
            let api: Api<DynamicObject> = Api::namespaced_with(ctx.client.clone(), namespace, &ar);
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

#[tracing::instrument(skip_all, fields(placement = %placement.name_any()))]
async fn reconcile(placement: Arc<Placement>, ctx: Arc<Context>) -> Result<Requeue, Error> {
    if placement.metadata.deletion_timestamp.is_some() {
        return Ok(Requeue::await_change()); // owner references remove snapshots and bindings
    }
    // Plan only on complete caches: right after a (re)start or a change of leader, a member or
    // binding missing from a cache still being filled would look unselected.
    let caches = async {
        tokio::try_join!(
            ctx.members.wait_until_ready(),
            ctx.bindings.wait_until_ready()
        )
    };
    if !fleethub_runtime::ready_within(CACHE_WAIT, caches).await {
        tracing::info!("caches still listing after {CACHE_WAIT:?}; retrying");
        return Ok(Requeue::requeue(CACHE_WAIT));
    }
    let name = placement.name_any();
    let now = ctx.clock.now();
    let generation = placement.metadata.generation;
    let mut status = placement.status.clone().unwrap_or_default();
    let cond = |type_, status, reason, message: String| {
        NewCondition::new(type_, status, reason, message, generation)
    };

    // 1. Snapshot the selected objects when their content changed.
    let snapshots: Api<ResourceSnapshot> = Api::all(ctx.client.clone());
    let existing = snapshots
        .list(&ListParams::default().labels(&format!("{}={name}", names::PLACEMENT_LABEL)))
        .await?
        .items;
    let latest = existing
        .iter()
        .filter(|s| s.spec.part == 0)
        .max_by_key(|s| s.spec.resource_index);
    let mut latest_index = latest.map(|s| s.spec.resource_index);
    let latest_hash = latest.map(|s| s.spec.content_hash.as_str());
    let gathering = (!ctx.content.unchanged(&placement, latest_hash))
        .then(|| (ctx.content.changes(&name), Instant::now()));
    let gathered = match gathering {
        Some(_) => Some(gather(&ctx, &placement).await?),
        None => None,
    };
    match gathered {
        None => {}
        Some(Err(why)) => {
            set_condition(
                &mut status.conditions,
                cond("Scheduled", FALSE, "InvalidResourceSelector", why),
                now,
            );
            return write_status(&ctx, &placement, status)
                .await
                .map(|_| Requeue::await_change());
        }
        Some(Ok(objects)) => {
            if let Some(why) = content::oversized(&objects, content::MAX_PART_BYTES) {
                set_condition(
                    &mut status.conditions,
                    cond(SNAPSHOTTED, FALSE, "ObjectTooLarge", why),
                    now,
                );
                return write_status(&ctx, &placement, status)
                    .await
                    .map(|_| Requeue::requeue(RESYNC));
            }
            let hash = content::content_hash(&objects);
            if latest.is_none_or(|s| s.spec.content_hash != hash) {
                let index = latest_index.map_or(0, |i| i + 1);
                cut_snapshot(&ctx, &placement, index, &hash, objects, &existing).await?;
                tracing::info!(index, "cut a new resource snapshot");
                latest_index = Some(index);
            }
            if let Some((changes, at)) = gathering {
                ctx.content.gathered(&placement, changes, at, hash);
            }
        }
    }
    let message = format!(
        "resource snapshot {} holds the selected objects",
        latest_index.unwrap_or_default()
    );
    set_condition(
        &mut status.conditions,
        cond(SNAPSHOTTED, TRUE, "Snapshotted", message),
        now,
    );
    prune_history(&ctx, &placement, &existing).await?;

    // 2. Bindings for the selected clusters.
    let members: Vec<Member> = ctx
        .members
        .state()
        .iter()
        .map(|m| Member {
            name: m.name_any(),
            labels: m.labels().clone(),
            eligible: m.metadata.deletion_timestamp.is_none()
                && m.status
                    .as_ref()
                    .is_some_and(|s| is_true(&s.conditions, JOINED)),
        })
        .collect();
    let (selected, missing) = match clusters::select(placement.spec.policy.as_ref(), &members) {
        Ok(s) => s,
        Err(why) => {
            set_condition(
                &mut status.conditions,
                cond("Scheduled", FALSE, "InvalidPolicy", why),
                now,
            );
            return write_status(&ctx, &placement, status)
                .await
                .map(|_| Requeue::await_change());
        }
    };
    let strategy = placement
        .spec
        .strategy
        .as_ref()
        .map(|s| s.type_)
        .unwrap_or_default();
    let mine: Vec<Arc<Binding>> = ctx
        .bindings
        .state()
        .into_iter()
        .filter(|b| b.spec.placement_name == name && b.metadata.deletion_timestamp.is_none())
        .collect();
    let existing_bindings: BTreeMap<String, (BindingState, Option<i64>)> = mine
        .iter()
        .map(|b| {
            (
                b.spec.target_cluster.clone(),
                (b.spec.state, b.spec.resource_snapshot_index),
            )
        })
        .collect();
    // Each change concerns one cluster's Binding: independent, so written a few at a time
    // (a 1,000-cluster placement written one by one took minutes).
    let changes = clusters::binding_changes(strategy, &selected, &existing_bindings, latest_index);
    let mut writes = stream::iter(changes)
        .map(|change| apply_binding_change(&ctx, &placement, change))
        .buffer_unordered(BINDING_WRITES);
    while let Some(written) = writes.next().await {
        written?;
    }
    drop(writes);

    // 3. Status.
    status.observed_generation = generation;
    status.latest_resource_snapshot_index = latest_index;
    status.selected_cluster_count = Some(selected.len() as i32);
    let (scheduled, reason, message) = if missing.is_empty() {
        (
            TRUE,
            "SchedulingPolicyFulfilled",
            format!("{} clusters selected", selected.len()),
        )
    } else {
        (
            FALSE,
            "ClustersUnavailable",
            format!(
                "{} clusters selected; not joined or not found: {}",
                selected.len(),
                missing.join(", ")
            ),
        )
    };
    set_condition(
        &mut status.conditions,
        cond("Scheduled", scheduled, reason, message),
        now,
    );
    roll_up(
        &mut status,
        &mine,
        &selected,
        latest_index,
        strategy,
        now,
        generation,
    );
    write_status(&ctx, &placement, status).await?;
    Ok(Requeue::requeue(RESYNC))
}

async fn cut_snapshot(
    ctx: &Context,
    placement: &Placement,
    index: i64,
    hash: &str,
    objects: Vec<Value>,
    existing: &[ResourceSnapshot],
) -> Result<(), Error> {
    let api: Api<ResourceSnapshot> = Api::all(ctx.client.clone());
    let name = placement.name_any();
    // Leftovers of an earlier attempt at this index that crashed before writing part 0.
    for s in existing.iter().filter(|s| s.spec.resource_index == index) {
        api.delete(&s.name_any(), &Default::default()).await?;
    }
    let object_count = objects.len() as i64;
    let parts = content::split(objects, content::MAX_PART_BYTES);
    let total = parts.len() as i32;
    // Part 0 marks the snapshot complete, so it is written last.
    for (part, resources) in parts.into_iter().enumerate().rev() {
        let snapshot = json!({
            "apiVersion": "fleethub.dev/v1alpha1",
            "kind": "ResourceSnapshot",
            "metadata": {
                "name": names::resource_snapshot_part_name(&name, index as u64, part as u32),
                "labels": {names::PLACEMENT_LABEL: name, names::SNAPSHOT_INDEX_LABEL: index.to_string()},
                "ownerReferences": placement.controller_owner_ref(&()).map(|o| vec![o]).unwrap_or_default(),
            },
            "spec": {
                "placementName": name, "resourceIndex": index, "part": part, "parts": total,
                "contentHash": hash, "objectCount": object_count, "resources": resources,
            },
        });
        let snapshot: ResourceSnapshot =
            serde_json::from_value(snapshot).map_err(|e| Error::Invalid(e.to_string()))?;
        api.create(&PostParams::default(), &snapshot).await?;
    }
    Ok(())
}

/// Deletes snapshots beyond the history limit, oldest first, never one an unfinished run uses.
async fn prune_history(
    ctx: &Context,
    placement: &Placement,
    existing: &[ResourceSnapshot],
) -> Result<(), Error> {
    let limit = placement
        .spec
        .revision_history_limit
        .map_or(DEFAULT_HISTORY, |l| l.max(1) as usize);
    let mut indices: Vec<i64> = existing
        .iter()
        .map(|s| s.spec.resource_index)
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    if indices.len() <= limit {
        return Ok(());
    }
    let runs: Api<UpdateRun> = Api::all(ctx.client.clone());
    let in_use: BTreeSet<i64> = runs
        .list(&ListParams::default())
        .await?
        .items
        .iter()
        .filter(|r| r.spec.placement_name == placement.name_any())
        .filter(|r| {
            r.status
                .as_ref()
                .is_none_or(|s| find(&s.conditions, SUCCEEDED).is_none())
        })
        .filter_map(|r| r.spec.resource_snapshot_index.parse().ok())
        .collect();
    let excess = indices.len() - limit;
    indices.truncate(excess); // the oldest ones
    let api: Api<ResourceSnapshot> = Api::all(ctx.client.clone());
    for s in existing.iter().filter(|s| {
        indices.contains(&s.spec.resource_index) && !in_use.contains(&s.spec.resource_index)
    }) {
        api.delete(&s.name_any(), &Default::default()).await?;
    }
    Ok(())
}

async fn apply_binding_change(
    ctx: &Context,
    placement: &Placement,
    change: BindingChange,
) -> Result<(), Error> {
    let api: Api<Binding> = Api::all(ctx.client.clone());
    let name = placement.name_any();
    match change {
        BindingChange::Create {
            cluster,
            state,
            index,
        } => {
            let binding = json!({
                "apiVersion": "fleethub.dev/v1alpha1",
                "kind": "Binding",
                "metadata": {
                    "name": names::binding_name(&name, &cluster),
                    "labels": {names::PLACEMENT_LABEL: name, names::CLUSTER_LABEL: cluster},
                    "ownerReferences": placement.controller_owner_ref(&()).map(|o| vec![o]).unwrap_or_default(),
                },
                "spec": {"placementName": name, "targetCluster": cluster, "state": state, "resourceSnapshotIndex": index},
            });
            let binding: Binding =
                serde_json::from_value(binding).map_err(|e| Error::Invalid(e.to_string()))?;
            ok_if(api.create(&PostParams::default(), &binding).await, EXISTS)?;
        }
        BindingChange::Set {
            cluster,
            state,
            index,
        } => {
            // A merge patch, so the field stays owned by whoever sets it next (an UpdateRun).
            let patch = json!({"spec": {"state": state, "resourceSnapshotIndex": index}});
            api.patch(
                &names::binding_name(&name, &cluster),
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await?;
        }
        BindingChange::Delete { cluster } => ok_if(
            api.delete(&names::binding_name(&name, &cluster), &Default::default())
                .await,
            GONE,
        )?,
    }
    Ok(())
}

/// Per-cluster and overall rollout conditions from the bindings.
fn roll_up(
    status: &mut PlacementStatus,
    bindings: &[Arc<Binding>],
    selected: &[String],
    latest: Option<i64>,
    strategy: RolloutStrategyType,
    now: jiff::Timestamp,
    generation: Option<i64>,
) {
    let mut per_cluster = Vec::new();
    let (mut applied, mut available) = (0, 0);
    for cluster in selected {
        let mut conds = status
            .placement_statuses
            .iter()
            .find(|c| &c.cluster_name == cluster)
            .map(|c| c.conditions.clone())
            .unwrap_or_default();
        let binding = bindings.iter().find(|b| &b.spec.target_cluster == cluster);
        let index = binding.and_then(|b| b.spec.resource_snapshot_index);
        let c = |t, s, r, m: String| NewCondition::new(t, s, r, m, generation);
        set_condition(
            &mut conds,
            c(
                "Scheduled",
                TRUE,
                "Scheduled",
                format!("cluster {cluster} is selected"),
            ),
            now,
        );
        let started = binding.is_some_and(|b| b.spec.state == BindingState::Bound);
        let message = match (index, &binding.and_then(|b| b.spec.update_run_name.clone())) {
            (Some(i), Some(run)) => format!("resource snapshot {i}, rolled out by UpdateRun {run}"),
            (Some(i), None) => format!("resource snapshot {i}"),
            (None, _) if strategy == RolloutStrategyType::External => {
                "waiting for an UpdateRun to roll out a snapshot".to_string()
            }
            (None, _) => "waiting for a snapshot".to_string(),
        };
        set_condition(
            &mut conds,
            c(
                "RolloutStarted",
                if started { TRUE } else { FALSE },
                if started {
                    "RolloutStarted"
                } else {
                    "RolloutNotStarted"
                },
                message,
            ),
            now,
        );
        for type_ in ["Applied", "Available"] {
            let reported = binding
                .and_then(|b| b.status.as_ref())
                .and_then(|s| find(&s.conditions, type_));
            let ok = reported.is_some_and(|r| r.status == TRUE);
            let message = reported.map_or("no report yet".to_string(), |r| r.message.clone());
            set_condition(
                &mut conds,
                c(
                    type_,
                    if ok { TRUE } else { FALSE },
                    if ok { "MemberReported" } else { "NotYet" },
                    message,
                ),
                now,
            );
            if ok && type_ == "Applied" {
                applied += 1;
            }
            if ok && type_ == "Available" && index == latest {
                available += 1;
            }
        }
        per_cluster.push(ClusterPlacementStatus {
            cluster_name: cluster.clone(),
            resource_snapshot_index: index,
            conditions: conds,
        });
    }
    status.placement_statuses = per_cluster;
    let n = selected.len();
    let c = |t, ok: bool, r: &'static str, m: String| {
        NewCondition::new(t, if ok { TRUE } else { FALSE }, r, m, generation)
    };
    set_condition(
        &mut status.conditions,
        c(
            "Applied",
            applied == n,
            if applied == n {
                "AllApplied"
            } else {
                "NotAllApplied"
            },
            format!("{applied}/{n} clusters applied their Work"),
        ),
        now,
    );
    let latest_text = latest.map_or("-".to_string(), |l| l.to_string());
    set_condition(
        &mut status.conditions,
        c(
            "Available",
            available == n,
            if available == n {
                "AllAvailable"
            } else {
                "NotAllAvailable"
            },
            format!(
                "{available}/{n} clusters run the latest resource snapshot ({latest_text}) and are available"
            ),
        ),
        now,
    );
}

async fn write_status(
    ctx: &Context,
    placement: &Placement,
    status: PlacementStatus,
) -> Result<(), Error> {
    if Some(&status) == placement.status.as_ref() {
        return Ok(());
    }
    let patch = json!({
        "apiVersion": "fleethub.dev/v1alpha1",
        "kind": "Placement",
        "metadata": {"name": placement.name_any()},
        "status": status,
    });
    Api::<Placement>::all(ctx.client.clone())
        .patch_status(
            &placement.name_any(),
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&patch),
        )
        .await?;
    Ok(())
}

#[cfg(test)]
mod content_marks_tests {
    use super::*;

    fn placement(generation: i64) -> Placement {
        let mut p: Placement = serde_json::from_value(json!({
            "apiVersion": "fleethub.dev/v1alpha1", "kind": "Placement",
            "metadata": {"name": "web", "uid": "u1", "generation": generation},
            "spec": {"resourceSelectors": [{"group": "", "version": "v1", "kind": "Namespace", "name": "app"}],
                     "policy": {"placementType": "PickAll"}},
        }))
        .unwrap();
        p.metadata.generation = Some(generation);
        p
    }

    #[test]
    fn content_is_gathered_again_after_a_change_a_new_generation_or_another_snapshot() {
        let marks = ContentMarks::default();
        let p = placement(1);
        assert!(!marks.unchanged(&p, Some("h1")), "never gathered");

        let start = marks.changes("web");
        marks.gathered(&p, start, Instant::now(), "h1".into());
        assert!(marks.unchanged(&p, Some("h1")));
        assert!(
            !marks.unchanged(&p, Some("h0")),
            "the latest snapshot holds other content"
        );
        assert!(
            !marks.unchanged(&placement(2), Some("h1")),
            "the spec changed"
        );

        marks.changed("web");
        assert!(
            !marks.unchanged(&p, Some("h1")),
            "a selected object changed"
        );

        // A change during a gather is not lost: the gather counts from where it started.
        let start = marks.changes("web");
        marks.changed("web");
        marks.gathered(&p, start, Instant::now(), "h1".into());
        assert!(!marks.unchanged(&p, Some("h1")));
    }
}
