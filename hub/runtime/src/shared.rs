//! One watch of a kind for several controllers of a process: one list, one store, and each
//! controller's own stream of its events. At 1,000 members a restarted hub listed
//! MemberClusters in four controllers, Bindings in three and Works in two, each of those nine
//! lists taking 3–5.6 s on a busy API server, all at once, before a run could move; and each
//! cache held its own copy of every object.

use futures::channel::mpsc;
use futures::stream::BoxStream;
use futures::{Stream, StreamExt};
use kube::runtime::WatchStreamExt;
use kube::runtime::reflector::{self, Store};
use kube::runtime::watcher::{self, Event};
use tokio_util::sync::CancellationToken;

use crate::Watched;

/// A watch whose store several controllers read and whose events each of them receives, each
/// event once the store holds it. Watch errors are retried (with [`crate::watch_backoff`]) and
/// logged here: subscribers see events only.
pub struct SharedWatch<K: Watched> {
    store: Store<K>,
    events: BoxStream<'static, Result<Event<K>, watcher::Error>>,
    subscribers: Vec<mpsc::UnboundedSender<Event<K>>>,
}

/// A controller's share of a [`SharedWatch`]: the store, and the watch's events from its first
/// list on.
pub struct Subscription<K: Watched> {
    /// The shared store.
    pub store: Store<K>,
    /// Every event, once the store holds it.
    pub events: BoxStream<'static, Result<Event<K>, watcher::Error>>,
}

impl<K: Watched> SharedWatch<K> {
    /// A watch of `api`'s objects with [`crate::watcher_config`]; `slim` trims each object before
    /// the store keeps it (what every subscriber's reconciles read must stay).
    pub fn new(api: kube::Api<K>, slim: fn(&mut K)) -> Self {
        let (store, writer) = reflector::store();
        let events = crate::watch(api, crate::watcher_config())
            .inspect(crate::list_timer::<K>())
            .modify(slim)
            .reflect(writer)
            .boxed();
        Self::from_events(store, events)
    }

    fn from_events(
        store: Store<K>,
        events: BoxStream<'static, Result<Event<K>, watcher::Error>>,
    ) -> Self {
        SharedWatch {
            store,
            events,
            subscribers: Vec::new(),
        }
    }

    /// A share for one more controller. Taken before [`SharedWatch::run`] starts, so it sees the
    /// first list.
    pub fn subscribe(&mut self) -> Subscription<K> {
        let (tx, rx) = mpsc::unbounded();
        self.subscribers.push(tx);
        Subscription {
            store: self.store.clone(),
            events: rx.map(Ok).boxed(),
        }
    }

    /// The shared store, for a reader that needs no events: it holds the watch's objects once
    /// [`SharedWatch::run`] lists them, for as long as a subscriber keeps the watch running.
    pub fn store(&self) -> Store<K> {
        self.store.clone()
    }

    /// Runs the watch until `stop`, or until no subscriber is left.
    pub async fn run(self, stop: CancellationToken) {
        let SharedWatch {
            mut events,
            mut subscribers,
            ..
        } = self;
        loop {
            let event = tokio::select! {
                _ = stop.cancelled() => return,
                event = events.next() => event,
            };
            match event {
                None => return,
                Some(Err(e)) => {
                    tracing::debug!(kind = %K::kind(&()), error = %e, "watch failed; retrying")
                }
                Some(Ok(event)) => {
                    subscribers.retain(|tx| tx.unbounded_send(event.clone()).is_ok());
                    if subscribers.is_empty() {
                        return;
                    }
                }
            }
        }
    }
}

impl<K: Watched> Subscription<K> {
    /// The objects the events touch, as [`crate::touched_after_sync`] yields them.
    pub fn touched(self) -> impl Stream<Item = Result<K, watcher::Error>> + Send + 'static {
        crate::touched_after_sync(self.events)
    }
}

/// A controller of the objects of `shared` (its store, and its events as the trigger).
pub fn controller_for_shared<K: Watched>(shared: Subscription<K>) -> kube::runtime::Controller<K> {
    kube::runtime::Controller::for_stream(crate::synced_objects(shared.events, false), shared.store)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;

    fn cm(name: &str) -> ConfigMap {
        ConfigMap {
            metadata: kube::api::ObjectMeta {
                name: Some(name.into()),
                namespace: Some("ns".into()),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    /// Every subscriber gets every event (a re-list's objects once it is complete), and the
    /// store they share holds the result.
    #[tokio::test]
    async fn every_subscriber_sees_every_event() {
        let (store, mut writer) = reflector::store::<ConfigMap>();
        let events = futures::stream::iter(vec![
            Ok(Event::Init),
            Ok(Event::InitApply(cm("a"))),
            Ok(Event::InitDone),
            Ok(Event::Apply(cm("b"))),
            Ok(Event::Delete(cm("a"))),
        ])
        .map(move |e: Result<Event<ConfigMap>, watcher::Error>| {
            if let Ok(event) = &e {
                writer.apply_watcher_event(event);
            }
            e
        })
        .boxed();
        let mut watch = SharedWatch::from_events(store, events);
        let (one, two) = (watch.subscribe(), watch.subscribe());
        let store = one.store.clone();
        tokio::spawn(watch.run(CancellationToken::new()));
        let names = |s: Subscription<ConfigMap>| async move {
            s.touched()
                .map(|o| o.unwrap().metadata.name.unwrap())
                .collect::<Vec<_>>()
                .await
        };
        assert_eq!(names(one).await, ["a", "b", "a"]);
        assert_eq!(names(two).await, ["a", "b", "a"]);
        let held: Vec<_> = store
            .state()
            .iter()
            .map(|o| o.metadata.name.clone())
            .collect();
        assert_eq!(held, [Some("b".to_string())]);
    }

    /// The watch stops once no subscriber is left.
    #[tokio::test]
    async fn a_watch_without_subscribers_stops() {
        let (store, _writer) = reflector::store::<ConfigMap>();
        let events = futures::stream::iter(vec![Ok(Event::Apply(cm("a")))])
            .chain(futures::stream::pending())
            .boxed();
        let mut watch = SharedWatch::from_events(store, events);
        drop(watch.subscribe());
        tokio::time::timeout(
            std::time::Duration::from_secs(5),
            watch.run(CancellationToken::new()),
        )
        .await
        .expect("the watch went on without subscribers");
    }
}
