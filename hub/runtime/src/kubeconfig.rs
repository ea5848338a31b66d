//! Kubernetes clients from a kubeconfig file, or from the in-cluster / default configuration.

use std::path::Path;

use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

use crate::Error;

/// A client for the cluster that `kubeconfig` points at (its current context), or for the
/// in-cluster / `$KUBECONFIG` configuration when `None`.
pub async fn client(kubeconfig: Option<&Path>) -> Result<Client, Error> {
    let config = match kubeconfig {
        Some(path) => {
            let kubeconfig_error = |source| Error::Kubeconfig {
                path: path.display().to_string(),
                source,
            };
            let kc = Kubeconfig::read_from(path).map_err(kubeconfig_error)?;
            Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
                .await
                .map_err(kubeconfig_error)?
        }
        None => Config::infer().await?,
    };
    Ok(Client::try_from(with_timeouts(config))?)
}

/// How long a request may wait for its response's next bytes. kube sets none, so a request
/// that never got an answer (a dropped connection the client did not notice) waited forever
/// and halted whatever awaited it: the hub's placement controller stopped for good that way
/// during a benchmark. The API server answers other requests within its own 60 s
/// `--request-timeout`, and closes watches at their 290 s `timeoutSeconds` (kube's watcher),
/// so this cuts off only what would never have finished.
pub const READ_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(295);

fn with_timeouts(mut config: Config) -> Config {
    config.read_timeout = Some(READ_TIMEOUT);
    // Count from when a request is sent, not from when its pooled connection went idle.
    config.reset_reader_on_write = true;
    config
}
