//! The UpdateRun controller: gathers what the planner needs, performs the plan's writes, and
//! records the status. Triggered by changes of runs, Works, Bindings and ApprovalRequests
//! (watches, not polling); requeued only for timers.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use fleethub_crds::approval::{APPROVAL_ACCEPTED, APPROVED, ApprovalRequestSpec};
use fleethub_crds::conditions::{TRUE, find, is_true};
use fleethub_crds::update_run::{INITIALIZED, PROGRESSING, SUCCEEDED};
use fleethub_crds::{
    ApprovalRequest, Binding, MemberCluster, Placement, ResourceSnapshot, StagedUpdateStrategy,
    UpdateRun, Work, names,
};
use futures::StreamExt;
use kube::api::{Patch, PatchParams, PostParams};
use kube::runtime::controller::Action as Requeue;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::reflector;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Api, Client, Resource, ResourceExt};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::plan::{self, Action, ApprovalView, BindingView, Observed, WorkView};
use crate::Error;
use crate::clock::Clock;
use crate::error::{EXISTS, GONE, ok_if};
use crate::metrics::{Metrics, RunState, RunStateLabels};
use fleethub_runtime::CACHE_WAIT;

/// Field manager of every write this controller makes.
pub const FIELD_MANAGER: &str = "fleethub/update-run";

/// What the reconciler shares.
pub struct Context {
    client: Client,
    metrics: Metrics,
    clock: Arc<dyn Clock>,
    /// Events go to a publisher task: a reconcile must not wait for one API call per event
    /// (a stage of 50 clusters makes 100 of them) before the run can move again.
    events: tokio::sync::mpsc::Sender<(Event, k8s_openapi::api::core::v1::ObjectReference)>,
    runs: Store<UpdateRun>,
    works: Store<Work>,
    bindings: Store<Binding>,
    approvals: Store<ApprovalRequest>,
    members: Store<MemberCluster>,
    /// The resourceVersion of this process' last status write of each run. When the cache of
    /// runs holds exactly that version, the reconcile plans on the cache instead of reading the
    /// run again (at 1,000 clusters a run is half a megabyte). A freshness hint, never a
    /// decision: a run read from a stale cache is refused by the status write's
    /// resourceVersion precondition.
    written: std::sync::Mutex<BTreeMap<String, String>>,
}

impl Context {
    /// The run to plan on: the cached one when it is our own last write, else a fresh read.
    async fn freshest(&self, cached: Arc<UpdateRun>) -> Result<Option<Arc<UpdateRun>>, Error> {
        let name = cached.name_any();
        let ours = self.written_version(&name);
        if ours.is_some() && ours == cached.metadata.resource_version {
            return Ok(Some(cached));
        }
        let runs: Api<UpdateRun> = Api::all(self.client.clone());
        Ok(runs.get_opt(&name).await?.map(Arc::new))
    }

    fn written_version(&self, run: &str) -> Option<String> {
        let written = self.written.lock().unwrap_or_else(|e| e.into_inner());
        written.get(run).cloned()
    }

    fn remember_written(&self, run: &str, version: Option<String>) {
        let mut written = self.written.lock().unwrap_or_else(|e| e.into_inner());
        match version {
            Some(v) => written.insert(run.to_string(), v),
            None => written.remove(run),
        };
    }
}

