//! The work generator: turns each Bound Binding into the Work its member applies — the manifests
//! of the snapshot the binding points at, in namespace `fleet-member-<cluster>` — and rolls the
//! member's report on that Work up into the Binding's status. Each reconcile observes the Work,
//! plans what to do with it, does it, and reports on the Binding.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use fleethub_crds::apply_strategy::ApplyStrategy;
use fleethub_crds::binding::{
    APPLIED, AVAILABLE, BindingState, BindingStatus, WORK_SYNCHRONIZED, reason,
};
use fleethub_crds::conditions::{FALSE, NewCondition, TRUE, find, set_condition};
use fleethub_crds::drift::{self, DRIFTED, ObjectCorrection};
use fleethub_crds::overrides::{ClusterResourceOverrideSnapshot, ResourceOverrideSnapshot};
use fleethub_crds::work::{WorkSpec, WorkStatus, WorkloadTemplate};
use fleethub_crds::{Binding, MemberCluster, Placement, Work, field_manager, names};
use futures::StreamExt;
use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Patch, PatchParams};
use kube::runtime::WatchStreamExt;
use kube::runtime::controller::Action as Requeue;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::{Api, Client, Resource, ResourceExt};
use tokio_util::sync::CancellationToken;

use crate::Error;
use crate::caches::Shared;
use crate::clock::Clock;
use crate::error::{GONE, ok_if};
use crate::metrics::Metrics;
use crate::placement::triggers;
use crate::work_overrides::{self, Chosen, OVERRIDES_ANNOTATION, OverrideStores};
pub(crate) use cached_work::slim_work;
use cached_work::up_to_date;
use first_reports::FirstReports;
use fleethub_runtime::CACHE_WAIT;
use fleethub_runtime::last_written::LastWritten;
use placement_strategy::{apply_strategy, apply_strategy_version};
use snapshots::Snapshots;

mod cached_work;
mod first_reports;
mod placement_strategy;
mod snapshots;

struct Context {
    client: Client,
    clock: Arc<dyn Clock>,
    /// Every Work, kept current by the watch that also triggers the Works' Bindings.
    works: Store<Work>,
    /// Every Placement: its `applyStrategy` goes into its Works, at once when it changes.
    placements: Store<Placement>,
    /// Records a member's drift corrections on the binding's Placement.
    recorder: Recorder,
    /// Override snapshots and member clusters, for the overrides applied to each Work.
    overrides: OverrideStores,
    /// The Works this controller applied (slimmed like the cache's), until the cache has them:
    /// a reconcile right after an apply (the Binding's own status write triggers one) would
    /// otherwise see the previous Work, apply it again and report on the previous version.
    applied: LastWritten<Work>,
    /// The Bindings as this controller's status writes returned them, until the cache has them:
    /// a reconcile triggered by the member's report before the cache holds the last status
    /// write would write that status again (at 1,000 clusters, 5.5 Binding status writes per
    /// cluster update where 3 are needed, on an API server that is the bottleneck).
    reported: LastWritten<Binding>,
    /// The manifests of the snapshots Works carry, read once for all of their Works.
    snapshots: Arc<Snapshots>,
    /// New Works whose Binding's status waits for the member's first report.
    first_reports: FirstReports,
}

fn work_key(work: &Work) -> String {
    format!(
        "{}/{}",
        work.metadata.namespace.as_deref().unwrap_or_default(),
        work.name_any()
    )
}

