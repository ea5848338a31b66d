//! The member's fleet-managed objects, watched: one label-selected watch (objects carrying the
//! placement label) per kind the agent has applied, started the first time it applies that kind.
//!
//! Two uses: every change or deletion of a fleet-managed object, of any kind, reconciles its
//! Work within a moment (drift is seen at once, not at the resync); and the Work reconcile reads
//! the member's objects from these caches instead of asking the API server for each manifest,
//! so an unchanged object that did not drift costs no API call.

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
use kube::{Api, Client};
use serde_json::Value;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::kind_resolver::ResolvedKind;

/// Maps a member object to the Work it was applied for.
type WorkOf = Arc<dyn Fn(&DynamicObject) -> Option<ObjectRef<Work>> + Send + Sync>;

/// One kind's cache, and whether its first list completed.
struct KindCache {
    store: Store<DynamicObject>,
    synced: Arc<AtomicBool>,
}

/// The caches of the kinds the agent applies; changes are sent as Work references.
pub struct MemberObjects {
    client: Client,
    kinds: Mutex<HashMap<(String, String, String), KindCache>>,
    changes: mpsc::UnboundedSender<ObjectRef<Work>>,
    /// Maps a member object to its Work.
    work_of: WorkOf,
    shutdown: CancellationToken,
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
            work_of: Arc::new(work_of),
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
        let synced = Arc::new(AtomicBool::new(false));
        kinds.insert(
            key,
            KindCache {
                store,
                synced: synced.clone(),
            },
        );
        let api: Api<DynamicObject> = Api::all_with(self.client.clone(), &kind.resource);
        let config = fleethub_runtime::watcher_config().labels(PLACEMENT_LABEL);
        let changes = self.changes.clone();
        let work_of = self.work_of.clone();
        let shutdown = self.shutdown.clone();
        let plural = kind.resource.plural.clone();
        tokio::spawn(async move {
            let stream =
                reflector::reflector(writer, watcher::watcher(api, config).default_backoff());
            let mut stream = std::pin::pin!(stream);
            loop {
                let event = tokio::select! {
                    () = shutdown.cancelled() => return,
                    event = stream.next() => event,
                };
                match event {
                    None => return,
                    Some(Ok(Event::InitDone)) => synced.store(true, Ordering::Release),
                    Some(Ok(Event::Apply(o) | Event::Delete(o))) => {
                        if let Some(work) = work_of(&o) {
                            let _ = changes.send(work);
                        }
                    }
                    Some(Ok(Event::Init | Event::InitApply(_))) => {}
                    Some(Err(e)) => {
                        tracing::debug!(resource = %plural, error = %e, "member object watch");
                    }
                }
            }
        });
    }

    /// What the cache of `kind` holds for `namespace/name`.
    pub fn get(&self, kind: &ResolvedKind, namespace: Option<&str>, name: &str) -> Cached {
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
        match cache.store.get(&reference) {
            None => Cached::Absent,
            Some(o) => match serde_json::to_value(o.as_ref()) {
                Ok(mut v) => {
                    // Objects from a list carry no apiVersion and kind.
                    v["apiVersion"] = Value::String(kind.resource.api_version.clone());
                    v["kind"] = Value::String(kind.resource.kind.clone());
                    Cached::Present(v)
                }
                Err(_) => Cached::Unknown,
            },
        }
    }
}