/// Runs the controller until `shutdown`.
pub async fn run(
    client: Client,
    clock: Arc<dyn Clock>,
    metrics: Metrics,
    shutdown: CancellationToken,
) {
    let (works, works_writer) = reflector::store::<Work>();
    let (bindings, bindings_writer) = reflector::store::<Binding>();
    let (approvals, approvals_writer) = reflector::store::<ApprovalRequest>();
    metrics.count_approvals_in(approvals.clone());
    let (members, members_writer) = reflector::store::<MemberCluster>();

    let work_stream =
        fleethub_runtime::reflected_stream(Api::<Work>::all(client.clone()), works_writer);
    let binding_stream =
        fleethub_runtime::reflected_stream(Api::<Binding>::all(client.clone()), bindings_writer);
    let approval_stream = fleethub_runtime::reflected_stream(
        Api::<ApprovalRequest>::all(client.clone()),
        approvals_writer,
    );
    let member_stream = fleethub_runtime::reflected_stream(
        Api::<MemberCluster>::all(client.clone()),
        members_writer,
    );

    // A run's change concerns the other runs of its placement: a newer run supersedes them,
    // and a run that ended lets a waiting newer one start. Those triggers come from the
    // controller's own watch, once its store holds the change the sibling will read.
    let (controller, sibling_changes) = fleethub_runtime::controller_with_changes(
        Api::<UpdateRun>::all(client.clone()),
        |r: &UpdateRun| r.spec.placement_name.clone(),
    );
    let runs = controller.store();
    let by_placement = |runs: Store<UpdateRun>| {
        move |placement: &str| -> Vec<ObjectRef<UpdateRun>> {
            runs.state()
                .iter()
                .filter(|r| r.spec.placement_name == placement && !finished(r))
                .map(|r| ObjectRef::from_obj(r.as_ref()))
                .collect()
        }
    };
    let for_work = by_placement(runs.clone());
    let for_binding = by_placement(runs.clone());
    let for_run = by_placement(runs.clone());
    let runs_for_gauge = runs.clone();
    let (events, mut to_publish) = tokio::sync::mpsc::channel::<(
        Event,
        k8s_openapi::api::core::v1::ObjectReference,
    )>(EVENT_BACKLOG);
    let recorder = Recorder::new(client.clone(), Reporter::from("fleethub-hub"));
    // One publisher, so a run's events keep their order.
    let publisher = tokio::spawn(async move {
        while let Some((event, object)) = to_publish.recv().await {
            if let Err(err) = recorder.publish(&event, &object).await {
                tracing::debug!(error = %err, "cannot record event");
            }
        }
    });
    let ctx = Arc::new(Context {
        metrics: metrics.clone(),
        events,
        client,
        clock,
        runs,
        works,
        bindings,
        approvals,
        members,
        written: Default::default(),
    });

    // MemberClusters are only read (at initialization); keep their store current.
    let members_task = tokio::spawn(member_stream.for_each(|_| async {}));
    controller
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
        .graceful_shutdown_on(async move { shutdown.cancelled().await })
        .run(
            |o, c| crate::error::bounded(reconcile(o, c)),
            error_policy,
            ctx,
        )
        .for_each(move |res| {
            metrics.observe("update-run", &res);
            count_runs(&metrics, &runs_for_gauge);
            if let Err(e) = res {
                tracing::debug!(error = %e, "update-run reconcile error");
            }
            std::future::ready(())
        })
        .await;
    members_task.abort();
    publisher.abort();
}

/// Events waiting to be published; beyond this, new ones are dropped (and logged): the run's
/// status, not its events, is the record.
const EVENT_BACKLOG: usize = 10_000;
/// Binding writes of one plan made at once (a stage starting many clusters together).
const BIND_CONCURRENCY: usize = 16;

