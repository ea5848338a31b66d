//! The member's fleet-managed objects, watched: one label-selected watch (objects carrying the
//! placement label) per kind the agent has applied, started the first time it applies that kind.
//!
//! Two uses: every change or deletion of a fleet-managed object, of any kind, reconciles its
//! Work within a moment (drift is seen at once, not at the resync); and the Work reconcile reads
//! the member's objects from these caches instead of asking the API server for each manifest,
//! so an unchanged object that did not drift costs no API call.
//!
//! A cache can lag behind the agent's own apply (the apply's answer comes back before the watch
//! delivers it). A reconcile that read the object from before its own apply would take the
//! difference for drift: restore it again under `whenToApply: Always`, report it as `Drifted`
//! under `IfNotDrifted`. So the object each apply returned is kept until the cache has that
//! version ([`LastWritten`]), and the newer of the two is used.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use fleethub_crds::Work;
use fleethub_crds::names::PLACEMENT_LABEL;
use futures::StreamExt;
use kube::api::{ApiResource, DynamicObject};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::watcher::{self, Event};
use kube::runtime::{WatchStreamExt, reflector::store::Writer};
use kube::{Api, Client, ResourceExt};
use serde_json::Value;
use tokio::sync::{broadcast, mpsc};
use tokio_util::sync::CancellationToken;

use crate::kind_resolver::ResolvedKind;
use crate::last_written::{Choice, LastWritten, Newest, choose};

/// Maps a member object to the Work it was applied for.
type WorkOf = Arc<dyn Fn(&DynamicObject) -> Option<ObjectRef<Work>> + Send + Sync>;

/// One kind's cache, and whether its first list completed.
struct KindCache {
    resource: ApiResource,
    store: Store<DynamicObject>,
    synced: Arc<AtomicBool>,
}

/// The caches of the kinds the agent applies; changes are sent as Work references.
pub struct MemberObjects {
    client: Client,
    kinds: Mutex<HashMap<(String, String, String), KindCache>>,
    changes: mpsc::UnboundedSender<ObjectRef<Work>>,
    /// The same changes, for a reconcile that waits on its own write ([`Self::subscribe`]).
    updates: broadcast::Sender<ObjectRef<Work>>,
    /// Maps a member object to its Work.
    work_of: WorkOf,
    /// What the agent's applies returned, until the caches have it.
    written: LastWritten<DynamicObject>,
    shutdown: CancellationToken,
}

/// How many changes a [`WorkChanges`] may fall behind by before it only knows that it missed
/// some (and takes that as a change of its Work).
const UPDATES_CAPACITY: usize = 1024;

/// The changes of one Work's member objects since [`MemberObjects::subscribe`].
pub struct WorkChanges {
    updates: broadcast::Receiver<ObjectRef<Work>>,
    work: ObjectRef<Work>,
}

impl WorkChanges {
    /// Whether one of the Work's objects changed since the last call (or since subscribing).
    /// Missed changes (the receiver fell behind) count as a change.
    pub fn changed(&mut self) -> bool {
        let mut changed = false;
        loop {
            match self.updates.try_recv() {
                Ok(work) => changed |= work == self.work,
                Err(broadcast::error::TryRecvError::Lagged(_)) => changed = true,
                Err(_) => return changed,
            }
        }
    }

    /// Waits for the next change of one of the Work's objects (missed changes count); never
    /// returns once the watches have stopped.
    pub async fn next(&mut self) {
        loop {
            match self.updates.recv().await {
                Ok(work) if work == self.work => return,
                Ok(_) => {}
                Err(broadcast::error::RecvError::Lagged(_)) => return,
                Err(broadcast::error::RecvError::Closed) => std::future::pending().await,
            }
        }
    }
}

/// What the cache knows of one object.
#[derive(Debug, Clone, PartialEq)]
pub enum Cached {
    /// The kind's cache has not synced yet (or the kind is not watched yet): ask the API
    /// server.
    Unknown,
    /// No fleet-managed object of that name (it may exist without the placement label).
    Absent,
    /// The object, as JSON (with its apiVersion and kind).
    Present(Value),
}

/// One (re)list of a kind's watch against what its cache held before it. The first list of a
/// kind counts every object as changed: the kind's watch starts beside the agent's first apply of
/// it, and an edit made before the list returns would otherwise go unseen until the resync.
#[derive(Default)]
struct Relist {
    /// The cache's objects before the list, by namespace and name.
    before: HashMap<(Option<String>, String), Arc<DynamicObject>>,
}

impl Relist {
    fn begin(cache: &Store<DynamicObject>) -> Self {
        let before = cache
            .state()
            .into_iter()
            .map(|o| ((o.metadata.namespace.clone(), o.name_any()), o))
            .collect();
        Relist { before }
    }

