//! The AutoUpdatePolicy controller. Each reconcile: observe (the policy read fresh, the target's
//! image, the placement, the runs in flight; the registry only when a check is due) → plan (the
//! pure [`plan`](super::plan)) → write the status (with a resourceVersion precondition) → act
//! (idempotent writes derived from that status) → events and metrics. Triggered by changes of
//! policies, of their placements and of the UpdateRuns they created; requeued for the schedule.

use std::sync::Arc;
use std::time::Duration;

use fleethub_crds::apply::StatusApply;
use fleethub_crds::auto_update::{
    AutoUpdatePolicy, AutoUpdatePolicyStatus, CHECK_REQUESTED_ANNOTATION, InFlightPhase,
    POLICY_LABEL, RESET_REQUESTED_ANNOTATION,
};
use fleethub_crds::conditions::{find, is_true};
use fleethub_crds::field_manager::AUTO_UPDATE as FIELD_MANAGER;
use fleethub_crds::placement::RolloutStrategyType;
use fleethub_crds::run_progress::RunPhase;
use fleethub_crds::strategy::OnFailure;
use fleethub_crds::update_run::{PROGRESSING, SUCCEEDED, UpdateRunSpec, reason as run_reason};
use fleethub_crds::work::AVAILABLE;
use fleethub_crds::{Placement, ResourceSnapshot, UpdateRun, names};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{ObjectReference, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::api::{
    ApiResource, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams, PostParams,
};
use kube::runtime::controller::Action as Requeue;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Api, Client, Resource, ResourceExt};
use tokio_util::sync::CancellationToken;

use super::image::ImageRef;
use super::plan::{self, Action, Observed, PlacementView, Plan, RunOutcome, TargetView};
use super::registry::{Credentials, RegistryClient};
use super::schedule::Schedule;
use super::versions;
use crate::Error;
use crate::clock::Clock;
use crate::error::{EXISTS, GONE, ok_if};
use crate::metrics::Metrics;
use fleethub_runtime::retry::{ERROR_BACKOFF, FailureBackoff};

/// What the reconciler shares.
pub struct Context {
    client: Client,
    metrics: Metrics,
    clock: Arc<dyn Clock>,
    recorder: Recorder,
    registry: RegistryClient,
    runs: Store<UpdateRun>,
    freezes: Store<fleethub_crds::Freeze>,
    /// The hub's own namespace: registry credentials (`spec.secretRef`) are read from here.
    hub_namespace: String,
    errors: FailureBackoff<ObjectRef<AutoUpdatePolicy>>,
}

/// Runs the controller until `shutdown`.
pub async fn run(
    client: Client,
    hub_namespace: String,
    insecure_registries: Vec<String>,
    clock: Arc<dyn Clock>,
    metrics: Metrics,
    shutdown: CancellationToken,
) {
    let registry = RegistryClient::default().with_insecure_registries(insecure_registries);
    let (runs, runs_writer) = kube::runtime::reflector::store::<UpdateRun>();
    let run_stream =
        fleethub_runtime::reflected_stream(Api::<UpdateRun>::all(client.clone()), runs_writer);
    let controller = fleethub_runtime::controller_for(Api::<AutoUpdatePolicy>::all(client.clone()));
    let policies = controller.store();
    let placement_stream = fleethub_runtime::watch_stream(Api::<Placement>::all(client.clone()));
    let (freezes, freezes_writer) = kube::runtime::reflector::store::<fleethub_crds::Freeze>();
    let freeze_stream = fleethub_runtime::reflected_stream(
        Api::<fleethub_crds::Freeze>::all(client.clone()),
        freezes_writer,
    );
    let every_policy = policies.clone();
    let ctx = Arc::new(Context {
        recorder: Recorder::new(client.clone(), Reporter::from("fleethub-hub")),
        client,
        metrics: metrics.clone(),
        clock,
        registry,
        runs,
        freezes,
        hub_namespace,
        errors: FailureBackoff::new(ERROR_BACKOFF),
    });
    let for_placement = move |p: Placement| -> Vec<ObjectRef<AutoUpdatePolicy>> {
        let name = p.name_any();
        policies
            .state()
            .iter()
            .filter(|a| a.spec.placement_name == name)
            .map(|a| ObjectRef::from_obj(a.as_ref()))
            .collect()
    };
    controller
        .watches_stream(run_stream, |r: UpdateRun| {
            r.labels()
                .get(POLICY_LABEL)
                .map(|p| ObjectRef::<AutoUpdatePolicy>::new(p))
        })
        .watches_stream(placement_stream, for_placement)
        // A freeze made or lifted concerns every policy (each checks its own placement).
        .watches_stream(freeze_stream, move |_: fleethub_crds::Freeze| {
            every_policy
                .state()
                .iter()
                .map(|a| ObjectRef::from_obj(a.as_ref()))
                .collect::<Vec<_>>()
        })
        .graceful_shutdown_on(async move { shutdown.cancelled().await })
        .run(
            |policy, ctx| async move {
                let key = ObjectRef::from_obj(policy.as_ref());
                let result = crate::error::bounded(reconcile(policy, ctx.clone())).await;
                ctx.errors.observe(&key, result)
            },
            error_policy,
            ctx,
        )
        .for_each(move |res| {
            metrics.observe("auto-update", &res);
            if let Err(e) = res {
                tracing::debug!(error = %e, "auto-update reconcile error");
            }
            std::future::ready(())
        })
        .await;
}