/// Runs the controller until `shutdown`.
///
/// `concurrency`: Bindings reconciled at once ([`crate::CONCURRENT_CLUSTER_UPDATES`]).
/// Unbounded, a stage starting 250 clusters had about as many reconciles writing at once, and
/// on a busy hub API server every request shares its CPU: a member's report then waited behind
/// the next clusters' Works.
pub async fn run(
    client: Client,
    clock: Arc<dyn Clock>,
    metrics: Metrics,
    shared: Shared,
    concurrency: u16,
    shutdown: CancellationToken,
) {
    let Shared {
        members,
        bindings,
        works,
    } = shared;
    let member_stream = triggers::member_stream(members.events, triggers::label_inputs);
    let members = members.store;
    let (works, work_events) = (works.store, works.events);
    let (placements, placements_writer) = reflector::store::<Placement>();
    let (cluster_overrides, cluster_overrides_writer) = reflector::store();
    let (namespaced_overrides, namespaced_overrides_writer) = reflector::store();
    let ctx = Arc::new(Context {
        client: client.clone(),
        clock,
        works,
        placements,
        recorder: Recorder::new(client.clone(), Reporter::from("fleethub-hub")),
        overrides: OverrideStores {
            cluster: cluster_overrides,
            namespaced: namespaced_overrides,
            members,
        },
        applied: LastWritten::slimmed_by(slim_work),
        reported: LastWritten::slimmed_by(fleethub_runtime::strip_managed_fields),
        snapshots: Snapshots::start(client.clone(), shutdown.clone()),
        first_reports: FirstReports::default(),
    });
    let after_each = ctx.clone();
    let controller = fleethub_runtime::shared::controller_for_shared(bindings);
    let bindings = controller.store();
    // A new override snapshot, or a member's new labels, reach the Works of the bindings that
    // follow the newest overrides (a run's bindings keep the snapshots it fixed).
    let following = |bindings: Store<Binding>, cluster: Option<String>| {
        bindings
            .state()
            .iter()
            .filter(|b| !work_overrides::fixed(b))
            .filter(|b| cluster.as_ref().is_none_or(|c| &b.spec.target_cluster == c))
            .map(|b| ObjectRef::from_obj(b.as_ref()))
            .collect::<Vec<_>>()
    };
    let (b1, b2, b3) = (bindings.clone(), bindings.clone(), bindings.clone());
    let bindings_left = bindings.clone();
    controller
        .with_config(kube::runtime::controller::Config::default().concurrency(concurrency))
        // A Work's change concerns its Binding. Not `owns_stream`: kube names the owner of a
        // namespaced object within that object's namespace, and a cluster-scoped Binding
        // named so is another key to the scheduler than its own: both reconciled at once,
        // each writing the Binding's status (a third of the Binding writes of a 1,000-cluster
        // run).
        .watches_stream(
            fleethub_runtime::touched_after_sync(work_events),
            |w: Work| binding_of(&w),
        )
        // A placement's applyStrategy reaches its Works without a new snapshot or run. Only
        // its applyStrategy: every write of its status re-queued all of its Bindings (one run
        // over 10,000 clusters: 1.7 million reconciles, a fifth of the hub's CPU).
        .watches_stream(
            fleethub_runtime::reflected_stream(
                Api::<Placement>::all(client.clone()),
                placements_writer,
            )
            .predicate_filter(apply_strategy_version, Default::default()),
            move |p: Placement| {
                let name = p.name_any();
                bindings
                    .state()
                    .iter()
                    .filter(|b| b.spec.placement_name == name)
                    .map(|b| ObjectRef::from_obj(b.as_ref()))
                    .collect::<Vec<_>>()
            },
        )
        .watches_stream(
            fleethub_runtime::reflected_stream(
                Api::<ClusterResourceOverrideSnapshot>::all(client.clone()),
                cluster_overrides_writer,
            ),
            move |_| following(b1.clone(), None),
        )
        .watches_stream(
            fleethub_runtime::reflected_stream(
                Api::<ResourceOverrideSnapshot>::all(client.clone()),
                namespaced_overrides_writer,
            ),
            move |_| following(b2.clone(), None),
        )
        // Only a member's labels reach its Works (through overrides), not its heartbeats.
        .watches_stream(member_stream, move |m: MemberCluster| {
            following(b3.clone(), Some(m.name_any()))
        })
        .graceful_shutdown_on(async move { shutdown.cancelled().await })
        .run(
            |o, c| crate::error::bounded(reconcile(o, c)),
            error_policy,
            ctx,
        )
        .for_each(move |res| {
            metrics.observe("work-generator", &res);
            after_each.forget_gone(&bindings_left);
            if let Err(e) = res {
                tracing::debug!(error = %e, "work-generator reconcile error");
            }
            std::future::ready(())
        })
        .await;
}

fn error_policy(binding: Arc<Binding>, error: &Error, _ctx: Arc<Context>) -> Requeue {
    tracing::warn!(binding = %binding.name_any(), error = %error, "reconciling Binding failed; retrying");
    Requeue::requeue(Duration::from_secs(5))
}

/// The Binding that owns `work`, named as the (cluster-scoped) Binding is.
fn binding_of(work: &Work) -> Option<ObjectRef<Binding>> {
    work.owner_references()
        .iter()
        .find(|o| o.kind == Binding::kind(&()) && o.controller == Some(true))
        .map(|o| ObjectRef::new(&o.name))
}

