//! Process plumbing shared by the fleethub hub and member agent: logging, Kubernetes clients,
//! the `/healthz`, `/readyz` and `/metrics` endpoints, and graceful shutdown on SIGTERM.
#![forbid(unsafe_code)]

pub mod clock;
pub mod health;
pub mod kubeconfig;
pub mod logging;
pub mod probe;
pub mod process;
pub mod shutdown;

pub use health::{Health, serve};
pub use shutdown::shutdown_on_signal;

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

/// The watch configuration every fleethub watcher uses. Lists (the initial one, and the relist
/// after a watch expired) are quorum reads (`ListSemantic::MostRecent`): a list served from a
/// restarted API server's cache can hand back a resource version older than that cache's window.
pub fn watcher_config() -> kube::runtime::watcher::Config {
    kube::runtime::watcher::Config::default()
        .list_semantic(kube::runtime::watcher::ListSemantic::MostRecent)
}

/// How watchers retry after an error: 250 ms doubling up to 5 s, reset after 10 s without errors.
/// (kube's default grows to 30 s and resets only after 120 s quiet, so an API server restart
/// soon after another one left changes unseen for minutes.)
pub fn watch_backoff()
-> kube::runtime::utils::ResetTimerBackoff<kube::runtime::watcher::ExponentialBackoff> {
    let builder = backon::ExponentialBuilder::default()
        .with_min_delay(std::time::Duration::from_millis(250))
        .with_max_delay(std::time::Duration::from_secs(5))
        .with_factor(2.0)
        .with_jitter()
        .without_max_times();
    kube::runtime::utils::ResetTimerBackoff::new(builder.into(), std::time::Duration::from_secs(10))
}

/// Changed (or deleted) objects of `api`, watched with [`watcher_config`] and [`watch_backoff`]:
/// a trigger for `Controller::owns_stream` / `watches_stream`.
pub fn watch_stream<K>(
    api: kube::Api<K>,
) -> impl futures::Stream<Item = Result<K, kube::runtime::watcher::Error>> + Send + 'static
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    use kube::runtime::WatchStreamExt;
    kube::runtime::watcher(api, watcher_config())
        .backoff(watch_backoff())
        .touched_objects()
}

/// A controller of `api`'s objects whose own watch uses [`watcher_config`] and [`watch_backoff`].
pub fn controller_for<K>(api: kube::Api<K>) -> kube::runtime::Controller<K>
where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    use kube::runtime::WatchStreamExt;
    let (reader, writer) = kube::runtime::reflector::store();
    let stream = kube::runtime::watcher(api, watcher_config())
        .backoff(watch_backoff())
        .reflect(writer)
        .applied_objects();
    kube::runtime::Controller::for_stream(stream, reader)
}
