//! The UpdateRun controller. Each reconcile reads top to bottom: observe (the run, its caches,
//! and before initialization its strategy, placement and snapshot) → plan (the pure planner) →
//! report (the status, events and metrics) → act (the plan's writes, in the background after
//! the status, in order per run: [`acting`]). Triggered by changes of
//! runs, Works, Bindings and ApprovalRequests (watches, not polling); requeued only for timers.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use fleethub_crds::approval::{self, ApprovalRequestSpec, ApprovalRequestStatus};
use fleethub_crds::binding::{BindingSpec, BindingState, OverrideSnapshots};
use fleethub_crds::conditions::{TRUE, find, is_true};
use fleethub_crds::field_manager::UPDATE_RUN as FIELD_MANAGER;
use fleethub_crds::member_cluster::HEALTHY;
use fleethub_crds::override_apply;
use fleethub_crds::overrides::{ClusterResourceOverrideSnapshot, ResourceOverrideSnapshot};
use fleethub_crds::run_progress::RunPhase;
use fleethub_crds::update_run::{INITIALIZED, SUCCEEDED, reason};
use fleethub_crds::{
    ApprovalRequest, Binding, MemberCluster, Placement, ResourceSnapshot, StagedUpdateStrategy,
    UpdateRun, Work, names,
};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta, Time};
use kube::api::{Patch, PatchParams, PostParams};
use kube::runtime::controller::Action as Requeue;
use kube::runtime::events::{Event, EventType};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::{Api, Client, Resource, ResourceExt};
use tokio_util::sync::CancellationToken;

mod act;
mod acting;
mod asked;
mod binding_views;
mod context;
mod observe;
mod pace;
mod plans;
mod publisher;

use act::act;
pub use context::Context;
use context::{Caches, Io, Pacing, RecentWrites};
use observe::{look_up, observe, query};

use super::plan::{
    self, Action, ApprovalView, BindingView, MetricKey, MetricQuery, Observed, Plan, QueryOutcome,
    SiblingRun, WorkView,
};
use crate::Error;
use crate::caches::Shared;
use crate::clock::Clock;
use crate::error::{EXISTS, GONE, ok_if};
use crate::metrics::{Metrics, RunState, RunStateLabels};
use crate::placement::triggers;
use fleethub_runtime::CACHE_WAIT;
use fleethub_runtime::last_written::LastWritten;
use fleethub_runtime::prometheus::{Auth, Prometheus};
use fleethub_runtime::retry::{ERROR_BACKOFF, FailureBackoff};

