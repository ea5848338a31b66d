//! Applying Works: a controller over the Works in the hub namespace `fleet-member-<member>`.
//!
//! Each reconcile of a Work: take its newest copy ([`last_written`]: the cache's, or what the
//! agent's own last write returned) → (deleted? clean up, see [`cleanup`]) → make sure it has
//! the agent's finalizer and its AppliedWork (watched: applied only when missing or not as it
//! should be) → server-side apply every manifest to the member in dependency order
//! ([`apply_order`]) → delete what left the Work → plan the status ([`work_status`]) and write it
//! if it changed. A reconcile that finds nothing to do makes no API call at all, so one that
//! reports a workload turning available makes a single round trip: the status write.
//!
//! It runs when the Work changes, when any object applied for it changes or is deleted on the
//! member ([`MemberObjects`]: a watch per applied kind), when a PhasedRollout or the Work's
//! AppliedWork changes, at the health deadline, and every resync period. It runs at once: no
//! delay is put in front of a change. A storm of events is coalesced at the leading edge by the
//! controller: the first event reconciles at once; one reconcile of a Work runs at a time, and
//! the events that arrive meanwhile make exactly one more, started the moment it finishes (kube's
//! scheduler holds them and its runner takes them first).
//!
//! How each manifest is applied (or skipped, or left differing) is in [`apply`].

use std::sync::{Arc, PoisonError};
use std::time::Duration;

use fleethub_crds::Work;
use fleethub_crds::applied_work::{AppliedWork, WORK_NAMESPACE_LABEL};
use fleethub_crds::apply_strategy::ApplyStrategy;
use fleethub_crds::names::PLACEMENT_LABEL;
use fleethub_crds::work::DEFAULT_HEALTH_TIMEOUT;
use fleethub_runtime::Health;
use fleethub_runtime::retry::Backoff;
use futures::{FutureExt, StreamExt};
use kube::runtime::controller::{self, Action};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Api, ResourceExt};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::availability;
use crate::context::{Context, work_of};
use crate::member_objects::Cached;
use crate::metrics::request;
use crate::status_writes::{self, CONFLICT_RETRY, Written};
use crate::work_status::{self, ManifestReport, StatusInput};
use crate::{Error, apply, cleanup, readiness};

mod workload_pods;
use workload_pods::{with_pod_problems, with_restarts};

/// How soon a Work whose manifests did not all apply is tried again (over the same failure
/// count as errors): an apply the member refuses usually needs a person, so this starts
/// slower than an error. Capped at a minute, because a member API server that was away also
/// fails every apply, and nothing but this timer retries once it is back: with a 5-minute cap,
/// a change made during a member outage waited up to minutes after the member returned (CI's
/// resilience test timed out after 120 s).
const APPLY_RETRY: Backoff = Backoff::new(Duration::from_secs(5), Duration::from_secs(60));

