//! The work generator: turns each Bound Binding into the Work its member applies — the manifests
//! of the snapshot the binding points at, in namespace `fleet-member-<cluster>` — and rolls the
//! member's report on that Work up into the Binding's status.

use std::sync::Arc;
use std::time::Duration;

use fleethub_crds::binding::BindingState;
use fleethub_crds::conditions::{FALSE, NewCondition, TRUE, find, set_condition};
use fleethub_crds::work::{APPLIED, AVAILABLE, WorkStatus};
use fleethub_crds::{Binding, ResourceSnapshot, Work, names};
use futures::StreamExt;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry;
use kube::api::{Patch, PatchParams};
use kube::runtime::controller::Action as Requeue;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::{Api, Client, Resource, ResourceExt};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::Error;
use crate::clock::Clock;
use crate::error::{GONE, ok_if};
use crate::metrics::Metrics;
use fleethub_runtime::CACHE_WAIT;

/// Field manager of every write this controller makes.
pub const FIELD_MANAGER: &str = "fleethub/work-generator";
/// Binding condition: the Work carries the snapshot the binding points at.
pub const WORK_SYNCHRONIZED: &str = "WorkSynchronized";

struct Context {
    client: Client,
    clock: Arc<dyn Clock>,
    /// Every Work, kept current by the watch that also triggers the Works' Bindings.
    works: Store<Work>,
}