/// Runs the controller until `shutdown`.
pub async fn run(
    client: Client,
    secrets: Api<Secret>,
    clock: Arc<dyn Clock>,
    metrics: Metrics,
    shared: Shared,
    concurrency: u16,
    shutdown: CancellationToken,
) {
    let prometheus = match Prometheus::new() {
        Ok(p) => p,
        Err(e) => {
            tracing::error!(error = %e, "cannot read the system's root certificates; the update-run controller does not start");
            return;
        }
    };
    let Shared {
        members,
        bindings,
        works,
    } = shared;
    let (works, work_stream) = (works.store.clone(), works.touched());
    let (bindings, binding_stream) = (bindings.store.clone(), bindings.touched());
    let (approvals, approvals_writer) = reflector::store::<ApprovalRequest>();
    metrics.count_approvals_in(approvals.clone());
    let (placements, placements_writer) = reflector::store::<Placement>();
    let (freezes, freezes_writer) = reflector::store::<fleethub_crds::Freeze>();
    let freeze_stream = fleethub_runtime::reflected_stream(
        Api::<fleethub_crds::Freeze>::all(client.clone()),
        freezes_writer,
    );

    let approval_stream = fleethub_runtime::reflected_stream(
        Api::<ApprovalRequest>::all(client.clone()),
        approvals_writer,
    );
    // Heartbeats do not concern runs; a member's health (or its leaving) concerns those
    // waiting for it.
    let member_stream = triggers::member_stream(members.events, triggers::health_inputs);
    let members = members.store;
    let placement_stream = fleethub_runtime::reflected_stream(
        Api::<Placement>::all(client.clone()),
        placements_writer,
    );

    // A run's change concerns the other runs of its placement: a newer run supersedes them,
    // and a run that ended lets a waiting newer one start. Those triggers come from the
    // controller's own watch, once its store holds the change the sibling will read.
    let (controller, sibling_changes) = fleethub_runtime::controller_with_changes(
        Api::<UpdateRun>::all(client.clone()),
        |r: &UpdateRun| r.spec.placement_name.clone(),
    );
    let runs = controller.store();
    // The unfinished runs of a placement that `also` holds for.
    let by_placement = |runs: Store<UpdateRun>, also: fn(&UpdateRun) -> bool| {
        move |placement: &str| -> Vec<ObjectRef<UpdateRun>> {
            runs.state()
                .iter()
                .filter(|r| r.spec.placement_name == placement && !finished(r) && also(r))
                .map(|r| ObjectRef::from_obj(r.as_ref()))
                .collect()
        }
    };
    let any: fn(&UpdateRun) -> bool = |_| true;
    let for_work = by_placement(runs.clone(), any);
    let for_binding = by_placement(runs.clone(), any);
    let for_run = by_placement(runs.clone(), any);
    let for_placement = by_placement(runs.clone(), any);
    // A freeze made, changed or lifted concerns every unfinished run (those of the placements
    // it names, or all).
    let for_freeze = {
        let runs = runs.clone();
        move |f: fleethub_crds::Freeze| -> Vec<ObjectRef<UpdateRun>> {
            runs.state()
                .iter()
                .filter(|r| !finished(r))
                .filter(|r| {
                    f.spec.placements.is_empty()
                        || f.spec.placements.contains(&r.spec.placement_name)
                })
                .map(|r| ObjectRef::from_obj(r.as_ref()))
                .collect()
        }
    };
    let uninitialized = by_placement(runs.clone(), |r| {
        let conditions = r.status.as_ref().map(|s| s.conditions.as_slice());
        !is_true(conditions.unwrap_or_default(), INITIALIZED)
    });
    let placements_seen = placements.clone();
    // A member's health matters to the runs waiting for it to become healthy (their turn came
    // while it was not); every other run reads members only when it plans.
    let waiting_for_member = {
        let runs = runs.clone();
        move |_: MemberCluster| -> Vec<ObjectRef<UpdateRun>> {
            runs.state()
                .iter()
                .filter(|r| {
                    r.status
                        .as_ref()
                        .and_then(|s| find(&s.conditions, fleethub_crds::update_run::PROGRESSING))
                        .is_some_and(|c| c.reason == reason::WAITING_FOR_MEMBER)
                })
                .map(|r| ObjectRef::from_obj(r.as_ref()))
                .collect()
        }
    };
    // Runs whose background writes failed: their next reconcile reports it and plans again.
    let (retry, retries) = tokio::sync::mpsc::unbounded_channel::<String>();
    let retries = futures::stream::unfold(retries, |mut rx| async move {
        let name = rx.recv().await?;
        Some((ObjectRef::<UpdateRun>::new(&name), rx))
    });
    // One publisher, so a run's events keep their order.
    let (events, publisher) = publisher::spawn(client.clone());
    let ctx = Arc::new(Context {
        io: Io {
            metrics: metrics.clone(),
            events,
            client,
            clock,
            prometheus,
            secrets,
        },
        caches: Caches {
            runs,
            works,
            bindings,
            approvals,
            members,
            placements,
            freezes,
            binding_views: binding_views::BindingViews::default(),
            plans: plans::Plans::default(),
        },
        recent: RecentWrites {
            written: LastWritten::slimmed_by(fleethub_runtime::strip_managed_fields),
            bound: LastWritten::slimmed_by(fleethub_runtime::strip_managed_fields),
            asked: asked::Asked::default(),
        },
        pacing: Pacing {
            errors: FailureBackoff::new(ERROR_BACKOFF),
            pace: pace::Pace::default(),
            acting: acting::Queues::new(retry),
            bind_concurrency: usize::from(concurrency),
        },
    });
    let after_each = ctx.clone();
    let stopped = ctx.clone();
    let plans_deleted = plans::deletions(ctx.io.client.clone(), ctx.clone());

    controller
        .watches_stream(member_stream, waiting_for_member)
        .watches_stream(placement_stream, move |p: Placement| {
            // Only a deletion concerns a run after it initialized (its status changes often,
            // and runs read placements only when they start); a run that has not initialized
            // may wait for the placement's scheduling. The store already holds the change: a
            // deleted placement is gone from it.
            let name = p.name_any();
            let deleted = p.metadata.deletion_timestamp.is_some()
                || placements_seen.get(&ObjectRef::new(&name)).is_none();
            if deleted {
                for_placement(&name)
            } else {
                uninitialized(&name)
            }
        })
        .watches_stream(freeze_stream, for_freeze)
        .watches_stream(work_stream, move |w: Work| for_work(&w.spec.placement_name))
        .watches_stream(binding_stream, move |b: Binding| {
            for_binding(&b.spec.placement_name)
        })
        .reconcile_on(
            sibling_changes.flat_map(move |placement| futures::stream::iter(for_run(&placement))),
        )
        .watches_stream(approval_stream, |a: ApprovalRequest| {
            Some(ObjectRef::<UpdateRun>::new(&a.spec.parent_stage_rollout))
        })
        .reconcile_on(retries)
        .reconcile_on(plans_deleted)
        .graceful_shutdown_on(async move { shutdown.cancelled().await })
        .run(
            |run, ctx| async move {
                let key = ObjectRef::from_obj(run.as_ref());
                let result = crate::error::bounded(reconcile(run, ctx.clone())).await;
                ctx.pacing.errors.observe(&key, result)
            },
            error_policy,
            ctx,
        )
        .for_each(move |res| {
            metrics.observe("update-run", &res);
            count_runs(&metrics, &after_each.caches.runs);
            after_each.forget_deleted_runs();
            if let Err(e) = res {
                tracing::debug!(error = %e, "update-run reconcile error");
            }
            std::future::ready(())
        })
        .await;
    // Not leading any more (or stopping): the writes still queued are another process' now.
    stopped.pacing.acting.abort_all();
    publisher.abort();
}

