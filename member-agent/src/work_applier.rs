//! Applying Works: a controller over the Works in the hub namespace `fleet-member-<member>`.
//!
//! Each reconcile of a Work: read it fresh → (deleted? clean up, see [`cleanup`]) → make sure it
//! has the agent's finalizer and its AppliedWork → server-side apply every manifest to the member
//! in dependency order ([`apply_order`]) → delete what left the Work → plan the status
//! ([`work_status`]) and write it if it changed.
//!
//! It runs when the Work changes, when any object applied for it changes or is deleted on the
//! member ([`MemberObjects`]: a watch per applied kind), when a PhasedRollout or the Work's
//! AppliedWork changes, at the health deadline, and every resync period. It runs at once: no
//! delay is put in front of a change. A storm of events is coalesced by the controller (one
//! reconcile of a Work runs at a time; the events meanwhile make one more).
//!
//! Each manifest is decided by [`drift::decide`] from the member's object (from the watch's
//! cache, else a GET), the Work's `applyStrategy` and whether the hub's object changed since it
//! was last applied (`appliedHash` in the Work's status): an object that neither the hub nor a
//! person changed is not applied again; drift is restored (`whenToApply: Always`) or left and
//! reported; a pre-existing object is taken over per `whenToTakeOver`; `ReportDiff` applies
//! nothing.

use std::sync::Arc;
use std::time::{Duration, Instant};

use fleethub_crds::Work;
use fleethub_crds::applied_work::{
    AppliedResource, AppliedWork, WORK_ANNOTATION, WORK_NAMESPACE_LABEL,
};
use fleethub_crds::apply_strategy::{ApplyStrategy, DriftType, FieldDiff};
use fleethub_crds::field_manager::MEMBER_AGENT;
use fleethub_crds::names::PLACEMENT_LABEL;
use fleethub_crds::work::DEFAULT_HEALTH_TIMEOUT;
use fleethub_crds::work::ManifestIdentifier;
use fleethub_crds::work::reason as work_reason;
use fleethub_runtime::Health;
use fleethub_runtime::retry::{Backoff, ERROR_BACKOFF, FailureBackoff};
use futures::{FutureExt, StreamExt};
use k8s_openapi::api::core::v1::{ObjectReference, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::api::{DynamicObject, ListParams, Patch, PatchParams};
use kube::runtime::controller::{self, Action};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Api, Client, Resource, ResourceExt};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::apply_order::{OrderKey, apply_order};
use crate::availability;
use crate::clock::Clock;
use crate::drift::{self, Decision, Member};
use crate::error::{describe as api_message, is_not_found};
use crate::kind_resolver::{KindResolver, ResolvedKind};
use crate::manifest::{self, Decoration, ParsedManifest, describe, owned_by};
use crate::member_objects::{Cached, MemberObjects};
use crate::metrics::Metrics;
use crate::work_status::{self, ManifestReport, StatusInput};
use crate::{Error, cleanup, readiness};

/// How soon a Work whose manifests did not all apply is tried again (over the same failure
/// count as errors): an apply the member refuses usually needs a person, so this starts
/// slower than an error. Capped at a minute, because a member API server that was away also
/// fails every apply, and nothing but this timer retries once it is back: with a 5-minute cap,
/// a change made during a member outage waited up to minutes after the member returned (CI's
/// resilience test timed out after 120 s).
const APPLY_RETRY: Backoff = Backoff::new(Duration::from_secs(5), Duration::from_secs(60));

/// Everything a Work reconcile needs.
pub struct Context {
    /// Client of the hub (Works).
    pub hub: Client,
    /// Client of the member cluster (everything applied).
    pub member: Client,
    /// The hub namespace of this member's Works.
    pub namespace: String,
    /// The time source.
    pub clock: Arc<dyn Clock>,
    /// Where applies and errors are counted.
    pub metrics: Metrics,
    /// The member's discovery, cached.
    pub kinds: KindResolver,
    /// How often every Work is applied again even if nothing changed, to correct drift.
    pub resync_period: Duration,
    /// Consecutive failures per Work, for retry backoff only (nothing is decided from it).
    failures: FailureBackoff<String>,
    /// The member's fleet-managed objects, watched per kind.
    pub objects: Arc<MemberObjects>,
    /// Changes of those objects, as their Works: taken by [`run`].
    changes: std::sync::Mutex<Option<tokio::sync::mpsc::UnboundedReceiver<ObjectRef<Work>>>>,
    /// Events on the member's objects (a drift corrected or left).
    member_events: Recorder,
    /// Events on the hub's Works.
    hub_events: Recorder,
    /// Stops the member object watches.
    stop_watches: CancellationToken,
}