/// Whether `work` already is what this controller would apply for `index` and `timeout`, so
/// that a reconcile after a member's report (most of them, and every Binding after a hub
/// restart) makes no request to read the snapshot or write the Work. The Work's managed fields
/// say who wrote its spec: only this controller may have (the agent writes the status and a
/// finalizer); anyone else's edit of the spec makes it stale, and the apply takes it back.
fn up_to_date(work: &Work, index: i64, timeout: &Option<String>) -> bool {
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
        .partition(|e| e.manager.as_deref() == Some(FIELD_MANAGER));
    work.spec.resource_snapshot_index == index
        && work.spec.health_timeout == *timeout
        && work.metadata.deletion_timestamp.is_none()
        && !ours.is_empty()
        && others.is_empty()
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
    let ctx = Arc::new(Context {
        client: client.clone(),
        clock,
        works,
    });
    fleethub_runtime::controller_for(Api::<Binding>::all(client.clone()))
        .owns_stream(fleethub_runtime::reflected_stream(
            Api::<Work>::all(client),
            works_writer,
        ))
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
    let cluster = &binding.spec.target_cluster;
    let placement = &binding.spec.placement_name;
    let namespace = names::member_namespace(cluster);
    let work_name = names::work_name(placement);
    let works: Api<Work> = Api::namespaced(ctx.client.clone(), &namespace);
    // The Work from the cache; while the cache is still listing (right after a (re)start), from
    // the API server: a Work missing from a cache being filled would look unreported.
    let cached: Option<Arc<Work>> =
        match fleethub_runtime::ready_within(CACHE_WAIT, ctx.works.wait_until_ready()).await {
            true => ctx
                .works
                .get(&ObjectRef::new(&work_name).within(&namespace)),
            false => works.get_opt(&work_name).await?.map(Arc::new),
        };
    let cached_generation = cached.as_ref().and_then(|w| w.metadata.generation);
    let mut work = cached;
    let synchronized = |index: i64| {
        (
            "WorkSynchronized",
            TRUE,
            format!("Work {namespace}/{work_name} carries resource snapshot {index}"),
        )
    };
    let mut sync: (&str, &str, String) =
        ("Scheduled", FALSE, "no snapshot is bound yet".to_string());
    let mut requeue = Requeue::await_change();

    match (binding.spec.state, binding.spec.resource_snapshot_index) {
        (BindingState::Bound, Some(index))
            if work
                .as_ref()
                .is_some_and(|w| up_to_date(w, index, &binding.spec.health_timeout)) =>
        {
            sync = synchronized(index);
        }
        (BindingState::Bound, Some(index)) => {
            match snapshot_manifests(&ctx.client, placement, index as u64).await? {
                None => {
                    sync = (
                        "SnapshotNotFound",
                        FALSE,
                        format!(
                            "ResourceSnapshot {} does not exist",
                            names::resource_snapshot_name(placement, index as u64)
                        ),
                    );
                }
                Some(manifests) => {
                    let health_timeout = binding.spec.health_timeout.clone();
                    let owner = binding.controller_owner_ref(&());
                    let patch = json!({
                        "apiVersion": "fleethub.dev/v1alpha1",
                        "kind": "Work",
                        "metadata": {
                            "name": work_name,
                            "namespace": namespace,
                            "labels": {names::PLACEMENT_LABEL: placement, names::CLUSTER_LABEL: cluster},
                            "ownerReferences": owner.map(|o| vec![o]).unwrap_or_default(),
                        },
                        "spec": {
                            "placementName": placement,
                            "resourceSnapshotIndex": index,
                            "healthTimeout": health_timeout,
                            "workload": {"manifests": manifests},
                        },
                    });
                    match works
                        .patch(
                            &work_name,
                            &PatchParams::apply(FIELD_MANAGER).force(),
                            &Patch::Apply(&patch),
                        )
                        .await
                    {
                        Ok(applied) => {
                            if cached_generation != applied.metadata.generation {
                                tracing::info!(work = %work_key(&applied), index, "Work now carries resource snapshot {index}");
                            }
                            work = Some(Arc::new(applied));
                            sync = synchronized(index);
                        }
                        Err(kube::Error::Api(e)) if e.code == 404 => {
                            sync = (
                                "MemberNamespaceMissing",
                                FALSE,
                                format!(
                                    "namespace {namespace} does not exist yet: is MemberCluster {cluster} registered?"
                                ),
                            );
                            requeue = Requeue::requeue(Duration::from_secs(10));
                        }
                        Err(e) => return Err(e.into()),
                    }
                }
            }
        }
        (BindingState::Unscheduled, _) => {
            ok_if(works.delete(&work_name, &Default::default()).await, GONE)?;
            work = None;
            sync = (
                "Unscheduled",
                FALSE,
                format!("cluster {cluster} is no longer selected; its Work is removed"),
            );
        }
        _ => {}
    }

    // Roll the member's report up into the binding, from the cache (or the Work just
    // applied): the member's next report is a Work change that triggers this again.
    let work_generation = work.as_ref().and_then(|w| w.metadata.generation);
    let work_status: WorkStatus = work.and_then(|w| w.status.clone()).unwrap_or_default();
    let now = ctx.clock.now();
    let generation = binding.metadata.generation;
    let mut status = binding.status.clone().unwrap_or_default();
    set_condition(
        &mut status.conditions,
        NewCondition::new(WORK_SYNCHRONIZED, sync.1, sync.0, sync.2, generation),
        now,
    );
    for type_ in [APPLIED, AVAILABLE] {
        // Only a report on the Work as it is now counts: right after a new snapshot, the
        // member's last report still describes the previous one.
        let current = find(&work_status.conditions, type_)
            .filter(|c| c.observed_generation == work_generation);
        let new = match current {
            Some(c) => NewCondition::new(
                type_,
                if c.status == TRUE { TRUE } else { FALSE },
                if c.status == TRUE {
                    "MemberReported"
                } else {
                    "MemberReportedNotReady"
                },
                c.message.clone(),
                generation,
            ),
            None => NewCondition::new(
                type_,
                FALSE,
                "NotReported",
                "the member has not reported on its Work yet".to_string(),
                generation,
            ),
        };
        set_condition(&mut status.conditions, new, now);
    }
    status.applied_resource_snapshot_index = work_status.applied_resource_snapshot_index;
    if Some(&status) != binding.status.as_ref() {
        let patch = json!({
            "apiVersion": "fleethub.dev/v1alpha1",
            "kind": "Binding",
            "metadata": {"name": binding.name_any()},
            "status": status,
        });
        Api::<Binding>::all(ctx.client.clone())
            .patch_status(
                &binding.name_any(),
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(&patch),
            )
            .await?;
    }
    Ok(requeue)
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
            FIELD_MANAGER,
            "",
            json!({"f:spec": {"f:resourceSnapshotIndex": {}}}),
        );
        let agent_finalizer = entry(
            "fleethub/member-agent",
            "",
            json!({"f:metadata": {"f:finalizers": {}}}),
        );
        let agent_status = entry(
            "fleethub/member-agent",
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

        assert!(up_to_date(&work(3, Some("30s"), all(vec![])), 3, &timeout));
        // Another index or health timeout: apply.
        assert!(!up_to_date(&work(2, Some("30s"), all(vec![])), 3, &timeout));
        assert!(!up_to_date(&work(3, None, all(vec![])), 3, &timeout));
        // Someone else edited the spec: apply, which takes it back.
        assert!(!up_to_date(
            &work(3, Some("30s"), all(vec![edit])),
            3,
            &timeout
        ));
        // Not written by this controller at all (e.g. created by hand): apply.
        let theirs = vec![
            agent_finalizer.clone(),
            entry("kubectl", "", json!({"f:spec": {}})),
        ];
        assert!(!up_to_date(&work(3, Some("30s"), theirs), 3, &timeout));
    }
}
