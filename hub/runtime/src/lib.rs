//! Process plumbing shared by the fleethub hub and member agent: logging, Kubernetes clients,
//! the `/healthz`, `/readyz` and `/metrics` endpoints, and graceful shutdown on SIGTERM.
#![forbid(unsafe_code)]

mod backoff;
pub mod clock;
pub mod health;
pub mod kubeconfig;
pub mod last_written;
pub mod logging;
pub mod probe;
pub mod process;
pub mod prometheus;
pub mod retry;
pub mod shared;
pub mod shutdown;

pub(crate) use backoff::jittered_within;
pub use backoff::{
    WATCH_BACKOFF, WatchBackoff, WatchFailureMetrics, retry_wait_max, set_retry_wait_max,
    watch_backoff, watch_failures,
};
pub use health::{Health, serve};
pub use shutdown::{shutdown_on_signal, stop_within};

/// Errors of the process plumbing.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The kubeconfig could not be read or used.
    #[error("cannot load kubeconfig {path}: {source}")]
    Kubeconfig {
        /// Path of the kubeconfig.
        path: String,
        /// What went wrong.
        #[source]
        source: kube::config::KubeconfigError,
    },
    /// No kubeconfig was given and no in-cluster or default configuration was found.
    #[error("no Kubernetes configuration found (pass a kubeconfig, or run in a cluster): {0}")]
    InferConfig(#[from] kube::config::InferConfigError),
    /// A client could not be built from the configuration.
    #[error("cannot build a Kubernetes client: {0}")]
    Client(#[from] kube::Error),
    /// The health server could not listen.
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        /// The address.
        addr: String,
        /// What went wrong.
        #[source]
        source: std::io::Error,
    },
    /// The health server failed while serving.
    #[error("health server failed: {0}")]
    Serve(#[source] std::io::Error),
}

/// A kind fleethub watches and caches: a static Kubernetes kind, deserializable, shareable
/// between tasks.
pub trait Watched:
    kube::Resource<DynamicType = ()>
    + Clone
    + serde::de::DeserializeOwned
    + std::fmt::Debug
    + Send
    + Sync
    + 'static
{
}

impl<K> Watched for K where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static
{
}

/// How long the API server keeps one watch request open (`timeoutSeconds`); the watcher then
/// resumes from the last resource version it saw. kube's default is 290 s, and a watch whose
/// connection died unnoticed stays silent until the client's read timeout
/// ([`kubeconfig::READ_TIMEOUT`]) cuts it: after a hub API server restart in CI, the update-run
/// controller's watches saw nothing for about 290 s (a run created meanwhile was not started,
/// and its member's labels were read from before they were set).
pub const WATCH_TIMEOUT_SECONDS: u32 = 60;

/// The watch configuration every fleethub watcher uses. Lists (the initial one, and the relist
/// after a watch expired) are consistent reads (`ListSemantic::MostRecent`): a list at "any"
/// version served from a restarted API server's cache can hand back a resource version older
/// than that cache's window, and older than this process's last writes. They are not paged
/// (except for [`PAGED_KINDS`]): since Kubernetes 1.31 the API server serves a consistent list
/// from its watch cache, but (until its cache snapshots, alpha in 1.33) only the first page;
/// every later page was read from etcd and decoded again. One request took a restarted hub's
/// 1,000 Bindings from 0.6–3.4 s to 0.4–1.2 s (BENCHMARKS.md, 2026-11-28). Each watch request
/// lasts at most [`WATCH_TIMEOUT_SECONDS`].
pub fn watcher_config() -> kube::runtime::watcher::Config {
    let mut config = kube::runtime::watcher::Config::default()
        .list_semantic(kube::runtime::watcher::ListSemantic::MostRecent)
        .timeout(WATCH_TIMEOUT_SECONDS);
    config.page_size = None;
    config
}

/// `api`'s watch events with `config`, and the fleet's bounded backoff after a failure, counted
/// by kind ([`watch_backoff`]): every watch of fleethub's processes starts here (or, for kinds
/// known only at run time, from `watch_backoff` with the kind's name).
pub fn watch<K: Watched>(
    api: kube::Api<K>,
    config: kube::runtime::watcher::Config,
) -> impl futures::Stream<Item = Result<kube::runtime::watcher::Event<K>, kube::runtime::watcher::Error>>
+ Send
+ 'static {
    use kube::runtime::WatchStreamExt;
    let kind = K::kind(&());
    kube::runtime::watcher(api, list_pages(&kind, config)).backoff(watch_backoff(&kind))
}