impl Context {
    /// A context for the Works of the hub namespace `namespace`.
    pub fn new(
        hub: Client,
        member: Client,
        namespace: String,
        clock: Arc<dyn Clock>,
        metrics: Metrics,
        resync_period: Duration,
    ) -> Self {
        let stop_watches = CancellationToken::new();
        let ns = namespace.clone();
        let (objects, changes) = MemberObjects::new(
            member.clone(),
            move |o| work_of(&o.metadata, &ns),
            stop_watches.clone(),
        );
        let reporter = Reporter {
            controller: "fleethub-member-agent".into(),
            instance: Some(namespace.clone()),
        };
        Self {
            kinds: KindResolver::new(member.clone()),
            member_events: Recorder::new(member.clone(), reporter.clone()),
            hub_events: Recorder::new(hub.clone(), reporter),
            hub,
            member,
            namespace,
            clock,
            metrics,
            resync_period,
            failures: FailureBackoff::new(ERROR_BACKOFF),
            objects,
            changes: std::sync::Mutex::new(Some(changes)),
            stop_watches,
        }
    }
}

/// What was applied for one manifest.
#[derive(Debug, Clone)]
pub struct AppliedObject {
    /// The object, as recorded in the AppliedWork.
    pub resource: AppliedResource,
    /// The object as the member's API server returned it after the apply.
    pub object: Value,
}

/// What happened to one manifest.
#[derive(Debug, Clone)]
pub struct ManifestOutcome {
    /// Which manifest (with the namespace it is applied into, once its kind is known).
    pub identifier: ManifestIdentifier,
    /// The member's object (applied, or already as the hub has it, or under `ReportDiff` as
    /// the member has it), or why it is not applied (naming the object).
    pub result: Result<AppliedObject, String>,
    /// Why it is not applied when the strategy says so (`Drifted`, `TakeoverRefused`); `None`
    /// for an error.
    pub refusal: Option<&'static str>,
    /// How the member's object differs from the hub's while it is left so.
    pub drift: Option<(DriftType, usize, Vec<FieldDiff>)>,
    /// The drift this reconcile undid.
    pub correction: Option<Vec<FieldDiff>>,
    /// The hash of the hub's object, when the member now has it (applied or unchanged).
    pub hash: Option<String>,
}

impl ManifestOutcome {
    fn failed(identifier: ManifestIdentifier, message: String) -> Self {
        ManifestOutcome {
            identifier,
            result: Err(message),
            refusal: None,
            drift: None,
            correction: None,
            hash: None,
        }
    }
}

/// The Work that applied object `meta` belongs to, if it is one of `namespace`'s.
fn work_of(meta: &ObjectMeta, namespace: &str) -> Option<ObjectRef<Work>> {
    let (ns, name) = meta
        .annotations
        .as_ref()?
        .get(WORK_ANNOTATION)?
        .split_once('/')?;
    (ns == namespace).then(|| ObjectRef::new(name).within(ns))
}

