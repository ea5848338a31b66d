//! The plan's writes: Bindings pointed at the run's snapshot (never created), ApprovalRequests
//! created and accepted, Bindings of unselected clusters deleted, a failed run's rollback run
//! created.

use fleethub_crds::apply::StatusApply;
use fleethub_runtime::last_written::Newest;
use futures::TryStreamExt;

use super::*;

/// Performs the plan's writes in order; clusters a plan starts together are bound together.
pub(super) async fn act(ctx: &Context, run: &UpdateRun, actions: &[Action]) -> Result<(), Error> {
    let mut actions = actions.iter().peekable();
    while let Some(action) = actions.next() {
        if !matches!(action, Action::Bind { .. }) {
            perform(ctx, run, action).await?;
            continue;
        }
        let mut binds = vec![action];
        while let Some(next) = actions.next_if(|a| matches!(a, Action::Bind { .. })) {
            binds.push(next);
        }
        // Each write starts as soon as one in flight ends (no rounds waiting for the slowest).
        let writes: Vec<_> = binds.into_iter().map(|a| perform(ctx, run, a)).collect();
        futures::stream::iter(writes)
            .buffer_unordered(ctx.pacing.bind_concurrency)
            .try_collect::<Vec<()>>()
            .await?;
    }
    Ok(())
}

