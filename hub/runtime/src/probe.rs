//! Readiness probes against an API server, retried with backoff until they pass.

use std::time::Duration;

use kube::Client;
use tokio_util::sync::CancellationToken;

use crate::Health;
use crate::retry::{Backoff, until_ok};

/// What a probe found: the server's version, or why the probe failed.
pub type ProbeResult = Result<String, String>;

/// Checks that the API server behind `client` answers and serves every kind in `kinds` of
/// `group_version` (e.g. `fleethub.dev/v1alpha1`); returns its Kubernetes version.
pub async fn api_server(client: &Client, group_version: Option<(&str, &[&str])>) -> ProbeResult {
    let version = client
        .apiserver_version()
        .await
        .map_err(|e| format!("API server unreachable: {e}"))?;
    if let Some((gv, kinds)) = group_version {
        let served = match client.list_api_group_resources(gv).await {
            Ok(list) => list
                .resources
                .into_iter()
                .map(|r| r.kind)
                .collect::<Vec<_>>(),
            Err(kube::Error::Api(e)) if e.code == 404 => Vec::new(),
            Err(e) => return Err(format!("cannot discover {gv}: {e}")),
        };
        let missing: Vec<&str> = kinds
            .iter()
            .copied()
            .filter(|k| !served.iter().any(|s| s == k))
            .collect();
        if !missing.is_empty() {
            return Err(format!(
                "{gv} kinds not installed: {}; apply the CRDs in crds/generated/",
                missing.join(", ")
            ));
        }
    }
    Ok(version.git_version)
}

/// How readiness probes are retried: 1 s doubling up to 30 s.
pub const PROBE_BACKOFF: Backoff = Backoff::new(Duration::from_secs(1), Duration::from_secs(30));

/// Runs `probe` until it passes (retried with [`PROBE_BACKOFF`]), recording each outcome as
/// readiness check `check`. Returns the probe's value, or `None` if `shutdown` came first.
pub async fn until_ready<F, Fut>(
    health: &Health,
    check: &str,
    shutdown: &CancellationToken,
    probe: F,
) -> Option<String>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = ProbeResult>,
{
    let value = until_ok(PROBE_BACKOFF, shutdown, probe, |why, retry_in| {
        tracing::warn!(check, %why, ?retry_in, "readiness check failed");
        health.set(check, Err(why.clone()));
    })
    .await?;
    health.set(check, Ok(()));
    tracing::info!(check, %value, "readiness check passed");
    Some(value)
}