/// Runs the Work controller until `shutdown`; marks readiness check
/// [`readiness::WORKS_SYNCED`] once the Works have been listed.
pub async fn run(ctx: Arc<Context>, health: Health, shutdown: CancellationToken) {
    let works: Api<Work> = Api::namespaced(ctx.hub.clone(), &ctx.namespace);
    let mut changes = ctx
        .changes
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .take()
        .expect("work_applier::run runs once per Context");
    let member_changes = futures::stream::poll_fn(move |cx| changes.poll_recv(cx));
    let ns = ctx.namespace.clone();
    let member = &ctx.member;
    let controller = fleethub_runtime::controller_for(works)
        // Any change or deletion of an applied object, of any kind (drift, a workload's
        // progress), reconciles its Work at once.
        .reconcile_on(member_changes)
        // A phased rollout's progress decides its Work's availability (the agent's own
        // PhasedRollout controller writes it; it may not be among the Work's manifests).
        .watches(
            Api::<fleethub_crds::PhasedRollout>::all(member.clone()),
            fleethub_runtime::watcher_config().labels(PLACEMENT_LABEL),
            move |o| work_of(&o.metadata, &ns),
        )
        .watches(
            Api::<AppliedWork>::all(member.clone()),
            fleethub_runtime::watcher_config()
                .labels(&format!("{WORK_NAMESPACE_LABEL}={}", ctx.namespace)),
            |aw| Some(ObjectRef::new(&aw.spec.work_name).within(&aw.spec.work_namespace)),
        )
        .graceful_shutdown_on(shutdown.cancelled_owned());

    let store = controller.store();
    ctx.metrics.count_works_in(store.clone());
    let sweeper = tokio::spawn(sweep_orphans_periodically(ctx.clone(), store.clone()));
    let synced = tokio::spawn({
        let health = health.clone();
        let namespace = ctx.namespace.clone();
        async move {
            // Store::wait_until_ready of kube-runtime 5 can miss its wake-up when awaited before
            // the first list completes (seen on the local fleet); asking again every second
            // costs nothing (no API call).
            loop {
                match tokio::time::timeout(Duration::from_secs(1), store.wait_until_ready()).await {
                    Ok(Ok(())) => {
                        tracing::info!(%namespace, works = store.len(), "Work watcher synced");
                        health.set(readiness::WORKS_SYNCED, Ok(()));
                        return;
                    }
                    Ok(Err(e)) => {
                        tracing::warn!(%namespace, error = %e, "Work watcher stopped before it synced");
                        return;
                    }
                    Err(_) => {}
                }
            }
        }
    });

    let stop_watches = ctx.stop_watches.clone();
    controller
        .run(reconcile, error_policy, ctx)
        .for_each(|result| async move {
            match result {
                Ok((work, _)) => tracing::debug!(work = %work, "reconciled"),
                // Logged with the Work's name by `error_policy`.
                Err(controller::Error::ReconcilerFailed(..)) => {}
                Err(e) => tracing::warn!(error = %e, "Work controller"),
            }
        })
        .await;
    synced.abort();
    sweeper.abort();
    stop_watches.cancel();
}

/// How often the agent looks for AppliedWorks whose Work is gone ([`cleanup::sweep_orphans`]).
const ORPHAN_SWEEP_PERIOD: Duration = Duration::from_secs(30);

/// Sweeps orphaned AppliedWorks every [`ORPHAN_SWEEP_PERIOD`], once the Works are listed.
async fn sweep_orphans_periodically(ctx: Arc<Context>, works: Store<Work>) {
    loop {
        tokio::time::sleep(ORPHAN_SWEEP_PERIOD).await;
        if works.wait_until_ready().now_or_never().is_none() {
            continue;
        }
        if let Err(e) = cleanup::sweep_orphans(&ctx, &works).await {
            tracing::warn!(namespace = %ctx.namespace, error = %e, "sweeping orphaned AppliedWorks failed; trying again later");
        }
    }
}

fn error_policy(work: Arc<Work>, error: &Error, ctx: Arc<Context>) -> Action {
    let key = format!("{}/{}", ctx.namespace, work.name_any());
    ctx.metrics.reconcile_error(error.metric_label());
    // Capped at 30 s: after an outage of the hub or the member, a Work catches up within
    // half a minute of the API server returning.
    let retry_in = ctx.failures.failed(key.clone());
    tracing::warn!(work = %key, error = %error, ?retry_in, "reconcile failed");
    Action::requeue(retry_in)
}