/// Where a run is, for the runs-by-state gauge.
fn state_of(run: &UpdateRun) -> RunState {
    let conds = run
        .status
        .as_ref()
        .map(|s| s.conditions.as_slice())
        .unwrap_or_default();
    match (find(conds, SUCCEEDED), find(conds, PROGRESSING)) {
        (Some(c), _) if c.status == TRUE => RunState::Succeeded,
        (Some(_), _) => RunState::Failed,
        (None, None) => RunState::Pending,
        (None, Some(p)) => match p.reason.as_str() {
            plan::reason::WAITING => RunState::Waiting,
            plan::reason::STOPPED => RunState::Stopped,
            plan::reason::CLUSTER_FAILED => RunState::Blocked,
            plan::reason::WAITING_FOR_PREVIOUS_RUN => RunState::Pending,
            _ => RunState::Progressing,
        },
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

/// The run passed validation and waits for an earlier run of its placement to end.
fn waiting_for_previous(run: &UpdateRun) -> bool {
    run.status.as_ref().is_some_and(|s| {
        find(&s.conditions, INITIALIZED)
            .is_some_and(|c| c.reason == plan::reason::WAITING_FOR_PREVIOUS_RUN)
    })
}

fn initialized(run: &UpdateRun) -> bool {
    run.status
        .as_ref()
        .is_some_and(|s| is_true(&s.conditions, INITIALIZED))
}

fn error_policy(run: Arc<UpdateRun>, error: &Error, _ctx: Arc<Context>) -> Requeue {
    tracing::warn!(run = %run.name_any(), error = %error, "reconciling UpdateRun failed; retrying");
    Requeue::requeue(Duration::from_secs(if error.is_conflict() { 1 } else { 5 }))
}

#[tracing::instrument(skip_all, fields(run = %cached.name_any()))]
async fn reconcile(cached: Arc<UpdateRun>, ctx: Arc<Context>) -> Result<Requeue, Error> {
    let name = cached.name_any();
    let runs: Api<UpdateRun> = Api::all(ctx.client.clone());
    // Plan on the freshest run: the cache may lag our own last status write.
    let Some(run) = ctx.freshest(cached).await? else {
        ctx.remember_written(&name, None);
        return Ok(Requeue::await_change());
    };
    if finished(&run) || run.metadata.deletion_timestamp.is_some() {
        ctx.remember_written(&name, None);
        return Ok(Requeue::await_change());
    }
    // Plan only on complete caches: right after a (re)start or a change of leader, a run
    // initialized on a cache still being filled would see clusters (or an earlier run) missing.
    let caches = async {
        tokio::try_join!(
            ctx.runs.wait_until_ready(),
            ctx.members.wait_until_ready(),
            ctx.bindings.wait_until_ready(),
            ctx.works.wait_until_ready(),
            ctx.approvals.wait_until_ready()
        )
    };
    if !fleethub_runtime::ready_within(CACHE_WAIT, caches).await {
        tracing::info!("caches still listing after {CACHE_WAIT:?}; retrying");
        return Ok(Requeue::requeue(CACHE_WAIT));
    }
    let placement_name = run.spec.placement_name.clone();

    let (strategy, placement, snapshot_exists) = if initialized(&run) {
        (None, None, true)
    } else {
        let strategies: Api<StagedUpdateStrategy> = Api::all(ctx.client.clone());
        let placements: Api<Placement> = Api::all(ctx.client.clone());
        let snapshots: Api<ResourceSnapshot> = Api::all(ctx.client.clone());
        let index: u64 = run.spec.resource_snapshot_index.parse().unwrap_or(u64::MAX);
        (
            strategies
                .get_opt(&run.spec.staged_rollout_strategy_name)
                .await?,
            placements.get_opt(&placement_name).await?,
            snapshots
                .get_opt(&names::resource_snapshot_name(&placement_name, index))
                .await?
                .is_some_and(|s| s.spec.placement_name == placement_name),
        )
    };

    let cluster_labels: BTreeMap<String, BTreeMap<String, String>> = ctx
        .members
        .state()
        .iter()
        .map(|m| (m.name_any(), m.labels().clone()))
        .collect();
    let unhealthy_members: BTreeMap<String, String> = ctx
        .members
        .state()
        .iter()
        .filter_map(|m| {
            let healthy = find(&m.status.as_ref()?.conditions, "Healthy")?;
            (healthy.status != TRUE).then(|| (m.name_any(), healthy.message.clone()))
        })
        .collect();
    let bindings: Vec<BindingView> = ctx
        .bindings
        .state()
        .iter()
        .filter(|b| {
            b.spec.placement_name == placement_name && b.metadata.deletion_timestamp.is_none()
        })
        .map(|b| BindingView {
            cluster: b.spec.target_cluster.clone(),
            state: b.spec.state,
            resource_snapshot_index: b.spec.resource_snapshot_index,
            update_run_name: b.spec.update_run_name.clone(),
            health_timeout: b.spec.health_timeout.clone(),
        })
        .collect();
    let works: BTreeMap<String, WorkView> = ctx
        .works
        .state()
        .iter()
        .filter(|w| w.spec.placement_name == placement_name)
        .filter_map(|w| {
            let cluster = names::cluster_of_namespace(w.metadata.namespace.as_deref()?)?;
            Some((cluster.to_string(), WorkView::from_work(w)))
        })
        .collect();
    let approvals: BTreeMap<String, ApprovalView> = ctx
        .approvals
        .state()
        .iter()
        .filter(|a| a.spec.parent_stage_rollout == name)
        .map(|a| {
            let conds = a
                .status
                .as_ref()
                .map(|s| s.conditions.as_slice())
                .unwrap_or_default();
            (
                a.name_any(),
                ApprovalView {
                    approved: is_true(conds, APPROVED),
                    accepted: is_true(conds, APPROVAL_ACCEPTED),
                },
            )
        })
        .collect();
    let created = |r: &UpdateRun| {
        (
            r.metadata.creation_timestamp.clone().map(|t| t.0),
            r.name_any(),
        )
    };
    let siblings: Vec<Arc<UpdateRun>> = ctx
        .runs
        .state()
        .into_iter()
        .filter(|r| r.spec.placement_name == placement_name && r.name_any() != name)
        .filter(|r| !finished(r) && r.metadata.deletion_timestamp.is_none())
        .collect();
    let earlier_runs: Vec<String> = siblings
        .iter()
        .filter(|r| created(r) < created(&run))
        .map(|r| r.name_any())
        .collect();
    // A later run supersedes this one only once it has passed validation, so a run that can
    // never start does not stop one that is rolling out.
    let later_runs: Vec<String> = siblings
        .iter()
        .filter(|r| created(r) > created(&run) && (initialized(r) || waiting_for_previous(r)))
        .map(|r| r.name_any())
        .collect();

    let observed = Observed {
        run: &run,
        strategy: strategy.as_ref().map(|s| &s.spec),
        placement: placement.as_ref(),
        snapshot_exists,
        cluster_labels,
        unhealthy_members,
        bindings,
        works,
        approvals,
        earlier_runs,
        later_runs,
        now: ctx.clock.now(),
    };
    let plan = plan::plan(&observed);

    // Clusters a plan starts together are bound together; everything else in plan order.
    let mut actions = plan.actions.iter().peekable();
    while let Some(action) = actions.next() {
        if matches!(action, Action::Bind { .. }) {
            let mut binds = vec![action];
            while let Some(next) = actions.next_if(|a| matches!(a, Action::Bind { .. })) {
                binds.push(next);
            }
            for chunk in binds.chunks(BIND_CONCURRENCY) {
                let writes = chunk.iter().map(|a| perform(&ctx, &run, a));
                futures::future::join_all(writes)
                    .await
                    .into_iter()
                    .collect::<Result<Vec<()>, Error>>()?;
            }
        } else {
            perform(&ctx, &run, action).await?;
        }
    }
    if Some(&plan.status) != run.status.as_ref() {
        // Optimistic concurrency: the resourceVersion makes a write from a stale view fail.
        let patch = json!({
            "apiVersion": "fleethub.dev/v1alpha1",
            "kind": "UpdateRun",
            "metadata": {"name": name, "resourceVersion": run.metadata.resource_version},
            "status": plan.status,
        });
        let written = runs
            .patch_status(
                &name,
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(&patch),
            )
            .await;
        match written {
            Ok(w) => ctx.remember_written(&name, w.metadata.resource_version),
            Err(e) => {
                ctx.remember_written(&name, None);
                return Err(e.into());
            }
        }
    }
    for e in &plan.events {
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
        if let Err(err) = ctx.events.try_send((event, run.object_ref(&()))) {
            tracing::debug!(error = %err, "event backlog full; event dropped");
        }
        tracing::info!(reason = e.reason, "{}", e.message);
        if let Some(seconds) = e.seconds {
            let histogram = match e.reason {
                plan::reason::CLUSTER_SUCCEEDED => &ctx.metrics.cluster_update_seconds,
                plan::reason::STAGE_SUCCEEDED => &ctx.metrics.stage_seconds,
                plan::reason::APPROVAL_APPROVED => &ctx.metrics.approval_wait_seconds,
                _ => continue,
            };
            histogram.observe(seconds.max(0) as f64);
        }
    }
    Ok(match plan.requeue_after {
        Some(after) => Requeue::requeue(after),
        None => Requeue::await_change(),
    })
}

async fn perform(ctx: &Context, run: &UpdateRun, action: &Action) -> Result<(), Error> {
    let run_name = run.name_any();
    let placement = &run.spec.placement_name;
    match action {
        Action::Bind { cluster, index } => {
            let bindings: Api<Binding> = Api::all(ctx.client.clone());
            let name = names::binding_name(placement, cluster);
            let patch = json!({
                "apiVersion": "fleethub.dev/v1alpha1",
                "kind": "Binding",
                "metadata": {"name": name},
                "spec": {
                    "placementName": placement,
                    "targetCluster": cluster,
                    "state": "Bound",
                    "resourceSnapshotIndex": index,
                    "updateRunName": run_name,
                    "healthTimeout": run.spec.health_timeout,
                },
            });
            bindings
                .patch(
                    &name,
                    &PatchParams::apply(FIELD_MANAGER).force(),
                    &Patch::Apply(&patch),
                )
                .await?;
        }
        Action::CreateApproval { name, stage } => {
            let approvals: Api<ApprovalRequest> = Api::all(ctx.client.clone());
            let mut request = ApprovalRequest::new(
                name,
                ApprovalRequestSpec {
                    parent_stage_rollout: run_name.clone(),
                    target_stage: stage.clone(),
                },
            );
            request.metadata.labels = Some(BTreeMap::from([
                (names::UPDATE_RUN_LABEL.to_string(), run_name.clone()),
                (names::STAGE_LABEL.to_string(), stage.clone()),
            ]));
            // Deleting the run deletes its approval requests.
            request.metadata.owner_references = run.controller_owner_ref(&()).map(|o| vec![o]);
            ok_if(
                approvals.create(&PostParams::default(), &request).await,
                EXISTS,
            )?;
        }
        Action::AcceptApproval { name } => {
            let approvals: Api<ApprovalRequest> = Api::all(ctx.client.clone());
            let now = ctx.clock.now();
            let patch = json!({
                "apiVersion": "fleethub.dev/v1alpha1",
                "kind": "ApprovalRequest",
                "metadata": {"name": name},
                "status": {"conditions": [{
                    "type": APPROVAL_ACCEPTED,
                    "status": TRUE,
                    "reason": "ApprovalAccepted",
                    "message": format!("UpdateRun {run_name} accepted the approval and moves on"),
                    "lastTransitionTime": now.to_string(),
                }]},
            });
            approvals
                .patch_status(
                    name,
                    &PatchParams::apply(FIELD_MANAGER).force(),
                    &Patch::Apply(&patch),
                )
                .await?;
        }
        Action::Unbind { cluster } => {
            let bindings: Api<Binding> = Api::all(ctx.client.clone());
            ok_if(
                bindings
                    .delete(
                        &names::binding_name(placement, cluster),
                        &Default::default(),
                    )
                    .await,
                GONE,
            )?;
        }
    }
    Ok(())
}