    /// Whether a listed object is new or changed since the cache last held it.
    fn listed_changed(&mut self, o: &DynamicObject) -> bool {
        let key = (o.metadata.namespace.clone(), o.name_any());
        match self.before.remove(&key) {
            Some(cached) => cached.metadata.resource_version != o.metadata.resource_version,
            None => true,
        }
    }

    /// The objects the cache held that the list did not show again: deleted meanwhile.
    fn finish(&mut self) -> Vec<Arc<DynamicObject>> {
        std::mem::take(&mut self.before).into_values().collect()
    }
}

impl MemberObjects {
    /// Caches of `client`'s objects; each change of one is sent on the returned channel as the
    /// Work `work_of` maps it to.
    pub fn new(
        client: Client,
        work_of: impl Fn(&DynamicObject) -> Option<ObjectRef<Work>> + Send + Sync + 'static,
        shutdown: CancellationToken,
    ) -> (Arc<Self>, mpsc::UnboundedReceiver<ObjectRef<Work>>) {
        let (changes, receiver) = mpsc::unbounded_channel();
        let objects = MemberObjects {
            client,
            kinds: Mutex::new(HashMap::new()),
            changes,
            updates: broadcast::channel(UPDATES_CAPACITY).0,
            work_of: Arc::new(work_of),
            written: LastWritten::default(),
            shutdown,
        };
        (Arc::new(objects), receiver)
    }

    fn key(resource: &ApiResource) -> (String, String, String) {
        (
            resource.group.clone(),
            resource.version.clone(),
            resource.plural.clone(),
        )
    }

    /// Starts watching `kind` unless it is watched already.
    pub fn watch(&self, kind: &ResolvedKind) {
        let key = Self::key(&kind.resource);
        let mut kinds = self.kinds.lock().unwrap_or_else(PoisonError::into_inner);
        if kinds.contains_key(&key) {
            return;
        }
        let writer: Writer<DynamicObject> = Writer::new(kind.resource.clone());
        let store = writer.as_reader();
        let cache = store.clone();
        let synced = Arc::new(AtomicBool::new(false));
        kinds.insert(
            key,
            KindCache {
                resource: kind.resource.clone(),
                store,
                synced: synced.clone(),
            },
        );
        let api: Api<DynamicObject> = Api::all_with(self.client.clone(), &kind.resource);
        let config = fleethub_runtime::watcher_config().labels(PLACEMENT_LABEL);
        let changes = self.changes.clone();
        let updates = self.updates.clone();
        let work_of = self.work_of.clone();
        let shutdown = self.shutdown.clone();
        let plural = kind.resource.plural.clone();
        let kind_name = kind.resource.kind.clone();
        tokio::spawn(async move {
            let stream = reflector::reflector(
                writer,
                watcher::watcher(api, config).backoff(fleethub_runtime::watch_backoff(&kind_name)),
            );
            let mut stream = std::pin::pin!(stream);
            let changed = |o: &DynamicObject| {
                if let Some(work) = work_of(o) {
                    // No receiver (no reconcile waiting on a write) is not an error.
                    let _ = updates.send(work.clone());
                    let _ = changes.send(work);
                }
            };
            // What the cache held when a list began: the list shows what changed while no
            // watch was open (an edit or deletion made then has no watch event of its own).
            let mut listing = Relist::default();
            loop {
                let event = tokio::select! {
                    () = shutdown.cancelled() => return,
                    event = stream.next() => event,
                };
                match event {
                    None => return,
                    Some(Ok(Event::Init)) => listing = Relist::begin(&cache),
                    Some(Ok(Event::InitApply(o))) => {
                        if listing.listed_changed(&o) {
                            changed(&o);
                        }
                    }
                    Some(Ok(Event::InitDone)) => {
                        for gone in listing.finish() {
                            changed(&gone);
                        }
                        synced.store(true, Ordering::Release);
                    }
                    Some(Ok(Event::Apply(o) | Event::Delete(o))) => changed(&o),
                    Some(Err(e)) => {
                        tracing::debug!(resource = %plural, error = %e, "member object watch");
                    }
                }
            }
        });
    }

    /// From now on, every change of a fleet-managed object, as its Work: what a reconcile
    /// waits on beside its status write ([`WorkChanges`]).
    pub fn subscribe(&self, work: ObjectRef<Work>) -> WorkChanges {
        WorkChanges {
            updates: self.updates.subscribe(),
            work,
        }
    }

    /// The key of `namespace/name` of `kind` among the agent's writes.
    fn written_key(kind: &ResolvedKind, namespace: Option<&str>, name: &str) -> String {
        let (group, version, plural) = Self::key(&kind.resource);
        format!(
            "{group}/{version}/{plural}/{}/{name}",
            namespace.unwrap_or_default()
        )
    }

    /// Records `object` of `kind` as the agent's apply of it returned it.
    pub fn record(&self, kind: &ResolvedKind, object: DynamicObject) {
        let key = Self::written_key(
            kind,
            object.metadata.namespace.as_deref(),
            object.metadata.name.as_deref().unwrap_or_default(),
        );
        self.written.record(&key, object);
    }