async fn reconcile(work: Arc<Work>, ctx: Arc<Context>) -> Result<Action, Error> {
    let key = format!("{}/{}", ctx.namespace, work.name_any());
    let span = tracing::info_span!("reconcile", work = %key);
    async move {
        // The cache may not hold the agent's last status write yet; the health clock must
        // start from what is really recorded.
        let api: Api<Work> = Api::namespaced(ctx.hub.clone(), &ctx.namespace);
        let Some(work) = api
            .get_opt(&work.name_any())
            .await
            .map_err(Error::hub(format!("reading Work {key}")))?
        else {
            return Ok(Action::await_change());
        };
        if work.metadata.deletion_timestamp.is_some() {
            let action = cleanup::finalize(&work, &ctx).await?;
            ctx.metrics.reconciled(true);
            return Ok(action);
        }
        cleanup::ensure_finalizer(&work, &ctx).await?;
        let applied_work = cleanup::ensure_applied_work(&work, &ctx).await?;
        if applied_work.metadata.deletion_timestamp.is_some() {
            // Someone deleted it; what it owned is being removed. Apply again once it is gone
            // (its deletion is watched).
            tracing::info!(applied_work = %applied_work.name_any(), "AppliedWork is being deleted; applying again once it is gone");
            return Ok(Action::requeue(Duration::from_secs(30)));
        }

        let outcomes = apply_manifests(&work, &applied_work, &ctx).await;
        let pruned = cleanup::prune(&applied_work, &outcomes, &ctx).await;

        let mut reports = Vec::with_capacity(outcomes.len());
        // A workload waiting for its pods: their states are not watched, so they are read
        // again soon (a pod stuck pulling its image changes nothing the agent watches).
        let mut pods_pending = false;
        for o in &outcomes {
            let readiness = match &o.result {
                Ok(applied) => {
                    let readiness = availability::readiness(&applied.object);
                    if matches!(readiness, availability::Readiness::NotReady(_))
                        && availability::pod_selector(&applied.object).is_some()
                    {
                        pods_pending = true;
                    }
                    Ok(with_pod_problems(readiness, &applied.object, &ctx).await)
                }
                Err(e) => Err(e.clone()),
            };
            reports.push(ManifestReport {
                refusal: o.refusal,
                drift: o.drift.clone(),
                correction: o.correction.clone(),
                hash: o.hash.clone(),
                ..ManifestReport::new(o.identifier.clone(), readiness)
            });
        }
        let plan = work_status::plan(&StatusInput {
            previous: work.status.as_ref(),
            generation: work.metadata.generation,
            snapshot_index: work.spec.resource_snapshot_index,
            health_timeout: health_timeout(&work, &key),
            reports: &reports,
            now: ctx.clock.now(),
            report_only: work
                .spec
                .apply_strategy
                .as_ref()
                .is_some_and(ApplyStrategy::report_only),
        });
        write_status(&work, &plan.status, &ctx).await?;
        pruned?;

        ctx.metrics.reconciled(true);
        let next = if plan.applied {
            ctx.failures.succeeded(&key);
            let next = plan
                .recheck_after
                .map_or(ctx.resync_period, |d| d.min(ctx.resync_period));
            match plan.recheck_after {
                Some(_) if pods_pending => next.min(POD_STATE_RECHECK),
                _ => next,
            }
        } else {
            ctx.failures.failed_with(key.clone(), APPLY_RETRY)
        };
        Ok(Action::requeue(next))
    }
    .instrument(span)
    .await
}

/// How soon a Work whose workloads wait for their pods is looked at again (see
/// [`with_pod_problems`]).
const POD_STATE_RECHECK: Duration = Duration::from_secs(5);

