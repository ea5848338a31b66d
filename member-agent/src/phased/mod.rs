//! Phased StatefulSet rollouts on the member: the PhasedRollout controller. Each reconcile reads
//! the rollout and its StatefulSet, asks the pure [`plan`] (querying Prometheus when a check is
//! due), writes the rollout's status, then sets or releases the StatefulSet's partition under
//! its own field manager. Triggered by changes of rollouts and of StatefulSets (a rolled pod's
//! progress shows in its StatefulSet's status); requeued for checks.

#[cfg(test)]
mod check_tests;
pub mod plan;
#[cfg(test)]
mod plan_tests;

use std::sync::Arc;
use std::time::Duration;

use fleethub_crds::PhasedRollout;
use fleethub_crds::apply::StatusApply;
use fleethub_crds::field_manager::PHASED_ROLLOUT as FIELD_MANAGER;
use fleethub_crds::metric_check::QueryOutcome;
use fleethub_runtime::prometheus::{Auth, Prometheus};
use futures::StreamExt;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use kube::{Api, Client, ResourceExt};
use tokio_util::sync::CancellationToken;

use crate::Error;
use crate::clock::Clock;
use plan::{Observed, PartitionAction, Plan, Query, StatefulSetView};

/// How often a rollout is looked at with nothing changing (a missed event heals by then).
const RESYNC: Duration = Duration::from_secs(60);

struct Context {
    member: Client,
    clock: Arc<dyn Clock>,
    prometheus: Prometheus,
}

/// Runs the controller until `shutdown`.
pub async fn run(member: Client, clock: Arc<dyn Clock>, shutdown: CancellationToken) {
    let prometheus = match Prometheus::new() {
        Ok(p) => p,
        Err(e) => {
            tracing::error!(error = %e, "cannot read the system's root certificates; phased rollouts are not run");
            return;
        }
    };
    let controller = fleethub_runtime::controller_for(Api::<PhasedRollout>::all(member.clone()));
    let rollouts = controller.store();
    let ctx = Arc::new(Context {
        member: member.clone(),
        clock,
        prometheus,
    });
    controller
        // A trigger of fleethub's (bounded, counted backoff; errors not passed to the
        // controller): kube's `watches` retries without a backoff.
        .watches_stream(
            fleethub_runtime::watch_stream(Api::<StatefulSet>::all(member)),
            move |sts: StatefulSet| {
                let ns = sts.namespace().unwrap_or_default();
                let name = sts.name_any();
                rollouts
                    .state()
                    .iter()
                    .filter(|r| r.namespace().as_deref() == Some(ns.as_str()))
                    .filter(|r| r.spec.target_ref == name)
                    .map(|r| ObjectRef::from_obj(r.as_ref()))
                    .collect::<Vec<_>>()
            },
        )
        .graceful_shutdown_on(shutdown.cancelled_owned())
        .run(reconcile, error_policy, ctx)
        .for_each(|result| async move {
            if let Err(e) = result {
                tracing::debug!(error = %e, "phased rollout reconcile");
            }
        })
        .await;
}

fn error_policy(rollout: Arc<PhasedRollout>, error: &Error, _: Arc<Context>) -> Action {
    tracing::warn!(
        phased_rollout = %format!("{}/{}", rollout.namespace().unwrap_or_default(), rollout.name_any()),
        error = %error,
        "phased rollout reconcile failed; retrying in 5s"
    );
    Action::requeue(Duration::from_secs(5))
}

/// The Secret the check names for its credentials (`check.secretRef.name` or
/// `check.query.secretRef`), read now from the rollout's own namespace on the member, so a
/// rotated credential is used from the next check on; `None` when the check names none or it
/// does not exist. An error names the Secret (the check then fails and the rollout holds).
async fn read_secret(ctx: &Context, query: &Query, ns: &str) -> Result<Option<Secret>, String> {
    let Some(name) = &query.secret_name else {
        return Ok(None);
    };
    Api::<Secret>::namespaced(ctx.member.clone(), ns)
        .get_opt(name)
        .await
        .map_err(|e| format!("reading Secret {ns}/{name} (the check's secretRef): {e}"))
}

/// Makes the check `query` asks for, with the credentials of its Secret as read (`None`: it
/// does not exist, or the check names none). A missing Secret, or one without usable keys,
/// fails the check with a message naming it, never a credential.
async fn check_once(
    prometheus: &Prometheus,
    ns: &str,
    query: &Query,
    secret: Option<&Secret>,
) -> QueryOutcome {
    let auth = match (&query.secret_name, secret) {
        (None, _) => None,
        (Some(name), None) => {
            return QueryOutcome::Error(format!(
                "Secret {ns}/{name} (the check's secretRef) does not exist"
            ));
        }
        (Some(name), Some(secret)) => match Auth::from_secret(secret) {
            Ok(auth) => Some(auth),
            Err(e) => return QueryOutcome::Error(format!("Secret {ns}/{name} {e}")),
        },
    };
    prometheus
        .query_with(&query.url, &query.query, auth.as_ref())
        .await
}