/// Kinds whose objects carry members' manifests: tens of KB each, and about 14 times that once
/// parsed ([`slim_reflected_stream`]). Their lists come in pages of [`MANIFEST_PAGE`], so that
/// a list of 10,000 is never held whole in memory, whatever the page costs the API server.
pub const PAGED_KINDS: [&str; 2] = ["Work", "ResourceSnapshot"];

/// How many objects of a [`PAGED_KINDS`] kind one list page holds (kube's default).
pub const MANIFEST_PAGE: u32 = 500;

/// `config` as a watch of `kind` lists: in pages of [`MANIFEST_PAGE`] for [`PAGED_KINDS`] (unless
/// `config` sets a page size of its own), as `config` says for any other kind.
fn list_pages(
    kind: &str,
    config: kube::runtime::watcher::Config,
) -> kube::runtime::watcher::Config {
    if config.page_size.is_none() && PAGED_KINDS.contains(&kind) {
        config.page_size(MANIFEST_PAGE)
    } else {
        config
    }
}

/// Changed (or deleted) objects of `api`, watched with [`watcher_config`] and [`watch_backoff`]:
/// a trigger for `Controller::owns_stream` / `watches_stream`.
pub fn watch_stream<K>(
    api: kube::Api<K>,
) -> impl futures::Stream<Item = Result<K, kube::runtime::watcher::Error>> + Send + 'static
where
    K: Watched,
{
    touched_after_sync(watch(api, watcher_config()))
}

/// Like [`watch_stream`], and keeps `writer`'s store of `api`'s objects current: a trigger whose
/// reconciles read that store (objects of a re-list come once the store holds them).
pub fn reflected_stream<K>(
    api: kube::Api<K>,
    writer: kube::runtime::reflector::store::Writer<K>,
) -> impl futures::Stream<Item = Result<K, kube::runtime::watcher::Error>> + Send + 'static
where
    K: Watched,
{
    touched_after_sync(reflected_events(api, watcher_config(), writer))
}

/// Like [`reflected_stream`], with a watch configuration of its own (`config`, e.g.
/// [`watcher_config`] with a label selector).
pub fn reflected_stream_with<K>(
    api: kube::Api<K>,
    config: kube::runtime::watcher::Config,
    writer: kube::runtime::reflector::store::Writer<K>,
) -> impl futures::Stream<Item = Result<K, kube::runtime::watcher::Error>> + Send + 'static
where
    K: Watched,
{
    touched_after_sync(reflected_events(api, config, writer))
}

/// Like [`reflected_stream`], with `slim` applied to every object before the store holds it
/// (and before it is passed on): a cache keeps only what its reconciles read. A Work's
/// manifests, for one, are most of its size, and parsed into JSON values they take about 14
/// times their size in memory; a cache of 1,000 Works of 40 KB each held 535 MiB of them.
pub fn slim_reflected_stream<K>(
    api: kube::Api<K>,
    writer: kube::runtime::reflector::store::Writer<K>,
    slim: impl FnMut(&mut K) + Send + 'static,
) -> impl futures::Stream<Item = Result<K, kube::runtime::watcher::Error>> + Send + 'static
where
    K: Watched,
{
    use futures::StreamExt;
    use kube::runtime::WatchStreamExt;
    touched_after_sync(
        watch(api, watcher_config())
            .inspect(list_timer::<K>())
            .modify(slim)
            .reflect(writer),
    )
}

/// `api`'s watch events with `config` and [`watch_backoff`], each applied to `writer`'s store
/// (without its managed fields, [`strip_managed_fields`]) before it is passed on: every cache of
/// the hub's is filled this way.
pub fn reflected_events<K: Watched>(
    api: kube::Api<K>,
    config: kube::runtime::watcher::Config,
    writer: kube::runtime::reflector::store::Writer<K>,
) -> impl futures::Stream<Item = Result<kube::runtime::watcher::Event<K>, kube::runtime::watcher::Error>>
+ Send
+ 'static {
    use futures::StreamExt;
    use kube::runtime::WatchStreamExt;
    watch(api, config)
        .inspect(list_timer::<K>())
        .modify(strip_managed_fields)
        .reflect(writer)
}

/// Logs each complete list of a watch (the first one fills a cache, and a restarted process
/// waits for it): the kind, how many objects, and how long since the watch started or the
/// list began. Where a restarted hub spends its first seconds shows in its log.
pub fn list_timer<K: kube::Resource<DynamicType = ()>>()
-> impl FnMut(&Result<kube::runtime::watcher::Event<K>, kube::runtime::watcher::Error>) {
    use kube::runtime::watcher::Event;
    let (mut since, mut objects, mut listed) = (std::time::Instant::now(), 0usize, false);
    move |event| match event {
        Ok(Event::Init) => {
            objects = 0;
            if listed {
                since = std::time::Instant::now();
            }
        }
        Ok(Event::InitApply(_)) => objects += 1,
        Ok(Event::InitDone) => {
            listed = true;
            tracing::info!(
                kind = %K::kind(&()),
                objects,
                took_ms = since.elapsed().as_millis() as u64,
                "cache listed"
            );
        }
        Ok(_) | Err(_) => {}
    }
}

