//! Cleaning up what the agent created, and only that.
//!
//! For every Work the agent keeps an `AppliedWork` on the member (cluster-scoped, named after the
//! Work's namespace and name). Each object the agent *creates* for the Work gets an ownerReference
//! to it; an object that existed before is applied but never owned. So:
//! - when a manifest leaves the Work, the agent deletes its object if the AppliedWork owns it,
//!   and leaves it otherwise (the AppliedWork's status lists what was applied, so the agent knows
//!   which objects left);
//! - when the Work is deleted, the agent deletes the AppliedWork with foreground propagation: the
//!   member's own garbage collector deletes every object it owns, then the AppliedWork goes. A
//!   finalizer on the Work makes the agent see the deletion even if it was down at the time; it
//!   is removed once the AppliedWork is gone.
//! - an AppliedWork whose Work is gone from the hub without that clean-up (its finalizer removed
//!   by force, or a Work created and deleted before the agent could add it) is an orphan: the
//!   agent's periodic sweep deletes it, and with it what it owns.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use fleethub_crds::Work;
use fleethub_crds::applied_work::{
    AppliedResource, AppliedWork, AppliedWorkStatus, WORK_NAMESPACE_LABEL, applied_work_name,
};
use fleethub_crds::field_manager::MEMBER_AGENT;
use fleethub_crds::work::CLEANUP_FINALIZER;
use fleethub_crds::work::ManifestIdentifier;
use kube::api::{
    ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, Preconditions,
};
use kube::runtime::controller::Action;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Api, Resource, ResourceExt};
use serde_json::json;

use crate::Error;
use crate::apply::ManifestOutcome;
use crate::apply_order::{OrderKey, delete_order};
use crate::context::Context;
use crate::error::is_not_found;
use crate::last_written::Newest;
use crate::manifest::{describe, owned_by};
use crate::metrics::request;

/// How long to wait before looking again at an AppliedWork being deleted (its deletion is also
/// watched; this is only a safety net).
const DELETION_RECHECK: Duration = Duration::from_secs(30);

/// How old an AppliedWork must be before a missing Work makes it an orphan: the agent creates it
/// right after it first sees the Work, so a younger one may belong to a Work its cache has not
/// caught up with.
const ORPHAN_GRACE: Duration = Duration::from_secs(10);

/// Deletes this agent's AppliedWorks whose Work no longer exists on the hub (foreground: the
/// member's garbage collector deletes what they own first). The hub is asked before anything is
/// deleted; an error reaching it deletes nothing. Returns how many were deleted.
pub async fn sweep_orphans(ctx: &Context, works: &Store<Work>) -> Result<usize, Error> {
    let api: Api<AppliedWork> = Api::all(ctx.member.clone());
    let ours = ListParams::default().labels(&format!("{WORK_NAMESPACE_LABEL}={}", ctx.namespace));
    let list = api
        .list(&ours)
        .await
        .map_err(Error::member("listing AppliedWorks".to_string()))?;
    let hub: Api<Work> = Api::namespaced(ctx.hub.clone(), &ctx.namespace);
    let now = ctx.clock.now();
    let mut deleted = 0;
    for aw in list.items {
        let work = &aw.spec.work_name;
        let young = aw
            .metadata
            .creation_timestamp
            .as_ref()
            .is_none_or(|t| now.duration_since(t.0).unsigned_abs() < ORPHAN_GRACE);
        if aw.metadata.deletion_timestamp.is_some()
            || young
            || works
                .get(&ObjectRef::new(work).within(&ctx.namespace))
                .is_some()
        {
            continue;
        }
        let key = format!("{}/{work}", ctx.namespace);
        let exists = hub
            .get_opt(work)
            .await
            .map_err(Error::hub(format!("reading Work {key}")))?;
        if exists.is_some() {
            continue;
        }
        let name = aw.name_any();
        match api.delete(&name, &DeleteParams::foreground()).await {
            Ok(_) => deleted += 1,
            Err(e) if is_not_found(&e) => {}
            Err(e) => return Err(Error::member(format!("deleting AppliedWork {name}"))(e)),
        }
        tracing::warn!(work = %key, applied_work = %name, "the Work is gone from the hub without the agent's clean-up: deleting its AppliedWork and every object the agent created for it");
    }
    Ok(deleted)
}

