//! Connecting to a cluster the way kubectl does: `--kubeconfig`, else `$KUBECONFIG` (a list of
//! files, merged), else `~/.kube/config`; `--context`, else the current context.

use std::path::{Path, PathBuf};

use base64::Engine as _;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

use crate::error::{Error, Result};

/// A connected cluster and the kubeconfig entries it came from.
pub struct Cluster {
    /// The client.
    pub client: Client,
    /// The API server URL.
    pub server: String,
    /// The cluster's CA bundle (PEM), when the kubeconfig names one.
    pub ca_pem: Option<Vec<u8>>,
    /// Whether the kubeconfig skips TLS verification for this cluster.
    pub insecure: bool,
    /// The kubeconfig user name of the context (shown when the server cannot tell who we are).
    pub user: Option<String>,
    /// Where the kubeconfig came from, for messages.
    pub source: String,
}

/// Connects with kubeconfig `path` (or kubectl's default search) and `context` (or the current
/// one).
pub async fn connect(path: Option<&Path>, context: Option<&str>) -> Result<Cluster> {
    let source = match path {
        Some(p) => p.display().to_string(),
        None => std::env::var("KUBECONFIG").unwrap_or_else(|_| "~/.kube/config".to_string()),
    };
    let err = |why: String| Error::Kubeconfig {
        path: source.clone(),
        why,
    };
    let kubeconfig = match path {
        Some(p) => Kubeconfig::read_from(p),
        None => Kubeconfig::read(),
    }
    .map_err(|e| err(e.to_string()))?;
    let context_name = context
        .map(str::to_string)
        .or_else(|| kubeconfig.current_context.clone())
        .ok_or_else(|| err("no current context; pass --context".to_string()))?;
    let ctx = kubeconfig
        .contexts
        .iter()
        .find(|c| c.name == context_name)
        .and_then(|c| c.context.clone())
        .ok_or_else(|| err(format!("context {context_name:?} not found")))?;
    let cluster = kubeconfig
        .clusters
        .iter()
        .find(|c| c.name == ctx.cluster)
        .and_then(|c| c.cluster.clone())
        .ok_or_else(|| {
            err(format!(
                "cluster {:?} (of context {context_name}) not found",
                ctx.cluster
            ))
        })?;
    let server = cluster
        .server
        .clone()
        .ok_or_else(|| err(format!("cluster {:?} has no server", ctx.cluster)))?;
    let ca_pem = match (
        &cluster.certificate_authority_data,
        &cluster.certificate_authority,
    ) {
        (Some(data), _) => Some(
            base64::engine::general_purpose::STANDARD
                .decode(data.trim())
                .map_err(|e| {
                    err(format!(
                        "certificate-authority-data of cluster {}: {e}",
                        ctx.cluster
                    ))
                })?,
        ),
        (None, Some(file)) => {
            let file = PathBuf::from(file);
            Some(std::fs::read(&file).map_err(|e| err(format!("{}: {e}", file.display())))?)
        }
        (None, None) => None,
    };
    let options = KubeConfigOptions {
        context: Some(context_name.clone()),
        ..Default::default()
    };
    let config = Config::from_custom_kubeconfig(kubeconfig, &options)
        .await
        .map_err(|e| err(e.to_string()))?;
    let client = Client::try_from(config).map_err(|e| err(e.to_string()))?;
    Ok(Cluster {
        client,
        server,
        ca_pem,
        insecure: cluster.insecure_skip_tls_verify.unwrap_or(false),
        user: ctx.user.clone(),
        source,
    })
}

/// Who the server says we are (a SelfSubjectReview), falling back to the kubeconfig user name.
pub async fn whoami(cluster: &Cluster) -> String {
    use k8s_openapi::api::authentication::v1::SelfSubjectReview;
    let api: kube::Api<SelfSubjectReview> = kube::Api::all(cluster.client.clone());
    let review = SelfSubjectReview::default();
    match api.create(&Default::default(), &review).await {
        Ok(r) => r
            .status
            .and_then(|s| s.user_info)
            .and_then(|u| u.username)
            .filter(|u| !u.is_empty())
            .or_else(|| cluster.user.clone())
            .unwrap_or_else(|| "unknown".to_string()),
        Err(_) => cluster
            .user
            .clone()
            .unwrap_or_else(|| "unknown".to_string()),
    }
}