/// Drops `object`'s managed fields, for a cache whose readers do not look at them (every cache
/// of [`reflected_stream`], [`controller_for`] and [`controller_with_changes`]; a
/// [`slim_reflected_stream`]'s own `slim` decides). They are about half of a MemberCluster's or
/// a Binding's JSON (three field managers each), and parsed into JSON maps they take many times
/// that in memory: at 10,000 members and 100 runs the hub held 2.1 GiB, mostly managed fields
/// kept in its caches.
pub fn strip_managed_fields<K: kube::Resource>(object: &mut K) {
    object.meta_mut().managed_fields = None;
}

/// How long a reconcile waits for caches still listing (right after a start), and how soon it
/// runs again when they did not finish by then.
pub const CACHE_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// How often [`ready_within`] asks again. A store's `wait_until_ready()` (kube-runtime 5) keeps
/// one waker for all its waiters: of several reconciles awaiting the same store at once, only the
/// last to ask is woken when it becomes ready, and the others slept out their whole patience
/// (a restarted hub's runs waited 10 s, `CACHE_WAIT`, before progressing). Asking again takes a
/// lock, no API call.
const READY_RECHECK: std::time::Duration = std::time::Duration::from_millis(20);

/// Whether `ready` (a closure making a store's `wait_until_ready()`, or several joined) resolves
/// within `patience`. Right after a (re)start a reconcile waits the few milliseconds a list takes;
/// but never without bound: caches whose list cannot complete (an overloaded API server) make the
/// reconcile retry later instead of hanging. A fresh `ready()` is awaited every [`READY_RECHECK`],
/// so a missed wake-up costs at most that.
pub async fn ready_within<T, E, F>(patience: std::time::Duration, ready: impl Fn() -> F) -> bool
where
    F: std::future::Future<Output = Result<T, E>>,
{
    let deadline = tokio::time::Instant::now() + patience;
    loop {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        if left.is_zero() {
            return false;
        }
        match tokio::time::timeout(left.min(READY_RECHECK), ready()).await {
            Ok(outcome) => return outcome.is_ok(),
            Err(_) => continue,
        }
    }
}

#[cfg(test)]
mod ready_within_tests {
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::runtime::reflector;
    use kube::runtime::watcher::Event;
    use std::time::Duration;

