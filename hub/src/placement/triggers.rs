//! What makes a placement reconcile besides its own changes: a change of a hub object it may
//! select (metadata watches of the kinds a workload is made of), and a change of what cluster
//! selection reads on a MemberCluster.

use std::sync::Arc;

use fleethub_crds::conditions::find;
use fleethub_crds::member_cluster::{HEALTHY, JOINED};
use fleethub_crds::{MemberCluster, PhasedRollout, Placement};
use futures::{StreamExt, stream};
use k8s_openapi::Resource as _;
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, StatefulSet};
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret, Service, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
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
    let mut seen = ContentVersions::default();
    // Metadata only: which object changed is all that matters here.
    watcher(
        Api::<PartialObjectMeta<K>>::all(client.clone()),
        fleethub_runtime::watcher_config(),
    )
    .backoff(fleethub_runtime::watch_backoff(&kind))
    .inspect(fleethub_runtime::list_timer::<PartialObjectMeta<K>>())
    .filter_map(move |event| {
        let changed = match event {
            Ok(watcher::Event::Apply(m) | watcher::Event::InitApply(m)) => {
                seen.changed(&m.metadata).then_some(m)
            }
            Ok(watcher::Event::Delete(m)) => {
                seen.deleted(&m.metadata);
                Some(m)
            }
            Ok(watcher::Event::Init | watcher::Event::InitDone) | Err(_) => None,
        };
        std::future::ready(changed)
    })
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

/// What of each watched object's metadata says whether its content (what a snapshot holds: no
/// status) changed. An object with a generation (a Deployment, a StatefulSet) changes its
/// content only by its spec, which moves its generation, or by its labels, annotations,
/// finalizers or owners; every other change is its status (a hub Deployment's controller
/// updates it several times per rollout), and reconciling its placements for it cost a gather
/// of every selected kind each time. An object without one (a ConfigMap) has no status: every
/// change counts.
#[derive(Default)]
struct ContentVersions(std::collections::HashMap<(Option<String>, String), u64>);

impl ContentVersions {
    /// Whether `meta` is a change of content since the last one seen of that object.
    fn changed(&mut self, meta: &ObjectMeta) -> bool {
        use std::hash::{Hash, Hasher};
        let key = (
            meta.namespace.clone(),
            meta.name.clone().unwrap_or_default(),
        );
        let Some(generation) = meta.generation.filter(|g| *g > 0) else {
            self.0.remove(&key);
            return true;
        };
        let mut h = std::collections::hash_map::DefaultHasher::new();
        meta.uid.hash(&mut h);
        generation.hash(&mut h);
        meta.labels.hash(&mut h);
        // Not the annotations a snapshot drops: the hub's Deployment controller moves one with
        // each rollout, and each was a gather (about 25 lists) that found nothing new, while
        // the rollout's reports were on their way to the same API server.
        for (key, value) in meta.annotations.iter().flatten() {
            if !super::content::DROPPED_ANNOTATIONS.contains(&key.as_str()) {
                (key, value).hash(&mut h);
            }
        }
        meta.finalizers.hash(&mut h);
        meta.deletion_timestamp.is_some().hash(&mut h);
        for owner in meta.owner_references.iter().flatten() {
            owner.uid.hash(&mut h);
        }
        let hash = h.finish();
        self.0.insert(key, hash) != Some(hash)
    }

    /// Forgets a deleted object.
    fn deleted(&mut self, meta: &ObjectMeta) {
        self.0.remove(&(
            meta.namespace.clone(),
            meta.name.clone().unwrap_or_default(),
        ));
    }
}

/// A filter of MemberCluster watch events that passes deletions and the changes of what
/// `inputs` fingerprints: every heartbeat changes a MemberCluster, and each one would otherwise
/// reconcile whatever the members' watch triggers (every placement, every Binding of the
/// member). The store is fed before the filter, so it sees every change.
#[allow(clippy::type_complexity)]
pub fn member_changes(
    inputs: fn(&MemberCluster) -> u64,
) -> impl FnMut(
    Result<watcher::Event<MemberCluster>, watcher::Error>,
) -> std::future::Ready<Option<Result<watcher::Event<MemberCluster>, watcher::Error>>> {
    let mut seen: std::collections::HashMap<String, u64> = Default::default();
    move |event| {
        let keep = match &event {
            Ok(watcher::Event::Delete(m)) => {
                seen.remove(&m.name_any());
                true
            }
            Ok(watcher::Event::Apply(m) | watcher::Event::InitApply(m)) => {
                let hash = inputs(m);
                seen.insert(m.name_any(), hash) != Some(hash)
            }
            Ok(watcher::Event::Init | watcher::Event::InitDone) | Err(_) => true,
        };
        std::future::ready(keep.then_some(event))
    }
}

/// The members that the events of a controller's share of the MemberClusters touch: deletions
/// and the members whose `inputs` changed, each once the shared store holds it.
pub fn member_stream(
    events: futures::stream::BoxStream<
        'static,
        Result<watcher::Event<MemberCluster>, watcher::Error>,
    >,
    inputs: fn(&MemberCluster) -> u64,
) -> impl futures::Stream<Item = Result<MemberCluster, watcher::Error>> + Send + 'static {
    fleethub_runtime::touched_after_sync(events.filter_map(member_changes(inputs)))
}

/// A member's identity, labels and deletion: what overrides read of it.
pub fn label_inputs(member: &MemberCluster) -> u64 {
    use std::hash::Hasher;
    identity_and_labels(member).finish()
}