/// Runs the Work controller until `shutdown`; marks readiness check
/// [`readiness::WORKS_SYNCED`] once the Works have been listed.
pub async fn run(ctx: Arc<Context>, health: Health, shutdown: CancellationToken) {
    let works: Api<Work> = Api::namespaced(ctx.hub.clone(), &ctx.namespace);
    let mut changes = ctx
        .changes
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .take()
        .expect("work_applier::run runs once per Context");
    let applied_works = ctx
        .applied_works_writer
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
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
        // A fleethub watch, not kube's `watches`: bounded backoff, and its errors (a 410 after
        // the member's API server restarts) do not reach the controller.
        .watches_stream(
            fleethub_runtime::touched_after_sync(fleethub_runtime::watch(
                Api::<fleethub_crds::PhasedRollout>::all(member.clone()),
                fleethub_runtime::watcher_config().labels(PLACEMENT_LABEL),
            )),
            move |o: fleethub_crds::PhasedRollout| work_of(&o.metadata, &ns),
        )
        // The Work's AppliedWork: kept in a cache (a reconcile applies it only when it is not
        // as it should be), and its deletion reconciles the Work.
        .watches_stream(
            fleethub_runtime::reflected_stream_with(
                Api::<AppliedWork>::all(member.clone()),
                fleethub_runtime::watcher_config()
                    .labels(&format!("{WORK_NAMESPACE_LABEL}={}", ctx.namespace)),
                applied_works,
            ),
            |aw: AppliedWork| {
                Some(ObjectRef::new(&aw.spec.work_name).within(&aw.spec.work_namespace))
            },
        )
        .with_config(controller_config())
        .graceful_shutdown_on(shutdown.cancelled_owned());

    let store = controller.store();
    ctx.metrics.count_works_in(store.clone());
    let _ = ctx.works.set(store.clone());
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
                Ok(_) => {}
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

/// The Work controller's configuration: no debounce. The first event of a storm reconciles at
/// once; events during a reconcile make one more, the moment it ends (tested below).
fn controller_config() -> controller::Config {
    controller::Config::default().debounce(Duration::ZERO)
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
        // Writes of Works deleted before the cache showed them are not needed any more.
        ctx.written_works.retain(|name, _| {
            works
                .get(&ObjectRef::new(name).within(&ctx.namespace))
                .is_some()
        });
        ctx.objects.forget_settled();
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
        // The health clock, drift first-seen times and applied hashes must start from what is
        // really recorded, which the cache may not show yet.
        let started = std::time::Instant::now();
        // Changes of the Work's member objects from now on: one that changes a workload's
        // state while this reconcile works is reported by it (see [`status_writes`]).
        let mut changes = ctx.objects.subscribe(ObjectRef::from_obj(work.as_ref()));
        let Some(work) = current_work(work, &ctx).await? else {
            return Ok(Action::await_change());
        };
        if work.metadata.deletion_timestamp.is_some() {
            ctx.status_writes.forget(&key);
            let action = cleanup::finalize(&work, &ctx).await?;
            ctx.metrics.reconciled(true);
            return Ok(action);
        }
        let work = cleanup::ensure_finalizer(work, &ctx).await?;
        let applied_work = cleanup::ensure_applied_work(&work, &ctx).await?;
        if applied_work.metadata.deletion_timestamp.is_some() {
            // Someone deleted it; what it owned is being removed. Apply again once it is gone
            // (its deletion is watched).
            tracing::info!(applied_work = %applied_work.name_any(), "AppliedWork is being deleted; applying again once it is gone");
            return Ok(Action::requeue(Duration::from_secs(30)));
        }

        let outcomes = apply::apply_manifests(&work, &applied_work, &ctx).await;
        let pruned = cleanup::prune(&applied_work, &outcomes, &ctx).await;

        let now = ctx.clock.now();
        let pods_worth_reading = not_available_since(&work, now)
            .is_some_and(|since| since >= POD_PROBLEMS_AFTER);
        // Until the Work is reported available for its generation (a rollout, or a workload
        // that lost its health), a ready workload's pods are read for restarts since the update:
        // a container that crashes and comes back is no healthy release. Once available, no pod
        // is read (a crash makes the workload unready first, which the agent watches).
        let restarts_since = (!available_for_generation(&work)).then(|| {
            let applied = work_status::applied_at(
                work.status.as_ref().map_or(&[][..], |s| &s.conditions),
                work.metadata.generation,
                now,
            );
            let recent = now
                .checked_sub(availability::RECENT_RESTARTS)
                .unwrap_or(applied);
            applied.max(recent)
        });
        let (mut reports, pods_pending) =
            reports_of(&outcomes, pods_worth_reading, restarts_since, &ctx).await;
        let plan_of = |reports: &[ManifestReport]| {
            work_status::plan(&StatusInput {
            previous: work.status.as_ref(),
            generation: work.metadata.generation,
            snapshot_index: work.spec.resource_snapshot_index,
            health_timeout: health_timeout(&work, &key),
            reports,
            now: ctx.clock.now(),
            report_only: work
                .spec
                .apply_strategy
                .as_ref()
                .is_some_and(ApplyStrategy::report_only),
            })
        };
        // A workload that changed while this reconcile applied (it turned available a moment
        // after its new version was applied) is reported in this reconcile's write.
        if changes.changed() {
            reports = refreshed(&outcomes, &reports, &ctx).await;
        }
        let plan = plan_of(&reports);
        // Progress alone (a workload's ready count) is written at most once per interval, so the
        // write that reports it available does not wait behind one that reported progress.
        let held_back = match &work.status {
            Some(previous) if work_status::only_messages_differ(previous, &plan.status) => {
                ctx.status_writes.progress_delay(&key, ctx.clock.now())
            }
            _ => None,
        };
        let before_write = std::time::Instant::now();
        let written = match held_back {
            Some(_) => Written::Nothing,
            None => {
                let (outcomes, reports, ctx, plan_of, planned) =
                    (&outcomes, &reports, &ctx, &plan_of, &plan.status);
                let replan = move || async move {
                    let newer = plan_of(&refreshed(outcomes, reports, ctx).await).status;
                    status_writes::changes_state(planned, &newer).then_some(newer)
                };
                status_writes::write(&work, &plan.status, &mut changes, replan, ctx).await?
            }
        };
        if written != Written::Nothing && written != Written::Conflict {
            ctx.status_writes.wrote(&key, ctx.clock.now());
        }
        pruned?;
        tracing::debug!(
            took_ms = started.elapsed().as_millis() as u64,
            status_write_ms = (written != Written::Nothing)
                .then(|| before_write.elapsed().as_millis() as u64),
            status_written = ?written,
            progress_held_back_ms = held_back.map(|d| d.as_millis() as u64),
            "reconciled"
        );
        ctx.metrics.reconciled(true);
        if written == Written::Conflict {
            // The Work changed since it was read (the hub wrote it): its watch brings the newer
            // copy, and this reconcile runs again on it.
            return Ok(Action::requeue(CONFLICT_RETRY));
        }
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
        Ok(Action::requeue(held_back.map_or(next, |d| d.min(next))))
    }
    .instrument(span)
    .await
}