/// Where a run is, for the runs-by-state gauge.
fn state_of(run: &UpdateRun) -> RunState {
    match RunPhase::of(run) {
        RunPhase::Pending | RunPhase::Queued | RunPhase::Initializing | RunPhase::Planned => {
            RunState::Pending
        }
        RunPhase::Progressing | RunPhase::Stopping | RunPhase::Baking => RunState::Progressing,
        RunPhase::Waiting => RunState::Waiting,
        RunPhase::Stopped => RunState::Stopped,
        RunPhase::Blocked => RunState::Blocked,
        RunPhase::Held => RunState::Held,
        RunPhase::Succeeded => RunState::Succeeded,
        RunPhase::Failed => RunState::Failed,
    }
}

/// Sets the runs-by-state gauge from the cache of runs.
fn count_runs(metrics: &Metrics, runs: &Store<UpdateRun>) {
    let all = runs.state();
    for state in RunState::ALL {
        let n = all.iter().filter(|r| state_of(r) == state).count();
        metrics
            .update_runs
            .get_or_create(&RunStateLabels { state })
            .set(n as i64);
    }
}

fn finished(run: &UpdateRun) -> bool {
    run.status
        .as_ref()
        .is_some_and(|s| find(&s.conditions, SUCCEEDED).is_some())
}

fn error_policy(run: Arc<UpdateRun>, error: &Error, ctx: Arc<Context>) -> Requeue {
    // A conflict only means the view was stale: look again at once.
    let retry_in = if error.is_conflict() {
        Duration::from_secs(1)
    } else {
        ctx.pacing.errors.failed(ObjectRef::from_obj(run.as_ref()))
    };
    tracing::warn!(run = %run.name_any(), error = %error, ?retry_in, "reconciling UpdateRun failed; retrying");
    Requeue::requeue(retry_in)
}