fn error_policy(policy: Arc<AutoUpdatePolicy>, error: &Error, ctx: Arc<Context>) -> Requeue {
    let retry_in = if error.is_conflict() {
        Duration::from_secs(1)
    } else {
        ctx.errors.failed(ObjectRef::from_obj(policy.as_ref()))
    };
    tracing::warn!(policy = %policy.name_any(), error = %error, ?retry_in, "auto-update reconcile failed; retrying");
    Requeue::requeue(retry_in)
}

async fn reconcile(cached: Arc<AutoUpdatePolicy>, ctx: Arc<Context>) -> Result<Requeue, Error> {
    let api: Api<AutoUpdatePolicy> = Api::all(ctx.client.clone());
    // Always plan on a fresh read: the status write below is conditioned on its version.
    let Some(policy) = api.get_opt(&cached.name_any()).await? else {
        return Ok(Requeue::await_change());
    };
    if policy.metadata.deletion_timestamp.is_some() {
        return Ok(Requeue::await_change());
    }
    let now = ctx.clock.now();
    let status = policy.status.clone().unwrap_or_default();
    let schedule = Schedule::parse(&policy.spec.schedule, policy.spec.time_zone.as_deref());
    let constraint = semver::VersionReq::parse(&policy.spec.version_constraint).map_err(|e| {
        format!(
            "spec.versionConstraint {:?} is not a semver requirement: {e}",
            policy.spec.version_constraint
        )
    });
    let target = read_target(&ctx, &policy).await?;
    let placement = read_placement(&ctx, &policy).await?;
    let flight = status.in_flight.as_ref();
    let awaited_image = flight
        .filter(|f| f.phase == InFlightPhase::Applying)
        .map(|f| &f.image);
    let snapshot_with_image = match awaited_image {
        Some(image) => snapshot_with_image(&ctx, &policy, placement.as_ref().ok(), image).await?,
        None => None,
    };
    let update_run = outcome(&ctx, flight.and_then(|f| f.update_run.as_deref()));
    let update_run_rollback = flight
        .and_then(|f| f.update_run.as_deref())
        .and_then(|name| ctx.runs.get(&ObjectRef::new(name)))
        .and_then(|run| run.status.as_ref().and_then(|s| s.rollback_run.clone()));
    let rollback_run = outcome(&ctx, flight.and_then(|f| f.rollback_run.as_deref()));
    let name = policy.name_any();
    let annotations = policy.annotations();
    let mut observed = Observed {
        name: &name,
        generation: policy.metadata.generation,
        spec: &policy.spec,
        status: &status,
        check_request: annotations
            .get(CHECK_REQUESTED_ANNOTATION)
            .map(String::as_str),
        reset_request: annotations
            .get(RESET_REQUESTED_ANNOTATION)
            .map(String::as_str),
        retry_request: annotations
            .get(fleethub_crds::auto_update::RETRY_REQUESTED_ANNOTATION)
            .map(String::as_str),
        now,
        next_tick: schedule
            .as_ref()
            .map(|s| s.next_after(now))
            .map_err(|e| e.to_string()),
        constraint: constraint.as_ref().map(|_| ()).map_err(Clone::clone),
        target: target.clone(),
        placement,
        snapshot_with_image,
        update_run,
        update_run_rollback,
        rollback_run,
        registry: None,
    };
    let mut decided = plan::plan(&observed);
    if decided == Plan::CheckRegistry {
        let offered = check(
            &ctx,
            &policy,
            &status,
            target.as_ref().ok(),
            constraint.ok(),
        )
        .await;
        observed.registry = Some(offered);
        decided = plan::plan(&observed);
    }
    let Plan::Step(step) = decided else {
        return Err(Error::Invalid(
            "the plan asked for a second registry check".into(),
        ));
    };
    let plan::Step {
        status: new_status,
        actions,
        notes,
        requeue,
    } = *step;
    if new_status != status {
        let body = StatusApply::new::<AutoUpdatePolicy>(&name, None, &new_status)
            .at_version(policy.metadata.resource_version.clone());
        api.patch_status(
            &name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&body),
        )
        .await?;
    }
    for action in &actions {
        act(&ctx, &policy, action).await?;
    }
    let reference = policy.object_ref(&());
    for note in notes {
        tracing::info!(policy = %name, reason = note.reason, "{}", note.message);
        publish(&ctx, &reference, note).await;
    }
    count(&ctx.metrics, &name, &status, &new_status);
    Ok(Requeue::requeue(requeue.max(Duration::from_millis(200))))
}

