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
    Ok(Client::try_from(config)?)
}