/// A workload that is not ready says why its pods are not (the image and state of a stuck
/// container, an unschedulable pod), read from the member's pods. A failed read leaves the
/// message as it was: the workload's own status still says what is missing.
async fn with_pod_problems(
    readiness: availability::Readiness,
    object: &Value,
    ctx: &Context,
) -> availability::Readiness {
    let availability::Readiness::NotReady(message) = readiness else {
        return readiness;
    };
    let (Some(selector), Some(ns)) = (
        availability::pod_selector(object),
        object["metadata"]["namespace"].as_str(),
    ) else {
        return availability::Readiness::NotReady(message);
    };
    let pods: Api<Pod> = Api::namespaced(ctx.member.clone(), ns);
    ctx.metrics.object_read();
    let problems = match pods.list(&ListParams::default().labels(&selector)).await {
        Ok(list) => {
            let values: Vec<Value> = list
                .items
                .iter()
                .filter_map(|p| serde_json::to_value(p).ok())
                .collect();
            availability::pod_problems(&values)
        }
        Err(e) => {
            tracing::debug!(namespace = ns, %selector, error = %e, "cannot read the pods of a workload that is not ready");
            Vec::new()
        }
    };
    if problems.is_empty() {
        availability::Readiness::NotReady(message)
    } else {
        availability::Readiness::NotReady(format!("{message} ({})", problems.join("; ")))
    }
}

/// The Work's health timeout (its schema admits only valid durations; default 5m).
fn health_timeout(work: &Work, key: &str) -> Duration {
    match work.spec.health_timeout.as_deref() {
        None => DEFAULT_HEALTH_TIMEOUT,
        Some(s) => fleethub_crds::duration::parse(s).unwrap_or_else(|e| {
            tracing::warn!(work = %key, error = %e, "invalid healthTimeout; using the default");
            DEFAULT_HEALTH_TIMEOUT
        }),
    }
}

/// Writes `status` on `work` unless it already has it.
async fn write_status(
    work: &Work,
    status: &fleethub_crds::work::WorkStatus,
    ctx: &Context,
) -> Result<(), Error> {
    let name = work.name_any();
    let json_of = |s: &fleethub_crds::work::WorkStatus| {
        serde_json::to_value(s).map_err(|source| Error::Json {
            what: format!("status of Work {}/{name}", ctx.namespace),
            source,
        })
    };
    let unchanged = match &work.status {
        // Compared as JSON, which is what the API server stores (times in whole seconds).
        Some(current) => json_of(current)? == json_of(status)?,
        None => false,
    };
    if unchanged {
        return Ok(());
    }
    let body = json!({
        "apiVersion": Work::api_version(&()),
        "kind": Work::kind(&()),
        "metadata": {"name": name, "namespace": ctx.namespace},
        "status": status,
    });
    Api::<Work>::namespaced(ctx.hub.clone(), &ctx.namespace)
        .patch_status(
            &name,
            &PatchParams::apply(MEMBER_AGENT).force(),
            &Patch::Apply(&body),
        )
        .await
        .map_err(Error::hub(format!(
            "writing the status of Work {}/{name}",
            ctx.namespace
        )))?;
    Ok(())
}

/// Applies every manifest of `work` in dependency order; one outcome per manifest, in the
/// Work's order.
async fn apply_manifests(
    work: &Work,
    applied_work: &AppliedWork,
    ctx: &Context,
) -> Vec<ManifestOutcome> {
    let key = format!("{}/{}", ctx.namespace, work.name_any());
    let manifests = &work.spec.workload.manifests;
    let parsed: Vec<_> = manifests
        .iter()
        .enumerate()
        .map(|(i, m)| manifest::parse(i, m))
        .collect();
    // Scope decides the order; a kind not served yet (its CRD is in this Work) is resolved
    // again when its turn comes, and ordered meanwhile by whether the manifest names a namespace.
    let mut kinds: Vec<Option<ResolvedKind>> = Vec::with_capacity(parsed.len());
    for p in &parsed {
        kinds.push(match p {
            Ok(m) => ctx.kinds.resolve(&m.gvk()).await.ok().flatten(),
            Err(_) => None,
        });
    }
    let keys: Vec<OrderKey<'_>> = parsed
        .iter()
        .zip(&kinds)
        .map(|(p, k)| match p {
            Ok(m) => OrderKey {
                group: &m.group,
                kind: &m.kind,
                namespaced: k.as_ref().map_or(m.namespace.is_some(), |k| k.namespaced),
            },
            Err(_) => OrderKey {
                group: "",
                kind: "",
                namespaced: true,
            },
        })
        .collect();

    let default_strategy = ApplyStrategy::default();
    let empty = Vec::new();
    let target = Target {
        work: &key,
        placement: &work.spec.placement_name,
        applied_work,
        strategy: work
            .spec
            .apply_strategy
            .as_ref()
            .unwrap_or(&default_strategy),
        previous: work
            .status
            .as_ref()
            .map_or(&empty, |s| &s.manifest_conditions),
    };
    let mut outcomes: Vec<Option<ManifestOutcome>> = vec![None; parsed.len()];
    for i in apply_order(&keys) {
        outcomes[i] = Some(match &parsed[i] {
            Err(invalid) => {
                ManifestOutcome::failed(invalid.identifier.clone(), invalid.message.clone())
            }
            Ok(m) => apply_one(m, kinds[i].take(), &target, ctx).await,
        });
    }
    outcomes.into_iter().flatten().collect()
}