#[tracing::instrument(skip_all, fields(run = %cached.name_any()))]
async fn reconcile(cached: Arc<UpdateRun>, ctx: Arc<Context>) -> Result<Requeue, Error> {
    let name = cached.name_any();
    // Reports that arrive meanwhile are planned together.
    ctx.pacing.pace.wait(&name).await;
    // Plan on the freshest run: the cache may lag our own last status write.
    let Some(run) = ctx.freshest(cached).await? else {
        ctx.recent.written.forget(&name);
        return Ok(Requeue::await_change());
    };
    if finished(&run) || run.metadata.deletion_timestamp.is_some() {
        ctx.recent.written.forget(&name);
        return Ok(Requeue::await_change());
    }
    if let Some(e) = ctx.pacing.acting.take_failure(&name) {
        // The last plan's writes failed in the background: fail as that reconcile would have
        // (the retry backs off); the next plan repeats what is missing.
        return Err(e);
    }
    if !ctx.caches.ready().await {
        tracing::info!("caches still listing after {CACHE_WAIT:?}; retrying");
        return Ok(Requeue::requeue(CACHE_WAIT));
    }
    let started = std::time::Instant::now();
    // The clusters of its large stages are in its UpdateRunPlan.
    let (run, plan_lost) = match ctx.caches.plans.read(&ctx.io.client, run).await? {
        plans::WithPlan::Read(run) => (run, None),
        plans::WithPlan::Lost(run, why) => (run, Some(why)),
    };
    let lookups = look_up(&ctx, &run).await?;
    // What the pace counts: the hub's own work on the run, not the lookups' or queries' waits.
    let plan_started = std::time::Instant::now();
    // The planner takes the run's status itself, not a copy (at 10,000 clusters the copy was a
    // third of planning): a copy is kept only when this reconcile may plan twice. The new
    // status is compared with the old as stored (serialized: at 10,000 clusters a few KB).
    let mut run = Arc::unwrap_or_clone(run);
    let status = run.status.take();
    let stored = stored_form(status.as_ref());
    let again = status
        .as_ref()
        .filter(|s| may_plan_twice(s))
        .cloned()
        .unwrap_or_default();
    let run = Arc::new(run);
    let mut observed = observe(&ctx, &run, status.as_ref(), &lookups);
    observed.plan_lost = plan_lost;
    let mut plan = plan::plan_from(&observed, status.unwrap_or_default());
    let mut planning = plan_started.elapsed();
    if refused_over_member_labels(&plan.status) {
        // The members cache and the runs cache are filled by separate watches, in no order
        // between them: a run created right after its clusters were labelled can reach this
        // reconcile before their new labels do. The run is refused for good only on the
        // members as the API server has them.
        observed.cluster_labels = observe::fresh_cluster_labels(&ctx).await?;
        plan = plan::plan_from(&observed, again.clone());
    }
    if !plan.queries.is_empty() {
        // Metric checks are due: their outcomes are observations too.
        observed.metric_results = query(&ctx, &plan.queries).await;
        let replan_started = std::time::Instant::now();
        plan = plan::plan_from(&observed, again);
        planning += replan_started.elapsed();
    }
    ctx.pacing.pace.planned(&name, planning);
    // The status first: a member's report is recorded without waiting for the plan's writes
    // (at 1,000 clusters, a stage's next Bindings took 0.2–1.5 s). A crash or a failed write
    // after it loses some of the actions, never the record: the next plan repeats what is
    // missing (a started cluster's Binding, an ApprovalRequest, its acceptance, an unbind).
    let planned = started.elapsed();
    // Except a failed run's rollback run, created before the status that names it: a crash
    // between the two creates it again, and once named it is never created again (a person who
    // deletes it stops the rollback).
    let (rollback, actions): (Vec<_>, Vec<_>) = std::mem::take(&mut plan.actions)
        .into_iter()
        .partition(|a| matches!(a, Action::CreateRollbackRun { .. }));
    if !rollback.is_empty() {
        act(&ctx, &run, &rollback).await?;
    }
    let requeue = report(&ctx, &run, plan, &stored).await?;
    tracing::debug!(
        plan_ms = planned.as_millis() as u64,
        status_ms = (started.elapsed() - planned).as_millis() as u64,
        actions = actions.len(),
        "reconciled"
    );
    if !actions.is_empty() {
        // The next reports need not wait for these writes to be recorded (see [`acting`]).
        let (writer, run) = (ctx.clone(), run.clone());
        ctx.pacing.acting.enqueue(&name, async move {
            let started = std::time::Instant::now();
            act(&writer, &run, &actions).await?;
            tracing::debug!(run = %run.name_any(), actions = actions.len(), act_ms = started.elapsed().as_millis() as u64, "plan written");
            Ok(())
        });
    }
    Ok(requeue)
}