/// What the AppliedWork's status should list, and which recorded objects left the Work.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PrunePlan {
    /// Objects of the Work's manifests: freshly applied, or (when applying failed this time)
    /// as recorded before.
    pub keep: Vec<AppliedResource>,
    /// Recorded objects whose manifest is no longer in the Work.
    pub stale: Vec<AppliedResource>,
}

type Key<'a> = (&'a str, &'a str, Option<&'a str>, &'a str);

fn identifier_key(id: &ManifestIdentifier) -> Key<'_> {
    (&id.group, &id.kind, id.namespace.as_deref(), &id.name)
}

/// Plans the pruning. `manifests` are the Work's manifests (with the namespace they are applied
/// into) and, for those applied now, what was applied. Objects are the same object whatever API
/// version they are applied with.
pub fn prune_plan(
    previous: &[AppliedResource],
    manifests: &[(&ManifestIdentifier, Option<&AppliedResource>)],
) -> PrunePlan {
    let in_work: BTreeSet<Key<'_>> = manifests.iter().map(|(id, _)| identifier_key(id)).collect();
    let mut keep: Vec<AppliedResource> = Vec::new();
    for &(id, applied) in manifests {
        let key = identifier_key(id);
        let entry = applied.or_else(|| previous.iter().find(|p| p.key() == key));
        if let Some(entry) = entry
            && !keep.iter().any(|k| k.key() == entry.key())
        {
            keep.push(entry.clone());
        }
    }
    let stale = previous
        .iter()
        .filter(|p| !in_work.contains(&p.key()))
        .cloned()
        .collect();
    PrunePlan { keep, stale }
}

/// Adds the agent's finalizer to `work` unless it is there.
/// Returns the Work as it is now (patched, or as given when it had the finalizer): the version
/// later writes of this reconcile are conditional on.
pub async fn ensure_finalizer(work: Arc<Work>, ctx: &Context) -> Result<Arc<Work>, Error> {
    if work.finalizers().iter().any(|f| f == CLEANUP_FINALIZER) {
        return Ok(work);
    }
    let mut finalizers = work.finalizers().to_vec();
    finalizers.push(CLEANUP_FINALIZER.to_string());
    let patched = patch_finalizers(&work, finalizers, ctx, "adding").await?;
    Ok(Arc::new(patched))
}

async fn patch_finalizers(
    work: &Work,
    finalizers: Vec<String>,
    ctx: &Context,
    doing: &str,
) -> Result<Work, Error> {
    let api: Api<Work> = Api::namespaced(ctx.hub.clone(), &ctx.namespace);
    // The resourceVersion makes this a compare-and-swap: never drop another controller's finalizer.
    let patch = json!({"metadata": {
        "finalizers": finalizers,
        "resourceVersion": work.resource_version(),
    }});
    let params = PatchParams {
        field_manager: Some(MEMBER_AGENT.to_string()),
        ..PatchParams::default()
    };
    let patched = api
        .patch(&work.name_any(), &params, &Patch::Merge(&patch))
        .await
        .map_err(Error::hub(format!(
            "{doing} finalizer {CLEANUP_FINALIZER} on Work {}/{}",
            ctx.namespace,
            work.name_any()
        )))?;
    if patched.finalizers().iter().any(|f| f == CLEANUP_FINALIZER) {
        ctx.written_works.record(&work.name_any(), patched.clone());
    } else {
        // The Work may be gone with its last finalizer; the cache tells when it is not.
        ctx.written_works.forget(&work.name_any());
    }
    Ok(patched)
}

/// Whether AppliedWork `aw` is as the agent applies it for Work `work_name` of hub namespace
/// `namespace` (spec and label), so that applying it again would change nothing.
pub fn is_as_applied(aw: &AppliedWork, namespace: &str, work_name: &str) -> bool {
    aw.spec.work_namespace == namespace
        && aw.spec.work_name == work_name
        && aw.labels().get(WORK_NAMESPACE_LABEL).map(String::as_str) == Some(namespace)
}