impl Context {
    /// Forgets the writes of Bindings no longer in the cache, and of their Works. Only writes
    /// the caches have not caught up with are kept, so there are few to look at.
    fn forget_gone(&self, bindings: &Store<Binding>) {
        if self.reported.is_empty() && self.applied.is_empty() {
            return;
        }
        self.reported
            .retain(|name, _| bindings.get(&ObjectRef::new(name)).is_some());
        self.applied.retain(|_, work| {
            work.owner_references()
                .iter()
                .any(|o| bindings.get(&ObjectRef::new(&o.name)).is_some())
        });
    }

    /// The newest copy of `cached`: the cache's, or the one this controller's last status write
    /// returned; read again when neither can be trusted. `None`: it is gone.
    async fn newest_binding(&self, cached: Arc<Binding>) -> Result<Option<Arc<Binding>>, Error> {
        let name = cached.name_any();
        let bindings = Api::<Binding>::all(self.client.clone());
        self.reported
            .newest_or_read(&name, Some(cached), || bindings.get_opt(&name))
            .await
            .map_err(Error::from)
    }
}

#[tracing::instrument(skip_all, fields(binding = %binding.name_any()))]
async fn reconcile(binding: Arc<Binding>, ctx: Arc<Context>) -> Result<Requeue, Error> {
    let Some(binding) = ctx.newest_binding(binding).await? else {
        return Ok(Requeue::await_change());
    };
    let work = observe(&ctx, &binding).await?;
    let strategy = apply_strategy(&ctx, &binding).await;
    let chosen = ctx.overrides.chosen(&binding);
    let step = match plan(&binding, work.as_deref(), &strategy) {
        // The Work was written with other override snapshots than the binding now has (a new
        // snapshot it follows, or a run that fixed others).
        Step::Keep(index)
            if work.as_ref().is_some_and(|w| {
                w.annotations()
                    .get(OVERRIDES_ANNOTATION)
                    .map(String::as_str)
                    != Some(chosen.key().as_str())
            }) =>
        {
            Step::Apply(index)
        }
        step => step,
    };
    if matches!(step, Step::Apply(_)) && work.is_none() && !still_exists(&ctx, &binding).await? {
        // A cache running behind a burst of deletions still holds a Binding that is gone: a Work
        // created for it would reach the member before the garbage collector removed it.
        tracing::info!("the Binding is gone or being deleted; no Work is created for it");
        return Ok(Requeue::await_change());
    }
    let before = work.as_ref().and_then(|w| w.metadata.generation);
    let outcome = act(&ctx, &binding, step, work, strategy, &chosen).await?;
    let (namespace, name) = work_ref(&binding);
    let key = format!("{namespace}/{name}");
    if let Some(wait) = ctx.first_reports.wait(key, step, before, &outcome) {
        // The member reports on a new Work within moments, and that report triggers this
        // reconcile again: one status write then says both that the Work was written and what
        // the member made of it.
        return Ok(Requeue::requeue(wait));
    }
    report(&ctx, &binding, &outcome).await?;
    Ok(outcome.requeue)
}

/// Whether `binding` (this very object, by uid) exists on the API server and is not being
/// deleted. Asked only before a Work is first created.
async fn still_exists(ctx: &Context, binding: &Binding) -> Result<bool, Error> {
    let current = Api::<Binding>::all(ctx.client.clone())
        .get_opt(&binding.name_any())
        .await?;
    Ok(current.is_some_and(|b| {
        b.metadata.uid == binding.metadata.uid && b.metadata.deletion_timestamp.is_none()
    }))
}

/// The binding's Work: from the cache, or as this controller last applied it when the cache
/// has not caught up with that; while the cache is still listing (right after a (re)start), or
/// when neither copy can be trusted, from the API server: a Work missing from a cache being
/// filled would look unreported.
async fn observe(ctx: &Context, binding: &Binding) -> Result<Option<Arc<Work>>, Error> {
    let (namespace, name) = work_ref(binding);
    let works: Api<Work> = Api::namespaced(ctx.client.clone(), &namespace);
    if fleethub_runtime::ready_within(CACHE_WAIT, || ctx.works.wait_until_ready()).await {
        let cached = ctx.works.get(&ObjectRef::new(&name).within(&namespace));
        // Kept slim (`applied` slims what it keeps), like the cache's copies.
        return Ok(ctx
            .applied
            .newest_or_read(&format!("{namespace}/{name}"), cached, || {
                works.get_opt(&name)
            })
            .await?);
    }
    Ok(works.get_opt(&name).await?.map(Arc::new))
}