/// Whether `status` refuses the run at initialization over its clusters' labels or existence,
/// which the members cache may not show yet.
fn refused_over_member_labels(status: &fleethub_crds::update_run::UpdateRunStatus) -> bool {
    find(&status.conditions, fleethub_crds::update_run::INITIALIZED).is_some_and(|c| {
        c.status == fleethub_crds::conditions::FALSE
            && [
                reason::CLUSTER_MATCHES_NO_STAGE,
                reason::CLUSTER_MATCHES_SEVERAL_STAGES,
                reason::MEMBER_CLUSTER_NOT_FOUND,
            ]
            .contains(&c.reason.as_str())
    })
}

/// Whether a reconcile may plan `status` a second time: before the run is initialized (its
/// members' labels may be read again) and when its strategy has metric checks (planned again
/// with their outcomes). Only the plans that follow these start from a copy of the status.
fn may_plan_twice(status: &fleethub_crds::update_run::UpdateRunStatus) -> bool {
    use fleethub_crds::strategy::StageTaskType;
    !is_true(&status.conditions, INITIALIZED)
        || status
            .staged_update_strategy_snapshot
            .as_ref()
            .is_none_or(|s| {
                s.stages.iter().any(|stage| {
                    stage.analysis.is_some()
                        || stage
                            .before_stage_tasks
                            .iter()
                            .chain(&stage.after_stage_tasks)
                            .any(|t| t.type_ == StageTaskType::MetricCheck)
                })
            })
}

/// A run's status as the API server stores it (a large stage's clusters compacted): two
/// statuses that store alike need no write.
fn stored_form(status: Option<&fleethub_crds::update_run::UpdateRunStatus>) -> Vec<u8> {
    // Serializing these types does not fail; were it to, the statuses would compare unequal
    // and the write would report the error.
    serde_json::to_vec(&status).unwrap_or_default()
}