async fn publish(ctx: &Context, reference: &ObjectReference, note: plan::Note) {
    let event = Event {
        type_: if note.warning {
            EventType::Warning
        } else {
            EventType::Normal
        },
        reason: note.reason.to_string(),
        note: Some(note.message),
        action: "AutoUpdate".into(),
        secondary: None,
    };
    if let Err(e) = ctx.recorder.publish(&event, reference).await {
        tracing::debug!(error = %e, "cannot record event");
    }
}

/// Metrics from the change of status this reconcile made.
fn count(
    metrics: &Metrics,
    policy: &str,
    before: &AutoUpdatePolicyStatus,
    after: &AutoUpdatePolicyStatus,
) {
    let au = &metrics.auto_update;
    if after.last_check_time != before.last_check_time {
        let failed = after.conditions.iter().any(|c| {
            c.type_ == fleethub_crds::auto_update::READY
                && c.reason == fleethub_crds::auto_update::reason::REGISTRY_ERROR
        });
        au.count_check(!failed);
    }
    let started = |s: &AutoUpdatePolicyStatus| {
        s.in_flight
            .as_ref()
            .map(|f| (f.version.clone(), f.start_time.clone()))
    };
    if after.in_flight.is_some() && started(after) != started(before) {
        au.updates_started.inc();
    }
    if after.rollback_count > before.rollback_count {
        au.rollbacks.inc();
    }
    au.set_state(
        policy,
        after.circuit_open,
        after.current_version.as_deref(),
        after.available_version.as_deref(),
    );
}

/// The target container's image on the hub.
async fn read_target(
    ctx: &Context,
    policy: &AutoUpdatePolicy,
) -> Result<Result<TargetView, String>, Error> {
    let t = &policy.spec.target;
    let api = target_api(ctx, policy);
    let Some(object) = api.get_opt(&t.name).await? else {
        return Ok(Err(format!(
            "{} {}/{} does not exist on the hub",
            t.kind.as_str(),
            t.namespace,
            t.name
        )));
    };
    let containers = object.data["spec"]["template"]["spec"]["containers"].as_array();
    let Some(image) = containers
        .into_iter()
        .flatten()
        .find(|c| c["name"] == t.container.as_str())
        .and_then(|c| c["image"].as_str())
    else {
        return Ok(Err(format!(
            "{} {}/{} has no container {:?} with an image (spec.target.container)",
            t.kind.as_str(),
            t.namespace,
            t.name,
            t.container
        )));
    };
    Ok(Ok(match ImageRef::parse(image) {
        Ok(parsed) => TargetView {
            image: image.to_string(),
            digest_pinned: parsed.is_digest_pinned(),
            tag: parsed.tag.clone(),
        },
        Err(e) => {
            return Ok(Err(format!(
                "the image {image:?} of container {} cannot be read: {e}",
                t.container
            )));
        }
    }))
}