/// What to do with a binding's Work.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    /// Nothing: no snapshot is bound yet.
    Wait,
    /// Nothing: the Work already carries snapshot `index` as this controller wrote it.
    Keep(i64),
    /// Apply the Work carrying snapshot `index`.
    Apply(i64),
    /// Delete the Work: the cluster is no longer selected.
    Remove,
}

/// What to do with `binding`'s `work`.
fn plan(binding: &Binding, work: Option<&Work>, strategy: &Option<ApplyStrategy>) -> Step {
    let timeout = &binding.spec.health_timeout;
    match (binding.spec.state, binding.spec.resource_snapshot_index) {
        (BindingState::Bound, Some(index))
            if work.is_some_and(|w| up_to_date(w, index, timeout, strategy)) =>
        {
            Step::Keep(index)
        }
        (BindingState::Bound, Some(index)) => Step::Apply(index),
        (BindingState::Unscheduled, _) => Step::Remove,
        (BindingState::Bound | BindingState::Scheduled, _) => Step::Wait,
    }
}

/// The binding's `WorkSynchronized` condition: status, reason, message.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Sync {
    status: &'static str,
    reason: &'static str,
    message: String,
}

/// What [`act`] did: the Work as it now is, the binding's `WorkSynchronized`, and when to look
/// again.
struct Outcome {
    work: Option<Arc<Work>>,
    sync: Sync,
    requeue: Requeue,
    /// The binding's `Overridden` condition, when the overrides were applied this time.
    overridden: Option<NewCondition<'static>>,
}

/// Performs `step` on the binding's `work`.
async fn act(
    ctx: &Context,
    binding: &Binding,
    step: Step,
    work: Option<Arc<Work>>,
    strategy: Option<ApplyStrategy>,
    chosen: &Chosen,
) -> Result<Outcome, Error> {
    let (namespace, name) = work_ref(binding);
    let cluster = &binding.spec.target_cluster;
    let placement = &binding.spec.placement_name;
    let outcome = |work, status, reason, message| Outcome {
        work,
        sync: Sync {
            status,
            reason,
            message,
        },
        requeue: Requeue::await_change(),
        overridden: None,
    };
    let synchronized =
        |index: i64| format!("Work {namespace}/{name} carries resource snapshot {index}");
    let works: Api<Work> = Api::namespaced(ctx.client.clone(), &namespace);
    Ok(match step {
        Step::Wait => outcome(
            work,
            FALSE,
            reason::SCHEDULED,
            "no snapshot is bound yet".to_string(),
        ),
        Step::Keep(index) => outcome(work, TRUE, reason::WORK_SYNCHRONIZED, synchronized(index)),
        Step::Apply(index) => {
            let Some(manifests) = ctx.snapshots.manifests(placement, index as u64).await? else {
                let snapshot = names::resource_snapshot_name(placement, index as u64);
                let message = format!("ResourceSnapshot {snapshot} does not exist");
                return Ok(outcome(work, FALSE, reason::SNAPSHOT_NOT_FOUND, message));
            };
            let applied = ctx.overrides.apply(chosen, binding, &manifests);
            let overridden =
                work_overrides::overridden(cluster, &applied, binding.metadata.generation);
            let (manifests, used) = match applied {
                Ok(applied) => (applied.manifests, applied.used.join(",")),
                Err(e) => {
                    tracing::warn!(error = %e, "an override cannot be applied; the Work is left as it is");
                    return Ok(Outcome {
                        overridden: Some(overridden),
                        ..outcome(work, FALSE, reason::OVERRIDDEN_FAILED, e.to_string())
                    });
                }
            };
            let mut desired = desired_work(binding, index, manifests, strategy);
            let annotations = desired.annotations_mut();
            annotations.insert(OVERRIDES_ANNOTATION.to_string(), chosen.key());
            annotations.insert(work_overrides::APPLIED_ANNOTATION.to_string(), used);
            let params = PatchParams::apply(field_manager::WORK_GENERATOR).force();
            match works.patch(&name, &params, &Patch::Apply(&desired)).await {
                Ok(mut applied) => {
                    let before = work.as_ref().and_then(|w| w.metadata.generation);
                    if before != applied.metadata.generation {
                        tracing::info!(work = %work_key(&applied), index, "Work now carries resource snapshot {index}");
                    }
                    slim_work(&mut applied);
                    ctx.applied.record(&work_key(&applied), applied.clone());
                    let applied = Some(Arc::new(applied));
                    Outcome {
                        overridden: Some(overridden),
                        ..outcome(
                            applied,
                            TRUE,
                            reason::WORK_SYNCHRONIZED,
                            synchronized(index),
                        )
                    }
                }
                Err(kube::Error::Api(e)) if e.code == 404 => Outcome {
                    requeue: Requeue::requeue(Duration::from_secs(10)),
                    ..outcome(
                        work,
                        FALSE,
                        reason::MEMBER_NAMESPACE_MISSING,
                        format!(
                            "namespace {namespace} does not exist yet: is MemberCluster {cluster} registered?"
                        ),
                    )
                },
                Err(e) => return Err(e.into()),
            }
        }
        Step::Remove => {
            ok_if(works.delete(&name, &Default::default()).await, GONE)?;
            ctx.applied.forget(&format!("{namespace}/{name}"));
            let message = format!("cluster {cluster} is no longer selected; its Work is removed");
            outcome(None, FALSE, reason::UNSCHEDULED, message)
        }
    })
}