/// The Work as it is now: the controller's cache's copy, or the agent's own last write of it
/// when the cache has not caught up with that ([`last_written`]), else read from the hub.
/// `None` when it is gone.
async fn current_work(work: Arc<Work>, ctx: &Context) -> Result<Option<Arc<Work>>, Error> {
    let name = work.name_any();
    let cached = match ctx.works.get() {
        Some(store) => store.get(&ObjectRef::from_obj(work.as_ref())),
        None => Some(work),
    };
    ctx.written_works
        .newest_or_read(&name, cached, || async {
            ctx.metrics.work_request(request::READ_WORK);
            Api::<Work>::namespaced(ctx.hub.clone(), &ctx.namespace)
                .get_opt(&name)
                .await
                .map_err(Error::hub(format!("reading Work {}/{name}", ctx.namespace)))
        })
        .await
}

/// How soon a Work whose workloads wait for their pods is looked at again (see
/// [`with_pod_problems`]).
const POD_STATE_RECHECK: Duration = Duration::from_secs(5);

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

/// How long the Work has been reported not available for its current generation (`None`:
/// available, or not for this generation yet).
fn not_available_since(work: &Work, now: jiff::Timestamp) -> Option<Duration> {
    let available =
        fleethub_crds::conditions::find(&work.status.as_ref()?.conditions, "Available")?;
    if available.status == "True" || available.observed_generation != work.metadata.generation {
        return None;
    }
    Duration::try_from(now.duration_since(available.last_transition_time.0)).ok()
}

/// How long a Work must have been reported not available before the agent reads its
/// workloads' pods to say why ([`with_pod_problems`]): a rollout that is merely under way
/// (most are done within this) costs no pod list per progress event.
const POD_PROBLEMS_AFTER: Duration = Duration::from_secs(2);

/// Whether the Work is reported available for its current generation.
fn available_for_generation(work: &Work) -> bool {
    work.status
        .as_ref()
        .and_then(|s| fleethub_crds::conditions::find(&s.conditions, "Available"))
        .is_some_and(|c| c.status == "True" && c.observed_generation == work.metadata.generation)
}