    /// Forgets the agent's applies that the caches have caught up with, or whose object the
    /// caches do not hold (deleted since: the next reconcile asks the API server anyway), so
    /// only writes the caches still lag behind are kept.
    pub fn forget_settled(&self) {
        let kinds = self.kinds.lock().unwrap_or_else(PoisonError::into_inner);
        self.written.retain(|key, written| {
            let mut parts = key.splitn(5, '/');
            let (Some(group), Some(version), Some(plural)) =
                (parts.next(), parts.next(), parts.next())
            else {
                return false;
            };
            let Some(cache) =
                kinds.get(&(group.to_string(), version.to_string(), plural.to_string()))
            else {
                return false;
            };
            let mut reference = ObjectRef::new_with(&written.name_any(), cache.resource.clone());
            if let Some(ns) = &written.metadata.namespace {
                reference = reference.within(ns);
            }
            cache.store.get(&reference).is_some_and(|cached| {
                choose(
                    Some(cached.metadata.resource_version.as_deref()),
                    Some(written.metadata.resource_version.as_deref()),
                ) == Choice::Written
            })
        });
    }

    /// What the cache of `kind` holds for `namespace/name`, or what the agent's last apply of
    /// it returned when that is newer.
    pub fn get(&self, kind: &ResolvedKind, namespace: Option<&str>, name: &str) -> Cached {
        let cached = {
            let kinds = self.kinds.lock().unwrap_or_else(PoisonError::into_inner);
            let Some(cache) = kinds.get(&Self::key(&kind.resource)) else {
                return Cached::Unknown;
            };
            if !cache.synced.load(Ordering::Acquire) {
                return Cached::Unknown;
            }
            let mut reference = ObjectRef::new_with(name, kind.resource.clone());
            if let Some(ns) = namespace {
                reference = reference.within(ns);
            }
            cache.store.get(&reference)
        };
        let object = match self
            .written
            .newest(&Self::written_key(kind, namespace, name), cached)
        {
            Newest::Object(o) => o,
            Newest::Absent => return Cached::Absent,
            Newest::Unknown => return Cached::Unknown,
        };
        match serde_json::to_value(object.as_ref()) {
            Ok(mut v) => {
                // Objects from a list carry no apiVersion and kind.
                v["apiVersion"] = Value::String(kind.resource.api_version.clone());
                v["kind"] = Value::String(kind.resource.kind.clone());
                Cached::Present(v)
            }
            Err(_) => Cached::Unknown,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::api::GroupVersionKind;

    fn config_map(name: &str, version: &str) -> DynamicObject {
        let resource = resource();
        let mut o = DynamicObject::new(name, &resource).within("app");
        o.metadata.resource_version = Some(version.into());
        o
    }

    fn resource() -> ApiResource {
        ApiResource::from_gvk(&GroupVersionKind::gvk("", "v1", "ConfigMap"))
    }

    /// A cache holding `objects`, as a watch's first list leaves it.
    fn cache(objects: &[DynamicObject]) -> Store<DynamicObject> {
        let mut writer = Writer::new(resource());
        writer.apply_watcher_event(&Event::Init);
        for o in objects {
            writer.apply_watcher_event(&Event::InitApply(o.clone()));
        }
        writer.apply_watcher_event(&Event::InitDone);
        writer.as_reader()
    }

    #[test]
    fn a_first_list_counts_every_object_as_changed() {
        let mut list = Relist::begin(&cache(&[]));
        assert!(list.listed_changed(&config_map("a", "1")));
        assert!(list.listed_changed(&config_map("b", "2")));
        assert!(list.finish().is_empty());
    }

    #[test]
    fn a_relist_shows_what_changed_while_no_watch_was_open() {
        let before = cache(&[
            config_map("same", "1"),
            config_map("edited", "2"),
            config_map("deleted", "3"),
        ]);
        let mut list = Relist::begin(&before);
        assert!(!list.listed_changed(&config_map("same", "1")));
        assert!(list.listed_changed(&config_map("edited", "7")));
        assert!(list.listed_changed(&config_map("created", "8")));
        let gone: Vec<String> = list.finish().iter().map(|o| o.name_any()).collect();
        assert_eq!(gone, ["deleted"]);
        // Taken once: a second finish names nothing.
        assert!(list.finish().is_empty());
    }

    #[test]
    fn objects_of_the_same_name_in_other_namespaces_are_apart() {
        let mut other = config_map("a", "1");
        other.metadata.namespace = Some("other".into());
        let mut list = Relist::begin(&cache(&[config_map("a", "1"), other.clone()]));
        assert!(!list.listed_changed(&other));
        let gone: Vec<Option<String>> = list
            .finish()
            .iter()
            .map(|o| o.metadata.namespace.clone())
            .collect();
        assert_eq!(gone, [Some("app".to_string())]);
    }
}