fn target_api(ctx: &Context, policy: &AutoUpdatePolicy) -> Api<DynamicObject> {
    let t = &policy.spec.target;
    let resource = ApiResource::from_gvk(&GroupVersionKind::gvk("apps", "v1", t.kind.as_str()));
    Api::namespaced_with(ctx.client.clone(), &t.namespace, &resource)
}

/// The placement, as the plan needs it.
async fn read_placement(
    ctx: &Context,
    policy: &AutoUpdatePolicy,
) -> Result<Result<PlacementView, String>, Error> {
    let name = &policy.spec.placement_name;
    let Some(placement) = Api::<Placement>::all(ctx.client.clone())
        .get_opt(name)
        .await?
    else {
        return Ok(Err(format!(
            "Placement {name} does not exist (spec.placementName)"
        )));
    };
    let external = placement
        .spec
        .strategy
        .as_ref()
        .is_some_and(|s| s.type_ == RolloutStrategyType::External);
    if !external {
        return Ok(Err(format!(
            "Placement {name}'s strategy type is not External: only UpdateRuns may roll it (spec.placementName)"
        )));
    }
    let status = placement.status.clone().unwrap_or_default();
    let latest = status.latest_resource_snapshot_index;
    let current = same_content_as_latest(ctx, name, latest, &status.placement_statuses).await?;
    let behind: Vec<&str> = status
        .placement_statuses
        .iter()
        .filter(|c| c.resource_snapshot_index.is_some_and(|i| !current(i)))
        .map(|c| c.cluster_name.as_str())
        .collect();
    let active: Vec<String> = ctx
        .runs
        .state()
        .iter()
        .filter(|r| &r.spec.placement_name == name)
        .filter(|r| {
            r.status
                .as_ref()
                .is_none_or(|s| find(&s.conditions, SUCCEEDED).is_none())
        })
        .map(|r| r.name_any())
        .collect();
    let settled = behind.is_empty() && active.is_empty();
    // The placement's own roll-up: every selected cluster runs the latest snapshot and is
    // available (its per-cluster list is capped on large fleets).
    let all_available = status.selected_cluster_count.unwrap_or_default() > 0
        && is_true(&status.conditions, AVAILABLE)
        && status.placement_statuses.iter().all(|c| {
            c.resource_snapshot_index.is_some_and(&current) && is_true(&c.conditions, AVAILABLE)
        });
    let unsettled_because = if !active.is_empty() {
        format!("UpdateRun {} is in progress", active.join(", "))
    } else if !behind.is_empty() {
        format!(
            "clusters {} are not at the newest snapshot {} (a change waits for an UpdateRun)",
            behind.join(", "),
            latest.unwrap_or_default()
        )
    } else {
        String::new()
    };
    let frozen = fleethub_crds::freeze::holding(
        ctx.freezes.state().iter().map(|f| f.as_ref()),
        name,
        ctx.clock.now(),
    )
    .map(|f| f.describe());
    Ok(Ok(PlacementView {
        frozen,
        latest_index: latest,
        settled,
        available: settled && all_available,
        unsettled_because,
    }))
}