/// Creates (or keeps) the Work's AppliedWork on the member and returns it, with its status.
/// When the cache (or the agent's last write of it) has it as it should be, that copy is
/// returned and nothing is sent.
pub async fn ensure_applied_work(work: &Work, ctx: &Context) -> Result<Arc<AppliedWork>, Error> {
    let name = applied_work_name(&ctx.namespace, &work.name_any());
    let cached = ctx.applied_works.get(&ObjectRef::new(&name));
    if let Newest::Object(aw) = ctx.written_applied_works.newest(&name, cached)
        && (aw.metadata.deletion_timestamp.is_some()
            || is_as_applied(&aw, &ctx.namespace, &work.name_any()))
    {
        return Ok(aw);
    }
    let body = json!({
        "apiVersion": AppliedWork::api_version(&()),
        "kind": AppliedWork::kind(&()),
        "metadata": {"name": name, "labels": {WORK_NAMESPACE_LABEL: ctx.namespace}},
        "spec": {"workNamespace": ctx.namespace, "workName": work.name_any()},
    });
    let api: Api<AppliedWork> = Api::all(ctx.member.clone());
    ctx.metrics.work_request(request::APPLY_APPLIED_WORK);
    let applied = api
        .patch(
            &name,
            &PatchParams::apply(MEMBER_AGENT).force(),
            &Patch::Apply(&body),
        )
        .await
        .map_err(Error::member(format!("applying AppliedWork {name}")))?;
    ctx.written_applied_works.record(&name, applied.clone());
    Ok(Arc::new(applied))
}

/// Deletes the objects of manifests that left the Work (those the AppliedWork owns) and records
/// what is applied in the AppliedWork's status. Objects whose deletion failed stay recorded, and
/// the error names them.
pub async fn prune(
    applied_work: &AppliedWork,
    outcomes: &[ManifestOutcome],
    ctx: &Context,
) -> Result<(), Error> {
    let aw_name = applied_work.name_any();
    let work = format!("{}/{}", ctx.namespace, applied_work.spec.work_name);
    let previous = applied_work
        .status
        .as_ref()
        .map(|s| s.applied_resources.as_slice())
        .unwrap_or_default();
    let manifests: Vec<_> = outcomes
        .iter()
        .map(|o| (&o.identifier, o.result.as_ref().ok().map(|a| &a.resource)))
        .collect();
    let PrunePlan { mut keep, stale } = prune_plan(previous, &manifests);

    let order_keys: Vec<OrderKey<'_>> = stale
        .iter()
        .map(|r| OrderKey {
            group: &r.group,
            kind: &r.kind,
            namespaced: r.namespace.is_some(),
        })
        .collect();
    let mut failures = Vec::new();
    for i in delete_order(&order_keys) {
        let resource = &stale[i];
        if let Err(e) = delete_if_owned(resource, &aw_name, &work, ctx).await {
            failures.push(e.to_string());
            keep.push(resource.clone());
        }
    }

    if keep != previous {
        let api: Api<AppliedWork> = Api::all(ctx.member.clone());
        let body = json!({
            "apiVersion": AppliedWork::api_version(&()),
            "kind": AppliedWork::kind(&()),
            "metadata": {"name": aw_name},
            "status": AppliedWorkStatus { applied_resources: keep },
        });
        ctx.metrics.work_request(request::WRITE_APPLIED_WORK_STATUS);
        let written = api
            .patch_status(
                &aw_name,
                &PatchParams::apply(MEMBER_AGENT).force(),
                &Patch::Apply(&body),
            )
            .await
            .map_err(Error::member(format!(
                "writing the status of AppliedWork {aw_name}"
            )))?;
        ctx.written_applied_works.record(&aw_name, written);
    }
    if failures.is_empty() {
        Ok(())
    } else {
        Err(Error::Prune {
            work,
            failures: failures.join("; "),
        })
    }
}