/// Writes the binding's status when it changed: `WorkSynchronized`, and the member's report on
/// the Work as it now is (from the cache or the Work just applied: the member's next report is
/// a Work change that triggers this again).
async fn report(ctx: &Context, binding: &Binding, outcome: &Outcome) -> Result<(), Error> {
    let mut status = binding_status(
        binding,
        &outcome.sync,
        outcome.work.as_deref(),
        ctx.clock.now(),
    );
    // Restated on every write (a write from a cache that does not hold the last one yet would
    // otherwise drop it): from this reconcile's application, or as the Work records it.
    let overridden = outcome.overridden.clone().or_else(|| {
        let work = outcome.work.as_deref()?;
        work_overrides::recorded(
            &binding.spec.target_cluster,
            work,
            binding.metadata.generation,
        )
    });
    if let Some(overridden) = overridden {
        set_condition(&mut status.conditions, overridden, ctx.clock.now());
    }
    if Some(&status) == binding.status.as_ref() {
        return Ok(());
    }
    let before = binding
        .status
        .as_ref()
        .and_then(|s| s.last_drift_correction.as_ref());
    if let Some(correction) = new_correction(before, status.last_drift_correction.as_ref()) {
        record_correction(ctx, binding, correction).await;
    }
    let name = binding.name_any();
    // The status subresource ignores the spec; it is sent only because the type carries one.
    let patch = Binding {
        status: Some(status),
        ..Binding::new(&name, binding.spec.clone())
    };
    let written = Api::<Binding>::all(ctx.client.clone())
        .patch_status(
            &name,
            &PatchParams::apply(field_manager::WORK_GENERATOR).force(),
            &Patch::Apply(&patch),
        )
        .await?;
    ctx.reported.record(&name, written);
    Ok(())
}

/// The correction to announce: `now`'s, when it is newer than the one the binding recorded
/// `before` (the binding's status survives a hub restart, so none is announced twice).
fn new_correction<'a>(
    before: Option<&ObjectCorrection>,
    now: Option<&'a ObjectCorrection>,
) -> Option<&'a ObjectCorrection> {
    now.filter(|n| before.is_none_or(|b| b.time.0 < n.time.0))
}

/// An Event on `binding`'s Placement saying its member restored the hub's values on an object
/// (the agent raises one on the member's object and the hub's Work too).
async fn record_correction(ctx: &Context, binding: &Binding, correction: &ObjectCorrection) {
    let placement_name = &binding.spec.placement_name;
    let Some(placement) = ctx.placements.get(&ObjectRef::new(placement_name)) else {
        return;
    };
    let had: Vec<String> = correction
        .fields
        .iter()
        .map(drift::describe_field)
        .collect();
    let note = format!(
        "cluster {}: {} restored to the hub's values ({})",
        binding.spec.target_cluster,
        correction.object,
        had.join("; ")
    );
    let event = Event {
        type_: EventType::Normal,
        reason: "DriftCorrected".into(),
        note: Some(note.chars().take(1000).collect()),
        action: "Correct".into(),
        secondary: None,
    };
    if let Err(e) = ctx
        .recorder
        .publish(&event, &placement.object_ref(&()))
        .await
    {
        tracing::debug!(placement = %placement_name, error = %e, "cannot record drift correction event");
    }
}