/// Where manifests are applied for.
struct Target<'a> {
    /// The Work, `namespace/name`.
    work: &'a str,
    /// Its placement.
    placement: &'a str,
    /// Its AppliedWork.
    applied_work: &'a AppliedWork,
    /// Its apply strategy.
    strategy: &'a ApplyStrategy,
    /// Its manifests' status as last reported (their `appliedHash`, drift first seen).
    previous: &'a Vec<fleethub_crds::work::ManifestCondition>,
}

/// The hash recorded for a manifest: of the hub's object and the placement it is applied for.
fn manifest_hash(manifest: &Value, placement: &str) -> String {
    let mut hasher = Sha256::new();
    hasher.update(placement.as_bytes());
    hasher.update([0]);
    hasher.update(manifest.to_string().as_bytes());
    let digest = hasher.finalize();
    digest[..12].iter().map(|b| format!("{b:02x}")).collect()
}

/// Applies one manifest; the outcome's error names the object and the API server's message.
async fn apply_one(
    m: &ParsedManifest,
    known: Option<ResolvedKind>,
    target: &Target<'_>,
    ctx: &Context,
) -> ManifestOutcome {
    let mut identifier = m.identifier();
    let written = describe(&m.kind, m.namespace.as_deref(), &m.name);
    let fail = |identifier: ManifestIdentifier, message: String| {
        tracing::warn!(work = %target.work, object = %written, error = %message, "apply failed");
        ManifestOutcome::failed(identifier, message)
    };
    let kind = match known {
        Some(k) => k,
        None => match ctx.kinds.resolve(&m.gvk()).await {
            Ok(Some(k)) => k,
            Ok(None) => {
                let api_version = m.object["apiVersion"].as_str().unwrap_or_default();
                let message = format!(
                    "{written}: the member cluster does not serve kind {} in {api_version}",
                    m.kind
                );
                return fail(identifier, message);
            }
            Err(e) => return fail(identifier, format!("{written}: {e}")),
        },
    };
    let namespace = kind
        .namespaced
        .then(|| m.namespace.clone().unwrap_or_else(|| "default".to_string()));
    identifier.namespace = namespace.clone();
    let object = describe(&m.kind, namespace.as_deref(), &m.name);
    let api: Api<DynamicObject> = match &namespace {
        Some(ns) => Api::namespaced_with(ctx.member.clone(), ns, &kind.resource),
        None => Api::all_with(ctx.member.clone(), &kind.resource),
    };

    // The member's object: from the watch's cache when it has it (no API call), else asked.
    ctx.objects.watch(&kind);
    let existing: Option<Value> = match ctx.objects.get(&kind, namespace.as_deref(), &m.name) {
        Cached::Present(v) => Some(v),
        Cached::Absent | Cached::Unknown => match read(ctx, &api, &m.name).await {
            Ok(existing) => match existing.map(|o| serde_json::to_value(&o)).transpose() {
                Ok(v) => v,
                Err(source) => {
                    let e = Error::Json {
                        what: object.clone(),
                        source,
                    };
                    return fail(identifier, e.to_string());
                }
            },
            Err(e) => return fail(identifier, format!("{object}: {}", api_message(&e))),
        },
    };
    let applied_work_name = target.applied_work.name_any();
    let owners: Vec<OwnerReference> = existing
        .as_ref()
        .and_then(|o| serde_json::from_value(o["metadata"]["ownerReferences"].clone()).ok())
        .unwrap_or_default();
    let ours = owned_by(&owners, &applied_work_name);
    let managed_by_agent = existing.as_ref().is_some_and(|o| {
        o["metadata"]["managedFields"]
            .as_array()
            .is_some_and(|a| a.iter().any(|e| e["manager"] == MEMBER_AGENT))
    });
    // The agent owns what it creates, and only that: an object that existed before is applied
    // without an owner reference, so deleting the Work never deletes it.
    let owner = match &existing {
        None => manifest::owner_reference(target.applied_work),
        Some(_) if ours => manifest::owner_reference(target.applied_work),
        Some(_) => None,
    };
    let body = manifest::prepare(
        &m.object,
        &Decoration {
            placement: target.placement,
            work: target.work,
            namespace: namespace.as_deref(),
            owner,
        },
    );
    let hash = manifest_hash(&m.object, target.placement);
    let previous = target
        .previous
        .iter()
        .find(|p| p.identifier == identifier)
        .and_then(|p| p.applied_hash.as_deref());
    let decision = drift::decide(
        target.strategy,
        body,
        Member {
            object: existing.as_ref(),
            fleet_managed: ours || managed_by_agent,
        },
        previous != Some(hash.as_str()),
        previous.is_some(),
    );
    let resource = AppliedResource {
        group: m.group.clone(),
        version: m.version.clone(),
        kind: m.kind.clone(),
        resource: kind.resource.plural.clone(),
        namespace: namespace.clone(),
        name: m.name.clone(),
    };
    let outcome = |result, hash| ManifestOutcome {
        identifier: identifier.clone(),
        result,
        refusal: None,
        drift: None,
        correction: None,
        hash,
    };
    let (body, correction) = match decision {
        Decision::Unchanged => {
            ctx.metrics.apply_skipped();
            let object = existing.unwrap_or(Value::Null);
            return outcome(Ok(AppliedObject { resource, object }), Some(hash));
        }
        Decision::Leave { why, count, fields } => {
            ctx.metrics.left_different(why.as_str());
            let first = fields.first().map_or(String::new(), describe_diff);
            let more = if count > 1 {
                format!(" (and {} more fields)", count - 1)
            } else {
                String::new()
            };
            let (refusal, message) = match why {
                DriftType::Drifted => (
                    Some(work_reason::DRIFTED),
                    format!(
                        "{object} was changed on the member and is left so (whenToApply: IfNotDrifted): {first}{more}"
                    ),
                ),
                DriftType::TakeoverRefused => (
                    Some(work_reason::TAKEOVER_REFUSED),
                    format!(
                        "{object} existed on the member before the fleet and is not taken over (whenToTakeOver: {:?}){}{first}{more}",
                        target.strategy.when_to_take_over(),
                        if first.is_empty() { "" } else { ": " }
                    ),
                ),
                DriftType::Diffed => (None, String::new()),
            };
            let left = ManifestOutcome {
                drift: Some((why, count, fields)),
                ..outcome(
                    match refusal {
                        Some(_) => Err(message.clone()),
                        None => Ok(AppliedObject {
                            resource,
                            object: existing.unwrap_or(Value::Null),
                        }),
                    },
                    None,
                )
            };
            if refusal.is_some() {
                tracing::info!(work = %target.work, %object, reason = why.as_str(), "{message}");
            }
            return ManifestOutcome { refusal, ..left };
        }
        Decision::Apply { body, correction } => (body, correction),
    };
    let started = Instant::now();
    let result = api
        .patch(
            &m.name,
            &PatchParams::apply(MEMBER_AGENT).force(),
            &Patch::Apply(&body),
        )
        .await;
    ctx.metrics
        .apply(result.is_ok(), started.elapsed().as_secs_f64());
    let applied = match result {
        Ok(applied) => applied,
        Err(e) => {
            if is_not_found(&e) {
                // The resource itself may be gone (e.g. its CRD was deleted).
                ctx.kinds.forget(&m.gvk());
            }
            return fail(identifier, format!("{object}: {}", api_message(&e)));
        }
    };
    if existing.is_none() {
        tracing::info!(work = %target.work, %object, "created");
    } else {
        tracing::debug!(work = %target.work, %object, "applied");
    }
    if let Some(fields) = &correction {
        ctx.metrics.drift_corrected(&m.kind);
        let what = fields
            .iter()
            .take(3)
            .map(describe_diff)
            .collect::<Vec<_>>()
            .join("; ");
        let note = format!("restored the hub's values of {object} (changed on the member: {what})");
        tracing::info!(work = %target.work, %object, "{note}");
        record_correction(ctx, &applied, target.work, &note).await;
    }
    let value = match serde_json::to_value(&applied) {
        Ok(v) => v,
        Err(source) => {
            let e = Error::Json {
                what: object.clone(),
                source,
            };
            return fail(identifier, e.to_string());
        }
    };
    ManifestOutcome {
        correction,
        ..outcome(
            Ok(AppliedObject {
                resource,
                object: value,
            }),
            Some(hash),
        )
    }
}