/// Deletes the object `resource` names if the AppliedWork `applied_work` owns it.
async fn delete_if_owned(
    resource: &AppliedResource,
    applied_work: &str,
    work: &str,
    ctx: &Context,
) -> Result<(), Error> {
    let api_version = if resource.group.is_empty() {
        resource.version.clone()
    } else {
        format!("{}/{}", resource.group, resource.version)
    };
    let ar = ApiResource {
        group: resource.group.clone(),
        version: resource.version.clone(),
        api_version,
        kind: resource.kind.clone(),
        plural: resource.resource.clone(),
    };
    let api: Api<DynamicObject> = match &resource.namespace {
        Some(ns) => Api::namespaced_with(ctx.member.clone(), ns, &ar),
        None => Api::all_with(ctx.member.clone(), &ar),
    };
    let object = describe(
        &resource.kind,
        resource.namespace.as_deref(),
        &resource.name,
    );
    let Some(current) = api
        .get_opt(&resource.name)
        .await
        .map_err(Error::member(format!("reading {object}")))?
    else {
        return Ok(());
    };
    if !owned_by(current.owner_references(), applied_work) {
        tracing::info!(%work, %object, "manifest left the Work; the object existed before the agent applied it, so it stays");
        return Ok(());
    }
    let params = DeleteParams {
        // Only the object the agent saw, not one re-created under the same name since.
        preconditions: Some(Preconditions {
            uid: current.metadata.uid.clone(),
            resource_version: None,
        }),
        ..DeleteParams::background()
    };
    match api.delete(&resource.name, &params).await {
        Ok(_) => {
            ctx.metrics.deletion(true);
            tracing::info!(%work, %object, "deleted: its manifest left the Work");
            Ok(())
        }
        Err(e) if is_not_found(&e) => Ok(()),
        Err(e) => {
            ctx.metrics.deletion(false);
            Err(Error::member(format!("deleting {object}"))(e))
        }
    }
}

