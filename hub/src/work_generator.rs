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
use fleethub_crds::{
    Binding, MemberCluster, Placement, ResourceSnapshot, Work, field_manager, names,
};
use futures::StreamExt;
use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ManagedFieldsEntry, ObjectMeta};
use kube::api::{Patch, PatchParams};
use kube::runtime::controller::Action as Requeue;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::{Api, Client, Resource, ResourceExt};
use tokio_util::sync::CancellationToken;

use crate::Error;
use crate::clock::Clock;
use crate::error::{GONE, ok_if};
use crate::metrics::Metrics;
use crate::work_overrides::{self, Chosen, OVERRIDES_ANNOTATION, OverrideStores};
use fleethub_runtime::CACHE_WAIT;

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
}

/// Whether `work` already is what this controller would apply for `index` and `timeout`, so
/// that a reconcile after a member's report (most of them, and every Binding after a hub
/// restart) makes no request to read the snapshot or write the Work. The Work's managed fields
/// say who wrote its spec: only this controller may have (the agent writes the status and a
/// finalizer); anyone else's edit of the spec makes it stale, and the apply takes it back.
fn up_to_date(
    work: &Work,
    index: i64,
    timeout: &Option<String>,
    strategy: &Option<ApplyStrategy>,
) -> bool {
    let entries = work.metadata.managed_fields.as_deref().unwrap_or_default();
    let writes_spec = |e: &&ManagedFieldsEntry| {
        e.subresource.as_deref().unwrap_or_default().is_empty()
            && e.fields_v1
                .as_ref()
                .is_some_and(|f| f.0.get("f:spec").is_some())
    };
    let (ours, others): (Vec<_>, Vec<_>) = entries
        .iter()
        .filter(writes_spec)
        .partition(|e| e.manager.as_deref() == Some(field_manager::WORK_GENERATOR));
    work.spec.resource_snapshot_index == index
        && work.spec.health_timeout == *timeout
        && work.spec.apply_strategy == *strategy
        && work.metadata.deletion_timestamp.is_none()
        && !ours.is_empty()
        && others.is_empty()
}

/// `work` as this controller's cache keeps it: without its manifests, which nothing here reads
/// from the cache ([`up_to_date`] goes by the index, the settings and the managed fields; an
/// apply sends the manifests anew). They are most of a Work, and parsed into JSON values they
/// take many times their size in memory: 1,000 Works of 40 KB each held 535 MiB.
fn slim_work(work: &mut Work) {
    work.spec.workload.manifests = Vec::new();
}

fn work_key(work: &Work) -> String {
    format!(
        "{}/{}",
        work.metadata.namespace.as_deref().unwrap_or_default(),
        work.name_any()
    )
}