    /// Several reconciles wait for the same cache; when its list completes, every one of them
    /// goes on at once, not when its patience runs out (kube-runtime wakes only the last
    /// waiter). On tokio's paused clock.
    #[tokio::test(start_paused = true)]
    async fn every_waiter_sees_the_cache_become_ready() {
        let start = tokio::time::Instant::now();
        let (store, mut writer) = reflector::store::<ConfigMap>();
        let waiters: Vec<_> = (0..3)
            .map(|_| {
                let store = store.clone();
                tokio::spawn(async move {
                    super::ready_within(Duration::from_secs(5), || store.wait_until_ready()).await
                })
            })
            .collect();
        // Every waiter is waiting before the list completes.
        tokio::time::sleep(Duration::from_millis(50)).await;
        writer.apply_watcher_event(&Event::Init);
        writer.apply_watcher_event(&Event::InitDone);
        for w in waiters {
            assert!(w.await.unwrap(), "a waiter gave up on a ready cache");
        }
        let waited = start.elapsed();
        assert!(
            waited < Duration::from_secs(1),
            "a waiter went on only {waited:?} after it started waiting, the cache ready after 50 ms"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_cache_that_never_lists_is_given_up_on() {
        let (store, _writer) = reflector::store::<ConfigMap>();
        assert!(
            !super::ready_within(Duration::from_millis(100), || store.wait_until_ready()).await
        );
    }
}

/// A controller of `api`'s objects whose own watch uses [`watcher_config`] and [`watch_backoff`].
pub fn controller_for<K>(api: kube::Api<K>) -> kube::runtime::Controller<K>
where
    K: Watched,
{
    let (reader, writer) = kube::runtime::reflector::store();
    let events = reflected_events(api, watcher_config(), writer);
    kube::runtime::Controller::for_stream(synced_objects(events, false), reader)
}

/// Like [`controller_for`], and also a channel that receives `change(object)` for every object
/// the controller's watch changes or deletes, sent once the controller's store holds that
/// change: a trigger for related objects whose reconciles read the store. (A second watch of
/// the same kind raced the store: a run triggered by its sibling's change could still read
/// the sibling's previous status, and nothing triggered it again.)
pub fn controller_with_changes<K, T>(
    api: kube::Api<K>,
    change: impl Fn(&K) -> T + Send + 'static,
) -> (
    kube::runtime::Controller<K>,
    futures::channel::mpsc::UnboundedReceiver<T>,
)
where
    K: Watched,
    T: Send + 'static,
{
    use futures::StreamExt;
    use kube::runtime::watcher::Event;
    let (reader, writer) = kube::runtime::reflector::store();
    let (tx, rx) = futures::channel::mpsc::unbounded();
    // Each event reaches the store before it is passed on.
    let events = reflected_events(api, watcher_config(), writer).inspect(move |event| {
        if let Ok(Event::Apply(o) | Event::Delete(o)) = event {
            let _ = tx.unbounded_send(change(o));
        }
    });
    let controller = kube::runtime::Controller::for_stream(synced_objects(events, false), reader);
    (controller, rx)
}

/// The objects that a watcher's `events` touch (changed or deleted), like kube's
/// `touched_objects()`, except that the objects of a (re-)list come only once the list is
/// complete. A reflector fed by the same events swaps its new state in at that moment, so a
/// reconcile triggered by a re-list sees the listed objects in every store. (With
/// `touched_objects()` the trigger came first: after an API server restart, an approval made
/// during the outage triggered a reconcile that still saw the old approval in the store, and
/// nothing triggered it again until some other change, 80 s later in the fault test.)
pub fn touched_after_sync<K, S>(
    events: S,
) -> impl futures::Stream<Item = Result<K, kube::runtime::watcher::Error>> + Send
where
    K: Send,
    S: futures::Stream<
            Item = Result<kube::runtime::watcher::Event<K>, kube::runtime::watcher::Error>,
        > + Send,
{
    synced_objects(events, true)
}

pub(crate) fn synced_objects<K, S>(
    events: S,
    deleted_too: bool,
) -> impl futures::Stream<Item = Result<K, kube::runtime::watcher::Error>> + Send
where
    K: Send,
    S: futures::Stream<
            Item = Result<kube::runtime::watcher::Event<K>, kube::runtime::watcher::Error>,
        > + Send,
{
    use futures::StreamExt;
    use kube::runtime::watcher::Event;
    events
        .scan(Vec::new(), move |listed, event| {
            let out: Vec<Result<K, kube::runtime::watcher::Error>> = match event {
                Ok(Event::Apply(o)) => vec![Ok(o)],
                Ok(Event::Delete(o)) if deleted_too => vec![Ok(o)],
                Ok(Event::Delete(_)) => Vec::new(),
                Ok(Event::Init) => {
                    listed.clear();
                    Vec::new()
                }
                Ok(Event::InitApply(o)) => {
                    listed.push(o);
                    Vec::new()
                }
                Ok(Event::InitDone) => std::mem::take(listed).into_iter().map(Ok).collect(),
                // Logged, not passed on: kube's controller does not poll its trigger again
                // after an error, so the backoff's timer (armed when the watch is next polled)
                // waited for some other wake-up; after a hub API server restart a controller
                // stayed silent for seconds. Dropped here, the watch is polled again at once.
                Err(e) => {
                    tracing::debug!(error = %e, "watch failed; trying again after the backoff");
                    Vec::new()
                }
            };
            futures::future::ready(Some(futures::stream::iter(out)))
        })
        .flatten()
}

#[cfg(test)]
mod synced_objects_tests {
    use futures::StreamExt;
    use kube::runtime::watcher::Event;

    #[tokio::test]
    async fn listed_objects_come_after_the_list_is_complete() {
        let events = futures::stream::iter(vec![
            Ok(Event::Apply(1)),
            Ok(Event::Init),
            Ok(Event::InitApply(2)),
            Ok(Event::InitApply(3)),
            Ok(Event::Delete(4)),
            Ok(Event::InitDone),
            Ok(Event::Delete(5)),
        ]);
        // Everything up to InitDone is yielded at InitDone, in order.
        let got: Vec<i32> = super::touched_after_sync(events)
            .map(|r| r.unwrap())
            .collect()
            .await;
        assert_eq!(got, [1, 4, 2, 3, 5]);
        let only_applied = futures::stream::iter(vec![
            Ok(Event::Init),
            Ok(Event::InitApply(2)),
            Ok(Event::Delete(4)),
            Ok(Event::InitDone),
            Ok(Event::Apply(6)),
        ]);
        let got: Vec<i32> = super::synced_objects(only_applied, false)
            .map(|r| r.unwrap())
            .collect()
            .await;
        assert_eq!(got, [2, 6]);
    }

    #[tokio::test]
    async fn an_interrupted_list_starts_over() {
        let events = futures::stream::iter(vec![
            Ok(Event::Init),
            Ok(Event::InitApply(1)),
            Ok(Event::Init),
            Ok(Event::InitApply(2)),
            Ok(Event::InitDone),
        ]);
        let got: Vec<i32> = super::touched_after_sync(events)
            .map(|r| r.unwrap())
            .collect()
            .await;
        assert_eq!(got, [2]);
    }
}

#[cfg(test)]
mod watch_error_tests {
    use std::sync::Arc;
    use std::time::Duration;

    use futures::StreamExt;
    use futures::channel::mpsc;
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::runtime::WatchStreamExt;
    use kube::runtime::controller::Action;
    use kube::runtime::reflector;
    use kube::runtime::watcher::{Error, Event};

    fn config_map(name: &str) -> ConfigMap {
        let mut c = ConfigMap::default();
        c.metadata.name = Some(name.into());
        c.metadata.namespace = Some("ns".into());
        c.metadata.resource_version = Some("1".into());
        c
    }

    /// A controller whose watch fails relists once its backoff has passed, without anything
    /// else waking it. (kube's controller did not poll its trigger again after passing on an
    /// error, so the backoff's timer was armed only by some other wake-up: after a hub API
    /// server restart, a controller stayed silent for seconds with the server answering.)
    #[tokio::test(start_paused = true)]
    async fn a_controller_relists_after_a_watch_error_with_nothing_else_waking_it() {
        let (reader, writer) = reflector::store::<ConfigMap>();
        let (watch, events) = mpsc::unbounded::<Result<Event<ConfigMap>, Error>>();
        let events = events
            .backoff(super::watch_backoff("ConfigMap"))
            .reflect(writer);
        let (reconciled, mut names) = mpsc::unbounded::<String>();
        let controller =
            kube::runtime::Controller::for_stream(super::synced_objects(events, false), reader)
                .run(
                    |o: Arc<ConfigMap>, seen: Arc<mpsc::UnboundedSender<String>>| {
                        let _ = seen.unbounded_send(o.metadata.name.clone().unwrap_or_default());
                        async { Ok::<_, kube::Error>(Action::await_change()) }
                    },
                    |_, _, _| Action::await_change(),
                    Arc::new(reconciled),
                )
                .for_each(|_| async {});
        tokio::spawn(controller);
        for event in [
            Event::Init,
            Event::InitApply(config_map("a")),
            Event::InitDone,
        ] {
            watch.unbounded_send(Ok(event)).unwrap();
        }
        assert_eq!(names.next().await.as_deref(), Some("a"));

        // The API server goes away; the watch's relist comes 100 ms later.
        let failed = tokio::time::Instant::now();
        watch.unbounded_send(Err(Error::NoResourceVersion)).unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
        for event in [
            Event::Init,
            Event::InitApply(config_map("b")),
            Event::InitDone,
        ] {
            watch.unbounded_send(Ok(event)).unwrap();
        }
        let b = tokio::time::timeout(super::WATCH_BACKOFF.max * 4, names.next()).await;
        assert_eq!(
            b.ok().flatten().as_deref(),
            Some("b"),
            "the relisted object was never reconciled"
        );
        // On tokio's paused clock: the first retry waits at most twice the first delay.
        let after = failed.elapsed();
        assert!(
            after <= super::WATCH_BACKOFF.first * 2 + Duration::from_millis(100),
            "reconciled {after:?} after the error"
        );
    }
}

#[cfg(test)]
mod list_page_tests {
    use super::{MANIFEST_PAGE, list_pages, watcher_config};

    #[test]
    fn only_kinds_carrying_manifests_are_listed_in_pages() {
        assert_eq!(watcher_config().page_size, None);
        for kind in [
            "Binding",
            "MemberCluster",
            "UpdateRun",
            "Placement",
            "ConfigMap",
        ] {
            assert_eq!(list_pages(kind, watcher_config()).page_size, None, "{kind}");
        }
        for kind in ["Work", "ResourceSnapshot"] {
            assert_eq!(
                list_pages(kind, watcher_config()).page_size,
                Some(MANIFEST_PAGE),
                "{kind}"
            );
        }
        // A page size the caller chose stays.
        assert_eq!(
            list_pages("Work", watcher_config().page_size(7)).page_size,
            Some(7)
        );
    }
}