/// Handles a Work being deleted: deletes its AppliedWork (foreground, so the member's garbage
/// collector removes what the agent created first), and removes the finalizer once it is gone.
pub async fn finalize(work: &Work, ctx: &Context) -> Result<Action, Error> {
    if !work.finalizers().iter().any(|f| f == CLEANUP_FINALIZER) {
        return Ok(Action::await_change());
    }
    let key = format!("{}/{}", ctx.namespace, work.name_any());
    let name = applied_work_name(&ctx.namespace, &work.name_any());
    let api: Api<AppliedWork> = Api::all(ctx.member.clone());
    let current = api
        .get_opt(&name)
        .await
        .map_err(Error::member(format!("reading AppliedWork {name}")))?;
    match current {
        Some(aw) => {
            if aw.metadata.deletion_timestamp.is_none() {
                match api.delete(&name, &DeleteParams::foreground()).await {
                    Ok(_) => {}
                    Err(e) if is_not_found(&e) => {}
                    Err(e) => {
                        return Err(Error::member(format!("deleting AppliedWork {name}"))(e));
                    }
                }
                tracing::info!(work = %key, applied_work = %name, "Work deleted: deleting its AppliedWork and, through it, every object the agent created");
            } else {
                tracing::info!(work = %key, applied_work = %name, "waiting for the member's garbage collector to delete what the AppliedWork owns");
            }
            // The AppliedWork's deletion is watched; this is a safety net.
            Ok(Action::requeue(DELETION_RECHECK))
        }
        None => {
            ctx.written_applied_works.forget(&name);
            let finalizers = work
                .finalizers()
                .iter()
                .filter(|f| *f != CLEANUP_FINALIZER)
                .cloned()
                .collect();
            patch_finalizers(work, finalizers, ctx, "removing").await?;
            tracing::info!(work = %key, "cleaned up on the member; finalizer removed");
            Ok(Action::await_change())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(ordinal: i32, kind: &str, namespace: Option<&str>, name: &str) -> ManifestIdentifier {
        ManifestIdentifier {
            ordinal,
            group: String::new(),
            version: "v1".into(),
            kind: kind.into(),
            namespace: namespace.map(str::to_string),
            name: name.into(),
        }
    }

    fn res(kind: &str, namespace: Option<&str>, name: &str, version: &str) -> AppliedResource {
        AppliedResource {
            group: String::new(),
            version: version.into(),
            kind: kind.into(),
            resource: format!("{}s", kind.to_lowercase()),
            namespace: namespace.map(str::to_string),
            name: name.into(),
        }
    }

    #[test]
    fn removed_manifests_are_stale_and_failed_ones_keep_their_record() {
        let previous = vec![
            res("Namespace", None, "app", "v1"),
            res("ConfigMap", Some("app"), "a", "v1"),
            res("ConfigMap", Some("app"), "b", "v1"),
            res("Secret", Some("app"), "s", "v1"),
        ];
        let (ns_id, a_id, s_id, new_id) = (
            id(0, "Namespace", None, "app"),
            id(1, "ConfigMap", Some("app"), "a"),
            id(2, "Secret", Some("app"), "s"),
            id(3, "ConfigMap", Some("app"), "new"),
        );
        let ns_applied = res("Namespace", None, "app", "v1");
        let a_applied = res("ConfigMap", Some("app"), "a", "v2");
        let new_applied = res("ConfigMap", Some("app"), "new", "v1");
        let plan = prune_plan(
            &previous,
            &[
                (&ns_id, Some(&ns_applied)),
                (&a_id, Some(&a_applied)),
                // Failed to apply this time: keeps its previous record, is not stale.
                (&s_id, None),
                (&new_id, Some(&new_applied)),
            ],
        );
        assert_eq!(
            plan.keep,
            vec![
                ns_applied.clone(),
                a_applied.clone(),
                res("Secret", Some("app"), "s", "v1"),
                new_applied.clone()
            ]
        );
        assert_eq!(plan.stale, vec![res("ConfigMap", Some("app"), "b", "v1")]);
    }

    #[test]
    fn nothing_recorded_nothing_stale() {
        let a = id(0, "ConfigMap", Some("app"), "a");
        let plan = prune_plan(&[], &[(&a, None)]);
        assert_eq!(plan, PrunePlan::default());

        let everything_removed = prune_plan(&[res("ConfigMap", Some("app"), "a", "v1")], &[]);
        assert!(everything_removed.keep.is_empty());
        assert_eq!(everything_removed.stale.len(), 1);
    }

    #[test]
    fn an_applied_work_is_applied_again_only_when_it_is_not_as_applied() {
        let aw = |ns: &str, work: &str, label: Option<&str>| AppliedWork {
            metadata: kube::api::ObjectMeta {
                name: Some(applied_work_name(ns, work)),
                labels: label.map(|l| [(WORK_NAMESPACE_LABEL.to_string(), l.to_string())].into()),
                ..Default::default()
            },
            spec: fleethub_crds::applied_work::AppliedWorkSpec {
                work_namespace: ns.into(),
                work_name: work.into(),
            },
            status: None,
        };
        let ns = "fleet-member-a";
        assert!(is_as_applied(&aw(ns, "web", Some(ns)), ns, "web"));
        // Its label removed (its watch would lose it too), or its spec changed by hand.
        assert!(!is_as_applied(&aw(ns, "web", None), ns, "web"));
        assert!(!is_as_applied(&aw(ns, "web", Some("other")), ns, "web"));
        assert!(!is_as_applied(&aw(ns, "api", Some(ns)), ns, "web"));
        assert!(!is_as_applied(&aw("other", "web", Some(ns)), ns, "web"));
    }

    #[test]
    fn duplicate_manifests_are_recorded_once() {
        let a0 = id(0, "ConfigMap", Some("app"), "a");
        let a1 = id(1, "ConfigMap", Some("app"), "a");
        let applied = res("ConfigMap", Some("app"), "a", "v1");
        let plan = prune_plan(&[], &[(&a0, Some(&applied)), (&a1, Some(&applied))]);
        assert_eq!(plan.keep, vec![applied]);
    }
}