/// Reads one object from the member's API server (counted: the watch caches answer the rest).
async fn read(
    ctx: &Context,
    api: &Api<DynamicObject>,
    name: &str,
) -> Result<Option<DynamicObject>, kube::Error> {
    ctx.metrics.object_read();
    api.get_opt(name).await
}

/// `spec.replicas: 5 on the member, 2 on the hub`.
fn describe_diff(d: &FieldDiff) -> String {
    let value = |v: &Option<String>| v.clone().unwrap_or_else(|| "absent".to_string());
    if d.path == "." {
        return "the object was deleted".to_string();
    }
    format!(
        "{} is {} on the member, {} on the hub",
        d.path,
        value(&d.member_value),
        value(&d.hub_value)
    )
}

/// Raises a `DriftCorrected` Event on the member's object and on the hub's Work (best effort:
/// the Work's status records the correction too).
async fn record_correction(ctx: &Context, applied: &DynamicObject, work: &str, note: &str) {
    let event = Event {
        type_: EventType::Normal,
        reason: "DriftCorrected".into(),
        note: Some(note.chars().take(1000).collect()),
        action: "Restore".into(),
        secondary: None,
    };
    let member_ref = ObjectReference {
        api_version: applied.types.as_ref().map(|t| t.api_version.clone()),
        kind: applied.types.as_ref().map(|t| t.kind.clone()),
        name: applied.metadata.name.clone(),
        namespace: applied.metadata.namespace.clone(),
        uid: applied.metadata.uid.clone(),
        ..Default::default()
    };
    if let Err(e) = ctx.member_events.publish(&event, &member_ref).await {
        tracing::debug!(error = %e, "recording a member event");
    }
    let Some((namespace, name)) = work.split_once('/') else {
        return;
    };
    let work_ref = ObjectReference {
        api_version: Some(Work::api_version(&()).into_owned()),
        kind: Some(Work::kind(&()).into_owned()),
        name: Some(name.to_string()),
        namespace: Some(namespace.to_string()),
        ..Default::default()
    };
    if let Err(e) = ctx.hub_events.publish(&event, &work_ref).await {
        tracing::debug!(error = %e, "recording a hub event");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[test]
    fn workload_events_map_to_their_work_in_this_namespace_only() {
        let meta = |annotation: Option<&str>| ObjectMeta {
            annotations: annotation
                .map(|a| BTreeMap::from([(WORK_ANNOTATION.to_string(), a.to_string())])),
            ..Default::default()
        };
        assert_eq!(
            work_of(&meta(Some("fleet-member-a/web")), "fleet-member-a"),
            Some(ObjectRef::new("web").within("fleet-member-a"))
        );
        assert_eq!(
            work_of(&meta(Some("fleet-member-b/web")), "fleet-member-a"),
            None
        );
        assert_eq!(work_of(&meta(Some("garbage")), "fleet-member-a"), None);
        assert_eq!(work_of(&meta(None), "fleet-member-a"), None);
    }
}