/// Which snapshot indexes hold the same objects as the newest one. A rollback returns clusters
/// to the snapshot they ran before, while the previous image back on the hub object cuts a new
/// snapshot of the same objects: those clusters are not behind.
async fn same_content_as_latest(
    ctx: &Context,
    placement: &str,
    latest: Option<i64>,
    clusters: &[fleethub_crds::placement::ClusterPlacementStatus],
) -> Result<impl Fn(i64) -> bool + use<>, Error> {
    let mut same: Vec<i64> = latest.into_iter().collect();
    if clusters
        .iter()
        .any(|c| c.resource_snapshot_index.is_some_and(|i| Some(i) != latest))
    {
        let selector = format!("{}={placement}", names::PLACEMENT_LABEL);
        let snapshots = Api::<ResourceSnapshot>::all(ctx.client.clone())
            .list(&ListParams::default().labels(&selector))
            .await?;
        let hash = |index: i64| {
            snapshots
                .items
                .iter()
                .find(|s| s.spec.resource_index == index)
                .map(|s| s.spec.content_hash.as_str())
        };
        if let Some(newest) = latest.and_then(hash) {
            same.extend(
                snapshots
                    .items
                    .iter()
                    .filter(|s| s.spec.content_hash == newest)
                    .map(|s| s.spec.resource_index),
            );
        }
    }
    Ok(move |index: i64| same.contains(&index))
}

/// The placement's newest snapshot index, when that snapshot holds the target with `image`.
async fn snapshot_with_image(
    ctx: &Context,
    policy: &AutoUpdatePolicy,
    placement: Option<&PlacementView>,
    image: &str,
) -> Result<Option<i64>, Error> {
    let Some(latest) = placement.and_then(|p| p.latest_index) else {
        return Ok(None);
    };
    let selector = format!(
        "{}={},{}={latest}",
        names::PLACEMENT_LABEL,
        policy.spec.placement_name,
        names::SNAPSHOT_INDEX_LABEL
    );
    let parts = Api::<ResourceSnapshot>::all(ctx.client.clone())
        .list(&ListParams::default().labels(&selector))
        .await?;
    let t = &policy.spec.target;
    let holds = parts.items.iter().flat_map(|s| &s.spec.resources).any(|o| {
        o["kind"] == t.kind.as_str()
            && o["metadata"]["name"] == t.name.as_str()
            && o["metadata"]["namespace"] == t.namespace.as_str()
            && o["spec"]["template"]["spec"]["containers"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|c| c["name"] == t.container.as_str() && c["image"] == image)
    });
    Ok(holds.then_some(latest))
}

/// How the run `name` stands. A run blocked by a failed cluster (not available within the
/// health timeout, or its apply failed) is `Blocked`: the policy asks it to roll back.
fn outcome(ctx: &Context, name: Option<&str>) -> RunOutcome {
    let Some(name) = name else {
        return RunOutcome::Missing;
    };
    let Some(run) = ctx.runs.get(&ObjectRef::new(name)) else {
        return RunOutcome::Missing;
    };
    let conditions = run
        .status
        .as_ref()
        .map(|s| s.conditions.as_slice())
        .unwrap_or_default();
    let why = |type_: &str| {
        find(conditions, type_).map_or(String::new(), |c| format!("{}: {}", c.reason, c.message))
    };
    match RunPhase::of(&run) {
        RunPhase::Succeeded => RunOutcome::Succeeded,
        RunPhase::Failed
            if find(conditions, SUCCEEDED).is_some_and(|c| c.reason == run_reason::SUPERSEDED) =>
        {
            RunOutcome::Superseded
        }
        RunPhase::Failed => RunOutcome::Failed(why(SUCCEEDED)),
        // Waiting for a member to be healthy before its turn is not the version's fault.
        RunPhase::Blocked
            if find(conditions, PROGRESSING)
                .is_some_and(|c| c.reason == run_reason::CLUSTER_FAILED) =>
        {
            RunOutcome::Blocked(why(PROGRESSING))
        }
        _ => RunOutcome::Running,
    }
}

/// Asks the registry which version to offer.
async fn check(
    ctx: &Context,
    policy: &AutoUpdatePolicy,
    status: &AutoUpdatePolicyStatus,
    target: Option<&TargetView>,
    constraint: Option<semver::VersionReq>,
) -> Result<Option<String>, String> {
    let constraint = constraint.ok_or("spec.versionConstraint cannot be read")?;
    let repository = match (&policy.spec.repository, target) {
        (Some(r), _) => r.clone(),
        (None, Some(t)) => ImageRef::parse(&t.image)?.repository,
        (None, None) => return Err("the target's image cannot be read".into()),
    };
    let credentials = credentials(ctx, policy, &repository).await?;
    let tags = ctx
        .registry
        .list_tags(&repository, &credentials)
        .await
        .map_err(|e| e.to_string())?;
    let current = status
        .current_version
        .as_deref()
        .and_then(versions::parse_tag);
    Ok(versions::choose(
        &tags,
        &constraint,
        current.as_ref(),
        &status.failed_versions,
    )
    .map(|c| c.tag))
}