fn view(sts: &StatefulSet) -> StatefulSetView {
    let spec = sts.spec.clone().unwrap_or_default();
    let status = sts.status.clone().unwrap_or_default();
    let strategy = spec.update_strategy.unwrap_or_default();
    StatefulSetView {
        generation: sts.metadata.generation.unwrap_or(0),
        observed_generation: status.observed_generation.unwrap_or(0),
        replicas: spec.replicas.unwrap_or(1),
        on_delete: strategy.type_.as_deref() == Some("OnDelete"),
        partition: strategy.rolling_update.and_then(|r| r.partition),
        current_revision: status.current_revision,
        update_revision: status.update_revision,
        updated_replicas: status.updated_replicas.unwrap_or(0),
        available_replicas: status.available_replicas.unwrap_or(0),
    }
}

async fn reconcile(cached: Arc<PhasedRollout>, ctx: Arc<Context>) -> Result<Action, Error> {
    let ns = cached.namespace().unwrap_or_default();
    let name = cached.name_any();
    let key = format!("{ns}/{name}");
    let rollouts: Api<PhasedRollout> = Api::namespaced(ctx.member.clone(), &ns);
    let Some(rollout) = rollouts
        .get_opt(&name)
        .await
        .map_err(Error::member(format!("reading PhasedRollout {key}")))?
    else {
        return Ok(Action::await_change());
    };
    let sets: Api<StatefulSet> = Api::namespaced(ctx.member.clone(), &ns);
    let target = &rollout.spec.target_ref;
    let sts = sets
        .get_opt(target)
        .await
        .map_err(Error::member(format!("reading StatefulSet {ns}/{target}")))?
        .map(|s| view(&s));
    let status = rollout.status.clone().unwrap_or_default();
    let mut observed = Observed {
        namespace: &ns,
        generation: rollout.metadata.generation,
        spec: &rollout.spec,
        status: &status,
        statefulset: sts.as_ref(),
        now: ctx.clock.now(),
        outcome: None,
    };
    let mut decided = plan::plan(&observed);
    let outcome;
    if let Plan::Query(query) = &decided {
        outcome = match read_secret(&ctx, query, &ns).await {
            Ok(secret) => check_once(&ctx.prometheus, &ns, query, secret.as_ref()).await,
            Err(why) => QueryOutcome::Error(why),
        };
        observed.outcome = Some(&outcome);
        decided = plan::plan(&observed);
    }
    let Plan::Step {
        status: new_status,
        partition,
        recheck,
    } = decided
    else {
        // A plan given the query's outcome never asks again; were it to, look again soon.
        return Ok(Action::requeue(Duration::from_secs(1)));
    };
    if *new_status != status {
        let body = StatusApply::new::<PhasedRollout>(&name, Some(&ns), new_status.as_ref())
            .at_version(rollout.metadata.resource_version.clone());
        rollouts
            .patch_status(
                &name,
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(&body),
            )
            .await
            .map_err(Error::member(format!(
                "writing the status of PhasedRollout {key}"
            )))?;
    }
    let partition_body = match partition {
        PartitionAction::Keep => None,
        PartitionAction::Set(p) => Some(serde_json::json!({
            "apiVersion": "apps/v1", "kind": "StatefulSet",
            "metadata": {"name": target, "namespace": ns},
            "spec": {"updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"partition": p}}},
        })),
        // Applying nothing under the manager gives up every field it owned.
        PartitionAction::Release => Some(serde_json::json!({
            "apiVersion": "apps/v1", "kind": "StatefulSet",
            "metadata": {"name": target, "namespace": ns},
        })),
    };
    if let Some(body) = partition_body {
        tracing::info!(phased_rollout = %key, statefulset = %target, ?partition, "setting the partition");
        sets.patch(
            target,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&body),
        )
        .await
        .map_err(Error::member(format!(
            "setting the partition of StatefulSet {ns}/{target}"
        )))?;
    }
    let now = ctx.clock.now();
    let wait = recheck
        .map(|t| t.duration_since(now).try_into().unwrap_or_default())
        .map_or(RESYNC, |d: Duration| d.min(RESYNC));
    Ok(Action::requeue(wait.max(Duration::from_millis(100))))
}