/// What of a MemberCluster cluster selection depends on: its identity, labels, deletion and
/// `Joined`.
pub fn selection_inputs(member: &MemberCluster) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = identity_and_labels(member);
    condition_status(member, JOINED).hash(&mut h);
    h.finish()
}

/// What a run waiting for a member needs to see change: its identity, labels, deletion,
/// `Joined` and `Healthy`.
pub fn health_inputs(member: &MemberCluster) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = identity_and_labels(member);
    condition_status(member, JOINED).hash(&mut h);
    condition_status(member, HEALTHY).hash(&mut h);
    h.finish()
}

fn identity_and_labels(member: &MemberCluster) -> std::collections::hash_map::DefaultHasher {
    use std::hash::Hash;
    let mut h = std::collections::hash_map::DefaultHasher::new();
    member.metadata.uid.hash(&mut h);
    member.labels().hash(&mut h);
    member.metadata.deletion_timestamp.is_some().hash(&mut h);
    h
}

/// The status (`True`, `False`, `Unknown`) of `member`'s condition `type_`, if it has one.
fn condition_status<'a>(member: &'a MemberCluster, type_: &str) -> Option<&'a str> {
    find(&member.status.as_ref()?.conditions, type_).map(|c| c.status.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn meta(generation: Option<i64>, rv: &str, labels: &[(&str, &str)]) -> ObjectMeta {
        ObjectMeta {
            name: Some("web".into()),
            namespace: Some("app".into()),
            uid: Some("u1".into()),
            generation,
            resource_version: Some(rv.into()),
            labels: Some(
                labels
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect::<BTreeMap<_, _>>(),
            ),
            ..Default::default()
        }
    }

    #[test]
    fn a_status_update_is_not_a_content_change() {
        let mut seen = ContentVersions::default();
        assert!(seen.changed(&meta(Some(1), "10", &[])), "first sight");
        // The Deployment controller writes its status: same generation, new version.
        assert!(!seen.changed(&meta(Some(1), "11", &[])));
        assert!(!seen.changed(&meta(Some(1), "12", &[])));
        // A new spec.
        assert!(seen.changed(&meta(Some(2), "13", &[])));
        // A label.
        assert!(seen.changed(&meta(Some(2), "14", &[("team", "a")])));
        assert!(!seen.changed(&meta(Some(2), "15", &[("team", "a")])));
        // Deleted and created again: seen as new.
        seen.deleted(&meta(Some(2), "16", &[("team", "a")]));
        assert!(seen.changed(&meta(Some(2), "17", &[("team", "a")])));
        // The hub's Deployment controller moves the revision annotation, which no snapshot
        // holds: not a change; another annotation is.
        let annotated = |version: &str, annotations: &[(&str, &str)]| {
            let mut m = meta(Some(2), version, &[("team", "a")]);
            m.annotations = Some(
                annotations
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            );
            m
        };
        let revision = "deployment.kubernetes.io/revision";
        assert!(!seen.changed(&annotated("18", &[(revision, "1")])));
        assert!(!seen.changed(&annotated("19", &[(revision, "2")])));
        assert!(seen.changed(&annotated("20", &[(revision, "2"), ("owner", "b")])));
    }

    #[test]
    fn every_change_of_an_object_without_a_generation_counts() {
        let mut seen = ContentVersions::default();
        assert!(seen.changed(&meta(None, "10", &[])));
        assert!(seen.changed(&meta(None, "11", &[])));
        assert!(seen.changed(&meta(Some(0), "12", &[])));
        assert!(seen.0.is_empty(), "nothing kept for them");
    }

    fn member(heartbeat: i64, labels: &[(&str, &str)], healthy: &str) -> MemberCluster {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "m1", "uid": "u1",
                         "labels": labels.iter().copied().collect::<BTreeMap<_, _>>()},
            "spec": {},
            "status": {
                "lastHeartbeatTime": jiff::Timestamp::from_second(1_800_000_000 + heartbeat).unwrap().to_string(),
                "conditions": [
                    {"type": "Joined", "status": "True", "reason": "r", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"},
                    {"type": "Healthy", "status": healthy, "reason": "r", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}
                ]
            }
        }))
        .unwrap()
    }

    /// Which of `events` the filter for `inputs` passes, by position.
    fn passed(inputs: fn(&MemberCluster) -> u64, events: Vec<MemberCluster>) -> Vec<usize> {
        let mut filter = member_changes(inputs);
        events
            .into_iter()
            .enumerate()
            .filter_map(|(i, m)| {
                let out = filter(Ok(watcher::Event::Apply(m))).into_inner();
                out.map(|_| i)
            })
            .collect()
    }

    #[test]
    fn heartbeats_trigger_nothing_and_each_watch_passes_what_it_reads() {
        let events = || {
            vec![
                member(0, &[], "True"),                  // first sight
                member(15, &[], "True"),                 // a heartbeat
                member(30, &[], "False"),                // unhealthy
                member(45, &[("env", "prod")], "False"), // a label
                member(60, &[("env", "prod")], "False"), // a heartbeat
            ]
        };
        assert_eq!(passed(label_inputs, events()), [0, 3]);
        assert_eq!(passed(selection_inputs, events()), [0, 3]);
        assert_eq!(passed(health_inputs, events()), [0, 2, 3]);
        // A deletion always passes.
        let mut filter = member_changes(label_inputs);
        assert!(
            filter(Ok(watcher::Event::Apply(member(0, &[], "True"))))
                .into_inner()
                .is_some()
        );
        assert!(
            filter(Ok(watcher::Event::Delete(member(0, &[], "True"))))
                .into_inner()
                .is_some()
        );
    }
}