/// Each manifest's report from what its apply found, with the pods' problems of a workload that
/// is not ready when `pods_worth_reading`, and the restarts after `restarts_since` of one that
/// is; and whether a workload waits for its pods.
async fn reports_of(
    outcomes: &[apply::ManifestOutcome],
    pods_worth_reading: bool,
    restarts_since: Option<jiff::Timestamp>,
    ctx: &Context,
) -> (Vec<ManifestReport>, bool) {
    let mut reports = Vec::with_capacity(outcomes.len());
    // A workload waiting for its pods: their states are not watched, so they are read
    // again soon (a pod stuck pulling its image changes nothing the agent watches).
    let mut pods_pending = false;
    for o in outcomes {
        let readiness = match &o.result {
            Ok(applied) => {
                let readiness = availability::readiness(&applied.object);
                if matches!(readiness, availability::Readiness::NotReady(_))
                    && availability::pod_selector(&applied.object).is_some()
                {
                    pods_pending = true;
                }
                match (&readiness, restarts_since) {
                    (availability::Readiness::Ready, Some(since)) => {
                        let (readiness, restarted) =
                            with_restarts(readiness, &applied.object, since, ctx).await;
                        // Looked at again soon: the restarts count only for a while.
                        pods_pending |= restarted;
                        Ok(readiness)
                    }
                    _ => Ok(match pods_worth_reading {
                        true => with_pod_problems(readiness, &applied.object, ctx).await,
                        false => readiness,
                    }),
                }
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
    (reports, pods_pending)
}

/// `reports` with each applied object's readiness as the member's caches show it now (no API
/// call). A workload still not ready keeps its report (and the pods' problems in it).
async fn refreshed(
    outcomes: &[apply::ManifestOutcome],
    reports: &[ManifestReport],
    ctx: &Context,
) -> Vec<ManifestReport> {
    let mut fresh = reports.to_vec();
    for (o, report) in outcomes.iter().zip(fresh.iter_mut()) {
        let Ok(applied) = &o.result else { continue };
        let r = &applied.resource;
        let gvk = kube::api::GroupVersionKind::gvk(&r.group, &r.version, &r.kind);
        let Ok(Some(kind)) = ctx.kinds.resolve(&gvk).await else {
            continue;
        };
        let Cached::Present(object) = ctx.objects.get(&kind, r.namespace.as_deref(), &r.name)
        else {
            continue;
        };
        let now = availability::readiness(&object);
        let was_not_ready = matches!(report.outcome, Ok(availability::Readiness::NotReady(_)));
        if !(was_not_ready && matches!(now, availability::Readiness::NotReady(_))) {
            report.outcome = Ok(now);
        }
    }
    fresh
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use std::sync::Mutex;

    /// The controller as [`run`] configures it, over ConfigMaps: a reconcile takes 100 ms; a
    /// storm of events for the same object during it makes exactly one more reconcile, started
    /// the moment the first ends (leading edge, no fixed delay).
    #[tokio::test(start_paused = true)]
    async fn events_during_a_reconcile_make_one_more_at_once() {
        use k8s_openapi::api::core::v1::ConfigMap;
        use kube::runtime::{Controller, reflector, watcher};
        use tokio::time::Instant;

        let (reader, mut writer) = reflector::store::<ConfigMap>();
        let object = ConfigMap {
            metadata: ObjectMeta {
                name: Some("web".into()),
                namespace: Some("app".into()),
                ..Default::default()
            },
            ..Default::default()
        };
        // Listed, as a watcher lists: the controller runs nothing until its store is ready.
        for event in [
            watcher::Event::Init,
            watcher::Event::InitApply(object.clone()),
            watcher::Event::InitDone,
        ] {
            writer.apply_watcher_event(&event);
        }
        let (events, triggers) = futures::channel::mpsc::unbounded();
        let starts: Arc<Mutex<Vec<Instant>>> = Arc::default();
        let controller = Controller::for_stream(
            futures::stream::pending::<Result<ConfigMap, watcher::Error>>(),
            reader,
        )
        .with_config(controller_config())
        .reconcile_on(triggers);
        let run = tokio::spawn(
            controller
                .run(
                    |_, starts: Arc<Mutex<Vec<Instant>>>| async move {
                        starts.lock().unwrap().push(Instant::now());
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        Ok::<_, kube::Error>(Action::await_change())
                    },
                    |_, _, _| Action::await_change(),
                    starts.clone(),
                )
                .for_each(|_| async {}),
        );
        let event = || events.unbounded_send(ObjectRef::from_obj(&object)).unwrap();
        let t0 = Instant::now();
        event();
        tokio::time::sleep(Duration::from_millis(10)).await;
        for _ in 0..5 {
            event();
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        run.abort();
        let offsets: Vec<Duration> = starts.lock().unwrap().iter().map(|t| *t - t0).collect();
        assert_eq!(
            offsets,
            [Duration::ZERO, Duration::from_millis(100)],
            "reconciles started at these offsets from the first event"
        );
    }
}