/// The namespace and name of `binding`'s Work.
fn work_ref(binding: &Binding) -> (String, String) {
    (
        names::member_namespace(&binding.spec.target_cluster),
        names::work_name(&binding.spec.placement_name),
    )
}

/// The Work this controller applies for `binding` at snapshot `index` with its `manifests`.
fn desired_work(
    binding: &Binding,
    index: i64,
    manifests: Vec<serde_json::Value>,
    apply_strategy: Option<ApplyStrategy>,
) -> Work {
    let (namespace, name) = work_ref(binding);
    let placement = &binding.spec.placement_name;
    Work {
        metadata: ObjectMeta {
            name: Some(name),
            namespace: Some(namespace),
            labels: Some(BTreeMap::from([
                (names::PLACEMENT_LABEL.to_string(), placement.clone()),
                (
                    names::CLUSTER_LABEL.to_string(),
                    binding.spec.target_cluster.clone(),
                ),
            ])),
            owner_references: binding.controller_owner_ref(&()).map(|o| vec![o]),
            ..Default::default()
        },
        spec: WorkSpec {
            placement_name: placement.clone(),
            resource_snapshot_index: index,
            health_timeout: binding.spec.health_timeout.clone(),
            apply_strategy,
            workload: WorkloadTemplate { manifests },
        },
        status: None,
    }
}

/// `binding`'s status with `sync` and the member's report on `work`.
fn binding_status(
    binding: &Binding,
    sync: &Sync,
    work: Option<&Work>,
    now: Timestamp,
) -> BindingStatus {
    let generation = binding.metadata.generation;
    let mut status = binding.status.clone().unwrap_or_default();
    let synchronized = NewCondition::new(
        WORK_SYNCHRONIZED,
        sync.status,
        sync.reason,
        sync.message.clone(),
        generation,
    );
    set_condition(&mut status.conditions, synchronized, now);
    let work_generation = work.and_then(|w| w.metadata.generation);
    let empty = WorkStatus::default();
    let reported = work.and_then(|w| w.status.as_ref()).unwrap_or(&empty);
    for type_ in [APPLIED, AVAILABLE] {
        // Only a report on the Work as it is now counts: right after a new snapshot, the
        // member's last report still describes the previous one.
        let current =
            find(&reported.conditions, type_).filter(|c| c.observed_generation == work_generation);
        let new = match current {
            Some(c) if c.status == TRUE => NewCondition::new(
                type_,
                TRUE,
                reason::MEMBER_REPORTED,
                c.message.clone(),
                generation,
            ),
            Some(c) => NewCondition::new(
                type_,
                FALSE,
                reason::MEMBER_REPORTED_NOT_READY,
                c.message.clone(),
                generation,
            ),
            None => NewCondition::new(
                type_,
                FALSE,
                reason::NOT_REPORTED,
                "the member has not reported on its Work yet".to_string(),
                generation,
            ),
        };
        set_condition(&mut status.conditions, new, now);
    }
    status.applied_resource_snapshot_index = reported.applied_resource_snapshot_index;
    let (objects, count) = drift::drifted_objects(reported, drift::MAX_OBJECTS, drift::MAX_FIELDS);
    let drifted = match drift::worst(&objects) {
        Some(worst) => NewCondition::new(
            DRIFTED,
            TRUE,
            worst.as_str(),
            drift::message(&objects, count),
            generation,
        ),
        None if reported.conditions.is_empty() => NewCondition::new(
            DRIFTED,
            FALSE,
            reason::NOT_REPORTED,
            "the member has not reported on its Work yet".to_string(),
            generation,
        ),
        None => NewCondition::new(
            DRIFTED,
            FALSE,
            drift::reason::IN_SYNC,
            "every object on the member matches the hub".to_string(),
            generation,
        ),
    };
    set_condition(&mut status.conditions, drifted, now);
    status.drifted_objects = objects;
    status.drifted_object_count = (count > 0).then_some(count as i32);
    status.last_drift_correction = drift::last_correction(reported);
    status
}

#[cfg(test)]
mod tests;