/// Writes the run's new status (if it differs from `stored`, the run's status as stored),
/// publishes the plan's events, observes the durations they carry, and says when to look
/// again. The plan's status is moved into the write, not copied (at 10,000 clusters that copy
/// was a tenth of the reconcile).
async fn report(
    ctx: &Context,
    run: &UpdateRun,
    plan: Plan,
    stored: &[u8],
) -> Result<Requeue, Error> {
    let name = run.name_any();
    let Plan {
        mut status,
        events,
        requeue_after,
        ..
    } = plan;
    if stored_form(Some(&status)) != stored {
        if status.uses_plan() && status.plan_ref.is_none() {
            // Initialized now: the order of its large stages' clusters is written once, before
            // the first status that counts on it.
            status.plan_ref = Some(ctx.caches.plans.write(&ctx.io.client, run, &status).await?);
        }
        let runs: Api<UpdateRun> = Api::all(ctx.io.client.clone());
        // The whole status, replaced (this controller is its only writer): an update, not an
        // apply, so the API server neither parses the body as YAML (kube sends applies as
        // `application/apply-patch+yaml`) nor merges it field by field, and this write is on
        // the path of every member's report (at 1,000 clusters the status is ~70 KB).
        // Optimistic concurrency: the resourceVersion makes a write from a stale view fail.
        let body = UpdateRun {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                resource_version: run.metadata.resource_version.clone(),
                ..ObjectMeta::default()
            },
            // The status subresource ignores the spec; it is sent only because the type has one.
            spec: run.spec.clone(),
            status: Some(status),
        };
        let params = PostParams {
            field_manager: Some(FIELD_MANAGER.to_string()),
            ..PostParams::default()
        };
        match runs.replace_status(&name, &params, &body).await {
            Ok(w) => ctx.recent.written.record(&name, w),
            Err(e) => {
                ctx.recent.written.forget(&name);
                if matches!(&e, kube::Error::Api(s) if s.code == 409) {
                    // The run was planned on a stale copy. The cache may stay stale for long (a
                    // watch re-listing from an overloaded API server): the next plan starts from
                    // the run as it is now, not from the same stale copy, conflict after
                    // conflict (at 10,000 members, 15 a second, each sending the whole status).
                    if let Ok(Some(current)) = runs.get_opt(&name).await {
                        ctx.recent.written.record(&name, current);
                    }
                }
                return Err(e.into());
            }
        }
    }
    for e in &events {
        let event = Event {
            type_: if e.warning {
                EventType::Warning
            } else {
                EventType::Normal
            },
            reason: e.reason.to_string(),
            note: Some(e.message.clone()),
            action: "Reconcile".to_string(),
            secondary: None,
        };
        if let Err(err) = ctx.io.events.try_send((event, run.object_ref(&()))) {
            tracing::debug!(error = %err, "event backlog full; event dropped");
        }
        tracing::info!(run = %name, reason = e.reason, "{}", e.message);
        match e.reason {
            reason::CLUSTER_REGRESSED => ctx.io.metrics.cluster_regressions.inc(),
            reason::RUN_ROLLED_BACK => match e.cause {
                Some(cause) => ctx
                    .io
                    .metrics
                    .run_rollbacks
                    .get_or_create(&crate::metrics::RollbackLabels { cause })
                    .inc(),
                None => 0,
            },
            _ => 0,
        };
        let histogram = match e.reason {
            reason::CLUSTER_SUCCEEDED => &ctx.io.metrics.cluster_update_seconds,
            reason::STAGE_SUCCEEDED => &ctx.io.metrics.stage_seconds,
            reason::APPROVAL_APPROVED => &ctx.io.metrics.approval_wait_seconds,
            _ => continue,
        };
        if let Some(seconds) = e.seconds {
            histogram.observe(seconds.max(0) as f64);
        }
    }
    Ok(match requeue_after {
        Some(after) => Requeue::requeue(after),
        None => Requeue::await_change(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use fleethub_crds::update_run::UpdateRunStatus;
    use serde_json::json;

    fn status(initialized: bool, tasks: serde_json::Value) -> UpdateRunStatus {
        let mut status = UpdateRunStatus::default();
        if initialized {
            status.conditions.push(Condition {
                type_: INITIALIZED.into(),
                status: TRUE.into(),
                reason: "Initialized".into(),
                message: String::new(),
                last_transition_time: Time(jiff::Timestamp::UNIX_EPOCH),
                observed_generation: None,
            });
            let strategy = json!({"stages": [
                {"name": "staging"},
                {"name": "production", "afterStageTasks": tasks},
            ]});
            status.staged_update_strategy_snapshot =
                Some(serde_json::from_value(strategy).unwrap());
        }
        status
    }

    #[test]
    fn a_status_is_copied_for_a_second_plan_only_before_initialization_or_with_metric_checks() {
        assert!(
            may_plan_twice(&status(false, json!([]))),
            "labels may be read again"
        );
        let timed = json!([{"type": "TimedWait", "waitTime": "1m"}, {"type": "Approval"}]);
        assert!(!may_plan_twice(&status(true, timed)));
        let metric = json!([{"type": "MetricCheck", "metricCheck": {
            "url": "http://prometheus:9090", "query": "up", "interval": "10s",
            "successThreshold": 2}}]);
        assert!(
            may_plan_twice(&status(true, metric)),
            "queries are planned again"
        );
        let mut without_snapshot = status(true, json!([]));
        without_snapshot.staged_update_strategy_snapshot = None;
        assert!(may_plan_twice(&without_snapshot));
    }
}
