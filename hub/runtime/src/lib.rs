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