/// Runs the controller until `shutdown`.
pub async fn run(
    client: Client,
    clock: Arc<dyn Clock>,
    metrics: Metrics,
    shutdown: CancellationToken,
) {
    let (works, works_writer) = reflector::store::<Work>();
    let (placements, placements_writer) = reflector::store::<Placement>();
    let (cluster_overrides, cluster_overrides_writer) = reflector::store();
    let (namespaced_overrides, namespaced_overrides_writer) = reflector::store();
    let (members, members_writer) = reflector::store::<MemberCluster>();
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
    });
    let controller = fleethub_runtime::controller_for(Api::<Binding>::all(client.clone()));
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
    controller
        .owns_stream(fleethub_runtime::slim_reflected_stream(
            Api::<Work>::all(client.clone()),
            works_writer,
            slim_work,
        ))
        // A placement's applyStrategy reaches its Works without a new snapshot or run.
        .watches_stream(
            fleethub_runtime::reflected_stream(
                Api::<Placement>::all(client.clone()),
                placements_writer,
            ),
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
        .watches_stream(
            fleethub_runtime::reflected_stream(
                Api::<MemberCluster>::all(client.clone()),
                members_writer,
            ),
            move |m: MemberCluster| following(b3.clone(), Some(m.name_any())),
        )
        .graceful_shutdown_on(async move { shutdown.cancelled().await })
        .run(
            |o, c| crate::error::bounded(reconcile(o, c)),
            error_policy,
            ctx,
        )
        .for_each(move |res| {
            metrics.observe("work-generator", &res);
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

/// The manifests of snapshot `index` of `placement`, all parts in order.
async fn snapshot_manifests(
    client: &Client,
    placement: &str,
    index: u64,
) -> Result<Option<Vec<serde_json::Value>>, Error> {
    let api: Api<ResourceSnapshot> = Api::all(client.clone());
    let Some(first) = api
        .get_opt(&names::resource_snapshot_name(placement, index))
        .await?
    else {
        return Ok(None);
    };
    let mut manifests = first.spec.resources.clone();
    for part in 1..first.spec.parts.max(1) as u32 {
        let name = names::resource_snapshot_part_name(placement, index, part);
        let Some(s) = api.get_opt(&name).await? else {
            return Err(Error::Invalid(format!(
                "ResourceSnapshot {name} (part {part} of {} of snapshot {index}) is missing",
                first.spec.parts
            )));
        };
        manifests.extend(s.spec.resources);
    }
    Ok(Some(manifests))
}

#[tracing::instrument(skip_all, fields(binding = %binding.name_any()))]
async fn reconcile(binding: Arc<Binding>, ctx: Arc<Context>) -> Result<Requeue, Error> {
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
    let outcome = act(&ctx, &binding, step, work, strategy, &chosen).await?;
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

/// The binding's Work, from the cache; while the cache is still listing (right after a
/// (re)start), from the API server: a Work missing from a cache being filled would look
/// unreported.
async fn observe(ctx: &Context, binding: &Binding) -> Result<Option<Arc<Work>>, Error> {
    let (namespace, name) = work_ref(binding);
    if fleethub_runtime::ready_within(CACHE_WAIT, || ctx.works.wait_until_ready()).await {
        return Ok(ctx.works.get(&ObjectRef::new(&name).within(&namespace)));
    }
    let works: Api<Work> = Api::namespaced(ctx.client.clone(), &namespace);
    Ok(works.get_opt(&name).await?.map(Arc::new))
}

/// The applyStrategy of `binding`'s placement (none while the placement is not known: a
/// Work written meanwhile is rewritten once the cache has it).
async fn apply_strategy(ctx: &Context, binding: &Binding) -> Option<ApplyStrategy> {
    let name = &binding.spec.placement_name;
    if !fleethub_runtime::ready_within(CACHE_WAIT, || ctx.placements.wait_until_ready()).await {
        tracing::debug!(placement = %name, "placement cache not ready; Work written without its applyStrategy");
    }
    ctx.placements
        .get(&ObjectRef::new(name))
        .and_then(|p| p.spec.strategy.as_ref()?.apply_strategy.clone())
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
            let Some(manifests) = snapshot_manifests(&ctx.client, placement, index as u64).await?
            else {
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
                Ok(applied) => {
                    let before = work.as_ref().and_then(|w| w.metadata.generation);
                    if before != applied.metadata.generation {
                        tracing::info!(work = %work_key(&applied), index, "Work now carries resource snapshot {index}");
                    }
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
    Api::<Binding>::all(ctx.client.clone())
        .patch_status(
            &name,
            &PatchParams::apply(field_manager::WORK_GENERATOR).force(),
            &Patch::Apply(&patch),
        )
        .await?;
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
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::FieldsV1;
    use serde_json::json;

    use super::*;

    fn entry(manager: &str, subresource: &str, fields: serde_json::Value) -> ManagedFieldsEntry {
        ManagedFieldsEntry {
            manager: Some(manager.into()),
            subresource: (!subresource.is_empty()).then(|| subresource.into()),
            fields_v1: Some(FieldsV1(fields)),
            ..Default::default()
        }
    }

    fn work(index: i64, timeout: Option<&str>, entries: Vec<ManagedFieldsEntry>) -> Work {
        let mut w: Work = serde_json::from_value(json!({
            "apiVersion": "fleethub.dev/v1alpha1", "kind": "Work",
            "metadata": {"name": "web", "namespace": "fleet-member-a"},
            "spec": {"placementName": "web", "resourceSnapshotIndex": index,
                     "healthTimeout": timeout, "workload": {"manifests": []}},
        }))
        .unwrap();
        w.metadata.managed_fields = Some(entries);
        w
    }

    #[test]
    fn a_work_is_up_to_date_only_when_this_controller_alone_wrote_its_spec_at_the_index() {
        let ours = entry(
            field_manager::WORK_GENERATOR,
            "",
            json!({"f:spec": {"f:resourceSnapshotIndex": {}}}),
        );
        let agent_finalizer = entry(
            field_manager::MEMBER_AGENT,
            "",
            json!({"f:metadata": {"f:finalizers": {}}}),
        );
        let agent_status = entry(
            field_manager::MEMBER_AGENT,
            "status",
            json!({"f:status": {"f:conditions": {}}}),
        );
        let edit = entry("kubectl-edit", "", json!({"f:spec": {"f:workload": {}}}));
        let timeout = Some("30s".to_string());
        let all = |extra: Vec<ManagedFieldsEntry>| {
            let mut v = vec![ours.clone(), agent_finalizer.clone(), agent_status.clone()];
            v.extend(extra);
            v
        };

        assert!(up_to_date(
            &work(3, Some("30s"), all(vec![])),
            3,
            &timeout,
            &None
        ));
        // Another index or health timeout: apply.
        assert!(!up_to_date(
            &work(2, Some("30s"), all(vec![])),
            3,
            &timeout,
            &None
        ));
        assert!(!up_to_date(&work(3, None, all(vec![])), 3, &timeout, &None));
        // Someone else edited the spec: apply, which takes it back.
        assert!(!up_to_date(
            &work(3, Some("30s"), all(vec![edit])),
            3,
            &timeout,
            &None
        ));
        // Not written by this controller at all (e.g. created by hand): apply.
        let theirs = vec![
            agent_finalizer.clone(),
            entry("kubectl", "", json!({"f:spec": {}})),
        ];
        assert!(!up_to_date(
            &work(3, Some("30s"), theirs),
            3,
            &timeout,
            &None
        ));
    }

    fn binding(state: BindingState, index: Option<i64>) -> Binding {
        let mut b = Binding::new(
            "web-a",
            fleethub_crds::binding::BindingSpec {
                placement_name: "web".into(),
                target_cluster: "a".into(),
                state,
                resource_snapshot_index: index,
                update_run_name: None,
                health_timeout: Some("30s".into()),
                ..Default::default()
            },
        );
        b.metadata.uid = Some("uid-b".into());
        b.metadata.generation = Some(2);
        b
    }

    #[test]
    fn the_cache_keeps_everything_a_reconcile_reads_but_the_manifests() {
        let ours = entry(
            field_manager::WORK_GENERATOR,
            "",
            json!({"f:spec": {"f:resourceSnapshotIndex": {}, "f:workload": {}}}),
        );
        let bound = binding(BindingState::Bound, Some(3));
        let manifests: Vec<serde_json::Value> = (0..20)
            .map(|i| {
                json!({"apiVersion": "v1", "kind": "ConfigMap",
                            "metadata": {"name": format!("c{i}"), "namespace": "app"},
                            "data": {"k": "v".repeat(1000)}})
            })
            .collect();
        let mut full = desired_work(&bound, 3, manifests, None);
        full.metadata.managed_fields = Some(vec![ours]);
        full.metadata.generation = Some(4);
        full.annotations_mut().insert(
            OVERRIDES_ANNOTATION.to_string(),
            "app/web-override-0".to_string(),
        );
        full.status = Some(WorkStatus {
            applied_resource_snapshot_index: Some(3),
            ..Default::default()
        });
        let mut cached = full.clone();
        slim_work(&mut cached);

        assert!(cached.spec.workload.manifests.is_empty());
        assert!(
            serde_json::to_vec(&cached).unwrap().len() * 10
                < serde_json::to_vec(&full).unwrap().len()
        );
        // What a reconcile reads from the cache is all there: the plan, the overrides the Work
        // was written with, and the member's report.
        assert_eq!(plan(&bound, Some(&cached), &None), Step::Keep(3));
        assert_eq!(
            plan(&bound, Some(&cached), &None),
            plan(&bound, Some(&full), &None)
        );
        assert_eq!(cached.metadata.annotations, full.metadata.annotations);
        let sync = Sync {
            status: TRUE,
            reason: reason::WORK_SYNCHRONIZED,
            message: "carried".into(),
        };
        let now = Timestamp::from_second(1_800_000_000).unwrap();
        assert_eq!(
            binding_status(&bound, &sync, Some(&cached), now),
            binding_status(&bound, &sync, Some(&full), now)
        );
    }

    #[test]
    fn a_changed_apply_strategy_rewrites_the_work() {
        let ours = entry(
            field_manager::WORK_GENERATOR,
            "",
            json!({"f:spec": {"f:resourceSnapshotIndex": {}}}),
        );
        let current = work(3, Some("30s"), vec![ours]);
        let bound = binding(BindingState::Bound, Some(3));
        let never = Some(ApplyStrategy {
            when_to_take_over: Some(fleethub_crds::apply_strategy::WhenToTakeOver::Never),
            ..Default::default()
        });
        assert_eq!(plan(&bound, Some(&current), &never), Step::Apply(3));
        let w = desired_work(&bound, 3, vec![], never.clone());
        assert_eq!(
            serde_json::to_value(&w).unwrap()["spec"]["applyStrategy"],
            json!({"whenToTakeOver": "Never"})
        );
    }

    #[test]
    fn the_plan_follows_the_binding_state_and_the_work() {
        let ours = entry(
            field_manager::WORK_GENERATOR,
            "",
            json!({"f:spec": {"f:resourceSnapshotIndex": {}}}),
        );
        let current = work(3, Some("30s"), vec![ours]);
        let bound = binding(BindingState::Bound, Some(3));
        assert_eq!(plan(&bound, Some(&current), &None), Step::Keep(3));
        assert_eq!(plan(&bound, None, &None), Step::Apply(3));
        let moved = binding(BindingState::Bound, Some(4));
        assert_eq!(plan(&moved, Some(&current), &None), Step::Apply(4));
        let scheduled = binding(BindingState::Scheduled, None);
        assert_eq!(plan(&scheduled, Some(&current), &None), Step::Wait);
        let unscheduled = binding(BindingState::Unscheduled, Some(3));
        assert_eq!(plan(&unscheduled, Some(&current), &None), Step::Remove);
    }

    #[test]
    fn the_work_is_typed_owned_by_its_binding_and_carries_no_nulls() {
        let mut b = binding(BindingState::Bound, Some(3));
        b.spec.health_timeout = None;
        let manifest =
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "app"}});
        let w = desired_work(&b, 3, vec![manifest.clone()], None);
        let v = serde_json::to_value(&w).unwrap();
        assert_eq!(
            v,
            json!({
                "apiVersion": "fleethub.dev/v1alpha1", "kind": "Work",
                "metadata": {
                    "name": "web", "namespace": "fleet-member-a",
                    "labels": {"fleethub.dev/placement": "web", "fleethub.dev/cluster": "a"},
                    "ownerReferences": [{"apiVersion": "fleethub.dev/v1alpha1", "kind": "Binding",
                                         "name": "web-a", "uid": "uid-b", "controller": true}],
                },
                "spec": {"placementName": "web", "resourceSnapshotIndex": 3,
                         "workload": {"manifests": [manifest]}},
            })
        );
    }

    #[test]
    fn the_binding_reports_only_what_the_member_said_about_the_current_work() {
        let b = binding(BindingState::Bound, Some(3));
        let sync = Sync {
            status: TRUE,
            reason: reason::WORK_SYNCHRONIZED,
            message: "carried".into(),
        };
        let mut w = work(3, Some("30s"), vec![]);
        w.metadata.generation = Some(5);
        let condition =
            |type_: &str, status: &str, generation: i64| fleethub_crds::conditions::Condition {
                type_: type_.into(),
                status: status.into(),
                reason: "R".into(),
                message: format!("{type_} {status}"),
                observed_generation: Some(generation),
                last_transition_time: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                    Timestamp::UNIX_EPOCH,
                ),
            };
        w.status = Some(WorkStatus {
            // Applied describes the current generation; Available an older one.
            conditions: vec![condition(APPLIED, FALSE, 5), condition(AVAILABLE, TRUE, 4)],
            applied_resource_snapshot_index: Some(2),
            ..Default::default()
        });
        let now = Timestamp::from_second(1_800_000_000).unwrap();
        let status = binding_status(&b, &sync, Some(&w), now);
        let of = |t: &str| {
            let c = find(&status.conditions, t).unwrap();
            (
                c.status.as_str(),
                c.reason.as_str(),
                c.message.as_str(),
                c.observed_generation,
            )
        };
        assert_eq!(
            of(WORK_SYNCHRONIZED),
            (TRUE, reason::WORK_SYNCHRONIZED, "carried", Some(2))
        );
        assert_eq!(
            of(APPLIED),
            (
                FALSE,
                reason::MEMBER_REPORTED_NOT_READY,
                "Applied False",
                Some(2)
            )
        );
        assert_eq!(
            of(AVAILABLE),
            (
                FALSE,
                reason::NOT_REPORTED,
                "the member has not reported on its Work yet",
                Some(2)
            )
        );
        assert_eq!(status.applied_resource_snapshot_index, Some(2));

        w.status.as_mut().unwrap().conditions = vec![condition(AVAILABLE, TRUE, 5)];
        let status = binding_status(&b, &sync, Some(&w), now);
        let available = find(&status.conditions, AVAILABLE).unwrap();
        assert_eq!(
            (available.status.as_str(), available.reason.as_str()),
            (TRUE, reason::MEMBER_REPORTED)
        );
        let gone = binding_status(&b, &sync, None, now);
        assert_eq!(gone.applied_resource_snapshot_index, None);
    }

    #[test]
    fn the_binding_lists_what_differs_on_the_member_and_its_last_correction() {
        use fleethub_crds::apply_strategy::{DriftCorrection, DriftType, FieldDiff, ManifestDrift};
        use fleethub_crds::work::{ManifestCondition, ManifestIdentifier};
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
        let b = binding(BindingState::Bound, Some(3));
        let sync = Sync {
            status: TRUE,
            reason: reason::WORK_SYNCHRONIZED,
            message: "carried".into(),
        };
        let now = Timestamp::from_second(1_800_000_000).unwrap();
        let field = FieldDiff {
            path: "data.v".into(),
            member_value: Some("\"edited\"".into()),
            hub_value: Some("\"1\"".into()),
        };
        let id = |name: &str| ManifestIdentifier {
            kind: "ConfigMap".into(),
            version: "v1".into(),
            namespace: Some("app".into()),
            name: name.into(),
            ..Default::default()
        };
        let mut w = work(3, None, vec![]);
        w.status = Some(WorkStatus {
            conditions: vec![fleethub_crds::conditions::Condition {
                type_: APPLIED.into(),
                status: FALSE.into(),
                reason: "Drifted".into(),
                message: String::new(),
                observed_generation: None,
                last_transition_time: Time(now),
            }],
            manifest_conditions: vec![
                ManifestCondition {
                    identifier: id("a"),
                    drift: Some(ManifestDrift {
                        type_: DriftType::Drifted,
                        first_seen_time: Time(now),
                        field_count: 1,
                        fields: vec![field.clone()],
                    }),
                    ..Default::default()
                },
                ManifestCondition {
                    identifier: id("b"),
                    last_correction: Some(DriftCorrection {
                        time: Time(now),
                        fields: vec![field],
                    }),
                    ..Default::default()
                },
            ],
            ..Default::default()
        });
        let status = binding_status(&b, &sync, Some(&w), now);
        let drifted = find(&status.conditions, DRIFTED).unwrap();
        assert_eq!(
            (drifted.status.as_str(), drifted.reason.as_str()),
            (TRUE, "Drifted")
        );
        assert_eq!(
            drifted.message,
            "1 object differs from the hub: ConfigMap app/a (Drifted: data.v: member \"edited\", hub \"1\")"
        );
        assert_eq!(status.drifted_object_count, Some(1));
        assert_eq!(status.drifted_objects[0].object, "ConfigMap app/a");
        let correction = status.last_drift_correction.clone().unwrap();
        assert_eq!(correction.object, "ConfigMap app/b");
        // A correction is announced once: not again when the binding already records it.
        assert!(new_correction(None, Some(&correction)).is_some());
        assert!(new_correction(Some(&correction), Some(&correction)).is_none());

        w.status.as_mut().unwrap().manifest_conditions.clear();
        let synced = binding_status(&b, &sync, Some(&w), now);
        let drifted = find(&synced.conditions, DRIFTED).unwrap();
        assert_eq!(
            (drifted.status.as_str(), drifted.reason.as_str()),
            (FALSE, drift::reason::IN_SYNC)
        );
        assert!(synced.drifted_objects.is_empty());
        assert_eq!(synced.drifted_object_count, None);
        let unreported = binding_status(&b, &sync, None, now);
        let drifted = find(&unreported.conditions, DRIFTED).unwrap();
        assert_eq!(drifted.reason, reason::NOT_REPORTED);
    }
}