/// The registry credentials named by `spec.secretRef` (in the hub's namespace) for the
/// registry of `repository`.
async fn credentials(
    ctx: &Context,
    policy: &AutoUpdatePolicy,
    repository: &str,
) -> Result<Credentials, String> {
    let Some(secret_ref) = &policy.spec.secret_ref else {
        return Ok(Credentials::Anonymous);
    };
    let name = &secret_ref.name;
    let ns = &ctx.hub_namespace;
    let secret = Api::<Secret>::namespaced(ctx.client.clone(), ns)
        .get_opt(name)
        .await
        .map_err(|e| format!("reading Secret {ns}/{name} (spec.secretRef): {e}"))?
        .ok_or_else(|| format!("Secret {ns}/{name} (spec.secretRef) does not exist"))?;
    let registry = ImageRef::parse(repository)?.registry().to_string();
    Credentials::from_secret_data(&secret.data.unwrap_or_default(), &registry)
        .map_err(|e| format!("Secret {ns}/{name} (spec.secretRef): {e}"))
}

/// Carries out one action of the plan (each is idempotent).
async fn act(ctx: &Context, policy: &AutoUpdatePolicy, action: &Action) -> Result<(), Error> {
    match action {
        Action::SetImage(image) => set_image(ctx, policy, image).await,
        Action::EnsureRun {
            name,
            snapshot_index,
            strategy,
        } => ensure_run(ctx, policy, name, *snapshot_index, strategy).await,
        Action::RollBackRun(name) => {
            let patch = serde_json::json!({"spec": {"onFailure": OnFailure::Rollback}});
            let patched = Api::<UpdateRun>::all(ctx.client.clone())
                .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
                .await;
            ok_if(patched, GONE)
        }
    }
}

/// Server-side applies just the container's image, under the policy's own field manager:
/// nothing else of the object changes hands.
async fn set_image(ctx: &Context, policy: &AutoUpdatePolicy, image: &str) -> Result<(), Error> {
    let t = &policy.spec.target;
    let body = serde_json::json!({
        "apiVersion": "apps/v1",
        "kind": t.kind.as_str(),
        "metadata": {"name": t.name, "namespace": t.namespace},
        "spec": {"template": {"spec": {"containers": [{"name": t.container, "image": image}]}}},
    });
    target_api(ctx, policy)
        .patch(
            &t.name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&body),
        )
        .await?;
    Ok(())
}

fn owner(policy: &AutoUpdatePolicy) -> Vec<OwnerReference> {
    policy.controller_owner_ref(&()).into_iter().collect()
}

async fn ensure_run(
    ctx: &Context,
    policy: &AutoUpdatePolicy,
    name: &str,
    snapshot_index: i64,
    strategy: &str,
) -> Result<(), Error> {
    let run = UpdateRun {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            owner_references: Some(owner(policy)),
            labels: Some([(POLICY_LABEL.to_string(), policy.name_any())].into()),
            ..Default::default()
        },
        spec: UpdateRunSpec {
            placement_name: policy.spec.placement_name.clone(),
            resource_snapshot_index: Some(snapshot_index.to_string()),
            staged_rollout_strategy_name: strategy.to_string(),
            state: None,
            health_timeout: policy.spec.health_timeout.clone(),
            // A failed version is rolled back by its own run: the clusters it updated return to
            // the snapshot they ran before, newest first (the policy follows that rollback run).
            on_failure: Some(OnFailure::Rollback),
            ..Default::default()
        },
        status: None,
    };
    let created = Api::<UpdateRun>::all(ctx.client.clone())
        .create(&PostParams::default(), &run)
        .await;
    ok_if(created, EXISTS)
}