async fn perform(ctx: &Context, run: &UpdateRun, action: &Action) -> Result<(), Error> {
    let run_name = run.name_any();
    let placement = &run.spec.placement_name;
    let apply = PatchParams::apply(FIELD_MANAGER).force();
    match action {
        Action::Bind {
            cluster,
            resource_version,
            index,
            overrides: frozen,
        } => {
            let spec = BindingSpec {
                placement_name: placement.clone(),
                target_cluster: cluster.clone(),
                state: BindingState::Bound,
                resource_snapshot_index: Some(*index),
                update_run_name: Some(run_name),
                health_timeout: run.spec.health_timeout.clone(),
                cluster_resource_override_snapshots: frozen
                    .cluster_resource_override_snapshots
                    .clone(),
                resource_override_snapshots: frozen.resource_override_snapshots.clone(),
            };
            let name = names::binding_name(placement, cluster);
            if already_bound(ctx, &name, &spec) {
                // A plan made while an earlier plan's writes were in flight repeats them.
                return Ok(());
            }
            bind(ctx, &name, &spec, resource_version).await?;
        }
        Action::CreateApproval {
            name,
            stage,
            policy,
            index,
        } => {
            let cached = ctx.caches.approvals.get(&ObjectRef::new(name)).is_some();
            if ctx.recent.asked.recently(name, cached) {
                // Created by an earlier plan; the cache has not shown it to this one yet.
                return Ok(());
            }
            let approvals: Api<ApprovalRequest> = Api::all(ctx.io.client.clone());
            let mut request = ApprovalRequest::new(
                name,
                ApprovalRequestSpec {
                    parent_stage_rollout: run_name.clone(),
                    target_stage: stage.clone(),
                    policy: policy.clone(),
                    started_by: run.annotations().get(names::STARTED_BY_ANNOTATION).cloned(),
                    resource_snapshot_index: index.clone(),
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
            ctx.recent.asked.created(name);
        }
        Action::AcceptApproval { name } => {
            let approvals: Api<ApprovalRequest> = Api::all(ctx.io.client.clone());
            let status = ApprovalRequestStatus {
                conditions: vec![Condition {
                    type_: approval::APPROVAL_ACCEPTED.to_string(),
                    status: TRUE.to_string(),
                    reason: approval::ACCEPTED_REASON.to_string(),
                    message: format!("UpdateRun {run_name} accepted the approval and moves on"),
                    last_transition_time: Time(ctx.io.clock.now()),
                    observed_generation: None,
                }],
                ..Default::default()
            };
            let body = StatusApply::new::<ApprovalRequest>(name, None, &status);
            approvals
                .patch_status(name, &apply, &Patch::Apply(&body))
                .await?;
        }
        Action::Unbind { cluster } => {
            let bindings: Api<Binding> = Api::all(ctx.io.client.clone());
            let name = names::binding_name(placement, cluster);
            ok_if(bindings.delete(&name, &Default::default()).await, GONE)?;
        }
        Action::CreateRollbackRun {
            name,
            index,
            rollback,
        } => {
            // Not owned by the failed run: deleting it must not stop its rollback midway. It
            // belongs to what the failed run belongs to (an AutoUpdatePolicy, say), with its
            // labels.
            let mut body = UpdateRun::new(
                name,
                fleethub_crds::update_run::UpdateRunSpec {
                    placement_name: placement.clone(),
                    resource_snapshot_index: Some(index.to_string()),
                    staged_rollout_strategy_name: run.spec.staged_rollout_strategy_name.clone(),
                    state: None,
                    health_timeout: run.spec.health_timeout.clone(),
                    on_failure: Some(fleethub_crds::strategy::OnFailure::Hold),
                    rollback: Some(rollback.clone()),
                    bake: None,
                },
            );
            let mut labels = run.labels().clone();
            labels.insert(names::ROLLBACK_OF_LABEL.to_string(), run_name.clone());
            body.metadata.labels = Some(labels);
            body.metadata.owner_references = run.metadata.owner_references.clone();
            let runs: Api<UpdateRun> = Api::all(ctx.io.client.clone());
            ok_if(runs.create(&PostParams::default(), &body).await, EXISTS)?;
        }
    }
    Ok(())
}

/// Points an existing Binding at the run's snapshot, only if it is still the one the plan saw
/// (`resource_version`) or, read again after a conflict, still selects its cluster. A merge
/// patch, not an apply: it never creates a Binding (a placement deleted meanwhile, or a cluster
/// that left, stays unbound), and the resourceVersion makes a Binding the placement marked
/// Unscheduled meanwhile a conflict instead of a fight. Not bound: the next plan sees why.
async fn bind(
    ctx: &Context,
    name: &str,
    spec: &BindingSpec,
    resource_version: &str,
) -> Result<(), Error> {
    let bindings: Api<Binding> = Api::all(ctx.io.client.clone());
    let spec_json = run_fields(spec);
    let params = PatchParams {
        field_manager: Some(FIELD_MANAGER.to_string()),
        ..Default::default()
    };
    let mut version = resource_version.to_string();
    for attempt in 0..2 {
        let body = serde_json::json!({
            "metadata": {"resourceVersion": version},
            "spec": spec_json,
        });
        match bindings.patch(name, &params, &Patch::Merge(&body)).await {
            Ok(bound) => {
                ctx.recent.bound.record(name, bound);
                return Ok(());
            }
            Err(kube::Error::Api(s)) if s.code == GONE => return Ok(()),
            Err(kube::Error::Api(s)) if s.code == 409 && attempt == 0 => {}
            Err(e) => return Err(e.into()),
        }
        // Changed since the plan looked (its status, most often): bind it if it still
        // selects the cluster.
        match bindings.get_opt(name).await? {
            Some(b) if b.spec.state != BindingState::Unscheduled => {
                version = b.metadata.resource_version.unwrap_or_default();
            }
            _ => return Ok(()),
        }
    }
    Ok(())
}

/// Whether the newest copy of Binding `name` this process knows (the cache's, or the answer to
/// its own last bind) already carries everything `spec` sets.
fn already_bound(ctx: &Context, name: &str, spec: &BindingSpec) -> bool {
    let cached = ctx.caches.bindings.get(&ObjectRef::new(name));
    let Newest::Object(binding) = ctx.recent.bound.newest(name, cached) else {
        return false;
    };
    binding.metadata.deletion_timestamp.is_none() && run_fields(&binding.spec) == run_fields(spec)
}

/// Every field of a Binding's spec a run sets, absent ones as null (so a bind clears them).
fn run_fields(spec: &BindingSpec) -> serde_json::Value {
    serde_json::json!({
        "state": spec.state,
        "resourceSnapshotIndex": spec.resource_snapshot_index,
        "updateRunName": spec.update_run_name,
        "healthTimeout": spec.health_timeout,
        "clusterResourceOverrideSnapshots": spec.cluster_resource_override_snapshots,
        "resourceOverrideSnapshots": spec.resource_override_snapshots,
    })
}
