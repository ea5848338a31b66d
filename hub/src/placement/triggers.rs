//! What makes a placement reconcile besides its own changes: a change of a hub object it may
//! select (metadata watches of the kinds a workload is made of), and a change of what cluster
//! selection reads on a MemberCluster.

use std::sync::Arc;

use fleethub_crds::conditions::is_true;
use fleethub_crds::member_cluster::JOINED;
use fleethub_crds::{MemberCluster, PhasedRollout, Placement};
use futures::{StreamExt, stream};
use k8s_openapi::Resource as _;
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, StatefulSet};
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret, Service, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use kube::core::PartialObjectMeta;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};

use super::content_marks::ContentMarks;

/// Reconcile requests for the placements whose selected content changed, from metadata watches
/// of the kinds the hub watches (others are re-read every [`super::plan::RESYNC`]); each change
/// is also counted in `marks`.
pub fn content_changes(
    client: &Client,
    placements: &Store<Placement>,
    marks: &Arc<ContentMarks>,
) -> stream::BoxStream<'static, ObjectRef<Placement>> {
    let p = || placements.clone();
    let m = || marks.clone();
    stream::select_all(vec![
        watch_kind::<Namespace>(client, p(), m()),
        watch_kind::<ConfigMap>(client, p(), m()),
        watch_kind::<Secret>(client, p(), m()),
        watch_kind::<Service>(client, p(), m()),
        watch_kind::<ServiceAccount>(client, p(), m()),
        watch_kind::<Deployment>(client, p(), m()),
        watch_kind::<StatefulSet>(client, p(), m()),
        watch_kind::<DaemonSet>(client, p(), m()),
        watch_kind::<Job>(client, p(), m()),
        watch_kind::<CronJob>(client, p(), m()),
        watch_kind::<Role>(client, p(), m()),
        watch_kind::<RoleBinding>(client, p(), m()),
        watch_kind::<ClusterRole>(client, p(), m()),
        watch_kind::<ClusterRoleBinding>(client, p(), m()),
        // Placed with its StatefulSet: a new or changed PhasedRollout is a new snapshot at once.
        watch_kind::<PhasedRollout>(client, p(), m()),
    ])
    .boxed()
}

/// The placements whose snapshot may contain an object of `kind` named `name` (in `namespace`).
fn affected(
    placements: &Store<Placement>,
    kind: &str,
    namespace: Option<&str>,
    name: &str,
) -> Vec<ObjectRef<Placement>> {
    placements
        .state()
        .iter()
        .filter(|p| {
            p.spec.resource_selectors.iter().any(|s| {
                if s.kind == Namespace::KIND && s.group.is_empty() {
                    let ns = if kind == Namespace::KIND {
                        Some(name)
                    } else {
                        namespace
                    };
                    s.label_selector.is_some() || s.name.is_none() || s.name.as_deref() == ns
                } else {
                    namespace.is_none()
                        && s.kind == kind
                        && s.name.as_deref().is_none_or(|n| n == name)
                }
            })
        })
        .map(|p| ObjectRef::from_obj(p.as_ref()))
        .collect()
}

/// Reconcile requests for placements when objects of kind `K` change (metadata only is watched).
fn watch_kind<K>(
    client: &Client,
    placements: Store<Placement>,
    marks: Arc<ContentMarks>,
) -> stream::BoxStream<'static, ObjectRef<Placement>>
where
    K: fleethub_runtime::Watched,
{
    let kind = K::kind(&()).to_string();
    // Metadata only: which object changed is all that matters here.
    watcher(
        Api::<PartialObjectMeta<K>>::all(client.clone()),
        fleethub_runtime::watcher_config(),
    )
    .backoff(fleethub_runtime::watch_backoff())
    .touched_objects()
    .filter_map(|r| async move { r.ok() })
    .flat_map(move |meta| {
        let refs = affected(
            &placements,
            &kind,
            meta.metadata.namespace.as_deref(),
            &meta.name_any(),
        );
        for r in &refs {
            marks.changed(&r.name);
        }
        stream::iter(refs)
    })
    .boxed()
}

/// A filter of MemberCluster watch events that passes deletions and the changes of what
/// selection reads: every heartbeat changes a MemberCluster, and each one would otherwise
/// reconcile every placement. (The store is fed before the filter, so it sees every change.)
#[allow(clippy::type_complexity)]
pub fn selection_changes() -> impl FnMut(
    Result<watcher::Event<MemberCluster>, watcher::Error>,
) -> std::future::Ready<
    Option<Result<watcher::Event<MemberCluster>, watcher::Error>>,
> {
    let mut seen: std::collections::HashMap<String, u64> = Default::default();
    move |event| {
        let keep = match &event {
            Ok(watcher::Event::Delete(m)) => {
                seen.remove(&m.name_any());
                true
            }
            Ok(watcher::Event::Apply(m) | watcher::Event::InitApply(m)) => {
                let hash = selection_inputs(m).unwrap_or_default();
                seen.insert(m.name_any(), hash) != Some(hash)
            }
            Ok(watcher::Event::Init | watcher::Event::InitDone) | Err(_) => true,
        };
        std::future::ready(keep.then_some(event))
    }
}

/// What of a MemberCluster cluster selection depends on: its identity, labels, deletion and
/// `Joined`.
fn selection_inputs(member: &MemberCluster) -> Option<u64> {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    member.metadata.uid.hash(&mut h);
    member.labels().hash(&mut h);
    member.metadata.deletion_timestamp.is_some().hash(&mut h);
    member
        .status
        .as_ref()
        .is_some_and(|s| is_true(&s.conditions, JOINED))
        .hash(&mut h);
    Some(h.finish())
}
